// SPDX-License-Identifier: MIT
/*
 * test-kvk-gpu.c - every kernels op on the GPU against the CPU.
 *
 *   write (FP32 and BF16 input): the pool bytes after the same chunked
 *       writes are identical on GPU and CPU (same rounding, same scale
 *       rule), starting from the same garbage;
 *   read: identical floats;
 *   decode, prefill: relative L2 error vs the CPU scalar reference
 *       <= 1e-4 over head_dim {64,128,256} x GQA {1,4,8} x context
 *       {1,15,16,17,1000,8192} (tokens per block rotating), every dtype,
 *       plus one 131,072-token decode per dtype;
 *   copy blocks: identical bytes.
 * Exit 77 without libcuda, a device or the fatbin.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"
#include "kvkern_cuda.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static struct cuda_drv drv;
static struct kvk_cuda *kc;

static int dev_pool(const struct kt_batch *kb, CUdeviceptr *d)
{
	size_t bytes = (size_t)kb->nblocks * kb->l.block_bytes;

	if (drv.cuMemAlloc(d, bytes) != CUDA_SUCCESS)
		return -ENOMEM;
	if (drv.cuMemcpyHtoD(*d, kb->pool, bytes) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

/* write + read: GPU bytes == CPU bytes */
static void check_write(uint32_t dtype, uint32_t D, uint32_t tpb, int bf16)
{
	uint32_t H = 2, n = 300, t, c0, c1, nb;
	struct kvk_layout l;
	uint8_t *cpu, *back;
	uint32_t *blk, *slot;
	float *k, *v, *rk, *rv, *gk, *gv;
	uint16_t *hk, *hv;
	size_t rows = (size_t)n * H * D, bytes, i, diff = 0;
	CUdeviceptr d;

	if (kvk_layout_init(&l, 2, H, D, dtype, kt_block_bytes(2, H, D, dtype,
							       tpb)))
		return;
	nb = n / l.tokens_per_block + 2;
	bytes = (size_t)nb * l.block_bytes;
	cpu = malloc(bytes);
	back = malloc(bytes);
	blk = malloc(sizeof(uint32_t) * n * 2);
	slot = blk + n;
	k = malloc(sizeof(float) * rows * 6);
	v = k + rows;
	rk = v + rows;
	rv = rk + rows;
	gk = rv + rows;
	gv = gk + rows;
	hk = malloc(sizeof(uint16_t) * rows * 2);
	hv = hk + rows;
	for (i = 0; i < bytes; i++)
		cpu[i] = (uint8_t)(i * 2654435761u >> 11);
	for (i = 0; i < rows; i++) {
		k[i] = kt_gauss() * (1 + (i % 97 == 0) * 30);
		v[i] = kt_gauss();
		hk[i] = kvk_f32_to_bf16(k[i]);
		hv[i] = kvk_f32_to_bf16(v[i]);
	}
	k[5] = NAN;
	v[7] = INFINITY;
	for (t = 0; t < n; t++) {
		blk[t] = (nb - 1) - t / l.tokens_per_block;
		slot[t] = t % l.tokens_per_block;
	}
	drv.cuMemAlloc(&d, bytes);
	drv.cuMemcpyHtoD(d, cpu, bytes);
	for (c0 = 0; c0 < n; c0 = c1) {
		c1 = c0 + 1 + kt_below(40);
		if (c1 > n)
			c1 = n;
		if (bf16) {
			KT_CHECK(kvk_write_kv_bf16(&l, cpu, 1, c1 - c0, blk + c0,
				 slot + c0, hk + c0 * H * D, hv + c0 * H * D) ==
				 0, "cpu write");
			KT_CHECK(kvk_cuda_write_kv_bf16(kc, &l, d, 1, c1 - c0,
				 blk + c0, slot + c0, hk + c0 * H * D,
				 hv + c0 * H * D) == 0, "gpu write");
		} else {
			KT_CHECK(kvk_write_kv(&l, cpu, 1, c1 - c0, blk + c0,
				 slot + c0, k + c0 * H * D, v + c0 * H * D) == 0,
				 "cpu write");
			KT_CHECK(kvk_cuda_write_kv(kc, &l, d, 1, c1 - c0,
				 blk + c0, slot + c0, k + c0 * H * D,
				 v + c0 * H * D) == 0, "gpu write");
		}
	}
	drv.cuMemcpyDtoH(back, d, bytes);
	for (i = 0; i < bytes; i++)
		diff += cpu[i] != back[i];
	KT_CHECK(diff == 0, "write %s D=%u tpb=%u bf16in=%d: %zu bytes differ",
		 kvk_dtype_name(dtype), D, tpb, bf16, diff);
	kvk_read_kv(&l, cpu, 1, n, blk, slot, rk, rv);
	KT_CHECK(kvk_cuda_read_kv(kc, &l, d, 1, n, blk, slot, gk, gv) == 0,
		 "gpu read");
	diff = 0;
	for (i = 0; i < rows; i++)	/* NaN payloads may differ */
		diff += !((isnan(rk[i]) && isnan(gk[i])) ||
			  !memcmp(&rk[i], &gk[i], 4)) ||
			!((isnan(rv[i]) && isnan(gv[i])) ||
			  !memcmp(&rv[i], &gv[i], 4));
	KT_CHECK(diff == 0, "read %s: %zu values differ",
		 kvk_dtype_name(dtype), diff);
	/* copy blocks: 0 -> 1, then 1 -> 2 (in order) */
	{
		uint32_t src[2] = { nb - 1, nb - 2 }, dst[2] = { nb - 2, 0 };

		kvk_copy_blocks(cpu, l.block_bytes, nb, src, dst, 2);
		KT_CHECK(kvk_cuda_copy_blocks(kc, d, l.block_bytes, nb, src,
					      dst, 2) == 0, "gpu copy");
		drv.cuMemcpyDtoH(back, d, bytes);
		diff = 0;
		for (i = 0; i < bytes; i++)
			diff += cpu[i] != back[i];
		KT_CHECK(diff == 0, "copy: %zu bytes differ", diff);
	}
	drv.cuMemFree(d);
	free(cpu);
	free(back);
	free(blk);
	free(k);
	free(hk);
}

static double check_attn(uint32_t dtype, uint32_t D, uint32_t G, uint32_t C,
			 uint32_t tpb, uint32_t n_new, uint32_t batch)
{
	uint32_t H = G == 8 ? 1 : 2, ctx[64], b;
	struct kt_batch kb;
	size_t nq, i;
	float *q, *o_cpu, *o_gpu;
	CUdeviceptr d;
	double e = INFINITY;
	int ret;

	for (b = 0; b < batch; b++)
		ctx[b] = b == 0 || C < 4 ? C : C / 3 + kt_below(C / 2);
	if (n_new > ctx[batch - 1])
		n_new = ctx[batch - 1];
	for (b = 0; b < batch; b++)
		if (ctx[b] < n_new)
			ctx[b] = n_new;
	ret = kt_batch_init(&kb, 2, H, D, dtype, tpb, batch, ctx, G, 1);
	if (ret) {
		KT_CHECK(0, "batch init %d", ret);
		return e;
	}
	nq = (size_t)batch * (n_new ? n_new : 1) * H * G * D;
	q = malloc(sizeof(float) * nq * 3);
	o_cpu = q + nq;
	o_gpu = o_cpu + nq;
	for (i = 0; i < nq; i++)
		q[i] = kt_gauss();
	if (dev_pool(&kb, &d)) {
		KT_CHECK(0, "device pool");
		goto out;
	}
	if (n_new) {
		struct kvk_prefill_args a = {
			.layout = &kb.l, .pool_base = kb.pool, .layer = 1,
			.batch = batch, .q_heads = H * G,
			.max_blocks_per_seq = kb.mbps, .n_new = n_new, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 1.0f / sqrtf(D), .out = o_cpu,
		};
		KT_CHECK(kvk_prefill_ref(&a) == 0, "cpu prefill");
		a.pool_base = (void *)(uintptr_t)d;
		a.out = o_gpu;
		KT_CHECK(kvk_cuda_prefill(kc, &a) == 0, "gpu prefill");
	} else {
		struct kvk_decode_args a = {
			.layout = &kb.l, .pool_base = kb.pool, .layer = 1,
			.batch = batch, .q_heads = H * G,
			.max_blocks_per_seq = kb.mbps, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 1.0f / sqrtf(D), .out = o_cpu,
		};
		if (C > 10000)
			KT_CHECK(kvk_decode(&a, NULL) == 0, "cpu decode");
		else
			KT_CHECK(kvk_decode_ref(&a) == 0, "cpu decode");
		a.pool_base = (void *)(uintptr_t)d;
		a.out = o_gpu;
		KT_CHECK(kvk_cuda_decode(kc, &a) == 0, "gpu decode");
	}
	e = kt_rel_err_f(o_gpu, o_cpu, nq);
	KT_CHECK(e <= 1e-4, "%s %s D=%u G=%u ctx=%u tpb=%u n_new=%u: "
		 "gpu vs cpu %.2e", n_new ? "prefill" : "decode",
		 kvk_dtype_name(dtype), D, G, C, tpb, n_new, e);
	drv.cuMemFree(d);
out:
	free(q);
	kt_batch_free(&kb);
	return e;
}

int main(void)
{
	static const uint32_t dims[] = { 64, 128, 256 }, gs[] = { 1, 4, 8 };
	static const uint32_t ctxs[] = { 1, 15, 16, 17, 1000, 8192 };
	static const uint32_t tpbs[] = { 16, 7, 1, 64, 33 };
	static const uint32_t nns[] = { 1, 7, 33, 4 };
	CUdevice dev;
	CUcontext ctx;
	uint32_t dt, di, gi, ci, n = 0;
	char name[128] = "";
	int ret;

	kt_align16 = 1;
	ret = cuda_drv_open(&drv);
	if (ret) {
		printf("no CUDA driver (libcuda.so.1): %d\n", ret);
		return 77;
	}
	ret = cuda_drv_device_open(&drv, 0, &dev, &ctx);
	if (ret) {
		printf("no CUDA device: %d\n", ret);
		return 77;
	}
	drv.cuDeviceGetName(name, sizeof(name), dev);
	printf("device: %s, driver %d\n", name, drv.driver_version);
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret == -ENOENT) {
		printf("no %s (build it with nvcc)\n", KVK_FATBIN_NAME);
		return 77;
	}
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		return 1;
	}
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		double wd = 0, wp = 0, e;

		check_write(dt, 64, 16, 0);
		check_write(dt, 128, 7, 1);
		check_write(dt, 256, 33, 0);
		for (di = 0; di < N(dims); di++)
			for (gi = 0; gi < N(gs); gi++)
				for (ci = 0; ci < N(ctxs); ci++, n++) {
					uint32_t tpb = tpbs[n % N(tpbs)];
					uint32_t nn = nns[n % N(nns)];

					e = check_attn(dt, dims[di], gs[gi],
						       ctxs[ci], tpb, 0, 3);
					wd = e > wd ? e : wd;
					if (ctxs[ci] > 1000 && nn > 8)
						nn = 8;
					e = check_attn(dt, dims[di], gs[gi],
						       ctxs[ci], tpb, nn, 2);
					wp = e > wp ? e : wp;
				}
		e = check_attn(dt, 128, 4, 131072, 16, 0, 1);
		wd = e > wd ? e : wd;
		printf("%-5s worst gpu vs cpu: decode %.2e prefill %.2e\n",
		       kvk_dtype_name(dt), wd, wp);
		fflush(stdout);
	}
	kvk_cuda_free(kc);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	printf("%u cases, %d failures\n", n, kt_failures);
	return kt_failures ? 1 : 0;
}
