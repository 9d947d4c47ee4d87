#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The cuda backend's kept chunks against the driver test double
# (test-cuda-keep.c says what each process proves), with two fake devices
# (a descriptor of the other one's memory is refused); then a map that
# fails (the third cuMemCreate) after it took kept chunks back, and a
# device that cannot export (KVPOOL_FAKE_CUDA_POSIX_FD=0: nothing kept).
# The double's logs show the rest: no broken rule; the writer's chunks
# exported, their memory lingering for the kept descriptors after its
# handles went (fini), never freed; the reader importing every chunk and
# creating none, its shrink freeing them; the smaller allocation's map
# refused by the driver; no export on the device that cannot.  Exit 77
# only without nvcc (the double is not built).
B=${B:-build}
fake=$B/tests/cudafake/libcuda.so.1
prog=$B/tests/gpu/test-cuda-keep
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$fake"
[ -x "$prog" ] || { echo "FAIL: missing $prog (run make)"; exit 1; }
dir=$(mktemp -d /tmp/kvpool-cuda-keep.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
log=$dir/log
fail() { echo "FAIL: $*"; for f in "$dir"/log.*; do echo "-- $f:"; cat "$f"; done; exit 1; }
count() { grep -c "$1" "$2"; }

KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_DEVICES=2 KVPOOL_FAKE_CUDA_LOG=$log \
	"$prog" || fail "test-cuda-keep exited $?"
for m in writer reader refuse; do
	[ -s "$log.$m" ] || fail "no driver log of the $m"
	grep -q "VIOLATION" "$log.$m" && fail "the $m broke a driver rule"
done
w=$log.writer r=$log.reader f=$log.refuse
[ "$(count '^export ' "$w")" -eq 4 ] || fail "the writer exported $(count '^export ' "$w") chunks, want 4"
[ "$(count '^linger ' "$w")" -eq 4 ] ||
	fail "the writer's released chunks did not stay for the kept descriptors"
[ "$(count '^kept fd ' "$w")" -eq 4 ] ||
	fail "the writer's driver did not go with 4 kept descriptors open"
[ "$(count '^free ' "$w")" -eq 0 ] || fail "the writer's driver freed kept chunks"
[ "$(count '^import fd .* -> ' "$r")" -eq 4 ] || fail "the reader did not import 4 chunks"
[ "$(count '^create ' "$r")" -eq 0 ] || fail "the reader created chunks instead of importing them"
[ "$(count '^free ' "$r")" -eq 4 ] || fail "the reader's shrink did not free 4 chunks"
grep -q '^map of .* import refused' "$f" || fail "no map of the smaller allocation was refused"
grep -q '^import fd .*: not an exported allocation' "$f" ||
	fail "the descriptor of no allocation was imported"

KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_FAIL=cuMemCreate=3 \
KVPOOL_FAKE_CUDA_LOG=$log.retry "$prog" retry || fail "test-cuda-keep retry exited $?"
grep -q "VIOLATION" "$log.retry" && fail "retry broke a driver rule"
grep -q '^inject cuMemCreate call 3' "$log.retry" || fail "no cuMemCreate failed in retry"

KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_POSIX_FD=0 KVPOOL_FAKE_CUDA_LOG=$log.nofd \
	"$prog" nofd || fail "test-cuda-keep nofd exited $?"
grep -q "VIOLATION" "$log.nofd" && fail "nofd broke a driver rule"
grep -q '^export ' "$log.nofd" && fail "a chunk was exported by a device that cannot"
grep -q '^create ' "$log.nofd" || fail "nofd created no chunk"
echo "PASS: kept chunks against the driver test double"
