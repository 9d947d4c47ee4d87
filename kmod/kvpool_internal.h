/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvpool.ko internals shared by the device (kvpool_main.c), sysfs
 * (kvpool_sysfs.c) and generic netlink (kvpool_netlink.c) glue.  The rules
 * live in the ledger core (kvpool_ledger.c); this is only the host side.
 *
 * Locking, outermost first:
 *   kvpool_global_lock	the pool list and the binding of files to pools;
 *   kvpool_dpool.lock	one per pool, held around every ledger core call.
 * Pools live until the module is unloaded, so a pool pointer found in the
 * list stays valid without a reference count.
 */
#ifndef KVPOOL_INTERNAL_H
#define KVPOOL_INTERNAL_H

#include <linux/kobject.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/wait.h>

#include "kvpool_ledger.h"

/* A file deposited with a pool by its owner (KVPOOL_IOC_FD_DEPOSIT). */
struct kvpool_deposit {
	u64 tag;
	struct file *file;		/* a reference held by the pool */
};

/* The host side of one pool. */
struct kvpool_dpool {
	struct kvpool_pool *core;	/* NULL once destroyed (module exit) */
	struct mutex lock;		/* held around every core call */
	wait_queue_head_t grant_wq;	/* LEASE callers waiting for blocks */
	u64 grant_gen;			/* +1 at each waiters_wake */
	wait_queue_head_t owner_wq;	/* owner read()/poll() */
	u64 owner_gen;			/* +1 at each owner_wake */
	unsigned long unlocks;		/* for check_invariants */
	struct list_head node;		/* in kvpool_pools */
	struct kobject kobj;		/* /sys/kernel/kvpool/<pool> */
	struct kobject *tenants_kobj;	/* .../<pool>/tenants */
	/*
	 * Deposited files, in deposit order, under the pool lock: NULL until
	 * the first deposit, then KVPOOL_DEPOSIT_MAX entries.  Never a kvpool
	 * file (nor any file that could hold one), so they cannot keep the
	 * module loaded; released when the pool is destroyed.
	 */
	struct kvpool_deposit *deposits;
	u32 ndeposits;
};

/*
 * The host side of one tenant: its sysfs directory.  Its handlers take the
 * pool lock after breaking kernfs active protection, so tenant_removed can
 * remove the directory synchronously under the pool lock without waiting
 * for a handler that waits for that lock.
 */
struct kvpool_dtenant {
	struct kobject kobj;		/* .../tenants/<tenant> */
	struct kvpool_dpool *dp;
	struct kvpool_tenant *t;	/* NULL once the core freed it */
};

extern struct mutex kvpool_global_lock;
extern struct list_head kvpool_pools;	/* first entry: the default pool */
extern unsigned int kvpool_check_invariants;

/* kvpool_main.c */
struct kvpool_dpool *kvpool_find_pool(const char *name);
void kvpool_pool_lock(struct kvpool_dpool *dp);
void kvpool_pool_unlock(struct kvpool_dpool *dp);

/* kvpool_sysfs.c */
int kvpool_sysfs_init(void);
void kvpool_sysfs_exit(void);
void kvpool_sysfs_pool_init(struct kvpool_dpool *dp);
int kvpool_sysfs_pool_add(struct kvpool_dpool *dp, const char *name);
void kvpool_sysfs_pool_del(struct kvpool_dpool *dp);
void kvpool_sysfs_pool_put(struct kvpool_dpool *dp);
int kvpool_sysfs_tenant_added(struct kvpool_tenant *t);
void kvpool_sysfs_tenant_removed(struct kvpool_tenant *t);

/* kvpool_netlink.c */
int kvpool_netlink_init(void);
void kvpool_netlink_exit(void);
void kvpool_netlink_observe(struct kvpool_pool *pool,
			    const struct kvpool_event *ev);

#endif /* KVPOOL_INTERNAL_H */
