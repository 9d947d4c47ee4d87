// SPDX-License-Identifier: MIT
/*
 * bench-kvk-gpu - GPU decode attention against the GPU's read bandwidth,
 * and the latency of growing and shrinking the pool by one chunk.
 *
 * Decode shapes as kvpool-bench-kernels: per dtype, context {1K, 8K, 32K,
 * 128K} x batch {1, 16, 64}, 32 query heads, 8 KV heads (GQA 4), head_dim
 * 128, one layer, 16 tokens per block, plus a GQA 8 row (64 query heads,
 * as Llama-3.1-70B) at 32K x 16.  Every sequence has its own blocks
 * (64 x 128K BF16 tokens = 32 GiB fits an H200); when device memory is
 * short the block tables wrap around the pool (as kernels/bench-kernels.c
 * does).  Queries, tables and lengths are uploaded once per shape, the
 * launch is planned once (kvk_cuda_plan_decode), and launches are timed
 * with CUDA events on the glue's stream.  The read bandwidth comes from a
 * 16-byte-load kernel over 4 GiB, and the copy bandwidth from
 * cuMemcpyDtoDAsync, both in the same run.  KV GB/s counts the bytes of
 * KV a call reads (positions x bytes per token).
 *
 * Chunks: daemon/cuda_chunks.c with the daemon's default chunk (64 blocks
 * of 256 KiB = 16 MiB): grow with cuMemCreate, grow from a spare handle,
 * shrink into the spares, shrink with cuMemRelease; p50 and p99 of 100.
 *
 * Prints tables, the judgement at 32K x 16 (judge()), then one JSON
 * line.  Exit 77 without a driver or device;
 * -q: fewer shapes (1K and 32K only).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvkern.h"
#include "kvkern_cuda.h"
#include "cuda_chunks.h"

#define KVH 8
#define D 128
#define TPB 16

static struct cuda_drv drv;
static struct kvk_cuda *kc;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct result {
	uint32_t dtype, ctx, batch, qh;
	double gbps, us;
};

/* ms between two events around fn(arg) repeated n times */
static int time_launches(const struct kvk_cuda_plan *pl, int n, double *ms)
{
	CUevent e0, e1;
	float t = 0;
	int i, ret = 0;

	if (drv.cuEventCreate(&e0, CU_EVENT_DEFAULT) ||
	    drv.cuEventCreate(&e1, CU_EVENT_DEFAULT))
		return -EIO;
	drv.cuEventRecord(e0, kvk_cuda_stream(kc));
	for (i = 0; i < n && !ret; i++)
		ret = kvk_cuda_plan_launch(kc, pl);
	drv.cuEventRecord(e1, kvk_cuda_stream(kc));
	if (drv.cuEventSynchronize(e1) || drv.cuEventElapsedTime(&t, e0, e1))
		ret = ret ? ret : -EIO;
	drv.cuEventDestroy(e0);
	drv.cuEventDestroy(e1);
	*ms = t;
	return ret;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void pct(double *v, int n, double *p50, double *p99)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	*p50 = v[n / 2];
	*p99 = v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
}

/* grow/shrink latency of one chunk, in microseconds */
static int bench_chunks(CUdevice dev, double out[8])
{
	enum { N = 100 };
	static double t[4][N];
	struct kvd_chunks k;
	uint64_t chunk = 64ULL * 256 * 1024;
	int i, r;

	r = kvd_chunks_init(&k, &drv, dev, chunk, 4, 1);
	if (r)
		return r;
	for (i = 0; i < N && !r; i++) {
		double a, b;

		kvd_chunks_trim(&k, 0);
		a = now_s();
		r = kvd_chunks_map(&k, 0);		/* cuMemCreate */
		b = now_s();
		t[0][i] = (b - a) * 1e6;
		k.spare_max = 1;
		r = r ? r : kvd_chunks_unmap(&k, 0);	/* into the spare */
		t[2][i] = (now_s() - b) * 1e6;
		a = now_s();
		r = r ? r : kvd_chunks_map(&k, 0);	/* from the spare */
		b = now_s();
		t[1][i] = (b - a) * 1e6;
		k.spare_max = 0;
		r = r ? r : kvd_chunks_unmap(&k, 0);	/* cuMemRelease */
		t[3][i] = (now_s() - b) * 1e6;
		k.spare_max = 1;
	}
	for (i = 0; i < 4 && !r; i++)
		pct(t[i], N, &out[2 * i], &out[2 * i + 1]);
	kvd_chunks_fini(&k);
	return r;
}

/*
 * The judgement at 32K x 16 (GQA 4): BF16 decode should read KV at 0.85
 * of the same run's read kernel's bandwidth, FP8 and INT8 at 0.7; INT4,
 * which stores 3.6x fewer bytes than BF16 but spends more instructions
 * per byte, should reach 3x BF16's tokens per second.  One line per
 * dtype, "falls short" where it does.
 */
static void judge(const struct result *res, int nres, double read_bw)
{
	const struct result *at[KVK_INT4 + 1] = { NULL };
	uint32_t dt;
	int i;

	for (i = 0; i < nres; i++)
		if (res[i].ctx == 32768 && res[i].batch == 16 &&
		    res[i].qh == 4 * KVH && res[i].dtype <= KVK_INT4)
			at[res[i].dtype] = &res[i];
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		const struct result *r = at[dt];
		double v, target;
		const char *what;

		if (!r || read_bw <= 0 || (dt == KVK_INT4 && !at[KVK_BF16])) {
			printf("judge %-5s 32K x 16: not measured\n",
			       kvk_dtype_name(dt));
			continue;
		}
		if (dt == KVK_INT4) {
			/* the same positions per call: tokens/s ratio */
			v = at[KVK_BF16]->us / r->us;
			target = 3.0;
			what = "x BF16's tokens/s";
		} else {
			v = r->gbps / read_bw;
			target = dt == KVK_BF16 ? 0.85 : 0.7;
			what = " of the read kernel's bandwidth";
		}
		printf("judge %-5s 32K x 16: %.3f%s, target %.2f%s: %s\n",
		       kvk_dtype_name(dt), v, what, target,
		       dt == KVK_INT4 ? "x" : "",
		       v >= target ? "meets it" : "falls short");
	}
}

int main(int argc, char **argv)
{
	static const uint32_t ctxs[] = { 1024, 8192, 32768, 131072 };
	static const uint32_t batches[] = { 1, 16, 64 };
	int quick = argc > 1 && !strcmp(argv[1], "-q");
	struct result res[64];
	struct kvk_cuda_info info;
	CUdevice dev;
	CUcontext ctx;
	CUresult cr;
	CUdeviceptr bw, pool, dq, dout, dtab, dctx;
	size_t free_b = 0, total_b = 0, bw_bytes;
	double read_bw = 0, copy_bw = 0, ch[8] = { 0 };
	uint32_t dt, ci, bi, *tab;
	int nres = 0, i, ret;
	char desc[192] = "";

	ret = cuda_drv_open(&drv);
	if (ret) {
		printf("no usable CUDA driver: %d %s\n", ret, cuda_drv_missing());
		return ret == -ENODEV ? 77 : 1;
	}
	ret = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
	if (ret) {
		printf("no CUDA device: %s\n", cuda_drv_strerror(&drv, cr));
		return ret == -ENODEV ? 77 : 1;
	}
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		return ret == -ENOENT ? 77 : 1;
	}
	kvk_cuda_info(kc, &info);
	drv.cuMemGetInfo(&free_b, &total_b);
	printf("bench-kvk-gpu: %s, sm_%d%d, %d SMs, driver %d, %.1f of %.1f "
	       "GiB free\n", info.device, info.cc_major, info.cc_minor,
	       info.sm_count, info.driver_version, free_b / 1073741824.0,
	       total_b / 1073741824.0);
	/* bandwidth: read kernel, and copy engine */
	bw_bytes = free_b / 4 < ((size_t)4 << 30) ? (free_b / 4) & ~(size_t)15 :
		   (size_t)4 << 30;
	if (drv.cuMemAlloc(&bw, bw_bytes) == CUDA_SUCCESS) {
		CUevent e0, e1;
		float ms = 0;

		/* legacy-stream work, which the glue's non-blocking stream
		 * does not wait for: synchronise before using it there */
		drv.cuMemsetD8(bw, 1, bw_bytes);
		drv.cuCtxSynchronize();
		kvk_cuda_read_bw(kc, bw, bw_bytes, 20, &read_bw);
		drv.cuEventCreate(&e0, CU_EVENT_DEFAULT);
		drv.cuEventCreate(&e1, CU_EVENT_DEFAULT);
		drv.cuMemcpyDtoDAsync(bw + bw_bytes / 2, bw, bw_bytes / 2,
				      kvk_cuda_stream(kc));
		drv.cuEventRecord(e0, kvk_cuda_stream(kc));
		for (i = 0; i < 10; i++)
			drv.cuMemcpyDtoDAsync(bw + bw_bytes / 2, bw,
					      bw_bytes / 2, kvk_cuda_stream(kc));
		drv.cuEventRecord(e1, kvk_cuda_stream(kc));
		drv.cuEventSynchronize(e1);
		drv.cuEventElapsedTime(&ms, e0, e1);
		/* read + write bytes per second */
		copy_bw = ms > 0 ? 2.0 * (bw_bytes / 2) * 10 / (ms * 1e-3) / 1e9 : 0;
		drv.cuEventDestroy(e0);
		drv.cuEventDestroy(e1);
		drv.cuMemFree(bw);
	}
	printf("device read bandwidth: %.1f GB/s (16-byte-load kernel); copy "
	       "%.1f GB/s read+write (cuMemcpyDtoD)\n", read_bw, copy_bw);
	fflush(stdout);
	if (drv.cuMemAlloc(&dq, sizeof(float) * 64 * 64 * D) ||
	    drv.cuMemAlloc(&dout, sizeof(float) * 64 * 64 * D) ||
	    drv.cuMemAlloc(&dctx, sizeof(uint32_t) * 64)) {
		printf("allocation failed\n");
		return 1;
	}
	drv.cuMemsetD8(dq, 0x3c, sizeof(float) * 64 * 64 * D);
	drv.cuCtxSynchronize();
	printf("%-5s %7s %5s %3s %10s %10s %9s %7s\n", "dtype", "ctx", "batch",
	       "gqa", "KV MiB", "KV GB/s", "us/call", "ratio");
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		struct kvk_layout l;
		uint64_t pt, fx, need, nblocks;

		kvk_layout_cost(1, KVH, D, dt, &pt, &fx);
		kvk_layout_init(&l, 1, KVH, D, dt, (fx + pt * TPB + 15) / 16 * 16);
		need = (uint64_t)131072 / TPB * 64;
		drv.cuMemGetInfo(&free_b, &total_b);
		nblocks = (free_b - ((size_t)3 << 30)) / l.block_bytes;
		if (nblocks > need)
			nblocks = need;
		if (drv.cuMemAlloc(&pool, nblocks * l.block_bytes) !=
		    CUDA_SUCCESS) {
			printf("pool allocation failed\n");
			return 1;
		}
		/* 0x3c: valid BF16/FP8/INT8 values and valid scales */
		drv.cuMemsetD8(pool, 0x3c, nblocks * l.block_bytes);
		drv.cuCtxSynchronize();
		drv.cuMemAlloc(&dtab, sizeof(uint32_t) * need);
		tab = malloc(sizeof(uint32_t) * need);
		for (ci = 0; ci < 4; ci++)
			for (bi = 0; bi < 4; bi++) {
				/* bi 3: the GQA 8 row, 32K x 16 */
				uint32_t C = bi == 3 ? 32768 : ctxs[ci];
				uint32_t B = bi == 3 ? 16 : batches[bi];
				uint32_t QH = bi == 3 ? 8 * KVH : 4 * KVH;
				uint32_t mbps = C / TPB, cl[64], b, j;
				struct kvk_decode_args a;
				struct kvk_cuda_plan *pl;
				double ms = 0, bytes;
				int n = 1;

				if (bi == 3 && ci != 2)
					continue;
				if (quick && ci != 0 && ci != 2)
					continue;
				for (b = 0; b < B; b++) {
					cl[b] = C;
					for (j = 0; j < mbps; j++)
						tab[b * mbps + j] = (uint32_t)
							(((uint64_t)b * mbps + j) *
							 2654435761u % nblocks);
				}
				drv.cuMemcpyHtoD(dtab, tab, sizeof(uint32_t) * B *
						 mbps);
				drv.cuMemcpyHtoD(dctx, cl, sizeof(uint32_t) * B);
				drv.cuCtxSynchronize();
				memset(&a, 0, sizeof(a));
				a.layout = &l;
				a.pool_base = (void *)(uintptr_t)pool;
				a.batch = B;
				a.q_heads = QH;
				a.max_blocks_per_seq = mbps;
				a.q = (const float *)(uintptr_t)dq;
				a.block_tables = (const uint32_t *)(uintptr_t)dtab;
				a.ctx_lens = (const uint32_t *)(uintptr_t)dctx;
				a.scale = 1.0f / sqrtf(D);
				a.out = (float *)(uintptr_t)dout;
				bytes = (double)C * B * l.bytes_per_token;
				ret = kvk_cuda_plan_decode(kc, &a, C, &pl);
				if (ret) {
					printf("plan failed: %d\n", ret);
					return 1;
				}
				if (C == 32768 && B == 16 && QH == 4 * KVH &&
				    dt == KVK_BF16)
					kvk_cuda_plan_describe(pl, desc,
							       sizeof(desc));
				/* warm-up, then enough launches for 50 ms */
				ret = time_launches(pl, 2, &ms);
				while (!ret && ms < 50 && n < 1 << 16) {
					n = ms > 0.5 ? (int)(n * 60 / ms) + 1 : n * 8;
					ret = time_launches(pl, n, &ms);
				}
				kvk_cuda_plan_free(kc, pl);
				if (ret) {
					printf("decode failed: %d\n", ret);
					return 1;
				}
				res[nres].dtype = dt;
				res[nres].ctx = C;
				res[nres].batch = B;
				res[nres].qh = QH;
				res[nres].us = ms * 1e3 / n;
				res[nres].gbps = bytes * n / (ms * 1e-3) / 1e9;
				printf("%-5s %7u %5u %3u %10.1f %10.1f %9.1f %7.3f\n",
				       kvk_dtype_name(dt), C, B, QH / KVH,
				       bytes / 1048576.0, res[nres].gbps,
				       res[nres].us, read_bw > 0 ?
				       res[nres].gbps / read_bw : 0);
				fflush(stdout);
				nres++;
			}
		free(tab);
		drv.cuMemFree(dtab);
		drv.cuMemFree(pool);
	}
	drv.cuMemFree(dq);
	drv.cuMemFree(dout);
	drv.cuMemFree(dctx);
	printf("plan at 32K x 16 (bf16): %s\n", desc);
	judge(res, nres, read_bw);
	ret = bench_chunks(dev, ch);
	if (ret) {
		printf("chunk benchmark failed: %d\n", ret);
	} else {
		printf("chunk of 16 MiB (us, p50 / p99 of 100):\n");
		printf("  grow, cuMemCreate + map + access + zero  %8.1f / %8.1f\n",
		       ch[0], ch[1]);
		printf("  grow from a spare handle                 %8.1f / %8.1f\n",
		       ch[2], ch[3]);
		printf("  shrink into the spares (unmap)           %8.1f / %8.1f\n",
		       ch[4], ch[5]);
		printf("  shrink and cuMemRelease                  %8.1f / %8.1f\n",
		       ch[6], ch[7]);
	}
	printf("{\"device\": \"%s\", \"sm\": %d%d, \"read_gbps\": %.1f, "
	       "\"copy_gbps\": %.1f, \"chunk_us\": {\"grow_p50\": %.1f, "
	       "\"grow_p99\": %.1f, \"grow_spare_p50\": %.1f, "
	       "\"grow_spare_p99\": %.1f, \"shrink_spare_p50\": %.1f, "
	       "\"shrink_spare_p99\": %.1f, \"shrink_p50\": %.1f, "
	       "\"shrink_p99\": %.1f}, \"results\": [", info.device,
	       info.cc_major, info.cc_minor, read_bw, copy_bw, ch[0], ch[1],
	       ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]);
	for (i = 0; i < nres; i++)
		printf("%s{\"dtype\": \"%s\", \"ctx\": %u, \"batch\": %u, "
		       "\"gqa\": %u, \"gbps\": %.1f, \"us\": %.2f, "
		       "\"ratio\": %.3f}", i ? ", " : "",
		       kvk_dtype_name(res[i].dtype), res[i].ctx, res[i].batch,
		       res[i].qh / KVH, res[i].gbps, res[i].us,
		       read_bw > 0 ? res[i].gbps / read_bw : 0);
	printf("]}\n");
	kvk_cuda_free(kc);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	return 0;
}
