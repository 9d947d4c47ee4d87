// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool.ko: the misc device /dev/kvpool, hosting the ledger core.
 *
 * This file is glue: it binds open files to pools (as the owner, or as a
 * client lease), copies ioctl arguments, sleeps for grants and owner events,
 * and holds the pool lock around every call into the ledger core, which owns
 * every rule (kvpool_ledger.c).  See Documentation/uapi.rst.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/compat.h>
#include <linux/cred.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/nospec.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/uidgid.h>

#include "kvpool_internal.h"

DEFINE_MUTEX(kvpool_global_lock);
LIST_HEAD(kvpool_pools);

unsigned int kvpool_check_invariants;
module_param_named(check_invariants, kvpool_check_invariants, uint, 0644);
MODULE_PARM_DESC(check_invariants,
		 "tests: walk the whole pool at every Nth unlock and WARN on a broken invariant (0: never)");

enum kvpool_role {
	KVPOOL_ROLE_NONE,	/* not bound to a pool yet */
	KVPOOL_ROLE_OWNER,	/* created or attached to dp */
	KVPOOL_ROLE_CLIENT,	/* holds lease in dp */
};

static const struct file_operations kvpool_fops;

/* Per open file of /dev/kvpool. */
struct kvpool_file {
	int role;			/* enum kvpool_role, set once */
	struct kvpool_dpool *dp;	/* valid once role != NONE */
	struct kvpool_lease *lease;	/* client only */
	wait_queue_head_t reclaim_wq;	/* client: POLLPRI */
};

/* ---------------------------------------------------------------- */
/* Pools and locking                                                  */
/* ---------------------------------------------------------------- */

/* Caller holds kvpool_global_lock.  Empty name: the first pool created. */
struct kvpool_dpool *kvpool_find_pool(const char *name)
{
	struct kvpool_dpool *dp;

	lockdep_assert_held(&kvpool_global_lock);
	list_for_each_entry(dp, &kvpool_pools, node) {
		if (!name[0] || !strcmp(dp->core->name, name))
			return dp;
	}
	return NULL;
}

void kvpool_pool_lock(struct kvpool_dpool *dp)
{
	mutex_lock(&dp->lock);
}

/* Drop the pool lock, checking the whole ledger first when asked to. */
void kvpool_pool_unlock(struct kvpool_dpool *dp)
{
	const char *why = NULL;
	unsigned int every = READ_ONCE(kvpool_check_invariants);

	if (every && dp->core && ++dp->unlocks % every == 0 &&
	    kvpool_pool_check(dp->core, &why))
		WARN(1, "kvpool: pool %s: broken invariant: %s\n",
		     dp->core->name, why ? why : "?");
	mutex_unlock(&dp->lock);
}

static struct kvpool_file *kvpool_lease_file(struct kvpool_lease *lease)
{
	return lease->host;
}

static void kvpool_op_owner_wake(struct kvpool_pool *pool)
{
	struct kvpool_dpool *dp = pool->host;

	WRITE_ONCE(dp->owner_gen, dp->owner_gen + 1);
	wake_up_interruptible_all(&dp->owner_wq);
}

static void kvpool_op_waiters_wake(struct kvpool_pool *pool)
{
	struct kvpool_dpool *dp = pool->host;

	WRITE_ONCE(dp->grant_gen, dp->grant_gen + 1);
	wake_up_all(&dp->grant_wq);
}

static void kvpool_op_reclaim_wake(struct kvpool_lease *lease)
{
	struct kvpool_file *f = kvpool_lease_file(lease);

	if (f)
		wake_up_interruptible_all(&f->reclaim_wq);
}

/* Tenant permission by group: called in the attaching task's context. */
static bool kvpool_op_in_group(const struct kvpool_cred *cred, u32 gid)
{
	kgid_t kgid = make_kgid(&init_user_ns, gid);

	return gid_valid(kgid) && in_egroup_p(kgid);
}

static const struct kvpool_ledger_ops kvpool_ops = {
	.owner_wake	= kvpool_op_owner_wake,
	.waiters_wake	= kvpool_op_waiters_wake,
	.reclaim_wake	= kvpool_op_reclaim_wake,
	.observe	= kvpool_netlink_observe,
	.tenant_added	= kvpool_sysfs_tenant_added,
	.tenant_removed	= kvpool_sysfs_tenant_removed,
	.in_group	= kvpool_op_in_group,
};

static void kvpool_cred_fill(struct kvpool_cred *c)
{
	c->uid = from_kuid_munged(&init_user_ns, current_euid());
	c->gid = from_kgid_munged(&init_user_ns, current_egid());
	c->pid = task_tgid_nr(current);
	c->admin = capable(CAP_SYS_ADMIN);
}

/* A name field must hold a NUL within KVPOOL_NAME_LEN bytes. */
static int kvpool_name_terminated(const char *name)
{
	return memchr(name, '\0', KVPOOL_NAME_LEN) ? 0 : -EINVAL;
}

static bool kvpool_zero(const void *p, size_t len)
{
	return !memchr_inv(p, 0, len);
}

static int kvpool_role(struct kvpool_file *f)
{
	return smp_load_acquire(&f->role);
}

static void kvpool_set_role(struct kvpool_file *f, struct kvpool_dpool *dp,
			    struct kvpool_lease *lease, int role)
{
	f->dp = dp;
	f->lease = lease;
	smp_store_release(&f->role, role);
}

/*
 * Bind an unbound file as a client of the pool called @pool ("" for the
 * first pool) and charge it to its per-uid tenant.  Returns with the file
 * bound, or -errno.  Caller holds kvpool_global_lock.
 */
static int kvpool_client_bind_locked(struct kvpool_file *f, const char *pool)
{
	struct kvpool_lease *lease;
	struct kvpool_dpool *dp;
	struct kvpool_cred cred;
	int ret;

	dp = kvpool_find_pool(pool);
	if (!dp)
		return -ENOENT;
	kvpool_cred_fill(&cred);
	kvpool_pool_lock(dp);
	ret = kvpool_lease_open(dp->core, &cred, &lease);
	if (!ret)
		lease->host = f;
	kvpool_pool_unlock(dp);
	if (ret)
		return ret;
	kvpool_set_role(f, dp, lease, KVPOOL_ROLE_CLIENT);
	return 0;
}

/* The file's lease, binding it lazily to the first pool.  -EPERM: owner. */
static int kvpool_client_get(struct kvpool_file *f)
{
	int ret = 0;

	switch (kvpool_role(f)) {
	case KVPOOL_ROLE_CLIENT:
		return 0;
	case KVPOOL_ROLE_OWNER:
		return -EPERM;
	}
	mutex_lock(&kvpool_global_lock);
	if (f->role == KVPOOL_ROLE_NONE)
		ret = kvpool_client_bind_locked(f, "");
	else if (f->role == KVPOOL_ROLE_OWNER)
		ret = -EPERM;
	mutex_unlock(&kvpool_global_lock);
	return ret;
}

/* ---------------------------------------------------------------- */
/* ioctls                                                             */
/* ---------------------------------------------------------------- */

struct kvpool_ioc_ctx {
	struct kvpool_file *f;
	void __user *uarg;
	size_t usize;
	bool copy_out_on_error;	/* out fields are meaningful on error too */
	bool copied_out;	/* the handler wrote the struct back itself */
};

static long kvpool_ioc_features(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_features *a = data;

	if (!kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	a->supported = KVPOOL_FEATURES_ALL;
	a->enabled = a->requested & KVPOOL_FEATURES_ALL;
	return 0;
}

static long kvpool_ioc_pool_create(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_pool_create *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_pool_params p = {};
	struct kvpool_dpool *dp;
	long ret;

	if (a->flags || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (kvpool_name_terminated(a->name) || !a->name[0])
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;

	memcpy(p.name, a->name, KVPOOL_NAME_LEN);
	p.block_bytes = a->block_bytes;
	p.capacity = a->capacity;
	p.chunk_blocks = a->chunk_blocks;
	p.default_max = a->default_max;

	mutex_lock(&kvpool_global_lock);
	ret = -EBUSY;
	if (f->role != KVPOOL_ROLE_NONE)
		goto out_unlock;
	ret = -EEXIST;
	list_for_each_entry(dp, &kvpool_pools, node) {
		if (!strcmp(dp->core->name, p.name))
			goto out_unlock;
	}

	ret = kvpool_name_valid(p.name);
	if (ret)
		goto out_unlock;
	ret = -ENOMEM;
	dp = kzalloc(sizeof(*dp), GFP_KERNEL);
	if (!dp)
		goto out_unlock;
	mutex_init(&dp->lock);
	init_waitqueue_head(&dp->grant_wq);
	init_waitqueue_head(&dp->owner_wq);
	INIT_LIST_HEAD(&dp->node);
	kvpool_sysfs_pool_init(dp);

	/* sysfs first: the core may add tenants, which need tenants/. */
	ret = kvpool_sysfs_pool_add(dp, p.name);
	if (ret)
		goto out_put;
	kvpool_pool_lock(dp);
	ret = kvpool_pool_create(&p, &kvpool_ops, dp, f, &dp->core);
	if (ret)
		dp->core = NULL;
	else
		a->epoch = dp->core->epoch;
	kvpool_pool_unlock(dp);
	if (ret)
		goto out_del;

	list_add_tail(&dp->node, &kvpool_pools);
	kvpool_set_role(f, dp, NULL, KVPOOL_ROLE_OWNER);
	mutex_unlock(&kvpool_global_lock);
	return 0;

out_del:
	kvpool_sysfs_pool_del(dp);
out_put:
	kvpool_sysfs_pool_put(dp);	/* frees dp */
out_unlock:
	mutex_unlock(&kvpool_global_lock);
	return ret;
}

static long kvpool_ioc_pool_attach(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_pool_attach *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	long ret;

	if (a->flags || a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (kvpool_name_terminated(a->name) || !a->name[0])
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;

	mutex_lock(&kvpool_global_lock);
	ret = -EBUSY;
	if (f->role != KVPOOL_ROLE_NONE)
		goto out;
	ret = -ENOENT;
	dp = kvpool_find_pool(a->name);
	if (!dp)
		goto out;
	kvpool_pool_lock(dp);
	ret = kvpool_owner_attach(dp->core, f);
	if (!ret)
		a->epoch = dp->core->epoch;
	kvpool_pool_unlock(dp);
	if (!ret)
		kvpool_set_role(f, dp, NULL, KVPOOL_ROLE_OWNER);
out:
	mutex_unlock(&kvpool_global_lock);
	return ret;
}

static long kvpool_ioc_resize(struct kvpool_ioc_ctx *c, void *data, bool grow)
{
	struct kvpool_pool_resize *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	long ret;

	if (a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (a->flags & ~(grow ? KVPOOL_GROW_FLAGS : 0))
		return -EINVAL;
	if ((a->flags & KVPOOL_GROW_FAILED) && a->backed)
		return -EINVAL;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;

	dp = f->dp;
	kvpool_pool_lock(dp);
	if (grow)
		ret = kvpool_pool_grow(dp->core, a->backed, a->flags);
	else
		ret = kvpool_pool_shrink(dp->core, a->backed);
	a->used = dp->core->used;
	kvpool_pool_unlock(dp);
	return ret;
}

static long kvpool_ioc_pool_grow(struct kvpool_ioc_ctx *c, void *data)
{
	return kvpool_ioc_resize(c, data, true);
}

static long kvpool_ioc_pool_shrink(struct kvpool_ioc_ctx *c, void *data)
{
	return kvpool_ioc_resize(c, data, false);
}

static long kvpool_ioc_snapshot(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_snapshot *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_lease_info *leases = NULL;
	struct kvpool_block_owner *blocks = NULL;
	struct kvpool_snapshot out;
	struct kvpool_dpool *dp;
	u32 nl = 0, nb = 0;
	int tries;
	long ret;

	if (a->flags || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if ((!a->leases_ptr && a->leases_cap) ||
	    (!a->blocks_ptr && a->blocks_cap))
		return -EINVAL;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;

	/*
	 * Size the kernel buffers from the counts (never from the caller's
	 * capacities, which may be huge), then take the snapshot in the same
	 * locked section that checked the counts; retry if they grew.
	 */
	for (tries = 0; ; tries++) {
		memset(&out, 0, sizeof(out));
		kvpool_pool_lock(dp);
		ret = kvpool_snapshot(dp->core, NULL, 0, NULL, 0, &out);
		if (!ret && (a->leases_ptr || a->blocks_ptr)) {
			if (out.leases > a->leases_cap ||
			    out.blocks > a->blocks_cap)
				ret = -ENOSPC;
			else if (out.leases > nl || out.blocks > nb)
				ret = -EAGAIN;	/* buffers too small: grow */
			else
				ret = kvpool_snapshot(dp->core, leases, nl,
						      blocks, nb, &out);
		}
		kvpool_pool_unlock(dp);
		if (ret != -EAGAIN || tries == 16)
			break;
		kvfree(leases);
		kvfree(blocks);
		/* Some slack for leases opened meanwhile. */
		nl = out.leases + 8;
		nb = min(out.blocks + 64, dp->core->capacity);
		leases = kvcalloc(nl, sizeof(*leases), GFP_KERNEL);
		blocks = kvcalloc(nb, sizeof(*blocks), GFP_KERNEL);
		if (!leases || !blocks) {
			ret = -ENOMEM;
			break;
		}
	}

	a->leases = out.leases;
	a->blocks = out.blocks;
	a->backed = out.backed;
	a->epoch = out.epoch;
	c->copy_out_on_error = (ret == -ENOSPC);
	if (ret || (!a->leases_ptr && !a->blocks_ptr))
		goto out;
	ret = -EFAULT;
	if (out.leases && copy_to_user(u64_to_user_ptr(a->leases_ptr), leases,
				       out.leases * sizeof(*leases)))
		goto out;
	if (out.blocks && copy_to_user(u64_to_user_ptr(a->blocks_ptr), blocks,
				       out.blocks * sizeof(*blocks)))
		goto out;
	ret = 0;
out:
	kvfree(leases);
	kvfree(blocks);
	return ret;
}

/* Copy @count block indices from user space (count already checked). */
static u32 *kvpool_blocks_from_user(u64 uptr, u32 count)
{
	u32 *blocks = kvmalloc_array(count, sizeof(u32), GFP_KERNEL);

	if (!blocks)
		return ERR_PTR(-ENOMEM);
	if (copy_from_user(blocks, u64_to_user_ptr(uptr),
			   (size_t)count * sizeof(u32))) {
		kvfree(blocks);
		return ERR_PTR(-EFAULT);
	}
	return blocks;
}

static long kvpool_ioc_lease_check(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_check *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	u32 *blocks, bad = 0;
	long ret;

	if ((a->flags & ~KVPOOL_LEASE_CHECK_FLAGS) || a->pad ||
	    !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (!a->count || a->count > KVPOOL_IO_MAX_BLOCKS)
		return -EINVAL;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;

	blocks = kvpool_blocks_from_user(a->blocks_ptr, a->count);
	if (IS_ERR(blocks))
		return PTR_ERR(blocks);
	kvpool_pool_lock(dp);
	if (a->flags & KVPOOL_LEASE_CHECK_PIN)
		ret = kvpool_lease_pin(dp->core, a->lease_id, blocks, a->count,
				       &bad);
	else
		ret = kvpool_lease_check(dp->core, a->lease_id, blocks,
					 a->count, &bad);
	/* The tenant the check vouched for, under the same lock. */
	a->tenant_serial = ret ? 0 :
		kvpool_lease_find(dp->core, a->lease_id)->tenant->serial;
	kvpool_pool_unlock(dp);
	kvfree(blocks);
	a->bad_index = ret == -EPERM ? bad : 0;
	c->copy_out_on_error = (ret == -EPERM);
	return ret;
}

static long kvpool_ioc_lease_unpin(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_unpin *a = data;
	struct kvpool_file *f = c->f;
	long ret;

	if (a->flags || a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	kvpool_pool_lock(f->dp);
	ret = kvpool_lease_unpin(f->dp->core, a->lease_id);
	kvpool_pool_unlock(f->dp);
	return ret;
}

static long kvpool_ioc_lease_move(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_move *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	u32 *blocks, bad = 0;
	long ret;

	if (a->flags || a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (!a->count || a->count > KVPOOL_IO_MAX_BLOCKS ||
	    a->from_lease == a->to_lease)
		return -EINVAL;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;

	blocks = kvpool_blocks_from_user(a->blocks_ptr, a->count);
	if (IS_ERR(blocks))
		return PTR_ERR(blocks);
	kvpool_pool_lock(dp);
	ret = kvpool_lease_move(dp->core, a->from_lease, a->to_lease, blocks,
				a->count, &bad);
	kvpool_pool_unlock(dp);
	kvfree(blocks);
	if (ret > 0)
		ret = 0;
	a->bad_index = ret == -EPERM || ret == -EINVAL ? bad : 0;
	c->copy_out_on_error = (ret == -EPERM || ret == -EINVAL);
	return ret;
}

/* KVPOOL_ATTACH_* flags to the core's reclaim order. */
static u32 kvpool_attach_order(u32 flags)
{
	if (flags & KVPOOL_ATTACH_RECLAIM_FIRST)
		return KVPOOL_RECLAIM_FIRST;
	if (flags & KVPOOL_ATTACH_RECLAIM_NEVER)
		return KVPOOL_RECLAIM_NEVER;
	return KVPOOL_RECLAIM_NORMAL;
}

static long kvpool_ioc_tenant_attach(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_tenant_attach *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp, *want;
	struct kvpool_cred cred;
	long ret;

	if ((a->flags & ~KVPOOL_ATTACH_FLAGS) || a->pad ||
	    !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if ((a->flags & KVPOOL_ATTACH_FLAGS) == KVPOOL_ATTACH_FLAGS)
		return -EINVAL;
	if (kvpool_name_terminated(a->pool) || kvpool_name_terminated(a->tenant))
		return -EINVAL;
	if (a->tenant[0] && kvpool_name_valid(a->tenant))
		return -EINVAL;
	/* Checked before anything is bound: a refused call changes nothing. */
	if (a->flags && !capable(CAP_SYS_ADMIN))
		return -EPERM;

	mutex_lock(&kvpool_global_lock);
	ret = -EBUSY;
	if (f->role == KVPOOL_ROLE_OWNER)
		goto out;
	ret = -ENOENT;
	want = kvpool_find_pool(a->pool);
	if (!want)
		goto out;
	if (f->role == KVPOOL_ROLE_NONE) {
		/*
		 * Bound to the pool and its per-uid tenant from here on, even
		 * if the attach below is refused.
		 */
		ret = kvpool_client_bind_locked(f, a->pool);
		if (ret)
			goto out;
	}
	ret = -EBUSY;
	dp = f->dp;
	if (dp != want)
		goto out;

	kvpool_cred_fill(&cred);
	kvpool_pool_lock(dp);
	ret = kvpool_lease_attach(f->lease, a->tenant, &cred);
	if (!ret)
		ret = kvpool_lease_set_reclaim_order(f->lease,
				kvpool_attach_order(a->flags), &cred);
	if (!ret)
		a->lease_id = f->lease->id;
	kvpool_pool_unlock(dp);
out:
	mutex_unlock(&kvpool_global_lock);
	return ret;
}

static long kvpool_ioc_lease(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_req *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_wait w = {};
	struct kvpool_lease *lease;
	struct kvpool_dpool *dp;
	long remain;
	u32 *blocks;
	u64 gen;
	long ret;

	if (a->flags & ~KVPOOL_LEASE_FLAGS)
		return -EINVAL;
	if (a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (!a->count || a->count > KVPOOL_IO_MAX_BLOCKS)
		return -EINVAL;
	ret = kvpool_client_get(f);
	if (ret)
		return ret;
	dp = f->dp;
	lease = f->lease;
	if (a->count > dp->core->capacity && !(a->flags & KVPOOL_LEASE_PARTIAL))
		return -ENOSPC;

	/* A grant never exceeds the capacity. */
	blocks = kvmalloc_array(min(a->count, dp->core->capacity), sizeof(u32),
				GFP_KERNEL);
	if (!blocks)
		return -ENOMEM;

	if (!a->timeout_ns)
		remain = MAX_SCHEDULE_TIMEOUT;
	else
		remain = clamp_t(u64, nsecs_to_jiffies64(a->timeout_ns), 1,
				 MAX_SCHEDULE_TIMEOUT - 1);

	for (;;) {
		kvpool_pool_lock(dp);
		ret = kvpool_lease_grant_pending(lease, a->count, a->flags,
						 blocks, &w);
		gen = dp->grant_gen;
		if (ret != -EAGAIN || (a->flags & KVPOOL_LEASE_NONBLOCK)) {
			kvpool_pool_unlock(dp);
			break;
		}
		kvpool_pool_unlock(dp);

		remain = wait_event_killable_timeout(dp->grant_wq,
				READ_ONCE(dp->grant_gen) != gen, remain);
		if (remain > 0)
			continue;
		ret = remain ? -EINTR : -ETIMEDOUT;
		kvpool_pool_lock(dp);
		kvpool_lease_wait_end(lease, &w, ret);
		kvpool_pool_unlock(dp);
		break;
	}
	if (ret < 0)
		goto out;

	/*
	 * Hand the blocks over, then commit them.  Until the commit they are
	 * pending: no other thread of this file can release them and the
	 * owner cannot pin them, so on a fault the cancel returns exactly
	 * this call's blocks and the ledger is as it was: all or nothing.
	 */
	a->granted = ret;
	if (copy_to_user(u64_to_user_ptr(a->blocks_ptr), blocks,
			 (size_t)a->granted * sizeof(u32)) ||
	    copy_to_user(c->uarg, a, min(c->usize, sizeof(*a)))) {
		kvpool_pool_lock(dp);
		ret = kvpool_lease_grant_cancel(lease, blocks, a->granted, &w);
		kvpool_pool_unlock(dp);
		WARN_ON_ONCE(ret);
		ret = -EFAULT;
		goto out;
	}
	kvpool_pool_lock(dp);
	ret = kvpool_lease_grant_commit(lease, blocks, a->granted);
	kvpool_pool_unlock(dp);
	WARN_ON_ONCE(ret);
	c->copied_out = true;
	ret = 0;
out:
	kvfree(blocks);
	return ret;
}

static long kvpool_ioc_release(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_release *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	u32 *blocks = NULL;
	long ret;

	if (a->flags & ~KVPOOL_RELEASE_FLAGS)
		return -EINVAL;
	if (a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (a->flags & KVPOOL_RELEASE_ALL) {
		if (a->count)
			return -EINVAL;
	} else if (!a->count || a->count > KVPOOL_IO_MAX_BLOCKS) {
		return -EINVAL;
	}
	switch (kvpool_role(f)) {
	case KVPOOL_ROLE_OWNER:
		return -EPERM;
	case KVPOOL_ROLE_NONE:
		/* Holds nothing: every index names a block it does not hold. */
		if (!(a->flags & KVPOOL_RELEASE_ALL))
			return -EINVAL;
		a->released = 0;
		return 0;
	}
	dp = f->dp;

	if (!(a->flags & KVPOOL_RELEASE_ALL)) {
		blocks = kvpool_blocks_from_user(a->blocks_ptr, a->count);
		if (IS_ERR(blocks))
			return PTR_ERR(blocks);
	}
	for (;;) {
		u64 gen;

		kvpool_pool_lock(dp);
		if (blocks)
			ret = kvpool_lease_release(f->lease, blocks, a->count);
		else
			ret = kvpool_lease_release_all(f->lease);
		gen = dp->grant_gen;
		kvpool_pool_unlock(dp);
		if (ret != -EBUSY)
			break;
		/* The owner has the lease pinned: wait for its unpin. */
		if (wait_event_killable(dp->grant_wq,
					READ_ONCE(dp->grant_gen) != gen)) {
			ret = -EINTR;
			break;
		}
	}
	kvfree(blocks);
	if (ret < 0)
		return ret;
	a->released = ret;
	return 0;
}

static long kvpool_ioc_status(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_status *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_lease *lease = NULL;
	struct kvpool_dpool *dp;
	u64 lease_id = a->lease_id;
	bool by_id = a->flags & KVPOOL_STATUS_LEASE;
	int role;

	if ((a->flags & ~KVPOOL_STATUS_FLAGS) || a->pad ||
	    !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;

	role = kvpool_role(f);
	if (by_id && role != KVPOOL_ROLE_OWNER)
		return -EPERM;
	if (role == KVPOOL_ROLE_NONE) {
		mutex_lock(&kvpool_global_lock);
		dp = kvpool_find_pool("");
		mutex_unlock(&kvpool_global_lock);
		if (!dp)
			return -ENOENT;
	} else {
		dp = f->dp;
	}
	memset(a, 0, sizeof(*a));
	kvpool_pool_lock(dp);
	if (role == KVPOOL_ROLE_CLIENT) {
		lease = f->lease;
	} else if (by_id) {
		lease = kvpool_lease_find(dp->core, lease_id);
		if (!lease) {
			kvpool_pool_unlock(dp);
			return -ENOENT;
		}
	}
	kvpool_status_fill(dp->core, lease, a);
	kvpool_pool_unlock(dp);
	return 0;
}

/* ---------------------------------------------------------------- */
/* Deposited files and kept leases (owner only)                       */
/* ---------------------------------------------------------------- */

/*
 * Files a pool may keep: regular files (memfd, tmpfs, hugetlbfs) and
 * character devices (GPU memory exported as a device file), but no kvpool
 * file.  Everything else (sockets, pipes, anonymous inodes: eventfd,
 * epoll, io_uring, pidfd...) may hold other files, a kvpool file among
 * them, and a deposit of it could then keep the module loaded for ever.
 */
static bool kvpool_depositable(struct file *file)
{
	umode_t mode = file_inode(file)->i_mode;

	if (file->f_op == &kvpool_fops)
		return false;
	return S_ISREG(mode) || S_ISCHR(mode);
}

/* Release every deposit of @dp; caller holds the pool lock or owns @dp. */
static void kvpool_deposits_free(struct kvpool_dpool *dp)
{
	u32 i;

	for (i = 0; i < dp->ndeposits; i++)
		fput(dp->deposits[i].file);
	dp->ndeposits = 0;
	kfree(dp->deposits);
	dp->deposits = NULL;
}

static long kvpool_ioc_fd_deposit(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_fd_deposit *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_deposit *d = NULL;
	struct kvpool_dpool *dp;
	struct file *file, *old = NULL;
	long ret;
	u32 i;

	if (a->flags || !kvpool_zero(a->reserved, sizeof(a->reserved)) ||
	    a->tag == KVPOOL_TAG_ALL)
		return -EINVAL;
	/* Not the owner file alone: deposits outlive every process. */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;
	file = fget(a->fd);
	if (!file)
		return -EBADF;
	if (!kvpool_depositable(file)) {
		fput(file);
		return -EINVAL;
	}

	kvpool_pool_lock(dp);
	ret = -ENOMEM;
	if (!dp->deposits) {
		dp->deposits = kcalloc(KVPOOL_DEPOSIT_MAX,
				       sizeof(*dp->deposits), GFP_KERNEL);
		if (!dp->deposits)
			goto out;
	}
	for (i = 0; i < dp->ndeposits; i++) {
		if (dp->deposits[i].tag == a->tag) {
			d = &dp->deposits[i];
			old = d->file;
			break;
		}
	}
	ret = -ENOSPC;
	if (!d) {
		if (dp->ndeposits >= KVPOOL_DEPOSIT_MAX)
			goto out;
		d = &dp->deposits[dp->ndeposits++];
		d->tag = a->tag;
	}
	d->file = file;
	file = NULL;
	ret = 0;
out:
	kvpool_pool_unlock(dp);
	/* Last references go at the return to user space (task work). */
	if (old)
		fput(old);
	if (file)
		fput(file);
	return ret;
}

static long kvpool_ioc_fd_fetch(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_fd_fetch *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_dpool *dp;
	struct file *file = NULL;
	int fd;

	if (a->flags || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	/* A caller that cannot read the descriptor back gets none. */
	if (c->usize < offsetofend(struct kvpool_fd_fetch, count))
		return -EINVAL;
	/* Not the owner file alone: deposits outlive every process. */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;

	kvpool_pool_lock(dp);
	a->count = dp->ndeposits;
	if (a->index < dp->ndeposits) {
		file = get_file(dp->deposits[a->index].file);
		a->tag = dp->deposits[a->index].tag;
	}
	kvpool_pool_unlock(dp);
	if (!file) {
		a->tag = 0;
		a->fd = -1;
		c->copy_out_on_error = true;
		return -ENOENT;
	}
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		fput(file);
		return fd;
	}
	/* The number reaches user space before the descriptor exists. */
	a->fd = fd;
	if (copy_to_user(c->uarg, a, min(c->usize, sizeof(*a)))) {
		put_unused_fd(fd);
		fput(file);
		return -EFAULT;
	}
	c->copied_out = true;
	fd_install(fd, file);
	return 0;
}

static long kvpool_ioc_fd_drop(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_fd_drop *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_deposit *all = NULL;
	struct kvpool_dpool *dp;
	struct file *old = NULL;
	u32 i, n = 0;
	long ret = -ENOENT;

	if (a->flags || a->pad || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	/* Not the owner file alone: deposits outlive every process. */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EPERM;
	dp = f->dp;

	kvpool_pool_lock(dp);
	if (a->tag == KVPOOL_TAG_ALL) {
		if (dp->ndeposits) {
			all = dp->deposits;
			n = dp->ndeposits;
			dp->deposits = NULL;
			dp->ndeposits = 0;
			ret = 0;
		}
	} else {
		for (i = 0; i < dp->ndeposits; i++) {
			if (dp->deposits[i].tag != a->tag)
				continue;
			old = dp->deposits[i].file;
			memmove(&dp->deposits[i], &dp->deposits[i + 1],
				(dp->ndeposits - i - 1) * sizeof(*dp->deposits));
			dp->ndeposits--;
			ret = 0;
			break;
		}
	}
	kvpool_pool_unlock(dp);
	if (old)
		fput(old);
	for (i = 0; i < n; i++)
		fput(all[i].file);
	kfree(all);
	return ret;
}

/*
 * The file of descriptor @fd if it is the owner file of a pool (of @dp,
 * unless NULL), with a reference that keeps it the owner until the
 * caller's fput; ERR_PTR -EBADF (no such descriptor) or -EPERM.
 */
static struct file *kvpool_owner_fget(int fd, struct kvpool_dpool *dp)
{
	struct file *file = fget(fd);
	struct kvpool_file *o;

	if (!file)
		return ERR_PTR(-EBADF);
	if (file->f_op == &kvpool_fops) {
		o = file->private_data;
		if (kvpool_role(o) == KVPOOL_ROLE_OWNER && (!dp || o->dp == dp))
			return file;
	}
	fput(file);
	return ERR_PTR(-EPERM);
}

static long kvpool_ioc_lease_keep(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_keep *a = data;
	struct kvpool_file *f = c->f;
	struct file *owner;
	long ret;

	if ((a->flags & ~KVPOOL_KEEP_FLAGS) ||
	    !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (kvpool_role(f) != KVPOOL_ROLE_CLIENT)
		return -EINVAL;
	owner = kvpool_owner_fget(a->owner_fd, f->dp);
	if (IS_ERR(owner))
		return PTR_ERR(owner);
	kvpool_pool_lock(f->dp);
	ret = kvpool_lease_set_keep(f->lease, a->flags & KVPOOL_KEEP_ON);
	a->lease_id = f->lease->id;
	kvpool_pool_unlock(f->dp);
	fput(owner);
	return ret;
}

static long kvpool_ioc_lease_adopt(struct kvpool_ioc_ctx *c, void *data)
{
	struct kvpool_lease_adopt *a = data;
	struct kvpool_file *f = c->f;
	struct kvpool_lease *lease;
	struct kvpool_dpool *dp;
	struct kvpool_cred cred;
	struct file *owner;
	long ret;

	if (a->flags || !kvpool_zero(a->reserved, sizeof(a->reserved)))
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	owner = kvpool_owner_fget(a->owner_fd, NULL);
	if (IS_ERR(owner))
		return PTR_ERR(owner);
	dp = ((struct kvpool_file *)owner->private_data)->dp;

	kvpool_cred_fill(&cred);
	mutex_lock(&kvpool_global_lock);
	ret = -EBUSY;
	if (f->role != KVPOOL_ROLE_NONE)
		goto out;
	kvpool_pool_lock(dp);
	ret = kvpool_lease_adopt(dp->core, a->lease_id, &cred, &lease);
	if (!ret)
		lease->host = f;
	kvpool_pool_unlock(dp);
	if (!ret)
		kvpool_set_role(f, dp, lease, KVPOOL_ROLE_CLIENT);
out:
	mutex_unlock(&kvpool_global_lock);
	fput(owner);
	return ret;
}

typedef long (*kvpool_ioc_fn)(struct kvpool_ioc_ctx *c, void *data);

struct kvpool_ioc_desc {
	unsigned int cmd;
	kvpool_ioc_fn fn;
};

#define KVPOOL_IOC(_cmd, _fn) [_IOC_NR(_cmd)] = { .cmd = (_cmd), .fn = (_fn) }

static const struct kvpool_ioc_desc kvpool_ioctls[] = {
	KVPOOL_IOC(KVPOOL_IOC_FEATURES, kvpool_ioc_features),
	KVPOOL_IOC(KVPOOL_IOC_POOL_CREATE, kvpool_ioc_pool_create),
	KVPOOL_IOC(KVPOOL_IOC_POOL_ATTACH, kvpool_ioc_pool_attach),
	KVPOOL_IOC(KVPOOL_IOC_POOL_GROW, kvpool_ioc_pool_grow),
	KVPOOL_IOC(KVPOOL_IOC_POOL_SHRINK, kvpool_ioc_pool_shrink),
	KVPOOL_IOC(KVPOOL_IOC_SNAPSHOT, kvpool_ioc_snapshot),
	KVPOOL_IOC(KVPOOL_IOC_LEASE_CHECK, kvpool_ioc_lease_check),
	KVPOOL_IOC(KVPOOL_IOC_LEASE_UNPIN, kvpool_ioc_lease_unpin),
	KVPOOL_IOC(KVPOOL_IOC_TENANT_ATTACH, kvpool_ioc_tenant_attach),
	KVPOOL_IOC(KVPOOL_IOC_LEASE, kvpool_ioc_lease),
	KVPOOL_IOC(KVPOOL_IOC_RELEASE, kvpool_ioc_release),
	KVPOOL_IOC(KVPOOL_IOC_STATUS, kvpool_ioc_status),
	KVPOOL_IOC(KVPOOL_IOC_LEASE_MOVE, kvpool_ioc_lease_move),
	KVPOOL_IOC(KVPOOL_IOC_FD_DEPOSIT, kvpool_ioc_fd_deposit),
	KVPOOL_IOC(KVPOOL_IOC_FD_FETCH, kvpool_ioc_fd_fetch),
	KVPOOL_IOC(KVPOOL_IOC_FD_DROP, kvpool_ioc_fd_drop),
	KVPOOL_IOC(KVPOOL_IOC_LEASE_KEEP, kvpool_ioc_lease_keep),
	KVPOOL_IOC(KVPOOL_IOC_LEASE_ADOPT, kvpool_ioc_lease_adopt),
};

/* Large enough for every argument struct. */
union kvpool_ioc_arg {
	struct kvpool_features features;
	struct kvpool_pool_create create;
	struct kvpool_pool_attach attach;
	struct kvpool_pool_resize resize;
	struct kvpool_snapshot snapshot;
	struct kvpool_lease_check check;
	struct kvpool_lease_unpin unpin;
	struct kvpool_tenant_attach tattach;
	struct kvpool_lease_req lease;
	struct kvpool_release release;
	struct kvpool_status status;
	struct kvpool_lease_move move;
	struct kvpool_fd_deposit deposit;
	struct kvpool_fd_fetch fetch;
	struct kvpool_fd_drop drop;
	struct kvpool_lease_keep keep;
	struct kvpool_lease_adopt adopt;
};

/*
 * dma-heap style dispatcher: look the command up by number, copy
 * min(user size, kernel size) in (a larger user struct must be zero beyond
 * the kernel's, -E2BIG), zero the rest, check that the same amount can be
 * written back, run the command and copy that amount back out.
 */
static long kvpool_ioctl(struct file *file, unsigned int ucmd, unsigned long arg)
{
	const struct kvpool_ioc_desc *d;
	union kvpool_ioc_arg data;
	struct kvpool_ioc_ctx c = {
		.f = file->private_data,
		.uarg = (void __user *)arg,
		.usize = _IOC_SIZE(ucmd),
	};
	unsigned int nr = _IOC_NR(ucmd);
	size_t ksize;
	long ret;

	if (_IOC_TYPE(ucmd) != KVPOOL_IOC_MAGIC || nr >= ARRAY_SIZE(kvpool_ioctls))
		return -ENOTTY;
	nr = array_index_nospec(nr, ARRAY_SIZE(kvpool_ioctls));
	d = &kvpool_ioctls[nr];
	if (!d->fn || _IOC_DIR(ucmd) != _IOC_DIR(d->cmd))
		return -ENOTTY;
	ksize = _IOC_SIZE(d->cmd);

	ret = copy_struct_from_user(&data, ksize, c.uarg, c.usize);
	if (ret)
		return ret;
	/*
	 * Some changes cannot be undone (a release, a new pool): make sure
	 * the struct can be written back before making them, so that EFAULT
	 * means nothing happened.  LEASE also undoes its grant if the copy
	 * out fails later.
	 */
	if (copy_to_user(c.uarg, &data, min(c.usize, ksize)))
		return -EFAULT;
	ret = d->fn(&c, &data);
	if ((!ret || c.copy_out_on_error) && !c.copied_out &&
	    copy_to_user(c.uarg, &data, min(c.usize, ksize)))
		ret = -EFAULT;
	return ret;
}

/* ---------------------------------------------------------------- */
/* read / poll / open / release                                      */
/* ---------------------------------------------------------------- */

#define KVPOOL_READ_BATCH	4	/* records per read() call: 320 bytes of stack */

static ssize_t kvpool_read(struct file *file, char __user *buf, size_t count,
			   loff_t *ppos)
{
	struct kvpool_file *f = file->private_data;
	struct kvpool_event ev[KVPOOL_READ_BATCH];
	struct kvpool_dpool *dp;
	size_t want, n = 0;
	u64 gen;
	int ret;

	if (kvpool_role(f) != KVPOOL_ROLE_OWNER)
		return -EINVAL;
	if (count < sizeof(struct kvpool_event))
		return -EINVAL;
	dp = f->dp;
	want = min_t(size_t, count / sizeof(struct kvpool_event),
		     KVPOOL_READ_BATCH);

	for (;;) {
		kvpool_pool_lock(dp);
		while (n < want && kvpool_owner_read_event(dp->core, &ev[n]) > 0)
			n++;
		gen = dp->owner_gen;
		kvpool_pool_unlock(dp);
		if (n)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(dp->owner_wq,
					       READ_ONCE(dp->owner_gen) != gen);
		if (ret)
			return ret;
	}
	if (copy_to_user(buf, ev, n * sizeof(struct kvpool_event)))
		return -EFAULT;
	return n * sizeof(struct kvpool_event);
}

static __poll_t kvpool_poll(struct file *file, struct poll_table_struct *pt)
{
	struct kvpool_file *f = file->private_data;
	struct kvpool_dpool *dp;
	__poll_t mask = 0;

	switch (kvpool_role(f)) {
	case KVPOOL_ROLE_OWNER:
		dp = f->dp;
		poll_wait(file, &dp->owner_wq, pt);
		kvpool_pool_lock(dp);
		if (kvpool_owner_has_events(dp->core))
			mask |= EPOLLIN | EPOLLRDNORM;
		kvpool_pool_unlock(dp);
		break;
	case KVPOOL_ROLE_CLIENT:
		dp = f->dp;
		poll_wait(file, &f->reclaim_wq, pt);
		kvpool_pool_lock(dp);
		if (f->lease->reclaim_target)
			mask |= EPOLLPRI;
		kvpool_pool_unlock(dp);
		break;
	}
	return mask;
}

static int kvpool_open(struct inode *inode, struct file *file)
{
	struct kvpool_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	init_waitqueue_head(&f->reclaim_wq);
	file->private_data = f;
	return stream_open(inode, file);
}

static int kvpool_release(struct inode *inode, struct file *file)
{
	struct kvpool_file *f = file->private_data;
	struct kvpool_dpool *dp = f->dp;

	switch (f->role) {
	case KVPOOL_ROLE_OWNER:
		kvpool_pool_lock(dp);
		kvpool_owner_detach(dp->core);
		kvpool_pool_unlock(dp);
		break;
	case KVPOOL_ROLE_CLIENT:
		kvpool_pool_lock(dp);
		f->lease->host = NULL;
		kvpool_lease_close(f->lease);
		kvpool_pool_unlock(dp);
		break;
	}
	kfree(f);
	return 0;
}

static const struct file_operations kvpool_fops = {
	.owner		= THIS_MODULE,
	.open		= kvpool_open,
	.release	= kvpool_release,
	.read		= kvpool_read,
	.poll		= kvpool_poll,
	.unlocked_ioctl	= kvpool_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
};

static struct miscdevice kvpool_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= KVPOOL_DEV_NAME,
	.fops	= &kvpool_fops,
	.mode	= 0666,
};

/* ---------------------------------------------------------------- */
/* Module                                                             */
/* ---------------------------------------------------------------- */

static int __init kvpool_init(void)
{
	int ret;

	ret = kvpool_sysfs_init();
	if (ret)
		return ret;
	ret = kvpool_netlink_init();
	if (ret)
		goto err_sysfs;
	ret = misc_register(&kvpool_misc);
	if (ret)
		goto err_netlink;
	return 0;

err_netlink:
	kvpool_netlink_exit();
err_sysfs:
	kvpool_sysfs_exit();
	return ret;
}

/*
 * Only reached when no file of /dev/kvpool is open (the fops hold a module
 * reference), so no lease or owner is left: free every pool, its parked
 * leases and deposited files with it (deposits are never kvpool files, so
 * they cannot hold the module).
 */
static void __exit kvpool_exit(void)
{
	struct kvpool_dpool *dp, *tmp;

	misc_deregister(&kvpool_misc);
	/* No sysfs handler runs after this ... */
	list_for_each_entry(dp, &kvpool_pools, node)
		kvpool_sysfs_pool_del(dp);
	/* ... nor any netlink handler after this. */
	kvpool_netlink_exit();
	list_for_each_entry_safe(dp, tmp, &kvpool_pools, node) {
		list_del(&dp->node);
		kvpool_pool_lock(dp);
		kvpool_pool_destroy(dp->core);
		dp->core = NULL;
		kvpool_deposits_free(dp);
		kvpool_pool_unlock(dp);
		kvpool_sysfs_pool_put(dp);
	}
	kvpool_sysfs_exit();
}

module_init(kvpool_init);
module_exit(kvpool_exit);

MODULE_DESCRIPTION("kvpool: a ledger of GPU KV-cache blocks shared by many processes");
MODULE_LICENSE("GPL");
