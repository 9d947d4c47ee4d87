// SPDX-License-Identifier: MIT
/*
 * kvl_prefix.c - libkvlease's side of the tenant's prefix cache: token ids
 * carried by sequences, match (attach the longest cached prefix of full
 * blocks to a new sequence), publish (offer a sequence's full blocks), the
 * references this context holds on cached blocks, and eviction for room.
 *
 * The cache itself lives in kvpoold (daemon/prefix.c), shared by every
 * process of the tenant.  What to match and publish, and when, is the
 * caller's (or its pressure policy's); this file only keeps the books:
 * ctx->pfx_ref[b] says that this context references cached block b at the
 * daemon (once, whatever the number of its sequences using b: refcnt[b]
 * counts those), and the reference is dropped when the last sequence
 * lets go of b.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_internal.h"

/* Region slices, 64-byte aligned. */
static uint64_t slice(uint64_t *used, uint64_t bytes)
{
	uint64_t off = *used;

	*used += (bytes + 63) & ~63ULL;
	return off;
}

static int pfx_init(struct kvl_ctx *ctx)
{
	int r = kvl_seq_refcnt_init(ctx);

	if (r)
		return r;
	if (!ctx->pfx_ref) {
		ctx->pfx_ref = calloc(ctx->capacity, 1);
		if (!ctx->pfx_ref)
			return -ENOMEM;
		ctx->npfx = 0;
	}
	return 0;
}

static void pfx_set(struct kvl_ctx *ctx, uint32_t b)
{
	if (!ctx->pfx_ref[b]) {
		ctx->pfx_ref[b] = 1;
		ctx->npfx++;
	}
}

void kvl_prefix_unref(struct kvl_ctx *ctx, uint32_t b)
{
	ctx->pfx_ref[b] = 0;
	ctx->npfx--;
	if (ctx->closing)
		return;		/* the daemon drops them with the socket */
	if (ctx->nunref == ctx->unref_cap) {
		uint32_t cap = ctx->unref_cap ? ctx->unref_cap * 2 : 64;
		uint32_t *q = realloc(ctx->unref_q, cap * sizeof(*q));

		if (!q) {
			/* Cannot queue it: drop it now. */
			struct kvp_prefix_unref u = { .n = 1 };

			memcpy(ctx->region, &b, sizeof(b));
			u.off_blocks = 0;
			kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &u, sizeof(u), NULL,
				0, NULL);
			return;
		}
		ctx->unref_q = q;
		ctx->unref_cap = cap;
	}
	ctx->unref_q[ctx->nunref++] = b;
}

void kvl_prefix_unref_flush(struct kvl_ctx *ctx)
{
	uint32_t done = 0, max;

	if (!ctx->nunref || ctx->sock < 0) {
		ctx->nunref = 0;
		return;
	}
	max = (uint32_t)(ctx->region_bytes / sizeof(uint32_t));
	if (max > KVP_IO_MAX_BLOCKS)
		max = KVP_IO_MAX_BLOCKS;
	while (done < ctx->nunref) {
		uint32_t n = ctx->nunref - done > max ? max : ctx->nunref - done;
		struct kvp_prefix_unref u;
		int r;

		memset(&u, 0, sizeof(u));
		u.n = n;
		u.off_blocks = 0;
		memcpy(ctx->region, ctx->unref_q + done, n * sizeof(uint32_t));
		r = kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &u, sizeof(u), NULL, 0,
			    NULL);
		/* -ESTALE: the connection went, and the references with it */
		if (r < 0 && r != -ESTALE)
			kvl_logf(ctx, KVL_LOG_WARNING, "prefix cache: cannot drop "
				 "%u references: %d", n, r);
		done += n;
	}
	ctx->nunref = 0;
}

void kvl_prefix_forget(struct kvl_ctx *ctx, bool tell)
{
	if (tell && ctx->npfx && ctx->sock >= 0) {
		struct kvp_prefix_unref u;

		memset(&u, 0, sizeof(u));
		u.flags = KVP_PREFIX_UNREF_ALL;
		kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &u, sizeof(u), NULL, 0, NULL);
	}
	if (ctx->pfx_ref)
		memset(ctx->pfx_ref, 0, ctx->capacity);
	ctx->npfx = 0;
	ctx->nunref = 0;
}

/* ---- token ids ------------------------------------------------------------- */

static int tok_reserve(struct kvl_seq *s, uint32_t n)
{
	if (n > s->tok_cap) {
		uint32_t cap = s->tok_cap ? s->tok_cap : 256;
		uint32_t *t;

		while (cap < n)
			cap = cap > UINT32_MAX / 2 ? n : cap * 2;
		t = realloc(s->tok, (size_t)cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->tok = t;
		s->tok_cap = cap;
	}
	return 0;
}

void kvl_seq_tokens_truncate(struct kvl_seq *s, uint32_t len)
{
	if (s->ntok_known > len)
		s->ntok_known = len;
}

/*
 * The token ids are known for slots [0, ntok_known) only while every one of
 * them holds the token written at its own position (slot = position):
 * the prefix cache keys blocks by token ids from position 0.  An edit
 * (kvl_edit.c) ends the run at the first slot it changed, and the run goes
 * on only while nothing was edited: the next position must be the length
 * (a compaction leaves a gap, and an append that compresses first changes
 * the slots it appends after).
 */
KVL_EXPORT int kvl_seq_append_tokens(struct kvl_seq *s, const uint32_t *tokens,
				     uint32_t ntok)
{
	bool known = s->ntok_known == s->len && kvl_seq_next_pos(s) == s->len;
	uint32_t old = s->len;
	int r;

	if (!ntok || !tokens)
		return -EINVAL;
	if (known) {
		r = tok_reserve(s, old + ntok);
		if (r)
			return r;
	}
	r = kvl_seq_append(s, ntok);
	if (r < 0)
		return r;
	if (known && (s->ntok_known != old || s->len != old + ntok ||
		      kvl_seq_next_pos(s) != s->len))
		known = false;	/* compressed on the way */
	if (known) {
		memcpy(s->tok + old, tokens, (size_t)ntok * sizeof(*tokens));
		s->ntok_known = old + ntok;
	}
	return r;
}

KVL_EXPORT int kvl_seq_tokens(const struct kvl_seq *s, const uint32_t **tokens,
			      uint32_t *ntok)
{
	*tokens = s->tok;
	*ntok = s->ntok_known;
	return 0;
}

/* ---- layouts with a model identity ------------------------------------------ */

KVL_EXPORT int kvl_layout_declare_model(struct kvl_ctx *ctx, struct kvl_layout *l,
					const char *model)
{
	struct kvp_layout_model lm;
	struct kvp_layout_reply lr;
	struct kvl_layout_slot *s;
	int r;

	if (!model || !model[0] || strlen(model) >= KVL_MODEL_LEN)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	if (ctx->nlayouts >= KVP_MAX_LAYOUTS)
		return -ENOSPC;
	memset(&lm, 0, sizeof(lm));
	lm.layout.layers = l->layers;
	lm.layout.kv_heads = l->kv_heads;
	lm.layout.head_dim = l->head_dim;
	lm.layout.dtype = l->dtype;
	lm.layout.rope_base = l->rope_base;
	strcpy(lm.model, model);
	r = kvl_rpc(ctx, KVP_OP_LAYOUT_MODEL, &lm, sizeof(lm), &lr, sizeof(lr),
		    NULL);
	if (r < 0)
		return r;
	l->tokens_per_block = lr.tokens_per_block;
	l->bytes_per_token = lr.bytes_per_token;
	s = &ctx->layouts[ctx->nlayouts];
	s->l = *l;
	s->id = lr.layout_id;
	memcpy(s->model, lm.model, sizeof(s->model));
	return (int)ctx->nlayouts++;
}

static const struct kvl_layout_slot *model_slot(const struct kvl_seq *s)
{
	const struct kvl_layout_slot *ls = &s->ctx->layouts[s->layout];

	return ls->model[0] ? ls : NULL;
}

/* ---- match and publish -------------------------------------------------------- */

KVL_EXPORT int kvl_seq_match(struct kvl_seq *s, const uint32_t *tokens,
			     uint32_t ntok)
{
	struct kvl_ctx *ctx = s->ctx;
	const struct kvl_layout_slot *ls = model_slot(s);
	struct kvp_prefix_match q;
	struct kvp_prefix_match_reply rep;
	uint64_t used = 0;
	uint32_t tpb, nb, i, m;
	const uint32_t *got;
	int r;

	if (!tokens && ntok)
		return -EINVAL;
	if (s->len || s->nblocks)
		return -EBUSY;		/* only a new (empty) sequence */
	if (!ls)
		return -ENOKEY;
	if (ctx->sock < 0)
		return -ENOTCONN;
	if (ntok > KVP_PREFIX_MAX_TOKENS)
		ntok = KVP_PREFIX_MAX_TOKENS;
	tpb = ls->l.tokens_per_block;
	nb = ntok / tpb;
	if (!nb)
		return 0;
	if ((uint64_t)nb * tpb * 4 + (uint64_t)nb * 4 + 128 > ctx->region_bytes)
		return -E2BIG;
	r = pfx_init(ctx);
	if (!r)
		r = kvl_seq_table_grow(s, nb);
	if (!r)
		r = tok_reserve(s, nb * tpb);
	if (r)
		return r;
	kvl_prefix_unref_flush(ctx);	/* the daemon must see them first */
	memset(&q, 0, sizeof(q));
	q.layout_id = ls->id;
	q.ntok = nb * tpb;
	q.off_tokens = slice(&used, (uint64_t)q.ntok * 4);
	q.off_blocks = slice(&used, (uint64_t)nb * 4);
	q.max_blocks = nb;
	memcpy(ctx->region + q.off_tokens, tokens, (size_t)q.ntok * 4);
	r = kvl_rpc(ctx, KVP_OP_PREFIX_MATCH, &q, sizeof(q), &rep, sizeof(rep),
		    NULL);
	if (r <= 0)
		return r;
	m = (uint32_t)r > nb ? nb : (uint32_t)r;
	got = (const uint32_t *)(ctx->region + q.off_blocks);
	for (i = 0; i < m; i++) {
		uint32_t b = got[i];

		if (b >= ctx->capacity)
			return -EPROTO;
		pfx_set(ctx, b);
		ctx->refcnt[b]++;
		s->table[s->nblocks++] = b;
	}
	s->len = m * tpb;
	memcpy(s->tok, tokens, (size_t)s->len * sizeof(*tokens));
	s->ntok_known = s->len;
	return (int)s->len;
}

KVL_EXPORT int kvl_seq_publish(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	const struct kvl_layout_slot *ls = model_slot(s);
	struct kvp_prefix_publish q;
	struct kvp_prefix_publish_reply rep;
	uint64_t used = 0;
	uint32_t tpb, nb, i, cached = 0;
	const uint32_t *res;
	int r;

	if (!ls)
		return -ENOKEY;
	if (ctx->sock < 0)
		return -ENOTCONN;
	tpb = ls->l.tokens_per_block;
	nb = (s->len < s->ntok_known ? s->len : s->ntok_known) / tpb;
	if (nb > KVP_IO_MAX_BLOCKS)
		nb = KVP_IO_MAX_BLOCKS;
	if (!nb)
		return 0;
	r = pfx_init(ctx);
	if (r)
		return r;
	for (i = 0; i < nb; i++)
		cached += kvl_pfx_cached(ctx, s->table[i]);
	if (cached == nb)
		return 0;		/* nothing new to offer */
	if ((uint64_t)nb * tpb * 4 + (uint64_t)nb * 8 + 192 > ctx->region_bytes)
		return -E2BIG;
	kvl_prefix_unref_flush(ctx);
	memset(&q, 0, sizeof(q));
	q.layout_id = ls->id;
	q.nblocks = nb;
	q.ntok = nb * tpb;
	q.off_tokens = slice(&used, (uint64_t)q.ntok * 4);
	q.off_blocks = slice(&used, (uint64_t)nb * 4);
	q.off_result = slice(&used, (uint64_t)nb * 4);
	memcpy(ctx->region + q.off_tokens, s->tok, (size_t)q.ntok * 4);
	memcpy(ctx->region + q.off_blocks, s->table, (size_t)nb * 4);
	r = kvl_rpc(ctx, KVP_OP_PREFIX_PUBLISH, &q, sizeof(q), &rep,
		    sizeof(rep), NULL);
	if (r < 0)
		return r;
	res = (const uint32_t *)(ctx->region + q.off_result);
	for (i = 0; i < nb; i++) {
		uint32_t b = s->table[i], c = res[i];

		if (c >= ctx->capacity)
			return -EPROTO;
		if (c == b) {
			/* ours moved into the cache (or was cached) */
			pfx_set(ctx, b);
			continue;
		}
		/* Cached already: use that one, ours goes back. */
		pfx_set(ctx, c);
		ctx->refcnt[c]++;
		s->table[i] = c;
		kvl_seq_put_block(ctx, b);
	}
	kvl_prefix_unref_flush(ctx);
	return r;
}

KVL_EXPORT int kvl_prefix_evict(struct kvl_ctx *ctx, uint32_t count)
{
	struct kvp_prefix_evict q;

	if (!count)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	memset(&q, 0, sizeof(q));
	q.count = count;
	return kvl_rpc(ctx, KVP_OP_PREFIX_EVICT, &q, sizeof(q), NULL, 0, NULL);
}

/* ---- after a restart that kept the contents ------------------------------ */

/* The leading cached blocks of @s (in the top tier), or -1 when a cached
 * block stands anywhere else (after an edit): matching cannot take that
 * back. */
static int cached_run(const struct kvl_seq *s, const uint8_t *ref)
{
	uint32_t i, k = 0;

	while (k < s->nblocks && !s->where[k] && ref[s->table[k]])
		k++;
	for (i = k; i < s->nblocks; i++)
		if (!s->where[i] && ref[s->table[i]])
			return -1;
	return (int)k;
}

/*
 * The daemon dropped this context's references with the old connection;
 * its prefix index survived (or not).  Match each sequence's cached run
 * again: the same blocks come back referenced when the index kept them.
 * A sequence that gets fewer or other blocks is reset (DROPPED); the
 * region's bytes are put back afterwards, for the call being repeated.
 */
int kvl_prefix_rematch(struct kvl_ctx *ctx)
{
	uint8_t *old = ctx->pfx_ref, *now, *saved = NULL;
	uint64_t need = 0;
	struct kvl_seq *s;
	uint32_t b;
	int lost = 0;

	if (!old || !ctx->npfx)
		return 0;
	ctx->nunref = 0;	/* the daemon dropped those too */
	for (s = ctx->seqs; s; s = s->next) {
		const struct kvl_layout_slot *ls = model_slot(s);
		int k = cached_run(s, old);
		uint64_t n;

		if (k <= 0 || !ls)
			continue;
		n = (uint64_t)k * ls->l.tokens_per_block * 4 + (uint64_t)k * 4 +
		    128;
		if (n > need)
			need = n;
	}
	now = calloc(ctx->capacity, 1);
	if (need > ctx->region_bytes)
		need = ctx->region_bytes;
	saved = need ? malloc(need) : NULL;
	if (!now || (need && !saved)) {
		free(now);
		free(saved);
		return -ENOMEM;
	}
	if (need)
		memcpy(saved, ctx->region, need);
	for (s = ctx->seqs; s; s = s->next) {
		const struct kvl_layout_slot *ls = model_slot(s);
		int k = cached_run(s, old);
		struct kvp_prefix_match q;
		struct kvp_prefix_match_reply rep;
		uint64_t used = 0;
		const uint32_t *got;
		uint32_t tpb, i;
		int r;

		if (!k)
			continue;
		tpb = ls ? ls->l.tokens_per_block : 0;
		r = -ENOKEY;
		if (k > 0 && ls && s->ntok_known >= (uint32_t)k * tpb &&
		    (uint64_t)k * tpb * 4 + (uint64_t)k * 4 + 128 <= need) {
			memset(&q, 0, sizeof(q));
			q.layout_id = ls->id;
			q.ntok = (uint32_t)k * tpb;
			q.off_tokens = slice(&used, (uint64_t)q.ntok * 4);
			q.off_blocks = slice(&used, (uint64_t)k * 4);
			q.max_blocks = (uint32_t)k;
			memcpy(ctx->region + q.off_tokens, s->tok,
			       (size_t)q.ntok * 4);
			r = kvl_rpc_fd(ctx, KVP_OP_PREFIX_MATCH, &q, sizeof(q),
				       -1, &rep, sizeof(rep), NULL);
		}
		if (r > 0) {
			got = (const uint32_t *)(ctx->region + q.off_blocks);
			for (i = 0; i < (uint32_t)r && i < (uint32_t)k; i++)
				if (got[i] < ctx->capacity)
					now[got[i]] = 1;
			for (i = 0; i < (uint32_t)k; i++)
				if (i >= (uint32_t)r || got[i] != s->table[i])
					break;
			if (i == (uint32_t)k)
				continue;	/* all of it, the same blocks */
		}
		kvl_seq_reset(s);
		lost++;
	}
	if (need)
		memcpy(ctx->region, saved, need);
	free(saved);
	/* What the daemon references for us now; the references that no
	 * sequence uses any more (a reset one matched them) go again. */
	ctx->pfx_ref = now;
	ctx->npfx = 0;
	for (b = 0; b < ctx->capacity; b++)
		if (now[b]) {
			ctx->npfx++;
			if (!ctx->refcnt[b])
				kvl_prefix_unref(ctx, b);
		}
	free(old);
	kvl_prefix_unref_flush(ctx);
	return lost;
}
