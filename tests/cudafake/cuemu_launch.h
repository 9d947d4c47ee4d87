/* SPDX-License-Identifier: MIT */
/*
 * cuemu_launch.h - what the driver test double calls to run a kernel on
 * the host emulation of the CUDA execution model (cuemu.cc), and the
 * table of emulated kernels (kernels_emu.cc).
 */
#ifndef KVPOOL_CUEMU_LAUNCH_H
#define KVPOOL_CUEMU_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuemu_kernel {
	const char *name;
	void (*call)(const void *params);	/* params: the kernel's block */
};

/* NULL-terminated; the kernels of kvkern_kernels.cu */
extern const struct cuemu_kernel cuemu_kernels[];

/* Run every thread block of the grid, one after the other.  Returns 0 or
 * -ENOMEM; a kernel that breaks a rule of the execution model aborts the
 * process with a message naming the kernel, block and thread. */
int cuemu_launch(const char *name, void (*fn)(const void *),
		 const void *params, unsigned int gx, unsigned int gy,
		 unsigned int gz, unsigned int bx, unsigned int by,
		 unsigned int bz, size_t smem);
/* The architecture to emulate: 80 or 90 (default). */
void cuemu_set_sm(int sm);
/* CUEMU_ORDER: 0 forward, 1 reverse, 2 random:SEED (see cuemu.h).
 * cuemu_rand() is the generator random:SEED draws from, for the driver
 * double's stream order; cuemu_order_name() names the order. */
int cuemu_order(void);
unsigned int cuemu_rand(void);
const char *cuemu_order_name(void);
/* The kernel being run, or NULL. */
const char *cuemu_current_kernel(void);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_CUEMU_LAUNCH_H */
