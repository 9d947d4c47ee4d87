// SPDX-License-Identifier: MIT
/*
 * kvkern_kernels.cu - CUDA twins of the CPU kernels (kernels/kvkern.c,
 * kernels/kvkern_simd.h): same block layout, same element formats, same
 * quantisation and scale rule, FP32 accumulation.  Built into
 * kvpool_kernels.fatbin and launched through the driver API by
 * kernels/kvkern_cuda.c; every entry point takes one parameter block
 * (kernels/kvkern_cuda_abi.h) by value.
 *
 * Attention: one CTA per (kv head, sequence x query block, split).  Each
 * group of LPT = head_dim / 8 lanes owns one position at a time, each lane
 * 8 elements of it: the K row is loaded once and dotted with all R query
 * rows of the kv head's group (GQA read once), the V row is loaded once
 * and accumulated into all R outputs.  Lane groups, then warps, merge
 * their (max, sum, output) states; splits are merged by kvk_merge.
 */
#include <stdint.h>
#include <math.h>

#include "kvkern_cuda_abi.h"

#define KVK_BF16 1
#define KVK_FP8 2
#define KVK_INT8 3
#define KVK_INT4 4

/* ---- element formats (bit-identical to kernels/kvkern.c) ---- */

__device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float fp8_to_f32(uint32_t b)
{
	uint32_t e = (b >> 3) & 15, m = b & 7, sign = (b & 0x80) << 24;

	if ((b & 0x7f) == 0x7f)
		return __uint_as_float(0x7fc00000u | sign);
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-9f));
	return __uint_as_float(sign | ((e + 120) << 23) | (m << 20));
}

__device__ __forceinline__ uint8_t f32_to_fp8(float f)
{
	uint32_t u = __float_as_uint(f);
	uint8_t sign = (u >> 24) & 0x80;
	float a = fabsf(f);

	if (isnan(f))
		return sign | 0x7f;
	if (a >= 448.0f)
		return sign | 0x7e;
	if (a < 0x1p-6f)
		return sign | (uint8_t)rintf(a * 512.0f);
	u &= 0x7fffffffu;
	u += 0x7ffffu + ((u >> 20) & 1);
	u = (u >> 20) - (120u << 3);
	if (u > 0x7e)
		u = 0x7e;
	return sign | (uint8_t)u;
}

__device__ __forceinline__ float f16_to_f32(uint16_t h)
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

__device__ __forceinline__ uint16_t f32_to_f16(float f)
{
	uint32_t u = __float_as_uint(f);
	uint16_t sign = (u >> 16) & 0x8000;

	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7e00;
	if (u >= 0x477ff000u)
		return sign | 0x7c00;
	if (u < 0x38800000u)
		return sign | (uint16_t)rintf(__uint_as_float(u) * 0x1p24f);
	u += 0xfffu + ((u >> 13) & 1);
	return sign | (uint16_t)((u - 0x38000000u) >> 13);
}

__device__ __forceinline__ float pow2_scale(float amax, float qmax)
{
	float need;
	int e;

	if (!(amax > 0.0f) || isinf(amax))
		return 0.0f;
	need = amax / qmax;
	if (need < 0x1p-126f)
		return 0x1p-126f;
	if (frexpf(need, &e) == 0.5f)
		e--;
	if (e < -126)
		e = -126;
	return ldexpf(1.0f, e);
}

__device__ __forceinline__ uint8_t q_fp8(float x, float s)
{
	if (isnan(x))
		return f32_to_fp8(x);
	if (s == 0.0f)
		return isinf(x) ? f32_to_fp8(x) : 0;
	return f32_to_fp8(x / s);
}

__device__ __forceinline__ int q_int(float x, float s, float qmax)
{
	float q;

	if (isnan(x))
		return 0;
	if (isinf(x))
		return x > 0 ? (int)qmax : -(int)qmax;
	if (s == 0.0f)
		return 0;
	q = rintf(x / s);
	q = fminf(fmaxf(q, -qmax), qmax);
	return (int)q;
}

__device__ __forceinline__ float valid_scale(float s)
{
	return (isfinite(s) && s > 0.0f) ? s : 0.0f;
}

/* ---- layout ---- */

__device__ __forceinline__ uint64_t row_off(const kvk_cu_layout &l,
					    uint32_t kv, uint32_t head,
					    uint32_t tok)
{
	uint64_t plane = ((uint64_t)l.layer * 2 + kv) * l.kv_heads + head;

	return plane * l.plane_bytes + (uint64_t)tok * l.row_bytes;
}

__device__ __forceinline__ uint64_t scale_off(const kvk_cu_layout &l,
					      uint32_t kv, uint32_t head,
					      uint32_t tok)
{
	uint64_t plane = ((uint64_t)l.layer * 2 + kv) * l.kv_heads + head;

	if (l.dtype == KVK_INT4)
		return l.meta_offset + (plane * l.tokens_per_block + tok) *
		       (l.head_dim / 32) * 2;
	return l.meta_offset + plane * 4;
}

/* element d of a row, dequantised (with the block scale s, or the INT4
 * group scales at gs) */
__device__ __forceinline__ float load_elem(uint32_t dtype, const uint8_t *row,
					   uint32_t d, float s,
					   const uint8_t *gs)
{
	switch (dtype) {
	case KVK_BF16:
		return bf16_to_f32(((const uint16_t *)row)[d]);
	case KVK_FP8:
		return fp8_to_f32(row[d]) * s;
	case KVK_INT8:
		return (float)(int8_t)row[d] * s;
	default: {
		int q = (row[d / 2] >> ((d & 1) * 4)) & 15;

		if (q & 8)
			q -= 16;
		return (float)q * f16_to_f32(((const uint16_t *)gs)[d / 32]);
	}
	}
}

/* ---- write ---- */

__device__ __forceinline__ float in_elem(const kvk_cu_write &p, uint32_t kv,
					 uint32_t tok, uint32_t head,
					 uint32_t d)
{
	uint64_t i = ((uint64_t)tok * p.l.kv_heads + head) * p.l.head_dim + d;

	if (p.bf16_in)
		return bf16_to_f32(((const uint16_t *)(kv ? p.v : p.k))[i]);
	return ((const float *)(kv ? p.v : p.k))[i];
}

extern "C" __global__ void kvk_write(const kvk_cu_write p)
{
	const kvk_cu_layout &l = p.l;
	const uint32_t g = blockIdx.x, kv = blockIdx.y / l.kv_heads;
	const uint32_t head = blockIdx.y % l.kv_heads, D = l.head_dim;
	const uint32_t *tok_idx = (const uint32_t *)p.tok_idx;
	const uint32_t *slots = (const uint32_t *)p.slots;
	const uint32_t i0 = ((const uint32_t *)p.grp_start)[g];
	const uint32_t i1 = ((const uint32_t *)p.grp_start)[g + 1];
	uint8_t *blk = (uint8_t *)p.pool +
		       (uint64_t)((const uint32_t *)p.grp_block)[g] * l.block_bytes;
	__shared__ float red[KVK_CU_THREADS];
	__shared__ float s_sh, s_old_sh;
	__shared__ int grow_sh;
	uint32_t i, d, tid = threadIdx.x;

	if (l.dtype == KVK_BF16) {
		for (d = tid; d < D; d += blockDim.x)
			for (i = i0; i < i1; i++) {
				uint32_t t = tok_idx[i];
				uint16_t *row = (uint16_t *)(blk +
					row_off(l, kv, head, slots[t]));

				row[d] = f32_to_bf16(in_elem(p, kv, t, head, d));
			}
		return;
	}
	if (l.dtype == KVK_INT4) {
		for (uint32_t gr = tid; gr < D / 32; gr += blockDim.x)
			for (i = i0; i < i1; i++) {
				uint32_t t = tok_idx[i], slot = slots[t];
				uint8_t *row = blk + row_off(l, kv, head, slot);
				uint16_t *sp = (uint16_t *)(blk +
					scale_off(l, kv, head, slot));
				float amax = 0.0f, x[32], gsf;
				uint16_t h;

				for (d = 0; d < 32; d++) {
					x[d] = in_elem(p, kv, t, head, gr * 32 + d);
					if (isfinite(x[d]) && fabsf(x[d]) > amax)
						amax = fabsf(x[d]);
				}
				h = f32_to_f16(amax / 7.0f);
				if ((h & 0x7fff) >= 0x7c00)
					h = 0x7bff;
				gsf = f16_to_f32(h);
				sp[gr] = h;
				for (d = 0; d < 32; d += 2) {
					int lo = q_int(x[d], gsf, 7.0f);
					int hi = q_int(x[d + 1], gsf, 7.0f);

					row[(gr * 32 + d) / 2] =
						(uint8_t)((lo & 15) | ((hi & 15) << 4));
				}
			}
		return;
	}

	/* FP8 / INT8: block scale rule */
	{
		const float qmax = l.dtype == KVK_FP8 ? 448.0f : 127.0f;
		float amax = 0.0f;
		int fresh = 0;

		for (i = i0; i < i1; i++) {
			uint32_t t = tok_idx[i];

			if (slots[t] == 0 && !(p.flags & 1))	/* MERGE */
				fresh = 1;
			for (d = tid; d < D; d += blockDim.x) {
				float x = in_elem(p, kv, t, head, d);

				if (isfinite(x) && fabsf(x) > amax)
					amax = fabsf(x);
			}
		}
		red[tid] = amax;
		__syncthreads();
		for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
			if (tid < s)
				red[tid] = fmaxf(red[tid], red[tid + s]);
			__syncthreads();
		}
		if (tid == 0) {
			float s_need = pow2_scale(red[0], qmax);
			float s_old = valid_scale(*(const float *)(blk +
					scale_off(l, kv, head, 0)));

			s_old_sh = s_old;
			grow_sh = 0;
			if (fresh) {
				s_sh = s_need;
			} else if (s_need > s_old) {
				s_sh = s_need;
				grow_sh = 1;
			} else {
				s_sh = s_old;
			}
		}
		__syncthreads();
		if (grow_sh) {
			uint32_t n = l.tokens_per_block * D;
			uint8_t *plane = blk + row_off(l, kv, head, 0);

			for (uint32_t e = tid; e < n; e += blockDim.x) {
				float x;

				if (s_old_sh == 0.0f) {
					plane[e] = 0;
					continue;
				}
				if (l.dtype == KVK_FP8) {
					if ((plane[e] & 0x7f) == 0x7f)
						continue;	/* NaN kept */
					x = fp8_to_f32(plane[e]) * s_old_sh;
					plane[e] = q_fp8(x, s_sh);
				} else {
					x = (float)(int8_t)plane[e] * s_old_sh;
					plane[e] = (uint8_t)(int8_t)q_int(x, s_sh,
									  127.0f);
				}
			}
		}
		__syncthreads();
		if (tid == 0)
			*(float *)(blk + scale_off(l, kv, head, 0)) = s_sh;
		for (d = tid; d < D; d += blockDim.x)
			for (i = i0; i < i1; i++) {
				uint32_t t = tok_idx[i];
				uint8_t *row = blk + row_off(l, kv, head, slots[t]);
				float x = in_elem(p, kv, t, head, d);

				if (l.dtype == KVK_FP8)
					row[d] = q_fp8(x, s_sh);
				else
					row[d] = (uint8_t)(int8_t)q_int(x, s_sh,
									127.0f);
			}
	}
}

/* ---- read ---- */

extern "C" __global__ void kvk_read(const kvk_cu_read p)
{
	const kvk_cu_layout &l = p.l;
	const uint32_t t = blockIdx.x, kv = blockIdx.y / l.kv_heads;
	const uint32_t head = blockIdx.y % l.kv_heads, D = l.head_dim;
	const uint32_t slot = ((const uint32_t *)p.slots)[t];
	const uint8_t *blk = (const uint8_t *)p.pool +
		(uint64_t)((const uint32_t *)p.blocks)[t] * l.block_bytes;
	const uint8_t *row = blk + row_off(l, kv, head, slot);
	const uint8_t *gs = blk + scale_off(l, kv, head, slot);
	float s = l.dtype == KVK_FP8 || l.dtype == KVK_INT8 ?
		  *(const float *)gs : 1.0f;
	float *dst = (float *)(kv ? p.v : p.k);

	for (uint32_t d = threadIdx.x; d < D; d += blockDim.x)
		dst[((uint64_t)t * l.kv_heads + head) * D + d] =
			load_elem(l.dtype, row, d, s, gs);
}

/* ---- attention ---- */

/* 8 consecutive elements of a row, dequantised without the block scale
 * (INT4: with its group scale) */
template <int DT>
__device__ __forceinline__ void load8(const uint8_t *row, uint32_t e0,
				      const uint8_t *gs, float *x)
{
	if (DT == KVK_BF16) {
		uint4 u = *(const uint4 *)(row + 2 * e0);
		uint32_t w[4] = { u.x, u.y, u.z, u.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			x[2 * i] = __uint_as_float(w[i] << 16);
			x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
	} else if (DT == KVK_FP8) {
		uint2 u = *(const uint2 *)(row + e0);
		uint32_t w[2] = { u.x, u.y };

#pragma unroll
		for (int i = 0; i < 8; i++)
			x[i] = fp8_to_f32((w[i / 4] >> (8 * (i % 4))) & 0xff);
	} else if (DT == KVK_INT8) {
		uint2 u = *(const uint2 *)(row + e0);
		uint32_t w[2] = { u.x, u.y };

#pragma unroll
		for (int i = 0; i < 8; i++)
			x[i] = (float)(int8_t)((w[i / 4] >> (8 * (i % 4))) & 0xff);
	} else {
		uint32_t w = *(const uint32_t *)(row + e0 / 2);
		float s = f16_to_f32(((const uint16_t *)gs)[e0 / 32]);

#pragma unroll
		for (int i = 0; i < 8; i++) {
			int q = (w >> (4 * i)) & 15;

			x[i] = (float)(q & 8 ? q - 16 : q) * s;
		}
	}
}

struct rstate {
	float m, l;
};

template <int DT, int D, int RM>
__device__ __forceinline__ void attn(const kvk_cu_attn &p)
{
	constexpr int LPT = D / 8;		/* lanes per position */
	constexpr int TPW = 32 / LPT;		/* positions per warp step */
	constexpr int NW = KVK_CU_THREADS / 32;
	const kvk_cu_layout &l = p.l;
	const uint32_t h = blockIdx.x, seq = blockIdx.y / p.nqb;
	const uint32_t qblk = blockIdx.y % p.nqb, split = blockIdx.z;
	const uint32_t n_q1 = p.n_q ? p.n_q : 1, G = p.group;
	const uint32_t q0 = qblk * p.qb;
	const uint32_t nq = min(p.qb, n_q1 - q0);
	const uint32_t R = nq * G, T = l.tokens_per_block;
	const uint32_t ctx = ((const uint32_t *)p.ctx)[seq];
	const uint32_t end = p.n_q ? ctx - p.n_q + q0 + nq : ctx;
	const uint32_t t0 = split * p.chunk;
	const uint32_t t1 = min(end, t0 + p.chunk);
	const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t sub = lane / LPT, part = lane % LPT, e0 = part * 8;
	const uint32_t *table = (const uint32_t *)p.tables +
				(uint64_t)seq * p.mbps;
	const uint64_t koff = row_off(l, 0, h, 0), voff = row_off(l, 1, h, 0);
	float qv[RM][8], acc[RM][8];
	rstate st[RM];
	__shared__ float sm_acc[RM][D];
	__shared__ float sm_m[RM], sm_l[RM];
	int lim[RM];

#pragma unroll
	for (int r = 0; r < RM; r++) {
		st[r].m = -INFINITY;
		st[r].l = 0.0f;
		lim[r] = -1;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			acc[r][i] = 0.0f;
			qv[r][i] = 0.0f;
		}
		if (r < (int)R) {
			uint32_t qi = q0 + r / G, hq = h * G + r % G;
			const float *q = (const float *)p.q +
				(((uint64_t)seq * n_q1 + qi) * p.q_heads + hq) * D;

#pragma unroll
			for (int i = 0; i < 8; i++)
				qv[r][i] = q[e0 + i] * p.scale;
			lim[r] = p.n_q ? (int)(ctx - p.n_q + qi) : (int)ctx - 1;
		}
	}

	for (uint32_t base = t0 + warp * TPW; base < t1; base += NW * TPW) {
		const uint32_t t = base + sub;
		const bool valid = t < t1;
		float kx[8], vx[8], sk = 1.0f, sv = 1.0f;

		if (valid) {
			const uint8_t *blk = (const uint8_t *)p.pool +
				(uint64_t)table[t / T] * l.block_bytes;
			const uint32_t slot = t % T;
			const uint8_t *kgs = nullptr, *vgs = nullptr;

			if (DT == KVK_FP8 || DT == KVK_INT8) {
				sk = *(const float *)(blk + scale_off(l, 0, h, 0));
				sv = *(const float *)(blk + scale_off(l, 1, h, 0));
			}
			if (DT == KVK_INT4) {
				kgs = blk + scale_off(l, 0, h, slot);
				vgs = blk + scale_off(l, 1, h, slot);
			}
			load8<DT>(blk + koff + (uint64_t)slot * l.row_bytes, e0,
				  kgs, kx);
			load8<DT>(blk + voff + (uint64_t)slot * l.row_bytes, e0,
				  vgs, vx);
		} else {
#pragma unroll
			for (int i = 0; i < 8; i++)
				kx[i] = vx[i] = 0.0f;
		}
#pragma unroll
		for (int i = 0; i < 8; i++)
			vx[i] *= sv;
#pragma unroll
		for (int r = 0; r < RM; r++) {
			float s = 0.0f;

			if (r >= (int)R)
				break;
#pragma unroll
			for (int i = 0; i < 8; i++)
				s += qv[r][i] * kx[i];
#pragma unroll
			for (int off = LPT / 2; off > 0; off >>= 1)
				s += __shfl_xor_sync(0xffffffffu, s, off);
			s *= sk;
			if (valid && (int)t <= lim[r]) {
				float mn = fmaxf(st[r].m, s), c, pr;

				if (s != s)
					mn = s;
				c = st[r].m == -INFINITY ? 0.0f :
				    __expf(st[r].m - mn);
				pr = __expf(s - mn);
				st[r].m = mn;
				st[r].l = st[r].l * c + pr;
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[r][i] = acc[r][i] * c + pr * vx[i];
			}
		}
	}

	/* merge the lane groups of this warp (same part, different sub) */
#pragma unroll
	for (int off = LPT; off < 32; off <<= 1) {
#pragma unroll
		for (int r = 0; r < RM; r++) {
			float om = __shfl_xor_sync(0xffffffffu, st[r].m, off);
			float ol = __shfl_xor_sync(0xffffffffu, st[r].l, off);
			float M = fmaxf(st[r].m, om), a, b;

			if (M == -INFINITY) {
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[r][i] += __shfl_xor_sync(0xffffffffu,
								     acc[r][i], off);
				continue;
			}
			a = st[r].m == -INFINITY ? 0.0f : __expf(st[r].m - M);
			b = om == -INFINITY ? 0.0f : __expf(om - M);
#pragma unroll
			for (int i = 0; i < 8; i++) {
				float oa = __shfl_xor_sync(0xffffffffu,
							   acc[r][i], off);

				acc[r][i] = acc[r][i] * a + oa * b;
			}
			st[r].l = st[r].l * a + ol * b;
			st[r].m = M;
		}
	}

	/* merge the warps through shared memory, one warp at a time */
	for (uint32_t w = 0; w < NW; w++) {
		if (warp == w && sub == 0) {
#pragma unroll
			for (int r = 0; r < RM; r++) {
				if (r >= (int)R)
					break;
				if (w == 0) {
					if (part == 0) {
						sm_m[r] = st[r].m;
						sm_l[r] = st[r].l;
					}
#pragma unroll
					for (int i = 0; i < 8; i++)
						sm_acc[r][e0 + i] = acc[r][i];
				} else {
					float om = sm_m[r], ol = sm_l[r];
					float M = fmaxf(st[r].m, om), a, b;

					a = st[r].m == -INFINITY ? 0.0f :
					    __expf(st[r].m - M);
					b = om == -INFINITY ? 0.0f :
					    __expf(om - M);
					if (M == -INFINITY)
						a = b = 1.0f;
					__syncwarp(0xffffffffu >> (32 - LPT));
#pragma unroll
					for (int i = 0; i < 8; i++)
						sm_acc[r][e0 + i] =
							acc[r][i] * a +
							sm_acc[r][e0 + i] * b;
					__syncwarp(0xffffffffu >> (32 - LPT));
					if (part == 0) {
						sm_m[r] = M;
						sm_l[r] = st[r].l * a + ol * b;
					}
				}
			}
		}
		__syncthreads();
	}

	{
		const uint64_t pidx = (((uint64_t)seq * p.nqb + qblk) *
				       l.kv_heads + h) * p.nsplit + split;
		float *out = (float *)p.parts +
			     pidx * (uint64_t)p.qb * G * (D + 2);

		for (uint32_t x = threadIdx.x; x < R * (D + 2);
		     x += blockDim.x) {
			uint32_t r = x / (D + 2), c = x % (D + 2);

			out[x] = c == 0 ? sm_m[r] : c == 1 ? sm_l[r] :
				 sm_acc[r][c - 2];
		}
	}
}

#define ATTN(DTN, DT, D, RM) \
	extern "C" __global__ void __launch_bounds__(KVK_CU_THREADS) \
	kvk_attn_##DTN##_d##D##_r##RM(const kvk_cu_attn p) \
	{ \
		attn<DT, D, RM>(p); \
	}
#define ATTN_D(DTN, DT, D) ATTN(DTN, DT, D, 4) ATTN(DTN, DT, D, 16)
#define ATTN_DT(DTN, DT) ATTN_D(DTN, DT, 64) ATTN_D(DTN, DT, 128) \
	ATTN_D(DTN, DT, 256)

ATTN_DT(bf16, KVK_BF16)
ATTN_DT(fp8, KVK_FP8)
ATTN_DT(int8, KVK_INT8)
ATTN_DT(int4, KVK_INT4)

/* Merge the splits of one (sequence, query block, kv head). */
extern "C" __global__ void kvk_merge(const kvk_cu_merge p)
{
	const uint32_t gi = blockIdx.x, h = gi % p.kv_heads;
	const uint32_t sq = gi / p.kv_heads, seq = sq / p.nqb, qblk = sq % p.nqb;
	const uint32_t D = p.head_dim, G = p.group, n_q1 = p.n_q ? p.n_q : 1;
	const uint32_t q0 = qblk * p.qb, nq = min(p.qb, n_q1 - q0), R = nq * G;
	const uint64_t rows = (uint64_t)p.qb * G * (D + 2);
	const float *parts = (const float *)p.parts + (uint64_t)gi * p.nsplit *
			     rows;

	for (uint32_t x = threadIdx.x; x < R * D; x += blockDim.x) {
		uint32_t r = x / D, d = x % D, s;
		float M = -INFINITY, L = 0.0f, o = 0.0f;
		float *out = (float *)p.out + (((uint64_t)seq * n_q1 + q0 + r / G) *
					       p.q_heads + h * G + r % G) * D;

		for (s = 0; s < p.nsplit; s++) {
			float m = parts[s * rows + r * (D + 2)];

			if (m > M || m != m)
				M = m;
		}
		if (M == -INFINITY) {
			out[d] = 0.0f;
			continue;
		}
		for (s = 0; s < p.nsplit; s++) {
			const float *pp = parts + s * rows + r * (D + 2);
			float w;

			if (pp[0] == -INFINITY)
				continue;
			w = __expf(pp[0] - M);
			L += pp[1] * w;
			o += pp[2 + d] * w;
		}
		out[d] = o / L;
	}
}

/* Read bandwidth probe. */
extern "C" __global__ void kvk_read_bw(const kvk_cu_bw p)
{
	const uint4 *src = (const uint4 *)p.src;
	uint64_t n = p.bytes / 16, i;
	uint32_t x = 0;

	for (i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		uint4 v = __ldg(src + i);

		x ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (x == 0x12345678u)
		((uint32_t *)p.sink)[blockIdx.x] = x;
}

/* The edit ops (splice, compact, score). */
#include "kvkern_edit.cu"
