// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: kvpoold's request handling, in-process, driven by a
 * program of steps (Documentation/fuzzing.rst).
 *
 * The harness sets up a real daemon once (kvd_setup(): cpu backend,
 * in-process ledger, a top pool of 256 blocks, a DRAM tier and an NVMe
 * tier in a temporary file, prefix demotion with the prefix threads
 * started) and plays each input as a program over up to NCONN
 * connections, each with a shared region of its own: socketpairs
 * (kvd_client_new(), served in the harness's thread by
 * kvd_client_serve()), or connections through the daemon's socket, taken
 * by kvd_accept() and served by their own connection thread.  A step is one of: HELLO (a tenant of a small
 * set), LEASE, RELEASE, LAYOUT and LAYOUT_MODEL, K/V writes (a sequence
 * appended slot by slot) and reads, ATTN, SCORE, COPY, the edits (RoPE,
 * SPLICE, COMPACT), PREFIX_PUBLISH / MATCH / UNREF / EVICT, TIER_ATTACH /
 * LEASE / RELEASE, SWAP out and in (sync or not), SWAP_WAIT, BLOCK_SUM,
 * SEQ_REPORT, device buffers, ATTACH to another tenant, the admin ops
 * (tenants, namespaces, flushes, every list), a close of a connection
 * (by the daemon or by the peer), the owner's duties, running queued
 * swap jobs, or a raw record.  Run as root, the harness opens some
 * connections as nobody: peers that are not admins.
 *
 * Each request is built valid from the input, from what the connection
 * holds now (its blocks, read from the ledger; the cached blocks it
 * references; its layouts), and then, when the input says so, one thing
 * is broken: a field of the body, the header, the size, the descriptors,
 * or a block of another connection put in a table.
 *
 * The swap workers are held (swap.c under KVD_FUZZ_HOLD): a queued job
 * runs only when a step says so, so that publishes, evictions, releases
 * and closes meet queued jobs the same way on every run.
 *
 * Oracles, after every step (abort() on a violation):
 *  - every queued swap job's blocks are still in the leases it pinned
 *    (walked in the ledgers, closing leases included);
 *  - what a connection reads back (READ_KV's values) is its own tenant's
 *    or zeros, or a tenant's it shares a prefix namespace with: each
 *    tenant writes a value of its own (a power of 4), and a block granted
 *    to another tenant must read as zeros (scrub.c);
 *  - the daemon logs nothing at error level (kvd_log is wrapped at link
 *    time: -Wl,--wrap=kvd_log);
 *  - every reply is well formed, one per request, with its req_id.
 * ASan/UBSan/LSan report memory errors and leaks.  At the end of an input
 * every connection is closed, the queued jobs run, the caches are flushed
 * and forgotten, tenants deleted and the pools shrink, so every input
 * starts from the same state.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvpoold.h"
#include "prefix.h"
#include "swap.h"
#include "inproc.h"
#include "prefix_tier.h"
#include "cluster.h"

#define NCONN		4
#define REGION_BYTES	(1U << 20)
#define MAX_STEPS	96
/* The region of a connection: index arrays, then data. */
#define OFF_A		0x00000U	/* u32 tables: blocks */
#define OFF_B		0x04000U	/* u32 tables: blocks, results */
#define OFF_C		0x08000U	/* u32: slots, ctx, keep */
#define OFF_TOK		0x0c000U	/* u32 token ids */
#define OFF_SUMS	0x14000U	/* u64 sums */
#define OFF_K		0x20000U
#define OFF_V		0x50000U
#define OFF_Q		0x80000U
#define OFF_OUT		0xb0000U
#define DATA_BYTES	0x30000U

struct in {
	const uint8_t *p;
	size_t n;
};

static unsigned int rd8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static unsigned int rd16(struct in *in)
{
	unsigned int lo = rd8(in);

	return lo | rd8(in) << 8;
}

static uint32_t rd32(struct in *in)
{
	uint32_t lo = rd16(in);

	return lo | (uint32_t)rd16(in) << 16;
}

static void rdbytes(struct in *in, void *dst, size_t len)
{
	size_t k = len < in->n ? len : in->n;

	memcpy(dst, in->p, k);
	memset((uint8_t *)dst + k, 0, len - k);
	in->p += k;
	in->n -= k;
}

/* ---- the daemon, and its log ------------------------------------------- */

static struct kvd d;
static char sock_path[64], nvme_path[64];
static int null_fd = -1, unsealed_fd = -1;
static bool ready, trace;

void __real_kvd_log(int level, const char *fmt, ...);
void __wrap_kvd_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Every message of the daemon comes here (the link wraps kvd_log). */
void __wrap_kvd_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > KVD_ERR && !getenv("FUZZ_REQUEST_LOG"))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "kvpoold: %d: ", level);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	if (level <= KVD_ERR && ready) {
		fprintf(stderr, "fuzz-request: the daemon logged an error\n");
		abort();
	}
}

/* ---- connections --------------------------------------------------------- */

struct lay {
	uint32_t id, tpb, layers, kvh, hd, dtype;
	bool model, canon;
};

struct conn {
	struct kvd_client *c;
	int sock;
	int rfd;
	uint8_t *reg;
	bool hello;
	bool noncanon;			/* has a layout of another format */
	bool thr;			/* served by its own thread */
	uint64_t tlease[KVD_MAX_TIERS];	/* [0]: the top lease */
	struct lay l[KVP_MAX_LAYOUTS];
	unsigned int nl;
	uint64_t last_ticket;
	uint32_t seq_len;		/* the sequence it appends to */
};

static struct conn cs[NCONN];
static uint32_t req_seq;

/* What each input plays with (chosen by its first bytes). */
static struct {
	uint32_t layers, kvh, hd, dtype;
	bool demote_ok;
} canon;

/* Tenants: the harness's names (and "" for the per-uid tenant). */
static const char *const tnames[] = { "fa", "fb", "fc", "" };
#define NTEN 4
/* Markers: the three names, another per-uid tenant, nobody's. */
#define NMARK 5
#define NOBODY 65534
static const char *const nsnames[] = { "n1", "n2", "" };
/* Per input: which tenants have been in each shared namespace. */
static unsigned int ns_members[2];
/* Per input: something was written in another format (values mean
 * nothing as the canonical layout reads them). */
static bool foreign_format;

/* The tenant index of a name: the harness's names, nobody's per-uid
 * tenant (4), else 3. */
static unsigned int tidx(const char *name)
{
	char uid[16];
	unsigned int i;

	for (i = 0; i < 3; i++)
		if (!strncmp(name, tnames[i], KVPOOL_NAME_LEN))
			return i;
	snprintf(uid, sizeof(uid), "%u", NOBODY);
	return strstr(name, uid) ? 4 : 3;
}

static float marker(unsigned int t)
{
	return (float)(1U << (2 * t));
}

/* ---- breaking one thing ------------------------------------------------- */

enum brk_kind {
	BRK_NONE, BRK_FIELD, BRK_SIZE, BRK_HDR, BRK_FDS, BRK_FOREIGN,
	BRK_KINDS
};

static struct {
	enum brk_kind kind;
	uint32_t where, val;
} fz;

/* Read what the next step breaks, if anything (most steps: nothing). */
static void fz_read(struct in *in)
{
	unsigned int b = rd8(in);

	memset(&fz, 0, sizeof(fz));
	if (b < 192)
		return;
	fz.kind = (enum brk_kind)(1 + (b - 192) % (BRK_KINDS - 1));
	fz.where = rd8(in);
	switch (rd8(in) % 6) {
	case 0: fz.val = 0; break;
	case 1: fz.val = 1; break;
	case 2: fz.val = UINT32_MAX; break;
	case 3: fz.val = 0x80000000U; break;
	case 4: fz.val = rd8(in); break;
	default: fz.val = rd32(in); break;
	}
}

/* ---- the wire --------------------------------------------------------------- */

static uint8_t reply[KVP_MSG_MAX] __attribute__((aligned(16)));
static size_t reply_len;

static int send_record(int sock, const void *msg, size_t len, int rfd,
		       unsigned int fdmask)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 3)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[3], n = 0;

	if ((fdmask & 1) && rfd >= 0)
		fds[n++] = rfd;
	if (fdmask & 2)
		fds[n++] = null_fd;
	if (fdmask & 4)
		fds[n++] = unsealed_fd;
	if (n) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -errno : 0;
}

/*
 * Read every record queued; the one reply must answer @req_id.  Its
 * status, or INT32_MIN when there was none.  @wait: a connection thread
 * serves the request, wait for its reply (*@eof: the connection ended
 * instead).
 */
static int32_t drain(int sock, bool want, uint32_t req_id, bool valid_hdr,
		     bool wait, bool *eof)
{
	static uint8_t buf[KVP_MSG_MAX] __attribute__((aligned(16)));
	int replies = 0;
	int32_t st = INT32_MIN;

	reply_len = 0;
	for (;;) {
		const struct kvp_reply *r = (const void *)buf;
		ssize_t n;

		if (wait && !replies) {
			struct pollfd pf = { .fd = sock, .events = POLLIN };

			if (poll(&pf, 1, 60000) <= 0) {
				fprintf(stderr, "fuzz-request: no reply from "
					"a connection thread in 60 s\n");
				abort();
			}
		}
		n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 && wait && !replies) {
			*eof = true;
			return st;
		}
		if (n <= 0)
			break;
		if ((size_t)n < sizeof(*r) || r->hdr.magic != KVP_MAGIC ||
		    r->hdr.len != (uint32_t)n) {
			fprintf(stderr, "fuzz-request: malformed reply\n");
			abort();
		}
		if (r->hdr.op == KVP_EV_RECLAIM || r->hdr.op == KVP_EV_SWAP_DONE ||
		    r->hdr.op == KVP_EV_REFUSED)
			continue;
		replies++;
		if (valid_hdr && r->hdr.req_id != req_id) {
			fprintf(stderr, "fuzz-request: reply to req %u for req %u\n",
				r->hdr.req_id, req_id);
			abort();
		}
		st = r->status;
		if (st < 0 && (size_t)n != sizeof(*r)) {
			fprintf(stderr, "fuzz-request: an error with a body\n");
			abort();
		}
		memcpy(reply, buf + sizeof(*r), (size_t)n - sizeof(*r));
		reply_len = (size_t)n - sizeof(*r);
	}
	if (want && replies != 1) {
		fprintf(stderr, "fuzz-request: %d replies to one request\n", replies);
		abort();
	}
	return st;
}

static void conn_close(struct conn *k, bool by_peer);

/* Keep one input short: these limits are far below the daemon's own. */
static void clamp(uint16_t op, void *body, size_t len)
{
	if (op == KVP_OP_LEASE && len >= sizeof(struct kvp_lease)) {
		struct kvp_lease *l = body;

		l->flags |= KVPOOL_LEASE_NONBLOCK;
	} else if (op == KVP_OP_ATTN && len >= sizeof(struct kvp_attn)) {
		struct kvp_attn *a = body;

		if (a->batch <= 4096)
			a->batch = a->batch % 65;
		if (a->n_new <= 65536)
			a->n_new = a->n_new % 65;
	} else if ((op == KVP_OP_WRITE_KV || op == KVP_OP_READ_KV) &&
		   len >= sizeof(struct kvp_kv)) {
		struct kvp_kv *k = body;

		if (k->ntok <= 65536)
			k->ntok = k->ntok % 257;
	} else if (op == KVP_OP_TIER_LEASE && len >= sizeof(struct kvp_tier_lease)) {
		struct kvp_tier_lease *l = body;

		l->flags |= KVPOOL_LEASE_NONBLOCK;
	} else if (op == KVP_OP_SWAP_WAIT && len >= sizeof(struct kvp_swap_wait)) {
		struct kvp_swap_wait *w = body;

		/* 0 waits for ever on a job that is held */
		w->timeout_ns = 1 + w->timeout_ns % 1000;
	}
}

/* Is one of @k's leases pinned (a release of it would wait)? */
static bool pinned(const struct conn *k)
{
	struct kvpool_lease *l;
	unsigned int i;
	bool hit = false;

	for (i = 0; i < d.npools; i++) {
		struct kvd_pool *p = &d.pools[i];

		if (!k->tlease[i])
			continue;
		pthread_mutex_lock(&p->lock);
		list_for_each_entry(l, &p->pool->leases, pool_node)
			if (l->id == k->tlease[i] && l->pins)
				hit = true;
		pthread_mutex_unlock(&p->lock);
	}
	return hit;
}

/* Every connection's leases, as the daemon has them now. */
static void refresh(void)
{
	static struct kvp_client_tier_rec recs[32];
	uint32_t total, i, j;
	int n = kvd_fill_client_tiers(&d, recs, 0, 32, &total, (uid_t)-1);

	for (i = 0; i < NCONN; i++) {
		struct conn *k = &cs[i];

		memset(k->tlease, 0, sizeof(k->tlease));
		if (!k->c)
			continue;
		k->tlease[0] = kvd_client_lease_id(k->c);
		for (j = 0; k->tlease[0] && j < (uint32_t)n; j++)
			if (recs[j].lease_id == k->tlease[0])
				memcpy(k->tlease + 1, recs[j].tier_lease + 1,
				       sizeof(k->tlease[0]) *
				       (KVD_MAX_TIERS - 1));
	}
}

static bool canonical(const struct kvk_layout *l)
{
	return l && l->layers == canon.layers && l->kv_heads == canon.kvh &&
	       l->head_dim == canon.hd && l->dtype == canon.dtype;
}

/*
 * What a request (@op as sent, @meant as built) did to the value oracle's
 * knowledge, whatever the step made of it: a layout of another format
 * (then what it writes is not comparable), a namespace joined unseen.
 */
static void after(struct conn *k, uint16_t op, uint16_t meant, int32_t st)
{
	bool clean = fz.kind == BRK_NONE && op == meant;

	if (st < 0 || st == INT32_MIN || !k->c)
		return;
	switch (op) {
	case KVP_OP_LAYOUT:
	case KVP_OP_LAYOUT_MODEL:
		if (reply_len >= sizeof(struct kvp_layout_reply) &&
		    !canonical(kvd_client_layout(k->c,
			((const struct kvp_layout_reply *)reply)->layout_id)))
			k->noncanon = true;
		break;
	case KVP_OP_WRITE_KV: case KVP_OP_SPLICE: case KVP_OP_COMPACT:
	case KVP_OP_WRITE_KV_DEV:
		if (k->noncanon)
			foreign_format = true;
		break;
	case KVP_OP_PREFIX_SHARE:
		if (!clean)
			ns_members[0] = ns_members[1] = (1U << NTEN) - 1;
		break;
	default:
		break;
	}
}

/*
 * Send one request on @k (broken as brk says), serve it and read the
 * reply: its status (INT32_MIN: none; the connection may be gone).  The
 * reply's body is in reply[], reply_len.
 */
static int32_t request(struct conn *k, uint16_t op, const void *body,
		       size_t blen, unsigned int fdmask)
{
	static uint8_t msg[sizeof(struct kvp_hdr) + 2048] __attribute__((aligned(16)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	uint32_t req_id = ++req_seq;
	size_t len;
	bool valid_hdr = true;
	int32_t st;
	int r;

	if (!k->c)
		return INT32_MIN;
	if (blen > sizeof(msg) - sizeof(*h))
		blen = sizeof(msg) - sizeof(*h);
	if (blen)
		memcpy(h + 1, body, blen);
	h->magic = KVP_MAGIC;
	h->op = op;
	h->flags = 0;
	h->req_id = req_id;
	switch (fz.kind) {
	case BRK_FIELD:
		if (blen >= 4) {
			uint32_t w = fz.where % (uint32_t)(blen / 4);

			memcpy((uint8_t *)(h + 1) + w * 4, &fz.val, 4);
		}
		break;
	case BRK_SIZE:
		if (fz.where & 1)
			blen += 4 * (1 + fz.where % 8);
		else
			blen -= blen < 4U * (1 + fz.where % 8) ? blen :
				4U * (1 + fz.where % 8);
		break;
	case BRK_HDR:
		switch (fz.where % 4) {
		case 0: h->magic = fz.val; break;
		case 1: h->op = (uint16_t)fz.val; break;
		case 2: h->flags = (uint16_t)(fz.val | 1); break;
		default: h->len = fz.val; valid_hdr = false; break;
		}
		break;
	case BRK_FDS:
		fdmask ^= 1U << (fz.where % 3);
		break;
	default:
		break;
	}
	len = sizeof(*h) + blen;
	if (valid_hdr)
		h->len = (uint32_t)len;
	if (h->magic != KVP_MAGIC)
		valid_hdr = false;
	clamp(h->op, h + 1, blen);
	/* A release waits for the queued jobs that pin its lease: they run
	 * first (as a worker would run them while it waits). */
	if ((h->op == KVP_OP_RELEASE || h->op == KVP_OP_TIER_RELEASE) &&
	    pinned(k))
		kvd_swap_fuzz_run(&d, 0, 0);
	if (send_record(k->sock, msg, len, k->rfd, fdmask))
		return INT32_MIN;
	if (k->thr) {
		bool eof = false;

		/* its thread serves it (client_main) */
		st = drain(k->sock, true, req_id, valid_hdr, true, &eof);
		r = eof;
	} else {
		r = kvd_client_serve(k->c);
		st = drain(k->sock, !r, req_id, valid_hdr, false, NULL);
	}
	if (h->op != op)
		reply_len = 0;	/* not the reply the step expects */
	after(k, h->op, op, st);
	refresh();
	if (trace)
		fprintf(stderr, "conn %d: op %u%s -> %d\n", (int)(k - cs),
			h->op, fz.kind ? " (broken)" : "", st);
	if (r)
		conn_close(k, false);
	return st;
}

/* ---- what a connection holds -------------------------------------------- */

/* The blocks lease @id holds in @p (closing leases too), up to @max. */
static uint32_t lease_blocks(struct kvd_pool *p, uint64_t id, uint32_t *out,
			     uint32_t max)
{
	struct kvpool_lease *l, *found = NULL;
	uint32_t b, n = 0;

	if (!id)
		return 0;
	pthread_mutex_lock(&p->lock);
	list_for_each_entry(l, &p->pool->leases, pool_node)
		if (l->id == id)
			found = l;
	for (b = 0; found && b < p->pool->capacity && n < max; b++)
		if (p->pool->owner_of[b] == found->slot + 1)
			out[n++] = b;
	pthread_mutex_unlock(&p->lock);
	return n;
}

static bool lease_has(struct kvd_pool *p, uint64_t id, const uint32_t *b,
		      uint32_t n)
{
	struct kvpool_lease *l, *found = NULL;
	uint32_t i;
	bool ok = true;

	pthread_mutex_lock(&p->lock);
	list_for_each_entry(l, &p->pool->leases, pool_node)
		if (l->id == id)
			found = l;
	for (i = 0; i < n && ok; i++)
		ok = found && b[i] < p->pool->capacity &&
		     p->pool->owner_of[b[i]] == found->slot + 1;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

/* The cached blocks @k references, up to @max. */
static uint32_t ref_blocks(struct conn *k, uint32_t *out, uint32_t max)
{
	struct kvd_prefix_conn *pc = *kvd_client_prefix(k->c);
	uint32_t b, n = 0;

	for (b = 0; pc && b < d.top->capacity && n < max; b++)
		if (kvd_prefix_referenced(pc, b))
			out[n++] = b;
	return n;
}

/*
 * @n blocks for a table of @k: its own in tier @tier (and, for reads, the
 * cached ones it references), picked by the input; BRK_FOREIGN puts
 * another connection's block at one place.  The count found.
 */
static uint32_t pick_blocks(struct in *in, struct conn *k, unsigned int tier,
			    bool ro, uint32_t *out, uint32_t n)
{
	uint32_t have[512], nh, i, start;

	nh = lease_blocks(&d.pools[tier], k->tlease[tier], have, 256);
	if (ro && !tier && k->c)
		nh += ref_blocks(k, have + nh, 256);
	start = rd8(in);
	for (i = 0; i < n && nh; i++)
		out[i] = have[(start + i) % nh];
	if (i < n)
		n = i;
	if (fz.kind == BRK_FOREIGN && n) {
		struct conn *o = &cs[fz.where % NCONN];
		uint32_t theirs[256], no;

		no = lease_blocks(&d.pools[tier], o->tlease[tier], theirs, 256);
		if (!no && o->c)
			no = ref_blocks(o, theirs, 256);
		out[fz.val % n] = no ? theirs[fz.val % no] :
				   fz.val % d.pools[tier].capacity;
	}
	return n;
}

static void put_u32(struct conn *k, uint32_t off, const uint32_t *v,
		    uint32_t n)
{
	memcpy(k->reg + off, v, (size_t)n * 4);
}

static void fill_f(struct conn *k, uint32_t off, uint64_t nfloat, float v)
{
	float *f = (float *)(k->reg + off);
	uint64_t i;

	if (nfloat * 4 > DATA_BYTES)
		nfloat = DATA_BYTES / 4;
	for (i = 0; i < nfloat; i++)
		f[i] = v;
}

/* The tenant @k's lease is charged to now, as the ledger says (asking
 * the connection would refresh what it knows: the daemon must do that). */
static unsigned int conn_tenant(struct conn *k)
{
	struct kvpool_lease *l;
	unsigned int t = 3;

	pthread_mutex_lock(&d.top->lock);
	list_for_each_entry(l, &d.top->pool->leases, pool_node)
		if (l->id == k->tlease[0])
			t = tidx(l->tenant->name);
	pthread_mutex_unlock(&d.top->lock);
	return t;
}

static const struct lay *pick_layout(struct in *in, struct conn *k,
				     bool model)
{
	unsigned int i = rd8(in), j;

	for (j = 0; j < k->nl; j++) {
		const struct lay *l = &k->l[(i + j) % k->nl];

		if (!model || l->model)
			return l;
	}
	return NULL;
}

/* ---- the oracles ----------------------------------------------------------- */

static void job_cb(void *arg, const struct kvd_swap_fuzz_job *j)
{
	if (!lease_has(j->src, j->src_lease, j->sb, j->n) ||
	    !lease_has(j->dst, j->dst_lease, j->db, j->n)) {
		fprintf(stderr, "fuzz-request: a queued swap job's blocks "
			"left its lease (%s lease %llu -> %s lease %llu)\n",
			j->src->name, (unsigned long long)j->src_lease,
			j->dst->name, (unsigned long long)j->dst_lease);
		abort();
	}
}

/* Markers tenant @t may read: its own and those of the tenants it has
 * shared a namespace with. */
static unsigned int allowed(unsigned int t)
{
	unsigned int m = 1U << t, i;

	for (i = 0; i < 2; i++)
		if (ns_members[i] & (1U << t))
			m |= ns_members[i];
	return m;
}

/* READ_KV's values (V only: edits rotate keys) of @k, @nf floats at @off. */
static void check_values(struct conn *k, const struct lay *l, uint32_t off,
			 uint64_t nf)
{
	const float *f = (const float *)(k->reg + off);
	unsigned int t = conn_tenant(k), a = allowed(t), i;
	bool exact = l->dtype == KVK_BF16;
	uint64_t j;

	if (foreign_format || !l->canon)
		return;
	/* the quantized formats are checked while no markers can mix */
	if (!exact && a != (1U << t))
		return;
	for (j = 0; j < nf; j++) {
		float v = f[j];
		bool ok = fabsf(v) < 1e-3f;

		for (i = 0; i < NMARK && !ok; i++)
			if (a & (1U << i))
				ok = exact ? v == marker(i) :
				     fabsf(v - marker(i)) <= 0.35f * marker(i);
		if (!ok) {
			fprintf(stderr, "fuzz-request: tenant %u read %g "
				"(value %llu): not its own, not shared "
				"(allowed mask %#x)\n", t, (double)v,
				(unsigned long long)j, a);
			abort();
		}
	}
}

static void check_jobs(void)
{
	kvd_swap_fuzz_each(&d, job_cb, NULL);
}

/* ---- steps ---------------------------------------------------------------- */

/* Close @k: the daemon's end, or (@by_peer) the peer's first, the
 * daemon seeing it gone. */
static unsigned int nclients(void)
{
	unsigned int n;

	pthread_mutex_lock(&d.clients_lock);
	n = d.nclients;
	pthread_mutex_unlock(&d.clients_lock);
	return n;
}

/* A connection thread is done with its client (it frees it as it ends;
 * only the harness ends connections, one at a time). */
static void wait_gone(unsigned int before)
{
	unsigned int i;
	bool there = true;

	for (i = 0; i < 6000 && there; i++) {
		there = nclients() >= before;
		if (there)
			usleep(10000);
	}
	if (there) {
		fprintf(stderr, "fuzz-request: a connection thread did not "
			"end in 60 s\n");
		abort();
	}
}

static void conn_close(struct conn *k, bool by_peer)
{
	if (!k->c)
		return;
	if (k->thr) {
		unsigned int n = nclients();

		/* its thread reads the end of the connection */
		close(k->sock);
		k->sock = -1;
		wait_gone(n);
	} else if (by_peer) {
		close(k->sock);
		k->sock = -1;
		if (!kvd_client_serve(k->c)) {
			fprintf(stderr, "fuzz-request: a closed peer served\n");
			abort();
		}
	}
	if (!k->thr)
		kvd_client_free(k->c);
	if (k->sock >= 0)
		close(k->sock);
	k->thr = false;
	k->c = NULL;
	k->hello = false;
	k->nl = 0;
	k->noncanon = false;
	memset(k->tlease, 0, sizeof(k->tlease));
	k->last_ticket = 0;
	k->seq_len = 0;
}

/*
 * Connect @k.  Run as root, the harness can connect as nobody (not an
 * admin, limited by --max-clients-per-uid): the peer's credentials are
 * those of the socketpair's creator.
 */
static int conn_open_thr(struct conn *k, bool nobody);

static int conn_open(struct conn *k, bool nobody, bool thr)
{
	int sv[2], r;

	if (k->c)
		return 0;
	if (thr)
		return conn_open_thr(k, nobody);
	nobody = nobody && geteuid() == 0;
	if (nobody && seteuid(NOBODY))
		nobody = false;
	r = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
	if (nobody && seteuid(0))
		abort();
	if (r)
		return -errno;
	if (kvd_client_new(&d, sv[0], &k->c)) {
		k->c = NULL;
		drain(sv[1], false, 0, false, false, NULL);	/* the refusal */
		close(sv[1]);
		return -EIO;
	}
	k->sock = sv[1];
	memset(k->reg, 0, REGION_BYTES);
	return 0;
}

/*
 * Connect @k through the daemon's socket: kvd_accept() takes it and
 * starts its connection thread, which serves its requests from then on.
 */
static int conn_open_thr(struct conn *k, bool nobody)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	unsigned int n;
	int fd, r;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	nobody = nobody && geteuid() == 0;
	if (nobody && seteuid(NOBODY))
		nobody = false;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (nobody && seteuid(0))
		abort();
	if (r && nobody)	/* the socket may be root's only */
		r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (r) {
		close(fd);
		return -errno;
	}
	n = nclients();
	kvd_accept(&d);
	/* a new client goes first in the list */
	pthread_mutex_lock(&d.clients_lock);
	if (d.nclients > n)
		k->c = d.clients;
	pthread_mutex_unlock(&d.clients_lock);
	if (!k->c) {
		drain(fd, false, 0, false, false, NULL);	/* refused */
		close(fd);
		return -EIO;
	}
	k->sock = fd;
	k->thr = true;
	memset(k->reg, 0, REGION_BYTES);
	return 0;
}

static void name_set(char *dst, const char *src)
{
	memset(dst, 0, KVP_NAME_LEN);
	snprintf(dst, KVP_NAME_LEN, "%s", src);
}

static void step_hello(struct in *in, struct conn *k)
{
	struct kvp_hello h;
	int32_t st;

	unsigned int t = rd8(in);

	if (conn_open(k, t & 0x80, t & 0x40))
		return;
	memset(&h, 0, sizeof(h));
	h.version = KVP_VERSION;
	h.flags = KVP_HELLO_REGION;
	h.region_bytes = REGION_BYTES;
	name_set(h.tenant, tnames[t % NTEN]);
	st = request(k, KVP_OP_HELLO, &h, sizeof(h), 1);
	if (st == 0 && reply_len >= sizeof(struct kvp_hello_reply)) {
		const struct kvp_hello_reply *r = (const void *)reply;

		k->hello = r->lease_id != 0;
	}
}

static void step_lease(struct in *in, struct conn *k)
{
	unsigned int b = rd8(in);
	struct kvp_lease l = { .count = b & 0x80 ? 32 + b % 96 : 1 + b % 16,
			       .flags = KVPOOL_LEASE_NONBLOCK };

	/* not backed yet: the owner grows the pool, the client asks again */
	if (request(k, KVP_OP_LEASE, &l, sizeof(l), 0) == -EAGAIN) {
		kvd_owner_events(d.top);
		request(k, KVP_OP_LEASE, &l, sizeof(l), 0);
	}
}

static void step_release(struct in *in, struct conn *k, unsigned int tier)
{
	uint8_t buf[sizeof(struct kvp_tier_release) + 64 * 4];
	uint32_t b[64], n = rd8(in) % 9;
	bool all = n == 0;

	n = all ? 0 : pick_blocks(in, k, tier, false, b, n);
	if (!all && !n)
		return;
	if (!tier) {
		struct kvp_release *rl = (void *)buf;

		rl->count = n;
		rl->flags = all ? KVPOOL_RELEASE_ALL : 0;
		memcpy(rl + 1, b, n * 4);
		request(k, KVP_OP_RELEASE, buf, sizeof(*rl) + n * 4, 0);
	} else {
		struct kvp_tier_release *rl = (void *)buf;

		memset(rl, 0, sizeof(*rl));
		rl->tier = tier;
		rl->count = n;
		rl->flags = all ? KVPOOL_RELEASE_ALL : 0;
		memcpy(rl + 1, b, n * 4);
		request(k, KVP_OP_TIER_RELEASE, buf, sizeof(*rl) + n * 4, 0);
	}
}

static void step_layout(struct in *in, struct conn *k, bool model)
{
	struct kvp_layout_model m;
	int32_t st;

	memset(&m, 0, sizeof(m));
	m.layout.layers = canon.layers;
	m.layout.kv_heads = canon.kvh;
	m.layout.head_dim = canon.hd;
	m.layout.dtype = canon.dtype;
	m.layout.rope_base = 10000.0f;
	snprintf(m.model, sizeof(m.model), "m%u", rd8(in) % 2);
	if (model)
		st = request(k, KVP_OP_LAYOUT_MODEL, &m, sizeof(m), 0);
	else
		st = request(k, KVP_OP_LAYOUT, &m.layout, sizeof(m.layout), 0);
	if (st == 0 && reply_len >= sizeof(struct kvp_layout_reply) &&
	    k->nl < KVP_MAX_LAYOUTS) {
		const struct kvp_layout_reply *r = (const void *)reply;
		const struct kvk_layout *kl = kvd_client_layout(k->c,
								r->layout_id);
		struct lay *l = &k->l[k->nl++];

		if (!kl)
			abort();
		l->id = r->layout_id;
		l->tpb = r->tokens_per_block;
		l->layers = kl->layers;
		l->kvh = kl->kv_heads;
		l->hd = kl->head_dim;
		l->dtype = kl->dtype;
		l->model = model;
		l->canon = l->layers == canon.layers && l->kvh == canon.kvh &&
			   l->hd == canon.hd && l->dtype == canon.dtype;
	}
}

/* WRITE_KV (the sequence appended slot by slot) or READ_KV. */
static void step_kv(struct in *in, struct conn *k, bool write)
{
	const struct lay *l = pick_layout(in, k, false);
	uint32_t own[64], blocks[64], slots[64], n, i, nb, base;
	struct kvp_kv q;
	int32_t st;

	if (!l)
		return;
	n = 1 + rd8(in) % 32;
	nb = pick_blocks(in, k, 0, !write, own, (n + l->tpb - 1) / l->tpb + 1);
	if (!nb)
		return;
	/* a write appends to the connection's sequence */
	base = write ? k->seq_len : rd8(in);
	for (i = 0; i < n; i++) {
		uint32_t pos = base + i;

		blocks[i] = own[(pos / l->tpb) % nb];
		slots[i] = pos % l->tpb;
	}
	put_u32(k, OFF_A, blocks, n);
	put_u32(k, OFF_C, slots, n);
	memset(&q, 0, sizeof(q));
	q.layout_id = l->id;
	q.layer = rd8(in) % l->layers;
	q.ntok = n;
	q.off_blocks = OFF_A;
	q.off_slots = OFF_C;
	q.off_k = OFF_K;
	q.off_v = OFF_V;
	if (write) {
		uint64_t nf = (uint64_t)n * l->kvh * l->hd;

		fill_f(k, OFF_K, nf, k->c ? marker(conn_tenant(k)) : 0);
		fill_f(k, OFF_V, nf, k->c ? marker(conn_tenant(k)) : 0);
		q.flags = (rd8(in) & 7) == 0 ? KVP_KV_MERGE : 0;
	} else {
		memset(k->reg + OFF_V, 0xff, (size_t)n * l->kvh * l->hd * 4 <
		       DATA_BYTES ? (size_t)n * l->kvh * l->hd * 4 : DATA_BYTES);
		if ((rd8(in) & 3) == 0)
			q.off_k = KVP_OFF_NONE;
	}
	st = request(k, write ? KVP_OP_WRITE_KV : KVP_OP_READ_KV, &q,
		     sizeof(q), 0);
	if (st != 0 || !k->c)
		return;
	if (write) {
		k->seq_len += n;
	} else if (fz.kind == BRK_NONE) {
		check_values(k, l, OFF_V, (uint64_t)n * l->kvh * l->hd);
	}
}

static void step_attn(struct in *in, struct conn *k)
{
	const struct lay *l = pick_layout(in, k, false);
	uint32_t tab[64], ctx[2], batch, mbs, i, nb;
	struct kvp_attn a;

	if (!l)
		return;
	batch = 1 + rd8(in) % 2;
	mbs = 1 + rd8(in) % 4;
	nb = pick_blocks(in, k, 0, true, tab, batch * mbs);
	if (nb < batch * mbs)
		return;
	for (i = 0; i < batch; i++)
		ctx[i] = 1 + rd8(in) % (mbs * l->tpb);
	put_u32(k, OFF_A, tab, batch * mbs);
	put_u32(k, OFF_C, ctx, batch);
	memset(&a, 0, sizeof(a));
	a.layout_id = l->id;
	a.layer = rd8(in) % l->layers;
	a.batch = batch;
	a.q_heads = l->kvh * (1 + rd8(in) % 2);
	a.max_blocks_per_seq = mbs;
	a.n_new = rd8(in) % 4;
	a.off_q = OFF_Q;
	a.off_tables = OFF_A;
	a.off_ctx = OFF_C;
	a.off_out = OFF_OUT;
	fill_f(k, OFF_Q, (uint64_t)batch * (a.n_new ? a.n_new : 1) *
	       a.q_heads * l->hd, 0.5f);
	request(k, KVP_OP_ATTN, &a, sizeof(a), 0);
}

static void step_score(struct in *in, struct conn *k)
{
	const struct lay *l = pick_layout(in, k, false);
	uint32_t tab[8], nb;
	struct kvp_score s;

	if (!l)
		return;
	nb = pick_blocks(in, k, 0, true, tab, 1 + rd8(in) % 4);
	if (!nb)
		return;
	put_u32(k, OFF_A, tab, nb);
	memset(&s, 0, sizeof(s));
	s.layout_id = l->id;
	s.layer = rd8(in) % l->layers;
	s.q_heads = l->kvh;
	s.n_q = 1 + rd8(in) % 4;
	s.len = 1 + rd8(in) % (nb * l->tpb);
	s.nblocks = nb;
	s.flags = rd8(in) & KVP_SCORE_FLAGS;
	s.off_q = OFF_Q;
	s.off_table = OFF_A;
	s.off_out = OFF_OUT;
	fill_f(k, OFF_Q, (uint64_t)s.n_q * s.q_heads * l->hd, 0.25f);
	request(k, KVP_OP_SCORE, &s, sizeof(s), 0);
}

static void step_copy(struct in *in, struct conn *k)
{
	uint32_t src[8], dst[8], n = 1 + rd8(in) % 8, ns, nd;
	struct kvp_copy c;

	ns = pick_blocks(in, k, 0, true, src, n);
	nd = pick_blocks(in, k, 0, false, dst, n);
	n = ns < nd ? ns : nd;
	if (!n)
		return;
	put_u32(k, OFF_A, src, n);
	put_u32(k, OFF_B, dst, n);
	memset(&c, 0, sizeof(c));
	c.n = n;
	c.off_src = OFF_A;
	c.off_dst = OFF_B;
	request(k, KVP_OP_COPY, &c, sizeof(c), 0);
}

/* The edits: RoPE of a layout, SPLICE, COMPACT. */
static void step_edit(struct in *in, struct conn *k)
{
	const struct lay *l = pick_layout(in, k, false);
	unsigned int what = rd8(in) % 3;
	uint32_t tab[8], nb, len;
	int32_t st = -1;

	if (!l)
		return;
	if (what == 0) {
		static struct kvp_layout_rope r;

		memset(&r, 0, sizeof(r));
		r.layout_id = l->id;
		r.style = rd8(in) % 3;
		r.base = r.style ? 10000.0f : 0;
		request(k, KVP_OP_LAYOUT_ROPE, &r, sizeof(r), 0);
		return;
	}
	nb = pick_blocks(in, k, 0, false, tab, 1 + rd8(in) % 4);
	if (!nb)
		return;
	put_u32(k, OFF_A, tab, nb);
	len = 1 + rd8(in) % (nb * l->tpb);
	if (what == 1) {
		struct kvp_splice s;

		memset(&s, 0, sizeof(s));
		s.layout_id = l->id;
		s.nblocks = nb;
		s.len = len;
		s.at = rd8(in) % (len + 1);
		s.ndel = rd8(in) % (len - s.at + 1);
		s.nins = rd8(in) % (nb * l->tpb - (len - s.ndel) + 1);
		s.delta = (int8_t)rd8(in);
		s.off_table = OFF_A;
		st = request(k, KVP_OP_SPLICE, &s, sizeof(s), 0);
	} else {
		struct kvp_compact c;
		uint32_t keep[256], nk = 0, i;

		for (i = 0; i < len && nk < 256; i++)
			if (rd8(in) & 1)
				keep[nk++] = i;
		put_u32(k, OFF_C, keep, nk);
		memset(&c, 0, sizeof(c));
		c.layout_id = l->id;
		c.nblocks = nb;
		c.len = len;
		c.nkeep = nk;
		c.off_table = OFF_A;
		c.off_keep = OFF_C;
		st = request(k, KVP_OP_COMPACT, &c, sizeof(c), 0);
	}
	(void)st;
}

/* Token ids of prefix @s: a common head of s / 16 blocks, then its own. */
static void tokens(struct conn *k, const struct lay *l, unsigned int s,
		   uint32_t ntok)
{
	uint32_t *t = (uint32_t *)(k->reg + OFF_TOK), i,
		 head = (s / 16 % 4) * l->tpb;

	for (i = 0; i < ntok && i < 8192; i++)
		t[i] = i * 7 + 3 + (i >= head ? (s % 16 + 1) * 100003U : 0);
}

static void step_publish(struct in *in, struct conn *k)
{
	const struct lay *l = pick_layout(in, k, true);
	uint32_t b[64], n;
	struct kvp_prefix_publish q;
	bool ro;

	if (!l)
		return;
	ro = (rd8(in) & 3) == 0;	/* cached blocks among them */
	n = rd8(in);
	n = n & 0x80 ? 4 + n % 44 : 1 + n % 4;
	n = pick_blocks(in, k, 0, ro, b, n);
	if (!n)
		return;
	tokens(k, l, rd8(in), n * l->tpb);
	put_u32(k, OFF_A, b, n);
	memset(&q, 0, sizeof(q));
	q.layout_id = l->id;
	q.nblocks = n;
	q.ntok = n * l->tpb;
	q.off_tokens = OFF_TOK;
	q.off_blocks = OFF_A;
	q.off_result = OFF_B;
	request(k, KVP_OP_PREFIX_PUBLISH, &q, sizeof(q), 0);
}

static void step_match(struct in *in, struct conn *k)
{
	const struct lay *l = pick_layout(in, k, true);
	struct kvp_prefix_match q;
	uint32_t nb = rd8(in);

	nb = nb & 0x80 ? 8 + nb % 40 : 1 + nb % 5;

	if (!l)
		return;
	memset(&q, 0, sizeof(q));
	q.layout_id = l->id;
	q.ntok = nb * l->tpb + rd8(in) % 2;
	tokens(k, l, rd8(in), q.ntok);
	q.off_tokens = OFF_TOK;
	q.off_blocks = OFF_B;
	q.max_blocks = rd8(in) % 2 ? nb : rd8(in) % 48;
	request(k, KVP_OP_PREFIX_MATCH, &q, sizeof(q), 0);
}

static void step_unref(struct in *in, struct conn *k)
{
	struct kvp_prefix_unref q;
	uint32_t b[8], n = 0;

	memset(&q, 0, sizeof(q));
	if (rd8(in) & 1) {
		q.flags = KVP_PREFIX_UNREF_ALL;
	} else {
		if (k->c)
			n = ref_blocks(k, b, 1 + rd8(in) % 8);
		if (!n)
			return;
		put_u32(k, OFF_A, b, n);
		q.n = n;
		q.off_blocks = OFF_A;
	}
	request(k, KVP_OP_PREFIX_UNREF, &q, sizeof(q), 0);
}

static void step_evict(struct in *in, struct conn *k)
{
	struct kvp_prefix_evict q;

	memset(&q, 0, sizeof(q));
	q.count = 1 + rd8(in) % 8;
	request(k, KVP_OP_PREFIX_EVICT, &q, sizeof(q), 0);
}

static void step_tier_attach(struct in *in, struct conn *k)
{
	struct kvp_tier_attach a;
	int32_t st;

	memset(&a, 0, sizeof(a));
	a.tier = 1 + rd8(in) % (d.npools - 1);
	name_set(a.tenant, tnames[rd8(in) % NTEN]);
	st = request(k, KVP_OP_TIER_ATTACH, &a, sizeof(a), 0);
	(void)st;	/* refresh() knows its lease now */
}

static void step_tier_lease(struct in *in, struct conn *k)
{
	struct kvp_tier_lease l;

	memset(&l, 0, sizeof(l));
	l.tier = 1 + rd8(in) % (d.npools - 1);
	l.count = 1 + rd8(in) % 8;
	l.flags = KVPOOL_LEASE_NONBLOCK;
	if (request(k, KVP_OP_TIER_LEASE, &l, sizeof(l), 0) == -EAGAIN) {
		kvd_owner_events(&d.pools[l.tier]);
		request(k, KVP_OP_TIER_LEASE, &l, sizeof(l), 0);
	}
}

/* SWAP out (top to a lower tier) or in (back). */
static void step_swap(struct in *in, struct conn *k)
{
	unsigned int tier = 1 + rd8(in) % (d.npools - 1), f = rd8(in);
	bool out = f & 1;
	uint32_t sb[16], db[16], n = 1 + rd8(in) % 8, ns, nd;
	struct kvp_swap q;
	int32_t st;

	ns = pick_blocks(in, k, out ? 0 : tier, false, sb, n);
	nd = pick_blocks(in, k, out ? tier : 0, false, db, n);
	n = ns < nd ? ns : nd;
	if (!n)
		return;
	put_u32(k, OFF_A, sb, n);
	put_u32(k, OFF_B, db, n);
	memset(&q, 0, sizeof(q));
	q.src_tier = out ? 0 : tier;
	q.dst_tier = out ? tier : 0;
	q.n = n;
	q.flags = (f & 6) == 0 ? KVP_SWAP_SYNC : 0;
	q.off_src = OFF_A;
	q.off_dst = OFF_B;
	st = request(k, KVP_OP_SWAP, &q, sizeof(q), 0);
	if (st >= 0 && reply_len >= sizeof(struct kvp_swap_reply))
		k->last_ticket = ((const struct kvp_swap_reply *)reply)->ticket;
}

static void step_swap_wait(struct in *in, struct conn *k)
{
	struct kvp_swap_wait w;

	w.ticket = k->last_ticket - rd8(in) % 2;
	w.timeout_ns = 1;
	request(k, KVP_OP_SWAP_WAIT, &w, sizeof(w), 0);
}

static void step_block_sum(struct in *in, struct conn *k)
{
	unsigned int tier = rd8(in) % d.npools;
	uint32_t b[8], n = 1 + rd8(in) % 8;
	struct kvp_block_sum q;

	n = pick_blocks(in, k, tier, false, b, n);
	if (!n)
		return;
	put_u32(k, OFF_A, b, n);
	memset(&q, 0, sizeof(q));
	q.tier = tier;
	q.n = n;
	q.off_blocks = OFF_A;
	q.off_sums = OFF_SUMS;
	request(k, KVP_OP_BLOCK_SUM, &q, sizeof(q), 0);
}

static void step_devbuf(struct in *in, struct conn *k)
{
	unsigned int what = rd8(in) % 4;

	if (what == 3) {
		struct kvp_attn_dev q;

		memset(&q, 0, sizeof(q));
		q.batch = 1;
		q.q_heads = 1;
		q.max_blocks_per_seq = 1;
		q.off_tables = OFF_A;
		q.off_ctx = OFF_C;
		request(k, KVP_OP_ATTN_DEV, &q, sizeof(q), 0);
	} else if (what == 0) {
		struct kvp_devbuf q;

		memset(&q, 0, sizeof(q));
		q.bytes = REGION_BYTES;
		request(k, KVP_OP_DEVBUF_ADD, &q, sizeof(q), 1);
	} else if (what == 1) {
		struct kvp_devbuf_del q = { .buf_id = rd8(in) % 2 };

		request(k, KVP_OP_DEVBUF_DEL, &q, sizeof(q), 0);
	} else {
		const struct lay *l = pick_layout(in, k, false);
		uint32_t b[1], s[1] = { 0 };
		struct kvp_kv_dev q;

		if (!l || !pick_blocks(in, k, 0, false, b, 1))
			return;
		put_u32(k, OFF_A, b, 1);
		put_u32(k, OFF_C, s, 1);
		memset(&q, 0, sizeof(q));
		q.layout_id = l->id;
		q.ntok = 1;
		q.off_blocks = OFF_A;
		q.off_slots = OFF_C;
		request(k, rd8(in) & 1 ? KVP_OP_WRITE_KV_DEV :
			KVP_OP_READ_KV_DEV, &q, sizeof(q), 0);
	}
}

static void step_attach(struct in *in, struct conn *k)
{
	struct kvp_attach a;

	memset(&a, 0, sizeof(a));
	name_set(a.tenant, tnames[rd8(in) % NTEN]);
	request(k, KVP_OP_ATTACH, &a, sizeof(a), 0);
}

/* Admin ops and the queries. */
static void step_admin(struct in *in, struct conn *k)
{
	unsigned int what = rd8(in), t = rd8(in) % 3;
	int32_t st;

	if (conn_open(k, what & 0x80, false))
		return;
	what %= 12;
	switch (what) {
	case 0: case 1: case 2: {
		static const uint16_t ops[] = { KVP_OP_TENANT_ADD,
			KVP_OP_TENANT_SET, KVP_OP_TENANT_DEL };
		struct kvp_tenant q;

		memset(&q, 0, sizeof(q));
		name_set(q.name, tnames[t]);
		q.max = rd8(in) % 2 ? KVPOOL_UNLIMITED : 4 + rd8(in) % 64;
		q.min = rd8(in) % 4;
		q.uid = KVPOOL_ID_NONE;
		q.gid = KVPOOL_ID_NONE;
		if (what == 1)
			q.min = KVP_KEEP;
		request(k, ops[what], &q, sizeof(q), 0);
		break;
	}
	case 3: case 4: {
		struct kvp_prefix_tenant q;
		unsigned int ns = rd8(in) % 3;

		memset(&q, 0, sizeof(q));
		name_set(q.tenant, tnames[t]);
		if (what == 3) {
			name_set(q.ns, nsnames[ns]);
			st = request(k, KVP_OP_PREFIX_SHARE, &q, sizeof(q), 0);
			if (st >= 0 && ns < 2)
				ns_members[ns] |= 1U << t;
		} else {
			q.flags = rd8(in) & 1 ? KVP_PREFIX_FORGET : 0;
			request(k, KVP_OP_PREFIX_FLUSH, &q, sizeof(q), 0);
		}
		break;
	}
	case 5: case 6: case 7: case 8: {
		static const uint16_t ops[] = { KVP_OP_TENANT_LIST,
			KVP_OP_CLIENT_LIST, KVP_OP_TIER_LIST,
			KVP_OP_CLIENT_TIERS };
		struct kvp_list q;

		memset(&q, 0, sizeof(q));
		q.start = rd8(in) % 3;
		request(k, ops[what - 5], &q, sizeof(q), 0);
		break;
	}
	case 9: {
		struct kvp_list q;

		memset(&q, 0, sizeof(q));
		request(k, KVP_OP_PREFIX_LIST, &q, sizeof(q), 0);
		break;
	}
	case 10: {
		static const uint16_t ops[] = { KVP_OP_POOL_STATUS,
			KVP_OP_STATUS, KVP_OP_CLUSTER_STATUS };

		request(k, ops[rd8(in) % 3], NULL, 0, 0);
		break;
	}
	default: {
		struct kvp_tier_sel q = { .tier = rd8(in) % d.npools };
		struct kvp_seq_report s;

		if (rd8(in) & 1) {
			request(k, KVP_OP_TIER_STATUS, &q, sizeof(q), 0);
			break;
		}
		memset(&s, 0, sizeof(s));
		s.resident = rd8(in);
		s.dropped = rd8(in);
		s.swapped[1] = rd8(in);
		request(k, KVP_OP_SEQ_REPORT, &s, sizeof(s), 0);
		break;
	}
	}
}

/* A record of any op, its body from the input. */
static void step_raw(struct in *in, struct conn *k)
{
	uint8_t body[512];
	uint16_t op = (uint16_t)rd8(in);
	size_t n = rd8(in) * 2U;

	if (conn_open(k, op & 1, false))
		return;
	rdbytes(in, body, n);
	request(k, op, body, n, rd8(in) % 8);
}

static void step(struct in *in)
{
	unsigned int cmd = rd8(in), ci = rd8(in);
	struct conn *k = &cs[ci % NCONN];

	fz_read(in);
	switch (cmd % 32) {
	case 0: step_hello(in, k); break;
	case 1: case 2: step_lease(in, k); break;
	case 3: step_release(in, k, 0); break;
	case 4: step_layout(in, k, false); break;
	case 5: step_layout(in, k, true); break;
	case 6: case 7: step_kv(in, k, true); break;
	case 8: case 9: step_kv(in, k, false); break;
	case 10: step_attn(in, k); break;
	case 11: step_score(in, k); break;
	case 12: step_copy(in, k); break;
	case 13: step_edit(in, k); break;
	case 14: case 15: step_publish(in, k); break;
	case 16: case 17: step_match(in, k); break;
	case 18: step_unref(in, k); break;
	case 19: step_evict(in, k); break;
	case 20: step_tier_attach(in, k); break;
	case 21: step_tier_lease(in, k); break;
	case 22: step_release(in, k, 1 + ci / NCONN % (d.npools - 1)); break;
	case 23: case 24: step_swap(in, k); break;
	case 25: step_swap_wait(in, k); break;
	case 26: {
		unsigned int tier = rd8(in) % d.npools;

		kvd_swap_fuzz_run(&d, tier, rd8(in) % 4);
		break;
	}
	case 27: step_block_sum(in, k); break;
	case 28:
		if (ci & 0x80)
			conn_close(k, ci & 0x10);
		else if (ci & 0x40)
			kvd_owner_events(&d.pools[ci % d.npools]);
		else if (ci & 0x20)
			kvd_owner_timer(&d.pools[ci % d.npools]);
		else
			step_devbuf(in, k);
		break;
	case 29: step_attach(in, k); break;
	case 30: step_admin(in, k); break;
	default: step_raw(in, k); break;
	}
	check_jobs();
}

/* ---- set-up and reset ------------------------------------------------------ */

/* At exit (every input done): the daemon stops as main() stops it. */
static void cleanup(void)
{
	unsigned int i;

	for (i = 0; i < NCONN; i++)
		if (cs[i].c)
			return;		/* exit() in the middle of an input */
	close(d.listen_fd);
	unlink(sock_path);
	kvd_clients_stop(&d);
	kvd_swap_stop(&d);
	kvd_prefix_fini(&d);
	kvd_ptier_stop(&d);
	kvd_cluster_stop(&d);
	kvd_ledger_close(&d);
	free(d.conf_tenants);
	kvd_pools_fini(&d);
	if (d.cpu)
		kvk_cpu_free(d.cpu);
	unlink(nvme_path);
}

static void init_once(void)
{
	char spec[96];
	unsigned int i;

	snprintf(sock_path, sizeof(sock_path), "/tmp/kvpool-fuzz-%d.sock",
		 (int)getpid());
	snprintf(nvme_path, sizeof(nvme_path), "/tmp/kvpool-fuzz-%d.nvme",
		 (int)getpid());
	d.o.socket_path = sock_path;
	d.o.device_path = "/nonexistent";
	d.o.backend = "cpu";
	d.o.ledger = "inproc";
	d.o.pool = "";
	d.o.block_bytes = 4096;
	d.o.capacity = 256;
	d.o.chunk_blocks = 16;
	d.o.default_max = KVPOOL_UNLIMITED;
	d.o.shrink_delay_ms = 0;
	d.o.max_clients = 16;
	d.o.max_clients_per_uid = 2;
	d.o.log_level = KVD_ERR;
	d.o.nvme_io = "pread";
	d.o.kernel_threads = 1;
	d.o.prefix_lend_percent = 50;
	d.o.prefix_hash_bits = 8;	/* collisions: the token check */
	d.listen_fd = -1;
	d.reserve_fd = -1;
	d.admin_gid = 4242;	/* a group nobody is in */
	d.self_uid = geteuid();
	/* Lower tiers: DRAM, and NVMe in a temporary file. */
	snprintf(spec, sizeof(spec), "nvme:%s:64", nvme_path);
	if (kvd_tier_parse(&d.o, "dram:64") || kvd_tier_parse(&d.o, spec)) {
		fprintf(stderr, "fuzz-request: tier spec refused\n");
		exit(1);
	}
	d.o.prefix_demote = true;
	if (kvd_setup(&d)) {
		fprintf(stderr, "fuzz-request: kvd_setup failed\n");
		exit(1);
	}
	/* The threads main() starts after kvd_setup(): the prefix cache's
	 * (reclaim targets of its cold leases) and the demotion worker's. */
	if (kvd_prefix_start(&d) || kvd_ptier_start(&d)) {
		fprintf(stderr, "fuzz-request: prefix threads failed\n");
		exit(1);
	}
	atexit(cleanup);
	unsealed_fd = memfd_create("fuzz-unsealed", MFD_CLOEXEC);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (unsealed_fd < 0 || null_fd < 0 ||
	    ftruncate(unsealed_fd, REGION_BYTES))
		exit(1);
	for (i = 0; i < NCONN; i++) {
		struct conn *k = &cs[i];

		k->rfd = memfd_create("fuzz-region",
				      MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (k->rfd < 0 || ftruncate(k->rfd, REGION_BYTES) ||
		    fcntl(k->rfd, F_ADD_SEALS, F_SEAL_SHRINK))
			exit(1);
		k->reg = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE,
			      MAP_SHARED, k->rfd, 0);
		if (k->reg == MAP_FAILED)
			exit(1);
	}
	trace = getenv("FUZZ_REQUEST_LOG") != NULL;
	ready = true;
}

/* Back to the state every input starts from. */
static void reset(void)
{
	static char names[64][KVPOOL_NAME_LEN];
	struct kvpool_tenant *t, *tn;
	unsigned int i, n = 0;

	for (i = 0; i < NCONN; i++)
		conn_close(&cs[i], false);
	/* the jobs of closed connections end (their leases close then) */
	kvd_swap_fuzz_run(&d, 0, 0);
	/* The prefix cache's blocks are charged to their tenants. */
	pthread_mutex_lock(&d.top->lock);
	list_for_each_entry(t, &d.top->pool->tenants, node)
		if (n < 64)
			memcpy(names[n++], t->name, KVPOOL_NAME_LEN);
	pthread_mutex_unlock(&d.top->lock);
	for (i = 0; i < n; i++)
		kvd_prefix_flush(&d, names[i]);
	for (i = 0; i < d.npools; i++) {
		struct kvd_pool *p = &d.pools[i];

		kvd_owner_events(p);
		kvd_owner_timer(p);
		pthread_mutex_lock(&p->lock);
		list_for_each_entry_safe(t, tn, &p->pool->tenants, node)
			kvpool_tenant_delete(p->pool, t->name);
		pthread_mutex_unlock(&p->lock);
	}
	/* and the cache forgets them (their namespaces with them) */
	for (i = 0; i < n; i++) {
		struct kvp_prefix_tenant q;
		size_t rl = 0;

		memset(&q, 0, sizeof(q));
		memcpy(q.tenant, names[i], KVPOOL_NAME_LEN);
		q.flags = KVP_PREFIX_FORGET;
		kvd_prefix_admin(&d, true, KVP_OP_PREFIX_FLUSH, &q, sizeof(q),
				 reply, &rl);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t dtypes[] = { KVK_BF16, KVK_BF16, KVK_FP8,
					   KVK_INT8, KVK_INT4 };
	struct in in = { data, size };
	unsigned int steps = 0, g, lim, i, t;

	if (!ready)
		init_once();
	g = rd8(&in);
	canon.layers = 1 + g % 2;
	canon.kvh = 1 + g / 2 % 2;
	canon.hd = g / 4 % 2 ? 64 : 32;
	canon.dtype = dtypes[g / 8 % 5];
	memset(ns_members, 0, sizeof(ns_members));
	foreign_format = false;
	/* the harness's tenants, in every pool (limits in the top one from
	 * the input: some inputs run short of blocks) */
	lim = rd8(&in);
	for (i = 0; i < d.npools; i++) {
		for (t = 0; t < 3; t++) {
			struct kvp_tenant q;

			memset(&q, 0, sizeof(q));
			memcpy(q.pool, d.pools[i].name, KVPOOL_NAME_LEN);
			name_set(q.name, tnames[t]);
			q.max = i || !(lim & (1U << t)) ? KVPOOL_UNLIMITED :
				16 + (lim >> 4) * 8;
			q.min = 0;
			q.uid = KVPOOL_ID_NONE;
			q.gid = KVPOOL_ID_NONE;
			/* still there (the demotion worker held a lease of
			 * it in a lower pool when the last input ended):
			 * its limits then */
			if (kvd_ip_tenant_op(&d, KVP_OP_TENANT_ADD, &q))
				kvd_ip_tenant_op(&d, KVP_OP_TENANT_SET, &q);
		}
	}
	while (in.n && steps++ < MAX_STEPS)
		step(&in);
	reset();
	return 0;
}
