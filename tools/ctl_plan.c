// SPDX-License-Identifier: MIT
/*
 * ctl_plan.c - `kvpoolctl plan`: the KV-cache capacity arithmetic of
 * DESIGN section 1 for a model preset or an explicit layout.
 *
 *   bytes per token   = 2 (K and V) x layers x kv_heads x head_dim x bytes
 *                       per element (int4: 0.5 byte per element plus one
 *                       FP16 scale per group of 32 values of a row)
 *   bytes per request = bytes per token x ctx
 *   blocks            = ceil(ctx / tokens per block)
 *
 * Per GPU with tensor parallelism tp, each GPU holds kv_heads / tp heads
 * (one head, replicated, when tp > kv_heads) and weights / tp bytes.
 *
 * kvpoold's default capacity on the cuda backend, from the memory free
 * when it starts (here gpu_mem - weights per GPU - overhead, what the
 * engines hold) less its reserve:
 *   kvpoold_capacity  = floor((free - reserve) / block_bytes)
 *                       (at most KVPOOL_MAX_CAPACITY)
 * the same arithmetic as daemon/backend_cuda.c (--reserve-bytes, 1 GiB by
 * default there and here).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/kvpool.h>

#include "kvpoolctl.h"

struct model_preset {
	const char *name;
	unsigned int layers, kv_heads, head_dim, q_heads;
	unsigned int max_ctx;
	uint64_t params;	/* parameter count; BF16 weights = 2 x params */
};

/* Layouts from the models' published config.json files. */
static const struct model_preset presets[] = {
	{ "llama-3.2-1b",   16,  8,  64,  32, 131072,   1235814400ULL },
	{ "llama-3.2-3b",   28,  8, 128,  24, 131072,   3212749824ULL },
	{ "llama-3.1-8b",   32,  8, 128,  32, 131072,   8030261248ULL },
	{ "llama-3.1-70b",  80,  8, 128,  64, 131072,  70553706496ULL },
	{ "llama-3.1-405b", 126, 8, 128, 128, 131072, 405853388800ULL },
	{ "qwen2.5-7b",     28,  4, 128,  28,  32768,   7615616512ULL },
	{ "qwen2.5-72b",    80,  8, 128,  64,  32768,  72706203648ULL },
	{ "mistral-7b",     32,  8, 128,  32,  32768,   7248023552ULL },
};

#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

enum plan_dtype { PD_BF16, PD_FP8, PD_INT8, PD_INT4 };
static const char *const dtype_names[] = { "bf16", "fp8", "int8", "int4" };

#define INT4_GROUP 32

struct plan {
	const char *model;
	uint32_t layers, kv_heads, head_dim;
	enum plan_dtype dtype;
	uint64_t ctx;
	uint64_t block_bytes_opt, block_tokens_opt;
	uint64_t gpu_mem, weights, overhead, reserve;
	uint32_t tp;
	double util;
	/* results */
	uint32_t kv_heads_gpu;
	uint64_t bytes_per_token, bytes_per_request;
	uint64_t bytes_per_token_gpu, bytes_per_request_gpu;
	uint64_t block_meta, block_bytes, tokens_per_block, blocks_per_request;
	uint64_t weights_gpu;
	int64_t kv_room;		/* gpu_mem - weights_gpu - overhead */
	uint64_t blocks_fit, requests_fit, tokens_fit;
	uint64_t util_claim;		/* util x gpu_mem, claimed at start-up */
	int64_t util_kv;		/* util x gpu_mem - weights - overhead */
	uint64_t util_requests, util_tokens;
	uint64_t kvpoold_capacity;	/* blocks, 0: no room */
};

/* Bytes of one row (one token, one head, K or V) of head_dim values. */
static uint64_t row_bytes(enum plan_dtype dt, uint64_t head_dim)
{
	switch (dt) {
	case PD_BF16:
		return 2 * head_dim;
	case PD_FP8:
	case PD_INT8:
		return head_dim;
	case PD_INT4:
		return head_dim / 2 +
		       2 * ((head_dim + INT4_GROUP - 1) / INT4_GROUP);
	}
	return 0;
}

/* Per-block metadata: FP8/INT8 carry one FP32 scale per (layer, K|V, head). */
static uint64_t block_meta_bytes(enum plan_dtype dt, uint64_t layers,
				 uint64_t kv_heads)
{
	if (dt == PD_FP8 || dt == PD_INT8)
		return 2 * layers * kv_heads * 4;
	return 0;
}

static int plan_compute(struct plan *p)
{
	uint64_t kvh = p->kv_heads;

	if (p->tp == 0)
		return -EINVAL;
	if (kvh >= p->tp) {
		if (kvh % p->tp)
			return -EINVAL;
		p->kv_heads_gpu = (uint32_t)(kvh / p->tp);
	} else {
		if (p->tp % kvh)
			return -EINVAL;
		p->kv_heads_gpu = 1;	/* replicated across tp / kv_heads GPUs */
	}
	p->bytes_per_token = 2 * (uint64_t)p->layers * kvh *
			     row_bytes(p->dtype, p->head_dim);
	p->bytes_per_request = p->bytes_per_token * p->ctx;
	p->bytes_per_token_gpu = 2 * (uint64_t)p->layers * p->kv_heads_gpu *
				 row_bytes(p->dtype, p->head_dim);
	p->bytes_per_request_gpu = p->bytes_per_token_gpu * p->ctx;

	/* Blocks live in one GPU's pool: size them for the per-GPU layout. */
	p->block_meta = block_meta_bytes(p->dtype, p->layers, p->kv_heads_gpu);
	if (p->block_bytes_opt) {
		p->block_bytes = p->block_bytes_opt;
		if (p->block_bytes <= p->block_meta)
			return -ENOSPC;
		p->tokens_per_block = (p->block_bytes - p->block_meta) /
				      p->bytes_per_token_gpu;
		if (!p->tokens_per_block)
			return -ENOSPC;
	} else {
		p->tokens_per_block = p->block_tokens_opt;
		p->block_bytes = p->block_meta +
				 p->tokens_per_block * p->bytes_per_token_gpu;
		/* pools take multiples of 256 bytes */
		p->block_bytes = (p->block_bytes + 255) / 256 * 256;
	}
	p->blocks_per_request = (p->ctx + p->tokens_per_block - 1) /
				p->tokens_per_block;

	p->weights_gpu = (p->weights + p->tp - 1) / p->tp;
	p->kv_room = (int64_t)p->gpu_mem - (int64_t)p->weights_gpu -
		     (int64_t)p->overhead;
	if (p->kv_room > 0) {
		p->blocks_fit = (uint64_t)p->kv_room / p->block_bytes;
		p->requests_fit = p->blocks_per_request ?
				  p->blocks_fit / p->blocks_per_request : 0;
		p->tokens_fit = p->blocks_fit * p->tokens_per_block;
	}
	if (p->kv_room > 0 && (uint64_t)p->kv_room > p->reserve) {
		p->kvpoold_capacity = ((uint64_t)p->kv_room - p->reserve) /
				      p->block_bytes;
		if (p->kvpoold_capacity > KVPOOL_MAX_CAPACITY)
			p->kvpoold_capacity = KVPOOL_MAX_CAPACITY;
	}
	p->util_claim = (uint64_t)floor(p->util * (double)p->gpu_mem);
	p->util_kv = (int64_t)p->util_claim - (int64_t)p->weights_gpu -
		     (int64_t)p->overhead;
	if (p->util_kv > 0) {
		uint64_t blocks = (uint64_t)p->util_kv / p->block_bytes;

		p->util_requests = p->blocks_per_request ?
				   blocks / p->blocks_per_request : 0;
		p->util_tokens = blocks * p->tokens_per_block;
	}
	return 0;
}

static void plan_json(const struct plan *p)
{
	struct jw w;

	jw_init(&w, stdout);
	jw_obj(&w, NULL);
	jw_str(&w, "model", p->model ? p->model : "custom");
	jw_u64(&w, "layers", p->layers);
	jw_u64(&w, "kv_heads", p->kv_heads);
	jw_u64(&w, "head_dim", p->head_dim);
	jw_str(&w, "dtype", dtype_names[p->dtype]);
	jw_u64(&w, "ctx", p->ctx);
	jw_u64(&w, "bytes_per_token", p->bytes_per_token);
	jw_u64(&w, "bytes_per_request", p->bytes_per_request);
	jw_u64(&w, "tp", p->tp);
	jw_u64(&w, "kv_heads_per_gpu", p->kv_heads_gpu);
	jw_u64(&w, "bytes_per_token_per_gpu", p->bytes_per_token_gpu);
	jw_u64(&w, "bytes_per_request_per_gpu", p->bytes_per_request_gpu);
	jw_u64(&w, "block_bytes", p->block_bytes);
	jw_u64(&w, "block_meta_bytes", p->block_meta);
	jw_u64(&w, "tokens_per_block", p->tokens_per_block);
	jw_u64(&w, "blocks_per_request", p->blocks_per_request);
	jw_u64(&w, "gpu_mem_bytes", p->gpu_mem);
	jw_u64(&w, "weights_bytes", p->weights);
	jw_u64(&w, "weights_bytes_per_gpu", p->weights_gpu);
	jw_u64(&w, "overhead_bytes", p->overhead);
	jw_u64(&w, "kv_bytes_per_gpu", p->kv_room > 0 ? (uint64_t)p->kv_room : 0);
	jw_u64(&w, "blocks_fit", p->blocks_fit);
	jw_u64(&w, "reserve_bytes", p->reserve);
	jw_u64(&w, "kvpoold_capacity", p->kvpoold_capacity);
	jw_u64(&w, "tokens_fit", p->tokens_fit);
	jw_u64(&w, "requests_fit", p->requests_fit);
	jw_dbl(&w, "util", p->util);
	jw_u64(&w, "util_claimed_bytes_per_gpu", p->util_claim);
	jw_u64(&w, "util_kv_bytes_per_gpu",
	       p->util_kv > 0 ? (uint64_t)p->util_kv : 0);
	jw_u64(&w, "util_tokens_fit", p->util_tokens);
	jw_u64(&w, "util_requests_fit", p->util_requests);
	jw_bool(&w, "util_leaves_nothing", p->util_kv <= 0);
	jw_obj_end(&w);
	jw_end(&w);
}

static void plan_text(const struct plan *p)
{
	char a[48], b[48], c[48], d[48];

	printf("model        %s: %u layers, %u KV heads, head_dim %u, %s\n",
	       p->model ? p->model : "custom", p->layers, p->kv_heads,
	       p->head_dim, dtype_names[p->dtype]);
	printf("per token    %s B  (2 x %u x %u x %u values, %s)\n",
	       ctl_commas(p->bytes_per_token, a, sizeof(a)), p->layers,
	       p->kv_heads, p->head_dim,
	       p->dtype == PD_BF16 ? "2 B each" :
	       p->dtype == PD_INT4 ? "0.5 B each + FP16 scale per 32" :
	       "1 B each");
	printf("per request  %s B (%s) at %s tokens\n",
	       ctl_commas(p->bytes_per_request, a, sizeof(a)),
	       ctl_human(p->bytes_per_request, b, sizeof(b)),
	       ctl_commas(p->ctx, c, sizeof(c)));
	if (p->tp > 1)
		printf("per GPU      tp %u: %u KV head(s) per GPU, %s B per token, %s per request\n",
		       p->tp, p->kv_heads_gpu,
		       ctl_commas(p->bytes_per_token_gpu, a, sizeof(a)),
		       ctl_human(p->bytes_per_request_gpu, b, sizeof(b)));
	printf("blocks       %s tokens per block of %s B (%s%s): %s blocks per request\n",
	       ctl_commas(p->tokens_per_block, a, sizeof(a)),
	       ctl_commas(p->block_bytes, b, sizeof(b)),
	       ctl_human(p->block_bytes, c, sizeof(c)),
	       p->block_meta ? ", incl. scales" : "",
	       ctl_commas(p->blocks_per_request, d, sizeof(d)));
	printf("GPU          %s each, weights %s per GPU%s\n",
	       ctl_human(p->gpu_mem, a, sizeof(a)),
	       ctl_human(p->weights_gpu, b, sizeof(b)),
	       p->overhead ? ", plus overhead" : "");
	if (p->kv_room > 0)
		printf("kvpool       %s left for KV per GPU: %s blocks, %s tokens, %s full-length requests\n",
		       ctl_human((uint64_t)p->kv_room, a, sizeof(a)),
		       ctl_commas(p->blocks_fit, b, sizeof(b)),
		       ctl_commas(p->tokens_fit, c, sizeof(c)),
		       ctl_commas(p->requests_fit, d, sizeof(d)));
	else
		printf("kvpool       nothing left for KV: the weights do not fit in one GPU's memory (try --tp)\n");
	printf("kvpoold      default capacity on this GPU: %s blocks (free memory at start less the %s reserve)\n",
	       ctl_commas(p->kvpoold_capacity, a, sizeof(a)),
	       ctl_human(p->reserve, b, sizeof(b)));
	printf("util %.2f    claims %s per GPU at start-up, idle or not; ",
	       p->util, ctl_human(p->util_claim, a, sizeof(a)));
	if (p->util_kv > 0)
		printf("leaves %s for KV: %s tokens, %s full-length requests\n",
		       ctl_human((uint64_t)p->util_kv, b, sizeof(b)),
		       ctl_commas(p->util_tokens, c, sizeof(c)),
		       ctl_commas(p->util_requests, d, sizeof(d)));
	else
		printf("leaves NOTHING for KV (weights %s > %.2f x %s)\n",
		       ctl_human(p->weights_gpu, b, sizeof(b)), p->util,
		       ctl_human(p->gpu_mem, c, sizeof(c)));
}

static void plan_usage(FILE *f)
{
	size_t i;

	fputs("usage: kvpoolctl plan [--model NAME | --layers N --kv-heads N --head-dim N]\n"
	      "                      [--ctx TOKENS] [--dtype bf16|fp8|int8|int4]\n"
	      "                      [--block-tokens N | --block-bytes BYTES]\n"
	      "                      [--gpu-mem BYTES] [--tp N] [--weights-bytes BYTES]\n"
	      "                      [--overhead BYTES] [--util FRACTION]\n"
	      "                      [--reserve-bytes BYTES] [--json]\n"
	      "       kvpoolctl plan --list-models [--json]\n"
	      "Sizes take suffixes k M G T (x1000) or Ki Mi Gi Ti (x1024), e.g. 80GiB.\n"
	      "Defaults: --ctx the model's maximum context (8192 for explicit\n"
	      "layouts), --dtype bf16, --block-tokens 16, --gpu-mem 80GiB, --tp 1,\n"
	      "--weights-bytes 2 x parameters of the preset (0 for explicit layouts),\n"
	      "--overhead 0, --util 0.9, --reserve-bytes 1GiB (kvpoold's default).\n"
	      "Models:", f);
	for (i = 0; i < N_PRESETS; i++)
		fprintf(f, " %s", presets[i].name);
	fputc('\n', f);
}

static int list_models(void)
{
	size_t i;

	if (ctl_g.json) {
		struct jw w;

		jw_init(&w, stdout);
		jw_arr(&w, NULL);
		for (i = 0; i < N_PRESETS; i++) {
			jw_obj(&w, NULL);
			jw_str(&w, "model", presets[i].name);
			jw_u64(&w, "layers", presets[i].layers);
			jw_u64(&w, "kv_heads", presets[i].kv_heads);
			jw_u64(&w, "head_dim", presets[i].head_dim);
			jw_u64(&w, "q_heads", presets[i].q_heads);
			jw_u64(&w, "max_ctx", presets[i].max_ctx);
			jw_u64(&w, "weights_bytes", 2 * presets[i].params);
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
		jw_end(&w);
		return CTL_EXIT_OK;
	}
	printf("%-16s %6s %8s %8s %8s %16s\n", "MODEL", "LAYERS", "KV_HEADS",
	       "HEAD_DIM", "MAX_CTX", "BF16_WEIGHTS");
	for (i = 0; i < N_PRESETS; i++) {
		char h[32];

		printf("%-16s %6u %8u %8u %8u %16s\n", presets[i].name,
		       presets[i].layers, presets[i].kv_heads,
		       presets[i].head_dim, presets[i].max_ctx,
		       ctl_human(2 * presets[i].params, h, sizeof(h)));
	}
	return CTL_EXIT_OK;
}

enum {
	OPT_MODEL = 256, OPT_LAYERS, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_CTX,
	OPT_DTYPE, OPT_BLOCK_BYTES, OPT_BLOCK_TOKENS, OPT_GPU_MEM, OPT_TP,
	OPT_WEIGHTS, OPT_UTIL, OPT_OVERHEAD, OPT_LIST, OPT_JSON, OPT_HELP,
	OPT_RESERVE,
};

static const struct option plan_opts[] = {
	{ "model",         required_argument, NULL, OPT_MODEL },
	{ "layers",        required_argument, NULL, OPT_LAYERS },
	{ "kv-heads",      required_argument, NULL, OPT_KV_HEADS },
	{ "head-dim",      required_argument, NULL, OPT_HEAD_DIM },
	{ "ctx",           required_argument, NULL, OPT_CTX },
	{ "dtype",         required_argument, NULL, OPT_DTYPE },
	{ "block-bytes",   required_argument, NULL, OPT_BLOCK_BYTES },
	{ "block-tokens",  required_argument, NULL, OPT_BLOCK_TOKENS },
	{ "gpu-mem",       required_argument, NULL, OPT_GPU_MEM },
	{ "tp",            required_argument, NULL, OPT_TP },
	{ "weights-bytes", required_argument, NULL, OPT_WEIGHTS },
	{ "util",          required_argument, NULL, OPT_UTIL },
	{ "overhead",      required_argument, NULL, OPT_OVERHEAD },
	{ "reserve-bytes", required_argument, NULL, OPT_RESERVE },
	{ "list-models",   no_argument,       NULL, OPT_LIST },
	{ "json",          no_argument,       NULL, OPT_JSON },
	{ "help",          no_argument,       NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static int parse_u32_opt(const char *opt, const char *val, uint32_t *out,
			 uint32_t lo, uint32_t hi)
{
	int ret = ctl_parse_u32(val, out);

	if (!ret && (*out < lo || *out > hi))
		ret = -ERANGE;
	return ret ? ctl_bad_value(opt, val, ret) : 0;
}

static int parse_size_opt(const char *opt, const char *val, uint64_t *out,
			  uint64_t lo, uint64_t hi)
{
	int ret = ctl_parse_size(val, out);

	if (!ret && (*out < lo || *out > hi))
		ret = -ERANGE;
	return ret ? ctl_bad_value(opt, val, ret) : 0;
}

int cmd_plan(int argc, char **argv)
{
	struct plan p = { 0 };
	const struct model_preset *m = NULL;
	uint32_t layers = 0, kv_heads = 0, head_dim = 0;
	bool have_weights = false, have_ctx = false, list = false;
	int c, ret;
	size_t i;

	p.dtype = PD_BF16;
	p.block_tokens_opt = 16;
	p.gpu_mem = 80ULL << 30;
	p.tp = 1;
	p.util = 0.9;
	p.reserve = 1ULL << 30;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":j", plan_opts, NULL)) != -1) {
		const char *v = optarg;

		ret = 0;
		switch (c) {
		case OPT_MODEL:
			m = NULL;
			for (i = 0; i < N_PRESETS; i++)
				if (!strcmp(v, presets[i].name))
					m = &presets[i];
			if (!m) {
				ctl_err("plan: unknown model '%s' (see kvpoolctl plan --list-models)",
					v);
				return CTL_EXIT_USAGE;
			}
			break;
		case OPT_LAYERS:
			ret = parse_u32_opt("--layers", v, &layers, 1, 65536);
			break;
		case OPT_KV_HEADS:
			ret = parse_u32_opt("--kv-heads", v, &kv_heads, 1, 65536);
			break;
		case OPT_HEAD_DIM:
			ret = parse_u32_opt("--head-dim", v, &head_dim, 1, 65536);
			break;
		case OPT_CTX:
			ret = parse_size_opt("--ctx", v, &p.ctx, 1, 1ULL << 32);
			have_ctx = true;
			break;
		case OPT_DTYPE:
			for (i = 0; i < 4; i++)
				if (!strcmp(v, dtype_names[i]))
					break;
			if (i == 4) {
				ctl_err("plan: --dtype: '%s' is not one of bf16, fp8, int8, int4",
					v);
				return CTL_EXIT_USAGE;
			}
			p.dtype = (enum plan_dtype)i;
			break;
		case OPT_BLOCK_BYTES:
			ret = parse_size_opt("--block-bytes", v, &p.block_bytes_opt,
					     256, 1ULL << 30);
			if (!ret && p.block_bytes_opt % 256) {
				ctl_err("plan: --block-bytes: %s is not a multiple of 256", v);
				return CTL_EXIT_USAGE;
			}
			p.block_tokens_opt = 0;
			break;
		case OPT_BLOCK_TOKENS:
			ret = parse_size_opt("--block-tokens", v, &p.block_tokens_opt,
					     1, 1U << 20);
			p.block_bytes_opt = 0;
			break;
		case OPT_GPU_MEM:
			ret = parse_size_opt("--gpu-mem", v, &p.gpu_mem, 1,
					     1ULL << 50);
			break;
		case OPT_TP:
			ret = parse_u32_opt("--tp", v, &p.tp, 1, 1024);
			break;
		case OPT_WEIGHTS:
			ret = parse_size_opt("--weights-bytes", v, &p.weights, 0,
					     1ULL << 52);
			have_weights = true;
			break;
		case OPT_OVERHEAD:
			ret = parse_size_opt("--overhead", v, &p.overhead, 0,
					     1ULL << 50);
			break;
		case OPT_RESERVE:
			ret = parse_size_opt("--reserve-bytes", v, &p.reserve, 0,
					     1ULL << 52);
			break;
		case OPT_UTIL:
			ret = ctl_parse_fraction(v, &p.util);
			if (ret)
				return ctl_bad_value("--util", v, ret);
			break;
		case OPT_LIST:
			list = true;
			break;
		case 'j':
		case OPT_JSON:
			ctl_g.json = true;
			break;
		case OPT_HELP:
			plan_usage(stdout);
			return CTL_EXIT_OK;
		case ':':
			ctl_err("plan: option %s needs a value", argv[optind - 1]);
			ctl_usage_hint("plan");
			return CTL_EXIT_USAGE;
		default:
			ctl_err("plan: unknown option '%s'", argv[optind - 1]);
			ctl_usage_hint("plan");
			return CTL_EXIT_USAGE;
		}
		if (ret)
			return ret;
	}
	if (optind < argc) {
		ctl_err("plan: unexpected argument '%s'", argv[optind]);
		ctl_usage_hint("plan");
		return CTL_EXIT_USAGE;
	}
	if (list)
		return list_models();

	if (m) {
		p.model = m->name;
		p.layers = m->layers;
		p.kv_heads = m->kv_heads;
		p.head_dim = m->head_dim;
		if (!have_ctx)
			p.ctx = m->max_ctx;
		if (!have_weights)
			p.weights = 2 * m->params;
	} else if (!have_ctx) {
		p.ctx = 8192;
	}
	/* explicit values override the preset's */
	if (layers)
		p.layers = layers;
	if (kv_heads)
		p.kv_heads = kv_heads;
	if (head_dim)
		p.head_dim = head_dim;
	if (!p.layers || !p.kv_heads || !p.head_dim) {
		ctl_err("plan: give --model NAME or all of --layers, --kv-heads, --head-dim");
		ctl_usage_hint("plan");
		return CTL_EXIT_USAGE;
	}
	if (p.dtype == PD_INT4 && p.head_dim % 2) {
		ctl_err("plan: int4 needs an even --head-dim");
		return CTL_EXIT_USAGE;
	}
	ret = plan_compute(&p);
	if (ret == -EINVAL) {
		ctl_err("plan: --tp %u does not divide %u KV heads (nor they it)",
			p.tp, p.kv_heads);
		return CTL_EXIT_USAGE;
	}
	if (ret == -ENOSPC) {
		ctl_err("plan: a block of %llu bytes cannot hold one token (%llu bytes per token per GPU)",
			(unsigned long long)p.block_bytes,
			(unsigned long long)p.bytes_per_token_gpu);
		return CTL_EXIT_USAGE;
	}
	if (ctl_g.json)
		plan_json(&p);
	else
		plan_text(&p);
	return CTL_EXIT_OK;
}
