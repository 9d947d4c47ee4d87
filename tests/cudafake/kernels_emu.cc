// SPDX-License-Identifier: MIT
/*
 * kernels_emu.cc - kernels/cuda/kvkern_kernels.cu compiled for the host
 * emulation of the CUDA execution model (cuemu.h), and the table the
 * driver test double looks kernels up in.
 */
#include "cuemu_launch.h"
#include "../../kernels/cuda/kvkern_kernels.cu"

#define K(name, type) \
	static void call_##name(const void *p) \
	{ \
		name(*(const type *)p); \
	}
#define A(dt, d) K(kvk_attn_##dt##_d##d, kvk_cu_attn)
#define AD(dt) A(dt, 32) A(dt, 64) A(dt, 128) A(dt, 256)
K(kvk_write, kvk_cu_write)
K(kvk_read, kvk_cu_read)
K(kvk_merge, kvk_cu_merge)
K(kvk_read_bw, kvk_cu_bw)
K(kvk_selftest, kvk_cu_selftest)
K(kvk_edit_gather, kvk_cu_edit)
K(kvk_edit_scatter, kvk_cu_edit)
K(kvk_edit_score_stats, kvk_cu_score)
K(kvk_edit_score_accum, kvk_cu_score)
AD(bf16) AD(fp8) AD(int8) AD(int4)
#undef A
#undef K

#define E(name) { #name, call_##name },
#define A(dt, d) E(kvk_attn_##dt##_d##d)
#define AD(dt) A(dt, 32) A(dt, 64) A(dt, 128) A(dt, 256)
extern "C" const struct cuemu_kernel cuemu_kernels[] = {
	E(kvk_write) E(kvk_read) E(kvk_merge) E(kvk_read_bw) E(kvk_selftest)
	E(kvk_edit_gather) E(kvk_edit_scatter)
	E(kvk_edit_score_stats) E(kvk_edit_score_accum)
	AD(bf16) AD(fp8) AD(int8) AD(int4)
	{ NULL, NULL },
};
