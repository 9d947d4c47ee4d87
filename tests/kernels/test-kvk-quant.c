// SPDX-License-Identifier: MIT
/*
 * test-kvk-quant.c - element formats and quantisation round trips:
 * BF16, FP8 E4M3 (exhaustive over the 256 codes), FP16 group scales,
 * INT8/INT4; saturation, zeros, subnormals, NaN/Inf; the FP8/INT8 block
 * scale rule (fresh at slot 0, grow-only with re-quantisation otherwise).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"
#include "kvkern_internal.h"

static void test_bf16(void)
{
	uint32_t i;

	KT_CHECK(kvk_f32_to_bf16(1.0f) == 0x3f80, "1.0");
	KT_CHECK(kvk_f32_to_bf16(-2.0f) == 0xc000, "-2.0");
	KT_CHECK(kvk_f32_to_bf16(0.0f) == 0x0000, "+0");
	KT_CHECK(kvk_f32_to_bf16(-0.0f) == 0x8000, "-0");
	KT_CHECK(kvk_f32_to_bf16(INFINITY) == 0x7f80, "+inf");
	KT_CHECK(kvk_f32_to_bf16(-INFINITY) == 0xff80, "-inf");
	KT_CHECK(isnan(kvk_bf16_to_f32(kvk_f32_to_bf16(NAN))), "nan");
	KT_CHECK(isnan(kvk_bf16_to_f32(kvk_f32_to_bf16(
		 kvk_bits_f32(0x7f800001u)))), "signalling nan stays nan");
	KT_CHECK(kvk_f32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX rounds to inf");
	/* ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 */
	KT_CHECK(kvk_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "tie even");
	KT_CHECK(kvk_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "tie even up");
	/* subnormals keep FP32's range: error <= half a bf16 subnormal step */
	KT_CHECK(fabsf(kvk_bf16_to_f32(kvk_f32_to_bf16(1e-40f)) - 1e-40f) <=
		 0x1p-134f, "subnormal");
	for (i = 0; i < 100000; i++) {
		float x = (float)((kt_unif() - 0.5) * pow(2, kt_below(200) - 100.0));
		float y = kvk_bf16_to_f32(kvk_f32_to_bf16(x));

		if (!(fabsf(y - x) <= fabsf(x) * 0x1p-8f)) {
			KT_CHECK(0, "bf16 round trip %g -> %g", x, y);
			break;
		}
	}
}

static void test_fp8(void)
{
	uint32_t c;
	float prev = -1;

	/* every code decodes and encodes back to itself */
	for (c = 0; c < 256; c++) {
		float x = kvk_fp8_to_f32((uint8_t)c);

		if ((c & 0x7f) == 0x7f) {
			KT_CHECK(isnan(x), "code %#x is NaN", c);
			KT_CHECK(kvk_f32_to_fp8(x) == c, "NaN code %#x", c);
			continue;
		}
		KT_CHECK(kvk_f32_to_fp8(x) == c, "code %#x -> %g -> %#x", c, x,
			 kvk_f32_to_fp8(x));
		if (c < 0x7f) {		/* positive codes increase */
			KT_CHECK(x > prev || (c == 0 && x == 0), "monotone %#x",
				 c);
			prev = x;
		}
	}
	KT_CHECK(kvk_fp8_to_f32(0x7e) == 448.0f, "max 448");
	KT_CHECK(kvk_fp8_to_f32(0x08) == 0x1p-6f, "min normal");
	KT_CHECK(kvk_fp8_to_f32(0x01) == 0x1p-9f, "min subnormal");
	KT_CHECK(kvk_fp8_to_f32(0x38) == 1.0f, "1.0");
	/* saturation */
	KT_CHECK(kvk_f32_to_fp8(449.0f) == 0x7e, "449");
	KT_CHECK(kvk_f32_to_fp8(1e30f) == 0x7e, "1e30");
	KT_CHECK(kvk_f32_to_fp8(INFINITY) == 0x7e, "+inf saturates");
	KT_CHECK(kvk_f32_to_fp8(-INFINITY) == 0xfe, "-inf saturates");
	KT_CHECK((kvk_f32_to_fp8(NAN) & 0x7f) == 0x7f, "nan");
	/* rounding: ties to even */
	KT_CHECK(kvk_f32_to_fp8(1.0625f) == 0x38, "tie down to even");
	KT_CHECK(kvk_f32_to_fp8(1.1875f) == 0x3a, "tie up to even");
	KT_CHECK(kvk_f32_to_fp8(0x1p-10f) == 0x00, "half min subnormal: 0");
	KT_CHECK(kvk_f32_to_fp8(0x1.8p-10f) == 0x01, "0.75 min subnormal");
	KT_CHECK(kvk_f32_to_fp8(0x1p-12f) == 0x00, "underflow");
	KT_CHECK(kvk_f32_to_fp8(1e-40f) == 0x00, "fp32 subnormal -> 0");
	KT_CHECK(kvk_f32_to_fp8(-0.0f) == 0x80, "-0");
	for (c = 0; c < 100000; c++) {
		float x = (float)((kt_unif() - 0.5) * 900.0);
		float y = kvk_fp8_to_f32(kvk_f32_to_fp8(x));

		if (!(fabsf(y - x) <= fmaxf(fabsf(x) * 0x1p-4f, 0x1p-10f))) {
			KT_CHECK(0, "fp8 round trip %g -> %g", x, y);
			break;
		}
	}
}

static void test_f16(void)
{
	KT_CHECK(kvk_f32_to_f16(1.0f) == 0x3c00, "1.0");
	KT_CHECK(kvk_f32_to_f16(65504.0f) == 0x7bff, "max");
	KT_CHECK(kvk_f32_to_f16(65519.0f) == 0x7bff, "65519");
	KT_CHECK(kvk_f32_to_f16(65520.0f) == 0x7c00, "65520 -> inf");
	KT_CHECK(kvk_f32_to_f16(0x1p-24f) == 0x0001, "min subnormal");
	KT_CHECK(kvk_f32_to_f16(0x1p-25f) == 0x0000, "tie to even 0");
	KT_CHECK(kvk_f32_to_f16(0x1p-14f) == 0x0400, "min normal");
	KT_CHECK(kvk_f16_to_f32(0x0001) == 0x1p-24f, "decode subnormal");
	KT_CHECK(kvk_f16_to_f32(0xfc00) == -INFINITY, "decode -inf");
	KT_CHECK(isnan(kvk_f16_to_f32(kvk_f32_to_f16(NAN))), "nan");
	KT_CHECK(kvk_f16_to_f32(kvk_f32_to_f16(0.1f)) ==
		 (float)0.0999755859375, "0.1");
}

static void test_scalar_quant(void)
{
	KT_CHECK(kvk_pow2_scale(448.0f, KVK_FP8_MAX) == 1.0f, "exact pow2");
	KT_CHECK(kvk_pow2_scale(449.0f, KVK_FP8_MAX) == 2.0f, "next pow2");
	KT_CHECK(kvk_pow2_scale(1.0f, KVK_INT8_MAX) == 0x1p-6f, "int8 1.0");
	KT_CHECK(kvk_pow2_scale(0.0f, KVK_INT8_MAX) == 0.0f, "zero");
	KT_CHECK(kvk_pow2_scale(INFINITY, KVK_INT8_MAX) == 0.0f, "inf");
	KT_CHECK(kvk_pow2_scale(NAN, KVK_INT8_MAX) == 0.0f, "nan");
	KT_CHECK(kvk_pow2_scale(1e-44f, KVK_FP8_MAX) == 0x1p-126f, "floor");
	KT_CHECK(kvk_q_int8(NAN, 1.0f) == 0, "int8 nan -> 0");
	KT_CHECK(kvk_q_int8(INFINITY, 1.0f) == 127, "int8 +inf");
	KT_CHECK(kvk_q_int8(-INFINITY, 1.0f) == -127, "int8 -inf");
	KT_CHECK(kvk_q_int8(1000.0f, 1.0f) == 127, "int8 saturate");
	KT_CHECK(kvk_q_int8(-1000.0f, 1.0f) == -127, "int8 saturate -");
	KT_CHECK(kvk_q_int8(2.5f, 1.0f) == 2, "int8 tie even");
	KT_CHECK(kvk_q_int8(5.0f, 0.0f) == 0, "int8 zero scale");
	KT_CHECK(kvk_q_int4(NAN, 1.0f) == 0, "int4 nan");
	KT_CHECK(kvk_q_int4(INFINITY, 1.0f) == 7, "int4 inf");
	KT_CHECK(kvk_q_int4(-9.0f, 1.0f) == -7, "int4 saturate");
	KT_CHECK(kvk_q_fp8(NAN, 0.0f) == 0x7f, "fp8 nan, zero scale");
	KT_CHECK(kvk_q_fp8(3.0f, 0.0f) == 0, "fp8 zero scale");
}

/* Write one token of special values per dtype and read it back. */
static void test_specials(uint32_t dtype)
{
	struct kvk_layout l;
	uint32_t D = 64, blk = 1, slot = 0, d;
	float k[64], v[64], rk[64], rv[64], s;
	uint8_t *pool;

	KT_CHECK(kvk_layout_init(&l, 1, 1, D, dtype, 8192) == 0, "layout");
	pool = calloc(2, l.block_bytes);
	for (d = 0; d < D; d++)
		k[d] = v[d] = (float)d / 64.0f;		/* < 1 */
	k[1] = NAN;
	k[2] = INFINITY;
	k[3] = -INFINITY;
	k[4] = 2.0f;			/* finite maximum of the row */
	k[5] = 0.0f;
	k[6] = 1e-40f;
	k[7] = -0.0f;
	v[33] = -2.0f;
	KT_CHECK(kvk_write_kv(&l, pool, 0, 1, &blk, &slot, k, v) == 0, "w");
	KT_CHECK(kvk_read_kv(&l, pool, 0, 1, &blk, &slot, rk, rv) == 0, "r");
	switch (dtype) {
	case KVK_BF16:
		KT_CHECK(isnan(rk[1]) && rk[2] == INFINITY &&
			 rk[3] == -INFINITY && rk[4] == 2.0f, "bf16 specials");
		KT_CHECK(fabsf(rk[6] - 1e-40f) <= 0x1p-134f, "bf16 subnormal kept");
		break;
	case KVK_FP8:
		s = 0x1p-7f;		/* pow2 >= 2/448 */
		KT_CHECK(isnan(rk[1]), "fp8 nan %g", rk[1]);
		KT_CHECK(rk[2] == 448 * s && rk[3] == -448 * s,
			 "fp8 inf saturates to 448*s: %g %g", rk[2], rk[3]);
		KT_CHECK(rk[4] == 2.0f && rk[6] == 0.0f, "fp8 %g %g", rk[4],
			 rk[6]);
		break;
	case KVK_INT8:
		s = 0x1p-5f;		/* pow2 >= 2/127 */
		KT_CHECK(rk[1] == 0.0f, "int8 nan -> 0: %g", rk[1]);
		KT_CHECK(rk[2] == 127 * s && rk[3] == -127 * s, "int8 inf");
		KT_CHECK(rk[4] == 2.0f && rk[6] == 0.0f, "int8 %g", rk[4]);
		break;
	case KVK_INT4:
		s = kvk_f16_to_f32(kvk_f32_to_f16(2.0f / 7));
		KT_CHECK(rk[1] == 0.0f, "int4 nan -> 0");
		KT_CHECK(rk[2] == 7 * s && rk[3] == -7 * s, "int4 inf %g", rk[2]);
		KT_CHECK(fabsf(rk[4] - 2.0f) <= s / 2, "int4 %g", rk[4]);
		/* second group of V: its own scale, exact -2 */
		KT_CHECK(fabsf(rv[33] + 2.0f) <= 2.0f / 7 / 2, "int4 group");
		break;
	}
	KT_CHECK(rk[5] == 0.0f, "zero stays zero (%s)", kvk_dtype_name(dtype));
	for (d = 8; d < D; d++)
		KT_CHECK(fabsf(rk[d] - k[d]) <= (dtype == KVK_INT4 ? 0.15f :
			 dtype == KVK_BF16 ? 0.004f : 0.035f),
			 "%s d=%u %g vs %g", kvk_dtype_name(dtype), d, rk[d],
			 k[d]);
	free(pool);
}

/* Random round trips: per-element error bound per dtype. */
static void test_round_trip(uint32_t dtype)
{
	struct kvk_layout l;
	uint32_t H = 2, D = 128, T, n = 200, t, i, *blk, *slot, bad = 0;
	float *k, *v, *rk, *rv;
	uint8_t *pool;

	KT_CHECK(kvk_layout_init(&l, 3, H, D, dtype,
				 kt_block_bytes(3, H, D, dtype, 16)) == 0, "l");
	T = l.tokens_per_block;
	pool = malloc((n / T + 2) * l.block_bytes);
	k = malloc(sizeof(float) * n * H * D * 4);
	v = k + n * H * D;
	rk = v + n * H * D;
	rv = rk + n * H * D;
	blk = malloc(sizeof(uint32_t) * n * 2);
	slot = blk + n;
	for (i = 0; i < n * H * D; i++) {
		k[i] = kt_gauss() * 3;
		v[i] = kt_gauss() * 0.01f;
	}
	for (t = 0; t < n; t++) {
		blk[t] = t / T;
		slot[t] = t % T;
	}
	KT_CHECK(kvk_write_kv(&l, pool, 2, n, blk, slot, k, v) == 0, "write");
	KT_CHECK(kvk_read_kv(&l, pool, 2, n, blk, slot, rk, rv) == 0, "read");
	for (t = 0; t < n; t++) {
		uint32_t h, d;

		for (h = 0; h < H; h++) {
			/* block amax of this (block, head) for K and V */
			float ak = 0, av = 0, bk, bv;
			uint32_t u;

			for (u = t / T * T; u < (t / T + 1) * T && u < n; u++)
				for (d = 0; d < D; d++) {
					ak = fmaxf(ak, fabsf(k[(u * H + h) * D + d]));
					av = fmaxf(av, fabsf(v[(u * H + h) * D + d]));
				}
			for (d = 0; d < D; d++) {
				size_t x = ((size_t)t * H + h) * D + d;

				switch (dtype) {
				case KVK_BF16:
					bk = fabsf(k[x]) * 0x1p-8f;
					bv = fabsf(v[x]) * 0x1p-8f;
					break;
				case KVK_FP8:
					bk = fmaxf(fabsf(k[x]) * 0x1p-4f,
						   kvk_pow2_scale(ak, 448) * 0x1p-10f);
					bv = fmaxf(fabsf(v[x]) * 0x1p-4f,
						   kvk_pow2_scale(av, 448) * 0x1p-10f);
					break;
				case KVK_INT8:
					bk = kvk_pow2_scale(ak, 127) / 2;
					bv = kvk_pow2_scale(av, 127) / 2;
					break;
				default:	/* group amax <= block amax */
					bk = ak / 7 * 0.501f;
					bv = av / 7 * 0.501f;
					break;
				}
				if (fabsf(rk[x] - k[x]) > bk ||
				    fabsf(rv[x] - v[x]) > bv)
					bad++;
			}
		}
	}
	KT_CHECK(bad == 0, "%s: %u values outside the bound",
		 kvk_dtype_name(dtype), bad);
	free(pool);
	free(k);
	free(blk);
}

/* FP8/INT8: scale set at slot 0, grows with re-quantisation, resets. */
static void test_scale_rule(uint32_t dtype)
{
	float qmax = dtype == KVK_FP8 ? 448.0f : 127.0f;
	struct kvk_layout l;
	uint32_t D = 32, blk = 0, s0 = 0, s1 = 1, s2 = 2, d;
	float a[32], b[32], c[32], r[32], sc;
	uint8_t *pool;
	uint64_t off;

	KT_CHECK(kvk_layout_init(&l, 1, 1, D, dtype, 4096) == 0, "layout");
	pool = malloc(l.block_bytes);
	memset(pool, 0xa5, l.block_bytes);	/* garbage scale */
	off = kvk_scale_offset(&l, 0, 0, 0, 0);
	for (d = 0; d < D; d++) {
		a[d] = (float)d / 32;		/* amax 0.97 */
		b[d] = (float)d * 3;		/* amax 93 */
		c[d] = 0.5f;
	}
	kvk_write_kv(&l, pool, 0, 1, &blk, &s0, a, a);
	memcpy(&sc, pool + off, 4);
	KT_CHECK(sc == kvk_pow2_scale(31.0f / 32, qmax), "fresh scale %g", sc);
	kvk_write_kv(&l, pool, 0, 1, &blk, &s1, b, b);
	memcpy(&sc, pool + off, 4);
	KT_CHECK(sc == kvk_pow2_scale(93.0f, qmax), "grown scale %g", sc);
	kvk_read_kv(&l, pool, 0, 1, &blk, &s0, r, NULL);
	for (d = 0; d < D; d++)		/* slot 0 re-quantised, still close */
		KT_CHECK(fabsf(r[d] - a[d]) <= (dtype == KVK_FP8 ?
			 fmaxf(a[d] * 0.07f, sc * 0x1p-9f) : sc),
			 "requantised %g vs %g (scale %g)", r[d], a[d], sc);
	kvk_write_kv(&l, pool, 0, 1, &blk, &s2, c, c);
	memcpy(&sc, pool + off, 4);
	KT_CHECK(sc == kvk_pow2_scale(93.0f, qmax), "scale kept %g", sc);
	kvk_read_kv(&l, pool, 0, 1, &blk, &s1, r, NULL);
	for (d = 0; d < D; d++)
		KT_CHECK(fabsf(r[d] - b[d]) <= (dtype == KVK_FP8 ?
			 b[d] * 0x1p-4f : sc / 2), "slot 1 %g", r[d]);
	/* rewriting slot 0 starts the block afresh */
	kvk_write_kv(&l, pool, 0, 1, &blk, &s0, c, c);
	memcpy(&sc, pool + off, 4);
	KT_CHECK(sc == kvk_pow2_scale(0.5f, qmax), "reset scale %g", sc);
	/* all-zero fresh token: scale 0, reads zeros; next token grows */
	memset(a, 0, sizeof(a));
	kvk_write_kv(&l, pool, 0, 1, &blk, &s0, a, a);
	memcpy(&sc, pool + off, 4);
	KT_CHECK(sc == 0.0f, "zero scale %g", sc);
	kvk_write_kv(&l, pool, 0, 1, &blk, &s1, c, c);
	kvk_read_kv(&l, pool, 0, 1, &blk, &s0, r, NULL);
	KT_CHECK(r[0] == 0.0f && r[31] == 0.0f, "zeros stay zero");
	kvk_read_kv(&l, pool, 0, 1, &blk, &s1, r, NULL);
	KT_CHECK(r[0] == 0.5f, "grown from zero %g", r[0]);
	free(pool);
}

int main(void)
{
	uint32_t dt;

	test_bf16();
	test_fp8();
	test_f16();
	test_scalar_quant();
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++) {
		test_specials(dt);
		test_round_trip(dt);
		if (dt == KVK_FP8 || dt == KVK_INT8)
			test_scale_rule(dt);
	}
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
