// SPDX-License-Identifier: MIT
/*
 * prefix.c - kvpoold's prefix cache: full blocks of KV shared by every
 * process of a tenant (and, opt-in, by the tenants of a named namespace).
 *
 * What lives here (mechanism; when to match or publish is the library's):
 *  - the index (prefix_index.c): blocks by hash-chain key, verified token
 *    ids, LRU lists;
 *  - per tenant, two leases held by the daemon and charged to the tenant,
 *    so that cached blocks count in its current and outlive the process
 *    that computed them: "hot" (referenced by at least one connection,
 *    attached with KVPOOL_ATTACH_RECLAIM_NEVER: the ledger never asks it)
 *    and "cold" (unreferenced, attached with KVPOOL_ATTACH_RECLAIM_FIRST:
 *    the ledger asks it before any other lease of the tenant).  Blocks
 *    enter the cache by LEASE_MOVE from the publisher's lease (the ledger
 *    primitive; kvpool_lease_move in-process) and move between hot and
 *    cold as references come and go, so the cold lease's held count is
 *    exactly what can be given back and it can always meet its target;
 *  - per connection, the set of cached blocks it references: the data
 *    plane lets it read those (conn.c), never write them;
 *  - eviction, least recently used first: on a reclaim target posted to a
 *    cold lease (the prefix thread), on the ledger's SHORT event and when a
 *    grow fails (pool-wide, never below another tenant's min), and on a
 *    client's EVICT (its own tenant: room under its max).
 * Where lower tiers exist, eviction is the place to demote instead of
 * drop (evict_blocks()).  With a cluster tier (cluster.c), a tenant that
 * has a cluster namespace key publishes to it, evicts to it and, on a
 * local miss, fetches from it (the end of this file).
 *
 * Locking: p->lock around everything here, taken before d->top->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "ledger.h"
#include "tenants.h"
#include "conn.h"
#include "prefix.h"
#include "prefix_index.h"
#include "scrub.h"
#include "cluster.h"
#include "inproc.h"
#include "prefix_tier.h"
#include "prefix_keep.h"
#include "restart.h"

#define SET_EMPTY	UINT32_MAX

struct pfx_ns {
	char name[KVPOOL_NAME_LEN];	/* "" for a tenant's own */
	uint8_t salt[PFX_SALT_BYTES];
	int pk_ix;			/* its kept record, or -1 */
	struct pfx_ns *next;		/* shared namespaces */
};

/* A lease the daemon holds for a tenant's cache. */
struct pfx_lease {
	uint64_t id;			/* 0: not open */
	int fd;				/* module: the daemon's file */
	struct kvpool_lease *lease;	/* in-process ledger */
	bool kept;			/* module: parks when the file closes */
};

struct pfx_tenant {
	char name[KVPOOL_NAME_LEN];
	struct pfx_ns own;
	struct pfx_ns *ns;		/* &own or a shared namespace */
	struct pfx_lease hot, cold;
	struct pfx_lru lru;		/* the cold lease's entries */
	uint32_t nhot;			/* the hot lease's entries */
	uint64_t hits, misses, hit_tokens, evictions, published;
	uint64_t quiet_until;		/* module: a target it cannot meet */
	/* Its entries that other tenants (of its shared namespace)
	 * reference, and those one MATCH or PUBLISH is about to add. */
	uint32_t nlent, lend_new;
	bool cluster;			/* own.salt is its cluster key */
	uint32_t fetching;		/* fetches granting into its hot lease */
	bool flushing;
	int pk_ix;			/* its kept record, or -1 */
	struct pfx_tenant *next;
};

struct kvd_prefix {
	struct kvd *d;
	pthread_mutex_t lock;
	struct pfx_index ix;
	struct pfx_tenant *tenants;
	struct pfx_ns *shared;
	int usable;			/* 0 or why not (-EOPNOTSUPP) */
	int wake_fd;			/* eventfd for the prefix thread */
	pthread_t th;
	bool th_started;
	volatile int stop;
	pthread_cond_t polled;		/* the thread's poll returned */
	uint64_t npolls;		/* how many times (p->lock) */
	struct pollfd *pf;		/* the thread's poll set */
	size_t pf_cap;
	uint8_t *scratch;		/* key input, 48 + 4 * tokens */
	size_t scratch_cap;
	struct pk_region *pk;		/* the index kept across a restart */
};

struct kvd_prefix_conn {
	struct pfx_key model[KVP_MAX_LAYOUTS];
	uint32_t has_model;		/* bit per layout id */
	uint32_t *set;			/* referenced blocks, open addressing */
	uint32_t cap, n;		/* cap: power of two or 0 */
	char tenant[KVPOOL_NAME_LEN];	/* whose references they are */
};

/* A NUL-padded name field from a string. */
static void name_copy(char dst[KVPOOL_NAME_LEN], const char *src)
{
	memset(dst, 0, KVPOOL_NAME_LEN);
	memcpy(dst, src, strnlen(src, KVPOOL_NAME_LEN - 1));
}

/* ---- the index, kept across a restart (prefix_keep.h) -------------------- */

static void pk_note_tenant(struct kvd_prefix *p, struct pfx_tenant *t);
static void pk_start(struct kvd_prefix *p);

/* What @e's slot says of it (p->lock held). */
static void pk_note_entry(struct kvd_prefix *p, const struct pfx_entry *e)
{
	const struct pfx_tenant *t = e->owner;
	const struct pfx_ns *ns = e->ns;
	struct pk_slot *sl;

	if (!p->pk || !(sl = pk_slot_at(p->pk, e->block)))
		return;
	sl->sum = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/* what lookups cannot find is given back at a restart */
	if (t->pk_ix < 0 || e->ntok > PK_TOKENS || !e->indexed) {
		sl->state = PK_SLOT_FREE;
		return;
	}
	sl->state = PK_SLOT_INDEXED;
	sl->tix = (uint32_t)t->pk_ix;
	sl->id = e->id;
	sl->parent_id = e->parent_id;
	sl->key = e->key;
	sl->pkey = e->pkey;
	sl->model = e->model;
	sl->depth = e->depth;
	sl->ntok = e->ntok;
	memcpy(sl->ns, ns->name, sizeof(sl->ns));
	memcpy(sl->tokens, e->tokens, (size_t)e->ntok * sizeof(uint32_t));
	pk_slot_sum(sl);
}

static void ix_insert(struct kvd_prefix *p, struct pfx_entry *e)
{
	pfx_insert(&p->ix, e);
	pk_note_entry(p, e);
}

/* @e's slot, if it is @e's, says nothing any more. */
static void pk_forget_entry(struct kvd_prefix *p, const struct pfx_entry *e)
{
	struct pk_slot *sl = p->pk ? pk_slot_at(p->pk, e->block) : NULL;

	if (sl && sl->id == e->id) {
		sl->sum = 0;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		sl->state = PK_SLOT_FREE;
	}
}

/* Not found by lookups any more: not restored at a restart either. */
static void ix_unindex(struct kvd_prefix *p, struct pfx_entry *e)
{
	pfx_unindex(&p->ix, e);
	pk_forget_entry(p, e);
}

static void ix_remove(struct kvd_prefix *p, struct pfx_entry *e)
{
	pk_forget_entry(p, e);
	pfx_remove(&p->ix, e);
}

/* ---- a connection's references ------------------------------------------ */

static uint32_t set_home(uint32_t b, uint32_t mask)
{
	return (b * 0x9e3779b1U) & mask;
}

bool kvd_prefix_referenced(const struct kvd_prefix_conn *pc, uint32_t b)
{
	uint32_t i, mask;

	if (!pc || !pc->n)
		return false;
	mask = pc->cap - 1;
	for (i = set_home(b, mask); pc->set[i] != SET_EMPTY; i = (i + 1) & mask)
		if (pc->set[i] == b)
			return true;
	return false;
}

/* Room for @more additions (load at most one half). */
static int set_reserve(struct kvd_prefix_conn *pc, uint32_t more)
{
	uint64_t want = ((uint64_t)pc->n + more) * 2;
	uint32_t cap = pc->cap ? pc->cap : 64, i, *ns, *old = pc->set;
	uint32_t oldcap = pc->cap;

	if (want <= pc->cap)
		return 0;
	while (cap < want) {
		if (cap >= (1U << 30))
			return -ENOMEM;
		cap *= 2;
	}
	ns = malloc((size_t)cap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	memset(ns, 0xff, (size_t)cap * sizeof(*ns));
	pc->set = ns;
	pc->cap = cap;
	for (i = 0; i < oldcap; i++) {
		uint32_t j;

		if (old[i] == SET_EMPTY)
			continue;
		for (j = set_home(old[i], cap - 1); ns[j] != SET_EMPTY;
		     j = (j + 1) & (cap - 1))
			;
		ns[j] = old[i];
	}
	free(old);
	return 0;
}

static void set_add(struct kvd_prefix_conn *pc, uint32_t b)
{
	uint32_t mask = pc->cap - 1, i;

	for (i = set_home(b, mask); pc->set[i] != SET_EMPTY; i = (i + 1) & mask)
		;
	pc->set[i] = b;
	pc->n++;
}

/* Remove @b (present), shifting the probe chain back. */
static void set_del(struct kvd_prefix_conn *pc, uint32_t b)
{
	uint32_t mask = pc->cap - 1, i, j;

	for (i = set_home(b, mask); pc->set[i] != b; i = (i + 1) & mask)
		;
	pc->set[i] = SET_EMPTY;
	pc->n--;
	for (j = (i + 1) & mask; pc->set[j] != SET_EMPTY; j = (j + 1) & mask) {
		uint32_t h = set_home(pc->set[j], mask);

		/* Move it back if its home is not in (i, j]. */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			pc->set[i] = pc->set[j];
			pc->set[j] = SET_EMPTY;
			i = j;
		}
	}
}

/* ---- references across tenants (shared namespaces) ----------------------- */

/*
 * A connection may reference the blocks of other tenants of its shared
 * namespace.  They stay charged to their owner, who cannot give them back
 * while they are referenced: so a tenant lends at most
 * --prefix-lend-percent of its max (of the pool's capacity when it has
 * none) to other tenants at once.  Beyond that, MATCH stops (the caller
 * computes the rest itself) and PUBLISH caches the caller's own copy,
 * found by no lookup and charged to the caller.
 */
static bool foreign(const struct kvd_prefix_conn *pc, const struct pfx_entry *e)
{
	const struct pfx_tenant *o = e->owner;

	return strncmp(o->name, pc->tenant, KVPOOL_NAME_LEN) != 0;
}

/* pc references @e (it did not before). */
static void ref_add(struct kvd_prefix_conn *pc, struct pfx_entry *e)
{
	struct pfx_tenant *o = e->owner;

	set_add(pc, e->block);
	if (foreign(pc, e) && !e->xrefs++)
		o->nlent++;
	if (!e->refs++) {
		pfx_lru_del(e);
		o->nhot++;
	}
}

/* pc no longer references @e (e->refs is the caller's). */
static void ref_del_foreign(struct kvd_prefix_conn *pc, struct pfx_entry *e)
{
	struct pfx_tenant *o = e->owner;

	if (foreign(pc, e) && !--e->xrefs)
		o->nlent--;
}

static uint32_t owner_max(struct kvd *d, struct pfx_tenant *o);

/*
 * May @pc (of tenant @t) reference @e?  Its own tenant's blocks always;
 * another tenant's while that one lends less than its share (counting
 * what this op already took, o->lend_new; lend_reset() clears it).
 */
static bool lend_ok(struct kvd_prefix *p, struct kvd_prefix_conn *pc,
		    struct pfx_tenant *t, struct pfx_entry *e)
{
	struct pfx_tenant *o = e->owner;
	uint64_t cap;

	if (o == t || e->xrefs || kvd_prefix_referenced(pc, e->block))
		return true;
	cap = (uint64_t)owner_max(p->d, o) * p->d->o.prefix_lend_percent / 100;
	if ((uint64_t)o->nlent + o->lend_new >= cap)
		return false;
	o->lend_new++;
	return true;
}

static void lend_reset(struct pfx_entry **es, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (es[i])
			((struct pfx_tenant *)es[i]->owner)->lend_new = 0;
}

/* ---- the cache leases (in-process core or /dev/kvpool) ------------------- */

static int lease_open(struct kvd *d, struct pfx_lease *pl, const char *tenant,
		      uint32_t order)
{
	if (pl->id)
		return 0;
	if (d->mode == KVP_MODE_INPROC) {
		struct kvpool_cred cred = {
			.uid = (u32)geteuid(), .gid = (u32)getegid(),
			.pid = (u32)getpid(), .admin = true,
		};
		struct kvpool_lease *l;
		int r;

		pthread_mutex_lock(&d->top->lock);
		r = kvpool_lease_open(d->top->pool, &cred, &l);
		if (!r) {
			r = kvpool_lease_attach(l, tenant, &cred);
			if (!r)
				r = kvpool_lease_set_reclaim_order(l, order,
								   &cred);
			if (r) {
				kvpool_lease_close(l);
			} else {
				pl->lease = l;
				pl->id = l->id;
			}
		}
		pthread_mutex_unlock(&d->top->lock);
		return r;
	} else {
		struct kvpool_tenant_attach ta;
		int fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		memset(&ta, 0, sizeof(ta));
		memcpy(ta.pool, d->top->name, KVPOOL_NAME_LEN);
		name_copy(ta.tenant, tenant);
		ta.flags = order == KVPOOL_RECLAIM_FIRST ?
			   KVPOOL_ATTACH_RECLAIM_FIRST :
			   KVPOOL_ATTACH_RECLAIM_NEVER;
		if (ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &ta)) {
			int e = -errno;

			close(fd);
			return e;
		}
		pl->fd = fd;
		pl->id = ta.lease_id;
		return 0;
	}
}

static void lease_close(struct kvd *d, struct pfx_lease *pl)
{
	if (!pl->id)
		return;
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->top->lock);
		kvpool_lease_close(pl->lease);
		pthread_mutex_unlock(&d->top->lock);
	} else {
		close(pl->fd);
	}
	memset(pl, 0, sizeof(*pl));
	pl->fd = -1;
}

/* Module: mark the lease kept (parked, not closed, when the daemon goes)
 * or not. */
static int lease_keep(struct kvd *d, struct pfx_lease *pl, bool on)
{
	struct kvpool_lease_keep k;

	if (d->mode != KVP_MODE_MODULE || !pl->id || pl->kept == on)
		return 0;
	memset(&k, 0, sizeof(k));
	k.owner_fd = d->top->owner_fd;
	k.flags = on ? KVPOOL_KEEP_ON : 0;
	if (ioctl(pl->fd, KVPOOL_IOC_LEASE_KEEP, &k))
		return -errno;
	pl->kept = on;
	return 0;
}

/* Close a lease for good: a kept one is unmarked first, so that its
 * blocks go back instead of parking. */
static void lease_drop(struct kvd *d, struct pfx_lease *pl)
{
	int r = lease_keep(d, pl, false);

	if (r)
		kvd_log(KVD_WARN, "prefix cache: lease %llu stays kept: %s",
			(unsigned long long)pl->id, strerror(-r));
	lease_close(d, pl);
}

static int lease_move(struct kvd *d, uint64_t from, uint64_t to,
		      const uint32_t *blocks, uint32_t n)
{
	struct kvpool_lease_move m;
	uint32_t bad;
	int r;

	if (!n)
		return 0;
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->top->lock);
		r = kvpool_lease_move(d->top->pool, from, to, blocks, n, &bad);
		pthread_mutex_unlock(&d->top->lock);
		return r < 0 ? r : 0;
	}
	memset(&m, 0, sizeof(m));
	m.blocks_ptr = (uintptr_t)blocks;
	m.from_lease = from;
	m.to_lease = to;
	m.count = n;
	return ioctl(d->top->owner_fd, KVPOOL_IOC_LEASE_MOVE, &m) ? -errno : 0;
}

static int lease_release(struct kvd *d, struct pfx_lease *pl,
			 const uint32_t *blocks, uint32_t n)
{
	struct kvpool_release rl;
	int r;

	if (!n)
		return 0;
	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->top->lock);
		r = kvpool_lease_release(pl->lease, blocks, n);
		pthread_mutex_unlock(&d->top->lock);
		return r < 0 ? r : 0;
	}
	memset(&rl, 0, sizeof(rl));
	rl.blocks_ptr = (uintptr_t)blocks;
	rl.count = n;
	return ioctl(pl->fd, KVPOOL_IOC_RELEASE, &rl) ? -errno : 0;
}

/* The lease's reclaim target and its tenant's current and min. */
static int lease_status(struct kvd *d, struct pfx_lease *pl, uint32_t *target,
			uint32_t *cur, uint32_t *min)
{
	struct kvpool_status st;

	if (d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&d->top->lock);
		*target = pl->lease->reclaim_target;
		*cur = pl->lease->tenant->cur;
		*min = pl->lease->tenant->min;
		pthread_mutex_unlock(&d->top->lock);
		return 0;
	}
	memset(&st, 0, sizeof(st));
	if (ioctl(pl->fd, KVPOOL_IOC_STATUS, &st))
		return -errno;
	*target = st.reclaim_target;
	*cur = st.tenant_current;
	*min = st.tenant_min;
	return 0;
}

/* The max of the tenant whose cache @o is (the pool's capacity when it has
 * none or cannot be asked). */
static uint32_t owner_max(struct kvd *d, struct pfx_tenant *o)
{
	struct kvpool_status st;
	uint32_t max = KVPOOL_UNLIMITED;

	if (d->mode == KVP_MODE_INPROC && o->hot.lease) {
		pthread_mutex_lock(&d->top->lock);
		max = o->hot.lease->tenant->max;
		pthread_mutex_unlock(&d->top->lock);
	} else if (d->mode != KVP_MODE_INPROC && o->hot.id) {
		memset(&st, 0, sizeof(st));
		if (!ioctl(o->hot.fd, KVPOOL_IOC_STATUS, &st))
			max = st.tenant_max;
	}
	return max < d->top->capacity ? max : d->top->capacity;
}

/* ---- tenants and namespaces ---------------------------------------------- */

static void wake_thread(struct kvd_prefix *p)
{
	uint64_t one = 1;

	if (p->wake_fd >= 0 && write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* saturated: a wake is pending */
	}
}

static struct pfx_tenant *tenant_get(struct kvd_prefix *p, const char *name)
{
	struct pfx_tenant *t;

	for (t = p->tenants; t; t = t->next)
		if (!strncmp(t->name, name, KVPOOL_NAME_LEN))
			return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	name_copy(t->name, name);
	if (getrandom(t->own.salt, sizeof(t->own.salt), 0) !=
	    (ssize_t)sizeof(t->own.salt)) {
		free(t);
		return NULL;
	}
	t->cluster = kvd_cluster_tenant_key(p->d, name, t->own.salt);
	t->ns = &t->own;
	t->own.pk_ix = -1;
	t->pk_ix = -1;
	t->hot.fd = t->cold.fd = -1;
	t->next = p->tenants;
	p->tenants = t;
	return t;
}

static struct pfx_ns *shared_ns_get(struct kvd_prefix *p, const char *name)
{
	struct pfx_ns *ns;

	for (ns = p->shared; ns; ns = ns->next)
		if (!strncmp(ns->name, name, KVPOOL_NAME_LEN))
			return ns;
	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return NULL;
	name_copy(ns->name, name);
	if (getrandom(ns->salt, sizeof(ns->salt), 0) !=
	    (ssize_t)sizeof(ns->salt)) {
		free(ns);
		return NULL;
	}
	ns->pk_ix = -1;
	ns->next = p->shared;
	p->shared = ns;
	return ns;
}

static int tenant_leases_open(struct kvd_prefix *p, struct pfx_tenant *t)
{
	bool was = t->cold.id;
	int r = lease_open(p->d, &t->hot, t->name, KVPOOL_RECLAIM_NEVER);

	if (!r)
		r = lease_open(p->d, &t->cold, t->name, KVPOOL_RECLAIM_FIRST);
	if (r) {
		if (!t->nhot)
			lease_drop(p->d, &t->hot);
		kvd_log(KVD_WARN, "prefix cache of %s: cannot open its leases: %s",
			t->name, strerror(-r));
		return r;
	}
	if (p->pk && !was) {
		/* kept or not at all: a cache whose leases cannot both be
		 * kept starts empty after a restart */
		r = lease_keep(p->d, &t->hot, true);
		if (!r)
			r = lease_keep(p->d, &t->cold, true);
		if (r)
			kvd_log(KVD_WARN, "prefix cache of %s: not kept across "
				"a restart: %s", t->name, strerror(-r));
		pk_note_tenant(p, t);
	}
	if (!was)
		wake_thread(p);		/* a new cold lease to watch */
	return 0;
}

/* An empty cache holds no lease: the tenant may then be deleted. */
static void tenant_maybe_close(struct kvd_prefix *p, struct pfx_tenant *t)
{
	if (t->nhot || t->lru.n || t->fetching || !t->hot.id)
		return;
	lease_drop(p->d, &t->hot);
	lease_drop(p->d, &t->cold);
	pk_note_tenant(p, t);
	wake_thread(p);
}

/*
 * Module: a closed cold lease lives on while the prefix thread's poll()
 * holds its file.  Wake the thread and wait (p->lock held) until its poll
 * has returned, so that the ledger has let the lease go (and a tenant
 * delete is not refused for it).  Never called by the thread itself.
 */
static void poll_sync(struct kvd_prefix *p)
{
	uint64_t n = p->npolls;
	struct timespec until;

	if (p->d->mode == KVP_MODE_INPROC || !p->th_started || p->stop)
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	wake_thread(p);
	while (p->npolls == n && !p->stop)
		if (pthread_cond_timedwait(&p->polled, &p->lock, &until))
			break;
}

/* ---- moving entries between hot and cold ---------------------------------- */

/*
 * Move the blocks of @es (each group of one owner in one call) from cold
 * to hot (@to_hot) or back.  All or nothing: on an error the groups
 * already moved go back.
 */
static int transit(struct kvd_prefix *p, struct pfx_entry **es, uint32_t n,
		   bool to_hot)
{
	uint32_t *blocks, *done_at, ngroups = 0, i, j, k;
	struct pfx_tenant **owners;
	int r = 0;

	if (!n)
		return 0;
	blocks = malloc(n * sizeof(*blocks));
	done_at = malloc(n * sizeof(*done_at));
	owners = malloc(n * sizeof(*owners));
	if (!blocks || !done_at || !owners) {
		r = -ENOMEM;
		goto out;
	}
	/* Group by owner: blocks[] in owner order. */
	k = 0;
	for (i = 0; i < n; i++) {
		struct pfx_tenant *t = es[i]->owner;

		for (j = 0; j < ngroups && owners[j] != t; j++)
			;
		if (j < ngroups)
			continue;
		owners[ngroups] = t;
		done_at[ngroups] = k;
		for (j = i; j < n; j++)
			if (es[j]->owner == t)
				blocks[k++] = es[j]->block;
		ngroups++;
	}
	for (i = 0; i < ngroups; i++) {
		struct pfx_tenant *t = owners[i];
		uint32_t from = done_at[i];
		uint32_t cnt = (i + 1 < ngroups ? done_at[i + 1] : n) - from;

		r = lease_move(p->d, to_hot ? t->cold.id : t->hot.id,
			       to_hot ? t->hot.id : t->cold.id, blocks + from,
			       cnt);
		if (r)
			break;
	}
	if (r) {
		kvd_log(KVD_WARN, "prefix cache: move %s: %s",
			to_hot ? "cold -> hot" : "hot -> cold", strerror(-r));
		while (i-- > 0) {
			struct pfx_tenant *t = owners[i];
			uint32_t from = done_at[i];
			uint32_t cnt = (i + 1 < ngroups ? done_at[i + 1] : n) -
				       from;

			lease_move(p->d, to_hot ? t->hot.id : t->cold.id,
				   to_hot ? t->cold.id : t->hot.id,
				   blocks + from, cnt);
		}
	}
out:
	free(blocks);
	free(done_at);
	free(owners);
	return r;
}

static void cluster_leaving(struct kvd_prefix *p, struct pfx_tenant *t,
			    struct pfx_entry *e, bool demote);

/*
 * Give back blocks of the cold lease of @t (entries already removed).
 * The one place where cached blocks leave: a lower tier would take them
 * here instead.
 */
static void evict_blocks(struct kvd_prefix *p, struct pfx_tenant *t,
			 const uint32_t *blocks, uint32_t n)
{
	int r = lease_release(p->d, &t->cold, blocks, n);

	if (r)
		kvd_log(KVD_ERR, "prefix cache of %s: release of %u blocks: %s",
			t->name, n, strerror(-r));
	t->evictions += n;
}

/* Evict up to @n of @t's cold entries, least recently used first. */
static uint32_t evict_lru(struct kvd_prefix *p, struct pfx_tenant *t,
			  uint32_t n)
{
	uint32_t *blocks, k = 0;
	struct pfx_entry *e;

	if (n > t->lru.n)
		n = t->lru.n;
	if (!n)
		return 0;
	blocks = malloc(n * sizeof(*blocks));
	if (!blocks)
		return 0;
	while (k < n && (e = pfx_lru_oldest(&t->lru))) {
		cluster_leaving(p, t, e, true);
		blocks[k++] = e->block;
		ix_remove(p, e);
	}
	evict_blocks(p, t, blocks, k);
	free(blocks);
	tenant_maybe_close(p, t);
	return k;
}

static int by_depth_desc(const void *a, const void *b)
{
	const struct pfx_entry *x = *(struct pfx_entry *const *)a;
	const struct pfx_entry *y = *(struct pfx_entry *const *)b;

	return x->depth < y->depth ? 1 : x->depth > y->depth ? -1 : 0;
}

/*
 * Drop @pc's references to @blocks (each referenced, no repeats).  An
 * entry left without reference goes to its owner's cold lease and LRU
 * (deeper blocks first, so that a sequence's first blocks are evicted
 * last), or, if flushed meanwhile, leaves the cache.
 */
static void drop_refs(struct kvd_prefix *p, struct kvd_prefix_conn *pc,
		      const uint32_t *blocks, uint32_t n)
{
	struct pfx_entry **cold = malloc((n ? n : 1) * sizeof(*cold));
	uint32_t ncold = 0, i;

	for (i = 0; i < n; i++) {
		struct pfx_entry *e = pfx_by_block(&p->ix, blocks[i]);

		set_del(pc, blocks[i]);
		if (e)
			ref_del_foreign(pc, e);
		if (!e || --e->refs)
			continue;
		if (e->indexed && cold) {
			cold[ncold++] = e;
		} else {
			struct pfx_tenant *t = e->owner;
			uint32_t b = e->block;

			ix_remove(p, e);
			t->nhot--;
			t->evictions++;		/* flushed while in use */
			if (lease_release(p->d, &t->hot, &b, 1))
				kvd_log(KVD_ERR, "prefix cache of %s: release",
					t->name);
			tenant_maybe_close(p, t);
		}
	}
	if (ncold && transit(p, cold, ncold, false)) {
		/* Cannot keep them: give them back from the hot lease. */
		for (i = 0; i < ncold; i++) {
			struct pfx_tenant *t = cold[i]->owner;
			uint32_t b = cold[i]->block;

			cluster_leaving(p, t, cold[i], false);
			ix_remove(p, cold[i]);
			t->nhot--;
			lease_release(p->d, &t->hot, &b, 1);
			t->evictions++;
			tenant_maybe_close(p, t);
		}
		ncold = 0;
	}
	qsort(cold, ncold, sizeof(*cold), by_depth_desc);
	for (i = 0; i < ncold; i++) {
		struct pfx_tenant *t = cold[i]->owner;

		t->nhot--;
		pfx_lru_push(&p->ix, &t->lru, cold[i]);
	}
	free(cold);
}

/* ---- ops --------------------------------------------------------------------- */

static uint8_t *scratch_for(struct kvd_prefix *p, uint32_t tpb)
{
	size_t need = 48 + (size_t)tpb * sizeof(uint32_t);

	if (need > p->scratch_cap) {
		uint8_t *s = realloc(p->scratch, need);

		if (!s)
			return NULL;
		p->scratch = s;
		p->scratch_cap = need;
	}
	return p->scratch;
}

static struct kvd_prefix_conn *conn_get(struct kvd_client *c)
{
	struct kvd_prefix_conn **pp = kvd_client_prefix(c);

	if (!*pp)
		*pp = calloc(1, sizeof(**pp));
	return *pp;
}

static int op_layout_model(struct kvd_client *c,
			   const struct kvp_layout_model *q,
			   struct kvp_layout_reply *rep)
{
	struct kvd_prefix_conn *pc;
	const struct kvk_layout *l;
	int r;

	if (q->reserved[0] || q->reserved[1] || !q->model[0] ||
	    !memchr(q->model, 0, sizeof(q->model)))
		return -EINVAL;
	pc = conn_get(c);
	if (!pc)
		return -ENOMEM;
	r = kvd_client_layout_add(c, &q->layout, rep);
	if (r)
		return r;
	l = kvd_client_layout(c, rep->layout_id);
	pfx_model_identity(&pc->model[rep->layout_id], q->model, l->layers,
			   l->kv_heads, l->head_dim, l->dtype,
			   q->layout.rope_base, l->tokens_per_block,
			   l->block_bytes);
	pc->has_model |= 1U << rep->layout_id;
	if (kvd_cluster_on(kvd_client_daemon(c))) {
		char tname[KVPOOL_NAME_LEN];

		kvd_client_tenant(c, tname);
		kvd_cluster_model(kvd_client_daemon(c), tname,
				  &pc->model[rep->layout_id], q->model, l);
	}
	return 0;
}

/*
 * The tenant the connection's references are taken for: @tname, the
 * tenant of its lease now.  While it holds references taken for another
 * tenant (its lease was attached elsewhere since), -EXDEV: it drops them
 * first (UNREF with KVP_PREFIX_UNREF_ALL).
 */
static int conn_tenant(struct kvd_prefix_conn *pc, const char *tname)
{
	if (pc->n)
		return strncmp(pc->tenant, tname, KVPOOL_NAME_LEN) ? -EXDEV : 0;
	name_copy(pc->tenant, tname);
	return 0;
}

/* The layout and model of a request: 0, -EINVAL, -ENOKEY. */
static int req_layout(struct kvd_client *c, uint32_t id,
		      const struct kvk_layout **l, struct kvd_prefix_conn **pc)
{
	*l = kvd_client_layout(c, id);
	if (!*l)
		return -EINVAL;
	*pc = *kvd_client_prefix(c);
	if (!*pc || !((*pc)->has_model & (1U << id)))
		return -ENOKEY;
	return 0;
}

static bool clustered(const struct pfx_tenant *t);
static uint32_t cluster_match(struct kvd_prefix *p, struct kvd_client *c,
			      const char *tname, struct kvd_prefix_conn *pc,
			      const struct pfx_key *model, const uint8_t *salt,
			      uint32_t tpb, const uint32_t *tokens, uint32_t m,
			      uint32_t nb, const struct pfx_key *parent,
			      const struct pfx_entry *pe, uint32_t *out,
			      bool cl);
static void cluster_published(struct kvd_prefix *p, const uint8_t *salt,
			      struct pfx_entry **added, uint32_t n);

static int op_match(struct kvd_prefix *p, struct kvd_client *c,
		    const struct kvp_prefix_match *q,
		    struct kvp_prefix_match_reply *rep)
{
	uint64_t t0 = kvd_now_ns();
	const struct kvk_layout *l;
	struct kvd_prefix_conn *pc;
	struct pfx_entry **es = NULL, **warm = NULL;
	struct pfx_key key = { 0, 0 }, parent = { 0, 0 };
	char tname[KVPOOL_NAME_LEN];
	uint32_t *tokens = NULL, *out, nb, m, nwarm = 0, i, tpb;
	struct pfx_tenant *t;
	uint64_t parent_id = 0;
	uint8_t *scratch, salt[PFX_SALT_BYTES];
	bool remote = false, cl = false;
	int r;

	if (q->flags || q->reserved[0] || q->reserved[1])
		return -EINVAL;
	r = req_layout(c, q->layout_id, &l, &pc);
	if (r)
		return r;
	if (q->ntok > KVP_PREFIX_MAX_TOKENS)
		return -EINVAL;
	tpb = l->tokens_per_block;
	nb = q->ntok / tpb;
	if (nb > q->max_blocks)
		nb = q->max_blocks;
	r = kvd_client_region_u32(c, q->off_tokens, (uint64_t)nb * tpb,
				  &tokens);
	if (!r)
		r = kvd_client_region_ptr(c, q->off_blocks, nb, sizeof(uint32_t),
					  (void **)&out);
	if (r)
		goto out_free;
	es = malloc((nb ? nb : 1) * sizeof(*es));
	warm = malloc((nb ? nb : 1) * sizeof(*warm));
	if (!es || !warm) {
		r = -ENOMEM;
		goto out_free;
	}
	/* The tenant the lease is charged to now, not at HELLO. */
	r = kvd_client_tenant_id(c, NULL, tname);
	if (!r)
		r = conn_tenant(pc, tname);
	if (r)
		goto out_free;

	pthread_mutex_lock(&p->lock);
	t = tenant_get(p, tname);
	scratch = scratch_for(p, tpb);
	m = 0;
	if (!t || !scratch) {
		r = -ENOMEM;
		goto out_unlock;
	}
	for (m = 0; m < nb; m++) {
		struct pfx_entry *e;

		pfx_key_compute(&p->ix, &key, t->ns->salt, &parent,
				&pc->model[q->layout_id], tokens + m * tpb, tpb,
				scratch);
		e = pfx_lookup(&p->ix, &key, t->ns, &pc->model[q->layout_id],
			       parent_id, tokens + m * tpb, tpb);
		if (!e || !lend_ok(p, pc, t, e))
			break;
		es[m] = e;
		if (!e->refs)
			warm[nwarm++] = e;
		parent = key;
		parent_id = e->id;
	}
	r = set_reserve(pc, m);
	if (!r)
		r = transit(p, warm, nwarm, true);
	if (r)
		goto out_unlock;
	for (i = 0; i < m; i++)
		if (!kvd_prefix_referenced(pc, es[i]->block))
			ref_add(pc, es[i]);
	for (i = 0; i < m; i++)
		out[i] = es[i]->block;
	t->hits += m;
	t->misses += nb - m;
	t->hit_tokens += (uint64_t)m * tpb;
	r = (int)m;
	rep->blocks = m;
	rep->tokens = m * tpb;
	cl = clustered(t);
	remote = m < nb && (cl || kvd_ptier_on(p->d));
	if (remote)
		memcpy(salt, t->ns->salt, sizeof(salt));
out_unlock:
	lend_reset(es, m);
	pthread_mutex_unlock(&p->lock);
	if (remote) {
		m += cluster_match(p, c, tname, pc, &pc->model[q->layout_id],
				   salt, tpb, tokens, m, nb, &parent,
				   m ? es[m - 1] : NULL, out, cl);
		r = (int)m;
		rep->blocks = m;
		rep->tokens = m * tpb;
	}
	if (r >= 0)
		rep->daemon_ns = kvd_now_ns() - t0;
out_free:
	free(tokens);
	free(es);
	free(warm);
	return r;
}

static int op_publish(struct kvd_prefix *p, struct kvd_client *c,
		      const struct kvp_prefix_publish *q,
		      struct kvp_prefix_publish_reply *rep)
{
	struct kvd *d = p->d;
	const struct kvk_layout *l;
	struct kvd_prefix_conn *pc;
	struct pfx_entry **es = NULL, **fresh = NULL, **warm = NULL;
	struct pfx_entry **added = NULL;
	struct pfx_key key = { 0, 0 }, parent = { 0, 0 };
	char tname[KVPOOL_NAME_LEN];
	uint32_t *tokens = NULL, *blocks = NULL, *res, *move = NULL;
	uint32_t *dedup = NULL, nmove = 0, ndedup = 0, nwarm = 0, i, tpb;
	uint32_t n = q->nblocks, nadded = 0;
	struct pfx_tenant *t;
	uint64_t parent_id = 0, lease_id = kvd_client_lease_id(c);
	bool missed = false, remote = false, *own = NULL;
	uint8_t *scratch, salt[PFX_SALT_BYTES];
	int r;

	if (q->flags || q->reserved[0] || q->reserved[1])
		return -EINVAL;
	r = req_layout(c, q->layout_id, &l, &pc);
	if (r)
		return r;
	tpb = l->tokens_per_block;
	if (!n || n > KVP_IO_MAX_BLOCKS || (uint64_t)n * tpb != q->ntok)
		return -EINVAL;		/* every block full, and only those */
	r = kvd_client_region_u32(c, q->off_tokens, q->ntok, &tokens);
	if (!r)
		r = kvd_client_region_u32(c, q->off_blocks, n, &blocks);
	if (!r)
		r = kvd_client_region_ptr(c, q->off_result, n, sizeof(uint32_t),
					  (void **)&res);
	if (r)
		goto out_free;
	es = calloc(n, sizeof(*es));
	fresh = calloc(n, sizeof(*fresh));
	warm = malloc(n * sizeof(*warm));
	move = malloc(n * sizeof(*move));
	dedup = malloc(n * sizeof(*dedup));
	own = calloc(n, sizeof(*own));
	added = malloc(n * sizeof(*added));
	if (!es || !fresh || !warm || !move || !dedup || !own || !added) {
		r = -ENOMEM;
		goto out_free;
	}
	/* a cached block holds its publisher's bytes or zeros */
	r = kvd_client_claim_blocks(c, blocks, n);
	if (r)
		goto out_free;
	/* The tenant the lease is charged to now, not at HELLO. */
	r = kvd_client_tenant_id(c, NULL, tname);
	if (!r)
		r = conn_tenant(pc, tname);
	if (r)
		goto out_free;

	pthread_mutex_lock(&p->lock);
	t = tenant_get(p, tname);
	scratch = scratch_for(p, tpb);
	if (!t || !scratch) {
		r = -ENOMEM;
		goto out_unlock;
	}
	for (i = 0; i < n; i++) {
		const uint32_t *tok = tokens + i * tpb;
		struct pfx_entry *e = NULL;
		bool mine = kvd_prefix_referenced(pc, blocks[i]);

		pfx_key_compute(&p->ix, &key, t->ns->salt, &parent,
				&pc->model[q->layout_id], tok, tpb, scratch);
		if (!missed)
			e = pfx_lookup(&p->ix, &key, t->ns,
				       &pc->model[q->layout_id], parent_id,
				       tok, tpb);
		if (e) {
			if (e->block != blocks[i] && mine) {
				r = -EINVAL;	/* cached elsewhere */
				goto out_unlock;
			} else if (e->block != blocks[i] &&
				   !lend_ok(p, pc, t, e)) {
				/* Its owner lends no more: the caller's copy
				 * is cached as its own, found by nobody. */
				fresh[i] = pfx_entry_new(&p->ix, &key, t->ns,
						t, &pc->model[q->layout_id],
						parent_id, blocks[i], tok, tpb);
				if (!fresh[i]) {
					r = -ENOMEM;
					goto out_unlock;
				}
				fresh[i]->depth = i;
				own[i] = true;
				move[nmove++] = blocks[i];
			} else if (e->block != blocks[i]) {
				/* Cached already: the caller's copy goes. */
				dedup[ndedup++] = blocks[i];
				if (!e->refs && !kvd_prefix_referenced(pc,
								e->block))
					warm[nwarm++] = e;
			} else if (!mine) {
				r = -EPERM;	/* not referenced by the caller */
				goto out_unlock;
			}
			es[i] = e;
			parent_id = e->id;
		} else {
			if (mine) {
				r = -EINVAL;	/* a cached block, other tokens */
				goto out_unlock;
			}
			missed = true;
			e = pfx_entry_new(&p->ix, &key, t->ns, t,
					  &pc->model[q->layout_id], parent_id,
					  blocks[i], tok, tpb);
			if (!e) {
				r = -ENOMEM;
				goto out_unlock;
			}
			e->depth = i;
			e->pkey = parent;
			fresh[i] = e;
			move[nmove++] = blocks[i];
			parent_id = e->id;
		}
		parent = key;
	}
	/* The blocks that stay the caller's must be the caller's. */
	if (ndedup && kvd_lease_check(d->top, lease_id, dedup, ndedup, false)) {
		r = -EPERM;
		goto out_unlock;
	}
	r = pfx_index_reserve(&p->ix, nmove);
	if (!r)
		r = set_reserve(pc, n);
	if (!r && nmove)
		r = tenant_leases_open(p, t);
	if (r)
		goto out_unlock;
	r = lease_move(d, lease_id, t->hot.id, move, nmove);
	if (r) {
		tenant_maybe_close(p, t);
		goto out_unlock;
	}
	/* released and granted back since they were zeroed above, with
	 * another tenant's bytes in between: not published */
	if (!kvd_scrub_owned(d->top, kvd_client_scrub_tag(c), move, nmove)) {
		lease_move(d, t->hot.id, lease_id, move, nmove);
		tenant_maybe_close(p, t);
		r = -EAGAIN;
		goto out_unlock;
	}
	r = transit(p, warm, nwarm, true);
	if (r) {
		lease_move(d, t->hot.id, lease_id, move, nmove);
		tenant_maybe_close(p, t);
		goto out_unlock;
	}
	/* Nothing can fail from here on. */
	for (i = 0; i < n; i++) {
		struct pfx_entry *e = fresh[i] ? fresh[i] : es[i];

		if (fresh[i]) {
			ix_insert(p, e);
			if (own[i])
				ix_unindex(p, e);
			e->refs = 1;
			t->nhot++;
			set_add(pc, e->block);
			fresh[i] = NULL;
			added[nadded++] = e;
		} else if (!kvd_prefix_referenced(pc, e->block)) {
			ref_add(pc, e);
		}
		res[i] = e->block;
	}
	t->published += nmove;
	rep->added = nmove;
	rep->shared = n - nmove;
	r = (int)nmove;
	remote = nadded && clustered(t);
	if (remote)
		memcpy(salt, t->ns->salt, sizeof(salt));
out_unlock:
	lend_reset(es, n);
	pthread_mutex_unlock(&p->lock);
	/* the caller references them: they stay until it lets go */
	if (remote)
		cluster_published(p, salt, added, nadded);
out_free:
	if (fresh)
		for (i = 0; i < n; i++)
			pfx_entry_free(fresh[i]);
	free(tokens);
	free(blocks);
	free(es);
	free(fresh);
	free(warm);
	free(move);
	free(dedup);
	free(own);
	free(added);
	return r;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int op_unref(struct kvd_prefix *p, struct kvd_client *c,
		    const struct kvp_prefix_unref *q)
{
	struct kvd_prefix_conn *pc = *kvd_client_prefix(c);
	uint32_t *blocks = NULL, *sorted = NULL, n = q->n, i;
	int r = 0;

	if ((q->flags & ~KVP_PREFIX_UNREF_ALL) || q->reserved[0] ||
	    q->reserved[1])
		return -EINVAL;
	if ((q->flags & KVP_PREFIX_UNREF_ALL) ? n != 0 :
	    (!n || n > KVP_IO_MAX_BLOCKS))
		return -EINVAL;
	if (!pc)
		return (q->flags & KVP_PREFIX_UNREF_ALL) ? 0 : -EINVAL;
	if (!(q->flags & KVP_PREFIX_UNREF_ALL)) {
		r = kvd_client_region_u32(c, q->off_blocks, n, &blocks);
		if (r)
			return r;
		sorted = malloc(n * sizeof(*sorted));
		if (!sorted) {
			free(blocks);
			return -ENOMEM;
		}
		memcpy(sorted, blocks, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), cmp_u32);
		for (i = 0; i < n; i++)
			if (!kvd_prefix_referenced(pc, sorted[i]) ||
			    (i && sorted[i] == sorted[i - 1])) {
				free(blocks);
				free(sorted);
				return -EINVAL;
			}
		free(sorted);
	} else {
		uint32_t k = 0;

		blocks = malloc((pc->n ? pc->n : 1) * sizeof(*blocks));
		if (!blocks)
			return -ENOMEM;
		for (i = 0; i < pc->cap; i++)
			if (pc->set[i] != SET_EMPTY)
				blocks[k++] = pc->set[i];
		n = k;
	}
	pthread_mutex_lock(&p->lock);
	drop_refs(p, pc, blocks, n);
	pthread_mutex_unlock(&p->lock);
	free(blocks);
	return (int)n;
}

static int op_evict(struct kvd_prefix *p, struct kvd_client *c,
		    const struct kvp_prefix_evict *q)
{
	char tname[KVPOOL_NAME_LEN];

	int r;

	if (q->flags || q->reserved[0] || q->reserved[1] || !q->count)
		return -EINVAL;
	r = kvd_client_tenant_id(c, NULL, tname);
	if (r)
		return r;
	return (int)kvd_prefix_evict_tenant(p->d, tname, q->count);
}

#define BODY(type) ({							\
	if (blen != sizeof(type))					\
		return -EBADMSG;					\
	(const type *)body; })

int kvd_prefix_op(struct kvd_client *c, uint16_t op, const void *body,
		  size_t blen, void *rbody, size_t *rlen)
{
	struct kvd_prefix *p = kvd_client_daemon(c)->prefix;

	if (op == KVP_OP_LAYOUT_MODEL) {
		*rlen = sizeof(struct kvp_layout_reply);
		return op_layout_model(c, BODY(struct kvp_layout_model), rbody);
	}
	if (p->usable)
		return p->usable;
	switch (op) {
	case KVP_OP_PREFIX_MATCH:
		*rlen = sizeof(struct kvp_prefix_match_reply);
		return op_match(p, c, BODY(struct kvp_prefix_match), rbody);
	case KVP_OP_PREFIX_PUBLISH:
		*rlen = sizeof(struct kvp_prefix_publish_reply);
		return op_publish(p, c, BODY(struct kvp_prefix_publish), rbody);
	case KVP_OP_PREFIX_UNREF:
		return op_unref(p, c, BODY(struct kvp_prefix_unref));
	case KVP_OP_PREFIX_EVICT:
		return op_evict(p, c, BODY(struct kvp_prefix_evict));
	}
	return -EOPNOTSUPP;
}

/* ---- admin -------------------------------------------------------------------- */

static int kvd_prefix_forget(struct kvd *d, const char *tenant);

static void fill_rec(struct pfx_tenant *t, struct kvp_prefix_rec *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->tenant, t->name, sizeof(o->tenant));
	memcpy(o->ns, t->ns->name, sizeof(o->ns));
	o->hot_lease = t->hot.id;
	o->cold_lease = t->cold.id;
	o->cached = t->nhot + t->lru.n;
	o->referenced = t->nhot;
	o->hits = t->hits;
	o->misses = t->misses;
	o->hit_tokens = t->hit_tokens;
	o->evictions = t->evictions;
	o->published = t->published;
}

/* Flush @t (p->lock held): cold entries go, hot ones are no longer found. */
static uint32_t flush_locked(struct kvd_prefix *p, struct pfx_tenant *t)
{
	uint32_t n, i;

	t->flushing = true;	/* given back, not demoted */
	n = evict_lru(p, t, t->lru.n);
	t->flushing = false;
	kvd_ptier_flush(p->d, t->name);	/* and what it demoted */
	for (i = 0; i <= p->ix.bmask; i++) {
		struct pfx_entry *e;

		for (e = p->ix.bb[i]; e; e = e->bnext)
			if (e->owner == t) {
				if (e->indexed)
					cluster_leaving(p, t, e, false);
				ix_unindex(p, e);
			}
	}
	return n;
}

static bool name_ok(const char *s, bool empty_ok)
{
	if (!memchr(s, 0, KVP_NAME_LEN))
		return false;
	if (!s[0])
		return empty_ok;
	return !kvpool_name_valid(s);
}

static bool name_in(const char (*names)[KVPOOL_NAME_LEN], int n,
		    const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strncmp(names[i], name, KVPOOL_NAME_LEN))
			return true;
	return false;
}

int kvd_prefix_list(struct kvd *d, const char (*only)[KVPOOL_NAME_LEN],
		    int nonly, const void *body, size_t blen, void *rbody,
		    size_t *rlen)
{
	struct kvd_prefix *p = d->prefix;
	const struct kvp_list *q = BODY(struct kvp_list);
	struct kvp_list_reply *lr = rbody;
	struct kvp_prefix_rec *o = (void *)(lr + 1);
	uint32_t cap = (uint32_t)((KVP_MSG_MAX - sizeof(struct kvp_reply) -
				   sizeof(*lr)) / sizeof(*o));
	uint32_t i = 0, n = 0;
	struct pfx_tenant *t;

	if (q->pad || !memchr(q->pool, 0, sizeof(q->pool)))
		return -EINVAL;
	if (q->pool[0] && strncmp(q->pool, d->top->name, KVPOOL_NAME_LEN))
		return -ENOENT;
	pthread_mutex_lock(&p->lock);
	for (t = p->tenants; t; t = t->next) {
		if (only && !name_in(only, nonly, t->name))
			continue;
		if (i >= q->start && n < cap)
			fill_rec(t, &o[n++]);
		i++;
	}
	pthread_mutex_unlock(&p->lock);
	lr->total = i;
	lr->count = n;
	*rlen = sizeof(*lr) + n * sizeof(*o);
	return (int)n;
}

int kvd_prefix_admin(struct kvd *d, bool admin, uint16_t op, const void *body,
		     size_t blen, void *rbody, size_t *rlen)
{
	struct kvd_prefix *p = d->prefix;

	if (op == KVP_OP_PREFIX_LIST)
		return kvd_prefix_list(d, NULL, 0, body, blen, rbody, rlen);
	if (op == KVP_OP_PREFIX_FLUSH || op == KVP_OP_PREFIX_SHARE) {
		const struct kvp_prefix_tenant *q =
			BODY(struct kvp_prefix_tenant);
		struct pfx_tenant *t;
		int r = 0;

		if ((q->flags & ~(uint32_t)KVP_PREFIX_FORGET) ||
		    (q->flags && op != KVP_OP_PREFIX_FLUSH) ||
		    q->pad || q->reserved[0] || q->reserved[1] ||
		    !name_ok(q->pool, true) || !name_ok(q->tenant, false) ||
		    !name_ok(q->ns, true) ||
		    (op == KVP_OP_PREFIX_FLUSH && q->ns[0]))
			return -EINVAL;
		if (!admin)
			return -EACCES;
		if (q->pool[0] && strncmp(q->pool, d->top->name,
					  KVPOOL_NAME_LEN))
			return -ENOENT;
		if (q->flags & KVP_PREFIX_FORGET)
			return kvd_prefix_forget(d, q->tenant);
		/* A tenant that is not in the ledger has no cache to flush
		 * and cannot join a namespace. */
		r = kvd_tenant_exists(d->top, q->tenant);
		if (!r)
			return -ENOENT;
		if (r < 0 && r != -EOPNOTSUPP)	/* no netlink: unchecked */
			return r;
		r = 0;
		if (op == KVP_OP_PREFIX_FLUSH)
			return (int)kvd_prefix_flush(d, q->tenant);
		pthread_mutex_lock(&p->lock);
		t = tenant_get(p, q->tenant);
		if (!t) {
			r = -ENOMEM;
		} else {
			struct pfx_ns *ns = q->ns[0] ?
					    shared_ns_get(p, q->ns) : &t->own;

			if (!ns) {
				r = -ENOMEM;
			} else if (ns != t->ns) {
				r = (int)flush_locked(p, t);
				t->ns = ns;
				pk_note_tenant(p, t);
				kvd_log(KVD_INFO, "prefix cache of %s: namespace %s",
					t->name, ns->name[0] ? ns->name :
					"(its own)");
			}
		}
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	return -EOPNOTSUPP;
}

/* ---- eviction entry points ------------------------------------------------------ */

uint32_t kvd_prefix_evict_tenant(struct kvd *d, const char *tenant, uint32_t n)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant *t;
	uint32_t k = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (t = p->tenants; t; t = t->next)
		if (!strncmp(t->name, tenant, KVPOOL_NAME_LEN)) {
			k = evict_lru(p, t, n);
			break;
		}
	pthread_mutex_unlock(&p->lock);
	if (k)
		kvd_log(KVD_DEBUG, "prefix cache of %s: %u blocks evicted",
			tenant, k);
	return k;
}

uint32_t kvd_prefix_evict_pool(struct kvd *d, const char *asker, uint32_t n)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant *t;
	uint32_t k = 0, nt = 0, i;
	struct {
		struct pfx_tenant *t;
		uint32_t budget, take;
		struct pfx_entry *next;		/* its next candidate */
	} *c;

	if (!p || !n)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (t = p->tenants; t; t = t->next)
		nt++;
	c = calloc(nt ? nt : 1, sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	/* What each tenant may give: never below its min (unless it asks). */
	nt = 0;
	for (t = p->tenants; t; t = t->next) {
		uint32_t target, cur, min, budget = t->lru.n;

		if (!t->lru.n || !t->cold.id)
			continue;
		if (strncmp(t->name, asker, KVPOOL_NAME_LEN)) {
			if (lease_status(d, &t->cold, &target, &cur, &min))
				continue;
			budget = cur > min ? cur - min : 0;
			if (budget > t->lru.n)
				budget = t->lru.n;
		}
		if (!budget)
			continue;
		c[nt].t = t;
		c[nt].budget = budget;
		c[nt].next = pfx_lru_oldest(&t->lru);
		nt++;
	}
	/* Least recently used first, across tenants. */
	while (k < n) {
		int best = -1;

		for (i = 0; i < nt; i++)
			if (c[i].next && c[i].take < c[i].budget &&
			    (best < 0 || c[i].next->stamp < c[best].next->stamp))
				best = (int)i;
		if (best < 0)
			break;
		c[best].take++;
		c[best].next = c[best].next->lprev;
		k++;
	}
	for (i = 0; i < nt; i++)
		if (c[i].take)
			evict_lru(p, c[i].t, c[i].take);
	pthread_mutex_unlock(&p->lock);
	free(c);
	if (k)
		kvd_log(KVD_DEBUG, "prefix cache: pool short by %u (%s): %u "
			"blocks evicted", n, asker[0] ? asker : "grow", k);
	return k;
}

uint32_t kvd_prefix_flush(struct kvd *d, const char *tenant)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant *t;
	uint32_t k = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (t = p->tenants; t; t = t->next)
		if (!strncmp(t->name, tenant, KVPOOL_NAME_LEN)) {
			k = flush_locked(p, t);
			poll_sync(p);
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return k;
}

/* Free @t, at *pp in p->tenants, if nothing of the cache is charged to it
 * any more (p->lock held). */
static void tenant_forget(struct kvd_prefix *p, struct pfx_tenant **pp,
			  struct pfx_tenant *t)
{
	if (t->nhot || t->lru.n || t->hot.id) {
		kvd_log(KVD_ERR, "prefix cache of %s: deleted while it holds "
			"%u blocks: kept in its own namespace", t->name,
			t->nhot + t->lru.n);
		t->ns = &t->own;
		return;
	}
	*pp = t->next;
	if (p->pk && t->pk_ix >= 0)
		memset(pk_tenant_at(p->pk, (uint32_t)t->pk_ix), 0,
		       sizeof(struct pk_tenant));
	kvd_log(KVD_INFO, "prefix cache of %s: forgotten%s%s", t->name,
		t->ns != &t->own ? ", left namespace " : "",
		t->ns != &t->own ? t->ns->name : "");
	free(t);
}

static struct pfx_tenant **tenant_slot(struct kvd_prefix *p, const char *name)
{
	struct pfx_tenant **pp;

	for (pp = &p->tenants; *pp; pp = &(*pp)->next)
		if (!strncmp((*pp)->name, name, KVPOOL_NAME_LEN))
			return pp;
	return NULL;
}

int kvd_prefix_tenant_del(struct kvd *d, const char *tenant,
			  int (*del)(void *arg), void *arg)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant **pp;
	int r;

	if (!p)
		return del(arg);
	pthread_mutex_lock(&p->lock);
	pp = tenant_slot(p, tenant);
	if (pp) {
		flush_locked(p, *pp);
		tenant_maybe_close(p, *pp);
		poll_sync(p);	/* drops the lock a while: look again below */
	}
	r = del(arg);
	pp = r ? NULL : tenant_slot(p, tenant);
	if (pp)
		tenant_forget(p, pp, *pp);
	pthread_mutex_unlock(&p->lock);
	return r;
}

static int kvd_prefix_forget(struct kvd *d, const char *tenant)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant **pp;
	int r;

	r = kvd_tenant_exists(d->top, tenant);
	if (r)
		return r < 0 ? r : -EBUSY;	/* still in the ledger */
	pthread_mutex_lock(&p->lock);
	pp = tenant_slot(p, tenant);
	if (pp) {
		flush_locked(p, *pp);
		tenant_maybe_close(p, *pp);
		tenant_forget(p, pp, *pp);
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void kvd_prefix_reclaim_wake(struct kvd *d)
{
	if (d->prefix)
		wake_thread(d->prefix);
}

void kvd_prefix_conn_unref_all(struct kvd *d, struct kvd_prefix_conn *pc)
{
	struct kvd_prefix *p = d->prefix;
	uint32_t *blocks, i, k = 0;

	if (!pc || !pc->n)
		return;
	blocks = malloc(pc->n * sizeof(*blocks));
	if (blocks && p) {
		for (i = 0; i < pc->cap; i++)
			if (pc->set[i] != SET_EMPTY)
				blocks[k++] = pc->set[i];
		pthread_mutex_lock(&p->lock);
		drop_refs(p, pc, blocks, k);
		pthread_mutex_unlock(&p->lock);
	} else {
		kvd_log(KVD_ERR, "prefix cache: out of memory dropping %u "
			"references", pc->n);
	}
	free(blocks);
}

void kvd_prefix_conn_close(struct kvd *d, struct kvd_prefix_conn *pc)
{
	if (!pc)
		return;
	kvd_prefix_conn_unref_all(d, pc);
	free(pc->set);
	free(pc);
}

/* ---- reclaim targets on cold leases (the prefix thread) --------------------- */

/* Meet every cold lease's reclaim target (p->lock held). */
static void answer_reclaim(struct kvd_prefix *p, const struct pollfd *pf,
			   nfds_t npf)
{
	struct pfx_tenant *t;
	uint64_t now = kvd_now_ns();

	for (t = p->tenants; t; t = t->next) {
		uint32_t target = 0, cur, min;
		nfds_t i;

		if (!t->cold.id)
			continue;
		if (p->d->mode != KVP_MODE_INPROC) {
			for (i = 1; i < npf; i++)
				if (pf[i].fd == t->cold.fd)
					break;
			if (i == npf || !(pf[i].revents & POLLPRI))
				continue;
		}
		if (lease_status(p->d, &t->cold, &target, &cur, &min) ||
		    !target)
			continue;
		if (evict_lru(p, t, target) < target)
			t->quiet_until = now + 1000000000ULL;
		kvd_log(KVD_DEBUG, "prefix cache of %s: reclaim target %u",
			t->name, target);
	}
}

/*
 * The poll set (p->lock held): the wake eventfd and, with the module, the
 * cold lease of every cached tenant, however many (the set grows with
 * them).  Returns its size; a tenant that does not fit when memory runs
 * out is polled once memory allows (logged).
 */
static nfds_t poll_set(struct kvd_prefix *p)
{
	struct pfx_tenant *t;
	uint64_t now = kvd_now_ns();
	size_t want = 1;
	nfds_t n = 1;

	if (p->d->mode != KVP_MODE_INPROC)
		for (t = p->tenants; t; t = t->next)
			want += t->cold.id != 0;
	if (want > p->pf_cap) {
		struct pollfd *nf = realloc(p->pf, want * sizeof(*nf));

		if (nf) {
			p->pf = nf;
			p->pf_cap = want;
		} else {
			kvd_log(KVD_ERR, "prefix cache: no memory to watch "
				"%zu cold leases", want - 1);
		}
	}
	p->pf[0].fd = p->wake_fd;
	p->pf[0].events = POLLIN;
	p->pf[0].revents = 0;
	if (p->d->mode == KVP_MODE_INPROC)
		return 1;
	for (t = p->tenants; t && n < p->pf_cap; t = t->next) {
		if (!t->cold.id || t->quiet_until > now)
			continue;
		p->pf[n].fd = t->cold.fd;
		p->pf[n].events = POLLPRI;
		p->pf[n].revents = 0;
		n++;
	}
	return n;
}

static void *prefix_main(void *arg)
{
	struct kvd_prefix *p = arg;

	while (!p->stop) {
		struct pollfd *pf;
		uint64_t cnt;
		nfds_t npf;
		int r;

		pthread_mutex_lock(&p->lock);
		npf = poll_set(p);
		pf = p->pf;	/* only this thread changes it */
		pthread_mutex_unlock(&p->lock);
		r = poll(pf, npf, 1000);
		pthread_mutex_lock(&p->lock);
		p->npolls++;
		pthread_cond_broadcast(&p->polled);
		pthread_mutex_unlock(&p->lock);
		if (r < 0 && errno != EINTR)
			break;
		if (p->stop)
			break;
		if (pf[0].revents & POLLIN &&
		    read(p->wake_fd, &cnt, sizeof(cnt)) < 0) {
			/* nothing pending */
		}
		pthread_mutex_lock(&p->lock);
		answer_reclaim(p, pf, npf);
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

/* ---- life ------------------------------------------------------------------------ */

int kvd_prefix_init(struct kvd *d)
{
	struct kvd_prefix *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	p->d = d;
	p->wake_fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->polled, NULL);
	p->pf = malloc(sizeof(*p->pf));
	p->pf_cap = p->pf ? 1 : 0;
	r = p->pf ? pfx_index_init(&p->ix, d->o.prefix_hash_bits) : -ENOMEM;
	if (r) {
		free(p->pf);
		free(p);
		return r;
	}
	if (d->mode == KVP_MODE_MODULE) {
		struct kvpool_features f;
		uint64_t need = KVPOOL_FEAT_LEASE_MOVE |
				KVPOOL_FEAT_RECLAIM_ORDER;

		memset(&f, 0, sizeof(f));
		f.requested = need;
		if (ioctl(d->top->owner_fd, KVPOOL_IOC_FEATURES, &f) ||
		    (f.enabled & need) != need) {
			kvd_log(KVD_WARN, "prefix cache off: the module cannot "
				"move blocks between leases");
			p->usable = -EOPNOTSUPP;
		}
	}
	p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->wake_fd < 0) {
		r = -errno;
		pfx_index_fini(&p->ix);
		free(p->pf);
		free(p);
		return r;
	}
	d->prefix = p;
	pk_start(p);
	return 0;
}

int kvd_prefix_start(struct kvd *d)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant *t;
	int r;

	if (!p || p->th_started)
		return 0;
	/* Caches taken back from the last life before the cluster tier
	 * knew its keys: a tenant with a cluster key uses it again (its
	 * restored entries, keyed with the last life's, age out if the key
	 * changed meanwhile). */
	pthread_mutex_lock(&p->lock);
	for (t = p->tenants; t; t = t->next)
		if (!t->cluster)
			t->cluster = kvd_cluster_tenant_key(d, t->name,
							    t->own.salt);
	pthread_mutex_unlock(&p->lock);
	r = pthread_create(&p->th, NULL, prefix_main, p);
	if (r)
		return -r;
	p->th_started = true;
	return 0;
}

void kvd_prefix_fini(struct kvd *d)
{
	struct kvd_prefix *p = d->prefix;
	struct pfx_tenant *t, *tn;
	struct pfx_ns *ns, *nn;

	if (!p)
		return;
	p->stop = 1;
	if (p->th_started) {
		wake_thread(p);
		pthread_join(p->th, NULL);
	}
	d->prefix = NULL;
	/* what the region says stays for the next life */
	pk_close(p->pk);
	p->pk = NULL;
	for (t = p->tenants; t; t = tn) {
		tn = t->next;
		/* In-process leases go with the ledger; files close here. */
		if (d->mode != KVP_MODE_INPROC) {
			lease_close(d, &t->hot);
			lease_close(d, &t->cold);
		}
		free(t);
	}
	for (ns = p->shared; ns; ns = nn) {
		nn = ns->next;
		free(ns);
	}
	pfx_index_fini(&p->ix);
	close(p->wake_fd);
	free(p->scratch);
	free(p->pf);
	pthread_cond_destroy(&p->polled);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* ---- the cluster tier (cluster.c) ------------------------------------------------- */

/* Its keys are the same on every node: its own namespace, a cluster key. */
static bool clustered(const struct pfx_tenant *t)
{
	return t->cluster && t->ns == &t->own;
}

/* @e leaves the cache (p->lock held): when evicted (@demote) it goes down
 * the chain (the lower tiers, or with write-back straight to the cluster
 * when there are none; its bytes are copied now: the block is still the
 * cache's), and the cluster view hears of it. */
static void cluster_leaving(struct kvd_prefix *p, struct pfx_tenant *t,
			    struct pfx_entry *e, bool demote)
{
	struct kvd *d = p->d;
	bool cl = kvd_cluster_on(d) && clustered(t);
	bool back = cl && kvd_cluster_policy(d) == KVP_CLUSTER_BACK;

	if (demote && !t->flushing && (back || kvd_ptier_on(d))) {
		struct kvd_cluster_blk b = {
			.key = e->key, .parent = e->pkey, .tokens = e->tokens,
			.block = e->block,
		};

		/* never waits: the owner thread evicts too */
		if (kvd_ptier_on(d))
			kvd_ptier_demote(d, t->name, t->ns->salt, &e->model,
					 e->ntok, &b, back);
		else
			kvd_cluster_store(d, t->ns->salt, &e->model, &b, 1,
					  false);
	}
	if (cl)
		kvd_cluster_event(d, false, &e->model, &e->key, 1);
}

/* New entries of one publish (referenced by the publisher, so stable
 * without p->lock): stored with write-through, announced either way. */
static void cluster_published(struct kvd_prefix *p, const uint8_t *salt,
			      struct pfx_entry **added, uint32_t n)
{
	struct kvd_cluster_blk *b = malloc(n * sizeof(*b));
	struct pfx_key *keys = malloc(n * sizeof(*keys));
	uint32_t i;

	if (b && keys) {
		for (i = 0; i < n; i++) {
			b[i].key = keys[i] = added[i]->key;
			b[i].parent = added[i]->pkey;
			b[i].tokens = added[i]->tokens;
			b[i].block = added[i]->block;
		}
		/* one publish has one model */
		if (kvd_cluster_policy(p->d) == KVP_CLUSTER_THROUGH)
			kvd_cluster_store(p->d, salt, &added[0]->model, b, n,
					  true);
		kvd_cluster_event(p->d, true, &added[0]->model, keys, n);
	}
	free(b);
	free(keys);
}

static struct pfx_tenant *tenant_find(struct kvd_prefix *p, const char *name)
{
	struct pfx_tenant *t;

	for (t = p->tenants; t; t = t->next)
		if (!strncmp(t->name, name, KVPOOL_NAME_LEN))
			return t;
	return NULL;
}

#define GRANT_MIN_NS	250000000ULL

/* Grant up to @n blocks into @t's hot lease, without p->lock (t->fetching
 * keeps the lease open): the count, or -errno. */
static int grant_hot(struct kvd *d, struct pfx_lease *hot, uint32_t n,
		     uint64_t timeout_ns, uint32_t *blocks)
{
	struct kvpool_lease_req q;

	if (d->mode == KVP_MODE_INPROC)
		return kvd_ip_grant(d->top, hot->lease, n,
				    KVPOOL_LEASE_PARTIAL, timeout_ns, blocks,
				    -1);
	memset(&q, 0, sizeof(q));
	q.blocks_ptr = (uintptr_t)blocks;
	q.count = n;
	q.flags = KVPOOL_LEASE_PARTIAL;
	q.timeout_ns = timeout_ns;
	if (ioctl(hot->fd, KVPOOL_IOC_LEASE, &q))
		return -errno;
	return (int)q.granted;
}

/* Where fetched blocks come from: the lower tiers, or the cluster. */
enum { SRC_TIERS, SRC_CLUSTER };

static const void *src_payload(int src, void *f, uint32_t i, uint64_t *bytes)
{
	return src == SRC_TIERS ? kvd_ptier_payload(f, i, bytes) :
				  kvd_cluster_payload(f, i, bytes);
}

/*
 * Cache @got fetched blocks of the chain (their keys @keys, the blocks of
 * @tokens from @first on; *pe the entry before them, *pk its key) for the
 * caller: blocks in the tenant's hot lease (charged to it; at its max its
 * own unreferenced cached blocks go first), the bytes written into them,
 * entries referenced by the caller, as a publish makes them.  Returns the
 * blocks added at out[first...]; *pe and *pk move to the last one.
 */
static uint32_t adopt(struct kvd_prefix *p, const char *tname,
		      struct kvd_prefix_conn *pc, const struct pfx_key *model,
		      const uint8_t *salt, uint32_t tpb, const uint32_t *tokens,
		      uint32_t first, const struct pfx_key *keys, uint32_t got,
		      int src, void *f, bool need_cluster, uint64_t deadline,
		      const struct pfx_entry **pe, struct pfx_key *pk,
		      uint32_t *out)
{
	struct kvd *d = p->d;
	uint32_t *blocks = malloc((size_t)got * sizeof(*blocks));
	uint32_t i, added = 0, granted;
	struct pfx_tenant *t;
	uint64_t hot_id, now;
	int r;

	if (!blocks)
		return 0;
	pthread_mutex_lock(&p->lock);
	t = tenant_find(p, tname);
	if (!t || (need_cluster && !clustered(t)) ||
	    memcmp(t->ns->salt, salt, PFX_SALT_BYTES) ||
	    (*pe && !(*pe)->indexed) || tenant_leases_open(p, t)) {
		pthread_mutex_unlock(&p->lock);
		free(blocks);
		return 0;
	}
	t->fetching++;
	hot_id = t->hot.id;
	pthread_mutex_unlock(&p->lock);
	/* local work (the pool may have to grow a chunk): at least
	 * GRANT_MIN_NS, the cluster's deadline aside */
	now = kvd_now_ns();
	r = grant_hot(d, &t->hot, got, deadline > now + GRANT_MIN_NS ?
		      deadline - now : GRANT_MIN_NS, blocks);
	if (r == -EDQUOT) {
		/* at its max: its unreferenced cached blocks make room */
		pthread_mutex_lock(&p->lock);
		evict_lru(p, t, got);
		pthread_mutex_unlock(&p->lock);
		r = grant_hot(d, &t->hot, got, GRANT_MIN_NS, blocks);
	}
	granted = r > 0 ? (uint32_t)r : 0;
	for (i = 0; i < granted; i++) {
		uint64_t bytes;
		const void *pay = src_payload(src, f, i, &bytes);

		if (!pay || kvd_cluster_block_write(d, blocks[i], pay, bytes))
			break;
	}
	pthread_mutex_lock(&p->lock);
	t->fetching--;
	if (i < granted || t->hot.id != hot_id ||
	    (need_cluster && !clustered(t)) ||
	    memcmp(t->ns->salt, salt, PFX_SALT_BYTES) ||
	    (*pe && !(*pe)->indexed) || pfx_index_reserve(&p->ix, granted) ||
	    set_reserve(pc, granted)) {
		if (t->hot.id == hot_id)
			lease_release(d, &t->hot, blocks, granted);
		tenant_maybe_close(p, t);
		pthread_mutex_unlock(&p->lock);
		free(blocks);
		return 0;
	}
	for (added = 0; added < granted; added++) {
		const uint32_t *tok = tokens + (size_t)(first + added) * tpb;
		uint64_t parent_id = *pe ? (*pe)->id : 0;
		struct pfx_entry *e;

		/* cached meanwhile (another publish or fetch): the caller
		 * matches it next time */
		if (pfx_lookup(&p->ix, &keys[added], t->ns, model, parent_id,
			       tok, tpb))
			break;
		e = pfx_entry_new(&p->ix, &keys[added], t->ns, t, model,
				  parent_id, blocks[added], tok, tpb);
		if (!e)
			break;
		e->depth = first + added;
		e->pkey = *pk;
		ix_insert(p, e);
		e->refs = 1;
		t->nhot++;
		set_add(pc, e->block);
		out[first + added] = e->block;
		*pe = e;
		*pk = keys[added];
	}
	if (added < granted)
		lease_release(d, &t->hot, blocks + added, granted - added);
	t->hits += added;
	t->misses -= added;
	t->hit_tokens += (uint64_t)added * tpb;
	tenant_maybe_close(p, t);
	if (added && clustered(t))
		kvd_cluster_event(d, true, model, keys, added);
	pthread_mutex_unlock(&p->lock);
	free(blocks);
	return added;
}

/*
 * MATCH found blocks [0, m) of @tokens locally (the last one @pe, its key
 * @parent): look the rest of the chain up in the lower tiers (the blocks
 * this node demoted), then, for a tenant with a cluster key, in the
 * cluster (one round, up to the first miss, waiting at most the
 * deadline), and cache what was found for the caller.  Returns the blocks
 * added at out[m...].
 */
static uint32_t cluster_match(struct kvd_prefix *p, struct kvd_client *c,
			      const char *tname, struct kvd_prefix_conn *pc,
			      const struct pfx_key *model, const uint8_t *salt,
			      uint32_t tpb, const uint32_t *tokens, uint32_t m,
			      uint32_t nb, const struct pfx_key *parent,
			      const struct pfx_entry *pe, uint32_t *out,
			      bool cl)
{
	struct kvd *d = p->d;
	uint64_t deadline = kvd_now_ns() +
			    (uint64_t)d->o.cluster.deadline_ms * 1000000ULL;
	uint32_t want = nb - m, total = 0, i, n;
	uint8_t *scratch = malloc(48 + (size_t)tpb * sizeof(uint32_t));
	struct pfx_key *keys = NULL, pk = *parent;
	int src;

	if (want > KVP_IO_MAX_BLOCKS)
		want = KVP_IO_MAX_BLOCKS;
	keys = malloc((want ? want : 1) * sizeof(*keys));
	if (!want || !keys || !scratch)
		goto out;
	for (i = 0; i < want; i++) {
		pfx_key_compute(&p->ix, &keys[i], salt, &pk, model,
				tokens + (size_t)(m + i) * tpb, tpb, scratch);
		pk = keys[i];
	}
	pk = *parent;
	for (src = SRC_TIERS; src <= SRC_CLUSTER && total < want; src++) {
		void *f = NULL;
		uint32_t added;
		int got;

		n = want - total;
		if (src == SRC_TIERS) {
			if (!kvd_ptier_on(d))
				continue;
			got = kvd_ptier_fetch(d, salt, model, keys + total, &pk,
					      tokens + (size_t)(m + total) * tpb,
					      tpb, n,
					      (struct kvd_ptier_fetch **)&f);
		} else {
			uint32_t max = kvd_cluster_fetch_max(d, model);

			if (!cl)
				break;
			if (n > max)
				n = max;
			got = kvd_cluster_fetch(d, salt, model, keys + total,
						&pk, tokens +
						(size_t)(m + total) * tpb, n,
						(struct kvd_cluster_fetch **)&f);
		}
		if (got <= 0)
			continue;
		added = adopt(p, tname, pc, model, salt, tpb, tokens,
			      m + total, keys + total, (uint32_t)got, src, f,
			      src == SRC_CLUSTER, deadline, &pe, &pk, out);
		if (src == SRC_TIERS)
			kvd_ptier_fetch_end(d, f, added);
		else
			kvd_cluster_fetch_end(d, f, added);
		total += added;
		if (added < (uint32_t)got)
			break;		/* no room, or cached meanwhile */
	}
out:
	free(keys);
	free(scratch);
	return total;
}

uint32_t kvd_prefix_entries(struct kvd *d)
{
	struct kvd_prefix *p = d->prefix;
	uint32_t n;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = p->ix.nkeyed;
	pthread_mutex_unlock(&p->lock);
	return n;
}

/* ---- the index across a restart (prefix_keep.h) ------------------------------ */

static void pk_note_ns(struct kvd_prefix *p, struct pfx_ns *ns)
{
	struct pk_ns *r = NULL;
	uint32_t i;

	if (!p->pk || !ns->name[0] || ns->pk_ix >= 0)
		return;
	for (i = 0; i < PK_SHARED; i++) {
		r = pk_ns_at(p->pk, i);
		if (!r->used)
			break;
	}
	if (i == PK_SHARED)
		return;		/* its entries are not kept */
	memset(r, 0, sizeof(*r));
	r->used = 1;
	memcpy(r->name, ns->name, PK_NAME);
	memcpy(r->salt, ns->salt, sizeof(r->salt));
	pk_ns_sum(r);
	ns->pk_ix = (int)i;
}

/* @t's record: its salt, namespace and leases, or none while it holds no
 * lease or its leases are not kept (p->lock held). */
static void pk_note_tenant(struct kvd_prefix *p, struct pfx_tenant *t)
{
	struct pk_tenant *r;
	uint32_t i;

	if (!p->pk)
		return;
	if (!t->hot.id || !t->hot.kept || !t->cold.kept) {
		if (t->pk_ix >= 0) {
			r = pk_tenant_at(p->pk, (uint32_t)t->pk_ix);
			memset(r, 0, sizeof(*r));
		}
		t->pk_ix = -1;
		return;
	}
	if (t->pk_ix < 0) {
		for (i = 0; i < PK_TENANTS; i++)
			if (!pk_tenant_at(p->pk, i)->used)
				break;
		if (i == PK_TENANTS) {
			kvd_log(KVD_WARN, "prefix cache of %s: more than %u "
				"caches: not kept across a restart", t->name,
				PK_TENANTS);
			return;
		}
		t->pk_ix = (int)i;
	}
	pk_note_ns(p, t->ns);
	r = pk_tenant_at(p->pk, (uint32_t)t->pk_ix);
	r->sum = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	r->used = 1;
	memcpy(r->name, t->name, PK_NAME);
	memcpy(r->ns, t->ns->name, PK_NAME);
	memcpy(r->salt, t->own.salt, sizeof(r->salt));
	r->hot_id = t->hot.id;
	r->cold_id = t->cold.id;
	pk_tenant_sum(r);
}

/* A parked lease of this pool onto a new file of ours. */
static int lease_adopt(struct kvd *d, uint64_t id, struct pfx_lease *pl)
{
	struct kvpool_lease_adopt a;
	int fd = open(d->o.device_path, O_RDWR | O_CLOEXEC), e;

	if (fd < 0)
		return -errno;
	memset(&a, 0, sizeof(a));
	a.owner_fd = d->top->owner_fd;
	a.lease_id = id;
	if (ioctl(fd, KVPOOL_IOC_LEASE_ADOPT, &a)) {
		e = -errno;
		close(fd);
		return e;
	}
	pl->fd = fd;
	pl->id = id;
	pl->kept = true;
	return 0;
}

struct pk_restore {
	struct kvpool_snapshot s;
	struct kvpool_lease_info *li;
	struct kvpool_block_owner *bo;
	uint64_t *owner;		/* per block: the lease holding it */
	bool *adopted;			/* per li[] */
	uint32_t *order;		/* kept slots, by depth */
	uint32_t norder;
	struct pfx_entry **made;	/* per block: the entry restored */
	uint64_t *old_ids;		/* sorted, for parents */
	uint32_t *old_at;		/* old_ids[i]'s block */
	uint32_t nold;
};

static int li_find(const struct pk_restore *x, uint64_t id)
{
	uint32_t i;

	for (i = 0; i < x->s.leases; i++)
		if (x->li[i].lease_id == id &&
		    (x->li[i].flags & KVPOOL_LEASE_INFO_PARKED))
			return (int)i;
	return -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static struct kvd_prefix *pk_sort_p;

static int by_slot_depth(const void *a, const void *b)
{
	const struct pk_slot *x = pk_slot_at(pk_sort_p->pk, *(const uint32_t *)a);
	const struct pk_slot *y = pk_slot_at(pk_sort_p->pk, *(const uint32_t *)b);

	return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* Adopt the caches whose records check out and whose leases are parked. */
static void pk_restore_tenants(struct kvd_prefix *p, struct pk_restore *x)
{
	struct kvd *d = p->d;
	uint32_t i;

	for (i = 0; i < PK_SHARED; i++) {
		struct pk_ns *r = pk_ns_at(p->pk, i);
		struct pfx_ns *ns;

		if (!pk_ns_ok(r) || !(ns = shared_ns_get(p, r->name))) {
			memset(r, 0, sizeof(*r));
			continue;
		}
		memcpy(ns->salt, r->salt, sizeof(ns->salt));
		ns->pk_ix = (int)i;
	}
	for (i = 0; i < PK_TENANTS; i++) {
		struct pk_tenant *r = pk_tenant_at(p->pk, i);
		int hi = pk_tenant_ok(r) ? li_find(x, r->hot_id) : -1;
		int ci = hi >= 0 ? li_find(x, r->cold_id) : -1;
		struct pfx_ns *ns = NULL;
		struct pfx_tenant *t = NULL;

		if (ci >= 0 && r->ns[0]) {
			for (ns = p->shared; ns; ns = ns->next)
				if (!strncmp(ns->name, r->ns, PK_NAME))
					break;
		} else if (ci >= 0) {
			ns = (struct pfx_ns *)1;	/* its own */
		}
		if (ns)
			t = tenant_get(p, r->name);
		if (!t || t->hot.id || lease_adopt(d, r->hot_id, &t->hot)) {
			memset(r, 0, sizeof(*r));
			continue;
		}
		if (lease_adopt(d, r->cold_id, &t->cold)) {
			lease_drop(d, &t->hot);
			memset(r, 0, sizeof(*r));
			continue;
		}
		x->adopted[hi] = x->adopted[ci] = true;
		if (!t->cluster)
			memcpy(t->own.salt, r->salt, sizeof(t->own.salt));
		t->ns = ns == (struct pfx_ns *)1 ? &t->own : ns;
		t->pk_ix = (int)i;
	}
}

/* The tenant (restored) whose record @tix is, or NULL. */
static struct pfx_tenant *pk_tenant_of(struct kvd_prefix *p, uint32_t tix)
{
	struct pfx_tenant *t;

	for (t = p->tenants; t; t = t->next)
		if (t->pk_ix == (int)tix)
			return t;
	return NULL;
}

static const struct pfx_ns *pk_ns_named(struct kvd_prefix *p,
					struct pfx_tenant *t, const char *name)
{
	struct pfx_ns *ns;

	if (!name[0])
		return &t->own;
	for (ns = p->shared; ns; ns = ns->next)
		if (ns->pk_ix >= 0 && !strncmp(ns->name, name, PK_NAME))
			return ns;
	return NULL;
}

/* The entries whose slots check out, whose block one of their tenant's
 * leases holds, and whose parent was restored: unreferenced, cold. */
static uint32_t pk_restore_entries(struct kvd_prefix *p, struct pk_restore *x)
{
	uint32_t cap = pk_capacity(p->pk), i, n = 0;

	for (i = 0; i < cap; i++) {
		struct pk_slot *sl = pk_slot_at(p->pk, i);
		struct pfx_tenant *t;

		if (!sl->sum)
			continue;
		t = pk_slot_ok(sl) ? pk_tenant_of(p, sl->tix) : NULL;
		if (!t || (x->owner[i] != t->hot.id &&
			   x->owner[i] != t->cold.id) ||
		    !pk_ns_named(p, t, sl->ns)) {
			memset(sl, 0, offsetof(struct pk_slot, tokens));
			continue;
		}
		x->order[x->norder++] = i;
		x->old_ids[x->nold] = sl->id;
		x->nold++;
	}
	qsort(x->old_ids, x->nold, sizeof(*x->old_ids), cmp_u64);
	for (i = 0; i < x->nold; i++)
		x->old_at[i] = UINT32_MAX;
	pk_sort_p = p;
	qsort(x->order, x->norder, sizeof(*x->order), by_slot_depth);
	if (pfx_index_reserve(&p->ix, x->norder))
		return 0;
	for (i = 0; i < x->norder; i++) {
		uint32_t b = x->order[i];
		struct pk_slot *sl = pk_slot_at(p->pk, b);
		struct pfx_tenant *t = pk_tenant_of(p, sl->tix);
		uint64_t *at = bsearch(&sl->id, x->old_ids, x->nold,
				       sizeof(*x->old_ids), cmp_u64);
		uint64_t parent = 0;
		struct pfx_entry *e;

		if (sl->parent_id) {
			uint64_t *pa = bsearch(&sl->parent_id, x->old_ids,
					       x->nold, sizeof(*x->old_ids),
					       cmp_u64);
			uint32_t pb = pa ? x->old_at[pa - x->old_ids] :
				      UINT32_MAX;

			if (pb == UINT32_MAX || !x->made[pb])
				continue;	/* unreachable: given back */
			parent = x->made[pb]->id;
		}
		e = pfx_entry_new(&p->ix, &sl->key, pk_ns_named(p, t, sl->ns),
				  t, &sl->model, parent, b, sl->tokens,
				  sl->ntok);
		if (!e)
			continue;
		e->depth = sl->depth;
		e->pkey = sl->pkey;
		pfx_insert(&p->ix, e);
		x->made[b] = e;
		if (at)
			x->old_at[at - x->old_ids] = b;
		n++;
	}
	return n;
}

/*
 * Give back what the restore did not take (blocks of adopted leases
 * without an entry, parked leases nobody adopted), move the hot leases'
 * blocks to the cold ones, put every entry on its LRU and write the slots
 * again for this life.
 */
static int bo_by_lease(const void *a, const void *b)
{
	const struct kvpool_block_owner *x = a, *y = b;

	return x->lease_id < y->lease_id ? -1 : x->lease_id > y->lease_id;
}

/* The blocks of lease @id, from the snapshot sorted by lease: the first
 * one's index in x->bo, and (*n) how many. */
static uint32_t lease_run(const struct pk_restore *x, uint64_t id, uint32_t *n)
{
	uint32_t lo = 0, hi = x->s.blocks, end;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (x->bo[mid].lease_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < x->s.blocks && x->bo[end].lease_id == id; end++)
		;
	*n = end - lo;
	return lo;
}

static void pk_restore_settle(struct kvd_prefix *p, struct pk_restore *x)
{
	struct kvd *d = p->d;
	uint32_t cap = d->top->capacity, i, *blocks, *hot;
	struct pfx_tenant *t;

	blocks = malloc(((size_t)cap + 1) * sizeof(*blocks));
	hot = malloc(((size_t)cap + 1) * sizeof(*hot));
	qsort(x->bo, x->s.blocks, sizeof(*x->bo), bo_by_lease);
	for (t = p->tenants; blocks && hot && t; t = t->next) {
		struct pfx_lease *pl[2] = { &t->hot, &t->cold };
		uint32_t nhot = 0;
		unsigned int k;

		if (!t->hot.id)
			continue;
		/* blocks without an entry go back; the hot lease's
		 * restored ones go to the cold lease */
		for (k = 0; k < 2; k++) {
			uint32_t n, at = lease_run(x, pl[k]->id, &n), nfree = 0;

			for (i = at; i < at + n; i++) {
				uint32_t b = x->bo[i].block;

				if (b < cap && x->made[b] && k == 0)
					hot[nhot++] = b;
				else if (b < cap && !x->made[b])
					blocks[nfree++] = b;
			}
			if (nfree && lease_release(d, pl[k], blocks, nfree))
				kvd_log(KVD_WARN, "prefix cache of %s: cannot "
					"give back %u blocks", t->name, nfree);
		}
		if (nhot && lease_move(d, t->hot.id, t->cold.id, hot, nhot)) {
			kvd_log(KVD_WARN, "prefix cache of %s: cannot move its "
				"restored blocks: not restored", t->name);
			for (i = 0; i < nhot; i++) {
				ix_remove(p, x->made[hot[i]]);
				x->made[hot[i]] = NULL;
			}
			lease_release(d, &t->hot, hot, nhot);
		}
	}
	/* deepest first, so that first blocks are evicted last */
	for (i = x->norder; i-- > 0;) {
		struct pfx_entry *e = x->made[x->order[i]];

		if (e) {
			pfx_lru_push(&p->ix, &((struct pfx_tenant *)e->owner)->lru,
				     e);
			pk_note_entry(p, e);
		}
	}
	for (t = p->tenants; t; t = t->next) {
		pk_note_tenant(p, t);
		tenant_maybe_close(p, t);
	}
	for (i = 0; i < x->s.leases; i++) {
		struct pfx_lease pl = { .fd = -1 };

		if (x->adopted[i] || !(x->li[i].flags & KVPOOL_LEASE_INFO_PARKED))
			continue;
		if (lease_adopt(d, x->li[i].lease_id, &pl)) {
			kvd_log(KVD_WARN, "pool %s: parked lease %llu cannot be "
				"given back", d->top->name,
				(unsigned long long)x->li[i].lease_id);
			continue;
		}
		lease_drop(d, &pl);
	}
	free(blocks);
	free(hot);
}

/*
 * Module: the index kept for a restart.  With kept pool memory that the
 * metadata region vouches for, take back what the last life kept of the
 * index; in any case give back parked cache leases nobody takes, and
 * keep this life's index.
 */
static void pk_start(struct kvd_prefix *p)
{
	struct kvd *d = p->d;
	struct kvpool_features f;
	struct pk_restore x;
	bool restored = false;
	uint32_t cap = d->top->capacity, i, n = 0;

	if (d->mode != KVP_MODE_MODULE || p->usable)
		return;
	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_PARK;
	if (ioctl(d->top->owner_fd, KVPOOL_IOC_FEATURES, &f) ||
	    !(f.enabled & KVPOOL_FEAT_PARK))
		return;			/* nothing parks either */
	memset(&x, 0, sizeof(x));
	if (kvd_ledger_snapshot(d->top, &x.s, &x.li, &x.bo)) {
		kvd_log(KVD_WARN, "prefix cache: no snapshot of pool %s: its "
			"index is not kept", d->top->name);
		return;
	}
	p->pk = pk_open(d, cap, kvd_restart_preserved(d->top), &restored);
	x.owner = calloc(cap ? cap : 1, sizeof(*x.owner));
	x.adopted = calloc(x.s.leases + 1, sizeof(*x.adopted));
	x.order = malloc(((size_t)cap + 1) * sizeof(*x.order));
	x.made = calloc(cap ? cap : 1, sizeof(*x.made));
	x.old_ids = malloc(((size_t)cap + 1) * sizeof(*x.old_ids));
	x.old_at = malloc(((size_t)cap + 1) * sizeof(*x.old_at));
	if (!x.owner || !x.adopted || !x.order || !x.made || !x.old_ids ||
	    !x.old_at) {
		restored = false;
	} else {
		for (i = 0; i < x.s.blocks; i++)
			if (x.bo[i].block < cap)
				x.owner[x.bo[i].block] = x.bo[i].lease_id;
	}
	if (restored) {
		pk_restore_tenants(p, &x);
		n = pk_restore_entries(p, &x);
	} else if (p->pk) {
		pk_clear(p->pk);
	}
	if (x.adopted)
		pk_restore_settle(p, &x);
	for (i = 0, n = 0; x.made && i < cap; i++)
		n += x.made[i] && pfx_by_block(&p->ix, i) == x.made[i];
	if (restored) {
		kvd_log(KVD_NOTICE, "prefix cache: %u entries kept from the "
			"last life", n);
		kvd_restart_prefix(d, n);
	}
	free(x.li);
	free(x.bo);
	free(x.owner);
	free(x.adopted);
	free(x.order);
	free(x.made);
	free(x.old_ids);
	free(x.old_at);
}
