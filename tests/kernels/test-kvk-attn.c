// SPDX-License-Identifier: MIT
/*
 * test-kvk-attn.c - decode (default) or multi-token causal attention
 * (-DKT_PREFILL) against an FP64 reference, for every dtype over the grid
 * head_dim {64,128,256} x GQA {1,4,8} x context {1,15,16,17,1000,8192},
 * with tokens per block cycling through {16, 7, 1, 64, 33, 48} and random
 * block tables.  Every (head_dim, GQA, context) triple runs for every
 * dtype; tokens per block and the instruction set (AMX, AVX512-BF16,
 * AVX-512, AVX2, generic) rotate over the cases, so every value of every
 * axis is covered.
 *
 * -DKT_AMX (test-kvk-amx-decode, test-kvk-amx-prefill): the AMX path only
 * (exit 77 where the CPU or the kernel does not offer it), on shapes that
 * fill and underfill its tiles: GQA {1,4,8,16} x head_dim {64,128,256} x
 * context {1,31,33,64,100,527} (16 positions per score tile, 32 per value
 * tile, 64 per step), every case on every dtype; prefill with 1 to 33 new
 * tokens, so that a kv head's query rows come to 1, 4, 8 and 16.
 *
 * Asserted per case:
 *   - scalar reference and optimised path vs FP64 over the dequantised
 *     cache: relative L2 error <= 1e-4 (FP32 accumulation only);
 *   - a path that rounds the query and the softmax weights for a dtype
 *     (kt_path_rounding(): AVX512-BF16 on FP8, INT8 and INT4, and AMX
 *     on the calls it sends to those loops) is held to the
 *     FP64 attention of what it multiplies (its rounded or quantised
 *     query, E4M3 subnormals as zero) within the bound of its weight
 *     rounding (kt_round_bound(), derived there) plus 1e-4;
 *   - optimised path vs FP64 over the original FP32 K/V: relative L2
 *     error <= the dtype's bound (Documentation/kernels.rst);
 *   - optimised == scalar reference within 1e-4 relative (for a path
 *     that rounds: within the sum of the two bounds above and the FP64
 *     difference its rounding makes, by the triangle inequality).
 * Then, per dtype and instruction set, three shapes with 8 kv heads at
 * context 1000 (200 with -DKT_SMALL): several kv heads per work item.
 * -DKT_SMALL (the sanitizer build) drops contexts above 1000.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"

static const uint32_t head_dims[] = { 64, 128, 256 };
#ifdef KT_AMX
static const uint32_t groups[] = { 1, 4, 8, 16 };
static const uint32_t ctxs[] = { 1, 31, 33, 64, 100, 527 };
static const uint32_t tpbs[] = { 16, 7, 64, 33, 1, 48 };
static const char *const simds[] = { "amx" };
#else
static const uint32_t groups[] = { 1, 4, 8 };
#ifdef KT_SMALL
static const uint32_t ctxs[] = { 1, 15, 16, 17, 1000 };
#else
static const uint32_t ctxs[] = { 1, 15, 16, 17, 1000, 8192 };
#endif
static const uint32_t tpbs[] = { 16, 7, 1, 64, 33, 48 };
static const char *const simds[] = { "amx", "avx512bf16", "avx512", "avx2",
				      "generic" };
#endif
#ifdef KT_PREFILL
/* 7 values, 6 block sizes, 5 (or 1) instruction sets: every combination
 * comes round */
static const uint32_t n_news[] = { 1, 7, 33, 4, 16, 2, 5 };
#endif

#define N(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Many kv heads: an item takes several heads (as many as fit 16 x 256
 * rows x head_dim), so these shapes give several items per chunk whose
 * partials interleave: 8 kv heads at head_dim 256 x GQA 4 (2 heads per
 * item), at 64 x 16 (4 per item) and at 128 x 1 (all 8 in one).
 */
static const uint32_t many_heads[][3] = {	/* head_dim, GQA, kv heads */
	{ 256, 4, 8 }, { 64, 16, 8 }, { 128, 1, 8 },
};
static uint32_t kv_heads;	/* 0: 2 (1 for GQA 8) */
#ifdef KT_SMALL
#define MANY_HEADS_CTX 200	/* the sanitizer build: keep it short */
#else
#define MANY_HEADS_CTX 1000
#endif

struct worst {
	double ref_deq, opt_deq, opt_orig, opt_ref;
	double q_round, opt_eff;	/* paths that round (kt_path_rounding) */
	double of_bound;		/* largest error / its bound */
};

static double norm_d(const double *x, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += x[i] * x[i];
	return sqrt(s);
}

static double dist_d(const double *x, const double *y, size_t n)
{
	double s = 0;
	size_t i;

	for (i = 0; i < n; i++)
		s += (x[i] - y[i]) * (x[i] - y[i]);
	return sqrt(s);
}

static int run_case(uint32_t dtype, uint32_t D, uint32_t G, uint32_t C,
		    uint32_t tpb, struct kvk_cpu *cpu, uint32_t n_new,
		    struct worst *w)
{
	uint32_t H = kv_heads ? kv_heads : G == 8 ? 1 : 2, batch = 2, ctx[2];
	uint32_t b, i, h, qh;
	struct kt_batch kb;
	size_t nq, rows, r;
	float *q, *o_ref, *o_opt, *qe = NULL, **ek = NULL, **ev = NULL;
	double *f_deq, *f_orig, *f_eff = NULL, *sc, e1, e2, e3, e4;
	double b2 = KT_F32_BOUND, b4 = KT_F32_BOUND, w2sum = 0, eq = 0;
	struct kt_rounding rnd;
	int rounds;
	double scale = 1.0 / sqrt(D);
	int ret;

	ctx[0] = C;
	ctx[1] = C > 3 ? C / 3 + kt_below(C / 2) : C;
#ifndef KT_PREFILL
	n_new = 1;
#else
	if (n_new > ctx[1])
		n_new = ctx[1];
#endif
	rnd = kt_path_rounding(kvk_cpu_simd(cpu), dtype, D,
			       kvk_job_rows(G, n_new));
	rounds = rnd.qmode != KT_Q_FP32 || rnd.pu > 0;
	ret = kt_batch_init(&kb, 2, H, D, dtype, tpb, batch, ctx, G,
			    kt_below(2));
	if (ret) {
		KT_CHECK(ret == 0, "batch init: %d", ret);
		kt_batch_free(&kb);
		return ret;
	}
	qh = H * G;
	nq = (size_t)batch * n_new * qh;
	rows = nq;
	q = malloc(sizeof(float) * nq * D);
	o_ref = malloc(sizeof(float) * nq * D);
	o_opt = malloc(sizeof(float) * nq * D);
	f_deq = malloc(sizeof(double) * nq * D);
	f_orig = malloc(sizeof(double) * nq * D);
	sc = malloc(sizeof(double) * (C + 1));
	for (r = 0; r < nq * D; r++)
		q[r] = kt_gauss();
	memset(o_opt, 0xff, sizeof(float) * nq * D);	/* NaN: all written? */

#ifdef KT_PREFILL
	{
		struct kvk_prefill_args a = {
			.layout = &kb.l, .pool_base = kb.pool,
			.layer = kb.layer, .batch = batch, .q_heads = qh,
			.max_blocks_per_seq = kb.mbps, .n_new = n_new,
			.q = q, .block_tables = kb.tables,
			.ctx_lens = kb.ctx, .scale = (float)scale,
			.out = o_ref,
		};
		ret = kvk_prefill_ref(&a);
		KT_CHECK(ret == 0, "prefill_ref %d", ret);
		a.out = o_opt;
		ret = kvk_prefill(&a, cpu);
		KT_CHECK(ret == 0, "prefill %d", ret);
	}
#else
	{
		struct kvk_decode_args a = {
			.layout = &kb.l, .pool_base = kb.pool,
			.layer = kb.layer, .batch = batch, .q_heads = qh,
			.max_blocks_per_seq = kb.mbps, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = (float)scale, .out = o_ref,
		};
		ret = kvk_decode_ref(&a);
		KT_CHECK(ret == 0, "decode_ref %d", ret);
		a.out = o_opt;
		ret = kvk_decode(&a, cpu);
		KT_CHECK(ret == 0, "decode %d", ret);
	}
#endif
	if (rounds) {
		/* the FP64 reference of what the path computes: its rounded
		 * query, the K/V as it reads them */
		qe = malloc(sizeof(float) * D);
		f_eff = malloc(sizeof(double) * nq * D);
		ek = calloc(batch, sizeof(*ek));
		ev = calloc(batch, sizeof(*ev));
		for (b = 0; b < batch; b++) {
			size_t n = (size_t)ctx[b] * H * D;

			ek[b] = malloc(sizeof(float) * (n ? n : 1));
			ev[b] = malloc(sizeof(float) * (n ? n : 1));
			memcpy(ek[b], kb.dk[b], sizeof(float) * n);
			memcpy(ev[b], kb.dv[b], sizeof(float) * n);
			if (rnd.fp8_ftz) {
				kt_fp8_ftz(&kb, b, 0, ek[b]);
				kt_fp8_ftz(&kb, b, 1, ev[b]);
			}
		}
	}
	for (b = 0; b < batch; b++)
		for (i = 0; i < n_new; i++)
			for (h = 0; h < qh; h++) {
				size_t row = ((size_t)b * n_new + i) * qh + h;
				uint32_t npos = ctx[b] - n_new + i + 1;
				double w2;

				kt_ref_row(q + row * D, kb.dk[b], kb.dv[b], H,
					   D, h / G, npos, scale,
					   f_deq + row * D, sc);
				kt_ref_row(q + row * D, kb.k[b], kb.v[b], H,
					   D, h / G, npos, scale,
					   f_orig + row * D, sc);
				if (!rounds)
					continue;
				kt_round_query(q + row * D, D, (float)scale,
					       rnd, qe);
				kt_ref_row2(qe, ek[b], ev[b], H, D, h / G,
					    npos, 1.0, f_eff + row * D, sc,
					    &w2);
				w2sum += w2;
			}
	e1 = kt_rel_err(o_ref, f_deq, rows * D);
	e2 = kt_rel_err(o_opt, f_deq, rows * D);
	e3 = kt_rel_err(o_opt, f_orig, rows * D);
	e4 = kt_rel_err_f(o_opt, o_ref, rows * D);
	if (rounds) {
		/* against the reference of what it computes, within the
		 * bound of its weight rounding; against the scalar reference
		 * within that plus what the rounded query and the flushed
		 * subnormals change in FP64 (triangle inequality) */
		double ne = norm_d(f_eff, rows * D), nd = norm_d(f_deq, rows * D);

		b2 = kt_round_bound(rnd.pu, w2sum, ne);
		eq = nd > 0 ? dist_d(f_eff, f_deq, rows * D) / nd : 0;
		b4 = nd > 0 ? (b2 * ne + eq * nd + KT_F32_BOUND * nd) /
			      (nd * (1 - KT_F32_BOUND)) : b2;
		e2 = kt_rel_err(o_opt, f_eff, rows * D);
		if (eq > w->q_round)
			w->q_round = eq;
		if (e2 > w->opt_eff)
			w->opt_eff = e2;
	}
	if (e2 / b2 > w->of_bound)
		w->of_bound = e2 / b2;
	KT_CHECK(e1 <= KT_F32_BOUND && e2 <= b2 &&
		 e3 <= kt_quant_bound(dtype) && e4 <= b4,
		 "%s D=%u G=%u ctx=%u tpb=%u n_new=%u simd=%s: ref/deq %.2e "
		 "opt/%s %.2e (bound %.2e) opt/orig %.2e opt/ref %.2e "
		 "(bound %.2e)",
		 kvk_dtype_name(dtype), D, G, C, tpb, n_new,
		 kvk_cpu_simd(cpu), e1, rounds ? "eff" : "deq", e2, b2, e3,
		 e4, b4);
	e2 = kt_rel_err(o_opt, f_deq, rows * D);
	if (e1 > w->ref_deq)
		w->ref_deq = e1;
	if (e2 > w->opt_deq)
		w->opt_deq = e2;
	if (e3 > w->opt_orig)
		w->opt_orig = e3;
	if (e4 > w->opt_ref)
		w->opt_ref = e4;
	free(q);
	free(o_ref);
	free(o_opt);
	free(f_deq);
	free(f_orig);
	free(sc);
	if (rounds) {
		for (b = 0; b < batch; b++) {
			free(ek[b]);
			free(ev[b]);
		}
		free(ek);
		free(ev);
		free(qe);
		free(f_eff);
	}
	kt_batch_free(&kb);
	return 0;
}

int main(void)
{
	struct kvk_cpu *cpus[N(simds)];
	uint32_t dt, di, gi, ci, n = 0;
	size_t s;
	int ret;

	for (s = 0; s < N(simds); s++) {
		setenv("KVK_SIMD", simds[s], 1);
		ret = kvk_cpu_init(&cpus[s], 2);
		if (ret) {
			fprintf(stderr, "kvk_cpu_init: %d\n", ret);
			return 1;
		}
		printf("cpu %zu: %s, %u threads\n", s, kvk_cpu_simd(cpus[s]),
		       kvk_cpu_threads(cpus[s]));
#ifdef KT_AMX
		if (strcmp(kvk_cpu_simd(cpus[s]), "amx")) {
			printf("SKIP: no AMX (CPU or kernel), path %s\n",
			       kvk_cpu_simd(cpus[s]));
			kvk_cpu_free(cpus[s]);
			return 77;
		}
#endif
	}
	printf("%-5s %10s %10s %10s %10s %10s %10s %8s  (worst relative L2 "
	       "errors)\n", "dtype", "ref/deq", "opt/deq", "opt/orig",
	       "opt/ref", "q-round", "opt/eff", "e/bound");
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		struct worst w = { 0 };

		for (di = 0; di < N(head_dims); di++)
			for (gi = 0; gi < N(groups); gi++)
				for (ci = 0; ci < N(ctxs); ci++, n++) {
					uint32_t nn = 1;
#ifdef KT_PREFILL
					nn = n_news[n % N(n_news)];
					/* keep the FP64 reference affordable */
					if (ctxs[ci] >= 8192 && nn > 4)
						nn = 4;
					else if (ctxs[ci] >= 1000 && nn > 8)
						nn = 8;
#endif
					run_case(dt, head_dims[di], groups[gi],
						 ctxs[ci], tpbs[n % N(tpbs)],
						 cpus[n % N(simds)], nn, &w);
				}
		kv_heads = many_heads[0][2];
		for (gi = 0; gi < N(many_heads); gi++)
			for (s = 0; s < N(simds); s++, n++)
				run_case(dt, many_heads[gi][0],
					 many_heads[gi][1], MANY_HEADS_CTX,
					 tpbs[n % N(tpbs)], cpus[s], 3, &w);
		kv_heads = 0;
		printf("%-5s %10.2e %10.2e %10.2e %10.2e %10.2e %10.2e %8.3f  "
		       "(bound %.2g)\n", kvk_dtype_name(dt), w.ref_deq,
		       w.opt_deq, w.opt_orig, w.opt_ref, w.q_round, w.opt_eff,
		       w.of_bound, kt_quant_bound(dt));
	}
	for (s = 0; s < N(simds); s++)
		kvk_cpu_free(cpus[s]);
	printf("%u cases, %d failures\n", n, kt_failures);
	return kt_failures ? 1 : 0;
}
