// SPDX-License-Identifier: MIT
/*
 * Randomized model test of the ledger core.  Thousands of seeded random
 * operation sequences (tenants, limits, leases, partial leases, releases,
 * bad releases, closes, kept leases parked at close and adopted again,
 * grow, shrink, orphan, re-attach) run against the
 * core and against a plain reference model side by side.  After every step
 * the core's own invariant walk (rules 1 and 3) runs and the two states are
 * compared; every grant must be exactly the lowest free blocks (rule 3) and
 * never push a tenant above max or into another tenant's unmet min (rule 2).
 *
 *   test_ledger_model                 run the default seeds
 *   test_ledger_model --seed S        replay one seed (verbose)
 *   test_ledger_model --seeds N       run N seeds
 */
#include <inttypes.h>
#include "ledger_test.h"

#define MAXCAP		300
#define MAXT		6
#define MAXL		8
#define STEPS		300

struct mtenant {
	bool exists;
	char name[KVPOOL_NAME_LEN];
	u32 max, min, cur;
	struct kvpool_tenant *t;
};

struct mlease {
	bool open;
	bool closing;		/* closed while pinned by the owner */
	bool keep;		/* kvpool_lease_set_keep */
	bool parked;		/* kept and closed: blocks kept, adoptable */
	u32 pins;
	struct kvpool_lease *l;
	int tenant;		/* index into tenants[] (auto tenants too) */
	u32 held;
};

struct model {
	u32 capacity, chunk, backed, used, default_max;
	bool owner;
	int owner_of[MAXCAP];	/* lease index or -1 */
	struct mtenant tenants[MAXT + 3];	/* + 3 auto tenants (uids 0..2) */
	struct mlease leases[MAXL];
	struct kvpool_pool *pool;
	struct test_host host;
};

static uint64_t rng_state;
static bool verbose;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static u32 rn(u32 n)
{
	return n ? (u32)(rnd() % n) : 0;
}

static uint64_t cur_seed;
static uint64_t n_granted, n_refused, n_released, n_bad_release, n_shrunk,
		n_orphan, n_parked, n_adopted;
static int cur_step;

#define FAIL(...) do {							\
	fprintf(stderr, "FAIL seed=%" PRIu64 " step=%d: ", cur_seed,	\
		cur_step);						\
	fprintf(stderr, __VA_ARGS__);					\
	fprintf(stderr, "\n  replay: test_ledger_model --seed %" PRIu64	\
		"\n", cur_seed);					\
	exit(1);							\
} while (0)

#define EXPECT_EQ(a, b, what) do {					\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (_a != _b)							\
		FAIL("%s: got %lld, want %lld", what, _a, _b);		\
} while (0)

static u32 unmet(const struct mtenant *t)
{
	return t->cur < t->min ? t->min - t->cur : 0;
}

static int auto_index(u32 uid)
{
	return MAXT + (int)uid;
}

static struct mtenant *mt_auto(struct model *m, u32 uid)
{
	struct mtenant *t = &m->tenants[auto_index(uid)];

	if (!t->exists) {
		t->exists = true;
		snprintf(t->name, sizeof(t->name), "uid-%u", uid);
		t->max = m->default_max == KVPOOL_UNLIMITED ? KVPOOL_UNLIMITED :
			 min(m->default_max, m->capacity);
		t->min = 0;
		t->cur = 0;
	}
	return t;
}

static void compare(struct model *m)
{
	const char *why = NULL;
	u32 b;
	int i;

	if (kvpool_pool_check(m->pool, &why))
		FAIL("invariant: %s", why);
	EXPECT_EQ(m->pool->used, m->used, "used");
	EXPECT_EQ(m->pool->backed, m->backed, "backed");
	for (b = 0; b < m->capacity; b++) {
		int lo = m->owner_of[b];
		u32 want = lo < 0 ? 0 : m->leases[lo].l->slot + 1;

		EXPECT_EQ(m->pool->owner_of[b], want, "block owner");
	}
	for (i = 0; i < MAXT + 3; i++) {
		struct mtenant *t = &m->tenants[i];
		struct kvpool_tenant *kt;

		if (!t->exists)
			continue;
		kt = kvpool_tenant_find(m->pool, t->name);
		if (!kt)
			FAIL("tenant %s missing", t->name);
		EXPECT_EQ(kt->cur, t->cur, "tenant current");
		EXPECT_EQ(kt->max, t->max, "tenant max");
		EXPECT_EQ(kt->min, t->min, "tenant min");
	}
	for (i = 0; i < MAXL; i++) {
		struct mlease *ml = &m->leases[i];

		if (!ml->open && !ml->closing && !ml->parked)
			continue;
		EXPECT_EQ(ml->l->held, ml->held, "lease held");
		EXPECT_EQ(ml->l->keep, ml->keep, "lease kept");
		EXPECT_EQ(ml->l->parked, ml->parked, "lease parked");
		EXPECT_EQ(ml->l->pins, ml->pins, "lease pins");
	}
}

/* The reference decision for a grant: count granted or -errno. */
static int ref_grant(struct model *m, int li, u32 count, u32 flags)
{
	struct mtenant *t = &m->tenants[m->leases[li].tenant];
	bool partial = flags & KVPOOL_LEASE_PARTIAL;
	u64 protect = 0, free_ = m->capacity - m->used;
	u32 room, avail, bfree;
	int i;

	if (count > m->capacity && !partial)
		return -ENOSPC;
	room = t->max == KVPOOL_UNLIMITED ? U32_MAX :
	       (t->cur < t->max ? t->max - t->cur : 0);
	if (count > room) {
		if (!partial || !room)
			return -EDQUOT;
		count = room;
	}
	if (!m->owner)
		return flags & KVPOOL_LEASE_ORPHAN_FAIL ? -ENXIO : -EAGAIN;
	for (i = 0; i < MAXT + 3; i++)
		if (m->tenants[i].exists && &m->tenants[i] != t)
			protect += unmet(&m->tenants[i]);
	avail = free_ > protect ? (u32)(free_ - protect) : 0;
	if (count > avail) {
		if (!partial || !avail)
			return -EAGAIN;
		count = avail;
	}
	bfree = m->backed - m->used;
	if (count > bfree) {
		if (!partial || !bfree)
			return -EAGAIN;
		count = bfree;
	}
	return (int)count;
}

static void op_grant(struct model *m)
{
	int li = (int)rn(MAXL), want, got, i;
	struct mlease *ml = &m->leases[li];
	u32 count = 1 + rn(rnd() % 8 ? 6 : m->capacity + 2), flags = 0;
	u32 out[MAXCAP + 2], b, k = 0;
	struct kvpool_wait w = { 0 };
	struct mtenant *t;

	if (!ml->open)
		return;
	if (rn(2))
		flags |= KVPOOL_LEASE_PARTIAL;
	if (rn(2))
		flags |= KVPOOL_LEASE_NONBLOCK;
	if (!rn(8))
		flags |= KVPOOL_LEASE_ORPHAN_FAIL;
	/* A two-phase grant that is cancelled changes nothing. */
	if (!rn(8)) {
		u32 used = m->used, held = ml->held;

		got = kvpool_lease_grant_pending(ml->l, count, flags, out, &w);
		if (got > 0 &&
		    kvpool_lease_grant_cancel(ml->l, out, (u32)got, &w))
			FAIL("cancel of a pending grant refused");
		if (ml->l->held != held || m->pool->used != used)
			FAIL("cancelled grant changed held/used");
		memset(&w, 0, sizeof(w));
	}
	want = ref_grant(m, li, count, flags);
	if (rn(4)) {
		got = kvpool_lease_grant(ml->l, count, flags, out, &w);
	} else {
		got = kvpool_lease_grant_pending(ml->l, count, flags, out, &w);
		if (got > 0 && kvpool_lease_grant_commit(ml->l, out, (u32)got))
			FAIL("commit of a pending grant refused");
	}
	if (verbose)
		printf("step %d: grant lease %d count %u flags %u -> %d (want %d)\n",
		       cur_step, li, count, flags, got, want);
	EXPECT_EQ(got, want, "grant result");
	if (got <= 0) {
		n_refused++;
		return;
	}
	n_granted++;
	/* Rule 3: exactly the lowest free blocks, in increasing order. */
	for (b = 0; b < m->capacity && k < (u32)got; b++) {
		if (m->owner_of[b] >= 0)
			continue;
		EXPECT_EQ(out[k], b, "granted block (lowest first)");
		if (b >= m->backed)
			FAIL("granted block %u above backed %u", b, m->backed);
		m->owner_of[b] = li;
		k++;
	}
	t = &m->tenants[ml->tenant];
	t->cur += got;
	ml->held += got;
	m->used += got;
	/* Rule 2: never above max, never into others' unmet min. */
	if (t->max != KVPOOL_UNLIMITED && t->cur > t->max)
		FAIL("tenant %s above max", t->name);
	{
		u64 protect = 0;

		for (i = 0; i < MAXT + 3; i++)
			if (m->tenants[i].exists && &m->tenants[i] != t)
				protect += unmet(&m->tenants[i]);
		if (m->capacity - m->used < protect)
			FAIL("grant ate into another tenant's min");
	}
}

static void op_release(struct model *m, bool bad)
{
	int li = (int)rn(MAXL);
	struct mlease *ml = &m->leases[li];
	u32 list[MAXCAP + 1], n = 0, b, i;
	int ret;

	if (!ml->open || !ml->held)
		return;
	for (b = 0; b < m->capacity; b++)
		if (m->owner_of[b] == li && rn(2))
			list[n++] = b;
	if (!n)
		return;
	if (ml->pins) {
		EXPECT_EQ(kvpool_lease_release(ml->l, list, n), -EBUSY,
			  "release while pinned");
		EXPECT_EQ(kvpool_lease_release_all(ml->l), -EBUSY,
			  "release all while pinned");
		return;
	}
	/* Shuffle: release order must not matter. */
	for (i = n - 1; i > 0; i--) {
		u32 j = rn(i + 1), x = list[i];

		list[i] = list[j];
		list[j] = x;
	}
	if (bad) {
		u32 kind = rn(3);

		if (kind == 0) {
			list[n++] = list[0];			/* repeated */
		} else if (kind == 1) {
			list[n++] = m->capacity + rn(5);	/* out of range */
		} else {
			for (b = 0; b < m->capacity; b++)
				if (m->owner_of[b] != li)
					break;
			if (b == m->capacity)
				return;
			list[n++] = b;				/* not ours */
		}
		ret = kvpool_lease_release(ml->l, list, n);
		EXPECT_EQ(ret, -EINVAL, "bad release");
		n_bad_release++;
		return;
	}
	ret = kvpool_lease_release(ml->l, list, n);
	EXPECT_EQ(ret, n, "release");
	n_released++;
	for (i = 0; i < n; i++)
		m->owner_of[list[i]] = -1;
	ml->held -= n;
	m->tenants[ml->tenant].cur -= n;
	m->used -= n;
}

static void drop_lease_blocks(struct model *m, int li)
{
	u32 b;

	for (b = 0; b < m->capacity; b++)
		if (m->owner_of[b] == li)
			m->owner_of[b] = -1;
	m->tenants[m->leases[li].tenant].cur -= m->leases[li].held;
	m->used -= m->leases[li].held;
	m->leases[li].held = 0;
}

/* The owner went away: every pin is dropped, pending closes finish. */
static void unpin_all(struct model *m)
{
	int i;

	for (i = 0; i < MAXL; i++) {
		m->leases[i].pins = 0;
		if (m->leases[i].closing) {
			drop_lease_blocks(m, i);
			m->leases[i].closing = false;
		}
	}
}

/* The owner's data plane pins a lease around an operation. */
static void op_pin(struct model *m)
{
	int li = (int)rn(MAXL);
	struct mlease *ml = &m->leases[li];
	u32 b, bad = 0;
	int ret;

	if (!ml->open && !ml->closing && !ml->parked)
		return;
	if (ml->pins && rn(2)) {
		EXPECT_EQ(kvpool_lease_unpin(m->pool, ml->l->id), 0, "unpin");
		if (!--ml->pins && ml->closing) {
			drop_lease_blocks(m, li);
			ml->closing = false;
		}
		return;
	}
	if (!ml->pins && ml->open && !rn(4)) {
		EXPECT_EQ(kvpool_lease_unpin(m->pool, ml->l->id), -EINVAL,
			  "unpin of an unpinned lease");
		return;
	}
	for (b = 0; b < m->capacity; b++)
		if (m->owner_of[b] == li)
			break;
	if (b == m->capacity)
		return;
	ret = kvpool_lease_pin(m->pool, ml->l->id, &b, 1, &bad);
	if (ml->closing || ml->parked) {
		EXPECT_EQ(ret, -ENOENT, "pin of a closing or parked lease");
		return;
	}
	EXPECT_EQ(ret, 0, "pin");
	ml->pins++;
}

static void op_open_close(struct model *m)
{
	int li = (int)rn(MAXL);
	struct mlease *ml = &m->leases[li];

	if (ml->closing)
		return;
	if (ml->open && rn(3) == 0) {
		/* Mark or unmark it kept (never near KVPOOL_PARK_MAX here). */
		bool keep = rn(2);

		EXPECT_EQ(kvpool_lease_set_keep(ml->l, keep), 0, "set keep");
		ml->keep = keep;
	} else if (ml->open) {
		kvpool_lease_close(ml->l);
		ml->open = false;
		if (ml->keep) {
			ml->parked = true;	/* blocks and pins stay */
			n_parked++;
		} else if (ml->pins) {
			ml->closing = true;	/* blocks kept until unpin */
		} else {
			drop_lease_blocks(m, li);
		}
	} else if (ml->parked) {
		struct kvpool_cred c = test_cred(0, 0, true);
		struct kvpool_lease *got = NULL;

		EXPECT_EQ(kvpool_lease_set_keep(ml->l, false), -EINVAL,
			  "unmark a parked lease");
		EXPECT_EQ(kvpool_lease_adopt(m->pool, ml->l->id, &c, &got), 0,
			  "adopt");
		if (got != ml->l)
			FAIL("adopt returned another lease");
		EXPECT_EQ(kvpool_lease_adopt(m->pool, ml->l->id, &c, &got),
			  -ENOENT, "adopt twice");
		ml->parked = false;
		ml->open = true;
		n_adopted++;
	} else {
		u32 uid = rn(3);
		struct kvpool_cred c = test_cred(uid, uid, false);

		mt_auto(m, uid);
		EXPECT_EQ(kvpool_lease_open(m->pool, &c, &ml->l), 0, "open");
		ml->open = true;
		ml->keep = false;
		ml->held = 0;
		ml->tenant = auto_index(uid);
	}
}

static u32 rand_limit(struct model *m, bool allow_unlimited)
{
	if (allow_unlimited && rn(2))
		return KVPOOL_UNLIMITED;
	if (!rn(4))
		return rn(m->capacity + 3);	/* sometimes > capacity: -EINVAL */
	return rn(m->capacity / 4 + 1);
}

static void op_tenant(struct model *m)
{
	int ti = (int)rn(MAXT);
	struct mtenant *t = &m->tenants[ti];
	struct kvpool_cred admin = test_cred(0, 0, true);
	u32 v;
	int ret, i;

	switch (rn(5)) {
	case 0: {	/* create */
		u32 max = rand_limit(m, true), min_ = rand_limit(m, false);
		bool bad = min_ > m->capacity ||
			   (max != KVPOOL_UNLIMITED &&
			    (max > m->capacity || min_ > max));
		char name[KVPOOL_NAME_LEN];

		snprintf(name, sizeof(name), "t%d", ti);
		ret = kvpool_tenant_create(m->pool, name, max, min_,
					   KVPOOL_ID_NONE, KVPOOL_ID_NONE, NULL);
		EXPECT_EQ(ret, bad ? -EINVAL : t->exists ? -EEXIST : 0,
			  "tenant create");
		if (!ret) {
			t->exists = true;
			strcpy(t->name, name);
			t->max = max;
			t->min = min_;
			t->cur = 0;
		}
		break;
	}
	case 1:		/* set max */
		if (!t->exists)
			return;
		v = rand_limit(m, true);
		ret = kvpool_tenant_set_max(kvpool_tenant_find(m->pool, t->name), v);
		if (v != KVPOOL_UNLIMITED && (v > m->capacity || v < t->min)) {
			EXPECT_EQ(ret, -EINVAL, "set max");
		} else {
			EXPECT_EQ(ret, 0, "set max");
			t->max = v;
		}
		break;
	case 2:		/* set min */
		if (!t->exists)
			return;
		v = rand_limit(m, false);
		ret = kvpool_tenant_set_min(kvpool_tenant_find(m->pool, t->name), v);
		if (v > m->capacity ||
		    (t->max != KVPOOL_UNLIMITED && v > t->max)) {
			EXPECT_EQ(ret, -EINVAL, "set min");
		} else {
			EXPECT_EQ(ret, 0, "set min");
			t->min = v;
		}
		break;
	case 3: {	/* attach a lease */
		int li = (int)rn(MAXL);
		struct mlease *ml = &m->leases[li];
		bool same;

		if (!ml->open)
			return;
		ret = kvpool_lease_attach(ml->l, t->exists ? t->name : "none",
					  &admin);
		if (!t->exists) {
			EXPECT_EQ(ret, -ENOENT, "attach missing");
			return;
		}
		same = ml->tenant == ti;
		EXPECT_EQ(ret, same ? 0 : ml->held ? -EBUSY : 0, "attach");
		if (!ret)
			ml->tenant = ti;
		break;
	}
	default: {	/* delete */
		bool busy = false;

		for (i = 0; i < MAXL; i++)
			if ((m->leases[i].open || m->leases[i].closing ||
			     m->leases[i].parked) &&
			    m->leases[i].tenant == ti)
				busy = true;
		ret = kvpool_tenant_delete(m->pool, t->exists ? t->name : "t-none");
		EXPECT_EQ(ret, !t->exists ? -ENOENT : busy ? -EBUSY : 0,
			  "tenant delete");
		if (!ret)
			t->exists = false;
		break;
	}
	}
}

static u32 ref_floor(struct model *m)
{
	u32 top = 0, b, f;

	for (b = 0; b < m->backed; b++)
		if (m->owner_of[b] >= 0)
			top = b + 1;
	f = DIV_ROUND_UP(top, m->chunk) * m->chunk;
	return min(f, m->backed);
}

static void op_backing(struct model *m)
{
	struct kvpool_event ev;
	int ret;

	switch (rn(5)) {
	case 0:
	case 1: {	/* grow by 1..2 chunks */
		u32 step = m->chunk * (1 + rn(2));
		u32 to = min(m->backed + step, m->capacity);

		ret = kvpool_pool_grow(m->pool, to, 0);
		if (verbose)
			printf("grow cap %u chunk %u backed %u -> %u: %d\n",
			       m->capacity, m->chunk, m->backed, to, ret);
		EXPECT_EQ(ret, to > m->backed ? 0 : -EINVAL, "grow");
		if (!ret)
			m->backed = to;
		break;
	}
	case 2: {	/* shrink to the floor, or try below it */
		u32 f = ref_floor(m);

		EXPECT_EQ(kvpool_pool_shrink_floor(m->pool), f, "shrink floor");
		if (f < m->backed) {
			EXPECT_EQ(kvpool_pool_shrink(m->pool, f), 0, "shrink");
			n_shrunk++;
			m->backed = f;
		} else if (f >= m->chunk) {
			u32 below = f - m->chunk;

			below -= below % m->chunk;
			if (below < m->backed)
				EXPECT_EQ(kvpool_pool_shrink(m->pool, below),
					  -EBUSY, "shrink busy");
		}
		break;
	}
	case 3:		/* owner comes and goes */
		if (m->owner) {
			if (rn(4))
				break;
			kvpool_owner_detach(m->pool);
			unpin_all(m);
			n_orphan++;
			m->owner = false;
		} else {
			EXPECT_EQ(kvpool_owner_attach(m->pool, TEST_OWNER), 0,
				  "attach owner");
			m->owner = true;
		}
		break;
	default:	/* the owner drains its events */
		while (kvpool_owner_read_event(m->pool, &ev) == 1)
			if (!m->owner)
				FAIL("orphaned pool queued an owner event");
		break;
	}
}

static void run_seed(uint64_t seed)
{
	struct model *m = calloc(1, sizeof(*m));
	struct kvpool_pool_params p = { .name = "model", .block_bytes = 256 };
	u32 b;
	int i;

	cur_seed = seed;
	cur_step = 0;
	rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
	m->capacity = 1 + rn(rn(4) ? 80 : MAXCAP);
	m->chunk = 1 + rn(m->capacity < 16 ? m->capacity : 16);
	m->default_max = rn(3) ? KVPOOL_UNLIMITED : rn(m->capacity + 1);
	m->owner = true;
	for (b = 0; b < MAXCAP; b++)
		m->owner_of[b] = -1;
	p.capacity = m->capacity;
	p.chunk_blocks = m->chunk;
	p.default_max = m->default_max;
	EXPECT_EQ(kvpool_pool_create(&p, &test_ops, &m->host, TEST_OWNER,
				     &m->pool), 0, "pool create");

	for (cur_step = 1; cur_step <= STEPS; cur_step++) {
		u32 op = rn(100);

		if (op < 35)
			op_grant(m);
		else if (op < 55)
			op_release(m, false);
		else if (op < 60)
			op_release(m, true);
		else if (op < 70)
			op_open_close(m);
		else if (op < 76)
			op_tenant(m);
		else if (op < 84)
			op_pin(m);
		else
			op_backing(m);
		compare(m);
	}
	for (i = 0; i < MAXL; i++) {
		struct mlease *ml = &m->leases[i];

		while (ml->pins) {
			EXPECT_EQ(kvpool_lease_unpin(m->pool, ml->l->id), 0,
				  "final unpin");
			ml->pins--;
		}
		if (ml->parked) {
			struct kvpool_cred c = test_cred(0, 0, true);
			struct kvpool_lease *got = NULL;

			EXPECT_EQ(kvpool_lease_adopt(m->pool, ml->l->id, &c,
						     &got), 0, "final adopt");
			ml->parked = false;
			ml->open = true;
		}
		if (ml->open && ml->keep) {
			EXPECT_EQ(kvpool_lease_set_keep(ml->l, false), 0,
				  "final unmark");
			ml->keep = false;
		}
		if (ml->closing || ml->open) {
			if (ml->open)
				kvpool_lease_close(ml->l);
			drop_lease_blocks(m, i);
			ml->open = ml->closing = false;
		}
	}
	compare(m);
	EXPECT_EQ(m->pool->used, 0, "used after closing all");
	kvpool_pool_destroy(m->pool);
	free(m);
}

int main(int argc, char **argv)
{
	uint64_t first = 1, n = 5000, s;

	if (argc == 3 && !strcmp(argv[1], "--seed")) {
		first = strtoull(argv[2], NULL, 0);
		n = 1;
		verbose = true;
	} else if (argc == 3 && !strcmp(argv[1], "--seeds")) {
		n = strtoull(argv[2], NULL, 0);
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--seed S | --seeds N]\n", argv[0]);
		return 2;
	}
	for (s = first; s < first + n; s++)
		run_seed(s);
	printf("ledger model: %" PRIu64 " seeds x %d steps, all invariants held\n"
	       "  grants %" PRIu64 " ok / %" PRIu64 " refused, releases %" PRIu64
	       " ok / %" PRIu64 " rejected, shrinks %" PRIu64 ", orphanings %"
	       PRIu64 ", parked %" PRIu64 ", adopted %" PRIu64 "\n", n, STEPS,
	       n_granted, n_refused, n_released, n_bad_release, n_shrunk,
	       n_orphan, n_parked, n_adopted);
	return 0;
}
