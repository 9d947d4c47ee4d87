#!/bin/sh
# SPDX-License-Identifier: MIT
# The device-buffer ops pass the owner's gate too: WRITE_KV_DEV,
# READ_KV_DEV and ATTN_DEV looped from three connections against a due
# unmap (e2e-gate, as test-owner-gate.sh), on the cuda backend against
# the driver test double with its kernels emulated.  With the three
# taking the lock past the gate, the unmap and the other tenant's calls
# waited for the whole attack.  Under two orders of the emulation
# (emu_orders): forward and random (seed CUEMU_SEED, default 1), or any
# order CUEMU_ORDER names, once.  8 s an op kind in either; e2e-gate
# bounds the victim's wait by half the attack (2 s at least), and a real
# stall lasts the whole attack.  The victim's writes go through the cuda
# backend's lock too, which the attackers' kernels hold: it is taken in
# turn (daemon/turn_lock.h), so the victim waits for one op of each.
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
GATE=$E2E_BIN/e2e-gate
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
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
