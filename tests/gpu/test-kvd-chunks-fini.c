// SPDX-License-Identifier: MIT
/*
 * test-kvd-chunks-fini - daemon/cuda_chunks.c's kvd_chunks_fini when an
 * unmap fails: maps two chunks and finishes; run by
 * test-kvd-chunks-fini.sh against the driver test double with the first
 * cuMemUnmap failing, which checks the double's log: the chunk that
 * stayed mapped keeps its handle and the reservation stays.  Exit 1 when
 * the driver is not the test double or a call fails.
 */
#include <errno.h>
#include <stdio.h>

#include "cuda_chunks.h"

int main(void)
{
	struct cuda_drv drv;
	struct kvd_chunks k = { 0 };
	CUdevice dev;
	CUcontext ctx;
	CUresult cr;
	uint64_t gran;
	int r;

	r = cuda_drv_open(&drv);
	if (r || !drv.fake) {
		printf("needs the driver test double (KVPOOL_LIBCUDA): %d\n", r);
		return 1;
	}
	r = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
	r = r ? r : kvd_chunks_granularity(&drv, dev, &gran);
	r = r ? r : kvd_chunks_init(&k, &drv, dev, gran, 4, 0);
	r = r ? r : kvd_chunks_map(&k, 0);
	r = r ? r : kvd_chunks_map(&k, 1);
	if (r) {
		printf("setup failed: %d\n", r);
		return 1;
	}
	kvd_chunks_fini(&k);
	printf("fini done\n");
	fflush(stdout);	/* the double exits 97 at exit, past stdio */
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	return 0;
}
