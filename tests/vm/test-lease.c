// SPDX-License-Identifier: MIT
/*
 * Client-side ioctls: TENANT_ATTACH, LEASE, RELEASE, STATUS (tenant
 * serials, the owner's STATUS of a lease); every success path and every
 * error path, each otherwise valid, as root and as unprivileged users
 * (tenant permissions by uid and by gid).
 */
#include <sys/mman.h>

#include "kvt.h"

static void test_attach(int owner)
{
	struct kvpool_tenant_attach a;
	struct kvpool_status st;
	uint32_t b[4];
	int fd = kvt_open_or_die();

	CHECK_RET(kvt_attach(owner, "pl", ""), -EBUSY, "TENANT_ATTACH on the owner's file");
	memset(&a, 0, sizeof(a));
	strcpy(a.pool, "pl");
	a.flags = ~KVPOOL_ATTACH_FLAGS;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a), -EINVAL,
		  "TENANT_ATTACH unknown flags");
	a.flags = 0;
	a.pad = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a), -EINVAL, "TENANT_ATTACH pad");
	a.pad = 0;
	a.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a), -EINVAL, "TENANT_ATTACH reserved");
	a.reserved[1] = 0;
	memset(a.tenant, 'x', sizeof(a.tenant));
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a), -EINVAL,
		  "TENANT_ATTACH tenant name without NUL");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, (void *)8), -EFAULT,
		  "TENANT_ATTACH bad pointer");
	CHECK_RET(kvt_attach(fd, "nopool", ""), -ENOENT, "TENANT_ATTACH unknown pool");
	CHECK_RET(kvt_status(fd, &st), 0, "STATUS of an unbound file");
	CHECK(!strcmp(st.pool, "pl") && st.lease_id == 0 && !st.tenant[0],
	      "unbound STATUS reports the first pool without binding");

	CHECK_RET(kvt_attach(fd, "pl", "nosuch"), -ENOENT, "TENANT_ATTACH unknown tenant");
	CHECK_RET(kvt_attach(fd, "pl", "bad/name"), -EINVAL, "TENANT_ATTACH invalid tenant name");
	memset(&a, 0, sizeof(a));
	strcpy(a.pool, "pl");
	strcpy(a.tenant, "ta");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a), 0,
		  "TENANT_ATTACH named tenant (root)");
	CHECK(a.lease_id > 0, "TENANT_ATTACH returns the lease id");
	CHECK_RET(kvt_status(fd, &st), 0, "client STATUS");
	CHECK(!strcmp(st.tenant, "ta") && st.lease_id == a.lease_id &&
	      st.tenant_max == 8 && st.tenant_min == 0 && st.held == 0 &&
	      st.state == KVPOOL_STATE_LIVE && st.capacity == 64 &&
	      st.block_bytes == 4096, "client STATUS fields");
	CHECK_RET(kvt_attach(fd, "", "ta"), 0, "TENANT_ATTACH with empty pool = first pool");
	CHECK_RET(kvt_attach(fd, "pl2", "ta"), -EBUSY, "TENANT_ATTACH to another pool");
	CHECK_RET(kvt_lease(fd, 2, 0, 0, b), 2, "lease in tenant ta");
	CHECK_RET(kvt_attach(fd, "pl", ""), -EBUSY, "re-attach while holding blocks");
	CHECK_RET(kvt_attach(fd, "pl", "ta"), 0, "re-attach to the same tenant while holding");
	CHECK_RET(kvt_release_all(fd), 2, "release all");
	CHECK_RET(kvt_attach(fd, "pl", ""), 0, "re-attach to per-uid tenant once empty");
	CHECK_RET(kvt_status(fd, &st), 0, "STATUS");
	CHECK(!strcmp(st.tenant, "uid-0"), "charged to uid-0 (got %s)", st.tenant);
	close(fd);
}

static void test_lease(int owner)
{
	struct kvpool_lease_req r;
	struct kvpool_status st;
	uint32_t b[80];
	int fd = kvt_open_or_die(), fd2;

	CHECK_RET(kvt_lease(owner, 1, 0, 0, b), -EPERM, "LEASE on the owner's file");
	memset(&r, 0, sizeof(r));
	r.blocks_ptr = (uintptr_t)b;
	r.count = 1;
	r.flags = 1U << 7;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EINVAL, "LEASE unknown flag");
	r.flags = 0;
	r.pad = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EINVAL, "LEASE pad");
	r.pad = 0;
	r.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EINVAL, "LEASE reserved");
	r.reserved[0] = 0;
	r.count = 0;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EINVAL, "LEASE count 0");
	r.count = KVPOOL_IO_MAX_BLOCKS + 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EINVAL,
		  "LEASE count above KVPOOL_IO_MAX_BLOCKS");
	r.count = 65;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -ENOSPC, "LEASE count above capacity");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, (void *)8), -EFAULT, "LEASE bad struct pointer");
	r.count = 4;
	r.blocks_ptr = 8;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), -EFAULT, "LEASE bad blocks pointer");
	CHECK_RET(kvt_status(fd, &st), 0, "STATUS");
	CHECK(st.held == 0 && st.used == 0, "nothing granted after -EFAULT (held %u used %u)",
	      st.held, st.used);

	/* The struct can be read but not written back: the grant is undone. */
	{
		struct kvpool_lease_req *ro = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
						   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		memset(ro, 0, sizeof(*ro));
		ro->blocks_ptr = (uintptr_t)b;
		ro->count = 4;
		mprotect(ro, 4096, PROT_READ);
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, ro), -EFAULT,
			  "LEASE with a read-only struct");
		CHECK_RET(kvt_status(fd, &st), 0, "STATUS");
		CHECK(st.held == 0 && st.used == 0, "the grant was taken back (held %u)", st.held);
		munmap(ro, 4096);
	}
	CHECK_RET(kvt_lease(fd, 4, 0, 0, b), 4, "LEASE 4");
	CHECK(b[0] == 0 && b[3] == 3, "LEASE lowest first");
	CHECK(kvt_sysfs_num("pl", NULL, "used") == 4, "sysfs used 4");
	CHECK(kvt_sysfs_num("pl", "uid-0", "blocks.current") == 4,
	      "automatic tenant uid-0 charged");
	/* Backed is 32: the rest needs a grow; NONBLOCK fails at once. */
	CHECK_RET(kvt_lease(fd, 40, KVPOOL_LEASE_NONBLOCK, 0, b + 4), -EAGAIN,
		  "LEASE NONBLOCK beyond backed");
	CHECK_RET(kvt_lease(fd, 40, KVPOOL_LEASE_PARTIAL, 0, b + 4), 28,
		  "LEASE PARTIAL grants what is backed");
	CHECK(b[4] == 4 && b[31] == 31, "PARTIAL blocks 4..31");
	CHECK_RET(kvt_lease(fd, 100, KVPOOL_LEASE_PARTIAL | KVPOOL_LEASE_NONBLOCK, 0, b),
		  -EAGAIN, "LEASE PARTIAL with nothing backed left");

	/* RELEASE */
	fd2 = kvt_open_or_die();
	CHECK_RET(kvt_release(fd2, b, 1), -EINVAL, "RELEASE from an unbound file");
	CHECK_RET(kvt_release_all(fd2), 0, "RELEASE_ALL from an unbound file");
	CHECK_RET(kvt_attach(fd2, "pl", ""), 0, "second client");
	CHECK_RET(kvt_release(fd2, b, 1), -EINVAL, "RELEASE another file's block");
	CHECK_RET(kvt_release(owner, b, 1), -EPERM, "RELEASE on the owner's file");
	{
		struct kvpool_release rel;
		uint32_t rep[2] = { 5, 5 }, mix[3] = { 6, 7, 40 };

		CHECK_RET(kvt_release(fd, rep, 2), -EINVAL, "RELEASE a repeated index");
		CHECK_RET(kvt_release(fd, mix, 3), -EINVAL, "RELEASE with one free block");
		CHECK(kvt_sysfs_num("pl", NULL, "used") == 32,
		      "refused RELEASE changed nothing");
		memset(&rel, 0, sizeof(rel));
		rel.blocks_ptr = (uintptr_t)b;
		rel.count = 0;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL, "RELEASE count 0");
		rel.count = KVPOOL_IO_MAX_BLOCKS + 1;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL,
			  "RELEASE count above KVPOOL_IO_MAX_BLOCKS");
		rel.count = 1;
		rel.flags = KVPOOL_RELEASE_ALL;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL,
			  "RELEASE_ALL with a count");
		rel.flags = 2;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL, "RELEASE unknown flag");
		rel.flags = 0;
		rel.pad = 1;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL, "RELEASE pad");
		rel.pad = 0;
		rel.reserved[1] = 1;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EINVAL, "RELEASE reserved");
		rel.reserved[1] = 0;
		rel.blocks_ptr = 8;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), -EFAULT, "RELEASE bad pointer");
		rel.blocks_ptr = (uintptr_t)b;
		rel.count = 2;
		CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &rel), 0, "RELEASE 2");
		CHECK(rel.released == 2, "RELEASE released out");
	}
	CHECK_RET(kvt_lease(fd, 1, 0, 0, b), 1, "LEASE reuses the lowest free block");
	CHECK(b[0] == 0, "block 0 again (got %u)", b[0]);
	CHECK_RET(kvt_release_all(fd), 31, "RELEASE_ALL");
	CHECK(kvt_sysfs_num("pl", NULL, "used") == 0, "used back to 0");

	/* STATUS errors. */
	memset(&st, 0, sizeof(st));
	st.flags = KVPOOL_STATUS_LEASE << 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_STATUS, &st), -EINVAL, "STATUS flags");
	st.flags = 0;
	st.pad = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_STATUS, &st), -EINVAL, "STATUS pad");
	st.pad = 0;
	st.reserved[2] = 1;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_STATUS, &st), -EINVAL, "STATUS reserved");
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_STATUS, (void *)8), -EFAULT, "STATUS bad pointer");
	close(fd2);
	close(fd);
}

static int status_of_lease(int fd, uint64_t id, struct kvpool_status *st)
{
	memset(st, 0, sizeof(*st));
	st->lease_id = id;
	st->flags = KVPOOL_STATUS_LEASE;
	return kvt_ioctl(fd, KVPOOL_IOC_STATUS, st);
}

/*
 * Tenant serials: STATUS reports the tenant's, unique in the pool's life
 * (a tenant deleted and created again under its name gets a new one);
 * the owner reads any lease of its pool with KVPOOL_STATUS_LEASE, as that
 * lease's own file would; every error path.
 */
static void test_serial(int owner)
{
	struct kvpool_status a, b, o, st;
	struct kvt_nl nl;
	uint64_t ser_ta, ser_t1;
	uint32_t blk[2];
	int fa = kvt_open_or_die(), fb = kvt_open_or_die();
	int fu = kvt_open_or_die();

	CHECK_RET(kvt_attach(fa, "pl", "ta"), 0, "a file in ta");
	CHECK_RET(kvt_attach(fb, "pl", "tu"), 0, "a file in tu");
	CHECK_RET(kvt_status(fa, &a), 0, "STATUS of the ta file");
	CHECK_RET(kvt_status(fb, &b), 0, "STATUS of the tu file");
	CHECK(a.tenant_serial && b.tenant_serial &&
	      a.tenant_serial != b.tenant_serial,
	      "two tenants, two serials (%llu, %llu)",
	      (unsigned long long)a.tenant_serial,
	      (unsigned long long)b.tenant_serial);
	CHECK_RET(kvt_status(owner, &o), 0, "STATUS of the owner");
	CHECK(o.tenant_serial == 0 && !o.tenant[0], "an owner has no tenant");
	CHECK_RET(kvt_status(fu, &st), 0, "STATUS of an unbound file");
	CHECK(st.tenant_serial == 0, "an unbound file has no tenant serial");
	ser_ta = a.tenant_serial;

	/* The owner's view of a lease is the lease's own. */
	CHECK_RET(kvt_lease(fa, 2, 0, 0, blk), 2, "ta leases 2");
	CHECK_RET(kvt_status(fa, &a), 0, "STATUS of the ta file");
	CHECK_RET(status_of_lease(owner, a.lease_id, &st), 0,
		  "STATUS with KVPOOL_STATUS_LEASE");
	CHECK(st.lease_id == a.lease_id && !strcmp(st.tenant, "ta") &&
	      st.tenant_serial == ser_ta && st.held == 2 &&
	      st.tenant_current == a.tenant_current && !strcmp(st.pool, "pl") &&
	      st.flags == 0, "the owner sees the lease as its file does");
	CHECK_RET(kvt_release_all(fa), 2, "ta gives them back");

	/* A re-attached file reports its new tenant, at once. */
	CHECK_RET(kvt_attach(fa, "pl", "tu"), 0, "the ta file moves to tu");
	CHECK_RET(status_of_lease(owner, a.lease_id, &st), 0,
		  "STATUS_LEASE after the move");
	CHECK(st.tenant_serial == b.tenant_serial && !strcmp(st.tenant, "tu"),
	      "the owner sees the new tenant (%s, %llu)", st.tenant,
	      (unsigned long long)st.tenant_serial);

	/* Errors, each call otherwise valid. */
	CHECK_RET(status_of_lease(fb, a.lease_id, &st), -EPERM,
		  "STATUS_LEASE from a client");
	CHECK_RET(status_of_lease(fu, a.lease_id, &st), -EPERM,
		  "STATUS_LEASE from an unbound file");
	CHECK_RET(status_of_lease(owner, 999999, &st), -ENOENT,
		  "STATUS_LEASE of no lease");
	CHECK_RET(status_of_lease(owner, 0, &st), -ENOENT,
		  "STATUS_LEASE of lease 0");
	memset(&st, 0, sizeof(st));
	st.flags = KVPOOL_STATUS_LEASE << 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_STATUS, &st), -EINVAL,
		  "STATUS with an unknown flag");
	st.flags = KVPOOL_STATUS_LEASE;
	st.lease_id = a.lease_id;
	st.tenant_serial = 7;		/* an output: ignored on input */
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_STATUS, &st), 0,
		  "STATUS_LEASE ignores the serial given");
	close(fb);
	CHECK_RET(status_of_lease(owner, b.lease_id, &st), -ENOENT,
		  "STATUS_LEASE of a closed file's lease");

	/* A tenant deleted and created again is another tenant. */
	close(fa);
	if (kvt_nl_open(&nl))
		kvt_die("netlink");
	kvt_tenant_new("pl", "t1", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE,
		       KVPOOL_ID_NONE);
	fa = kvt_open_or_die();
	CHECK_RET(kvt_attach(fa, "pl", "t1"), 0, "a file in t1");
	CHECK_RET(kvt_status(fa, &st), 0, "STATUS");
	ser_t1 = st.tenant_serial;
	close(fa);
	CHECK_RET(kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_DEL, "pl", "t1", KVT_KEEP,
				KVT_KEEP, KVT_KEEP, KVT_KEEP), 0, "delete t1");
	kvt_tenant_new("pl", "t1", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE,
		       KVPOOL_ID_NONE);
	fa = kvt_open_or_die();
	CHECK_RET(kvt_attach(fa, "pl", "t1"), 0, "a file in the new t1");
	CHECK_RET(kvt_status(fa, &st), 0, "STATUS");
	CHECK(st.tenant_serial > ser_t1 && ser_t1 > ser_ta,
	      "the new t1 has a new serial (%llu, was %llu)",
	      (unsigned long long)st.tenant_serial,
	      (unsigned long long)ser_t1);
	close(fa);
	CHECK_RET(kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_DEL, "pl", "t1", KVT_KEEP,
				KVT_KEEP, KVT_KEEP, KVT_KEEP), 0, "delete t1");
	kvt_nl_close(&nl);
	close(fu);
}

/* The unprivileged part runs in a child as uid 1000 / gid 1000. */
static void test_unprivileged(void)
{
	struct kvpool_status st;
	uint32_t b[8];
	int fd;

	fd = kvt_open();
	CHECK(fd >= 0, "unprivileged open of " KVT_DEV " (mode 0666)");
	CHECK_RET(kvt_pool_create(fd, "up", 4096, 8, 8, 0), -EPERM,
		  "unprivileged POOL_CREATE");
	CHECK_RET(kvt_pool_attach(fd, "pl", NULL), -EPERM, "unprivileged POOL_ATTACH");
	CHECK_RET(kvt_attach(fd, "pl", "ta"), -EACCES,
		  "unprivileged TENANT_ATTACH to a tenant of another uid");
	CHECK_RET(kvt_attach(fd, "pl", "tsg"), -EACCES,
		  "TENANT_ATTACH refused without the tenant's group");
	CHECK_RET(kvt_attach(fd, "pl", "tu"), 0, "TENANT_ATTACH allowed by uid");
	CHECK_RET(kvt_lease(fd, 3, 0, 0, b), 3, "unprivileged LEASE");
	CHECK_RET(kvt_status(fd, &st), 0, "unprivileged STATUS");
	CHECK(st.held == 3 && !strcmp(st.tenant, "tu") && st.tenant_current == 3,
	      "unprivileged STATUS fields");
	CHECK_RET(kvt_release(fd, b, 3), 3, "unprivileged RELEASE");
	CHECK_RET(kvt_attach(fd, "pl", "tg"), 0, "TENANT_ATTACH allowed by gid");
	CHECK_RET(kvt_attach(fd, "pl", ""), 0, "TENANT_ATTACH own per-uid tenant");
	CHECK_RET(kvt_lease(fd, 2, 0, 0, b), 2, "LEASE in uid-1000");
	CHECK(kvt_sysfs_num("pl", "uid-1000", "blocks.current") == 2,
	      "automatic tenant uid-1000 charged");
	CHECK_RET(kvt_grow(fd, 64, 0), -EPERM, "unprivileged POOL_GROW");
	CHECK_RET(kvt_sysfs_set("pl", "uid-1000", "blocks.max", "1"), -EACCES,
		  "unprivileged sysfs write");
	close(fd);

	/* A file that leases without attaching: first pool, per-uid tenant. */
	fd = kvt_open();
	CHECK_RET(kvt_lease(fd, 1, 0, 0, b), 1, "LEASE without attaching");
	CHECK_RET(kvt_status(fd, &st), 0, "STATUS");
	CHECK(!strcmp(st.pool, "pl") && !strcmp(st.tenant, "uid-1000"),
	      "lazily bound to pl / uid-1000");
	close(fd);
}

/* As uid 1000 / gid 1000 with supplementary group 2000. */
static void test_supplementary(void)
{
	int fd = kvt_open();

	CHECK_RET(kvt_attach(fd, "pl", "tsg"), 0,
		  "TENANT_ATTACH allowed by a supplementary group");
	close(fd);
}

/*
 * A full tenant table: the pool pl2 gets tenants until TENANT_NEW fails
 * with -ENOSPC; a caller whose per-uid tenant does not exist there yet
 * cannot bind to it (-ENOSPC, documented), a named tenant still works.
 */
static void test_tenant_table_full(void)
{
	struct kvt_nl nl;
	char name[KVPOOL_NAME_LEN];
	int n = 0, ret = 0, fd;
	pid_t pid;

	if (kvt_nl_open(&nl)) {
		CHECK(0, "netlink socket");
		return;
	}
	while (n < 5000) {
		snprintf(name, sizeof(name), "f%d", n);
		ret = kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_NEW, "pl2", name, 1, 0,
				    KVT_UID, KVPOOL_ID_NONE);
		if (ret)
			break;
		n++;
	}
	kvt_nl_close(&nl);
	CHECK(ret == -ENOSPC && n >= 4000, "TENANT_NEW: -ENOSPC after %d tenants (%d)", n, ret);
	fflush(stdout);
	pid = fork();
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		fd = kvt_open();
		if (fd < 0)
			_exit(3);
		if (kvt_attach(fd, "pl2", "") != -ENOSPC)
			_exit(4);
		if (kvt_attach(fd, "pl2", "f1") != -ENOSPC)
			_exit(5);	/* the file could not bind at all */
		close(fd);
		fd = kvt_open();
		if (fd < 0 || kvt_attach(fd, "pl", "tu"))
			_exit(6);	/* another pool is not affected */
		_exit(0);
	}
	CHECK(kvt_wait(pid) == 0,
	      "uid 1000 with no tenant in a full table: TENANT_ATTACH -ENOSPC");
}

int main(void)
{
	int owner, pl2;
	pid_t pid;

	kvt_init("lease");
	owner = kvt_setup_pool("pl", 64, 16, 32, KVPOOL_UNLIMITED);
	pl2 = kvt_setup_pool("pl2", 8, 8, 8, KVPOOL_UNLIMITED);
	kvt_tenant_new("pl", "ta", 8, 0, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	kvt_tenant_new("pl", "tu", KVPOOL_UNLIMITED, 0, KVT_UID, KVPOOL_ID_NONE);
	kvt_tenant_new("pl", "tg", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE, KVT_GID);
	kvt_tenant_new("pl", "tsg", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE, 2000);

	test_attach(owner);
	test_lease(owner);
	test_serial(owner);

	fflush(stdout);
	pid = fork();
	if (!pid) {
		kvt_checks = 1000;	/* the child numbers its checks apart */
		if (kvt_drop(KVT_UID, KVT_GID))
			kvt_die("setresuid");
		test_unprivileged();
		exit(kvt_done());
	}
	CHECK(kvt_wait(pid) == 0, "unprivileged checks passed");

	fflush(stdout);
	pid = fork();
	if (!pid) {
		gid_t extra = 2000;

		kvt_checks = 2000;
		if (setgroups(1, &extra) ||
		    setresgid(KVT_GID, KVT_GID, KVT_GID) ||
		    setresuid(KVT_UID, KVT_UID, KVT_UID))
			kvt_die("setgroups/setresuid");
		test_supplementary();
		exit(kvt_done());
	}
	CHECK(kvt_wait(pid) == 0, "supplementary group checks passed");
	test_tenant_table_full();
	CHECK(kvt_sysfs_num("pl", NULL, "used") == 0,
	      "every block back after the unprivileged files closed");
	close(pl2);
	close(owner);
	return kvt_done();
}
