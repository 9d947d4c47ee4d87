// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool generic netlink family "kvpool": tenant administration, pool and
 * tenant queries, and the "event" multicast group for observers.  Every
 * name, command and attribute is in the UAPI header; see
 * Documentation/uapi.rst.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/kernel.h>
#include <linux/string.h>
#include <net/genetlink.h>
#include <net/netlink.h>
#include <net/sock.h>

#include "compat.h"
#include "kvpool_internal.h"

static struct genl_family kvpool_genl_family;
static bool kvpool_genl_live;	/* registered: events may be multicast */

enum kvpool_genl_mcgrp {
	KVPOOL_MCGRP_EVENT,
};

static const struct genl_multicast_group kvpool_genl_mcgrps[] = {
	[KVPOOL_MCGRP_EVENT] = { .name = KVPOOL_GENL_EVENT_GROUP },
};

static const struct nla_policy kvpool_genl_policy[KVPOOL_A_MAXATTR + 1] = {
	[KVPOOL_A_POOL]		= { .type = NLA_NUL_STRING, .len = KVPOOL_NAME_LEN - 1 },
	[KVPOOL_A_TENANT]	= { .type = NLA_NUL_STRING, .len = KVPOOL_NAME_LEN - 1 },
	[KVPOOL_A_MAX]		= { .type = NLA_U32 },
	[KVPOOL_A_MIN]		= { .type = NLA_U32 },
	[KVPOOL_A_UID]		= { .type = NLA_U32 },
	[KVPOOL_A_GID]		= { .type = NLA_U32 },
};

/*
 * @cap in the sender's credentials and in those of the socket's opener.
 * netlink_capable() skips the opener when sendto() names a destination;
 * the opener is checked here in every case.
 */
static bool kvpool_genl_capable(struct sk_buff *skb, int cap)
{
	const struct sock *sk = NETLINK_CB(skb).sk;
	const struct file *file = sk && sk->sk_socket ? sk->sk_socket->file :
				  NULL;

	return file && file_ns_capable(file, &init_user_ns, cap) &&
	       netlink_capable(skb, cap);
}

/* Admin commands need CAP_NET_ADMIN or CAP_SYS_ADMIN. */
static int kvpool_genl_admin(struct sk_buff *skb, struct genl_info *info)
{
	if (kvpool_genl_capable(skb, CAP_NET_ADMIN) ||
	    kvpool_genl_capable(skb, CAP_SYS_ADMIN))
		return 0;
	NL_SET_ERR_MSG(info->extack, "kvpool: needs CAP_NET_ADMIN or CAP_SYS_ADMIN");
	return -EPERM;
}

/* The pool named by KVPOOL_A_POOL (the first pool when absent). */
static struct kvpool_dpool *kvpool_genl_pool(struct nlattr **attrs,
					     struct netlink_ext_ack *extack)
{
	struct kvpool_dpool *dp;
	const char *name = "";

	if (attrs[KVPOOL_A_POOL])
		name = nla_data(attrs[KVPOOL_A_POOL]);
	mutex_lock(&kvpool_global_lock);
	dp = kvpool_find_pool(name);
	mutex_unlock(&kvpool_global_lock);
	if (!dp)
		NL_SET_ERR_MSG_ATTR(extack, attrs[KVPOOL_A_POOL], "kvpool: no such pool");
	return dp;
}

static const char *kvpool_genl_tenant_name(struct genl_info *info)
{
	struct nlattr *a = info->attrs[KVPOOL_A_TENANT];

	if (!a || !*(const char *)nla_data(a)) {
		NL_SET_ERR_MSG(info->extack, "kvpool: tenant name missing");
		return NULL;
	}
	return nla_data(a);
}

static int kvpool_genl_put_tenant(struct sk_buff *skb, struct kvpool_tenant *t)
{
	if (nla_put_string(skb, KVPOOL_A_POOL, t->pool->name) ||
	    nla_put_string(skb, KVPOOL_A_TENANT, t->name) ||
	    nla_put_u32(skb, KVPOOL_A_MAX, t->max) ||
	    nla_put_u32(skb, KVPOOL_A_MIN, t->min) ||
	    nla_put_u32(skb, KVPOOL_A_CURRENT, t->cur) ||
	    nla_put_u32(skb, KVPOOL_A_PEAK, t->peak) ||
	    nla_put_u64_64bit(skb, KVPOOL_A_EV_MAX, t->ev_max, KVPOOL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVPOOL_A_EV_STALL, t->ev_stall, KVPOOL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVPOOL_A_EV_RECLAIM, t->ev_reclaim, KVPOOL_A_PAD) ||
	    nla_put_u64_64bit(skb, KVPOOL_A_EV_FAIL, t->ev_fail, KVPOOL_A_PAD) ||
	    nla_put_u32(skb, KVPOOL_A_UID, t->allow_uid) ||
	    nla_put_u32(skb, KVPOOL_A_GID, t->allow_gid))
		return -EMSGSIZE;
	return 0;
}

static int kvpool_genl_put_pool(struct sk_buff *skb, struct kvpool_pool *pool)
{
	u32 state = pool->owner ? KVPOOL_STATE_LIVE : KVPOOL_STATE_ORPHANED;

	if (nla_put_string(skb, KVPOOL_A_POOL, pool->name) ||
	    nla_put_u64_64bit(skb, KVPOOL_A_BLOCK_BYTES, pool->block_bytes,
			      KVPOOL_A_PAD) ||
	    nla_put_u32(skb, KVPOOL_A_CAPACITY, pool->capacity) ||
	    nla_put_u32(skb, KVPOOL_A_BACKED, pool->backed) ||
	    nla_put_u32(skb, KVPOOL_A_USED, pool->used) ||
	    nla_put_u32(skb, KVPOOL_A_STATE, state) ||
	    nla_put_u32(skb, KVPOOL_A_LEASES, pool->nleases))
		return -EMSGSIZE;
	return 0;
}

/* ---------------------------------------------------------------- */
/* Tenant administration                                              */
/* ---------------------------------------------------------------- */

static int kvpool_genl_tenant_new(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr **attrs = info->attrs;
	u32 max = KVPOOL_UNLIMITED, min = 0;
	u32 uid = KVPOOL_ID_NONE, gid = KVPOOL_ID_NONE;
	struct kvpool_tenant *t;
	struct kvpool_dpool *dp;
	const char *name;
	int ret;

	ret = kvpool_genl_admin(skb, info);
	if (ret)
		return ret;
	name = kvpool_genl_tenant_name(info);
	if (!name)
		return -EINVAL;
	dp = kvpool_genl_pool(attrs, info->extack);
	if (!dp)
		return -ENOENT;
	if (attrs[KVPOOL_A_MAX])
		max = nla_get_u32(attrs[KVPOOL_A_MAX]);
	if (attrs[KVPOOL_A_MIN])
		min = nla_get_u32(attrs[KVPOOL_A_MIN]);
	if (attrs[KVPOOL_A_UID])
		uid = nla_get_u32(attrs[KVPOOL_A_UID]);
	if (attrs[KVPOOL_A_GID])
		gid = nla_get_u32(attrs[KVPOOL_A_GID]);

	kvpool_pool_lock(dp);
	ret = kvpool_tenant_create(dp->core, name, max, min, uid, gid, &t);
	kvpool_pool_unlock(dp);
	return ret;
}

static int kvpool_genl_tenant_del(struct sk_buff *skb, struct genl_info *info)
{
	struct kvpool_dpool *dp;
	const char *name;
	int ret;

	ret = kvpool_genl_admin(skb, info);
	if (ret)
		return ret;
	name = kvpool_genl_tenant_name(info);
	if (!name)
		return -EINVAL;
	dp = kvpool_genl_pool(info->attrs, info->extack);
	if (!dp)
		return -ENOENT;
	kvpool_pool_lock(dp);
	ret = kvpool_tenant_delete(dp->core, name);
	kvpool_pool_unlock(dp);
	return ret;
}

/*
 * Set any of MAX, MIN, UID, GID.  The new limits are checked together
 * (each within the capacity, min not above max) before anything changes,
 * so a refused request changes nothing.
 */
static int kvpool_genl_tenant_set(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr **attrs = info->attrs;
	struct kvpool_tenant *t;
	struct kvpool_dpool *dp;
	const char *name;
	u32 max, min;
	int ret;

	ret = kvpool_genl_admin(skb, info);
	if (ret)
		return ret;
	name = kvpool_genl_tenant_name(info);
	if (!name)
		return -EINVAL;
	dp = kvpool_genl_pool(attrs, info->extack);
	if (!dp)
		return -ENOENT;

	kvpool_pool_lock(dp);
	ret = -ENOENT;
	t = kvpool_tenant_find(dp->core, name);
	if (!t)
		goto out;
	max = attrs[KVPOOL_A_MAX] ? nla_get_u32(attrs[KVPOOL_A_MAX]) : t->max;
	min = attrs[KVPOOL_A_MIN] ? nla_get_u32(attrs[KVPOOL_A_MIN]) : t->min;
	if (attrs[KVPOOL_A_MAX])
		ret = kvpool_tenant_set_limits(t, max, min);
	else if (attrs[KVPOOL_A_MIN])
		ret = kvpool_tenant_set_min(t, min);
	else
		ret = 0;
	if (ret) {
		NL_SET_ERR_MSG(info->extack,
			       "kvpool: limits refused (above the capacity, or min above max)");
		goto out;
	}
	if (attrs[KVPOOL_A_UID])
		t->allow_uid = nla_get_u32(attrs[KVPOOL_A_UID]);
	if (attrs[KVPOOL_A_GID])
		t->allow_gid = nla_get_u32(attrs[KVPOOL_A_GID]);
out:
	kvpool_pool_unlock(dp);
	return ret;
}

/* ---------------------------------------------------------------- */
/* Queries                                                            */
/* ---------------------------------------------------------------- */

static int kvpool_genl_tenant_get(struct sk_buff *skb, struct genl_info *info)
{
	struct kvpool_tenant *t;
	struct kvpool_dpool *dp;
	struct sk_buff *msg;
	const char *name;
	void *hdr;
	int ret;

	name = kvpool_genl_tenant_name(info);
	if (!name)
		return -EINVAL;
	dp = kvpool_genl_pool(info->attrs, info->extack);
	if (!dp)
		return -ENOENT;
	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	hdr = genlmsg_put_reply(msg, info, &kvpool_genl_family, 0,
				KVPOOL_CMD_TENANT_GET);
	ret = -EMSGSIZE;
	if (!hdr)
		goto err;
	kvpool_pool_lock(dp);
	t = kvpool_tenant_find(dp->core, name);
	ret = t ? kvpool_genl_put_tenant(msg, t) : -ENOENT;
	kvpool_pool_unlock(dp);
	if (ret)
		goto err;
	genlmsg_end(msg, hdr);
	return genlmsg_reply(msg, info);
err:
	nlmsg_free(msg);
	return ret;
}

/*
 * Dump every tenant (of KVPOOL_A_POOL if given).  cb->args[0] is the pool
 * position, cb->args[1] the tenant position within it.
 */
static int kvpool_genl_tenant_dump(struct sk_buff *skb,
				   struct netlink_callback *cb)
{
	struct nlattr **attrs = kvpool_genl_dump_attrs(cb);
	struct nlattr *pool_attr = attrs ? attrs[KVPOOL_A_POOL] : NULL;
	struct kvpool_dpool *dp;
	struct kvpool_tenant *t;
	long pi = 0, ti;
	int ret = 0;
	void *hdr;

	mutex_lock(&kvpool_global_lock);
	list_for_each_entry(dp, &kvpool_pools, node) {
		if (pi++ < cb->args[0])
			continue;
		if (pool_attr && strcmp(dp->core->name, nla_data(pool_attr))) {
			cb->args[0] = pi;
			cb->args[1] = 0;
			continue;
		}
		ti = 0;
		kvpool_pool_lock(dp);
		list_for_each_entry(t, &dp->core->tenants, node) {
			if (ti++ < cb->args[1])
				continue;
			hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
					  cb->nlh->nlmsg_seq, &kvpool_genl_family,
					  NLM_F_MULTI, KVPOOL_CMD_TENANT_GET);
			if (!hdr || kvpool_genl_put_tenant(skb, t)) {
				if (hdr)
					genlmsg_cancel(skb, hdr);
				ret = -EMSGSIZE;
				break;
			}
			genlmsg_end(skb, hdr);
			cb->args[1] = ti;
		}
		kvpool_pool_unlock(dp);
		if (ret)
			break;
		cb->args[0] = pi;
		cb->args[1] = 0;
	}
	mutex_unlock(&kvpool_global_lock);
	return skb->len;
}

static int kvpool_genl_pool_get(struct sk_buff *skb, struct genl_info *info)
{
	struct kvpool_dpool *dp;
	struct sk_buff *msg;
	void *hdr;
	int ret;

	dp = kvpool_genl_pool(info->attrs, info->extack);
	if (!dp)
		return -ENOENT;
	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return -ENOMEM;
	hdr = genlmsg_put_reply(msg, info, &kvpool_genl_family, 0,
				KVPOOL_CMD_POOL_GET);
	ret = -EMSGSIZE;
	if (!hdr)
		goto err;
	kvpool_pool_lock(dp);
	ret = kvpool_genl_put_pool(msg, dp->core);
	kvpool_pool_unlock(dp);
	if (ret)
		goto err;
	genlmsg_end(msg, hdr);
	return genlmsg_reply(msg, info);
err:
	nlmsg_free(msg);
	return ret;
}

static int kvpool_genl_pool_dump(struct sk_buff *skb,
				 struct netlink_callback *cb)
{
	struct kvpool_dpool *dp;
	long pi = 0;
	void *hdr;
	int ret;

	mutex_lock(&kvpool_global_lock);
	list_for_each_entry(dp, &kvpool_pools, node) {
		if (pi++ < cb->args[0])
			continue;
		hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid,
				  cb->nlh->nlmsg_seq, &kvpool_genl_family,
				  NLM_F_MULTI, KVPOOL_CMD_POOL_GET);
		if (!hdr)
			break;
		kvpool_pool_lock(dp);
		ret = kvpool_genl_put_pool(skb, dp->core);
		kvpool_pool_unlock(dp);
		if (ret) {
			genlmsg_cancel(skb, hdr);
			break;
		}
		genlmsg_end(skb, hdr);
		cb->args[0] = pi;
	}
	mutex_unlock(&kvpool_global_lock);
	return skb->len;
}

/* ---------------------------------------------------------------- */
/* Events                                                             */
/* ---------------------------------------------------------------- */

/*
 * ops->observe: multicast one event on the "event" group.  Called under the
 * pool lock in process context.  Observers may lose events (no listener
 * memory, full socket buffers); the sequence number shows the gap.
 */
void kvpool_netlink_observe(struct kvpool_pool *pool,
			    const struct kvpool_event *ev)
{
	struct sk_buff *msg;
	void *hdr;

	if (!READ_ONCE(kvpool_genl_live) ||
	    !genl_has_listeners(&kvpool_genl_family, &init_net,
				KVPOOL_MCGRP_EVENT))
		return;
	msg = genlmsg_new(NLMSG_DEFAULT_SIZE, GFP_KERNEL);
	if (!msg)
		return;
	hdr = genlmsg_put(msg, 0, 0, &kvpool_genl_family, 0, KVPOOL_CMD_EVENT);
	if (!hdr)
		goto err;
	if (nla_put_string(msg, KVPOOL_A_POOL, pool->name) ||
	    (ev->tenant[0] &&
	     nla_put_string(msg, KVPOOL_A_TENANT, ev->tenant)) ||
	    nla_put_u32(msg, KVPOOL_A_EVENT_TYPE, ev->type) ||
	    nla_put_u64_64bit(msg, KVPOOL_A_EVENT_SEQ, ev->seq, KVPOOL_A_PAD) ||
	    nla_put_u64_64bit(msg, KVPOOL_A_EVENT_LEASE, ev->lease_id,
			      KVPOOL_A_PAD) ||
	    nla_put_u32(msg, KVPOOL_A_EVENT_BLOCKS, ev->blocks) ||
	    nla_put_u32(msg, KVPOOL_A_EVENT_ARG, ev->arg))
		goto err;
	genlmsg_end(msg, hdr);
	genlmsg_multicast(&kvpool_genl_family, msg, 0, KVPOOL_MCGRP_EVENT,
			  GFP_KERNEL);
	return;
err:
	nlmsg_free(msg);
}

/* ---------------------------------------------------------------- */

static const struct genl_small_ops kvpool_genl_ops[] = {
	{
		.cmd	= KVPOOL_CMD_TENANT_NEW,
		.doit	= kvpool_genl_tenant_new,
	},
	{
		.cmd	= KVPOOL_CMD_TENANT_DEL,
		.doit	= kvpool_genl_tenant_del,
	},
	{
		.cmd	= KVPOOL_CMD_TENANT_SET,
		.doit	= kvpool_genl_tenant_set,
	},
	{
		.cmd	= KVPOOL_CMD_TENANT_GET,
		.doit	= kvpool_genl_tenant_get,
		.dumpit	= kvpool_genl_tenant_dump,
	},
	{
		.cmd	= KVPOOL_CMD_POOL_GET,
		.doit	= kvpool_genl_pool_get,
		.dumpit	= kvpool_genl_pool_dump,
	},
};

static struct genl_family kvpool_genl_family = {
	.name		= KVPOOL_GENL_NAME,
	.version	= KVPOOL_GENL_VERSION,
	.maxattr	= KVPOOL_A_MAXATTR,
	.policy		= kvpool_genl_policy,
	.module		= THIS_MODULE,
	.small_ops	= kvpool_genl_ops,
	.n_small_ops	= ARRAY_SIZE(kvpool_genl_ops),
	.resv_start_op	= KVPOOL_CMD_POOL_GET + 1,
	.mcgrps		= kvpool_genl_mcgrps,
	.n_mcgrps	= ARRAY_SIZE(kvpool_genl_mcgrps),
};

int kvpool_netlink_init(void)
{
	int ret = genl_register_family(&kvpool_genl_family);

	if (!ret)
		WRITE_ONCE(kvpool_genl_live, true);
	return ret;
}

/* Waits for running handlers; no event is multicast afterwards. */
void kvpool_netlink_exit(void)
{
	WRITE_ONCE(kvpool_genl_live, false);
	genl_unregister_family(&kvpool_genl_family);
}
