// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: kvpoold's request handling, in-process.
 *
 * The harness sets up a real daemon once (kvd_setup(): cpu backend,
 * in-process ledger, a small pool) and for each input connects one client
 * over a socketpair (kvd_client_new()), then follows the input's commands:
 *  - a record: one of the ops (or a raw op number), its body from the
 *    input (the exact size most of the time, any size otherwise), a header
 *    that is right or entirely from the input, and descriptors passed with
 *    it (the shared region, /dev/null, an unsealed memfd, three at once);
 *    the daemon serves it (kvd_client_serve(), the same function as its
 *    connection threads) and the harness reads the reply;
 *  - writes into the shared region (bytes, or runs of u32 such as block
 *    tables, slots and context lengths), which records point into;
 *  - the owner's duties: owner events (GROW maps memory), or the shrink
 *    timer (due at once: the shrink delay is 0).
 * At the end the client is freed (its lease returned), tenants are
 * deleted and the pool shrinks, so every input starts from the same state.
 * A few fields are clamped so that one input cannot run for long (LEASE
 * never waits; ATTN batch, n_new and KV ntok stay small unless they are
 * beyond the daemon's own limits); everything else reaches the daemon as
 * the input says.  ASan/UBSan/LSan report memory errors and leaks; the
 * harness also aborts if a reply breaks the protocol (wrong magic or
 * req_id, or a length that does not match).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvpoold.h"
#include "prefix.h"

#define REGION_BYTES	(1U << 20)

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
	return rd8(in) | rd8(in) << 8;
}

static uint32_t rd32(struct in *in)
{
	return rd16(in) | (uint32_t)rd16(in) << 16;
}

static void rdbytes(struct in *in, void *dst, size_t len)
{
	size_t k = len < in->n ? len : in->n;

	memcpy(dst, in->p, k);
	memset((uint8_t *)dst + k, 0, len - k);
	in->p += k;
	in->n -= k;
}

static struct kvd d;
static char sock_path[64];
static int region_fd = -1, unsealed_fd = -1, null_fd = -1;
static uint8_t *region;

static void cleanup(void)
{
	unlink(sock_path);
}

static void init_once(void)
{
	snprintf(sock_path, sizeof(sock_path), "/tmp/kvpool-fuzz-%d.sock",
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
	d.o.max_clients_per_uid = 4;
	d.o.log_level = KVD_ERR;
	d.listen_fd = -1;
	d.reserve_fd = -1;
	d.admin_gid = (gid_t)-1;
	d.self_uid = geteuid();
	/* A lower tier: TIER_* and SWAP have somewhere to go. */
	if (kvd_tier_parse(&d.o, "dram:64")) {
		fprintf(stderr, "fuzz-request: tier spec refused\n");
		exit(1);
	}
	if (kvd_setup(&d)) {
		fprintf(stderr, "fuzz-request: kvd_setup failed\n");
		exit(1);
	}
	atexit(cleanup);
	region_fd = memfd_create("fuzz-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	unsealed_fd = memfd_create("fuzz-unsealed", MFD_CLOEXEC);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (region_fd < 0 || unsealed_fd < 0 || null_fd < 0 ||
	    ftruncate(region_fd, REGION_BYTES) ||
	    ftruncate(unsealed_fd, REGION_BYTES) ||
	    fcntl(region_fd, F_ADD_SEALS, F_SEAL_SHRINK))
		exit(1);
	region = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
		      region_fd, 0);
	if (region == MAP_FAILED)
		exit(1);
}

/* The ops a record may carry, with their body size (0: no body). */
static const struct {
	uint16_t op;
	uint16_t size;
} ops[] = {
	{ KVP_OP_HELLO, sizeof(struct kvp_hello) },
	{ KVP_OP_ATTACH, sizeof(struct kvp_attach) },
	{ KVP_OP_LEASE, sizeof(struct kvp_lease) },
	{ KVP_OP_RELEASE, sizeof(struct kvp_release) },
	{ KVP_OP_STATUS, 0 },
	{ KVP_OP_LAYOUT, sizeof(struct kvp_layout) },
	{ KVP_OP_WRITE_KV, sizeof(struct kvp_kv) },
	{ KVP_OP_READ_KV, sizeof(struct kvp_kv) },
	{ KVP_OP_ATTN, sizeof(struct kvp_attn) },
	{ KVP_OP_COPY, sizeof(struct kvp_copy) },
	{ KVP_OP_TENANT_ADD, sizeof(struct kvp_tenant) },
	{ KVP_OP_TENANT_DEL, sizeof(struct kvp_tenant) },
	{ KVP_OP_TENANT_SET, sizeof(struct kvp_tenant) },
	{ KVP_OP_TENANT_LIST, sizeof(struct kvp_list) },
	{ KVP_OP_POOL_STATUS, 0 },
	{ KVP_OP_CLIENT_LIST, sizeof(struct kvp_list) },
};

#define NOPS (sizeof(ops) / sizeof(ops[0]))

/* The prefix cache's and the tiers' ops (a record picks them by a second
 * byte, so that the first table's picks stay as the seeds know them). */
static const struct {
	uint16_t op;
	uint16_t size;
} ops2[] = {
	{ KVP_OP_PREFIX_MATCH, sizeof(struct kvp_prefix_match) },
	{ KVP_OP_PREFIX_PUBLISH, sizeof(struct kvp_prefix_publish) },
	{ KVP_OP_PREFIX_UNREF, sizeof(struct kvp_prefix_unref) },
	{ KVP_OP_PREFIX_EVICT, sizeof(struct kvp_prefix_evict) },
	{ KVP_OP_LAYOUT_MODEL, sizeof(struct kvp_layout_model) },
	{ KVP_OP_PREFIX_LIST, sizeof(struct kvp_list) },
	{ KVP_OP_PREFIX_FLUSH, sizeof(struct kvp_prefix_tenant) },
	{ KVP_OP_PREFIX_SHARE, sizeof(struct kvp_prefix_tenant) },
	{ KVP_OP_TIER_LIST, sizeof(struct kvp_list) },
	{ KVP_OP_TIER_ATTACH, sizeof(struct kvp_tier_attach) },
	{ KVP_OP_TIER_LEASE, sizeof(struct kvp_tier_lease) },
	{ KVP_OP_TIER_RELEASE, sizeof(struct kvp_tier_release) },
	{ KVP_OP_TIER_STATUS, sizeof(struct kvp_tier_sel) },
	{ KVP_OP_SWAP, sizeof(struct kvp_swap) },
	{ KVP_OP_SWAP_WAIT, sizeof(struct kvp_swap_wait) },
	{ KVP_OP_BLOCK_SUM, sizeof(struct kvp_block_sum) },
	{ KVP_OP_SEQ_REPORT, sizeof(struct kvp_seq_report) },
	{ KVP_OP_CLIENT_TIERS, sizeof(struct kvp_list) },
};

#define NOPS2 (sizeof(ops2) / sizeof(ops2[0]))

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

		/* 0 would wait for ever on a job that is still queued. */
		w->timeout_ns = 1 + w->timeout_ns % 2000000;
	}
}

static int send_record(int sock, const void *msg, size_t len, unsigned int fdmask)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 3)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[3], n = 0;

	if (fdmask & 1)
		fds[n++] = region_fd;
	if (fdmask & 2)
		fds[n++] = null_fd;
	if (fdmask & 4)
		fds[n++] = unsealed_fd;
	if ((fdmask & 8) && n < 3)
		fds[n++] = null_fd;
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

/* Read every reply and event queued; check the one reply to @req_id. */
static void drain(int sock, bool want, uint32_t req_id, bool valid_hdr)
{
	static uint8_t buf[KVP_MSG_MAX];
	int replies = 0;

	for (;;) {
		ssize_t n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
		const struct kvp_reply *r = (const void *)buf;

		if (n <= 0)
			break;
		if ((size_t)n < sizeof(*r) || r->hdr.magic != KVP_MAGIC ||
		    r->hdr.len != (uint32_t)n) {
			fprintf(stderr, "fuzz-request: malformed reply\n");
			abort();
		}
		if (r->hdr.op == KVP_EV_RECLAIM || r->hdr.op == KVP_EV_SWAP_DONE)
			continue;
		replies++;
		if (valid_hdr && r->hdr.req_id != req_id) {
			fprintf(stderr, "fuzz-request: reply to req %u for req %u\n",
				r->hdr.req_id, req_id);
			abort();
		}
	}
	if (want && replies != 1) {
		fprintf(stderr, "fuzz-request: %d replies to one request\n", replies);
		abort();
	}
}

/* One record from the input; 0, or -1 when the connection ended. */
static int do_record(struct kvd_client *c, int sock, struct in *in)
{
	static uint8_t msg[sizeof(struct kvp_hdr) + 512] __attribute__((aligned(16)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;
	unsigned int pick = rd8(in), shape = rd8(in), fdmask = rd8(in);
	unsigned int pick2 = pick >= NOPS * 15 && pick < NOPS * 15 + 8 ?
			     rd8(in) % NOPS2 : NOPS2;
	uint16_t op = pick < NOPS * 15 ? ops[pick % NOPS].op :
		      pick2 < NOPS2 ? ops2[pick2].op : (uint16_t)rd16(in);
	size_t blen = pick < NOPS * 15 ? ops[pick % NOPS].size :
		      pick2 < NOPS2 ? ops2[pick2].size : rd8(in);
	uint32_t req_id = rd32(in);
	bool raw = (shape & 0x0f) == 0;
	size_t len;
	int r;

	if ((shape & 0xf0) == 0)
		blen = rd8(in);		/* a wrong size now and then */
	if (op == KVP_OP_RELEASE && (shape & 0x10)) {
		struct kvp_release *rl = (void *)(h + 1);
		uint32_t count = rd8(in) % 64;

		rdbytes(in, rl + 1, count * 4);
		rl->count = count;
		rl->flags = rd8(in) & 3;
		blen = sizeof(*rl) + count * 4;
	} else {
		rdbytes(in, h + 1, blen);
	}
	clamp(op, h + 1, blen);
	len = sizeof(*h) + blen;
	if (raw) {
		rdbytes(in, h, sizeof(*h));
		len = (size_t)rd16(in) % sizeof(msg);
	} else {
		h->magic = KVP_MAGIC;
		h->op = op;
		h->flags = (shape & 0x0f) == 1 ? 1 : 0;
		h->len = (uint32_t)len;
		h->req_id = req_id;
	}
	if (send_record(sock, msg, len, fdmask))
		return 0;
	r = kvd_client_serve(c);
	drain(sock, !r, req_id, !raw && len >= sizeof(*h));
	return r ? -1 : 0;
}

/* Bytes, or a run of u32 values (block tables, slots, lengths). */
static void do_region(struct in *in)
{
	uint32_t off = (rd16(in) * 16U) % REGION_BYTES;
	unsigned int kind = rd8(in);

	if (kind & 1) {
		uint32_t n = rd8(in), v = rd16(in), step = rd8(in) % 4, i;

		for (i = 0; i < n && off + 4 <= REGION_BYTES; i++, off += 4) {
			memcpy(region + off, &v, 4);
			v += step;
		}
	} else {
		size_t len = rd8(in);

		if (off + len > REGION_BYTES)
			len = REGION_BYTES - off;
		rdbytes(in, region + off, len);
	}
}

/* Back to the state every input starts from. */
static void reset(void)
{
	static char names[64][KVPOOL_NAME_LEN];
	struct kvpool_tenant *t, *tn;
	unsigned int i, n = 0;

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
	memset(region, 0, REGION_BYTES);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct kvd_client *c;
	unsigned int steps = 0;
	int sv[2];

	if (!region)
		init_once();
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return 0;
	if (kvd_client_new(&d, sv[0], &c)) {
		close(sv[1]);
		return 0;
	}
	while (in.n && steps++ < 64) {
		unsigned int cmd = rd8(&in) % 16;

		if (cmd < 9) {
			if (do_record(c, sv[1], &in))
				break;
		} else if (cmd < 13) {
			do_region(&in);
		} else if (cmd < 15) {
			kvd_owner_events(d.top);
		} else {
			kvd_owner_timer(d.top);
		}
	}
	kvd_client_free(c);
	close(sv[1]);
	reset();
	return 0;
}
