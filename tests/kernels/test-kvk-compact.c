// SPDX-License-Identifier: MIT
/*
 * test-kvk-compact.c - kvk_compact() and kvk_score(), every dtype:
 *  - compaction keeps the listed slots in order (random halves, every
 *    T-th, a prefix, all, one, none), keys and V as before (BF16/INT4
 *    bytes unchanged, FP8/INT8 codes where the scale is the same, else
 *    within half a step of the new scale), positions unchanged, the slots
 *    past the kept ones zero, decode attention over the kept slots within
 *    the dtype's bound of FP64; a splice after a compaction closes the
 *    gaps it left;
 *  - score: sum and max of the softmax weights over window queries and
 *    query heads, causal or not, against an FP64 reference on the
 *    dequantised cache (relative 1e-5); a planted key that the window
 *    queries point at scores highest and survives a compaction to a tenth
 *    of the slots;
 *  - bad input: unsorted or repeated keep lists, entries past the length,
 *    a table too short, a block beyond the pool or named twice, bad score
 *    arguments: the error, and the pool unchanged.
 */
#include "kvk_edit_test.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static struct kvk_cpu *g_cpu;

/* Compact the model and the pool with keep[0..nkeep), check the op. */
static void do_compact(struct es *e, const uint32_t *keep, uint32_t nkeep,
		       const char *what)
{
	uint32_t T = e->l.tokens_per_block, dt = e->l.dtype, layer, i, h, d;
	size_t hd = (size_t)e->H * e->D, on = e->len ? e->len : 1;
	float *k0 = malloc(sizeof(float) * hd * on * e->layers);
	float *v0 = malloc(sizeof(float) * hd * on * e->layers);
	uint8_t *vb0 = malloc((size_t)e->l.row_bytes * e->H * on * e->layers);
	uint8_t *gs0 = malloc((size_t)e->D / 16 * e->H * on * e->layers + 1);
	float *vs0 = malloc(sizeof(float) * e->H * on * e->layers);
	float *k = malloc(sizeof(float) * hd * on);
	float *v = malloc(sizeof(float) * hd * on);
	struct kvk_compact_args a;
	uint32_t *tok = malloc(4 * on), *pos = malloc(4 * on);
	uint32_t *nq = malloc(4 * on);
	int r;

	if (!k0 || !v0 || !vb0 || !gs0 || !vs0 || !k || !v || !tok || !pos ||
	    !nq)
		abort();
	for (layer = 0; layer < e->layers; layer++) {
		es_read(e, layer, 0, k0 + layer * hd * on);
		es_read(e, layer, 1, v0 + layer * hd * on);
		for (i = 0; i < e->len; i++)
			for (h = 0; h < e->H; h++) {
				size_t x = ((size_t)layer * on + i) * e->H + h;
				const uint8_t *gs;

				memcpy(vb0 + x * e->l.row_bytes,
				       es_rowp(e, i, layer, 1, h, &gs),
				       e->l.row_bytes);
				if (dt == KVK_INT4)
					memcpy(gs0 + x * (e->D / 16), gs,
					       e->D / 16);
				vs0[x] = (dt == KVK_FP8 || dt == KVK_INT8) ?
					 es_scale(e, i, layer, 1, h) : 0;
			}
	}
	memset(&a, 0, sizeof(a));
	a.layout = &e->l;
	a.pool_base = e->pool;
	a.block_table = e->table;
	a.nblocks = e->nb;
	a.len = e->len;
	a.keep = keep;
	a.nkeep = nkeep;
	r = kvk_compact(&a, g_cpu);
	KT_CHECK(r == 0, "%s: compact = %d", what, r);
	for (i = 0; i < nkeep; i++) {
		tok[i] = e->tok[keep[i]];
		pos[i] = e->pos[keep[i]];
		nq[i] = e->nq[keep[i]] + 1;
	}
	memcpy(e->tok, tok, 4 * nkeep);
	memcpy(e->pos, pos, 4 * nkeep);
	memcpy(e->nq, nq, 4 * nkeep);
	e->len = nkeep;
	for (layer = 0; layer < e->layers; layer++) {
		es_read(e, layer, 0, k);
		es_read(e, layer, 1, v);
		for (i = 0; i < nkeep; i++)
			for (h = 0; h < e->H; h++) {
				size_t x = ((size_t)layer * on + keep[i]) *
					   e->H + h;
				const float *kr = k + (i * e->H + h) * e->D;
				const float *ko = k0 + layer * hd * on +
						  (keep[i] * e->H + h) * e->D;
				const float *vr = v + (i * e->H + h) * e->D;
				const float *vo = v0 + layer * hd * on +
						  (keep[i] * e->H + h) * e->D;
				const uint8_t *gs;
				const uint8_t *vrow = es_rowp(e, i, layer, 1, h,
							      &gs);
				float ksn, vsn;

				if (dt == KVK_BF16 || dt == KVK_INT4) {
					KT_CHECK(!memcmp(kr, ko, 4 * e->D),
						 "%s: K of slot %u changed",
						 what, keep[i]);
					KT_CHECK(!memcmp(vrow, vb0 + x *
							 e->l.row_bytes,
							 e->l.row_bytes) &&
						 (dt != KVK_INT4 ||
						  !memcmp(gs, gs0 + x * (e->D / 16),
							  e->D / 16)),
						 "%s: V bytes of slot %u changed",
						 what, keep[i]);
					continue;
				}
				ksn = es_scale(e, i, layer, 0, h);
				vsn = es_scale(e, i, layer, 1, h);
				for (d = 0; d < e->D; d++) {
					KT_CHECK(fabs(kr[d] - ko[d]) <=
						 es_qerr(dt, fabs(ko[d]), ksn,
							 0, 0) + 1e-7,
						 "%s: K slot %u dim %u", what,
						 keep[i], d);
					KT_CHECK(fabs(vr[d] - vo[d]) <=
						 es_qerr(dt, fabs(vo[d]), vsn,
							 0, 0) + 1e-7,
						 "%s: V slot %u dim %u", what,
						 keep[i], d);
				}
				if (vsn == vs0[x])
					KT_CHECK(!memcmp(vrow, vb0 + x *
							 e->l.row_bytes,
							 e->l.row_bytes),
						 "%s: V codes of slot %u at the "
						 "same scale", what, keep[i]);
			}
		/* slots past the kept ones in the last block read zero */
		if (nkeep % T && e->nb) {
			uint32_t *b = malloc(4 * T), *sl = malloc(4 * T), n = 0;
			float *z = malloc(sizeof(float) * hd * T);

			for (i = nkeep; i % T; i++, n++) {
				b[n] = e->table[nkeep / T];
				sl[n] = i % T;
			}
			kvk_read_kv(&e->l, e->pool, layer, n, b, sl, z, NULL);
			for (i = 0; i < n * hd; i++)
				KT_CHECK(z[i] == 0, "%s: slot past the end "
					 "not zero", what);
			free(b);
			free(sl);
			free(z);
		}
	}
	es_trim(e);
	KT_CHECK(e->nb == (nkeep + T - 1) / T, "fewest blocks");
	free(k0);
	free(v0);
	free(vb0);
	free(gs0);
	free(vs0);
	free(k);
	free(v);
	free(tok);
	free(pos);
	free(nq);
}

static void run_compact(uint32_t dtype, uint32_t tpb)
{
	struct es e;
	uint32_t keep[600], n, i, T = tpb;
	char what[64];
	double w;

	snprintf(what, sizeof(what), "%s T %u", kvk_dtype_name(dtype), tpb);
	KT_CHECK(es_init(&e, 2, 2, 64, dtype, tpb, 400, KVK_ROPE_NEOX, 0, 0) ==
		 0, "init");
	e.cpu = g_cpu;
	KT_CHECK(es_append(&e, 300) == 0, "append");
	/* a random half */
	for (i = n = 0; i < e.len; i++)
		if (kt_below(2))
			keep[n++] = i;
	do_compact(&e, keep, n, what);
	w = es_check_attn(&e, 2);
	KT_CHECK(w <= kt_quant_bound(dtype), "%s: attention %g", what, w);
	printf("%s: after a random half: attention %.4f (bound %.2f)\n", what,
	       w, kt_quant_bound(dtype));
	es_check_keys(&e, what);
	/* a splice closes one of the gaps */
	{
		uint32_t at = e.len / 2, p0 = e.pos[at];

		/* delete slot at: the tail moves to p0 */
		{
			struct kvk_splice_args a = {
				.layout = &e.l, .pool_base = e.pool,
				.block_table = e.table, .nblocks = e.nb,
				.len = e.len, .at = at, .ndel = 1,
				.delta = es_delta(&e, at, 1, 0),
			};
			uint32_t t;

			KT_CHECK(kvk_splice(&a, g_cpu) == 0, "splice");
			for (t = at; t + 1 < e.len; t++) {
				e.tok[t] = e.tok[t + 1];
				e.pos[t] = (uint32_t)(e.pos[t + 1] + a.delta);
				e.nq[t] = e.nq[t + 1] + 1;
			}
			for (t = at / T * T; t < at; t++)
				e.nq[t]++;
			e.len--;
			e.next_pos = (uint32_t)(e.next_pos + a.delta);
			es_trim(&e);
			KT_CHECK(e.pos[at] == p0, "the gap closed");
		}
		es_check_keys(&e, "splice after compact");
	}
	/* every T-th, then a prefix, then one, then all, then none */
	for (i = n = 0; i < e.len; i += T)
		keep[n++] = i;
	for (i = e.len - 3; i < e.len; i++)
		if (i > keep[n - 1])
			keep[n++] = i;
	do_compact(&e, keep, n, what);
	es_check_keys(&e, what);
	KT_CHECK(es_append(&e, 37) == 0, "append after compact");
	es_check_keys(&e, "append after compact");
	for (i = 0; i < e.len - 5; i++)
		keep[i] = i;
	do_compact(&e, keep, e.len - 5, what);
	for (i = 0; i < e.len; i++)
		keep[i] = i;
	do_compact(&e, keep, e.len, what);
	keep[0] = e.len / 2;
	do_compact(&e, keep, 1, what);
	es_check_keys(&e, what);
	w = es_check_attn(&e, 1);
	KT_CHECK(w <= kt_quant_bound(dtype), "%s: one left: %g", what, w);
	do_compact(&e, keep, 0, what);
	KT_CHECK(e.nb == 0, "no block left");
	es_free(&e);
}

/* FP64 score on the dequantised cache. */
static void ref_score(const struct es *e, uint32_t layer, uint32_t QH,
		      uint32_t nq, const float *q, uint32_t flags, double *ref)
{
	size_t hd = (size_t)e->H * e->D;
	float *k = malloc(sizeof(float) * hd * e->len);
	double *sc = malloc(sizeof(double) * e->len);
	uint32_t G = QH / e->H, i, h, j, d;

	es_read(e, layer, 0, k);
	for (j = 0; j < e->len; j++)
		ref[j] = 0;
	for (i = 0; i < nq; i++)
		for (h = 0; h < QH; h++) {
			const float *qr = q + ((size_t)i * QH + h) * e->D;
			uint32_t lim = (flags & KVK_SCORE_CAUSAL) ?
				       e->len - nq + i : e->len - 1;
			double m = -INFINITY, sum = 0;

			for (j = 0; j <= lim; j++) {
				double s = 0;

				for (d = 0; d < e->D; d++)
					s += (double)qr[d] *
					     k[(j * e->H + h / G) * e->D + d];
				sc[j] = s / sqrt(e->D);
				m = sc[j] > m ? sc[j] : m;
			}
			for (j = 0; j <= lim; j++)
				sum += exp(sc[j] - m);
			for (j = 0; j <= lim; j++) {
				double w = exp(sc[j] - m) / sum;

				if (flags & KVK_SCORE_MAX)
					ref[j] = w > ref[j] ? w : ref[j];
				else
					ref[j] += w;
			}
		}
	free(k);
	free(sc);
}

static void run_score(uint32_t dtype, uint32_t tpb, uint32_t len,
		      uint32_t group, uint32_t nq)
{
	struct es e;
	uint32_t QH, flags, j, layer = 1;
	float *q, *out;
	double *ref, worst = 0;

	KT_CHECK(es_init(&e, 2, 2, 64, dtype, tpb, len / tpb + 4,
			 KVK_ROPE_GPTJ, 0, 0) == 0, "init");
	e.cpu = g_cpu;
	KT_CHECK(es_append(&e, len) == 0, "append");
	QH = e.H * group;
	q = malloc(sizeof(float) * nq * QH * e.D);
	out = malloc(sizeof(float) * len);
	ref = malloc(sizeof(double) * len);
	for (j = 0; j < nq * QH * e.D; j++)
		q[j] = kt_gauss();
	for (flags = 0; flags <= KVK_SCORE_FLAGS; flags++) {
		struct kvk_score_args a = {
			.layout = &e.l, .pool_base = e.pool, .layer = layer,
			.q_heads = QH, .n_q = nq, .flags = flags, .q = q,
			.block_table = e.table, .nblocks = e.nb, .len = len,
			.scale = 1.0f / sqrtf((float)e.D), .out = out,
		};
		double mx = 0, tot = 0;

		KT_CHECK(kvk_score(&a, flags & 1 ? NULL : g_cpu) == 0, "score");
		ref_score(&e, layer, QH, nq, q, flags, ref);
		for (j = 0; j < len; j++) {
			mx = ref[j] > mx ? ref[j] : mx;
			tot += out[j];
		}
		for (j = 0; j < len; j++) {
			double err = fabs(out[j] - ref[j]) /
				     (ref[j] + 1e-3 * mx);

			worst = err > worst ? err : worst;
			KT_CHECK(err <= 1e-5, "%s flags %u slot %u: %g vs %g",
				 kvk_dtype_name(dtype), flags, j, out[j],
				 ref[j]);
			if (err > 1e-5)
				break;
		}
		if (!(flags & KVK_SCORE_MAX))
			KT_CHECK(fabs(tot - (double)nq * QH) < 1e-3 * nq * QH,
				 "weights sum to one per row: %g", tot);
	}
	printf("score %s len %u GQA %u window %u: worst relative %.2g\n",
	       kvk_dtype_name(dtype), len, group, nq, worst);
	free(q);
	free(out);
	free(ref);
	es_free(&e);
}

static const float *g_scores;

static int by_score(const void *pa, const void *pb)
{
	float a = g_scores[*(const uint32_t *)pa];
	float b = g_scores[*(const uint32_t *)pb];

	return a > b ? -1 : a < b;
}

static int by_slot(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* A key the window's queries point at scores highest and survives. */
static void run_needle(uint32_t dtype)
{
	struct es e;
	uint32_t len = 4096, nq = 8, QH, G = 2, j, needle, layer, h, best = 0;
	uint32_t keep[4096], n, budget = 400, sinks = 4, win = 32;
	float *q, *out;
	double u[64];

	KT_CHECK(es_init(&e, 2, 2, 64, dtype, 16, len / 16 + 4, KVK_ROPE_NEOX,
			 0, 0) == 0, "init");
	e.cpu = g_cpu;
	KT_CHECK(es_append(&e, len) == 0, "append");
	needle = 500 + kt_below(3000);
	/* the needle's raw key: 15 u (|u| about 1) in every layer and
	 * head; queries about 8 u: its scaled score is about 15, the others'
	 * about N(0, 1) */
	for (j = 0; j < 64; j++)
		u[j] = kt_gauss() / 8.0;
	for (layer = 0; layer < 2; layer++)
		for (h = 0; h < 2; h++)
			for (j = 0; j < 64; j++)
				e.K[e.tok[needle] * es_row(&e) +
				    ((size_t)layer * 2 + h) * 64 + j] =
					(float)(u[j] * 15.0);
	es_write(&e, needle, 1, KVK_WRITE_MERGE);
	QH = e.H * G;
	q = malloc(sizeof(float) * nq * QH * 64);
	out = malloc(sizeof(float) * len);
	/* queries: u rotated to the needle's position, plus noise */
	for (j = 0; j < nq * QH; j++) {
		double ref[64];
		uint32_t d;

		es_key64(&e, e.tok[needle], 0, 0, e.pos[needle], ref);
		for (d = 0; d < 64; d++)
			q[j * 64 + d] = (float)(ref[d] / 15.0 * 8.0 +
						0.3 * kt_gauss());
	}
	{
		struct kvk_score_args a = {
			.layout = &e.l, .pool_base = e.pool, .layer = 0,
			.q_heads = QH, .n_q = nq, .flags = KVK_SCORE_CAUSAL,
			.q = q, .block_table = e.table, .nblocks = e.nb,
			.len = len, .scale = 0.125f, .out = out,
		};

		KT_CHECK(kvk_score(&a, g_cpu) == 0, "score");
	}
	for (j = 0; j < len; j++)
		if (out[j] > out[best])
			best = j;
	KT_CHECK(best == needle, "%s: needle %u, best %u", kvk_dtype_name(dtype),
		 needle, best);
	/* sinks, window, then the best scores up to the budget */
	for (j = 0; j < len; j++)
		if (j < sinks || j >= len - win)
			out[j] = INFINITY;
	for (j = 0; j < len; j++)
		keep[j] = j;
	g_scores = out;
	qsort(keep, len, sizeof(uint32_t), by_score);
	n = budget;
	qsort(keep, n, sizeof(uint32_t), by_slot);
	do_compact(&e, keep, n, "needle");
	for (j = 0; j < e.len; j++)
		if (e.tok[j] == e.tok[0] + needle)
			break;
	KT_CHECK(j < e.len, "%s: the needle survived", kvk_dtype_name(dtype));
	KT_CHECK(e.len <= budget, "budget");
	es_check_keys(&e, "needle");
	free(q);
	free(out);
	es_free(&e);
}

static void check_bad(uint32_t dtype)
{
	struct es e;
	struct kvk_compact_args a;
	uint32_t keep[64], i, saved;
	uint8_t *copy;
	size_t bytes;
	int r;

	KT_CHECK(es_init(&e, 1, 2, 64, dtype, 5, 40, KVK_ROPE_NEOX, 0, 0) == 0,
		 "init");
	KT_CHECK(es_append(&e, 60) == 0, "append");
	bytes = (size_t)e.pool_blocks * e.l.block_bytes;
	copy = malloc(bytes);
	memcpy(copy, e.pool, bytes);
	for (i = 0; i < 64; i++)
		keep[i] = 2 * i;
	memset(&a, 0, sizeof(a));
	a.layout = &e.l;
	a.pool_base = e.pool;
	a.block_table = e.table;
	a.nblocks = e.nb;
	a.len = e.len;
	a.keep = keep;
	a.nkeep = 20;
#define BAD(expr, want, msg) do { \
		r = (expr); \
		KT_CHECK(r == (want), "%s: %s: %d", kvk_dtype_name(dtype), msg, r); \
		KT_CHECK(!memcmp(copy, e.pool, bytes), "%s: pool changed", msg); \
	} while (0)
	keep[7] = keep[6];
	BAD(kvk_compact(&a, NULL), -EINVAL, "repeated slot");
	keep[7] = keep[6] - 1;
	BAD(kvk_compact(&a, NULL), -EINVAL, "unsorted");
	keep[7] = 14;
	a.nkeep = 31;
	BAD(kvk_compact(&a, NULL), -EINVAL, "slot past the length");
	a.nkeep = 61;
	BAD(kvk_compact(&a, NULL), -EINVAL, "more than the length");
	a.nkeep = 20;
	a.nblocks = 11;
	BAD(kvk_compact(&a, NULL), -ERANGE, "table too short");
	a.nblocks = e.nb;
	saved = e.table[2];
	e.table[2] = 40;
	BAD(kvk_compact(&a, NULL), -EINVAL, "block beyond the pool");
	e.table[2] = e.table[9];
	BAD(kvk_compact(&a, NULL), -EINVAL, "block named twice");
	e.table[2] = saved;
	a.keep = NULL;
	BAD(kvk_compact(&a, NULL), -EINVAL, "no list");
	a.keep = keep;
	a.pad = 1;
	BAD(kvk_compact(&a, NULL), -EINVAL, "pad");
	a.pad = 0;
	{
		float q[4 * 2 * 64], out[60];
		struct kvk_score_args s = {
			.layout = &e.l, .pool_base = e.pool, .layer = 0,
			.q_heads = 4, .n_q = 2, .q = q,
			.block_table = e.table, .nblocks = e.nb, .len = 60,
			.scale = 0.125f, .out = out,
		};

		memset(q, 0, sizeof(q));
		KT_CHECK(kvk_score(&s, NULL) == 0, "good score");
		s.q_heads = 3;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "q_heads");
		s.q_heads = 4;
		s.n_q = 0;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "no query");
		s.n_q = KVK_SCORE_MAX_Q + 1;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "too many queries");
		s.n_q = 2;
		s.flags = 4;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "unknown flag");
		s.flags = 0;
		s.layer = 1;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "layer");
		s.layer = 0;
		s.len = 61;
		KT_CHECK(kvk_score(&s, NULL) == -ERANGE, "past the table");
		s.len = 1;
		s.flags = KVK_SCORE_CAUSAL;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "window > length");
		s.len = 60;
		s.flags = 0;
		s.scale = NAN;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "NaN scale");
		s.scale = 0.125f;
		saved = e.table[0];
		e.table[0] = 99;
		KT_CHECK(kvk_score(&s, NULL) == -EINVAL, "block beyond pool");
		e.table[0] = saved;
	}
	free(copy);
	es_free(&e);
}

int main(void)
{
	static const uint32_t tpbs[] = { 16, 7, 1, 5 };
	uint32_t dtype;

	kvk_cpu_init(&g_cpu, 2);
	for (dtype = KVK_BF16; dtype <= KVK_INT4; dtype++) {
		check_bad(dtype);
		run_compact(dtype, tpbs[dtype - 1]);
		run_score(dtype, tpbs[dtype % N(tpbs)], 700, 2, 5);
		run_needle(dtype);
	}
#ifndef KT_SMALL
	run_score(KVK_FP8, 16, 1500, 8, 16);
	run_score(KVK_BF16, 7, 1100, 1, 1);
#endif
	kvk_cpu_free(g_cpu);
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
