// SPDX-License-Identifier: MIT
/*
 * e2e-prefix - the prefix cache end to end (kvpoold + libkvlease), one
 * concern per subcommand:
 *
 *   e2e-prefix publish SOCK TENANT SEED NTOK READY
 *        write NTOK tokens, publish them, write READY, then keep the
 *        sequence (and its references) until killed
 *   e2e-prefix read SOCK TENANT SEED NTOK READY GO
 *        match the same tokens: bytes identical to a private copy, and
 *        decode outputs equal to the private copy's, step after step;
 *        writes READY after a few steps, carries on until GO exists (the
 *        publisher is killed meanwhile), then a few more steps
 *   e2e-prefix cow SOCK TENANT       copy-on-write of shared cached blocks
 *   e2e-prefix collide SOCK TENANT   (kvpoold --prefix-hash-bits 0) equal
 *        keys, different tokens: misses, never the other's data
 *   e2e-prefix tenants SOCK A B C    other tenants never hit; a shared
 *        namespace (A and B) works, C stays out
 *   e2e-prefix quota SOCK TENANT MAX cached blocks count in current; a
 *        sequence at the tenant's max evicts them (LRU) to grow
 *   e2e-prefix lru SOCK TENANT       eviction order is least recently used
 *   e2e-prefix reclaim SOCK GREEDY PROT   (a 64-block pool, PROT with
 *        min 24) a reclaim target is met from unreferenced cached blocks
 *        first; a short pool too (SHORT)
 *   e2e-prefix bad SOCK TENANT       bad input: clear errors, nothing
 *        changed, the connection still works
 *   e2e-prefix stats SOCK TENANT     print the tenant's cache counters
 *   e2e-prefix put SOCK TENANT SEED NTOK   publish NTOK tokens and exit
 *        (the blocks stay cached, unreferenced)
 *   e2e-prefix hit SOCK TENANT SEED NTOK   match NTOK tokens, print the
 *        tokens matched, the K/V of the matched ones checked against a
 *        private copy
 *   e2e-prefix lend SOCK OWNER OTHER MAX   (kvpoold --prefix-lend-percent
 *        50; OWNER's max is MAX, OWNER and OTHER in one shared namespace)
 *        OTHER references at most MAX / 2 of OWNER's cached blocks: MATCH
 *        stops there, PUBLISH caches OTHER's own copy of the rest (charged
 *        to OTHER, found by nobody); OWNER can still use MAX - MAX / 2
 *   e2e-prefix many SOCK PREFIX N    N tenants PREFIX-0..N-1 (created
 *        here) with one cached block each; PREFIX-0's max to 0: its
 *        cache gives its block back within 5 s (the reclaim target is
 *        answered), the others keep theirs
 *
 * Layout: bf16, 2 layers, 2 kv heads, head_dim 64 (1 KiB per token: 64
 * tokens per 64 KiB block), 4 query heads.  K/V of position p are a
 * function of (token id, p, layer), so two sequences with the same
 * tokens have the same K/V.  $E2E_POOL names the pool (default: the
 * first).  Exit 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvl_internal.h"

#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define Q_HEADS		4
#define ROW		(KV_HEADS * HEAD_DIM)
#define MODEL		"e2e-model@1"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

static const char *sock_path;
static const char *pool_name;	/* $E2E_POOL, or NULL: the first pool */
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

static uint32_t token(uint32_t seed, uint32_t i)
{
	return (uint32_t)(mix(((uint64_t)seed << 32) | i) % 32000);
}

static void tokens_of(uint32_t seed, uint32_t n, uint32_t *out)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		out[i] = token(seed, i);
}

static float val(uint32_t tok, uint32_t pos, uint32_t layer, uint32_t i,
		 uint32_t kind)
{
	uint64_t x = mix(((uint64_t)tok << 40) ^ ((uint64_t)pos << 16) ^
			 ((uint64_t)layer << 12) ^ ((uint64_t)i << 2) ^ kind);

	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

static struct kvl_ctx *open_ctx(const char *tenant, uint32_t batch)
{
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.pool = pool_name;
	o.tenant = tenant;
	o.lease_batch = batch;
	o.timeout_ns = 5000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open tenant %s: %s", tenant, strerror(-r));
	return ctx;
}

static int declare(struct kvl_ctx *ctx, const char *model, uint32_t dtype)
{
	struct kvl_layout l;
	int id;

	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = dtype;
	l.rope_base = 10000.0f;
	id = model ? kvl_layout_declare_model(ctx, &l, model) :
		     kvl_layout_declare(ctx, &l);
	if (id < 0)
		FAIL("declare layout: %s", strerror(-id));
	tpb = l.tokens_per_block;
	return id;
}

/* Write K/V of positions [from, to) of a sequence whose tokens are tok[]. */
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

/* A new sequence of tok[0..n), K/V written, from scratch. */
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

/* Match tok[0..n), then append and write the rest: returns matched. */
static struct kvl_seq *matched_seq(struct kvl_ctx *ctx, int layout,
				   const uint32_t *tok, uint32_t n,
				   uint32_t *matched)
{
	struct kvl_seq *s;
	int r = kvl_seq_create(ctx, layout, &s), m;

	if (r)
		FAIL("seq_create: %s", strerror(-r));
	m = kvl_seq_match(s, tok, n);
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

/* Every K/V value of two sequences, bit for bit. */
static void same_kv(struct kvl_seq *a, struct kvl_seq *b, uint32_t n,
		    const char *what)
{
	float *ka = malloc((size_t)n * ROW * 4), *va = malloc((size_t)n * ROW * 4);
	float *kb = malloc((size_t)n * ROW * 4), *vb = malloc((size_t)n * ROW * 4);
	uint32_t layer;
	int r;

	for (layer = 0; layer < LAYERS; layer++) {
		r = kvl_seq_read_kv(a, layer, 0, n, ka, va);
		if (!r)
			r = kvl_seq_read_kv(b, layer, 0, n, kb, vb);
		if (r)
			FAIL("%s: read_kv: %s", what, strerror(-r));
		if (memcmp(ka, kb, (size_t)n * ROW * 4) ||
		    memcmp(va, vb, (size_t)n * ROW * 4))
			FAIL("%s: K/V differ in layer %u", what, layer);
	}
	free(ka);
	free(va);
	free(kb);
	free(vb);
}

/* One decode step over both: outputs must be equal. */
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
			FAIL("decode step %u: %s", step, strerror(-r));
		for (i = 0; i < Q_HEADS * HEAD_DIM; i++)
			if (fabsf(oa[i] - ob[i]) > 1e-6f * fmaxf(1.0f, fabsf(ob[i])))
				FAIL("decode step %u layer %u: %g != %g", step,
				     layer, oa[i], ob[i]);
	}
}

static void touch(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		FAIL("create %s", path);
	fputs(text, f);
	fclose(f);
}

/* The tenant's cache record (zeroed if it has none). */
static struct kvl_prefix_info stats(const char *tenant)
{
	struct kvl_prefix_info in[64], none;
	struct kvl_admin *adm;
	int n, i, r = kvl_admin_open(sock_path, &adm);

	if (r)
		FAIL("kvl_admin_open: %s", strerror(-r));
	n = kvl_admin_prefix_list(adm, NULL, in, 64);
	kvl_admin_close(adm);
	if (n < 0)
		FAIL("prefix list: %s", strerror(-n));
	for (i = 0; i < n && i < 64; i++)
		if (!strcmp(in[i].tenant, tenant))
			return in[i];
	memset(&none, 0, sizeof(none));
	return none;
}

static uint32_t tenant_current(struct kvl_ctx *ctx)
{
	struct kvl_status st;
	int r = kvl_status(ctx, &st);

	if (r)
		FAIL("kvl_status: %s", strerror(-r));
	return st.tenant_current;
}

/* ---- two processes share a prefix; the publisher dies ------------------- */

static int cmd_publish(const char *tenant, uint32_t seed, uint32_t n,
		       const char *ready)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 8);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t *tok = malloc(n * sizeof(*tok));
	struct kvl_seq *s;
	char buf[64];
	int r;

	tokens_of(seed, n, tok);
	s = private_seq(ctx, layout, tok, n);
	r = kvl_seq_publish(s);
	if (r != (int)(n / tpb))
		FAIL("publish: %d, want %u", r, n / tpb);
	snprintf(buf, sizeof(buf), "%d\n", r);
	touch(ready, buf);
	printf("published %d blocks\n", r);
	fflush(stdout);
	for (;;)
		pause();	/* killed by the test, references held */
	return 0;
}

/* Grow both by one token and write its K/V (a decode step's output). */
static void grow(struct kvl_seq *a, struct kvl_seq *b, const uint32_t *tok)
{
	uint32_t pos = kvl_seq_len(a);

	if (kvl_seq_append_tokens(a, tok + pos, 1) < 0 ||
	    kvl_seq_append_tokens(b, tok + pos, 1) < 0)
		FAIL("append");
	fill(a, tok, pos, pos + 1);
	fill(b, tok, pos, pos + 1);
}

static int cmd_read(const char *tenant, uint32_t seed, uint32_t n,
		    const char *ready, const char *go)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 8);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t *tok = malloc((n + 64) * sizeof(*tok)), matched, step, i;
	struct kvl_seq *shared, *mine;
	const uint32_t *table;
	uint32_t nb, waits = 0;

	tokens_of(seed, n + 64, tok);
	/* The prompt plus a suffix of our own. */
	shared = matched_seq(ctx, layout, tok, n + 40, &matched);
	CHECK(matched == n / tpb * tpb, "matched %u tokens, want %u", matched,
	      n / tpb * tpb);
	mine = private_seq(ctx, layout, tok, n + 40);
	kvl_seq_block_table(shared, &table, &nb);
	for (i = 0; i < matched / tpb; i++)
		CHECK(kvl_pfx_cached(ctx, table[i]), "block %u not cached", i);
	same_kv(shared, mine, n + 40, "matched vs private");
	printf("matched %u tokens: K/V identical to a private copy\n", matched);
	for (step = 0; step < 4; step++) {
		same_decode(shared, mine, step);
		grow(shared, mine, tok);
	}
	/* Decoding while the test kills the publisher. */
	touch(ready, "decoding\n");
	while (access(go, F_OK)) {
		same_decode(shared, mine, step);
		if (++waits > 20000)
			FAIL("no go file after %u decode steps", waits);
	}
	for (; step < 20; step++) {
		same_decode(shared, mine, step);
		grow(shared, mine, tok);
	}
	same_kv(shared, mine, kvl_seq_len(mine), "after the publisher died");
	printf("decoded %u steps (%u while the publisher was killed), outputs "
	       "equal to the private copy's\n", step + waits, waits);
	kvl_seq_free(shared);
	kvl_seq_free(mine);
	kvl_close(ctx);
	free(tok);
	return 0;
}

/* ---- copy-on-write ---------------------------------------------------------- */

static int cmd_cow(const char *tenant)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 4);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t n = 3 * tpb, *tok = malloc(n * sizeof(*tok)), ma, mb, mc;
	struct kvl_seq *p, *a, *b, *c, *f;
	const uint32_t *ta, *tb;
	uint32_t nba, nbb, cached0;
	float k[ROW], v[ROW], kr[ROW], vr[ROW], k0[ROW], v0[ROW];
	uint32_t i, blk;
	int r;

	tokens_of(11, n, tok);
	p = private_seq(ctx, layout, tok, n);
	CHECK(kvl_seq_publish(p) == 3, "publish 3 blocks");
	a = matched_seq(ctx, layout, tok, n, &ma);
	b = matched_seq(ctx, layout, tok, n, &mb);
	CHECK(ma == n && mb == n, "both match everything (%u %u)", ma, mb);
	kvl_seq_block_table(a, &ta, &nba);
	kvl_seq_block_table(b, &tb, &nbb);
	CHECK(ta[0] == tb[0], "a and b share block 0");
	blk = ta[0];
	cached0 = stats(tenant).cached;
	/* The cached block is read-only, even through the raw call. */
	for (i = 0; i < ROW; i++)
		k[i] = v[i] = 0.5f;
	{
		uint32_t slot = 5;

		r = kvl_write_kv(ctx, layout, 0, 1, &blk, &slot, k, v);
		CHECK(r == -EROFS, "raw write into a cached block: %d, want "
		      "-EROFS", r);
	}
	CHECK(kvl_seq_read_kv(b, 0, 5, 1, k0, v0) == 0, "read b");
	/* a writes position 5: its block 0 is copied first. */
	CHECK(kvl_seq_write_kv(a, 0, 5, 1, k, v) == 0, "write a");
	kvl_seq_block_table(a, &ta, &nba);
	CHECK(ta[0] != blk, "a got its own copy of block 0");
	CHECK(!kvl_pfx_cached(ctx, ta[0]), "the copy is not cached");
	CHECK(kvl_seq_read_kv(a, 0, 5, 1, kr, vr) == 0, "read a");
	CHECK(fabsf(kr[0] - 0.5f) < 0.01f, "a reads its write (%g)", kr[0]);
	CHECK(kvl_seq_read_kv(b, 0, 5, 1, kr, vr) == 0 &&
	      !memcmp(kr, k0, sizeof(kr)) && !memcmp(vr, v0, sizeof(vr)),
	      "b still reads the cached values");
	/* A third sequence matches the untouched cached block. */
	c = matched_seq(ctx, layout, tok, n, &mc);
	CHECK(mc == n, "c matches everything");
	same_kv(c, p, n, "c vs the publisher's sequence");
	same_kv(c, b, n, "c vs b");
	/* Forks share cached blocks; writing into one copies it. */
	CHECK(kvl_seq_fork(c, &f) == 0, "fork c");
	CHECK(kvl_seq_write_kv(f, 1, tpb + 2, 1, k, v) == 0, "write fork");
	same_kv(c, b, n, "c after its fork wrote");
	CHECK(stats(tenant).cached == cached0, "the cache is unchanged (%u)",
	      stats(tenant).cached);
	kvl_seq_free(f);
	kvl_seq_free(a);
	kvl_seq_free(b);
	kvl_seq_free(c);
	kvl_seq_free(p);
	CHECK(stats(tenant).referenced == 0, "no reference left");
	kvl_close(ctx);
	printf("copy-on-write: shared cached blocks never change\n");
	return 0;
}

/* ---- collisions (kvpoold --prefix-hash-bits 0) ------------------------------- */

static int cmd_collide(const char *tenant)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 4);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t n = 2 * tpb, *x = malloc(n * 4), *y = malloc(n * 4), m;
	struct kvl_seq *px, *sy, *py, *sy2, *sx;
	const uint32_t *tx, *ty;
	uint32_t nbx, nby;

	tokens_of(21, n, x);
	tokens_of(22, n, y);
	/* y = [B, C] where x = [A, C]: equal keys at every depth. */
	memcpy(y + tpb, x + tpb, tpb * 4);
	px = private_seq(ctx, layout, x, n);
	CHECK(kvl_seq_publish(px) == 2, "publish x");
	sy = matched_seq(ctx, layout, y, n, &m);
	CHECK(m == 0, "y matched %u tokens of x's, want 0", m);
	py = private_seq(ctx, layout, y, n);
	CHECK(kvl_seq_publish(py) == 2, "publish y: 2 new blocks, none "
	      "taken for x's");
	kvl_seq_block_table(px, &tx, &nbx);
	kvl_seq_block_table(py, &ty, &nby);
	CHECK(tx[1] != ty[1], "y's second block is its own");
	sy2 = matched_seq(ctx, layout, y, n, &m);
	CHECK(m == n, "y now matches its own blocks (%u)", m);
	same_kv(sy2, sy, n, "y matched vs y private");
	sx = matched_seq(ctx, layout, x, n, &m);
	CHECK(m == n, "x still matches (%u)", m);
	same_kv(sx, px, n, "x matched vs x");
	CHECK(stats(tenant).cached == 4, "4 cached blocks (%u)",
	      stats(tenant).cached);
	kvl_close(ctx);
	printf("collisions: equal keys cost misses, never wrong data\n");
	return 0;
}

/* ---- tenants and shared namespaces ------------------------------------------- */

static int cmd_tenants(const char *ta, const char *tb, const char *tc)
{
	struct kvl_ctx *a = open_ctx(ta, 4), *b = open_ctx(tb, 4),
		       *c = open_ctx(tc, 4);
	int la = declare(a, MODEL, KVL_DTYPE_BF16),
	    lb = declare(b, MODEL, KVL_DTYPE_BF16),
	    lc = declare(c, MODEL, KVL_DTYPE_BF16);
	uint32_t n = 2 * tpb, *tok = malloc(n * 4), m, cur_a, cur_b;
	struct kvl_seq *pa, *sb, *sc;
	struct kvl_admin *adm;
	int r;

	tokens_of(31, n, tok);
	pa = private_seq(a, la, tok, n);
	CHECK(kvl_seq_publish(pa) == 2, "a publishes");
	sb = matched_seq(b, lb, tok, n, &m);
	CHECK(m == 0, "b (another tenant) hit %u tokens of a's cache", m);
	kvl_seq_free(sb);
	CHECK(stats(tb).hits == 0, "b counts no hit");
	/* The operator puts a and b in one namespace. */
	r = kvl_admin_open(sock_path, &adm);
	CHECK(!r, "admin open");
	CHECK(kvl_admin_prefix_share(adm, NULL, ta, "common") == 0, "share a");
	CHECK(kvl_admin_prefix_share(adm, NULL, tb, "common") == 0, "share b");
	CHECK(kvl_admin_prefix_share(adm, NULL, "nosuch", "common") == -ENOENT,
	      "share an unknown tenant");
	CHECK(kvl_admin_prefix_share(adm, NULL, ta, "bad/name") == -EINVAL,
	      "share into a bad name");
	CHECK(!strcmp(stats(ta).ns, "common"), "a is in common");
	/* a's cache was flushed by the move: publish again. */
	kvl_seq_free(pa);
	pa = private_seq(a, la, tok, n);
	CHECK(kvl_seq_publish(pa) == 2, "a publishes into common");
	cur_a = tenant_current(a);
	cur_b = tenant_current(b);
	sb = matched_seq(b, lb, tok, n, &m);
	CHECK(m == n, "b hits a's blocks in the shared namespace (%u)", m);
	same_kv(sb, pa, n, "b's hit vs a's sequence");
	CHECK(tenant_current(b) == cur_b, "b is not charged for a's blocks");
	CHECK(tenant_current(a) == cur_a, "a still pays for them");
	sc = matched_seq(c, lc, tok, n, &m);
	CHECK(m == 0, "c (not in common) hit %u tokens", m);
	/* Leaving the namespace: b no longer hits. */
	kvl_seq_free(sb);
	CHECK(kvl_admin_prefix_share(adm, NULL, tb, "") == 0, "b leaves");
	sb = matched_seq(b, lb, tok, n, &m);
	CHECK(m == 0, "b left common: %u tokens hit", m);
	kvl_admin_close(adm);
	kvl_seq_free(sb);
	kvl_seq_free(sc);
	kvl_seq_free(pa);
	kvl_close(a);
	kvl_close(b);
	kvl_close(c);
	printf("tenants: no hit across tenants; a shared namespace shares\n");
	return 0;
}

/* ---- quotas and LRU ------------------------------------------------------------ */

static int cmd_quota(const char *tenant, uint32_t max)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 1);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t nb = max * 2 / 3, n = nb * tpb, *tok = malloc(n * 4);
	uint32_t *tok2 = malloc(n * 4), need, before;
	struct kvl_seq *p, *s;
	struct kvl_prefix_info st;
	int r;

	tokens_of(41, n, tok);
	tokens_of(42, n, tok2);
	p = private_seq(ctx, layout, tok, n);
	CHECK(kvl_seq_publish(p) == (int)nb, "publish %u blocks", nb);
	kvl_seq_free(p);
	kvl_trim(ctx);
	st = stats(tenant);
	CHECK(st.cached == nb && st.referenced == 0,
	      "%u cached, unreferenced (%u %u)", nb, st.cached, st.referenced);
	CHECK(tenant_current(ctx) == nb, "the tenant's current counts the "
	      "cached blocks (%u, want %u)", tenant_current(ctx), nb);
	/* A sequence that needs more than max - cached: the cache gives. */
	need = nb;
	before = st.evictions;
	s = private_seq(ctx, layout, tok2, need * tpb);
	st = stats(tenant);
	CHECK(st.evictions - before == nb + need - max,
	      "evicted %llu to make room, want %u",
	      (unsigned long long)(st.evictions - before), nb + need - max);
	CHECK(tenant_current(ctx) <= max, "current %u <= max %u",
	      tenant_current(ctx), max);
	/* Nothing left to evict: the max holds. */
	r = kvl_seq_append(s, (max + 1) * tpb);
	CHECK(r == -EDQUOT, "beyond the max: %d, want -EDQUOT", r);
	kvl_seq_free(s);
	kvl_close(ctx);
	printf("quota: cached blocks count; the cache gives room first\n");
	return 0;
}

static int cmd_lru(const char *tenant)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 2);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t n = 2 * tpb, *t1 = malloc(n * 4), *t2 = malloc(n * 4),
		 *t3 = malloc(n * 4), m;
	struct kvl_seq *s;
	uint64_t ev;

	tokens_of(51, n, t1);
	tokens_of(52, n, t2);
	tokens_of(53, n, t3);
	/* Published and let go in the order 1, 2, 3. */
	s = private_seq(ctx, layout, t1, n);
	kvl_seq_publish(s);
	kvl_seq_free(s);
	s = private_seq(ctx, layout, t2, n);
	kvl_seq_publish(s);
	kvl_seq_free(s);
	s = private_seq(ctx, layout, t3, n);
	kvl_seq_publish(s);
	kvl_seq_free(s);
	/* 1 is used again: 2 is now the least recently used. */
	s = matched_seq(ctx, layout, t1, n, &m);
	CHECK(m == n, "1 hits");
	kvl_seq_free(s);
	ev = stats(tenant).evictions;
	CHECK(kvl_prefix_evict(ctx, 2) == 2, "evict 2");
	CHECK(stats(tenant).evictions == ev + 2, "2 evictions counted");
	s = matched_seq(ctx, layout, t2, n, &m);
	CHECK(m == 0, "2 was evicted first (%u tokens hit)", m);
	kvl_seq_free(s);
	s = matched_seq(ctx, layout, t3, n, &m);
	CHECK(m == n, "3 stays (%u)", m);
	kvl_seq_free(s);
	s = matched_seq(ctx, layout, t1, n, &m);
	CHECK(m == n, "1 stays (%u)", m);
	kvl_seq_free(s);
	/* Deeper blocks go before the first ones of a sequence. */
	CHECK(kvl_prefix_evict(ctx, 1) == 1, "evict 1 more");
	s = matched_seq(ctx, layout, t3, n, &m);
	CHECK(m == tpb, "3 lost its second block only (%u)", m);
	kvl_seq_free(s);
	kvl_close(ctx);
	printf("lru: least recently used first, deepest blocks first\n");
	return 0;
}

/* ---- reclaim: the cache answers first ------------------------------------------ */

static int cmd_reclaim(const char *greedy, const char *prot)
{
	struct kvl_ctx *g = open_ctx(greedy, 1), *pc;
	int layout = declare(g, MODEL, KVL_DTYPE_BF16);
	uint32_t n = 20 * tpb, *tok = malloc(n * 4), *own = malloc(n * 4);
	uint32_t target = 0, blocks[64];
	struct kvl_prefix_info st;
	struct kvl_status gs;
	struct kvl_seq *p, *keep;
	uint64_t ev;
	int r;

	tokens_of(61, n, tok);
	tokens_of(62, n, own);
	/* greedy: 20 cached unreferenced blocks, 20 of a live sequence. */
	p = private_seq(g, layout, tok, n);
	CHECK(kvl_seq_publish(p) == 20, "publish 20");
	kvl_seq_free(p);
	keep = private_seq(g, layout, own, n);
	kvl_trim(g);
	CHECK(kvl_status(g, &gs) == 0 && gs.held == 20, "greedy holds 20 "
	      "(%u)", gs.held);
	st = stats(greedy);
	ev = st.evictions;
	CHECK(st.cached == 20 && st.referenced == 0, "20 cold blocks");
	/* prot (min 24) wants 30 of the 24 free blocks: reclaim 6. */
	pc = open_ctx(prot, 1);
	r = kvl_lease(pc, 30, 0, 5000000000ULL, blocks);
	CHECK(r == 30, "prot granted 30: %d", r);
	st = stats(greedy);
	CHECK(st.evictions - ev == 6, "the cache gave 6 back (%llu)",
	      (unsigned long long)(st.evictions - ev));
	CHECK(kvl_status(g, &gs) == 0 && gs.held == 20,
	      "greedy's sequence kept its 20 blocks (%u)", gs.held);
	CHECK(kvl_reclaim_target(g, &target) == 0 && target == 0,
	      "nothing asked of greedy's process (%u)", target);
	same_kv(keep, keep, n, "greedy's sequence readable");
	/* A tenant at its min short of free blocks: SHORT, pool-wide. */
	ev = st.evictions;
	CHECK(kvl_release(pc, blocks, 30) == 30, "prot gives back");
	kvl_close(pc);
	{
		struct kvl_admin *adm;

		CHECK(kvl_admin_open(sock_path, &adm) == 0, "admin");
		CHECK(kvl_admin_tenant_set(adm, pool_name, prot, KVL_ADMIN_KEEP, 0,
					   KVL_ADMIN_KEEP, KVL_ADMIN_KEEP) == 0,
		      "prot's min to 0");
		kvl_admin_close(adm);
	}
	pc = open_ctx("", 1);
	r = kvl_lease(pc, 40, 0, 5000000000ULL, blocks);
	CHECK(r == 40, "a short pool: the cache gives (%d)", r);
	st = stats(greedy);
	CHECK(st.evictions - ev == 10, "10 more evicted (%llu)",
	      (unsigned long long)(st.evictions - ev));
	CHECK(kvl_status(g, &gs) == 0 && gs.held == 20,
	      "greedy's sequence still holds 20 (%u)", gs.held);
	kvl_close(pc);
	kvl_seq_free(keep);
	kvl_close(g);
	printf("reclaim: unreferenced cached blocks answer first\n");
	return 0;
}

/* ---- bad input -------------------------------------------------------------------- */

/* The record of a raw request through this context's connection. */
static int raw(struct kvl_ctx *ctx, uint16_t op, const void *body, size_t len,
	       void *rbody, size_t rcap)
{
	return kvl_rpc(ctx, op, body, len, rbody, rcap, NULL);
}

static int cmd_bad(const char *tenant)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 4), *other = open_ctx(tenant, 4);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	int plain = declare(ctx, NULL, KVL_DTYPE_BF16);
	int lo = declare(other, MODEL, KVL_DTYPE_BF16);
	int lfp8 = declare(other, MODEL, KVL_DTYPE_FP8);
	int l2 = declare(other, "another-model@1", KVL_DTYPE_BF16);
	uint32_t n = 2 * tpb, *tok = malloc(n * 4), m, held[4], got[8];
	struct kvl_seq *p, *s, *q;
	struct kvp_prefix_publish pq;
	struct kvp_prefix_publish_reply pr;
	struct kvp_prefix_match mq;
	struct kvp_prefix_match_reply mr;
	struct kvp_prefix_unref uq;
	struct kvl_prefix_info before, after;
	struct kvl_status st0, st1;
	const uint32_t *tab;
	uint32_t nb;
	int r;

	tokens_of(71, n, tok);
	p = private_seq(ctx, layout, tok, n);
	CHECK(kvl_seq_publish(p) == 2, "publish");
	kvl_seq_block_table(p, &tab, &nb);
	before = stats(tenant);
	CHECK(kvl_status(ctx, &st0) == 0, "status");

	/* publish: blocks not held (free ones, another client's) */
	CHECK(kvl_lease(other, 2, 0, 0, held) == 2, "other leases 2");
	memset(&pq, 0, sizeof(pq));
	pq.layout_id = (uint32_t)layout;
	pq.nblocks = 2;
	pq.ntok = n;
	pq.off_tokens = 0;
	pq.off_blocks = 1 << 20;
	pq.off_result = 2 << 20;
	tokens_of(72, n, (uint32_t *)ctx->region);
	memcpy(ctx->region + pq.off_blocks, held, 8);
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EPERM, "publish of another client's blocks: %d", r);
	got[0] = 2000;
	got[1] = 2001;
	memcpy(ctx->region + pq.off_blocks, got, 8);
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EPERM, "publish of free blocks: %d", r);
	/* publish: not full (token ids for less than whole blocks) */
	CHECK(kvl_lease(ctx, 2, 0, 0, got) == 2, "lease 2");
	memcpy(ctx->region + pq.off_blocks, got, 8);
	pq.ntok = n - 1;
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EINVAL, "publish of a block not full: %d", r);
	pq.ntok = n + 1;
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EINVAL, "publish of more tokens than blocks: %d", r);
	pq.ntok = n;
	pq.flags = 1;
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EINVAL, "publish with an unknown flag: %d", r);
	pq.flags = 0;
	pq.layout_id = (uint32_t)plain;
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -ENOKEY, "publish without a model identity: %d", r);
	/* a repeated block */
	pq.layout_id = (uint32_t)layout;
	got[1] = got[0];
	memcpy(ctx->region + pq.off_blocks, got, 8);
	r = raw(ctx, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr, sizeof(pr));
	CHECK(r == -EINVAL, "publish of a repeated block: %d", r);
	/* a cached block we do not reference, in its own place */
	{
		struct kvl_seq *tmp;
		uint32_t mm;

		tmp = matched_seq(other, lo, tok, n, &mm);
		CHECK(mm == n, "other matches");
		memset(&pq, 0, sizeof(pq));
		pq.layout_id = (uint32_t)lo;
		pq.nblocks = 1;
		pq.ntok = tpb;
		pq.off_blocks = 1 << 20;
		pq.off_result = 2 << 20;
		memcpy(other->region, tok, tpb * 4);
		memcpy(other->region + pq.off_blocks, tab, 4);
		kvl_seq_free(tmp);	/* other no longer references it */
		r = raw(other, KVP_OP_PREFIX_PUBLISH, &pq, sizeof(pq), &pr,
			sizeof(pr));
		CHECK(r == -EPERM, "publish naming a cached block not "
		      "referenced: %d", r);
	}

	/* match: the daemon refuses a layout without a model identity */
	memset(&mq, 0, sizeof(mq));
	mq.layout_id = (uint32_t)plain;
	mq.ntok = n;
	mq.off_blocks = 1 << 20;
	mq.max_blocks = 2;
	memcpy(ctx->region, tok, n * 4);
	r = raw(ctx, KVP_OP_PREFIX_MATCH, &mq, sizeof(mq), &mr, sizeof(mr));
	CHECK(r == -ENOKEY, "match without a model identity: %d", r);
	CHECK(kvl_seq_create(ctx, plain, &q) == 0, "create");
	CHECK(kvl_seq_match(q, tok, n) == -ENOKEY, "library: -ENOKEY");
	kvl_seq_free(q);
	mq.layout_id = 77;
	r = raw(ctx, KVP_OP_PREFIX_MATCH, &mq, sizeof(mq), &mr, sizeof(mr));
	CHECK(r == -EINVAL, "match on an unknown layout: %d", r);
	mq.layout_id = (uint32_t)layout;
	mq.off_tokens = ctx->region_bytes - 4;
	r = raw(ctx, KVP_OP_PREFIX_MATCH, &mq, sizeof(mq), &mr, sizeof(mr));
	CHECK(r == -EFAULT, "match outside the region: %d", r);
	/* a mismatched model identity: other model, other dtype */
	s = matched_seq(other, l2, tok, n, &m);
	CHECK(m == 0, "another model hit %u tokens", m);
	kvl_seq_free(s);
	s = matched_seq(other, lfp8, tok, n, &m);
	CHECK(m == 0, "another dtype hit %u tokens", m);
	kvl_seq_free(s);

	/* data plane: a cached block the caller does not reference */
	{
		float qv[Q_HEADS * HEAD_DIM], out[Q_HEADS * HEAD_DIM];
		uint32_t table[1] = { tab[0] }, len = tpb, slot = 0;
		struct kvl_attn_args a;

		memset(&a, 0, sizeof(a));
		memset(qv, 0, sizeof(qv));
		a.batch = 1;
		a.q_heads = Q_HEADS;
		a.max_blocks_per_seq = 1;
		a.q = qv;
		a.block_tables = table;
		a.ctx_lens = &len;
		a.out = out;
		r = kvl_attention(other, lo, &a);
		CHECK(r == -EPERM, "attention on a cached block not "
		      "referenced: %d", r);
		r = kvl_read_kv(other, lo, 0, 1, table, &slot, out, NULL);
		CHECK(r == -EPERM, "read of a cached block not referenced: %d",
		      r);
		r = kvl_copy_blocks(other, table, held, 1);
		CHECK(r == -EPERM, "copy from a cached block not referenced: "
		      "%d", r);
	}
	/* unref: not referenced, repeated, unknown flag */
	memset(&uq, 0, sizeof(uq));
	uq.n = 1;
	memcpy(ctx->region, held, 4);
	r = raw(ctx, KVP_OP_PREFIX_UNREF, &uq, sizeof(uq), NULL, 0);
	CHECK(r == -EINVAL, "unref of a block not referenced: %d", r);
	uq.n = 2;
	memcpy(ctx->region, tab, 4);
	memcpy(ctx->region + 4, tab, 4);
	r = raw(ctx, KVP_OP_PREFIX_UNREF, &uq, sizeof(uq), NULL, 0);
	CHECK(r == -EINVAL, "unref of a repeated block: %d", r);
	uq.n = 1;
	uq.flags = 2;
	r = raw(ctx, KVP_OP_PREFIX_UNREF, &uq, sizeof(uq), NULL, 0);
	CHECK(r == -EINVAL, "unref with an unknown flag: %d", r);

	/* Nothing changed, and both connections still work. */
	after = stats(tenant);
	CHECK(after.cached == before.cached && after.published ==
	      before.published && after.evictions == before.evictions,
	      "the cache is unchanged (%u/%u cached)", after.cached,
	      before.cached);
	CHECK(kvl_status(ctx, &st1) == 0 && st1.held == st0.held + 2,
	      "ctx holds what it held (+2 leased here)");
	CHECK(kvl_release(ctx, got, 1) == 1 && kvl_release(other, held, 2) == 2,
	      "the blocks named in bad requests are still their holders'");
	s = matched_seq(other, lo, tok, n, &m);
	CHECK(m == n, "other still matches");
	same_kv(s, p, n, "after bad requests");
	kvl_seq_free(s);
	kvl_seq_free(p);
	kvl_close(ctx);
	kvl_close(other);
	printf("bad input: clear errors, nothing changed\n");
	return 0;
}

static int cmd_stats(const char *tenant)
{
	struct kvl_prefix_info st = stats(tenant);

	printf("tenant=%s ns=%s cached=%u referenced=%u hits=%llu misses=%llu "
	       "hit_tokens=%llu evictions=%llu published=%llu\n",
	       tenant, st.ns, st.cached, st.referenced,
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.hit_tokens,
	       (unsigned long long)st.evictions,
	       (unsigned long long)st.published);
	return 0;
}

/* ---- a cache that outlives its processes: put, hit --------------------------- */

static int cmd_put(const char *tenant, uint32_t seed, uint32_t n)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 8);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16), r;
	uint32_t *tok = malloc(n * sizeof(*tok));
	struct kvl_seq *s;

	tokens_of(seed, n, tok);
	s = private_seq(ctx, layout, tok, n);
	r = kvl_seq_publish(s);
	CHECK(r >= 0, "publish: %s", strerror(-r));
	printf("published %d blocks\n", r);
	kvl_seq_free(s);
	kvl_close(ctx);
	free(tok);
	return 0;
}

static int cmd_hit(const char *tenant, uint32_t seed, uint32_t n)
{
	struct kvl_ctx *ctx = open_ctx(tenant, 8);
	int layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
	uint32_t *tok = malloc(n * sizeof(*tok)), m;
	struct kvl_seq *s, *mine;

	tokens_of(seed, n, tok);
	s = matched_seq(ctx, layout, tok, n, &m);
	mine = private_seq(ctx, layout, tok, n);
	same_kv(s, mine, n, "matched vs private");
	printf("matched %u tokens\n", m);
	kvl_seq_free(s);
	kvl_seq_free(mine);
	kvl_close(ctx);
	free(tok);
	return 0;
}

/* ---- what one tenant lends to the others of its namespace ----------------------- */

static int cmd_lend(const char *owner, const char *other, uint32_t max)
{
	struct kvl_ctx *a = open_ctx(owner, 1), *b = open_ctx(other, 1);
	int la = declare(a, MODEL, KVL_DTYPE_BF16),
	    lb = declare(b, MODEL, KVL_DTYPE_BF16);
	uint32_t lent = max / 2, nb = lent + 2, n = nb * tpb, m, cur_b;
	uint32_t *tok = malloc(n * 4), *own = malloc(max * tpb * 4);
	struct kvl_seq *pa, *sb, *mine, *sa;
	struct kvl_prefix_info st;
	struct kvl_admin *adm;
	int r;

	CHECK(nb <= max, "MAX %u too small", max);
	CHECK(kvl_admin_open(sock_path, &adm) == 0, "admin open");
	CHECK(kvl_admin_prefix_share(adm, pool_name, owner, "lend") == 0,
	      "share %s", owner);
	CHECK(kvl_admin_prefix_share(adm, pool_name, other, "lend") == 0,
	      "share %s", other);
	kvl_admin_close(adm);
	tokens_of(71, n, tok);
	tokens_of(72, max * tpb, own);
	/* The owner caches nb blocks and lets them go. */
	pa = private_seq(a, la, tok, n);
	CHECK(kvl_seq_publish(pa) == (int)nb, "%s publishes %u", owner, nb);
	kvl_seq_free(pa);
	kvl_trim(a);
	CHECK(tenant_current(a) == nb, "%s holds its %u cached blocks (%u)",
	      owner, nb, tenant_current(a));
	/* The other tenant references at most max / 2 of them. */
	cur_b = tenant_current(b);
	sb = matched_seq(b, lb, tok, n, &m);
	CHECK(m == lent * tpb, "%s matched %u tokens, want %u (the lent "
	      "share)", other, m, lent * tpb);
	mine = private_seq(b, lb, tok, n);
	same_kv(sb, mine, n, "a match cut at the lent share");
	kvl_seq_free(mine);
	kvl_trim(b);
	st = stats(owner);
	CHECK(st.referenced == lent, "%u of %s's blocks referenced, want %u",
	      st.referenced, owner, lent);
	/* Publishing the whole prompt: the rest stays the other's own. */
	r = kvl_seq_publish(sb);
	CHECK(r == 2, "%s's publish cached %d of its own blocks, want 2", other,
	      r);
	st = stats(other);
	CHECK(st.cached == 2 && st.referenced == 2, "%s: %u cached %u "
	      "referenced, want 2 2", other, st.cached, st.referenced);
	CHECK(stats(owner).referenced == lent, "%s still lends %u (%u)", owner,
	      lent, stats(owner).referenced);
	kvl_trim(b);
	CHECK(tenant_current(b) == cur_b + 2, "%s pays for its own 2 (%u, "
	      "was %u)", other, tenant_current(b), cur_b);
	/* The owner can still use max - lent: its unreferenced cached
	 * blocks make room, the lent ones stay. */
	sa = private_seq(a, la, own, (max - lent) * tpb);
	CHECK(tenant_current(a) == max, "%s at its max %u (%u)", owner, max,
	      tenant_current(a));
	r = kvl_seq_append(sa, tpb);
	CHECK(r == -EDQUOT, "beyond its max: %d, want -EDQUOT", r);
	kvl_seq_free(sa);
	/* The other lets go: nothing of it stays cached or lent. */
	kvl_seq_free(sb);
	kvl_trim(b);
	st = stats(other);
	CHECK(st.cached == 0, "%s's own copies left the cache (%u)", other,
	      st.cached);
	CHECK(stats(owner).referenced == 0, "%s lends nothing now (%u)", owner,
	      stats(owner).referenced);
	CHECK(tenant_current(b) == cur_b, "%s back to %u (%u)", other, cur_b,
	      tenant_current(b));
	sb = matched_seq(b, lb, tok, lent * tpb, &m);
	CHECK(m == lent * tpb, "%s matches the lent share again (%u)", other,
	      m);
	kvl_seq_free(sb);
	kvl_close(a);
	kvl_close(b);
	free(tok);
	free(own);
	printf("lend: another tenant holds at most %u of %s's %u blocks\n",
	       lent, owner, max);
	return 0;
}

/* ---- many cached tenants: every reclaim target is answered --------------------- */

static uint32_t cached_of(struct kvl_admin *adm, const char *tenant,
			  struct kvl_prefix_info *all, size_t cap)
{
	int n = kvl_admin_prefix_list(adm, pool_name, all, cap), i;

	CHECK(n >= 0, "prefix list: %s", strerror(-n));
	CHECK((size_t)n <= cap, "%d caches, room for %zu", n, cap);
	for (i = 0; i < n; i++)
		if (!strcmp(all[i].tenant, tenant))
			return all[i].cached;
	return 0;
}

static int cmd_many(const char *prefix, uint32_t n)
{
	size_t cap = (size_t)n + 64;
	struct kvl_prefix_info *all = calloc(cap, sizeof(*all));
	char name[KVL_NAME_LEN], last[KVL_NAME_LEN];
	uint32_t *tok = NULL, i, c, ms;
	struct kvl_admin *adm;
	int r;

	CHECK(all && kvl_admin_open(sock_path, &adm) == 0, "admin open");
	for (i = 0; i < n; i++) {
		struct kvl_ctx *ctx;
		struct kvl_seq *s;
		int layout;

		snprintf(name, sizeof(name), "%s-%u", prefix, i);
		r = kvl_admin_tenant_add(adm, pool_name, name, 0xffffffffU, 0,
					 0xffffffffU, 0xffffffffU);
		CHECK(!r, "tenant add %s: %s", name, strerror(-r));
		ctx = open_ctx(name, 1);
		layout = declare(ctx, MODEL, KVL_DTYPE_BF16);
		if (!tok)
			tok = malloc(tpb * sizeof(*tok));
		tokens_of(1000 + i, tpb, tok);
		s = private_seq(ctx, layout, tok, tpb);
		CHECK(kvl_seq_publish(s) == 1, "%s publishes its block", name);
		kvl_seq_free(s);
		kvl_close(ctx);
	}
	snprintf(name, sizeof(name), "%s-0", prefix);
	snprintf(last, sizeof(last), "%s-%u", prefix, n - 1);
	CHECK(cached_of(adm, name, all, cap) == 1 &&
	      cached_of(adm, last, all, cap) == 1,
	      "every tenant has its cached block");
	/* The first tenant's max below its current: the ledger posts a
	 * reclaim target to its cache's cold lease. */
	r = kvl_admin_tenant_set(adm, pool_name, name, 0, KVL_ADMIN_KEEP,
				 KVL_ADMIN_KEEP, KVL_ADMIN_KEEP);
	CHECK(!r, "max of %s to 0: %s", name, strerror(-r));
	for (ms = 0; (c = cached_of(adm, name, all, cap)) && ms < 5000;
	     ms += 10)
		usleep(10000);
	CHECK(!c, "%s of %u cached tenants still caches %u block(s) 5 s after "
	      "its max went to 0: its reclaim target was not answered", name,
	      n, c);
	CHECK(cached_of(adm, last, all, cap) == 1, "%s lost its block", last);
	kvl_admin_close(adm);
	free(all);
	free(tok);
	printf("many: %u cached tenants, the reclaim target of the first "
	       "answered in %u ms\n", n, ms);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	pool_name = getenv("E2E_POOL");
	if (argc < 3)
		goto usage;
	sock_path = argv[2];
	if (!strcmp(argv[1], "publish") && argc == 7)
		return cmd_publish(argv[3], (uint32_t)atoi(argv[4]),
				   (uint32_t)atoi(argv[5]), argv[6]);
	if (!strcmp(argv[1], "read") && argc == 8)
		return cmd_read(argv[3], (uint32_t)atoi(argv[4]),
				(uint32_t)atoi(argv[5]), argv[6], argv[7]);
	if (!strcmp(argv[1], "cow") && argc == 4)
		return cmd_cow(argv[3]);
	if (!strcmp(argv[1], "collide") && argc == 4)
		return cmd_collide(argv[3]);
	if (!strcmp(argv[1], "tenants") && argc == 6)
		return cmd_tenants(argv[3], argv[4], argv[5]);
	if (!strcmp(argv[1], "quota") && argc == 5)
		return cmd_quota(argv[3], (uint32_t)atoi(argv[4]));
	if (!strcmp(argv[1], "lru") && argc == 4)
		return cmd_lru(argv[3]);
	if (!strcmp(argv[1], "reclaim") && argc == 5)
		return cmd_reclaim(argv[3], argv[4]);
	if (!strcmp(argv[1], "bad") && argc == 4)
		return cmd_bad(argv[3]);
	if (!strcmp(argv[1], "stats") && argc == 4)
		return cmd_stats(argv[3]);
	if (!strcmp(argv[1], "put") && argc == 6)
		return cmd_put(argv[3], (uint32_t)atoi(argv[4]),
			       (uint32_t)atoi(argv[5]));
	if (!strcmp(argv[1], "hit") && argc == 6)
		return cmd_hit(argv[3], (uint32_t)atoi(argv[4]),
			       (uint32_t)atoi(argv[5]));
	if (!strcmp(argv[1], "lend") && argc == 6)
		return cmd_lend(argv[3], argv[4], (uint32_t)atoi(argv[5]));
	if (!strcmp(argv[1], "many") && argc == 5 && atoi(argv[4]) > 0)
		return cmd_many(argv[3], (uint32_t)atoi(argv[4]));
usage:
	fprintf(stderr, "usage: e2e-prefix CMD SOCK ... (see the source)\n");
	return 2;
}
