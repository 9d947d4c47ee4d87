// SPDX-License-Identifier: MIT
/*
 * restart.c - what a restarted kvpoold keeps of the one before it: the
 * metadata region and the decision to use kept memory (restart.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"
#include "keep.h"
#include "ledger.h"
#include "restart.h"
#include "tier.h"
#include "scrub.h"

#define META_MAGIC	"KVPMETA"	/* and a NUL: 8 bytes */
#define META_BYTES	4096

struct meta_pool {
	char name[KVPOOL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t kind;			/* KVP_TIER_* */
	uint32_t pad;
};

struct meta_head {
	char magic[8];
	uint32_t version;
	uint32_t head_bytes;		/* sizeof(struct meta_head) */
	uint64_t data_epoch;
	char backend[16];
	uint32_t mode;			/* KVP_MODE_* */
	uint32_t npools;
	struct meta_pool pools[KVD_MAX_TIERS];
	uint64_t sum;			/* over the bytes before it */
};

struct meta {
	struct meta_head h;
	/* live words, outside the checksum */
	_Atomic uint64_t edits;		/* in-place edits in flight */
	_Atomic uint64_t lives;		/* starts on this region */
};

_Static_assert(sizeof(struct meta) <= META_BYTES, "meta fits its page");

static struct {
	bool decided;
	bool kept;			/* the top pool had kept memory */
	bool preserved;
	bool pool_ok[KVD_MAX_TIERS];	/* this pool's kept memory is used */
	bool seen[KVD_MAX_TIERS];
	bool finished;			/* kvd_restart_done() ran */
	bool lost;			/* part of it could not be taken */
	char why[96];
	struct meta_head old;
	uint64_t old_lives;
	struct meta *cur;		/* this life's region (mapped) */
	uint64_t start_ns, serving_ns;
	uint64_t blocks, bytes;
	uint64_t prefix_entries;
} R;

static uint64_t head_sum(const struct meta_head *h)
{
	return kvd_restart_sum(h, offsetof(struct meta_head, sum));
}

bool kvd_restart_preserved(const struct kvd_pool *p)
{
	return p->tier < KVD_MAX_TIERS && R.pool_ok[p->tier];
}

int kvd_restart_begin(struct kvd *d)
{
	struct kvpool_features f;
	int fd;

	memset(&R, 0, sizeof(R));
	R.start_ns = kvd_now_ns();
	kvd_keep_set_store(KVD_KEEP_STORE_NONE);
	if (d->o.keep_off) {
		kvd_log(KVD_NOTICE, "kept memory off: pool contents die with "
			"the daemon");
		return 0;
	}
	if (d->mode != KVP_MODE_MODULE) {
		/* In-process: under a service manager's fd store, with the
		 * ledger's journal (ledger_keep.c); else it dies with us. */
		int n = kvd_keep_load_listen();

		if (kvd_keep_sd_available()) {
			kvd_keep_set_store(KVD_KEEP_STORE_SYSTEMD);
			if (n > 0)
				kvd_log(KVD_NOTICE, "the service manager kept "
					"%d descriptors", n);
		} else {
			kvd_log(KVD_INFO, "no service manager's fd store: "
				"pool contents and leases die with the "
				"daemon");
		}
		return 0;
	}
	fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return 0;	/* ledger.c says why */
	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_DEPOSIT;
	if (!ioctl(fd, KVPOOL_IOC_FEATURES, &f) &&
	    (f.enabled & KVPOOL_FEAT_DEPOSIT))
		kvd_keep_set_store(KVD_KEEP_STORE_MODULE);
	else
		kvd_log(KVD_NOTICE, "the module keeps no descriptors: pool "
			"contents die with the daemon");
	close(fd);
	return 0;
}

/* Stop using kept memory: every pool set up so far starts again zeroed. */
static void refuse(struct kvd *d, const char *why)
{
	unsigned int i;

	if (!R.preserved)
		return;
	kvd_log(KVD_WARN, "kept memory not used: %s; every pool starts "
		"zeroed and clients recompute", why);
	snprintf(R.why, sizeof(R.why), "%s", why);
	R.preserved = false;
	kvd_keep_discard(d, NULL);
	for (i = 0; i < d->npools; i++) {
		if (!R.pool_ok[i])
			continue;
		R.pool_ok[i] = false;
		if (kvd_pool_reinit(&d->pools[i]))
			kvd_log(KVD_ERR, "pool %s: cannot set up fresh memory",
				d->pools[i].name);
	}
}

/* Read and check the region an earlier life kept; "" when it vouches. */
static void judge(struct kvd *d, char *why, size_t n)
{
	struct meta *m;
	int fd = kvd_keep_take(d->top, KVD_KEEP_META, 0);

	if (fd < 0) {
		snprintf(why, n, "no metadata region");
		return;
	}
	m = mmap(NULL, META_BYTES, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(why, n, "metadata region unreadable (%s)",
			 strerror(errno));
		return;
	}
	R.old = m->h;
	R.old_lives = atomic_load(&m->lives);
	if (memcmp(m->h.magic, META_MAGIC, 8))
		snprintf(why, n, "metadata region has a foreign magic");
	else if (m->h.version != KVD_META_VERSION)
		snprintf(why, n, "metadata version %u, this build reads %u",
			 m->h.version, KVD_META_VERSION);
	else if (m->h.head_bytes != sizeof(m->h) ||
		 m->h.sum != head_sum(&m->h))
		snprintf(why, n, "metadata checksum wrong");
	else if (m->h.mode != (uint32_t)d->mode ||
		 strncmp(m->h.backend, d->be->name, sizeof(m->h.backend)))
		snprintf(why, n, "kept by a %s daemon on the %.16s backend",
			 m->h.mode == KVP_MODE_MODULE ? "module" : "in-process",
			 m->h.backend);
	else if (m->h.npools != d->o.ntiers + 1U)
		snprintf(why, n, "kept %u pools, configured %d", m->h.npools,
			 d->o.ntiers + 1);
	else if (atomic_load(&m->edits))
		snprintf(why, n, "%llu in-place edits were in flight",
			 (unsigned long long)atomic_load(&m->edits));
	else
		why[0] = 0;
	munmap(m, META_BYTES);
}

static int geometry_ok(const struct kvd_pool *p, bool chunk)
{
	const struct meta_pool *mp = &R.old.pools[p->tier];

	return !strncmp(mp->name, p->name, KVPOOL_NAME_LEN) &&
	       mp->kind == p->kind && mp->block_bytes == p->block_bytes &&
	       mp->capacity == p->capacity &&
	       (!chunk || mp->chunk_blocks == p->chunk_blocks);
}

/* Module: attach to the orphaned pool now, to read what it kept. */
static int attach_early(struct kvd_pool *p)
{
	struct kvd *d = p->d;
	struct kvpool_features f;
	struct kvpool_pool_attach pa;
	int fd, r;

	fd = open(d->o.device_path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	memset(&f, 0, sizeof(f));
	f.requested = KVD_MODULE_FEATURES | KVPOOL_FEAT_DEPOSIT;
	if (ioctl(fd, KVPOOL_IOC_FEATURES, &f)) {
		r = -errno;
		close(fd);
		return r;
	}
	memset(&pa, 0, sizeof(pa));
	memcpy(pa.name, p->name, KVPOOL_NAME_LEN);
	if (ioctl(fd, KVPOOL_IOC_POOL_ATTACH, &pa)) {
		r = -errno;
		close(fd);
		return r == -ENOENT ? 0 : r;	/* none: ledger.c creates it */
	}
	p->owner_fd = fd;
	p->attached_epoch = pa.epoch;
	r = kvd_ledger_geometry(p);	/* before its memory is set up */
	if (r < 0)
		return r;
	r = kvd_keep_load_module(p);
	if (r < 0) {
		kvd_log(KVD_WARN, "pool %s: cannot read its kept descriptors: "
			"%s", p->name, strerror(-r));
		return 0;
	}
	return 0;
}

int kvd_restart_pool(struct kvd_pool *p)
{
	struct kvd *d = p->d;
	char why[96];
	int r;

	if (p->tier >= KVD_MAX_TIERS || R.seen[p->tier])
		return 0;
	R.seen[p->tier] = true;
	if (kvd_keep_store() == KVD_KEEP_STORE_MODULE) {
		r = attach_early(p);
		if (r) {
			kvd_log(KVD_ERR, "pool %s: %s", p->name,
				r == -EBUSY ? "another kvpoold owns it" :
				strerror(-r));
			return r;
		}
	}
	if (p == d->top && !R.decided) {
		R.decided = true;
		R.kept = kvd_keep_has(p);
		if (R.kept) {
			judge(d, why, sizeof(why));
			R.preserved = !why[0];
			if (why[0]) {
				kvd_log(KVD_WARN, "kept memory not used: %s; "
					"every pool starts zeroed and clients "
					"recompute", why);
				snprintf(R.why, sizeof(R.why), "%s", why);
			}
		}
	}
	if (R.preserved && !geometry_ok(p, false)) {
		snprintf(why, sizeof(why), "pool %s changed its geometry",
			 p->name);
		refuse(d, why);
	}
	R.pool_ok[p->tier] = R.preserved;
	if (!R.preserved)
		kvd_keep_discard(d, p);
	return 0;
}

int kvd_restart_pool_ready(struct kvd_pool *p)
{
	char why[96];

	if (!kvd_restart_preserved(p) || geometry_ok(p, true))
		return 0;
	snprintf(why, sizeof(why), "pool %s changed its chunk size", p->name);
	refuse(p->d, why);
	return 0;
}

static int region_new(struct kvd *d, uint64_t epoch)
{
	struct meta *m;
	unsigned int i;
	int fd, r;

	fd = kvd_keep_memfd("kvpool-meta", META_BYTES, (void **)&m);
	if (fd < 0)
		return fd;
	memcpy(m->h.magic, META_MAGIC, 8);
	m->h.version = KVD_META_VERSION;
	m->h.head_bytes = sizeof(m->h);
	m->h.data_epoch = epoch;
	snprintf(m->h.backend, sizeof(m->h.backend), "%s", d->be->name);
	m->h.mode = (uint32_t)d->mode;
	m->h.npools = d->npools;
	for (i = 0; i < d->npools && i < KVD_MAX_TIERS; i++) {
		struct meta_pool *mp = &m->h.pools[i];
		const struct kvd_pool *p = &d->pools[i];

		memcpy(mp->name, p->name, KVPOOL_NAME_LEN);
		mp->block_bytes = p->block_bytes;
		mp->capacity = p->capacity;
		mp->chunk_blocks = p->chunk_blocks;
		mp->kind = p->kind;
	}
	m->h.sum = head_sum(&m->h);
	atomic_store(&m->lives, R.preserved ? R.old_lives + 1 : 1);
	r = kvd_keep_put(d->top, KVD_KEEP_META, 0, fd);
	close(fd);
	if (r) {
		munmap(m, META_BYTES);
		return r;
	}
	R.cur = m;
	return 0;
}

void kvd_restart_lost(struct kvd_pool *p, const char *why)
{
	if (R.finished || !R.preserved || R.lost)
		return;
	R.lost = true;
	snprintf(R.why, sizeof(R.why), "pool %s: %s", p->name, why);
}

/* Every pool is mapped on kept memory, but part of it was lost: drop it
 * all.  Unmapping gives the memory back (a kept chunk or range with it);
 * mapping again gives zeros. */
static void refuse_mapped(struct kvd *d)
{
	unsigned int i;

	kvd_log(KVD_WARN, "kept memory not used: %s; every pool starts "
		"zeroed and clients recompute", R.why);
	R.preserved = false;
	kvd_keep_discard(d, NULL);
	for (i = 0; i < d->npools; i++)
		R.pool_ok[i] = false;
	for (i = 0; i < d->npools; i++) {
		struct kvd_pool *p = &d->pools[i];
		uint32_t n = p->mapped;

		p->mapped = 0;
		if (kvd_pool_reinit(p) || (n && p->ops->map(p, 0, n))) {
			kvd_log(KVD_ERR, "pool %s: cannot map %u fresh blocks",
				p->name, n);
			continue;
		}
		p->mapped = n;
	}
}

int kvd_restart_done(struct kvd *d)
{
	unsigned int i;
	int r = 0;

	if (R.preserved && R.lost)
		refuse_mapped(d);
	R.finished = true;

	for (i = 0; i < d->npools; i++)
		kvd_keep_flush(&d->pools[i]);
	if (R.preserved) {
		d->epoch = R.old.data_epoch;
		if (d->mode == KVP_MODE_INPROC && d->top->pool)
			d->top->pool->epoch = d->epoch;	/* the core's too */
		for (i = 0; i < d->npools; i++) {
			R.blocks += d->pools[i].mapped;
			R.bytes += (uint64_t)d->pools[i].mapped *
				   d->pools[i].block_bytes;
		}
		kvd_log(KVD_NOTICE, "kept memory used: %llu blocks (%llu MiB) "
			"in %u pools, data epoch %llu kept",
			(unsigned long long)R.blocks,
			(unsigned long long)(R.bytes >> 20), d->npools,
			(unsigned long long)d->epoch);
	}
	if (kvd_keep_store() != KVD_KEEP_STORE_NONE)
		r = region_new(d, d->epoch);
	if (r)
		kvd_log(KVD_WARN, "cannot keep the metadata region (%s): pool "
			"contents die with the daemon", strerror(-r));
	return 0;
}

void kvd_restart_serving(struct kvd *d)
{
	(void)d;
	if (!R.serving_ns)
		R.serving_ns = kvd_now_ns();
}

void kvd_restart_edit_begin(struct kvd *d)
{
	(void)d;
	if (R.cur)
		atomic_fetch_add(&R.cur->edits, 1);
}

void kvd_restart_edit_end(struct kvd *d)
{
	(void)d;
	if (R.cur)
		atomic_fetch_sub(&R.cur->edits, 1);
}

void kvd_restart_kept_blocks(struct kvd_pool *p, uint32_t n)
{
	R.blocks += n;
	R.bytes += (uint64_t)n * p->block_bytes;
}

void kvd_restart_prefix(struct kvd *d, uint64_t n)
{
	(void)d;
	R.prefix_entries = n;
}

void kvd_restart_info(struct kvd *d, struct kvp_restart_info *o)
{
	(void)d;
	memset(o, 0, sizeof(*o));
	o->store = (uint32_t)kvd_keep_store();
	o->kept = R.kept;
	o->preserved = R.preserved;
	o->lives = R.cur ? atomic_load(&R.cur->lives) : 0;
	o->blocks = R.blocks;
	o->bytes = R.bytes;
	o->prefix_entries = R.prefix_entries;
	o->resume_ns = R.serving_ns ? R.serving_ns - R.start_ns : 0;
	o->uptime_ns = kvd_now_ns() - R.start_ns;
	snprintf(o->why, sizeof(o->why), "%s", R.why);
}
