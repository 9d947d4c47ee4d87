#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvd_chunks_fini with a failing unmap, against the driver test double
# (the first cuMemUnmap fails): the chunk that stays mapped must keep its
# handle (no cuMemRelease of it) and the reservation must stay (no
# cuMemAddressFree, which the driver refuses while something is mapped);
# the other chunk is unmapped and released.  The double then reports the
# stuck mapping, handle and reservation at exit (status 97), as it
# should: they are left to the context.  Exit 77 only without nvcc (the
# double is not built).
B=${B:-build}
fake=$B/tests/cudafake/libcuda.so.1
prog=$B/tests/gpu/test-kvd-chunks-fini
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$fake"
[ -x "$prog" ] || { echo "FAIL: missing $prog (run make)"; exit 1; }
log=$(mktemp /tmp/kvpool-chunks-fini.XXXXXX) || exit 1
out=$(mktemp /tmp/kvpool-chunks-fini.XXXXXX) || exit 1
trap 'rm -f "$log" "$out"' EXIT
KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_LOG=$log \
KVPOOL_FAKE_CUDA_FAIL=cuMemUnmap=1:1 "$prog" > "$out" 2>&1
rc=$?
cat "$out"
fail() { echo "FAIL: $*"; echo "-- driver log:"; cat "$log"; exit 1; }
grep -q "^fini done" "$out" || fail "the program did not finish (exit $rc)"
[ $rc -eq 97 ] || fail "exit $rc, want 97 (the stuck chunk reported at exit)"
grep -q "VIOLATION [a-zA-Z]*:" "$log" && fail "the double saw a broken rule"
# the handles mapped at the two chunks, in map order
h0=$(sed -n 's/^map .* handle \([0-9]*\)$/\1/p' "$log" | sed -n 1p)
h1=$(sed -n 's/^map .* handle \([0-9]*\)$/\1/p' "$log" | sed -n 2p)
[ -n "$h0" ] && [ -n "$h1" ] || fail "two chunks were not mapped"
grep -q "^inject cuMemUnmap call 1" "$log" || fail "no unmap failed"
grep -q "^release $h0\$" "$log" && fail "handle $h0 released while mapped"
grep -q "^release $h1\$" "$log" || fail "handle $h1 (unmapped) not released"
grep -q "^unreserve " "$log" && fail "the reservation freed with a mapping in it"
grep -q "leak at exit: \[.*still mapped" "$out" ||
	fail "the double did not report the stuck mapping at exit"
echo "PASS: the stuck chunk keeps its handle and the reservation"
