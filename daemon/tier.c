// SPDX-License-Identifier: MIT
/*
 * tier.c - the daemon's pools, one per tier: set-up and tear-down of
 * their memory, and the top pool's memory ops (which hand over to the
 * backend, cpu or cuda).  The --tier specs are read in tier_spec.c.
 *
 * Tiers, top first: the top pool (tier 0, the backend's memory: "gpu0" on
 * cuda, "host" on cpu), then every "dram" tier (host memory,
 * tier_dram.c), then every "nvme" tier (a file, tier_nvme.c).  All share
 * the top pool's block_bytes and chunk_blocks (rounded up to each one's
 * granularity), so that a block swaps one for one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "ledger.h"
#include "tier.h"
#include "scrub.h"
#include "restart.h"

const char *kvd_tier_kind_name(uint32_t kind)
{
	switch (kind) {
	case KVP_TIER_TOP: return "top";
	case KVP_TIER_DRAM: return "dram";
	case KVP_TIER_NVME: return "nvme";
	}
	return "?";
}

/* ---- the top pool: the backend's memory -------------------------------- */

static int top_init(struct kvd_pool *p, uint64_t *align)
{
	struct kvd *d = p->d;
	int r;

	d->block_bytes = p->block_bytes;
	d->capacity = p->capacity;
	d->chunk_blocks = p->chunk_blocks;
	r = d->be->init(d, align);
	/* the backend may size the pool (cuda: from the free memory) */
	if (!r)
		p->capacity = d->capacity;
	return r;
}

static void top_fini(struct kvd_pool *p)
{
	if (p->d->be->fini)
		p->d->be->fini(p->d);
}

static int top_map(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	return p->d->be->map(p->d, from, to);
}

static int top_unmap(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	return p->d->be->unmap(p->d, from, to);
}

static void *top_host_ptr(struct kvd_pool *p, uint32_t block)
{
	return p->d->be->host_ptr ? p->d->be->host_ptr(p->d, block) : NULL;
}

static int top_read(struct kvd_pool *p, struct kvd_io *io,
		    const uint32_t *blocks, void *const *bufs, uint32_t n)
{
	if (!p->d->be->dev_read)
		return -EOPNOTSUPP;
	return p->d->be->dev_read(p->d, io->stream, blocks, bufs, n);
}

static int top_write(struct kvd_pool *p, struct kvd_io *io,
		     const uint32_t *blocks, const void *const *bufs,
		     uint32_t n)
{
	if (!p->d->be->dev_write)
		return -EOPNOTSUPP;
	return p->d->be->dev_write(p->d, io->stream, blocks, bufs, n);
}

static int top_zero(struct kvd_pool *p, struct kvd_io *io,
		    const uint32_t *blocks, uint32_t n)
{
	if (!p->d->be->zero)
		return -EOPNOTSUPP;
	return p->d->be->zero(p->d, io ? io->stream : NULL, blocks, n);
}

static int top_io_open(struct kvd_pool *p, struct kvd_io *io)
{
	io->stream = NULL;
	if (!p->d->be->io_open)
		return 0;
	return p->d->be->io_open(p->d, &io->stream);
}

static void top_io_close(struct kvd_pool *p, struct kvd_io *io)
{
	if (p->d->be->io_close && io->stream)
		p->d->be->io_close(p->d, io->stream);
	io->stream = NULL;
}

const struct kvd_tier_ops kvd_tier_top = {
	.name = "top",
	.init = top_init,
	.fini = top_fini,
	.map = top_map,
	.unmap = top_unmap,
	.host_ptr = top_host_ptr,
	.read = top_read,
	.write = top_write,
	.zero = top_zero,
	.io_open = top_io_open,
	.io_close = top_io_close,
};

/* ---- set-up ----------------------------------------------------------------- */

static void pool_struct_init(struct kvd *d, struct kvd_pool *p,
			     unsigned int tier)
{
	pthread_condattr_t ca;

	memset(p, 0, sizeof(*p));
	p->d = d;
	p->tier = tier;
	p->wake_fd = -1;
	p->owner_fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->waiters, &ca);
	pthread_condattr_destroy(&ca);
}

/* Memory set-up of one pool; a chunk must be a whole number of the
 * pool's mapping units. */
static int pool_mem_init(struct kvd_pool *p)
{
	uint32_t want = p->chunk_blocks;
	uint64_t align = 4096;
	int r;

	r = kvd_restart_pool(p);
	if (r)
		return r;
	r = p->ops->init(p, &align);
	if (r) {
		kvd_log(KVD_ERR, "%s (%s): %s", p->name, p->ops->name,
			strerror(-r));
		return r;
	}
	/* the smallest multiple of align / gcd(block_bytes, align) blocks
	 * from the chunk asked for, within the capacity */
	{
		uint64_t a = p->block_bytes, b = align, step;

		while (b) {
			uint64_t t = a % b;

			a = b;
			b = t;
		}
		step = align / a;
		if (p->chunk_blocks > p->capacity)
			p->chunk_blocks = p->capacity;
		if (!p->chunk_blocks)
			p->chunk_blocks = 1;
		if (step > p->capacity ||
		    (p->chunk_blocks + step - 1) / step * step > p->capacity) {
			kvd_log(KVD_ERR, "%s: a chunk must be a multiple of "
				"%llu blocks of %llu bytes to fill whole %s "
				"mapping units of %llu bytes, but the pool has "
				"%u blocks: raise its capacity or pick a "
				"--block-bytes that divides %llu", p->name,
				(unsigned long long)step,
				(unsigned long long)p->block_bytes,
				p->ops->name, (unsigned long long)align,
				p->capacity, (unsigned long long)align);
			if (p->ops->fini)
				p->ops->fini(p);
			p->priv = NULL;
			if (p == p->d->top)
				p->d->be_priv = NULL;
			return -EINVAL;
		}
		p->chunk_blocks = (uint32_t)((p->chunk_blocks + step - 1) /
					     step * step);
	}
	if (p->chunk_blocks != want)
		kvd_log(KVD_NOTICE, "%s: chunk_blocks %u -> %u (%s granularity "
			"%llu)", p->name, want, p->chunk_blocks,
			p->ops->name, (unsigned long long)align);
	if (p == p->d->top)
		p->d->chunk_blocks = p->chunk_blocks;
	/* fresh memory: every block reads as zeros (kept memory: its
	 * tags come back with it) */
	r = kvd_scrub_pool_init(p);
	if (!r)
		r = kvd_restart_pool_ready(p);
	return r;
}

int kvd_pool_reinit(struct kvd_pool *p)
{
	if (p->ops->fini)
		p->ops->fini(p);
	p->priv = NULL;
	if (p == p->d->top)
		p->d->be_priv = NULL;
	return pool_mem_init(p);
}

static int add_lower(struct kvd *d, const struct kvd_tier_spec *t)
{
	struct kvd_pool *p = &d->pools[d->npools];
	unsigned int i, same = 0;
	int r;

	pool_struct_init(d, p, d->npools);
	p->kind = t->kind;
	p->ops = t->kind == KVP_TIER_DRAM ? &kvd_tier_dram : &kvd_tier_nvme;
	p->block_bytes = d->top->block_bytes;
	p->chunk_blocks = d->top->chunk_blocks;
	if (t->bytes) {
		uint64_t b = t->bytes / p->block_bytes;

		if (!b || b > KVPOOL_MAX_CAPACITY) {
			kvd_log(KVD_ERR, "tier %s: %llu bytes is not 1 to %u "
				"blocks of %llu", kvd_tier_kind_name(t->kind),
				(unsigned long long)t->bytes,
				KVPOOL_MAX_CAPACITY,
				(unsigned long long)p->block_bytes);
			return -EINVAL;
		}
		p->capacity = (uint32_t)b;
	} else {
		p->capacity = t->capacity;
	}
	if (p->chunk_blocks > p->capacity)
		p->chunk_blocks = p->capacity;
	for (i = 1; i < d->npools; i++)
		same += d->pools[i].kind == t->kind;
	if (t->name[0])
		snprintf(p->name, sizeof(p->name), "%s", t->name);
	else if (same)
		snprintf(p->name, sizeof(p->name), "%s%u",
			 kvd_tier_kind_name(t->kind), same);
	else
		snprintf(p->name, sizeof(p->name), "%s",
			 kvd_tier_kind_name(t->kind));
	for (i = 0; i < d->npools; i++)
		if (!strcmp(d->pools[i].name, p->name)) {
			kvd_log(KVD_ERR, "two pools named %s", p->name);
			return -EEXIST;
		}
	memcpy(p->path, t->path, sizeof(p->path));	/* NUL within */
	p->path[sizeof(p->path) - 1] = 0;
	r = kvd_backing_init(p);
	if (r)
		return r;
	d->npools++;
	return pool_mem_init(p);
}

int kvd_pools_init(struct kvd *d)
{
	struct kvd_pool *top = &d->pools[0];
	uint32_t kinds[] = { KVP_TIER_DRAM, KVP_TIER_NVME };
	unsigned int k;
	int i, r;

	pool_struct_init(d, top, 0);
	r = kvd_backing_init(top);
	if (r)
		return r;
	d->top = top;
	d->npools = 1;
	top->kind = KVP_TIER_TOP;
	top->ops = &kvd_tier_top;
	snprintf(top->name, sizeof(top->name), "%s",
		 d->o.pool && d->o.pool[0] ? d->o.pool :
		 d->be == &kvd_backend_cuda ? "gpu0" : "host");
	top->block_bytes = d->o.block_bytes;
	top->capacity = d->o.capacity;
	top->chunk_blocks = d->o.chunk_blocks;
	top->backing_limit = d->o.backing_limit;
	r = pool_mem_init(top);
	if (r)
		return r;
	/* dram tiers first, then nvme ones: the order swaps go down. */
	for (k = 0; k < 2; k++)
		for (i = 0; i < d->o.ntiers; i++) {
			if (d->o.tiers[i].kind != kinds[k])
				continue;
			r = add_lower(d, &d->o.tiers[i]);
			if (r)
				return r;
		}
	return 0;
}

void kvd_pools_fini(struct kvd *d)
{
	unsigned int i;

	for (i = d->npools; i-- > 0;) {
		struct kvd_pool *p = &d->pools[i];
		uint64_t zeroed, ns;

		kvd_scrub_stats(p, &zeroed, &ns);
		if (zeroed)
			kvd_log(KVD_NOTICE, "%s: zeroed %llu blocks (%.1f MiB) "
				"before another tenant used them, in %.3f ms",
				p->name, (unsigned long long)zeroed,
				(double)(zeroed * p->block_bytes) / (1 << 20),
				(double)ns / 1e6);
		if (p->ops && p->ops->fini)
			p->ops->fini(p);
		kvd_scrub_pool_fini(p);
		kvd_backing_fini(p);
	}
}
