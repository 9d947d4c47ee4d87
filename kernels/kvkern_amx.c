// SPDX-License-Identifier: MIT
/*
 * kvkern_amx.c - decode and multi-token attention on AMX tiles
 * (AMX-TILE + AMX-BF16, with AVX-512 for the conversions and the
 * softmax), for every dtype.  kvkern_cpu.c picks it at run time when the
 * CPU has AMX and the kernel grants the tile state; the calls the tiles
 * do not take (kvk_amx_takes(): few query rows per kv head, where the
 * tiles' columns go unused, and FP8/INT8 with head_dim not a multiple of
 * 64) it gives to the avx512bf16 loops instead.
 *
 * One TDPBF16PS multiplies a 16 x 32 BF16 tile by a 32 x 16 one into
 * 16 x 16 FP32.  Every FP8 E4M3, INT8 and INT4 value is exact in BF16,
 * so every dtype is converted exactly, in registers, to BF16 rows in a
 * small per-thread buffer (L1) and multiplied on the tiles; BF16 K rows
 * are loaded into the tiles straight from the block.  Block scales
 * (FP8/INT8) and INT4 group scales are applied to FP32 values: scores
 * are scaled after the product, and V's scales multiply the softmax
 * weights before they become a tile.
 *
 * An item (kvkern_internal.h) is cut into steps of up to 64 positions
 * (32 at head_dim > 128); a step runs all the item's kv heads, so that
 * the blocks it spans are read whole.  Per step and kv head:
 *
 *   scores   S^T = K Q^T: the K rows (16 positions) are the A tile, the
 *            query rows of the kv head (R = 1, 4, 8 or 16) the columns
 *            of B.  The query (times the softmax scale) is split into
 *            hi + lo BF16 parts (x - hi - lo is about 2^-17 x); both
 *            parts are multiplied into the same FP32 tile.  INT4: one
 *            tile per group of 32 dimensions (one tile step).
 *   softmax  the score tiles are stored side by side (R columns each)
 *            and transposed in registers, 16 x 16 floats at a time, to
 *            vectors of 16 positions per query row; online (max, sum)
 *            per row as in the other paths, sums per lane.
 *   values   O += P V: P (R rows hi, R rows lo, 32 positions) is the A
 *            tile, V the B tile in pair-interleaved form (VNNI: row k
 *            holds positions 2k and 2k+1 of 16 dimensions), built while
 *            converting.  The weights are split into hi + lo like the
 *            query (hi: truncated to BF16, lo: the exact remainder
 *            rounded), so each product is hi * v + lo * v in FP32.
 *
 * The outputs accumulate in FP32 tiles stored per kv head between steps
 * (rescaled in memory when a row's maximum grows).  Converted rows keep
 * the dimensions in a fixed permuted order (the byte interleaves); the
 * query is stored in the K order once per item and the outputs are put
 * back in natural order when the item ends (perm_k(), perm_v()).
 * The tile registers are assigned in amx_config().
 */
#define VW 16
#define KVK_SIMD_HELPERS_ONLY
#include "kvkern_simd.h"

#include <pthread.h>

/* ---- tiles ---- */

struct amx_cfg {
	uint8_t palette;
	uint8_t start_row;
	uint8_t rsvd[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* The compiler must see the memory the tile instructions read and write:
 * the intrinsics' asm statements do not say so. */
#define TLOAD(t, p, s) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t \
	:: "r"((const void *)(p)), "r"((long)(s)) : "memory")
#define TSTORE(t, p, s) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" \
	:: "r"((void *)(p)), "r"((long)(s)) : "memory")
#define TZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a \
	", %%tmm" #c ::)

/*
 * Tile registers (R = query rows per kv head, 1, 4, 8 or 16):
 *   R <= 8: 0, 1 scores and 2 query (16 rows x 2R floats: the hi and lo
 *           parts side by side), 3 K or V (16 x 64 B), 4, 5 weights of
 *           two spans and 6, 7 outputs (2R rows x 64 B: R rows hi, R lo).
 *   R = 16: all 16 x 64 B: 0, 1 scores, 2, 3 query hi, lo, 4 K or V,
 *           0 to 3 weights (two spans, hi and lo), 6, 7 outputs.
 */
static void amx_config(uint32_t R)
{
	struct amx_cfg c __attribute__((aligned(64)));
	int i;

	memset(&c, 0, sizeof(c));
	c.palette = 1;
	for (i = 0; i < 8; i++) {
		c.rows[i] = 16;
		c.colsb[i] = 64;
	}
	if (R < 16) {
		for (i = 0; i < 3; i++)
			c.colsb[i] = (uint16_t)(8 * R);
		for (i = 4; i < 8; i++)
			c.rows[i] = (uint8_t)(2 * R);
	}
	__asm__ volatile("ldtilecfg %0" :: "m"(c));
}

/* ---- conversions to BF16 ---- */

static uint8_t lut_fp8[256] __attribute__((aligned(64)));	/* hi, lo */
static uint8_t lut_int8[256] __attribute__((aligned(64)));	/* hi, lo */
static uint8_t lut_int4[64] __attribute__((aligned(64)));	/* lo, hi */
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
	uint32_t c, b;

	for (c = 0; c < 128; c++) {
		/* FP8 E4M3 magnitude c; 0x7f is NaN */
		b = c == 0x7f ? 0x7fc0 : kvk_f32_to_bf16(kvk_fp8_to_f32(
					(uint8_t)c));
		lut_fp8[c] = (uint8_t)(b >> 8);
		lut_fp8[128 + c] = (uint8_t)b;
		/* INT8 magnitude c, 128 at index 0 (0 itself is masked) */
		b = kvk_f32_to_bf16(c ? (float)c : 128.0f);
		lut_int8[c] = (uint8_t)(b >> 8);
		lut_int8[128 + c] = (uint8_t)b;
	}
	for (c = 0; c < 16; c++) {
		b = kvk_f32_to_bf16((float)(c < 8 ? (int)c : (int)c - 16));
		lut_int4[c] = (uint8_t)b;
		lut_int4[16 + c] = (uint8_t)(b >> 8);
	}
}

struct luts {
	__m512i h0, h1, l0, l1, sign;		/* FP8 / INT8 */
	__m512i i4, i4mask, i4hi, k4, v4[2], v4perm;	/* INT4 */
};

/*
 * 64 FP8 (or INT8) bytes -> two vectors of 32 BF16: w0 holds the bytes
 * 0..7 of each 128-bit lane L, w1 the bytes 8..15.  Two 128-entry byte
 * lookups (high and low byte of the BF16 code of the magnitude) and two
 * byte interleaves.  INT8: the magnitude of -128 is 0x80, index 0, which
 * holds 128; 0 itself is masked to zero.
 */
static inline __attribute__((always_inline))
void to_bf16(const struct luts *t, __m512i x, __m512i *w0, __m512i *w1,
	     const uint32_t dtype)
{
	__m512i hi, lo;

	if (dtype == KVK_FP8) {
		hi = _mm512_permutex2var_epi8(t->h0, x, t->h1);
		lo = _mm512_permutex2var_epi8(t->l0, x, t->l1);
	} else {
		__m512i a = _mm512_abs_epi8(x);
		__mmask64 nz = _mm512_test_epi8_mask(x, x);

		hi = _mm512_maskz_permutex2var_epi8(nz, t->h0, a, t->h1);
		lo = _mm512_maskz_permutex2var_epi8(nz, t->l0, a, t->l1);
	}
	hi = _mm512_ternarylogic_epi32(hi, x, t->sign, 0xf8);	/* hi | x & s */
	*w0 = _mm512_unpacklo_epi8(lo, hi);
	*w1 = _mm512_unpackhi_epi8(lo, hi);
}

/* One nibble per byte of m (low 4 bits) -> BF16, both bytes of each word
 * holding the same nibble: a 32-entry byte lookup (lo bytes, hi bytes). */
static inline __attribute__((always_inline))
__m512i nib_bf16(const struct luts *t, __m512i m)
{
	m = _mm512_ternarylogic_epi32(m, t->i4mask, t->i4hi, 0xea);
	return _mm512_permutexvar_epi8(m, t->i4);
}

/*
 * The natural dimension of element x of a converted K row (the A tile's
 * order, which the query's B tile follows).  FP8/INT8: to_bf16() of each
 * 64-dimension chunk; INT4: each group of 32 (one 16-byte broadcast,
 * qword p of the result holds group elements 16 (p & 1) + 4 (p >> 1) +
 * 0..3).
 */
static inline uint32_t perm_k(uint32_t dtype, uint32_t x)
{
	uint32_t c = x / 64, t = x % 64 / 32, L = x % 32 / 8, i = x % 8;
	uint32_t p = x % 32 / 4;

	switch (dtype) {
	case KVK_BF16:
		return x;
	case KVK_INT4:
		return x / 32 * 32 + 16 * (p & 1) + 4 * (p >> 1) + x % 4;
	default:
		return 64 * c + 16 * L + 8 * t + i;
	}
}

/*
 * The natural dimension of column n of output tile x16 (16 dimensions,
 * VNNI V rows).  BF16: unpack{lo,hi}_epi16 of 32-dimension halves; FP8 /
 * INT8: unpack{lo,hi}_epi8 of the rows, then of the lookup bytes; INT4:
 * per group g the tiles 2g and 2g + 1 (qword p of tile 2g + h holds
 * dimensions 8 (p % 4) + 4 h + 2 (p / 4) + 0..1).
 */
static inline uint32_t perm_v(uint32_t dtype, uint32_t x16, uint32_t n)
{
	uint32_t c = x16 / 4, k = x16 % 4, L = n / 4, i = n % 4;
	uint32_t g = x16 / 2, h = x16 % 2, p = n / 2;

	switch (dtype) {
	case KVK_BF16:
		return 64 * c + 32 * (k / 2) + 8 * L + 4 * (k % 2) + i;
	case KVK_INT4:
		return 32 * g + 8 * (p % 4) + 4 * h + 2 * (p / 4) + n % 2;
	default:
		return 64 * c + 16 * L + 4 * k + i;
	}
}

/* ---- per item state ---- */

#define ST_MAX 64		/* positions per step, at most */
#define TILE 16			/* positions per score tile */
#define NG_MAX (KVK_MAX_HEAD_DIM / KVK_INT4_GROUP)

/* per-thread scratch, bytes (kvk_simd_amx.scratch_bytes) */
#define QT_BYTES (4 * KVK_ITEM_ELEMS)		/* hi + lo query tiles */
#define O_BYTES (8 * KVK_ITEM_ELEMS)		/* output tiles */
#define KC_BYTES (ST_MAX * 128 * 2)			/* K rows of a step */
#define VC_BYTES (ST_MAX * 128 * 2)			/* V rows of a step */
#define SB_BYTES (16 * 16 * 16 * 4)			/* score slots */
#define PB_BYTES (16 * ST_MAX * 4)			/* weights, FP32 */
#define AP_BYTES (16 * 1024 * 2)			/* weight tiles */

struct amx_item {
	const struct kvk_attn_job *job;
	const struct kvk_attn_item *it;
	const struct kvk_layout *l;
	const uint32_t *table;
	uint32_t D, nh, RR, ST, ng, rb, T;
	uint64_t koff, voff, ksoff, vsoff, plane;
	struct luts lut;
	uint32_t *qt;		/* [nh][D/32][hi, lo][16][R] BF16 pairs */
	float *o;		/* [nh][D/16][ra][16] output tiles */
	uint16_t *kc;		/* [ST][D] converted K rows */
	uint8_t *vc;		/* [ST/32][D/16][16][64 B] V tiles (VNNI) */
	float *sb;		/* [..][16][16] score slots */
	float *pb;		/* [R][ST] weights (x V block scale) */
	uint8_t *ap;		/* weight tiles */
	/* the positions of the step being converted */
	const uint8_t *rblk[ST_MAX];
	uint32_t rslot[ST_MAX];
	/* K tiles of the unit being converted: base and row stride */
	const uint8_t *kp[ST_MAX / TILE];
	long kst[ST_MAX / TILE];
	/* scales: K's of two units (a unit's K is converted while the one
	 * before still needs its scales), V's of one */
	float sk[2][ST_MAX];			/* FP8/INT8 block scale per row */
	float gk[2][ST_MAX / TILE][NG_MAX][TILE];	/* INT4 group scales */
	float sv[ST_MAX];
	float gv[NG_MAX][ST_MAX];
	float m[KVK_ITEM_ROWS];
	int64_t limit[16];	/* last position each query row attends to */
	vf lv[KVK_ITEM_ROWS];
};

#define AMX_SCRATCH (((sizeof(struct amx_item) + 63) & ~(size_t)63) + \
		     QT_BYTES + O_BYTES + KC_BYTES + VC_BYTES + SB_BYTES + \
		     PB_BYTES + AP_BYTES)

static inline uint32_t amx_ra(uint32_t R)
{
	return R < 8 ? 2 * R : 16;
}

/* INT4 group scales of n rows (FP16, ng per row, in token order) into
 * dst[g][r] (stride dstride floats); rows n..15 get 0. */
static inline __attribute__((always_inline))
void int4_scales(const struct amx_item *b, const uint8_t *const *rows,
		 uint32_t n, float *dst, uint32_t dstride)
{
	uint32_t r, g;

	for (g = 0; g < b->ng; g++)
		for (r = 0; r < TILE; r++) {
			uint16_t h = 0;

			if (r < n)
				memcpy(&h, rows[r] + 2 * g, 2);
			dst[g * dstride + r] = f16f(h);
		}
}

/*
 * Row conversions, with the number of 64-byte source chunks (FP8/INT8:
 * 64 dimensions, BF16: 32, INT4: 128) a constant where head_dim is 64,
 * 128 or 256, so that the loops unroll and the lookup tables stay in
 * registers.
 */
#define NC_DISPATCH(nc, ...) \
	do { \
		switch (nc) { \
		case 1: { const uint32_t NC = 1; __VA_ARGS__; break; } \
		case 2: { const uint32_t NC = 2; __VA_ARGS__; break; } \
		case 4: { const uint32_t NC = 4; __VA_ARGS__; break; } \
		case 8: { const uint32_t NC = 8; __VA_ARGS__; break; } \
		default: { const uint32_t NC = (nc); __VA_ARGS__; break; } \
		} \
	} while (0)

/* One K row (FP8/INT8: NC chunks of 64 dimensions; INT4: NC groups of
 * 32) into BF16 at dst. */
static inline __attribute__((always_inline))
void conv_k_row(uint8_t *restrict dst, const uint8_t *restrict src,
		const struct luts *t, const uint32_t NC, const uint32_t dtype)
{
	uint32_t c;

	if (dtype == KVK_INT4) {
		const __m512i k4 = t->k4;

		#pragma GCC unroll 8
		for (c = 0; c < NC; c++) {
			__m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128(
					(const void *)(src + 16 * c)));

			x = _mm512_multishift_epi64_epi8(k4, x);
			_mm512_storeu_si512((void *)(dst + 64 * c),
					    nib_bf16(t, x));
		}
		return;
	}
	#pragma GCC unroll 4
	for (c = 0; c < NC; c++) {
		__m512i w0, w1;

		to_bf16(t, _mm512_loadu_si512((const void *)(src + 64 * c)),
			&w0, &w1, dtype);
		_mm512_storeu_si512((void *)(dst + 128 * c), w0);
		_mm512_storeu_si512((void *)(dst + 128 * c + 64), w1);
	}
}

/* One pair of V rows (positions 2k, 2k + 1) into row k of the span's
 * VNNI tiles (tile x16 at dst + 1024 x16). */
static inline __attribute__((always_inline))
void conv_v_pair(uint8_t *restrict dst, const uint8_t *restrict ra,
		 const uint8_t *restrict rbp, const struct luts *t,
		 const uint32_t NC, const uint32_t dtype)
{
	uint32_t c;

	if (dtype == KVK_BF16) {		/* NC chunks of 32 dims */
		#pragma GCC unroll 8
		for (c = 0; c < NC; c++) {
			__m512i a0 = _mm512_loadu_si512((const void *)(ra + 64 * c));
			__m512i b0 = _mm512_loadu_si512((const void *)(rbp + 64 * c));

			_mm512_storeu_si512((void *)(dst + 2048 * c),
					    _mm512_unpacklo_epi16(a0, b0));
			_mm512_storeu_si512((void *)(dst + 2048 * c + 1024),
					    _mm512_unpackhi_epi16(a0, b0));
		}
	} else if (dtype == KVK_INT4) {		/* NC groups of 32 */
		const __m512i vp = t->v4perm, c0 = t->v4[0], c1 = t->v4[1];

		#pragma GCC unroll 8
		for (c = 0; c < NC; c++) {
			__m512i xa = _mm512_castsi128_si512(_mm_loadu_si128(
					(const void *)(ra + 16 * c)));
			__m512i xb = _mm512_castsi128_si512(_mm_loadu_si128(
					(const void *)(rbp + 16 * c)));
			__m512i x = _mm512_permutex2var_epi8(xa, vp, xb);

			_mm512_storeu_si512((void *)(dst + 2048 * c), nib_bf16(t,
					    _mm512_multishift_epi64_epi8(c0, x)));
			_mm512_storeu_si512((void *)(dst + 2048 * c + 1024),
					    nib_bf16(t, _mm512_multishift_epi64_epi8(
					    c1, x)));
		}
	} else {				/* NC chunks of 64 dims */
		#pragma GCC unroll 4
		for (c = 0; c < NC; c++) {
			__m512i xa = _mm512_loadu_si512((const void *)(ra + 64 * c));
			__m512i xb = _mm512_loadu_si512((const void *)(rbp + 64 * c));
			__m512i w0, w1, w2, w3;

			to_bf16(t, _mm512_unpacklo_epi8(xa, xb), &w0, &w1, dtype);
			to_bf16(t, _mm512_unpackhi_epi8(xa, xb), &w2, &w3, dtype);
			_mm512_storeu_si512((void *)(dst + 4096 * c), w0);
			_mm512_storeu_si512((void *)(dst + 4096 * c + 1024), w1);
			_mm512_storeu_si512((void *)(dst + 4096 * c + 2048), w2);
			_mm512_storeu_si512((void *)(dst + 4096 * c + 3072), w3);
		}
	}
}

/* Convert (or copy) the K rows of tile j of the step, head hh, into kc.
 * Returns the A tile's base and sets its row stride. */
static inline __attribute__((always_inline))
const uint8_t *k_tile(struct amx_item *b, uint32_t hh, uint32_t j,
		      uint32_t n, uint32_t par, long *stride,
		      const uint32_t dtype)
{
	const uint32_t D = b->D, p0 = j * TILE, rb = b->rb;
	const uint64_t ko = b->koff + hh * b->plane;
	const struct luts t = b->lut;
	uint8_t *kc = (uint8_t *)b->kc + (uint64_t)p0 * 2 * D;
	const uint8_t *rows[TILE];
	uint32_t r;

	for (r = 0; r < n; r++)
		rows[r] = b->rblk[p0 + r] + ko + (uint64_t)b->rslot[p0 + r] * rb;
	if (dtype == KVK_BF16 && n == TILE &&
	    rows[TILE - 1] == rows[0] + (uint64_t)(TILE - 1) * rb) {
		*stride = rb;
		return rows[0];
	}
	*stride = 2 * D;
	if (dtype == KVK_BF16) {
		for (r = 0; r < n; r++)
			memcpy(kc + (uint64_t)r * 2 * D, rows[r], 2 * D);
	} else {
		NC_DISPATCH(dtype == KVK_INT4 ? D / 32 : D / 64,
			for (r = 0; r < n; r++)
				conv_k_row(kc + (uint64_t)r * 2 * D, rows[r],
					   &t, NC, dtype));
	}
	if (n < TILE)
		memset(kc + (uint64_t)n * 2 * D, 0, (uint64_t)(TILE - n) * 2 * D);
	if (dtype == KVK_FP8 || dtype == KVK_INT8) {
		const uint64_t so = b->ksoff + hh * 4;

		for (r = 0; r < TILE; r++) {
			float s = 0.0f;

			if (r < n)
				memcpy(&s, b->rblk[p0 + r] + so, 4);
			b->sk[par][p0 + r] = s;
		}
	} else if (dtype == KVK_INT4) {
		const uint8_t *sr[TILE];
		const uint64_t so = b->ksoff + hh * b->T * b->ng * 2;

		for (r = 0; r < n; r++)
			sr[r] = b->rblk[p0 + r] + so + (uint64_t)b->rslot[p0 + r] *
				b->ng * 2;
		int4_scales(b, sr, n, &b->gk[par][j][0][0], TILE);
	}
	return kc;
}

/* V rows of the step (n positions), head hh, into vc: pair-interleaved
 * BF16, tile (span s, x16) row k = positions 32 s + 2 k, + 1. */
static inline __attribute__((always_inline))
void v_rows(struct amx_item *b, uint32_t hh, uint32_t n, const uint32_t dtype)
{
	static const uint8_t zero[KVK_MAX_HEAD_DIM * 2]
		__attribute__((aligned(64)));
	const uint32_t D = b->D, nsp = (n + 31) / 32, rb = b->rb;
	const uint64_t vo = b->voff + hh * b->plane;
	const struct luts t = b->lut;
	uint32_t s, k, r;

	NC_DISPATCH(dtype == KVK_FP8 || dtype == KVK_INT8 ? D / 64 : D / 32,
		for (s = 0; s < nsp; s++) {
			uint8_t *vt = b->vc + (uint64_t)s * D * 64;

			for (k = 0; k < 16; k++) {
				uint32_t pa = 32 * s + 2 * k, pbp = pa + 1;
				const uint8_t *ra = pa < n ? b->rblk[pa] + vo +
					(uint64_t)b->rslot[pa] * rb : zero;
				const uint8_t *rbq = pbp < n ? b->rblk[pbp] + vo +
					(uint64_t)b->rslot[pbp] * rb : zero;

				conv_v_pair(vt + 64 * k, ra, rbq, &t, NC, dtype);
			}
		});
	/* scales of the rows, 0 beyond n to the end of the last span */
	if (dtype == KVK_FP8 || dtype == KVK_INT8) {
		const uint64_t so = b->vsoff + hh * 4;

		for (r = 0; r < 32 * nsp; r++) {
			b->sv[r] = 0.0f;
			if (r < n)
				memcpy(&b->sv[r], b->rblk[r] + so, 4);
		}
	} else if (dtype == KVK_INT4) {
		const uint64_t so = b->vsoff + hh * b->T * b->ng * 2;
		const uint8_t *sr[TILE];
		uint32_t j, nj;

		for (j = 0; j < 2 * nsp; j++) {
			nj = n <= j * TILE ? 0 : n - j * TILE < TILE ?
			     n - j * TILE : TILE;
			for (r = 0; r < nj; r++)
				sr[r] = b->rblk[j * TILE + r] + so +
					(uint64_t)b->rslot[j * TILE + r] *
					b->ng * 2;
			int4_scales(b, sr, nj, &b->gv[0][j * TILE], ST_MAX);
		}
	}
}

/* 16 x 16 floats: r[i] lane c -> r[c] lane i. */
static inline __attribute__((always_inline)) void tr16(__m512 *r)
{
	__m512 t[16];
	int i, k;

	for (i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	for (i = 0; i < 16; i += 4) {
		r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
		r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
		r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
		r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
	}
	for (k = 0; k < 4; k++) {
		t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
		t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
		t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
		t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
	}
	for (k = 0; k < 4; k++) {
		r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
		r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
		r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
		r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xdd);
	}
}

/* hi + lo split of 32 weights (two vectors) into rows of BF16: hi is x
 * truncated to BF16 (exact), lo the exact remainder rounded to BF16. */
static inline __attribute__((always_inline))
void split_row(__m512 x0, __m512 x1, void *hi, void *lo)
{
	const __m512i mk = _mm512_set1_epi32((int)0xffff0000u);
	__m512 h0 = _mm512_castsi512_ps(_mm512_and_si512(
			_mm512_castps_si512(x0), mk));
	__m512 h1 = _mm512_castsi512_ps(_mm512_and_si512(
			_mm512_castps_si512(x1), mk));

	_mm512_store_si512(hi, (__m512i)_mm512_cvtne2ps_pbh(h1, h0));
	_mm512_store_si512(lo, (__m512i)_mm512_cvtne2ps_pbh(
			   _mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0)));
}

/* The query's split: 32 values into hi (truncated, exact) and lo (the
 * remainder rounded) BF16 pairs; a non-finite value is carried by hi
 * alone (NaN stays NaN). */
static inline __attribute__((always_inline))
void q_split(const float *x, uint32_t *hi, uint32_t *lo)
{
	const __m512i mk = _mm512_set1_epi32((int)0xffff0000u);
	__m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
	__mmask16 n0 = _mm512_fpclass_ps_mask(x0, 0x99);	/* NaN, Inf */
	__mmask16 n1 = _mm512_fpclass_ps_mask(x1, 0x99);
	__m512 h0 = _mm512_castsi512_ps(_mm512_and_si512(
			_mm512_castps_si512(x0), mk));
	__m512 h1 = _mm512_castsi512_ps(_mm512_and_si512(
			_mm512_castps_si512(x1), mk));
	__m512 l0 = _mm512_maskz_sub_ps((__mmask16)~n0, x0, h0);
	__m512 l1 = _mm512_maskz_sub_ps((__mmask16)~n1, x1, h1);

	h0 = _mm512_mask_mov_ps(h0, n0, x0);
	h1 = _mm512_mask_mov_ps(h1, n1, x1);
	_mm512_storeu_si512(hi, (__m512i)_mm512_cvtne2ps_pbh(h1, h0));
	_mm512_storeu_si512(lo, (__m512i)_mm512_cvtne2ps_pbh(l1, l0));
}

/* Scale output rows of query row q of head hh by f. */
static inline __attribute__((always_inline))
void o_scale(struct amx_item *b, uint32_t hh, uint32_t q, float f,
	     const uint32_t R)
{
	const uint32_t ra = amx_ra(R), nx = b->D / 16;
	float *o = b->o + (uint64_t)hh * nx * ra * 16;
	__m512 fv = _mm512_set1_ps(f);
	uint32_t x;

	for (x = 0; x < nx; x++) {
		float *t = o + x * ra * 16;

		_mm512_store_ps(t + q * 16, _mm512_mul_ps(_mm512_load_ps(
				t + q * 16), fv));
		if (R < 16)
			_mm512_store_ps(t + (R + q) * 16, _mm512_mul_ps(
					_mm512_load_ps(t + (R + q) * 16), fv));
	}
}

/*
 * The work of an item is a sequence of units, one per (step, kv head),
 * software-pipelined so that no tile load reads rows that vector stores
 * have just written (it would wait for them to reach the cache) and no
 * vector load reads a tile store just made:
 *
 *   scores(u), convert K(u + 1), softmax(u), values(u), convert V(u + 1)
 */
struct amx_unit {
	uint32_t u, hh, ts, n;
};

static inline __attribute__((always_inline))
void unit_of(const struct amx_item *b, uint32_t u, struct amx_unit *x)
{
	uint32_t s = u / b->nh;

	x->u = u;
	x->hh = u - s * b->nh;
	x->ts = b->it->t0 + s * b->ST;
	x->n = b->it->t1 - x->ts < b->ST ? b->it->t1 - x->ts : b->ST;
}

/* Row locations of the step [ts, ts + n) of the item. */
static inline __attribute__((always_inline))
void step_rows(struct amx_item *b, uint32_t ts, uint32_t n)
{
	const uint8_t *pool = b->job->pool;
	uint32_t bi = ts / b->T, slot = ts - bi * b->T, r;
	const uint8_t *blk = pool + (uint64_t)b->table[bi] * b->l->block_bytes;

	for (r = 0; r < n; r++) {
		b->rblk[r] = blk;
		b->rslot[r] = slot;
		if (++slot == b->T && r + 1 < n) {
			slot = 0;
			bi++;
			blk = pool + (uint64_t)b->table[bi] * b->l->block_bytes;
		}
	}
}

static inline __attribute__((always_inline))
void conv_k(struct amx_item *b, const struct amx_unit *x, const uint32_t dtype)
{
	uint32_t j, nt = (x->n + TILE - 1) / TILE;

	for (j = 0; j < nt; j++)
		b->kp[j] = k_tile(b, x->hh, j, x->n - j * TILE < TILE ?
				  x->n - j * TILE : TILE, x->u & 1, &b->kst[j],
				  dtype);
}

/* Scores of unit x into the score slots: two tiles of 16 positions at a
 * time, the query tiles loaded once for both. */
static inline __attribute__((always_inline))
void scores(struct amx_item *b, const struct amx_unit *x, const uint32_t dtype,
	    const uint32_t R)
{
	const uint32_t nk = b->D / 32, nt = (x->n + TILE - 1) / TILE;
	const uint32_t W = R < 16 ? 2 * R : R, spb = 16 / W;
	const uint32_t *qt = b->qt + (uint64_t)x->hh * nk * 2 * 16 * R;
	uint32_t j, k, s;

	for (j = 0; j < nt; j += 2) {
		const uint8_t *k0 = b->kp[j];
		const uint8_t *k1 = j + 1 < nt ? b->kp[j + 1] : NULL;
		long st0 = b->kst[j], st1 = k1 ? b->kst[j + 1] : 0;

		TZERO(0);
		TZERO(1);
		for (k = 0; k < nk; k++) {
			if (R < 16) {
				TLOAD(2, qt + k * 16 * 2 * R, 8 * R);
				TLOAD(3, k0 + 64 * k, st0);
				TDP(0, 3, 2);
				if (k1) {
					TLOAD(3, k1 + 64 * k, st1);
					TDP(1, 3, 2);
				}
			} else {
				TLOAD(2, qt + (2 * k) * 16 * R, 4 * R);
				TLOAD(3, qt + (2 * k + 1) * 16 * R, 4 * R);
				TLOAD(4, k0 + 64 * k, st0);
				TDP(0, 4, 2);
				TDP(0, 4, 3);
				if (k1) {
					TLOAD(4, k1 + 64 * k, st1);
					TDP(1, 4, 2);
					TDP(1, 4, 3);
				}
			}
			if (dtype == KVK_INT4 || k + 1 == nk) {
				s = dtype == KVK_INT4 ? j * nk + k : j;
				TSTORE(0, b->sb + s / spb * 256 + s % spb * W, 64);
				if (k1) {
					s += dtype == KVK_INT4 ? nk : 1;
					TSTORE(1, b->sb + s / spb * 256 +
					       s % spb * W, 64);
				}
				if (dtype == KVK_INT4) {
					TZERO(0);
					TZERO(1);
				}
			}
		}
	}
}

/* Softmax of unit x: the score slots transposed to vectors of 16
 * positions per query row, online (max, sum), then the weight tiles. */
static inline __attribute__((always_inline))
void softmax(struct amx_item *b, const struct amx_unit *x,
	     const uint32_t dtype, const uint32_t R)
{
	const uint32_t nk = b->D / 32, n = x->n, nt = (n + TILE - 1) / TILE;
	const uint32_t W = R < 16 ? 2 * R : R, spb = 16 / W;
	const uint32_t spt = dtype == KVK_INT4 ? nk : 1;
	const uint32_t nsp = (n + 31) / 32, ra = amx_ra(R), par = x->u & 1;
	const uint32_t na = R == 16 ? 2 : 1, ng = dtype == KVK_INT4 ? nk : 1;
	const vi iota = (vi){MVW(ROTI, 0)};
	float *m = b->m + x->hh * R;
	vf *lv = b->lv + x->hh * R;
	vf sc[16][ST_MAX / TILE];
	vi mk[16][ST_MAX / TILE];
	uint32_t j, q, s, c, nsb, g, sp;
	__mmask16 up = 0;

	/* column c of slot buffer s holds slot s spb + c / W, part (c % W) /
	 * R (R < 16: hi, lo), query row c % R */
	nsb = (nt * spt + spb - 1) / spb;
	for (s = 0; s < nsb; s++) {
		__m512 r[16];

		for (c = 0; c < 16; c++)
			r[c] = _mm512_load_ps(b->sb + s * 256 + c * 16);
		tr16(r);
		for (c = 0; c < 16 && (s * spb + c / W) < nt * spt; c++) {
			uint32_t sl = s * spb + c / W, first = c % W < R;
			vf v = (vf)r[c];

			q = c % R;
			if (dtype == KVK_INT4) {
				uint32_t jj = sl / nk;

				g = sl % nk;
				v *= ld(b->gk[par][jj][g]);
				first = first && !g;
				sl = jj;
			}
			sc[q][sl] = first ? v : sc[q][sl] + v;
		}
	}
	for (q = 0; q < b->RR; q++) {
		for (j = 0; j < nt; j++) {
			int64_t lim = b->limit[q] - (int64_t)(x->ts + j * TILE);
			int32_t vl = (int32_t)(n - j * TILE < TILE ?
				     n - j * TILE : TILE);

			if (lim < vl)
				vl = lim < 0 ? 0 : (int32_t)lim + 1;
			if (dtype == KVK_FP8 || dtype == KVK_INT8)
				sc[q][j] *= ld(b->sk[par] + j * TILE);
			mk[q][j] = iota >= (vi){} + vl;
			sc[q][j] = sel(mk[q][j], splat(-INFINITY), sc[q][j]);
			if (_mm512_cmp_ps_mask((__m512)sc[q][j],
					       _mm512_set1_ps(m[q]), _CMP_NLE_UQ))
				up |= (__mmask16)(1u << q);
		}
	}
	if (__builtin_expect(up != 0, 0)) {
		for (q = 0; q < b->RR; q++) {
			float tmax, cf;
			vf mx;

			if (!((up >> q) & 1))
				continue;
			mx = sc[q][0];
			for (j = 1; j < nt; j++)
				mx = vmax_nan(mx, sc[q][j]);
			tmax = hmax(mx);
			cf = m[q] == -INFINITY ? 0.0f : expf(m[q] - tmax);
			m[q] = tmax;
			lv[q] *= cf;
			o_scale(b, x->hh, q, cf, R);
		}
	}
	for (q = 0; q < R; q++) {
		float mm = m[q] == -INFINITY ? 0.0f : m[q];

		for (j = 0; j < nsp * 2; j++) {
			vf p = splat(0.0f);

			if (q < b->RR && j < nt) {
				p = vexp(sc[q][j] - mm);
				p = sel(mk[q][j], splat(0.0f), p);
				lv[q] += p;
				if (dtype == KVK_FP8 || dtype == KVK_INT8)
					p *= ld(b->sv + j * TILE);
			}
			st(b->pb + q * ST_MAX + j * TILE, p);
		}
	}
	/* weight tiles [span][group][na][ra rows][64 B] */
	for (sp = 0; sp < nsp; sp++)
		for (g = 0; g < ng; g++) {
			uint8_t *t = b->ap + ((sp * ng + g) * na) * ra * 64;

			for (q = 0; q < R; q++) {
				__m512 x0 = _mm512_load_ps(b->pb + q * ST_MAX +
							   sp * 32);
				__m512 x1 = _mm512_load_ps(b->pb + q * ST_MAX +
							   sp * 32 + 16);

				if (dtype == KVK_INT4) {
					x0 = _mm512_mul_ps(x0, _mm512_loadu_ps(
						&b->gv[g][sp * 32]));
					x1 = _mm512_mul_ps(x1, _mm512_loadu_ps(
						&b->gv[g][sp * 32 + 16]));
				}
				split_row(x0, x1, t + q * 64,
					  t + ((R == 16 ? 16 : R) + q) * 64);
			}
		}
}

/* The weights' tiles of span sp, group g (INT4; else 0). */
static inline __attribute__((always_inline))
const uint8_t *p_tile(const struct amx_item *b, uint32_t sp, uint32_t g,
		      uint32_t ng, const uint32_t R)
{
	return b->ap + ((sp * ng + g) * (R == 16 ? 2 : 1)) * amx_ra(R) * 64;
}

/* Values of unit x: two output tiles at a time, kept in the tiles over
 * the unit's spans (one or two), the weights loaded once per unit (INT4:
 * per group). */
static inline __attribute__((always_inline))
void values(struct amx_item *b, const struct amx_unit *x, const uint32_t dtype,
	    const uint32_t R)
{
	const uint32_t D = b->D, nx = D / 16, nsp = (x->n + 31) / 32;
	const uint32_t ra = amx_ra(R), ng = dtype == KVK_INT4 ? D / 32 : 1;
	float *o = b->o + (uint64_t)x->hh * nx * ra * 16;
	uint32_t xx, g = 0;

	for (xx = 0; xx < nx; xx += 2) {
		const uint8_t *v0 = b->vc + xx * 1024, *v1 = v0 + 1024;
		const uint8_t *v2 = v0 + (uint64_t)nx * 1024, *v3 = v2 + 1024;
		float *o0 = o + xx * ra * 16, *o1 = o0 + ra * 16;

		if (dtype == KVK_INT4)
			g = xx / 2;
		if (xx == 0 || dtype == KVK_INT4) {
			const uint8_t *t0 = p_tile(b, 0, g, ng, R);
			const uint8_t *t1 = p_tile(b, 1, g, ng, R);

			if (R < 16) {
				TLOAD(4, t0, 64);
				if (nsp > 1)
					TLOAD(5, t1, 64);
			} else {
				TLOAD(0, t0, 64);
				TLOAD(1, t0 + ra * 64, 64);
				if (nsp > 1) {
					TLOAD(2, t1, 64);
					TLOAD(3, t1 + ra * 64, 64);
				}
			}
		}
		TLOAD(6, o0, 64);
		TLOAD(7, o1, 64);
		if (R < 16) {
			TLOAD(3, v0, 64);
			TDP(6, 4, 3);
			TLOAD(3, v1, 64);
			TDP(7, 4, 3);
			if (nsp > 1) {
				TLOAD(3, v2, 64);
				TDP(6, 5, 3);
				TLOAD(3, v3, 64);
				TDP(7, 5, 3);
			}
		} else {
			TLOAD(4, v0, 64);
			TDP(6, 0, 4);
			TDP(6, 1, 4);
			TLOAD(4, v1, 64);
			TDP(7, 0, 4);
			TDP(7, 1, 4);
			if (nsp > 1) {
				TLOAD(4, v2, 64);
				TDP(6, 2, 4);
				TDP(6, 3, 4);
				TLOAD(4, v3, 64);
				TDP(7, 2, 4);
				TDP(7, 3, 4);
			}
		}
		TSTORE(6, o0, 64);
		TSTORE(7, o1, 64);
	}
}

/* Software prefetch of the K and V planes of positions [p0, p1) for the
 * item's heads: blocks are scattered, so the hardware prefetchers
 * restart at every block. */
static inline __attribute__((always_inline))
void prefetch_range(const struct amx_item *b, uint32_t p0, uint32_t p1)
{
	const uint8_t *pool = b->job->pool;
	uint32_t p = p0;

	while (p < p1) {
		uint32_t bi = p / b->T, s0 = p - bi * b->T, s1 = b->T;
		const uint8_t *blk = pool + (uint64_t)b->table[bi] *
				     b->l->block_bytes;
		uint64_t x, e;
		uint32_t hh;

		if (p1 - p < s1 - s0)
			s1 = s0 + (p1 - p);
		for (hh = 0; hh < b->nh; hh++) {
			const uint8_t *kp = blk + b->koff + hh * b->plane;
			const uint8_t *vp = blk + b->voff + hh * b->plane;

			e = (uint64_t)s1 * b->rb;
			for (x = (uint64_t)s0 * b->rb; x < e; x += 64) {
				__builtin_prefetch(kp + x, 0, 2);
				__builtin_prefetch(vp + x, 0, 2);
			}
		}
		p += s1 - s0;
	}
}

#define PF_AHEAD 128	/* positions prefetched ahead */

static inline __attribute__((always_inline))
void amx_attn(const struct kvk_attn_job *job, const struct kvk_attn_item *it,
	      uint8_t *scratch, const uint32_t dtype, const uint32_t R)
{
	const struct kvk_layout *l = job->l;
	const uint32_t D = l->head_dim, G = job->group, nk = D / 32;
	const uint32_t ctx = job->ctx_lens[it->seq], ra = amx_ra(R);
	struct amx_item *b = (struct amx_item *)scratch;
	uint8_t *p = scratch + ((sizeof(*b) + 63) & ~(size_t)63);
	uint32_t hh, r, x, k, q, u, nu;
	struct amx_unit cur, nxt = { 0 };
	float tmp[KVK_MAX_HEAD_DIM];

	b->job = job;
	b->it = it;
	b->l = l;
	b->table = job->block_tables + (uint64_t)it->seq * job->max_blocks_per_seq;
	b->D = D;
	b->nh = it->nh;
	b->RR = it->nq * G;
	b->ST = D > 128 ? 32 : 64;
	b->ng = nk;
	b->rb = l->row_bytes;
	b->T = l->tokens_per_block;
	b->koff = kvk_row_offset(l, job->layer, 0, it->head, 0);
	b->voff = kvk_row_offset(l, job->layer, 1, it->head, 0);
	b->ksoff = kvk_scale_offset(l, job->layer, 0, it->head, 0);
	b->vsoff = kvk_scale_offset(l, job->layer, 1, it->head, 0);
	b->plane = l->plane_bytes;
	b->qt = (uint32_t *)p;
	p += QT_BYTES;
	b->o = (float *)p;
	p += O_BYTES;
	b->kc = (uint16_t *)p;
	p += KC_BYTES;
	b->vc = p;
	p += VC_BYTES;
	b->sb = (float *)p;
	p += SB_BYTES;
	b->pb = (float *)p;
	p += PB_BYTES;
	b->ap = p;
	if (dtype == KVK_FP8 || dtype == KVK_INT8) {
		const uint8_t *lt = dtype == KVK_FP8 ? lut_fp8 : lut_int8;

		b->lut.h0 = _mm512_load_si512((const void *)lt);
		b->lut.h1 = _mm512_load_si512((const void *)(lt + 64));
		b->lut.l0 = _mm512_load_si512((const void *)(lt + 128));
		b->lut.l1 = _mm512_load_si512((const void *)(lt + 192));
		b->lut.sign = _mm512_set1_epi8((char)0x80);
	} else if (dtype == KVK_INT4) {
		uint8_t k4[64], v4[2][64], vp[64];
		uint32_t pq, i, w, h;

		b->lut.i4 = _mm512_load_si512((const void *)lut_int4);
		b->lut.i4mask = _mm512_set1_epi8(0x0f);
		b->lut.i4hi = _mm512_set1_epi16(0x1000);
		/* K: qword pq of the result = group qword pq & 1, words i =
		 * its nibbles 4 (pq >> 1) + i */
		for (pq = 0; pq < 8; pq++)
			for (i = 0; i < 4; i++)
				k4[8 * pq + 2 * i] = k4[8 * pq + 2 * i + 1] =
					(uint8_t)(4 * (4 * (pq >> 1) + i));
		/* V: bytes of the two rows interleaved, qword pq (and pq + 4)
		 * = bytes 4 (pq % 4) .. + 3 of row a and row b */
		for (pq = 0; pq < 8; pq++)
			for (i = 0; i < 4; i++)
				for (w = 0; w < 2; w++)
					vp[8 * pq + 2 * i + w] = (uint8_t)
						(64 * w + 4 * (pq % 4) + i);
		/* tile h, qword pq: dimensions e = 4 h + 2 (pq / 4) + i of
		 * the 8 in the source qword, token w */
		for (h = 0; h < 2; h++)
			for (pq = 0; pq < 8; pq++)
				for (i = 0; i < 2; i++)
					for (w = 0; w < 2; w++) {
						uint32_t e = 4 * h + 2 * (pq / 4)
							     + i;
						uint8_t off = (uint8_t)(16 * (e / 2)
							+ 8 * w + 4 * (e % 2));

						v4[h][8 * pq + 4 * i + 2 * w] = off;
						v4[h][8 * pq + 4 * i + 2 * w + 1] =
							off;
					}
		b->lut.k4 = _mm512_loadu_si512((const void *)k4);
		b->lut.v4[0] = _mm512_loadu_si512((const void *)v4[0]);
		b->lut.v4[1] = _mm512_loadu_si512((const void *)v4[1]);
		b->lut.v4perm = _mm512_loadu_si512((const void *)vp);
	}

	/* query tiles: B[k][r][q] = (q[32k + 2r], q[32k + 2r + 1]) in the
	 * K order, hi and lo parts */
	for (r = 0; r < 16; r++) {
		uint32_t qi = it->q0 + r / G;

		b->limit[r] = job->n_q ? (int64_t)ctx - job->n_q + qi :
				       (int64_t)ctx - 1;
	}
	for (hh = 0; hh < it->nh; hh++) {
		uint32_t kh = it->head + hh;
		uint32_t *qt = b->qt + (uint64_t)hh * nk * 2 * 16 * R;
		uint32_t qh[KVK_MAX_HEAD_DIM / 2], ql[KVK_MAX_HEAD_DIM / 2];

		for (q = 0; q < R; q++) {
			b->m[hh * R + q] = -INFINITY;
			b->lv[hh * R + q] = splat(0.0f);
			if (q < b->RR) {
				uint32_t qi = it->q0 + q / G, h = kh * G + q % G;
				const float *src = job->q + (((uint64_t)it->seq *
					(job->n_q ? job->n_q : 1) + qi) *
					job->q_heads + h) * D;

				for (x = 0; x < D; x++)
					tmp[x] = src[perm_k(dtype, x)] *
						 job->scale;
				for (x = 0; x < D; x += 32)
					q_split(tmp + x, qh + x / 2, ql + x / 2);
			} else {
				memset(qh, 0, sizeof(qh));
				memset(ql, 0, sizeof(ql));
			}
			/* B[k][r][q] = the BF16 pair 32 k + 2 r of row q */
			for (k = 0; k < nk; k++)
				for (r = 0; r < 16; r++) {
					if (R < 16) {
						qt[(k * 16 + r) * 2 * R + q] =
							qh[16 * k + r];
						qt[(k * 16 + r) * 2 * R + R + q] =
							ql[16 * k + r];
					} else {
						qt[((2 * k) * 16 + r) * R + q] =
							qh[16 * k + r];
						qt[((2 * k + 1) * 16 + r) * R + q] =
							ql[16 * k + r];
					}
				}
		}
		memset(b->o + (uint64_t)hh * (D / 16) * ra * 16, 0,
		       sizeof(float) * (D / 16) * ra * 16);
	}

	amx_config(R);
	nu = (it->t1 - it->t0 + b->ST - 1) / b->ST * it->nh;
	unit_of(b, 0, &cur);
	step_rows(b, cur.ts, cur.n);
	conv_k(b, &cur, dtype);
	v_rows(b, cur.hh, cur.n, dtype);
	for (u = 0; u < nu; u++) {
		unit_of(b, u, &cur);
		if (!cur.hh && cur.ts + PF_AHEAD < it->t1)
			prefetch_range(b, cur.ts + PF_AHEAD,
				       cur.ts + PF_AHEAD + cur.n < it->t1 ?
				       cur.ts + PF_AHEAD + cur.n : it->t1);
		scores(b, &cur, dtype, R);
		if (u + 1 < nu) {
			unit_of(b, u + 1, &nxt);
			if (!nxt.hh)
				step_rows(b, nxt.ts, nxt.n);
			conv_k(b, &nxt, dtype);
		}
		softmax(b, &cur, dtype, R);
		values(b, &cur, dtype, R);
		if (u + 1 < nu)
			v_rows(b, nxt.hh, nxt.n, dtype);
	}
	__asm__ volatile("tilerelease" ::: "memory");

	for (hh = 0; hh < it->nh; hh++) {
		const float *ob = b->o + (uint64_t)hh * (D / 16) * ra * 16;

		for (q = 0; q < b->RR; q++) {
			float *o = job->parts + ((uint64_t)it->part +
				   (uint64_t)hh * it->hstride + q) *
				   job->part_stride;

			o[0] = b->m[hh * R + q];
			o[1] = hsum(b->lv[hh * R + q]);
			for (x = 0; x < D / 16; x++) {
				const float *t = ob + x * ra * 16;

				for (k = 0; k < 16; k++) {
					float v = t[q * 16 + k];

					if (R < 16)
						v += t[(R + q) * 16 + k];
					o[2 + perm_v(dtype, x, k)] = v;
				}
			}
		}
	}
}

#ifndef KVK_NO_SPECIALISE
#define AMX_CASE(dt) \
	case dt: \
		switch (R) { \
		case 1: \
			amx_attn(job, it, scratch, (dt), 1); \
			break; \
		case 4: \
			amx_attn(job, it, scratch, (dt), 4); \
			break; \
		case 8: \
			amx_attn(job, it, scratch, (dt), 8); \
			break; \
		default: \
			amx_attn(job, it, scratch, (dt), 16); \
		} \
		break
#endif

static void amx_item_fn(const struct kvk_attn_job *job, uint32_t i,
			unsigned int thread)
{
	const struct kvk_attn_item *it = &job->items[i];
	uint8_t *scratch = (uint8_t *)(job->scratch +
				       (size_t)thread * job->scratch_floats);
	uint32_t dtype = job->l->dtype;
	uint32_t R = kvk_item_rows(it->nq * job->group);

	pthread_once(&lut_once, lut_init);
#ifndef KVK_NO_SPECIALISE
	switch (dtype) {
	AMX_CASE(KVK_BF16);
	AMX_CASE(KVK_FP8);
	AMX_CASE(KVK_INT8);
	AMX_CASE(KVK_INT4);
	}
#else
	amx_attn(job, it, scratch, dtype, R);
#endif
}

const struct kvk_simd_ops kvk_simd_amx = {
	.name = "amx",
	.item = amx_item_fn,
	.sum_bytes = sum_bytes,
	.scratch_bytes = AMX_SCRATCH,
};
