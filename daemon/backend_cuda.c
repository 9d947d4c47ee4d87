// SPDX-License-Identifier: MIT
/*
 * backend_cuda.c - the cuda backend: pool memory is GPU memory.
 *
 * The driver API is loaded at run time (kernels/cuda_drv.h), so the same
 * binary runs without a GPU.  The whole capacity is reserved once; each
 * chunk is a cuMemCreate allocation mapped and zeroed on grow, unmapped
 * on shrink (daemon/cuda_chunks.c), with up to --spare-chunks physical
 * chunks kept created while the pool is in use, so that a grow seldom
 * waits for cuMemCreate; spares go back to the device --shrink-delay-ms
 * after the pool last had a chunk mapped.  GPU tenants' device buffers
 * are imported and mapped here (devbuf_import).
 * Kept backing (keep.h): when the daemon keeps descriptors, every chunk
 * is an allocation exported as a POSIX file descriptor and kept as
 * (top pool, KVD_KEEP_CHUNK, chunk number) while it is mapped; a map
 * first takes back what was kept for each chunk and maps it as it is
 * (cuda_chunks.h), refusing, dropping and replacing with zeroed memory
 * what is not an allocation of exactly a chunk's size and properties.
 * struct kvk_cuda is not thread-safe: every op holds p->lock and makes the
 * context current on the calling thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "restart.h"
#include "core.h"
#include "keep.h"
#include "tier.h"
#include "cuda_chunks.h"
#include "turn_lock.h"
#include "../kernels/kvkern_cuda.h"

/*
 * lock serialises the use of struct kvk_cuda (the kernels, their stream
 * and buffers) and the device-buffer imports; data-plane ops hold it for
 * their whole kernel.  It is a turn lock (turn_lock.h): ops take it in
 * the order they ask, so one tenant's connections looping ops keep
 * another's op waiting for at most one op each.  The chunks (ch, reserved, spare_until_ns) are the
 * owner thread's alone (map, unmap, tick, fini) and need no lock: the
 * owner never waits for a client's kernel.
 */
struct cuda_priv {
	struct cuda_drv drv;
	CUdevice dev;
	CUcontext ctx;
	struct kvk_cuda *k;
	struct kvd_turn_lock lock;
	uint64_t gran;
	int reserved;			/* chunks set up (first map) */
	struct kvd_chunks ch;
	struct kvd_chunks_keep keep;	/* the chunks' store (keep.h) */
	bool keep_off_said;		/* "not kept" logged */
	uint64_t spare_until_ns;	/* release spares after (0: keep) */
};

struct cuda_devbuf {
	struct kvd_devbuf b;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
};

/* The driver the probe opened, handed to init (one dlopen, one cuInit). */
static struct cuda_drv probed;

static struct cuda_priv *P(struct kvd *d)
{
	return d->be_priv;
}

static int cuda_probe(void)
{
	int n = 0, r;

	if (!probed.lib) {
		r = cuda_drv_open(&probed);
		if (r)
			return r;
	}
	if (probed.cuInit(0) != CUDA_SUCCESS ||
	    probed.cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1)
		return -ENODEV;
	return 0;
}

static int cuda_init(struct kvd *d, uint64_t *align)
{
	struct cuda_priv *p = calloc(1, sizeof(*p));
	size_t free_b = 0, total_b = 0;
	CUresult cr = CUDA_SUCCESS;
	int r;

	if (!p)
		return -ENOMEM;
	kvd_turn_init(&p->lock);
	if (probed.lib) {
		p->drv = probed;
		memset(&probed, 0, sizeof(probed));
		r = 0;
	} else {
		r = cuda_drv_open(&p->drv);
	}
	if (r) {
		kvd_log(KVD_ERR, "cuda: %s", r == -ENOSYS ?
			"libcuda.so.1 lacks a driver entry point" :
			"no libcuda.so.1");
		goto err_free;
	}
	r = cuda_drv_device_open(&p->drv, d->o.cuda_device, &p->dev, &p->ctx,
				 &cr);
	if (r) {
		kvd_log(KVD_ERR, "cuda: device %d: %s", d->o.cuda_device,
			cuda_drv_strerror(&p->drv, cr));
		goto err_close;
	}
	r = kvd_chunks_granularity(&p->drv, p->dev, &p->gran);
	if (r)
		goto err_dev;
	r = kvk_cuda_init(&p->k, &p->drv, NULL);
	if (r) {
		kvd_log(KVD_ERR, "cuda: cannot load kernels: %s", strerror(-r));
		goto err_dev;
	}
	if (!d->o.capacity_set) {
		/* default capacity: the device's free memory less a reserve */
		uint64_t cap;

		if (p->drv.cuMemGetInfo(&free_b, &total_b) != CUDA_SUCCESS ||
		    free_b <= d->o.reserve_bytes + d->block_bytes) {
			kvd_log(KVD_ERR, "cuda: %zu bytes free, reserve %llu: no "
				"room for a pool (set --capacity or "
				"--reserve-bytes)", free_b,
				(unsigned long long)d->o.reserve_bytes);
			r = -ENOMEM;
			goto err_k;
		}
		cap = (free_b - d->o.reserve_bytes) / d->block_bytes;
		if (cap > KVPOOL_MAX_CAPACITY)
			cap = KVPOOL_MAX_CAPACITY;
		d->capacity = (uint32_t)cap;
		kvd_log(KVD_NOTICE, "cuda: %zu of %zu bytes free, %llu kept in "
			"reserve: capacity %u blocks", free_b, total_b,
			(unsigned long long)d->o.reserve_bytes, d->capacity);
	}
	d->be_priv = p;
	*align = p->gran;
	return 0;
err_k:
	kvk_cuda_free(p->k);
err_dev:
	cuda_drv_device_close(&p->drv, p->dev);
err_close:
	cuda_drv_close(&p->drv);
err_free:
	kvd_turn_destroy(&p->lock);
	free(p);
	return r;
}

/* ---- kept chunks: the store of keep.h, for cuda_chunks.c ---------- */

static bool keeping(struct kvd *d)
{
	return kvd_keep_enabled(d);
}

static int keep_put(void *arg, uint32_t c, int fd)
{
	return kvd_keep_put(((struct kvd *)arg)->top, KVD_KEEP_CHUNK, c, fd);
}

static void keep_drop(void *arg, uint32_t c)
{
	kvd_keep_drop(((struct kvd *)arg)->top, KVD_KEEP_CHUNK, c);
}

static int keep_take(void *arg, uint32_t c)
{
	struct kvd *d = arg;
	int fd = kvd_keep_take(d->top, KVD_KEEP_CHUNK, c);

	/* a chunk the region vouches for must come back */
	if (fd == -ENOENT)
		kvd_restart_lost(d->top, "a mapped chunk was not kept");
	return fd;
}

static void keep_refused(void *arg, uint32_t c, const char *why, int err)
{
	struct kvd *d = arg;
	struct cuda_priv *p = P(d);

	/* a store that keeps nothing: said once */
	if (err == -EOPNOTSUPP) {
		if (!p->keep_off_said)
			kvd_log(KVD_NOTICE, "cuda: the store keeps no chunk: "
				"their memory dies with kvpoold");
		p->keep_off_said = true;
		return;
	}
	/* the same tag must not hand back what was refused again */
	kvd_keep_drop(d->top, KVD_KEEP_CHUNK, c);
	kvd_restart_lost(d->top, why);
	kvd_log(KVD_WARN, "cuda: chunk %u: %s%s%s", c, why,
		err ? ": " : "", err ? strerror(-err) : "");
}

/* Called once chunk_blocks is final (first map). */
static int reserve(struct kvd *d)
{
	struct cuda_priv *p = P(d);
	uint64_t chunk = (uint64_t)d->chunk_blocks * d->block_bytes;
	uint32_t n = (d->capacity + d->chunk_blocks - 1) / d->chunk_blocks;
	int r = kvd_chunks_init(&p->ch, &p->drv, p->dev, chunk, n,
				d->o.spare_chunks);

	if (r) {
		kvd_log(KVD_ERR, "cuda: reserving %u chunks of %llu bytes: %s",
			n, (unsigned long long)chunk, strerror(-r));
		return r;
	}
	p->reserved = 1;
	if (!keeping(d))
		return 0;
	p->keep = (struct kvd_chunks_keep){
		.arg = d, .put = keep_put, .drop = keep_drop,
		.take = keep_take, .refused = keep_refused,
	};
	r = kvd_chunks_keep(&p->ch, &p->keep);
	if (r)	/* once: reserve runs once per daemon */
		kvd_log(KVD_WARN, "cuda: device %d cannot export its memory "
			"as file descriptors (%s): the chunks are not kept, "
			"their memory dies with kvpoold", d->o.cuda_device,
			strerror(-r));
	return 0;
}

static void cuda_fini(struct kvd *d)
{
	struct cuda_priv *p = P(d);

	if (!p)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	if (p->reserved)
		kvd_chunks_fini(&p->ch);
	kvk_cuda_free(p->k);
	cuda_drv_device_close(&p->drv, p->dev);
	cuda_drv_close(&p->drv);
	kvd_turn_destroy(&p->lock);
	free(p);
	d->be_priv = NULL;
}

static int cuda_unmap(struct kvd *d, uint32_t from, uint32_t to)
{
	struct cuda_priv *p = P(d);
	uint32_t c, c0 = from / d->chunk_blocks;
	uint32_t c1 = (to + d->chunk_blocks - 1) / d->chunk_blocks;
	int r = 0, e;

	p->drv.cuCtxSetCurrent(p->ctx);
	for (c = c0; p->reserved && c < c1 && c < p->ch.nchunks; c++) {
		e = kvd_chunks_unmap(&p->ch, c);
		if (e) {
			kvd_log(KVD_WARN, "cuda: unmap chunk %u: %s (kept "
				"mapped, zeroed before reuse)", c, strerror(-e));
			r = r ? r : e;
		}
	}
	if (c0 == 0)	/* nothing mapped: spares last one more delay */
		p->spare_until_ns = kvd_now_ns() +
				    d->o.shrink_delay_ms * 1000000ULL;
	return r;
}

static int cuda_map(struct kvd *d, uint32_t from, uint32_t to)
{
	struct cuda_priv *p = P(d);
	uint32_t c, c0 = from / d->chunk_blocks;
	uint32_t c1 = (to + d->chunk_blocks - 1) / d->chunk_blocks;
	uint64_t used, refused;
	int r = 0;

	p->drv.cuCtxSetCurrent(p->ctx);
	if (!p->reserved) {
		r = reserve(d);
		if (r)
			goto out;
	}
	used = p->ch.kept_used;
	refused = p->ch.kept_refused;
	for (c = c0; c < c1 && c < p->ch.nchunks; c++) {
		r = kvd_chunks_map(&p->ch, c);
		if (r)
			break;
	}
	if (!r && (p->ch.kept_used != used || p->ch.kept_refused != refused))
		kvd_log(KVD_NOTICE, "cuda: map of chunks %u..%u: %llu kept "
			"chunks taken back with their contents, %llu refused "
			"(zeroed)", c0, c1 - 1,
			(unsigned long long)(p->ch.kept_used - used),
			(unsigned long long)(p->ch.kept_refused - refused));
	if (r) {
		if (r != -ENOMEM)
			kvd_log(KVD_WARN, "cuda: map chunk %u: %s", c,
				strerror(-r));
		/* undo this call's chunks (what was kept stays kept) */
		while (c-- > c0)
			kvd_chunks_undo(&p->ch, c);
	}
	p->spare_until_ns = 0;
out:
	return r;
}

/* Spares: refilled while chunks are mapped, released once the pool has
 * been empty for the shrink delay. */
static void cuda_tick(struct kvd *d)
{
	struct cuda_priv *p = P(d);

	if (!p || !p->reserved)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	if (d->top->mapped) {
		if (p->ch.nspare < p->ch.spare_max &&
		    kvd_chunks_fill(&p->ch, p->ch.spare_max) == -ENOMEM)
			kvd_log(KVD_DEBUG, "cuda: no memory for a spare chunk");
	} else if (p->ch.nspare && p->spare_until_ns &&
		   kvd_now_ns() >= p->spare_until_ns) {
		kvd_log(KVD_DEBUG, "cuda: releasing %u spare chunks",
			p->ch.nspare);
		kvd_chunks_trim(&p->ch, 0);
		p->spare_until_ns = 0;
	}
}

static int cuda_layout_ok(struct kvd *d, const struct kvk_layout *l)
{
	if (!kvk_cuda_head_dim_ok(l->head_dim)) {
		kvd_log(KVD_INFO, "cuda: head_dim %u has no attention kernel "
			"(32, 64, 128, 256)", l->head_dim);
		return -EOPNOTSUPP;
	}
	return 0;
}

#define LOCKED(expr) ({ int __r; kvd_turn_lock(&p->lock);	\
	p->drv.cuCtxSetCurrent(p->ctx); __r = (expr);			\
	kvd_turn_unlock(&p->lock); __r; })

static CUdeviceptr base(struct cuda_priv *p)
{
	return p->reserved ? p->ch.base : 0;
}

static int cuda_write_kv(struct kvd *d, const struct kvk_layout *l,
			 uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			 const uint32_t *slots, const float *k, const float *v)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_write_kv(p->k, l, base(p), layer, ntok, blocks,
					slots, k, v));
}

static int cuda_read_kv(struct kvd *d, const struct kvk_layout *l,
			uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			const uint32_t *slots, float *k, float *v)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_read_kv(p->k, l, base(p), layer, ntok, blocks,
				       slots, k, v));
}

static int cuda_decode(struct kvd *d, struct kvk_decode_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_decode(p->k, a));
}

static int cuda_prefill(struct kvd *d, struct kvk_prefill_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_prefill(p->k, a));
}

static int cuda_copy(struct kvd *d, const uint32_t *src, const uint32_t *dst,
		     uint32_t n)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_copy_blocks(p->k, base(p), d->block_bytes,
					   d->capacity, src, dst, n));
}

static int cuda_write_kv_flags(struct kvd *d, const struct kvk_layout *l,
			       uint32_t layer, uint32_t ntok,
			       const uint32_t *blocks, const uint32_t *slots,
			       const float *k, const float *v, uint32_t flags)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_write_kv_flags(p->k, l, base(p), layer, ntok,
					      blocks, slots, k, v, flags));
}

static int cuda_splice(struct kvd *d, struct kvk_splice_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_splice(p->k, a));
}

static int cuda_compact(struct kvd *d, struct kvk_compact_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_compact(p->k, a));
}

static int cuda_score(struct kvd *d, struct kvk_score_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_score(p->k, a));
}

static int cuda_write_kv_dev(struct kvd *d, const struct kvk_layout *l,
			     uint32_t layer, uint32_t ntok,
			     const uint32_t *blocks, const uint32_t *slots,
			     uint64_t k, uint64_t v, int bf16)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_write_kv_dev(p->k, l, base(p), layer, ntok,
					    blocks, slots, k, v, bf16));
}

static int cuda_read_kv_dev(struct kvd *d, const struct kvk_layout *l,
			    uint32_t layer, uint32_t ntok,
			    const uint32_t *blocks, const uint32_t *slots,
			    uint64_t k, uint64_t v)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_read_kv_dev(p->k, l, base(p), layer, ntok,
					   blocks, slots, k, v));
}

static int cuda_attn_dev(struct kvd *d, struct kvk_prefill_args *a,
			 uint64_t q, uint64_t out)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)base(p);
	return LOCKED(kvk_cuda_attn_dev(p->k, a, q, out));
}

/*
 * Import a GPU tenant's exported allocation and map it read-write for
 * this context.  The descriptor stays the caller's.  The size must be a
 * multiple of the imported allocation's own minimum granularity (its
 * properties, not the daemon's pool, decide it) and within the
 * allocation: -EINVAL otherwise.
 */
static int devbuf_import(struct cuda_priv *p, int fd, uint64_t bytes,
			 struct cuda_devbuf *b)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	size_t g = 0;
	CUresult cr;

	if (!bytes)
		return -EINVAL;
	cr = p->drv.cuMemImportFromShareableHandle(&b->h,
			(void *)(intptr_t)fd,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS)
		return cr == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EBADF;
	memset(&prop, 0, sizeof(prop));
	cr = p->drv.cuMemGetAllocationPropertiesFromHandle(&prop, b->h);
	if (cr != CUDA_SUCCESS ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    prop.location.id != p->dev) {
		p->drv.cuMemRelease(b->h);
		return cr != CUDA_SUCCESS ? -EBADF : -EXDEV;
	}
	cr = p->drv.cuMemGetAllocationGranularity(&g, &prop,
			CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (cr != CUDA_SUCCESS || !g || (g & (g - 1)) || bytes % g) {
		p->drv.cuMemRelease(b->h);
		return cr != CUDA_SUCCESS ? cuda_drv_errno(cr) :
		       !g || (g & (g - 1)) ? -EIO : -EINVAL;
	}
	cr = p->drv.cuMemAddressReserve(&b->va, bytes, g, 0, 0);
	if (cr != CUDA_SUCCESS) {
		p->drv.cuMemRelease(b->h);
		return cuda_drv_errno(cr);
	}
	/* the driver refuses a size beyond the allocation */
	cr = p->drv.cuMemMap(b->va, bytes, 0, b->h, 0);
	if (cr != CUDA_SUCCESS) {
		p->drv.cuMemAddressFree(b->va, bytes);
		p->drv.cuMemRelease(b->h);
		return cr == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = p->dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = p->drv.cuMemSetAccess(b->va, bytes, &acc, 1);
	if (cr != CUDA_SUCCESS) {
		p->drv.cuMemUnmap(b->va, bytes);
		p->drv.cuMemAddressFree(b->va, bytes);
		p->drv.cuMemRelease(b->h);
		return cuda_drv_errno(cr);
	}
	b->b.addr = b->va;
	b->b.bytes = bytes;
	return 0;
}

static int cuda_devbuf_import(struct kvd *d, int fd, uint64_t bytes,
			      struct kvd_devbuf **out)
{
	struct cuda_priv *p = P(d);
	struct cuda_devbuf *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -ENOMEM;
	r = LOCKED(devbuf_import(p, fd, bytes, b));
	if (r) {
		free(b);
		return r;
	}
	b->b.priv = b;
	*out = &b->b;
	return 0;
}

static void cuda_devbuf_release(struct kvd *d, struct kvd_devbuf *kb)
{
	struct cuda_priv *p = P(d);
	struct cuda_devbuf *b = kb->priv;

	kvd_turn_lock(&p->lock);
	p->drv.cuCtxSetCurrent(p->ctx);
	p->drv.cuMemUnmap(b->va, b->b.bytes);
	p->drv.cuMemAddressFree(b->va, b->b.bytes);
	p->drv.cuMemRelease(b->h);
	kvd_turn_unlock(&p->lock);
	free(b);
}

/* ---- swap: copies between the pool and host memory ------------------ *
 *
 * A swap worker copies blocks between GPU memory and page-locked host
 * memory (a dram tier's chunks, registered with cuMemHostRegister when
 * they are mapped; staging from cuMemAllocHost for a file tier) with
 * cuMemcpyDtoHAsync / cuMemcpyHtoDAsync on its own non-blocking stream,
 * then waits for that stream only: other clients' kernels keep running.
 * These calls need no p->lock (struct kvk_cuda is not used): only the
 * context is made current on the worker's thread.
 */

static int cuda_io_open(struct kvd *d, void **stream)
{
	struct cuda_priv *p = P(d);
	CUstream st = NULL;
	CUresult cr;

	p->drv.cuCtxSetCurrent(p->ctx);
	cr = p->drv.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
	if (cr != CUDA_SUCCESS)
		return cuda_drv_errno(cr);
	*stream = st;
	return 0;
}

static void cuda_io_close(struct kvd *d, void *stream)
{
	struct cuda_priv *p = P(d);

	if (!stream)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	p->drv.cuStreamDestroy((CUstream)stream);
}

/* n whole blocks device -> host (read) or host -> device (write), queued
 * on the worker's stream, then one wait for all of them. */
static int cuda_dev_copy(struct kvd *d, void *stream, const uint32_t *blocks,
			 void *const *bufs, uint32_t n, bool to_host)
{
	struct cuda_priv *p = P(d);
	CUdeviceptr pool = base(p);
	CUresult cr = CUDA_SUCCESS, cs;
	uint32_t i;

	if (!pool)
		return -EINVAL;		/* nothing mapped yet */
	p->drv.cuCtxSetCurrent(p->ctx);
	for (i = 0; i < n && cr == CUDA_SUCCESS; i++) {
		CUdeviceptr at = pool + (CUdeviceptr)blocks[i] *
				 d->block_bytes;

		cr = to_host ?
		     p->drv.cuMemcpyDtoHAsync(bufs[i], at, d->block_bytes,
					      (CUstream)stream) :
		     p->drv.cuMemcpyHtoDAsync(at, bufs[i], d->block_bytes,
					      (CUstream)stream);
	}
	/* wait for what was queued, even after an error */
	cs = p->drv.cuStreamSynchronize((CUstream)stream);
	if (cr == CUDA_SUCCESS)
		cr = cs;
	if (cr != CUDA_SUCCESS) {
		kvd_log(KVD_WARN, "cuda: swap copy: %s",
			cuda_drv_strerror(&p->drv, cr));
		return cuda_drv_errno(cr);
	}
	return 0;
}

static int cuda_dev_read(struct kvd *d, void *stream, const uint32_t *blocks,
			 void *const *bufs, uint32_t n)
{
	return cuda_dev_copy(d, stream, blocks, bufs, n, true);
}

static int cuda_dev_write(struct kvd *d, void *stream,
			  const uint32_t *blocks, const void *const *bufs,
			  uint32_t n)
{
	return cuda_dev_copy(d, stream, blocks, (void *const *)bufs, n,
			     false);
}

/*
 * Zero whole blocks before another tenant uses them: memsets on the
 * kernels' stream (the data plane, under p->lock) or on a swap worker's,
 * waited for before this returns, so that no stream reads them first.
 */
static int cuda_zero(struct kvd *d, void *stream, const uint32_t *blocks,
		     uint32_t n)
{
	struct cuda_priv *p = P(d);

	if (!base(p))
		return -EINVAL;		/* nothing mapped yet */
	if (stream) {
		p->drv.cuCtxSetCurrent(p->ctx);
		return kvk_cuda_zero_blocks(p->k, (CUstream)stream, base(p),
					    d->block_bytes, d->capacity,
					    blocks, n);
	}
	return LOCKED(kvk_cuda_zero_blocks(p->k, NULL, base(p), d->block_bytes,
					   d->capacity, blocks, n));
}

static int cuda_host_pin(struct kvd *d, void *ptr, uint64_t len)
{
	struct cuda_priv *p = P(d);
	CUresult cr;

	p->drv.cuCtxSetCurrent(p->ctx);
	cr = p->drv.cuMemHostRegister(ptr, len, CU_MEMHOSTREGISTER_PORTABLE);
	if (cr != CUDA_SUCCESS) {
		kvd_log(KVD_WARN, "cuda: cuMemHostRegister %llu bytes: %s",
			(unsigned long long)len,
			cuda_drv_strerror(&p->drv, cr));
		return cuda_drv_errno(cr);
	}
	return 0;
}

static void cuda_host_unpin(struct kvd *d, void *ptr, uint64_t len)
{
	struct cuda_priv *p = P(d);
	CUresult cr;

	p->drv.cuCtxSetCurrent(p->ctx);
	cr = p->drv.cuMemHostUnregister(ptr);
	if (cr != CUDA_SUCCESS)
		kvd_log(KVD_WARN, "cuda: cuMemHostUnregister %llu bytes: %s",
			(unsigned long long)len,
			cuda_drv_strerror(&p->drv, cr));
}

static int cuda_host_alloc(struct kvd *d, uint64_t len, void **out)
{
	struct cuda_priv *p = P(d);
	CUresult cr;

	p->drv.cuCtxSetCurrent(p->ctx);
	cr = p->drv.cuMemAllocHost(out, len);
	return cr == CUDA_SUCCESS ? 0 : cuda_drv_errno(cr);
}

static void cuda_host_free(struct kvd *d, void *ptr)
{
	struct cuda_priv *p = P(d);

	p->drv.cuCtxSetCurrent(p->ctx);
	p->drv.cuMemFreeHost(ptr);
}

const struct kvd_backend_ops kvd_backend_cuda = {
	.name = "cuda",
	.probe = cuda_probe,
	.init = cuda_init,
	.fini = cuda_fini,
	.map = cuda_map,
	.unmap = cuda_unmap,
	.write_kv = cuda_write_kv,
	.read_kv = cuda_read_kv,
	.decode = cuda_decode,
	.prefill = cuda_prefill,
	.copy = cuda_copy,
	.write_kv_flags = cuda_write_kv_flags,
	.splice = cuda_splice,
	.compact = cuda_compact,
	.score = cuda_score,
	.layout_ok = cuda_layout_ok,
	.devbuf_import = cuda_devbuf_import,
	.devbuf_release = cuda_devbuf_release,
	.write_kv_dev = cuda_write_kv_dev,
	.read_kv_dev = cuda_read_kv_dev,
	.attn_dev = cuda_attn_dev,
	.tick = cuda_tick,
	.zero = cuda_zero,
	.io_open = cuda_io_open,
	.io_close = cuda_io_close,
	.dev_read = cuda_dev_read,
	.dev_write = cuda_dev_write,
	.host_pin = cuda_host_pin,
	.host_unpin = cuda_host_unpin,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
};

/* The probe's driver when the cpu backend was picked after all. */
void kvd_cuda_probe_done(void)
{
	if (probed.lib)
		cuda_drv_close(&probed);
}
