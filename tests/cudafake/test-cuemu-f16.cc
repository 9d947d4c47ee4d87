// SPDX-License-Identifier: MIT
/*
 * test-cuemu-f16 - the emulation's FP16 arithmetic and lop3.b32
 * (tests/cudafake/cuemu.h) against independent references:
 *   fma.rn.f16x2: the exact a x b + c as a double-double (the product is
 *     exact in a double, TwoSum gives the sum's error), rounded to FP16 by
 *     the compiler's correctly rounded double -> _Float16 conversion, the
 *     error deciding the one case it can change (a sum exactly halfway
 *     between two FP16 values);
 *   sub.rn.f16x2 and mul.rn.f16x2: a - b and a x b in double (exact for
 *     FP16 operands) rounded to _Float16 once;
 *   lop3.b32: the boolean functions its LUT names.
 * sub and mul for a in a stride of 997 over the 65,536 bit patterns and
 * b over all of them; fma on 2 million random triples, most from small
 * exponents (subnormals, ties, overflow) for the rest; NaN
 * results compare as NaN.  Exits 1 on the first difference.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuemu.h"
#include "kvkern.h"

extern "C" uint16_t cuemu_f32_to_f16(float x)
{
	return kvk_f32_to_f16(x);
}

extern "C" float cuemu_f16_to_f32(uint16_t h)
{
	return kvk_f16_to_f32(h);
}

static uint16_t bits_of(_Float16 h)
{
	uint16_t u;

	memcpy(&u, &h, 2);
	return u;
}

static double val(uint16_t u)
{
	_Float16 h;

	memcpy(&h, &u, 2);
	return (double)h;
}

static int is_nan(uint16_t u)
{
	return (u & 0x7c00) == 0x7c00 && (u & 0x3ff);
}

/* the next FP16 value above (up) or below h, an infinity past the end */
static uint16_t next_val(uint16_t h, int up)
{
	if (!(h & 0x7fff))
		return up ? 0x0001 : 0x8001;
	return (uint16_t)(((h & 0x8000) != 0) == up ? h - 1 : h + 1);
}

static double mid_of(uint16_t lo, uint16_t hi)
{
	if (isinf(val(hi)))
		return 65520.0;
	if (isinf(val(lo)))
		return -65520.0;
	return (val(lo) + val(hi)) / 2;
}

static uint16_t ref_fma(uint16_t a, uint16_t b, uint16_t c)
{
	const double p = val(a) * val(b), cc = val(c), s = p + cc;
	const double bp = s - cc, e = (p - bp) + (cc - (s - bp));	/* TwoSum */
	uint16_t h, lo, hi;

	if (isnan(s))
		return 0x7fff;
	h = bits_of((_Float16)s);
	if (e == 0.0 || isinf(s) || val(h) == s)
		return h;
	/* s + e differs from s by less than half an ulp of s: only a tie
	 * in FP16 rounds another way */
	lo = val(h) < s ? h : next_val(h, 0);
	hi = val(h) < s ? next_val(h, 1) : h;
	if (s != mid_of(lo, hi))
		return h;
	return e > 0 ? hi : lo;
}

static int same(uint16_t x, uint16_t y)
{
	return x == y || (is_nan(x) && is_nan(y));
}

static int bad(const char *op, uint16_t a, uint16_t b, uint16_t c,
	       uint16_t got, uint16_t want)
{
	printf("FAIL %s(%#06x, %#06x, %#06x) = %#06x, want %#06x\n", op, a, b,
	       c, got, want);
	return 1;
}

static uint32_t rng = 12345;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

/* mostly small exponents, where subnormals and ties live */
static uint16_t draw(void)
{
	uint32_t r = next();

	if (r & 0x10000)
		return (uint16_t)r;
	return (uint16_t)((r & 0x83ff) | ((r >> 20) % 6) << 10);
}

int main(void)
{
	long n = 0;

	for (uint32_t a = 0; a < 0x10000; a += 997) {
		for (uint32_t b = 0; b < 0x10000; b++) {
			const uint32_t x = a | a << 16, y = b | (b ^ 0x8000) << 16;
			const uint32_t d = hsub2(x, y), m = hmul2(x, y);
			const uint16_t bn = (uint16_t)(b ^ 0x8000);
			double vs = val((uint16_t)a) - val((uint16_t)b);
			double vm = val((uint16_t)a) * val((uint16_t)b);
			uint16_t ws = isnan(vs) ? 0x7fff : bits_of((_Float16)vs);
			uint16_t wm = isnan(vm) ? 0x7fff : bits_of((_Float16)vm);

			if (!same((uint16_t)d, ws))
				return bad("sub", (uint16_t)a, (uint16_t)b, 0,
					   (uint16_t)d, ws);
			if (!same((uint16_t)m, wm))
				return bad("mul", (uint16_t)a, (uint16_t)b, 0,
					   (uint16_t)m, wm);
			vs = val((uint16_t)a) - val(bn);
			ws = isnan(vs) ? 0x7fff : bits_of((_Float16)vs);
			if (!same((uint16_t)(d >> 16), ws))
				return bad("sub (high half)", (uint16_t)a, bn, 0,
					   (uint16_t)(d >> 16), ws);
			n += 3;
		}
	}
	for (int i = 0; i < 2000000; i++) {
		const uint16_t a = draw(), b = draw(), c = draw();
		const uint16_t got = (uint16_t)hfma2(a, b, c);
		const uint16_t want = ref_fma(a, b, c);

		if (!same(got, want))
			return bad("fma", a, b, c, got, want);
		n++;
	}
	/* the INT4 conversion's own steps, every nibble */
	for (uint32_t v = 0; v < 16; v++) {
		const uint32_t lo = (v ^ 8) | 0x6400, hi = (v ^ 8) << 4 | 0x6400;
		const int want = v >= 8 ? (int)v - 16 : (int)v;

		if (val((uint16_t)hsub2(lo, 0x6408)) != want ||
		    val((uint16_t)hfma2(hi, 0x2c00, 0xd480)) != want) {
			printf("FAIL INT4 nibble %u\n", v);
			return 1;
		}
	}
	for (int i = 0; i < 100000; i++) {
		const uint32_t a = next(), b = next(), c = next();

		if (lop3<0x6a>(a, b, c) != ((a & b) ^ c) ||
		    lop3<0xea>(a, b, c) != ((a & b) | c) ||
		    lop3<0xf0>(a, b, c) != a || lop3<0xcc>(a, b, c) != b ||
		    lop3<0xaa>(a, b, c) != c ||
		    lop3<0x96>(a, b, c) != (a ^ b ^ c) ||
		    lop3<0xe8>(a, b, c) != ((a & b) | (a & c) | (b & c)) ||
		    lop3<0x00>(a, b, c) != 0 || lop3<0xff>(a, b, c) != ~0u) {
			printf("FAIL lop3 on %#x %#x %#x\n", a, b, c);
			return 1;
		}
	}
	printf("%ld FP16 results exact, lop3 as its LUT\n", n);
	return 0;
}
