// SPDX-License-Identifier: MIT
/*
 * e2e-edits - editing sequences through libkvlease and kvpoold:
 *
 *   e2e-edits SOCK splice     BF16 (NEOX, base) and FP8 (GPT-J, explicit
 *        frequency table): splices inside and at blocks, crossing blocks,
 *        at slot 0 and at the end, a fork spliced without touching its
 *        parent; after each, every key read back equals the FP64 key at
 *        its (new) position within the dtype's bound, V is unchanged
 *        (BF16: bit for bit), new slots are written (FP8: the block whose
 *        slot 0 is new keeps its other tokens) and decode attention
 *        matches FP64 attention over the edited content; a sequence
 *        whose first blocks come from the prefix cache spliced and
 *        compacted (cached blocks copied first, the publisher untouched);
 *   e2e-edits SOCK compress   the needle: 32,768 tokens, a key the window's
 *        queries point at, scored and compressed to a budget of 2,048:
 *        the budget holds, sinks and window are kept, the needle survives
 *        (and decode still retrieves its value), positions are kept, the
 *        blocks go back to the ledger; compression when a sequence
 *        reaches its budget (max_tokens); kvl_compress_reclaim();
 *   e2e-edits SOCK bad        splice beyond the length, a layout without
 *        RoPE data asked to turn keys, unsorted/repeated compact lists, a
 *        budget below sinks + window, bad policies and RoPE data: each
 *        error, and the sequence unchanged (length, next position, keys,
 *        values, blocks held);
 *   e2e-edits SOCK tokens     edits and the prefix cache's token ids: a
 *        splice, a compaction (then a truncation to the gap) and an append
 *        that compresses end the run of known ids; only the blocks before
 *        the edit are published and matched, with their keys; a splice
 *        truncated back to the edit lets the run go on;
 *   e2e-edits SOCK tiers      (a tiers daemon) the relief list compresses
 *        before it swaps; a swapped sequence refuses edits (-EBUSY,
 *        unchanged); spliced, swapped out and in, then written: keys at
 *        their positions;
 *   e2e-edits SOCK pressure   (a tiers daemon, tenant pe with a top max of
 *        20 blocks) a pressured append compresses the sequence with a
 *        budget and swaps nothing; the next one swaps.
 * Exit 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlease.h"
#include "kvkern.h"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); return 1; } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static const char *sock_path;

static uint64_t rng = 0x243f6a8885a308d3ull;

static double unif(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (z >> 11) * 0x1p-53;
}

static float gauss(void)
{
	double s = unif() + unif() + unif() + unif();

	return (float)((s - 2.0) * 1.7320508075688772);
}

static int open_ctx(struct kvl_ctx **ctx)
{
	struct kvl_opts o;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	return kvl_open(&o, ctx);
}

/* ---- a model of one sequence: raw keys, values, positions ------------- */

struct model {
	struct kvl_ctx *ctx;
	struct kvl_seq *s;
	int lay;
	uint32_t layers, H, D, QH, dtype;
	uint32_t style, rd;
	float inv_freq[128];
	uint32_t T;		/* tokens per block */
	uint32_t len, cap;
	float *K, *V;		/* per slot [layers][H][D], raw keys */
	uint32_t *nq;		/* quantisations each slot's key went through */
};

static size_t mrow(const struct model *m)
{
	return (size_t)m->layers * m->H * m->D;
}

static const char *model_name;	/* declare layouts with this identity */

static int model_init(struct model *m, struct kvl_ctx *ctx, uint32_t dtype,
		      uint32_t layers, uint32_t H, uint32_t D, uint32_t group,
		      uint32_t style, int table)
{
	struct kvl_layout l = { .layers = layers, .kv_heads = H,
				.head_dim = D, .dtype = dtype,
				.rope_base = 10000 };
	struct kvl_rope r = { .style = style, .base = 10000 };
	uint32_t i;
	int lay;

	memset(m, 0, sizeof(*m));
	m->ctx = ctx;
	m->layers = layers;
	m->H = H;
	m->D = D;
	m->QH = H * group;
	m->dtype = dtype;
	m->style = style;
	m->rd = D;
	lay = model_name ? kvl_layout_declare_model(ctx, &l, model_name) :
			   kvl_layout_declare(ctx, &l);
	if (lay < 0)
		return lay;
	m->lay = lay;
	m->T = l.tokens_per_block;
	for (i = 0; i < D / 2; i++)
		m->inv_freq[i] = (float)pow(10000.0, -2.0 * i / D);
	if (table) {
		/* a stretched table, as context-extension schemes have */
		for (i = D / 4; i < D / 2; i++)
			m->inv_freq[i] /= 8;
		r.nfreq = D / 2;
		r.inv_freq = m->inv_freq;
	}
	if (style != KVL_ROPE_NONE) {
		int e = kvl_layout_set_rope(ctx, lay, &r);

		if (e)
			return e;
	}
	return kvl_seq_create(ctx, lay, &m->s);
}

static void model_free(struct model *m)
{
	kvl_seq_free(m->s);
	free(m->K);
	free(m->V);
	free(m->nq);
}

static int model_room(struct model *m, uint32_t n)
{
	if (n <= m->cap)
		return 0;
	m->cap = n * 2;
	m->K = realloc(m->K, sizeof(float) * mrow(m) * m->cap);
	m->V = realloc(m->V, sizeof(float) * mrow(m) * m->cap);
	m->nq = realloc(m->nq, sizeof(uint32_t) * m->cap);
	return m->K && m->V && m->nq ? 0 : -ENOMEM;
}

static void fresh(struct model *m, uint32_t slot)
{
	size_t i;

	for (i = 0; i < mrow(m); i++) {
		m->K[slot * mrow(m) + i] = gauss();
		m->V[slot * mrow(m) + i] = gauss();
	}
	m->nq[slot] = 1;
}

/* FP64 key of slot's raw key (layer, head) at position p. */
static void key64(const struct model *m, const float *raw, uint32_t p,
		  double *out)
{
	uint32_t half = m->rd / 2, i;

	for (i = 0; i < m->D; i++)
		out[i] = raw[i];
	for (i = 0; i < half; i++) {
		double th = (double)p * m->inv_freq[i];
		uint32_t a = m->style == KVL_ROPE_GPTJ ? 2 * i : i;
		uint32_t b = m->style == KVL_ROPE_GPTJ ? 2 * i + 1 : i + half;

		out[a] = raw[a] * cos(th) - raw[b] * sin(th);
		out[b] = raw[a] * sin(th) + raw[b] * cos(th);
	}
}

/* Write slots [s0, s0 + n): keys rotated at the library's positions. */
static int model_write(struct model *m, uint32_t s0, uint32_t n)
{
	size_t hd = (size_t)m->H * m->D;
	float *k = malloc(sizeof(float) * hd * n);
	float *v = malloc(sizeof(float) * hd * n);
	uint32_t *pos = malloc(sizeof(uint32_t) * n), layer, t, h, d;
	double row[256];
	int r;

	if (!k || !v || !pos)
		return -ENOMEM;
	r = kvl_seq_positions(m->s, s0, n, pos);
	for (layer = 0; layer < m->layers && !r; layer++) {
		for (t = 0; t < n; t++)
			for (h = 0; h < m->H; h++) {
				const float *raw = m->K + (s0 + t) * mrow(m) +
						   ((size_t)layer * m->H + h) *
						   m->D;

				key64(m, raw, pos[t], row);
				for (d = 0; d < m->D; d++)
					k[(t * m->H + h) * m->D + d] =
						(float)row[d];
				memcpy(v + (t * m->H + h) * m->D,
				       m->V + (s0 + t) * mrow(m) +
				       ((size_t)layer * m->H + h) * m->D,
				       sizeof(float) * m->D);
			}
		r = kvl_seq_write_kv(m->s, layer, s0, n, k, v);
	}
	free(k);
	free(v);
	free(pos);
	return r;
}

static int model_append(struct model *m, uint32_t n)
{
	uint32_t s0 = m->len, i;
	int r = model_room(m, m->len + n);

	if (r)
		return r;
	r = kvl_seq_append(m->s, n);
	if (r != (int)(s0 + n))
		return r < 0 ? r : -EPROTO;
	for (i = 0; i < n; i++)
		fresh(m, s0 + i);
	m->len += n;
	return model_write(m, s0, n);
}

/* The splice, the new slots' raw keys chosen but not written yet. */
static int model_splice_only(struct model *m, uint32_t at, uint32_t ndel,
			     uint32_t nins)
{
	uint32_t new_len = m->len - ndel + nins, i, tail = m->len - at - ndel;
	int r = model_room(m, new_len > m->len ? new_len : m->len);

	if (r)
		return r;
	r = kvl_seq_splice(m->s, at, ndel, nins);
	if (r != (int)new_len)
		return r < 0 ? r : -EPROTO;
	memmove(m->K + (at + nins) * mrow(m), m->K + (at + ndel) * mrow(m),
		sizeof(float) * mrow(m) * tail);
	memmove(m->V + (at + nins) * mrow(m), m->V + (at + ndel) * mrow(m),
		sizeof(float) * mrow(m) * tail);
	memmove(m->nq + at + nins, m->nq + at + ndel, 4 * tail);
	for (i = at + nins; i < new_len; i++)
		m->nq[i]++;
	for (i = 0; i < nins; i++)
		fresh(m, at + i);
	m->len = new_len;
	return 0;
}

static int model_splice(struct model *m, uint32_t at, uint32_t ndel,
			uint32_t nins)
{
	int r = model_splice_only(m, at, ndel, nins);

	return !r && nins ? model_write(m, at, nins) : r;
}

/* Appended with token ids (kvl_seq_append_tokens), written. */
static int model_append_tokens(struct model *m, const uint32_t *ids,
			       uint32_t n)
{
	uint32_t s0 = m->len, i;
	int r = model_room(m, m->len + n);

	if (r)
		return r;
	r = kvl_seq_append_tokens(m->s, ids, n);
	if (r != (int)(s0 + n))
		return r < 0 ? r : -EPROTO;
	for (i = 0; i < n; i++)
		fresh(m, s0 + i);
	m->len += n;
	return model_write(m, s0, n);
}

/* The model follows a compaction the library chose (compression): the
 * kept slots are told by their positions (slot = position before). */
static int model_follow_compact(struct model *m)
{
	uint32_t n = kvl_seq_len(m->s), i, *pos = malloc(4 * (n ? n : 1));

	if (!pos || kvl_seq_positions(m->s, 0, n, pos))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (pos[i] >= m->len || (i && pos[i] <= pos[i - 1]))
			return -EPROTO;
		memmove(m->K + i * mrow(m), m->K + pos[i] * mrow(m),
			sizeof(float) * mrow(m));
		memmove(m->V + i * mrow(m), m->V + pos[i] * mrow(m),
			sizeof(float) * mrow(m));
		m->nq[i] = m->nq[pos[i]] + 1;
	}
	m->len = n;
	free(pos);
	return 0;
}

/* Per-dtype bound of one quantisation, for a value of magnitude n. */
static double qerr(uint32_t dtype, double n, double amax)
{
	switch (dtype) {
	case KVL_DTYPE_BF16:
		return 0x1p-8 * n;
	case KVL_DTYPE_FP8:
		return 0x1p-4 * n + 0x1p-9 * amax / 448.0 * 2;
	case KVL_DTYPE_INT8:
		return amax / 127.0 * 2;
	default:
		return 0.5 * amax / 7.0 * 1.01;
	}
}

/* Keys vs FP64 at their positions, V vs what was written. */
static int model_check(const struct model *m, const char *what)
{
	size_t hd = (size_t)m->H * m->D;
	float *k = malloc(sizeof(float) * hd * (m->len ? m->len : 1));
	float *v = malloc(sizeof(float) * hd * (m->len ? m->len : 1));
	uint32_t *pos = malloc(sizeof(uint32_t) * (m->len ? m->len : 1));
	uint32_t layer, t, h, d;
	double row[256], worst = 0;

	if (!k || !v || !pos)
		FAIL("oom");
	CHECK(kvl_seq_len(m->s) == m->len, "%s: length %u != %u", what,
	      kvl_seq_len(m->s), m->len);
	CHECK(!kvl_seq_positions(m->s, 0, m->len, pos), "positions");
	for (layer = 0; layer < m->layers; layer++) {
		CHECK(!kvl_seq_read_kv(m->s, layer, 0, m->len, k, v), "read");
		for (t = 0; t < m->len; t++)
			for (h = 0; h < m->H; h++) {
				const float *raw = m->K + t * mrow(m) +
						   ((size_t)layer * m->H + h) *
						   m->D;
				const float *vr = m->V + t * mrow(m) +
						  ((size_t)layer * m->H + h) *
						  m->D;
				const float *kr = k + (t * m->H + h) * m->D;
				const float *vv = v + (t * m->H + h) * m->D;
				double amax = 0, vmax = 0;

				key64(m, raw, pos[t], row);
				for (d = 0; d < m->D; d++) {
					amax = fmax(amax, fabs(row[d]) * 1.5);
					vmax = fmax(vmax, fabs(vr[d]));
				}
				for (d = 0; d < m->D; d++) {
					double b = m->nq[t] * 2 *
						   qerr(m->dtype, fabs(row[d]) +
							fabs(row[d ^ 1]) +
							fabs(row[(d + m->D / 2) %
								 m->D]), amax) +
						   1e-5;
					double e = fabs(kr[d] - row[d]);

					worst = fmax(worst, e / b);
					CHECK(e <= b, "%s: slot %u pos %u layer %u "
					      "head %u dim %u: %g vs %g (nq %u)",
					      what, t, pos[t], layer, h, d, kr[d],
					      row[d], m->nq[t]);
					if (m->dtype == KVL_DTYPE_BF16)
						CHECK(vv[d] == kvk_bf16_to_f32(
						      kvk_f32_to_bf16(vr[d])),
						      "%s: V slot %u changed",
						      what, t);
					else
						CHECK(fabs(vv[d] - vr[d]) <=
						      2 * qerr(m->dtype, fabs(vr[d]),
							       vmax * 1.01) +
						      1e-6, "%s: V slot %u dim %u "
						      "%g vs %g", what, t, d, vv[d],
						      vr[d]);
				}
			}
	}
	printf("%s: %u slots, next position %u, keys within %.2f of the "
	       "bound\n", what, m->len, kvl_seq_next_pos(m->s), worst);
	free(k);
	free(v);
	free(pos);
	return 0;
}

/* Decode at every layer vs FP64 over the true content. */
static int model_attn(const struct model *m, double bound, const char *what)
{
	uint32_t QH = m->QH, D = m->D, G = QH / m->H, layer, h, t, d;
	float *q = malloc(sizeof(float) * QH * D);
	float *out = malloc(sizeof(float) * QH * D);
	double *sc = malloc(sizeof(double) * m->len), row[256], worst = 0;
	uint32_t *pos = malloc(sizeof(uint32_t) * m->len);
	double *k64 = malloc(sizeof(double) * m->len * D);

	if (!q || !out || !sc || !pos || !k64)
		FAIL("oom");
	kvl_seq_positions(m->s, 0, m->len, pos);
	for (layer = 0; layer < m->layers; layer++) {
		double e2 = 0, r2 = 0;

		for (t = 0; t < QH * D; t++)
			q[t] = gauss();
		CHECK(!kvl_seq_decode(&m->s, 1, layer, QH, q, 0, out), "decode");
		for (h = 0; h < QH; h++) {
			double mx = -INFINITY, sum = 0, o[256] = { 0 };

			for (t = 0; t < m->len; t++) {
				key64(m, m->K + t * mrow(m) + ((size_t)layer *
				      m->H + h / G) * D, pos[t], row);
				sc[t] = 0;
				for (d = 0; d < D; d++)
					sc[t] += q[h * D + d] * row[d];
				sc[t] /= sqrt(D);
				mx = fmax(mx, sc[t]);
			}
			for (t = 0; t < m->len; t++) {
				const float *vr = m->V + t * mrow(m) +
						  ((size_t)layer * m->H + h / G) *
						  D;
				double w = exp(sc[t] - mx);

				sum += w;
				for (d = 0; d < D; d++)
					o[d] += w * vr[d];
			}
			for (d = 0; d < D; d++) {
				double x = o[d] / sum;

				e2 += (out[h * D + d] - x) * (out[h * D + d] - x);
				r2 += x * x;
			}
		}
		worst = fmax(worst, sqrt(e2 / r2));
	}
	printf("%s: attention vs FP64 %.4f (bound %.2f)\n", what, worst, bound);
	CHECK(worst <= bound, "%s: attention %g > %g", what, worst, bound);
	free(q);
	free(out);
	free(sc);
	free(pos);
	free(k64);
	return 0;
}

/* ---- splice ------------------------------------------------------------ */

static int run_splice(uint32_t dtype, uint32_t style, int table, double bound)
{
	struct kvl_ctx *ctx;
	struct model m;
	const char *dt = dtype == KVL_DTYPE_BF16 ? "bf16" : "fp8";
	uint32_t T;
	int r;

	CHECK(!open_ctx(&ctx), "open");
	r = model_init(&m, ctx, dtype, 2, 2, 64, 2, style, table);
	CHECK(!r, "%s: init %d", dt, r);
	CHECK(!model_append(&m, 400), "append");
	{
		/* tokens per block of this layout in the daemon's blocks */
		uint64_t pt = 2ULL * 2 * 2 * 64 *
			      (dtype == KVL_DTYPE_BF16 ? 2 : 1);
		uint64_t fx = dtype == KVL_DTYPE_BF16 ? 0 : 2 * 2 * 2 * 4;
		struct kvl_status st;

		CHECK(!kvl_status(ctx, &st), "status");
		T = (uint32_t)((st.block_bytes - fx) / pt);
	}
	CHECK(!model_check(&m, dt), "check");
	CHECK(!model_splice(&m, 100, 37, 20), "splice inside");
	CHECK(!model_check(&m, "splice inside"), "check");
	/* at a block boundary, slot 0 of the block made new, tail after it */
	CHECK(!model_splice(&m, T, 0, 10), "splice at a block start");
	CHECK(!model_check(&m, "new slot 0, tail in the same block"), "check");
	CHECK(!model_splice(&m, T - 3, T + 9, 0), "delete across blocks");
	CHECK(!model_check(&m, "delete across blocks"), "check");
	CHECK(!model_splice(&m, 0, 5, 1), "at slot 0");
	CHECK(!model_splice(&m, m.len, 0, 7), "at the end");
	CHECK(!model_splice(&m, m.len - 9, 9, 0), "up to the end");
	CHECK(!model_check(&m, "ends"), "check");
	CHECK(!model_attn(&m, bound, dt), "attention");
	/* a fork: the child is spliced, the parent is not */
	{
		struct model c = m;
		struct kvl_seq *child;
		size_t bytes = sizeof(float) * mrow(&m) * m.len;

		CHECK(!kvl_seq_fork(m.s, &child), "fork");
		c.s = child;
		c.cap = 0;
		c.K = c.V = NULL;
		c.nq = NULL;
		CHECK(!model_room(&c, m.len + 40), "room");
		memcpy(c.K, m.K, bytes);
		memcpy(c.V, m.V, bytes);
		memcpy(c.nq, m.nq, 4 * m.len);
		CHECK(!model_splice(&c, 50, 3, 30), "splice the child");
		CHECK(!model_check(&c, "child"), "check");
		CHECK(!model_check(&m, "parent after the child's splice"),
		      "parent changed");
		model_free(&c);
	}
	model_free(&m);
	kvl_close(ctx);
	return 0;
}

/*
 * Edits of a sequence whose first blocks come from the prefix cache: the
 * cached blocks in the edited range are copied first (the cache and the
 * sequence that published them keep their contents), the ones before it
 * are only read.
 */
static int run_prefix(void)
{
	struct kvl_ctx *ctx;
	struct model a, b;
	uint32_t tok[400], i, keep[400], n = 0, T = 64, matched;
	int r;

	CHECK(!open_ctx(&ctx), "open");
	model_name = "e2e-edits-model";
	CHECK(!model_init(&a, ctx, KVL_DTYPE_BF16, 2, 2, 64, 2, KVL_ROPE_NEOX,
			  0), "init a");
	model_name = NULL;
	b = a;
	b.K = b.V = NULL;
	b.nq = NULL;
	b.cap = 0;
	CHECK(!kvl_seq_create(ctx, a.lay, &b.s), "create b");
	for (i = 0; i < 400; i++)
		tok[i] = 1000 + i;
	/* a: 4 full blocks with token ids, published */
	CHECK(!model_room(&a, 256), "room");
	r = kvl_seq_append_tokens(a.s, tok, 256);
	CHECK(r == 256, "append tokens: %d", r);
	for (i = 0; i < 256; i++)
		fresh(&a, i);
	a.len = 256;
	CHECK(!model_write(&a, 0, 256), "write a");
	r = kvl_seq_publish(a.s);
	CHECK(r == 4, "publish: %d", r);
	/* b: matches 3 blocks (keeps the last token to compute), grows */
	matched = (uint32_t)kvl_seq_match(b.s, tok, 256 - 1);
	CHECK(matched == 3 * T, "matched %d", (int)matched);
	CHECK(!model_room(&b, 400), "room");
	memcpy(b.K, a.K, sizeof(float) * mrow(&a) * matched);
	memcpy(b.V, a.V, sizeof(float) * mrow(&a) * matched);
	for (i = 0; i < matched; i++)
		b.nq[i] = 1;
	b.len = matched;
	CHECK(!model_check(&b, "matched prefix"), "check");
	CHECK(!model_append(&b, 100), "append b");
	/* splice inside the cached blocks: blocks 1.. are copied, block 0
	 * (cached, before the edit) is only read */
	CHECK(!model_splice(&b, 100, 10, 5), "splice b");
	CHECK(!model_check(&b, "b after a splice in cached blocks"), "check");
	CHECK(!model_check(&a, "a (published) after b's splice"), "check");
	/* compact from slot 10: block 0 is copied too */
	for (i = 0; i < b.len; i++)
		if (i < 10 || i % 3)
			keep[n++] = i;
	r = kvl_seq_compact(b.s, keep, n);
	CHECK(r == (int)n, "compact: %d", r);
	for (i = 0; i < n; i++) {
		memmove(b.K + i * mrow(&b), b.K + keep[i] * mrow(&b),
			sizeof(float) * mrow(&b));
		memmove(b.V + i * mrow(&b), b.V + keep[i] * mrow(&b),
			sizeof(float) * mrow(&b));
		b.nq[i] = b.nq[keep[i]] + 1;
	}
	b.len = n;
	CHECK(!model_check(&b, "b after a compaction"), "check");
	CHECK(!model_check(&a, "a after b's compaction"), "check");
	{
		const uint32_t *t;
		uint32_t nt, f;

		for (f = 0; f < n && keep[f] == f; f++)
			;
		kvl_seq_tokens(b.s, &t, &nt);
		CHECK(nt == f, "token ids known up to the first slot moved (%u), "
		      "not %u", f, nt);
	}
	model_free(&b);
	model_free(&a);
	kvl_close(ctx);
	return 0;
}

/* ---- edits and the prefix cache's token ids -------------------------------- */

static uint32_t ntok_known(const struct kvl_seq *s)
{
	const uint32_t *t;
	uint32_t n;

	kvl_seq_tokens(s, &t, &n);
	return n;
}

/* A new sequence b of a's layout matches ids: want tokens, and the keys
 * and values it got are a's slots [0, want) (a's model). */
static int match_check(struct model *a, const uint32_t *ids, uint32_t n,
		       uint32_t want, const char *what)
{
	struct model b = *a;
	uint32_t i;
	int r;

	b.K = b.V = NULL;
	b.nq = NULL;
	b.cap = b.len = 0;
	CHECK(!kvl_seq_create(a->ctx, a->lay, &b.s), "create");
	r = kvl_seq_match(b.s, ids, n);
	CHECK(r == (int)want, "%s: matched %d tokens, want %u", what, r, want);
	if (want) {
		CHECK(!model_room(&b, want), "room");
		memcpy(b.K, a->K, sizeof(float) * mrow(a) * want);
		memcpy(b.V, a->V, sizeof(float) * mrow(a) * want);
		for (i = 0; i < want; i++)
			b.nq[i] = 1;
		b.len = want;
		CHECK(!model_check(&b, what), "%s: contents", what);
	}
	model_free(&b);
	return 0;
}

/*
 * An edit ends a sequence's run of known token ids at the first slot it
 * changed, and the run does not go on while the slots after it are not
 * the tokens at their own positions: such a sequence never publishes,
 * and nobody ever matches, blocks whose contents are not what their ids
 * say.  Four sequences, each with its own ids:
 *   a  splice inside block 1, then ids appended: block 0 only;
 *   c  compaction, truncated back to the first moved slot (the length is
 *      the number of ids known, but the next position is past a gap),
 *      then ids appended: block 0 only;
 *   d  an append with ids that compresses first (max_tokens): nothing;
 *   e  splice, truncated back to the edit (nothing after it moved): the
 *      run goes on, and what it publishes matches with the right keys.
 */
static int run_tokens(void)
{
	struct kvl_compress_policy cp = { .sinks = 4, .window = 16 };
	struct kvl_ctx *ctx;
	struct model a, c, d, e;
	static uint32_t tok[4][1024], ed[1024], keep[1024];
	uint32_t T, i, j, n;
	int r;

	CHECK(!open_ctx(&ctx), "open");
	model_name = "e2e-edits-tokens";
	CHECK(!model_init(&a, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_init(&c, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_init(&d, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_init(&e, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	model_name = NULL;
	T = a.T;
	CHECK(T >= 32 && 5 * T <= 1024, "tokens per block %u", T);
	for (j = 0; j < 4; j++)
		for (i = 0; i < 1024; i++)
			tok[j][i] = 100000 * (j + 1) + i;

	/* a: splice at T + 10 (delete 5): ids known up to the edit */
	CHECK(!model_append_tokens(&a, tok[0], 4 * T), "append a");
	CHECK(!model_splice(&a, T + 10, 5, 0), "splice a");
	CHECK(ntok_known(a.s) == T + 10, "a: %u ids known after a splice at "
	      "%u", ntok_known(a.s), T + 10);
	CHECK(!model_append_tokens(&a, tok[0] + 4 * T, T), "append a");
	CHECK(ntok_known(a.s) == T + 10, "a: ids recorded after an edit (%u)",
	      ntok_known(a.s));
	r = kvl_seq_publish(a.s);
	CHECK(r == 1, "a: published %d blocks, want block 0 only", r);
	/* what a holds, in order, and the ids as first written */
	for (i = n = 0; i < 5 * T; i++)
		if (i < T + 10 || i >= T + 15)
			ed[n++] = tok[0][i];
	if (match_check(&a, ed, n, T, "a's ids as edited") ||
	    match_check(&a, tok[0], 5 * T, T, "a's ids as first written"))
		return 1;
	printf("splice: ids end at the edit; block 0 published, matched\n");

	/* c: compaction from T + 3, truncated to T + 3 */
	CHECK(!model_append_tokens(&c, tok[1], 3 * T), "append c");
	for (i = n = 0; i < 3 * T; i++)
		if (i < T + 3 || i >= T + 8)
			keep[n++] = i;
	r = kvl_seq_compact(c.s, keep, n);
	CHECK(r == (int)n, "compact c: %d", r);
	for (i = 0; i < n; i++) {
		memmove(c.K + i * mrow(&c), c.K + keep[i] * mrow(&c),
			sizeof(float) * mrow(&c));
		memmove(c.V + i * mrow(&c), c.V + keep[i] * mrow(&c),
			sizeof(float) * mrow(&c));
		c.nq[i] = c.nq[keep[i]] + 1;
	}
	c.len = n;
	CHECK(ntok_known(c.s) == T + 3, "c: %u ids known", ntok_known(c.s));
	CHECK(!kvl_seq_truncate(c.s, T + 3), "truncate c");
	c.len = T + 3;
	CHECK(kvl_seq_next_pos(c.s) == T + 8, "c: next position %u",
	      kvl_seq_next_pos(c.s));
	CHECK(!model_append_tokens(&c, tok[1] + T + 3, 2 * T), "append c");
	CHECK(ntok_known(c.s) == T + 3, "c: ids recorded past a gap (%u known, "
	      "positions from %u)", ntok_known(c.s), T + 8);
	CHECK(!model_check(&c, "c"), "c");
	r = kvl_seq_publish(c.s);
	CHECK(r == 1, "c: published %d blocks, want block 0 only", r);
	if (match_check(&c, tok[1], 3 * T + 3, T, "c's ids"))
		return 1;
	printf("compaction: no ids past the gap; block 0 published, matched\n");

	/* d: max_tokens 2T: the append of 8 more compresses first */
	cp.max_tokens = 2 * T;
	cp.budget = T;
	CHECK(!kvl_seq_set_compress(d.s, &cp), "policy d");
	CHECK(!model_append_tokens(&d, tok[2], 2 * T), "append d");
	CHECK(ntok_known(d.s) == 2 * T, "d: %u ids", ntok_known(d.s));
	r = kvl_seq_append_tokens(d.s, tok[2] + 2 * T, 8);
	CHECK(r == (int)(T + 8), "append d: length %d, want the budget %u "
	      "+ 8", r, T);
	CHECK(ntok_known(d.s) <= cp.sinks, "d: %u ids known after an append "
	      "that compressed (length %d)", ntok_known(d.s), r);
	r = kvl_seq_publish(d.s);
	CHECK(r == 0, "d: published %d blocks after compression", r);
	CHECK(match_check(&d, tok[2], 2 * T + 8, 0, "d's ids") == 0, "d");
	printf("compressing append: ids end at the first dropped slot; "
	       "nothing published\n");

	/* e: splice at 2T + 5, truncated to 2T + 5: the run goes on */
	CHECK(!model_append_tokens(&e, tok[3], 3 * T), "append e");
	CHECK(!model_splice(&e, 2 * T + 5, 3, 0), "splice e");
	CHECK(!kvl_seq_truncate(e.s, 2 * T + 5), "truncate e");
	e.len = 2 * T + 5;
	CHECK(!model_append_tokens(&e, tok[3] + 2 * T + 5, T), "append e");
	CHECK(ntok_known(e.s) == 3 * T + 5, "e: %u ids known",
	      ntok_known(e.s));
	r = kvl_seq_publish(e.s);
	CHECK(r == 3, "e: published %d blocks, want 3", r);
	if (match_check(&e, tok[3], 3 * T + 5, 3 * T, "e's ids"))
		return 1;
	printf("truncated back to the edit: ids go on; 3 blocks published, "
	       "matched with their keys\n");

	model_free(&a);
	model_free(&c);
	model_free(&d);
	model_free(&e);
	kvl_close(ctx);
	return 0;
}

/* ---- compression --------------------------------------------------------- */

static int run_needle(void)
{
	const uint32_t N = 32768, budget = 2048, sinks = 4, win = 64, nq = 16;
	struct kvl_compress_policy cp = { .sinks = sinks, .window = win,
					  .budget = budget };
	struct kvl_ctx *ctx;
	struct kvl_status st;
	struct model m;
	uint32_t needle, p, i, *pos, found = 0, G, held0;
	float *q, *out, vstar[64];
	double u[64], row[256];

	CHECK(!open_ctx(&ctx), "open");
	/* 1 layer, 1 kv head, head_dim 64, GQA 4, BF16 */
	CHECK(!model_init(&m, ctx, KVL_DTYPE_BF16, 1, 1, 64, 4,
			  KVL_ROPE_NEOX, 0), "init");
	G = m.QH;
	CHECK(!model_room(&m, N), "room");
	CHECK(kvl_seq_append(m.s, N) == (int)N, "append");
	needle = 1000 + (uint32_t)(unif() * (N - 3000));
	for (i = 0; i < N; i++)
		fresh(&m, i);
	/* the needle: raw key 15 u (|u| about 1), value +-4 */
	for (i = 0; i < 64; i++) {
		u[i] = gauss() / 8.0;
		m.K[needle * mrow(&m) + i] = (float)(15 * u[i]);
		vstar[i] = m.V[needle * mrow(&m) + i] = unif() < 0.5 ? -4 : 4;
	}
	m.len = N;
	CHECK(!model_write(&m, 0, N), "write");
	kvl_status(ctx, &st);
	held0 = st.held;
	/* window queries: 8 u rotated to the needle's position, + noise */
	q = malloc(sizeof(float) * nq * G * 64);
	out = malloc(sizeof(float) * N);
	pos = malloc(sizeof(uint32_t) * N);
	key64(&m, m.K + needle * mrow(&m), needle, row);
	for (i = 0; i < nq * G * 64; i++)
		q[i] = (float)(row[i % 64] * 8.0 / 15.0 + 0.3 * gauss());
	CHECK(!kvl_seq_score(m.s, 0, G, nq, q, 0, KVL_SCORE_CAUSAL |
			     KVL_SCORE_RESET, out), "score");
	for (i = p = 0; i < N; i++)
		if (out[i] > out[p])
			p = i;
	CHECK(p == needle, "the needle (slot %u) scores highest, not %u",
	      needle, p);
	CHECK(!kvl_seq_set_compress(m.s, &cp), "policy");
	CHECK(kvl_seq_compress(m.s, 0) == (int)budget, "compress");
	CHECK(kvl_seq_len(m.s) == budget, "budget respected");
	CHECK(kvl_seq_next_pos(m.s) == N, "next position kept");
	CHECK(!kvl_seq_positions(m.s, 0, budget, pos), "positions");
	for (i = 0; i < sinks; i++)
		CHECK(pos[i] == i, "sink %u kept", i);
	for (i = 0; i < win; i++)
		CHECK(pos[budget - win + i] == N - win + i, "window kept");
	for (i = 1; i < budget; i++)
		CHECK(pos[i] > pos[i - 1], "order kept");
	for (i = 0; i < budget; i++)
		found += pos[i] == needle;
	CHECK(found == 1, "the needle survived");
	/* the blocks: the sequence holds 8, the cache at most 2 * batch */
	kvl_status(ctx, &st);
	printf("compress: %u -> %u slots, blocks held %u -> %u\n", N, budget,
	       held0, st.held);
	CHECK(st.held <= budget / 256 + 2 * 16, "blocks held %u", st.held);
	kvl_trim(ctx);
	kvl_status(ctx, &st);
	CHECK(st.held == budget / 256, "after trim: %u held", st.held);
	/* decode with a query at the needle still finds its value */
	for (i = 0; i < G * 64; i++)
		q[i] = (float)(row[i % 64] * 8.0 / 15.0);
	CHECK(!kvl_seq_decode(&m.s, 1, 0, G, q, 0, out), "decode");
	{
		double e = 0, n = 0;

		for (i = 0; i < 64; i++) {
			e += (out[i] - vstar[i]) * (out[i] - vstar[i]);
			n += vstar[i] * vstar[i];
		}
		printf("needle after compression: ||out - v*|| / ||v*|| = "
		       "%.4f\n", sqrt(e / n));
		CHECK(sqrt(e / n) < 0.05, "needle value retrieved");
	}
	free(q);
	free(out);
	free(pos);
	model_free(&m);
	kvl_close(ctx);
	return 0;
}

/* A sequence that reaches its budget compresses before it grows. */
static int run_auto(void)
{
	struct kvl_compress_policy cp = { .sinks = 4, .window = 32,
					  .budget = 200, .max_tokens = 256 };
	struct kvl_ctx *ctx;
	struct model m;
	uint32_t i, pos[4], total = 0;
	int r;

	CHECK(!open_ctx(&ctx), "open");
	CHECK(!model_init(&m, ctx, KVL_DTYPE_INT8, 1, 2, 32, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!kvl_seq_set_compress(m.s, &cp), "policy");
	CHECK(!model_room(&m, 4096), "room");
	for (i = 0; i < 40; i++) {
		uint32_t first;

		r = kvl_seq_append(m.s, 16);
		CHECK(r > 0 && r <= 256, "append: %d", r);
		total += 16;
		first = (uint32_t)r - 16;
		/* the model follows: what compaction kept is unknown here,
		 * so only the new slots are written and checked */
		m.len = (uint32_t)r;
		for (uint32_t t = first; t < m.len; t++)
			fresh(&m, t);
		CHECK(!model_write(&m, first, 16), "write");
		CHECK(!kvl_seq_positions(m.s, 0, 4, pos), "positions");
		CHECK(pos[0] == 0 && pos[3] == 3, "sinks kept");
		CHECK(kvl_seq_next_pos(m.s) == total, "next position");
	}
	CHECK(!kvl_seq_positions(m.s, kvl_seq_len(m.s) - 1, 1, pos) &&
	      pos[0] == total - 1, "the newest slot");
	printf("auto compression: %u tokens appended, length %u\n", total,
	       kvl_seq_len(m.s));
	model_free(&m);
	kvl_close(ctx);
	return 0;
}

/* The pressure hook: the longest sequence with a policy gives first. */
static int run_reclaim(void)
{
	struct kvl_compress_policy cp = { .sinks = 4, .window = 16,
					  .budget = 100 };
	struct kvl_ctx *ctx;
	struct model a, b;
	int r;

	CHECK(!open_ctx(&ctx), "open");
	CHECK(!model_init(&a, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_init(&b, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_append(&a, 640) && !model_append(&b, 300), "append");
	kvl_trim(ctx);
	CHECK(!kvl_seq_set_compress(a.s, &cp) && !kvl_seq_set_compress(b.s, &cp),
	      "policy");
	r = kvl_compress_reclaim(ctx, 3);
	printf("reclaim: %d blocks back in the cache\n", r);
	CHECK(r >= 3, "reclaim gave %d", r);
	CHECK(kvl_seq_len(a.s) == 100 && kvl_seq_len(b.s) == 300,
	      "the longest first (%u, %u)", kvl_seq_len(a.s),
	      kvl_seq_len(b.s));
	r = kvl_compress_reclaim(ctx, 0);
	CHECK(r >= 0 && kvl_seq_len(b.s) == 100, "all policies: %d", r);
	model_free(&a);
	model_free(&b);
	kvl_close(ctx);
	return 0;
}

/*
 * Under a tiers daemon and the swap policy: the relief list compresses a
 * sequence that opted in (a budget) before it swaps anything; a swapped
 * sequence is not edited (-EBUSY, unchanged) until swapped in; an edited
 * sequence swapped out and in keeps its keys, and the slots a splice made
 * are written next to moved tokens afterwards (FP8: the block whose slot
 * 0 is new keeps its other tokens).
 */
static int run_tiers(void)
{
	struct kvl_compress_policy cp = { .sinks = 4, .window = 16,
					  .budget = 128 };
	struct kvl_policy_stats ps;
	struct kvl_seq_info si;
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	struct model a, b;
	uint32_t keep[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.policy = KVL_POLICY_SWAP;
	CHECK(!kvl_open(&o, &ctx), "open");
	CHECK(!model_init(&b, ctx, KVL_DTYPE_FP8, 2, 2, 64, 1, KVL_ROPE_GPTJ,
			  1), "init b");
	CHECK(!model_init(&a, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init a");
	CHECK(!model_append(&b, 300), "append b");	/* b: used first */
	CHECK(!model_append(&a, 640), "append a");
	CHECK(!kvl_seq_set_compress(a.s, &cp), "policy");
	kvl_trim(ctx);

	/* compress before swap */
	r = kvl_reclaim(ctx, 1);
	kvl_seq_info(b.s, &si);
	kvl_policy_stats(ctx, &ps);
	CHECK(r >= 1 && kvl_seq_len(a.s) == cp.budget &&
	      si.state == KVL_SEQ_RESIDENT, "reclaim 1: gave %d, a's length "
	      "%u (budget %u), b's state %u: compression must come first", r,
	      kvl_seq_len(a.s), cp.budget, si.state);
	CHECK(ps.compressions == 1 && ps.compressed_blocks >= 1 &&
	      !ps.swaps_out && !ps.drops, "stats: %llu compressions (%llu "
	      "blocks), %llu swaps, %llu drops",
	      (unsigned long long)ps.compressions,
	      (unsigned long long)ps.compressed_blocks,
	      (unsigned long long)ps.swaps_out, (unsigned long long)ps.drops);
	CHECK(!model_follow_compact(&a), "follow");
	CHECK(!model_check(&a, "a after compression by the relief list"),
	      "a");
	printf("reclaim 1: a compressed to %u tokens (%d blocks), b "
	       "resident\n", cp.budget, r);
	/* nothing left to compress: the next step swaps b */
	r = kvl_reclaim(ctx, 1);
	kvl_seq_info(b.s, &si);
	kvl_policy_stats(ctx, &ps);
	CHECK(r >= 1 && si.state == KVL_SEQ_SWAPPED && ps.compressions == 1 &&
	      ps.swaps_out == 1, "reclaim 1 again: gave %d, b's state %u, %llu "
	      "compressions, %llu swaps", r, si.state,
	      (unsigned long long)ps.compressions,
	      (unsigned long long)ps.swaps_out);
	printf("reclaim 1 again: b swapped out to tier %u\n", si.tier);

	/* swapped: no edits */
	CHECK(kvl_seq_splice(b.s, 10, 2, 0) == -EBUSY, "splice of a swapped "
	      "sequence");
	CHECK(kvl_seq_compact(b.s, keep, 8) == -EBUSY, "compact of a swapped "
	      "sequence");
	CHECK(kvl_seq_compress(b.s, 64) == -EBUSY, "compress of a swapped "
	      "sequence");
	kvl_seq_info(b.s, &si);
	CHECK(si.state == KVL_SEQ_SWAPPED && si.len == 300 &&
	      kvl_seq_next_pos(b.s) == 300, "the swapped sequence changed "
	      "(state %u, len %u)", si.state, si.len);
	printf("swapped: splice, compact, compress refused (-EBUSY), "
	       "unchanged\n");

	/* in again: a splice making room at a block's slot 0, out and in,
	 * then the new slots written */
	CHECK(!kvl_seq_swap_in(b.s, KVL_POLICY_DEFAULT), "swap in");
	CHECK(!model_check(&b, "b after a round trip"), "b");
	CHECK(!model_splice_only(&b, b.T, 0, 5), "splice b");
	CHECK(!kvl_seq_swap_out(b.s, -1), "swap out b");
	CHECK(!kvl_seq_swap_in(b.s, KVL_POLICY_DEFAULT), "swap in b");
	CHECK(!model_write(&b, b.T, 5), "write b");
	CHECK(!model_check(&b, "b: spliced, swapped out and in, written"), "b");
	printf("spliced, swapped out and in, new slots written: keys at "
	       "their positions\n");
	model_free(&a);
	model_free(&b);
	kvl_close(ctx);
	return 0;
}

/*
 * A pressured append (tenant "pe" at its max of 20 top blocks, the swap
 * policy): the relief list compresses the sequence with a budget first
 * and the append gets its blocks with nothing swapped; the next one, with
 * nothing left to compress, swaps the least recently used sequence.
 */
static int run_pressure(void)
{
	struct kvl_compress_policy cp = { .sinks = 4, .window = 16,
					  .budget = 128 };
	struct kvl_policy_stats ps;
	struct kvl_seq_info si;
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	struct model a, b, c;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = "pe";
	o.policy = KVL_POLICY_SWAP;
	o.lease_batch = 1;
	CHECK(!kvl_open(&o, &ctx), "open as tenant pe");
	CHECK(!model_init(&b, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(b.T == 64, "tokens per block %u (the sizes below assume 64)",
	      b.T);
	CHECK(!model_init(&a, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_init(&c, ctx, KVL_DTYPE_BF16, 2, 2, 64, 1, KVL_ROPE_NEOX,
			  0), "init");
	CHECK(!model_append(&b, 5 * 64), "append b");	/* 5 blocks */
	CHECK(!model_append(&a, 10 * 64), "append a");	/* 10 blocks */
	CHECK(!kvl_seq_set_compress(a.s, &cp), "policy");
	/* 15 of 20 held: 8 more make the lease hit the tenant's max */
	r = model_append(&c, 8 * 64);
	kvl_seq_info(b.s, &si);
	kvl_policy_stats(ctx, &ps);
	CHECK(!r && kvl_seq_len(a.s) == cp.budget &&
	      si.state == KVL_SEQ_RESIDENT && ps.compressions == 1 &&
	      !ps.swaps_out && !ps.drops, "pressured append: %d, a's length "
	      "%u, b's state %u, %llu compressions, %llu swaps, %llu drops",
	      r, kvl_seq_len(a.s), si.state,
	      (unsigned long long)ps.compressions,
	      (unsigned long long)ps.swaps_out, (unsigned long long)ps.drops);
	CHECK(!model_follow_compact(&a), "follow");
	CHECK(!model_check(&a, "a compressed under pressure"), "a");
	CHECK(!model_check(&c, "c"), "c");
	printf("pressured append of 8 blocks: a compressed (%llu blocks back), "
	       "nothing swapped\n", (unsigned long long)ps.compressed_blocks);
	/* nothing left to compress: 8 more swap b, the least recently used */
	CHECK(!model_check(&a, "a"), "a");	/* a used after b */
	r = model_append(&c, 8 * 64);
	kvl_seq_info(b.s, &si);
	kvl_policy_stats(ctx, &ps);
	CHECK(!r && si.state == KVL_SEQ_SWAPPED && ps.compressions == 1 &&
	      ps.swaps_out == 1, "second pressured append: %d, b's state %u, "
	      "%llu compressions, %llu swaps", r, si.state,
	      (unsigned long long)ps.compressions,
	      (unsigned long long)ps.swaps_out);
	CHECK(!model_check(&c, "c after the second append"), "c");
	CHECK(!model_check(&b, "b swapped back in"), "b");
	printf("second pressured append: b swapped out (then back for a "
	       "read)\n");
	model_free(&a);
	model_free(&b);
	model_free(&c);
	kvl_close(ctx);
	return 0;
}

/* ---- bad input ----------------------------------------------------------- */

struct snap {
	uint32_t len, next, held, nb;
	float *k, *v;
};

static int snap_take(struct model *m, struct snap *s)
{
	struct kvl_status st;
	const uint32_t *tb;
	size_t n = (size_t)m->H * m->D * m->len;

	s->len = kvl_seq_len(m->s);
	s->next = kvl_seq_next_pos(m->s);
	kvl_seq_block_table(m->s, &tb, &s->nb);
	kvl_status(m->ctx, &st);
	s->held = st.held;
	s->k = malloc(sizeof(float) * n);
	s->v = malloc(sizeof(float) * n);
	return kvl_seq_read_kv(m->s, 0, 0, m->len, s->k, s->v);
}

static int snap_same(struct model *m, const struct snap *s, const char *what)
{
	struct snap now;
	size_t n = (size_t)m->H * m->D * m->len;

	CHECK(!snap_take(m, &now), "read");
	CHECK(now.len == s->len && now.next == s->next && now.nb == s->nb &&
	      now.held == s->held, "%s: the sequence changed (len %u->%u, "
	      "next %u->%u, blocks %u->%u, held %u->%u)", what, s->len,
	      now.len, s->next, now.next, s->nb, now.nb, s->held, now.held);
	CHECK(!memcmp(now.k, s->k, sizeof(float) * n) &&
	      !memcmp(now.v, s->v, sizeof(float) * n), "%s: contents changed",
	      what);
	free(now.k);
	free(now.v);
	return 0;
}

static int run_bad(void)
{
	struct kvl_compress_policy cp = { .sinks = 8, .window = 8,
					  .budget = 10 };
	struct kvl_rope rope = { .style = KVL_ROPE_NEOX, .base = 10000 };
	struct kvl_ctx *ctx;
	struct model m, nr, *cur = &m;
	struct snap s;
	uint32_t keep[4] = { 1, 5, 5, 9 }, pos;
	float f[64];
	int r;

	memset(f, 0, sizeof(f));
	CHECK(!open_ctx(&ctx), "open");
	CHECK(!model_init(&m, ctx, KVL_DTYPE_FP8, 2, 1, 64, 1, KVL_ROPE_GPTJ,
			  1), "init");
	CHECK(!model_append(&m, 150), "append");
	CHECK(!snap_take(cur, &s), "snapshot");
#define BAD(expr, want, what) do { \
		r = (expr); \
		CHECK(r == (want), "%s: %d, want %d", what, r, want); \
		if (snap_same(cur, &s, what)) \
			return 1; \
		printf("%s: %s, sequence unchanged\n", what, strerror(-r)); \
	} while (0)
	BAD(kvl_seq_splice(m.s, 140, 11, 0), -ERANGE, "splice beyond the length");
	BAD(kvl_seq_splice(m.s, 151, 0, 1), -ERANGE, "splice past the end");
	BAD(kvl_seq_compact(m.s, keep, 4), -EINVAL, "compact: repeated slot");
	keep[2] = 3;
	BAD(kvl_seq_compact(m.s, keep, 4), -EINVAL, "compact: unsorted");
	keep[2] = 7;
	keep[3] = 150;
	BAD(kvl_seq_compact(m.s, keep, 4), -EINVAL, "compact: past the length");
	/* no policy: sinks 4 and window 32 */
	BAD(kvl_seq_compress(m.s, 30), -EINVAL, "budget below sinks + window");
	BAD(kvl_seq_compress(m.s, 0), -EINVAL, "no budget and no policy");
	BAD(kvl_seq_set_compress(m.s, &cp), -EINVAL, "policy: sinks + window "
	    "> budget");
	BAD(kvl_seq_positions(m.s, 145, 6, &pos), -ERANGE, "positions past "
	    "the end");
	BAD(kvl_seq_score(m.s, 0, 1, 0, f, 0, 0, NULL), -EINVAL, "score: no "
	    "query");
	BAD(kvl_seq_score(m.s, 5, 1, 1, f, 0, 0, NULL), -EINVAL, "score: no "
	    "such layer");
	BAD(kvl_seq_score(m.s, 0, 1, 1, f, 0, 8, NULL), -EINVAL, "score: "
	    "unknown flag");
	rope.rotary_dims = 63;
	BAD(kvl_layout_set_rope(ctx, m.lay, &rope), -EINVAL, "rope: odd "
	    "rotary dims");
	rope.rotary_dims = 0;
	rope.nfreq = 5;
	rope.inv_freq = f;
	BAD(kvl_layout_set_rope(ctx, m.lay, &rope), -EINVAL, "rope: table of "
	    "the wrong size");
	rope.nfreq = 0;
	rope.style = 7;
	BAD(kvl_layout_set_rope(ctx, m.lay, &rope), -EINVAL, "rope: unknown "
	    "style");
	/* the RoPE data the layout had is still used: a splice works */
	r = kvl_seq_splice(m.s, 10, 1, 0);
	CHECK(r == 149, "splice after refused RoPE data: %d", r);
	free(s.k);
	free(s.v);
	/* a layout without RoPE data cannot turn keys */
	CHECK(!model_init(&nr, ctx, KVL_DTYPE_BF16, 1, 1, 64, 1, KVL_ROPE_NONE,
			  0), "init");
	CHECK(!model_append(&nr, 70), "append");
	cur = &nr;
	CHECK(!snap_take(cur, &s), "snapshot");
	BAD(kvl_seq_splice(nr.s, 10, 1, 0), -ENODATA, "splice without RoPE "
	    "data");
	BAD(kvl_seq_splice(nr.s, 0, 0, 3), -ENODATA, "insert without RoPE "
	    "data");
	free(s.k);
	free(s.v);
	/* turning nothing needs no RoPE data */
	r = kvl_seq_splice(nr.s, 10, 2, 2);
	CHECK(r == 70, "a same-size replacement: %d", r);
	r = kvl_seq_splice(nr.s, 60, 10, 0);
	CHECK(r == 60, "deleting the end: %d", r);
	model_free(&nr);
	model_free(&m);
	kvl_close(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s SOCK splice|compress|bad|tokens|"
			"tiers|pressure\n",
			argv[0]);
		return 2;
	}
	sock_path = argv[1];
	if (!strcmp(argv[2], "splice"))
		return run_splice(KVL_DTYPE_BF16, KVL_ROPE_NEOX, 0, 0.01) ||
		       run_splice(KVL_DTYPE_FP8, KVL_ROPE_GPTJ, 1, 0.08) ||
		       run_prefix();
	if (!strcmp(argv[2], "compress"))
		return run_needle() || run_auto() || run_reclaim();
	if (!strcmp(argv[2], "bad"))
		return run_bad();
	if (!strcmp(argv[2], "tokens"))
		return run_tokens();
	if (!strcmp(argv[2], "tiers"))
		return run_tiers();
	if (!strcmp(argv[2], "pressure"))
		return run_pressure();
	fprintf(stderr, "unknown command %s\n", argv[2]);
	return 2;
}
