// SPDX-License-Identifier: MIT
/*
 * e2e-devbuf - a GPU tenant of the end-to-end tests: queries, K/V and
 * outputs in a device buffer (libkvlease's kvl_dev_buf_*), against
 * kvpoold's cuda backend.
 *
 *   - a device buffer is allocated, exported and registered; this process
 *     fills it with cuMemcpyHtoD (its own context) and reads results back
 *     with cuMemcpyDtoH;
 *   - K/V of half the tokens are written from the buffer
 *     (kvl_write_kv_dev, FP32 and BF16 input), the other half from host
 *     memory (kvl_write_kv); kvl_read_kv returns all of them;
 *   - decode and multi-token attention with q and out in the buffer
 *     (kvl_attention_dev) give the same floats as the host-memory calls
 *     (kvl_attention), which match the CPU reference
 *     (|gpu - ref| <= 1e-3 max(1, |ref|));
 *   - kvl_read_kv_dev writes the dequantised K/V into the buffer;
 *   - offsets that are not 16-byte aligned (-EINVAL) or reach past the
 *     buffer (-EFAULT) are refused;
 *   - attention has ATTN's limits: a block named twice in one sequence is
 *     -EINVAL, more than 2^34 multiply-adds of Q.K in one request -E2BIG.
 * --expect-refusal: the daemon has no device memory (cpu backend): the
 * registration must fail with -EOPNOTSUPP.  --no-compare: the kernels do
 * not run (the driver test double without emulation): only the calls'
 * results are checked.  --hold FILE: write FILE when registered and wait
 * to be killed.
 * Exit 0 pass, 1 fail, 77 without a CUDA driver or device.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvlease.h"
#include "kvkern.h"
#include "cuda_drv.h"

#define FAIL(...) do { fprintf(stderr, "e2e-devbuf: " __VA_ARGS__); \
	fputc('\n', stderr); return 1; } while (0)

static struct cuda_drv drv;
static CUdevice dev;

static float val(uint32_t t, uint32_t i, uint32_t kind)
{
	uint64_t x = ((uint64_t)t << 20) ^ ((uint64_t)i << 2) ^ kind ^
		     0x9e3779b97f4a7c15ULL;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

static int close_to(const float *got, const float *ref, size_t n, double *err)
{
	double mref = 1.0, e = 0;
	size_t i;

	for (i = 0; i < n; i++)
		if (fabs(ref[i]) > mref)
			mref = fabs(ref[i]);
	for (i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);

		if (!(d <= e))
			e = isnan(d) ? INFINITY : d;
	}
	*err = e / mref;
	return e <= 1e-3 * mref;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "expect-refusal", no_argument, NULL, 'r' },
		{ "no-compare", no_argument, NULL, 'n' },
		{ "hold", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	const uint32_t H = 2, D = 64, QH = 8, NT = 96, B = 2, NN = 5;
	const char *sock = NULL, *hold = NULL;
	int refusal = 0, compare = 1, ch, r, lay;
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	struct kvl_layout L;
	struct kvk_layout KL;
	struct kvl_dev_buf *buf;
	CUcontext cctx;
	CUresult cr;
	CUdeviceptr base;
	uint32_t blocks[16], *bt, *slot, *blk, ctxl[2], i, t;
	size_t row = (size_t)H * D, kvb, qn, qb;
	float *k, *v, *q, *o_host, *o_dev, *rk, *rv, *ref;
	uint8_t *lpool;
	uint16_t *hk, *hv;
	uint64_t off_k, off_v, off_hk, off_hv, off_q, off_o, off_rk;
	double err;

	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 's': sock = optarg; break;
		case 'r': refusal = 1; break;
		case 'n': compare = 0; break;
		case 'H': hold = optarg; break;
		default: return 2;
		}
	}
	r = cuda_drv_open(&drv);
	if (r) {
		printf("no CUDA driver\n");
		return 77;
	}
	r = cuda_drv_device_open(&drv, 0, &dev, &cctx, &cr);
	if (r) {
		printf("no CUDA device: %s\n", cuda_drv_strerror(&drv, cr));
		return r == -ENODEV ? 77 : 1;
	}
	memset(&o, 0, sizeof(o));
	o.socket_path = sock;
	o.region_bytes = 1 << 20;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	r = kvl_dev_buf_create(ctx, 0, 3 << 20, &buf);
	if (refusal) {
		kvl_close(ctx);
		cuda_drv_device_close(&drv, dev);
		cuda_drv_close(&drv);
		if (r != -EOPNOTSUPP)
			FAIL("registration with a cpu daemon: %d, want "
			     "-EOPNOTSUPP", r);
		printf("PASS: the cpu backend refuses device buffers\n");
		return 0;
	}
	if (r)
		FAIL("kvl_dev_buf_create: %s", strerror(-r));
	base = kvl_dev_buf_addr(buf);
	if (!base || kvl_dev_buf_size(buf) < (3 << 20) ||
	    kvl_dev_buf_size(buf) % (2 << 20))
		FAIL("buffer at %#llx of %llu bytes", (unsigned long long)base,
		     (unsigned long long)kvl_dev_buf_size(buf));
	if (hold) {
		FILE *f = fopen(hold, "w");

		if (f)
			fclose(f);
		for (;;)
			pause();
	}

	memset(&L, 0, sizeof(L));
	L.layers = 1;
	L.kv_heads = H;
	L.head_dim = D;
	L.dtype = KVL_DTYPE_FP8;
	lay = kvl_layout_declare(ctx, &L);
	if (lay < 0)
		FAIL("layout: %d", lay);
	{
		struct kvl_status st;

		kvl_status(ctx, &st);
		if (kvk_layout_init(&KL, 1, H, D, KVK_FP8, st.block_bytes))
			FAIL("local layout");
	}
	r = kvl_lease(ctx, 16, 0, 0, blocks);
	if (r != 16)
		FAIL("lease: %d", r);
	kvb = (size_t)NT * row * 4;
	qn = (size_t)B * NN * QH * D;
	qb = qn * 4;
	k = calloc(1, kvb * 4 + qb * 4);
	v = k + NT * row;
	rk = v + NT * row;
	rv = rk + NT * row;
	q = rv + NT * row;
	o_host = q + qn;
	o_dev = o_host + qn;
	ref = o_dev + qn;
	hk = calloc(NT * row * 2, 2);
	hv = hk + NT * row;
	blk = calloc(NT * 2 + B * 16, 4);
	slot = blk + NT;
	bt = slot + NT;
	lpool = calloc(16, KL.block_bytes);
	if (!k || !hk || !blk || !lpool)
		FAIL("memory");
	for (t = 0; t < NT; t++) {
		blk[t] = blocks[t / KL.tokens_per_block];
		slot[t] = t % KL.tokens_per_block;
		for (i = 0; i < row; i++) {
			k[t * row + i] = val(t, i, 1);
			v[t * row + i] = val(t, i, 2);
			hk[t * row + i] = kvk_f32_to_bf16(k[t * row + i]);
			hv[t * row + i] = kvk_f32_to_bf16(v[t * row + i]);
		}
	}
	/* the buffer: K/V FP32 [0, kvb), K/V BF16, q, out, read-back */
	off_k = 0;
	off_v = kvb;
	off_hk = 2 * kvb;
	off_hv = off_hk + kvb / 2;
	off_q = off_hv + kvb / 2;
	off_o = off_q + qb;
	off_rk = off_o + qb;
	if (off_rk + 2 * kvb > kvl_dev_buf_size(buf))
		FAIL("buffer too small");
	drv.cuMemcpyHtoD(base + off_k, k, kvb);
	drv.cuMemcpyHtoD(base + off_v, v, kvb);
	drv.cuMemcpyHtoD(base + off_hk, hk, kvb / 2);
	drv.cuMemcpyHtoD(base + off_hv, hv, kvb / 2);

	/* tokens [0, 32): FP32 from the buffer; [32, 64): host; [64, 96):
	 * BF16 from the buffer.  The local copy is written the same way. */
	r = kvl_write_kv_dev(ctx, lay, 0, 32, blk, slot, buf, off_k, off_v, 0,
			     NULL);
	if (r)
		FAIL("kvl_write_kv_dev: %s", strerror(-r));
	kvk_write_kv(&KL, lpool, 0, 32, blk, slot, k, v);
	r = kvl_write_kv(ctx, lay, 0, 32, blk + 32, slot + 32, k + 32 * row,
			 v + 32 * row);
	if (r)
		FAIL("kvl_write_kv: %s", strerror(-r));
	kvk_write_kv(&KL, lpool, 0, 32, blk + 32, slot + 32, k + 32 * row,
		     v + 32 * row);
	r = kvl_write_kv_dev(ctx, lay, 0, 32, blk + 64, slot + 64, buf,
			     off_hk + 64 * row * 2, off_hv + 64 * row * 2,
			     KVL_DEV_BF16, NULL);
	if (r)
		FAIL("kvl_write_kv_dev bf16: %s", strerror(-r));
	kvk_write_kv_bf16(&KL, lpool, 0, 32, blk + 64, slot + 64,
			  hk + 64 * row, hv + 64 * row);

	/* the buffer's checks */
	r = kvl_write_kv_dev(ctx, lay, 0, 4, blk, slot, buf, off_k + 4, off_v,
			     0, NULL);
	if (r != -EINVAL)
		FAIL("misaligned offset: %d, want -EINVAL", r);
	r = kvl_write_kv_dev(ctx, lay, 0, 4, blk, slot, buf,
			     kvl_dev_buf_size(buf) - 1024, off_v, 0, NULL);
	if (r != -EFAULT)
		FAIL("array past the buffer: %d, want -EFAULT", r);
	r = kvl_write_kv_dev(ctx, lay, 0, 4, blk, slot, buf, off_k, off_v, 2,
			     NULL);
	if (r != -EINVAL)
		FAIL("unknown flag: %d, want -EINVAL", r);

	/* read back: host path; then into the buffer */
	r = kvl_read_kv(ctx, lay, 0, NT, blk, slot, rk, rv);
	if (r)
		FAIL("kvl_read_kv: %s", strerror(-r));
	if (compare) {
		float *lk = malloc(kvb), *lv = malloc(kvb);

		kvk_read_kv(&KL, lpool, 0, NT, blk, slot, lk, lv);
		if (memcmp(lk, rk, kvb) || memcmp(lv, rv, kvb))
			FAIL("K/V written from the device buffer differ from "
			     "the reference");
		free(lk);
		free(lv);
	}
	r = kvl_read_kv_dev(ctx, lay, 0, NT, blk, slot, buf, off_rk,
			    off_rk + kvb, NULL);
	if (r)
		FAIL("kvl_read_kv_dev: %s", strerror(-r));
	if (compare) {
		float *dk = malloc(kvb);

		drv.cuMemcpyDtoH(dk, base + off_rk, kvb);
		if (memcmp(dk, rk, kvb))
			FAIL("kvl_read_kv_dev differs from kvl_read_kv");
		free(dk);
	}

	/* attention: decode (n_new 0), then multi-token (n_new NN) */
	ctxl[0] = NT;
	ctxl[1] = 40;
	for (i = 0; i < B * 16; i++)
		bt[i] = i < 16 ? blocks[i] : blocks[i - 16];
	for (i = 0; i < qn; i++)
		q[i] = val(1000 + i, 7, 3);
	drv.cuMemcpyHtoD(base + off_q, q, qb);
	for (t = 0; t < 2; t++) {
		uint32_t n_new = t ? NN : 0;
		size_t nq = (size_t)B * (n_new ? n_new : 1) * QH * D;
		struct kvl_attn_args a = {
			.layer = 0, .batch = B, .q_heads = QH,
			.max_blocks_per_seq = 16, .n_new = n_new, .q = q,
			.block_tables = bt, .ctx_lens = ctxl, .out = o_host,
		};
		struct kvk_prefill_args pa = {
			.layout = &KL, .pool_base = lpool, .layer = 0,
			.batch = B, .q_heads = QH, .max_blocks_per_seq = 16,
			.n_new = n_new, .q = q, .block_tables = bt,
			.ctx_lens = ctxl, .scale = 1.0f / sqrtf(D), .out = ref,
		};

		r = kvl_attention(ctx, lay, &a);
		if (r)
			FAIL("kvl_attention: %s", strerror(-r));
		r = kvl_attention_dev(ctx, lay, &a, buf, off_q, off_o, NULL);
		if (r)
			FAIL("kvl_attention_dev: %s", strerror(-r));
		drv.cuMemcpyDtoH(o_dev, base + off_o, nq * 4);
		if (!compare)
			continue;
		if (memcmp(o_dev, o_host, nq * 4))
			FAIL("%s: device-buffer output differs from the host "
			     "path", n_new ? "prefill" : "decode");
		if (n_new)
			kvk_prefill_ref(&pa);
		else
			kvk_decode_ref(&(struct kvk_decode_args){
				.layout = &KL, .pool_base = lpool, .layer = 0,
				.batch = B, .q_heads = QH,
				.max_blocks_per_seq = 16, .q = q,
				.block_tables = bt, .ctx_lens = ctxl,
				.scale = 1.0f / sqrtf(D), .out = ref });
		if (!close_to(o_dev, ref, nq, &err))
			FAIL("%s: error %g against the reference",
			     n_new ? "prefill" : "decode", err);
		printf("%s through the device buffer: equal to the host path, "
		       "%.2e from the reference\n", n_new ? "prefill" : "decode",
		       err);
	}
	{
		struct kvl_attn_args a = {
			.layer = 0, .batch = B, .q_heads = QH,
			.max_blocks_per_seq = 16, .block_tables = bt,
			.ctx_lens = ctxl,
		};

		r = kvl_attention_dev(ctx, lay, &a, buf, off_q + 8, off_o, NULL);
		if (r != -EINVAL)
			FAIL("misaligned q: %d, want -EINVAL", r);
		r = kvl_attention_dev(ctx, lay, &a, buf, off_q,
				      kvl_dev_buf_size(buf) - 64, NULL);
		if (r != -EFAULT)
			FAIL("out past the buffer: %d, want -EFAULT", r);
	}
	{
		/* one sequence of two blocks, the same one twice */
		uint32_t rt[2] = { blocks[0], blocks[0] };
		uint32_t rc = 2 * KL.tokens_per_block;
		struct kvl_attn_args a = {
			.layer = 0, .batch = 1, .q_heads = QH,
			.max_blocks_per_seq = 2, .block_tables = rt,
			.ctx_lens = &rc,
		};

		r = kvl_attention_dev(ctx, lay, &a, buf, off_q, off_o, NULL);
		if (r != -EINVAL)
			FAIL("a block twice in one sequence: %d, want -EINVAL",
			     r);
	}
	{
		/* 4096 sequences of 16 distinct blocks, 32 query heads:
		 * 2^35 multiply-adds, refused before any work */
		const uint32_t nb = 4096, qh = 32;
		uint32_t *tt = malloc((size_t)nb * 16 * 4), *tc = malloc(nb * 4);
		uint64_t qbytes = (uint64_t)nb * qh * D * 4;
		struct kvl_dev_buf *big;
		struct kvl_attn_args a = {
			.layer = 0, .batch = nb, .q_heads = qh,
			.max_blocks_per_seq = 16, .block_tables = tt,
			.ctx_lens = tc,
		};

		if (!tt || !tc)
			FAIL("memory");
		for (i = 0; i < nb; i++) {
			memcpy(tt + (size_t)i * 16, blocks, 16 * 4);
			tc[i] = 16 * KL.tokens_per_block;
		}
		r = kvl_dev_buf_create(ctx, 0, 2 * qbytes, &big);
		if (r)
			FAIL("kvl_dev_buf_create %llu: %s",
			     (unsigned long long)(2 * qbytes), strerror(-r));
		r = kvl_attention_dev(ctx, lay, &a, big, 0, qbytes, NULL);
		if (r != -E2BIG)
			FAIL("work beyond the bound: %d, want -E2BIG", r);
		kvl_dev_buf_free(big);
		free(tt);
		free(tc);
		printf("attention through the device buffer: a repeated block "
		       "-EINVAL, too much work -E2BIG\n");
	}
	kvl_dev_buf_free(buf);
	kvl_close(ctx);
	free(k);
	free(hk);
	free(blk);
	free(lpool);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	printf("PASS: device buffers (%s)\n", compare ? "results compared" :
	       "calls only");
	return 0;
}
