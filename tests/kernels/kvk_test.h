/* SPDX-License-Identifier: MIT */
/*
 * kvk_test.h - helpers for the kernels tests: a seeded RNG, sequences with
 * random block tables written into a pool, and the FP64 reference.
 */
#ifndef KVK_TEST_H
#define KVK_TEST_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvkern.h"
#include "kvkern_internal.h"

static int kt_failures;

#define KT_CHECK(cond, ...) do { \
	if (!(cond)) { \
		kt_failures++; \
		fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fprintf(stderr, "\n"); \
	} \
} while (0)

static uint64_t kt_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t kt_next(void)
{
	/* splitmix64 */
	uint64_t z = (kt_rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint32_t kt_below(uint32_t n)
{
	return (uint32_t)(kt_next() % n);
}

static inline double kt_unif(void)
{
	return (kt_next() >> 11) * 0x1p-53;
}

/* Approximately N(0,1): Irwin-Hall sum of four uniforms (cheap). */
static inline float kt_gauss(void)
{
	uint64_t r = kt_next();
	uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
		     (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);

	return (float)((s * (1.0 / 65536) - 2.0) * 1.7320508075688772);
}

/* A batch of sequences in one pool, one layout. */
struct kt_batch {
	struct kvk_layout l;
	uint8_t *pool;
	uint32_t nblocks;
	uint32_t batch, q_heads, mbps, layer;
	uint32_t *ctx;
	uint32_t *tables;	/* [batch][mbps] */
	float **k, **v;		/* per seq [ctx][kv_heads][D], original */
	float **dk, **dv;	/* per seq, dequantised back from the pool */
};

/* Set to keep block_bytes a multiple of 16 (the GPU ops need it). */
static int kt_align16;

/* block_bytes giving exactly tpb tokens per block, plus some slack. */
static inline uint64_t kt_block_bytes(uint32_t layers, uint32_t H, uint32_t D,
				      uint32_t dtype, uint32_t tpb)
{
	uint64_t pt, fx, bb;

	if (kvk_layout_cost(layers, H, D, dtype, &pt, &fx))
		return 0;
	bb = fx + pt * tpb + kt_below((uint32_t)pt);
	if (kt_align16)
		bb = (fx + pt * tpb + 15) / 16 * 16 > bb ?
		     (fx + pt * tpb + 15) / 16 * 16 : bb / 16 * 16;
	return bb;
}

static inline void kt_batch_free(struct kt_batch *b)
{
	uint32_t i;

	for (i = 0; i < b->batch; i++) {
		free(b->k[i]);
		free(b->v[i]);
		free(b->dk[i]);
		free(b->dv[i]);
	}
	free(b->k);
	free(b->v);
	free(b->dk);
	free(b->dv);
	free(b->ctx);
	free(b->tables);
	free(b->pool);
	memset(b, 0, sizeof(*b));
}

/*
 * Build a batch: ctx[i] tokens per sequence, K/V ~ N(0,1) (v_mean added to
 * V), written through kvk_write_kv in random-size chunks (so FP8/INT8
 * block scales grow and re-quantise), random block tables.  Returns 0.
 */
static inline int kt_batch_init(struct kt_batch *b, uint32_t layers,
				uint32_t H, uint32_t D, uint32_t dtype,
				uint32_t tpb, uint32_t batch,
				const uint32_t *ctx, uint32_t group,
				uint32_t layer)
{
	uint32_t i, t, total = 0, *perm, nb, next = 0;
	int ret;

	memset(b, 0, sizeof(*b));
	ret = kvk_layout_init(&b->l, layers, H, D, dtype,
			      kt_block_bytes(layers, H, D, dtype, tpb));
	if (ret)
		return ret;
	if (b->l.tokens_per_block != tpb)
		return -EPROTO;
	b->batch = batch;
	b->q_heads = H * group;
	b->layer = layer;
	b->ctx = calloc(batch, sizeof(uint32_t));
	b->mbps = 1;
	for (i = 0; i < batch; i++) {
		b->ctx[i] = ctx[i];
		nb = (ctx[i] + tpb - 1) / tpb;
		total += nb;
		if (nb > b->mbps)
			b->mbps = nb;
	}
	b->mbps += 1;			/* a spare entry, never read */
	b->nblocks = total + 3;
	b->l.pool_blocks = b->nblocks;
	b->pool = malloc(b->nblocks * b->l.block_bytes);
	b->tables = malloc(sizeof(uint32_t) * batch * b->mbps);
	perm = malloc(sizeof(uint32_t) * b->nblocks);
	b->k = calloc(batch, sizeof(float *));
	b->v = calloc(batch, sizeof(float *));
	b->dk = calloc(batch, sizeof(float *));
	b->dv = calloc(batch, sizeof(float *));
	if (!b->pool || !b->tables || !perm || !b->k || !b->v || !b->dk ||
	    !b->dv || !b->ctx)
		return -ENOMEM;
	/* garbage everywhere: unwritten slots and scales must not matter */
	for (i = 0; i < b->nblocks * b->l.block_bytes; i++)
		b->pool[i] = (uint8_t)(i * 2654435761u >> 13);
	for (i = 0; i < b->nblocks; i++)
		perm[i] = i;
	for (i = b->nblocks - 1; i > 0; i--) {
		uint32_t j = kt_below(i + 1), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (i = 0; i < batch * b->mbps; i++)
		b->tables[i] = 0xdeadbeef;	/* unused entries: invalid */
	for (i = 0; i < batch; i++) {
		uint32_t n = b->ctx[i], *blk, *slot, c0, c1;
		size_t row = (size_t)H * D;

		nb = (n + tpb - 1) / tpb;
		for (t = 0; t < nb; t++)
			b->tables[i * b->mbps + t] = perm[next++];
		b->k[i] = malloc(sizeof(float) * row * (n ? n : 1));
		b->v[i] = malloc(sizeof(float) * row * (n ? n : 1));
		b->dk[i] = malloc(sizeof(float) * row * (n ? n : 1));
		b->dv[i] = malloc(sizeof(float) * row * (n ? n : 1));
		blk = malloc(sizeof(uint32_t) * (n ? n : 1));
		slot = malloc(sizeof(uint32_t) * (n ? n : 1));
		if (!b->k[i] || !b->v[i] || !b->dk[i] || !b->dv[i] || !blk ||
		    !slot)
			return -ENOMEM;
		for (t = 0; t < n * row; t++) {
			b->k[i][t] = kt_gauss();
			b->v[i][t] = kt_gauss();
		}
		for (t = 0; t < n; t++) {
			blk[t] = b->tables[i * b->mbps + t / tpb];
			slot[t] = t % tpb;
		}
		/* write in chunks of 1..48 tokens, like prefill + decode */
		for (c0 = 0; c0 < n; c0 = c1) {
			c1 = c0 + 1 + kt_below(48);
			if (c1 > n)
				c1 = n;
			ret = kvk_write_kv(&b->l, b->pool, layer, c1 - c0,
					   blk + c0, slot + c0,
					   b->k[i] + c0 * row,
					   b->v[i] + c0 * row);
			if (ret)
				return ret;
		}
		ret = kvk_read_kv(&b->l, b->pool, layer, n, blk, slot,
				  b->dk[i], b->dv[i]);
		free(blk);
		free(slot);
		if (ret)
			return ret;
	}
	free(perm);
	return 0;
}

/*
 * FP64 attention of one query row (D values) over positions 0..npos-1 of
 * K/V arrays [pos][H][D], kv head h.  out: D doubles.  w2 (if not NULL):
 * sum over positions of (normalised weight)^2 x ||V row||^2, the scale of
 * the error that rounding each weight once gives (kt_round_bound()).
 */
static inline void kt_ref_row2(const float *q, const float *k, const float *v,
			       uint32_t H, uint32_t D, uint32_t h,
			       uint32_t npos, double scale, double *out,
			       double *sc, double *w2)
{
	double m = -INFINITY, sum = 0, ww = 0;
	uint32_t p, d;

	for (d = 0; d < D; d++)
		out[d] = 0;
	if (w2)
		*w2 = 0;
	if (!npos)
		return;
	for (p = 0; p < npos; p++) {
		const float *kr = k + ((size_t)p * H + h) * D;
		double s = 0;

		for (d = 0; d < D; d++)
			s += (double)q[d] * kr[d];
		sc[p] = s * scale;
		if (sc[p] > m)
			m = sc[p];
	}
	for (p = 0; p < npos; p++) {
		const float *vr = v + ((size_t)p * H + h) * D;
		double w = exp(sc[p] - m), vv = 0;

		sum += w;
		for (d = 0; d < D; d++) {
			out[d] += w * vr[d];
			vv += (double)vr[d] * vr[d];
		}
		ww += w * w * vv;
	}
	for (d = 0; d < D; d++)
		out[d] /= sum;
	if (w2)
		*w2 = ww / (sum * sum);
}

static inline void kt_ref_row(const float *q, const float *k, const float *v,
			      uint32_t H, uint32_t D, uint32_t h,
			      uint32_t npos, double scale, double *out,
			      double *sc)
{
	kt_ref_row2(q, k, v, H, D, h, npos, scale, out, sc, NULL);
}

/*
 * What an optimised path rounds, per dtype (Documentation/kernels.rst,
 * "Precision per dtype"): the AVX512-BF16 path multiplies FP8 caches with
 * the query (times the softmax scale) rounded once to BF16 and the softmax
 * weights rounded once to BF16 (unit roundoff 2^-9), and reads E4M3
 * subnormals as zero; INT8 caches, and INT4 caches at head_dim 64, 128
 * and 256, with the query quantised to INT8 per row and the weights (INT4:
 * times the group's V scale) rounded once to BF16; every other path and
 * dtype keeps FP32 products (or hi + lo BF16 parts, about 2^-17).  The
 * amx path rounds as avx512bf16 in the calls it sends there
 * (kvk_amx_takes(): by dtype, head_dim and the rows per kv head of the
 * call's items, kvk_job_rows()).
 */
enum { KT_Q_FP32, KT_Q_BF16, KT_Q_INT8 };

/* unit roundoff of the weights: BF16 rounded once (kvkern_dpbf16.h's
 * BF_SPLIT_P()) */
#define KT_FP8_PU 0x1p-9
#define KT_INT8_PU 0x1p-9
/* INT4: each weight times its group's V scale, rounded once to BF16 */
#define KT_INT4_PU 0x1p-9

struct kt_rounding {
	int qmode;		/* KT_Q_*: how the scaled query is rounded */
	double pu;		/* unit roundoff of each weight (0: FP32) */
	int fp8_ftz;		/* E4M3 subnormals read as 0 */
};

static inline struct kt_rounding kt_path_rounding(const char *simd,
						  uint32_t dtype, uint32_t D,
						  uint32_t rows)
{
	struct kt_rounding r = { KT_Q_FP32, 0, 0 };

	/* the calls the amx path sends to the avx512bf16 loops */
	if (!strcmp(simd, "amx") && !kvk_amx_takes(dtype, D, rows))
		simd = "avx512bf16";
	if (!strcmp(simd, "avx512bf16") && D % 64 == 0 && dtype == KVK_FP8) {
		r.qmode = KT_Q_BF16;
		r.pu = KT_FP8_PU;
		r.fp8_ftz = 1;
	}
	if (!strcmp(simd, "avx512bf16") && D % 64 == 0 && dtype == KVK_INT8) {
		r.qmode = KT_Q_INT8;
		r.pu = KT_INT8_PU;
	}
	if (!strcmp(simd, "avx512bf16") && (D == 64 || D == 128 ||
					     D == 256) && dtype == KVK_INT4) {
		r.qmode = KT_Q_INT8;
		r.pu = KT_INT4_PU;
	}
	return r;
}

/* FP32 -> nearest BF16 (ties to even), as VCVTNEPS2BF16 rounds. */
static inline float kt_bf16(float x)
{
	uint32_t u;

	memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return x;
	u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

/*
 * The query row as the path multiplies it: q x scale, rounded.  INT8: the
 * row quantised with its own scale, qs = amax / 127 and
 * q8 = rint(x x (127 / amax)) in FP32 (amax: the largest |x|), read as
 * q8 x qs.
 */
static inline void kt_round_query(const float *q, uint32_t D, float scale,
				  struct kt_rounding r, float *out)
{
	float amax = 0.0f, inv, qs, y;
	uint32_t d;

	for (d = 0; d < D; d++) {
		out[d] = q[d] * scale;
		if (fabsf(out[d]) > amax)
			amax = fabsf(out[d]);
	}
	if (r.qmode == KT_Q_BF16)
		for (d = 0; d < D; d++)
			out[d] = kt_bf16(out[d]);
	if (r.qmode != KT_Q_INT8 || amax == 0.0f)
		return;
	inv = 127.0f / amax;
	qs = amax / 127.0f;
	for (d = 0; d < D; d++) {
		y = rintf(out[d] * inv);
		y = y > 127.0f ? 127.0f : y < -127.0f ? -127.0f : y;
		out[d] = (float)((double)y * qs);
	}
}

/*
 * The K/V values of a dequantised FP8 cache as a path that reads E4M3
 * subnormals as zero sees them: |x| < 2^-6 s becomes 0 (s: the plane's
 * block scale).  x: [n][H][D] of the sequence with block table table,
 * kv 0 (K) or 1 (V).
 */
static inline void kt_fp8_ftz_seq(const struct kvk_layout *l,
				  const uint8_t *pool, uint32_t layer,
				  const uint32_t *table, uint32_t n,
				  uint32_t kv, float *x)
{
	uint32_t T = l->tokens_per_block, H = l->kv_heads, D = l->head_dim;
	uint32_t p, h, d;

	for (p = 0; p < n; p++)
		for (h = 0; h < H; h++) {
			const uint8_t *blk = pool + (uint64_t)table[p / T] *
					     l->block_bytes;
			float s, *row = x + ((size_t)p * H + h) * D;

			memcpy(&s, blk + kvk_scale_offset(l, layer, kv, h,
							  p % T), 4);
			for (d = 0; d < D; d++)
				if (fabsf(row[d]) < 0x1p-6f * s)
					row[d] = 0.0f;
		}
}

static inline void kt_fp8_ftz(const struct kt_batch *b, uint32_t i,
			      uint32_t kv, float *x)
{
	kt_fp8_ftz_seq(&b->l, b->pool, b->layer, b->tables + i * b->mbps,
		       b->ctx[i], kv, x);
}

/*
 * The bound on ||out - ref_eff|| over a case whose weights are each
 * rounded once with unit roundoff pu, where ref_eff is the FP64 attention
 * with the path's rounded query and the K/V as the path reads them, and
 * w2sum the sum of kt_ref_row2()'s w2 over the case's rows.  Rounding
 * weight j by (1 + e_j), |e_j| <= pu, moves the output by
 * sum_j w_j e_j V_j: a sum of independent vectors of norms at most
 * c_j = pu w_j ||V_j||, when the rounding errors are taken as independent
 * and of mean zero (round to nearest even on data that are not
 * correlated with the rounding grid).  Pinelis' inequality for sums of
 * bounded independent vectors in a Hilbert space gives
 * P(||sum|| >= t) <= 2 exp(-t^2 / (2 sum c_j^2)); t = 6 sqrt(sum c_j^2)
 * holds but with probability 3e-8 per case.  Plus the FP32 accumulation
 * bound (KT_F32_BOUND relative) as for every path.
 */
#define KT_ROUND_SIGMAS 6.0

/* Bound on ||out - fp64(dequantised cache)|| / ||fp64||: FP32 rounding. */
#define KT_F32_BOUND 1e-4

static inline double kt_round_bound(double pu, double w2sum, double refnorm)
{
	return KT_ROUND_SIGMAS * pu * sqrt(w2sum) / refnorm + KT_F32_BOUND;
}

/* ||a - ref|| / ||ref|| over n values (ref in double). */
static inline double kt_rel_err(const float *a, const double *ref, size_t n)
{
	double e = 0, r = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		e += (a[i] - ref[i]) * (a[i] - ref[i]);
		r += ref[i] * ref[i];
	}
	if (e != e)
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

static inline double kt_rel_err_f(const float *a, const float *b, size_t n)
{
	double e = 0, r = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	if (e != e)
		return INFINITY;
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* Per-dtype bound on ||out - fp64(original K/V)|| / ||fp64||; see
 * Documentation/kernels.rst. */
static inline double kt_quant_bound(uint32_t dtype)
{
	switch (dtype) {
	case KVK_BF16:
		return 0.01;
	case KVK_FP8:
		return 0.08;
	case KVK_INT8:
		return 0.04;
	default:
		return 0.25;
	}
}

#endif /* KVK_TEST_H */
