// SPDX-License-Identifier: MIT
/*
 * kvkern_cuda.c - launch the CUDA kernels through the driver API.
 *
 * Host arrays are staged into one device scratch buffer owned by the
 * struct kvk_cuda (grown on demand), the kernels run on the default
 * stream, the call synchronises and copies results back.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvkern_cuda.h"
#include "kvkern_cuda_abi.h"
#include "kvkern_internal.h"

#ifndef KVK_FATBIN_DIR
#define KVK_FATBIN_DIR "/usr/local/lib/kvpool"
#endif

#define NDT 4
#define ND 3
#define NR 2

struct kvk_cuda {
	struct cuda_drv *drv;
	CUmodule mod;
	CUfunction f_write, f_read, f_merge, f_bw;
	CUfunction f_attn[NDT][ND][NR];
	CUdeviceptr scratch;
	size_t scratch_bytes;
	int sm_count;
};

static const char *const dt_names[NDT] = { "bf16", "fp8", "int8", "int4" };
static const int d_vals[ND] = { 64, 128, 256 };
static const int r_vals[NR] = { 4, 16 };

static int cu(struct kvk_cuda *c, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	fprintf(stderr, "kvkern_cuda: %s: %s\n", what,
		cuda_drv_strerror(c->drv, r));
	return cuda_drv_errno(r);
}

static void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;
	void *buf = NULL;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return buf;
}

static void *find_fatbin(const char *path, size_t *len)
{
	char exe[PATH_MAX], cand[PATH_MAX + 64];
	const char *env = getenv("KVPOOL_FATBIN");
	static const char *const rel[] = {
		"/../lib/", "/../../lib/", "/../../../lib/",
	};
	void *buf;
	ssize_t n;
	size_t i;

	if (path)
		return read_file(path, len);
	if (env && *env)
		return read_file(env, len);
	buf = read_file("build/lib/" KVK_FATBIN_NAME, len);
	if (buf)
		return buf;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			snprintf(cand, sizeof(cand), "%s%s%s", exe, rel[i],
				 KVK_FATBIN_NAME);
			buf = read_file(cand, len);
			if (buf)
				return buf;
		}
	}
	return read_file(KVK_FATBIN_DIR "/" KVK_FATBIN_NAME, len);
}

void kvk_cuda_free(struct kvk_cuda *c)
{
	if (!c)
		return;
	if (c->scratch)
		c->drv->cuMemFree(c->scratch);
	if (c->mod)
		c->drv->cuModuleUnload(c->mod);
	free(c);
}

int kvk_cuda_init(struct kvk_cuda **out, struct cuda_drv *drv,
		  const char *fatbin_path)
{
	struct kvk_cuda *c;
	CUdevice dev;
	size_t len = 0;
	void *img;
	char name[64];
	int i, j, k, ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!drv || !drv->lib)
		return -ENODEV;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->drv = drv;
	img = find_fatbin(fatbin_path, &len);
	if (!img) {
		free(c);
		return -ENOENT;
	}
	ret = cu(c, drv->cuModuleLoadData(&c->mod, img), "cuModuleLoadData");
	free(img);
	if (ret)
		goto fail;
	ret = cu(c, drv->cuModuleGetFunction(&c->f_write, c->mod, "kvk_write"),
		 "kvk_write");
	ret = ret ? ret : cu(c, drv->cuModuleGetFunction(&c->f_read, c->mod,
			     "kvk_read"), "kvk_read");
	ret = ret ? ret : cu(c, drv->cuModuleGetFunction(&c->f_merge, c->mod,
			     "kvk_merge"), "kvk_merge");
	ret = ret ? ret : cu(c, drv->cuModuleGetFunction(&c->f_bw, c->mod,
			     "kvk_read_bw"), "kvk_read_bw");
	for (i = 0; !ret && i < NDT; i++)
		for (j = 0; !ret && j < ND; j++)
			for (k = 0; !ret && k < NR; k++) {
				snprintf(name, sizeof(name), "kvk_attn_%s_d%d_r%d",
					 dt_names[i], d_vals[j], r_vals[k]);
				ret = cu(c, drv->cuModuleGetFunction(
					 &c->f_attn[i][j][k], c->mod, name), name);
			}
	if (ret)
		goto fail;
	c->sm_count = 32;
	if (drv->cuCtxGetDevice(&dev) == CUDA_SUCCESS)
		drv->cuDeviceGetAttribute(&c->sm_count,
			CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (c->sm_count <= 0)
		c->sm_count = 32;
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

int kvk_cuda_sm_count(const struct kvk_cuda *c)
{
	return c ? c->sm_count : 0;
}

/* ---- staging ---- */

struct stage {
	size_t off;
	struct {
		size_t off, len;
		const void *src;
	} in[12];
	int n;
};

static size_t stage_add(struct stage *s, const void *src, size_t len)
{
	size_t off = (s->off + 255) & ~(size_t)255;

	s->in[s->n].off = off;
	s->in[s->n].len = len;
	s->in[s->n].src = src;
	s->n++;
	s->off = off + (len ? len : 1);
	return off;
}

static size_t stage_reserve(struct stage *s, size_t len)
{
	return stage_add(s, NULL, len);
}

static int stage_upload(struct kvk_cuda *c, struct stage *s)
{
	int i, ret;

	if (s->off > c->scratch_bytes) {
		size_t want = s->off + s->off / 4 + (1 << 20);

		if (c->scratch)
			c->drv->cuMemFree(c->scratch);
		c->scratch = 0;
		c->scratch_bytes = 0;
		ret = cu(c, c->drv->cuMemAlloc(&c->scratch, want), "cuMemAlloc");
		if (ret)
			return ret;
		c->scratch_bytes = want;
	}
	for (i = 0; i < s->n; i++) {
		if (!s->in[i].src || !s->in[i].len)
			continue;
		ret = cu(c, c->drv->cuMemcpyHtoD(c->scratch + s->in[i].off,
						 s->in[i].src, s->in[i].len),
			 "cuMemcpyHtoD");
		if (ret)
			return ret;
	}
	return 0;
}

static int launch(struct kvk_cuda *c, CUfunction f, unsigned int gx,
		  unsigned int gy, unsigned int gz, unsigned int threads,
		  void *param)
{
	void *params[1] = { param };

	return cu(c, c->drv->cuLaunchKernel(f, gx, gy, gz, threads, 1, 1, 0,
					    NULL, params, NULL),
		  "cuLaunchKernel");
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

/* The kernels use 16-byte vector loads: blocks must keep 16-byte
 * alignment. */
static int check_align(const struct kvk_layout *l, uint64_t pool)
{
	if (!l || l->block_bytes % 16 || pool % 16)
		return -EINVAL;
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

static int write_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		    CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		    const uint32_t *blocks, const uint32_t *slots,
		    const void *k, const void *v, int bf16, uint32_t flags)
{
	struct kvk_cu_write p;
	struct stage s = { 0 };
	struct tref *refs;
	uint32_t *grp_block, *grp_start, *tok_idx, ng = 0, i;
	size_t in_bytes;
	size_t o_gb, o_gs, o_ti, o_sl, o_k, o_v;
	int ret;

	if (!c || (flags & ~KVK_WRITE_FLAGS))
		return -EINVAL;
	ret = kvk_check_write(l, layer, ntok, blocks, slots, k, v);
	if (ret || !ntok)
		return ret;
	if (!pool || check_align(l, pool))
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
	o_gb = stage_add(&s, grp_block, sizeof(uint32_t) * ng);
	o_gs = stage_add(&s, grp_start, sizeof(uint32_t) * (ng + 1));
	o_ti = stage_add(&s, tok_idx, sizeof(uint32_t) * ntok);
	o_sl = stage_add(&s, slots, sizeof(uint32_t) * ntok);
	o_k = stage_add(&s, k, in_bytes);
	o_v = stage_add(&s, v, in_bytes);
	ret = stage_upload(c, &s);
	if (!ret) {
		memset(&p, 0, sizeof(p));
		cu_layout(l, layer, &p.l);
		p.pool = pool;
		p.k = c->scratch + o_k;
		p.v = c->scratch + o_v;
		p.grp_block = c->scratch + o_gb;
		p.grp_start = c->scratch + o_gs;
		p.tok_idx = c->scratch + o_ti;
		p.slots = c->scratch + o_sl;
		p.ngroups = ng;
		p.bf16_in = bf16;
		p.flags = flags;
		ret = launch(c, c->f_write, ng, 2 * l->kv_heads, 1,
			     KVK_CU_THREADS, &p);
	}
	if (!ret)
		ret = cu(c, c->drv->cuCtxSynchronize(), "write");
	free(refs);
	free(grp_block);
	return ret;
}

int kvk_cuda_write_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		      CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		      const uint32_t *blocks, const uint32_t *slots,
		      const float *k, const float *v)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0, 0);
}

int kvk_cuda_write_kv_flags(struct kvk_cuda *c, const struct kvk_layout *l,
			    CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			    const uint32_t *blocks, const uint32_t *slots,
			    const float *k, const float *v, uint32_t flags)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 0,
			flags);
}

int kvk_cuda_write_kv_bf16(struct kvk_cuda *c, const struct kvk_layout *l,
			   CUdeviceptr pool, uint32_t layer, uint32_t ntok,
			   const uint32_t *blocks, const uint32_t *slots,
			   const uint16_t *k, const uint16_t *v)
{
	return write_kv(c, l, pool, layer, ntok, blocks, slots, k, v, 1, 0);
}

int kvk_cuda_read_kv(struct kvk_cuda *c, const struct kvk_layout *l,
		     CUdeviceptr pool, uint32_t layer, uint32_t ntok,
		     const uint32_t *blocks, const uint32_t *slots,
		     float *k, float *v)
{
	struct kvk_cu_read p;
	struct stage s = { 0 };
	size_t bytes, o_b, o_s, o_k, o_v;
	int ret;

	if (!c)
		return -EINVAL;
	ret = kvk_check_write(l, layer, ntok, blocks, slots,
			      k ? (void *)k : (void *)v,
			      v ? (void *)v : (void *)k);
	if (ret || !ntok)
		return ret;
	if (!pool || check_align(l, pool))
		return -EINVAL;
	bytes = (size_t)ntok * l->kv_heads * l->head_dim * sizeof(float);
	o_b = stage_add(&s, blocks, sizeof(uint32_t) * ntok);
	o_s = stage_add(&s, slots, sizeof(uint32_t) * ntok);
	o_k = stage_reserve(&s, bytes);
	o_v = stage_reserve(&s, bytes);
	ret = stage_upload(c, &s);
	if (ret)
		return ret;
	memset(&p, 0, sizeof(p));
	cu_layout(l, layer, &p.l);
	p.pool = pool;
	p.blocks = c->scratch + o_b;
	p.slots = c->scratch + o_s;
	p.k = c->scratch + o_k;
	p.v = c->scratch + o_v;
	ret = launch(c, c->f_read, ntok, 2 * l->kv_heads, 1, l->head_dim, &p);
	if (!ret)
		ret = cu(c, c->drv->cuCtxSynchronize(), "read");
	if (!ret && k)
		ret = cu(c, c->drv->cuMemcpyDtoH(k, c->scratch + o_k, bytes),
			 "cuMemcpyDtoH");
	if (!ret && v)
		ret = cu(c, c->drv->cuMemcpyDtoH(v, c->scratch + o_v, bytes),
			 "cuMemcpyDtoH");
	return ret;
}

/* ---- attention ---- */

struct attn_plan {
	struct kvk_cu_attn a;
	struct kvk_cu_merge m;
	CUfunction f;
	uint32_t batch;
	size_t parts_bytes, q_bytes, out_bytes;
};

static int plan_attn(struct kvk_cuda *c, const struct kvk_layout *l,
		     uint32_t layer, uint32_t batch, uint32_t q_heads,
		     uint32_t mbps, uint32_t n_q, const uint32_t *ctx,
		     float scale, struct attn_plan *pl)
{
	uint32_t G = q_heads / l->kv_heads, H = l->kv_heads;
	uint32_t nq1 = n_q ? n_q : 1, qb, nqb, b, max_end = 0, nsplit;
	uint64_t ctas, target;
	int di, ri;

	switch (l->head_dim) {
	case 64:
		di = 0;
		break;
	case 128:
		di = 1;
		break;
	case 256:
		di = 2;
		break;
	default:
		return -EOPNOTSUPP;
	}
	qb = 16 / G;
	if (qb > nq1)
		qb = nq1;
	nqb = (nq1 + qb - 1) / qb;
	ri = qb * G <= 4 ? 0 : 1;
	for (b = 0; b < batch; b++) {
		uint32_t e = ctx[b];	/* prefill: last block ends at ctx */

		if (e > max_end)
			max_end = e;
	}
	ctas = (uint64_t)H * batch * nqb;
	target = (uint64_t)c->sm_count * 4;
	nsplit = (uint32_t)((target + ctas - 1) / ctas);
	if (nsplit > (max_end + 255) / 256)
		nsplit = (max_end + 255) / 256;
	if (nsplit < 1)
		nsplit = 1;
	if (nsplit > 65535)
		nsplit = 65535;
	memset(pl, 0, sizeof(*pl));
	cu_layout(l, layer, &pl->a.l);
	pl->a.q_heads = q_heads;
	pl->a.group = G;
	pl->a.n_q = n_q;
	pl->a.mbps = mbps;
	pl->a.nqb = nqb;
	pl->a.qb = qb;
	pl->a.nsplit = nsplit;
	pl->a.chunk = (max_end + nsplit - 1) / nsplit;
	if (!pl->a.chunk)
		pl->a.chunk = 1;
	pl->a.scale = scale;
	pl->m.kv_heads = H;
	pl->m.head_dim = l->head_dim;
	pl->m.q_heads = q_heads;
	pl->m.group = G;
	pl->m.n_q = n_q;
	pl->m.nqb = nqb;
	pl->m.qb = qb;
	pl->m.nsplit = nsplit;
	pl->f = c->f_attn[l->dtype - 1][di][ri];
	pl->batch = batch;
	pl->parts_bytes = (size_t)batch * nqb * H * nsplit * qb * G *
			  (l->head_dim + 2) * sizeof(float);
	pl->q_bytes = (size_t)batch * nq1 * q_heads * l->head_dim *
		      sizeof(float);
	pl->out_bytes = pl->q_bytes;
	return 0;
}

static int launch_attn(struct kvk_cuda *c, struct attn_plan *pl)
{
	uint32_t H = pl->a.l.kv_heads;
	int ret;

	ret = launch(c, pl->f, H, pl->batch * pl->a.nqb, pl->a.nsplit,
		     KVK_CU_THREADS, &pl->a);
	if (ret)
		return ret;
	pl->m.parts = pl->a.parts;
	return launch(c, c->f_merge, pl->batch * pl->a.nqb * H, 1, 1,
		      KVK_CU_THREADS, &pl->m);
}

static int run_attn(struct kvk_cuda *c, const struct kvk_layout *l,
		    void *pool, uint32_t layer, uint32_t batch,
		    uint32_t q_heads, uint32_t mbps, uint32_t n_q,
		    const float *q, const uint32_t *bt, const uint32_t *ctx,
		    float scale, float *out)
{
	struct attn_plan pl;
	struct stage s = { 0 };
	size_t o_q, o_t, o_c, o_p, o_o;
	int ret;

	if (check_align(l, (uint64_t)(uintptr_t)pool))
		return -EINVAL;
	ret = plan_attn(c, l, layer, batch, q_heads, mbps, n_q, ctx, scale,
			&pl);
	if (ret)
		return ret;
	o_q = stage_add(&s, q, pl.q_bytes);
	o_t = stage_add(&s, bt, sizeof(uint32_t) * batch * mbps);
	o_c = stage_add(&s, ctx, sizeof(uint32_t) * batch);
	o_p = stage_reserve(&s, pl.parts_bytes);
	o_o = stage_reserve(&s, pl.out_bytes);
	ret = stage_upload(c, &s);
	if (ret)
		return ret;
	pl.a.pool = (uint64_t)(uintptr_t)pool;
	pl.a.q = c->scratch + o_q;
	pl.a.tables = c->scratch + o_t;
	pl.a.ctx = c->scratch + o_c;
	pl.a.parts = c->scratch + o_p;
	pl.m.out = c->scratch + o_o;
	ret = launch_attn(c, &pl);
	if (!ret)
		ret = cu(c, c->drv->cuCtxSynchronize(), "attention");
	if (!ret)
		ret = cu(c, c->drv->cuMemcpyDtoH(out, c->scratch + o_o,
						 pl.out_bytes), "cuMemcpyDtoH");
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
			a->block_tables, a->ctx_lens, a->scale, a->out);
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
			a->block_tables, a->ctx_lens, a->scale, a->out);
}

/*
 * Benchmark hook: arrays already in device memory.  ctx_lens must still
 * be readable on the host for planning, so a->ctx_lens is a HOST array
 * here and a->block_tables, a->q, a->out device addresses; the context
 * lengths are uploaded into the scratch buffer.
 */
int kvk_cuda_decode_dev(struct kvk_cuda *c, const struct kvk_decode_args *a)
{
	struct attn_plan pl;
	struct stage s = { 0 };
	size_t o_c, o_p;
	int ret;

	if (!c || !a || !a->layout || !a->batch ||
	    check_align(a->layout, (uint64_t)(uintptr_t)a->pool_base))
		return -EINVAL;
	ret = plan_attn(c, a->layout, a->layer, a->batch, a->q_heads,
			a->max_blocks_per_seq, 0, a->ctx_lens, a->scale, &pl);
	if (ret)
		return ret;
	o_c = stage_add(&s, a->ctx_lens, sizeof(uint32_t) * a->batch);
	o_p = stage_reserve(&s, pl.parts_bytes);
	ret = stage_upload(c, &s);
	if (ret)
		return ret;
	pl.a.pool = (uint64_t)(uintptr_t)a->pool_base;
	pl.a.q = (uint64_t)(uintptr_t)a->q;
	pl.a.tables = (uint64_t)(uintptr_t)a->block_tables;
	pl.a.ctx = c->scratch + o_c;
	pl.a.parts = c->scratch + o_p;
	pl.m.out = (uint64_t)(uintptr_t)a->out;
	return launch_attn(c, &pl);
}

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
		ret = cu(c, c->drv->cuMemcpyDtoD(pool + dst[i] * block_bytes,
						 pool + src[i] * block_bytes,
						 block_bytes), "cuMemcpyDtoD");
		if (ret)
			return ret;
	}
	return cu(c, c->drv->cuCtxSynchronize(), "copy");
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int kvk_cuda_read_bw(struct kvk_cuda *c, CUdeviceptr src, size_t bytes,
		     int iters, double *gbps)
{
	struct kvk_cu_bw p;
	struct stage s = { 0 };
	unsigned int grid;
	size_t o_s;
	double t0, t;
	int i, ret;

	if (!c || !src || !gbps || iters < 1)
		return -EINVAL;
	grid = (unsigned int)c->sm_count * 8;
	o_s = stage_reserve(&s, sizeof(uint32_t) * grid);
	ret = stage_upload(c, &s);
	if (ret)
		return ret;
	p.src = src;
	p.bytes = bytes;
	p.sink = c->scratch + o_s;
	ret = launch(c, c->f_bw, grid, 1, 1, 512, &p);	/* warm-up */
	ret = ret ? ret : cu(c, c->drv->cuCtxSynchronize(), "bw");
	if (ret)
		return ret;
	t0 = now_s();
	for (i = 0; i < iters && !ret; i++)
		ret = launch(c, c->f_bw, grid, 1, 1, 512, &p);
	ret = ret ? ret : cu(c, c->drv->cuCtxSynchronize(), "bw");
	t = now_s() - t0;
	if (!ret)
		*gbps = t > 0 ? (double)bytes * iters / t / 1e9 : 0;
	return ret;
}
