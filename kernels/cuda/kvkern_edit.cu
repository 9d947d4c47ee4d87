// SPDX-License-Identifier: MIT
/*
 * kvkern_edit.cu - CUDA twins of the edit ops (kernels/kvkern_edit.c):
 * splice and compact (same plan, same block-scale rule, same rounding:
 * the pool bytes equal the CPU's), and score (same formula, FP32; the sum
 * order differs).  Built into kvpool_kernels.fatbin: kvkern_kernels.cu
 * includes this file; its device helpers live in their own namespace,
 * the element formats are kvkern_formats.cuh's (shared with it).
 * Launched by kernels/kvkern_cuda_edit.c with the parameter blocks of
 * kernels/kvkern_cuda_edit_abi.h.
 *
 * Splice/compact run in batches of destination blocks, in the plan's
 * order: kvk_edit_gather copies the source rows of a batch (one CTA per
 * destination block and plane) into a stage buffer, kvk_edit_scatter then
 * writes the destination rows from the stage, so a batch may overwrite
 * its own sources.  The rotation is x*c - y*s and x*s + y*c with every
 * product rounded (__fmul_rn, no FMA), like the CPU's.
 */
#include <stdint.h>
#include <math.h>

#include "kvkern_cuda_edit_abi.h"
#include "kvkern_formats.cuh"

namespace kvk_edit_dev {

enum { BF16 = 1, FP8 = 2, INT8 = 3, INT4 = 4 };
enum { ZERO = 0, COPY = 1, ROT = 2 };
enum { SPLICE = 1, COMPACT = 2 };
enum { NEOX = 1, GPTJ = 2 };

/* ---- quantisation (the element formats: kvkern_formats.cuh) ---- */

__device__ __forceinline__ float q_sym(float x, float s, float qmax)
{
	float q;

	if (isnan(x))
		return 0.0f;
	if (isinf(x))
		return x > 0 ? qmax : -qmax;
	if (s == 0.0f)
		return 0.0f;
	q = rintf(__fdiv_rn(x, s));
	if (q > qmax)
		return qmax;
	return q < -qmax ? -qmax : q;
}

/* ---- layout ---- */

__device__ __forceinline__ uint64_t row_off(const kvk_cu_elayout &l,
					    uint32_t layer, uint32_t kv,
					    uint32_t head, uint32_t tok)
{
	uint64_t plane = ((uint64_t)layer * 2 + kv) * l.kv_heads + head;

	return plane * l.plane_bytes + (uint64_t)tok * l.row_bytes;
}

__device__ __forceinline__ uint64_t scale_off(const kvk_cu_elayout &l,
					      uint32_t layer, uint32_t kv,
					      uint32_t head, uint32_t tok)
{
	uint64_t plane = ((uint64_t)layer * 2 + kv) * l.kv_heads + head;

	if (l.dtype == INT4)
		return l.meta_offset + (plane * l.tokens_per_block + tok) *
		       (l.head_dim / 32) * 2;
	return l.meta_offset + plane * 4;
}

/* Element d of a row: block scale s, or the row's INT4 group scales. */
__device__ __forceinline__ float deq(uint32_t dtype, const uint8_t *row,
				     const uint8_t *gs, uint32_t d, float s)
{
	switch (dtype) {
	case BF16:
		return bf16_to_f32(((const uint16_t *)row)[d]);
	case FP8:
		return __fmul_rn(fp8_to_f32(row[d]), s);
	case INT8:
		return __fmul_rn((float)(int8_t)row[d], s);
	default: {
		int q = (row[d / 2] >> ((d & 1) * 4)) & 15;

		if (q & 8)
			q -= 16;
		return __fmul_rn((float)q,
				 f16_to_f32(((const uint16_t *)gs)[d / 32]));
	}
	}
}

/* ---- the plan (kernels/kvkern_edit_internal.h) ---- */

__device__ __forceinline__ uint32_t dest_of(const kvk_cu_edit &p, uint32_t k)
{
	return p.dir > 0 ? p.first + k : p.first + p.ndest - 1 - k;
}

__device__ __forceinline__ int src_of(const kvk_cu_edit &p, uint32_t g,
				      uint32_t kv, uint32_t *src)
{
	if (p.mode == COMPACT) {
		if (g >= p.nkeep)
			return ZERO;
		*src = ((const uint32_t *)p.keep)[g];
		return COPY;
	}
	if (g < p.at) {
		*src = g;
		return COPY;
	}
	if (g < p.at + p.nins || g >= p.new_len)
		return ZERO;
	*src = (uint32_t)((int64_t)g - p.shift);
	return p.rotate && !kv ? ROT : COPY;
}

/* Element d of a staged row after the turn by delta. */
__device__ __forceinline__ float rot_elem(const kvk_cu_edit &p,
					  const uint8_t *row,
					  const uint8_t *gs, uint32_t d,
					  float s)
{
	const uint32_t dt = p.l.dtype, half = p.rd / 2;
	uint32_t i, ia, ib;
	bool first;
	float a, b, c, sn;

	if (d >= p.rd)
		return deq(dt, row, gs, d, s);
	if (p.style == NEOX) {
		i = d < half ? d : d - half;
		ia = i;
		ib = i + half;
		first = d < half;
	} else {
		i = d / 2;
		ia = 2 * i;
		ib = 2 * i + 1;
		first = !(d & 1);
	}
	a = deq(dt, row, gs, ia, s);
	b = deq(dt, row, gs, ib, s);
	c = ((const float *)p.cs)[i];
	sn = ((const float *)p.sn)[i];
	if (first)
		return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
	return __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, c));
}

struct stage_ptrs {
	uint8_t *rows, *gs;
	float *ss;
};

__device__ __forceinline__ stage_ptrs stage_of(const kvk_cu_edit &p)
{
	const uint32_t T = p.l.tokens_per_block;
	const uint32_t gsb = p.l.dtype == INT4 ? p.l.head_dim / 16 : 0;
	stage_ptrs s;

	s.rows = (uint8_t *)p.stage + ((uint64_t)blockIdx.x * gridDim.y +
				       blockIdx.y) * p.stage_stride;
	s.gs = s.rows + (((uint64_t)T * p.l.row_bytes + 15) & ~15ull);
	s.ss = (float *)(s.gs + (((uint64_t)T * gsb + 15) & ~15ull));
	return s;
}

__device__ __forceinline__ float block_max(float v, float *red)
{
	const uint32_t tid = threadIdx.x;

	red[tid] = v;
	__syncthreads();
	for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
		if (tid < s)
			red[tid] = fmaxf(red[tid], red[tid + s]);
		__syncthreads();
	}
	v = red[0];
	__syncthreads();
	return v;
}

/* Copy every source row of this (destination block, plane) into the stage. */
__device__ __forceinline__ void gather(const kvk_cu_edit &p)
{
	const kvk_cu_elayout &l = p.l;
	const uint32_t T = l.tokens_per_block, H = l.kv_heads;
	const uint32_t plane = blockIdx.y, layer = plane / (2 * H);
	const uint32_t kv = (plane / H) % 2, head = plane % H;
	const uint32_t bi = dest_of(p, p.k0 + blockIdx.x);
	const uint32_t words = l.row_bytes / 16, gsw = l.head_dim / 32;
	const uint32_t *table = (const uint32_t *)p.table;
	const uint64_t g0 = (uint64_t)bi * T;
	const stage_ptrs st = stage_of(p);
	uint32_t e, i, src;

	for (e = threadIdx.x; e < T * words; e += blockDim.x) {
		const uint8_t *sblk;

		i = e / words;
		if (src_of(p, (uint32_t)(g0 + i), kv, &src) == ZERO)
			continue;
		sblk = (const uint8_t *)p.pool + (uint64_t)table[src / T] *
		       l.block_bytes;
		((uint4 *)(st.rows + (uint64_t)i * l.row_bytes))[e % words] =
			((const uint4 *)(sblk + row_off(l, layer, kv, head,
						       src % T)))[e % words];
	}
	if (l.dtype == INT4) {
		for (e = threadIdx.x; e < T * gsw; e += blockDim.x) {
			const uint8_t *sblk;

			i = e / gsw;
			if (src_of(p, (uint32_t)(g0 + i), kv, &src) == ZERO)
				continue;
			sblk = (const uint8_t *)p.pool +
			       (uint64_t)table[src / T] * l.block_bytes;
			((uint16_t *)(st.gs + (uint64_t)i * gsw * 2))[e % gsw] =
				((const uint16_t *)(sblk + scale_off(l, layer,
					kv, head, src % T)))[e % gsw];
		}
	}
	if (l.dtype == FP8 || l.dtype == INT8) {
		for (i = threadIdx.x; i < T; i += blockDim.x) {
			const uint8_t *sblk;

			if (src_of(p, (uint32_t)(g0 + i), kv, &src) == ZERO)
				continue;
			sblk = (const uint8_t *)p.pool +
			       (uint64_t)table[src / T] * l.block_bytes;
			st.ss[i] = valid_scale(*(const float *)(sblk +
					scale_off(l, layer, kv, head, 0)));
		}
	}
}

/* Write this (destination block, plane) from the stage. */
__device__ __forceinline__ void scatter(const kvk_cu_edit &p)
{
	const kvk_cu_elayout &l = p.l;
	const uint32_t T = l.tokens_per_block, H = l.kv_heads, D = l.head_dim;
	const uint32_t dt = l.dtype, plane = blockIdx.y, layer = plane / (2 * H);
	const uint32_t kv = (plane / H) % 2, head = plane % H;
	const uint32_t bi = dest_of(p, p.k0 + blockIdx.x);
	const uint32_t rb = l.row_bytes, gsw = D / 32;
	const uint64_t g0 = (uint64_t)bi * T;
	const bool scaled = dt == FP8 || dt == INT8;
	uint8_t *dblk = (uint8_t *)p.pool +
			(uint64_t)((const uint32_t *)p.table)[bi] * l.block_bytes;
	const stage_ptrs st = stage_of(p);
	__shared__ float red[KVK_CU_EDIT_THREADS];
	float s = 0.0f;
	uint32_t e, i, d, src;

	if (scaled) {
		float smax = 0.0f, amax = 0.0f;

		for (i = threadIdx.x; i < T; i += blockDim.x)
			if (src_of(p, (uint32_t)(g0 + i), kv, &src) != ZERO)
				smax = fmaxf(smax, st.ss[i]);
		for (e = threadIdx.x; e < T * D; e += blockDim.x) {
			float x;

			i = e / D;
			if (src_of(p, (uint32_t)(g0 + i), kv, &src) != ROT)
				continue;
			x = fabsf(rot_elem(p, st.rows + (uint64_t)i * rb, NULL,
					   e % D, st.ss[i]));
			if (isfinite(x) && x > amax)
				amax = x;
		}
		smax = block_max(smax, red);
		amax = block_max(amax, red);
		s = fmaxf(smax, pow2_scale(amax, dt == FP8 ? 448.0f : 127.0f));
	}
	if (dt != INT4) {
		for (e = threadIdx.x; e < T * D; e += blockDim.x) {
			const uint8_t *srow;
			uint8_t *drow;
			int kind;

			i = e / D;
			d = e % D;
			kind = src_of(p, (uint32_t)(g0 + i), kv, &src);
			drow = dblk + row_off(l, layer, kv, head, i);
			srow = st.rows + (uint64_t)i * rb;
			if (dt == BF16) {
				uint16_t *o = (uint16_t *)drow;

				if (kind == ZERO)
					o[d] = 0;
				else if (kind == COPY)
					o[d] = ((const uint16_t *)srow)[d];
				else
					o[d] = f32_to_bf16(rot_elem(p, srow,
								    NULL, d,
								    1.0f));
				continue;
			}
			if (kind == ZERO) {
				drow[d] = 0;
			} else if (kind == COPY && st.ss[i] == s) {
				drow[d] = srow[d];
			} else {
				float x = kind == COPY ?
					  deq(dt, srow, NULL, d, st.ss[i]) :
					  rot_elem(p, srow, NULL, d, st.ss[i]);

				drow[d] = dt == FP8 ? q_fp8(x, s) :
					  (uint8_t)(int8_t)q_sym(x, s, 127.0f);
			}
		}
	} else {
		/* INT4: one thread per (row, group of 32) */
		for (e = threadIdx.x; e < T * gsw; e += blockDim.x) {
			const uint8_t *srow, *sgs;
			uint8_t *drow;
			uint16_t *dgs;
			uint32_t g = e % gsw, j;
			int kind;

			i = e / gsw;
			kind = src_of(p, (uint32_t)(g0 + i), kv, &src);
			drow = dblk + row_off(l, layer, kv, head, i) + g * 16;
			dgs = (uint16_t *)(dblk + scale_off(l, layer, kv, head,
							    i)) + g;
			srow = st.rows + (uint64_t)i * rb;
			sgs = st.gs + (uint64_t)i * gsw * 2;
			if (kind == ZERO) {
				*(uint4 *)drow = make_uint4(0, 0, 0, 0);
				*dgs = 0;
			} else if (kind == COPY) {
				*(uint4 *)drow = *(const uint4 *)(srow + g * 16);
				*dgs = ((const uint16_t *)sgs)[g];
			} else {
				float x[32], amax = 0.0f, sc;
				uint16_t h;
				uint32_t w[4] = { 0, 0, 0, 0 };

#pragma unroll
				for (j = 0; j < 32; j++) {
					x[j] = rot_elem(p, srow, sgs, g * 32 + j,
							1.0f);
					if (isfinite(x[j]) && fabsf(x[j]) > amax)
						amax = fabsf(x[j]);
				}
				h = f32_to_f16(__fdiv_rn(amax, 7.0f));
				if ((h & 0x7fff) >= 0x7c00)
					h = 0x7bff;
				sc = f16_to_f32(h);
#pragma unroll
				for (j = 0; j < 32; j++) {
					int q = (int)q_sym(x[j], sc, 7.0f);

					w[j / 8] |= (uint32_t)(q & 15) <<
						    (4 * (j % 8));
				}
				*(uint4 *)drow = make_uint4(w[0], w[1], w[2], w[3]);
				*dgs = h;
			}
		}
	}
	if (scaled && threadIdx.x == 0)
		*(float *)(dblk + scale_off(l, layer, kv, head, 0)) = s;
}

/* ---- score ---- */

__device__ __forceinline__ const uint8_t *score_blk(const kvk_cu_score &p,
						    uint32_t slot)
{
	return (const uint8_t *)p.pool +
	       (uint64_t)((const uint32_t *)p.table)[slot /
			p.l.tokens_per_block] * p.l.block_bytes;
}

/* Load query rows r0 .. r0 + nr - 1 of kv head h into qs. */
__device__ __forceinline__ void load_q(const kvk_cu_score &p, uint32_t h,
				       uint32_t r0, uint32_t nr,
				       float (*qs)[256])
{
	const uint32_t D = p.l.head_dim, G = p.group;

	for (uint32_t e = threadIdx.x; e < KVK_CU_SCORE_TILE * D;
	     e += blockDim.x) {
		uint32_t r = e / D, d = e % D;

		qs[r][d] = r < nr ? ((const float *)p.q)[((uint64_t)((r0 + r) /
			   G) * p.q_heads + h * G + (r0 + r) % G) * D + d] : 0.0f;
	}
}

/* The scaled scores of one slot against the rows in qs. */
__device__ __forceinline__ void score_dots(const kvk_cu_score &p,
					   uint32_t h, uint32_t slot,
					   float (*qs)[256], float *acc)
{
	const kvk_cu_elayout &l = p.l;
	const uint32_t T = l.tokens_per_block, D = l.head_dim;
	const uint8_t *blk = score_blk(p, slot);
	const uint8_t *row = blk + row_off(l, p.layer, 0, h, slot % T);
	const uint8_t *gs = blk + scale_off(l, p.layer, 0, h, slot % T);
	/* the stored scale as it is, as attention reads it */
	float s = (l.dtype == FP8 || l.dtype == INT8) ?
		  *(const float *)(blk + scale_off(l, p.layer, 0, h, 0)) : 1.0f;

#pragma unroll
	for (int r = 0; r < KVK_CU_SCORE_TILE; r++)
		acc[r] = 0.0f;
	for (uint32_t d = 0; d < D; d++) {
		float k = deq(l.dtype, row, gs, d, s);

#pragma unroll
		for (int r = 0; r < KVK_CU_SCORE_TILE; r++)
			acc[r] += qs[r][d] * k;
	}
#pragma unroll
	for (int r = 0; r < KVK_CU_SCORE_TILE; r++)
		acc[r] *= p.scale;
}

__device__ __forceinline__ bool score_sees(const kvk_cu_score &p,
					   uint32_t row, uint32_t slot)
{
	uint32_t i = row / p.group;

	if (slot >= p.len)
		return false;
	return p.causal ? slot <= p.len - p.n_q + i : true;
}

/* Pass 1: (max, sum) of every query row over this CTA's 128 slots. */
__device__ __forceinline__ void score_stats(const kvk_cu_score &p)
{
	const uint32_t h = blockIdx.y, chunk = blockIdx.x;
	const uint32_t slot = chunk * blockDim.x + threadIdx.x;
	const uint32_t Rh = p.n_q * p.group;
	__shared__ float qs[KVK_CU_SCORE_TILE][256];
	__shared__ float red[KVK_CU_EDIT_THREADS];
	float acc[KVK_CU_SCORE_TILE];

	for (uint32_t r0 = 0; r0 < Rh; r0 += KVK_CU_SCORE_TILE) {
		uint32_t nr = min((uint32_t)KVK_CU_SCORE_TILE, Rh - r0);

		__syncthreads();
		load_q(p, h, r0, nr, qs);
		__syncthreads();
		if (slot < p.len)
			score_dots(p, h, slot, qs, acc);
		for (uint32_t r = 0; r < nr; r++) {
			bool vis = score_sees(p, r0 + r, slot);
			float m = vis ? acc[r] : -INFINITY, M, lsum;

			red[threadIdx.x] = m;
			__syncthreads();
			for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
				if (threadIdx.x < s) {
					float o = red[threadIdx.x + s];

					if (o > red[threadIdx.x] || o != o)
						red[threadIdx.x] = o;
				}
				__syncthreads();
			}
			M = red[0];
			__syncthreads();
			red[threadIdx.x] = (!vis || M == -INFINITY) ? 0.0f :
					   expf(m - M);
			__syncthreads();
			for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {
				if (threadIdx.x < s)
					red[threadIdx.x] += red[threadIdx.x + s];
				__syncthreads();
			}
			lsum = red[0];
			if (threadIdx.x == 0) {
				float *o = (float *)p.parts +
					   (((uint64_t)h * p.nchunks + chunk) *
					    Rh + r0 + r) * 2;

				o[0] = M;
				o[1] = lsum;
			}
			__syncthreads();
		}
	}
}

/* Pass 2: every slot's weights over every row, in row order. */
__device__ __forceinline__ void score_accum(const kvk_cu_score &p)
{
	const uint32_t slot = blockIdx.x * blockDim.x + threadIdx.x;
	const uint32_t Rh = p.n_q * p.group;
	__shared__ float qs[KVK_CU_SCORE_TILE][256];
	float acc[KVK_CU_SCORE_TILE], out = 0.0f;

	for (uint32_t h = 0; h < p.l.kv_heads; h++) {
		const float *ml = (const float *)p.ml + (uint64_t)h * Rh * 2;

		for (uint32_t r0 = 0; r0 < Rh; r0 += KVK_CU_SCORE_TILE) {
			uint32_t nr = min((uint32_t)KVK_CU_SCORE_TILE, Rh - r0);

			__syncthreads();
			load_q(p, h, r0, nr, qs);
			__syncthreads();
			if (slot >= p.len)
				continue;
			score_dots(p, h, slot, qs, acc);
			for (uint32_t r = 0; r < nr; r++) {
				float w;

				if (!score_sees(p, r0 + r, slot))
					continue;
				w = expf(acc[r] - ml[(r0 + r) * 2]) /
				    ml[(r0 + r) * 2 + 1];
				if (!p.want_max)
					out += w;
				else if (w > out || w != w)
					out = w;
			}
		}
	}
	if (slot < p.len)
		((float *)p.out)[slot] = out;
}

} /* namespace kvk_edit_dev */

extern "C" __global__ void __launch_bounds__(KVK_CU_EDIT_THREADS)
kvk_edit_gather(const kvk_cu_edit p)
{
	kvk_edit_dev::gather(p);
}

extern "C" __global__ void __launch_bounds__(KVK_CU_EDIT_THREADS)
kvk_edit_scatter(const kvk_cu_edit p)
{
	kvk_edit_dev::scatter(p);
}

extern "C" __global__ void __launch_bounds__(KVK_CU_EDIT_THREADS)
kvk_edit_score_stats(const kvk_cu_score p)
{
	kvk_edit_dev::score_stats(p);
}

extern "C" __global__ void __launch_bounds__(KVK_CU_EDIT_THREADS)
kvk_edit_score_accum(const kvk_cu_score p)
{
	kvk_edit_dev::score_accum(p);
}
