// SPDX-License-Identifier: MIT
/*
 * test-kvk-cuemu-edit.c - the CUDA edit path without a GPU: the real launch
 * glue (kernels/kvkern_cuda_edit.c, kernels/kvkern_cuda.c) over a driver
 * double whose "device memory" is host memory and whose launches run the
 * edit kernels compiled for the host (tests/kernels/cuemu_edit.cpp), then
 * the cases of tests/gpu/kvk_gpu_edit_cases.h (smaller), so the kernels'
 * plan, indexing, batches, block-scale rule and rounding are checked
 * against the CPU ops byte for byte on every build.  The double also
 * checks the launch preconditions (grid and block limits, one parameter
 * block, every device address inside an allocation).  It does not replace
 * tests/gpu/test-kvk-gpu-edit on a GPU.
 */
#include "kvk_gpu_edit_cases.h"
#include "kvkern_cuda_edit_abi.h"

int cuemu_launch(const char *name, unsigned int gx, unsigned int gy,
		 unsigned int threads, void *param);

/* ---- the driver double ---- */

#define MAX_ALLOCS 64

static struct {
	uint8_t *p;
	size_t n;
} allocs[MAX_ALLOCS];

static int inside(CUdeviceptr d, size_t n)
{
	int i;

	for (i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].p && d >= (uintptr_t)allocs[i].p &&
		    d + n <= (uintptr_t)allocs[i].p + allocs[i].n)
			return 1;
	return 0;
}

static CUresult f_alloc(CUdeviceptr *d, size_t n)
{
	int i;

	for (i = 0; i < MAX_ALLOCS && allocs[i].p; i++)
		;
	if (i == MAX_ALLOCS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	allocs[i].p = aligned_alloc(256, (n + 255) & ~(size_t)255);
	if (!allocs[i].p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* fresh device memory is not zero */
	memset(allocs[i].p, 0xa5, n);
	allocs[i].n = n;
	*d = (uintptr_t)allocs[i].p;
	return CUDA_SUCCESS;
}

static CUresult f_free(CUdeviceptr d)
{
	int i;

	for (i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].p && (uintptr_t)allocs[i].p == d) {
			free(allocs[i].p);
			allocs[i].p = NULL;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_htod(CUdeviceptr d, const void *src, size_t n)
{
	if (!inside(d, n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy((void *)(uintptr_t)d, src, n);
	return CUDA_SUCCESS;
}

static CUresult f_dtoh(void *dst, CUdeviceptr d, size_t n)
{
	if (!inside(d, n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, (const void *)(uintptr_t)d, n);
	return CUDA_SUCCESS;
}

static CUresult f_ok(void)
{
	return CUDA_SUCCESS;
}

static CUresult f_load(CUmodule *m, const void *img)
{
	static int mod;

	*m = (CUmodule)&mod;
	return img ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_unload(CUmodule m)
{
	return CUDA_SUCCESS;
}

/* A function handle is its name (kept for the process). */
static CUresult f_getfn(CUfunction *f, CUmodule m, const char *name)
{
	static char names[128][64];
	static int n;
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			break;
	if (i == n) {
		if (n == 128)
			return CUDA_ERROR_NOT_FOUND;
		snprintf(names[n++], 64, "%s", name);
	}
	*f = (CUfunction)names[i];
	return CUDA_SUCCESS;
}

static CUresult f_getdev(CUdevice *d)
{
	*d = 0;
	return CUDA_SUCCESS;
}

static CUresult f_attr(int *v, CUdevice_attribute a, CUdevice d)
{
	*v = 4;
	return CUDA_SUCCESS;
}

static unsigned long launches;

static CUresult f_launch(CUfunction f, unsigned int gx, unsigned int gy,
			 unsigned int gz, unsigned int bx, unsigned int by,
			 unsigned int bz, unsigned int shm, CUstream st,
			 void **params, void **extra)
{
	const char *name = (const char *)f;

	KT_CHECK(gx >= 1 && gx < (1u << 31) && gy >= 1 && gy <= 65535 &&
		 gz == 1 && bx >= 1 && bx <= 1024 && by == 1 && bz == 1 &&
		 shm == 0 && params && params[0] && !extra,
		 "%s: launch (%u, %u, %u) x (%u, %u, %u)", name, gx, gy, gz,
		 bx, by, bz);
	if (!strncmp(name, "kvk_edit_score", 14)) {
		const struct kvk_cu_score *p = params[0];

		KT_CHECK(inside(p->table, 4) && inside(p->q, 4) &&
			 inside(p->parts, 4) && inside(p->ml, 4) &&
			 inside(p->out, (size_t)p->len * 4) &&
			 inside(p->pool, p->l.block_bytes),
			 "%s: a device address outside the allocations", name);
	} else if (!strncmp(name, "kvk_edit_", 9)) {
		const struct kvk_cu_edit *p = params[0];

		KT_CHECK(inside(p->table, 4) && inside(p->cs, 4) &&
			 inside(p->sn, 4) &&
			 inside(p->stage, (size_t)gx * gy * p->stage_stride) &&
			 inside(p->pool, p->l.block_bytes) &&
			 (!p->keep || inside(p->keep, (size_t)p->nkeep * 4)),
			 "%s: a device address outside the allocations", name);
	}
	launches++;
	if (cuemu_launch(name, gx, gy, bx, params[0]))
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

static CUresult f_errstr(CUresult r, const char **s)
{
	*s = "driver double error";
	return CUDA_SUCCESS;
}

int main(void)
{
	static int lib;
	int ret;

	memset(&drv, 0, sizeof(drv));
	drv.lib = &lib;
	drv.cuMemAlloc = f_alloc;
	drv.cuMemFree = f_free;
	drv.cuMemcpyHtoD = f_htod;
	drv.cuMemcpyDtoH = f_dtoh;
	drv.cuCtxSynchronize = f_ok;
	drv.cuModuleLoadData = f_load;
	drv.cuModuleUnload = f_unload;
	drv.cuModuleGetFunction = f_getfn;
	drv.cuCtxGetDevice = f_getdev;
	drv.cuDeviceGetAttribute = f_attr;
	drv.cuLaunchKernel = f_launch;
	drv.cuGetErrorString = f_errstr;
	/* any file stands for the fatbin: the double does not read it */
	ret = kvk_cuda_init(&kc, &drv, "/proc/self/exe");
	if (ret) {
		printf("kvk_cuda_init over the driver double: %d\n", ret);
		return 1;
	}
	kt_align16 = 1;
	edit_cases_full = 0;
	edit_cases();
	kvk_cuda_free(kc);
	printf("%lu launches, %d failures\n", launches, kt_failures);
	return kt_failures ? 1 : 0;
}
