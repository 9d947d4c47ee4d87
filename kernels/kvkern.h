/* SPDX-License-Identifier: MIT */
/*
 * kvkern.h - paged KV-cache kernels: block layout, K/V write (quantising),
 * decode and multi-token (causal) attention, block copy.  CPU side.
 *
 * A pool is an array of blocks of block_bytes each; block i lives at
 * pool_base + i * block_bytes.  A model's KV layout (struct kvk_layout)
 * fixes how many tokens fit in a block and where each token's K and V
 * rows and the scale metadata live inside it:
 *
 *   [layer][K|V][kv_head][token][head_dim]   data planes
 *   [metadata]                               per-block scales (see below)
 *
 * Formats, byte by byte, and the numerical contract (error bounds,
 * NaN/Inf, scale re-quantisation rule) are in Documentation/kernels.rst.
 *
 * Every function returns 0 or -errno (-EINVAL for bad arguments); none
 * sets errno.  All float arrays are row-major, host memory.
 *
 * The CUDA twins (same semantics, pool in device memory) are declared in
 * kvkern_cuda.h.
 */
#ifndef KVKERN_H
#define KVKERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KV element type of a layout. */
enum kvk_dtype {
	KVK_BF16 = 1,	/* bfloat16, no scale */
	KVK_FP8 = 2,	/* OCP FP8 E4M3 (max 448, saturating), FP32 scale
			 * per (block, layer, K|V, kv_head), power of two */
	KVK_INT8 = 3,	/* int8 [-127,127], FP32 scale per (block, layer,
			 * K|V, kv_head), power of two */
	KVK_INT4 = 4,	/* int4 [-7,7] two per byte, FP16 scale per group
			 * of 32 values of one token row */
};

/* "bf16", "fp8", "int8", "int4" <-> enum kvk_dtype. */
const char *kvk_dtype_name(uint32_t dtype);	/* NULL if unknown */
int kvk_dtype_from_name(const char *name);	/* dtype or -EINVAL */

#define KVK_MAX_HEAD_DIM	256	/* head_dim: multiple of 32, 32..256 */
#define KVK_MAX_GQA		16	/* q_heads / kv_heads: 1..16 */
#define KVK_INT4_GROUP		32	/* values per INT4 scale group */

/*
 * How the keys of a layout were rotated (RoPE), so that an edit can shift
 * a stored key's position by delta with one more rotation R(delta).  Keys
 * are stored already rotated, as engines write them.  Pair i of a head is
 * (i, i + rotary_dims / 2) for NEOX and (2i, 2i + 1) for GPTJ; it turns by
 * position x inv_freq[i] radians; dimensions from rotary_dims on are not
 * rotated.  Set with kvk_layout_set_rope(); all zero (KVK_ROPE_NONE): the
 * layout has no RoPE data and an edit that must re-rotate keys fails with
 * -ENODATA.  Documentation/edits.rst has the angle computation.
 */
enum kvk_rope_style {
	KVK_ROPE_NONE = 0,
	KVK_ROPE_NEOX = 1,	/* halves: x[i] pairs with x[i + rotary_dims/2] */
	KVK_ROPE_GPTJ = 2,	/* interleaved: x[2i] pairs with x[2i + 1] */
};

#define KVK_ROPE_MAX_FREQ	(KVK_MAX_HEAD_DIM / 2)

struct kvk_rope {
	uint32_t style;			/* enum kvk_rope_style */
	uint32_t rotary_dims;		/* even, 2..head_dim */
	float base;			/* theta base (0 when a table was given
					 * without one) */
	uint32_t table_given;		/* 1: inv_freq is the caller's table */
	float inv_freq[KVK_ROPE_MAX_FREQ];	/* rotary_dims / 2 used */
};

/*
 * A model's KV layout inside one pool's blocks.  Fill with
 * kvk_layout_init(); the derived fields are read-only for callers, except
 * pool_blocks which a caller may set afterwards to make every op check
 * block indices against the pool size (0 = unchecked), and rope, set with
 * kvk_layout_set_rope().
 */
struct kvk_layout {
	/* given */
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t dtype;			/* enum kvk_dtype */
	uint64_t block_bytes;
	/* derived by kvk_layout_init() */
	uint32_t tokens_per_block;	/* >= 1 */
	uint32_t row_bytes;		/* bytes of one token's K (or V) row
					 * of one kv_head in a data plane */
	uint64_t plane_bytes;		/* tokens_per_block * row_bytes: one
					 * [layer][K|V][kv_head] plane */
	uint64_t bytes_per_token;	/* data + per-token metadata, all
					 * layers, K and V, all kv_heads */
	uint64_t meta_offset;		/* start of scale metadata (4-aligned) */
	uint64_t meta_bytes;		/* size of scale metadata */
	uint64_t used_bytes;		/* meta_offset + meta_bytes <= block_bytes */
	/* optional: number of blocks in the pool, for bounds checks */
	uint64_t pool_blocks;
	/* optional: how keys were rotated (kvk_layout_set_rope) */
	struct kvk_rope rope;
};

/*
 * Validate and derive.  -EINVAL when: dtype unknown; head_dim not a
 * multiple of 32 in 32..256; layers or kv_heads 0 (or > 65536); the block
 * cannot hold one token with its metadata.
 */
int kvk_layout_init(struct kvk_layout *l, uint32_t layers, uint32_t kv_heads,
		    uint32_t head_dim, uint32_t dtype, uint64_t block_bytes);

/* Bytes one token needs (all layers, K and V) incl. per-token metadata,
 * plus the fixed per-block metadata; helper for sizing block_bytes:
 * block_bytes >= fixed + n * per_token holds n tokens. */
int kvk_layout_cost(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		    uint32_t dtype, uint64_t *per_token, uint64_t *fixed);

/* Byte offsets inside a block (no bounds checks; kv: 0 = K, 1 = V). */
uint64_t kvk_row_offset(const struct kvk_layout *l, uint32_t layer,
			uint32_t kv, uint32_t head, uint32_t token);
/* FP8/INT8: offset of the float scale of (layer, kv, head).
 * INT4: offset of the first FP16 group scale of token's row. */
uint64_t kvk_scale_offset(const struct kvk_layout *l, uint32_t layer,
			  uint32_t kv, uint32_t head, uint32_t token);

/*
 * Write K and V of ntok tokens of one layer: token t goes to slot slots[t]
 * of block blocks[t].  k, v: [ntok][kv_heads][head_dim] FP32 (or BF16 bit
 * patterns for the _bf16 variant).  Quantises to l->dtype.  For FP8/INT8,
 * a call that writes slot 0 of a block starts that block afresh (its
 * scale is set from this call's values); otherwise the scale only grows
 * and the block's existing tokens are re-quantised when it does (see
 * Documentation/kernels.rst).  If one (block, slot) is named twice, the
 * later token wins.
 */
int kvk_write_kv(const struct kvk_layout *l, void *pool_base, uint32_t layer,
		 uint32_t ntok, const uint32_t *blocks, const uint32_t *slots,
		 const float *k, const float *v);
int kvk_write_kv_bf16(const struct kvk_layout *l, void *pool_base,
		      uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		      const uint32_t *slots, const uint16_t *k,
		      const uint16_t *v);
/* Dequantise back to FP32, same shapes as kvk_write_kv. k or v may be NULL. */
int kvk_read_kv(const struct kvk_layout *l, const void *pool_base,
		uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		const uint32_t *slots, float *k, float *v);

/*
 * Decode attention: one query token per sequence, attending to positions
 * 0..ctx_lens[b]-1 of its cache.  Position p of sequence b is slot
 * p % tokens_per_block of block block_tables[b * max_blocks_per_seq +
 * p / tokens_per_block].  Query head h uses kv_head h / (q_heads /
 * kv_heads).  out = softmax(scale * q.K^T) V, accumulated in FP32.  A
 * sequence with ctx_len 0 gets zeros.
 */
struct kvk_decode_args {
	const struct kvk_layout *layout;
	void *pool_base;		/* host pointer (CPU ops) or device
					 * address (CUDA ops, see kvkern_cuda.h) */
	uint32_t layer;
	uint32_t batch;
	uint32_t q_heads;		/* kv_heads * (1..16) */
	uint32_t max_blocks_per_seq;
	const float *q;			/* [batch][q_heads][head_dim] */
	const uint32_t *block_tables;	/* [batch][max_blocks_per_seq] */
	const uint32_t *ctx_lens;	/* [batch], <= max_blocks_per_seq *
					 * tokens_per_block */
	float scale;			/* softmax scale, e.g. 1/sqrt(head_dim) */
	float *out;			/* [batch][q_heads][head_dim] */
};

/*
 * Multi-token attention with a causal mask: n_new query tokens per
 * sequence whose K/V are already written to the cache at positions
 * ctx_lens[b] - n_new .. ctx_lens[b] - 1.  Query i of sequence b sits at
 * position ctx_lens[b] - n_new + i and attends to positions 0..that
 * position.  Needs ctx_lens[b] >= n_new.
 */
struct kvk_prefill_args {
	const struct kvk_layout *layout;
	void *pool_base;
	uint32_t layer;
	uint32_t batch;
	uint32_t q_heads;
	uint32_t max_blocks_per_seq;
	uint32_t n_new;			/* queries per sequence, >= 1 */
	uint32_t pad;			/* must be 0 */
	const float *q;			/* [batch][n_new][q_heads][head_dim] */
	const uint32_t *block_tables;	/* [batch][max_blocks_per_seq] */
	const uint32_t *ctx_lens;	/* [batch] */
	float scale;
	float *out;			/* [batch][n_new][q_heads][head_dim] */
};

/* CPU execution context: a thread pool (the caller's thread works too). */
struct kvk_cpu;

/* nthreads 0 = one per CPU the calling thread may run on (its affinity
 * mask; online CPUs if that is unknown).  *out is NULL on error. */
int kvk_cpu_init(struct kvk_cpu **out, unsigned int nthreads);
void kvk_cpu_free(struct kvk_cpu *cpu);
unsigned int kvk_cpu_threads(const struct kvk_cpu *cpu);
/* Name of the SIMD path chosen at run time: "avx512bf16" (AVX-512 with
 * AVX512-BF16 and AVX512-VBMI), "avx512", "avx2", "generic".
 * KVK_SIMD=generic|avx2|avx512|avx512bf16 in the environment caps the
 * choice. */
const char *kvk_cpu_simd(const struct kvk_cpu *cpu);

/* Scalar reference (single thread). */
int kvk_decode_ref(const struct kvk_decode_args *a);
int kvk_prefill_ref(const struct kvk_prefill_args *a);
/* Optimised: SIMD, threads, split-K.  cpu NULL = single thread. */
int kvk_decode(const struct kvk_decode_args *a, struct kvk_cpu *cpu);
int kvk_prefill(const struct kvk_prefill_args *a, struct kvk_cpu *cpu);

/*
 * Copy whole blocks (data and metadata): for i in 0..n-1, in order,
 * block dst[i] = block src[i].  src[i] == dst[i] is a no-op.
 * pool_blocks (0 = unchecked) bounds the indices.
 */
int kvk_copy_blocks(void *pool_base, uint64_t block_bytes,
		    uint64_t pool_blocks, const uint32_t *src,
		    const uint32_t *dst, uint32_t n);

/*
 * kvk_write_kv() with flags.  KVK_WRITE_MERGE: the call never starts a
 * block afresh, even when it writes slot 0 (the scale only grows, rule 2/3
 * of Documentation/kernels.rst): for blocks that already hold other valid
 * tokens in FP8/INT8, e.g. the slots an edit made for new tokens.  Other
 * bits: -EINVAL.
 */
#define KVK_WRITE_MERGE		(1U << 0)
#define KVK_WRITE_FLAGS		KVK_WRITE_MERGE
int kvk_write_kv_flags(const struct kvk_layout *l, void *pool_base,
		       uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, const float *k, const float *v,
		       uint32_t flags);

/* ---- editing a sequence in place (kvkern_edit.c) ---------------------- */

/*
 * Describe the layout's RoPE.  style KVK_ROPE_NONE clears it.
 * rotary_dims 0 means head_dim; otherwise even, 2..head_dim.  inv_freq:
 * rotary_dims / 2 finite values (any RoPE whose angle is linear in the
 * position: plain, linear or NTK scaling, Llama-3 scaling, YaRN's
 * frequencies), or NULL to derive base^(-2i / rotary_dims) (computed in
 * double, rounded to FP32 once; base finite and > 0).  -EINVAL otherwise.
 */
int kvk_layout_set_rope(struct kvk_layout *l, uint32_t style,
			uint32_t rotary_dims, float base,
			const float *inv_freq);

/*
 * cos and sin of delta x inv_freq[i] for i in 0..rotary_dims/2 - 1, as
 * FP32 (formed and reduced mod 2 pi in extended precision; see
 * Documentation/edits.rst).  -EINVAL without RoPE data or |delta| >= 2^32.
 */
int kvk_rope_cos_sin(const struct kvk_rope *r, int64_t delta, float *c,
		     float *s);
/* Rotate nrows FP32 rows of head_dim values in place by R(delta), in FP32
 * (the arithmetic the edit ops use before re-quantising). */
int kvk_rope_rotate_rows(const struct kvk_layout *l, int64_t delta,
			 uint32_t nrows, float *rows);

/*
 * Splice one sequence in place.  Slot p of the sequence is slot p % T of
 * block block_table[p / T].  Slots [at, at + ndel) are deleted, nins
 * slots are made at at (they read as zeros until written), and the tail
 * [at + ndel, len) moves to [at + nins, new_len), new_len = len - ndel +
 * nins: every layer's K row of a tail token is dequantised, rotated by
 * R(delta) in FP32 and re-quantised; its V row is moved (its bytes kept
 * when the destination block's scale allows, see the block-scale rule in
 * Documentation/edits.rst).  Slots past new_len in the last block read as
 * zeros.  block_table needs ceil(max(len, new_len) / T) distinct blocks
 * (the caller frees the ones past new_len afterwards).
 * Errors (nothing is changed): -EINVAL bad arguments, a block index beyond
 * pool_blocks or named twice; -ERANGE at + ndel > len or new_len beyond
 * the table; -ENODATA delta != 0 and the layout has no RoPE data.
 */
struct kvk_splice_args {
	const struct kvk_layout *layout;
	void *pool_base;		/* host (CPU) or device address (CUDA) */
	const uint32_t *block_table;
	uint32_t nblocks;		/* entries in block_table */
	uint32_t len;			/* slots in use before the edit */
	uint32_t at;			/* first slot deleted / made */
	uint32_t ndel;			/* slots deleted */
	uint32_t nins;			/* slots made for new tokens */
	uint32_t pad;			/* must be 0 */
	int64_t delta;			/* RoPE position shift of the tail */
};

/*
 * Compact one sequence in place: slot keep[i] moves to slot i for i in
 * 0..nkeep-1 (order kept, no rotation), slots from nkeep on read as zeros
 * in the last block; the caller frees blocks past ceil(nkeep / T).
 * -EINVAL: keep not strictly increasing, an entry >= len, a block index
 * beyond pool_blocks or named twice; -ERANGE: len beyond the table.
 */
struct kvk_compact_args {
	const struct kvk_layout *layout;
	void *pool_base;
	const uint32_t *block_table;
	uint32_t nblocks;		/* entries: >= ceil(len / T) */
	uint32_t len;
	const uint32_t *keep;		/* [nkeep] */
	uint32_t nkeep;			/* 0..len */
	uint32_t pad;			/* must be 0 */
};

/*
 * Score: per-slot importance of one sequence for one layer from n_q
 * recent queries (SnapKV-style).  For every query i and query head h,
 * w(i,h,j) = softmax over the visible slots j of scale * q(i,h) . K(j)
 * (FP32); out[j] = sum over i and h of w(i,h,j), or with KVK_SCORE_MAX
 * the maximum.  Without KVK_SCORE_CAUSAL every query sees slots 0..len-1;
 * with it query i sits at slot len - n_q + i and sees slots up to that one
 * (n_q <= len).  A slot no query sees scores 0.
 */
#define KVK_SCORE_MAX		(1U << 0)
#define KVK_SCORE_CAUSAL	(1U << 1)
#define KVK_SCORE_FLAGS		(KVK_SCORE_MAX | KVK_SCORE_CAUSAL)
struct kvk_score_args {
	const struct kvk_layout *layout;
	void *pool_base;
	uint32_t layer;
	uint32_t q_heads;		/* kv_heads * (1..16) */
	uint32_t n_q;			/* 1..KVK_SCORE_MAX_Q */
	uint32_t flags;			/* KVK_SCORE_* */
	const float *q;			/* [n_q][q_heads][head_dim] */
	const uint32_t *block_table;
	uint32_t nblocks;		/* entries: >= ceil(len / T) */
	uint32_t len;			/* >= 1 */
	float scale;			/* softmax scale, e.g. 1/sqrt(head_dim) */
	uint32_t pad;			/* must be 0 */
	float *out;			/* [len] */
};
#define KVK_SCORE_MAX_Q		256

/* CPU ops (cpu NULL = single thread). */
int kvk_splice(const struct kvk_splice_args *a, struct kvk_cpu *cpu);
int kvk_compact(const struct kvk_compact_args *a, struct kvk_cpu *cpu);
int kvk_score(const struct kvk_score_args *a, struct kvk_cpu *cpu);

/* Scalar conversions (exposed for tests and tools). */
uint16_t kvk_f32_to_bf16(float f);	/* RNE; NaN -> quiet NaN */
float kvk_bf16_to_f32(uint16_t h);
uint8_t kvk_f32_to_fp8(float f);	/* E4M3, RNE, saturates to +-448,
					 * NaN -> 0x7F | sign */
float kvk_fp8_to_f32(uint8_t b);	/* 0x7F/0xFF -> NaN */
uint16_t kvk_f32_to_f16(float f);	/* IEEE half, RNE */
float kvk_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* KVKERN_H */
