// SPDX-License-Identifier: MIT
/*
 * cuda_drv.c - load the CUDA driver API with dlopen()/dlsym().
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"

struct sym {
	const char *name;	/* exported symbol */
	const char *alt;	/* older name with the same ABI, or NULL */
	size_t off;		/* offset of the pointer in struct cuda_drv */
	int optional;
};

#define S(member, symbol) { symbol, NULL, offsetof(struct cuda_drv, member), 0 }
#define A(member, symbol, alt) { symbol, alt, offsetof(struct cuda_drv, member), 0 }
#define O(member, symbol) { symbol, NULL, offsetof(struct cuda_drv, member), 1 }

static const struct sym syms[] = {
	S(cuInit, "cuInit"),
	S(cuDriverGetVersion, "cuDriverGetVersion"),
	S(cuDeviceGetCount, "cuDeviceGetCount"),
	S(cuDeviceGet, "cuDeviceGet"),
	S(cuDeviceGetName, "cuDeviceGetName"),
	S(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
	S(cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
	S(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	S(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	S(cuCtxSetCurrent, "cuCtxSetCurrent"),
	S(cuCtxGetCurrent, "cuCtxGetCurrent"),
	S(cuCtxSynchronize, "cuCtxSynchronize"),
	S(cuCtxGetDevice, "cuCtxGetDevice"),
	S(cuMemGetInfo, "cuMemGetInfo_v2"),
	S(cuMemAlloc, "cuMemAlloc_v2"),
	S(cuMemFree, "cuMemFree_v2"),
	S(cuMemAllocHost, "cuMemAllocHost_v2"),
	S(cuMemFreeHost, "cuMemFreeHost"),
	S(cuMemHostRegister, "cuMemHostRegister_v2"),
	S(cuMemHostUnregister, "cuMemHostUnregister"),
	S(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
	S(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
	S(cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
	S(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	S(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	S(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	S(cuMemsetD8, "cuMemsetD8_v2"),
	S(cuMemsetD8Async, "cuMemsetD8Async"),
	S(cuMemsetD32Async, "cuMemsetD32Async"),
	S(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
	S(cuMemAddressReserve, "cuMemAddressReserve"),
	S(cuMemAddressFree, "cuMemAddressFree"),
	S(cuMemCreate, "cuMemCreate"),
	S(cuMemRelease, "cuMemRelease"),
	S(cuMemMap, "cuMemMap"),
	S(cuMemUnmap, "cuMemUnmap"),
	S(cuMemSetAccess, "cuMemSetAccess"),
	S(cuMemExportToShareableHandle, "cuMemExportToShareableHandle"),
	S(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle"),
	S(cuMemGetAllocationPropertiesFromHandle,
	  "cuMemGetAllocationPropertiesFromHandle"),
	S(cuModuleLoadData, "cuModuleLoadData"),
	S(cuModuleUnload, "cuModuleUnload"),
	S(cuModuleGetFunction, "cuModuleGetFunction"),
	S(cuFuncGetAttribute, "cuFuncGetAttribute"),
	S(cuFuncSetAttribute, "cuFuncSetAttribute"),
	O(cuFuncGetParamInfo, "cuFuncGetParamInfo"),
	S(cuOccupancyMaxActiveBlocksPerMultiprocessor,
	  "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
	S(cuLaunchKernel, "cuLaunchKernel"),
	S(cuStreamCreate, "cuStreamCreate"),
	S(cuStreamDestroy, "cuStreamDestroy_v2"),
	S(cuStreamSynchronize, "cuStreamSynchronize"),
	S(cuEventCreate, "cuEventCreate"),
	S(cuEventDestroy, "cuEventDestroy_v2"),
	S(cuEventRecord, "cuEventRecord"),
	S(cuEventSynchronize, "cuEventSynchronize"),
	A(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
	S(cuGetErrorString, "cuGetErrorString"),
	S(cuGetErrorName, "cuGetErrorName"),
};

static __thread const char *missing;

const char *cuda_drv_missing(void)
{
	return missing ? missing : "";
}

int cuda_drv_open(struct cuda_drv *d)
{
	const char *path = getenv("KVPOOL_LIBCUDA");
	size_t i;

	memset(d, 0, sizeof(*d));
	missing = NULL;
	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib)
		return -ENODEV;
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(d->lib, syms[i].name);

		if (!p && syms[i].alt)
			p = dlsym(d->lib, syms[i].alt);
		if (!p && !syms[i].optional) {
			missing = syms[i].name;
			cuda_drv_close(d);
			return -ENOSYS;
		}
		memcpy((char *)d + syms[i].off, &p, sizeof(p));
	}
	d->fake = dlsym(d->lib, "kvpool_cudafake_version") != NULL;
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
	static __thread char buf[256];
	const char *name = NULL, *text = NULL;

	if (d && d->cuGetErrorName && d->cuGetErrorName(r, &name))
		name = NULL;
	if (d && d->cuGetErrorString && d->cuGetErrorString(r, &text))
		text = NULL;
	snprintf(buf, sizeof(buf), "%s (%d): %s", name ? name : "CUresult",
		 (int)r, text ? text : "unknown CUDA error");
	return buf;
}

/* No device at all: the driver says so, or the library is the toolkit's
 * stub (no driver installed). */
static int no_device(CUresult r)
{
	return r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_STUB_LIBRARY;
}

int cuda_drv_device_open(struct cuda_drv *d, int ordinal, CUdevice *dev,
			 CUcontext *ctx, CUresult *res)
{
	const char *what;
	CUresult r;
	int n = 0;

	if (res)
		*res = CUDA_SUCCESS;
	if (!d->lib)
		return -ENODEV;
	what = "cuInit";
	r = d->cuInit(0);
	if (r != CUDA_SUCCESS)
		goto fail;
	what = "cuDeviceGetCount";
	r = d->cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS)
		goto fail;
	if (n <= 0 || ordinal < 0 || ordinal >= n) {
		if (res)
			*res = CUDA_ERROR_INVALID_DEVICE;
		return -ENODEV;
	}
	what = "cuDeviceGet";
	r = d->cuDeviceGet(dev, ordinal);
	if (r != CUDA_SUCCESS)
		goto fail;
	what = "cuDevicePrimaryCtxRetain";
	r = d->cuDevicePrimaryCtxRetain(ctx, *dev);
	if (r != CUDA_SUCCESS)
		goto fail;
	what = "cuCtxSetCurrent";
	r = d->cuCtxSetCurrent(*ctx);
	if (r != CUDA_SUCCESS) {
		d->cuDevicePrimaryCtxRelease(*dev);
		goto fail;
	}
	return 0;
fail:
	if (res)
		*res = r;
	if (no_device(r))
		return -ENODEV;
	fprintf(stderr, "cuda: %s: %s (driver version %d)\n", what,
		cuda_drv_strerror(d, r), d->driver_version);
	return -EIO;
}

void cuda_drv_device_close(struct cuda_drv *d, CUdevice dev)
{
	if (d->lib) {
		d->cuCtxSetCurrent(NULL);
		d->cuDevicePrimaryCtxRelease(dev);
	}
}
