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
 *    of the tail's queries (kvk_prefill, 128-query chunks measured at the
 *    start, middle and end of the tail on one layer, the cost per chunk
 *    interpolated linearly in its context over all chunks, x 32 layers).
 *    The model's own work (projections, MLP) is not counted: a lower
 *    bound on the cost of re-prefilling;
 *  - compression to 2,048 tokens: kvk_score of a 32-query window on one
 *    layer, sinks 4, window 64, the best-scoring others, kvk_compact()
 *    time; decode of one token (all 32 layers, best of 2) before and
 *    after.
 *
 * --gpu: the same on GPU 0 (kvk_cuda_*; copy bandwidth with
 * cuMemcpyDtoD); exit 77 without a GPU or the fatbin.
 * The last stdout line is one JSON object: device, splice_gbps (K bytes
 * rewritten per second, first dtype, the delete splice), copy_gbps,
 * splice_vs_reprefill (re-prefill estimate / splice time), splice_kv_gbps,
 * and per dtype every figure above.  -t threads (0: all CPUs), -n tokens, -H (no huge
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

/* ---- where the ops run ---- */

struct dev {
	const char *name;
	void *pool;			/* host pool, or a device address */
	struct kvk_cpu *cpu;
#ifdef KVK_BENCH_CUDA
	struct kvk_cuda *kc;
	struct cuda_drv *drv;
#endif
	int (*splice)(struct dev *d, struct kvk_splice_args *a);
	int (*compact)(struct dev *d, struct kvk_compact_args *a);
	int (*score)(struct dev *d, struct kvk_score_args *a);
	int (*decode)(struct dev *d, struct kvk_decode_args *a);
	int (*prefill)(struct dev *d, struct kvk_prefill_args *a);
	int (*write)(struct dev *d, const struct kvk_layout *l,
		     uint32_t layer, uint32_t n, const uint32_t *b,
		     const uint32_t *sl, const float *k, const float *v);
};

static int c_splice(struct dev *d, struct kvk_splice_args *a)
{
	return kvk_splice(a, d->cpu);
}

static int c_compact(struct dev *d, struct kvk_compact_args *a)
{
	return kvk_compact(a, d->cpu);
}

static int c_score(struct dev *d, struct kvk_score_args *a)
{
	return kvk_score(a, d->cpu);
}

static int c_decode(struct dev *d, struct kvk_decode_args *a)
{
	return kvk_decode(a, d->cpu);
}

static int c_prefill(struct dev *d, struct kvk_prefill_args *a)
{
	return kvk_prefill(a, d->cpu);
}

static int c_write(struct dev *d, const struct kvk_layout *l, uint32_t layer,
		   uint32_t n, const uint32_t *b, const uint32_t *sl,
		   const float *k, const float *v)
{
	return kvk_write_kv(l, d->pool, layer, n, b, sl, k, v);
}

#ifdef KVK_BENCH_CUDA
static int g_splice(struct dev *d, struct kvk_splice_args *a)
{
	return kvk_cuda_splice(d->kc, a);
}

static int g_compact(struct dev *d, struct kvk_compact_args *a)
{
	return kvk_cuda_compact(d->kc, a);
}

static int g_score(struct dev *d, struct kvk_score_args *a)
{
	return kvk_cuda_score(d->kc, a);
}

static int g_decode(struct dev *d, struct kvk_decode_args *a)
{
	return kvk_cuda_decode(d->kc, a);
}

static int g_prefill(struct dev *d, struct kvk_prefill_args *a)
{
	return kvk_cuda_prefill(d->kc, a);
}

static int g_write(struct dev *d, const struct kvk_layout *l, uint32_t layer,
		   uint32_t n, const uint32_t *b, const uint32_t *sl,
		   const float *k, const float *v)
{
	return kvk_cuda_write_kv(d->kc, l, (CUdeviceptr)(uintptr_t)d->pool,
				 layer, n, b, sl, k, v);
}
#endif

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

static int splice_once(struct dev *d, struct seq *s, uint32_t at,
		       uint32_t ndel, uint32_t nins, double *t)
{
	struct kvk_splice_args a = {
		.layout = &s->l, .pool_base = d->pool,
		.block_table = s->table, .nblocks = s->nblocks, .len = s->len,
		.at = at, .ndel = ndel, .nins = nins,
		.delta = (int64_t)nins - ndel,
	};
	double t0 = now_s();
	int r = d->splice(d, &a);

	*t = now_s() - t0;
	if (!r)
		s->len = s->len - ndel + nins;
	return r;
}

/* Decode one query token at every layer; seconds (best of 2). */
static double decode_all(struct dev *d, struct seq *s, const float *q,
			 float *out)
{
	uint32_t ctx = s->len, layer;
	double best = INFINITY, t;
	int rep;

	for (rep = 0; rep < 2; rep++) {
		t = now_s();
		for (layer = 0; layer < LAYERS; layer++) {
			struct kvk_decode_args a = {
				.layout = &s->l, .pool_base = d->pool,
				.layer = layer, .batch = 1, .q_heads = QH,
				.max_blocks_per_seq = s->nblocks, .q = q,
				.block_tables = s->table, .ctx_lens = &ctx,
				.scale = 1.0f / sqrtf((float)D), .out = out,
			};

			if (d->decode(d, &a))
				return NAN;
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

#define CHUNK	128	/* re-prefill: queries per attention call */
#define WQ	32	/* score: window queries */

static int run_one(struct dev *d, struct seq *s, uint32_t tokens,
		   struct figures *f)
{
	const uint32_t at = 1024, ndel = 64, nins = 32, budget = 2048;
	size_t row = (size_t)KVH * D;
	double t, cs[3], ts[3];
	float *q, *out, *k, *v, *score;
	uint32_t *blk, *slot, *keep, i, layer, c, rep;
	int r = 0;

	f->tail = tokens - at - ndel;
	f->k_bytes = (double)f->tail * LAYERS * KVH * s->l.row_bytes +
		     (s->l.dtype == KVK_INT4 ? (double)f->tail * LAYERS * KVH *
		      (D / 16) : 0);
	f->kv_bytes = 2 * f->k_bytes;
	/* splice: delete 64 make 32, then make 32 (back to the length) */
	f->splice_del_s = f->splice_ins_s = INFINITY;
	for (rep = 0; rep < 3 && !r; rep++) {
		r = splice_once(d, s, at, ndel, nins, &t);
		f->splice_del_s = t < f->splice_del_s ? t : f->splice_del_s;
		if (!r)
			r = splice_once(d, s, at, 0, ndel - nins, &t);
		f->splice_ins_s = t < f->splice_ins_s ? t : f->splice_ins_s;
	}
	if (r)
		return r;
	k = malloc(sizeof(float) * row * CHUNK * 2);
	v = k + row * CHUNK;
	q = malloc(sizeof(float) * CHUNK * QH * D);
	out = malloc(sizeof(float) * (CHUNK * QH * D > tokens ?
				      CHUNK * QH * D : tokens));
	blk = malloc(sizeof(uint32_t) * CHUNK * 2);
	slot = blk + CHUNK;
	score = malloc(sizeof(float) * tokens);
	keep = malloc(sizeof(uint32_t) * tokens);
	if (!k || !q || !out || !blk || !score || !keep)
		return -ENOMEM;
	for (i = 0; i < row * CHUNK * 2; i++)
		k[i] = gauss();
	for (i = 0; i < CHUNK * QH * D; i++)
		q[i] = gauss() * 0.3f;
	/* re-prefill: K/V writes of the tail, 2 layers measured */
	t = now_s();
	for (layer = 0; layer < 2 && !r; layer++)
		for (c = at + ndel; c < tokens && !r; c += CHUNK) {
			uint32_t n = tokens - c < CHUNK ? tokens - c : CHUNK;

			for (i = 0; i < n; i++) {
				blk[i] = s->table[(c + i) / TPB];
				slot[i] = (c + i) % TPB;
			}
			r = d->write(d, &s->l, layer, n, blk, slot, k, v);
		}
	f->write_s = (now_s() - t) / 2 * LAYERS;
	/* re-prefill: causal attention, a chunk at three contexts */
	cs[0] = at + ndel + CHUNK;
	cs[1] = (tokens + at) / 2;
	cs[2] = tokens;
	for (i = 0; i < 3 && !r; i++) {
		uint32_t ctx = (uint32_t)cs[i];
		struct kvk_prefill_args a = {
			.layout = &s->l, .pool_base = d->pool, .layer = 0,
			.batch = 1, .q_heads = QH,
			.max_blocks_per_seq = s->nblocks, .n_new = CHUNK,
			.q = q, .block_tables = s->table, .ctx_lens = &ctx,
			.scale = 1.0f / sqrtf((float)D), .out = out,
		};

		t = now_s();
		r = d->prefill(d, &a);
		ts[i] = now_s() - t;
	}
	f->attn_s = 0;
	for (c = at + ndel + CHUNK; c < tokens + CHUNK; c += CHUNK) {
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
	f->decode_before_s = decode_all(d, s, q, out);
	/* score (one layer), choose, compact */
	{
		struct kvk_score_args a = {
			.layout = &s->l, .pool_base = d->pool, .layer = 0,
			.q_heads = QH, .n_q = WQ, .flags = KVK_SCORE_CAUSAL,
			.q = q, .block_table = s->table, .nblocks = s->nblocks,
			.len = s->len, .scale = 1.0f / sqrtf((float)D),
			.out = score,
		};

		t = now_s();
		if (!r)
			r = d->score(d, &a);
		f->score_layer_s = now_s() - t;
	}
	f->kept = choose(score, s->len, budget, 4, 64, keep);
	{
		struct kvk_compact_args a = {
			.layout = &s->l, .pool_base = d->pool,
			.block_table = s->table, .nblocks = s->nblocks,
			.len = s->len, .keep = keep, .nkeep = f->kept,
		};

		t = now_s();
		if (!r)
			r = d->compact(d, &a);
		f->compact_s = now_s() - t;
		if (!r)
			s->len = f->kept;
	}
	f->decode_after_s = decode_all(d, s, q, out);
	free(k);
	free(q);
	free(out);
	free(blk);
	free(score);
	free(keep);
	return r;
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

static void json_all(const char *dev, const struct figures *fig, int n,
		     double copy)
{
	int i;

	printf("{\"device\": \"%s\", \"splice_gbps\": %.3f, \"copy_gbps\": "
	       "%.3f, \"splice_vs_reprefill\": %.1f, \"splice_kv_gbps\": %.3f, "
	       "\"results\": [", dev, fig[0].k_bytes / fig[0].splice_del_s / 1e9,
	       copy, fig[0].reprefill_s / fig[0].splice_del_s,
	       fig[0].kv_bytes / fig[0].splice_del_s / 1e9);
	for (i = 0; i < n; i++)
		json_fig(&fig[i], copy, i == n - 1);
	printf("]}\n");
}

#ifdef KVK_BENCH_CUDA
static int run_gpu(uint32_t *dts, int ndt, uint32_t tokens)
{
	struct cuda_drv drv;
	struct figures fig[4];
	struct dev d = {
		.name = "gpu", .drv = &drv, .splice = g_splice,
		.compact = g_compact, .score = g_score, .decode = g_decode,
		.prefill = g_prefill, .write = g_write,
	};
	CUdevice dev;
	CUcontext cctx;
	CUdeviceptr a, b, dpool;
	size_t bytes = (size_t)1 << 30;
	double copy = 0, t;
	int i, rep, ret;

	if (cuda_drv_open(&drv) || cuda_drv_device_open(&drv, 0, &dev, &cctx, NULL)) {
		printf("no GPU\n");
		return 77;
	}
	ret = kvk_cuda_init(&d.kc, &drv, NULL);
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
	printf("gpu copy bandwidth (cuMemcpyDtoD of 1 GiB): %.1f GB/s\n", copy);
	for (i = 0; i < ndt; i++) {
		struct seq s;

		memset(&fig[i], 0, sizeof(fig[i]));
		fig[i].dtype = dts[i];
		if (seq_init(&s, dts[i], tokens, 1, NULL))
			return 1;
		if (drv.cuMemAlloc(&dpool, s.pool_bytes) ||
		    drv.cuMemcpyHtoD(dpool, s.pool, s.pool_bytes))
			return 1;
		d.pool = (void *)(uintptr_t)dpool;
		ret = run_one(&d, &s, tokens, &fig[i]);
		drv.cuMemFree(dpool);
		seq_free(&s);
		if (ret) {
			fprintf(stderr, "gpu %s: %d\n", kvk_dtype_name(dts[i]),
				ret);
			return 1;
		}
		print_fig(&fig[i], copy, "gpu");
	}
	json_all("gpu", fig, ndt, copy);
	kvk_cuda_free(d.kc);
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
		struct dev d = {
			.name = "cpu", .cpu = cpu, .splice = c_splice,
			.compact = c_compact, .score = c_score,
			.decode = c_decode, .prefill = c_prefill,
			.write = c_write,
		};
		struct seq s;

		memset(&fig[i], 0, sizeof(fig[i]));
		fig[i].dtype = dts[i];
		if (seq_init(&s, dts[i], tokens, huge, cpu)) {
			fprintf(stderr, "%s: cannot build the sequence\n",
				kvk_dtype_name(dts[i]));
			return 1;
		}
		d.pool = s.pool;
		if (run_one(&d, &s, tokens, &fig[i]))
			return 1;
		seq_free(&s);
		print_fig(&fig[i], copy, "cpu");
	}
	copy2 = copy_bw(cpu, huge);
	printf("copy bandwidth at the end: %.2f GB/s (ratios use the higher, "
	       "%.2f)\n", copy2, copy2 > copy ? copy2 : copy);
	if (copy2 > copy)
		copy = copy2;
	json_all("cpu", fig, ndt, copy);
	kvk_cpu_free(cpu);
	return 0;
}
