/* SPDX-License-Identifier: MIT */
/*
 * cuemu.h - the CUDA execution model on the host, for running
 * kernels/cuda/kvkern_kernels.cu (compiled as C++ with -DKVK_CUEMU) in
 * the driver test double.  Every CUDA thread of a thread block is a
 * fiber; the fibers of a block run one at a time until each reaches a
 * barrier or a warp-collective instruction, which completes when all the
 * threads it names have arrived (and fails loudly when they cannot).
 * The warp-level instructions the kernels use (mma.sync, ldmatrix,
 * movmatrix, cp.async groups, shuffles, redux) are computed from their
 * definitions in the PTX ISA, fragment by fragment.
 *
 * The order in which the fibers of a block run between two barriers, and
 * the order of the blocks of a grid, come from CUEMU_ORDER:
 *   forward        thread (block) index order
 *   reverse        the reverse, so that a thread reading a lower thread's
 *                  store without a barrier in between reads the poison
 *   random:SEED    a permutation drawn anew for every round of the
 *                  scheduler, and for the blocks of every grid
 * Shared memory, static and dynamic, is filled with 0xff bytes (a NaN as
 * FP32, BF16 and FP16) before every block.
 *
 * cp.async copies happen when the issuing thread waits for their group
 * (cp.async.wait_group), not before: a thread that reads shared memory
 * another thread copied without the barrier in between reads stale data,
 * as it may on a GPU.  Timing, caches and the memory model beyond that
 * are not modelled.
 */
#ifndef KVPOOL_CUEMU_H
#define KVPOOL_CUEMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
	unsigned int x, y, z;
};

struct uint2 {
	unsigned int x, y;
};

struct alignas(16) uint4 {
	unsigned int x, y, z, w;
};

static inline uint4 make_uint4(unsigned int x, unsigned int y,
			       unsigned int z, unsigned int w)
{
	uint4 r = { x, y, z, w };

	return r;
}

extern "C" {
/* the running thread (fiber) */
dim3 cuemu_thread_idx(void);
dim3 cuemu_block_idx(void);
dim3 cuemu_block_dim(void);
dim3 cuemu_grid_dim(void);
void *cuemu_dyn_smem(void);
/* the architecture emulated (80, 90): paths differ from sm_89 on */
int cuemu_sm(void);
void cuemu_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* collectives: the calling thread waits for its warp (or block) */
void cuemu_syncthreads(void);
void cuemu_syncwarp(unsigned int mask);
uint32_t cuemu_shfl_xor(unsigned int mask, uint32_t v, int lane_mask);
uint32_t cuemu_redux_max(unsigned int mask, uint32_t v);
void cuemu_ldmatrix_x4(const void *row_addr, int trans, uint32_t r[4]);
void cuemu_mma_m16n8k16(int bf16, float d[4], const uint32_t a[4],
			uint32_t b0, uint32_t b1);
uint32_t cuemu_movmatrix_trans(uint32_t x);

/* cp.async of this thread */
void cuemu_cp_async(void *dst, const void *src, uint32_t cp_size,
		    uint32_t src_size);
void cuemu_cp_async_commit(void);
void cuemu_cp_async_wait(int n);

/* element conversions (round to nearest even) */
uint16_t cuemu_f32_to_f16(float x);
float cuemu_f16_to_f32(uint16_t h);
uint16_t cuemu_f32_to_bf16(float x);
float cuemu_fp8_to_f32(uint8_t b);
}

#define threadIdx (cuemu_thread_idx())
#define blockIdx (cuemu_block_idx())
#define blockDim (cuemu_block_dim())
#define gridDim (cuemu_grid_dim())

#define __global__
#define __launch_bounds__(...)
/* static shared memory: one section, poisoned before every block */
#define __shared__ static __attribute__((section("cuemu_smem")))
#define __align__(n) __attribute__((aligned(n)))
#define __forceinline__ static inline
#define __device__

/* IEEE FP32 operations rounded one by one (built with -ffp-contract=off) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }

static inline uint32_t min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static inline uint32_t __float_as_uint(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float __uint_as_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

template <typename T>
static inline T __ldg(const T *p)
{
	return *p;
}

static inline void __syncthreads(void)
{
	cuemu_syncthreads();
}

static inline void __syncwarp(unsigned int mask = 0xffffffffu)
{
	cuemu_syncwarp(mask);
}

static inline float __shfl_xor_sync(unsigned int mask, float v, int lm)
{
	return __uint_as_float(cuemu_shfl_xor(mask, __float_as_uint(v), lm));
}

static inline uint32_t __shfl_xor_sync(unsigned int mask, uint32_t v, int lm)
{
	return cuemu_shfl_xor(mask, v, lm);
}

static inline int __shfl_xor_sync(unsigned int mask, int v, int lm)
{
	return (int)cuemu_shfl_xor(mask, (uint32_t)v, lm);
}

static inline unsigned int __reduce_max_sync(unsigned int mask,
					     unsigned int v)
{
	return cuemu_redux_max(mask, v);
}

/* prmt.b32 default mode */
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
	uint64_t b = (uint64_t)x | ((uint64_t)y << 32);
	uint32_t r = 0;

	for (int i = 0; i < 4; i++) {
		uint32_t sel = (s >> (4 * i)) & 15;
		uint32_t v = (uint32_t)(b >> (8 * (sel & 7))) & 0xff;

		if (sel & 8)
			v = (v & 0x80) ? 0xff : 0;
		r |= v << (8 * i);
	}
	return r;
}

static inline uint32_t __vcmpeq2(uint32_t a, uint32_t b)
{
	uint32_t r = 0;

	if ((a & 0xffff) == (b & 0xffff))
		r |= 0xffff;
	if ((a >> 16) == (b >> 16))
		r |= 0xffff0000u;
	return r;
}

/* ---- the primitives of kvkern_kernels.cu ---- */

static inline void cp_async16(void *dst, const void *src, uint32_t n)
{
	cuemu_cp_async(dst, src, 16, n);
}

static inline void cp_async8(void *dst, const void *src, uint32_t n)
{
	cuemu_cp_async(dst, src, 8, n);
}

static inline void cp_async4(void *dst, const void *src, uint32_t n)
{
	cuemu_cp_async(dst, src, 4, n);
}

static inline void cp_async_commit(void)
{
	cuemu_cp_async_commit();
}

template <int N>
static inline void cp_async_wait(void)
{
	cuemu_cp_async_wait(N);
}

static inline void ldsm_x4(const void *p, uint32_t r[4])
{
	cuemu_ldmatrix_x4(p, 0, r);
}

static inline void ldsm_x4_t(const void *p, uint32_t r[4])
{
	cuemu_ldmatrix_x4(p, 1, r);
}

static inline void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0,
			    uint32_t b1)
{
	cuemu_mma_m16n8k16(1, d, a, b0, b1);
}

static inline void mma_f16(float d[4], const uint32_t a[4], uint32_t b0,
			   uint32_t b1)
{
	cuemu_mma_m16n8k16(0, d, a, b0, b1);
}

static inline uint32_t movm_t(uint32_t x)
{
	return cuemu_movmatrix_trans(x);
}

/*
 * ex2.approx.ftz.f32: not exact on the GPU.  The CUDA C++ Programming
 * Guide gives exp2f(), which compiles to it, a maximum error of 2 ulp over
 * the full range; the emulation returns exp2f's result moved by -2..+2
 * ulp, the step a hash of the argument's bits, so that the kernels'
 * results carry an error of the size the hardware's may have.  Subnormal
 * arguments and results flush to zero (.ftz).
 */
static inline float ex2(float x)
{
	uint32_t h;
	float y;
	int k;

	if (fabsf(x) < 0x1p-126f)
		x = 0.0f;
	y = exp2f(x);
	if (fabsf(y) < 0x1p-126f)
		return 0.0f;
	if (y == 1.0f && x == 0.0f)
		return y;
	h = __float_as_uint(x) * 0x9e3779b1u;
	for (k = (int)(h >> 29) % 5 - 2; k; k += k > 0 ? -1 : 1)
		y = nextafterf(y, k > 0 ? INFINITY : 0.0f);
	return fabsf(y) < 0x1p-126f ? 0.0f : y;
}

static inline uint16_t f2h_bits(float x)
{
	return cuemu_f32_to_f16(x);
}

static inline float h2f_bits(uint16_t h)
{
	return cuemu_f16_to_f32(h);
}

static inline uint16_t f2bf_bits(float x)
{
	return cuemu_f32_to_bf16(x);
}

/*
 * fma.rn.f16 of one half, exact: a x b + c computed as an integer
 * multiple of 2^-48 (every FP16 value is a multiple of 2^-24 below 2^16,
 * so the sum fits 82 bits) and rounded once to nearest even, subnormals
 * kept (no .ftz); an exact zero is -0 only when both a x b and c are
 * negative (or -0).  Inf and NaN operands take the FP32 path (exact for
 * them); a NaN result is the canonical 0x7fff.
 */
static inline uint16_t cuemu_hfma(uint16_t a, uint16_t b, uint16_t c)
{
	typedef unsigned __int128 u128;
	const int sab = ((a ^ b) >> 15) & 1, sc = (c >> 15) & 1;
	uint64_t ia, ib, ic;
	__int128 n;
	u128 m, r, rem, half;
	int len, shift, neg;
	uint32_t bits;

	if ((a & 0x7c00) == 0x7c00 || (b & 0x7c00) == 0x7c00 ||
	    (c & 0x7c00) == 0x7c00) {
		float y = cuemu_f16_to_f32(a) * cuemu_f16_to_f32(b) +
			  cuemu_f16_to_f32(c);

		return isnan(y) ? 0x7fff : cuemu_f32_to_f16(y);
	}
	/* |x| in units of 2^-24 */
#define CUEMU_H_UNITS(h) (((h) & 0x7c00) ? (uint64_t)(1024 | ((h) & 1023)) << \
			  ((((h) >> 10) & 31) - 1) : (uint64_t)((h) & 1023))
	ia = CUEMU_H_UNITS(a);
	ib = CUEMU_H_UNITS(b);
	ic = CUEMU_H_UNITS(c);
#undef CUEMU_H_UNITS
	n = (__int128)((u128)ia * ib) * (sab ? -1 : 1) +
	    (__int128)((u128)ic << 24) * (sc ? -1 : 1);
	if (n == 0)
		return sab && sc ? 0x8000 : 0;
	neg = n < 0;
	m = (u128)(neg ? -n : n);
	for (len = 0; len < 128 && (m >> len); len++)
		;
	/* the result's quantum, 2^(shift - 48): 11 significant bits, not
	 * below 2^-24 */
	shift = len - 11 > 24 ? len - 11 : 24;
	r = m >> shift;
	rem = m & (((u128)1 << shift) - 1);
	half = (u128)1 << (shift - 1);
	if (rem > half || (rem == half && (r & 1)))
		r++;
	/* exponent field (shift - 24) above the implicit bit's 1024 */
	bits = (uint32_t)(((u128)(shift - 24) << 10) + r);
	if (bits >= 0x7c00)
		bits = 0x7c00;
	return (uint16_t)(bits | (neg ? 0x8000 : 0));
}

/* fma.rn.f16x2; sub.rn.f16x2 as a x 1 + -b and
 * mul.rn.f16x2 (a x b + -0), each half rounded once */
static inline uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t r = 0;

	for (int i = 0; i < 2; i++)
		r |= (uint32_t)cuemu_hfma((uint16_t)(a >> (16 * i)),
					  (uint16_t)(b >> (16 * i)),
					  (uint16_t)(c >> (16 * i))) << (16 * i);
	return r;
}

static inline uint32_t hsub2(uint32_t a, uint32_t b)
{
	return hfma2(a, 0x3c003c00u, b ^ 0x80008000u);
}

static inline uint32_t hmul2(uint32_t a, uint32_t b)
{
	return hfma2(a, b, 0x80008000u);
}

/* lop3.b32: bit i of the result is bit 4 a_i + 2 b_i + c_i of LUT */
template <int LUT>
static inline uint32_t lop3(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t r = 0;

	for (int i = 0; i < 32; i++) {
		const int k = (int)(((a >> i) & 1) << 2 | ((b >> i) & 1) << 1 |
				    ((c >> i) & 1));

		r |= (uint32_t)((LUT >> k) & 1) << i;
	}
	return r;
}

static inline uint32_t warp_max_u32(uint32_t v)
{
	return cuemu_redux_max(0xffffffffu, v);
}

/* cvt.rn.f16x2.e4m3x2 (sm_89+): low byte -> low half */
static inline uint32_t e4m3x2_hw(uint32_t x)
{
	uint32_t r = 0;

	for (int i = 0; i < 2; i++) {
		uint8_t b = (uint8_t)(x >> (8 * i));
		uint16_t h = (b & 0x7f) == 0x7f ? (uint16_t)(0x7e00 | ((b & 0x80) << 8)) :
			     cuemu_f32_to_f16(cuemu_fp8_to_f32(b));

		r |= (uint32_t)h << (16 * i);
	}
	return r;
}

#endif /* KVPOOL_CUEMU_H */
