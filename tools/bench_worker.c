// SPDX-License-Identifier: MIT
/*
 * bench_worker.c - one tenant process of kvpool-bench.
 *
 * A worker keeps up to `batch` requests in flight.  A request is prefilled
 * (its prompt's K/V written for every layer), then decoded one token per
 * step: append a position, write its K/V for every layer, and run decode
 * attention over the whole sequence for every layer, for all in-flight
 * requests at once.  Mixes:
 *   chat           short prompts (64-384 tokens), short answers (32-160);
 *   reasoning      short prompt (64-128), long growing answer (1024-3072);
 *   shared-prefix  one long system prompt prefilled once, then requests
 *                  forked from it (copy-on-write) with a short question
 *                  (32-64) and answer (32-96).
 * Under pressure (tenant max hit, blocks short, reclaim request) the worker
 * preempts its youngest request (frees it and starts it again later), the
 * way vLLM preempts and recomputes.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/kvpool.h>

#include "bench.h"
#include "ctl_util.h"

#define MAX_BATCH	16
#define CHUNK_TOKENS	128	/* tokens per prefill write call */
#define SYS_PROMPT	640	/* shared-prefix: system prompt tokens */
#define MODEL_NAME	"kvpool-bench-model"	/* its prefix-cache identity */

struct req {
	struct kvl_seq *seq;
	uint32_t prompt, answer, done;
	uint64_t born;		/* order, for "youngest" */
	bool active;
};

struct worker {
	const struct bench_cfg *cfg;
	const struct bench_tenant *t;
	struct bench_ctl *ctl;
	struct bench_wstats *ws;
	struct kvl_ctx *ctx;
	int layout;
	uint32_t tpb;
	uint64_t epoch;			/* the data epoch last seen */
	uint32_t sys[SYS_PROMPT];	/* shared-prefix: the system prompt's
					 * token ids (the tenant's) */
	struct req reqs[MAX_BATCH];
	uint32_t batch;
	uint64_t born;
	uint32_t rng;
	float *kbuf, *vbuf, *q, *out;
	int reclaim_fd;
	short reclaim_ev;
	uint64_t admit_after;		/* no new request before this time */
	bool in_reclaim;		/* a reclaim target is pending */
	uint32_t eff_batch;		/* admission limit: shrinks under
					 * pressure, grows back as requests
					 * finish */
	uint64_t t_start, t_stop;
};

const char *bench_mix_name(enum bench_mix m)
{
	switch (m) {
	case MIX_CHAT: return "chat";
	case MIX_REASONING: return "reasoning";
	case MIX_PREFIX: return "shared-prefix";
	}
	return "?";
}

static uint32_t rnd(struct worker *w)
{
	/* xorshift32 */
	uint32_t x = w->rng;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	w->rng = x;
	return x;
}

static uint32_t rnd_range(struct worker *w, uint32_t lo, uint32_t hi)
{
	return lo + rnd(w) % (hi - lo + 1);
}

static void fail(struct worker *w, int err, const char *what)
{
	w->ws->err = err;
	snprintf(w->ws->errmsg, sizeof(w->ws->errmsg), "%s: %s", what,
		 strerror(-err));
	w->ws->state = 3;
	_exit(1);
}

static void handle_reclaim(struct worker *w, uint32_t target);

/* Blocks held, and a reclaim target the socket did not wake us for. */
static void update_held(struct worker *w)
{
	struct kvl_status st;

	if (!kvl_status(w->ctx, &st)) {
		w->ws->held = st.held;
		if (st.held > w->ws->peak_held)
			w->ws->peak_held = st.held;
		handle_reclaim(w, st.reclaim_target);
	}
}

static void req_drop(struct worker *w, struct req *r)
{
	if (r->seq)
		kvl_seq_free(r->seq);
	r->seq = NULL;
	r->active = false;
}

/*
 * Requests whose sequences lost their contents: to a daemon restart (the
 * data epoch changed: every sequence was reset) or to the pressure
 * policy (no lower tier had room).  Either way the request is dropped and
 * its tokens would be computed again.  Called before every decode step
 * and after a call returned -ESTALE.
 */
static void sweep(struct worker *w)
{
	struct kvl_policy_stats ps;
	struct kvl_seq *dropped[MAX_BATCH];
	struct kvl_seq_info si;
	uint64_t e = kvl_epoch(w->ctx);
	bool restart = false;
	uint32_t i;

	if (e != w->epoch) {
		if (w->epoch)
			restart = true;
		w->epoch = e;
	}
	if (restart)
		w->ws->restarts++;
	for (i = 0; i < w->batch; i++) {
		struct req *r = &w->reqs[i];

		if (!r->active || (!kvl_seq_info(r->seq, &si) &&
				   si.state != KVL_SEQ_DROPPED))
			continue;
		if (restart) {
			w->ws->restart_lost++;
			w->ws->restart_tokens += r->prompt + r->done;
		} else {
			w->ws->preempts++;
		}
		req_drop(w, r);
	}
	while (kvl_dropped(w->ctx, dropped, MAX_BATCH) == MAX_BATCH)
		;	/* listed; handled above */
	if (!kvl_policy_stats(w->ctx, &ps)) {
		w->ws->swaps_out = ps.swaps_out;
		w->ws->swaps_in = ps.swaps_in;
	}
}

/* Free the youngest in-flight request other than `keep`; false if none. */
static bool preempt_one(struct worker *w, const struct req *keep)
{
	struct req *y = NULL;
	uint32_t i;

	for (i = 0; i < w->batch; i++) {
		struct req *r = &w->reqs[i];

		if (r->active && r != keep && (!y || r->born > y->born))
			y = r;
	}
	if (!y)
		return false;
	req_drop(w, y);
	w->ws->preempts++;
	return true;
}

/* Count a refused lease (quota hit or stall); false if err is fatal. */
static bool count_refusal(struct worker *w, int err)
{
	switch (err) {
	case -EDQUOT:
		w->ws->quota_hits++;
		return true;
	case -ETIMEDOUT:
	case -EAGAIN:
	case -ENOMEM:
		w->ws->stalls++;
		return true;
	case -ESTALE:
		return true;
	default:
		return false;
	}
}

/* A lease failed with err: count it and make room.  Returns 0 to retry,
 * 1 to give up on r (it was dropped), or a fatal -errno. */
static int pressure(struct worker *w, struct req *r, int err)
{
	if (!count_refusal(w, err))
		return err;
	if (err == -ESTALE) {	/* a daemon restart */
		sweep(w);
		return r->active ? 0 : 1;
	}
	kvl_trim(w->ctx);
	w->admit_after = ctl_now_ns() + 20000000ULL;
	if (preempt_one(w, r)) {
		/* admit fewer requests at once for a while */
		if (w->eff_batch > 1)
			w->eff_batch--;
		return 0;
	}
	/* alone and still refused: drop this request, back off a little */
	req_drop(w, r);
	w->ws->preempts++;
	usleep(5000);
	return 1;
}

static int write_span(struct worker *w, struct kvl_seq *s, uint32_t pos,
		      uint32_t n)
{
	uint32_t l;
	int ret;

	for (l = 0; l < w->cfg->model.layers; l++) {
		ret = kvl_seq_write_kv(s, l, pos, n, w->kbuf, w->vbuf);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static uint32_t active_count(const struct worker *w)
{
	uint32_t i, n = 0;

	for (i = 0; i < w->batch; i++)
		n += w->reqs[i].active;
	return n;
}

/* A new request could not get its blocks: do not admit it now. */
static int defer(struct worker *w, struct req *r, int err)
{
	if (!count_refusal(w, err))
		return err;
	if (err == -ESTALE)
		sweep(w);
	req_drop(w, r);
	kvl_trim(w->ctx);
	/* try admitting again in 20 ms, or when a request finishes; while
	 * others run, admit one fewer at a time */
	w->admit_after = ctl_now_ns() + 20000000ULL;
	if (err == -EDQUOT && active_count(w) > 0 && w->eff_batch > 1)
		w->eff_batch--;
	return 1;
}

/* Append n positions to s and write their K/V, in chunks.  admit: r is a
 * new request (under pressure it is deferred instead of preempting). */
static int grow_write(struct worker *w, struct req *r, uint32_t n, bool admit)
{
	while (n) {
		uint32_t c = n < CHUNK_TOKENS ? n : CHUNK_TOKENS;
		uint32_t pos = kvl_seq_len(r->seq);
		int ret;

		ret = kvl_seq_append(r->seq, c);
		if (ret < 0 && admit)
			return defer(w, r, ret);
		if (ret < 0) {
			ret = pressure(w, r, ret);
			if (ret)
				return ret;
			if (w->ctl->stop)
				return 1;
			continue;
		}
		ret = write_span(w, r->seq, pos, c);
		if (ret == -ESTALE) {
			sweep(w);
			return 1;
		}
		if (ret < 0)
			return ret;
		w->ws->prefill_tokens += c;
		n -= c;
	}
	return 0;
}

/*
 * Shared-prefix: the request starts with the tenant's system prompt.  The
 * prefix cache has it (every process of the tenant publishes what it
 * prefilled): match it, prefill the rest with its token ids and publish
 * the full blocks the cache lacked.
 */
static int prefix_start(struct worker *w, struct req *r)
{
	uint32_t pos = 0, n;
	int ret;

	ret = kvl_seq_match(r->seq, w->sys, SYS_PROMPT);
	if (ret == -ESTALE) {
		sweep(w);
		if (!r->active)
			return 1;
		ret = 0;
	}
	if (ret < 0)
		return ret;
	pos = (uint32_t)ret;
	w->ws->prefix_hit_tokens += pos;
	w->ws->prefix_miss_tokens += SYS_PROMPT - pos;
	while (pos < SYS_PROMPT) {
		n = SYS_PROMPT - pos < CHUNK_TOKENS ? SYS_PROMPT - pos :
		      CHUNK_TOKENS;
		ret = kvl_seq_append_tokens(r->seq, w->sys + pos, n);
		if (ret < 0)
			return defer(w, r, ret);
		ret = write_span(w, r->seq, pos, n);
		if (ret == -ESTALE) {
			sweep(w);
			return 1;
		}
		if (ret < 0)
			return ret;
		w->ws->prefill_tokens += n;
		pos += n;
	}
	ret = kvl_seq_publish(r->seq);
	if (ret == -ESTALE) {
		sweep(w);
		return 1;
	}
	/* the cache full (its tenant at its max): the request goes on */
	return ret < 0 && ret != -EDQUOT && ret != -EAGAIN && ret != -ENOMEM ?
	       ret : 0;
}

static int start_req(struct worker *w, struct req *r)
{
	int ret;

	memset(r, 0, sizeof(*r));
	switch (w->t->mix) {
	case MIX_CHAT:
		r->prompt = rnd_range(w, 64, 384);
		r->answer = rnd_range(w, 32, 160);
		break;
	case MIX_REASONING:
		r->prompt = rnd_range(w, 64, 128);
		r->answer = rnd_range(w, 1024, 3072);
		break;
	case MIX_PREFIX:
		r->prompt = rnd_range(w, 32, 64);
		r->answer = rnd_range(w, 32, 96);
		break;
	}
	ret = kvl_seq_create(w->ctx, w->layout, &r->seq);
	if (ret < 0) {
		r->seq = NULL;
		return defer(w, r, ret);
	}
	r->active = true;
	r->born = ++w->born;
	if (w->t->mix == MIX_PREFIX) {
		ret = prefix_start(w, r);
		if (ret)
			return ret;	/* 1: dropped under pressure */
		r->prompt += SYS_PROMPT;	/* what a restart would lose */
	}
	ret = grow_write(w, r, r->prompt, true);
	if (ret)
		return ret;	/* 1: dropped under pressure */
	return 0;
}

/* The ledger asks for target blocks back: cheapest first (cached blocks),
 * then the youngest request; admit nothing new for a moment. */
static void handle_reclaim(struct worker *w, uint32_t target)
{
	if (!target) {
		w->in_reclaim = false;
		return;
	}
	if (!w->in_reclaim)
		w->ws->reclaims++;
	w->in_reclaim = true;
	if (kvl_trim(w->ctx) < (int)target)
		preempt_one(w, NULL);
	kvl_trim(w->ctx);
	w->admit_after = ctl_now_ns() + 20000000ULL;
}

static void check_reclaim(struct worker *w)
{
	struct pollfd p = { .fd = w->reclaim_fd, .events = w->reclaim_ev };
	uint32_t target = 0;

	if (w->reclaim_fd < 0 || poll(&p, 1, 0) <= 0 ||
	    !(p.revents & w->reclaim_ev))
		return;
	if (kvl_reclaim_target(w->ctx, &target) < 0)
		return;
	handle_reclaim(w, target);
}

/* One decode step for every in-flight request. */
static int decode_step(struct worker *w)
{
	struct kvl_seq *seqs[MAX_BATCH];
	struct req *rs[MAX_BATCH];
	uint32_t n = 0, i, l;
	uint64_t t0 = ctl_now_ns(), dt;
	int ret;

	sweep(w);
	for (i = 0; i < w->batch; i++) {
		struct req *r = &w->reqs[i];
		struct kvl_seq_info si;
		uint32_t pos;

		if (!r->active)
			continue;
		/* swapped out to make room: back when there is room again
		 * without pushing another out (it waits in the lower tier) */
		if (!kvl_seq_info(r->seq, &si) && si.state == KVL_SEQ_SWAPPED) {
			ret = kvl_seq_swap_in(r->seq, KVL_POLICY_FAIL);
			if (ret == -ESTALE) {
				sweep(w);
				continue;
			}
			if (ret < 0 && !count_refusal(w, ret))
				return ret;
			if (ret < 0)
				continue;
		}
		pos = kvl_seq_len(r->seq);
		ret = kvl_seq_append(r->seq, 1);
		if (ret < 0) {
			ret = pressure(w, r, ret);
			if (ret < 0)
				return ret;
			continue;	/* retry next step (or dropped) */
		}
		ret = write_span(w, r->seq, pos, 1);
		if (ret == -ESTALE) {
			sweep(w);
			continue;
		}
		if (ret < 0)
			return ret;
		rs[n] = r;
		seqs[n++] = r->seq;
	}
	/* a request preempted above may be in the list: rebuild it */
	sweep(w);
	for (i = 0, l = 0; i < n; i++) {
		struct kvl_seq_info si;

		if (rs[i]->active && rs[i]->seq == seqs[i] &&
		    !kvl_seq_info(seqs[i], &si) &&
		    si.state == KVL_SEQ_RESIDENT) {
			rs[l] = rs[i];
			seqs[l++] = seqs[i];
		}
	}
	n = l;
	if (!n) {
		usleep(1000);	/* nothing admitted: do not spin */
		return 0;
	}
	for (l = 0; l < w->cfg->model.layers; l++) {
		ret = kvl_seq_decode(seqs, n, l, w->cfg->model.q_heads, w->q,
				     0.0f, w->out);
		if (ret == -ESTALE) {
			sweep(w);
			return 0;
		}
		if (ret < 0)
			return ret;
	}
	dt = ctl_now_ns() - t0;
	w->ws->lat[bench_lat_bucket(dt)]++;
	w->ws->busy_ns += dt;
	w->ws->steps++;
	w->ws->gen_tokens += n;
	for (i = 0; i < n; i++) {
		struct req *r = rs[i];

		if (++r->done >= r->answer) {
			req_drop(w, r);
			w->ws->requests++;
			w->admit_after = 0;
			if (w->eff_batch < w->batch)
				w->eff_batch++;
		}
	}
	return 0;
}

static void sleep_until(struct worker *w, uint64_t t)
{
	while (!w->ctl->stop) {
		uint64_t now = ctl_now_ns();

		if (now >= t)
			return;
		usleep((useconds_t)((t - now) / 1000 > 50000 ? 50000 :
				    (t - now) / 1000 + 1));
	}
}

static void fill_random(struct worker *w, float *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (float)((int32_t)rnd(w) % 1000) / 1000.0f;
}

void bench_worker_main(const struct bench_cfg *cfg, struct bench_ctl *ctl,
		       struct bench_wstats *ws, uint32_t tenant,
		       uint32_t index)
{
	struct kvl_opts o;
	struct kvl_layout lay;
	struct worker w;
	const struct bench_model *m = &cfg->model;
	size_t row = (size_t)m->kv_heads * m->head_dim;
	size_t qrow = (size_t)m->q_heads * m->head_dim;
	uint32_t i;
	int ret;

	signal(SIGINT, SIG_IGN);	/* the driver stops us */
	memset(&w, 0, sizeof(w));
	w.cfg = cfg;
	w.t = &cfg->tenants[tenant];
	w.ctl = ctl;
	w.ws = ws;
	w.rng = cfg->seed * 2654435761U + tenant * 40503U + index * 977U + 1;
	w.batch = w.t->batch < MAX_BATCH ? w.t->batch : MAX_BATCH;
	if (!w.batch)
		w.batch = 1;
	w.eff_batch = w.batch;
	w.reclaim_fd = -1;
	w.t_start = ctl->t0_ns + (uint64_t)(w.t->start_frac * (double)ctl->run_ns);
	w.t_stop = ctl->t0_ns + (uint64_t)(w.t->stop_frac * (double)ctl->run_ns);

	w.kbuf = malloc(CHUNK_TOKENS * row * sizeof(float));
	w.vbuf = malloc(CHUNK_TOKENS * row * sizeof(float));
	w.q = malloc(MAX_BATCH * qrow * sizeof(float));
	w.out = malloc(MAX_BATCH * qrow * sizeof(float));
	if (!w.kbuf || !w.vbuf || !w.q || !w.out)
		fail(&w, -ENOMEM, "malloc");
	fill_random(&w, w.kbuf, CHUNK_TOKENS * row);
	fill_random(&w, w.vbuf, CHUNK_TOKENS * row);
	fill_random(&w, w.q, MAX_BATCH * qrow);

	sleep_until(&w, w.t_start);
	if (ctl->stop) {
		ws->state = 2;
		_exit(0);
	}

	memset(&o, 0, sizeof(o));
	o.socket_path = cfg->socket;
	o.tenant = w.t->name;
	o.lease_batch = 4;
	o.timeout_ns = 300ULL * 1000 * 1000;
	o.policy = cfg->policy;
	if (cfg->restart_frac >= 0)
		o.timeout_ns = 10ULL * 1000 * 1000 * 1000;	/* reconnects */
	o.region_bytes = 8ULL << 20;
	ret = kvl_open(&o, &w.ctx);
	if (ret)
		fail(&w, ret, "kvl_open");
	memset(&lay, 0, sizeof(lay));
	lay.layers = m->layers;
	lay.kv_heads = m->kv_heads;
	lay.head_dim = m->head_dim;
	lay.dtype = m->dtype;
	lay.rope_base = 500000.0f;
	if (w.t->mix == MIX_PREFIX) {
		w.layout = kvl_layout_declare_model(w.ctx, &lay, MODEL_NAME);
		for (i = 0; i < SYS_PROMPT; i++)
			w.sys[i] = (cfg->seed * 7919U + tenant * 104729U +
				    i * 2654435761U) % 128000U;
	} else {
		w.layout = kvl_layout_declare(w.ctx, &lay);
	}
	if (w.layout < 0)
		fail(&w, w.layout, "kvl_layout_declare");
	w.tpb = lay.tokens_per_block;
	w.epoch = kvl_epoch(w.ctx);
	if (kvl_reclaim_fd(w.ctx, &w.reclaim_ev) >= 0)
		w.reclaim_fd = kvl_reclaim_fd(w.ctx, &w.reclaim_ev);
	ws->state = 1;

	while (!ctl->stop && ctl_now_ns() < w.t_stop) {
		for (i = 0; i < w.batch && !ctl->stop; i++) {
			if (w.reqs[i].active || ctl_now_ns() < w.admit_after ||
			    active_count(&w) >= w.eff_batch)
				continue;
			ret = start_req(&w, &w.reqs[i]);
			if (ret < 0)
				fail(&w, ret, "prefill");
		}
		ret = decode_step(&w);
		if (ret < 0)
			fail(&w, ret, "decode");
		check_reclaim(&w);
		sweep(&w);
		if ((ws->steps & 3) == 0)
			update_held(&w);
		if (cfg->step_sleep_us)
			usleep(cfg->step_sleep_us);
	}
	/* leave cleanly: everything goes back to the pool */
	for (i = 0; i < w.batch; i++)
		req_drop(&w, &w.reqs[i]);
	sweep(&w);
	kvl_close(w.ctx);
	ws->held = 0;
	ws->state = 2;
	_exit(0);
}
