// SPDX-License-Identifier: MIT
/*
 * tier_dram.c - a lower tier in host memory ("dram").
 *
 * Like the cpu backend's pool (hostmem.c): one memfd for the whole
 * capacity, mapped once without access; a grow makes chunks read-write
 * and populates them, a shrink punches them out and makes them
 * inaccessible, so an idle tier holds no memory, and the memfd is kept for
 * a restarted daemon.  On the cuda backend every chunk is also
 * page-locked (cuMemHostRegister, one registration per chunk) when it is
 * mapped and unlocked before it goes, so that copies between it and the
 * GPU are DMA on the swap worker's stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "tier.h"
#include "hostmem.h"

struct dram_priv {
	struct kvd_hostmem m;
	uint8_t *base;
	uint64_t bytes;		/* reserved */
	uint64_t page;
	bool pin;		/* the backend page-locks chunks */
};

static struct dram_priv *P(struct kvd_pool *p)
{
	return p->priv;
}

static int dram_init(struct kvd_pool *p, uint64_t *align)
{
	struct dram_priv *dp = calloc(1, sizeof(*dp));
	int r;

	if (!dp)
		return -ENOMEM;
	r = kvd_hostmem_init(&dp->m, p, (uint64_t)p->capacity * p->block_bytes);
	if (r) {
		free(dp);
		return r;
	}
	dp->base = dp->m.base;
	dp->bytes = dp->m.bytes;
	dp->page = dp->m.page;
	dp->pin = p->d->be->host_pin != NULL;
	p->priv = dp;
	*align = dp->page;
	return 0;
}

static void range(struct kvd_pool *p, uint32_t from, uint32_t to,
		  uint64_t *off, uint64_t *len)
{
	struct dram_priv *dp = P(p);
	uint64_t a = (uint64_t)from * p->block_bytes;
	uint64_t b = (uint64_t)to * p->block_bytes;

	b = (b + dp->page - 1) / dp->page * dp->page;
	if (b > dp->bytes)
		b = dp->bytes;
	*off = a;
	*len = b > a ? b - a : 0;
}

static void unpin(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	struct dram_priv *dp = P(p);
	uint64_t off, len;
	uint32_t c;

	if (!dp->pin)
		return;
	for (c = from; c < to; c += p->chunk_blocks) {
		uint32_t e = c + p->chunk_blocks < to ? c + p->chunk_blocks : to;

		range(p, c, e, &off, &len);
		if (len)
			p->d->be->host_unpin(p->d, dp->base + off, len);
	}
}

static int dram_unmap(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	struct dram_priv *dp = P(p);
	uint64_t off, len;

	unpin(p, from, to);
	range(p, from, to, &off, &len);
	return kvd_hostmem_unmap(&dp->m, off, len);
}

static int dram_map(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	struct dram_priv *dp = P(p);
	uint64_t off, len;
	uint32_t c;
	int r;

	range(p, from, to, &off, &len);
	r = kvd_hostmem_map(&dp->m, off, len);
	if (r || !dp->pin)
		return r;
	/* One registration per chunk: a shrink unregisters whole chunks. */
	for (c = from; c < to; c += p->chunk_blocks) {
		uint32_t e = c + p->chunk_blocks < to ? c + p->chunk_blocks : to;
		uint64_t o, l;

		range(p, c, e, &o, &l);
		r = l ? p->d->be->host_pin(p->d, dp->base + o, l) : 0;
		if (r) {
			if (c > from)
				dram_unmap(p, from, c);
			range(p, c, to, &o, &l);
			kvd_hostmem_unmap(&dp->m, o, l);
			return r;
		}
	}
	return 0;
}

/* The pages stay in the memfd: kept for a restarted daemon, or freed
 * with its last reference. */
static void dram_fini(struct kvd_pool *p)
{
	struct dram_priv *dp = P(p);

	if (!dp)
		return;
	if (p->mapped)
		unpin(p, 0, p->mapped);
	kvd_hostmem_fini(&dp->m);
	free(dp);
	p->priv = NULL;
}

static void *dram_host_ptr(struct kvd_pool *p, uint32_t block)
{
	return P(p)->base + (uint64_t)block * p->block_bytes;
}

static uint32_t dram_flags(struct kvd_pool *p)
{
	return P(p) && P(p)->pin ? KVP_TIER_F_PINNED : 0;
}

const struct kvd_tier_ops kvd_tier_dram = {
	.name = "dram",
	.init = dram_init,
	.fini = dram_fini,
	.map = dram_map,
	.unmap = dram_unmap,
	.host_ptr = dram_host_ptr,
	.flags = dram_flags,
};
