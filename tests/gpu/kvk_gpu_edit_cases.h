/* SPDX-License-Identifier: MIT */
/*
 * kvk_gpu_edit_cases.h - the edit ops through the CUDA glue against the
 * CPU ops, shared by tests/gpu/test-kvk-gpu-edit (a real GPU) and
 * tests/gpu/test-kvk-gpu-emu.sh (--quick: the same kernels compiled for
 * the host under the driver test double's emulation):
 *   splice and compact: starting from the same pool bytes, the "device"
 *       pool after the op equals the CPU's byte for byte (same plan, same
 *       rotation arithmetic, same block-scale rule), for every dtype, both
 *       RoPE styles, partial rotary dims, tokens per block {16, 7, 1, 33},
 *       boundaries inside and at blocks, inserts and deletes crossing
 *       blocks, a gap closed by a large negative delta, more destination
 *       blocks than one stage holds (several batches);
 *   KVK_WRITE_MERGE writes: identical bytes;
 *   score: sum/max, causal or not, relative error within 6 sigma of the
 *       modelled rounding (score_tol) against the CPU;
 *   bad input: the CPU ops' errors, device pool unchanged.
 * The includer provides drv and kc and calls edit_cases().
 */
#ifndef KVK_GPU_EDIT_CASES_H
#define KVK_GPU_EDIT_CASES_H

#include <stdio.h>
#include <stdlib.h>

#include "kvk_edit_test.h"
#include "kvkern_cuda.h"

static struct cuda_drv drv;

/* A copy from pageable memory returns once the source is staged, before
 * its DMA is done (the driver API's synchronization behavior), and the
 * library's kernels run on a non-blocking stream that does not wait for
 * the legacy one: wait for the copy. */
static CUresult h2d(CUdeviceptr d, const void *h, size_t n)
{
	CUresult r = drv.cuMemcpyHtoD(d, h, n);

	return r != CUDA_SUCCESS ? r : drv.cuStreamSynchronize(NULL);
}
static struct kvk_cuda *kc;

/* scale of the cases: 1 full, 0 small (the emulation is slow) */
static int edit_cases_full = 1;

#define N(a) (sizeof(a) / sizeof((a)[0]))

static size_t pool_bytes(const struct es *e)
{
	return (size_t)e->pool_blocks * e->l.block_bytes;
}

static int upload(const struct es *e, CUdeviceptr d)
{
	return h2d(d, e->pool, pool_bytes(e)) == CUDA_SUCCESS ?
	       0 : -EIO;
}

/* The device pool equals the host pool. */
static int same_pool(const struct es *e, CUdeviceptr d, const char *what)
{
	size_t n = pool_bytes(e), i;
	uint8_t *back = malloc(n);
	int ok;

	if (!back || drv.cuMemcpyDtoH(back, d, n) != CUDA_SUCCESS) {
		free(back);
		KT_CHECK(0, "%s: copy back", what);
		return 0;
	}
	ok = !memcmp(back, e->pool, n);
	if (!ok) {
		for (i = 0; i < n && back[i] == e->pool[i]; i++)
			;
		KT_CHECK(ok, "%s: first byte that differs: %zu (block %zu, "
			 "offset %zu): gpu %02x cpu %02x", what, i,
			 i / e->l.block_bytes, i % e->l.block_bytes, back[i],
			 e->pool[i]);
	}
	free(back);
	return ok;
}

/* One splice on both sides; the model follows the CPU. */
static void splice_both(struct es *e, CUdeviceptr d, uint32_t at,
			uint32_t ndel, uint32_t nins, const char *what)
{
	struct kvk_splice_args a;
	uint32_t new_len = e->len - ndel + nins, t;
	int64_t delta = es_delta(e, at, ndel, nins);
	int64_t p0 = at < e->len ? e->pos[at] : e->next_pos;
	int rc, rg;

	KT_CHECK(es_reserve(e, new_len > e->len ? new_len : e->len) == 0,
		 "reserve");
	KT_CHECK(upload(e, d) == 0, "upload");
	memset(&a, 0, sizeof(a));
	a.layout = &e->l;
	a.block_table = e->table;
	a.nblocks = e->nb;
	a.len = e->len;
	a.at = at;
	a.ndel = ndel;
	a.nins = nins;
	a.delta = delta;
	a.pool_base = (void *)(uintptr_t)d;
	rg = kvk_cuda_splice(kc, &a);
	a.pool_base = e->pool;
	rc = kvk_splice(&a, NULL);
	KT_CHECK(rc == 0 && rg == 0, "%s: splice cpu %d gpu %d", what, rc, rg);
	same_pool(e, d, what);
	if (nins != ndel) {
		memmove(e->tok + at + nins, e->tok + at + ndel,
			4 * (e->len - at - ndel));
		memmove(e->pos + at + nins, e->pos + at + ndel,
			4 * (e->len - at - ndel));
	}
	for (t = at + nins; t < new_len; t++)
		e->pos[t] = (uint32_t)(e->pos[t] + delta);
	for (t = 0; t < nins; t++) {
		e->tok[at + t] = es_new_token(e);
		e->pos[at + t] = (uint32_t)(p0 + t);
	}
	e->len = new_len;
	e->next_pos = (uint32_t)(e->next_pos + delta);
	es_trim(e);
	if (nins)
		KT_CHECK(es_write(e, at, nins, KVK_WRITE_MERGE) == 0, "write");
}

static void compact_both(struct es *e, CUdeviceptr d, const uint32_t *keep,
			 uint32_t nkeep, const char *what)
{
	struct kvk_compact_args a;
	uint32_t i;
	int rc, rg;

	KT_CHECK(upload(e, d) == 0, "upload");
	memset(&a, 0, sizeof(a));
	a.layout = &e->l;
	a.block_table = e->table;
	a.nblocks = e->nb;
	a.len = e->len;
	a.keep = keep;
	a.nkeep = nkeep;
	a.pool_base = (void *)(uintptr_t)d;
	rg = kvk_cuda_compact(kc, &a);
	a.pool_base = e->pool;
	rc = kvk_compact(&a, NULL);
	KT_CHECK(rc == 0 && rg == 0, "%s: compact cpu %d gpu %d", what, rc,
		 rg);
	same_pool(e, d, what);
	for (i = 0; i < nkeep; i++) {
		e->tok[i] = e->tok[keep[i]];
		e->pos[i] = e->pos[keep[i]];
	}
	e->len = nkeep;
	es_trim(e);
}

/*
 * The bound on a score's error, GPU against CPU, per slot (relative, with
 * a floor of 1e-3 of the largest score): both sides compute in FP32 and
 * differ in their roundings, each of unit roundoff e an independent error
 * of RMS e / sqrt(3): expf (2 ulp on the GPU, 2^-22), FP32 sums (u =
 * 2^-24 an addition) of the D terms of a dot product, the len terms of a
 * softmax's sum and the terms (queries x heads) summed into a slot.  The
 * bound is 6 sigma (the check takes the worst slot).  The fixed 1e-4 of
 * before was 60 times the emulation's worst case (1.7e-6, about 3 sigma).
 */
static double score_tol(uint32_t D, uint32_t len, uint32_t terms)
{
	const double eex = 0x1p-22, u = 0x1p-24;

	return 6 * sqrt((eex * eex + u * u * (D + len + terms)) / 3);
}

static void score_both(struct es *e, CUdeviceptr d, uint32_t group,
		       uint32_t nq, const char *what)
{
	uint32_t QH = e->H * group, flags, i;
	float *q = malloc(sizeof(float) * nq * QH * e->D);
	float *oc = malloc(sizeof(float) * e->len);
	float *og = malloc(sizeof(float) * e->len);

	KT_CHECK(upload(e, d) == 0, "upload");
	for (i = 0; i < nq * QH * e->D; i++)
		q[i] = kt_gauss();
	for (flags = 0; flags <= KVK_SCORE_FLAGS; flags++) {
		struct kvk_score_args a = {
			.layout = &e->l, .layer = e->layers - 1,
			.q_heads = QH, .n_q = nq, .flags = flags, .q = q,
			.block_table = e->table, .nblocks = e->nb,
			.len = e->len, .scale = 1.0f / sqrtf((float)e->D),
		};
		double worst = 0, mx = 0;
		int rc, rg;

		a.pool_base = e->pool;
		a.out = oc;
		rc = kvk_score(&a, NULL);
		a.pool_base = (void *)(uintptr_t)d;
		a.out = og;
		rg = kvk_cuda_score(kc, &a);
		KT_CHECK(rc == 0 && rg == 0, "%s: score cpu %d gpu %d", what,
			 rc, rg);
		for (i = 0; i < e->len; i++)
			mx = oc[i] > mx ? oc[i] : mx;
		for (i = 0; i < e->len; i++) {
			double x = fabs(og[i] - oc[i]) / (oc[i] + 1e-3 * mx);

			worst = x > worst ? x : worst;
		}
		KT_CHECK(worst <= score_tol(e->D, e->len, nq * QH),
			 "%s: score flags %u: gpu vs cpu %.2e, bound %.2e",
			 what, flags, worst, score_tol(e->D, e->len, nq * QH));
	}
	free(q);
	free(oc);
	free(og);
}

static void run(uint32_t dtype, uint32_t style, uint32_t rd, uint32_t tpb,
		uint32_t D)
{
	struct es e;
	CUdeviceptr d;
	uint32_t keep[1024], n, i, T = tpb;
	char what[96];

	snprintf(what, sizeof(what), "%s %s rd %u T %u D %u",
		 kvk_dtype_name(dtype), style == KVK_ROPE_NEOX ? "neox" : "gptj",
		 rd ? rd : D, tpb, D);
	if (es_init(&e, 2, 2, D, dtype, tpb, 900 / tpb + 40, style, rd,
		    style == KVK_ROPE_GPTJ)) {
		KT_CHECK(0, "%s: init", what);
		return;
	}
	if (drv.cuMemAlloc(&d, pool_bytes(&e)) != CUDA_SUCCESS) {
		KT_CHECK(0, "cuMemAlloc");
		es_free(&e);
		return;
	}
	KT_CHECK(es_append(&e, 300) == 0, "append");
	splice_both(&e, d, 37, 1, 0, what);
	splice_both(&e, d, 2 * T, 0, T + 3, what);
	splice_both(&e, d, T > 2 ? T - 2 : 1, 2 * T + 5, 0, what);
	splice_both(&e, d, 41, 5, 9, what);
	splice_both(&e, d, 0, 3, 1, what);
	splice_both(&e, d, e.len, 0, 4, what);
	splice_both(&e, d, e.len - 6, 6, 2, what);
	splice_both(&e, d, 20, 4, 4, what);
	for (i = n = 0; i < e.len; i++)
		if (kt_below(3))
			keep[n++] = i;
	compact_both(&e, d, keep, n, what);
	/* a gap closed by a large negative delta */
	e.next_pos = 1u << 30;
	KT_CHECK(es_append(&e, 50) == 0, "append");
	splice_both(&e, d, e.len - 51, 1, 0, what);
	score_both(&e, d, edit_cases_full ? 4 : 2, edit_cases_full ? 7 : 3,
		   what);
	for (i = 0; i < 6; i++) {
		uint32_t at = kt_below(e.len + 1);

		splice_both(&e, d, at, kt_below(e.len - at + 1) % 40,
			    kt_below(3 * T), what);
	}
	drv.cuMemFree(d);
	es_free(&e);
}

/* More destination blocks than one stage holds: several batches. */
static void run_big(uint32_t dtype)
{
	struct es e;
	CUdeviceptr d;

	/* 8 layers x 8 kv heads x 128, 16 tokens per block; 6000 tokens */
	if (es_init(&e, 8, 8, 128, dtype, 16, 420, KVK_ROPE_NEOX, 0, 0)) {
		KT_CHECK(0, "init big");
		return;
	}
	if (drv.cuMemAlloc(&d, pool_bytes(&e)) != CUDA_SUCCESS) {
		KT_CHECK(0, "cuMemAlloc");
		es_free(&e);
		return;
	}
	KT_CHECK(es_append(&e, 6000) == 0, "append");
	/* batches of 7 destination blocks */
	setenv("KVPOOL_EDIT_STAGE", "4000000", 1);
	splice_both(&e, d, 1000, 37, 5, "big left");
	splice_both(&e, d, 900, 0, 77, "big right");
	unsetenv("KVPOOL_EDIT_STAGE");
	splice_both(&e, d, 17, 100, 3, "big, one batch");
	drv.cuMemFree(d);
	es_free(&e);
}

static void check_merge_write(uint32_t dtype)
{
	struct kvk_layout l;
	uint32_t blk[16], sl[16], i;
	float k[16 * 128], v[16 * 128];
	uint8_t *h, *back;
	CUdeviceptr d;

	kvk_layout_init(&l, 2, 1, 128, dtype, kt_block_bytes(2, 1, 128, dtype,
							     16));
	h = calloc(3, l.block_bytes);
	back = malloc(3 * l.block_bytes);
	drv.cuMemAlloc(&d, 3 * l.block_bytes);
	h2d(d, h, 3 * l.block_bytes);
	for (i = 0; i < 16; i++) {
		blk[i] = 2;
		sl[i] = i;
	}
	for (i = 0; i < 16 * 128; i++) {
		k[i] = kt_gauss();
		v[i] = kt_gauss() * 2;
	}
	kvk_write_kv(&l, h, 1, 16, blk, sl, k, v);
	kvk_cuda_write_kv(kc, &l, d, 1, 16, blk, sl, k, v);
	for (i = 0; i < 128; i++)
		k[i] = v[i] = 0.01f * kt_gauss();
	kvk_write_kv_flags(&l, h, 1, 1, blk, sl, k, v, KVK_WRITE_MERGE);
	KT_CHECK(kvk_cuda_write_kv_flags(kc, &l, d, 1, 1, blk, sl, k, v,
					 KVK_WRITE_MERGE) == 0, "merge write");
	KT_CHECK(kvk_cuda_write_kv_flags(kc, &l, d, 1, 1, blk, sl, k, v, 8) ==
		 -EINVAL, "unknown flag");
	drv.cuMemcpyDtoH(back, d, 3 * l.block_bytes);
	KT_CHECK(!memcmp(back, h, 3 * l.block_bytes), "%s: merge write bytes",
		 kvk_dtype_name(dtype));
	drv.cuMemFree(d);
	free(h);
	free(back);
}

static void check_bad(void)
{
	struct es e;
	struct kvk_splice_args a;
	struct kvk_compact_args c;
	uint32_t keep[3] = { 1, 1, 2 };
	CUdeviceptr d;

	es_init(&e, 1, 1, 64, KVK_FP8, 16, 8, KVK_ROPE_NONE, 0, 0);
	KT_CHECK(es_append(&e, 40) == 0, "append");
	drv.cuMemAlloc(&d, pool_bytes(&e));
	upload(&e, d);
	memset(&a, 0, sizeof(a));
	a.layout = &e.l;
	a.pool_base = (void *)(uintptr_t)d;
	a.block_table = e.table;
	a.nblocks = e.nb;
	a.len = e.len;
	a.at = 30;
	a.ndel = 11;
	KT_CHECK(kvk_cuda_splice(kc, &a) == -ERANGE, "beyond the length");
	a.ndel = 1;
	a.delta = -1;
	kvk_layout_set_rope(&e.l, KVK_ROPE_NONE, 0, 0, NULL);
	KT_CHECK(kvk_cuda_splice(kc, &a) == -ENODATA, "no RoPE data");
	KT_CHECK(kvk_cuda_splice(NULL, &a) == -EINVAL, "no context");
	memset(&c, 0, sizeof(c));
	c.layout = &e.l;
	c.pool_base = (void *)(uintptr_t)d;
	c.block_table = e.table;
	c.nblocks = e.nb;
	c.len = e.len;
	c.keep = keep;
	c.nkeep = 3;
	KT_CHECK(kvk_cuda_compact(kc, &c) == -EINVAL, "repeated slot");
	same_pool(&e, d, "after refused ops");
	drv.cuMemFree(d);
	es_free(&e);
}


static void edit_cases(void)
{
	static const uint32_t tpbs[] = { 16, 7, 1, 33 };
	uint32_t dt, style, n = 0;

	check_bad();
	/* small: one destination block per batch, many batches */
	if (!edit_cases_full)
		setenv("KVPOOL_EDIT_STAGE", "3000", 1);
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		int f0 = kt_failures;

		check_merge_write(dt);
		for (style = KVK_ROPE_NEOX; style <= KVK_ROPE_GPTJ; style++) {
			if (edit_cases_full || (style + dt) % 2)
				run(dt, style, 0, tpbs[n++ % N(tpbs)], 64);
			if (edit_cases_full)
				run(dt, style, 64, tpbs[n++ % N(tpbs)], 128);
		}
		if (edit_cases_full)
			run_big(dt);
		printf("%-5s splice/compact/score device vs cpu: %s\n",
		       kvk_dtype_name(dt), kt_failures == f0 ? "ok" : "FAIL");
		fflush(stdout);
	}
}

#endif /* KVK_GPU_EDIT_CASES_H */
