// SPDX-License-Identifier: MIT
/*
 * cmocka tests of the ledger core's primitives for a tenant's cached
 * blocks: kvpool_lease_move (rules and every error path, a pinned source
 * refused), reclaim order (FIRST leases asked first, NEVER leases never)
 * and the SHORT owner event.  Each call is otherwise valid; the invariant
 * walk runs after every test.
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
	struct kvpool_cred root, alice;
	struct kvpool_tenant *app, *other;
};

/* 64 blocks, all backed; tenants "app" and "other", no limits. */
static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f || test_pool_new(&f->h, 64, 8, 64, KVPOOL_UNLIMITED, &f->pool))
		return -1;
	f->root = test_cred(0, 0, true);
	f->alice = test_cred(1000, 1000, false);
	if (kvpool_tenant_create(f->pool, "app", KVPOOL_UNLIMITED, 0,
				 KVPOOL_ID_NONE, KVPOOL_ID_NONE, &f->app) ||
	    kvpool_tenant_create(f->pool, "other", KVPOOL_UNLIMITED, 0,
				 KVPOOL_ID_NONE, KVPOOL_ID_NONE, &f->other))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	const char *why = NULL;

	if (kvpool_pool_check(f->pool, &why))
		fail_msg("invariant: %s", why);
	kvpool_pool_destroy(f->pool);
	free(f);
	return 0;
}

static void check(struct fix *f)
{
	const char *why = NULL;

	if (kvpool_pool_check(f->pool, &why))
		fail_msg("invariant: %s", why);
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

/* ---- LEASE_MOVE --------------------------------------------------------- */

static void move_keeps_counters(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app"), *cache = lease_in(f, "app");
	u32 b[8], bad = 99, moved[3];

	assert_int_equal(grant(cl, 8, 0, b), 8);
	assert_int_equal(f->app->cur, 8);
	assert_int_equal(f->app->peak, 8);
	moved[0] = b[1];
	moved[1] = b[5];
	moved[2] = b[7];
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, moved, 3,
					   &bad), 3);
	assert_int_equal(bad, 0);
	assert_int_equal(cl->held, 5);
	assert_int_equal(cache->held, 3);
	assert_int_equal(f->app->cur, 8);	/* same tenant: unchanged */
	assert_int_equal(f->app->peak, 8);
	assert_int_equal(f->pool->used, 8);
	check(f);
	/* The new holder releases them; the old one cannot. */
	assert_int_equal(kvpool_lease_release(cl, moved, 1), -EINVAL);
	assert_int_equal(kvpool_lease_release(cache, moved, 3), 3);
	assert_int_equal(f->app->cur, 5);
	/* Closing the source leaves moved blocks with the destination. */
	moved[0] = b[0];
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, moved, 1,
					   &bad), 1);
	kvpool_lease_close(cl);
	assert_int_equal(cache->held, 1);
	assert_int_equal(f->app->cur, 1);
	check(f);
	kvpool_lease_close(cache);
	assert_int_equal(f->pool->used, 0);
}

static void move_errors(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app"), *cache = lease_in(f, "app");
	struct kvpool_lease *foreign = lease_in(f, "other");
	u32 b[4], fb[1], x[3], bad;

	assert_int_equal(grant(cl, 4, 0, b), 4);
	assert_int_equal(grant(foreign, 1, 0, fb), 1);

	bad = 7;
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 0,
					   &bad), -EINVAL);
	assert_int_equal(bad, 0);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b,
					   KVPOOL_IO_MAX_BLOCKS + 1, &bad),
			 -EINVAL);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cl->id, b, 1, &bad),
			 -EINVAL);
	assert_int_equal(kvpool_lease_move(f->pool, 999, cache->id, b, 1, &bad),
			 -ENOENT);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, 999, b, 1, &bad),
			 -ENOENT);
	/* Another tenant's lease: the blocks would change tenant. */
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, foreign->id, b, 1,
					   &bad), -EXDEV);
	/* A block the source does not hold, at position 2: nothing moves. */
	x[0] = b[0];
	x[1] = b[1];
	x[2] = fb[0];
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, x, 3,
					   &bad), -EPERM);
	assert_int_equal(bad, 2);
	x[2] = 63;				/* free */
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, x, 3,
					   &bad), -EPERM);
	assert_int_equal(bad, 2);
	x[2] = 64;				/* beyond capacity */
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, x, 3,
					   &bad), -EPERM);
	assert_int_equal(bad, 2);
	/* A repeated index. */
	x[2] = b[0];
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, x, 3,
					   &bad), -EINVAL);
	assert_int_equal(bad, 2);
	assert_int_equal(cl->held, 4);
	assert_int_equal(cache->held, 0);
	check(f);
	/* All four still releasable by their holder. */
	assert_int_equal(kvpool_lease_release(cl, b, 4), 4);
	kvpool_lease_close(cl);
	kvpool_lease_close(cache);
	kvpool_lease_close(foreign);
}

/*
 * A pinned source gives nothing (a block an operation uses never changes
 * hands): -EBUSY, nothing changed, the destination cannot release what it
 * never got; after the last unpin the same move works.
 */
static void move_pinned_source_refused(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app"), *cache = lease_in(f, "app");
	u32 b[4], bad = 99, waits;

	assert_int_equal(grant(cl, 4, 0, b), 4);
	assert_int_equal(kvpool_tenant_set_max(f->app, 2), 0);	/* ask 2 */
	assert_int_equal(cl->reclaim_target, 2);
	assert_int_equal(kvpool_lease_pin(f->pool, cl->id, b, 1, &bad), 0);
	assert_int_equal(kvpool_lease_pin(f->pool, cl->id, b + 1, 1, &bad), 0);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 3,
					   &bad), -EBUSY);
	/* Even a block the pins did not name: the pin covers the lease. */
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b + 3,
					   1, &bad), -EBUSY);
	assert_int_equal(bad, 0);
	assert_int_equal(cl->held, 4);
	assert_int_equal(cache->held, 0);
	assert_int_equal(cl->reclaim_target, 2);
	assert_int_equal(f->app->cur, 4);
	assert_int_equal(f->pool->used, 4);
	assert_int_equal(f->pool->owner_of[b[0]], cl->slot + 1);
	assert_int_equal(f->pool->owner_of[b[3]], cl->slot + 1);
	check(f);
	assert_int_equal(kvpool_lease_release(cache, b, 1), -EINVAL);
	assert_int_equal(kvpool_lease_release(cl, b, 1), -EBUSY);
	/* The checks the pin made still hold. */
	assert_int_equal(kvpool_lease_check(f->pool, cl->id, b, 4, &bad), 0);
	/* One unpin is not enough; the last one is. */
	assert_int_equal(kvpool_lease_unpin(f->pool, cl->id), 0);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 3,
					   &bad), -EBUSY);
	waits = f->h.waiter_wakes;
	assert_int_equal(kvpool_lease_unpin(f->pool, cl->id), 0);
	assert_true(f->h.waiter_wakes > waits);	/* a host may retry now */
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 3,
					   &bad), 3);
	assert_int_equal(cl->held, 1);
	assert_int_equal(cache->held, 3);
	assert_int_equal(cl->reclaim_target, 1);
	check(f);
	/* A pinned destination only gains blocks: allowed. */
	assert_int_equal(kvpool_lease_pin(f->pool, cache->id, b, 1, &bad), 0);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b + 3,
					   1, &bad), 1);
	assert_int_equal(kvpool_lease_move(f->pool, cache->id, cl->id, b + 3,
					   1, &bad), -EBUSY);
	assert_int_equal(kvpool_lease_unpin(f->pool, cache->id), 0);
	assert_int_equal(cache->held, 4);
	check(f);
	kvpool_lease_close(cl);
	kvpool_lease_close(cache);
}

static void move_closing(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app"), *cache = lease_in(f, "app");
	u64 cl_id = cl->id;
	u32 b[2], bad;

	assert_int_equal(grant(cl, 2, 0, b), 2);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 1,
					   &bad), 1);
	/* Closed while pinned: the lease is closing, no longer a party. */
	assert_int_equal(kvpool_lease_pin(f->pool, cl->id, b + 1, 1, &bad), 0);
	kvpool_lease_close(cl);
	assert_int_equal(kvpool_lease_move(f->pool, cl_id, cache->id, b + 1, 1,
					   &bad), -ENOENT);
	assert_int_equal(kvpool_lease_move(f->pool, cache->id, cl_id, b, 1,
					   &bad), -ENOENT);
	assert_int_equal(kvpool_lease_unpin(f->pool, cl_id), 0);
	assert_int_equal(f->app->cur, 1);
	assert_int_equal(cache->held, 1);
	check(f);
	kvpool_lease_close(cache);
}

static void move_caps_reclaim_target(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app"), *cache = lease_in(f, "app");
	u32 b[6], bad;

	assert_int_equal(grant(cl, 6, 0, b), 6);
	assert_int_equal(kvpool_tenant_set_max(f->app, 2), 0);	/* ask 4 */
	assert_int_equal(cl->reclaim_target, 4);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 3,
					   &bad), 3);
	assert_int_equal(cl->reclaim_target, 3);	/* holds 3 now */
	assert_int_equal(cache->reclaim_target, 0);
	kvpool_lease_close(cl);
	kvpool_lease_close(cache);
}

/* ---- reclaim order ------------------------------------------------------ */

static void reclaim_order_first_and_never(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "app");
	struct kvpool_lease *hot = lease_in(f, "app"), *cold = lease_in(f, "app");
	u32 b[12], bad;

	assert_int_equal(kvpool_lease_set_reclaim_order(cold, KVPOOL_RECLAIM_FIRST,
							&f->alice), -EPERM);
	assert_int_equal(kvpool_lease_set_reclaim_order(cold, 3, &f->root),
			 -EINVAL);
	assert_int_equal(kvpool_lease_set_reclaim_order(cold, KVPOOL_RECLAIM_FIRST,
							&f->root), 0);
	assert_int_equal(kvpool_lease_set_reclaim_order(hot, KVPOOL_RECLAIM_NEVER,
							&f->root), 0);
	/* client 4, hot 4, cold 4 (moved from the client) */
	assert_int_equal(grant(cl, 12, 0, b), 12);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, hot->id, b, 4, &bad),
			 4);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cold->id, b + 4, 4,
					   &bad), 4);
	/* Ask 6 back: the cold lease first (4), then the client (2). */
	assert_int_equal(kvpool_tenant_set_max(f->app, 6), 0);
	assert_int_equal(cold->reclaim_target, 4);
	assert_int_equal(cl->reclaim_target, 2);
	assert_int_equal(hot->reclaim_target, 0);
	/* Ask 10: all of cold and client; never the hot lease. */
	assert_int_equal(kvpool_tenant_set_max(f->app, 2), 0);
	assert_int_equal(cold->reclaim_target, 4);
	assert_int_equal(cl->reclaim_target, 4);
	assert_int_equal(hot->reclaim_target, 0);
	/* Back to normal order: asked after the client (attached first). */
	assert_int_equal(kvpool_tenant_set_max(f->app, KVPOOL_UNLIMITED), 0);
	assert_int_equal(kvpool_lease_release(cl, b + 8, 4), 4);
	assert_int_equal(kvpool_lease_release(cold, b + 4, 4), 4);
	assert_int_equal(grant(cl, 2, 0, b + 8), 2);
	assert_int_equal(grant(cold, 2, 0, b + 4), 2);
	assert_int_equal(kvpool_lease_set_reclaim_order(cold, KVPOOL_RECLAIM_NORMAL,
							&f->alice), 0);
	assert_int_equal(kvpool_tenant_set_max(f->app, 6), 0);	/* ask 2 */
	assert_int_equal(cl->reclaim_target, 2);
	assert_int_equal(cold->reclaim_target, 0);
	/* A lease set to NEVER loses its target. */
	assert_int_equal(kvpool_lease_set_reclaim_order(cl, KVPOOL_RECLAIM_NEVER,
							&f->root), 0);
	assert_int_equal(cl->reclaim_target, 0);
	check(f);
	kvpool_lease_close(cl);
	kvpool_lease_close(hot);
	kvpool_lease_close(cold);
}

static void reclaim_first_survives_reattach(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *cl = lease_in(f, "other");
	struct kvpool_lease *cache = lease_in(f, "app");
	u32 b[4], bad;

	assert_int_equal(kvpool_lease_set_reclaim_order(cache, KVPOOL_RECLAIM_FIRST,
							&f->root), 0);
	assert_int_equal(kvpool_lease_attach(cache, "other", &f->root), 0);
	assert_int_equal(grant(cl, 4, 0, b), 4);
	assert_int_equal(kvpool_lease_move(f->pool, cl->id, cache->id, b, 2, &bad),
			 2);
	assert_int_equal(kvpool_tenant_set_max(f->other, 3), 0);	/* ask 1 */
	assert_int_equal(cache->reclaim_target, 1);
	assert_int_equal(cl->reclaim_target, 0);
	kvpool_lease_close(cl);
	kvpool_lease_close(cache);
}

/* ---- SHORT -------------------------------------------------------------- */

static void short_event_when_blocks_are_short(void **state)
{
	struct fix *f = *state;
	struct kvpool_lease *a = lease_in(f, "app"), *o = lease_in(f, "other");
	struct kvpool_event ev;
	u32 *b = calloc(64, sizeof(u32));
	int n = 0;

	assert_int_equal(grant(a, 60, 0, b), 60);
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	/* A non-blocking caller short of 6: one SHORT record for the owner. */
	assert_int_equal(grant(o, 10, KVPOOL_LEASE_NONBLOCK, b), -EAGAIN);
	while (kvpool_owner_read_event(f->pool, &ev) == 1) {
		if (ev.type != KVPOOL_EVENT_SHORT)
			continue;
		n++;
		assert_int_equal(ev.blocks, 6);
		assert_string_equal(ev.tenant, "other");
		assert_int_equal(ev.lease_id, o->id);
	}
	assert_int_equal(n, 1);
	/* Coalesced: two waits leave one record, the latest. */
	assert_int_equal(grant(o, 10, 0, b), -EAGAIN);
	assert_int_equal(grant(o, 8, 0, b), -EAGAIN);
	n = 0;
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		if (ev.type == KVPOOL_EVENT_SHORT) {
			n++;
			assert_int_equal(ev.blocks, 4);
		}
	assert_int_equal(n, 1);
	/* Below its min the tenant posts reclaim targets instead. */
	assert_int_equal(kvpool_tenant_set_min(f->other, 8), 0);
	assert_int_equal(grant(o, 10, 0, b), -EAGAIN);
	assert_int_equal(f->app->ev_reclaim, 1);
	n = 0;
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		n += ev.type == KVPOOL_EVENT_SHORT;
	assert_int_equal(n, 0);
	assert_int_equal(kvpool_tenant_set_min(f->other, 0), 0);
	assert_int_equal(kvpool_tenant_set_max(f->app, KVPOOL_UNLIMITED), 0);
	while (kvpool_owner_read_event(f->pool, &ev) == 1)
		;
	/* The tenant's max is no shortage: no SHORT. */
	assert_int_equal(kvpool_tenant_set_max(f->other, 2), 0);
	assert_int_equal(grant(o, 3, 0, b), -EDQUOT);
	assert_int_equal(kvpool_owner_has_events(f->pool), false);
	/* Nor is a grant that fits. */
	assert_int_equal(grant(o, 2, 0, b), 2);
	assert_int_equal(kvpool_owner_has_events(f->pool), false);
	free(b);
	kvpool_lease_close(a);
	kvpool_lease_close(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(move_keeps_counters, setup, teardown),
		cmocka_unit_test_setup_teardown(move_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(move_pinned_source_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(move_closing, setup, teardown),
		cmocka_unit_test_setup_teardown(move_caps_reclaim_target, setup, teardown),
		cmocka_unit_test_setup_teardown(reclaim_order_first_and_never, setup, teardown),
		cmocka_unit_test_setup_teardown(reclaim_first_survives_reattach, setup, teardown),
		cmocka_unit_test_setup_teardown(short_event_when_blocks_are_short, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
