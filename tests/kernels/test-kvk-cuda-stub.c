// SPDX-License-Identifier: MIT
/*
 * test-kvk-cuda-stub.c - the CUDA driver loader without a GPU: a missing
 * libcuda gives -ENODEV (never a crash or a link error), a library without
 * the driver's symbols -ENOSYS naming the first missing one, the CUDA ops
 * refuse to start without a driver (attention and edits), CUresults map to
 * errnos and have names, and the CPU ops do not need a driver.
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
	CUresult cr = CUDA_ERROR_UNKNOWN;
	int ret;

	setenv("KVPOOL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	KT_CHECK(cuda_drv_open(&drv) == -ENODEV, "missing library");
	KT_CHECK(drv.lib == NULL && drv.cuInit == NULL, "table zeroed");
	KT_CHECK(cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr) == -ENODEV,
		 "no device without a library");
	KT_CHECK(cr == CUDA_SUCCESS, "no CUresult without a library: %d", cr);
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
	KT_CHECK(!strcmp(cuda_drv_missing(), "cuInit"), "missing %s",
		 cuda_drv_missing());
	unsetenv("KVPOOL_LIBCUDA");
	ret = cuda_drv_open(&drv);
	printf("libcuda.so.1: %s\n", ret ? "absent" : "present");
	if (ret == 0) {
		ret = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
		printf("device 0: %d (%s)\n", ret, cuda_drv_strerror(&drv, cr));
		if (ret == 0)
			cuda_drv_device_close(&drv, dev);
		cuda_drv_close(&drv);
	} else {
		KT_CHECK(ret == -ENODEV || ret == -ENOSYS, "absent driver: %d",
			 ret);
	}
	KT_CHECK(cuda_drv_errno(CUDA_ERROR_OUT_OF_MEMORY) == -ENOMEM, "oom");
	KT_CHECK(cuda_drv_errno(CUDA_ERROR_NO_DEVICE) == -ENODEV, "nodev");
	KT_CHECK(cuda_drv_errno(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) == -EIO,
		 "a mismatch is an error, not 'no device'");
	KT_CHECK(cuda_drv_errno(CUDA_SUCCESS) == 0, "ok");
	/* without a loaded driver the text still names the code */
	KT_CHECK(strstr(cuda_drv_strerror(NULL, CUDA_ERROR_NO_DEVICE), "100"),
		 "strerror: %s", cuda_drv_strerror(NULL, CUDA_ERROR_NO_DEVICE));
	KT_CHECK(!kvk_cuda_head_dim_ok(96) && kvk_cuda_head_dim_ok(32),
		 "head dims");
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
