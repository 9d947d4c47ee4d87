// SPDX-License-Identifier: MIT
/*
 * prefix_tier.c - the prefix cache's demotion chain through the lower
 * tiers: top pool, then every lower tier in order (dram, nvme), then the
 * cluster tier or away.  See prefix_tier.h.
 *
 * An entry here is a block of a lower pool held in a lease of the daemon
 * attached to the block's tenant in that pool (reclaim order first: the
 * ledger asks these leases before the tenant's own), with what a lookup
 * compares (namespace salt, chain and parent keys, model, token ids) and
 * an XXH3-128 of its bytes, checked when it is read back.  Entries are in
 * a hash table by chain key and, per tier, in an LRU list.
 *
 * The worker thread places demoted blocks (lease, write, insert; when a
 * tier has no room, its least recently used entry goes one tier down
 * first), gives blocks back when the owner says a lower pool is short and
 * when the ledger posts a reclaim target to one of its leases.  MATCH
 * (kvd_ptier_fetch) reads blocks in the caller's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#ifdef KVD_HAVE_XXHASH
#include <xxhash.h>
#else
#include "hash128.h"
#endif

#include "inproc.h"
#include "core.h"
#include "ledger.h"
#include "cluster.h"
#include "prefix_tier.h"
#include "scrub.h"

#define PT_QUEUE_BYTES	(64ULL << 20)	/* demotions waiting, at most */
#define PT_BUCKETS	65536
#define PT_POLL_NS	100000000ULL	/* reclaim targets, checked every */
#define PT_GRANT_NS	200000000ULL	/* a lower pool may have to grow */
#define PT_ALIGN	4096

struct pt_lease {
	struct pt_lease *next;
	char tenant[KVPOOL_NAME_LEN];
	unsigned int tier;
	uint64_t id;
	int fd;				/* module: the daemon's file */
	struct kvpool_lease *lease;	/* in-process */
	uint32_t held;			/* entries (and blocks being placed) */
	uint32_t busy;			/* grants in flight */
};

struct pt_ent {
	struct pt_ent *hnext;
	struct pt_ent *lprev, *lnext;	/* its tier's LRU: head newest */
	struct pfx_key key, parent, model;
	uint8_t salt[PFX_SALT_BYTES];
	struct pt_lease *lease;
	uint32_t block;
	uint32_t busy;			/* lookups reading it */
	bool dead;			/* gone from the index while busy */
	bool to_cluster;
	uint64_t sum[2];
	uint32_t tpb;
	uint32_t tokens[];
};

struct pt_job {
	struct pt_job *next;
	char tenant[KVPOOL_NAME_LEN];
	uint8_t salt[PFX_SALT_BYTES];
	struct pfx_key key, parent, model;
	unsigned int tier;		/* the first tier to try */
	bool to_cluster;
	uint64_t gen;			/* the tenant's flushes when demoted */
	uint32_t tpb;
	uint32_t *tokens;
	uint8_t *bytes;			/* block_bytes, PT_ALIGN aligned */
};

struct pt_gen {
	struct pt_gen *next;
	char tenant[KVPOOL_NAME_LEN];
	uint64_t gen;
};

struct pt_tier {
	struct pt_ent *head, *tail;
	uint32_t n;
	_Atomic uint32_t short_by;	/* blocks the owner asked back */
	struct kvd_io io;		/* the worker's */
	bool io_open;
	_Atomic uint64_t in, out;	/* blocks demoted into / promoted */
};

struct kvd_ptier {
	struct kvd *d;
	pthread_mutex_t lock;		/* index, LRUs, leases, generations */
	struct pt_ent **bk;
	struct pt_lease *leases;
	struct pt_gen *gens;
	struct pt_tier tiers[KVD_MAX_TIERS];
	pthread_mutex_t qlock;		/* the demotion queue */
	pthread_cond_t qcond;
	struct pt_job *q, *qtail;
	uint64_t qbytes;
	pthread_t th;
	bool th_on;
	volatile int stop;
	uint64_t slot;			/* bytes of a buffer */
	_Atomic uint64_t dropped, corrupt;
};

struct kvd_ptier_fetch {
	uint32_t n, got;
	struct pt_ent **ents;
	uint8_t **bufs;
	uint64_t bytes;
};

bool kvd_ptier_on(const struct kvd *d)
{
	return d->ptier != NULL;
}

static bool key_eq(const struct pfx_key *a, const struct pfx_key *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

static uint8_t *buf_new(struct kvd_ptier *pt)
{
	return aligned_alloc(PT_ALIGN, pt->slot);
}

static void sum_of(const void *p, uint64_t n, uint64_t out[2])
{
	XXH128_hash_t h = XXH3_128bits(p, (size_t)n);

	out[0] = h.low64;
	out[1] = h.high64;
}

/* ---- leases of the daemon in the lower pools (pt->lock held) ----------- */

static void name_set(char dst[KVPOOL_NAME_LEN], const char *src)
{
	memset(dst, 0, KVPOOL_NAME_LEN);
	memcpy(dst, src, strnlen(src, KVPOOL_NAME_LEN - 1));
}

static struct pt_lease *lease_get(struct kvd_ptier *pt, const char *tenant,
				  unsigned int tier)
{
	struct kvd *d = pt->d;
	struct kvd_pool *p = &d->pools[tier];
	struct pt_lease *l;

	for (l = pt->leases; l; l = l->next)
		if (l->tier == tier && !strncmp(l->tenant, tenant,
						KVPOOL_NAME_LEN))
			return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	name_set(l->tenant, tenant);
	l->tier = tier;
	l->fd = -1;
	if (d->mode == KVP_MODE_INPROC) {
		struct kvpool_cred cred = {
			.uid = (u32)geteuid(), .gid = (u32)getegid(),
			.pid = (u32)getpid(), .admin = true,
		};
		int r;

		pthread_mutex_lock(&p->lock);
		r = kvpool_lease_open(p->pool, &cred, &l->lease);
		if (!r) {
			r = kvpool_lease_attach(l->lease, l->tenant, &cred);
			if (!r)
				r = kvpool_lease_set_reclaim_order(l->lease,
						KVPOOL_RECLAIM_FIRST, &cred);
			if (r)
				kvpool_lease_close(l->lease);
			else
				l->id = l->lease->id;
		}
		pthread_mutex_unlock(&p->lock);
		if (r) {
			kvd_log(KVD_WARN, "prefix tier %s: lease for %s: %s",
				p->name, l->tenant, strerror(-r));
			free(l);
			return NULL;
		}
	} else {
		struct kvpool_tenant_attach ta;

		l->fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);
		memset(&ta, 0, sizeof(ta));
		memcpy(ta.pool, p->name, KVPOOL_NAME_LEN);
		memcpy(ta.tenant, l->tenant, KVPOOL_NAME_LEN);
		ta.flags = KVPOOL_ATTACH_RECLAIM_FIRST;
		if (l->fd < 0 || ioctl(l->fd, KVPOOL_IOC_TENANT_ATTACH, &ta)) {
			kvd_log(KVD_WARN, "prefix tier %s: lease for %s: %m",
				p->name, l->tenant);
			if (l->fd >= 0)
				close(l->fd);
			free(l);
			return NULL;
		}
		l->id = ta.lease_id;
	}
	l->next = pt->leases;
	pt->leases = l;
	return l;
}

/* An empty lease closes (its tenant may then be deleted). */
static void lease_maybe_close(struct kvd_ptier *pt, struct pt_lease *l)
{
	struct kvd_pool *p = &pt->d->pools[l->tier];
	struct pt_lease **pp;

	if (l->held || l->busy)
		return;
	for (pp = &pt->leases; *pp && *pp != l; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = l->next;
	if (pt->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		kvpool_lease_close(l->lease);
		pthread_mutex_unlock(&p->lock);
	} else {
		close(l->fd);
	}
	free(l);
}

static int lease_grant(struct kvd_ptier *pt, struct pt_lease *l,
		       uint32_t *block)
{
	struct kvd_pool *p = &pt->d->pools[l->tier];
	struct kvpool_lease_req q;

	if (pt->d->mode == KVP_MODE_INPROC) {
		int r = kvd_ip_grant(p, l->lease, 1, 0, PT_GRANT_NS, block, -1);

		return r < 0 ? r : 0;
	}
	memset(&q, 0, sizeof(q));
	q.blocks_ptr = (uintptr_t)block;
	q.count = 1;
	q.timeout_ns = PT_GRANT_NS;
	return ioctl(l->fd, KVPOOL_IOC_LEASE, &q) ? -errno : 0;
}

static void lease_release(struct kvd_ptier *pt, struct pt_lease *l,
			  uint32_t block)
{
	struct kvd_pool *p = &pt->d->pools[l->tier];
	struct kvpool_release rl;
	int r;

	if (pt->d->mode == KVP_MODE_INPROC) {
		r = kvd_ip_release(p, l->lease, &block, 1, 0);
	} else {
		memset(&rl, 0, sizeof(rl));
		rl.blocks_ptr = (uintptr_t)&block;
		rl.count = 1;
		r = ioctl(l->fd, KVPOOL_IOC_RELEASE, &rl) ? -errno : 0;
	}
	if (r < 0)
		kvd_log(KVD_ERR, "prefix tier %s: release of block %u: %s",
			p->name, block, strerror(-r));
}

static uint32_t lease_target(struct kvd_ptier *pt, struct pt_lease *l)
{
	struct kvd_pool *p = &pt->d->pools[l->tier];
	struct kvpool_status st;
	uint32_t t;

	if (pt->d->mode == KVP_MODE_INPROC) {
		pthread_mutex_lock(&p->lock);
		t = l->lease->reclaim_target;
		pthread_mutex_unlock(&p->lock);
		return t;
	}
	memset(&st, 0, sizeof(st));
	return ioctl(l->fd, KVPOOL_IOC_STATUS, &st) ? 0 : st.reclaim_target;
}

/* ---- the index (pt->lock held) ----------------------------------------------- */

static struct pt_ent **bucket(struct kvd_ptier *pt, const struct pfx_key *k)
{
	return &pt->bk[(k->lo ^ k->hi) & (PT_BUCKETS - 1)];
}

static struct pt_ent *find(struct kvd_ptier *pt, const uint8_t *salt,
			   const struct pfx_key *key,
			   const struct pfx_key *model,
			   const struct pfx_key *parent, const uint32_t *tokens,
			   uint32_t tpb)
{
	struct pt_ent *e;

	for (e = *bucket(pt, key); e; e = e->hnext)
		if (key_eq(&e->key, key) && key_eq(&e->model, model) &&
		    key_eq(&e->parent, parent) && e->tpb == tpb &&
		    !memcmp(e->salt, salt, PFX_SALT_BYTES) &&
		    !memcmp(e->tokens, tokens, (size_t)tpb * 4))
			return e;
	return NULL;
}

static void lru_del(struct pt_tier *t, struct pt_ent *e)
{
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		t->head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		t->tail = e->lprev;
	e->lprev = e->lnext = NULL;
	t->n--;
}

static void insert(struct kvd_ptier *pt, struct pt_ent *e)
{
	struct pt_ent **b = bucket(pt, &e->key);
	struct pt_tier *t = &pt->tiers[e->lease->tier];

	e->hnext = *b;
	*b = e;
	e->lprev = NULL;
	e->lnext = t->head;
	if (t->head)
		t->head->lprev = e;
	else
		t->tail = e;
	t->head = e;
	t->n++;
}

/* Out of the index and its LRU; the caller owns it (and its block). */
static void unlink_ent(struct kvd_ptier *pt, struct pt_ent *e)
{
	struct pt_ent **pp;

	for (pp = bucket(pt, &e->key); *pp && *pp != e; pp = &(*pp)->hnext)
		;
	if (*pp)
		*pp = e->hnext;
	lru_del(&pt->tiers[e->lease->tier], e);
}

/* Its block back, and the entry freed. */
static void drop_ent(struct kvd_ptier *pt, struct pt_ent *e)
{
	struct pt_lease *l = e->lease;

	lease_release(pt, l, e->block);
	l->held--;
	free(e);
	lease_maybe_close(pt, l);
}

static uint64_t gen_of(struct kvd_ptier *pt, const char *tenant)
{
	struct pt_gen *g;

	for (g = pt->gens; g; g = g->next)
		if (!strncmp(g->tenant, tenant, KVPOOL_NAME_LEN))
			return g->gen;
	return 0;
}

/* ---- block bytes ------------------------------------------------------------ */

static int tier_read(struct kvd_pool *p, struct kvd_io *io, uint32_t block,
		     uint8_t *buf)
{
	void *src;
	int r = 0;

	kvd_backing_rdlock(p);
	if (block >= p->mapped) {
		r = -EFAULT;
	} else if ((src = p->ops->host_ptr ? p->ops->host_ptr(p, block) :
			  NULL)) {
		memcpy(buf, src, p->block_bytes);
	} else {
		void *b = buf;

		r = p->ops->read(p, io, &block, &b, 1);
	}
	kvd_backing_unlock(p);
	return r;
}

static int tier_write(struct kvd_pool *p, struct kvd_io *io, uint32_t block,
		      const uint8_t *buf)
{
	void *dst;
	int r = 0;

	kvd_backing_rdlock(p);
	if (block >= p->mapped) {
		r = -EFAULT;
	} else if ((dst = p->ops->host_ptr ? p->ops->host_ptr(p, block) :
			  NULL)) {
		memcpy(dst, buf, p->block_bytes);
	} else {
		const void *b = buf;

		r = p->ops->write(p, io, &block, &b, 1);
	}
	/* a cached block, read only through references: whoever is granted
	 * it after its eviction gets zeros */
	kvd_scrub_filled(p, KVD_TAG_UNKNOWN, &block, 1, true);
	kvd_backing_unlock(p);
	return r;
}

/* A one-off I/O state for a caller's thread: no ring, one bounce slot. */
static int io_private(struct kvd_ptier *pt, struct kvd_io *io)
{
	memset(io, 0, sizeof(*io));
	io->depth = 1;
	io->bounce = aligned_alloc(PT_ALIGN, pt->slot);
	return io->bounce ? 0 : -ENOMEM;
}

/* ---- demotion ---------------------------------------------------------------- */

static void job_free(struct pt_job *j)
{
	if (!j)
		return;
	free(j->tokens);
	free(j->bytes);
	free(j);
}

static void enqueue(struct kvd_ptier *pt, struct pt_job *j)
{
	pthread_mutex_lock(&pt->qlock);
	if (pt->qbytes + pt->slot > PT_QUEUE_BYTES || pt->stop) {
		pthread_mutex_unlock(&pt->qlock);
		atomic_fetch_add(&pt->dropped, 1);
		job_free(j);
		return;
	}
	j->next = NULL;
	if (pt->qtail)
		pt->qtail->next = j;
	else
		pt->q = j;
	pt->qtail = j;
	pt->qbytes += pt->slot;
	pthread_cond_signal(&pt->qcond);
	pthread_mutex_unlock(&pt->qlock);
}

void kvd_ptier_demote(struct kvd *d, const char *tenant, const uint8_t *salt,
		      const struct pfx_key *model, uint32_t tpb,
		      const struct kvd_cluster_blk *b, bool to_cluster)
{
	struct kvd_ptier *pt = d->ptier;
	struct kvd_pool *top = d->top;
	struct pt_job *j;
	void *src;
	bool ok = false;

	if (!pt)
		return;
	j = calloc(1, sizeof(*j));
	if (j) {
		j->tokens = malloc((size_t)tpb * 4);
		j->bytes = buf_new(pt);
	}
	if (!j || !j->tokens || !j->bytes) {
		atomic_fetch_add(&pt->dropped, 1);
		job_free(j);
		return;
	}
	/* the owner thread evicts too: never wait for an unmap */
	if (kvd_backing_tryrdlock(top)) {
		if (b->block < top->mapped) {
			src = top->ops->host_ptr ?
			      top->ops->host_ptr(top, b->block) : NULL;
			if (src) {
				memcpy(j->bytes, src, top->block_bytes);
				ok = true;
			} else if (top->ops->read) {
				struct kvd_io io;
				void *dst = j->bytes;

				memset(&io, 0, sizeof(io));
				ok = !top->ops->read(top, &io, &b->block, &dst,
						     1);
			}
		}
		kvd_backing_unlock(top);
	}
	if (!ok) {
		atomic_fetch_add(&pt->dropped, 1);
		job_free(j);
		return;
	}
	name_set(j->tenant, tenant);
	memcpy(j->salt, salt, PFX_SALT_BYTES);
	j->key = b->key;
	j->parent = b->parent;
	j->model = *model;
	j->tpb = tpb;
	memcpy(j->tokens, b->tokens, (size_t)tpb * 4);
	j->tier = 1;
	j->to_cluster = to_cluster;
	pthread_mutex_lock(&pt->lock);
	j->gen = gen_of(pt, tenant);
	pthread_mutex_unlock(&pt->lock);
	enqueue(pt, j);
}

/* The end of the chain: the cluster tier, or away. */
static void chain_end(struct kvd_ptier *pt, struct pt_job *j)
{
	if (j->to_cluster) {
		struct kvd_cluster_blk b = {
			.key = j->key, .parent = j->parent,
			.tokens = j->tokens,
		};

		kvd_cluster_store_bytes(pt->d, j->salt, &j->model, &b,
					j->bytes);
	} else {
		atomic_fetch_add(&pt->dropped, 1);
	}
	job_free(j);
}

/*
 * Take up to @n of the least recently used entries of @tier (of lease @only
 * if not NULL) out of it: each goes one tier down (a job), its block back.
 * Worker thread, pt->lock not held.  Returns how many went.
 */
static uint32_t evict_tier(struct kvd_ptier *pt, unsigned int tier,
			   uint32_t n, struct pt_lease *only)
{
	struct pt_tier *t = &pt->tiers[tier];
	struct kvd_pool *p = &pt->d->pools[tier];
	struct pt_ent *e, *prev, *got[64];
	uint32_t k = 0, i, done = 0;

	while (done < n) {
		k = 0;
		pthread_mutex_lock(&pt->lock);
		for (e = t->tail; e && k < 64 && done + k < n; e = prev) {
			prev = e->lprev;
			if (e->busy || (only && e->lease != only))
				continue;
			unlink_ent(pt, e);
			got[k++] = e;
		}
		pthread_mutex_unlock(&pt->lock);
		if (!k)
			break;
		for (i = 0; i < k; i++) {
			struct pt_job *j = calloc(1, sizeof(*j));

			e = got[i];
			if (j) {
				j->tokens = malloc((size_t)e->tpb * 4);
				j->bytes = buf_new(pt);
			}
			if (j && j->tokens && j->bytes &&
			    !tier_read(p, &t->io, e->block, j->bytes)) {
				name_set(j->tenant, e->lease->tenant);
				memcpy(j->salt, e->salt, PFX_SALT_BYTES);
				j->key = e->key;
				j->parent = e->parent;
				j->model = e->model;
				j->tpb = e->tpb;
				memcpy(j->tokens, e->tokens,
				       (size_t)e->tpb * 4);
				j->tier = tier + 1;
				j->to_cluster = e->to_cluster;
			} else {
				job_free(j);
				j = NULL;
				atomic_fetch_add(&pt->dropped, 1);
			}
			pthread_mutex_lock(&pt->lock);
			if (j)
				j->gen = gen_of(pt, e->lease->tenant);
			drop_ent(pt, e);
			pthread_mutex_unlock(&pt->lock);
			if (j) {
				if (j->tier < pt->d->npools)
					enqueue(pt, j);
				else
					chain_end(pt, j);
			}
		}
		done += k;
	}
	return done;
}

/* Put a demoted block in the first tier from j->tier that takes it. */
static void place(struct kvd_ptier *pt, struct pt_job *j)
{
	struct kvd *d = pt->d;
	unsigned int tier;

	for (tier = j->tier; tier < d->npools; tier++) {
		struct pt_tier *t = &pt->tiers[tier];
		struct pt_lease *l;
		struct pt_ent *e;
		uint32_t block;
		int r, tries;
		bool full;

		pthread_mutex_lock(&pt->lock);
		if (gen_of(pt, j->tenant) != j->gen) {
			pthread_mutex_unlock(&pt->lock);
			job_free(j);	/* flushed meanwhile */
			return;
		}
		l = lease_get(pt, j->tenant, tier);
		if (l)
			l->busy++;
		full = t->n >= d->pools[tier].capacity / 2;
		pthread_mutex_unlock(&pt->lock);
		if (!l)
			continue;
		/* demoted blocks take at most half a tier: the rest stays
		 * for swaps (which do not wait for room) */
		if (full)
			evict_tier(pt, tier, 1, NULL);
		/* no room (the tenant's quota there, the pool): its least
		 * recently used entry goes one tier down first */
		for (tries = 0; tries < 2; tries++) {
			r = lease_grant(pt, l, &block);
			if (!r || !evict_tier(pt, tier, 1, r == -EDQUOT ? l :
					      NULL))
				break;
		}
		pthread_mutex_lock(&pt->lock);
		l->busy--;
		if (!r)
			l->held++;
		pthread_mutex_unlock(&pt->lock);
		if (r) {
			pthread_mutex_lock(&pt->lock);
			lease_maybe_close(pt, l);
			pthread_mutex_unlock(&pt->lock);
			continue;
		}
		e = calloc(1, sizeof(*e) + (size_t)j->tpb * 4);
		r = e ? tier_write(&d->pools[tier], &t->io, block, j->bytes) :
			-ENOMEM;
		pthread_mutex_lock(&pt->lock);
		if (r || gen_of(pt, j->tenant) != j->gen ||
		    find(pt, j->salt, &j->key, &j->model, &j->parent,
			 j->tokens, j->tpb)) {
			/* failed, flushed, or there already */
			lease_release(pt, l, block);
			l->held--;
			lease_maybe_close(pt, l);
			pthread_mutex_unlock(&pt->lock);
			free(e);
			if (r)
				continue;
			job_free(j);
			return;
		}
		e->key = j->key;
		e->parent = j->parent;
		e->model = j->model;
		memcpy(e->salt, j->salt, PFX_SALT_BYTES);
		e->lease = l;
		e->block = block;
		e->to_cluster = j->to_cluster;
		e->tpb = j->tpb;
		memcpy(e->tokens, j->tokens, (size_t)j->tpb * 4);
		sum_of(j->bytes, d->pools[tier].block_bytes, e->sum);
		insert(pt, e);
		pthread_mutex_unlock(&pt->lock);
		atomic_fetch_add(&t->in, 1);
		job_free(j);
		return;
	}
	chain_end(pt, j);
}

/* Reclaim targets posted to the daemon's leases: met from their LRU. */
static void answer_reclaim(struct kvd_ptier *pt)
{
	struct { struct pt_lease *l; uint32_t target; } want[64];
	struct pt_lease *l;
	unsigned int n = 0, i;

	pthread_mutex_lock(&pt->lock);
	for (l = pt->leases; l && n < 64; l = l->next)
		if (l->held) {
			l->busy++;	/* stays open while we look */
			want[n].l = l;
			want[n++].target = 0;
		}
	pthread_mutex_unlock(&pt->lock);
	for (i = 0; i < n; i++)
		want[i].target = lease_target(pt, want[i].l);
	for (i = 0; i < n; i++) {
		if (want[i].target)
			evict_tier(pt, want[i].l->tier, want[i].target,
				   want[i].l);
		pthread_mutex_lock(&pt->lock);
		want[i].l->busy--;
		lease_maybe_close(pt, want[i].l);
		pthread_mutex_unlock(&pt->lock);
	}
}

static void *worker(void *arg)
{
	struct kvd_ptier *pt = arg;
	struct kvd *d = pt->d;
	uint64_t next_poll = 0;
	unsigned int i;

	for (i = 1; i < d->npools; i++) {
		struct kvd_pool *p = &d->pools[i];

		if (p->ops->io_open && !p->ops->io_open(p, &pt->tiers[i].io))
			pt->tiers[i].io_open = true;
		else if (io_private(pt, &pt->tiers[i].io))
			kvd_log(KVD_WARN, "prefix tier %s: no I/O state",
				p->name);
	}
	while (!pt->stop) {
		struct pt_job *j = NULL;
		uint64_t now = kvd_now_ns();

		for (i = 1; i < d->npools; i++) {
			uint32_t s = atomic_exchange(&pt->tiers[i].short_by, 0);

			if (s)
				evict_tier(pt, i, s, NULL);
		}
		if (now >= next_poll) {
			answer_reclaim(pt);
			next_poll = now + PT_POLL_NS;
		}
		pthread_mutex_lock(&pt->qlock);
		if (!pt->q && !pt->stop) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&pt->qcond, &pt->qlock, &ts);
		}
		if (pt->q) {
			j = pt->q;
			pt->q = j->next;
			if (!pt->q)
				pt->qtail = NULL;
			pt->qbytes -= pt->slot;
		}
		pthread_mutex_unlock(&pt->qlock);
		if (j)
			place(pt, j);
	}
	for (i = 1; i < d->npools; i++) {
		struct kvd_pool *p = &d->pools[i];

		if (pt->tiers[i].io_open)
			p->ops->io_close(p, &pt->tiers[i].io);
		else
			free(pt->tiers[i].io.bounce);
	}
	return NULL;
}

void kvd_ptier_short(struct kvd_pool *p, uint32_t n)
{
	struct kvd_ptier *pt = p->d->ptier;

	if (!pt || !p->tier || p->tier >= KVD_MAX_TIERS)
		return;
	atomic_fetch_add(&pt->tiers[p->tier].short_by, n);
	pthread_mutex_lock(&pt->qlock);
	pthread_cond_signal(&pt->qcond);
	pthread_mutex_unlock(&pt->qlock);
}

/* ---- lookups (MATCH, the caller's thread) ---------------------------------------- */

static void fetch_free(struct kvd_ptier_fetch *f)
{
	uint32_t i;

	if (!f)
		return;
	for (i = 0; f->bufs && i < f->n; i++)
		free(f->bufs[i]);
	free(f->bufs);
	free(f->ents);
	free(f);
}

int kvd_ptier_fetch(struct kvd *d, const uint8_t *salt,
		    const struct pfx_key *model, const struct pfx_key *keys,
		    const struct pfx_key *parent0, const uint32_t *tokens,
		    uint32_t tpb, uint32_t n, struct kvd_ptier_fetch **out)
{
	struct kvd_ptier *pt = d->ptier;
	struct kvd_ptier_fetch *f;
	struct kvd_io io;
	uint32_t i, k = 0;
	bool bad = false;

	*out = NULL;
	if (!pt || !n)
		return 0;
	f = calloc(1, sizeof(*f));
	if (!f)
		return 0;
	f->ents = calloc(n, sizeof(*f->ents));
	f->bufs = calloc(n, sizeof(*f->bufs));
	if (!f->ents || !f->bufs || io_private(pt, &io)) {
		fetch_free(f);
		return 0;
	}
	f->n = n;
	pthread_mutex_lock(&pt->lock);
	for (k = 0; k < n; k++) {
		struct pt_ent *e = find(pt, salt, &keys[k], model,
					k ? &keys[k - 1] : parent0,
					tokens + (size_t)k * tpb, tpb);

		if (!e)
			break;
		e->busy++;
		f->ents[k] = e;
	}
	pthread_mutex_unlock(&pt->lock);
	for (i = 0; i < k; i++) {
		struct pt_ent *e = f->ents[i];
		struct kvd_pool *p = &d->pools[e->lease->tier];
		uint64_t sum[2];

		f->bufs[i] = buf_new(pt);
		if (!f->bufs[i] || tier_read(p, &io, e->block, f->bufs[i]))
			break;
		sum_of(f->bufs[i], p->block_bytes, sum);
		if (sum[0] != e->sum[0] || sum[1] != e->sum[1]) {
			kvd_log(KVD_WARN, "prefix tier %s: block %u changed "
				"under the cache: a miss", p->name, e->block);
			atomic_fetch_add(&pt->corrupt, 1);
			bad = true;
			break;
		}
	}
	f->got = i;
	f->bytes = d->top->block_bytes;
	free(io.bounce);
	/* the ones not read are not needed */
	pthread_mutex_lock(&pt->lock);
	for (; i < k; i++) {
		struct pt_ent *e = f->ents[i];

		f->ents[i] = NULL;
		if (bad && i == f->got && !e->dead) {
			unlink_ent(pt, e);	/* never found again */
			e->dead = true;
		}
		if (!--e->busy && e->dead)
			drop_ent(pt, e);
	}
	pthread_mutex_unlock(&pt->lock);
	if (!f->got) {
		fetch_free(f);
		return 0;
	}
	*out = f;
	return (int)f->got;
}

const void *kvd_ptier_payload(const struct kvd_ptier_fetch *f, uint32_t i,
			      uint64_t *bytes)
{
	if (i >= f->got)
		return NULL;
	*bytes = f->bytes;
	return f->bufs[i];
}

void kvd_ptier_fetch_end(struct kvd *d, struct kvd_ptier_fetch *f,
			 uint32_t used)
{
	struct kvd_ptier *pt = d->ptier;
	uint32_t i;

	if (!f)
		return;
	pthread_mutex_lock(&pt->lock);
	for (i = 0; i < f->got; i++) {
		struct pt_ent *e = f->ents[i];

		e->busy--;
		if (i < used && !e->dead) {
			/* promoted: it leaves its tier */
			atomic_fetch_add(&pt->tiers[e->lease->tier].out, 1);
			unlink_ent(pt, e);
			e->dead = true;
		}
		if (!e->busy && e->dead)
			drop_ent(pt, e);
	}
	pthread_mutex_unlock(&pt->lock);
	fetch_free(f);
}

/* ---- flush ---------------------------------------------------------------------- */

void kvd_ptier_flush(struct kvd *d, const char *tenant)
{
	struct kvd_ptier *pt = d->ptier;
	struct pt_job **jp, *j;
	struct pt_gen *g;
	unsigned int tier;

	if (!pt)
		return;
	pthread_mutex_lock(&pt->lock);
	for (g = pt->gens; g; g = g->next)
		if (!strncmp(g->tenant, tenant, KVPOOL_NAME_LEN))
			break;
	if (!g && (g = calloc(1, sizeof(*g)))) {
		name_set(g->tenant, tenant);
		g->next = pt->gens;
		pt->gens = g;
	}
	if (g)
		g->gen++;	/* demotions in flight are dropped */
	for (tier = 1; tier < d->npools; tier++) {
		struct pt_ent *e, *prev;

		for (e = pt->tiers[tier].tail; e; e = prev) {
			prev = e->lprev;
			if (strncmp(e->lease->tenant, tenant, KVPOOL_NAME_LEN))
				continue;
			unlink_ent(pt, e);
			if (e->busy)
				e->dead = true;
			else
				drop_ent(pt, e);
		}
	}
	pthread_mutex_unlock(&pt->lock);
	pthread_mutex_lock(&pt->qlock);
	for (jp = &pt->q; (j = *jp);) {
		if (!strncmp(j->tenant, tenant, KVPOOL_NAME_LEN)) {
			*jp = j->next;
			pt->qbytes -= pt->slot;
			job_free(j);
		} else {
			jp = &j->next;
		}
	}
	pt->qtail = NULL;
	for (j = pt->q; j; j = j->next)
		pt->qtail = j;
	pthread_mutex_unlock(&pt->qlock);
}

void kvd_ptier_counts(struct kvd_pool *p, uint64_t *held, uint64_t *in,
		      uint64_t *out)
{
	struct kvd_ptier *pt = p->d->ptier;

	*held = *in = *out = 0;
	if (!pt || !p->tier || p->tier >= KVD_MAX_TIERS)
		return;
	pthread_mutex_lock(&pt->lock);
	*held = pt->tiers[p->tier].n;
	pthread_mutex_unlock(&pt->lock);
	*in = atomic_load(&pt->tiers[p->tier].in);
	*out = atomic_load(&pt->tiers[p->tier].out);
}

/* ---- life ------------------------------------------------------------------------- */

int kvd_ptier_init(struct kvd *d)
{
	struct kvd_ptier *pt;

	if (d->npools < 2 || !d->prefix || !d->o.prefix_demote)
		return 0;
	pt = calloc(1, sizeof(*pt));
	if (!pt)
		return -ENOMEM;
	pt->bk = calloc(PT_BUCKETS, sizeof(*pt->bk));
	if (!pt->bk) {
		free(pt);
		return -ENOMEM;
	}
	pt->d = d;
	pt->slot = (d->top->block_bytes + PT_ALIGN - 1) & ~(uint64_t)(PT_ALIGN - 1);
	pthread_mutex_init(&pt->lock, NULL);
	pthread_mutex_init(&pt->qlock, NULL);
	pthread_cond_init(&pt->qcond, NULL);
	d->ptier = pt;
	return 0;
}

int kvd_ptier_start(struct kvd *d)
{
	struct kvd_ptier *pt = d->ptier;
	int r;

	if (!pt || pt->th_on)
		return 0;
	r = pthread_create(&pt->th, NULL, worker, pt);
	if (r)
		return -r;
	pt->th_on = true;
	return 0;
}

void kvd_ptier_stop(struct kvd *d)
{
	struct kvd_ptier *pt = d->ptier;
	struct pt_gen *g, *gn;
	unsigned int tier;

	if (!pt)
		return;
	pthread_mutex_lock(&pt->qlock);
	pt->stop = 1;
	pthread_cond_broadcast(&pt->qcond);
	pthread_mutex_unlock(&pt->qlock);
	if (pt->th_on)
		pthread_join(pt->th, NULL);
	while (pt->q) {
		struct pt_job *j = pt->q;

		pt->q = j->next;
		job_free(j);
	}
	pthread_mutex_lock(&pt->lock);
	for (tier = 1; tier < d->npools; tier++)
		while (pt->tiers[tier].tail) {
			struct pt_ent *e = pt->tiers[tier].tail;

			unlink_ent(pt, e);
			drop_ent(pt, e);
		}
	pthread_mutex_unlock(&pt->lock);
	for (g = pt->gens; g; g = gn) {
		gn = g->next;
		free(g);
	}
	d->ptier = NULL;
	free(pt->bk);
	free(pt);
}
