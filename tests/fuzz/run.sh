#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Fuzz one target for a while (make fuzz): a working corpus under
# DIR/work/<t> seeded from tests/fuzz/corpus/<t> (new inputs go there; the
# tree is not changed), crashes under DIR/crash/<t>.  Prints libFuzzer's
# last status line (executions, exec/s, coverage).  A crash fails: keep its
# input in tests/fuzz/regressions/<t>/ once fixed.
#   run.sh DIR TARGET SECONDS [JOBS]
set -u
dir=$1 t=$2 secs=$3 jobs=${4:-1}
work=$dir/work/$t crash=$dir/crash/$t
mkdir -p "$work" "$crash"
echo "fuzz $t: $secs s (corpus $work, crashes $crash)"
seeds=$(pwd)/tests/fuzz/corpus/$t
par=
# Several processes write fuzz-N.log into the current directory: run there.
[ "$jobs" -gt 1 ] && par="-jobs=$jobs -workers=$jobs"
# shellcheck disable=SC2086
(cd "$dir" && exec "./fuzz-$t" -max_total_time="$secs" $par \
	-artifact_prefix="crash/$t/" -close_fd_mask=3 -print_final_stats=1 \
	"work/$t" "$seeds") >"$dir/fuzz-$t.log" 2>&1
rc=$?
grep -E '^#[0-9]+' "$dir/fuzz-$t.log" | tail -n 1
grep -E '^stat::' "$dir/fuzz-$t.log"
if [ $rc -ne 0 ] || ls "$crash" | grep -q .; then
	echo "fuzz $t: FAILED (exit $rc); see $dir/fuzz-$t.log and $crash/"
	grep -E 'ERROR|SUMMARY|fuzz-' "$dir/fuzz-$t.log" | head -n 20
	exit 1
fi
