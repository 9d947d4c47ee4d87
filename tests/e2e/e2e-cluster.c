// SPDX-License-Identifier: MIT
/*
 * e2e-cluster - a tenant process of one kvpoold node, for the cluster
 * tier's tests (tests/e2e/test-cluster.sh) and its benchmark:
 *
 *   e2e-cluster publish SOCK TENANT SEED NTOK
 *        prefill NTOK tokens, publish their full blocks, print
 *        "published N"; the cache keeps them after the process exits
 *   e2e-cluster hit SOCK TENANT SEED NTOK MIN
 *        match the tokens (from the node's cache or the cluster), then
 *        check the matched K/V bit for bit against a private prefill of
 *        the same tokens (the run without the cluster tier) and decode
 *        outputs against the private copy's; fails below MIN blocks
 *        matched; prints "matched B blocks kv=<FNV-1a of the K/V>
 *        ms=<time of the match call>"
 *   e2e-cluster load SOCK TENANT NSEEDS NTOK STOPFILE [evict]
 *        until STOPFILE exists: match a prompt of one of NSEEDS seeds,
 *        check it as hit does, publish it (and with evict give the
 *        tenant's unreferenced cached blocks back, so that the next
 *        request fetches from the cluster); prints requests, hits and
 *        wrong blocks (any wrong block or error fails at once)
 *   e2e-cluster evict SOCK TENANT N     give back N unreferenced blocks
 *   e2e-cluster tierlease SOCK TENANT TIER N  lease N blocks in a lower
 *        tier, waiting up to 5 s for room, and give them back
 *   e2e-cluster tokens SEED NTOK        the token ids, one per line
 *   e2e-cluster stats SOCK              the daemon's cluster counters
 *   e2e-cluster wait SOCK FIELD MIN MS  until counter FIELD >= MIN
 *
 * Layout as e2e-prefix: bf16, 2 layers, 2 kv heads, head_dim 64 (1 KiB
 * per token: 64 tokens per 64 KiB block); the model name is $E2E_MODEL
 * (default "e2e-model@1").  K/V of position p are a function of (token,
 * p, layer), so two nodes prefilling the same tokens write the same
 * bytes.  Exit 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvlease.h"

#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define Q_HEADS		4
#define ROW		(KV_HEADS * HEAD_DIM)

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)

static const char *sock_path;
static uint32_t tpb;

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static void tokens_of(uint32_t seed, uint32_t n, uint32_t *out)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		out[i] = (uint32_t)(mix(((uint64_t)seed << 32) | i) % 32000);
}

static float val(uint32_t tok, uint32_t pos, uint32_t layer, uint32_t i,
		 uint32_t kind)
{
	uint64_t x = mix(((uint64_t)tok << 40) ^ ((uint64_t)pos << 16) ^
			 ((uint64_t)layer << 12) ^ ((uint64_t)i << 2) ^ kind);

	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

static struct kvl_ctx *open_ctx(const char *tenant)
{
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant;
	o.lease_batch = 8;
	o.timeout_ns = 5000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open tenant %s: %s", tenant, strerror(-r));
	return ctx;
}

static int declare(struct kvl_ctx *ctx)
{
	const char *model = getenv("E2E_MODEL");
	struct kvl_layout l;
	int id;

	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 10000.0f;
	id = kvl_layout_declare_model(ctx, &l, model && model[0] ? model :
				      "e2e-model@1");
	if (id < 0)
		FAIL("declare layout: %s", strerror(-id));
	tpb = l.tokens_per_block;
	return id;
}

static void fill(struct kvl_seq *s, const uint32_t *tok, uint32_t from,
		 uint32_t to)
{
	uint32_t n = to - from, layer, t, i;
	float *k = malloc((size_t)n * ROW * 4), *v = malloc((size_t)n * ROW * 4);
	int r;

	for (layer = 0; layer < LAYERS; layer++) {
		for (t = 0; t < n; t++)
			for (i = 0; i < ROW; i++) {
				k[t * ROW + i] = val(tok[from + t], from + t,
						     layer, i, 1);
				v[t * ROW + i] = val(tok[from + t], from + t,
						     layer, i, 2);
			}
		r = kvl_seq_write_kv(s, layer, from, n, k, v);
		if (r)
			FAIL("write_kv: %s", strerror(-r));
	}
	free(k);
	free(v);
}

static struct kvl_seq *private_seq(struct kvl_ctx *ctx, int layout,
				   const uint32_t *tok, uint32_t n)
{
	struct kvl_seq *s;
	int r = kvl_seq_create(ctx, layout, &s);

	if (r)
		FAIL("seq_create: %s", strerror(-r));
	r = kvl_seq_append_tokens(s, tok, n);
	if (r < 0)
		FAIL("append_tokens: %s", strerror(-r));
	fill(s, tok, 0, n);
	return s;
}

static double match_ms;		/* of the last kvl_seq_match */

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static struct kvl_seq *matched_seq(struct kvl_ctx *ctx, int layout,
				   const uint32_t *tok, uint32_t n,
				   uint32_t *matched)
{
	struct kvl_seq *s;
	int r = kvl_seq_create(ctx, layout, &s), m;
	double t0;

	if (r)
		FAIL("seq_create: %s", strerror(-r));
	t0 = now_ms();
	m = kvl_seq_match(s, tok, n);
	match_ms = now_ms() - t0;
	if (m < 0)
		FAIL("match: %s", strerror(-m));
	if ((uint32_t)m < n) {
		r = kvl_seq_append_tokens(s, tok + m, n - (uint32_t)m);
		if (r < 0)
			FAIL("append_tokens: %s", strerror(-r));
		fill(s, tok, (uint32_t)m, n);
	}
	*matched = (uint32_t)m;
	return s;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* K/V of both bit for bit; returns the FNV-1a of a's. */
static uint64_t same_kv(struct kvl_seq *a, struct kvl_seq *b, uint32_t n)
{
	float *ka = malloc((size_t)n * ROW * 4), *va = malloc((size_t)n * ROW * 4);
	float *kb = malloc((size_t)n * ROW * 4), *vb = malloc((size_t)n * ROW * 4);
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t layer;
	int r;

	for (layer = 0; layer < LAYERS; layer++) {
		r = kvl_seq_read_kv(a, layer, 0, n, ka, va);
		if (!r)
			r = kvl_seq_read_kv(b, layer, 0, n, kb, vb);
		if (r)
			FAIL("read_kv: %s", strerror(-r));
		if (memcmp(ka, kb, (size_t)n * ROW * 4) ||
		    memcmp(va, vb, (size_t)n * ROW * 4))
			FAIL("wrong block: K/V differ from a private prefill "
			     "in layer %u", layer);
		h = fnv(h, ka, (size_t)n * ROW * 4);
		h = fnv(h, va, (size_t)n * ROW * 4);
	}
	free(ka);
	free(va);
	free(kb);
	free(vb);
	return h;
}

static void same_decode(struct kvl_seq *a, struct kvl_seq *b, uint32_t step)
{
	float q[Q_HEADS * HEAD_DIM], oa[Q_HEADS * HEAD_DIM], ob[Q_HEADS * HEAD_DIM];
	uint32_t layer, i;
	int r;

	for (layer = 0; layer < LAYERS; layer++) {
		for (i = 0; i < Q_HEADS * HEAD_DIM; i++)
			q[i] = val(step, 7, layer, i, 3);
		r = kvl_seq_decode(&a, 1, layer, Q_HEADS, q, 0, oa);
		if (!r)
			r = kvl_seq_decode(&b, 1, layer, Q_HEADS, q, 0, ob);
		if (r)
			FAIL("decode: %s", strerror(-r));
		for (i = 0; i < Q_HEADS * HEAD_DIM; i++)
			if (fabsf(oa[i] - ob[i]) > 1e-6f * fmaxf(1.0f, fabsf(ob[i])))
				FAIL("decode layer %u: %g != %g", layer, oa[i],
				     ob[i]);
	}
}

static int cmd_publish(const char *tenant, uint32_t seed, uint32_t n)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx);
	uint32_t *tok = malloc(n * sizeof(*tok));
	struct kvl_seq *s;
	int r;

	tokens_of(seed, n, tok);
	s = private_seq(ctx, layout, tok, n);
	r = kvl_seq_publish(s);
	if (r < 0)
		FAIL("publish: %s", strerror(-r));
	printf("published %d\n", r);
	kvl_seq_free(s);
	kvl_close(ctx);
	free(tok);
	return 0;
}

/* One request: match, check against a private prefill.  Blocks matched. */
static uint32_t request(struct kvl_ctx *ctx, int layout, uint32_t seed,
			uint32_t n, bool publish, uint64_t *kvsum)
{
	uint32_t *tok = malloc((n + 8) * sizeof(*tok)), matched;
	struct kvl_seq *m, *p;
	int r;

	tokens_of(seed, n + 8, tok);
	m = matched_seq(ctx, layout, tok, n, &matched);
	p = private_seq(ctx, layout, tok, n);
	*kvsum = same_kv(m, p, n);
	same_decode(m, p, seed);
	if (publish) {
		r = kvl_seq_publish(m);
		if (r < 0)
			FAIL("publish: %s", strerror(-r));
	}
	kvl_seq_free(m);
	kvl_seq_free(p);
	free(tok);
	return matched / tpb;
}

static int cmd_hit(const char *tenant, uint32_t seed, uint32_t n, uint32_t min)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx);
	uint64_t sum;
	uint32_t blocks;

	blocks = request(ctx, layout, seed, n, false, &sum);
	printf("matched %u blocks kv=%016llx ms=%.1f\n", blocks,
	       (unsigned long long)sum, match_ms);
	kvl_close(ctx);
	if (blocks < min)
		FAIL("matched %u blocks, want at least %u", blocks, min);
	return 0;
}

static int cmd_load(const char *tenant, uint32_t nseeds, uint32_t n,
		    const char *stop, bool evict)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx);
	uint64_t reqs = 0, hits = 0, sum, x = (uint64_t)getpid();
	int r;

	while (access(stop, F_OK)) {
		uint32_t seed;

		x = mix(x + 1);
		seed = 1000 + (uint32_t)(x % nseeds);
		hits += request(ctx, layout, seed, n, true, &sum);
		reqs++;
		/* the next request finds nothing here: from the cluster */
		if (evict && (r = kvl_prefix_evict(ctx, 1U << 20)) < 0)
			FAIL("evict: %s", strerror(-r));
	}
	printf("requests %llu hit_blocks %llu wrong 0\n",
	       (unsigned long long)reqs, (unsigned long long)hits);
	kvl_close(ctx);
	return 0;
}

static int cmd_evict(const char *tenant, uint32_t n)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int r = kvl_prefix_evict(ctx, n);

	if (r < 0)
		FAIL("evict: %s", strerror(-r));
	printf("evicted %d\n", r);
	kvl_close(ctx);
	return 0;
}

/* Lease N blocks in a lower tier, waiting (5 s at most) for room. */
static int cmd_tierlease(const char *tenant, uint32_t tier, uint32_t n)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	uint32_t *b = malloc(n * sizeof(*b));
	int r = kvl_tier_join(ctx, tier);

	if (!r)
		r = kvl_tier_lease(ctx, tier, n, 0, 5000000000ULL, b);
	if (r < 0)
		FAIL("tier %u lease of %u: %s", tier, n, strerror(-r));
	printf("leased %d\n", r);
	r = kvl_tier_release(ctx, tier, b, (uint32_t)r);
	if (r < 0)
		FAIL("tier release: %s", strerror(-r));
	kvl_close(ctx);
	free(b);
	return 0;
}

static void get_status(struct kvl_cluster_info *st)
{
	struct kvl_admin *adm;
	int r = kvl_admin_open(sock_path, &adm);

	if (r)
		FAIL("kvl_admin_open: %s", strerror(-r));
	r = kvl_admin_cluster_status(adm, st);
	kvl_admin_close(adm);
	if (r)
		FAIL("cluster status: %s", strerror(-r));
}

#define F(x) { #x, offsetof(struct kvl_cluster_info, x), 8 }
#define F4(x) { #x, offsetof(struct kvl_cluster_info, x), 4 }
static const struct { const char *name; size_t off, size; } fields[] = {
	F4(state), F4(policy), F4(masters), F4(slots), F4(tenants),
	F(fetches), F(fetch_blocks), F(fetch_hits), F(fetch_absent),
	{ "invalid_short", offsetof(struct kvl_cluster_info, fetch_invalid), 8 },
	{ "invalid_format", offsetof(struct kvl_cluster_info, fetch_invalid) + 8, 8 },
	{ "invalid_model", offsetof(struct kvl_cluster_info, fetch_invalid) + 16, 8 },
	{ "invalid_chain", offsetof(struct kvl_cluster_info, fetch_invalid) + 24, 8 },
	{ "invalid_tokens", offsetof(struct kvl_cluster_info, fetch_invalid) + 32, 8 },
	{ "invalid_checksum", offsetof(struct kvl_cluster_info, fetch_invalid) + 40, 8 },
	F(fetch_errors), F(fetch_timeouts), F(fetch_late), F(fetch_dropped),
	F(fetch_no_room), F(fetch_bytes), F(fetch_ns), F(put_blocks),
	F(put_bytes), F(put_oom), F(put_errors), F(put_timeouts),
	F(put_dropped), F(events), F(events_dropped), F(heartbeats),
	F(heartbeat_errors), F(moved), F(ask), F(connects), F(connect_errors),
	F(io_errors), F(refreshes),
};

static uint64_t field(const struct kvl_cluster_info *st, size_t i)
{
	const char *p = (const char *)st + fields[i].off;
	uint32_t v4;
	uint64_t v8;

	if (fields[i].size == 4) {
		memcpy(&v4, p, 4);
		return v4;
	}
	memcpy(&v8, p, 8);
	return v8;
}

static int cmd_stats(void)
{
	struct kvl_cluster_info st;
	size_t i;

	get_status(&st);
	printf("node=%s", st.node);
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		printf(" %s=%llu", fields[i].name,
		       (unsigned long long)field(&st, i));
	printf("\n");
	return 0;
}

static int cmd_wait(const char *name, uint64_t min, uint32_t ms)
{
	struct kvl_cluster_info st;
	struct timespec ts = { 0, 50000000 };
	uint32_t waited = 0;
	size_t i;

	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (!strcmp(fields[i].name, name))
			break;
	if (i == sizeof(fields) / sizeof(fields[0]))
		FAIL("no counter %s", name);
	for (;;) {
		get_status(&st);
		if (field(&st, i) >= min)
			return 0;
		if (waited >= ms)
			FAIL("%s is %llu after %u ms, want >= %llu", name,
			     (unsigned long long)field(&st, i), ms,
			     (unsigned long long)min);
		nanosleep(&ts, NULL);
		waited += 50;
	}
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
	if (argc >= 4 && !strcmp(argv[1], "tokens")) {
		uint32_t n = num(argv[3]), *t = malloc(n * 4), i;

		tokens_of(num(argv[2]), n, t);
		for (i = 0; i < n; i++)
			printf("%u\n", t[i]);
		return 0;
	}
	if (argc < 3)
		goto usage;
	sock_path = argv[2];
	if (!strcmp(argv[1], "publish") && argc == 6)
		return cmd_publish(argv[3], num(argv[4]), num(argv[5]));
	if (!strcmp(argv[1], "hit") && argc == 7)
		return cmd_hit(argv[3], num(argv[4]), num(argv[5]),
			       num(argv[6]));
	if (!strcmp(argv[1], "load") && (argc == 7 || (argc == 8 &&
					 !strcmp(argv[7], "evict"))))
		return cmd_load(argv[3], num(argv[4]), num(argv[5]), argv[6],
				argc == 8);
	if (!strcmp(argv[1], "evict") && argc == 5)
		return cmd_evict(argv[3], num(argv[4]));
	if (!strcmp(argv[1], "tierlease") && argc == 6)
		return cmd_tierlease(argv[3], num(argv[4]), num(argv[5]));
	if (!strcmp(argv[1], "stats") && argc == 3)
		return cmd_stats();
	if (!strcmp(argv[1], "wait") && argc == 6)
		return cmd_wait(argv[3], strtoull(argv[4], NULL, 0),
				num(argv[5]));
usage:
	fprintf(stderr, "usage: see the head of tests/e2e/e2e-cluster.c\n");
	return 2;
}
