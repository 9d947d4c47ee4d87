// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-cluster - the client side of `make bench-cluster`
 * (tests/bench/bench-cluster.sh starts the Redis Cluster and the kvpoold
 * nodes and calls this):
 *
 *   prefill SOCK TENANT NPREFIX
 *        node A's tenant prefills NPREFIX shared prefixes (PROMPT tokens
 *        each) and publishes them
 *   run SOCK TENANT NPREFIX NPROC NREQ OUT [KILLPID]
 *        NPROC replicas each serve NREQ requests (prefix (replica + j *
 *        NPROC) % NPREFIX plus a suffix of their own); a request is what
 *        kvpool does for it: kvl_seq_match (the node's cache, then the
 *        cluster), K/V writes and causal attention over every position not
 *        matched, all layers; TTFT ends when the last layer's attention
 *        returns.  After each request the replica gives the tenant's
 *        unreferenced cached blocks back (kvl_prefix_evict), so every
 *        request is the node's first for its prefix.  Then (not timed)
 *        the matched K/V are compared with a private prefill of the same
 *        tokens: a difference is a wrong block.  With KILLPID, SIGKILL
 *        goes to it when half the requests are done (a master of the
 *        cluster).  OUT gets one line per request: "ttft_ms matched_blocks
 *        prompt_blocks wrong match_ms".
 *   fetch SOCK TENANT NPREFIX REPS
 *        the fetch path alone: each prefix matched (no attention) after
 *        the tenant's cached blocks were given back, REPS times; prints
 *        "match GB/s" (payload bytes over the time of the MATCH calls)
 *   rawget SEEDS VALUE_BYTES NKEYS ROUNDS
 *        the cluster's own rate: SET NKEYS values of VALUE_BYTES, then
 *        ROUNDS pipelined rounds of GET of all of them through the same
 *        client (daemon/rcluster.c); prints "rawget GB/s" per round
 *   value-bytes     the bytes of one block's value in the cluster
 *
 * Layout: bf16, 2 layers, 4 KV heads of 64, 8 query heads: 2 KiB per
 * token, blocks of 256 KiB (128 tokens); PROMPT 1,024 tokens (8 blocks,
 * 2 MiB of KV), suffix 32 tokens.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "kvlease.h"
#include "cluster_value.h"
#include "rcluster.h"

#define PROMPT		1024
#define SUFFIX		32
#define NTOK		(PROMPT + SUFFIX)
#define LAYERS		2
#define KV_HEADS	4
#define HEAD_DIM	64
#define Q_HEADS		8
#define ROW		(KV_HEADS * HEAD_DIM)
#define BLOCK_BYTES	262144
#define MODEL		"bench-cluster-model@1"

#define FAIL(...) do { fprintf(stderr, "kvpool-bench-cluster: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)

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

/* Prefix p's tokens, then suffix s's (s 0: none). */
static void tokens(uint32_t p, uint32_t s, uint32_t *tok)
{
	uint32_t i;

	for (i = 0; i < PROMPT; i++)
		tok[i] = (uint32_t)(mix(((uint64_t)(p + 1) << 32) | i) % 128000);
	for (i = PROMPT; i < NTOK; i++)
		tok[i] = (uint32_t)(mix(((uint64_t)(s + 7777) << 40) | i) %
				    128000);
}

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

static struct kvl_ctx *open_ctx(const char *sock, const char *tenant,
				int *layout)
{
	struct kvl_opts o;
	struct kvl_layout l;
	struct kvl_ctx *ctx;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock;
	o.tenant = tenant;
	o.lease_batch = 16;
	o.timeout_ns = 30000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open %s: %s", sock, strerror(-r));
	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 10000.0f;
	*layout = kvl_layout_declare_model(ctx, &l, MODEL);
	if (*layout < 0)
		FAIL("layout: %s", strerror(-*layout));
	tpb = l.tokens_per_block;
	if (PROMPT % tpb)
		FAIL("the prompt is not whole blocks (%u tokens per block)",
		     tpb);
	return ctx;
}

/* Write K/V of [from, to) (all layers); with q/out, causal attention. */
static int prefill(struct kvl_seq *s, const uint32_t *tok, uint32_t from,
		   uint32_t to, bool attend)
{
	uint32_t n = to - from, layer, j;
	float *k = malloc((size_t)n * ROW * 4), *v = malloc((size_t)n * ROW * 4);
	float *q = attend ? malloc((size_t)n * Q_HEADS * HEAD_DIM * 4) : NULL;
	float *o = attend ? malloc((size_t)n * Q_HEADS * HEAD_DIM * 4) : NULL;
	int r = 0;

	if (!k || !v || (attend && (!q || !o)))
		r = -ENOMEM;
	for (layer = 0; layer < LAYERS && !r; layer++) {
		kv_rows(tok, from, n, layer, k, v);
		r = kvl_seq_write_kv(s, layer, from, n, k, v);
		if (r || !attend)
			continue;
		for (j = 0; j < n * Q_HEADS * HEAD_DIM; j++)
			q[j] = val(((uint64_t)tok[from + j / (Q_HEADS * HEAD_DIM)]
				    << 8) ^ layer, j % (Q_HEADS * HEAD_DIM) + 7);
		r = kvl_seq_attention(&s, 1, layer, Q_HEADS, n, q, 0, o);
	}
	free(k);
	free(v);
	free(q);
	free(o);
	return r;
}

static int cmd_prefill(const char *sock, const char *tenant, uint32_t np)
{
	int layout;
	struct kvl_ctx *ctx = open_ctx(sock, tenant, &layout);
	uint32_t tok[NTOK], p;

	for (p = 0; p < np; p++) {
		struct kvl_seq *s;
		int r = kvl_seq_create(ctx, layout, &s);

		tokens(p, 0, tok);
		if (!r)
			r = kvl_seq_append_tokens(s, tok, PROMPT);
		if (r >= 0)
			r = prefill(s, tok, 0, PROMPT, true);
		if (!r)
			r = kvl_seq_publish(s);
		if (r < 0)
			FAIL("prefill %u: %s", p, strerror(-r));
		kvl_seq_free(s);
	}
	kvl_close(ctx);
	return 0;
}

/* Matched K/V of s against a private prefill: 0 equal, 1 wrong. */
static int check(struct kvl_ctx *ctx, int layout, struct kvl_seq *s,
		 const uint32_t *tok, uint32_t m)
{
	float *ka = malloc((size_t)m * ROW * 4), *va = malloc((size_t)m * ROW * 4);
	float *kb = malloc((size_t)m * ROW * 4), *vb = malloc((size_t)m * ROW * 4);
	struct kvl_seq *p;
	uint32_t layer;
	int r, wrong = 0;

	if (!m)
		return 0;
	r = kvl_seq_create(ctx, layout, &p);
	if (!r)
		r = kvl_seq_append_tokens(p, tok, m);
	if (r >= 0)
		r = prefill(p, tok, 0, m, false);
	for (layer = 0; layer < LAYERS && r >= 0; layer++) {
		r = kvl_seq_read_kv(s, layer, 0, m, ka, va);
		if (!r)
			r = kvl_seq_read_kv(p, layer, 0, m, kb, vb);
		if (!r && (memcmp(ka, kb, (size_t)m * ROW * 4) ||
			   memcmp(va, vb, (size_t)m * ROW * 4)))
			wrong = 1;
	}
	if (r < 0)
		FAIL("check: %s", strerror(-r));
	kvl_seq_free(p);
	free(ka);
	free(va);
	free(kb);
	free(vb);
	return wrong;
}

struct shared {
	_Atomic uint32_t done;
	_Atomic int killed;
};

static int replica(const char *sock, const char *tenant, uint32_t np,
		   uint32_t nproc, uint32_t id, uint32_t nreq, FILE *out,
		   struct shared *sh, pid_t killpid)
{
	int layout;
	struct kvl_ctx *ctx = open_ctx(sock, tenant, &layout);
	uint32_t tok[NTOK], j;

	for (j = 0; j < nreq; j++) {
		uint32_t p = (id + j * nproc) % np, m;
		struct kvl_seq *s;
		uint64_t t0, t1, t2;
		int r, wrong;

		tokens(p, id * 1000 + j + 1, tok);
		t0 = now_ns();
		r = kvl_seq_create(ctx, layout, &s);
		if (r)
			FAIL("seq_create: %s", strerror(-r));
		r = kvl_seq_match(s, tok, NTOK);
		if (r < 0)
			FAIL("match: %s", strerror(-r));
		m = (uint32_t)r;
		t1 = now_ns();
		r = kvl_seq_append_tokens(s, tok + m, NTOK - m);
		if (r >= 0)
			r = prefill(s, tok, m, NTOK, true);
		if (r < 0)
			FAIL("prefill: %s", strerror(-r));
		t2 = now_ns();
		wrong = check(ctx, layout, s, tok, m);
		fprintf(out, "%.3f %u %u %d %.3f\n", (double)(t2 - t0) / 1e6,
			m / tpb, PROMPT / tpb, wrong, (double)(t1 - t0) / 1e6);
		fflush(out);
		kvl_seq_free(s);
		/* the next request is this node's first for its prefix */
		r = kvl_prefix_evict(ctx, 1U << 20);
		if (r < 0)
			FAIL("evict: %s", strerror(-r));
		if (killpid > 0 && atomic_fetch_add(&sh->done, 1) + 1 ==
		    nproc * nreq / 2 && !atomic_exchange(&sh->killed, 1))
			kill(killpid, SIGKILL);
	}
	kvl_close(ctx);
	return 0;
}

static int cmd_run(const char *sock, const char *tenant, uint32_t np,
		   uint32_t nproc, uint32_t nreq, const char *path,
		   pid_t killpid)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	FILE *out = fopen(path, "w");
	uint32_t i;
	int bad = 0, st;

	if (sh == MAP_FAILED || !out)
		FAIL("run: %s", strerror(errno));
	memset(sh, 0, sizeof(*sh));
	for (i = 0; i < nproc; i++) {
		pid_t pid = fork();

		if (pid < 0)
			FAIL("fork: %s", strerror(errno));
		if (!pid)
			_exit(replica(sock, tenant, np, nproc, i, nreq, out, sh,
				      killpid));
	}
	while (wait(&st) > 0)
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	fclose(out);
	return bad;
}

/* Each prefix matched alone (no attention), the tenant's cache given
 * back before each: the fetch path by itself, as rawget measures the
 * cluster by itself.  Prints the rate seen by the caller of MATCH. */
static int cmd_fetch(const char *sock, const char *tenant, uint32_t np,
		     uint32_t reps)
{
	int layout;
	struct kvl_ctx *ctx = open_ctx(sock, tenant, &layout);
	uint32_t tok[NTOK], p, k;
	uint64_t bytes = 0, ns = 0;

	for (k = 0; k < reps; k++)
		for (p = 0; p < np; p++) {
			struct kvl_seq *s;
			uint64_t t0;
			int r;

			r = kvl_prefix_evict(ctx, 1U << 20);
			if (r < 0)
				FAIL("evict: %s", strerror(-r));
			tokens(p, 0, tok);
			r = kvl_seq_create(ctx, layout, &s);
			if (r)
				FAIL("seq_create: %s", strerror(-r));
			t0 = now_ns();
			r = kvl_seq_match(s, tok, PROMPT);
			ns += now_ns() - t0;
			if (r < 0)
				FAIL("match: %s", strerror(-r));
			bytes += (uint64_t)r / tpb * BLOCK_BYTES;
			kvl_seq_free(s);
		}
	kvl_prefix_evict(ctx, 1U << 20);
	kvl_close(ctx);
	printf("match %.3f\n", ns ? (double)bytes / (double)ns : 0.0);
	return 0;
}

static int cmd_rawget(const char *seeds, size_t bytes, uint32_t nkeys,
		      uint32_t rounds)
{
	struct rc_opts o;
	struct rc_cluster *rc;
	struct rc_cmd *cmds = calloc(nkeys, sizeof(*cmds));
	const char **argv = malloc(nkeys * 3 * sizeof(*argv));
	size_t *len = malloc(nkeys * 3 * sizeof(*len));
	char (*keys)[48] = malloc(nkeys * sizeof(*keys));
	char *v = malloc(bytes);
	uint32_t i, r;
	int got;

	memset(&o, 0, sizeof(o));
	o.seeds = seeds;
	if (!cmds || !argv || !len || !keys || !v || rc_open(&o, &rc))
		FAIL("rawget: cannot start");
	rc_refresh(rc, now_ns() + 2000000000ULL);
	for (i = 0; i < bytes; i++)
		v[i] = (char)mix(i);
	for (i = 0; i < nkeys; i++) {
		snprintf(keys[i], sizeof(keys[i]), "kvpool:bench:raw:%u", i);
		argv[3 * i] = "SET";
		len[3 * i] = 3;
		argv[3 * i + 1] = keys[i];
		len[3 * i + 1] = strlen(keys[i]);
		argv[3 * i + 2] = v;
		len[3 * i + 2] = bytes;
		cmds[i].argc = 3;
		cmds[i].argv = argv + 3 * i;
		cmds[i].argvlen = len + 3 * i;
		cmds[i].key = 1;
	}
	got = rc_exec(rc, cmds, nkeys, now_ns() + 10000000000ULL);
	for (i = 0; i < nkeys; i++)
		if (cmds[i].reply)
			freeReplyObject(cmds[i].reply);
	if (got != (int)nkeys)
		FAIL("rawget: %d of %u values stored", got, nkeys);
	for (r = 0; r < rounds; r++) {
		uint64_t t0, dt, total = 0;

		for (i = 0; i < nkeys; i++) {
			argv[3 * i] = "GET";
			cmds[i].argc = 2;
		}
		t0 = now_ns();
		got = rc_exec(rc, cmds, nkeys, now_ns() + 10000000000ULL);
		dt = now_ns() - t0;
		for (i = 0; i < nkeys; i++) {
			if (cmds[i].reply &&
			    cmds[i].reply->type == REDIS_REPLY_STRING)
				total += cmds[i].reply->len;
			if (cmds[i].reply)
				freeReplyObject(cmds[i].reply);
		}
		if (got != (int)nkeys || total != (uint64_t)nkeys * bytes)
			FAIL("rawget: round %u got %d values", r, got);
		printf("rawget %.3f\n", (double)total / (double)dt);
	}
	rc_close(rc);
	return 0;
}

static uint32_t num(const char *s)
{
	char *end;
	unsigned long v = strtoul(s, &end, 0);

	if (*end)
		FAIL("bad number %s", s);
	return (uint32_t)v;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "value-bytes")) {
		struct kvc_block b;

		memset(&b, 0, sizeof(b));
		b.tokens_per_block = BLOCK_BYTES / (LAYERS * 2 * ROW * 2);
		b.payload_bytes = BLOCK_BYTES;
		printf("%zu\n", kvc_value_bytes(&b));
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "prefill"))
		return cmd_prefill(argv[2], argv[3], num(argv[4]));
	if ((argc == 8 || argc == 9) && !strcmp(argv[1], "run"))
		return cmd_run(argv[2], argv[3], num(argv[4]), num(argv[5]),
			       num(argv[6]), argv[7],
			       argc == 9 ? (pid_t)num(argv[8]) : 0);
	if (argc == 6 && !strcmp(argv[1], "fetch"))
		return cmd_fetch(argv[2], argv[3], num(argv[4]), num(argv[5]));
	if (argc == 6 && !strcmp(argv[1], "rawget"))
		return cmd_rawget(argv[2], num(argv[3]), num(argv[4]),
				  num(argv[5]));
	fprintf(stderr, "usage: see the head of tests/bench/bench_cluster.c\n");
	return 2;
}
