// SPDX-License-Identifier: MIT
/*
 * e2e-gate - no kind of data-plane op holds the owner's unmap, or another
 * tenant's calls, back for longer than one op's own bounded work.
 *
 *   e2e-gate SOCK SECONDS KIND...
 *
 * For each KIND, NCONN (3) connections of tenant "attack" loop that op
 * back to back (each queues its next request before it reads the last
 * reply, so its thread in the daemon goes from one op straight to the
 * next), and they overlap: the pool's memory is never free of ops.  (Two
 * were enough with SCORE; on a loaded machine the shorter edit ops of two
 * connections sometimes both paused at once, letting the unmap through.)
 * Meanwhile another connection leases blocks above theirs (the pool
 * grows) and gives them back, so an unmap is due; for SECONDS, tenant
 * "victim" writes one token every 20 ms on its own connection and a
 * probe reads the pool's mapped bytes.
 * It passes when the victim's slowest call took at most half of SECONDS
 * (and at least 2 s), the memory
 * was unmapped while the attack ran, the victim reads back what it wrote
 * and every op of the attack succeeded.  An op that passed the owner's
 * gate (new ops wait while an unmap is due) would keep the unmap, and
 * every gated call of the victim behind it, waiting for as long as the
 * attack lasts.
 *
 * KIND: write, read, attn, copy, splice, compact, score, block-sum, swap
 * (host region ops; swap needs a lower tier 1 of 4096 blocks or more)
 * and write-dev, read-dev, attn-dev (device buffers: the cuda backend,
 * here the driver test double).  The daemon has blocks of 64 KiB, 8192
 * of them, tenants "victim" and "attack" and a short --shrink-delay-ms.
 * Exit 0 pass, 1 fail, 2 usage, 77 no CUDA driver for a device kind.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvpool_proto.h"
#include "kvkern.h"
#include "cuda_drv.h"

/* set-up failures end the run; a failed check ends the kind */
#define DIE(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL: " __VA_ARGS__); \
	fputc('\n', stderr); bad = 1; } } while (0)

/*
 * Every attacker's blocks: NB of T tokens (the layout below, 64 KiB
 * blocks: T = 64), the sequence of SPLICE and COMPACT; ATTN and SCORE
 * read the first NBA of them.  The sizes make each op take tens to
 * hundreds of milliseconds on a CPU.
 */
#define NCONN		3		/* attacking connections */
#define NB		2048
#define NBA		1024
#define NGROW		512		/* the grower's blocks */
#define NSUM		256		/* BLOCK_SUM blocks */
#define NTOK		16384		/* WRITE_KV / READ_KV tokens */
#define NCOPY		2048		/* COPY pairs */
#define NSWAP		1024		/* SWAP blocks, distinct below */
#define ATTN_BATCH	1
#define QHEADS		16
#define SCORE_NQ	1
#define DEV_WTOK	8192		/* WRITE_KV_DEV tokens */
#define DEV_RTOK	128		/* READ_KV_DEV tokens (emulated kernel) */
#define DEV_NBA		4		/* ATTN_DEV blocks (emulated kernels) */
#define DEV_BYTES	(16ULL << 20)
/* An op past the gate keeps the victim waiting for the whole attack; one
 * op's own work is bounded, and the cuda backend's lock is taken in turn,
 * so the victim waits for at most one op of each attacker (with a plain
 * mutex the three attackers took it back to back and kept the victim's
 * host-region writes waiting for up to 4 s of an 8 s attack).  The
 * victim's slowest call may take half the attack, and at least 2 s. */
#define VICTIM_MAX_MS(seconds) \
	((seconds) * 500.0 > 2000.0 ? (seconds) * 500.0 : 2000.0)
#define REPLY_WAIT_S	60

/* region offsets of an attacker */
#define OFF_TAB		0ULL			/* u32 [NB] */
#define OFF_TBLK	(64ULL << 10)		/* u32 [NSWAP], tier 1 */
#define OFF_CTX		(128ULL << 10)		/* u32 [ATTN_BATCH] */
#define OFF_ATAB	(192ULL << 10)		/* u32 [ATTN_BATCH][NBA] */
#define OFF_SLOTS	(256ULL << 10)		/* u32 [NTOK] */
#define OFF_TOKB	(512ULL << 10)		/* u32 [NTOK] */
#define OFF_SRC		(768ULL << 10)		/* u32 [NCOPY / NSWAP] */
#define OFF_DST		(832ULL << 10)		/* u32 [NCOPY] */
#define OFF_SUMS	(896ULL << 10)		/* u64 [NSUM] */
#define OFF_KEEP	(1ULL << 20)		/* u32 [NB * 64] */
#define OFF_Q		(2ULL << 20)		/* float, < 1 MiB */
#define OFF_OUT		(3ULL << 20)		/* float, < 1 MiB */
#define OFF_K		(8ULL << 20)		/* float [NTOK][row] */
#define OFF_V		(40ULL << 20)
#define ATTACK_REGION	(72ULL << 20)

static const char *sock_path;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static double now_msf(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- one connection, raw protocol (thread-safe: its own buffers) ------- */

struct conn {
	int fd;
	uint32_t id;
	uint8_t *region;
	uint64_t region_bytes;
	uint8_t *rbuf;			/* KVP_MSG_MAX */
};

static int conn_connect(struct conn *c)
{
	struct timeval tv = { .tv_sec = REPLY_WAIT_S };
	struct sockaddr_un sa;

	memset(c, 0, sizeof(*c));
	c->rbuf = malloc(KVP_MSG_MAX);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (!c->rbuf || c->fd < 0 ||
	    connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	/* a reply that never comes is a failure, not a hang */
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

/* Send one request (with @sendfd, if any); its req_id, or -errno. */
static int64_t conn_send(struct conn *c, uint16_t op, const void *body,
			 size_t blen, int sendfd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	uint8_t msg[sizeof(struct kvp_hdr) + 1024] __attribute__((aligned(16)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	struct iovec iov = { .iov_base = msg };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (blen > sizeof(msg) - sizeof(*h))
		return -EMSGSIZE;
	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = ++c->id;
	if (blen)
		memcpy(h + 1, body, blen);
	iov.iov_len = h->len;
	if (sendfd >= 0) {
		struct cmsghdr *cmh;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		cmh = CMSG_FIRSTHDR(&mh);
		cmh->cmsg_level = SOL_SOCKET;
		cmh->cmsg_type = SCM_RIGHTS;
		cmh->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cmh), &sendfd, sizeof(int));
	}
	if (sendmsg(c->fd, &mh, MSG_NOSIGNAL) < 0)
		return -1000 - errno;
	return h->req_id;
}

/* The reply to request @id (replies come in order): its status. */
static int conn_recv(struct conn *c, uint32_t id)
{
	struct kvp_reply *rep = (struct kvp_reply *)c->rbuf;
	ssize_t n;

	/* skip asynchronous records (reclaim targets, swap completions) */
	do {
		n = recv(c->fd, c->rbuf, KVP_MSG_MAX, 0);
	} while (n >= (ssize_t)sizeof(*rep) && rep->hdr.req_id != id);
	if (n < (ssize_t)sizeof(*rep))
		return n < 0 && errno == EAGAIN ? -ETIMEDOUT : -2000;
	return rep->status;
}

/* One request; its reply's status (body at reply_body()). */
static int conn_op(struct conn *c, uint16_t op, const void *body, size_t blen,
		   int sendfd)
{
	int64_t id = conn_send(c, op, body, blen, sendfd);

	return id < 0 ? (int)id : conn_recv(c, (uint32_t)id);
}

static void *reply_body(struct conn *c)
{
	return c->rbuf + sizeof(struct kvp_reply);
}

/* HELLO with a sealed region of @bytes, as @tenant. */
static int conn_open(struct conn *c, const char *tenant, uint64_t bytes)
{
	struct kvp_hello h;
	int mfd, r;

	r = conn_connect(c);
	if (r)
		return r;
	mfd = memfd_create("e2e-gate", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || ftruncate(mfd, (off_t)bytes) ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK))
		return -errno;
	c->region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
			 0);
	if (c->region == MAP_FAILED)
		return -errno;
	c->region_bytes = bytes;
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_REGION;
	h.region_bytes = bytes;
	snprintf(h.tenant, sizeof(h.tenant), "%s", tenant);
	r = conn_op(c, KVP_OP_HELLO, &h, sizeof(h), mfd);
	close(mfd);
	return r < 0 ? r : 0;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->region && c->region != MAP_FAILED)
		munmap(c->region, c->region_bytes);
	free(c->rbuf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/* The layout of every connection here: 1 layer, 2 KV heads of 128, BF16
 * (1 KiB per token); its tokens per block, or -errno. */
static int declare_layout(struct conn *c, uint32_t *tpb)
{
	struct kvp_layout l = { .layers = 1, .kv_heads = 2, .head_dim = 128,
				.dtype = KVK_BF16 };
	const struct kvp_layout_reply *lr = reply_body(c);
	int r = conn_op(c, KVP_OP_LAYOUT, &l, sizeof(l), -1);

	if (r < 0)
		return r;
	if (lr->layout_id != 0)
		return -EPROTO;
	*tpb = lr->tokens_per_block;
	return 0;
}

static int lease(struct conn *c, uint32_t n, uint32_t *out)
{
	struct kvp_lease q = { .count = n, .timeout_ns = 10000000000ULL };
	int r = conn_op(c, KVP_OP_LEASE, &q, sizeof(q), -1);

	if (r != (int)n)
		return r < 0 ? r : -EIO;
	memcpy(out, reply_body(c), (size_t)n * 4);
	return 0;
}

static int pool_mapped(struct conn *c, uint64_t *bytes)
{
	int r = conn_op(c, KVP_OP_POOL_STATUS, NULL, 0, -1);

	if (r < 0)
		return r;
	*bytes = ((const struct kvp_pool_rec *)reply_body(c))->mapped_bytes;
	return 0;
}

/* ---- the attack ---------------------------------------------------------- */

struct kind;

struct attacker {
	pthread_t th;
	const struct kind *k;
	struct conn c;
	uint32_t tpb;
	uint32_t blocks[NB];
	uint32_t buf_id;
	int dev_fd;			/* exported device buffer */
	CUmemGenericAllocationHandle dev_h;
	uint16_t op;			/* the request it repeats */
	uint8_t body[1024];
	size_t blen;
	unsigned long ops;
	double ms_sum, ms_max;
	int err;
};

struct kind {
	const char *name;
	bool dev;
	int (*setup)(struct attacker *a);
	int (*op)(struct attacker *a);
};

static volatile uint64_t stop_at = UINT64_MAX;

/* kind->op: the request the attacker repeats */
static int attack_req(struct attacker *a, uint16_t op, const void *body,
		      size_t blen)
{
	if (blen > sizeof(a->body))
		return -EMSGSIZE;
	a->op = op;
	memcpy(a->body, body, blen);
	a->blen = blen;
	return 0;
}

/*
 * The same request back to back, the next one always sent before the
 * reply to the last one is read: the connection's thread in the daemon
 * goes from one op straight to the next, without waiting for this
 * process.
 */
static void *attack_main(void *arg)
{
	struct attacker *a = arg;
	int64_t id, next;
	double t0 = now_msf(), t1;
	int r;

	id = conn_send(&a->c, a->op, a->body, a->blen, -1);
	while (id >= 0 && now_ms() < stop_at) {
		next = conn_send(&a->c, a->op, a->body, a->blen, -1);
		r = conn_recv(&a->c, (uint32_t)id);
		t1 = now_msf();
		if (r || next < 0) {
			a->err = r ? r : (int)next;
			return NULL;
		}
		a->ops++;
		a->ms_sum += t1 - t0;
		if (t1 - t0 > a->ms_max)
			a->ms_max = t1 - t0;
		t0 = t1;
		id = next;
	}
	r = id < 0 ? (int)id : conn_recv(&a->c, (uint32_t)id);
	if (r)
		a->err = r;
	return NULL;
}

static uint32_t *u32_at(struct attacker *a, uint64_t off)
{
	return (uint32_t *)(a->c.region + off);
}

/* tokens [0, n) over the blocks in order, every slot of each */
static void token_slots(struct attacker *a, uint32_t n)
{
	uint32_t i, *b = u32_at(a, OFF_TOKB), *s = u32_at(a, OFF_SLOTS);

	for (i = 0; i < n; i++) {
		b[i] = a->blocks[(i / a->tpb) % NB];
		s[i] = i % a->tpb;
	}
}

static int setup_kv(struct attacker *a)
{
	uint64_t row = 2 * 128;
	float *k = (float *)(a->c.region + OFF_K);
	uint64_t i;

	token_slots(a, NTOK);
	for (i = 0; i < (uint64_t)NTOK * row; i += 97)
		k[i] = (float)(i % 13) / 16.0f;
	return 0;
}

static int op_kv(struct attacker *a, uint16_t op)
{
	struct kvp_kv q = { .layer = 0, .ntok = NTOK, .off_blocks = OFF_TOKB,
			    .off_slots = OFF_SLOTS, .off_k = OFF_K,
			    .off_v = OFF_V };

	return attack_req(a, op, &q, sizeof(q));
}

static int op_write(struct attacker *a)
{
	return op_kv(a, KVP_OP_WRITE_KV);
}

static int op_read(struct attacker *a)
{
	return op_kv(a, KVP_OP_READ_KV);
}

static int setup_attn(struct attacker *a)
{
	uint32_t b, *ctx = u32_at(a, OFF_CTX);

	for (b = 0; b < ATTN_BATCH; b++) {
		ctx[b] = NBA * a->tpb;
		memcpy(u32_at(a, OFF_ATAB) + (uint64_t)b * NBA, a->blocks,
		       NBA * 4);
	}
	return 0;
}

static int op_attn(struct attacker *a)
{
	struct kvp_attn q = { .layer = 0, .batch = ATTN_BATCH,
			      .q_heads = QHEADS, .max_blocks_per_seq = NBA,
			      .off_q = OFF_Q, .off_tables = OFF_ATAB,
			      .off_ctx = OFF_CTX, .off_out = OFF_OUT };

	return attack_req(a, KVP_OP_ATTN, &q, sizeof(q));
}

static int setup_copy(struct attacker *a)
{
	uint32_t i;

	for (i = 0; i < NCOPY; i++) {
		u32_at(a, OFF_SRC)[i] = a->blocks[i % (NB / 2)];
		u32_at(a, OFF_DST)[i] = a->blocks[NB / 2 + i % (NB / 2)];
	}
	return 0;
}

static int op_copy(struct attacker *a)
{
	struct kvp_copy q = { .n = NCOPY, .off_src = OFF_SRC,
			      .off_dst = OFF_DST };

	return attack_req(a, KVP_OP_COPY, &q, sizeof(q));
}

static int setup_table(struct attacker *a)
{
	memcpy(u32_at(a, OFF_TAB), a->blocks, sizeof(a->blocks));
	return 0;
}

static int setup_splice(struct attacker *a)
{
	struct kvp_layout_rope q = { .layout_id = 0, .style = KVP_ROPE_NEOX,
				     .base = 10000.0f };

	setup_table(a);
	return conn_op(&a->c, KVP_OP_LAYOUT_ROPE, &q, sizeof(q), -1);
}

/* every key of the sequence turned by one position, in place */
static int op_splice(struct attacker *a)
{
	struct kvp_splice q = { .nblocks = NB, .len = NB * a->tpb, .at = 0,
				.delta = 1, .off_table = OFF_TAB };

	return attack_req(a, KVP_OP_SPLICE, &q, sizeof(q));
}

static int setup_compact(struct attacker *a)
{
	uint32_t i, n = NB * a->tpb;

	setup_table(a);
	for (i = 0; i + 1 < n; i++)
		u32_at(a, OFF_KEEP)[i] = i + 1;
	return 0;
}

/* every slot but the first moves down by one */
static int op_compact(struct attacker *a)
{
	struct kvp_compact q = { .nblocks = NB, .len = NB * a->tpb,
				 .nkeep = NB * a->tpb - 1, .off_table = OFF_TAB,
				 .off_keep = OFF_KEEP };

	return attack_req(a, KVP_OP_COMPACT, &q, sizeof(q));
}

static int op_score(struct attacker *a)
{
	struct kvp_score q = { .layer = 0, .q_heads = QHEADS,
			       .n_q = SCORE_NQ, .len = NBA * a->tpb,
			       .nblocks = NBA, .off_q = OFF_Q,
			       .off_table = OFF_TAB, .off_out = OFF_OUT };

	return attack_req(a, KVP_OP_SCORE, &q, sizeof(q));
}

static int op_block_sum(struct attacker *a)
{
	struct kvp_block_sum q = { .tier = 0, .n = NSUM, .off_blocks = OFF_TAB,
				   .off_sums = OFF_SUMS };

	return attack_req(a, KVP_OP_BLOCK_SUM, &q, sizeof(q));
}

static int setup_swap(struct attacker *a)
{
	struct kvp_tier_attach at = { .tier = 1 };
	struct kvp_tier_lease tl = { .tier = 1, .count = NSWAP,
				     .timeout_ns = 10000000000ULL };
	uint32_t i;
	int r;

	r = conn_op(&a->c, KVP_OP_TIER_ATTACH, &at, sizeof(at), -1);
	if (r < 0)
		return r;
	r = conn_op(&a->c, KVP_OP_TIER_LEASE, &tl, sizeof(tl), -1);
	if (r != NSWAP)
		return r < 0 ? r : -EIO;
	memcpy(u32_at(a, OFF_TBLK), reply_body(&a->c), NSWAP * 4);
	for (i = 0; i < NSWAP; i++)
		u32_at(a, OFF_SRC)[i] = a->blocks[i % NB];
	return 0;
}

static int op_swap(struct attacker *a)
{
	struct kvp_swap q = { .src_tier = 0, .dst_tier = 1, .n = NSWAP,
			      .flags = KVP_SWAP_SYNC, .off_src = OFF_SRC,
			      .off_dst = OFF_TBLK };

	return attack_req(a, KVP_OP_SWAP, &q, sizeof(q));
}

/* ---- device buffers (cuda backend) -------------------------------------- */

static struct cuda_drv drv;
static bool drv_open;

static int setup_dev(struct attacker *a)
{
	struct kvp_devbuf q = { .bytes = DEV_BYTES };
	uint32_t b, *ctx = u32_at(a, OFF_CTX);
	int r;

	r = conn_op(&a->c, KVP_OP_DEVBUF_ADD, &q, sizeof(q), a->dev_fd);
	if (r < 0)
		return r;
	a->buf_id = ((const struct kvp_devbuf_reply *)reply_body(&a->c))->buf_id;
	token_slots(a, DEV_WTOK);
	for (b = 0; b < ATTN_BATCH; b++) {
		ctx[b] = DEV_NBA * a->tpb;
		memcpy(u32_at(a, OFF_ATAB) + (uint64_t)b * DEV_NBA, a->blocks,
		       DEV_NBA * 4);
	}
	return 0;
}

static int op_kv_dev(struct attacker *a, uint16_t op)
{
	struct kvp_kv_dev q = { .layer = 0,
				.ntok = op == KVP_OP_WRITE_KV_DEV ? DEV_WTOK :
					DEV_RTOK,
				.buf_id = a->buf_id, .off_blocks = OFF_TOKB,
				.off_slots = OFF_SLOTS, .dev_k = 0,
				.dev_v = DEV_BYTES / 2 };

	return attack_req(a, op, &q, sizeof(q));
}

static int op_write_dev(struct attacker *a)
{
	return op_kv_dev(a, KVP_OP_WRITE_KV_DEV);
}

static int op_read_dev(struct attacker *a)
{
	return op_kv_dev(a, KVP_OP_READ_KV_DEV);
}

static int op_attn_dev(struct attacker *a)
{
	struct kvp_attn_dev q = { .layer = 0, .batch = ATTN_BATCH,
				  .q_heads = QHEADS,
				  .max_blocks_per_seq = DEV_NBA,
				  .buf_id = a->buf_id, .off_tables = OFF_ATAB,
				  .off_ctx = OFF_CTX, .dev_q = 0,
				  .dev_out = DEV_BYTES / 2 };

	return attack_req(a, KVP_OP_ATTN_DEV, &q, sizeof(q));
}

/* an exportable device allocation of @bytes: its descriptor, or -1 */
static int export_alloc(size_t bytes, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;
	int fd = -1;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	if (drv.cuMemCreate(h, bytes, &prop, 0) ||
	    drv.cuMemExportToShareableHandle(&fd, *h,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
		return -1;
	return fd;
}

static const struct kind kinds[] = {
	{ "write", false, setup_kv, op_write },
	{ "read", false, setup_kv, op_read },
	{ "attn", false, setup_attn, op_attn },
	{ "copy", false, setup_copy, op_copy },
	{ "splice", false, setup_splice, op_splice },
	{ "compact", false, setup_compact, op_compact },
	{ "score", false, setup_table, op_score },
	{ "block-sum", false, setup_table, op_block_sum },
	{ "swap", false, setup_swap, op_swap },
	{ "write-dev", true, setup_dev, op_write_dev },
	{ "read-dev", true, setup_dev, op_read_dev },
	{ "attn-dev", true, setup_dev, op_attn_dev },
};

/* ---- the victim and the probe ---------------------------------------------- */

struct probe {
	pthread_t th;
	struct conn c;
	uint64_t low;
	unsigned int n;
	int err;
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	uint64_t m;

	while (now_ms() < stop_at) {
		int r = pool_mapped(&p->c, &m);

		if (r) {
			p->err = r;
			break;
		}
		if (m < p->low)
			p->low = m;
		p->n++;
		usleep(20000);
	}
	return NULL;
}

/* one token of the victim's block: k = v = @val in every element */
static int victim_write(struct conn *c, uint32_t block, float val, bool write)
{
	struct kvp_kv q = { .layer = 0, .ntok = 1, .off_blocks = 0,
			    .off_slots = 64, .off_k = 4096, .off_v = 8192 };
	float *k = (float *)(c->region + 4096), *v = (float *)(c->region + 8192);
	int i;

	memcpy(c->region, &block, 4);
	memset(c->region + 64, 0, 4);
	for (i = 0; i < 256; i++)
		k[i] = v[i] = write ? val : -1.0f;
	return conn_op(c, write ? KVP_OP_WRITE_KV : KVP_OP_READ_KV, &q,
		       sizeof(q), -1);
}

/* how many of the attackers have done at least @n ops, and any error */
static int attackers_at(const struct attacker *at, unsigned long n, int *err)
{
	int i, k = 0;

	*err = 0;
	for (i = 0; i < NCONN; i++) {
		k += at[i].ops >= n;
		if (at[i].err)
			*err = at[i].err;
	}
	return k;
}

static int run_kind(const struct kind *k, int seconds)
{
	struct attacker at[NCONN];
	struct probe pr;
	struct conn victim, grower;
	uint32_t vblock, tpb, *gb = calloc(NGROW, 4);
	uint64_t mapped_full, t0;
	double worst = 0, lat, ms_sum = 0, ms_max = 0;
	unsigned long calls = 0, ops = 0, all = 0;
	float last = 0.0f, *kk, *vv;
	int i, r, err, bad = 0;

	stop_at = UINT64_MAX;
	memset(at, 0, sizeof(at));
	/* the victim's block and the attackers' come first, the grower's
	 * above them */
	if ((r = conn_open(&victim, "victim", 1 << 20)) ||
	    (r = declare_layout(&victim, &tpb)) ||
	    (r = lease(&victim, 1, &vblock)))
		DIE("%s: victim: %s", k->name, strerror(-r));
	for (i = 0; i < NCONN; i++) {
		struct attacker *a = &at[i];

		a->k = k;
		a->dev_fd = -1;
		if (k->dev) {
			a->dev_fd = export_alloc(DEV_BYTES, &a->dev_h);
			if (a->dev_fd < 0)
				DIE("%s: device buffer", k->name);
		}
		if ((r = conn_open(&a->c, "attack", ATTACK_REGION)) ||
		    (r = declare_layout(&a->c, &a->tpb)) ||
		    (r = lease(&a->c, NB, a->blocks)) || (r = k->setup(a)) ||
		    (r = k->op(a)))
			DIE("%s: attacker %d set-up: %s", k->name, i,
			    strerror(-r));
		if (a->dev_fd >= 0)
			close(a->dev_fd);
	}
	for (i = 0; i < NCONN; i++)
		pthread_create(&at[i].th, NULL, attack_main, &at[i]);
	/* every attacker looping */
	t0 = now_ms();
	while (attackers_at(at, 2, &err) < NCONN && !err &&
	       now_ms() - t0 < 30000)
		usleep(5000);
	if (attackers_at(at, 2, &err) < NCONN)
		DIE("%s: the attack does not run: %s", k->name,
		    err ? strerror(-err) : "too slow");
	/* the pool grows by NGROW blocks and they come back: an unmap is
	 * due */
	if ((r = conn_open(&grower, "", 1 << 20)) ||
	    (r = lease(&grower, NGROW, gb)))
		DIE("%s: grower: %s", k->name, strerror(-r));
	memset(&pr, 0, sizeof(pr));
	pr.low = UINT64_MAX;
	if ((r = conn_connect(&pr.c)) || (r = pool_mapped(&pr.c, &mapped_full)))
		DIE("%s: pool status: %s", k->name, strerror(-r));
	for (i = 0; i < NCONN; i++)
		ops += at[i].ops;
	stop_at = now_ms() + (uint64_t)seconds * 1000;
	conn_close(&grower);
	pthread_create(&pr.th, NULL, probe_main, &pr);

	/* another tenant's calls meanwhile */
	r = 0;
	while (!r && now_ms() < stop_at) {
		double t1 = now_msf();

		last = (float)(calls % 64);
		r = victim_write(&victim, vblock, last, true);
		lat = now_msf() - t1;
		if (lat > worst)
			worst = lat;
		calls++;
		usleep(20000);
	}
	if (r)
		stop_at = 0;
	for (i = 0; i < NCONN; i++) {
		pthread_join(at[i].th, NULL);
		all += at[i].ops;
		ms_sum += at[i].ms_sum;
		if (at[i].ms_max > ms_max)
			ms_max = at[i].ms_max;
	}
	pthread_join(pr.th, NULL);
	ops = all - ops;
	printf("%-9s %d connections: %lu ops in %d s (mean %.0f ms, slowest "
	       "%.0f ms); victim: %lu calls, slowest %.0f ms; mapped %llu -> "
	       "%llu bytes while the attack ran\n", k->name, NCONN, ops,
	       seconds, ms_sum / (double)(all ? all : 1), ms_max, calls,
	       worst, (unsigned long long)mapped_full,
	       (unsigned long long)pr.low);
	CHECK(!r, "%s: victim's write: %s", k->name, strerror(-r));
	for (i = 0; i < NCONN; i++)
		CHECK(!at[i].err, "%s: attacker %d: %s", k->name, i,
		      strerror(-at[i].err));
	CHECK(!pr.err && pr.n, "%s: probe: %s", k->name, strerror(-pr.err));
	CHECK(ops, "%s: the attack made no progress", k->name);
	CHECK(worst <= VICTIM_MAX_MS(seconds),
	      "%s: another tenant's call took %.0f ms during the attack",
	      k->name, worst);
	CHECK(pr.low < mapped_full,
	      "%s: the due unmap did not run while the attack ran", k->name);
	/* the victim's block holds what it wrote last */
	r = victim_write(&victim, vblock, 0.0f, false);
	CHECK(!r, "%s: victim's read: %s", k->name, strerror(-r));
	kk = (float *)(victim.region + 4096);
	vv = (float *)(victim.region + 8192);
	for (i = 0; !r && i < 256; i++)
		if (kk[i] != last || vv[i] != last) {
			CHECK(0, "%s: victim reads k %g v %g, wrote %g",
			      k->name, kk[i], vv[i], last);
			break;
		}
	for (i = 0; i < NCONN; i++) {
		conn_close(&at[i].c);
		if (k->dev)
			drv.cuMemRelease(at[i].dev_h);
	}
	conn_close(&pr.c);
	conn_close(&victim);
	free(gb);
	return bad;
}

int main(int argc, char **argv)
{
	int seconds, i, n, bad = 0;

	if (argc < 4)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sock_path = argv[1];
	seconds = atoi(argv[2]);
	if (seconds <= 0)
		return 2;
	for (i = 3; i < argc; i++) {
		const struct kind *k = NULL;

		for (n = 0; n < (int)(sizeof(kinds) / sizeof(kinds[0])); n++)
			if (!strcmp(argv[i], kinds[n].name))
				k = &kinds[n];
		if (!k) {
			fprintf(stderr, "unknown kind %s\n", argv[i]);
			return 2;
		}
		if (k->dev && !drv_open) {
			if (cuda_drv_open(&drv) || drv.cuInit(0)) {
				printf("no CUDA driver\n");
				return 77;
			}
			drv_open = true;
		}
		if (run_kind(k, seconds))
			bad = 1;
	}
	if (!bad)
		printf("PASS: every op kind lets the owner's unmap and other "
		       "tenants through\n");
	return bad;
}
