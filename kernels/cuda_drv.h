/* SPDX-License-Identifier: MIT */
/*
 * cuda_drv.h - the CUDA driver API, loaded at run time.
 *
 * kvpool never links libcuda: cuda_drv_open() dlopen()s "libcuda.so.1"
 * (or $KVPOOL_LIBCUDA) and fills a table of function pointers with
 * dlsym(), using the versioned symbol names the driver exports (the
 * oldest version with today's semantics, so that drivers from CUDA 12.0
 * on work).  Types and constants come from include/kvpool_cuda.h, so no
 * CUDA toolkit is needed to build.
 */
#ifndef KVK_CUDA_DRV_H
#define KVK_CUDA_DRV_H

#include <stddef.h>

#include "kvpool_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_drv {
	void *lib;			/* dlopen handle */
	int driver_version;		/* cuDriverGetVersion, e.g. 12040 */
	int fake;			/* the library is the test double */

	/* init, devices, contexts */
	CUresult (*cuInit)(unsigned int flags);
	CUresult (*cuDriverGetVersion)(int *version);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
	CUresult (*cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib,
					 CUdevice dev);
	CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
	CUresult (*cuCtxSetCurrent)(CUcontext ctx);
	CUresult (*cuCtxGetCurrent)(CUcontext *pctx);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuCtxGetDevice)(CUdevice *dev);

	/* memory */
	CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
	CUresult (*cuMemAlloc)(CUdeviceptr *dptr, size_t bytes);
	CUresult (*cuMemFree)(CUdeviceptr dptr);
	CUresult (*cuMemAllocHost)(void **pp, size_t bytes);
	CUresult (*cuMemFreeHost)(void *p);
	CUresult (*cuMemHostRegister)(void *p, size_t bytes,
				      unsigned int flags);
	CUresult (*cuMemHostUnregister)(void *p);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src,
				 size_t bytes);
	CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
	CUresult (*cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src,
				 size_t bytes);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src,
				      size_t bytes, CUstream s);
	CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src,
				      size_t bytes, CUstream s);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src,
				      size_t bytes, CUstream s);
	CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char uc, size_t n);
	CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char uc,
				    size_t n, CUstream s);
	CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned int ui,
				     size_t n, CUstream s);

	/* virtual memory management */
	CUresult (*cuMemGetAllocationGranularity)(size_t *granularity,
			const CUmemAllocationProp *prop,
			CUmemAllocationGranularity_flags option);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *ptr, size_t size,
					size_t alignment, CUdeviceptr addr,
					unsigned long long flags);
	CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *handle,
				size_t size, const CUmemAllocationProp *prop,
				unsigned long long flags);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
	CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
			     CUmemGenericAllocationHandle handle,
			     unsigned long long flags);
	CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size,
				   const CUmemAccessDesc *desc, size_t count);
	CUresult (*cuMemExportToShareableHandle)(void *shareable,
			CUmemGenericAllocationHandle handle,
			CUmemAllocationHandleType type,
			unsigned long long flags);
	CUresult (*cuMemImportFromShareableHandle)(
			CUmemGenericAllocationHandle *handle, void *os_handle,
			CUmemAllocationHandleType type);
	CUresult (*cuMemGetAllocationPropertiesFromHandle)(
			CUmemAllocationProp *prop,
			CUmemGenericAllocationHandle handle);

	/* modules and launches */
	CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
	CUresult (*cuModuleUnload)(CUmodule module);
	CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module,
					const char *name);
	CUresult (*cuFuncGetAttribute)(int *pi, CUfunction_attribute attrib,
				       CUfunction fn);
	CUresult (*cuFuncSetAttribute)(CUfunction fn,
				       CUfunction_attribute attrib, int value);
	/* optional (drivers from CUDA 12.4): may be NULL */
	CUresult (*cuFuncGetParamInfo)(CUfunction fn, size_t index,
				       size_t *offset, size_t *size);
	CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks,
			CUfunction fn, int block_size, size_t dyn_smem);
	CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gx,
				   unsigned int gy, unsigned int gz,
				   unsigned int bx, unsigned int by,
				   unsigned int bz, unsigned int shared_bytes,
				   CUstream stream, void **params,
				   void **extra);

	/* streams and events */
	CUresult (*cuStreamCreate)(CUstream *s, unsigned int flags);
	CUresult (*cuStreamDestroy)(CUstream s);
	CUresult (*cuStreamSynchronize)(CUstream s);
	CUresult (*cuEventCreate)(CUevent *e, unsigned int flags);
	CUresult (*cuEventDestroy)(CUevent e);
	CUresult (*cuEventRecord)(CUevent e, CUstream s);
	CUresult (*cuEventSynchronize)(CUevent e);
	CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);

	/* errors */
	CUresult (*cuGetErrorString)(CUresult error, const char **str);
	CUresult (*cuGetErrorName)(CUresult error, const char **str);
};

/*
 * dlopen libcuda.so.1 (or $KVPOOL_LIBCUDA when set) and fill *d.  Does
 * not call cuInit.  Returns 0, -ENODEV when the library is missing,
 * -ENOSYS when a required symbol is missing (d is then zeroed and
 * closed; the missing name is in cuda_drv_missing()).  Only
 * cuFuncGetParamInfo may be NULL.
 */
int cuda_drv_open(struct cuda_drv *d);
void cuda_drv_close(struct cuda_drv *d);
/* The symbol the last failed cuda_drv_open() on this thread lacked. */
const char *cuda_drv_missing(void);

/*
 * cuInit(0), pick device `ordinal`, retain its primary context and make it
 * current on this thread.  Returns 0; -ENODEV when the driver reports no
 * device (CUDA_ERROR_NO_DEVICE, or a stub library) or the ordinal does not
 * exist; -EIO for every other driver error, which is logged by name to
 * stderr (a driver/library mismatch is not "no device").  *res, when not
 * NULL, gets the failing CUresult.
 */
int cuda_drv_device_open(struct cuda_drv *d, int ordinal, CUdevice *dev,
			 CUcontext *ctx, CUresult *res);
void cuda_drv_device_close(struct cuda_drv *d, CUdevice dev);

/* CUresult -> -errno: 0, -ENOMEM (out of memory), -ENODEV (no device /
 * not initialised), -EINVAL (invalid value/handle), -EOPNOTSUPP,
 * -EIO otherwise. */
int cuda_drv_errno(CUresult r);
/* "CUDA_ERROR_NAME: description" of r (never NULL; a static buffer per
 * thread, valid until the next call on that thread). */
const char *cuda_drv_strerror(const struct cuda_drv *d, CUresult r);

#ifdef __cplusplus
}
#endif

#endif /* KVK_CUDA_DRV_H */
