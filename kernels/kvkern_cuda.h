/* SPDX-License-Identifier: MIT */
/*
 * kvkern_cuda.h - the kvkern ops on a pool in GPU memory.
 *
 * Same semantics as kvkern.h.  The pool base is a device address
 * (CUdeviceptr, passed in the args' pool_base as (void *)(uintptr_t)ptr).
 * The plain calls take every other array (q, k, v, out, blocks, slots,
 * block tables, context lengths) in HOST memory: the glue stages them
 * through pinned host memory and a device scratch buffer it owns, runs
 * the kernels on its own stream and synchronises before returning.  The
 * _dev calls take the bulk arrays (q, out, k, v) as device addresses and
 * only the index arrays in host memory (zero-copy for engines on the
 * GPU); they too return after the stream is synchronised, so their
 * results are complete and visible to any later work on the device.
 *
 * Kernels come from kvpool_kernels.fatbin (sm_80, sm_90 + PTX), loaded
 * with cuModuleLoadData into the context current when kvk_cuda_init()
 * runs; every later call must run with that context current.
 * A struct kvk_cuda is not thread-safe: one caller at a time.
 * The GPU ops need block_bytes and the pool base to be multiples of 16
 * (-EINVAL otherwise); attention needs head_dim 32, 64, 128 or 256
 * (kvk_cuda_head_dim_ok(), -EOPNOTSUPP otherwise).
 */
#ifndef KVKERN_CUDA_H
#define KVKERN_CUDA_H

#include "kvkern.h"
#include "cuda_drv.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvk_cuda;

/*
 * Fatbin search, first found: the path given, $KVPOOL_FATBIN, lib/ beside
 * the program (../lib, ../../lib, ../../../lib from its directory), then
 * $(PREFIX)/lib/kvpool/ (KVK_FATBIN_DIR at build time).  When the driver
 * cannot load the fatbin (it is older than the toolkit that built it),
 * kvpool_kernels.compat.ptx from the same directory is tried: PTX for
 * compute_80 that drivers from CUDA 11.8 on compile.
 */
#define KVK_FATBIN_NAME "kvpool_kernels.fatbin"
#define KVK_COMPAT_PTX_NAME "kvpool_kernels.compat.ptx"

/*
 * Load the kernels into the current context of drv (already opened,
 * cuInit done, a context current), create the glue's stream, check every
 * kernel's parameter size against this build (cuFuncGetParamInfo, when
 * the driver has it), set the shared memory the attention kernels need
 * and query their occupancy.  -ENOENT if no fatbin, -ENODEV/-EIO for
 * driver errors (logged by name), -EPROTO when a kernel does not match.
 */
int kvk_cuda_init(struct kvk_cuda **out, struct cuda_drv *drv,
		  const char *fatbin_path);
void kvk_cuda_free(struct kvk_cuda *c);

/* 1 when the attention kernels support head_dim */
int kvk_cuda_head_dim_ok(uint32_t head_dim);
/* The stream every op runs on. */
CUstream kvk_cuda_stream(const struct kvk_cuda *c);

struct kvk_cuda_info {
	char device[128];
	int sm_count;
	int cc_major, cc_minor;
	int driver_version;
	size_t smem_optin;		/* shared memory per block, opted in */
	char module[256];		/* the file the kernels came from */
};
int kvk_cuda_info(const struct kvk_cuda *c, struct kvk_cuda_info *i);

/* One attention kernel's resources and launch geometry. */
struct kvk_cuda_kernel {
	char name[32];
	int regs;			/* registers per thread */
	int local_bytes;		/* local memory (spills) per thread */
	uint32_t smem;			/* dynamic shared memory per block */
	uint32_t stages;		/* cp.async pipeline depth per warp */
	int blocks_per_sm;		/* occupancy query */
};
int kvk_cuda_kernel_info(const struct kvk_cuda *c, uint32_t dtype,
			 uint32_t head_dim, struct kvk_cuda_kernel *k);

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
/* Zero blocks[0..n) (whole blocks) on stream (NULL: the kernels' stream)
 * and wait for it, so that no stream reads them before. */
int kvk_cuda_zero_blocks(struct kvk_cuda *c, CUstream stream, CUdeviceptr pool,
			 uint64_t block_bytes, uint64_t pool_blocks,
			 const uint32_t *blocks, uint32_t n);

/* ---- bulk arrays in device memory ---- */

/* k, v: device addresses of [ntok][kv_heads][head_dim] FP32, or BF16
 * when bf16 is set; blocks and slots are host arrays. */
int kvk_cuda_write_kv_dev(struct kvk_cuda *c, const struct kvk_layout *l,
			  CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			  const uint32_t *blocks, const uint32_t *slots,
			  CUdeviceptr k, CUdeviceptr v, int bf16);
/* k or v may be 0 (not wanted). */
int kvk_cuda_read_kv_dev(struct kvk_cuda *c, const struct kvk_layout *l,
			 CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			 const uint32_t *blocks, const uint32_t *slots,
			 CUdeviceptr k, CUdeviceptr v);
/* Attention with q and out in device memory (a->q and a->out are
 * ignored); n_new 0 is decode.  Tables and context lengths are host. */
int kvk_cuda_attn_dev(struct kvk_cuda *c, const struct kvk_prefill_args *a,
		      CUdeviceptr q, CUdeviceptr out);

/* ---- benchmark: everything in device memory, planned once ---- */

struct kvk_cuda_plan;
/*
 * Plan a decode whose q, block_tables, ctx_lens and out are DEVICE
 * addresses (cast to pointers); max_ctx bounds every context length.
 * The plan owns its split buffer.  kvk_cuda_plan_launch() only launches
 * (on kvk_cuda_stream(), no synchronisation): time it with events.
 */
int kvk_cuda_plan_decode(struct kvk_cuda *c, const struct kvk_decode_args *a,
			 uint32_t max_ctx, struct kvk_cuda_plan **out);
int kvk_cuda_plan_launch(struct kvk_cuda *c, const struct kvk_cuda_plan *pl);
/* "grid AxB (N waves of W), chunk C, kernel K" */
void kvk_cuda_plan_describe(const struct kvk_cuda_plan *pl, char *buf,
			    size_t len);
/* The plan's geometry: ctas thread blocks per split (sequences x kv heads
 * x row blocks), nsplit splits of chunk positions, wave thread blocks
 * resident at once (SMs x blocks per SM). */
struct kvk_cuda_plan_info {
	uint32_t ctas, nsplit, wave, chunk;
};
void kvk_cuda_plan_info(const struct kvk_cuda_plan *pl,
			struct kvk_cuda_plan_info *info);
void kvk_cuda_plan_free(struct kvk_cuda *c, struct kvk_cuda_plan *pl);

/* Device read bandwidth: reads `bytes` (multiple of 16) at src, GB/s over
 * `iters` launches timed with events. */
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
/*
 * The edit kernels' own non-blocking stream (neither the attention
 * stream nor the legacy one, so that an edit does not wait for swap
 * copies or other work) and their device scratch of at least bytes, kept
 * between calls (grown when a call needs more) and freed with the
 * context.  The caller synchronises the stream before it returns.
 */
int kvk_cuda_edit_scratch(struct kvk_cuda *c, size_t bytes, CUstream *st,
			  CUdeviceptr *buf);
/*
 * Run the warp-level primitives the attention kernels rely on (mma.sync
 * fragments, ldmatrix, movmatrix, FP8/INT8/INT4 conversion, cp.async zero
 * fill) on known inputs and compare each result with the PTX ISA's
 * definition.  0, or -EIO with the first difference described in msg.
 */
int kvk_cuda_selftest(struct kvk_cuda *c, char *msg, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVKERN_CUDA_H */
