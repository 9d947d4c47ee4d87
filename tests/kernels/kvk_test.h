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
 * K/V arrays [pos][H][D], kv head h.  out: D doubles.
 */
static inline void kt_ref_row(const float *q, const float *k, const float *v,
			      uint32_t H, uint32_t D, uint32_t h,
			      uint32_t npos, double scale, double *out,
			      double *sc)
{
	double m = -INFINITY, sum = 0;
	uint32_t p, d;

	for (d = 0; d < D; d++)
		out[d] = 0;
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
		double w = exp(sc[p] - m);

		sum += w;
		for (d = 0; d < D; d++)
			out[d] += w * vr[d];
	}
	for (d = 0; d < D; d++)
		out[d] /= sum;
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

/* Bound on ||out - fp64(dequantised cache)|| / ||fp64||: FP32 rounding. */
#define KT_F32_BOUND 1e-4

#endif /* KVK_TEST_H */
