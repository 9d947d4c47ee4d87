// SPDX-License-Identifier: MIT
/*
 * cuda-abi-dump.c - print every constant, size and offset named in
 * cuda-abi-names.h, one per line.  Built twice by tests/kernels/
 * kernels-tests.mk: against include/kvpool_cuda.h and, with
 * -DKVT_CUDA_H, against the toolkit's <cuda.h>; test-cuda-abi.sh
 * compares the two outputs.
 */
#include <stddef.h>
#include <stdio.h>

#ifdef KVT_CUDA_H
#include <cuda.h>
#else
#include "kvpool_cuda.h"
#endif

#define V(n) printf("%s %lld\n", #n, (long long)(n));
#define P(n) printf("%s %lld\n", #n, (long long)(size_t)(n));
#define S(t) printf("sizeof(%s) %zu\n", #t, sizeof(t));
#define O(t, m) printf("offsetof(%s, %s) %zu\n", #t, #m, offsetof(t, m));

int main(void)
{
#include "cuda-abi-names.h"
	return 0;
}
