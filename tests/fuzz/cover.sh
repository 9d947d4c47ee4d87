#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Line coverage of a target's corpus (make fuzz-cover): the coverage build
# (-fprofile-instr-generate -fcoverage-mapping) replays the tree's corpus,
# the regressions and the working corpus of make fuzz, if any; llvm-cov
# reports the lines of the files the target is about.
#   cover.sh DIR TARGET FILE...
set -u
dir=$1 t=$2
shift 2
prof=$dir/cover/$t.profraw
data=$dir/cover/$t.profdata
dirs=
for d in tests/fuzz/corpus/$t tests/fuzz/regressions/$t $dir/work/$t; do
	[ -d "$d" ] && [ -n "$(ls -A "$d")" ] && dirs="$dirs $d"
done
LLVM_PROFILE_FILE=$prof "$dir/cover/fuzz-$t" -runs=0 -close_fd_mask=3 $dirs >/dev/null 2>&1 ||
	{ echo "cover $t: replay failed"; exit 1; }
llvm-profdata merge -sparse "$prof" -o "$data" || exit 1
echo "== $t: $(find $dirs -type f | wc -l) inputs"
llvm-cov report "$dir/cover/fuzz-$t" -instr-profile="$data" "$@"
