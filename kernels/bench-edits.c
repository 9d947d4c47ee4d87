// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-edits - editing a sequence in place against the same
 * machine's copy bandwidth and against re-prefilling it.
 *
 * Layout: 32 layers, 8 KV heads, head_dim 128 (Llama-3.1-8B), 16 tokens
 * per block, 32 query heads, RoPE NEOX base 500000, sequences on a
 * scrambled block table.  The first 64 blocks of a sequence are written
 * with kvk_write_kv() (real quantised data and scales), the others are
 * copies of them.  The edit: a tool output at 1024 replaced by a shorter
 * one (delete 64 slots at 1024, make 32).  Per dtype (default bf16,fp8;
 * -k), R rounds (-R, default 3); every figure is printed as the median
 * over the rounds and its spread [min-max], every ratio is formed per
 * round and printed the same way.
 *
 *  A. A long sequence (-n, default 32,768 tokens), rebuilt every round:
 *   - copy bandwidth: memcpy of a 512 MiB buffer on the same threads
 *     (best of 3 in the round), bytes copied per second;
 *   - splice at 1K: the edit, then the reverse (delete 0, make 32): the
 *     whole tail moves both times, its keys turn; time of each, bytes of
 *     K rewritten per second (tail tokens x K bytes per token) and, since
 *     V moves too, K+V bytes per second, each against the round's copy
 *     bandwidth;
 *   - compression to 2,048 tokens: kvk_score of a 32-query window on one
 *     layer, sinks 4, window 64, the best-scoring others, kvk_compact()
 *     time; decode of one token (all 32 layers) before and after.
 *
 *  B. Edit against re-prefill, end to end, on a shorter sequence (-r,
 *     default 2,048 tokens: re-prefilling 32K tokens on a CPU takes
 *     hours), both sides on the same kernels and threads, the same
 *     rounds, their order alternating from round to round:
 *   - the edit: kvk_splice() (delete 64, make 32 at 1024), then the 32
 *     new tokens' K/V written (kvk_write_kv) and their causal attention
 *     (kvk_prefill), every layer;
 *   - re-prefill: every position from 1024 to the new end recomputed as
 *     an engine does it, the 32 new tokens first, then the tail in
 *     128-token chunks: per chunk and layer the chunk's K/V written and
 *     its queries' causal attention over everything before them.
 *   Two ratios, each formed per round: re-prefill / edit (both paths
 *   whole: each computes the 32 new tokens) and tail re-prefill / splice
 *   (what the splice saves against what it costs).  They count the KV
 *   cache's work only.  They leave out the model's own work (the weights'
 *   matmuls that make q, k, v and the MLP for every recomputed token:
 *   re-prefill needs them for the whole tail, the edit for the 32 new
 *   tokens only), which makes re-prefill dearer still; and they are CPU
 *   figures (--gpu: these kernels on a GPU, no tensor-core matmuls of a
 *   model).
 *   The edit keeps the tail's K/V as computed before the edit (their
 *   keys re-rotated to the new positions); re-prefill recomputes them
 *   after the new tokens: not the same values, the same cache layout.
 *
 * --gpu: the same on GPU 0 (kvk_cuda_*; copy bandwidth with
 * cuMemcpyDtoD; q, K/V and outputs cross from host memory as the
 * daemon's calls do); exit 77 without a GPU or the fatbin.
 * The last stdout line is one JSON object: device, rounds, splice_gbps
 * (K bytes rewritten per second, first dtype, the delete splice, median),
 * copy_gbps, edit_vs_reprefill and splice_vs_reprefill (the two ratios,
 * first dtype, median of the per-round ratio, with _min and _max),
 * reprefill_tokens (the short sequence), splice_kv_gbps, and per dtype
 * every figure above (median, _min, _max).
 * -t threads (0: every CPU this process may run on), -n tokens, -r tokens
 * of the re-prefill sequence (0: leave part B out), -R rounds, -H (no
 * huge pages), -q (quick: -n 4096 -r 1280 -R 2, for tests).
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

/* ---- statistics over the rounds ---- */

#define MAX_ROUNDS	32

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
	double s[MAX_ROUNDS];
	struct stat3 r;

	memcpy(s, x, sizeof(double) * n);
	qsort(s, n, sizeof(double), cmp_dbl);
	r.lo = s[0];
	r.hi = s[n - 1];
	r.med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	return r;
}

/* ---- figures ---- */

/* Part A, one round. */
struct long_round {
	double copy_gbps;
	double splice_del_s, splice_ins_s;
	double score_layer_s, compact_s;
	double decode_before_s, decode_after_s;
	uint32_t kept;
};

/* Part B, one round. */
struct short_round {
	double splice_s, new_s, edit_s;
	double reprefill_s, reprefill_write_s, reprefill_attn_s;
	double reprefill_tail_s;	/* the part after the new tokens */
};

struct figures {
	uint32_t dtype;
	uint32_t tail;			/* part A: tail tokens moved */
	double k_bytes, kv_bytes;	/* rewritten by one splice */
	uint32_t rtail;			/* part B: tail positions recomputed */
	struct long_round a[MAX_ROUNDS];
	struct short_round b[MAX_ROUNDS];
};

#define AT	1024	/* the edit: delete NDEL at AT, make NINS */
#define NDEL	64
#define NINS	32
#define CHUNK	128	/* re-prefill: queries per chunk */
#define WQ	32	/* score: window queries */
#define BUDGET	2048	/* compression: tokens kept */

static int rounds = 3;

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

/* Decode one query token at every layer; seconds. */
static double decode_all(struct dev *d, struct seq *s, const float *q,
			 float *out)
{
	uint32_t ctx = s->len, layer;
	double t = now_s();

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
	return now_s() - t;
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

/* Scratch of one chunk: K/V rows, queries, outputs, slots. */
struct chunk_buf {
	float *k, *v, *q, *out;
	uint32_t *blk, *slot;
};

static int chunk_buf_init(struct chunk_buf *c, uint32_t tokens)
{
	size_t row = (size_t)KVH * D, i, qn = (size_t)CHUNK * QH * D;

	c->k = malloc(sizeof(float) * row * CHUNK * 2);
	c->v = c->k ? c->k + row * CHUNK : NULL;
	c->q = malloc(sizeof(float) * qn);
	c->out = malloc(sizeof(float) * (qn > tokens ? qn : tokens));
	c->blk = malloc(sizeof(uint32_t) * CHUNK * 2);
	c->slot = c->blk ? c->blk + CHUNK : NULL;
	if (!c->k || !c->q || !c->out || !c->blk)
		return -ENOMEM;
	for (i = 0; i < row * CHUNK * 2; i++)
		c->k[i] = gauss();
	for (i = 0; i < qn; i++)
		c->q[i] = gauss() * 0.3f;
	return 0;
}

static void chunk_buf_free(struct chunk_buf *c)
{
	free(c->k);
	free(c->q);
	free(c->out);
	free(c->blk);
}

/*
 * Prefill positions [from, from + n) of s at every layer, n <= CHUNK: K/V
 * written, then the n queries' causal attention over [0, from + n).
 * Adds the seconds of the writes and of the attention.
 */
static int prefill_chunk(struct dev *d, struct seq *s, struct chunk_buf *c,
			 uint32_t from, uint32_t n, double *wr, double *at)
{
	uint32_t i, layer, ctx = from + n;
	double t;
	int r = 0;

	for (i = 0; i < n; i++) {
		c->blk[i] = s->table[(from + i) / TPB];
		c->slot[i] = (from + i) % TPB;
	}
	for (layer = 0; layer < LAYERS && !r; layer++) {
		struct kvk_prefill_args a = {
			.layout = &s->l, .pool_base = d->pool, .layer = layer,
			.batch = 1, .q_heads = QH,
			.max_blocks_per_seq = s->nblocks, .n_new = n,
			.q = c->q, .block_tables = s->table, .ctx_lens = &ctx,
			.scale = 1.0f / sqrtf((float)D), .out = c->out,
		};

		t = now_s();
		r = d->write(d, &s->l, layer, n, c->blk, c->slot, c->k, c->v);
		*wr += now_s() - t;
		if (r)
			break;
		t = now_s();
		r = d->prefill(d, &a);
		*at += now_s() - t;
	}
	return r;
}

/* Part A, one round, on a freshly built sequence. */
static int long_round(struct dev *d, struct seq *s, struct long_round *f)
{
	struct chunk_buf c;
	float *score;
	uint32_t *keep;
	int r;

	f->splice_del_s = f->splice_ins_s = NAN;
	if (chunk_buf_init(&c, s->len))
		return -ENOMEM;
	score = malloc(sizeof(float) * s->len);
	keep = malloc(sizeof(uint32_t) * s->len);
	if (!score || !keep) {
		chunk_buf_free(&c);
		free(score);
		free(keep);
		return -ENOMEM;
	}
	/* splice: delete 64 make 32, then make 32 (back to the length) */
	r = splice_once(d, s, AT, NDEL, NINS, &f->splice_del_s);
	if (!r)
		r = splice_once(d, s, AT, 0, NDEL - NINS, &f->splice_ins_s);
	if (!r)
		f->decode_before_s = decode_all(d, s, c.q, c.out);
	if (!r) {
		struct kvk_score_args a = {
			.layout = &s->l, .pool_base = d->pool, .layer = 0,
			.q_heads = QH, .n_q = WQ, .flags = KVK_SCORE_CAUSAL,
			.q = c.q, .block_table = s->table, .nblocks = s->nblocks,
			.len = s->len, .scale = 1.0f / sqrtf((float)D),
			.out = score,
		};
		double t = now_s();

		r = d->score(d, &a);
		f->score_layer_s = now_s() - t;
	}
	if (!r) {
		struct kvk_compact_args a = {
			.layout = &s->l, .pool_base = d->pool,
			.block_table = s->table, .nblocks = s->nblocks,
			.len = s->len, .keep = keep,
		};
		double t;

		f->kept = choose(score, s->len, BUDGET, 4, 64, keep);
		a.nkeep = f->kept;
		t = now_s();
		r = d->compact(d, &a);
		f->compact_s = now_s() - t;
		if (!r)
			s->len = f->kept;
	}
	if (!r)
		f->decode_after_s = decode_all(d, s, c.q, c.out);
	chunk_buf_free(&c);
	free(score);
	free(keep);
	return r;
}

/* Part B, one round: the edit and the re-prefill, in either order. */
static int short_round(struct dev *d, struct seq *s, int edit_first,
		       struct short_round *f)
{
	uint32_t len0 = s->len, new_len = len0 - NDEL + NINS, p, n;
	struct chunk_buf c;
	double wr = 0, at = 0, t;
	int side, r = 0;

	if (chunk_buf_init(&c, len0))
		return -ENOMEM;
	for (side = 0; side < 2 && !r; side++) {
		if ((side == 0) == !!edit_first) {
			/* the edit, then its 32 new tokens */
			t = now_s();
			r = splice_once(d, s, AT, NDEL, NINS, &f->splice_s);
			if (!r) {
				wr = at = 0;
				r = prefill_chunk(d, s, &c, AT, NINS, &wr, &at);
			}
			f->edit_s = now_s() - t;
			f->new_s = wr + at;
			/* back to the length (not timed) */
			if (!r)
				r = splice_once(d, s, AT, 0, NDEL - NINS, &t);
		} else {
			/* re-prefill of the edited sequence from AT on: the
			 * new tokens (as the edit), then the tail */
			double t1;

			f->reprefill_write_s = f->reprefill_attn_s = 0;
			t = now_s();
			r = prefill_chunk(d, s, &c, AT, NINS,
					  &f->reprefill_write_s,
					  &f->reprefill_attn_s);
			t1 = now_s();
			for (p = AT + NINS; p < new_len && !r; p += n) {
				n = new_len - p < CHUNK ? new_len - p : CHUNK;
				r = prefill_chunk(d, s, &c, p, n,
						  &f->reprefill_write_s,
						  &f->reprefill_attn_s);
			}
			f->reprefill_s = now_s() - t;
			f->reprefill_tail_s = now_s() - t1;
		}
	}
	chunk_buf_free(&c);
	return r;
}

/* ---- output ---- */

#define S3(fig, field)	({						\
	double x_[MAX_ROUNDS];						\
	int i_;								\
	for (i_ = 0; i_ < rounds; i_++)					\
		x_[i_] = (fig)field;					\
	stat_of(x_, rounds);						\
})

/* median [min-max], prec decimals */
static void p3(int prec, struct stat3 s)
{
	printf("%.*f [%.*f-%.*f]", prec, s.med, prec, s.lo, prec, s.hi);
}

static void print_fig(const struct figures *f, const char *dev, int part_b,
		      uint32_t rtokens)
{
	const char *dt = kvk_dtype_name(f->dtype);

	if (f->tail) {
		printf("%s %s: splice at 1K (tail %u tokens, %d rounds, median "
		       "[min-max]): delete 64/make 32 ", dev, dt, f->tail,
		       rounds);
		p3(3, S3(f, ->a[i_].splice_del_s));
		printf(" s, make 32 ");
		p3(3, S3(f, ->a[i_].splice_ins_s));
		printf(" s\n    K rewritten ");
		p3(2, S3(f, ->k_bytes / f->a[i_].splice_del_s / 1e9));
		printf(" GB/s (");
		p3(2, S3(f, ->k_bytes / f->a[i_].splice_del_s / 1e9 /
			   f->a[i_].copy_gbps));
		printf(" of copy), K+V ");
		p3(2, S3(f, ->kv_bytes / f->a[i_].splice_del_s / 1e9));
		printf(" GB/s (");
		p3(2, S3(f, ->kv_bytes / f->a[i_].splice_del_s / 1e9 /
			   f->a[i_].copy_gbps));
		printf(" of copy); copy ");
		p3(2, S3(f, ->a[i_].copy_gbps));
		printf(" GB/s\n    compression to %u tokens: score ",
		       f->a[0].kept);
		p3(3, S3(f, ->a[i_].score_layer_s));
		printf(" s per layer, compaction ");
		p3(4, S3(f, ->a[i_].compact_s));
		printf(" s; decode per token (32 layers) ");
		p3(4, S3(f, ->a[i_].decode_before_s));
		printf(" s -> ");
		p3(4, S3(f, ->a[i_].decode_after_s));
		printf(" s: ");
		p3(1, S3(f, ->a[i_].decode_before_s /
			   f->a[i_].decode_after_s));
		printf(" x cheaper\n");
	}
	if (part_b) {
		printf("%s %s: %u tokens, the edit at 1K against re-prefilling "
		       "from 1K (%d rounds, median [min-max]):\n    edit ", dev,
		       dt, rtokens, rounds);
		p3(4, S3(f, ->b[i_].edit_s));
		printf(" s = splice ");
		p3(4, S3(f, ->b[i_].splice_s));
		printf(" s + the 32 new tokens ");
		p3(4, S3(f, ->b[i_].new_s));
		printf(" s\n    re-prefill ");
		p3(2, S3(f, ->b[i_].reprefill_s));
		printf(" s = the 32 new tokens + the %u-token tail ", f->rtail);
		p3(2, S3(f, ->b[i_].reprefill_tail_s));
		printf(" s (K/V writes ");
		p3(2, S3(f, ->b[i_].reprefill_write_s));
		printf(" s, attention ");
		p3(2, S3(f, ->b[i_].reprefill_attn_s));
		printf(" s)\n    re-prefill / edit ");
		p3(1, S3(f, ->b[i_].reprefill_s / f->b[i_].edit_s));
		printf(" x; tail re-prefill / splice ");
		p3(0, S3(f, ->b[i_].reprefill_tail_s / f->b[i_].splice_s));
		printf(" x\n    (the KV cache's work only, on %s kernels: K/V "
		       "writes, attention, the splice; not in it: the model's "
		       "matmuls for every recomputed token, which re-prefill "
		       "pays for the %u tail tokens and the edit does not)\n",
		       dev, f->rtail);
	}
	fflush(stdout);
}

static void j3(const char *name, struct stat3 s, int prec)
{
	printf("\"%s\": %.*f, \"%s_min\": %.*f, \"%s_max\": %.*f", name,
	       prec, s.med, name, prec, s.lo, name, prec, s.hi);
}

static void json_fig(const struct figures *f, int part_b, int last)
{
	printf("{\"dtype\": \"%s\", \"rounds\": %d", kvk_dtype_name(f->dtype),
	       rounds);
	if (f->tail) {
		printf(", \"tail_tokens\": %u, ", f->tail);
		j3("splice_s", S3(f, ->a[i_].splice_del_s), 4);
		printf(", ");
		j3("splice_insert_s", S3(f, ->a[i_].splice_ins_s), 4);
		printf(", ");
		j3("splice_gbps", S3(f, ->k_bytes / f->a[i_].splice_del_s /
				      1e9), 3);
		printf(", ");
		j3("splice_kv_gbps", S3(f, ->kv_bytes / f->a[i_].splice_del_s /
					 1e9), 3);
		printf(", ");
		j3("splice_ratio", S3(f, ->k_bytes / f->a[i_].splice_del_s /
				       1e9 / f->a[i_].copy_gbps), 3);
		printf(", ");
		j3("splice_kv_ratio", S3(f, ->kv_bytes /
					  f->a[i_].splice_del_s / 1e9 /
					  f->a[i_].copy_gbps), 3);
		printf(", ");
		j3("copy_gbps", S3(f, ->a[i_].copy_gbps), 3);
		printf(", ");
		j3("score_layer_s", S3(f, ->a[i_].score_layer_s), 4);
		printf(", ");
		j3("compact_s", S3(f, ->a[i_].compact_s), 5);
		printf(", \"tokens_kept\": %u, ", f->a[0].kept);
		j3("decode_before_s", S3(f, ->a[i_].decode_before_s), 5);
		printf(", ");
		j3("decode_after_s", S3(f, ->a[i_].decode_after_s), 5);
	}
	if (part_b) {
		printf(", \"reprefill_tail_tokens\": %u, ", f->rtail);
		j3("edit_s", S3(f, ->b[i_].edit_s), 5);
		printf(", ");
		j3("edit_new_s", S3(f, ->b[i_].new_s), 5);
		printf(", ");
		j3("edit_splice_s", S3(f, ->b[i_].splice_s), 5);
		printf(", ");
		j3("reprefill_s", S3(f, ->b[i_].reprefill_s), 4);
		printf(", ");
		j3("reprefill_write_s", S3(f, ->b[i_].reprefill_write_s),
		   4);
		printf(", ");
		j3("reprefill_attn_s", S3(f, ->b[i_].reprefill_attn_s), 4);
		printf(", ");
		j3("reprefill_tail_s", S3(f, ->b[i_].reprefill_tail_s), 4);
		printf(", ");
		j3("edit_vs_reprefill", S3(f, ->b[i_].reprefill_s /
					    f->b[i_].edit_s), 2);
		printf(", ");
		j3("splice_vs_reprefill", S3(f, ->b[i_].reprefill_tail_s /
					      f->b[i_].splice_s), 1);
	}
	printf("}%s", last ? "" : ", ");
}

static void json_all(const char *dev, const struct figures *fig, int n,
		     uint32_t tokens, uint32_t rtokens)
{
	const struct figures *f = fig;
	int i;

	printf("{\"device\": \"%s\", \"rounds\": %d, \"tokens\": %u, "
	       "\"reprefill_tokens\": %u", dev, rounds, tokens, rtokens);
	if (f->tail) {
		struct stat3 kg = S3(f, ->k_bytes / f->a[i_].splice_del_s / 1e9);
		struct stat3 kv = S3(f, ->kv_bytes / f->a[i_].splice_del_s /
				     1e9);

		printf(", \"splice_gbps\": %.3f, \"splice_kv_gbps\": %.3f, ",
		       kg.med, kv.med);
		j3("copy_gbps", S3(f, ->a[i_].copy_gbps), 3);
	}
	if (rtokens) {
		printf(", ");
		j3("edit_vs_reprefill", S3(f, ->b[i_].reprefill_s /
					    f->b[i_].edit_s), 2);
		printf(", ");
		j3("splice_vs_reprefill", S3(f, ->b[i_].reprefill_tail_s /
					      f->b[i_].splice_s), 1);
	}
	printf(", \"results\": [");
	for (i = 0; i < n; i++)
		json_fig(&fig[i], rtokens != 0, i == n - 1);
	printf("]}\n");
}

/* ---- one dtype, every round ---- */

struct host {
	int huge;
	struct kvk_cpu *cpu;
#ifdef KVK_BENCH_CUDA
	struct cuda_drv *drv;
#endif
};

/*
 * The round's sequence s on d.  On the CPU it is built afresh every round
 * (the last round's edits and compaction changed its pool).  On a GPU the
 * host copy *keep is built once (round 0) and uploaded every round to a
 * new device pool.
 */
static int dev_seq(struct dev *d, struct host *h, struct seq *s,
		   struct seq *keep, int rd, uint32_t dtype, uint32_t tokens)
{
#ifdef KVK_BENCH_CUDA
	if (h->drv) {
		CUdeviceptr p;

		if (!rd && seq_init(keep, dtype, tokens, h->huge, NULL))
			return -ENOMEM;
		*s = *keep;
		s->len = tokens;
		if (h->drv->cuMemAlloc(&p, s->pool_bytes))
			return -ENOMEM;
		d->pool = (void *)(uintptr_t)p;
		/* the edits run on their own non-blocking stream, which
		 * does not wait for the legacy stream's copy */
		if (h->drv->cuMemcpyHtoD(p, s->pool, s->pool_bytes) ||
		    h->drv->cuCtxSynchronize())
			return -EIO;
		return 0;
	}
#endif
	(void)keep;
	(void)rd;
	if (seq_init(s, dtype, tokens, h->huge, h->cpu))
		return -ENOMEM;
	d->pool = s->pool;
	return 0;
}

/* After the round; the GPU's host copy goes after the last round. */
static void dev_seq_free(struct dev *d, struct host *h, struct seq *s,
			 struct seq *keep, int last)
{
#ifdef KVK_BENCH_CUDA
	if (h->drv) {
		h->drv->cuMemFree((CUdeviceptr)(uintptr_t)d->pool);
		if (last)
			seq_free(keep);
		return;
	}
#endif
	(void)keep;
	(void)last;
	seq_free(s);
}

static int run_dtype(struct dev *d, struct host *h, double (*copy)(
			     struct host *h), uint32_t tokens,
		     uint32_t rtokens, struct figures *f)
{
	struct seq s, keep_long, keep_short;
	int rd, r;

	if (tokens) {
		f->tail = tokens - AT - NDEL;
		f->k_bytes = 0;
	}
	for (rd = 0; rd < rounds; rd++) {
		int last = rd == rounds - 1;

		if (tokens) {
			r = dev_seq(d, h, &s, &keep_long, rd, f->dtype, tokens);
			if (r)
				return r;
			if (!rd)
				f->k_bytes = (double)f->tail * LAYERS * KVH *
					     s.l.row_bytes +
					     (s.l.dtype == KVK_INT4 ?
					      (double)f->tail * LAYERS * KVH *
					      (D / 16) : 0);
			f->kv_bytes = 2 * f->k_bytes;
			f->a[rd].copy_gbps = copy(h);
			r = long_round(d, &s, &f->a[rd]);
			dev_seq_free(d, h, &s, &keep_long, last);
			if (r)
				return r;
		}
		if (rtokens) {
			r = dev_seq(d, h, &s, &keep_short, rd, f->dtype,
				    rtokens);
			if (r)
				return r;
			f->rtail = rtokens - NDEL - AT;
			r = short_round(d, &s, !(rd % 2), &f->b[rd]);
			dev_seq_free(d, h, &s, &keep_short, last);
			if (r)
				return r;
		}
		fprintf(stderr, "%s round %d of %d done\n",
			kvk_dtype_name(f->dtype), rd + 1, rounds);
	}
	return 0;
}

static double cpu_copy(struct host *h)
{
	return copy_bw(h->cpu, h->huge);
}

#ifdef KVK_BENCH_CUDA
static double gpu_copy(struct host *h)
{
	struct cuda_drv *drv = h->drv;
	CUdeviceptr a, b;
	size_t bytes = (size_t)1 << 30;
	double copy = 0, t;
	int rep;

	if (drv->cuMemAlloc(&a, bytes))
		return 0;
	if (drv->cuMemAlloc(&b, bytes)) {
		drv->cuMemFree(a);
		return 0;
	}
	for (rep = 0; rep < 4; rep++) {
		t = now_s();
		drv->cuMemcpyDtoD(b, a, bytes);
		drv->cuCtxSynchronize();
		t = now_s() - t;
		if (rep && bytes / t / 1e9 > copy)
			copy = bytes / t / 1e9;
	}
	drv->cuMemFree(a);
	drv->cuMemFree(b);
	return copy;
}

static int run_gpu(uint32_t *dts, int ndt, uint32_t tokens, uint32_t rtokens,
		   struct figures *fig)
{
	struct cuda_drv drv;
	struct host h = { .huge = 1, .drv = &drv };
	struct dev d = {
		.name = "gpu", .drv = &drv, .splice = g_splice,
		.compact = g_compact, .score = g_score, .decode = g_decode,
		.prefill = g_prefill, .write = g_write,
	};
	CUdevice dev;
	CUcontext cctx;
	int i, ret;

	if (cuda_drv_open(&drv) ||
	    cuda_drv_device_open(&drv, 0, &dev, &cctx, NULL)) {
		printf("no GPU\n");
		return 77;
	}
	ret = kvk_cuda_init(&d.kc, &drv, NULL);
	if (ret) {
		printf("no kernels: %d\n", ret);
		return 77;
	}
	printf("kvpool-bench-edits --gpu: %u tokens (re-prefill part: %u), "
	       "%u layers, %u kv heads, head_dim %u, %u tokens per block, %d "
	       "rounds; gpu copy bandwidth (cuMemcpyDtoD of 1 GiB) %.1f GB/s\n",
	       tokens, rtokens, LAYERS, KVH, D, TPB, rounds, gpu_copy(&h));
	for (i = 0; i < ndt; i++) {
		memset(&fig[i], 0, sizeof(fig[i]));
		fig[i].dtype = dts[i];
		ret = run_dtype(&d, &h, gpu_copy, tokens, rtokens, &fig[i]);
		if (ret) {
			fprintf(stderr, "gpu %s: %d\n", kvk_dtype_name(dts[i]),
				ret);
			return 1;
		}
		print_fig(&fig[i], "gpu", rtokens != 0, rtokens);
	}
	json_all("gpu", fig, ndt, tokens, rtokens);
	kvk_cuda_free(d.kc);
	return 0;
}
#endif

int main(int argc, char **argv)
{
	static struct figures fig[4];
	uint32_t dts[4] = { KVK_BF16, KVK_FP8 }, tokens = 32768, rtokens = 2048;
	unsigned int threads = 0;
	int ndt = 2, huge = 1, gpu = 0, i, opt;
	struct kvk_cpu *cpu;
	struct host h;

	static const struct option lopts[] = {
		{ "gpu", no_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};

	while ((opt = getopt_long(argc, argv, "t:n:r:R:k:Hq", lopts,
				  NULL)) != -1) {
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
		case 'r':
			rtokens = (uint32_t)atoi(optarg);
			break;
		case 'R':
			rounds = atoi(optarg);
			break;
		case 'q':
			tokens = 4096;
			rtokens = 1280;
			rounds = 2;
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
				"[-r re-prefill tokens] [-R rounds] [-k dtypes] "
				"[-H] [-q] [--gpu]\n", argv[0]);
			return 2;
		}
	}
	if (!ndt || (tokens && tokens < 4096) ||
	    (rtokens && rtokens < AT + NDEL + CHUNK) || (!tokens && !rtokens) ||
	    rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "need a dtype, -n 0 or at least 4096 tokens, "
			"-r 0 or at least %u, not both 0, and 1..%d rounds\n",
			AT + NDEL + CHUNK, MAX_ROUNDS);
		return 2;
	}
	if (gpu) {
#ifdef KVK_BENCH_CUDA
		return run_gpu(dts, ndt, tokens, rtokens, fig);
#else
		printf("built without cuda.h\n");
		return 77;
#endif
	}
	if (kvk_cpu_init(&cpu, threads)) {
		fprintf(stderr, "no thread pool\n");
		return 1;
	}
	h.huge = huge;
	h.cpu = cpu;
#ifdef KVK_BENCH_CUDA
	h.drv = NULL;
#endif
	printf("kvpool-bench-edits: %u tokens (re-prefill part: %u), %u "
	       "layers, %u kv heads, head_dim %u, %u tokens per block; %u "
	       "threads, %s; %d rounds\n", tokens, rtokens, LAYERS, KVH, D,
	       TPB, kvk_cpu_threads(cpu), kvk_cpu_simd(cpu), rounds);
	fflush(stdout);
	for (i = 0; i < ndt; i++) {
		struct dev d = {
			.name = "cpu", .cpu = cpu, .splice = c_splice,
			.compact = c_compact, .score = c_score,
			.decode = c_decode, .prefill = c_prefill,
			.write = c_write,
		};

		fig[i].dtype = dts[i];
		if (run_dtype(&d, &h, cpu_copy, tokens, rtokens, &fig[i])) {
			fprintf(stderr, "%s: failed\n", kvk_dtype_name(dts[i]));
			return 1;
		}
		print_fig(&fig[i], "cpu", rtokens != 0, rtokens);
	}
	json_all("cpu", fig, ndt, tokens, rtokens);
	kvk_cpu_free(cpu);
	return 0;
}
