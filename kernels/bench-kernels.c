// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-kernels - CPU decode attention against memory bandwidth.
 *
 * For each dtype, context {1K, 8K, 32K, 128K} x batch {1, 16, 64}, with
 * 32 query heads (-g G: 8 x G), 8 KV heads, head_dim 128, one layer, 16
 * tokens per block, on each instruction-set path: KV bytes read per second by
 * kvk_decode() and the ratio to a plain memory-read bandwidth measured in
 * the same run on the same threads, and decode tokens per second (one per
 * sequence per call) relative to BF16 on the same path and shape, which
 * says whether a smaller precision decodes faster.
 *
 * Memory cap: batch 64 x 128K tokens of BF16 is 32 GiB for one layer.  The
 * pool is capped (default 2 GiB, -m MiB); when a shape needs more blocks
 * than the pool holds, block table entries wrap around a shuffled list of
 * the physical blocks, so sequences share physical blocks.  The kernel
 * still reads every position of every sequence from memory: the touched
 * set (the whole pool) is far larger than the caches, so the figure is a
 * memory-read figure.  Small shapes (1K x 1: 4 MiB of BF16) fit in the
 * caches and may exceed the memory bandwidth.
 *
 * Paths: the best one the CPU has and, where that is amx, avx512bf16 too
 * (-p: a comma-separated list of KVK_SIMD names).  The paths of a shape
 * run one after the other, so that they see the same machine.
 *
 * Prints a table (ratios against the first bandwidth measurement), a
 * summary per path and dtype, then as the last stdout line one JSON
 * object: {"read_gbps": R, "read_gbps_first", "read_gbps_last",
 * "read_cpu_gbps", "threads", "paths": [...], "results": [{"path",
 * "dtype", "ctx", "batch", "gbps", "ratio", "tokens_per_s", "cpu_ratio",
 * "vs_bf16"}, ...]}
 * where R is the higher of the bandwidth measured at the start and at the
 * end (the conservative ratio) and vs_bf16 is null when BF16 did not run.
 * On a shared machine the wall-clock figures fall with the other load;
 * "cpu_ratio" (column cpu-r) is the same ratio per CPU-second of this
 * process instead: KV bytes per CPU-second of the kernel over bytes per
 * CPU-second of both read-bandwidth measurements (top level
 * "read_cpu_gbps"), which time-slicing with other processes leaves
 * nearly unchanged (memory and cache contention still count).
 * Options: -t threads (0 = all CPUs), -m pool MiB, -s seconds per shape
 * (default 0.4), -q (quick: contexts 1K and 8K only), -b largest batch
 * (1, 16 or 64: batches above it are left out), -k dtypes
 * (comma-separated names, e.g. bf16,fp8; default all), -p paths, -H (pool
 * on 4 KiB pages: by default it asks for 2 MiB pages, MADV_HUGEPAGE),
 * -g G query heads per kv head (1..16, default 4): the rows of one kv
 * head's item are 1, 4, 8 or 16 (kvk_item_rows()), and the amx path
 * gives some dtypes at 1, 4 and 8 rows to the avx512bf16 loops
 * (Documentation/kernels.rst, "Attention").
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kvkern.h"
#include "kvkern_internal.h"

#define GROUP 4		/* query heads per kv head (-g) */
#define KVH 8
#define D 128
#define TPB 16
#define HUGE_SZ ((uint64_t)2 << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the process, all threads */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t xs(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Fill a pool with sane values: no NaN/Inf/subnormal codes, valid scales. */
static void fill_pool(const struct kvk_layout *l, uint8_t *pool,
		      uint64_t nblocks)
{
	uint64_t b, i, data = l->meta_offset / 8;

	for (b = 0; b < nblocks; b++) {
		uint64_t *w = (uint64_t *)(pool + b * l->block_bytes);
		uint8_t *meta = pool + b * l->block_bytes + l->meta_offset;

		for (i = 0; i < data; i++) {
			uint64_t x = xs();

			switch (l->dtype) {
			case KVK_BF16:	/* exponent 0x3c..0x3f: |x| ~ 0.01..2 */
				x = (x & 0x807f807f807f807full) |
				    0x3c003c003c003c00ull |
				    (x & 0x0180018001800180ull);
				break;
			case KVK_FP8:	/* exponent 1..7, never NaN */
				x = (x & 0xe7e7e7e7e7e7e7e7ull) |
				    0x0808080808080808ull;
				break;
			default:
				break;
			}
			w[i] = x;
		}
		if (l->dtype == KVK_FP8 || l->dtype == KVK_INT8) {
			float s = 1.0f / 64;

			for (i = 0; i < l->meta_bytes / 4; i++)
				memcpy(meta + 4 * i, &s, 4);
		} else if (l->dtype == KVK_INT4) {
			uint16_t h = 0x2c00;	/* 1/16 */

			for (i = 0; i < l->meta_bytes / 2; i++)
				memcpy(meta + 2 * i, &h, 2);
		}
	}
}

#define MAX_PATHS 5
#define MAX_ROUNDS 16

/* One path, dtype and shape over the rounds. */
struct result {
	uint32_t path, dtype, ctx, batch;
	int have;
	double bytes;			/* KV bytes one call reads */
	double gbps[MAX_ROUNDS], tps[MAX_ROUNDS];
	double cpu_gbps[MAX_ROUNDS];	/* KV GB per CPU-second */
};

struct stat3 {
	double med, lo, hi;
};

static int cmp_dbl(const void *pa, const void *pb)
{
	double a = *(const double *)pa, b = *(const double *)pb;

	return a < b ? -1 : a > b;
}

static struct stat3 stat_of(const double *x, int n)
{
	double v[MAX_ROUNDS];
	struct stat3 r;

	memcpy(v, x, sizeof(*v) * (size_t)n);
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	r.lo = v[0];
	r.hi = v[n - 1];
	r.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return r;
}

/* Is name in the comma-separated list? */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	while ((p = strstr(p, name))) {
		if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return 1;
		p += n;
	}
	return 0;
}

/* Index of (path, dtype, context, batch) in the results. */
static int res_idx(uint32_t pi, uint32_t dt, uint32_t ci, uint32_t bi)
{
	return (int)(((pi * 4 + (dt - KVK_BF16)) * 4 + ci) * 3 + bi);
}

int main(int argc, char **argv)
{
	static const uint32_t ctxs[] = { 1024, 8192, 32768, 131072 };
	static const uint32_t batches[] = { 1, 16, 64 };
	static struct result res[MAX_PATHS * 4 * 4 * 3];
	struct kvk_cpu *cpus[MAX_PATHS];
	const char *pnames[MAX_PATHS];
	uint32_t npaths = 0, pi;
	const char *paths = NULL;
	unsigned int threads = 0;
	uint64_t cap_mib = 2048;
	double per_shape = 0.4, read_bw[MAX_ROUNDS + 1], ref_bw, rc0, rcpu = 0;
	double read_cpu;
	int quick = 0, huge = 1, opt, i, rounds = 3, rd, nread = 0;
	size_t bw_bytes = (size_t)512 << 20;
	uint8_t *bwbuf;
	uint32_t dt, ci, bi, nctx, max_batch = 64, k;
	const char *only = NULL;
	uint32_t group = GROUP, qh;

	while ((opt = getopt(argc, argv, "t:m:s:qb:k:p:HR:g:")) != -1) {
		switch (opt) {
		case 't':
			threads = (unsigned int)atoi(optarg);
			break;
		case 'm':
			cap_mib = strtoull(optarg, NULL, 0);
			break;
		case 's':
			per_shape = atof(optarg);
			break;
		case 'q':
			quick = 1;
			break;
		case 'b':
			max_batch = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			only = optarg;
			break;
		case 'p':
			paths = optarg;
			break;
		case 'H':
			huge = 0;
			break;
		case 'R':
			rounds = atoi(optarg);
			break;
		case 'g':
			group = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s [-t threads] [-m pool MiB] "
				"[-s seconds] [-q] [-b batch] [-k dtypes] [-p paths] "
				"[-H] [-R rounds] [-g group]\n",
				argv[0]);
			return 2;
		}
	}
	if (max_batch < 1) {
		fprintf(stderr, "%s: -b: the largest batch is at least 1\n",
			argv[0]);
		return 2;
	}
	if (group < 1 || group > 16) {
		fprintf(stderr, "%s: -g: 1..16 query heads per kv head\n",
			argv[0]);
		return 2;
	}
	qh = KVH * group;
	if (rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "%s: -R: 1..%d rounds\n", argv[0], MAX_ROUNDS);
		return 2;
	}
	nctx = quick ? 2 : 4;
	{
		static const char *const all[] = { "amx", "avx512bf16",
						   "avx512", "avx2", "generic" };
		struct kvk_cpu *c;
		const char *best;
		uint32_t a;

		if (kvk_cpu_init(&c, threads)) {
			fprintf(stderr, "kvk_cpu_init failed\n");
			return 1;
		}
		best = kvk_cpu_simd(c);
		kvk_cpu_free(c);
		for (a = 0; a < sizeof(all) / sizeof(all[0]); a++) {
			if (paths ? !in_list(paths, all[a]) :
			    strcmp(all[a], best) && (strcmp(best, "amx") ||
			    strcmp(all[a], "avx512bf16")))
				continue;
			setenv("KVK_SIMD", all[a], 1);
			if (kvk_cpu_init(&c, threads)) {
				fprintf(stderr, "kvk_cpu_init failed\n");
				return 1;
			}
			unsetenv("KVK_SIMD");
			/* a path the CPU lacks falls back to one below it */
			for (k = 0; k < npaths; k++)
				if (!strcmp(pnames[k], kvk_cpu_simd(c)))
					break;
			if (strcmp(kvk_cpu_simd(c), all[a]) || k < npaths) {
				fprintf(stderr, "path %s: not available here\n",
					all[a]);
				kvk_cpu_free(c);
				continue;
			}
			pnames[npaths] = all[a];
			cpus[npaths++] = c;
		}
		if (!npaths) {
			fprintf(stderr, "no path to run\n");
			return 2;
		}
	}
	bwbuf = malloc(bw_bytes);
	if (!bwbuf)
		return 1;
	memset(bwbuf, 1, bw_bytes);
	printf("kvpool-bench-kernels: %u threads, paths", kvk_cpu_threads(cpus[0]));
	for (pi = 0; pi < npaths; pi++)
		printf(" %s", pnames[pi]);
	printf(", %u query heads on %u kv heads, head_dim %u, pool cap %llu "
	       "MiB, %d rounds (the dtypes in a rotated order each round, the "
	       "paths of a shape one after the other)\n", qh, KVH, D,
	       (unsigned long long)cap_mib, rounds);
	fflush(stdout);

	for (rd = 0; rd < rounds; rd++) {
		uint32_t d;

		rc0 = cpu_s();
		read_bw[nread++] = kvk_read_bw(cpus[0], bwbuf, bw_bytes, 8);
		rcpu += cpu_s() - rc0;
		printf("round %d: memory read bandwidth (same threads) %.1f "
		       "GB/s\n", rd + 1, read_bw[nread - 1]);
		fflush(stdout);
	for (d = 0; d < 4; d++) {
		struct kvk_layout l;
		uint64_t pt, fx, need_blocks, nblocks, pool_bytes;
		uint8_t *pool;

		dt = KVK_BF16 + (d + (uint32_t)rd) % 4;
		if (only && !in_list(only, kvk_dtype_name(dt)))
			continue;
		kvk_layout_cost(1, KVH, D, dt, &pt, &fx);
		kvk_layout_init(&l, 1, KVH, D, dt, fx + pt * TPB);
		need_blocks = (uint64_t)131072 / TPB * 64;
		nblocks = (cap_mib << 20) / l.block_bytes;
		if (nblocks > need_blocks)
			nblocks = need_blocks;
		pool_bytes = (nblocks * l.block_bytes + HUGE_SZ - 1) /
			     HUGE_SZ * HUGE_SZ;
		pool = aligned_alloc(HUGE_SZ, pool_bytes);
		if (!pool) {
			fprintf(stderr, "out of memory for the pool\n");
			return 1;
		}
		/* blocks are scattered: with 4 KiB pages every K or V plane
		 * costs a TLB miss; ask for 2 MiB pages (-H: do not) */
		if (huge && madvise(pool, pool_bytes, MADV_HUGEPAGE))
			fprintf(stderr, "madvise(MADV_HUGEPAGE): %s\n",
				strerror(errno));
		rng = 88172645463325252ull;	/* the same pool every round */
		fill_pool(&l, pool, nblocks);
		for (ci = 0; ci < nctx; ci++) {
			for (bi = 0; bi < 3; bi++) {
				uint32_t C = ctxs[ci], B = batches[bi];
				uint32_t mbps = C / TPB, b, j, *tables, *ctx;
				float *q, *out;
				double t0, t, c0, bytes;
				int calls;
				struct kvk_decode_args a;

				if (B > max_batch)
					continue;
				tables = malloc(sizeof(uint32_t) * B * mbps);
				ctx = malloc(sizeof(uint32_t) * B);
				q = malloc(sizeof(float) * B * qh * D);
				out = malloc(sizeof(float) * B * qh * D);
				for (b = 0; b < B; b++) {
					ctx[b] = C;
					for (j = 0; j < mbps; j++)
						tables[b * mbps + j] = (uint32_t)
							(((uint64_t)b * mbps + j) *
							 2654435761u % nblocks);
				}
				for (j = 0; j < B * qh * D; j++)
					q[j] = (float)(xs() % 2000) / 1000.0f - 1;
				memset(&a, 0, sizeof(a));
				a.layout = &l;
				a.pool_base = pool;
				a.batch = B;
				a.q_heads = qh;
				a.max_blocks_per_seq = mbps;
				a.q = q;
				a.block_tables = tables;
				a.ctx_lens = ctx;
				a.scale = 1.0f / sqrtf(D);
				a.out = out;
				bytes = (double)C * B * l.bytes_per_token;
				for (pi = 0; pi < npaths; pi++) {
					struct result *r =
						&res[res_idx(pi, dt, ci, bi)];

					calls = 0;
					/* warm-up when cheap */
					if (bytes < 2e9)
						kvk_decode(&a, cpus[pi]);
					t0 = now_s();
					c0 = cpu_s();
					do {
						if (kvk_decode(&a, cpus[pi])) {
							fprintf(stderr,
								"decode failed\n");
							return 1;
						}
						calls++;
						t = now_s() - t0;
					} while (t < per_shape);
					c0 = cpu_s() - c0;
					r->path = pi;
					r->dtype = dt;
					r->ctx = C;
					r->batch = B;
					r->have = 1;
					r->bytes = bytes;
					r->gbps[rd] = bytes * calls / t / 1e9;
					r->tps[rd] = (double)B * calls / t;
					r->cpu_gbps[rd] = c0 > 0 ? bytes * calls /
							  c0 / 1e9 : 0;
				}
				free(tables);
				free(ctx);
				free(q);
				free(out);
			}
		}
		free(pool);
	}
	}
	rc0 = cpu_s();
	read_bw[nread++] = kvk_read_bw(cpus[0], bwbuf, bw_bytes, 8);
	rcpu += cpu_s() - rc0;
	/* bytes per CPU-second of every read measurement */
	read_cpu = rcpu > 0 ? (double)nread * 8 * bw_bytes / rcpu / 1e9 : 0;
	/*
	 * The machine's bandwidth drifts during a run (shared hosts): judge
	 * against the highest of the measurements, the conservative ratio.
	 */
	ref_bw = 0;
	for (i = 0; i < nread; i++)
		if (read_bw[i] > ref_bw)
			ref_bw = read_bw[i];
	printf("memory read bandwidth at the end: %.1f GB/s; the ratios use the "
	       "highest of the %d measurements, %.1f GB/s; per CPU-second, "
	       "all: %.1f GB/s\n", read_bw[nread - 1], nread, ref_bw, read_cpu);
	printf("(%d rounds: median [min-max]; ratio: KV GB/s over %.1f GB/s; "
	       "tok/s: sequences x calls per second; vs bf16: tok/s over "
	       "BF16's, same path, shape and round; cpu-r: the ratio per "
	       "CPU-second of this process, against the read measurements')\n",
	       rounds, ref_bw);
	printf("%-10s %-5s %7s %5s %9s %21s %19s %10s %19s %6s\n", "path",
	       "dtype", "ctx", "batch", "KV MiB", "KV GB/s", "ratio", "tok/s",
	       "vs bf16", "cpu-r");
	for (i = 0; i < (int)(sizeof(res) / sizeof(res[0])); i++) {
		const struct result *r = &res[i];
		const struct result *b16 = &res[res_idx(r->path, KVK_BF16,
			i / 3 % 4, i % 3)];
		struct stat3 g, t, c;
		double v[MAX_ROUNDS];
		char gb[32], rt[32], vb[32];

		if (!r->have)
			continue;
		g = stat_of(r->gbps, rounds);
		t = stat_of(r->tps, rounds);
		c = stat_of(r->cpu_gbps, rounds);
		snprintf(gb, sizeof(gb), "%.2f [%.2f-%.2f]", g.med, g.lo, g.hi);
		snprintf(rt, sizeof(rt), "%.3f [%.3f-%.3f]", g.med / ref_bw,
			 g.lo / ref_bw, g.hi / ref_bw);
		if (r->dtype != KVK_BF16 && b16->have) {
			struct stat3 vs;

			for (rd = 0; rd < rounds; rd++)
				v[rd] = r->tps[rd] / b16->tps[rd];
			vs = stat_of(v, rounds);
			snprintf(vb, sizeof(vb), "%.2f [%.2f-%.2f]", vs.med,
				 vs.lo, vs.hi);
		} else {
			snprintf(vb, sizeof(vb), "-");
		}
		printf("%-10s %-5s %7u %5u %9.1f %21s %19s %10.1f %19s %6.3f\n",
		       pnames[r->path], kvk_dtype_name(r->dtype), r->ctx,
		       r->batch, r->bytes / 1048576.0, gb,
		       rt, t.med, vb, c.med / read_cpu);
	}
	for (pi = 0; pi < npaths; pi++)
		for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
			double lo = 1e9, hi = 0, vlo = 1e9, vhi = 0;
			double clo = 1e9, chi = 0;

			for (ci = 1; ci < nctx; ci++)
				for (bi = 0; bi < 3; bi++) {
					const struct result *r =
						&res[res_idx(pi, dt, ci, bi)];
					const struct result *b16 =
						&res[res_idx(pi, KVK_BF16, ci,
							     bi)];

					if (!r->have)
						continue;
					for (rd = 0; rd < rounds; rd++) {
						double x = r->gbps[rd] / ref_bw;

						lo = x < lo ? x : lo;
						hi = x > hi ? x : hi;
						x = r->cpu_gbps[rd] / read_cpu;
						clo = x < clo ? x : clo;
						chi = x > chi ? x : chi;
						if (dt == KVK_BF16 || !b16->have)
							continue;
						x = r->tps[rd] / b16->tps[rd];
						vlo = x < vlo ? x : vlo;
						vhi = x > vhi ? x : vhi;
					}
				}
			if (!(hi > 0))
				continue;
			printf("summary %-10s %-5s ctx >= 8K, every round: ratio "
			       "%.2f .. %.2f", pnames[pi], kvk_dtype_name(dt), lo,
			       hi);
			if (vhi > 0)
				printf(", tok/s vs bf16 %.2f .. %.2f", vlo, vhi);
			printf(", per CPU-s %.2f .. %.2f\n", clo, chi);
		}
	printf("{\"rounds\": %d, \"q_heads\": %u, \"kv_heads\": %u, "
	       "\"head_dim\": %u, \"read_gbps\": %.2f, \"read_gbps_first\": "
	       "%.2f, \"read_gbps_last\": %.2f, \"read_gbps_all\": [", rounds,
	       qh, KVH, D, ref_bw, read_bw[0], read_bw[nread - 1]);
	for (i = 0; i < nread; i++)
		printf("%s%.2f", i ? ", " : "", read_bw[i]);
	printf("], \"read_cpu_gbps\": %.2f, \"threads\": %u, \"paths\": [",
	       read_cpu, kvk_cpu_threads(cpus[0]));
	for (pi = 0; pi < npaths; pi++)
		printf("%s\"%s\"", pi ? ", " : "", pnames[pi]);
	printf("], \"results\": [");
	k = 0;
	for (i = 0; i < (int)(sizeof(res) / sizeof(res[0])); i++) {
		const struct result *r = &res[i];
		const struct result *b16 = &res[res_idx(r->path, KVK_BF16,
			i / 3 % 4, i % 3)];
		struct stat3 g, t, c;
		double v[MAX_ROUNDS];

		if (!r->have)
			continue;
		g = stat_of(r->gbps, rounds);
		t = stat_of(r->tps, rounds);
		c = stat_of(r->cpu_gbps, rounds);
		printf("%s{\"path\": \"%s\", \"dtype\": \"%s\", \"ctx\": %u, "
		       "\"batch\": %u, \"rounds\": %d, \"gbps\": %.2f, "
		       "\"gbps_min\": %.2f, \"gbps_max\": %.2f, \"ratio\": %.3f, "
		       "\"ratio_min\": %.3f, \"ratio_max\": %.3f, "
		       "\"tokens_per_s\": %.1f, \"cpu_ratio\": %.3f, "
		       "\"vs_bf16\": ", k++ ? ", " : "",
		       pnames[r->path], kvk_dtype_name(r->dtype), r->ctx,
		       r->batch, rounds, g.med, g.lo, g.hi, g.med / ref_bw,
		       g.lo / ref_bw, g.hi / ref_bw, t.med, c.med / read_cpu);
		if (r->dtype != KVK_BF16 && b16->have) {
			struct stat3 vs;

			for (rd = 0; rd < rounds; rd++)
				v[rd] = r->tps[rd] / b16->tps[rd];
			vs = stat_of(v, rounds);
			printf("%.3f, \"vs_bf16_min\": %.3f, \"vs_bf16_max\": "
			       "%.3f}", vs.med, vs.lo, vs.hi);
		} else {
			printf("null, \"vs_bf16_min\": null, \"vs_bf16_max\": "
			       "null}");
		}
	}
	printf("]}\n");
	free(bwbuf);
	for (pi = 0; pi < npaths; pi++)
		kvk_cpu_free(cpus[pi]);
	return 0;
}
