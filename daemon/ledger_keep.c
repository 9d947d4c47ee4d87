// SPDX-License-Identifier: MIT
/*
 * ledger_keep.c - the in-process ledger's journal (ledger_keep.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "inproc.h"
#include "keep.h"
#include "ledger.h"
#include "ledger_keep.h"
#include "restart.h"

#define LK_MAGIC	"KVPLEDG"	/* and a NUL: 8 bytes */
#define LK_MAX_RECS	65536U

struct lk_head {
	char magic[8];
	uint32_t version;
	uint32_t head_bytes;		/* sizeof(struct lk_head) */
	uint32_t capacity;
	uint32_t nrec;
	uint64_t sum;			/* over the bytes before it */
	/* outside the checksum, raised before a tenant gets a serial */
	uint64_t serial_hw;
};

struct lk_rec {
	uint64_t id;			/* 0: a free record */
	uint64_t secret;
	uint64_t tenant_serial;
	uint32_t uid;
	uint32_t pad;
	char tenant[KVPOOL_NAME_LEN];
	uint64_t sum;			/* over the bytes before it */
};

static struct {
	struct kvpool_pool *pool;	/* the journalled core pool */
	struct lk_head *h;		/* the mapping, NULL: none */
	struct lk_rec *rec;
	uint64_t *owner;
	size_t bytes;
	/* the previous life's, read by kvd_lkeep_begin() */
	struct lk_head *old;
	size_t old_bytes;
	uint64_t restored, claimed, expired;
	uint64_t grace_until_ns;	/* 0: no restored lease waits */
} J;

static uint64_t head_sum(const struct lk_head *h)
{
	return kvd_restart_sum(h, offsetof(struct lk_head, sum));
}

static uint64_t rec_sum(const struct lk_rec *r)
{
	return kvd_restart_sum(r, offsetof(struct lk_rec, sum));
}

static size_t lk_bytes(uint32_t capacity, uint32_t nrec)
{
	size_t b = sizeof(struct lk_head) + (size_t)nrec * sizeof(struct lk_rec) +
		   (size_t)capacity * sizeof(uint64_t);

	return (b + 4095) & ~(size_t)4095;
}

static void lk_layout(struct lk_head *h, struct lk_rec **rec,
		      uint64_t **owner)
{
	*rec = (struct lk_rec *)(h + 1);
	*owner = (uint64_t *)(*rec + h->nrec);
}

static uint32_t nrec_of(const struct kvd *d)
{
	uint32_t n = d->o.max_clients ? d->o.max_clients : 1;

	return n > LK_MAX_RECS ? LK_MAX_RECS : n;
}

/* ---- the earlier life's journal ------------------------------------------ */

/* "" when the journal @h of @bytes fits this pool; else why not. */
static const char *lk_judge(const struct lk_head *h, size_t bytes,
			    const struct kvd_pool *p)
{
	if (bytes < sizeof(*h) || memcmp(h->magic, LK_MAGIC, 8))
		return "ledger journal has a foreign magic";
	if (h->version != KVD_LKEEP_VERSION)
		return "ledger journal of another version";
	if (h->head_bytes != sizeof(*h) || h->sum != head_sum(h))
		return "ledger journal checksum wrong";
	if (h->capacity != p->capacity || !h->nrec || h->nrec > LK_MAX_RECS ||
	    lk_bytes(h->capacity, h->nrec) > bytes)
		return "ledger journal of another geometry";
	return "";
}

int kvd_lkeep_begin(struct kvd *d)
{
	struct kvd_pool *p = d->top;
	const char *why;
	struct stat sb;
	void *m;
	int fd;

	memset(&J, 0, sizeof(J));
	if (d->mode != KVP_MODE_INPROC || !kvd_keep_enabled(d))
		return 0;
	fd = kvd_keep_take(p, KVD_KEEP_LEDGER, 0);
	if (fd < 0)
		return 0;
	if (fstat(fd, &sb) || sb.st_size < (off_t)sizeof(struct lk_head)) {
		close(fd);
		return 0;
	}
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	why = lk_judge(m, (size_t)sb.st_size, p);
	if (why[0]) {
		kvd_log(KVD_WARN, "pool %s: %s: no lease is restored",
			p->name, why);
		munmap(m, (size_t)sb.st_size);
		return 0;
	}
	J.old = m;
	J.old_bytes = (size_t)sb.st_size;
	/* No tenant of this life may take a serial that tags the kept
	 * blocks (scrub.h): they start above the earlier life's. */
	pthread_mutex_lock(&p->lock);
	if (p->pool->tenant_serial < J.old->serial_hw)
		p->pool->tenant_serial = J.old->serial_hw;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* ---- this life's journal ---------------------------------------------------- */

static int lk_new(struct kvd *d)
{
	struct kvd_pool *p = d->top;
	uint32_t nrec = nrec_of(d);
	size_t bytes = lk_bytes(p->capacity, nrec);
	struct lk_head *h;
	int fd, r;

	fd = kvd_keep_memfd("kvpool-ledger", bytes, (void **)&h);
	if (fd < 0)
		return fd;
	memcpy(h->magic, LK_MAGIC, 8);
	h->version = KVD_LKEEP_VERSION;
	h->head_bytes = sizeof(*h);
	h->capacity = p->capacity;
	h->nrec = nrec;
	h->sum = head_sum(h);
	h->serial_hw = p->pool->tenant_serial;
	r = kvd_keep_put(p, KVD_KEEP_LEDGER, 0, fd);
	close(fd);
	if (r) {
		munmap(h, bytes);
		return r;
	}
	J.h = h;
	J.bytes = bytes;
	lk_layout(h, &J.rec, &J.owner);
	return 0;
}

static bool rec_ok(const struct lk_rec *r)
{
	return r->id && r->sum == rec_sum(r) &&
	       memchr(r->tenant, 0, sizeof(r->tenant));
}

/* Restore one record's lease (p->lock held): 0, or why not. */
static int restore_one(struct kvd_pool *p, const struct lk_rec *r,
		       const uint32_t *blocks, uint32_t n)
{
	struct kvpool_tenant *t, *o;
	struct kvpool_lease *l;
	uint64_t hw = J.old->serial_hw;
	int e;

	e = kvpool_lease_restore(p->pool, r->id, r->uid, r->tenant, blocks, n,
				 &l);
	if (e)
		return e;
	t = l->tenant;
	/* Its tenant is known by the serial that tags its blocks: a tenant
	 * of this life (above hw) takes it; one that took another is not
	 * that tenant. */
	if (t->serial > hw) {
		list_for_each_entry(o, &p->pool->tenants, node)
			if (o->serial == r->tenant_serial)
				goto differs;
		t->serial = r->tenant_serial;
	} else if (t->serial != r->tenant_serial) {
		goto differs;
	}
	return 0;
differs:
	kvpool_lease_adopt(p->pool, l->id, &(struct kvpool_cred){ 0 }, &l);
	kvpool_lease_set_keep(l, false);
	kvpool_lease_close(l);
	return -ESTALE;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The place in the sorted ids[n] of the lease that owns @owner, or -1. */
static long lk_rec_of(uint64_t owner, const uint64_t *ids, size_t n)
{
	const uint64_t *k;

	if (!owner)
		return -1;
	k = bsearch(&owner, ids, n, sizeof(*ids), cmp_u64);
	return k ? k - ids : -1;
}

/*
 * Restore every record of the old journal whose lease the pool can take
 * back; copy the restored ones (records and owners) into this life's
 * journal.  p->lock held.
 */
static void restore_all(struct kvd_pool *p)
{
	struct lk_rec *orec;
	uint64_t *oown, *ids;
	uint32_t *count, *start, *blocks, i, j, n = 0, nb = 0;

	lk_layout(J.old, &orec, &oown);
	ids = calloc(J.old->nrec, sizeof(*ids));
	count = calloc(J.old->nrec, sizeof(*count));
	start = calloc(J.old->nrec + 1, sizeof(*start));
	blocks = calloc(p->capacity ? p->capacity : 1, sizeof(*blocks));
	if (!ids || !count || !start || !blocks)
		goto out;
	for (i = 0; i < J.old->nrec; i++)
		if (rec_ok(&orec[i]))
			ids[n++] = orec[i].id;
	qsort(ids, n, sizeof(*ids), cmp_u64);
	/* ids[] is sorted: count each lease's blocks, then place them. */
	for (i = 0; i < p->capacity; i++) {
		long r = lk_rec_of(oown[i], ids, n);

		if (r >= 0)
			count[r]++;
	}
	for (i = 0; i < n; i++)
		start[i + 1] = start[i] + count[i];
	memset(count, 0, J.old->nrec * sizeof(*count));
	for (i = 0; i < p->capacity; i++) {
		long r = lk_rec_of(oown[i], ids, n);

		if (r >= 0)
			blocks[start[r] + count[r]++] = i;
	}
	/* the blocks are backed now (kvd_lkeep_restore) */
	for (i = 0, j = 0; i < J.old->nrec; i++) {
		const struct lk_rec *r = &orec[i];
		uint32_t x, b0, b1;
		int e;

		if (!rec_ok(r))
			continue;
		x = (uint32_t)((uint64_t *)bsearch(&r->id, ids, n, sizeof(*ids),
						   cmp_u64) - ids);
		b0 = start[x];
		b1 = start[x + 1];
		e = restore_one(p, r, blocks + b0, b1 - b0);
		if (e) {
			kvd_log(KVD_WARN, "pool %s: lease %llu of uid %u not "
				"restored: %s", p->name,
				(unsigned long long)r->id, r->uid,
				e == -ESTALE ? "its tenant is another one" :
				strerror(-e));
			continue;
		}
		J.rec[j++] = *r;
		for (; b0 < b1; b0++)
			J.owner[blocks[b0]] = r->id;
		nb += b1 - start[x];
		J.restored++;
	}
	if (J.restored)
		kvd_log(KVD_NOTICE, "pool %s: %llu leases restored with %u "
			"blocks, parked until their clients claim them",
			p->name, (unsigned long long)J.restored, nb);
out:
	free(ids);
	free(count);
	free(start);
	free(blocks);
}

int kvd_lkeep_restore(struct kvd *d)
{
	struct kvd_pool *p = d->top;
	uint32_t top = 0;
	int r;

	if (d->mode != KVP_MODE_INPROC || !kvd_keep_enabled(d))
		return 0;
	r = lk_new(d);
	if (r) {
		kvd_log(KVD_WARN, "pool %s: cannot keep the ledger journal "
			"(%s): leases die with the daemon", p->name,
			strerror(-r));
		goto out;
	}
	if (!J.old || !kvd_restart_preserved(p))
		goto hook;
	/* Back every block a lease may get back before restoring it (the
	 * hook is off until the restore is done: J.pool is NULL). */
	{
		struct lk_rec *orec;
		uint64_t *oown;
		uint32_t i;

		lk_layout(J.old, &orec, &oown);
		for (i = 0; i < p->capacity; i++)
			if (oown[i])
				top = i + 1;
	}
	if (top && kvd_ip_back(p, top)) {
		kvd_log(KVD_WARN, "pool %s: cannot back the %u blocks the "
			"journal holds: no lease is restored", p->name, top);
		goto hook;
	}
	kvd_restart_kept_blocks(p, p->mapped);
	pthread_mutex_lock(&p->lock);
	restore_all(p);
	pthread_mutex_unlock(&p->lock);
	if (J.restored)
		J.grace_until_ns = kvd_now_ns() +
				   d->o.claim_grace_ms * 1000000ULL;
hook:
	pthread_mutex_lock(&p->lock);
	J.pool = p->pool;
	J.h->serial_hw = p->pool->tenant_serial;
	pthread_mutex_unlock(&p->lock);
out:
	if (J.old)
		munmap(J.old, J.old_bytes);
	J.old = NULL;
	return r;
}

/* ---- while serving ------------------------------------------------------------ */

void kvd_lkeep_owned(struct kvpool_pool *pool, const uint32_t *blocks,
		     uint32_t n, uint64_t lease_id)
{
	uint32_t i;

	if (pool != J.pool)
		return;
	for (i = 0; i < n; i++)
		J.owner[blocks[i]] = lease_id;
}

static struct lk_rec *rec_find(uint64_t id)
{
	uint32_t i;

	for (i = 0; J.h && i < J.h->nrec; i++)
		if (J.rec[i].id == id)
			return &J.rec[i];
	return NULL;
}

static void rec_write(struct lk_rec *r, struct kvpool_lease *l,
		      uint64_t secret)
{
	struct lk_rec n;

	memset(&n, 0, sizeof(n));
	n.id = l->id;
	n.secret = secret;
	n.uid = l->uid;
	n.tenant_serial = l->tenant->serial;
	if (!l->tenant->automatic)
		memcpy(n.tenant, l->tenant->name, KVPOOL_NAME_LEN);
	n.tenant[KVPOOL_NAME_LEN - 1] = 0;
	n.sum = rec_sum(&n);
	/* serials below the mark stay taken in the next life */
	if (J.h->serial_hw < l->pool->tenant_serial)
		J.h->serial_hw = l->pool->tenant_serial;
	*r = n;
}

uint64_t kvd_lkeep_record(struct kvd_pool *p, struct kvpool_lease *l)
{
	struct lk_rec *r;
	uint64_t secret = 0;

	while (!secret)
		if (getrandom(&secret, sizeof(secret), 0) != sizeof(secret))
			return 0;
	pthread_mutex_lock(&p->lock);
	r = p->pool == J.pool ? rec_find(l->id) : NULL;
	if (r)		/* claimed: its secret stays */
		secret = r->secret;
	else if (p->pool == J.pool)
		r = rec_find(0);
	if (r)
		rec_write(r, l, secret);
	else if (J.pool)
		kvd_log(KVD_WARN, "pool %s: ledger journal full: lease %llu "
			"dies with the daemon", p->name,
			(unsigned long long)l->id);
	pthread_mutex_unlock(&p->lock);
	return r ? secret : 0;
}

void kvd_lkeep_retenant(struct kvd_pool *p, struct kvpool_lease *l)
{
	struct lk_rec *r;

	if (p->pool != J.pool || !(r = rec_find(l->id)))
		return;
	rec_write(r, l, r->secret);
}

void kvd_lkeep_forget(struct kvd_pool *p, struct kvpool_lease *l)
{
	struct lk_rec *r;

	if (p->pool != J.pool || !(r = rec_find(l->id)))
		return;
	memset(r, 0, sizeof(*r));
}

int kvd_lkeep_claim(struct kvd_pool *p, uint64_t id, uint64_t secret,
		    uint32_t uid, uint32_t pid, void *client,
		    struct kvpool_lease **out)
{
	struct kvpool_cred cred = { .uid = uid, .pid = pid };
	struct kvpool_lease *l;
	struct lk_rec *r;
	int e;

	pthread_mutex_lock(&p->lock);
	r = p->pool == J.pool && id ? rec_find(id) : NULL;
	if (!r) {
		e = -ENOENT;
	} else if (((r->secret ^ secret) | (uint64_t)(r->uid ^ uid)) != 0) {
		e = -EPERM;
	} else {
		e = kvpool_lease_adopt(p->pool, id, &cred, &l);
		if (!e) {
			kvpool_lease_set_keep(l, false);
			l->host = client;
			*out = l;
			J.claimed++;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return e;
}

void kvd_lkeep_timer(struct kvd *d)
{
	struct kvd_pool *p = d->top;
	struct kvpool_cred cred = { 0 };
	struct kvpool_lease *l, *n;

	if (!J.grace_until_ns || kvd_now_ns() < J.grace_until_ns)
		return;
	J.grace_until_ns = 0;
	pthread_mutex_lock(&p->lock);
	list_for_each_entry_safe(l, n, &p->pool->leases, pool_node) {
		struct kvpool_lease *a;

		if (!l->parked || !rec_find(l->id))
			continue;
		if (kvpool_lease_adopt(p->pool, l->id, &cred, &a))
			continue;
		kvd_log(KVD_NOTICE, "pool %s: lease %llu of uid %u not claimed "
			"in %u ms: its %u blocks are freed", p->name,
			(unsigned long long)a->id, a->uid, d->o.claim_grace_ms,
			a->held);
		kvd_lkeep_forget(p, a);
		kvpool_lease_set_keep(a, false);
		kvpool_lease_close(a);
		J.expired++;
	}
	pthread_mutex_unlock(&p->lock);
}

uint64_t kvd_lkeep_due_ns(void)
{
	return J.grace_until_ns;
}

void kvd_lkeep_counts(uint64_t *restored, uint64_t *claimed,
		      uint64_t *expired)
{
	*restored = J.restored;
	*claimed = J.claimed;
	*expired = J.expired;
}
