/* SPDX-License-Identifier: MIT */
/*
 * kvkern_cuda_abi.h - kernel parameter blocks and launch geometry shared
 * by the CUDA kernels (kernels/cuda/kvkern_kernels.cu), the C launch glue
 * (kvkern_cuda.c), the driver test double (tests/cudafake) and the host
 * emulation of the kernels (tests/cudafake/cuemu.h).  Each kernel takes one
 * parameter block by value; device addresses are uint64_t.  Change every
 * side together: kvk_cuda_init() compares each kernel's parameter size
 * with sizeof() of its block (cuFuncGetParamInfo) and refuses to run on a
 * mismatch.
 */
#ifndef KVKERN_CUDA_ABI_H
#define KVKERN_CUDA_ABI_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KVK_CU_HD __host__ __device__ constexpr inline
#elif defined(__cplusplus)
#define KVK_CU_HD constexpr inline
#else
#define KVK_CU_HD static inline
#endif

#define KVK_CU_THREADS	128	/* every kernel but kvk_read_bw */
#define KVK_CU_WARPS	(KVK_CU_THREADS / 32)
#define KVK_CU_ROWS	8	/* query rows per attention thread block */
#define KVK_CU_TILE	16	/* positions per tile (one MMA k-step) */
#define KVK_CU_TAB	1024	/* block-table entries one thread block holds */
#define KVK_CU_BW_THREADS 512

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

/*
 * Attention: grid (batch * kv_heads * row_blocks, nsplit), KVK_CU_THREADS
 * threads, kvk_cu_attn_smem() bytes of dynamic shared memory.
 * blockIdx.x = (seq * kv_heads + head) * row_blocks + row block; a row
 * block is KVK_CU_ROWS consecutive rows of the flattened (query token,
 * query head of the group) index x = token * group + head; blockIdx.y is
 * the split, positions [split * chunk, (split + 1) * chunk).
 */
struct kvk_cu_attn {
	struct kvk_cu_layout l;
	uint64_t pool;		/* pool base */
	uint64_t q;		/* float [batch][n_q or 1][q_heads][D] */
	uint64_t tables;	/* uint32 [batch][mbps] */
	uint64_t ctx;		/* uint32 [batch] */
	uint64_t parts;		/* float [gridDim.x][nsplit][ROWS][D + 2]
				 * (m, l, o[D]) when nsplit > 1 */
	uint64_t out;		/* float, like q */
	uint32_t batch;
	uint32_t q_heads;
	uint32_t group;		/* q_heads / kv_heads */
	uint32_t n_q;		/* 0 = decode */
	uint32_t mbps;		/* max blocks per sequence */
	uint32_t row_blocks;
	uint32_t nsplit;
	uint32_t chunk;		/* positions per split, multiple of TILE */
	float scale;		/* softmax scale times log2(e) */
	uint32_t pad;
};

/* merge of the splits: grid (batch * kv_heads * row_blocks), THREADS */
struct kvk_cu_merge {
	uint64_t parts;
	uint64_t out;		/* float [batch][n_q or 1][q_heads][D] */
	uint32_t batch;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t q_heads;
	uint32_t group;
	uint32_t n_q;
	uint32_t row_blocks;
	uint32_t nsplit;
};

/* write: grid (ngroups * 2 * kv_heads), THREADS */
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
	uint32_t ntok;
	uint32_t pad;
};

/* read: grid (ntok * 2 * kv_heads), THREADS */
struct kvk_cu_read {
	struct kvk_cu_layout l;
	uint64_t pool;
	uint64_t blocks, slots;	/* uint32 [ntok] */
	uint64_t k, v;		/* float [ntok][kv_heads][D]; 0 = not wanted */
	uint32_t ntok;
	uint32_t pad;
};

/* read bandwidth probe: grid-stride 16-byte loads, BW_THREADS threads */
struct kvk_cu_bw {
	uint64_t src;
	uint64_t bytes;		/* multiple of 16 */
	uint64_t sink;		/* uint32 [gridDim.x] */
};

/*
 * Self-test of the warp-level primitives the attention kernels rely on
 * (mma.sync fragments, ldmatrix, movmatrix, FP8 conversion, cp.async
 * zero fill): one warp, 32 threads, no dynamic shared memory.  out gets
 * KVK_CU_SELFTEST_WORDS uint32 per lane, compared by kvk_cuda_selftest()
 * with the fragment layouts of the PTX ISA.
 */
struct kvk_cu_selftest {
	uint64_t in;		/* uint16 [16][16] A, [16][8] B, bytes after */
	uint64_t out;		/* uint32 [32][KVK_CU_SELFTEST_WORDS] */
};
#define KVK_CU_SELFTEST_WORDS 32

/* ---- attention geometry, shared by kernels and host ---- */

/* Pipeline stages of one warp's K/V tile buffers (each tile is 16
 * positions of K and V rows): enough for about 12 KiB in flight. */
KVK_CU_HD uint32_t kvk_cu_row_stride(uint32_t row_bytes)
{
	return row_bytes + 16;		/* padded: ldmatrix without conflicts */
}

/* Scale bytes per tile row: FP8/INT8 one float per row; INT4 the row's
 * group scales (4-byte copies: D/16 bytes, at least 4). */
KVK_CU_HD uint32_t kvk_cu_scale_bytes(uint32_t dtype, uint32_t head_dim)
{
	if (dtype == 2 || dtype == 3)
		return 4;
	if (dtype == 4)
		return head_dim / 16 < 4 ? 4 : head_dim / 16;
	return 0;
}

KVK_CU_HD uint32_t kvk_cu_tile_bytes(uint32_t dtype, uint32_t head_dim,
				     uint32_t row_bytes)
{
	return 2 * KVK_CU_TILE * (kvk_cu_row_stride(row_bytes) +
				  kvk_cu_scale_bytes(dtype, head_dim));
}

KVK_CU_HD uint32_t kvk_cu_stages(uint32_t dtype, uint32_t head_dim,
				 uint32_t row_bytes)
{
	uint32_t t = kvk_cu_tile_bytes(dtype, head_dim, row_bytes);
	uint32_t s = (12288 + t - 1) / t + 1;

	return s < 2 ? 2 : s > 8 ? 8 : s;
}

/*
 * Dynamic shared memory of one attention thread block, in this order:
 *   [warps][stages] tiles       (reused by the final merge: warps x ROWS
 *                                x (D + 2) floats)
 *   query fragments             D / 16 k-steps x 32 lanes x 16 bytes
 *   block-table slice           KVK_CU_TAB uint32
 *   per warp: 16 row addresses  (uint64) and 16 slots (uint32)
 *   per row: exponent, limit    2 x ROWS int32
 *   per row: merged max and sum, query factor  3 x ROWS float
 */
KVK_CU_HD uint32_t kvk_cu_attn_tiles_bytes(uint32_t dtype, uint32_t head_dim,
					   uint32_t row_bytes)
{
	uint32_t t = KVK_CU_WARPS * kvk_cu_stages(dtype, head_dim, row_bytes) *
		     kvk_cu_tile_bytes(dtype, head_dim, row_bytes);
	uint32_t m = KVK_CU_WARPS * KVK_CU_ROWS * (head_dim + 2) * 4;

	t = t > m ? t : m;
	return (t + 15) & ~15u;
}

KVK_CU_HD uint32_t kvk_cu_attn_smem(uint32_t dtype, uint32_t head_dim,
				    uint32_t row_bytes)
{
	return kvk_cu_attn_tiles_bytes(dtype, head_dim, row_bytes) +
	       head_dim / 16 * 32 * 16 + KVK_CU_TAB * 4 +
	       KVK_CU_WARPS * KVK_CU_TILE * 12 + 5 * KVK_CU_ROWS * 4;
}

#endif /* KVKERN_CUDA_ABI_H */
