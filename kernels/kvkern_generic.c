// SPDX-License-Identifier: MIT
/* kvkern_generic.c - attention inner loops for generic (see kvkern_simd.h). */
#define VW 4
#define SIMD_OPS kvk_simd_generic
#define SIMD_NAME "generic"
#include "kvkern_simd.h"
