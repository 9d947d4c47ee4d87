// SPDX-License-Identifier: MIT
/* kvkern_avx2.c - attention inner loops for avx2 (see kvkern_simd.h). */
#define VW 8
#define SIMD_OPS kvk_simd_avx2
#define SIMD_NAME "avx2"
#include "kvkern_simd.h"
