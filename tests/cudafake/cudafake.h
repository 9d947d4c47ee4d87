/* SPDX-License-Identifier: MIT */
/*
 * cudafake.h - the driver test double's view of the kernels: the table
 * tests/cudafake/gen-kernel-table.sh generates from the build.
 */
#ifndef KVPOOL_CUDAFAKE_H
#define KVPOOL_CUDAFAKE_H

struct cudafake_kernel {
	const char *name;
	int nparams;
	int param_bytes;	/* .param space of the entry (PTX) */
	int max_threads;	/* .maxntid, 1024 without launch bounds */
	struct {
		int regs;	/* registers per thread */
		int smem;	/* static shared memory */
		int local;	/* stack frame (spills) */
	} arch[2];		/* sm_80, sm_90 */
};

extern const struct cudafake_kernel cudafake_kernels[];
extern const unsigned long cudafake_fatbin_cksum;
extern const unsigned long cudafake_fatbin_size;

#endif /* KVPOOL_CUDAFAKE_H */
