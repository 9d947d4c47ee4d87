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
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_internal.h"

int kvl_release_internal(struct kvl_ctx *ctx, const uint32_t *blocks,
			 uint32_t count);

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

/* Make sure the cache holds at least `need` blocks. */
static int cache_fill(struct kvl_ctx *ctx, uint32_t need)
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
		r = kvl_lease(ctx, want, KVL_LEASE_PARTIAL, ctx->timeout_ns,
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
			r = kvl_lease(ctx, want, 0, ctx->timeout_ns, buf);
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
static void cache_trim(struct kvl_ctx *ctx, uint32_t keep)
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

	cache_trim(ctx, 0);
	return (int)(n - ctx->ncache);
}

static uint32_t tpb_of(const struct kvl_seq *s)
{
	return s->ctx->layouts[s->layout].l.tokens_per_block;
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
	s->next = ctx->seqs;
	ctx->seqs = s;
	*out = s;
	return 0;
}

void kvl_seq_put_block(struct kvl_ctx *ctx, uint32_t b)
{
	if (!ctx->refcnt[b] || --ctx->refcnt[b])
		return;
	if (kvl_pfx_cached(ctx, b))
		kvl_prefix_unref(ctx, b);
	else
		cache_push(ctx, b);
}

KVL_EXPORT void kvl_seq_free(struct kvl_seq *s)
{
	struct kvl_ctx *ctx;
	struct kvl_seq **pp;
	uint32_t i;

	if (!s)
		return;
	ctx = s->ctx;
	for (pp = &ctx->seqs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	for (i = 0; i < s->nblocks; i++)
		kvl_seq_put_block(ctx, s->table[i]);
	free(s->table);
	free(s->tok);
	free(s);
	kvl_prefix_unref_flush(ctx);
	if (ctx->sock >= 0 || ctx->mode == KVL_MODE_MODULE)
		cache_trim(ctx, 2 * ctx->lease_batch);
}

int kvl_seq_table_grow(struct kvl_seq *s, uint32_t n)
{
	if (n > s->cap) {
		uint32_t cap = s->cap ? s->cap : 8;
		uint32_t *t;

		while (cap < n)
			cap *= 2;
		t = realloc(s->table, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->table = t;
		s->cap = cap;
	}
	return 0;
}

KVL_EXPORT int kvl_seq_append(struct kvl_seq *s, uint32_t ntok)
{
	struct kvl_ctx *ctx = s->ctx;
	uint32_t tpb = tpb_of(s);
	uint64_t len = (uint64_t)s->len + ntok;
	uint32_t need;
	int r;

	if (len > INT32_MAX)
		return -EOVERFLOW;
	need = (uint32_t)((len + tpb - 1) / tpb);
	if (need > s->nblocks) {
		r = kvl_seq_table_grow(s, need);
		if (r)
			return r;
		r = cache_fill(ctx, need - s->nblocks);
		if (r)
			return r;
		while (s->nblocks < need) {
			uint32_t b = ctx->cache[--ctx->ncache];

			ctx->refcnt[b] = 1;
			s->table[s->nblocks++] = b;
		}
	}
	s->len = (uint32_t)len;
	return (int)s->len;
}

KVL_EXPORT int kvl_seq_truncate(struct kvl_seq *s, uint32_t len)
{
	uint32_t tpb = tpb_of(s), keep;

	if (len > s->len)
		return -EINVAL;
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
	r = cache_fill(ctx, 1);
	if (r)
		return r;
	nb = ctx->cache[ctx->ncache - 1];
	r = kvl_copy_blocks(ctx, &old, &nb, 1);
	if (r)
		return r;
	ctx->ncache--;
	ctx->refcnt[nb] = 1;
	kvl_seq_put_block(ctx, old);	/* the last use of a cached block */
	s->table[i] = nb;
	return 0;
}

static int positions(struct kvl_seq *s, uint32_t pos, uint32_t ntok,
		     bool write, uint32_t **blocks, uint32_t **slots)
{
	uint32_t tpb = tpb_of(s), t, i;
	int r;

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
	uint32_t *b, *sl;
	int r = positions(s, pos, ntok, true, &b, &sl);

	kvl_prefix_unref_flush(s->ctx);
	if (r)
		return r;
	r = kvl_write_kv(s->ctx, s->layout, layer, ntok, b, sl, k, v);
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
	for (i = 0; i < nseq; i++) {
		if (seqs[i]->ctx != ctx || seqs[i]->layout != layout)
			return -EINVAL;
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

	r = kvl_seq_create(ctx, s->layout, &c);
	if (r)
		return r;
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

		r = cache_fill(ctx, 1);
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
	*child = c;
	return 0;
err:
	kvl_seq_free(c);
	return r;
}

/* ---- recovery ---------------------------------------------------------- */

void kvl_seq_epoch_reset(struct kvl_ctx *ctx, bool lease_lost)
{
	struct kvl_seq *s;
	uint32_t i;

	for (s = ctx->seqs; s; s = s->next) {
		if (!lease_lost)
			for (i = 0; i < s->nblocks; i++) {
				uint32_t b = s->table[i];

				/* the daemon dropped our references */
				if (kvl_pfx_cached(ctx, b))
					ctx->refcnt[b]--;
				else
					kvl_seq_put_block(ctx, b);
			}
		s->nblocks = 0;
		s->len = 0;
		s->ntok_known = 0;
	}
	kvl_prefix_forget(ctx, false);
	if (lease_lost) {
		ctx->ncache = 0;
		if (ctx->refcnt)
			memset(ctx->refcnt, 0,
			       ctx->capacity * sizeof(*ctx->refcnt));
	}
}

void kvl_seq_forget_all(struct kvl_ctx *ctx)
{
	kvl_seq_epoch_reset(ctx, true);
}
