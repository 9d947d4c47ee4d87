/* SPDX-License-Identifier: MIT */
/*
 * kvkern_cuda.h - the kvkern ops on a pool in GPU memory.
 *
 * Same semantics as kvkern.h.  The pool base is a device address
 * (CUdeviceptr, passed in the args' pool_base as (void *)(uintptr_t)ptr);
 * every other array (q, k, v, out, blocks, slots, block tables, context
 * lengths) is HOST memory: the glue stages them through a device scratch
 * buffer it owns, launches, synchronises and copies the result back.
 *
 * Kernels come from kvpool_kernels.fatbin (sm_80, sm_90 + PTX), loaded
 * with cuModuleLoadData into the context current when kvk_cuda_init()
 * runs; every later call must run with that context current.
 * A struct kvk_cuda is not thread-safe: one caller at a time.
 * The GPU ops need block_bytes and the pool base to be multiples of 16
 * (-EINVAL otherwise); head_dim must be 64, 128 or 256 for attention
 * (-EOPNOTSUPP otherwise).
 */
#ifndef KVKERN_CUDA_H
#define KVKERN_CUDA_H

#include "kvkern.h"
#include "cuda_drv.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvk_cuda;

/* Default fatbin search: $KVPOOL_FATBIN, then build/lib/, then
 * /usr/local/lib/kvpool/ (KVK_FATBIN_DIR at build time). */
#define KVK_FATBIN_NAME "kvpool_kernels.fatbin"

/*
 * Load the fatbin (path NULL = default search) into the current context
 * of drv (already opened, cuInit done, a context current).  -ENOENT if no
 * fatbin, -ENODEV/-EIO for driver errors.
 */
int kvk_cuda_init(struct kvk_cuda **out, struct cuda_drv *drv,
		  const char *fatbin_path);
void kvk_cuda_free(struct kvk_cuda *c);

int kvk_cuda_write_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		      CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		      const uint32_t *blocks, const uint32_t *slots,
		      const float *k, const float *v);
int kvk_cuda_write_kv_bf16(struct kvk_cuda *c, const struct kvk_layout *l,
			   CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			   const uint32_t *blocks, const uint32_t *slots,
			   const uint16_t *k, const uint16_t *v);
int kvk_cuda_read_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		     CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		     const uint32_t *blocks, const uint32_t *slots,
		     float *k, float *v);
int kvk_cuda_decode(struct kvk_cuda *c, const struct kvk_decode_args *a);
int kvk_cuda_prefill(struct kvk_cuda *c, const struct kvk_prefill_args *a);
int kvk_cuda_copy_blocks(struct kvk_cuda *c, CUdeviceptr pool,
			 uint64_t block_bytes, uint64_t pool_blocks,
			 const uint32_t *src, const uint32_t *dst, uint32_t n);

/*
 * Benchmark hook: decode with q, block_tables and out already in device
 * memory (device addresses cast to pointers); ctx_lens stays a HOST array
 * (needed to plan the split).  Launches only: no synchronisation.  Used
 * by tests/gpu to time the kernels.
 */
int kvk_cuda_decode_dev(struct kvk_cuda *c, const struct kvk_decode_args *a);
/* Device-to-device read bandwidth probe: reads `bytes` at src, returns
 * GB/s over `iters` iterations in *gbps. */
int kvk_cuda_read_bw(struct kvk_cuda *c, CUdeviceptr src, size_t bytes,
		     int iters, double *gbps);

/* kvk_write_kv_flags() on the GPU (KVK_WRITE_MERGE). */
int kvk_cuda_write_kv_flags(struct kvk_cuda *c, const struct kvk_layout *l,
			    CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			    const uint32_t *blocks, const uint32_t *slots,
			    const float *k, const float *v, uint32_t flags);

/*
 * The edit ops (kvkern_cuda_edit.c): same semantics and errors as
 * kvk_splice(), kvk_compact() and kvk_score(); args->pool_base is the
 * device address, every other array host memory.  Splice and compact
 * give the same pool bytes as the CPU ops; score agrees with the CPU
 * within FP32 rounding (the sums run in another order).  block_bytes a
 * multiple of 16 (-EINVAL); at most 65535 planes (layers * 2 *
 * kv_heads, -EOPNOTSUPP).
 */
int kvk_cuda_splice(struct kvk_cuda *c, const struct kvk_splice_args *a);
int kvk_cuda_compact(struct kvk_cuda *c, const struct kvk_compact_args *a);
int kvk_cuda_score(struct kvk_cuda *c, const struct kvk_score_args *a);

/* For the edit ops' glue: the driver table, a kernel by name, SMs. */
struct cuda_drv *kvk_cuda_drv(struct kvk_cuda *c);
int kvk_cuda_function(struct kvk_cuda *c, const char *name, CUfunction *f);
int kvk_cuda_sm_count(const struct kvk_cuda *c);

#ifdef __cplusplus
}
#endif

#endif /* KVKERN_CUDA_H */
