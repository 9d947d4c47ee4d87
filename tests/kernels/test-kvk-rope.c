// SPDX-License-Identifier: MIT
/*
 * test-kvk-rope.c - the RoPE data of a layout and the FP32 rotation the
 * edit ops use:
 *  - kvk_layout_set_rope() accepts NEOX/GPTJ, full and partial rotary
 *    dimensions, a base or an explicit table, and refuses bad ones;
 *  - kvk_rope_cos_sin() for deltas up to 2^32 - 1 matches cos/sin of the
 *    exact angle (a binary128 reference) within half an ulp of 1 in FP32,
 *    and R(a) R(b) = R(a + b) holds to FP32 rounding;
 *  - kvk_rope_rotate_rows() against an FP64 rotation of the same FP32
 *    rows: every rotation pair within 4 ulps (4 * 2^-24) of its norm, the
 *    dimensions past rotary_dims untouched.
 */
#include <quadmath.h>

#include "kvk_test.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void check_set(void)
{
	struct kvk_layout l;
	float f[KVK_ROPE_MAX_FREQ];
	uint32_t i;

	KT_CHECK(kvk_layout_init(&l, 2, 2, 64, KVK_BF16, 1 << 16) == 0, "init");
	KT_CHECK(l.rope.style == KVK_ROPE_NONE, "no RoPE by default");
	for (i = 0; i < N(f); i++)
		f[i] = 1.0f / (float)(i + 1);
	KT_CHECK(kvk_layout_set_rope(&l, 3, 0, 10000, NULL) == -EINVAL,
		 "unknown style");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NEOX, 63, 10000, NULL) ==
		 -EINVAL, "odd rotary dims");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NEOX, 66, 10000, NULL) ==
		 -EINVAL, "rotary dims > head_dim");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_GPTJ, 0, 0, NULL) == -EINVAL,
		 "no base, no table");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_GPTJ, 0, NAN, NULL) ==
		 -EINVAL, "NaN base");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_GPTJ, 0, -1, NULL) ==
		 -EINVAL, "negative base");
	f[5] = INFINITY;
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NEOX, 0, 0, f) == -EINVAL,
		 "Inf in the table");
	f[5] = 0.5f;
	KT_CHECK(l.rope.style == KVK_ROPE_NONE, "refusals change nothing");
	KT_CHECK(kvk_layout_set_rope(NULL, KVK_ROPE_NEOX, 0, 1e4f, NULL) ==
		 -EINVAL, "NULL layout");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NEOX, 32, 0, f) == 0,
		 "partial with a table");
	KT_CHECK(l.rope.rotary_dims == 32 && l.rope.table_given &&
		 l.rope.inv_freq[15] == f[15] && l.rope.inv_freq[16] == 0,
		 "table kept, rest zero");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_GPTJ, 0, 10000, NULL) == 0,
		 "base");
	KT_CHECK(l.rope.rotary_dims == 64 && !l.rope.table_given &&
		 l.rope.inv_freq[0] == 1.0f &&
		 l.rope.inv_freq[1] == (float)pow(10000.0, -2.0 / 64),
		 "derived table");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NONE, 0, 0, NULL) == 0 &&
		 l.rope.style == KVK_ROPE_NONE, "cleared");
	KT_CHECK(kvk_rope_rotate_rows(&l, 1, 1, f) == -ENODATA,
		 "rotating without RoPE data");
}

/* cos/sin of delta * f with the angle reduced in long double by hand. */
static void check_angles(void)
{
	static const int64_t deltas[] = {
		0, 1, -1, 7, -1000, 32767, 131071, 1 << 20, -(1 << 24) - 3,
		(1LL << 31) - 1, -(1LL << 31), (1LL << 32) - 1,
		-(1LL << 32) + 1, 123456789,
	};
	struct kvk_rope r;
	float c[KVK_ROPE_MAX_FREQ], s[KVK_ROPE_MAX_FREQ];
	double worst = 0;
	uint32_t i, k;

	memset(&r, 0, sizeof(r));
	r.style = KVK_ROPE_NEOX;
	r.rotary_dims = 128;
	for (i = 0; i < 64; i++)
		r.inv_freq[i] = i == 63 ? 3.0f : (float)pow(5e5, -i / 64.0);
	KT_CHECK(kvk_rope_cos_sin(&r, 1LL << 32, c, s) == -EINVAL,
		 "delta 2^32");
	KT_CHECK(kvk_rope_cos_sin(&r, -(1LL << 32), c, s) == -EINVAL,
		 "delta -2^32");
	for (k = 0; k < N(deltas); k++) {
		KT_CHECK(kvk_rope_cos_sin(&r, deltas[k], c, s) == 0, "cos/sin");
		for (i = 0; i < 64; i++) {
			/* binary128: the product is exact, 2 pi to 2^-112 */
			__float128 th = (__float128)deltas[k] *
					(__float128)r.inv_freq[i];
			__float128 red = fmodq(th, 2 * M_PIq);
			double ec = (double)cosq(red), es = (double)sinq(red);
			double e = fmax(fabs(c[i] - ec), fabs(s[i] - es));

			if (e > worst)
				worst = e;
		}
	}
	/* one FP32 rounding of values <= 1: half an ulp of 1 is 2^-24 */
	KT_CHECK(worst <= 0x1p-24 + 1e-12, "cos/sin error %g", worst);
	printf("angles: worst |cos/sin - exact| %.3g (2^-24 = %.3g)\n", worst,
	       0x1p-24);
}

static void check_rotate(uint32_t style, uint32_t D, uint32_t rd, int table)
{
	static const int64_t deltas[] = {
		1, -1, 3, -64, 1000, -32768, 1 << 20, (1LL << 31) - 1,
		-(1LL << 31) + 5, (1LL << 32) - 1,
	};
	struct kvk_layout l;
	float f[KVK_ROPE_MAX_FREQ], rows[4 * KVK_MAX_HEAD_DIM];
	float orig[4 * KVK_MAX_HEAD_DIM];
	double worst = 0;
	uint32_t i, k, n, d;

	KT_CHECK(kvk_layout_init(&l, 1, 1, D, KVK_BF16, 1 << 16) == 0, "init");
	for (i = 0; i < rd / 2; i++)
		f[i] = (float)(pow(10000.0, -2.0 * i / rd) * (1 + i % 3) / 2);
	KT_CHECK(kvk_layout_set_rope(&l, style, rd, table ? 0 : 10000,
				     table ? f : NULL) == 0, "set");
	for (k = 0; k < N(deltas); k++) {
		for (i = 0; i < 4 * D; i++)
			orig[i] = rows[i] = kt_gauss() * (i % 7 ? 1 : 100);
		KT_CHECK(kvk_rope_rotate_rows(&l, deltas[k], 4, rows) == 0,
			 "rotate");
		for (n = 0; n < 4; n++) {
			const float *o = orig + n * D, *x = rows + n * D;

			for (i = 0; i < rd / 2; i++) {
				__float128 th = fmodq((__float128)deltas[k] *
					(__float128)l.rope.inv_freq[i],
					2 * M_PIq);
				double c = (double)cosq(th), s = (double)sinq(th);
				uint32_t a = style == KVK_ROPE_NEOX ? i : 2 * i;
				uint32_t b = style == KVK_ROPE_NEOX ?
					     i + rd / 2 : 2 * i + 1;
				double ra = o[a] * c - (double)o[b] * s;
				double rb = o[a] * s + (double)o[b] * c;
				double nrm = hypot(o[a], o[b]);
				double e = hypot(x[a] - ra, x[b] - rb) /
					   (nrm * 0x1p-24);

				if (e > worst)
					worst = e;
			}
			for (d = rd; d < D; d++)
				KT_CHECK(x[d] == o[d], "dim %u past rotary "
					 "dims changed", d);
		}
	}
	KT_CHECK(worst <= 4.0, "style %u D %u rd %u table %d: pair error %.2f "
		 "ulps of its norm", style, D, rd, table, worst);
	printf("rotate: style %s D %3u rd %3u %s: worst %.2f ulps of the "
	       "pair norm\n", style == KVK_ROPE_NEOX ? "neox" : "gptj", D, rd,
	       table ? "table" : "base ", worst);
}

/* R(a) R(b) = R(a + b) on FP32 rows, to FP32 rounding. */
static void check_compose(void)
{
	struct kvk_layout l;
	float x[128], y[128];
	double worst = 0;
	uint32_t i, k;

	KT_CHECK(kvk_layout_init(&l, 1, 1, 128, KVK_BF16, 1 << 16) == 0,
		 "init");
	KT_CHECK(kvk_layout_set_rope(&l, KVK_ROPE_NEOX, 0, 500000, NULL) == 0,
		 "set");
	for (k = 0; k < 20; k++) {
		int64_t a = (int64_t)kt_below(1u << 30) - (1 << 29);
		int64_t b = (int64_t)kt_below(1u << 20);

		for (i = 0; i < 128; i++)
			x[i] = y[i] = kt_gauss();
		kvk_rope_rotate_rows(&l, a, 1, x);
		kvk_rope_rotate_rows(&l, b, 1, x);
		kvk_rope_rotate_rows(&l, a + b, 1, y);
		for (i = 0; i < 64; i++) {
			double e = hypot(x[i] - y[i], x[i + 64] - y[i + 64]) /
				   hypot(y[i], y[i + 64]);

			if (e > worst)
				worst = e;
		}
	}
	KT_CHECK(worst < 12 * 0x1p-24, "R(a)R(b) vs R(a+b): %g", worst);
	printf("compose: worst relative %.3g\n", worst);
}

int main(void)
{
	static const uint32_t dims[][2] = {
		{ 64, 64 }, { 128, 128 }, { 128, 64 }, { 256, 64 }, { 32, 2 },
		{ 256, 256 },
	};
	uint32_t i, style, table;

	check_set();
	check_angles();
	for (style = KVK_ROPE_NEOX; style <= KVK_ROPE_GPTJ; style++)
		for (i = 0; i < N(dims); i++)
			for (table = 0; table < 2; table++)
				check_rotate(style, dims[i][0], dims[i][1],
					     table);
	check_compose();
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
