// SPDX-License-Identifier: MIT
/*
 * Waiting leases: timeout, non-blocking, a waiter woken by a release, a
 * waiter killed by SIGKILL (nothing granted, nothing leaked), a non-fatal
 * signal does not break a killable wait, orphaned pools (wait, or -ENXIO
 * with KVPOOL_LEASE_ORPHAN_FAIL) and waits for the owner to grow (GROW
 * event, POOL_GROW, KVPOOL_GROW_FAILED -> -ENOMEM).
 */
#include "kvt.h"

/* Fork a child that leases @count blocks on @fd and exits 0 if the result
 * is @want. */
static pid_t child_lease(int fd, uint32_t count, uint32_t flags,
			 uint64_t timeout_ns, int want)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		kvt_die("fork");
	if (!pid) {
		uint32_t b[64];
		int ret = kvt_lease(fd, count, flags, timeout_ns, b);

		if (ret != want)
			printf("# child: lease %u got %d, want %d\n", count, ret, want);
		_exit(ret == want ? 0 : 1);
	}
	return pid;
}

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
	got_usr1 = 1;
}

static void test_basic_waits(void)
{
	int owner = kvt_setup_pool("pw", 16, 4, 16, KVPOOL_UNLIMITED);
	int c1 = kvt_open_or_die(), c2 = kvt_open_or_die();
	uint32_t b[16], x[2];
	uint64_t t0, dt;
	long long stall;
	pid_t pid;

	CHECK_RET(kvt_lease(c1, 16, 0, 0, b), 16, "c1 fills the pool");
	CHECK_RET(kvt_attach(c2, "pw", ""), 0, "c2 attach");

	CHECK_RET(kvt_lease(c2, 1, KVPOOL_LEASE_NONBLOCK, 0, x), -EAGAIN, "NONBLOCK: -EAGAIN");
	t0 = kvt_now_ns();
	CHECK_RET(kvt_lease(c2, 1, 0, 200000000ULL, x), -ETIMEDOUT, "200 ms wait: -ETIMEDOUT");
	dt = kvt_now_ns() - t0;
	CHECK(dt >= 150000000ULL, "the wait lasted about its timeout (%llu ms)",
	      (unsigned long long)(dt / 1000000));
	CHECK(kvt_sysfs_event("pw", "uid-0", "stall") >= 1, "events stall counted");
	CHECK(kvt_sysfs_event("pw", "uid-0", "fail") == 2, "events fail: NONBLOCK + timeout (%lld)",
	      kvt_sysfs_event("pw", "uid-0", "fail"));

	/* A waiter woken by a release. */
	stall = kvt_sysfs_event("pw", "uid-0", "stall");
	pid = child_lease(c2, 2, 0, 0, 2);
	CHECK(kvt_wait_stall("pw", "uid-0", stall), "waiter waits");
	CHECK_RET(kvt_release(c1, b + 14, 2), 2, "c1 releases 2");
	CHECK(kvt_wait(pid) == 0, "waiter woken by the release and granted 2");
	CHECK(kvt_sysfs_num("pw", NULL, "used") == 16, "used 16 (c1 14 + c2 2)");
	CHECK_RET(kvt_release_all(c2), 2, "c2 gives them back");

	/* A waiter killed by SIGKILL: nothing granted, nothing leaked. */
	c2 = kvt_open_or_die();
	CHECK_RET(kvt_attach(c2, "pw", ""), 0, "c2 again");
	stall = kvt_sysfs_event("pw", "uid-0", "stall");
	pid = child_lease(c2, 3, 0, 0, 0);
	CHECK(kvt_wait_stall("pw", "uid-0", stall), "waiter waits");
	kill(pid, SIGKILL);
	CHECK(kvt_wait(pid) == 128 + SIGKILL, "waiter killed by SIGKILL");
	CHECK(kvt_sysfs_num("pw", NULL, "used") == 14, "nothing granted to the killed waiter");
	CHECK_RET(kvt_lease(c2, 2, KVPOOL_LEASE_NONBLOCK, 0, x), 2,
		  "the free blocks are still grantable");
	CHECK_RET(kvt_release_all(c2), 2, "release");

	/* A non-fatal signal does not end a killable wait. */
	signal(SIGUSR1, on_usr1);
	stall = kvt_sysfs_event("pw", "uid-0", "stall");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int ret = kvt_lease(c2, 3, 0, 0, b);

		_exit(ret == 3 && got_usr1 ? 0 : 1);
	}
	CHECK(kvt_wait_stall("pw", "uid-0", stall), "waiter waits");
	kill(pid, SIGUSR1);
	kvt_msleep(100);
	CHECK(kvt_sysfs_num("pw", NULL, "used") == 14, "still waiting after SIGUSR1");
	CHECK_RET(kvt_release(c1, b + 11, 3), 3, "c1 releases 3");
	CHECK(kvt_wait(pid) == 0, "granted after the release; handler ran after");

	/* Orphaned pool. */
	close(owner);
	CHECK_RET(kvt_release(c1, b + 10, 1), 1, "release works while orphaned");
	CHECK_RET(kvt_lease(c2, 1, KVPOOL_LEASE_ORPHAN_FAIL, 0, x), -ENXIO,
		  "ORPHAN_FAIL: -ENXIO");
	CHECK_RET(kvt_lease(c2, 1, KVPOOL_LEASE_NONBLOCK, 0, x), -EAGAIN,
		  "NONBLOCK on an orphaned pool: -EAGAIN");
	stall = kvt_sysfs_event("pw", "uid-0", "stall");
	pid = child_lease(c2, 1, 0, 0, 1);
	CHECK(kvt_wait_stall("pw", "uid-0", stall), "grant waits while orphaned");
	owner = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(owner, "pw", NULL), 0, "a new owner attaches");
	CHECK(kvt_wait(pid) == 0, "the waiter is granted once the owner is back");
	close(c2);
	close(c1);
	CHECK(kvt_sysfs_num("pw", NULL, "used") == 0, "used 0");
	close(owner);
}

static void test_grow_waits(void)
{
	int owner = kvt_setup_pool("pg", 16, 4, 4, KVPOOL_UNLIMITED);
	int c = kvt_open_or_die();
	struct kvpool_event ev;
	struct pollfd p = { .fd = owner, .events = POLLIN };
	long long stall;
	pid_t pid;

	CHECK_RET(kvt_attach(c, "pg", ""), 0, "client attach");
	kvt_count_events(owner, 0, NULL);
	pid = child_lease(c, 6, 0, 0, 6);
	CHECK(poll(&p, 1, 20000) == 1 && (p.revents & POLLIN), "owner polls a GROW event");
	CHECK(kvt_read_event(owner, &ev) == 1 && ev.type == KVPOOL_EVENT_GROW &&
	      ev.blocks == 8, "GROW asks for 8 backed blocks (type %u blocks %u)",
	      ev.type, ev.blocks);
	CHECK_RET(kvt_grow(owner, 8, 0), 0, "owner grows to 8");
	CHECK(kvt_wait(pid) == 0, "the waiter is granted after the grow");
	CHECK(kvt_sysfs_num("pg", NULL, "used") == 6, "used 6");

	stall = kvt_sysfs_event("pg", "uid-0", "stall");
	pid = child_lease(c, 9, 0, 0, -ENOMEM);
	CHECK(poll(&p, 1, 20000) == 1, "owner polls");
	CHECK(kvt_read_event(owner, &ev) == 1 && ev.type == KVPOOL_EVENT_GROW &&
	      ev.blocks == 16, "GROW asks for 16 (type %u blocks %u)", ev.type, ev.blocks);
	CHECK(kvt_wait_stall("pg", "uid-0", stall), "waiter waits");
	CHECK_RET(kvt_grow(owner, 0, KVPOOL_GROW_FAILED), 0, "owner says it cannot grow");
	CHECK(kvt_wait(pid) == 0, "the waiter fails with -ENOMEM");
	CHECK(!kvt_find_event(owner, KVPOOL_EVENT_GROW, &ev),
	      "no new GROW is posted for the waiter that just failed");
	CHECK(kvt_sysfs_num("pg", NULL, "used") == 6, "used still 6");

	/* After the owner shrank idle chunks, a new need posts a new GROW. */
	CHECK_RET(kvt_release_all(c), 6, "release everything");
	kvt_count_events(owner, 0, NULL);
	CHECK_RET(kvt_shrink(owner, 0), 0, "owner shrinks to 0 once idle");
	CHECK_RET(kvt_lease(c, 2, 0, 300000000ULL, NULL), -ETIMEDOUT,
		  "a lease after the shrink waits (nobody grows)");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_GROW, &ev) && ev.blocks == 4,
	      "the owner is asked to grow again after a shrink");
	close(c);
	close(owner);
}

int main(void)
{
	kvt_init("wait");
	test_basic_waits();
	test_grow_waits();
	return kvt_done();
}
