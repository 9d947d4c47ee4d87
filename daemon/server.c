// SPDX-License-Identifier: MIT
/*
 * server.c - kvpoold's UNIX socket: one thread per connection, one
 * request at a time, each answered by exactly one reply record.  A bad
 * request gets an error record and never disturbs other connections.
 * See kvpool_proto.h for the wire format.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "restart.h"
#include "ledger_keep.h"
#include "core.h"
#include "ledger.h"
#include "tenants.h"
#include "server.h"
#include "ops.h"
#include "conn.h"
#include "devbuf.h"
#include "inproc.h"
#include "swap.h"
#include "prefix.h"
#include "scrub.h"
#include "cluster.h"

/* Connections beyond --max-clients that admin peers may still open. */
#define KVD_ADMIN_RESERVE	8
/* How long accepts pause when even the reserve descriptor cannot help. */
#define KVD_ACCEPT_PAUSE_NS	100000000ULL
/*
 * Stack of a connection thread.  The CPU kernels run on it when their
 * thread pool is busy: their frames take about 15 KiB at -O2, and several
 * hundred KiB in sanitizer or unoptimised builds on AVX-512 machines (see
 * Documentation/daemon.rst); the deepest stack any connection used is
 * logged at exit.  Stacks are virtual memory: only the pages touched
 * count.
 */
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define KVD_CLIENT_STACK	(8U << 20)
#else
#define KVD_CLIENT_STACK	(1U << 20)
#endif
#define MAX_REGION	(1ULL << 36)

/* ---- helpers ---------------------------------------------------------- */

static void drop_fds(struct kvd_client *c)
{
	while (c->nfds)
		close(kvd_client_take_fd(c));
}

/* A name field must hold its NUL within KVP_NAME_LEN bytes (never cut). */
static bool name_ok(const char *name)
{
	return memchr(name, '\0', KVP_NAME_LEN) != NULL;
}

/* ---- ops ------------------------------------------------------------- */

static int op_hello(struct kvd_client *c, const struct kvp_hello *h,
		    struct kvp_hello_reply *rep)
{
	struct kvd *d = c->d;
	char tenant[KVP_NAME_LEN] = "";
	int lfd = -1, rfd = -1, r = 0;
	int want = !!(h->flags & KVP_HELLO_LEDGER_FD) +
		   !!(h->flags & KVP_HELLO_REGION);

	bool claim = h->flags & KVP_HELLO_CLAIM;
	uint64_t secret = 0;

	if (h->version != KVP_VERSION || (h->flags & ~KVP_HELLO_FLAGS) ||
	    (!claim && (h->reserved[0] || h->reserved[1])) ||
	    (claim && (!h->reserved[0] || d->mode != KVP_MODE_INPROC)) ||
	    !name_ok(h->pool) || !name_ok(h->tenant))
		return -EINVAL;
	if (c->hello)
		return -EALREADY;
	if (c->nfds != want)
		return -EBADF;
	if (h->flags & KVP_HELLO_LEDGER_FD)
		lfd = kvd_client_take_fd(c);
	if (h->flags & KVP_HELLO_REGION)
		rfd = kvd_client_take_fd(c);

	if (d->mode == KVP_MODE_MODULE) {
		struct kvpool_status st;

		if (lfd < 0) {
			r = -EINVAL;
			goto out;
		}
		/* Only /dev/kvpool says truly whose lease a file is. */
		r = kvd_ledger_fd_check(d->top, lfd);
		if (r)
			goto out;
		memset(&st, 0, sizeof(st));
		if (ioctl(lfd, KVPOOL_IOC_STATUS, &st)) {
			r = -errno == -ENOTTY ? -EBADF : -errno;
			goto out;
		}
		/* Close our copy at once: a held copy would stop the
		 * ledger's close-cleanup of this lease. */
		close(lfd);
		lfd = -1;
		if (!st.lease_id ||
		    strncmp(st.pool, d->top->name, KVPOOL_NAME_LEN)) {
			r = -ENOENT;
			goto out;
		}
		c->lease_id = st.lease_id;
		memcpy(c->tenant, st.tenant, sizeof(c->tenant));
		c->tenant[sizeof(c->tenant) - 1] = 0;
		c->tenant_serial = st.tenant_serial;
		memcpy(tenant, c->tenant, sizeof(tenant));
	} else {
		struct kvpool_cred cred = {
			.uid = c->cred.uid, .gid = c->cred.gid,
			.pid = (u32)c->cred.pid, .admin = c->cred.uid == 0,
		};

		if (lfd >= 0) {
			r = -EINVAL;
			goto out;
		}
		if (h->pool[0] &&
		    strncmp(h->pool, d->top->name, KVPOOL_NAME_LEN)) {
			r = -ENOENT;
			goto out;
		}
		memcpy(tenant, h->tenant, sizeof(tenant));
		tenant[sizeof(tenant) - 1] = 0;
		if (claim) {
			r = kvd_lkeep_claim(d->top, h->reserved[0],
					    h->reserved[1], cred.uid, cred.pid,
					    c, &c->lease);
			if (r)
				goto out;
		} else {
			r = kvd_ip_lease_open(d->top, &cred, c, tenant,
					      &c->lease);
			if (r)
				goto out;
		}
		c->lease_id = c->lease->id;
		secret = kvd_lkeep_record(d->top, c->lease);
		r = kvd_lease_tenant(d->top, c->lease_id, &c->tenant_serial,
				     c->tenant);
		if (r)
			goto out_lease;
		memcpy(tenant, c->tenant, sizeof(tenant));
	}
	c->ct = kvd_ctier_new(d, c->lease_id, c->lease, tenant);
	if (!c->ct) {
		r = -ENOMEM;
		goto out_lease;
	}

	if (rfd >= 0) {
		struct stat sb;
		int seals = fcntl(rfd, F_GET_SEALS);
		void *m;

		if (!h->region_bytes || h->region_bytes > MAX_REGION ||
		    fstat(rfd, &sb) || (uint64_t)sb.st_size < h->region_bytes) {
			r = -EINVAL;
			goto out_lease;
		}
		/* A region that can shrink under us would SIGBUS the daemon. */
		if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
			r = -EPERM;
			goto out_lease;
		}
		m = mmap(NULL, h->region_bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED, rfd, 0);
		if (m == MAP_FAILED) {
			r = -errno;
			goto out_lease;
		}
		c->region = m;
		c->region_bytes = h->region_bytes;
	}
	c->hello = true;
	rep->mode = d->mode;
	rep->capacity = d->top->capacity;
	rep->block_bytes = d->top->block_bytes;
	rep->lease_id = c->lease_id;
	memcpy(rep->pool, d->top->name, KVPOOL_NAME_LEN);
	strncpy(rep->backend, d->be->name, sizeof(rep->backend) - 1);
	rep->chunk_blocks = d->top->chunk_blocks;
	rep->reserved[0] = secret;
	goto out;
out_lease:
	if (c->ct) {
		kvd_ctier_release(c->ct);
		c->ct = NULL;
	}
	if (c->lease) {
		kvd_ip_lease_close(d->top, c->lease);
		c->lease = NULL;
	}
	c->lease_id = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (rfd >= 0)
		close(rfd);
	return r;
}

static int op_status(struct kvd_client *c, struct kvp_status_reply *rep)
{
	struct kvd *d = c->d;

	if (d->mode == KVP_MODE_INPROC) {
		kvd_ip_status(d->top, c->lease, &rep->ledger);
	} else if (ioctl(d->top->owner_fd, KVPOOL_IOC_STATUS, &rep->ledger)) {
		return -errno;
	}
	rep->ledger.epoch = d->epoch;
	rep->ledger.lease_id = c->lease_id;
	rep->mode = d->mode;
	rep->chunk_blocks = d->top->chunk_blocks;
	strncpy(rep->backend, d->be->name, sizeof(rep->backend) - 1);
	rep->region_bytes = c->region_bytes;
	return 0;
}

int kvd_fill_client_list(struct kvd_pool *p, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid)
{
	if (p->d->mode == KVP_MODE_INPROC)
		return kvd_ip_lease_list(p, out, start, cap, total, uid);
	return kvd_mod_lease_list(p, out, start, cap, total, uid);
}

/* Every connection that said HELLO, with its leases in every tier; those
 * of @uid only unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_tiers(struct kvd *d, struct kvp_client_tier_rec *out,
			  uint32_t start, uint32_t cap, uint32_t *total,
			  uid_t uid)
{
	struct kvd_client *c;
	uint32_t i = 0, n = 0;

	pthread_mutex_lock(&d->clients_lock);
	for (c = d->clients; c; c = c->next) {
		if (!c->hello || !c->ct)
			continue;
		if (uid != (uid_t)-1 && c->cred.uid != uid)
			continue;
		if (i >= start && n < cap) {
			struct kvp_client_tier_rec *o = &out[n++];

			memset(o, 0, sizeof(*o));
			o->pid = (uint32_t)c->cred.pid;
			o->uid = c->cred.uid;
			kvd_ctier_rec(c->ct, o);
		}
		i++;
	}
	pthread_mutex_unlock(&d->clients_lock);
	*total = i;
	return (int)n;
}



struct tenant_del_arg {
	struct kvd *d;
	const struct kvp_tenant *t;
};

static int tenant_del_cb(void *arg)
{
	struct tenant_del_arg *a = arg;

	return kvd_ip_tenant_op(a->d, KVP_OP_TENANT_DEL, a->t);
}

/* ---- what a peer that is not an admin may see ----------------------------- */

/*
 * The groups the ledger honours when the peer attaches to a tenant: its
 * gid and, with the module, its supplementary groups (SO_PEERGROUPS; the
 * in-process ledger compares the gid only); malloc'd, the count in *n.
 */
static uint32_t *peer_groups(struct kvd_client *c, int *n)
{
	socklen_t len = 0;
	uint32_t *g;

	if (c->d->mode == KVP_MODE_INPROC ||
	    (getsockopt(c->sock, SOL_SOCKET, SO_PEERGROUPS, NULL, &len) &&
	     errno != ERANGE))
		len = 0;
	g = malloc(sizeof(*g) + len);
	if (!g)
		return NULL;
	g[0] = c->cred.gid;
	if (len && getsockopt(c->sock, SOL_SOCKET, SO_PEERGROUPS, g + 1, &len))
		len = 0;
	*n = 1 + (int)(len / sizeof(gid_t));
	return g;
}

/* PREFIX_LIST for a peer that is not an admin: the caches of the tenants
 * it may attach to (kvd_tenants_visible), no other. */
static int prefix_list_own(struct kvd_client *c, const void *body,
			   size_t blen, void *rbody, size_t *rlen)
{
	char (*names)[KVPOOL_NAME_LEN] = NULL;
	uint32_t *g;
	int ng = 0, n, r;

	g = peer_groups(c, &ng);
	if (!g)
		return -ENOMEM;
	n = kvd_tenants_visible(c->d, c->cred.uid, g, ng, &names);
	free(g);
	if (n < 0)
		return n;
	r = kvd_prefix_list(c->d, (const char (*)[KVPOOL_NAME_LEN])names, n,
			    body, blen, rbody, rlen);
	free(names);
	return r;
}

/* A tier's record for a peer that is not an admin: its pool and kind, not
 * the swap traffic of every tenant. */
static void tier_rec_hide_traffic(struct kvp_tier_rec *r)
{
	r->swaps = r->blocks_in = r->blocks_out = 0;
	r->bytes_in = r->bytes_out = 0;
	r->copy_in_ns = r->copy_out_ns = 0;
	r->errors = 0;
	memset(r->lat_us, 0, sizeof(r->lat_us));
	r->prefix_blocks = r->prefix_in = r->prefix_out = 0;
}

/*
 * CLUSTER_STATUS for a peer that is not an admin: the cluster tier's
 * configuration and health, not its activity (the fetches and stores of
 * every tenant of the node, as the tiers' swap counters are hidden).
 */
static void cluster_status_hide_traffic(struct kvp_cluster_status *st)
{
	struct kvp_cluster_status keep = *st;

	memset(st, 0, sizeof(*st));
	memcpy(st->node, keep.node, sizeof(st->node));
	st->state = keep.state;
	st->policy = keep.policy;
	st->deadline_ms = keep.deadline_ms;
	st->masters = keep.masters;
	st->slots = keep.slots;
	st->tenants = keep.tenants;
}

/* ---- dispatch ----------------------------------------------------------- */

#define BODY(type) ({							\
	if (blen != sizeof(type))					\
		return -EBADMSG;					\
	(const type *)body; })

static int dispatch(struct kvd_client *c, const struct kvp_hdr *h,
		    const void *body, size_t blen, void *rbody, size_t *rlen)
{
	struct kvd *d = c->d;
	bool inproc = d->mode == KVP_MODE_INPROC;

	switch (h->op) {
	case KVP_OP_HELLO:
		*rlen = sizeof(struct kvp_hello_reply);
		return op_hello(c, BODY(struct kvp_hello), rbody);
	case KVP_OP_POOL_STATUS:
		if (blen)
			return -EBADMSG;
		*rlen = sizeof(struct kvp_pool_rec);
		kvd_ledger_pool_rec(d->top, rbody);
		return 0;
	case KVP_OP_TENANT_ADD:
	case KVP_OP_TENANT_DEL:
	case KVP_OP_TENANT_SET: {
		const struct kvp_tenant *t = BODY(struct kvp_tenant);

		if (!c->admin)
			return -EACCES;
		if (!name_ok(t->pool) || !name_ok(t->name))
			return -EINVAL;
		/* A tenant's own cache leases must not keep it alive, and its
		 * cache's record goes with it. */
		if (h->op == KVP_OP_TENANT_DEL && inproc &&
		    kvd_pool_by_name(d, t->pool) == d->top) {
			struct tenant_del_arg a = { d, t };

			return kvd_prefix_tenant_del(d, t->name, tenant_del_cb,
						     &a);
		}
		return kvd_ip_tenant_op(d, h->op, t);
	}
	case KVP_OP_PREFIX_LIST:
		if (!c->admin)
			return prefix_list_own(c, body, blen, rbody, rlen);
		/* fallthrough */
	case KVP_OP_PREFIX_FLUSH:
	case KVP_OP_PREFIX_SHARE:
		return kvd_prefix_admin(d, c->admin, h->op, body, blen, rbody,
					rlen);
	case KVP_OP_RESTART_INFO:
		if (blen)
			return -EBADMSG;
		kvd_restart_info(d, rbody);
		*rlen = sizeof(struct kvp_restart_info);
		return 0;
	case KVP_OP_CLUSTER_STATUS:
		if (blen)
			return -EBADMSG;
		*rlen = sizeof(struct kvp_cluster_status);
		kvd_cluster_status(d, rbody);
		if (!c->admin)
			cluster_status_hide_traffic(rbody);
		return 0;
	case KVP_OP_TENANT_LIST:
	case KVP_OP_CLIENT_LIST:
	case KVP_OP_TIER_LIST:
	case KVP_OP_CLIENT_TIERS: {
		const struct kvp_list *q = BODY(struct kvp_list);
		struct kvp_list_reply *lr = rbody;
		size_t room = KVP_MSG_MAX - sizeof(struct kvp_reply) -
			      sizeof(*lr), rsz;
		char pname[KVP_NAME_LEN];
		struct kvd_pool *p;
		int n, i;

		if (q->pad || !name_ok(q->pool))
			return -EINVAL;
		memcpy(pname, q->pool, sizeof(pname));
		pname[sizeof(pname) - 1] = 0;
		p = kvd_pool_by_name(d, pname);
		if (!p)
			return -ENOENT;
		switch (h->op) {
		case KVP_OP_TENANT_LIST:
			rsz = sizeof(struct kvp_tenant_rec);
			n = kvd_ip_tenant_list(p, (void *)(lr + 1), q->start,
					       (uint32_t)(room / rsz),
					       &lr->total);
			break;
		case KVP_OP_CLIENT_LIST:
			rsz = sizeof(struct kvp_client_rec);
			/* like /proc with hidepid: others' leases are
			 * hidden */
			n = kvd_fill_client_list(p, (void *)(lr + 1), q->start,
						 (uint32_t)(room / rsz),
						 &lr->total,
						 c->admin ? (uid_t)-1 :
						 c->cred.uid);
			break;
		case KVP_OP_TIER_LIST:
			rsz = sizeof(struct kvp_tier_rec);
			n = kvd_fill_tier_list(d, (void *)(lr + 1), q->start,
					       (uint32_t)(room / rsz),
					       &lr->total);
			/* others' swap traffic is the operator's */
			for (i = 0; !c->admin && i < n; i++)
				tier_rec_hide_traffic((struct kvp_tier_rec *)
						      (lr + 1) + i);
			break;
		default:
			rsz = sizeof(struct kvp_client_tier_rec);
			n = kvd_fill_client_tiers(d, (void *)(lr + 1),
						  q->start,
						  (uint32_t)(room / rsz),
						  &lr->total,
						  c->admin ? (uid_t)-1 :
						  c->cred.uid);
			break;
		}
		if (n < 0)
			return n;
		lr->count = (uint32_t)n;
		*rlen = sizeof(*lr) + (size_t)n * rsz;
		return n;
	}
	default:
		break;
	}

	/* Everything below needs a session. */
	switch (h->op) {
	case KVP_OP_ATTACH: case KVP_OP_LEASE: case KVP_OP_RELEASE:
	case KVP_OP_HELD: case KVP_OP_STATUS: case KVP_OP_LAYOUT: case KVP_OP_WRITE_KV:
	case KVP_OP_READ_KV: case KVP_OP_ATTN: case KVP_OP_COPY:
	case KVP_OP_LAYOUT_ROPE: case KVP_OP_SPLICE: case KVP_OP_COMPACT:
	case KVP_OP_SCORE:
	case KVP_OP_DEVBUF_ADD: case KVP_OP_DEVBUF_DEL:
	case KVP_OP_WRITE_KV_DEV: case KVP_OP_READ_KV_DEV: case KVP_OP_ATTN_DEV:
	case KVP_OP_PREFIX_MATCH: case KVP_OP_PREFIX_PUBLISH:
	case KVP_OP_PREFIX_UNREF: case KVP_OP_PREFIX_EVICT:
	case KVP_OP_LAYOUT_MODEL:
		if (!c->hello)
			return -ENOTCONN;
		break;
	case KVP_OP_TIER_ATTACH: case KVP_OP_TIER_LEASE:
	case KVP_OP_TIER_RELEASE: case KVP_OP_TIER_STATUS:
	case KVP_OP_SWAP: case KVP_OP_SWAP_WAIT: case KVP_OP_BLOCK_SUM:
	case KVP_OP_SEQ_REPORT:
		if (!c->hello)
			return -ENOTCONN;
		return kvd_tier_dispatch(c, c->ct, h->op, body, blen, rbody,
					 rlen);
	default:
		return -EOPNOTSUPP;
	}

	switch (h->op) {
	case KVP_OP_ATTACH: {
		const struct kvp_attach *a = BODY(struct kvp_attach);
		struct kvpool_cred cred = {
			.uid = c->cred.uid, .gid = c->cred.gid,
			.pid = (u32)c->cred.pid, .admin = c->cred.uid == 0,
		};
		char pool[KVP_NAME_LEN], tenant[KVP_NAME_LEN];
		struct kvp_attach_reply *ar = rbody;
		int r;

		if (!inproc)
			return -EOPNOTSUPP;
		if (!name_ok(a->pool) || !name_ok(a->tenant))
			return -EINVAL;
		memcpy(pool, a->pool, sizeof(pool));
		memcpy(tenant, a->tenant, sizeof(tenant));
		r = kvd_ip_attach(d->top, c->lease, pool, tenant, &cred);
		if (!r)
			r = kvd_client_tenant_id(c, NULL, NULL);
		ar->lease_id = c->lease_id;
		*rlen = sizeof(*ar);
		return r;
	}
	case KVP_OP_LEASE: {
		const struct kvp_lease *l = BODY(struct kvp_lease);
		int r;

		if (!inproc)
			return -EOPNOTSUPP;
		if (!l->count || l->count > KVP_IO_MAX_BLOCKS ||
		    (l->flags & ~KVPOOL_LEASE_FLAGS))
			return -EINVAL;
		r = kvd_ip_grant(d->top, c->lease, l->count, l->flags,
				 l->timeout_ns, rbody, c->sock);
		if (r > 0)
			*rlen = (size_t)r * sizeof(uint32_t);
		return r;
	}
	case KVP_OP_RELEASE: {
		const struct kvp_release *rl = body;

		if (!inproc)
			return -EOPNOTSUPP;
		if (blen < sizeof(*rl))
			return -EBADMSG;
		if (rl->count > KVP_IO_MAX_BLOCKS ||
		    blen != sizeof(*rl) + (size_t)rl->count * 4)
			return -EBADMSG;
		if (rl->flags & ~KVPOOL_RELEASE_FLAGS)
			return -EINVAL;
		if ((rl->flags & KVPOOL_RELEASE_ALL) ? rl->count != 0 :
		    rl->count == 0)
			return -EINVAL;
		return kvd_ip_release(d->top, c->lease,
				      (const uint32_t *)(rl + 1), rl->count,
				      rl->flags);
	}
	case KVP_OP_HELD: {
		const struct kvp_held *hd = BODY(struct kvp_held);
		int r;

		if (!inproc)
			return -EOPNOTSUPP;
		if (!hd->count || hd->count > KVP_IO_MAX_BLOCKS)
			return -EINVAL;
		r = kvd_ip_held(d->top, c->lease, hd->from, hd->count, rbody);
		if (r > 0)
			*rlen = (size_t)r * sizeof(uint32_t);
		return r;
	}
	case KVP_OP_STATUS:
		if (blen)
			return -EBADMSG;
		*rlen = sizeof(struct kvp_status_reply);
		return op_status(c, rbody);
	case KVP_OP_LAYOUT:
		*rlen = sizeof(struct kvp_layout_reply);
		return kvd_client_layout_add(c, BODY(struct kvp_layout), rbody);
	case KVP_OP_WRITE_KV:
		return kvd_op_kv(c, BODY(struct kvp_kv), true);
	case KVP_OP_READ_KV:
		return kvd_op_kv(c, BODY(struct kvp_kv), false);
	case KVP_OP_ATTN:
		return kvd_op_attn(c, BODY(struct kvp_attn));
	case KVP_OP_COPY:
		return kvd_op_copy(c, BODY(struct kvp_copy));
	case KVP_OP_LAYOUT_ROPE:
		return kvd_op_layout_rope(c, BODY(struct kvp_layout_rope));
	case KVP_OP_SPLICE:
		return kvd_op_splice(c, BODY(struct kvp_splice));
	case KVP_OP_COMPACT:
		return kvd_op_compact(c, BODY(struct kvp_compact));
	case KVP_OP_SCORE:
		return kvd_op_score(c, BODY(struct kvp_score));
	case KVP_OP_DEVBUF_ADD: {
		const struct kvp_devbuf *q = BODY(struct kvp_devbuf);

		*rlen = sizeof(struct kvp_devbuf_reply);
		if (c->nfds > 1)
			return -EBADF;
		return kvd_op_devbuf_add(c, q, kvd_client_take_fd(c), rbody);
	}
	case KVP_OP_DEVBUF_DEL:
		return kvd_op_devbuf_del(c, BODY(struct kvp_devbuf_del));
	case KVP_OP_WRITE_KV_DEV:
		return kvd_op_kv_dev(c, BODY(struct kvp_kv_dev), true);
	case KVP_OP_READ_KV_DEV:
		return kvd_op_kv_dev(c, BODY(struct kvp_kv_dev), false);
	case KVP_OP_ATTN_DEV:
		return kvd_op_attn_dev(c, BODY(struct kvp_attn_dev));
	case KVP_OP_PREFIX_MATCH: case KVP_OP_PREFIX_PUBLISH:
	case KVP_OP_PREFIX_UNREF: case KVP_OP_PREFIX_EVICT:
	case KVP_OP_LAYOUT_MODEL:
		return kvd_prefix_op(c, h->op, body, blen, rbody, rlen);
	}
	return -EOPNOTSUPP;
}

/* Every op drops the ledger pins its block checks took. */
static int dispatch_op(struct kvd_client *c, const struct kvp_hdr *h,
		       const void *body, size_t blen, void *rbody,
		       size_t *rlen)
{
	int r = dispatch(c, h, body, blen, rbody, rlen);

	kvd_client_unpin_blocks(c);
	return r;
}

/*
 * Take every descriptor passed with the record just received: keep up to
 * KVD_CLIENT_MAX_FDS for the op, close the others.  Done before anything else, on
 * every path, so no passed descriptor can stay open in the daemon.
 */
static void collect_fds(struct kvd_client *c, struct msghdr *mh)
{
	struct cmsghdr *cmh;

	for (cmh = CMSG_FIRSTHDR(mh); cmh; cmh = CMSG_NXTHDR(mh, cmh)) {
		size_t k, nf;
		int fd;

		if (cmh->cmsg_level != SOL_SOCKET ||
		    cmh->cmsg_type != SCM_RIGHTS ||
		    cmh->cmsg_len < CMSG_LEN(0))
			continue;
		nf = (cmh->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < nf; k++) {
			memcpy(&fd, CMSG_DATA(cmh) + k * sizeof(int),
			       sizeof(int));
			if (c->nfds < KVD_CLIENT_MAX_FDS)
				c->fds[c->nfds++] = fd;
			else
				close(fd);
		}
	}
}

/* Has the peer closed its end? (a 0-byte read is EOF or an empty record) */
static bool peer_gone(int sock)
{
	struct pollfd pf = { .fd = sock, .events = POLLRDHUP };

	return poll(&pf, 1, 0) > 0 &&
	       (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int kvd_client_serve(struct kvd_client *c)
{
	struct kvp_hdr *h = (struct kvp_hdr *)c->in;
	struct kvp_reply *rep = (struct kvp_reply *)c->out;
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVD_CLIENT_MAX_FDS)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = c->in, .iov_len = sizeof(c->in) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cm.buf, .msg_controllen = sizeof(cm.buf),
	};
	size_t rlen = 0;
	ssize_t n;
	int r;

	n = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	collect_fds(c, &mh);
	if (n == 0 && !mh.msg_controllen && !(mh.msg_flags & MSG_CTRUNC) &&
	    peer_gone(c->sock)) {
		drop_fds(c);
		return -ECONNRESET;
	}

	memset(rep, 0, sizeof(*rep));
	rep->hdr.magic = KVP_MAGIC;
	if ((size_t)n >= sizeof(*h)) {
		rep->hdr.op = h->op | KVP_REPLY;
		rep->hdr.req_id = h->req_id;
	}
	if (mh.msg_flags & MSG_TRUNC) {
		r = -EMSGSIZE;
	} else if (mh.msg_flags & MSG_CTRUNC) {
		/* More descriptors than KVD_CLIENT_MAX_FDS: the kernel closed the rest. */
		r = -EBADF;
	} else if ((size_t)n < sizeof(*h) || h->magic != KVP_MAGIC ||
		   h->len != (uint32_t)n) {
		r = -EBADMSG;
	} else if (h->flags) {
		r = -EINVAL;
	} else {
		r = dispatch_op(c, h, h + 1, (size_t)n - sizeof(*h), rep + 1,
			     &rlen);
	}
	drop_fds(c);
	if (r < 0) {
		rlen = 0;
		kvd_log(KVD_DEBUG, "pid %d op %u: %s", c->cred.pid,
			(size_t)n >= sizeof(*h) ? h->op : 0, strerror(-r));
	}
	rep->status = r;
	rep->epoch = c->d->epoch;
	rep->hdr.len = (uint32_t)(sizeof(*rep) + rlen);
	return kvd_client_send(c, rep, rep->hdr.len);
}

static void send_reclaim(struct kvd_client *c)
{
	struct {
		struct kvp_reply r;
		struct kvp_ev_reclaim ev;
	} m;
	uint64_t cnt;

	if (read(c->evfd, &cnt, sizeof(cnt)) < 0)
		return;
	memset(&m, 0, sizeof(m));
	m.r.hdr.magic = KVP_MAGIC;
	m.r.hdr.op = KVP_EV_RECLAIM;
	m.r.hdr.len = sizeof(m);
	m.r.epoch = c->d->epoch;
	m.ev.target = atomic_load(&c->reclaim_target);
	kvd_client_send(c, &m, sizeof(m));
}

void kvd_client_free(struct kvd_client *c)
{
	struct kvd *d = c->d;
	struct kvd_client **pp;

	pthread_mutex_lock(&d->clients_lock);
	for (pp = &d->clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	d->nclients--;
	pthread_mutex_unlock(&d->clients_lock);
	kvd_devbufs_clear(d, &c->devbufs);
	kvd_ctier_release(c->ct);
	kvd_prefix_conn_close(d, c->pfx);
	if (c->lease)
		kvd_ip_lease_close(d->top, c->lease);
	if (c->region)
		munmap(c->region, c->region_bytes);
	drop_fds(c);
	close(c->sock);
	if (c->evfd >= 0)
		close(c->evfd);
	free(c);
}

/*
 * Note how deep this thread's stack went: the bytes from the lowest
 * resident page of the stack mapping to its top (threads' stacks are
 * reused, so this is a high-water mark).
 */
static void note_stack_depth(struct kvd *d)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *vec = NULL;
	pthread_attr_t at;
	size_t size = 0, n, i;
	void *addr = NULL;
	uint64_t depth, old;

	if (page <= 0 || pthread_getattr_np(pthread_self(), &at))
		return;
	pthread_attr_getstack(&at, &addr, &size);
	pthread_attr_destroy(&at);
	n = size / (size_t)page;
	vec = n ? malloc(n) : NULL;
	if (!vec || mincore(addr, n * (size_t)page, vec)) {
		free(vec);
		return;
	}
	for (i = 0; i < n && !(vec[i] & 1); i++)
		;
	free(vec);
	depth = (uint64_t)(n - i) * (uint64_t)page;
	old = atomic_load(&d->stack_depth);
	while (depth > old &&
	       !atomic_compare_exchange_weak(&d->stack_depth, &old, depth))
		;
}

uint64_t kvd_client_stack_bytes(void)
{
	return KVD_CLIENT_STACK;
}

static void *client_main(void *arg)
{
	struct kvd_client *c = arg;

	kvd_log(KVD_DEBUG, "client pid %d uid %u connected", c->cred.pid,
		c->cred.uid);
	while (!c->d->stop) {
		struct pollfd pf[3] = {
			{ .fd = c->sock, .events = POLLIN },
			{ .fd = c->evfd, .events = POLLIN },
			{ .fd = kvd_ctier_fd(c->ct), .events = POLLIN },
		};

		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents & POLLIN)
			send_reclaim(c);
		if (pf[2].revents & POLLIN)
			kvd_ctier_flush(c, c->ct);
		if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			if (kvd_client_serve(c))
				break;
		}
	}
	kvd_log(KVD_DEBUG, "client pid %d gone (lease %llu)", c->cred.pid,
		(unsigned long long)c->lease_id);
	note_stack_depth(c->d);
	kvd_client_free(c);
	return NULL;
}

/* ---- listening socket ------------------------------------------------- */

static bool peer_admin(struct kvd *d, int fd, const struct ucred *cr)
{
	gid_t groups[128];
	socklen_t len = sizeof(groups);
	unsigned int i;

	if (cr->uid == 0 || cr->uid == d->self_uid)
		return true;
	if (d->admin_gid == (gid_t)-1)
		return false;
	if (cr->gid == d->admin_gid)
		return true;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
		return false;
	for (i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == d->admin_gid)
			return true;
	return false;
}

/* Tell a refused peer why (best effort) and close it. */
static void refuse(struct kvd *d, int fd, int status, const char *why,
		   uid_t uid)
{
	struct {
		struct kvp_reply r;
		struct kvp_ev_refused ev;
	} m;
	uint64_t now = kvd_now_ns();
	int i;

	memset(&m, 0, sizeof(m));
	m.r.hdr.magic = KVP_MAGIC;
	m.r.hdr.op = KVP_EV_REFUSED;
	m.r.hdr.len = sizeof(m);
	m.r.status = status;
	m.r.epoch = d->epoch;
	m.ev.status = status;
	if (send(fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* the peer learns it from the closed connection */
	}
	/*
	 * Drop what the peer sent already (the kernel closes descriptors it
	 * carried; at most 64 records, a peer cannot keep us here): closing
	 * with unread records would make the peer's next read fail with
	 * ECONNRESET before it sees the reason.
	 */
	for (i = 0; i < 64 && recv(fd, &m, sizeof(m), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
	d->refused++;
	if (now - d->refused_logged_ns >= 1000000000ULL) {
		kvd_log(KVD_WARN, "refused a connection of uid %u: %s (%llu refused so far)",
			(unsigned)uid, why, (unsigned long long)d->refused);
		d->refused_logged_ns = now;
	}
}

/* Connections of @uid now; caller holds clients_lock. */
static unsigned int uid_clients(struct kvd *d, uid_t uid)
{
	struct kvd_client *c;
	unsigned int n = 0;

	for (c = d->clients; c; c = c->next)
		n += c->cred.uid == uid;
	return n;
}

/*
 * A client for the connected socket @fd (taken over: closed on failure).
 * -EUSERS when the connection limits refuse it: --max-clients in all
 * (admin peers have KVD_ADMIN_RESERVE more) and --max-clients-per-uid
 * (admin peers are exempt).
 */
int kvd_client_new(struct kvd *d, int fd, struct kvd_client **out)
{
	struct kvd_client *c;
	socklen_t len = sizeof(struct ucred);
	const char *why = NULL;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->d = d;
	c->sock = fd;
	c->evfd = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len)) {
		r = -errno;
		goto err;
	}
	c->admin = peer_admin(d, fd, &c->cred);
	pthread_mutex_lock(&d->clients_lock);
	if (d->nclients >= d->o.max_clients + (c->admin ? KVD_ADMIN_RESERVE : 0))
		why = "too many connections (--max-clients)";
	else if (!c->admin &&
		 uid_clients(d, c->cred.uid) >= d->o.max_clients_per_uid)
		why = "too many connections of this uid (--max-clients-per-uid)";
	if (!why) {
		c->next = d->clients;
		d->clients = c;
		d->nclients++;
	}
	pthread_mutex_unlock(&d->clients_lock);
	if (why) {
		refuse(d, fd, -EUSERS, why, c->cred.uid);
		free(c);
		return -EUSERS;
	}
	c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->evfd < 0) {
		r = -errno;
		kvd_client_free(c);
		return r;
	}
	*out = c;
	return 0;
err:
	close(fd);
	free(c);
	return r;
}

/*
 * At the descriptor limit: accept the pending connection on the reserve
 * descriptor and refuse it, so that the listening socket does not stay
 * readable (a busy loop).  If even that fails, stop accepting for a while.
 */
static void accept_at_limit(struct kvd *d, int err)
{
	int fd = -1;

	if (d->reserve_fd >= 0) {
		close(d->reserve_fd);
		fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			struct ucred cr = { .uid = (uid_t)-1 };
			socklen_t len = sizeof(cr);

			getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
			refuse(d, fd, -EMFILE, "no descriptor left", cr.uid);
		}
		d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0 || d->reserve_fd < 0) {
		d->accept_paused_until_ns = kvd_now_ns() + KVD_ACCEPT_PAUSE_NS;
		kvd_log(KVD_WARN, "accept: %s: pausing accepts", strerror(err));
	}
}

void kvd_accept(struct kvd *d)
{
	struct kvd_client *c;
	pthread_attr_t at;
	int fd;

	fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE)
			accept_at_limit(d, errno);
		else if (errno == ENOBUFS || errno == ENOMEM)
			d->accept_paused_until_ns = kvd_now_ns() +
						    KVD_ACCEPT_PAUSE_NS;
		return;
	}
	if (kvd_client_new(d, fd, &c))
		return;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, KVD_CLIENT_STACK);
	if (pthread_create(&c->th, &at, client_main, c)) {
		kvd_log(KVD_WARN, "cannot start a client thread");
		kvd_client_free(c);
	}
	pthread_attr_destroy(&at);
}

void kvd_clients_stop(struct kvd *d)
{
	struct kvd_client *c;
	int i;

	d->stop = 1;
	for (i = 0; i < (int)d->npools; i++) {
		pthread_mutex_lock(&d->pools[i].lock);
		pthread_cond_broadcast(&d->pools[i].waiters);
		pthread_mutex_unlock(&d->pools[i].lock);
		kvd_backing_stop(&d->pools[i]);
	}
	pthread_mutex_lock(&d->clients_lock);
	for (c = d->clients; c; c = c->next)
		shutdown(c->sock, SHUT_RDWR);
	pthread_mutex_unlock(&d->clients_lock);
	for (i = 0; i < 300; i++) {
		unsigned int n;

		pthread_mutex_lock(&d->clients_lock);
		n = d->nclients;
		pthread_mutex_unlock(&d->clients_lock);
		if (!n)
			break;
		usleep(10000);
	}
}

/*
 * Remove what is at the socket path only if it is a stale socket of ours:
 * a socket file owned by us (or by the --user we run as) on which nobody
 * listens.  Anything else is left alone and refused: a live daemon
 * (-EADDRINUSE), a file that is not a socket or a socket of another user
 * (-EEXIST).  Nothing there: 0.
 */
static int clear_stale_socket(struct kvd *d, const struct sockaddr_un *sa)
{
	const char *path = sa->sun_path;
	struct passwd *pw = d->o.user ? getpwnam(d->o.user) : NULL;
	struct stat st;
	int fd, r;

	if (lstat(path, &st))
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		kvd_log(KVD_ERR, "%s exists and is not a socket: not replaced",
			path);
		return -EEXIST;
	}
	if (st.st_uid != geteuid() && !(pw && st.st_uid == pw->pw_uid)) {
		kvd_log(KVD_ERR, "%s is a socket of uid %u: not replaced", path,
			(unsigned)st.st_uid);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ? errno : 0;
	close(fd);
	if (!r)
		return -EADDRINUSE;		/* a live daemon answers */
	if (r != ECONNREFUSED) {
		kvd_log(KVD_ERR, "%s: %s: not replaced", path, strerror(r));
		return -r;
	}
	if (unlink(path) && errno != ENOENT)
		return -errno;
	kvd_log(KVD_INFO, "removed the stale socket %s", path);
	return 0;
}

int kvd_listen(struct kvd *d)
{
	struct sockaddr_un sa;
	const char *path = d->o.socket_path;
	char dir[sizeof(sa.sun_path)];
	char *slash;
	int fd, r;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (!mkdir(dir, 0755))
			snprintf(d->sock_dir, sizeof(d->sock_dir), "%s", dir);
		else if (errno != EEXIST)
			return -errno;
	}
	r = clear_stale_socket(d, &sa);
	if (r)
		return r;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(path, 0666) || listen(fd, 128)) {
		int e = -errno;

		close(fd);
		return e;
	}
	d->listen_fd = fd;
	return 0;
}
