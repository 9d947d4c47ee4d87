// SPDX-License-Identifier: MIT
/*
 * kvkern.c - block layout, element formats, K/V write and read, block
 * copy and the scalar reference attention.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvkern.h"
#include "kvkern_internal.h"

static const char *const dtype_names[] = {
	[KVK_BF16] = "bf16",
	[KVK_FP8] = "fp8",
	[KVK_INT8] = "int8",
	[KVK_INT4] = "int4",
};

const char *kvk_dtype_name(uint32_t dtype)
{
	if (dtype < KVK_BF16 || dtype > KVK_INT4)
		return NULL;
	return dtype_names[dtype];
}

int kvk_dtype_from_name(const char *name)
{
	int i;

	if (!name)
		return -EINVAL;
	for (i = KVK_BF16; i <= KVK_INT4; i++)
		if (!strcasecmp(name, dtype_names[i]))
			return i;
	return -EINVAL;
}

/* ---- element conversions ---- */

uint16_t kvk_f32_to_bf16(float f)
{
	uint32_t u = kvk_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);	/* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float kvk_bf16_to_f32(uint16_t h)
{
	return kvk_bits_f32((uint32_t)h << 16);
}

uint8_t kvk_f32_to_fp8(float f)
{
	uint32_t u = kvk_f32_bits(f);
	uint8_t sign = (u >> 24) & 0x80;
	float a = fabsf(f);

	if (isnan(f))
		return sign | 0x7f;
	if (a >= KVK_FP8_MAX)
		return sign | 0x7e;			/* saturate: 448 */
	if (a < 0x1p-6f) {
		/* subnormal range: multiples of 2^-9; 8 = smallest normal */
		return sign | (uint8_t)rintf(a * 512.0f);
	}
	u &= 0x7fffffffu;
	u += 0x7ffffu + ((u >> 20) & 1);		/* RNE to 3 mantissa bits */
	u = (u >> 20) - (120u << 3);			/* rebias 127 -> 7 */
	if (u > 0x7e)
		u = 0x7e;
	return sign | (uint8_t)u;
}

float kvk_fp8_to_f32(uint8_t b)
{
	uint32_t e = (b >> 3) & 15, m = b & 7, sign = (uint32_t)(b & 0x80) << 24;

	if ((b & 0x7f) == 0x7f)
		return kvk_bits_f32(0x7fc00000u | sign);
	if (e == 0)				/* subnormal: m * 2^-9 */
		return kvk_bits_f32(sign | kvk_f32_bits((float)m * 0x1p-9f));
	return kvk_bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

uint16_t kvk_f32_to_f16(float f)
{
	uint32_t u = kvk_f32_bits(f);
	uint16_t sign = (u >> 16) & 0x8000;

	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7e00;
	if (u >= 0x477ff000u)				/* >= 65520: Inf */
		return sign | 0x7c00;
	if (u < 0x38800000u)				/* < 2^-14 */
		return sign | (uint16_t)rintf(kvk_bits_f32(u) * 0x1p24f);
	u += 0xfffu + ((u >> 13) & 1);
	return sign | (uint16_t)((u - 0x38000000u) >> 13);
}

float kvk_f16_to_f32(uint16_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;

	if (e == 31)
		return kvk_bits_f32(sign | 0x7f800000u | (m << 13) |
				    (m ? 0x400000u : 0));
	if (e == 0)				/* subnormal: m * 2^-24 */
		return kvk_bits_f32(sign | kvk_f32_bits((float)m * 0x1p-24f));
	return kvk_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- quantisation ---- */

float kvk_pow2_scale(float amax, float qmax)
{
	float need;
	int e;

	if (!(amax > 0.0f) || !isfinite(amax))
		return 0.0f;
	need = amax / qmax;
	if (need < 0x1p-126f)
		return 0x1p-126f;
	if (frexpf(need, &e) == 0.5f)
		e--;
	if (e < -126)
		e = -126;
	return ldexpf(1.0f, e);
}

uint8_t kvk_q_fp8(float x, float s)
{
	if (isnan(x))
		return kvk_f32_to_fp8(x);
	if (s == 0.0f)
		return isinf(x) ? kvk_f32_to_fp8(x) : 0;
	return kvk_f32_to_fp8(x / s);
}

/* Symmetric rounding to -qmax..qmax; NaN and a zero scale give 0. */
static float q_sym(float x, float s, float qmax)
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

int8_t kvk_q_int8(float x, float s)
{
	return (int8_t)q_sym(x, s, KVK_INT8_MAX);
}

int kvk_q_int4(float x, float s)
{
	return (int)q_sym(x, s, KVK_INT4_MAX);
}

/* ---- layout ---- */

static uint32_t row_bytes_of(uint32_t dtype, uint32_t head_dim)
{
	switch (dtype) {
	case KVK_BF16:
		return head_dim * 2;
	case KVK_FP8:
	case KVK_INT8:
		return head_dim;
	case KVK_INT4:
		return head_dim / 2;
	}
	return 0;
}

int kvk_layout_cost(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
		    uint32_t dtype, uint64_t *per_token, uint64_t *fixed)
{
	uint64_t planes = (uint64_t)layers * 2 * kv_heads;
	uint64_t pt, fx = 0;

	if (!kvk_dtype_name(dtype) || head_dim < 32 ||
	    head_dim > KVK_MAX_HEAD_DIM || head_dim % 32 || !layers ||
	    !kv_heads || layers > 65536 || kv_heads > 65536)
		return -EINVAL;
	pt = planes * row_bytes_of(dtype, head_dim);
	if (dtype == KVK_INT4)
		pt += planes * (head_dim / KVK_INT4_GROUP) * 2;
	if (dtype == KVK_FP8 || dtype == KVK_INT8)
		fx = planes * 4;
	if (per_token)
		*per_token = pt;
	if (fixed)
		*fixed = fx;
	return 0;
}

int kvk_layout_init(struct kvk_layout *l, uint32_t layers, uint32_t kv_heads,
		    uint32_t head_dim, uint32_t dtype, uint64_t block_bytes)
{
	uint64_t pt, fx, t, planes;
	int ret;

	if (!l)
		return -EINVAL;
	ret = kvk_layout_cost(layers, kv_heads, head_dim, dtype, &pt, &fx);
	if (ret)
		return ret;
	if (block_bytes < fx + pt)
		return -EINVAL;
	t = (block_bytes - fx) / pt;
	if (t > (1u << 24))
		return -EINVAL;
	memset(l, 0, sizeof(*l));
	l->layers = layers;
	l->kv_heads = kv_heads;
	l->head_dim = head_dim;
	l->dtype = dtype;
	l->block_bytes = block_bytes;
	l->tokens_per_block = (uint32_t)t;
	l->row_bytes = row_bytes_of(dtype, head_dim);
	l->plane_bytes = t * l->row_bytes;
	l->bytes_per_token = pt;
	planes = (uint64_t)layers * 2 * kv_heads;
	l->meta_offset = planes * l->plane_bytes;	/* multiple of 16 */
	l->meta_bytes = fx + (pt - planes * l->row_bytes) * t;
	l->used_bytes = l->meta_offset + l->meta_bytes;
	return 0;
}

uint64_t kvk_row_offset(const struct kvk_layout *l, uint32_t layer,
			uint32_t kv, uint32_t head, uint32_t token)
{
	uint64_t plane = ((uint64_t)layer * 2 + kv) * l->kv_heads + head;

	return plane * l->plane_bytes + (uint64_t)token * l->row_bytes;
}

uint64_t kvk_scale_offset(const struct kvk_layout *l, uint32_t layer,
			  uint32_t kv, uint32_t head, uint32_t token)
{
	uint64_t plane = ((uint64_t)layer * 2 + kv) * l->kv_heads + head;

	if (l->dtype == KVK_INT4)
		return l->meta_offset +
		       (plane * l->tokens_per_block + token) *
		       (l->head_dim / KVK_INT4_GROUP) * 2;
	return l->meta_offset + plane * 4;
}

/* ---- rows ---- */

static float get_scale(const struct kvk_layout *l, const uint8_t *blk,
		       uint32_t layer, uint32_t kv, uint32_t head)
{
	float s;

	memcpy(&s, blk + kvk_scale_offset(l, layer, kv, head, 0), 4);
	return s;
}

/* A stored block scale that is not a finite number > 0 counts as 0. */
static float valid_scale(float s)
{
	return (isfinite(s) && s > 0.0f) ? s : 0.0f;
}

void kvk_load_row(const struct kvk_layout *l, const uint8_t *blk,
		  uint32_t layer, uint32_t kv, uint32_t head, uint32_t token,
		  float *dst)
{
	const uint8_t *r = blk + kvk_row_offset(l, layer, kv, head, token);
	uint32_t d, D = l->head_dim;
	float s;

	switch (l->dtype) {
	case KVK_BF16:
		for (d = 0; d < D; d++) {
			uint16_t h;

			memcpy(&h, r + 2 * d, 2);
			dst[d] = kvk_bf16_to_f32(h);
		}
		break;
	case KVK_FP8:
		s = get_scale(l, blk, layer, kv, head);
		for (d = 0; d < D; d++)
			dst[d] = kvk_fp8_to_f32(r[d]) * s;
		break;
	case KVK_INT8:
		s = get_scale(l, blk, layer, kv, head);
		for (d = 0; d < D; d++)
			dst[d] = (float)(int8_t)r[d] * s;
		break;
	case KVK_INT4: {
		const uint8_t *sp = blk + kvk_scale_offset(l, layer, kv, head,
							   token);
		for (d = 0; d < D; d++) {
			uint16_t h;
			int q = (r[d / 2] >> ((d & 1) * 4)) & 15;

			if (q & 8)
				q -= 16;
			memcpy(&h, sp + (d / KVK_INT4_GROUP) * 2, 2);
			dst[d] = (float)q * kvk_f16_to_f32(h);
		}
		break;
	}
	}
}

/* Store an FP32 row with block scale s (FP8/INT8) or its own group scales
 * (INT4) or none (BF16). */
static void store_row(const struct kvk_layout *l, uint8_t *blk,
		      uint32_t layer, uint32_t kv, uint32_t head,
		      uint32_t token, const float *src, float s)
{
	uint8_t *r = blk + kvk_row_offset(l, layer, kv, head, token);
	uint32_t d, g, D = l->head_dim;

	switch (l->dtype) {
	case KVK_BF16:
		for (d = 0; d < D; d++) {
			uint16_t h = kvk_f32_to_bf16(src[d]);

			memcpy(r + 2 * d, &h, 2);
		}
		break;
	case KVK_FP8:
		for (d = 0; d < D; d++)
			r[d] = kvk_q_fp8(src[d], s);
		break;
	case KVK_INT8:
		for (d = 0; d < D; d++)
			r[d] = (uint8_t)kvk_q_int8(src[d], s);
		break;
	case KVK_INT4: {
		uint8_t *sp = blk + kvk_scale_offset(l, layer, kv, head, token);

		for (g = 0; g < D / KVK_INT4_GROUP; g++) {
			const float *x = src + g * KVK_INT4_GROUP;
			float amax = 0.0f, gs;
			uint16_t h;

			for (d = 0; d < KVK_INT4_GROUP; d++)
				if (isfinite(x[d]) && fabsf(x[d]) > amax)
					amax = fabsf(x[d]);
			h = kvk_f32_to_f16(amax / KVK_INT4_MAX);
			if ((h & 0x7fff) >= 0x7c00)
				h = 0x7bff;		/* 65504 */
			gs = kvk_f16_to_f32(h);
			memcpy(sp + g * 2, &h, 2);
			for (d = 0; d < KVK_INT4_GROUP; d += 2) {
				int lo = kvk_q_int4(x[d], gs);
				int hi = kvk_q_int4(x[d + 1], gs);

				r[(g * KVK_INT4_GROUP + d) / 2] =
					(uint8_t)((lo & 15) | ((hi & 15) << 4));
			}
		}
		break;
	}
	}
}

/* ---- argument checks ---- */

int kvk_check_write(const struct kvk_layout *l, uint32_t layer, uint32_t ntok,
		    const uint32_t *blocks, const uint32_t *slots,
		    const void *k, const void *v)
{
	uint32_t t;

	if (!l || !l->tokens_per_block || layer >= l->layers)
		return -EINVAL;
	if (!ntok)
		return 0;
	if (!blocks || !slots || !k || !v)
		return -EINVAL;
	for (t = 0; t < ntok; t++) {
		if (slots[t] >= l->tokens_per_block)
			return -EINVAL;
		if (l->pool_blocks && blocks[t] >= l->pool_blocks)
			return -EINVAL;
	}
	return 0;
}

static int check_common(const struct kvk_layout *l, const void *pool,
			uint32_t layer, uint32_t batch, uint32_t q_heads,
			uint32_t mbps, const float *q,
			const uint32_t *bt, const uint32_t *ctx, float *out,
			uint32_t n_q)
{
	uint32_t b, i, nb;

	if (!l || !l->tokens_per_block || !pool || layer >= l->layers)
		return -EINVAL;
	if (!q_heads || q_heads % l->kv_heads ||
	    q_heads / l->kv_heads > KVK_MAX_GQA)
		return -EINVAL;
	if (!batch)
		return 0;
	if (!q || !bt || !ctx || !out || !mbps)
		return -EINVAL;
	for (b = 0; b < batch; b++) {
		if (ctx[b] < n_q || (uint64_t)ctx[b] >
		    (uint64_t)mbps * l->tokens_per_block)
			return -EINVAL;
		if (!l->pool_blocks)
			continue;
		nb = (uint32_t)(((uint64_t)ctx[b] + l->tokens_per_block - 1) /
				l->tokens_per_block);
		for (i = 0; i < nb; i++)
			if (bt[(uint64_t)b * mbps + i] >= l->pool_blocks)
				return -EINVAL;
	}
	return 0;
}

int kvk_check_decode(const struct kvk_decode_args *a)
{
	if (!a)
		return -EINVAL;
	return check_common(a->layout, a->pool_base, a->layer, a->batch,
			    a->q_heads, a->max_blocks_per_seq, a->q,
			    a->block_tables, a->ctx_lens, a->out, 0);
}

int kvk_check_prefill(const struct kvk_prefill_args *a)
{
	if (!a || !a->n_new || a->pad)
		return -EINVAL;
	return check_common(a->layout, a->pool_base, a->layer, a->batch,
			    a->q_heads, a->max_blocks_per_seq, a->q,
			    a->block_tables, a->ctx_lens, a->out, a->n_new);
}

/* ---- write / read ---- */

struct tok_ref {
	uint32_t block;
	uint32_t idx;
};

static int cmp_tok(const void *pa, const void *pb)
{
	const struct tok_ref *a = pa, *b = pb;

	if (a->block != b->block)
		return a->block < b->block ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* FP8/INT8: one (block, layer, kv, head) plane gets tokens refs[0..n). */
static void write_plane_scaled(const struct kvk_layout *l, uint8_t *blk,
			       uint32_t layer, uint32_t kv, uint32_t head,
			       const struct tok_ref *refs, uint32_t n,
			       const uint32_t *slots, const float *src,
			       int merge)
{
	float qmax = l->dtype == KVK_FP8 ? KVK_FP8_MAX : KVK_INT8_MAX;
	uint32_t D = l->head_dim, H = l->kv_heads, i, d, t;
	uint64_t soff = kvk_scale_offset(l, layer, kv, head, 0);
	float amax = 0.0f, s_old, s_need, s;
	int fresh = 0;

	for (i = 0; i < n; i++) {
		const float *x = src + ((uint64_t)refs[i].idx * H + head) * D;

		if (slots[refs[i].idx] == 0 && !merge)
			fresh = 1;
		for (d = 0; d < D; d++)
			if (isfinite(x[d]) && fabsf(x[d]) > amax)
				amax = fabsf(x[d]);
	}
	s_need = kvk_pow2_scale(amax, qmax);
	memcpy(&s_old, blk + soff, 4);
	s_old = valid_scale(s_old);
	if (fresh) {
		s = s_need;
	} else if (s_need > s_old) {
		/* grow: re-quantise every slot of the plane to the new scale */
		for (t = 0; t < l->tokens_per_block; t++) {
			uint8_t *row = blk + kvk_row_offset(l, layer, kv, head,
							    t);

			if (s_old == 0.0f) {
				memset(row, 0, D);
				continue;
			}
			for (d = 0; d < D; d++) {
				if (l->dtype == KVK_INT8) {
					row[d] = (uint8_t)kvk_q_int8(
						(float)(int8_t)row[d] * s_old,
						s_need);
				} else if ((row[d] & 0x7f) != 0x7f) {
					/* NaN codes stay as they are */
					row[d] = kvk_q_fp8(kvk_fp8_to_f32(row[d]) *
							   s_old, s_need);
				}
			}
		}
		s = s_need;
	} else {
		s = s_old;
	}
	memcpy(blk + soff, &s, 4);
	for (i = 0; i < n; i++) {
		const float *x = src + ((uint64_t)refs[i].idx * H + head) * D;

		store_row(l, blk, layer, kv, head, slots[refs[i].idx], x, s);
	}
}

int kvk_write_kv_flags(const struct kvk_layout *l, void *pool_base,
		       uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, const float *k, const float *v,
		       uint32_t flags)
{
	uint32_t H, D, t, h, kv, i, j;
	struct tok_ref *refs;
	uint8_t *pool = pool_base;
	int ret;

	if (flags & ~KVK_WRITE_FLAGS)
		return -EINVAL;
	ret = kvk_check_write(l, layer, ntok, blocks, slots, k, v);
	if (ret || !ntok)
		return ret;
	if (!pool)
		return -EINVAL;
	H = l->kv_heads;
	D = l->head_dim;
	if (l->dtype == KVK_BF16 || l->dtype == KVK_INT4) {
		for (t = 0; t < ntok; t++) {
			uint8_t *blk = pool + (uint64_t)blocks[t] *
				       l->block_bytes;

			for (kv = 0; kv < 2; kv++)
				for (h = 0; h < H; h++)
					store_row(l, blk, layer, kv, h,
						  slots[t],
						  (kv ? v : k) +
						  ((uint64_t)t * H + h) * D,
						  0.0f);
		}
		return 0;
	}
	refs = malloc(sizeof(*refs) * ntok);
	if (!refs)
		return -ENOMEM;
	for (t = 0; t < ntok; t++) {
		refs[t].block = blocks[t];
		refs[t].idx = t;
	}
	qsort(refs, ntok, sizeof(*refs), cmp_tok);
	for (i = 0; i < ntok; i = j) {
		uint8_t *blk = pool + (uint64_t)refs[i].block * l->block_bytes;

		for (j = i + 1; j < ntok && refs[j].block == refs[i].block; j++)
			;
		for (kv = 0; kv < 2; kv++)
			for (h = 0; h < H; h++)
				write_plane_scaled(l, blk, layer, kv, h,
						   refs + i, j - i, slots,
						   kv ? v : k,
						   !!(flags & KVK_WRITE_MERGE));
	}
	free(refs);
	return 0;
}

int kvk_write_kv(const struct kvk_layout *l, void *pool_base, uint32_t layer,
		 uint32_t ntok, const uint32_t *blocks, const uint32_t *slots,
		 const float *k, const float *v)
{
	return kvk_write_kv_flags(l, pool_base, layer, ntok, blocks, slots, k,
				  v, 0);
}

int kvk_write_kv_bf16(const struct kvk_layout *l, void *pool_base,
		      uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		      const uint32_t *slots, const uint16_t *k,
		      const uint16_t *v)
{
	size_t n, i;
	float *fk, *fv;
	int ret;

	ret = kvk_check_write(l, layer, ntok, blocks, slots, k, v);
	if (ret || !ntok)
		return ret;
	n = (size_t)ntok * l->kv_heads * l->head_dim;
	fk = malloc(n * sizeof(float) * 2);
	if (!fk)
		return -ENOMEM;
	fv = fk + n;
	for (i = 0; i < n; i++) {
		fk[i] = kvk_bf16_to_f32(k[i]);
		fv[i] = kvk_bf16_to_f32(v[i]);
	}
	ret = kvk_write_kv(l, pool_base, layer, ntok, blocks, slots, fk, fv);
	free(fk);
	return ret;
}

int kvk_read_kv(const struct kvk_layout *l, const void *pool_base,
		uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		const uint32_t *slots, float *k, float *v)
{
	const uint8_t *pool = pool_base;
	uint32_t t, h, H, D;
	int ret;

	ret = kvk_check_write(l, layer, ntok, blocks, slots,
			      k ? (void *)k : (void *)v,
			      v ? (void *)v : (void *)k);
	if (ret || !ntok)
		return ret;
	if (!pool)
		return -EINVAL;
	H = l->kv_heads;
	D = l->head_dim;
	for (t = 0; t < ntok; t++) {
		const uint8_t *blk = pool + (uint64_t)blocks[t] * l->block_bytes;

		for (h = 0; h < H; h++) {
			if (k)
				kvk_load_row(l, blk, layer, 0, h, slots[t],
					     k + ((uint64_t)t * H + h) * D);
			if (v)
				kvk_load_row(l, blk, layer, 1, h, slots[t],
					     v + ((uint64_t)t * H + h) * D);
		}
	}
	return 0;
}

int kvk_copy_blocks(void *pool_base, uint64_t block_bytes,
		    uint64_t pool_blocks, const uint32_t *src,
		    const uint32_t *dst, uint32_t n)
{
	uint8_t *pool = pool_base;
	uint32_t i;

	if (!n)
		return 0;
	if (!pool || !block_bytes || !src || !dst)
		return -EINVAL;
	if (pool_blocks)
		for (i = 0; i < n; i++)
			if (src[i] >= pool_blocks || dst[i] >= pool_blocks)
				return -EINVAL;
	for (i = 0; i < n; i++)
		if (src[i] != dst[i])
			memcpy(pool + dst[i] * block_bytes,
			       pool + src[i] * block_bytes, block_bytes);
	return 0;
}

/* ---- scalar reference attention ---- */

/* Attention of one query row over positions 0..npos-1 of sequence b. */
static void ref_row(const struct kvk_layout *l, const uint8_t *pool,
		    uint32_t layer, const uint32_t *table, uint32_t head,
		    const float *q, uint32_t npos, float scale, float *scores,
		    float *out)
{
	uint32_t T = l->tokens_per_block, D = l->head_dim, p, d;
	float row[KVK_MAX_HEAD_DIM], m = -INFINITY, sum = 0.0f, comp = 0.0f;

	memset(out, 0, sizeof(float) * D);
	if (!npos)
		return;
	for (p = 0; p < npos; p++) {
		const uint8_t *blk = pool + (uint64_t)table[p / T] *
				     l->block_bytes;
		float s = 0.0f;

		kvk_load_row(l, blk, layer, 0, head, p % T, row);
		for (d = 0; d < D; d++)
			s += q[d] * row[d];
		scores[p] = s * scale;
		m = fmaxf(m, scores[p]);
	}
	for (p = 0; p < npos; p++) {
		const uint8_t *blk = pool + (uint64_t)table[p / T] *
				     l->block_bytes;
		float w = expf(scores[p] - m), y, t;

		/* Kahan: 128K tiny terms next to one dominant term */
		y = w - comp;
		t = sum + y;
		comp = (t - sum) - y;
		sum = t;
		kvk_load_row(l, blk, layer, 1, head, p % T, row);
		for (d = 0; d < D; d++)
			out[d] += w * row[d];
	}
	for (d = 0; d < D; d++)
		out[d] /= sum;
}

static int ref_attn(const struct kvk_layout *l, const uint8_t *pool,
		    uint32_t layer, uint32_t batch, uint32_t q_heads,
		    uint32_t mbps, uint32_t n_q, const float *q,
		    const uint32_t *bt, const uint32_t *ctx, float scale,
		    float *out)
{
	uint32_t b, i, h, D = l->head_dim, group = q_heads / l->kv_heads;
	uint32_t maxc = 0;
	float *scores;

	for (b = 0; b < batch; b++)
		if (ctx[b] > maxc)
			maxc = ctx[b];
	scores = malloc(sizeof(float) * (maxc ? maxc : 1));
	if (!scores)
		return -ENOMEM;
	for (b = 0; b < batch; b++)
		for (i = 0; i < (n_q ? n_q : 1); i++)
			for (h = 0; h < q_heads; h++) {
				uint64_t row = ((uint64_t)b * (n_q ? n_q : 1) +
						i) * q_heads + h;
				uint32_t npos = n_q ? ctx[b] - n_q + i + 1 :
						      ctx[b];

				ref_row(l, pool, layer,
					bt + (uint64_t)b * mbps, h / group,
					q + row * D, npos, scale, scores,
					out + row * D);
			}
	free(scores);
	return 0;
}

int kvk_decode_ref(const struct kvk_decode_args *a)
{
	int ret = kvk_check_decode(a);

	if (ret || !a->batch)
		return ret;
	return ref_attn(a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, 0, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out);
}

int kvk_prefill_ref(const struct kvk_prefill_args *a)
{
	int ret = kvk_check_prefill(a);

	if (ret || !a->batch)
		return ret;
	return ref_attn(a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, a->n_new, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out);
}
