// SPDX-License-Identifier: MIT
/*
 * e2e-tenant - one tenant process of the end-to-end tests.
 *
 * Declares a KV layout, grows S sequences step by step through libkvlease
 * (leases, block tables, K/V writes in kvpoold), forks one sequence (copy-
 * on-write) and after every step runs decode attention for every layer in
 * the daemon; every output is compared with kvk_decode_ref (FP64-checked
 * scalar reference of the kernels) run here on a private copy of the same
 * K/V written with the same calls.  Ends with a multi-token (causal)
 * attention checked against kvk_prefill_ref.
 *
 * Tolerance: |daemon - reference| <= 1e-3 * max(1, max |reference|) (the
 * same quantised data on both sides; only FP32 summation order differs),
 * and 6 * 2^-9 * max(1, max |reference|) for FP8, INT8 and INT4, whose
 * fast CPU paths round the query and the weights to BF16 (INT8 and INT4:
 * the query to INT8; INT4: each weight times its group's V scale) once
 * per step (Documentation/kernels.rst; the kernel tests hold each path to
 * its derived bound).  A wrong block is off by the values' own size.
 *
 * A daemon restart that lost the contents (-ESTALE from libkvlease) is
 * recovered by replaying the sequences' writes; the number of such
 * restarts and the tokens written again are printed.  A restart that kept
 * them is invisible here (the library reconnects and repeats the call).
 * Exit: 0 all outputs correct, 1 a mismatch or an error.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvlease.h"
#include "kvkern.h"

struct cfg {
	const char *socket;
	const char *tenant;
	const char *ready;
	uint32_t layers, kv_heads, head_dim, q_heads, dtype;
	uint32_t seqs, tokens, step;
	uint32_t seed;
	uint32_t delay_ms;
	uint32_t hold_ms;
	int fork;
	int progress_fd;		/* a line per decoded step, or -1 */
};

static struct cfg C = {
	.layers = 2, .kv_heads = 2, .head_dim = 64, .q_heads = 4,
	.dtype = KVL_DTYPE_BF16, .seqs = 3, .tokens = 96, .step = 8,
	.seed = 1, .fork = 1, .progress_fd = -1,
};

static struct kvl_ctx *ctx;
static int layout;
static struct kvl_layout L;
static struct kvk_layout KL;
static uint8_t *lpool;		/* local reference pool */
static uint32_t maxb;		/* blocks per sequence */
static struct kvl_seq **seq;	/* seqs + 1 (fork child) */
static uint32_t nseq;		/* live sequences */
static uint32_t *lens;		/* tokens written per sequence */
static int restarts;
static unsigned long long recomputed;	/* tokens written again */
static double max_err;

/* Deterministic K/V/query values in [-1, 1]. */
static float val(uint32_t s, uint32_t layer, uint32_t t, uint32_t i,
		 uint32_t kind)
{
	uint64_t x = ((uint64_t)C.seed << 40) ^ ((uint64_t)s << 32) ^
		     ((uint64_t)layer << 24) ^ ((uint64_t)t << 8) ^
		     ((uint64_t)i << 2) ^ kind;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

static uint32_t row(void)
{
	return C.kv_heads * C.head_dim;
}

static uint32_t local_block(uint32_t s, uint32_t j)
{
	return s * maxb + j;
}

/* The tokens [pos, pos + n) of sequence s (data index ds) in one layer. */
static void gen(uint32_t ds, uint32_t layer, uint32_t pos, uint32_t n,
		float *k, float *v)
{
	uint32_t t, i;

	for (t = 0; t < n; t++)
		for (i = 0; i < row(); i++) {
			k[t * row() + i] = val(ds, layer, pos + t, i, 1);
			v[t * row() + i] = val(ds, layer, pos + t, i, 2);
		}
}

/* Write tokens [pos, pos+n) of seq s (data of ds) in the daemon
 * (local 0) or in the local reference pool (local 1). */
static int write_tokens(uint32_t s, uint32_t ds, uint32_t pos, uint32_t n,
			int local)
{
	float *k = malloc((size_t)n * row() * 4), *v = malloc((size_t)n * row() * 4);
	uint32_t *lb = malloc(n * 4), *sl = malloc(n * 4), layer, t;
	int r = 0;

	for (t = 0; t < n; t++) {
		lb[t] = local_block(s, (pos + t) / L.tokens_per_block);
		sl[t] = (pos + t) % L.tokens_per_block;
	}
	for (layer = 0; layer < C.layers && !r; layer++) {
		gen(ds, layer, pos, n, k, v);
		if (local)
			r = kvk_write_kv(&KL, lpool, layer, n, lb, sl, k, v);
		else
			r = kvl_seq_write_kv(seq[s], layer, pos, n, k, v);
	}
	free(k);
	free(v);
	free(lb);
	free(sl);
	return r;
}

static double tolerance(void)
{
	if (C.dtype == KVL_DTYPE_FP8 || C.dtype == KVL_DTYPE_INT8 ||
	    C.dtype == KVL_DTYPE_INT4)
		return 6.0 / 512;
	return 1e-3;
}

static int compare(const float *got, const float *ref, size_t n,
		   const char *what)
{
	double mref = 1.0, err = 0;
	size_t i;

	for (i = 0; i < n; i++)
		if (fabs(ref[i]) > mref)
			mref = fabs(ref[i]);
	for (i = 0; i < n; i++) {
		double e = fabs((double)got[i] - ref[i]);

		if (!(e <= err))
			err = isnan(e) ? INFINITY : e;
	}
	if (err / mref > max_err)
		max_err = err / mref;
	if (!(err <= tolerance() * mref)) {
		fprintf(stderr, "tenant %u: %s mismatch: max error %g (scale "
			"%g)\n", C.seed, what, err, mref);
		return -EDOM;
	}
	return 0;
}

static int check_decode(void)
{
	uint32_t qn = nseq * C.q_heads * C.head_dim, s, j, layer;
	float *q = malloc(qn * 4), *out = malloc(qn * 4), *ref = malloc(qn * 4);
	uint32_t *tables = calloc((size_t)nseq * maxb, 4), *ctxl = calloc(nseq, 4);
	int r = 0;

	for (s = 0; s < nseq; s++) {
		for (j = 0; j < maxb; j++)
			tables[s * maxb + j] = local_block(s, j);
		ctxl[s] = lens[s];
	}
	for (layer = 0; layer < C.layers && !r; layer++) {
		struct kvk_decode_args a = {
			.layout = &KL, .pool_base = lpool, .layer = layer,
			.batch = nseq, .q_heads = C.q_heads,
			.max_blocks_per_seq = maxb, .q = q,
			.block_tables = tables, .ctx_lens = ctxl,
			.scale = 1.0f / sqrtf((float)C.head_dim), .out = ref,
		};

		for (j = 0; j < qn; j++)
			q[j] = val(1000 + layer, lens[0], j, 0, 3);
		r = kvl_seq_decode(seq, nseq, layer, C.q_heads, q, 0.0f, out);
		if (!r)
			r = kvk_decode_ref(&a);
		if (!r)
			r = compare(out, ref, qn, "decode");
	}
	free(q);
	free(out);
	free(ref);
	free(tables);
	free(ctxl);
	return r;
}

static int check_prefill(uint32_t n_new)
{
	uint32_t qn = nseq * n_new * C.q_heads * C.head_dim, s, j;
	float *q = malloc(qn * 4), *out = malloc(qn * 4), *ref = malloc(qn * 4);
	uint32_t *tables = calloc((size_t)nseq * maxb, 4), *ctxl = calloc(nseq, 4);
	struct kvk_prefill_args a = {
		.layout = &KL, .pool_base = lpool, .layer = C.layers - 1,
		.batch = nseq, .q_heads = C.q_heads,
		.max_blocks_per_seq = maxb, .n_new = n_new, .q = q,
		.block_tables = tables, .ctx_lens = ctxl,
		.scale = 1.0f / sqrtf((float)C.head_dim), .out = ref,
	};
	int r;

	for (s = 0; s < nseq; s++) {
		for (j = 0; j < maxb; j++)
			tables[s * maxb + j] = local_block(s, j);
		ctxl[s] = lens[s];
	}
	for (j = 0; j < qn; j++)
		q[j] = val(2000, j, 0, 0, 4);
	r = kvl_seq_attention(seq, nseq, C.layers - 1, C.q_heads, n_new, q,
			      0.0f, out);
	if (!r)
		r = kvk_prefill_ref(&a);
	if (!r)
		r = compare(out, ref, qn, "multi-token attention");
	free(q);
	free(out);
	free(ref);
	free(tables);
	free(ctxl);
	return r;
}

/*
 * Step k: every base sequence grows by C.step tokens.  At the middle step
 * sequence 0 is forked into sequence C.seqs, which then rewrites its first
 * token (copy-on-write of a shared block) and grows with its own tokens.
 * local 0 acts on the daemon (and the sequences), local 1 mirrors the same
 * writes into the local reference pool.
 */
static int fork_at(void)
{
	return C.fork ? (int)(C.tokens / C.step / 2) : -1;
}

static int do_step(uint32_t k, int local)
{
	uint32_t s, pos = k * C.step, c = C.seqs;
	int r;

	for (s = 0; s < C.seqs; s++) {
		if (!local) {
			r = kvl_seq_append(seq[s], C.step);
			if (r < 0)
				return r;
		}
		r = write_tokens(s, s, pos, C.step, local);
		if (r)
			return r;
	}
	if ((int)k == fork_at()) {
		if (local) {
			uint32_t j, src, dst;

			for (j = 0; j < maxb; j++) {
				src = local_block(0, j);
				dst = local_block(c, j);
				kvk_copy_blocks(lpool, KL.block_bytes, 0, &src,
						&dst, 1);
			}
		} else {
			if (seq[c])
				kvl_seq_free(seq[c]);
			seq[c] = NULL;
			r = kvl_seq_fork(seq[0], &seq[c]);
			if (r)
				return r;
		}
		/* Overwrite the child's first token: its block is shared. */
		r = write_tokens(c, c, 0, 1, local);
		if (r)
			return r;
	} else if (fork_at() >= 0 && (int)k > fork_at()) {
		uint32_t cpos = pos;	/* child length == parent's */

		if (!local) {
			r = kvl_seq_append(seq[c], C.step);
			if (r < 0)
				return r;
		}
		r = write_tokens(c, c, cpos, C.step, local);
		if (r)
			return r;
	}
	return 0;
}

static void set_lens(uint32_t k)
{
	uint32_t s;

	for (s = 0; s < C.seqs; s++)
		lens[s] = k * C.step;
	nseq = C.seqs;
	if (fork_at() >= 0 && (int)k > fork_at()) {
		lens[C.seqs] = k * C.step;
		nseq = C.seqs + 1;
	}
}

/* After a restart every sequence is empty: replay steps 0..n-1 in the
 * daemon (the local pool already has them). */
static int replay(uint32_t n)
{
	uint32_t i;
	int r, tries;

	for (tries = 0; tries < 10; tries++) {
		restarts++;
		fprintf(stderr, "tenant %u: daemon restarted (epoch %llu), "
			"replaying %u steps\n", C.seed,
			(unsigned long long)kvl_epoch(ctx), n);
		if (seq[C.seqs]) {
			kvl_seq_free(seq[C.seqs]);
			seq[C.seqs] = NULL;
		}
		for (i = 0, r = 0; i < n && !r; i++) {
			r = do_step(i, 0);
			if (!r)
				recomputed += (unsigned long long)C.step *
					      C.seqs;
		}
		if (r != -ESTALE)
			return r;
	}
	return -ESTALE;
}

static int run(void)
{
	uint32_t k, nsteps = C.tokens / C.step;
	int r, tries = 0;

	for (k = 0; k < nsteps; k++) {
		while ((r = do_step(k, 0)) == -ESTALE && tries++ < 10) {
			r = replay(k);
			if (r)
				return r;
		}
		if (r)
			return r;
		r = do_step(k, 1);
		if (r)
			return r;
		set_lens(k + 1);
		while ((r = check_decode()) == -ESTALE && tries++ < 10) {
			r = replay(k + 1);
			if (r)
				return r;
		}
		if (r)
			return r;
		if (C.progress_fd >= 0) {
			char line[32];
			int n = snprintf(line, sizeof(line), "%u\n", k + 1);

			if (write(C.progress_fd, line, (size_t)n) != n)
				C.progress_fd = -1;	/* nobody reads */
		}
		if (C.delay_ms)
			usleep(C.delay_ms * 1000);
	}
	while ((r = check_prefill(C.step)) == -ESTALE && tries++ < 10) {
		r = replay(nsteps);
		if (r)
			return r;
	}
	return r;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", 1, NULL, 's' }, { "tenant", 1, NULL, 'T' },
		{ "layers", 1, NULL, 'l' }, { "kv-heads", 1, NULL, 'k' },
		{ "head-dim", 1, NULL, 'd' }, { "q-heads", 1, NULL, 'q' },
		{ "dtype", 1, NULL, 't' }, { "seqs", 1, NULL, 'n' },
		{ "tokens", 1, NULL, 'N' }, { "step", 1, NULL, 'S' },
		{ "seed", 1, NULL, 'x' }, { "delay-ms", 1, NULL, 'D' },
		{ "hold-ms", 1, NULL, 'H' }, { "ready", 1, NULL, 'R' },
		{ "no-fork", 0, NULL, 'F' }, { "progress-fd", 1, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvl_opts o;
	struct kvl_status st;
	int ch, r;

	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 's': C.socket = optarg; break;
		case 'T': C.tenant = optarg; break;
		case 'l': C.layers = (uint32_t)atoi(optarg); break;
		case 'k': C.kv_heads = (uint32_t)atoi(optarg); break;
		case 'd': C.head_dim = (uint32_t)atoi(optarg); break;
		case 'q': C.q_heads = (uint32_t)atoi(optarg); break;
		case 't':
			r = kvk_dtype_from_name(optarg);
			if (r < 0)
				return 2;
			C.dtype = (uint32_t)r;
			break;
		case 'n': C.seqs = (uint32_t)atoi(optarg); break;
		case 'N': C.tokens = (uint32_t)atoi(optarg); break;
		case 'S': C.step = (uint32_t)atoi(optarg); break;
		case 'x': C.seed = (uint32_t)atoi(optarg); break;
		case 'D': C.delay_ms = (uint32_t)atoi(optarg); break;
		case 'H': C.hold_ms = (uint32_t)atoi(optarg); break;
		case 'R': C.ready = optarg; break;
		case 'F': C.fork = 0; break;
		case 'P': C.progress_fd = atoi(optarg); break;
		default: return 2;
		}
	}
	if (!C.step || C.tokens < C.step || !C.seqs)
		return 2;

	memset(&o, 0, sizeof(o));
	o.socket_path = C.socket;
	o.tenant = C.tenant;
	o.lease_batch = 4;
	o.region_bytes = 4 << 20;
	r = kvl_open(&o, &ctx);
	if (r) {
		fprintf(stderr, "kvl_open: %s\n", strerror(-r));
		return 1;
	}
	memset(&L, 0, sizeof(L));
	L.layers = C.layers;
	L.kv_heads = C.kv_heads;
	L.head_dim = C.head_dim;
	L.dtype = C.dtype;
	L.rope_base = 10000.0f;
	layout = kvl_layout_declare(ctx, &L);
	if (layout < 0) {
		fprintf(stderr, "layout: %s\n", strerror(-layout));
		return 1;
	}
	kvl_status(ctx, &st);
	r = kvk_layout_init(&KL, C.layers, C.kv_heads, C.head_dim, C.dtype,
			    st.block_bytes);
	if (r || KL.tokens_per_block != L.tokens_per_block) {
		fprintf(stderr, "layout mismatch: %u vs %u tokens/block\n",
			KL.tokens_per_block, L.tokens_per_block);
		return 1;
	}
	maxb = (C.tokens + L.tokens_per_block - 1) / L.tokens_per_block;
	lpool = calloc((size_t)(C.seqs + 1) * maxb, st.block_bytes);
	seq = calloc(C.seqs + 1, sizeof(*seq));
	lens = calloc(C.seqs + 1, sizeof(*lens));
	if (!lpool || !seq || !lens)
		return 1;
	for (nseq = 0; nseq < C.seqs; nseq++) {
		r = kvl_seq_create(ctx, layout, &seq[nseq]);
		if (r) {
			fprintf(stderr, "seq_create: %s\n", strerror(-r));
			return 1;
		}
	}
	r = run();
	kvl_status(ctx, &st);
	printf("tenant %u (%s): %s L%u H%u D%u Q%u, %u tok/block, %u seqs x "
	       "%u tokens, held %u blocks, restarts %d, recomputed %llu, "
	       "max rel error %.3g: %s\n", C.seed, st.tenant,
	       kvk_dtype_name(C.dtype), C.layers, C.kv_heads, C.head_dim,
	       C.q_heads, L.tokens_per_block, nseq, C.tokens, st.held,
	       restarts, recomputed, max_err, r ? strerror(-r) : "OK");
	fflush(stdout);
	if (!r && C.ready) {
		FILE *f = fopen(C.ready, "w");

		if (f) {
			fprintf(f, "%u\n", st.held);
			fclose(f);
		}
	}
	if (!r && C.hold_ms)
		usleep(C.hold_ms * 1000);
	kvl_close(ctx);
	return r ? 1 : 0;
}
