// SPDX-License-Identifier: MIT
/*
 * kvl_admin.c - libkvlease's admin API (kvl_admin_*): tenants, pool status
 * and clients, for kvpoolctl and kvpool-bench.
 *
 * Two transports, picked at kvl_admin_open():
 *  - the module: when /dev/kvpool exists and the generic netlink family
 *    "kvpool" resolves, tenant and pool ops go over generic netlink
 *    (libnl-genl-3); pool and tenant figures fall back to sysfs
 *    (/sys/kernel/kvpool) if a netlink read fails.  The client list comes
 *    from kvpoold (the pool's owner) when it is running.
 *  - the daemon: otherwise every op is a KVP_OP_* admin record on kvpoold's
 *    socket (include/kvpool_proto.h), answered by its in-process ledger.
 * With neither, kvl_admin_open() fails with -ECONNREFUSED.
 * Built without libnl (no headers at build time), the module transport is
 * never picked: admin ops go to kvpoold's socket.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef KVL_HAVE_LIBNL
#include <netlink/errno.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#endif

#include <linux/kvpool.h>

#include "kvlease.h"
#include "kvpool_proto.h"

#define KVL_SYSFS_ROOT		"/sys/kernel/kvpool"
#define ADMIN_RECV_TIMEOUT_S	10

struct kvl_admin {
	int mode;		/* KVL_MODE_MODULE or KVL_MODE_DAEMON */
	int sock;		/* daemon socket, -1 if none */
	uint32_t req_id;
	struct nl_sock *nl;	/* module mode */
	int family;
	_Alignas(8) char msg[KVP_MSG_MAX];	/* one request or reply */
	_Alignas(8) char list[KVP_MSG_MAX];	/* one page of a list reply */
};

/* ---------------------------------------------------------------- */
/* Daemon socket                                                    */
/* ---------------------------------------------------------------- */

static int daemon_connect(const char *path, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = ADMIN_RECV_TIMEOUT_S };
	int fd, err;

	if (!path || !*path)
		path = getenv(KVL_SOCKET_ENV);
	if (!path || !*path)
		path = KVL_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		close(fd);
		/* no socket file or nobody listening: no daemon */
		if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR)
			return -ECONNREFUSED;
		return -err;
	}
	*out = fd;
	return 0;
}

/*
 * The connection was closed on us: if the daemon refused it (connection
 * limits), its KVP_EV_REFUSED record may still be queued; return its
 * status, else @err.
 */
static int refused_status(struct kvl_admin *a, int err)
{
	struct kvp_reply *r = (struct kvp_reply *)a->msg;
	ssize_t n = recv(a->sock, a->msg, sizeof(a->msg), MSG_DONTWAIT);

	if (n >= (ssize_t)sizeof(*r) && r->hdr.magic == KVP_MAGIC &&
	    r->hdr.op == KVP_EV_REFUSED && r->status < 0)
		return r->status;
	return err;
}

/*
 * One request/reply on the daemon socket.  body/blen: request body.
 * rbuf/rcap: where the reply body goes; *rlen its length.  Returns the
 * reply status (>= 0) or -errno.
 */
static int daemon_call(struct kvl_admin *a, uint16_t op, const void *body,
		       size_t blen, void *rbuf, size_t rcap, size_t *rlen)
{
	char *msg = a->msg;
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	struct kvp_reply *r = (struct kvp_reply *)msg;
	uint32_t id;
	ssize_t n;

	if (a->sock < 0)
		return -ENOTCONN;
	if (sizeof(*h) + blen > sizeof(a->msg))
		return -EMSGSIZE;
	id = ++a->req_id;
	if (!id)
		id = ++a->req_id;
	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = id;
	if (blen)
		memcpy(msg + sizeof(*h), body, blen);
	n = send(a->sock, msg, h->len, MSG_NOSIGNAL);
	if (n < 0) {
		int e = errno;

		/* Closed on us: a refusal may be waiting to be read. */
		if (e == EPIPE || e == ECONNRESET)
			return refused_status(a, -ECONNRESET);
		return -e;
	}
	for (;;) {
		n = recv(a->sock, msg, sizeof(a->msg), 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ECONNRESET)
				return refused_status(a, -ECONNRESET);
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		if ((size_t)n < sizeof(struct kvp_hdr) || h->magic != KVP_MAGIC)
			return -EBADMSG;
		/* The daemon refused the connection (limits): say why. */
		if (h->op == KVP_EV_REFUSED && (size_t)n >= sizeof(*r))
			return r->status < 0 ? r->status : -ECONNREFUSED;
		if (!(h->op & KVP_REPLY) || h->req_id != id)
			continue;	/* asynchronous record or stale reply */
		if ((size_t)n < sizeof(*r) || h->op != (op | KVP_REPLY))
			return -EBADMSG;
		if (r->status < 0)
			return r->status;
		if (rbuf) {
			size_t len = (size_t)n - sizeof(*r);

			if (len > rcap)
				len = rcap;
			memcpy(rbuf, msg + sizeof(*r), len);
			if (rlen)
				*rlen = len;
		}
		return r->status;
	}
}

static void copy_name(char *dst, const char *src, size_t len)
{
	size_t n = src ? strnlen(src, len - 1) : 0;

	memset(dst, 0, len);
	if (n)
		memcpy(dst, src, n);
}

static int check_name(const char *name, bool empty_ok)
{
	size_t n;

	if (!name || !*name)
		return empty_ok ? 0 : -EINVAL;
	n = strlen(name);
	if (n >= KVPOOL_NAME_LEN)
		return -ENAMETOOLONG;
	return 0;
}

static int daemon_tenant(struct kvl_admin *a, uint16_t op, const char *pool,
			 const char *name, uint32_t max, uint32_t min,
			 uint32_t uid, uint32_t gid)
{
	struct kvp_tenant t;
	int ret;

	memset(&t, 0, sizeof(t));
	copy_name(t.pool, pool, sizeof(t.pool));
	copy_name(t.name, name, sizeof(t.name));
	t.max = max;
	t.min = min;
	t.uid = uid;
	t.gid = gid;
	ret = daemon_call(a, op, &t, sizeof(t), NULL, 0, NULL);
	return ret < 0 ? ret : 0;
}

/* Pages a list op; calls fill(i, rec) for entries below cap. */
static int daemon_list(struct kvl_admin *a, uint16_t op, const char *pool,
		       size_t rec_size, void *out, size_t out_size, size_t cap,
		       void (*fill)(void *out, size_t i, const void *rec))
{
	char *buf = a->list;
	struct kvp_list req;
	struct kvp_list_reply *lr = (struct kvp_list_reply *)buf;
	uint32_t total = 0, got = 0, i;
	size_t len;
	int ret;

	(void)out_size;
	do {
		memset(&req, 0, sizeof(req));
		copy_name(req.pool, pool, sizeof(req.pool));
		req.start = got;
		len = 0;
		ret = daemon_call(a, op, &req, sizeof(req), buf,
				  sizeof(a->list), &len);
		if (ret < 0)
			return ret;
		if (len < sizeof(*lr) ||
		    len < sizeof(*lr) + (size_t)lr->count * rec_size)
			return -EBADMSG;
		total = lr->total;
		for (i = 0; i < lr->count; i++) {
			if (got + i < cap)
				fill(out, got + i,
				     buf + sizeof(*lr) + i * rec_size);
		}
		got += lr->count;
		if (!lr->count)
			break;
	} while (got < total && got < cap);
	return (int)total;
}

static void fill_tenant(void *out, size_t i, const void *rec)
{
	const struct kvp_tenant_rec *r = rec;
	struct kvl_tenant_info *t = (struct kvl_tenant_info *)out + i;

	memset(t, 0, sizeof(*t));
	memcpy(t->name, r->name, sizeof(t->name));
	t->name[KVL_NAME_LEN - 1] = '\0';
	t->max = r->max;
	t->min = r->min;
	t->current = r->current;
	t->peak = r->peak;
	t->ev_max = r->ev_max;
	t->ev_stall = r->ev_stall;
	t->ev_reclaim = r->ev_reclaim;
	t->ev_fail = r->ev_fail;
	t->uid = r->uid;
	t->gid = r->gid;
	t->leases = r->leases;
}

static void fill_client(void *out, size_t i, const void *rec)
{
	const struct kvp_client_rec *r = rec;
	struct kvl_client_info *c = (struct kvl_client_info *)out + i;

	memset(c, 0, sizeof(*c));
	c->lease_id = r->lease_id;
	c->pid = r->pid;
	c->uid = r->uid;
	memcpy(c->tenant, r->tenant, sizeof(c->tenant));
	c->tenant[KVL_NAME_LEN - 1] = '\0';
	c->blocks = r->blocks;
	c->connected = r->connected;
}

static int daemon_pool_status(struct kvl_admin *a, struct kvl_pool_info *out)
{
	struct kvp_pool_rec rec;
	size_t len = 0;
	int ret;

	memset(&rec, 0, sizeof(rec));
	ret = daemon_call(a, KVP_OP_POOL_STATUS, NULL, 0, &rec, sizeof(rec),
			  &len);
	if (ret < 0)
		return ret;
	if (len < offsetof(struct kvp_pool_rec, mapped_bytes))
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	memcpy(out->name, rec.name, sizeof(out->name));
	out->name[KVL_NAME_LEN - 1] = '\0';
	out->block_bytes = rec.block_bytes;
	out->capacity = rec.capacity;
	out->backed = rec.backed;
	out->used = rec.used;
	out->state = rec.state;
	out->epoch = rec.epoch;
	out->leases = rec.leases;
	out->chunk_blocks = rec.chunk_blocks;
	out->tenants = rec.tenants;
	out->mode = rec.mode == KVP_MODE_MODULE ? KVL_MODE_MODULE :
						  KVL_MODE_DAEMON;
	memcpy(out->backend, rec.backend, sizeof(out->backend));
	out->backend[sizeof(out->backend) - 1] = '\0';
	return 0;
}

#ifdef KVL_HAVE_LIBNL
/* ---------------------------------------------------------------- */
/* Generic netlink (module)                                         */
/* ---------------------------------------------------------------- */

static int nlerr_to_errno(int e)
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
	case NLE_MSGSIZE: return -EMSGSIZE;
	case NLE_INTR: return -EINTR;
	default: return -EIO;
	}
}

struct nl_req {
	int err;	/* from an NLMSG_ERROR record (-errno) */
	bool done;
	int (*valid)(struct nlattr **tb, void *arg);
	void *arg;
};

static int nl_valid_cb(struct nl_msg *msg, void *arg)
{
	struct nl_req *r = arg;
	struct nlattr *tb[KVPOOL_A_MAXATTR + 1];
	int ret;

	ret = genlmsg_parse(nlmsg_hdr(msg), 0, tb, KVPOOL_A_MAXATTR, NULL);
	if (ret < 0) {
		r->err = -EBADMSG;
		return NL_SKIP;
	}
	if (r->valid) {
		ret = r->valid(tb, r->arg);
		if (ret < 0 && !r->err)
			r->err = ret;
	}
	return NL_OK;
}

static int nl_finish_cb(struct nl_msg *msg, void *arg)
{
	struct nl_req *r = arg;

	r->done = true;
	return NL_STOP;
}

static int nl_error_cb(struct sockaddr_nl *nla, struct nlmsgerr *e, void *arg)
{
	struct nl_req *r = arg;

	r->err = e->error < 0 ? e->error : -e->error;
	r->done = true;
	return NL_STOP;
}

/* Send msg (consumed) and collect the answer. */
static int nl_call(struct kvl_admin *a, struct nl_msg *msg,
		   int (*valid)(struct nlattr **tb, void *arg), void *arg)
{
	struct nl_req r = { .valid = valid, .arg = arg };
	struct nl_cb *cb;
	int ret;

	cb = nl_cb_alloc(NL_CB_DEFAULT);
	if (!cb) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, nl_valid_cb, &r);
	nl_cb_set(cb, NL_CB_FINISH, NL_CB_CUSTOM, nl_finish_cb, &r);
	nl_cb_set(cb, NL_CB_ACK, NL_CB_CUSTOM, nl_finish_cb, &r);
	nl_cb_err(cb, NL_CB_CUSTOM, nl_error_cb, &r);
	ret = nl_send_auto(a->nl, msg);
	nlmsg_free(msg);
	if (ret < 0) {
		nl_cb_put(cb);
		return nlerr_to_errno(ret);
	}
	while (!r.done) {
		ret = nl_recvmsgs(a->nl, cb);
		if (ret < 0 && !r.err) {
			r.err = nlerr_to_errno(ret);
			break;
		}
	}
	nl_cb_put(cb);
	return r.err;
}

static struct nl_msg *nl_new(struct kvl_admin *a, uint8_t cmd, int flags)
{
	struct nl_msg *msg = nlmsg_alloc();

	if (!msg)
		return NULL;
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, a->family, 0, flags,
			 cmd, KVPOOL_GENL_VERSION)) {
		nlmsg_free(msg);
		return NULL;
	}
	return msg;
}

static uint32_t nla_u32_or(struct nlattr **tb, int t, uint32_t dflt)
{
	return tb[t] ? nla_get_u32(tb[t]) : dflt;
}

static uint64_t nla_u64_or(struct nlattr **tb, int t, uint64_t dflt)
{
	return tb[t] ? nla_get_u64(tb[t]) : dflt;
}

struct pool_dump {
	struct kvl_pool_info *out;
	int n;
};

static int pool_cb(struct nlattr **tb, void *arg)
{
	struct pool_dump *d = arg;
	struct kvl_pool_info *p = d->out;

	if (d->n++ > 0)
		return 0;	/* the API reports the first pool */
	memset(p, 0, sizeof(*p));
	if (tb[KVPOOL_A_POOL])
		copy_name(p->name, nla_get_string(tb[KVPOOL_A_POOL]),
			  sizeof(p->name));
	p->block_bytes = nla_u64_or(tb, KVPOOL_A_BLOCK_BYTES, 0);
	p->capacity = nla_u32_or(tb, KVPOOL_A_CAPACITY, 0);
	p->backed = nla_u32_or(tb, KVPOOL_A_BACKED, 0);
	p->used = nla_u32_or(tb, KVPOOL_A_USED, 0);
	p->state = nla_u32_or(tb, KVPOOL_A_STATE, 0);
	p->leases = nla_u32_or(tb, KVPOOL_A_LEASES, 0);
	p->mode = KVL_MODE_MODULE;
	return 0;
}

#endif /* KVL_HAVE_LIBNL */

static int read_sysfs_u64(const char *pool, const char *tenant,
			  const char *file, uint64_t *v)
{
	char path[512], buf[64];
	ssize_t n;
	int fd;

	if (tenant)
		snprintf(path, sizeof(path), KVL_SYSFS_ROOT "/%s/tenants/%s/%s",
			 pool, tenant, file);
	else
		snprintf(path, sizeof(path), KVL_SYSFS_ROOT "/%s/%s", pool,
			 file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	if (!strncmp(buf, "max", 3)) {
		*v = KVPOOL_UNLIMITED;
		return 0;
	}
	*v = strtoull(buf, NULL, 10);
	return 0;
}

/* First pool directory under /sys/kernel/kvpool (or the named one). */
static int sysfs_pool_name(const char *want, char *name, size_t len)
{
	struct dirent *de;
	DIR *d;
	int ret = -ENOENT;

	d = opendir(KVL_SYSFS_ROOT);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (want && *want && strcmp(want, de->d_name))
			continue;
		copy_name(name, de->d_name, len);
		ret = 0;
		break;
	}
	closedir(d);
	return ret;
}

static int sysfs_pool_status(struct kvl_pool_info *p)
{
	uint64_t v;
	int ret;

	memset(p, 0, sizeof(*p));
	ret = sysfs_pool_name(NULL, p->name, sizeof(p->name));
	if (ret)
		return ret;
	if (!read_sysfs_u64(p->name, NULL, "block_bytes", &v))
		p->block_bytes = v;
	if (!read_sysfs_u64(p->name, NULL, "capacity", &v))
		p->capacity = (uint32_t)v;
	if (!read_sysfs_u64(p->name, NULL, "backed", &v))
		p->backed = (uint32_t)v;
	if (!read_sysfs_u64(p->name, NULL, "used", &v))
		p->used = (uint32_t)v;
	p->state = KVPOOL_STATE_LIVE;
	p->mode = KVL_MODE_MODULE;
	return 0;
}

#ifdef KVL_HAVE_LIBNL
static int nl_pool_status(struct kvl_admin *a, struct kvl_pool_info *out)
{
	struct pool_dump d = { .out = out };
	struct nl_msg *msg;
	int ret;

	msg = nl_new(a, KVPOOL_CMD_POOL_GET, NLM_F_DUMP);
	if (!msg)
		return -ENOMEM;
	ret = nl_call(a, msg, pool_cb, &d);
	if (!ret && !d.n)
		ret = -ENOENT;
	return ret;
}

/* The pool a tenant op refers to: given, or the first one. */
static int nl_pool_name(struct kvl_admin *a, const char *pool, char *name,
			size_t len)
{
	struct kvl_pool_info p;
	int ret;

	if (pool && *pool) {
		copy_name(name, pool, len);
		return 0;
	}
	ret = nl_pool_status(a, &p);
	if (ret)
		ret = sysfs_pool_status(&p);
	if (ret)
		return ret;
	copy_name(name, p.name, len);
	return 0;
}

static int nl_tenant(struct kvl_admin *a, uint8_t cmd, const char *pool,
		     const char *name, uint32_t max, uint32_t min,
		     uint32_t uid, uint32_t gid)
{
	char pname[KVPOOL_NAME_LEN];
	struct nl_msg *msg;
	int ret;

	ret = nl_pool_name(a, pool, pname, sizeof(pname));
	if (ret)
		return ret;
	msg = nl_new(a, cmd, NLM_F_ACK);
	if (!msg)
		return -ENOMEM;
	if (nla_put_string(msg, KVPOOL_A_POOL, pname) < 0 ||
	    nla_put_string(msg, KVPOOL_A_TENANT, name) < 0)
		goto nomem;
	if (cmd != KVPOOL_CMD_TENANT_DEL) {
		if ((max != KVL_ADMIN_KEEP &&
		     nla_put_u32(msg, KVPOOL_A_MAX, max) < 0) ||
		    (min != KVL_ADMIN_KEEP &&
		     nla_put_u32(msg, KVPOOL_A_MIN, min) < 0) ||
		    (uid != KVL_ADMIN_KEEP &&
		     nla_put_u32(msg, KVPOOL_A_UID, uid) < 0) ||
		    (gid != KVL_ADMIN_KEEP &&
		     nla_put_u32(msg, KVPOOL_A_GID, gid) < 0))
			goto nomem;
	}
	return nl_call(a, msg, NULL, NULL);
nomem:
	nlmsg_free(msg);
	return -EMSGSIZE;
}

struct tenant_dump {
	struct kvl_tenant_info *out;
	size_t cap;
	int n;
};

static int tenant_cb(struct nlattr **tb, void *arg)
{
	struct tenant_dump *d = arg;
	struct kvl_tenant_info *t;

	if ((size_t)d->n >= d->cap) {
		d->n++;
		return 0;
	}
	t = &d->out[d->n++];
	memset(t, 0, sizeof(*t));
	if (tb[KVPOOL_A_TENANT])
		copy_name(t->name, nla_get_string(tb[KVPOOL_A_TENANT]),
			  sizeof(t->name));
	t->max = nla_u32_or(tb, KVPOOL_A_MAX, KVPOOL_UNLIMITED);
	t->min = nla_u32_or(tb, KVPOOL_A_MIN, 0);
	t->current = nla_u32_or(tb, KVPOOL_A_CURRENT, 0);
	t->peak = nla_u32_or(tb, KVPOOL_A_PEAK, 0);
	t->ev_max = nla_u64_or(tb, KVPOOL_A_EV_MAX, 0);
	t->ev_stall = nla_u64_or(tb, KVPOOL_A_EV_STALL, 0);
	t->ev_reclaim = nla_u64_or(tb, KVPOOL_A_EV_RECLAIM, 0);
	t->ev_fail = nla_u64_or(tb, KVPOOL_A_EV_FAIL, 0);
	t->uid = nla_u32_or(tb, KVPOOL_A_UID, KVPOOL_ID_NONE);
	t->gid = nla_u32_or(tb, KVPOOL_A_GID, KVPOOL_ID_NONE);
	t->leases = nla_u32_or(tb, KVPOOL_A_LEASES, 0);
	return 0;
}

#endif /* KVL_HAVE_LIBNL */

#ifdef KVL_HAVE_LIBNL
static int sysfs_tenant_events(const char *pool, struct kvl_tenant_info *t)
{
	char path[512], key[32];
	unsigned long long v;
	FILE *f;

	snprintf(path, sizeof(path),
		 KVL_SYSFS_ROOT "/%s/tenants/%s/blocks.events", pool, t->name);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fscanf(f, "%31s %llu", key, &v) == 2) {
		if (!strcmp(key, "max"))
			t->ev_max = v;
		else if (!strcmp(key, "stall"))
			t->ev_stall = v;
		else if (!strcmp(key, "reclaim"))
			t->ev_reclaim = v;
		else if (!strcmp(key, "fail"))
			t->ev_fail = v;
	}
	fclose(f);
	return 0;
}

static int sysfs_tenant_list(const char *pool, struct kvl_tenant_info *out,
			     size_t cap)
{
	char pname[KVPOOL_NAME_LEN], path[512];
	struct dirent *de;
	uint64_t v;
	DIR *d;
	int n = 0, ret;

	ret = sysfs_pool_name(pool, pname, sizeof(pname));
	if (ret)
		return ret;
	snprintf(path, sizeof(path), KVL_SYSFS_ROOT "/%s/tenants", pname);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct kvl_tenant_info *t;

		if (de->d_name[0] == '.')
			continue;
		if ((size_t)n >= cap) {
			n++;
			continue;
		}
		t = &out[n++];
		memset(t, 0, sizeof(*t));
		copy_name(t->name, de->d_name, sizeof(t->name));
		t->uid = KVPOOL_ID_NONE;
		t->gid = KVPOOL_ID_NONE;
		if (!read_sysfs_u64(pname, t->name, "blocks.max", &v))
			t->max = (uint32_t)v;
		if (!read_sysfs_u64(pname, t->name, "blocks.min", &v))
			t->min = (uint32_t)v;
		if (!read_sysfs_u64(pname, t->name, "blocks.current", &v))
			t->current = (uint32_t)v;
		if (!read_sysfs_u64(pname, t->name, "blocks.peak", &v))
			t->peak = (uint32_t)v;
		sysfs_tenant_events(pname, t);
	}
	closedir(d);
	return n;
}

static int nl_open(struct kvl_admin *a)
{
	int ret;

	a->nl = nl_socket_alloc();
	if (!a->nl)
		return -ENOMEM;
	ret = genl_connect(a->nl);
	if (ret < 0)
		goto fail;
	ret = genl_ctrl_resolve(a->nl, KVPOOL_GENL_NAME);
	if (ret < 0)
		goto fail;
	a->family = ret;
	return 0;
fail:
	nl_socket_free(a->nl);
	a->nl = NULL;
	return nlerr_to_errno(ret);
}

#else /* !KVL_HAVE_LIBNL */
/* Without libnl there is no module transport: the daemon answers. */
static int nl_open(struct kvl_admin *a)
{
	return -EOPNOTSUPP;
}

static int nl_tenant(struct kvl_admin *a, uint8_t cmd, const char *pool,
		     const char *name, uint32_t max, uint32_t min,
		     uint32_t uid, uint32_t gid)
{
	return -EOPNOTSUPP;
}

static int nl_pool_status(struct kvl_admin *a, struct kvl_pool_info *out)
{
	return -EOPNOTSUPP;
}
#endif /* KVL_HAVE_LIBNL */

/* ---------------------------------------------------------------- */
/* Public API                                                       */
/* ---------------------------------------------------------------- */

int kvl_admin_open(const char *socket_path, struct kvl_admin **out)
{
	struct kvl_admin *a;
	const char *dev;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->sock = -1;
	dev = getenv(KVL_DEVICE_ENV);
	if (!dev || !*dev)
		dev = KVL_DEFAULT_DEVICE;
	if (!access(dev, F_OK) && !nl_open(a))
		a->mode = KVL_MODE_MODULE;
	ret = daemon_connect(socket_path, &a->sock);
	if (ret && a->mode != KVL_MODE_MODULE) {
		free(a);
		return ret;
	}
	if (!a->mode)
		a->mode = KVL_MODE_DAEMON;
	*out = a;
	return 0;
}

void kvl_admin_close(struct kvl_admin *adm)
{
	if (!adm)
		return;
#ifdef KVL_HAVE_LIBNL
	if (adm->nl)
		nl_socket_free(adm->nl);
#endif
	if (adm->sock >= 0)
		close(adm->sock);
	free(adm);
}

static int check_limits(uint32_t max, uint32_t min, bool keep_ok)
{
	if (!keep_ok && (max == KVL_ADMIN_KEEP || min == KVL_ADMIN_KEEP))
		return -EINVAL;
	if (max != KVPOOL_UNLIMITED && max != KVL_ADMIN_KEEP &&
	    min != KVL_ADMIN_KEEP && min > max)
		return -EINVAL;
	return 0;
}

/* Common checks of the tenant calls; limits: 0 none, 1 add, 2 set. */
static int check_tenant_args(struct kvl_admin *adm, const char *pool,
			     const char *name, uint32_t max, uint32_t min,
			     int limits)
{
	int ret;

	if (!adm)
		return -EINVAL;
	ret = check_name(name, false);
	if (!ret)
		ret = check_name(pool, true);
	if (!ret && limits)
		ret = check_limits(max, min, limits == 2);
	return ret;
}

int kvl_admin_tenant_add(struct kvl_admin *adm, const char *pool,
			 const char *name, uint32_t max, uint32_t min,
			 uint32_t uid, uint32_t gid)
{
	int ret = check_tenant_args(adm, pool, name, max, min, 1);

	if (ret)
		return ret;
	if (adm->mode == KVL_MODE_MODULE)
		return nl_tenant(adm, KVPOOL_CMD_TENANT_NEW, pool, name, max,
				 min, uid, gid);
	return daemon_tenant(adm, KVP_OP_TENANT_ADD, pool, name, max, min,
			     uid, gid);
}

static int daemon_prefix(struct kvl_admin *a, uint16_t op, const char *pool,
			 const char *tenant, const char *ns, uint32_t flags);

int kvl_admin_tenant_del(struct kvl_admin *adm, const char *pool,
			 const char *name)
{
	int ret = check_tenant_args(adm, pool, name, 0, 0, 0);

	if (ret)
		return ret;
	if (adm->mode != KVL_MODE_MODULE)	/* the daemon does it all */
		return daemon_tenant(adm, KVP_OP_TENANT_DEL, pool, name, 0, 0,
				     0, 0);
	/* The daemon's cache leases of the tenant must not keep it alive;
	 * once it is gone, the daemon forgets its cache's record
	 * (namespace membership included). */
	if (adm->sock >= 0)
		daemon_prefix(adm, KVP_OP_PREFIX_FLUSH, pool, name, NULL, 0);
	ret = nl_tenant(adm, KVPOOL_CMD_TENANT_DEL, pool, name, 0, 0, 0, 0);
	if (!ret && adm->sock >= 0)
		daemon_prefix(adm, KVP_OP_PREFIX_FLUSH, pool, name, NULL,
			      KVP_PREFIX_FORGET);
	return ret;
}

int kvl_admin_tenant_set(struct kvl_admin *adm, const char *pool,
			 const char *name, uint32_t max, uint32_t min,
			 uint32_t uid, uint32_t gid)
{
	int ret = check_tenant_args(adm, pool, name, max, min, 2);

	if (ret)
		return ret;
	if (adm->mode == KVL_MODE_MODULE)
		return nl_tenant(adm, KVPOOL_CMD_TENANT_SET, pool, name, max,
				 min, uid, gid);
	return daemon_tenant(adm, KVP_OP_TENANT_SET, pool, name,
			     max == KVL_ADMIN_KEEP ? KVP_KEEP : max,
			     min == KVL_ADMIN_KEEP ? KVP_KEEP : min,
			     uid == KVL_ADMIN_KEEP ? KVP_KEEP : uid,
			     gid == KVL_ADMIN_KEEP ? KVP_KEEP : gid);
}

int kvl_admin_tenant_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_tenant_info *out, size_t cap)
{
	int ret;

	if (!adm || (cap && !out))
		return -EINVAL;
	ret = check_name(pool, true);
	if (ret)
		return ret;
#ifdef KVL_HAVE_LIBNL
	if (adm->mode == KVL_MODE_MODULE) {
		struct tenant_dump d = { .out = out, .cap = cap };
		char pname[KVPOOL_NAME_LEN];
		struct nl_msg *msg;

		ret = nl_pool_name(adm, pool, pname, sizeof(pname));
		if (ret)
			return ret;
		msg = nl_new(adm, KVPOOL_CMD_TENANT_GET, NLM_F_DUMP);
		if (!msg)
			return -ENOMEM;
		if (nla_put_string(msg, KVPOOL_A_POOL, pname) < 0) {
			nlmsg_free(msg);
			return -EMSGSIZE;
		}
		ret = nl_call(adm, msg, tenant_cb, &d);
		if (ret)
			return sysfs_tenant_list(pname, out, cap);
		return d.n;
	}
#endif
	return daemon_list(adm, KVP_OP_TENANT_LIST, pool,
			   sizeof(struct kvp_tenant_rec), out,
			   sizeof(*out), cap, fill_tenant);
}

int kvl_admin_pool_status(struct kvl_admin *adm, struct kvl_pool_info *out)
{
	int ret;

	if (!adm || !out)
		return -EINVAL;
	if (adm->mode == KVL_MODE_MODULE) {
		struct kvl_pool_info d;

		ret = nl_pool_status(adm, out);
		if (ret)
			ret = sysfs_pool_status(out);
		if (ret)
			return ret;
		/* the owner knows its backend and chunk size */
		if (adm->sock >= 0 && !daemon_pool_status(adm, &d) &&
		    !strcmp(d.name, out->name)) {
			memcpy(out->backend, d.backend, sizeof(out->backend));
			out->chunk_blocks = d.chunk_blocks;
			out->epoch = d.epoch;
			out->tenants = d.tenants;
		}
		return 0;
	}
	return daemon_pool_status(adm, out);
}

int kvl_admin_client_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_client_info *out, size_t cap)
{
	int ret;

	if (!adm || (cap && !out))
		return -EINVAL;
	ret = check_name(pool, true);
	if (ret)
		return ret;
	/* only the pool's owner (kvpoold) knows every lease */
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	return daemon_list(adm, KVP_OP_CLIENT_LIST, pool,
			   sizeof(struct kvp_client_rec), out, sizeof(*out),
			   cap, fill_client);
}

/* ---------------------------------------------------------------- */
/* Tiers (the daemon's pools) and clients per tier                  */
/* ---------------------------------------------------------------- */

static void fill_tier(void *out, size_t i, const void *rec)
{
	const struct kvp_tier_rec *r = rec;
	struct kvl_tier_stats *t = (struct kvl_tier_stats *)out + i;
	const struct kvp_pool_rec *p = &r->pool;
	unsigned int k;

	memset(t, 0, sizeof(*t));
	memcpy(t->pool.name, p->name, sizeof(t->pool.name));
	t->pool.name[KVL_NAME_LEN - 1] = '\0';
	t->pool.block_bytes = p->block_bytes;
	t->pool.capacity = p->capacity;
	t->pool.backed = p->backed;
	t->pool.used = p->used;
	t->pool.state = p->state;
	t->pool.epoch = p->epoch;
	t->pool.leases = p->leases;
	t->pool.chunk_blocks = p->chunk_blocks;
	t->pool.tenants = p->tenants;
	t->pool.mode = p->mode == KVP_MODE_MODULE ? KVL_MODE_MODULE :
						    KVL_MODE_DAEMON;
	memcpy(t->pool.backend, p->backend, sizeof(t->pool.backend));
	t->pool.backend[sizeof(t->pool.backend) - 1] = '\0';
	t->tier = r->tier;
	t->kind = r->kind;
	t->flags = r->flags;
	t->swaps = r->swaps;
	t->blocks_in = r->blocks_in;
	t->blocks_out = r->blocks_out;
	t->bytes_in = r->bytes_in;
	t->bytes_out = r->bytes_out;
	t->copy_in_ns = r->copy_in_ns;
	t->copy_out_ns = r->copy_out_ns;
	t->errors = r->errors;
	t->prefix_blocks = r->prefix_blocks;
	t->prefix_in = r->prefix_in;
	t->prefix_out = r->prefix_out;
	for (k = 0; k < 16 && k < KVP_LAT_BUCKETS; k++)
		t->lat_us[k] = r->lat_us[k];
	t->mapped_bytes = p->mapped_bytes;
}

_Static_assert(sizeof(struct kvl_cluster_info) ==
	       sizeof(struct kvp_cluster_status),
	       "kvl_cluster_info mirrors kvp_cluster_status");

/* A daemon op with no body whose reply is one record of @size bytes. */
static int record_call(struct kvl_admin *adm, uint16_t op, void *rec,
		       size_t size)
{
	size_t len = 0;
	int ret;

	if (!adm)
		return -EINVAL;
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	memset(rec, 0, size);
	ret = daemon_call(adm, op, NULL, 0, rec, size, &len);
	if (ret < 0)
		return ret;
	return len == size ? 0 : -EBADMSG;
}

int kvl_admin_cluster_status(struct kvl_admin *adm,
			     struct kvl_cluster_info *out)
{
	struct kvp_cluster_status st;
	int ret;

	if (!out)
		return -EINVAL;
	ret = record_call(adm, KVP_OP_CLUSTER_STATUS, &st, sizeof(st));
	if (ret)
		return ret;
	st.node[sizeof(st.node) - 1] = '\0';
	memcpy(out, &st, sizeof(*out));
	return 0;
}

_Static_assert(sizeof(struct kvl_restart_info) ==
	       sizeof(struct kvp_restart_info),
	       "kvl_restart_info mirrors kvp_restart_info");

int kvl_admin_restart_info(struct kvl_admin *adm,
			   struct kvl_restart_info *out)
{
	struct kvp_restart_info ri;
	int ret;

	if (!out)
		return -EINVAL;
	ret = record_call(adm, KVP_OP_RESTART_INFO, &ri, sizeof(ri));
	if (ret)
		return ret;
	ri.why[sizeof(ri.why) - 1] = '\0';
	memcpy(out, &ri, sizeof(*out));
	return 0;
}

int kvl_admin_tier_list(struct kvl_admin *adm, struct kvl_tier_stats *out,
			size_t cap)
{
	if (!adm || (cap && !out))
		return -EINVAL;
	/* the pools' owner (kvpoold) knows every tier and its swaps */
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	return daemon_list(adm, KVP_OP_TIER_LIST, NULL,
			   sizeof(struct kvp_tier_rec), out, sizeof(*out), cap,
			   fill_tier);
}

static void fill_client_tiers(void *out, size_t i, const void *rec)
{
	const struct kvp_client_tier_rec *r = rec;
	struct kvl_client_tiers *c = (struct kvl_client_tiers *)out + i;
	unsigned int k;

	memset(c, 0, sizeof(*c));
	c->lease_id = r->lease_id;
	c->pid = r->pid;
	c->uid = r->uid;
	memcpy(c->tenant, r->tenant, sizeof(c->tenant));
	c->tenant[KVL_NAME_LEN - 1] = '\0';
	for (k = 0; k < KVL_MAX_TIERS && k < KVP_MAX_TIERS; k++) {
		c->blocks[k] = r->blocks[k];
		c->joined[k] = r->tier_lease[k] != 0;
		c->seq_swapped[k] = r->seqs.swapped[k];
	}
	c->seq_resident = r->seqs.resident;
	c->seq_dropped = r->seqs.dropped;
	c->swaps = r->swaps;
	c->bytes_out = r->bytes_out;
	c->bytes_in = r->bytes_in;
}

int kvl_admin_client_tiers(struct kvl_admin *adm,
			   struct kvl_client_tiers *out, size_t cap)
{
	if (!adm || (cap && !out))
		return -EINVAL;
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	return daemon_list(adm, KVP_OP_CLIENT_TIERS, NULL,
			   sizeof(struct kvp_client_tier_rec), out,
			   sizeof(*out), cap, fill_client_tiers);
}

/* ---------------------------------------------------------------- */
/* Prefix caches (kvpoold)                                          */
/* ---------------------------------------------------------------- */

static int daemon_prefix(struct kvl_admin *a, uint16_t op, const char *pool,
			 const char *tenant, const char *ns, uint32_t flags)
{
	struct kvp_prefix_tenant q;

	memset(&q, 0, sizeof(q));
	q.flags = flags;
	copy_name(q.pool, pool, sizeof(q.pool));
	copy_name(q.tenant, tenant, sizeof(q.tenant));
	copy_name(q.ns, ns, sizeof(q.ns));
	return daemon_call(a, op, &q, sizeof(q), NULL, 0, NULL);
}

static void fill_prefix(void *out, size_t i, const void *rec)
{
	const struct kvp_prefix_rec *r = rec;
	struct kvl_prefix_info *p = (struct kvl_prefix_info *)out + i;

	memset(p, 0, sizeof(*p));
	memcpy(p->tenant, r->tenant, sizeof(p->tenant));
	p->tenant[KVL_NAME_LEN - 1] = '\0';
	memcpy(p->ns, r->ns, sizeof(p->ns));
	p->ns[KVL_NAME_LEN - 1] = '\0';
	p->hot_lease = r->hot_lease;
	p->cold_lease = r->cold_lease;
	p->cached = r->cached;
	p->referenced = r->referenced;
	p->hits = r->hits;
	p->misses = r->misses;
	p->hit_tokens = r->hit_tokens;
	p->evictions = r->evictions;
	p->published = r->published;
}

int kvl_admin_prefix_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_prefix_info *out, size_t cap)
{
	int ret;

	if (!adm || (cap && !out))
		return -EINVAL;
	ret = check_name(pool, true);
	if (ret)
		return ret;
	if (adm->sock < 0)
		return -EOPNOTSUPP;	/* only kvpoold keeps the caches */
	return daemon_list(adm, KVP_OP_PREFIX_LIST, pool,
			   sizeof(struct kvp_prefix_rec), out, sizeof(*out),
			   cap, fill_prefix);
}

int kvl_admin_prefix_flush(struct kvl_admin *adm, const char *pool,
			   const char *tenant)
{
	int ret;

	if (!adm)
		return -EINVAL;
	ret = check_name(tenant, false);
	if (!ret)
		ret = check_name(pool, true);
	if (ret)
		return ret;
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	return daemon_prefix(adm, KVP_OP_PREFIX_FLUSH, pool, tenant, NULL, 0);
}

int kvl_admin_prefix_share(struct kvl_admin *adm, const char *pool,
			   const char *tenant, const char *ns)
{
	int ret;

	if (!adm)
		return -EINVAL;
	ret = check_name(tenant, false);
	if (!ret)
		ret = check_name(pool, true);
	if (!ret)
		ret = check_name(ns, true);
	if (ret)
		return ret;
	if (adm->sock < 0)
		return -EOPNOTSUPP;
	ret = daemon_prefix(adm, KVP_OP_PREFIX_SHARE, pool, tenant, ns, 0);
	return ret < 0 ? ret : 0;
}
