// SPDX-License-Identifier: MIT
/*
 * test-cuda-keep - the cuda backend's kept chunks (daemon/keep.h,
 * daemon/cuda_chunks.h) across processes, with the test store of
 * keep_store.c in place of daemon/keep.c:
 *
 *  writer   the backend as kvpoold uses it (init, map the whole pool,
 *           dev_write a pattern into every block, fini) with the store
 *           enabled: every chunk is put; the kept descriptors then go to
 *           this program's first process (the holder) and the writer
 *           exits, so that the descriptors alone hold the memory;
 *  reader   a new process gets them from the holder, maps the pool:
 *           every chunk is taken and imported, none refused, nothing put
 *           again, and every block reads back the writer's bytes; then a
 *           shrink of the whole pool drops every kept descriptor and the
 *           driver reports the memory freed;
 *  refuse   what the store gives back for a chunk but is no chunk of this
 *           pool is refused, dropped and replaced by zeroed memory that is
 *           kept instead: a larger allocation, a smaller one, a descriptor
 *           that is no allocation, one of another device (with two
 *           devices); a right one among them is used as it is;
 *  retry    (the driver test double only, its third cuMemCreate failing)
 *           a map that fails after it took kept chunks back leaves them
 *           kept: the next map takes their bytes back;
 *  nofd     (the driver test double only) a device that cannot export:
 *           the chunks are created as before and nothing is kept.
 *
 * Without arguments it runs writer, reader and refuse as child processes
 * (exec) and holds the descriptors in between; "retry" and "nofd" run
 * alone.  Every process ends with no handle, mapping or descriptor left
 * (the test double's leak check at exit: status 97), but for the
 * writer's kept descriptors when its driver goes (fini): the writer runs
 * with KVPOOL_FAKE_CUDA_KEPT_FDS=1.  With KVPOOL_FAKE_CUDA_LOG=PATH each
 * child logs to PATH.MODE.
 * Exit 0: passed; 1: failed; 77: no libcuda.so.1 or no device.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "tier.h"
#include "keep_store.h"
#include "cuda_drv.h"

#define BLOCK_BYTES	(64u << 10)

static int failed;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		printf("FAIL: " __VA_ARGS__); \
		printf("\n"); \
		failed = 1; \
	} \
} while (0)

static struct kvd D;
static struct cuda_drv drv;	/* this test's own, for cuMemGetInfo */
static CUdevice dev;
static CUcontext ctx;
static uint64_t chunk_bytes;

static uint32_t pattern(uint32_t block, uint32_t word)
{
	uint32_t x = block * 0x9E3779B1u ^ (word + 1) * 0x85EBCA77u;

	x ^= x >> 15;
	x *= 0x2C1B3C6Du;
	x ^= x >> 12;
	return x;
}

/* open the driver and this test's context: 0, or 77 without a device */
static int drv_up(void)
{
	CUresult cr = CUDA_SUCCESS;
	int r = cuda_drv_open(&drv);

	if (r == -ENODEV) {
		printf("SKIP: no libcuda.so.1\n");
		return 77;
	}
	if (r) {
		printf("FAIL: cuda_drv_open: %d\n", r);
		return 1;
	}
	r = cuda_drv_device_open(&drv, 0, &dev, &ctx, &cr);
	if (r) {
		printf("SKIP: no device: %s\n", cuda_drv_strerror(&drv, cr));
		cuda_drv_close(&drv);
		return 77;
	}
	return 0;
}

static void drv_down(void)
{
	cuda_drv_device_close(&drv, dev);
	cuda_drv_close(&drv);
}

static size_t free_mem(void)
{
	size_t f = 0, t = 0;

	drv.cuCtxSetCurrent(ctx);
	drv.cuMemGetInfo(&f, &t);
	return f;
}

/* the backend set up as kvpoold does, for nchunks chunks of two granules */
static int be_up(uint32_t nchunks, uint32_t spares)
{
	uint64_t align = 0;
	int r;

	memset(&D, 0, sizeof(D));
	D.top = &D.pools[0];
	D.npools = 1;
	D.pools[0].d = &D;
	D.o.cuda_device = 0;
	D.o.capacity_set = true;
	D.o.spare_chunks = spares;
	D.o.shrink_delay_ms = 1000;
	D.block_bytes = BLOCK_BYTES;
	r = kvd_backend_cuda.init(&D, &align);
	if (r) {
		printf("FAIL: backend init: %d\n", r);
		return r;
	}
	chunk_bytes = 2 * align;
	if (chunk_bytes % BLOCK_BYTES) {
		printf("FAIL: granularity %llu is not a multiple of 64 KiB\n",
		       (unsigned long long)align);
		kvd_backend_cuda.fini(&D);
		return -EINVAL;
	}
	D.chunk_blocks = (uint32_t)(chunk_bytes / BLOCK_BYTES);
	D.capacity = nchunks * D.chunk_blocks;
	D.pools[0].block_bytes = D.block_bytes;
	D.pools[0].capacity = D.capacity;
	D.pools[0].chunk_blocks = D.chunk_blocks;
	return 0;
}

static int be_map(void)
{
	int r = kvd_backend_cuda.map(&D, 0, D.capacity);

	if (!r)
		D.top->mapped = D.capacity;
	return r;
}

static int be_unmap(void)
{
	int r = kvd_backend_cuda.unmap(&D, 0, D.capacity);

	D.top->mapped = 0;
	return r;
}

/* copy every block to (write) or from (read) buf */
static int be_copy(uint32_t *buf, bool write)
{
	uint32_t n = D.capacity, i;
	void **bufs = calloc(n, sizeof(*bufs));
	uint32_t *blocks = calloc(n, sizeof(*blocks));
	void *st = NULL;
	int r;

	if (!bufs || !blocks) {
		free(bufs);
		free(blocks);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		blocks[i] = i;
		bufs[i] = (char *)buf + (size_t)i * BLOCK_BYTES;
	}
	r = kvd_backend_cuda.io_open(&D, &st);
	if (!r)
		r = write ? kvd_backend_cuda.dev_write(&D, st, blocks,
				(const void *const *)bufs, n) :
			    kvd_backend_cuda.dev_read(&D, st, blocks, bufs, n);
	kvd_backend_cuda.io_close(&D, st);
	free(bufs);
	free(blocks);
	return r;
}

static void fill_pattern(uint32_t *buf, uint32_t from, uint32_t to)
{
	uint32_t words = BLOCK_BYTES / 4, b, w;

	for (b = from; b < to; b++)
		for (w = 0; w < words; w++)
			buf[(size_t)b * words + w] = pattern(b, w);
}

/* blocks [from, to) of buf: the pattern (or zeros): count of bad blocks */
static uint32_t bad_blocks(const uint32_t *buf, uint32_t from, uint32_t to,
			   bool zeros)
{
	uint32_t words = BLOCK_BYTES / 4, b, w, bad = 0;

	for (b = from; b < to; b++)
		for (w = 0; w < words; w++)
			if (buf[(size_t)b * words + w] !=
			    (zeros ? 0 : pattern(b, w))) {
				bad++;
				break;
			}
	return bad;
}

static uint64_t chunk_tag(uint32_t c)
{
	return kvd_keep_tag(0, KVD_KEEP_CHUNK, c);
}

/* ---- writer ---- */

static int writer(int sock)
{
	size_t bytes;
	uint32_t *buf;
	uint32_t c, n = 4;
	int r;

	r = be_up(n, 0);
	if (r)
		return 1;
	bytes = (size_t)D.capacity * BLOCK_BYTES;
	buf = malloc(bytes);
	if (!buf)
		return 1;
	r = be_map();
	CHECK(!r, "writer: map: %d", r);
	CHECK(ks_st.puts == n && ks_count() == n,
	      "writer: %u puts, %u kept, want %u", ks_st.puts, ks_count(), n);
	CHECK(ks_st.misses == n && ks_st.takes == 0,
	      "writer: %u takes found nothing, %u found one (want %u, 0)",
	      ks_st.misses, ks_st.takes, n);
	for (c = 0; c < n; c++)
		CHECK(ks_has(chunk_tag(c)), "writer: chunk %u not kept", c);
	if (!r) {
		memset(buf, 0xff, bytes);
		r = be_copy(buf, false);
		CHECK(!r && !bad_blocks(buf, 0, D.capacity, true),
		      "writer: fresh chunks do not read as zeros (%d)", r);
		fill_pattern(buf, 0, D.capacity);
		r = be_copy(buf, true);
		CHECK(!r, "writer: dev_write: %d", r);
		memset(buf, 0, bytes);
		r = be_copy(buf, false);
		CHECK(!r && !bad_blocks(buf, 0, D.capacity, false),
		      "writer: the pattern does not read back (%d)", r);
	}
	/* kvpoold stops: its handles go, the store's descriptors stay */
	kvd_backend_cuda.fini(&D);
	CHECK(ks_count() == n, "writer: fini dropped kept chunks (%u left)",
	      ks_count());
	r = ks_send(sock);
	CHECK(!r, "writer: sending the kept descriptors: %d", r);
	free(buf);
	printf("writer: %u chunks of %llu bytes written and kept\n", n,
	       (unsigned long long)chunk_bytes);
	return failed;
}

/* ---- reader ---- */

static int reader(int sock)
{
	size_t bytes, f0, f1, f2;
	uint32_t *buf;
	uint32_t n;
	int r, got;

	got = ks_recv(sock);
	if (got <= 0) {
		printf("FAIL: reader: no kept descriptors (%d)\n", got);
		return 1;
	}
	n = (uint32_t)got;
	r = drv_up();
	if (r)
		return r == 77 ? 1 : r;	/* the writer had a device */
	r = be_up(n, 0);
	if (r) {
		drv_down();
		return 1;
	}
	bytes = (size_t)D.capacity * BLOCK_BYTES;
	buf = calloc(1, bytes);
	if (!buf)
		return 1;
	f0 = free_mem();
	r = be_map();
	f1 = free_mem();
	CHECK(!r, "reader: map: %d", r);
	CHECK(ks_st.takes == n && ks_st.misses == 0,
	      "reader: %u chunks taken back, %u missing (want %u, 0)",
	      ks_st.takes, ks_st.misses, n);
	CHECK(ks_st.drops == 0, "reader: %u kept chunks refused", ks_st.drops);
	CHECK(ks_st.puts == 0, "reader: %u chunks put again", ks_st.puts);
	if (!r) {
		uint32_t bad;

		r = be_copy(buf, false);
		bad = bad_blocks(buf, 0, D.capacity, false);
		CHECK(!r && !bad, "reader: %u of %u blocks differ from what "
		      "the writer wrote (%d)", bad, D.capacity, r);
	}
	/* a shrink of the whole pool: every kept descriptor dropped, every
	 * handle released, the memory freed */
	r = be_unmap();
	f2 = free_mem();
	CHECK(!r, "reader: unmap: %d", r);
	CHECK(ks_count() == 0 && ks_st.drops == n,
	      "reader: after the shrink %u still kept, %u dropped (want 0, %u)",
	      ks_count(), ks_st.drops, n);
	printf("reader: free memory %zu before the map, %zu mapped, %zu after "
	       "the shrink (chunks: %llu bytes)\n", f0, f1, f2,
	       (unsigned long long)(n * chunk_bytes));
	if (drv.fake) {
		CHECK(f0 - f1 == n * chunk_bytes,
		      "reader: the map took %zu bytes, want %llu", f0 - f1,
		      (unsigned long long)(n * chunk_bytes));
		CHECK(f2 == f0, "reader: the shrink freed %zd bytes, want %zu",
		      (ssize_t)(f2 - f1), f0 - f1);
	} else {
		CHECK(f2 >= f1 + n * chunk_bytes / 2,
		      "reader: the shrink freed %zd bytes of %llu",
		      (ssize_t)(f2 - f1),
		      (unsigned long long)(n * chunk_bytes));
	}
	kvd_backend_cuda.fini(&D);
	drv_down();
	free(buf);
	if (!failed)
		printf("reader: %u chunks taken back with their bytes, freed "
		       "by the shrink\n", n);
	return failed;
}

/* ---- refuse ---- */

/* size bytes of chunk c's blocks' pattern (c >= 0) or of byte 0xab into
 * allocation h, through a mapping of this test's own */
static CUresult fill(CUmemGenericAllocationHandle h, size_t size, int c)
{
	uint32_t per = (uint32_t)(size / BLOCK_BYTES), words = BLOCK_BYTES / 4;
	CUmemAccessDesc acc;
	CUdeviceptr va;
	CUresult cr;
	uint32_t *b, i, w;

	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = drv.cuMemAddressReserve(&va, size, 0, 0, 0);
	if (cr != CUDA_SUCCESS)
		return cr;
	cr = drv.cuMemMap(va, size, 0, h, 0);
	if (cr != CUDA_SUCCESS)
		goto out_free;
	cr = drv.cuMemSetAccess(va, size, &acc, 1);
	if (cr == CUDA_SUCCESS && c < 0) {
		cr = drv.cuMemsetD8(va, 0xab, size);
	} else if (cr == CUDA_SUCCESS) {
		b = malloc(size);
		if (!b) {
			cr = CUDA_ERROR_OUT_OF_MEMORY;
			goto out_unmap;
		}
		for (i = 0; i < per; i++)
			for (w = 0; w < words; w++)
				b[(size_t)i * words + w] =
					pattern((uint32_t)c * per + i, w);
		cr = drv.cuMemcpyHtoD(va, b, size);
		free(b);
	}
	/* memsets, and copies from pageable memory past its staging, are
	 * asynchronous: done before the unmap */
	if (cr == CUDA_SUCCESS)
		cr = drv.cuCtxSynchronize();
out_unmap:
	drv.cuMemUnmap(va, size);
out_free:
	drv.cuMemAddressFree(va, size);
	return cr;
}

/* an exportable allocation of size bytes on device d, filled (on this
 * test's device) as fill() says, exported and released: its fd, or -1 */
static int allocation(size_t size, int d, int c)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	CUresult cr;
	int fd = -1;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	drv.cuCtxSetCurrent(ctx);
	cr = drv.cuMemCreate(&h, size, &prop, 0);
	if (cr != CUDA_SUCCESS) {
		printf("FAIL: cuMemCreate %zu bytes: %d\n", size, (int)cr);
		return -1;
	}
	if (d == dev)
		cr = fill(h, size, c);
	if (cr == CUDA_SUCCESS)
		cr = drv.cuMemExportToShareableHandle(&fd, h,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	drv.cuMemRelease(h);
	if (cr != CUDA_SUCCESS) {
		printf("FAIL: filling or exporting %zu bytes: %d\n", size,
		       (int)cr);
		return -1;
	}
	return fd;
}

static int refuse(void)
{
	uint32_t n = 5, c, bad, nbad;
	size_t f0, f1, f2, f3;
	uint32_t *buf;
	int r, ndev = 0, fd, want_puts;

	r = drv_up();
	if (r)
		return r;
	drv.cuDeviceGetCount(&ndev);
	r = be_up(n, 0);
	if (r) {
		drv_down();
		return 1;
	}
	buf = calloc((size_t)D.capacity, BLOCK_BYTES);
	if (!buf)
		return 1;
	f0 = free_mem();
	/* 0: larger, 1: smaller, 2: no allocation, 3: another device, 4: a
	 * chunk of this pool with its blocks' pattern */
	r = ks_add(chunk_tag(0), allocation(chunk_bytes + chunk_bytes / 2,
					     dev, -1));
	r = r ? r : ks_add(chunk_tag(1), allocation(chunk_bytes / 2, dev, -1));
	fd = memfd_create("not-an-allocation", MFD_CLOEXEC);
	if (fd >= 0 && ftruncate(fd, (off_t)chunk_bytes))
		r = -errno;
	r = r ? r : ks_add(chunk_tag(2), fd);
	if (ndev > 1)
		r = r ? r : ks_add(chunk_tag(3),
				   allocation(chunk_bytes, 1, -1));
	r = r ? r : ks_add(chunk_tag(4), allocation(chunk_bytes, dev, 4));
	if (r) {
		printf("FAIL: setting up the kept descriptors: %d\n", r);
		return 1;
	}
	nbad = ndev > 1 ? 4 : 3;
	f1 = free_mem();
	r = be_map();
	f2 = free_mem();
	CHECK(!r, "refuse: map: %d", r);
	CHECK(ks_st.takes == nbad + 1, "refuse: %u taken, want %u",
	      ks_st.takes, nbad + 1);
	CHECK(ks_st.drops == nbad, "refuse: %u refused, want %u", ks_st.drops,
	      nbad);
	/* each refused one, and each chunk nothing was kept for, is a loss
	 * that makes a real start drop all kept memory (restart.c) */
	CHECK(ks_lost == n - 1, "refuse: %u losses reported, want %u",
	      ks_lost, n - 1);
	/* the refused ones and chunk 3 when nothing was kept for it */
	want_puts = (int)n - 1;
	CHECK(ks_st.puts == (unsigned int)want_puts,
	      "refuse: %u fresh chunks kept, want %d", ks_st.puts, want_puts);
	for (c = 0; c < n; c++)
		CHECK(ks_has(chunk_tag(c)), "refuse: chunk %u not kept", c);
	if (!r) {
		memset(buf, 0x5a, (size_t)D.capacity * BLOCK_BYTES);
		r = be_copy(buf, false);
		CHECK(!r, "refuse: dev_read: %d", r);
		bad = bad_blocks(buf, 0, 4 * D.chunk_blocks, true);
		CHECK(!bad, "refuse: %u blocks of the replaced chunks are not "
		      "zero", bad);
		bad = bad_blocks(buf, 4 * D.chunk_blocks, 5 * D.chunk_blocks,
				 false);
		CHECK(!bad, "refuse: %u blocks of the right kept chunk lost "
		      "their bytes", bad);
	}
	r = be_unmap();
	f3 = free_mem();
	CHECK(!r && ks_count() == 0, "refuse: unmap %d, %u still kept", r,
	      ks_count());
	printf("refuse: free memory %zu, %zu with the kept descriptors, %zu "
	       "mapped, %zu after the shrink\n", f0, f1, f2, f3);
	if (drv.fake) {
		/* the refused allocations are freed once dropped */
		CHECK(f0 - f2 == n * chunk_bytes, "refuse: mapped %zu bytes "
		      "are held, want %llu", f0 - f2,
		      (unsigned long long)(n * chunk_bytes));
		CHECK(f3 == f0, "refuse: %zd bytes not freed by the shrink",
		      (ssize_t)(f0 - f3));
	} else {
		CHECK(f3 + chunk_bytes >= f0, "refuse: %zd bytes not freed "
		      "by the shrink", (ssize_t)(f0 - f3));
	}
	kvd_backend_cuda.fini(&D);
	drv_down();
	free(buf);
	if (!failed)
		printf("refuse: %u kept descriptors refused and replaced by "
		       "zeroed chunks, the right one used\n", nbad);
	return failed;
}

/* ---- retry ---- */

static int retry(void)
{
	uint32_t *buf, bad;
	int r;

	r = drv_up();
	if (r)
		return r;
	if (!drv.fake) {
		printf("FAIL: retry needs the driver test double (its third "
		       "cuMemCreate failing)\n");
		return 1;
	}
	r = be_up(4, 0);
	if (r) {
		drv_down();
		return 1;
	}
	/* cuMemCreate calls 1 and 2: chunks 0 and 1, kept */
	r = ks_add(chunk_tag(0), allocation(chunk_bytes, dev, 0));
	r = r ? r : ks_add(chunk_tag(1), allocation(chunk_bytes, dev, 1));
	if (r) {
		printf("FAIL: setting up the kept descriptors: %d\n", r);
		return 1;
	}
	/* call 3, chunk 2's, fails: chunks 0 and 1 are undone */
	r = be_map();
	CHECK(r == -ENOMEM, "retry: the first map returned %d, want -ENOMEM",
	      r);
	D.top->mapped = 0;
	CHECK(ks_st.takes == 2 && ks_st.drops == 0 && ks_count() == 2,
	      "retry: after the failed map %u taken, %u dropped, %u kept "
	      "(want 2, 0, 2)", ks_st.takes, ks_st.drops, ks_count());
	r = be_map();
	CHECK(!r, "retry: the second map: %d", r);
	CHECK(ks_st.takes == 4 && ks_st.puts == 2 && ks_count() == 4,
	      "retry: after the second map %u taken, %u put, %u kept "
	      "(want 4, 2, 4)", ks_st.takes, ks_st.puts, ks_count());
	buf = calloc((size_t)D.capacity, BLOCK_BYTES);
	if (buf && !r) {
		r = be_copy(buf, false);
		bad = bad_blocks(buf, 0, 2 * D.chunk_blocks, false);
		CHECK(!r && !bad, "retry: %u blocks of the kept chunks lost "
		      "their bytes (%d)", bad, r);
		bad = bad_blocks(buf, 2 * D.chunk_blocks, D.capacity, true);
		CHECK(!bad, "retry: %u blocks of the fresh chunks not zero",
		      bad);
	}
	be_unmap();
	kvd_backend_cuda.fini(&D);
	drv_down();
	free(buf);
	if (!failed)
		printf("retry: the chunks kept through a failed map came back "
		       "with their bytes\n");
	return failed;
}

/* ---- nofd ---- */

static int nofd(void)
{
	uint32_t *buf;
	int r;

	r = be_up(2, 1);
	if (r)
		return 1;
	r = be_map();
	CHECK(!r, "nofd: map: %d", r);
	CHECK(!ks_st.puts && !ks_st.takes && !ks_st.misses && !ks_count(),
	      "nofd: the store was used (%u puts, %u takes)", ks_st.puts,
	      ks_st.takes + ks_st.misses);
	buf = malloc((size_t)D.capacity * BLOCK_BYTES);
	if (buf && !r) {
		memset(buf, 1, (size_t)D.capacity * BLOCK_BYTES);
		r = be_copy(buf, false);
		CHECK(!r && !bad_blocks(buf, 0, D.capacity, true),
		      "nofd: the chunks do not read as zeros (%d)", r);
	}
	be_unmap();
	kvd_backend_cuda.fini(&D);
	free(buf);
	if (!failed)
		printf("nofd: the chunks are mapped, nothing kept\n");
	return failed;
}

/* ---- the holder ---- */

static int run(const char *self, const char *mode, int sock)
{
	const char *log = getenv("KVPOOL_FAKE_CUDA_LOG");
	char fdarg[16], path[512];
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		if (log && *log) {
			snprintf(path, sizeof(path), "%s.%s", log, mode);
			setenv("KVPOOL_FAKE_CUDA_LOG", path, 1);
		}
		if (!strcmp(mode, "writer"))
			setenv("KVPOOL_FAKE_CUDA_KEPT_FDS", "1", 1);
		snprintf(fdarg, sizeof(fdarg), "%d", sock);
		execl(self, self, mode, fdarg, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int holder(const char *self)
{
	int sv[2], r, got;

	r = drv_up();
	if (r)
		return r;
	drv_down();	/* the holder itself uses no device */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 1;
	r = run(self, "writer", sv[1]);
	if (r) {
		printf("FAIL: the writer exited %d\n", r);
		return 1;
	}
	/* the writer is gone: only these descriptors hold its memory */
	got = ks_recv(sv[0]);
	if (got != 4) {
		printf("FAIL: the writer kept %d chunks, want 4\n", got);
		return 1;
	}
	printf("holder: %d kept descriptors, the writer has exited\n", got);
	r = ks_send(sv[0]);
	if (r) {
		printf("FAIL: sending to the reader: %d\n", r);
		return 1;
	}
	/* the reader has the only references once it runs */
	r = run(self, "reader", sv[1]);
	if (r) {
		printf("FAIL: the reader exited %d\n", r);
		return 1;
	}
	r = run(self, "refuse", -1);
	if (r) {
		printf("FAIL: refuse exited %d\n", r);
		return 1;
	}
	close(sv[0]);
	close(sv[1]);
	printf("PASS: kept chunks across processes\n");
	return 0;
}

int main(int argc, char **argv)
{
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return holder(argv[0]);
	if (!strcmp(argv[1], "writer") && argc > 2)
		r = writer(atoi(argv[2]));
	else if (!strcmp(argv[1], "reader") && argc > 2)
		r = reader(atoi(argv[2]));
	else if (!strcmp(argv[1], "refuse"))
		r = refuse();
	else if (!strcmp(argv[1], "nofd"))
		r = nofd();
	else if (!strcmp(argv[1], "retry"))
		r = retry();
	else {
		fprintf(stderr, "usage: %s [writer FD|reader FD|refuse|retry|"
			"nofd]\n", argv[0]);
		return 2;
	}
	fflush(stdout);
	return r;
}
