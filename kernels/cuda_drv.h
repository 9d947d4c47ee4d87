/* SPDX-License-Identifier: MIT */
/*
 * cuda_drv.h - the CUDA driver API, loaded at run time.
 *
 * kvpool never links libcuda: cuda_drv_open() dlopen()s "libcuda.so.1"
 * and fills a table of function pointers with dlsym(), using the
 * versioned (_v2) symbol names the driver exports.  One binary thus runs
 * with or without a GPU.  Types come from <cuda.h> (build with
 * -I/usr/local/cuda/include).
 *
 * Note: <cuda.h> #defines many API names to their versioned symbols
 * (cuMemAlloc -> cuMemAlloc_v2, ...).  The members below carry the plain
 * names, so after those macros they are renamed the same way in every
 * file that includes this header: call them as drv->cuMemAlloc(...).
 */
#ifndef KVK_CUDA_DRV_H
#define KVK_CUDA_DRV_H

#include <stddef.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_drv {
	void *lib;			/* dlopen handle */
	int driver_version;		/* cuDriverGetVersion, e.g. 12040 */

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
	/* optional (may be NULL): a non-primary context */
	CUresult (*cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags,
				   CUdevice dev);
	CUresult (*cuCtxDestroy)(CUcontext ctx);

	/* memory */
	CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
	CUresult (*cuMemAlloc)(CUdeviceptr *dptr, size_t bytes);
	CUresult (*cuMemFree)(CUdeviceptr dptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src,
				 size_t bytes);
	CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
	CUresult (*cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src,
				 size_t bytes);
	CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char uc, size_t n);

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

	/* modules and launches */
	CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
	CUresult (*cuModuleUnload)(CUmodule module);
	CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module,
					const char *name);
	CUresult (*cuFuncSetAttribute)(CUfunction fn,
				       CUfunction_attribute attrib, int value);
	CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gx,
				   unsigned int gy, unsigned int gz,
				   unsigned int bx, unsigned int by,
				   unsigned int bz, unsigned int shared_bytes,
				   CUstream stream, void **params,
				   void **extra);

	/* errors */
	CUresult (*cuGetErrorString)(CUresult error, const char **str);
	CUresult (*cuGetErrorName)(CUresult error, const char **str);
};

/*
 * dlopen libcuda.so.1 (or $KVPOOL_LIBCUDA when set, for tests) and fill
 * *d.  Does not call cuInit.  Returns 0, -ENODEV when the library is
 * missing, -ENOSYS when a required symbol is missing (d is then zeroed
 * and closed).  Optional members (cuCtxCreate_v2, cuCtxDestroy,
 * cuDeviceTotalMem, cuFuncSetAttribute, cuGetErrorName) may be NULL.
 */
int cuda_drv_open(struct cuda_drv *d);
void cuda_drv_close(struct cuda_drv *d);

/*
 * cuInit(0), pick device `ordinal`, retain its primary context and make it
 * current on this thread.  -ENODEV if there is no such device (or the
 * driver reports no device), -EIO for other driver errors.
 */
int cuda_drv_device_open(struct cuda_drv *d, int ordinal, CUdevice *dev,
			 CUcontext *ctx);
void cuda_drv_device_close(struct cuda_drv *d, CUdevice dev);

/* CUresult -> -errno: 0, -ENOMEM (out of memory), -ENODEV (no device /
 * not initialised), -EINVAL (invalid value/handle), -EIO otherwise. */
int cuda_drv_errno(CUresult r);
/* Human-readable text of r (never NULL). */
const char *cuda_drv_strerror(const struct cuda_drv *d, CUresult r);

#ifdef __cplusplus
}
#endif

#endif /* KVK_CUDA_DRV_H */
