#!/bin/sh
# SPDX-License-Identifier: MIT
# The device-buffer ops pass the owner's gate too: WRITE_KV_DEV,
# READ_KV_DEV and ATTN_DEV looped from three connections against a due
# unmap (e2e-gate, as test-owner-gate.sh), on the cuda backend against
# the driver test double with its kernels emulated.  With the three
# taking the lock past the gate, the unmap and the other tenant's calls
# waited for the whole attack.  Under two orders of the emulation
# (emu_orders): forward with 8 s an op kind, as one op of the emulated GPU
# can take seconds on a loaded machine; random (seed CUEMU_SEED, default
# 1), whose point is the order of the threads and streams' work, not the
# latency, with 3 s an op kind (or any order CUEMU_ORDER names, once).
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
GATE=$E2E_BIN/e2e-gate
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
[ "$CUEMU_ORDER" = forward ] && SECS=8 || SECS=3
[ -x "$GATE" ] || fail "missing $GATE (run make)"
KVPOOL_LIBCUDA=$PWD/$FAKE
KVPOOL_FAKE_CUDA_EXEC=1
export KVPOOL_LIBCUDA KVPOOL_FAKE_CUDA_EXEC
BACKEND=cuda

start_daemon -v --capacity 8192 --shrink-delay-ms 20 --tenant victim --tenant attack
"$GATE" "$SOCK" $SECS write-dev read-dev attn-dev || fail "e2e-gate"
grep -c "shrink waits for data-plane ops" "$DLOG" |
	sed 's/^/unmaps that closed the gate: /'
daemon_alive
