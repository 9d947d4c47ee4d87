// SPDX-License-Identifier: MIT
/*
 * tenants.c - named tenants the daemon's configuration declares, in every
 * pool (tier) it owns and in either ledger: the in-process core (under the
 * pool's lock, through the same calls as the admin socket) or the module,
 * through its generic netlink family "kvpool" (the daemon keeps
 * CAP_SYS_ADMIN with the module, which the family's admin commands
 * accept).
 *
 * A tenant declared without a pool has its limits in the top pool and is
 * also created, with no limit, in every lower pool that does not have it
 * (so that it can swap); one declared as POOL/NAME has its limits in that
 * pool, and wins there over the implicit entry.
 *
 * kvd_tenants_apply() brings the ledger in line with a declared list: it
 * creates what is missing, sets max/min/uid/gid where they differ, and
 * deletes the tenants an earlier list declared and this one does not, when
 * they hold nothing (a tenant with leases is kept until a later reload
 * finds it idle).  Leases are never touched: a lower max posts reclaim, as
 * `kvpoolctl tenant set` does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef KVD_HAVE_LIBNL
#include <netlink/errno.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#endif

#include "config.h"
#include "inproc.h"
#include "core.h"
#include "ledger.h"
#include "tenants.h"
#include "prefix.h"

/* ---- the module: generic netlink ---------------------------------------- */

#ifdef KVD_HAVE_LIBNL
struct kvnl {
	struct nl_sock *sk;
	int family;
};

static int kvnl_errno(int e)
{
	switch (e < 0 ? -e : e) {
	case NLE_SUCCESS: return 0;
	case NLE_PERM: return -EPERM;
	case NLE_NOACCESS: return -EACCES;
	case NLE_OBJ_NOTFOUND: return -ENOENT;
	case NLE_EXIST: return -EEXIST;
	case NLE_BUSY: return -EBUSY;
	case NLE_INVAL: return -EINVAL;
	case NLE_RANGE: return -ERANGE;
	case NLE_NOMEM: return -ENOMEM;
	case NLE_AGAIN: return -EAGAIN;
	case NLE_OPNOTSUPP: return -EOPNOTSUPP;
	default: return -EIO;
	}
}

static int kvnl_open(struct kvnl *n)
{
	int r;

	n->sk = nl_socket_alloc();
	if (!n->sk)
		return -ENOMEM;
	r = genl_connect(n->sk);
	if (!r)
		r = genl_ctrl_resolve(n->sk, KVPOOL_GENL_NAME);
	if (r < 0) {
		nl_socket_free(n->sk);
		n->sk = NULL;
		return r == -NLE_OBJ_NOTFOUND ? -ENOENT : kvnl_errno(r);
	}
	n->family = r;
	return 0;
}

static void kvnl_close(struct kvnl *n)
{
	if (n->sk)
		nl_socket_free(n->sk);
	n->sk = NULL;
}

static struct nl_msg *kvnl_new(struct kvnl *n, uint8_t cmd, int flags,
			     const char *pool)
{
	struct nl_msg *m = nlmsg_alloc();

	if (!m)
		return NULL;
	if (!genlmsg_put(m, NL_AUTO_PORT, NL_AUTO_SEQ, n->family, 0, flags,
			 cmd, KVPOOL_GENL_VERSION) ||
	    nla_put_string(m, KVPOOL_A_POOL, pool) < 0) {
		nlmsg_free(m);
		return NULL;
	}
	return m;
}

/* TENANT_NEW / TENANT_SET / TENANT_DEL with an acknowledgement. */
static int kvnl_tenant(struct kvnl *n, const char *pool, uint8_t cmd,
		       const struct kvd_tenant_conf *t)
{
	struct nl_msg *m = kvnl_new(n, cmd, NLM_F_ACK, pool);
	int r;

	if (!m)
		return -ENOMEM;
	if (nla_put_string(m, KVPOOL_A_TENANT, t->name) < 0 ||
	    (cmd != KVPOOL_CMD_TENANT_DEL &&
	     (nla_put_u32(m, KVPOOL_A_MAX, t->max) < 0 ||
	      nla_put_u32(m, KVPOOL_A_MIN, t->min) < 0 ||
	      nla_put_u32(m, KVPOOL_A_UID, t->uid) < 0 ||
	      nla_put_u32(m, KVPOOL_A_GID, t->gid) < 0))) {
		nlmsg_free(m);
		return -EMSGSIZE;
	}
	r = nl_send_sync(n->sk, m);	/* frees m */
	return kvnl_errno(r);
}

struct dump {
	struct kvp_tenant_rec *out;
	uint32_t cap, n;
	int err;
};

static uint32_t attr_u32(struct nlattr **tb, int a, uint32_t dflt)
{
	return tb[a] ? nla_get_u32(tb[a]) : dflt;
}

static uint64_t attr_u64(struct nlattr **tb, int a)
{
	return tb[a] ? nla_get_u64(tb[a]) : 0;
}

static int dump_cb(struct nl_msg *msg, void *arg)
{
	struct nlattr *tb[KVPOOL_A_MAXATTR + 1];
	struct dump *dp = arg;
	struct kvp_tenant_rec *o;

	if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, KVPOOL_A_MAXATTR, NULL) < 0) {
		dp->err = -EBADMSG;
		return NL_SKIP;
	}
	if (!tb[KVPOOL_A_TENANT])
		return NL_OK;
	if (dp->n++ >= dp->cap)
		return NL_OK;
	o = &dp->out[dp->n - 1];
	memset(o, 0, sizeof(*o));
	strncpy(o->name, nla_get_string(tb[KVPOOL_A_TENANT]),
		sizeof(o->name) - 1);
	o->max = attr_u32(tb, KVPOOL_A_MAX, KVPOOL_UNLIMITED);
	o->min = attr_u32(tb, KVPOOL_A_MIN, 0);
	o->current = attr_u32(tb, KVPOOL_A_CURRENT, 0);
	o->peak = attr_u32(tb, KVPOOL_A_PEAK, 0);
	o->ev_max = attr_u64(tb, KVPOOL_A_EV_MAX);
	o->ev_stall = attr_u64(tb, KVPOOL_A_EV_STALL);
	o->ev_reclaim = attr_u64(tb, KVPOOL_A_EV_RECLAIM);
	o->ev_fail = attr_u64(tb, KVPOOL_A_EV_FAIL);
	o->uid = attr_u32(tb, KVPOOL_A_UID, KVPOOL_ID_NONE);
	o->gid = attr_u32(tb, KVPOOL_A_GID, KVPOOL_ID_NONE);
	o->leases = attr_u32(tb, KVPOOL_A_LEASES, 0);
	return NL_OK;
}

static int kvnl_dump(struct kvnl *n, const char *pool,
		     struct kvp_tenant_rec *out, uint32_t cap)
{
	struct dump dp = { .out = out, .cap = cap };
	struct nl_msg *m = kvnl_new(n, KVPOOL_CMD_TENANT_GET, NLM_F_DUMP,
				    pool);
	int r;

	if (!m)
		return -ENOMEM;
	r = nl_send_auto(n->sk, m);
	nlmsg_free(m);
	if (r < 0)
		return kvnl_errno(r);
	nl_socket_modify_cb(n->sk, NL_CB_VALID, NL_CB_CUSTOM, dump_cb, &dp);
	r = nl_recvmsgs_default(n->sk);
	if (r < 0)
		return kvnl_errno(r);
	if (dp.err)
		return dp.err;
	return (int)dp.n;
}
#else	/* built without libnl-genl-3: no tenants in the module's pools */
struct kvnl {
	int unused;
};

static int kvnl_open(struct kvnl *n)
{
	kvd_log(KVD_ERR, "tenants: this kvpoold was built without libnl-genl-3 "
		"and cannot manage the module's tenants");
	return -EOPNOTSUPP;
}

static void kvnl_close(struct kvnl *n)
{
}

static int kvnl_tenant(struct kvnl *n, const char *pool, uint8_t cmd,
		       const struct kvd_tenant_conf *t)
{
	return -EOPNOTSUPP;
}

static int kvnl_dump(struct kvnl *n, const char *pool,
		     struct kvp_tenant_rec *out, uint32_t cap)
{
	return -EOPNOTSUPP;
}
#endif

/* ---- either ledger -------------------------------------------------------- */

int kvd_tenant_list(struct kvd_pool *p, struct kvp_tenant_rec *out,
		    uint32_t cap)
{
	struct kvnl n;
	uint32_t total = 0;
	int r;

	if (p->d->mode == KVP_MODE_INPROC) {
		r = kvd_ip_tenant_list(p, out, 0, cap, &total);
		return r < 0 ? r : (int)total;
	}
	r = kvnl_open(&n);
	if (r)
		return r;
	r = kvnl_dump(&n, p->name, out, cap);
	kvnl_close(&n);
	return r;
}

/* Every tenant of pool p, in a malloc'd array: the count, or -errno. */
static int tenant_list_all(struct kvd_pool *p, struct kvp_tenant_rec **out)
{
	struct kvp_tenant_rec *buf = NULL, *nb;
	uint32_t cap = 64;
	int r = -EAGAIN, tries;

	for (tries = 0; tries < 8; tries++) {
		nb = realloc(buf, (size_t)cap * sizeof(*buf));
		if (!nb) {
			r = -ENOMEM;
			break;
		}
		buf = nb;
		r = kvd_tenant_list(p, buf, cap);
		if (r < 0)
			break;
		if ((uint32_t)r <= cap) {
			*out = buf;
			return r;
		}
		cap = (uint32_t)r + 64;		/* more arrived: again */
		r = -EAGAIN;
	}
	free(buf);
	return r;
}

int kvd_tenant_exists(struct kvd_pool *p, const char *name)
{
	struct kvp_tenant_rec *all;
	int n = tenant_list_all(p, &all), i, r = 0;

	if (n < 0)
		return n;
	for (i = 0; i < n && !r; i++)
		r = !strncmp(all[i].name, name, KVPOOL_NAME_LEN);
	free(all);
	return r;
}

int kvd_tenants_visible(struct kvd *d, uint32_t uid, const uint32_t *gids,
			int ngids, char (**names)[KVPOOL_NAME_LEN])
{
	struct kvp_tenant_rec *all;
	int n = tenant_list_all(d->top, &all), i, j, k = 0;

	if (n < 0)
		return n;
	*names = calloc((size_t)n + 1, KVPOOL_NAME_LEN);
	if (!*names) {
		free(all);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		bool may = all[i].uid != KVPOOL_ID_NONE && all[i].uid == uid;

		for (j = 0; j < ngids && !may; j++)
			may = all[i].gid != KVPOOL_ID_NONE &&
			      all[i].gid == gids[j];
		if (may)
			memcpy((*names)[k++], all[i].name, KVPOOL_NAME_LEN);
	}
	free(all);
	return k;
}

static void to_wire(const struct kvd_tenant_conf *t, const char *pool,
		    struct kvp_tenant *w)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->pool, pool, sizeof(w->pool));
	memcpy(w->name, t->name, sizeof(w->name));
	w->max = t->max;
	w->min = t->min;
	w->uid = t->uid;
	w->gid = t->gid;
}

/* Create t in pool p, or (unless create_only) set its limits if it
 * exists there. */
static int tenant_put(struct kvd_pool *p, struct kvnl *n,
		      const struct kvd_tenant_conf *t, bool create_only)
{
	struct kvp_tenant w;
	int r;

	if (p->d->mode == KVP_MODE_INPROC) {
		to_wire(t, p->name, &w);
		r = kvd_ip_tenant_op(p->d, KVP_OP_TENANT_ADD, &w);
		if (r == -EEXIST)
			r = create_only ? 0 :
			    kvd_ip_tenant_op(p->d, KVP_OP_TENANT_SET, &w);
		return r;
	}
	r = kvnl_tenant(n, p->name, KVPOOL_CMD_TENANT_NEW, t);
	if (r == -EEXIST)
		r = create_only ? 0 :
		    kvnl_tenant(n, p->name, KVPOOL_CMD_TENANT_SET, t);
	return r;
}

struct del_arg {
	struct kvd *d;
	struct kvnl *n;
	const struct kvd_tenant_ref *ref;
};

static int tenant_del_now(void *arg)
{
	struct del_arg *a = arg;
	struct kvd_tenant_conf t;
	struct kvp_tenant w;

	memset(&t, 0, sizeof(t));
	memcpy(t.name, a->ref->name, sizeof(t.name));
	if (a->d->mode == KVP_MODE_INPROC) {
		to_wire(&t, a->ref->pool, &w);
		return kvd_ip_tenant_op(a->d, KVP_OP_TENANT_DEL, &w);
	}
	return kvnl_tenant(a->n, a->ref->pool, KVPOOL_CMD_TENANT_DEL, &t);
}

/* In the top pool, the tenant's prefix cache goes first and its record
 * with it (kvd_prefix_tenant_del), as with the socket's TENANT_DEL. */
static int tenant_del(struct kvd *d, struct kvnl *n,
		      const struct kvd_tenant_ref *ref)
{
	struct del_arg a = { d, n, ref };

	if (kvd_pool_by_name(d, ref->pool) == d->top)
		return kvd_prefix_tenant_del(d, ref->name, tenant_del_now, &a);
	return tenant_del_now(&a);
}

/* "FILE: line N: " for a tenant of the file, "--tenant: " for a flag's. */
static void where(struct kvd *d, const struct kvd_tenant_conf *t, char *buf,
		  size_t len)
{
	if (t->line)
		snprintf(buf, len, "%s: line %d: ", d->o.config_path ?
			 d->o.config_path : KVD_CONF_DEFAULT, t->line);
	else
		snprintf(buf, len, "--tenant: ");
}

/* The pool a declared tenant has its limits in (NULL: no such pool). */
static struct kvd_pool *conf_pool(struct kvd *d,
				  const struct kvd_tenant_conf *t)
{
	return kvd_pool_by_name(d, t->pool);
}

int kvd_tenants_check(struct kvd *d, const struct kvd_tenant_conf *t, int n)
{
	struct kvd_pool *p;
	char at[320];
	int i;

	for (i = 0; i < n; i++) {
		where(d, &t[i], at, sizeof(at));
		p = conf_pool(d, &t[i]);
		if (!p) {
			kvd_log(KVD_ERR, "%stenant %s/%s: the daemon has no "
				"pool %s", at, t[i].pool, t[i].name,
				t[i].pool);
			return -EINVAL;
		}
		if (t[i].max != KVPOOL_UNLIMITED && t[i].max > p->capacity) {
			kvd_log(KVD_ERR, "%stenant %s: max %u is above pool "
				"%s's capacity %u", at, t[i].name, t[i].max,
				p->name, p->capacity);
			return -EINVAL;
		}
		if (t[i].min > p->capacity) {
			kvd_log(KVD_ERR, "%stenant %s: min %u is above pool "
				"%s's capacity %u", at, t[i].name, t[i].min,
				p->name, p->capacity);
			return -EINVAL;
		}
	}
	return 0;
}

/* Is (pool, name) in refs[0..n)? */
static bool ref_in(const struct kvd_tenant_ref *refs, int n,
		   const char *pool, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(refs[i].pool, pool) && !strcmp(refs[i].name, name))
			return true;
	return false;
}

/* Is name declared for pool q explicitly (q/name)? */
static bool explicit_in(struct kvd *d, const struct kvd_tenant_conf *t,
			int n, const struct kvd_pool *q, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (t[i].pool[0] && conf_pool(d, &t[i]) == q &&
		    !strcmp(t[i].name, name))
			return true;
	return false;
}

static void ref_add(struct kvd_tenant_ref *refs, int *n, const char *pool,
		    const char *name)
{
	if (ref_in(refs, *n, pool, name))
		return;
	snprintf(refs[*n].pool, sizeof(refs[*n].pool), "%s", pool);
	snprintf(refs[*n].name, sizeof(refs[*n].name), "%s", name);
	(*n)++;
}

/* Put one declared tenant in its pool (and, without a pool, in every
 * lower one); the pairs it now has go into keep. */
static int tenant_declare(struct kvd *d, struct kvnl *nl,
			  const struct kvd_tenant_conf *t,
			  const struct kvd_tenant_conf *all, int n,
			  struct kvd_tenant_ref *keep, int *nkeep)
{
	struct kvd_pool *p = conf_pool(d, t);
	struct kvd_tenant_conf lower;
	unsigned int k;
	char at[320];
	int r, err = 0;

	where(d, t, at, sizeof(at));
	r = tenant_put(p, nl, t, false);
	if (r) {
		kvd_log(KVD_ERR, "%stenant %s in %s: %s", at, t->name, p->name,
			strerror(-r));
		return r;
	}
	ref_add(keep, nkeep, p->name, t->name);
	if (t->max == KVPOOL_UNLIMITED)
		kvd_log(KVD_INFO, "tenant %s in %s: max max min %u", t->name,
			p->name, t->min);
	else
		kvd_log(KVD_INFO, "tenant %s in %s: max %u min %u", t->name,
			p->name, t->max, t->min);
	if (t->pool[0])
		return 0;
	lower = *t;
	lower.max = KVPOOL_UNLIMITED;
	lower.min = 0;
	for (k = 0; k < d->npools; k++) {
		struct kvd_pool *q = &d->pools[k];

		if (q == d->top || explicit_in(d, all, n, q, t->name))
			continue;
		r = tenant_put(q, nl, &lower, true);
		if (r) {
			kvd_log(KVD_ERR, "%stenant %s in %s: %s", at, t->name,
				q->name, strerror(-r));
			if (!err)
				err = r;
			continue;
		}
		ref_add(keep, nkeep, q->name, t->name);
	}
	return err;
}

int kvd_tenants_apply(struct kvd *d, const struct kvd_tenant_conf *t, int n)
{
	struct kvd_tenant_ref *keep;
	struct kvnl nl = { 0 };
	int i, j, nkeep = 0, r, err = 0;

	r = kvd_tenants_check(d, t, n);
	if (r)
		return r;
	if (d->mode == KVP_MODE_MODULE && (n || d->nconf_tenants)) {
		r = kvnl_open(&nl);
		if (r) {
			kvd_log(KVD_ERR, "generic netlink family %s: %s",
				KVPOOL_GENL_NAME, strerror(-r));
			return r;
		}
	}
	keep = calloc((size_t)n * d->npools + (size_t)d->nconf_tenants + 1,
		      sizeof(*keep));
	if (!keep) {
		kvnl_close(&nl);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		r = tenant_declare(d, &nl, &t[i], t, n, keep, &nkeep);
		if (r && !err)
			err = r;
	}
	/* Declared before, not now: delete it once it is idle. */
	for (j = 0; j < d->nconf_tenants; j++) {
		const struct kvd_tenant_ref *ref = &d->conf_tenants[j];

		if (ref_in(keep, nkeep, ref->pool, ref->name))
			continue;
		r = tenant_del(d, &nl, ref);
		if (r == -EBUSY) {
			kvd_log(KVD_NOTICE, "tenant %s in %s is no longer "
				"configured but holds blocks: kept until a "
				"reload finds it idle", ref->name, ref->pool);
			keep[nkeep++] = *ref;
		} else if (r && r != -ENOENT) {
			kvd_log(KVD_WARN, "tenant %s in %s: delete: %s",
				ref->name, ref->pool, strerror(-r));
			keep[nkeep++] = *ref;
		} else if (!r) {
			kvd_log(KVD_INFO, "tenant %s in %s deleted (no longer "
				"configured)", ref->name, ref->pool);
		}
	}
	kvnl_close(&nl);
	free(d->conf_tenants);
	d->conf_tenants = keep;
	d->nconf_tenants = nkeep;
	return err;
}
