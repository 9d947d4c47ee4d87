// SPDX-License-Identifier: MIT
/*
 * cmocka tests of kept leases in the ledger core: kvpool_lease_set_keep,
 * the park at close, kvpool_lease_adopt, and how a parked lease stands with
 * everything else (snapshot flags, lookups by id, reclaim targets, pins,
 * pending grants, tenant deletion, the owner going away, pool destroy, the
 * KVPOOL_PARK_MAX bound), leases restored from a host's journal
 * (kvpool_lease_restore) and the journal's hook (blocks_owned).  The
 * invariant walk runs after every test and at
 * every step that changes a parked lease.
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
	struct kvpool_cred root;
	struct kvpool_tenant *app;
};

/* 64 blocks, all backed; tenant "app" without limits. */
static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f || test_pool_new(&f->h, 64, 8, 64, KVPOOL_UNLIMITED, &f->pool))
		return -1;
	f->root = test_cred(0, 0, true);
	if (kvpool_tenant_create(f->pool, "app", KVPOOL_UNLIMITED, 0,
				 KVPOOL_ID_NONE, KVPOOL_ID_NONE, &f->app))
		return -1;
	*state = f;
	return 0;
}

static void check(struct fix *f)
{
	const char *why = NULL;

	if (kvpool_pool_check(f->pool, &why))
		fail_msg("invariant: %s", why);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	check(f);
	kvpool_pool_destroy(f->pool);
	free(f);
	return 0;
}

static struct kvpool_lease *lease_in(struct fix *f, const char *tenant)
{
	struct kvpool_lease *l = NULL;

	assert_int_equal(kvpool_lease_open(f->pool, &f->root, &l), 0);
	assert_int_equal(kvpool_lease_attach(l, tenant, &f->root), 0);
	return l;
}

static int grant(struct kvpool_lease *l, u32 n, u32 flags, u32 *out)
{
	struct kvpool_wait w = { 0 };

	return kvpool_lease_grant(l, n, flags, out, &w);
}

/* Drain the owner's queue; the number of CLIENT_CLOSED records read. */
static unsigned int closed_events(struct fix *f)
{
	struct kvpool_event ev;
	unsigned int n = 0;

	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		n += ev.type == KVPOOL_EVENT_CLIENT_CLOSED;
	return n;
}

/* Park, snapshot, adopt, release: the blocks never leave the lease. */
static void park_and_adopt(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = lease_in(f, "app"), *other = lease_in(f, "app");
	struct kvpool_lease *got = NULL;
	struct kvpool_cred later = test_cred(0, 0, true);
	struct kvpool_lease_info li[2];
	struct kvpool_block_owner bo[8];
	struct kvpool_snapshot out;
	u32 b[5], x[1], bad;
	u64 id = l->id;

	assert_int_equal(grant(l, 5, 0, b), 5);
	assert_int_equal(grant(other, 1, 0, x), 1);
	assert_int_equal(kvpool_lease_set_keep(l, true), 0);
	assert_int_equal(kvpool_lease_set_keep(l, true), 0);	/* no change */
	assert_int_equal(f->pool->nkept, 1);
	assert_int_equal(f->pool->nparked, 0);
	closed_events(f);

	kvpool_lease_close(l);
	check(f);
	/* Still leased and charged; not closed, so no record for the owner. */
	assert_int_equal(f->pool->nparked, 1);
	assert_int_equal(f->pool->nkept, 1);
	assert_int_equal(f->pool->nleases, 2);
	assert_int_equal(f->pool->used, 6);
	assert_int_equal(f->app->cur, 6);
	assert_int_equal(f->app->nleases, 2);
	assert_int_equal(closed_events(f), 0);

	/* Listed, flagged; its blocks listed with it. */
	assert_int_equal(kvpool_snapshot(f->pool, li, 2, bo, 8, &out), 0);
	assert_int_equal(out.leases, 2);
	assert_int_equal(out.blocks, 6);
	assert_int_equal(li[0].lease_id, id);
	assert_int_equal(li[0].blocks, 5);
	assert_int_equal(li[0].flags,
			 KVPOOL_LEASE_INFO_KEPT | KVPOOL_LEASE_INFO_PARKED);
	assert_int_equal(li[1].flags, 0);
	assert_int_equal(bo[0].lease_id, id);
	assert_int_equal(bo[4].lease_id, id);

	/* Not open: lookups by id do not see it. */
	assert_null(kvpool_lease_find(f->pool, id));
	assert_int_equal(kvpool_lease_check(f->pool, id, b, 1, &bad), -ENOENT);
	assert_int_equal(kvpool_lease_pin(f->pool, id, b, 1, &bad), -ENOENT);
	assert_int_equal(kvpool_lease_move(f->pool, id, other->id, b, 1, &bad),
			 -ENOENT);
	assert_int_equal(kvpool_lease_move(f->pool, other->id, id, x, 1, &bad),
			 -ENOENT);
	/* Its tenant is in use. */
	assert_int_equal(kvpool_tenant_delete(f->pool, "app"), -EBUSY);

	/* Adopt: an unknown or open lease is not adoptable. */
	assert_int_equal(kvpool_lease_adopt(f->pool, 999, &later, &got), -ENOENT);
	assert_int_equal(kvpool_lease_adopt(f->pool, other->id, &later, &got),
			 -ENOENT);
	later.pid = 4242;
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &later, &got), 0);
	assert_ptr_equal(got, l);
	check(f);
	assert_int_equal(f->pool->nparked, 0);
	assert_int_equal(f->pool->nkept, 1);
	assert_int_equal(l->pid, 4242);
	assert_true(l->keep);
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &later, &got), -ENOENT);
	assert_int_equal(kvpool_lease_check(f->pool, id, b, 5, &bad), 0);
	assert_int_equal(kvpool_snapshot(f->pool, li, 2, bo, 8, &out), 0);
	assert_int_equal(li[0].flags, KVPOOL_LEASE_INFO_KEPT);

	/* An ordinary lease again: release works, a close parks again. */
	assert_int_equal(kvpool_lease_release(l, b, 2), 2);
	assert_int_equal(l->held, 3);
	kvpool_lease_close(l);
	assert_int_equal(f->pool->nparked, 1);
	check(f);
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &later, &got), 0);
	/* Unmarked, it closes for good: blocks back, one CLIENT_CLOSED. */
	assert_int_equal(kvpool_lease_set_keep(l, false), 0);
	assert_int_equal(f->pool->nkept, 0);
	kvpool_lease_close(l);
	check(f);
	assert_int_equal(f->pool->used, 1);
	assert_int_equal(f->pool->nleases, 1);
	assert_int_equal(closed_events(f), 1);
	kvpool_lease_close(other);
}

/* set_keep refuses a parked lease; marks and unmarks count. */
static void keep_errors(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = lease_in(f, "app"), *got = NULL;
	u64 id = l->id;

	assert_int_equal(kvpool_lease_set_keep(l, false), 0);	/* no change */
	assert_int_equal(f->pool->nkept, 0);
	assert_int_equal(kvpool_lease_set_keep(l, true), 0);
	kvpool_lease_close(l);
	assert_int_equal(kvpool_lease_set_keep(l, false), -EINVAL);
	assert_int_equal(kvpool_lease_set_keep(l, true), -EINVAL);
	assert_int_equal(f->pool->nkept, 1);
	check(f);
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &f->root, &got), 0);
	assert_int_equal(kvpool_lease_set_keep(l, false), 0);
	kvpool_lease_close(l);
	assert_int_equal(f->pool->nleases, 0);
}

/* At most KVPOOL_PARK_MAX kept leases, parked or not. */
static void park_max(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease **l = calloc(KVPOOL_PARK_MAX + 1, sizeof(*l));
	struct kvpool_lease *got;
	u32 i;

	assert_non_null(l);
	for (i = 0; i <= KVPOOL_PARK_MAX; i++)
		l[i] = lease_in(f, "app");
	for (i = 0; i < KVPOOL_PARK_MAX; i++) {
		assert_int_equal(kvpool_lease_set_keep(l[i], true), 0);
		if (i % 2)
			kvpool_lease_close(l[i]);	/* half parked */
	}
	assert_int_equal(kvpool_lease_set_keep(l[KVPOOL_PARK_MAX], true),
			 -ENOSPC);
	assert_false(l[KVPOOL_PARK_MAX]->keep);
	assert_int_equal(f->pool->nkept, KVPOOL_PARK_MAX);
	assert_int_equal(f->pool->nparked, KVPOOL_PARK_MAX / 2);
	check(f);
	/* One unmarked makes room. */
	assert_int_equal(kvpool_lease_set_keep(l[0], false), 0);
	assert_int_equal(kvpool_lease_set_keep(l[KVPOOL_PARK_MAX], true), 0);
	assert_int_equal(kvpool_lease_set_keep(l[0], true), -ENOSPC);
	/* Adopting changes no count of kept leases. */
	assert_int_equal(kvpool_lease_adopt(f->pool, l[1]->id, &f->root, &got), 0);
	assert_int_equal(f->pool->nkept, KVPOOL_PARK_MAX);
	assert_int_equal(f->pool->nparked, KVPOOL_PARK_MAX / 2 - 1);
	check(f);
	/* Pool destroy (teardown) frees parked and kept leases alike. */
	free(l);
}

/* A parked lease is never asked to give back: it could not answer. */
static void parked_not_asked(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *kept = lease_in(f, "app"), *live = lease_in(f, "app");
	struct kvpool_lease *got;
	u32 b[8];

	assert_int_equal(grant(kept, 6, 0, b), 6);
	assert_int_equal(grant(live, 2, 0, b), 2);
	/* A target on the kept lease is withdrawn when it parks. */
	assert_int_equal(kvpool_tenant_set_max(f->app, 4), 0);
	assert_int_equal(kept->reclaim_target, 4);
	assert_int_equal(kvpool_tenant_set_max(f->app, KVPOOL_UNLIMITED), 0);
	assert_int_equal(kvpool_lease_set_keep(kept, true), 0);
	assert_int_equal(kvpool_tenant_set_max(f->app, 5), 0);
	assert_int_equal(kept->reclaim_target, 3);
	kvpool_lease_close(kept);
	assert_int_equal(kept->reclaim_target, 0);
	check(f);

	/* A new max asks the tenant's other leases only. */
	assert_int_equal(kvpool_tenant_set_max(f->app, 4), 0);
	assert_int_equal(kept->reclaim_target, 0);
	assert_int_equal(live->reclaim_target, 2);
	check(f);
	/* Adopted, it is asked at the next post, not before. */
	assert_int_equal(kvpool_lease_adopt(f->pool, kept->id, &f->root, &got), 0);
	assert_int_equal(kept->reclaim_target, 0);
	assert_int_equal(kvpool_tenant_set_max(f->app, 3), 0);
	assert_int_equal(kept->reclaim_target, 5);
	check(f);
	assert_int_equal(kvpool_tenant_set_max(f->app, KVPOOL_UNLIMITED), 0);
	kvpool_lease_close(live);
}

/* Pins survive the park until unpinned or the owner goes; pending go. */
static void parked_pins_and_pending(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = lease_in(f, "app"), *got;
	struct kvpool_wait w = { 0 };
	u32 b[3], p[4], bad;
	u64 id = l->id;

	assert_int_equal(grant(l, 3, 0, b), 3);
	assert_int_equal(kvpool_lease_grant_pending(l, 4, 0, p, &w), 4);
	assert_int_equal(kvpool_lease_pin(f->pool, id, b, 3, &bad), 0);
	assert_int_equal(kvpool_lease_set_keep(l, true), 0);
	kvpool_lease_close(l);
	check(f);
	/* Parked at once, pinned or not; pending grants were returned. */
	assert_int_equal(f->pool->nparked, 1);
	assert_int_equal(l->held, 3);
	assert_int_equal(f->pool->used, 3);
	assert_int_equal(l->pins, 1);
	assert_false(l->closing);
	/* The owner's unpin still reaches it. */
	assert_int_equal(kvpool_lease_unpin(f->pool, id), 0);
	assert_int_equal(kvpool_lease_unpin(f->pool, id), -EINVAL);
	assert_int_equal(l->held, 3);
	check(f);

	/* Adopted and pinned again, parked again: the owner leaving unpins. */
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &f->root, &got), 0);
	assert_int_equal(kvpool_lease_pin(f->pool, id, b, 1, &bad), 0);
	kvpool_lease_close(l);
	kvpool_owner_detach(f->pool);
	assert_int_equal(l->pins, 0);
	assert_int_equal(f->pool->nparked, 1);
	assert_int_equal(f->pool->used, 3);
	check(f);
	/* A new owner adopts it; blocks still there. */
	assert_int_equal(kvpool_owner_attach(f->pool, TEST_OWNER), 0);
	assert_int_equal(kvpool_lease_adopt(f->pool, id, &f->root, &got), 0);
	assert_int_equal(kvpool_lease_check(f->pool, id, b, 3, &bad), 0);
	assert_int_equal(kvpool_lease_release_all(l), 3);
	kvpool_lease_close(l);	/* parks, empty; destroy frees it */
	assert_int_equal(f->pool->nparked, 1);
	check(f);
}

/* A lease closing while pinned cannot be marked any more. */
static void closing_not_kept(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = lease_in(f, "app");
	u32 b[1], bad;

	assert_int_equal(grant(l, 1, 0, b), 1);
	assert_int_equal(kvpool_lease_pin(f->pool, l->id, b, 1, &bad), 0);
	kvpool_lease_close(l);
	assert_true(l->closing);
	assert_int_equal(kvpool_lease_set_keep(l, true), -EINVAL);
	assert_int_equal(kvpool_lease_adopt(f->pool, l->id, &f->root, &l), -ENOENT);
	assert_int_equal(kvpool_lease_unpin(f->pool, l->id), 0);	/* frees it */
	assert_int_equal(f->pool->nleases, 0);
	assert_int_equal(f->pool->used, 0);
}

/* The walk catches a count of parked or kept leases that is off. */
static void invariant_catches_counts(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = lease_in(f, "app"), *got;
	const char *why = NULL;

	assert_int_equal(kvpool_lease_set_keep(l, true), 0);
	kvpool_lease_close(l);
	f->pool->nparked--;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	assert_string_equal(why, "parked lease count wrong");
	f->pool->nparked++;
	f->pool->nkept++;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	assert_string_equal(why, "kept lease count wrong");
	f->pool->nkept--;
	l->reclaim_target = 1;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	l->reclaim_target = 0;
	l->keep = false;
	f->pool->nkept--;
	assert_int_equal(kvpool_pool_check(f->pool, &why), -EUCLEAN);
	assert_string_equal(why, "parked lease not kept");
	l->keep = true;
	f->pool->nkept++;
	check(f);
	assert_int_equal(kvpool_lease_adopt(f->pool, l->id, &f->root, &got), 0);
}

/* A journalled lease comes back parked, with its blocks and its charge. */
static void restore_and_adopt(void **state)
{
	struct fix *f = *state;
	const u32 b[3] = { 3, 5, 9 };
	struct kvpool_lease *l = NULL, *got = NULL, *n = NULL;
	u32 out[4];

	assert_int_equal(kvpool_lease_restore(f->pool, 77, 0, "app", b, 3, &l),
			 0);
	check(f);
	assert_true(l->parked && l->keep);
	assert_int_equal(l->held, 3);
	assert_int_equal(f->app->cur, 3);
	assert_int_equal(f->pool->used, 3);
	assert_null(kvpool_lease_find(f->pool, 77));
	/* a grant never hands out a restored block */
	n = lease_in(f, "app");
	assert_true(n->id > 77);
	assert_int_equal(grant(n, 4, 0, out), 4);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[3], 4);
	assert_int_equal(kvpool_lease_adopt(f->pool, 77, &f->root, &got), 0);
	assert_ptr_equal(got, l);
	assert_int_equal(kvpool_lease_set_keep(got, false), 0);
	assert_int_equal(kvpool_lease_release(got, b, 3), 3);
	check(f);
	kvpool_lease_close(got);
	kvpool_lease_close(n);
	assert_int_equal(f->pool->used, 0);
	/* the per-uid tenant when none is named */
	assert_int_equal(kvpool_lease_restore(f->pool, 5, 42, "", b, 1, &l), 0);
	assert_string_equal(l->tenant->name, "uid-42");
}

static void restore_errors(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = NULL, *a = lease_in(f, "app");
	const u32 rep[2] = { 7, 7 }, high[1] = { 64 };
	u32 held[2], ok[1] = { 20 };

	assert_int_equal(grant(a, 2, 0, held), 2);
	assert_int_equal(kvpool_lease_restore(f->pool, a->id, 0, "app", ok, 1,
					      &l), -EEXIST);
	assert_int_equal(kvpool_lease_restore(f->pool, 0, 0, "app", ok, 1, &l),
			 -EEXIST);
	assert_int_equal(kvpool_lease_restore(f->pool, 90, 0, "nope", ok, 1,
					      &l), -ENOENT);
	assert_int_equal(kvpool_lease_restore(f->pool, 90, 0, "app", held, 1,
					      &l), -EINVAL);
	assert_int_equal(kvpool_lease_restore(f->pool, 90, 0, "app", high, 1,
					      &l), -EINVAL);
	assert_int_equal(kvpool_lease_restore(f->pool, 90, 0, "app", rep, 2,
					      &l), -EINVAL);
	assert_int_equal(f->pool->used, 2);
	assert_int_equal(f->pool->nleases, 1);
	check(f);
	kvpool_lease_close(a);
}

static void restore_park_max(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *l = NULL;
	u64 id;

	for (id = 1; id <= KVPOOL_PARK_MAX; id++)
		assert_int_equal(kvpool_lease_restore(f->pool, id, 0, "app",
						      NULL, 0, &l), 0);
	assert_int_equal(kvpool_lease_restore(f->pool, id, 0, "app", NULL, 0,
					      &l), -ENOSPC);
	check(f);
}

/* The journal hook sees every change of hands, a pending grant at its
 * commit only. */
static void owned_hook(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = lease_in(f, "app"), *b = lease_in(f, "app");
	struct kvpool_wait w = { 0 };
	u32 blk[2], p[1], bad = 0;

	assert_int_equal(grant(a, 2, 0, blk), 2);
	assert_true(f->h.owned[blk[0]] == a->id && f->h.owned[blk[1]] == a->id);
	assert_int_equal(kvpool_lease_move(f->pool, a->id, b->id, blk, 1, &bad),
			 1);
	assert_true(f->h.owned[blk[0]] == b->id);
	assert_int_equal(kvpool_lease_release(a, blk + 1, 1), 1);
	assert_true(f->h.owned[blk[1]] == 0);
	assert_int_equal(kvpool_lease_grant_pending(a, 1, 0, p, &w), 1);
	assert_true(f->h.owned[p[0]] == 0);
	assert_int_equal(kvpool_lease_grant_commit(a, p, 1), 0);
	assert_true(f->h.owned[p[0]] == a->id);
	kvpool_lease_close(b);
	assert_true(f->h.owned[blk[0]] == 0);
	kvpool_lease_close(a);
	assert_true(f->h.owned[p[0]] == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(park_and_adopt, setup, teardown),
		cmocka_unit_test_setup_teardown(keep_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(park_max, setup, teardown),
		cmocka_unit_test_setup_teardown(parked_not_asked, setup, teardown),
		cmocka_unit_test_setup_teardown(parked_pins_and_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(closing_not_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(invariant_catches_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(restore_and_adopt, setup, teardown),
		cmocka_unit_test_setup_teardown(restore_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(restore_park_max, setup, teardown),
		cmocka_unit_test_setup_teardown(owned_hook, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
