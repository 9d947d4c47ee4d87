// SPDX-License-Identifier: MIT
/*
 * kvkern_cuda_edit.c - launch the edit kernels (kernels/cuda/kvkern_edit.cu)
 * through the driver API.  The plan of a splice or compaction is made on
 * the host by the CPU ops' own code (kvk_plan_splice, kvk_plan_compact:
 * same checks, same errors, same cos/sin table), the host arrays go into
 * the context's edit scratch (kept between calls), batches of destination
 * blocks run in the plan's order (kvk_edit_gather, then kvk_edit_scatter,
 * for each) on the context's edit stream, and the call synchronises that
 * stream only.  Score: pass 1 on the GPU, the per-row merge of
 * its partials on the host (as the CPU op does it), pass 2 on the GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvkern_cuda.h"
#include "kvkern_cuda_edit_abi.h"
#include "kvkern_edit_internal.h"

/* Stage memory for one batch of destination blocks; $KVPOOL_EDIT_STAGE
 * (bytes) overrides it (the tests use it to run many batches). */
#define EDIT_STAGE_BYTES	(256ULL << 20)

static uint64_t stage_bytes(void)
{
	const char *env = getenv("KVPOOL_EDIT_STAGE");
	unsigned long long v;

	if (env && *env && sscanf(env, "%llu", &v) == 1 && v)
		return v;
	return EDIT_STAGE_BYTES;
}

static int cu_err(struct cuda_drv *drv, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	fprintf(stderr, "kvkern_cuda: %s: %s\n", what,
		cuda_drv_strerror(drv, r));
	return cuda_drv_errno(r);
}

static void elayout(const struct kvk_layout *l, struct kvk_cu_elayout *o)
{
	memset(o, 0, sizeof(*o));
	o->block_bytes = l->block_bytes;
	o->plane_bytes = l->plane_bytes;
	o->meta_offset = l->meta_offset;
	o->layers = l->layers;
	o->kv_heads = l->kv_heads;
	o->head_dim = l->head_dim;
	o->tokens_per_block = l->tokens_per_block;
	o->row_bytes = l->row_bytes;
	o->dtype = l->dtype;
}

/* The call's arrays in the edit scratch, 256-byte aligned. */
struct dbuf {
	CUdeviceptr base;
	CUstream st;
	size_t off;
	struct {
		size_t off, len;
		const void *src;
	} in[8];
	int n;
};

static size_t dbuf_add(struct dbuf *b, const void *src, size_t len)
{
	size_t off = (b->off + 255) & ~(size_t)255;

	b->in[b->n].off = off;
	b->in[b->n].len = len;
	b->in[b->n].src = src;
	b->n++;
	b->off = off + (len ? len : 1);
	return off;
}

/* the arrays into the scratch, queued on the edit stream (from pageable
 * memory: the driver stages the source before the call returns) */
static int dbuf_upload(struct kvk_cuda *c, struct dbuf *b)
{
	struct cuda_drv *drv = kvk_cuda_drv(c);
	int i, ret;

	ret = kvk_cuda_edit_scratch(c, b->off, &b->st, &b->base);
	if (ret)
		return ret;
	for (i = 0; i < b->n; i++) {
		if (!b->in[i].src || !b->in[i].len)
			continue;
		ret = cu_err(drv, drv->cuMemcpyHtoDAsync(b->base + b->in[i].off,
							 b->in[i].src,
							 b->in[i].len, b->st),
			     "cuMemcpyHtoDAsync");
		if (ret)
			return ret;
	}
	return 0;
}

static int launch(struct cuda_drv *drv, CUfunction f, unsigned int gx,
		  unsigned int gy, void *param, CUstream st, const char *what)
{
	void *params[1] = { param };

	return cu_err(drv, drv->cuLaunchKernel(f, gx, gy, 1,
					       KVK_CU_EDIT_THREADS, 1, 1, 0,
					       st, params, NULL), what);
}

static uint64_t al16(uint64_t x)
{
	return (x + 15) & ~15ULL;
}

static int run_edit(struct kvk_cuda *c, const struct kvk_layout *l,
		    CUdeviceptr pool, const uint32_t *table,
		    const struct kvk_edit_plan *p)
{
	struct cuda_drv *drv = kvk_cuda_drv(c);
	uint64_t T = l->tokens_per_block, planes, stride, per, nb, k0;
	uint64_t gsb = l->dtype == KVK_INT4 ? l->head_dim / 16 : 0, ntable;
	struct kvk_cu_edit prm;
	struct dbuf b;
	CUfunction fg, fs;
	size_t o_t, o_k = 0, o_c, o_s, o_st;
	int ret, sr;

	if (!p->ndest)
		return 0;
	planes = (uint64_t)l->layers * 2 * l->kv_heads;
	if (planes > 65535)
		return -EOPNOTSUPP;
	ret = kvk_cuda_function(c, "kvk_edit_gather", &fg);
	if (!ret)
		ret = kvk_cuda_function(c, "kvk_edit_scatter", &fs);
	if (ret)
		return ret;
	stride = al16(T * l->row_bytes) + al16(T * gsb) + al16(T * 4);
	per = planes * stride;
	nb = stage_bytes() / per;
	if (!nb)
		nb = 1;
	if (nb > p->ndest)
		nb = p->ndest;
	ntable = ((p->len > p->new_len ? p->len : p->new_len) + T - 1) / T;
	memset(&b, 0, sizeof(b));
	o_t = dbuf_add(&b, table, ntable * 4);
	if (p->mode == KVK_EDIT_COMPACT)
		o_k = dbuf_add(&b, p->keep, (size_t)p->nkeep * 4);
	o_c = dbuf_add(&b, p->cs, sizeof(p->cs));
	o_s = dbuf_add(&b, p->sn, sizeof(p->sn));
	o_st = dbuf_add(&b, NULL, nb * per);
	ret = dbuf_upload(c, &b);
	if (ret)
		return ret;
	memset(&prm, 0, sizeof(prm));
	elayout(l, &prm.l);
	prm.pool = pool;
	prm.table = b.base + o_t;
	prm.keep = p->mode == KVK_EDIT_COMPACT ? b.base + o_k : 0;
	prm.cs = b.base + o_c;
	prm.sn = b.base + o_s;
	prm.stage = b.base + o_st;
	prm.stage_stride = stride;
	prm.shift = p->shift;
	prm.mode = p->mode;
	prm.new_len = p->new_len;
	prm.at = p->at;
	prm.nins = p->nins;
	prm.rotate = p->rotate;
	prm.style = p->style;
	prm.rd = p->rd;
	prm.nkeep = p->nkeep;
	prm.first = p->first;
	prm.ndest = p->ndest;
	prm.dir = p->dir;
	for (k0 = 0; k0 < p->ndest && !ret; k0 += nb) {
		unsigned int n = (unsigned int)(p->ndest - k0 < nb ?
						p->ndest - k0 : nb);

		prm.k0 = (uint32_t)k0;
		ret = launch(drv, fg, n, (unsigned int)planes, &prm, b.st,
			     "kvk_edit_gather");
		if (!ret)
			ret = launch(drv, fs, n, (unsigned int)planes, &prm,
				     b.st, "kvk_edit_scatter");
	}
	/* also after a failed launch: queued work ends before the call */
	sr = cu_err(drv, drv->cuStreamSynchronize(b.st), "edit");
	return ret ? ret : sr;
}

int kvk_cuda_splice(struct kvk_cuda *c, const struct kvk_splice_args *a)
{
	struct kvk_edit_plan p;
	int ret;

	if (!c)
		return -EINVAL;
	ret = kvk_plan_splice(a, &p);
	if (ret)
		return ret;
	if (a->layout->block_bytes % 16 || (uintptr_t)a->pool_base % 16)
		return -EINVAL;
	return run_edit(c, a->layout, (CUdeviceptr)(uintptr_t)a->pool_base,
			a->block_table, &p);
}

int kvk_cuda_compact(struct kvk_cuda *c, const struct kvk_compact_args *a)
{
	struct kvk_edit_plan p;
	int ret;

	if (!c)
		return -EINVAL;
	ret = kvk_plan_compact(a, &p);
	if (ret)
		return ret;
	if (a->layout->block_bytes % 16 || (uintptr_t)a->pool_base % 16)
		return -EINVAL;
	return run_edit(c, a->layout, (CUdeviceptr)(uintptr_t)a->pool_base,
			a->block_table, &p);
}

int kvk_cuda_score(struct kvk_cuda *c, const struct kvk_score_args *a)
{
	const struct kvk_layout *l;
	struct cuda_drv *drv;
	struct kvk_cu_score prm;
	struct dbuf b;
	CUfunction f1, f2;
	uint32_t H, G, Rh, nchunks, h, r, k;
	int sr;
	size_t o_t, o_q, o_p, o_m, o_o, nparts;
	float *parts = NULL, *ml = NULL;
	int ret = kvk_check_score(a);

	if (ret)
		return ret;
	if (!c)
		return -EINVAL;
	l = a->layout;
	if (l->block_bytes % 16 || (uintptr_t)a->pool_base % 16)
		return -EINVAL;
	drv = kvk_cuda_drv(c);
	ret = kvk_cuda_function(c, "kvk_edit_score_stats", &f1);
	if (!ret)
		ret = kvk_cuda_function(c, "kvk_edit_score_accum", &f2);
	if (ret)
		return ret;
	H = l->kv_heads;
	G = a->q_heads / H;
	Rh = a->n_q * G;
	nchunks = (a->len + KVK_CU_EDIT_THREADS - 1) / KVK_CU_EDIT_THREADS;
	nparts = (size_t)H * nchunks * Rh * 2;
	parts = malloc(sizeof(float) * nparts);
	ml = malloc(sizeof(float) * (size_t)H * Rh * 2);
	if (!parts || !ml) {
		ret = -ENOMEM;
		goto out_host;
	}
	memset(&b, 0, sizeof(b));
	o_t = dbuf_add(&b, a->block_table, (size_t)((a->len +
			l->tokens_per_block - 1) / l->tokens_per_block) * 4);
	o_q = dbuf_add(&b, a->q, (size_t)a->n_q * a->q_heads * l->head_dim *
		       sizeof(float));
	o_p = dbuf_add(&b, NULL, nparts * sizeof(float));
	o_m = dbuf_add(&b, NULL, (size_t)H * Rh * 2 * sizeof(float));
	o_o = dbuf_add(&b, NULL, (size_t)a->len * sizeof(float));
	ret = dbuf_upload(c, &b);
	if (ret)
		goto out_host;
	memset(&prm, 0, sizeof(prm));
	elayout(l, &prm.l);
	prm.pool = (CUdeviceptr)(uintptr_t)a->pool_base;
	prm.table = b.base + o_t;
	prm.q = b.base + o_q;
	prm.parts = b.base + o_p;
	prm.ml = b.base + o_m;
	prm.out = b.base + o_o;
	prm.layer = a->layer;
	prm.q_heads = a->q_heads;
	prm.group = G;
	prm.n_q = a->n_q;
	prm.len = a->len;
	prm.causal = !!(a->flags & KVK_SCORE_CAUSAL);
	prm.want_max = !!(a->flags & KVK_SCORE_MAX);
	prm.nchunks = nchunks;
	prm.scale = a->scale;
	ret = launch(drv, f1, nchunks, H, &prm, b.st, "kvk_edit_score_stats");
	if (!ret)
		ret = cu_err(drv, drv->cuMemcpyDtoHAsync(parts, prm.parts,
							 nparts * sizeof(float),
							 b.st),
			     "cuMemcpyDtoHAsync");
	sr = cu_err(drv, drv->cuStreamSynchronize(b.st), "score");
	ret = ret ? ret : sr;
	if (ret)
		goto out_host;
	/* merge every row's chunks in chunk order (as kvk_score) */
	for (h = 0; h < H; h++)
		for (r = 0; r < Rh; r++) {
			float M = -INFINITY, L = 0.0f;

			for (k = 0; k < nchunks; k++) {
				float m = parts[(((size_t)h * nchunks + k) *
						 Rh + r) * 2];

				if (m > M || m != m)
					M = m;
			}
			for (k = 0; k < nchunks; k++) {
				const float *pp = parts + (((size_t)h * nchunks +
							   k) * Rh + r) * 2;

				if (pp[0] != -INFINITY)
					L += pp[1] * expf(pp[0] - M);
			}
			ml[((size_t)h * Rh + r) * 2] = M;
			ml[((size_t)h * Rh + r) * 2 + 1] = L;
		}
	ret = cu_err(drv, drv->cuMemcpyHtoDAsync(prm.ml, ml, (size_t)H * Rh *
						 2 * sizeof(float), b.st),
		     "cuMemcpyHtoDAsync");
	if (!ret)
		ret = launch(drv, f2, nchunks, 1, &prm, b.st,
			     "kvk_edit_score_accum");
	if (!ret)
		ret = cu_err(drv, drv->cuMemcpyDtoHAsync(a->out, prm.out,
							 (size_t)a->len *
							 sizeof(float), b.st),
			     "cuMemcpyDtoHAsync");
	sr = cu_err(drv, drv->cuStreamSynchronize(b.st), "score");
	ret = ret ? ret : sr;
out_host:
	free(parts);
	free(ml);
	return ret;
}
