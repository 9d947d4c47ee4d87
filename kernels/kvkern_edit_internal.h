/* SPDX-License-Identifier: MIT */
/*
 * kvkern_edit_internal.h - the plan of an in-place edit (splice, compact)
 * and the element conversions of the edit ops, shared by the CPU ops
 * (kvkern_edit.c), the CUDA launch glue (kvkern_cuda_edit.c) and the tests;
 * not a public API.  The CUDA kernels (cuda/kvkern_edit.cu) repeat the
 * conversions bit for bit; the tests check both against the write path.
 */
#ifndef KVKERN_EDIT_INTERNAL_H
#define KVKERN_EDIT_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kvkern.h"
#include "kvkern_internal.h"

#define KVK_EDIT_SPLICE		1
#define KVK_EDIT_COMPACT	2

/* Where a destination slot's row comes from. */
#define KVK_EDIT_ZERO		0	/* made for a new token, or past the end */
#define KVK_EDIT_COPY		1	/* a row moved (or kept) as it is */
#define KVK_EDIT_ROT		2	/* a tail key: rotated by delta */

/*
 * An edit seen from its destination: the sequence after the edit has
 * new_len slots; the destination blocks are table entries first ..
 * first + ndest - 1, rewritten one after the other in the order dir (+1
 * up, -1 down) so that every source row is read before its slot is
 * overwritten (a left move reads from the right, a right move from the
 * left), slot by slot in the same direction inside a block.
 */
struct kvk_edit_plan {
	uint32_t mode;		/* KVK_EDIT_SPLICE / _COMPACT */
	uint32_t tpb;
	uint32_t len, new_len;
	uint32_t first, ndest;
	int32_t dir;
	uint32_t at, nins;	/* splice */
	uint32_t rotate;	/* splice: tail keys turn by delta */
	int64_t shift;		/* splice: destination - source slot (tail) */
	int64_t delta;
	const uint32_t *keep;	/* compact */
	uint32_t nkeep;
	uint32_t style, rd;	/* RoPE of the layout */
	float cs[KVK_ROPE_MAX_FREQ], sn[KVK_ROPE_MAX_FREQ];
};

int kvk_plan_splice(const struct kvk_splice_args *a,
		    struct kvk_edit_plan *p);
int kvk_plan_compact(const struct kvk_compact_args *a,
		     struct kvk_edit_plan *p);
int kvk_check_score(const struct kvk_score_args *a);

/* Table index of the k-th destination block (k in 0..ndest-1). */
static inline uint32_t kvk_edit_dest(const struct kvk_edit_plan *p,
				     uint32_t k)
{
	return p->dir > 0 ? p->first + k : p->first + p->ndest - 1 - k;
}

/* Source slot of destination slot g (both sequence slot numbers). */
static inline int kvk_edit_src(const struct kvk_edit_plan *p, uint32_t g,
			       uint32_t *src)
{
	if (p->mode == KVK_EDIT_COMPACT) {
		if (g >= p->nkeep)
			return KVK_EDIT_ZERO;
		*src = p->keep[g];
		return KVK_EDIT_COPY;
	}
	if (g < p->at) {
		*src = g;
		return KVK_EDIT_COPY;
	}
	if (g < p->at + p->nins || g >= p->new_len)
		return KVK_EDIT_ZERO;
	*src = (uint32_t)((int64_t)g - p->shift);
	return p->rotate ? KVK_EDIT_ROT : KVK_EDIT_COPY;
}

/* ---- element conversions (same results as kvkern.c's) ---- */

static inline float kvk_e_bf16_f32(uint16_t h)
{
	return kvk_bits_f32((uint32_t)h << 16);
}

static inline uint16_t kvk_e_f32_bf16(float f)
{
	uint32_t u = kvk_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float kvk_e_fp8_f32(uint8_t b)
{
	uint32_t e = (b >> 3) & 15, m = b & 7;
	uint32_t sign = (uint32_t)(b & 0x80) << 24;

	if ((b & 0x7f) == 0x7f)
		return kvk_bits_f32(0x7fc00000u | sign);
	if (e == 0)
		return kvk_bits_f32(sign | kvk_f32_bits((float)m * 0x1p-9f));
	return kvk_bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

static inline uint8_t kvk_e_f32_fp8(float f)
{
	uint32_t u = kvk_f32_bits(f);
	uint8_t sign = (u >> 24) & 0x80;
	float a = fabsf(f);

	if (isnan(f))
		return sign | 0x7f;
	if (a >= KVK_FP8_MAX)
		return sign | 0x7e;
	if (a < 0x1p-6f)
		return sign | (uint8_t)rintf(a * 512.0f);
	u &= 0x7fffffffu;
	u += 0x7ffffu + ((u >> 20) & 1);
	u = (u >> 20) - (120u << 3);
	if (u > 0x7e)
		u = 0x7e;
	return sign | (uint8_t)u;
}

static inline uint8_t kvk_e_q_fp8(float x, float s)
{
	if (isnan(x))
		return kvk_e_f32_fp8(x);
	if (s == 0.0f)
		return isinf(x) ? kvk_e_f32_fp8(x) : 0;
	return kvk_e_f32_fp8(x / s);
}

static inline float kvk_e_q_sym(float x, float s, float qmax)
{
	float q;

	if (isnan(x))
		return 0;
	if (isinf(x))
		return x > 0 ? qmax : -qmax;
	if (s == 0.0f)
		return 0;
	q = rintf(x / s);
	if (q > qmax)
		return qmax;
	return q < -qmax ? -qmax : q;
}

static inline float kvk_e_valid_scale(float s)
{
	return (isfinite(s) && s > 0.0f) ? s : 0.0f;
}

#endif /* KVKERN_EDIT_INTERNAL_H */
