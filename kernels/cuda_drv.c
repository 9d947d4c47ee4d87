// SPDX-License-Identifier: MIT
/*
 * cuda_drv.c - load the CUDA driver API with dlopen()/dlsym().
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"

struct sym {
	const char *name;	/* exported symbol */
	size_t off;		/* offset of the pointer in struct cuda_drv */
	int optional;
};

#define S(member, symbol) { symbol, offsetof(struct cuda_drv, member), 0 }
#define O(member, symbol) { symbol, offsetof(struct cuda_drv, member), 1 }

static const struct sym syms[] = {
	S(cuInit, "cuInit"),
	S(cuDriverGetVersion, "cuDriverGetVersion"),
	S(cuDeviceGetCount, "cuDeviceGetCount"),
	S(cuDeviceGet, "cuDeviceGet"),
	S(cuDeviceGetName, "cuDeviceGetName"),
	S(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
	O(cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
	S(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	S(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	S(cuCtxSetCurrent, "cuCtxSetCurrent"),
	S(cuCtxGetCurrent, "cuCtxGetCurrent"),
	S(cuCtxSynchronize, "cuCtxSynchronize"),
	S(cuCtxGetDevice, "cuCtxGetDevice"),
	O(cuCtxCreate_v2, "cuCtxCreate_v2"),
	O(cuCtxDestroy, "cuCtxDestroy_v2"),
	S(cuMemGetInfo, "cuMemGetInfo_v2"),
	S(cuMemAlloc, "cuMemAlloc_v2"),
	S(cuMemFree, "cuMemFree_v2"),
	S(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
	S(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
	S(cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
	S(cuMemsetD8, "cuMemsetD8_v2"),
	S(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
	S(cuMemAddressReserve, "cuMemAddressReserve"),
	S(cuMemAddressFree, "cuMemAddressFree"),
	S(cuMemCreate, "cuMemCreate"),
	S(cuMemRelease, "cuMemRelease"),
	S(cuMemMap, "cuMemMap"),
	S(cuMemUnmap, "cuMemUnmap"),
	S(cuMemSetAccess, "cuMemSetAccess"),
	S(cuModuleLoadData, "cuModuleLoadData"),
	S(cuModuleUnload, "cuModuleUnload"),
	S(cuModuleGetFunction, "cuModuleGetFunction"),
	O(cuFuncSetAttribute, "cuFuncSetAttribute"),
	S(cuLaunchKernel, "cuLaunchKernel"),
	S(cuGetErrorString, "cuGetErrorString"),
	O(cuGetErrorName, "cuGetErrorName"),
};

int cuda_drv_open(struct cuda_drv *d)
{
	const char *path = getenv("KVPOOL_LIBCUDA");
	size_t i;

	memset(d, 0, sizeof(*d));
	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib)
		return -ENODEV;
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(d->lib, syms[i].name);

		if (!p && !syms[i].optional) {
			cuda_drv_close(d);
			return -ENOSYS;
		}
		memcpy((char *)d + syms[i].off, &p, sizeof(p));
	}
	if (d->cuDriverGetVersion(&d->driver_version) != CUDA_SUCCESS)
		d->driver_version = 0;
	return 0;
}

void cuda_drv_close(struct cuda_drv *d)
{
	if (d->lib)
		dlclose(d->lib);
	memset(d, 0, sizeof(*d));
}

int cuda_drv_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_STUB_LIBRARY:
		return -ENODEV;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

const char *cuda_drv_strerror(const struct cuda_drv *d, CUresult r)
{
	const char *s = NULL;

	if (d && d->cuGetErrorString && d->cuGetErrorString(r, &s) == 0 && s)
		return s;
	return "unknown CUDA error";
}

int cuda_drv_device_open(struct cuda_drv *d, int ordinal, CUdevice *dev,
			 CUcontext *ctx)
{
	CUresult r;
	int n = 0;

	if (!d->lib)
		return -ENODEV;
	r = d->cuInit(0);
	if (r != CUDA_SUCCESS)
		return cuda_drv_errno(r) == -EIO ? -ENODEV : cuda_drv_errno(r);
	r = d->cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n <= 0)
		return -ENODEV;
	if (ordinal < 0 || ordinal >= n)
		return -ENODEV;
	r = d->cuDeviceGet(dev, ordinal);
	if (r != CUDA_SUCCESS)
		return -ENODEV;
	r = d->cuDevicePrimaryCtxRetain(ctx, *dev);
	if (r != CUDA_SUCCESS)
		return cuda_drv_errno(r);
	r = d->cuCtxSetCurrent(*ctx);
	if (r != CUDA_SUCCESS) {
		d->cuDevicePrimaryCtxRelease(*dev);
		return cuda_drv_errno(r);
	}
	return 0;
}

void cuda_drv_device_close(struct cuda_drv *d, CUdevice dev)
{
	if (d->lib) {
		d->cuCtxSetCurrent(NULL);
		d->cuDevicePrimaryCtxRelease(dev);
	}
}
