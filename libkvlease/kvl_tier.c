// SPDX-License-Identifier: MIT
/*
 * kvl_tier.c - libkvlease: the daemon's lower tiers and swaps between
 * them (the transport; what to swap is kvl_policy.c's).
 *
 * Tier 0 is the context's own pool.  A lower tier is joined on first use:
 * with the module, a /dev/kvpool file of the context's own, attached to
 * that pool and tenant (KVPOOL_IOC_TENANT_ATTACH) and shown to the daemon
 * with TIER_ATTACH; in-process, TIER_ATTACH opens a lease there for the
 * connection.  Leases and releases go to the ledger like tier 0's (ioctls
 * on that file, or TIER_LEASE/TIER_RELEASE).  A swap is a SWAP request
 * with a ticket; its completion comes as an asynchronous record, noted
 * whenever the library reads the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvl_internal.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void kvl_note_event(struct kvl_ctx *ctx, const void *msg, size_t n)
{
	const struct kvp_reply *rep = msg;

	if (n < sizeof(*rep))
		return;
	if (rep->hdr.op == KVP_EV_RECLAIM &&
	    n >= sizeof(*rep) + sizeof(struct kvp_ev_reclaim)) {
		const struct kvp_ev_reclaim *ev = (const void *)(rep + 1);

		ctx->reclaim_target = ev->target;
	} else if (rep->hdr.op == KVP_EV_SWAP_DONE &&
		   n >= sizeof(*rep) + sizeof(struct kvp_swap_done)) {
		const struct kvp_swap_done *dn = (const void *)(rep + 1);

		ctx->done[dn->ticket % KVL_KEEP_DONE] = *dn;
	}
}

/* ---- the daemon's tiers ---------------------------------------------- */

int kvl_tiers_load(struct kvl_ctx *ctx)
{
	uint8_t buf[KVP_MSG_MAX] __attribute__((aligned(8)));
	struct kvp_list q;
	struct kvp_list_reply *lr = (struct kvp_list_reply *)buf;
	const struct kvp_tier_rec *tr;
	size_t len = 0;
	uint32_t i;
	int r;

	if (ctx->tiers_known)
		return 0;
	if (ctx->sock < 0)
		return -ENOTCONN;
	memset(&q, 0, sizeof(q));
	r = kvl_rpc(ctx, KVP_OP_TIER_LIST, &q, sizeof(q), buf, sizeof(buf),
		    &len);
	if (r < 0)
		return r;
	if (len < sizeof(*lr) || len < sizeof(*lr) + lr->count * sizeof(*tr))
		return -EPROTO;
	tr = (const struct kvp_tier_rec *)(lr + 1);
	ctx->ntiers = lr->count < KVP_MAX_TIERS ? lr->count : KVP_MAX_TIERS;
	for (i = 0; i < ctx->ntiers; i++) {
		struct kvl_tier *t = &ctx->tiers[i];

		memcpy(t->name, tr[i].pool.name, KVL_NAME_LEN);
		t->name[KVL_NAME_LEN - 1] = 0;
		t->kind = tr[i].kind;
		t->capacity = tr[i].pool.capacity;
		t->block_bytes = tr[i].pool.block_bytes;
		if (i == 0) {
			t->joined = true;
			t->lease_id = ctx->lease_id;
			t->dev_fd = ctx->dev_fd;
		} else if (!t->joined) {
			t->dev_fd = -1;
		}
	}
	ctx->tiers_known = true;
	return 0;
}

static int tier_check(struct kvl_ctx *ctx, uint32_t tier)
{
	int r = kvl_tiers_load(ctx);

	if (r)
		return r;
	return tier < ctx->ntiers ? 0 : -ENOENT;
}

static int join(struct kvl_ctx *ctx, struct kvl_tier *t, uint32_t tier)
{
	struct kvp_tier_attach a;
	struct kvp_tier_attach_reply ar;
	int fd = -1, r;

	memset(&a, 0, sizeof(a));
	a.tier = tier;
	if (ctx->mode == KVL_MODE_MODULE) {
		struct kvpool_tenant_attach ta;

		if (t->dev_fd < 0) {
			fd = open(ctx->device_path, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				return -errno;
			memset(&ta, 0, sizeof(ta));
			memcpy(ta.pool, t->name, KVL_NAME_LEN);
			memcpy(ta.tenant, ctx->tenant_req, KVL_NAME_LEN);
			if (ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &ta)) {
				r = -errno;
				close(fd);
				return r;
			}
			t->dev_fd = fd;
			t->lease_id = ta.lease_id;
		}
		a.flags = KVP_TIER_LEDGER_FD;
		r = kvl_rpc_fd(ctx, KVP_OP_TIER_ATTACH, &a, sizeof(a),
			       t->dev_fd, &ar, sizeof(ar), NULL);
	} else {
		memcpy(a.tenant, ctx->tenant_req, KVL_NAME_LEN);
		r = kvl_rpc(ctx, KVP_OP_TIER_ATTACH, &a, sizeof(a), &ar,
			    sizeof(ar), NULL);
		if (!r)
			t->lease_id = ar.lease_id;
	}
	if (r == -EALREADY)
		r = 0;
	if (r)
		return r;
	t->joined = true;
	return 0;
}

KVL_EXPORT int kvl_tier_join(struct kvl_ctx *ctx, uint32_t tier)
{
	struct kvl_tier *t;
	int r = tier_check(ctx, tier);

	if (r)
		return r;
	t = &ctx->tiers[tier];
	if (t->joined)
		return 0;
	r = join(ctx, t, tier);
	t->join_err = r;
	if (r)
		kvl_logf(ctx, KVL_LOG_INFO, "cannot join tier %s: %s",
			 t->name, strerror(-r));
	return r;
}

void kvl_tiers_reconnect(struct kvl_ctx *ctx)
{
	uint32_t i;

	for (i = 1; i < ctx->ntiers; i++) {
		struct kvl_tier *t = &ctx->tiers[i];

		if (!t->joined)
			continue;
		t->joined = false;
		/* module: the lease survived in its file; show it again */
		if (ctx->mode == KVL_MODE_MODULE && t->dev_fd >= 0)
			t->join_err = join(ctx, t, i);
	}
	ctx->tiers[0].lease_id = ctx->lease_id;
}

void kvl_tiers_close(struct kvl_ctx *ctx)
{
	uint32_t i;

	for (i = 1; i < KVP_MAX_TIERS; i++)
		if (ctx->tiers_known && i < ctx->ntiers &&
		    ctx->tiers[i].dev_fd >= 0) {
			close(ctx->tiers[i].dev_fd);	/* returns its blocks */
			ctx->tiers[i].dev_fd = -1;
		}
}

static int joined(struct kvl_ctx *ctx, uint32_t tier)
{
	int r = tier_check(ctx, tier);

	if (r)
		return r;
	return ctx->tiers[tier].joined ? 0 : -EUNATCH;
}

KVL_EXPORT int kvl_tier_lease(struct kvl_ctx *ctx, uint32_t tier,
			      uint32_t count, uint32_t flags,
			      uint64_t timeout_ns, uint32_t *blocks)
{
	int r;

	if (!tier)
		return kvl_lease(ctx, count, flags, timeout_ns, blocks);
	if (!count)
		return -EINVAL;
	r = joined(ctx, tier);
	if (r)
		return r;
	if (ctx->mode == KVL_MODE_MODULE) {
		struct kvpool_lease_req l;

		memset(&l, 0, sizeof(l));
		l.blocks_ptr = (uintptr_t)blocks;
		l.count = count;
		l.flags = flags;
		l.timeout_ns = timeout_ns;
		if (ioctl(ctx->tiers[tier].dev_fd, KVPOOL_IOC_LEASE, &l))
			return -errno;
		return (int)l.granted;
	} else {
		struct kvp_tier_lease l = {
			.tier = tier, .count = count, .flags = flags,
			.timeout_ns = timeout_ns,
		};

		if (count > KVP_IO_MAX_BLOCKS)
			return -EINVAL;
		return kvl_rpc(ctx, KVP_OP_TIER_LEASE, &l, sizeof(l), blocks,
			       (size_t)count * sizeof(uint32_t), NULL);
	}
}

static int tier_release(struct kvl_ctx *ctx, uint32_t tier,
			const uint32_t *blocks, uint32_t count)
{
	if (ctx->mode == KVL_MODE_MODULE) {
		struct kvpool_release rl;

		memset(&rl, 0, sizeof(rl));
		rl.blocks_ptr = (uintptr_t)blocks;
		rl.count = count;
		if (ioctl(ctx->tiers[tier].dev_fd, KVPOOL_IOC_RELEASE, &rl))
			return -errno;
		return (int)rl.released;
	} else {
		uint8_t buf[sizeof(struct kvp_tier_release) +
			    KVP_IO_MAX_BLOCKS * sizeof(uint32_t)]
			__attribute__((aligned(8)));
		struct kvp_tier_release *rl = (struct kvp_tier_release *)buf;

		memset(rl, 0, sizeof(*rl));
		rl->tier = tier;
		rl->count = count;
		memcpy(rl + 1, blocks, (size_t)count * 4);
		return kvl_rpc(ctx, KVP_OP_TIER_RELEASE, buf,
			       sizeof(*rl) + (size_t)count * 4, NULL, 0, NULL);
	}
}

KVL_EXPORT int kvl_tier_release(struct kvl_ctx *ctx, uint32_t tier,
				const uint32_t *blocks, uint32_t count)
{
	int r, total = 0;

	if (!tier)
		return kvl_release(ctx, blocks, count);
	if (!count)
		return -EINVAL;
	r = joined(ctx, tier);
	if (r)
		return r;
	while (count) {
		uint32_t n = count > KVP_IO_MAX_BLOCKS ? KVP_IO_MAX_BLOCKS :
			     count;

		r = tier_release(ctx, tier, blocks, n);
		if (r < 0)
			return total ? total : r;
		total += r;
		blocks += n;
		count -= n;
	}
	return total;
}

/* The ledger's view of a tier for this context. */
static int tier_status(struct kvl_ctx *ctx, uint32_t tier,
		       struct kvpool_status *st)
{
	struct kvp_status_reply sr;
	struct kvp_tier_sel q = { .tier = tier };
	int r;

	memset(st, 0, sizeof(*st));
	if (ctx->mode == KVL_MODE_MODULE) {
		int fd = tier ? ctx->tiers[tier].dev_fd : ctx->dev_fd;

		return ioctl(fd, KVPOOL_IOC_STATUS, st) ? -errno : 0;
	}
	r = kvl_rpc(ctx, KVP_OP_TIER_STATUS, &q, sizeof(q), &sr, sizeof(sr),
		    NULL);
	if (r < 0)
		return r;
	*st = sr.ledger;
	return 0;
}

int kvl_tier_lease_room(struct kvl_ctx *ctx, uint32_t tier, uint32_t n,
			uint32_t *blocks)
{
	struct kvpool_status st;
	int r;

	r = kvl_tier_lease(ctx, tier, n, KVL_LEASE_NONBLOCK, 0, blocks);
	if (r != -EAGAIN)
		return r;
	/* -EAGAIN: no room, or room that is not backed yet: wait (a second
	 * at most) only for the pool to grow (a file tier allocates) */
	r = tier_status(ctx, tier, &st);
	if (r == -ESTALE)
		return r;
	if (r || st.capacity - st.used < n)
		return -EAGAIN;
	if (st.backed - st.used >= n)	/* it grew meanwhile */
		return kvl_tier_lease(ctx, tier, n, KVL_LEASE_NONBLOCK, 0,
				      blocks);
	r = kvl_tier_lease(ctx, tier, n, 0, 1000000000ULL, blocks);
	return r == -ETIMEDOUT ? -EAGAIN : r;
}

KVL_EXPORT int kvl_tiers(struct kvl_ctx *ctx, struct kvl_tier_info *out,
			 uint32_t cap)
{
	uint32_t i;
	int r = kvl_tiers_load(ctx);

	if (r)
		return r;
	for (i = 0; i < ctx->ntiers && i < cap; i++) {
		struct kvl_tier *t = &ctx->tiers[i];
		struct kvl_tier_info *o = &out[i];
		struct kvpool_status st;

		memset(o, 0, sizeof(*o));
		memcpy(o->name, t->name, KVL_NAME_LEN);
		o->tier = i;
		o->kind = t->kind;
		o->block_bytes = t->block_bytes;
		o->capacity = t->capacity;
		o->joined = t->joined;
		if (t->joined && !tier_status(ctx, i, &st)) {
			o->backed = st.backed;
			o->used = st.used;
			o->held = st.held;
		}
	}
	return (int)ctx->ntiers;
}

/* ---- swaps ---------------------------------------------------------------- */

KVL_EXPORT int kvl_swap(struct kvl_ctx *ctx, uint32_t src_tier,
			const uint32_t *src, uint32_t dst_tier,
			const uint32_t *dst, uint32_t n, uint64_t *ticket)
{
	struct kvp_swap q;
	struct kvp_swap_reply rep;
	uint64_t used = 0;
	int r;

	if (!n || n > KVP_IO_MAX_BLOCKS ||
	    2ULL * n * sizeof(uint32_t) + 128 > ctx->region_bytes)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	memset(&q, 0, sizeof(q));
	q.src_tier = src_tier;
	q.dst_tier = dst_tier;
	q.n = n;
	q.off_src = kvl_region_put(ctx, &used, src, n * 4ULL);
	q.off_dst = kvl_region_put(ctx, &used, dst, n * 4ULL);
	r = kvl_rpc(ctx, KVP_OP_SWAP, &q, sizeof(q), &rep, sizeof(rep), NULL);
	if (r < 0)
		return r;
	*ticket = rep.ticket;
	return 0;
}

KVL_EXPORT int kvl_swap_wait(struct kvl_ctx *ctx, uint64_t ticket,
			     uint64_t timeout_ns)
{
	struct kvp_swap_wait q = { .ticket = ticket, .timeout_ns = timeout_ns };
	struct kvp_swap_done dn;
	const struct kvp_swap_done *seen = &ctx->done[ticket % KVL_KEEP_DONE];
	int r;

	if (ticket && seen->ticket == ticket)
		return seen->status;
	r = kvl_rpc(ctx, KVP_OP_SWAP_WAIT, &q, sizeof(q), &dn, sizeof(dn),
		    NULL);
	if (r < 0)
		return r;
	ctx->done[ticket % KVL_KEEP_DONE] = dn;
	return dn.status;
}

/* Read the records waiting on the socket, without blocking. */
static void drain(struct kvl_ctx *ctx)
{
	for (;;) {
		ssize_t n = recv(ctx->sock, ctx->msg, sizeof(ctx->msg),
				 MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		kvl_note_event(ctx, ctx->msg, (size_t)n);
	}
}

KVL_EXPORT int kvl_swap_poll(struct kvl_ctx *ctx, uint64_t ticket,
			     int *status)
{
	const struct kvp_swap_done *seen = &ctx->done[ticket % KVL_KEEP_DONE];

	if (!ticket)
		return -ENOENT;
	if (seen->ticket != ticket && ctx->sock >= 0)
		drain(ctx);
	if (seen->ticket != ticket)
		return 0;
	*status = seen->status;
	return 1;
}

KVL_EXPORT int kvl_swap_fd(struct kvl_ctx *ctx)
{
	return ctx->sock >= 0 ? ctx->sock : -ENOTCONN;
}

int kvl_swap_sync(struct kvl_ctx *ctx, uint32_t src_tier, const uint32_t *src,
		  uint32_t dst_tier, const uint32_t *dst, uint32_t n,
		  uint64_t *copy_ns)
{
	uint32_t done = 0;
	int r = 0;

	*copy_ns = 0;
	/* batches that fit the region */
	while (done < n && !r) {
		uint64_t room = (ctx->region_bytes - 128) / 8;
		uint32_t k = n - done;
		uint64_t ticket = 0, seen = ctx->reconnects;
		int tries = 0;

		if (k > KVP_IO_MAX_BLOCKS)
			k = KVP_IO_MAX_BLOCKS;
		if (k > room)
			k = (uint32_t)room;
again:
		r = kvl_swap(ctx, src_tier, src + done, dst_tier, dst + done,
			     k, &ticket);
		if (!r)
			r = kvl_swap_wait(ctx, ticket, 0);
		/* the daemon restarted with the contents kept (else -ESTALE):
		 * the ticket was the lost connection's; a copy of whole blocks
		 * can be made again */
		if (r && r != -ESTALE && ctx->reconnects != seen &&
		    tries++ < 3) {
			seen = ctx->reconnects;
			goto again;
		}
		if (!r)
			*copy_ns += ctx->done[ticket % KVL_KEEP_DONE].copy_ns;
		done += k;
	}
	return r;
}

KVL_EXPORT int kvl_block_sums(struct kvl_ctx *ctx, uint32_t tier,
			      const uint32_t *blocks, uint32_t n,
			      uint64_t *sums)
{
	struct kvp_block_sum q;
	uint64_t used = 0;
	int r;

	if (!n || n > KVP_IO_MAX_BLOCKS ||
	    12ULL * n + 128 > ctx->region_bytes)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	memset(&q, 0, sizeof(q));
	q.tier = tier;
	q.n = n;
	q.off_blocks = kvl_region_put(ctx, &used, blocks, n * 4ULL);
	q.off_sums = kvl_region_put(ctx, &used, NULL, n * 8ULL);
	r = kvl_rpc(ctx, KVP_OP_BLOCK_SUM, &q, sizeof(q), NULL, 0, NULL);
	if (r < 0)
		return r;
	memcpy(sums, ctx->region + q.off_sums, n * 8ULL);
	return 0;
}

uint64_t kvl_now_ns(void)
{
	return now_ns();
}
