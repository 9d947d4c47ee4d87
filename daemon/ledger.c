// SPDX-License-Identifier: MIT
/*
 * ledger.c - kvpoold's link to the ledger, and its owner duties.
 *
 * Module mode: the daemon opens /dev/kvpool once per pool, creates the pool
 * (or attaches to the orphaned one after a restart and rebuilds from
 * SNAPSHOT), reads owner events with read(2) and answers them with
 * POOL_GROW/POOL_SHRINK.
 * In-process mode: the daemon hosts the ledger core (kmod/kvpool_ledger.c)
 * itself, one core pool per tier, with p->lock around every core call,
 * p->waiters for waiting grants and an eventfd to wake the owner (main)
 * thread.
 * Every pool (tier) has its own link: its own core pool or owner file,
 * lock, events, backing and shrink timer; nothing here is special to the
 * top pool except that its owner epoch is the daemon's data epoch.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "ledger.h"
#include "tier.h"
#include "inproc.h"
#include "scrub.h"
#include "restart.h"
#include "ledger_keep.h"

/* ---- in-process callbacks (p->lock held) ------------------------------- */

static void ip_owner_wake(struct kvpool_pool *pool)
{
	struct kvd_pool *p = pool->host;
	uint64_t one = 1;

	if (write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* counter saturated: a wake is pending anyway */
	}
}

static void ip_waiters_wake(struct kvpool_pool *pool)
{
	struct kvd_pool *p = pool->host;

	pthread_cond_broadcast(&p->waiters);
}

static void ip_reclaim_wake(struct kvpool_lease *lease)
{
	struct kvd_pool *p = lease->pool->host;

	/* a connection's lease; else in the top pool, maybe one of the
	 * prefix cache's (a lower tier's leases without a client are the
	 * connections' own there: reclaim there is not asked of them) */
	if (lease->host) {
		if (p->d->hooks.client_reclaim)
			p->d->hooks.client_reclaim(lease->host,
						   lease->reclaim_target);
	} else if (p == p->d->top && p->d->hooks.cache_reclaim) {
		p->d->hooks.cache_reclaim(p->d);
	}
}

static const struct kvpool_ledger_ops ip_ops = {
	.owner_wake = ip_owner_wake,
	.waiters_wake = ip_waiters_wake,
	.reclaim_wake = ip_reclaim_wake,
	.blocks_owned = kvd_lkeep_owned,
};

struct kvd_pool *kvd_pool_by_name(struct kvd *d, const char *name)
{
	unsigned int i;

	if (!name || !name[0])
		return d->top;
	for (i = 0; i < d->npools; i++)
		if (!strncmp(d->pools[i].name, name, KVPOOL_NAME_LEN))
			return &d->pools[i];
	return NULL;
}

static int inproc_open(struct kvd_pool *p)
{
	struct kvd *d = p->d;
	struct kvpool_pool_params pp;
	int r;

	memset(&pp, 0, sizeof(pp));
	memcpy(pp.name, p->name, KVPOOL_NAME_LEN);
	pp.block_bytes = p->block_bytes;
	pp.capacity = p->capacity;
	pp.chunk_blocks = p->chunk_blocks;
	pp.default_max = d->o.default_max;
	p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->wake_fd < 0)
		return -errno;
	r = kvpool_pool_create(&pp, &ip_ops, p, p, &p->pool);
	if (r)
		return r;
	/* Epochs must differ across daemon lives: use the start time. */
	p->pool->epoch = d->epoch;
	return 0;
}

/* ---- module --------------------------------------------------------------- */

static int snapshot(struct kvd_pool *p, struct kvpool_snapshot *s,
		    struct kvpool_lease_info **li,
		    struct kvpool_block_owner **bo)
{
	int tries;

	*li = NULL;
	*bo = NULL;
	for (tries = 0; tries < 8; tries++) {
		memset(s, 0, sizeof(*s));
		if (ioctl(p->owner_fd, KVPOOL_IOC_SNAPSHOT, s))
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
		if (!ioctl(p->owner_fd, KVPOOL_IOC_SNAPSHOT, s))
			return 0;
		if (errno != ENOSPC)
			return -errno;
	}
	return -EAGAIN;
}

int kvd_ledger_snapshot(struct kvd_pool *p, struct kvpool_snapshot *s,
			struct kvpool_lease_info **li,
			struct kvpool_block_owner **bo)
{
	int r = snapshot(p, s, li, bo);

	if (r) {
		free(*li);
		free(*bo);
		*li = NULL;
		*bo = NULL;
	}
	return r;
}

int kvd_ledger_geometry(struct kvd_pool *p)
{
	struct kvpool_status st;

	memset(&st, 0, sizeof(st));
	if (ioctl(p->owner_fd, KVPOOL_IOC_STATUS, &st))
		return -errno;
	if (st.block_bytes == p->block_bytes && st.capacity == p->capacity)
		return 0;
	kvd_log(KVD_WARN, "pool %s: using its block_bytes %llu capacity %u",
		p->name, (unsigned long long)st.block_bytes, st.capacity);
	p->block_bytes = st.block_bytes;
	p->capacity = st.capacity;
	return 1;
}

/* 0: created, 1: re-attached (p->mapped = the pool's backed count, to be
 * mapped by the caller), or -errno. */
static int module_open(struct kvd_pool *p, uint64_t *epoch)
{
	struct kvd *d = p->d;
	struct kvpool_features f;
	struct kvpool_pool_attach pa;
	struct kvpool_pool_create pc;
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	bool early = p->owner_fd >= 0;	/* restart.c attached already */
	int r;

	if (!early)
		p->owner_fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);
	if (p->owner_fd < 0)
		return -errno;
	memset(&f, 0, sizeof(f));
	f.requested = KVD_MODULE_FEATURES;
	if (ioctl(p->owner_fd, KVPOOL_IOC_FEATURES, &f))
		return -errno;
	if ((f.enabled & f.requested) != f.requested) {
		kvd_log(KVD_ERR, "module lacks features 0x%llx",
			(unsigned long long)(f.requested & ~f.enabled));
		return -EOPNOTSUPP;
	}
	memset(&pa, 0, sizeof(pa));
	memcpy(pa.name, p->name, KVPOOL_NAME_LEN);
	if (early || !ioctl(p->owner_fd, KVPOOL_IOC_POOL_ATTACH, &pa)) {
		*epoch = early ? p->attached_epoch : pa.epoch;
		r = kvd_ledger_geometry(p);
		if (r > 0)
			r = kvd_pool_reinit(p);
		if (r)
			return r;
		r = snapshot(p, &s, &li, &bo);
		if (r == 0)
			kvd_log(KVD_NOTICE, "re-attached to pool %s epoch %llu: "
				"%u leases, %u blocks leased, %u backed",
				p->name, (unsigned long long)*epoch,
				s.leases, s.blocks, s.backed);
		free(li);
		free(bo);
		if (r)
			return r;
		p->mapped = s.backed;	/* mapped by kvd_ledger_open */
		return 1;
	}
	if (errno != ENOENT)
		return -errno;
	memset(&pc, 0, sizeof(pc));
	memcpy(pc.name, p->name, KVPOOL_NAME_LEN);
	pc.block_bytes = p->block_bytes;
	pc.capacity = p->capacity;
	pc.chunk_blocks = p->chunk_blocks;
	pc.default_max = d->o.default_max;
	if (ioctl(p->owner_fd, KVPOOL_IOC_POOL_CREATE, &pc))
		return -errno;
	*epoch = pc.epoch;
	kvd_log(KVD_NOTICE, "created pool %s epoch %llu", p->name,
		(unsigned long long)pc.epoch);
	return 0;
}

static int pool_open(struct kvd_pool *p)
{
	struct kvd *d = p->d;
	uint64_t epoch = 0;
	uint32_t backed;
	int r;

	p->wake_fd = -1;
	if (d->mode == KVP_MODE_INPROC)
		return inproc_open(p);
	r = module_open(p, &epoch);
	if (r < 0)
		return r;
	/* The data epoch is the top pool's owner epoch. */
	if (p == d->top)
		d->epoch = epoch;
	if (r == 1) {
		backed = p->mapped;
		p->mapped = 0;
		r = backed ? p->ops->map(p, 0, backed) : 0;
		if (r) {
			kvd_log(KVD_ERR, "pool %s: cannot back %u blocks after "
				"restart", p->name, backed);
			return r;
		}
		p->mapped = backed;
		p->shrink_at_ns = kvd_now_ns() +
				  d->o.shrink_delay_ms * 1000000ULL;
	}
	return 0;
}

int kvd_ledger_open(struct kvd *d)
{
	unsigned int i;
	int r;

	for (i = 0; i < d->npools; i++)
		d->pools[i].wake_fd = -1;
	for (i = 0; i < d->npools; i++) {
		r = pool_open(&d->pools[i]);
		if (r) {
			kvd_log(KVD_ERR, "pool %s: %s", d->pools[i].name,
				strerror(-r));
			return r;
		}
	}
	return 0;	/* named tenants: kvd_tenants_apply() */
}

void kvd_ledger_close(struct kvd *d)
{
	unsigned int i;

	for (i = 0; i < d->npools; i++) {
		struct kvd_pool *p = &d->pools[i];

		if (p->pool) {
			pthread_mutex_lock(&p->lock);
			kvpool_pool_destroy(p->pool);
			p->pool = NULL;
			pthread_mutex_unlock(&p->lock);
		}
		if (p->owner_fd >= 0)
			close(p->owner_fd);
		if (p->wake_fd >= 0)
			close(p->wake_fd);
		p->owner_fd = p->wake_fd = -1;
	}
}

int kvd_owner_poll_fd(struct kvd_pool *p)
{
	return p->d->mode == KVP_MODE_INPROC ? p->wake_fd : p->owner_fd;
}

/* ---- owner duties ----------------------------------------------------------- */

static int ledger_grow(struct kvd_pool *p, uint32_t backed, uint32_t flags)
{
	struct kvpool_pool_resize rs;
	int r;

	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		r = kvpool_pool_grow(p->pool, backed, flags);
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	memset(&rs, 0, sizeof(rs));
	rs.backed = backed;
	rs.flags = flags;
	return ioctl(p->owner_fd, KVPOOL_IOC_POOL_GROW, &rs) ? -errno : 0;
}

static void arm_shrink(struct kvd_pool *p)
{
	p->shrink_at_ns = kvd_now_ns() + p->d->o.shrink_delay_ms * 1000000ULL;
}

/*
 * Short of @n free blocks (@asker: the tenant that waits, "" any): the top
 * pool's unreferenced cached blocks are given back first (the prefix cache
 * lives there); demoted prefix blocks in a lower pool go on down.  Both
 * through the hooks of the floors above (struct kvd_hooks).
 */
static void pool_short(struct kvd_pool *p, const char *asker, uint32_t n)
{
	struct kvd *d = p->d;

	if (p == d->top) {
		if (d->hooks.cache_evict)
			d->hooks.cache_evict(d, asker, n);
	} else if (d->hooks.tier_short) {
		d->hooks.tier_short(p, n);
	}
}

/*
 * GROW: map chunks up to the target.  When memory runs out part way, back
 * what could be mapped (waiters that fit are granted) and then report
 * KVPOOL_GROW_FAILED so that the others get -ENOMEM at once.
 */
static void on_grow(struct kvd_pool *p, uint32_t want)
{
	uint32_t target, next;
	int r = 0;

	target = (want + p->chunk_blocks - 1) / p->chunk_blocks *
		 p->chunk_blocks;
	if (target > p->capacity)
		target = p->capacity;
	while (p->mapped < target) {
		next = p->mapped + p->chunk_blocks;
		if (next > p->capacity)
			next = p->capacity;
		/* --backing-limit: the memory a device would have */
		if (p->backing_limit && next > p->backing_limit)
			r = -ENOMEM;
		else
			r = p->ops->map(p, p->mapped, next);
		if (r)
			break;
		p->mapped = next;
	}
	if (p->mapped > 0) {
		int g = ledger_grow(p, p->mapped < target ? p->mapped : target,
				    0);

		if (g && g != -EINVAL)
			kvd_log(KVD_WARN, "%s: POOL_GROW %u: %s", p->name,
				p->mapped, strerror(-g));
	}
	if (r) {
		kvd_log(KVD_WARN, "%s: grow to %u blocks failed at %u: %s",
			p->name, target, p->mapped, strerror(-r));
		/* Room inside what is backed, before the waiters give up. */
		pool_short(p, "", target - p->mapped);
		ledger_grow(p, 0, KVPOOL_GROW_FAILED);
	} else {
		kvd_log(KVD_DEBUG, "%s: backed %u blocks", p->name, target);
	}
	/* a grow makes later idleness worth a shrink check */
	arm_shrink(p);
}

int kvd_ip_back(struct kvd_pool *p, uint32_t blocks)
{
	uint32_t target = (blocks + p->chunk_blocks - 1) / p->chunk_blocks *
			  p->chunk_blocks;
	int r = 0;

	if (target > p->capacity)
		target = p->capacity;
	if (p->backing_limit && target > p->backing_limit)
		return -ENOMEM;
	if (p->mapped < target) {
		r = p->ops->map(p, p->mapped, target);
		if (r)
			return r;
		p->mapped = target;
	}
	r = ledger_grow(p, target, 0);
	arm_shrink(p);
	return r;
}

void kvd_owner_events(struct kvd_pool *p)
{
	struct kvpool_event ev[32];
	int i, n = 0;

	if (p->d->mode == KVP_MODE_INPROC) {
		uint64_t cnt;

		if (read(p->wake_fd, &cnt, sizeof(cnt)) < 0) {
			/* nothing pending */
		}
		pthread_mutex_lock(&p->lock);
		while (n < 32 && kvpool_owner_read_event(p->pool, &ev[n]) == 1)
			n++;
		pthread_mutex_unlock(&p->lock);
		if (n == 32)
			ip_owner_wake(p->pool);	/* more next round */
	} else {
		ssize_t got = read(p->owner_fd, ev, sizeof(ev));

		if (got < 0) {
			if (errno != EAGAIN && errno != EINTR)
				kvd_log(KVD_ERR, "%s: owner read: %m",
					p->name);
			return;
		}
		n = (int)(got / (ssize_t)sizeof(ev[0]));
	}
	for (i = 0; i < n; i++) {
		switch (ev[i].type) {
		case KVPOOL_EVENT_GROW:
			on_grow(p, ev[i].blocks);
			break;
		case KVPOOL_EVENT_IDLE:
			arm_shrink(p);
			break;
		case KVPOOL_EVENT_SHORT:
			/* Unreferenced cached blocks are given back first
			 * (the prefix cache lives in the top pool). */
			pool_short(p, ev[i].tenant, ev[i].blocks);
			break;
		case KVPOOL_EVENT_CLIENT_CLOSED:
			kvd_log(KVD_DEBUG, "%s: lease %llu closed, %u blocks "
				"back", p->name,
				(unsigned long long)ev[i].lease_id,
				ev[i].blocks);
			arm_shrink(p);
			break;
		case KVPOOL_EVENT_CLOSED_MANY:
			/* The daemon keeps no per-lease state to resync. */
			kvd_log(KVD_INFO, "%s: %u more leases closed, %u blocks "
				"back", p->name, ev[i].arg, ev[i].blocks);
			arm_shrink(p);
			break;
		default:
			break;
		}
	}
}

/* Lowest backed count SHRINK accepts now, module mode. */
static int module_floor(struct kvd_pool *p, uint32_t *floor)
{
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	uint32_t top = 0;
	int r = snapshot(p, &s, &li, &bo);

	if (!r) {
		if (s.blocks)
			top = bo[s.blocks - 1].block + 1;
		*floor = (top + p->chunk_blocks - 1) / p->chunk_blocks *
			 p->chunk_blocks;
		if (*floor > p->capacity)
			*floor = p->capacity;
		if (*floor > s.backed)
			*floor = s.backed;
	}
	free(li);
	free(bo);
	return r;
}

/* The ledger's backed count now (what must stay mapped), or -errno. */
static int64_t ledger_backed(struct kvd_pool *p)
{
	struct kvpool_status st;
	int64_t b;

	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		b = p->pool->backed;
		pthread_mutex_unlock(&p->lock);
		return b;
	}
	memset(&st, 0, sizeof(st));
	if (ioctl(p->owner_fd, KVPOOL_IOC_STATUS, &st))
		return -errno;
	return st.backed;
}

/*
 * The backing lock of a pool and its gate.  Only this file reaches the
 * lock: everything else holds it for reading through kvd_backing_rdlock(),
 * which waits while the gate is closed, so that a due unmap is never
 * starved by ops that overlap one another.
 */
struct kvd_backing {
	pthread_rwlock_t rw;
	_Atomic bool gate;		/* new ops wait: an unmap is due */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cv;
};

int kvd_backing_init(struct kvd_pool *p)
{
	struct kvd_backing *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	pthread_rwlock_init(&b->rw, NULL);
	atomic_init(&b->gate, false);
	pthread_mutex_init(&b->gate_lock, NULL);
	pthread_cond_init(&b->gate_cv, NULL);
	p->backing = b;
	return 0;
}

void kvd_backing_fini(struct kvd_pool *p)
{
	struct kvd_backing *b = p->backing;

	if (!b)
		return;
	pthread_rwlock_destroy(&b->rw);
	pthread_mutex_destroy(&b->gate_lock);
	pthread_cond_destroy(&b->gate_cv);
	free(b);
	p->backing = NULL;
}

/* Let data-plane ops take the backing lock again. */
static void gate_open(struct kvd_pool *p)
{
	struct kvd_backing *b = p->backing;

	pthread_mutex_lock(&b->gate_lock);
	atomic_store(&b->gate, false);
	pthread_cond_broadcast(&b->gate_cv);
	pthread_mutex_unlock(&b->gate_lock);
}

/* d->stop is set: whoever waits at the gate goes on. */
void kvd_backing_stop(struct kvd_pool *p)
{
	struct kvd_backing *b = p->backing;

	if (!b)
		return;
	pthread_mutex_lock(&b->gate_lock);
	pthread_cond_broadcast(&b->gate_cv);
	pthread_mutex_unlock(&b->gate_lock);
}

/*
 * Give back the memory above what the ledger has backed, without ever
 * waiting for a data-plane op: the owner (main) thread only tries the
 * backing lock and, if an op holds it, retries every KVD_TRIM_RETRY_NS.
 * After KVD_TRIM_GATE_NS of failed tries it closes the gate: new ops wait
 * (kvd_backing_rdlock) until the ops in flight, each bounded, are done
 * and the memory is unmapped, so that overlapping ops cannot hold the
 * memory forever.  Everything else the owner does (accepts, GROW, the
 * other pools) goes on meanwhile.
 */
void kvd_backing_trim(struct kvd_pool *p)
{
	uint64_t now = kvd_now_ns();
	int64_t floor = ledger_backed(p);
	uint32_t old = p->mapped;
	struct kvd_backing *b = p->backing;
	int r;

	p->trim_at_ns = 0;
	if (floor < 0 || (uint64_t)floor >= old) {
		p->trim_since_ns = 0;
		if (atomic_load(&b->gate))
			gate_open(p);
		return;
	}
	if (pthread_rwlock_trywrlock(&b->rw)) {
		if (!p->trim_since_ns)
			p->trim_since_ns = now;
		else if (now - p->trim_since_ns >= KVD_TRIM_GATE_NS &&
			 !atomic_load(&b->gate)) {
			atomic_store(&b->gate, true);
			kvd_log(KVD_DEBUG, "%s: shrink waits for data-plane "
				"ops: new ones wait for it", p->name);
		}
		p->trim_at_ns = now + KVD_TRIM_RETRY_NS;
		return;
	}
	r = p->ops->unmap(p, (uint32_t)floor, old);
	if (r)
		kvd_log(KVD_WARN, "%s: unmap: %s", p->name, strerror(-r));
	kvd_scrub_unmapped(p, (uint32_t)floor, old, !r);
	p->mapped = (uint32_t)floor;
	pthread_rwlock_unlock(&b->rw);
	p->trim_since_ns = 0;
	if (atomic_load(&b->gate))
		gate_open(p);
	kvd_log(KVD_DEBUG, "%s: shrank %u -> %u blocks", p->name, old,
		(uint32_t)floor);
}

void kvd_backing_rdlock(struct kvd_pool *p)
{
	struct kvd_backing *b = p->backing;

	if (atomic_load(&b->gate)) {
		pthread_mutex_lock(&b->gate_lock);
		while (atomic_load(&b->gate) && !p->d->stop)
			pthread_cond_wait(&b->gate_cv, &b->gate_lock);
		pthread_mutex_unlock(&b->gate_lock);
	}
	pthread_rwlock_rdlock(&b->rw);
}

bool kvd_backing_tryrdlock(struct kvd_pool *p)
{
	struct kvd_backing *b = p->backing;

	if (atomic_load(&b->gate))
		return false;
	return pthread_rwlock_tryrdlock(&b->rw) == 0;
}

void kvd_backing_unlock(struct kvd_pool *p)
{
	pthread_rwlock_unlock(&p->backing->rw);
}

void kvd_owner_timer(struct kvd_pool *p)
{
	struct kvpool_pool_resize rs;
	uint32_t floor = 0;
	int r;

	if (p->trim_at_ns && kvd_now_ns() >= p->trim_at_ns)
		kvd_backing_trim(p);
	if (!p->shrink_at_ns || kvd_now_ns() < p->shrink_at_ns)
		return;
	p->shrink_at_ns = 0;
	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		floor = kvpool_pool_shrink_floor(p->pool);
		r = floor < p->pool->backed ?
		    kvpool_pool_shrink(p->pool, floor) : -EALREADY;
		pthread_mutex_unlock(&p->lock);
	} else {
		r = module_floor(p, &floor);
		if (!r && floor < p->mapped) {
			memset(&rs, 0, sizeof(rs));
			rs.backed = floor;
			r = ioctl(p->owner_fd, KVPOOL_IOC_POOL_SHRINK, &rs) ?
			    -errno : 0;
		} else if (!r) {
			r = -EALREADY;
		}
	}
	if (r && r != -EALREADY)
		kvd_log(KVD_DEBUG, "%s: shrink to %u: %s", p->name, floor,
			strerror(-r));
	/* The ledger no longer grants above its backed count: drop the
	 * memory above it as soon as no data-plane op or swap job is
	 * running on it. */
	kvd_backing_trim(p);
}

uint64_t kvd_mapped_bytes(struct kvd_pool *p)
{
	return (uint64_t)p->mapped * p->block_bytes;
}

int kvd_lease_check_serial(struct kvd_pool *p, uint64_t lease_id,
			   const uint32_t *blocks, uint32_t n, bool pin,
			   uint64_t *serial)
{
	struct kvpool_lease_check lc;
	uint32_t bad = 0;
	int r;

	if (!n)
		return 0;
	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		r = kvpool_lease_check(p->pool, lease_id, blocks, n, &bad);
		if (!r && serial)
			*serial = kvpool_lease_find(p->pool,
						    lease_id)->tenant->serial;
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)blocks;
	lc.lease_id = lease_id;
	lc.count = n;
	lc.flags = pin ? KVPOOL_LEASE_CHECK_PIN : 0;
	if (ioctl(p->owner_fd, KVPOOL_IOC_LEASE_CHECK, &lc))
		return -errno;
	if (serial)
		*serial = lc.tenant_serial;
	return 0;
}

int kvd_lease_check(struct kvd_pool *p, uint64_t lease_id,
		    const uint32_t *blocks, uint32_t n, bool pin)
{
	return kvd_lease_check_serial(p, lease_id, blocks, n, pin, NULL);
}

int kvd_lease_tenant(struct kvd_pool *p, uint64_t lease_id, uint64_t *serial,
		     char name[KVPOOL_NAME_LEN])
{
	struct kvpool_status st;
	struct kvpool_lease *l;

	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		l = kvpool_lease_find(p->pool, lease_id);
		if (l) {
			*serial = l->tenant->serial;
			memcpy(name, l->tenant->name, KVPOOL_NAME_LEN);
		}
		pthread_mutex_unlock(&p->lock);
		return l ? 0 : -ENOENT;
	}
	memset(&st, 0, sizeof(st));
	st.lease_id = lease_id;
	st.flags = KVPOOL_STATUS_LEASE;
	if (ioctl(p->owner_fd, KVPOOL_IOC_STATUS, &st))
		return -errno;
	*serial = st.tenant_serial;
	memcpy(name, st.tenant, KVPOOL_NAME_LEN);
	name[KVPOOL_NAME_LEN - 1] = 0;
	return 0;
}

int kvd_ledger_fd_check(struct kvd_pool *p, int fd)
{
	struct stat mine, theirs;

	if (fstat(p->owner_fd, &mine) || fstat(fd, &theirs))
		return -EBADF;
	if (!S_ISCHR(mine.st_mode) || !S_ISCHR(theirs.st_mode) ||
	    theirs.st_rdev != mine.st_rdev)
		return -EBADF;
	return 0;
}

int kvd_lease_unpin(struct kvd_pool *p, uint64_t lease_id)
{
	struct kvpool_lease_unpin u;
	int r;

	if (p->d->mode == KVP_MODE_INPROC)
		return 0;
	memset(&u, 0, sizeof(u));
	u.lease_id = lease_id;
	r = ioctl(p->owner_fd, KVPOOL_IOC_LEASE_UNPIN, &u) ? -errno : 0;
	if (r)
		kvd_log(KVD_WARN, "%s: unpin lease %llu: %s", p->name,
			(unsigned long long)lease_id, strerror(-r));
	return r;
}

int kvd_lease_pin(struct kvd_pool *p, uint64_t lease_id,
		  const uint32_t *blocks, uint32_t n)
{
	uint32_t bad = 0;
	int r;

	if (!n)
		return -EINVAL;
	if (p->d->mode != KVP_MODE_INPROC)
		return kvd_lease_check(p, lease_id, blocks, n, true);
	pthread_mutex_lock(&p->lock);
	r = kvpool_lease_pin(p->pool, lease_id, blocks, n, &bad);
	pthread_mutex_unlock(&p->lock);
	return r;
}

void kvd_lease_pin_drop(struct kvd_pool *p, uint64_t lease_id)
{
	int r;

	if (p->d->mode != KVP_MODE_INPROC) {
		kvd_lease_unpin(p, lease_id);
		return;
	}
	pthread_mutex_lock(&p->lock);
	r = kvpool_lease_unpin(p->pool, lease_id);
	pthread_mutex_unlock(&p->lock);
	if (r)
		kvd_log(KVD_WARN, "%s: unpin lease %llu: %s", p->name,
			(unsigned long long)lease_id, strerror(-r));
}

void kvd_ledger_pool_rec(struct kvd_pool *p, struct kvp_pool_rec *r)
{
	struct kvd *d = p->d;

	memset(r, 0, sizeof(*r));
	memcpy(r->name, p->name, KVPOOL_NAME_LEN);
	strncpy(r->backend, d->be->name, sizeof(r->backend) - 1);
	r->mode = d->mode;
	r->chunk_blocks = p->chunk_blocks;
	r->mapped_bytes = kvd_mapped_bytes(p);
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		r->block_bytes = p->pool->block_bytes;
		r->capacity = p->pool->capacity;
		r->backed = p->pool->backed;
		r->used = p->pool->used;
		r->state = KVPOOL_STATE_LIVE;
		r->epoch = p->pool->epoch;
		r->leases = p->pool->nleases;
		r->tenants = p->pool->ntenants;
		pthread_mutex_unlock(&p->lock);
	} else {
		struct kvpool_status st;
		struct kvpool_snapshot s;

		memset(&st, 0, sizeof(st));
		if (!ioctl(p->owner_fd, KVPOOL_IOC_STATUS, &st)) {
			r->block_bytes = st.block_bytes;
			r->capacity = st.capacity;
			r->backed = st.backed;
			r->used = st.used;
			r->state = st.state;
			r->epoch = st.epoch;
		}
		memset(&s, 0, sizeof(s));
		if (!ioctl(p->owner_fd, KVPOOL_IOC_SNAPSHOT, &s))
			r->leases = s.leases;
	}
}

/* ---- in-process ledger requests (client threads) ------------------------ */

int kvd_ip_lease_open(struct kvd_pool *p, const struct kvpool_cred *cred,
		      void *client, const char *tenant,
		      struct kvpool_lease **out)
{
	int r;

	pthread_mutex_lock(&p->lock);
	r = kvpool_lease_open(p->pool, cred, out);
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
	pthread_mutex_unlock(&p->lock);
	return r;
}

void kvd_ip_lease_close(struct kvd_pool *p, struct kvpool_lease *lease)
{
	pthread_mutex_lock(&p->lock);
	kvd_lkeep_forget(p, lease);
	lease->host = NULL;
	kvpool_lease_close(lease);
	pthread_mutex_unlock(&p->lock);
}

int kvd_ip_attach(struct kvd_pool *p, struct kvpool_lease *lease,
		  const char *pool, const char *tenant,
		  const struct kvpool_cred *cred)
{
	int r;

	if (pool[0] && strncmp(pool, p->name, KVPOOL_NAME_LEN))
		return -ENOENT;
	pthread_mutex_lock(&p->lock);
	r = kvpool_lease_attach(lease, tenant, cred);
	if (!r)
		kvd_lkeep_retenant(p, lease);
	pthread_mutex_unlock(&p->lock);
	return r;
}

static void deadline_ts(uint64_t until, struct timespec *ts)
{
	/* p->waiters uses CLOCK_MONOTONIC (see kvd_pools_init) */
	ts->tv_sec = (time_t)(until / 1000000000ULL);
	ts->tv_nsec = (long)(until % 1000000000ULL);
}

int kvd_ip_grant(struct kvd_pool *p, struct kvpool_lease *lease,
		 uint32_t count, uint32_t flags, uint64_t timeout_ns,
		 uint32_t *blocks, int sock)
{
	struct kvpool_wait w;
	uint64_t now0 = kvd_now_ns();
	/* Saturate: a huge timeout is no limit, never one in the past. */
	uint64_t deadline = !timeout_ns ? 0 :
			    timeout_ns > UINT64_MAX - now0 ? UINT64_MAX :
			    now0 + timeout_ns;
	int r;

	memset(&w, 0, sizeof(w));
	pthread_mutex_lock(&p->lock);
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
		if (p->d->stop) {
			r = -EINTR;
			kvpool_lease_wait_end(lease, &w, r);
			break;
		}
		until = now + 500000000ULL;
		if (deadline && deadline < until)
			until = deadline;
		deadline_ts(until, &ts);
		pthread_cond_timedwait(&p->waiters, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* A release waits while a swap job has the lease pinned (the core says
 * -EBUSY): the job's unpin wakes the waiters. */
int kvd_ip_release(struct kvd_pool *p, struct kvpool_lease *lease,
		   const uint32_t *blocks, uint32_t count, uint32_t flags)
{
	int r;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct timespec ts;

		if (flags & KVPOOL_RELEASE_ALL)
			r = kvpool_lease_release_all(lease);
		else
			r = kvpool_lease_release(lease, blocks, count);
		if (r != -EBUSY || p->d->stop)
			break;
		deadline_ts(kvd_now_ns() + 100000000ULL, &ts);
		pthread_cond_timedwait(&p->waiters, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

int kvd_ip_held(struct kvd_pool *p, struct kvpool_lease *lease,
		uint32_t from, uint32_t count, uint32_t *blocks)
{
	uint32_t b, n = 0;

	pthread_mutex_lock(&p->lock);
	for (b = from; b < p->pool->backed && n < count; b++)
		if (p->pool->owner_of[b] == lease->slot + 1)
			blocks[n++] = b;
	pthread_mutex_unlock(&p->lock);
	return (int)n;
}

void kvd_ip_status(struct kvd_pool *p, struct kvpool_lease *lease,
		   struct kvpool_status *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->lock);
	kvpool_status_fill(p->pool, lease, st);
	pthread_mutex_unlock(&p->lock);
}

/* ---- admin (in-process ledger) -------------------------------------------- */

int kvd_ip_tenant_op(struct kvd *d, int op, const struct kvp_tenant *t)
{
	char name[KVPOOL_NAME_LEN], pname[KVPOOL_NAME_LEN];
	struct kvpool_tenant *tn;
	struct kvd_pool *p;
	int r = 0;

	if (d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;	/* use generic netlink */
	if (!memchr(t->pool, '\0', KVP_NAME_LEN) ||
	    !memchr(t->name, '\0', KVP_NAME_LEN))
		return -EINVAL;		/* a name is never cut */
	memcpy(pname, t->pool, sizeof(pname));
	p = kvd_pool_by_name(d, pname);
	if (!p)
		return -ENOENT;
	memcpy(name, t->name, sizeof(name));
	pthread_mutex_lock(&p->lock);
	switch (op) {
	case KVP_OP_TENANT_ADD:
		r = kvpool_tenant_create(p->pool, name, t->max, t->min, t->uid,
					 t->gid, NULL);
		break;
	case KVP_OP_TENANT_DEL:
		r = kvpool_tenant_delete(p->pool, name);
		break;
	case KVP_OP_TENANT_SET:
		tn = kvpool_tenant_find(p->pool, name);
		if (!tn) {
			r = -ENOENT;
			break;
		}
		/* Both limits are checked before either is applied. */
		if (t->max != KVP_KEEP)
			r = kvpool_tenant_set_limits(tn, t->max,
					t->min != KVP_KEEP ? t->min : tn->min);
		else if (t->min != KVP_KEEP)
			r = kvpool_tenant_set_min(tn, t->min);
		if (!r && t->uid != KVP_KEEP)
			tn->allow_uid = t->uid;
		if (!r && t->gid != KVP_KEEP)
			tn->allow_gid = t->gid;
		break;
	default:
		r = -EOPNOTSUPP;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

int kvd_ip_tenant_list(struct kvd_pool *p, struct kvp_tenant_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total)
{
	struct kvpool_tenant *t;
	uint32_t i = 0, n = 0;

	if (p->d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&p->lock);
	list_for_each_entry(t, &p->pool->tenants, node) {
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
	pthread_mutex_unlock(&p->lock);
	*total = i;
	return (int)n;
}

int kvd_ip_lease_list(struct kvd_pool *p, struct kvp_client_rec *out,
		      uint32_t start, uint32_t cap, uint32_t *total, uid_t uid)
{
	struct kvpool_lease *l;
	uint32_t i = 0, n = 0;

	pthread_mutex_lock(&p->lock);
	list_for_each_entry(l, &p->pool->leases, pool_node) {
		if (uid != (uid_t)-1 && l->uid != uid)
			continue;
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
	pthread_mutex_unlock(&p->lock);
	*total = i;
	return (int)n;
}

int kvd_mod_lease_list(struct kvd_pool *p, struct kvp_client_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total, uid_t uid)
{
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	uint32_t i, j, k = 0, n = 0;
	int r = snapshot(p, &s, &li, &bo);

	if (r) {
		free(li);
		free(bo);
		return r;
	}
	/* Keep the leases the caller may see, in order. */
	for (j = 0; j < s.leases; j++)
		if (uid == (uid_t)-1 || li[j].uid == uid)
			li[k++] = li[j];
	s.leases = k;
	for (i = start; i < s.leases && n < cap; i++) {
		struct kvp_client_rec *o = &out[n++];

		memset(o, 0, sizeof(*o));
		o->lease_id = li[i].lease_id;
		o->pid = li[i].pid;
		o->uid = li[i].uid;
		memcpy(o->tenant, li[i].tenant, sizeof(o->tenant));
		o->blocks = li[i].blocks;
		o->connected = p->d->hooks.client_connected ?
			       p->d->hooks.client_connected(p, li[i].lease_id) :
			       0;
	}
	*total = s.leases;
	free(li);
	free(bo);
	return (int)n;
}

/* Blocks held by lease_id in pool p (0 if none or unknown). */
uint32_t kvd_lease_blocks(struct kvd_pool *p, uint64_t lease_id)
{
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	struct kvpool_lease *l;
	uint32_t n = 0, i;

	if (!lease_id)
		return 0;
	if (p->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		list_for_each_entry(l, &p->pool->leases, pool_node)
			if (l->id == lease_id)
				n = l->held;
		pthread_mutex_unlock(&p->lock);
		return n;
	}
	if (snapshot(p, &s, &li, &bo) == 0)
		for (i = 0; i < s.leases; i++)
			if (li[i].lease_id == lease_id)
				n = li[i].blocks;
	free(li);
	free(bo);
	return n;
}
