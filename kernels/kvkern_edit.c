// SPDX-License-Identifier: MIT
/*
 * kvkern_edit.c - editing a sequence in place, CPU side: the RoPE data of
 * a layout, splice (delete slots, make slots for new tokens, move the tail
 * and re-rotate its keys by the position delta), compact (keep an ordered
 * subset of slots) and score (attention mass per slot from a window of
 * recent queries).  Semantics, the angle computation and the block-scale
 * rule: Documentation/edits.rst.  The CUDA twins are in
 * kernels/cuda/kvkern_edit.cu (same plan, same arithmetic, same bytes).
 *
 * Compiled with -ffp-contract=off (and -fno-trapping-math, which changes
 * no result, so that the row loops vectorise): the rotation is x*c - y*s
 * and x*s + y*c with every product rounded to FP32, exactly as the CUDA
 * kernels do it.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvkern_edit_internal.h"

/* ---- RoPE ------------------------------------------------------------ */

int kvk_layout_set_rope(struct kvk_layout *l, uint32_t style,
			uint32_t rotary_dims, float base,
			const float *inv_freq)
{
	struct kvk_rope r;
	uint32_t i, half;

	if (!l || !l->tokens_per_block)
		return -EINVAL;
	memset(&r, 0, sizeof(r));
	if (style == KVK_ROPE_NONE) {
		l->rope = r;
		return 0;
	}
	if (style != KVK_ROPE_NEOX && style != KVK_ROPE_GPTJ)
		return -EINVAL;
	if (!rotary_dims)
		rotary_dims = l->head_dim;
	if (rotary_dims % 2 || rotary_dims > l->head_dim)
		return -EINVAL;
	half = rotary_dims / 2;
	if (inv_freq) {
		if (!isfinite(base) || base < 0.0f)
			return -EINVAL;
		for (i = 0; i < half; i++) {
			if (!isfinite(inv_freq[i]))
				return -EINVAL;
			r.inv_freq[i] = inv_freq[i];
		}
		r.table_given = 1;
	} else {
		if (!isfinite(base) || !(base > 0.0f))
			return -EINVAL;
		for (i = 0; i < half; i++)
			r.inv_freq[i] = (float)pow((double)base,
						   -2.0 * i / rotary_dims);
	}
	r.style = style;
	r.rotary_dims = rotary_dims;
	r.base = base;
	l->rope = r;
	return 0;
}

/*
 * The angle delta * f, f = inv_freq[i] = m * 2^e with a 24-bit m, is an
 * integer of at most 32 + 24 bits times 2^e: exact in an extended-precision
 * long double (64-bit significand).  fmodl() then subtracts a multiple of
 * the long-double 2 pi exactly; what is left is the error of that constant
 * (|2 pi - 2PI_L| < 2^-62), times |delta * f| / 2 pi: below 1e-9 rad for
 * |delta| < 2^32 and f <= 1.  cos and sin are rounded to FP32 once.
 */
#if LDBL_MANT_DIG >= 64
typedef long double kvk_ext;
#define KVK_EXT_2PI	6.28318530717958647692528676655900577L
#define kvk_ext_fmod	fmodl
#define kvk_ext_cos	cosl
#define kvk_ext_sin	sinl
#else
/* No extended precision: the product is rounded once (2^-53 relative). */
typedef double kvk_ext;
#define KVK_EXT_2PI	6.28318530717958647692528676655900577
#define kvk_ext_fmod	fmod
#define kvk_ext_cos	cos
#define kvk_ext_sin	sin
#endif

int kvk_rope_cos_sin(const struct kvk_rope *r, int64_t delta, float *c,
		     float *s)
{
	uint32_t i;

	if (!r || !c || !s || (r->style != KVK_ROPE_NEOX &&
			       r->style != KVK_ROPE_GPTJ) ||
	    !r->rotary_dims || r->rotary_dims > KVK_MAX_HEAD_DIM)
		return -EINVAL;
	if (delta <= -((int64_t)1 << 32) || delta >= ((int64_t)1 << 32))
		return -EINVAL;
	for (i = 0; i < r->rotary_dims / 2; i++) {
		kvk_ext th = (kvk_ext)delta * (kvk_ext)r->inv_freq[i];

		th = kvk_ext_fmod(th, KVK_EXT_2PI);
		c[i] = (float)kvk_ext_cos(th);
		s[i] = (float)kvk_ext_sin(th);
	}
	return 0;
}

/*
 * The row loops below are built for AVX-512, AVX2 and the baseline, picked
 * at load time (ifunc); every version computes the same IEEE results (no
 * contraction, the same operations in the same order per element).
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(KVK_NO_SPECIALISE)
#define KVK_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", \
						    "default")))
#else
#define KVK_ROW_CLONES
#endif

/* Pool rows seen as 16-bit words, at any address (a pool need not be
 * 2-byte aligned; the loads stay vector loads). */
typedef uint16_t __attribute__((may_alias, aligned(1))) kvk_u16a;
typedef uint32_t __attribute__((may_alias)) kvk_u32a;

/* out = R in: pairs turned by (c[i], s[i]), the other dims copied. */
KVK_ROW_CLONES
static void rope_apply(uint32_t style, uint32_t rd, const float *c,
		       const float *s, uint32_t D, const float *restrict in,
		       float *restrict out)
{
	uint32_t half = rd / 2, i;

	if (style == KVK_ROPE_NEOX) {
		for (i = 0; i < half; i++) {
			float x = in[i], y = in[i + half];

			out[i] = x * c[i] - y * s[i];
			out[i + half] = x * s[i] + y * c[i];
		}
	} else {
		for (i = 0; i < half; i++) {
			float x = in[2 * i], y = in[2 * i + 1];

			out[2 * i] = x * c[i] - y * s[i];
			out[2 * i + 1] = x * s[i] + y * c[i];
		}
	}
	for (i = rd; i < D; i++)
		out[i] = in[i];
}

int kvk_rope_rotate_rows(const struct kvk_layout *l, int64_t delta,
			 uint32_t nrows, float *rows)
{
	float c[KVK_ROPE_MAX_FREQ], s[KVK_ROPE_MAX_FREQ];
	float tmp[KVK_MAX_HEAD_DIM];
	uint32_t r, D;
	int ret;

	if (!l || (nrows && !rows))
		return -EINVAL;
	if (l->rope.style == KVK_ROPE_NONE)
		return -ENODATA;
	ret = kvk_rope_cos_sin(&l->rope, delta, c, s);
	if (ret)
		return ret;
	D = l->head_dim;
	for (r = 0; r < nrows; r++) {
		memcpy(tmp, rows + (size_t)r * D, sizeof(float) * D);
		rope_apply(l->rope.style, l->rope.rotary_dims, c, s, D, tmp,
			   rows + (size_t)r * D);
	}
	return 0;
}

/* ---- plans ----------------------------------------------------------- */

static int cmp_u32(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* n table entries: inside the pool (when it is known) and distinct. */
static int check_table(const struct kvk_layout *l, const uint32_t *t,
		       uint64_t n)
{
	uint32_t *c;
	uint64_t i;
	int ret = 0;

	if (!n)
		return 0;
	if (!t)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (l->pool_blocks && t[i] >= l->pool_blocks)
			return -EINVAL;
	if (n < 2)
		return 0;
	c = malloc(sizeof(*c) * n);
	if (!c)
		return -ENOMEM;
	memcpy(c, t, sizeof(*c) * n);
	qsort(c, n, sizeof(*c), cmp_u32);
	for (i = 1; i < n && !ret; i++)
		if (c[i] == c[i - 1])
			ret = -EINVAL;
	free(c);
	return ret;
}

int kvk_plan_splice(const struct kvk_splice_args *a, struct kvk_edit_plan *p)
{
	const struct kvk_layout *l;
	uint64_t T, cap, new_len, end, last, used;
	int ret;

	if (!a || !p || !a->layout || !a->layout->tokens_per_block ||
	    !a->pool_base || a->pad)
		return -EINVAL;
	l = a->layout;
	T = l->tokens_per_block;
	cap = (uint64_t)a->nblocks * T;
	if ((uint64_t)a->at + a->ndel > a->len)
		return -ERANGE;
	new_len = (uint64_t)a->len - a->ndel + a->nins;
	if (a->len > cap || new_len > cap || new_len > UINT32_MAX)
		return -ERANGE;
	if (a->delta <= -((int64_t)1 << 32) || a->delta >= ((int64_t)1 << 32))
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->rotate = a->delta != 0 && (uint64_t)a->at + a->ndel < a->len;
	if (p->rotate && l->rope.style == KVK_ROPE_NONE)
		return -ENODATA;
	used = ((a->len > new_len ? a->len : new_len) + T - 1) / T;
	ret = check_table(l, a->block_table, used);
	if (ret)
		return ret;
	p->mode = KVK_EDIT_SPLICE;
	p->tpb = (uint32_t)T;
	p->len = a->len;
	p->new_len = (uint32_t)new_len;
	p->at = a->at;
	p->nins = a->nins;
	p->shift = (int64_t)a->nins - a->ndel;
	p->delta = a->delta;
	p->dir = p->shift > 0 ? -1 : 1;
	p->first = (uint32_t)(a->at / T);
	/* Same slots, no turn: only the slots made for new tokens change. */
	if (p->shift == 0 && !p->rotate)
		end = a->nins ? (uint64_t)a->at + a->nins : 0;
	else
		end = new_len;
	last = (end + T - 1) / T;
	p->ndest = end && last > p->first ? (uint32_t)(last - p->first) : 0;
	if (p->rotate) {
		p->style = l->rope.style;
		p->rd = l->rope.rotary_dims;
		ret = kvk_rope_cos_sin(&l->rope, a->delta, p->cs, p->sn);
	}
	return ret;
}

int kvk_plan_compact(const struct kvk_compact_args *a,
		     struct kvk_edit_plan *p)
{
	const struct kvk_layout *l;
	uint64_t T, last;
	uint32_t i, f;
	int ret;

	if (!a || !p || !a->layout || !a->layout->tokens_per_block ||
	    !a->pool_base || a->pad)
		return -EINVAL;
	l = a->layout;
	T = l->tokens_per_block;
	if (a->len > (uint64_t)a->nblocks * T)
		return -ERANGE;
	if (a->nkeep > a->len || (a->nkeep && !a->keep))
		return -EINVAL;
	for (i = 0; i < a->nkeep; i++)
		if (a->keep[i] >= a->len || (i && a->keep[i] <= a->keep[i - 1]))
			return -EINVAL;
	ret = check_table(l, a->block_table, (a->len + T - 1) / T);
	if (ret)
		return ret;
	memset(p, 0, sizeof(*p));
	p->mode = KVK_EDIT_COMPACT;
	p->tpb = (uint32_t)T;
	p->len = a->len;
	p->new_len = a->nkeep;
	p->keep = a->keep;
	p->nkeep = a->nkeep;
	p->dir = 1;
	for (f = 0; f < a->nkeep && a->keep[f] == f; f++)
		;
	p->first = (uint32_t)(f / T);
	last = (a->nkeep + T - 1) / T;
	p->ndest = last > p->first ? (uint32_t)(last - p->first) : 0;
	return 0;
}

/* ---- the edit, one plane of one destination block at a time ----------- */

struct edit_job {
	const struct kvk_layout *l;
	uint8_t *pool;
	const uint32_t *table;
	const struct kvk_edit_plan *p;
	float *scratch;			/* per thread: T * (D + 1) floats */
	size_t scratch_floats;
};

static float plane_scale(const struct kvk_layout *l, const uint8_t *blk,
			 uint32_t layer, uint32_t kv, uint32_t head)
{
	float s;

	memcpy(&s, blk + kvk_scale_offset(l, layer, kv, head, 0), 4);
	return kvk_e_valid_scale(s);
}


KVK_ROW_CLONES
static void load_bf16(uint32_t D, const uint8_t *r, float *out)
{
	const kvk_u16a *h = (const kvk_u16a *)r;
	kvk_u32a *o = (kvk_u32a *)out;
	uint32_t d;

	for (d = 0; d < D; d++)
		o[d] = (uint32_t)h[d] << 16;
}

/* kvk_e_fp8_f32() * s, without branches. */
KVK_ROW_CLONES
static void load_fp8(uint32_t D, const uint8_t *r, float s, float *out)
{
	kvk_u32a *o = (kvk_u32a *)out;
	uint32_t d;

	for (d = 0; d < D; d++) {
		uint32_t b = r[d], e = (b >> 3) & 15, m = b & 7;
		uint32_t sign = (b & 0x80) << 24;
		float sub = (float)m * 0x1p-9f;
		uint32_t su, v;

		memcpy(&su, &sub, 4);
		v = e ? sign | ((e + 120) << 23) | (m << 20) : sign | su;
		o[d] = (b & 0x7f) == 0x7f ? 0x7fc00000u | sign : v;
	}
	for (d = 0; d < D; d++)
		out[d] = out[d] * s;
}

KVK_ROW_CLONES
static void load_int8(uint32_t D, const uint8_t *r, float s, float *out)
{
	uint32_t d;

	for (d = 0; d < D; d++)
		out[d] = (float)(int8_t)r[d] * s;
}


/*
 * Largest finite |x| of a row (D a multiple of 32): non-negative floats
 * order like their bits, 16 lanes at a time (GCC vector extensions).
 */
typedef uint32_t kvk_v16u __attribute__((vector_size(64)));

KVK_ROW_CLONES
static float row_amax(uint32_t D, const float *x)
{
	kvk_v16u m = { 0 }, v, lt;
	uint32_t r = 0, d;
	float f;
	int k;

	for (d = 0; d < D; d += 16) {
		memcpy(&v, x + d, sizeof(v));
		v &= 0x7fffffffu;
		v &= (kvk_v16u)(v < 0x7f800000u);	/* Inf, NaN: 0 */
		lt = (kvk_v16u)(m < v);
		m = (v & lt) | (m & ~lt);
	}
	for (k = 0; k < 16; k++)
		r = m[k] > r ? m[k] : r;
	memcpy(&f, &r, 4);
	return f;
}

/* One INT4 group of 32 (16 bytes, low nibble first) times its scale. */
KVK_ROW_CLONES
static void load_int4_group(const uint8_t *r, float sc, float *out)
{
	uint32_t d;

	for (d = 0; d < KVK_INT4_GROUP / 2; d++) {
		int lo = r[d] & 15, hi = r[d] >> 4;

		out[2 * d] = (float)((lo ^ 8) - 8) * sc;
		out[2 * d + 1] = (float)((hi ^ 8) - 8) * sc;
	}
}

/* Dequantise one row: block scale s (FP8/INT8), group scales gs (INT4). */
static void load_row(uint32_t dtype, uint32_t D, const uint8_t *r, float s,
		     const uint8_t *gs, float *out)
{
	uint32_t d;

	switch (dtype) {
	case KVK_BF16:
		load_bf16(D, r, out);
		break;
	case KVK_FP8:
		load_fp8(D, r, s, out);
		break;
	case KVK_INT8:
		load_int8(D, r, s, out);
		break;
	default:
		for (d = 0; d < D; d += KVK_INT4_GROUP) {
			uint16_t h;

			memcpy(&h, gs + (d / KVK_INT4_GROUP) * 2, 2);
			load_int4_group(r + d / 2, kvk_f16_to_f32(h), out + d);
		}
		break;
	}
}

/* kvk_e_f32_bf16() on a row, without branches. */
KVK_ROW_CLONES
static void store_bf16(uint32_t D, const float *x, uint8_t *r)
{
	const kvk_u32a *u = (const kvk_u32a *)x;
	kvk_u16a *h = (kvk_u16a *)r;
	uint32_t d;

	for (d = 0; d < D; d++) {
		uint32_t v = u[d];
		uint32_t rn = (v + 0x7fffu + ((v >> 16) & 1)) >> 16;
		uint32_t qn = (v >> 16) | 0x40;

		h[d] = (uint16_t)((v & 0x7fffffffu) > 0x7f800000u ? qn : rn);
	}
}

/*
 * kvk_e_q_fp8(x, s) for s > 0, without branches: the value is x / s, then
 * kvk_e_f32_to_fp8's cases (NaN, saturation, subnormal grid rounded to
 * nearest even by adding 2^23, normal rounding on the bits) selected per
 * element.
 */
KVK_ROW_CLONES
static void q_fp8_pos(uint32_t D, const float *x, float s, uint8_t *r)
{
	const kvk_u32a *xu = (const kvk_u32a *)x;
	uint32_t d;

	for (d = 0; d < D; d++) {
		float y = x[d] / s, a = fabsf(y);
		float sub = (a * 512.0f + 0x1p23f) - 0x1p23f;
		uint32_t u, ua, n, code, xs = xu[d];

		memcpy(&u, &y, 4);
		ua = u & 0x7fffffffu;
		n = ((ua + 0x7ffffu + ((ua >> 20) & 1)) >> 20) - (120u << 3);
		n = n > 0x7e ? 0x7e : n;
		code = a < 0x1p-6f ? (uint32_t)(int32_t)sub : n;
		code = a >= KVK_FP8_MAX ? 0x7e : code;
		code |= (u >> 24) & 0x80;
		/* a NaN input keeps its own sign (kvk_e_q_fp8) */
		code = x[d] != x[d] ? ((xs >> 24) & 0x80) | 0x7f : code;
		r[d] = (uint8_t)code;
	}
}

/* kvk_e_q_sym(x, s, 127) for s > 0, without branches. */
KVK_ROW_CLONES
static void q_int8_pos(uint32_t D, const float *x, float s, uint8_t *r)
{
	uint32_t d;

	for (d = 0; d < D; d++) {
		float y = x[d] / s, q;

		y = y > KVK_INT8_MAX ? KVK_INT8_MAX : y;
		y = y < -KVK_INT8_MAX ? -KVK_INT8_MAX : y;
		/* round to nearest even: |y| <= 127 */
		q = (y + 0x1.8p23f) - 0x1.8p23f;
		q = x[d] != x[d] ? 0.0f : q;
		r[d] = (uint8_t)(int8_t)(int32_t)q;
	}
}

/* kvk_e_q_sym(v, sc, 7) of one group of 32 packed in 16 bytes; sc > 0. */
KVK_ROW_CLONES
static void q_int4_group(const float *v, float sc, uint8_t *r)
{
	int32_t q[KVK_INT4_GROUP];
	uint32_t d;

	for (d = 0; d < KVK_INT4_GROUP; d++) {
		float y = v[d] / sc;

		y = y > KVK_INT4_MAX ? KVK_INT4_MAX : y;
		y = y < -KVK_INT4_MAX ? -KVK_INT4_MAX : y;
		y = (y + 0x1.8p23f) - 0x1.8p23f;	/* nearest even */
		q[d] = v[d] != v[d] ? 0 : (int32_t)y;
	}
	for (d = 0; d < KVK_INT4_GROUP / 2; d++)
		r[d] = (uint8_t)((q[2 * d] & 15) | ((q[2 * d + 1] & 15) << 4));
}

/* INT4: each group of 32 gets its own FP16 scale (as kvk_write_kv). */
static void store_int4(uint32_t D, const float *x, uint8_t *r, uint8_t *gs)
{
	uint32_t g, d;

	for (g = 0; g < D / KVK_INT4_GROUP; g++) {
		const float *v = x + g * KVK_INT4_GROUP;
		float amax = row_amax(KVK_INT4_GROUP, v), sc;
		uint16_t h;

		h = kvk_f32_to_f16(amax / KVK_INT4_MAX);
		if ((h & 0x7fff) >= 0x7c00)
			h = 0x7bff;
		sc = kvk_f16_to_f32(h);
		memcpy(gs + g * 2, &h, 2);
		if (sc > 0.0f) {
			q_int4_group(v, sc, r + g * KVK_INT4_GROUP / 2);
			continue;
		}
		for (d = 0; d < KVK_INT4_GROUP; d += 2) {
			int lo = (int)kvk_e_q_sym(v[d], sc, KVK_INT4_MAX);
			int hi = (int)kvk_e_q_sym(v[d + 1], sc, KVK_INT4_MAX);

			r[(g * KVK_INT4_GROUP + d) / 2] =
				(uint8_t)((lo & 15) | ((hi & 15) << 4));
		}
	}
}

static void store_scaled(uint32_t dtype, uint32_t D, const float *x, float s,
			 uint8_t *r)
{
	uint32_t d;

	if (s > 0.0f && dtype == KVK_FP8)
		q_fp8_pos(D, x, s, r);
	else if (s > 0.0f)
		q_int8_pos(D, x, s, r);
	else if (dtype == KVK_FP8)
		for (d = 0; d < D; d++)
			r[d] = kvk_e_q_fp8(x[d], s);
	else
		for (d = 0; d < D; d++)
			r[d] = (uint8_t)(int8_t)kvk_e_q_sym(x[d], s,
							    KVK_INT8_MAX);
}

/* FP8/INT8 codes from scale s0 to scale s (FP8 NaN codes are kept). */
static void requant(uint32_t dtype, uint32_t D, const uint8_t *src,
		    float s0, float s, uint8_t *dst)
{
	float x[KVK_MAX_HEAD_DIM];
	uint32_t d;

	if (s > 0.0f) {
		load_row(dtype, D, src, s0, NULL, x);
		store_scaled(dtype, D, x, s, dst);
		return;
	}
	if (dtype == KVK_FP8)
		for (d = 0; d < D; d++)
			dst[d] = kvk_e_q_fp8(kvk_e_fp8_f32(src[d]) * s0, s);
	else
		for (d = 0; d < D; d++)
			dst[d] = (uint8_t)(int8_t)kvk_e_q_sym(
				(float)(int8_t)src[d] * s0, s, KVK_INT8_MAX);
}

static inline int slot_kind(const struct kvk_edit_plan *p, uint32_t g,
			    uint32_t kv, uint32_t *src)
{
	int kind = kvk_edit_src(p, g, src);

	return kind == KVK_EDIT_ROT && kv ? KVK_EDIT_COPY : kind;
}

static void edit_plane(const struct edit_job *j, uint32_t bi, uint32_t layer,
		       uint32_t kv, uint32_t head, float *fv, float *ssrc)
{
	const struct kvk_layout *l = j->l;
	const struct kvk_edit_plan *p = j->p;
	uint32_t T = l->tokens_per_block, D = l->head_dim, rb = l->row_bytes;
	uint32_t dt = l->dtype, gsb = dt == KVK_INT4 ?
				     D / KVK_INT4_GROUP * 2 : 0;
	uint64_t roff = kvk_row_offset(l, layer, kv, head, 0);
	uint64_t goff = dt == KVK_INT4 ?
			kvk_scale_offset(l, layer, kv, head, 0) : 0;
	uint8_t *dblk = j->pool + (uint64_t)j->table[bi] * l->block_bytes;
	float tmp[KVK_MAX_HEAD_DIM], rot[KVK_MAX_HEAD_DIM], s = 0.0f;
	uint64_t g0 = (uint64_t)bi * T;
	uint32_t n, i, src;
	int scaled = dt == KVK_FP8 || dt == KVK_INT8;

	/* FP8/INT8: the block-scale rule needs every source first. */
	if (scaled) {
		float qmax = dt == KVK_FP8 ? KVK_FP8_MAX : KVK_INT8_MAX;
		float smax = 0.0f, amax = 0.0f, a;

		for (i = 0; i < T; i++) {
			int kind = slot_kind(p, (uint32_t)(g0 + i), kv, &src);
			const uint8_t *sblk;

			if (kind == KVK_EDIT_ZERO)
				continue;
			sblk = j->pool + (uint64_t)j->table[src / T] *
			       l->block_bytes;
			ssrc[i] = plane_scale(l, sblk, layer, kv, head);
			if (ssrc[i] > smax)
				smax = ssrc[i];
			if (kind != KVK_EDIT_ROT)
				continue;
			load_row(dt, D, sblk + roff + (uint64_t)(src % T) * rb,
				 ssrc[i], NULL, tmp);
			rope_apply(p->style, p->rd, p->cs, p->sn, D, tmp,
				   fv + (size_t)i * D);
			a = row_amax(D, fv + (size_t)i * D);
			amax = a > amax ? a : amax;
		}
		s = kvk_pow2_scale(amax, qmax);
		if (smax > s)
			s = smax;
	}
	for (n = 0; n < T; n++) {
		int kind;
		const uint8_t *sblk, *srow;
		uint8_t *drow;

		i = p->dir > 0 ? n : T - 1 - n;
		kind = slot_kind(p, (uint32_t)(g0 + i), kv, &src);
		drow = dblk + roff + (uint64_t)i * rb;
		if (kind == KVK_EDIT_ZERO) {
			memset(drow, 0, rb);
			if (gsb)
				memset(dblk + goff + (uint64_t)i * gsb, 0, gsb);
			continue;
		}
		sblk = j->pool + (uint64_t)j->table[src / T] * l->block_bytes;
		srow = sblk + roff + (uint64_t)(src % T) * rb;
		if (kind == KVK_EDIT_COPY) {
			if (scaled && ssrc[i] != s) {
				requant(dt, D, srow, ssrc[i], s, drow);
				continue;
			}
			if (srow != drow)
				memmove(drow, srow, rb);
			if (gsb && srow != drow)
				memmove(dblk + goff + (uint64_t)i * gsb,
					sblk + goff + (uint64_t)(src % T) * gsb,
					gsb);
			continue;
		}
		/* a tail key, rotated by delta */
		if (scaled) {
			store_scaled(dt, D, fv + (size_t)i * D, s, drow);
			continue;
		}
		load_row(dt, D, srow, 1.0f,
			 sblk + goff + (uint64_t)(src % T) * gsb, tmp);
		rope_apply(p->style, p->rd, p->cs, p->sn, D, tmp, rot);
		if (dt == KVK_BF16)
			store_bf16(D, rot, drow);
		else
			store_int4(D, rot, drow,
				   dblk + goff + (uint64_t)i * gsb);
	}
	if (scaled)
		memcpy(dblk + kvk_scale_offset(l, layer, kv, head, 0), &s, 4);
}

/*
 * The (layer, K|V) planes of destination block bi and of the block its
 * tail rows come from (the next one in the walk's direction), one line of
 * every 64 bytes.
 */
static void prefetch_planes(const struct edit_job *j, uint32_t bi,
			    uint32_t layer, uint32_t kv)
{
	const struct kvk_layout *l = j->l;
	uint64_t off = kvk_row_offset(l, layer, kv, 0, 0), n, x;
	uint64_t used = ((uint64_t)(j->p->len > j->p->new_len ? j->p->len :
				    j->p->new_len) + l->tokens_per_block - 1) /
			l->tokens_per_block;
	int64_t nb = (int64_t)bi + j->p->dir;
	uint32_t b[2], i;

	n = l->plane_bytes * l->kv_heads;
	b[0] = j->table[bi];
	b[1] = nb >= 0 && (uint64_t)nb < used ? j->table[nb] : b[0];
	for (i = 0; i < 2; i++) {
		const uint8_t *p = j->pool + (uint64_t)b[i] * l->block_bytes +
				   off;

		for (x = 0; x < n; x += 64)
			__builtin_prefetch(p + x);
	}
}

/* Item (layer, K|V): every destination block in order, every kv head. */
static void edit_item(void *ctx, uint32_t item, unsigned int thread)
{
	const struct edit_job *j = ctx;
	uint32_t layer = item / 2, kv = item % 2, k, h;
	uint32_t T = j->l->tokens_per_block;
	float *fv = j->scratch + thread * j->scratch_floats;
	float *ssrc = fv + (size_t)T * j->l->head_dim;

	for (k = 0; k < j->p->ndest; k++) {
		uint32_t bi = kvk_edit_dest(j->p, k);

		/* blocks are scattered: fetch the next one's planes early */
		if (k + 1 < j->p->ndest)
			prefetch_planes(j, kvk_edit_dest(j->p, k + 1), layer,
					kv);
		for (h = 0; h < j->l->kv_heads; h++)
			edit_plane(j, bi, layer, kv, h, fv, ssrc);
	}
}

static int run_edit(const struct kvk_layout *l, void *pool,
		    const uint32_t *table, const struct kvk_edit_plan *p,
		    struct kvk_cpu *cpu)
{
	struct edit_job j = {
		.l = l, .pool = pool, .table = table, .p = p,
	};
	unsigned int nt = kvk_cpu_threads(cpu);

	if (!p->ndest)
		return 0;
	j.scratch_floats = (size_t)l->tokens_per_block * (l->head_dim + 1);
	j.scratch = malloc(sizeof(float) * j.scratch_floats * nt);
	if (!j.scratch)
		return -ENOMEM;
	kvk_parallel_for(cpu, l->layers * 2, edit_item, &j);
	free(j.scratch);
	return 0;
}

int kvk_splice(const struct kvk_splice_args *a, struct kvk_cpu *cpu)
{
	struct kvk_edit_plan p;
	int ret = kvk_plan_splice(a, &p);

	if (ret)
		return ret;
	return run_edit(a->layout, a->pool_base, a->block_table, &p, cpu);
}

int kvk_compact(const struct kvk_compact_args *a, struct kvk_cpu *cpu)
{
	struct kvk_edit_plan p;
	int ret = kvk_plan_compact(a, &p);

	if (ret)
		return ret;
	return run_edit(a->layout, a->pool_base, a->block_table, &p, cpu);
}

/* ---- score ----------------------------------------------------------- */

int kvk_check_score(const struct kvk_score_args *a)
{
	const struct kvk_layout *l;
	uint64_t T, i, nb;

	if (!a || !a->layout || !a->layout->tokens_per_block ||
	    !a->pool_base || a->pad || (a->flags & ~KVK_SCORE_FLAGS))
		return -EINVAL;
	l = a->layout;
	T = l->tokens_per_block;
	if (a->layer >= l->layers || !a->q_heads || a->q_heads % l->kv_heads ||
	    a->q_heads / l->kv_heads > KVK_MAX_GQA)
		return -EINVAL;
	if (!a->n_q || a->n_q > KVK_SCORE_MAX_Q || !a->len ||
	    ((a->flags & KVK_SCORE_CAUSAL) && a->n_q > a->len))
		return -EINVAL;
	if (!a->q || !a->block_table || !a->out || !isfinite(a->scale))
		return -EINVAL;
	if (a->len > (uint64_t)a->nblocks * T)
		return -ERANGE;
	nb = (a->len + T - 1) / T;
	for (i = 0; i < nb; i++)
		if (l->pool_blocks && a->block_table[i] >= l->pool_blocks)
			return -EINVAL;
	return 0;
}

#define SCORE_CHUNK 512

struct score_job {
	const struct kvk_score_args *a;
	const struct kvk_layout *l;
	uint32_t G, Rh, nchunks;
	uint32_t *lim;		/* [n_q]: last slot query i sees */
	float *qs;		/* [kv_heads][Rh][D]: row r = (i, g), i major */
	float *pm, *pl;		/* [kv_heads][nchunks][Rh] partial max, sum */
	float *M, *L;		/* [kv_heads][Rh] */
	float *kbuf;		/* per thread: head_dim + Rh floats */
	size_t kbuf_floats;
};

/* x[r] = q[r] . k for nr rows of D, each summed in 16 lanes then a tree. */
KVK_ROW_CLONES
static void dots(const float *q, uint32_t nr, const float *k, uint32_t D,
		 float *x)
{
	uint32_t r, d, i;

	for (r = 0; r < nr; r++, q += D) {
		float acc[16] = { 0 };

		for (d = 0; d < D; d += 16)
			for (i = 0; i < 16; i++)
				acc[i] += q[d + i] * k[d + i];
		for (i = 8; i; i >>= 1)
			for (d = 0; d < i; d++)
				acc[d] += acc[d + i];
		x[r] = acc[0];
	}
}

/* One slot's key of kv head h, dequantised as attention does it. */
static void score_key(const struct score_job *j, uint32_t h, uint32_t slot,
		      float *k)
{
	const struct kvk_layout *l = j->l;
	uint32_t T = l->tokens_per_block, layer = j->a->layer;
	const uint8_t *blk = (const uint8_t *)j->a->pool_base +
			     (uint64_t)j->a->block_table[slot / T] *
			     l->block_bytes;
	float s = 0.0f;

	if (l->dtype == KVK_FP8 || l->dtype == KVK_INT8)
		memcpy(&s, blk + kvk_scale_offset(l, layer, 0, h, 0), 4);
	load_row(l->dtype, l->head_dim,
		 blk + kvk_row_offset(l, layer, 0, h, slot % T), s,
		 blk + kvk_scale_offset(l, layer, 0, h, slot % T), k);
}

/* Pass 1, item (kv head, chunk): online (max, sum) per query row. */
static void score_stats(void *ctx, uint32_t item, unsigned int thread)
{
	const struct score_job *j = ctx;
	const struct kvk_score_args *a = j->a;
	uint32_t h = item / j->nchunks, c = item % j->nchunks, r, s;
	uint32_t D = j->l->head_dim;
	uint32_t s1 = (c + 1) * SCORE_CHUNK < a->len ?
		      (c + 1) * SCORE_CHUNK : a->len;
	float *m = j->pm + ((size_t)h * j->nchunks + c) * j->Rh;
	float *lsum = j->pl + ((size_t)h * j->nchunks + c) * j->Rh;
	float *k = j->kbuf + (size_t)thread * j->kbuf_floats, *xs = k + D;

	for (r = 0; r < j->Rh; r++) {
		m[r] = -INFINITY;
		lsum[r] = 0.0f;
	}
	for (s = c * SCORE_CHUNK; s < s1; s++) {
		score_key(j, h, s, k);
		dots(j->qs + (size_t)h * j->Rh * D, j->Rh, k, D, xs);
		for (r = 0; r < j->Rh; r++) {
			float x;

			if (s > j->lim[r / j->G])
				continue;
			x = xs[r] * a->scale;
			if (x > m[r]) {
				lsum[r] = lsum[r] * expf(m[r] - x) + 1.0f;
				m[r] = x;
			} else {
				lsum[r] += expf(x - m[r]);
			}
		}
	}
}

/* Pass 2, item (chunk): each slot's weights over every row, in order. */
static void score_accum(void *ctx, uint32_t c, unsigned int thread)
{
	const struct score_job *j = ctx;
	const struct kvk_score_args *a = j->a;
	uint32_t D = j->l->head_dim, h, r, s;
	uint32_t s1 = (c + 1) * SCORE_CHUNK < a->len ?
		      (c + 1) * SCORE_CHUNK : a->len;
	int want_max = !!(a->flags & KVK_SCORE_MAX);
	float *k = j->kbuf + (size_t)thread * j->kbuf_floats, *xs = k + D;

	for (s = c * SCORE_CHUNK; s < s1; s++) {
		float acc = 0.0f;

		for (h = 0; h < j->l->kv_heads; h++) {
			const float *M = j->M + (size_t)h * j->Rh;
			const float *L = j->L + (size_t)h * j->Rh;

			score_key(j, h, s, k);
			dots(j->qs + (size_t)h * j->Rh * D, j->Rh, k, D, xs);
			for (r = 0; r < j->Rh; r++) {
				float w;

				if (s > j->lim[r / j->G])
					continue;
				w = expf(xs[r] * a->scale - M[r]) / L[r];
				if (!want_max)
					acc += w;
				else if (w > acc || w != w)
					acc = w;
			}
		}
		a->out[s] = acc;
	}
}

int kvk_score(const struct kvk_score_args *a, struct kvk_cpu *cpu)
{
	struct score_job j;
	uint32_t H, i, h, r, c;
	unsigned int nt = kvk_cpu_threads(cpu);
	int ret = kvk_check_score(a);

	if (ret)
		return ret;
	memset(&j, 0, sizeof(j));
	j.a = a;
	j.l = a->layout;
	H = j.l->kv_heads;
	j.G = a->q_heads / H;
	j.Rh = a->n_q * j.G;
	j.nchunks = (a->len + SCORE_CHUNK - 1) / SCORE_CHUNK;
	j.lim = malloc(sizeof(uint32_t) * a->n_q);
	j.pm = malloc(sizeof(float) * 2 * ((size_t)H * j.nchunks * j.Rh));
	j.M = malloc(sizeof(float) * 2 * ((size_t)H * j.Rh));
	j.kbuf_floats = (size_t)j.l->head_dim + j.Rh;
	j.kbuf = malloc(sizeof(float) * j.kbuf_floats * nt);
	j.qs = malloc(sizeof(float) * (size_t)H * j.Rh * j.l->head_dim);
	if (!j.lim || !j.pm || !j.M || !j.kbuf || !j.qs) {
		ret = -ENOMEM;
		goto out;
	}
	/* the query rows of each kv head, packed */
	for (h = 0; h < H; h++)
		for (r = 0; r < j.Rh; r++)
			memcpy(j.qs + ((size_t)h * j.Rh + r) * j.l->head_dim,
			       a->q + ((size_t)(r / j.G) * a->q_heads + h * j.G +
				       r % j.G) * j.l->head_dim,
			       sizeof(float) * j.l->head_dim);
	j.pl = j.pm + (size_t)H * j.nchunks * j.Rh;
	j.L = j.M + (size_t)H * j.Rh;
	for (i = 0; i < a->n_q; i++)
		j.lim[i] = (a->flags & KVK_SCORE_CAUSAL) ?
			   a->len - a->n_q + i : a->len - 1;
	kvk_parallel_for(cpu, H * j.nchunks, score_stats, &j);
	/* merge the chunks of every row in chunk order */
	for (h = 0; h < H; h++)
		for (r = 0; r < j.Rh; r++) {
			float M = -INFINITY, L = 0.0f;

			for (c = 0; c < j.nchunks; c++) {
				float m = j.pm[((size_t)h * j.nchunks + c) *
					       j.Rh + r];

				if (m > M || m != m)
					M = m;
			}
			for (c = 0; c < j.nchunks; c++) {
				size_t x = ((size_t)h * j.nchunks + c) * j.Rh +
					   r;

				if (j.pm[x] == -INFINITY)
					continue;
				L += j.pl[x] * expf(j.pm[x] - M);
			}
			j.M[(size_t)h * j.Rh + r] = M;
			j.L[(size_t)h * j.Rh + r] = L;
		}
	kvk_parallel_for(cpu, j.nchunks, score_accum, &j);
out:
	free(j.lim);
	free(j.pm);
	free(j.M);
	free(j.kbuf);
	free(j.qs);
	return ret;
}
