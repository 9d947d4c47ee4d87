// SPDX-License-Identifier: MIT
/*
 * swap.c - the tier ops of the data plane: joining a lower tier, leases
 * there (in-process ledger), swap jobs and their workers, block checksums.
 *
 * Mechanism only: a swap job copies whole blocks from blocks the client
 * holds in one pool to blocks it holds in another.  It changes no lease:
 * the library leases below, swaps, then releases above (and back), so
 * each pool charges the tenant and a crash at any point leaks nothing.
 * Which sequence to swap, and when, is the library's business.
 *
 * A job is checked (every block the caller's in its pool), both leases
 * are pinned (a release waits, a close keeps the blocks until the copy is
 * done), and it is queued to the swap worker of its lower pool: one
 * thread per lower tier, with its own I/O state for every pool (an
 * io_uring ring for a file, a CUDA stream for the GPU).  The worker holds
 * both pools' backing locks for reading while it copies a batch of blocks
 * (a due shrink waits for one batch at most), then unpins and posts the
 * completion to the client's connection, whose thread sends it as a
 * KVP_EV_SWAP_DONE record: the worker never writes to the socket, so the
 * SWAP reply always comes before its completion.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core.h"
#include "ledger.h"
#include "conn.h"
#include "inproc.h"
#include "swap.h"
#include "scrub.h"
#include "prefix_tier.h"

/* Results kept for SWAP_WAIT. */
#define KEEP_DONE	(4 * KVP_SWAP_INFLIGHT)
/* Blocks per copy batch (host pointer arrays, staging). */
#define BATCH		64
#define STAGING_BYTES	(16ULL << 20)

struct kvd_ctier {
	struct kvd *d;
	_Atomic int refs;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a job of this client ended */
	int evfd;			/* completions to send */
	bool dead;			/* the connection is gone */
	uint64_t lease_id[KVD_MAX_TIERS];	/* 0: not joined */
	struct kvpool_lease *lease[KVD_MAX_TIERS];	/* in-process */
	uint64_t next_ticket;
	uint32_t inflight;		/* submitted, completion not sent */
	struct kvp_swap_done done[KEEP_DONE];	/* by ticket % KEEP_DONE */
	struct kvp_swap_done sendq[KVP_SWAP_INFLIGHT];
	uint32_t nsend;
	struct kvp_seq_report seqs;
	uint64_t swaps, bytes_out, bytes_in;
	char tenant[KVP_NAME_LEN];
};

struct kvd_swap_job {
	struct kvd_swap_job *next;
	struct kvd_ctier *ct;
	struct kvd_pool *src, *dst;
	uint64_t src_lease, dst_lease;
	uint32_t n;
	uint32_t *sb, *db;
	uint64_t tag;			/* the client's tenant (scrub.h) */
	uint64_t ticket;
	uint64_t t_submit;
};

struct kvd_swapper {
	struct kvd_pool *pool;
	pthread_t th;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvd_swap_job *head, *tail;
	bool stop;
	struct kvd_io io[KVD_MAX_TIERS];
	uint8_t *staging;		/* BATCH blocks at most */
	uint32_t staging_blocks;
	bool staging_backend;		/* from d->be->host_alloc */
};

/* ---- client tier state ----------------------------------------------- */

struct kvd_ctier *kvd_ctier_new(struct kvd *d, uint64_t top_lease_id,
				struct kvpool_lease *top_lease,
				const char *tenant)
{
	struct kvd_ctier *ct = calloc(1, sizeof(*ct));
	pthread_condattr_t ca;

	if (!ct)
		return NULL;
	ct->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ct->evfd < 0) {
		free(ct);
		return NULL;
	}
	ct->d = d;
	atomic_init(&ct->refs, 1);
	pthread_mutex_init(&ct->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ct->cond, &ca);
	pthread_condattr_destroy(&ca);
	ct->lease_id[0] = top_lease_id;
	ct->lease[0] = top_lease;
	ct->next_ticket = 1;
	if (tenant)
		snprintf(ct->tenant, sizeof(ct->tenant), "%s", tenant);
	return ct;
}

static void ct_put(struct kvd_ctier *ct)
{
	if (atomic_fetch_sub(&ct->refs, 1) != 1)
		return;
	close(ct->evfd);
	pthread_mutex_destroy(&ct->lock);
	pthread_cond_destroy(&ct->cond);
	free(ct);
}

/* The connection is gone: close its leases in the lower pools (a pinned
 * lease keeps its blocks until its job is done) and forget it. */
void kvd_ctier_release(struct kvd_ctier *ct)
{
	struct kvd *d;
	unsigned int i;

	if (!ct)
		return;
	d = ct->d;
	pthread_mutex_lock(&ct->lock);
	ct->dead = true;
	pthread_mutex_unlock(&ct->lock);
	for (i = 1; i < d->npools; i++)
		if (ct->lease[i]) {
			kvd_ip_lease_close(&d->pools[i], ct->lease[i]);
			ct->lease[i] = NULL;
		}
	ct_put(ct);
}

int kvd_ctier_fd(const struct kvd_ctier *ct)
{
	return ct ? ct->evfd : -1;
}

void kvd_ctier_set_tenant(struct kvd_ctier *ct, const char *tenant)
{
	pthread_mutex_lock(&ct->lock);
	snprintf(ct->tenant, sizeof(ct->tenant), "%s", tenant);
	pthread_mutex_unlock(&ct->lock);
}

/* Send the completion records that are ready (client thread). */
void kvd_ctier_flush(struct kvd_client *c, struct kvd_ctier *ct)
{
	struct kvp_swap_done q[KVP_SWAP_INFLIGHT];
	struct {
		struct kvp_reply r;
		struct kvp_swap_done ev;
	} m;
	uint64_t cnt;
	uint32_t n, i;

	if (!ct)
		return;
	if (read(ct->evfd, &cnt, sizeof(cnt)) < 0) {
		/* nothing signalled: flush anyway */
	}
	pthread_mutex_lock(&ct->lock);
	n = ct->nsend;
	memcpy(q, ct->sendq, n * sizeof(q[0]));
	ct->nsend = 0;
	ct->inflight -= n;
	pthread_mutex_unlock(&ct->lock);
	for (i = 0; i < n; i++) {
		memset(&m, 0, sizeof(m));
		m.r.hdr.magic = KVP_MAGIC;
		m.r.hdr.op = KVP_EV_SWAP_DONE;
		m.r.hdr.len = sizeof(m);
		m.r.epoch = ct->d->epoch;
		m.ev = q[i];
		kvd_client_send(c, &m, sizeof(m));
	}
}

/* ---- the copy engine --------------------------------------------------- */

static bool host_pool(struct kvd_pool *p)
{
	return p->ops->host_ptr && p->ops->host_ptr(p, 0) != NULL;
}

static int copy_batch(struct kvd_swapper *sw, struct kvd_pool *src,
		      struct kvd_pool *dst, const uint32_t *sb,
		      const uint32_t *db, uint32_t k)
{
	void *sp[BATCH], *dp[BATCH];
	bool sh = host_pool(src), dh = host_pool(dst);
	uint64_t bb = src->block_bytes;
	uint32_t i;
	int r;

	if (sh)
		for (i = 0; i < k; i++)
			sp[i] = src->ops->host_ptr(src, sb[i]);
	if (dh)
		for (i = 0; i < k; i++)
			dp[i] = dst->ops->host_ptr(dst, db[i]);
	if (sh && dh) {
		for (i = 0; i < k; i++)
			memcpy(dp[i], sp[i], bb);
		return 0;
	}
	if (dh)
		return src->ops->read(src, &sw->io[src->tier], sb, dp, k);
	if (sh)
		return dst->ops->write(dst, &sw->io[dst->tier], db,
				       (const void *const *)sp, k);
	/* neither is host memory: through the staging buffer */
	if (!sw->staging)
		return -ENOMEM;
	for (i = 0; i < k; i++)
		sp[i] = sw->staging + (uint64_t)i * bb;
	r = src->ops->read(src, &sw->io[src->tier], sb, sp, k);
	if (!r)
		r = dst->ops->write(dst, &sw->io[dst->tier], db,
				    (const void *const *)sp, k);
	return r;
}

static uint32_t batch_of(struct kvd_swapper *sw, struct kvd_pool *src,
			 struct kvd_pool *dst)
{
	if (!host_pool(src) && !host_pool(dst))
		return sw->staging_blocks ? sw->staging_blocks : 1;
	return BATCH;
}

static int check_mapped(struct kvd_pool *p, const uint32_t *b, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (b[i] >= p->mapped)
			return -EPERM;
	return 0;
}

/* Both pools' backing for reading, lower tier index first. */
static void backing_lock(struct kvd_pool *a, struct kvd_pool *b)
{
	if (a->tier > b->tier) {
		struct kvd_pool *t = a;

		a = b;
		b = t;
	}
	kvd_backing_rdlock(a);
	kvd_backing_rdlock(b);
}

static void backing_unlock(struct kvd_pool *a, struct kvd_pool *b)
{
	kvd_backing_unlock(a);
	kvd_backing_unlock(b);
}

/*
 * The memory is held one batch at a time: a job of many blocks lets a
 * due unmap of either pool in between batches, so that the owner waits
 * for one batch at most.  The job's blocks are pinned in both leases and
 * stay below what the ledgers have backed.
 */
static int run_copy(struct kvd_swapper *sw, struct kvd_swap_job *j,
		    uint64_t *copy_ns)
{
	uint32_t done = 0, k, bmax = batch_of(sw, j->src, j->dst);
	uint64_t t0;
	int r = 0;

	if (bmax > BATCH)
		bmax = BATCH;
	*copy_ns = 0;
	while (!r && done < j->n) {
		k = j->n - done < bmax ? j->n - done : bmax;
		backing_lock(j->src, j->dst);
		t0 = kvd_now_ns();
		r = check_mapped(j->src, j->sb + done, k);
		if (!r)
			r = check_mapped(j->dst, j->db + done, k);
		/* what another tenant left in a source block goes as zeros;
		 * the destinations, overwritten whole, become the client's */
		if (!r)
			r = kvd_scrub_claim(j->src, &sw->io[j->src->tier],
					    j->tag, j->sb + done, k, NULL, NULL);
		if (!r) {
			r = copy_batch(sw, j->src, j->dst, j->sb + done,
				       j->db + done, k);
			kvd_scrub_filled(j->dst, j->tag, j->db + done, k, !r);
		}
		*copy_ns += kvd_now_ns() - t0;
		backing_unlock(j->src, j->dst);
		done += k;
	}
	return r;
}

static uint32_t lat_bucket(uint64_t us)
{
	uint32_t b = 0;

	while (us > 1 && b < KVP_LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

static void count(struct kvd_pool *p, const struct kvd_swap_job *j,
		  int status, uint64_t copy_ns, uint64_t ns)
{
	uint64_t bytes = (uint64_t)j->n * p->block_bytes;

	atomic_fetch_add(&p->st.swaps, 1);
	if (status) {
		atomic_fetch_add(&p->st.errors, 1);
	} else if (p == j->src) {
		atomic_fetch_add(&p->st.blocks_out, j->n);
		atomic_fetch_add(&p->st.bytes_out, bytes);
	} else {
		atomic_fetch_add(&p->st.blocks_in, j->n);
		atomic_fetch_add(&p->st.bytes_in, bytes);
	}
	atomic_fetch_add(p == j->src ? &p->st.copy_out_ns :
			 &p->st.copy_in_ns, copy_ns);
	atomic_fetch_add(&p->st.lat_us[lat_bucket(ns / 1000)], 1);
}

/* The oldest queued job, taken off the queue, or NULL (sw->lock held). */
static struct kvd_swap_job *job_pop(struct kvd_swapper *sw)
{
	struct kvd_swap_job *j = sw->head;

	if (j) {
		sw->head = j->next;
		if (!sw->head)
			sw->tail = NULL;
	}
	return j;
}

static void job_end(struct kvd_swap_job *j, int status, uint64_t copy_ns)
{
	struct kvd_ctier *ct = j->ct;
	uint64_t ns = kvd_now_ns() - j->t_submit, one = 1;
	struct kvp_swap_done dn;

	kvd_lease_pin_drop(j->src, j->src_lease);
	kvd_lease_pin_drop(j->dst, j->dst_lease);
	count(j->src, j, status, copy_ns, ns);
	count(j->dst, j, status, copy_ns, ns);
	memset(&dn, 0, sizeof(dn));
	dn.ticket = j->ticket;
	dn.status = status;
	dn.blocks = j->n;
	dn.bytes = (uint64_t)j->n * j->src->block_bytes;
	dn.ns = ns;
	dn.copy_ns = copy_ns;
	pthread_mutex_lock(&ct->lock);
	ct->done[j->ticket % KEEP_DONE] = dn;
	if (!status) {
		if (j->dst->tier > j->src->tier)
			ct->bytes_out += dn.bytes;
		else
			ct->bytes_in += dn.bytes;
	}
	if (!ct->dead) {
		ct->sendq[ct->nsend++] = dn;
		if (write(ct->evfd, &one, sizeof(one)) < 0) {
			/* a wake is pending */
		}
	} else {
		ct->inflight--;
	}
	pthread_cond_broadcast(&ct->cond);
	pthread_mutex_unlock(&ct->lock);
	if (status)
		kvd_log(KVD_INFO, "swap %s -> %s of %u blocks: %s",
			j->src->name, j->dst->name, j->n, strerror(-status));
	ct_put(ct);
	free(j->sb);
	free(j->db);
	free(j);
}

#ifdef KVD_FUZZ_HOLD
/*
 * The fuzz build (tests/fuzz/fuzz.mk) holds the workers: they take no
 * job, and the harness runs queued jobs in its own thread when it
 * decides (kvd_swap_fuzz_run), so that a job's race with a publish, an
 * evict, a release or a close is played the same way every time.
 */
#define FUZZ_HELD	true

unsigned int kvd_swap_fuzz_run(struct kvd *d, unsigned int tier,
			       unsigned int max)
{
	unsigned int i, n = 0;

	for (i = 1; i < d->npools; i++) {
		struct kvd_swapper *sw = d->pools[i].swapper;

		while (sw && (!tier || tier == i) && (!max || n < max)) {
			struct kvd_swap_job *j;
			uint64_t copy_ns = 0;
			int r;

			pthread_mutex_lock(&sw->lock);
			j = job_pop(sw);
			pthread_mutex_unlock(&sw->lock);
			if (!j)
				break;
			r = run_copy(sw, j, &copy_ns);
			job_end(j, r, copy_ns);
			n++;
		}
	}
	return n;
}

void kvd_swap_fuzz_each(struct kvd *d, void (*fn)(void *arg,
			const struct kvd_swap_fuzz_job *fj), void *arg)
{
	unsigned int i;

	for (i = 1; i < d->npools; i++) {
		struct kvd_swapper *sw = d->pools[i].swapper;
		struct kvd_swap_job *j;

		if (!sw)
			continue;
		pthread_mutex_lock(&sw->lock);
		for (j = sw->head; j; j = j->next) {
			struct kvd_swap_fuzz_job fj = {
				.src = j->src, .dst = j->dst,
				.src_lease = j->src_lease,
				.dst_lease = j->dst_lease,
				.sb = j->sb, .db = j->db, .n = j->n,
			};

			fn(arg, &fj);
		}
		pthread_mutex_unlock(&sw->lock);
	}
}
#else
#define FUZZ_HELD	false
#endif

static void *swapper_main(void *arg)
{
	struct kvd_swapper *sw = arg;
	struct kvd *d = sw->pool->d;

	for (;;) {
		struct kvd_swap_job *j;
		uint64_t copy_ns = 0;
		int r;

		pthread_mutex_lock(&sw->lock);
		while ((!sw->head || FUZZ_HELD) && !sw->stop)
			pthread_cond_wait(&sw->cond, &sw->lock);
		j = job_pop(sw);
		pthread_mutex_unlock(&sw->lock);
		if (!j)
			break;
		r = d->stop ? -ECANCELED : run_copy(sw, j, &copy_ns);
		job_end(j, r, copy_ns);
	}
	return NULL;
}

static void swapper_free(struct kvd *d, struct kvd_swapper *sw)
{
	unsigned int i;

	for (i = 0; i < d->npools; i++)
		if (d->pools[i].ops->io_close)
			d->pools[i].ops->io_close(&d->pools[i], &sw->io[i]);
	if (sw->staging) {
		if (sw->staging_backend)
			d->be->host_free(d, sw->staging);
		else
			free(sw->staging);
	}
	free(sw);
}

static int swapper_new(struct kvd_pool *p)
{
	struct kvd *d = p->d;
	struct kvd_swapper *sw = calloc(1, sizeof(*sw));
	uint64_t bytes;
	unsigned int i;
	int r;

	if (!sw)
		return -ENOMEM;
	sw->pool = p;
	pthread_mutex_init(&sw->lock, NULL);
	pthread_cond_init(&sw->cond, NULL);
	for (i = 0; i < d->npools; i++) {
		struct kvd_pool *q = &d->pools[i];

		if (!q->ops->io_open)
			continue;
		r = q->ops->io_open(q, &sw->io[i]);
		if (r) {
			kvd_log(KVD_ERR, "%s: swap I/O set-up for %s: %s",
				p->name, q->name, strerror(-r));
			swapper_free(d, sw);
			return r;
		}
	}
	/* staging between two pools neither of which is host memory */
	sw->staging_blocks = (uint32_t)(STAGING_BYTES / p->block_bytes);
	if (sw->staging_blocks > BATCH)
		sw->staging_blocks = BATCH;
	if (!sw->staging_blocks)
		sw->staging_blocks = 1;
	bytes = (uint64_t)sw->staging_blocks * p->block_bytes;
	bytes = (bytes + 4095) & ~4095ULL;
	if (host_pool(d->top) || host_pool(p)) {
		sw->staging_blocks = 0;	/* never needed */
	} else if (d->be->host_alloc &&
		   d->be->host_alloc(d, bytes, (void **)&sw->staging) == 0) {
		sw->staging_backend = true;
	} else {
		sw->staging = aligned_alloc(4096, bytes);
		if (!sw->staging) {
			swapper_free(d, sw);
			return -ENOMEM;
		}
	}
	r = pthread_create(&sw->th, NULL, swapper_main, sw);
	if (r) {
		swapper_free(d, sw);
		return -r;
	}
	sw->started = true;
	p->swapper = sw;
	return 0;
}

int kvd_swap_start(struct kvd *d)
{
	unsigned int i;
	int r;

	for (i = 1; i < d->npools; i++) {
		r = swapper_new(&d->pools[i]);
		if (r)
			return r;
	}
	return 0;
}

/* Stop the workers: jobs still queued end with -ECANCELED. */
void kvd_swap_stop(struct kvd *d)
{
	unsigned int i;

	for (i = 1; i < d->npools; i++) {
		struct kvd_swapper *sw = d->pools[i].swapper;

		if (!sw)
			continue;
		pthread_mutex_lock(&sw->lock);
		sw->stop = true;
		pthread_cond_broadcast(&sw->cond);
		pthread_mutex_unlock(&sw->lock);
		if (sw->started)
			pthread_join(sw->th, NULL);
		d->pools[i].swapper = NULL;
		swapper_free(d, sw);
	}
}

/* ---- ops -------------------------------------------------------------- */

static struct kvd_pool *tier_of(struct kvd *d, uint32_t tier)
{
	return tier < d->npools ? &d->pools[tier] : NULL;
}

static int op_tier_attach(struct kvd_client *c, struct kvd_ctier *ct,
			  const struct kvp_tier_attach *a,
			  struct kvp_tier_attach_reply *rep)
{
	struct kvd *d = ct->d;
	struct kvd_pool *p;
	char tenant[KVP_NAME_LEN];
	int fd = -1, r = 0;

	if (a->reserved[0] || a->reserved[1] ||
	    (a->flags & ~KVP_TIER_LEDGER_FD))
		return -EINVAL;
	if (a->flags & KVP_TIER_LEDGER_FD)
		fd = kvd_client_take_fd(c);
	p = tier_of(d, a->tier);
	if (!p) {
		r = -ENOENT;
		goto out;
	}
	if (!a->tier) {
		r = -EINVAL;	/* the top pool is HELLO's */
		goto out;
	}
	if (ct->lease_id[a->tier]) {
		r = -EALREADY;
		goto out;
	}
	if (d->mode == KVP_MODE_MODULE) {
		struct kvpool_status st;

		if (fd < 0) {
			r = -EBADF;
			goto out;
		}
		/* like HELLO: only /dev/kvpool's word is taken */
		r = kvd_ledger_fd_check(p, fd);
		if (r)
			goto out;
		memset(&st, 0, sizeof(st));
		if (ioctl(fd, KVPOOL_IOC_STATUS, &st)) {
			r = errno == ENOTTY ? -EBADF : -errno;
			goto out;
		}
		/* like HELLO: close our copy at once */
		close(fd);
		fd = -1;
		if (!st.lease_id || strncmp(st.pool, p->name, KVPOOL_NAME_LEN)) {
			r = -ENOENT;
			goto out;
		}
		ct->lease_id[a->tier] = st.lease_id;
	} else {
		struct kvpool_cred cred;

		if (fd >= 0) {
			r = -EINVAL;
			goto out;
		}
		kvd_client_cred(c, &cred);
		memcpy(tenant, a->tenant, sizeof(tenant));
		tenant[sizeof(tenant) - 1] = 0;
		r = kvd_ip_lease_open(p, &cred, NULL, tenant,
				      &ct->lease[a->tier]);
		if (r)
			goto out;
		ct->lease_id[a->tier] = ct->lease[a->tier]->id;
	}
	memset(rep, 0, sizeof(*rep));
	rep->lease_id = ct->lease_id[a->tier];
	rep->block_bytes = p->block_bytes;
	rep->capacity = p->capacity;
	rep->chunk_blocks = p->chunk_blocks;
	memcpy(rep->pool, p->name, KVPOOL_NAME_LEN);
out:
	if (fd >= 0)
		close(fd);
	return r;
}

static int joined(struct kvd_ctier *ct, uint32_t tier, struct kvd_pool **p)
{
	*p = tier_of(ct->d, tier);
	if (!*p)
		return -ENOENT;
	return ct->lease_id[tier] ? 0 : -EUNATCH;
}

static int op_tier_lease(struct kvd_client *c, struct kvd_ctier *ct,
			 const struct kvp_tier_lease *l, uint32_t *blocks)
{
	struct kvd_pool *p;
	int r;

	if (l->pad || l->reserved)
		return -EINVAL;
	if (ct->d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;
	r = joined(ct, l->tier, &p);
	if (r)
		return r;
	if (!l->count || l->count > KVP_IO_MAX_BLOCKS ||
	    (l->flags & ~KVPOOL_LEASE_FLAGS))
		return -EINVAL;
	return kvd_ip_grant(p, ct->lease[l->tier], l->count, l->flags,
			    l->timeout_ns, blocks, kvd_client_sock(c));
}

static int op_tier_release(struct kvd_ctier *ct, const void *body,
			   size_t blen)
{
	const struct kvp_tier_release *rl = body;
	struct kvd_pool *p;
	int r;

	if (blen < sizeof(*rl))
		return -EBADMSG;
	if (rl->count > KVP_IO_MAX_BLOCKS ||
	    blen != sizeof(*rl) + (size_t)rl->count * 4)
		return -EBADMSG;
	if (ct->d->mode != KVP_MODE_INPROC)
		return -EOPNOTSUPP;
	if (rl->pad || (rl->flags & ~KVPOOL_RELEASE_FLAGS))
		return -EINVAL;
	if ((rl->flags & KVPOOL_RELEASE_ALL) ? rl->count != 0 :
	    rl->count == 0)
		return -EINVAL;
	r = joined(ct, rl->tier, &p);
	if (r)
		return r;
	return kvd_ip_release(p, ct->lease[rl->tier],
			      (const uint32_t *)(rl + 1), rl->count, rl->flags);
}

static int op_tier_status(struct kvd_client *c, struct kvd_ctier *ct,
			  const struct kvp_tier_sel *q,
			  struct kvp_status_reply *rep)
{
	struct kvd *d = ct->d;
	struct kvd_pool *p;
	int r;

	if (q->pad)
		return -EINVAL;
	r = joined(ct, q->tier, &p);
	if (r)
		return r;
	memset(rep, 0, sizeof(*rep));
	if (d->mode == KVP_MODE_INPROC)
		kvd_ip_status(p, ct->lease[q->tier], &rep->ledger);
	else if (ioctl(p->owner_fd, KVPOOL_IOC_STATUS, &rep->ledger))
		return -errno;
	rep->ledger.epoch = d->epoch;
	rep->ledger.lease_id = ct->lease_id[q->tier];
	rep->mode = d->mode;
	rep->chunk_blocks = p->chunk_blocks;
	strncpy(rep->backend, p->tier ? p->ops->name : d->be->name,
		sizeof(rep->backend) - 1);
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* A block named twice among the destinations: -EINVAL. */
static int unique(const uint32_t *b, uint32_t n)
{
	uint32_t *s = malloc(n * sizeof(*s)), i;
	int r = 0;

	if (!s)
		return -ENOMEM;
	memcpy(s, b, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_u32);
	for (i = 1; i < n && !r; i++)
		if (s[i] == s[i - 1])
			r = -EINVAL;
	free(s);
	return r;
}

static int below(const struct kvd_pool *p, const uint32_t *b, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (b[i] >= p->capacity)
			return -EPERM;
	return 0;
}

static int wait_ticket(struct kvd_ctier *ct, uint64_t ticket,
		       uint64_t timeout_ns, struct kvp_swap_done *out)
{
	uint64_t deadline = timeout_ns ? kvd_now_ns() + timeout_ns : 0;
	int r = 0;

	pthread_mutex_lock(&ct->lock);
	for (;;) {
		const struct kvp_swap_done *dn = &ct->done[ticket % KEEP_DONE];
		struct timespec ts;
		uint64_t now, until;

		if (dn->ticket == ticket) {
			*out = *dn;
			break;
		}
		if (dn->ticket > ticket) {
			r = -ENOENT;	/* forgotten */
			break;
		}
		now = kvd_now_ns();
		if (deadline && now >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		if (ct->d->stop) {
			r = -ECANCELED;
			break;
		}
		until = now + 200000000ULL;
		if (deadline && deadline < until)
			until = deadline;
		ts.tv_sec = (time_t)(until / 1000000000ULL);
		ts.tv_nsec = (long)(until % 1000000000ULL);
		pthread_cond_timedwait(&ct->cond, &ct->lock, &ts);
	}
	pthread_mutex_unlock(&ct->lock);
	return r;
}

static int op_swap(struct kvd_client *c, struct kvd_ctier *ct,
		   const struct kvp_swap *q, struct kvp_swap_reply *rep)
{
	struct kvd *d = ct->d;
	struct kvd_pool *src, *dst;
	struct kvd_swap_job *j;
	struct kvd_swapper *sw;
	struct kvp_swap_done dn;
	uint32_t *sb = NULL, *db = NULL;
	uint64_t ticket;
	int r;

	if (q->reserved[0] || q->reserved[1] || (q->flags & ~KVP_SWAP_FLAGS))
		return -EINVAL;
	if (!tier_of(d, q->src_tier) || !tier_of(d, q->dst_tier))
		return -ENOENT;
	if (q->src_tier == q->dst_tier || !q->n || q->n > KVP_IO_MAX_BLOCKS)
		return -EINVAL;
	r = joined(ct, q->src_tier, &src);
	if (!r)
		r = joined(ct, q->dst_tier, &dst);
	if (r)
		return r;
	r = kvd_client_region_u32(c, q->off_src, q->n, &sb);
	if (!r)
		r = kvd_client_region_u32(c, q->off_dst, q->n, &db);
	if (!r)
		r = unique(db, q->n);
	if (!r)
		r = below(src, sb, q->n);
	if (!r)
		r = below(dst, db, q->n);
	if (r)
		goto err;
	/* only this connection's thread submits: check, then take */
	pthread_mutex_lock(&ct->lock);
	r = ct->inflight >= KVP_SWAP_INFLIGHT ? -EBUSY : 0;
	pthread_mutex_unlock(&ct->lock);
	if (r)
		goto err;
	/* every block the caller's, pinned until the copy is done */
	r = kvd_lease_pin(src, ct->lease_id[q->src_tier], sb, q->n);
	if (r) {
		r = -EPERM;
		goto err;
	}
	r = kvd_lease_pin(dst, ct->lease_id[q->dst_tier], db, q->n);
	if (r) {
		kvd_lease_pin_drop(src, ct->lease_id[q->src_tier]);
		r = -EPERM;
		goto err;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		kvd_lease_pin_drop(src, ct->lease_id[q->src_tier]);
		kvd_lease_pin_drop(dst, ct->lease_id[q->dst_tier]);
		r = -ENOMEM;
		goto err;
	}
	pthread_mutex_lock(&ct->lock);
	ct->inflight++;
	ticket = ct->next_ticket++;
	ct->swaps++;
	pthread_mutex_unlock(&ct->lock);
	j->ct = ct;
	atomic_fetch_add(&ct->refs, 1);
	j->src = src;
	j->dst = dst;
	j->src_lease = ct->lease_id[q->src_tier];
	j->dst_lease = ct->lease_id[q->dst_tier];
	j->n = q->n;
	j->sb = sb;
	j->db = db;
	j->tag = kvd_client_scrub_tag(c);
	j->ticket = ticket;
	j->t_submit = kvd_now_ns();
	sw = (src->tier > dst->tier ? src : dst)->swapper;
	pthread_mutex_lock(&sw->lock);
	if (sw->tail)
		sw->tail->next = j;
	else
		sw->head = j;
	sw->tail = j;
	pthread_cond_signal(&sw->cond);
	pthread_mutex_unlock(&sw->lock);
	memset(rep, 0, sizeof(*rep));
	rep->ticket = ticket;
	if (!(q->flags & KVP_SWAP_SYNC))
		return 0;
#ifdef KVD_FUZZ_HOLD
	kvd_swap_fuzz_run(d, 0, 0);	/* held workers: the jobs run here */
#endif
	r = wait_ticket(ct, ticket, 0, &dn);
	return r ? r : dn.status;
err:
	free(sb);
	free(db);
	return r;
}

static int op_swap_wait(struct kvd_client *c, struct kvd_ctier *ct,
			const struct kvp_swap_wait *q,
			struct kvp_swap_done *out)
{
	int r;

	pthread_mutex_lock(&ct->lock);
	r = !q->ticket || q->ticket >= ct->next_ticket ? -ENOENT : 0;
	pthread_mutex_unlock(&ct->lock);
	if (r)
		return r;
	r = wait_ticket(ct, q->ticket, q->timeout_ns, out);
	/* the completion record goes before this reply */
	kvd_ctier_flush(c, ct);
	return r;
}

/* FNV-1a, 64 bits. */
static uint64_t fnv64(const uint8_t *p, uint64_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL, i;

	for (i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int op_block_sum(struct kvd_client *c, struct kvd_ctier *ct,
			const struct kvp_block_sum *q)
{
	struct kvd_pool *p;
	struct kvd_io io;
	uint32_t *b = NULL, i;
	uint64_t *sums;
	uint8_t *buf = NULL;
	bool host;
	int r;

	if (q->reserved)
		return -EINVAL;
	r = joined(ct, q->tier, &p);
	if (r)
		return r;
	if (!q->n || q->n > KVP_IO_MAX_BLOCKS)
		return -EINVAL;
	r = kvd_client_region_ptr(c, q->off_sums, q->n, sizeof(uint64_t),
			      (void **)&sums);
	if (!r && (q->off_sums & 7))
		r = -EINVAL;
	if (!r)
		r = kvd_client_region_u32(c, q->off_blocks, q->n, &b);
	if (!r)
		r = below(p, b, q->n);
	if (r)
		goto out;
	r = kvd_lease_pin(p, ct->lease_id[q->tier], b, q->n);
	if (r) {
		r = -EPERM;
		goto out;
	}
	memset(&io, 0, sizeof(io));
	host = host_pool(p);
	if (!host) {
		buf = aligned_alloc(4096, (p->block_bytes + 4095) & ~4095ULL);
		r = buf ? 0 : -ENOMEM;
		if (!r && p->ops->io_open)
			r = p->ops->io_open(p, &io);
	}
	/* one block at a time under the memory, as swap jobs do */
	for (i = 0; !r && i < q->n; i++) {
		kvd_backing_rdlock(p);
		r = check_mapped(p, &b[i], 1);
		if (!r)
			r = kvd_scrub_claim(p, host ? NULL : &io,
					    kvd_client_scrub_tag(c), &b[i], 1,
					    NULL, NULL);
		if (!r && host)
			sums[i] = fnv64(p->ops->host_ptr(p, b[i]),
					p->block_bytes);
		else if (!r)
			r = p->ops->read(p, &io, &b[i], (void *const *)&buf,
					 1);
		kvd_backing_unlock(p);
		if (!r && !host)
			sums[i] = fnv64(buf, p->block_bytes);
	}
	if (!host && p->ops->io_close)
		p->ops->io_close(p, &io);
	kvd_lease_pin_drop(p, ct->lease_id[q->tier]);
out:
	free(buf);
	free(b);
	return r;
}

static int op_seq_report(struct kvd_ctier *ct, const struct kvp_seq_report *q)
{
	if (q->reserved[0] || q->reserved[1] || q->swapped[0])
		return -EINVAL;
	pthread_mutex_lock(&ct->lock);
	ct->seqs = *q;
	pthread_mutex_unlock(&ct->lock);
	return 0;
}

#define BODY(type) ({							\
	if (blen != sizeof(type))					\
		return -EBADMSG;					\
	(const type *)body; })

int kvd_tier_dispatch(struct kvd_client *c, struct kvd_ctier *ct,
		      uint16_t op, const void *body, size_t blen,
		      void *rbody, size_t *rlen)
{
	int r;

	if (!ct)
		return -ENOTCONN;
	switch (op) {
	case KVP_OP_TIER_ATTACH:
		*rlen = sizeof(struct kvp_tier_attach_reply);
		return op_tier_attach(c, ct, BODY(struct kvp_tier_attach),
				      rbody);
	case KVP_OP_TIER_LEASE:
		r = op_tier_lease(c, ct, BODY(struct kvp_tier_lease), rbody);
		if (r > 0)
			*rlen = (size_t)r * sizeof(uint32_t);
		return r;
	case KVP_OP_TIER_RELEASE:
		return op_tier_release(ct, body, blen);
	case KVP_OP_TIER_STATUS:
		*rlen = sizeof(struct kvp_status_reply);
		return op_tier_status(c, ct, BODY(struct kvp_tier_sel), rbody);
	case KVP_OP_SWAP:
		*rlen = sizeof(struct kvp_swap_reply);
		return op_swap(c, ct, BODY(struct kvp_swap), rbody);
	case KVP_OP_SWAP_WAIT:
		*rlen = sizeof(struct kvp_swap_done);
		return op_swap_wait(c, ct, BODY(struct kvp_swap_wait), rbody);
	case KVP_OP_BLOCK_SUM:
		return op_block_sum(c, ct, BODY(struct kvp_block_sum));
	case KVP_OP_SEQ_REPORT:
		return op_seq_report(ct, BODY(struct kvp_seq_report));
	}
	return -EOPNOTSUPP;
}

/* ---- admin records ------------------------------------------------------ */

int kvd_fill_tier_list(struct kvd *d, struct kvp_tier_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total)
{
	uint32_t i, n = 0, k;

	for (i = start; i < d->npools && n < cap; i++) {
		struct kvd_pool *p = &d->pools[i];
		struct kvp_tier_rec *o = &out[n++];

		memset(o, 0, sizeof(*o));
		kvd_ledger_pool_rec(p, &o->pool);
		o->tier = p->tier;
		o->kind = p->kind;
		o->flags = p->ops->flags ? p->ops->flags(p) : 0;
		o->swaps = atomic_load(&p->st.swaps);
		o->blocks_in = atomic_load(&p->st.blocks_in);
		o->blocks_out = atomic_load(&p->st.blocks_out);
		o->bytes_in = atomic_load(&p->st.bytes_in);
		o->bytes_out = atomic_load(&p->st.bytes_out);
		o->copy_in_ns = atomic_load(&p->st.copy_in_ns);
		o->copy_out_ns = atomic_load(&p->st.copy_out_ns);
		o->errors = atomic_load(&p->st.errors);
		kvd_ptier_counts(p, &o->prefix_blocks, &o->prefix_in,
				 &o->prefix_out);
		for (k = 0; k < KVP_LAT_BUCKETS; k++)
			o->lat_us[k] = atomic_load(&p->st.lat_us[k]);
	}
	*total = d->npools;
	return (int)n;
}

/* One connection's record (clients_lock held by the caller). */
void kvd_ctier_rec(struct kvd_ctier *ct, struct kvp_client_tier_rec *o)
{
	struct kvd *d = ct->d;
	unsigned int i;

	pthread_mutex_lock(&ct->lock);
	memcpy(o->tenant, ct->tenant, sizeof(o->tenant));
	o->seqs = ct->seqs;
	o->swaps = ct->swaps;
	o->bytes_out = ct->bytes_out;
	o->bytes_in = ct->bytes_in;
	for (i = 0; i < d->npools && i < KVP_MAX_TIERS; i++)
		o->tier_lease[i] = ct->lease_id[i];
	pthread_mutex_unlock(&ct->lock);
	o->lease_id = o->tier_lease[0];
	for (i = 0; i < d->npools && i < KVP_MAX_TIERS; i++) {
		struct kvd_pool *p = &d->pools[i];

		if (!o->tier_lease[i])
			continue;
		if (d->mode == KVP_MODE_INPROC && ct->lease[i]) {
			pthread_mutex_lock(&p->lock);
			o->blocks[i] = ct->lease[i]->held;
			pthread_mutex_unlock(&p->lock);
		} else {
			o->blocks[i] = kvd_lease_blocks(p, o->tier_lease[i]);
		}
	}
}

int kvd_ctier_connected(struct kvd_ctier *ct, unsigned int tier,
			uint64_t lease_id)
{
	return ct && tier < KVD_MAX_TIERS && ct->lease_id[tier] == lease_id;
}
