// SPDX-License-Identifier: MIT
/*
 * The ledger primitives of a tenant's prefix cache, in the real module:
 * KVPOOL_IOC_LEASE_MOVE (owner only; blocks change lease, never tenant;
 * counters unchanged; all or nothing; every error path, each call
 * otherwise valid; a pinned source refused), the reclaim order of
 * TENANT_ATTACH (KVPOOL_ATTACH_RECLAIM_FIRST asked first, _NEVER never;
 * both need CAP_SYS_ADMIN) and the owner's SHORT event.
 */
#include "kvt.h"

static int do_move(int fd, uint64_t from, uint64_t to, const uint32_t *b,
		   uint32_t n, struct kvpool_lease_move *out)
{
	struct kvpool_lease_move m;
	int ret;

	memset(&m, 0, sizeof(m));
	m.blocks_ptr = (uintptr_t)b;
	m.from_lease = from;
	m.to_lease = to;
	m.count = n;
	ret = kvt_ioctl(fd, KVPOOL_IOC_LEASE_MOVE, &m);
	if (out)
		*out = m;
	return ret;
}

static uint64_t lease_of(int fd)
{
	struct kvpool_status st;

	return kvt_status(fd, &st) ? 0 : st.lease_id;
}

static uint32_t held_of(int fd)
{
	struct kvpool_status st;

	return kvt_status(fd, &st) ? 0 : st.held;
}

static uint32_t target_of(int fd)
{
	struct kvpool_status st;

	return kvt_status(fd, &st) ? 0 : st.reclaim_target;
}

static void test_move(int owner)
{
	struct kvpool_lease_move m;
	int cl = kvt_open_or_die(), cache = kvt_open_or_die();
	int foreign = kvt_open_or_die(), unbound = kvt_open_or_die();
	uint32_t b[8], fb[1], x[3];
	uint64_t lc, lk, lf;

	CHECK_RET(kvt_attach(cl, "pm", "app"), 0, "client in app");
	CHECK_RET(kvt_attach(cache, "pm", "app"), 0, "cache file in app");
	CHECK_RET(kvt_attach(foreign, "pm", "other"), 0, "foreign in other");
	CHECK_RET(kvt_lease(cl, 8, 0, 0, b), 8, "client leases 8");
	CHECK_RET(kvt_lease(foreign, 1, 0, 0, fb), 1, "foreign leases 1");
	lc = lease_of(cl);
	lk = lease_of(cache);
	lf = lease_of(foreign);

	/* Success: 3 blocks change lease, nothing else changes. */
	x[0] = b[1];
	x[1] = b[4];
	x[2] = b[7];
	CHECK_RET(do_move(owner, lc, lk, x, 3, &m), 0, "move 3 blocks");
	CHECK(m.bad_index == 0, "bad_index 0 on success");
	CHECK(held_of(cl) == 5 && held_of(cache) == 3, "held 5 and 3");
	CHECK(kvt_sysfs_num("pm", "app", "blocks.current") == 8,
	      "the tenant's current is unchanged");
	CHECK(kvt_sysfs_num("pm", "app", "blocks.peak") == 8, "peak unchanged");
	CHECK(kvt_sysfs_num("pm", NULL, "used") == 9, "pool used unchanged");
	CHECK_RET(kvt_release(cl, x, 1), -EINVAL, "the old holder cannot release");
	CHECK_RET(kvt_release(cache, x, 1), 1, "the new holder releases one");

	/* Every error, the call otherwise valid; nothing changes. */
	CHECK_RET(do_move(cl, lc, lk, b, 1, NULL), -EPERM, "a client cannot move");
	CHECK_RET(do_move(unbound, lc, lk, b, 1, NULL), -EPERM,
		  "an unbound file cannot move");
	memset(&m, 0, sizeof(m));
	m.blocks_ptr = (uintptr_t)b;
	m.from_lease = lc;
	m.to_lease = lk;
	m.count = 1;
	m.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), -EINVAL,
		  "unknown flag");
	m.flags = 0;
	m.pad = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), -EINVAL, "pad");
	m.pad = 0;
	m.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), -EINVAL,
		  "reserved");
	CHECK_RET(do_move(owner, lc, lk, b, 0, NULL), -EINVAL, "count 0");
	CHECK_RET(do_move(owner, lc, lk, b, KVPOOL_IO_MAX_BLOCKS + 1, NULL),
		  -EINVAL, "count above KVPOOL_IO_MAX_BLOCKS");
	CHECK_RET(do_move(owner, lc, lc, b, 1, NULL), -EINVAL, "to itself");
	CHECK_RET(do_move(owner, 999999, lk, b, 1, NULL), -ENOENT,
		  "no such source lease");
	CHECK_RET(do_move(owner, lc, 999999, b, 1, NULL), -ENOENT,
		  "no such destination lease");
	CHECK_RET(do_move(owner, lc, lf, b, 1, NULL), -EXDEV,
		  "another tenant's lease");
	x[0] = b[0];
	x[1] = b[2];
	x[2] = fb[0];
	CHECK_RET(do_move(owner, lc, lk, x, 3, &m), -EPERM,
		  "a block the source does not hold");
	CHECK(m.bad_index == 2, "bad_index 2 copied back (got %u)", m.bad_index);
	x[2] = 63;
	CHECK_RET(do_move(owner, lc, lk, x, 3, &m), -EPERM, "a free block");
	x[2] = 64;
	CHECK_RET(do_move(owner, lc, lk, x, 3, &m), -EPERM,
		  "a block beyond capacity");
	CHECK(m.bad_index == 2, "bad_index 2");
	x[2] = b[0];
	CHECK_RET(do_move(owner, lc, lk, x, 3, &m), -EINVAL, "a repeated block");
	CHECK(m.bad_index == 2, "bad_index 2 for the repeat (got %u)",
	      m.bad_index);
	memset(&m, 0, sizeof(m));
	m.blocks_ptr = 8;	/* unmapped */
	m.from_lease = lc;
	m.to_lease = lk;
	m.count = 2;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), -EFAULT,
		  "bad blocks_ptr");
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, (void *)8), -EFAULT,
		  "bad struct pointer");
	CHECK(held_of(cl) == 5 && held_of(cache) == 2 && held_of(foreign) == 1,
	      "nothing changed by the errors");

	/*
	 * A pinned source gives nothing: a block an operation of the owner
	 * uses never changes hands (else the destination could release it
	 * at once and the pool grant it to another tenant mid-operation).
	 */
	{
		struct kvpool_lease_check lc_a;
		struct kvpool_lease_unpin u;
		uint32_t y[2] = { b[0], b[2] }, z[1] = { b[4] };

		memset(&lc_a, 0, sizeof(lc_a));
		lc_a.blocks_ptr = (uintptr_t)b;
		lc_a.lease_id = lc;
		lc_a.count = 1;
		lc_a.flags = KVPOOL_LEASE_CHECK_PIN;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc_a), 0,
			  "pin the client");
		CHECK_RET(do_move(owner, lc, lk, y, 2, &m), -EBUSY,
			  "move from a pinned lease");
		CHECK(m.bad_index == 0, "no bad_index for -EBUSY");
		CHECK(held_of(cl) == 5 && held_of(cache) == 2,
		      "nothing moved out of the pinned lease");
		CHECK_RET(kvt_release(cache, y, 1), -EINVAL,
			  "the destination cannot release a block of the "
			  "pinned lease");
		CHECK(kvt_sysfs_num("pm", NULL, "used") == 8,
		      "no block went back to the pool");
		CHECK_RET(do_move(owner, lk, lc, z, 1, NULL), 0,
			  "a pinned destination may gain blocks");
		CHECK_RET(do_move(owner, lc, lk, z, 1, NULL), -EBUSY,
			  "but gives none back while pinned");
		memset(&u, 0, sizeof(u));
		u.lease_id = lc;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_UNPIN, &u), 0, "unpin");
		CHECK_RET(do_move(owner, lc, lk, y, 2, NULL), 0,
			  "after the last unpin the move works");
		CHECK(held_of(cl) == 4 && held_of(cache) == 3, "held 4 and 3");
	}
	close(cl);
	close(cache);
	close(foreign);
	close(unbound);
	CHECK(kvt_sysfs_num("pm", NULL, "used") == 0, "everything returned");
	kvt_count_events(owner, 0, NULL);
}

/* The source dies (kill -9) after the move: the moved blocks stay. */
static void test_source_killed(int owner)
{
	int cache = kvt_open_or_die(), p[2];
	struct kvpool_event ev = { 0 };
	uint32_t b[4];
	uint64_t id = 0;
	pid_t pid;

	CHECK_RET(kvt_attach(cache, "pm", "app"), 0, "cache file in app");
	if (pipe(p))
		kvt_die("pipe");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int fd = kvt_open();

		if (fd < 0 || kvt_attach(fd, "pm", "app") ||
		    kvt_lease(fd, 4, 0, 0, b) != 4)
			_exit(1);
		id = lease_of(fd);
		if (write(p[1], &id, sizeof(id)) != sizeof(id) ||
		    write(p[1], b, sizeof(b)) != sizeof(b))
			_exit(1);
		pause();
		_exit(0);
	}
	CHECK(read(p[0], &id, sizeof(id)) == sizeof(id) &&
	      read(p[0], b, sizeof(b)) == sizeof(b), "the child leased 4");
	kvt_count_events(owner, 0, NULL);
	CHECK_RET(do_move(owner, id, lease_of(cache), b, 2, NULL), 0,
		  "move 2 of the child's blocks");
	kill(pid, SIGKILL);
	CHECK(kvt_wait(pid) == 128 + SIGKILL, "child killed");
	CHECK(held_of(cache) == 2, "the moved blocks stay with the cache file");
	CHECK(kvt_sysfs_num("pm", "app", "blocks.current") == 2,
	      "the tenant is charged for them only");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) &&
	      ev.lease_id == id && ev.blocks == 2,
	      "CLIENT_CLOSED returned the other 2 (got %u)", ev.blocks);
	CHECK_RET(kvt_release(cache, b, 2), 2, "the cache file releases them");
	close(cache);
	close(p[0]);
	close(p[1]);
}

static void test_reclaim_order(int owner)
{
	int cl = kvt_open_or_die(), cold = kvt_open_or_die();
	int hot = kvt_open_or_die(), u;
	struct kvpool_tenant_attach ta;
	struct pollfd pf;
	uint32_t b[12];
	pid_t pid;

	CHECK_RET(kvt_attach(cl, "pm", "app"), 0, "client in app");
	memset(&ta, 0, sizeof(ta));
	strcpy(ta.pool, "pm");
	strcpy(ta.tenant, "app");
	ta.flags = KVPOOL_ATTACH_RECLAIM_FIRST | KVPOOL_ATTACH_RECLAIM_NEVER;
	CHECK_RET(kvt_ioctl(cold, KVPOOL_IOC_TENANT_ATTACH, &ta), -EINVAL,
		  "FIRST and NEVER together");
	ta.flags = 4;
	CHECK_RET(kvt_ioctl(cold, KVPOOL_IOC_TENANT_ATTACH, &ta), -EINVAL,
		  "unknown attach flag");
	ta.flags = KVPOOL_ATTACH_RECLAIM_FIRST;
	CHECK_RET(kvt_ioctl(cold, KVPOOL_IOC_TENANT_ATTACH, &ta), 0,
		  "attach RECLAIM_FIRST");
	ta.flags = KVPOOL_ATTACH_RECLAIM_NEVER;
	CHECK_RET(kvt_ioctl(hot, KVPOOL_IOC_TENANT_ATTACH, &ta), 0,
		  "attach RECLAIM_NEVER");
	/* Both need CAP_SYS_ADMIN; a refused call binds nothing. */
	fflush(stdout);
	pid = fork();
	if (!pid) {
		struct kvpool_tenant_attach t2 = ta;

		u = kvt_open();
		if (u < 0 || kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		t2.flags = KVPOOL_ATTACH_RECLAIM_FIRST;
		if (kvt_ioctl(u, KVPOOL_IOC_TENANT_ATTACH, &t2) != -EPERM)
			_exit(3);
		t2.flags = KVPOOL_ATTACH_RECLAIM_NEVER;
		if (kvt_ioctl(u, KVPOOL_IOC_TENANT_ATTACH, &t2) != -EPERM)
			_exit(4);
		_exit(lease_of(u) == 0 ? 0 : 5);
	}
	CHECK(kvt_wait(pid) == 0, "uid 1000: EPERM for both, file left unbound");

	/* client 4, cold 4, hot 4 (moved from the client) */
	CHECK_RET(kvt_lease(cl, 12, 0, 0, b), 12, "client leases 12");
	CHECK_RET(do_move(owner, lease_of(cl), lease_of(hot), b, 4, NULL), 0,
		  "4 to the NEVER file");
	CHECK_RET(do_move(owner, lease_of(cl), lease_of(cold), b + 4, 4, NULL), 0,
		  "4 to the FIRST file");
	/* Ask 6 back: the FIRST file 4 (though it attached later), the
	 * client 2, the NEVER file nothing. */
	CHECK_RET(kvt_sysfs_set("pm", "app", "blocks.max", "6"), 0, "max 6");
	CHECK(target_of(cold) == 4, "FIRST file asked 4 (got %u)", target_of(cold));
	CHECK(target_of(cl) == 2, "client asked 2 (got %u)", target_of(cl));
	CHECK(target_of(hot) == 0, "NEVER file asked nothing (got %u)",
	      target_of(hot));
	pf.fd = cold;
	pf.events = POLLPRI;
	CHECK(poll(&pf, 1, 0) == 1 && (pf.revents & POLLPRI), "FIRST file polls POLLPRI");
	pf.fd = hot;
	CHECK(poll(&pf, 1, 0) == 0, "NEVER file does not");
	/* A move caps the source's target at what it still holds. */
	CHECK_RET(do_move(owner, lease_of(cold), lease_of(hot), b + 4, 2, NULL),
		  0, "2 from FIRST to NEVER");
	CHECK(target_of(cold) == 2, "FIRST target capped to 2 (got %u)",
	      target_of(cold));
	CHECK_RET(kvt_sysfs_set("pm", "app", "blocks.max", "max"), 0, "max back");
	close(cl);
	close(cold);
	close(hot);
	CHECK(kvt_sysfs_num("pm", NULL, "used") == 0, "everything returned");
}

static void test_short(int owner)
{
	int a = kvt_open_or_die(), o = kvt_open_or_die();
	struct kvpool_event ev = { 0 };
	uint32_t b[64];

	CHECK_RET(kvt_attach(a, "pm", "app"), 0, "app file");
	CHECK_RET(kvt_attach(o, "pm", "other"), 0, "other file");
	CHECK_RET(kvt_lease(a, 60, 0, 0, b), 60, "app leases 60");
	kvt_count_events(owner, 0, NULL);
	CHECK_RET(kvt_lease(o, 10, KVPOOL_LEASE_NONBLOCK, 0, b), -EAGAIN,
		  "other is short of 6");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_SHORT, &ev) &&
	      ev.blocks == 6 && !strcmp(ev.tenant, "other") &&
	      ev.lease_id == lease_of(o),
	      "owner reads SHORT: other, 6 blocks (got %u)", ev.blocks);
	CHECK_RET(kvt_lease(o, 5, KVPOOL_LEASE_NONBLOCK, 0, b), -EAGAIN,
		  "short again");
	CHECK_RET(kvt_lease(o, 4, KVPOOL_LEASE_NONBLOCK, 0, b), 4, "4 fit");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_SHORT, &ev) && ev.blocks == 1,
	      "the latest SHORT, coalesced (got %u)", ev.blocks);
	CHECK(!kvt_find_event(owner, KVPOOL_EVENT_SHORT, &ev),
	      "no SHORT for a grant that fits");
	close(a);
	close(o);
}

int main(void)
{
	struct kvpool_features f;
	int owner;

	kvt_init("move");
	owner = kvt_setup_pool("pm", 64, 8, 64, KVPOOL_UNLIMITED);
	kvt_tenant_new("pm", "app", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE,
		       KVPOOL_ID_NONE);
	kvt_tenant_new("pm", "other", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE,
		       KVPOOL_ID_NONE);
	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_LEASE_MOVE | KVPOOL_FEAT_RECLAIM_ORDER |
		      KVPOOL_FEAT_SHORT_EVENT;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FEATURES, &f), 0, "FEATURES");
	CHECK(f.enabled == f.requested, "LEASE_MOVE, RECLAIM_ORDER, SHORT_EVENT");
	test_move(owner);
	test_source_killed(owner);
	test_reclaim_order(owner);
	test_short(owner);
	close(owner);
	return kvt_done();
}
