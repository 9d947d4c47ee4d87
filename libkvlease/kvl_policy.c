// SPDX-License-Identifier: MIT
/*
 * kvl_policy.c - libkvlease under pressure: what a call does when the
 * sequences it serves need top-pool blocks and the lease cannot grow, and
 * how a reclaim request is answered.
 *
 * Policy here, mechanism elsewhere: kvl_seq.c moves a sequence's blocks
 * (swap out, swap in, drop), kvl_tier.c talks to the daemon, the ledger
 * counts.  The ways of freeing blocks form one ordered list, cheapest
 * first (relief_order below); every pressure path walks it:
 *
 *   1. lease-cache   blocks this context leased and does not use;
 *   2. prefix-cache  the tenant's unreferenced prefix-cache blocks, least
 *                    recently used first (kvl_prefix_evict: they go back to
 *                    the ledger, not to this context's cache);
 *   3. compress      token-wise compression of a sequence (evict low-score
 *                    tokens inside its pages, compact): that feature fills
 *                    this slot, tried before anything leaves the top pool;
 *   4. swap          swap a victim out to the first lower tier with room;
 *   5. drop          drop a victim: the caller re-fills it (recompute).
 *
 * Each step has the policies that may use it; an empty slot is skipped.
 * A step makes top blocks free in the context's cache (or, the prefix
 * cache's, in the pool): a pressured call takes them from there, a reclaim
 * gives them back to the ledger.
 *
 * Victim: the least recently used sequence (kvl_seq_touch: every append,
 * write, read and attention) that holds top blocks of its own and that the
 * current call does not serve.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_internal.h"

#define BIT(p)		(1U << (p))
#define ALL		(BIT(KVL_POLICY_STALL) | BIT(KVL_POLICY_SWAP) | \
			 BIT(KVL_POLICY_RECOMPUTE) | BIT(KVL_POLICY_FAIL))

static const char *const names[] = {
	[KVL_POLICY_STALL] = "stall",
	[KVL_POLICY_SWAP] = "swap",
	[KVL_POLICY_RECOMPUTE] = "recompute",
	[KVL_POLICY_FAIL] = "fail",
};

KVL_EXPORT const char *kvl_policy_name(uint32_t policy)
{
	if (policy < 1 || policy > KVL_POLICY_FAIL)
		return NULL;
	return names[policy];
}

KVL_EXPORT int kvl_policy_from_name(const char *name)
{
	uint32_t p;

	for (p = 1; name && p <= KVL_POLICY_FAIL; p++)
		if (!strcmp(name, names[p]))
			return (int)p;
	return -EINVAL;
}

KVL_EXPORT int kvl_set_policy(struct kvl_ctx *ctx, uint32_t policy,
			      uint32_t stall_ms)
{
	if (policy > KVL_POLICY_FAIL)
		return -EINVAL;
	ctx->policy = policy ? policy : KVL_POLICY_STALL;
	ctx->stall_ms = stall_ms;
	return 0;
}

uint32_t kvl_policy_of(const struct kvl_ctx *ctx, uint32_t policy)
{
	return policy && policy <= KVL_POLICY_FAIL ? policy : ctx->policy;
}

static bool pressure_err(int r)
{
	return r == -EAGAIN || r == -EDQUOT || r == -ENOMEM ||
	       r == -ETIMEDOUT;
}

/* ---- victims ------------------------------------------------------------ */

static struct kvl_seq *victim(struct kvl_ctx *ctx)
{
	struct kvl_seq *s, *v = NULL;

	for (s = ctx->seqs; s; s = s->next) {
		if (s->state != KVL_SEQ_RESIDENT || s->busy == ctx->call)
			continue;
		if (v && s->last_use >= v->last_use)
			continue;
		if (kvl_seq_own_top(s))
			v = s;
	}
	return v;
}

/* Swap s out to the first lower tier that takes it. */
static int swap_out_any(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t t;
	int r = kvl_tiers_load(ctx), last = -ENOENT;

	if (r)
		return r;
	for (t = 1; t < ctx->ntiers; t++) {
		r = kvl_seq_move_out(s, t);
		if (!r)
			return 0;
		if (r == -ESTALE)
			return r;
		last = r;
	}
	ctx->pst.no_room++;
	kvl_logf(ctx, KVL_LOG_INFO, "no lower tier takes %u blocks: %s",
		 kvl_seq_own_top(s), strerror(-last));
	return last;
}

/* ---- the relief list ------------------------------------------------------ */

/* Each returns the top blocks it made free (in the context's cache). */
typedef uint32_t (*relief_fn)(struct kvl_ctx *ctx, uint32_t want);

static uint32_t relief_lease_cache(struct kvl_ctx *ctx, uint32_t want)
{
	return ctx->ncache;	/* free already */
}

/* Given straight back to the ledger: counted for kvl_reclaim(). */
static uint32_t relief_prefix_cache(struct kvl_ctx *ctx, uint32_t want)
{
	int r;

	if (ctx->sock < 0 || !want)
		return 0;
	r = kvl_prefix_evict(ctx, want);
	if (r <= 0)
		return 0;
	ctx->relief_given += (uint32_t)r;
	return (uint32_t)r;
}

static uint32_t relief_swap(struct kvl_ctx *ctx, uint32_t want)
{
	uint32_t got = 0;

	while (got < want) {
		struct kvl_seq *v = victim(ctx);
		uint32_t gain;

		if (!v)
			break;
		gain = kvl_seq_own_top(v);
		if (swap_out_any(v))
			break;	/* no tier has room: the next step drops */
		got += gain;
	}
	return got;
}

static uint32_t relief_drop(struct kvl_ctx *ctx, uint32_t want)
{
	uint32_t got = 0;

	while (got < want) {
		struct kvl_seq *v = victim(ctx);

		if (!v)
			break;
		got += kvl_seq_own_top(v);
		kvl_seq_drop(v);
	}
	return got;
}

static const struct relief_step {
	const char *name;
	relief_fn fn;		/* NULL: a slot another feature fills */
	uint32_t policies;	/* BIT(KVL_POLICY_*) that use it */
} relief_order[] = {
	{ "lease-cache", relief_lease_cache, ALL },
	{ "prefix-cache", relief_prefix_cache, ALL },
	{ "compress", NULL, BIT(KVL_POLICY_SWAP) | BIT(KVL_POLICY_RECOMPUTE) },
	{ "swap", relief_swap, BIT(KVL_POLICY_SWAP) },
	{ "drop", relief_drop, BIT(KVL_POLICY_SWAP) |
			       BIT(KVL_POLICY_RECOMPUTE) },
};

/* Walk the list until want blocks are free; returns how many are. */
static uint32_t relieve(struct kvl_ctx *ctx, uint32_t want, uint32_t policy)
{
	uint32_t got = 0, i;

	if (ctx->in_relief)
		return ctx->ncache;
	ctx->in_relief = true;
	for (i = 0; i < sizeof(relief_order) / sizeof(relief_order[0]); i++) {
		const struct relief_step *st = &relief_order[i];

		if (got >= want)
			break;
		if (!st->fn || !(st->policies & BIT(policy)))
			continue;
		got += st->fn(ctx, want - got);
	}
	ctx->in_relief = false;
	return got;
}

/* ---- pressured calls ------------------------------------------------------ */

/* Longest wait for the pool to grow (a chunk is mapped in ~1 ms). */
#define GROW_WAIT_NS	250000000ULL

/* Lease into the cache without waiting for other tenants; wait (briefly)
 * only when the pool has the free blocks but must grow to back them. */
static int lease_room(struct kvl_ctx *ctx, uint32_t need)
{
	struct kvl_status st;
	uint32_t missing;
	int r;

	r = kvl_cache_lease(ctx, need, KVL_LEASE_NONBLOCK, 0);
	if (r != -EAGAIN)
		return r;
	r = kvl_status(ctx, &st);
	if (r == -ESTALE)
		return r;
	missing = need > ctx->ncache ? need - ctx->ncache : 0;
	if (r || st.capacity - st.used < missing)
		return -EAGAIN;
	if (st.backed - st.used >= missing)	/* it grew meanwhile */
		return kvl_cache_lease(ctx, need, KVL_LEASE_NONBLOCK, 0);
	r = kvl_cache_lease(ctx, need, 0, GROW_WAIT_NS);
	return r == -ETIMEDOUT ? -EAGAIN : r;
}

static uint64_t stall_ns(const struct kvl_ctx *ctx)
{
	return ctx->stall_ms ? ctx->stall_ms * 1000000ULL : ctx->timeout_ns;
}

int kvl_need_blocks(struct kvl_ctx *ctx, uint32_t need, uint32_t policy)
{
	uint32_t p = kvl_policy_of(ctx, policy);
	int r;

	if (ctx->ncache >= need)
		return 0;
	switch (p) {
	case KVL_POLICY_FAIL:
		return kvl_cache_lease(ctx, need, KVL_LEASE_NONBLOCK, 0);
	case KVL_POLICY_STALL:
		r = kvl_cache_lease(ctx, need, 0, stall_ns(ctx));
		if (r == -ETIMEDOUT)
			ctx->pst.stalls++;
		return r;
	default:
		break;
	}
	/* SWAP, RECOMPUTE */
	r = lease_room(ctx, need);
	if (!pressure_err(r))
		return r;
	relieve(ctx, need - ctx->ncache, p);
	if (ctx->ncache >= need) {
		kvl_policy_report(ctx);
		return 0;
	}
	r = lease_room(ctx, need);
	if (pressure_err(r) && ctx->stall_ms) {
		ctx->pst.stalls++;
		r = kvl_cache_lease(ctx, need, 0, ctx->stall_ms * 1000000ULL);
	}
	/* not enough after all: what the victims freed is of no use to
	 * this call; give it back for other clients */
	if (r)
		kvl_cache_trim(ctx, 2 * ctx->lease_batch);
	kvl_policy_report(ctx);
	return r;
}

void kvl_preempt_self(struct kvl_seq *s, uint32_t policy)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t p = kvl_policy_of(ctx, policy);

	if (p != KVL_POLICY_SWAP && p != KVL_POLICY_RECOMPUTE)
		return;
	if (s->state != KVL_SEQ_RESIDENT || !s->len)
		return;
	ctx->pst.self_preempts++;
	if (p == KVL_POLICY_SWAP && swap_out_any(s) == 0 &&
	    s->state == KVL_SEQ_SWAPPED) {
		kvl_cache_trim(ctx, 2 * ctx->lease_batch);
		kvl_policy_report(ctx);
		return;
	}
	if (s->state == KVL_SEQ_RESIDENT)
		kvl_seq_drop(s);
	/* its blocks are for the other clients now */
	kvl_cache_trim(ctx, 2 * ctx->lease_batch);
	kvl_policy_report(ctx);
}

KVL_EXPORT int kvl_seq_swap_out(struct kvl_seq *s, int tier)
{
	struct kvl_ctx *ctx = s->ctx;
	int r;

	if (s->state == KVL_SEQ_DROPPED)
		return -ENODATA;
	ctx->call++;
	kvl_seq_touch(s);
	if (tier < 0) {
		r = swap_out_any(s);
	} else if (tier == 0) {
		return -EINVAL;
	} else {
		r = kvl_tiers_load(ctx);
		if (!r)
			r = (uint32_t)tier < ctx->ntiers ?
			    kvl_seq_move_out(s, (uint32_t)tier) : -ENOENT;
	}
	if (!r)
		kvl_cache_trim(ctx, 2 * ctx->lease_batch);
	kvl_policy_report(ctx);
	return r;
}

KVL_EXPORT int kvl_reclaim(struct kvl_ctx *ctx, uint32_t target)
{
	uint32_t before;
	int r;

	if (!target)
		return 0;
	ctx->call++;	/* no sequence is in use: any may be a victim */
	ctx->relief_given = 0;
	relieve(ctx, target, ctx->policy);
	before = ctx->ncache;
	kvl_cache_trim(ctx, 0);
	r = (int)(before - ctx->ncache + ctx->relief_given);
	kvl_policy_report(ctx);
	return r;
}

/* ---- dropped sequences, figures, reports --------------------------------- */

void kvl_policy_listed(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;

	if (s->listed)
		return;
	if (ctx->ndropped == ctx->dropped_cap) {
		uint32_t cap = ctx->dropped_cap ? 2 * ctx->dropped_cap : 16;
		struct kvl_seq **n = realloc(ctx->dropped, cap * sizeof(*n));

		if (!n)
			return;
		ctx->dropped = n;
		ctx->dropped_cap = cap;
	}
	ctx->dropped[ctx->ndropped++] = s;
	s->listed = true;
}

void kvl_policy_forget(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t i;

	if (!s->listed)
		return;
	for (i = 0; i < ctx->ndropped; i++)
		if (ctx->dropped[i] == s) {
			memmove(&ctx->dropped[i], &ctx->dropped[i + 1],
				(ctx->ndropped - i - 1) * sizeof(s));
			ctx->ndropped--;
			break;
		}
	s->listed = false;
}

KVL_EXPORT int kvl_dropped(struct kvl_ctx *ctx, struct kvl_seq **out,
			   uint32_t cap)
{
	uint32_t n = ctx->ndropped < cap ? ctx->ndropped : cap, i;

	for (i = 0; i < n; i++) {
		out[i] = ctx->dropped[i];
		out[i]->listed = false;
	}
	memmove(ctx->dropped, ctx->dropped + n,
		(ctx->ndropped - n) * sizeof(*ctx->dropped));
	ctx->ndropped -= n;
	return (int)n;
}

KVL_EXPORT int kvl_policy_stats(struct kvl_ctx *ctx,
				struct kvl_policy_stats *out)
{
	*out = ctx->pst;
	return 0;
}

void kvl_policy_report(struct kvl_ctx *ctx)
{
	struct kvp_seq_report q;
	struct kvl_seq *s;

	if (ctx->sock < 0)
		return;
	memset(&q, 0, sizeof(q));
	for (s = ctx->seqs; s; s = s->next) {
		if (s->state == KVL_SEQ_DROPPED)
			q.dropped++;
		else if (s->state == KVL_SEQ_SWAPPED &&
			 s->tier < KVP_MAX_TIERS)
			q.swapped[s->tier]++;
		else
			q.resident++;
	}
	if (!memcmp(&q, &ctx->last_report, sizeof(q)))
		return;
	ctx->last_report = q;
	/* never waits: a report must not reconnect under a caller */
	kvl_send_only(ctx, KVP_OP_SEQ_REPORT, &q, sizeof(q));
}
