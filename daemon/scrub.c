// SPDX-License-Identifier: MIT
/*
 * scrub.c - zeroing freed blocks between tenants: per-pool tags of who
 * used each block last, the names behind the tags, and the zeroing itself
 * (see scrub.h for the promise and the tags).
 *
 * When: lazily, the first time another tenant's op names a block, not at
 * release.  In module mode the daemon never sees a release, and a block
 * released and granted again to the same tenant (the common case: one
 * engine's blocks churning) needs no zeroing at all; zeroing on first use
 * costs one memset of the block on the op's path, once per change of
 * hands (Documentation/daemon.rst has the figures).
 *
 * How, per pool: the tier's zero op (a file hole, a memset on the GPU
 * stream) when it has one, else a memset of the host memory.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "scrub.h"
#include "keep.h"

/* A block being zeroed by the claim that holds the pool's scrub lock. */
#define TAG_BUSY	(UINT64_MAX - 1)
/* Blocks zeroed per call of the tier's zero op. */
#define BATCH		64

struct kvd_tags {
	_Atomic uint64_t *tag;		/* per block */
	size_t bytes;			/* of the tag array (mmap) */
	uint32_t n;
	pthread_mutex_t lock;		/* claims that zero, fills */
	_Atomic uint64_t zeroed;	/* blocks zeroed so far */
	_Atomic uint64_t ns;		/* and the time it took */
};

/* ---- tags of one pool ------------------------------------------------- */

void kvd_scrub_pool_fini(struct kvd_pool *p)
{
	struct kvd_tags *t = p->tags;

	if (!t)
		return;
	munmap(t->tag, t->bytes);
	pthread_mutex_destroy(&t->lock);
	free(t);
	p->tags = NULL;
}

/* The tags live in a memfd, kept with the pool's memory (keep.h): a
 * restarted daemon that keeps the memory keeps who used each block. */
static int tags_fd(struct kvd_pool *p, size_t bytes, bool *kept)
{
	struct stat sb;
	int fd = kvd_keep_take(p, KVD_KEEP_TAGS, 0);

	*kept = false;
	if (fd >= 0) {
		if (!fstat(fd, &sb) && (uint64_t)sb.st_size == bytes) {
			*kept = true;
			return fd;
		}
		kvd_log(KVD_ERR, "pool %s: kept tags are not the pool's",
			p->name);
		close(fd);
		return -EIO;
	}
	if (!kvd_keep_enabled(p->d))
		return -ENOENT;		/* nothing keeps them: anonymous */
	fd = memfd_create("kvpool-tags", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int kvd_scrub_pool_init(struct kvd_pool *p)
{
	struct kvd_tags *t = calloc(1, sizeof(*t));
	bool kept;
	uint32_t i;
	void *m;
	int fd;

	kvd_scrub_pool_fini(p);
	if (!t)
		return -ENOMEM;
	/* zero pages until a tag is first written: an idle pool's tags
	 * take no memory */
	t->bytes = ((size_t)p->capacity ? p->capacity : 1) * sizeof(*t->tag);
	t->bytes = (t->bytes + 4095) / 4096 * 4096;
	fd = tags_fd(p, t->bytes, &kept);
	if (fd == -ENOENT || fd == -EFBIG) {
		m = mmap(NULL, t->bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	} else if (fd < 0) {
		free(t);
		return fd;
	} else {
		m = mmap(NULL, t->bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
			 fd, 0);
	}
	if (m == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		free(t);
		return -ENOMEM;
	}
	if (fd >= 0 && !kept)
		kvd_keep_put(p, KVD_KEEP_TAGS, 0, fd);
	if (fd >= 0)
		close(fd);
	t->tag = m;
	t->n = p->capacity;
	/* a block being zeroed when the earlier life ended: unknown */
	for (i = 0; kept && i < t->n; i++)
		if (atomic_load(&t->tag[i]) == TAG_BUSY)
			atomic_store(&t->tag[i], KVD_TAG_UNKNOWN);
	pthread_mutex_init(&t->lock, NULL);
	p->tags = t;
	return 0;
}

static uint64_t tag_load(struct kvd_tags *t, uint32_t b)
{
	return atomic_load_explicit(&t->tag[b], memory_order_acquire);
}

static void tag_store(struct kvd_tags *t, uint32_t b, uint64_t v)
{
	atomic_store_explicit(&t->tag[b], v, memory_order_release);
}

/* Zero blocks b[0..k) of pool p: its tier's op, or host memory. */
static int zero_blocks(struct kvd_pool *p, struct kvd_io *io,
		       const uint32_t *b, uint32_t k)
{
	uint32_t i, j;
	uint8_t *base;
	int r = p->ops->zero ? p->ops->zero(p, io, b, k) : -EOPNOTSUPP;

	if (r != -EOPNOTSUPP)
		return r;
	base = p->ops->host_ptr ? p->ops->host_ptr(p, 0) : NULL;
	if (!base)
		return -EOPNOTSUPP;
	/* runs of consecutive blocks (grants come lowest index first) */
	for (i = 0; i < k; i = j) {
		for (j = i + 1; j < k && b[j] == b[j - 1] + 1; j++)
			;
		memset(base + (uint64_t)b[i] * p->block_bytes, 0,
		       (uint64_t)(j - i) * p->block_bytes);
	}
	return 0;
}

/* Zero the batch, then hand it to @tag (or mark it unknown). */
static int flush(struct kvd_pool *p, struct kvd_io *io, uint64_t tag,
		 const uint32_t *batch, uint32_t k)
{
	struct kvd_tags *t = p->tags;
	uint64_t t0 = kvd_now_ns();
	uint32_t i;
	int r;

	if (!k)
		return 0;
	r = zero_blocks(p, io, batch, k);
	for (i = 0; i < k; i++)
		tag_store(t, batch[i], r ? KVD_TAG_UNKNOWN : tag);
	if (r) {
		kvd_log(KVD_WARN, "%s: zeroing %u blocks: %s", p->name, k,
			strerror(-r));
		return r;
	}
	atomic_fetch_add(&t->zeroed, k);
	atomic_fetch_add(&t->ns, kvd_now_ns() - t0);
	return 0;
}

static int claim_slow(struct kvd_pool *p, struct kvd_io *io, uint64_t tag,
		      const uint32_t *b, uint32_t n, kvd_scrub_keep_fn keep,
		      void *arg)
{
	struct kvd_tags *t = p->tags;
	uint32_t batch[BATCH], k, i;
	int r = 0;

	for (i = 0; i < n; i++)
		if (b[i] >= t->n)
			return -EPERM;
	/* a batch at a time, so that the lock is never held for long */
	for (i = 0; i < n && !r;) {
		pthread_mutex_lock(&t->lock);
		for (k = 0; i < n && k < BATCH; i++) {
			uint32_t x = b[i];
			uint64_t cur = tag_load(t, x);

			/* ours, or in this batch already (named twice) */
			if (cur == tag || cur == TAG_BUSY)
				continue;
			if (keep && keep(arg, x))
				continue;
			if (cur == KVD_TAG_ZERO) {
				tag_store(t, x, tag);
				continue;
			}
			/* another tenant's, or unknown: nobody reads it
			 * until it is zeroed (a connection of ours waits on
			 * the lock) */
			tag_store(t, x, TAG_BUSY);
			batch[k++] = x;
		}
		r = flush(p, io, tag, batch, k);
		pthread_mutex_unlock(&t->lock);
	}
	return r;
}

int kvd_scrub_claim(struct kvd_pool *p, struct kvd_io *io, uint64_t tag,
		    const uint32_t *b, uint32_t n, kvd_scrub_keep_fn keep,
		    void *arg)
{
	struct kvd_tags *t = p->tags;
	uint32_t i;

	if (!t)
		return -ENXIO;
	/* the common case: the caller's own blocks, one load each */
	for (i = 0; i < n; i++)
		if (b[i] >= t->n || tag_load(t, b[i]) != tag)
			break;
	if (i == n)
		return 0;
	return claim_slow(p, io, tag, b + i, n - i, keep, arg);
}

void kvd_scrub_filled(struct kvd_pool *p, uint64_t tag, const uint32_t *b,
		      uint32_t n, bool ok)
{
	struct kvd_tags *t = p->tags;
	uint32_t i;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < n; i++) {
		if (b[i] >= t->n)
			continue;
		if (ok)
			tag_store(t, b[i], tag);
		else if (tag_load(t, b[i]) != tag)
			tag_store(t, b[i], KVD_TAG_UNKNOWN);
	}
	pthread_mutex_unlock(&t->lock);
}

void kvd_scrub_unmapped(struct kvd_pool *p, uint32_t from, uint32_t to,
			bool ok)
{
	struct kvd_tags *t = p->tags;
	uint32_t i;

	if (!t)
		return;
	if (to > t->n)
		to = t->n;
	for (i = from; i < to; i++)
		tag_store(t, i, ok ? KVD_TAG_ZERO : KVD_TAG_UNKNOWN);
}

bool kvd_scrub_owned(struct kvd_pool *p, uint64_t tag, const uint32_t *b,
		     uint32_t n)
{
	struct kvd_tags *t = p->tags;
	uint32_t i;

	if (!t)
		return false;
	for (i = 0; i < n; i++) {
		uint64_t cur;

		if (b[i] >= t->n)
			return false;
		cur = tag_load(t, b[i]);
		if (cur != tag && cur != KVD_TAG_ZERO)
			return false;
	}
	return true;
}

void kvd_scrub_stats(struct kvd_pool *p, uint64_t *blocks, uint64_t *ns)
{
	*blocks = p->tags ? atomic_load(&p->tags->zeroed) : 0;
	*ns = p->tags ? atomic_load(&p->tags->ns) : 0;
}
