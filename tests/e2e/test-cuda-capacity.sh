#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The cuda backend's default capacity is the device's free memory (at
# start, cuMemGetInfo) less --reserve-bytes, in blocks; kvpoolctl plan
# prints the same figure for the same memory (kvpoold_capacity).  A chunk
# that cannot fill whole allocation-granularity units within the capacity
# stops the daemon at start with a message saying so.
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
CTL=${CTL:-build/bin/kvpoolctl}
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
[ -x "$CTL" ] || { echo "missing $CTL (run make)"; exit 1; }
KVPOOL_LIBCUDA=$PWD/$FAKE
export KVPOOL_LIBCUDA

mem=$((6 << 30))
reserve=$((1536 << 20))
bb=1048576
KVPOOL_FAKE_CUDA_MEM=$mem "$KVPOOLD" --foreground --socket "$SOCK" \
	--ledger inproc --backend cuda --block-bytes $bb \
	--reserve-bytes $reserve >>"$DLOG" 2>&1 &
DPID=$!
i=0
until "$UTIL" status "$SOCK" >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "kvpoold did not start"
	kill -0 "$DPID" 2>/dev/null || fail "kvpoold exited at start"
	sleep 0.1
	i=$((i + 1))
done
cap=$("$UTIL" status "$SOCK" | sed -n 's/.* capacity=\([0-9]*\) .*/\1/p')
kill "$DPID"
wait "$DPID" || fail "kvpoold exit"
DPID=
plan=$("$CTL" plan --layers 1 --kv-heads 1 --head-dim 128 --gpu-mem $mem \
	--weights-bytes 0 --reserve-bytes $reserve --block-bytes $bb --json |
	sed -n 's/.*"kvpoold_capacity": \([0-9]*\).*/\1/p')
echo "free $mem bytes, reserve $reserve: kvpoold capacity $cap blocks, kvpoolctl plan $plan"
[ -n "$cap" ] && [ "$cap" = "$plan" ] || fail "capacity $cap, the plan says $plan"
[ "$cap" -eq $(((mem - reserve) / bb)) ] || fail "capacity $cap is not (free - reserve) / block"

# 192 KiB blocks need chunks of 32 blocks to fill 2 MiB units
: > "$DLOG"
KVPOOL_FAKE_CUDA_MEM=$mem "$KVPOOLD" --foreground --socket "$SOCK" \
	--ledger inproc --backend cuda --block-bytes 196608 --capacity 20 \
	>>"$DLOG" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "kvpoold started with a chunk it cannot map"
grep -q "a chunk must be a multiple of 32 blocks" "$DLOG" ||
	fail "no clear message: $(tail -n 3 "$DLOG")"
sed -n 's/.*error: //p' "$DLOG" | head -n 1
echo "PASS"
