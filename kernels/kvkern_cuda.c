// SPDX-License-Identifier: MIT
/*
 * kvkern_cuda.c - launch the CUDA kernels through the driver API.
 *
 * Host arrays are gathered into pinned host memory, uploaded with one
 * asynchronous copy into a device scratch buffer owned by the struct
 * kvk_cuda, the kernels run on its stream, results come back the same way
 * and the call synchronises the stream.  Kernels are launched with their
 * parameter block in cuLaunchKernel's extra[] buffer, so that the size
 * passed is the block's and the driver (and the test double) can check it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvkern_cuda.h"
#include "kvkern_cuda_abi.h"
#include "kvkern_internal.h"

#ifndef KVK_FATBIN_DIR
#define KVK_FATBIN_DIR "/usr/local/lib/kvpool"
#endif

#define NDT 4
#define ND 4
#define GRID_X_MAX 0x7fffffffU
#define GRID_YZ_MAX 65535U
#define SMEM_DEFAULT 49152U

static const char *const dt_names[NDT] = { "bf16", "fp8", "int8", "int4" };
static const uint32_t d_vals[ND] = { 32, 64, 128, 256 };

struct kfn {
	CUfunction f;
	char name[32];
	uint32_t smem;		/* dynamic shared memory */
	uint32_t stages;
	int blocks_per_sm;	/* 0: not usable on this device */
	int regs, local_bytes;
};

struct kvk_cuda {
	struct cuda_drv *drv;
	CUdevice dev;
	CUmodule mod;
	CUstream st;
	CUfunction f_write, f_read, f_merge, f_bw, f_self;
	struct kfn attn[NDT][ND];
	int sm_count, cc_major, cc_minor;
	size_t smem_optin;
	CUdeviceptr scratch;	/* staged inputs and outputs */
	size_t scratch_bytes;
	CUdeviceptr parts;	/* split partial states */
	size_t parts_bytes;
	void *host;		/* pinned staging */
	size_t host_bytes;
	CUstream edit_st;	/* the edit kernels' own stream */
	CUdeviceptr edit_buf;	/* their arrays and stage, kept between calls */
	size_t edit_bytes;
	char module[PATH_MAX + 32];
	char device[128];
};

struct kvk_cuda_plan {
	struct kvk_cu_attn a;
	struct kvk_cu_merge m;
	const struct kfn *k;
	uint32_t ctas, nsplit, wave;
	CUdeviceptr parts;	/* owned by the plan (benchmark) */
};

static int cu(const struct kvk_cuda *c, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	fprintf(stderr, "kvkern_cuda: %s: %s\n", what,
		cuda_drv_strerror(c->drv, r));
	return cuda_drv_errno(r);
}

int kvk_cuda_head_dim_ok(uint32_t head_dim)
{
	return head_dim == 32 || head_dim == 64 || head_dim == 128 ||
	       head_dim == 256;
}

static int d_index(uint32_t head_dim)
{
	switch (head_dim) {
	case 32: return 0;
	case 64: return 1;
	case 128: return 2;
	case 256: return 3;
	}
	return -1;
}

CUstream kvk_cuda_stream(const struct kvk_cuda *c)
{
	return c ? c->st : NULL;
}

/* ---- loading the module ---- */

static void *read_file(const char *path, size_t *len, int text)
{
	FILE *f = fopen(path, "rb");
	long n;
	char *buf = NULL;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf) {
			buf[n] = 0;	/* PTX images are C strings */
			*len = (size_t)n + (text ? 1 : 0);
		}
	}
	fclose(f);
	return buf;
}

/* The first existing candidate, into path (PATH_MAX). */
static int find_fatbin(const char *given, char *path)
{
	const char *env = getenv("KVPOOL_FATBIN");
	static const char *const rel[] = {
		"/../lib/", "/../../lib/", "/../../../lib/",
	};
	char exe[PATH_MAX];
	ssize_t n;
	size_t i;

	if (given) {
		snprintf(path, PATH_MAX, "%s", given);
		return access(path, R_OK) ? -ENOENT : 0;
	}
	if (env && *env) {
		snprintf(path, PATH_MAX, "%s", env);
		return access(path, R_OK) ? -ENOENT : 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			if ((size_t)snprintf(path, PATH_MAX, "%s%s%s", exe,
					     rel[i], KVK_FATBIN_NAME) >= PATH_MAX)
				continue;
			if (!access(path, R_OK))
				return 0;
		}
	}
	snprintf(path, PATH_MAX, "%s/%s", KVK_FATBIN_DIR, KVK_FATBIN_NAME);
	return access(path, R_OK) ? -ENOENT : 0;
}

/* Errors after which the PTX of the compatible ISA is worth a try. */
static int image_too_new(CUresult r)
{
	return r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
	       r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
	       r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX;
}

static int load_module(struct kvk_cuda *c, const char *given)
{
	char path[PATH_MAX], compat[PATH_MAX + 32], *slash;
	size_t len = 0;
	void *img;
	CUresult r;
	int ret;

	ret = find_fatbin(given, path);
	if (ret)
		return ret;
	img = read_file(path, &len, 0);
	if (!img)
		return -ENOENT;
	r = c->drv->cuModuleLoadData(&c->mod, img);
	free(img);
	if (r == CUDA_SUCCESS) {
		snprintf(c->module, sizeof(c->module), "%s", path);
		return 0;
	}
	fprintf(stderr, "kvkern_cuda: cuModuleLoadData(%s): %s (driver %d)\n",
		path, cuda_drv_strerror(c->drv, r), c->drv->driver_version);
	if (!image_too_new(r))
		return cuda_drv_errno(r);
	snprintf(compat, sizeof(compat), "%s", path);
	slash = strrchr(compat, '/');
	snprintf(slash ? slash + 1 : compat,
		 sizeof(compat) - (size_t)(slash ? slash + 1 - compat : 0),
		 "%s", KVK_COMPAT_PTX_NAME);
	img = read_file(compat, &len, 1);
	if (!img)
		return cuda_drv_errno(r);
	r = c->drv->cuModuleLoadData(&c->mod, img);
	free(img);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "kvkern_cuda: cuModuleLoadData(%s): %s\n",
			compat, cuda_drv_strerror(c->drv, r));
		return cuda_drv_errno(r);
	}
	fprintf(stderr, "kvkern_cuda: using %s (the driver compiles it)\n",
		compat);
	snprintf(c->module, sizeof(c->module), "%s", compat);
	return 0;
}

/* Kernel `name` must take one parameter of `size` bytes. */
static int get_fn(struct kvk_cuda *c, const char *name, size_t size,
		  CUfunction *f)
{
	size_t off = 0, sz = 0;
	int ret;

	ret = cu(c, c->drv->cuModuleGetFunction(f, c->mod, name), name);
	if (ret)
		return ret;
	if (!c->drv->cuFuncGetParamInfo)
		return 0;	/* driver older than CUDA 12.4 */
	if (c->drv->cuFuncGetParamInfo(*f, 0, &off, &sz) != CUDA_SUCCESS ||
	    off != 0 || sz != size) {
		fprintf(stderr, "kvkern_cuda: %s takes %zu bytes at %zu, this "
			"build passes %zu: fatbin and library do not match\n",
			name, sz, off, size);
		return -EPROTO;
	}
	if (c->drv->cuFuncGetParamInfo(*f, 1, &off, &sz) == CUDA_SUCCESS) {
		fprintf(stderr, "kvkern_cuda: %s takes more than one "
			"parameter\n", name);
		return -EPROTO;
	}
	return 0;
}

static int attr(struct kvk_cuda *c, CUdevice_attribute a, int *v)
{
	*v = 0;
	return cu(c, c->drv->cuDeviceGetAttribute(v, a, c->dev),
		  "cuDeviceGetAttribute");
}

static int setup_attn(struct kvk_cuda *c, int i, int j)
{
	struct kfn *k = &c->attn[i][j];
	uint32_t D = d_vals[j], dt = (uint32_t)i + 1;
	uint32_t rb = dt == KVK_BF16 ? 2 * D : dt == KVK_INT4 ? D / 2 : D;
	int st = 0, n = 0, ret;

	snprintf(k->name, sizeof(k->name), "kvk_attn_%s_d%u", dt_names[i], D);
	ret = get_fn(c, k->name, sizeof(struct kvk_cu_attn), &k->f);
	if (ret)
		return ret;
	k->smem = kvk_cu_attn_smem(dt, D, rb);
	k->stages = kvk_cu_stages(dt, D, rb);
	c->drv->cuFuncGetAttribute(&st, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
				   k->f);
	c->drv->cuFuncGetAttribute(&k->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->f);
	c->drv->cuFuncGetAttribute(&k->local_bytes,
				   CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k->f);
	if ((size_t)k->smem + (size_t)st > c->smem_optin) {
		fprintf(stderr, "kvkern_cuda: %s needs %u bytes of shared "
			"memory, the device has %zu: not available\n",
			k->name, k->smem + st, c->smem_optin);
		return 0;
	}
	if (k->smem + (uint32_t)st > SMEM_DEFAULT) {
		ret = cu(c, c->drv->cuFuncSetAttribute(k->f,
			 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
			 (int)k->smem), k->name);
		if (ret)
			return ret;
	}
	ret = cu(c, c->drv->cuOccupancyMaxActiveBlocksPerMultiprocessor(&n,
		 k->f, KVK_CU_THREADS, k->smem), "occupancy");
	if (ret)
		return ret;
	k->blocks_per_sm = n;
	return 0;
}

void kvk_cuda_free(struct kvk_cuda *c)
{
	if (!c)
		return;
	if (c->st)
		c->drv->cuStreamSynchronize(c->st);
	if (c->edit_st)
		c->drv->cuStreamSynchronize(c->edit_st);
	if (c->edit_buf)
		c->drv->cuMemFree(c->edit_buf);
	if (c->edit_st)
		c->drv->cuStreamDestroy(c->edit_st);
	if (c->scratch)
		c->drv->cuMemFree(c->scratch);
	if (c->parts)
		c->drv->cuMemFree(c->parts);
	if (c->host)
		c->drv->cuMemFreeHost(c->host);
	if (c->st)
		c->drv->cuStreamDestroy(c->st);
	if (c->mod)
		c->drv->cuModuleUnload(c->mod);
	free(c);
}

int kvk_cuda_init(struct kvk_cuda **out, struct cuda_drv *drv,
		  const char *fatbin_path)
{
	struct kvk_cuda *c;
	int i, j, v, ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!drv || !drv->lib)
		return -ENODEV;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->drv = drv;
	ret = cu(c, drv->cuCtxGetDevice(&c->dev), "cuCtxGetDevice");
	if (ret)
		goto fail;
	drv->cuDeviceGetName(c->device, sizeof(c->device), c->dev);
	ret = attr(c, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &c->sm_count);
	ret = ret ? ret : attr(c, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
			       &c->cc_major);
	ret = ret ? ret : attr(c, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
			       &c->cc_minor);
	ret = ret ? ret : attr(c,
			CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
			&v);
	if (ret)
		goto fail;
	c->smem_optin = v > 0 ? (size_t)v : SMEM_DEFAULT;
	if (c->sm_count <= 0 || c->cc_major < 8) {
		fprintf(stderr, "kvkern_cuda: %s has compute capability %d.%d; "
			"the kernels need 8.0 or later\n", c->device,
			c->cc_major, c->cc_minor);
		ret = -EOPNOTSUPP;
		goto fail;
	}
	ret = load_module(c, fatbin_path);
	if (ret)
		goto fail;
	ret = get_fn(c, "kvk_write", sizeof(struct kvk_cu_write), &c->f_write);
	ret = ret ? ret : get_fn(c, "kvk_read", sizeof(struct kvk_cu_read),
				 &c->f_read);
	ret = ret ? ret : get_fn(c, "kvk_merge", sizeof(struct kvk_cu_merge),
				 &c->f_merge);
	ret = ret ? ret : get_fn(c, "kvk_read_bw", sizeof(struct kvk_cu_bw),
				 &c->f_bw);
	ret = ret ? ret : get_fn(c, "kvk_selftest",
				 sizeof(struct kvk_cu_selftest), &c->f_self);
	for (i = 0; !ret && i < NDT; i++)
		for (j = 0; !ret && j < ND; j++)
			ret = setup_attn(c, i, j);
	if (ret)
		goto fail;
	ret = cu(c, drv->cuStreamCreate(&c->st, CU_STREAM_NON_BLOCKING),
		 "cuStreamCreate");
	ret = ret ? ret : cu(c, drv->cuStreamCreate(&c->edit_st,
						    CU_STREAM_NON_BLOCKING),
			     "cuStreamCreate");
	if (ret)
		goto fail;
	*out = c;
	return 0;
fail:
	kvk_cuda_free(c);
	return ret;
}

/* For the edit ops' glue (kvkern_cuda_edit.c). */
struct cuda_drv *kvk_cuda_drv(struct kvk_cuda *c)
{
	return c ? c->drv : NULL;
}

int kvk_cuda_function(struct kvk_cuda *c, const char *name, CUfunction *f)
{
	if (!c || !c->mod)
		return -EINVAL;
	return cu(c, c->drv->cuModuleGetFunction(f, c->mod, name), name);
}

int kvk_cuda_edit_scratch(struct kvk_cuda *c, size_t bytes, CUstream *st,
			  CUdeviceptr *buf)
{
	int ret;

	if (!c || !c->edit_st)
		return -EINVAL;
	if (bytes > c->edit_bytes) {
		/* whole 2 MiB: the next call of a similar size fits */
		size_t want = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);

		if (c->edit_buf) {
			/* work queued on it must end before it goes */
			ret = cu(c, c->drv->cuStreamSynchronize(c->edit_st),
				 "cuStreamSynchronize");
			if (ret)
				return ret;
			c->drv->cuMemFree(c->edit_buf);
		}
		c->edit_buf = 0;
		c->edit_bytes = 0;
		ret = cu(c, c->drv->cuMemAlloc(&c->edit_buf, want),
			 "cuMemAlloc");
		if (ret) {
			c->edit_buf = 0;
			return ret;
		}
		c->edit_bytes = want;
	}
	*st = c->edit_st;
	*buf = c->edit_buf;
	return 0;
}

int kvk_cuda_sm_count(const struct kvk_cuda *c)
{
	return c ? c->sm_count : 0;
}

int kvk_cuda_info(const struct kvk_cuda *c, struct kvk_cuda_info *i)
{
	if (!c || !i)
		return -EINVAL;
	memset(i, 0, sizeof(*i));
	snprintf(i->device, sizeof(i->device), "%s", c->device);
	i->sm_count = c->sm_count;
	i->cc_major = c->cc_major;
	i->cc_minor = c->cc_minor;
	i->driver_version = c->drv->driver_version;
	i->smem_optin = c->smem_optin;
	snprintf(i->module, sizeof(i->module), "%.255s", c->module);
	return 0;
}

int kvk_cuda_kernel_info(const struct kvk_cuda *c, uint32_t dtype,
			 uint32_t head_dim, struct kvk_cuda_kernel *k)
{
	const struct kfn *f;
	int di = d_index(head_dim);

	if (!c || !k || di < 0 || dtype < KVK_BF16 || dtype > KVK_INT4)
		return -EINVAL;
	f = &c->attn[dtype - 1][di];
	memset(k, 0, sizeof(*k));
	snprintf(k->name, sizeof(k->name), "%s", f->name);
	k->regs = f->regs;
	k->local_bytes = f->local_bytes;
	k->smem = f->smem;
	k->stages = f->stages;
	k->blocks_per_sm = f->blocks_per_sm;
	return 0;
}

/* ---- staging ---- */

#define NSTAGE 12

struct stage {
	size_t in_end;		/* inputs are [0, in_end) */
	size_t end;
	int n;
	struct {
		size_t off, len;
		const void *src;
	} in[NSTAGE];
};

static size_t align256(size_t x)
{
	return (x + 255) & ~(size_t)255;
}

/* inputs first (one upload), then reserved outputs */
static size_t stage_in(struct stage *s, const void *src, size_t len)
{
	size_t off = align256(s->end);

	s->in[s->n].off = off;
	s->in[s->n].len = len;
	s->in[s->n].src = src;
	s->n++;
	s->end = off + (len ? len : 1);
	s->in_end = s->end;
	return off;
}

static size_t stage_out(struct stage *s, size_t len)
{
	size_t off = align256(s->end);

	s->end = off + (len ? len : 1);
	return off;
}

static int grow_dev(struct kvk_cuda *c, CUdeviceptr *p, size_t *have,
		    size_t want)
{
	int ret;

	if (want <= *have)
		return 0;
	want += want / 4 + (1 << 20);
	if (*p) {
		c->drv->cuStreamSynchronize(c->st);
		c->drv->cuMemFree(*p);
	}
	*p = 0;
	*have = 0;
	ret = cu(c, c->drv->cuMemAlloc(p, want), "cuMemAlloc");
	if (!ret)
		*have = want;
	return ret;
}

/* Copy the staged inputs to the device (asynchronously). */
static int stage_upload(struct kvk_cuda *c, struct stage *s)
{
	int i, ret;

	ret = grow_dev(c, &c->scratch, &c->scratch_bytes, s->end);
	if (ret)
		return ret;
	if (s->in_end > c->host_bytes) {
		size_t want = s->in_end + s->in_end / 4 + (1 << 20);

		if (c->host) {
			c->drv->cuStreamSynchronize(c->st);
			c->drv->cuMemFreeHost(c->host);
		}
		c->host = NULL;
		c->host_bytes = 0;
		ret = cu(c, c->drv->cuMemAllocHost(&c->host, want),
			 "cuMemAllocHost");
		if (ret)
			return ret;
		c->host_bytes = want;
	}
	for (i = 0; i < s->n; i++)
		if (s->in[i].len)
			memcpy((char *)c->host + s->in[i].off, s->in[i].src,
			       s->in[i].len);
	if (!s->in_end)
		return 0;
	return cu(c, c->drv->cuMemcpyHtoDAsync(c->scratch, c->host, s->in_end,
					       c->st), "cuMemcpyHtoDAsync");
}

static int sync_st(struct kvk_cuda *c, const char *what)
{
	return cu(c, c->drv->cuStreamSynchronize(c->st), what);
}

/* Device -> host for one staged output (through the pinned buffer). */
static int download(struct kvk_cuda *c, void *dst, size_t off, size_t len)
{
	int ret;

	if (len > c->host_bytes) {
		if (c->host)
			c->drv->cuMemFreeHost(c->host);
		c->host = NULL;
		c->host_bytes = 0;
		ret = cu(c, c->drv->cuMemAllocHost(&c->host, len + (1 << 20)),
			 "cuMemAllocHost");
		if (ret)
			return ret;
		c->host_bytes = len + (1 << 20);
	}
	ret = cu(c, c->drv->cuMemcpyDtoHAsync(c->host, c->scratch + off, len,
					      c->st), "cuMemcpyDtoHAsync");
	ret = ret ? ret : sync_st(c, "download");
	if (!ret)
		memcpy(dst, c->host, len);
	return ret;
}

static int launch(struct kvk_cuda *c, CUfunction f, const char *name,
		  uint64_t gx, uint64_t gy, unsigned int threads,
		  unsigned int smem, void *param, size_t size)
{
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, param,
		CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_END,
	};

	if (!gx || !gy)
		return 0;
	if (gx > GRID_X_MAX || gy > GRID_YZ_MAX) {
		fprintf(stderr, "kvkern_cuda: %s: grid %llu x %llu is too "
			"large\n", name, (unsigned long long)gx,
			(unsigned long long)gy);
		return -E2BIG;
	}
	return cu(c, c->drv->cuLaunchKernel(f, (unsigned int)gx,
					    (unsigned int)gy, 1, threads, 1, 1,
					    smem, c->st, NULL, extra), name);
}

static void cu_layout(const struct kvk_layout *l, uint32_t layer,
		      struct kvk_cu_layout *o)
{
	memset(o, 0, sizeof(*o));
	o->block_bytes = l->block_bytes;
	o->plane_bytes = l->plane_bytes;
	o->meta_offset = l->meta_offset;
	o->kv_heads = l->kv_heads;
	o->head_dim = l->head_dim;
	o->tokens_per_block = l->tokens_per_block;
	o->row_bytes = l->row_bytes;
	o->dtype = l->dtype;
	o->layer = layer;
}

/* The kernels use 16-byte loads: blocks must keep 16-byte alignment. */
static int check_align(const struct kvk_layout *l, uint64_t pool)
{
	if (!l || l->block_bytes % 16 || pool % 16)
		return -EINVAL;
	return 0;
}

/* blocks/slots against the layout; ntok 0 is fine */
static int check_io(const struct kvk_layout *l, uint32_t layer,
		    uint32_t ntok, const uint32_t *blocks,
		    const uint32_t *slots)
{
	uint32_t t;

	if (!l || !l->tokens_per_block || layer >= l->layers)
		return -EINVAL;
	if (!ntok)
		return 0;
	if (!blocks || !slots)
		return -EINVAL;
	for (t = 0; t < ntok; t++) {
		if (slots[t] >= l->tokens_per_block)
			return -EINVAL;
		if (l->pool_blocks && blocks[t] >= l->pool_blocks)
			return -EINVAL;
	}
	return 0;
}

/* ---- write / read ---- */

struct tref {
	uint32_t block, idx;
};

static int cmp_tref(const void *pa, const void *pb)
{
	const struct tref *a = pa, *b = pb;

	if (a->block != b->block)
		return a->block < b->block ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* k, v: host arrays (kdev 0) or device addresses */
static int write_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		    CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		    const uint32_t *blocks, const uint32_t *slots,
		    const void *k, const void *v, CUdeviceptr kdev,
		    CUdeviceptr vdev, int bf16, uint32_t flags)
{
	struct kvk_cu_write p;
	struct stage s = { 0 };
	struct tref *refs;
	uint32_t *grp_block, *grp_start, *tok_idx, ng = 0, i;
	size_t in_bytes;
	size_t o_gb, o_gs, o_ti, o_sl, o_k = 0, o_v = 0;
	int ret;

	if (!c || (flags & ~KVK_WRITE_FLAGS))
		return -EINVAL;
	ret = check_io(l, layer, ntok, blocks, slots);
	if (ret || !ntok)
		return ret;
	if (!pool || check_align(l, pool))
		return -EINVAL;
	if (kdev ? !vdev || kdev % 4 || vdev % 4 : !k || !v)
		return -EINVAL;
	refs = malloc(sizeof(*refs) * ntok);
	grp_block = malloc(sizeof(uint32_t) * (3 * (size_t)ntok + 1));
	if (!refs || !grp_block) {
		free(refs);
		free(grp_block);
		return -ENOMEM;
	}
	grp_start = grp_block + ntok;
	tok_idx = grp_start + ntok + 1;
	for (i = 0; i < ntok; i++) {
		refs[i].block = blocks[i];
		refs[i].idx = i;
	}
	qsort(refs, ntok, sizeof(*refs), cmp_tref);
	for (i = 0; i < ntok; i++) {
		if (i == 0 || refs[i].block != refs[i - 1].block) {
			grp_block[ng] = refs[i].block;
			grp_start[ng++] = i;
		}
		tok_idx[i] = refs[i].idx;
	}
	grp_start[ng] = ntok;
	in_bytes = (size_t)ntok * l->kv_heads * l->head_dim * (bf16 ? 2 : 4);
	o_gb = stage_in(&s, grp_block, sizeof(uint32_t) * ng);
	o_gs = stage_in(&s, grp_start, sizeof(uint32_t) * (ng + 1));
	o_ti = stage_in(&s, tok_idx, sizeof(uint32_t) * ntok);
	o_sl = stage_in(&s, slots, sizeof(uint32_t) * ntok);
	if (!kdev) {
		o_k = stage_in(&s, k, in_bytes);
		o_v = stage_in(&s, v, in_bytes);
	}
	ret = stage_upload(c, &s);
	if (!ret) {
		memset(&p, 0, sizeof(p));
		cu_layout(l, layer, &p.l);
		p.pool = pool;
		p.k = kdev ? kdev : c->scratch + o_k;
		p.v = vdev ? vdev : c->scratch + o_v;
		p.grp_block = c->scratch + o_gb;
		p.grp_start = c->scratch + o_gs;
		p.tok_idx = c->scratch + o_ti;
		p.slots = c->scratch + o_sl;
		p.ngroups = ng;
		p.bf16_in = bf16;
		p.flags = flags;
		p.ntok = ntok;
		ret = launch(c, c->f_write, "kvk_write",
			     (uint64_t)ng * 2 * l->kv_heads, 1, KVK_CU_THREADS,
			     0, &p, sizeof(p));
	}
	if (!ret)
		ret = sync_st(c, "write");
	free(refs);
	free(grp_block);
	return ret;
}

int kvk_cuda_write_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		      CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		      const uint32_t *blocks, const uint32_t *slots,
		      const float *k, const float *v)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0, 0, 0,
			0);
}

int kvk_cuda_write_kv_flags(struct kvk_cuda *c, const struct kvk_layout *l,
			    CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			    const uint32_t *blocks, const uint32_t *slots,
			    const float *k, const float *v, uint32_t flags)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0, 0, 0,
			flags);
}

int kvk_cuda_write_kv_bf16(struct kvk_cuda *c, const struct kvk_layout *l,
			   CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			   const uint32_t *blocks, const uint32_t *slots,
			   const uint16_t *k, const uint16_t *v)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0, 0, 1,
			0);
}

int kvk_cuda_write_kv_dev(struct kvk_cuda *c, const struct kvk_layout *l,
			  CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			  const uint32_t *blocks, const uint32_t *slots,
			  CUdeviceptr k, CUdeviceptr v, int bf16)
{
	if (!k || !v)
		return -EINVAL;
	return write_kv(c, l, pool, layer, ntok, blocks, slots, NULL, NULL, k,
			v, !!bf16, 0);
}

static int read_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		   CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		   const uint32_t *blocks, const uint32_t *slots, float *k,
		   float *v, CUdeviceptr kdev, CUdeviceptr vdev, int dev)
{
	struct kvk_cu_read p;
	struct stage s = { 0 };
	size_t bytes, o_b, o_s, o_k = 0, o_v = 0;
	int ret;

	if (!c)
		return -EINVAL;
	ret = check_io(l, layer, ntok, blocks, slots);
	if (ret || !ntok)
		return ret;
	if (!pool || check_align(l, pool))
		return -EINVAL;
	if (dev ? (!kdev && !vdev) || kdev % 4 || vdev % 4 : !k && !v)
		return -EINVAL;
	bytes = (size_t)ntok * l->kv_heads * l->head_dim * sizeof(float);
	o_b = stage_in(&s, blocks, sizeof(uint32_t) * ntok);
	o_s = stage_in(&s, slots, sizeof(uint32_t) * ntok);
	if (!dev) {
		o_k = k ? stage_out(&s, bytes) : 0;
		o_v = v ? stage_out(&s, bytes) : 0;
	}
	ret = stage_upload(c, &s);
	if (ret)
		return ret;
	memset(&p, 0, sizeof(p));
	cu_layout(l, layer, &p.l);
	p.pool = pool;
	p.blocks = c->scratch + o_b;
	p.slots = c->scratch + o_s;
	p.k = dev ? kdev : k ? c->scratch + o_k : 0;
	p.v = dev ? vdev : v ? c->scratch + o_v : 0;
	p.ntok = ntok;
	ret = launch(c, c->f_read, "kvk_read", (uint64_t)ntok * 2 * l->kv_heads,
		     1, KVK_CU_THREADS, 0, &p, sizeof(p));
	if (!ret && !dev && k)
		ret = download(c, k, o_k, bytes);
	if (!ret && !dev && v)
		ret = download(c, v, o_v, bytes);
	if (!ret)
		ret = sync_st(c, "read");
	return ret;
}

int kvk_cuda_read_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		     CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		     const uint32_t *blocks, const uint32_t *slots,
		     float *k, float *v)
{
	return read_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0, 0, 0);
}

int kvk_cuda_read_kv_dev(struct kvk_cuda *c, const struct kvk_layout *l,
			 CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			 const uint32_t *blocks, const uint32_t *slots,
			 CUdeviceptr k, CUdeviceptr v)
{
	return read_kv(c, l, pool, layer, ntok, blocks, slots, NULL, NULL, k,
		       v, 1);
}

/* ---- attention ---- */

/* log2(e): the kernels work in base 2 (ex2) */
#define LOG2E 1.4426950408889634f

/*
 * The geometry of about n splits of max_end positions (whole tiles, at
 * most chunk_max each): the split count and size it gives, and the share
 * of the slots of the waves its ctas x splits thread blocks occupy.
 */
static double split_fill(uint32_t max_end, uint32_t chunk_max, uint64_t ctas,
			 uint64_t wave, uint64_t n, uint32_t *nsplit,
			 uint32_t *chunk)
{
	uint64_t c = ((uint64_t)max_end + n - 1) / n, total;

	c = (c + KVK_CU_TILE - 1) / KVK_CU_TILE * KVK_CU_TILE;
	if (c > chunk_max)
		c = chunk_max;
	if (!c)
		c = KVK_CU_TILE;
	*chunk = (uint32_t)c;
	*nsplit = max_end ? (uint32_t)((max_end + c - 1) / c) : 1;
	total = ctas * *nsplit;
	return (double)total / (double)((total + wave - 1) / wave * wave);
}

/*
 * The launch geometry: one thread block per (sequence, kv head, block of
 * KVK_CU_ROWS query rows, split); splits so that the grid fills whole
 * waves of the device (SMs x blocks per SM from the occupancy query),
 * each split at least 256 positions and at most what one block-table
 * slice (KVK_CU_TAB entries) covers.
 */
static int plan_attn(struct kvk_cuda *c, const struct kvk_layout *l,
		     uint32_t layer, uint32_t batch, uint32_t q_heads,
		     uint32_t mbps, uint32_t n_q, uint32_t max_end,
		     float scale, struct kvk_cuda_plan *pl)
{
	uint32_t G = q_heads / l->kv_heads, H = l->kv_heads;
	uint32_t nq1 = n_q ? n_q : 1, rb, nsplit, chunk, chunk_max;
	uint64_t ctas, wave, k, nmin, ntile;
	double best;
	const struct kfn *f;
	int di = d_index(l->head_dim);

	if (di < 0)
		return -EOPNOTSUPP;
	f = &c->attn[l->dtype - 1][di];
	if (!f->blocks_per_sm)
		return -EOPNOTSUPP;
	rb = (uint32_t)(((uint64_t)nq1 * G + KVK_CU_ROWS - 1) / KVK_CU_ROWS);
	ctas = (uint64_t)batch * H * rb;
	if (ctas > GRID_X_MAX)
		return -E2BIG;
	wave = (uint64_t)c->sm_count * (uint64_t)f->blocks_per_sm;
	chunk_max = (uint32_t)(((uint64_t)(KVK_CU_TAB - 2) * l->tokens_per_block /
				KVK_CU_TILE) * KVK_CU_TILE);
	if (chunk_max > (1u << 30))
		chunk_max = 1u << 30;
	if (chunk_max < KVK_CU_TILE)
		chunk_max = KVK_CU_TILE;
	/* whole waves: the most splits that keep the grid within the
	 * fewest full waves holding every thread block (at least the splits
	 * the block-table slice forces, at most one per 256 positions);
	 * when that keeps under 90% of the waves' slots busy, the fewest
	 * splits that do, or failing that the best filled */
	nmin = ((uint64_t)max_end + chunk_max - 1) / chunk_max;
	if (nmin < 1)
		nmin = 1;
	ntile = ((uint64_t)max_end + 255) / 256;
	if (ntile < nmin)
		ntile = nmin;
	k = (nmin * ctas + wave - 1) / wave;
	k = k * wave / ctas;
	k = k < nmin ? nmin : k > ntile ? ntile : k;
	best = split_fill(max_end, chunk_max, ctas, wave, k, &nsplit, &chunk);
	for (k = nmin; best < 0.9 && k <= ntile; k++) {
		uint32_t n_k, c_k;
		double eff = split_fill(max_end, chunk_max, ctas, wave, k,
					&n_k, &c_k);

		if (eff > best + 1e-9) {
			best = eff;
			nsplit = n_k;
			chunk = c_k;
		}
	}
	if (nsplit > GRID_YZ_MAX)
		return -E2BIG;

	memset(pl, 0, sizeof(*pl));
	cu_layout(l, layer, &pl->a.l);
	pl->a.batch = batch;
	pl->a.q_heads = q_heads;
	pl->a.group = G;
	pl->a.n_q = n_q;
	pl->a.mbps = mbps;
	pl->a.row_blocks = rb;
	pl->a.nsplit = nsplit;
	pl->a.chunk = chunk;
	pl->a.scale = scale * LOG2E;
	pl->m.batch = batch;
	pl->m.kv_heads = H;
	pl->m.head_dim = l->head_dim;
	pl->m.q_heads = q_heads;
	pl->m.group = G;
	pl->m.n_q = n_q;
	pl->m.row_blocks = rb;
	pl->m.nsplit = nsplit;
	pl->k = f;
	pl->ctas = (uint32_t)ctas;
	pl->nsplit = nsplit;
	pl->wave = (uint32_t)wave;
	return 0;
}

static size_t parts_bytes(const struct kvk_cuda_plan *pl)
{
	if (pl->nsplit <= 1)
		return 0;
	return (size_t)pl->ctas * pl->nsplit * KVK_CU_ROWS *
	       (pl->a.l.head_dim + 2) * sizeof(float);
}

static int launch_attn(struct kvk_cuda *c, const struct kvk_cuda_plan *pl,
		       CUdeviceptr parts)
{
	struct kvk_cu_attn a = pl->a;
	struct kvk_cu_merge m = pl->m;
	int ret;

	a.parts = parts;
	ret = launch(c, pl->k->f, pl->k->name, pl->ctas, pl->nsplit,
		     KVK_CU_THREADS, pl->k->smem, &a, sizeof(a));
	if (ret || pl->nsplit <= 1)
		return ret;
	m.parts = parts;
	m.out = a.out;
	return launch(c, c->f_merge, "kvk_merge", pl->ctas, 1, KVK_CU_THREADS,
		      0, &m, sizeof(m));
}

static uint32_t max_ctx(const uint32_t *ctx, uint32_t batch)
{
	uint32_t b, m = 0;

	for (b = 0; b < batch; b++)
		m = ctx[b] > m ? ctx[b] : m;
	return m;
}

/* q/out: host arrays (qdev 0) or device addresses */
static int run_attn(struct kvk_cuda *c, const struct kvk_layout *l,
		    void *pool, uint32_t layer, uint32_t batch,
		    uint32_t q_heads, uint32_t mbps, uint32_t n_q,
		    const float *q, const uint32_t *bt, const uint32_t *ctx,
		    float scale, float *out, CUdeviceptr qdev,
		    CUdeviceptr odev)
{
	struct kvk_cuda_plan pl;
	struct stage s = { 0 };
	size_t o_q = 0, o_t, o_c, o_o = 0, qb;
	int ret;

	if (check_align(l, (uint64_t)(uintptr_t)pool))
		return -EINVAL;
	ret = plan_attn(c, l, layer, batch, q_heads, mbps, n_q,
			max_ctx(ctx, batch), scale, &pl);
	if (ret)
		return ret;
	qb = (size_t)batch * (n_q ? n_q : 1) * q_heads * l->head_dim *
	     sizeof(float);
	if (!qdev)
		o_q = stage_in(&s, q, qb);
	o_t = stage_in(&s, bt, sizeof(uint32_t) * batch * mbps);
	o_c = stage_in(&s, ctx, sizeof(uint32_t) * batch);
	if (!odev)
		o_o = stage_out(&s, qb);
	ret = stage_upload(c, &s);
	ret = ret ? ret : grow_dev(c, &c->parts, &c->parts_bytes,
				   parts_bytes(&pl));
	if (ret)
		return ret;
	pl.a.pool = (uint64_t)(uintptr_t)pool;
	pl.a.q = qdev ? qdev : c->scratch + o_q;
	pl.a.tables = c->scratch + o_t;
	pl.a.ctx = c->scratch + o_c;
	pl.a.out = odev ? odev : c->scratch + o_o;
	ret = launch_attn(c, &pl, c->parts);
	if (!ret && !odev)
		ret = download(c, out, o_o, qb);
	if (!ret)
		ret = sync_st(c, "attention");
	return ret;
}

int kvk_cuda_decode(struct kvk_cuda *c, const struct kvk_decode_args *a)
{
	int ret = kvk_check_decode(a);

	if (ret || !a->batch)
		return ret;
	if (!c)
		return -EINVAL;
	return run_attn(c, a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, 0, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out, 0, 0);
}

int kvk_cuda_prefill(struct kvk_cuda *c, const struct kvk_prefill_args *a)
{
	int ret = kvk_check_prefill(a);

	if (ret || !a->batch)
		return ret;
	if (!c)
		return -EINVAL;
	return run_attn(c, a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, a->n_new, a->q,
			a->block_tables, a->ctx_lens, a->scale, a->out, 0, 0);
}

int kvk_cuda_attn_dev(struct kvk_cuda *c, const struct kvk_prefill_args *a,
		      CUdeviceptr q, CUdeviceptr out)
{
	struct kvk_prefill_args chk;
	int ret;

	if (!c || !a || !q || !out || q % 4 || out % 4)
		return -EINVAL;
	/* the argument checks on the host arrays, with placeholders for
	 * the device ones */
	chk = *a;
	chk.q = (const float *)(uintptr_t)q;
	chk.out = (float *)(uintptr_t)out;
	if (a->n_new)
		ret = kvk_check_prefill(&chk);
	else
		ret = kvk_check_decode(&(struct kvk_decode_args){
			.layout = a->layout, .pool_base = a->pool_base,
			.layer = a->layer, .batch = a->batch,
			.q_heads = a->q_heads,
			.max_blocks_per_seq = a->max_blocks_per_seq,
			.q = chk.q, .block_tables = a->block_tables,
			.ctx_lens = a->ctx_lens, .scale = a->scale,
			.out = chk.out });
	if (ret || !a->batch)
		return ret;
	return run_attn(c, a->layout, a->pool_base, a->layer, a->batch,
			a->q_heads, a->max_blocks_per_seq, a->n_new, NULL,
			a->block_tables, a->ctx_lens, a->scale, NULL, q, out);
}

int kvk_cuda_plan_decode(struct kvk_cuda *c, const struct kvk_decode_args *a,
			 uint32_t max_ctx_len, struct kvk_cuda_plan **out)
{
	struct kvk_cuda_plan *pl;
	size_t pb;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!c || !a || !a->layout || !a->batch || !a->q_heads ||
	    a->q_heads % a->layout->kv_heads || !a->q || !a->block_tables ||
	    !a->ctx_lens || !a->out ||
	    check_align(a->layout, (uint64_t)(uintptr_t)a->pool_base))
		return -EINVAL;
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return -ENOMEM;
	ret = plan_attn(c, a->layout, a->layer, a->batch, a->q_heads,
			a->max_blocks_per_seq, 0, max_ctx_len, a->scale, pl);
	pb = ret ? 0 : parts_bytes(pl);
	if (!ret && pb)
		ret = cu(c, c->drv->cuMemAlloc(&pl->parts, pb), "cuMemAlloc");
	if (ret) {
		free(pl);
		return ret;
	}
	pl->a.pool = (uint64_t)(uintptr_t)a->pool_base;
	pl->a.q = (uint64_t)(uintptr_t)a->q;
	pl->a.tables = (uint64_t)(uintptr_t)a->block_tables;
	pl->a.ctx = (uint64_t)(uintptr_t)a->ctx_lens;
	pl->a.out = (uint64_t)(uintptr_t)a->out;
	*out = pl;
	return 0;
}

int kvk_cuda_plan_launch(struct kvk_cuda *c, const struct kvk_cuda_plan *pl)
{
	if (!c || !pl)
		return -EINVAL;
	return launch_attn(c, pl, pl->parts);
}

void kvk_cuda_plan_describe(const struct kvk_cuda_plan *pl, char *buf,
			    size_t len)
{
	uint64_t total = (uint64_t)pl->ctas * pl->nsplit;

	snprintf(buf, len, "%s grid %u x %u = %.2f waves of %u, %u positions "
		 "per split", pl->k->name, pl->ctas, pl->nsplit,
		 (double)total / pl->wave, pl->wave, pl->a.chunk);
}

void kvk_cuda_plan_info(const struct kvk_cuda_plan *pl,
			struct kvk_cuda_plan_info *info)
{
	memset(info, 0, sizeof(*info));
	info->ctas = pl->ctas;
	info->nsplit = pl->nsplit;
	info->wave = pl->wave;
	info->chunk = pl->a.chunk;
}

void kvk_cuda_plan_free(struct kvk_cuda *c, struct kvk_cuda_plan *pl)
{
	if (!pl)
		return;
	if (pl->parts && c) {
		c->drv->cuStreamSynchronize(c->st);
		c->drv->cuMemFree(pl->parts);
	}
	free(pl);
}

/* ---- block copy ---- */

int kvk_cuda_copy_blocks(struct kvk_cuda *c, CUdeviceptr pool,
			 uint64_t block_bytes, uint64_t pool_blocks,
			 const uint32_t *src, const uint32_t *dst, uint32_t n)
{
	uint32_t i;
	int ret;

	if (!n)
		return 0;
	if (!c || !pool || !block_bytes || !src || !dst)
		return -EINVAL;
	if (pool_blocks)
		for (i = 0; i < n; i++)
			if (src[i] >= pool_blocks || dst[i] >= pool_blocks)
				return -EINVAL;
	for (i = 0; i < n; i++) {
		if (src[i] == dst[i])
			continue;
		ret = cu(c, c->drv->cuMemcpyDtoDAsync(pool + dst[i] * block_bytes,
						      pool + src[i] * block_bytes,
						      block_bytes, c->st),
			 "cuMemcpyDtoDAsync");
		if (ret)
			return ret;
	}
	return sync_st(c, "copy");
}

/* Runs of consecutive blocks of blocks[0..n) (grants come lowest index
 * first), each zeroed with one memset on st: 32-bit words when the sizes
 * allow it (the pool base is aligned to the allocation granularity). */
static int zero_runs(struct kvk_cuda *c, CUstream st, CUdeviceptr pool,
		     uint64_t block_bytes, const uint32_t *blocks, uint32_t n)
{
	uint32_t i, j;
	int ret = 0;

	for (i = 0; i < n && !ret; i = j) {
		CUdeviceptr at = pool + (CUdeviceptr)blocks[i] * block_bytes;
		uint64_t len;

		for (j = i + 1; j < n && blocks[j] == blocks[j - 1] + 1; j++)
			;
		len = (uint64_t)(j - i) * block_bytes;
		if (!(block_bytes % 4) && !(at % 4))
			ret = cu(c, c->drv->cuMemsetD32Async(at, 0, len / 4, st),
				 "cuMemsetD32Async");
		else
			ret = cu(c, c->drv->cuMemsetD8Async(at, 0, len, st),
				 "cuMemsetD8Async");
	}
	return ret;
}

int kvk_cuda_zero_blocks(struct kvk_cuda *c, CUstream stream, CUdeviceptr pool,
			 uint64_t block_bytes, uint64_t pool_blocks,
			 const uint32_t *blocks, uint32_t n)
{
	CUstream st;
	uint32_t i;
	int ret, sr;

	if (!n)
		return 0;
	if (!c || !pool || !block_bytes || !blocks)
		return -EINVAL;
	if (pool_blocks)
		for (i = 0; i < n; i++)
			if (blocks[i] >= pool_blocks)
				return -EINVAL;
	st = stream ? stream : c->st;
	ret = zero_runs(c, st, pool, block_bytes, blocks, n);
	/* wait for what was queued, even after an error: the zeros must be
	 * there before any stream, a swap worker's too, reads the blocks */
	sr = cu(c, c->drv->cuStreamSynchronize(st), "zero: cuStreamSynchronize");
	return ret ? ret : sr;
}

/* ---- bandwidth probe ---- */

int kvk_cuda_read_bw(struct kvk_cuda *c, CUdeviceptr src, size_t bytes,
		     int iters, double *gbps)
{
	struct kvk_cu_bw p;
	CUevent e0 = NULL, e1 = NULL;
	uint64_t grid;
	float ms = 0;
	int i, ret;

	if (!c || !src || !gbps || iters < 1 || bytes % 16 || !bytes)
		return -EINVAL;
	grid = (uint64_t)c->sm_count * 8;
	ret = grow_dev(c, &c->scratch, &c->scratch_bytes, grid * 4);
	if (ret)
		return ret;
	p.src = src;
	p.bytes = bytes;
	p.sink = c->scratch;
	ret = cu(c, c->drv->cuEventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate");
	ret = ret ? ret : cu(c, c->drv->cuEventCreate(&e1, CU_EVENT_DEFAULT),
			     "cuEventCreate");
	/* warm-up */
	ret = ret ? ret : launch(c, c->f_bw, "kvk_read_bw", grid, 1,
				 KVK_CU_BW_THREADS, 0, &p, sizeof(p));
	ret = ret ? ret : cu(c, c->drv->cuEventRecord(e0, c->st),
			     "cuEventRecord");
	for (i = 0; i < iters && !ret; i++)
		ret = launch(c, c->f_bw, "kvk_read_bw", grid, 1,
			     KVK_CU_BW_THREADS, 0, &p, sizeof(p));
	ret = ret ? ret : cu(c, c->drv->cuEventRecord(e1, c->st),
			     "cuEventRecord");
	ret = ret ? ret : cu(c, c->drv->cuEventSynchronize(e1),
			     "cuEventSynchronize");
	ret = ret ? ret : cu(c, c->drv->cuEventElapsedTime(&ms, e0, e1),
			     "cuEventElapsedTime");
	if (!ret)
		*gbps = ms > 0 ? (double)bytes * iters / (ms * 1e-3) / 1e9 : 0;
	if (e0)
		c->drv->cuEventDestroy(e0);
	if (e1)
		c->drv->cuEventDestroy(e1);
	return ret;
}

/* ---- primitive self-test ---- */

static float f16f(uint16_t h)
{
	return kvk_f16_to_f32(h);
}

static float bff(uint16_t h)
{
	return kvk_bf16_to_f32(h);
}

/* small integers: exact in FP16 and BF16, exact products and sums */
static void selftest_input(uint16_t *A, uint16_t *B, uint16_t *M,
			   uint8_t *bytes, int bf)
{
	int i;

	for (i = 0; i < 256; i++) {
		float x = (float)((i * 7 + 3) % 17 - 8);

		A[i] = bf ? kvk_f32_to_bf16(x) : kvk_f32_to_f16(x);
	}
	for (i = 0; i < 128; i++) {
		float x = (float)((i * 5 + 1) % 13 - 6);

		B[i] = bf ? kvk_f32_to_bf16(x) : kvk_f32_to_f16(x);
	}
	for (i = 0; i < 64; i++)
		M[i] = (uint16_t)(0x1000 + i);
	for (i = 0; i < 256; i++)
		bytes[i] = (uint8_t)i;
}

/* INT4 nibble k (two's complement) of the self-test's INT4 word of lane
 * l: byte j is bytes[(9 l + 64 j) % 256], so that every nibble value
 * occurs at every position */
static int nibble(const uint8_t *bytes, int l, int k)
{
	int n = (bytes[(9 * l + 64 * (k / 2)) & 255] >> (4 * (k & 1))) & 15;

	return n >= 8 ? n - 16 : n;
}

static int check_word(char *msg, size_t len, const char *what, int lane,
		      int w, uint32_t got, uint32_t want)
{
	if (got == want)
		return 0;
	snprintf(msg, len, "%s: lane %d word %d is %#010x, the PTX ISA's "
		 "layout gives %#010x", what, lane, w, got, want);
	return -EIO;
}

static uint32_t p2(uint16_t lo, uint16_t hi)
{
	return lo | ((uint32_t)hi << 16);
}

static uint16_t f16_of(float x)
{
	return kvk_f32_to_f16(x);
}

/* expected FP16 of an FP8 byte (NaN: any NaN) */
static int fp8_ok(uint16_t got, uint8_t b)
{
	float want = kvk_fp8_to_f32(b);

	if (want != want)
		return (got & 0x7c00) == 0x7c00 && (got & 0x3ff);
	return got == f16_of(want);
}

static int selftest_run(struct kvk_cuda *c, int bf, uint32_t *out)
{
	uint16_t in[448 + 128];
	struct kvk_cu_selftest p;
	CUdeviceptr d = 0;
	size_t inb = sizeof(in), outb = 32 * KVK_CU_SELFTEST_WORDS * 4;
	int ret;

	selftest_input(in, in + 256, in + 384, (uint8_t *)(in + 448), bf);
	ret = cu(c, c->drv->cuMemAlloc(&d, inb + outb), "cuMemAlloc");
	ret = ret ? ret : cu(c, c->drv->cuMemcpyHtoDAsync(d, in, inb, c->st),
			     "cuMemcpyHtoDAsync");
	p.in = d;
	p.out = d + inb;
	ret = ret ? ret : launch(c, c->f_self, "kvk_selftest", 1, 1, 32, 0, &p,
				 sizeof(p));
	ret = ret ? ret : cu(c, c->drv->cuMemcpyDtoHAsync(out, d + inb, outb,
							  c->st),
			     "cuMemcpyDtoHAsync");
	ret = ret ? ret : sync_st(c, "selftest");
	if (d)
		c->drv->cuMemFree(d);
	return ret;
}

int kvk_cuda_selftest(struct kvk_cuda *c, char *msg, size_t len)
{
	static uint32_t out[2][32 * KVK_CU_SELFTEST_WORDS];
	uint16_t A[256], B[128], M[64];
	uint8_t bytes[256];
	int bf, lane, i, ret;

	if (!c || !msg || !len)
		return -EINVAL;
	msg[0] = 0;
	for (bf = 0; bf < 2; bf++) {
		ret = selftest_run(c, bf, out[bf]);
		if (ret) {
			snprintf(msg, len, "self-test kernel failed: %d", ret);
			return ret;
		}
	}
	for (bf = 0; bf < 2; bf++) {
		selftest_input(A, B, M, bytes, bf);
		for (lane = 0; lane < 32; lane++) {
			const uint32_t *o = out[bf] + lane * KVK_CU_SELFTEST_WORDS;
			int g = lane >> 2, cc = lane & 3;
			int rows[4] = { g, g, g + 8, g + 8 };
			int cols[4] = { 2 * cc, 2 * cc + 1, 2 * cc, 2 * cc + 1 };

			/* C/D fragment of A . B (bf16 words 0-3 from the BF16
			 * run, f16 words 4-7 from the FP16 run) */
			for (i = 0; i < 4; i++) {
				float s = 0;
				int k;
				float v;

				for (k = 0; k < 16; k++)
					s += (bf ? bff(A[rows[i] * 16 + k]) *
						   bff(B[k * 8 + cols[i]]) :
						   f16f(A[rows[i] * 16 + k]) *
						   f16f(B[k * 8 + cols[i]]));
				memcpy(&v, &o[(bf ? 0 : 4) + i], 4);
				if (v != s) {
					snprintf(msg, len, "mma.m16n8k16 %s: lane "
						 "%d d%d = %g, expected %g",
						 bf ? "bf16" : "f16", lane, i,
						 (double)v, (double)s);
					return -EIO;
				}
			}
			/* ldmatrix.x4: the A fragment */
			ret = check_word(msg, len, "ldmatrix.x4", lane, 8, o[8],
				p2(A[g * 16 + 2 * cc], A[g * 16 + 2 * cc + 1]));
			ret = ret ? ret : check_word(msg, len, "ldmatrix.x4",
				lane, 9, o[9], p2(A[(g + 8) * 16 + 2 * cc],
				A[(g + 8) * 16 + 2 * cc + 1]));
			ret = ret ? ret : check_word(msg, len, "ldmatrix.x4",
				lane, 10, o[10], p2(A[g * 16 + 2 * cc + 8],
				A[g * 16 + 2 * cc + 9]));
			ret = ret ? ret : check_word(msg, len, "ldmatrix.x4",
				lane, 11, o[11], p2(A[(g + 8) * 16 + 2 * cc + 8],
				A[(g + 8) * 16 + 2 * cc + 9]));
			/* ldmatrix.x4.trans of A^T: the A fragment again */
			for (i = 0; !ret && i < 4; i++)
				ret = check_word(msg, len, "ldmatrix.x4.trans",
						 lane, 12 + i, o[12 + i], o[8 + i]);
			ret = ret ? ret : check_word(msg, len,
				"movmatrix.trans", lane, 16, o[16],
				p2(M[(2 * cc) * 8 + g], M[(2 * cc + 1) * 8 + g]));
			for (i = 0; !ret && i < 4; i++) {
				uint8_t b0 = bytes[8 * lane + 2 * i];
				uint8_t b1 = bytes[8 * lane + 2 * i + 1];
				int n0 = nibble(bytes, lane, i);
				int n1 = nibble(bytes, lane, i + 4);

				if (!fp8_ok(o[17 + i] & 0xffff, b0) ||
				    !fp8_ok(o[17 + i] >> 16, b1)) {
					snprintf(msg, len, "FP8 E4M3 -> FP16 of "
						 "%#04x %#04x gives %#010x", b0,
						 b1, o[17 + i]);
					ret = -EIO;
					break;
				}
				ret = check_word(msg, len, "INT8 -> FP16", lane,
					21 + i, o[21 + i],
					p2(f16_of((float)(int8_t)b0),
					   f16_of((float)(int8_t)b1)));
				ret = ret ? ret : check_word(msg, len,
					"INT4 -> FP16", lane, 25 + i, o[25 + i],
					p2(f16_of((float)n0), f16_of((float)n1)));
			}
			if (!ret && lane == 0) {
				uint32_t x = 0;

				for (i = 0; i < 4; i++)
					x ^= (uint32_t)bytes[4 * i] |
					     (uint32_t)bytes[4 * i + 1] << 8 |
					     (uint32_t)bytes[4 * i + 2] << 16 |
					     (uint32_t)bytes[4 * i + 3] << 24;
				ret = check_word(msg, len, "cp.async 16",
						 lane, 29, o[29], x);
				ret = ret ? ret : check_word(msg, len,
					"cp.async zero fill", lane, 30, o[30], 0);
				ret = ret ? ret : check_word(msg, len,
					"cp.async 4 zero fill", lane, 31, o[31], 0);
			}
			if (ret)
				return ret;
		}
	}
	return 0;
}
