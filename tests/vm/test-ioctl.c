// SPDX-License-Identifier: MIT
/*
 * Owner-side ioctls and the dispatcher: FEATURES, POOL_CREATE, POOL_ATTACH,
 * POOL_GROW, POOL_SHRINK, SNAPSHOT, LEASE_CHECK, owner read(); every success
 * path and every error path, each otherwise valid, including unprivileged
 * callers.
 */
#include "kvt.h"

/* Run @fn as the unprivileged user in a child; its return is the result. */
static int as_user(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	if (pid < 0)
		kvt_die("fork");
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(200);
		_exit(-fn(arg));	/* errno as exit code */
	}
	return -kvt_wait(pid);
}

static int user_create(void *arg)
{
	int fd = kvt_open();

	if (fd < 0)
		return fd;
	return kvt_pool_create(fd, "upool", 4096, 16, 4, KVPOOL_UNLIMITED);
}

static int user_attach(void *arg)
{
	int fd = kvt_open();

	if (fd < 0)
		return fd;
	return kvt_pool_attach(fd, arg, NULL);
}

static void test_dispatcher(int fd)
{
	struct kvpool_features f;
	struct { struct kvpool_features f; uint64_t extra; } big;
	unsigned long cmd;

	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEATURES_ALL | (1ULL << 63);
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_FEATURES, &f), 0, "FEATURES");
	CHECK(f.supported == KVPOOL_FEATURES_ALL, "FEATURES supported 0x%llx",
	      (unsigned long long)f.supported);
	CHECK(f.enabled == KVPOOL_FEATURES_ALL, "FEATURES enabled = requested & supported");

	memset(&f, 0, sizeof(f));
	f.reserved[2] = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_FEATURES, &f), -EINVAL, "FEATURES reserved");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_FEATURES, (void *)8), -EFAULT,
		  "FEATURES bad pointer");

	cmd = _IOWR(KVPOOL_IOC_MAGIC, 0x3f, struct kvpool_features);
	CHECK_RET(kvt_ioctl(fd, cmd, &f), -ENOTTY, "unknown command number");
	cmd = _IOWR('x', 0x00, struct kvpool_features);
	CHECK_RET(kvt_ioctl(fd, cmd, &f), -ENOTTY, "wrong magic");
	cmd = _IOR(KVPOOL_IOC_MAGIC, 0x00, struct kvpool_features);
	CHECK_RET(kvt_ioctl(fd, cmd, &f), -ENOTTY, "wrong direction");

	/* A newer, larger struct: fine if the tail is zero, else -E2BIG. */
	memset(&big, 0, sizeof(big));
	cmd = _IOWR(KVPOOL_IOC_MAGIC, 0x00, big);
	CHECK_RET(kvt_ioctl(fd, cmd, &big), 0, "FEATURES larger struct, zero tail");
	CHECK(big.f.supported == KVPOOL_FEATURES_ALL && big.extra == 0,
	      "larger struct: known part answered, tail untouched");
	big.extra = 5;
	CHECK_RET(kvt_ioctl(fd, cmd, &big), -E2BIG, "FEATURES larger struct, non-zero tail");
	/* An older, shorter struct: the rest reads as zero. */
	cmd = _IOWR(KVPOOL_IOC_MAGIC, 0x00, uint64_t[3]);
	CHECK_RET(kvt_ioctl(fd, cmd, &big), 0, "FEATURES shorter struct");
}

static void test_create(void)
{
	struct kvpool_pool_create a;
	struct kvpool_status st;
	int fd = kvt_open_or_die(), fd2 = kvt_open_or_die();

	CHECK_RET(kvt_status(fd, &st), -ENOENT, "STATUS with no pool");
	CHECK_RET(kvt_lease(fd2, 1, 0, 0, (uint32_t[1]){0}), -ENOENT, "LEASE with no pool");
	close(fd2);
	fd2 = kvt_open_or_die();

	CHECK_RET(as_user(user_create, NULL), -EPERM, "POOL_CREATE unprivileged");

#define BAD_CREATE(field, val, desc) do {				\
	memset(&a, 0, sizeof(a));					\
	strcpy(a.name, "p0");						\
	a.block_bytes = 4096; a.capacity = 64; a.chunk_blocks = 16;	\
	a.default_max = KVPOOL_UNLIMITED;				\
	a.field = val;							\
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_CREATE, &a), -EINVAL, desc); \
} while (0)
	BAD_CREATE(flags, 1, "POOL_CREATE flags");
	BAD_CREATE(reserved[3], 1, "POOL_CREATE reserved");
	BAD_CREATE(name[0], 0, "POOL_CREATE empty name");
	BAD_CREATE(name[0], '-', "POOL_CREATE name starting with '-'");
	BAD_CREATE(name[1], '/', "POOL_CREATE name with '/'");
	BAD_CREATE(block_bytes, 1000, "POOL_CREATE block_bytes not a multiple of 256");
	BAD_CREATE(block_bytes, 0, "POOL_CREATE block_bytes 0");
	BAD_CREATE(block_bytes, (1ULL << 30) + 256, "POOL_CREATE block_bytes above 1 GiB");
	BAD_CREATE(capacity, 0, "POOL_CREATE capacity 0");
	BAD_CREATE(capacity, KVPOOL_MAX_CAPACITY + 1, "POOL_CREATE capacity too large");
	BAD_CREATE(chunk_blocks, 0, "POOL_CREATE chunk 0");
	BAD_CREATE(chunk_blocks, 65, "POOL_CREATE chunk above capacity");
	memset(&a, 0, sizeof(a));
	memset(a.name, 'a', sizeof(a.name));
	a.block_bytes = 4096; a.capacity = 64; a.chunk_blocks = 16;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_CREATE, &a), -EINVAL,
		  "POOL_CREATE name without NUL");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_CREATE, (void *)8), -EFAULT,
		  "POOL_CREATE bad pointer");

	memset(&a, 0, sizeof(a));
	strcpy(a.name, "p0");
	a.block_bytes = 4096; a.capacity = 64; a.chunk_blocks = 16;
	a.default_max = KVPOOL_UNLIMITED;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_CREATE, &a), 0, "POOL_CREATE");
	CHECK(a.epoch == 1, "new pool epoch 1 (got %llu)", (unsigned long long)a.epoch);
	CHECK(kvt_sysfs_num("p0", NULL, "capacity") == 64, "sysfs capacity");
	CHECK(kvt_sysfs_num("p0", NULL, "block_bytes") == 4096, "sysfs block_bytes");
	CHECK(kvt_sysfs_num("p0", NULL, "backed") == 0, "sysfs backed 0");
	CHECK(kvt_sysfs_num("p0", NULL, "used") == 0, "sysfs used 0");
	CHECK_RET(kvt_pool_create(fd2, "p0", 4096, 8, 8, 0), -EEXIST,
		  "POOL_CREATE duplicate name");
	CHECK_RET(kvt_pool_create(fd, "p1", 4096, 8, 8, 0), -EBUSY,
		  "POOL_CREATE on a file that owns a pool");
	CHECK_RET(kvt_status(fd, &st), 0, "owner STATUS");
	CHECK(!strcmp(st.pool, "p0") && st.state == KVPOOL_STATE_LIVE &&
	      st.capacity == 64 && st.lease_id == 0 && st.epoch == 1,
	      "owner STATUS fields");

	/* A client-bound file cannot create or attach. */
	CHECK_RET(kvt_attach(fd2, "p0", ""), 0, "client TENANT_ATTACH");
	CHECK_RET(kvt_pool_create(fd2, "p1", 4096, 8, 8, 0), -EBUSY,
		  "POOL_CREATE on a client file");
	CHECK_RET(kvt_pool_attach(fd2, "p0", NULL), -EBUSY,
		  "POOL_ATTACH on a client file");
	close(fd2);
	close(fd);
}

static void test_attach(void)
{
	struct kvpool_pool_attach a;
	uint64_t epoch = 0;
	int owner, fd;

	owner = kvt_setup_pool("pa", 32, 8, 8, KVPOOL_UNLIMITED);
	fd = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(fd, "pa", NULL), -EBUSY, "POOL_ATTACH to an owned pool");
	CHECK_RET(kvt_pool_attach(fd, "nopool", NULL), -ENOENT, "POOL_ATTACH unknown pool");
	CHECK_RET(kvt_pool_attach(fd, "", NULL), -EINVAL, "POOL_ATTACH empty name");
	memset(&a, 0, sizeof(a));
	strcpy(a.name, "pa");
	a.flags = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_ATTACH, &a), -EINVAL, "POOL_ATTACH flags");
	a.flags = 0;
	a.pad = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_ATTACH, &a), -EINVAL, "POOL_ATTACH pad");
	a.pad = 0;
	a.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_POOL_ATTACH, &a), -EINVAL, "POOL_ATTACH reserved");

	close(owner);
	CHECK_RET(as_user(user_attach, "pa"), -EPERM, "POOL_ATTACH unprivileged");
	CHECK_RET(kvt_pool_attach(fd, "pa", &epoch), 0, "POOL_ATTACH orphaned pool");
	CHECK(epoch == 2, "epoch 2 after re-attach (got %llu)", (unsigned long long)epoch);
	CHECK_RET(kvt_pool_attach(fd, "pa", NULL), -EBUSY, "POOL_ATTACH twice");
	CHECK(kvt_sysfs_num("pa", NULL, "backed") == 8, "backed kept across owners");
	close(fd);
}

static void test_resize(void)
{
	struct kvpool_pool_resize r;
	uint32_t b[16];
	int owner, cl;

	owner = kvt_setup_pool("pr", 30, 8, 0, KVPOOL_UNLIMITED);
	cl = kvt_open_or_die();
	CHECK_RET(kvt_attach(cl, "pr", ""), 0, "client attach");
	CHECK_RET(kvt_grow(cl, 8, 0), -EPERM, "POOL_GROW from a client");
	CHECK_RET(kvt_shrink(cl, 0), -EPERM, "POOL_SHRINK from a client");

	CHECK_RET(kvt_grow(owner, 4, 0), -EINVAL, "POOL_GROW not a chunk multiple");
	CHECK_RET(kvt_grow(owner, 32, 0), -EINVAL, "POOL_GROW above capacity");
	CHECK_RET(kvt_grow(owner, 8, 2), -EINVAL, "POOL_GROW unknown flag");
	CHECK_RET(kvt_grow(owner, 8, KVPOOL_GROW_FAILED), -EINVAL,
		  "POOL_GROW FAILED with backed");
	memset(&r, 0, sizeof(r));
	r.backed = 8;
	r.pad = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_GROW, &r), -EINVAL, "POOL_GROW pad");
	r.pad = 0;
	r.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_GROW, &r), -EINVAL, "POOL_GROW reserved");
	r.reserved[1] = 0;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_GROW, &r), 0, "POOL_GROW to 8");
	CHECK(r.used == 0, "POOL_GROW used out");
	CHECK_RET(kvt_grow(owner, 8, 0), -EINVAL, "POOL_GROW not above backed");
	CHECK_RET(kvt_grow(owner, 30, 0), 0, "POOL_GROW to capacity (not a chunk multiple)");
	CHECK(kvt_sysfs_num("pr", NULL, "backed") == 30, "sysfs backed 30");
	CHECK_RET(kvt_grow(owner, 0, KVPOOL_GROW_FAILED), 0, "POOL_GROW FAILED");

	CHECK_RET(kvt_lease(cl, 10, 0, 0, b), 10, "lease 10 blocks");
	memset(&r, 0, sizeof(r));
	r.backed = 8;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_SHRINK, &r), -EBUSY,
		  "POOL_SHRINK below a leased block");
	r.backed = 16;
	r.flags = KVPOOL_GROW_FAILED;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_SHRINK, &r), -EINVAL, "POOL_SHRINK flags");
	r.flags = 0;
	r.pad = 3;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_SHRINK, &r), -EINVAL, "POOL_SHRINK pad");
	r.pad = 0;
	CHECK_RET(kvt_shrink(owner, 30), -EINVAL, "POOL_SHRINK not below backed");
	CHECK_RET(kvt_shrink(owner, 12), -EINVAL, "POOL_SHRINK not a chunk multiple");
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_POOL_SHRINK, &r), 0, "POOL_SHRINK to 16");
	CHECK(r.used == 10, "POOL_SHRINK used out (got %u)", r.used);
	CHECK(kvt_sysfs_num("pr", NULL, "backed") == 16, "sysfs backed 16");
	CHECK_RET(kvt_release_all(cl), 10, "release all");
	CHECK_RET(kvt_shrink(owner, 0), 0, "POOL_SHRINK to 0 once idle");
	close(cl);
	close(owner);
}

static void test_snapshot_check(void)
{
	struct kvpool_lease_info li[4];
	struct kvpool_block_owner bo[16];
	struct kvpool_snapshot s;
	struct kvpool_lease_check lc;
	struct kvpool_status st1, st2;
	uint32_t b1[3], b2[2], q[3];
	int owner, c1, c2;

	owner = kvt_setup_pool("ps", 32, 8, 16, KVPOOL_UNLIMITED);
	c1 = kvt_open_or_die();
	c2 = kvt_open_or_die();
	CHECK_RET(kvt_attach(c1, "ps", ""), 0, "c1 attach");
	CHECK_RET(kvt_attach(c2, "ps", ""), 0, "c2 attach");
	CHECK_RET(kvt_lease(c1, 3, 0, 0, b1), 3, "c1 lease 3");
	CHECK_RET(kvt_lease(c2, 2, 0, 0, b2), 2, "c2 lease 2");
	CHECK(b1[0] == 0 && b1[1] == 1 && b1[2] == 2 && b2[0] == 3 && b2[1] == 4,
	      "lowest free index first");
	kvt_status(c1, &st1);
	kvt_status(c2, &st2);

	memset(&s, 0, sizeof(s));
	CHECK_RET(kvt_ioctl(c1, KVPOOL_IOC_SNAPSHOT, &s), -EPERM, "SNAPSHOT from a client");
	s.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), -EINVAL, "SNAPSHOT flags");
	s.flags = 0;
	s.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), -EINVAL, "SNAPSHOT reserved");
	s.reserved[0] = 0;
	s.leases_cap = 4;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), -EINVAL,
		  "SNAPSHOT capacity without pointer");
	memset(&s, 0, sizeof(s));
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), 0, "SNAPSHOT sizes");
	CHECK(s.leases == 2 && s.blocks == 5 && s.backed == 16 && s.epoch == 1,
	      "SNAPSHOT counts (leases %u blocks %u backed %u)", s.leases, s.blocks,
	      s.backed);
	s.leases_ptr = (uintptr_t)li;
	s.blocks_ptr = (uintptr_t)bo;
	s.leases_cap = 1;
	s.blocks_cap = 16;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), -ENOSPC, "SNAPSHOT buffer too small");
	CHECK(s.leases == 2 && s.blocks == 5, "SNAPSHOT -ENOSPC still returns counts");
	s.leases_cap = 4;
	s.blocks_ptr = 8;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), -EFAULT, "SNAPSHOT bad pointer");
	s.blocks_ptr = (uintptr_t)bo;
	memset(li, 0, sizeof(li));
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), 0, "SNAPSHOT");
	CHECK(li[0].lease_id == st1.lease_id && li[0].blocks == 3 &&
	      li[1].lease_id == st2.lease_id && li[1].blocks == 2 &&
	      li[0].uid == 0 && li[0].pid == (uint32_t)getpid() &&
	      !strcmp(li[0].tenant, "uid-0"), "SNAPSHOT leases");
	CHECK(bo[0].block == 0 && bo[0].lease_id == st1.lease_id &&
	      bo[2].block == 2 && bo[3].block == 3 &&
	      bo[3].lease_id == st2.lease_id && bo[4].block == 4,
	      "SNAPSHOT blocks in index order with their leases");

	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)b1;
	lc.lease_id = st1.lease_id;
	lc.count = 3;
	CHECK_RET(kvt_ioctl(c1, KVPOOL_IOC_LEASE_CHECK, &lc), -EPERM, "LEASE_CHECK from a client");
	lc.tenant_serial = 12345;	/* an output: ignored on input */
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), 0, "LEASE_CHECK");
	CHECK(lc.tenant_serial && lc.tenant_serial == st1.tenant_serial,
	      "LEASE_CHECK: the serial of the lease's tenant (%llu, STATUS "
	      "%llu)", (unsigned long long)lc.tenant_serial,
	      (unsigned long long)st1.tenant_serial);
	q[0] = 2; q[1] = 1; q[2] = 3;
	lc.blocks_ptr = (uintptr_t)q;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EPERM,
		  "LEASE_CHECK another lease's block");
	CHECK(lc.bad_index == 2, "LEASE_CHECK bad_index (got %u)", lc.bad_index);
	CHECK(lc.tenant_serial == 0, "no serial when the check fails");
	q[2] = 31;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EPERM,
		  "LEASE_CHECK a free block");
	lc.lease_id = 999;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -ENOENT, "LEASE_CHECK unknown lease");
	lc.lease_id = st1.lease_id;
	lc.blocks_ptr = 8;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EFAULT, "LEASE_CHECK bad pointer");
	lc.blocks_ptr = (uintptr_t)b1;
	lc.count = 0;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EINVAL, "LEASE_CHECK count 0");
	lc.count = KVPOOL_IO_MAX_BLOCKS + 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EINVAL,
		  "LEASE_CHECK count above KVPOOL_IO_MAX_BLOCKS");
	lc.count = 3;
	lc.flags = 1U << 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EINVAL, "LEASE_CHECK flags");
	lc.flags = 0;
	lc.pad = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EINVAL, "LEASE_CHECK pad");
	lc.pad = 0;
	lc.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EINVAL, "LEASE_CHECK reserved");
	close(c1);
	close(c2);
	close(owner);
}

static int pin_check(int owner, uint64_t lease_id, const uint32_t *b,
		     uint32_t n)
{
	struct kvpool_lease_check lc;

	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)b;
	lc.lease_id = lease_id;
	lc.count = n;
	lc.flags = KVPOOL_LEASE_CHECK_PIN;
	return kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc);
}

static int unpin(int fd, uint64_t lease_id)
{
	struct kvpool_lease_unpin u;

	memset(&u, 0, sizeof(u));
	u.lease_id = lease_id;
	return kvt_ioctl(fd, KVPOOL_IOC_LEASE_UNPIN, &u);
}

/* LEASE_CHECK with PIN and LEASE_UNPIN: pinned blocks never change hands. */
static void test_pin(void)
{
	struct kvpool_lease_unpin u;
	struct kvpool_status st;
	struct kvpool_event ev;
	uint32_t b[3], other = 9;
	int owner, c1, c2, wst;
	pid_t pid;

	owner = kvt_setup_pool("pp", 16, 4, 8, KVPOOL_UNLIMITED);
	c1 = kvt_open_or_die();
	CHECK_RET(kvt_attach(c1, "pp", ""), 0, "attach");
	CHECK_RET(kvt_lease(c1, 3, 0, 0, b), 3, "lease 3");
	kvt_status(c1, &st);

	/* Error paths, each otherwise valid. */
	CHECK_RET(unpin(owner, st.lease_id), -EINVAL, "UNPIN of an unpinned lease");
	CHECK_RET(unpin(owner, 999), -ENOENT, "UNPIN unknown lease");
	CHECK_RET(unpin(c1, st.lease_id), -EPERM, "UNPIN from a client");
	memset(&u, 0, sizeof(u));
	u.lease_id = st.lease_id;
	u.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_UNPIN, &u), -EINVAL, "UNPIN flags");
	u.flags = 0;
	u.pad = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_UNPIN, &u), -EINVAL, "UNPIN pad");
	u.pad = 0;
	u.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_UNPIN, &u), -EINVAL, "UNPIN reserved");
	CHECK_RET(pin_check(owner, st.lease_id, &other, 1), -EPERM,
		  "PIN of a block not held fails and pins nothing");
	CHECK_RET(unpin(owner, st.lease_id), -EINVAL, "still not pinned");

	/* A release waits for the unpin. */
	CHECK_RET(pin_check(owner, st.lease_id, b, 3), 0, "LEASE_CHECK with PIN");
	fflush(stdout);
	pid = fork();
	if (!pid)
		_exit(kvt_release(c1, b, 1) == 1 ? 0 : 1);
	usleep(300 * 1000);
	CHECK(waitpid(pid, &wst, WNOHANG) == 0, "RELEASE waits while pinned");
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 3, "pinned blocks stay leased");
	CHECK_RET(unpin(owner, st.lease_id), 0, "UNPIN");
	CHECK(kvt_wait(pid) == 0, "the waiting RELEASE completes after UNPIN");
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 2, "released after UNPIN");

	/* A file closed while pinned keeps its blocks until the unpin. */
	kvt_count_events(owner, 0, NULL);
	CHECK_RET(pin_check(owner, st.lease_id, &b[1], 2), 0, "PIN again");
	close(c1);
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 2, "closed while pinned: blocks kept");
	CHECK(!kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev),
	      "no CLIENT_CLOSED before the unpin");
	CHECK_RET(pin_check(owner, st.lease_id, &b[1], 1), -ENOENT,
		  "a closed lease cannot be pinned again");
	c2 = kvt_open_or_die();
	CHECK_RET(kvt_attach(c2, "pp", ""), 0, "c2 attach");
	CHECK_RET(kvt_lease(c2, 1, 0, 0, &other), 1, "c2 lease");
	CHECK(other == 0, "c2 gets the free block 0, not a pinned one (got %u)", other);
	CHECK_RET(unpin(owner, st.lease_id), 0, "last UNPIN");
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 1, "blocks back after the last unpin");
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) &&
	      ev.lease_id == st.lease_id && ev.blocks == 2,
	      "CLIENT_CLOSED after the last unpin");
	CHECK_RET(unpin(owner, st.lease_id), -ENOENT, "the lease is gone");

	/* The owner going away drops its pins. */
	kvt_status(c2, &st);
	CHECK_RET(pin_check(owner, st.lease_id, &other, 1), 0, "PIN c2");
	close(c2);
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 1, "c2 closed while pinned");
	close(owner);
	CHECK(kvt_sysfs_num("pp", NULL, "used") == 0,
	      "owner gone: pins dropped, blocks back");
}

static void test_owner_read(void)
{
	struct kvpool_event ev[4];
	struct pollfd p;
	char small[8];
	int owner, cl, fl;
	ssize_t n;

	owner = kvt_setup_pool("pe", 16, 4, 4, KVPOOL_UNLIMITED);
	cl = kvt_open_or_die();
	CHECK(read(cl, ev, sizeof(ev)) < 0 && errno == EINVAL, "read() on an unbound file");
	CHECK_RET(kvt_attach(cl, "pe", ""), 0, "client attach");
	CHECK(read(cl, ev, sizeof(ev)) < 0 && errno == EINVAL, "read() on a client file");
	CHECK(read(owner, small, sizeof(small)) < 0 && errno == EINVAL,
	      "read() with a buffer smaller than one event");
	fl = fcntl(owner, F_GETFL);
	fcntl(owner, F_SETFL, fl | O_NONBLOCK);
	CHECK(read(owner, ev, sizeof(ev)) < 0 && errno == EAGAIN,
	      "O_NONBLOCK read() with no event");
	p.fd = owner;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 0) == 0, "owner poll: nothing to read");
	close(cl);
	CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLIN), "owner poll: POLLIN after a close");
	n = read(owner, ev, sizeof(ev));
	CHECK(n == sizeof(ev[0]) && ev[0].type == KVPOOL_EVENT_CLIENT_CLOSED &&
	      ev[0].seq > 0 && !strcmp(ev[0].tenant, "uid-0"),
	      "read() returns whole records: one CLIENT_CLOSED (n=%zd)", n);

	/* Several records in one read(), oldest first; a partial buffer
	 * gets whole records only. */
	{
		int c[3], i;

		for (i = 0; i < 3; i++) {
			c[i] = kvt_open_or_die();
			kvt_attach(c[i], "pe", "");
		}
		for (i = 0; i < 3; i++)
			close(c[i]);
		n = read(owner, ev, sizeof(ev[0]) * 2 + 10);
		CHECK(n == 2 * sizeof(ev[0]) && ev[0].seq < ev[1].seq,
		      "read() with room for 2.x records returns 2, in order (n=%zd)", n);
		n = read(owner, ev, sizeof(ev));
		CHECK(n == sizeof(ev[0]) && ev[0].type == KVPOOL_EVENT_CLIENT_CLOSED,
		      "then the third (n=%zd)", n);
	}
	close(owner);
}

int main(void)
{
	int fd;

	kvt_init("ioctl");
	fd = kvt_open_or_die();
	test_dispatcher(fd);
	close(fd);
	test_create();
	test_attach();
	test_resize();
	test_snapshot_check();
	test_pin();
	test_owner_read();
	return kvt_done();
}
