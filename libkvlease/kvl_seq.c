// SPDX-License-Identifier: MIT
/*
 * kvl_seq.c - sequences: block tables managed by the library.
 *
 * A sequence is a list of positions; position p lives in slot
 * p % tokens_per_block of block table[p / tokens_per_block].  Blocks come
 * from a per-context cache of leased blocks, refilled lease_batch at a
 * time.  Forks share full blocks (a per-block reference count); writing
 * into a shared block copies it first (copy-on-write).  Blocks of the
 * tenant's prefix cache (kvl_prefix.c) sit in tables like the others but
 * are not in our lease and are read-only: writing into one always copies
 * it, and its last local reference is dropped at the daemon instead of
 * going back to the block cache.
 *
 * Under pressure a sequence may be swapped (its own top blocks copied to a
 * lower tier and given back: where[i] says which tier entry i is in;
 * blocks shared with a fork, and prefix-cache blocks, stay on top) or
 * dropped (its contents given up: the caller re-fills it).  Which
 * sequence, and when, is decided in kvl_policy.c; this file moves the
 * blocks.  A call that needs a swapped sequence brings it back first.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_internal.h"

int kvl_seq_refcnt_init(struct kvl_ctx *ctx)
{
	if (ctx->refcnt)
		return 0;
	if (!ctx->capacity)
		return -ENOTCONN;
	ctx->refcnt = calloc(ctx->capacity, sizeof(*ctx->refcnt));
	return ctx->refcnt ? 0 : -ENOMEM;
}

static int cache_push(struct kvl_ctx *ctx, uint32_t b)
{
	if (ctx->ncache == ctx->cache_cap) {
		uint32_t cap = ctx->cache_cap ? ctx->cache_cap * 2 : 64;
		uint32_t *n = realloc(ctx->cache, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		ctx->cache = n;
		ctx->cache_cap = cap;
	}
	ctx->cache[ctx->ncache++] = b;
	return 0;
}

/* Make sure the cache holds at least `need` blocks, leasing with flags. */
int kvl_cache_lease(struct kvl_ctx *ctx, uint32_t need, uint32_t flags,
		    uint64_t timeout_ns)
{
	uint32_t want, *buf;
	int r, i;

	while (ctx->ncache < need) {
		uint32_t missing = need - ctx->ncache;

		want = missing > ctx->lease_batch ? missing : ctx->lease_batch;
		if (want > KVP_IO_MAX_BLOCKS)
			want = KVP_IO_MAX_BLOCKS;
		buf = malloc(want * sizeof(*buf));
		if (!buf)
			return -ENOMEM;
		/* Extra blocks are welcome, the missing ones are needed. */
		r = kvl_lease(ctx, want, flags | KVL_LEASE_PARTIAL, timeout_ns,
			      buf);
		/* At the tenant's max: its unused cached blocks go first. */
		if (r == -EDQUOT && ctx->sock >= 0 &&
		    kvl_prefix_evict(ctx, missing) > 0)
			r = kvl_lease(ctx, want, KVL_LEASE_PARTIAL,
				      ctx->timeout_ns, buf);
		if (r == -EDQUOT && want > missing) {
			free(buf);
			want = missing;
			buf = malloc(want * sizeof(*buf));
			if (!buf)
				return -ENOMEM;
			r = kvl_lease(ctx, want, flags, timeout_ns, buf);
		}
		if (r < 0) {
			free(buf);
			return r;
		}
		for (i = 0; i < r; i++)
			cache_push(ctx, buf[i]);
		free(buf);
	}
	return 0;
}

/* Give back cached blocks beyond keep. */
void kvl_cache_trim(struct kvl_ctx *ctx, uint32_t keep)
{
	uint32_t n;

	if (ctx->ncache <= keep)
		return;
	n = ctx->ncache - keep;
	if (kvl_release_internal(ctx, ctx->cache + keep, n) >= 0)
		ctx->ncache = keep;
}

KVL_EXPORT int kvl_trim(struct kvl_ctx *ctx)
{
	uint32_t n = ctx->ncache;

	kvl_cache_trim(ctx, 0);
	return (int)(n - ctx->ncache);
}

static uint32_t tpb_of(const struct kvl_seq *s)
{
	return s->ctx->layouts[s->layout].l.tokens_per_block;
}

void kvl_seq_touch(struct kvl_seq *s)
{
	s->last_use = ++s->ctx->use_clock;
	s->busy = s->ctx->call;
}

KVL_EXPORT int kvl_seq_create(struct kvl_ctx *ctx, int layout,
			      struct kvl_seq **out)
{
	struct kvl_seq *s;
	int r;

	*out = NULL;
	if (layout < 0 || (unsigned int)layout >= ctx->nlayouts)
		return -EINVAL;
	r = kvl_seq_refcnt_init(ctx);
	if (r)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ctx = ctx;
	s->layout = layout;
	s->state = KVL_SEQ_RESIDENT;
	s->next = ctx->seqs;
	ctx->seqs = s;
	kvl_seq_touch(s);
	*out = s;
	return 0;
}

void kvl_seq_put_block(struct kvl_ctx *ctx, uint32_t b)
{
	if (!ctx->refcnt[b] || --ctx->refcnt[b])
		return;
	kvl_edit_block_freed(ctx, b);
	if (kvl_pfx_cached(ctx, b))
		kvl_prefix_unref(ctx, b);
	else
		cache_push(ctx, b);
}

/* Give the sequence's lower-tier blocks back to their tier. */
static void release_lower(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t *low, i, k = 0;

	if (!s->nswapped)
		return;
	low = malloc(s->nswapped * sizeof(*low));
	if (low) {
		for (i = 0; i < s->nblocks; i++)
			if (s->where[i])
				low[k++] = s->table[i];
		if (kvl_tier_release(ctx, s->tier, low, k) < 0)
			kvl_logf(ctx, KVL_LOG_WARNING, "cannot release %u "
				 "blocks of tier %u", k, s->tier);
		free(low);
	}
	s->nswapped = 0;
}

KVL_EXPORT void kvl_seq_free(struct kvl_seq *s)
{
	struct kvl_ctx *ctx;
	struct kvl_seq **pp;
	bool report;
	uint32_t i;

	if (!s)
		return;
	ctx = s->ctx;
	for (pp = &ctx->seqs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	report = s->state != KVL_SEQ_RESIDENT;
	kvl_policy_forget(s);
	release_lower(s);
	for (i = 0; i < s->nblocks; i++)
		if (!s->where || !s->where[i])
			kvl_seq_put_block(ctx, s->table[i]);
	kvl_edit_free(s);
	free(s->table);
	free(s->where);
	free(s->tok);
	free(s);
	kvl_prefix_unref_flush(ctx);
	if (ctx->sock >= 0 || ctx->mode == KVL_MODE_MODULE)
		kvl_cache_trim(ctx, 2 * ctx->lease_batch);
	if (report)
		kvl_policy_report(ctx);
}

int kvl_seq_table_grow(struct kvl_seq *s, uint32_t n)
{
	if (n > s->cap) {
		uint32_t cap = s->cap ? s->cap : 8;
		uint32_t *t;
		uint8_t *w;

		while (cap < n)
			cap *= 2;
		t = realloc(s->table, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->table = t;
		w = realloc(s->where, cap);
		if (!w)
			return -ENOMEM;
		memset(w + s->cap, 0, cap - s->cap);
		s->where = w;
		s->cap = cap;
	}
	return 0;
}

/* A call needs s's contents on top. */
static int resident(struct kvl_seq *s, uint32_t policy)
{
	if (s->state == KVL_SEQ_DROPPED)
		return -ENODATA;
	if (s->state == KVL_SEQ_SWAPPED)
		return kvl_seq_swap_in(s, policy);
	return 0;
}

KVL_EXPORT int kvl_seq_append_policy(struct kvl_seq *s, uint32_t ntok,
				     uint32_t policy)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t tpb = tpb_of(s), need, old_len;
	uint64_t len;
	int r;

	ctx->call++;
	kvl_seq_touch(s);
	if (s->state == KVL_SEQ_DROPPED) {
		/* re-filled from position 0 by the caller */
		s->state = KVL_SEQ_RESIDENT;
		kvl_policy_forget(s);
		kvl_policy_report(ctx);
	}
	r = resident(s, policy);
	if (r)
		return r;
	/* a compression policy may make room first (kvl_seq_set_compress);
	 * the positions array (after edits) gets its room */
	r = kvl_edit_before_append(s, ntok);
	if (r)
		return r;
	len = (uint64_t)s->len + ntok;
	if (len > INT32_MAX)
		return -EOVERFLOW;
	need = (uint32_t)((len + tpb - 1) / tpb);
	if (need > s->nblocks) {
		r = kvl_seq_table_grow(s, need);
		if (r)
			return r;
		r = kvl_need_blocks(ctx, need - s->nblocks, policy);
		if (r) {
			if (r != -ESTALE)
				kvl_preempt_self(s, policy);
			return r;
		}
		while (s->nblocks < need) {
			uint32_t b = ctx->cache[--ctx->ncache];

			ctx->refcnt[b] = 1;
			s->where[s->nblocks] = 0;
			s->table[s->nblocks++] = b;
		}
		/* what pressure freed beyond this need goes back */
		if (ctx->ncache > 2 * ctx->lease_batch)
			kvl_cache_trim(ctx, 2 * ctx->lease_batch);
	}
	old_len = s->len;
	s->len = (uint32_t)len;
	kvl_edit_after_append(s, old_len);
	return (int)s->len;
}

KVL_EXPORT int kvl_seq_append(struct kvl_seq *s, uint32_t ntok)
{
	return kvl_seq_append_policy(s, ntok, KVL_POLICY_DEFAULT);
}

KVL_EXPORT int kvl_seq_truncate(struct kvl_seq *s, uint32_t len)
{
	uint32_t tpb = tpb_of(s), keep;
	int r;

	if (len > s->len)
		return -EINVAL;
	if (s->state == KVL_SEQ_SWAPPED && len) {
		s->ctx->call++;
		kvl_seq_touch(s);
		r = resident(s, KVL_POLICY_DEFAULT);
		if (r)
			return r;
	}
	if (s->state == KVL_SEQ_SWAPPED) {
		/* to 0: nothing to bring back */
		release_lower(s);
		s->state = KVL_SEQ_RESIDENT;
		kvl_policy_report(s->ctx);
	}
	kvl_edit_before_truncate(s, len);
	keep = (len + tpb - 1) / tpb;
	while (s->nblocks > keep)
		kvl_seq_put_block(s->ctx, s->table[--s->nblocks]);
	s->len = len;
	kvl_seq_tokens_truncate(s, len);
	kvl_prefix_unref_flush(s->ctx);
	return 0;
}

KVL_EXPORT uint32_t kvl_seq_len(const struct kvl_seq *s)
{
	return s->len;
}

KVL_EXPORT int kvl_seq_block_table(const struct kvl_seq *s,
				   const uint32_t **table, uint32_t *nblocks)
{
	*table = s->table;
	*nblocks = s->nblocks;
	return 0;
}

/* Give block index i of s its own copy if it is shared. */
static int cow(struct kvl_seq *s, uint32_t i)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t old = s->table[i], nb;
	int r;

	if (ctx->refcnt[old] <= 1 && !kvl_pfx_cached(ctx, old))
		return 0;
	r = kvl_need_blocks(ctx, 1, KVL_POLICY_DEFAULT);
	if (r)
		return r;
	nb = ctx->cache[ctx->ncache - 1];
	r = kvl_copy_blocks(ctx, &old, &nb, 1);
	if (r)
		return r;
	ctx->ncache--;
	ctx->refcnt[nb] = 1;
	kvl_edit_block_copied(ctx, old, nb);
	kvl_seq_put_block(ctx, old);	/* the last use of a cached block */
	s->table[i] = nb;
	return 0;
}

static int positions(struct kvl_seq *s, uint32_t pos, uint32_t ntok,
		     bool write, uint32_t **blocks, uint32_t **slots)
{
	uint32_t tpb = tpb_of(s), t, i;
	int r;

	s->ctx->call++;
	kvl_seq_touch(s);
	r = resident(s, KVL_POLICY_DEFAULT);
	if (r)
		return r;
	if (!ntok || (uint64_t)pos + ntok > s->len)
		return -EINVAL;
	if (write)
		for (i = pos / tpb; i <= (pos + ntok - 1) / tpb; i++) {
			r = cow(s, i);
			if (r)
				return r;
		}
	*blocks = malloc(ntok * sizeof(uint32_t));
	*slots = malloc(ntok * sizeof(uint32_t));
	if (!*blocks || !*slots) {
		free(*blocks);
		free(*slots);
		return -ENOMEM;
	}
	for (t = 0; t < ntok; t++) {
		(*blocks)[t] = s->table[(pos + t) / tpb];
		(*slots)[t] = (pos + t) % tpb;
	}
	return 0;
}

KVL_EXPORT int kvl_seq_write_kv(struct kvl_seq *s, uint32_t layer,
				uint32_t pos, uint32_t ntok, const float *k,
				const float *v)
{
	const struct kvl_layout *l = &s->ctx->layouts[s->layout].l;
	size_t row = (size_t)l->kv_heads * l->head_dim;
	uint32_t *b, *sl, t0, t1;
	int r = positions(s, pos, ntok, true, &b, &sl);

	kvl_prefix_unref_flush(s->ctx);
	if (r)
		return r;
	/*
	 * Runs of blocks an edit moved tokens into are written with
	 * KVP_KV_MERGE: writing slot 0 there must not start the block
	 * afresh (its other slots hold tokens).
	 */
	for (t0 = 0; t0 < ntok && !r; t0 = t1) {
		bool m = kvl_edit_block_merged(s->ctx, b[t0]);

		for (t1 = t0 + 1; t1 < ntok &&
		     kvl_edit_block_merged(s->ctx, b[t1]) == m; t1++)
			;
		r = kvl_write_kv_flags(s->ctx, s->layout, layer, t1 - t0,
				       b + t0, sl + t0, k + t0 * row,
				       v + t0 * row, m ? KVP_KV_MERGE : 0);
	}
	free(b);
	free(sl);
	return r;
}

KVL_EXPORT int kvl_seq_read_kv(struct kvl_seq *s, uint32_t layer,
			       uint32_t pos, uint32_t ntok, float *k, float *v)
{
	uint32_t *b, *sl;
	int r = positions(s, pos, ntok, false, &b, &sl);

	if (r)
		return r;
	r = kvl_read_kv(s->ctx, s->layout, layer, ntok, b, sl, k, v);
	free(b);
	free(sl);
	return r;
}

static int seq_attn(struct kvl_seq *const *seqs, uint32_t nseq,
		    uint32_t layer, uint32_t q_heads, uint32_t n_new,
		    const float *q, float scale, float *out)
{
	struct kvl_ctx *ctx;
	struct kvl_attn_args a;
	uint32_t *tables, *ctx_lens, mbs = 1, i;
	int layout, r;

	if (!nseq)
		return -EINVAL;
	ctx = seqs[0]->ctx;
	layout = seqs[0]->layout;
	for (i = 0; i < nseq; i++)
		if (seqs[i]->ctx != ctx || seqs[i]->layout != layout)
			return -EINVAL;
	/* the whole batch is in use: none of it may be a victim */
	ctx->call++;
	for (i = 0; i < nseq; i++)
		kvl_seq_touch(seqs[i]);
	for (i = 0; i < nseq; i++) {
		r = resident(seqs[i], KVL_POLICY_DEFAULT);
		if (r)
			return r;
		if (seqs[i]->nblocks > mbs)
			mbs = seqs[i]->nblocks;
	}
	tables = calloc((size_t)nseq * mbs, sizeof(uint32_t));
	ctx_lens = calloc(nseq, sizeof(uint32_t));
	if (!tables || !ctx_lens) {
		free(tables);
		free(ctx_lens);
		return -ENOMEM;
	}
	for (i = 0; i < nseq; i++) {
		if (seqs[i]->nblocks)
			memcpy(tables + (size_t)i * mbs, seqs[i]->table,
			       seqs[i]->nblocks * sizeof(uint32_t));
		/* unused entries name a block we hold (never read) */
		ctx_lens[i] = seqs[i]->len;
	}
	memset(&a, 0, sizeof(a));
	a.layer = layer;
	a.batch = nseq;
	a.q_heads = q_heads;
	a.max_blocks_per_seq = mbs;
	a.n_new = n_new;
	a.scale = scale;
	a.q = q;
	a.block_tables = tables;
	a.ctx_lens = ctx_lens;
	a.out = out;
	r = kvl_attention(ctx, layout, &a);
	free(tables);
	free(ctx_lens);
	return r;
}

KVL_EXPORT int kvl_seq_decode(struct kvl_seq *const *seqs, uint32_t nseq,
			      uint32_t layer, uint32_t q_heads,
			      const float *q, float scale, float *out)
{
	return seq_attn(seqs, nseq, layer, q_heads, 0, q, scale, out);
}

KVL_EXPORT int kvl_seq_attention(struct kvl_seq *const *seqs, uint32_t nseq,
				 uint32_t layer, uint32_t q_heads,
				 uint32_t n_new, const float *q, float scale,
				 float *out)
{
	if (!n_new)
		return -EINVAL;
	return seq_attn(seqs, nseq, layer, q_heads, n_new, q, scale, out);
}

KVL_EXPORT int kvl_seq_fork(struct kvl_seq *s, struct kvl_seq **child)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t tpb = tpb_of(s), full = s->len / tpb, i;
	struct kvl_seq *c;
	int r;

	ctx->call++;
	kvl_seq_touch(s);
	r = resident(s, KVL_POLICY_DEFAULT);
	if (r)
		return r;
	r = kvl_seq_create(ctx, s->layout, &c);
	if (r)
		return r;
	c->busy = ctx->call;
	r = kvl_seq_table_grow(c, s->nblocks ? s->nblocks : 1);
	if (r)
		goto err;
	for (i = 0; i < full; i++) {
		c->table[i] = s->table[i];
		ctx->refcnt[s->table[i]]++;
	}
	c->nblocks = full;
	/* The partial last block (and any spare) gets a private copy. */
	for (i = full; i < s->nblocks; i++) {
		uint32_t nb;

		r = kvl_need_blocks(ctx, 1, KVL_POLICY_DEFAULT);
		if (r)
			goto err;
		nb = ctx->cache[ctx->ncache - 1];
		r = kvl_copy_blocks(ctx, &s->table[i], &nb, 1);
		if (r)
			goto err;
		ctx->ncache--;
		ctx->refcnt[nb] = 1;
		c->table[c->nblocks++] = nb;
	}
	c->len = s->len;
	if (s->ntok_known) {
		c->tok = malloc(s->ntok_known * sizeof(*c->tok));
		if (!c->tok) {
			r = -ENOMEM;
			goto err;
		}
		memcpy(c->tok, s->tok, s->ntok_known * sizeof(*c->tok));
		c->ntok_known = c->tok_cap = s->ntok_known;
	}
	r = kvl_edit_fork(s, c);
	if (r)
		goto err;
	*child = c;
	return 0;
err:
	kvl_seq_free(c);
	return r;
}

/* ---- moving a sequence between tiers ------------------------------------ */

/* A top block only this sequence uses, in our lease (not a prefix-cache
 * block, which is the daemon's). */
static bool own(const struct kvl_seq *s, uint32_t i)
{
	uint32_t b = s->table[i];

	return !s->where[i] && s->ctx->refcnt[b] == 1 &&
	       !kvl_pfx_cached(s->ctx, b);
}

uint32_t kvl_seq_own_top(const struct kvl_seq *s)
{
	uint32_t i, n = 0;

	if (s->state != KVL_SEQ_RESIDENT)
		return 0;
	for (i = 0; i < s->nblocks; i++)
		n += own(s, i);
	return n;
}

int kvl_seq_move_out(struct kvl_seq *s, uint32_t tier)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t m = kvl_seq_own_top(s), *idx, *top, *low, i, k = 0;
	uint64_t t0 = kvl_now_ns(), copy_ns = 0;
	int r;

	if (!tier)
		return -EINVAL;
	if (s->state == KVL_SEQ_SWAPPED)
		return 0;
	if (s->state != KVL_SEQ_RESIDENT)
		return -ENODATA;
	if (!m)
		return 0;
	r = kvl_tier_join(ctx, tier);
	if (r)
		return r;
	idx = malloc(3 * (size_t)m * sizeof(uint32_t));
	if (!idx)
		return -ENOMEM;
	top = idx + m;
	low = top + m;
	for (i = 0; i < s->nblocks; i++)
		if (own(s, i)) {
			idx[k] = i;
			top[k++] = s->table[i];
		}
	/* lease below, copy, release above */
	r = kvl_tier_lease_room(ctx, tier, m, low);
	if (r >= 0 && (uint32_t)r != m) {
		kvl_tier_release(ctx, tier, low, (uint32_t)r);
		r = -EAGAIN;
	}
	if (r < 0)
		goto out;
	r = kvl_swap_sync(ctx, 0, top, tier, low, m, &copy_ns);
	if (r) {
		/* after a daemon restart s was reset (and, in-process, the
		 * lease below is gone) */
		if (r != -ESTALE || ctx->mode == KVL_MODE_MODULE)
			kvl_tier_release(ctx, tier, low, m);
		goto out;
	}
	for (k = 0; k < m; k++) {
		s->table[idx[k]] = low[k];
		s->where[idx[k]] = (uint8_t)tier;
		ctx->refcnt[top[k]] = 0;
		kvl_edit_block_freed(ctx, top[k]);
		cache_push(ctx, top[k]);
	}
	s->nswapped = m;
	s->tier = tier;
	s->state = KVL_SEQ_SWAPPED;
	s->swaps_out++;
	ctx->pst.swaps_out++;
	ctx->pst.blocks_out += m;
	ctx->pst.bytes_out += (uint64_t)m * ctx->block_bytes;
	ctx->pst.copy_out_ns += copy_ns;
	ctx->pst.swap_out_ns += kvl_now_ns() - t0;
out:
	free(idx);
	return r;
}

int kvl_seq_move_in(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t n = s->nswapped, tier = s->tier, *idx, *top, *low, i, k = 0;
	uint64_t t0 = kvl_now_ns(), copy_ns = 0;
	int r;

	if (s->state != KVL_SEQ_SWAPPED)
		return 0;
	if (ctx->ncache < n)
		return -ENOSPC;
	idx = malloc(3 * (size_t)n * sizeof(uint32_t));
	if (!idx)
		return -ENOMEM;
	top = idx + n;
	low = top + n;
	for (i = 0; i < s->nblocks && k < n; i++)
		if (s->where[i]) {
			idx[k] = i;
			low[k] = s->table[i];
			top[k] = ctx->cache[ctx->ncache - 1 - k];
			k++;
		}
	r = kvl_swap_sync(ctx, tier, low, 0, top, n, &copy_ns);
	if (r)
		goto out;	/* still swapped (or reset by a restart) */
	ctx->ncache -= n;
	for (k = 0; k < n; k++) {
		s->table[idx[k]] = top[k];
		s->where[idx[k]] = 0;
		ctx->refcnt[top[k]] = 1;
	}
	kvl_edit_moved_in(s, top, n);
	s->nswapped = 0;
	s->state = KVL_SEQ_RESIDENT;
	if (kvl_tier_release(ctx, tier, low, n) < 0)
		kvl_logf(ctx, KVL_LOG_WARNING, "cannot release %u blocks of "
			 "tier %u", n, tier);
	s->swaps_in++;
	ctx->pst.swaps_in++;
	ctx->pst.blocks_in += n;
	ctx->pst.bytes_in += (uint64_t)n * ctx->block_bytes;
	ctx->pst.copy_in_ns += copy_ns;
	ctx->pst.swap_in_ns += kvl_now_ns() - t0;
out:
	free(idx);
	return r;
}

void kvl_seq_drop(struct kvl_seq *s)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t i;

	if (s->state == KVL_SEQ_DROPPED)
		return;
	release_lower(s);
	for (i = 0; i < s->nblocks; i++)
		if (!s->where[i])
			kvl_seq_put_block(ctx, s->table[i]);
	if (s->where)
		memset(s->where, 0, s->cap);
	kvl_seq_tokens_truncate(s, 0);
	s->dropped_len = s->len;
	ctx->pst.drops++;
	ctx->pst.dropped_tokens += s->len;
	s->nblocks = 0;
	s->len = 0;
	s->state = KVL_SEQ_DROPPED;
	s->drops++;
	kvl_policy_listed(s);
}

KVL_EXPORT int kvl_seq_swap_in(struct kvl_seq *s, uint32_t policy)
{
	struct kvl_ctx *ctx = s->ctx;
	int r;

	if (s->state == KVL_SEQ_DROPPED)
		return -ENODATA;
	if (s->state != KVL_SEQ_SWAPPED)
		return 0;
	if (s->busy != ctx->call) {
		ctx->call++;
		kvl_seq_touch(s);
	}
	r = kvl_need_blocks(ctx, s->nswapped, policy);
	if (!r)
		r = kvl_seq_move_in(s);
	kvl_policy_report(ctx);
	return r;
}

KVL_EXPORT int kvl_seq_info(const struct kvl_seq *s, struct kvl_seq_info *o)
{
	memset(o, 0, sizeof(*o));
	o->state = s->state;
	o->tier = s->state == KVL_SEQ_SWAPPED ? s->tier : 0;
	o->len = s->len;
	o->dropped_len = s->state == KVL_SEQ_DROPPED ? s->dropped_len : 0;
	o->nblocks = s->nblocks;
	o->swapped_blocks = s->nswapped;
	o->last_use = s->last_use;
	o->swaps_out = s->swaps_out;
	o->swaps_in = s->swaps_in;
	o->drops = s->drops;
	return 0;
}

/* ---- recovery ---------------------------------------------------------- */

/* Sequence @s lost its contents (DROPPED: its caller recomputes it); its
 * top-tier blocks go back, cached ones only locally (the daemon dropped
 * this context's references with the connection). */
static void seq_reset(struct kvl_seq *s, bool lease_lost)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t i;

	/* lower tiers lost their contents too; with the module their
	 * leases survived: give the blocks back */
	if (!lease_lost)
		release_lower(s);
	s->nswapped = 0;
	if (!lease_lost)
		for (i = 0; i < s->nblocks; i++) {
			uint32_t b = s->table[i];

			if (s->where[i])
				continue;
			/* the daemon dropped our references */
			if (kvl_pfx_cached(ctx, b))
				ctx->refcnt[b]--;
			else
				kvl_seq_put_block(ctx, b);
		}
	if (s->where)
		memset(s->where, 0, s->cap);
	if (s->len || s->state == KVL_SEQ_SWAPPED) {
		s->dropped_len = s->len;
		s->state = KVL_SEQ_DROPPED;
		kvl_policy_listed(s);
	}
	s->nblocks = 0;
	s->len = 0;
	s->ntok_known = 0;
	kvl_edit_reset(s);
}

void kvl_seq_reset(struct kvl_seq *s)
{
	seq_reset(s, false);
}

void kvl_seq_epoch_reset(struct kvl_ctx *ctx, bool lease_lost)
{
	struct kvl_seq *s;

	for (s = ctx->seqs; s; s = s->next)
		seq_reset(s, lease_lost);
	kvl_prefix_forget(ctx, false);
	if (lease_lost) {
		ctx->ncache = 0;
		if (ctx->refcnt)
			memset(ctx->refcnt, 0,
			       ctx->capacity * sizeof(*ctx->refcnt));
		if (ctx->merged)
			memset(ctx->merged, 0, ctx->merged_cap);
	}
}

/* RELEASE of blocks[0..n), no reconnect (we are in one). */
static int release_now(struct kvl_ctx *ctx, const uint32_t *blocks,
		       uint32_t n)
{
	size_t len = sizeof(struct kvp_release) + (size_t)n * sizeof(*blocks);
	struct kvp_release *rl = malloc(len);
	int r;

	if (!rl)
		return -ENOMEM;
	rl->count = n;
	rl->flags = 0;
	memcpy(rl + 1, blocks, (size_t)n * sizeof(*blocks));
	r = kvl_rpc_fd(ctx, KVP_OP_RELEASE, rl, len, -1, NULL, 0, NULL);
	free(rl);
	return r;
}

/*
 * A restarted in-process daemon gave the lease back (KVP_HELLO_CLAIM),
 * its blocks' contents kept.  What it holds can differ from what we know
 * of only by the request in flight when it died (@op): a grant whose reply
 * never came (blocks held that we do not know: released here, the request
 * is sent again), or a release it did (blocks we still list in the cache
 * that it no longer holds: the request, sent again, finds them gone and
 * is done, kvl.c).  Anything else means the daemon's record and ours
 * disagree: every sequence is reset and the lease emptied.  The lower
 * tiers' leases are not kept in-process: swapped sequences are reset.
 */
int kvl_seq_claimed(struct kvl_ctx *ctx, uint16_t op)
{
	uint32_t *buf = NULL, *extra = NULL, from = 0, i, nextra = 0;
	uint8_t *st = NULL;	/* per block: 1 held, 2 cached, 4 in a seq */
	struct kvl_seq *s;
	bool bad = false;
	int r = 0;

	st = calloc(ctx->capacity ? ctx->capacity : 1, 1);
	buf = malloc(KVP_IO_MAX_BLOCKS * sizeof(*buf));
	extra = malloc(KVP_IO_MAX_BLOCKS * sizeof(*extra));
	if (!st || !buf || !extra) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		struct kvp_held h = { .from = from, .count = KVP_IO_MAX_BLOCKS };
		size_t got = 0;
		int n = kvl_rpc_fd(ctx, KVP_OP_HELD, &h, sizeof(h), -1, buf,
				   KVP_IO_MAX_BLOCKS * sizeof(*buf), &got);

		if (n < 0) {
			r = n;
			goto out;
		}
		for (i = 0; i < (uint32_t)n && i < got / sizeof(*buf); i++)
			if (buf[i] < ctx->capacity)
				st[buf[i]] |= 1;
		if (n < KVP_IO_MAX_BLOCKS)
			break;
		from = buf[n - 1] + 1;
	}
	for (i = 0; i < ctx->ncache; i++)
		st[ctx->cache[i]] |= 2;
	for (s = ctx->seqs; s; s = s->next) {
		if (s->nswapped || s->state == KVL_SEQ_SWAPPED) {
			s->nswapped = 0;	/* its tier lease is gone */
			seq_reset(s, false);
			r = -ESTALE;
			continue;
		}
		for (i = 0; i < s->nblocks; i++)
			if (!kvl_pfx_cached(ctx, s->table[i]))
				st[s->table[i]] |= 4;
	}
	for (i = 0; i < ctx->capacity && !bad; i++) {
		if (st[i] == 1) {
			/* granted, the reply lost: give it back */
			extra[nextra++] = i;
			if (nextra == KVP_IO_MAX_BLOCKS) {
				bad = release_now(ctx, extra, nextra) < 0;
				nextra = 0;
			}
		} else if ((st[i] & 4) && !(st[i] & 1)) {
			bad = true;	/* a block of a sequence is not ours */
		} else if (st[i] == 2 && op != KVP_OP_RELEASE) {
			bad = true;	/* cached, not held, no release sent */
		}
	}
	if (!bad && nextra)
		bad = release_now(ctx, extra, nextra) < 0;
	if (bad) {
		struct kvp_release ra = { .flags = KVPOOL_RELEASE_ALL };

		kvl_logf(ctx, KVL_LOG_WARNING, "kvpoold gave the lease back "
			 "with other blocks than ours: every sequence is reset");
		kvl_rpc_fd(ctx, KVP_OP_RELEASE, &ra, sizeof(ra), -1, NULL, 0,
			   NULL);
		kvl_seq_epoch_reset(ctx, true);
		r = -ESTALE;
	} else if (r == -ESTALE) {
		kvl_logf(ctx, KVL_LOG_WARNING, "kvpoold restarted: swapped "
			 "sequences are reset (the lower tiers kept nothing)");
	}
out:
	free(st);
	free(buf);
	free(extra);
	return r;
}

/* After RELEASE_ALL of the top lease: lower-tier blocks go too. */
void kvl_seq_forget_all(struct kvl_ctx *ctx)
{
	struct kvl_seq *s;

	for (s = ctx->seqs; s; s = s->next)
		release_lower(s);
	kvl_seq_epoch_reset(ctx, true);
}

/* ---- for kvl_edit.c ----------------------------------------------------- */

int kvl_seq_cow(struct kvl_seq *s, uint32_t i)
{
	return cow(s, i);
}
