// SPDX-License-Identifier: MIT
/*
 * bench_pressure.c - `kvpool-bench pressure`: one reasoning trace replayed
 * on a top pool smaller than its peak demand, per pressure policy, in
 * several rounds (--rounds, default 3) with the policies interleaved
 * (round r runs them from the r-th on: ABCD, BCDA, CDAB, ...), in one run
 * (make bench-pressure).  Per policy: the median over the rounds and the
 * spread (min-max) of the goodput and of its ratio to the first policy's
 * in the same round; two policies are ranked only when their spreads do
 * not overlap ("not separated" otherwise, and no ranking at all from
 * fewer than 3 rounds).  The default trace (8 requests, outputs of
 * median 1,000 tokens in [256, 1536]) keeps 3 rounds of 4 policies
 * within minutes on 2 shared cores (172 s at a load average of 7).  See
 * kvpool-bench(1) and Documentation/tiers.rst.
 *
 * The trace: N requests with a short prompt and a long-tailed output
 * (lognormal, capped), spread over P tenant processes (two tenants) that
 * keep up to B requests each in flight.  First an unpressured run (a pool
 * big enough for everything) gives the reference outputs and the trace's
 * peak demand in blocks; then every policy replays the same trace, once
 * per round, on a kvpoold of its own whose top pool is peak / oversub
 * blocks:
 *   recompute   the library drops the least recently used sequence; the
 *               engine re-prefills it when there is room again;
 *   swap-dram   the library swaps it to a dram tier (sized to the peak);
 *   swap-nvme   the same to an nvme tier: a file under the output folder;
 *   stall       the library waits (stall_ms); when the wait runs out the
 *               engine gives up its youngest request and re-prefills it
 *               later;
 *   fail        (not in the default list) as stall without waiting.
 *
 * The work is real: every token's K/V is written for every layer and
 * decode attention runs over the whole sequence for every layer in
 * kvpoold; prefills (first and recomputed) run the causal multi-token
 * attention for every layer; and every token, decoded or recomputed,
 * pays the model's per-token cost as real matrix multiplies in the
 * tenant process: per layer the QKV projection (d_model x (d_model +
 * 2 kv_heads head_dim)), the output projection (d_model x d_model) and
 * the MLP (d_model x d_ff, d_ff x d_model), FP32.  Each layer's input is
 * a synthetic activation per (request, position, layer) instead of the
 * previous layer's output, so that K/V are a function of the trace alone
 * and can be compared bit for bit across runs.
 *
 * Checks per completed request against the unpressured run: the FNV-1a
 * hash of its whole K/V read back at the end (exact), and the sum and sum
 * of squares of every decode attention output (relative 1e-5: the kernel's
 * split-K summation order depends on the batch and the threads free).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/kvpool.h>

#include "kvlease.h"
#include "ctl_util.h"
#include "bench.h"

#define MAX_REQ		256
#define MAX_PROCS	8
#define MAX_BATCH	8
#define MAX_POL		8
#define MAX_ROUNDS	16

struct pcfg {
	uint32_t nreq, procs, batch;
	uint32_t prompt_lo, prompt_hi;
	double out_median, out_sigma;
	uint32_t out_min, out_max;
	uint32_t layers, kv_heads, head_dim, q_heads, d_ff;
	uint64_t block_bytes;
	uint32_t chunk_blocks;
	double oversub;
	uint32_t stall_ms;
	double cap_s;
	const char *out_dir;
	const char *daemon_bin;
	uint32_t seed;
	const char *pol[MAX_POL];
	int npol;
	bool quiet;
	bool quick;		/* small reference copies too */
	int rounds;		/* of every policy, interleaved */
	bool rounds_set;	/* --rounds given */
};

struct preq {
	uint32_t id, proc, prompt, out;
};

/* Per request, in shared memory: written by its worker. */
struct pres {
	volatile int done;
	uint32_t out_tokens;
	uint64_t t_first, t_done;	/* ns since the run's start */
	double csum, csq;
	uint64_t kvhash;
	uint32_t recomputed;		/* tokens re-prefilled */
	uint32_t restarts;
};

struct pwork {
	volatile int state;		/* 0 running, 1 done, 2 failed */
	int err;
	char msg[128];
	struct kvl_policy_stats pst;
	uint64_t giveups;		/* requests given up (stall, fail) */
	uint64_t steps;
};

struct pshared {
	uint64_t t0;
	volatile int stop;
	struct pres res[MAX_REQ];
	struct pwork work[MAX_PROCS];
};

/* What one run measured. */
struct prun {
	char name[16];
	uint32_t round;			/* 1.., 0: the unpressured run */
	int lib_policy;
	uint32_t capacity;
	uint32_t completed;
	uint64_t out_tokens;
	double wall_s;
	double goodput;
	double tpot_p50_ms, tpot_p99_ms;
	uint64_t recomputed;
	uint64_t giveups;
	struct kvl_policy_stats pst;
	uint64_t tier_bytes_in, tier_bytes_out;	/* daemon, lower tier */
	uint64_t tier_copy_in_ns, tier_copy_out_ns;
	uint32_t peak_used;
	double ref_after;		/* the copy reference right after it */
	uint32_t mismatches;		/* outputs or K/V differ */
	bool failed;
	char why[160];
	struct pres res[MAX_REQ];
};

static struct pcfg C;
static struct preq trace[MAX_REQ];
static char out_dir_abs[PATH_MAX];

/* ---- trace ------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static double unif(uint64_t *s)
{
	*s = mix64(*s + 0x9e3779b97f4a7c15ULL);
	return ((double)(*s >> 11) + 0.5) / (double)(1ULL << 53);
}

static void make_trace(void)
{
	uint64_t s = C.seed;
	uint32_t i;

	for (i = 0; i < C.nreq; i++) {
		double z = sqrt(-2.0 * log(unif(&s))) * cos(2 * M_PI * unif(&s));
		double o = C.out_median * exp(C.out_sigma * z);

		trace[i].id = i;
		trace[i].proc = i % C.procs;
		trace[i].prompt = C.prompt_lo +
			(uint32_t)(unif(&s) * (C.prompt_hi - C.prompt_lo + 1));
		if (o < C.out_min)
			o = C.out_min;
		if (o > C.out_max)
			o = C.out_max;
		trace[i].out = (uint32_t)o;
	}
}

/* ---- the model's per-token cost ---------------------------------------- */

struct model {
	uint32_t d, kvd, f;		/* d_model, kv_heads * head_dim, d_ff */
	float *wqkv[16], *wo[16], *wup[16], *wdn[16];
};

static float hval(uint64_t a, uint64_t b)
{
	uint64_t x = mix64((a << 32) ^ b ^ 0x5bd1e995ULL);

	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

static int model_init(struct model *m)
{
	uint32_t l, d = C.q_heads * C.head_dim, kvd = C.kv_heads * C.head_dim;
	size_t i, n;

	m->d = d;
	m->kvd = kvd;
	m->f = C.d_ff;
	for (l = 0; l < C.layers; l++) {
		float sc = 1.0f / sqrtf((float)d);

		m->wqkv[l] = malloc(sizeof(float) * d * (d + 2 * kvd));
		m->wo[l] = malloc(sizeof(float) * d * d);
		m->wup[l] = malloc(sizeof(float) * d * m->f);
		m->wdn[l] = malloc(sizeof(float) * m->f * d);
		if (!m->wqkv[l] || !m->wo[l] || !m->wup[l] || !m->wdn[l])
			return -ENOMEM;
		n = (size_t)d * (d + 2 * kvd);
		for (i = 0; i < n; i++)
			m->wqkv[l][i] = sc * hval(l * 4 + 0, i);
		for (i = 0; i < (size_t)d * d; i++)
			m->wo[l][i] = sc * hval(l * 4 + 1, i);
		for (i = 0; i < (size_t)d * m->f; i++)
			m->wup[l][i] = sc * hval(l * 4 + 2, i);
		for (i = 0; i < (size_t)m->f * d; i++)
			m->wdn[l][i] = hval(l * 4 + 3, i) /
				       sqrtf((float)m->f);
	}
	return 0;
}

/*
 * out[n][m] = in[n][k] . w[k][m].  Each output row depends on its input row
 * only, summed in the same order whatever n is, so a token's result is the
 * same bits decoded alone, in a batch or in a recomputed prefill.
 */
__attribute__((optimize("O3")))
static void matmul(const float *in, const float *w, float *out, uint32_t n,
		   uint32_t k, uint32_t m)
{
	uint32_t i, r, kk, j;

	for (i = 0; i < n; i += 4) {
		uint32_t nr = n - i < 4 ? n - i : 4;

		memset(out + (size_t)i * m, 0, sizeof(float) * nr * m);
		for (kk = 0; kk < k; kk++) {
			const float *wr = w + (size_t)kk * m;

			for (r = 0; r < nr; r++) {
				float a = in[(size_t)(i + r) * k + kk];
				float *o = out + (size_t)(i + r) * m;

				for (j = 0; j < m; j++)
					o[j] += a * wr[j];
			}
		}
	}
}

static float gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.7978845608f *
					(x + 0.044715f * x * x * x)));
}

/* ---- a tenant process ----------------------------------------------------- */

enum slot_state { S_FREE, S_RUN, S_SWAPPED, S_REFILL };

struct slot {
	int req;			/* index in trace, -1 free */
	enum slot_state st;
	struct kvl_seq *seq;
	uint32_t done;			/* tokens decoded so far */
	uint64_t born;
	bool filled;			/* prefilled once: a refill recomputes */
};

struct worker {
	struct pshared *sh;
	struct pwork *pw;
	struct kvl_ctx *ctx;
	int layout;
	uint32_t tpb;
	int lib_policy;
	bool giveup_on_fail;		/* stall / fail: the engine gives up */
	struct model m;
	struct slot slots[MAX_BATCH];
	uint32_t queue[MAX_REQ], nq, qhead;
	uint64_t born;
	/* scratch */
	float *x, *qkv, *q, *att, *o, *h, *y, *kv_k, *kv_v;
	uint32_t *blocks, *slotsv;
	uint32_t scratch_tokens;
	double sink;
};

static uint64_t now_rel(struct worker *w)
{
	return ctl_now_ns() - w->sh->t0;
}

static void wfail(struct worker *w, int err, const char *what)
{
	w->pw->err = err;
	snprintf(w->pw->msg, sizeof(w->pw->msg), "%s: %s", what,
		 strerror(err < 0 ? -err : err));
	w->pw->state = 2;
	kvl_policy_stats(w->ctx, &w->pw->pst);
	_exit(1);
}

static int scratch(struct worker *w, uint32_t n)
{
	uint32_t d = w->m.d, kvd = w->m.kvd;

	if (n <= w->scratch_tokens)
		return 0;
	free(w->x); free(w->qkv); free(w->q); free(w->att); free(w->o);
	free(w->h); free(w->y); free(w->kv_k); free(w->kv_v);
	free(w->blocks); free(w->slotsv);
	w->x = malloc(sizeof(float) * n * d);
	w->qkv = malloc(sizeof(float) * n * (d + 2 * kvd));
	w->q = malloc(sizeof(float) * n * d);
	w->att = malloc(sizeof(float) * n * d);
	w->o = malloc(sizeof(float) * n * d);
	w->h = malloc(sizeof(float) * n * w->m.f);
	w->y = malloc(sizeof(float) * n * d);
	w->kv_k = malloc(sizeof(float) * n * kvd);
	w->kv_v = malloc(sizeof(float) * n * kvd);
	w->blocks = malloc(sizeof(uint32_t) * n);
	w->slotsv = malloc(sizeof(uint32_t) * n);
	if (!w->x || !w->qkv || !w->q || !w->att || !w->o || !w->h ||
	    !w->y || !w->kv_k || !w->kv_v || !w->blocks || !w->slotsv)
		return -ENOMEM;
	w->scratch_tokens = n;
	return 0;
}

/* The layer's synthetic input row of (request, position). */
static void input_row(struct worker *w, uint32_t req, uint32_t pos,
		      uint32_t layer, float *x)
{
	uint64_t base = ((uint64_t)req << 40) ^ ((uint64_t)layer << 32) ^ pos;
	uint32_t i;

	for (i = 0; i < w->m.d; i++)
		x[i] = hval(base, i);
}

/* QKV projection of n rows: q into w->q, k and v into w->kv_k/kv_v. */
static void project(struct worker *w, uint32_t n, uint32_t layer)
{
	uint32_t d = w->m.d, kvd = w->m.kvd, cols = d + 2 * kvd, i;

	matmul(w->x, w->m.wqkv[layer], w->qkv, n, d, cols);
	for (i = 0; i < n; i++) {
		const float *r = w->qkv + (size_t)i * cols;

		memcpy(w->q + (size_t)i * d, r, sizeof(float) * d);
		memcpy(w->kv_k + (size_t)i * kvd, r + d, sizeof(float) * kvd);
		memcpy(w->kv_v + (size_t)i * kvd, r + d + kvd,
		       sizeof(float) * kvd);
	}
}

/* Output projection of the attention and the MLP, n rows. */
static void finish_layer(struct worker *w, uint32_t n, uint32_t layer)
{
	uint32_t d = w->m.d, i;

	matmul(w->att, w->m.wo[layer], w->o, n, d, d);
	matmul(w->x, w->m.wup[layer], w->h, n, d, w->m.f);
	for (i = 0; i < n * w->m.f; i++)
		w->h[i] = gelu(w->h[i]);
	matmul(w->h, w->m.wdn[layer], w->y, n, w->m.f, d);
	w->sink += w->o[0] + w->y[(size_t)n * d - 1];
}

/* Prefill positions [0, len) of slot s: K/V, causal attention, model. */
static int prefill(struct worker *w, struct slot *s, uint32_t len)
{
	const struct preq *rq = &trace[s->req];
	uint32_t l, t;
	int r;

	r = scratch(w, len);
	if (r)
		return r;
	r = kvl_seq_append(s->seq, len);
	if (r < 0)
		return r;
	for (l = 0; l < C.layers; l++) {
		for (t = 0; t < len; t++)
			input_row(w, rq->id, t, l, w->x + (size_t)t * w->m.d);
		project(w, len, l);
		r = kvl_seq_write_kv(s->seq, l, 0, len, w->kv_k, w->kv_v);
		if (r)
			return r;
		r = kvl_seq_attention(&s->seq, 1, l, C.q_heads, len, w->q,
				      0.0f, w->att);
		if (r)
			return r;
		finish_layer(w, len, l);
	}
	return 0;
}

static uint32_t blocks_for(struct worker *w, uint32_t tokens)
{
	return (tokens + w->tpb - 1) / w->tpb;
}

static uint32_t resident_count(struct worker *w)
{
	uint32_t i, n = 0;

	for (i = 0; i < C.batch; i++)
		n += w->slots[i].st == S_RUN;
	return n;
}

/* Free top blocks for `need` more and one block of growth for it and for
 * every running request: the engine's admission rule (for new, swapped
 * and dropped requests alike), the same for every policy. */
static bool room(struct worker *w, uint32_t need)
{
	struct kvl_status st;

	if (kvl_status(w->ctx, &st))
		return false;
	return st.capacity - st.used + st.cached >=
	       need + 1 + resident_count(w);
}

static uint64_t fnv_kv(struct worker *w, struct slot *s, uint64_t h,
		       uint32_t len)
{
	uint32_t l, chunk = 256, p;
	uint64_t i;

	scratch(w, chunk);
	for (l = 0; l < C.layers; l++)
		for (p = 0; p < len; p += chunk) {
			uint32_t n = len - p < chunk ? len - p : chunk;
			const uint8_t *b;

			if (kvl_seq_read_kv(s->seq, l, p, n, w->kv_k, w->kv_v))
				return 0;
			b = (const uint8_t *)w->kv_k;
			for (i = 0; i < (uint64_t)n * w->m.kvd * 4; i++)
				h = (h ^ b[i]) * 0x100000001b3ULL;
			b = (const uint8_t *)w->kv_v;
			for (i = 0; i < (uint64_t)n * w->m.kvd * 4; i++)
				h = (h ^ b[i]) * 0x100000001b3ULL;
		}
	return h;
}

static void slot_free(struct worker *w, struct slot *s)
{
	kvl_seq_free(s->seq);
	memset(s, 0, sizeof(*s));
	s->req = -1;
	s->st = S_FREE;
}

/* The engine gives up a request (stall or fail): it starts again later
 * from its prompt, its decoded tokens recomputed. */
static void give_up(struct worker *w, struct slot *s)
{
	struct pres *pr = &w->sh->res[s->req];

	kvl_seq_free(s->seq);
	s->seq = NULL;
	if (kvl_seq_create(w->ctx, w->layout, &s->seq))
		wfail(w, -ENOMEM, "seq_create");
	s->st = S_REFILL;
	pr->restarts++;
	w->pw->giveups++;
}

/* The policy may preempt any request while serving another: look. */
static void sync_states(struct worker *w)
{
	struct kvl_seq_info si;
	uint32_t i;

	for (i = 0; i < C.batch; i++) {
		struct slot *s = &w->slots[i];

		if (s->st != S_RUN && s->st != S_SWAPPED)
			continue;
		kvl_seq_info(s->seq, &si);
		if (si.state == KVL_SEQ_DROPPED)
			s->st = S_REFILL;
		else if (si.state == KVL_SEQ_SWAPPED)
			s->st = S_SWAPPED;
		else
			s->st = S_RUN;
	}
}

/* Bring preempted requests back (oldest first), then admit new ones. */
static void schedule(struct worker *w)
{
	struct kvl_seq_info si;
	uint32_t i;
	int r;

	for (i = 0; i < C.batch; i++) {
		struct slot *s = &w->slots[i];
		const struct preq *rq;

		sync_states(w);

		if (s->st == S_SWAPPED) {
			kvl_seq_info(s->seq, &si);
			if (si.state != KVL_SEQ_SWAPPED) {
				s->st = si.state == KVL_SEQ_RESIDENT ? S_RUN :
					S_REFILL;
				continue;
			}
			if (!room(w, si.swapped_blocks))
				continue;
			r = kvl_seq_swap_in(s->seq, KVL_POLICY_FAIL);
			if (!r)
				s->st = S_RUN;
			else if (r != -EAGAIN && r != -EDQUOT && r != -ENOMEM)
				wfail(w, r, "swap in");
		}
		if (s->st == S_REFILL) {
			uint32_t len;

			rq = &trace[s->req];
			len = rq->prompt + s->done;
			if (!room(w, blocks_for(w, len)))
				continue;
			kvl_seq_info(s->seq, &si);
			if (si.state == KVL_SEQ_DROPPED || si.len) {
				kvl_seq_truncate(s->seq, 0);
			}
			r = prefill(w, s, len);
			if (!r) {
				s->st = S_RUN;
				if (s->filled)
					w->sh->res[s->req].recomputed += len;
				s->filled = true;
				continue;
			}
			kvl_seq_info(s->seq, &si);
			if (r == -EAGAIN || r == -EDQUOT || r == -ENOMEM ||
			    r == -ETIMEDOUT || si.state != KVL_SEQ_RESIDENT) {
				/* preempted while refilling: again later */
				if (si.state == KVL_SEQ_SWAPPED)
					s->st = S_SWAPPED;
				else
					kvl_seq_truncate(s->seq, 0);
				continue;
			}
			wfail(w, r, "refill");
		}
	}
	for (i = 0; i < C.batch; i++) {
		struct slot *s = &w->slots[i];
		const struct preq *rq;

		sync_states(w);
		if (s->st != S_FREE || w->qhead >= w->nq)
			continue;
		rq = &trace[w->queue[w->qhead]];
		if (!room(w, blocks_for(w, rq->prompt)))
			break;
		s->req = (int)w->queue[w->qhead++];
		s->done = 0;
		s->born = ++w->born;
		if (kvl_seq_create(w->ctx, w->layout, &s->seq))
			wfail(w, -ENOMEM, "seq_create");
		s->st = S_REFILL;
		r = prefill(w, s, rq->prompt);
		kvl_seq_info(s->seq, &si);
		if (!r) {
			s->st = S_RUN;
			s->filled = true;
		}
		else if (si.state == KVL_SEQ_SWAPPED)
			s->st = S_SWAPPED;
		else if (r == -EAGAIN || r == -EDQUOT || r == -ENOMEM ||
			 r == -ETIMEDOUT || si.state == KVL_SEQ_DROPPED)
			kvl_seq_truncate(s->seq, 0);	/* again later */
		else
			wfail(w, r, "prefill");
	}
}

static void complete(struct worker *w, struct slot *s)
{
	struct pres *pr = &w->sh->res[s->req];
	uint32_t len = trace[s->req].prompt + s->done;

	pr->kvhash = fnv_kv(w, s, 0xcbf29ce484222325ULL, len);
	if (!pr->kvhash) {
		struct kvl_seq_info si;

		kvl_seq_info(s->seq, &si);
		fprintf(stderr, "request %d: K/V read back failed (state %u "
			"len %u, want %u)\n", s->req, si.state, si.len, len);
	}
	pr->out_tokens = s->done;
	pr->t_done = now_rel(w);
	pr->done = 1;
	slot_free(w, s);
}

/* One decode step for every running request. */
static int step(struct worker *w)
{
	struct slot *run[MAX_BATCH];
	struct kvl_seq *seqs[MAX_BATCH];
	struct kvl_seq_info si;
	uint32_t n = 0, i, l, d = w->m.d, kvd = w->m.kvd;
	int r;

	sync_states(w);
	for (i = 0; i < C.batch; i++) {
		struct slot *s = &w->slots[i];

		if (s->st != S_RUN)
			continue;
		/* an append above may have preempted this one */
		kvl_seq_info(s->seq, &si);
		if (si.state == KVL_SEQ_DROPPED) {
			s->st = S_REFILL;
			continue;
		}
		if (si.state == KVL_SEQ_SWAPPED) {
			s->st = S_SWAPPED;
			continue;
		}
		/* appended already by a step that preempted it after */
		if (kvl_seq_len(s->seq) > trace[s->req].prompt + s->done) {
			run[n++] = s;
			continue;
		}
		r = kvl_seq_append(s->seq, 1);
		if (r >= 0) {
			run[n++] = s;
			continue;
		}
		kvl_seq_info(s->seq, &si);
		if (si.state == KVL_SEQ_SWAPPED) {
			s->st = S_SWAPPED;	/* the policy preempted it */
		} else if (si.state == KVL_SEQ_DROPPED) {
			s->st = S_REFILL;
		} else if (r == -EAGAIN || r == -EDQUOT || r == -ENOMEM ||
			   r == -ETIMEDOUT) {
			if (w->giveup_on_fail) {
				/* the engine gives up its youngest request */
				struct slot *y = s;
				uint32_t k;

				for (k = 0; k < C.batch; k++)
					if (w->slots[k].st == S_RUN &&
					    w->slots[k].born > y->born)
						y = &w->slots[k];
				give_up(w, y);
			}
		} else {
			return r;
		}
	}
	/* preemptions above may have hit requests listed already */
	for (i = 0, l = 0; i < n; i++) {
		kvl_seq_info(run[i]->seq, &si);
		if (run[i]->st == S_RUN && si.state == KVL_SEQ_RESIDENT)
			run[l++] = run[i];
		else if (si.state == KVL_SEQ_SWAPPED)
			run[i]->st = S_SWAPPED;
		else if (si.state == KVL_SEQ_DROPPED)
			run[i]->st = S_REFILL;
	}
	n = l;
	if (!n)
		return 0;
	for (i = 0; i < n; i++)
		seqs[i] = run[i]->seq;
	scratch(w, n);
	for (l = 0; l < C.layers; l++) {
		for (i = 0; i < n; i++) {
			uint32_t pos = kvl_seq_len(seqs[i]) - 1;
			const uint32_t *t;
			uint32_t nb;

			input_row(w, trace[run[i]->req].id, pos, l,
				  w->x + (size_t)i * d);
			kvl_seq_block_table(seqs[i], &t, &nb);
			w->blocks[i] = t[pos / w->tpb];
			w->slotsv[i] = pos % w->tpb;
		}
		project(w, n, l);
		r = kvl_write_kv(w->ctx, w->layout, l, n, w->blocks, w->slotsv,
				 w->kv_k, w->kv_v);
		if (!r)
			r = kvl_seq_decode(seqs, n, l, C.q_heads, w->q, 0.0f,
					   w->att);
		if (r)
			return r;
		for (i = 0; i < n; i++) {
			struct pres *pr = &w->sh->res[run[i]->req];
			const float *a = w->att + (size_t)i * d;
			uint32_t k;

			for (k = 0; k < d; k++) {
				pr->csum += a[k];
				pr->csq += (double)a[k] * a[k];
			}
		}
		finish_layer(w, n, l);
	}
	(void)kvd;
	w->pw->steps++;
	for (i = 0; i < n; i++) {
		struct slot *s = run[i];
		struct pres *pr = &w->sh->res[s->req];

		if (!s->done)
			pr->t_first = now_rel(w);
		if (++s->done >= trace[s->req].out)
			complete(w, s);
	}
	return 0;
}

static bool all_done(struct worker *w)
{
	uint32_t i;

	if (w->qhead < w->nq)
		return false;
	for (i = 0; i < C.batch; i++)
		if (w->slots[i].st != S_FREE)
			return false;
	return true;
}

static void __attribute__((noreturn))
worker_main(struct pshared *sh, uint32_t proc, const char *sock,
	    int lib_policy, bool giveup)
{
	struct kvl_opts o;
	struct kvl_layout lay;
	struct worker w;
	uint32_t i;
	int r;

	signal(SIGINT, SIG_IGN);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	memset(&w, 0, sizeof(w));
	w.sh = sh;
	w.pw = &sh->work[proc];
	w.lib_policy = lib_policy;
	w.giveup_on_fail = giveup;
	for (i = 0; i < C.batch; i++)
		w.slots[i].req = -1;
	for (i = 0; i < C.nreq; i++)
		if (trace[i].proc == proc)
			w.queue[w.nq++] = i;
	r = model_init(&w.m);
	if (r)
		wfail(&w, r, "model");
	memset(&o, 0, sizeof(o));
	o.socket_path = sock;
	o.tenant = proc % 2 ? "b" : "a";
	o.lease_batch = 4;
	o.region_bytes = 64ULL << 20;
	o.timeout_ns = 20ULL * 1000000000ULL;
	o.policy = (uint32_t)lib_policy;
	o.stall_ms = lib_policy == KVL_POLICY_STALL ? C.stall_ms : 0;
	o.log_level = getenv("KVPOOL_BENCH_DEBUG") ? KVL_LOG_DEBUG : 0;
	r = kvl_open(&o, &w.ctx);
	if (r)
		wfail(&w, r, "kvl_open");
	memset(&lay, 0, sizeof(lay));
	lay.layers = C.layers;
	lay.kv_heads = C.kv_heads;
	lay.head_dim = C.head_dim;
	lay.dtype = KVL_DTYPE_BF16;
	lay.rope_base = 500000.0f;
	w.layout = kvl_layout_declare(w.ctx, &lay);
	if (w.layout < 0)
		wfail(&w, w.layout, "layout");
	w.tpb = lay.tokens_per_block;
	while (!sh->stop && !all_done(&w)) {
		schedule(&w);
		r = step(&w);
		if (r)
			wfail(&w, r, "decode");
		if (!resident_count(&w)) {
			/* waiting for room: hold nothing idle, do not spin */
			kvl_trim(w.ctx);
			usleep(500);
		}
	}
	kvl_policy_stats(w.ctx, &w.pw->pst);
	for (i = 0; i < C.batch; i++)
		if (w.slots[i].seq)
			kvl_seq_free(w.slots[i].seq);
	kvl_close(w.ctx);
	w.pw->state = 1;
	_exit(w.sink == 12345.678 ? 3 : 0);
}

/* ---- a run: one kvpoold, P workers --------------------------------------- */

static pid_t dpid = -1;

static int start_daemon(const char *sock, uint32_t capacity,
			const char *tier, const char *log)
{
	char cap[32], bb[32], cb[32], sm[32];
	const char *argv[32];
	int n = 0, i;

	snprintf(cap, sizeof(cap), "%u", capacity);
	snprintf(bb, sizeof(bb), "%llu", (unsigned long long)C.block_bytes);
	snprintf(cb, sizeof(cb), "%u", C.chunk_blocks);
	snprintf(sm, sizeof(sm), "%u", 2000);
	argv[n++] = C.daemon_bin;
	argv[n++] = "--foreground";
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--ledger";
	argv[n++] = "inproc";
	argv[n++] = "--backend";
	argv[n++] = "cpu";
	argv[n++] = "--block-bytes";
	argv[n++] = bb;
	argv[n++] = "--capacity";
	argv[n++] = cap;
	argv[n++] = "--chunk-blocks";
	argv[n++] = cb;
	argv[n++] = "--shrink-delay-ms";
	argv[n++] = sm;
	argv[n++] = "--tenant";
	argv[n++] = "a";
	argv[n++] = "--tenant";
	argv[n++] = "b";
	if (tier) {
		argv[n++] = "--tier";
		argv[n++] = tier;
	}
	argv[n++] = "-q";
	argv[n] = NULL;
	dpid = fork();
	if (dpid < 0)
		return -errno;
	if (!dpid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 200; i++) {
		struct kvl_admin *adm;
		int st;

		if (!kvl_admin_open(sock, &adm)) {
			struct kvl_pool_info pi;
			int r = kvl_admin_pool_status(adm, &pi);

			kvl_admin_close(adm);
			if (!r)
				return 0;
		}
		if (waitpid(dpid, &st, WNOHANG) == dpid) {
			dpid = -1;
			return -ECHILD;
		}
		usleep(20000);
	}
	return -ETIMEDOUT;
}

static void stop_daemon(void)
{
	int st, i;

	if (dpid <= 0)
		return;
	kill(dpid, SIGTERM);
	for (i = 0; i < 200; i++) {
		if (waitpid(dpid, &st, WNOHANG) == dpid)
			break;
		usleep(10000);
	}
	if (i == 200) {
		kill(dpid, SIGKILL);
		waitpid(dpid, &st, 0);
	}
	dpid = -1;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, uint32_t n, double p)
{
	uint32_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_dbl);
	i = (uint32_t)ceil(p / 100.0 * n);
	if (i < 1)
		i = 1;
	if (i > n)
		i = n;
	return v[i - 1];
}

static int run_one(struct prun *pr, uint32_t capacity, const char *tier,
		   int lib_policy, bool giveup, struct pshared *sh)
{
	char sock[PATH_MAX + 32], log[PATH_MAX + 48];
	pid_t pids[MAX_PROCS];
	struct kvl_admin *adm = NULL;
	double tpot[MAX_REQ];
	uint32_t i, nt = 0, alive;
	uint64_t t_end = 0, deadline;
	int r, st;

	snprintf(sock, sizeof(sock), "%s/%s.sock", out_dir_abs, pr->name);
	if (pr->round)
		snprintf(log, sizeof(log), "%s/%s.r%u.daemon.log", out_dir_abs,
			 pr->name, pr->round);
	else
		snprintf(log, sizeof(log), "%s/%s.daemon.log", out_dir_abs,
			 pr->name);
	unlink(log);
	memset(sh, 0, sizeof(*sh));
	pr->capacity = capacity;
	pr->lib_policy = lib_policy;
	r = start_daemon(sock, capacity, tier, log);
	if (r) {
		snprintf(pr->why, sizeof(pr->why), "kvpoold: %s (see %.100s)",
			 strerror(-r), log);
		pr->failed = true;
		return r;
	}
	kvl_admin_open(sock, &adm);
	sh->t0 = ctl_now_ns();
	for (i = 0; i < C.procs; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			worker_main(sh, i, sock, lib_policy, giveup);
	}
	deadline = ctl_now_ns() + (uint64_t)(C.cap_s * 1e9);
	alive = C.procs;
	while (alive) {
		struct kvl_pool_info pi;

		if (adm && !kvl_admin_pool_status(adm, &pi) &&
		    pi.used > pr->peak_used)
			pr->peak_used = pi.used;
		for (i = 0; i < C.procs; i++)
			if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) ==
			    pids[i]) {
				pids[i] = -1;
				alive--;
			}
		if (ctl_now_ns() > deadline && !sh->stop) {
			sh->stop = 1;
			snprintf(pr->why, sizeof(pr->why),
				 "stopped after %.0f s", C.cap_s);
		}
		usleep(5000);
	}
	/* the daemon's view of the lower tier */
	if (adm) {
		struct kvl_tier_stats ts[KVL_MAX_TIERS];
		int n = kvl_admin_tier_list(adm, ts, KVL_MAX_TIERS);

		if (n > 1) {
			pr->tier_bytes_in = ts[1].bytes_in;
			pr->tier_bytes_out = ts[1].bytes_out;
			pr->tier_copy_in_ns = ts[1].copy_in_ns;
			pr->tier_copy_out_ns = ts[1].copy_out_ns;
		}
		kvl_admin_close(adm);
	}
	stop_daemon();
	unlink(sock);
	for (i = 0; i < C.procs; i++) {
		struct pwork *pw = &sh->work[i];

		if (pw->state == 2) {
			pr->failed = true;
			snprintf(pr->why, sizeof(pr->why), "worker %u: %s", i,
				 pw->msg);
		}
		pr->pst.swaps_out += pw->pst.swaps_out;
		pr->pst.swaps_in += pw->pst.swaps_in;
		pr->pst.blocks_out += pw->pst.blocks_out;
		pr->pst.blocks_in += pw->pst.blocks_in;
		pr->pst.bytes_out += pw->pst.bytes_out;
		pr->pst.bytes_in += pw->pst.bytes_in;
		pr->pst.swap_out_ns += pw->pst.swap_out_ns;
		pr->pst.swap_in_ns += pw->pst.swap_in_ns;
		pr->pst.copy_out_ns += pw->pst.copy_out_ns;
		pr->pst.copy_in_ns += pw->pst.copy_in_ns;
		pr->pst.drops += pw->pst.drops;
		pr->pst.dropped_tokens += pw->pst.dropped_tokens;
		pr->pst.self_preempts += pw->pst.self_preempts;
		pr->pst.no_room += pw->pst.no_room;
		pr->pst.stalls += pw->pst.stalls;
		pr->giveups += pw->giveups;
	}
	memcpy(pr->res, sh->res, sizeof(pr->res));
	for (i = 0; i < C.nreq; i++) {
		const struct pres *q = &sh->res[i];

		pr->recomputed += q->recomputed;
		if (!q->done)
			continue;
		pr->completed++;
		pr->out_tokens += q->out_tokens;
		if (q->t_done > t_end)
			t_end = q->t_done;
		if (q->out_tokens > 1)
			tpot[nt++] = (double)(q->t_done - q->t_first) / 1e6 /
				     (q->out_tokens - 1);
	}
	pr->wall_s = (double)t_end / 1e9;
	pr->goodput = pr->wall_s > 0 ? (double)pr->out_tokens / pr->wall_s : 0;
	pr->tpot_p50_ms = pct(tpot, nt, 50);
	pr->tpot_p99_ms = pct(tpot, nt, 99);
	return pr->failed ? -EIO : 0;
}

/* Completed requests against the unpressured run. */
static void compare(struct prun *pr, const struct prun *ref)
{
	uint32_t i;

	for (i = 0; i < C.nreq; i++) {
		const struct pres *a = &pr->res[i], *b = &ref->res[i];
		double tol = 1e-5;

		if (!a->done)
			continue;
		if (!b->done || a->kvhash != b->kvhash ||
		    a->out_tokens != b->out_tokens ||
		    fabs(a->csum - b->csum) > tol * sqrt(b->csq) ||
		    fabs(a->csq - b->csq) > tol * b->csq) {
			if (!pr->mismatches)
				fprintf(stderr, "%s: request %u differs: kv "
					"%016llx/%016llx sum %.9g/%.9g sq "
					"%.9g/%.9g\n", pr->name, i,
					(unsigned long long)a->kvhash,
					(unsigned long long)b->kvhash,
					a->csum, b->csum, a->csq, b->csq);
			pr->mismatches++;
		}
	}
}

/* ---- same-run copy references ---------------------------------------------- */

static double ref_memcpy_gbps(void)
{
	size_t len = (C.quick ? 32ULL : 256ULL) << 20, bb = C.block_bytes, off;
	uint8_t *a = malloc(len), *b = malloc(len);
	uint64_t t0, t;
	int pass;
	double best = 0;

	if (!a || !b)
		return 0;
	memset(a, 1, len);
	memset(b, 2, len);
	for (pass = 0; pass < 3; pass++) {
		t0 = ctl_now_ns();
		for (off = 0; off + bb <= len; off += bb)
			memcpy(b + off, a + off, bb);
		t = ctl_now_ns() - t0;
		if ((double)len / (double)t > best)
			best = (double)len / (double)t;
	}
	free(a);
	free(b);
	return best;	/* bytes per ns = GB/s */
}

/* Plain O_DIRECT pwrite and pread of block-sized pieces, queue depth 1. */
static void ref_file_gbps(double *rd, double *wr)
{
	char path[PATH_MAX + 32];
	size_t len = (C.quick ? 16ULL : 128ULL) << 20;
	size_t bb = (C.block_bytes + 4095) & ~4095ULL, off;
	uint8_t *buf = aligned_alloc(4096, bb);
	uint64_t t0;
	int fd;

	*rd = *wr = 0;
	snprintf(path, sizeof(path), "%s/ref.file", out_dir_abs);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return;
	}
	memset(buf, 3, bb);
	t0 = ctl_now_ns();
	for (off = 0; off + bb <= len; off += bb)
		if (pwrite(fd, buf, bb, (off_t)off) != (ssize_t)bb)
			break;
	fsync(fd);
	*wr = (double)off / (double)(ctl_now_ns() - t0);
	t0 = ctl_now_ns();
	for (off = 0; off + bb <= len; off += bb)
		if (pread(fd, buf, bb, (off_t)off) != (ssize_t)bb)
			break;
	*rd = (double)off / (double)(ctl_now_ns() - t0);
	close(fd);
	unlink(path);
	free(buf);
}

/* ---- driver ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fputs("usage: kvpool-bench pressure [OPTIONS]\n"
	      "  --policies LIST       comma-separated, in order (default\n"
	      "                        recompute,swap-dram,swap-nvme,stall; also fail)\n"
	      "  --requests N          requests in the trace (default 8)\n"
	      "  --procs N             tenant processes (default 4)\n"
	      "  --batch N             requests in flight per process (default 2)\n"
	      "  --prompt LO:HI        prompt tokens (default 64:128)\n"
	      "  --output MEDIAN:SIGMA lognormal output tokens (default 1000:0.5)\n"
	      "  --output-range LO:HI  clamp of the output (default 256:1536)\n"
	      "  --layers N --kv-heads N --head-dim N --q-heads N --d-ff N\n"
	      "                        model (default 4, 2, 64, 4, 768; d_model =\n"
	      "                        q_heads * head_dim)\n"
	      "  --oversub X           top pool = peak demand / X (default 2)\n"
	      "  --stall-ms N          the stall policy's wait (default 1000)\n"
	      "  --cap SECONDS         longest run per policy (default 600)\n"
	      "  --block-bytes N       (default 65536)\n"
	      "  -o, --out DIR         logs, summary.json, the nvme file (default\n"
	      "                        build/bench-pressure)\n"
	      "      --daemon PATH     kvpoold (default: next to kvpool-bench)\n"
	      "      --seed N          trace seed (default 1)\n"
	      "      --rounds N        rounds of every policy, interleaved (default 3;\n"
	      "                        1 with --quick), at most 16\n"
	      "      --quick           a small trace (tests): 12 requests, short outputs\n"
	      "  -q, --quiet\n", f);
}

static int parse_pair(const char *s, double *a, double *b)
{
	char *end;

	*a = strtod(s, &end);
	if (end == s || *end != ':')
		return -EINVAL;
	*b = strtod(end + 1, &end);
	return *end ? -EINVAL : 0;
}

static int parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "policies", required_argument, NULL, 'P' },
		{ "requests", required_argument, NULL, 'n' },
		{ "procs", required_argument, NULL, 'p' },
		{ "batch", required_argument, NULL, 'b' },
		{ "prompt", required_argument, NULL, 1 },
		{ "output", required_argument, NULL, 2 },
		{ "output-range", required_argument, NULL, 3 },
		{ "layers", required_argument, NULL, 4 },
		{ "kv-heads", required_argument, NULL, 5 },
		{ "head-dim", required_argument, NULL, 6 },
		{ "q-heads", required_argument, NULL, 7 },
		{ "d-ff", required_argument, NULL, 8 },
		{ "oversub", required_argument, NULL, 9 },
		{ "stall-ms", required_argument, NULL, 10 },
		{ "cap", required_argument, NULL, 11 },
		{ "block-bytes", required_argument, NULL, 12 },
		{ "daemon", required_argument, NULL, 13 },
		{ "seed", required_argument, NULL, 14 },
		{ "quick", no_argument, NULL, 15 },
		{ "rounds", required_argument, NULL, 16 },
		{ "out", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static char pol_buf[256];
	double a, b;
	uint32_t v;
	char *p, *save = NULL;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "P:n:p:b:o:qh", lo, NULL)) != -1) {
		switch (ch) {
		case 'P':
			snprintf(pol_buf, sizeof(pol_buf), "%s", optarg);
			C.npol = 0;
			for (p = strtok_r(pol_buf, ",", &save); p && C.npol < MAX_POL;
			     p = strtok_r(NULL, ",", &save))
				C.pol[C.npol++] = p;
			break;
		case 'n':
			if (ctl_parse_u32(optarg, &v) || !v || v > MAX_REQ)
				goto bad;
			C.nreq = v;
			break;
		case 'p':
			if (ctl_parse_u32(optarg, &v) || !v || v > MAX_PROCS)
				goto bad;
			C.procs = v;
			break;
		case 'b':
			if (ctl_parse_u32(optarg, &v) || !v || v > MAX_BATCH)
				goto bad;
			C.batch = v;
			break;
		case 1:
			if (parse_pair(optarg, &a, &b) || a < 1 || b < a)
				goto bad;
			C.prompt_lo = (uint32_t)a;
			C.prompt_hi = (uint32_t)b;
			break;
		case 2:
			if (parse_pair(optarg, &a, &b) || a < 1 || b < 0)
				goto bad;
			C.out_median = a;
			C.out_sigma = b;
			break;
		case 3:
			if (parse_pair(optarg, &a, &b) || a < 2 || b < a)
				goto bad;
			C.out_min = (uint32_t)a;
			C.out_max = (uint32_t)b;
			break;
		case 4: case 5: case 6: case 7: case 8:
			if (ctl_parse_u32(optarg, &v) || !v)
				goto bad;
			if (ch == 4 && v <= 16) C.layers = v;
			else if (ch == 5) C.kv_heads = v;
			else if (ch == 6) C.head_dim = v;
			else if (ch == 7) C.q_heads = v;
			else if (ch == 8) C.d_ff = v;
			else goto bad;
			break;
		case 9:
			C.oversub = strtod(optarg, &p);
			if (*p || C.oversub < 1)
				goto bad;
			break;
		case 10:
			if (ctl_parse_u32(optarg, &C.stall_ms))
				goto bad;
			break;
		case 11:
			C.cap_s = strtod(optarg, &p);
			if (*p || C.cap_s <= 0)
				goto bad;
			break;
		case 12:
			if (ctl_parse_u32(optarg, &v) || v < 4096 || v % 256)
				goto bad;
			C.block_bytes = v;
			break;
		case 13:
			C.daemon_bin = optarg;
			break;
		case 14:
			if (ctl_parse_u32(optarg, &C.seed))
				goto bad;
			break;
		case 15:
			C.quick = true;
			C.nreq = 12;
			C.procs = 2;
			C.batch = 4;
			C.out_median = 280;
			C.out_sigma = 0.4;
			C.out_min = 128;
			C.out_max = 400;
			C.layers = 2;
			C.d_ff = 256;
			C.block_bytes = 16384;
			C.chunk_blocks = 16;
			C.cap_s = 60;
			C.stall_ms = 200;
			if (!C.rounds_set)
				C.rounds = 1;
			break;
		case 16:
			if (ctl_parse_u32(optarg, &v) || !v || v > MAX_ROUNDS)
				goto bad;
			C.rounds = (int)v;
			C.rounds_set = true;
			break;
		case 'o':
			C.out_dir = optarg;
			break;
		case 'q':
			C.quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	return 0;
bad:
	fprintf(stderr, "kvpool-bench pressure: bad value: %s\n", optarg);
	return 2;
}

static int policy_of(const char *name, int *lib, bool *giveup,
		     const char **kind)
{
	*giveup = false;
	*kind = NULL;
	if (!strcmp(name, "recompute")) {
		*lib = KVL_POLICY_RECOMPUTE;
	} else if (!strcmp(name, "swap-dram")) {
		*lib = KVL_POLICY_SWAP;
		*kind = "dram";
	} else if (!strcmp(name, "swap-nvme")) {
		*lib = KVL_POLICY_SWAP;
		*kind = "nvme";
	} else if (!strcmp(name, "stall")) {
		*lib = KVL_POLICY_STALL;
		*giveup = true;
	} else if (!strcmp(name, "fail")) {
		*lib = KVL_POLICY_FAIL;
		*giveup = true;
	} else {
		return -EINVAL;
	}
	return 0;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

/* ---- over the rounds ---------------------------------------------------------- */

struct stat3 {
	double med, lo, hi;
};

static struct stat3 stat_of(const double *x, int n)
{
	double v[MAX_ROUNDS];
	struct stat3 r = { 0, 0, 0 };

	if (n <= 0)
		return r;
	memcpy(v, x, sizeof(*v) * (size_t)n);
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	r.lo = v[0];
	r.hi = v[n - 1];
	r.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return r;
}

/* One policy over the rounds: medians, the goodput's spread. */
struct pagg {
	const char *name;
	struct stat3 goodput, tpot_p50, tpot_p99;
	uint32_t completed_min;
	uint32_t mismatches;		/* over all rounds */
	bool failed;
	double recomputed, blocks_out, blocks_in, bytes_out, bytes_in;
	double swap_out_gbps, swap_in_gbps, ref_after;
	double e2e_out_gbps, e2e_in_gbps;
	double drops, dropped_tokens, swaps_out, swaps_in, self_preempts;
	double giveups, peak_used, wall_s;
};

static double med_of(struct prun runs[][MAX_POL], int k,
		     double (*get)(const struct prun *))
{
	double x[MAX_ROUNDS];
	int rd;

	for (rd = 0; rd < C.rounds; rd++)
		x[rd] = get(&runs[rd][k]);
	return stat_of(x, C.rounds).med;
}

#define GETTER(fn, expr) \
	static double fn(const struct prun *p) { return (double)(expr); }
GETTER(g_goodput, p->goodput)
GETTER(g_p50, p->tpot_p50_ms)
GETTER(g_p99, p->tpot_p99_ms)
GETTER(g_recomputed, p->recomputed)
GETTER(g_blocks_out, p->pst.blocks_out)
GETTER(g_blocks_in, p->pst.blocks_in)
GETTER(g_bytes_out, p->pst.bytes_out)
GETTER(g_bytes_in, p->pst.bytes_in)
GETTER(g_swap_out, gbps(p->tier_bytes_in, p->tier_copy_in_ns))
GETTER(g_swap_in, gbps(p->tier_bytes_out, p->tier_copy_out_ns))
GETTER(g_ref_after, p->ref_after)
GETTER(g_e2e_out, gbps(p->pst.bytes_out, p->pst.swap_out_ns))
GETTER(g_e2e_in, gbps(p->pst.bytes_in, p->pst.swap_in_ns))
GETTER(g_drops, p->pst.drops)
GETTER(g_dropped, p->pst.dropped_tokens)
GETTER(g_swaps_out, p->pst.swaps_out)
GETTER(g_swaps_in, p->pst.swaps_in)
GETTER(g_self, p->pst.self_preempts)
GETTER(g_giveups, p->giveups)
GETTER(g_peak, p->peak_used)
GETTER(g_wall, p->wall_s)

static struct stat3 stat_runs(struct prun runs[][MAX_POL], int k,
			      double (*get)(const struct prun *))
{
	double x[MAX_ROUNDS];
	int rd;

	for (rd = 0; rd < C.rounds; rd++)
		x[rd] = get(&runs[rd][k]);
	return stat_of(x, C.rounds);
}

static void aggregate(struct pagg *a, struct prun runs[][MAX_POL], int k)
{
	int rd;

	memset(a, 0, sizeof(*a));
	a->name = runs[0][k].name;
	a->completed_min = C.nreq;
	for (rd = 0; rd < C.rounds; rd++) {
		const struct prun *p = &runs[rd][k];

		if (p->completed < a->completed_min)
			a->completed_min = p->completed;
		a->mismatches += p->mismatches;
		a->failed |= p->failed;
	}
	a->goodput = stat_runs(runs, k, g_goodput);
	a->tpot_p50 = stat_runs(runs, k, g_p50);
	a->tpot_p99 = stat_runs(runs, k, g_p99);
	a->recomputed = med_of(runs, k, g_recomputed);
	a->blocks_out = med_of(runs, k, g_blocks_out);
	a->blocks_in = med_of(runs, k, g_blocks_in);
	a->bytes_out = med_of(runs, k, g_bytes_out);
	a->bytes_in = med_of(runs, k, g_bytes_in);
	a->swap_out_gbps = med_of(runs, k, g_swap_out);
	a->swap_in_gbps = med_of(runs, k, g_swap_in);
	a->ref_after = med_of(runs, k, g_ref_after);
	a->e2e_out_gbps = med_of(runs, k, g_e2e_out);
	a->e2e_in_gbps = med_of(runs, k, g_e2e_in);
	a->drops = med_of(runs, k, g_drops);
	a->dropped_tokens = med_of(runs, k, g_dropped);
	a->swaps_out = med_of(runs, k, g_swaps_out);
	a->swaps_in = med_of(runs, k, g_swaps_in);
	a->self_preempts = med_of(runs, k, g_self);
	a->giveups = med_of(runs, k, g_giveups);
	a->peak_used = med_of(runs, k, g_peak);
	a->wall_s = med_of(runs, k, g_wall);
}

/* Goodput of policy k over policy b's, per round (the same round). */
static struct stat3 ratio_of(struct prun runs[][MAX_POL], int k, int b)
{
	double x[MAX_ROUNDS];
	int rd;

	for (rd = 0; rd < C.rounds; rd++)
		x[rd] = runs[rd][b].goodput > 0 ?
			runs[rd][k].goodput / runs[rd][b].goodput : 0;
	return stat_of(x, C.rounds);
}

static void json_run(struct jw *jw, const struct prun *pr)
{
	jw_obj(jw, NULL);
	jw_str(jw, "policy", pr->name);
	jw_u64(jw, "round", pr->round);
	jw_u64(jw, "completed", pr->completed);
	jw_dbl(jw, "wall_s", pr->wall_s);
	jw_dbl(jw, "goodput_tps", pr->goodput);
	jw_dbl(jw, "p50_tpot_ms", pr->tpot_p50_ms);
	jw_dbl(jw, "p99_tpot_ms", pr->tpot_p99_ms);
	jw_u64(jw, "recomputed_tokens", pr->recomputed);
	jw_u64(jw, "blocks_out", pr->pst.blocks_out);
	jw_u64(jw, "blocks_in", pr->pst.blocks_in);
	jw_u64(jw, "bytes_out", pr->pst.bytes_out);
	jw_u64(jw, "bytes_in", pr->pst.bytes_in);
	jw_dbl(jw, "swap_out_gbps", gbps(pr->tier_bytes_in,
					 pr->tier_copy_in_ns));
	jw_dbl(jw, "swap_in_gbps", gbps(pr->tier_bytes_out,
					pr->tier_copy_out_ns));
	jw_dbl(jw, "ref_after_gbps", pr->ref_after);
	jw_u64(jw, "swaps_out", pr->pst.swaps_out);
	jw_u64(jw, "swaps_in", pr->pst.swaps_in);
	jw_u64(jw, "drops", pr->pst.drops);
	jw_u64(jw, "dropped_tokens", pr->pst.dropped_tokens);
	jw_u64(jw, "stalls", pr->pst.stalls);
	jw_u64(jw, "no_room", pr->pst.no_room);
	jw_u64(jw, "giveups", pr->giveups);
	jw_u64(jw, "mismatches", pr->mismatches);
	jw_obj_end(jw);
}

static void json_agg(struct jw *jw, const struct pagg *a, struct stat3 vs)
{
	jw_obj(jw, NULL);
	jw_str(jw, "policy", a->name);
	jw_u64(jw, "rounds", (uint64_t)C.rounds);
	jw_u64(jw, "completed", a->completed_min);
	jw_dbl(jw, "wall_s", a->wall_s);
	jw_dbl(jw, "goodput_tps", a->goodput.med);
	jw_dbl(jw, "goodput_tps_min", a->goodput.lo);
	jw_dbl(jw, "goodput_tps_max", a->goodput.hi);
	jw_dbl(jw, "vs_first", vs.med);
	jw_dbl(jw, "vs_first_min", vs.lo);
	jw_dbl(jw, "vs_first_max", vs.hi);
	jw_dbl(jw, "p50_tpot_ms", a->tpot_p50.med);
	jw_dbl(jw, "p99_tpot_ms", a->tpot_p99.med);
	jw_dbl(jw, "p99_tpot_ms_min", a->tpot_p99.lo);
	jw_dbl(jw, "p99_tpot_ms_max", a->tpot_p99.hi);
	jw_dbl(jw, "recomputed_tokens", a->recomputed);
	jw_dbl(jw, "blocks_out", a->blocks_out);
	jw_dbl(jw, "blocks_in", a->blocks_in);
	jw_dbl(jw, "bytes_out", a->bytes_out);
	jw_dbl(jw, "bytes_in", a->bytes_in);
	jw_dbl(jw, "swap_out_gbps", a->swap_out_gbps);
	jw_dbl(jw, "swap_in_gbps", a->swap_in_gbps);
	jw_dbl(jw, "ref_after_gbps", a->ref_after);
	jw_dbl(jw, "swaps_out", a->swaps_out);
	jw_dbl(jw, "swaps_in", a->swaps_in);
	jw_dbl(jw, "drops", a->drops);
	jw_dbl(jw, "dropped_tokens", a->dropped_tokens);
	jw_dbl(jw, "giveups", a->giveups);
	jw_u64(jw, "mismatches", a->mismatches);
	jw_obj_end(jw);
}

int bench_pressure_main(int argc, char **argv, const char *self)
{
	static struct prun runs[MAX_ROUNDS][MAX_POL], ref_run;
	static struct pagg agg[MAX_POL];
	struct prun *ref = &ref_run;
	struct pshared *sh;
	char bin[PATH_MAX], tier[PATH_MAX + 64], buf[64], jpath[PATH_MAX + 32];
	double mc, frd, fwr;
	uint32_t cap, i, tot_out = 0, peak;
	int k, r, rd, rc = 0;
	FILE *jf;
	struct jw jw;

	C = (struct pcfg){
		.nreq = 8, .procs = 4, .batch = 2,
		.prompt_lo = 64, .prompt_hi = 128,
		.out_median = 1000, .out_sigma = 0.5,
		.out_min = 256, .out_max = 1536,
		.layers = 4, .kv_heads = 2, .head_dim = 64, .q_heads = 4,
		.d_ff = 768, .block_bytes = 65536, .chunk_blocks = 16,
		.oversub = 2.0, .stall_ms = 1000, .cap_s = 600,
		.out_dir = "build/bench-pressure", .seed = 1, .rounds = 3,
		.pol = { "recompute", "swap-dram", "swap-nvme", "stall" },
		.npol = 4,
	};
	r = parse(argc, argv);
	if (r)
		return r;
	for (k = 0; k < C.npol; k++) {
		int lib;
		bool g;
		const char *kd;

		if (policy_of(C.pol[k], &lib, &g, &kd)) {
			fprintf(stderr, "kvpool-bench pressure: unknown policy "
				"%s\n", C.pol[k]);
			return 2;
		}
	}
	if (C.q_heads % C.kv_heads || C.layers > 16) {
		fprintf(stderr, "kvpool-bench pressure: bad model\n");
		return 2;
	}
	if (!C.daemon_bin) {
		char *slash;

		snprintf(bin, sizeof(bin), "%s", self);
		slash = strrchr(bin, '/');
		if (slash)
			snprintf(slash + 1, sizeof(bin) - (size_t)(slash + 1 - bin),
				 "kvpoold");
		else
			snprintf(bin, sizeof(bin), "kvpoold");
		C.daemon_bin = bin;
	}
	mkdir(C.out_dir, 0755);
	if (!realpath(C.out_dir, out_dir_abs)) {
		fprintf(stderr, "kvpool-bench pressure: %s: %s\n", C.out_dir,
			strerror(errno));
		return 1;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	make_trace();
	for (i = 0; i < C.nreq; i++)
		tot_out += trace[i].out;
	printf("trace: %u requests on %u processes (2 tenants, %u in flight "
	       "each), prompt %u-%u, output lognormal median %.0f sigma %.2f "
	       "in [%u, %u]: %u output tokens, mean %.0f\n", C.nreq, C.procs,
	       C.batch, C.prompt_lo, C.prompt_hi, C.out_median, C.out_sigma,
	       C.out_min, C.out_max, tot_out, (double)tot_out / C.nreq);
	printf("model: %u layers, %u kv heads x %u, %u query heads (d_model "
	       "%u), d_ff %u, bf16 KV (%u bytes/token), FP32 matmuls %.2f "
	       "MFLOP/token; blocks of %llu bytes\n", C.layers, C.kv_heads,
	       C.head_dim, C.q_heads, C.q_heads * C.head_dim, C.d_ff,
	       2 * C.layers * C.kv_heads * C.head_dim * 2,
	       2.0 * C.layers * ((double)C.q_heads * C.head_dim *
		(C.q_heads * C.head_dim + 2 * C.kv_heads * C.head_dim) +
		(double)C.q_heads * C.head_dim * C.q_heads * C.head_dim +
		2.0 * C.q_heads * C.head_dim * C.d_ff) / 1e6,
	       (unsigned long long)C.block_bytes);
	fflush(stdout);
	mc = ref_memcpy_gbps();
	ref_file_gbps(&frd, &fwr);
	printf("same-run references: memcpy %.2f GB/s; file in %s, O_DIRECT "
	       "%llu-byte pread %.2f GB/s, pwrite %.2f GB/s\n", mc,
	       C.out_dir, (unsigned long long)((C.block_bytes + 4095) & ~4095ULL),
	       frd, fwr);
	fflush(stdout);

	/* the unpressured reference run */
	snprintf(ref->name, sizeof(ref->name), "unpressured");
	r = run_one(ref, 65536, NULL, KVL_POLICY_STALL, false, sh);
	if (r || ref->completed != C.nreq) {
		fprintf(stderr, "kvpool-bench pressure: unpressured run: %s "
			"(%u of %u done)\n", ref->why, ref->completed, C.nreq);
		return 1;
	}
	peak = ref->peak_used;
	cap = (uint32_t)ceil(peak / C.oversub);
	{
		uint32_t biggest = 0, tpb = (uint32_t)(C.block_bytes /
			(2ULL * C.layers * C.kv_heads * C.head_dim * 2));

		for (i = 0; i < C.nreq; i++) {
			uint32_t b = (trace[i].prompt + trace[i].out + tpb - 1) /
				     tpb;

			if (b > biggest)
				biggest = b;
		}
		/* one request alone must fit, or no policy can finish */
		if (biggest + 2 > cap) {
			fprintf(stderr, "kvpool-bench pressure: the largest "
				"request needs %u blocks, more than the "
				"pressured pool (%u): use a smaller --oversub "
				"or more concurrency\n", biggest, cap);
			return 1;
		}
	}
	printf("unpressured: peak demand %u blocks (%s), %.1f s, goodput "
	       "%.0f tokens/s; pressured top pool: %u blocks (1/%.1f); %d "
	       "rounds of the %d policies, each round in a rotated order\n",
	       peak, ctl_human((uint64_t)peak * C.block_bytes, buf,
			       sizeof(buf)), ref->wall_s, ref->goodput, cap,
	       C.oversub, C.rounds, C.npol);
	fflush(stdout);
	for (rd = 0; rd < C.rounds; rd++) {
		int j;

		for (j = 0; j < C.npol; j++) {
			struct prun *pr;
			const char *kind;
			bool giveup;
			int lib;

			k = (rd + j) % C.npol;	/* ABCD, BCDA, CDAB, ... */
			pr = &runs[rd][k];
			policy_of(C.pol[k], &lib, &giveup, &kind);
			snprintf(pr->name, sizeof(pr->name), "%s", C.pol[k]);
			pr->round = rd + 1;
			if (kind && !strcmp(kind, "dram"))
				snprintf(tier, sizeof(tier), "dram:%u",
					 peak + 64);
			else if (kind)
				snprintf(tier, sizeof(tier),
					 "nvme:%s/nvme.swap:%u", out_dir_abs,
					 peak + 64);
			run_one(pr, cap, kind ? tier : NULL, lib, giveup, sh);
			compare(pr, ref);
			/* the machine may be shared: measure the reference
			 * again */
			if (kind && !strcmp(kind, "dram")) {
				pr->ref_after = ref_memcpy_gbps();
			} else if (kind) {
				double rdb, wrb;

				ref_file_gbps(&rdb, &wrb);
				pr->ref_after = rdb;
			}
			if (!C.quiet) {
				printf("  round %d %-10s %u/%u done in %.1f s, "
				       "goodput %.0f tokens/s%s%s\n", rd + 1,
				       pr->name, pr->completed, C.nreq,
				       pr->wall_s, pr->goodput,
				       pr->why[0] ? ": " : "", pr->why);
				fflush(stdout);
			}
		}
	}
	for (k = 0; k < C.npol; k++)
		aggregate(&agg[k], runs, k);

	printf("\n%d round%s; per policy the median over the rounds and, for "
	       "goodput and the ratio, [min-max]\n", C.rounds,
	       C.rounds == 1 ? "" : "s");
	printf("%-10s %7s %19s %8s %8s %10s %21s %21s %24s %8s\n", "policy",
	       "done", "goodput", "TPOT p50", "TPOT p99", "recomputed",
	       "swapped out", "swapped in", "swap GB/s", "outputs");
	printf("%-10s %7s %19s %8s %8s %10s %21s %21s %24s %8s\n", "", "",
	       "tokens/s [min-max]", "ms", "ms", "tokens", "blocks (bytes)",
	       "blocks (bytes)", "out / in / ref / after", "");
	for (k = -1; k < C.npol; k++) {
		const struct pagg *a = k < 0 ? NULL : &agg[k];
		const struct prun *pr = k < 0 ? ref : NULL;
		char d1[32], b1[32], b2[32], s1[40], s2[40], sw[40], g[40];
		double ref_bw = 0;
		const char *kind = NULL;
		bool giveup;
		int lib;

		if (a)
			policy_of(a->name, &lib, &giveup, &kind);
		if (kind)
			ref_bw = !strcmp(kind, "dram") ? mc : frd;
		if (pr) {
			snprintf(d1, sizeof(d1), "%u/%u", pr->completed, C.nreq);
			snprintf(g, sizeof(g), "%.0f", pr->goodput);
			printf("%-10s %7s %19s %8.2f %8.2f %10llu %21s %21s "
			       "%24s %8s\n", pr->name, d1, g, pr->tpot_p50_ms,
			       pr->tpot_p99_ms,
			       (unsigned long long)pr->recomputed, "0 (0 B)",
			       "0 (0 B)", "-", "ref");
			continue;
		}
		snprintf(d1, sizeof(d1), "%u/%u", a->completed_min, C.nreq);
		snprintf(g, sizeof(g), "%.0f [%.0f-%.0f]", a->goodput.med,
			 a->goodput.lo, a->goodput.hi);
		snprintf(s1, sizeof(s1), "%.0f (%s)", a->blocks_out,
			 ctl_human((uint64_t)a->bytes_out, b1, sizeof(b1)));
		snprintf(s2, sizeof(s2), "%.0f (%s)", a->blocks_in,
			 ctl_human((uint64_t)a->bytes_in, b2, sizeof(b2)));
		if (kind)
			snprintf(sw, sizeof(sw), "%.2f / %.2f / %.2f / %.2f",
				 a->swap_out_gbps, a->swap_in_gbps, ref_bw,
				 a->ref_after);
		else
			snprintf(sw, sizeof(sw), "-");
		printf("%-10s %7s %19s %8.2f %8.2f %10.0f %21s %21s %24s %8s\n",
		       a->name, d1, g, a->tpot_p50.med, a->tpot_p99.med,
		       a->recomputed, s1, s2, sw,
		       a->mismatches ? "DIFFER" : "equal");
	}
	printf("\nswap GB/s: the daemon's copy rate into the lower tier (out) "
	       "and back (in); ref: memcpy for dram, O_DIRECT pread for nvme, "
	       "measured before the runs and again right after each run of "
	       "that policy (median).  Counts: median over the rounds.\n");
	for (k = 0; k < C.npol; k++) {
		const struct pagg *a = &agg[k];
		struct stat3 vs = ratio_of(runs, k, 0);

		printf("%-10s goodput vs %s %.2fx [%.2f-%.2f] over %d round%s, "
		       "%.0f dropped (%.0f tokens), %.0f swaps out / %.0f in "
		       "(end to end %.2f / %.2f GB/s), %.0f self-preempted, "
		       "%.0f given up by the engine, %.0f blocks peak\n",
		       a->name, agg[0].name, vs.med, vs.lo, vs.hi, C.rounds,
		       C.rounds == 1 ? "" : "s", a->drops, a->dropped_tokens, a->swaps_out, a->swaps_in,
		       a->e2e_out_gbps, a->e2e_in_gbps, a->self_preempts,
		       a->giveups, a->peak_used);
		if (a->completed_min != C.nreq || a->mismatches || a->failed)
			rc = 1;
	}
	/* a ranking only from pairs whose spreads do not overlap */
	printf("\nranking by goodput (a pair is ordered only when its "
	       "[min-max] over the rounds do not overlap):\n");
	if (C.rounds < 3) {
		printf("  none: %d round%s (at least 3 are needed)\n", C.rounds,
		       C.rounds == 1 ? "" : "s");
	} else {
		int x, y;

		for (x = 0; x < C.npol; x++)
			for (y = x + 1; y < C.npol; y++) {
				const struct pagg *a = &agg[x], *b = &agg[y];

				if (a->goodput.lo > b->goodput.hi)
					printf("  %s > %s\n", a->name, b->name);
				else if (b->goodput.lo > a->goodput.hi)
					printf("  %s > %s\n", b->name, a->name);
				else
					printf("  %s, %s: not separated\n",
					       a->name, b->name);
			}
	}

	/* every figure in summary.json; the last line of stdout: the short
	 * form */
	snprintf(jpath, sizeof(jpath), "%s/summary.json", out_dir_abs);
	jf = fopen(jpath, "w");
	if (jf) {
		jw_init(&jw, jf);
		jw_obj(&jw, NULL);
		jw_u64(&jw, "requests", C.nreq);
		jw_u64(&jw, "output_tokens", tot_out);
		jw_u64(&jw, "peak_blocks", peak);
		jw_u64(&jw, "pressured_blocks", cap);
		jw_u64(&jw, "rounds", (uint64_t)C.rounds);
		jw_dbl(&jw, "memcpy_gbps", mc);
		jw_dbl(&jw, "file_read_gbps", frd);
		jw_dbl(&jw, "file_write_gbps", fwr);
		/* the unpressured run, then per policy the medians over the
		 * rounds (completed: the fewest, mismatches: the sum) */
		jw_arr(&jw, "runs");
		json_run(&jw, ref);
		for (k = 0; k < C.npol; k++)
			json_agg(&jw, &agg[k], ratio_of(runs, k, 0));
		jw_arr_end(&jw);
		/* every run, in the order run */
		jw_arr(&jw, "round_runs");
		for (rd = 0; rd < C.rounds; rd++) {
			int j;

			for (j = 0; j < C.npol; j++)
				json_run(&jw, &runs[rd][(rd + j) % C.npol]);
		}
		jw_arr_end(&jw);
		jw_obj_end(&jw);
		jw_end(&jw);
		fclose(jf);
	}
	printf("{\"rounds\": %d, \"policies\": [", C.rounds);
	for (k = 0; k < C.npol; k++) {
		struct stat3 vs = ratio_of(runs, k, 0);

		printf("%s{\"policy\": \"%s\", \"goodput_tps\": %.1f, "
		       "\"goodput_tps_min\": %.1f, \"goodput_tps_max\": %.1f, "
		       "\"p99_tpot_ms\": %.3f, \"vs_first\": %.3f, "
		       "\"vs_first_min\": %.3f, \"vs_first_max\": %.3f}",
		       k ? ", " : "", agg[k].name, agg[k].goodput.med,
		       agg[k].goodput.lo, agg[k].goodput.hi,
		       agg[k].tpot_p99.med, vs.med, vs.lo, vs.hi);
	}
	printf("]}\n");
	return rc;
}
