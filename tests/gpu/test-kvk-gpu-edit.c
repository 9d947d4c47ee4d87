// SPDX-License-Identifier: MIT
/*
 * test-kvk-gpu-edit.c - the edit ops on the GPU against the CPU ops (the
 * cases: tests/gpu/kvk_gpu_edit_cases.h).  Exit 77 only without
 * libcuda.so.1 or without a device (cuInit or the device count saying
 * so); a driver that lacks an entry point or fails otherwise, a missing
 * fatbin or a module that does not load is a failure.  --quick: the
 * smaller set of cases (what tests/gpu/test-kvk-gpu-emu.sh runs under the
 * driver test double).
 */
#include "kvk_gpu_edit_cases.h"

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUresult cr;
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
	if (ret == -ENODEV) {
		printf("no CUDA driver (libcuda.so.1)\n");
		return 77;
	}
	if (ret) {
		printf("libcuda.so.1 lacks %s: not a usable driver\n",
		       cuda_drv_missing());
		return 1;
	}
	ret = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
	if (ret == -ENODEV) {
		printf("no CUDA device (%s)\n", cuda_drv_strerror(&drv, cr));
		cuda_drv_close(&drv);
		return 77;
	}
	if (ret) {
		printf("the CUDA driver is present but does not work: %s\n",
		       cuda_drv_strerror(&drv, cr));
		cuda_drv_close(&drv);
		return 1;
	}
	drv.cuDeviceGetName(name, sizeof(name), dev);
	printf("device: %s, driver %d\n", name, drv.driver_version);
	ret = kvk_cuda_init(&kc, &drv, NULL);
	if (ret == -ENOENT)
		printf("no %s (build it with nvcc)\n", KVK_FATBIN_NAME);
	if (ret) {
		printf("kvk_cuda_init: %d\n", ret);
		cuda_drv_device_close(&drv, dev);
		cuda_drv_close(&drv);
		return 1;
	}
	edit_cases();
	kvk_cuda_free(kc);
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
