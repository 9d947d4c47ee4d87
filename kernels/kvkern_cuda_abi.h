/* SPDX-License-Identifier: MIT */
/*
 * kvkern_cuda_abi.h - kernel parameter blocks shared by the CUDA kernels
 * (kernels/cuda/kvkern_kernels.cu) and the C launch glue (kvkern_cuda.c).
 * Passed by value as the single kernel argument.  Device addresses are
 * uint64_t.  Change both sides together.
 */
#ifndef KVKERN_CUDA_ABI_H
#define KVKERN_CUDA_ABI_H

#include <stdint.h>

struct kvk_cu_layout {
	uint64_t block_bytes;
	uint64_t plane_bytes;
	uint64_t meta_offset;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t tokens_per_block;
	uint32_t row_bytes;
	uint32_t dtype;
	uint32_t layer;
};

/* attention: grid (kv_heads, batch * nqb, nsplit), 128 threads */
struct kvk_cu_attn {
	struct kvk_cu_layout l;
	uint64_t pool;		/* pool base */
	uint64_t q;		/* float [batch][n_q or 1][q_heads][D] */
	uint64_t tables;	/* uint32 [batch][mbps] */
	uint64_t ctx;		/* uint32 [batch] */
	uint64_t parts;		/* float, per (seq, qblock, head, split):
				 * qb * group rows of (m, l, o[D]) */
	uint32_t q_heads;
	uint32_t group;
	uint32_t n_q;		/* 0 = decode */
	uint32_t mbps;
	uint32_t nqb;		/* query blocks per sequence */
	uint32_t qb;		/* query tokens per block */
	uint32_t nsplit;
	uint32_t chunk;		/* positions per split */
	float scale;
	uint32_t pad;
};

/* merge: grid (batch * nqb * kv_heads), 128 threads */
struct kvk_cu_merge {
	uint64_t parts;
	uint64_t out;		/* float [batch][n_q or 1][q_heads][D] */
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t q_heads;
	uint32_t group;
	uint32_t n_q;
	uint32_t nqb;
	uint32_t qb;
	uint32_t nsplit;
};

/* write: grid (ngroups, 2 * kv_heads), 128 threads */
struct kvk_cu_write {
	struct kvk_cu_layout l;
	uint64_t pool;
	uint64_t k, v;		/* float or bf16 [ntok][kv_heads][D] */
	uint64_t grp_block;	/* uint32 [ngroups] */
	uint64_t grp_start;	/* uint32 [ngroups + 1] into tok_idx */
	uint64_t tok_idx;	/* uint32 [ntok], per group in call order */
	uint64_t slots;		/* uint32 [ntok] */
	uint32_t ngroups;
	uint32_t bf16_in;
	uint32_t flags;		/* KVK_WRITE_* (MERGE: never start afresh) */
	uint32_t pad;
};

/* read: grid (ntok, 2 * kv_heads), head_dim threads */
struct kvk_cu_read {
	struct kvk_cu_layout l;
	uint64_t pool;
	uint64_t blocks, slots;	/* uint32 [ntok] */
	uint64_t k, v;		/* float [ntok][kv_heads][D] */
};

/* read bandwidth probe: grid-stride 16-byte loads */
struct kvk_cu_bw {
	uint64_t src;
	uint64_t bytes;
	uint64_t sink;		/* uint32 [gridDim.x] */
};

#define KVK_CU_THREADS 128

#endif /* KVKERN_CUDA_ABI_H */
