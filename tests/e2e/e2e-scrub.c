// SPDX-License-Identifier: MIT
/*
 * e2e-scrub - freed blocks keep no bytes across tenants, through kvpoold
 * and libkvlease (either ledger: the same program runs in the VM with the
 * module).  One process per step, so that the steps are separate clients:
 *
 *   e2e-scrub write SOCK TENANT TIER N FILE
 *        lease N blocks on top, write K/V into every byte of them; with
 *        TIER > 0, lease N blocks there too and swap the top ones down;
 *        write the tier's block numbers and their FNV sums to FILE, then
 *        release everything (exit)
 *   e2e-scrub read SOCK TENANT TIER N FILE zero|same
 *        lease the lowest free blocks of TIER up to the highest of FILE's
 *        (all of FILE's among them, or fail) and read FILE's without
 *        writing: block sums there; on top, K/V read back and an
 *        attention over them; below, the writer's top blocks swapped
 *        down as they are, then FILE's swapped up into them.  "zero":
 *        every byte reads as zero; "same": FILE's bytes (the same
 *        tenant's own data)
 *   e2e-scrub publish SOCK TENANT N FILE
 *        write N blocks of a sequence, publish them to the prefix cache,
 *        write their block numbers and sums to FILE and exit (the cache
 *        keeps them)
 *
 * Layout: bf16, 2 layers, 2 kv heads, head_dim 64: 1 KiB per token, so a
 * 64 KiB block is 64 tokens and K/V cover all its bytes.  Exit 0 pass,
 * 1 fail, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlease.h"

#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define Q_HEADS		4
#define ROW		(KV_HEADS * HEAD_DIM)
#define MAX_BLOCKS	64
#define MODEL		"e2e-scrub@1"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

static const char *sock_path;
static uint32_t tpb;
static uint64_t block_bytes;

static struct kvl_ctx *open_ctx(const char *tenant)
{
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant;
	o.region_bytes = 32 << 20;
	o.timeout_ns = 5000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open tenant %s: %s", tenant, strerror(-r));
	return ctx;
}

static int declare(struct kvl_ctx *ctx, bool model)
{
	struct kvl_layout l;
	struct kvl_status st;
	int id, r;

	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	id = model ? kvl_layout_declare_model(ctx, &l, MODEL) :
		     kvl_layout_declare(ctx, &l);
	if (id < 0)
		FAIL("declare layout: %s", strerror(-id));
	tpb = l.tokens_per_block;
	r = kvl_status(ctx, &st);
	CHECK(!r, "kvl_status: %s", strerror(-r));
	block_bytes = st.block_bytes;
	CHECK((uint64_t)tpb * l.bytes_per_token == block_bytes,
	      "K/V of %u tokens (%llu bytes each) do not fill a block of "
	      "%llu bytes", tpb, (unsigned long long)l.bytes_per_token,
	      (unsigned long long)block_bytes);
	return id;
}

/* The value written at (j-th block of the set, layer, slot, i): never
 * zero in BF16. */
static float val(uint32_t j, uint32_t layer, uint32_t slot, uint32_t i,
		 uint32_t kind)
{
	uint32_t x = (j * 2654435761U) ^ (layer << 24) ^ (slot << 12) ^
		     (i << 1) ^ kind;

	x ^= x >> 15;
	x *= 0x2c1b3c6dU;
	x ^= x >> 12;
	return 0.25f + (float)(x % 1024) / 1024.0f;
}

/* Every slot of every block, both layers. */
static void write_all(struct kvl_ctx *ctx, int layout, const uint32_t *b,
		      uint32_t n)
{
	uint32_t ntok = n * tpb, t, i, layer;
	uint32_t *blk = malloc(ntok * 4), *slot = malloc(ntok * 4);
	float *k = malloc((size_t)ntok * ROW * 4);
	float *v = malloc((size_t)ntok * ROW * 4);
	int r;

	CHECK(blk && slot && k && v, "no memory");
	for (t = 0; t < ntok; t++) {
		blk[t] = b[t / tpb];
		slot[t] = t % tpb;
	}
	for (layer = 0; layer < LAYERS; layer++) {
		for (t = 0; t < ntok; t++)
			for (i = 0; i < ROW; i++) {
				k[(size_t)t * ROW + i] =
					val(t / tpb, layer, slot[t], i, 0);
				v[(size_t)t * ROW + i] =
					val(t / tpb, layer, slot[t], i, 1);
			}
		r = kvl_write_kv(ctx, layout, layer, ntok, blk, slot, k, v);
		CHECK(!r, "write_kv: %s", strerror(-r));
	}
	free(blk);
	free(slot);
	free(k);
	free(v);
}

/* FNV-1a 64 of a block of zeros. */
static uint64_t zero_sum(void)
{
	uint64_t h = 0xcbf29ce484222325ULL, i;

	for (i = 0; i < block_bytes; i++)
		h *= 0x100000001b3ULL;
	return h;
}

static void save(const char *path, const uint32_t *b, const uint64_t *sum,
		 uint32_t n)
{
	FILE *f = fopen(path, "w");
	uint32_t i;

	CHECK(f, "create %s", path);
	for (i = 0; i < n; i++)
		fprintf(f, "%u %llu\n", b[i], (unsigned long long)sum[i]);
	CHECK(!fclose(f), "write %s", path);
}

static void load(const char *path, uint32_t *b, uint64_t *sum, uint32_t n)
{
	FILE *f = fopen(path, "r");
	unsigned long long s;
	uint32_t i;

	CHECK(f, "open %s", path);
	for (i = 0; i < n; i++) {
		CHECK(fscanf(f, "%u %llu", &b[i], &s) == 2, "%s: line %u", path,
		      i + 1);
		sum[i] = s;
	}
	fclose(f);
}

static void lease_n(struct kvl_ctx *ctx, uint32_t tier, uint32_t n,
		    uint32_t *b)
{
	int r = tier ? kvl_tier_lease(ctx, tier, n, 0, 5000000000ULL, b) :
		       kvl_lease(ctx, n, 0, 5000000000ULL, b);

	CHECK(r == (int)n, "lease %u blocks in tier %u: %d", n, tier, r);
}

static void join(struct kvl_ctx *ctx, uint32_t tier)
{
	int r = kvl_tier_join(ctx, tier);

	CHECK(!r, "join tier %u: %s", tier, strerror(-r));
}

static void swap(struct kvl_ctx *ctx, uint32_t from, const uint32_t *src,
		 uint32_t to, const uint32_t *dst, uint32_t n)
{
	uint64_t ticket;
	int r = kvl_swap(ctx, from, src, to, dst, n, &ticket);

	CHECK(!r, "swap %u -> %u: %s", from, to, strerror(-r));
	r = kvl_swap_wait(ctx, ticket, 5000000000ULL);
	CHECK(!r, "swap %u -> %u: %s", from, to, strerror(-r));
}

static int cmd_write(const char *tenant, uint32_t tier, uint32_t n,
		     const char *path)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx, false);
	uint32_t top[MAX_BLOCKS], low[MAX_BLOCKS];
	uint64_t sum[MAX_BLOCKS];
	int r;

	lease_n(ctx, 0, n, top);
	write_all(ctx, layout, top, n);
	if (tier) {
		join(ctx, tier);
		lease_n(ctx, tier, n, low);
		swap(ctx, 0, top, tier, low, n);
	} else {
		memcpy(low, top, n * sizeof(*low));
	}
	r = kvl_block_sums(ctx, tier, low, n, sum);
	CHECK(!r, "block sums: %s", strerror(-r));
	CHECK(sum[0] != zero_sum(), "the pattern reads as zeros");
	save(path, low, sum, n);
	printf("%s wrote blocks %u..%u of tier %u\n", tenant, low[0],
	       low[n - 1], tier);
	kvl_close(ctx);		/* releases everything, in every tier */
	return 0;
}

/* Blocks b[0..n) on top: every K/V value zero (or the pattern), and a
 * decode over them all returns zeros (or not). */
static void read_top(struct kvl_ctx *ctx, int layout, const uint32_t *b,
		     uint32_t n, bool zero)
{
	uint32_t ntok = n * tpb, t, i, layer, bad = 0;
	uint32_t *blk = malloc(ntok * 4), *slot = malloc(ntok * 4);
	float *k = malloc((size_t)ntok * ROW * 4);
	float *v = malloc((size_t)ntok * ROW * 4);
	float q[Q_HEADS * HEAD_DIM], out[Q_HEADS * HEAD_DIM];
	struct kvl_attn_args a;
	int r;

	CHECK(blk && slot && k && v, "no memory");
	for (t = 0; t < ntok; t++) {
		blk[t] = b[t / tpb];
		slot[t] = t % tpb;
	}
	for (layer = 0; layer < LAYERS; layer++) {
		r = kvl_read_kv(ctx, layout, layer, ntok, blk, slot, k, v);
		CHECK(!r, "read_kv: %s", strerror(-r));
		for (t = 0; t < ntok; t++)
			for (i = 0; i < ROW; i++) {
				size_t x = (size_t)t * ROW + i;
				/* the value written, rounded to BF16 */
				float wk = val(t / tpb, layer, slot[t], i, 0);
				float wv = val(t / tpb, layer, slot[t], i, 1);

				if (zero ? k[x] != 0.0f || v[x] != 0.0f :
				    fabsf(k[x] - wk) > wk / 128 ||
				    fabsf(v[x] - wv) > wv / 128)
					bad++;
			}
	}
	CHECK(!bad, "%u K/V values of %u are not %s", bad,
	      ntok * ROW * 2 * LAYERS, zero ? "zero" : "the writer's");
	for (i = 0; i < Q_HEADS * HEAD_DIM; i++)
		q[i] = 0.5f;
	memset(&a, 0, sizeof(a));
	a.batch = 1;
	a.q_heads = Q_HEADS;
	a.max_blocks_per_seq = n;
	a.q = q;
	a.block_tables = b;
	a.ctx_lens = &ntok;
	a.out = out;
	r = kvl_attention(ctx, layout, &a);
	CHECK(!r, "attention: %s", strerror(-r));
	for (i = 0; i < Q_HEADS * HEAD_DIM; i++)
		if ((out[i] == 0.0f) != zero)
			FAIL("attention output %u is %g", i, out[i]);
	free(blk);
	free(slot);
	free(k);
	free(v);
}

static int cmd_read(const char *tenant, uint32_t tier, uint32_t n,
		    const char *path, const char *what)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx, false);
	uint32_t b[MAX_BLOCKS], got[MAX_BLOCKS], top[MAX_BLOCKS], m = 0, i, j;
	uint64_t sum[MAX_BLOCKS], wsum[MAX_BLOCKS], z = zero_sum();
	bool zero = !strcmp(what, "zero");
	int r;

	CHECK(zero || !strcmp(what, "same"), "zero or same, not %s", what);
	load(path, b, wsum, n);
	for (i = 0; i < n; i++)
		m = b[i] + 1 > m ? b[i] + 1 : m;
	CHECK(m <= MAX_BLOCKS, "block %u is too far up for this test", m - 1);
	if (tier)
		join(ctx, tier);
	/* lowest free first: the writer's blocks are among these */
	lease_n(ctx, tier, m, got);
	for (i = 0; i < n; i++) {
		for (j = 0; j < m && got[j] != b[i]; j++)
			;
		CHECK(j < m, "block %u was not granted: the test needs the "
		      "writer's blocks", b[i]);
	}
	/* in the tier itself */
	r = kvl_block_sums(ctx, tier, b, n, sum);
	CHECK(!r, "block sums: %s", strerror(-r));
	for (i = 0; i < n; i++)
		CHECK(sum[i] == (zero ? z : wsum[i]), "tier %u block %u: "
		      "sum %016llx, want %s", tier, b[i],
		      (unsigned long long)sum[i],
		      zero ? "zeros" : "the writer's");
	/* on top: read directly, or swapped up first */
	if (tier) {
		uint32_t down[MAX_BLOCKS];

		/* the writer's top blocks, swapped down untouched: what
		 * they held must not travel */
		lease_n(ctx, 0, n, top);
		CHECK(n <= MAX_BLOCKS - m, "too many blocks for this test");
		lease_n(ctx, tier, n, down);
		swap(ctx, 0, top, tier, down, n);
		r = kvl_block_sums(ctx, tier, down, n, sum);
		CHECK(!r, "block sums: %s", strerror(-r));
		for (i = 0; i < n; i++)
			CHECK(sum[i] == (zero ? z : wsum[i]), "top block %u "
			      "swapped down: sum %016llx, want %s", top[i],
			      (unsigned long long)sum[i],
			      zero ? "zeros" : "the writer's");
		swap(ctx, tier, b, 0, top, n);
		r = kvl_block_sums(ctx, 0, top, n, sum);
		CHECK(!r, "block sums: %s", strerror(-r));
		for (i = 0; i < n; i++)
			CHECK(sum[i] == (zero ? z : wsum[i]), "block %u "
			      "swapped up: sum %016llx, want %s", b[i],
			      (unsigned long long)sum[i],
			      zero ? "zeros" : "the writer's");
		read_top(ctx, layout, top, n, zero);
	} else {
		read_top(ctx, layout, b, n, zero);
	}
	printf("%s read blocks %u..%u of tier %u: %s\n", tenant, b[0],
	       b[n - 1], tier, zero ? "all zeros" : "its own data");
	kvl_close(ctx);
	return 0;
}

static int cmd_publish(const char *tenant, uint32_t n, const char *path)
{
	struct kvl_ctx *ctx = open_ctx(tenant);
	int layout = declare(ctx, true);
	uint32_t *tok = malloc((size_t)n * tpb * 4), i;
	const uint32_t *table;
	uint64_t sum[MAX_BLOCKS];
	struct kvl_seq *s;
	uint32_t nb;
	int r;

	CHECK(tok, "no memory");
	for (i = 0; i < n * tpb; i++)
		tok[i] = 1000 + i;
	r = kvl_seq_create(ctx, layout, &s);
	CHECK(!r, "seq_create: %s", strerror(-r));
	r = kvl_seq_append_tokens(s, tok, n * tpb);
	CHECK(r >= 0, "append_tokens: %s", strerror(-r));
	kvl_seq_block_table(s, &table, &nb);
	CHECK(nb == n, "%u blocks, want %u", nb, n);
	write_all(ctx, layout, table, n);
	r = kvl_block_sums(ctx, 0, table, n, sum);
	CHECK(!r, "block sums: %s", strerror(-r));
	save(path, table, sum, n);
	r = kvl_seq_publish(s);
	CHECK(r == (int)n, "publish: %d, want %u", r, n);
	printf("%s published blocks %u..%u\n", tenant, table[0],
	       table[n - 1]);
	kvl_seq_free(s);
	kvl_close(ctx);
	free(tok);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		goto usage;
	sock_path = argv[2];
	if (!strcmp(argv[1], "write") && argc == 7)
		return cmd_write(argv[3], (uint32_t)atoi(argv[4]),
				 (uint32_t)atoi(argv[5]), argv[6]);
	if (!strcmp(argv[1], "read") && argc == 8)
		return cmd_read(argv[3], (uint32_t)atoi(argv[4]),
				(uint32_t)atoi(argv[5]), argv[6], argv[7]);
	if (!strcmp(argv[1], "publish") && argc == 6)
		return cmd_publish(argv[3], (uint32_t)atoi(argv[4]), argv[5]);
usage:
	fprintf(stderr, "usage: e2e-scrub write SOCK TENANT TIER N FILE\n"
		"       e2e-scrub read SOCK TENANT TIER N FILE zero|same\n"
		"       e2e-scrub publish SOCK TENANT N FILE\n");
	return 2;
}
