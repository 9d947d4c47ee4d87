/* SPDX-License-Identifier: MIT */
/*
 * kvkern_dpbf16.h - the BF16 and FP8 attention core on AVX512-BF16 +
 * AVX512-VBMI, included by kvkern_simd.h when KVK_DPBF16 is defined (only
 * kvkern_avx512bf16.c, VW 16).
 *
 * Why: the FP32 core spends most of its time converting each element to
 * FP32 (FP8 takes four instructions per 16 values) and in one FMA per
 * multiply.  Here the cache stays in BF16 and VDPBF16PS multiplies pairs
 * of BF16 values and adds both products into FP32 lanes:
 *
 *   - BF16 K rows are used as loaded; FP8 rows become BF16 by two 128-entry
 *     byte lookups (VPERMI2B: high and low byte of the BF16 code of each
 *     magnitude, every FP8 value is exact in BF16; 0x7F maps to a BF16 NaN)
 *     and two byte interleaves, five instructions per 64 values.
 *   - The query (times the softmax scale) and the softmax weights are split
 *     into hi + lo BF16 parts (x = hi + lo + O(2^-17 x)), so each product
 *     is hi * k + lo * k: the result matches the FP32 core to about 1e-5
 *     relative, well inside the 1e-4 the tests assert.
 *   - Values: rows j and j+1 are interleaved so that one VDPBF16PS adds
 *     p[j] * V[j] + p[j+1] * V[j+1] for 16 output dimensions.
 *
 * The byte interleaves put the head dimensions in a fixed permuted order
 * inside each 64-dimension chunk; the query is stored in the K order once
 * per item, the output accumulates in the V order and is put back in
 * natural order when the item ends (perm_v()).
 *
 * Softmax: per tile of 16 positions and query row, as in attn_core():
 * scores reduced by a transpose-add tree, online (max, sum), per-lane sums.
 */
#include <pthread.h>

#define BF_RG 4			/* query rows per value pass */

static uint8_t fp8_bf16_hi[128] __attribute__((aligned(64)));
static uint8_t fp8_bf16_lo[128] __attribute__((aligned(64)));
static pthread_once_t fp8_bf16_once = PTHREAD_ONCE_INIT;

/* The BF16 code of each FP8 E4M3 magnitude (0x7F: NaN 0x7FC0). */
static void fp8_bf16_init(void)
{
	uint32_t c, b;

	for (c = 0; c < 128; c++) {
		b = kvk_f32_bits(kvk_fp8_to_f32((uint8_t)c)) >> 16;
		if (c == 0x7f)
			b = 0x7fc0;
		fp8_bf16_hi[c] = (uint8_t)(b >> 8);
		fp8_bf16_lo[c] = (uint8_t)b;
	}
}

struct fp8_lut {
	__m512i h0, h1, l0, l1, sign;
};

/* 64 FP8 bytes -> two vectors of 32 BF16: w0 holds the bytes 0..7 of each
 * 128-bit lane L (dimensions 16L + 0..7), w1 the bytes 8..15. */
static inline __attribute__((always_inline))
void fp8_bf16(const struct fp8_lut *t, __m512i x, __m512i *w0, __m512i *w1)
{
	__m512i hi = _mm512_permutex2var_epi8(t->h0, x, t->h1);
	__m512i lo = _mm512_permutex2var_epi8(t->l0, x, t->l1);

	hi = _mm512_ternarylogic_epi32(hi, x, t->sign, 0xf8);	/* hi | x & s */
	*w0 = _mm512_unpacklo_epi8(lo, hi);
	*w1 = _mm512_unpackhi_epi8(lo, hi);
}

/*
 * The natural dimension of element x of the value accumulators.  Chunk
 * c = x / 64, vector k = x % 64 / 16, lane L = x % 16 / 4, i = x % 4.
 * BF16: unpack{lo,hi}_epi16 of 32-dimension halves; FP8: unpack{lo,hi}
 * _epi8 of the rows, then of the lookup bytes.
 */
static inline uint32_t perm_v(uint32_t dtype, uint32_t x)
{
	uint32_t c = x / 64, k = x % 64 / 16, L = x % 16 / 4, i = x % 4;

	if (dtype == KVK_BF16)
		return 64 * c + 32 * (k / 2) + 8 * L + 4 * (k % 2) + i;
	return 64 * c + 16 * L + 4 * k + i;
}

/* The natural dimension of BF16 element x of the converted K row. */
static inline uint32_t perm_k(uint32_t dtype, uint32_t x)
{
	uint32_t c = x / 64, t = x % 64 / 32, L = x % 32 / 8, i = x % 8;

	if (dtype == KVK_BF16)
		return x;
	return 64 * c + 16 * L + 8 * t + i;
}

/* x -> (hi, lo) BF16 with hi + lo = x to about 2^-17 relative; a
 * non-finite x keeps lo 0 so that hi carries it alone. */
static inline __attribute__((always_inline))
void split_bf16(vf x, __m256bh *hi, __m256bh *lo)
{
	vf h, l;

	*hi = _mm512_cvtneps_pbh((__m512)x);
	h = (vf)((vu)_mm512_cvtepu16_epi32((__m256i)*hi) << 16);
	l = x - h;
	l = sel((vi)(l == l), l, splat(0.0f));
	*lo = _mm512_cvtneps_pbh((__m512)l);
}

static inline __attribute__((always_inline)) __m512 dp(__m512 acc,
						      __m512i a, __m512i b)
{
	return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

static inline __attribute__((always_inline)) __m512i bc32(const uint32_t *p)
{
	return _mm512_set1_epi32((int)*p);
}

/* blocks prefetched ahead: an item reads all its heads' planes of a
 * block, so two blocks ahead is already 64 KiB (FP8) to 128 KiB (BF16) */
#define BF_PFD 2

/* One unit of work: up to VW positions of one block, one kv head. */
struct bf_tile {
	const uint8_t *kp, *vp;	/* K and V rows of the tile's first position */
	const uint8_t *nk;	/* same rows BF_PFD blocks ahead, or NULL */
	uint32_t ts, n;		/* first position, positions */
	uint32_t row0;		/* the head's first row in the item */
	float sk, sv;		/* FP8 block scales */
};

/* What the phases of one item share. */
struct bf_item {
	const struct kvk_attn_job *job;
	const struct kvk_attn_item *it;
	const uint32_t *table;
	/* offsets of the first head's K and V rows and scales; head hh's
	 * are hh * plane_bytes and hh * sstep further */
	uint64_t koff, voff, ksoff, vsoff, sstep;
	uint32_t pos, nblk_end, nh, rc;
	/* the current block: heads hh .. nh - 1 of it still to do */
	const uint8_t *blk, *nb;
	uint32_t hh, slot0, ts, n;
	uint16_t *qh, *ql;	/* [rows][D] query (x scale), hi and lo BF16 */
	uint32_t *pph, *ppl;	/* [RC][8] weights of position pairs */
	float *ov;		/* [rows][D] output accumulators, V order */
	struct fp8_lut lut;
	float m[KVK_ITEM_ROWS];	/* running maximum per row */
	int64_t limit[KVK_ITEM_ROWS];	/* last position each row attends to */
	vf lv[KVK_ITEM_ROWS];		/* per-lane softmax sums */
};

/*
 * The next unit of the item, 0 when none is left: the heads of a block one
 * after the other, then the next block, so that each block is read whole.
 * Entering a block: software prefetch (blocks are scattered, so the
 * hardware prefetchers restart at every block): the first BF_PFD blocks
 * of the item in one burst, then the scales of the block BF_PFD ahead;
 * its rows are fetched one by one next to the rows of the current unit
 * (bf_scores()).
 */
static inline __attribute__((always_inline))
int bf_next(struct bf_item *b, struct bf_tile *t, const uint32_t dtype)
{
	const struct kvk_layout *l = b->job->l;
	const uint8_t *pool = b->job->pool;
	const uint32_t rb = l->row_bytes;
	uint32_t T = l->tokens_per_block, bi, b2, hh;
	uint64_t be, y, n2, ro;
	const uint8_t *nb;

	if (b->hh == b->nh) {
		if (b->pos >= b->it->t1)
			return 0;
		bi = b->pos / T;
		b->slot0 = b->pos - bi * T;
		be = (uint64_t)(bi + 1) * T < b->it->t1 ?
		     (uint64_t)(bi + 1) * T : b->it->t1;
		b->blk = pool + (uint64_t)b->table[bi] * l->block_bytes;
		b->ts = b->pos;
		b->n = be - b->pos < VW ? (uint32_t)(be - b->pos) : VW;
		b->nb = NULL;
		if (bi + BF_PFD < b->nblk_end) {
			b->nb = pool + (uint64_t)b->table[bi + BF_PFD] *
				l->block_bytes;
			if (dtype == KVK_FP8 &&
			    (b->pos == b->it->t0 || !b->slot0)) {
				__builtin_prefetch(b->nb + b->ksoff);
				__builtin_prefetch(b->nb + b->vsoff);
			}
		}
		if (b->pos == b->it->t0) {
			n2 = l->plane_bytes * b->nh;
			n2 = n2 < 16384 ? n2 : 16384;
			for (b2 = bi; b2 < bi + BF_PFD && b2 < b->nblk_end;
			     b2++) {
				nb = pool + (uint64_t)b->table[b2] *
				     l->block_bytes;
				for (y = 0; y < n2; y += 64) {
					__builtin_prefetch(nb + b->koff + y);
					__builtin_prefetch(nb + b->voff + y);
				}
				if (dtype == KVK_FP8) {
					__builtin_prefetch(nb + b->ksoff);
					__builtin_prefetch(nb + b->vsoff);
				}
			}
		}
		b->pos += b->n;
		b->hh = 0;
	}
	hh = b->hh++;
	ro = hh * l->plane_bytes + (uint64_t)b->slot0 * rb;
	t->ts = b->ts;
	t->n = b->n;
	t->row0 = hh * b->rc;
	t->kp = b->blk + b->koff + ro;
	t->vp = b->blk + b->voff + ro;
	t->nk = b->nb ? b->nb + b->koff + ro : NULL;
	t->sk = 1.0f;
	t->sv = 1.0f;
	if (dtype == KVK_FP8) {
		memcpy(&t->sk, b->blk + b->ksoff + hh * b->sstep, 4);
		memcpy(&t->sv, b->blk + b->vsoff + hh * b->sstep, 4);
	}
	return 1;
}

/* Scores of a tile: each K row converted once, dotted with the R query
 * rows (hi and lo parts) into acc[r * VW + j]. */
static inline __attribute__((always_inline))
void bf_scores(struct bf_item *b, const struct bf_tile *t, vf *acc,
	       const uint32_t D, const uint32_t dtype, const uint32_t R)
{
	/* row bytes: a constant here (kvk_layout_init()), so the prefetch
	 * loop unrolls */
	const uint32_t NK = D / 32, rb = dtype == KVK_BF16 ? 2 * D : D;
	const uint64_t vk = b->voff - b->koff;	/* same for all heads */
	uint32_t j, k, r, x;

	for (j = 0; j < t->n; j++) {
		const uint8_t *kr = t->kp + (uint64_t)j * rb;
		__m512i kv[KVK_MAX_HEAD_DIM / 32] = { 0 };

		if (t->nk) {
			const uint8_t *pr = t->nk + (uint64_t)j * rb;

			#pragma GCC unroll 8
			for (x = 0; x < rb; x += 64) {
				__builtin_prefetch(pr + x);
				__builtin_prefetch(pr + x + vk);
			}
		}
		if (dtype == KVK_BF16) {
			#pragma GCC unroll 16
			for (k = 0; k < NK; k++)
				kv[k] = _mm512_loadu_si512((const void *)
							   (kr + 64 * k));
		} else {
			#pragma GCC unroll 16
			for (k = 0; k < NK / 2; k++)
				fp8_bf16(&b->lut, _mm512_loadu_si512(
					 (const void *)(kr + 64 * k)),
					 &kv[2 * k], &kv[2 * k + 1]);
		}
		#pragma GCC unroll 16
		for (r = 0; r < R; r++) {
			const uint16_t *h = b->qh + (t->row0 + r) * D;
			const uint16_t *lo = b->ql + (t->row0 + r) * D;
			__m512 a = _mm512_setzero_ps(), c = _mm512_setzero_ps();

			#pragma GCC unroll 16
			for (k = 0; k < NK; k++) {
				a = dp(a, kv[k], _mm512_load_si512(
				       (const void *)(h + 32 * k)));
				c = dp(c, kv[k], _mm512_load_si512(
				       (const void *)(lo + 32 * k)));
			}
			acc[r * VW + j] = (vf)_mm512_add_ps(a, c);
		}
	}
}

/*
 * Softmax of a tile, in phases over all rows so that their dependency
 * chains overlap: scores, the rare new maximum (or NaN: the horizontal
 * maximum and the rescale only then), weights split into BF16 pairs.
 */
static inline __attribute__((always_inline))
void bf_softmax(struct bf_item *b, const struct bf_tile *t, vf *acc,
		const uint32_t D, const uint32_t dtype, const uint32_t R)
{
	const vi iota = (vi){MVW(ROTI, 0)};
	float *m = b->m + t->row0, *ov = b->ov + t->row0 * D;
	const int64_t *limit = b->limit + t->row0;
	vf *lv = b->lv + t->row0;
	vf sr[16], p;
	vi mr[16];
	__mmask16 up = 0;
	__m256bh hi, lo;
	uint32_t r, j, x;

	#pragma GCC unroll 16
	for (r = 0; r < R; r++) {
		int32_t lim = (int32_t)(limit[r] - (int64_t)t->ts < VW ?
					limit[r] - (int64_t)t->ts : VW);

		for (j = t->n; j < VW; j++)
			acc[r * VW + j] = splat(0.0f);
		sr[r] = reduce_vw(acc + r * VW);
		if (dtype == KVK_FP8)
			sr[r] *= t->sk;
		mr[r] = (iota >= (vi){} + (int32_t)t->n) | (iota > (vi){} + lim);
		sr[r] = sel(mr[r], splat(-INFINITY), sr[r]);
		if (_mm512_cmp_ps_mask((__m512)sr[r], _mm512_set1_ps(m[r]),
				       _CMP_NLE_UQ))
			up |= (__mmask16)(1u << r);
	}
	if (__builtin_expect(up != 0, 0)) {
		for (r = 0; r < R; r++) {
			float tmax, cf;

			if (!((up >> r) & 1))
				continue;
			tmax = hmax(sr[r]);
			cf = m[r] == -INFINITY ? 0.0f :
			     expf(m[r] - tmax);
			m[r] = tmax;
			lv[r] *= cf;
			for (x = 0; x < D; x += VW)
				st(ov + r * D + x, ld(ov + r * D + x) * cf);
		}
	}
	#pragma GCC unroll 16
	for (r = 0; r < R; r++) {
		/* nothing attended yet: every score is -inf, exp(-inf) = 0 */
		float mm = m[r] == -INFINITY ? 0.0f : m[r];

		p = vexp(sr[r] - mm);
		p = sel(mr[r], splat(0.0f), p);
		lv[r] += p;
		if (dtype == KVK_FP8)
			p *= t->sv;
		split_bf16(p, &hi, &lo);
		memcpy(b->pph + r * 8, &hi, 32);
		memcpy(b->ppl + r * 8, &lo, 32);
	}
}

/* Values of a tile: rows j, j+1 interleaved; 64 dimensions x BF_RG rows
 * of accumulators per pass. */
static inline __attribute__((always_inline))
void bf_values(struct bf_item *b, const struct bf_tile *t, const uint32_t D,
	       const uint32_t dtype, const uint32_t R)
{
	static const uint8_t zero_row[128] __attribute__((aligned(64)));
	const uint32_t RG = R < BF_RG ? R : BF_RG;
	const uint32_t rb = dtype == KVK_BF16 ? 2 * D : D;
	uint32_t g, c, r, k, j;

	for (g = 0; g < R; g += RG) {
		for (c = 0; c < D / 64; c++) {
			float *ov = b->ov + (t->row0 + g) * D + 64 * c;
			__m512 oa[BF_RG][4];

			#pragma GCC unroll 16
			for (r = 0; r < RG; r++)
				#pragma GCC unroll 16
				for (k = 0; k < 4; k++)
					oa[r][k] = _mm512_loadu_ps(ov + r * D +
								   16 * k);
			for (j = 0; j < t->n; j += 2) {
				const uint8_t *ra = t->vp + (uint64_t)j * rb;
				const uint8_t *rbp = j + 1 < t->n ? ra + rb :
						     NULL;
				__m512i w[4];

				if (dtype == KVK_BF16) {
					const uint8_t *pb = rbp ? rbp + 128 * c :
							    zero_row;
					__m512i a0, a1, b0, b1;

					ra += 128 * c;
					a0 = _mm512_loadu_si512((const void *)ra);
					a1 = _mm512_loadu_si512((const void *)
								(ra + 64));
					b0 = _mm512_loadu_si512((const void *)pb);
					b1 = _mm512_loadu_si512((const void *)
								(pb + 64));
					w[0] = _mm512_unpacklo_epi16(a0, b0);
					w[1] = _mm512_unpackhi_epi16(a0, b0);
					w[2] = _mm512_unpacklo_epi16(a1, b1);
					w[3] = _mm512_unpackhi_epi16(a1, b1);
				} else {
					const uint8_t *pb = rbp ? rbp + 64 * c :
							    zero_row;
					__m512i xa, xb;

					xa = _mm512_loadu_si512((const void *)
								(ra + 64 * c));
					xb = _mm512_loadu_si512((const void *)pb);
					fp8_bf16(&b->lut,
						 _mm512_unpacklo_epi8(xa, xb),
						 &w[0], &w[1]);
					fp8_bf16(&b->lut,
						 _mm512_unpackhi_epi8(xa, xb),
						 &w[2], &w[3]);
				}
				#pragma GCC unroll 16
				for (r = 0; r < RG; r++) {
					__m512i bh = bc32(b->pph + (g + r) * 8 +
							  j / 2);
					__m512i bl = bc32(b->ppl + (g + r) * 8 +
							  j / 2);

					#pragma GCC unroll 16
					for (k = 0; k < 4; k++) {
						oa[r][k] = dp(oa[r][k], w[k], bh);
						oa[r][k] = dp(oa[r][k], w[k], bl);
					}
				}
			}
			#pragma GCC unroll 16
			for (r = 0; r < RG; r++)
				#pragma GCC unroll 16
				for (k = 0; k < 4; k++)
					_mm512_storeu_ps(ov + r * D + 16 * k,
							 oa[r][k]);
		}
	}
}

/*
 * One item, BF16 or FP8 cache, D a multiple of 64, RC rows per kv head
 * (1, 4, 8, 16; rows beyond it->nq * group are padding), it->nh heads with
 * it->nh * RC * D <= KVK_ITEM_ELEMS.  Software-pipelined by one
 * unit: the scores of unit u+1 are computed between the softmax of unit u
 * and its values, so that the softmax's long dependency chains overlap
 * with independent work.
 */
static inline __attribute__((always_inline))
void attn_bf(const struct kvk_attn_job *job, const struct kvk_attn_item *it,
	     float *scratch, const uint32_t D, const uint32_t dtype,
	     const uint32_t RC)
{
	const struct kvk_layout *l = job->l;
	const uint32_t G = job->group, RR = it->nq * G;
	const uint32_t ctx = job->ctx_lens[it->seq];
	/* scratch: q hi/lo [rows][D] BF16, two score buffers [16][VW]
	 * vectors, p pairs hi/lo [16][8], output accumulators [rows][D] */
	vf *acc0 = (vf *)(scratch + KVK_ITEM_ELEMS);
	vf *acc1 = acc0 + 16 * VW, *acc = acc0, *accn = acc1, *sw;
	struct bf_item b;
	struct bf_tile t, tn;
	float tmp[KVK_MAX_HEAD_DIM];
	uint32_t r, x, hh, row;
	int more;

	memset(&b, 0, sizeof(b));
	b.job = job;
	b.it = it;
	b.table = job->block_tables +
		  (uint64_t)it->seq * job->max_blocks_per_seq;
	b.pos = it->t0;
	b.nblk_end = (it->t1 + l->tokens_per_block - 1) / l->tokens_per_block;
	b.nh = it->nh;
	b.hh = it->nh;
	b.rc = RC;
	b.qh = (uint16_t *)scratch;
	b.ql = b.qh + KVK_ITEM_ELEMS;
	b.pph = (uint32_t *)(acc1 + 16 * VW);
	b.ppl = b.pph + 16 * 8;
	b.ov = (float *)(b.ppl + 16 * 8);
	if (dtype == KVK_FP8) {
		b.lut.h0 = _mm512_load_si512((const void *)fp8_bf16_hi);
		b.lut.h1 = _mm512_load_si512((const void *)(fp8_bf16_hi + 64));
		b.lut.l0 = _mm512_load_si512((const void *)fp8_bf16_lo);
		b.lut.l1 = _mm512_load_si512((const void *)(fp8_bf16_lo + 64));
		b.lut.sign = _mm512_set1_epi8((char)0x80);
	}
	b.koff = kvk_row_offset(l, job->layer, 0, it->head, 0);
	b.voff = kvk_row_offset(l, job->layer, 1, it->head, 0);
	b.ksoff = kvk_scale_offset(l, job->layer, 0, it->head, 0);
	b.vsoff = kvk_scale_offset(l, job->layer, 1, it->head, 0);
	b.sstep = kvk_scale_offset(l, job->layer, 0, it->head + 1, 0) -
		  b.ksoff;
	for (hh = 0; hh < it->nh; hh++) {
		uint32_t kh = it->head + hh;

		for (r = 0; r < RC; r++) {
			row = hh * RC + r;
			b.m[row] = -INFINITY;
			memset(b.ov + row * D, 0, sizeof(float) * D);
			if (r >= RR) {		/* padding row: masked out */
				memset(b.qh + row * D, 0, 2 * D);
				memset(b.ql + row * D, 0, 2 * D);
				b.limit[row] = -1;
				continue;
			}
			uint32_t qi = it->q0 + r / G, h = kh * G + r % G;
			const float *q = job->q + (((uint64_t)it->seq *
						   (job->n_q ? job->n_q : 1) +
						   qi) * job->q_heads + h) * D;

			for (x = 0; x < D; x++)
				tmp[x] = q[perm_k(dtype, x)] * job->scale;
			for (x = 0; x < D; x += VW) {
				__m256bh hi, lo;

				split_bf16(ld(tmp + x), &hi, &lo);
				memcpy(b.qh + row * D + x, &hi, 32);
				memcpy(b.ql + row * D + x, &lo, 32);
			}
			b.limit[row] = job->n_q ?
				       (int64_t)ctx - job->n_q + qi :
				       (int64_t)ctx - 1;
		}
	}

	more = bf_next(&b, &t, dtype);
	if (more)
		bf_scores(&b, &t, acc, D, dtype, RC);
	while (more) {
		bf_softmax(&b, &t, acc, D, dtype, RC);
		more = bf_next(&b, &tn, dtype);
		if (more)
			bf_scores(&b, &tn, accn, D, dtype, RC);
		bf_values(&b, &t, D, dtype, RC);
		t = tn;
		sw = acc;
		acc = accn;
		accn = sw;
	}
	for (hh = 0; hh < it->nh; hh++) {
		for (r = 0; r < RR; r++) {
			float *o = job->parts + ((uint64_t)it->part +
				   (uint64_t)hh * it->hstride + r) *
				   job->part_stride;

			row = hh * RC + r;
			o[0] = b.m[row];
			o[1] = hsum(b.lv[row]);
			for (x = 0; x < D; x++)
				o[2 + perm_v(dtype, x)] = b.ov[row * D + x];
		}
	}
}
