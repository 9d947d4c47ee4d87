// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool sysfs, cgroup v2 style, one value per file:
 *
 *   /sys/kernel/kvpool/<pool>/{block_bytes,capacity,backed,used}
 *   /sys/kernel/kvpool/<pool>/{deposits,kept,parked}
 *   /sys/kernel/kvpool/<pool>/tenants/<tenant>/blocks.{max,min,current,peak,events}
 *
 * See Documentation/ABI/testing/sysfs-kernel-kvpool.  Every handler reads
 * or changes the ledger under the pool lock.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/kernel.h>
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "kvpool_internal.h"

static struct kobject *kvpool_root;	/* /sys/kernel/kvpool */

/* ---------------------------------------------------------------- */
/* Pools                                                              */
/* ---------------------------------------------------------------- */

static struct kvpool_dpool *kvpool_kobj_pool(struct kobject *kobj)
{
	return container_of(kobj, struct kvpool_dpool, kobj);
}

enum kvpool_pool_field {
	KVPOOL_PF_BLOCK_BYTES,
	KVPOOL_PF_CAPACITY,
	KVPOOL_PF_BACKED,
	KVPOOL_PF_USED,
	KVPOOL_PF_DEPOSITS,
	KVPOOL_PF_KEPT,
	KVPOOL_PF_PARKED,
};

static ssize_t kvpool_pool_show(struct kobject *kobj, char *buf, int field)
{
	struct kvpool_dpool *dp = kvpool_kobj_pool(kobj);
	struct kvpool_pool *pool;
	ssize_t ret = -ENODEV;

	kvpool_pool_lock(dp);
	pool = dp->core;
	if (!pool)
		goto out;
	switch (field) {
	case KVPOOL_PF_BLOCK_BYTES:
		ret = sysfs_emit(buf, "%llu\n", (unsigned long long)pool->block_bytes);
		break;
	case KVPOOL_PF_CAPACITY:
		ret = sysfs_emit(buf, "%u\n", pool->capacity);
		break;
	case KVPOOL_PF_BACKED:
		ret = sysfs_emit(buf, "%u\n", pool->backed);
		break;
	case KVPOOL_PF_USED:
		ret = sysfs_emit(buf, "%u\n", pool->used);
		break;
	case KVPOOL_PF_DEPOSITS:
		ret = sysfs_emit(buf, "%u\n", dp->ndeposits);
		break;
	case KVPOOL_PF_KEPT:
		ret = sysfs_emit(buf, "%u\n", pool->nkept);
		break;
	case KVPOOL_PF_PARKED:
		ret = sysfs_emit(buf, "%u\n", pool->nparked);
		break;
	}
out:
	kvpool_pool_unlock(dp);
	return ret;
}

#define KVPOOL_POOL_ATTR(_name, _field)					\
static ssize_t _name##_show(struct kobject *kobj,			\
			    struct kobj_attribute *attr, char *buf)	\
{									\
	return kvpool_pool_show(kobj, buf, _field);			\
}									\
static struct kobj_attribute kvpool_pool_attr_##_name = __ATTR_RO(_name)

KVPOOL_POOL_ATTR(block_bytes, KVPOOL_PF_BLOCK_BYTES);
KVPOOL_POOL_ATTR(capacity, KVPOOL_PF_CAPACITY);
KVPOOL_POOL_ATTR(backed, KVPOOL_PF_BACKED);
KVPOOL_POOL_ATTR(used, KVPOOL_PF_USED);
KVPOOL_POOL_ATTR(deposits, KVPOOL_PF_DEPOSITS);
KVPOOL_POOL_ATTR(kept, KVPOOL_PF_KEPT);
KVPOOL_POOL_ATTR(parked, KVPOOL_PF_PARKED);

static struct attribute *kvpool_pool_attrs[] = {
	&kvpool_pool_attr_block_bytes.attr,
	&kvpool_pool_attr_capacity.attr,
	&kvpool_pool_attr_backed.attr,
	&kvpool_pool_attr_used.attr,
	&kvpool_pool_attr_deposits.attr,
	&kvpool_pool_attr_kept.attr,
	&kvpool_pool_attr_parked.attr,
	NULL,
};
ATTRIBUTE_GROUPS(kvpool_pool);

static void kvpool_pool_kobj_release(struct kobject *kobj)
{
	kfree(kvpool_kobj_pool(kobj));
}

static const struct kobj_type kvpool_pool_ktype = {
	.release	= kvpool_pool_kobj_release,
	.sysfs_ops	= &kobj_sysfs_ops,
	.default_groups	= kvpool_pool_groups,
};

/* From here on, kvpool_sysfs_pool_put() frees @dp. */
void kvpool_sysfs_pool_init(struct kvpool_dpool *dp)
{
	kobject_init(&dp->kobj, &kvpool_pool_ktype);
}

int kvpool_sysfs_pool_add(struct kvpool_dpool *dp, const char *name)
{
	int ret;

	ret = kobject_add(&dp->kobj, kvpool_root, "%s", name);
	if (ret)
		return ret;
	dp->tenants_kobj = kobject_create_and_add("tenants", &dp->kobj);
	if (!dp->tenants_kobj) {
		kobject_del(&dp->kobj);
		return -ENOMEM;
	}
	return 0;
}

/* Remove the pool's directory; waits for running handlers. */
void kvpool_sysfs_pool_del(struct kvpool_dpool *dp)
{
	if (dp->tenants_kobj)
		kobject_del(dp->tenants_kobj);
	kobject_del(&dp->kobj);
}

void kvpool_sysfs_pool_put(struct kvpool_dpool *dp)
{
	kobject_put(dp->tenants_kobj);
	dp->tenants_kobj = NULL;
	kobject_put(&dp->kobj);
}

/* ---------------------------------------------------------------- */
/* Tenants                                                            */
/* ---------------------------------------------------------------- */

static struct kvpool_dtenant *kvpool_kobj_tenant(struct kobject *kobj)
{
	return container_of(kobj, struct kvpool_dtenant, kobj);
}

/*
 * Lock the tenant's pool from a sysfs handler.  Active protection is broken
 * first, so that tenant_removed (which removes this directory under the pool
 * lock) never waits for a handler that waits for the pool lock.  Returns the
 * tenant or NULL (removed meanwhile); *kn is for kvpool_tenant_unlock().
 */
static struct kvpool_tenant *kvpool_tenant_lock(struct kobject *kobj,
						struct kobj_attribute *attr,
						struct kernfs_node **kn)
{
	struct kvpool_dtenant *dt = kvpool_kobj_tenant(kobj);

	*kn = sysfs_break_active_protection(kobj, &attr->attr);
	if (!*kn)
		return NULL;
	kvpool_pool_lock(dt->dp);
	if (!dt->t) {
		kvpool_pool_unlock(dt->dp);
		sysfs_unbreak_active_protection(*kn);
		return NULL;
	}
	return dt->t;
}

static void kvpool_tenant_unlock(struct kobject *kobj, struct kernfs_node *kn)
{
	kvpool_pool_unlock(kvpool_kobj_tenant(kobj)->dp);
	sysfs_unbreak_active_protection(kn);
}

/* Parse one u32 written to sysfs, or "max" when @max_ok. */
static int kvpool_parse_limit(const char *buf, bool max_ok, u32 *out)
{
	char word[16];
	size_t len = strcspn(buf, "\n");

	if (!len || len >= sizeof(word) || buf[len + (buf[len] == '\n')])
		return -EINVAL;
	memcpy(word, buf, len);
	word[len] = '\0';
	if (max_ok && !strcmp(word, "max")) {
		*out = KVPOOL_UNLIMITED;
		return 0;
	}
	/* Only the word means unlimited: 4294967295 is a number too big. */
	if (kstrtou32(word, 10, out) || *out == KVPOOL_UNLIMITED)
		return -EINVAL;
	return 0;
}

static ssize_t kvpool_tenant_show(struct kobject *kobj,
				  struct kobj_attribute *attr, char *buf,
				  ssize_t (*emit)(struct kvpool_tenant *, char *))
{
	struct kvpool_tenant *t;
	struct kernfs_node *kn;
	ssize_t ret;

	t = kvpool_tenant_lock(kobj, attr, &kn);
	if (!t)
		return -ENODEV;
	ret = emit(t, buf);
	kvpool_tenant_unlock(kobj, kn);
	return ret;
}

static ssize_t kvpool_tenant_store(struct kobject *kobj,
				   struct kobj_attribute *attr,
				   const char *buf, size_t count, bool max_ok,
				   int (*set)(struct kvpool_tenant *, u32))
{
	struct kvpool_tenant *t;
	struct kernfs_node *kn;
	u32 val;
	int ret;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	ret = kvpool_parse_limit(buf, max_ok, &val);
	if (ret)
		return -EINVAL;
	t = kvpool_tenant_lock(kobj, attr, &kn);
	if (!t)
		return -ENODEV;
	ret = set(t, val);
	kvpool_tenant_unlock(kobj, kn);
	return ret ? ret : count;
}

static ssize_t kvpool_emit_max(struct kvpool_tenant *t, char *buf)
{
	if (t->max == KVPOOL_UNLIMITED)
		return sysfs_emit(buf, "max\n");
	return sysfs_emit(buf, "%u\n", t->max);
}

static ssize_t kvpool_emit_min(struct kvpool_tenant *t, char *buf)
{
	return sysfs_emit(buf, "%u\n", t->min);
}

static ssize_t kvpool_emit_current(struct kvpool_tenant *t, char *buf)
{
	return sysfs_emit(buf, "%u\n", t->cur);
}

static ssize_t kvpool_emit_peak(struct kvpool_tenant *t, char *buf)
{
	return sysfs_emit(buf, "%u\n", t->peak);
}

static ssize_t kvpool_emit_events(struct kvpool_tenant *t, char *buf)
{
	return sysfs_emit(buf, "max %llu\nstall %llu\nreclaim %llu\nfail %llu\n",
			  (unsigned long long)t->ev_max,
			  (unsigned long long)t->ev_stall,
			  (unsigned long long)t->ev_reclaim,
			  (unsigned long long)t->ev_fail);
}

/* blocks.peak accepts only 0: reset the peak to the current value. */
static int kvpool_set_peak(struct kvpool_tenant *t, u32 val)
{
	if (val)
		return -EINVAL;
	kvpool_tenant_reset_peak(t);
	return 0;
}

#define KVPOOL_TENANT_SHOW(_name, _emit)				\
static ssize_t _name##_show(struct kobject *kobj,			\
			    struct kobj_attribute *attr, char *buf)	\
{									\
	return kvpool_tenant_show(kobj, attr, buf, _emit);		\
}

#define KVPOOL_TENANT_STORE(_name, _max_ok, _set)			\
static ssize_t _name##_store(struct kobject *kobj,			\
			     struct kobj_attribute *attr,		\
			     const char *buf, size_t count)		\
{									\
	return kvpool_tenant_store(kobj, attr, buf, count, _max_ok, _set); \
}

KVPOOL_TENANT_SHOW(blocks_max, kvpool_emit_max)
KVPOOL_TENANT_STORE(blocks_max, true, kvpool_tenant_set_max)
KVPOOL_TENANT_SHOW(blocks_min, kvpool_emit_min)
KVPOOL_TENANT_STORE(blocks_min, false, kvpool_tenant_set_min)
KVPOOL_TENANT_SHOW(blocks_current, kvpool_emit_current)
KVPOOL_TENANT_SHOW(blocks_peak, kvpool_emit_peak)
KVPOOL_TENANT_STORE(blocks_peak, false, kvpool_set_peak)
KVPOOL_TENANT_SHOW(blocks_events, kvpool_emit_events)

#define KVPOOL_TENANT_ATTR(_var, _file, _mode, _show, _store)		\
static struct kobj_attribute _var = {					\
	.attr = { .name = _file, .mode = _mode },			\
	.show = _show,							\
	.store = _store,						\
}

KVPOOL_TENANT_ATTR(kvpool_attr_max, "blocks.max", 0644,
		   blocks_max_show, blocks_max_store);
KVPOOL_TENANT_ATTR(kvpool_attr_min, "blocks.min", 0644,
		   blocks_min_show, blocks_min_store);
KVPOOL_TENANT_ATTR(kvpool_attr_current, "blocks.current", 0444,
		   blocks_current_show, NULL);
KVPOOL_TENANT_ATTR(kvpool_attr_peak, "blocks.peak", 0644,
		   blocks_peak_show, blocks_peak_store);
KVPOOL_TENANT_ATTR(kvpool_attr_events, "blocks.events", 0444,
		   blocks_events_show, NULL);

static struct attribute *kvpool_tenant_attrs[] = {
	&kvpool_attr_max.attr,
	&kvpool_attr_min.attr,
	&kvpool_attr_current.attr,
	&kvpool_attr_peak.attr,
	&kvpool_attr_events.attr,
	NULL,
};
ATTRIBUTE_GROUPS(kvpool_tenant);

static void kvpool_tenant_kobj_release(struct kobject *kobj)
{
	kfree(kvpool_kobj_tenant(kobj));
}

static const struct kobj_type kvpool_tenant_ktype = {
	.release	= kvpool_tenant_kobj_release,
	.sysfs_ops	= &kobj_sysfs_ops,
	.default_groups	= kvpool_tenant_groups,
};

/* ops->tenant_added, under the pool lock. */
int kvpool_sysfs_tenant_added(struct kvpool_tenant *t)
{
	struct kvpool_dpool *dp = t->pool->host;
	struct kvpool_dtenant *dt;
	int ret;

	if (!dp->tenants_kobj)
		return -ENODEV;
	dt = kzalloc(sizeof(*dt), GFP_KERNEL);
	if (!dt)
		return -ENOMEM;
	dt->dp = dp;
	dt->t = t;
	ret = kobject_init_and_add(&dt->kobj, &kvpool_tenant_ktype,
				   dp->tenants_kobj, "%s", t->name);
	if (ret) {
		kobject_put(&dt->kobj);
		return ret;
	}
	t->host = dt;
	return 0;
}

/*
 * ops->tenant_removed, under the pool lock.  Removing the directory waits
 * only for handlers that have not broken active protection yet, and those
 * do not hold the pool lock (kvpool_tenant_lock()).
 */
void kvpool_sysfs_tenant_removed(struct kvpool_tenant *t)
{
	struct kvpool_dtenant *dt = t->host;

	if (!dt)
		return;
	t->host = NULL;
	dt->t = NULL;
	kobject_del(&dt->kobj);
	kobject_put(&dt->kobj);
}

/* ---------------------------------------------------------------- */

int kvpool_sysfs_init(void)
{
	kvpool_root = kobject_create_and_add("kvpool", kernel_kobj);
	return kvpool_root ? 0 : -ENOMEM;
}

void kvpool_sysfs_exit(void)
{
	kobject_put(kvpool_root);
	kvpool_root = NULL;
}
