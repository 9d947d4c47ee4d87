// SPDX-License-Identifier: MIT
/*
 * cudafake.c - a test double for libcuda.so.1: every driver entry point
 * kvpool loads (kernels/cuda_drv.c, libkvlease/kvl_dev.c), on host memory,
 * checking the preconditions the CUDA driver API documentation states.
 * Selected with KVPOOL_LIBCUDA=build/tests/cudafake/libcuda.so.1.
 *
 * Checked (a broken precondition prints "cudafake: VIOLATION: ..." and
 * aborts the process, so that the test fails where the bug is):
 *  - cuInit before anything else; a current context for the calls that
 *    need one; primary contexts retained before use, released once;
 *  - VMM: sizes, addresses and offsets multiples of the granularity the
 *    double reports, mappings inside a reservation and not overlapping,
 *    access set before any use of a mapping, whole mappings unmapped,
 *    handles unmapped and released, reservations freed whole and empty,
 *    exports only of handles created exportable (on a device that
 *    supports POSIX file descriptors), with flags 0; imports only of
 *    descriptors the double exported (CUDA_ERROR_INVALID_VALUE
 *    otherwise: the descriptor is the caller's input); an imported
 *    allocation keeps its size, and a map beyond it is refused;
 *  - copies and memsets inside live device memory (cuMemAlloc or mapped
 *    with access), host pointers that are not device pointers, 32-bit
 *    memsets at 4-byte aligned addresses, streams alive;
 *  - launches: a function of a loaded module, grid and block within the
 *    limits of sm_80/sm_90, the kernel's launch bounds and registers,
 *    static + dynamic shared memory within 48 KiB or the opted-in
 *    maximum, the parameter buffer exactly the kernel's size (from the
 *    fatbin's PTX), a live stream; and every array the parameter block
 *    names (device addresses of kvkern_cuda_abi.h) inside live device
 *    memory, including every pool block an attention's block tables name;
 *  - at exit (or dlclose): no allocation, handle, mapping, reservation,
 *    module, stream, event or context reference left.
 *
 * Environment:
 *   KVPOOL_FAKE_CUDA_ARCH=80|90      device model (default 90: H200-like)
 *   KVPOOL_FAKE_CUDA_DEVICES=N       devices (default 1; 0: no device)
 *   KVPOOL_FAKE_CUDA_MEM=BYTES       device memory (default 1 GiB)
 *   KVPOOL_FAKE_CUDA_INIT=CODE       cuInit returns CODE
 *   KVPOOL_FAKE_CUDA_KEPT_FDS=1      descriptors of exported allocations
 *                                    still open at exit are kept memory
 *                                    (a store of kept backing holds them),
 *                                    logged "kept fd FD BYTES", not leaks
 *   KVPOOL_FAKE_CUDA_POSIX_FD=0      the devices cannot export allocations
 *                                    (the attribute reads 0, cuMemCreate of
 *                                    an exportable one CUDA_ERROR_NOT_SUPPORTED)
 *   KVPOOL_FAKE_CUDA_GRAN_REC=BYTES  the recommended allocation
 *                                    granularity (a multiple of the minimum,
 *                                    2 MiB, which is also the default)
 *   KVPOOL_FAKE_CUDA_DRIVER=VER      cuDriverGetVersion (default 12080)
 *   KVPOOL_FAKE_CUDA_FAIL=fn=N[+][:code],...  the N-th call of fn (and
 *                                    later ones with +) returns code
 *                                    (default CUDA_ERROR_OUT_OF_MEMORY)
 *   KVPOOL_FAKE_CUDA_EXEC=1          run kernels on the host emulation
 *                                    of the CUDA execution model (cuemu)
 *   KVPOOL_FAKE_CUDA_LOG=PATH        one line per launch, VMM call and
 *                                    32-bit memset, and per device-to-host
 *                                    copy with the FNV-1a hash of its bytes
 *                                    (two runs that read back the same
 *                                    results log the same hashes)
 *   CUEMU_ORDER=forward|reverse|random:SEED  the order of the emulated
 *                                    threads and blocks (cuemu.h) and of
 *                                    the streams' deferred work (below)
 * Work queued on streams is deferred until a synchronisation (see
 * "streams: deferred work").
 * Device memory (cuMemGetInfo) is this process's: an allocation counts
 * while the process holds a handle of it (created or imported) or a
 * descriptor exported from it, as the driver frees an allocation only
 * once every mapping, handle and shareable handle of it is gone; the log
 * says "free ID BYTES" when that happens here, "linger ID BYTES" when a
 * released handle's memory stays for an exported descriptor.  The memory
 * itself (a memfd) lives while any process holds such a descriptor, so
 * another process that imports it sees the bytes.
 * Not modelled: timing, concurrency between streams within one piece of
 * work, peer access, several processes sharing one device's memory
 * budget (each counts what it holds).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvpool_cuda.h"
#include "kvkern_cuda_abi.h"
#include "cudafake.h"
#include "cuemu_launch.h"

#define API __attribute__((visibility("default")))

/* marks the library as the test double (kernels/cuda_drv.c looks) */
API const int kvpool_cudafake_version = 1;

#define MAX_DEV 4
#define GRAN (2UL << 20)

/* ---- state ---- */

struct work;

struct stream {
	struct stream *next;
	struct ctx *ctx;
	unsigned int flags;	/* CU_STREAM_NON_BLOCKING or 0 */
	int legacy;		/* the context's NULL stream */
	struct work *head, *tail;
	uint64_t queued, done;	/* sequence numbers of its work */
};

struct ctx {
	int dev;
	int refs;
	struct stream legacy;
};

/*
 * Device memory is at addresses the host cannot touch: every allocation
 * (a memfd) is mapped twice, at its device address with PROT_NONE, where
 * a host dereference faults, and at a host view the double's copies,
 * memsets and checks use.  The device addresses open (with the mapping's
 * access) only while an emulated kernel runs.
 */
struct dalloc {			/* cuMemAlloc */
	struct dalloc *next;
	uintptr_t ptr;
	size_t size;
	void *map;		/* the device range, with a guard page */
	size_t map_size;
	uint8_t *host;		/* the host view of ptr */
	void *hmap;
	size_t hmap_size;
	size_t body;		/* bytes of the memfd both map */
	uint8_t *dbody;		/* where the device range's pages start */
	struct ctx *ctx;
};

struct halloc {			/* cuMemAllocHost */
	struct halloc *next;
	void *ptr;
	size_t size;
	struct ctx *ctx;
};

struct hreg {			/* cuMemHostRegister */
	struct hreg *next;
	uintptr_t ptr;
	size_t size;
	struct ctx *ctx;
};

struct handle {			/* cuMemCreate / import */
	struct handle *next;
	unsigned long long id;
	int fd;
	size_t size;
	CUmemAllocationProp prop;
	int maps;
	int released;
	int imported;
	dev_t sdev;		/* the memfd's inode: the allocation */
	ino_t ino;
	int counted;		/* its size is in F.mem_used */
};

/* an allocation whose handles are all gone, held by exported descriptors */
struct linger {
	struct linger *next;
	unsigned long long id;	/* its last handle */
	dev_t sdev;
	ino_t ino;
	size_t size;
};

struct resv {			/* cuMemAddressReserve */
	struct resv *next;
	uintptr_t ptr;
	size_t size;
	void *map;
	size_t map_size;
};

struct mapping {		/* cuMemMap */
	struct mapping *next;
	uintptr_t ptr;
	size_t size;
	struct handle *h;
	int access;		/* CU_MEM_ACCESS_FLAGS_PROT_* */
	uint8_t *host;		/* the host view of ptr */
};

struct module {
	struct module *next;
	struct ctx *ctx;
	int loaded;
	struct func *funcs;
};

struct func {
	struct func *next;
	struct module *mod;
	const struct cudafake_kernel *k;
	int max_dyn;		/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
};

struct event {
	struct event *next;
	struct ctx *ctx;
	unsigned int flags;
	int recorded;		/* cuEventRecord was called */
	struct stream *rec_s;	/* its last record: this stream's work */
	uint64_t rec_seq;	/* number rec_seq */
	double t;		/* when that record ran */
};

/* the work queued on a stream, run at a synchronisation (see below) */
enum { W_LAUNCH, W_HTOD, W_DTOH, W_DTOD, W_MEMSET8, W_MEMSET32, W_EVENT };

struct dep {
	struct stream *s;
	uint64_t seq;
};

struct work {
	struct work *next;
	int kind;
	uint64_t seq;
	const char *fn;
	struct dep *deps;	/* work of other streams that must run first */
	int ndeps;
	/* W_LAUNCH */
	const struct func *f;
	void *prm;
	unsigned int g[3], b[3], smem;
	/* copies and memsets */
	uint64_t dst, src;
	void *hdst;
	const void *hsrc;
	void *staged;		/* a pageable source, copied at the call */
	size_t n;
	uint32_t v;
	/* W_EVENT */
	struct event *ev;
};

static struct {
	pthread_mutex_t lock;
	int inited;
	int env_read;
	int arch;		/* 80 or 90 */
	int ndev;
	size_t mem_total, mem_used;
	int driver;
	int no_posix_fd;	/* KVPOOL_FAKE_CUDA_POSIX_FD=0 */
	size_t gran_rec;	/* KVPOOL_FAKE_CUDA_GRAN_REC */
	int kept_fds;		/* KVPOOL_FAKE_CUDA_KEPT_FDS=1 */
	CUresult init_result;
	int exec;
	FILE *log;
	struct ctx prim[MAX_DEV];
	struct dalloc *allocs;
	struct halloc *hosts;
	struct hreg *hregs;
	struct handle *handles;
	struct linger *lingers;
	struct resv *resvs;
	struct mapping *maps;
	struct module *mods;
	struct stream *streams;
	struct event *events;
	unsigned long long next_handle;
	unsigned long launches;
} F = { .lock = PTHREAD_MUTEX_INITIALIZER };

static __thread struct ctx *cur_ctx;

static void sync_ctx(struct ctx *c);
static void reap(void);

struct fail {
	char fn[64];
	unsigned long at, calls;
	int plus;
	CUresult code;
};
static struct fail fails[16];
static int nfails;

static const struct {
	int sms, cc_minor;
	int optin, smem_sm, threads_sm, blocks_sm;
	int l2;
	const char *name;
} arch_props[2] = {
	{ 108, 0, 166912, 167936, 2048, 32, 40 << 20,
	  "kvpool fake CUDA device (sm_80, A100-like)" },
	{ 132, 0, 232448, 233472, 2048, 32, 50 << 20,
	  "kvpool fake CUDA device (sm_90, H200-like)" },
};

#define AP (arch_props[F.arch == 80 ? 0 : 1])

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	va_list ap;

	if (!F.log)
		return;
	va_start(ap, fmt);
	vfprintf(F.log, fmt, ap);
	va_end(ap);
	fputc('\n', F.log);
	fflush(F.log);
}

static void violation(const char *fn, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 2, 3)));
static void violation(const char *fn, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cudafake: VIOLATION: %s: %s\n", fn, buf);
	logf_("VIOLATION %s: %s", fn, buf);
	abort();
}

static void read_env(void)
{
	const char *s;
	char *copy, *tok, *save;

	if (F.env_read)
		return;
	F.env_read = 1;
	s = getenv("KVPOOL_FAKE_CUDA_ARCH");
	F.arch = s && atoi(s) == 80 ? 80 : 90;
	s = getenv("KVPOOL_FAKE_CUDA_DEVICES");
	F.ndev = s ? atoi(s) : 1;
	if (F.ndev < 0 || F.ndev > MAX_DEV)
		F.ndev = 1;
	s = getenv("KVPOOL_FAKE_CUDA_MEM");
	F.mem_total = s ? strtoull(s, NULL, 0) : (1ULL << 30);
	s = getenv("KVPOOL_FAKE_CUDA_DRIVER");
	F.driver = s ? atoi(s) : 12080;
	s = getenv("KVPOOL_FAKE_CUDA_GRAN_REC");
	F.gran_rec = s ? strtoull(s, NULL, 0) : GRAN;
	if (!F.gran_rec || F.gran_rec % GRAN) {
		fprintf(stderr, "cudafake: KVPOOL_FAKE_CUDA_GRAN_REC=%s is not a "
			"multiple of %lu\n", s, GRAN);
		abort();
	}
	s = getenv("KVPOOL_FAKE_CUDA_KEPT_FDS");
	F.kept_fds = s && atoi(s) > 0;
	s = getenv("KVPOOL_FAKE_CUDA_POSIX_FD");
	F.no_posix_fd = s && !atoi(s);
	s = getenv("KVPOOL_FAKE_CUDA_INIT");
	F.init_result = s ? (CUresult)atoi(s) : CUDA_SUCCESS;
	s = getenv("KVPOOL_FAKE_CUDA_EXEC");
	F.exec = s && atoi(s) > 0;
	s = getenv("KVPOOL_FAKE_CUDA_LOG");
	if (s && *s)
		F.log = fopen(s, "a");
	s = getenv("KVPOOL_FAKE_CUDA_FAIL");
	if (s && *s && (copy = strdup(s))) {
		for (tok = strtok_r(copy, ",", &save); tok && nfails < 16;
		     tok = strtok_r(NULL, ",", &save)) {
			struct fail *f = &fails[nfails];
			char *eq = strchr(tok, '='), *end;

			if (!eq)
				continue;
			*eq = 0;
			snprintf(f->fn, sizeof(f->fn), "%s", tok);
			f->at = strtoul(eq + 1, &end, 10);
			f->plus = *end == '+';
			if (*end == '+')
				end++;
			f->code = *end == ':' ? (CUresult)atoi(end + 1) :
				  CUDA_ERROR_OUT_OF_MEMORY;
			nfails++;
		}
		free(copy);
	}
}

/* an injected failure for this call of fn, or CUDA_SUCCESS */
static CUresult injected(const char *fn)
{
	int i;

	for (i = 0; i < nfails; i++) {
		struct fail *f = &fails[i];

		if (strcmp(f->fn, fn))
			continue;
		f->calls++;
		if (f->calls == f->at || (f->plus && f->calls > f->at)) {
			logf_("inject %s call %lu -> %d", fn, f->calls,
			      (int)f->code);
			return f->code;
		}
	}
	return CUDA_SUCCESS;
}

#define ENTER(fn) \
	const char *const fname = fn; \
	CUresult inj_; \
	pthread_mutex_lock(&F.lock); \
	read_env(); \
	if (!F.inited) \
		violation(fname, "called before cuInit (CUDA_ERROR_NOT_INITIALIZED)"); \
	inj_ = injected(fname); \
	if (inj_ != CUDA_SUCCESS) { \
		pthread_mutex_unlock(&F.lock); \
		return inj_; \
	}
#define LEAVE(r) do { pthread_mutex_unlock(&F.lock); return (r); } while (0)
#define NEED_CTX() \
	do { \
		if (!cur_ctx) \
			violation(fname, "no current context " \
				  "(CUDA_ERROR_INVALID_CONTEXT)"); \
		if (cur_ctx->refs <= 0) \
			violation(fname, "the current context was released " \
				  "(CUDA_ERROR_CONTEXT_IS_DESTROYED)"); \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- device memory lookups ---- */

static struct dalloc *find_alloc(uintptr_t p)
{
	struct dalloc *a;

	for (a = F.allocs; a; a = a->next)
		if (p >= a->ptr && p < a->ptr + a->size)
			return a;
	return NULL;
}

static struct mapping *find_map(uintptr_t p)
{
	struct mapping *m;

	for (m = F.maps; m; m = m->next)
		if (p >= m->ptr && p < m->ptr + m->size)
			return m;
	return NULL;
}

static struct resv *find_resv(uintptr_t p)
{
	struct resv *r;

	for (r = F.resvs; r; r = r->next)
		if (p >= r->ptr && p < r->ptr + r->size)
			return r;
	return NULL;
}

static int is_device_ptr(uintptr_t p)
{
	return find_alloc(p) || find_resv(p);
}

/*
 * [p, p + n) must be live device memory the current context may use:
 * one cuMemAlloc allocation, or consecutive mappings with access (write
 * access when write).
 */
static void check_range(const char *fn, const char *what, uint64_t p,
			uint64_t n, int write)
{
	uint64_t at, end = p + n;

	if (!n)
		return;
	if (!p)
		violation(fn, "%s: NULL device address", what);
	if (end < p)
		violation(fn, "%s: range wraps", what);
	{
		struct dalloc *a = find_alloc(p);

		if (a) {
			if (end > a->ptr + a->size)
				violation(fn, "%s: [%#llx, +%llu) runs %llu bytes "
					  "past the allocation of %zu bytes",
					  what, (unsigned long long)p,
					  (unsigned long long)n,
					  (unsigned long long)(end - a->ptr -
							       a->size), a->size);
			return;
		}
	}
	for (at = p; at < end;) {
		struct mapping *m = find_map(at);

		if (!m) {
			if (find_resv(at))
				violation(fn, "%s: %#llx is reserved but not "
					  "mapped", what, (unsigned long long)at);
			violation(fn, "%s: %#llx is not device memory (range "
				  "[%#llx, +%llu))", what,
				  (unsigned long long)at, (unsigned long long)p,
				  (unsigned long long)n);
		}
		if (m->access == CU_MEM_ACCESS_FLAGS_PROT_NONE)
			violation(fn, "%s: %#llx is mapped but cuMemSetAccess "
				  "was never called for it", what,
				  (unsigned long long)at);
		if (write && m->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			violation(fn, "%s: %#llx is mapped read-only", what,
				  (unsigned long long)at);
		at = m->ptr + m->size;
	}
}

/* The host view of device address p and how many bytes follow it in
 * the same allocation or mapping (0 and NULL: not device memory). */
static uint8_t *dev_seg(uint64_t p, size_t *len)
{
	struct dalloc *a = find_alloc(p);
	struct mapping *m;

	if (a) {
		*len = a->ptr + a->size - p;
		return a->host + (p - a->ptr);
	}
	m = find_map(p);
	if (m) {
		*len = m->ptr + m->size - p;
		return m->host + (p - m->ptr);
	}
	*len = 0;
	return NULL;
}

/* host <-> device bytes through the host views, piece by piece:
 * to_dev copies host into [p, +n), else [p, +n) into host */
static void dev_copy(uint64_t p, void *host, size_t n, int to_dev)
{
	uint8_t *b = host;

	while (n) {
		size_t len;
		uint8_t *h = dev_seg(p, &len);

		if (!h)
			violation("cudafake", "internal: %#llx is not device "
				  "memory", (unsigned long long)p);
		if (len > n)
			len = n;
		if (to_dev)
			memcpy(h, b, len);
		else
			memcpy(b, h, len);
		p += len;
		b += len;
		n -= len;
	}
}

static uint32_t dev_u32(uint64_t p)
{
	uint32_t v;

	dev_copy(p, &v, 4, 0);
	return v;
}

/* While an emulated kernel runs, the device addresses hold their memory
 * (open != 0), else they fault. */
static void dev_open(int open)
{
	struct dalloc *a;
	struct mapping *m;

	for (a = F.allocs; a; a = a->next)
		mprotect(a->dbody, a->body, open ? PROT_READ | PROT_WRITE :
						   PROT_NONE);
	for (m = F.maps; m; m = m->next)
		mprotect((void *)m->ptr, m->size, !open ? PROT_NONE :
			 m->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ?
			 PROT_READ | PROT_WRITE :
			 m->access == CU_MEM_ACCESS_FLAGS_PROT_READ ?
			 PROT_READ : PROT_NONE);
}

static void check_host(const char *fn, const void *p, size_t n)
{
	if (n && !p)
		violation(fn, "NULL host pointer");
	if (n && is_device_ptr((uintptr_t)p))
		violation(fn, "host pointer %p is a device address", p);
}

/* ---- init, devices, contexts ---- */

API CUresult cuInit(unsigned int flags)
{
	pthread_mutex_lock(&F.lock);
	read_env();
	if (flags)
		violation("cuInit", "flags must be 0");
	if (F.init_result != CUDA_SUCCESS) {
		pthread_mutex_unlock(&F.lock);
		return F.init_result;
	}
	if (!F.ndev) {
		pthread_mutex_unlock(&F.lock);
		return CUDA_ERROR_NO_DEVICE;
	}
	F.inited = 1;
	pthread_mutex_unlock(&F.lock);
	return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
	pthread_mutex_lock(&F.lock);
	read_env();
	if (!v)
		violation("cuDriverGetVersion", "NULL argument");
	*v = F.driver;
	pthread_mutex_unlock(&F.lock);
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	ENTER("cuDeviceGetCount");
	if (!n)
		violation(fname, "NULL argument");
	*n = F.ndev;
	LEAVE(CUDA_SUCCESS);
}

static void check_dev(const char *fn, CUdevice d)
{
	if (d < 0 || d >= F.ndev)
		violation(fn, "device %d does not exist (CUDA_ERROR_INVALID_DEVICE)",
			  d);
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	ENTER("cuDeviceGet");
	if (!d)
		violation(fname, "NULL argument");
	check_dev(fname, ordinal);
	*d = ordinal;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	ENTER("cuDeviceGetName");
	check_dev(fname, d);
	if (!name || len <= 0)
		violation(fname, "bad buffer");
	snprintf(name, (size_t)len, "%s", AP.name);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	ENTER("cuDeviceGetAttribute");
	check_dev(fname, d);
	if (!v)
		violation(fname, "NULL argument");
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = AP.sms; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = AP.l2; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		*v = AP.threads_sm; break;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = F.arch / 10; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = AP.cc_minor; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		*v = AP.smem_sm; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
		*v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		*v = AP.optin; break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*v = 1; break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*v = !F.no_posix_fd; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
		*v = AP.blocks_sm; break;
	default:
		violation(fname, "attribute %d is not one kvpool_cuda.h names",
			  (int)a);
	}
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
	ENTER("cuDeviceTotalMem");
	check_dev(fname, d);
	*bytes = F.mem_total;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRetain");
	check_dev(fname, d);
	if (!pctx)
		violation(fname, "NULL argument");
	F.prim[d].dev = d;
	F.prim[d].legacy.ctx = &F.prim[d];
	F.prim[d].legacy.legacy = 1;
	F.prim[d].refs++;
	*pctx = (CUcontext)&F.prim[d];
	LEAVE(CUDA_SUCCESS);
}

static void leaks_of(struct ctx *c, const char *when);

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRelease");
	check_dev(fname, d);
	if (F.prim[d].refs <= 0)
		violation(fname, "device %d's primary context is not retained",
			  d);
	if (F.prim[d].refs == 1)
		sync_ctx(&F.prim[d]);
	if (--F.prim[d].refs == 0)
		leaks_of(&F.prim[d], "when its last reference was released");
	LEAVE(CUDA_SUCCESS);
}

static struct ctx *as_ctx(const char *fn, CUcontext c)
{
	int i;

	for (i = 0; i < MAX_DEV; i++)
		if ((CUcontext)&F.prim[i] == c) {
			if (F.prim[i].refs <= 0)
				violation(fn, "context of device %d is not "
					  "retained", i);
			return &F.prim[i];
		}
	violation(fn, "%p is not a context (CUDA_ERROR_INVALID_CONTEXT)",
		  (void *)c);
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	ENTER("cuCtxSetCurrent");
	cur_ctx = c ? as_ctx(fname, c) : NULL;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuCtxGetCurrent(CUcontext *c)
{
	ENTER("cuCtxGetCurrent");
	*c = (CUcontext)cur_ctx;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuCtxSynchronize(void)
{
	ENTER("cuCtxSynchronize");
	NEED_CTX();
	sync_ctx(cur_ctx);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
	ENTER("cuCtxGetDevice");
	NEED_CTX();
	*d = cur_ctx->dev;
	LEAVE(CUDA_SUCCESS);
}

/* ---- plain memory ---- */

API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
	ENTER("cuMemGetInfo");
	NEED_CTX();
	if (!free_b || !total_b)
		violation(fname, "NULL argument");
	reap();
	*total_b = F.mem_total;
	*free_b = F.mem_used < F.mem_total ? F.mem_total - F.mem_used : 0;
	LEAVE(CUDA_SUCCESS);
}

/* a memfd of size bytes mapped at a fresh range of len bytes whose last
 * page is a guard, the memfd's pages ending at it; NULL on failure */
static uint8_t *view(int fd, size_t body, size_t len, int prot, void **map)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *m = mmap(NULL, len, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint8_t *at;

	if (m == MAP_FAILED)
		return NULL;
	at = m + len - page - body;
	if (mmap(at, body, prot, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		munmap(m, len);
		return NULL;
	}
	*map = m;
	return at;
}

/* a cuMemAlloc allocation ending at a guard page, in both views */
static int guarded(struct dalloc *a, size_t size, size_t align)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t rounded = (size + align - 1) / align * align;
	size_t body = (rounded + page - 1) / page * page;
	size_t len = body + page;
	int fd = memfd_create("cudafake-alloc", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)body))
		goto fail;
	a->dbody = view(fd, body, len, PROT_NONE, &a->map);
	if (!a->dbody)
		goto fail;
	a->host = view(fd, body, len, PROT_READ | PROT_WRITE, &a->hmap);
	if (!a->host) {
		munmap(a->map, len);
		goto fail;
	}
	close(fd);
	a->map_size = a->hmap_size = len;
	a->body = body;
	a->ptr = (uintptr_t)a->dbody + body - rounded;
	a->host += body - rounded;
	return 0;
fail:
	close(fd);
	return -1;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	struct dalloc *a;

	ENTER("cuMemAlloc");
	NEED_CTX();
	if (!p)
		violation(fname, "NULL argument");
	if (!size)
		violation(fname, "size 0 (CUDA_ERROR_INVALID_VALUE)");
	if (size > F.mem_total - F.mem_used)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	a = calloc(1, sizeof(*a));
	if (!a)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	if (guarded(a, size, 256)) {
		free(a);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	a->size = size;
	a->ctx = cur_ctx;
	a->next = F.allocs;
	F.allocs = a;
	F.mem_used += size;
	*p = a->ptr;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	struct dalloc **pp, *a;

	ENTER("cuMemFree");
	NEED_CTX();
	for (pp = &F.allocs; *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == p)
			break;
	if (!*pp)
		violation(fname, "%#llx was not returned by cuMemAlloc (or was "
			  "freed)", (unsigned long long)p);
	a = *pp;
	if (a->ctx != cur_ctx)
		violation(fname, "%#llx belongs to another context",
			  (unsigned long long)p);
	sync_ctx(cur_ctx);
	*pp = a->next;
	F.mem_used -= a->size;
	munmap(a->map, a->map_size);
	munmap(a->hmap, a->hmap_size);
	free(a);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
	struct halloc *h;

	ENTER("cuMemAllocHost");
	NEED_CTX();
	if (!pp || !size)
		violation(fname, "NULL argument or size 0");
	h = calloc(1, sizeof(*h));
	if (!h || posix_memalign(&h->ptr, 4096, size)) {
		free(h);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	h->size = size;
	h->ctx = cur_ctx;
	h->next = F.hosts;
	F.hosts = h;
	*pp = h->ptr;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemFreeHost(void *p)
{
	struct halloc **pp, *h;

	ENTER("cuMemFreeHost");
	NEED_CTX();
	for (pp = &F.hosts; *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == p)
			break;
	if (!*pp)
		violation(fname, "%p was not returned by cuMemAllocHost", p);
	sync_ctx(cur_ctx);
	h = *pp;
	*pp = h->next;
	free(h->ptr);
	free(h);
	LEAVE(CUDA_SUCCESS);
}

/*
 * Page-locking of the caller's memory: a range not overlapping another
 * registration (else CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, as the
 * driver does), unregistered by its start address before the context
 * goes.  The double remembers the range only: host memory is already
 * what its copies use.
 */
API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	uintptr_t a = (uintptr_t)p;
	struct hreg *r;

	ENTER("cuMemHostRegister");
	NEED_CTX();
	if (!p || !size)
		violation(fname, "NULL pointer or size 0 "
			  "(CUDA_ERROR_INVALID_VALUE)");
	if (flags & ~0x0fU)
		violation(fname, "unknown flags %#x", flags);
	for (r = F.hregs; r; r = r->next)
		if (a < r->ptr + r->size && r->ptr < a + size)
			LEAVE(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	r = calloc(1, sizeof(*r));
	if (!r)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	r->ptr = a;
	r->size = size;
	r->ctx = cur_ctx;
	r->next = F.hregs;
	F.hregs = r;
	logf_("hostreg %#lx %zu", (unsigned long)a, size);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemHostUnregister(void *p)
{
	struct hreg **pp, *r;

	ENTER("cuMemHostUnregister");
	NEED_CTX();
	for (pp = &F.hregs; *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == (uintptr_t)p)
			break;
	if (!*pp)
		LEAVE(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	r = *pp;
	*pp = r->next;
	logf_("hostunreg %#lx", (unsigned long)r->ptr);
	free(r);
	LEAVE(CUDA_SUCCESS);
}

static struct stream *find_stream(const char *fn, CUstream s)
{
	struct stream *st;

	if (!s)
		return NULL;
	for (st = F.streams; st; st = st->next)
		if ((CUstream)st == s) {
			if (st->ctx != cur_ctx)
				violation(fn, "stream %p belongs to another "
					  "context", (void *)s);
			return st;
		}
	violation(fn, "%p is not a live stream (CUDA_ERROR_INVALID_HANDLE)",
		  (void *)s);
}

/*
 * ---- streams: deferred work ----
 *
 * Work queued on a stream (launches, async copies and memsets, event
 * records) runs only when something waits for it: cuStreamSynchronize,
 * cuEventSynchronize, cuCtxSynchronize, a copy to pageable host memory,
 * work of the legacy stream queued behind it, the stream's destruction,
 * cuMemFree (the driver waits for the device there too) and the release
 * of the context.  Each stream's work runs in its order; the legacy (NULL)
 * stream's work waits for the work queued before it on every blocking
 * stream and theirs for the legacy stream's (CU_STREAM_NON_BLOCKING
 * streams for neither).  Which other streams' work runs at a
 * synchronisation follows CUEMU_ORDER: forward runs only what the wait
 * needs; reverse first runs all the other streams' work; random:SEED runs
 * the other streams' work interleaved at random.  A missing
 * synchronisation shows as stale data read back, or as a violation when
 * the work finally runs on memory unmapped or freed meanwhile (its ranges
 * are checked again when it runs).
 */
static void footprint(const struct func *f, const void *prm,
		      unsigned int gx, unsigned int gy, unsigned int smem);

static struct stream *stream_of(const char *fn, CUstream s)
{
	struct stream *st = find_stream(fn, s);

	return st ? st : &cur_ctx->legacy;
}

static int pending(const struct stream *s)
{
	return s->done < s->queued;
}

static struct work *new_work(const char *fn, int kind, struct stream *s)
{
	struct work *w = calloc(1, sizeof(*w));
	struct stream *o;
	int n = 0;

	if (!w)
		violation(fn, "out of host memory for queued work");
	w->fn = fn;
	w->kind = kind;
	if (s->legacy) {
		for (o = F.streams; o; o = o->next)
			n += o->ctx == s->ctx && pending(o) &&
			     !(o->flags & CU_STREAM_NON_BLOCKING);
	} else if (!(s->flags & CU_STREAM_NON_BLOCKING) &&
		   pending(&s->ctx->legacy)) {
		n = 1;
	}
	if (n) {
		w->deps = calloc((size_t)n, sizeof(*w->deps));
		if (!w->deps)
			violation(fn, "out of host memory for queued work");
		if (s->legacy) {
			for (o = F.streams; o; o = o->next)
				if (o->ctx == s->ctx && pending(o) &&
				    !(o->flags & CU_STREAM_NON_BLOCKING))
					w->deps[w->ndeps++] =
						(struct dep){ o, o->queued };
		} else {
			w->deps[w->ndeps++] = (struct dep){ &s->ctx->legacy,
							    s->ctx->legacy.queued };
		}
	}
	w->seq = ++s->queued;
	if (s->tail)
		s->tail->next = w;
	else
		s->head = w;
	s->tail = w;
	return w;
}

static uint64_t fnv1a(const void *p, size_t n);

/* device to device: piece by piece, through a bounce buffer */
static void dev_dtod(uint64_t dst, uint64_t src, size_t n)
{
	size_t at = 0, len;
	uint8_t *d, *sv;
	void *tmp;

	/* overlapping ranges (undefined for the driver) as memmove */
	if (dst < src + n && src < dst + n) {
		tmp = malloc(n);
		if (!tmp)
			violation("cuMemcpyDtoD", "out of host memory");
		dev_copy(src, tmp, n, 0);
		dev_copy(dst, tmp, n, 1);
		free(tmp);
		return;
	}
	while (at < n) {
		size_t dl, sl;

		d = dev_seg(dst + at, &dl);
		sv = dev_seg(src + at, &sl);
		len = n - at;
		len = len < dl ? len : dl;
		len = len < sl ? len : sl;
		memcpy(d, sv, len);
		at += len;
	}
}

/* n bytes of v's low byte (unit 1) or 32-bit words (unit 4) */
static void dev_fill(uint64_t p, size_t n, int unit, uint32_t v)
{
	while (n) {
		size_t len, i;
		uint8_t *h = dev_seg(p, &len);

		if (len > n)
			len = n;
		if (unit == 1)
			memset(h, (int)(v & 0xff), len);
		else
			for (i = 0; i + 4 <= len; i += 4)
				memcpy(h + i, &v, 4);
		p += len;
		n -= len;
	}
}

static void run_work(struct work *w)
{
	const char *fn = w->fn;

	switch (w->kind) {
	case W_LAUNCH:
		footprint(w->f, w->prm, w->g[0], w->g[1], w->smem);
		if (F.exec) {
			const struct cuemu_kernel *e;

			for (e = cuemu_kernels; e->name; e++)
				if (!strcmp(e->name, w->f->k->name))
					break;
			cuemu_set_sm(F.arch);
			dev_open(1);
			if (cuemu_launch(e->name, e->call, w->prm, w->g[0],
					 w->g[1], w->g[2], w->b[0], w->b[1],
					 w->b[2], w->smem))
				violation(fn, "%s: out of host memory for the "
					  "emulation", w->f->k->name);
			dev_open(0);
		}
		break;
	case W_HTOD:
		check_range(fn, "destination", w->dst, w->n, 1);
		dev_copy(w->dst, w->staged ? w->staged : (void *)w->hsrc, w->n, 1);
		break;
	case W_DTOH:
		check_range(fn, "source", w->src, w->n, 0);
		dev_copy(w->src, w->hdst, w->n, 0);
		if (F.log)
			logf_("dtoh %zu %016llx", w->n,
			      (unsigned long long)fnv1a(w->hdst, w->n));
		break;
	case W_DTOD:
		check_range(fn, "source", w->src, w->n, 0);
		check_range(fn, "destination", w->dst, w->n, 1);
		dev_dtod(w->dst, w->src, w->n);
		break;
	case W_MEMSET8:
		check_range(fn, "destination", w->dst, w->n, 1);
		dev_fill(w->dst, w->n, 1, w->v);
		break;
	case W_MEMSET32: {
		check_range(fn, "destination", w->dst, (uint64_t)w->n * 4, 1);
		dev_fill(w->dst, w->n * 4, 4, w->v);
		break;
	}
	case W_EVENT:
		w->ev->t = now_ms();
		break;
	}
}

static void drain_to(struct stream *s, uint64_t seq);

/* the first work of s, after the work of other streams it waits for */
static void run_one(struct stream *s)
{
	struct work *w = s->head;
	int i;

	for (i = 0; i < w->ndeps; i++)
		if (w->deps[i].s)
			drain_to(w->deps[i].s, w->deps[i].seq);
	run_work(w);
	s->head = w->next;
	if (!s->head)
		s->tail = NULL;
	s->done = w->seq;
	free(w->deps);
	free(w->prm);
	free(w->staged);
	free(w);
}

static void drain_to(struct stream *s, uint64_t seq)
{
	while (s->done < seq)
		run_one(s);
}

/* the streams of c with work queued, the legacy stream first */
static int pending_streams(struct ctx *c, struct stream **v, int max)
{
	struct stream *o;
	int n = 0;

	if (pending(&c->legacy))
		v[n++] = &c->legacy;
	for (o = F.streams; o && n < max; o = o->next)
		if (o->ctx == c && pending(o))
			v[n++] = o;
	return n;
}

#define MAX_PENDING 64

/* a wait for s's work up to seq, in CUEMU_ORDER's manner */
static void sync_to(struct stream *s, uint64_t seq)
{
	struct stream *v[MAX_PENDING];
	int order = cuemu_order(), n, i;

	if (order == 1) {
		n = pending_streams(s->ctx, v, MAX_PENDING);
		for (i = n - 1; i >= 0; i--)
			if (v[i] != s)
				drain_to(v[i], v[i]->queued);
	}
	while (s->done < seq) {
		if (order == 2 && (cuemu_rand() & 1)) {
			n = pending_streams(s->ctx, v, MAX_PENDING);
			if (n) {
				i = (int)(cuemu_rand() % (unsigned int)n);
				if (v[i] != s)
					run_one(v[i]);
				continue;
			}
		}
		run_one(s);
	}
}

/* all of c's work: forward in stream order, reverse backwards, random
 * interleaved */
static void sync_ctx(struct ctx *c)
{
	struct stream *v[MAX_PENDING];
	int order = cuemu_order(), n;

	while ((n = pending_streams(c, v, MAX_PENDING))) {
		struct stream *s = v[order == 0 ? 0 : order == 1 ? n - 1 :
				     (int)(cuemu_rand() % (unsigned int)n)];

		if (order == 2)
			run_one(s);
		else
			drain_to(s, s->queued);
	}
}

/* s goes: nothing may name it (its work has run) */
static void forget_stream(struct stream *s)
{
	struct stream *o;
	struct event *e;
	struct work *w;
	int i, d;

	for (o = F.streams; o; o = o->next)
		for (w = o->head; w; w = w->next)
			for (i = 0; i < w->ndeps; i++)
				if (w->deps[i].s == s)
					w->deps[i].s = NULL;
	for (d = 0; d < MAX_DEV; d++)
		for (w = F.prim[d].legacy.head; w; w = w->next)
			for (i = 0; i < w->ndeps; i++)
				if (w->deps[i].s == s)
					w->deps[i].s = NULL;
	for (e = F.events; e; e = e->next)
		if (e->rec_s == s)
			e->rec_s = NULL;
}

/* a host range cuMemAllocHost returned or cuMemHostRegister locked */
static int is_pinned(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	struct halloc *h;
	struct hreg *r;

	for (h = F.hosts; h; h = h->next)
		if (a >= (uintptr_t)h->ptr && a + n <= (uintptr_t)h->ptr + h->size)
			return 1;
	for (r = F.hregs; r; r = r->next)
		if (a >= r->ptr && a + n <= r->ptr + r->size)
			return 1;
	return 0;
}

/* a host-to-device copy: a pageable source is read now (the driver
 * stages it), a page-locked one when the copy runs */
static struct work *q_htod(const char *fn, struct stream *s, CUdeviceptr dst,
			   const void *src, size_t n)
{
	struct work *w;

	check_range(fn, "destination", dst, n, 1);
	check_host(fn, src, n);
	w = new_work(fn, W_HTOD, s);
	w->dst = dst;
	w->n = n;
	if (is_pinned(src, n)) {
		w->hsrc = src;
	} else {
		w->staged = malloc(n ? n : 1);
		if (!w->staged)
			violation(fn, "out of host memory for staging");
		memcpy(w->staged, src, n);
	}
	return w;
}

/* a device-to-host copy: one to pageable memory is done on return */
static void q_dtoh(const char *fn, struct stream *s, void *dst,
		   CUdeviceptr src, size_t n, int sync)
{
	struct work *w;

	check_range(fn, "source", src, n, 0);
	check_host(fn, dst, n);
	w = new_work(fn, W_DTOH, s);
	w->src = src;
	w->hdst = dst;
	w->n = n;
	if (sync || !is_pinned(dst, n))
		sync_to(s, w->seq);
}

static void q_dtod(const char *fn, struct stream *s, CUdeviceptr dst,
		   CUdeviceptr src, size_t n)
{
	struct work *w;

	check_range(fn, "source", src, n, 0);
	check_range(fn, "destination", dst, n, 1);
	w = new_work(fn, W_DTOD, s);
	w->src = src;
	w->dst = dst;
	w->n = n;
}

static uint64_t fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--)
		h = (h ^ *b++) * 0x100000001b3ull;
	return h;
}

/* The synchronous copies are work of the legacy stream: from pageable
 * memory the call returns once the source is staged, from page-locked
 * memory once the copy is done; to the host once it is done; device to
 * device and memsets without waiting (the driver API's "API
 * synchronization behavior"). */
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	struct work *w;

	ENTER("cuMemcpyHtoD");
	NEED_CTX();
	w = q_htod(fname, &cur_ctx->legacy, dst, src, n);
	if (w->hsrc)
		sync_to(&cur_ctx->legacy, w->seq);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	ENTER("cuMemcpyDtoH");
	NEED_CTX();
	q_dtoh(fname, &cur_ctx->legacy, dst, src, n, 1);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	ENTER("cuMemcpyDtoD");
	NEED_CTX();
	q_dtod(fname, &cur_ctx->legacy, dst, src, n);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n,
				  CUstream s)
{
	ENTER("cuMemcpyHtoDAsync");
	NEED_CTX();
	q_htod(fname, stream_of(fname, s), dst, src, n);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n,
				  CUstream s)
{
	ENTER("cuMemcpyDtoHAsync");
	NEED_CTX();
	q_dtoh(fname, stream_of(fname, s), dst, src, n, 0);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n,
				  CUstream s)
{
	ENTER("cuMemcpyDtoDAsync");
	NEED_CTX();
	q_dtod(fname, stream_of(fname, s), dst, src, n);
	LEAVE(CUDA_SUCCESS);
}

static void q_memset8(const char *fn, struct stream *s, CUdeviceptr dst,
		      unsigned char v, size_t n)
{
	struct work *w;

	check_range(fn, "destination", dst, n, 1);
	w = new_work(fn, W_MEMSET8, s);
	w->dst = dst;
	w->v = v;
	w->n = n;
}

API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	ENTER("cuMemsetD8");
	NEED_CTX();
	q_memset8(fname, &cur_ctx->legacy, dst, v, n);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n,
			     CUstream s)
{
	ENTER("cuMemsetD8Async");
	NEED_CTX();
	q_memset8(fname, stream_of(fname, s), dst, v, n);
	LEAVE(CUDA_SUCCESS);
}

/* 32-bit words; the destination must be 4-byte aligned. */
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n,
			      CUstream s)
{
	struct stream *st;
	struct work *w;

	ENTER("cuMemsetD32Async");
	NEED_CTX();
	st = stream_of(fname, s);
	if (dst % 4)
		violation(fname, "destination %#llx is not 4-byte aligned "
			  "(CUDA_ERROR_INVALID_VALUE)", (unsigned long long)dst);
	if (n > SIZE_MAX / 4)
		violation(fname, "%zu words overflow the address space", n);
	check_range(fname, "destination", dst, (uint64_t)n * 4, 1);
	w = new_work(fname, W_MEMSET32, st);
	w->dst = dst;
	w->v = v;
	w->n = n;
	logf_("memset32 %#llx %zu", (unsigned long long)dst, n * 4);
	LEAVE(CUDA_SUCCESS);
}

/* ---- virtual memory management ---- */

static void check_prop(const char *fn, const CUmemAllocationProp *p)
{
	static const unsigned char zero[4];

	if (!p)
		violation(fn, "NULL properties");
	if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		violation(fn, "prop.type %d, must be CU_MEM_ALLOCATION_TYPE_PINNED",
			  (int)p->type);
	if (p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		violation(fn, "prop.location.type %d is not a device",
			  (int)p->location.type);
	check_dev(fn, p->location.id);
	if ((unsigned int)p->requestedHandleTypes &
	    ~(unsigned int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		violation(fn, "requestedHandleTypes %#x: only POSIX file "
			  "descriptors exist on Linux",
			  (unsigned int)p->requestedHandleTypes);
	if (p->win32HandleMetaData)
		violation(fn, "win32HandleMetaData must be NULL on Linux");
	if (p->allocFlags.compressionType || p->allocFlags.gpuDirectRDMACapable ||
	    p->allocFlags.usage || memcmp(p->allocFlags.reserved, zero, 4))
		violation(fn, "allocFlags not zero (garbage in the properties?)");
}

API CUresult cuMemGetAllocationGranularity(size_t *g,
		const CUmemAllocationProp *prop,
		CUmemAllocationGranularity_flags option)
{
	ENTER("cuMemGetAllocationGranularity");
	if (!g)
		violation(fname, "NULL argument");
	check_prop(fname, prop);
	if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		violation(fname, "option %d", (int)option);
	*g = option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? F.gran_rec : GRAN;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
				 CUdeviceptr addr, unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), al;
	struct resv *r;
	uint8_t *m;

	ENTER("cuMemAddressReserve");
	if (!p)
		violation(fname, "NULL argument");
	if (!size || size % page || addr % page)
		violation(fname, "size %zu / address %#llx not a multiple of "
			  "the host page size", size, (unsigned long long)addr);
	if (align & (align - 1))
		violation(fname, "alignment %zu is not a power of two", align);
	if (flags)
		violation(fname, "flags must be 0");
	if (size % GRAN)
		violation(fname, "size %zu is not a multiple of the allocation "
			  "granularity %lu: nothing could be mapped at its end",
			  size, GRAN);
	al = align > GRAN ? align : GRAN;
	m = mmap(NULL, size + al, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	r = calloc(1, sizeof(*r));
	if (!r) {
		munmap(m, size + al);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	r->map = m;
	r->map_size = size + al;
	r->ptr = ((uintptr_t)m + al - 1) / al * al;
	r->size = size;
	r->next = F.resvs;
	F.resvs = r;
	*p = r->ptr;
	logf_("reserve %#lx %zu", (unsigned long)r->ptr, size);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	struct resv **pp, *r;
	struct mapping *m;

	ENTER("cuMemAddressFree");
	for (pp = &F.resvs; *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == p)
			break;
	if (!*pp)
		violation(fname, "%#llx was not returned by cuMemAddressReserve",
			  (unsigned long long)p);
	r = *pp;
	if (r->size != size)
		violation(fname, "size %zu, the reservation has %zu", size,
			  r->size);
	for (m = F.maps; m; m = m->next)
		if (m->ptr >= r->ptr && m->ptr < r->ptr + r->size)
			violation(fname, "[%#lx, +%zu) is still mapped (unmap "
				  "before freeing the reservation)",
				  (unsigned long)m->ptr, m->size);
	*pp = r->next;
	munmap(r->map, r->map_size);
	free(r);
	logf_("unreserve %#llx", (unsigned long long)p);
	LEAVE(CUDA_SUCCESS);
}

static struct handle *find_handle(const char *fn, CUmemGenericAllocationHandle id)
{
	struct handle *h;

	for (h = F.handles; h; h = h->next)
		if (h->id == id && !h->released)
			return h;
	violation(fn, "handle %llu is not a live allocation handle", id);
}

/* whether a descriptor of this process other than skip refers to the
 * memfd (dev, ino) */
static int inode_open(dev_t sdev, ino_t ino, int skip)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int found = 0;

	if (!dir)
		return 1;	/* cannot tell: the memory stays counted */
	while (!found && (e = readdir(dir))) {
		struct stat st;
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == dirfd(dir) || fd == skip)
			continue;
		found = !fstat(fd, &st) && st.st_dev == sdev &&
			st.st_ino == ino;
	}
	closedir(dir);
	return found;
}

static struct handle *handle_of_inode(dev_t sdev, ino_t ino,
				      const struct handle *skip)
{
	struct handle *h;

	for (h = F.handles; h; h = h->next)
		if (h != skip && h->sdev == sdev && h->ino == ino)
			return h;
	return NULL;
}

static int inode_counted(dev_t sdev, ino_t ino)
{
	struct linger *l;

	for (l = F.lingers; l; l = l->next)
		if (l->sdev == sdev && l->ino == ino)
			return 1;
	return handle_of_inode(sdev, ino, NULL) != NULL;
}

/* A handle released and unmapped goes; its allocation stays while another
 * handle or an exported descriptor of this process refers to it. */
static void handle_put(struct handle *h)
{
	struct handle **pp, *o;
	struct linger *l;

	if (!h->released || h->maps)
		return;
	for (pp = &F.handles; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	if (h->counted) {
		o = handle_of_inode(h->sdev, h->ino, h);
		if (o) {
			o->counted = 1;
		} else if (inode_open(h->sdev, h->ino, h->fd) &&
			   (l = calloc(1, sizeof(*l)))) {
			l->id = h->id;
			l->sdev = h->sdev;
			l->ino = h->ino;
			l->size = h->size;
			l->next = F.lingers;
			F.lingers = l;
			logf_("linger %llu %zu", h->id, h->size);
		} else {
			F.mem_used -= h->size;
			logf_("free %llu %zu", h->id, h->size);
		}
	}
	close(h->fd);
	free(h);
}

/* free the lingering allocations no descriptor refers to any more */
static void reap(void)
{
	struct linger **pp = &F.lingers, *l;

	while ((l = *pp)) {
		if (inode_open(l->sdev, l->ino, -1)) {
			pp = &l->next;
			continue;
		}
		*pp = l->next;
		F.mem_used -= l->size;
		logf_("free %llu %zu", l->id, l->size);
		free(l);
	}
}

/* the memfd's inode into h, 0 or -1 */
static int handle_inode(struct handle *h)
{
	struct stat st;

	if (fstat(h->fd, &st))
		return -1;
	h->sdev = st.st_dev;
	h->ino = st.st_ino;
	return 0;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size,
			 const CUmemAllocationProp *prop,
			 unsigned long long flags)
{
	struct handle *h;
	char name[64];

	ENTER("cuMemCreate");
	if (!out)
		violation(fname, "NULL argument");
	check_prop(fname, prop);
	if (flags)
		violation(fname, "flags must be 0");
	if (!size || size % GRAN)
		violation(fname, "size %zu is not a multiple of the minimum "
			  "granularity %lu (CUDA_ERROR_INVALID_VALUE)", size, GRAN);
	if (F.no_posix_fd && prop->requestedHandleTypes) {
		logf_("create of an exportable allocation: not supported");
		LEAVE(CUDA_ERROR_NOT_SUPPORTED);
	}
	reap();
	if (F.mem_used > F.mem_total || size > F.mem_total - F.mem_used)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	h = calloc(1, sizeof(*h));
	if (!h)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	snprintf(name, sizeof(name), "cudafake:dev=%d:types=%u",
		 prop->location.id, (unsigned int)prop->requestedHandleTypes);
	h->fd = memfd_create(name, MFD_CLOEXEC);
	if (h->fd < 0 || ftruncate(h->fd, (off_t)size) || handle_inode(h)) {
		if (h->fd >= 0)
			close(h->fd);
		free(h);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	h->id = ++F.next_handle;
	h->size = size;
	h->prop = *prop;
	h->counted = 1;
	h->next = F.handles;
	F.handles = h;
	F.mem_used += size;
	*out = h->id;
	logf_("create %llu %zu", h->id, size);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle id)
{
	struct handle *h;

	ENTER("cuMemRelease");
	h = find_handle(fname, id);
	h->released = 1;
	logf_("release %llu", id);
	handle_put(h);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset,
		      CUmemGenericAllocationHandle id, unsigned long long flags)
{
	struct handle *h;
	struct resv *r;
	struct mapping *m;

	ENTER("cuMemMap");
	h = find_handle(fname, id);
	if (flags)
		violation(fname, "flags must be 0");
	if (offset)
		violation(fname, "offset %zu: must be 0 (\"currently must be "
			  "zero\")", offset);
	if (!size || p % GRAN || size % GRAN)
		violation(fname, "address %#llx / size %zu not multiples of the "
			  "minimum granularity %lu", (unsigned long long)p,
			  size, GRAN);
	if (offset + size > h->size) {
		/* an imported allocation's size is the exporter's to tell:
		 * the driver refuses, it is not the caller's broken rule */
		if (h->imported) {
			logf_("map of %zu bytes of a %zu-byte import refused",
			      size, h->size);
			LEAVE(CUDA_ERROR_INVALID_VALUE);
		}
		violation(fname, "maps %zu bytes of a %zu-byte allocation", size,
			  h->size);
	}
	r = find_resv(p);
	if (!r || p + size > r->ptr + r->size)
		violation(fname, "[%#llx, +%zu) is not inside one reservation",
			  (unsigned long long)p, size);
	for (m = F.maps; m; m = m->next)
		if (p < m->ptr + m->size && m->ptr < p + size)
			violation(fname, "[%#llx, +%zu) overlaps the mapping at "
				  "%#lx", (unsigned long long)p, size,
				  (unsigned long)m->ptr);
	if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
		 h->fd, 0) == MAP_FAILED)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	m = calloc(1, sizeof(*m));
	if (!m)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	/* the host view, accessible as cuMemSetAccess says */
	m->host = mmap(NULL, size, PROT_NONE, MAP_SHARED, h->fd, 0);
	if (m->host == MAP_FAILED) {
		free(m);
		mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_PRIVATE |
		     MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	m->ptr = p;
	m->size = size;
	m->h = h;
	m->access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	m->next = F.maps;
	F.maps = m;
	h->maps++;
	logf_("map %#llx %zu handle %llu", (unsigned long long)p, size, id);
	LEAVE(CUDA_SUCCESS);
}

/* the mappings exactly covering [p, p + size), or a violation */
static int covered(const char *fn, uintptr_t p, size_t size, int need_all)
{
	uintptr_t at = p;
	int n = 0;

	while (at < p + size) {
		struct mapping *m = find_map(at);

		if (!m) {
			if (!need_all)
				return n;
			violation(fn, "%#lx in [%#lx, +%zu) is not mapped",
				  (unsigned long)at, (unsigned long)p, size);
		}
		if (m->ptr != at)
			violation(fn, "[%#lx, +%zu) starts inside the mapping "
				  "[%#lx, +%zu): only whole mappings",
				  (unsigned long)p, size, (unsigned long)m->ptr,
				  m->size);
		if (m->ptr + m->size > p + size)
			violation(fn, "[%#lx, +%zu) ends inside the mapping "
				  "[%#lx, +%zu): only whole mappings",
				  (unsigned long)p, size, (unsigned long)m->ptr,
				  m->size);
		at = m->ptr + m->size;
		n++;
	}
	return n;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	struct mapping **pp;

	ENTER("cuMemUnmap");
	covered(fname, p, size, 1);
	for (pp = &F.maps; *pp;) {
		struct mapping *m = *pp;

		if (m->ptr >= p && m->ptr < p + size) {
			struct handle *h = m->h;

			*pp = m->next;
			mmap((void *)m->ptr, m->size, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
			     MAP_NORESERVE, -1, 0);
			munmap(m->host, m->size);
			free(m);
			h->maps--;
			handle_put(h);
		} else {
			pp = &m->next;
		}
	}
	logf_("unmap %#llx %zu", (unsigned long long)p, size);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size,
			    const CUmemAccessDesc *desc, size_t count)
{
	uintptr_t at;
	int prot;

	ENTER("cuMemSetAccess");
	if (!desc || count != 1)
		violation(fname, "%zu descriptors (one device here)", count);
	if (desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		violation(fname, "location type %d", (int)desc->location.type);
	check_dev(fname, desc->location.id);
	if (desc->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
	    desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
	    desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		violation(fname, "flags %d", (int)desc->flags);
	covered(fname, p, size, 1);
	prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ?
	       PROT_READ | PROT_WRITE :
	       desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ :
	       PROT_NONE;
	for (at = p; at < p + size;) {
		struct mapping *m = find_map(at);

		mprotect(m->host, m->size, prot);
		m->access = desc->flags;
		at = m->ptr + m->size;
	}
	logf_("access %#llx %zu %d", (unsigned long long)p, size,
	      (int)desc->flags);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemExportToShareableHandle(void *out,
		CUmemGenericAllocationHandle id, CUmemAllocationHandleType type,
		unsigned long long flags)
{
	struct handle *h;
	int fd;

	ENTER("cuMemExportToShareableHandle");
	h = find_handle(fname, id);
	if (!out || flags)
		violation(fname, "NULL output or flags not 0");
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		violation(fname, "handle type %d", (int)type);
	if (!((unsigned int)h->prop.requestedHandleTypes & (unsigned int)type))
		violation(fname, "handle %llu was not created with "
			  "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in "
			  "requestedHandleTypes", id);
	fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	*(int *)out = fd;
	logf_("export %llu fd %d", id, fd);
	LEAVE(CUDA_SUCCESS);
}

/* the properties a fake memfd carries in its name, or -1 */
static int fake_fd(int fd, int *dev, unsigned int *types, size_t *size)
{
	char link[64], target[256];
	struct stat st;
	ssize_t n;

	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode))
		return -1;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return -1;
	target[n] = 0;
	if (sscanf(target, "/memfd:cudafake:dev=%d:types=%u", dev, types) != 2)
		return -1;
	*size = (size_t)st.st_size;
	return 0;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out,
		void *os_handle, CUmemAllocationHandleType type)
{
	int fd = (int)(intptr_t)os_handle, dev;
	unsigned int types;
	struct handle *h;
	size_t size;

	ENTER("cuMemImportFromShareableHandle");
	if (!out)
		violation(fname, "NULL output");
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		violation(fname, "handle type %d", (int)type);
	/* a bad descriptor is the caller's input, not a precondition */
	if (fake_fd(fd, &dev, &types, &size) || dev >= F.ndev ||
	    !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) || !size) {
		logf_("import fd %d: not an exported allocation", fd);
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (h->fd < 0 || handle_inode(h)) {
		if (h->fd >= 0)
			close(h->fd);
		free(h);
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	}
	/* memory another process created is this one's while it holds it */
	reap();
	h->counted = !inode_counted(h->sdev, h->ino);
	if (h->counted)
		F.mem_used += size;
	h->id = ++F.next_handle;
	h->size = size;
	h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	h->prop.requestedHandleTypes = (CUmemAllocationHandleType)types;
	h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	h->prop.location.id = dev;
	h->imported = 1;
	h->next = F.handles;
	F.handles = h;
	*out = h->id;
	logf_("import fd %d -> %llu %zu", fd, h->id, size);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
		CUmemGenericAllocationHandle id)
{
	struct handle *h;

	ENTER("cuMemGetAllocationPropertiesFromHandle");
	h = find_handle(fname, id);
	if (!prop)
		violation(fname, "NULL output");
	*prop = h->prop;
	LEAVE(CUDA_SUCCESS);
}

/* ---- modules ---- */

/* POSIX cksum: CRC-32 (0x04C11DB7, MSB first) of the bytes, then of the
 * length, complemented */
static unsigned long posix_cksum(const uint8_t *p, size_t n)
{
	uint32_t crc = 0;
	size_t i, len = n;
	int b;

	for (i = 0; i < n; i++) {
		crc ^= (uint32_t)p[i] << 24;
		for (b = 0; b < 8; b++)
			crc = crc & 0x80000000u ? (crc << 1) ^ 0x04C11DB7u :
			      crc << 1;
	}
	for (; len; len >>= 8) {
		crc ^= (uint32_t)(len & 0xff) << 24;
		for (b = 0; b < 8; b++)
			crc = crc & 0x80000000u ? (crc << 1) ^ 0x04C11DB7u :
			      crc << 1;
	}
	return ~crc & 0xffffffffu;
}

API CUresult cuModuleLoadData(CUmodule *out, const void *image)
{
	const uint8_t *img = image;
	struct module *m;

	ENTER("cuModuleLoadData");
	NEED_CTX();
	if (!out || !image)
		violation(fname, "NULL argument");
	if (img[0] == 0x50 && img[1] == 0xed && img[2] == 0x55 && img[3] == 0xba) {
		/* fatbin: magic, u16 version, u16 header size, u64 size */
		uint16_t hs;
		uint64_t fs;

		memcpy(&hs, img + 6, 2);
		memcpy(&fs, img + 8, 8);
		if (hs + fs != cudafake_fatbin_size ||
		    posix_cksum(img, hs + fs) != cudafake_fatbin_cksum) {
			fprintf(stderr, "cudafake: cuModuleLoadData: the image "
				"is not the fatbin the kernel table was built "
				"from (rebuild)\n");
			LEAVE(CUDA_ERROR_INVALID_IMAGE);
		}
	} else if (!strstr(image, ".version") || !strstr(image, ".target") ||
		   !strstr(image, ".entry kvk_attn_bf16_d128")) {
		LEAVE(CUDA_ERROR_INVALID_IMAGE);
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	m->ctx = cur_ctx;
	m->loaded = 1;
	m->next = F.mods;
	F.mods = m;
	*out = (CUmodule)m;
	LEAVE(CUDA_SUCCESS);
}

static struct module *find_module(const char *fn, CUmodule mod)
{
	struct module *m;

	for (m = F.mods; m; m = m->next)
		if ((CUmodule)m == mod && m->loaded) {
			if (m->ctx != cur_ctx)
				violation(fn, "module of another context");
			return m;
		}
	violation(fn, "%p is not a loaded module", (void *)mod);
}

API CUresult cuModuleUnload(CUmodule mod)
{
	struct module *m, **pp;

	ENTER("cuModuleUnload");
	NEED_CTX();
	m = find_module(fname, mod);
	for (pp = &F.mods; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	while (m->funcs) {
		struct func *f = m->funcs;

		m->funcs = f->next;
		free(f);
	}
	free(m);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuModuleGetFunction(CUfunction *out, CUmodule mod,
				 const char *name)
{
	const struct cudafake_kernel *k;
	struct module *m;
	struct func *f;

	ENTER("cuModuleGetFunction");
	NEED_CTX();
	m = find_module(fname, mod);
	if (!out || !name)
		violation(fname, "NULL argument");
	for (k = cudafake_kernels; k->name; k++)
		if (!strcmp(k->name, name))
			break;
	if (!k->name)
		LEAVE(CUDA_ERROR_NOT_FOUND);
	for (f = m->funcs; f; f = f->next)
		if (f->k == k) {
			*out = (CUfunction)f;
			LEAVE(CUDA_SUCCESS);
		}
	f = calloc(1, sizeof(*f));
	if (!f)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	f->mod = m;
	f->k = k;
	f->max_dyn = 49152 - k->arch[F.arch == 80 ? 0 : 1].smem;
	f->next = m->funcs;
	m->funcs = f;
	*out = (CUfunction)f;
	LEAVE(CUDA_SUCCESS);
}

static struct func *find_func(const char *fn, CUfunction fu)
{
	struct module *m;
	struct func *f;

	for (m = F.mods; m; m = m->next)
		for (f = m->funcs; f; f = f->next)
			if ((CUfunction)f == fu) {
				if (m->ctx != cur_ctx)
					violation(fn, "function of another "
						  "context");
				return f;
			}
	violation(fn, "%p is not a function of a loaded module "
		  "(CUDA_ERROR_INVALID_HANDLE)", (void *)fu);
}

#define KA(f) ((f)->k->arch[F.arch == 80 ? 0 : 1])

API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction fu)
{
	struct func *f;

	ENTER("cuFuncGetAttribute");
	NEED_CTX();
	f = find_func(fname, fu);
	if (!v)
		violation(fname, "NULL argument");
	switch (a) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
		int regs = KA(f).regs, lim = f->k->max_threads;
		int by_regs = regs ? 65536 / (((regs * 32 + 255) / 256) * 256) * 32 :
			      1024;

		*v = by_regs < lim ? by_regs : lim;
		break;
	}
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = KA(f).smem; break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = KA(f).local; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = KA(f).regs; break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = F.arch; break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = F.arch; break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*v = f->max_dyn; break;
	default:
		violation(fname, "attribute %d", (int)a);
	}
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuFuncSetAttribute(CUfunction fu, CUfunction_attribute a, int v)
{
	struct func *f;

	ENTER("cuFuncSetAttribute");
	NEED_CTX();
	f = find_func(fname, fu);
	if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
		violation(fname, "attribute %d is not settable here", (int)a);
	if (v < 0 || v + KA(f).smem > AP.optin)
		violation(fname, "%s: %d bytes of dynamic shared memory + %d "
			  "static > the device's opt-in maximum %d "
			  "(CUDA_ERROR_INVALID_VALUE)", f->k->name, v,
			  KA(f).smem, AP.optin);
	f->max_dyn = v;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuFuncGetParamInfo(CUfunction fu, size_t index, size_t *off,
				size_t *size)
{
	struct func *f;

	ENTER("cuFuncGetParamInfo");
	f = find_func(fname, fu);
	if (!off)
		violation(fname, "NULL offset");
	if ((int)index >= f->k->nparams)
		LEAVE(CUDA_ERROR_INVALID_VALUE);
	*off = 0;
	if (size)
		*size = (size_t)f->k->param_bytes;
	LEAVE(CUDA_SUCCESS);
}

/* blocks of `threads` threads with `smem` dynamic bytes per SM */
static int occupancy(const struct func *f, int threads, size_t smem)
{
	int warps = (threads + 31) / 32, regs = KA(f).regs;
	int per_warp = ((regs * 32 + 255) / 256) * 256;
	int by_regs = per_warp ? 65536 / per_warp / warps : 32;
	int by_thr = AP.threads_sm / (warps * 32);
	size_t sm = smem + (size_t)KA(f).smem + 1024;
	int by_smem = (int)((size_t)AP.smem_sm / ((sm + 127) / 128 * 128));
	int n = by_regs;

	n = by_thr < n ? by_thr : n;
	n = by_smem < n ? by_smem : n;
	return n < AP.blocks_sm ? n : AP.blocks_sm;
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n,
		CUfunction fu, int threads, size_t smem)
{
	struct func *f;

	ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
	NEED_CTX();
	f = find_func(fname, fu);
	if (!n || threads <= 0)
		violation(fname, "bad arguments");
	*n = threads > f->k->max_threads ? 0 : occupancy(f, threads, smem);
	LEAVE(CUDA_SUCCESS);
}

/* ---- launches ---- */

static void footprint(const struct func *f, const void *prm,
		      unsigned int gx, unsigned int gy, unsigned int smem)
{
	const char *n = f->k->name, *fn = "cuLaunchKernel";

	if (!strncmp(n, "kvk_attn_", 9)) {
		const struct kvk_cu_attn *p = prm;
		const struct kvk_cu_layout *l = &p->l;
		uint32_t D = l->head_dim, nq1 = p->n_q ? p->n_q : 1, b, j;
		uint64_t qb = (uint64_t)p->batch * nq1 * p->q_heads * D * 4;
		uint32_t need = kvk_cu_attn_smem(l->dtype, D, l->row_bytes);
		char want[32];

		snprintf(want, sizeof(want), "kvk_attn_%s_d%u",
			 l->dtype == 1 ? "bf16" : l->dtype == 2 ? "fp8" :
			 l->dtype == 3 ? "int8" : "int4", D);
		if (strcmp(want, n))
			violation(fn, "%s launched for a %s layout", n, want);
		if (!p->batch)
			violation(fn, "%s: empty batch", n);
		if ((uint64_t)gx != (uint64_t)p->batch * l->kv_heads * p->row_blocks ||
		    gy != p->nsplit)
			violation(fn, "%s: grid %ux%u, the block says %llu x %u", n,
				  gx, gy, (unsigned long long)p->batch *
				  l->kv_heads * p->row_blocks, p->nsplit);
		if (p->row_blocks * KVK_CU_ROWS < nq1 * p->group ||
		    p->q_heads != p->group * l->kv_heads)
			violation(fn, "%s: %u row blocks for %u rows", n,
				  p->row_blocks, nq1 * p->group);
		if (smem < need)
			violation(fn, "%s: %u bytes of dynamic shared memory, the "
				  "kernel carves %u", n, smem, need);
		if (!p->chunk || p->chunk % KVK_CU_TILE ||
		    p->chunk > (uint64_t)(KVK_CU_TAB - 2) * l->tokens_per_block)
			violation(fn, "%s: %u positions per split", n, p->chunk);
		if (l->block_bytes % 16 || p->pool % 16)
			violation(fn, "%s: blocks not 16-byte aligned", n);
		check_range(fn, "ctx", p->ctx, (uint64_t)p->batch * 4, 0);
		check_range(fn, "tables", p->tables,
			    (uint64_t)p->batch * p->mbps * 4, 0);
		check_range(fn, "q", p->q, qb, 0);
		check_range(fn, "out", p->out, qb, 1);
		if (p->nsplit > 1)
			check_range(fn, "parts", p->parts, (uint64_t)gx *
				    p->nsplit * KVK_CU_ROWS * (D + 2) * 4, 1);
		for (b = 0; b < p->batch; b++) {
			uint32_t cb = dev_u32(p->ctx + 4ULL * b);
			uint32_t nb = (cb + l->tokens_per_block - 1) /
				      l->tokens_per_block;

			if ((uint64_t)p->nsplit * p->chunk < cb)
				violation(fn, "%s: %u splits of %u positions do "
					  "not cover a context of %u", n,
					  p->nsplit, p->chunk, cb);
			if (nb > p->mbps)
				violation(fn, "%s: context %u needs %u blocks, "
					  "the table has %u", n, cb, nb,
					  p->mbps);
			for (j = 0; j < nb; j++)
				check_range(fn, "pool block", p->pool +
					    (uint64_t)dev_u32(p->tables + 4 *
					    ((uint64_t)b * p->mbps + j)) *
					    l->block_bytes, l->block_bytes, 0);
		}
	} else if (!strcmp(n, "kvk_merge")) {
		const struct kvk_cu_merge *p = prm;
		uint32_t nq1 = p->n_q ? p->n_q : 1;

		check_range(fn, "parts", p->parts, (uint64_t)gx * p->nsplit *
			    KVK_CU_ROWS * (p->head_dim + 2) * 4, 0);
		check_range(fn, "out", p->out, (uint64_t)p->batch * nq1 *
			    p->q_heads * p->head_dim * 4, 1);
	} else if (!strcmp(n, "kvk_write")) {
		const struct kvk_cu_write *p = prm;
		uint64_t row = (uint64_t)p->l.kv_heads * p->l.head_dim *
			       (p->bf16_in ? 2 : 4);
		uint32_t g;

		if ((uint64_t)gx != (uint64_t)p->ngroups * 2 * p->l.kv_heads)
			violation(fn, "kvk_write: grid %u for %u groups", gx,
				  p->ngroups);
		check_range(fn, "grp_block", p->grp_block, p->ngroups * 4ULL, 0);
		check_range(fn, "grp_start", p->grp_start,
			    (p->ngroups + 1) * 4ULL, 0);
		check_range(fn, "tok_idx", p->tok_idx, p->ntok * 4ULL, 0);
		check_range(fn, "slots", p->slots, p->ntok * 4ULL, 0);
		check_range(fn, "k", p->k, p->ntok * row, 0);
		check_range(fn, "v", p->v, p->ntok * row, 0);
		for (g = 0; g < p->ngroups; g++)
			check_range(fn, "pool block", p->pool + (uint64_t)dev_u32(p->grp_block + 4ULL * g) *
				    p->l.block_bytes, p->l.block_bytes, 1);
	} else if (!strcmp(n, "kvk_read")) {
		const struct kvk_cu_read *p = prm;
		uint64_t row = (uint64_t)p->l.kv_heads * p->l.head_dim * 4;
		uint32_t t;

		if ((uint64_t)gx != (uint64_t)p->ntok * 2 * p->l.kv_heads)
			violation(fn, "kvk_read: grid %u for %u tokens", gx,
				  p->ntok);
		check_range(fn, "blocks", p->blocks, p->ntok * 4ULL, 0);
		check_range(fn, "slots", p->slots, p->ntok * 4ULL, 0);
		if (p->k)
			check_range(fn, "k", p->k, p->ntok * row, 1);
		if (p->v)
			check_range(fn, "v", p->v, p->ntok * row, 1);
		for (t = 0; t < p->ntok; t++)
			check_range(fn, "pool block", p->pool + (uint64_t)dev_u32(p->blocks + 4ULL * t) *
				    p->l.block_bytes, p->l.block_bytes, 0);
	} else if (!strcmp(n, "kvk_read_bw")) {
		const struct kvk_cu_bw *p = prm;

		check_range(fn, "src", p->src, p->bytes, 0);
		check_range(fn, "sink", p->sink, gx * 4ULL, 1);
	} else if (!strcmp(n, "kvk_selftest")) {
		const struct kvk_cu_selftest *p = prm;

		check_range(fn, "in", p->in, (448 + 128) * 2, 0);
		check_range(fn, "out", p->out, 32 * KVK_CU_SELFTEST_WORDS * 4, 1);
	}
}

API CUresult cuLaunchKernel(CUfunction fu, unsigned int gx, unsigned int gy,
			    unsigned int gz, unsigned int bx, unsigned int by,
			    unsigned int bz, unsigned int smem, CUstream s,
			    void **params, void **extra)
{
	struct func *f;
	const void *prm = NULL;
	unsigned long long threads = (unsigned long long)bx * by * bz;
	int regs, per_warp;
	struct stream *st;
	struct work *w;

	ENTER("cuLaunchKernel");
	NEED_CTX();
	f = find_func(fname, fu);
	st = stream_of(fname, s);
	if (!gx || !gy || !gz || gx > 0x7fffffffU || gy > 65535 || gz > 65535)
		violation(fname, "%s: grid %ux%ux%u outside 1..2^31-1 x 1..65535 "
			  "x 1..65535", f->k->name, gx, gy, gz);
	if (!bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 ||
	    threads > 1024)
		violation(fname, "%s: block %ux%ux%u outside the limits", f->k->name,
			  bx, by, bz);
	if (threads > (unsigned long long)f->k->max_threads)
		violation(fname, "%s: %llu threads, its launch bounds allow %d "
			  "(CUDA_ERROR_INVALID_VALUE)", f->k->name, threads,
			  f->k->max_threads);
	regs = KA(f).regs;
	per_warp = ((regs * 32 + 255) / 256) * 256;
	if ((unsigned long long)per_warp * ((threads + 31) / 32) > 65536)
		violation(fname, "%s: %llu threads x %d registers exceed the "
			  "register file (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)",
			  f->k->name, threads, regs);
	if ((int)smem > f->max_dyn)
		violation(fname, "%s: %u bytes of dynamic shared memory, the "
			  "function allows %d (set "
			  "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
			  f->k->name, smem, f->max_dyn);
	if ((int)smem + KA(f).smem > AP.optin)
		violation(fname, "%s: shared memory beyond the device", f->k->name);
	if (params && extra)
		violation(fname, "both kernelParams and extra (CUDA_ERROR_"
			  "INVALID_VALUE)");
	if (f->k->nparams) {
		if (params) {
			int i;

			for (i = 0; i < f->k->nparams; i++)
				if (!params[i])
					violation(fname, "%s: kernelParams[%d] "
						  "is NULL", f->k->name, i);
			prm = params[0];
		} else if (extra) {
			const size_t *sz = NULL;
			int i;

			for (i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
				if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
					prm = extra[i + 1];
				else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
					sz = extra[i + 1];
				else
					violation(fname, "unknown extra key %p",
						  extra[i]);
				if (i > 8)
					violation(fname, "extra[] not terminated");
			}
			if (!prm || !sz)
				violation(fname, "%s: extra[] without buffer "
					  "pointer and size", f->k->name);
			if (*sz != (size_t)f->k->param_bytes)
				violation(fname, "%s: parameter buffer of %zu "
					  "bytes, the kernel takes %d", f->k->name,
					  *sz, f->k->param_bytes);
		} else {
			violation(fname, "%s takes parameters, none given",
				  f->k->name);
		}
	}
	if (F.exec) {
		const struct cuemu_kernel *e;

		for (e = cuemu_kernels; e->name; e++)
			if (!strcmp(e->name, f->k->name))
				break;
		if (!e->name)
			violation(fname, "%s has no emulation", f->k->name);
	}
	/* the parameters are copied now, the arrays they name checked (and
	 * the kernel run, with the lock held: one emulated grid at a time)
	 * when the stream's work runs */
	w = new_work(fname, W_LAUNCH, st);
	w->f = f;
	if (prm && f->k->param_bytes > 0) {
		w->prm = malloc((size_t)f->k->param_bytes);
		if (!w->prm)
			violation(fname, "out of host memory");
		memcpy(w->prm, prm, (size_t)f->k->param_bytes);
	}
	w->g[0] = gx;
	w->g[1] = gy;
	w->g[2] = gz;
	w->b[0] = bx;
	w->b[1] = by;
	w->b[2] = bz;
	w->smem = smem;
	F.launches++;
	logf_("launch %s grid %ux%ux%u block %ux%ux%u smem %u", f->k->name, gx,
	      gy, gz, bx, by, bz, smem);
	LEAVE(CUDA_SUCCESS);
}

/* ---- streams and events ---- */

API CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
	struct stream *s;

	ENTER("cuStreamCreate");
	NEED_CTX();
	if (!out || (flags & ~1u))
		violation(fname, "bad arguments");
	s = calloc(1, sizeof(*s));
	if (!s)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	s->ctx = cur_ctx;
	s->flags = flags;
	s->next = F.streams;
	F.streams = s;
	*out = (CUstream)s;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuStreamDestroy_v2(CUstream st)
{
	struct stream **pp, *s;

	ENTER("cuStreamDestroy");
	NEED_CTX();
	s = find_stream(fname, st);
	if (!s)
		violation(fname, "the NULL stream cannot be destroyed");
	/* its work still runs (the driver lets it finish) */
	sync_to(s, s->queued);
	forget_stream(s);
	for (pp = &F.streams; *pp != s; pp = &(*pp)->next)
		;
	*pp = s->next;
	free(s);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuStreamSynchronize(CUstream s)
{
	struct stream *st;

	ENTER("cuStreamSynchronize");
	NEED_CTX();
	st = stream_of(fname, s);
	sync_to(st, st->queued);
	LEAVE(CUDA_SUCCESS);
}

static struct event *find_event(const char *fn, CUevent ev)
{
	struct event *e;

	for (e = F.events; e; e = e->next)
		if ((CUevent)e == ev) {
			if (e->ctx != cur_ctx)
				violation(fn, "event of another context");
			return e;
		}
	violation(fn, "%p is not a live event", (void *)ev);
}

API CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
	struct event *e;

	ENTER("cuEventCreate");
	NEED_CTX();
	if (!out || (flags & ~3u))
		violation(fname, "bad arguments");
	e = calloc(1, sizeof(*e));
	if (!e)
		LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
	e->ctx = cur_ctx;
	e->flags = flags;
	e->next = F.events;
	F.events = e;
	*out = (CUevent)e;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuEventDestroy_v2(CUevent ev)
{
	struct event **pp, *e;

	ENTER("cuEventDestroy");
	NEED_CTX();
	e = find_event(fname, ev);
	/* a pending record completes first (the driver frees it after) */
	if (e->rec_s)
		sync_to(e->rec_s, e->rec_seq);
	for (pp = &F.events; *pp != e; pp = &(*pp)->next)
		;
	*pp = e->next;
	free(e);
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuEventRecord(CUevent ev, CUstream s)
{
	struct event *e;

	ENTER("cuEventRecord");
	NEED_CTX();
	struct stream *st;
	struct work *w;

	e = find_event(fname, ev);
	st = stream_of(fname, s);
	w = new_work(fname, W_EVENT, st);
	w->ev = e;
	e->recorded = 1;
	e->rec_s = st;
	e->rec_seq = w->seq;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuEventSynchronize(CUevent ev)
{
	struct event *e;

	ENTER("cuEventSynchronize");
	NEED_CTX();
	e = find_event(fname, ev);
	if (e->rec_s)
		sync_to(e->rec_s, e->rec_seq);
	LEAVE(CUDA_SUCCESS);
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	struct event *e0, *e1;

	ENTER("cuEventElapsedTime");
	NEED_CTX();
	e0 = find_event(fname, a);
	e1 = find_event(fname, b);
	if (!ms)
		violation(fname, "NULL argument");
	if (!e0->recorded || !e1->recorded)
		violation(fname, "an event was never recorded "
			  "(CUDA_ERROR_INVALID_HANDLE)");
	if ((e0->flags | e1->flags) & CU_EVENT_DISABLE_TIMING)
		violation(fname, "an event was created without timing");
	if ((e0->rec_s && e0->rec_s->done < e0->rec_seq) ||
	    (e1->rec_s && e1->rec_s->done < e1->rec_seq))
		LEAVE(CUDA_ERROR_NOT_READY);
	*ms = (float)(e1->t - e0->t);
	if (*ms <= 0)
		*ms = 1e-3f;
	LEAVE(CUDA_SUCCESS);
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	return elapsed(ms, a, b);
}

API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	return elapsed(ms, a, b);
}

/* ---- errors ---- */

static const struct {
	CUresult r;
	const char *name, *text;
} errs[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
	  "initialization error" },
	{ CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
	  "CUDA driver is a stub library" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
	  "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
	  "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE",
	  "device kernel image is invalid" },
	{ CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
	  "no kernel image is available for execution on the device" },
	{ CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	  "the provided PTX was compiled with an unsupported toolchain." },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
	  "invalid resource handle" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
	  "operation not supported" },
	{ CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	  "system has unsupported display driver / cuda driver combination" },
	{ CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
	  "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	  "forward compatibility was attempted on non supported HW" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static CUresult err_lookup(CUresult r, const char **s, int text)
{
	size_t i;

	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].r == r) {
			*s = text ? errs[i].text : errs[i].name;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorName(CUresult r, const char **s)
{
	return err_lookup(r, s, 0);
}

API CUresult cuGetErrorString(CUresult r, const char **s)
{
	return err_lookup(r, s, 1);
}

/* ---- leaks ---- */

static int nleaks;

static void leak(const char *what, const char *when, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void leak(const char *what, const char *when, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cudafake: VIOLATION: leak %s: %s\n", when, buf);
	logf_("VIOLATION leak %s %s", what, buf);
	nleaks++;
}

static void leaks_of(struct ctx *c, const char *when)
{
	struct dalloc *a;
	struct halloc *h;
	struct hreg *r;
	struct module *m;
	struct stream *s;
	struct event *e;

	for (a = F.allocs; a; a = a->next)
		if (a->ctx == c)
			leak("alloc", when, "cuMemAlloc %zu bytes at %#lx",
			     a->size, (unsigned long)a->ptr);
	for (h = F.hosts; h; h = h->next)
		if (h->ctx == c)
			leak("host", when, "cuMemAllocHost %zu bytes", h->size);
	for (r = F.hregs; r; r = r->next)
		if (r->ctx == c)
			leak("host registration", when,
			     "cuMemHostRegister %zu bytes at %#lx", r->size,
			     (unsigned long)r->ptr);
	for (m = F.mods; m; m = m->next)
		if (m->ctx == c)
			leak("module", when, "a module is still loaded");
	for (s = F.streams; s; s = s->next)
		if (s->ctx == c)
			leak("stream", when, "a stream was never destroyed");
	for (e = F.events; e; e = e->next)
		if (e->ctx == c)
			leak("event", when, "an event was never destroyed");
	if (nleaks) {
		fprintf(stderr, "cudafake: %d leaks %s (device %d)\n", nleaks,
			when, c->dev);
		_exit(97);
	}
}

/* exported descriptors the process still holds (the double's own
 * descriptors are excluded) */
static void fd_leaks(const char *when)
{
	int fd;

	for (fd = 3; fd < 1024; fd++) {
		struct handle *h;
		int dev, own = 0;
		unsigned int types;
		size_t size;

		if (fake_fd(fd, &dev, &types, &size))
			continue;
		for (h = F.handles; h; h = h->next)
			own |= h->fd == fd;
		if (!own && F.kept_fds)
			logf_("kept fd %d %zu", fd, size);
		else if (!own)
			leak("fd", when, "descriptor %d of an exported "
			     "allocation (%zu bytes) was never closed", fd,
			     size);
	}
}

__attribute__((destructor)) static void at_exit(void)
{
	const char *when = "at exit";
	struct handle *h;
	struct resv *r;
	struct mapping *m;
	int d;

	if (!F.inited)
		return;
	reap();
	for (d = 0; d < MAX_DEV; d++)
		if (F.prim[d].refs > 0)
			leak("ctx", when, "device %d's primary context has %d "
			     "references", d, F.prim[d].refs);
	for (m = F.maps; m; m = m->next)
		leak("map", when, "[%#lx, +%zu) is still mapped",
		     (unsigned long)m->ptr, m->size);
	for (h = F.handles; h; h = h->next)
		if (!h->released)
			leak("handle", when, "handle %llu (%zu bytes%s) was "
			     "never released", h->id, h->size,
			     h->imported ? ", imported" : "");
	for (r = F.resvs; r; r = r->next)
		leak("resv", when, "reservation [%#lx, +%zu) was never freed",
		     (unsigned long)r->ptr, r->size);
	for (d = 0; d < MAX_DEV; d++)
		leaks_of(&F.prim[d], when);
	fd_leaks(when);
	while (F.lingers) {	/* kept memory (KVPOOL_FAKE_CUDA_KEPT_FDS) */
		struct linger *l = F.lingers;

		F.lingers = l->next;
		free(l);
	}
	logf_("exit: %lu launches, %d leaks", F.launches, nleaks);
	if (F.log)
		fclose(F.log);
	if (nleaks)
		_exit(97);
}
