// SPDX-License-Identifier: MIT
/*
 * test-kvk-gpu.c - every kernels op on the GPU against the CPU.
 *
 *   self-test of the warp-level primitives (kvk_cuda_selftest): mma.sync
 *       fragments, ldmatrix, movmatrix, FP8/INT8/INT4 conversion and
 *       cp.async against the PTX ISA's definitions;
 *   write (FP32 and BF16 input): the pool bytes after the same chunked
 *       writes are identical on GPU and CPU (same rounding, same scale
 *       rule), starting from the same garbage;
 *   read: identical floats; copy blocks: identical bytes;
 *   decode, prefill: relative L2 error vs the CPU scalar reference
 *       within 6 sigma of the modelled rounding (attn_tol) over head_dim {32,64,128,256} x GQA {1,4,7,8,16} x
 *       context {1,15,16,17,1000,8192} (tokens per block rotating), every
 *       dtype, plus one 131,072-token decode per dtype;
 *   the zero-copy calls (_dev: q, out, k, v in device memory) give the
 *       same results as the staged ones;
 *   a prefill whose grid has more than 65,535 row blocks; head_dim 96 is
 *       refused (-EOPNOTSUPP).
 * --quick: a smaller grid (for the emulation); --small as well: without
 *   the big grid's prefill (66,000 CTAs and a CPU reference), for
 *   compute-sanitizer, where it would take minutes.
 *
 * Exit 77 only without libcuda.so.1 or without a device (cuInit or the
 * device count saying so); a driver that is present but fails (a
 * driver/library mismatch), a missing fatbin or a module that does not
 * load is a failure.
 * Against the driver test double (tests/cudafake) every launch is checked
 * but kernels only run with KVPOOL_FAKE_CUDA_EXEC=1 (host emulation);
 * without it the results are not compared.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvk_test.h"
#include "kvkern_cuda.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

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
static int compare = 1;
static int quick, small;
static double worst_ratio;	/* of an attention's error to its bound */
/* The optimised CPU path (itself held to the FP64 reference by the
 * kernel tests) computes the long contexts' references on all cores: the
 * AVX-512 FP32 path at most (KVK_SIMD=avx512), since the AVX512-BF16 and
 * AMX paths round an FP8 or INT8 query and weights once per step, well
 * past this test's bounds. */
static struct kvk_cpu *cpu_ref;

static int dev_pool(const struct kt_batch *kb, CUdeviceptr *d)
{
	size_t bytes = (size_t)kb->nblocks * kb->l.block_bytes;

	if (drv.cuMemAlloc(d, bytes) != CUDA_SUCCESS)
		return -ENOMEM;
	if (h2d(*d, kb->pool, bytes) != CUDA_SUCCESS) {
		drv.cuMemFree(*d);
		return -EIO;
	}
	return 0;
}

static size_t count_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t i, d = 0;

	if (!compare)
		return 0;
	for (i = 0; i < n; i++)
		d += a[i] != b[i];
	return d;
}

/* write + read + copy: GPU bytes == CPU bytes; the _dev calls too */
static void check_write(uint32_t dtype, uint32_t D, uint32_t tpb, int bf16)
{
	uint32_t H = 2, n = quick ? 70 : 300, t, c0, c1, nb;
	struct kvk_layout l;
	uint8_t *cpu, *back;
	uint32_t *blk, *slot;
	float *k, *v, *rk, *rv, *gk, *gv;
	uint16_t *hk, *hv;
	size_t rows = (size_t)n * H * D, bytes, i, diff = 0;
	CUdeviceptr d, dk, dv;

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
	KT_CHECK(drv.cuMemAlloc(&d, bytes) == CUDA_SUCCESS, "alloc");
	KT_CHECK(drv.cuMemAlloc(&dk, rows * 4 * 2) == CUDA_SUCCESS, "alloc");
	dv = dk + rows * 4;
	h2d(d, cpu, bytes);
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
		} else if (c0 & 1) {
			/* the zero-copy path: K/V already on the device */
			h2d(dk, k + c0 * H * D,
					 (size_t)(c1 - c0) * H * D * 4);
			h2d(dv, v + c0 * H * D,
					 (size_t)(c1 - c0) * H * D * 4);
			KT_CHECK(kvk_write_kv(&l, cpu, 1, c1 - c0, blk + c0,
				 slot + c0, k + c0 * H * D, v + c0 * H * D) == 0,
				 "cpu write");
			KT_CHECK(kvk_cuda_write_kv_dev(kc, &l, d, 1, c1 - c0,
				 blk + c0, slot + c0, dk, dv, 0) == 0,
				 "gpu write (device k/v)");
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
	diff = count_diff(cpu, back, bytes);
	KT_CHECK(diff == 0, "write %s D=%u tpb=%u bf16in=%d: %zu bytes differ",
		 kvk_dtype_name(dtype), D, tpb, bf16, diff);
	kvk_read_kv(&l, cpu, 1, n, blk, slot, rk, rv);
	KT_CHECK(kvk_cuda_read_kv(kc, &l, d, 1, n, blk, slot, gk, gv) == 0,
		 "gpu read");
	diff = 0;
	for (i = 0; compare && i < rows; i++)	/* NaN payloads may differ */
		diff += !((isnan(rk[i]) && isnan(gk[i])) ||
			  !memcmp(&rk[i], &gk[i], 4)) ||
			!((isnan(rv[i]) && isnan(gv[i])) ||
			  !memcmp(&rv[i], &gv[i], 4));
	KT_CHECK(diff == 0, "read %s: %zu values differ",
		 kvk_dtype_name(dtype), diff);
	/* read into device memory: same floats */
	KT_CHECK(kvk_cuda_read_kv_dev(kc, &l, d, 1, n, blk, slot, dk, dv) == 0,
		 "gpu read (device k/v)");
	drv.cuMemcpyDtoH(gk, dk, rows * 4);
	drv.cuMemcpyDtoH(gv, dv, rows * 4);
	diff = 0;
	for (i = 0; compare && i < rows; i++)
		diff += !((isnan(rk[i]) && isnan(gk[i])) ||
			  !memcmp(&rk[i], &gk[i], 4)) ||
			!((isnan(rv[i]) && isnan(gv[i])) ||
			  !memcmp(&rv[i], &gv[i], 4));
	KT_CHECK(diff == 0, "read (device) %s: %zu values differ",
		 kvk_dtype_name(dtype), diff);
	/* copy blocks: 0 -> 1, then 1 -> 2 (in order) */
	{
		uint32_t src[2] = { nb - 1, nb - 2 }, dst[2] = { nb - 2, 0 };

		kvk_copy_blocks(cpu, l.block_bytes, nb, src, dst, 2);
		KT_CHECK(kvk_cuda_copy_blocks(kc, d, l.block_bytes, nb, src,
					      dst, 2) == 0, "gpu copy");
		drv.cuMemcpyDtoH(back, d, bytes);
		diff = count_diff(cpu, back, bytes);
		KT_CHECK(diff == 0, "copy: %zu bytes differ", diff);
	}
	drv.cuMemFree(d);
	drv.cuMemFree(dk);
	free(cpu);
	free(back);
	free(blk);
	free(k);
	free(hk);
}

/*
 * The bound on the relative L2 error of attention, GPU against CPU, from
 * the rounding the two paths do differently (Documentation/gpu.rst,
 * "Precision"): each rounding to nearest with unit roundoff e adds an
 * error of RMS e / sqrt(3) (uniform in +-e), independent ones add in
 * squares:
 *   - the hi + lo split of Q and of P in the MMA type, once each:
 *     e_in = 2^-16 (BF16 halves, the BF16 cache), 2^-22 (FP16 halves);
 *   - ex2.approx: 2 ulp, 2^-22;
 *   - FP32 sums, u = 2^-24 an addition, in different orders on the two
 *     sides: D terms a score, n (the longest context) an output;
 * the bound is 6 sigma of that.  On a GPU the tensor cores' accumulation,
 * whose rounding is not documented, may truncate: a bias of up to u an
 * addition, linear in the D terms of a score, so u D is added to the
 * bound there.  The emulation rounds to nearest (its
 * worst case on the quick grid is about one sigma); the fixed 1e-4 used
 * before was 30 to 150 times the FP16 types' errors and passed a kernel
 * whose P lost its low halves to FP16 subnormals (Documentation/gpu.rst).
 */
static double attn_tol(uint32_t dtype, uint32_t D, uint32_t n)
{
	const double ein = dtype == KVK_BF16 ? 0x1p-16 : 0x1p-22;
	const double eex = 0x1p-22, u = 0x1p-24;
	const double v = (2 * ein * ein + eex * eex + u * u * (D + n)) / 3;

	return 6 * sqrt(v) + (drv.fake ? 0 : u * D);
}

static double check_attn(uint32_t dtype, uint32_t D, uint32_t G, uint32_t C,
			 uint32_t tpb, uint32_t n_new, uint32_t batch, int dev)
{
	uint32_t H = G >= 8 ? 1 : 2, ctx[64], b;
	struct kt_batch kb;
	size_t nq, i;
	float *q, *o_cpu, *o_gpu;
	CUdeviceptr d, dq = 0;
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
	if (dev && drv.cuMemAlloc(&dq, nq * 4 * 2) != CUDA_SUCCESS) {
		KT_CHECK(0, "device q");
		goto out_pool;
	}
	if (n_new || dev) {
		struct kvk_prefill_args a = {
			.layout = &kb.l, .pool_base = kb.pool, .layer = 1,
			.batch = batch, .q_heads = H * G,
			.max_blocks_per_seq = kb.mbps, .n_new = n_new, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 1.0f / sqrtf(D), .out = o_cpu,
		};

		if (!compare)
			;	/* the reference is not needed */
		else if (n_new && C >= 1000)
			KT_CHECK(kvk_prefill(&a, cpu_ref) == 0, "cpu prefill");
		else if (n_new)
			KT_CHECK(kvk_prefill_ref(&a) == 0, "cpu prefill");
		else
			KT_CHECK((C >= 1000 ? kvk_decode(&(struct kvk_decode_args){
				.layout = &kb.l, .pool_base = kb.pool,
				.layer = 1, .batch = batch, .q_heads = H * G,
				.max_blocks_per_seq = kb.mbps, .q = q,
				.block_tables = kb.tables, .ctx_lens = kb.ctx,
				.scale = 1.0f / sqrtf(D), .out = o_cpu },
				cpu_ref) : kvk_decode_ref(&(struct kvk_decode_args){
				.layout = &kb.l, .pool_base = kb.pool,
				.layer = 1, .batch = batch, .q_heads = H * G,
				.max_blocks_per_seq = kb.mbps, .q = q,
				.block_tables = kb.tables, .ctx_lens = kb.ctx,
				.scale = 1.0f / sqrtf(D), .out = o_cpu })) == 0,
				 "cpu decode");
		a.pool_base = (void *)(uintptr_t)d;
		a.out = o_gpu;
		if (dev) {
			h2d(dq, q, nq * 4);
			KT_CHECK(kvk_cuda_attn_dev(kc, &a, dq, dq + nq * 4) == 0,
				 "gpu attention (device q/out)");
			drv.cuMemcpyDtoH(o_gpu, dq + nq * 4, nq * 4);
		} else {
			KT_CHECK(kvk_cuda_prefill(kc, &a) == 0, "gpu prefill");
		}
	} else {
		struct kvk_decode_args a = {
			.layout = &kb.l, .pool_base = kb.pool, .layer = 1,
			.batch = batch, .q_heads = H * G,
			.max_blocks_per_seq = kb.mbps, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 1.0f / sqrtf(D), .out = o_cpu,
		};
		if (!compare)
			;	/* the reference is not needed */
		else if (C >= 1000)
			KT_CHECK(kvk_decode(&a, cpu_ref) == 0, "cpu decode");
		else
			KT_CHECK(kvk_decode_ref(&a) == 0, "cpu decode");
		a.pool_base = (void *)(uintptr_t)d;
		a.out = o_gpu;
		KT_CHECK(kvk_cuda_decode(kc, &a) == 0, "gpu decode");
	}
	e = compare ? kt_rel_err_f(o_gpu, o_cpu, nq) : 0;
	KT_CHECK(e <= attn_tol(dtype, D, C), "%s%s %s D=%u G=%u ctx=%u "
		 "tpb=%u n_new=%u: gpu vs cpu %.2e, bound %.2e",
		 n_new ? "prefill" : "decode", dev ? " (device q/out)" : "",
		 kvk_dtype_name(dtype), D, G, C, tpb, n_new, e,
		 attn_tol(dtype, D, C));
	worst_ratio = compare && e / attn_tol(dtype, D, C) > worst_ratio ?
		      e / attn_tol(dtype, D, C) : worst_ratio;
	if (dq)
		drv.cuMemFree(dq);
out_pool:
	drv.cuMemFree(d);
out:
	free(q);
	kt_batch_free(&kb);
	return e;
}

/*
 * Decode plans fill whole waves: over batch x context x GQA x tokens per
 * block, every split plan that is not held back by the 256-position
 * minimum keeps at least 85% of the slots of the waves it occupies busy,
 * and covers every position.  Plans only: nothing is launched.
 */
static void check_waves(void)
{
	static const uint32_t ctxs[] = { 1024, 8192, 32768, 131072 };
	static const uint32_t batches[] = { 1, 16, 64 }, gs[] = { 4, 8 };
	static const uint32_t tpbs[] = { 16, 64, 1 };
	static const uint32_t dts[] = { KVK_BF16, KVK_FP8 };
	double worst = 1;
	unsigned int ci, bi, gi, ti, di, n = 0;

	for (di = 0; di < N(dts); di++)
	for (ti = 0; ti < N(tpbs); ti++)
	for (ci = 0; ci < N(ctxs); ci++)
	for (bi = 0; bi < N(batches); bi++)
	for (gi = 0; gi < N(gs); gi++) {
		struct kvk_layout l;
		struct kvk_cuda_plan *pl = NULL;
		struct kvk_cuda_plan_info in;
		uint64_t per = 0, fixed = 0, total, waves;
		uint32_t ctx = ctxs[ci], B = batches[bi], tpb = tpbs[ti];
		double eff;
		int r;

		kvk_layout_cost(1, 8, 128, dts[di], &per, &fixed);
		if (kvk_layout_init(&l, 1, 8, 128, dts[di],
				    (fixed + tpb * per + 255) / 256 * 256)) {
			KT_CHECK(0, "layout");
			continue;
		}
		/* device addresses are never dereferenced by a plan */
		r = kvk_cuda_plan_decode(kc, &(struct kvk_decode_args){
				.layout = &l, .pool_base = (void *)(uintptr_t)256,
				.batch = B, .q_heads = 8 * gs[gi],
				.max_blocks_per_seq =
					(ctx + l.tokens_per_block - 1) /
					l.tokens_per_block,
				.q = (float *)(uintptr_t)256,
				.block_tables = (uint32_t *)(uintptr_t)256,
				.ctx_lens = (uint32_t *)(uintptr_t)256,
				.out = (float *)(uintptr_t)256 }, ctx, &pl);
		KT_CHECK(r == 0, "plan %s ctx=%u B=%u G=%u tpb=%u: %d",
			 kvk_dtype_name(dts[di]), ctx, B, gs[gi],
			 l.tokens_per_block, r);
		if (r)
			continue;
		kvk_cuda_plan_info(pl, &in);
		kvk_cuda_plan_free(kc, pl);
		n++;
		KT_CHECK((uint64_t)in.nsplit * in.chunk >= ctx,
			 "plan covers %u x %u < %u positions", in.nsplit,
			 in.chunk, ctx);
		total = (uint64_t)in.ctas * in.nsplit;
		waves = (total + in.wave - 1) / in.wave;
		eff = (double)total / (double)(waves * in.wave);
		if (in.nsplit == 1 && in.ctas >= in.wave)
			continue;	/* no split needed: the grid is the work */
		if (in.chunk < 512)
			continue;	/* held to the minimum split size */
		KT_CHECK(eff >= 0.85, "plan %s ctx=%u B=%u G=%u tpb=%u: "
			 "%u x %u thread blocks = %.2f waves of %u",
			 kvk_dtype_name(dts[di]), ctx, B, gs[gi],
			 l.tokens_per_block, in.ctas, in.nsplit,
			 (double)total / in.wave, in.wave);
		worst = eff < worst ? eff : worst;
	}
	printf("split plans: %u, the least busy fills %.0f%% of its waves\n",
	       n, 100 * worst);
}

/* head_dims without kernels are refused, not computed wrong */
/* The test double keeps device memory where the host cannot reach it: a
 * dereference of a device address from host code faults, as on a GPU. */
static void check_device_unreachable(void)
{
	CUdeviceptr d;
	int st = 0;
	pid_t pid;

	KT_CHECK(drv.cuMemAlloc(&d, 4096) == CUDA_SUCCESS, "alloc");
	pid = fork();
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
		_exit(*(volatile unsigned char *)(uintptr_t)d == 0x5a ? 3 : 4);
	}
	KT_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork");
	KT_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
		 "a host read of device address %#llx did not fault (status "
		 "%#x)", (unsigned long long)d, st);
	drv.cuMemFree(d);
}

static void check_refused(void)
{
	uint32_t ctx[1] = { 20 };
	struct kt_batch kb;
	float q[2 * 96], o[2 * 96];
	CUdeviceptr d;

	if (kt_batch_init(&kb, 1, 1, 96, KVK_BF16, 16, 1, ctx, 2, 0)) {
		KT_CHECK(0, "batch init");
		return;
	}
	memset(q, 0, sizeof(q));
	if (!dev_pool(&kb, &d)) {
		struct kvk_decode_args a = {
			.layout = &kb.l, .pool_base = (void *)(uintptr_t)d,
			.layer = 0, .batch = 1, .q_heads = 2,
			.max_blocks_per_seq = kb.mbps, .q = q,
			.block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 0.1f, .out = o,
		};

		KT_CHECK(!kvk_cuda_head_dim_ok(96), "head_dim 96 supported?");
		KT_CHECK(kvk_cuda_decode(kc, &a) == -EOPNOTSUPP,
			 "head_dim 96 not refused");
		drv.cuMemFree(d);
	}
	kt_batch_free(&kb);
}

/*
 * A prefill of B sequences x n_new tokens with one query head per kv
 * head: B * ceil(n_new / 8) row blocks, beyond grid.y's 65,535.  Against
 * the CPU path (threads) when results are compared.
 */
static void check_big_grid(void)
{
	const uint32_t B = 1100, nn = 480, D = 32, tpb = 16;
	struct kvk_layout l;
	uint32_t *tab, *ctx, b, j, nb = nn / tpb;
	float *q, *o_gpu, *o_cpu = NULL;
	size_t nq = (size_t)B * nn * D, i;
	uint8_t *pool;
	CUdeviceptr d, dq;
	struct kvk_cpu *cpu = NULL;

	if (kvk_layout_init(&l, 1, 1, D, KVK_BF16,
			    kt_block_bytes(1, 1, D, KVK_BF16, tpb)))
		return;
	/* every sequence reads the same 30 blocks */
	pool = malloc(nb * l.block_bytes);
	tab = malloc(sizeof(uint32_t) * B * nb);
	ctx = malloc(sizeof(uint32_t) * B);
	q = malloc(sizeof(float) * nq);
	o_gpu = malloc(sizeof(float) * nq);
	if (compare)
		o_cpu = malloc(sizeof(float) * nq);
	if (!pool || !tab || !ctx || !q || !o_gpu || (compare && !o_cpu)) {
		KT_CHECK(0, "memory");
		goto out;
	}
	for (i = 0; i < nb * l.block_bytes; i += 2)
		*(uint16_t *)(pool + i) = kvk_f32_to_bf16(kt_gauss());
	for (b = 0; b < B; b++) {
		ctx[b] = nn;
		for (j = 0; j < nb; j++)
			tab[b * nb + j] = j;
	}
	for (i = 0; i < nq; i++)
		q[i] = kt_gauss();
	KT_CHECK(drv.cuMemAlloc(&d, nb * l.block_bytes) == CUDA_SUCCESS, "pool");
	KT_CHECK(drv.cuMemAlloc(&dq, nq * 4 * 2) == CUDA_SUCCESS, "q");
	h2d(d, pool, nb * l.block_bytes);
	h2d(dq, q, nq * 4);
	{
		struct kvk_prefill_args a = {
			.layout = &l, .pool_base = (void *)(uintptr_t)d,
			.layer = 0, .batch = B, .q_heads = 1,
			.max_blocks_per_seq = nb, .n_new = nn, .q = q,
			.block_tables = tab, .ctx_lens = ctx,
			.scale = 1.0f / sqrtf(D), .out = o_gpu,
		};

		KT_CHECK(kvk_cuda_attn_dev(kc, &a, dq, dq + nq * 4) == 0,
			 "prefill of %u row blocks", B * ((nn + 7) / 8));
		drv.cuMemcpyDtoH(o_gpu, dq + nq * 4, nq * 4);
		if (compare) {
			double e;

			kvk_cpu_init(&cpu, 0);
			a.pool_base = pool;
			a.out = o_cpu;
			KT_CHECK(kvk_prefill(&a, cpu) == 0, "cpu prefill");
			e = kt_rel_err_f(o_gpu, o_cpu, nq);
			KT_CHECK(e <= attn_tol(KVK_BF16, D, nn), "prefill of %u "
				 "row blocks: gpu vs cpu %.2e, bound %.2e",
				 B * ((nn + 7) / 8), e,
				 attn_tol(KVK_BF16, D, nn));
			printf("prefill of %u row blocks (grid.x): %.2e\n",
			       B * ((nn + 7) / 8), e);
			kvk_cpu_free(cpu);
		}
	}
	drv.cuMemFree(dq);
	drv.cuMemFree(d);
out:
	free(pool);
	free(tab);
	free(ctx);
	free(q);
	free(o_gpu);
	free(o_cpu);
}

int main(int argc, char **argv)
{
	static const uint32_t dims[] = { 32, 64, 128, 256 };
	static const uint32_t gs[] = { 1, 4, 7, 8, 16 };
	static const uint32_t ctxs[] = { 1, 15, 16, 17, 1000, 8192 };
	static const uint32_t qdims[] = { 32, 128 }, qgs[] = { 1, 8, 16 };
	static const uint32_t qctxs[] = { 1, 17, 100 };
	static const uint32_t tpbs[] = { 16, 7, 1, 64, 33 };
	static const uint32_t nns[] = { 1, 7, 33, 4 };
	const uint32_t *pd = dims, *pg = gs, *pc = ctxs;
	size_t nd = N(dims), ng = N(gs), nc = N(ctxs);
	struct kvk_cuda_info info;
	char msg[256];
	CUdevice dev;
	CUcontext ctx;
	CUresult cr;
	uint32_t dt, di, gi, ci, n = 0;
	int i;
	int ret;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--small"))
			quick = small = 1;
		else {
			fprintf(stderr, "usage: %s [--quick] [--small]\n",
				argv[0]);
			return 2;
		}
	}
	if (quick) {
		pd = qdims, pg = qgs, pc = qctxs;
		nd = N(qdims), ng = N(qgs), nc = N(qctxs);
	}
	kt_align16 = 1;
	ret = cuda_drv_open(&drv);
	if (ret == -ENODEV) {
		printf("no CUDA driver (libcuda.so.1)\n");
		return 77;
	}
	if (ret) {
		printf("libcuda.so.1 lacks %s: not a usable driver\n",
		       cuda_drv_missing());
		return 1;
	}
	ret = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
	if (ret == -ENODEV) {
		printf("no CUDA device (%s)\n", cuda_drv_strerror(&drv, cr));
		cuda_drv_close(&drv);
		return 77;
	}
	if (ret) {
		printf("the CUDA driver is present but does not work: %s\n",
		       cuda_drv_strerror(&drv, cr));
		cuda_drv_close(&drv);
		return 1;
	}
	if (drv.fake) {
		const char *x = getenv("KVPOOL_FAKE_CUDA_EXEC");

		compare = x && atoi(x) > 0;
	}
	ret = kvk_cuda_init(&kc, &drv, NULL);
	setenv("KVK_SIMD", "avx512", 1);
	if (!ret && compare && kvk_cpu_init(&cpu_ref, 0)) {
		kvk_cuda_free(kc);
		ret = -ENOMEM;
	}
	if (ret == -ENOENT)
		printf("no %s (build it with nvcc)\n", KVK_FATBIN_NAME);
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		cuda_drv_device_close(&drv, dev);
		cuda_drv_close(&drv);
		return 1;
	}
	kvk_cuda_info(kc, &info);
	printf("device: %s (sm_%d%d, %d SMs), driver %d, kernels %s%s\n",
	       info.device, info.cc_major, info.cc_minor, info.sm_count,
	       info.driver_version, info.module,
	       drv.fake ? (compare ? " [test double, kernels emulated]" :
			   " [test double: launches checked, results not "
			   "compared]") : "");
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++)
		for (di = 0; di < N(dims); di++) {
			struct kvk_cuda_kernel k;

			kvk_cuda_kernel_info(kc, dt, dims[di], &k);
			printf("  %-20s %3d registers, %3d bytes local, %6u bytes "
			       "shared, %u stages, %d blocks/SM\n", k.name,
			       k.regs, k.local_bytes, k.smem, k.stages,
			       k.blocks_per_sm);
		}
	ret = kvk_cuda_selftest(kc, msg, sizeof(msg));
	if (compare)
		KT_CHECK(ret == 0, "primitive self-test: %s", msg);
	printf("primitive self-test: %s\n", !compare ? "not compared" :
	       ret ? msg : "ok");
	check_refused();
	check_waves();
	if (drv.fake)
		check_device_unreachable();
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		double wd = 0, wp = 0, e;

		check_write(dt, 64, 16, 0);
		check_write(dt, 128, 7, 1);
		if (!quick)
			check_write(dt, 256, 33, 0);
		check_write(dt, 32, 5, 0);
		for (di = 0; di < nd; di++)
			for (gi = 0; gi < ng; gi++)
				for (ci = 0; ci < nc; ci++, n++) {
					uint32_t tpb = tpbs[n % N(tpbs)];
					uint32_t nn = nns[n % N(nns)];

					e = check_attn(dt, pd[di], pg[gi],
						       pc[ci], tpb, 0, 3, 0);
					wd = e > wd ? e : wd;
					if (pc[ci] > 1000 && nn > 8)
						nn = 8;
					e = check_attn(dt, pd[di], pg[gi],
						       pc[ci], tpb, nn, 2, 0);
					wp = e > wp ? e : wp;
				}
		e = check_attn(dt, 128, 8, quick ? 700 : 5000, 16, 0, 2, 1);
		wd = e > wd ? e : wd;
		e = check_attn(dt, 64, 4, quick ? 40 : 300, 16, 9, 2, 1);
		wp = e > wp ? e : wp;
		if (!quick) {
			e = check_attn(dt, 128, 4, 131072, 16, 0, 1, 0);
			wd = e > wd ? e : wd;
		}
		printf("%-5s worst gpu vs cpu: decode %.2e prefill %.2e\n",
		       kvk_dtype_name(dt), wd, wp);
		fflush(stdout);
	}
	if (small)
		printf("big grid: skipped (--small)\n");
	else if (!quick || !drv.fake || !compare)
		check_big_grid();
	kvk_cuda_free(kc);
	kvk_cpu_free(cpu_ref);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	printf("worst error of attention against its bound: %.2f of it\n",
	       worst_ratio);
	printf("%u cases, %d failures\n", n, kt_failures);
	return kt_failures ? 1 : 0;
}
