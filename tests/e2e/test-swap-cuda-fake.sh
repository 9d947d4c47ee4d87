#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Swaps on the cuda backend against the driver test double: every dtype
# round-trips from the GPU pool through the dram tier (its chunks
# page-locked with cuMemHostRegister) and the nvme tier (staging from
# cuMemAllocHost), block sums and K/V equal after out and in (kernels
# emulated); every copy is checked by the double (context current,
# device ranges inside mapped chunks, streams alive), and the daemon
# exits with every registration, staging buffer and stream released.
. "$(dirname "$0")/lib.sh"

FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
KVPOOL_LIBCUDA=$PWD/$FAKE
KVPOOL_FAKE_CUDA_EXEC=1
KVPOOL_FAKE_CUDA_LOG=$TMP/cuda.log
export KVPOOL_LIBCUDA KVPOOL_FAKE_CUDA_EXEC KVPOOL_FAKE_CUDA_LOG
BACKEND=cuda

start_tiers_daemon
grep -q "cuda backend" "$DLOG" || fail "kvpoold did not use the cuda backend"
grep -q "tier 1: pool dram" "$DLOG" || fail "no dram tier"
"$TIERS" roundtrip "$SOCK" >"$TMP/t1.out" 2>&1 ||
	{ cat "$TMP/t1.out"; fail "roundtrip on the cuda backend"; }
cat "$TMP/t1.out"
tiers_idle
daemon_alive
grep -q "^hostreg " "$TMP/cuda.log" || fail "the dram tier was not page-locked"
kill "$DPID"
wait "$DPID"
rc=$?
DPID=
[ $rc -eq 0 ] || fail "kvpoold exited with $rc (driver resources left?)"
grep -q "VIOLATION" "$TMP/cuda.log" && fail "the test double saw a violation"
reg=$(grep -c "^hostreg " "$TMP/cuda.log")
unreg=$(grep -c "^hostunreg " "$TMP/cuda.log")
[ "$reg" -eq "$unreg" ] || fail "$reg host registrations, $unreg released"
echo "$reg host ranges page-locked and released"
echo "PASS: swaps between the GPU pool and both lower tiers"
