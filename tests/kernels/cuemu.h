/* SPDX-License-Identifier: MIT */
/*
 * cuemu.h - just enough of CUDA's device-side language to compile the
 * edit kernels (kernels/cuda/kvkern_edit.cu) as host C++: the built-in
 * index variables, __syncthreads(), __shared__ as static storage (one CTA
 * runs at a time), uint4, and the rounded arithmetic intrinsics (plain
 * IEEE FP32 operations; compiled with -ffp-contract=off).  A test double: it runs
 * the kernels' logic and indexing on the host; timing, memory model and
 * the real hardware are tested by tests/gpu on a GPU.  The CTA's threads
 * are fibers of one host thread (tests/kernels/cuemu_edit.cpp), so a
 * barrier inside divergent code would hang here as it would on a GPU.
 */
#ifndef KVK_CUEMU_H
#define KVK_CUEMU_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct cuemu_dim {
	unsigned int x, y, z;
};

extern thread_local cuemu_dim threadIdx;
extern cuemu_dim blockIdx, blockDim, gridDim;

void __syncthreads(void);

struct uint4 {
	unsigned int x, y, z, w;
};

static inline uint4 make_uint4(unsigned int x, unsigned int y,
			       unsigned int z, unsigned int w)
{
	uint4 u = { x, y, z, w };

	return u;
}

static inline float __uint_as_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t __float_as_uint(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }

static inline uint32_t min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

#endif /* KVK_CUEMU_H */
