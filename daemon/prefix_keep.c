// SPDX-License-Identifier: MIT
/*
 * prefix_keep.c - the region that keeps the prefix cache's index across a
 * restart (see prefix_keep.h): its layout, creation, taking it back and the
 * records' checksums.  What goes into it, and what a restart does with
 * it, is prefix.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "keep.h"
#include "prefix_keep.h"
#include "restart.h"

#define PK_MAGIC	"KVPPFX"	/* and NULs: 8 bytes */

struct pk_head {
	char magic[8];
	uint32_t version;
	uint32_t capacity;		/* slots: the pool's blocks */
	uint32_t slot_bytes;
	uint32_t ntenants, nshared;
	uint32_t pad;
	uint64_t sum;
};

struct pk_region {
	void *map;
	size_t bytes;
	struct pk_head *h;
	struct pk_tenant *tenants;
	struct pk_ns *shared;
	struct pk_slot *slots;
	uint32_t capacity;
};

static size_t head_bytes(void)
{
	return 4096;
}

static size_t region_bytes(uint32_t capacity)
{
	size_t b = head_bytes() + PK_TENANTS * sizeof(struct pk_tenant) +
		   PK_SHARED * sizeof(struct pk_ns) +
		   (size_t)capacity * sizeof(struct pk_slot);

	return (b + 4095) & ~(size_t)4095;
}

static void head_fill(struct pk_head *h, uint32_t capacity)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, PK_MAGIC, sizeof(PK_MAGIC));
	h->version = PK_VERSION;
	h->capacity = capacity;
	h->slot_bytes = sizeof(struct pk_slot);
	h->ntenants = PK_TENANTS;
	h->nshared = PK_SHARED;
	h->sum = kvd_restart_sum(h, offsetof(struct pk_head, sum));
}

static struct pk_region *map_fd(int fd, uint32_t capacity)
{
	struct pk_region *r = calloc(1, sizeof(*r));
	uint8_t *m;

	if (!r)
		return NULL;
	r->bytes = region_bytes(capacity);
	r->map = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		      0);
	if (r->map == MAP_FAILED) {
		free(r);
		return NULL;
	}
	m = r->map;
	r->h = (struct pk_head *)m;
	r->tenants = (struct pk_tenant *)(m + head_bytes());
	r->shared = (struct pk_ns *)(r->tenants + PK_TENANTS);
	r->slots = (struct pk_slot *)(r->shared + PK_SHARED);
	r->capacity = capacity;
	return r;
}

/* The one an earlier life kept, if it has this build's layout. */
static struct pk_region *take(struct kvd *d, uint32_t capacity)
{
	struct pk_head want;
	struct pk_region *r;
	struct stat sb;
	int fd = kvd_keep_take(d->top, KVD_KEEP_PREFIX, 0);

	if (fd < 0)
		return NULL;
	head_fill(&want, capacity);
	if (fstat(fd, &sb) || (uint64_t)sb.st_size != region_bytes(capacity)) {
		kvd_log(KVD_WARN, "prefix cache: the kept index is not this "
			"pool's (%lld bytes): not used",
			(long long)sb.st_size);
		close(fd);
		return NULL;
	}
	r = map_fd(fd, capacity);
	close(fd);
	if (r && memcmp(r->h, &want, sizeof(want))) {
		kvd_log(KVD_WARN, "prefix cache: the kept index has another "
			"layout (version %u, this build %u): not used",
			r->h->version, PK_VERSION);
		pk_close(r);
		return NULL;
	}
	return r;
}

struct pk_region *pk_open(struct kvd *d, uint32_t capacity, bool want_old,
			  bool *restored)
{
	struct pk_region *r = NULL;
	int fd, e;

	*restored = false;
	if (want_old) {
		r = take(d, capacity);
		if (r) {
			*restored = true;
			return r;
		}
	}
	if (!kvd_keep_enabled(d))
		return NULL;
	fd = memfd_create("kvpool-prefix", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		e = -errno;
		goto fail;
	}
	if (ftruncate(fd, (off_t)region_bytes(capacity)) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		e = -errno;
		close(fd);
		goto fail;
	}
	r = map_fd(fd, capacity);
	if (!r) {
		e = -ENOMEM;
		close(fd);
		goto fail;
	}
	head_fill(r->h, capacity);
	e = kvd_keep_put(d->top, KVD_KEEP_PREFIX, 0, fd);
	close(fd);
	if (e) {
		pk_close(r);
		goto fail;
	}
	return r;
fail:
	kvd_log(KVD_WARN, "prefix cache: its index cannot be kept (%s): it "
		"starts empty after a restart", strerror(-e));
	return NULL;
}

void pk_close(struct pk_region *r)
{
	if (!r)
		return;
	munmap(r->map, r->bytes);
	free(r);
}

struct pk_tenant *pk_tenant_at(struct pk_region *r, uint32_t i)
{
	return i < PK_TENANTS ? &r->tenants[i] : NULL;
}

struct pk_ns *pk_ns_at(struct pk_region *r, uint32_t i)
{
	return i < PK_SHARED ? &r->shared[i] : NULL;
}

struct pk_slot *pk_slot_at(struct pk_region *r, uint32_t block)
{
	return block < r->capacity ? &r->slots[block] : NULL;
}

uint32_t pk_capacity(const struct pk_region *r)
{
	return r->capacity;
}

/* Each record: its checksum covers what follows it (a slot: up to its
 * token ids in use). */
static uint64_t rec_sum(const void *rec, size_t bytes)
{
	return kvd_restart_sum((const uint8_t *)rec + sizeof(uint64_t),
			       bytes - sizeof(uint64_t)) | 1;
}

static size_t slot_used(const struct pk_slot *s)
{
	uint32_t n = s->ntok <= PK_TOKENS ? s->ntok : PK_TOKENS;

	return offsetof(struct pk_slot, tokens) + n * sizeof(uint32_t);
}

/* The checksum is written last, after a barrier: a record torn by a kill
 * fails it.  (The region is shared memory; the next life reads it after
 * this process is gone, so a compiler barrier is what matters.) */
void pk_tenant_sum(struct pk_tenant *t)
{
	uint64_t s = rec_sum(t, sizeof(*t));

	__atomic_store_n(&t->sum, s, __ATOMIC_RELEASE);
}

void pk_ns_sum(struct pk_ns *n)
{
	uint64_t s = rec_sum(n, sizeof(*n));

	__atomic_store_n(&n->sum, s, __ATOMIC_RELEASE);
}

void pk_slot_sum(struct pk_slot *s)
{
	uint64_t v = rec_sum(s, slot_used(s));

	__atomic_store_n(&s->sum, v, __ATOMIC_RELEASE);
}

bool pk_tenant_ok(const struct pk_tenant *t)
{
	return t->sum && t->used && t->sum == rec_sum(t, sizeof(*t)) &&
	       memchr(t->name, 0, PK_NAME) && memchr(t->ns, 0, PK_NAME);
}

bool pk_ns_ok(const struct pk_ns *n)
{
	return n->sum && n->used && n->sum == rec_sum(n, sizeof(*n)) &&
	       memchr(n->name, 0, PK_NAME) && n->name[0];
}

bool pk_slot_ok(const struct pk_slot *s)
{
	return s->sum && s->state == PK_SLOT_INDEXED && s->ntok &&
	       s->ntok <= PK_TOKENS && s->tix < PK_TENANTS &&
	       memchr(s->ns, 0, PK_NAME) && s->sum == rec_sum(s, slot_used(s));
}

void pk_clear(struct pk_region *r)
{
	uint32_t i;

	for (i = 0; i < PK_TENANTS; i++)
		memset(&r->tenants[i], 0, sizeof(r->tenants[i]));
	for (i = 0; i < PK_SHARED; i++)
		memset(&r->shared[i], 0, sizeof(r->shared[i]));
	for (i = 0; i < r->capacity; i++)
		if (r->slots[i].sum)
			memset(&r->slots[i], 0, offsetof(struct pk_slot, tokens));
}
