// SPDX-License-Identifier: MIT
/*
 * cluster.c - the cluster tier: prefix blocks in a Redis Cluster, and the
 * cluster view (heartbeats, stored/removed events).  See cluster.h and
 * Documentation/cluster.rst.
 *
 * Threads and queues:
 *  - the fetch thread takes lookups from a queue of at most FQ_MAX, sends
 *    each as one pipelined round of GETs (rcluster.c) with the lookup's
 *    deadline, verifies every value (cluster_value.c) in chain order up to
 *    the first miss and hands the result to the waiting connection; a
 *    lookup nobody waits for any more is freed;
 *  - the store thread takes values (at most queue_bytes waiting), events
 *    (at most EV_MAX waiting) and, every heartbeat_ms, the heartbeat, and
 *    writes them in pipelined rounds.
 * Each thread has its own rc_cluster (connections, slot map).  Counters
 * are under c->slock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef KVD_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include "rcluster.h"
#endif

#include "cluster.h"
#include "scrub.h"
#include "cluster_value.h"
#include "core.h"
#include "ledger.h"
#include "tier.h"
#include "swap.h"
#include "tenants.h"

#define FQ_MAX		64		/* lookups waiting */
#define FETCH_BATCH	16		/* lookups per round */
#define EV_MAX		65536		/* event keys waiting */
#define EV_PER_XADD	256		/* keys per stream entry */
#define XADD_MAX	128		/* stream entries per round */
#define PUT_BATCH	64		/* values per round */
#define PUT_BATCH_BYTES	(16U << 20)
#define PUT_DEADLINE_MS	2000
#define MODELS_MAX	256
#define KEYS_MAX	1024
#define REFRESH_MS	250		/* slot map refreshes, at most every */

struct cl_key {
	char tenant[KVPOOL_NAME_LEN];
	uint8_t salt[PFX_SALT_BYTES];
};

struct cl_model {
	struct pfx_key id;
	char name[KVP_MODEL_LEN];
	uint32_t dtype, layers, kv_heads, head_dim, tokens_per_block;
	uint64_t block_bytes, used_bytes;
};

#define RETRIES		20		/* rounds a value or event may fail */
#define RETRY_MS	250		/* between such rounds (a failover) */

struct cl_put {
	struct cl_put *next;
	uint32_t tries;			/* rounds it failed in */
	bool kind_again;		/* (this round: failed, goes again) */
	char key[KVC_KEY_MAX];
	size_t len;
	uint8_t val[];
};

struct cl_ev {
	bool stored;
	uint8_t tries;
	struct pfx_key model, key;
};

struct kvd_cluster_fetch {
	struct kvd_cluster_fetch *next;
	pthread_cond_t cv;
	int refs;			/* waiter + fetch thread (c->flock) */
	bool done;
	uint64_t deadline;
	uint32_t n, got;
	uint8_t salt[PFX_SALT_BYTES];
	struct cl_model m;
	struct pfx_key parent0;
	struct pfx_key *keys;
	uint32_t *tokens;
	char (*kstr)[KVC_KEY_MAX];
	void **rep;			/* redisReply, n */
	const void **payload;		/* got */
};

struct kvd_cluster {
	struct kvd *d;
	struct kvd_cluster_opts o;
	char node[64];
	uint64_t epoch;
	struct cl_key *keys;
	unsigned int nkeys;

	pthread_mutex_t mlock;		/* models */
	struct cl_model models[MODELS_MAX];
	unsigned int nmodels;

	pthread_mutex_t flock;		/* fetch queue */
	pthread_cond_t fcond;
	struct kvd_cluster_fetch *fq, *fq_tail;
	unsigned int fq_n;

	pthread_mutex_t wlock;		/* store queue, events */
	pthread_cond_t wcond;
	struct cl_put *pq, *pq_tail;
	uint64_t pq_bytes;
	struct cl_ev *ev;		/* ring of EV_MAX */
	uint32_t ev_head, ev_n;

	pthread_mutex_t slock;		/* counters */
	struct kvp_cluster_status st;
	uint64_t rc_f[8], rc_w[8];	/* routing counters of each thread */

	pthread_t fth, wth;
	bool fth_on, wth_on;
	volatile int stop;
};

static const char *const policy_names[] = { "through", "back", "read" };

bool kvd_cluster_on(const struct kvd *d)
{
	return d->cluster != NULL;
}

uint32_t kvd_cluster_policy(const struct kvd *d)
{
	return d->cluster ? d->cluster->o.policy : KVP_CLUSTER_READ;
}

static void count(struct kvd_cluster *c, uint64_t *field, uint64_t n)
{
	pthread_mutex_lock(&c->slock);
	*field += n;
	pthread_mutex_unlock(&c->slock);
}

/* ---- namespace keys ---------------------------------------------------------- */

/*
 * One file per tenant, named after it, 16 to 4096 bytes (random: e.g.
 * head -c 32 /dev/urandom), readable by the daemon only: a file that
 * its group or others may read, or a link, is refused.
 */
static int load_keys(struct kvd_cluster *c)
{
	DIR *dir;
	struct dirent *de;
	int dfd;

	if (!c->o.keys[0])
		return 0;
	dir = opendir(c->o.keys);
	if (!dir) {
		kvd_log(KVD_ERR, "cluster keys %s: %s", c->o.keys,
			strerror(errno));
		return -errno;
	}
	dfd = dirfd(dir);
	c->keys = calloc(KEYS_MAX, sizeof(*c->keys));
	if (!c->keys) {
		closedir(dir);
		return -ENOMEM;
	}
	while ((de = readdir(dir))) {
		uint8_t buf[4097];
		struct stat st;
		ssize_t n;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		if (strlen(de->d_name) >= KVPOOL_NAME_LEN ||
		    kvpool_name_valid(de->d_name)) {
			kvd_log(KVD_WARN, "cluster keys: %s: not a tenant "
				"name, ignored", de->d_name);
			continue;
		}
		fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW |
			    O_NOCTTY);
		if (fd < 0 || fstat(fd, &st)) {
			kvd_log(KVD_WARN, "cluster keys: %s: %s, ignored",
				de->d_name, strerror(errno));
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
			kvd_log(KVD_ERR, "cluster keys: %s: %s; its tenant "
				"keeps a private namespace", de->d_name,
				!S_ISREG(st.st_mode) ? "not a regular file" :
				"readable or writable by others (chmod 600)");
			close(fd);
			continue;
		}
		n = read(fd, buf, sizeof(buf));
		close(fd);
		if (n < 16 || n > 4096) {
			kvd_log(KVD_ERR, "cluster keys: %s: %zd bytes (16 to "
				"4096 expected); its tenant keeps a private "
				"namespace", de->d_name, n);
			continue;
		}
		if (c->nkeys >= KEYS_MAX) {
			kvd_log(KVD_ERR, "cluster keys: more than %d", KEYS_MAX);
			break;
		}
		memcpy(c->keys[c->nkeys].tenant, de->d_name,
		       strlen(de->d_name) + 1);
		kvc_namespace_salt(buf, (size_t)n, c->keys[c->nkeys].salt);
		memset(buf, 0, sizeof(buf));
		c->nkeys++;
	}
	closedir(dir);
	kvd_log(KVD_INFO, "cluster: %u tenant%s with a namespace key",
		c->nkeys, c->nkeys == 1 ? "" : "s");
	return 0;
}

static const struct cl_key *key_of(const struct kvd_cluster *c,
				   const char *tenant)
{
	unsigned int i;

	for (i = 0; i < c->nkeys; i++)
		if (!strncmp(c->keys[i].tenant, tenant, KVPOOL_NAME_LEN))
			return &c->keys[i];
	return NULL;
}

bool kvd_cluster_tenant_key(struct kvd *d, const char *tenant,
			    uint8_t salt[PFX_SALT_BYTES])
{
	const struct cl_key *k = d->cluster ? key_of(d->cluster, tenant) :
					      NULL;

	if (!k)
		return false;
	memcpy(salt, k->salt, PFX_SALT_BYTES);
	return true;
}

/* ---- models -------------------------------------------------------------------- */

static bool key_eq(const struct pfx_key *a, const struct pfx_key *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

void kvd_cluster_model(struct kvd *d, const char *tenant,
		       const struct pfx_key *id, const char *name,
		       const struct kvk_layout *l)
{
	struct kvd_cluster *c = d->cluster;
	struct cl_model *m;
	unsigned int i;

	if (!c || !key_of(c, tenant))
		return;
	pthread_mutex_lock(&c->mlock);
	for (i = 0; i < c->nmodels; i++)
		if (key_eq(&c->models[i].id, id))
			break;
	if (i == c->nmodels && c->nmodels < MODELS_MAX) {
		m = &c->models[c->nmodels++];
		memset(m, 0, sizeof(*m));
		m->id = *id;
		snprintf(m->name, sizeof(m->name), "%s", name);
		m->dtype = l->dtype;
		m->layers = l->layers;
		m->kv_heads = l->kv_heads;
		m->head_dim = l->head_dim;
		m->tokens_per_block = l->tokens_per_block;
		m->block_bytes = l->block_bytes;
		m->used_bytes = l->used_bytes;
	}
	pthread_mutex_unlock(&c->mlock);
}

static bool model_get(struct kvd_cluster *c, const struct pfx_key *id,
		      struct cl_model *out)
{
	unsigned int i;
	bool found = false;

	pthread_mutex_lock(&c->mlock);
	for (i = 0; i < c->nmodels; i++)
		if (key_eq(&c->models[i].id, id)) {
			*out = c->models[i];
			found = true;
			break;
		}
	pthread_mutex_unlock(&c->mlock);
	return found;
}

static void block_of(struct kvc_block *b, const struct cl_model *m,
		     const uint8_t *salt)
{
	memset(b, 0, sizeof(*b));
	b->salt = salt;
	b->model = m->id;
	b->dtype = m->dtype;
	b->layers = m->layers;
	b->kv_heads = m->kv_heads;
	b->head_dim = m->head_dim;
	b->tokens_per_block = m->tokens_per_block;
	b->block_bytes = m->block_bytes;
	b->payload_bytes = m->used_bytes;
}

/* ---- block bytes ------------------------------------------------------------------ */

/* The top pool's memory for reading, or false (owner thread: never wait
 * for a shrink in progress). */
static bool backing_hold(struct kvd_pool *p, bool may_wait)
{
	if (may_wait) {
		kvd_backing_rdlock(p);
		return true;
	}
	return kvd_backing_tryrdlock(p);
}

static int block_read(struct kvd_pool *p, uint32_t block, void *buf,
		      uint64_t bytes)
{
	void *src = p->ops->host_ptr ? p->ops->host_ptr(p, block) : NULL;
	struct kvd_io io;
	void *tmp;
	int r;

	if (block >= p->mapped)
		return -EFAULT;
	if (src) {
		memcpy(buf, src, bytes);
		return 0;
	}
	if (!p->ops->read)
		return -EOPNOTSUPP;
	tmp = bytes == p->block_bytes ? buf : malloc(p->block_bytes);
	if (!tmp)
		return -ENOMEM;
	memset(&io, 0, sizeof(io));
	r = p->ops->read(p, &io, &block, &tmp, 1);
	if (!r && tmp != buf)
		memcpy(buf, tmp, bytes);
	if (tmp != buf)
		free(tmp);
	return r;
}

int kvd_cluster_block_write(struct kvd *d, uint32_t block, const void *payload,
			    uint64_t bytes)
{
	struct kvd_pool *p = d->top;
	void *dst, *tmp;
	struct kvd_io io;
	int r = 0;

	if (bytes > p->block_bytes)
		return -EINVAL;
	kvd_backing_rdlock(p);
	if (block >= p->mapped) {
		r = -EFAULT;
		goto out;
	}
	dst = p->ops->host_ptr ? p->ops->host_ptr(p, block) : NULL;
	if (dst) {
		memcpy(dst, payload, bytes);
		memset((uint8_t *)dst + bytes, 0, p->block_bytes - bytes);
		goto out;
	}
	if (!p->ops->write) {
		r = -EOPNOTSUPP;
		goto out;
	}
	tmp = malloc(p->block_bytes);
	if (!tmp) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(tmp, payload, bytes);
	memset((uint8_t *)tmp + bytes, 0, p->block_bytes - bytes);
	memset(&io, 0, sizeof(io));
	r = p->ops->write(p, &io, &block, (const void *const *)&tmp, 1);
	free(tmp);
out:
	/* a cached block, read only through references: whoever is granted
	 * it after its eviction gets zeros */
	if (r != -EFAULT)
		kvd_scrub_filled(p, KVD_TAG_UNKNOWN, &block, 1, true);
	kvd_backing_unlock(p);
	return r;
}

/* ---- stores and events (callers' side) ------------------------------------------ */

void kvd_cluster_store(struct kvd *d, const uint8_t *salt,
		       const struct pfx_key *model,
		       const struct kvd_cluster_blk *b, uint32_t n,
		       bool may_wait)
{
	struct kvd_cluster *c = d->cluster;
	struct cl_put *first = NULL, *last = NULL, *q;
	uint64_t bytes = 0, dropped = 0;
	struct kvc_block kb;
	struct cl_model m;
	uint8_t *pay = NULL;
	uint32_t i;
	size_t vlen;
	bool held;

	if (!c || !n || c->o.policy == KVP_CLUSTER_READ)
		return;
	if (!model_get(c, model, &m)) {
		count(c, &c->st.put_dropped, n);
		return;
	}
	block_of(&kb, &m, salt);
	vlen = kvc_value_bytes(&kb);
	pay = malloc(m.used_bytes ? m.used_bytes : 1);
	held = pay && backing_hold(d->top, may_wait);
	for (i = 0; i < n; i++) {
		pthread_mutex_lock(&c->wlock);
		if (c->pq_bytes + bytes + vlen > c->o.queue_bytes) {
			pthread_mutex_unlock(&c->wlock);
			dropped += n - i;
			break;
		}
		pthread_mutex_unlock(&c->wlock);
		q = held ? malloc(sizeof(*q) + vlen) : NULL;
		if (!q || block_read(d->top, b[i].block, pay, m.used_bytes)) {
			free(q);
			dropped++;
			continue;
		}
		kb.key = b[i].key;
		kb.parent = b[i].parent;
		kb.tokens = b[i].tokens;
		kvc_key(q->key, &kb);
		kvc_value_encode(q->val, &kb, pay);
		q->len = vlen;
		q->tries = 0;
		q->kind_again = false;
		q->next = NULL;
		if (last)
			last->next = q;
		else
			first = q;
		last = q;
		bytes += vlen;
	}
	if (held)
		kvd_backing_unlock(d->top);
	free(pay);
	pthread_mutex_lock(&c->wlock);
	if (first) {
		if (c->pq_tail)
			c->pq_tail->next = first;
		else
			c->pq = first;
		c->pq_tail = last;
		c->pq_bytes += bytes;
		pthread_cond_signal(&c->wcond);
	}
	pthread_mutex_unlock(&c->wlock);
	if (dropped)
		count(c, &c->st.put_dropped, dropped);
}

void kvd_cluster_store_bytes(struct kvd *d, const uint8_t *salt,
			     const struct pfx_key *model,
			     const struct kvd_cluster_blk *b, const void *bytes)
{
	struct kvd_cluster *c = d->cluster;
	struct kvc_block kb;
	struct cl_model m;
	struct cl_put *q;
	size_t vlen;

	if (!c || c->o.policy == KVP_CLUSTER_READ)
		return;
	if (!model_get(c, model, &m)) {
		count(c, &c->st.put_dropped, 1);
		return;
	}
	block_of(&kb, &m, salt);
	kb.key = b->key;
	kb.parent = b->parent;
	kb.tokens = b->tokens;
	vlen = kvc_value_bytes(&kb);
	pthread_mutex_lock(&c->wlock);
	q = c->pq_bytes + vlen > c->o.queue_bytes ? NULL :
	    malloc(sizeof(*q) + vlen);
	if (!q) {
		pthread_mutex_unlock(&c->wlock);
		count(c, &c->st.put_dropped, 1);
		return;
	}
	kvc_key(q->key, &kb);
	kvc_value_encode(q->val, &kb, bytes);
	q->len = vlen;
	q->tries = 0;
	q->kind_again = false;
	q->next = NULL;
	if (c->pq_tail)
		c->pq_tail->next = q;
	else
		c->pq = q;
	c->pq_tail = q;
	c->pq_bytes += vlen;
	pthread_cond_signal(&c->wcond);
	pthread_mutex_unlock(&c->wlock);
}

void kvd_cluster_event(struct kvd *d, bool stored, const struct pfx_key *model,
		       const struct pfx_key *keys, uint32_t n)
{
	struct kvd_cluster *c = d->cluster;
	uint32_t i, lost = 0;

	if (!c || !n)
		return;
	pthread_mutex_lock(&c->wlock);
	for (i = 0; i < n; i++) {
		struct cl_ev *e;

		if (c->ev_n == EV_MAX) {
			lost = n - i;
			break;
		}
		e = &c->ev[(c->ev_head + c->ev_n++) % EV_MAX];
		e->stored = stored;
		e->tries = 0;
		e->model = *model;
		e->key = keys[i];
	}
	pthread_cond_signal(&c->wcond);
	pthread_mutex_unlock(&c->wlock);
	if (lost)
		count(c, &c->st.events_dropped, lost);
}

/* ---- fetches (callers' side) ------------------------------------------------------ */

static void fetch_free(struct kvd_cluster_fetch *f)
{
	uint32_t i;

	if (!f)
		return;
#ifdef KVD_HAVE_HIREDIS
	for (i = 0; f->rep && i < f->n; i++)
		if (f->rep[i])
			freeReplyObject(f->rep[i]);
#else
	(void)i;
#endif
	pthread_cond_destroy(&f->cv);
	free(f->keys);
	free(f->tokens);
	free(f->kstr);
	free(f->rep);
	free(f->payload);
	free(f);
}

/* Drop one reference (c->flock held). */
static void fetch_put(struct kvd_cluster_fetch *f)
{
	if (!--f->refs)
		fetch_free(f);
}

uint32_t kvd_cluster_fetch_max(struct kvd *d, const struct pfx_key *model)
{
	struct kvd_cluster *c = d->cluster;
	struct cl_model m;
	uint64_t n;

	if (!c || !model_get(c, model, &m))
		return 0;
	n = c->o.fetch_bytes / (m.used_bytes + sizeof(struct kvc_hdr) +
				(uint64_t)m.tokens_per_block * 4);
	if (n > KVP_IO_MAX_BLOCKS)
		n = KVP_IO_MAX_BLOCKS;
	return n ? (uint32_t)n : 1;
}

int kvd_cluster_fetch(struct kvd *d, const uint8_t *salt,
		      const struct pfx_key *model, const struct pfx_key *keys,
		      const struct pfx_key *parent0, const uint32_t *tokens,
		      uint32_t n, struct kvd_cluster_fetch **out)
{
	struct kvd_cluster *c = d->cluster;
	struct kvd_cluster_fetch *f;
	pthread_condattr_t ca;
	struct kvc_block kb;
	struct timespec ts;
	uint32_t i;

	*out = NULL;
	if (!c || !n)
		return 0;
	/* no slot map (the cluster is down or not made yet): a miss at
	 * once, nothing queued */
	pthread_mutex_lock(&c->slock);
	if (!c->st.slots) {
		c->st.fetch_errors += n;
		pthread_mutex_unlock(&c->slock);
		return 0;
	}
	pthread_mutex_unlock(&c->slock);
	f = calloc(1, sizeof(*f));
	if (!f)
		return 0;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (!model_get(c, model, &f->m)) {
		fetch_free(f);
		return 0;
	}
	f->n = n;
	f->refs = 2;
	f->deadline = kvd_now_ns() + (uint64_t)c->o.deadline_ms * 1000000ULL;
	memcpy(f->salt, salt, PFX_SALT_BYTES);
	f->parent0 = *parent0;
	f->keys = malloc(n * sizeof(*f->keys));
	f->tokens = malloc((size_t)n * f->m.tokens_per_block * 4);
	f->kstr = malloc(n * sizeof(*f->kstr));
	f->rep = calloc(n, sizeof(*f->rep));
	f->payload = calloc(n, sizeof(*f->payload));
	if (!f->keys || !f->tokens || !f->kstr || !f->rep || !f->payload) {
		fetch_free(f);
		return 0;
	}
	memcpy(f->keys, keys, n * sizeof(*keys));
	memcpy(f->tokens, tokens, (size_t)n * f->m.tokens_per_block * 4);
	block_of(&kb, &f->m, f->salt);
	for (i = 0; i < n; i++) {
		kb.key = keys[i];
		kvc_key(f->kstr[i], &kb);
	}
	pthread_mutex_lock(&c->flock);
	if (c->fq_n >= FQ_MAX || c->stop) {
		pthread_mutex_unlock(&c->flock);
		count(c, &c->st.fetch_dropped, 1);
		fetch_free(f);
		return 0;
	}
	if (c->fq_tail)
		c->fq_tail->next = f;
	else
		c->fq = f;
	c->fq_tail = f;
	c->fq_n++;
	pthread_cond_signal(&c->fcond);
	ts.tv_sec = (time_t)(f->deadline / 1000000000ULL);
	ts.tv_nsec = (long)(f->deadline % 1000000000ULL);
	while (!f->done)
		if (pthread_cond_timedwait(&f->cv, &c->flock, &ts) == ETIMEDOUT)
			break;
	if (!f->done || !f->got) {
		/* (the fetch thread counts it: late, when it comes) */
		fetch_put(f);
		pthread_mutex_unlock(&c->flock);
		return 0;
	}
	pthread_mutex_unlock(&c->flock);
	*out = f;
	return (int)f->got;
}

const void *kvd_cluster_payload(const struct kvd_cluster_fetch *f, uint32_t i,
				uint64_t *bytes)
{
	if (i >= f->got)
		return NULL;
	*bytes = f->m.used_bytes;
	return f->payload[i];
}

void kvd_cluster_fetch_end(struct kvd *d, struct kvd_cluster_fetch *f,
			   uint32_t used)
{
	struct kvd_cluster *c = d->cluster;

	if (!f)
		return;
	pthread_mutex_lock(&c->slock);
	c->st.fetch_hits += used;
	c->st.fetch_no_room += f->got - used;
	pthread_mutex_unlock(&c->slock);
	pthread_mutex_lock(&c->flock);
	fetch_put(f);
	pthread_mutex_unlock(&c->flock);
}

/* ---- status ------------------------------------------------------------------------ */

void kvd_cluster_status(struct kvd *d, struct kvp_cluster_status *st)
{
	struct kvd_cluster *c = d->cluster;

	memset(st, 0, sizeof(*st));
	if (!c) {
		st->state = KVP_CLUSTER_OFF;
		return;
	}
	pthread_mutex_lock(&c->slock);
	*st = c->st;
	st->moved = c->rc_f[0] + c->rc_w[0];
	st->ask = c->rc_f[1] + c->rc_w[1];
	st->connects = c->rc_f[2] + c->rc_w[2];
	st->connect_errors = c->rc_f[3] + c->rc_w[3];
	st->io_errors = c->rc_f[4] + c->rc_w[4];
	st->refreshes = c->rc_f[5] + c->rc_w[5];
	st->refresh_errors = c->rc_f[6] + c->rc_w[6];
	pthread_mutex_unlock(&c->slock);
	pthread_mutex_lock(&c->wlock);
	st->put_queued_bytes = c->pq_bytes;
	pthread_mutex_unlock(&c->wlock);
	snprintf(st->node, sizeof(st->node), "%s", c->node);
	st->policy = c->o.policy;
	st->deadline_ms = c->o.deadline_ms;
	st->tenants = c->nkeys;
}

#ifdef KVD_HAVE_HIREDIS

static void rc_counters(struct kvd_cluster *c, struct rc_cluster *rc,
			uint64_t *dst)
{
	struct rc_stats s;

	rc_get_stats(rc, &s);
	pthread_mutex_lock(&c->slock);
	dst[0] = s.moved;
	dst[1] = s.ask;
	dst[2] = s.connects;
	dst[3] = s.connect_errors;
	dst[4] = s.io_errors;
	dst[5] = s.refreshes;
	dst[6] = s.refresh_errors;
	if (dst == c->rc_f) {
		unsigned int cov = rc_slots_covered(rc);

		c->st.masters = rc_masters(rc);
		c->st.slots = cov;
		c->st.state = !cov ? KVP_CLUSTER_DOWN : cov == RC_SLOTS ?
			      KVP_CLUSTER_UP : KVP_CLUSTER_PARTIAL;
	}
	pthread_mutex_unlock(&c->slock);
}

static void maybe_refresh(struct rc_cluster *rc, uint64_t *last,
			  uint64_t budget_ms)
{
	uint64_t now = kvd_now_ns();

	if (!rc_refresh_due(rc) || now - *last < REFRESH_MS * 1000000ULL)
		return;
	*last = now;
	rc_refresh(rc, now + budget_ms * 1000000ULL);
}

/* ---- the fetch thread ---------------------------------------------------------------- */

static void fetch_round(struct kvd_cluster *c, struct rc_cluster *rc,
			struct kvd_cluster_fetch **jobs, unsigned int nj)
{
	struct rc_cmd *cmds;
	const char **argv;
	size_t *alen;
	uint64_t deadline = 0, t0, bytes = 0, asked = 0, absent = 0;
	uint64_t errors = 0, timeouts = 0, invalid[KVP_CLI_MAX] = { 0 };
	uint32_t total = 0, i, j, k = 0;

	for (j = 0; j < nj; j++) {
		total += jobs[j]->n;
		if (jobs[j]->deadline > deadline)
			deadline = jobs[j]->deadline;
	}
	cmds = calloc(total, sizeof(*cmds));
	argv = malloc(total * 2 * sizeof(*argv));
	alen = malloc(total * 2 * sizeof(*alen));
	if (cmds && argv && alen) {
		for (j = 0; j < nj; j++)
			for (i = 0; i < jobs[j]->n; i++, k++) {
				argv[2 * k] = "GET";
				alen[2 * k] = 3;
				argv[2 * k + 1] = jobs[j]->kstr[i];
				alen[2 * k + 1] = strlen(jobs[j]->kstr[i]);
				cmds[k].argc = 2;
				cmds[k].argv = argv + 2 * k;
				cmds[k].argvlen = alen + 2 * k;
				cmds[k].key = 1;
			}
		t0 = kvd_now_ns();
		rc_exec(rc, cmds, total, deadline);
		count(c, &c->st.fetch_ns, kvd_now_ns() - t0);
	} else {
		total = 0;
	}
	/* verify each lookup's chain in order, up to its first miss */
	k = 0;
	for (j = 0; j < nj; j++) {
		struct kvd_cluster_fetch *f = jobs[j];
		struct kvc_block kb;
		bool stop = !total;

		block_of(&kb, &f->m, f->salt);
		asked += f->n;
		for (i = 0; i < f->n; i++, k++) {
			redisReply *r = total ? cmds[k].reply : NULL;
			int v;

			if (stop || !r) {
				if (!stop) {
					if (cmds[k].err == -ETIMEDOUT)
						timeouts++;
					else
						errors++;
				}
				stop = true;
				if (r)
					freeReplyObject(r);
				continue;
			}
			if (r->type == REDIS_REPLY_NIL) {
				absent++;
				stop = true;
				freeReplyObject(r);
				continue;
			}
			if (r->type != REDIS_REPLY_STRING) {
				if (r->type == REDIS_REPLY_ERROR)
					errors++;
				else
					invalid[KVP_CLI_TYPE]++;
				stop = true;
				freeReplyObject(r);
				continue;
			}
			bytes += r->len;
			kb.key = f->keys[i];
			kb.parent = i ? f->keys[i - 1] : f->parent0;
			kb.tokens = f->tokens + (size_t)i * f->m.tokens_per_block;
			v = kvc_value_check(r->str, r->len, &kb,
					    &f->payload[f->got]);
			if (v != KVC_OK) {
				invalid[v - 1 < KVP_CLI_MAX ? v - 1 : 0]++;
				kvd_log(KVD_DEBUG, "cluster: %s: %s, a miss",
					f->kstr[i], kvc_verdict_name(v));
				stop = true;
				freeReplyObject(r);
				continue;
			}
			f->rep[f->got++] = r;
		}
	}
	free(cmds);
	free(argv);
	free(alen);
	pthread_mutex_lock(&c->slock);
	c->st.fetches += nj;
	c->st.fetch_blocks += asked;
	c->st.fetch_absent += absent;
	c->st.fetch_errors += errors;
	c->st.fetch_bytes += bytes;
	for (i = 0; i < KVP_CLI_MAX; i++)
		c->st.fetch_invalid[i] += invalid[i];
	c->st.fetch_timeouts += timeouts;
	pthread_mutex_unlock(&c->slock);
	asked = 0;
	pthread_mutex_lock(&c->flock);
	for (j = 0; j < nj; j++) {
		struct kvd_cluster_fetch *f = jobs[j];

		f->done = true;
		if (f->refs == 1)
			asked += f->n;	/* nobody waits: the MATCH gave up */
		else
			pthread_cond_signal(&f->cv);
		fetch_put(f);
	}
	pthread_mutex_unlock(&c->flock);
	if (asked)
		count(c, &c->st.fetch_late, asked);
}

static void *fetch_main(void *arg)
{
	struct kvd_cluster *c = arg;
	struct rc_cluster *rc;
	struct rc_opts ro;
	uint64_t last_refresh = 0;

	memset(&ro, 0, sizeof(ro));
	ro.seeds = c->o.nodes;
	ro.connect_timeout_ms = c->o.deadline_ms < 1000 ? 1000 :
				c->o.deadline_ms;
	if (rc_open(&ro, &rc)) {
		kvd_log(KVD_ERR, "cluster: cannot use nodes %s", c->o.nodes);
		return NULL;
	}
	pthread_mutex_lock(&c->flock);
	while (!c->stop) {
		struct kvd_cluster_fetch *jobs[FETCH_BATCH];
		unsigned int nj = 0;
		uint64_t bytes;

		if (!c->fq) {
			struct timespec ts;
			uint64_t at = kvd_now_ns() + REFRESH_MS * 1000000ULL;

			pthread_mutex_unlock(&c->flock);
			/* idle: keep the map fresh (a failover moves slots) */
			maybe_refresh(rc, &last_refresh, 100);
			rc_counters(c, rc, c->rc_f);
			pthread_mutex_lock(&c->flock);
			if (c->fq || c->stop)
				continue;
			ts.tv_sec = (time_t)(at / 1000000000ULL);
			ts.tv_nsec = (long)(at % 1000000000ULL);
			pthread_cond_timedwait(&c->fcond, &c->flock, &ts);
			continue;
		}
		/* a round holds at most fetch_bytes of replies (and one
		 * lookup, whatever its size) */
		for (bytes = 0; c->fq && nj < FETCH_BATCH; nj++) {
			uint64_t b = (uint64_t)c->fq->n *
				     (c->fq->m.used_bytes + 4096);

			if (nj && bytes + b > c->o.fetch_bytes)
				break;
			bytes += b;
			jobs[nj] = c->fq;
			c->fq = c->fq->next;
			c->fq_n--;
		}
		if (!c->fq)
			c->fq_tail = NULL;
		pthread_mutex_unlock(&c->flock);
		/* busy too: a failover must not wait for a quiet moment */
		maybe_refresh(rc, &last_refresh, 50);
		fetch_round(c, rc, jobs, nj);
		rc_counters(c, rc, c->rc_f);
		pthread_mutex_lock(&c->flock);
	}
	/* whoever still waits gives up by its deadline */
	while (c->fq) {
		struct kvd_cluster_fetch *f = c->fq;

		c->fq = f->next;
		f->done = true;
		pthread_cond_signal(&f->cv);
		fetch_put(f);
	}
	c->fq_tail = NULL;
	c->fq_n = 0;
	pthread_mutex_unlock(&c->flock);
	rc_close(rc);
	return NULL;
}

/* ---- the store thread ----------------------------------------------------------------- */

struct wbuf {
	char *s;
	size_t len, cap;
	bool bad;
};

static void __attribute__((format(printf, 2, 3)))
wprintf(struct wbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->bad)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->bad = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t cap = (b->cap + (size_t)n + 1) * 2;
			char *s = realloc(b->s, cap);

			if (!s) {
				b->bad = true;
				return;
			}
			b->s = s;
			b->cap = cap;
		}
	}
}

/* A JSON string (names from clients: escape everything). */
static void wjson(struct wbuf *b, const char *s)
{
	wprintf(b, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			wprintf(b, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			wprintf(b, "\\u%04x", ch);
		else
			wprintf(b, "%c", ch);
	}
	wprintf(b, "\"");
}

static const char *dtype_name(uint32_t d)
{
	static const char *const n[] = { "?", "bf16", "fp8", "int8", "int4" };

	return d < 5 ? n[d] : "?";
}

/*
 * The heartbeat, a hash: "json" (everything, for people and tools) and
 * flat fields for routers in C: free, capacity, used, backed, block_bytes
 * (the top pool), prefix_entries, time_ms, epoch, stream, and models (one
 * line per model: "<identity> <tokens per block> <name>").
 */
static int heartbeat(struct kvd_cluster *c, struct wbuf *json,
		     struct wbuf *models, struct kvp_tier_rec *top)
{
	struct kvd *d = c->d;
	struct kvp_tier_rec tiers[KVD_MAX_TIERS];
	struct kvp_tenant_rec *ten;
	struct kvp_cluster_status st;
	struct timespec rt;
	uint32_t total, i;
	int nt, n;

	n = kvd_fill_tier_list(d, tiers, 0, KVD_MAX_TIERS, &total);
	if (n <= 0)
		return -EIO;
	*top = tiers[0];
	clock_gettime(CLOCK_REALTIME, &rt);
	kvd_cluster_status(d, &st);
	wprintf(json, "{\"node\":\"%s\",\"time_ms\":%" PRIu64 ",\"epoch\":%"
		PRIu64 ",\"stream\":\"kvpool:events:%s\",\"pools\":[",
		c->node, (uint64_t)rt.tv_sec * 1000 +
		(uint64_t)rt.tv_nsec / 1000000, c->epoch, c->node);
	for (i = 0; i < (uint32_t)n; i++) {
		const struct kvp_pool_rec *p = &tiers[i].pool;

		wprintf(json, "%s{\"name\":\"%.*s\",\"kind\":\"%s\","
			"\"block_bytes\":%" PRIu64 ",\"capacity\":%u,"
			"\"backed\":%u,\"used\":%u,\"free\":%u}", i ? "," : "",
			KVP_NAME_LEN, p->name,
			kvd_tier_kind_name(tiers[i].kind), p->block_bytes,
			p->capacity, p->backed, p->used,
			p->capacity - p->used);
	}
	wprintf(json, "],\"tenants\":[");
	ten = calloc(256, sizeof(*ten));
	nt = ten ? kvd_tenant_list(d->top, ten, 256) : 0;
	for (i = 0; nt > 0 && i < (uint32_t)nt && i < 256; i++) {
		wprintf(json, "%s{\"name\":\"%.*s\",\"max\":", i ? "," : "",
			KVP_NAME_LEN, ten[i].name);
		if (ten[i].max == KVPOOL_UNLIMITED)
			wprintf(json, "\"max\"");
		else
			wprintf(json, "%u", ten[i].max);
		wprintf(json, ",\"min\":%u,\"current\":%u,\"cluster\":%s}",
			ten[i].min, ten[i].current,
			key_of(c, ten[i].name) ? "true" : "false");
	}
	free(ten);
	wprintf(json, "],\"prefix_entries\":%u,\"models\":[",
		kvd_prefix_entries(d));
	pthread_mutex_lock(&c->mlock);
	for (i = 0; i < c->nmodels; i++) {
		const struct cl_model *m = &c->models[i];
		char id[33];

		kvc_hex(id, &m->id);
		wprintf(json, "%s{\"name\":", i ? "," : "");
		wjson(json, m->name);
		wprintf(json, ",\"id\":\"%s\",\"layers\":%u,\"kv_heads\":%u,"
			"\"head_dim\":%u,\"dtype\":\"%s\","
			"\"tokens_per_block\":%u,\"block_bytes\":%" PRIu64 "}",
			id, m->layers, m->kv_heads, m->head_dim,
			dtype_name(m->dtype), m->tokens_per_block,
			m->block_bytes);
		/* names are free text: the line ends at the first newline */
		wprintf(models, "%s %u ", id, m->tokens_per_block);
		{
			const char *s;

			for (s = m->name; *s && *s != '\n'; s++)
				wprintf(models, "%c", *s);
		}
		wprintf(models, "\n");
	}
	pthread_mutex_unlock(&c->mlock);
	wprintf(json, "],\"cluster\":{\"policy\":\"%s\",\"fetch_hits\":%"
		PRIu64 ",\"fetch_absent\":%" PRIu64 ",\"put_blocks\":%" PRIu64
		"}}", policy_names[c->o.policy], st.fetch_hits,
		st.fetch_absent, st.put_blocks);
	return json->bad || models->bad ? -ENOMEM : 0;
}

/* The arguments of one command, kept until the round is done. */
struct wcmd {
	const char *argv[12];
	size_t len[12];
	char *owned;			/* freed after the round */
	int kind;			/* what it counts as */
	uint32_t nkeys;			/* events: keys in it */
	uint32_t ev_from;		/* events: its first in evs[] */
	struct cl_put *put;
};

enum { W_PUT, W_EVENT, W_HEARTBEAT, W_RESET, W_OTHER };

static void warg(struct wcmd *w, struct rc_cmd *cmd, const char *s, size_t n)
{
	w->argv[cmd->argc] = s;
	w->len[cmd->argc] = n;
	cmd->argc++;
}

static void wstr(struct wcmd *w, struct rc_cmd *cmd, const char *s)
{
	warg(w, cmd, s, strlen(s));
}

static void wcmd_init(struct wcmd *w, struct rc_cmd *cmd, int kind, int key)
{
	memset(w, 0, sizeof(*w));
	memset(cmd, 0, sizeof(*cmd));
	cmd->argv = w->argv;
	cmd->argvlen = w->len;
	cmd->key = key;
	w->kind = kind;
}

static bool reply_ok(const struct rc_cmd *cmd)
{
	return cmd->reply && cmd->reply->type != REDIS_REPLY_ERROR;
}

/* Worth another round: the cluster was in a failover, forming, or slow. */
static bool transient(const struct rc_cmd *cmd)
{
	return !cmd->reply && (cmd->err == -EAGAIN ||
			       cmd->err == -EHOSTUNREACH ||
			       cmd->err == -ECONNRESET ||
			       cmd->err == -ETIMEDOUT);
}

static bool reply_oom(const struct rc_cmd *cmd)
{
	return cmd->reply && cmd->reply->type == REDIS_REPLY_ERROR &&
	       cmd->reply->len >= 3 && !memcmp(cmd->reply->str, "OOM", 3);
}

/* Put evs[0..n) back in front of the event queue, in order. */
static void ev_unshift(struct kvd_cluster *c, const struct cl_ev *evs,
		       uint32_t n)
{
	uint32_t k, lost = 0;

	pthread_mutex_lock(&c->wlock);
	for (k = n; k-- > 0;) {
		if (c->ev_n == EV_MAX) {
			lost = k + 1;
			break;
		}
		c->ev_head = (c->ev_head + EV_MAX - 1) % EV_MAX;
		c->ev[c->ev_head] = evs[k];
		c->ev_n++;
	}
	pthread_mutex_unlock(&c->wlock);
	if (lost)
		count(c, &c->st.events_dropped, lost);
}

static void *store_main(void *arg)
{
	struct kvd_cluster *c = arg;
	char stream[96], nodekey[96], maxlen[24], ttl[24], hbttl[24];
	struct rc_cluster *rc;
	struct rc_opts ro;
	uint64_t last_refresh = 0, next_hb = 0, retry_at = 0;
	bool reset_done = false;
	size_t cap = PUT_BATCH + XADD_MAX + 8;
	struct wcmd *w = calloc(cap, sizeof(*w));
	struct rc_cmd *cmds = calloc(cap, sizeof(*cmds));
	struct cl_ev *evs = malloc(EV_MAX * sizeof(*evs));

	memset(&ro, 0, sizeof(ro));
	ro.seeds = c->o.nodes;
	if (!w || !cmds || !evs || rc_open(&ro, &rc)) {
		kvd_log(KVD_ERR, "cluster: the store thread cannot start");
		free(w);
		free(cmds);
		free(evs);
		return NULL;
	}
	snprintf(stream, sizeof(stream), "kvpool:events:%s", c->node);
	snprintf(nodekey, sizeof(nodekey), "kvpool:node:%s", c->node);
	snprintf(maxlen, sizeof(maxlen), "%u", c->o.stream_maxlen);
	snprintf(ttl, sizeof(ttl), "%u", c->o.value_ttl_s);
	snprintf(hbttl, sizeof(hbttl), "%u", c->o.heartbeat_ms * 3);
	while (!c->stop) {
		struct cl_put *puts = NULL, *q;
		uint32_t nev = 0, i, e, nx;
		uint64_t now, pb = 0, t0;
		size_t n = 0;
		struct wbuf json = { 0 }, models = { 0 };
		struct kvp_tier_rec top;
		bool hb, up;

		pthread_mutex_lock(&c->wlock);
		now = kvd_now_ns();
		/* nothing to send (or no map): until the heartbeat is due,
		 * something is queued, or REFRESH_MS for the map */
		if (!c->stop && ((!c->pq && !c->ev_n) || now < retry_at ||
				 !rc_slots_covered(rc)) && now < next_hb) {
			struct timespec ts;
			uint64_t at = next_hb < now + REFRESH_MS * 1000000ULL ?
				      next_hb : now + REFRESH_MS * 1000000ULL;

			if (retry_at > now && retry_at < at)
				at = retry_at;
			ts.tv_sec = (time_t)(at / 1000000000ULL);
			ts.tv_nsec = (long)(at % 1000000000ULL);
			pthread_cond_timedwait(&c->wcond, &c->wlock, &ts);
			now = kvd_now_ns();
		}
		if (c->stop) {
			pthread_mutex_unlock(&c->wlock);
			break;
		}
		/* no slot map (the cluster is down): values and events wait
		 * in their bounded queues, the heartbeat is tried */
		up = rc_slots_covered(rc) > 0 && reset_done && now >= retry_at;
		/* a batch of values */
		for (i = 0; up && c->pq && i < PUT_BATCH &&
		     (!i || pb + c->pq->len <= PUT_BATCH_BYTES); i++) {
			q = c->pq;
			c->pq = q->next;
			q->next = puts;
			puts = q;
			pb += q->len;
		}
		if (!c->pq)
			c->pq_tail = NULL;
		c->pq_bytes -= pb;
		for (; up && nev < EV_MAX && c->ev_n; nev++) {
			evs[nev] = c->ev[c->ev_head];
			c->ev_head = (c->ev_head + 1) % EV_MAX;
			c->ev_n--;
		}
		pthread_mutex_unlock(&c->wlock);
		maybe_refresh(rc, &last_refresh, 300);
		hb = now >= next_hb;
		if (hb)
			next_hb = now + (uint64_t)c->o.heartbeat_ms * 1000000ULL;

		/* this node's cache starts empty: so does its stream (before
		 * any event of it) */
		if (!reset_done && rc_slots_covered(rc)) {
			char *ep = malloc(24);

			wcmd_init(&w[n], &cmds[n], W_RESET, 1);
			wstr(&w[n], &cmds[n], "DEL");
			wstr(&w[n], &cmds[n], stream);
			n++;
			wcmd_init(&w[n], &cmds[n], W_RESET, 1);
			if (ep)
				snprintf(ep, 24, "%" PRIu64, c->epoch);
			w[n].owned = ep;
			wstr(&w[n], &cmds[n], "XADD");
			wstr(&w[n], &cmds[n], stream);
			wstr(&w[n], &cmds[n], "MAXLEN");
			wstr(&w[n], &cmds[n], "~");
			wstr(&w[n], &cmds[n], maxlen);
			wstr(&w[n], &cmds[n], "*");
			wstr(&w[n], &cmds[n], "op");
			wstr(&w[n], &cmds[n], "reset");
			wstr(&w[n], &cmds[n], "epoch");
			wstr(&w[n], &cmds[n], ep ? ep : "0");
			n++;
		}
		for (q = puts; q; q = q->next) {
			wcmd_init(&w[n], &cmds[n], W_PUT, 1);
			w[n].put = q;
			wstr(&w[n], &cmds[n], "SET");
			wstr(&w[n], &cmds[n], q->key);
			warg(&w[n], &cmds[n], (const char *)q->val, q->len);
			if (c->o.value_ttl_s) {
				wstr(&w[n], &cmds[n], "EX");
				wstr(&w[n], &cmds[n], ttl);
			}
			n++;
		}
		/* events: one stream entry per run of one kind and model:
		 * op stored|removed, model <hex>, keys "<hex> <hex>..." */
		for (i = 0, nx = 0; i < nev; i = e) {
			char *buf;
			size_t kl = 33;
			uint32_t k;

			if (nx++ == XADD_MAX) {
				/* the rest next round, first */
				ev_unshift(c, evs + i, nev - i);
				nev = i;
				break;
			}
			for (e = i + 1; e < nev && e - i < EV_PER_XADD &&
			     evs[e].stored == evs[i].stored &&
			     key_eq(&evs[e].model, &evs[i].model); e++)
				;
			buf = malloc(33 + (size_t)(e - i) * 33);
			if (!buf) {
				count(c, &c->st.events_dropped, e - i);
				continue;
			}
			kvc_hex(buf, &evs[i].model);
			for (k = i; k < e; k++) {
				kvc_hex(buf + kl, &evs[k].key);
				kl += 32;
				buf[kl++] = ' ';
			}
			buf[--kl] = 0;
			wcmd_init(&w[n], &cmds[n], W_EVENT, 1);
			w[n].owned = buf;
			w[n].nkeys = e - i;
			w[n].ev_from = i;
			wstr(&w[n], &cmds[n], "XADD");
			wstr(&w[n], &cmds[n], stream);
			wstr(&w[n], &cmds[n], "MAXLEN");
			wstr(&w[n], &cmds[n], "~");
			wstr(&w[n], &cmds[n], maxlen);
			wstr(&w[n], &cmds[n], "*");
			wstr(&w[n], &cmds[n], "op");
			wstr(&w[n], &cmds[n], evs[i].stored ? "stored" :
					      "removed");
			wstr(&w[n], &cmds[n], "model");
			warg(&w[n], &cmds[n], buf, 32);
			wstr(&w[n], &cmds[n], "keys");
			warg(&w[n], &cmds[n], buf + 33, kl - 33);
			n++;
		}
		if (hb && !heartbeat(c, &json, &models, &top)) {
			char *nums = malloc(6 * 24);

			if (nums) {
				static const char *const f[] = {
					"free", "capacity", "used", "backed",
					"block_bytes", "prefix_entries" };
				uint64_t v[6] = {
					top.pool.capacity - top.pool.used,
					top.pool.capacity, top.pool.used,
					top.pool.backed, top.pool.block_bytes,
					kvd_prefix_entries(c->d) };
				int k;

				wcmd_init(&w[n], &cmds[n], W_HEARTBEAT, 1);
				w[n].owned = nums;
				wstr(&w[n], &cmds[n], "HSET");
				wstr(&w[n], &cmds[n], nodekey);
				wstr(&w[n], &cmds[n], "json");
				warg(&w[n], &cmds[n], json.s, json.len);
				wstr(&w[n], &cmds[n], "models");
				warg(&w[n], &cmds[n], models.s ? models.s : "",
				     models.len);
				for (k = 0; k < 3; k++) {
					snprintf(nums + 24 * k, 24, "%" PRIu64,
						 v[k]);
					wstr(&w[n], &cmds[n], f[k]);
					wstr(&w[n], &cmds[n], nums + 24 * k);
				}
				n++;
				wcmd_init(&w[n], &cmds[n], W_HEARTBEAT, 1);
				wstr(&w[n], &cmds[n], "HSET");
				wstr(&w[n], &cmds[n], nodekey);
				for (k = 3; k < 6; k++) {
					snprintf(nums + 24 * k, 24, "%" PRIu64,
						 v[k]);
					wstr(&w[n], &cmds[n], f[k]);
					wstr(&w[n], &cmds[n], nums + 24 * k);
				}
				wstr(&w[n], &cmds[n], "stream");
				wstr(&w[n], &cmds[n], stream);
				n++;
				wcmd_init(&w[n], &cmds[n], W_HEARTBEAT, 1);
				wstr(&w[n], &cmds[n], "PEXPIRE");
				wstr(&w[n], &cmds[n], nodekey);
				wstr(&w[n], &cmds[n], hbttl);
				n++;
				wcmd_init(&w[n], &cmds[n], W_HEARTBEAT, 1);
				wstr(&w[n], &cmds[n], "SADD");
				wstr(&w[n], &cmds[n], "kvpool:nodes");
				wstr(&w[n], &cmds[n], c->node);
				n++;
			}
		} else if (hb) {
			count(c, &c->st.heartbeat_errors, 1);
		}
		if (n) {
			uint64_t ok = 0, okb = 0, oom = 0, err = 0, tmo = 0;
			uint64_t evs_ok = 0, ev_bad = 0;
			bool hb_ok = true, hb_any = false, reset_ok = true;
			bool logged = false, reset_sent = false;
			struct cl_put *again = NULL;
			uint32_t k, nagain = 0;

			t0 = kvd_now_ns();
			rc_exec(rc, cmds, n, t0 + PUT_DEADLINE_MS * 1000000ULL);
			for (i = 0; i < n; i++) {
				bool good = reply_ok(&cmds[i]);

				if (!good && !logged) {
					logged = true;
					kvd_log(KVD_DEBUG, "cluster: %s: %.*s",
						w[i].argv[0], cmds[i].reply ?
						(int)cmds[i].reply->len :
						(int)strlen(strerror(-cmds[i].err)),
						cmds[i].reply ? cmds[i].reply->str :
						strerror(-cmds[i].err));
				}

				switch (w[i].kind) {
				case W_PUT:
					if (good) {
						ok++;
						okb += w[i].put->len;
					} else if (reply_oom(&cmds[i])) {
						oom++;
					} else if (transient(&cmds[i]) &&
						   ++w[i].put->tries < RETRIES) {
						w[i].put->kind_again = true;
					} else if (cmds[i].err == -ETIMEDOUT) {
						tmo++;
					} else {
						err++;
					}
					break;
				case W_EVENT:
					if (good) {
						evs_ok += w[i].nkeys;
						break;
					}
					/* again next round, in order */
					for (k = 0; k < w[i].nkeys; k++) {
						struct cl_ev *ev =
						      &evs[w[i].ev_from + k];

						if (transient(&cmds[i]) &&
						    ++ev->tries < RETRIES)
							evs[nagain++] = *ev;
						else
							ev_bad++;
					}
					break;
				case W_HEARTBEAT:
					hb_any = true;
					hb_ok = hb_ok && good;
					break;
				case W_RESET:
					reset_sent = true;
					reset_ok = reset_ok && good;
					break;
				}
				if (cmds[i].reply)
					freeReplyObject(cmds[i].reply);
				free(w[i].owned);
			}
			/* what failed for a while only goes first next time */
			pthread_mutex_lock(&c->wlock);
			for (q = puts; q; q = q->next)
				if (q->kind_again && c->pq_bytes + q->len <=
				    c->o.queue_bytes) {
					struct cl_put *cp = malloc(sizeof(*cp) +
								   q->len);

					if (!cp) {
						err++;
						continue;
					}
					memcpy(cp, q, sizeof(*q) + q->len);
					cp->kind_again = false;
					cp->next = again;
					again = cp;
					c->pq_bytes += q->len;
				} else if (q->kind_again) {
					err++;
				}
			if (again || nagain)
				retry_at = kvd_now_ns() +
					   RETRY_MS * 1000000ULL;
			if (again) {
				struct cl_put *t = again;

				while (t->next)
					t = t->next;
				t->next = c->pq;
				if (!c->pq)
					c->pq_tail = t;
				c->pq = again;
			}
			pthread_mutex_unlock(&c->wlock);
			ev_unshift(c, evs, nagain);
			if (!reset_done && reset_sent && reset_ok) {
				reset_done = true;
				kvd_log(KVD_NOTICE, "cluster: node %s joined "
					"(%u masters)", c->node,
					rc_masters(rc));
			}
			pthread_mutex_lock(&c->slock);
			c->st.put_ns += kvd_now_ns() - t0;
			c->st.put_blocks += ok;
			c->st.put_bytes += okb;
			c->st.put_oom += oom;
			c->st.put_errors += err;
			c->st.put_timeouts += tmo;
			c->st.events += evs_ok;
			c->st.events_dropped += ev_bad;
			if (hb_any) {
				if (hb_ok)
					c->st.heartbeats++;
				else
					c->st.heartbeat_errors++;
			}
			pthread_mutex_unlock(&c->slock);
		}
		free(json.s);
		free(models.s);
		while (puts) {
			q = puts->next;
			free(puts);
			puts = q;
		}
		rc_counters(c, rc, c->rc_w);
	}
	pthread_mutex_lock(&c->wlock);
	while (c->pq) {
		struct cl_put *q = c->pq;

		c->pq = q->next;
		free(q);
	}
	c->pq_tail = NULL;
	c->pq_bytes = 0;
	pthread_mutex_unlock(&c->wlock);
	rc_close(rc);
	free(w);
	free(cmds);
	free(evs);
	return NULL;
}

#endif /* KVD_HAVE_HIREDIS */

/* ---- life --------------------------------------------------------------------------- */

int kvd_cluster_init(struct kvd *d)
{
	struct kvd_cluster *c;
	int r;

	if (!d->o.cluster.nodes[0])
		return 0;
#ifndef KVD_HAVE_HIREDIS
	kvd_log(KVD_ERR, "cluster tier (nodes %s): this kvpoold was built "
		"without hiredis (libhiredis-dev) and has no cluster client",
		d->o.cluster.nodes);
	return -EOPNOTSUPP;
#endif
#ifndef KVD_HAVE_XXHASH
	kvd_log(KVD_ERR, "cluster tier: this kvpoold was built without "
		"libxxhash: its prefix keys would not match other nodes'");
	return -EOPNOTSUPP;
#endif
	if (d->o.prefix_hash_bits != 128) {
		kvd_log(KVD_ERR, "cluster tier: --prefix-hash-bits must be 128");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->d = d;
	c->o = d->o.cluster;
	c->epoch = d->epoch;
	if (c->o.name[0]) {
		snprintf(c->node, sizeof(c->node), "%s", c->o.name);
	} else if (gethostname(c->node, sizeof(c->node) - 1)) {
		snprintf(c->node, sizeof(c->node), "kvpoold");
	}
	c->ev = calloc(EV_MAX, sizeof(*c->ev));
	if (!c->ev) {
		free(c);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->mlock, NULL);
	pthread_mutex_init(&c->flock, NULL);
	pthread_mutex_init(&c->wlock, NULL);
	pthread_mutex_init(&c->slock, NULL);
	pthread_cond_init(&c->fcond, NULL);
	pthread_cond_init(&c->wcond, NULL);
	r = load_keys(c);
	if (r) {
		free(c->ev);
		free(c->keys);
		free(c);
		return r;
	}
	c->st.state = KVP_CLUSTER_DOWN;
	d->cluster = c;
	kvd_log(KVD_NOTICE, "cluster tier: node %s, nodes %s, policy %s, "
		"deadline %u ms", c->node, c->o.nodes,
		policy_names[c->o.policy], c->o.deadline_ms);
	return 0;
}

int kvd_cluster_start(struct kvd *d)
{
#ifdef KVD_HAVE_HIREDIS
	struct kvd_cluster *c = d->cluster;
	int r;

	if (!c)
		return 0;
	r = pthread_create(&c->fth, NULL, fetch_main, c);
	if (r)
		return -r;
	c->fth_on = true;
	r = pthread_create(&c->wth, NULL, store_main, c);
	if (r)
		return -r;
	c->wth_on = true;
#else
	(void)d;
#endif
	return 0;
}

void kvd_cluster_stop(struct kvd *d)
{
	struct kvd_cluster *c = d->cluster;

	if (!c)
		return;
	pthread_mutex_lock(&c->flock);
	c->stop = 1;
	pthread_cond_broadcast(&c->fcond);
	pthread_mutex_unlock(&c->flock);
	pthread_mutex_lock(&c->wlock);
	pthread_cond_broadcast(&c->wcond);
	pthread_mutex_unlock(&c->wlock);
	if (c->fth_on)
		pthread_join(c->fth, NULL);
	if (c->wth_on)
		pthread_join(c->wth, NULL);
	d->cluster = NULL;
	memset(c->keys, 0, c->nkeys * sizeof(*c->keys));
	free(c->keys);
	free(c->ev);
	free(c);
}
