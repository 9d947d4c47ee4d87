/* SPDX-License-Identifier: MIT */
/*
 * kvk_edit_test.h - a model of one sequence for the edit tests: tokens
 * with raw (unrotated) keys and values, the RoPE position of every slot,
 * the block table in a pool; keys are written rotated at their positions
 * (FP64 rotation rounded to FP32, as an engine would), edits are applied
 * to the pool with kvk_splice()/kvk_compact() and to the model, and the
 * pool is checked against the FP64 truth.
 */
#ifndef KVK_EDIT_TEST_H
#define KVK_EDIT_TEST_H

#include "kvk_test.h"
#include "kvkern_edit_internal.h"

struct es {
	struct kvk_layout l;
	uint8_t *pool;
	uint32_t pool_blocks;
	uint32_t *freeb;		/* free blocks of the pool */
	uint32_t nfree;
	uint32_t *table;		/* the sequence's blocks */
	uint32_t nb;
	uint32_t len, next_pos;
	uint32_t *tok;			/* per slot: token id */
	uint32_t *pos;			/* per slot: RoPE position */
	uint32_t *nq;			/* per slot: quantisations its K went
					 * through */
	uint32_t cap;			/* slots allocated */
	uint32_t ntok, tok_cap;
	float *K, *V;			/* per token [layers][H][D], raw */
	uint32_t layers, H, D;
	int outliers;
	struct kvk_cpu *cpu;
};

static inline size_t es_row(const struct es *e)
{
	return (size_t)e->layers * e->H * e->D;
}

static inline int es_init(struct es *e, uint32_t layers, uint32_t H,
			  uint32_t D, uint32_t dtype, uint32_t tpb,
			  uint32_t pool_blocks, uint32_t style, uint32_t rd,
			  int table)
{
	float f[KVK_ROPE_MAX_FREQ];
	uint32_t i;
	int r;

	memset(e, 0, sizeof(*e));
	e->layers = layers;
	e->H = H;
	e->D = D;
	r = kvk_layout_init(&e->l, layers, H, D, dtype,
			    kt_block_bytes(layers, H, D, dtype, tpb));
	if (r)
		return r;
	if (e->l.tokens_per_block != tpb)
		return -EPROTO;
	if (table) {
		/* a scaled table: Llama-3-like low frequencies stretched */
		for (i = 0; i < (rd ? rd : D) / 2; i++) {
			double base = pow(500000.0, -2.0 * i / (rd ? rd : D));

			f[i] = (float)(i > (rd ? rd : D) / 4 ? base / 8 : base);
		}
		r = kvk_layout_set_rope(&e->l, style, rd, 0.0f, f);
	} else {
		r = kvk_layout_set_rope(&e->l, style, rd, 10000.0f, NULL);
	}
	if (r)
		return r;
	e->pool_blocks = pool_blocks;
	e->l.pool_blocks = pool_blocks;
	e->pool = malloc((size_t)pool_blocks * e->l.block_bytes);
	e->freeb = malloc(sizeof(uint32_t) * pool_blocks);
	e->table = malloc(sizeof(uint32_t) * pool_blocks);
	if (!e->pool || !e->freeb || !e->table)
		return -ENOMEM;
	for (i = 0; i < pool_blocks * e->l.block_bytes; i++)
		e->pool[i] = (uint8_t)(i * 2654435761u >> 13);
	/* free blocks in a scrambled order */
	for (i = 0; i < pool_blocks; i++)
		e->freeb[i] = i;
	for (i = pool_blocks - 1; i > 0; i--) {
		uint32_t j = kt_below(i + 1), x = e->freeb[i];

		e->freeb[i] = e->freeb[j];
		e->freeb[j] = x;
	}
	e->nfree = pool_blocks;
	return 0;
}

static inline void es_free(struct es *e)
{
	free(e->pool);
	free(e->freeb);
	free(e->table);
	free(e->tok);
	free(e->pos);
	free(e->nq);
	free(e->K);
	free(e->V);
	memset(e, 0, sizeof(*e));
}

static inline int es_reserve(struct es *e, uint32_t slots)
{
	uint32_t need = (slots + e->l.tokens_per_block - 1) /
			e->l.tokens_per_block;

	if (slots > e->cap) {
		uint32_t cap = slots * 2 + 16;

		e->tok = realloc(e->tok, sizeof(uint32_t) * cap);
		e->pos = realloc(e->pos, sizeof(uint32_t) * cap);
		e->nq = realloc(e->nq, sizeof(uint32_t) * cap);
		if (!e->tok || !e->pos || !e->nq)
			return -ENOMEM;
		e->cap = cap;
	}
	while (e->nb < need) {
		if (!e->nfree)
			return -ENOSPC;
		e->table[e->nb++] = e->freeb[--e->nfree];
	}
	return 0;
}

/* Blocks past the length go back to the free list. */
static inline void es_trim(struct es *e)
{
	uint32_t keep = (e->len + e->l.tokens_per_block - 1) /
			e->l.tokens_per_block;

	while (e->nb > keep)
		e->freeb[e->nfree++] = e->table[--e->nb];
}

static inline uint32_t es_new_token(struct es *e)
{
	size_t n = es_row(e), i;

	if (e->ntok == e->tok_cap) {
		e->tok_cap = e->tok_cap ? e->tok_cap * 2 : 256;
		e->K = realloc(e->K, sizeof(float) * n * e->tok_cap);
		e->V = realloc(e->V, sizeof(float) * n * e->tok_cap);
		if (!e->K || !e->V)
			abort();
	}
	/* outliers: one token in 16 has a large V (and a larger K), so
	 * blocks get different scales and moves between them re-quantise */
	int big = e->outliers && !kt_below(16);

	for (i = 0; i < n; i++) {
		e->K[e->ntok * n + i] = kt_gauss() * (big ? 1.5f : 1.0f);
		e->V[e->ntok * n + i] = kt_gauss() * (big ? 8.0f : 1.0f);
	}
	return e->ntok++;
}

/* FP64 truth: token t's key of (layer, head) rotated to position p. */
static inline void es_key64(const struct es *e, uint32_t t, uint32_t layer,
			    uint32_t head, uint32_t p, double *out)
{
	const struct kvk_rope *r = &e->l.rope;
	const float *k = e->K + t * es_row(e) +
			 ((size_t)layer * e->H + head) * e->D;
	uint32_t rd = r->rotary_dims, half = rd / 2, i;

	for (i = 0; i < e->D; i++)
		out[i] = k[i];
	for (i = 0; i < half; i++) {
		double th = (double)p * (double)r->inv_freq[i];
		double c = cos(th), s = sin(th);
		uint32_t a = r->style == KVK_ROPE_NEOX ? i : 2 * i;
		uint32_t b = r->style == KVK_ROPE_NEOX ? i + half : 2 * i + 1;

		out[a] = k[a] * c - k[b] * s;
		out[b] = k[a] * s + k[b] * c;
	}
}

/* The partner of dimension d in its rotation pair (d itself if none). */
static inline uint32_t es_partner(const struct es *e, uint32_t d)
{
	uint32_t rd = e->l.rope.rotary_dims, half = rd / 2;

	if (d >= rd)
		return d;
	if (e->l.rope.style == KVK_ROPE_NEOX)
		return d < half ? d + half : d - half;
	return d ^ 1;
}

/* Write K (rotated at the slot's position) and V of slots [s0, s0 + n). */
static inline int es_write(struct es *e, uint32_t s0, uint32_t n,
			   uint32_t flags)
{
	size_t hd = (size_t)e->H * e->D;
	float *k = malloc(sizeof(float) * hd * n);
	float *v = malloc(sizeof(float) * hd * n);
	uint32_t *b = malloc(sizeof(uint32_t) * n), *sl = malloc(4 * n);
	double row[KVK_MAX_HEAD_DIM];
	uint32_t T = e->l.tokens_per_block, layer, t, h, d;
	int r = 0;

	if (!k || !v || !b || !sl)
		return -ENOMEM;
	for (t = 0; t < n; t++) {
		b[t] = e->table[(s0 + t) / T];
		sl[t] = (s0 + t) % T;
	}
	for (layer = 0; layer < e->layers && !r; layer++) {
		for (t = 0; t < n; t++)
			for (h = 0; h < e->H; h++) {
				uint32_t tk = e->tok[s0 + t];

				es_key64(e, tk, layer, h, e->pos[s0 + t], row);
				for (d = 0; d < e->D; d++)
					k[(t * e->H + h) * e->D + d] =
						(float)row[d];
				memcpy(v + (t * e->H + h) * e->D,
				       e->V + tk * es_row(e) +
				       ((size_t)layer * e->H + h) * e->D,
				       sizeof(float) * e->D);
			}
		r = kvk_write_kv_flags(&e->l, e->pool, layer, n, b, sl, k, v,
				       flags);
	}
	for (t = 0; t < n; t++)
		e->nq[s0 + t] = 1;
	free(k);
	free(v);
	free(b);
	free(sl);
	return r;
}

/* Grow by n new tokens, written in chunks of 1..40 (scales grow). */
static inline int es_append(struct es *e, uint32_t n)
{
	uint32_t s0 = e->len, c0, c1, t;
	int r = es_reserve(e, e->len + n);

	if (r)
		return r;
	for (t = 0; t < n; t++) {
		e->tok[s0 + t] = es_new_token(e);
		e->pos[s0 + t] = e->next_pos + t;
	}
	e->len += n;
	e->next_pos += n;
	for (c0 = s0; c0 < s0 + n && !r; c0 = c1) {
		c1 = c0 + 1 + kt_below(40);
		if (c1 > s0 + n)
			c1 = s0 + n;
		r = es_write(e, c0, c1 - c0, 0);
	}
	return r;
}

/* The position delta of a splice (the library's rule). */
static inline int64_t es_delta(const struct es *e, uint32_t at,
			       uint32_t ndel, uint32_t nins)
{
	int64_t p0 = at < e->len ? e->pos[at] : e->next_pos;
	int64_t pt = at + ndel < e->len ? e->pos[at + ndel] : e->next_pos;

	return p0 + nins - pt;
}

/* Dequantised K (or V) of every slot of one layer: [len][H][D]. */
static inline int es_read(const struct es *e, uint32_t layer, int kv,
			  float *out)
{
	uint32_t T = e->l.tokens_per_block, t;
	uint32_t *b = malloc(4 * (e->len ? e->len : 1));
	uint32_t *sl = malloc(4 * (e->len ? e->len : 1));
	int r;

	if (!b || !sl)
		return -ENOMEM;
	for (t = 0; t < e->len; t++) {
		b[t] = e->table[t / T];
		sl[t] = t % T;
	}
	r = e->len ? kvk_read_kv(&e->l, e->pool, layer, e->len, b, sl,
				 kv ? NULL : out, kv ? out : NULL) : 0;
	free(b);
	free(sl);
	return r;
}

static inline float es_scale(const struct es *e, uint32_t slot,
			     uint32_t layer, uint32_t kv, uint32_t head)
{
	const uint8_t *blk = e->pool + (uint64_t)e->table[slot /
			     e->l.tokens_per_block] * e->l.block_bytes;
	float s;

	memcpy(&s, blk + kvk_scale_offset(&e->l, layer, kv, head, 0), 4);
	return s;
}

/* Raw bytes of one row (and INT4 group scales) of a slot. */
static inline const uint8_t *es_rowp(const struct es *e, uint32_t slot,
				     uint32_t layer, uint32_t kv,
				     uint32_t head, const uint8_t **gs)
{
	uint32_t T = e->l.tokens_per_block;
	const uint8_t *blk = e->pool + (uint64_t)e->table[slot / T] *
			     e->l.block_bytes;

	if (gs)
		*gs = blk + kvk_scale_offset(&e->l, layer, kv, head, slot % T);
	return blk + kvk_row_offset(&e->l, layer, kv, head, slot % T);
}

/*
 * Bound on one quantisation's error of an element whose rotation pair has
 * norm nrm (FP8/INT8: plane scale s; INT4: largest pair norm of the row).
 * grown: the value may also have been re-quantised by later writes that
 * grew its block's scale (kernels.rst: at most one step in all for INT8,
 * subnormal steps for FP8).
 */
static inline double es_qerr(uint32_t dtype, double nrm, double s,
			     double rowmax, int grown)
{
	switch (dtype) {
	case KVK_BF16:
		return 0x1p-8 * nrm;
	case KVK_FP8:
		return 0x1p-4 * nrm + (grown ? 0x1p-9 : 0x1p-10) * s;
	case KVK_INT8:
		return (grown ? 1.0 : 0.5) * s;
	default:
		return 0.5 * rowmax / 7.0 * 1.01;
	}
}

/*
 * Every stored key against the FP64 truth at its position: the error of
 * each rotation pair is within nq[slot] quantisations (sqrt 2 for a pair)
 * plus FP32 rounding.  Returns the largest error / bound seen.
 */
static inline double es_check_keys(const struct es *e, const char *what)
{
	size_t hd = (size_t)e->H * e->D;
	float *k = malloc(sizeof(float) * hd * (e->len ? e->len : 1));
	double ref[KVK_MAX_HEAD_DIM], worst = 0;
	uint32_t layer, t, h, d;

	if (!k)
		abort();
	for (layer = 0; layer < e->layers; layer++) {
		KT_CHECK(es_read(e, layer, 0, k) == 0, "read");
		for (t = 0; t < e->len; t++)
			for (h = 0; h < e->H; h++) {
				const float *row = k + (t * e->H + h) * e->D;
				double rowmax = 0, s = 0;

				es_key64(e, e->tok[t], layer, h, e->pos[t],
					 ref);
				for (d = 0; d < e->D; d++) {
					uint32_t p = es_partner(e, d);
					double n = hypot(ref[d], p == d ? 0 :
							 ref[p]);

					if (n > rowmax)
						rowmax = n;
				}
				if (e->l.dtype == KVK_FP8 ||
				    e->l.dtype == KVK_INT8)
					s = es_scale(e, t, layer, 0, h);
				for (d = 0; d < e->D; d++) {
					uint32_t p = es_partner(e, d);
					double n = hypot(ref[d], p == d ? 0 :
							 ref[p]);
					double err = hypot(row[d] - ref[d],
						p == d ? 0 : row[p] - ref[p]);
					double b = e->nq[t] * (p == d ? 1 :
						   M_SQRT2) *
						   es_qerr(e->l.dtype, n, s,
							   rowmax, 1) +
						   1e-5 * n + 1e-6;

					if (err / b > worst)
						worst = err / b;
					if (!(err <= b)) {
						KT_CHECK(err <= b, "%s: slot %u "
							 "pos %u layer %u head "
							 "%u dim %u: err %g > "
							 "%g (nq %u)", what, t,
							 e->pos[t], layer, h, d,
							 err, b, e->nq[t]);
						free(k);
						return INFINITY;
					}
				}
			}
	}
	free(k);
	return worst;
}

/*
 * Decode attention (optimised and scalar paths) of one query per query
 * head at every layer against FP64 attention over the true content (keys
 * rotated at their positions, raw values).  Returns the largest relative
 * L2 error.
 */
static inline double es_check_attn(const struct es *e, uint32_t group)
{
	uint32_t QH = e->H * group, D = e->D, layer, h, i, t, d, path;
	size_t hd = (size_t)e->H * D;
	float *q = malloc(sizeof(float) * QH * D);
	float *out = malloc(sizeof(float) * QH * D);
	double *ref = malloc(sizeof(double) * QH * D);
	double *sc = malloc(sizeof(double) * (e->len + 1));
	float *kt = malloc(sizeof(float) * hd * (e->len + 1));
	float *vt = malloc(sizeof(float) * hd * (e->len + 1));
	double row[KVK_MAX_HEAD_DIM], worst = 0;
	uint32_t ctx = e->len;

	if (!q || !out || !ref || !sc || !kt || !vt)
		abort();
	for (layer = 0; layer < e->layers; layer++) {
		for (i = 0; i < QH * D; i++)
			q[i] = kt_gauss();
		for (t = 0; t < e->len; t++)
			for (h = 0; h < e->H; h++) {
				es_key64(e, e->tok[t], layer, h, e->pos[t],
					 row);
				for (d = 0; d < D; d++)
					kt[(t * e->H + h) * D + d] =
						(float)row[d];
				memcpy(vt + (t * e->H + h) * D,
				       e->V + e->tok[t] * es_row(e) +
				       ((size_t)layer * e->H + h) * D,
				       sizeof(float) * D);
			}
		for (h = 0; h < QH; h++)
			kt_ref_row(q + h * D, kt, vt, e->H, D, h / group,
				   e->len, 1.0 / sqrt(D), ref + h * D, sc);
		for (path = 0; path < 2; path++) {
			struct kvk_decode_args a = {
				.layout = &e->l, .pool_base = e->pool,
				.layer = layer, .batch = 1, .q_heads = QH,
				.max_blocks_per_seq = e->nb ? e->nb : 1,
				.q = q, .block_tables = e->table,
				.ctx_lens = &ctx,
				.scale = 1.0f / sqrtf((float)D), .out = out,
			};
			double err;
			int r = path ? kvk_decode_ref(&a) :
				       kvk_decode(&a, e->cpu);

			KT_CHECK(r == 0, "decode: %d", r);
			err = kt_rel_err(out, ref, (size_t)QH * D);
			if (err > worst)
				worst = err;
		}
	}
	free(q);
	free(out);
	free(ref);
	free(sc);
	free(kt);
	free(vt);
	return worst;
}

#endif /* KVK_EDIT_TEST_H */
