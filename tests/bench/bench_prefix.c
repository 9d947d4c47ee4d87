// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-prefix - the prefix cache under a replicated-engine load.
 *
 * Starts its own kvpoold (in-process ledger, cpu backend, private socket),
 * then runs the same load twice in one run, cache off (tenant
 * "prefix-off") and cache on (tenant "prefix-on"): 8 processes of the
 * tenant, each serving R requests made of one common system prompt
 * (4,096 tokens) plus a unique suffix (256 tokens).  A request's prefill
 * is what kvpool does for it: with the cache on, kvl_seq_match() attaches
 * the cached blocks of the prompt; then K/V of every position not matched
 * are written (kvl_seq_write_kv, all layers) and causal attention runs
 * over them (kvl_seq_attention, all layers); the first token is ready
 * when the last layer's attention returns (TTFT).  With the cache on the
 * request then publishes its full blocks (kvl_seq_publish).
 *
 * The first request of process 0 runs alone before the others start (the
 * system prompt is computed once, as when a fleet warms up); the others
 * then run at once.  The same schedule is used for both phases.
 *
 * Printed: prefill tokens computed, TTFT p50/p99 (ms), the tenant's peak
 * blocks, the cache's hit rate (hit blocks / full blocks looked up, from
 * kvpoold's counters), how many copies of the prompt's blocks the
 * requests used, the cost of kvl_seq_match per block (lookup + attach,
 * round trip included) and of the index alone in this process (key +
 * verified lookup of a 256-block chain, no I/O).  The last line is one
 * JSON object.
 */
#include <errno.h>
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
static int nworkers = 8, nreq = 2;
static uint32_t tpb;

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
		tok[p] = (uint32_t)(mix(p + 1) % 128000);
	for (p = PROMPT; p < NTOK; p++)
		tok[p] = (uint32_t)(mix(((uint64_t)(w * MAX_REQ + i + 1) << 32) |
					p) % 128000);
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
 * daemon's own time per block (from the MATCH reply).  Best of 100.
 */
static int match_cost(double *call_ns, double *daemon_ns)
{
	struct kvl_opts o;
	struct kvl_layout l;
	struct kvl_ctx *ctx;
	uint32_t *tok = malloc(NTOK * sizeof(*tok)), nb = PROMPT / tpb;
	int layout, i, r;

	*call_ns = *daemon_ns = 1e30;
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
		if ((double)t / nb < *call_ns)
			*call_ns = (double)t / nb;
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
		if ((double)rep.daemon_ns / nb < *daemon_ns)
			*daemon_ns = (double)rep.daemon_ns / nb;
		memset(&u, 0, sizeof(u));
		u.flags = KVP_PREFIX_UNREF_ALL;
		kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &u, sizeof(u), NULL, 0, NULL);
	}
	kvl_close(ctx);
	free(tok);
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

int main(int argc, char **argv)
{
	const char *kvpoold = "build/bin/kvpoold";
	struct kvl_prefix_info pi[16];
	struct kvl_admin *adm;
	struct phase off, on;
	struct shared *sh;
	char dir[] = "/tmp/kvpool-bench-prefix.XXXXXX", sp[4096];
	double hit_rate = 0, ix_ns, ratio, call_ns = 0, daemon_ns = 0;
	uint32_t cached = 0;
	int opt, i, n, r;
	pid_t d;

	while ((opt = getopt(argc, argv, "d:w:r:h")) != -1) {
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
		default:
			fprintf(stderr, "usage: kvpool-bench-prefix [-d KVPOOLD] "
				"[-w PROCESSES (8)] [-r REQUESTS each (2)]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (nworkers < 1 || nworkers > MAX_WORKERS || nreq < 1 ||
	    nreq > MAX_REQ) {
		fprintf(stderr, "kvpool-bench-prefix: -w 1..%d, -r 1..%d\n",
			MAX_WORKERS, MAX_REQ);
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
	if (sh == MAP_FAILED)
		return 1;
	tpb = 16;	/* 16 KiB blocks, 1 KiB per token */
	printf("kvpool-bench-prefix: %d processes of one tenant x %d requests, "
	       "%d-token common prompt + %d-token unique suffix, bf16 %d "
	       "layers x %d kv heads x %d, %u tokens per block\n", nworkers,
	       nreq, PROMPT, SUFFIX, LAYERS, KV_HEADS, HEAD_DIM, tpb);
	r = run_phase(sh, "prefix-off", false, &off);
	if (!r)
		r = run_phase(sh, "prefix-on", true, &on);
	if (!r && !kvl_admin_open(sock_path, &adm)) {
		n = kvl_admin_prefix_list(adm, NULL, pi, 16);
		for (i = 0; i < n && i < 16; i++)
			if (!strcmp(pi[i].tenant, "prefix-on")) {
				uint64_t asked = pi[i].hits + pi[i].misses;

				hit_rate = asked ? (double)pi[i].hits / asked : 0;
				cached = pi[i].cached;
			}
		kvl_admin_close(adm);
	}
	/* after the counters above: its own matches are not the load's */
	if (!r)
		r = match_cost(&call_ns, &daemon_ns);
	kill(d, SIGTERM);
	waitpid(d, NULL, 0);
	if (r) {
		fprintf(stderr, "kvpool-bench-prefix: a phase failed: %s (log in "
			"%s)\n", strerror(-r), dir);
		return 1;
	}
	ix_ns = index_ns_per_block();
	ratio = on.p50 > 0 ? off.p50 / on.p50 : 0;
	printf("%-10s %16s %12s %12s %12s %10s %8s\n", "cache", "prefill_tokens",
	       "ttft_p50_ms", "ttft_p99_ms", "peak_blocks", "copies", "wall_s");
	printf("%-10s %16llu %12.1f %12.1f %12u %10s %8.1f\n", "off",
	       (unsigned long long)off.computed, off.p50, off.p99, off.peak, "-",
	       off.wall_s);
	printf("%-10s %16llu %12.1f %12.1f %12u %10d %8.1f\n", "on",
	       (unsigned long long)on.computed, on.p50, on.p99, on.peak,
	       on.copies, on.wall_s);
	printf("TTFT p50 off/on: %.1fx; hit rate %.3f (blocks); prompt blocks "
	       "used by the %d requests: %d cop%s; cached blocks at the end "
	       "%u\n", ratio, hit_rate, nworkers * nreq, on.copies,
	       on.copies == 1 ? "y" : "ies", cached);
	printf("lookup+attach per block: %.0f ns in kvpoold, %.0f ns for the "
	       "kvl_seq_match call (round trip included, %u blocks, one "
	       "process), %.0f ns under the load above; the index alone %.0f "
	       "ns (key + verified lookup)\n", daemon_ns, call_ns,
	       PROMPT / tpb, on.mean_match_ns_per_block, ix_ns);
	printf("{\"ttft_p50_ms_on\": %.2f, \"ttft_p50_ms_off\": %.2f, "
	       "\"ttft_p99_ms_on\": %.2f, \"ttft_p99_ms_off\": %.2f, "
	       "\"ttft_ratio\": %.2f, \"peak_blocks_on\": %u, "
	       "\"peak_blocks_off\": %u, \"hit_rate\": %.4f, "
	       "\"prefill_tokens_on\": %llu, \"prefill_tokens_off\": %llu, "
	       "\"prompt_copies_on\": %d, \"daemon_ns_per_block\": %.0f, "
	       "\"match_ns_per_block\": %.0f, "
	       "\"match_ns_per_block_loaded\": %.0f, "
	       "\"index_ns_per_block\": %.0f}\n", on.p50, off.p50, on.p99,
	       off.p99, ratio, on.peak, off.peak, hit_rate,
	       (unsigned long long)on.computed,
	       (unsigned long long)off.computed, on.copies, daemon_ns, call_ns,
	       on.mean_match_ns_per_block, ix_ns);
	unlink(sp);
	snprintf(sp, sizeof(sp), "%s/kvpoold.log", dir);
	unlink(sp);
	rmdir(dir);
	return 0;
}
