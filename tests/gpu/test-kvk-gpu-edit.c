// SPDX-License-Identifier: MIT
/*
 * test-kvk-gpu-edit.c - the edit ops on the GPU against the CPU ops (the
 * cases: tests/gpu/kvk_gpu_edit_cases.h).  Exit 77 without libcuda, a
 * device or the fatbin.  --quick: the smaller set of cases (what
 * tests/gpu/test-kvk-gpu-emu.sh runs under the driver test double).
 */
#include "kvk_gpu_edit_cases.h"

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	char name[128] = "";
	int ret;

	kt_align16 = 1;
	if (argc > 1 && !strcmp(argv[1], "--quick"))
		edit_cases_full = 0;
	else if (argc > 1) {
		fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
		return 2;
	}
	ret = cuda_drv_open(&drv);
	if (ret) {
		printf("no CUDA driver (libcuda.so.1): %d\n", ret);
		return 77;
	}
	ret = cuda_drv_device_open(&drv, 0, &dev, &ctx, NULL);
	if (ret) {
		printf("no CUDA device: %d\n", ret);
		return 77;
	}
	drv.cuDeviceGetName(name, sizeof(name), dev);
	printf("device: %s, driver %d\n", name, drv.driver_version);
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret == -ENOENT) {
		printf("no %s (build it with nvcc)\n", KVK_FATBIN_NAME);
		return 77;
	}
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		return 1;
	}
	edit_cases();
	kvk_cuda_free(kc);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
