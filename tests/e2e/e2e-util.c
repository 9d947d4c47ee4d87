// SPDX-License-Identifier: MIT
/*
 * e2e-util - helpers and single-concern checks for the end-to-end tests,
 * speaking kvpoold's protocol directly (include/kvpool_proto.h) or through
 * libkvlease.
 *
 *   e2e-util status SOCK                 print the pool's figures
 *   e2e-util tenant SOCK NAME            print a tenant's figures
 *   e2e-util wait-used SOCK N MS         wait until the pool's used == N
 *   e2e-util wait-mapped SOCK BYTES MS   wait until mapped bytes == BYTES
 *   e2e-util hold SOCK TENANT N FILE     lease N blocks, write FILE, sleep
 *   e2e-util quota SOCK TENANT MAX       the tenant's max holds
 *   e2e-util nomem SOCK LIMIT            grows beyond --backing-limit LIMIT
 *        fail with -ENOMEM and the daemon keeps serving
 *   e2e-util reclaim SOCK GREEDY PROT    a waiter of PROT below its min makes
 *        the ledger ask GREEDY back (reclaim fd + target), GREEDY gives
 *   e2e-util seqs SOCK                   sequences: batches, fork sharing,
 *        copy-on-write, truncate, free, trim
 *   e2e-util bad SOCK CASE               one malformed request (CASE:
 *        not-held, outside-region, truncated, oversized, unknown-op,
 *        splice-not-held, compact-not-held, score-not-held,
 *        compact-unsorted, splice-reserved, rope-bad), then check that
 *        this connection and another client still work and that the
 *        other client's block is unchanged
 *   e2e-util devbuf-bad SOCK             device buffers (cuda backend):
 *        every refusal of DEVBUF_ADD/DEL and of an unknown buffer, then
 *        check that the daemon still serves
 * Exit 0 pass, 1 fail, 2 usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "kvlease.h"
#include "kvpool_proto.h"
#include "cuda_drv.h"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); return 1; } while (0)

static const char *sock_path;

/* ---- raw protocol ------------------------------------------------------ */

static int raw_connect(void)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -1;
	return fd;
}

static uint8_t rbuf[KVP_MSG_MAX] __attribute__((aligned(16)));

/* Send a whole message as is; return the reply status, body in rbuf. */
static int raw_xfer(int fd, const void *msg, size_t len, int sendfd,
		    uint32_t *req_id)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct kvp_reply *rep = (struct kvp_reply *)rbuf;
	ssize_t n;

	if (sendfd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &sendfd, sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
		return -1000 - errno;
	do {
		n = recv(fd, rbuf, sizeof(rbuf), 0);
	} while (n > 0 && rep->hdr.op == KVP_EV_RECLAIM);
	if (n < (ssize_t)sizeof(*rep))
		return -2000;
	if (req_id)
		*req_id = rep->hdr.req_id;
	return rep->status;
}

static int raw_op(int fd, uint16_t op, const void *body, size_t blen,
		  int sendfd)
{
	static uint32_t id = 100;
	uint8_t msg[sizeof(struct kvp_hdr) + 1024] __attribute__((aligned(16)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	uint32_t got;
	int r;

	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = ++id;
	if (blen)
		memcpy(h + 1, body, blen);
	r = raw_xfer(fd, msg, h->len, sendfd, &got);
	if (r > -1000 && got != id)
		return -3000;
	return r;
}

#define REGION (1 << 20)

static int raw_session(int *fdp, uint8_t **region)
{
	struct kvp_hello h;
	int fd = raw_connect(), mfd, r;

	if (fd < 0)
		return -1;
	mfd = memfd_create("e2e", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || ftruncate(mfd, REGION) ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK))
		return -1;
	*region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
		       0);
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_REGION;
	h.region_bytes = REGION;
	r = raw_op(fd, KVP_OP_HELLO, &h, sizeof(h), mfd);
	close(mfd);
	*fdp = fd;
	return r;
}

static int pool_rec(struct kvp_pool_rec *pr)
{
	int fd = raw_connect(), r;

	if (fd < 0)
		return -ECONNREFUSED;
	r = raw_op(fd, KVP_OP_POOL_STATUS, NULL, 0, -1);
	if (r >= 0)
		memcpy(pr, rbuf + sizeof(struct kvp_reply), sizeof(*pr));
	close(fd);
	return r;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- subcommands ---------------------------------------------------------- */

static int cmd_status(void)
{
	struct kvp_pool_rec pr;
	int r = pool_rec(&pr);

	if (r < 0)
		FAIL("pool status: %d", r);
	printf("pool=%s backend=%s used=%u backed=%u capacity=%u leases=%u "
	       "mapped_bytes=%llu epoch=%llu\n", pr.name, pr.backend, pr.used,
	       pr.backed, pr.capacity, pr.leases,
	       (unsigned long long)pr.mapped_bytes,
	       (unsigned long long)pr.epoch);
	return 0;
}

static int cmd_tenant(const char *name)
{
	struct kvp_list q;
	struct kvp_list_reply *lr;
	struct kvp_tenant_rec *t;
	int fd = raw_connect(), r;
	uint32_t i;

	if (fd < 0)
		FAIL("connect");
	memset(&q, 0, sizeof(q));
	r = raw_op(fd, KVP_OP_TENANT_LIST, &q, sizeof(q), -1);
	close(fd);
	if (r < 0)
		FAIL("tenant list: %d", r);
	lr = (void *)(rbuf + sizeof(struct kvp_reply));
	t = (void *)(lr + 1);
	for (i = 0; i < lr->count; i++)
		if (!strcmp(t[i].name, name)) {
			printf("tenant=%s current=%u peak=%u max=%u min=%u "
			       "leases=%u ev_max=%llu\n", t[i].name,
			       t[i].current, t[i].peak, t[i].max, t[i].min,
			       t[i].leases, (unsigned long long)t[i].ev_max);
			return 0;
		}
	FAIL("no tenant %s", name);
}

static int cmd_wait(int mapped, uint64_t want, uint64_t ms)
{
	uint64_t end = now_ms() + ms;
	struct kvp_pool_rec pr;

	while (now_ms() < end) {
		if (pool_rec(&pr) >= 0 &&
		    (mapped ? pr.mapped_bytes : pr.used) == want)
			return 0;
		usleep(20000);
	}
	if (pool_rec(&pr) < 0)
		FAIL("pool status");
	FAIL("waited %llu ms for %s == %llu, have %llu",
	     (unsigned long long)ms, mapped ? "mapped_bytes" : "used",
	     (unsigned long long)want,
	     (unsigned long long)(mapped ? pr.mapped_bytes : pr.used));
}

static int open_ctx(const char *tenant, struct kvl_ctx **ctx)
{
	struct kvl_opts o;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant && tenant[0] ? tenant : NULL;
	o.region_bytes = 1 << 20;
	return kvl_open(&o, ctx);
}

static int cmd_hold(const char *tenant, uint32_t n, const char *file)
{
	struct kvl_ctx *ctx;
	uint32_t *b = calloc(n, 4);
	FILE *f;
	int r = open_ctx(tenant, &ctx);

	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	r = kvl_lease(ctx, n, 0, 5000000000ULL, b);
	if (r != (int)n)
		FAIL("lease %u: %d", n, r);
	f = fopen(file, "w");
	if (!f)
		FAIL("%s", file);
	fprintf(f, "%u\n", n);
	fclose(f);
	for (;;)
		pause();
}

static int cmd_quota(const char *tenant, uint32_t max)
{
	struct kvl_ctx *ctx, *ctx2;
	struct kvl_status st;
	uint32_t *b = calloc(max + 8, 4);
	int r = open_ctx(tenant, &ctx);

	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	r = kvl_lease(ctx, max + 1, 0, 1000000000ULL, b);
	if (r != -EDQUOT)
		FAIL("lease max+1: want -EDQUOT, got %d", r);
	r = kvl_lease(ctx, max, 0, 1000000000ULL, b);
	if (r != (int)max)
		FAIL("lease max: %d", r);
	r = kvl_lease(ctx, 1, KVL_LEASE_NONBLOCK, 0, b + max);
	if (r != -EDQUOT)
		FAIL("lease 1 over max: want -EDQUOT, got %d", r);
	/* A second client of the same tenant shares its max. */
	r = open_ctx(tenant, &ctx2);
	if (r)
		FAIL("kvl_open 2: %s", strerror(-r));
	r = kvl_lease(ctx2, 1, 0, 1000000000ULL, b + max);
	if (r != -EDQUOT)
		FAIL("second client over max: want -EDQUOT, got %d", r);
	r = kvl_status(ctx, &st);
	if (r || st.tenant_current != max || st.tenant_max != max ||
	    st.held != max)
		FAIL("status: current %u max %u held %u", st.tenant_current,
		     st.tenant_max, st.held);
	/* Releasing makes room again; partial grants stop at max. */
	r = kvl_release(ctx, b, 2);
	if (r != 2)
		FAIL("release 2: %d", r);
	r = kvl_lease(ctx2, 5, KVL_LEASE_PARTIAL, 1000000000ULL, b + max);
	if (r != 2)
		FAIL("partial lease at max: want 2, got %d", r);
	/* Releasing a block we do not hold changes nothing. */
	r = kvl_release(ctx, b + max, 1);
	if (r != -EINVAL)
		FAIL("release of another client's block: want -EINVAL, got %d",
		     r);
	free(b);
	printf("quota: tenant %s max %u held through kvpoold: OK\n", tenant,
	       max);
	kvl_close(ctx2);
	kvl_close(ctx);
	return 0;
}

static int cmd_nomem(uint32_t limit)
{
	struct kvl_ctx *ctx;
	uint32_t *b = calloc(limit + 64, 4);
	int r = open_ctx(NULL, &ctx);

	if (r)
		FAIL("kvl_open: %s", strerror(-r));
	r = kvl_lease(ctx, limit + 64, 0, 5000000000ULL, b);
	if (r != -ENOMEM)
		FAIL("lease beyond the backing limit: want -ENOMEM, got %d", r);
	r = kvl_lease(ctx, limit, 0, 5000000000ULL, b);
	if (r != (int)limit)
		FAIL("lease within the limit after a failed grow: %d", r);
	r = kvl_release_all(ctx);
	if (r != (int)limit)
		FAIL("release_all: %d", r);
	printf("grow beyond %u blocks: -ENOMEM; within: OK\n", limit);
	free(b);
	kvl_close(ctx);
	return 0;
}

static int set_min(const char *tenant, uint32_t min)
{
	struct kvp_tenant t;
	int fd = raw_connect(), r;

	memset(&t, 0, sizeof(t));
	snprintf(t.name, sizeof(t.name), "%s", tenant);
	t.max = t.uid = t.gid = KVP_KEEP;
	t.min = min;
	r = raw_op(fd, KVP_OP_TENANT_SET, &t, sizeof(t), -1);
	close(fd);
	return r;
}

static int cmd_reclaim(const char *greedy, const char *prot)
{
	struct kvl_ctx *g;
	struct kvl_status st;
	uint32_t *b, target = 0, want = 8, n;
	struct pollfd pf;
	short ev;
	pid_t child;
	int r, status, i;

	r = open_ctx(greedy, &g);
	if (r)
		FAIL("kvl_open %s: %s", greedy, strerror(-r));
	r = kvl_status(g, &st);
	if (r)
		FAIL("status: %d", r);
	n = st.capacity;
	b = calloc(n, 4);
	r = kvl_lease(g, n, 0, 5000000000ULL, b);
	if (r != (int)n)
		FAIL("%s leases the whole pool (%u): %d", greedy, n, r);
	r = set_min(prot, n / 2);
	if (r)
		FAIL("tenant set %s min: %d", prot, r);
	child = fork();
	if (child == 0) {
		struct kvl_ctx *p;
		uint32_t pb[8];

		if (open_ctx(prot, &p))
			_exit(3);
		r = kvl_lease(p, want, 0, 10000000000ULL, pb);
		_exit(r == (int)want ? 0 : 4);
	}
	r = kvl_reclaim_fd(g, &ev);
	if (r < 0)
		FAIL("reclaim fd: %d", r);
	pf.fd = r;
	pf.events = ev;
	for (i = 0; i < 50 && !target; i++) {
		pf.revents = 0;
		poll(&pf, 1, 100);
		r = kvl_reclaim_target(g, &target);
		if (r)
			FAIL("reclaim target: %d", r);
	}
	if (!target || !(pf.revents & ev))
		FAIL("no reclaim request reached %s (target %u, revents %#x)",
		     greedy, target, pf.revents);
	printf("%s asked to give back %u blocks\n", greedy, target);
	r = kvl_release(g, b + n - target, target);
	if (r != (int)target)
		FAIL("release %u: %d", target, r);
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		FAIL("the protected tenant did not get its blocks (%#x)",
		     status);
	r = kvl_reclaim_target(g, &target);
	if (r || target)
		FAIL("reclaim target not cleared: %d %u", r, target);
	printf("reclaim: %s below its min got %u blocks from %s: OK\n", prot,
	       want, greedy);
	free(b);
	kvl_close(g);
	return 0;
}

#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

static int cmd_seqs(void)
{
	struct kvl_ctx *ctx;
	struct kvl_layout l = { .layers = 1, .kv_heads = 1, .head_dim = 32,
				.dtype = KVL_DTYPE_BF16 };
	struct kvl_seq *a, *b;
	struct kvl_status st;
	const uint32_t *ta, *tb;
	uint32_t na, nb, tpb, len, a0;
	float k[32], v[32], k2[32];
	int lay, r, i;

	CHECK(!open_ctx(NULL, &ctx), "open");
	lay = kvl_layout_declare(ctx, &l);
	CHECK(lay >= 0, "layout %d", lay);
	tpb = l.tokens_per_block;
	len = 2 * tpb + tpb / 2;	/* two full blocks and a half */
	CHECK(!kvl_seq_create(ctx, lay, &a), "create");
	r = kvl_seq_append(a, len);
	CHECK(r == (int)len, "append %d", r);
	kvl_seq_block_table(a, &ta, &na);
	CHECK(na == 3, "3 blocks, have %u", na);
	CHECK(!kvl_status(ctx, &st), "status");
	/* one batch of 16 leased, 3 in use, the rest cached */
	CHECK(st.held == 16 && st.cached == 13, "held %u cached %u", st.held,
	      st.cached);
	for (i = 0; i < 32; i++) {
		k[i] = (float)i / 32.0f;
		v[i] = 1.0f;
	}
	CHECK(!kvl_seq_write_kv(a, 0, 0, 1, k, v), "write a");
	a0 = ta[0];

	CHECK(!kvl_seq_fork(a, &b), "fork");
	kvl_seq_block_table(b, &tb, &nb);
	CHECK(kvl_seq_len(b) == len && nb == 3, "child len %u blocks %u",
	      kvl_seq_len(b), nb);
	CHECK(tb[0] == ta[0] && tb[1] == ta[1], "full blocks not shared");
	CHECK(tb[2] != ta[2], "partial block shared");
	/* copy-on-write: the child's write leaves the parent's block */
	for (i = 0; i < 32; i++)
		k[i] = -k[i];
	CHECK(!kvl_seq_write_kv(b, 0, 0, 1, k, v), "write b");
	kvl_seq_block_table(b, &tb, &nb);
	kvl_seq_block_table(a, &ta, &na);
	CHECK(tb[0] != a0 && ta[0] == a0, "no copy on write (%u %u %u)",
	      tb[0], ta[0], a0);
	CHECK(tb[1] == ta[1], "untouched block no longer shared");
	CHECK(!kvl_seq_read_kv(a, 0, 0, 1, k2, NULL), "read a");
	CHECK(k2[5] > 0, "parent's token changed: %g", k2[5]);
	CHECK(!kvl_seq_read_kv(b, 0, 0, 1, k2, NULL), "read b");
	CHECK(k2[5] < 0, "child's token not written: %g", k2[5]);
	/* the copy of the partial block has the parent's data */
	CHECK(!kvl_seq_read_kv(b, 0, 2 * tpb, 1, k2, NULL), "read b tail");

	CHECK(!kvl_seq_truncate(b, 10), "truncate");
	kvl_seq_block_table(b, &tb, &nb);
	CHECK(nb == 1 && kvl_seq_len(b) == 10, "after truncate %u blocks",
	      nb);
	CHECK(kvl_seq_truncate(b, 11) == -EINVAL, "truncate up accepted");
	kvl_seq_free(b);
	kvl_seq_free(a);
	CHECK(!kvl_status(ctx, &st), "status");
	CHECK(st.held == st.cached, "held %u, cached %u after free", st.held,
	      st.cached);
	r = kvl_trim(ctx);
	CHECK(r == (int)st.cached, "trim %d of %u", r, st.cached);
	CHECK(!kvl_status(ctx, &st) && st.held == 0, "held %u after trim",
	      st.held);
	printf("sequences: batches, fork sharing, copy-on-write, truncate, "
	       "free, trim: OK\n");
	kvl_close(ctx);
	return 0;
}

/* A client that does real work: lease, write, decode, read back. */
static int good_client(void)
{
	struct kvl_ctx *ctx;
	struct kvl_layout l = { .layers = 1, .kv_heads = 1, .head_dim = 32,
				.dtype = KVL_DTYPE_BF16 };
	struct kvl_seq *s;
	float k[4 * 32], v[4 * 32], k2[4 * 32], q[32], out[32];
	int r, lay, i;

	r = open_ctx(NULL, &ctx);
	if (r)
		FAIL("good client open: %s", strerror(-r));
	lay = kvl_layout_declare(ctx, &l);
	if (lay < 0)
		FAIL("good client layout: %d", lay);
	for (i = 0; i < 4 * 32; i++) {
		k[i] = (float)i / 128.0f;
		v[i] = 1.0f;
	}
	for (i = 0; i < 32; i++)
		q[i] = 0.5f;
	r = kvl_seq_create(ctx, lay, &s);
	if (!r)
		r = kvl_seq_append(s, 4) == 4 ? 0 : -EIO;
	if (!r)
		r = kvl_seq_write_kv(s, 0, 0, 4, k, v);
	if (!r)
		r = kvl_seq_read_kv(s, 0, 0, 4, k2, NULL);
	if (!r)
		r = kvl_seq_decode(&s, 1, 0, 1, q, 0.0f, out);
	if (r)
		FAIL("good client: %s", strerror(-r));
	for (i = 0; i < 4 * 32; i++)
		if (fabsf(k2[i] - k[i]) > 0.01f)
			FAIL("good client read back k[%d] %g != %g", i, k2[i],
			     k[i]);
	/* every V is 1: attention must give 1 */
	for (i = 0; i < 32; i++)
		if (fabsf(out[i] - 1.0f) > 1e-3f)
			FAIL("good client decode out[%d] = %g", i, out[i]);
	kvl_close(ctx);
	return 0;
}

/* A raw client's own block (in-process ledger: LEASE). */
static int raw_lease1(int fd, uint32_t *b)
{
	struct kvp_lease lq = { .count = 1 };
	int r = raw_op(fd, KVP_OP_LEASE, &lq, sizeof(lq), -1);

	if (r != 1)
		return r < 0 ? r : -EIO;
	memcpy(b, rbuf + sizeof(struct kvp_reply), 4);
	return 0;
}

static int cmd_bad(const char *what)
{
	struct kvl_ctx *owner;
	struct kvl_layout ol = { .layers = 1, .kv_heads = 1, .head_dim = 32,
				 .dtype = KVL_DTYPE_BF16 };
	uint32_t held[2], slot0 = 0, mine;
	float ok[32], ov[32], back_k[32], back_v[32];
	uint8_t *region;
	int fd, r, want, olay, i;
	uint32_t got_id = 1;

	/* Another client holds two blocks with known contents. */
	r = open_ctx(NULL, &owner);
	if (r)
		FAIL("owner open: %s", strerror(-r));
	r = kvl_lease(owner, 2, 0, 1000000000ULL, held);
	if (r != 2)
		FAIL("owner lease: %d", r);
	olay = kvl_layout_declare(owner, &ol);
	for (i = 0; i < 32; i++) {
		ok[i] = (float)i / 8.0f;
		ov[i] = (float)(31 - i) / 4.0f;
	}
	if (olay < 0 || kvl_write_kv(owner, olay, 0, 1, held, &slot0, ok, ov))
		FAIL("owner write");

	r = raw_session(&fd, &region);
	if (r < 0)
		FAIL("hello: %d", r);
	{
		struct kvp_layout l = { .layers = 1, .kv_heads = 1,
					.head_dim = 32, .dtype = 1 };
		r = raw_op(fd, KVP_OP_LAYOUT, &l, sizeof(l), -1);
		if (r < 0)
			FAIL("layout: %d", r);
	}

	if (!strcmp(what, "not-held")) {
		struct kvp_kv q = { .layout_id = 0, .layer = 0, .ntok = 1,
				    .off_blocks = 0, .off_slots = 64,
				    .off_k = 128, .off_v = 1024 };

		memcpy(region, &held[0], 4);	/* the other client's block */
		memset(region + 64, 0, 4);
		want = -EPERM;
		r = raw_op(fd, KVP_OP_WRITE_KV, &q, sizeof(q), -1);
	} else if (!strcmp(what, "outside-region")) {
		struct kvp_lease lq = { .count = 1 };
		struct kvp_kv q = { .layout_id = 0, .layer = 0, .ntok = 1,
				    .off_blocks = 0, .off_slots = 64,
				    .off_k = REGION - 64, .off_v = 1024 };

		r = raw_op(fd, KVP_OP_LEASE, &lq, sizeof(lq), -1);
		if (r != 1)
			FAIL("lease: %d", r);
		memcpy(region, rbuf + sizeof(struct kvp_reply), 4);
		memset(region + 64, 0, 4);
		want = -EFAULT;	/* k: 128 bytes from REGION - 64 */
		r = raw_op(fd, KVP_OP_WRITE_KV, &q, sizeof(q), -1);
	} else if (!strcmp(what, "truncated")) {
		uint8_t msg[sizeof(struct kvp_hdr) + 8] __attribute__((aligned(16)));
		struct kvp_hdr *h = (struct kvp_hdr *)msg;

		/* a header shorter than itself: no req_id to echo */
		r = raw_xfer(fd, "KVP1", 4, -1, &got_id);
		if (r != -EBADMSG || got_id != 0)
			FAIL("4-byte record: status %d req_id %u", r, got_id);
		/* a WRITE_KV record cut short */
		memset(msg, 0, sizeof(msg));
		h->magic = KVP_MAGIC;
		h->op = KVP_OP_WRITE_KV;
		h->len = sizeof(msg);
		h->req_id = 7;
		want = -EBADMSG;
		r = raw_xfer(fd, msg, sizeof(msg), -1, &got_id);
		if (got_id != 7)
			FAIL("req_id %u", got_id);
	} else if (!strcmp(what, "oversized")) {
		size_t len = KVP_MSG_MAX + 4096;
		uint8_t *msg = calloc(1, len);
		struct kvp_hdr *h = (struct kvp_hdr *)msg;
		int sz = (int)len * 2;

		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		h->magic = KVP_MAGIC;
		h->op = KVP_OP_RELEASE;
		h->len = (uint32_t)len;
		h->req_id = 9;
		want = -EMSGSIZE;
		r = raw_xfer(fd, msg, len, -1, &got_id);
		free(msg);
	} else if (!strcmp(what, "unknown-op")) {
		uint64_t body = 0;

		want = -EOPNOTSUPP;
		r = raw_op(fd, 999, &body, sizeof(body), -1);
	} else if (!strcmp(what, "splice-not-held")) {
		/* 600 slots of 512 per block: the table's second entry (the
		 * other client's block) is used */
		struct kvp_splice q = { .layout_id = 0, .nblocks = 2,
					.len = 600, .at = 0, .ndel = 1,
					.delta = -1, .off_table = 0 };

		if (raw_lease1(fd, &mine))
			FAIL("lease");
		memcpy(region, &mine, 4);
		memcpy(region + 4, &held[0], 4);
		want = -EPERM;
		r = raw_op(fd, KVP_OP_SPLICE, &q, sizeof(q), -1);
	} else if (!strcmp(what, "compact-not-held")) {
		uint32_t keep[3] = { 0, 2, 4 };
		struct kvp_compact q = { .layout_id = 0, .nblocks = 1,
					 .len = 10, .nkeep = 3, .off_table = 0,
					 .off_keep = 64 };

		memcpy(region, &held[0], 4);
		memcpy(region + 64, keep, sizeof(keep));
		want = -EPERM;
		r = raw_op(fd, KVP_OP_COMPACT, &q, sizeof(q), -1);
	} else if (!strcmp(what, "score-not-held")) {
		struct kvp_score q = { .layout_id = 0, .layer = 0, .q_heads = 1,
				       .n_q = 1, .len = 10, .nblocks = 1,
				       .off_q = 128, .off_table = 0,
				       .off_out = 512 };

		memcpy(region, &held[0], 4);
		memset(region + 128, 0, 128);
		want = -EPERM;
		r = raw_op(fd, KVP_OP_SCORE, &q, sizeof(q), -1);
	} else if (!strcmp(what, "compact-unsorted")) {
		uint32_t keep[2] = { 3, 2 };
		struct kvp_compact q = { .layout_id = 0, .nblocks = 1,
					 .len = 10, .nkeep = 2, .off_table = 0,
					 .off_keep = 64 };

		if (raw_lease1(fd, &mine))
			FAIL("lease");
		memcpy(region, &mine, 4);
		memcpy(region + 64, keep, sizeof(keep));
		want = -EINVAL;
		r = raw_op(fd, KVP_OP_COMPACT, &q, sizeof(q), -1);
	} else if (!strcmp(what, "splice-reserved")) {
		struct kvp_splice q = { .layout_id = 0, .nblocks = 1,
					.len = 10, .at = 0, .ndel = 1,
					.off_table = 0 };

		if (raw_lease1(fd, &mine))
			FAIL("lease");
		memcpy(region, &mine, 4);
		q.reserved[1] = 1;
		want = -EINVAL;
		r = raw_op(fd, KVP_OP_SPLICE, &q, sizeof(q), -1);
	} else if (!strcmp(what, "rope-bad")) {
		struct kvp_layout_rope q = { .layout_id = 0,
					     .style = KVP_ROPE_NEOX,
					     .nfreq = 5 };

		want = -EINVAL;	/* 5 frequencies for 32 dims */
		r = raw_op(fd, KVP_OP_LAYOUT_ROPE, &q, sizeof(q), -1);
	} else {
		fprintf(stderr, "unknown case %s\n", what);
		return 2;
	}
	if (r != want)
		FAIL("%s: want %d (%s), got %d", what, want, strerror(-want),
		     r);
	/* This connection still works. */
	r = raw_op(fd, KVP_OP_STATUS, NULL, 0, -1);
	if (r < 0)
		FAIL("status after %s: %d", what, r);
	/* The other client's blocks are untouched and still its own. */
	if (kvl_read_kv(owner, olay, 0, 1, held, &slot0, back_k, back_v) ||
	    memcmp(back_k, ok, sizeof(ok)) || memcmp(back_v, ov, sizeof(ov)))
		FAIL("the other client's block changed after %s", what);
	if (kvl_release(owner, held, 2) != 2)
		FAIL("owner release after %s", what);
	/* And a new client does real work. */
	if (good_client())
		return 1;
	printf("bad request %s: error %d (%s), daemon still serving: OK\n",
	       what, want, strerror(-want));
	close(fd);
	kvl_close(owner);
	return 0;
}

/* an exportable allocation of bytes on device 0, exported: its fd */
static int export_alloc(struct cuda_drv *drv, size_t bytes,
			CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;
	int fd = -1;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	if (drv->cuMemCreate(h, bytes, &prop, 0) ||
	    drv->cuMemExportToShareableHandle(&fd, *h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
		return -1;
	return fd;
}

static int devbuf_add(int fd, uint64_t bytes, int sendfd, uint32_t flags)
{
	struct kvp_devbuf q;

	memset(&q, 0, sizeof(q));
	q.bytes = bytes;
	q.flags = flags;
	return raw_op(fd, KVP_OP_DEVBUF_ADD, &q, sizeof(q), sendfd);
}

static int cmd_devbuf_bad(void)
{
	struct cuda_drv drv;
	CUmemGenericAllocationHandle h;
	struct kvp_devbuf_del del;
	struct kvp_attn_dev ad;
	uint8_t *region;
	int fd, x, nul, r, i;

	if (cuda_drv_open(&drv) || drv.cuInit(0)) {
		printf("no CUDA driver\n");
		return 77;
	}
	x = export_alloc(&drv, 2 << 20, &h);
	nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (x < 0 || nul < 0)
		FAIL("export");
	/* before HELLO */
	fd = raw_connect();
	if ((r = devbuf_add(fd, 2 << 20, x, 0)) != -ENOTCONN)
		FAIL("before HELLO: %d", r);
	close(fd);
	if (raw_session(&fd, &region))
		FAIL("session");
	if ((r = devbuf_add(fd, 2 << 20, -1, 0)) != -EBADF)
		FAIL("no descriptor: %d", r);
	if ((r = devbuf_add(fd, 2 << 20, nul, 0)) != -EBADF)
		FAIL("/dev/null: %d", r);
	if ((r = devbuf_add(fd, 1 << 20, x, 0)) != -EINVAL)
		FAIL("size not a multiple of the granularity: %d", r);
	if ((r = devbuf_add(fd, 4 << 20, x, 0)) != -EINVAL)
		FAIL("size beyond the allocation: %d", r);
	if ((r = devbuf_add(fd, 0, x, 0)) != -EINVAL)
		FAIL("size 0: %d", r);
	if ((r = devbuf_add(fd, 2 << 20, x, 1)) != -EINVAL)
		FAIL("flags: %d", r);
	if ((r = raw_op(fd, KVP_OP_DEVBUF_ADD, &del, sizeof(del), x)) !=
	    -EBADMSG)
		FAIL("truncated: %d", r);
	memset(&ad, 0, sizeof(ad));
	ad.batch = 1;
	ad.q_heads = 1;
	ad.max_blocks_per_seq = 1;
	ad.buf_id = 3;
	if ((r = raw_op(fd, KVP_OP_ATTN_DEV, &ad, sizeof(ad), -1)) != -EINVAL)
		FAIL("attention without a layout: %d", r);
	{
		struct kvp_layout lq = { .layers = 1, .kv_heads = 1,
					 .head_dim = 64, .dtype = 1 };

		if ((r = raw_op(fd, KVP_OP_LAYOUT, &lq, sizeof(lq), -1)) < 0)
			FAIL("layout: %d", r);
	}
	if ((r = raw_op(fd, KVP_OP_ATTN_DEV, &ad, sizeof(ad), -1)) != -ENOENT)
		FAIL("attention on an unknown buffer: %d", r);
	for (i = 0; i < KVP_MAX_DEVBUFS; i++) {
		const struct kvp_devbuf_reply *rep =
			(const void *)(rbuf + sizeof(struct kvp_reply));

		if ((r = devbuf_add(fd, 2 << 20, x, 0)) != 0 ||
		    rep->buf_id != (uint32_t)i || rep->bytes != 2 << 20)
			FAIL("buffer %d: %d", i, r);
	}
	if ((r = devbuf_add(fd, 2 << 20, x, 0)) != -ENOSPC)
		FAIL("%d buffers: %d", KVP_MAX_DEVBUFS + 1, r);
	memset(&del, 0, sizeof(del));
	del.buf_id = KVP_MAX_DEVBUFS;
	if ((r = raw_op(fd, KVP_OP_DEVBUF_DEL, &del, sizeof(del), -1)) !=
	    -ENOENT)
		FAIL("delete unknown: %d", r);
	del.buf_id = 3;
	if ((r = raw_op(fd, KVP_OP_DEVBUF_DEL, &del, sizeof(del), -1)) != 0)
		FAIL("delete: %d", r);
	if ((r = raw_op(fd, KVP_OP_DEVBUF_DEL, &del, sizeof(del), -1)) !=
	    -ENOENT)
		FAIL("delete twice: %d", r);
	if (good_client())
		return 1;
	/* the daemon holds 15 imports of this connection until it closes */
	close(fd);
	close(x);
	close(nul);
	drv.cuMemRelease(h);
	cuda_drv_close(&drv);
	printf("device-buffer refusals: OK\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	sock_path = argv[2];
	if (!strcmp(argv[1], "status"))
		return cmd_status();
	if (!strcmp(argv[1], "tenant") && argc == 4)
		return cmd_tenant(argv[3]);
	if (!strcmp(argv[1], "wait-used") && argc == 5)
		return cmd_wait(0, strtoull(argv[3], NULL, 0),
				strtoull(argv[4], NULL, 0));
	if (!strcmp(argv[1], "wait-mapped") && argc == 5)
		return cmd_wait(1, strtoull(argv[3], NULL, 0),
				strtoull(argv[4], NULL, 0));
	if (!strcmp(argv[1], "hold") && argc == 6)
		return cmd_hold(argv[3], (uint32_t)atoi(argv[4]), argv[5]);
	if (!strcmp(argv[1], "quota") && argc == 5)
		return cmd_quota(argv[3], (uint32_t)atoi(argv[4]));
	if (!strcmp(argv[1], "nomem") && argc == 4)
		return cmd_nomem((uint32_t)atoi(argv[3]));
	if (!strcmp(argv[1], "reclaim") && argc == 5)
		return cmd_reclaim(argv[3], argv[4]);
	if (!strcmp(argv[1], "seqs"))
		return cmd_seqs();
	if (!strcmp(argv[1], "bad") && argc == 4)
		return cmd_bad(argv[3]);
	if (!strcmp(argv[1], "devbuf-bad"))
		return cmd_devbuf_bad();
	fprintf(stderr, "usage: see the comment at the top of e2e-util.c\n");
	return 2;
}
