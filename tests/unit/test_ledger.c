// SPDX-License-Identifier: MIT
/*
 * cmocka unit tests of the ledger core: every rule of DESIGN 2.1 and every
 * error path, each call otherwise valid.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ledger_test.h"

struct fix {
	struct test_host h;
	struct kvpool_pool *pool;
	struct kvpool_cred root, alice, bob;
};

/* Pool of 64 blocks, chunks of 8, 32 backed, per-uid default max 48. */
static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f || test_pool_new(&f->h, 64, 8, 32, 48, &f->pool))
		return -1;
	f->root = test_cred(0, 0, true);
	f->alice = test_cred(1000, 1000, false);
	f->bob = test_cred(1001, 1001, false);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	const char *why = NULL;

	assert_int_equal(kvpool_pool_check(f->pool, &why), 0);
	kvpool_pool_destroy(f->pool);
	free(f);
	return 0;
}

static void check(struct fix *f)
{
	const char *why = NULL;
	int ret = kvpool_pool_check(f->pool, &why);

	if (ret)
		fail_msg("invariant: %s", why);
}

static struct kvpool_lease *open_lease(struct fix *f,
				       const struct kvpool_cred *c)
{
	struct kvpool_lease *l = NULL;

	assert_int_equal(kvpool_lease_open(f->pool, c, &l), 0);
	assert_non_null(l);
	return l;
}

static int grant(struct kvpool_lease *l, u32 n, u32 flags, u32 *out)
{
	struct kvpool_wait w = { 0 };

	return kvpool_lease_grant(l, n, flags, out, &w);
}

/* ---- pools ---------------------------------------------------------- */

static void pool_create_errors(void **state)
{
	struct test_host h = { 0 };
	struct kvpool_pool *p = NULL;
	struct kvpool_pool_params ok = {
		.name = "gpu0", .block_bytes = 4096, .capacity = 16,
		.chunk_blocks = 4, .default_max = KVPOOL_UNLIMITED,
	}, bad;

	(void)state;
	assert_int_equal(kvpool_pool_create(&ok, &test_ops, &h, NULL, &p), 0);
	assert_int_equal(p->backed, 0);
	assert_int_equal(p->epoch, 1);
	kvpool_pool_destroy(p);

	bad = ok; bad.name[0] = '\0';
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; strcpy(bad.name, "-gpu");
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; strcpy(bad.name, "gpu/0");
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; memset(bad.name, 'a', sizeof(bad.name));
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.block_bytes = 0;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.block_bytes = 1000;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.block_bytes = (1ULL << 30) + 256;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.capacity = 0;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.capacity = KVPOOL_MAX_CAPACITY + 1;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.chunk_blocks = 0;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
	bad = ok; bad.chunk_blocks = 17;
	assert_int_equal(kvpool_pool_create(&bad, &test_ops, &h, NULL, &p), -EINVAL);
}

static void pool_large_capacity(void **state)
{
	struct test_host h = { 0 };
	struct kvpool_pool *p;
	struct kvpool_lease *l;
	struct kvpool_cred c = test_cred(5, 5, false);
	u32 *out = calloc(4096, sizeof(u32));
	u32 i;

	(void)state;
	/* 1M blocks: four bitmap levels. */
	assert_int_equal(test_pool_new(&h, 1U << 20, 4096, 1U << 20,
				       KVPOOL_UNLIMITED, &p), 0);
	assert_int_equal(p->nlevels, 4);
	assert_int_equal(kvpool_lease_open(p, &c, &l), 0);
	for (i = 0; i < 256; i++)
		assert_int_equal(grant(l, 4096, 0, out), 4096);
	assert_int_equal(p->used, 1U << 20);
	assert_int_equal(out[4095], (1U << 20) - 1);
	assert_int_equal(grant(l, 1, KVPOOL_LEASE_NONBLOCK, out), -EAGAIN);
	assert_int_equal(kvpool_lease_release(l, out, 4096), 4096);
	assert_int_equal(grant(l, 1, 0, out), 1);
	assert_int_equal(out[0], (1U << 20) - 4096);
	assert_int_equal(kvpool_pool_check(p, NULL), 0);
	kvpool_lease_close(l);
	assert_int_equal(p->used, 0);
	kvpool_pool_destroy(p);
	free(out);
}

static void grow_rules(void **state)
{
	struct fix *f = *state;
	struct kvpool_pool *p = f->pool;

	assert_int_equal(kvpool_pool_grow(p, 32, 0), -EINVAL);	/* not above */
	assert_int_equal(kvpool_pool_grow(p, 36, 0), -EINVAL);	/* unaligned */
	assert_int_equal(kvpool_pool_grow(p, 72, 0), -EINVAL);	/* > capacity */
	assert_int_equal(kvpool_pool_grow(p, 40, 1U << 7), -EINVAL);
	assert_int_equal(kvpool_pool_grow(p, 8, KVPOOL_GROW_FAILED), -EINVAL);
	assert_int_equal(kvpool_pool_grow(p, 40, 0), 0);
	assert_int_equal(p->backed, 40);
	assert_int_equal(f->h.observed_by_type[KVPOOL_EVENT_BACKED], 2);
	assert_int_equal(kvpool_pool_grow(p, 64, 0), 0);
}

static void grow_to_odd_capacity(void **state)
{
	struct test_host h = { 0 };
	struct kvpool_pool *p;

	(void)state;
	assert_int_equal(test_pool_new(&h, 20, 8, 16, KVPOOL_UNLIMITED, &p), 0);
	assert_int_equal(kvpool_pool_grow(p, 20, 0), 0);	/* == capacity */
	assert_int_equal(kvpool_pool_shrink(p, 16), 0);
	assert_int_equal(kvpool_pool_shrink(p, 12), -EINVAL);
	kvpool_pool_destroy(p);
}

static void shrink_rules(void **state)
{
	struct fix *f = *state;
	struct kvpool_pool *p = f->pool;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	u32 b[32];

	assert_int_equal(grant(l, 20, 0, b), 20);	/* blocks 0..19 */
	assert_int_equal(kvpool_pool_shrink_floor(p), 24);
	assert_int_equal(kvpool_pool_shrink(p, 32), -EINVAL);	/* not below */
	assert_int_equal(kvpool_pool_shrink(p, 20), -EINVAL);	/* unaligned */
	assert_int_equal(kvpool_pool_shrink(p, 16), -EBUSY);	/* 16..19 held */
	assert_int_equal(p->backed, 32);
	assert_int_equal(kvpool_pool_shrink(p, 24), 0);
	assert_int_equal(p->backed, 24);
	assert_int_equal(kvpool_lease_release(l, &b[16], 4), 4);
	assert_int_equal(kvpool_pool_shrink_floor(p), 16);
	assert_int_equal(kvpool_pool_shrink(p, 16), 0);
	assert_int_equal(kvpool_lease_release_all(l), 16);
	assert_int_equal(kvpool_pool_shrink_floor(p), 0);
	assert_int_equal(kvpool_pool_shrink(p, 0), 0);
	kvpool_lease_close(l);
	check(f);
}

/* ---- tenants -------------------------------------------------------- */

static void tenant_errors(void **state)
{
	struct fix *f = *state;
	struct kvpool_pool *p = f->pool;
	struct kvpool_tenant *t = NULL;

	assert_int_equal(kvpool_tenant_create(p, "web", 10, 2, 1000,
					      KVPOOL_ID_NONE, &t), 0);
	assert_non_null(t);
	assert_int_equal(f->h.tenants_added, 1);
	assert_int_equal(kvpool_tenant_create(p, "web", 10, 2, 0, 0, NULL),
			 -EEXIST);
	assert_int_equal(kvpool_tenant_create(p, "", 10, 2, 0, 0, NULL), -EINVAL);
	assert_int_equal(kvpool_tenant_create(p, "a b", 10, 2, 0, 0, NULL),
			 -EINVAL);
	assert_int_equal(kvpool_tenant_create(p, "big", 65, 0, 0, 0, NULL),
			 -EINVAL);
	assert_int_equal(kvpool_tenant_create(p, "big", 10, 65, 0, 0, NULL),
			 -EINVAL);
	assert_int_equal(kvpool_tenant_set_max(t, 65), -EINVAL);
	assert_int_equal(kvpool_tenant_set_min(t, 65), -EINVAL);
	assert_int_equal(t->max, 10);
	assert_int_equal(t->min, 2);
	assert_int_equal(p->unmet_min, 2);
	f->h.fail_tenant_added = -ENOMEM;
	assert_int_equal(kvpool_tenant_create(p, "x", 1, 1, 0, 0, NULL), -ENOMEM);
	assert_null(kvpool_tenant_find(p, "x"));
	assert_int_equal(p->unmet_min, 2);
	f->h.fail_tenant_added = 0;
	assert_int_equal(kvpool_tenant_delete(p, "nope"), -ENOENT);
	assert_int_equal(kvpool_tenant_delete(p, "web"), 0);
	assert_int_equal(f->h.tenants_removed, 1);
	assert_int_equal(p->unmet_min, 0);
	assert_null(kvpool_tenant_find(p, "web"));
}

/* The tenant table holds KVPOOL_MAX_TENANTS: beyond, -ENOSPC everywhere. */
static void tenant_table_full(void **state)
{
	struct fix *f = *state;
	struct kvpool_pool *p = f->pool;
	struct kvpool_lease *l = open_lease(f, &f->alice), *x = NULL;
	char name[KVPOOL_NAME_LEN];
	u32 i, start = p->ntenants, n = start;

	for (i = 0; n < KVPOOL_MAX_TENANTS; i++, n++) {
		snprintf(name, sizeof(name), "t%u", i);
		assert_int_equal(kvpool_tenant_create(p, name, 1, 0,
						      KVPOOL_ID_NONE,
						      KVPOOL_ID_NONE, NULL), 0);
	}
	assert_int_equal(p->ntenants, KVPOOL_MAX_TENANTS);
	assert_int_equal(kvpool_tenant_create(p, "more", 1, 0, KVPOOL_ID_NONE,
					      KVPOOL_ID_NONE, NULL), -ENOSPC);
	/* A new uid's automatic tenant does not fit: no lease either. */
	assert_int_equal(kvpool_lease_open(p, &f->bob, &x), -ENOSPC);
	assert_int_equal(p->nleases, 1);
	/* An existing tenant still works. */
	assert_int_equal(kvpool_lease_attach(l, "t0", &f->root), 0);
	check(f);
	kvpool_lease_close(l);
	while (i--) {
		snprintf(name, sizeof(name), "t%u", i);
		assert_int_equal(kvpool_tenant_delete(p, name), 0);
	}
	assert_int_equal(p->ntenants, start);
}

static void tenant_delete_busy(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);

	assert_int_equal(kvpool_tenant_create(f->pool, "web", KVPOOL_UNLIMITED,
					      0, 1000, KVPOOL_ID_NONE, NULL), 0);
	assert_int_equal(kvpool_lease_attach(l, "web", &f->alice), 0);
	assert_int_equal(kvpool_tenant_delete(f->pool, "web"), -EBUSY);
	kvpool_lease_close(l);
	assert_int_equal(kvpool_tenant_delete(f->pool, "web"), 0);
}

static void attach_rules(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	u32 b[4];

	assert_string_equal(l->tenant->name, "uid-1000");
	assert_true(l->tenant->automatic);
	assert_int_equal(l->tenant->max, 48);		/* pool default */
	assert_int_equal(kvpool_tenant_create(f->pool, "web", KVPOOL_UNLIMITED,
					      0, 1000, KVPOOL_ID_NONE, NULL), 0);
	assert_int_equal(kvpool_tenant_create(f->pool, "ops", KVPOOL_UNLIMITED,
					      0, KVPOOL_ID_NONE, 1000, NULL), 0);
	assert_int_equal(kvpool_tenant_create(f->pool, "db", KVPOOL_UNLIMITED,
					      0, 7, 7, NULL), 0);
	assert_int_equal(kvpool_lease_attach(l, "nope", &f->alice), -ENOENT);
	assert_int_equal(kvpool_lease_attach(l, "bad name", &f->alice), -EINVAL);
	assert_int_equal(kvpool_lease_attach(l, "db", &f->alice), -EACCES);
	assert_int_equal(kvpool_lease_attach(l, "web", &f->alice), 0);	/* uid */
	assert_int_equal(kvpool_lease_attach(l, "ops", &f->alice), 0);	/* gid */
	assert_int_equal(kvpool_tenant_create(f->pool, "sup", KVPOOL_UNLIMITED,
					      0, KVPOOL_ID_NONE, 2000, NULL), 0);
	assert_int_equal(kvpool_lease_attach(l, "sup", &f->alice), 0);	/* supp. */
	assert_int_equal(kvpool_lease_attach(l, "sup", &f->bob), -EACCES);
	assert_int_equal(kvpool_lease_attach(l, "db", &f->root), 0);	/* admin */
	assert_string_equal(l->tenant->name, "db");
	assert_int_equal(grant(l, 2, 0, b), 2);
	assert_int_equal(kvpool_lease_attach(l, "web", &f->alice), -EBUSY);
	assert_int_equal(kvpool_lease_attach(l, "db", &f->root), 0); /* same */
	assert_int_equal(kvpool_lease_release_all(l), 2);
	assert_int_equal(kvpool_lease_attach(l, "", &f->alice), 0);
	assert_string_equal(l->tenant->name, "uid-1000");
	kvpool_lease_close(l);
}

/* ---- leases: rules 1, 3, 4 ----------------------------------------- */

static void lowest_first(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u32 x[8], y[8], i;

	assert_int_equal(grant(a, 4, 0, x), 4);
	for (i = 0; i < 4; i++)
		assert_int_equal(x[i], i);
	assert_int_equal(grant(b, 4, 0, y), 4);
	assert_int_equal(y[0], 4);
	u32 rel[2] = { 1, 2 };
	assert_int_equal(kvpool_lease_release(a, rel, 2), 2);
	assert_int_equal(grant(b, 3, 0, y), 3);
	assert_int_equal(y[0], 1);
	assert_int_equal(y[1], 2);
	assert_int_equal(y[2], 8);
	assert_int_equal(f->pool->used, 9);
	assert_int_equal(a->held, 2);
	assert_int_equal(b->held, 7);
	assert_true(a->id != b->id);
	check(f);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
}

static void grant_errors(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	u32 b[4];

	assert_int_equal(grant(l, 0, 0, b), -EINVAL);
	assert_int_equal(grant(l, KVPOOL_IO_MAX_BLOCKS + 1, 0, b), -EINVAL);
	assert_int_equal(grant(l, 1, 1U << 9, b), -EINVAL);
	assert_int_equal(grant(l, 65, 0, b), -ENOSPC);
	assert_int_equal(f->pool->used, 0);
	kvpool_lease_close(l);
}

static void all_or_nothing_and_partial(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->root);
	struct kvpool_lease *m = open_lease(f, &f->bob);
	u32 *b = calloc(64, sizeof(u32));

	assert_int_equal(grant(l, 50, 0, b), -EDQUOT);	/* default max 48 */
	kvpool_tenant_set_max(l->tenant, KVPOOL_UNLIMITED);
	assert_int_equal(grant(l, 60, 0, b), -EAGAIN);	/* needs grow */
	assert_int_equal(f->pool->used, 0);
	assert_int_equal(kvpool_pool_grow(f->pool, 64, 0), 0);
	assert_int_equal(grant(l, 60, 0, b), 60);
	assert_int_equal(grant(m, 5, 0, b), -EAGAIN);	/* all or nothing */
	assert_int_equal(m->held, 0);
	assert_int_equal(grant(m, 5, KVPOOL_LEASE_PARTIAL, b), 4);
	assert_int_equal(b[0], 60);
	assert_int_equal(grant(m, 5, KVPOOL_LEASE_PARTIAL, b), -EAGAIN);
	assert_int_equal(grant(m, 1, KVPOOL_LEASE_PARTIAL |
			       KVPOOL_LEASE_NONBLOCK, b), -EAGAIN);
	assert_int_equal(m->tenant->ev_fail, 1);
	check(f);
	kvpool_lease_close(l);
	kvpool_lease_close(m);
	free(b);
}

static void quota_max(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	struct kvpool_tenant *t;
	u32 b[32];

	assert_int_equal(kvpool_tenant_create(f->pool, "web", 10, 0, 1000,
					      KVPOOL_ID_NONE, &t), 0);
	assert_int_equal(kvpool_lease_attach(l, "web", &f->alice), 0);
	assert_int_equal(grant(l, 8, 0, b), 8);
	assert_int_equal(grant(l, 3, 0, b), -EDQUOT);
	assert_int_equal(t->ev_max, 1);
	assert_int_equal(f->h.observed_by_type[KVPOOL_EVENT_QUOTA], 1);
	assert_int_equal(grant(l, 3, KVPOOL_LEASE_PARTIAL, b), 2);
	assert_int_equal(t->cur, 10);
	assert_int_equal(grant(l, 1, KVPOOL_LEASE_PARTIAL, b), -EDQUOT);
	assert_int_equal(t->ev_max, 2);
	assert_int_equal(t->peak, 10);
	/* Lowering max below current refuses grants and posts reclaim. */
	unsigned int rw = f->h.reclaim_wakes;
	assert_int_equal(kvpool_tenant_set_max(t, 6), 0);
	assert_int_equal(l->reclaim_target, 4);
	assert_int_equal(f->h.reclaim_wakes, rw + 1);
	assert_int_equal(t->ev_reclaim, 1);
	assert_int_equal(grant(l, 1, 0, b), -EDQUOT);
	assert_int_equal(kvpool_lease_release(l, b, 2), 2);
	assert_int_equal(l->reclaim_target, 2);
	assert_int_equal(t->cur, 8);
	assert_int_equal(t->peak, 10);
	kvpool_tenant_reset_peak(t);
	assert_int_equal(t->peak, 8);
	kvpool_lease_close(l);
}

static void release_validation(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u32 x[4], y[4];

	assert_int_equal(grant(a, 4, 0, x), 4);
	assert_int_equal(grant(b, 4, 0, y), 4);
	u32 other[3] = { x[0], x[1], y[0] };
	assert_int_equal(kvpool_lease_release(a, other, 3), -EINVAL);
	u32 dup[3] = { x[0], x[1], x[0] };
	assert_int_equal(kvpool_lease_release(a, dup, 3), -EINVAL);
	u32 range[2] = { x[0], 64 };
	assert_int_equal(kvpool_lease_release(a, range, 2), -EINVAL);
	u32 freeb[2] = { x[0], 40 };
	assert_int_equal(kvpool_lease_release(a, freeb, 2), -EINVAL);
	assert_int_equal(kvpool_lease_release(a, x, 0), -EINVAL);
	assert_int_equal(kvpool_lease_release(a, x, KVPOOL_IO_MAX_BLOCKS + 1),
			 -EINVAL);
	/* Nothing changed. */
	assert_int_equal(a->held, 4);
	assert_int_equal(f->pool->used, 8);
	check(f);
	assert_int_equal(kvpool_lease_release(a, x, 4), 4);
	assert_int_equal(kvpool_lease_release(a, x, 1), -EINVAL);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
}

/* ---- rule 2 and 5: min protection, reclaim ------------------------- */

static void min_protection(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	struct kvpool_tenant *ta;
	u32 *blk = calloc(64, sizeof(u32));

	kvpool_pool_grow(f->pool, 64, 0);
	assert_int_equal(kvpool_tenant_create(f->pool, "prod", KVPOOL_UNLIMITED,
					      20, 1000, KVPOOL_ID_NONE, &ta), 0);
	assert_int_equal(kvpool_lease_attach(a, "prod", &f->alice), 0);
	kvpool_tenant_set_max(b->tenant, KVPOOL_UNLIMITED);
	/* 64 free, 20 protected for prod: bob may take 44. */
	assert_int_equal(grant(b, 45, 0, blk), -EAGAIN);
	assert_int_equal(b->held, 0);
	assert_int_equal(grant(b, 45, KVPOOL_LEASE_PARTIAL, blk), 44);
	assert_int_equal(grant(b, 1, KVPOOL_LEASE_PARTIAL, blk), -EAGAIN);
	/* prod can still have its 20. */
	assert_int_equal(grant(a, 20, 0, blk), 20);
	assert_int_equal(f->pool->unmet_min, 0);
	check(f);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
	free(blk);
}

static void reclaim_largest_excess_first(void **state)
{
	struct fix *f = *state;
	struct kvpool_cred c3 = test_cred(1002, 1002, false);
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	struct kvpool_lease *c = open_lease(f, &c3);
	struct kvpool_tenant *ta;
	struct kvpool_wait w = { 0 };
	struct kvpool_event ev;
	u32 *blk = calloc(64, sizeof(u32));

	kvpool_pool_grow(f->pool, 64, 0);
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	kvpool_tenant_set_max(b->tenant, KVPOOL_UNLIMITED);
	kvpool_tenant_set_max(c->tenant, KVPOOL_UNLIMITED);
	assert_int_equal(grant(b, 40, 0, blk), 40);	/* excess 40 */
	assert_int_equal(grant(c, 20, 0, blk), 20);	/* excess 20 */
	/* Now prod gets a min it cannot have: 4 free, wants 10. */
	assert_int_equal(kvpool_tenant_create(f->pool, "prod", KVPOOL_UNLIMITED,
					      10, 1000, KVPOOL_ID_NONE, &ta), 0);
	assert_int_equal(kvpool_lease_attach(a, "prod", &f->alice), 0);
	assert_int_equal(kvpool_lease_grant(a, 10, 0, blk, &w), -EAGAIN);
	assert_true(w.started);
	assert_int_equal(ta->ev_stall, 1);
	assert_int_equal(b->reclaim_target, 6);		/* largest first */
	assert_int_equal(c->reclaim_target, 0);
	assert_int_equal(b->tenant->ev_reclaim, 1);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_RECLAIM);
	assert_int_equal(ev.blocks, 6);
	assert_string_equal(ev.tenant, "uid-1001");
	/* Retrying does not inflate the target; stall counted once. */
	assert_int_equal(kvpool_lease_grant(a, 10, 0, blk, &w), -EAGAIN);
	assert_int_equal(b->reclaim_target, 6);
	assert_int_equal(ta->ev_stall, 1);
	/* bob gives back 6 (blocks 34..39): prod's grant goes through. */
	assert_int_equal(kvpool_lease_release(b, (u32[]){34, 35, 36, 37, 38, 39},
					      6), 6);
	assert_int_equal(b->reclaim_target, 0);
	assert_int_equal(kvpool_lease_grant(a, 10, 0, blk, &w), 10);
	check(f);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
	kvpool_lease_close(c);
	free(blk);
}

static void waiter_above_min_posts_no_reclaim(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u32 *blk = calloc(64, sizeof(u32));

	kvpool_pool_grow(f->pool, 64, 0);
	kvpool_tenant_set_max(b->tenant, KVPOOL_UNLIMITED);
	assert_int_equal(grant(b, 60, 0, blk), 60);
	assert_int_equal(grant(a, 10, 0, blk), -EAGAIN);
	assert_int_equal(b->reclaim_target, 0);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
	free(blk);
}

/* ---- rule 6: growing ----------------------------------------------- */

static void grow_request_and_failure(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	struct kvpool_wait w = { 0 };
	struct kvpool_event ev;
	u32 blk[48];

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	assert_int_equal(grant(l, 30, 0, blk), 30);
	assert_int_equal(kvpool_lease_grant(l, 5, 0, blk, &w), -EAGAIN);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_GROW);
	assert_int_equal(ev.blocks, 40);		/* 35 rounded to chunk */
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 0);
	/* Retries do not ask again; a larger request does. */
	assert_int_equal(kvpool_lease_grant(l, 5, 0, blk, &w), -EAGAIN);
	assert_false(kvpool_owner_has_events(f->pool));
	assert_int_equal(grant(l, 11, 0, blk), -EAGAIN);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_GROW);
	assert_int_equal(ev.blocks, 48);
	/* Partial takes what is backed now. */
	assert_int_equal(grant(l, 5, KVPOOL_LEASE_PARTIAL, blk), 2);
	/* The owner cannot grow: the started waiter gets -ENOMEM. */
	assert_int_equal(kvpool_pool_grow(f->pool, 0, KVPOOL_GROW_FAILED), 0);
	assert_int_equal(kvpool_lease_grant(l, 5, 0, blk, &w), -ENOMEM);
	assert_int_equal(l->tenant->ev_fail, 1);
	/* A new call asks again; this time the owner grows. */
	struct kvpool_wait w2 = { 0 };
	assert_int_equal(kvpool_lease_grant(l, 5, 0, blk, &w2), -EAGAIN);
	assert_int_equal(kvpool_pool_grow(f->pool, 40, 0), 0);
	assert_int_equal(kvpool_lease_grant(l, 5, 0, blk, &w2), 5);
	check(f);
	kvpool_lease_close(l);
}

static void grow_asked_again_after_shrink(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->alice);
	struct kvpool_event ev;
	u32 blk[48];

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	assert_int_equal(grant(l, 32, 0, blk), 32);
	assert_int_equal(grant(l, 4, 0, blk), -EAGAIN);	/* asks for 40 */
	assert_int_equal(kvpool_pool_grow(f->pool, 40, 0), 0);
	assert_int_equal(kvpool_lease_release_all(l), 32);
	assert_int_equal(kvpool_pool_shrink(f->pool, 32), 0);
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	/* Needing 40 again after the shrink must ask the owner again. */
	assert_int_equal(grant(l, 36, 0, blk), -EAGAIN);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_GROW);
	assert_int_equal(ev.blocks, 40);
	kvpool_lease_close(l);
}

/* ---- close, events, orphan, snapshot (rules 7, 8) ------------------ */

static void close_returns_blocks(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u64 aid = a->id;
	struct kvpool_event ev;
	u32 blk[16];

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	assert_int_equal(grant(a, 12, 0, blk), 12);
	assert_int_equal(grant(b, 3, 0, blk), 3);
	kvpool_lease_close(a);
	assert_int_equal(f->pool->used, 3);
	assert_int_equal(kvpool_tenant_find(f->pool, "uid-1000")->cur, 0);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_CLIENT_CLOSED);
	assert_int_equal(ev.lease_id, aid);
	assert_int_equal(ev.blocks, 12);
	assert_string_equal(ev.tenant, "uid-1000");
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 0);
	check(f);
	kvpool_lease_close(b);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_IDLE);	/* top chunk freed */
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_CLIENT_CLOSED);
	assert_int_equal(ev.blocks, 3);
}

static void event_order_and_seq(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	struct kvpool_event ev;
	u64 last = 0;
	u32 blk[40];
	int n = 0;

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	assert_int_equal(grant(a, 32, 0, blk), 32);
	assert_int_equal(grant(b, 1, 0, blk), -EAGAIN);	/* GROW */
	kvpool_lease_close(a);				/* IDLE, CLOSED */
	while (kvpool_owner_read_event(f->pool, &ev) == 1) {
		assert_true(ev.seq > last);
		last = ev.seq;
		n++;
	}
	assert_int_equal(n, 3);
	assert_true(f->h.owner_wakes > 0);
	kvpool_lease_close(b);
}

static void orphan_and_reattach(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	struct kvpool_lease_info li[4];
	struct kvpool_block_owner bo[8];
	struct kvpool_snapshot s;
	struct kvpool_status st;
	struct kvpool_event ev;
	u32 blk[8];
	int other;

	assert_int_equal(grant(a, 3, 0, blk), 3);
	assert_int_equal(grant(b, 2, 0, blk), 2);
	kvpool_owner_detach(f->pool);
	assert_false(kvpool_owner_has_events(f->pool));
	memset(&st, 0, sizeof(st));
	kvpool_status_fill(f->pool, a, &st);
	assert_int_equal(st.state, KVPOOL_STATE_ORPHANED);
	/* Grants wait (or fail by flag); releases work. */
	assert_int_equal(grant(a, 1, 0, blk), -EAGAIN);
	assert_int_equal(grant(a, 1, KVPOOL_LEASE_ORPHAN_FAIL, blk), -ENXIO);
	assert_int_equal(kvpool_lease_release(b, (u32[]){ 4 }, 1), 1);
	/* Close while orphaned: no owner event queued. */
	struct kvpool_lease *c = open_lease(f, &f->bob);
	kvpool_lease_close(c);
	assert_false(kvpool_owner_has_events(f->pool));

	assert_int_equal(kvpool_owner_attach(f->pool, &other), 0);
	assert_int_equal(kvpool_owner_attach(f->pool, &other), -EBUSY);
	assert_int_equal(f->pool->epoch, 2);
	memset(&s, 0, sizeof(s));
	assert_int_equal(kvpool_snapshot(f->pool, NULL, 0, NULL, 0, &s), 0);
	assert_int_equal(s.leases, 2);
	assert_int_equal(s.blocks, 4);
	assert_int_equal(s.backed, 32);
	assert_int_equal(s.epoch, 2);
	assert_int_equal(kvpool_snapshot(f->pool, li, 1, bo, 8, &s), -ENOSPC);
	assert_int_equal(kvpool_snapshot(f->pool, li, 4, bo, 3, &s), -ENOSPC);
	assert_int_equal(kvpool_snapshot(f->pool, li, 4, NULL, 0, &s), -ENOSPC);
	assert_int_equal(kvpool_snapshot(f->pool, li, 4, bo, 8, &s), 0);
	assert_int_equal(li[0].lease_id, a->id);
	assert_int_equal(li[0].blocks, 3);
	assert_int_equal(li[0].uid, 1000);
	assert_string_equal(li[0].tenant, "uid-1000");
	assert_int_equal(li[1].blocks, 1);
	assert_int_equal(bo[0].block, 0);
	assert_int_equal(bo[0].lease_id, a->id);
	assert_int_equal(bo[3].block, 3);
	assert_int_equal(bo[3].lease_id, b->id);
	assert_int_equal(grant(a, 1, 0, blk), 1);
	assert_int_equal(blk[0], 4);
	(void)ev;
	kvpool_lease_close(a);
	kvpool_lease_close(b);
}

static void lease_check_rules(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u32 x[3], y[1], bad = 99;

	assert_int_equal(grant(a, 3, 0, x), 3);
	assert_int_equal(grant(b, 1, 0, y), 1);
	assert_int_equal(kvpool_lease_check(f->pool, a->id, x, 3, &bad), 0);
	assert_int_equal(bad, 0);
	u32 mix[3] = { x[0], y[0], x[1] };
	assert_int_equal(kvpool_lease_check(f->pool, a->id, mix, 3, &bad), -EPERM);
	assert_int_equal(bad, 1);
	u32 oob[2] = { x[0], 1000 };
	assert_int_equal(kvpool_lease_check(f->pool, a->id, oob, 2, &bad), -EPERM);
	assert_int_equal(bad, 1);
	assert_int_equal(kvpool_lease_check(f->pool, 9999, x, 3, &bad), -ENOENT);
	assert_int_equal(kvpool_lease_check(f->pool, a->id, x, 0, &bad), -EINVAL);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
}

static void snapshot_without_blocks(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease_info li[2];
	struct kvpool_snapshot s;

	/* No block leased: a lease array alone is enough. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(kvpool_snapshot(f->pool, li, 2, NULL, 0, &s), 0);
	assert_int_equal(s.leases, 1);
	assert_int_equal(s.blocks, 0);
	assert_int_equal(li[0].lease_id, a->id);
	kvpool_lease_close(a);
}

static void pin_rules(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->bob);
	u64 aid = a->id;
	struct kvpool_event ev;
	u32 x[4], y[1], bad = 9;

	assert_int_equal(grant(a, 4, 0, x), 4);
	assert_int_equal(grant(b, 1, 0, y), 1);
	u32 mix[2] = { x[0], y[0] };
	assert_int_equal(kvpool_lease_pin(f->pool, aid, mix, 2, &bad), -EPERM);
	assert_int_equal(bad, 1);
	assert_int_equal(a->pins, 0);
	assert_int_equal(kvpool_lease_pin(f->pool, 777, x, 4, &bad), -ENOENT);
	assert_int_equal(kvpool_lease_unpin(f->pool, aid), -EINVAL);
	assert_int_equal(kvpool_lease_unpin(f->pool, 777), -ENOENT);
	assert_int_equal(kvpool_lease_pin(f->pool, aid, x, 2, &bad), 0);
	assert_int_equal(kvpool_lease_pin(f->pool, aid, x, 4, &bad), 0);
	assert_int_equal(a->pins, 2);
	/* Pinned: releases wait (-EBUSY), grants go on. */
	assert_int_equal(kvpool_lease_release(a, x, 1), -EBUSY);
	assert_int_equal(kvpool_lease_release_all(a), -EBUSY);
	assert_int_equal(a->held, 4);
	assert_int_equal(grant(a, 1, 0, x), 1);
	assert_int_equal(kvpool_lease_unpin(f->pool, aid), 0);
	assert_int_equal(kvpool_lease_release(a, x, 1), -EBUSY);
	unsigned int wakes = f->h.waiter_wakes;
	assert_int_equal(kvpool_lease_unpin(f->pool, aid), 0);
	assert_true(f->h.waiter_wakes > wakes);
	assert_int_equal(kvpool_lease_release(a, x, 1), 1);

	/* Closed while pinned: blocks stay until the last unpin. */
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	assert_int_equal(kvpool_lease_pin(f->pool, aid, &x[1], 1, &bad), 0);
	kvpool_lease_close(a);
	assert_int_equal(f->pool->used, 5);
	assert_false(kvpool_owner_has_events(f->pool));
	assert_int_equal(kvpool_lease_check(f->pool, aid, &x[1], 1, &bad),
			 -ENOENT);
	assert_int_equal(kvpool_lease_pin(f->pool, aid, &x[1], 1, &bad),
			 -ENOENT);
	check(f);
	assert_int_equal(kvpool_lease_unpin(f->pool, aid), 0);
	assert_int_equal(f->pool->used, 1);
	assert_int_equal(kvpool_owner_read_event(f->pool, &ev), 1);
	assert_int_equal(ev.type, KVPOOL_EVENT_CLIENT_CLOSED);
	assert_int_equal(ev.lease_id, aid);
	assert_int_equal(ev.blocks, 4);
	assert_int_equal(kvpool_lease_unpin(f->pool, aid), -ENOENT);
	check(f);

	/* The owner going away drops every pin and finishes closes. */
	assert_int_equal(kvpool_lease_pin(f->pool, b->id, y, 1, &bad), 0);
	kvpool_lease_close(b);
	assert_int_equal(f->pool->used, 1);
	kvpool_owner_detach(f->pool);
	assert_int_equal(f->pool->used, 0);
	assert_int_equal(f->pool->nleases, 0);
}

/* Two-phase grant: pending blocks are nobody's to touch; cancel undoes. */
static void pending_grant(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_tenant *t = a->tenant;
	struct kvpool_wait w = { 0 }, w2 = { 0 };
	struct kvpool_snapshot out;
	struct kvpool_lease_info li[2];
	struct kvpool_block_owner bo[8];
	u32 x[1], p[4], q[3], bad = 9, dup[2];

	assert_int_equal(grant(a, 1, 0, x), 1);
	assert_int_equal(kvpool_lease_grant_pending(a, 4, 0, p, &w), 4);
	/* Charged (rule 1 holds), listed, but not releasable or pinnable. */
	assert_int_equal(a->held, 5);
	assert_int_equal(t->cur, 5);
	assert_int_equal(f->pool->used, 5);
	assert_int_equal(t->peak, 5);
	check(f);
	assert_int_equal(kvpool_snapshot(f->pool, li, 2, bo, 8, &out), 0);
	assert_int_equal(out.blocks, 5);
	assert_int_equal(bo[1].lease_id, a->id);
	assert_int_equal(kvpool_lease_release(a, p, 1), -EINVAL);
	assert_int_equal(kvpool_lease_check(f->pool, a->id, p, 1, &bad), -EPERM);
	assert_int_equal(kvpool_lease_pin(f->pool, a->id, &p[1], 1, &bad), -EPERM);
	/* Release-all leaves pending blocks alone. */
	assert_int_equal(kvpool_lease_release_all(a), 1);
	assert_int_equal(a->held, 4);
	assert_int_equal(grant(a, 1, 0, x), 1);

	/*
	 * Cancel, while the owner pins the lease: exactly as before.  (A
	 * target posted while the blocks are pending counted them: their
	 * return counts against it.)
	 */
	a->reclaim_target = 3;	/* as if posted now; 0 at the grant */
	assert_int_equal(kvpool_lease_pin(f->pool, a->id, x, 1, &bad), 0);
	dup[0] = dup[1] = p[0];
	assert_int_equal(kvpool_lease_grant_cancel(a, dup, 2, &w), -EINVAL);
	assert_int_equal(kvpool_lease_grant_cancel(a, x, 1, &w), -EINVAL);
	assert_int_equal(kvpool_lease_grant_cancel(a, p, 4, &w), 0);
	assert_int_equal(a->held, 1);
	assert_int_equal(t->cur, 1);
	assert_int_equal(f->pool->used, 1);
	assert_int_equal(a->reclaim_target, 0);
	assert_int_equal(t->peak, 1);	/* 5 counted blocks never handed over */
	assert_int_equal(kvpool_lease_grant_cancel(a, p, 4, &w), -EINVAL);
	assert_int_equal(kvpool_lease_grant_commit(a, p, 4), -EINVAL);
	check(f);
	assert_int_equal(kvpool_lease_unpin(f->pool, a->id), 0);

	/* A later grant's peak stays; commit makes ordinary blocks. */
	assert_int_equal(kvpool_lease_grant_pending(a, 2, 0, q, &w2), 2);
	assert_int_equal(grant(a, 2, 0, p), 2);
	assert_int_equal(t->peak, 5);
	assert_int_equal(kvpool_lease_grant_commit(a, q, 2), 0);
	assert_int_equal(kvpool_lease_grant_commit(a, q, 2), -EINVAL);
	assert_int_equal(kvpool_lease_check(f->pool, a->id, q, 2, &bad), 0);
	assert_int_equal(kvpool_lease_release(a, q, 2), 2);
	assert_int_equal(t->peak, 5);
	check(f);

	/* A close frees pending blocks too. */
	assert_int_equal(kvpool_lease_grant_pending(a, 3, 0, q, &w), 3);
	kvpool_lease_close(a);
	assert_int_equal(f->pool->used, 0);
	assert_int_equal(t->cur, 0);
	check(f);
}

/*
 * A cancelled pending grant leaves the reclaim target as it was before the
 * call, and never above what the lease holds, whatever the owner moved in
 * and out and the max did meanwhile.
 */
static void cancel_reclaim_target(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = open_lease(f, &f->root);
	struct kvpool_lease *c = open_lease(f, &f->root);
	struct kvpool_wait w = { 0 }, w2 = { 0 };
	struct kvpool_tenant *t;
	u32 own[3], cb[6], p[64], bad = 0, wakes;

	assert_int_equal(kvpool_tenant_create(f->pool, "app", KVPOOL_UNLIMITED,
					      0, KVPOOL_ID_NONE, KVPOOL_ID_NONE,
					      &t), 0);
	assert_int_equal(kvpool_lease_attach(l, "app", &f->root), 0);
	assert_int_equal(kvpool_lease_attach(c, "app", &f->root), 0);
	assert_int_equal(grant(l, 3, 0, own), 3);
	assert_int_equal(grant(c, 6, 0, cb), 6);
	assert_int_equal(kvpool_lease_grant_pending(l, 8, 0, p, &w), 8);
	/* The owner moves 4 blocks in, the max drops, they move out again. */
	assert_int_equal(kvpool_lease_move(f->pool, c->id, l->id, cb, 4, &bad), 4);
	assert_int_equal(kvpool_tenant_set_max(t, 2), 0);
	assert_int_equal(l->held, 15);
	assert_int_equal(l->reclaim_target, 15);	/* all of the excess */
	assert_int_equal(kvpool_lease_move(f->pool, l->id, c->id, cb, 4, &bad), 4);
	assert_int_equal(l->reclaim_target, 11);	/* capped at held */
	check(f);
	/* The copy-out faults: the 8 pending blocks go back. */
	wakes = f->h.reclaim_wakes;
	assert_int_equal(kvpool_lease_grant_cancel(l, p, 8, &w), 0);
	assert_int_equal(l->held, 3);
	assert_int_equal(t->cur, 9);
	assert_int_equal(f->pool->used, 9);
	assert_int_equal(t->peak, 9);
	assert_int_equal(l->reclaim_target, 3);	/* 11 less the 8 returned */
	assert_true(f->h.reclaim_wakes > wakes);
	check(f);
	/* Giving back what it holds clears the target (and POLLPRI). */
	assert_int_equal(kvpool_lease_release(l, own, 3), 3);
	assert_int_equal(l->reclaim_target, 0);
	kvpool_lease_close(c);

	/* A target posted before the grant (a waiter below its min) stays. */
	assert_int_equal(kvpool_tenant_set_max(t, KVPOOL_UNLIMITED), 0);
	assert_int_equal(kvpool_tenant_create(f->pool, "prot", KVPOOL_UNLIMITED,
					      40, KVPOOL_ID_NONE, KVPOOL_ID_NONE,
					      NULL), 0);
	c = open_lease(f, &f->root);
	assert_int_equal(kvpool_lease_attach(c, "prot", &f->root), 0);
	assert_int_equal(grant(l, 3, 0, own), 3);
	assert_int_equal(kvpool_lease_grant(c, 62, 0, p, &w2), -EAGAIN);
	assert_int_equal(l->reclaim_target, 1);
	memset(&w, 0, sizeof(w));
	assert_int_equal(kvpool_lease_grant_pending(l, 4, 0, p, &w), 4);
	assert_int_equal(kvpool_lease_grant_cancel(l, p, 4, &w), 0);
	assert_int_equal(l->held, 3);
	assert_int_equal(l->reclaim_target, 1);
	/* ... and one withdrawn by a max written meanwhile stays withdrawn. */
	memset(&w, 0, sizeof(w));
	assert_int_equal(kvpool_lease_grant_pending(l, 4, 0, p, &w), 4);
	assert_int_equal(kvpool_tenant_set_max(t, 30), 0);
	assert_int_equal(l->reclaim_target, 0);
	assert_int_equal(kvpool_lease_grant_cancel(l, p, 4, &w), 0);
	assert_int_equal(l->reclaim_target, 0);
	check(f);
	kvpool_lease_close(l);
	kvpool_lease_close(c);
}

/* min above a finite max is refused everywhere; set_limits is atomic. */
static void limits_min_max(void **state)
{
	struct fix *f = *state;
	struct kvpool_tenant *t;

	assert_int_equal(kvpool_tenant_create(f->pool, "mm", 8, 9, KVPOOL_ID_NONE,
					      KVPOOL_ID_NONE, &t), -EINVAL);
	assert_int_equal(kvpool_tenant_create(f->pool, "mm", 8, 8, KVPOOL_ID_NONE,
					      KVPOOL_ID_NONE, &t), 0);
	assert_int_equal(kvpool_tenant_set_min(t, 9), -EINVAL);
	assert_int_equal(kvpool_tenant_set_max(t, 7), -EINVAL);
	assert_int_equal(t->max, 8);
	assert_int_equal(t->min, 8);
	/* A valid max with an invalid min changes nothing, and back. */
	assert_int_equal(kvpool_tenant_set_limits(t, 20, 65), -EINVAL);
	assert_int_equal(kvpool_tenant_set_limits(t, 65, 2), -EINVAL);
	assert_int_equal(kvpool_tenant_set_limits(t, 4, 5), -EINVAL);
	assert_int_equal(t->max, 8);
	assert_int_equal(t->min, 8);
	assert_int_equal(f->pool->unmet_min, 8);
	/* Lowering both together works in one call. */
	assert_int_equal(kvpool_tenant_set_limits(t, 4, 2), 0);
	assert_int_equal(t->max, 4);
	assert_int_equal(t->min, 2);
	assert_int_equal(f->pool->unmet_min, 2);
	assert_int_equal(kvpool_tenant_set_limits(t, KVPOOL_UNLIMITED, 64), 0);
	check(f);
}

/* A new max recomputes the tenant's reclaim targets. */
static void reclaim_withdrawn_by_max(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_lease *b = open_lease(f, &f->alice);
	struct kvpool_tenant *t = a->tenant;
	u32 x[8];

	assert_int_equal(grant(a, 6, 0, x), 6);
	assert_int_equal(grant(b, 4, 0, x), 4);
	assert_int_equal(kvpool_tenant_set_max(t, 2), 0);
	assert_int_equal(a->reclaim_target + b->reclaim_target, 8);
	/* Raised, still below current: the smaller excess is asked. */
	assert_int_equal(kvpool_tenant_set_max(t, 7), 0);
	assert_int_equal(a->reclaim_target + b->reclaim_target, 3);
	/* Raised to current or above: no target left. */
	unsigned int rw = f->h.reclaim_wakes;
	assert_int_equal(kvpool_tenant_set_max(t, 10), 0);
	assert_int_equal(a->reclaim_target, 0);
	assert_int_equal(b->reclaim_target, 0);
	assert_true(f->h.reclaim_wakes > rw);
	/* A min change alone leaves targets alone. */
	assert_int_equal(kvpool_tenant_set_max(t, 9), 0);
	assert_int_equal(a->reclaim_target + b->reclaim_target, 1);
	assert_int_equal(kvpool_tenant_set_min(t, 1), 0);
	assert_int_equal(a->reclaim_target + b->reclaim_target, 1);
	kvpool_lease_close(a);
	kvpool_lease_close(b);
	check(f);
}

/* The owner's CLIENT_CLOSED queue is bounded; the rest is merged. */
static void closed_queue_bound(void **state)
{
	struct fix *f = *state;
	struct kvpool_event ev;
	u32 i, n = KVPOOL_CLOSED_QUEUE_MAX + 10, x[2], closed = 0, many = 0;
	u32 blocks = 0;

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	for (i = 0; i < n; i++) {
		struct kvpool_lease *l = open_lease(f, &f->alice);

		assert_int_equal(grant(l, 1 + i % 2, 0, x), (int)(1 + i % 2));
		kvpool_lease_close(l);
	}
	assert_int_equal(f->pool->nclosed, KVPOOL_CLOSED_QUEUE_MAX);
	while (kvpool_owner_read_event(f->pool, &ev) == 1) {
		if (ev.type == KVPOOL_EVENT_CLIENT_CLOSED) {
			closed++;
			blocks += ev.blocks;
		} else if (ev.type == KVPOOL_EVENT_CLOSED_MANY) {
			many++;
			assert_int_equal(ev.arg, 10);
			assert_int_equal(ev.lease_id, 0);
			blocks += ev.blocks;
		}
	}
	assert_int_equal(closed, KVPOOL_CLOSED_QUEUE_MAX);
	assert_int_equal(many, 1);
	assert_int_equal(blocks, n / 2 * 3);
	assert_int_equal(f->pool->nclosed, 0);
	check(f);
}

static void status_fill(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	struct kvpool_status st;
	u32 blk[5];

	assert_int_equal(grant(a, 5, 0, blk), 5);
	memset(&st, 0, sizeof(st));
	kvpool_status_fill(f->pool, a, &st);
	assert_string_equal(st.pool, "gpu0");
	assert_string_equal(st.tenant, "uid-1000");
	assert_int_equal(st.block_bytes, 65536);
	assert_int_equal(st.capacity, 64);
	assert_int_equal(st.backed, 32);
	assert_int_equal(st.used, 5);
	assert_int_equal(st.held, 5);
	assert_int_equal(st.tenant_max, 48);
	assert_int_equal(st.tenant_current, 5);
	assert_int_equal(st.tenant_peak, 5);
	assert_int_equal(st.state, KVPOOL_STATE_LIVE);
	assert_int_equal(st.lease_id, a->id);
	kvpool_lease_close(a);
}

static void names(void **state)
{
	(void)state;
	assert_int_equal(kvpool_name_valid("gpu0"), 0);
	assert_int_equal(kvpool_name_valid("a.b-c_d"), 0);
	assert_int_equal(kvpool_name_valid(""), -EINVAL);
	assert_int_equal(kvpool_name_valid("_x"), -EINVAL);
	assert_int_equal(kvpool_name_valid("x y"), -EINVAL);
	assert_int_equal(kvpool_name_valid("x/y"), -EINVAL);
	assert_int_equal(kvpool_name_valid("0123456789012345678901234567890"), 0);
	assert_int_equal(kvpool_name_valid("01234567890123456789012345678901"),
			 -EINVAL);
}

static void invariant_check_catches_corruption(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = open_lease(f, &f->alice);
	const char *why = NULL;
	u32 blk[2];

	assert_int_equal(grant(a, 2, 0, blk), 2);
	f->pool->used++;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	assert_non_null(why);
	f->pool->used--;
	a->tenant->cur++;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	a->tenant->cur--;
	f->pool->owner_of[5] = a->slot + 1;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	f->pool->owner_of[5] = 0;
	assert_int_equal(kvpool_pool_check(f->pool, &why), 0);
	kvpool_lease_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pool_create_errors),
		cmocka_unit_test(pool_large_capacity),
		cmocka_unit_test(grow_to_odd_capacity),
		cmocka_unit_test(names),
		cmocka_unit_test_setup_teardown(grow_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(shrink_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(tenant_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(tenant_table_full, setup, teardown),
		cmocka_unit_test_setup_teardown(tenant_delete_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(attach_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(lowest_first, setup, teardown),
		cmocka_unit_test_setup_teardown(grant_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(all_or_nothing_and_partial, setup, teardown),
		cmocka_unit_test_setup_teardown(quota_max, setup, teardown),
		cmocka_unit_test_setup_teardown(release_validation, setup, teardown),
		cmocka_unit_test_setup_teardown(min_protection, setup, teardown),
		cmocka_unit_test_setup_teardown(reclaim_largest_excess_first, setup, teardown),
		cmocka_unit_test_setup_teardown(waiter_above_min_posts_no_reclaim, setup, teardown),
		cmocka_unit_test_setup_teardown(grow_request_and_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(grow_asked_again_after_shrink, setup, teardown),
		cmocka_unit_test_setup_teardown(close_returns_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(event_order_and_seq, setup, teardown),
		cmocka_unit_test_setup_teardown(orphan_and_reattach, setup, teardown),
		cmocka_unit_test_setup_teardown(lease_check_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(snapshot_without_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(pin_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(pending_grant, setup, teardown),
		cmocka_unit_test_setup_teardown(cancel_reclaim_target, setup, teardown),
		cmocka_unit_test_setup_teardown(limits_min_max, setup, teardown),
		cmocka_unit_test_setup_teardown(reclaim_withdrawn_by_max, setup, teardown),
		cmocka_unit_test_setup_teardown(closed_queue_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(status_fill, setup, teardown),
		cmocka_unit_test_setup_teardown(invariant_check_catches_corruption, setup, teardown),
	};

	return cmocka_run_group_tests_name("ledger", tests, NULL, NULL);
}
