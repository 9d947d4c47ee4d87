// SPDX-License-Identifier: MIT
/*
 * test-kvk-splice.c - kvk_splice() on sequences of every dtype, both RoPE
 * styles, full and partial rotary dimensions, with and without an
 * explicit frequency table, tokens per block {16, 7, 1, 5}:
 *  - edits at block boundaries and inside blocks, deletes and inserts
 *    crossing blocks, at slot 0, at the end, up to the end, same-size
 *    replacements, then a run of random edits;
 *  - after every edit: each moved key equals the FP64 rotation by delta of
 *    its stored value before the edit within one re-quantisation (FP32
 *    rotation error within a few ulps on top), every stored key equals the
 *    FP64 key written directly at its new position within the
 *    quantisations it went through, the slots made for new tokens read as
 *    zeros, and V: BF16/INT4 bytes unchanged, FP8/INT8 codes unchanged
 *    where the destination scale is the source's, else within half a step
 *    of the new scale;
 *  - at the end: decode attention (optimised and scalar) against FP64
 *    attention over the edited content, within the dtype's bound;
 *  - outliers (blocks of different scales: V re-quantised in FP8/INT8);
 *  - a gap in positions closed by a splice (delta near -2^30);
 *  - KVK_WRITE_MERGE keeps a block's other tokens when slot 0 is
 *    rewritten;
 *  - bad input: span beyond the length, table too short, a block beyond
 *    the pool or named twice, no RoPE data, bad delta or pad: the error,
 *    and the pool unchanged byte for byte.
 */
#include "kvk_edit_test.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#ifdef KT_SMALL
#define RANDOM_EDITS 4
#else
#define RANDOM_EDITS 12
#endif

/*
 * Attention bounds (Documentation/edits.rst): after one edit the dtype's
 * bound for a cache written once; after several edits (a key turned and
 * re-quantised up to about 20 times) 1.5 times that.
 */
static double attn_bound(uint32_t dtype, int many)
{
	return kt_quant_bound(dtype) * (many ? 1.5 : 1.0);
}

/* The same content written from scratch: one write per token. */
static int es_scratch(const struct es *e, struct es *f)
{
	uint32_t t;
	int r;

	r = es_init(f, e->layers, e->H, e->D, e->l.dtype,
		    e->l.tokens_per_block, e->pool_blocks, e->l.rope.style,
		    e->l.rope.rotary_dims, 0);
	if (r)
		return r;
	f->l.rope = e->l.rope;
	f->K = e->K;
	f->V = e->V;
	f->ntok = f->tok_cap = e->ntok;
	r = es_reserve(f, e->len);
	if (r)
		return r;
	for (t = 0; t < e->len; t++) {
		f->tok[t] = e->tok[t];
		f->pos[t] = e->pos[t];
	}
	f->len = e->len;
	f->next_pos = e->next_pos;
	f->cpu = e->cpu;
	return es_write(f, 0, e->len, 0);
}

static struct kvk_cpu *g_cpu;
static double worst_op[5], worst_keys[5], worst_attn[5], worst_many[5];
static double worst_scratch[5], worst_one[5];
static uint64_t v_same[5], v_requant[5];

/* FP64 rotation of a dequantised row by the angle delta * inv_freq. */
static void rot64(const struct es *e, int64_t delta, const float *in,
		  double *out)
{
	const struct kvk_rope *r = &e->l.rope;
	uint32_t half = r->rotary_dims / 2, i;

	for (i = 0; i < e->D; i++)
		out[i] = in[i];
	for (i = 0; i < half; i++) {
		long double th = fmodl((long double)delta * r->inv_freq[i],
				       6.28318530717958647692528676655900577L);
		double c = (double)cosl(th), s = (double)sinl(th);
		uint32_t a = r->style == KVK_ROPE_NEOX ? i : 2 * i;
		uint32_t b = r->style == KVK_ROPE_NEOX ? i + half : 2 * i + 1;

		out[a] = in[a] * c - (double)in[b] * s;
		out[b] = in[a] * s + (double)in[b] * c;
	}
}

struct snap {
	float *k, *v;			/* [layers][len][H][D] dequantised */
	uint8_t *vb;			/* [layers][len][H] V row bytes + gs */
	float *vs;			/* [layers][len][H] V plane scale */
};

static size_t vrow_bytes(const struct es *e)
{
	return e->l.row_bytes + (e->l.dtype == KVK_INT4 ? e->D / 16 : 0);
}

static void snap_take(const struct es *e, struct snap *s)
{
	size_t hd = (size_t)e->H * e->D, n = e->len ? e->len : 1;
	uint32_t layer, t, h;

	s->k = malloc(sizeof(float) * hd * n * e->layers);
	s->v = malloc(sizeof(float) * hd * n * e->layers);
	s->vb = malloc(vrow_bytes(e) * e->H * n * e->layers);
	s->vs = malloc(sizeof(float) * e->H * n * e->layers);
	if (!s->k || !s->v || !s->vb || !s->vs)
		abort();
	for (layer = 0; layer < e->layers; layer++) {
		es_read(e, layer, 0, s->k + layer * hd * n);
		es_read(e, layer, 1, s->v + layer * hd * n);
		for (t = 0; t < e->len; t++)
			for (h = 0; h < e->H; h++) {
				size_t x = ((size_t)layer * n + t) * e->H + h;
				const uint8_t *gs;
				const uint8_t *row = es_rowp(e, t, layer, 1, h,
							     &gs);

				memcpy(s->vb + x * vrow_bytes(e), row,
				       e->l.row_bytes);
				if (e->l.dtype == KVK_INT4)
					memcpy(s->vb + x * vrow_bytes(e) +
					       e->l.row_bytes, gs, e->D / 16);
				s->vs[x] = (e->l.dtype == KVK_FP8 ||
					    e->l.dtype == KVK_INT8) ?
					   es_scale(e, t, layer, 1, h) : 0;
			}
	}
}

static void snap_free(struct snap *s)
{
	free(s->k);
	free(s->v);
	free(s->vb);
	free(s->vs);
}

/*
 * Splice the model and the pool, check the op against the snapshot taken
 * before it, then write the new tokens (KVK_WRITE_MERGE, in chunks).
 */
static int do_splice(struct es *e, uint32_t at, uint32_t ndel, uint32_t nins,
		     const char *what)
{
	uint32_t T = e->l.tokens_per_block, old_len = e->len, dt = e->l.dtype;
	uint32_t new_len = e->len - ndel + nins, t, layer, h, d, c0, c1;
	int64_t delta = es_delta(e, at, ndel, nins), shift = (int64_t)nins - ndel;
	int64_t p0 = at < e->len ? e->pos[at] : e->next_pos;
	size_t hd = (size_t)e->H * e->D, on = old_len ? old_len : 1;
	float *k = malloc(sizeof(float) * hd * (new_len + 1));
	float *v = malloc(sizeof(float) * hd * (new_len + 1));
	double ref[KVK_MAX_HEAD_DIM];
	struct kvk_splice_args a;
	struct snap s;
	int r;

	if (!k || !v)
		abort();
	snap_take(e, &s);
	r = es_reserve(e, new_len > old_len ? new_len : old_len);
	KT_CHECK(r == 0, "reserve");
	memset(&a, 0, sizeof(a));
	a.layout = &e->l;
	a.pool_base = e->pool;
	a.block_table = e->table;
	a.nblocks = e->nb;
	a.len = old_len;
	a.at = at;
	a.ndel = ndel;
	a.nins = nins;
	a.delta = delta;
	r = kvk_splice(&a, e->cpu);
	KT_CHECK(r == 0, "%s: splice(%u, %u, %u) = %d", what, at, ndel, nins,
		 r);
	/* the model */
	if (shift) {
		memmove(e->tok + at + nins, e->tok + at + ndel,
			4 * (old_len - at - ndel));
		memmove(e->pos + at + nins, e->pos + at + ndel,
			4 * (old_len - at - ndel));
		memmove(e->nq + at + nins, e->nq + at + ndel,
			4 * (old_len - at - ndel));
	}
	for (t = at + nins; t < new_len; t++) {
		e->pos[t] = (uint32_t)(e->pos[t] + delta);
		e->nq[t]++;
	}
	for (t = at / T * T; t < at; t++)
		e->nq[t]++;
	for (t = 0; t < nins; t++) {
		e->tok[at + t] = es_new_token(e);
		e->pos[at + t] = (uint32_t)(p0 + t);
		e->nq[at + t] = 1;
	}
	e->len = new_len;
	e->next_pos = (uint32_t)(e->next_pos + delta);
	/* the op: moved keys vs R(delta) of their old values, V, zeros */
	for (layer = 0; layer < e->layers; layer++) {
		es_read(e, layer, 0, k);
		es_read(e, layer, 1, v);
		for (t = 0; t < new_len; t++) {
			int moved = t >= at + nins;
			uint32_t src = moved ? (uint32_t)(t - shift) : t;

			for (h = 0; h < e->H; h++) {
				const float *kr = k + (t * e->H + h) * e->D;
				const float *vr = v + (t * e->H + h) * e->D;
				size_t x = ((size_t)layer * on + src) * e->H + h;
				const float *ko = s.k + layer * hd * on +
						  (src * e->H + h) * e->D;
				double rowmax = 0, sc = 0;

				if (t >= at && t < at + nins) {
					for (d = 0; d < e->D; d++)
						KT_CHECK(kr[d] == 0 && vr[d] == 0,
							 "%s: new slot %u not "
							 "zero", what, t);
					continue;
				}
				if (!moved && t < at / T * T)
					continue;
				rot64(e, moved ? delta : 0, ko, ref);
				for (d = 0; d < e->D; d++) {
					uint32_t p = es_partner(e, d);
					double n = hypot(ref[d], p == d ? 0 :
							 ref[p]);

					rowmax = n > rowmax ? n : rowmax;
				}
				if (dt == KVK_FP8 || dt == KVK_INT8)
					sc = es_scale(e, t, layer, 0, h);
				for (d = 0; d < e->D; d++) {
					uint32_t p = es_partner(e, d);
					double n = hypot(ref[d], p == d ? 0 :
							 ref[p]);
					double err = hypot(kr[d] - ref[d],
						p == d ? 0 : kr[p] - ref[p]);
					double b = (p == d ? 1 : M_SQRT2) *
						   es_qerr(dt, n, sc, rowmax, 0) +
						   4 * 0x1p-24 * n + 1e-7;

					if (err / b > worst_op[dt])
						worst_op[dt] = err / b;
					if (!(err <= b)) {
						KT_CHECK(err <= b, "%s: slot %u "
							 "(was %u) layer %u head "
							 "%u dim %u: %g vs R(%lld)"
							 " %g: err %g > %g", what,
							 t, src, layer, h, d,
							 kr[d], (long long)delta,
							 ref[d], err, b);
						break;
					}
				}
				/* V */
				if (dt == KVK_BF16 || dt == KVK_INT4) {
					const uint8_t *gs;
					const uint8_t *row = es_rowp(e, t, layer,
								     1, h, &gs);
					const uint8_t *ob = s.vb + x *
							    vrow_bytes(e);

					KT_CHECK(!memcmp(row, ob, e->l.row_bytes) &&
						 (dt != KVK_INT4 ||
						  !memcmp(gs, ob + e->l.row_bytes,
							  e->D / 16)),
						 "%s: V bytes of slot %u changed",
						 what, t);
					v_same[dt]++;
					continue;
				}
				if (es_scale(e, t, layer, 1, h) == s.vs[x]) {
					KT_CHECK(!memcmp(es_rowp(e, t, layer, 1,
								 h, NULL),
							 s.vb + x * vrow_bytes(e),
							 e->l.row_bytes),
						 "%s: V codes of slot %u changed "
						 "at the same scale", what, t);
					v_same[dt]++;
				} else {
					float sn = es_scale(e, t, layer, 1, h);
					const float *vo = s.v + layer * hd * on +
							  (src * e->H + h) *
							  e->D;

					KT_CHECK(sn > s.vs[x], "V scale shrank");
					for (d = 0; d < e->D; d++)
						KT_CHECK(fabs(vr[d] - vo[d]) <=
							 es_qerr(dt, fabs(vo[d]),
								 sn, 0, 0) + 1e-7,
							 "%s: V slot %u dim %u "
							 "%g -> %g", what, t, d,
							 vo[d], vr[d]);
					v_requant[dt]++;
				}
			}
		}
	}
	snap_free(&s);
	free(k);
	free(v);
	es_trim(e);
	/* the caller writes the new tokens, blocks keep their other slots */
	for (c0 = at; c0 < at + nins; c0 = c1) {
		c1 = c0 + 1 + kt_below(9);
		if (c1 > at + nins)
			c1 = at + nins;
		r = es_write(e, c0, c1 - c0, KVK_WRITE_MERGE);
		KT_CHECK(r == 0, "write new tokens: %d", r);
	}
	{
		double w = es_check_keys(e, what);

		if (w > worst_keys[dt])
			worst_keys[dt] = w;
	}
	return kt_failures;
}

/*
 * Outliers (one token in 16 with a large V, a larger K): blocks have
 * different scales, so moves between them re-quantise V in FP8/INT8; the
 * keys and V are checked as in run_case, attention is not (its bounds are
 * for N(0, 1) data).
 */
static void run_outliers(uint32_t dtype, uint32_t tpb)
{
	struct es e;
	uint32_t i;
	int r;

	r = es_init(&e, 2, 2, 64, dtype, tpb, 600, KVK_ROPE_NEOX, 0, 1);
	KT_CHECK(r == 0, "init %d", r);
	if (r)
		return;
	e.cpu = g_cpu;
	e.outliers = 1;
	KT_CHECK(es_append(&e, 200) == 0, "append");
	do_splice(&e, 37, 3, 0, "outliers");
	do_splice(&e, tpb, 0, 2 * tpb + 1, "outliers");
	do_splice(&e, 5, tpb + 2, 1, "outliers");
	for (i = 0; i < RANDOM_EDITS && !kt_failures; i++) {
		uint32_t at = kt_below(e.len + 1);
		uint32_t ndel = kt_below(e.len - at + 1) % 30;

		do_splice(&e, at, ndel, kt_below(2 * tpb + 2), "outliers");
	}
	es_free(&e);
}

static void run_case(uint32_t dtype, uint32_t style, uint32_t rd, int table,
		     uint32_t tpb, uint32_t D)
{
	struct es e;
	uint32_t T = tpb, i;
	char what[96];
	double w;
	int r, f0 = kt_failures;

	snprintf(what, sizeof(what), "%s %s rd %u %s T %u D %u",
		 kvk_dtype_name(dtype), style == KVK_ROPE_NEOX ? "neox" : "gptj",
		 rd ? rd : D, table ? "table" : "base", tpb, D);
	r = es_init(&e, 2, 2, D, dtype, tpb, 600, style, rd, table);
	KT_CHECK(r == 0, "%s: init %d", what, r);
	if (r)
		return;
	e.cpu = g_cpu;
	KT_CHECK(es_append(&e, 150) == 0, "append");
	es_check_keys(&e, what);
	/* inside a block, delete 1 */
	do_splice(&e, 37, 1, 0, what);
	w = es_check_attn(&e, 2);
	KT_CHECK(w <= attn_bound(dtype, 0), "%s: attention after one edit %g "
		 "> %g", what, w, attn_bound(dtype, 0));
	if (w > worst_one[dtype])
		worst_one[dtype] = w;
	/* at a block boundary, insert more than a block */
	do_splice(&e, 2 * T, 0, T + 3, what);
	/* delete across blocks from just before a boundary */
	do_splice(&e, T > 2 ? T - 2 : 1, 2 * T + 5, 0, what);
	/* replace 5 by 9 inside */
	do_splice(&e, 41, 5, 9, what);
	/* at slot 0 */
	do_splice(&e, 0, 3, 1, what);
	/* at the end (an append), and up to the end */
	do_splice(&e, e.len, 0, 4, what);
	do_splice(&e, e.len - 6, 6, 2, what);
	/* same size: nothing moves, nothing turns */
	do_splice(&e, 20, 4, 4, what);
	/* an exact multiple of the block */
	do_splice(&e, 3, 2 * T, 0, what);
	w = es_check_attn(&e, 2);
	KT_CHECK(w <= attn_bound(dtype, 1), "%s: attention after 9 edits %g > "
		 "%g", what, w, attn_bound(dtype, 1));
	if (w > worst_attn[dtype])
		worst_attn[dtype] = w;
	for (i = 0; i < RANDOM_EDITS && !kt_failures; i++) {
		uint32_t at = kt_below(e.len + 1);
		uint32_t ndel = kt_below(e.len - at + 1);
		uint32_t nins = kt_below(3 * T + 2);

		if (ndel > 40)
			ndel = 40;
		if (e.len - ndel + nins > 400)
			nins = 0;
		do_splice(&e, at, ndel, nins, what);
	}
	{
		uint64_t seed = kt_rng;
		struct es f;
		double ws;

		w = es_check_attn(&e, 2);
		KT_CHECK(es_scratch(&e, &f) == 0, "from scratch");
		kt_rng = seed;		/* the same queries */
		ws = es_check_attn(&f, 2);
		f.K = f.V = NULL;
		es_free(&f);
		if (w > worst_many[dtype])
			worst_many[dtype] = w;
		if (ws > worst_scratch[dtype])
			worst_scratch[dtype] = ws;
		KT_CHECK(w <= attn_bound(dtype, 1), "%s: attention after many "
			 "edits %g > %g", what, w, attn_bound(dtype, 1));
		KT_CHECK(ws <= attn_bound(dtype, 0), "%s: attention from "
			 "scratch %g > %g", what, ws, attn_bound(dtype, 0));
	}
	if (kt_failures == f0)
		printf("ok %s: len %u next pos %u attention %.4f\n", what,
		       e.len, e.next_pos, w);
	es_free(&e);
}

/* A gap in positions (a compaction left it) closed by a splice. */
static void check_gap(uint32_t dtype)
{
	struct es e;
	int r;

	r = es_init(&e, 2, 2, 64, dtype, 7, 200, KVK_ROPE_NEOX, 0, 0);
	KT_CHECK(r == 0, "init");
	KT_CHECK(es_append(&e, 40) == 0, "append");
	e.next_pos = 1u << 30;
	KT_CHECK(es_append(&e, 30) == 0, "append after the gap");
	/* delete the last token before the gap: the tail turns by about
	 * -2^30 (positions close up) */
	KT_CHECK(es_delta(&e, 39, 1, 0) == 39 - (1 << 30), "delta");
	do_splice(&e, 39, 1, 0, "gap");
	KT_CHECK(e.pos[39] == 39 && e.next_pos == 39 + 30, "positions closed");
	do_splice(&e, 10, 0, 3, "after the gap");
	es_free(&e);
}

/* KVK_WRITE_MERGE: rewriting slot 0 keeps the block's other tokens. */
static void check_merge(uint32_t dtype)
{
	struct kvk_layout l;
	uint32_t T = 16, D = 64, blk[16], sl[16], i;
	float k[16 * 64], v[16 * 64], rk[16 * 64], rk2[16 * 64], one[64];
	uint8_t *pool;

	KT_CHECK(kvk_layout_init(&l, 1, 1, D, dtype,
				 kt_block_bytes(1, 1, D, dtype, T)) == 0, "init");
	pool = calloc(2, l.block_bytes);
	for (i = 0; i < 16; i++) {
		blk[i] = 1;
		sl[i] = i;
	}
	for (i = 0; i < 16 * 64; i++) {
		k[i] = kt_gauss();
		v[i] = kt_gauss();
	}
	for (i = 0; i < 64; i++)
		one[i] = 0.01f * kt_gauss();
	KT_CHECK(kvk_write_kv(&l, pool, 0, 16, blk, sl, k, v) == 0, "write");
	kvk_read_kv(&l, pool, 0, 16, blk, sl, rk, NULL);
	KT_CHECK(kvk_write_kv_flags(&l, pool, 0, 1, blk, sl, one, one, 2) ==
		 -EINVAL, "unknown flag");
	KT_CHECK(kvk_write_kv_flags(&l, pool, 0, 1, blk, sl, one, one,
				    KVK_WRITE_MERGE) == 0, "merge write");
	kvk_read_kv(&l, pool, 0, 16, blk, sl, rk2, NULL);
	KT_CHECK(!memcmp(rk + 64, rk2 + 64, sizeof(float) * 15 * 64),
		 "%s: merge write kept the block's other tokens",
		 kvk_dtype_name(dtype));
	if (dtype == KVK_FP8 || dtype == KVK_INT8) {
		/* without the flag the block starts afresh (small scale) */
		kvk_write_kv(&l, pool, 0, 1, blk, sl, one, one);
		kvk_read_kv(&l, pool, 0, 16, blk, sl, rk2, NULL);
		KT_CHECK(memcmp(rk + 64, rk2 + 64, sizeof(float) * 15 * 64),
			 "a plain write of slot 0 starts afresh");
	}
	free(pool);
}

static void check_bad(uint32_t dtype)
{
	struct es e;
	struct kvk_splice_args a;
	uint8_t *copy;
	size_t bytes;
	uint32_t saved;
	int r;

	r = es_init(&e, 2, 2, 64, dtype, 7, 60, KVK_ROPE_GPTJ, 0, 1);
	KT_CHECK(r == 0, "init");
	KT_CHECK(es_append(&e, 50) == 0, "append");
	KT_CHECK(es_reserve(&e, 70) == 0, "reserve");
	bytes = (size_t)e.pool_blocks * e.l.block_bytes;
	copy = malloc(bytes);
	memcpy(copy, e.pool, bytes);
	memset(&a, 0, sizeof(a));
	a.layout = &e.l;
	a.pool_base = e.pool;
	a.block_table = e.table;
	a.nblocks = e.nb;
	a.len = e.len;
#define BAD(expr, want, msg) do { \
		r = (expr); \
		KT_CHECK(r == (want), "%s: %s: %d", kvk_dtype_name(dtype), msg, r); \
		KT_CHECK(!memcmp(copy, e.pool, bytes), "%s: pool changed", msg); \
	} while (0)
	a.at = 45;
	a.ndel = 6;
	a.delta = -6;
	BAD(kvk_splice(&a, NULL), -ERANGE, "delete beyond the length");
	a.at = 51;
	a.ndel = 0;
	BAD(kvk_splice(&a, NULL), -ERANGE, "at beyond the length");
	a.at = 10;
	a.nins = 30;
	a.delta = 30;
	BAD(kvk_splice(&a, NULL), -ERANGE, "new length beyond the table");
	a.nins = 3;
	a.delta = 3;
	a.nblocks = 7;
	BAD(kvk_splice(&a, NULL), -ERANGE, "table shorter than the length");
	a.nblocks = e.nb;
	saved = e.table[3];
	e.table[3] = e.pool_blocks;
	BAD(kvk_splice(&a, NULL), -EINVAL, "block beyond the pool");
	e.table[3] = e.table[5];
	BAD(kvk_splice(&a, NULL), -EINVAL, "block named twice");
	e.table[3] = saved;
	a.delta = 1LL << 32;
	BAD(kvk_splice(&a, NULL), -EINVAL, "delta 2^32");
	a.delta = 3;
	a.pad = 1;
	BAD(kvk_splice(&a, NULL), -EINVAL, "pad");
	a.pad = 0;
	a.pool_base = NULL;
	BAD(kvk_splice(&a, NULL), -EINVAL, "no pool");
	a.pool_base = e.pool;
	BAD(kvk_splice(NULL, NULL), -EINVAL, "no args");
	kvk_layout_set_rope(&e.l, KVK_ROPE_NONE, 0, 0, NULL);
	BAD(kvk_splice(&a, NULL), -ENODATA, "no RoPE data");
	/* without RoPE data a splice that turns nothing is fine */
	a.ndel = 3;
	a.delta = 0;
	KT_CHECK(kvk_splice(&a, NULL) == 0, "no turn needed");
	free(copy);
	es_free(&e);
}

int main(void)
{
	static const uint32_t tpbs[] = { 16, 7, 1, 5 };
	uint32_t dtype, style, table, part, n = 0;
	kvk_cpu_init(&g_cpu, 2);
	for (dtype = KVK_BF16; dtype <= KVK_INT4; dtype++) {
		check_merge(dtype);
		check_bad(dtype);
		check_gap(dtype);
		run_outliers(dtype, dtype == KVK_INT8 ? 7 : 16);
		for (style = KVK_ROPE_NEOX; style <= KVK_ROPE_GPTJ; style++)
			for (table = 0; table < 2; table++)
				for (part = 0; part < 2; part++) {
					uint32_t D = (n % 3 == 2) ? 128 : 64;
#ifdef KT_SMALL
					if ((style + table + part) % 2)
						continue;
#endif
					run_case(dtype, style, part ? D / 2 : 0,
						 table, tpbs[n++ % N(tpbs)], D);
				}
	}
	for (dtype = KVK_BF16; dtype <= KVK_INT4; dtype++)
		printf("%s: moved keys vs R(delta) old: %.2f of the bound; keys "
		       "vs direct: %.2f of the bound; attention after one edit "
		       "%.4f (bound %.3f), after 9 edits %.4f, after the "
		       "random run %.4f (bound %.3f), from scratch %.4f; V "
		       "rows kept %llu, re-quantised %llu\n",
		       kvk_dtype_name(dtype), worst_op[dtype],
		       worst_keys[dtype], worst_one[dtype],
		       attn_bound(dtype, 0), worst_attn[dtype],
		       worst_many[dtype],
		       attn_bound(dtype, 1), worst_scratch[dtype],
		       (unsigned long long)v_same[dtype],
		       (unsigned long long)v_requant[dtype]);
	kvk_cpu_free(g_cpu);
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
