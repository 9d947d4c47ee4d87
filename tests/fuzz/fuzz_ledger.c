// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the ledger core (kmod/kvpool_ledger.c, built in user
 * space through kmod/kvpool_ledger_user.h) driven by operation sequences.
 *
 * The input picks a pool (capacity, chunk, default max), then a sequence of
 * operations, a few bytes each: open/close/attach leases, grants of every
 * kind (including two-phase grants committed or cancelled), releases of
 * held, foreign and repeated indices, release-all, pins and unpins, grows
 * (and GROW_FAILED), shrinks, tenant create/delete/limits, owner detach and
 * re-attach, event reads, snapshots.  After every operation it checks:
 *  - kvpool_pool_check(): rule 1 sums (tenants' current == used == sum of
 *    leases), every leased block below backed, peak >= current, the
 *    bitmap, slots and unmet-min bookkeeping;
 *  - one lease per block, from SNAPSHOT: no block listed twice, each
 *    listed lease exists, blocks in increasing order;
 *  - at each grant: the tenant stays within max, the grant fits in
 *    free - (other tenants' unmet min) as it was just before, and the
 *    blocks are the lowest free ones, all below backed;
 *  - a refused release or a cancelled grant changes nothing.
 * Any violation aborts (a crash for libFuzzer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool_ledger.h"

#define MAXL	12	/* leases at once */
#define MAXT	6	/* named tenants t0..t5 */
#define MAXCAP	256

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

struct fz {
	struct kvpool_pool *pool;
	struct kvpool_lease *l[MAXL];	/* NULL: closed (or never opened) */
	u64 id[MAXL];			/* lease ids, also of closed ones */
	int owner_cookie;
	bool owner;
};

static void die(const char *what, const char *why)
{
	fprintf(stderr, "fuzz-ledger: %s: %s\n", what, why ? why : "");
	abort();
}

#define ASSERT(c, what) do { if (!(c)) die(what, #c); } while (0)

static const struct kvpool_ledger_ops fz_ops;	/* no callbacks needed */

static void check(struct fz *f)
{
	static struct kvpool_lease_info li[MAXL + 4];
	static struct kvpool_block_owner bo[MAXCAP];
	static u8 seen[MAXCAP];
	struct kvpool_snapshot s;
	const char *why = NULL;
	u32 i, j;

	if (kvpool_pool_check(f->pool, &why))
		die("invariant", why);
	memset(&s, 0, sizeof(s));
	ASSERT(kvpool_snapshot(f->pool, li, MAXL + 4, bo, MAXCAP, &s) == 0,
	       "snapshot");
	ASSERT(s.blocks == f->pool->used && s.backed == f->pool->backed,
	       "snapshot counts");
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < s.blocks; i++) {
		bool found = false;

		ASSERT(bo[i].block < f->pool->backed, "snapshot block below backed");
		ASSERT(!seen[bo[i].block], "a block in two leases");
		seen[bo[i].block] = 1;
		ASSERT(!i || bo[i].block > bo[i - 1].block, "snapshot order");
		for (j = 0; j < s.leases; j++)
			found |= li[j].lease_id == bo[i].lease_id;
		ASSERT(found, "a block of a lease that does not exist");
	}
}

static u32 tenant_unmet(const struct kvpool_tenant *t)
{
	return t->cur < t->min ? t->min - t->cur : 0;
}

/* The @n lowest free block indices, or fewer if the pool has fewer. */
static u32 lowest_free(struct kvpool_pool *pool, u32 *out, u32 n)
{
	u32 b, k = 0;

	for (b = 0; b < pool->capacity && k < n; b++)
		if (!(pool->owner_of[b] & 0x7fffffffU))
			out[k++] = b;
	return k;
}

static void op_grant(struct fz *f, struct in *in, struct kvpool_lease *l)
{
	static u32 out[MAXCAP + 8], want[MAXCAP + 8];
	struct kvpool_tenant *t = l->tenant;
	struct kvpool_wait w;
	u32 count = 1 + rd8(in) % (rd8(in) & 1 ? 8 : MAXCAP + 4);
	u32 flags = rd8(in) & 7, used = f->pool->used, held = l->held;
	u32 cur = t->cur, peak = t->peak, target = l->reclaim_target;
	u32 mode = rd8(in) % 4;
	u64 protect = f->pool->unmet_min - tenant_unmet(t);
	u64 free_ = f->pool->capacity - f->pool->used;
	int got;

	memset(&w, 0, sizeof(w));
	w.started = rd8(in) & 1;
	lowest_free(f->pool, want, count);
	got = mode ? kvpool_lease_grant_pending(l, count, flags, out, &w) :
		     kvpool_lease_grant(l, count, flags, out, &w);
	if (got <= 0) {
		ASSERT(f->pool->used == used && l->held == held, "refused grant changed held");
		return;
	}
	ASSERT((u32)got <= count, "granted more than asked");
	ASSERT(t->max == KVPOOL_UNLIMITED || t->cur <= t->max, "grant above max");
	ASSERT((u64)got <= (free_ > protect ? free_ - protect : 0),
	       "grant ate into another tenant's min");
	ASSERT(!memcmp(out, want, (size_t)got * sizeof(u32)), "not the lowest free blocks");
	ASSERT(out[got - 1] < f->pool->backed, "granted above backed");
	ASSERT(l->held == held + (u32)got && t->cur == cur + (u32)got, "grant accounting");
	if (mode == 1) {
		ASSERT(!kvpool_lease_grant_commit(l, out, (u32)got), "commit");
		ASSERT(kvpool_lease_grant_commit(l, out, (u32)got) == -EINVAL, "commit twice");
	} else if (mode >= 2) {
		u32 bad = 0;
		int rr = kvpool_lease_release(l, out, 1);

		/* Pending blocks: not releasable, not checkable. */
		ASSERT(rr == -EINVAL || rr == -EBUSY, "release of a pending block");
		ASSERT(kvpool_lease_check(f->pool, l->id, out, 1, &bad) == -EPERM,
		       "check of a pending block");
		if (mode == 3 && got > 1) {
			/* Commit all but the first, then cancel only it. */
			ASSERT(!kvpool_lease_grant_commit(l, out + 1, (u32)got - 1),
			       "commit the rest");
			ASSERT(kvpool_lease_grant_cancel(l, out + 1, 1, &w) == -EINVAL,
			       "cancel of a committed block");
			ASSERT(!kvpool_lease_grant_cancel(l, out, 1, &w), "cancel the first");
			ASSERT(l->held == held + (u32)got - 1, "partial cancel");
			return;
		}
		ASSERT(!kvpool_lease_grant_cancel(l, out, (u32)got, &w), "cancel");
		ASSERT(f->pool->used == used && l->held == held && t->cur == cur &&
		       l->reclaim_target == target, "cancel changed the state");
		ASSERT(t->peak == peak, "cancel left the grant's peak");
	}
}

static void op_release(struct fz *f, struct in *in, struct kvpool_lease *l)
{
	static u32 b[16];
	u32 n = 1 + rd8(in) % 16, i, used = f->pool->used, held = l->held;
	int r;

	for (i = 0; i < n; i++) {
		u32 k = rd8(in);

		/* Mostly the lowest indices, which someone probably holds. */
		b[i] = k & 0x80 ? (k & 0x7f) % (f->pool->capacity + 2) :
				  k % (f->pool->backed + 1);
	}
	r = kvpool_lease_release(l, b, n);
	if (r < 0)
		ASSERT(f->pool->used == used && l->held == held, "refused release changed held");
	else
		ASSERT((u32)r == n && l->held == held - n, "release accounting");
}

static void op_pin(struct fz *f, struct in *in)
{
	static u32 b[8];
	u32 n = 1 + rd8(in) % 8, i, bad;
	int k = (int)(rd8(in) % MAXL);

	for (i = 0; i < n; i++)
		b[i] = rd8(in) % (f->pool->capacity + 1);
	if (rd8(in) & 1)
		kvpool_lease_pin(f->pool, f->id[k], b, n, &bad);
	else
		kvpool_lease_check(f->pool, f->id[k], b, n, &bad);
}

static void op_tenant(struct fz *f, struct in *in)
{
	char name[KVPOOL_NAME_LEN];
	unsigned int what = rd8(in) % 6;
	struct kvpool_tenant *t;
	u32 max = rd8(in), min = rd8(in);

	snprintf(name, sizeof(name), "t%u", rd8(in) % MAXT);
	if (max >= 250)
		max = KVPOOL_UNLIMITED;
	t = kvpool_tenant_find(f->pool, name);
	switch (what) {
	case 0:
		kvpool_tenant_create(f->pool, name, max, min, rd8(in) % 4,
				     rd8(in) % 4, NULL);
		break;
	case 1:
		kvpool_tenant_delete(f->pool, name);
		break;
	case 2:
		if (t) {
			u32 om = t->max, on = t->min;

			if (kvpool_tenant_set_limits(t, max, min))
				ASSERT(t->max == om && t->min == on, "refused limits changed");
		}
		break;
	case 3:
		if (t)
			kvpool_tenant_set_max(t, max);
		break;
	case 4:
		if (t)
			kvpool_tenant_set_min(t, min);
		break;
	default:
		if (t)
			kvpool_tenant_reset_peak(t);
		break;
	}
}

static void op_lease(struct fz *f, struct in *in)
{
	unsigned int what = rd8(in) % 8, k = rd8(in) % MAXL;
	struct kvpool_lease *l = f->l[k];
	struct kvpool_cred cred = {
		.uid = rd8(in) % 4, .gid = rd8(in) % 4, .pid = 1,
	};
	char name[KVPOOL_NAME_LEN];

	cred.admin = cred.uid == 0;
	if (!l) {
		if (!kvpool_lease_open(f->pool, &cred, &f->l[k]))
			f->id[k] = f->l[k]->id;
		return;
	}
	switch (what) {
	case 0:
		kvpool_lease_close(l);
		f->l[k] = NULL;
		break;
	case 1:
		snprintf(name, sizeof(name), "t%u", rd8(in) % (MAXT + 1));
		kvpool_lease_attach(l, rd8(in) & 1 ? name : "", &cred);
		break;
	case 2:
	case 3:
		op_grant(f, in, l);
		break;
	case 4:
	case 5:
		op_release(f, in, l);
		break;
	case 6: {
		u32 held = l->held;
		int r = kvpool_lease_release_all(l);

		ASSERT(r == -EBUSY ? l->held == held : l->held <= held, "release all");
		break;
	}
	default: {
		struct kvpool_status st;
		struct kvpool_wait w;

		memset(&st, 0, sizeof(st));
		memset(&w, 0, sizeof(w));
		kvpool_status_fill(f->pool, l, &st);
		ASSERT(st.held == l->held, "status held");
		kvpool_lease_wait_end(l, &w, rd8(in) & 1 ? -ETIMEDOUT : 0);
		break;
	}
	}
}

static void op_pool(struct fz *f, struct in *in)
{
	struct kvpool_event ev;
	unsigned int what = rd8(in) % 8, k;
	u32 v = rd16(in) % (f->pool->capacity + 2);

	switch (what) {
	case 0:
		kvpool_pool_grow(f->pool, v, rd8(in) & 3);
		break;
	case 1:
		kvpool_pool_grow(f->pool, f->pool->capacity, 0);
		break;
	case 2:
		kvpool_pool_shrink(f->pool, v);
		break;
	case 3: {
		u32 floor = kvpool_pool_shrink_floor(f->pool);

		if (floor < f->pool->backed)
			ASSERT(!kvpool_pool_shrink(f->pool, floor), "shrink to the floor");
		break;
	}
	case 4:
		for (k = rd8(in) % 8; k > 0; k--)
			if (kvpool_owner_read_event(f->pool, &ev) != 1)
				break;
		break;
	case 5:
		if (f->owner) {
			kvpool_owner_detach(f->pool);
			f->owner = false;
		} else {
			ASSERT(!kvpool_owner_attach(f->pool, &f->owner_cookie), "attach");
			f->owner = true;
		}
		break;
	case 6:
		kvpool_lease_unpin(f->pool, f->id[rd8(in) % MAXL]);
		break;
	default:
		op_pin(f, in);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct kvpool_pool_params p;
	struct fz f;
	unsigned int steps = 0;

	memset(&f, 0, sizeof(f));
	memset(&p, 0, sizeof(p));
	strcpy(p.name, "fz");
	p.block_bytes = 4096;
	p.capacity = 1 + rd8(&in) % MAXCAP;
	p.chunk_blocks = 1 + rd8(&in) % p.capacity;
	p.default_max = rd8(&in);
	if (p.default_max >= 200)
		p.default_max = KVPOOL_UNLIMITED;
	if (kvpool_pool_create(&p, &fz_ops, NULL, &f.owner_cookie, &f.pool))
		return 0;
	f.owner = true;
	while (in.n && steps++ < 2000) {
		if (rd8(&in) & 1)
			op_lease(&f, &in);
		else if (rd8(&in) & 1)
			op_pool(&f, &in);
		else
			op_tenant(&f, &in);
		check(&f);
	}
	kvpool_pool_destroy(f.pool);
	return 0;
}
