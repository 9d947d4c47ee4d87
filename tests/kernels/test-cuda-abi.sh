#!/bin/sh
# SPDX-License-Identifier: MIT
#
# include/kvpool_cuda.h against the CUDA toolkit's <cuda.h>: every
# constant, type size and structure offset kvpool declares itself must be
# the driver's (the two dumps are compared line by line), and every name
# the header declares must be in tests/kernels/cuda-abi-names.h.
# Exit 77 when there is no toolkit header (KVK_CUDA_INC, default
# /usr/local/cuda/include); with one, a missing dump is a failure.
B=${B:-build}
ours=$B/tests/kernels/cuda-abi-dump
theirs=$B/tests/kernels/cuda-abi-dump-cuda
inc=${KVK_CUDA_INC:-/usr/local/cuda/include}
if [ ! -x "$theirs" ]; then
	[ -f "$inc/cuda.h" ] ||
		{ echo "no $inc/cuda.h (no CUDA toolkit)"; exit 77; }
	echo "missing $theirs although $inc/cuda.h is there (run make)"
	exit 1
fi
[ -x "$ours" ] || { echo "missing $ours (run make)"; exit 1; }
rc=0
a=$("$ours") || exit 1
b=$("$theirs") || exit 1
if [ "$a" != "$b" ]; then
	echo "kvpool_cuda.h differs from <cuda.h>:"
	printf '%s\n' "$a" > "${TMPDIR:-/tmp}/abi-ours.$$"
	printf '%s\n' "$b" > "${TMPDIR:-/tmp}/abi-cuda.$$"
	diff "${TMPDIR:-/tmp}/abi-ours.$$" "${TMPDIR:-/tmp}/abi-cuda.$$"
	rm -f "${TMPDIR:-/tmp}/abi-ours.$$" "${TMPDIR:-/tmp}/abi-cuda.$$"
	rc=1
fi
names=tests/kernels/cuda-abi-names.h
for n in $(sed -n 's/^\t\(CU[A-Z_0-9]*\) = .*/\1/p; s/^#define \(CU_[A-Z_]*\)[ \t].*/\1/p' include/kvpool_cuda.h); do
	grep -q "($n)" "$names" || { echo "$n is not compared (add it to $names)"; rc=1; }
done
for t in $(sed -n 's/^} \(CU[A-Za-z_]*\);/\1/p; s/^typedef [a-z ]*\*\{0,1\}\(CU[a-zA-Z]*\);/\1/p; s/^typedef struct [A-Za-z_]* \*\(CU[a-z]*\);/\1/p' include/kvpool_cuda.h); do
	grep -q "S($t)" "$names" || { echo "type $t is not compared (add it to $names)"; rc=1; }
done
n=$(printf '%s\n' "$a" | wc -l)
[ $rc -eq 0 ] && echo "kvpool_cuda.h: $n values, sizes and offsets equal <cuda.h>'s"
exit $rc
