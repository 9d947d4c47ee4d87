/* SPDX-License-Identifier: MIT */
/*
 * prefix.h - kvpoold's prefix cache (prefix.c): one cache per tenant,
 * shared by all its processes, held in two leases of the daemon charged
 * to the tenant ("hot": referenced, "cold": unreferenced, LRU), and the
 * hooks that the rest of the daemon calls.
 *
 * Locking: prefix.c has one mutex of its own, taken before d->top->lock (the
 * in-process ledger) and never while it is held.  The functions
 * below take it themselves, except kvd_prefix_referenced() (lock-free:
 * a connection's references change only in its own thread) and
 * kvd_prefix_reclaim_wake() (called with d->top->lock held; takes nothing).
 */
#ifndef KVPOOLD_PREFIX_H
#define KVPOOLD_PREFIX_H

#include "core.h"

struct kvd_prefix;
struct kvd_prefix_conn;

/* After the ledger is open: the cache, its thread.  0 or -errno. */
int kvd_prefix_init(struct kvd *d);
/* After privileges are dropped: the thread that answers reclaim targets
 * posted to the cache's cold leases. */
int kvd_prefix_start(struct kvd *d);
/* Before the ledger closes: stop the thread, free the index (the cache
 * leases die with the daemon's ledger files or in-process ledger). */
void kvd_prefix_fini(struct kvd *d);

/* server.c: data-plane ops (KVP_OP_PREFIX_*, KVP_OP_LAYOUT_MODEL). */
int kvd_prefix_op(struct kvd_client *c, uint16_t op, const void *body,
		  size_t blen, void *rbody, size_t *rlen);
/* server.c: admin ops (KVP_OP_PREFIX_LIST/FLUSH/SHARE); @admin: the peer
 * may write. */
int kvd_prefix_admin(struct kvd *d, bool admin, uint16_t op,
		     const void *body, size_t blen, void *rbody, size_t *rlen);
/* KVP_OP_PREFIX_LIST: every tenant's record, or (@only not NULL) those of
 * the tenants named in only[0..nonly). */
int kvd_prefix_list(struct kvd *d, const char (*only)[KVPOOL_NAME_LEN],
		    int nonly, const void *body, size_t blen, void *rbody,
		    size_t *rlen);
/* Does the connection reference cached block @b (may read it)? */
bool kvd_prefix_referenced(const struct kvd_prefix_conn *pc, uint32_t b);
/* The connection is gone: its references go (NULL is fine). */
void kvd_prefix_conn_close(struct kvd *d, struct kvd_prefix_conn *pc);
/* Its lease changed tenant: the references it took go, the rest stays. */
void kvd_prefix_conn_unref_all(struct kvd *d, struct kvd_prefix_conn *pc);

/*
 * The entry point for pressure policies: give back up to @n unreferenced
 * cached blocks of @tenant, least recently used first.  Returns the
 * number given back (0 when there is nothing to give).
 */
uint32_t kvd_prefix_evict_tenant(struct kvd *d, const char *tenant,
				 uint32_t n);
/*
 * The pool is short of @n blocks for a grant of @asker ("" if unknown):
 * give back up to @n unreferenced cached blocks, least recently used
 * first across tenants, never taking a tenant other than @asker below its
 * min.  Returns the number given back.
 */
uint32_t kvd_prefix_evict_pool(struct kvd *d, const char *asker, uint32_t n);
/* Flush @tenant's cache (see KVP_OP_PREFIX_FLUSH): blocks given back. */
uint32_t kvd_prefix_flush(struct kvd *d, const char *tenant);
/*
 * Delete @tenant of the top pool: its cache is flushed and its leases
 * closed first (so that they do not keep it alive), then del(arg) deletes
 * it in the ledger; once that succeeded, its record goes too (namespace
 * membership, counters), so that a tenant created later under that name
 * starts with an empty cache of its own.  Returns del's result.  Every
 * path that deletes a tenant of the top pool goes through here (the
 * socket's TENANT_DEL, a reload's deletion).
 */
int kvd_prefix_tenant_del(struct kvd *d, const char *tenant,
			  int (*del)(void *arg), void *arg);
/* In-process ledger, d->top->lock held: a lease without a client (maybe one
 * of the cache's) got a reclaim target. */
void kvd_prefix_reclaim_wake(struct kvd *d);


#endif /* KVPOOLD_PREFIX_H */
