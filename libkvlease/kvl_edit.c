// SPDX-License-Identifier: MIT
/*
 * kvl_edit.c - editing sequences in place: the RoPE data of a layout,
 * positions apart from slots, splice, compact and score (the daemon does
 * the work: KVP_OP_SPLICE, _COMPACT, _SCORE), and token-wise compression,
 * a policy built on them: keep the attention sinks, a recent window and
 * the highest-scoring tokens up to a budget.  Documentation/edits.rst.
 *
 * Positions: a sequence that was never edited has position = slot and a
 * next position equal to its length (no array is kept).  A compaction
 * leaves gaps, so from then on every slot's position is kept.
 *
 * Tiers: an edit works on the top pool only.  A swapped-out sequence is
 * refused (-EBUSY: kvl_seq_swap_in() first), a dropped one too
 * (-ENODATA, as every call); kvl_seq_score() is a read and brings a
 * swapped sequence back, as kvl_seq_attention() does.  The compression
 * step of the pressure policies' relief list (kvl_policy.c) runs
 * compress() on resident sequences that the current call does not use.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_internal.h"

#define DEFAULT_SINKS	4
#define DEFAULT_WINDOW	32

struct kvl_seq_edit {
	uint32_t *pos;		/* per slot; NULL: pos = slot, next = len */
	uint32_t pos_cap;
	uint32_t next_pos;	/* when pos != NULL */
	float *imp;		/* per slot accumulated score; NULL: none */
	uint32_t imp_cap;
	struct kvl_compress_policy cp;
	bool has_cp;
	bool compressing;
};

static struct kvl_seq_edit *edit_of(struct kvl_seq *s)
{
	if (!s->edit)
		s->edit = calloc(1, sizeof(*s->edit));
	return s->edit;
}

static int grow_u32(uint32_t **a, uint32_t *cap, uint32_t n)
{
	uint32_t c = *cap ? *cap : 64, *p;

	if (n <= *cap)
		return 0;
	while (c < n)
		c *= 2;
	p = realloc(*a, sizeof(*p) * c);
	if (!p)
		return -ENOMEM;
	*a = p;
	*cap = c;
	return 0;
}

static int grow_f32(float **a, uint32_t *cap, uint32_t n)
{
	uint32_t c = *cap ? *cap : 64;
	float *p;

	if (n <= *cap)
		return 0;
	while (c < n)
		c *= 2;
	p = realloc(*a, sizeof(*p) * c);
	if (!p)
		return -ENOMEM;
	*a = p;
	*cap = c;
	return 0;
}

/* Keep every slot's position from now on. */
static int pos_materialise(struct kvl_seq *s, uint32_t room)
{
	struct kvl_seq_edit *e = edit_of(s);
	uint32_t i;
	int r;

	if (!e)
		return -ENOMEM;
	if (e->pos)
		return grow_u32(&e->pos, &e->pos_cap, room);
	r = grow_u32(&e->pos, &e->pos_cap, room > s->len ? room : s->len);
	if (r)
		return r;
	for (i = 0; i < s->len; i++)
		e->pos[i] = i;
	e->next_pos = s->len;
	return 0;
}

static uint32_t pos_at(const struct kvl_seq *s, uint32_t slot)
{
	return s->edit && s->edit->pos ? s->edit->pos[slot] : slot;
}

/* A public edit call starts: it uses s; s must be in the top pool. */
static int edit_begin(struct kvl_seq *s)
{
	s->ctx->call++;
	kvl_seq_touch(s);
	if (s->state == KVL_SEQ_DROPPED)
		return -ENODATA;
	if (s->state != KVL_SEQ_RESIDENT)
		return -EBUSY;
	return 0;
}

KVL_EXPORT uint32_t kvl_seq_next_pos(const struct kvl_seq *s)
{
	return s->edit && s->edit->pos ? s->edit->next_pos : s->len;
}

KVL_EXPORT int kvl_seq_positions(const struct kvl_seq *s, uint32_t slot,
				 uint32_t n, uint32_t *pos)
{
	uint32_t i;

	if (n && !pos)
		return -EINVAL;
	if ((uint64_t)slot + n > s->len)
		return -ERANGE;
	for (i = 0; i < n; i++)
		pos[i] = pos_at(s, slot + i);
	return 0;
}

/* ---- blocks an edit moved tokens into ---------------------------------- */

static int mark_merged(struct kvl_ctx *ctx, uint32_t b)
{
	if (ctx->merged_cap != ctx->capacity) {
		uint8_t *m = calloc(ctx->capacity ? ctx->capacity : 1, 1);

		if (!m)
			return -ENOMEM;
		if (ctx->merged)
			memcpy(m, ctx->merged, ctx->merged_cap < ctx->capacity ?
			       ctx->merged_cap : ctx->capacity);
		free(ctx->merged);
		ctx->merged = m;
		ctx->merged_cap = ctx->capacity;
	}
	if (b < ctx->merged_cap)
		ctx->merged[b] = 1;
	return 0;
}

bool kvl_edit_block_merged(const struct kvl_ctx *ctx, uint32_t b)
{
	return ctx->merged && b < ctx->merged_cap && ctx->merged[b];
}

void kvl_edit_block_freed(struct kvl_ctx *ctx, uint32_t b)
{
	if (ctx->merged && b < ctx->merged_cap)
		ctx->merged[b] = 0;
}

void kvl_edit_block_copied(struct kvl_ctx *ctx, uint32_t from, uint32_t to)
{
	if (kvl_edit_block_merged(ctx, from))
		mark_merged(ctx, to);
}

/* ---- hooks of the sequence calls ----------------------------------------- */

static int compress(struct kvl_seq *s, uint32_t budget, bool trim);
static int compact(struct kvl_seq *s, const uint32_t *keep, uint32_t nkeep);

int kvl_edit_before_append(struct kvl_seq *s, uint32_t ntok)
{
	struct kvl_seq_edit *e = s->edit;
	int r;

	if (!e)
		return 0;
	if (e->has_cp && e->cp.max_tokens && !e->compressing &&
	    (uint64_t)s->len + ntok > e->cp.max_tokens) {
		uint32_t target = e->cp.budget;

		if (ntok > e->cp.max_tokens)
			return -E2BIG;
		if (!target || target > e->cp.max_tokens - ntok)
			target = e->cp.max_tokens - ntok;
		r = compress(s, target, true);
		if (r < 0)
			return r;
	}
	if (e->pos) {
		if ((uint64_t)e->next_pos + ntok > INT32_MAX)
			return -EOVERFLOW;
		r = grow_u32(&e->pos, &e->pos_cap, s->len + ntok);
		if (r)
			return r;
	}
	if (e->imp)
		return grow_f32(&e->imp, &e->imp_cap, s->len + ntok);
	return 0;
}

void kvl_edit_after_append(struct kvl_seq *s, uint32_t old_len)
{
	struct kvl_seq_edit *e = s->edit;
	uint32_t i;

	if (!e)
		return;
	for (i = old_len; i < s->len; i++) {
		if (e->pos)
			e->pos[i] = e->next_pos++;
		if (e->imp)
			e->imp[i] = 0.0f;
	}
}

/* Truncating gives the dropped slots' positions back: the next position
 * becomes the first dropped slot's. */
void kvl_edit_before_truncate(struct kvl_seq *s, uint32_t len)
{
	if (s->edit && s->edit->pos && len < s->len)
		s->edit->next_pos = s->edit->pos[len];
}

int kvl_edit_fork(struct kvl_seq *p, struct kvl_seq *c)
{
	struct kvl_seq_edit *pe = p->edit, *ce;

	if (!pe)
		return 0;
	ce = edit_of(c);
	if (!ce)
		return -ENOMEM;
	ce->cp = pe->cp;
	ce->has_cp = pe->has_cp;
	ce->next_pos = pe->next_pos;
	if (pe->pos) {
		if (grow_u32(&ce->pos, &ce->pos_cap, p->len ? p->len : 1))
			return -ENOMEM;
		memcpy(ce->pos, pe->pos, sizeof(uint32_t) * p->len);
	}
	if (pe->imp) {
		if (grow_f32(&ce->imp, &ce->imp_cap, p->len ? p->len : 1))
			return -ENOMEM;
		memcpy(ce->imp, pe->imp, sizeof(float) * p->len);
	}
	return 0;
}

void kvl_edit_free(struct kvl_seq *s)
{
	if (!s->edit)
		return;
	free(s->edit->pos);
	free(s->edit->imp);
	free(s->edit);
	s->edit = NULL;
}

/* The sequence was emptied (daemon restart): positions start at 0. */
void kvl_edit_reset(struct kvl_seq *s)
{
	struct kvl_seq_edit *e = s->edit;

	if (!e)
		return;
	free(e->pos);
	free(e->imp);
	e->pos = NULL;
	e->imp = NULL;
	e->pos_cap = e->imp_cap = 0;
	e->next_pos = 0;
}

/* ---- RoPE data of a layout ----------------------------------------------- */

KVL_EXPORT int kvl_layout_set_rope(struct kvl_ctx *ctx, int layout,
				   const struct kvl_rope *rope)
{
	struct kvl_layout_slot *sl;
	struct kvp_layout_rope q;
	int r;

	if (!rope || layout < 0 || (unsigned int)layout >= ctx->nlayouts ||
	    rope->reserved[0] || rope->reserved[1] ||
	    rope->nfreq > KVP_ROPE_MAX_FREQ || (rope->nfreq && !rope->inv_freq))
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	sl = &ctx->layouts[layout];
	memset(&q, 0, sizeof(q));
	q.layout_id = sl->id;
	q.style = rope->style;
	q.rotary_dims = rope->rotary_dims;
	q.nfreq = rope->nfreq;
	q.base = rope->base;
	if (rope->nfreq)
		memcpy(q.inv_freq, rope->inv_freq, sizeof(float) * rope->nfreq);
	r = kvl_rpc(ctx, KVP_OP_LAYOUT_ROPE, &q, sizeof(q), NULL, 0, NULL);
	if (r < 0)
		return r;
	sl->rope = q;
	sl->has_rope = rope->style != KVL_ROPE_NONE;
	return 0;
}

/* ---- splice -------------------------------------------------------------- */

static uint32_t tpb_of(const struct kvl_seq *s)
{
	return s->ctx->layouts[s->layout].l.tokens_per_block;
}

/* Private copies of table entries [from, to) before they are rewritten. */
static int cow_range(struct kvl_seq *s, uint32_t from, uint32_t to)
{
	uint32_t i;
	int r;

	for (i = from; i < to && i < s->nblocks; i++) {
		r = kvl_seq_cow(s, i);
		if (r)
			return r;
	}
	return 0;
}

KVL_EXPORT int kvl_seq_splice(struct kvl_seq *s, uint32_t at, uint32_t ndel,
			      uint32_t nins)
{
	struct kvl_ctx *ctx = s->ctx;
	struct kvl_seq_edit *e;
	uint32_t T = tpb_of(s), len = s->len, old_nb = s->nblocks, need, nb;
	uint32_t i, first, end;
	uint64_t used = 0, new_len, new_next;
	int64_t p0, pt, delta, shift;
	struct kvp_splice q;
	int r;

	r = edit_begin(s);
	if (r)
		return r;
	if (at > len || ndel > len - at)
		return -ERANGE;
	new_len = (uint64_t)len - ndel + nins;
	if (new_len > INT32_MAX)
		return -EOVERFLOW;
	if (!ndel && !nins)
		return (int)len;
	p0 = at < len ? pos_at(s, at) : kvl_seq_next_pos(s);
	pt = at + ndel < len ? pos_at(s, at + ndel) : kvl_seq_next_pos(s);
	delta = p0 + nins - pt;
	shift = (int64_t)nins - ndel;
	new_next = (uint64_t)((int64_t)kvl_seq_next_pos(s) + delta);
	if (new_next > INT32_MAX)
		return -EOVERFLOW;
	if (delta && at + ndel < len && !ctx->layouts[s->layout].has_rope)
		return -ENODATA;
	/* room: positions (when kept), scores, blocks */
	e = s->edit;
	if (e && e->pos && (r = grow_u32(&e->pos, &e->pos_cap, new_len)))
		return r;
	if (e && e->imp && (r = grow_f32(&e->imp, &e->imp_cap, new_len)))
		return r;
	need = (uint32_t)(((len > new_len ? len : new_len) + T - 1) / T);
	r = kvl_seq_table_grow(s, need);
	if (!r && need > old_nb)
		r = kvl_need_blocks(ctx, need - old_nb, KVL_POLICY_DEFAULT);
	if (r)
		return r;
	first = at / T;
	end = (uint32_t)((shift == 0 && !delta ? at + nins : new_len) + T - 1) /
	      T;
	r = cow_range(s, first, end);
	if (r)
		return r;
	while (s->nblocks < need) {
		uint32_t b = ctx->cache[--ctx->ncache];

		ctx->refcnt[b] = 1;
		s->where[s->nblocks] = 0;
		s->table[s->nblocks++] = b;
	}
	memset(&q, 0, sizeof(q));
	q.layout_id = ctx->layouts[s->layout].id;
	q.nblocks = need;
	q.len = len;
	q.at = at;
	q.ndel = ndel;
	q.nins = nins;
	q.delta = delta;
	q.off_table = kvl_region_put(ctx, &used, s->table, need * 4ULL);
	if (used > ctx->region_bytes)
		r = -E2BIG;
	else
		r = kvl_rpc(ctx, KVP_OP_SPLICE, &q, sizeof(q), NULL, 0, NULL);
	if (r == -ESTALE)
		return r;	/* the sequence was emptied */
	nb = r ? old_nb : (uint32_t)((new_len + T - 1) / T);
	while (s->nblocks > nb)
		kvl_seq_put_block(ctx, s->table[--s->nblocks]);
	if (r < 0) {
		kvl_prefix_unref_flush(ctx);
		return r;
	}
	/* positions and scores follow the slots */
	e = s->edit;
	if (e && e->pos) {
		memmove(e->pos + at + nins, e->pos + at + ndel,
			sizeof(uint32_t) * (len - at - ndel));
		for (i = 0; i < nins; i++)
			e->pos[at + i] = (uint32_t)(p0 + i);
		for (i = at + nins; i < new_len; i++)
			e->pos[i] = (uint32_t)(e->pos[i] + delta);
		e->next_pos = (uint32_t)new_next;
	}
	if (e && e->imp) {
		memmove(e->imp + at + nins, e->imp + at + ndel,
			sizeof(float) * (len - at - ndel));
		for (i = 0; i < nins; i++)
			e->imp[at + i] = 0.0f;
	}
	s->len = (uint32_t)new_len;
	/* token ids are known up to the edit only (the prefix cache keys
	 * blocks by them: the edited ones must not be published) */
	kvl_seq_tokens_truncate(s, at);
	for (i = first; i < s->nblocks; i++)
		if (mark_merged(ctx, s->table[i]))
			break;
	kvl_prefix_unref_flush(ctx);
	return (int)s->len;
}

/* ---- compact ------------------------------------------------------------- */

KVL_EXPORT int kvl_seq_compact(struct kvl_seq *s, const uint32_t *keep,
			       uint32_t nkeep)
{
	int r = edit_begin(s);

	return r ? r : compact(s, keep, nkeep);
}

/* The work of kvl_seq_compact(), without starting a call: compression
 * runs it inside an append or a relief step. */
static int compact(struct kvl_seq *s, const uint32_t *keep, uint32_t nkeep)
{
	struct kvl_ctx *ctx = s->ctx;
	struct kvl_seq_edit *e;
	uint32_t T = tpb_of(s), len = s->len, i, f, nb;
	uint64_t used = 0;
	struct kvp_compact q;
	int r;

	if (nkeep > len || (nkeep && !keep))
		return -EINVAL;
	for (i = 0; i < nkeep; i++)
		if (keep[i] >= len || (i && keep[i] <= keep[i - 1]))
			return -EINVAL;
	if (nkeep == len)
		return (int)len;	/* every slot, in place */
	for (f = 0; f < nkeep && keep[f] == f; f++)
		;
	/* positions: a gap appears unless the kept slots are a prefix and
	 * the next position is that of the first dropped slot */
	r = pos_materialise(s, len);
	if (r)
		return r;
	r = cow_range(s, f / T, (nkeep + T - 1) / T);
	if (r)
		return r;
	memset(&q, 0, sizeof(q));
	q.layout_id = ctx->layouts[s->layout].id;
	q.nblocks = s->nblocks;
	q.len = len;
	q.nkeep = nkeep;
	q.off_table = kvl_region_put(ctx, &used, s->table,
				     s->nblocks * 4ULL);
	q.off_keep = kvl_region_put(ctx, &used, keep, nkeep * 4ULL);
	if (used > ctx->region_bytes)
		return -E2BIG;
	r = kvl_rpc(ctx, KVP_OP_COMPACT, &q, sizeof(q), NULL, 0, NULL);
	if (r < 0)
		return r;
	e = s->edit;
	for (i = 0; i < nkeep; i++) {
		e->pos[i] = e->pos[keep[i]];
		if (e->imp)
			e->imp[i] = e->imp[keep[i]];
	}
	s->len = nkeep;
	kvl_seq_tokens_truncate(s, f);
	nb = (nkeep + T - 1) / T;
	while (s->nblocks > nb)
		kvl_seq_put_block(ctx, s->table[--s->nblocks]);
	for (i = f / T; i < s->nblocks; i++)
		if (mark_merged(ctx, s->table[i]))
			break;
	kvl_prefix_unref_flush(ctx);
	return (int)s->len;
}

/* ---- score --------------------------------------------------------------- */

KVL_EXPORT int kvl_seq_score(struct kvl_seq *s, uint32_t layer,
			     uint32_t q_heads, uint32_t n_q, const float *qv,
			     float scale, uint32_t flags, float *scores)
{
	struct kvl_ctx *ctx = s->ctx;
	const struct kvl_layout *l = &ctx->layouts[s->layout].l;
	struct kvl_seq_edit *e;
	uint64_t used = 0, qbytes;
	struct kvp_score q;
	const float *out;
	uint32_t j;
	int r;

	if ((flags & ~KVL_SCORE_FLAGS) || !n_q || !qv || !q_heads)
		return -EINVAL;
	ctx->call++;
	kvl_seq_touch(s);
	r = kvl_seq_swap_in(s, KVL_POLICY_DEFAULT);
	if (r)
		return r;
	if (!s->len)
		return 0;
	e = edit_of(s);
	if (!e)
		return -ENOMEM;
	if (!e->imp || (flags & KVL_SCORE_RESET)) {
		r = grow_f32(&e->imp, &e->imp_cap, s->len);
		if (r)
			return r;
		memset(e->imp, 0, sizeof(float) * s->len);
	}
	memset(&q, 0, sizeof(q));
	q.layout_id = ctx->layouts[s->layout].id;
	q.layer = layer;
	q.q_heads = q_heads;
	q.n_q = n_q;
	q.len = s->len;
	q.nblocks = s->nblocks;
	q.flags = ((flags & KVL_SCORE_MAX) ? KVP_SCORE_MAX : 0) |
		  ((flags & KVL_SCORE_CAUSAL) ? KVP_SCORE_CAUSAL : 0);
	q.scale = scale;
	qbytes = (uint64_t)n_q * q_heads * l->head_dim * sizeof(float);
	q.off_q = kvl_region_put(ctx, &used, qv, qbytes);
	q.off_table = kvl_region_put(ctx, &used, s->table, s->nblocks * 4ULL);
	q.off_out = kvl_region_put(ctx, &used, NULL, s->len * 4ULL);
	if (used > ctx->region_bytes)
		return -E2BIG;
	r = kvl_rpc(ctx, KVP_OP_SCORE, &q, sizeof(q), NULL, 0, NULL);
	if (r < 0)
		return r;
	out = (const float *)(ctx->region + q.off_out);
	for (j = 0; j < s->len; j++) {
		if (flags & KVL_SCORE_MAX)
			e->imp[j] = out[j] > e->imp[j] ? out[j] : e->imp[j];
		else
			e->imp[j] += out[j];
	}
	if (scores)
		memcpy(scores, out, sizeof(float) * s->len);
	return 0;
}

/* ---- compression ----------------------------------------------------------- */

static const float *sort_imp;

/* Higher score first; among equal scores the later slot first. */
static int by_importance(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	float x = sort_imp[a], y = sort_imp[b];

	if (x != y)
		return x > y ? -1 : 1;
	return a > b ? -1 : a < b;
}

static int by_slot(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

static int compress(struct kvl_seq *s, uint32_t budget, bool trim)
{
	struct kvl_seq_edit *e = s->edit;
	uint32_t sinks = DEFAULT_SINKS, window = DEFAULT_WINDOW, len = s->len;
	uint32_t *idx, n = 0, i, nmid, k;
	int r;

	if (e && e->has_cp) {
		sinks = e->cp.sinks;
		window = e->cp.window;
	}
	if ((uint64_t)sinks + window > budget)
		return -EINVAL;
	if (len <= budget)
		return (int)len;
	idx = malloc(sizeof(uint32_t) * len);
	if (!idx)
		return -ENOMEM;
	/* the middle, best first; without scores the most recent first */
	nmid = len - sinks - window;
	for (i = 0; i < nmid; i++)
		idx[i] = sinks + i;
	k = budget - sinks - window;
	if (e && e->imp) {
		sort_imp = e->imp;
		qsort(idx, nmid, sizeof(uint32_t), by_importance);
	} else {
		for (i = 0; i < k; i++)
			idx[i] = sinks + nmid - 1 - i;
	}
	/* keep: sinks, the chosen, the window, in slot order */
	n = k;
	for (i = 0; i < sinks; i++)
		idx[n++] = i;
	for (i = len - window; i < len; i++)
		idx[n++] = i;
	qsort(idx, n, sizeof(uint32_t), by_slot);
	if (e)
		e->compressing = true;
	r = compact(s, idx, n);
	if (s->edit)
		s->edit->compressing = false;
	free(idx);
	if (r >= 0 && trim)
		kvl_cache_trim(s->ctx, 2 * s->ctx->lease_batch);
	return r;
}

KVL_EXPORT int kvl_seq_compress(struct kvl_seq *s, uint32_t budget)
{
	int r = edit_begin(s);

	if (r)
		return r;
	if (!budget) {
		if (!s->edit || !s->edit->has_cp || !s->edit->cp.budget)
			return -EINVAL;
		budget = s->edit->cp.budget;
	}
	return compress(s, budget, true);
}

KVL_EXPORT int kvl_seq_set_compress(struct kvl_seq *s,
				    const struct kvl_compress_policy *p)
{
	struct kvl_seq_edit *e;

	if (!p) {
		if (s->edit)
			s->edit->has_cp = false;
		return 0;
	}
	if (p->reserved[0] || p->reserved[1])
		return -EINVAL;
	if (p->budget && (uint64_t)p->sinks + p->window > p->budget)
		return -EINVAL;
	if (p->max_tokens && ((uint64_t)p->sinks + p->window > p->max_tokens ||
			      (p->budget && p->budget > p->max_tokens)))
		return -EINVAL;
	e = edit_of(s);
	if (!e)
		return -ENOMEM;
	e->cp = *p;
	e->has_cp = true;
	return 0;
}

/*
 * Pressure: compress sequences that have a policy with a budget, the one
 * holding the most blocks first, until `blocks` blocks are back in the
 * library's cache (0: every such sequence).  Only resident sequences that
 * the current call does not use (s->busy != ctx->call): compressing the
 * one an append is growing would change the length it works from.  The
 * blocks stay leased (a growing sequence takes them; kvl_trim() gives
 * them to the ledger).
 */
int kvl_compress_relief(struct kvl_ctx *ctx, uint32_t blocks)
{
	uint32_t before = ctx->ncache, got;
	struct kvl_seq *s, *best;
	int r;

	for (;;) {
		if (ctx->ncache - before >= blocks && blocks)
			break;
		best = NULL;
		for (s = ctx->seqs; s; s = s->next) {
			struct kvl_seq_edit *e = s->edit;

			if (s->busy == ctx->call || s->state != KVL_SEQ_RESIDENT ||
			    !e || !e->has_cp || !e->cp.budget ||
			    s->len <= e->cp.budget || e->compressing)
				continue;
			if (!best || s->nblocks > best->nblocks)
				best = s;
		}
		if (!best)
			break;
		got = ctx->ncache;
		r = compress(best, best->edit->cp.budget, false);
		if (r < 0)
			return ctx->ncache > before ? (int)(ctx->ncache - before) :
			       r;
		ctx->pst.compressions++;
		ctx->pst.compressed_blocks += ctx->ncache - got;
	}
	return ctx->ncache > before ? (int)(ctx->ncache - before) : 0;
}

KVL_EXPORT int kvl_compress_reclaim(struct kvl_ctx *ctx, uint32_t blocks)
{
	ctx->call++;	/* no sequence of the caller's is in use */
	return kvl_compress_relief(ctx, blocks);
}

/* ---- tiers ----------------------------------------------------------------- */

/*
 * s's blocks moved up from a lower tier into top blocks top[0..n).  Which
 * of them an edit had moved tokens into is not kept below; once this
 * context has edited anything, every block that comes back is written
 * with KVP_KV_MERGE (harmless for a block whose slots all hold tokens,
 * as a block that was swapped does).
 */
void kvl_edit_moved_in(struct kvl_seq *s, const uint32_t *top, uint32_t n)
{
	uint32_t i;

	if (!s->ctx->merged)
		return;
	for (i = 0; i < n; i++)
		if (mark_merged(s->ctx, top[i]))
			break;
}
