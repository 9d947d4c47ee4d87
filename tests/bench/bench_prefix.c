// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-prefix - the prefix cache under a replicated-engine load.
 *
 * Starts its own kvpoold (in-process ledger, cpu backend, private socket),
 * then runs the same load with the cache off (tenant "prefix-off") and on
 * (tenant "prefix-on"), in -R rounds (default 3), the two phases of a
 * round in alternating order (off-on, on-off, ...): 8 processes of the
 * tenant, each serving R requests made of one common system prompt
 * (4,096 tokens) plus a unique suffix (256 tokens).  Every round has a
 * system prompt of its own, so its cache-on phase starts cold, and the
 * cache is flushed between rounds (the tenant's peak is one round's).  A
 * request's prefill is what kvpool does for it: with the cache on,
 * kvl_seq_match() attaches the cached blocks of the prompt; then K/V of
 * every position not matched are written (kvl_seq_write_kv, all layers)
 * and causal attention runs over them (kvl_seq_attention, all layers);
 * the first token is ready when the last layer's attention returns
 * (TTFT).  With the cache on the request then publishes its full blocks
 * (kvl_seq_publish).
 *
 * The first request of process 0 runs alone before the others start (the
 * system prompt is computed once, as when a fleet warms up); the others
 * then run at once.  The same schedule is used for both phases.
 *
 * Checked: every request's attention outputs for its suffix (every
 * layer) with the cache on equal those with the cache off (within 1e-5 of
 * the largest output: the CPU kernel's split-K order depends on how many
 * queries a call has); the benchmark fails otherwise.
 *
 * Printed per phase: prefill tokens computed, TTFT p50/p99 (ms, median
 * over the rounds [min-max]), the tenant's peak blocks, and the TTFT p50
 * ratio off/on formed per round; the cache's hit rate (hit blocks / full
 * blocks looked up, from kvpoold's counters), how many copies of the
 * prompt's blocks the requests used; and the cost of lookup + attach per
 * block three ways: kvpoold's own time (the MATCH reply's daemon_ns),
 * the kvl_seq_match call seen by one client with nothing else running
 * (round trip included; median and min of 100), and the same call under
 * the cache-on phases' load; then the index alone in this process (key +
 * verified lookup of a 256-block chain, no I/O).  The last line is one
 * JSON object.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvl_internal.h"	/* the raw MATCH reply's daemon_ns */
#include "prefix_index.h"

#define PROMPT		4096
#define SUFFIX		256
#define NTOK		(PROMPT + SUFFIX)
#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define Q_HEADS		4
#define ROW		(KV_HEADS * HEAD_DIM)
#define MAX_WORKERS	64
#define MAX_REQ		64
#define MAX_ROUNDS	16
/* attention outputs kept per request: the suffix, every layer */
#define OUT_FLOATS	((size_t)LAYERS * SUFFIX * Q_HEADS * HEAD_DIM)

struct result {
	double ttft_ms;
	double match_ns;	/* kvl_seq_match wall time */
	uint32_t matched;	/* tokens */
	uint32_t computed;	/* prefill tokens computed */
	uint64_t prefix_fp;	/* fingerprint of the prompt's block numbers */
	int err;
};

struct shared {
	_Atomic int warm;	/* process 0's first request is done */
	struct result r[MAX_WORKERS][MAX_REQ];
};

static const char *sock_path;
static int nworkers = 8, nreq = 2, rounds = 3;
static uint32_t tpb;
static uint32_t variant;	/* the round: its own system prompt */
/* shared: [cache off, on][worker][request] outputs (OUT_FLOATS each) */
static float *outs;

static float *out_slot(bool cache, int w, int i)
{
	return outs + (((size_t)cache * nworkers + w) * nreq + i) * OUT_FLOATS;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static float val(uint64_t a, uint64_t b)
{
	return (float)((double)(mix(a * 0x9e3779b97f4a7c15ULL ^ b) >> 11) /
		       (double)(1ULL << 53) * 2.0 - 1.0);
}

/* The request's tokens: the common prompt, then its own suffix. */
static void request_tokens(int w, int i, uint32_t *tok)
{
	uint32_t p;

	for (p = 0; p < PROMPT; p++)
		tok[p] = (uint32_t)(mix(p + 1 + ((uint64_t)variant << 40)) %
				    128000);
	for (p = PROMPT; p < NTOK; p++)
		tok[p] = (uint32_t)(mix(((uint64_t)(w * MAX_REQ + i + 1) << 32) |
					((uint64_t)variant << 56) | p) % 128000);
}

/* Stand-in for the model's projections: K/V of (token, position, layer). */
static void kv_rows(const uint32_t *tok, uint32_t from, uint32_t n,
		    uint32_t layer, float *k, float *v)
{
	uint32_t t, i;

	for (t = 0; t < n; t++) {
		uint64_t s = ((uint64_t)tok[from + t] << 32) ^
			     ((uint64_t)(from + t) << 4) ^ layer;

		for (i = 0; i < ROW; i++) {
			k[(size_t)t * ROW + i] = val(s, 2 * i);
			v[(size_t)t * ROW + i] = val(s, 2 * i + 1);
		}
	}
}

static int serve(struct kvl_ctx *ctx, int layout, bool cache, int w, int i,
		 struct result *res)
{
	uint32_t *tok = malloc(NTOK * sizeof(*tok)), m = 0, n, layer, j;
	float *k = malloc((size_t)NTOK * ROW * 4), *v = malloc((size_t)NTOK * ROW * 4);
	float *q = NULL, *out = NULL;
	struct kvl_seq *s = NULL;
	const uint32_t *table;
	uint64_t t0, t1;
	uint32_t nb;
	int r;

	request_tokens(w, i, tok);
	t0 = now_ns();
	r = kvl_seq_create(ctx, layout, &s);
	if (r)
		goto out;
	if (cache) {
		r = kvl_seq_match(s, tok, NTOK);
		if (r < 0)
			goto out;
		m = (uint32_t)r;
	}
	t1 = now_ns();
	n = NTOK - m;
	r = kvl_seq_append_tokens(s, tok + m, n);
	if (r < 0)
		goto out;
	r = 0;
	q = malloc((size_t)n * Q_HEADS * HEAD_DIM * 4);
	out = malloc((size_t)n * Q_HEADS * HEAD_DIM * 4);
	if (!q || !out || !k || !v) {
		r = -ENOMEM;
		goto out;
	}
	for (layer = 0; layer < LAYERS && !r; layer++) {
		kv_rows(tok, m, n, layer, k, v);
		r = kvl_seq_write_kv(s, layer, m, n, k, v);
		for (j = 0; !r && j < n * Q_HEADS * HEAD_DIM; j++)
			q[j] = val(((uint64_t)tok[m + j / (Q_HEADS * HEAD_DIM)] << 8) ^
				   layer, j % (Q_HEADS * HEAD_DIM) + 7);
		if (!r)
			r = kvl_seq_attention(&s, 1, layer, Q_HEADS, n, q, 0, out);
		/* the suffix's outputs, to compare cache on with cache off */
		if (!r && n >= SUFFIX)
			memcpy(out_slot(cache, w, i) + (size_t)layer * SUFFIX *
			       Q_HEADS * HEAD_DIM,
			       out + (size_t)(n - SUFFIX) * Q_HEADS * HEAD_DIM,
			       sizeof(float) * SUFFIX * Q_HEADS * HEAD_DIM);
		else if (!r)
			r = -ERANGE;	/* matched into the suffix */
	}
	if (r)
		goto out;
	res->ttft_ms = (double)(now_ns() - t0) / 1e6;
	res->match_ns = (double)(t1 - t0);
	res->matched = m;
	res->computed = n;
	kvl_seq_block_table(s, &table, &nb);
	for (j = 0; j < PROMPT / tpb && j < nb; j++)
		res->prefix_fp = mix(res->prefix_fp ^ table[j]);
	if (cache) {
		r = kvl_seq_publish(s);
		if (r > 0)
			r = 0;
	}
out:
	kvl_seq_free(s);
	free(tok);
	free(k);
	free(v);
	free(q);
	free(out);
	res->err = r < 0 ? r : 0;
	return r < 0 ? r : 0;
}

static int worker(struct shared *sh, const char *tenant, bool cache, int w)
{
	struct kvl_opts o;
	struct kvl_layout l;
	struct kvl_ctx *ctx;
	int layout, i, r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant;
	o.lease_batch = 4;
	o.region_bytes = 32 << 20;
	o.timeout_ns = 120000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		return r;
	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 500000.0f;
	layout = kvl_layout_declare_model(ctx, &l, "bench-model@1");
	if (layout < 0) {
		kvl_close(ctx);
		return layout;
	}
	tpb = l.tokens_per_block;
	if (w)
		while (!atomic_load(&sh->warm))
			usleep(1000);
	for (i = 0; i < nreq; i++) {
		r = serve(ctx, layout, cache, w, i, &sh->r[w][i]);
		if (r)
			break;
		if (!w && !i)
			atomic_store(&sh->warm, 1);
	}
	atomic_store(&sh->warm, 1);
	kvl_close(ctx);
	return r;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct phase {
	double p50, p99, mean_match_ns_per_block;
	uint64_t computed, matched;
	uint32_t peak;
	int copies;
	double wall_s;
};

static int run_phase(struct shared *sh, const char *tenant, bool cache,
		     struct phase *ph)
{
	struct kvl_tenant_info ti[64];
	struct kvl_admin *adm;
	double ttft[MAX_WORKERS * MAX_REQ], mns = 0;
	uint64_t fps[MAX_WORKERS * MAX_REQ];
	pid_t pids[MAX_WORKERS];
	int w, i, n = 0, nfp = 0, nm = 0, bad = 0, nt;
	uint64_t t0 = now_ns();

	memset(sh, 0, sizeof(*sh));
	fflush(stdout);
	for (w = 0; w < nworkers; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			return -errno;
		if (!pids[w])
			_exit(worker(sh, tenant, cache, w) ? 1 : 0);
	}
	for (w = 0; w < nworkers; w++) {
		int st;

		if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st))
			bad++;
	}
	memset(ph, 0, sizeof(*ph));
	for (w = 0; w < nworkers; w++)
		for (i = 0; i < nreq; i++) {
			struct result *r = &sh->r[w][i];
			int j;

			if (r->err) {
				fprintf(stderr, "worker %d request %d: %s\n", w, i,
					strerror(-r->err));
				bad++;
				continue;
			}
			ttft[n++] = r->ttft_ms;
			ph->computed += r->computed;
			ph->matched += r->matched;
			if (r->matched) {
				mns += r->match_ns / (r->matched / tpb);
				nm++;
			}
			for (j = 0; j < nfp && fps[j] != r->prefix_fp; j++)
				;
			if (j == nfp)
				fps[nfp++] = r->prefix_fp;
		}
	if (bad || !n)
		return -EIO;
	qsort(ttft, (size_t)n, sizeof(*ttft), cmp_dbl);
	ph->p50 = ttft[(n - 1) / 2];
	ph->p99 = ttft[(int)((n - 1) * 0.99 + 0.5)];
	ph->mean_match_ns_per_block = nm ? mns / nm : 0;
	ph->copies = nfp;
	ph->wall_s = (double)(now_ns() - t0) / 1e9;
	if (kvl_admin_open(sock_path, &adm))
		return -ECONNREFUSED;
	nt = kvl_admin_tenant_list(adm, NULL, ti, 64);
	for (i = 0; i < nt && i < 64; i++)
		if (!strcmp(ti[i].name, tenant))
			ph->peak = ti[i].peak;
	kvl_admin_close(adm);
	return 0;
}

/*
 * With the prompt cached and nothing else running, one process: the
 * kvl_seq_match call per block (lookup + attach + round trip), and the
 * daemon's own time per block (from the MATCH reply).  Median and minimum
 * of 100.
 */
static int match_cost(double *call_ns, double *daemon_ns, double *call_min,
		      double *daemon_min)
{
	double calls[100], dns[100];
	int ncalls = 0;
	struct kvl_opts o;
	struct kvl_layout l;
	struct kvl_ctx *ctx;
	uint32_t *tok = malloc(NTOK * sizeof(*tok)), nb = PROMPT / tpb;
	int layout, i, r;

	*call_ns = *daemon_ns = *call_min = *daemon_min = 0;
	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = "prefix-on";
	r = kvl_open(&o, &ctx);
	if (r)
		return r;
	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 500000.0f;
	layout = kvl_layout_declare_model(ctx, &l, "bench-model@1");
	request_tokens(0, 0, tok);
	for (i = 0; layout >= 0 && i < 100; i++) {
		struct kvp_prefix_match q;
		struct kvp_prefix_match_reply rep;
		struct kvp_prefix_unref u;
		struct kvl_seq *s;
		uint64_t t0 = now_ns(), t;

		r = kvl_seq_create(ctx, layout, &s);
		if (!r)
			r = kvl_seq_match(s, tok, PROMPT) == PROMPT ? 0 : -EIO;
		t = now_ns() - t0;
		kvl_seq_free(s);
		if (r)
			break;
		calls[ncalls] = (double)t / nb;
		/* the same request raw, for the daemon's own time */
		memset(&q, 0, sizeof(q));
		q.layout_id = ctx->layouts[layout].id;
		q.ntok = PROMPT;
		q.off_tokens = 0;
		q.off_blocks = (uint64_t)PROMPT * 4;
		q.max_blocks = nb;
		memcpy(ctx->region, tok, PROMPT * 4);
		r = kvl_rpc(ctx, KVP_OP_PREFIX_MATCH, &q, sizeof(q), &rep,
			    sizeof(rep), NULL);
		if (r != (int)nb) {
			r = -EIO;
			break;
		}
		r = 0;
		dns[ncalls++] = (double)rep.daemon_ns / nb;
		memset(&u, 0, sizeof(u));
		u.flags = KVP_PREFIX_UNREF_ALL;
		kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &u, sizeof(u), NULL, 0, NULL);
	}
	kvl_close(ctx);
	free(tok);
	if (ncalls) {
		qsort(calls, (size_t)ncalls, sizeof(double), cmp_dbl);
		qsort(dns, (size_t)ncalls, sizeof(double), cmp_dbl);
		*call_ns = calls[ncalls / 2];
		*daemon_ns = dns[ncalls / 2];
		*call_min = calls[0];
		*daemon_min = dns[0];
	}
	return layout < 0 ? layout : r;
}

/* The index alone: key + verified lookup, ns per block of a 256-block chain. */
static double index_ns_per_block(void)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m, k, parent;
	uint8_t salt[PFX_SALT_BYTES] = { 7 }, scratch[48 + 4 * 64];
	uint32_t tok[NTOK], nb = PROMPT / 16, i, rep, tp = 16;
	uint64_t parent_id, t0, t;
	int ns;
	double best = 1e30;

	if (pfx_index_init(&ix, 128))
		return 0;
	request_tokens(0, 0, tok);
	pfx_model_identity(&m, "bench-model@1", LAYERS, KV_HEADS, HEAD_DIM, 1,
			   500000.0f, tp, 16384);
	pfx_index_reserve(&ix, nb);
	parent = zero;
	parent_id = 0;
	for (i = 0; i < nb; i++) {
		struct pfx_entry *e;

		pfx_key_compute(&ix, &k, salt, &parent, &m, tok + i * tp, tp,
				scratch);
		e = pfx_entry_new(&ix, &k, &ns, NULL, &m, parent_id, i,
				  tok + i * tp, tp);
		pfx_insert(&ix, e);
		parent = k;
		parent_id = e->id;
	}
	for (rep = 0; rep < 200; rep++) {
		uint32_t found = 0;

		t0 = now_ns();
		parent = zero;
		parent_id = 0;
		for (i = 0; i < nb; i++) {
			struct pfx_entry *e;

			pfx_key_compute(&ix, &k, salt, &parent, &m, tok + i * tp,
					tp, scratch);
			e = pfx_lookup(&ix, &k, &ns, &m, parent_id, tok + i * tp,
				       tp);
			if (!e)
				break;
			found++;
			parent = k;
			parent_id = e->id;
		}
		t = now_ns() - t0;
		if (found == nb && (double)t / nb < best)
			best = (double)t / nb;
	}
	pfx_index_fini(&ix);
	return best;
}

static pid_t start_daemon(const char *kvpoold, const char *dir)
{
	char log[4096];
	pid_t pid;
	int i;

	snprintf(log, sizeof(log), "%s/kvpoold.log", dir);
	pid = fork();
	if (!pid) {
		FILE *f = freopen(log, "w", stderr);

		(void)f;
		execl(kvpoold, kvpoold, "--foreground", "--socket", sock_path,
		      "--ledger", "inproc", "--backend", "cpu", "--block-bytes",
		      "16384", "--capacity", "8192", "--chunk-blocks", "64",
		      "--tenant", "prefix-off", "--tenant", "prefix-on", "-q",
		      (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 200; i++) {
		struct kvl_admin *adm;

		if (!kvl_admin_open(sock_path, &adm)) {
			kvl_admin_close(adm);
			return pid;
		}
		usleep(50000);
	}
	kill(pid, SIGKILL);
	return -1;
}

/* Largest difference of the cache-on outputs from the cache-off ones,
 * relative to the largest cache-off output of the same request. */
static double compare_outputs(int *bad_w, int *bad_i)
{
	double worst = 0;
	int w, i;
	size_t j;

	for (w = 0; w < nworkers; w++)
		for (i = 0; i < nreq; i++) {
			const float *a = out_slot(true, w, i);
			const float *b = out_slot(false, w, i);
			double amax = 0, d = 0;

			for (j = 0; j < OUT_FLOATS; j++) {
				double x = fabs((double)b[j]);
				double y = fabs((double)a[j] - (double)b[j]);

				if (x > amax)
					amax = x;
				if (isnan(y))	/* a NaN or an output not written */
					d = INFINITY;
				else if (y > d)
					d = y;
			}
			if (isinf(d))
				d = 1e30;
			else
				d = amax > 0 ? d / amax : (d > 0 ? 1e30 : 0);
			if (d > worst) {
				worst = d;
				*bad_w = w;
				*bad_i = i;
			}
		}
	return worst;
}

struct stat3 {
	double med, lo, hi;
};

static struct stat3 stat_of(const double *x, int n)
{
	double v[MAX_ROUNDS];
	struct stat3 r;

	memcpy(v, x, sizeof(*v) * (size_t)n);
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	r.lo = v[0];
	r.hi = v[n - 1];
	r.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return r;
}

#define ROUNDS_OF(arr, expr) ({					\
	double x_[MAX_ROUNDS];						\
	int k_;								\
	for (k_ = 0; k_ < rounds; k_++)					\
		x_[k_] = (expr);					\
	stat_of(x_, rounds);						\
})

/* The prefix-on tenant's hit and miss counters. */
static void prefix_counters(uint64_t *hits, uint64_t *misses,
			    uint32_t *cached)
{
	struct kvl_prefix_info pi[16];
	struct kvl_admin *adm;
	int i, n;

	*hits = *misses = 0;
	*cached = 0;
	if (kvl_admin_open(sock_path, &adm))
		return;
	n = kvl_admin_prefix_list(adm, NULL, pi, 16);
	for (i = 0; i < n && i < 16; i++)
		if (!strcmp(pi[i].tenant, "prefix-on")) {
			*hits = pi[i].hits;
			*misses = pi[i].misses;
			*cached = pi[i].cached;
		}
	kvl_admin_close(adm);
}

int main(int argc, char **argv)
{
	const char *kvpoold = "build/bin/kvpoold";
	struct phase off[MAX_ROUNDS], on[MAX_ROUNDS];
	double hit[MAX_ROUNDS];
	struct shared *sh;
	char dir[] = "/tmp/kvpool-bench-prefix.XXXXXX", sp[4096];
	double ix_ns, call_ns = 0, daemon_ns = 0, call_min = 0, daemon_min = 0;
	double worst = 0, diff[MAX_ROUNDS];
	struct stat3 ratio, p50_off, p50_on, p99_off, p99_on, loaded, hits;
	uint32_t cached = 0;
	uint64_t h0, m0, h1, m1;
	int opt, r = 0, rd, bad_w = 0, bad_i = 0, fail_rd = -1;
	size_t out_bytes;
	pid_t d;

	while ((opt = getopt(argc, argv, "d:w:r:R:h")) != -1) {
		switch (opt) {
		case 'd':
			kvpoold = optarg;
			break;
		case 'w':
			nworkers = atoi(optarg);
			break;
		case 'r':
			nreq = atoi(optarg);
			break;
		case 'R':
			rounds = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: kvpool-bench-prefix [-d KVPOOLD] "
				"[-w PROCESSES (8)] [-r REQUESTS each (2)] "
				"[-R ROUNDS (3)]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (nworkers < 1 || nworkers > MAX_WORKERS || nreq < 1 ||
	    nreq > MAX_REQ || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "kvpool-bench-prefix: -w 1..%d, -r 1..%d, -R "
			"1..%d\n", MAX_WORKERS, MAX_REQ, MAX_ROUNDS);
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(sp, sizeof(sp), "%s/kvpool.sock", dir);
	sock_path = sp;
	d = start_daemon(kvpoold, dir);
	if (d < 0) {
		fprintf(stderr, "kvpool-bench-prefix: %s did not start (log in "
			"%s)\n", kvpoold, dir);
		return 1;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	out_bytes = 2 * (size_t)nworkers * nreq * OUT_FLOATS * sizeof(float);
	outs = mmap(NULL, out_bytes, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || outs == MAP_FAILED)
		return 1;
	tpb = 16;	/* 16 KiB blocks, 1 KiB per token */
	printf("kvpool-bench-prefix: %d processes of one tenant x %d requests, "
	       "%d-token common prompt + %d-token unique suffix, bf16 %d "
	       "layers x %d kv heads x %d, %u tokens per block; %d rounds, "
	       "cache off and on alternating, a new prompt every round\n",
	       nworkers, nreq, PROMPT, SUFFIX, LAYERS, KV_HEADS, HEAD_DIM, tpb,
	       rounds);
	fflush(stdout);
	for (rd = 0; rd < rounds && !r; rd++) {
		int first;

		variant = (uint32_t)rd;
		memset(outs, 0xff, out_bytes);	/* NaN until written */
		prefix_counters(&h0, &m0, &cached);
		for (first = 0; first < 2 && !r; first++) {
			bool cache = (first == 0) == (rd % 2 == 1);

			r = run_phase(sh, cache ? "prefix-on" : "prefix-off",
				      cache, cache ? &on[rd] : &off[rd]);
		}
		if (r)
			break;
		prefix_counters(&h1, &m1, &cached);
		hit[rd] = h1 + m1 > h0 + m0 ?
			  (double)(h1 - h0) / (double)(h1 + m1 - h0 - m0) : 0;
		/* the next round starts with an empty cache (the tenant's
		 * peak stays one round's); the last round's stays for
		 * match_cost() */
		if (rd + 1 < rounds) {
			struct kvl_admin *adm;

			if (!kvl_admin_open(sock_path, &adm)) {
				kvl_admin_prefix_flush(adm, NULL, "prefix-on");
				kvl_admin_close(adm);
			}
		}
		diff[rd] = compare_outputs(&bad_w, &bad_i);
		if (diff[rd] > worst)
			worst = diff[rd];
		printf("  round %d: TTFT p50 off %.1f ms, on %.1f ms (%.1fx); "
		       "outputs on vs off: largest difference %.2g of the "
		       "largest output\n", rd + 1, off[rd].p50, on[rd].p50,
		       on[rd].p50 > 0 ? off[rd].p50 / on[rd].p50 : 0, diff[rd]);
		fflush(stdout);
		if (diff[rd] > 1e-5 && fail_rd < 0) {
			fail_rd = rd;
			fprintf(stderr, "kvpool-bench-prefix: FAIL: round %d: "
				"worker %d request %d: the attention outputs "
				"with the cache on differ from those with it "
				"off (%.3g of the largest output)\n", rd + 1,
				bad_w, bad_i, diff[rd]);
		}
	}
	/* after the counters above: its own matches are not the load's */
	if (!r)
		r = match_cost(&call_ns, &daemon_ns, &call_min, &daemon_min);
	kill(d, SIGTERM);
	waitpid(d, NULL, 0);
	if (r) {
		fprintf(stderr, "kvpool-bench-prefix: a phase failed: %s (log in "
			"%s)\n", strerror(-r), dir);
		return 1;
	}
	ix_ns = index_ns_per_block();
	ratio = ROUNDS_OF(x, on[k_].p50 > 0 ? off[k_].p50 / on[k_].p50 : 0);
	p50_off = ROUNDS_OF(x, off[k_].p50);
	p50_on = ROUNDS_OF(x, on[k_].p50);
	p99_off = ROUNDS_OF(x, off[k_].p99);
	p99_on = ROUNDS_OF(x, on[k_].p99);
	loaded = ROUNDS_OF(x, on[k_].mean_match_ns_per_block);
	hits = ROUNDS_OF(x, hit[k_]);
	printf("%d rounds: median [min-max]\n", rounds);
	printf("%-6s %15s %27s %27s %12s %8s %8s\n", "cache", "prefill_tokens",
	       "ttft_p50_ms", "ttft_p99_ms", "peak_blocks", "copies", "wall_s");
	printf("%-6s %15llu %9.1f [%7.1f-%7.1f] %9.1f [%7.1f-%7.1f] %12u %8s "
	       "%8.1f\n", "off", (unsigned long long)off[0].computed,
	       p50_off.med, p50_off.lo, p50_off.hi, p99_off.med, p99_off.lo,
	       p99_off.hi, off[rounds - 1].peak, "-",
	       ROUNDS_OF(x, off[k_].wall_s).med);
	printf("%-6s %15llu %9.1f [%7.1f-%7.1f] %9.1f [%7.1f-%7.1f] %12u %8d "
	       "%8.1f\n", "on", (unsigned long long)on[0].computed, p50_on.med,
	       p50_on.lo, p50_on.hi, p99_on.med, p99_on.lo, p99_on.hi,
	       on[rounds - 1].peak, on[0].copies,
	       ROUNDS_OF(x, on[k_].wall_s).med);
	printf("TTFT p50 off/on: %.1fx [%.1f-%.1f] over %d rounds; hit rate "
	       "%.3f [%.3f-%.3f] (blocks); prompt blocks used by the %d "
	       "requests of a round: %d cop%s; cached blocks at the end of "
	       "the last round %u (the cache is flushed between rounds)\n",
	       ratio.med, ratio.lo, ratio.hi, rounds, hits.med, hits.lo,
	       hits.hi, nworkers * nreq, on[0].copies,
	       on[0].copies == 1 ? "y" : "ies", cached);
	printf("lookup+attach per block (%u blocks): %.0f ns in kvpoold "
	       "(median of 100, min %.0f); %.0f ns for the kvl_seq_match call "
	       "seen by one client, round trip included, nothing else running "
	       "(median of 100, min %.0f); %.0f ns [%.0f-%.0f] for the same "
	       "call under the cache-on load above (mean per round, median "
	       "[min-max] over the rounds); the index alone %.0f ns (key + "
	       "verified lookup, best of 200)\n", PROMPT / tpb, daemon_ns,
	       daemon_min, call_ns, call_min, loaded.med, loaded.lo, loaded.hi,
	       ix_ns);
	printf("attention outputs, cache on against off (every request's "
	       "suffix, every layer): largest difference %.2g of the largest "
	       "output (limit 1e-5): %s\n", worst,
	       fail_rd < 0 ? "equal" : "DIFFER");
	printf("{\"rounds\": %d, \"ttft_p50_ms_on\": %.2f, "
	       "\"ttft_p50_ms_off\": %.2f, \"ttft_p99_ms_on\": %.2f, "
	       "\"ttft_p99_ms_off\": %.2f, \"ttft_ratio\": %.2f, "
	       "\"ttft_ratio_min\": %.2f, \"ttft_ratio_max\": %.2f, "
	       "\"peak_blocks_on\": %u, "
	       "\"peak_blocks_off\": %u, \"hit_rate\": %.4f, "
	       "\"prefill_tokens_on\": %llu, \"prefill_tokens_off\": %llu, "
	       "\"prompt_copies_on\": %d, \"daemon_ns_per_block\": %.0f, "
	       "\"match_ns_per_block\": %.0f, "
	       "\"match_ns_per_block_loaded\": %.0f, "
	       "\"index_ns_per_block\": %.0f, \"outputs_equal\": %s, "
	       "\"outputs_max_rel_diff\": %.3g}\n", rounds, p50_on.med,
	       p50_off.med, p99_on.med, p99_off.med, ratio.med, ratio.lo,
	       ratio.hi, on[rounds - 1].peak, off[rounds - 1].peak, hits.med,
	       (unsigned long long)on[0].computed,
	       (unsigned long long)off[0].computed, on[0].copies, daemon_ns,
	       call_ns, loaded.med, ix_ns, fail_rd < 0 ? "true" : "false",
	       worst);
	unlink(sp);
	snprintf(sp, sizeof(sp), "%s/kvpoold.log", dir);
	unlink(sp);
	rmdir(dir);
	return fail_rd < 0 ? 0 : 1;
}
