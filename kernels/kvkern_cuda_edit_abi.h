/* SPDX-License-Identifier: MIT */
/*
 * kvkern_cuda_edit_abi.h - parameter blocks of the edit kernels
 * (kernels/cuda/kvkern_edit.cu), shared with their launch glue
 * (kernels/kvkern_cuda_edit.c).  Passed by value as the single kernel
 * argument; device addresses are uint64_t.  Change both sides together.
 */
#ifndef KVKERN_CUDA_EDIT_ABI_H
#define KVKERN_CUDA_EDIT_ABI_H

#include <stdint.h>

struct kvk_cu_elayout {
	uint64_t block_bytes;
	uint64_t plane_bytes;
	uint64_t meta_offset;
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t tokens_per_block;
	uint32_t row_bytes;
	uint32_t dtype;
};

/*
 * Splice / compact, one batch of destination blocks: the plan's k-th
 * destination for k in k0 .. k0 + gridDim.x - 1, every plane (blockIdx.y
 * = (layer * 2 + kv) * kv_heads + head), 128 threads.  kvk_edit_gather
 * copies every source row of the batch into stage, kvk_edit_scatter then
 * writes the destination rows from there.  Batches run in the plan's
 * order (kernels/kvkern_edit_internal.h).
 */
struct kvk_cu_edit {
	struct kvk_cu_elayout l;
	uint64_t pool;
	uint64_t table;		/* uint32 [blocks of the sequence] */
	uint64_t keep;		/* uint32 [nkeep] (compact) */
	uint64_t cs, sn;	/* float [rotary_dims / 2] */
	uint64_t stage;		/* per (batch block, plane): T rows of
				 * row_bytes, T group-scale runs (INT4),
				 * T float source scales */
	uint64_t stage_stride;	/* bytes per (batch block, plane) */
	int64_t shift;
	uint32_t mode;		/* KVK_EDIT_SPLICE / _COMPACT */
	uint32_t new_len;
	uint32_t at, nins;
	uint32_t rotate, style, rd, nkeep;
	uint32_t first, ndest;
	int32_t dir;
	uint32_t k0;
};

/*
 * Score, pass 1: grid (ceil(len / 128), kv_heads), 128 threads, one slot
 * per thread; every CTA leaves per query row (max, sum of exp) of its
 * slots in parts[(head * nchunks + chunk) * Rh + row] (m, l pairs).
 * Pass 2 (the same grid, x only): out[slot] from M, L per row.
 */
struct kvk_cu_score {
	struct kvk_cu_elayout l;
	uint64_t pool;
	uint64_t table;		/* uint32 [blocks] */
	uint64_t q;		/* float [n_q][q_heads][D] */
	uint64_t parts;		/* float [kv_heads][nchunks][Rh][2] */
	uint64_t ml;		/* float [kv_heads][Rh][2]: M, L */
	uint64_t out;		/* float [len] */
	uint32_t layer;
	uint32_t q_heads;
	uint32_t group;
	uint32_t n_q;
	uint32_t len;
	uint32_t causal;
	uint32_t want_max;
	uint32_t nchunks;
	float scale;
	uint32_t pad;
};

#define KVK_CU_EDIT_THREADS	128
#define KVK_CU_SCORE_TILE	16	/* query rows per pass over the slots */

#endif /* KVKERN_CUDA_EDIT_ABI_H */
