// SPDX-License-Identifier: MIT
/*
 * cuda_chunks.c - the cuda backend's chunks (see cuda_chunks.h).
 *
 * Driver rules followed (CUDA driver API, virtual memory management):
 * cuMemCreate sizes and cuMemMap addresses, sizes and offsets are
 * multiples of the granularity; cuMemMap maps into an existing
 * reservation, offset 0, never over a mapping; a mapping is not
 * accessible until cuMemSetAccess; cuMemUnmap takes a whole mapping;
 * memory is freed when it is unmapped and its handle released, and every
 * shareable handle of it (an exported descriptor: the store's) closed and
 * every import of one released; cuMemAddressFree takes the whole
 * reservation once nothing is mapped; only an allocation created with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes can be
 * exported as a descriptor, and cuMemMap refuses a size beyond the
 * allocation's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_chunks.h"

static void prop_init(CUdevice dev, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = dev;
}

static int cu(struct cuda_drv *drv, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	if (r != CUDA_ERROR_OUT_OF_MEMORY)
		fprintf(stderr, "cuda chunks: %s: %s\n", what,
			cuda_drv_strerror(drv, r));
	return cuda_drv_errno(r);
}

int kvd_chunks_granularity(struct cuda_drv *drv, CUdevice dev, uint64_t *gran)
{
	CUmemAllocationProp prop;
	size_t min = 0, rec = 0;
	int r;

	prop_init(dev, &prop);
	r = cu(drv, drv->cuMemGetAllocationGranularity(&min, &prop,
		CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
	r = r ? r : cu(drv, drv->cuMemGetAllocationGranularity(&rec, &prop,
		CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
	if (r)
		return r;
	if (!min)
		return -EIO;
	/* sizes must be multiples of the minimum; the recommended one is
	 * used when it is itself such a multiple */
	*gran = rec && rec % min == 0 ? rec : min;
	return 0;
}

int kvd_chunks_init(struct kvd_chunks *k, struct cuda_drv *drv, CUdevice dev,
		    uint64_t chunk_bytes, uint32_t nchunks, uint32_t spare_max)
{
	int r;

	memset(k, 0, sizeof(*k));
	k->drv = drv;
	k->dev = dev;
	r = kvd_chunks_granularity(drv, dev, &k->gran);
	if (r)
		return r;
	if (!chunk_bytes || chunk_bytes % k->gran || !nchunks)
		return -EINVAL;
	k->chunk_bytes = chunk_bytes;
	k->nchunks = nchunks;
	k->spare_max = spare_max;
	k->handles = calloc(nchunks, sizeof(*k->handles));
	k->state = calloc(nchunks, 1);
	k->spare = calloc(spare_max ? spare_max : 1, sizeof(*k->spare));
	if (!k->handles || !k->state || !k->spare) {
		r = -ENOMEM;
		goto fail;
	}
	r = cu(drv, drv->cuStreamCreate(&k->st, CU_STREAM_NON_BLOCKING),
	       "cuStreamCreate");
	if (r)
		goto fail;
	r = cu(drv, drv->cuMemAddressReserve(&k->base,
		(size_t)chunk_bytes * nchunks, k->gran, 0, 0),
	       "cuMemAddressReserve");
	if (r)
		goto fail;
	return 0;
fail:
	kvd_chunks_fini(k);
	return r;
}

static int zero(struct kvd_chunks *k, CUdeviceptr at)
{
	int r = cu(k->drv, k->drv->cuMemsetD8Async(at, 0, k->chunk_bytes, k->st),
		   "cuMemsetD8Async");

	return r ? r : cu(k->drv, k->drv->cuStreamSynchronize(k->st),
			  "cuStreamSynchronize");
}

static int create(struct kvd_chunks *k, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;

	prop_init(k->dev, &prop);
	if (k->keep)
		prop.requestedHandleTypes =
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	k->creates++;
	return cu(k->drv, k->drv->cuMemCreate(h, k->chunk_bytes, &prop, 0),
		  "cuMemCreate");
}

int kvd_chunks_keep(struct kvd_chunks *k, const struct kvd_chunks_keep *store)
{
	uint32_t c;
	int v = 0;

	if (!store) {
		k->keep = NULL;
		return 0;
	}
	for (c = 0; c < k->nchunks; c++)
		if (k->state[c] != KVD_CHUNK_EMPTY)
			return -EBUSY;
	if (k->nspare)
		return -EBUSY;
	if (k->drv->cuDeviceGetAttribute(&v,
		CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		k->dev) != CUDA_SUCCESS || !v)
		return -EOPNOTSUPP;
	if (!k->restored) {
		k->restored = calloc(k->nchunks, 1);
		if (!k->restored)
			return -ENOMEM;
	}
	k->keep = store;
	return 0;
}

/* Put a descriptor of chunk c's allocation h in the store; the chunk
 * stays mapped whatever happens (it is just not kept). */
static void keep_put(struct kvd_chunks *k, uint32_t c,
		     CUmemGenericAllocationHandle h)
{
	const struct kvd_chunks_keep *s = k->keep;
	CUresult cr;
	int fd = -1, r;

	cr = k->drv->cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (cr != CUDA_SUCCESS) {
		k->keep_failed++;
		s->drop(s->arg, c);
		s->refused(s->arg, c, "cannot export the chunk's allocation",
			   cuda_drv_errno(cr));
		return;
	}
	r = s->put(s->arg, c, fd);
	close(fd);
	if (r) {
		k->keep_failed++;
		s->drop(s->arg, c);
		s->refused(s->arg, c, "the store cannot keep the chunk", r);
	}
}

/*
 * Whether allocation h is larger than the chunk: a map of one granule
 * (g) more succeeds, in a reservation of its own, never made accessible.
 * 1, 0, or -errno.
 */
static int larger_than_chunk(struct kvd_chunks *k,
			     CUmemGenericAllocationHandle h, size_t g)
{
	size_t len = k->chunk_bytes + g;
	CUdeviceptr va = 0;
	CUresult cr;
	int r;

	cr = k->drv->cuMemAddressReserve(&va, len, k->gran, 0, 0);
	if (cr != CUDA_SUCCESS)
		return cuda_drv_errno(cr);
	cr = k->drv->cuMemMap(va, len, 0, h, 0);
	r = cr == CUDA_SUCCESS;
	if (r && k->drv->cuMemUnmap(va, len) != CUDA_SUCCESS)
		return -EIO;	/* the reservation stays, mapped */
	k->drv->cuMemAddressFree(va, len);
	return r;
}

/*
 * Map what the store kept for chunk c at its address, without zeroing:
 * 1 when mapped; 0 when nothing was kept or it does not fit (refused: the
 * store's refused() hears why and drops it), the chunk still unmapped;
 * -errno when the driver fails on memory that fits (nothing mapped).
 */
static int map_kept(struct kvd_chunks *k, uint32_t c, CUdeviceptr at)
{
	const struct kvd_chunks_keep *s = k->keep;
	CUmemGenericAllocationHandle h = 0;
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	const char *why;
	size_t g = 0;
	CUresult cr;
	int fd, r = 0;

	fd = s->take(s->arg, c);
	if (fd < 0) {
		if (fd != -ENOENT)
			s->refused(s->arg, c, "the store cannot give it back",
				   fd);
		return 0;
	}
	cr = k->drv->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	if (cr != CUDA_SUCCESS) {
		why = "the driver does not import it";
		r = cuda_drv_errno(cr);
		goto refuse;
	}
	memset(&prop, 0, sizeof(prop));
	cr = k->drv->cuMemGetAllocationPropertiesFromHandle(&prop, h);
	if (cr != CUDA_SUCCESS) {
		why = "its properties cannot be read";
		r = cuda_drv_errno(cr);
		goto refuse_h;
	}
	if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    prop.location.id != k->dev) {
		why = "an allocation of another kind or device";
		goto refuse_h;
	}
	cr = k->drv->cuMemGetAllocationGranularity(&g, &prop,
			CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (cr != CUDA_SUCCESS || !g || k->chunk_bytes % g) {
		why = "its granularity does not divide the chunk";
		r = cuda_drv_errno(cr);
		goto refuse_h;
	}
	/* never map part of a larger allocation: another chunk size */
	r = larger_than_chunk(k, h, g);
	if (r) {
		why = r > 0 ? "larger than a chunk" :
			      "its size cannot be probed";
		r = r > 0 ? 0 : r;
		goto refuse_h;
	}
	cr = k->drv->cuMemMap(at, k->chunk_bytes, 0, h, 0);
	if (cr != CUDA_SUCCESS) {
		why = cr == CUDA_ERROR_INVALID_VALUE ? "smaller than a chunk" :
		      "it cannot be mapped";
		r = cr == CUDA_ERROR_INVALID_VALUE ? 0 : cuda_drv_errno(cr);
		goto refuse_h;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = k->dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cu(k->drv, k->drv->cuMemSetAccess(at, k->chunk_bytes, &acc, 1),
	       "cuMemSetAccess");
	if (r) {
		if (k->drv->cuMemUnmap(at, k->chunk_bytes) == CUDA_SUCCESS) {
			k->drv->cuMemRelease(h);
		} else {	/* zeroed before use, like a failed unmap */
			k->handles[c] = h;
			k->state[c] = KVD_CHUNK_STUCK;
		}
		return r;
	}
	k->handles[c] = h;
	k->state[c] = KVD_CHUNK_MAPPED;
	k->restored[c] = 1;
	k->kept_used++;
	return 1;
refuse_h:
	k->drv->cuMemRelease(h);
refuse:
	k->kept_refused++;
	s->refused(s->arg, c, why, r);
	return 0;
}

int kvd_chunks_map(struct kvd_chunks *k, uint32_t c)
{
	CUdeviceptr at = kvd_chunks_addr(k, c);
	CUmemGenericAllocationHandle h = 0;
	CUmemAccessDesc acc;
	int r;

	if (c >= k->nchunks)
		return -EINVAL;
	if (k->state[c] == KVD_CHUNK_MAPPED)
		return 0;
	if (k->state[c] == KVD_CHUNK_STUCK) {
		/* still mapped after a failed unmap: zero it, keep it */
		r = zero(k, at);
		if (!r) {
			k->state[c] = KVD_CHUNK_MAPPED;
			if (k->keep)
				keep_put(k, c, k->handles[c]);
		}
		return r;
	}
	if (k->keep) {
		r = map_kept(k, c, at);
		if (r)
			return r < 0 ? r : 0;
	}
	if (k->nspare) {
		h = k->spare[--k->nspare];
		k->spare_hits++;
	} else {
		r = create(k, &h);
		if (r)
			return r;
	}
	r = cu(k->drv, k->drv->cuMemMap(at, k->chunk_bytes, 0, h, 0), "cuMemMap");
	if (r) {
		k->drv->cuMemRelease(h);
		return r;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = k->dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cu(k->drv, k->drv->cuMemSetAccess(at, k->chunk_bytes, &acc, 1),
	       "cuMemSetAccess");
	/* fresh memory reads as zeros, like the cpu backend's */
	r = r ? r : zero(k, at);
	if (r) {
		if (k->drv->cuMemUnmap(at, k->chunk_bytes) == CUDA_SUCCESS) {
			k->drv->cuMemRelease(h);
		} else {
			k->handles[c] = h;
			k->state[c] = KVD_CHUNK_STUCK;
		}
		return r;
	}
	k->handles[c] = h;
	k->state[c] = KVD_CHUNK_MAPPED;
	if (k->keep)
		keep_put(k, c, h);
	return 0;
}

static int unmap(struct kvd_chunks *k, uint32_t c, int undo)
{
	CUdeviceptr at = kvd_chunks_addr(k, c);
	int r, imported;

	if (c >= k->nchunks)
		return -EINVAL;
	if (k->state[c] == KVD_CHUNK_EMPTY)
		return 0;
	imported = k->restored && k->restored[c];
	/* its contents are no longer the pool's: the store lets go first,
	 * so that the release below frees the memory; but a map undone
	 * leaves kept memory kept, for the next map */
	if (k->keep && !(undo && imported))
		k->keep->drop(k->keep->arg, c);
	if (k->restored)
		k->restored[c] = 0;
	r = cu(k->drv, k->drv->cuMemUnmap(at, k->chunk_bytes), "cuMemUnmap");
	if (r) {
		/* the memory stays mapped; zeroed before any reuse */
		k->state[c] = KVD_CHUNK_STUCK;
		return r;
	}
	/* an imported allocation is not a spare: spares are this
	 * process's own, exported afresh when they are mapped */
	if (k->nspare < k->spare_max && !imported)
		k->spare[k->nspare++] = k->handles[c];
	else
		k->drv->cuMemRelease(k->handles[c]);
	k->handles[c] = 0;
	k->state[c] = KVD_CHUNK_EMPTY;
	return 0;
}

int kvd_chunks_unmap(struct kvd_chunks *k, uint32_t c)
{
	return unmap(k, c, 0);
}

int kvd_chunks_undo(struct kvd_chunks *k, uint32_t c)
{
	return unmap(k, c, 1);
}

int kvd_chunks_fill(struct kvd_chunks *k, uint32_t want)
{
	if (want > k->spare_max)
		want = k->spare_max;
	while (k->nspare < want) {
		CUmemGenericAllocationHandle h;
		int r = create(k, &h);

		if (r)
			return r;
		k->spare[k->nspare++] = h;
	}
	return 0;
}

void kvd_chunks_trim(struct kvd_chunks *k, uint32_t keep)
{
	while (k->nspare > keep)
		k->drv->cuMemRelease(k->spare[--k->nspare]);
}

/* A chunk whose unmap fails here stays mapped: its handle is not
 * released and the reservation not freed (cuMemAddressFree refuses a
 * reservation with mappings); the context's destruction frees them.
 * Kept chunks are not dropped: their memory outlives this process in
 * the store's descriptors. */
void kvd_chunks_fini(struct kvd_chunks *k)
{
	uint32_t c, stuck = 0;

	if (!k->drv)
		return;
	for (c = 0; k->state && c < k->nchunks; c++) {
		if (k->state[c] == KVD_CHUNK_EMPTY)
			continue;
		if (cu(k->drv, k->drv->cuMemUnmap(kvd_chunks_addr(k, c),
						  k->chunk_bytes),
		       "cuMemUnmap")) {
			stuck++;
			continue;
		}
		k->state[c] = KVD_CHUNK_EMPTY;
		k->drv->cuMemRelease(k->handles[c]);
	}
	if (k->spare)
		kvd_chunks_trim(k, 0);
	if (stuck)
		fprintf(stderr, "cuda chunks: %u chunks still mapped: their "
			"handles and address range are left to the context\n",
			stuck);
	else if (k->base)
		k->drv->cuMemAddressFree(k->base,
					 (size_t)k->chunk_bytes * k->nchunks);
	if (k->st)
		k->drv->cuStreamDestroy(k->st);
	free(k->handles);
	free(k->state);
	free(k->spare);
	free(k->restored);
	memset(k, 0, sizeof(*k));
}
