#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Regression run of a fuzz target: every input of tests/fuzz/corpus/<t>/
# and tests/fuzz/regressions/<t>/ once (libFuzzer -runs=0 on directories).
# A crash, a sanitizer report or a leak fails.  Exit 0 pass, 1 fail.
#   replay.sh BINARY TARGET
set -u
bin=$1 t=$2
dirs=
for d in tests/fuzz/corpus/$t tests/fuzz/regressions/$t; do
	[ -d "$d" ] && [ -n "$(ls -A "$d")" ] && dirs="$dirs $d"
done
[ -n "$dirs" ] || { echo "no corpus for $t"; exit 1; }
n=$(find $dirs -type f -exec cat {} + | wc -c)
log=$(mktemp)
# shellcheck disable=SC2086
"$bin" -runs=0 -close_fd_mask=1 $dirs >"$log" 2>&1
rc=$?
tail -n 5 "$log"
[ $rc -ne 0 ] && grep -E 'ERROR|SUMMARY|runtime error|fuzz-' "$log" | head -n 20
rm -f "$log"
echo "replay $t: $(find $dirs -type f | wc -l) inputs, $n bytes: exit $rc"
exit $rc
