// SPDX-License-Identifier: MIT
/*
 * ops.c - the data-plane ops of a connection on the top pool's memory:
 * WRITE_KV/READ_KV, ATTN (and the block tables that ATTN_DEV shares),
 * COPY and the edits (LAYOUT_ROPE, SPLICE, COMPACT, SCORE).  Each checks
 * the blocks it names through conn.h, holds the memory (the backing read
 * lock) only for the bounded work below and runs on the backend; the
 * connection server (server.c) dispatches to them.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "restart.h"
#include "core.h"
#include "ledger.h"
#include "conn.h"
#include "ops.h"

#define MAX_BATCH	4096
#define MAX_NTOK	65536
/*
 * Bounds of one request, so that no request can allocate or compute
 * without limit, nor hold the memory (and a due unmap) for long (-E2BIG
 * beyond them: split it): ATTN and ATTN_DEV copy at most MAX_ATTN_TABLE
 * block-table entries (batch x its longest sequence, 4 MiB, as many as
 * one LEASE_CHECK of the module takes) and do at most MAX_ATTN_WORK
 * multiply-adds of Q.K (as many again for P.V), counted as max(1, n_new)
 * x ctx x q_heads x head_dim per sequence; SCORE as n_q x len x q_heads x
 * head_dim; COPY moves at most MAX_COPY_BYTES, and SPLICE and COMPACT
 * rewrite at most as many bytes of blocks (and read no more slots than
 * they write).
 */
#define MAX_ATTN_TABLE	(1ULL << 20)
#define MAX_ATTN_WORK	(1ULL << 34)
#define MAX_COPY_BYTES	(4ULL << 30)

int kvd_op_kv(struct kvd_client *c, const struct kvp_kv *q, bool write)
{
	struct kvd *d = c->d;
	const struct kvk_layout *l = kvd_client_layout(c, q->layout_id);
	uint32_t *blocks = NULL, *slots = NULL, i;
	void *k = NULL, *v = NULL;
	uint64_t row;
	int r;

	if ((q->flags & ~KVP_KV_FLAGS) || (!write && q->flags))
		return -EINVAL;
	if (!l || q->layer >= l->layers || !q->ntok || q->ntok > MAX_NTOK)
		return -EINVAL;
	if (q->flags && !d->be->write_kv_flags)
		return -EOPNOTSUPP;
	row = (uint64_t)l->kv_heads * l->head_dim;
	r = kvd_client_region_u32(c, q->off_blocks, q->ntok, &blocks);
	if (!r)
		r = kvd_client_region_u32(c, q->off_slots, q->ntok, &slots);
	if (!r && (write || q->off_k != KVP_OFF_NONE))
		r = kvd_client_region_ptr(c, q->off_k, q->ntok, row * 4, &k);
	if (!r && (write || q->off_v != KVP_OFF_NONE))
		r = kvd_client_region_ptr(c, q->off_v, q->ntok, row * 4, &v);
	if (r)
		goto out;
	for (i = 0; i < q->ntok; i++)
		if (slots[i] >= l->tokens_per_block) {
			r = -EINVAL;
			goto out;
		}
	r = kvd_client_check_blocks(c, blocks, q->ntok, write);
	if (r)
		goto out;
	kvd_backing_rdlock(d->top);
	r = kvd_client_check_mapped(c, blocks, q->ntok);
	if (!r && write && q->flags)
		r = d->be->write_kv_flags(d, l, q->layer, q->ntok, blocks,
					  slots, k, v,
					  (q->flags & KVP_KV_MERGE) ?
					  KVK_WRITE_MERGE : 0);
	else if (!r)
		r = write ? d->be->write_kv(d, l, q->layer, q->ntok, blocks,
					    slots, k, v) :
			    d->be->read_kv(d, l, q->layer, q->ntok, blocks,
					   slots, k, v);
	kvd_backing_unlock(d->top);
out:
	free(blocks);
	free(slots);
	return r;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Does row[0..n) name a block twice?  A sequence never does (each block
 * holds its own positions), so refusing it bounds one sequence's blocks,
 * and the work, by the blocks the lease holds.  @tmp has room for n.
 */
static bool row_repeats(const uint32_t *row, uint32_t n, uint32_t *tmp)
{
	uint32_t i;

	memcpy(tmp, row, (size_t)n * sizeof(*tmp));
	qsort(tmp, n, sizeof(*tmp), cmp_u32);
	for (i = 1; i < n; i++)
		if (tmp[i] == tmp[i - 1])
			return true;
	return false;
}

/* a * b, saturating at UINT64_MAX. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Multiply-adds of Q.K for nq queries against ctx slots (MAX_ATTN_WORK). */
static uint64_t qk_work(uint64_t nq, uint64_t ctx, uint32_t q_heads,
			uint32_t head_dim)
{
	return mul_sat(mul_sat(nq, ctx), (uint64_t)q_heads * head_dim);
}

void kvd_attn_tables_free(struct kvd_attn_tables *t)
{
	free(t->tables);
	free(t->ctx);
	free(t->used);
	memset(t, 0, sizeof(*t));
}

int kvd_client_attn_tables(struct kvd_client *c, const struct kvk_layout *l,
			   uint32_t batch, uint32_t q_heads, uint32_t n_new,
			   uint64_t mbs, uint64_t off_tables, uint64_t off_ctx,
			   struct kvd_attn_tables *t)
{
	uint64_t nused = 0, stride = 1, work = 0;
	uint32_t *tmp = NULL, b;
	const uint32_t *rtab;
	void *tp;
	int r;

	memset(t, 0, sizeof(*t));
	r = kvd_client_region_ptr(c, off_tables, (uint64_t)batch * mbs, 4, &tp);
	if (!r)
		r = kvd_client_region_u32(c, off_ctx, batch, &t->ctx);
	if (r)
		goto out;
	rtab = tp;

	/*
	 * Sizes first, from the context lengths alone: the copied block
	 * table has one row per sequence as long as the longest one
	 * (MAX_ATTN_TABLE entries at most), and the work is bounded by
	 * MAX_ATTN_WORK; nothing large is allocated before these checks.
	 */
	for (b = 0; b < batch; b++) {
		uint64_t nb = ((uint64_t)t->ctx[b] + l->tokens_per_block - 1) /
			      l->tokens_per_block;
		uint64_t w = qk_work(n_new ? n_new : 1, t->ctx[b], q_heads,
				     l->head_dim);

		if (nb > mbs || t->ctx[b] < n_new) {
			r = -EINVAL;
			goto out;
		}
		if (nb > stride)
			stride = nb;
		nused += nb;
		work = work > UINT64_MAX - w ? UINT64_MAX : work + w;
	}
	if ((uint64_t)batch * stride > MAX_ATTN_TABLE ||
	    work > MAX_ATTN_WORK) {
		r = -E2BIG;
		goto out;
	}
	t->tables = malloc((size_t)batch * stride * sizeof(*t->tables));
	t->used = malloc((size_t)(nused ? nused : 1) * sizeof(*t->used));
	tmp = malloc((size_t)stride * sizeof(*tmp));
	if (!t->tables || !t->used || !tmp) {
		r = -ENOMEM;
		goto out;
	}
	/* Copy what the kernels read (the client may change its region). */
	nused = 0;
	for (b = 0; b < batch; b++) {
		uint32_t nb = (uint32_t)(((uint64_t)t->ctx[b] +
					  l->tokens_per_block - 1) /
					 l->tokens_per_block);
		uint32_t *row = t->tables + (size_t)b * stride;

		memcpy(row, rtab + (size_t)b * mbs, (size_t)nb * sizeof(*row));
		if (row_repeats(row, nb, tmp)) {
			r = -EINVAL;
			goto out;
		}
		memcpy(t->used + nused, row, (size_t)nb * sizeof(*row));
		nused += nb;
	}
	t->stride = (uint32_t)stride;
	t->nused = (uint32_t)nused;
out:
	free(tmp);
	if (r)
		kvd_attn_tables_free(t);
	return r;
}

int kvd_op_attn(struct kvd_client *c, const struct kvp_attn *a)
{
	struct kvd *d = c->d;
	const struct kvk_layout *l = kvd_client_layout(c, a->layout_id);
	struct kvd_attn_tables t;
	uint64_t qn, mbs = a->max_blocks_per_seq;
	void *q, *out;
	float scale;
	int r;

	if (a->pad || !l || a->layer >= l->layers || !a->batch ||
	    a->batch > MAX_BATCH || !a->q_heads || !mbs ||
	    mbs > d->top->capacity || a->n_new > MAX_NTOK)
		return -EINVAL;
	if (a->q_heads % l->kv_heads || a->q_heads / l->kv_heads > KVK_MAX_GQA)
		return -EINVAL;
	if (!isfinite(a->scale) || a->scale < 0)
		return -EINVAL;
	scale = a->scale ? a->scale : 1.0f / sqrtf((float)l->head_dim);
	qn = (uint64_t)a->batch * (a->n_new ? a->n_new : 1) * a->q_heads;
	r = kvd_client_region_ptr(c, a->off_q, qn, (uint64_t)l->head_dim * 4, &q);
	if (!r)
		r = kvd_client_region_ptr(c, a->off_out, qn, (uint64_t)l->head_dim * 4,
			       &out);
	if (r)
		return r;
	r = kvd_client_attn_tables(c, l, a->batch, a->q_heads, a->n_new, mbs,
				   a->off_tables, a->off_ctx, &t);
	if (r)
		return r;
	r = kvd_client_check_blocks(c, t.used, t.nused, false);
	if (r)
		goto out;
	kvd_backing_rdlock(d->top);
	r = kvd_client_check_mapped(c, t.used, t.nused);
	if (!r && !a->n_new) {
		struct kvk_decode_args da = {
			.layout = l, .layer = a->layer, .batch = a->batch,
			.q_heads = a->q_heads,
			.max_blocks_per_seq = t.stride,
			.q = q, .block_tables = t.tables, .ctx_lens = t.ctx,
			.scale = scale, .out = out,
		};
		r = d->be->decode(d, &da);
	} else if (!r) {
		struct kvk_prefill_args pa = {
			.layout = l, .layer = a->layer, .batch = a->batch,
			.q_heads = a->q_heads,
			.max_blocks_per_seq = t.stride,
			.n_new = a->n_new, .q = q, .block_tables = t.tables,
			.ctx_lens = t.ctx, .scale = scale, .out = out,
		};
		r = d->be->prefill(d, &pa);
	}
	kvd_backing_unlock(d->top);
out:
	kvd_attn_tables_free(&t);
	return r;
}

int kvd_op_copy(struct kvd_client *c, const struct kvp_copy *q)
{
	struct kvd *d = c->d;
	uint32_t *src = NULL, *dst = NULL;
	int r;

	if (q->pad || !q->n || q->n > KVP_IO_MAX_BLOCKS)
		return -EINVAL;
	if ((uint64_t)q->n * d->block_bytes > MAX_COPY_BYTES)
		return -E2BIG;
	r = kvd_client_region_u32(c, q->off_src, q->n, &src);
	if (!r)
		r = kvd_client_region_u32(c, q->off_dst, q->n, &dst);
	if (!r)
		r = kvd_client_check_blocks(c, src, q->n, false);
	if (!r)
		r = kvd_client_check_blocks(c, dst, q->n, true);
	if (r)
		goto out;
	kvd_backing_rdlock(d->top);
	r = kvd_client_check_mapped(c, src, q->n);
	if (!r)
		r = kvd_client_check_mapped(c, dst, q->n);
	if (!r)
		r = d->be->copy(d, src, dst, q->n);
	kvd_backing_unlock(d->top);
out:
	free(src);
	free(dst);
	return r;
}

/* ---- edits ------------------------------------------------------------ */

int kvd_op_layout_rope(struct kvd_client *c,
		       const struct kvp_layout_rope *q)
{
	struct kvk_layout *l;
	uint32_t rd, i;

	if (q->pad || q->reserved[0] || q->reserved[1])
		return -EINVAL;
	if (q->layout_id >= c->nlayouts)
		return -EINVAL;
	l = &c->layouts[q->layout_id];
	rd = q->rotary_dims ? q->rotary_dims : l->head_dim;
	if (q->style == KVP_ROPE_NONE) {
		if (q->rotary_dims || q->nfreq)
			return -EINVAL;
	} else if (q->nfreq && (q->nfreq != rd / 2 || rd % 2 ||
				rd > l->head_dim)) {
		return -EINVAL;
	}
	for (i = q->nfreq; i < KVP_ROPE_MAX_FREQ; i++)
		if (q->inv_freq[i] != 0.0f)
			return -EINVAL;
	return kvk_layout_set_rope(l, q->style, q->rotary_dims, q->base,
				   q->nfreq ? q->inv_freq : NULL);
}

/*
 * The table's first n entries, copied into *table: entries [d0, d1) are
 * rewritten by the op and must be the caller's own (-EPERM; a cached
 * block it references: -EROFS), the others are only read (own, or cached
 * blocks it references).
 */
static int edit_table(struct kvd_client *c, uint64_t off, uint32_t nblocks,
		      uint64_t n, uint64_t d0, uint64_t d1, uint32_t **table)
{
	int r;

	if (!nblocks || nblocks > c->d->top->capacity || n > nblocks)
		return -EINVAL;
	if (d1 > n)
		d1 = n;
	if (d0 > d1)
		d0 = d1;
	r = kvd_client_region_u32(c, off, nblocks, table);
	if (!r && d0)
		r = kvd_client_check_blocks(c, *table, (uint32_t)d0, false);
	if (!r && d1 > d0)
		r = kvd_client_check_blocks(c, *table + d0, (uint32_t)(d1 - d0),
					    true);
	if (!r && n > d1)
		r = kvd_client_check_blocks(c, *table + d1, (uint32_t)(n - d1),
					    false);
	return r;
}

int kvd_op_splice(struct kvd_client *c, const struct kvp_splice *q)
{
	struct kvd *d = c->d;
	const struct kvk_layout *l = kvd_client_layout(c, q->layout_id);
	uint32_t *table = NULL;
	uint64_t T, new_len, used, end;
	int r;

	if (q->reserved[0] || q->reserved[1] || !l)
		return -EINVAL;
	if (!d->be->splice)
		return -EOPNOTSUPP;
	T = l->tokens_per_block;
	if ((uint64_t)q->at + q->ndel > q->len)
		return -ERANGE;
	new_len = (uint64_t)q->len - q->ndel + q->nins;
	if (q->len > (uint64_t)q->nblocks * T ||
	    new_len > (uint64_t)q->nblocks * T)
		return -ERANGE;
	used = ((q->len > new_len ? q->len : new_len) + T - 1) / T;
	/* the blocks rewritten, as kvk_splice() plans them */
	end = (int64_t)q->nins - q->ndel == 0 &&
	      !(q->delta && (uint64_t)q->at + q->ndel < q->len) ?
	      (uint64_t)q->at + q->nins : new_len;
	/* at most MAX_COPY_BYTES of them (it reads no more slots) */
	if (mul_sat((end + T - 1) / T - q->at / T, d->top->block_bytes) >
	    MAX_COPY_BYTES)
		return -E2BIG;
	r = edit_table(c, q->off_table, q->nblocks, used, q->at / T,
		       end ? (end + T - 1) / T : 0, &table);
	if (!r) {
		struct kvk_splice_args a = {
			.layout = l, .block_table = table,
			.nblocks = q->nblocks, .len = q->len, .at = q->at,
			.ndel = q->ndel, .nins = q->nins, .delta = q->delta,
		};

		kvd_backing_rdlock(d->top);
		r = kvd_client_check_mapped(c, table, (uint32_t)used);
		if (!r) {
			kvd_restart_edit_begin(d);	/* not repeatable */
			r = d->be->splice(d, &a);
			kvd_restart_edit_end(d);
		}
		kvd_backing_unlock(d->top);
	}
	free(table);
	return r;
}

int kvd_op_compact(struct kvd_client *c, const struct kvp_compact *q)
{
	struct kvd *d = c->d;
	const struct kvk_layout *l = kvd_client_layout(c, q->layout_id);
	uint32_t *table = NULL, *keep = NULL, f = 0;
	uint64_t T, used;
	int r;

	if (q->reserved[0] || q->reserved[1] || !l || q->nkeep > q->len)
		return -EINVAL;
	if (!d->be->compact)
		return -EOPNOTSUPP;
	T = l->tokens_per_block;
	if (q->len > (uint64_t)q->nblocks * T)
		return -ERANGE;
	used = (q->len + T - 1) / T;
	r = kvd_client_region_u32(c, q->off_keep, q->nkeep, &keep);
	/* rewritten: from the block of the first slot that moves on */
	for (f = 0; !r && f < q->nkeep && keep[f] == f; f++)
		;
	/* at most MAX_COPY_BYTES of blocks rewritten, from there to the
	 * last kept slot's (it reads no more slots) */
	if (!r && mul_sat((q->nkeep + T - 1) / T - f / T,
			  d->top->block_bytes) > MAX_COPY_BYTES)
		r = -E2BIG;
	if (!r)
		r = edit_table(c, q->off_table, q->nblocks, used, f / T,
			       (q->nkeep + T - 1) / T, &table);
	if (!r) {
		struct kvk_compact_args a = {
			.layout = l, .block_table = table,
			.nblocks = q->nblocks, .len = q->len, .keep = keep,
			.nkeep = q->nkeep,
		};

		kvd_backing_rdlock(d->top);
		r = kvd_client_check_mapped(c, table, (uint32_t)used);
		if (!r) {
			kvd_restart_edit_begin(d);	/* not repeatable */
			r = d->be->compact(d, &a);
			kvd_restart_edit_end(d);
		}
		kvd_backing_unlock(d->top);
	}
	free(keep);
	free(table);
	return r;
}

int kvd_op_score(struct kvd_client *c, const struct kvp_score *q)
{
	struct kvd *d = c->d;
	const struct kvk_layout *l = kvd_client_layout(c, q->layout_id);
	uint32_t *table = NULL, *tmp = NULL;
	uint64_t T, used;
	void *qp, *out;
	int r;

	if (q->reserved[0] || q->reserved[1] || !l ||
	    (q->flags & ~KVP_SCORE_FLAGS) || q->layer >= l->layers ||
	    !q->q_heads || q->q_heads % l->kv_heads ||
	    q->q_heads / l->kv_heads > KVK_MAX_GQA || !q->n_q ||
	    q->n_q > KVK_SCORE_MAX_Q || !q->len)
		return -EINVAL;
	if (!isfinite(q->scale) || q->scale < 0)
		return -EINVAL;
	if (!d->be->score)
		return -EOPNOTSUPP;
	T = l->tokens_per_block;
	if (q->len > (uint64_t)q->nblocks * T)
		return -ERANGE;
	used = (q->len + T - 1) / T;
	/* ATTN's bound of Q.K multiply-adds: n_q x len x q_heads x hd */
	if (qk_work(q->n_q, q->len, q->q_heads, l->head_dim) > MAX_ATTN_WORK)
		return -E2BIG;
	r = kvd_client_region_ptr(c, q->off_q, (uint64_t)q->n_q * q->q_heads,
		       (uint64_t)l->head_dim * 4, &qp);
	if (!r)
		r = kvd_client_region_ptr(c, q->off_out, q->len, 4, &out);
	if (!r)
		r = edit_table(c, q->off_table, q->nblocks, used, 0, 0, &table);
	/* a sequence names each block once */
	if (!r) {
		tmp = malloc((size_t)used * sizeof(*tmp));
		r = !tmp ? -ENOMEM :
		    row_repeats(table, (uint32_t)used, tmp) ? -EINVAL : 0;
	}
	if (!r) {
		struct kvk_score_args a = {
			.layout = l, .layer = q->layer, .q_heads = q->q_heads,
			.n_q = q->n_q,
			.flags = ((q->flags & KVP_SCORE_MAX) ?
				  KVK_SCORE_MAX : 0) |
				 ((q->flags & KVP_SCORE_CAUSAL) ?
				  KVK_SCORE_CAUSAL : 0),
			.q = qp, .block_table = table, .nblocks = q->nblocks,
			.len = q->len,
			.scale = q->scale ? q->scale :
				 1.0f / sqrtf((float)l->head_dim),
			.out = out,
		};

		kvd_backing_rdlock(d->top);
		r = kvd_client_check_mapped(c, table, (uint32_t)used);
		if (!r)
			r = d->be->score(d, &a);
		kvd_backing_unlock(d->top);
	}
	free(tmp);
	free(table);
	return r;
}
