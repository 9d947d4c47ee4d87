// SPDX-License-Identifier: MIT
/*
 * kvkern_avx512bf16.c - attention inner loops for avx512 with AVX512-BF16,
 * AVX512-VBMI and AVX512-VNNI: BF16, FP8 and INT8 caches with head_dim a
 * multiple of 64 and INT4 caches with head_dim 64, 128 or 256 take
 * kvkern_dpbf16.h, other shapes the avx512 loops of kvkern_simd.h.
 */
#define VW 16
#define KVK_DPBF16 1
#define SIMD_OPS kvk_simd_avx512bf16
#define SIMD_NAME "avx512bf16"
#include "kvkern_simd.h"
