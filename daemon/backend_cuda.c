// SPDX-License-Identifier: MIT
/*
 * backend_cuda.c - the cuda backend: pool memory is GPU memory.
 *
 * The driver API is loaded at run time (kernels/cuda_drv.h), so the same
 * binary runs without a GPU.  The whole capacity is reserved once with
 * cuMemAddressReserve; each chunk is a cuMemCreate allocation mapped with
 * cuMemMap + cuMemSetAccess on grow, unmapped and released on shrink.
 * struct kvk_cuda is not thread-safe: every op holds c->lock and makes the
 * context current on the calling thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpoold.h"

#ifdef KVD_NO_CUDA

static int cuda_probe(void)
{
	return -ENODEV;
}

static int cuda_init(struct kvd *d, uint64_t *align)
{
	return -ENODEV;
}

const struct kvd_backend_ops kvd_backend_cuda = {
	.name = "cuda",
	.probe = cuda_probe,
	.init = cuda_init,
};

#else

#include <dlfcn.h>
#include <stddef.h>

#include "../kernels/kvkern_cuda.h"

struct cuda_priv {
	struct cuda_drv drv;
	CUdevice dev;
	CUcontext ctx;
	struct kvk_cuda *k;
	pthread_mutex_t lock;
	CUdeviceptr base;
	uint64_t bytes;		/* reserved */
	uint64_t gran;
	uint32_t nchunks;
	CUmemGenericAllocationHandle *handles;	/* per chunk, 0 = unmapped */
};

static struct cuda_priv *P(struct kvd *d)
{
	return d->be_priv;
}

static int cuda_probe(void)
{
	struct cuda_drv drv;
	int n = 0, r;

	memset(&drv, 0, sizeof(drv));
	r = cuda_drv_open(&drv);
	if (r)
		return r;
	if (drv.cuInit(0) != CUDA_SUCCESS ||
	    drv.cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1)
		r = -ENODEV;
	cuda_drv_close(&drv);
	return r;
}

static void prop_init(struct cuda_priv *p, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = p->dev;
}

static int cuda_init(struct kvd *d, uint64_t *align)
{
	struct cuda_priv *p = calloc(1, sizeof(*p));
	CUmemAllocationProp prop;
	size_t gran = 0;
	CUresult cr;
	int r;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	r = cuda_drv_open(&p->drv);
	if (r)
		goto err_free;
	r = cuda_drv_device_open(&p->drv, d->o.cuda_device, &p->dev, &p->ctx);
	if (r)
		goto err_close;
	prop_init(p, &prop);
	cr = p->drv.cuMemGetAllocationGranularity(&gran, &prop,
			CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (cr != CUDA_SUCCESS || !gran) {
		r = cr ? cuda_drv_errno(cr) : -EIO;
		goto err_dev;
	}
	p->gran = gran;
	r = kvk_cuda_init(&p->k, &p->drv, NULL);
	if (r) {
		kvd_log(KVD_ERR, "cuda: cannot load kernels: %d", r);
		goto err_dev;
	}
	d->be_priv = p;
	*align = gran;
	return 0;
err_dev:
	cuda_drv_device_close(&p->drv, p->dev);
err_close:
	cuda_drv_close(&p->drv);
err_free:
	free(p);
	return r;
}

/* Called once chunk_blocks is final (first map). */
static int reserve(struct kvd *d)
{
	struct cuda_priv *p = P(d);
	uint64_t chunk = (uint64_t)d->chunk_blocks * d->block_bytes;
	CUresult cr;

	p->nchunks = (d->capacity + d->chunk_blocks - 1) / d->chunk_blocks;
	p->bytes = (uint64_t)p->nchunks * chunk;
	p->handles = calloc(p->nchunks, sizeof(*p->handles));
	if (!p->handles)
		return -ENOMEM;
	cr = p->drv.cuMemAddressReserve(&p->base, p->bytes, p->gran, 0, 0);
	if (cr != CUDA_SUCCESS) {
		free(p->handles);
		p->handles = NULL;
		return cuda_drv_errno(cr);
	}
	return 0;
}

static void cuda_fini(struct kvd *d)
{
	struct cuda_priv *p = P(d);
	uint64_t chunk = (uint64_t)d->chunk_blocks * d->block_bytes;
	uint32_t c;

	if (!p)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	for (c = 0; p->handles && c < p->nchunks; c++) {
		if (!p->handles[c])
			continue;
		p->drv.cuMemUnmap(p->base + c * chunk, chunk);
		p->drv.cuMemRelease(p->handles[c]);
	}
	if (p->base)
		p->drv.cuMemAddressFree(p->base, p->bytes);
	free(p->handles);
	kvk_cuda_free(p->k);
	cuda_drv_device_close(&p->drv, p->dev);
	cuda_drv_close(&p->drv);
	free(p);
	d->be_priv = NULL;
}

static int unmap_chunk(struct cuda_priv *p, uint64_t chunk, uint32_t c)
{
	CUresult cr;

	if (!p->handles[c])
		return 0;
	cr = p->drv.cuMemUnmap(p->base + c * chunk, chunk);
	if (cr != CUDA_SUCCESS)
		return cuda_drv_errno(cr);
	p->drv.cuMemRelease(p->handles[c]);
	p->handles[c] = 0;
	return 0;
}

static int cuda_unmap(struct kvd *d, uint32_t from, uint32_t to)
{
	struct cuda_priv *p = P(d);
	uint64_t chunk = (uint64_t)d->chunk_blocks * d->block_bytes;
	uint32_t c, c0 = from / d->chunk_blocks;
	uint32_t c1 = (to + d->chunk_blocks - 1) / d->chunk_blocks;
	int r = 0;

	pthread_mutex_lock(&p->lock);
	p->drv.cuCtxSetCurrent(p->ctx);
	for (c = c0; c < c1 && c < p->nchunks; c++)
		if (!r)
			r = unmap_chunk(p, chunk, c);
	pthread_mutex_unlock(&p->lock);
	return r;
}

static int cuda_map(struct kvd *d, uint32_t from, uint32_t to)
{
	struct cuda_priv *p = P(d);
	uint64_t chunk = (uint64_t)d->chunk_blocks * d->block_bytes;
	uint32_t c, c0 = from / d->chunk_blocks;
	uint32_t c1 = (to + d->chunk_blocks - 1) / d->chunk_blocks;
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUresult cr = CUDA_SUCCESS;
	int r = 0;

	pthread_mutex_lock(&p->lock);
	p->drv.cuCtxSetCurrent(p->ctx);
	if (!p->handles) {
		r = reserve(d);
		if (r)
			goto out;
	}
	prop_init(p, &prop);
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (c = c0; c < c1 && c < p->nchunks; c++) {
		CUmemGenericAllocationHandle h;
		CUdeviceptr at = p->base + c * chunk;

		if (p->handles[c])
			continue;
		cr = p->drv.cuMemCreate(&h, chunk, &prop, 0);
		if (cr != CUDA_SUCCESS)
			break;
		cr = p->drv.cuMemMap(at, chunk, 0, h, 0);
		if (cr != CUDA_SUCCESS) {
			p->drv.cuMemRelease(h);
			break;
		}
		p->handles[c] = h;
		cr = p->drv.cuMemSetAccess(at, chunk, &acc, 1);
		if (cr != CUDA_SUCCESS)
			break;
		/* fresh memory reads as zeros, like the cpu backend */
		p->drv.cuMemsetD8(at, 0, chunk);
	}
	if (cr != CUDA_SUCCESS) {
		kvd_log(KVD_WARN, "cuda: map chunk %u: %s", c,
			cuda_drv_strerror(&p->drv, cr));
		r = cuda_drv_errno(cr);
		/* undo this call's chunks */
		for (; c + 1 > c0 && c < p->nchunks; c--) {
			unmap_chunk(p, chunk, c);
			if (c == c0)
				break;
		}
	}
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

#define LOCKED(expr) ({ int __r; pthread_mutex_lock(&p->lock);	\
	p->drv.cuCtxSetCurrent(p->ctx); __r = (expr);			\
	pthread_mutex_unlock(&p->lock); __r; })

static int cuda_write_kv(struct kvd *d, const struct kvk_layout *l,
			 uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			 const uint32_t *slots, const float *k, const float *v)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_write_kv(p->k, l, p->base, layer, ntok, blocks,
					slots, k, v));
}

static int cuda_read_kv(struct kvd *d, const struct kvk_layout *l,
			uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			const uint32_t *slots, float *k, float *v)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_read_kv(p->k, l, p->base, layer, ntok, blocks,
				       slots, k, v));
}

static int cuda_decode(struct kvd *d, struct kvk_decode_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)p->base;
	return LOCKED(kvk_cuda_decode(p->k, a));
}

static int cuda_prefill(struct kvd *d, struct kvk_prefill_args *a)
{
	struct cuda_priv *p = P(d);

	a->pool_base = (void *)(uintptr_t)p->base;
	return LOCKED(kvk_cuda_prefill(p->k, a));
}

static int cuda_copy(struct kvd *d, const uint32_t *src, const uint32_t *dst,
		     uint32_t n)
{
	struct cuda_priv *p = P(d);

	return LOCKED(kvk_cuda_copy_blocks(p->k, p->base, d->block_bytes,
					   d->capacity, src, dst, n));
}

/* ---- swap: copies between the pool and host memory ------------------ *
 *
 * A swap worker copies blocks between GPU memory and page-locked host
 * memory (a dram tier's chunks, registered with cuMemHostRegister when
 * they are mapped; staging from cuMemHostAlloc for a file tier) with
 * cuMemcpyDtoHAsync / cuMemcpyHtoDAsync on its own non-blocking stream,
 * then waits for that stream only: other clients' kernels keep running.
 * These entry points are resolved from the same libcuda handle, on first
 * use.
 */

struct cuda_swap_drv {
	CUresult (*stream_create)(CUstream *s, unsigned int flags);
	CUresult (*stream_destroy)(CUstream s);
	CUresult (*stream_sync)(CUstream s);
	CUresult (*dtoh_async)(void *dst, CUdeviceptr src, size_t n,
			       CUstream s);
	CUresult (*htod_async)(CUdeviceptr dst, const void *src, size_t n,
			       CUstream s);
	CUresult (*host_register)(void *p, size_t n, unsigned int flags);
	CUresult (*host_unregister)(void *p);
	CUresult (*host_alloc)(void **pp, size_t n, unsigned int flags);
	CUresult (*free_host)(void *p);
};

static struct cuda_swap_drv swap_drv;
static int swap_drv_state;	/* 0 not loaded, 1 loaded, -1 missing */
static pthread_mutex_t swap_drv_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct cuda_swap_drv *swap_syms(struct cuda_priv *p)
{
	static const struct {
		const char *name;
		size_t off;
	} t[] = {
#define SW(m, n) { n, offsetof(struct cuda_swap_drv, m) }
		SW(stream_create, "cuStreamCreate"),
		SW(stream_destroy, "cuStreamDestroy_v2"),
		SW(stream_sync, "cuStreamSynchronize"),
		SW(dtoh_async, "cuMemcpyDtoHAsync_v2"),
		SW(htod_async, "cuMemcpyHtoDAsync_v2"),
		SW(host_register, "cuMemHostRegister_v2"),
		SW(host_unregister, "cuMemHostUnregister"),
		SW(host_alloc, "cuMemHostAlloc"),
		SW(free_host, "cuMemFreeHost"),
#undef SW
	};
	size_t i;

	pthread_mutex_lock(&swap_drv_lock);
	if (!swap_drv_state) {
		swap_drv_state = 1;
		for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
			void *f = dlsym(p->drv.lib, t[i].name);

			if (!f) {
				kvd_log(KVD_ERR, "cuda: no %s in libcuda",
					t[i].name);
				swap_drv_state = -1;
				break;
			}
			memcpy((char *)&swap_drv + t[i].off, &f, sizeof(f));
		}
	}
	pthread_mutex_unlock(&swap_drv_lock);
	return swap_drv_state == 1 ? &swap_drv : NULL;
}

static int cuda_io_open(struct kvd *d, void **stream)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);
	CUstream st = NULL;
	CUresult cr;

	if (!s)
		return -ENOSYS;
	p->drv.cuCtxSetCurrent(p->ctx);
	cr = s->stream_create(&st, CU_STREAM_NON_BLOCKING);
	if (cr != CUDA_SUCCESS)
		return cuda_drv_errno(cr);
	*stream = st;
	return 0;
}

static void cuda_io_close(struct kvd *d, void *stream)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);

	if (!s || !stream)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	s->stream_destroy((CUstream)stream);
}

/* n whole blocks device -> host (read) or host -> device (write), queued
 * on the worker's stream, then one wait for all of them. */
static int cuda_dev_copy(struct kvd *d, void *stream, const uint32_t *blocks,
			 void *const *bufs, uint32_t n, bool to_host)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);
	CUresult cr = CUDA_SUCCESS, cs;
	uint32_t i;

	if (!s)
		return -ENOSYS;
	p->drv.cuCtxSetCurrent(p->ctx);
	for (i = 0; i < n && cr == CUDA_SUCCESS; i++) {
		CUdeviceptr at = p->base + (CUdeviceptr)blocks[i] *
				 d->block_bytes;

		cr = to_host ?
		     s->dtoh_async(bufs[i], at, d->block_bytes,
				   (CUstream)stream) :
		     s->htod_async(at, bufs[i], d->block_bytes,
				   (CUstream)stream);
	}
	/* wait for what was queued, even after an error */
	cs = s->stream_sync((CUstream)stream);
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

static int cuda_host_pin(struct kvd *d, void *ptr, uint64_t len)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);
	CUresult cr;

	if (!s)
		return -ENOSYS;
	p->drv.cuCtxSetCurrent(p->ctx);
	cr = s->host_register(ptr, len, CU_MEMHOSTREGISTER_PORTABLE);
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
	const struct cuda_swap_drv *s = swap_syms(p);

	if (!s)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	s->host_unregister(ptr);
}

static int cuda_host_alloc(struct kvd *d, uint64_t len, void **out)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);
	CUresult cr;

	if (!s)
		return -ENOSYS;
	p->drv.cuCtxSetCurrent(p->ctx);
	cr = s->host_alloc(out, len, CU_MEMHOSTALLOC_PORTABLE);
	return cr == CUDA_SUCCESS ? 0 : cuda_drv_errno(cr);
}

static void cuda_host_free(struct kvd *d, void *ptr)
{
	struct cuda_priv *p = P(d);
	const struct cuda_swap_drv *s = swap_syms(p);

	if (!s)
		return;
	p->drv.cuCtxSetCurrent(p->ctx);
	s->free_host(ptr);
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
	.io_open = cuda_io_open,
	.io_close = cuda_io_close,
	.dev_read = cuda_dev_read,
	.dev_write = cuda_dev_write,
	.host_pin = cuda_host_pin,
	.host_unpin = cuda_host_unpin,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
};

#endif /* KVD_NO_CUDA */
