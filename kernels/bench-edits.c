// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-edits - editing a long sequence in place against the same
 * machine's copy bandwidth and against re-prefilling it.
 *
 * Layout: 32 layers, 8 KV heads, head_dim 128 (Llama-3.1-8B), 16 tokens
 * per block, 32 query heads, one sequence of 32,768 tokens on a scrambled
 * block table; RoPE NEOX, base 500000.  The first 64 blocks are written
 * with kvk_write_kv() (real quantised data and scales), the others are
 * copies of them.  Per dtype (default bf16,fp8; -k):
 *
 *  - copy bandwidth: memcpy of a 512 MiB buffer on the same threads (best
 *    of 3), bytes copied per second;
 *  - splice at 1K: delete 64 slots at 1024 and make 32 (a tool output
 *    replaced by a shorter one), then the reverse (delete 0, make 32): the
 *    whole tail moves, its keys turn; time of each (best of 3), bytes of
 *    K rewritten per second (tail tokens x K bytes per token) and, since V
 *    moves too, K+V bytes per second, each against the copy bandwidth;
 *  - re-prefill of the same tail through the kernels: K/V writes of the
 *    tail (kvk_write_kv, measured on 2 layers, x 16) plus causal attention
 *    of the tail's queries (kvk_prefill, 256-query chunks measured at the
 *    start, middle and end of the tail on one layer, the cost per chunk
 *    interpolated linearly in its context over all chunks, x 32 layers).
 *    The model's own work (projections, MLP) is not counted: a lower
 *    bound on the cost of re-prefilling;
 *  - compression to 2,048 tokens: kvk_score of a 32-query window (per
 *    layer, measured on 2 layers), sinks 4, window 64, the best-scoring
 *    others, kvk_compact() time; decode of one token (all 32 layers)
 *    before and after.
 *
 * --gpu: the same on GPU 0 (kvk_cuda_*; copy bandwidth with
 * cuMemcpyDtoD); exit 77 without a GPU or the fatbin.
 * The last stdout line is one JSON object: splice_gbps (K bytes rewritten
 * per second, first dtype, the delete splice), copy_gbps,
 * splice_vs_reprefill (re-prefill estimate / splice time), and per dtype
 * every figure above.  -t threads (0: all CPUs), -n tokens, -H (no huge
 * pages).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "kvkern.h"
#include "kvkern_internal.h"
#ifdef KVK_BENCH_CUDA
#include "kvkern_cuda.h"
#endif

#define LAYERS	32
#define KVH	8
#define QH	32
#define D	128
#define TPB	16
#define HUGE_SZ	((uint64_t)2 << 20)
#define SEED_BLOCKS 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float gauss(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull), s;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	s = (z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) +
	    (z >> 48);
	return (float)((s / 65536.0 - 2.0) * 1.7320508075688772);
}

static void *big_alloc(size_t bytes, int huge)
{
	size_t len = (bytes + HUGE_SZ - 1) / HUGE_SZ * HUGE_SZ;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (huge)
		madvise(p, len, MADV_HUGEPAGE);
	return p;
}

static void big_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, (bytes + HUGE_SZ - 1) / HUGE_SZ * HUGE_SZ);
}

/* ---- copy bandwidth ---- */

struct copy_job {
	uint8_t *dst;
	const uint8_t *src;
	size_t share;
};

static void copy_item(void *p, uint32_t i, unsigned int thread)
{
	struct copy_job *j = p;

	memcpy(j->dst + i * j->share, j->src + i * j->share, j->share);
}

static double copy_bw(struct kvk_cpu *cpu, int huge)
{
	size_t bytes = (size_t)512 << 20;
	uint8_t *a = big_alloc(bytes, huge), *b = big_alloc(bytes, huge);
	struct copy_job j;
	uint32_t parts = kvk_cpu_threads(cpu) * 4;
	double best = 0, t;
	int r;

	if (!a || !b)
		return 0;
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	j.dst = b;
	j.src = a;
	j.share = bytes / parts;
	for (r = 0; r < 4; r++) {
		t = now_s();
		kvk_parallel_for(cpu, parts, copy_item, &j);
		t = now_s() - t;
		if (r && bytes / t / 1e9 > best)	/* the first warms up */
			best = bytes / t / 1e9;
	}
	big_free(a, bytes);
	big_free(b, bytes);
	return best;
}

/* ---- the sequence ---- */

struct seq {
	struct kvk_layout l;
	uint8_t *pool;
	uint64_t pool_bytes;
	uint32_t nblocks;
	uint32_t *table;
	uint32_t len;
};

struct fill_job {
	struct seq *s;
	const float *k, *v;
	const uint32_t *blk, *slot;
	uint32_t n;
};

static void fill_layer(void *p, uint32_t layer, unsigned int thread)
{
	struct fill_job *j = p;
	size_t row = (size_t)KVH * D;

	kvk_write_kv(&j->s->l, j->s->pool, layer, j->n, j->blk, j->slot,
		     j->k + layer * j->n * row, j->v + layer * j->n * row);
}

struct rep_job {
	struct seq *s;
};

static void rep_item(void *p, uint32_t i, unsigned int thread)
{
	struct seq *s = ((struct rep_job *)p)->s;
	uint32_t b = SEED_BLOCKS + i;

	memcpy(s->pool + (uint64_t)s->table[b] * s->l.block_bytes,
	       s->pool + (uint64_t)s->table[b % SEED_BLOCKS] * s->l.block_bytes,
	       s->l.block_bytes);
}

static int seq_init(struct seq *s, uint32_t dtype, uint32_t tokens, int huge,
		    struct kvk_cpu *cpu)
{
	uint64_t pt, fx, bb;
	uint32_t i, n = SEED_BLOCKS * TPB;
	size_t row = (size_t)KVH * D, total;
	float *k, *v;
	uint32_t *blk, *slot;
	struct fill_job fj;
	struct rep_job rj = { s };

	memset(s, 0, sizeof(*s));
	if (kvk_layout_cost(LAYERS, KVH, D, dtype, &pt, &fx))
		return -EINVAL;
	bb = (fx + pt * TPB + 63) / 64 * 64;
	if (kvk_layout_init(&s->l, LAYERS, KVH, D, dtype, bb) ||
	    s->l.tokens_per_block != TPB)
		return -EINVAL;
	if (kvk_layout_set_rope(&s->l, KVK_ROPE_NEOX, 0, 500000.0f, NULL))
		return -EINVAL;
	s->len = tokens;
	s->nblocks = (tokens + TPB - 1) / TPB + 8;
	s->l.pool_blocks = s->nblocks;
	s->pool_bytes = (uint64_t)s->nblocks * bb;
	s->pool = big_alloc(s->pool_bytes, huge);
	s->table = malloc(sizeof(uint32_t) * s->nblocks);
	if (!s->pool || !s->table)
		return -ENOMEM;
	for (i = 0; i < s->nblocks; i++)
		s->table[i] = i;
	for (i = s->nblocks - 1; i > 0; i--) {	/* scrambled */
		uint32_t j = (uint32_t)(((rng = rng * 6364136223846793005ull +
					  1442695040888963407ull) >> 33) %
					(i + 1)), x = s->table[i];

		s->table[i] = s->table[j];
		s->table[j] = x;
	}
	/* real data in the first SEED_BLOCKS blocks, all layers */
	total = row * n * LAYERS;
	k = malloc(sizeof(float) * total);
	v = malloc(sizeof(float) * total);
	blk = malloc(sizeof(uint32_t) * n);
	slot = malloc(sizeof(uint32_t) * n);
	if (!k || !v || !blk || !slot)
		return -ENOMEM;
	for (i = 0; i < total; i++) {
		k[i] = gauss();
		v[i] = gauss();
	}
	for (i = 0; i < n; i++) {
		blk[i] = s->table[i / TPB];
		slot[i] = i % TPB;
	}
	fj.s = s;
	fj.k = k;
	fj.v = v;
	fj.blk = blk;
	fj.slot = slot;
	fj.n = n;
	kvk_parallel_for(cpu, LAYERS, fill_layer, &fj);
	kvk_parallel_for(cpu, s->nblocks - SEED_BLOCKS, rep_item, &rj);
	free(k);
	free(v);
	free(blk);
	free(slot);
	return 0;
}

static void seq_free(struct seq *s)
{
	big_free(s->pool, s->pool_bytes);
	free(s->table);
}

/* ---- figures ---- */

struct figures {
	uint32_t dtype;
	uint32_t tail;
	double k_bytes, kv_bytes;	/* rewritten by one splice */
	double splice_del_s, splice_ins_s;
	double write_s, attn_s, reprefill_s;
	double score_layer_s, compact_s;
	uint32_t kept;
	double decode_before_s, decode_after_s;
};

static int splice_once(struct seq *s, uint32_t at, uint32_t ndel,
		       uint32_t nins, struct kvk_cpu *cpu, double *t)
{
	struct kvk_splice_args a = {
		.layout = &s->l, .pool_base = s->pool,
		.block_table = s->table, .nblocks = s->nblocks, .len = s->len,
		.at = at, .ndel = ndel, .nins = nins,
		.delta = (int64_t)nins - ndel,
	};
	double t0 = now_s();
	int r = kvk_splice(&a, cpu);

	*t = now_s() - t0;
	if (!r)
		s->len = s->len - ndel + nins;
	return r;
}

/* Decode one query token at every layer; seconds. */
static double decode_all(struct seq *s, struct kvk_cpu *cpu, const float *q,
			 float *out)
{
	uint32_t ctx = s->len, layer;
	double best = INFINITY, t;
	int rep;

	for (rep = 0; rep < 3; rep++) {
		t = now_s();
		for (layer = 0; layer < LAYERS; layer++) {
			struct kvk_decode_args a = {
				.layout = &s->l, .pool_base = s->pool,
				.layer = layer, .batch = 1, .q_heads = QH,
				.max_blocks_per_seq = s->nblocks, .q = q,
				.block_tables = s->table, .ctx_lens = &ctx,
				.scale = 1.0f / sqrtf((float)D), .out = out,
			};

			kvk_decode(&a, cpu);
		}
		t = now_s() - t;
		best = t < best ? t : best;
	}
	return best;
}

static const float *sort_scores;

static int by_score(const void *pa, const void *pb)
{
	float a = sort_scores[*(const uint32_t *)pa];
	float b = sort_scores[*(const uint32_t *)pb];

	return a > b ? -1 : a < b;
}

static int by_slot(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* sinks + window + best scores up to budget, in slot order */
static uint32_t choose(const float *score, uint32_t len, uint32_t budget,
		       uint32_t sinks, uint32_t win, uint32_t *keep)
{
	uint32_t i, n = 0, nmid = len - sinks - win;
	uint32_t *mid = malloc(sizeof(uint32_t) * nmid);

	for (i = 0; i < nmid; i++)
		mid[i] = sinks + i;
	sort_scores = score;
	qsort(mid, nmid, sizeof(uint32_t), by_score);
	for (i = 0; i < sinks; i++)
		keep[n++] = i;
	for (i = 0; i < budget - sinks - win; i++)
		keep[n++] = mid[i];
	for (i = len - win; i < len; i++)
		keep[n++] = i;
	qsort(keep, n, sizeof(uint32_t), by_slot);
	free(mid);
	return n;
}

static int run_cpu(uint32_t dtype, uint32_t tokens, int huge,
		   struct kvk_cpu *cpu, struct figures *f)
{
	const uint32_t at = 1024, ndel = 64, nins = 32, chunk = 256;
	const uint32_t budget = 2048, wq = 32;
	size_t row = (size_t)KVH * D;
	struct seq s;
	double t, best;
	float *q, *out, *k, *v, *score;
	uint32_t *blk, *slot, *keep, i, layer, c, rep;
	double cs[3], ts[3];
	int r;

	memset(f, 0, sizeof(*f));
	f->dtype = dtype;
	r = seq_init(&s, dtype, tokens, huge, cpu);
	if (r) {
		fprintf(stderr, "%s: cannot build the sequence: %d\n",
			kvk_dtype_name(dtype), r);
		return r;
	}
	f->tail = tokens - at - ndel;
	f->k_bytes = (double)f->tail * LAYERS * KVH * s.l.row_bytes +
		     (dtype == KVK_INT4 ? (double)f->tail * LAYERS * KVH *
		      (D / 16) : 0);
	f->kv_bytes = 2 * f->k_bytes;
	/* splice: delete 64 make 32, then make 32 (back to the length) */
	f->splice_del_s = f->splice_ins_s = INFINITY;
	for (rep = 0; rep < 3; rep++) {
		if (splice_once(&s, at, ndel, nins, cpu, &t))
			return -EIO;
		f->splice_del_s = t < f->splice_del_s ? t : f->splice_del_s;
		if (splice_once(&s, at, 0, ndel - nins, cpu, &t))
			return -EIO;
		f->splice_ins_s = t < f->splice_ins_s ? t : f->splice_ins_s;
	}
	/* re-prefill: writes of the tail (2 layers measured) */
	k = malloc(sizeof(float) * row * chunk * 2);
	v = k + row * chunk;
	q = malloc(sizeof(float) * chunk * QH * D);
	out = malloc(sizeof(float) * chunk * QH * D);
	blk = malloc(sizeof(uint32_t) * chunk * 2);
	slot = blk + chunk;
	if (!k || !q || !out || !blk)
		return -ENOMEM;
	for (i = 0; i < row * chunk * 2; i++)
		k[i] = gauss();
	for (i = 0; i < chunk * QH * D; i++)
		q[i] = gauss() * 0.3f;
	t = now_s();
	for (layer = 0; layer < 2; layer++)
		for (c = at + ndel; c < tokens; c += chunk) {
			uint32_t n = tokens - c < chunk ? tokens - c : chunk;

			for (i = 0; i < n; i++) {
				blk[i] = s.table[(c + i) / TPB];
				slot[i] = (c + i) % TPB;
			}
			kvk_write_kv(&s.l, s.pool, layer, n, blk, slot, k, v);
		}
	f->write_s = (now_s() - t) / 2 * LAYERS;
	/* re-prefill: causal attention, chunks at three contexts */
	cs[0] = at + ndel + chunk;
	cs[1] = (tokens + at) / 2;
	cs[2] = tokens;
	for (i = 0; i < 3; i++) {
		uint32_t ctx = (uint32_t)cs[i];
		struct kvk_prefill_args a = {
			.layout = &s.l, .pool_base = s.pool, .layer = 0,
			.batch = 1, .q_heads = QH,
			.max_blocks_per_seq = s.nblocks, .n_new = chunk,
			.q = q, .block_tables = s.table, .ctx_lens = &ctx,
			.scale = 1.0f / sqrtf((float)D), .out = out,
		};

		best = INFINITY;
		for (rep = 0; rep < 2; rep++) {
			t = now_s();
			kvk_prefill(&a, cpu);
			t = now_s() - t;
			best = t < best ? t : best;
		}
		ts[i] = best;
	}
	f->attn_s = 0;
	for (c = at + ndel + chunk; c < tokens + chunk; c += chunk) {
		double x = c > tokens ? tokens : c, y;

		/* piecewise linear through the three measured points */
		if (x <= cs[1])
			y = ts[0] + (ts[1] - ts[0]) * (x - cs[0]) /
			    (cs[1] - cs[0]);
		else
			y = ts[1] + (ts[2] - ts[1]) * (x - cs[1]) /
			    (cs[2] - cs[1]);
		f->attn_s += y > 0 ? y : 0;
	}
	f->attn_s *= LAYERS;
	f->reprefill_s = f->write_s + f->attn_s;
	/* decode before compression */
	f->decode_before_s = decode_all(&s, cpu, q, out);
	/* score (2 layers measured), choose, compact */
	score = malloc(sizeof(float) * s.len);
	keep = malloc(sizeof(uint32_t) * s.len);
	if (!score || !keep)
		return -ENOMEM;
	t = now_s();
	for (layer = 0; layer < 2; layer++) {
		struct kvk_score_args a = {
			.layout = &s.l, .pool_base = s.pool, .layer = layer,
			.q_heads = QH, .n_q = wq, .flags = KVK_SCORE_CAUSAL,
			.q = q, .block_table = s.table, .nblocks = s.nblocks,
			.len = s.len, .scale = 1.0f / sqrtf((float)D),
			.out = out,
		};

		kvk_score(&a, cpu);
		for (i = 0; i < s.len; i++)
			score[i] = layer ? score[i] + out[i] : out[i];
	}
	f->score_layer_s = (now_s() - t) / 2;
	f->kept = choose(score, s.len, budget, 4, 64, keep);
	{
		struct kvk_compact_args a = {
			.layout = &s.l, .pool_base = s.pool,
			.block_table = s.table, .nblocks = s.nblocks,
			.len = s.len, .keep = keep, .nkeep = f->kept,
		};

		t = now_s();
		r = kvk_compact(&a, cpu);
		f->compact_s = now_s() - t;
		if (r)
			return r;
		s.len = f->kept;
	}
	f->decode_after_s = decode_all(&s, cpu, q, out);
	free(k);
	free(q);
	free(out);
	free(blk);
	free(score);
	free(keep);
	seq_free(&s);
	return 0;
}

static void print_fig(const struct figures *f, double copy, const char *dev)
{
	printf("%s %s: splice at 1K (tail %u tokens): delete 64/make 32 %.3f s, "
	       "make 32 %.3f s\n", dev, kvk_dtype_name(f->dtype), f->tail,
	       f->splice_del_s, f->splice_ins_s);
	printf("    K rewritten %.2f GB/s (%.2f of copy), K+V %.2f GB/s (%.2f "
	       "of copy); copy %.2f GB/s\n", f->k_bytes / f->splice_del_s / 1e9,
	       f->k_bytes / f->splice_del_s / 1e9 / copy,
	       f->kv_bytes / f->splice_del_s / 1e9,
	       f->kv_bytes / f->splice_del_s / 1e9 / copy, copy);
	printf("    re-prefill of the tail through the kernels (estimate): "
	       "writes %.2f s + attention %.1f s = %.1f s: %.0f x the splice\n",
	       f->write_s, f->attn_s, f->reprefill_s,
	       f->reprefill_s / f->splice_del_s);
	printf("    compression to %u tokens: score %.3f s per layer, "
	       "compaction %.4f s; decode per token (32 layers) %.4f s -> "
	       "%.4f s\n", f->kept, f->score_layer_s, f->compact_s,
	       f->decode_before_s, f->decode_after_s);
	fflush(stdout);
}

static void json_fig(const struct figures *f, double copy, int last)
{
	printf("{\"dtype\": \"%s\", \"tail_tokens\": %u, \"splice_s\": %.4f, "
	       "\"splice_insert_s\": %.4f, \"splice_gbps\": %.3f, "
	       "\"splice_kv_gbps\": %.3f, \"splice_ratio\": %.3f, "
	       "\"splice_kv_ratio\": %.3f, \"reprefill_write_s\": %.3f, "
	       "\"reprefill_attn_s\": %.2f, \"splice_vs_reprefill\": %.1f, "
	       "\"score_layer_s\": %.4f, \"compact_s\": %.5f, "
	       "\"tokens_kept\": %u, \"decode_before_s\": %.5f, "
	       "\"decode_after_s\": %.5f}%s",
	       kvk_dtype_name(f->dtype), f->tail, f->splice_del_s,
	       f->splice_ins_s, f->k_bytes / f->splice_del_s / 1e9,
	       f->kv_bytes / f->splice_del_s / 1e9,
	       f->k_bytes / f->splice_del_s / 1e9 / copy,
	       f->kv_bytes / f->splice_del_s / 1e9 / copy, f->write_s,
	       f->attn_s, f->reprefill_s / f->splice_del_s, f->score_layer_s,
	       f->compact_s, f->kept, f->decode_before_s, f->decode_after_s,
	       last ? "" : ", ");
}

#ifdef KVK_BENCH_CUDA
static int run_gpu(uint32_t *dts, int ndt, uint32_t tokens)
{
	struct cuda_drv drv;
	struct kvk_cuda *kc;
	struct figures fig[4];
	CUdevice dev;
	CUcontext cctx;
	CUdeviceptr a, b, dpool;
	size_t bytes = (size_t)1 << 30;
	double copy = 0, t;
	int i, rep, ret;

	if (cuda_drv_open(&drv) || cuda_drv_device_open(&drv, 0, &dev, &cctx)) {
		printf("no GPU\n");
		return 77;
	}
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret) {
		printf("no kernels: %d\n", ret);
		return 77;
	}
	if (drv.cuMemAlloc(&a, bytes) || drv.cuMemAlloc(&b, bytes))
		return 1;
	for (rep = 0; rep < 5; rep++) {
		t = now_s();
		drv.cuMemcpyDtoD(b, a, bytes);
		drv.cuCtxSynchronize();
		t = now_s() - t;
		if (rep && bytes / t / 1e9 > copy)
			copy = bytes / t / 1e9;
	}
	drv.cuMemFree(a);
	drv.cuMemFree(b);
	for (i = 0; i < ndt; i++) {
		struct figures *f = &fig[i];
		struct seq s;
		uint32_t ctx, layer, *keep, n;
		float *q, *out, *score;

		memset(f, 0, sizeof(*f));
		f->dtype = dts[i];
		if (seq_init(&s, dts[i], tokens, 1, NULL))
			return 1;
		if (drv.cuMemAlloc(&dpool, s.pool_bytes) ||
		    drv.cuMemcpyHtoD(dpool, s.pool, s.pool_bytes))
			return 1;
		f->tail = tokens - 1024 - 64;
		f->k_bytes = (double)f->tail * LAYERS * KVH * s.l.row_bytes;
		f->kv_bytes = 2 * f->k_bytes;
		f->splice_del_s = f->splice_ins_s = INFINITY;
		for (rep = 0; rep < 3; rep++) {
			struct kvk_splice_args sa = {
				.layout = &s.l,
				.pool_base = (void *)(uintptr_t)dpool,
				.block_table = s.table, .nblocks = s.nblocks,
				.len = s.len, .at = 1024, .ndel = 64,
				.nins = 32, .delta = -32,
			};

			t = now_s();
			ret = kvk_cuda_splice(kc, &sa);
			t = now_s() - t;
			f->splice_del_s = fmin(f->splice_del_s, t);
			sa.len = s.len - 32;
			sa.ndel = 0;
			sa.delta = 32;
			t = now_s();
			ret |= kvk_cuda_splice(kc, &sa);
			t = now_s() - t;
			f->splice_ins_s = fmin(f->splice_ins_s, t);
			if (ret)
				return 1;
		}
		q = malloc(sizeof(float) * 32 * QH * D);
		out = malloc(sizeof(float) * tokens);
		score = malloc(sizeof(float) * tokens);
		keep = malloc(sizeof(uint32_t) * tokens);
		for (n = 0; n < 32 * QH * D; n++)
			q[n] = gauss() * 0.3f;
		ctx = s.len;
		t = now_s();
		for (layer = 0; layer < LAYERS; layer++) {
			struct kvk_decode_args da = {
				.layout = &s.l,
				.pool_base = (void *)(uintptr_t)dpool,
				.layer = layer, .batch = 1, .q_heads = QH,
				.max_blocks_per_seq = s.nblocks, .q = q,
				.block_tables = s.table, .ctx_lens = &ctx,
				.scale = 0.088f, .out = out,
			};

			kvk_cuda_decode(kc, &da);
		}
		f->decode_before_s = now_s() - t;
		{
			struct kvk_score_args sa = {
				.layout = &s.l,
				.pool_base = (void *)(uintptr_t)dpool,
				.layer = 0, .q_heads = QH, .n_q = 32,
				.flags = KVK_SCORE_CAUSAL, .q = q,
				.block_table = s.table, .nblocks = s.nblocks,
				.len = s.len, .scale = 0.088f, .out = score,
			};

			t = now_s();
			ret = kvk_cuda_score(kc, &sa);
			f->score_layer_s = now_s() - t;
		}
		f->kept = choose(score, s.len, 2048, 4, 64, keep);
		{
			struct kvk_compact_args ca = {
				.layout = &s.l,
				.pool_base = (void *)(uintptr_t)dpool,
				.block_table = s.table, .nblocks = s.nblocks,
				.len = s.len, .keep = keep, .nkeep = f->kept,
			};

			t = now_s();
			ret |= kvk_cuda_compact(kc, &ca);
			f->compact_s = now_s() - t;
		}
		ctx = f->kept;
		t = now_s();
		for (layer = 0; layer < LAYERS; layer++) {
			struct kvk_decode_args da = {
				.layout = &s.l,
				.pool_base = (void *)(uintptr_t)dpool,
				.layer = layer, .batch = 1, .q_heads = QH,
				.max_blocks_per_seq = s.nblocks, .q = q,
				.block_tables = s.table, .ctx_lens = &ctx,
				.scale = 0.088f, .out = out,
			};

			kvk_cuda_decode(kc, &da);
		}
		f->decode_after_s = now_s() - t;
		f->reprefill_s = NAN;
		print_fig(f, copy, "gpu");
		drv.cuMemFree(dpool);
		seq_free(&s);
		free(q);
		free(out);
		free(score);
		free(keep);
		if (ret)
			return 1;
	}
	printf("{\"device\": \"gpu\", \"splice_gbps\": %.3f, \"copy_gbps\": "
	       "%.3f, \"results\": [", fig[0].k_bytes / fig[0].splice_del_s /
	       1e9, copy);
	for (i = 0; i < ndt; i++) {
		fig[i].reprefill_s = 0;
		json_fig(&fig[i], copy, i == ndt - 1);
	}
	printf("]}\n");
	kvk_cuda_free(kc);
	return 0;
}
#endif

int main(int argc, char **argv)
{
	uint32_t dts[4] = { KVK_BF16, KVK_FP8 }, tokens = 32768;
	struct figures fig[4];
	unsigned int threads = 0;
	int ndt = 2, huge = 1, gpu = 0, i, opt;
	struct kvk_cpu *cpu;
	double copy, copy2;

	static const struct option lopts[] = {
		{ "gpu", no_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};

	while ((opt = getopt_long(argc, argv, "t:n:k:H", lopts, NULL)) != -1) {
		switch (opt) {
		case 'g':
			gpu = 1;
			break;
		case 't':
			threads = (unsigned int)atoi(optarg);
			break;
		case 'n':
			tokens = (uint32_t)atoi(optarg);
			break;
		case 'H':
			huge = 0;
			break;
		case 'k': {
			char *str = strdup(optarg), *tok, *save = NULL;

			ndt = 0;
			for (tok = strtok_r(str, ",", &save); tok && ndt < 4;
			     tok = strtok_r(NULL, ",", &save)) {
				int d = kvk_dtype_from_name(tok);

				if (d < 0) {
					fprintf(stderr, "unknown dtype %s\n", tok);
					return 2;
				}
				dts[ndt++] = (uint32_t)d;
			}
			free(str);
			break;
		}
		default:
			fprintf(stderr, "usage: %s [-t threads] [-n tokens] "
				"[-k dtypes] [-H] [--gpu]\n", argv[0]);
			return 2;
		}
	}
	if (!ndt || tokens < 8192) {
		fprintf(stderr, "need a dtype and at least 8192 tokens\n");
		return 2;
	}
	if (gpu) {
#ifdef KVK_BENCH_CUDA
		return run_gpu(dts, ndt, tokens);
#else
		printf("built without cuda.h\n");
		return 77;
#endif
	}
	if (kvk_cpu_init(&cpu, threads)) {
		fprintf(stderr, "no thread pool\n");
		return 1;
	}
	printf("kvpool-bench-edits: %u tokens, %u layers, %u kv heads, "
	       "head_dim %u, %u tokens per block; %u threads, %s\n", tokens,
	       LAYERS, KVH, D, TPB, kvk_cpu_threads(cpu), kvk_cpu_simd(cpu));
	copy = copy_bw(cpu, huge);
	printf("copy bandwidth: %.2f GB/s\n", copy);
	fflush(stdout);
	for (i = 0; i < ndt; i++) {
		if (run_cpu(dts[i], tokens, huge, cpu, &fig[i]))
			return 1;
		print_fig(&fig[i], copy, "cpu");
	}
	copy2 = copy_bw(cpu, huge);
	printf("copy bandwidth at the end: %.2f GB/s (ratios use the higher, "
	       "%.2f)\n", copy2, copy2 > copy ? copy2 : copy);
	if (copy2 > copy)
		copy = copy2;
	printf("{\"splice_gbps\": %.3f, \"copy_gbps\": %.3f, "
	       "\"splice_vs_reprefill\": %.1f, \"splice_kv_gbps\": %.3f, "
	       "\"results\": [", fig[0].k_bytes / fig[0].splice_del_s / 1e9,
	       copy, fig[0].reprefill_s / fig[0].splice_del_s,
	       fig[0].kv_bytes / fig[0].splice_del_s / 1e9);
	for (i = 0; i < ndt; i++)
		json_fig(&fig[i], copy, i == ndt - 1);
	printf("]}\n");
	kvk_cpu_free(cpu);
	return 0;
}
