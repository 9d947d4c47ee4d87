// SPDX-License-Identifier: MIT
/*
 * kvl_dev.c - libkvlease's device buffers for GPU tenants (kvlease.h):
 * CUDA VMM allocations exported as POSIX file descriptors and registered
 * with kvpoold, and the data-plane calls on them.  The CUDA driver is
 * loaded with dlopen() on first use (libcuda.so.1, or $KVPOOL_LIBCUDA),
 * so the library never needs it at link time.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvl_internal.h"
#include "kvpool_cuda.h"

struct kvl_cuda {
	void *lib;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuMemGetAllocationGranularity)(size_t *,
			const CUmemAllocationProp *,
			CUmemAllocationGranularity_flags);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t,
				const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t,
					CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t,
			     CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *,
				   size_t);
	CUresult (*cuMemExportToShareableHandle)(void *,
			CUmemGenericAllocationHandle, CUmemAllocationHandleType,
			unsigned long long);
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuGetErrorName)(CUresult, const char **);
};

struct kvl_dev_buf {
	struct kvl_ctx *ctx;
	struct kvl_dev_buf *next;
	uint32_t id;			/* the daemon's buffer id */
	int registered;			/* 1 while the daemon has it */
	uint64_t bytes;
	/* kvl_dev_buf_create: ours to free */
	int owned;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	/* kvl_dev_buf_register: a copy of the caller's descriptor */
	int fd;
};

#define SYM(m) { #m, offsetof(struct kvl_cuda, m) }
static const struct {
	const char *name;
	size_t off;
} syms[] = {
	SYM(cuInit), SYM(cuMemGetAllocationGranularity), SYM(cuMemCreate),
	SYM(cuMemRelease), SYM(cuMemAddressReserve), SYM(cuMemAddressFree),
	SYM(cuMemMap), SYM(cuMemUnmap), SYM(cuMemSetAccess),
	SYM(cuMemExportToShareableHandle), SYM(cuCtxGetCurrent),
	SYM(cuStreamSynchronize), SYM(cuGetErrorName),
};

static const char *errname(struct kvl_cuda *cu, CUresult r)
{
	const char *s = NULL;

	if (cu->cuGetErrorName(r, &s) || !s)
		s = "CUresult";
	return s;
}

static int cu_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_STUB_LIBRARY:
		return -ENODEV;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_INVALID_CONTEXT:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

static int load(struct kvl_ctx *ctx)
{
	struct kvl_cuda *cu;
	const char *path = getenv("KVPOOL_LIBCUDA");
	size_t i;
	CUresult r;

	if (ctx->cuda)
		return 0;
	cu = calloc(1, sizeof(*cu));
	if (!cu)
		return -ENOMEM;
	cu->lib = dlopen(path && *path ? path : "libcuda.so.1",
			 RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		free(cu);
		kvl_logf(ctx, KVL_LOG_ERR, "device buffers need the CUDA "
			 "driver (libcuda.so.1)");
		return -ENODEV;
	}
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(cu->lib, syms[i].name);

		if (!p) {
			kvl_logf(ctx, KVL_LOG_ERR, "libcuda.so.1 lacks %s",
				 syms[i].name);
			dlclose(cu->lib);
			free(cu);
			return -ENOSYS;
		}
		memcpy((char *)cu + syms[i].off, &p, sizeof(p));
	}
	r = cu->cuInit(0);
	if (r != CUDA_SUCCESS) {
		kvl_logf(ctx, KVL_LOG_ERR, "cuInit: %s", errname(cu, r));
		dlclose(cu->lib);
		free(cu);
		return cu_errno(r);
	}
	ctx->cuda = cu;
	return 0;
}

/* DEVBUF_ADD with fd; sets b->id */
static int add(struct kvl_ctx *ctx, struct kvl_dev_buf *b, int fd)
{
	struct kvp_devbuf q;
	struct kvp_devbuf_reply rep;
	int r;

	memset(&q, 0, sizeof(q));
	memset(&rep, 0, sizeof(rep));
	q.bytes = b->bytes;
	r = kvl_rpc_fd(ctx, KVP_OP_DEVBUF_ADD, &q, sizeof(q), fd, &rep,
		       sizeof(rep), NULL);
	if (r < 0)
		return r;
	b->id = rep.buf_id;
	b->registered = 1;
	return 0;
}

/* the descriptor to pass for b (an export, or the kept copy) */
static int export_fd(struct kvl_ctx *ctx, struct kvl_dev_buf *b, int *fd)
{
	CUresult r;

	if (!b->owned) {
		*fd = b->fd;
		return 0;
	}
	r = ctx->cuda->cuMemExportToShareableHandle(fd, b->h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS) {
		kvl_logf(ctx, KVL_LOG_ERR, "cuMemExportToShareableHandle: %s",
			 errname(ctx->cuda, r));
		return cu_errno(r);
	}
	return 0;
}

static int register_buf(struct kvl_ctx *ctx, struct kvl_dev_buf *b)
{
	int fd = -1, r = export_fd(ctx, b, &fd);

	if (r)
		return r;
	r = add(ctx, b, fd);
	if (b->owned)
		close(fd);
	return r;
}

int kvl_dev_rehello(struct kvl_ctx *ctx)
{
	struct kvl_dev_buf *b;
	int r;

	for (b = ctx->devbufs; b; b = b->next) {
		b->registered = 0;
		r = register_buf(ctx, b);
		if (r < 0)
			return r;
	}
	return 0;
}

static void unmap_owned(struct kvl_ctx *ctx, struct kvl_dev_buf *b)
{
	struct kvl_cuda *cu = ctx->cuda;

	if (b->va) {
		cu->cuMemUnmap(b->va, b->bytes);
		cu->cuMemAddressFree(b->va, b->bytes);
	}
	if (b->h)
		cu->cuMemRelease(b->h);
}

static void buf_destroy(struct kvl_dev_buf *b)
{
	struct kvl_ctx *ctx = b->ctx;
	struct kvl_dev_buf **pp;

	for (pp = &ctx->devbufs; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	if (b->registered && ctx->sock >= 0) {
		struct kvp_devbuf_del q = { .buf_id = b->id };

		kvl_rpc_fd(ctx, KVP_OP_DEVBUF_DEL, &q, sizeof(q), -1, NULL, 0,
			   NULL);
	}
	if (b->owned)
		unmap_owned(ctx, b);
	else if (b->fd >= 0)
		close(b->fd);
	free(b);
}

void kvl_dev_close_all(struct kvl_ctx *ctx)
{
	while (ctx->devbufs)
		buf_destroy(ctx->devbufs);
	if (ctx->cuda) {
		dlclose(ctx->cuda->lib);
		free(ctx->cuda);
		ctx->cuda = NULL;
	}
}

KVL_EXPORT int kvl_dev_buf_create(struct kvl_ctx *ctx, int device,
				  uint64_t bytes, struct kvl_dev_buf **out)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	struct kvl_dev_buf *b;
	struct kvl_cuda *cu;
	size_t gmin = 0, grec = 0, g;
	CUresult cr;
	int r;

	if (!ctx || !out || !bytes || device < 0)
		return -EINVAL;
	*out = NULL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	r = load(ctx);
	if (r)
		return r;
	cu = ctx->cuda;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	cr = cu->cuMemGetAllocationGranularity(&gmin, &prop,
			CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (cr == CUDA_SUCCESS)
		cr = cu->cuMemGetAllocationGranularity(&grec, &prop,
				CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (cr != CUDA_SUCCESS || !gmin) {
		kvl_logf(ctx, KVL_LOG_ERR, "device %d: allocation granularity: "
			 "%s", device, errname(cu, cr));
		return cr ? cu_errno(cr) : -EIO;
	}
	g = grec && grec % gmin == 0 ? grec : gmin;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ctx = ctx;
	b->owned = 1;
	b->fd = -1;
	b->bytes = (bytes + g - 1) / g * g;
	cr = cu->cuMemCreate(&b->h, b->bytes, &prop, 0);
	if (cr != CUDA_SUCCESS) {
		b->h = 0;
		goto fail;
	}
	cr = cu->cuMemAddressReserve(&b->va, b->bytes, g, 0, 0);
	if (cr != CUDA_SUCCESS) {
		b->va = 0;
		goto fail;
	}
	cr = cu->cuMemMap(b->va, b->bytes, 0, b->h, 0);
	if (cr != CUDA_SUCCESS) {
		cu->cuMemAddressFree(b->va, b->bytes);
		b->va = 0;
		goto fail;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	cr = cu->cuMemSetAccess(b->va, b->bytes, &acc, 1);
	if (cr != CUDA_SUCCESS)
		goto fail;
	r = register_buf(ctx, b);
	if (r) {
		unmap_owned(ctx, b);
		free(b);
		return r;
	}
	b->next = ctx->devbufs;
	ctx->devbufs = b;
	*out = b;
	return 0;
fail:
	kvl_logf(ctx, KVL_LOG_ERR, "device buffer of %llu bytes on device %d: "
		 "%s", (unsigned long long)b->bytes, device, errname(cu, cr));
	r = cu_errno(cr);
	unmap_owned(ctx, b);
	free(b);
	return r;
}

KVL_EXPORT int kvl_dev_buf_register(struct kvl_ctx *ctx, int fd,
				    uint64_t bytes, struct kvl_dev_buf **out)
{
	struct kvl_dev_buf *b;
	int r;

	if (!ctx || !out || fd < 0 || !bytes)
		return -EINVAL;
	*out = NULL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ctx = ctx;
	b->bytes = bytes;
	b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (b->fd < 0) {
		r = -errno;
		free(b);
		return r;
	}
	r = register_buf(ctx, b);
	if (r) {
		close(b->fd);
		free(b);
		return r;
	}
	b->next = ctx->devbufs;
	ctx->devbufs = b;
	*out = b;
	return 0;
}

KVL_EXPORT void kvl_dev_buf_free(struct kvl_dev_buf *buf)
{
	if (buf)
		buf_destroy(buf);
}

KVL_EXPORT uint64_t kvl_dev_buf_addr(const struct kvl_dev_buf *buf)
{
	return buf ? buf->va : 0;
}

KVL_EXPORT uint64_t kvl_dev_buf_size(const struct kvl_dev_buf *buf)
{
	return buf ? buf->bytes : 0;
}

/* The caller's inputs on `stream` are complete. */
static int sync_stream(struct kvl_ctx *ctx, void *stream)
{
	CUcontext cur = NULL;
	CUresult r;

	if (!ctx->cuda)
		return 0;	/* registered buffers only: no driver here */
	if (ctx->cuda->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
		return stream ? -EINVAL : 0;	/* no context, no work */
	r = ctx->cuda->cuStreamSynchronize((CUstream)stream);
	if (r != CUDA_SUCCESS) {
		kvl_logf(ctx, KVL_LOG_ERR, "cuStreamSynchronize: %s",
			 errname(ctx->cuda, r));
		return cu_errno(r);
	}
	return 0;
}

static const struct kvl_layout *layout_of(struct kvl_ctx *ctx, int id)
{
	if (id < 0 || (unsigned int)id >= ctx->nlayouts)
		return NULL;
	return &ctx->layouts[id].l;
}

static int kv_dev(struct kvl_ctx *ctx, int layout, uint32_t layer,
		  uint32_t ntok, const uint32_t *blocks,
		  const uint32_t *slots, struct kvl_dev_buf *buf,
		  uint64_t off_k, uint64_t off_v, uint32_t flags, void *stream,
		  bool write)
{
	const struct kvl_layout *l = layout_of(ctx, layout);
	uint64_t row, max_tok, rbytes;
	uint8_t *region;
	uint32_t done = 0;
	int r;

	if (!l || !ntok || !blocks || !slots || !buf || buf->ctx != ctx ||
	    (flags & ~KVL_DEV_BF16) || (!write && flags))
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	r = sync_stream(ctx, stream);
	if (r)
		return r;
	region = kvl_region(ctx, &rbytes);
	row = (uint64_t)l->kv_heads * l->head_dim *
	      ((flags & KVL_DEV_BF16) ? 2 : 4);
	max_tok = (rbytes - 128) / 8;
	if (max_tok > 65536)
		max_tok = 65536;
	while (done < ntok) {
		uint32_t n = ntok - done > max_tok ? (uint32_t)max_tok :
			     ntok - done;
		struct kvp_kv_dev q;
		uint64_t off_s = ((uint64_t)n * 4 + 63) & ~63ULL;

		memset(&q, 0, sizeof(q));
		q.layout_id = ctx->layouts[layout].id;
		q.layer = layer;
		q.ntok = n;
		q.buf_id = buf->id;
		q.off_blocks = 0;
		q.off_slots = off_s;
		memcpy(region, blocks + done, n * 4ULL);
		memcpy(region + off_s, slots + done, n * 4ULL);
		q.dev_k = off_k == KVL_DEV_NONE ? KVP_OFF_NONE :
			  off_k + done * row;
		q.dev_v = off_v == KVL_DEV_NONE ? KVP_OFF_NONE :
			  off_v + done * row;
		q.flags = flags & KVL_DEV_BF16 ? KVP_DEV_BF16 : 0;
		r = kvl_rpc(ctx, write ? KVP_OP_WRITE_KV_DEV :
			    KVP_OP_READ_KV_DEV, &q, sizeof(q), NULL, 0, NULL);
		if (r < 0)
			return r;
		done += n;
	}
	return 0;
}

KVL_EXPORT int kvl_write_kv_dev(struct kvl_ctx *ctx, int layout,
				uint32_t layer, uint32_t ntok,
				const uint32_t *blocks, const uint32_t *slots,
				struct kvl_dev_buf *buf, uint64_t off_k,
				uint64_t off_v, uint32_t flags, void *stream)
{
	if (off_k == KVL_DEV_NONE || off_v == KVL_DEV_NONE)
		return -EINVAL;
	return kv_dev(ctx, layout, layer, ntok, blocks, slots, buf, off_k,
		      off_v, flags, stream, true);
}

KVL_EXPORT int kvl_read_kv_dev(struct kvl_ctx *ctx, int layout, uint32_t layer,
			       uint32_t ntok, const uint32_t *blocks,
			       const uint32_t *slots, struct kvl_dev_buf *buf,
			       uint64_t off_k, uint64_t off_v, void *stream)
{
	if (off_k == KVL_DEV_NONE && off_v == KVL_DEV_NONE)
		return -EINVAL;
	return kv_dev(ctx, layout, layer, ntok, blocks, slots, buf, off_k,
		      off_v, 0, stream, false);
}

KVL_EXPORT int kvl_attention_dev(struct kvl_ctx *ctx, int layout,
				 const struct kvl_attn_args *a,
				 struct kvl_dev_buf *buf, uint64_t off_q,
				 uint64_t off_out, void *stream)
{
	const struct kvl_layout *l = layout_of(ctx, layout);
	uint64_t qrow, per, max_b, rbytes;
	uint32_t done = 0, nq;
	uint8_t *region;
	int r;

	if (!l || !a || !a->batch || !a->q_heads || !a->max_blocks_per_seq ||
	    !a->block_tables || !a->ctx_lens || a->reserved[0] ||
	    a->reserved[1] || !buf || buf->ctx != ctx)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	r = sync_stream(ctx, stream);
	if (r)
		return r;
	region = kvl_region(ctx, &rbytes);
	nq = a->n_new ? a->n_new : 1;
	qrow = (uint64_t)nq * a->q_heads * l->head_dim * sizeof(float);
	per = (uint64_t)a->max_blocks_per_seq * 4 + 4;
	max_b = (rbytes - 128) / per;
	if (max_b > 4096)
		max_b = 4096;
	if (!max_b)
		return -E2BIG;
	while (done < a->batch) {
		uint32_t n = a->batch - done > max_b ? (uint32_t)max_b :
			     a->batch - done;
		uint64_t tb = (uint64_t)n * a->max_blocks_per_seq * 4;
		struct kvp_attn_dev q;

		memset(&q, 0, sizeof(q));
		q.layout_id = ctx->layouts[layout].id;
		q.layer = a->layer;
		q.batch = n;
		q.q_heads = a->q_heads;
		q.max_blocks_per_seq = a->max_blocks_per_seq;
		q.n_new = a->n_new;
		q.scale = a->scale;
		q.buf_id = buf->id;
		q.off_tables = 0;
		q.off_ctx = (tb + 63) & ~63ULL;
		memcpy(region, a->block_tables +
		       (uint64_t)done * a->max_blocks_per_seq, tb);
		memcpy(region + q.off_ctx, a->ctx_lens + done, n * 4ULL);
		q.dev_q = off_q + done * qrow;
		q.dev_out = off_out + done * qrow;
		r = kvl_rpc(ctx, KVP_OP_ATTN_DEV, &q, sizeof(q), NULL, 0,
			    NULL);
		if (r < 0)
			return r;
		done += n;
	}
	return 0;
}
