// SPDX-License-Identifier: MIT
/*
 * bench-kvk-gpu - GPU decode attention against the GPU's read bandwidth.
 *
 * Same shapes as kvpool-bench-kernels: per dtype, context {1K, 8K, 32K,
 * 128K} x batch {1, 16, 64}, 32 query heads, 8 KV heads, head_dim 128, one
 * layer, 16 tokens per block.  Every sequence has its own blocks (64 x
 * 128K BF16 tokens = 32 GiB fits an H200); when device memory is short
 * the block tables wrap around the pool (see kernels/bench-kernels.c).
 * The read bandwidth comes from a plain 16-byte-load kernel over 4 GiB in
 * the same run.  Prints a table, then one JSON line like the CPU bench.
 * Exit 77 without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvkern.h"
#include "kvkern_cuda.h"

#define QH 32
#define KVH 8
#define D 128
#define TPB 16

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct result {
	uint32_t dtype, ctx, batch;
	double gbps;
};

int main(void)
{
	static const uint32_t ctxs[] = { 1024, 8192, 32768, 131072 };
	static const uint32_t batches[] = { 1, 16, 64 };
	struct result res[48];
	struct cuda_drv drv;
	struct kvk_cuda *kc;
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr bw, pool, dq, dout, dtab;
	size_t free_b = 0, total_b = 0, bw_bytes = (size_t)4 << 30;
	double read_bw = 0;
	char name[128] = "";
	uint32_t dt, ci, bi;
	int nres = 0, i, ret;

	if (cuda_drv_open(&drv) || cuda_drv_device_open(&drv, 0, &dev, &ctx)) {
		printf("no CUDA device\n");
		return 77;
	}
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		return ret == -ENOENT ? 77 : 1;
	}
	drv.cuDeviceGetName(name, sizeof(name), dev);
	drv.cuMemGetInfo(&free_b, &total_b);
	if (drv.cuMemAlloc(&bw, bw_bytes) == CUDA_SUCCESS) {
		drv.cuMemsetD8(bw, 1, bw_bytes);
		kvk_cuda_read_bw(kc, bw, bw_bytes, 20, &read_bw);
		drv.cuMemFree(bw);
	}
	printf("bench-kvk-gpu: %s, %.1f GiB free\n", name, free_b / 1073741824.0);
	printf("device read bandwidth: %.1f GB/s\n", read_bw);
	printf("%-5s %7s %5s %10s %10s %7s %6s\n", "dtype", "ctx", "batch",
	       "KV MiB", "KV GB/s", "ratio", "iters");
	fflush(stdout);
	drv.cuMemAlloc(&dq, sizeof(float) * 64 * QH * D);
	drv.cuMemAlloc(&dout, sizeof(float) * 64 * QH * D);
	drv.cuMemsetD8(dq, 0x3c, sizeof(float) * 64 * QH * D);
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		struct kvk_layout l;
		uint64_t pt, fx, need, nblocks;

		kvk_layout_cost(1, KVH, D, dt, &pt, &fx);
		kvk_layout_init(&l, 1, KVH, D, dt, fx + pt * TPB);
		need = (uint64_t)131072 / TPB * 64;
		drv.cuMemGetInfo(&free_b, &total_b);
		nblocks = (free_b - ((size_t)2 << 30)) / l.block_bytes;
		if (nblocks > need)
			nblocks = need;
		if (drv.cuMemAlloc(&pool, nblocks * l.block_bytes) !=
		    CUDA_SUCCESS) {
			printf("pool allocation failed\n");
			return 1;
		}
		/* 0x3c: valid BF16/FP8/INT8 values and valid scales */
		drv.cuMemsetD8(pool, 0x3c, nblocks * l.block_bytes);
		drv.cuMemAlloc(&dtab, sizeof(uint32_t) * need);
		for (ci = 0; ci < 4; ci++)
			for (bi = 0; bi < 3; bi++) {
				uint32_t C = ctxs[ci], B = batches[bi];
				uint32_t mbps = C / TPB, *tab, cl[64], b, j;
				struct kvk_decode_args a;
				double t0, t, bytes;
				int iters = 0;

				tab = malloc(sizeof(uint32_t) * B * mbps);
				for (b = 0; b < B; b++) {
					cl[b] = C;
					for (j = 0; j < mbps; j++)
						tab[b * mbps + j] = (uint32_t)
							(((uint64_t)b * mbps + j) *
							 2654435761u % nblocks);
				}
				drv.cuMemcpyHtoD(dtab, tab, sizeof(uint32_t) * B *
						 mbps);
				memset(&a, 0, sizeof(a));
				a.layout = &l;
				a.pool_base = (void *)(uintptr_t)pool;
				a.batch = B;
				a.q_heads = QH;
				a.max_blocks_per_seq = mbps;
				a.q = (const float *)(uintptr_t)dq;
				a.block_tables = (const uint32_t *)(uintptr_t)dtab;
				a.ctx_lens = cl;
				a.scale = 1.0f / sqrtf(D);
				a.out = (float *)(uintptr_t)dout;
				bytes = (double)C * B * l.bytes_per_token;
				ret = kvk_cuda_decode_dev(kc, &a);	/* warm-up */
				drv.cuCtxSynchronize();
				t0 = now_s();
				do {
					ret |= kvk_cuda_decode_dev(kc, &a);
					iters++;
					if (iters % 8 == 0)
						drv.cuCtxSynchronize();
					t = now_s() - t0;
				} while (!ret && (t < 0.2 || iters % 8));
				drv.cuCtxSynchronize();
				t = now_s() - t0;
				if (ret) {
					printf("decode failed: %d\n", ret);
					return 1;
				}
				res[nres].dtype = dt;
				res[nres].ctx = C;
				res[nres].batch = B;
				res[nres].gbps = bytes * iters / t / 1e9;
				printf("%-5s %7u %5u %10.1f %10.1f %7.3f %6d\n",
				       kvk_dtype_name(dt), C, B, bytes / 1048576.0,
				       res[nres].gbps, res[nres].gbps / read_bw,
				       iters);
				fflush(stdout);
				nres++;
				free(tab);
			}
		drv.cuMemFree(dtab);
		drv.cuMemFree(pool);
	}
	printf("{\"device\": \"%s\", \"read_gbps\": %.1f, \"results\": [", name,
	       read_bw);
	for (i = 0; i < nres; i++)
		printf("%s{\"dtype\": \"%s\", \"ctx\": %u, \"batch\": %u, "
		       "\"gbps\": %.1f, \"ratio\": %.3f}", i ? ", " : "",
		       kvk_dtype_name(res[i].dtype), res[i].ctx, res[i].batch,
		       res[i].gbps, res[i].gbps / read_bw);
	printf("]}\n");
	kvk_cuda_free(kc);
	cuda_drv_device_close(&drv, dev);
	return 0;
}
