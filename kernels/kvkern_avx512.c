// SPDX-License-Identifier: MIT
/* kvkern_avx512.c - attention inner loops for avx512 (see kvkern_simd.h). */
#define VW 16
#define SIMD_OPS kvk_simd_avx512
#define SIMD_NAME "avx512"
#include "kvkern_simd.h"
