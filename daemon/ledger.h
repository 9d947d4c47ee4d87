/* SPDX-License-Identifier: MIT */
/*
 * ledger.h - the ledger link of each pool (ledger.c): the in-process core
 * or /dev/kvpool, the owner's duties, the backing lock and lease checks.
 */
#ifndef KVD_LEDGER_H
#define KVD_LEDGER_H

#include "core.h"

/* ledger.c: the ledger link (in-process core or /dev/kvpool owner), one
 * per pool. */
int kvd_ledger_open(struct kvd *d);
/* Module, an attached owner file: take the pool's block_bytes and
 * capacity when they differ from p's: 1 (p changed), 0, or -errno. */
int kvd_ledger_geometry(struct kvd_pool *p);
/* Module: the pool's leases (*li[s->leases]) and leased blocks
 * (*bo[s->blocks]), for the caller to free.  0 or -errno. */
struct kvpool_snapshot;
struct kvpool_lease_info;
struct kvpool_block_owner;
int kvd_ledger_snapshot(struct kvd_pool *p, struct kvpool_snapshot *s,
			struct kvpool_lease_info **li,
			struct kvpool_block_owner **bo);
/* The module's features every owner file asks for. */
#define KVD_MODULE_FEATURES	(KVPOOL_FEAT_RECOVERY | \
				 KVPOOL_FEAT_LEASE_CHECK | KVPOOL_FEAT_PIN | \
				 KVPOOL_FEAT_TENANT_SERIAL)
void kvd_ledger_close(struct kvd *d);
/* Owner duties, called by the main thread when a pool's wake fd / owner
 * fd is readable, and on its shrink timer. */
void kvd_owner_events(struct kvd_pool *p);
void kvd_owner_timer(struct kvd_pool *p);
/* Unmap above the ledger's backed count when no op holds the memory. */
void kvd_backing_trim(struct kvd_pool *p);
/* Data-plane ops and swap jobs: hold the memory (read lock), after any
 * due unmap, and let it go.  An op holds it for one bounded piece of
 * work (the bounds of kvpool_proto.h) and never takes it twice. */
void kvd_backing_rdlock(struct kvd_pool *p);
/* The same without waiting (the owner's thread): false while an unmap
 * is due or under way. */
bool kvd_backing_tryrdlock(struct kvd_pool *p);
void kvd_backing_unlock(struct kvd_pool *p);
/* The pool's backing lock and gate (at set-up, 0 or -ENOMEM), freed at
 * the end; at a stop, ops waiting at the gate go on. */
int kvd_backing_init(struct kvd_pool *p);
void kvd_backing_fini(struct kvd_pool *p);
void kvd_backing_stop(struct kvd_pool *p);
/* Retry interval of a waiting unmap, and when new ops start to wait. */
#define KVD_TRIM_RETRY_NS	10000000ULL
#define KVD_TRIM_GATE_NS	200000000ULL
int kvd_owner_poll_fd(struct kvd_pool *p);
/*
 * Check that lease_id holds every block of pool p: 0, -EPERM, -ENOENT.
 * With the module and @pin, a successful check also pins the lease (its
 * blocks cannot change hands) until kvd_lease_unpin().  The in-process
 * ledger needs no pin for an op served by the client's own thread: a
 * client's releases are served by the same thread as its operations.
 */
int kvd_lease_check(struct kvd_pool *p, uint64_t lease_id,
		    const uint32_t *blocks, uint32_t n, bool pin);
int kvd_lease_unpin(struct kvd_pool *p, uint64_t lease_id);
/*
 * Pin for work done outside the client's thread (swap jobs), with either
 * ledger: check like kvd_lease_check and pin until kvd_lease_pin_drop.
 * Meanwhile the client's releases wait and a close keeps the blocks.
 */
int kvd_lease_pin(struct kvd_pool *p, uint64_t lease_id,
		  const uint32_t *blocks, uint32_t n);
void kvd_lease_pin_drop(struct kvd_pool *p, uint64_t lease_id);
/*
 * kvd_lease_check, and on success *serial = the serial of the tenant the
 * lease is charged to, read with the check (a pinned lease that holds a
 * block keeps its tenant until the unpin).
 */
int kvd_lease_check_serial(struct kvd_pool *p, uint64_t lease_id,
			   const uint32_t *blocks, uint32_t n, bool pin,
			   uint64_t *serial);
/* The tenant lease_id of pool p is charged to now: 0 or -ENOENT. */
int kvd_lease_tenant(struct kvd_pool *p, uint64_t lease_id, uint64_t *serial,
		     char name[KVPOOL_NAME_LEN]);
/*
 * Module mode: is fd a file of /dev/kvpool (a character device with the
 * st_rdev of p's owner file)?  0 or -EBADF.  Only such a file's STATUS
 * can be trusted to name the caller's lease.
 */
int kvd_ledger_fd_check(struct kvd_pool *p, int fd);
uint64_t kvd_mapped_bytes(struct kvd_pool *p);
void kvd_ledger_pool_rec(struct kvd_pool *p, struct kvp_pool_rec *r);
/* The pool called name ("" or NULL: the top one), or NULL. */
struct kvd_pool *kvd_pool_by_name(struct kvd *d, const char *name);

#endif /* KVD_LEDGER_H */
