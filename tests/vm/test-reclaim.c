// SPDX-License-Identifier: MIT
/*
 * Reclaim: a waiter below its tenant's min posts reclaim targets to files
 * of tenants above their min (largest excess first).  The target file polls
 * POLLPRI (a sleeping poll() is woken), STATUS reports the target, the
 * owner reads a RECLAIM event, and giving the blocks back clears the target
 * and lets the waiter in.
 */
#include "kvt.h"

int main(void)
{
	int owner, lo1, lo2, hi;
	uint32_t b[16], x[4];
	struct kvpool_status st;
	struct kvpool_event ev;
	struct pollfd p;
	pid_t poller, waiter;

	kvt_init("reclaim");
	owner = kvt_setup_pool("pc", 16, 4, 16, KVPOOL_UNLIMITED);
	kvt_tenant_new("pc", "hi", KVPOOL_UNLIMITED, 8, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	kvt_tenant_new("pc", "lo", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	lo1 = kvt_open_or_die();
	lo2 = kvt_open_or_die();
	hi = kvt_open_or_die();
	CHECK_RET(kvt_attach(lo1, "pc", "lo"), 0, "lo1 in lo");
	CHECK_RET(kvt_attach(lo2, "pc", "lo"), 0, "lo2 in lo");
	CHECK_RET(kvt_attach(hi, "pc", "hi"), 0, "hi in hi");

	/*
	 * hi's min is 8 and nothing is leased: only 8 blocks are free for lo.
	 * Shrink hi's min to 0 first so that lo can fill the pool.
	 */
	CHECK_RET(kvt_sysfs_set("pc", "hi", "blocks.min", "0"), 0, "hi min 0");
	CHECK_RET(kvt_lease(lo1, 10, 0, 0, b), 10, "lo1 leases 10");
	CHECK_RET(kvt_lease(lo2, 6, 0, 0, b + 10), 6, "lo2 leases 6");
	CHECK_RET(kvt_sysfs_set("pc", "hi", "blocks.min", "8"), 0, "hi min back to 8");

	p.fd = lo1;
	p.events = POLLPRI;
	CHECK(poll(&p, 1, 0) == 0, "no POLLPRI yet");
	kvt_count_events(owner, 0, NULL);

	/* A process sleeping in poll() for POLLPRI on lo1's file. */
	fflush(stdout);
	poller = fork();
	if (!poller) {
		struct pollfd q = { .fd = lo1, .events = POLLPRI };

		_exit(poll(&q, 1, 60000) == 1 && (q.revents & POLLPRI) ? 0 : 1);
	}
	CHECK(kvt_wait_sleeping(poller), "poller sleeps");

	/* hi, below its min, waits for 4 blocks. */
	waiter = fork();
	if (!waiter)
		_exit(kvt_lease(hi, 4, 0, 0, x) == 4 ? 0 : 1);
	CHECK(kvt_wait_stall("pc", "hi", 0), "hi waiter waits");
	CHECK(kvt_wait(poller) == 0, "the sleeping poll() woke with POLLPRI");
	CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLPRI), "lo1 polls POLLPRI");
	CHECK_RET(kvt_status(lo1, &st), 0, "lo1 STATUS");
	CHECK(st.reclaim_target == 4, "lo1 reclaim target 4 (got %u)", st.reclaim_target);
	p.fd = lo2;
	CHECK(poll(&p, 1, 0) == 0, "lo2 was not asked (lo1 covers the need)");
	CHECK(kvt_sysfs_event("pc", "lo", "reclaim") == 1, "lo events reclaim 1");
	CHECK(kvt_sysfs_event("pc", "hi", "stall") == 1, "hi events stall 1");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_RECLAIM, &ev) &&
	      !strcmp(ev.tenant, "lo") && ev.blocks == 4,
	      "owner reads RECLAIM: tenant lo, 4 blocks");

	CHECK_RET(kvt_release(lo1, b + 6, 2), 2, "lo1 gives back 2");
	CHECK_RET(kvt_status(lo1, &st), 0, "STATUS");
	CHECK(st.reclaim_target == 2, "target down to 2 (got %u)", st.reclaim_target);
	CHECK_RET(kvt_release(lo1, b + 8, 2), 2, "lo1 gives back 2 more");
	p.fd = lo1;
	CHECK(poll(&p, 1, 0) == 0, "POLLPRI cleared");
	CHECK(kvt_wait(waiter) == 0, "hi waiter granted 4");
	CHECK(kvt_sysfs_num("pc", "hi", "blocks.current") == 4, "hi current 4");
	CHECK(kvt_sysfs_num("pc", NULL, "used") == 16, "pool full again");

	close(lo1);
	close(lo2);
	close(hi);
	CHECK(kvt_sysfs_num("pc", NULL, "used") == 0, "used 0");
	close(owner);
	return kvt_done();
}
