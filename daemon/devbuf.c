// SPDX-License-Identifier: MIT
/*
 * devbuf.c - the data plane of GPU tenants: device buffers a client
 * exported (a VMM allocation as a POSIX file descriptor), imported and
 * mapped by the backend, and the ops that read queries and K/V from them
 * and write outputs into them (KVP_OP_DEVBUF_*, KVP_OP_*_DEV in
 * include/kvpool_proto.h).  Index arrays still come from the client's
 * host region and every block is checked against its lease, like the
 * host-region ops in ops.c.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "ledger.h"
#include "conn.h"
#include "ops.h"
#include "devbuf.h"

#define MAX_BATCH	4096
#define MAX_NTOK	65536

int kvd_op_devbuf_add(struct kvd_client *c, const struct kvp_devbuf *q,
		      int fd, struct kvp_devbuf_reply *rep)
{
	struct kvd *d = kvd_client_daemon(c);
	struct kvd_devbufs *t = kvd_client_devbufs(c);
	struct kvd_devbuf *b = NULL;
	uint32_t id;
	int r;

	if (q->flags || q->pad || q->reserved[0] || q->reserved[1]) {
		r = -EINVAL;
		goto out;
	}
	if (!d->be->devbuf_import) {
		r = -EOPNOTSUPP;
		goto out;
	}
	if (fd < 0) {
		r = -EBADF;
		goto out;
	}
	if (!q->bytes) {
		r = -EINVAL;
		goto out;
	}
	for (id = 0; id < KVP_MAX_DEVBUFS && t->b[id]; id++)
		;
	if (id == KVP_MAX_DEVBUFS) {
		r = -ENOSPC;
		goto out;
	}
	r = d->be->devbuf_import(d, fd, q->bytes, &b);
	if (r)
		goto out;
	t->b[id] = b;
	rep->buf_id = id;
	rep->bytes = b->bytes;
	kvd_log(KVD_DEBUG, "device buffer %u: %llu bytes at %#llx", id,
		(unsigned long long)b->bytes, (unsigned long long)b->addr);
out:
	if (fd >= 0)
		close(fd);
	return r;
}

int kvd_op_devbuf_del(struct kvd_client *c, const struct kvp_devbuf_del *q)
{
	struct kvd *d = kvd_client_daemon(c);
	struct kvd_devbufs *t = kvd_client_devbufs(c);

	if (q->pad)
		return -EINVAL;
	if (q->buf_id >= KVP_MAX_DEVBUFS || !t->b[q->buf_id])
		return -ENOENT;
	d->be->devbuf_release(d, t->b[q->buf_id]);
	t->b[q->buf_id] = NULL;
	return 0;
}

void kvd_devbufs_clear(struct kvd *d, struct kvd_devbufs *t)
{
	unsigned int i;

	for (i = 0; i < KVP_MAX_DEVBUFS; i++)
		if (t->b[i]) {
			d->be->devbuf_release(d, t->b[i]);
			t->b[i] = NULL;
		}
}

/* [off, off + len) of buffer id, 16-byte aligned: its device address */
static int span(struct kvd_client *c, uint32_t id, uint64_t off,
		uint64_t len, uint64_t *addr)
{
	struct kvd_devbufs *t = kvd_client_devbufs(c);
	const struct kvd_devbuf *b;

	if (id >= KVP_MAX_DEVBUFS || !t->b[id])
		return -ENOENT;
	b = t->b[id];
	if (off > b->bytes || len > b->bytes - off)
		return -EFAULT;
	if (off % 16)
		return -EINVAL;
	*addr = b->addr + off;
	return 0;
}

int kvd_op_kv_dev(struct kvd_client *c, const struct kvp_kv_dev *q,
		  bool write)
{
	struct kvd *d = kvd_client_daemon(c);
	const struct kvk_layout *l = kvd_client_layout(c, q->layout_id);
	uint32_t *blocks = NULL, *slots = NULL, i;
	uint64_t row, k = 0, v = 0;
	int bf16 = !!(q->flags & KVP_DEV_BF16), r;

	if (q->pad || q->reserved[0] || q->reserved[1] ||
	    (q->flags & ~KVP_DEV_FLAGS) || (!write && q->flags))
		return -EINVAL;
	if (!d->be->write_kv_dev)
		return -EOPNOTSUPP;
	if (!l || q->layer >= l->layers || !q->ntok || q->ntok > MAX_NTOK)
		return -EINVAL;
	row = (uint64_t)l->kv_heads * l->head_dim * (bf16 ? 2 : 4);
	if (write || q->dev_k != KVP_OFF_NONE) {
		r = span(c, q->buf_id, q->dev_k, q->ntok * row, &k);
		if (r)
			return r;
	}
	if (write || q->dev_v != KVP_OFF_NONE) {
		r = span(c, q->buf_id, q->dev_v, q->ntok * row, &v);
		if (r)
			return r;
	}
	if (!write && !k && !v)
		return -EINVAL;
	r = kvd_client_region_u32(c, q->off_blocks, q->ntok, &blocks);
	if (!r)
		r = kvd_client_region_u32(c, q->off_slots, q->ntok, &slots);
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
	if (!r)
		r = write ? d->be->write_kv_dev(d, l, q->layer, q->ntok, blocks,
						slots, k, v, bf16) :
			    d->be->read_kv_dev(d, l, q->layer, q->ntok, blocks,
					       slots, k, v);
	kvd_backing_unlock(d->top);
out:
	free(blocks);
	free(slots);
	return r;
}

int kvd_op_attn_dev(struct kvd_client *c, const struct kvp_attn_dev *a)
{
	struct kvd *d = kvd_client_daemon(c);
	const struct kvk_layout *l = kvd_client_layout(c, a->layout_id);
	struct kvd_attn_tables t;
	uint64_t qn, mbs = a->max_blocks_per_seq, q = 0, out = 0;
	float scale;
	int r;

	if (a->reserved[0] || a->reserved[1])
		return -EINVAL;
	if (!d->be->attn_dev)
		return -EOPNOTSUPP;
	if (!l || a->layer >= l->layers || !a->batch || a->batch > MAX_BATCH ||
	    !a->q_heads || !mbs || mbs > d->top->capacity || a->n_new > MAX_NTOK)
		return -EINVAL;
	if (a->q_heads % l->kv_heads || a->q_heads / l->kv_heads > KVK_MAX_GQA)
		return -EINVAL;
	if (!isfinite(a->scale) || a->scale < 0)
		return -EINVAL;
	scale = a->scale ? a->scale : 1.0f / sqrtf((float)l->head_dim);
	qn = (uint64_t)a->batch * (a->n_new ? a->n_new : 1) * a->q_heads;
	r = span(c, a->buf_id, a->dev_q, qn * l->head_dim * 4, &q);
	if (!r)
		r = span(c, a->buf_id, a->dev_out, qn * l->head_dim * 4, &out);
	if (r)
		return r;
	/* ATTN's sizes, bounds and distinct blocks (ops.c) */
	r = kvd_client_attn_tables(c, l, a->batch, a->q_heads, a->n_new, mbs,
				   a->off_tables, a->off_ctx, &t);
	if (r)
		return r;
	r = kvd_client_check_blocks(c, t.used, t.nused, false);
	if (r)
		goto done;
	kvd_backing_rdlock(d->top);
	r = kvd_client_check_mapped(c, t.used, t.nused);
	if (!r) {
		struct kvk_prefill_args pa = {
			.layout = l, .layer = a->layer, .batch = a->batch,
			.q_heads = a->q_heads,
			.max_blocks_per_seq = t.stride,
			.n_new = a->n_new, .block_tables = t.tables,
			.ctx_lens = t.ctx, .scale = scale,
		};

		r = d->be->attn_dev(d, &pa, q, out);
	}
	kvd_backing_unlock(d->top);
done:
	kvd_attn_tables_free(&t);
	return r;
}
