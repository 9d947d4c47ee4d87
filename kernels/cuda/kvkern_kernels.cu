// SPDX-License-Identifier: MIT
/*
 * kvkern_kernels.cu - CUDA twins of the CPU kernels (kernels/kvkern.c,
 * kernels/kvkern_simd.h): same block layout, same element formats, same
 * quantisation and scale rule, FP32 accumulation.  Built into
 * kvpool_kernels.fatbin and launched through the driver API by
 * kernels/kvkern_cuda.c; every entry point takes one parameter block
 * (kernels/kvkern_cuda_abi.h) by value.  The same source also compiles
 * for the host with -DKVK_CUEMU (tests/cudafake/cuemu.h), where every
 * warp-level primitive below is emulated from its PTX definition.
 *
 * Attention (Documentation/gpu.rst has the design and its arithmetic):
 * one thread block per (sequence, kv head, block of 8 query rows, split
 * of the positions), four warps.  Each warp streams its own tiles of 16
 * positions (K and V rows of the kv head) into shared memory with a
 * multi-stage cp.async pipeline of 16-byte copies, several tiles in
 * flight, and computes on tensor cores with the query rows as the N = 8
 * dimension of mma.sync.m16n8k16:
 *   S^T (16 positions x 8 rows) = K (16 x D) . Q^T (D x 8)
 *   O^T (D x 8 rows)           += V^T (D x 16) . P^T (16 x 8)
 * Q and P are split into hi + lo halves (BF16 for the BF16 cache, FP16
 * for FP8/INT8/INT4, whose values are exact in FP16), each product is
 * hi * x + lo * x, accumulated in FP32.  Block scales are applied in
 * FP32 (K: to the scores; V: folded into P with a power-of-two tile
 * exponent, so nothing overflows FP16).  The softmax max and the rescale
 * happen once per tile.  Warps, then splits, merge (max, sum, output).
 */
#include <stdint.h>
#include <math.h>

#include "kvkern_cuda_abi.h"

#define KVK_BF16 1
#define KVK_FP8 2
#define KVK_INT8 3
#define KVK_INT4 4

#ifdef KVK_CUEMU
#include "cuemu.h"
#define KVK_DEV static inline
#define KVK_SMEM_BASE ((uint8_t *)cuemu_dyn_smem())
#else
#define KVK_DEV __device__ __forceinline__
#define KVK_SMEM_BASE kvk_dyn_smem
extern __shared__ __align__(16) uint8_t kvk_dyn_smem[];
#endif

/* the element formats, shared with kvkern_edit.cu */
#include "kvkern_formats.cuh"

/* ---- warp-level primitives (PTX) ---- */

#ifndef KVK_CUEMU
KVK_DEV uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, L2 only; src_size 0 fills zeros */
KVK_DEV void cp_async16(void *dst, const void *src, uint32_t src_size)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
		     :: "r"(smem_u32(dst)), "l"(src), "r"(src_size) : "memory");
}

KVK_DEV void cp_async8(void *dst, const void *src, uint32_t src_size)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
		     :: "r"(smem_u32(dst)), "l"(src), "r"(src_size) : "memory");
}

KVK_DEV void cp_async4(void *dst, const void *src, uint32_t src_size)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
		     :: "r"(smem_u32(dst)), "l"(src), "r"(src_size) : "memory");
}

KVK_DEV void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
KVK_DEV void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

KVK_DEV void ldsm_x4(const void *p, uint32_t r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
		     "{%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)) : "memory");
}

KVK_DEV void ldsm_x4_t(const void *p, uint32_t r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
		     "{%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)) : "memory");
}

/* d = a . b + d, m16n8k16, f32 accumulators */
KVK_DEV void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0,
		      uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
		       "r"(b0), "r"(b1));
}

KVK_DEV void mma_f16(float d[4], const uint32_t a[4], uint32_t b0,
		     uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
		       "r"(b0), "r"(b1));
}

/* transpose an 8x8 matrix of 16-bit values held in mma C-fragment order */
KVK_DEV uint32_t movm_t(uint32_t x)
{
	uint32_t y;

	asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n"
		     : "=r"(y) : "r"(x));
	return y;
}

KVK_DEV float ex2(float x)
{
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

KVK_DEV uint16_t f2h_bits(float x)
{
	uint16_t h;

	asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
	return h;
}

KVK_DEV float h2f_bits(uint16_t h)
{
	float x;

	asm("cvt.f32.f16 %0, %1;\n" : "=f"(x) : "h"(h));
	return x;
}

KVK_DEV uint16_t f2bf_bits(float x)
{
	uint16_t h;

	asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
	return h;
}

KVK_DEV uint32_t hsub2(uint32_t a, uint32_t b)
{
	uint32_t d;

	asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
	return d;
}

KVK_DEV uint32_t hmul2(uint32_t a, uint32_t b)
{
	uint32_t d;

	asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
	return d;
}

KVK_DEV uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;

	asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b),
	    "r"(c));
	return d;
}

/* lop3.b32: bit i of the result is bit 4 a_i + 2 b_i + c_i of LUT (LUT =
 * f(0xf0, 0xcc, 0xaa) for the function f wanted) */
template <int LUT>
KVK_DEV uint32_t lop3(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;

	asm("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(d) : "r"(a), "r"(b),
	    "r"(c), "n"(LUT));
	return d;
}

#if __CUDA_ARCH__ >= 890
#define KVK_HW_E4M3 1
/* two E4M3 bytes (low byte -> low half) to two FP16 */
KVK_DEV uint32_t e4m3x2_hw(uint32_t x)
{
	uint32_t d;
	uint16_t s = (uint16_t)x;

	asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(s));
	return d;
}
#endif

KVK_DEV uint32_t warp_max_u32(uint32_t v)
{
	return __reduce_max_sync(0xffffffffu, v);
}
#endif /* !KVK_CUEMU */

KVK_DEV float bf2f_bits(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* 2^e for e in [-126, 127], exact */
KVK_DEV float pow2i(int e)
{
	return __uint_as_float((uint32_t)(e + 127) << 23);
}

/* tile exponent of a power-of-two scale maximum (as float bits): 2^-E
 * brings the scale to at most 2^13, clamped to a normal 2^E */
KVK_DEV int tile_exp(uint32_t maxbits)
{
	int e = maxbits ? (int)((maxbits >> 23) & 0xff) - 127 - 13 : 0;

	return e < -126 ? -126 : e > 127 ? 127 : e;
}

KVK_DEV uint32_t pack2(uint16_t lo, uint16_t hi)
{
	return (uint32_t)lo | ((uint32_t)hi << 16);
}

KVK_DEV int q_int(float x, float s, float qmax)
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

/* ---- layout ---- */

KVK_DEV uint64_t row_off(const kvk_cu_layout &l, uint32_t kv, uint32_t head,
			 uint32_t tok)
{
	uint64_t plane = ((uint64_t)l.layer * 2 + kv) * l.kv_heads + head;

	return plane * l.plane_bytes + (uint64_t)tok * l.row_bytes;
}

KVK_DEV uint64_t scale_off(const kvk_cu_layout &l, uint32_t kv, uint32_t head,
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
KVK_DEV float load_elem(uint32_t dtype, const uint8_t *row, uint32_t d,
			float s, const uint8_t *gs)
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

KVK_DEV float in_elem(const kvk_cu_write &p, uint32_t kv, uint32_t tok,
		      uint32_t head, uint32_t d)
{
	uint64_t i = ((uint64_t)tok * p.l.kv_heads + head) * p.l.head_dim + d;

	if (p.bf16_in)
		return bf16_to_f32(((const uint16_t *)(kv ? p.v : p.k))[i]);
	return ((const float *)(kv ? p.v : p.k))[i];
}

extern "C" __global__ void __launch_bounds__(KVK_CU_THREADS)
kvk_write(const kvk_cu_write p)
{
	const kvk_cu_layout &l = p.l;
	const uint32_t H2 = 2 * l.kv_heads;
	const uint32_t g = blockIdx.x / H2, y = blockIdx.x % H2;
	const uint32_t kv = y / l.kv_heads, head = y % l.kv_heads;
	const uint32_t D = l.head_dim;
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
				uint16_t hs;

				for (d = 0; d < 32; d++) {
					x[d] = in_elem(p, kv, t, head, gr * 32 + d);
					if (isfinite(x[d]) && fabsf(x[d]) > amax)
						amax = fabsf(x[d]);
				}
				hs = f32_to_f16(amax / 7.0f);
				if ((hs & 0x7fff) >= 0x7c00)
					hs = 0x7bff;
				gsf = f16_to_f32(hs);
				sp[gr] = hs;
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

extern "C" __global__ void __launch_bounds__(KVK_CU_THREADS)
kvk_read(const kvk_cu_read p)
{
	const kvk_cu_layout &l = p.l;
	const uint32_t H2 = 2 * l.kv_heads;
	const uint32_t t = blockIdx.x / H2, y = blockIdx.x % H2;
	const uint32_t kv = y / l.kv_heads, head = y % l.kv_heads;
	const uint32_t D = l.head_dim;
	const uint32_t slot = ((const uint32_t *)p.slots)[t];
	const uint8_t *blk = (const uint8_t *)p.pool +
		(uint64_t)((const uint32_t *)p.blocks)[t] * l.block_bytes;
	const uint8_t *row = blk + row_off(l, kv, head, slot);
	const uint8_t *gs = blk + scale_off(l, kv, head, slot);
	float s = l.dtype == KVK_FP8 || l.dtype == KVK_INT8 ?
		  *(const float *)gs : 1.0f;
	float *dst = (float *)(kv ? p.v : p.k);

	if (!dst)
		return;
	for (uint32_t d = threadIdx.x; d < D; d += blockDim.x)
		dst[((uint64_t)t * l.kv_heads + head) * D + d] =
			load_elem(l.dtype, row, d, s, gs);
}

/* ---- attention: element conversions to MMA operands ---- */

/* Two FP8 E4M3 bytes (x bits 0-7, 8-15) -> two FP16 (exact), NaN kept,
 * with integer operations: byte b -> f16 bits (b & 0x80) << 8 |
 * (b & 0x7f) << 7, times 2^8 (subnormals included). */
KVK_DEV uint32_t e4m3x2_sw(uint32_t x)
{
	uint32_t w = __byte_perm(x, 0, 0x1404);	/* [0, b0, 0, b1] */
	uint32_t f = (w & 0x80008000u) | ((w & 0x7f007f00u) >> 1);
	uint32_t nan = __vcmpeq2(w & 0x7f007f00u, 0x7f007f00u);

	f = hmul2(f, 0x5c005c00u);		/* 256.0 in both halves */
	return f | (nan & 0x7fff7fffu);
}

/* the hardware conversion where the architecture has it (sm_89+) */
KVK_DEV uint32_t e4m3x2_to_f16x2(uint32_t x)
{
#if defined(KVK_CUEMU)
	return cuemu_sm() >= 89 ? e4m3x2_hw(x) : e4m3x2_sw(x);
#elif defined(KVK_HW_E4M3)
	return e4m3x2_hw(x);
#else
	return e4m3x2_sw(x);
#endif
}

/* Two INT8 bytes -> two FP16 (exact): 0x6400 | (b ^ 0x80) is 1152 + b. */
KVK_DEV uint32_t s8x2_to_f16x2(uint32_t x)
{
	uint32_t w = __byte_perm(x, 0x64646464u, 0x4140) ^ 0x00800080u;

	return hsub2(w, 0x64806480u);		/* 1152.0 in both halves */
}

/*
 * Eight INT4 nibbles of w (nibble k at bits 4k to 4k + 3, two's
 * complement) -> four pairs of FP16, exact: r[k] = (nibble k, nibble
 * k + 4), low half first, k = 0..3.  One lop3 (a & b) ^ c (LUT 0x6a =
 * (0xf0 & 0xcc) ^ 0xaa) puts two nibbles, each xor 8, under the FP16
 * exponent of 1024: nibbles at bits 0-3 and 16-19 give 1024 + (n ^ 8),
 * and 1024 + (n ^ 8) - 1032 is n; nibbles at bits 4-7 and 20-23 give
 * 1024 + 16 (n ^ 8), and that times 1/16 minus 72 (one fma, every step
 * exact) is n.  Nine instructions for eight values.
 */
KVK_DEV void s4x8_to_f16x2(uint32_t w, uint32_t r[4])
{
	const uint32_t w8 = w >> 8;

	/* 1032.0; 1/16 and -72.0 in both halves */
	r[0] = hsub2(lop3<0x6a>(w, 0x000f000fu, 0x64086408u), 0x64086408u);
	r[1] = hfma2(lop3<0x6a>(w, 0x00f000f0u, 0x64806480u), 0x2c002c00u,
		     0xd480d480u);
	r[2] = hsub2(lop3<0x6a>(w8, 0x000f000fu, 0x64086408u), 0x64086408u);
	r[3] = hfma2(lop3<0x6a>(w8, 0x00f000f0u, 0x64806480u), 0x2c002c00u,
		     0xd480d480u);
}

template <int DT>
KVK_DEV uint32_t cvt8x2(uint32_t x)
{
	return DT == KVK_FP8 ? e4m3x2_to_f16x2(x) : s8x2_to_f16x2(x);
}

/* hi + lo split in the MMA input type (BF16 for the BF16 cache) */
template <bool BF>
KVK_DEV uint16_t to_mma(float x)
{
	return BF ? f2bf_bits(x) : f2h_bits(x);
}

template <bool BF>
KVK_DEV float from_mma(uint16_t h)
{
	return BF ? bf2f_bits(h) : h2f_bits(h);
}

template <bool BF>
KVK_DEV void mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	if (BF)
		mma_bf16(d, a, b0, b1);
	else
		mma_f16(d, a, b0, b1);
}

/*
 * Query k-index mapping.  For the BF16 cache (ldmatrix), k-step ks,
 * logical column 2c + e (+ 8) is dimension 16 ks + 2c + e (+ 8).  For the
 * FP16 path a lane reads W contiguous bytes (8-bit) or 4 bytes = 8
 * dimensions (INT4) of a K row per super-chunk j of 4 W dimensions.
 * 8-bit: see k_frag.  INT4 (W = 8): the super-chunk is one scale group
 * of 32, k-steps ks = 2 j + s; the lane's word holds dimensions
 * 32 j + 8 c + n for its nibbles n = 0..7, which s4x8_to_f16x2 pairs as
 * (n, n + 4): column 2c + e is nibble 2 s + 4 e, column 2c + 8 + e
 * nibble 2 s + 1 + 4 e.
 */
template <int DT, int D>
struct kvk_attn_cfg {
	static constexpr bool BF = DT == KVK_BF16;
	static constexpr int RB = DT == KVK_BF16 ? 2 * D :
				  DT == KVK_INT4 ? D / 2 : D;
	static constexpr int RS = RB + 16;
	static constexpr int SB = (DT == KVK_FP8 || DT == KVK_INT8) ? 4 :
				  DT == KVK_INT4 ? (D / 16 < 4 ? 4 : D / 16) : 0;
	static constexpr int TB = 2 * KVK_CU_TILE * (RS + SB);
	static constexpr int S = (12288 + TB - 1) / TB + 1 < 2 ? 2 :
				 (12288 + TB - 1) / TB + 1 > 8 ? 8 :
				 (12288 + TB - 1) / TB + 1;
	static constexpr int W = DT == KVK_INT4 ? 8 : (D >= 64 ? 16 : 8);
	static constexpr int NKS = D / 16;
	static constexpr int NMT = D / 16;
};

template <int DT, int D>
KVK_DEV uint32_t q_dim(uint32_t ks, uint32_t c, uint32_t e, uint32_t hi8)
{
	if (DT == KVK_BF16)
		return 16 * ks + 2 * c + e + 8 * hi8;
	if (DT != KVK_INT4)
		return 16 * ks + 4 * c + e + 2 * hi8;	/* see k_frag */
	return 32 * (ks / 2) + 8 * c + 2 * (ks % 2) + hi8 + 4 * e;
}

/*
 * Output dimension of the O^T accumulator element (m-tile i, row g or
 * g + 8): BF16 identity (ldmatrix.trans); 8-bit: lane group g owns D/8
 * contiguous dimensions, m-tile i row g is g D/8 + 2i, row g + 8 the
 * next; INT4: group G = i / 2, h = i % 2, row g is 32 G + 4 g + 2 h,
 * row g + 8 the next (so that one m-tile stays in one scale group).
 */
template <int DT, int D>
KVK_DEV uint32_t o_dim(uint32_t i, uint32_t g, uint32_t hi8)
{
	if (DT == KVK_BF16)
		return 16 * i + g + 8 * hi8;
	if (DT == KVK_INT4)
		return 32 * (i / 2) + 4 * g + 2 * (i % 2) + hi8;
	return g * (D / 8) + 2 * i + hi8;
}

template <int DT, int D>
struct kvk_attn_smem {
	uint8_t *tiles;		/* [warps][stages][tile] */
	uint4 *qf;		/* [NKS][32] */
	uint32_t *tab;		/* [KVK_CU_TAB] */
	uint64_t *raddr;	/* [warps][16] */
	uint32_t *rslot;	/* [warps][16] */
	int *rexp;		/* [ROWS] */
	int *rlim;		/* [ROWS] */
	float *fin;		/* [2][ROWS]: merged m, l */
	float *rfac;		/* [ROWS]: 2^rexp */
};

template <int DT, int D>
KVK_DEV kvk_attn_smem<DT, D> attn_smem(void)
{
	typedef kvk_attn_cfg<DT, D> C;
	kvk_attn_smem<DT, D> s;
	uint8_t *b = KVK_SMEM_BASE;
	uint32_t o = kvk_cu_attn_tiles_bytes(DT, D, C::RB);

	s.tiles = b;
	s.qf = (uint4 *)(b + o);
	o += C::NKS * 32 * 16;
	s.tab = (uint32_t *)(b + o);
	o += KVK_CU_TAB * 4;
	s.raddr = (uint64_t *)(b + o);
	o += KVK_CU_WARPS * KVK_CU_TILE * 8;
	s.rslot = (uint32_t *)(b + o);
	o += KVK_CU_WARPS * KVK_CU_TILE * 4;
	s.rexp = (int *)(b + o);
	o += KVK_CU_ROWS * 4;
	s.rlim = (int *)(b + o);
	o += KVK_CU_ROWS * 4;
	s.fin = (float *)(b + o);
	o += 2 * KVK_CU_ROWS * 4;
	s.rfac = (float *)(b + o);
	return s;
}

struct kvk_attn_ctx {
	uint32_t seq, h, rb, split;
	uint32_t t0;		/* first position of this split */
	uint32_t tmain;		/* end of the positions every row attends */
	uint32_t tend;		/* end of the positions any row attends */
	uint32_t first;		/* block-table index of t0 */
	uint64_t koff, voff;	/* K and V planes of the head in a block */
	uint64_t kmeta, vmeta;	/* FP8/INT8: scale offsets; INT4: plane
				 * index times T (scale rows) */
	int lim_min, lim_max;
};

/* Issue the copies of tile k of this warp (16 positions from p0) into
 * stage buffer tb.  Positions past the end are zero-filled. */
template <int DT, int D>
KVK_DEV void attn_issue(const kvk_cu_attn &p, const kvk_attn_ctx &x,
			const kvk_attn_smem<DT, D> &sm, uint8_t *tb,
			uint32_t p0, uint32_t warp, uint32_t lane)
{
	typedef kvk_attn_cfg<DT, D> C;
	const kvk_cu_layout &l = p.l;
	uint64_t *ra = sm.raddr + warp * KVK_CU_TILE;
	uint32_t *rs = sm.rslot + warp * KVK_CU_TILE;

	__syncwarp();
	if (lane < KVK_CU_TILE) {
		uint32_t t = p0 + lane;
		uint64_t base = 0;
		uint32_t slot = 0;

		if (t < x.tmain) {
			uint32_t bi = t / l.tokens_per_block;

			slot = t - bi * l.tokens_per_block;
			base = p.pool + (uint64_t)sm.tab[bi - x.first] *
				       l.block_bytes;
		}
		ra[lane] = base;
		rs[lane] = slot;
	}
	__syncwarp();
	{
		constexpr int N16 = C::RB / 16;

		for (int idx = lane; idx < 2 * KVK_CU_TILE * N16; idx += 32) {
			const int kv = idx / (KVK_CU_TILE * N16);
			const int rem = idx - kv * KVK_CU_TILE * N16;
			const int row = rem / N16, col = rem % N16;
			const uint64_t base = ra[row];
			const uint8_t *src = base ? (const uint8_t *)(base +
				(kv ? x.voff : x.koff) +
				(uint64_t)rs[row] * C::RB + col * 16) :
				(const uint8_t *)p.pool;

			cp_async16(tb + (kv * KVK_CU_TILE + row) * C::RS + col * 16,
				   src, base ? 16 : 0);
		}
	}
	if (DT == KVK_FP8 || DT == KVK_INT8) {
		const int kv = lane / KVK_CU_TILE, row = lane % KVK_CU_TILE;
		const uint64_t base = ra[row];
		const uint8_t *src = base ? (const uint8_t *)(base +
					(kv ? x.vmeta : x.kmeta)) :
					(const uint8_t *)p.pool;

		cp_async4(tb + 2 * KVK_CU_TILE * C::RS + lane * 4, src,
			  base ? 4 : 0);
	}
	if (DT == KVK_INT4) {
		const int kv = lane / KVK_CU_TILE, row = lane % KVK_CU_TILE;
		const uint64_t base = ra[row];
		uint8_t *dst = tb + 2 * KVK_CU_TILE * C::RS + lane * C::SB;
		uint64_t off = l.meta_offset + ((kv ? x.vmeta : x.kmeta) +
			       rs[row]) * (D / 16);
		const uint8_t *src;

		if (D / 16 < 4)
			off &= ~(uint64_t)3;
		src = base ? (const uint8_t *)(base + off) :
			     (const uint8_t *)p.pool;
		if (C::SB == 16)
			cp_async16(dst, src, base ? 16 : 0);
		else if (C::SB == 8)
			cp_async8(dst, src, base ? 8 : 0);
		else
			cp_async4(dst, src, base ? 4 : 0);
	}
}

/* INT4 group scale (FP16 bits) of tile row r, group G */
template <int D>
KVK_DEV float int4_scale(const uint8_t *sc, const kvk_cu_layout &l,
			 uint64_t plane_t, uint32_t pos, uint32_t G)
{
	const uint16_t *s = (const uint16_t *)sc;

	if (D / 16 < 4) {
		/* D = 32: one scale per row, in the half of the copied
		 * 4-byte word given by the parity of its index */
		uint32_t slot = pos % l.tokens_per_block;

		return h2f_bits(s[(plane_t + slot) & 1]);
	}
	/* cvt.f32.f16: exact, one instruction, no branches */
	return h2f_bits(s[G]);
}

/* INT4: the A fragments of K rows for the two k-steps 2 G + s of scale
 * group G (one word of rows g and g + 8 each, at byte 16 G + 4 c;
 * dimensions as q_dim) */
template <int D>
KVK_DEV void k_frag_int4(const uint8_t *kt, uint32_t G, uint32_t lane,
			 uint32_t a[2][4])
{
	typedef kvk_attn_cfg<KVK_INT4, D> C;
	const uint32_t g = lane >> 2, c = lane & 3;
	uint32_t r0[4], r1[4];

	s4x8_to_f16x2(*(const uint32_t *)(kt + g * C::RS + 16 * G + 4 * c), r0);
	s4x8_to_f16x2(*(const uint32_t *)(kt + (g + 8) * C::RS + 16 * G +
					   4 * c), r1);
#pragma unroll
	for (int s = 0; s < 2; s++) {
		a[s][0] = r0[2 * s];
		a[s][1] = r1[2 * s];
		a[s][2] = r0[2 * s + 1];
		a[s][3] = r1[2 * s + 1];
	}
}

/* A fragment of K rows (m = 16 positions) for k-step ks (not INT4) */
template <int DT, int D>
KVK_DEV void k_frag(const uint8_t *kt, uint32_t ks, uint32_t lane,
		    uint32_t a[4])
{
	typedef kvk_attn_cfg<DT, D> C;
	const uint32_t g = lane >> 2, c = lane & 3;

	if (DT == KVK_BF16) {
		const uint32_t t = (lane & 7) + ((lane >> 3) & 1) * 8;
		const uint32_t d = 16 * ks + (lane >> 4) * 8;

		ldsm_x4(kt + t * C::RS + d * 2, a);
		return;
	}
	{
		/*
		 * FP8/INT8: lane (g, c) reads the 4 bytes at 16 ks + 4 c of
		 * rows g and g + 8 (dimensions as q_dim).  Rows are RS = D +
		 * 16 bytes apart, so the word's bank is (g RS / 4 + 4 ks + c)
		 * mod 32; RS / 4 = 12, 20, 36, 68 for D = 32 .. 256 makes
		 * g RS / 4 mod 32 eight distinct multiples of 4, and c adds
		 * 0..3: 32 lanes, 32 banks, no conflict (a column step of 16
		 * bytes had 4-way conflicts, 2-way at D = 32; see
		 * Documentation/gpu.rst).
		 */
		const uint32_t off = 16 * ks + 4 * c;
		const uint32_t w0 = *(const uint32_t *)(kt + g * C::RS + off);
		const uint32_t w1 = *(const uint32_t *)(kt + (g + 8) * C::RS + off);

		a[0] = cvt8x2<DT>(w0);
		a[1] = cvt8x2<DT>(w1);
		a[2] = cvt8x2<DT>(w0 >> 16);
		a[3] = cvt8x2<DT>(w1 >> 16);
	}
}

/*
 * One tile of 16 positions: scores, softmax update, values.
 * st: stage buffer; rows 2c and 2c+1 of this lane: m[], l[]; o: O^T
 * accumulators [NMT][4].
 */
template <int DT, int D>
KVK_DEV void attn_tile(const kvk_cu_attn &p, const kvk_attn_ctx &x,
		       const kvk_attn_smem<DT, D> &sm, const uint8_t *tb,
		       uint32_t p0, uint32_t lane, float m[2], float lsum[2],
		       float o[][4])
{
	typedef kvk_attn_cfg<DT, D> C;
	const bool BF = C::BF;
	const uint32_t g = lane >> 2, c = lane & 3;
	const uint8_t *kt = tb, *vt = tb + KVK_CU_TILE * C::RS;
	const uint8_t *sc = tb + 2 * KVK_CU_TILE * C::RS;
	const uint32_t posA = p0 + g, posB = p0 + g + 8;
	float s[4];

	/* ---- scores S^T = K . Q^T ---- */
	if (DT == KVK_INT4) {
		float tot[4] = { 0, 0, 0, 0 };

#pragma unroll
		for (int G = 0; G < D / 32; G++) {
			float ah[4] = { 0, 0, 0, 0 }, al[4] = { 0, 0, 0, 0 };
			float skA, skB;

			uint32_t a[2][4];

			k_frag_int4<D>(kt, G, lane, a);
#pragma unroll
			for (int s2 = 0; s2 < 2; s2++) {
				const uint4 q = sm.qf[(2 * G + s2) * 32 + lane];

				mma<false>(ah, a[s2], q.x, q.y);
				mma<false>(al, a[s2], q.z, q.w);
			}
			skA = int4_scale<D>(sc + g * C::SB, p.l, x.kmeta, posA, G);
			skB = int4_scale<D>(sc + (g + 8) * C::SB, p.l, x.kmeta,
					    posB, G);
			tot[0] += (ah[0] + al[0]) * skA;
			tot[1] += (ah[1] + al[1]) * skA;
			tot[2] += (ah[2] + al[2]) * skB;
			tot[3] += (ah[3] + al[3]) * skB;
		}
#pragma unroll
		for (int i = 0; i < 4; i++)
			s[i] = tot[i];
	} else {
		float ah0[4] = { 0, 0, 0, 0 }, ah1[4] = { 0, 0, 0, 0 };
		float al0[4] = { 0, 0, 0, 0 }, al1[4] = { 0, 0, 0, 0 };

#pragma unroll
		for (int ks = 0; ks < C::NKS; ks++) {
			uint32_t a[4];
			const uint4 q = sm.qf[ks * 32 + lane];

			k_frag<DT, D>(kt, ks, lane, a);
			if (ks & 1) {
				mma<BF>(ah1, a, q.x, q.y);
				mma<BF>(al1, a, q.z, q.w);
			} else {
				mma<BF>(ah0, a, q.x, q.y);
				mma<BF>(al0, a, q.z, q.w);
			}
		}
#pragma unroll
		for (int i = 0; i < 4; i++)
			s[i] = (ah0[i] + ah1[i]) + (al0[i] + al1[i]);
		if (DT == KVK_FP8 || DT == KVK_INT8) {
			const float skA = ((const float *)sc)[g];
			const float skB = ((const float *)sc)[g + 8];

			s[0] *= skA;
			s[1] *= skA;
			s[2] *= skB;
			s[3] *= skB;
		}
	}
	/* query rows 2c, 2c+1: undo the power-of-two prescale */
	{
		const float e0 = sm.rfac[2 * c], e1 = sm.rfac[2 * c + 1];

		s[0] *= e0;
		s[1] *= e1;
		s[2] *= e0;
		s[3] *= e1;
	}
	if (posA >= x.tmain) {
		s[0] = -INFINITY;
		s[1] = -INFINITY;
	}
	if (posB >= x.tmain) {
		s[2] = -INFINITY;
		s[3] = -INFINITY;
	}

	/* ---- softmax: one max and one rescale per tile ---- */
	float alpha[2], pr[4];

#pragma unroll
	for (int r = 0; r < 2; r++) {
		float mt = fmaxf(s[r], s[r + 2]), mn;

		mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 4));
		mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 8));
		mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
		mn = fmaxf(m[r], mt);
		if (mn == -INFINITY) {
			alpha[r] = 1.0f;
			pr[r] = pr[r + 2] = 0.0f;
		} else {
			alpha[r] = ex2(m[r] - mn);
			pr[r] = ex2(s[r] - mn);
			pr[r + 2] = ex2(s[r + 2] - mn);
		}
		m[r] = mn;
		lsum[r] = lsum[r] * alpha[r] + pr[r] + pr[r + 2];
	}

	/* ---- values O^T += V^T . P^T ---- */
	if (DT == KVK_INT4) {
		const uint32_t rA0 = 2 * c, rA1 = 2 * c + 1;
		const uint32_t rB0 = 2 * c + 8, rB1 = 2 * c + 9;

#pragma unroll
		for (int G = 0; G < D / 32; G++) {
			const uint8_t *vs = sc + KVK_CU_TILE * C::SB;
			const float svA = int4_scale<D>(vs + g * C::SB, p.l,
							x.vmeta, posA, G);
			const float svB = int4_scale<D>(vs + (g + 8) * C::SB,
							p.l, x.vmeta, posB, G);
			const int E = tile_exp(warp_max_u32(__float_as_uint(
						fmaxf(svA, svB))));
			const float down = pow2i(-E), up = pow2i(E);
			float pb[4];
			uint32_t bh[2], bl[2];

			pb[0] = pr[0] * svA * down;
			pb[1] = pr[1] * svA * down;
			pb[2] = pr[2] * svB * down;
			pb[3] = pr[3] * svB * down;
#pragma unroll
			for (int hb = 0; hb < 2; hb++) {
				uint16_t h0 = to_mma<false>(pb[2 * hb]);
				uint16_t h1 = to_mma<false>(pb[2 * hb + 1]);
				uint16_t l0 = to_mma<false>(pb[2 * hb] -
							    from_mma<false>(h0));
				uint16_t l1 = to_mma<false>(pb[2 * hb + 1] -
							    from_mma<false>(h1));

				bh[hb] = movm_t(pack2(h0, h1));
				bl[hb] = movm_t(pack2(l0, l1));
			}
			/* the 4 nibbles (dimensions 32 G + 4 g + n) of
			 * positions 2c, 2c + 1 in one word, of 2c + 8, 2c + 9
			 * in another: pair k of s4x8_to_f16x2 is dimension
			 * 32 G + 4 g + k of both positions */
			const uint32_t off = 16 * G + 2 * g;
			const uint32_t y0 = *(const uint16_t *)(vt + rA0 * C::RS + off);
			const uint32_t y1 = *(const uint16_t *)(vt + rA1 * C::RS + off);
			const uint32_t y2 = *(const uint16_t *)(vt + rB0 * C::RS + off);
			const uint32_t y3 = *(const uint16_t *)(vt + rB1 * C::RS + off);
			uint32_t fA[4], fB[4];

			s4x8_to_f16x2(__byte_perm(y0, y1, 0x5410), fA);
			s4x8_to_f16x2(__byte_perm(y2, y3, 0x5410), fB);
#pragma unroll
			for (int hh = 0; hh < 2; hh++) {
				const int i = 2 * G + hh;
				const uint32_t a[4] = { fA[2 * hh], fA[2 * hh + 1],
							fB[2 * hh], fB[2 * hh + 1] };
				float acc[4] = { 0, 0, 0, 0 };

				mma<false>(acc, a, bh[0], bh[1]);
				mma<false>(acc, a, bl[0], bl[1]);
				o[i][0] = o[i][0] * alpha[0] + acc[0] * up;
				o[i][1] = o[i][1] * alpha[1] + acc[1] * up;
				o[i][2] = o[i][2] * alpha[0] + acc[2] * up;
				o[i][3] = o[i][3] * alpha[1] + acc[3] * up;
			}
		}
		return;
	}
	{
		float up = 1.0f;
		float pb[4];
		uint32_t bh[2], bl[2];

		if (DT == KVK_FP8 || DT == KVK_INT8) {
			const float *vs = (const float *)(sc + KVK_CU_TILE * 4);
			const float svA = vs[g], svB = vs[g + 8];
			const int E = tile_exp(warp_max_u32(__float_as_uint(
						fmaxf(svA, svB))));
			const float down = pow2i(-E);

			up = pow2i(E);
			pb[0] = pr[0] * svA * down;
			pb[1] = pr[1] * svA * down;
			pb[2] = pr[2] * svB * down;
			pb[3] = pr[3] * svB * down;
		} else {
#pragma unroll
			for (int i = 0; i < 4; i++)
				pb[i] = pr[i];
		}
#pragma unroll
		for (int hb = 0; hb < 2; hb++) {
			uint16_t h0 = to_mma<BF>(pb[2 * hb]);
			uint16_t h1 = to_mma<BF>(pb[2 * hb + 1]);
			uint16_t l0 = to_mma<BF>(pb[2 * hb] - from_mma<BF>(h0));
			uint16_t l1 = to_mma<BF>(pb[2 * hb + 1] - from_mma<BF>(h1));

			bh[hb] = movm_t(pack2(h0, h1));
			bl[hb] = movm_t(pack2(l0, l1));
		}
		if (DT == KVK_BF16) {
			const uint32_t t = (lane & 7) + ((lane >> 4) << 3);
			const uint32_t dh = ((lane >> 3) & 1) * 8;

#pragma unroll
			for (int i = 0; i < C::NMT; i++) {
				uint32_t a[4];
				float acc[4] = { 0, 0, 0, 0 };

				ldsm_x4_t(vt + t * C::RS + (16 * i + dh) * 2, a);
				mma<true>(acc, a, bh[0], bh[1]);
				mma<true>(acc, a, bl[0], bl[1]);
				o[i][0] = o[i][0] * alpha[0] + acc[0];
				o[i][1] = o[i][1] * alpha[1] + acc[1];
				o[i][2] = o[i][2] * alpha[0] + acc[2];
				o[i][3] = o[i][3] * alpha[1] + acc[3];
			}
		} else {
			/* rows (positions) 2c, 2c+1, 2c+8, 2c+9; lane group g
			 * owns dimensions [g D/8, (g+1) D/8) */
			constexpr int NW = D / 32;	/* 32-bit words per row */
			uint32_t r0[NW], r1[NW], r2[NW], r3[NW];
			const uint32_t off = g * (D / 8);

#pragma unroll
			for (int w = 0; w < NW; w++) {
				r0[w] = *(const uint32_t *)(vt + (2 * c) * C::RS + off + 4 * w);
				r1[w] = *(const uint32_t *)(vt + (2 * c + 1) * C::RS + off + 4 * w);
				r2[w] = *(const uint32_t *)(vt + (2 * c + 8) * C::RS + off + 4 * w);
				r3[w] = *(const uint32_t *)(vt + (2 * c + 9) * C::RS + off + 4 * w);
			}
#pragma unroll
			for (int i = 0; i < C::NMT; i++) {
				const int w = (2 * i) / 4, b = (2 * i) % 4;
				const uint32_t sel = b | ((4 + b) << 4) |
						     ((b + 1) << 8) |
						     ((5 + b) << 12);
				const uint32_t xA = __byte_perm(r0[w], r1[w], sel);
				const uint32_t xB = __byte_perm(r2[w], r3[w], sel);
				uint32_t a[4];
				float acc[4] = { 0, 0, 0, 0 };

				a[0] = cvt8x2<DT>(xA);
				a[1] = cvt8x2<DT>(xA >> 16);
				a[2] = cvt8x2<DT>(xB);
				a[3] = cvt8x2<DT>(xB >> 16);
				mma<false>(acc, a, bh[0], bh[1]);
				mma<false>(acc, a, bl[0], bl[1]);
				o[i][0] = o[i][0] * alpha[0] + acc[0] * up;
				o[i][1] = o[i][1] * alpha[1] + acc[1] * up;
				o[i][2] = o[i][2] * alpha[0] + acc[2] * up;
				o[i][3] = o[i][3] * alpha[1] + acc[3] * up;
			}
		}
	}
}

/*
 * Positions a row block attends beyond what every row of it attends
 * (multi-token attention: later query tokens see a few more positions):
 * exact FP32 updates, one position at a time, of the merged row state
 * (mfin, lfin, o in fo) by the warp that owns the row.
 */
template <int DT, int D>
KVK_DEV void attn_ragged(const kvk_cu_attn &p, const kvk_attn_ctx &x,
			 const kvk_attn_smem<DT, D> &sm, float *fo, uint32_t r,
			 uint32_t lane)
{
	const kvk_cu_layout &l = p.l;
	const uint32_t G = p.group, nq1 = p.n_q ? p.n_q : 1;
	const uint32_t xr = x.rb * KVK_CU_ROWS + r;
	const uint32_t qi = xr / G, hq = x.h * G + xr % G;
	const float *q = (const float *)p.q +
		(((uint64_t)x.seq * nq1 + qi) * p.q_heads + hq) * D;
	const uint32_t *table = (const uint32_t *)p.tables +
				(uint64_t)x.seq * p.mbps;
	const int lim = sm.rlim[r];
	uint32_t t = x.tmain > x.t0 ? x.tmain : x.t0;
	float M = sm.fin[r], L = sm.fin[KVK_CU_ROWS + r];

	for (; (int)t <= lim && t < x.tend; t++) {
		const uint8_t *blk = (const uint8_t *)p.pool +
			(uint64_t)table[t / l.tokens_per_block] * l.block_bytes;
		const uint32_t slot = t % l.tokens_per_block;
		const uint8_t *kr = blk + row_off(l, 0, x.h, slot);
		const uint8_t *vr = blk + row_off(l, 1, x.h, slot);
		const uint8_t *kg = blk + scale_off(l, 0, x.h, slot);
		const uint8_t *vg = blk + scale_off(l, 1, x.h, slot);
		float sk = 1.0f, sv = 1.0f, sc = 0.0f, mn, cf, pw;

		if (DT == KVK_FP8 || DT == KVK_INT8) {
			sk = *(const float *)kg;
			sv = *(const float *)vg;
		}
		for (uint32_t d = lane; d < D; d += 32)
			sc += q[d] * p.scale * load_elem(DT, kr, d, sk, kg);
		for (int off = 16; off > 0; off >>= 1)
			sc += __shfl_xor_sync(0xffffffffu, sc, off);
		mn = fmaxf(M, sc);
		if (sc != sc)
			mn = sc;
		cf = M == -INFINITY ? 0.0f : ex2(M - mn);
		pw = ex2(sc - mn);
		for (uint32_t d = lane; d < D; d += 32)
			fo[d] = fo[d] * cf + pw * load_elem(DT, vr, d, sv, vg);
		L = L * cf + pw;
		M = mn;
	}
	__syncwarp();
	if (lane == 0) {
		sm.fin[r] = M;
		sm.fin[KVK_CU_ROWS + r] = L;
	}
}

template <int DT, int D>
KVK_DEV void attn(const kvk_cu_attn &p)
{
	typedef kvk_attn_cfg<DT, D> C;
	const kvk_cu_layout &l = p.l;
	const kvk_attn_smem<DT, D> sm = attn_smem<DT, D>();
	const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t G = p.group, nq1 = p.n_q ? p.n_q : 1;
	const uint32_t nrows = nq1 * G;
	kvk_attn_ctx x;
	uint32_t ctx;

	x.rb = blockIdx.x % p.row_blocks;
	x.h = (blockIdx.x / p.row_blocks) % l.kv_heads;
	x.seq = blockIdx.x / p.row_blocks / l.kv_heads;
	x.split = blockIdx.y;
	ctx = ((const uint32_t *)p.ctx)[x.seq];
	x.lim_min = 0x7fffffff;
	x.lim_max = -1;
	for (uint32_t r = 0; r < KVK_CU_ROWS; r++) {
		uint32_t xr = x.rb * KVK_CU_ROWS + r;
		int lim;

		if (xr >= nrows)
			continue;
		lim = p.n_q ? (int)(ctx - p.n_q + xr / G) : (int)ctx - 1;
		x.lim_min = lim < x.lim_min ? lim : x.lim_min;
		x.lim_max = lim > x.lim_max ? lim : x.lim_max;
	}
	x.t0 = x.split * p.chunk;
	x.tend = x.t0 + p.chunk;
	if ((int)x.tend > x.lim_max + 1)
		x.tend = (uint32_t)(x.lim_max + 1);
	if (x.tend < x.t0)
		x.tend = x.t0;
	x.tmain = x.tend;
	if ((int)x.tmain > x.lim_min + 1)
		x.tmain = x.lim_min + 1 > (int)x.t0 ? (uint32_t)(x.lim_min + 1) :
			  x.t0;
	x.first = x.t0 / l.tokens_per_block;
	x.koff = row_off(l, 0, x.h, 0);
	x.voff = row_off(l, 1, x.h, 0);
	if (DT == KVK_INT4) {
		x.kmeta = ((uint64_t)l.layer * 2 * l.kv_heads + x.h) *
			  l.tokens_per_block;
		x.vmeta = (((uint64_t)l.layer * 2 + 1) * l.kv_heads + x.h) *
			  l.tokens_per_block;
	} else {
		x.kmeta = scale_off(l, 0, x.h, 0);
		x.vmeta = scale_off(l, 1, x.h, 0);
	}

	/* block-table slice of this split */
	if (x.tmain > x.t0) {
		const uint32_t n = (x.tmain - 1) / l.tokens_per_block - x.first + 1;
		const uint32_t *table = (const uint32_t *)p.tables +
					(uint64_t)x.seq * p.mbps + x.first;

		for (uint32_t i = tid; i < n; i += KVK_CU_THREADS)
			sm.tab[i] = table[i];
	}
	/* per-row exponent of the FP16 prescale, and limits */
	for (uint32_t r = warp; r < KVK_CU_ROWS; r += KVK_CU_WARPS) {
		const uint32_t xr = x.rb * KVK_CU_ROWS + r;
		float mx = 0.0f;

		if (xr < nrows) {
			const uint32_t qi = xr / G, hq = x.h * G + xr % G;
			const float *q = (const float *)p.q +
				(((uint64_t)x.seq * nq1 + qi) * p.q_heads + hq) * D;

			for (uint32_t d = lane; d < D; d += 32) {
				float v = fabsf(q[d] * p.scale);

				if (v <= 3.0e38f && v > mx)
					mx = v;
			}
		}
		for (int off = 16; off > 0; off >>= 1)
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
		if (lane == 0) {
			int e = 0;

			if (!C::BF && mx > 0.0f) {
				/* mx = f 2^E, f in [0.5, 1): q' = q 2^-(E-15)
				 * has its largest element in [2^14, 2^15) */
				const int be = (__float_as_uint(mx) >> 23) & 0xff;

				e = (be ? be - 126 : -126) - 15;
				e = e < -126 ? -126 : e;
			}
			sm.rexp[r] = e;
			sm.rfac[r] = pow2i(e);
			sm.rlim[r] = xr < nrows ? (p.n_q ? (int)(ctx - p.n_q +
				     xr / G) : (int)ctx - 1) : -1;
		}
	}
	__syncthreads();
	/* query fragments (B operand), hi and lo, prescaled */
	for (uint32_t idx = tid; idx < C::NKS * 32; idx += KVK_CU_THREADS) {
		const uint32_t ks = idx / 32, ln = idx % 32;
		const uint32_t r = ln >> 2, cc = ln & 3;
		const uint32_t xr = x.rb * KVK_CU_ROWS + r;
		uint16_t hi[4], lo[4];

		for (int k = 0; k < 4; k++) {
			float v = 0.0f;

			if (xr < nrows) {
				const uint32_t qi = xr / G, hq = x.h * G + xr % G;
				const float *q = (const float *)p.q +
					(((uint64_t)x.seq * nq1 + qi) *
					 p.q_heads + hq) * D;
				const uint32_t d = q_dim<DT, D>(ks, cc, k & 1, k >> 1);

				v = ldexpf(q[d] * p.scale, -sm.rexp[r]);
			}
			hi[k] = to_mma<C::BF>(v);
			lo[k] = to_mma<C::BF>(v - from_mma<C::BF>(hi[k]));
		}
		sm.qf[idx] = make_uint4(pack2(hi[0], hi[1]), pack2(hi[2], hi[3]),
					pack2(lo[0], lo[1]), pack2(lo[2], lo[3]));
	}
	__syncthreads();

	/* ---- main loop: this warp's tiles, S-stage cp.async pipeline ---- */
	float m[2] = { -INFINITY, -INFINITY }, lsum[2] = { 0.0f, 0.0f };
	float o[C::NMT][4];

#pragma unroll
	for (int i = 0; i < C::NMT; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	{
		const uint32_t ntiles = x.tmain > x.t0 ?
			(x.tmain - x.t0 + KVK_CU_TILE - 1) / KVK_CU_TILE : 0;
		const uint32_t mine = ntiles > warp ?
			(ntiles - warp + KVK_CU_WARPS - 1) / KVK_CU_WARPS : 0;
		uint8_t *wt = sm.tiles + warp * C::S * C::TB;

#pragma unroll
		for (int s = 0; s < C::S - 1; s++) {
			if ((uint32_t)s < mine)
				attn_issue<DT, D>(p, x, sm, wt + s * C::TB,
					x.t0 + (warp + s * KVK_CU_WARPS) * KVK_CU_TILE,
					warp, lane);
			cp_async_commit();
		}
		for (uint32_t i = 0; i < mine; i++) {
			const uint32_t j = i + C::S - 1;

			cp_async_wait<C::S - 2>();
			__syncwarp();
			if (j < mine)
				attn_issue<DT, D>(p, x, sm, wt + (j % C::S) * C::TB,
					x.t0 + (warp + j * KVK_CU_WARPS) * KVK_CU_TILE,
					warp, lane);
			cp_async_commit();
			attn_tile<DT, D>(p, x, sm, wt + (i % C::S) * C::TB,
				x.t0 + (warp + i * KVK_CU_WARPS) * KVK_CU_TILE,
				lane, m, lsum, o);
		}
		cp_async_wait<0>();
	}

	/* ---- merge the warps ---- */
#pragma unroll
	for (int r = 0; r < 2; r++) {
		lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 4);
		lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 8);
		lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 16);
	}
	__syncthreads();	/* every warp is done with its tiles */
	{
		float *mw = (float *)sm.tiles;	/* [warps][ROWS][D + 2] */
		const uint32_t g = lane >> 2, c = lane & 3;
		float *w0 = mw + (warp * KVK_CU_ROWS + 2 * c) * (D + 2);
		float *w1 = w0 + (D + 2);

		if (g == 0) {
			w0[0] = m[0];
			w0[1] = lsum[0];
			w1[0] = m[1];
			w1[1] = lsum[1];
		}
#pragma unroll
		for (int i = 0; i < C::NMT; i++) {
			const uint32_t dA = o_dim<DT, D>(i, g, 0);
			const uint32_t dB = o_dim<DT, D>(i, g, 1);

			w0[2 + dA] = o[i][0];
			w1[2 + dA] = o[i][1];
			w0[2 + dB] = o[i][2];
			w1[2 + dB] = o[i][3];
		}
		__syncthreads();
		if (tid < KVK_CU_ROWS) {
			float M = -INFINITY, L = 0.0f;

			for (int w = 0; w < KVK_CU_WARPS; w++)
				M = fmaxf(M, mw[(w * KVK_CU_ROWS + tid) * (D + 2)]);
			if (M != -INFINITY)
				for (int w = 0; w < KVK_CU_WARPS; w++) {
					const float *e = mw + (w * KVK_CU_ROWS + tid) *
							 (D + 2);

					if (e[0] != -INFINITY)
						L += e[1] * ex2(e[0] - M);
				}
			sm.fin[tid] = M;
			sm.fin[KVK_CU_ROWS + tid] = L;
		}
		__syncthreads();
		for (uint32_t idx = tid; idx < KVK_CU_ROWS * D;
		     idx += KVK_CU_THREADS) {
			const uint32_t r = idx / D, d = idx % D;
			const float M = sm.fin[r];
			float acc = 0.0f;

			if (M != -INFINITY)
				for (int w = 0; w < KVK_CU_WARPS; w++) {
					const float *e = mw + (w * KVK_CU_ROWS + r) *
							 (D + 2);

					if (e[0] != -INFINITY)
						acc += e[2 + d] * ex2(e[0] - M);
				}
			mw[r * (D + 2) + 2 + d] = acc;
		}
		__syncthreads();
		/* the last positions some rows see and others do not */
		if (x.lim_max > x.lim_min && x.tend > x.tmain) {
			for (uint32_t r = warp; r < KVK_CU_ROWS; r += KVK_CU_WARPS)
				if (sm.rlim[r] >= (int)x.tmain)
					attn_ragged<DT, D>(p, x, sm,
							   mw + r * (D + 2) + 2,
							   r, lane);
			__syncthreads();
		}
		if (p.nsplit == 1) {
			for (uint32_t idx = tid; idx < KVK_CU_ROWS * D;
			     idx += KVK_CU_THREADS) {
				const uint32_t r = idx / D, d = idx % D;
				const uint32_t xr = x.rb * KVK_CU_ROWS + r;
				const float L = sm.fin[KVK_CU_ROWS + r];
				float *out;

				if (xr >= nrows)
					continue;
				out = (float *)p.out + (((uint64_t)x.seq * nq1 +
					xr / G) * p.q_heads + x.h * G + xr % G) * D;
				out[d] = L != 0.0f ? mw[r * (D + 2) + 2 + d] / L :
					 0.0f;
			}
		} else {
			float *pt = (float *)p.parts + ((uint64_t)blockIdx.x *
				    p.nsplit + x.split) * KVK_CU_ROWS * (D + 2);

			for (uint32_t idx = tid; idx < KVK_CU_ROWS * (D + 2);
			     idx += KVK_CU_THREADS) {
				const uint32_t r = idx / (D + 2), e = idx % (D + 2);

				pt[idx] = e < 2 ? sm.fin[e * KVK_CU_ROWS + r] :
					  mw[idx];
			}
		}
	}
}

#define ATTN(DTN, DT, D) \
	extern "C" __global__ void __launch_bounds__(KVK_CU_THREADS, 2) \
	kvk_attn_##DTN##_d##D(const kvk_cu_attn p) \
	{ \
		attn<DT, D>(p); \
	}
#define ATTN_DT(DTN, DT) ATTN(DTN, DT, 32) ATTN(DTN, DT, 64) \
	ATTN(DTN, DT, 128) ATTN(DTN, DT, 256)

ATTN_DT(bf16, KVK_BF16)
ATTN_DT(fp8, KVK_FP8)
ATTN_DT(int8, KVK_INT8)
ATTN_DT(int4, KVK_INT4)

/* Merge the splits of one (sequence, kv head, row block). */
extern "C" __global__ void __launch_bounds__(KVK_CU_THREADS)
kvk_merge(const kvk_cu_merge p)
{
	const uint32_t bx = blockIdx.x, rb = bx % p.row_blocks;
	const uint32_t h = (bx / p.row_blocks) % p.kv_heads;
	const uint32_t seq = bx / p.row_blocks / p.kv_heads;
	const uint32_t D = p.head_dim, G = p.group, nq1 = p.n_q ? p.n_q : 1;
	const uint64_t rs = D + 2, ss = KVK_CU_ROWS * rs;
	const float *parts = (const float *)p.parts + (uint64_t)bx * p.nsplit * ss;

	for (uint32_t idx = threadIdx.x; idx < KVK_CU_ROWS * D;
	     idx += blockDim.x) {
		const uint32_t r = idx / D, d = idx % D;
		const uint32_t xr = rb * KVK_CU_ROWS + r;
		float M = -INFINITY, L = 0.0f, acc = 0.0f;
		float *out;
		uint32_t s;

		if (xr >= nq1 * G)
			continue;
		out = (float *)p.out + (((uint64_t)seq * nq1 + xr / G) *
					p.q_heads + h * G + xr % G) * D;
		for (s = 0; s < p.nsplit; s++) {
			float mm = parts[s * ss + r * rs];

			if (mm > M || mm != mm)
				M = mm;
		}
		if (M == -INFINITY) {
			out[d] = 0.0f;
			continue;
		}
		for (s = 0; s < p.nsplit; s++) {
			const float *e = parts + s * ss + r * rs;
			float w;

			if (e[0] == -INFINITY)
				continue;
			w = ex2(e[0] - M);
			L += e[1] * w;
			acc += e[2 + d] * w;
		}
		out[d] = L != 0.0f ? acc / L : 0.0f;
	}
}

/* Read bandwidth probe. */
extern "C" __global__ void __launch_bounds__(KVK_CU_BW_THREADS)
kvk_read_bw(const kvk_cu_bw p)
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

/*
 * Self-test of the primitives, one warp.  in: A[16][16] and B[16][8]
 * (16-bit values), M[8][8] (16-bit), then 256 bytes 0..255 twice.
 * Words per lane (out[lane][w]):
 *   0-3   D = A.B as BF16 mma (fragments loaded by the PTX formulas)
 *   4-7   the same as FP16 mma
 *   8-11  ldmatrix.x4 of A stored row-major (K-tile addressing)
 *   12-15 ldmatrix.x4.trans of A^T stored row-major (V-tile addressing)
 *   16    movmatrix.trans of M in C-fragment order
 *   17-20 FP8 E4M3 -> FP16 of bytes 8 lane + 0..7 (pairs)
 *   21-24 INT8 -> FP16 of bytes 8 lane + 0..7 (pairs)
 *   25-28 INT4 -> FP16 of the word of bytes (9 lane + 64 k) % 256,
 *         k = 0..3 (every nibble value at every position): pairs of
 *         nibbles (k, k + 4)
 *   29-30 cp.async: 16 bytes copied, 16 bytes zero-filled (xor of words)
 *   31    cp.async 4-byte zero fill (0 expected)
 */
extern "C" __global__ void __launch_bounds__(32)
kvk_selftest(const kvk_cu_selftest p)
{
	__shared__ __align__(16) uint16_t sa[16 * 24];
	__shared__ __align__(16) uint16_t st[16 * 24];
	__shared__ __align__(16) uint32_t sc[16];
	const uint16_t *in = (const uint16_t *)p.in;
	const uint16_t *A = in, *B = in + 256, *M = in + 384;
	const uint8_t *bytes = (const uint8_t *)(in + 448);
	uint32_t *out = (uint32_t *)p.out + threadIdx.x * KVK_CU_SELFTEST_WORDS;
	const uint32_t lane = threadIdx.x, g = lane >> 2, c = lane & 3;
	uint32_t a[4], b0, b1, r[4];
	float d[4];

	a[0] = pack2(A[g * 16 + 2 * c], A[g * 16 + 2 * c + 1]);
	a[1] = pack2(A[(g + 8) * 16 + 2 * c], A[(g + 8) * 16 + 2 * c + 1]);
	a[2] = pack2(A[g * 16 + 2 * c + 8], A[g * 16 + 2 * c + 9]);
	a[3] = pack2(A[(g + 8) * 16 + 2 * c + 8], A[(g + 8) * 16 + 2 * c + 9]);
	b0 = pack2(B[(2 * c) * 8 + g], B[(2 * c + 1) * 8 + g]);
	b1 = pack2(B[(2 * c + 8) * 8 + g], B[(2 * c + 9) * 8 + g]);
	d[0] = d[1] = d[2] = d[3] = 0.0f;
	mma_bf16(d, a, b0, b1);
	for (int i = 0; i < 4; i++)
		out[i] = __float_as_uint(d[i]);
	d[0] = d[1] = d[2] = d[3] = 0.0f;
	mma_f16(d, a, b0, b1);
	for (int i = 0; i < 4; i++)
		out[4 + i] = __float_as_uint(d[i]);
	/* A row-major into sa (row stride 24), A^T row-major into st */
	for (uint32_t i = lane; i < 256; i += 32) {
		sa[(i / 16) * 24 + i % 16] = A[i];
		st[(i % 16) * 24 + i / 16] = A[i];
	}
	__syncwarp();
	{
		const uint32_t t = (lane & 7) + ((lane >> 3) & 1) * 8;
		const uint32_t dd = (lane >> 4) * 8;

		ldsm_x4(sa + t * 24 + dd, r);
		for (int i = 0; i < 4; i++)
			out[8 + i] = r[i];
	}
	{
		const uint32_t t = (lane & 7) + ((lane >> 4) << 3);
		const uint32_t dh = ((lane >> 3) & 1) * 8;

		ldsm_x4_t(st + t * 24 + dh, r);
		for (int i = 0; i < 4; i++)
			out[12 + i] = r[i];
	}
	out[16] = movm_t(pack2(M[g * 8 + 2 * c], M[g * 8 + 2 * c + 1]));
	for (int k = 0; k < 4; k++) {
		const uint32_t x0 = bytes[8 * lane + 2 * k];
		const uint32_t x1 = bytes[8 * lane + 2 * k + 1];

		out[17 + k] = e4m3x2_to_f16x2(x0 | (x1 << 8));
		out[21 + k] = s8x2_to_f16x2(x0 | (x1 << 8));
	}
	{
		uint32_t w = 0;

		for (int k = 0; k < 4; k++)
			w |= (uint32_t)bytes[(9 * lane + 64 * k) & 255] << (8 * k);
		s4x8_to_f16x2(w, out + 25);
	}
	sc[lane % 16] = 0xffffffffu;
	__syncwarp();
	if (lane == 0) {
		cp_async16(sc, bytes, 16);
		cp_async16(sc + 4, bytes, 0);
		cp_async4(sc + 8, bytes, 0);
	}
	cp_async_commit();
	cp_async_wait<0>();
	__syncwarp();
	out[29] = sc[0] ^ sc[1] ^ sc[2] ^ sc[3];
	out[30] = sc[4] | sc[5] | sc[6] | sc[7];
	out[31] = sc[8];
}

/* The edit ops (splice, compact, score). */
#include "kvkern_edit.cu"
