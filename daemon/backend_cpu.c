// SPDX-License-Identifier: MIT
/*
 * backend_cpu.c - the cpu backend: pool memory is host memory.
 *
 * The whole capacity is reserved once with mmap(PROT_NONE) (address space
 * only).  A grow makes a range read-write and populates it, so the
 * daemon's resident memory really rises; a shrink drops the pages
 * (MADV_DONTNEED) and makes the range inaccessible again, so it falls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"
#include "tier.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct cpu_priv {
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
	void *m;

	if (!p)
		return -ENOMEM;
	p->page = (uint64_t)sysconf(_SC_PAGESIZE);
	p->bytes = (uint64_t)d->capacity * d->block_bytes;
	p->bytes = (p->bytes + p->page - 1) / p->page * p->page;
	m = mmap(NULL, p->bytes, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		int e = -errno;

		free(p);
		return e;
	}
	p->base = m;
	d->be_priv = p;
	*align = p->page;
	return 0;
}

static void cpu_fini(struct kvd *d)
{
	struct cpu_priv *p = P(d);

	if (!p)
		return;
	munmap(p->base, p->bytes);
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
	struct cpu_priv *p = P(d);
	uint64_t off, len;

	range(d, from, to, &off, &len);
	if (!len)
		return 0;
	if (mprotect(p->base + off, len, PROT_READ | PROT_WRITE))
		return -errno;
	/* Back it now, like cuMemCreate does on a GPU. */
	if (madvise(p->base + off, len, MADV_POPULATE_WRITE)) {
		uint64_t i;

		for (i = 0; i < len; i += p->page)
			((volatile uint8_t *)p->base)[off + i] = 0;
	}
	return 0;
}

static int cpu_unmap(struct kvd *d, uint32_t from, uint32_t to)
{
	struct cpu_priv *p = P(d);
	uint64_t off, len;

	range(d, from, to, &off, &len);
	if (!len)
		return 0;
	if (madvise(p->base + off, len, MADV_DONTNEED))
		return -errno;
	if (mprotect(p->base + off, len, PROT_NONE))
		return -errno;
	return 0;
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
