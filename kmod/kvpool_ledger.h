/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvpool ledger core: the state and rules of DESIGN 2.1, with no device glue.
 *
 * The same file (kvpool_ledger.c) builds inside kvpool.ko and in user space
 * (through kvpool_ledger_user.h), where the cmocka tests and kvpoold's
 * in-process ledger use it.  The core never sleeps, never takes a lock and
 * never copies from or to user space: the host (the module or the daemon)
 * holds its own per-pool lock around every call, does the waiting, and
 * implements the callbacks in struct kvpool_ledger_ops.
 *
 * Data structures, chosen so that grant and release never scan the pool:
 *  - a hierarchical bitmap of free blocks (64-ary, one bit per block at the
 *    bottom level), so "lowest free index first" costs O(log64 capacity);
 *  - an owner array (u32 per block: the lease slot + 1, 0 when free), so
 *    validating a release or a LEASE_CHECK costs O(1) per block;
 *  - the sum of unmet protection, sum over tenants of max(0, min - current),
 *    kept incrementally, so rule 2 costs O(1).
 * Only close, snapshot and the full invariant check walk the owner array
 * (up to `backed`).
 */
#ifndef KVPOOL_LEDGER_H
#define KVPOOL_LEDGER_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/list.h>
#else
#include "kvpool_ledger_user.h"
#endif
#include "include/uapi/linux/kvpool.h"

/* Limits beyond the UAPI ones. */
#define KVPOOL_MAX_TENANTS	4096
#define KVPOOL_MAX_LEASES	(1U << 20)

struct kvpool_pool;
struct kvpool_tenant;
struct kvpool_lease;

/* Who is calling: filled by the host from the caller's credentials. */
struct kvpool_cred {
	u32 uid;
	u32 gid;
	u32 pid;
	bool admin;		/* CAP_SYS_ADMIN */
};

/*
 * Host callbacks, all called with the host's pool lock held.  Any may be
 * NULL.  None may call back into the core.
 */
struct kvpool_ledger_ops {
	/* The owner has events to read (wake its poll/read). */
	void (*owner_wake)(struct kvpool_pool *pool);
	/* State changed so that waiting grants should retry (or fail). */
	void (*waiters_wake)(struct kvpool_pool *pool);
	/* lease->reclaim_target changed (raise/clear POLLPRI). */
	void (*reclaim_wake)(struct kvpool_lease *lease);
	/* Every event, for observers (netlink multicast); may drop. */
	void (*observe)(struct kvpool_pool *pool, const struct kvpool_event *ev);
	/*
	 * A tenant was created (by kvpool_tenant_create or automatically for a
	 * uid); a non-zero return undoes the creation with that error.  The
	 * host may set tenant->host here.
	 */
	int (*tenant_added)(struct kvpool_tenant *t);
	/*
	 * A tenant is being freed (kvpool_tenant_delete or pool destroy).  In
	 * the kernel, removing its sysfs directory must happen after the host
	 * drops the pool lock (sysfs handlers take that lock).
	 */
	void (*tenant_removed)(struct kvpool_tenant *t);
	/*
	 * Is the caller described by @cred in group @gid (supplementary
	 * groups included)?  Without it only cred->gid is compared.
	 */
	bool (*in_group)(const struct kvpool_cred *cred, u32 gid);
	/*
	 * Blocks[0..n) now belong to lease @lease_id, or are free (0): every
	 * grant (a pending one at its commit), release, move and close, for
	 * a host that journals who holds what (kvpoold's in-process ledger
	 * keeps it across its restarts).
	 */
	void (*blocks_owned)(struct kvpool_pool *pool, const u32 *blocks,
			     u32 n, u64 lease_id);
};

struct kvpool_tenant {
	struct kvpool_pool *pool;
	char name[KVPOOL_NAME_LEN];
	/*
	 * 1, 2, 3... in the order tenants are created, never reused in the
	 * pool's life: a tenant deleted and created again under its name is
	 * another tenant (a lease's tenant is known by it, not by name).
	 */
	u64 serial;
	u32 max;		/* KVPOOL_UNLIMITED for none */
	u32 min;
	u32 cur;		/* blocks.current ("current" is a kernel macro) */
	u32 peak;
	u64 ev_max;		/* grants refused by max */
	u64 ev_stall;		/* grants that had to wait */
	u64 ev_reclaim;		/* reclaim targets posted to its leases */
	u64 ev_fail;		/* grants that failed after trying */
	u32 allow_uid;		/* KVPOOL_ID_NONE for nobody */
	u32 allow_gid;
	u32 nleases;
	bool automatic;		/* the per-uid tenant "uid-<uid>" */
	u64 reclaim_mark;	/* scratch for choosing reclaim victims */
	struct list_head leases;
	struct list_head node;	/* in pool->tenants */
	void *host;
};

struct kvpool_lease {
	struct kvpool_pool *pool;
	struct kvpool_tenant *tenant;
	u64 id;
	u32 slot;		/* owner[] holds slot + 1 */
	u32 held;
	u32 reclaim_target;
	u32 uid;
	u32 pid;
	struct list_head tenant_node;
	struct list_head pool_node;	/* pool->leases, or pool->closed */
	struct kvpool_event closed_ev;	/* after close: the owner's record */
	u32 pins;		/* data-plane operations in flight */
	bool closing;		/* closed while pinned: done at last unpin */
	u32 reclaim_order;	/* KVPOOL_RECLAIM_* */
	/*
	 * Kept: a close parks the lease instead of closing it
	 * (kvpool_lease_set_keep).  Parked: its host (file) is gone; its
	 * blocks stay leased and charged until a host adopts it
	 * (kvpool_lease_adopt).  A parked lease is always kept, has no
	 * reclaim target and is never asked for one.
	 */
	bool keep;
	bool parked;
	void *host;
};

/*
 * Where a lease stands when reclaim targets are posted to its tenant
 * (kvpool_lease.reclaim_order): FIRST leases sit at the head of the
 * tenant's list and are asked first, NEVER leases are skipped.
 */
enum {
	KVPOOL_RECLAIM_NORMAL = 0,
	KVPOOL_RECLAIM_FIRST = 1,
	KVPOOL_RECLAIM_NEVER = 2,
};

/* Per-call wait context, kept by the host across the retries of one grant. */
struct kvpool_wait {
	bool started;		/* a wait was decided at least once */
	bool stalled;		/* counted in ev_stall */
	u64 grow_fail_seq;	/* pool->grow_fail_seq when the wait began */
	u32 peak_before;	/* the tenant's peak before the grant ... */
	u32 peak_after;		/* ... and after it (for a cancel) */
	u32 target_before;	/* the lease's reclaim target at the grant */
};

struct kvpool_pool_params {
	char name[KVPOOL_NAME_LEN];
	u64 block_bytes;
	u32 capacity;
	u32 chunk_blocks;
	u32 default_max;
};

struct kvpool_pool {
	char name[KVPOOL_NAME_LEN];
	u64 block_bytes;
	u32 capacity;
	u32 chunk_blocks;
	u32 default_max;
	u32 backed;
	u32 used;
	u64 unmet_min;		/* sum over tenants of max(0, min - current) */
	u32 ntenants;
	u32 nleases;
	u64 epoch;
	u64 seq;		/* last event sequence number */
	u64 grow_fail_seq;	/* +1 at each KVPOOL_GROW_FAILED */
	u32 grow_asked;		/* largest backed target asked of the owner */
	u64 next_lease_id;
	u64 tenant_serial;	/* the last kvpool_tenant.serial handed out */
	u64 reclaim_gen;
	void *owner;		/* host cookie of the owner, NULL if orphaned */

	/* Free-block bitmap: levels[0] has one bit per block (1 = free). */
	u32 nlevels;
	u64 *levels[6];
	u32 level_words[6];
	u32 *owner_of;		/* per block: lease slot + 1, or 0 */
	struct kvpool_lease **slots;	/* lease by slot, NULL when free */
	u32 nslots;			/* slots allocated */
	u32 *slot_free;			/* stack of free slot numbers */
	u32 nslot_free;

	struct list_head tenants;
	struct list_head leases;
	struct list_head closed;	/* closed leases not yet read by the owner */
	u32 nclosed;			/* on it, at most KVPOOL_CLOSED_QUEUE_MAX */
	u32 nkept;			/* kept leases, at most KVPOOL_PARK_MAX */
	u32 nparked;			/* parked leases among them */

	/* Coalesced owner events (0 seq: none pending). */
	struct kvpool_event grow_ev;
	struct kvpool_event idle_ev;
	struct kvpool_event reclaim_ev;
	struct kvpool_event short_ev;
	struct kvpool_event closed_many_ev;	/* closes beyond the queue */

	const struct kvpool_ledger_ops *ops;
	void *host;
};

/* Pools. */
int kvpool_pool_create(const struct kvpool_pool_params *p,
		       const struct kvpool_ledger_ops *ops, void *host,
		       void *owner, struct kvpool_pool **out);
void kvpool_pool_destroy(struct kvpool_pool *pool);
int kvpool_owner_attach(struct kvpool_pool *pool, void *owner);
void kvpool_owner_detach(struct kvpool_pool *pool);
int kvpool_pool_grow(struct kvpool_pool *pool, u32 backed, u32 flags);
int kvpool_pool_shrink(struct kvpool_pool *pool, u32 backed);
/* Lowest backed count reachable by SHRINK now (all leased blocks below). */
u32 kvpool_pool_shrink_floor(struct kvpool_pool *pool);
int kvpool_snapshot(struct kvpool_pool *pool,
		    struct kvpool_lease_info *leases, u32 leases_cap,
		    struct kvpool_block_owner *blocks, u32 blocks_cap,
		    struct kvpool_snapshot *out);
int kvpool_lease_check(struct kvpool_pool *pool, u64 lease_id,
		       const u32 *blocks, u32 count, u32 *bad_index);
/* The open (not closing) lease @lease_id, or NULL. */
struct kvpool_lease *kvpool_lease_find(struct kvpool_pool *pool, u64 lease_id);
/*
 * Pinning, for the owner's data plane: kvpool_lease_pin() checks like
 * kvpool_lease_check() and, on success, pins the lease until the matching
 * kvpool_lease_unpin().  While a lease is pinned its blocks cannot change
 * hands: releases and moves out of it fail with -EBUSY (the host waits for
 * waiters_wake and retries), and a close keeps the blocks until the last
 * unpin (or until the owner goes away), so a block the owner is writing is
 * never granted to someone else meanwhile.
 */
int kvpool_lease_pin(struct kvpool_pool *pool, u64 lease_id,
		     const u32 *blocks, u32 count, u32 *bad_index);
int kvpool_lease_unpin(struct kvpool_pool *pool, u64 lease_id);
/*
 * Move @count blocks held by lease @from_id to lease @to_id, both open and
 * charged to the same tenant: no counter changes, no block is free in
 * between.  All or nothing: -EPERM (*bad_index set) if @from_id does not
 * hold a block, -EINVAL for a repeated index (*bad_index set), count 0 or
 * too large, or @from_id == @to_id; -ENOENT if a lease does not exist or
 * is closing; -EXDEV if the tenants differ; -EBUSY while @from_id is
 * pinned (like a release: a block an operation uses never changes hands;
 * the host retries after waiters_wake, or gives up).  A pinned destination
 * is allowed (it only gains blocks).  The source's reclaim target is
 * capped at what it still holds.  Returns @count.
 */
int kvpool_lease_move(struct kvpool_pool *pool, u64 from_id, u64 to_id,
		      const u32 *blocks, u32 count, u32 *bad_index);
/* Next owner event into *ev: 1 if one was returned, 0 if none pending. */
int kvpool_owner_read_event(struct kvpool_pool *pool, struct kvpool_event *ev);
bool kvpool_owner_has_events(struct kvpool_pool *pool);

/* Tenants. */
int kvpool_tenant_create(struct kvpool_pool *pool, const char *name,
			 u32 max, u32 min, u32 allow_uid, u32 allow_gid,
			 struct kvpool_tenant **out);
int kvpool_tenant_delete(struct kvpool_pool *pool, const char *name);
struct kvpool_tenant *kvpool_tenant_find(struct kvpool_pool *pool,
					 const char *name);
/*
 * Limits: max (KVPOOL_UNLIMITED or 0..capacity) and min (0..capacity, not
 * above a finite max); -EINVAL changes nothing.  set_limits checks both
 * values together before applying either.  A new max withdraws the
 * tenant's reclaim targets and posts its excess over the new max again.
 */
int kvpool_tenant_set_limits(struct kvpool_tenant *t, u32 max, u32 min);
int kvpool_tenant_set_max(struct kvpool_tenant *t, u32 max);
int kvpool_tenant_set_min(struct kvpool_tenant *t, u32 min);
void kvpool_tenant_reset_peak(struct kvpool_tenant *t);

/* Leases. */
int kvpool_lease_open(struct kvpool_pool *pool, const struct kvpool_cred *cred,
		      struct kvpool_lease **out);
int kvpool_lease_attach(struct kvpool_lease *lease, const char *tenant,
			const struct kvpool_cred *cred);
/*
 * Set where @lease stands when reclaim targets are posted to its tenant
 * (KVPOOL_RECLAIM_*).  Anything but NORMAL needs cred->admin (-EPERM);
 * -EINVAL for an unknown order.  A NEVER lease loses its reclaim target.
 */
int kvpool_lease_set_reclaim_order(struct kvpool_lease *lease, u32 order,
				   const struct kvpool_cred *cred);
/*
 * Returns every block and queues a close event; frees or keeps the lease
 * (a pinned lease finishes closing at its last unpin).  A kept lease is
 * parked instead (kvpool_lease_set_keep).  The host must not use the lease
 * afterwards.
 */
void kvpool_lease_close(struct kvpool_lease *lease);
/*
 * Grant blocks: returns the count granted (written to blocks[]), or -errno.
 * -EAGAIN means "would wait" unless KVPOOL_LEASE_NONBLOCK was given (then it
 * is final): the host sleeps until waiters_wake or its timeout and calls
 * again with the same wait context; on timeout or signal it calls
 * kvpool_lease_wait_end() so the failure is counted.
 */
int kvpool_lease_grant(struct kvpool_lease *lease, u32 count, u32 flags,
		       u32 *blocks, struct kvpool_wait *w);
void kvpool_lease_wait_end(struct kvpool_lease *lease, struct kvpool_wait *w,
			   int err);
/*
 * Two-phase grant, for a host that hands the indices over after dropping
 * its lock (the module copies them to user space, which may fault).
 * kvpool_lease_grant_pending() grants like kvpool_lease_grant(), but the
 * blocks stay pending: charged to the lease (held, current, used), yet
 * neither releasable (-EINVAL) nor checkable or pinnable by the owner
 * (-EPERM), so nothing but this call can touch them.  Then exactly one of:
 * kvpool_lease_grant_commit() makes them ordinary blocks of the lease;
 * kvpool_lease_grant_cancel() returns them and leaves held, current, used,
 * the reclaim target and (unless a later grant raised it) the peak as they
 * were, whatever pins the lease has.  (A reclaim target posted while the
 * blocks were pending, by a max lowered meanwhile, counted them: the
 * cancel counts them as given back against what that post added; the
 * target never ends above what the lease holds.)  Both take the blocks[]
 * and wait context of the grant (-EINVAL if a block is not a pending grant
 * of @lease).  A close frees pending blocks too; the host must not commit or
 * cancel after it (the module cannot: an ioctl holds the file).
 */
int kvpool_lease_grant_pending(struct kvpool_lease *lease, u32 count,
			       u32 flags, u32 *blocks, struct kvpool_wait *w);
int kvpool_lease_grant_commit(struct kvpool_lease *lease, const u32 *blocks,
			      u32 n);
int kvpool_lease_grant_cancel(struct kvpool_lease *lease, const u32 *blocks,
			      u32 n, const struct kvpool_wait *w);
int kvpool_lease_release(struct kvpool_lease *lease, const u32 *blocks,
			 u32 count);
/* Count released, or -EBUSY while pinned. */
int kvpool_lease_release_all(struct kvpool_lease *lease);
/*
 * Kept leases, for an owner whose own leases (its cached blocks) must
 * outlive it.  kvpool_lease_set_keep() marks (@keep) or unmarks @lease:
 * at most KVPOOL_PARK_MAX kept leases per pool (-ENOSPC), -EINVAL on a
 * parked or closing lease; marking twice is no change.  A kept lease's
 * kvpool_lease_close() parks it: its blocks stay leased and charged to its
 * tenant, its pins stay until unpinned (or the owner detaches), its reclaim
 * target is withdrawn and none is posted to it while parked (nobody could
 * answer: the tenant's other leases are asked instead), pending grants
 * are returned, no CLIENT_CLOSED record is queued (it is not closed) and
 * the host must not use the lease until it adopts it again.
 * kvpool_lease_find() and everything by lease id but kvpool_lease_unpin()
 * and kvpool_lease_adopt() ignore a parked lease (-ENOENT); SNAPSHOT lists
 * it with KVPOOL_LEASE_INFO_PARKED.  kvpool_lease_adopt() gives the parked
 * lease @lease_id to a new host (still kept; its pid becomes @cred's):
 * -ENOENT if there is no such lease or it is not parked.  To drop a parked
 * lease, adopt it, unmark it and close it.
 */
int kvpool_lease_set_keep(struct kvpool_lease *lease, bool keep);
/*
 * A host that journalled its ledger, started again: the lease @lease_id
 * of @uid in tenant @tenant ("" or absent: the per-uid one), holding
 * blocks[0..n) (each free and below backed, none twice), parked and kept
 * as if its file had gone, for kvpool_lease_adopt().  Its tenant is
 * charged without its max (the blocks were granted once).  -EEXIST for a
 * lease id in use, -ENOENT for a named tenant that does not exist,
 * -EINVAL for a block that is not free or not backed, -ENOSPC beyond
 * KVPOOL_PARK_MAX kept leases; nothing changes then.
 */
int kvpool_lease_restore(struct kvpool_pool *pool, u64 lease_id, u32 uid,
			 const char *tenant, const u32 *blocks, u32 n,
			 struct kvpool_lease **out);
int kvpool_lease_adopt(struct kvpool_pool *pool, u64 lease_id,
		       const struct kvpool_cred *cred,
		       struct kvpool_lease **out);

/* Fill the ledger part of a status reply (lease may be NULL for owners). */
void kvpool_status_fill(struct kvpool_pool *pool, struct kvpool_lease *lease,
			struct kvpool_status *st);

/* Validate a name: 0 or -EINVAL. */
int kvpool_name_valid(const char *name);

/*
 * Check every invariant of DESIGN 2.1 rules 1 and 3 (and the internal
 * structures) by walking the whole pool.  0 or -EUCLEAN; *why, if not NULL,
 * points to a static description of the first violation.
 */
int kvpool_pool_check(struct kvpool_pool *pool, const char **why);

#endif /* KVPOOL_LEDGER_H */
