/* SPDX-License-Identifier: MIT */
/*
 * ops.h - the data-plane ops of a connection (ops.c): each takes the
 * request's body and answers 0 or -errno; server.c dispatches to them.
 */
#ifndef KVD_OPS_H
#define KVD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

int kvd_op_kv(struct kvd_client *c, const struct kvp_kv *q, bool write);
int kvd_op_attn(struct kvd_client *c, const struct kvp_attn *a);
int kvd_op_copy(struct kvd_client *c, const struct kvp_copy *q);
int kvd_op_layout_rope(struct kvd_client *c,
		       const struct kvp_layout_rope *q);
int kvd_op_splice(struct kvd_client *c, const struct kvp_splice *q);
int kvd_op_compact(struct kvd_client *c, const struct kvp_compact *q);
int kvd_op_score(struct kvd_client *c, const struct kvp_score *q);

/*
 * The block tables of an attention request (ATTN, ATTN_DEV), sized
 * before anything is allocated: each sequence's block count comes from
 * its context length (-EINVAL beyond mbs or below n_new), the copy holds
 * batch x the longest sequence entries and the Q.K work is counted as
 * max(1, n_new) x ctx x q_heads x head_dim per sequence, both within the
 * bounds of kvpool_proto.h (-E2BIG); then only those entries are copied
 * out of the region, and a block named twice in one sequence is -EINVAL.
 * The lease check of t->used is the caller's.
 */
struct kvd_attn_tables {
	uint32_t *tables;		/* [batch][stride] */
	uint32_t *ctx;			/* [batch] context lengths */
	uint32_t *used;			/* [nused] every entry in use */
	uint32_t stride;		/* the longest sequence, in blocks */
	uint32_t nused;
};
int kvd_client_attn_tables(struct kvd_client *c, const struct kvk_layout *l,
			   uint32_t batch, uint32_t q_heads, uint32_t n_new,
			   uint64_t mbs, uint64_t off_tables, uint64_t off_ctx,
			   struct kvd_attn_tables *t);
void kvd_attn_tables_free(struct kvd_attn_tables *t);

#endif /* KVD_OPS_H */
