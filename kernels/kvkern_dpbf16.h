/* SPDX-License-Identifier: MIT */
/*
 * kvkern_dpbf16.h - the BF16, FP8, INT8 and INT4 attention core on
 * AVX512-BF16 + AVX512-VBMI + AVX512-VNNI, included by kvkern_simd.h when
 * KVK_DPBF16 is defined (only kvkern_avx512bf16.c, VW 16).
 *
 * Why: the FP32 core spends most of its time converting each element to
 * FP32 (FP8 takes four instructions per 16 values) and in one FMA per
 * multiply.  Here the cache stays in BF16 (or INT8 for the scores) and
 * VDPBF16PS multiplies pairs of BF16 values and adds both products into
 * FP32 lanes:
 *
 *   - BF16 K rows are used as loaded; FP8 rows become BF16 x 2^-120 by bit
 *     operations (fp8_bits32(), three instructions per 32 values), the
 *     2^120 folded into the query's and the weights' powers of two.
 *   - INT8 scores: VPDPBUSD of the K bytes (read as k + 128) and the query
 *     quantised to INT8 per row; INT8 V rows become BF16 by byte lookups.
 *   - INT4 (head_dim 64, 128 and 256): scores by VPDPBUSD of the nibbles
 *     (read as k + 8, one VPTERNLOGD per 64 values) and the same INT8
 *     query, the group scales applied per INT32 lane (a lane holds eight
 *     values of one group), the -8 sum(q8) correction per group once per tile; V nibbles
 *     become BF16 by one VPERMW per 32 values from a 16-entry table, the
 *     group scales folded into the weights (one weight per group).
 *   - BF16 only: the query (times the softmax scale) and the softmax
 *     weights are split into hi + lo BF16 parts (x = hi + lo + O(2^-17 x)),
 *     so each product is hi * k + lo * k (BF_SPLIT()).  FP8, INT8 and INT4
 *     round them once: their own quantisation error is larger
 *     (Documentation/kernels.rst, "Precision per dtype").
 *   - Values: rows j and j+1 are interleaved so that one VDPBF16PS adds
 *     p[j] * V[j] + p[j+1] * V[j+1] for 16 output dimensions.
 *
 * The byte interleaves put the head dimensions in a fixed permuted order
 * inside each 64-dimension chunk; the query is stored in the K order once
 * per item, the output accumulates in the V order and is put back in
 * natural order when the item ends (perm_v(), bf_out_row(): VPERMT2PS, and
 * VSCALEFPS for the powers of two of FP8 and INT8).
 *
 * Softmax: per tile of 16 positions and query row, as in attn_core():
 * scores reduced by a transpose-add tree, online (max, sum), per-lane sums.
 */
#include <float.h>
#include <pthread.h>

#define BF_RG 4			/* query rows per value pass */

/*
 * Which products use hi + lo BF16 parts of the query and of the softmax
 * weights: only BF16, whose own rounding (2^-9) is of the order of the
 * BF16 rounding of a single part.  FP8's quantisation error (2^-4 relative)
 * is 32 times that rounding, and one part is enough
 * (Documentation/kernels.rst, "Precision per dtype").  -DKVK_DPBF16_SPLIT
 * splits for every dtype (to measure the difference).
 */
#ifdef KVK_DPBF16_SPLIT
#define BF_SPLIT(dt) ((dt) != KVK_INT8)
#else
#define BF_SPLIT(dt) ((dt) == KVK_BF16)
#endif
/* dtypes whose weights carry a block scale and the exponent ve */
#define BF_SCALED(dt) ((dt) == KVK_FP8 || (dt) == KVK_INT8)
/* dtypes whose scores come from VPDPBUSD of the query quantised to INT8 */
#define BF_Q8(dt) ((dt) == KVK_INT8 || (dt) == KVK_INT4)
/* INT4: weights per (row, group, pair of positions), groups per row */
#define BF_MAX_NG (KVK_MAX_HEAD_DIM / KVK_INT4_GROUP)
/* per-thread scratch: q hi/lo, two score buffers, the weights (INT4:
 * one per group), the output accumulators */
#define BF_SCRATCH_BYTES (sizeof(float) * (KVK_ITEM_ELEMS + 2 * 16 * 16 * \
			  16 + 16 * BF_MAX_NG * 8 + KVK_ITEM_ELEMS + 64))
#ifndef BF_SPLIT_P
#define BF_SPLIT_P(dt) BF_SPLIT(dt)
#endif

/*
 * FP8 E4M3 -> BF16 by bit operations: the byte s.eeee.mmm sign-extended to
 * 16 bits and shifted left by 4 puts e:m at bits 10..4 (BF16 exponent e,
 * mantissa m000 0000) and a copy of the sign at bit 15; the mask clears
 * the other sign copies.  The result is the value times 2^-120, exactly,
 * for every normal E4M3 value; E4M3 subnormals (e = 0) become BF16
 * subnormals, which VDPBF16PS reads as zero; the NaN codes 0x7F / 0xFF
 * become 480 x 2^-120 and are repaired by fp8_nan() where a row holds one.
 */
#define FP8_BF16_MASK 0x87f0

/* 32 FP8 bytes at p -> 32 BF16 (x 2^-120), natural order */
static inline __attribute__((always_inline))
__m512i fp8_bits32(const uint8_t *p)
{
	__m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)p));

	return _mm512_and_si512(_mm512_slli_epi16(x, 4),
				_mm512_set1_epi16((short)FP8_BF16_MASK));
}

/* bytes b (in the high byte of each word, low byte 0) -> BF16 x 2^-120 */
static inline __attribute__((always_inline))
__m512i fp8_bits_hi(__m512i w)
{
	return _mm512_and_si512(_mm512_srai_epi16(w, 4),
				_mm512_set1_epi16((short)FP8_BF16_MASK));
}

/* Does any of the 64 bytes hold an FP8 NaN code (0x7f, 0xff)? */
static inline __attribute__((always_inline)) __mmask64 fp8_nanm(__m512i x)
{
	return _mm512_cmpeq_epi8_mask(_mm512_and_si512(x,
				      _mm512_set1_epi8(0x7f)),
				      _mm512_set1_epi8(0x7f));
}

/* The converted NaN codes (e:m = 1111:111 -> 0x07f0) back to BF16 NaN. */
static inline __attribute__((always_inline)) __m512i fp8_nan(__m512i w)
{
	__mmask32 m = _mm512_cmpeq_epi16_mask(_mm512_and_si512(w,
			_mm512_set1_epi16(0x7ff0)), _mm512_set1_epi16(0x07f0));

	return _mm512_mask_mov_epi16(w, m, _mm512_set1_epi16(0x7fc0));
}

/*
 * INT8 V rows -> BF16 (every value -127..127 is exact in BF16): two
 * 128-entry byte lookups (VPERMI2B) of |x|, the high and the low byte of
 * the BF16 code, the sign put back into the high byte, two byte
 * interleaves: six instructions per 64 values.
 */
static uint8_t int8_bf16_hi[128] __attribute__((aligned(64)));
static uint8_t int8_bf16_lo[128] __attribute__((aligned(64)));

struct int8_lut {
	__m512i h0, h1, l0, l1;
};

/* 64 INT8 bytes -> two vectors of 32 BF16: w0 holds the bytes 0..7 of each
 * 128-bit lane, w1 the bytes 8..15. */
static inline __attribute__((always_inline))
void int8_bf16(const struct int8_lut *t, __m512i x, __m512i *w0, __m512i *w1)
{
	__m512i a = _mm512_abs_epi8(x);
	__m512i hi = _mm512_permutex2var_epi8(t->h0, a, t->h1);
	__m512i lo = _mm512_permutex2var_epi8(t->l0, a, t->l1);

	hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8((char)0x80),
				       0xf8);	/* hi | x & 0x80 */
	*w0 = _mm512_unpacklo_epi8(lo, hi);
	*w1 = _mm512_unpackhi_epi8(lo, hi);
}

/*
 * INT4 nibbles -> BF16: VPERMW reads the low five bits of each word, so the
 * 16 codes of -8..7 (two's complement nibble n: n < 8 ? n : n - 16) twice;
 * bit 4 (a bit of the next nibble) then does not matter.
 */
static const uint16_t int4_bf16[32] __attribute__((aligned(64))) = {
	0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
	0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
	0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
	0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
};

/*
 * INT4 V rows: 32 bytes (64 dimensions) of rows j and j+1 in one vector
 * (j in bytes 0..31, j+1 in 32..63); VPERMB with int4_pair[h] makes the
 * words (row j byte i, row j+1 byte i) for i = 16h .. 16h + 15, each byte
 * twice (the low byte of each word selects, see int4_bf16).
 */
static uint8_t int4_pair[2][64] __attribute__((aligned(64)));
/*
 * INT4 group scales of a tile (16 positions x NG FP16 scales, in position
 * order) -> one vector per group, lane j = position j: VPERMT2W with
 * int4_gidx[NG / 4][g / 2] gives groups g and g + 1 (NG 2: from the one
 * vector of 32 scales; NG 4: positions 0..15 from the two vectors; NG 8:
 * positions 0..7 from the first two, 8..15 from the last two).
 */
static uint16_t int4_gidx[3][BF_MAX_NG / 2][32] __attribute__((aligned(64)));
/* Output: natural dimension n = 16 k + i of a 64-dimension chunk is
 * accumulator element x (perm_v()'s inverse): bf_oidx[dtype][k][i] = x %
 * 32, bit i of bf_omask[dtype][k] = x / 32 (bf_out_row()). */
static uint32_t bf_oidx[KVK_INT4 + 1][4][16] __attribute__((aligned(64)));
static __mmask16 bf_omask[KVK_INT4 + 1][4];
static pthread_once_t bf_once = PTHREAD_ONCE_INIT;

static inline uint32_t perm_v(uint32_t dtype, uint32_t x);

static void bf_init(void)
{
	uint32_t c, b, i, g, dt;

	for (c = 0; c < 128; c++) {
		b = kvk_f32_bits((float)c) >> 16;
		int8_bf16_hi[c] = (uint8_t)(b >> 8);
		int8_bf16_lo[c] = (uint8_t)b;
	}
	for (b = 0; b < 2; b++)
		for (i = 0; i < 64; i++)
			int4_pair[b][i] = (uint8_t)(16 * b + i / 4 +
						    (i / 2 % 2) * 32);
	for (g = 0; g < BF_MAX_NG / 2; g++)
		for (i = 0; i < 32; i++) {
			int4_gidx[0][g][i] = (uint16_t)((i % 16) * 2 +
							2 * g + i / 16);
			int4_gidx[1][g][i] = (uint16_t)((i % 16) * 4 +
							2 * g + i / 16);
			int4_gidx[2][g][i] = (uint16_t)((i % 8) * 8 +
							2 * g + i / 16);
		}
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++)
		for (i = 0; i < 64; i++) {
			uint32_t n = perm_v(dt, i);

			bf_oidx[dt][n / 16][n % 16] = i % 32;
			if (i >= 32)
				bf_omask[dt][n / 16] |=
					(__mmask16)(1u << (n % 16));
		}
}

/*
 * The natural dimension of element x of the value accumulators.  Chunk
 * c = x / 64, vector k = x % 64 / 16, lane L = x % 16 / 4, i = x % 4.
 * BF16: unpack{lo,hi}_epi16 of 32-dimension halves; FP8: unpack{lo,hi}
 * _epi8 of the rows, then of those bytes with zero (bf_values()).
 */
static inline uint32_t perm_v(uint32_t dtype, uint32_t x)
{
	uint32_t c = x / 64, k = x % 64 / 16, L = x % 16 / 4, i = x % 4;

	if (dtype == KVK_BF16)
		return 64 * c + 32 * (k / 2) + 8 * L + 4 * (k % 2) + i;
	if (dtype == KVK_INT4)	/* VPERMW of the low / the shifted nibbles */
		return 64 * c + 32 * (k / 2) + 2 * (x % 16) + k % 2;
	return 64 * c + 16 * L + 4 * k + i;
}

/* The natural dimension of element x of the converted K row: BF16, FP8
 * and INT8 rows keep their order (VPMOVSXBW widens in order); INT4 rows
 * are read 128 dimensions (64 bytes; head_dim 64: 32 bytes) at a time as
 * the low nibbles (even dimensions) and then the high nibbles (odd
 * ones). */
static inline uint32_t perm_k(uint32_t dtype, uint32_t D, uint32_t x)
{
	const uint32_t W = D < 128 ? D : 128;	/* nibbles per 64 bytes */

	if (dtype == KVK_INT4)
		return x / W * W + 2 * (x % (W / 2)) + x % W / (W / 2);
	return x;
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
	float sk, sv;		/* FP8 / INT8 block scales */
	const uint8_t *ks, *vs;	/* INT4: group scales of the first position */
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
	/* FP8: the query is stored times 2^qe; scores times qf = 2^(120-qe)
	 * (K rows are read as value x 2^-120).  The weights are stored times
	 * the block's V scale and 2^ve; ov holds output x 2^(ve-120). */
	float qf;
	int32_t ve;
	struct int8_lut lut;
	/* INT8: the query of row r is q8 x qs[r] (bytes in qh); the K bytes
	 * are read as k + 128, so that the scores are (dot - qc[r]) qs[r] */
	float qs[KVK_ITEM_ROWS], qc[KVK_ITEM_ROWS];
	/* INT4: the nibbles are read as k + 8; -8 sum(q8) per row and group */
	float qg[KVK_ITEM_ROWS][BF_MAX_NG];
	float m[KVK_ITEM_ROWS];	/* running maximum per row */
	int64_t limit[KVK_ITEM_ROWS];	/* last position each row attends to */
	vf lv[KVK_ITEM_ROWS];		/* per-lane softmax sums */
};

/*
 * INT8: one query row (x = q x softmax scale, D values) quantised to
 * INT8 with its own scale: qs = amax / 127, q8 = rint(x x (127 / amax))
 * (ties to even), all in FP32, amax the largest finite |x|.  A row with a
 * NaN or an Inf gets qs = NaN (its scores become NaN, as the FP32 paths
 * give); an all-zero row qs = 0.  qc = 128 sum(q8), what reading K as
 * k + 128 adds to every dot product.
 */
static void bf_quant_query(const float *x, uint32_t D, int8_t *q8,
			   float *qs, float *qc)
{
	float amax = 0.0f, inv, y;
	int32_t sum = 0, v;
	uint32_t d;
	int bad = 0;

	for (d = 0; d < D; d++) {
		y = fabsf(x[d]);
		if (!(y <= FLT_MAX))
			bad = 1;
		else if (y > amax)
			amax = y;
	}
	if (bad || amax == 0.0f) {
		memset(q8, 0, D);
		*qs = bad ? NAN : 0.0f;
		*qc = 0.0f;
		return;
	}
	inv = 127.0f / amax;
	for (d = 0; d < D; d++) {
		v = (int32_t)rintf(x[d] * inv);
		v = v > 127 ? 127 : v < -127 ? -127 : v;
		q8[d] = (int8_t)v;
		sum += v;
	}
	*qs = amax / 127.0f;
	*qc = 128.0f * (float)sum;
}

/*
 * FP8: the power of two the query is stored with, 2^qe, qe in 0..126:
 * the largest |q x scale| of the item's rows times 2^qe lies in
 * [2^119, 2^120), far from BF16's overflow, and K rows are value x
 * 2^-120, so every product of a query element within 2^-119 of that
 * largest one and a normal E4M3 value is a normal FP32 number (VDPBF16PS
 * flushes subnormal results).
 */
static int32_t bf_query_exp(const struct kvk_attn_job *job,
			    const struct kvk_attn_item *it, uint32_t G,
			    uint32_t RR)
{
	const uint32_t D = job->l->head_dim;
	float amax = 0.0f, y;
	uint32_t hh, r, x;
	int32_t e;

	for (hh = 0; hh < it->nh; hh++)
		for (r = 0; r < RR; r++) {
			uint32_t qi = it->q0 + r / G;
			uint32_t h = (it->head + hh) * G + r % G;
			const float *q = job->q + (((uint64_t)it->seq *
					 (job->n_q ? job->n_q : 1) + qi) *
					 job->q_heads + h) * D;

			for (x = 0; x < D; x++) {
				y = fabsf(q[x] * job->scale);
				if (y > amax && y <= FLT_MAX)
					amax = y;
			}
		}
	if (amax == 0.0f)
		return 120;
	e = 119 - ilogbf(amax);
	return e < 0 ? 0 : e > 126 ? 126 : e;
}

/* x 2^e, one instruction (VSCALEFSS) */
static inline __attribute__((always_inline)) float scale2(float x, int32_t e)
{
	return _mm_cvtss_f32(_mm_scalef_ss(_mm_set_ss(x),
					   _mm_set_ss((float)e)));
}

/* FP8: a new exponent of the weights (and of the output accumulators):
 * the accumulators so far are rescaled by 2^(ve' - ve). */
static __attribute__((noinline))
void bf_set_ve(struct bf_item *b, int32_t ve, uint32_t D)
{
	uint32_t n = b->nh * b->rc * D, i;

	if (b->ve != INT32_MIN && ve < b->ve)
		for (i = 0; i < n; i++)
			b->ov[i] = ldexpf(b->ov[i], ve - b->ve);
	if (b->ve == INT32_MIN || ve < b->ve)
		b->ve = ve;
}

/* INT4: prefetch the group scales of the item's heads in block nb (one
 * run per K and V: the planes of consecutive heads are adjacent). */
static inline __attribute__((always_inline))
void bf_pf_gscales(const struct bf_item *b, const uint8_t *nb)
{
	uint64_t n = b->sstep * b->nh, y;

	n = n < 8192 ? n : 8192;
	for (y = 0; y < n; y += 64) {
		__builtin_prefetch(nb + b->ksoff + y);
		__builtin_prefetch(nb + b->vsoff + y);
	}
}

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
			if (BF_SCALED(dtype) &&
			    (b->pos == b->it->t0 || !b->slot0)) {
				__builtin_prefetch(b->nb + b->ksoff);
				__builtin_prefetch(b->nb + b->vsoff);
			}
			if (dtype == KVK_INT4 &&
			    (b->pos == b->it->t0 || !b->slot0))
				bf_pf_gscales(b, b->nb);
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
				if (BF_SCALED(dtype)) {
					__builtin_prefetch(nb + b->ksoff);
					__builtin_prefetch(nb + b->vsoff);
				}
				if (dtype == KVK_INT4)
					bf_pf_gscales(b, nb);
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
	t->ks = NULL;
	t->vs = NULL;
	if (BF_SCALED(dtype)) {
		memcpy(&t->sk, b->blk + b->ksoff + hh * b->sstep, 4);
		memcpy(&t->sv, b->blk + b->vsoff + hh * b->sstep, 4);
	}
	if (dtype == KVK_INT4) {
		ro = hh * b->sstep + (uint64_t)b->slot0 * (l->head_dim /
			KVK_INT4_GROUP) * 2;
		t->ks = b->blk + b->ksoff + ro;
		t->vs = b->blk + b->vsoff + ro;
	}
	return 1;
}

/*
 * INT8 scores (AVX512-VNNI): VPDPBUSD multiplies 64 unsigned bytes by 64
 * signed bytes and adds each group of four products into an INT32 lane.
 * The K bytes, flipped by XOR 0x80, are k + 128 (unsigned), the query
 * bytes are the row's INT8 query, so a lane sums (k + 128) q8; the
 * reduction subtracts 128 sum(q8) (qc) once per score.  Sums are exact:
 * |dot| <= 255 x 127 x 256 < 2^24.
 */
static inline __attribute__((always_inline))
void bf_scores_i8(struct bf_item *b, const struct bf_tile *t, vf *acc,
		  const uint32_t D, const uint32_t R)
{
	const uint32_t NK = D / 64;
	const uint64_t vk = b->voff - b->koff;
	const int8_t *q8 = (const int8_t *)b->qh;
	uint32_t j, k, r;

	for (j = 0; j < t->n; j++) {
		const uint8_t *kr = t->kp + (uint64_t)j * D;
		__m512i kv[KVK_MAX_HEAD_DIM / 64] = { 0 };

		if (t->nk) {
			const uint8_t *pr = t->nk + (uint64_t)j * D;

			#pragma GCC unroll 4
			for (k = 0; k < NK; k++) {
				__builtin_prefetch(pr + 64 * k);
				__builtin_prefetch(pr + 64 * k + vk);
			}
		}
		#pragma GCC unroll 4
		for (k = 0; k < NK; k++)
			kv[k] = _mm512_xor_si512(_mm512_loadu_si512(
				(const void *)(kr + 64 * k)),
				_mm512_set1_epi8((char)0x80));
		#pragma GCC unroll 16
		for (r = 0; r < R; r++) {
			const int8_t *qr = q8 + (uint64_t)(t->row0 + r) * D;
			__m512i a = _mm512_setzero_si512();

			#pragma GCC unroll 4
			for (k = 0; k < NK; k++)
				a = _mm512_dpbusd_epi32(a, kv[k],
					_mm512_loadu_si512((const void *)
							   (qr + 64 * k)));
			acc[r * VW + j] = (vf)_mm512_cvtepi32_ps(a);
		}
	}
}

/* n x NG FP16 scales at p (n <= 16) -> FP32 at f[0 .. 16 NG), zero
 * beyond; masked loads, so nothing past the tile is read. */
static inline __attribute__((always_inline))
void i4_scales_f32(const uint8_t *p, uint32_t n, const uint32_t NG, float *f)
{
	uint32_t i, c, nh = n * NG;

	#pragma GCC unroll 8
	for (i = 0; i < NG; i++) {
		c = nh > 16 * i ? nh - 16 * i : 0;
		_mm512_store_ps(f + 16 * i, _mm512_cvtph_ps(
			_mm256_maskz_loadu_epi16(c >= 16 ? 0xffff :
				(__mmask16)((1u << c) - 1),
				(const void *)(p + 32 * i))));
	}
}

/* n x NG FP16 scales at p -> g[x]: lane j = scale of group x of position
 * j (zero for j >= n), two groups per VPERMT2W (int4_gidx). */
static inline __attribute__((always_inline))
void i4_scales_t(const uint8_t *p, uint32_t n, const uint32_t NG, __m512 *g)
{
	const uint32_t NV = (NG + 3) / 4 * 2;	/* vectors of 32 scales */
	uint32_t i, x, c, nh = n * NG;
	__m512i h[BF_MAX_NG / 2] = { 0 }, y;

	#pragma GCC unroll 4
	for (i = 0; i < NV; i++) {
		c = nh > 32 * i ? nh - 32 * i : 0;
		h[i] = _mm512_maskz_loadu_epi16(c >= 32 ? 0xffffffffu :
			(__mmask32)((1u << c) - 1),
			(const void *)(p + 64 * i));
	}
	#pragma GCC unroll 4
	for (x = 0; x < NG; x += 2) {
		const __m512i ix = _mm512_load_si512((const void *)
					int4_gidx[NG / 4][x / 2]);

		y = _mm512_permutex2var_epi16(h[0], ix, h[1]);
		if (NG == 8)
			y = _mm512_mask_blend_epi16(0xff00ff00u, y,
				_mm512_permutex2var_epi16(h[2], ix, h[3]));
		g[x] = _mm512_cvtph_ps(_mm512_castsi512_si256(y));
		g[x + 1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(y, 1));
	}
}

/*
 * INT4 scores (head_dim 64, 128 or 256): 64 bytes of a K row are 128
 * nibbles;
 * one VPTERNLOGD makes (n & 15) ^ 8 = k + 8 (unsigned, 0..15) of the low
 * nibbles (the even dimensions), a shift and another of the high ones (the
 * odd dimensions); the query bytes are stored in that order (perm_k()).
 * VPDPBUSD of both halves into one INT32 lane sums 8 products of one group
 * of 32 (lane L of chunk c: group 4c + L / 4), exact (|sum| <= 8 x 15 x
 * 127); the lane is converted and multiplied by its group's scale.  What
 * reading k as k + 8 adds, 8 x sum(q8) per group, is taken off once per
 * tile in bf_softmax(), with the query scale.
 */
static inline __attribute__((always_inline))
void bf_scores_i4(struct bf_item *b, const struct bf_tile *t, vf *acc,
		  const uint32_t D, const uint32_t R)
{
	const uint32_t NC = (D + 127) / 128, NG = D / KVK_INT4_GROUP;
	const uint32_t rb = D / 2;
	const uint64_t vk = b->voff - b->koff;
	const int8_t *q8 = (const int8_t *)b->qh;
	const __m512i m0f = _mm512_set1_epi8(0x0f), m08 = _mm512_set1_epi8(8);
	/* the group of each lane: head_dim 64 has the low nibbles of 32
	 * bytes in lanes 0..7 and the high ones in 8..15 */
	const __m512i gi = D == 64 ?
		_mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0,
				 1, 1, 1, 1, 0, 0, 0, 0) :
		_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2,
				 1, 1, 1, 1, 0, 0, 0, 0);
	float ksf[16 * BF_MAX_NG + 16] __attribute__((aligned(64)));
	uint32_t j, c, r;

	i4_scales_f32(t->ks, t->n, NG, ksf);
	for (j = 0; j < t->n; j++) {
		const uint8_t *kr = t->kp + (uint64_t)j * rb;
		__m512i lo[KVK_MAX_HEAD_DIM / 128] = { 0 };
		__m512i hi[KVK_MAX_HEAD_DIM / 128] = { 0 };
		__m512 gs[KVK_MAX_HEAD_DIM / 128] = { 0 };

		if (t->nk) {
			const uint8_t *pr = t->nk + (uint64_t)j * rb;

			#pragma GCC unroll 2
			for (c = 0; c < NC; c++) {
				__builtin_prefetch(pr + 64 * c);
				__builtin_prefetch(pr + 64 * c + vk);
			}
		}
		for (c = 0; D >= 128 && c < NC; c++) {
			__m512i x = _mm512_loadu_si512((const void *)
						       (kr + 64 * c));

			/* (x & 0x0f) ^ 0x08 */
			lo[c] = _mm512_ternarylogic_epi32(x, m0f, m08, 0x6a);
			hi[c] = _mm512_ternarylogic_epi32(
				_mm512_srli_epi16(x, 4), m0f, m08, 0x6a);
			gs[c] = _mm512_permutexvar_ps(gi, _mm512_loadu_ps(
					ksf + j * NG + 4 * c));
		}
		if (D == 64) {
			/* 32 bytes: low nibbles, then high ones */
			__m256i x = _mm256_loadu_si256((const void *)kr);

			lo[0] = _mm512_ternarylogic_epi32(_mm512_inserti64x4(
				_mm512_castsi256_si512(x),
				_mm256_srli_epi16(x, 4), 1), m0f, m08, 0x6a);
			gs[0] = _mm512_permutexvar_ps(gi, _mm512_loadu_ps(
					ksf + j * NG));
		}
		#pragma GCC unroll 16
		for (r = 0; r < R; r++) {
			const int8_t *qr = q8 + (uint64_t)(t->row0 + r) * D;
			__m512 s = _mm512_setzero_ps();

			#pragma GCC unroll 2
			for (c = 0; c < NC; c++) {
				__m512i a = _mm512_dpbusd_epi32(
					_mm512_setzero_si512(), lo[c],
					_mm512_loadu_si512((const void *)
							   (qr + 128 * c)));

				if (D >= 128)
					a = _mm512_dpbusd_epi32(a, hi[c],
						_mm512_loadu_si512((const void *)
							(qr + 128 * c + 64)));
				s = c ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(a),
							gs[c], s) :
					_mm512_mul_ps(_mm512_cvtepi32_ps(a),
						      gs[c]);
			}
			acc[r * VW + j] = (vf)s;
		}
	}
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

	if (dtype == KVK_INT8) {
		bf_scores_i8(b, t, acc, D, R);
		return;
	}
	if (dtype == KVK_INT4) {
		bf_scores_i4(b, t, acc, D, R);
		return;
	}
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
			__mmask64 nan = 0;

			#pragma GCC unroll 16
			for (k = 0; k < NK; k++)
				kv[k] = fp8_bits32(kr + 32 * k);
			#pragma GCC unroll 8
			for (k = 0; k < NK / 2; k++)
				nan |= fp8_nanm(_mm512_loadu_si512(
					(const void *)(kr + 64 * k)));
			if (__builtin_expect(nan != 0, 0))
				for (k = 0; k < NK; k++)
					kv[k] = fp8_nan(kv[k]);
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
				if (BF_SPLIT(dtype))
					c = dp(c, kv[k], _mm512_load_si512(
					       (const void *)(lo + 32 * k)));
			}
			acc[r * VW + j] = BF_SPLIT(dtype) ?
					  (vf)_mm512_add_ps(a, c) : (vf)a;
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
	const uint32_t NG = D / KVK_INT4_GROUP;
	vf sr[16], p;
	vi mr[16];
	__mmask16 up = 0;
	__m256bh hi, lo;
	uint32_t r, j, x;
	float sv = 1.0f;
	__m512 kg[BF_MAX_NG], vg[BF_MAX_NG];

	if (dtype == KVK_INT4) {
		i4_scales_t(t->ks, t->n, NG, kg);
		i4_scales_t(t->vs, t->n, NG, vg);
	}
	#pragma GCC unroll 16
	for (r = 0; r < R; r++) {
		int32_t lim = (int32_t)(limit[r] - (int64_t)t->ts < VW ?
					limit[r] - (int64_t)t->ts : VW);

		for (j = t->n; j < VW; j++)
			acc[r * VW + j] = splat(0.0f);
		sr[r] = reduce_vw(acc + r * VW);
		if (dtype == KVK_FP8)
			sr[r] = sr[r] * b->qf * t->sk;
		if (dtype == KVK_INT8)
			sr[r] = (sr[r] - b->qc[t->row0 + r]) *
				(b->qs[t->row0 + r] * t->sk);
		if (dtype == KVK_INT4) {
			const float *qg = b->qg[t->row0 + r];
			__m512 c = (__m512)sr[r];

			#pragma GCC unroll 8
			for (x = 0; x < NG; x++)
				c = _mm512_fmadd_ps(kg[x],
						    _mm512_set1_ps(qg[x]), c);
			sr[r] = (vf)c * b->qs[t->row0 + r];
		}
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
	if (BF_SCALED(dtype)) {
		/* weights times sv 2^ve in (2^-126, 2^100]: a larger block
		 * scale lowers ve for the rest of the item (all rows) */
		if (__builtin_expect(t->sv > 0 &&
				     (b->ve == INT32_MIN ||
				      scale2(t->sv, b->ve) > 0x1p100f), 0))
			bf_set_ve(b, 70 - ilogbf(t->sv), D);
		sv = b->ve == INT32_MIN ? 0.0f : scale2(t->sv, b->ve);
	}
	#pragma GCC unroll 16
	for (r = 0; r < R; r++) {
		/* nothing attended yet: every score is -inf, exp(-inf) = 0 */
		float mm = m[r] == -INFINITY ? 0.0f : m[r];

		p = vexp(sr[r] - mm);
		p = sel(mr[r], splat(0.0f), p);
		lv[r] += p;
		if (BF_SCALED(dtype))
			p *= sv;
		if (dtype == KVK_INT4) {
			/* one weight per group: p x the group's V scale */
			#pragma GCC unroll 8
			for (x = 0; x < NG; x++) {
				hi = _mm512_cvtneps_pbh(_mm512_mul_ps(
					(__m512)p, vg[x]));
				memcpy(b->pph + (r * NG + x) * 8, &hi, 32);
			}
			continue;
		}
		if (BF_SPLIT_P(dtype)) {
			split_bf16(p, &hi, &lo);
			memcpy(b->ppl + r * 8, &lo, 32);
		} else {
			hi = _mm512_cvtneps_pbh((__m512)p);
		}
		memcpy(b->pph + r * 8, &hi, 32);
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
	const uint32_t rb = dtype == KVK_BF16 ? 2 * D :
			    dtype == KVK_INT4 ? D / 2 : D;
	const uint32_t NG = D / KVK_INT4_GROUP;
	uint32_t g, c, r, k, j;
	__m512i i4t = _mm512_setzero_si512(), i4p0 = i4t, i4p1 = i4t;

	if (dtype == KVK_INT4) {
		i4t = _mm512_load_si512((const void *)int4_bf16);
		i4p0 = _mm512_load_si512((const void *)int4_pair[0]);
		i4p1 = _mm512_load_si512((const void *)int4_pair[1]);
	}

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
				} else if (dtype == KVK_INT4) {
					/* rows j and j+1 in one vector; words
					 * (j, j+1) of 16 dimensions, low
					 * nibbles and high nibbles */
					const uint8_t *pb = rbp ? rbp + 32 * c :
							    zero_row;
					__m512i ab, p0, p1;

					ab = _mm512_inserti64x4(
						_mm512_castsi256_si512(
						_mm256_loadu_si256((const void *)
							(ra + 32 * c))),
						_mm256_loadu_si256((const void *)pb),
						1);
					p0 = _mm512_permutexvar_epi8(i4p0, ab);
					p1 = _mm512_permutexvar_epi8(i4p1, ab);
					w[0] = _mm512_permutexvar_epi16(p0, i4t);
					w[1] = _mm512_permutexvar_epi16(
						_mm512_srli_epi16(p0, 4), i4t);
					w[2] = _mm512_permutexvar_epi16(p1, i4t);
					w[3] = _mm512_permutexvar_epi16(
						_mm512_srli_epi16(p1, 4), i4t);
				} else if (dtype == KVK_INT8) {
					const uint8_t *pb = rbp ? rbp + 64 * c :
							    zero_row;
					__m512i xa, xb;

					xa = _mm512_loadu_si512((const void *)
								(ra + 64 * c));
					xb = _mm512_loadu_si512((const void *)pb);
					int8_bf16(&b->lut,
						  _mm512_unpacklo_epi8(xa, xb),
						  &w[0], &w[1]);
					int8_bf16(&b->lut,
						  _mm512_unpackhi_epi8(xa, xb),
						  &w[2], &w[3]);
				} else {
					const uint8_t *pb = rbp ? rbp + 64 * c :
							    zero_row;
					__m512i xa, xb;
					__m512i u0, u1, z = _mm512_setzero_si512();

					xa = _mm512_loadu_si512((const void *)
								(ra + 64 * c));
					xb = _mm512_loadu_si512((const void *)pb);
					u0 = _mm512_unpacklo_epi8(xa, xb);
					u1 = _mm512_unpackhi_epi8(xa, xb);
					w[0] = fp8_bits_hi(_mm512_unpacklo_epi8(z, u0));
					w[1] = fp8_bits_hi(_mm512_unpackhi_epi8(z, u0));
					w[2] = fp8_bits_hi(_mm512_unpacklo_epi8(z, u1));
					w[3] = fp8_bits_hi(_mm512_unpackhi_epi8(z, u1));
					if (__builtin_expect((fp8_nanm(xa) |
							      fp8_nanm(xb)) != 0, 0))
						for (k = 0; k < 4; k++)
							w[k] = fp8_nan(w[k]);
				}
				if (dtype == KVK_INT4) {
					/* w[0], w[1]: group 2c; w[2], w[3]:
					 * group 2c + 1 */
					#pragma GCC unroll 16
					for (r = 0; r < RG; r++) {
						const uint32_t *pw = b->pph +
							((g + r) * NG + 2 * c) *
							8 + j / 2;
						__m512i b0 = bc32(pw);
						__m512i b1 = bc32(pw + 8);

						oa[r][0] = dp(oa[r][0], w[0], b0);
						oa[r][1] = dp(oa[r][1], w[1], b0);
						oa[r][2] = dp(oa[r][2], w[2], b1);
						oa[r][3] = dp(oa[r][3], w[3], b1);
					}
					continue;
				}
				#pragma GCC unroll 16
				for (r = 0; r < RG; r++) {
					__m512i bh = bc32(b->pph + (g + r) * 8 +
							  j / 2);
					__m512i bl = BF_SPLIT_P(dtype) ?
						bc32(b->ppl + (g + r) * 8 +
						     j / 2) : bh;

					#pragma GCC unroll 16
					for (k = 0; k < 4; k++) {
						oa[r][k] = dp(oa[r][k], w[k], bh);
						if (BF_SPLIT_P(dtype))
							oa[r][k] = dp(oa[r][k],
								      w[k], bl);
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
 * One row's output accumulators (V order) to natural order at o, times 2^e
 * when scaled (VSCALEFPS: one instruction per 16 values, exact unless the
 * result is subnormal).  Per 64 dimensions, each output vector takes its
 * lanes from the four accumulator vectors by two VPERMT2PS and a masked
 * move (bf_oidx, bf_omask).
 */
static inline __attribute__((always_inline))
void bf_out_row(const float *ov, float *o, const uint32_t D,
		const uint32_t dtype, const int scaled, float e)
{
	const __m512 se = _mm512_set1_ps(e);
	uint32_t c, k;

	for (c = 0; c < D; c += 64) {
		__m512 v[4];

		#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			v[k] = _mm512_loadu_ps(ov + c + 16 * k);
			if (scaled)
				v[k] = _mm512_scalef_ps(v[k], se);
		}
		#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			__m512i ix = _mm512_load_si512((const void *)
						       bf_oidx[dtype][k]);

			_mm512_storeu_ps(o + c + 16 * k, _mm512_mask_mov_ps(
				_mm512_permutex2var_ps(v[0], ix, v[1]),
				bf_omask[dtype][k],
				_mm512_permutex2var_ps(v[2], ix, v[3])));
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
	int32_t qe = 0;
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
	b.ov = (float *)(b.pph + 16 * BF_MAX_NG * 8);
	b.qf = 1.0f;
	b.ve = INT32_MIN;	/* FP8: set by the first block with a scale */
	if (dtype == KVK_FP8)
		qe = bf_query_exp(job, it, G, RR);
	if (dtype == KVK_INT8) {
		b.lut.h0 = _mm512_load_si512((const void *)int8_bf16_hi);
		b.lut.h1 = _mm512_load_si512((const void *)(int8_bf16_hi + 64));
		b.lut.l0 = _mm512_load_si512((const void *)int8_bf16_lo);
		b.lut.l1 = _mm512_load_si512((const void *)(int8_bf16_lo + 64));
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
				b.qs[row] = 0.0f;
				b.qc[row] = 0.0f;
				memset(b.qg[row], 0, sizeof(b.qg[row]));
				b.limit[row] = -1;
				continue;
			}
			uint32_t qi = it->q0 + r / G, h = kh * G + r % G;
			const float *q = job->q + (((uint64_t)it->seq *
						   (job->n_q ? job->n_q : 1) +
						   qi) * job->q_heads + h) * D;

			for (x = 0; x < D; x++)
				tmp[x] = q[perm_k(dtype, D, x)] * job->scale;
			if (BF_Q8(dtype)) {
				int8_t *q8 = (int8_t *)b.qh + row * D;

				bf_quant_query(tmp, D, q8, &b.qs[row],
					       &b.qc[row]);
				if (dtype == KVK_INT4) {
					memset(b.qg[row], 0,
					       sizeof(b.qg[row]));
					for (x = 0; x < D; x++)
						b.qg[row][perm_k(dtype, D, x) /
							  KVK_INT4_GROUP] -=
							8.0f * q8[x];
				}
				b.limit[row] = job->n_q ?
					(int64_t)ctx - job->n_q + qi :
					(int64_t)ctx - 1;
				continue;
			}
			for (x = 0; x < D; x += VW) {
				__m256bh hi, lo;
				vf y = ld(tmp + x);

				if (dtype == KVK_FP8)
					y = (vf)_mm512_scalef_ps((__m512)y,
						_mm512_set1_ps((float)qe));
				if (BF_SPLIT(dtype)) {
					split_bf16(y, &hi, &lo);
					memcpy(b.ql + row * D + x, &lo, 32);
				} else {
					hi = _mm512_cvtneps_pbh((__m512)y);
				}
				memcpy(b.qh + row * D + x, &hi, 32);
			}
			b.limit[row] = job->n_q ?
				       (int64_t)ctx - job->n_q + qi :
				       (int64_t)ctx - 1;
		}
	}

	if (dtype == KVK_FP8)
		b.qf = ldexpf(1.0f, 120 - qe);
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
			if (!BF_SCALED(dtype))
				bf_out_row(b.ov + row * D, o + 2, D, dtype, 0,
					   0.0f);
			else if (b.ve == INT32_MIN)
				memset(o + 2, 0, sizeof(float) * D);
			else
				bf_out_row(b.ov + row * D, o + 2, D, dtype, 1,
					   (float)((dtype == KVK_FP8 ? 120 : 0) -
						   b.ve));
		}
	}
}
