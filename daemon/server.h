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
/*
 * The tenant the client's lease is charged to now, with either ledger:
 * its serial (unique in the pool's life: a tenant deleted and created
 * again under its name has another) and its name; either may be NULL.
 * A client may attach its /dev/kvpool file to another tenant while it
 * holds no block: the daemon then acts for the new one (the connection's
 * references to cached blocks, taken for the old one, are dropped).
 * During an op whose blocks passed kvd_client_check_blocks() the answer
 * is the tenant that check vouched for (a pinned lease that holds a block
 * cannot change tenant).  The connection's thread only; 0, or -ENOENT
 * when the lease is gone (then the last tenant seen is returned).
 */
int kvd_client_tenant_id(struct kvd_client *c, uint64_t *serial,
			 char name[KVPOOL_NAME_LEN]);
/* The hooks of the pool floor (struct kvd_hooks): a reclaim target for a
 * connection's lease (called with p->lock held; must not block), and
 * whether a connection holds @lease_id of @p. */
void kvd_client_reclaim(void *client, uint32_t target);
int kvd_client_connected(struct kvd_pool *p, uint64_t lease_id);
/* Leases of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_list(struct kvd_pool *p, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid);


/* server.c, for the device-buffer ops of devbuf.c */
const struct kvk_layout *kvd_client_layout(struct kvd_client *c, uint32_t id);
/* copy of u32 [n] at off in the client's region: 0, -EFAULT, -EINVAL */
int kvd_client_region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint32_t **out);
/* every block held by the client's lease (pinned until the op ends) or,
 * when not write, a prefix-cache block it references */
int kvd_client_check_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n, bool write);
/* every block mapped (the top pool's backing held for reading) */
int kvd_client_check_mapped(struct kvd_client *c, const uint32_t *b,
			    uint32_t n);
struct kvd_devbufs *kvd_client_devbufs(struct kvd_client *c);
struct kvd *kvd_client_daemon(struct kvd_client *c);
/* the block tag of the connection's tenant (scrub.h) */
uint64_t kvd_client_scrub_tag(struct kvd_client *c);
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
