// SPDX-License-Identifier: MIT
/*
 * kvkern_cpu.c - the optimised CPU attention: a small thread pool, the
 * run-time choice of instruction set, cutting a call into items (split-K
 * for long contexts) and merging the partial (max, sum, output) states.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "kvkern.h"
#include "kvkern_internal.h"

/* per thread: kvkern_simd.h's attn_core() and kvkern_dpbf16.h's attn_bf()
 * (the larger: q 16 x D, two score tiles 2 x 16 x 16, weights 16 x 16,
 * outputs 16 x D) */
#define SCRATCH_FLOATS (16 * KVK_MAX_HEAD_DIM + 2 * 16 * 16 * 16 + 16 * 16 + \
			16 * (KVK_MAX_HEAD_DIM + 2) + 64)
#define MIN_CHUNK 512		/* positions per split-K chunk, at least */

struct kvk_cpu {
	unsigned int nthreads;		/* including the caller */
	const struct kvk_simd_ops *simd;
	pthread_t *th;
	pthread_mutex_t lock;
	pthread_cond_t start;
	pthread_cond_t done;
	uint64_t gen;
	unsigned int busy;
	int stop;
	/* current job */
	kvk_item_fn fn;
	void *ctx;
	uint32_t n;
	atomic_uint next;
};

struct worker_arg {
	struct kvk_cpu *cpu;
	unsigned int id;
};

static void run_items(struct kvk_cpu *cpu, unsigned int id)
{
	uint32_t i;

	while ((i = atomic_fetch_add(&cpu->next, 1)) < cpu->n)
		cpu->fn(cpu->ctx, i, id);
}

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct kvk_cpu *cpu = wa->cpu;
	unsigned int id = wa->id;
	uint64_t seen = 0;

	free(wa);
	pthread_mutex_lock(&cpu->lock);
	for (;;) {
		while (cpu->gen == seen && !cpu->stop)
			pthread_cond_wait(&cpu->start, &cpu->lock);
		if (cpu->stop)
			break;
		seen = cpu->gen;
		pthread_mutex_unlock(&cpu->lock);
		run_items(cpu, id);
		pthread_mutex_lock(&cpu->lock);
		if (--cpu->busy == 0)
			pthread_cond_signal(&cpu->done);
	}
	pthread_mutex_unlock(&cpu->lock);
	return NULL;
}

/*
 * AMX: the CPU has AMX-TILE and AMX-BF16 and the kernel grants this
 * process the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM), Linux
 * 5.16 and later; the grant holds for every thread of the process).
 */
#define KVK_ARCH_REQ_XCOMP_PERM	0x1023
#define KVK_XFEATURE_XTILEDATA	18

static int amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("amx-tile") ||
	    !__builtin_cpu_supports("amx-bf16"))
		return;
	amx_granted = syscall(SYS_arch_prctl, KVK_ARCH_REQ_XCOMP_PERM,
			      KVK_XFEATURE_XTILEDATA) == 0;
}

static const struct kvk_simd_ops *pick_simd(void)
{
	const char *cap = getenv("KVK_SIMD");
	int lvl = 4;	/* the best the CPU has */

	if (cap && !strcmp(cap, "avx512bf16"))
		lvl = 3;
	else if (cap && !strcmp(cap, "avx512"))
		lvl = 2;
	else if (cap && !strcmp(cap, "avx2"))
		lvl = 1;
	else if (cap && (!strcmp(cap, "generic") || !strcmp(cap, "scalar")))
		lvl = 0;
	__builtin_cpu_init();
	if (lvl >= 3 && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512bf16") &&
	    __builtin_cpu_supports("avx512vbmi") &&
	    __builtin_cpu_supports("avx512vnni")) {
		if (lvl >= 4) {
			pthread_once(&amx_once, amx_probe);
			if (amx_granted)
				return &kvk_simd_amx;
		}
		return &kvk_simd_avx512bf16;
	}
	if (lvl >= 2 && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512dq"))
		return &kvk_simd_avx512;
	if (lvl >= 1 && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma"))
		return &kvk_simd_avx2;
	return &kvk_simd_generic;
}

void kvk_cpu_free(struct kvk_cpu *cpu)
{
	unsigned int i;

	if (!cpu)
		return;
	pthread_mutex_lock(&cpu->lock);
	cpu->stop = 1;
	pthread_cond_broadcast(&cpu->start);
	pthread_mutex_unlock(&cpu->lock);
	for (i = 1; i < cpu->nthreads; i++)
		pthread_join(cpu->th[i], NULL);
	pthread_mutex_destroy(&cpu->lock);
	pthread_cond_destroy(&cpu->start);
	pthread_cond_destroy(&cpu->done);
	free(cpu->th);
	free(cpu);
}

int kvk_cpu_init(struct kvk_cpu **out, unsigned int nthreads)
{
	struct kvk_cpu *cpu;
	unsigned int i;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!nthreads) {
		cpu_set_t set;
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		/* the CPUs this thread may run on (taskset, cgroups) */
		if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set))
			n = CPU_COUNT(&set);
		nthreads = n > 0 ? (unsigned int)n : 1;
	}
	if (nthreads > 1024)
		return -EINVAL;
	cpu = calloc(1, sizeof(*cpu));
	if (!cpu)
		return -ENOMEM;
	cpu->th = calloc(nthreads, sizeof(*cpu->th));
	if (!cpu->th) {
		free(cpu);
		return -ENOMEM;
	}
	cpu->simd = pick_simd();
	pthread_mutex_init(&cpu->lock, NULL);
	pthread_cond_init(&cpu->start, NULL);
	pthread_cond_init(&cpu->done, NULL);
	cpu->nthreads = 1;
	for (i = 1; i < nthreads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));

		if (!wa) {
			kvk_cpu_free(cpu);
			return -ENOMEM;
		}
		wa->cpu = cpu;
		wa->id = i;
		ret = pthread_create(&cpu->th[i], NULL, worker, wa);
		if (ret) {
			free(wa);
			kvk_cpu_free(cpu);
			return -ret;
		}
		cpu->nthreads++;
	}
	*out = cpu;
	return 0;
}

unsigned int kvk_cpu_threads(const struct kvk_cpu *cpu)
{
	return cpu ? cpu->nthreads : 1;
}

const char *kvk_cpu_simd(const struct kvk_cpu *cpu)
{
	return cpu ? cpu->simd->name : pick_simd()->name;
}

void kvk_parallel_for(struct kvk_cpu *cpu, uint32_t n, kvk_item_fn fn,
		      void *ctx)
{
	uint32_t i;

	if (!cpu || cpu->nthreads == 1 || n <= 1) {
		for (i = 0; i < n; i++)
			fn(ctx, i, 0);
		return;
	}
	pthread_mutex_lock(&cpu->lock);
	cpu->fn = fn;
	cpu->ctx = ctx;
	cpu->n = n;
	atomic_store(&cpu->next, 0);
	cpu->busy = cpu->nthreads - 1;
	cpu->gen++;
	pthread_cond_broadcast(&cpu->start);
	pthread_mutex_unlock(&cpu->lock);
	run_items(cpu, 0);
	pthread_mutex_lock(&cpu->lock);
	while (cpu->busy)
		pthread_cond_wait(&cpu->done, &cpu->lock);
	pthread_mutex_unlock(&cpu->lock);
}

/* ---- memory read bandwidth ---- */

struct bw_ctx {
	const struct kvk_simd_ops *simd;
	const uint8_t *buf;
	size_t share;
	unsigned int parts;
	double sink[1024];
};

static void bw_item(void *p, uint32_t i, unsigned int thread)
{
	struct bw_ctx *c = p;

	c->sink[i % 1024] += c->simd->sum_bytes(c->buf + i * c->share,
						c->share);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double kvk_read_bw(struct kvk_cpu *cpu, const void *buf, size_t bytes,
		   int reps)
{
	struct bw_ctx *c = calloc(1, sizeof(*c));
	double t0, t, best = 0;
	int r;

	if (!c)
		return 0;
	c->simd = cpu ? cpu->simd : pick_simd();
	c->buf = buf;
	/* several pieces per thread, like the attention items */
	c->parts = kvk_cpu_threads(cpu) * 8;
	c->share = (bytes / c->parts) & ~(size_t)255;
	for (r = 0; r < reps; r++) {
		t0 = now_s();
		kvk_parallel_for(cpu, c->parts, bw_item, c);
		t = now_s() - t0;
		if (t > 0 && c->share * c->parts / t / 1e9 > best)
			best = c->share * c->parts / t / 1e9;
	}
	free(c);
	return best;
}

/* ---- attention ---- */

struct group {		/* the rows of one (seq, kv head, query block) */
	uint32_t seq, head, q0, nq;
	uint32_t part;	/* first partial: part + chunk * rows + row */
	uint32_t chunks;
};

struct attn_call {
	struct kvk_attn_job job;
	const struct kvk_simd_ops *simd;
	struct group *groups;
	uint32_t ngroups;
	float *out;
};

static void attn_item(void *p, uint32_t i, unsigned int thread)
{
	struct attn_call *c = p;

	c->simd->item(&c->job, i, thread);
}

static void merge_group(void *p, uint32_t gi, unsigned int thread)
{
	struct attn_call *c = p;
	const struct kvk_attn_job *job = &c->job;
	const struct group *g = &c->groups[gi];
	uint32_t D = job->l->head_dim, G = job->group, R = g->nq * G;
	uint32_t r, ch, d, n_q = job->n_q ? job->n_q : 1;

	for (r = 0; r < R; r++) {
		uint32_t qi = g->q0 + r / G, h = g->head * G + r % G;
		float *o = c->out + (((uint64_t)g->seq * n_q + qi) *
				     job->q_heads + h) * D;
		float M = -INFINITY, L = 0.0f;

		memset(o, 0, sizeof(float) * D);
		for (ch = 0; ch < g->chunks; ch++) {
			const float *pp = job->parts + (uint64_t)(g->part +
					  ch * R + r) * job->part_stride;

			if (pp[0] > M || pp[0] != pp[0])
				M = pp[0];
		}
		if (M == -INFINITY)
			continue;		/* nothing attended: zeros */
		for (ch = 0; ch < g->chunks; ch++) {
			const float *pp = job->parts + (uint64_t)(g->part +
					  ch * R + r) * job->part_stride;
			float w;

			if (pp[0] == -INFINITY)
				continue;
			w = expf(pp[0] - M);
			L += pp[1] * w;
			for (d = 0; d < D; d++)
				o[d] += pp[2 + d] * w;
		}
		for (d = 0; d < D; d++)
			o[d] /= L;
	}
}

static int run_attn(const struct kvk_layout *l, const void *pool,
		    uint32_t layer, uint32_t batch, uint32_t q_heads,
		    uint32_t mbps, uint32_t n_q, const float *q,
		    const uint32_t *bt, const uint32_t *ctx, float scale,
		    float *out, struct kvk_cpu *cpu)
{
	uint32_t G = q_heads / l->kv_heads, H = l->kv_heads;
	uint32_t nq1 = n_q ? n_q : 1, qb = kvk_item_tokens(G),
		 T = l->tokens_per_block;
	uint32_t nthreads = kvk_cpu_threads(cpu);
	uint64_t total = 0, chunk, nitems = 0, nparts = 0, ngroups = 0;
	struct kvk_attn_item *items = NULL;
	struct attn_call c;
	uint32_t b, h, q0, gi, ii, pi, rc, hb;
	size_t sfl;
	int ret = 0;

	memset(&c, 0, sizeof(c));
	if (qb > nq1)
		qb = nq1;
	/* several kv heads per item, so that an item reads whole blocks */
	rc = kvk_item_rows(qb * G);
	hb = KVK_ITEM_ELEMS / (rc * l->head_dim);
	if (hb * rc > KVK_ITEM_ROWS)
		hb = KVK_ITEM_ROWS / rc;
	if (hb > H)
		hb = H;
	if (hb < 1)
		hb = 1;
	/* work per group = positions it reads */
	for (b = 0; b < batch; b++)
		total += (uint64_t)ctx[b] * H * ((nq1 + qb - 1) / qb);
	/* about 16 items per thread: the last ones to start end close
	 * together even when a thread runs slower (shared machines) */
	chunk = total / ((uint64_t)nthreads * 16 * hb) + 1;
	if (chunk < MIN_CHUNK)
		chunk = MIN_CHUNK;
	if (nthreads == 1)
		chunk = UINT32_MAX;
	chunk = (chunk + T - 1) / T * T;

	for (b = 0; b < batch; b++) {
		for (q0 = 0; q0 < nq1; q0 += qb) {
			uint32_t nq = nq1 - q0 < qb ? nq1 - q0 : qb;
			uint64_t end = n_q ? (uint64_t)ctx[b] - n_q + q0 + nq :
					     ctx[b];
			uint64_t nch = (end + chunk - 1) / chunk;

			ngroups += H;
			nitems += (H + hb - 1) / hb * nch;
			nparts += H * nch * nq * G;
		}
	}
	if (nparts > UINT32_MAX || nitems > UINT32_MAX)
		return -E2BIG;
	c.groups = calloc(ngroups ? ngroups : 1, sizeof(*c.groups));
	items = calloc(nitems ? nitems : 1, sizeof(*items));
	c.job.parts = malloc(sizeof(float) * (l->head_dim + 2) *
			     (nparts ? nparts : 1));
	c.simd = cpu ? cpu->simd : pick_simd();
	/* the calls the tiles do not take run the avx512bf16 loops */
	if (c.simd == &kvk_simd_amx &&
	    !kvk_amx_takes(l->dtype, l->head_dim, kvk_job_rows(G, n_q)))
		c.simd = &kvk_simd_avx512bf16;
	sfl = SCRATCH_FLOATS;
	if (c.simd->scratch_bytes > sizeof(float) * sfl)
		sfl = (c.simd->scratch_bytes / sizeof(float) + 15) & ~(size_t)15;
	c.job.scratch = aligned_alloc(64, sizeof(float) * sfl * nthreads);
	if (!c.groups || !items || !c.job.parts || !c.job.scratch) {
		ret = -ENOMEM;
		goto out;
	}
	gi = ii = pi = 0;
	for (b = 0; b < batch; b++) {
		for (q0 = 0; q0 < nq1; q0 += qb) {
			uint32_t nq = nq1 - q0 < qb ? nq1 - q0 : qb;
			uint64_t end = n_q ? (uint64_t)ctx[b] - n_q + q0 + nq :
					     ctx[b];
			uint32_t nch = (uint32_t)((end + chunk - 1) / chunk);
			uint32_t ch, hstride = nch * nq * G;

			/* partials: [head][chunk][row] from pi */
			for (h = 0; h < H; h++) {
				struct group *g = &c.groups[gi++];

				g->seq = b;
				g->head = h;
				g->q0 = q0;
				g->nq = nq;
				g->part = pi + h * hstride;
				g->chunks = nch;
			}
			for (ch = 0; ch < nch; ch++) {
				for (h = 0; h < H; h += hb) {
					struct kvk_attn_item *it = &items[ii++];

					it->seq = b;
					it->head = h;
					it->nh = H - h < hb ? H - h : hb;
					it->hstride = hstride;
					it->q0 = q0;
					it->nq = nq;
					it->t0 = (uint32_t)(ch * chunk);
					it->t1 = (uint32_t)((uint64_t)(ch + 1) *
						 chunk < end ? (ch + 1) * chunk :
						 end);
					it->part = pi + h * hstride +
						   ch * nq * G;
				}
			}
			pi += H * hstride;
		}
	}
	c.ngroups = gi;
	c.out = out;
	c.job.l = l;
	c.job.pool = pool;
	c.job.layer = layer;
	c.job.q_heads = q_heads;
	c.job.group = G;
	c.job.n_q = n_q;
	c.job.max_blocks_per_seq = mbps;
	c.job.scale = scale;
	c.job.q = q;
	c.job.block_tables = bt;
	c.job.ctx_lens = ctx;
	c.job.items = items;
	c.job.part_stride = (l->head_dim + 2);
	c.job.scratch_floats = sfl;
	kvk_parallel_for(cpu, ii, attn_item, &c);
	kvk_parallel_for(cpu, gi, merge_group, &c);
out:
	free(c.groups);
	free(items);
	free(c.job.parts);
	free(c.job.scratch);
	return ret;
}

int kvk_decode(const struct kvk_decode_args *a, struct kvk_cpu *cpu)
{
	int ret = kvk_check_decode(a);

	if (ret || !a->batch)
		return ret;
	return run_attn(a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, 0, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out, cpu);
}

int kvk_prefill(const struct kvk_prefill_args *a, struct kvk_cpu *cpu)
{
	int ret = kvk_check_prefill(a);

	if (ret || !a->batch)
		return ret;
	return run_attn(a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, a->n_new, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out, cpu);
}
