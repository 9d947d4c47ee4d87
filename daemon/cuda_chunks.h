/* SPDX-License-Identifier: MIT */
/*
 * cuda_chunks.h - the cuda backend's chunks: one virtual address
 * reservation for the whole pool, physical allocations (cuMemCreate)
 * mapped into it chunk by chunk, and a small pool of spare physical
 * handles (created, not mapped) so that a grow within the shrink
 * hysteresis does not pay for cuMemCreate.  Independent of struct kvd so
 * that tests/gpu/bench-kvk-gpu times exactly this code.
 *
 * Every call needs the caller's context current on its thread, and one
 * caller at a time.  Memory a map makes accessible reads as zeros, unless
 * it is a chunk's kept memory (below), which keeps its bytes.
 *
 * Kept chunks (kvd_chunks_keep): the physical allocations are created
 * exportable as POSIX file descriptors; a map of chunk c first takes what
 * the store kept for c and, when it is an allocation of exactly this
 * chunk's size and properties, maps it without zeroing; otherwise (or
 * with nothing kept) it maps fresh zeroed memory and puts a descriptor of
 * it in the store.  An unmap drops the chunk's descriptor first: its
 * contents are no longer the pool's, and the allocation can be freed.
 * Spares are not kept, and an imported chunk is released at its unmap,
 * never made a spare.  kvd_chunks_fini drops nothing: the store's
 * descriptors keep the chunks' memory when this process lets go of it.
 */
#ifndef KVD_CUDA_CHUNKS_H
#define KVD_CUDA_CHUNKS_H

#include <stdint.h>

#include "../kernels/cuda_drv.h"

enum {
	KVD_CHUNK_EMPTY = 0,
	KVD_CHUNK_MAPPED,
	KVD_CHUNK_STUCK,	/* unmap failed: still mapped, contents stale */
};

/* The store of kept chunks (the cuda backend's: daemon/keep.h). */
struct kvd_chunks_keep {
	void *arg;
	/* keep a duplicate of fd (chunk c's allocation; fd stays ours):
	 * 0 or -errno */
	int (*put)(void *arg, uint32_t c, int fd);
	void (*drop)(void *arg, uint32_t c);
	/* a new descriptor of what was kept for c, or -ENOENT */
	int (*take)(void *arg, uint32_t c);
	/* what was kept for c is not used (why; err: -errno or 0), or c
	 * could not be kept (after put: the store has nothing for c) */
	void (*refused)(void *arg, uint32_t c, const char *why, int err);
};

struct kvd_chunks {
	struct cuda_drv *drv;
	CUdevice dev;
	CUstream st;
	uint64_t gran;		/* allocation granularity (recommended) */
	uint64_t chunk_bytes;	/* a multiple of gran */
	uint32_t nchunks;
	CUdeviceptr base;	/* reservation of nchunks * chunk_bytes */
	CUmemGenericAllocationHandle *handles;	/* per chunk */
	uint8_t *state;		/* per chunk, KVD_CHUNK_* */
	CUmemGenericAllocationHandle *spare;
	uint32_t nspare, spare_max;
	uint64_t creates, spare_hits;	/* counters */
	const struct kvd_chunks_keep *keep;	/* NULL: nothing kept */
	uint8_t *restored;	/* per chunk: mapped from kept memory */
	uint64_t kept_used, kept_refused, keep_failed;	/* counters */
};

/* The granularity (recommended, a multiple of the minimum) of device
 * memory on dev: 0 or -errno. */
int kvd_chunks_granularity(struct cuda_drv *drv, CUdevice dev, uint64_t *gran);

/* Reserve the address space of nchunks chunks of chunk_bytes (which must
 * be a multiple of the granularity: -EINVAL).  0 or -errno. */
int kvd_chunks_init(struct kvd_chunks *k, struct cuda_drv *drv, CUdevice dev,
		    uint64_t chunk_bytes, uint32_t nchunks, uint32_t spare_max);
void kvd_chunks_fini(struct kvd_chunks *k);

/*
 * Keep the chunks in @store from now on (after init, before the first
 * map; NULL: stop keeping).  -EOPNOTSUPP when the device cannot export
 * its allocations as POSIX file descriptors, -EBUSY once a chunk or spare
 * exists; 0.
 */
int kvd_chunks_keep(struct kvd_chunks *k, const struct kvd_chunks_keep *store);

/* Make chunk c accessible: its kept memory, else zeroed (a spare handle
 * first, else cuMemCreate).  0, -ENOMEM (no device memory), -errno. */
int kvd_chunks_map(struct kvd_chunks *k, uint32_t c);
/* Unmap chunk c; its handle goes to the spares while there is room, else
 * it is released.  A chunk whose unmap fails stays mapped (STUCK) and is
 * zeroed before it is used again. */
int kvd_chunks_unmap(struct kvd_chunks *k, uint32_t c);
/* The same, undoing a map that failed further on: a chunk mapped from
 * kept memory stays kept (the store keeps its descriptor), so that the
 * next map of it takes its bytes back. */
int kvd_chunks_undo(struct kvd_chunks *k, uint32_t c);
/* Create spares up to `want` (at most spare_max): 0 or the error of the
 * cuMemCreate that failed. */
int kvd_chunks_fill(struct kvd_chunks *k, uint32_t want);
/* Release spares beyond keep. */
void kvd_chunks_trim(struct kvd_chunks *k, uint32_t keep);

static inline CUdeviceptr kvd_chunks_addr(const struct kvd_chunks *k,
					  uint32_t c)
{
	return k->base + (CUdeviceptr)c * k->chunk_bytes;
}

#endif /* KVD_CUDA_CHUNKS_H */
