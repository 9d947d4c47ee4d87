// SPDX-License-Identifier: MIT
/*
 * ledger.c - kvpoold's link to the ledger, and its owner duties.
 *
 * Module mode: the daemon opens /dev/kvpool, creates the pool (or attaches
 * to the orphaned one after a restart and rebuilds from SNAPSHOT), reads
 * owner events with read(2) and answers them with POOL_GROW/POOL_SHRINK.
 * In-process mode: the daemon hosts the ledger core (kmod/kvpool_ledger.c)
 * itself, with d->lock around every core call, d->waiters for waiting
 * grants and an eventfd to wake the owner (main) thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "kvpoold.h"
#include "inproc.h"
#include "prefix.h"

/* ---- in-process callbacks (d->lock held) ------------------------------- */

static void ip_owner_wake(struct kvpool_pool *pool)
{
	struct kvd *d = pool->host;
	uint64_t one = 1;

	if (write(d->wake_fd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wake is pending anyway */
	}
}

static void ip_waiters_wake(struct kvpool_pool *pool)
{
	struct kvd *d = pool->host;

	pthread_cond_broadcast(&d->waiters);
}

static void ip_reclaim_wake(struct kvpool_lease *lease)
{
	if (lease->host)
		kvd_client_reclaim(lease->host, lease->reclaim_target);
	else
		kvd_prefix_reclaim_wake(lease->pool->host);
}

static const struct kvpool_ledger_ops ip_ops = {
	.owner_wake = ip_owner_wake,
	.waiters_wake = ip_waiters_wake,
	.reclaim_wake = ip_reclaim_wake,
};

static int inproc_open(struct kvd *d)
{
	struct kvpool_pool_params pp;
	int r;

	memset(&pp, 0, sizeof(pp));
	memcpy(pp.name, d->pool_name, KVPOOL_NAME_LEN);
	pp.block_bytes = d->block_bytes;
	pp.capacity = d->capacity;
	pp.chunk_blocks = d->chunk_blocks;
	pp.default_max = d->o.default_max;
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->wake_fd < 0)
		return -errno;
	r = kvpool_pool_create(&pp, &ip_ops, d, d, &d->pool);
	if (r)
		return r;
	/* Epochs must differ across daemon lives: use the start time. */
	d->pool->epoch = d->epoch;
	return 0;	/* named tenants: kvd_tenants_apply() */
}

/* ---- module --------------------------------------------------------------- */

static int snapshot(struct kvd *d, struct kvpool_snapshot *s,
		    struct kvpool_lease_info **li, struct kvpool_block_owner **bo)
{
	int tries;

	*li = NULL;
	*bo = NULL;
	for (tries = 0; tries < 8; tries++) {
		memset(s, 0, sizeof(*s));
		if (ioctl(d->owner_fd, KVPOOL_IOC_SNAPSHOT, s))
			return -errno;
		free(*li);
		free(*bo);
		*li = calloc(s->leases + 16, sizeof(**li));
		*bo = calloc(s->blocks + 64, sizeof(**bo));
		if (!*li || !*bo)
			return -ENOMEM;
		s->leases_ptr = (uintptr_t)*li;
		s->blocks_ptr = (uintptr_t)*bo;
		s->leases_cap = s->leases + 16;
		s->blocks_cap = s->blocks + 64;
		if (!ioctl(d->owner_fd, KVPOOL_IOC_SNAPSHOT, s))
			return 0;
		if (errno != ENOSPC)
			return -errno;
	}
	return -EAGAIN;
}

static int module_open(struct kvd *d)
{
	struct kvpool_features f;
	struct kvpool_pool_attach pa;
	struct kvpool_pool_create pc;
	struct kvpool_status st;
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	int r;

	d->owner_fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);
	if (d->owner_fd < 0)
		return -errno;
	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_RECOVERY | KVPOOL_FEAT_LEASE_CHECK |
		      KVPOOL_FEAT_PIN;
	if (ioctl(d->owner_fd, KVPOOL_IOC_FEATURES, &f))
		return -errno;
	if ((f.enabled & f.requested) != f.requested) {
		kvd_log(KVD_ERR, "module lacks features 0x%llx",
			(unsigned long long)(f.requested & ~f.enabled));
		return -EOPNOTSUPP;
	}
	memset(&pa, 0, sizeof(pa));
	memcpy(pa.name, d->pool_name, KVPOOL_NAME_LEN);
	if (!ioctl(d->owner_fd, KVPOOL_IOC_POOL_ATTACH, &pa)) {
		d->epoch = pa.epoch;
		memset(&st, 0, sizeof(st));
		if (ioctl(d->owner_fd, KVPOOL_IOC_STATUS, &st))
			return -errno;
		if (st.block_bytes != d->block_bytes ||
		    st.capacity != d->capacity)
			kvd_log(KVD_WARN, "pool %s: using its block_bytes %llu "
				"capacity %u", d->pool_name,
				(unsigned long long)st.block_bytes,
				st.capacity);
		d->block_bytes = st.block_bytes;
		d->capacity = st.capacity;
		r = snapshot(d, &s, &li, &bo);
		if (r == 0)
			kvd_log(KVD_NOTICE, "re-attached to pool %s epoch %llu: "
				"%u leases, %u blocks leased, %u backed",
				d->pool_name, (unsigned long long)d->epoch,
				s.leases, s.blocks, s.backed);
		free(li);
		free(bo);
		if (r)
			return r;
		d->mapped = s.backed;	/* mapped by kvd_ledger_open's caller */
		return 1;
	}
	if (errno != ENOENT)
		return -errno;
	memset(&pc, 0, sizeof(pc));
	memcpy(pc.name, d->pool_name, KVPOOL_NAME_LEN);
	pc.block_bytes = d->block_bytes;
	pc.capacity = d->capacity;
	pc.chunk_blocks = d->chunk_blocks;
	pc.default_max = d->o.default_max;
	if (ioctl(d->owner_fd, KVPOOL_IOC_POOL_CREATE, &pc))
		return -errno;
	d->epoch = pc.epoch;
	kvd_log(KVD_NOTICE, "created pool %s epoch %llu", d->pool_name,
		(unsigned long long)d->epoch);
	return 0;
}

int kvd_ledger_open(struct kvd *d)
{
	int r;

	d->wake_fd = -1;
	d->owner_fd = -1;
	if (d->mode == KVP_MODE_INPROC)
		return inproc_open(d);
	r = module_open(d);
	if (r == 1) {
		uint32_t backed = d->mapped;

		d->mapped = 0;
		r = backed ? d->be->map(d, 0, backed) : 0;
		if (r) {
			kvd_log(KVD_ERR, "cannot back %u blocks after restart",
				backed);
			return r;
		}
		d->mapped = backed;
		d->shrink_at_ns = kvd_now_ns() +
				  d->o.shrink_delay_ms * 1000000ULL;
	}
	return r;
}

void kvd_ledger_close(struct kvd *d)
{
	if (d->pool) {
		pthread_mutex_lock(&d->lock);
		kvpool_pool_destroy(d->pool);
		d->pool = NULL;
		pthread_mutex_unlock(&d->lock);
	}
	if (d->owner_fd >= 0)
		close(d->owner_fd);
	if (d->wake_fd >= 0)
		close(d->wake_fd);
}

int kvd_owner_poll_fd(struct kvd *d)
{
	return d->mode == KVP_MODE_INPROC ? d->wake_fd : d->owner_fd;
}

/* ---- owner duties ----------------------------------------------------------- */

static int ledger_grow(struct kvd *d, uint32_t backed, uint32_t flags)
{
	struct kvpool_pool_resize rs;
	int r;

	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->lock);
		r = kvpool_pool_grow(d->pool, backed, flags);
		pthread_mutex_unlock(&d->lock);
		return r;
	}
	memset(&rs, 0, sizeof(rs));
	rs.backed = backed;
	rs.flags = flags;
	return ioctl(d->owner_fd, KVPOOL_IOC_POOL_GROW, &rs) ? -errno : 0;
}

/*
 * GROW: map chunks up to the target.  When memory runs out part way, back
 * what could be mapped (waiters that fit are granted) and then report
 * KVPOOL_GROW_FAILED so that the others get -ENOMEM at once.
 */
static void on_grow(struct kvd *d, uint32_t want)
{
	uint32_t target, next;
	int r = 0;

	target = (want + d->chunk_blocks - 1) / d->chunk_blocks *
		 d->chunk_blocks;
	if (target > d->capacity)
		target = d->capacity;
	while (d->mapped < target) {
		next = d->mapped + d->chunk_blocks;
		if (next > d->capacity)
			next = d->capacity;
		/* --backing-limit: the memory a device would have */
		if (d->o.backing_limit && next > d->o.backing_limit)
			r = -ENOMEM;
		else
			r = d->be->map(d, d->mapped, next);
		if (r)
			break;
		d->mapped = next;
	}
	if (d->mapped > 0) {
		int g = ledger_grow(d, d->mapped < target ? d->mapped : target,
				    0);

		if (g && g != -EINVAL)
			kvd_log(KVD_WARN, "POOL_GROW %u: %s", d->mapped,
				strerror(-g));
	}
	if (r) {
		kvd_log(KVD_WARN, "grow to %u blocks failed at %u: %s", target,
			d->mapped, strerror(-r));
		/* Room inside what is backed, before the waiters give up. */
		kvd_prefix_evict_pool(d, "", target - d->mapped);
		ledger_grow(d, 0, KVPOOL_GROW_FAILED);
	} else {
		kvd_log(KVD_DEBUG, "backed %u blocks", target);
	}
	/* a grow makes later idleness worth a shrink check */
	d->shrink_at_ns = kvd_now_ns() + d->o.shrink_delay_ms * 1000000ULL;
}

void kvd_owner_events(struct kvd *d)
{
	struct kvpool_event ev[32];
	int i, n = 0;

	if (d->mode == KVP_MODE_INPROC) {
		uint64_t cnt;

		if (read(d->wake_fd, &cnt, sizeof(cnt)) < 0) {
			/* nothing pending */
		}
		pthread_mutex_lock(&d->lock);
		while (n < 32 && kvpool_owner_read_event(d->pool, &ev[n]) == 1)
			n++;
		pthread_mutex_unlock(&d->lock);
		if (n == 32)
			ip_owner_wake(d->pool);	/* more next round */
	} else {
		ssize_t got = read(d->owner_fd, ev, sizeof(ev));

		if (got < 0) {
			if (errno != EAGAIN && errno != EINTR)
				kvd_log(KVD_ERR, "owner read: %m");
			return;
		}
		n = (int)(got / (ssize_t)sizeof(ev[0]));
	}
	for (i = 0; i < n; i++) {
		switch (ev[i].type) {
		case KVPOOL_EVENT_GROW:
			on_grow(d, ev[i].blocks);
			break;
		case KVPOOL_EVENT_IDLE:
			d->shrink_at_ns = kvd_now_ns() +
					  d->o.shrink_delay_ms * 1000000ULL;
			break;
		case KVPOOL_EVENT_SHORT:
			/* Unreferenced cached blocks are given back first. */
			kvd_prefix_evict_pool(d, ev[i].tenant, ev[i].blocks);
			break;
		case KVPOOL_EVENT_CLIENT_CLOSED:
			kvd_log(KVD_DEBUG, "lease %llu closed, %u blocks back",
				(unsigned long long)ev[i].lease_id,
				ev[i].blocks);
			d->shrink_at_ns = kvd_now_ns() +
					  d->o.shrink_delay_ms * 1000000ULL;
			break;
		default:
			break;
		}
	}
}

/* Lowest backed count SHRINK accepts now, module mode. */
static int module_floor(struct kvd *d, uint32_t *floor)
{
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	uint32_t top = 0;
	int r = snapshot(d, &s, &li, &bo);

	if (!r) {
		if (s.blocks)
			top = bo[s.blocks - 1].block + 1;
		*floor = (top + d->chunk_blocks - 1) / d->chunk_blocks *
			 d->chunk_blocks;
		if (*floor > d->capacity)
			*floor = d->capacity;
		if (*floor > s.backed)
			*floor = s.backed;
	}
	free(li);
	free(bo);
	return r;
}

void kvd_owner_timer(struct kvd *d)
{
	struct kvpool_pool_resize rs;
	uint32_t floor = 0, old;
	int r;

	if (!d->shrink_at_ns || kvd_now_ns() < d->shrink_at_ns)
		return;
	d->shrink_at_ns = 0;
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->lock);
		floor = kvpool_pool_shrink_floor(d->pool);
		r = floor < d->pool->backed ?
		    kvpool_pool_shrink(d->pool, floor) : -EALREADY;
		pthread_mutex_unlock(&d->lock);
	} else {
		r = module_floor(d, &floor);
		if (!r && floor < d->mapped) {
			memset(&rs, 0, sizeof(rs));
			rs.backed = floor;
			r = ioctl(d->owner_fd, KVPOOL_IOC_POOL_SHRINK, &rs) ?
			    -errno : 0;
		} else if (!r) {
			r = -EALREADY;
		}
	}
	if (r) {
		if (r != -EALREADY)
			kvd_log(KVD_DEBUG, "shrink to %u: %s", floor,
				strerror(-r));
		return;
	}
	/* The ledger no longer grants above floor: drop the memory once no
	 * data-plane op is running. */
	pthread_rwlock_wrlock(&d->backing);
	old = d->mapped;
	if (floor < old) {
		r = d->be->unmap(d, floor, old);
		if (r)
			kvd_log(KVD_WARN, "unmap: %s", strerror(-r));
		d->mapped = floor;
	}
	pthread_rwlock_unlock(&d->backing);
	kvd_log(KVD_DEBUG, "shrank %u -> %u blocks", old, floor);
}

uint64_t kvd_mapped_bytes(struct kvd *d)
{
	return (uint64_t)d->mapped * d->block_bytes;
}

int kvd_lease_check(struct kvd *d, uint64_t lease_id, const uint32_t *blocks,
		    uint32_t n, bool pin)
{
	struct kvpool_lease_check lc;
	uint32_t bad = 0;
	int r;

	if (!n)
		return 0;
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->lock);
		r = kvpool_lease_check(d->pool, lease_id, blocks, n, &bad);
		pthread_mutex_unlock(&d->lock);
		return r;
	}
	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)blocks;
	lc.lease_id = lease_id;
	lc.count = n;
	lc.flags = pin ? KVPOOL_LEASE_CHECK_PIN : 0;
	return ioctl(d->owner_fd, KVPOOL_IOC_LEASE_CHECK, &lc) ? -errno : 0;
}

int kvd_lease_unpin(struct kvd *d, uint64_t lease_id)
{
	struct kvpool_lease_unpin u;
	int r;

	if (d->mode == KVP_MODE_INPROC)
		return 0;
	memset(&u, 0, sizeof(u));
	u.lease_id = lease_id;
	r = ioctl(d->owner_fd, KVPOOL_IOC_LEASE_UNPIN, &u) ? -errno : 0;
	if (r)
		kvd_log(KVD_WARN, "unpin lease %llu: %s",
			(unsigned long long)lease_id, strerror(-r));
	return r;
}

void kvd_ledger_pool_rec(struct kvd *d, struct kvp_pool_rec *r)
{
	memset(r, 0, sizeof(*r));
	memcpy(r->name, d->pool_name, KVPOOL_NAME_LEN);
	strncpy(r->backend, d->be->name, sizeof(r->backend) - 1);
	r->mode = d->mode;
	r->chunk_blocks = d->chunk_blocks;
	r->mapped_bytes = kvd_mapped_bytes(d);
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->lock);
		r->block_bytes = d->pool->block_bytes;
		r->capacity = d->pool->capacity;
		r->backed = d->pool->backed;
		r->used = d->pool->used;
		r->state = KVPOOL_STATE_LIVE;
		r->epoch = d->pool->epoch;
		r->leases = d->pool->nleases;
		r->tenants = d->pool->ntenants;
		pthread_mutex_unlock(&d->lock);
	} else {
		struct kvpool_status st;
		struct kvpool_snapshot s;

		memset(&st, 0, sizeof(st));
		if (!ioctl(d->owner_fd, KVPOOL_IOC_STATUS, &st)) {
			r->block_bytes = st.block_bytes;
			r->capacity = st.capacity;
			r->backed = st.backed;
			r->used = st.used;
			r->state = st.state;
			r->epoch = st.epoch;
		}
		memset(&s, 0, sizeof(s));
		if (!ioctl(d->owner_fd, KVPOOL_IOC_SNAPSHOT, &s))
			r->leases = s.leases;
	}
}

/* ---- in-process ledger requests (client threads) ------------------------ */

int kvd_ip_lease_open(struct kvd *d, const struct kvpool_cred *cred,
		      void *client, const char *tenant,
		      struct kvpool_lease **out)
{
	int r;

	pthread_mutex_lock(&d->lock);
	r = kvpool_lease_open(d->pool, cred, out);
	if (!r) {
		(*out)->host = client;
		if (tenant && tenant[0]) {
			r = kvpool_lease_attach(*out, tenant, cred);
			if (r) {
				(*out)->host = NULL;
				kvpool_lease_close(*out);
				*out = NULL;
			}
		}
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

void kvd_ip_lease_close(struct kvd *d, struct kvpool_lease *lease)
{
	pthread_mutex_lock(&d->lock);
	lease->host = NULL;
	kvpool_lease_close(lease);
	pthread_mutex_unlock(&d->lock);
}

int kvd_ip_attach(struct kvd *d, struct kvpool_lease *lease,
		  const char *pool, const char *tenant,
		  const struct kvpool_cred *cred)
{
	int r;

	if (pool[0] && strncmp(pool, d->pool_name, KVPOOL_NAME_LEN))
		return -ENOENT;
	pthread_mutex_lock(&d->lock);
	r = kvpool_lease_attach(lease, tenant, cred);
	pthread_mutex_unlock(&d->lock);
	return r;
}

int kvd_ip_grant(struct kvd *d, struct kvpool_lease *lease, uint32_t count,
		 uint32_t flags, uint64_t timeout_ns, uint32_t *blocks,
		 int sock)
{
	struct kvpool_wait w;
	uint64_t deadline = timeout_ns ? kvd_now_ns() + timeout_ns : 0;
	int r;

	memset(&w, 0, sizeof(w));
	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct timespec ts;
		uint64_t now, until;
		struct pollfd pf = { .fd = sock, .events = POLLRDHUP };

		r = kvpool_lease_grant(lease, count, flags, blocks, &w);
		if (r != -EAGAIN || (flags & KVPOOL_LEASE_NONBLOCK))
			break;
		now = kvd_now_ns();
		if (deadline && now >= deadline) {
			r = -ETIMEDOUT;
			kvpool_lease_wait_end(lease, &w, r);
			break;
		}
		/* The peer hung up: stop waiting for it. */
		if (poll(&pf, 1, 0) > 0 &&
		    (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			r = -EINTR;
			kvpool_lease_wait_end(lease, &w, r);
			break;
		}
		if (d->stop) {
			r = -EINTR;
			kvpool_lease_wait_end(lease, &w, r);
			break;
		}
		until = now + 500000000ULL;
		if (deadline && deadline < until)
			until = deadline;
		/* d->waiters uses CLOCK_MONOTONIC (see main) */
		ts.tv_sec = (time_t)(until / 1000000000ULL);
		ts.tv_nsec = (long)(until % 1000000000ULL);
		pthread_cond_timedwait(&d->waiters, &d->lock, &ts);
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

int kvd_ip_release(struct kvd *d, struct kvpool_lease *lease,
		   const uint32_t *blocks, uint32_t count, uint32_t flags)
{
	int r;

	pthread_mutex_lock(&d->lock);
	if (flags & KVPOOL_RELEASE_ALL)
		r = kvpool_lease_release_all(lease);
	else
		r = kvpool_lease_release(lease, blocks, count);
	pthread_mutex_unlock(&d->lock);
	return r;
}

void kvd_ip_status(struct kvd *d, struct kvpool_lease *lease,
		   struct kvpool_status *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&d->lock);
	kvpool_status_fill(d->pool, lease, st);
	pthread_mutex_unlock(&d->lock);
}

/* ---- admin (in-process ledger) -------------------------------------------- */

int kvd_ip_tenant_op(struct kvd *d, int op, const struct kvp_tenant *t)
{
	char name[KVPOOL_NAME_LEN];
	struct kvpool_tenant *tn;
	int r = 0;

	if (d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;	/* use generic netlink */
	if (t->pool[0] && strncmp(t->pool, d->pool_name, KVPOOL_NAME_LEN))
		return -ENOENT;
	memcpy(name, t->name, sizeof(name));
	name[sizeof(name) - 1] = 0;
	pthread_mutex_lock(&d->lock);
	switch (op) {
	case KVP_OP_TENANT_ADD:
		r = kvpool_tenant_create(d->pool, name, t->max, t->min, t->uid,
					 t->gid, NULL);
		break;
	case KVP_OP_TENANT_DEL:
		r = kvpool_tenant_delete(d->pool, name);
		break;
	case KVP_OP_TENANT_SET:
		tn = kvpool_tenant_find(d->pool, name);
		if (!tn) {
			r = -ENOENT;
			break;
		}
		if (t->max != KVP_KEEP)
			r = kvpool_tenant_set_max(tn, t->max);
		if (!r && t->min != KVP_KEEP)
			r = kvpool_tenant_set_min(tn, t->min);
		if (!r && t->uid != KVP_KEEP)
			tn->allow_uid = t->uid;
		if (!r && t->gid != KVP_KEEP)
			tn->allow_gid = t->gid;
		break;
	default:
		r = -EOPNOTSUPP;
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

int kvd_ip_tenant_list(struct kvd *d, struct kvp_tenant_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total)
{
	struct kvpool_tenant *t;
	uint32_t i = 0, n = 0;

	if (d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&d->lock);
	list_for_each_entry(t, &d->pool->tenants, node) {
		if (i >= start && n < cap) {
			struct kvp_tenant_rec *o = &out[n++];

			memset(o, 0, sizeof(*o));
			memcpy(o->name, t->name, sizeof(o->name));
			o->max = t->max;
			o->min = t->min;
			o->current = t->cur;
			o->peak = t->peak;
			o->ev_max = t->ev_max;
			o->ev_stall = t->ev_stall;
			o->ev_reclaim = t->ev_reclaim;
			o->ev_fail = t->ev_fail;
			o->uid = t->allow_uid;
			o->gid = t->allow_gid;
			o->leases = t->nleases;
		}
		i++;
	}
	pthread_mutex_unlock(&d->lock);
	*total = i;
	return (int)n;
}

int kvd_ip_lease_list(struct kvd *d, struct kvp_client_rec *out,
		      uint32_t start, uint32_t cap, uint32_t *total)
{
	struct kvpool_lease *l;
	uint32_t i = 0, n = 0;

	pthread_mutex_lock(&d->lock);
	list_for_each_entry(l, &d->pool->leases, pool_node) {
		if (i >= start && n < cap) {
			struct kvp_client_rec *o = &out[n++];

			memset(o, 0, sizeof(*o));
			o->lease_id = l->id;
			o->pid = l->pid;
			o->uid = l->uid;
			memcpy(o->tenant, l->tenant->name, sizeof(o->tenant));
			o->blocks = l->held;
			o->connected = l->host != NULL;
		}
		i++;
	}
	pthread_mutex_unlock(&d->lock);
	*total = i;
	return (int)n;
}

int kvd_mod_lease_list(struct kvd *d, struct kvp_client_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total)
{
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	uint32_t i, n = 0;
	int r = snapshot(d, &s, &li, &bo);

	if (r) {
		free(li);
		free(bo);
		return r;
	}
	for (i = start; i < s.leases && n < cap; i++) {
		struct kvp_client_rec *o = &out[n++];

		memset(o, 0, sizeof(*o));
		o->lease_id = li[i].lease_id;
		o->pid = li[i].pid;
		o->uid = li[i].uid;
		memcpy(o->tenant, li[i].tenant, sizeof(o->tenant));
		o->blocks = li[i].blocks;
		o->connected = kvd_client_connected(d, li[i].lease_id);
	}
	*total = s.leases;
	free(li);
	free(bo);
	return (int)n;
}
