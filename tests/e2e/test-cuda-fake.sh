#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoold's cuda backend against the driver test double
# (tests/cudafake/libcuda.so.1), kernels run by the host emulation of the
# CUDA execution model: the four tenants of test-multi-tenant (bf16, fp8,
# int8, int4 layouts, writes, fork, decode and multi-token attention, all
# compared with the CPU reference), one of them killed mid-run; device
# memory follows the leases up and back to zero chunks; a grow the device
# cannot serve (cuMemCreate failing) gives -ENOMEM and the daemon serves
# on; the daemon exits cleanly on SIGTERM with every driver resource freed
# (the double checks at exit and fails the exit status otherwise).
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

start_daemon --spare-chunks 2
grep -q "cuda backend" "$DLOG" || fail "kvpoold did not use the cuda backend"
"$UTIL" wait-mapped "$SOCK" 0 3000 || fail "idle daemon has chunks mapped"

tenants_start
tenant_run 5 --dtype bf16 --hold-ms 100000 &
hold=$!
PIDS="$pids $hold"
sleep 1
kill -9 $hold 2>/dev/null
# shellcheck disable=SC2086
wait_pids_ok $pids || fail "a tenant failed against the cuda backend"
cat "$TMP"/t[1-4].out
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
"$UTIL" wait-mapped "$SOCK" 0 5000 || fail "chunks not unmapped after the delay"
n=$(grep -c "^launch kvk_attn" "$TMP/cuda.log")
[ "$n" -gt 0 ] || fail "no attention launch recorded"
grep -q "^map " "$TMP/cuda.log" || fail "no chunk mapped"
grep -q "^unmap " "$TMP/cuda.log" || fail "no chunk unmapped"
echo "$n attention launches checked and emulated; chunks mapped and unmapped"
daemon_alive
kill "$DPID"
wait "$DPID"
rc=$?
DPID=
[ $rc -eq 0 ] || fail "kvpoold exited with $rc (driver resources left?)"
grep -q "VIOLATION" "$TMP/cuda.log" && fail "the test double saw a violation"

# a grow the device cannot serve: the third cuMemCreate and later fail
: > "$DLOG"
KVPOOL_FAKE_CUDA_FAIL=cuMemCreate=3+ start_daemon --spare-chunks 0
"$UTIL" nomem "$SOCK" 64 || fail "a failed cuMemCreate did not give -ENOMEM"
daemon_alive
kill "$DPID"
wait "$DPID" || fail "kvpoold did not exit cleanly after failed grows"
DPID=
echo "PASS"
