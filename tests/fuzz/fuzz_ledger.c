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
 * re-attach (a second owner refused), LEASE_MOVE between leases (all or
 * nothing, the tenant's current unchanged), reclaim orders (NORMAL, FIRST,
 * NEVER, unknown; admin or not), event reads, snapshots with short
 * lists, counts and sizes beyond the ledger's limits, unknown flags, names
 * the ledger refuses, pool parameters it refuses.  Once per input: a storm
 * of files opened and closed while the owner does not read (the closed
 * queue stays bounded, CLOSED_MANY takes the rest).  The host's callbacks
 * are counted and its tenant_added can be told to fail: the tenant (named,
 * or a new uid's automatic one with its lease) is then not created.  (The
 * tenant table's limit is a unit test: filling it takes seconds here.)  The
 * invariant walk itself is checked: a counter or bitmap bit changed behind
 * the ledger's back must be reported, then it is put back.
 * After every operation it checks:
 *  - kvpool_pool_check(): rule 1 sums (tenants' current == used == sum of
 *    leases), every leased block below backed, peak >= current, every
 *    reclaim target at most what its lease holds, the bitmap, slots and
 *    unmet-min bookkeeping;
 *  - one lease per block, from SNAPSHOT: no block listed twice, each
 *    listed lease exists, blocks in increasing order;
 *  - at each grant: the tenant stays within max, the grant fits in
 *    free - (other tenants' unmet min) as it was just before, and the
 *    blocks are the lowest free ones, all below backed;
 *  - a refused release or a cancelled grant changes nothing;
 *  - no move takes blocks out of a pinned lease (-EBUSY, nothing moved).
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
	bool stormed;			/* once per input: it is slow */
};

static void die(const char *what, const char *why)
{
	fprintf(stderr, "fuzz-ledger: %s: %s\n", what, why ? why : "");
	abort();
}

#define ASSERT(c, what) do { if (!(c)) die(what, #c); } while (0)

/* The host's callbacks: counted, and tenant_added fails when asked to. */
static struct {
	unsigned long wakes, observed;
	int fail_tenant_added;
} host;

static void fz_wake(struct kvpool_pool *pool)
{
	host.wakes++;
}

static void fz_reclaim_wake(struct kvpool_lease *lease)
{
	host.wakes++;
}

static void fz_observe(struct kvpool_pool *pool, const struct kvpool_event *ev)
{
	host.observed++;
	ASSERT(ev->seq && ev->seq <= pool->seq, "observed event sequence");
}

static int fz_tenant_added(struct kvpool_tenant *t)
{
	return host.fail_tenant_added;
}

static void fz_tenant_removed(struct kvpool_tenant *t)
{
}

static bool fz_in_group(const struct kvpool_cred *cred, u32 gid)
{
	return gid == cred->uid + 1;
}

static const struct kvpool_ledger_ops fz_ops = {
	.owner_wake = fz_wake,
	.waiters_wake = fz_wake,
	.reclaim_wake = fz_reclaim_wake,
	.observe = fz_observe,
	.tenant_added = fz_tenant_added,
	.tenant_removed = fz_tenant_removed,
	.in_group = fz_in_group,
};

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
	unsigned int shape = rd8(in);
	u32 count = shape == 255 ? 0 : shape == 254 ? KVPOOL_IO_MAX_BLOCKS + 1 :
		    1 + rd8(in) % (shape & 1 ? 8 : MAXCAP + 4);
	u32 flags = rd8(in), used = f->pool->used, held = l->held;
	u32 cur = t->cur, peak = t->peak, target = l->reclaim_target;
	u32 mode = rd8(in) % 4;
	u64 protect = f->pool->unmet_min - tenant_unmet(t);
	u64 free_ = f->pool->capacity - f->pool->used;
	int got;

	flags = flags >= 0xf0 ? flags : flags & 7;	/* unknown bits now and then */
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
	unsigned int shape = rd8(in);
	u32 n = shape == 255 ? 0 : 1 + shape % 16, i, used = f->pool->used;
	u32 held = l->held;
	int r;

	for (i = 0; i < n; i++) {
		u32 k = rd8(in);

		/* Mostly the lowest indices, which someone probably holds. */
		b[i] = k & 0x80 ? (k & 0x7f) % (f->pool->capacity + 2) :
				  k % (f->pool->backed + 1);
	}
	r = kvpool_lease_release(l, b, n ? n : (rd8(in) & 1 ? 0 : KVPOOL_IO_MAX_BLOCKS + 1));
	if (r < 0)
		ASSERT(f->pool->used == used && l->held == held, "refused release changed held");
	else
		ASSERT((u32)r == n && l->held == held - n, "release accounting");
}

static void op_pin(struct fz *f, struct in *in)
{
	static u32 b[8];
	unsigned int shape = rd8(in);
	u32 n = 1 + shape % 8, i, bad;
	int k = (int)(rd8(in) % MAXL);

	for (i = 0; i < n; i++)
		b[i] = rd8(in) % (f->pool->capacity + 1);
	if (shape >= 0xfe)
		n = shape == 0xff ? 0 : KVPOOL_IO_MAX_BLOCKS + 1;	/* refused */
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
	case 0: {
		u32 uid = rd8(in) % 4, gid = rd8(in) % 4, before = f->pool->ntenants;
		int r = kvpool_tenant_create(f->pool, name, max, min, uid, gid, NULL);

		if (r)
			ASSERT(f->pool->ntenants == before &&
			       kvpool_tenant_find(f->pool, name) == t,
			       "refused tenant create changed the table");
		else
			ASSERT(!t && !host.fail_tenant_added, "tenant created");
		break;
	}
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
	case 1: {
		unsigned int k2 = rd8(in);

		snprintf(name, sizeof(name), "t%u", rd8(in) % (MAXT + 1));
		if (k2 % 8 == 7)
			strcpy(name, "bad name");
		kvpool_lease_attach(l, k2 & 1 ? name : "", &cred);
		break;
	}
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

/*
 * LEASE_MOVE between two leases (often of one tenant): all or nothing; the
 * blocks change hands, the tenant's current does not.
 */
static void op_move(struct fz *f, struct in *in)
{
	static u32 b[8];
	unsigned int shape = rd8(in);
	struct kvpool_lease *from = f->l[rd8(in) % MAXL], *to;
	u32 n = 1 + shape % 8, i, bad = 0, hf, ht, cur, tgt, pins;
	int r;

	to = f->l[rd8(in) % MAXL];
	if (!from || !to)
		return;
	for (i = 0; i < n; i++) {
		u32 k = rd8(in);

		b[i] = k & 0x80 ? (k & 0x7f) % (f->pool->capacity + 1) :
				  k % (f->pool->backed + 1);
	}
	if (shape >= 0xfe)
		n = shape == 0xff ? 0 : KVPOOL_IO_MAX_BLOCKS + 1;	/* refused */
	hf = from->held;
	ht = to->held;
	cur = from->tenant->cur;
	tgt = from->reclaim_target;
	pins = from->pins;
	r = kvpool_lease_move(f->pool, from->id, to->id, b, n, &bad);
	if (r < 0) {
		ASSERT(from->held == hf && to->held == ht &&
		       from->reclaim_target == tgt, "refused move changed held");
		ASSERT(r != -EXDEV || from->tenant != to->tenant, "move -EXDEV");
		ASSERT(r != -EBUSY || pins, "move -EBUSY without a pin");
		return;
	}
	/* A block an operation uses never changes hands. */
	ASSERT(!pins, "moved blocks out of a pinned lease");
	ASSERT((u32)r == n && from != to && from->tenant == to->tenant &&
	       from->held == hf - n && to->held == ht + n &&
	       from->tenant->cur == cur && from->reclaim_target <= from->held,
	       "move accounting");
}

/* Snapshot with the caller's capacities: counts, -ENOSPC, or the lists. */
static void op_snapshot(struct fz *f, struct in *in)
{
	static struct kvpool_lease_info li[MAXL + 4];
	static struct kvpool_block_owner bo[MAXCAP];
	struct kvpool_snapshot s;
	u32 lc = rd8(in) % (MAXL + 5), bc = rd16(in) % (MAXCAP + 1);
	unsigned int k = rd8(in) % 4;
	int r;

	r = kvpool_snapshot(f->pool, k & 1 ? li : NULL, lc, k & 2 ? bo : NULL,
			    bc, &s);
	ASSERT(s.leases == f->pool->nleases && s.blocks == f->pool->used,
	       "snapshot counts");
	if (!k)
		ASSERT(r == 0, "counts-only snapshot");
	else if (r)
		ASSERT(r == -ENOSPC, "snapshot error");
}

/*
 * Many files at once: @n leases opened, each granted a block when it can,
 * and closed, while the owner does not read: the closed records beyond
 * KVPOOL_CLOSED_QUEUE_MAX merge into one CLOSED_MANY record.
 */
static void op_storm(struct fz *f, struct in *in)
{
	struct kvpool_cred cred = { .uid = 7, .gid = 7, .pid = 9 };
	u32 n = 1 + rd16(in) % (KVPOOL_CLOSED_QUEUE_MAX + 64), i, b;
	struct kvpool_lease *batch[48];

	for (i = 0; i < n; i++) {
		struct kvpool_wait w;
		u32 k = i % 48;

		memset(&w, 0, sizeof(w));
		if (kvpool_lease_open(f->pool, &cred, &batch[k])) {
			while (k--)
				kvpool_lease_close(batch[k]);
			return;
		}
		kvpool_lease_grant(batch[k], 1, KVPOOL_LEASE_NONBLOCK, &b, &w);
		/* Keep up to 48 open at once: the slot table grows. */
		if (k == 47 || i == n - 1) {
			u32 j;

			for (j = 0; j <= k; j++)
				kvpool_lease_close(batch[j]);
		}
	}
	ASSERT(f->pool->nclosed <= KVPOOL_CLOSED_QUEUE_MAX, "closed queue bound");
}

/*
 * A lease of a new uid: its automatic tenant is created, or refused by the
 * host's tenant_added (then neither the tenant nor the lease exists).
 */
static void op_new_uid(struct fz *f, struct in *in)
{
	struct kvpool_cred cred = { .uid = 100 + rd8(in) % 4, .pid = 3 };
	u32 before = f->pool->ntenants, nleases = f->pool->nleases;
	char name[KVPOOL_NAME_LEN];
	struct kvpool_lease *l;
	bool had;
	int r;

	cred.gid = cred.uid;
	snprintf(name, sizeof(name), "uid-%u", cred.uid);
	had = kvpool_tenant_find(f->pool, name) != NULL;
	r = kvpool_lease_open(f->pool, &cred, &l);
	if (!had && host.fail_tenant_added) {
		ASSERT(r == host.fail_tenant_added && f->pool->ntenants == before &&
		       f->pool->nleases == nleases &&
		       !kvpool_tenant_find(f->pool, name), "tenant_added refusal");
		return;
	}
	ASSERT(!r, "lease open");
	ASSERT(f->pool->ntenants == before + !had, "automatic tenant");
	kvpool_lease_close(l);
}

/* The invariant walk must notice a broken ledger (then it is mended). */
static void op_corrupt(struct fz *f, struct in *in)
{
	struct kvpool_pool *pool = f->pool;
	const char *why = NULL;
	unsigned int k = rd8(in) % 4;
	struct kvpool_tenant *t;

	switch (k) {
	case 0:
		pool->used++;
		ASSERT(kvpool_pool_check(pool, &why) == -EUCLEAN, "used changed unseen");
		pool->used--;
		break;
	case 1:
		pool->levels[0][0] ^= 1;
		ASSERT(kvpool_pool_check(pool, &why) == -EUCLEAN, "bitmap changed unseen");
		pool->levels[0][0] ^= 1;
		break;
	case 2:
		pool->unmet_min++;
		ASSERT(kvpool_pool_check(pool, &why) == -EUCLEAN, "unmet min changed unseen");
		pool->unmet_min--;
		break;
	default:
		if (list_empty(&pool->tenants))
			break;
		t = list_first_entry(&pool->tenants, struct kvpool_tenant, node);
		t->cur++;
		ASSERT(kvpool_pool_check(pool, &why) == -EUCLEAN, "current changed unseen");
		t->cur--;
		break;
	}
}

static void op_pool(struct fz *f, struct in *in)
{
	struct kvpool_event ev;
	unsigned int what = rd8(in) % 18, k;
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
			ASSERT(kvpool_owner_attach(f->pool, &f->owner_cookie) == -EBUSY,
			       "second owner");
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
	case 7:
		op_pin(f, in);
		break;
	case 8:
		op_snapshot(f, in);
		break;
	case 9:
		ASSERT(kvpool_owner_has_events(f->pool) ==
		       (!list_empty(&f->pool->closed) || f->pool->grow_ev.seq ||
			f->pool->idle_ev.seq || f->pool->reclaim_ev.seq ||
			f->pool->short_ev.seq || f->pool->closed_many_ev.seq),
		       "has_events");
		break;
	case 10:
		if (!f->stormed)
			op_storm(f, in);
		f->stormed = true;
		break;
	case 11:
		op_corrupt(f, in);
		break;
	case 12:
		op_new_uid(f, in);
		break;
	case 13:
		host.fail_tenant_added = rd8(in) & 1 ? -ENOMEM : 0;
		break;
	case 14:
		op_move(f, in);
		break;
	case 15: {		/* kept: parked at close instead of closed */
		struct kvpool_lease *l = f->l[rd8(in) % MAXL];
		bool keep = rd8(in) & 1;
		int r;

		if (!l)
			break;
		r = kvpool_lease_set_keep(l, keep);
		ASSERT(r ? r == -ENOSPC && keep && !l->keep : l->keep == keep,
		       "set_keep");
		break;
	}
	case 16: {		/* a parked lease adopted by a new host */
		struct kvpool_cred cred = { .uid = 0, .admin = true };
		unsigned int i = rd8(in) % MAXL;
		struct kvpool_lease *l;

		if (f->l[i])
			break;
		if (!kvpool_lease_adopt(f->pool, f->id[i], &cred, &l)) {
			ASSERT(l->id == f->id[i] && l->keep && !l->parked,
			       "adopted");
			f->l[i] = l;
		}
		break;
	}
	default: {
		struct kvpool_lease *l = f->l[rd8(in) % MAXL];
		struct kvpool_cred cred = { .uid = 1, .admin = rd8(in) & 1 };
		u32 order = rd8(in) % 4, was;
		int r;

		if (!l)
			break;
		was = l->reclaim_order;
		r = kvpool_lease_set_reclaim_order(l, order, &cred);
		if (r)
			ASSERT(l->reclaim_order == was &&
			       (r == -EINVAL ? order > KVPOOL_RECLAIM_NEVER :
				r == -EPERM && !cred.admin), "refused reclaim order");
		else
			ASSERT(l->reclaim_order == order &&
			       (order != KVPOOL_RECLAIM_NEVER || !l->reclaim_target),
			       "reclaim order");
		break;
	}
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
	memset(&host, 0, sizeof(host));
	strcpy(p.name, "fz");
	p.block_bytes = 4096;
	p.capacity = 1 + rd8(&in) % MAXCAP;
	p.chunk_blocks = 1 + rd8(&in) % p.capacity;
	p.default_max = rd8(&in);
	if (p.default_max >= 200)
		p.default_max = KVPOOL_UNLIMITED;
	/* Now and then a parameter the ledger must refuse. */
	switch (p.default_max == 199 ? rd8(&in) % 6 : 6) {
	case 0: strcpy(p.name, "-fz"); break;
	case 1: p.block_bytes = 1000; break;
	case 2: p.block_bytes = (1ULL << 30) + 256; break;
	case 3: p.capacity = 0; break;
	case 4: p.capacity = KVPOOL_MAX_CAPACITY + 1; break;
	case 5: p.chunk_blocks = p.capacity + 1; break;
	}
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
