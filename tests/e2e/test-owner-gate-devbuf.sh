#!/bin/sh
# SPDX-License-Identifier: MIT
# The device-buffer ops pass the owner's gate too: WRITE_KV_DEV,
# READ_KV_DEV and ATTN_DEV looped from three connections against a due
# unmap (e2e-gate, as test-owner-gate.sh), on the cuda backend against
# the driver test double with its kernels emulated.  With the three
# taking the lock past the gate, the unmap and the other tenant's calls
# waited for the whole attack.  A latency test, run once, in the
# emulation's default order (the device-buffer ops' results are checked
# under two orders by test-devbuf.sh); 8 s an op kind, as one op of the
# emulated GPU can take seconds on a loaded machine.
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
GATE=$E2E_BIN/e2e-gate
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
[ -x "$GATE" ] || fail "missing $GATE (run make)"
KVPOOL_LIBCUDA=$PWD/$FAKE
KVPOOL_FAKE_CUDA_EXEC=1
export KVPOOL_LIBCUDA KVPOOL_FAKE_CUDA_EXEC
BACKEND=cuda

start_daemon -v --capacity 8192 --shrink-delay-ms 20 --tenant victim --tenant attack
"$GATE" "$SOCK" 8 write-dev read-dev attn-dev || fail "e2e-gate"
grep -c "shrink waits for data-plane ops" "$DLOG" |
	sed 's/^/unmaps that closed the gate: /'
daemon_alive
