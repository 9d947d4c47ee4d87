/* SPDX-License-Identifier: MIT */
/*
 * server.h - the connection server (server.c): the listening socket,
 * connections and their requests.
 */
#ifndef KVD_SERVER_H
#define KVD_SERVER_H

#include "core.h"

/* server.c */
int kvd_listen(struct kvd *d);
void kvd_accept(struct kvd *d);
/*
 * One connection, without its thread (kvd_accept() adds the thread; the
 * fuzz harness drives a client directly): kvd_client_new() takes over the
 * connected socket @fd (-EUSERS: refused by the connection limits);
 * kvd_client_serve() receives and answers one record (0, or -errno when
 * the connection must end); kvd_client_free() closes everything and
 * returns the lease.
 */
int kvd_client_new(struct kvd *d, int fd, struct kvd_client **out);
/* Stack size of a connection thread (sized for the CPU kernels). */
uint64_t kvd_client_stack_bytes(void);
int kvd_client_serve(struct kvd_client *c);
void kvd_client_free(struct kvd_client *c);
void kvd_clients_stop(struct kvd *d);
/* Leases of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_list(struct kvd_pool *p, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid);

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

#endif /* KVD_SERVER_H */
