// SPDX-License-Identifier: MIT
/*
 * kvkern_formats.cuh - the pool's element formats on the GPU: BF16, FP8
 * E4M3 and FP16 (the INT4 group scales) to and from FP32, the
 * power-of-two block scale and the FP8 quantiser, bit-identical to
 * kernels/kvkern.c.  One definition for the attention and write kernels
 * (kvkern_kernels.cu) and the edit kernels (kvkern_edit.cu), compiled by
 * nvcc and, with -DKVK_CUEMU, for the host emulation
 * (tests/cudafake/cuemu.h).  Every rounding is spelled out (__fmul_rn,
 * __fdiv_rn): nothing may be contracted into an FMA.
 */
#ifndef KVKERN_FORMATS_CUH
#define KVKERN_FORMATS_CUH

#include <stdint.h>
#include <math.h>

#ifndef KVK_DEV
#ifdef KVK_CUEMU
#include "cuemu.h"
#define KVK_DEV static inline
#else
#define KVK_DEV __device__ __forceinline__
#endif
#endif

KVK_DEV float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

KVK_DEV uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

KVK_DEV float fp8_to_f32(uint32_t b)
{
	uint32_t e = (b >> 3) & 15, m = b & 7, sign = (b & 0x80) << 24;

	if ((b & 0x7f) == 0x7f)
		return __uint_as_float(0x7fc00000u | sign);
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-9f));
	return __uint_as_float(sign | ((e + 120) << 23) | (m << 20));
}

KVK_DEV uint8_t f32_to_fp8(float f)
{
	uint32_t u = __float_as_uint(f);
	uint8_t sign = (u >> 24) & 0x80;
	float a = fabsf(f);

	if (isnan(f))
		return sign | 0x7f;
	if (a >= 448.0f)
		return sign | 0x7e;
	if (a < 0x1p-6f)
		return sign | (uint8_t)rintf(__fmul_rn(a, 512.0f));
	u &= 0x7fffffffu;
	u += 0x7ffffu + ((u >> 20) & 1);
	u = (u >> 20) - (120u << 3);
	if (u > 0x7e)
		u = 0x7e;
	return sign | (uint8_t)u;
}

KVK_DEV float f16_to_f32(uint16_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;

	if (e == 31)
		return __uint_as_float(sign | 0x7f800000u | (m << 13) |
				       (m ? 0x400000u : 0));
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-24f));
	return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

KVK_DEV uint16_t f32_to_f16(float f)
{
	uint32_t u = __float_as_uint(f);
	uint16_t sign = (u >> 16) & 0x8000;

	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7e00;
	if (u >= 0x477ff000u)
		return sign | 0x7c00;
	if (u < 0x38800000u)
		return sign | (uint16_t)rintf(__fmul_rn(__uint_as_float(u),
						       0x1p24f));
	u += 0xfffu + ((u >> 13) & 1);
	return sign | (uint16_t)((u - 0x38000000u) >> 13);
}

KVK_DEV float pow2_scale(float amax, float qmax)
{
	float need;
	int e;

	if (!(amax > 0.0f) || isinf(amax))
		return 0.0f;
	need = __fdiv_rn(amax, qmax);
	if (need < 0x1p-126f)
		return 0x1p-126f;
	if (frexpf(need, &e) == 0.5f)
		e--;
	if (e < -126)
		e = -126;
	return ldexpf(1.0f, e);
}

KVK_DEV uint8_t q_fp8(float x, float s)
{
	if (isnan(x))
		return f32_to_fp8(x);
	if (s == 0.0f)
		return isinf(x) ? f32_to_fp8(x) : 0;
	return f32_to_fp8(__fdiv_rn(x, s));
}

KVK_DEV float valid_scale(float s)
{
	return (isfinite(s) && s > 0.0f) ? s : 0.0f;
}

#endif /* KVKERN_FORMATS_CUH */
