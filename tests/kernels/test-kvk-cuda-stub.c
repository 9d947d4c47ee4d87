// SPDX-License-Identifier: MIT
/*
 * test-kvk-cuda-stub.c - the CUDA driver loader without a GPU: a missing
 * libcuda gives -ENODEV (never a crash or a link error), the CUDA ops
 * (attention and edits) refuse to start without a driver, and the CPU ops
 * do not need one.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"
#include "kvkern_cuda.h"

int main(void)
{
	struct cuda_drv drv;
	struct kvk_cuda *c = (struct kvk_cuda *)1;
	CUdevice dev;
	CUcontext ctx;
	int ret;

	setenv("KVPOOL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	KT_CHECK(cuda_drv_open(&drv) == -ENODEV, "missing library");
	KT_CHECK(drv.lib == NULL && drv.cuInit == NULL, "table zeroed");
	KT_CHECK(cuda_drv_device_open(&drv, 0, &dev, &ctx) == -ENODEV,
		 "no device without a library");
	KT_CHECK(kvk_cuda_init(&c, &drv, NULL) == -ENODEV && c == NULL,
		 "kernels need a driver");
	{
		struct kvk_splice_args sa = { 0 };
		struct kvk_compact_args ca = { 0 };
		struct kvk_score_args sc = { 0 };

		KT_CHECK(kvk_cuda_splice(NULL, &sa) == -EINVAL &&
			 kvk_cuda_compact(NULL, &ca) == -EINVAL &&
			 kvk_cuda_score(NULL, &sc) == -EINVAL,
			 "edit ops refuse without a context");
	}
	/* a library without the symbols: libm is not libcuda */
	setenv("KVPOOL_LIBCUDA", "libm.so.6", 1);
	KT_CHECK(cuda_drv_open(&drv) == -ENOSYS, "not a driver");
	unsetenv("KVPOOL_LIBCUDA");
	ret = cuda_drv_open(&drv);
	printf("libcuda.so.1: %s\n", ret ? "absent" : "present");
	if (ret == 0) {
		ret = cuda_drv_device_open(&drv, 0, &dev, &ctx);
		printf("device 0: %d\n", ret);
		if (ret == 0)
			cuda_drv_device_close(&drv, dev);
		cuda_drv_close(&drv);
	} else {
		KT_CHECK(ret == -ENODEV, "absent driver: %d", ret);
	}
	KT_CHECK(cuda_drv_errno(CUDA_ERROR_OUT_OF_MEMORY) == -ENOMEM, "oom");
	KT_CHECK(cuda_drv_errno(CUDA_ERROR_NO_DEVICE) == -ENODEV, "nodev");
	KT_CHECK(cuda_drv_errno(CUDA_SUCCESS) == 0, "ok");
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
