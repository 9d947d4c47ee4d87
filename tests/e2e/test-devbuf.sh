#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The zero-copy data plane of GPU tenants against the driver test double:
# a tenant process allocates a device buffer, exports it as a file
# descriptor and passes it to kvpoold, which imports and maps it; K/V
# written from the buffer and attention with q and out in it give the
# same floats as the host-region calls and match the CPU reference
# (e2e-devbuf).  Every refusal (no descriptor, not an allocation, sizes,
# flags, too many buffers, unknown buffer) is answered with its error and
# the daemon serves on (e2e-util devbuf-bad); with the pool's granularity
# (the driver's recommended one) above the buffers' minimum, a buffer's
# size is checked against its own allocation's (e2e-util devbuf-gran).  A tenant killed with its
# buffer registered leaves nothing behind: the daemon exits with every
# import unmapped and released.  The cpu backend refuses device buffers.
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
DEVBUF=$E2E_BIN/e2e-devbuf
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
[ -x "$DEVBUF" ] || { echo "missing $DEVBUF (run make)"; exit 1; }
KVPOOL_LIBCUDA=$PWD/$FAKE
KVPOOL_FAKE_CUDA_EXEC=1
KVPOOL_FAKE_CUDA_LOG=$TMP/cuda.log
export KVPOOL_LIBCUDA KVPOOL_FAKE_CUDA_EXEC KVPOOL_FAKE_CUDA_LOG
BACKEND=cuda

start_daemon
"$DEVBUF" --socket "$SOCK" > "$TMP/t1.out" 2> "$TMP/t1.err" ||
	fail "e2e-devbuf against the cuda backend"
cat "$TMP/t1.out"
grep -q "^import fd" "$TMP/cuda.log" || fail "the daemon imported nothing"
"$UTIL" devbuf-bad "$SOCK" || fail "device-buffer refusals"
# a tenant killed with a registered buffer
"$DEVBUF" --socket "$SOCK" --hold "$TMP/held" > "$TMP/t2.out" 2>&1 &
h=$!
PIDS=$h
i=0
while [ ! -e "$TMP/held" ]; do
	[ $i -lt 100 ] || fail "holder did not register its buffer"
	sleep 0.1
	i=$((i + 1))
done
kill -9 $h
wait $h 2>/dev/null
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
daemon_alive
kill "$DPID"
wait "$DPID" || fail "kvpoold exit: imports left behind?"
DPID=

# a pool granularity (the recommended one) above the buffers' minimum:
# buffers are sized by their own allocation's granularity
KVPOOL_FAKE_CUDA_GRAN_REC=$((8 << 20))
export KVPOOL_FAKE_CUDA_GRAN_REC
: > "$DLOG"
start_daemon
"$UTIL" devbuf-gran "$SOCK" || fail "device buffers of another granularity"
daemon_alive
kill "$DPID"
wait "$DPID" || fail "kvpoold exit: imports left behind?"
DPID=
unset KVPOOL_FAKE_CUDA_GRAN_REC

# the cpu backend has no device memory
BACKEND=cpu
: > "$DLOG"
start_daemon
"$DEVBUF" --socket "$SOCK" --expect-refusal || fail "cpu backend"
echo "PASS"
