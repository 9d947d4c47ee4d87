// SPDX-License-Identifier: MIT
/*
 * e2e-iso - attacks of one tenant on another through kvpoold, each a
 * subcommand that exits 1 when the attack works (either ledger unless
 * said; the same program runs in the VM with the module):
 *
 *   e2e-iso swap-publish SOCK A B
 *        A queues swap jobs on a block behind a queue of other copies
 *        (one job copies the block down to the DRAM tier, one copies A's
 *        own pattern up into it), publishes the block to its prefix
 *        cache, drops its reference and evicts it; B leases a block
 *        (lowest free index first) and fills it.  A block a swap job has
 *        pinned must not change hands: the publish is refused (-EBUSY)
 *        while the jobs are queued, B reads exactly what it wrote and A's
 *        DRAM copy holds exactly A's bytes.  After the jobs, the same
 *        publish works.  Tier 1 needs 962 blocks, the top pool 963.
 *   e2e-iso retenant SOCK A B
 *        a client says HELLO as A, then attaches its ledger file to B
 *        (holding no block): MATCH, PUBLISH and EVICT act for B, never A
 *        (B's cache, B's counters), and the references it took while in B
 *        are dropped when it moves back to A.
 *   e2e-iso fakefd SOCK VICTIM ATTACKER      (module only)
 *        a client passes descriptors that are not /dev/kvpool at HELLO
 *        and TIER_ATTACH: a pipe, /dev/null, a regular file, a memfd,
 *        another /dev/kvpool-like character device (a CUSE device that
 *        answers KVPOOL_IOC_STATUS with the VICTIM's lease id; skipped
 *        without the cuse module): each is refused (-EBADF), and the
 *        victim's blocks stay unreadable.  A real /dev/kvpool file of the
 *        attacker is accepted.
 *
 * Layout: bf16, 2 layers, 2 kv heads, head_dim 64 (64 tokens per 64 KiB
 * block).  Exit 0 pass, 1 fail, 2 usage, 77 skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/fuse.h>

#include "kvl_internal.h"

#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define ROW		(KV_HEADS * HEAD_DIM)
#define MODEL		"e2e-iso@1"
#define REGION		(8U << 20)

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

static const char *sock_path;
static uint32_t tpb;

static struct kvl_ctx *open_ctx(const char *tenant)
{
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	int r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant;
	o.region_bytes = REGION;
	o.timeout_ns = 10000000000ULL;
	r = kvl_open(&o, &ctx);
	if (r)
		FAIL("kvl_open tenant %s: %s", tenant, strerror(-r));
	return ctx;
}

static int declare(struct kvl_ctx *ctx)
{
	struct kvl_layout l;
	int id;

	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 10000.0f;
	id = kvl_layout_declare_model(ctx, &l, MODEL);
	if (id < 0)
		FAIL("layout: %s", strerror(-id));
	tpb = l.tokens_per_block;
	return id;
}

/* Exact in bf16: multiples of 1/4 in [-30, 30]. */
static float val(uint32_t seed, uint32_t layer, uint32_t t, uint32_t i,
		 uint32_t kind)
{
	uint32_t x = seed * 131 + layer * 17 + t * 7 + i * 3 + kind * 5;

	return (float)((int)(x % 241) - 120) / 4.0f;
}

/* Fill every position of block b with the pattern of seed. */
static void write_block(struct kvl_ctx *ctx, int layout, uint32_t b,
			uint32_t seed)
{
	static float k[64 * ROW], v[64 * ROW];
	uint32_t blocks[64], slots[64], ly, t, i;
	int r;

	for (ly = 0; ly < LAYERS; ly++) {
		for (t = 0; t < tpb; t++) {
			blocks[t] = b;
			slots[t] = t;
			for (i = 0; i < ROW; i++) {
				k[t * ROW + i] = val(seed, ly, t, i, 0);
				v[t * ROW + i] = val(seed, ly, t, i, 1);
			}
		}
		r = kvl_write_kv(ctx, layout, ly, tpb, blocks, slots, k, v);
		if (r)
			FAIL("write block %u: %s", b, strerror(-r));
	}
}

/* The seed among @seeds whose pattern block b holds, or 0 (none). */
static uint32_t block_seed(struct kvl_ctx *ctx, int layout, uint32_t b,
			   const uint32_t *seeds, unsigned int nseeds)
{
	static float k[LAYERS][64 * ROW], v[LAYERS][64 * ROW];
	uint32_t blocks[64], slots[64], ly, t, i, s;
	int r;

	for (t = 0; t < tpb; t++) {
		blocks[t] = b;
		slots[t] = t;
	}
	for (ly = 0; ly < LAYERS; ly++) {
		r = kvl_read_kv(ctx, layout, ly, tpb, blocks, slots, k[ly],
				v[ly]);
		if (r)
			FAIL("read block %u: %s", b, strerror(-r));
	}
	for (s = 0; s < nseeds; s++) {
		bool same = true;

		for (ly = 0; ly < LAYERS && same; ly++)
			for (t = 0; t < tpb && same; t++)
				for (i = 0; i < ROW && same; i++)
					same = k[ly][t * ROW + i] ==
					       val(seeds[s], ly, t, i, 0) &&
					       v[ly][t * ROW + i] ==
					       val(seeds[s], ly, t, i, 1);
		if (same)
			return seeds[s];
	}
	return 0;
}

static uint64_t sum_of(struct kvl_ctx *ctx, uint32_t tier, uint32_t b)
{
	uint64_t s = 0;
	int r = kvl_block_sums(ctx, tier, &b, 1, &s);

	if (r)
		FAIL("block sum of %u in tier %u: %s", b, tier, strerror(-r));
	return s;
}

static void tokens_of(uint32_t seed, uint32_t *tok)
{
	uint32_t i;

	for (i = 0; i < tpb; i++)
		tok[i] = (seed * 7919 + i * 104729) % 32000;
}

/* PUBLISH of one block with its token ids: blocks added, or -errno. */
static int publish1(struct kvl_ctx *ctx, int layout, uint32_t b,
		    uint32_t seed)
{
	struct kvp_prefix_publish q;
	struct kvp_prefix_publish_reply rep;

	memset(&q, 0, sizeof(q));
	q.layout_id = (uint32_t)layout;
	q.nblocks = 1;
	q.ntok = tpb;
	q.off_tokens = 0;
	q.off_blocks = 1 << 20;
	q.off_result = 2 << 20;
	tokens_of(seed, (uint32_t *)ctx->region);
	memcpy(ctx->region + q.off_blocks, &b, 4);
	return kvl_rpc(ctx, KVP_OP_PREFIX_PUBLISH, &q, sizeof(q), &rep,
		       sizeof(rep), NULL);
}

static int unref1(struct kvl_ctx *ctx, uint32_t b)
{
	struct kvp_prefix_unref q;

	memset(&q, 0, sizeof(q));
	q.n = 1;
	q.off_blocks = 1 << 20;
	memcpy(ctx->region + q.off_blocks, &b, 4);
	return kvl_rpc(ctx, KVP_OP_PREFIX_UNREF, &q, sizeof(q), NULL, 0,
		       NULL);
}

/* MATCH of one block's tokens: blocks matched (*b the first), or -errno. */
static int match1(struct kvl_ctx *ctx, int layout, uint32_t seed,
		  uint32_t *b)
{
	struct kvp_prefix_match q;
	struct kvp_prefix_match_reply rep;
	int r;

	memset(&q, 0, sizeof(q));
	q.layout_id = (uint32_t)layout;
	q.ntok = tpb;
	q.off_tokens = 0;
	q.off_blocks = 1 << 20;
	q.max_blocks = 1;
	tokens_of(seed, (uint32_t *)ctx->region);
	r = kvl_rpc(ctx, KVP_OP_PREFIX_MATCH, &q, sizeof(q), &rep,
		    sizeof(rep), NULL);
	if (r > 0)
		memcpy(b, ctx->region + q.off_blocks, 4);
	return r;
}

static struct kvl_prefix_info prefix_stats(const char *tenant)
{
	struct kvl_prefix_info pi[64];
	struct kvl_admin *adm;
	int n, i, r;

	r = kvl_admin_open(sock_path, &adm);
	if (r)
		FAIL("admin open: %s", strerror(-r));
	n = kvl_admin_prefix_list(adm, NULL, pi, 64);
	kvl_admin_close(adm);
	if (n < 0)
		FAIL("prefix list: %s", strerror(-n));
	for (i = 0; i < n; i++)
		if (!strcmp(pi[i].tenant, tenant))
			return pi[i];
	memset(&pi[0], 0, sizeof(pi[0]));
	return pi[0];
}

/* ---- swap + publish + evict ---------------------------------------------- */

#define SEED_A	11	/* A's block before the jobs */
#define SEED_A2	12	/* A's pattern in DRAM, copied up by job 2 */
#define SEED_B	21	/* B's data */
#define NBLK	960	/* blocks per copy ahead of the attack's jobs */

static int cmd_swap_publish(const char *ta, const char *tb)
{
	static uint32_t bl[NBLK], db[NBLK + 2];
	struct kvl_ctx *a = open_ctx(ta), *b = open_ctx(tb);
	int la = declare(a), lb = declare(b);
	uint32_t njobs[] = { 8, 24, 60 }, attempt;
	const uint32_t seeds[] = { SEED_A, SEED_A2, SEED_B };
	int r;

	r = kvl_tier_join(a, 1);
	if (r)
		FAIL("%s joins tier 1: %s", ta, strerror(-r));
	for (attempt = 0; attempt < 3; attempt++) {
		uint64_t t1, t2, tk[64], sa, s2;
		uint32_t x, y, xb, d1, d2, j, got_b, got_x, got_d1;
		bool pending_pub, pending_b;
		int pub, st;

		CHECK(kvl_lease(a, 1, 0, 0, &x) == 1, "%s leases X", ta);
		CHECK(kvl_lease(a, 1, 0, 0, &y) == 1, "%s leases Y", ta);
		CHECK(kvl_lease(a, NBLK, 0, 0, bl) == NBLK, "%s leases %u",
		      ta, NBLK);
		CHECK(kvl_tier_lease(a, 1, NBLK + 2, 0, 0, db) == NBLK + 2,
		      "%s leases %u in DRAM", ta, NBLK + 2);
		d1 = db[NBLK];
		d2 = db[NBLK + 1];
		write_block(a, la, x, SEED_A);
		sa = sum_of(a, 0, x);
		write_block(a, la, y, SEED_A2);
		CHECK(kvl_swap(a, 0, &y, 1, &d2, 1, &t1) == 0 &&
		      kvl_swap_wait(a, t1, 0) == 0, "A's pattern into DRAM");
		s2 = sum_of(a, 1, d2);

		/* Copies ahead of the attack's jobs, in the same worker. */
		for (j = 0; j < njobs[attempt]; j++)
			CHECK(kvl_swap(a, 0, bl, 1, db, NBLK, &tk[j]) == 0,
			      "queue copy %u", j);
		CHECK(kvl_swap(a, 0, &x, 1, &d1, 1, &t1) == 0, "job 1: X down");
		CHECK(kvl_swap(a, 1, &d2, 0, &x, 1, &t2) == 0, "job 2: up into X");

		pub = publish1(a, la, x, 1000 + attempt);
		pending_pub = kvl_swap_wait(a, t1, 1) == -ETIMEDOUT;
		if (pub > 0) {
			/* The attack: no reference, evict, let B have X. */
			CHECK(unref1(a, x) == 1, "unref X");
			CHECK(kvl_prefix_evict(a, 1) == 1, "evict X");
		}
		CHECK(kvl_lease(b, 1, 0, 0, &xb) == 1, "%s leases a block", tb);
		write_block(b, lb, xb, SEED_B);
		pending_b = kvl_swap_wait(a, t1, 1) == -ETIMEDOUT;
		for (j = 0; j < njobs[attempt]; j++)
			CHECK(kvl_swap_wait(a, tk[j], 0) == 0, "copy %u", j);
		CHECK((st = kvl_swap_wait(a, t1, 0)) == 0, "job 1: %d", st);
		CHECK((st = kvl_swap_wait(a, t2, 0)) == 0, "job 2: %d", st);

		got_b = block_seed(b, lb, xb, seeds, 3);
		got_d1 = sum_of(a, 1, d1) == sa ? SEED_A : 0;
		printf("attempt %u: %u copies ahead; publish %d (%s), jobs "
		       "pending at the publish: %s, after %s's write: %s; %s "
		       "leased %u (%s's X %u); %s's block holds pattern %u "
		       "(its own: %u), %s's DRAM copy %s\n", attempt,
		       njobs[attempt], pub, pub < 0 ? strerror(-pub) : "ok",
		       pending_pub ? "yes" : "no", tb,
		       pending_b ? "yes" : "no", tb, xb, ta, x, tb, got_b,
		       SEED_B, ta, got_d1 ? "holds its own bytes" :
		       "holds other bytes");
		/* Whatever the timing, neither reads the other's bytes. */
		CHECK(got_b == SEED_B, "%s reads %s in its block %u, not what "
		      "it wrote: the job that copied %s's pattern up ran "
		      "into a block that had changed hands", tb,
		      got_b == SEED_A2 ? "A's pattern" : "other bytes", xb,
		      ta);
		CHECK(got_d1 == SEED_A, "%s's DRAM copy of X holds other "
		      "bytes (%s's?): the job copied a block that had "
		      "changed hands", ta, tb);
		if (pub < 0) {
			CHECK(pub == -EBUSY, "publish: %s", strerror(-pub));
			got_x = sum_of(a, 0, x) == s2;
			CHECK(got_x, "X holds A's pattern copied up by job 2");
			/* No pin left: the same publish works now. */
			pub = publish1(a, la, x, 1000 + attempt);
			CHECK(pub == 1, "publish after the jobs: %d", pub);
			CHECK(unref1(a, x) == 1 && kvl_prefix_evict(a, 1) == 1,
			      "unref and evict");
		} else {
			CHECK(!pending_pub, "a block a swap job had pinned was "
			      "published (moved to the cache lease)");
		}
		CHECK(kvl_release_all(a) >= 0 && kvl_release_all(b) >= 0,
		      "release all");
		CHECK(kvl_tier_release(a, 1, db, NBLK + 2) == NBLK + 2,
		      "release DRAM");
		if (pending_pub && pending_b) {
			printf("PASS: the publish of a block in use by swap "
			       "jobs was refused; neither tenant saw the "
			       "other's bytes\n");
			kvl_close(a);
			kvl_close(b);
			return 0;
		}
		printf("the jobs did not stay queued long enough: again "
		       "with more copies ahead\n");
	}
	FAIL("could not hold the swap worker behind other copies: the "
	     "attack's window was never open");
}

/* ---- a lease attached to another tenant --------------------------------- */

#define SEED_T	31	/* the tokens (and K/V) of the shared prefix */

static int cmd_retenant(const char *ta, const char *tb)
{
	struct kvl_ctx *p = open_ctx(ta), *x = open_ctx(ta);
	int lp = declare(p), lx = declare(x);
	struct kvl_prefix_info a0, a1, b0, b1;
	uint32_t blk, cb;
	int r;

	/* A's cache holds the prefix (P publishes and keeps nothing). */
	CHECK(kvl_lease(p, 1, 0, 0, &blk) == 1, "P leases");
	write_block(p, lp, blk, SEED_T);
	CHECK(publish1(p, lp, blk, SEED_T) == 1, "P publishes into %s", ta);
	CHECK(unref1(p, blk) == 1, "P unrefs");
	r = match1(x, lx, SEED_T, &cb);
	CHECK(r == 1 && cb == blk, "X (in %s) hits %s's cache: %d", ta, ta, r);
	CHECK(unref1(x, cb) == 1, "X unrefs");
	a0 = prefix_stats(ta);
	b0 = prefix_stats(tb);

	/* X moves its ledger file to B. */
	CHECK(kvl_release_all(x) >= 0, "X holds nothing");
	r = kvl_attach_tenant(x, NULL, tb);
	CHECK(r == 0, "X attaches to %s: %s", tb, strerror(-r));
	r = match1(x, lx, SEED_T, &cb);
	CHECK(r == 0, "X, now in %s, matched %s's cached block (%d): the "
	      "daemon still serves the tenant of HELLO", tb, ta, r);
	CHECK(kvl_lease(x, 1, 0, 0, &blk) == 1, "X leases");
	write_block(x, lx, blk, SEED_T);
	r = publish1(x, lx, blk, SEED_T);
	CHECK(r == 1, "X publishes into %s's cache: %d (%s)", tb, r,
	      r < 0 ? strerror(-r) : "ok");
	a1 = prefix_stats(ta);
	b1 = prefix_stats(tb);
	printf("%s: cached %llu -> %llu, hits %llu -> %llu; %s: cached "
	       "%llu -> %llu, misses %llu -> %llu\n", ta,
	       (unsigned long long)a0.cached, (unsigned long long)a1.cached,
	       (unsigned long long)a0.hits, (unsigned long long)a1.hits, tb,
	       (unsigned long long)b0.cached, (unsigned long long)b1.cached,
	       (unsigned long long)b0.misses, (unsigned long long)b1.misses);
	CHECK(a1.cached == a0.cached && a1.hits == a0.hits &&
	      a1.misses == a0.misses && a1.published == a0.published,
	      "%s's cache was used for a lease of %s", ta, tb);
	CHECK(b1.cached == b0.cached + 1 && b1.published == b0.published + 1 &&
	      b1.misses == b0.misses + 1, "%s's cache did not get the miss "
	      "and the block", tb);
	CHECK(kvl_prefix_evict(x, 1) == 0, "nothing of %s's to evict: X "
	      "still references its block", tb);

	/* Back to A: the references taken for B go. */
	CHECK(unref1(x, blk) == 1, "X unrefs");
	r = match1(x, lx, SEED_T, &cb);
	CHECK(r == 1 && cb == blk, "X hits %s's cache: %d", tb, r);
	r = kvl_attach_tenant(x, NULL, ta);
	CHECK(r == 0, "X attaches back to %s: %s", ta, strerror(-r));
	{
		uint32_t bl[64], sl[64], t;
		static float k[64 * ROW];

		for (t = 0; t < tpb; t++) {
			bl[t] = cb;
			sl[t] = t;
		}
		r = kvl_read_kv(x, lx, 0, tpb, bl, sl, k, NULL);
		CHECK(r == -EPERM, "X, back in %s, still reads %s's cached "
		      "block: %d", ta, tb, r);
	}
	r = match1(x, lx, SEED_T, &cb);
	CHECK(r == 1 && cb != blk, "X hits %s's own block again: %d", ta, r);
	printf("PASS: after TENANT_ATTACH the daemon acts for the new "
	       "tenant only\n");
	kvl_close(x);
	kvl_close(p);
	return 0;
}

/* ---- descriptors that are not /dev/kvpool ------------------------------- */

static int raw_connect(void)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		FAIL("connect %s: %s", sock_path, strerror(errno));
	return fd;
}

static uint8_t rbuf[KVP_MSG_MAX] __attribute__((aligned(16)));

/* One request with up to two descriptors: the reply's status. */
static int raw_op(int s, uint16_t op, const void *body, size_t blen,
		  int fd0, int fd1)
{
	static uint32_t id = 1;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	uint8_t msg[sizeof(struct kvp_hdr) + 512] __attribute__((aligned(16)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	struct kvp_reply *rep = (struct kvp_reply *)rbuf;
	struct iovec iov = { .iov_base = msg };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[2] = { fd0, fd1 }, nfd = (fd0 >= 0) + (fd1 >= 0);
	ssize_t n;

	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = ++id;
	memcpy(h + 1, body, blen);
	iov.iov_len = h->len;
	if (nfd) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(c), fd0 >= 0 ? fds : fds + 1,
		       (size_t)nfd * sizeof(int));
	}
	if (sendmsg(s, &mh, MSG_NOSIGNAL) < 0)
		FAIL("sendmsg: %s", strerror(errno));
	do {
		n = recv(s, rbuf, sizeof(rbuf), 0);
	} while (n > 0 && rep->hdr.op != (KVP_REPLY | op));
	if (n < (ssize_t)sizeof(*rep))
		FAIL("no reply to op %u", op);
	return rep->status;
}

static uint8_t *region_of(int *mfd)
{
	uint8_t *r;

	*mfd = memfd_create("e2e-iso", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*mfd < 0 || ftruncate(*mfd, 1 << 20) ||
	    fcntl(*mfd, F_ADD_SEALS, F_SEAL_SHRINK))
		FAIL("memfd");
	r = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, *mfd, 0);
	if (r == MAP_FAILED)
		FAIL("mmap");
	return r;
}

/* HELLO with ledger descriptor @lfd: status; *sock the connection. */
static int hello(int lfd, int *sock, uint8_t **region)
{
	struct kvp_hello h;
	int mfd, r;

	*sock = raw_connect();
	*region = region_of(&mfd);
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_LEDGER_FD | KVP_HELLO_REGION;
	h.region_bytes = 1 << 20;
	r = raw_op(*sock, KVP_OP_HELLO, &h, sizeof(h), lfd, mfd);
	close(mfd);
	return r;
}

/* BLOCK_SUM of block b in tier: 0 and *sum, or -errno. */
static int raw_sum(int s, uint8_t *region, uint32_t tier, uint32_t b,
		   uint64_t *sum)
{
	struct kvp_block_sum q;
	int r;

	memset(&q, 0, sizeof(q));
	q.tier = tier;
	q.n = 1;
	q.off_blocks = 0;
	q.off_sums = 4096;
	memcpy(region, &b, 4);
	r = raw_op(s, KVP_OP_BLOCK_SUM, &q, sizeof(q), -1, -1);
	if (!r)
		memcpy(sum, region + 4096, 8);
	return r;
}

/*
 * A CUSE character device, /dev/kvfake, that answers KVPOOL_IOC_STATUS
 * (a restricted ioctl: the kernel copies the struct in and out by the
 * size in the command) with fake->forged: what a FUSE file or any device
 * with an ioctl that answers could do.  Its server is a child process
 * (memory shared with it): a process that is its own CUSE server
 * deadlocks at exit, releasing the device before the server's file.
 */
struct fake {
	struct kvpool_status forged;
	unsigned long ioctls;
};
static struct fake *fake;

static void cuse_reply(int fd, uint64_t unique, int err, const void *a,
		       size_t alen, const void *b, size_t blen)
{
	struct fuse_out_header oh;
	struct iovec iov[3] = {
		{ &oh, sizeof(oh) }, { (void *)a, alen }, { (void *)b, blen },
	};

	oh.len = (uint32_t)(sizeof(oh) + alen + blen);
	oh.error = err;
	oh.unique = unique;
	if (writev(fd, iov, 3) < 0) {
		/* the request was interrupted: nothing to answer */
	}
}

static void cuse_serve(int fd)
{
	static uint8_t buf[1 << 17];

	for (;;) {
		struct fuse_in_header *ih = (void *)buf;
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(*ih))
			return;
		switch (ih->opcode) {
		case CUSE_INIT: {
			struct cuse_init_out o;
			static const char info[] = "DEVNAME=kvfake";

			memset(&o, 0, sizeof(o));
			o.major = FUSE_KERNEL_VERSION;
			o.minor = FUSE_KERNEL_MINOR_VERSION;
			o.max_read = 4096;
			o.max_write = 4096;
			cuse_reply(fd, ih->unique, 0, &o, sizeof(o), info,
				   sizeof(info));
			break;
		}
		case FUSE_OPEN: {
			struct fuse_open_out o;

			memset(&o, 0, sizeof(o));
			o.fh = 1;
			cuse_reply(fd, ih->unique, 0, &o, sizeof(o), NULL, 0);
			break;
		}
		case FUSE_IOCTL: {
			const struct fuse_ioctl_in *in = (const void *)(ih + 1);
			struct fuse_ioctl_out o;
			struct kvpool_status st;

			memset(&o, 0, sizeof(o));
			if (in->cmd != (uint32_t)KVPOOL_IOC_STATUS ||
			    in->out_size < sizeof(st)) {
				o.result = -ENOTTY;
				cuse_reply(fd, ih->unique, 0, &o, sizeof(o),
					   NULL, 0);
				break;
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			st = fake->forged;
			__atomic_add_fetch(&fake->ioctls, 1, __ATOMIC_SEQ_CST);
			cuse_reply(fd, ih->unique, 0, &o, sizeof(o), &st,
				   sizeof(st));
			break;
		}
		case FUSE_INTERRUPT:
			break;
		case FUSE_RELEASE: case FUSE_FLUSH:
			cuse_reply(fd, ih->unique, 0, NULL, 0, NULL, 0);
			break;
		default:
			cuse_reply(fd, ih->unique, -ENOSYS, NULL, 0, NULL, 0);
			break;
		}
	}
}

/*
 * Start the fake device (before anything else is open: the server
 * inherits no other descriptor): an open descriptor of it, or -1 (no
 * CUSE).  The server dies with this process.
 */
static int fake_device(void)
{
	pid_t parent = getpid(), pid;
	int cfd, fd = -1, i;

	fake = mmap(NULL, sizeof(*fake), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (fake == MAP_FAILED)
		FAIL("mmap");
	memset(fake, 0, sizeof(*fake));
	cfd = open("/dev/cuse", O_RDWR | O_CLOEXEC);
	if (cfd < 0) {
		printf("# no /dev/cuse (%s): the fake device case is "
		       "skipped\n", strerror(errno));
		return -1;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		FAIL("fork");
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0);
		cuse_serve(cfd);
		_exit(0);
	}
	close(cfd);
	for (i = 0; i < 100 && fd < 0; i++) {
		fd = open("/dev/kvfake", O_RDWR | O_CLOEXEC);
		if (fd < 0)
			usleep(50000);
	}
	if (fd < 0)
		FAIL("the CUSE device did not appear: %s", strerror(errno));
	return fd;
}

/* The fake device must really answer as the ledger would. */
static void fake_answers(int fd, const struct kvpool_status *want)
{
	struct kvpool_status st;
	int r;

	memset(&st, 0, sizeof(st));
	alarm(20);
	r = ioctl(fd, KVPOOL_IOC_STATUS, &st);
	alarm(0);
	CHECK(r == 0 && st.lease_id == want->lease_id &&
	      !strcmp(st.pool, want->pool),
	      "the fake device answers STATUS with lease %llu of %s (%d: "
	      "lease %llu of %s)", (unsigned long long)want->lease_id,
	      want->pool, r ? -errno : 0, (unsigned long long)st.lease_id,
	      st.pool);
}

struct bad_fd {
	const char *what;
	int fd;
};

static int cmd_fakefd(const char *victim, const char *attacker)
{
	/* First, while nothing else is open (its server inherits it all). */
	int fakefd = fake_device();
	struct kvl_ctx *v = open_ctx(victim);
	int lv = declare(v);
	struct kvpool_tenant_attach ta;
	struct kvp_tier_attach tq;
	struct bad_fd bad[6];
	uint64_t vsum, vdsum, sum;
	uint32_t vb, vd;
	char tmpl[] = "/tmp/e2e-iso.XXXXXX";
	int nbad = 0, broken = 0, pfd[2], i, r, s, real, real1;
	uint8_t *region;

	if (v->mode != KVL_MODE_MODULE) {
		printf("SKIP: the in-process ledger takes no descriptor\n");
		return 77;
	}
	/* The victim's data, on top and in DRAM. */
	CHECK(kvl_lease(v, 1, 0, 0, &vb) == 1, "victim leases");
	write_block(v, lv, vb, 41);
	vsum = sum_of(v, 0, vb);
	CHECK(kvl_tier_join(v, 1) == 0, "victim joins tier 1");
	CHECK(kvl_tier_lease(v, 1, 1, 0, 0, &vd) == 1, "victim leases DRAM");
	{
		uint64_t t;

		CHECK(kvl_swap(v, 0, &vb, 1, &vd, 1, &t) == 0 &&
		      kvl_swap_wait(v, t, 0) == 0, "victim swaps down");
	}
	vdsum = sum_of(v, 1, vd);

	if (pipe(pfd))
		FAIL("pipe");
	bad[nbad++] = (struct bad_fd){ "a pipe", pfd[0] };
	bad[nbad++] = (struct bad_fd){ "/dev/null",
				       open("/dev/null", O_RDWR | O_CLOEXEC) };
	bad[nbad++] = (struct bad_fd){ "a regular file", mkstemp(tmpl) };
	unlink(tmpl);
	bad[nbad++] = (struct bad_fd){ "a memfd",
				       memfd_create("x", MFD_CLOEXEC) };
	bad[nbad] = (struct bad_fd){ "a CUSE device answering STATUS with "
				     "the victim's lease", fakefd };
	if (bad[nbad].fd >= 0)
		nbad++;
	for (i = 0; i < nbad; i++)
		CHECK(bad[i].fd >= 0, "open %s", bad[i].what);

	/* HELLO: the fake device claims the victim's top lease. */
	if (nbad == 5) {
		struct kvpool_status *f = &fake->forged;

		memset(f, 0, sizeof(*f));
		memcpy(f->pool, v->pool, sizeof(f->pool));
		strncpy(f->tenant, victim, sizeof(f->tenant) - 1);
		f->lease_id = v->lease_id;
		f->capacity = v->capacity;
		f->block_bytes = v->block_bytes;
		f->state = KVPOOL_STATE_LIVE;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		fake_answers(bad[4].fd, f);
	}
	for (i = 0; i < nbad; i++) {
		printf("# HELLO with %s\n", bad[i].what);
		r = hello(bad[i].fd, &s, &region);
		printf("HELLO with %s: %d (%s)\n", bad[i].what, r,
		       r < 0 ? strerror(-r) : "accepted");
		if (r >= 0 && raw_sum(s, region, 0, vb, &sum) == 0 &&
		    sum == vsum)
			printf("BROKEN: HELLO with %s: the attacker read the "
			       "victim's block %u\n", bad[i].what, vb);
		if (r != -EBADF) {
			printf("BROKEN: HELLO with %s: %d, want -EBADF\n",
			       bad[i].what, r);
			broken++;
		}
		close(s);
		munmap(region, 1 << 20);
	}

	/* The attacker's own file is accepted; TIER_ATTACH is checked too. */
	real = open(v->device_path, O_RDWR | O_CLOEXEC);
	CHECK(real >= 0, "open %s", v->device_path);
	memset(&ta, 0, sizeof(ta));
	memcpy(ta.pool, v->pool, sizeof(ta.pool));
	strncpy(ta.tenant, attacker, sizeof(ta.tenant) - 1);
	CHECK(!ioctl(real, KVPOOL_IOC_TENANT_ATTACH, &ta), "attacker attaches "
	      "its file: %s", strerror(errno));
	r = hello(real, &s, &region);
	CHECK(r >= 0, "HELLO with a real /dev/kvpool file: %d", r);
	CHECK(raw_sum(s, region, 0, vb, &sum) == -EPERM,
	      "the victim's block is not the attacker's");
	if (nbad == 5) {
		struct kvpool_status *f = &fake->forged;

		memset(f, 0, sizeof(*f));
		memcpy(f->pool, v->tiers[1].name, sizeof(f->pool));
		strncpy(f->tenant, victim, sizeof(f->tenant) - 1);
		f->lease_id = v->tiers[1].lease_id;
		f->state = KVPOOL_STATE_LIVE;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		fake_answers(bad[4].fd, f);
	}
	memset(&tq, 0, sizeof(tq));
	tq.tier = 1;
	tq.flags = KVP_TIER_LEDGER_FD;
	for (i = 0; i < nbad; i++) {
		r = raw_op(s, KVP_OP_TIER_ATTACH, &tq, sizeof(tq), bad[i].fd,
			   -1);
		printf("TIER_ATTACH with %s: %d (%s)\n", bad[i].what, r,
		       r < 0 ? strerror(-r) : "accepted");
		if (r >= 0 && raw_sum(s, region, 1, vd, &sum) == 0 &&
		    sum == vdsum)
			printf("BROKEN: TIER_ATTACH with %s: the attacker read "
			       "the victim's DRAM block %u\n", bad[i].what, vd);
		if (r != -EBADF) {
			printf("BROKEN: TIER_ATTACH with %s: %d, want -EBADF\n",
			       bad[i].what, r);
			broken++;
		}
	}
	if (broken)
		FAIL("%d descriptors that are not /dev/kvpool were taken for "
		     "a ledger file", broken);
	if (nbad == 5)
		CHECK(fake->ioctls == 2, "the daemon asked the fake device "
		      "%lu times: it must not trust it at all",
		      fake->ioctls - 2);
	real1 = open(v->device_path, O_RDWR | O_CLOEXEC);
	memset(&ta, 0, sizeof(ta));
	memcpy(ta.pool, v->tiers[1].name, sizeof(ta.pool));
	strncpy(ta.tenant, attacker, sizeof(ta.tenant) - 1);
	CHECK(real1 >= 0 && !ioctl(real1, KVPOOL_IOC_TENANT_ATTACH, &ta),
	      "attacker's tier file");
	r = raw_op(s, KVP_OP_TIER_ATTACH, &tq, sizeof(tq), real1, -1);
	CHECK(r == 0, "TIER_ATTACH with a real /dev/kvpool file: %d", r);
	CHECK(raw_sum(s, region, 1, vd, &sum) == -EPERM,
	      "the victim's DRAM block is not the attacker's");
	close(real1);
	close(real);
	close(s);
	for (i = 0; i < nbad; i++)
		close(bad[i].fd);
	close(pfd[1]);
	CHECK(sum_of(v, 0, vb) == vsum && sum_of(v, 1, vd) == vdsum,
	      "the victim's blocks are as it left them");
	kvl_close(v);
	printf("PASS: only /dev/kvpool files are taken at HELLO and "
	       "TIER_ATTACH\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3)
		goto usage;
	sock_path = argv[2];
	if (!strcmp(argv[1], "swap-publish") && argc == 5)
		return cmd_swap_publish(argv[3], argv[4]);
	if (!strcmp(argv[1], "retenant") && argc == 5)
		return cmd_retenant(argv[3], argv[4]);
	if (!strcmp(argv[1], "fakefd") && argc == 5)
		return cmd_fakefd(argv[3], argv[4]);
usage:
	fprintf(stderr, "usage: e2e-iso swap-publish|retenant|fakefd SOCK "
		"TENANT TENANT\n");
	return 2;
}
