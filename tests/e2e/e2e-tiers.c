// SPDX-License-Identifier: MIT
/*
 * e2e-tiers - checks of the lower tiers and of swapping, through kvpoold
 * and libkvlease (either ledger: the same program runs in the VM with the
 * module).
 *
 *   e2e-tiers roundtrip SOCK [TENANT]  every dtype through every lower
 *        tier: block bytes identical after out and in (FNV sums of every
 *        block, on top and below), K/V read back equal, state and tier
 *        reported; a transparent swap-in by a read; the raw asynchronous
 *        API (kvl_swap + kvl_swap_poll + kvl_swap_wait); nothing left held
 *   e2e-tiers quota SOCK TENANT TIER MAX next|drop  TENANT may hold MAX
 *        blocks in TIER: a larger sequence cannot swap there (-EDQUOT,
 *        unchanged), a smaller one can; a reclaim is answered from the
 *        library's unused blocks first, then, under the swap policy,
 *        falls back to the next tier ("next") or drops the sequence when
 *        no tier has room ("drop"); the tier's current never exceeds MAX
 *   e2e-tiers bad SOCK                 bad swaps (block not held, no such
 *        tier, not joined, same tier, repeated destination, zero count,
 *        unknown ticket...), each a clear error; then this client and
 *        another one still work
 *   e2e-tiers ioerr SOCK TIER          the daemon injects I/O errors in
 *        TIER (a file): the swap fails with -EIO, the sequence stays
 *        resident and intact, nothing stays leased below, later swaps to
 *        another tier work
 *   e2e-tiers full SOCK TIER BLOCKS    TIER (a file) has room for fewer
 *        than BLOCKS blocks (its filesystem or file size limit): a swap of
 *        BLOCKS fails with -ENOMEM and changes nothing; a small one works
 *   e2e-tiers prefix SOCK              a sequence that holds prefix-cache
 *        blocks (matched from another one, the tenant's, read-only):
 *        swapping it moves only its own blocks, the cached ones stay on
 *        top; K/V read back equal after out and in; a drop gives up only
 *        its references; nothing left held
 *   e2e-tiers churn SOCK FILE          swap a sequence out and in forever,
 *        writing FILE once it does (for kill tests); recreates it after a
 *        daemon restart and writes FILE.2 then
 *   e2e-tiers restart SOCK FILE        swap a sequence out, write FILE,
 *        then wait for a daemon restart: the sequence must report DROPPED
 *        with its old length, and no lower-tier block stay held
 *   e2e-tiers kept SOCK FILE           one sequence swapped to each lower
 *        tier and one resident, write FILE, then wait for FILE.go (the
 *        caller restarts the daemon in between, kept memory used): every
 *        sequence is as it was (state, tier), swaps in and reads back its
 *        K/V bit for bit, the data epoch did not change, nothing stays
 *        held below
 *   e2e-tiers wait-used SOCK TIER N MS wait until the tier's used == N
 *                                      (N: LO-HI, within that range)
 * Exit 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvlease.h"
#include "kvpool_proto.h"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); return 1; } while (0)

static const char *sock_path;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int open_ctx(const char *tenant, uint32_t policy, struct kvl_ctx **ctx)
{
	struct kvl_opts o;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant && tenant[0] ? tenant : NULL;
	o.region_bytes = 4 << 20;
	o.policy = policy;
	o.timeout_ns = 3000000000ULL;
	return kvl_open(&o, ctx);
}

/* Deterministic values in [-1, 1]. */
static float val(uint32_t a, uint32_t b, uint32_t c)
{
	uint64_t x = ((uint64_t)a << 42) ^ ((uint64_t)b << 20) ^ c;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (float)((double)(x >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

struct seqdata {
	struct kvl_seq *s;
	uint32_t len, layers, row;
	float *k, *v;		/* [layer][len][row] as read back */
};

static int fill_seq(struct kvl_ctx *ctx, int layout,
		    const struct kvl_layout *l, uint32_t len, uint32_t seed,
		    struct seqdata *sd)
{
	uint32_t row = l->kv_heads * l->head_dim, ly, t, i;
	size_t n = (size_t)len * row;
	float *k = malloc(n * 4), *v = malloc(n * 4);
	int r;

	memset(sd, 0, sizeof(*sd));
	if (!k || !v)
		return -ENOMEM;
	r = kvl_seq_create(ctx, layout, &sd->s);
	if (!r)
		r = kvl_seq_append(sd->s, len);
	if (r < 0)
		return r;
	sd->len = len;
	sd->layers = l->layers;
	sd->row = row;
	sd->k = malloc(n * l->layers * 4);
	sd->v = malloc(n * l->layers * 4);
	if (!sd->k || !sd->v)
		return -ENOMEM;
	for (ly = 0; ly < l->layers; ly++) {
		for (t = 0; t < len; t++)
			for (i = 0; i < row; i++) {
				k[(size_t)t * row + i] = val(seed, ly, t * 1000 + i);
				v[(size_t)t * row + i] = val(seed + 7, ly,
							     t * 1000 + i);
			}
		r = kvl_seq_write_kv(sd->s, ly, 0, len, k, v);
		if (r)
			return r;
		r = kvl_seq_read_kv(sd->s, ly, 0, len, sd->k + n * ly,
				    sd->v + n * ly);
		if (r)
			return r;
	}
	free(k);
	free(v);
	return 0;
}

/* K/V read back equal, bit for bit, to what was read after writing. */
static int same_kv(struct seqdata *sd)
{
	size_t n = (size_t)sd->len * sd->row;
	float *k = malloc(n * 4), *v = malloc(n * 4);
	uint32_t ly;
	int r = 0;

	if (!k || !v)
		return -ENOMEM;
	for (ly = 0; ly < sd->layers && !r; ly++) {
		r = kvl_seq_read_kv(sd->s, ly, 0, sd->len, k, v);
		if (!r && (memcmp(k, sd->k + n * ly, n * 4) ||
			   memcmp(v, sd->v + n * ly, n * 4)))
			r = -EILSEQ;
	}
	free(k);
	free(v);
	return r;
}

static void seqdata_free(struct seqdata *sd)
{
	kvl_seq_free(sd->s);
	free(sd->k);
	free(sd->v);
	memset(sd, 0, sizeof(*sd));
}

static int sums_of(struct kvl_ctx *ctx, struct kvl_seq *s, uint32_t tier,
		   uint64_t *sums, uint32_t *n)
{
	const uint32_t *t;

	kvl_seq_block_table(s, &t, n);
	return kvl_block_sums(ctx, tier, t, *n, sums);
}

static int ntiers_of(struct kvl_ctx *ctx, struct kvl_tier_info *ti)
{
	return kvl_tiers(ctx, ti, KVL_MAX_TIERS);
}

static const struct {
	uint32_t dtype, layers, kv_heads, head_dim;
	const char *name;
} layouts[] = {
	{ KVL_DTYPE_BF16, 2, 2, 64, "bf16" },
	{ KVL_DTYPE_FP8, 3, 1, 128, "fp8" },
	{ KVL_DTYPE_INT8, 2, 4, 32, "int8" },
	{ KVL_DTYPE_INT4, 2, 2, 64, "int4" },
};

static int declare(struct kvl_ctx *ctx, unsigned int i, struct kvl_layout *l)
{
	memset(l, 0, sizeof(*l));
	l->layers = layouts[i].layers;
	l->kv_heads = layouts[i].kv_heads;
	l->head_dim = layouts[i].head_dim;
	l->dtype = layouts[i].dtype;
	return kvl_layout_declare(ctx, l);
}

static int cmd_roundtrip(const char *tenant)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_ctx *ctx;
	struct kvl_seq_info si;
	uint64_t top[256], low[256];
	uint32_t n, n2, t, k;
	unsigned int i;
	int r, nt, lay;

	r = open_ctx(tenant, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt < 2)
		FAIL("kvl_tiers: %d (need a lower tier)", nt);
	for (i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		struct kvl_layout l;
		struct seqdata sd;

		lay = declare(ctx, i, &l);
		if (lay < 0)
			FAIL("layout %s: %s", layouts[i].name, strerror(-lay));
		r = fill_seq(ctx, lay, &l, 5 * l.tokens_per_block + 3, i + 1,
			     &sd);
		if (r)
			FAIL("%s: fill: %s", layouts[i].name, strerror(-r));
		r = sums_of(ctx, sd.s, 0, top, &n);
		if (r)
			FAIL("%s: sums on top: %s", layouts[i].name,
			     strerror(-r));
		for (t = 1; t < (uint32_t)nt; t++) {
			r = kvl_seq_swap_out(sd.s, (int)t);
			kvl_seq_info(sd.s, &si);
			if (r || si.state != KVL_SEQ_SWAPPED || si.tier != t ||
			    si.swapped_blocks != n)
				FAIL("%s: swap out to %s: %s, state %u tier %u "
				     "blocks %u/%u", layouts[i].name,
				     ti[t].name, strerror(-r), si.state,
				     si.tier, si.swapped_blocks, n);
			r = sums_of(ctx, sd.s, t, low, &n2);
			if (r || n2 != n || memcmp(top, low, n * 8))
				FAIL("%s: bytes in %s differ (%s)",
				     layouts[i].name, ti[t].name,
				     strerror(-r));
			r = kvl_seq_swap_in(sd.s, 0);
			kvl_seq_info(sd.s, &si);
			if (r || si.state != KVL_SEQ_RESIDENT)
				FAIL("%s: swap in from %s: %s, state %u",
				     layouts[i].name, ti[t].name,
				     strerror(-r), si.state);
			r = sums_of(ctx, sd.s, 0, low, &n2);
			if (r || memcmp(top, low, n * 8))
				FAIL("%s: bytes differ after the round trip "
				     "through %s", layouts[i].name,
				     ti[t].name);
			r = same_kv(&sd);
			if (r)
				FAIL("%s: K/V after %s: %s", layouts[i].name,
				     ti[t].name, strerror(-r));
			printf("%s: %u blocks out to %s and back: bytes and "
			       "K/V identical\n", layouts[i].name, n,
			       ti[t].name);
		}
		/* a read brings a swapped sequence back by itself */
		r = kvl_seq_swap_out(sd.s, -1);
		kvl_seq_info(sd.s, &si);
		if (r || si.state != KVL_SEQ_SWAPPED)
			FAIL("%s: swap out to the first tier: %s",
			     layouts[i].name, strerror(-r));
		r = same_kv(&sd);
		kvl_seq_info(sd.s, &si);
		if (r || si.state != KVL_SEQ_RESIDENT || si.swaps_in != (uint32_t)nt)
			FAIL("%s: transparent swap-in: %s, state %u, %u in",
			     layouts[i].name, strerror(-r), si.state,
			     si.swaps_in);
		seqdata_free(&sd);
	}

	/* the raw API: lease, copy asynchronously, poll, wait */
	{
		uint32_t a[8], b[8];
		uint64_t s1[8], s2[8], ticket = 0, t2 = 0;
		int st = 1, polls = 0;

		r = kvl_lease(ctx, 8, 0, 0, a);
		if (r != 8)
			FAIL("lease 8: %d", r);
		r = kvl_tier_join(ctx, 1);
		if (!r)
			r = kvl_tier_lease(ctx, 1, 8, 0, 0, b);
		if (r != 8)
			FAIL("lease 8 in tier 1: %d", r);
		r = kvl_swap(ctx, 0, a, 1, b, 8, &ticket);
		if (r || !ticket)
			FAIL("kvl_swap: %s", strerror(-r));
		while ((r = kvl_swap_poll(ctx, ticket, &st)) == 0) {
			polls++;
			usleep(1000);
		}
		if (r != 1 || st)
			FAIL("kvl_swap_poll: %d status %d", r, st);
		r = kvl_swap_wait(ctx, ticket, 0);
		if (r)
			FAIL("kvl_swap_wait after poll: %d", r);
		r = kvl_swap(ctx, 1, b, 0, a, 8, &t2);
		if (!r)
			r = kvl_swap_wait(ctx, t2, 0);
		if (r || t2 != ticket + 1)
			FAIL("kvl_swap back + wait: %s (ticket %llu)",
			     strerror(-r), (unsigned long long)t2);
		if (kvl_block_sums(ctx, 0, a, 8, s1) ||
		    kvl_block_sums(ctx, 1, b, 8, s2) || memcmp(s1, s2, 64))
			FAIL("raw copies differ");
		if (kvl_tier_release(ctx, 1, b, 8) != 8 ||
		    kvl_release(ctx, a, 8) != 8)
			FAIL("release after raw copies");
		printf("raw API: async copy done after %d polls, waited, "
		       "copied back: OK\n", polls);
	}
	nt = ntiers_of(ctx, ti);
	for (k = 1; k < (uint32_t)nt; k++)
		if (ti[k].held)
			FAIL("%u blocks left held in %s", ti[k].held,
			     ti[k].name);
	kvl_close(ctx);
	printf("roundtrip: OK\n");
	return 0;
}

static int tenant_current(const char *pool, const char *tenant,
			  uint32_t *cur)
{
	struct kvl_admin *adm;
	struct kvl_tenant_info t[64];
	int n, i, r;

	r = kvl_admin_open(sock_path, &adm);
	if (r)
		return r;
	n = kvl_admin_tenant_list(adm, pool, t, 64);
	kvl_admin_close(adm);
	if (n < 0)
		return n;
	for (i = 0; i < n && i < 64; i++)
		if (!strcmp(t[i].name, tenant)) {
			*cur = t[i].current;
			return 0;
		}
	return -ENOENT;
}

static int cmd_quota(const char *tenant, uint32_t tier, uint32_t max,
		     bool next)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq_info si;
	struct seqdata big, small;
	uint32_t cur = 0;
	int r, nt, lay;

	r = open_ctx(tenant, KVL_POLICY_SWAP, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt <= (int)tier)
		FAIL("no tier %u", tier);
	lay = declare(ctx, 0, &l);
	if (lay < 0)
		FAIL("layout: %s", strerror(-lay));
	r = fill_seq(ctx, lay, &l, (max + 2) * l.tokens_per_block, 11, &big);
	if (!r)
		r = fill_seq(ctx, lay, &l, (max - 1) * l.tokens_per_block, 12,
			     &small);
	if (r)
		FAIL("fill: %s", strerror(-r));
	r = kvl_seq_swap_out(big.s, (int)tier);
	kvl_seq_info(big.s, &si);
	if (r != -EDQUOT || si.state != KVL_SEQ_RESIDENT)
		FAIL("swap of %u blocks to %s at max %u: want -EDQUOT, got %d "
		     "(state %u)", big.len / l.tokens_per_block + 0,
		     ti[tier].name, max, r, si.state);
	if (same_kv(&big))
		FAIL("the refused sequence changed");
	printf("%s: swap of %u blocks refused at max %u: -EDQUOT, sequence "
	       "intact\n", ti[tier].name, max + 2, max);
	r = kvl_seq_swap_out(small.s, (int)tier);
	kvl_seq_info(small.s, &si);
	if (r || si.state != KVL_SEQ_SWAPPED || si.tier != tier)
		FAIL("swap of %u blocks to %s: %s", max - 1, ti[tier].name,
		     strerror(-r));
	r = tenant_current(ti[tier].name, tenant, &cur);
	if (r || cur > max || cur != max - 1)
		FAIL("%s current %u (max %u): %s", ti[tier].name, cur, max,
		     strerror(-r));
	/* Cheapest first: unused leased blocks answer a small reclaim. */
	{
		struct kvl_status st;

		kvl_status(ctx, &st);
		if (st.cached) {
			r = kvl_reclaim(ctx, 1);
			kvl_seq_info(big.s, &si);
			if (r != (int)st.cached ||
			    si.state != KVL_SEQ_RESIDENT)
				FAIL("reclaim of 1 with %u cached: gave %d, "
				     "state %u", st.cached, r, si.state);
			printf("reclaim 1: the %u unused blocks went first\n",
			       st.cached);
		}
	}
	/* Then under the swap policy the big one (least recently used)
	 * cannot go to this tier (quota): it goes to the next one, or is
	 * dropped. */
	r = kvl_reclaim(ctx, max + 2);
	kvl_seq_info(big.s, &si);
	if (next) {
		if (r < (int)(max + 2) || si.state != KVL_SEQ_SWAPPED ||
		    si.tier != tier + 1)
			FAIL("reclaim: gave %d, big sequence state %u tier %u "
			     "(want swapped to %s)", r, si.state, si.tier,
			     ti[tier + 1].name);
		printf("reclaim: fell back to %s\n", ti[tier + 1].name);
		if (same_kv(&big))
			FAIL("big sequence differs after swapping back");
	} else {
		if (r < (int)(max + 2) || si.state != KVL_SEQ_DROPPED ||
		    si.dropped_len != big.len)
			FAIL("reclaim: gave %d, state %u (want dropped)", r,
			     si.state);
		printf("reclaim: no other tier, dropped (len %u)\n",
		       si.dropped_len);
	}
	r = tenant_current(ti[tier].name, tenant, &cur);
	if (r || cur > max)
		FAIL("%s current %u over max %u", ti[tier].name, cur, max);
	if (same_kv(&small))
		FAIL("small sequence differs after swapping back");
	seqdata_free(&big);
	seqdata_free(&small);
	r = tenant_current(ti[tier].name, tenant, &cur);
	if (r || cur)
		FAIL("%s current %u after freeing", ti[tier].name, cur);
	kvl_close(ctx);
	printf("quota: OK\n");
	return 0;
}

static int expect(const char *what, int got, int want)
{
	if (got == want) {
		printf("  %-40s %s\n", what, want ? strerror(-want) : "ok");
		return 0;
	}
	fprintf(stderr, "FAIL: %s: want %d (%s), got %d (%s)\n", what, want,
		strerror(-want), got, strerror(-got));
	return 1;
}

static int cmd_bad(void)
{
	struct kvl_ctx *ctx, *ctx2;
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	uint32_t a[4], b[4], dup[4], other[4] = { 1000, 1001, 1002, 1003 };
	uint64_t ticket, sums[4];
	int bad = 0, r, nt;

	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt < 2)
		FAIL("need a lower tier");
	if (kvl_lease(ctx, 4, 0, 0, a) != 4)
		FAIL("lease");
	bad |= expect("swap to a tier not joined",
		      kvl_swap(ctx, 0, a, 1, b, 4, &ticket), -EUNATCH);
	bad |= expect("join a tier that does not exist",
		      kvl_tier_join(ctx, 9), -ENOENT);
	bad |= expect("join the lower tier", kvl_tier_join(ctx, 1), 0);
	if (kvl_tier_lease(ctx, 1, 4, 0, 0, b) != 4)
		FAIL("lease in tier 1");
	bad |= expect("swap to a tier that does not exist",
		      kvl_swap(ctx, 0, a, 7, b, 4, &ticket), -ENOENT);
	bad |= expect("swap within one tier",
		      kvl_swap(ctx, 1, b, 1, b, 4, &ticket), -EINVAL);
	bad |= expect("swap of no block",
		      kvl_swap(ctx, 0, a, 1, b, 0, &ticket), -EINVAL);
	bad |= expect("swap of a block not held (source)",
		      kvl_swap(ctx, 0, other, 1, b, 4, &ticket), -EPERM);
	bad |= expect("swap to a block not held (destination)",
		      kvl_swap(ctx, 0, a, 1, other, 4, &ticket), -EPERM);
	memcpy(dup, b, sizeof(dup));
	dup[3] = dup[0];
	bad |= expect("swap to a destination named twice",
		      kvl_swap(ctx, 0, a, 1, dup, 4, &ticket), -EINVAL);
	bad |= expect("wait for a ticket never issued",
		      kvl_swap_wait(ctx, 123456, 0), -ENOENT);
	bad |= expect("sums of blocks not held",
		      kvl_block_sums(ctx, 1, other, 4, sums), -EPERM);
	bad |= expect("release below of a block not held",
		      kvl_tier_release(ctx, 1, other, 1), -EINVAL);
	bad |= expect("a good swap after all that",
		      kvl_swap(ctx, 0, a, 1, b, 4, &ticket), 0);
	bad |= expect("its completion", kvl_swap_wait(ctx, ticket, 0), 0);
	if (bad)
		return 1;
	/* this connection and another client still work */
	if (kvl_tier_release(ctx, 1, b, 4) != 4 || kvl_release(ctx, a, 4) != 4)
		FAIL("release after the bad requests");
	r = open_ctx(NULL, 0, &ctx2);
	if (r || kvl_lease(ctx2, 2, 0, 0, a) != 2 || kvl_tier_join(ctx2, 1) ||
	    kvl_tier_lease(ctx2, 1, 2, 0, 0, b) != 2 ||
	    kvl_swap(ctx2, 0, a, 1, b, 2, &ticket) ||
	    kvl_swap_wait(ctx2, ticket, 0))
		FAIL("another client after the bad requests: %s",
		     strerror(-r));
	kvl_close(ctx2);
	kvl_close(ctx);
	printf("bad: OK\n");
	return 0;
}

static int cmd_ioerr(uint32_t tier)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq_info si;
	struct seqdata sd;
	int r, nt, lay;

	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt <= (int)tier)
		FAIL("no tier %u", tier);
	lay = declare(ctx, 0, &l);
	r = lay < 0 ? lay : fill_seq(ctx, lay, &l, 8 * l.tokens_per_block, 5,
				     &sd);
	if (r)
		FAIL("fill: %s", strerror(-r));
	r = kvl_seq_swap_out(sd.s, (int)tier);
	kvl_seq_info(sd.s, &si);
	if (r != -EIO || si.state != KVL_SEQ_RESIDENT)
		FAIL("swap out to %s with failing I/O: want -EIO, got %d "
		     "(state %u)", ti[tier].name, r, si.state);
	if (same_kv(&sd))
		FAIL("the sequence changed after a failed swap");
	nt = ntiers_of(ctx, ti);
	if (ti[tier].held)
		FAIL("%u blocks stay held in %s", ti[tier].held,
		     ti[tier].name);
	printf("%s: swap failed with -EIO, sequence resident and intact, "
	       "nothing held below\n", ti[tier].name);
	if (tier != 1) {
		r = kvl_seq_swap_out(sd.s, 1);
		if (!r)
			r = kvl_seq_swap_in(sd.s, 0);
		if (r || same_kv(&sd))
			FAIL("swap through %s after the error: %s",
			     ti[1].name, strerror(-r));
		printf("%s still works\n", ti[1].name);
	}
	seqdata_free(&sd);
	kvl_close(ctx);
	printf("ioerr: OK\n");
	return 0;
}

static int cmd_full(uint32_t tier, uint32_t blocks)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq_info si;
	struct seqdata big, small;
	int r, nt, lay;

	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt <= (int)tier)
		FAIL("no tier %u", tier);
	lay = declare(ctx, 0, &l);
	r = lay < 0 ? lay : fill_seq(ctx, lay, &l, blocks * l.tokens_per_block,
				     21, &big);
	if (!r)
		r = fill_seq(ctx, lay, &l, 4 * l.tokens_per_block, 22, &small);
	if (r)
		FAIL("fill: %s", strerror(-r));
	r = kvl_seq_swap_out(big.s, (int)tier);
	kvl_seq_info(big.s, &si);
	if (r != -ENOMEM || si.state != KVL_SEQ_RESIDENT || same_kv(&big))
		FAIL("swap of %u blocks to a full %s: want -ENOMEM, got %d "
		     "(state %u)", blocks, ti[tier].name, r, si.state);
	printf("%s full: swap of %u blocks failed with -ENOMEM, sequence "
	       "intact\n", ti[tier].name, blocks);
	r = kvl_seq_swap_out(small.s, (int)tier);
	if (!r)
		r = kvl_seq_swap_in(small.s, 0);
	if (r || same_kv(&small))
		FAIL("a small swap through %s: %s", ti[tier].name,
		     strerror(-r));
	printf("%s: a small swap still works\n", ti[tier].name);
	seqdata_free(&big);
	seqdata_free(&small);
	kvl_close(ctx);
	printf("full: OK\n");
	return 0;
}

static int cmd_prefix(void)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq_info si;
	struct seqdata a, b;
	uint32_t *tok, n, i, own, nb, k;
	const uint32_t *t;
	int r, lay, nt;

	r = open_ctx(NULL, KVL_POLICY_RECOMPUTE, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	memset(&l, 0, sizeof(l));
	l.layers = 2;
	l.kv_heads = 2;
	l.head_dim = 64;
	l.dtype = KVL_DTYPE_BF16;
	lay = kvl_layout_declare_model(ctx, &l, "e2e-tiers-model");
	if (lay < 0)
		FAIL("kvl_layout_declare_model: %s", strerror(-lay));
	n = 4 * l.tokens_per_block;
	tok = malloc(2 * n * sizeof(*tok));
	for (i = 0; i < 2 * n; i++)
		tok[i] = 1000 + i;
	/* a: 4 full blocks with their token ids, published */
	memset(&a, 0, sizeof(a));
	r = kvl_seq_create(ctx, lay, &a.s);
	if (!r && kvl_seq_append_tokens(a.s, tok, n) != (int)n)
		r = -EIO;
	if (r)
		FAIL("seq a with tokens: %s", strerror(-r));
	{
		uint32_t row = l.kv_heads * l.head_dim, ly, p, j;
		float *kv = malloc(sizeof(float) * n * row);

		for (ly = 0; ly < l.layers; ly++) {
			for (p = 0; p < n; p++)
				for (j = 0; j < row; j++)
					kv[(size_t)p * row + j] =
						val(77, ly, p * 1000 + j);
			r = kvl_seq_write_kv(a.s, ly, 0, n, kv, kv);
			if (r)
				FAIL("write a: %s", strerror(-r));
		}
		free(kv);
	}
	r = kvl_seq_publish(a.s);
	if (r <= 0)
		FAIL("publish: %d", r);
	/* b: matches a's 4 blocks, then 3 blocks of its own */
	memset(&b, 0, sizeof(b));
	r = kvl_seq_create(ctx, lay, &b.s);
	if (r)
		FAIL("seq b: %s", strerror(-r));
	r = kvl_seq_match(b.s, tok, n);
	if (r != (int)n)
		FAIL("match: %d (want %u)", r, n);
	if (kvl_seq_append_tokens(b.s, tok + n,
				  3 * l.tokens_per_block) < 0)
		FAIL("append b");
	b.len = kvl_seq_len(b.s);
	b.layers = l.layers;
	b.row = l.kv_heads * l.head_dim;
	b.k = malloc(sizeof(float) * b.len * b.row * l.layers);
	b.v = malloc(sizeof(float) * b.len * b.row * l.layers);
	for (i = 0; i < l.layers; i++) {
		size_t off = (size_t)i * b.len * b.row, j;
		float *kv = malloc(sizeof(float) * 3 * l.tokens_per_block *
				   b.row);

		for (j = 0; j < 3ULL * l.tokens_per_block * b.row; j++)
			kv[j] = val(78, i, (uint32_t)j);
		if (kvl_seq_write_kv(b.s, i, n, 3 * l.tokens_per_block, kv,
				     kv))
			FAIL("write b");
		free(kv);
		if (kvl_seq_read_kv(b.s, i, 0, b.len, b.k + off, b.v + off))
			FAIL("read b");
	}
	kvl_seq_block_table(b.s, &t, &nb);
	own = nb - 4;
	/* out and back: only b's own blocks move */
	r = kvl_seq_swap_out(b.s, 1);
	kvl_seq_info(b.s, &si);
	if (r || si.state != KVL_SEQ_SWAPPED || si.swapped_blocks != own)
		FAIL("swap out of a sequence with cached blocks: %s, state %u, "
		     "%u swapped (want %u of %u)", strerror(-r), si.state,
		     si.swapped_blocks, own, nb);
	r = kvl_seq_swap_in(b.s, 0);
	if (r || same_kv(&b))
		FAIL("swap back: %s", strerror(-r));
	printf("prefix: %u own blocks out and back, %u cached blocks stayed "
	       "on top, K/V equal\n", own, nb - own);
	/* a drop (recompute policy, via a reclaim) gives up references */
	kvl_trim(ctx);
	r = kvl_reclaim(ctx, 1000);
	kvl_seq_info(b.s, &si);
	if (r < 0 || si.state != KVL_SEQ_DROPPED)
		FAIL("reclaim: %d, state %u", r, si.state);
	seqdata_free(&b);
	kvl_seq_free(a.s);
	free(tok);
	/* the tenant's cache keeps a's blocks, unreferenced now */
	r = kvl_prefix_evict(ctx, 1000);
	if (r != 4)
		FAIL("prefix evict: %d (want the 4 cached blocks)", r);
	nt = ntiers_of(ctx, ti);
	for (k = 1; k < (uint32_t)nt; k++)
		if (ti[k].held)
			FAIL("%u blocks left in %s", ti[k].held, ti[k].name);
	kvl_close(ctx);
	printf("prefix: OK\n");
	return 0;
}

static int touch(const char *file)
{
	FILE *f = fopen(file, "w");

	if (!f)
		return -errno;
	fputs("ready\n", f);
	fclose(f);
	return 0;
}

static int cmd_churn(const char *file)
{
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct seqdata sd;
	char f2[512];
	int r, lay, restarts = 0;
	uint64_t rounds = 0;

	snprintf(f2, sizeof(f2), "%s.2", file);
	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	lay = declare(ctx, 0, &l);
	if (lay < 0)
		FAIL("layout: %s", strerror(-lay));
	for (;;) {
		r = fill_seq(ctx, lay, &l, 48 * l.tokens_per_block, 3, &sd);
		while (!r) {
			r = kvl_seq_swap_out(sd.s, -1);
			if (!r)
				r = kvl_seq_swap_in(sd.s, 0);
			if (!r && ++rounds == 1)
				touch(restarts ? f2 : file);
		}
		if (r != -ESTALE && r != -ENODATA)
			FAIL("churn: %s", strerror(-r));
		seqdata_free(&sd);
		restarts++;
		rounds = 0;
	}
}

static int cmd_restart(const char *file)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct kvl_status st;
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq_info si;
	struct seqdata sd;
	uint64_t end;
	int r, lay, nt, k;

	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	lay = declare(ctx, 0, &l);
	r = lay < 0 ? lay : fill_seq(ctx, lay, &l, 6 * l.tokens_per_block, 9,
				     &sd);
	if (!r)
		r = kvl_seq_swap_out(sd.s, -1);
	if (r)
		FAIL("fill and swap out: %s", strerror(-r));
	touch(file);
	end = now_ms() + 20000;
	do {
		usleep(100000);
		r = kvl_status(ctx, &st);
	} while (r != -ESTALE && now_ms() < end);
	if (r != -ESTALE)
		FAIL("no restart seen: %d", r);
	kvl_seq_info(sd.s, &si);
	printf("after the restart: state %u (dropped %u), len %u, had %u\n",
	       si.state, KVL_SEQ_DROPPED, si.len, si.dropped_len);
	if (si.state != KVL_SEQ_DROPPED || si.len || si.dropped_len != sd.len)
		FAIL("swapped sequence after a restart: state %u len %u "
		     "dropped_len %u", si.state, si.len, si.dropped_len);
	if (kvl_seq_read_kv(sd.s, 0, 0, 1, sd.k, NULL) != -EINVAL &&
	    kvl_seq_read_kv(sd.s, 0, 0, 1, sd.k, NULL) != -ENODATA)
		FAIL("a read of a dropped sequence must fail");
	nt = ntiers_of(ctx, ti);
	for (k = 1; k < nt; k++)
		if (ti[k].held)
			FAIL("%u blocks still held in %s", ti[k].held,
			     ti[k].name);
	/* and it can be re-filled */
	r = kvl_seq_append(sd.s, 4);
	kvl_seq_info(sd.s, &si);
	if (r != 4 || si.state != KVL_SEQ_RESIDENT)
		FAIL("re-fill after the restart: %d state %u", r, si.state);
	seqdata_free(&sd);
	kvl_close(ctx);
	printf("restart: OK\n");
	return 0;
}

static int cmd_kept(const char *file)
{
	struct kvl_tier_info ti[KVL_MAX_TIERS];
	struct seqdata sd[KVL_MAX_TIERS];
	struct kvl_seq_info si;
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	char go[512];
	uint64_t epoch, end;
	int r, lay, nt, k;

	r = open_ctx(NULL, 0, &ctx);
	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	nt = ntiers_of(ctx, ti);
	if (nt < 2)
		FAIL("no lower tier (%d)", nt);
	lay = declare(ctx, 1, &l);
	if (lay < 0)
		FAIL("layout: %s", strerror(-lay));
	memset(sd, 0, sizeof(sd));
	/* sd[0] resident, sd[k] swapped to tier k */
	for (k = 0; k < nt; k++) {
		r = fill_seq(ctx, lay, &l, 5 * l.tokens_per_block + 3,
			     (uint32_t)(20 + k), &sd[k]);
		if (!r && k)
			r = kvl_seq_swap_out(sd[k].s, k);
		if (r)
			FAIL("fill and swap out to tier %d: %s", k,
			     strerror(-r));
	}
	epoch = kvl_epoch(ctx);
	touch(file);
	snprintf(go, sizeof(go), "%s.go", file);
	end = now_ms() + 60000;
	while (access(go, F_OK) && now_ms() < end)
		usleep(50000);
	if (access(go, F_OK))
		FAIL("no %s", go);
	for (k = 0; k < nt; k++) {
		kvl_seq_info(sd[k].s, &si);
		if (si.state != (k ? KVL_SEQ_SWAPPED : KVL_SEQ_RESIDENT) ||
		    (k && si.tier != (uint32_t)k) || si.len != sd[k].len)
			FAIL("sequence %d after the restart: state %u tier %u "
			     "len %u (had %u)", k, si.state, si.tier, si.len,
			     sd[k].len);
		r = same_kv(&sd[k]);	/* a swapped one comes back first */
		if (r)
			FAIL("sequence %d (tier %d) read back after the "
			     "restart: %s", k, k, strerror(-r));
		kvl_seq_info(sd[k].s, &si);
		if (si.state != KVL_SEQ_RESIDENT)
			FAIL("sequence %d not resident after a read", k);
	}
	if (kvl_epoch(ctx) != epoch)
		FAIL("data epoch %llu -> %llu",
		     (unsigned long long)epoch,
		     (unsigned long long)kvl_epoch(ctx));
	nt = ntiers_of(ctx, ti);
	for (k = 1; k < nt; k++)
		if (ti[k].held)
			FAIL("%u blocks still held in %s", ti[k].held,
			     ti[k].name);
	for (k = 0; k < KVL_MAX_TIERS; k++)
		if (sd[k].s)
			seqdata_free(&sd[k]);
	kvl_close(ctx);
	printf("kept: OK, %d sequences intact, epoch %llu\n", nt,
	       (unsigned long long)epoch);
	return 0;
}

/* Wait until tier's pool has lo..hi blocks used ("N" or "LO-HI"). */
static int cmd_wait_used(uint32_t tier, uint32_t want, uint32_t hi,
			 uint64_t ms)
{
	struct kvl_admin *adm;
	struct kvl_tier_stats ts[KVL_MAX_TIERS];
	uint64_t end = now_ms() + ms;
	int n = -1, r;

	while (now_ms() < end) {
		r = kvl_admin_open(sock_path, &adm);
		if (!r) {
			n = kvl_admin_tier_list(adm, ts, KVL_MAX_TIERS);
			kvl_admin_close(adm);
			if (n > (int)tier && ts[tier].pool.used >= want &&
			    ts[tier].pool.used <= hi)
				return 0;
		}
		usleep(20000);
	}
	if (n > (int)tier)
		FAIL("tier %u (%s): used %u, want %u to %u", tier,
		     ts[tier].pool.name, ts[tier].pool.used, want, hi);
	FAIL("tier %u: no answer (%d)", tier, n);
}

int main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 3) {
		fprintf(stderr, "usage: e2e-tiers CMD SOCK ... (see source)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	cmd = argv[1];
	sock_path = argv[2];
	if (!strcmp(cmd, "roundtrip"))
		return cmd_roundtrip(argc > 3 ? argv[3] : NULL);
	if (!strcmp(cmd, "quota") && argc == 7)
		return cmd_quota(argv[3], (uint32_t)atoi(argv[4]),
				 (uint32_t)atoi(argv[5]),
				 !strcmp(argv[6], "next"));
	if (!strcmp(cmd, "bad"))
		return cmd_bad();
	if (!strcmp(cmd, "ioerr") && argc == 4)
		return cmd_ioerr((uint32_t)atoi(argv[3]));
	if (!strcmp(cmd, "full") && argc == 5)
		return cmd_full((uint32_t)atoi(argv[3]),
				(uint32_t)atoi(argv[4]));
	if (!strcmp(cmd, "prefix"))
		return cmd_prefix();
	if (!strcmp(cmd, "churn") && argc == 4)
		return cmd_churn(argv[3]);
	if (!strcmp(cmd, "restart") && argc == 4)
		return cmd_restart(argv[3]);
	if (!strcmp(cmd, "kept") && argc == 4)
		return cmd_kept(argv[3]);
	if (!strcmp(cmd, "wait-used") && argc == 6) {
		const char *dash = strchr(argv[4], '-');
		uint32_t lo = (uint32_t)atoi(argv[4]);

		return cmd_wait_used((uint32_t)atoi(argv[3]), lo,
				     dash ? (uint32_t)atoi(dash + 1) : lo,
				     (uint64_t)atoll(argv[5]));
	}
	fprintf(stderr, "e2e-tiers: bad command\n");
	return 2;
}
