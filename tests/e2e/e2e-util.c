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
 *        compact-unsorted, splice-reserved, rope-bad, splice-repeat,
 *        compact-repeat, score-repeat, score-big; with blocks of 8 MiB:
 *        splice-big, compact-big, compact-long), then check that this
 *        connection and another client still work and that the other
 *        client's block is unchanged
 *   e2e-util devbuf-bad SOCK             device buffers (cuda backend):
 *        every refusal of DEVBUF_ADD/DEL and of an unknown buffer, then
 *        check that the daemon still serves
 *   e2e-util devbuf-gran SOCK            device buffers against a pool
 *        whose granularity (the driver's recommended one, 8 MiB) is
 *        larger than the buffers' minimum (2 MiB): sizes are checked
 *        against the imported allocation's granularity and size
 *   e2e-util fd-leak SOCK PID N          N connections send records with
 *        descriptors (empty, short, too many); daemon PID closes them all
 *   e2e-util fd-exhaust SOCK PID N       N connections against a daemon
 *        with few descriptors: some refused, no spinning, nothing left
 *   e2e-util conn-limit SOCK N           (as a non-admin user) N
 *        connections served, the next refused with -EUSERS
 *   e2e-util attn-bounds SOCK PID        attention sizes checked before
 *        allocating, repeated blocks refused, work bounded (-E2BIG)
 *   e2e-util busy SOCK SECONDS THREADS   long overlapping decodes: status
 *        answered and freed memory unmapped meanwhile
 *   e2e-util stale-socket PATH           bind a socket at PATH and exit
 *   e2e-util claim-bad SOCK              (root, in-process) HELLO claims
 *        refused: unknown lease, wrong secret, a lease in use, id 0,
 *        the right secret from uid 65534
 *   e2e-util names SOCK                  32-byte names refused, not cut
 *   e2e-util lease-timeout SOCK          timeout 2^64-1 waits, then granted
 *   e2e-util tenant-set SOCK             a refused TENANT_SET changes nothing
 *   e2e-util list SOCK                   lease 1 block, print what
 *        CLIENT_LIST and CLIENT_TIERS show ("leases N mine M total T
 *        clients N mine M total T")
 *   e2e-util visible SOCK                print what PREFIX_LIST and
 *        TIER_LIST show the caller, without HELLO ("prefix NAME... tiers
 *        N swaps S blocks B bytes Y ns T errors E jobs J": the tenants
 *        whose caches it sees, sorted, and the tiers' swap counters
 *        summed)
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
#include <dirent.h>
#include <pthread.h>

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
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0) {
		int e = errno;

		/* Refused and closed before we sent: the reason is queued. */
		if (e == EPIPE &&
		    recv(fd, rbuf, sizeof(rbuf), MSG_DONTWAIT) >= (ssize_t)sizeof(*rep) &&
		    rep->hdr.op == KVP_EV_REFUSED) {
			if (req_id)
				*req_id = 0;
			return rep->status;
		}
		return -1000 - e;
	}
	do {
		n = recv(fd, rbuf, sizeof(rbuf), 0);
		/* Closed on us: a refusal may still be queued. */
		if (n < 0 && errno == ECONNRESET)
			n = recv(fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);
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
	/* A refused connection answers with KVP_EV_REFUSED, req_id 0. */
	if (r > -1000 && got != id &&
	    ((struct kvp_reply *)rbuf)->hdr.op != KVP_EV_REFUSED)
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
	struct timeval tv = { .tv_sec = 5 };
	int fd = raw_connect(), r;

	if (fd < 0)
		return -ECONNREFUSED;
	/* No answer in 5 s is a failure, not a hang. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
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
	uint32_t held[2], slot0 = 0, mine, tpb;
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
		tpb = ((const struct kvp_layout_reply *)
		       (rbuf + sizeof(struct kvp_reply)))->tokens_per_block;
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
	} else if (!strcmp(what, "splice-repeat") ||
		   !strcmp(what, "compact-repeat") ||
		   !strcmp(what, "score-repeat")) {
		/* a sequence of two blocks naming the caller's block twice */
		uint32_t keep[2] = { 1, 2 };
		struct kvp_splice sq = { .layout_id = 0, .nblocks = 2,
					 .len = tpb + 1, .at = 0, .ndel = 1,
					 .off_table = 0 };
		struct kvp_compact cq = { .layout_id = 0, .nblocks = 2,
					  .len = tpb + 1, .nkeep = 2,
					  .off_table = 0, .off_keep = 64 };
		struct kvp_score q = { .layout_id = 0, .layer = 0,
				       .q_heads = 1, .n_q = 1, .len = tpb + 1,
				       .nblocks = 2, .off_q = 128,
				       .off_table = 0, .off_out = 4096 };

		if (raw_lease1(fd, &mine))
			FAIL("lease");
		memcpy(region, &mine, 4);
		memcpy(region + 4, &mine, 4);
		memcpy(region + 64, keep, sizeof(keep));
		memset(region + 128, 0, 128);
		want = -EINVAL;
		if (what[0] == 's' && what[1] == 'p')
			r = raw_op(fd, KVP_OP_SPLICE, &sq, sizeof(sq), -1);
		else if (what[0] == 'c')
			r = raw_op(fd, KVP_OP_COMPACT, &cq, sizeof(cq), -1);
		else
			r = raw_op(fd, KVP_OP_SCORE, &q, sizeof(q), -1);
	} else if (!strcmp(what, "score-big")) {
		/* 256 queries x 16 heads x 32 dims over 2^17 + 1 slots: more
		 * than 2^34 multiply-adds, refused before anything is read */
		struct kvp_score q = { .layout_id = 0, .layer = 0,
				       .q_heads = 16, .n_q = 256,
				       .len = (1U << 17) + 1,
				       .off_q = 0, .off_table = 0,
				       .off_out = 0 };

		q.nblocks = (q.len + tpb - 1) / tpb;
		want = -E2BIG;
		r = raw_op(fd, KVP_OP_SCORE, &q, sizeof(q), -1);
	} else if (!strcmp(what, "splice-big")) {
		/* a sequence of 600 blocks of 8 MiB whose first slot goes:
		 * all 600 rewritten (4.7 GiB, more than a COPY moves),
		 * refused before the table is read */
		struct kvp_splice sq = { .layout_id = 0, .nblocks = 600,
					 .len = 600 * tpb, .at = 0, .ndel = 1,
					 .off_table = 0 };

		if (tpb < (1U << 16))
			FAIL("%s needs blocks of 8 MiB (%u tokens here)", what,
			     tpb);
		want = -E2BIG;
		r = raw_op(fd, KVP_OP_SPLICE, &sq, sizeof(sq), -1);
	} else if (!strcmp(what, "compact-big") ||
		   !strcmp(what, "compact-long")) {
		/* big: 32 KiB per token (8 layers of 8 heads of 128), 256
		 * tokens per block of 8 MiB: keeping 140,000 slots, each one
		 * down by one, rewrites 547 blocks (4.3 GiB), refused.  long:
		 * the same sequence keeping slots 1 and 2 rewrites one block:
		 * not refused for its size (the table is not held: -EPERM) */
		struct kvp_layout bl = { .layers = 8, .kv_heads = 8,
					 .head_dim = 128, .dtype = 1 };
		struct kvp_compact cq = { .layout_id = 1, .off_table = 0,
					  .off_keep = 4096 };
		uint32_t *keep = (uint32_t *)(region + 4096), n, btpb;

		r = raw_op(fd, KVP_OP_LAYOUT, &bl, sizeof(bl), -1);
		if (r < 0)
			FAIL("layout: %d", r);
		btpb = ((const struct kvp_layout_reply *)
			(rbuf + sizeof(struct kvp_reply)))->tokens_per_block;
		if (btpb != 256)
			FAIL("%s needs blocks of 8 MiB (%u tokens of 32 KiB "
			     "here)", what, btpb);
		n = !strcmp(what, "compact-big") ? 140000 : 2;
		for (i = 0; i < (int)n; i++)
			keep[i] = (uint32_t)i + 1;
		cq.nkeep = n;
		cq.len = 140001;
		cq.nblocks = (cq.len + btpb - 1) / btpb;
		memset(region, 0, 4096);
		want = n > 2 ? -E2BIG : -EPERM;
		r = raw_op(fd, KVP_OP_COMPACT, &cq, sizeof(cq), -1);
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

/*
 * The daemon's pool granularity is the recommended 8 MiB
 * (KVPOOL_FAKE_CUDA_GRAN_REC); a device buffer is sized by its own
 * allocation's minimum granularity, 2 MiB: 2 and 6 MiB buffers are
 * imported, sizes not a multiple of 2 MiB or beyond the allocation are
 * refused with -EINVAL (and imported nothing that stays).
 */
static int cmd_devbuf_gran(void)
{
	static const struct { int x; uint64_t bytes; int want; } cases[] = {
		{ 0, 2 << 20, 0 },	/* not a multiple of the pool's 8 MiB */
		{ 1, 6 << 20, 0 },
		{ 0, 1 << 20, -EINVAL },	/* half the granularity */
		{ 1, 3 << 20, -EINVAL },	/* 1.5 granules */
		{ 1, 5ULL << 19, -EINVAL },	/* 2.5 MiB */
		{ 0, 4 << 20, -EINVAL },	/* beyond the 2 MiB allocation */
		{ 1, 8 << 20, -EINVAL },	/* beyond the 6 MiB one */
		{ 1, 4 << 20, 0 },	/* part of an allocation */
	};
	struct cuda_drv drv;
	CUmemGenericAllocationHandle h[2];
	size_t g = 0;
	uint8_t *region;
	int fd, x[2], r;
	unsigned int i;

	if (cuda_drv_open(&drv) || drv.cuInit(0)) {
		printf("no CUDA driver\n");
		return 77;
	}
	x[0] = export_alloc(&drv, 2 << 20, &h[0]);
	x[1] = export_alloc(&drv, 6 << 20, &h[1]);
	if (x[0] < 0 || x[1] < 0)
		FAIL("export");
	{
		CUmemAllocationProp prop;

		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.requestedHandleTypes =
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		if (drv.cuMemGetAllocationGranularity(&g, &prop,
				CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) ||
		    g != 8 << 20)
			FAIL("recommended granularity %zu, want 8 MiB (run with "
			     "KVPOOL_FAKE_CUDA_GRAN_REC=8388608)", g);
	}
	if (raw_session(&fd, &region))
		FAIL("session");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = devbuf_add(fd, cases[i].bytes, x[cases[i].x], 0);
		if (r != cases[i].want)
			FAIL("%llu bytes of the %d MiB allocation: %d, want %d",
			     (unsigned long long)cases[i].bytes,
			     cases[i].x ? 6 : 2, r, cases[i].want);
	}
	if (good_client())
		return 1;
	close(fd);
	for (i = 0; i < 2; i++) {
		close(x[i]);
		drv.cuMemRelease(h[i]);
	}
	cuda_drv_close(&drv);
	printf("device buffers sized by their own granularity: OK\n");
	return 0;
}

/* ---- descriptors and connection limits ------------------------------------- */

/* Descriptors open in process @pid (/proc/PID/fd), or -1. */
static int fd_count(int pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * Descriptors of an idle @pid: the fewest seen over 300 ms (connections
 * that just closed, such as a readiness probe, take a moment to go).
 */
static int fd_base(int pid)
{
	int n = fd_count(pid), i, m;

	for (i = 0; i < 15; i++) {
		usleep(20000);
		m = fd_count(pid);
		if (m >= 0 && m < n)
			n = m;
	}
	return n;
}

/* Wait up to @ms for @pid to have @want descriptors; the last count. */
static int fd_wait(int pid, int want, int ms)
{
	int n = fd_count(pid);

	for (; n != want && ms > 0; ms -= 20) {
		usleep(20000);
		n = fd_count(pid);
	}
	return n;
}

/* CPU seconds (user + system) used by @pid so far, or -1. */
static double cpu_seconds(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;
	int i;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return -1;
	for (i = 0; i < 12 && p; i++)	/* field 14 is utime */
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, "%lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Send @len bytes (maybe 0) with @nfds copies of /dev/null attached. */
static int send_with_fds(int fd, const void *msg, size_t len, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	int fds[8], i, r;

	for (i = 0; i < nfds; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	memset(&cm, 0, sizeof(cm));
	mh.msg_control = cm.buf;
	mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	r = sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
	for (i = 0; i < nfds; i++)
		close(fds[i]);
	return r;
}

/* The status of the next reply on @fd (async records skipped), or < -1000. */
static int reply_status(int fd)
{
	struct kvp_reply *rep = (struct kvp_reply *)rbuf;
	ssize_t n;

	do {
		n = recv(fd, rbuf, sizeof(rbuf), 0);
	} while (n > 0 && rep->hdr.op == KVP_EV_RECLAIM);
	return n < (ssize_t)sizeof(*rep) ? -2000 : rep->status;
}

/*
 * N connections each send records carrying descriptors that the daemon
 * must close: an empty record with 2 (it used to drop the connection
 * before looking at them), a record cut short with 2, a valid one with 3
 * (more than a request may carry).  Each gets its error reply and the
 * connection stays usable; afterwards the daemon holds no descriptor more
 * than before.
 */
static int cmd_fd_leak(int pid, int n)
{
	int *fds = calloc((size_t)n, sizeof(int)), base, during, after, i, r;
	struct kvp_hdr h = { .magic = KVP_MAGIC, .op = KVP_OP_STATUS,
			     .len = sizeof(h), .req_id = 5 };

	base = fd_base(pid);
	if (base < 0)
		FAIL("cannot read /proc/%d/fd", pid);
	for (i = 0; i < n; i++) {
		fds[i] = raw_connect();
		if (fds[i] < 0)
			FAIL("connect %d", i);
		if (send_with_fds(fds[i], "", 0, 2) ||
		    (r = reply_status(fds[i])) != -EBADMSG)
			FAIL("empty record with 2 descriptors: want -EBADMSG, got %d", r);
		if (send_with_fds(fds[i], &h, 6, 2) ||
		    (r = reply_status(fds[i])) != -EBADMSG)
			FAIL("short record with 2 descriptors: want -EBADMSG, got %d", r);
		if (send_with_fds(fds[i], &h, sizeof(h), 3) ||
		    (r = reply_status(fds[i])) != -EBADF)
			FAIL("3 descriptors: want -EBADF, got %d", r);
		if (raw_op(fds[i], KVP_OP_STATUS, NULL, 0, -1) != -ENOTCONN)
			FAIL("the connection no longer answers");
	}
	/* Each connection holds its socket and an eventfd, nothing else. */
	during = fd_wait(pid, base + 2 * n, 2000);
	for (i = 0; i < n; i++)
		close(fds[i]);
	after = fd_wait(pid, base, 5000);
	printf("daemon descriptors: %d before, %d with %d connections "
	       "(%d sent with records), %d after\n", base, during, n, 7 * n,
	       after);
	if (during != base + 2 * n)
		FAIL("%d descriptors with %d connections, want %d", during, n,
		     base + 2 * n);
	if (after != base)
		FAIL("%d descriptors after, %d before: leaked", after, base);
	free(fds);
	return good_client();
}

/*
 * Open connections until the daemon (run with a low RLIMIT_NOFILE) runs
 * out of descriptors: later ones must be refused, the daemon must not spin
 * while they wait, and once they close everything is as before and a
 * well-behaved client is served.
 */
static int cmd_fd_exhaust(int pid, int n)
{
	int *fds = calloc((size_t)n, sizeof(int)), base, after, i;
	int served = 0, refused = 0;
	double cpu0, cpu;

	base = fd_base(pid);
	for (i = 0; i < n; i++) {
		struct timeval tv = { .tv_sec = 3 };
		int r;

		fds[i] = raw_connect();
		if (fds[i] < 0) {
			refused++;
			continue;
		}
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		r = raw_op(fds[i], KVP_OP_POOL_STATUS, NULL, 0, -1);
		if (r >= 0)
			served++;
		else if (r == -2000 && errno == EAGAIN)
			FAIL("connection %d neither served nor refused in 3 s", i + 1);
		else
			refused++;
	}
	cpu0 = cpu_seconds(pid);
	sleep(2);
	cpu = cpu_seconds(pid) - cpu0;
	for (i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	after = fd_wait(pid, base, 5000);
	printf("%d connections: %d served, %d refused; daemon CPU %.2f s in "
	       "2 s at the limit; descriptors %d before, %d after\n", n,
	       served, refused, cpu, base, after);
	if (!served || !refused)
		FAIL("want some served and some refused at the limit");
	if (cpu > 0.2)
		FAIL("the daemon spins at the descriptor limit (%.2f s CPU)",
		     cpu);
	if (after != base)
		FAIL("descriptors %d after, %d before", after, base);
	free(fds);
	return good_client();
}

/*
 * Run as a non-admin user: @n connections are served, the next one is
 * refused with -EUSERS (KVP_EV_REFUSED, then closed), and once one closes
 * a new one is served again.
 */
static int cmd_conn_limit(int n)
{
	int *fds = calloc((size_t)n + 1, sizeof(int)), i, r;
	struct kvl_ctx *ctx;

	for (i = 0; i < n; i++) {
		fds[i] = raw_connect();
		if (fds[i] < 0 ||
		    (r = raw_op(fds[i], KVP_OP_POOL_STATUS, NULL, 0, -1)) < 0)
			FAIL("connection %d of %d refused", i + 1, n);
	}
	fds[n] = raw_connect();
	r = fds[n] < 0 ? -1 : raw_op(fds[n], KVP_OP_POOL_STATUS, NULL, 0, -1);
	if (r != -EUSERS)
		FAIL("connection %d: want -EUSERS, got %d", n + 1, r);
	r = open_ctx(NULL, &ctx);
	if (r != -EUSERS)
		FAIL("kvl_open over the limit: want -EUSERS, got %d", r);
	close(fds[0]);
	usleep(200000);
	r = open_ctx(NULL, &ctx);
	if (r)
		FAIL("kvl_open after one closed: %s", strerror(-r));
	kvl_close(ctx);
	printf("connection limit %d: the next one refused with -EUSERS: OK\n",
	       n);
	for (i = 1; i <= n; i++)
		close(fds[i]);
	free(fds);
	return 0;
}

/* ---- protocol edges ----------------------------------------------------- */

/* The tenant records of TENANT_LIST (first page) into rbuf; count or < 0. */
static int tenant_list(int fd, struct kvp_tenant_rec **recs)
{
	struct kvp_list q;
	struct kvp_list_reply *lr;
	int r;

	memset(&q, 0, sizeof(q));
	r = raw_op(fd, KVP_OP_TENANT_LIST, &q, sizeof(q), -1);
	if (r < 0)
		return r;
	lr = (void *)(rbuf + sizeof(struct kvp_reply));
	*recs = (void *)(lr + 1);
	return (int)lr->count;
}

static int find_tenant(int fd, const char *name, struct kvp_tenant_rec *out)
{
	struct kvp_tenant_rec *t;
	int n = tenant_list(fd, &t), i;

	for (i = 0; i < n; i++)
		if (!strncmp(t[i].name, name, KVP_NAME_LEN)) {
			*out = t[i];
			return 1;
		}
	return n < 0 ? n : 0;
}

/* Names of 32 bytes without a NUL are refused, never cut to 31. */
/* HELLO with KVP_HELLO_CLAIM of (@id, @secret) on a new connection. */
static int claim_hello(uint64_t id, uint64_t secret)
{
	struct kvp_hello h;
	int fd = raw_connect(), r;

	if (fd < 0)
		return -ECONNREFUSED;
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_CLAIM;
	h.reserved[0] = id;
	h.reserved[1] = secret;
	r = raw_op(fd, KVP_OP_HELLO, &h, sizeof(h), -1);
	close(fd);
	return r;
}

/* Claims that must be refused: no such lease, a lease that is in use
 * (with its secret: not parked; with another: -EPERM), id 0, and the
 * right secret from another uid. */
static int cmd_claim_bad(void)
{
	struct kvp_hello_reply hr;
	uint8_t *region;
	uint64_t id, secret;
	int fd, r, st, bad = 0;
	pid_t p;

	r = raw_session(&fd, &region);
	if (r)
		return fprintf(stderr, "hello: %d\n", r), 1;
	memcpy(&hr, rbuf + sizeof(struct kvp_reply), sizeof(hr));
	id = hr.lease_id;
	secret = hr.reserved[0];
	if (!secret)
		return fprintf(stderr, "no secret in HELLO's reply\n"), 1;
#define EXPECT(call, want) do {						\
		int e_ = (call);					\
		if (e_ != (want)) {					\
			fprintf(stderr, "%s: %d, want %d\n", #call, e_,	\
				(want));				\
			bad = 1;					\
		}							\
	} while (0)
	EXPECT(claim_hello(id + 1000, secret), -ENOENT);
	EXPECT(claim_hello(id, secret ^ 1), -EPERM);
	EXPECT(claim_hello(id, secret), -ENOENT);	/* in use, not parked */
	EXPECT(claim_hello(0, secret), -EINVAL);
	p = fork();
	if (!p) {
		if (setgid(65534) || setuid(65534))
			_exit(3);
		_exit(claim_hello(id, secret) == -EPERM ? 0 : 1);
	}
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) ||
	    WEXITSTATUS(st)) {
		fprintf(stderr, "claim from another uid not refused\n");
		bad = 1;
	}
#undef EXPECT
	close(fd);
	if (!bad)
		printf("claims refused: unknown, wrong secret, in use, id 0, "
		       "other uid\n");
	return bad;
}

static int cmd_names(void)
{
	struct kvp_tenant t;
	struct kvp_tenant_rec rec;
	struct kvp_hello h;
	struct kvp_attach a;
	struct kvp_list q;
	char name31[32];
	uint8_t *region;
	int fd = raw_connect(), s, r;

	if (fd < 0)
		FAIL("connect");
	memset(name31, 'n', 31);
	name31[31] = 0;
	memset(&t, 0, sizeof(t));
	memset(t.name, 'n', sizeof(t.name));
	t.max = KVPOOL_UNLIMITED;
	t.uid = t.gid = KVPOOL_ID_NONE;
	r = raw_op(fd, KVP_OP_TENANT_ADD, &t, sizeof(t), -1);
	if (r != -EINVAL)
		FAIL("TENANT_ADD with a 32-byte name: want -EINVAL, got %d", r);
	if (find_tenant(fd, name31, &rec) != 0)
		FAIL("a tenant named with the first 31 bytes appeared");
	memset(t.name, 0, sizeof(t.name));
	memset(t.pool, 'p', sizeof(t.pool));
	memcpy(t.name, name31, sizeof(name31));
	r = raw_op(fd, KVP_OP_TENANT_ADD, &t, sizeof(t), -1);
	if (r != -EINVAL)
		FAIL("TENANT_ADD with a 32-byte pool: want -EINVAL, got %d", r);
	memset(t.pool, 0, sizeof(t.pool));
	r = raw_op(fd, KVP_OP_TENANT_ADD, &t, sizeof(t), -1);
	if (r != 0 || find_tenant(fd, name31, &rec) != 1)
		FAIL("TENANT_ADD with a 31-character name: %d", r);
	memset(&q, 0, sizeof(q));
	memset(q.pool, 'p', sizeof(q.pool));
	r = raw_op(fd, KVP_OP_TENANT_LIST, &q, sizeof(q), -1);
	if (r != -EINVAL)
		FAIL("TENANT_LIST with a 32-byte pool: want -EINVAL, got %d", r);
	close(fd);

	/* HELLO's tenant, then ATTACH's. */
	s = raw_connect();
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	memset(h.tenant, 'n', sizeof(h.tenant));
	r = raw_op(s, KVP_OP_HELLO, &h, sizeof(h), -1);
	if (r != -EINVAL)
		FAIL("HELLO with a 32-byte tenant: want -EINVAL, got %d", r);
	close(s);
	r = raw_session(&s, &region);
	if (r < 0)
		FAIL("hello: %d", r);
	memset(&a, 0, sizeof(a));
	memset(a.tenant, 'n', sizeof(a.tenant));
	r = raw_op(s, KVP_OP_ATTACH, &a, sizeof(a), -1);
	if (r != -EINVAL)
		FAIL("ATTACH with a 32-byte tenant: want -EINVAL, got %d", r);
	memcpy(a.tenant, name31, sizeof(name31));
	r = raw_op(s, KVP_OP_ATTACH, &a, sizeof(a), -1);
	if (r != 0)
		FAIL("ATTACH to the 31-character tenant: %d", r);
	close(s);
	printf("32-byte names refused (TENANT_ADD, TENANT_LIST, HELLO, ATTACH), "
	       "31 accepted: OK\n");
	return 0;
}

/*
 * A LEASE with timeout_ns = 2^64 - 1 waits (the deadline saturates) rather
 * than failing at once, and is granted when blocks come back.
 */
static int cmd_lease_timeout(void)
{
	struct kvl_ctx *hog;
	struct kvl_status st;
	uint32_t *b;
	uint8_t *region;
	pid_t child;
	int r, fd, status;

	if (open_ctx(NULL, &hog) || kvl_status(hog, &st))
		FAIL("open");
	b = calloc(st.capacity, 4);
	r = kvl_lease(hog, st.capacity, 0, 5000000000ULL, b);
	if (r != (int)st.capacity)
		FAIL("lease the whole pool: %d", r);
	child = fork();
	if (!child) {
		struct kvp_lease l = { .count = 1, .timeout_ns = UINT64_MAX };

		if (raw_session(&fd, &region) < 0)
			_exit(3);
		r = raw_op(fd, KVP_OP_LEASE, &l, sizeof(l), -1);
		_exit(r == 1 ? 0 : r == -ETIMEDOUT ? 4 : 5);
	}
	sleep(1);
	r = waitpid(child, &status, WNOHANG);
	if (r == child)
		FAIL("the lease with the longest timeout ended at once (exit %d: "
		     "4 = -ETIMEDOUT)", WEXITSTATUS(status));
	if (kvl_release(hog, b, 1) != 1)
		FAIL("release");
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		FAIL("the waiting lease was not granted (%#x)", status);
	printf("LEASE with timeout 2^64-1 waits and is granted: OK\n");
	kvl_close(hog);
	free(b);
	return 0;
}

/* TENANT_SET checks every field before it changes any. */
static int cmd_tenant_set(void)
{
	struct kvp_tenant t;
	struct kvp_tenant_rec rec;
	int fd = raw_connect(), r;

	if (fd < 0)
		FAIL("connect");
	memset(&t, 0, sizeof(t));
	strcpy(t.name, "ts");
	t.max = 10;
	t.min = 2;
	t.uid = t.gid = KVPOOL_ID_NONE;
	if (raw_op(fd, KVP_OP_TENANT_ADD, &t, sizeof(t), -1))
		FAIL("TENANT_ADD");
	t.max = 20;
	t.min = 1u << 30;			/* above the capacity */
	r = raw_op(fd, KVP_OP_TENANT_SET, &t, sizeof(t), -1);
	if (r != -EINVAL)
		FAIL("valid max, invalid min: want -EINVAL, got %d", r);
	t.max = 1;
	t.min = KVP_KEEP;			/* below the min of 2 */
	r = raw_op(fd, KVP_OP_TENANT_SET, &t, sizeof(t), -1);
	if (r != -EINVAL)
		FAIL("max below min: want -EINVAL, got %d", r);
	t.max = 30;
	t.min = 40;
	t.uid = 7;
	r = raw_op(fd, KVP_OP_TENANT_SET, &t, sizeof(t), -1);
	if (r != -EINVAL)
		FAIL("min above max: want -EINVAL, got %d", r);
	if (find_tenant(fd, "ts", &rec) != 1 || rec.max != 10 || rec.min != 2 ||
	    rec.uid != KVPOOL_ID_NONE)
		FAIL("a refused TENANT_SET changed the tenant (max %u min %u uid %u)",
		     rec.max, rec.min, rec.uid);
	t.max = 1;
	t.min = 0;
	t.uid = KVP_KEEP;
	r = raw_op(fd, KVP_OP_TENANT_SET, &t, sizeof(t), -1);
	if (r || find_tenant(fd, "ts", &rec) != 1 || rec.max != 1 || rec.min != 0)
		FAIL("lowering max and min together: %d (max %u min %u)", r,
		     rec.max, rec.min);
	printf("TENANT_SET: refused requests change nothing: OK\n");
	close(fd);
	return 0;
}

/*
 * CLIENT_LIST and CLIENT_TIERS as the caller sees them: an admin peer sees
 * every lease and connection; any other user only those of its own uid.
 * Prints "leases N mine M total T clients N mine M total T".
 */
static int cmd_list(void)
{
	struct kvl_ctx *ctx;
	struct kvp_list q;
	struct kvp_list_reply *lr;
	struct kvp_client_rec *c;
	uint32_t b[1], i, mine = 0;
	int fd, r;

	if (open_ctx(NULL, &ctx) || kvl_lease(ctx, 1, 0, 1000000000ULL, b) != 1)
		FAIL("open and lease");
	fd = raw_connect();
	memset(&q, 0, sizeof(q));
	r = raw_op(fd, KVP_OP_CLIENT_LIST, &q, sizeof(q), -1);
	if (r < 0)
		FAIL("CLIENT_LIST: %d", r);
	lr = (void *)(rbuf + sizeof(struct kvp_reply));
	c = (void *)(lr + 1);
	for (i = 0; i < lr->count; i++)
		mine += c[i].uid == getuid();
	printf("leases %u mine %u total %u", lr->count, mine, lr->total);
	/* CLIENT_TIERS: every connection that said HELLO, same rule. */
	r = raw_op(fd, KVP_OP_CLIENT_TIERS, &q, sizeof(q), -1);
	if (r < 0)
		FAIL("CLIENT_TIERS: %d", r);
	{
		struct kvp_client_tier_rec *ct = (void *)(lr + 1);

		for (i = 0, mine = 0; i < lr->count; i++)
			mine += ct[i].uid == getuid();
	}
	printf(" clients %u mine %u total %u\n", lr->count, mine, lr->total);
	close(fd);
	kvl_close(ctx);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

/* PREFIX_LIST and TIER_LIST as the caller sees them, over a connection
 * that never said HELLO. */
static int cmd_visible(void)
{
	char names[512][KVP_NAME_LEN];
	struct kvp_list_reply *lr = (void *)(rbuf + sizeof(struct kvp_reply));
	struct kvp_list q;
	uint64_t swaps = 0, blocks = 0, bytes = 0, ns = 0, errs = 0, jobs = 0;
	uint32_t i, n = 0, k;
	int fd = raw_connect(), r;

	if (fd < 0)
		FAIL("connect");
	memset(&q, 0, sizeof(q));
	do {
		struct kvp_prefix_rec *x = (void *)(lr + 1);

		q.start = n;
		r = raw_op(fd, KVP_OP_PREFIX_LIST, &q, sizeof(q), -1);
		if (r < 0)
			FAIL("PREFIX_LIST: %d", r);
		for (i = 0; i < lr->count && n < 512; i++, n++)
			memcpy(names[n], x[i].tenant, KVP_NAME_LEN);
	} while (lr->count && n < lr->total && n < 512);
	qsort(names, n, KVP_NAME_LEN, cmp_name);
	printf("prefix");
	for (i = 0; i < n; i++)
		printf(" %.*s", KVP_NAME_LEN, names[i]);
	memset(&q, 0, sizeof(q));
	r = raw_op(fd, KVP_OP_TIER_LIST, &q, sizeof(q), -1);
	if (r < 0)
		FAIL("TIER_LIST: %d", r);
	for (i = 0; i < lr->count; i++) {
		struct kvp_tier_rec *t = (struct kvp_tier_rec *)(lr + 1) + i;

		swaps += t->swaps;
		blocks += t->blocks_in + t->blocks_out;
		bytes += t->bytes_in + t->bytes_out;
		ns += t->copy_in_ns + t->copy_out_ns;
		errs += t->errors;
		for (k = 0; k < KVP_LAT_BUCKETS; k++)
			jobs += t->lat_us[k];
	}
	printf(" tiers %u swaps %llu blocks %llu bytes %llu ns %llu errors "
	       "%llu jobs %llu\n", lr->count, (unsigned long long)swaps,
	       (unsigned long long)blocks, (unsigned long long)bytes,
	       (unsigned long long)ns, (unsigned long long)errs,
	       (unsigned long long)jobs);
	close(fd);
	return 0;
}

/*
 * The owner's progress does not depend on data-plane ops: while THREADS
 * clients run long, overlapping decode requests back to back for SECONDS,
 * a new connection's POOL_STATUS is answered promptly, and memory freed
 * meanwhile is unmapped while they go on (the unmap waits for no op and
 * new ops wait for a due unmap, not the other way round).
 */
#define BUSY_TOKENS	8192
#define BUSY_BATCH	8
#define BUSY_QHEADS	16

struct busy {
	volatile int stop;
	volatile unsigned long ops;
	volatile int ready;	/* threads whose blocks are all leased */
	int err;
};

static void *busy_thread(void *arg)
{
	struct busy *bz = arg;
	struct kvl_layout l = { .layers = 1, .kv_heads = 8, .head_dim = 128,
				.dtype = KVL_DTYPE_BF16 };
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	struct kvl_seq *s, *batch[BUSY_BATCH];
	float *q = calloc((size_t)BUSY_BATCH * BUSY_QHEADS * 128, 4);
	float *out = calloc((size_t)BUSY_BATCH * BUSY_QHEADS * 128, 4);
	int lay, i, r;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.region_bytes = 8 << 20;
	r = kvl_open(&o, &ctx);
	if (!r && (lay = kvl_layout_declare(ctx, &l)) < 0)
		r = lay;
	if (!r)
		r = kvl_seq_create(ctx, lay, &s);
	if (!r)
		r = kvl_seq_append(s, BUSY_TOKENS) == BUSY_TOKENS ? 0 : -EIO;
	for (i = 0; i < BUSY_BATCH; i++)
		batch[i] = s;	/* one sequence per row, shared blocks */
	__sync_fetch_and_add(&bz->ready, 1);
	while (!r && !bz->stop) {
		r = kvl_seq_decode(batch, BUSY_BATCH, 0, BUSY_QHEADS, q, 0.0f,
				   out);
		bz->ops++;
	}
	if (r)
		bz->err = r;
	free(q);
	free(out);
	return NULL;
}

static double ms_since(uint64_t t0)
{
	return (double)(now_ms() - t0);
}

static int cmd_busy(int seconds, int threads)
{
	struct busy bz = { 0 };
	pthread_t th[8];
	struct kvl_ctx *extra;
	struct kvp_pool_rec pr;
	uint32_t *b = calloc(512, 4);
	uint64_t t0, end, mapped_full, mapped_low = UINT64_MAX;
	unsigned long ops0;
	double worst = 0, lat;
	int i, probes = 0, r;

	if (threads > 8)
		threads = 8;
	for (i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, busy_thread, &bz);
	/* Every client's blocks first, so that the next lease is above. */
	while ((bz.ready < threads || bz.ops < (unsigned long)threads) && !bz.err)
		usleep(10000);
	/* Another client's blocks, above theirs, make the pool grow; they go
	 * back below, so the top chunks can be unmapped. */
	if (open_ctx(NULL, &extra) || kvl_lease(extra, 512, 0, 5000000000ULL, b) != 512)
		FAIL("extra lease");
	if (pool_rec(&pr) < 0)
		FAIL("pool status");
	mapped_full = pr.mapped_bytes;
	if (kvl_release_all(extra) != 512)
		FAIL("release");
	ops0 = bz.ops;
	t0 = now_ms();
	end = t0 + (uint64_t)seconds * 1000;
	while (now_ms() < end && !bz.err) {
		uint64_t p0 = now_ms();

		r = pool_rec(&pr);
		lat = ms_since(p0);
		if (r < 0) {
			bz.stop = 1;
			FAIL("no status answer in %.0f ms while data-plane ops ran (%d)",
			     lat, r);
		}
		if (lat > worst)
			worst = lat;
		if (pr.mapped_bytes < mapped_low)
			mapped_low = pr.mapped_bytes;
		probes++;
		usleep(50000);
	}
	bz.stop = 1;
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("%d clients, %lu decode requests of %d x %d tokens in %d s; "
	       "%d status probes, slowest %.0f ms; mapped %llu -> %llu bytes "
	       "while busy\n", threads, bz.ops, BUSY_BATCH, BUSY_TOKENS,
	       seconds, probes, worst, (unsigned long long)mapped_full,
	       (unsigned long long)mapped_low);
	if (bz.err)
		FAIL("a busy client failed: %s", strerror(-bz.err));
	if (bz.ops <= ops0)
		FAIL("the clients made no progress while the probes ran");
	if (worst > 2000)
		FAIL("a status call took %.0f ms while data-plane ops ran", worst);
	if (mapped_low >= mapped_full)
		FAIL("freed memory was never unmapped while ops ran");
	kvl_close(extra);
	free(b);
	return 0;
}

/* Peak resident memory of @pid in KiB (VmHWM), or -1. */
static long peak_rss_kb(int pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * Attention requests are checked for size before the daemon allocates or
 * computes: a block table declared huge (batch 4096 x the whole capacity)
 * but with short sequences costs only what the sequences need; a block
 * named twice in one sequence is refused; work beyond the bound is refused
 * with -E2BIG at once.  The daemon's peak memory must not grow by the
 * declared table.
 */
static int cmd_attn_bounds(int pid)
{
	struct kvp_layout l = { .layers = 1, .kv_heads = 8, .head_dim = 128,
				.dtype = 1 };
	struct kvp_layout_reply lr;
	struct kvp_pool_rec pr;
	struct kvp_attn at;
	struct kvp_lease lq;
	uint32_t *region, tpb, blocks[64], i, cap;
	uint64_t tables = 1 << 20, region_bytes;
	long rss0, rss1;
	int fd, mfd, r;
	struct kvp_hello h;
	void *m;

	if (pool_rec(&pr) < 0)
		FAIL("pool status");
	cap = pr.capacity;
	/* A region large enough for the declared table, never touched. */
	region_bytes = tables + (uint64_t)4096 * cap * 4 + (8 << 20);
	fd = raw_connect();
	mfd = memfd_create("e2e-big", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || mfd < 0 || ftruncate(mfd, (off_t)region_bytes) ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK))
		FAIL("region");
	m = mmap(NULL, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (m == MAP_FAILED)
		FAIL("mmap");
	region = m;
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_REGION;
	h.region_bytes = region_bytes;
	r = raw_op(fd, KVP_OP_HELLO, &h, sizeof(h), mfd);
	close(mfd);
	if (r < 0)
		FAIL("hello: %d", r);
	r = raw_op(fd, KVP_OP_LAYOUT, &l, sizeof(l), -1);
	if (r < 0)
		FAIL("layout: %d", r);
	memcpy(&lr, rbuf + sizeof(struct kvp_reply), sizeof(lr));
	tpb = lr.tokens_per_block;
	lq.count = 64;
	lq.flags = 0;
	lq.timeout_ns = 5000000000ULL;
	r = raw_op(fd, KVP_OP_LEASE, &lq, sizeof(lq), -1);
	if (r != 64)
		FAIL("lease 64: %d", r);
	memcpy(blocks, rbuf + sizeof(struct kvp_reply), sizeof(blocks));

	/* q at 0 (8 MiB is enough for everything below), ctx at 8 MiB,
	 * tables at 8 MiB + 1 MiB: batch 4096 x capacity entries. */
	memset(&at, 0, sizeof(at));
	at.layout_id = lr.layout_id;
	at.batch = 4096;
	at.q_heads = 8;
	at.max_blocks_per_seq = cap;
	at.off_q = 0;
	at.off_out = 0;
	at.off_ctx = 8 << 20;
	at.off_tables = (8 << 20) + tables;
	for (i = 0; i < at.batch; i++) {
		region[(at.off_ctx / 4) + i] = 1;	/* one token each */
		region[at.off_tables / 4 + (uint64_t)i * cap] = blocks[0];
	}
	rss0 = peak_rss_kb(pid);
	r = raw_op(fd, KVP_OP_ATTN, &at, sizeof(at), -1);
	rss1 = peak_rss_kb(pid);
	printf("ATTN batch %u declaring %u blocks per sequence (%llu MiB of "
	       "tables), 1 token each: %d, daemon peak RSS %ld -> %ld KiB\n",
	       at.batch, cap, (unsigned long long)at.batch * cap * 4 >> 20, r,
	       rss0, rss1);
	if (r != 0)
		FAIL("short sequences with a huge declared table: %d", r);
	/* Queries, outputs and the kernels' scratch for 4096 sequences take
	 * tens of MiB; the declared table (twice 256 MiB) must not. */
	if (rss1 - rss0 > 128 * 1024)
		FAIL("the daemon's peak memory grew by %ld KiB", rss1 - rss0);

	/* The same block twice in one sequence. */
	at.batch = 1;
	region[at.off_ctx / 4] = 2 * tpb;
	region[at.off_tables / 4] = blocks[0];
	region[at.off_tables / 4 + 1] = blocks[0];
	r = raw_op(fd, KVP_OP_ATTN, &at, sizeof(at), -1);
	if (r != -EINVAL)
		FAIL("a block twice in one sequence: want -EINVAL, got %d", r);

	/* Work beyond the bound: 4096 sequences of 64 distinct blocks. */
	at.batch = 4096;
	at.q_heads = 128;
	for (i = 0; i < at.batch; i++) {
		region[at.off_ctx / 4 + i] = 64 * tpb;
		memcpy(&region[at.off_tables / 4 + (uint64_t)i * cap], blocks,
		       sizeof(blocks));
	}
	r = raw_op(fd, KVP_OP_ATTN, &at, sizeof(at), -1);
	if (r != -E2BIG)
		FAIL("work beyond the bound: want -E2BIG, got %d", r);
	printf("ATTN: sizes checked before allocating, repeated block -EINVAL, "
	       "too much work -E2BIG: OK\n");
	close(fd);
	munmap(m, region_bytes);
	return good_client();
}

/* Leave a socket file nobody listens on at @path (a daemon that died). */
static int cmd_stale_socket(const char *path)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		FAIL("bind %s: %s", path, strerror(errno));
	close(fd);
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
	if (!strcmp(argv[1], "devbuf-gran"))
		return cmd_devbuf_gran();
	if (!strcmp(argv[1], "fd-leak") && argc == 5)
		return cmd_fd_leak(atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(argv[1], "fd-exhaust") && argc == 5)
		return cmd_fd_exhaust(atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(argv[1], "conn-limit") && argc == 4)
		return cmd_conn_limit(atoi(argv[3]));
	if (!strcmp(argv[1], "attn-bounds") && argc == 4)
		return cmd_attn_bounds(atoi(argv[3]));
	if (!strcmp(argv[1], "busy") && argc == 5)
		return cmd_busy(atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(argv[1], "stale-socket"))
		return cmd_stale_socket(argv[2]);
	if (!strcmp(argv[1], "claim-bad"))
		return cmd_claim_bad();
	if (!strcmp(argv[1], "names"))
		return cmd_names();
	if (!strcmp(argv[1], "lease-timeout"))
		return cmd_lease_timeout();
	if (!strcmp(argv[1], "tenant-set"))
		return cmd_tenant_set();
	if (!strcmp(argv[1], "list"))
		return cmd_list();
	if (!strcmp(argv[1], "visible"))
		return cmd_visible();
	fprintf(stderr, "usage: see the comment at the top of e2e-util.c\n");
	return 2;
}
