// SPDX-License-Identifier: MIT
/*
 * backend_cpu.c - the cpu backend: pool memory is host memory.
 *
 * The pool is host memory (hostmem.c): one memfd for the whole capacity,
 * mapped once without access; a grow makes a range read-write and
 * populates it, so the daemon's memory really rises; a shrink punches the
 * range out, so it falls.  The memfd is kept for a restarted daemon.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "tier.h"
#include "hostmem.h"

struct cpu_priv {
	struct kvd_hostmem m;
	uint8_t *base;
	uint64_t bytes;		/* reserved */
	uint64_t page;
};

static struct cpu_priv *P(struct kvd *d)
{
	return d->be_priv;
}

void *kvd_cpu_base(struct kvd *d)
{
	return P(d)->base;
}

static int cpu_probe(void)
{
	return 0;
}

static int cpu_init(struct kvd *d, uint64_t *align)
{
	struct cpu_priv *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	r = kvd_hostmem_init(&p->m, d->top,
			     (uint64_t)d->capacity * d->block_bytes);
	if (r) {
		free(p);
		return r;
	}
	p->base = p->m.base;
	p->bytes = p->m.bytes;
	p->page = p->m.page;
	d->be_priv = p;
	*align = p->page;
	return 0;
}

static void cpu_fini(struct kvd *d)
{
	struct cpu_priv *p = P(d);

	if (!p)
		return;
	kvd_hostmem_fini(&p->m);
	free(p);
	d->be_priv = NULL;
}

static void range(struct kvd *d, uint32_t from, uint32_t to, uint64_t *off,
		  uint64_t *len)
{
	struct cpu_priv *p = P(d);
	uint64_t a = (uint64_t)from * d->block_bytes;
	uint64_t b = (uint64_t)to * d->block_bytes;

	/* chunk sizes are page multiples; only the pool's end may not be */
	b = (b + p->page - 1) / p->page * p->page;
	if (b > p->bytes)
		b = p->bytes;
	*off = a;
	*len = b > a ? b - a : 0;
}

static int cpu_map(struct kvd *d, uint32_t from, uint32_t to)
{
	uint64_t off, len;

	range(d, from, to, &off, &len);
	return kvd_hostmem_map(&P(d)->m, off, len);
}

static int cpu_unmap(struct kvd *d, uint32_t from, uint32_t to)
{
	uint64_t off, len;

	range(d, from, to, &off, &len);
	return kvd_hostmem_unmap(&P(d)->m, off, len);
}

static int cpu_write_kv(struct kvd *d, const struct kvk_layout *l,
			uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			const uint32_t *slots, const float *k, const float *v)
{
	return kvk_write_kv(l, P(d)->base, layer, ntok, blocks, slots, k, v);
}

static int cpu_read_kv(struct kvd *d, const struct kvk_layout *l,
		       uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, float *k, float *v)
{
	return kvk_read_kv(l, P(d)->base, layer, ntok, blocks, slots, k, v);
}

/* The thread pool serves one call at a time; others run single-threaded. */
static struct kvk_cpu *cpu_get(struct kvd *d)
{
	if (d->cpu && !pthread_mutex_trylock(&d->cpu_lock))
		return d->cpu;
	return NULL;
}

static void cpu_put(struct kvd *d, struct kvk_cpu *c)
{
	if (c)
		pthread_mutex_unlock(&d->cpu_lock);
}

static int cpu_decode(struct kvd *d, struct kvk_decode_args *a)
{
	struct kvk_cpu *c = cpu_get(d);
	int r;

	a->pool_base = P(d)->base;
	r = kvk_decode(a, c);
	cpu_put(d, c);
	return r;
}

static int cpu_prefill(struct kvd *d, struct kvk_prefill_args *a)
{
	struct kvk_cpu *c = cpu_get(d);
	int r;

	a->pool_base = P(d)->base;
	r = kvk_prefill(a, c);
	cpu_put(d, c);
	return r;
}

static int cpu_copy(struct kvd *d, const uint32_t *src, const uint32_t *dst,
		    uint32_t n)
{
	return kvk_copy_blocks(P(d)->base, d->block_bytes, d->capacity, src,
			       dst, n);
}

static int cpu_write_kv_flags(struct kvd *d, const struct kvk_layout *l,
			      uint32_t layer, uint32_t ntok,
			      const uint32_t *blocks, const uint32_t *slots,
			      const float *k, const float *v, uint32_t flags)
{
	return kvk_write_kv_flags(l, P(d)->base, layer, ntok, blocks, slots, k,
				  v, flags);
}

static int cpu_splice(struct kvd *d, struct kvk_splice_args *a)
{
	struct kvk_cpu *c = cpu_get(d);
	int r;

	a->pool_base = P(d)->base;
	r = kvk_splice(a, c);
	cpu_put(d, c);
	return r;
}

static int cpu_compact(struct kvd *d, struct kvk_compact_args *a)
{
	struct kvk_cpu *c = cpu_get(d);
	int r;

	a->pool_base = P(d)->base;
	r = kvk_compact(a, c);
	cpu_put(d, c);
	return r;
}

static int cpu_score(struct kvd *d, struct kvk_score_args *a)
{
	struct kvk_cpu *c = cpu_get(d);
	int r;

	a->pool_base = P(d)->base;
	r = kvk_score(a, c);
	cpu_put(d, c);
	return r;
}

/* Swaps read and write the pool in place. */
static void *cpu_host_ptr(struct kvd *d, uint32_t block)
{
	return P(d)->base + (uint64_t)block * d->block_bytes;
}

const struct kvd_backend_ops kvd_backend_cpu = {
	.name = "cpu",
	.probe = cpu_probe,
	.init = cpu_init,
	.fini = cpu_fini,
	.map = cpu_map,
	.unmap = cpu_unmap,
	.write_kv = cpu_write_kv,
	.read_kv = cpu_read_kv,
	.decode = cpu_decode,
	.prefill = cpu_prefill,
	.copy = cpu_copy,
	.write_kv_flags = cpu_write_kv_flags,
	.splice = cpu_splice,
	.compact = cpu_compact,
	.score = cpu_score,
	.host_ptr = cpu_host_ptr,
};
