/* SPDX-License-Identifier: MIT */
/*
 * kvkern_simd.h - the attention inner loops, written once with GCC vector
 * extensions and compiled once per instruction set: the including file
 * defines VW (floats per vector: 16 for AVX-512, 8 for AVX2, 4 for the
 * SSE2 baseline) and SIMD_OPS (the name of its struct kvk_simd_ops), and
 * is built with the matching -m flags.  Nothing here runs before the
 * run-time CPU check in kvkern_cpu.c picked this instruction set.
 *
 * One item = one kv_head of one sequence, R <= 16 query rows (the query
 * heads of its group, times a few query tokens for prefill) and a range of
 * cache positions.  Per tile of VW positions: each K row is converted once
 * (in registers) and dotted with every row's query; the VW dot-product
 * vectors of a row are reduced together by a transpose-add tree; an online
 * softmax keeps (max, sum) per row; each V row is converted once and
 * accumulated into all R outputs.  KV bytes are thus read once per item.
 */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>

#include "kvkern_internal.h"

#if VW == 16
#define MVW(f, w) f(0, w), f(1, w), f(2, w), f(3, w), f(4, w), f(5, w), \
	f(6, w), f(7, w), f(8, w), f(9, w), f(10, w), f(11, w), f(12, w), \
	f(13, w), f(14, w), f(15, w)
#elif VW == 8
#define MVW(f, w) f(0, w), f(1, w), f(2, w), f(3, w), f(4, w), f(5, w), \
	f(6, w), f(7, w)
#elif VW == 4
#define MVW(f, w) f(0, w), f(1, w), f(2, w), f(3, w)
#else
#error "VW must be 4, 8 or 16"
#endif

typedef float vf __attribute__((vector_size(VW * 4), aligned(4)));
typedef int32_t vi __attribute__((vector_size(VW * 4), aligned(4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4), aligned(4)));

#define LO(l, w) ((((l) % (2 * (w))) < (w)) ? (l) : VW + (l) - (w))
#define HI(l, w) ((((l) % (2 * (w))) < (w)) ? (l) + (w) : VW + (l))
#define SH(l, w) (((l) & 1) * 4)
#define ROT(l, w) (((l) + (w)) % VW)
#define ROTI(l, w) (l)

static inline __attribute__((always_inline)) vf splat(float x)
{
	return (vf){} + x;
}

static inline __attribute__((always_inline)) vf sel(vi m, vf a, vf b)
{
	return (vf)(((vi)a & m) | ((vi)b & ~m));
}

static inline __attribute__((always_inline)) vf ld(const float *p)
{
	vf x;

	memcpy(&x, p, sizeof(x));
	return x;
}

static inline __attribute__((always_inline)) void st(float *p, vf x)
{
	memcpy(p, &x, sizeof(x));
}

static inline __attribute__((always_inline)) float hsum(vf x)
{
	float s = 0.0f;
	int i;

	for (i = 0; i < VW; i++)
		s += x[i];
	return s;
}

/* Horizontal maximum; NaN if any lane is NaN (NaN wins every step). */
static inline __attribute__((always_inline)) vf vmax_nan(vf x, vf y)
{
	return sel((x > y) | (x != x), x, y);
}

static inline __attribute__((always_inline)) float hmax(vf x)
{
#if VW >= 16
	x = vmax_nan(x, __builtin_shuffle(x, (vi){MVW(ROT, 8)}));
#endif
#if VW >= 8
	x = vmax_nan(x, __builtin_shuffle(x, (vi){MVW(ROT, 4)}));
#endif
	x = vmax_nan(x, __builtin_shuffle(x, (vi){MVW(ROT, 2)}));
	x = vmax_nan(x, __builtin_shuffle(x, (vi){MVW(ROT, 1)}));
	return x[0];
}

/* exp(x) for x <= 0 (x < -87.3 gives 0); ~1e-7 relative error. */
static inline __attribute__((always_inline)) vf vexp(vf x)
{
	const float magic = 12582912.0f;	/* 1.5 * 2^23 */
	vi under = x < splat(-87.0f);
	vf t, n, r, p;
	vi ni;

	x = sel(under, splat(-87.0f), x);
	t = x * 1.44269504088896341f + magic;
	n = t - magic;
	ni = (vi)t - (vi)splat(magic);
	r = x - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	p = splat(1.0f / 720.0f);
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	p = p * (vf)((ni + 127) << 23);
	return sel(under, splat(0.0f), p);
}

/* out[j] = sum of the lanes of a[j], j < VW. */
static inline __attribute__((always_inline)) vf reduce_vw(vf *a)
{
	int t;

#if VW >= 16
	for (t = 0; t < 8; t++)
		a[t] = __builtin_shuffle(a[t], a[t + 8], (vi){MVW(LO, 8)}) +
		       __builtin_shuffle(a[t], a[t + 8], (vi){MVW(HI, 8)});
#endif
#if VW >= 8
	for (t = 0; t < 4; t++)
		a[t] = __builtin_shuffle(a[t], a[t + 4], (vi){MVW(LO, 4)}) +
		       __builtin_shuffle(a[t], a[t + 4], (vi){MVW(HI, 4)});
#endif
	for (t = 0; t < 2; t++)
		a[t] = __builtin_shuffle(a[t], a[t + 2], (vi){MVW(LO, 2)}) +
		       __builtin_shuffle(a[t], a[t + 2], (vi){MVW(HI, 2)});
	return __builtin_shuffle(a[0], a[1], (vi){MVW(LO, 1)}) +
	       __builtin_shuffle(a[0], a[1], (vi){MVW(HI, 1)});
}

/*
 * Load VW elements as 32-bit lanes: zero-extended 16-bit (bf16), zero- or
 * sign-extended bytes, or INT4 nibbles duplicated per lane.  GCC's
 * generic __builtin_convertvector from narrow vectors goes through scalar
 * code, so the wide ISAs use the extension intrinsics.
 */
#if VW == 16
static inline __attribute__((always_inline)) vu ld_u16(const uint8_t *p)
{
	return (vu)_mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p));
}
static inline __attribute__((always_inline)) vu ld_u8(const uint8_t *p)
{
	return (vu)_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p));
}
static inline __attribute__((always_inline)) vi ld_s8(const uint8_t *p)
{
	return (vi)_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)p));
}
static inline __attribute__((always_inline)) vu ld_nib(const uint8_t *p)
{
	__m128i x = _mm_loadl_epi64((const void *)p);

	return (vu)_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, x));
}
#elif VW == 8
static inline __attribute__((always_inline)) vu ld_u16(const uint8_t *p)
{
	return (vu)_mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p));
}
static inline __attribute__((always_inline)) vu ld_u8(const uint8_t *p)
{
	return (vu)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p));
}
static inline __attribute__((always_inline)) vi ld_s8(const uint8_t *p)
{
	return (vi)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const void *)p));
}
static inline __attribute__((always_inline)) vu ld_nib(const uint8_t *p)
{
	int32_t w;
	__m128i x;

	memcpy(&w, p, 4);
	x = _mm_cvtsi32_si128(w);
	return (vu)_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(x, x));
}
#else
static inline __attribute__((always_inline)) vu ld_u16(const uint8_t *p)
{
	vu u;
	int i;

	for (i = 0; i < VW; i++)
		u[i] = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
	return u;
}
static inline __attribute__((always_inline)) vu ld_u8(const uint8_t *p)
{
	vu u;
	int i;

	for (i = 0; i < VW; i++)
		u[i] = p[i];
	return u;
}
static inline __attribute__((always_inline)) vi ld_s8(const uint8_t *p)
{
	vi u;
	int i;

	for (i = 0; i < VW; i++)
		u[i] = (int8_t)p[i];
	return u;
}
static inline __attribute__((always_inline)) vu ld_nib(const uint8_t *p)
{
	vu u;
	int i;

	for (i = 0; i < VW; i++)
		u[i] = p[i / 2];
	return u;
}
#endif

static inline __attribute__((always_inline)) float f16f(uint16_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;

	if (__builtin_expect(e == 0 || e == 31, 0))
		return kvk_f16_to_f32(h);
	return kvk_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* FP8 E4M3 bytes -> FP32 x 2^-120 bit pattern, times 2^120; no NaN
 * check (rows with NaN codes take cvt()).  Sign-extended bytes shifted
 * left by 20 put the sign at bit 31 and E:M at bits 26..20. */
static inline __attribute__((always_inline))
vf cvt_fp8_fast(const uint8_t *row, uint32_t d)
{
	vi s = ld_s8(row + d);

	return (vf)((s << 20) & (int32_t)0x87f00000) * 0x1p120f;
}

/* Does an FP8 row of n bytes hold a NaN code (0x7f / 0xff)? */
static inline __attribute__((always_inline))
int fp8_row_nan(const uint8_t *row, uint32_t n)
{
	uint32_t i = 0;

#if VW == 16
	for (; i + 64 <= n; i += 64) {
		__m512i x = _mm512_loadu_si512((const void *)(row + i));

		if (_mm512_cmpeq_epi8_mask(_mm512_and_si512(x,
			_mm512_set1_epi8(0x7f)), _mm512_set1_epi8(0x7f)))
			return 1;
	}
#elif VW == 8
	for (; i + 32 <= n; i += 32) {
		__m256i x = _mm256_loadu_si256((const void *)(row + i));

		if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(x,
			_mm256_set1_epi8(0x7f)), _mm256_set1_epi8(0x7f))))
			return 1;
	}
#endif
	for (; i < n; i++)
		if ((row[i] & 0x7f) == 0x7f)
			return 1;
	return 0;
}

/* Convert VW elements of a row to FP32 (without the block scale). */
static inline __attribute__((always_inline))
vf cvt(uint32_t dtype, const uint8_t *row, uint32_t d, const uint8_t *gscale)
{
	switch (dtype) {
	case KVK_BF16:
		return (vf)(ld_u16(row + 2 * d) << 16);
	case KVK_FP8: {
		vu u = ld_u8(row + d), bits;
		vi nan;

		bits = ((u & 0x80) << 24) | ((u & 0x7f) << 20);
		nan = (vi)((u & 0x7f) == 0x7f);
		return sel(nan, splat(NAN), (vf)bits * 0x1p120f);
	}
	case KVK_INT8:
		return __builtin_convertvector(ld_s8(row + d), vf);
	default: {	/* KVK_INT4 */
		vi x = (vi)ld_nib(row + d / 2);
		uint16_t h;

		x = (x >> (vi){MVW(SH, 0)}) & 15;
		x = (x ^ 8) - 8;
		memcpy(&h, gscale + (d / KVK_INT4_GROUP) * 2, 2);
		return __builtin_convertvector(x, vf) * f16f(h);
	}
	}
}

/*
 * Values of one tile: out[r][:] += p[r][j] * V[j][:] for the n rows of
 * the tile.  NC slices of VW outputs per pass (NC * R <= 16 accumulators
 * in registers), so that the FMA chains (one FMA per position) overlap.
 * fast: FP8 tile known to hold no NaN code.
 */
static inline __attribute__((always_inline))
void v_tile(const uint8_t *vp, uint32_t row_bytes, const uint8_t *gsb,
	    uint32_t gsz, const float *pv, float *const *o, uint32_t n,
	    uint32_t slot0, const uint32_t D, const uint32_t dtype,
	    const uint32_t RC, uint32_t vnan, const int fast)
{
	const uint32_t NC = RC >= 16 || VW < 16 ? 1 : RC >= 8 ? 2 :
			    D % (4 * VW) ? 2 : 4;
	const uint32_t R = RC;
	uint32_t dc, r, j, c;

	for (dc = 0; dc < D; dc += NC * VW) {
		vf oa[16][4];	/* NC <= 4; fixed size: no VLA */

		#pragma GCC unroll 16
		for (r = 0; r < R; r++)
			#pragma GCC unroll 16
			for (c = 0; c < NC; c++)
				oa[r][c] = ld(o[r] + 2 + dc + c * VW);
		for (j = 0; j < n; j++) {
			const uint8_t *vr = vp + (uint64_t)(slot0 + j) *
					    row_bytes;
			const uint8_t *gs = gsb + (uint64_t)(slot0 + j) * gsz;
			vf v[4];

			if (fast || (dtype == KVK_FP8 && !((vnan >> j) & 1))) {
				#pragma GCC unroll 16
				for (c = 0; c < NC; c++)
					v[c] = cvt_fp8_fast(vr, dc + c * VW);
			} else {
				#pragma GCC unroll 16
				for (c = 0; c < NC; c++)
					v[c] = cvt(dtype, vr, dc + c * VW, gs);
			}
			#pragma GCC unroll 16
			for (r = 0; r < R; r++) {
				vf pb = splat(pv[r * VW + j]);

				#pragma GCC unroll 16
				for (c = 0; c < NC; c++)
					oa[r][c] += pb * v[c];
			}
		}
		#pragma GCC unroll 16
		for (r = 0; r < R; r++)
			#pragma GCC unroll 16
			for (c = 0; c < NC; c++)
				st(o[r] + 2 + dc + c * VW, oa[r][c]);
	}
}

#ifndef KVK_SIMD_HELPERS_ONLY
#ifndef KVK_PFD
#define KVK_PFD 4	/* blocks prefetched ahead */
#endif


/*
 * RC: query rows rounded up to 4, 8 or 16, a compile-time constant so
 * that the R output slices stay in registers; rows beyond it->nq * group
 * are padding (zero query, fully masked, output to scratch).
 */
static inline __attribute__((always_inline))
void attn_core(const struct kvk_attn_job *job, const struct kvk_attn_item *it,
	       float *scratch, const uint32_t D, const uint32_t dtype,
	       const uint32_t RC)
{
	const struct kvk_layout *l = job->l;
	const uint32_t ND = D / VW, T = l->tokens_per_block;
	const uint32_t G = job->group, RR = it->nq * G, R = RC;
	const uint32_t *table = job->block_tables +
				(uint64_t)it->seq * job->max_blocks_per_seq;
	const uint32_t ctx = job->ctx_lens[it->seq];
	const uint32_t nblk_end = (it->t1 + T - 1) / T;
	const uint32_t gsz = (D / KVK_INT4_GROUP) * 2;
	float *qs = scratch;				/* [R][D] */
	vf *acc = (vf *)(qs + 16 * KVK_MAX_HEAD_DIM);	/* [R][VW] */
	float *pv = (float *)(acc + 16 * VW);		/* [R][VW] */
	const vi iota = (vi){MVW(ROTI, 0)};
	float *o[16] = { 0 };	/* -> parts: m, l, o[D] */
	int64_t limit[16] = { 0 };	/* last position each row attends to */
	vf lv[16] = { 0 };	/* per-lane softmax sums: small terms are not lost
			 * against one dominant term */
	uint32_t r, j, dc, bi;
	uint64_t koff, voff, ksoff, vsoff;
	const uint8_t *nb;
	uint32_t vnan;

	koff = kvk_row_offset(l, job->layer, 0, it->head, 0);
	voff = kvk_row_offset(l, job->layer, 1, it->head, 0);
	ksoff = kvk_scale_offset(l, job->layer, 0, it->head, 0);
	vsoff = kvk_scale_offset(l, job->layer, 1, it->head, 0);
	#pragma GCC unroll 16
	for (r = 0; r < R; r++) {
		uint32_t qi = it->q0 + r / G, h = it->head * G + r % G;

		if (r >= RR) {		/* padding row: masked out, no output */
			memset(qs + r * D, 0, sizeof(float) * D);
			o[r] = pv + 16 * VW + (D + 2) * (r - RR);
			o[r][0] = -INFINITY;
			o[r][1] = 0.0f;
			limit[r] = -1;
			continue;
		}
		const float *q = job->q + (((uint64_t)it->seq *
					   (job->n_q ? job->n_q : 1) + qi) *
					   job->q_heads + h) * D;

		for (dc = 0; dc < D; dc++)
			qs[r * D + dc] = q[dc] * job->scale;
		o[r] = job->parts + (uint64_t)(it->part + r) *
		       job->part_stride;
		o[r][0] = -INFINITY;
		o[r][1] = 0.0f;
		lv[r] = splat(0.0f);
		memset(o[r] + 2, 0, sizeof(float) * D);
		limit[r] = job->n_q ? (int64_t)ctx - job->n_q + qi :
				      (int64_t)ctx - 1;
	}

	for (bi = it->t0 / T; bi < nblk_end; bi++) {
		const uint8_t *blk = job->pool + (uint64_t)table[bi] *
				     l->block_bytes;
		const uint8_t *kp = blk + koff, *vp = blk + voff;
		uint32_t ts = bi * T > it->t0 ? bi * T : it->t0;
		uint32_t te = (uint64_t)(bi + 1) * T < it->t1 ?
			      (bi + 1) * T : it->t1;
		float sk = 1.0f, sv = 1.0f;

		if (dtype == KVK_FP8 || dtype == KVK_INT8) {
			memcpy(&sk, blk + ksoff, 4);
			memcpy(&sv, blk + vsoff, 4);
		}
		/* software prefetch: blocks are scattered, so the hardware
		 * prefetchers restart at every block.  The rows of the block
		 * PF_DIST ahead are fetched one by one next to the rows of
		 * this block (spread over the compute, not one burst); the
		 * first blocks of the item and the small scale areas in one
		 * burst. */
		nb = NULL;
		if (bi + KVK_PFD < nblk_end) {
			nb = job->pool + (uint64_t)table[bi + KVK_PFD] *
			     l->block_bytes;
			if (dtype == KVK_INT4) {
				uint64_t x;

				for (x = 0; x < (uint64_t)T * gsz; x += 64) {
					__builtin_prefetch(nb + ksoff + x);
					__builtin_prefetch(nb + vsoff + x);
				}
			} else if (dtype != KVK_BF16) {
				__builtin_prefetch(nb + ksoff);
				__builtin_prefetch(nb + vsoff);
			}
		}
		if (bi == it->t0 / T) {
			uint32_t b2;

			for (b2 = bi; b2 < bi + KVK_PFD && b2 < nblk_end;
			     b2++) {
				const uint8_t *pb = job->pool +
					(uint64_t)table[b2] * l->block_bytes;
				uint64_t x, n2 = l->plane_bytes;

				if (n2 > 16384)
					n2 = 16384;
				for (x = 0; x < n2; x += 64) {
					__builtin_prefetch(pb + koff + x);
					__builtin_prefetch(pb + voff + x);
				}
			}
		}

		for (; ts < te; ts += VW) {
			uint32_t n = te - ts < VW ? te - ts : VW;
			uint32_t slot0 = ts - bi * T;

			/* scores: each K row converted once, dotted with
			 * all R query rows */
			for (j = 0; j < n; j++) {
				const uint8_t *kr = kp + (uint64_t)(slot0 + j) *
						    l->row_bytes;
				const uint8_t *gs = blk + ksoff +
						    (uint64_t)(slot0 + j) * gsz;
				vf k[KVK_MAX_HEAD_DIM / VW] = { 0 };

				if (nb) {
					const uint8_t *pr = nb + koff +
						(uint64_t)(slot0 + j) *
						l->row_bytes;
					uint32_t x;

					for (x = 0; x < l->row_bytes; x += 64) {
						__builtin_prefetch(pr + x);
						__builtin_prefetch(pr + x +
							(voff - koff));
					}
				}
				if (dtype == KVK_FP8 && !fp8_row_nan(kr, D)) {
#pragma GCC unroll 16
					for (dc = 0; dc < ND; dc++)
						k[dc] = cvt_fp8_fast(kr, dc * VW);
				} else {
#pragma GCC unroll 16
					for (dc = 0; dc < ND; dc++)
						k[dc] = cvt(dtype, kr, dc * VW,
							    gs);
				}
				#pragma GCC unroll 16
				for (r = 0; r < R; r++) {
					/* two chains: half the latency */
					vf a = ld(qs + r * D) * k[0];
					vf b = ld(qs + r * D + VW) * k[1];

					#pragma GCC unroll 16
					for (dc = 2; dc < ND; dc += 2) {
						a += ld(qs + r * D + dc * VW) *
						     k[dc];
						b += ld(qs + r * D +
							(dc + 1) * VW) *
						     k[dc + 1];
					}
					acc[r * VW + j] = a + b;
				}
			}
			#pragma GCC unroll 16
			for (r = 0; r < R; r++) {
				vf s, p;
				vi mask;
				float m_old = o[r][0], tmax, c;

				for (j = n; j < VW; j++)
					acc[r * VW + j] = splat(0.0f);
				s = reduce_vw(acc + r * VW);
				if (dtype == KVK_FP8 || dtype == KVK_INT8)
					s *= sk;
				mask = (iota >= (vi){} + (int32_t)n) |
				       (iota > (vi){} + (int32_t)(limit[r] -
						(int64_t)ts < VW ? limit[r] - ts :
						VW));
				s = sel(mask, splat(-INFINITY), s);
				tmax = hmax(s);
				if (tmax == -INFINITY) {
					st(pv + r * VW, splat(0.0f));
					continue;
				}
				if (tmax > m_old || tmax != tmax) {
					c = m_old == -INFINITY ? 0.0f :
					    expf(m_old - tmax);
					o[r][0] = tmax;
					lv[r] *= c;
					for (dc = 0; dc < D; dc += VW)
						st(o[r] + 2 + dc,
						   ld(o[r] + 2 + dc) * c);
				}
				p = vexp(s - o[r][0]);
				p = sel(mask, splat(0.0f), p);
				lv[r] += p;
				if (dtype == KVK_FP8 || dtype == KVK_INT8)
					p *= sv;
				st(pv + r * VW, p);
			}
			/* values: each V row slice converted once, added to
			 * all R outputs (kept in registers when R is known) */
			vnan = 0;
			if (dtype == KVK_FP8)
				for (j = 0; j < n; j++)
					vnan |= (uint32_t)fp8_row_nan(vp +
						(uint64_t)(slot0 + j) *
						l->row_bytes, D) << j;
			/* a tile without FP8 NaN codes takes the loop
			 * without per-row checks */
			if (dtype == KVK_FP8 && !vnan)
				v_tile(vp, l->row_bytes, blk + vsoff, gsz,
				       pv, o, n, slot0, D, dtype, RC, 0, 1);
			else
				v_tile(vp, l->row_bytes, blk + vsoff, gsz,
				       pv, o, n, slot0, D, dtype, RC, vnan, 0);
		}
	}
	#pragma GCC unroll 16
	for (r = 0; r < R; r++)
		o[r][1] = hsum(lv[r]);
}

#ifdef KVK_DPBF16
#include "kvkern_dpbf16.h"

#ifndef KVK_NO_SPECIALISE
/* kvk_item_rows(R) as a compile-time constant */
#define BFCASE(dt, d) \
	case (dt) * 1000 + (d): \
		switch (kvk_item_rows(R)) { \
		case 1: \
			attn_bf(job, it, scratch, (d), (dt), 1); \
			break; \
		case 4: \
			attn_bf(job, it, scratch, (d), (dt), 4); \
			break; \
		case 8: \
			attn_bf(job, it, scratch, (d), (dt), 8); \
			break; \
		default: \
			attn_bf(job, it, scratch, (d), (dt), 16); \
		} \
		break
#endif

/* BF16, FP8 and INT8 with head_dim a multiple of 64 and INT4 with
 * head_dim 64, 128 or 256 take attn_bf(). */
static int item_bf(const struct kvk_attn_job *job,
		   const struct kvk_attn_item *it, float *scratch, uint32_t R)
{
	uint32_t D = job->l->head_dim, dtype = job->l->dtype;

	if ((dtype != KVK_BF16 && dtype != KVK_FP8 && dtype != KVK_INT8 &&
	     dtype != KVK_INT4) || D % 64 ||
	    (dtype == KVK_INT4 && D != 64 && D != 128 && D != 256))
		return 0;
	pthread_once(&bf_once, bf_init);
#ifndef KVK_NO_SPECIALISE
	switch (dtype * 1000 + D) {
	BFCASE(KVK_BF16, 64); BFCASE(KVK_BF16, 128); BFCASE(KVK_BF16, 256);
	BFCASE(KVK_FP8, 64); BFCASE(KVK_FP8, 128); BFCASE(KVK_FP8, 256);
	BFCASE(KVK_INT8, 64); BFCASE(KVK_INT8, 128); BFCASE(KVK_INT8, 256);
	BFCASE(KVK_INT4, 64); BFCASE(KVK_INT4, 128); BFCASE(KVK_INT4, 256);
	default:
		attn_bf(job, it, scratch, D, dtype, 16);
		break;
	}
#else
	/* the same rows per head as run_attn() sized the items for */
	attn_bf(job, it, scratch, D, dtype, kvk_item_rows(R));
#endif
	return 1;
}
#endif

#if VW >= 16 && !defined(KVK_NO_SPECIALISE)
#define RCASE(dt, d) \
	do { \
		if (R <= 4) \
			attn_core(job, it, scratch, (d), (dt), 4); \
		else if (R <= 8) \
			attn_core(job, it, scratch, (d), (dt), 8); \
		else \
			attn_core(job, it, scratch, (d), (dt), 16); \
	} while (0)
#define CASE(dt, d) \
	case (dt) * 1000 + (d): \
		RCASE(dt, d); \
		break
#endif

#ifndef KVK_DPBF16
/* One kv head of an item. */
static void item_one(const struct kvk_attn_job *job,
		     const struct kvk_attn_item *it, float *scratch)
{
	uint32_t D = job->l->head_dim, dtype = job->l->dtype;
	uint32_t R = it->nq * job->group;

	(void)R;
#if VW >= 16 && !defined(KVK_NO_SPECIALISE)
	switch (dtype * 1000 + D) {
	CASE(KVK_BF16, 64); CASE(KVK_BF16, 128); CASE(KVK_BF16, 256);
	CASE(KVK_FP8, 64); CASE(KVK_FP8, 128); CASE(KVK_FP8, 256);
	CASE(KVK_INT8, 64); CASE(KVK_INT8, 128); CASE(KVK_INT8, 256);
	CASE(KVK_INT4, 64); CASE(KVK_INT4, 128); CASE(KVK_INT4, 256);
	default:
		attn_core(job, it, scratch, D, dtype, 16);
		break;
	}
#elif VW >= 8 && !defined(KVK_NO_SPECIALISE)
	if (R <= 4)
		attn_core(job, it, scratch, D, dtype, 4);
	else
		attn_core(job, it, scratch, D, dtype, 16);
#else
	attn_core(job, it, scratch, D, dtype, 16);
#endif
}
#endif

static void item_fn(const struct kvk_attn_job *job, uint32_t i,
		    unsigned int thread)
{
	const struct kvk_attn_item *it = &job->items[i];
	float *scratch = job->scratch + (size_t)thread * job->scratch_floats;

#ifdef KVK_DPBF16
	/* the other dtypes: the plain avx512 loops (kvkern_avx512.c) */
	if (!item_bf(job, it, scratch, it->nq * job->group))
		kvk_simd_avx512.item(job, i, thread);
#else
	struct kvk_attn_item one = *it;
	uint32_t hh;

	/* the heads one after the other */
	for (hh = 0; hh < it->nh; hh++) {
		one.head = it->head + hh;
		one.part = it->part + hh * it->hstride;
		one.nh = 1;
		item_one(job, &one, scratch);
	}
#endif
}
#endif /* !KVK_SIMD_HELPERS_ONLY */

/* Memory-read probe: integer adds so that no float assist slows it. */
static double sum_bytes(const void *buf, size_t bytes)
{
	const uint8_t *p = buf;
	vi a0 = {}, a1 = {}, a2 = {}, a3 = {}, x;
	size_t i, step = 4 * sizeof(vi);
	double s = 0;

	for (i = 0; i + step <= bytes; i += step) {
		memcpy(&x, p + i, sizeof(x));
		a0 += x;
		memcpy(&x, p + i + sizeof(vi), sizeof(x));
		a1 += x;
		memcpy(&x, p + i + 2 * sizeof(vi), sizeof(x));
		a2 += x;
		memcpy(&x, p + i + 3 * sizeof(vi), sizeof(x));
		a3 += x;
	}
	a0 += a1 + a2 + a3;
	for (i = 0; i < VW; i++)
		s += a0[i];
	return s;
}

#ifndef KVK_SIMD_HELPERS_ONLY
const struct kvk_simd_ops SIMD_OPS = {
	.name = SIMD_NAME,
	.item = item_fn,
	.sum_bytes = sum_bytes,
#ifdef KVK_DPBF16
	.scratch_bytes = BF_SCRATCH_BYTES,
#endif
};
#endif
