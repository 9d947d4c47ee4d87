// SPDX-License-Identifier: MIT
/*
 * Crashes: kill -9 of clients holding blocks (every block returns, used is
 * what the survivors hold, the owner reads one CLIENT_CLOSED per dead
 * client with its lease id and block count), and kill -9 of the owner
 * (the pool is orphaned, clients keep their leases and can release, a new
 * owner attaches with a new epoch and rebuilds from SNAPSHOT).
 */
#include "kvt.h"

#define NCLIENTS	8

struct client {
	pid_t pid;
	uint64_t lease_id;
	uint32_t blocks;
	bool killed;
};

/* A client process: lease @n blocks, report the lease id, then sleep. */
static struct client spawn_client(const char *pool, uint32_t n)
{
	struct client c = { .blocks = n };
	int p[2];

	if (pipe(p))
		kvt_die("pipe");
	fflush(stdout);
	c.pid = fork();
	if (c.pid < 0)
		kvt_die("fork");
	if (!c.pid) {
		struct kvpool_status st;
		uint32_t b[64];
		int fd = kvt_open();
		uint64_t id = 0;

		close(p[0]);
		if (fd >= 0 && !kvt_attach(fd, pool, "") &&
		    kvt_lease(fd, n, 0, 0, b) == (int)n && !kvt_status(fd, &st))
			id = st.lease_id;
		if (write(p[1], &id, sizeof(id)) != sizeof(id))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &c.lease_id, sizeof(c.lease_id)) != sizeof(c.lease_id))
		c.lease_id = 0;
	close(p[0]);
	return c;
}

static void test_kill_clients(void)
{
	int owner = kvt_setup_pool("pk", 64, 8, 64, KVPOOL_UNLIMITED);
	struct client c[NCLIENTS];
	struct kvpool_event ev;
	uint32_t survivors = 0, got = 0, i;
	bool all_ok = true, match = true;
	int fl;

	for (i = 0; i < NCLIENTS; i++) {
		c[i] = spawn_client("pk", i + 1);
		all_ok &= c[i].lease_id != 0;
	}
	CHECK(all_ok, "%d clients hold 1..%d blocks", NCLIENTS, NCLIENTS);
	CHECK(kvt_sysfs_num("pk", NULL, "used") == NCLIENTS * (NCLIENTS + 1) / 2,
	      "used = sum of the leases");
	for (i = 0; i < NCLIENTS; i++) {
		c[i].killed = i % 3 != 0;	/* kill 5 of 8 */
		if (c[i].killed) {
			kill(c[i].pid, SIGKILL);
			kvt_wait(c[i].pid);
		} else {
			survivors += c[i].blocks;
		}
	}
	CHECK(kvt_sysfs_num("pk", NULL, "used") == survivors,
	      "used back to what the survivors hold (%u)", survivors);
	CHECK(kvt_sysfs_num("pk", "uid-0", "blocks.current") == survivors,
	      "tenant current = survivors");

	/* One CLIENT_CLOSED per dead client, with its lease and blocks. */
	fl = fcntl(owner, F_GETFL);
	fcntl(owner, F_SETFL, fl | O_NONBLOCK);
	while (kvt_read_event(owner, &ev) == 1) {
		if (ev.type != KVPOOL_EVENT_CLIENT_CLOSED)
			continue;
		got++;
		for (i = 0; i < NCLIENTS; i++)
			if (c[i].lease_id == ev.lease_id)
				break;
		if (i == NCLIENTS || !c[i].killed || c[i].blocks != ev.blocks) {
			match = false;
			printf("# unexpected close event: lease %llu blocks %u\n",
			       (unsigned long long)ev.lease_id, ev.blocks);
		}
		if (i < NCLIENTS)
			c[i].lease_id = 0;	/* a second event would not match */
	}
	CHECK(got == 5, "the owner read 5 CLIENT_CLOSED events (got %u)", got);
	CHECK(match, "each names a killed client's lease and its block count");

	for (i = 0; i < NCLIENTS; i++) {
		if (!c[i].killed) {
			kill(c[i].pid, SIGKILL);
			kvt_wait(c[i].pid);
		}
	}
	CHECK(kvt_sysfs_num("pk", NULL, "used") == 0, "used 0 after every client died");
	fcntl(owner, F_SETFL, fl);
	close(owner);
}

static void test_owner_crash(void)
{
	struct kvpool_lease_info li[4];
	struct kvpool_block_owner bo[16];
	struct kvpool_snapshot s;
	struct kvpool_status st1, st2;
	struct kvpool_event ev;
	uint32_t b1[8], b2[8], x[4];
	int p[2], c1, c2, c3, owner, total;
	uint64_t epoch = 0;
	pid_t opid;
	char ok;

	/* The owner is a child process that we kill -9. */
	if (pipe(p))
		kvt_die("pipe");
	fflush(stdout);
	opid = fork();
	if (!opid) {
		int fd = kvt_setup_pool("po", 32, 8, 16, KVPOOL_UNLIMITED);

		(void)fd;
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	CHECK(read(p[0], &ok, 1) == 1, "owner process created pool po");
	c1 = kvt_open_or_die();
	c2 = kvt_open_or_die();
	c3 = kvt_open_or_die();
	CHECK_RET(kvt_attach(c1, "po", ""), 0, "c1 attach");
	CHECK_RET(kvt_attach(c2, "po", ""), 0, "c2 attach");
	CHECK_RET(kvt_attach(c3, "po", ""), 0, "c3 attach");
	CHECK_RET(kvt_lease(c1, 5, 0, 0, b1), 5, "c1 leases 5");
	CHECK_RET(kvt_lease(c2, 3, 0, 0, b2), 3, "c2 leases 3");
	CHECK_RET(kvt_lease(c3, 2, 0, 0, x), 2, "c3 leases 2");

	kill(opid, SIGKILL);
	CHECK(kvt_wait(opid) == 128 + SIGKILL, "owner killed with SIGKILL");
	CHECK_RET(kvt_status(c1, &st1), 0, "client STATUS");
	CHECK(st1.state == KVPOOL_STATE_ORPHANED && st1.held == 5,
	      "pool orphaned, c1 still holds 5 (state %u held %u)", st1.state, st1.held);
	CHECK(kvt_sysfs_num("po", NULL, "used") == 10, "used 10 while orphaned");
	CHECK_RET(kvt_release(c1, b1 + 3, 2), 2, "c1 releases 2 while orphaned");
	close(c3);	/* closed while orphaned: no event for the next owner */
	CHECK(kvt_sysfs_num("po", NULL, "used") == 6, "used 6");

	owner = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(owner, "po", &epoch), 0, "new owner attaches");
	CHECK(epoch == 2, "epoch 2 (got %llu)", (unsigned long long)epoch);
	CHECK_RET(kvt_status(c1, &st1), 0, "STATUS");
	CHECK(st1.state == KVPOOL_STATE_LIVE && st1.epoch == 2, "clients see LIVE, epoch 2");
	kvt_status(c2, &st2);

	memset(&s, 0, sizeof(s));
	s.leases_ptr = (uintptr_t)li;
	s.blocks_ptr = (uintptr_t)bo;
	s.leases_cap = 4;
	s.blocks_cap = 16;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), 0, "SNAPSHOT");
	CHECK(s.leases == 2 && s.blocks == 6 && s.backed == 16 && s.epoch == 2,
	      "snapshot: 2 leases, 6 blocks, backed 16");
	CHECK(li[0].lease_id == st1.lease_id && li[0].blocks == 3 &&
	      li[1].lease_id == st2.lease_id && li[1].blocks == 3,
	      "snapshot leases: c1 3 blocks, c2 3 blocks");
	CHECK(bo[0].block == 0 && bo[0].lease_id == st1.lease_id &&
	      bo[3].block == 5 && bo[3].lease_id == st2.lease_id &&
	      bo[5].block == 7, "snapshot blocks: 0-2 c1, 5-7 c2");
	CHECK(kvt_count_events(owner, KVPOOL_EVENT_CLIENT_CLOSED, &total) == 0,
	      "the new owner reads no close event from before it attached");

	CHECK_RET(kvt_lease(c2, 4, 0, 0, x), 4, "clients keep leasing");
	CHECK(x[0] == 3 && x[1] == 4 && x[2] == 8, "lowest free first (3, 4, 8...)");
	close(c2);
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) &&
	      ev.lease_id == st2.lease_id && ev.blocks == 7,
	      "new owner reads c2's close (7 blocks)");
	close(c1);
	CHECK(kvt_sysfs_num("po", NULL, "used") == 0, "used 0");
	close(owner);
}

/*
 * An owner that does not read while many client files close: the kernel
 * keeps at most KVPOOL_CLOSED_QUEUE_MAX CLIENT_CLOSED records and merges
 * the rest into one CLOSED_MANY record (files and blocks counted), so any
 * user opening and closing /dev/kvpool cannot grow kernel memory without
 * bound, and the owner still learns of every close.
 */
#define EXTRA_CLOSES	300

static void test_closed_queue_bound(void)
{
	int owner = kvt_setup_pool("pb", 16, 16, 16, KVPOOL_UNLIMITED);
	int n = KVPOOL_CLOSED_QUEUE_MAX + EXTRA_CLOSES, closed = 0, many = 0;
	long long blocks = 0;
	struct kvpool_features f;
	struct kvpool_event ev;
	int fl, st;
	pid_t pid;

	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_CLOSED_MANY;
	CHECK(!kvt_ioctl(owner, KVPOOL_IOC_FEATURES, &f) &&
	      (f.enabled & KVPOOL_FEAT_CLOSED_MANY), "FEATURES has CLOSED_MANY");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		uint32_t b;
		int i;

		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		for (i = 0; i < n; i++) {
			int fd = kvt_open();

			if (fd < 0 || kvt_attach(fd, "pb", "") ||
			    kvt_lease(fd, 1, 0, 0, &b) != 1)
				_exit(3);
			close(fd);
		}
		_exit(0);
	}
	st = kvt_wait(pid);
	CHECK(st == 0, "uid 1000 bound, leased 1 block and closed %d files (exit %d)", n, st);
	fl = fcntl(owner, F_GETFL);
	fcntl(owner, F_SETFL, fl | O_NONBLOCK);
	while (kvt_read_event(owner, &ev) == 1) {
		if (ev.type == KVPOOL_EVENT_CLIENT_CLOSED) {
			closed++;
			blocks += ev.blocks;
		} else if (ev.type == KVPOOL_EVENT_CLOSED_MANY) {
			many++;
			blocks += ev.blocks;
			CHECK(ev.arg == EXTRA_CLOSES && ev.lease_id == 0,
			      "CLOSED_MANY counts the %d merged closes (arg %u)",
			      EXTRA_CLOSES, ev.arg);
		}
	}
	CHECK(closed == KVPOOL_CLOSED_QUEUE_MAX,
	      "%d CLIENT_CLOSED records kept (the bound is %d)", closed,
	      KVPOOL_CLOSED_QUEUE_MAX);
	CHECK(many == 1, "one CLOSED_MANY record for the rest (%d)", many);
	CHECK(blocks == n, "every returned block counted (%lld of %d)", blocks, n);
	/* Once read, the queue takes individual records again. */
	{
		int fd = kvt_open_or_die();
		uint32_t b;

		kvt_attach(fd, "pb", "");
		kvt_lease(fd, 1, 0, 0, &b);
		close(fd);
		CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) && ev.blocks == 1,
		      "after reading, a close gives its own record again");
	}
	CHECK(kvt_sysfs_num("pb", NULL, "used") == 0, "used 0");
	close(owner);
}

int main(void)
{
	kvt_init("crash");
	test_kill_clients();
	test_owner_crash();
	test_closed_queue_bound();
	return kvt_done();
}
