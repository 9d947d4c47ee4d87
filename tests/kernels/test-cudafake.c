// SPDX-License-Identifier: MIT
/*
 * test-cudafake.c - the driver test double (tests/cudafake) catches broken
 * preconditions of the CUDA driver API.  Each case runs in a child
 * process that breaks one documented rule; the double must end the child
 * (SIGABRT, or exit 97 for leaks found at exit) with a message naming the
 * rule.  A last case follows every rule and must exit 0, so the checks
 * do not fire on correct use; so must the cases of the double's settings
 * (kept descriptors at exit, a device that cannot export).  Exit 77 when the build had no nvcc (no
 * double); after a build with nvcc a missing double is a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_drv.h"
#include "kvkern_cuda_abi.h"

static struct cuda_drv drv;
static char fatbin[PATH_MAX + 64];

#define GRAN (2UL << 20)

static void die(const char *what)
{
	fprintf(stderr, "setup failed: %s\n", what);
	_exit(2);
}

/* cuInit, device 0, its primary context current */
static CUcontext up(void)
{
	CUcontext ctx;
	CUdevice dev;

	if (drv.cuInit(0) || drv.cuDeviceGet(&dev, 0) ||
	    drv.cuDevicePrimaryCtxRetain(&ctx, dev) || drv.cuCtxSetCurrent(ctx))
		die("context");
	return ctx;
}

static void down(void)
{
	drv.cuCtxSetCurrent(NULL);
	drv.cuDevicePrimaryCtxRelease(0);
}

static void prop(CUmemAllocationProp *p, int exportable)
{
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = 0;
	if (exportable)
		p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static CUfunction kernel(CUmodule *mod, const char *name)
{
	FILE *f = fopen(fatbin, "rb");
	static char img[8 << 20];
	CUfunction fn;
	size_t n;

	if (!f)
		die("no fatbin");
	n = fread(img, 1, sizeof(img), f);
	fclose(f);
	if (!n || drv.cuModuleLoadData(mod, img) ||
	    drv.cuModuleGetFunction(&fn, *mod, name))
		die("module");
	return fn;
}

static void launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx,
		   unsigned smem, void *p, size_t size)
{
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, p,
			  CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };

	drv.cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, smem, NULL, NULL, extra);
	/* the double checks the arrays a kernel is given when its stream's
	 * work runs, as the device reads them then */
	drv.cuCtxSynchronize();
}

/* ---- the cases ---- */

static void c_no_init(void)
{
	CUdeviceptr p;

	drv.cuMemAlloc(&p, 4096);
}

static void c_no_ctx(void)
{
	CUdeviceptr p;

	drv.cuInit(0);
	drv.cuMemAlloc(&p, 4096);
}

static void c_create_size(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;

	drv.cuInit(0);
	prop(&pr, 0);
	drv.cuMemCreate(&h, GRAN + 4096, &pr, 0);
}

static void c_map_align(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;

	drv.cuInit(0);
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) ||
	    drv.cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0))
		die("vmm");
	drv.cuMemMap(va + 65536, GRAN, 0, h, 0);
}

static void c_no_access(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	char buf[64] = { 0 };

	up();
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) ||
	    drv.cuMemAddressReserve(&va, GRAN, 0, 0, 0) ||
	    drv.cuMemMap(va, GRAN, 0, h, 0))
		die("vmm");
	drv.cuMemcpyHtoD(va, buf, sizeof(buf));
}

static void c_bad_handle(void)
{
	drv.cuInit(0);
	drv.cuMemRelease(12345);
}

static void c_free_mapped(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;

	drv.cuInit(0);
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) ||
	    drv.cuMemAddressReserve(&va, GRAN, 0, 0, 0) ||
	    drv.cuMemMap(va, GRAN, 0, h, 0))
		die("vmm");
	drv.cuMemAddressFree(va, GRAN);
}

static void c_partial_unmap(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;

	drv.cuInit(0);
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, 2 * GRAN, &pr, 0) ||
	    drv.cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0) ||
	    drv.cuMemMap(va, 2 * GRAN, 0, h, 0))
		die("vmm");
	drv.cuMemUnmap(va, GRAN);
}

static void c_export(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	int fd;

	drv.cuInit(0);
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0))
		die("vmm");
	drv.cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

static void c_block(void)
{
	struct kvk_cu_bw p = { 0 };
	CUmodule m;
	CUfunction f;

	up();
	f = kernel(&m, "kvk_read_bw");
	/* launch bounds of kvk_read_bw: 512 threads */
	launch(f, 1, 1, 1024, 0, &p, sizeof(p));
}

static void c_grid_y(void)
{
	struct kvk_cu_bw p = { 0 };
	CUmodule m;
	CUfunction f;

	up();
	f = kernel(&m, "kvk_read_bw");
	launch(f, 1, 70000, 512, 0, &p, sizeof(p));
}

static void c_param_size(void)
{
	struct kvk_cu_read p;
	CUmodule m;
	CUfunction f;

	up();
	f = kernel(&m, "kvk_read");
	memset(&p, 0, sizeof(p));
	launch(f, 1, 1, 128, 0, &p, sizeof(p) - 8);
}

static void c_smem(void)
{
	struct kvk_cu_attn p;
	CUmodule m;
	CUfunction f;

	up();
	f = kernel(&m, "kvk_attn_bf16_d128");
	memset(&p, 0, sizeof(p));
	/* more than 48 KiB without CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_... */
	launch(f, 1, 1, 128, 100000, &p, sizeof(p));
}

/* an attention whose block table names a block outside the pool */
static void c_footprint(void)
{
	struct kvk_cu_attn p;
	CUdeviceptr pool, q, tab, ctx, out;
	uint32_t t[2] = { 0, 5 }, n[1] = { 30 };
	uint32_t smem = kvk_cu_attn_smem(1, 64, 128);
	CUmodule m;
	CUfunction f;

	up();
	f = kernel(&m, "kvk_attn_bf16_d64");
	if (drv.cuMemAlloc(&pool, 4 * 4096) || drv.cuMemAlloc(&q, 4096) ||
	    drv.cuMemAlloc(&out, 4096) || drv.cuMemAlloc(&tab, 8) ||
	    drv.cuMemAlloc(&ctx, 4))
		die("alloc");
	drv.cuMemcpyHtoD(tab, t, sizeof(t));
	drv.cuMemcpyHtoD(ctx, n, sizeof(n));
	drv.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
			       (int)smem);
	memset(&p, 0, sizeof(p));
	p.l.block_bytes = 4096;
	p.l.plane_bytes = 16 * 128;
	p.l.kv_heads = 1;
	p.l.head_dim = 64;
	p.l.tokens_per_block = 16;
	p.l.row_bytes = 128;
	p.l.dtype = 1;
	p.pool = pool;
	p.q = q;
	p.tables = tab;
	p.ctx = ctx;
	p.out = out;
	p.batch = 1;
	p.q_heads = 1;
	p.group = 1;
	p.mbps = 2;
	p.row_blocks = 1;
	p.nsplit = 1;
	p.chunk = 32;
	launch(f, 1, 1, 128, smem, &p, sizeof(p));
}

static void c_leak(void)
{
	CUdeviceptr p;

	up();
	drv.cuMemAlloc(&p, 4096);
	down();
}

static void c_leak_handle(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;

	drv.cuInit(0);
	prop(&pr, 1);
	drv.cuMemCreate(&h, GRAN, &pr, 0);
	exit(0);
}

/* an exported descriptor never closed: its memory outlives the handle */
static void c_leak_fd(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	int fd;

	drv.cuInit(0);
	prop(&pr, 1);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) ||
	    drv.cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
	    drv.cuMemRelease(h))
		die("export");
	exit(0);
}

/* the same with KVPOOL_FAKE_CUDA_KEPT_FDS=1: kept memory, not a leak */
static void c_kept_fd(void)
{
	c_leak_fd();
}

/* KVPOOL_FAKE_CUDA_POSIX_FD=0: a device that cannot export */
static void c_no_posix_fd(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h;
	int v = 1;

	up();
	prop(&pr, 1);
	if (drv.cuDeviceGetAttribute(&v,
		CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		0) || v)
		die("the attribute says the device can export");
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) != CUDA_ERROR_NOT_SUPPORTED)
		die("an exportable allocation was created");
	prop(&pr, 0);
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) || drv.cuMemRelease(h))
		die("an allocation that is not exportable");
	down();
	cuda_drv_close(&drv);
	exit(0);
}

static void c_leak_hostreg(void)
{
	static char page[8192] __attribute__((aligned(4096)));

	up();
	drv.cuMemHostRegister(page, sizeof(page), CU_MEMHOSTREGISTER_PORTABLE);
	down();
}

static void c_hostreg_null(void)
{
	up();
	drv.cuMemHostRegister(NULL, 4096, 0);
}

/* every rule followed */
static void c_good(void)
{
	CUmemAllocationProp pr;
	CUmemGenericAllocationHandle h, h2;
	CUmemAccessDesc acc;
	CUdeviceptr va, va2, p;
	char buf[64] = "kvpool", back[64];
	int fd;

	up();
	prop(&pr, 1);
	memset(&acc, 0, sizeof(acc));
	acc.location = pr.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (drv.cuMemCreate(&h, GRAN, &pr, 0) ||
	    drv.cuMemAddressReserve(&va, 2 * GRAN, GRAN, 0, 0) ||
	    drv.cuMemMap(va, GRAN, 0, h, 0) ||
	    drv.cuMemSetAccess(va, GRAN, &acc, 1) ||
	    drv.cuMemcpyHtoD(va, buf, sizeof(buf)) ||
	    drv.cuMemExportToShareableHandle(&fd, h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
	    drv.cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    drv.cuMemAddressReserve(&va2, GRAN, 0, 0, 0) ||
	    drv.cuMemMap(va2, GRAN, 0, h2, 0) ||
	    drv.cuMemSetAccess(va2, GRAN, &acc, 1) ||
	    drv.cuMemcpyDtoH(back, va2, sizeof(back)) ||
	    strcmp(back, "kvpool"))
		die("good path");
	close(fd);
	/* an allocation lives while an exported descriptor does */
	{
		CUmemGenericAllocationHandle h3;
		size_t f0, f1, f2, t;
		int fd3;

		if (drv.cuMemGetInfo(&f0, &t) ||
		    drv.cuMemCreate(&h3, GRAN, &pr, 0) ||
		    drv.cuMemExportToShareableHandle(&fd3, h3,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
		    drv.cuMemRelease(h3) || drv.cuMemGetInfo(&f1, &t))
			die("export and release");
		close(fd3);
		if (drv.cuMemGetInfo(&f2, &t) || f1 != f0 - GRAN || f2 != f0)
			die("the memory of a descriptor");
	}
	if (drv.cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)0,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
	    CUDA_ERROR_INVALID_VALUE)
		die("stdin imported");
	drv.cuMemUnmap(va2, GRAN);
	drv.cuMemAddressFree(va2, GRAN);
	drv.cuMemRelease(h2);
	drv.cuMemUnmap(va, GRAN);
	drv.cuMemRelease(h);
	drv.cuMemAddressFree(va, 2 * GRAN);
	if (drv.cuMemAlloc(&p, 1000) || drv.cuMemsetD8(p, 0, 1000) ||
	    drv.cuMemFree(p))
		die("alloc");
	/* page-locking: overlaps and unknown ranges are errors, not rules */
	{
		static char pg[3 * 4096] __attribute__((aligned(4096)));

		if (drv.cuMemHostRegister(pg, 2 * 4096,
					  CU_MEMHOSTREGISTER_PORTABLE) ||
		    drv.cuMemHostRegister(pg + 4096, 2 * 4096, 0) !=
		    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ||
		    drv.cuMemHostUnregister(pg + 4096) !=
		    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED ||
		    drv.cuMemHostUnregister(pg) ||
		    drv.cuMemHostUnregister(pg) !=
		    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
			die("host registration");
	}
	down();
	cuda_drv_close(&drv);
	exit(0);
}

struct tcase {
	const char *name;
	void (*fn)(void);
	const char *expect;	/* in stderr; NULL: must exit 0 */
	int leak;		/* found at exit: status 97 */
	const char *env;	/* NAME=VALUE set for the case, or NULL */
};

static const struct tcase cases[] = {
	{ "call before cuInit", c_no_init, "before cuInit", 0, NULL },
	{ "no current context", c_no_ctx, "no current context", 0, NULL },
	{ "cuMemCreate size", c_create_size, "not a multiple of the minimum "
	  "granularity", 0, NULL },
	{ "cuMemMap alignment", c_map_align, "not multiples of the minimum "
	  "granularity", 0, NULL },
	{ "use before cuMemSetAccess", c_no_access, "cuMemSetAccess was never "
	  "called", 0, NULL },
	{ "invalid handle", c_bad_handle, "not a live allocation handle", 0, NULL },
	{ "reservation freed while mapped", c_free_mapped, "still mapped", 0, NULL },
	{ "partial unmap", c_partial_unmap, "only whole mappings", 0, NULL },
	{ "export without a handle type", c_export, "requestedHandleTypes", 0, NULL },
	{ "block beyond launch bounds", c_block, "launch bounds", 0, NULL },
	{ "grid.y beyond 65535", c_grid_y, "grid", 0, NULL },
	{ "parameter buffer size", c_param_size, "parameter buffer of", 0, NULL },
	{ "dynamic shared memory", c_smem, "dynamic shared memory", 0, NULL },
	{ "block outside the pool", c_footprint, "pool block", 0, NULL },
	{ "leaked allocation", c_leak, "leak", 1, NULL },
	{ "leaked handle at exit", c_leak_handle, "never released", 1, NULL },
	{ "cuMemHostRegister of NULL", c_hostreg_null, "NULL pointer", 0, NULL },
	{ "leaked host registration", c_leak_hostreg, "cuMemHostRegister", 1, NULL },
	{ "exported descriptor left open", c_leak_fd, "was never closed", 1, NULL },
	{ "kept descriptor left open", c_kept_fd, NULL, 0,
	  "KVPOOL_FAKE_CUDA_KEPT_FDS=1" },
	{ "device that cannot export", c_no_posix_fd, NULL, 0,
	  "KVPOOL_FAKE_CUDA_POSIX_FD=0" },
	{ "correct use", c_good, NULL, 0, NULL },
};

static int run(const struct tcase *t)
{
	char path[] = "/tmp/kvpool-cudafake-XXXXXX", buf[4096];
	int fd = mkstemp(path), st = 0, ok;
	ssize_t n;
	pid_t pid;

	if (fd < 0)
		return 0;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		dup2(fd, 2);
		if (t->env)
			putenv((char *)t->env);
		if (cuda_drv_open(&drv))
			_exit(3);
		t->fn();
		if (t->expect)
			_exit(0);	/* the violation was not caught */
		_exit(0);
	}
	waitpid(pid, &st, 0);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
	unlink(path);
	if (!t->expect)
		ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	else if (t->leak)
		ok = WIFEXITED(st) && WEXITSTATUS(st) == 97 &&
		     strstr(buf, t->expect);
	else
		ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
		     strstr(buf, "VIOLATION") && strstr(buf, t->expect);
	if (t->expect)
		printf("%-34s %s: %s", t->name, ok ? "caught" : "MISSED",
		       buf[0] ? buf : "(no message)\n");
	else
		printf("%-34s %s%s", t->name, ok ? "ok, nothing reported\n" :
		       "FAILED: ", ok ? "" : buf);
	return ok;
}

int main(void)
{
	char exe[PATH_MAX - 64], lib[PATH_MAX], *s;
	ssize_t n;
	size_t i;
	int bad = 0;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 1;
	exe[n] = 0;
	s = strrchr(exe, '/');
	*s = 0;
	snprintf(lib, sizeof(lib), "%s/../cudafake/libcuda.so.1", exe);
	snprintf(fatbin, sizeof(fatbin), "%s/../../lib/kvpool_kernels.fatbin",
		 exe);
	if (access(lib, R_OK) || access(fatbin, R_OK)) {
#if KVT_HAVE_NVCC
		/* the build had nvcc: it makes both */
		printf("missing %s or %s (run make)\n", lib, fatbin);
		return 1;
#else
		printf("no nvcc at build time: no test double (%s)\n", lib);
		return 77;
#endif
	}
	setenv("KVPOOL_LIBCUDA", lib, 1);
	unsetenv("KVPOOL_FAKE_CUDA_FAIL");
	unsetenv("KVPOOL_FAKE_CUDA_EXEC");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		bad += !run(&cases[i]);
	printf("%zu cases, %d not caught\n", i, bad);
	return bad ? 1 : 0;
}
