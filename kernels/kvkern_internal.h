/* SPDX-License-Identifier: MIT */
/*
 * kvkern_internal.h - shared between the kvkern sources, the tests and the
 * benchmark; not a public API.
 */
#ifndef KVKERN_INTERNAL_H
#define KVKERN_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kvkern.h"

#define KVK_FP8_MAX	448.0f
#define KVK_INT8_MAX	127.0f
#define KVK_INT4_MAX	7.0f

static inline float kvk_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t kvk_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* Block scale for FP8/INT8: the smallest power of two s with
 * amax / s <= qmax, at least 2^-126; 0 when amax is 0. */
float kvk_pow2_scale(float amax, float qmax);

/* Quantise / dequantise one value with a given scale (scalar, defined
 * NaN/Inf behaviour, see Documentation/kernels.rst). */
uint8_t kvk_q_fp8(float x, float s);
int8_t kvk_q_int8(float x, float s);
int kvk_q_int4(float x, float s);	/* -7..7 */

/* Dequantise token row (layer, kv, head, token) of a block into dst. */
void kvk_load_row(const struct kvk_layout *l, const uint8_t *blk,
		  uint32_t layer, uint32_t kv, uint32_t head, uint32_t token,
		  float *dst);

/* Argument checks shared by the CPU and CUDA paths. */
int kvk_check_decode(const struct kvk_decode_args *a);
int kvk_check_prefill(const struct kvk_prefill_args *a);
int kvk_check_write(const struct kvk_layout *l, uint32_t layer, uint32_t ntok,
		    const uint32_t *blocks, const uint32_t *slots,
		    const void *k, const void *v);

/* Thread pool: run fn(ctx, i) for i in 0..n-1 on the pool's threads (the
 * caller included); returns when all are done.  cpu NULL = inline. */
typedef void (*kvk_item_fn)(void *ctx, uint32_t item, unsigned int thread);
void kvk_parallel_for(struct kvk_cpu *cpu, uint32_t n, kvk_item_fn fn,
		      void *ctx);

/* Plain memory-read bandwidth: each thread sums its share of buf
 * (SIMD loads), repeated `reps` times.  Returns GB/s (1e9 B/s). */
double kvk_read_bw(struct kvk_cpu *cpu, const void *buf, size_t bytes,
		   int reps);

/* SIMD attention core, one per instruction set (kvkern_simd.h). */
struct kvk_attn_job;
struct kvk_simd_ops {
	const char *name;
	void (*item)(const struct kvk_attn_job *job, uint32_t item,
		     unsigned int thread);
	double (*sum_bytes)(const void *buf, size_t bytes);
	size_t scratch_bytes;	/* per thread, if more than the default */
};

extern const struct kvk_simd_ops kvk_simd_amx;
extern const struct kvk_simd_ops kvk_simd_avx512bf16;
extern const struct kvk_simd_ops kvk_simd_avx512;
extern const struct kvk_simd_ops kvk_simd_avx2;
extern const struct kvk_simd_ops kvk_simd_generic;

/*
 * One attention call cut into items.  A "row" is one (query token, query
 * head).  Item i covers sequence seq[i], kv heads [head, head + nh),
 * query tokens [q0, q0 + nq) and cache positions [t0, t1); it leaves per
 * row partial (m, l, o[head_dim]) in parts, from part for its first head
 * (several heads per item: each block is read whole, not one plane of it
 * at a time).
 */
/*
 * Items with several kv heads: all their rows x head_dim must fit the
 * per-thread scratch (KVK_ITEM_ELEMS) and at most KVK_ITEM_ROWS rows;
 * rows per head count as the SIMD cores round them (kvk_item_rows()).
 */
#define KVK_ITEM_ELEMS (16 * KVK_MAX_HEAD_DIM)
#define KVK_ITEM_ROWS 64

static inline uint32_t kvk_item_rows(uint32_t rows)
{
	return rows == 1 ? 1 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16;
}

/*
 * Query tokens per item: items of a multi-token call take 16 / group
 * query tokens of a sequence at a time (group: query heads per kv head).
 */
static inline uint32_t kvk_item_tokens(uint32_t group)
{
	return 16 / group;
}

/*
 * The rows per kv head of a call's full items (a multi-token call's last
 * item of a sequence may have fewer): n_q query tokens per sequence (0:
 * decode, one), group query heads per kv head.
 */
static inline uint32_t kvk_job_rows(uint32_t group, uint32_t n_q)
{
	uint32_t nq = n_q ? n_q : 1, qb = kvk_item_tokens(group);

	return kvk_item_rows((nq < qb ? nq : qb) * group);
}

/*
 * Whether a call on the amx path runs on the tiles (1) or kvkern_cpu.c
 * gives it to the avx512bf16 loops (0), by dtype, head_dim and
 * kvk_job_rows().  Measured with kvpool-bench-kernels -g 1, 4, 8 and 16
 * (Documentation/kernels.rst, "Attention"): with few rows a tile's columns
 * go mostly unused and the avx512bf16 loops, which keep INT8 and INT4 K
 * in integer form and convert FP8 by bit operations, decode faster; the
 * tiles win from 16 rows (8 rows for FP8 and INT8).  FP8 and INT8 at a
 * head_dim that is not a multiple of 64 never take the tiles.
 */
static inline int kvk_amx_takes(uint32_t dtype, uint32_t head_dim,
				uint32_t rows)
{
	switch (dtype) {
	case KVK_BF16:
		return rows > 1 || head_dim % 64;
	case KVK_FP8:
	case KVK_INT8:
		return rows > 4 && head_dim % 64 == 0;
	case KVK_INT4:
		return rows > 8 || (head_dim != 64 && head_dim != 128 &&
				    head_dim != 256);
	}
	return 1;
}

struct kvk_attn_item {
	uint32_t seq;
	uint32_t head;
	uint32_t q0, nq;
	uint32_t t0, t1;
	uint32_t part;		/* index of first row's partial in parts */
	uint32_t nh;		/* kv heads head .. head + nh - 1 */
	uint32_t hstride;	/* partials of head + i: part + i * hstride */
	uint32_t pad;
};

struct kvk_attn_job {
	const struct kvk_layout *l;
	const uint8_t *pool;
	uint32_t layer;
	uint32_t q_heads;
	uint32_t group;			/* q_heads / kv_heads */
	uint32_t n_q;			/* query tokens per sequence */
	uint32_t max_blocks_per_seq;
	float scale;
	const float *q;			/* [batch][n_q][q_heads][D] */
	const uint32_t *block_tables;
	const uint32_t *ctx_lens;
	const struct kvk_attn_item *items;
	float *parts;			/* per row: m, l, o[D] */
	uint32_t part_stride;		/* D + 2 */
	float *scratch;			/* per thread scratch */
	size_t scratch_floats;		/* per thread */
};

#endif /* KVKERN_INTERNAL_H */
