// SPDX-License-Identifier: MIT
/*
 * What outlives the owner (kvpoold): descriptors deposited with its pool
 * (FD_DEPOSIT, FD_FETCH, FD_DROP) and kept leases (LEASE_KEEP,
 * LEASE_ADOPT).  The contents of a deposited memfd survive the owner's
 * close and reach the next owner; every error path; the owner killed in
 * the middle of a deposit loop leaks nothing (every file the loop opened
 * is released once the next owner drops the deposits, as inotify sees);
 * a second owner cannot take the deposits while the first lives; a kept
 * lease parks when its process dies, keeps its blocks, is adopted onto a
 * new file and behaves as any lease; KVPOOL_PARK_MAX; and the pool's
 * deposits and parked leases are released when the module is unloaded
 * (the memfd's inode is freed, Shmem goes down).
 */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sched.h>

#include "kvt.h"

/* ---------------------------------------------------------------- */
/* Helpers                                                            */
/* ---------------------------------------------------------------- */

static int deposit(int owner, uint64_t tag, int fd)
{
	struct kvpool_fd_deposit a;

	memset(&a, 0, sizeof(a));
	a.tag = tag;
	a.fd = fd;
	return kvt_ioctl(owner, KVPOOL_IOC_FD_DEPOSIT, &a);
}

/* FD_FETCH: 0 with *fd, or -errno; *count and *tag as written back. */
static int fetch(int owner, uint32_t index, uint64_t *tag, int *fd,
		 uint32_t *count)
{
	struct kvpool_fd_fetch a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.index = index;
	a.fd = -2;
	a.count = 0xdead;
	ret = kvt_ioctl(owner, KVPOOL_IOC_FD_FETCH, &a);
	if (tag)
		*tag = a.tag;
	if (fd)
		*fd = a.fd;
	if (count)
		*count = a.count;
	return ret;
}

static int drop(int owner, uint64_t tag)
{
	struct kvpool_fd_drop a;

	memset(&a, 0, sizeof(a));
	a.tag = tag;
	return kvt_ioctl(owner, KVPOOL_IOC_FD_DROP, &a);
}

static int keep(int fd, int owner, uint32_t flags, uint64_t *id)
{
	struct kvpool_lease_keep a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.owner_fd = owner;
	a.flags = flags;
	ret = kvt_ioctl(fd, KVPOOL_IOC_LEASE_KEEP, &a);
	if (id)
		*id = a.lease_id;
	return ret;
}

static int adopt(int fd, int owner, uint64_t id)
{
	struct kvpool_lease_adopt a;

	memset(&a, 0, sizeof(a));
	a.owner_fd = owner;
	a.lease_id = id;
	return kvt_ioctl(fd, KVPOOL_IOC_LEASE_ADOPT, &a);
}

static int snapshot(int owner, struct kvpool_lease_info *li, uint32_t nl,
		    struct kvpool_block_owner *bo, uint32_t nb,
		    struct kvpool_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	s->leases_ptr = (uintptr_t)li;
	s->blocks_ptr = (uintptr_t)bo;
	s->leases_cap = nl;
	s->blocks_cap = nb;
	return kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, s);
}

/* A memfd of @len bytes, byte i = (seed + i) & 0xff. */
static int memfd_filled(const char *name, size_t len, unsigned int seed)
{
	static unsigned char buf[65536];
	int fd = memfd_create(name, MFD_CLOEXEC);
	size_t off, i;

	if (fd < 0)
		kvt_die("memfd_create");
	for (off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);

		for (i = 0; i < n; i++)
			buf[i] = (unsigned char)(seed + off + i);
		if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
			kvt_die("pwrite memfd");
	}
	return fd;
}

/* Does @fd hold what memfd_filled(@len, @seed) wrote? */
static bool memfd_holds(int fd, size_t len, unsigned int seed)
{
	static unsigned char buf[65536];
	size_t off, i;

	for (off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);

		if (pread(fd, buf, n, (off_t)off) != (ssize_t)n)
			return false;
		for (i = 0; i < n; i++)
			if (buf[i] != (unsigned char)(seed + off + i))
				return false;
	}
	return true;
}

static ino_t inode_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : st.st_ino;
}

/* Open descriptors of this process. */
static int fd_count(void)
{
	char path[64];
	int fd, n = 0;

	for (fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += !access(path, F_OK);
	}
	return n;
}

/* An inotify watch of a memfd: IN_IGNORED arrives when its inode is freed. */
static int watch_fd(int fd, int *wd)
{
	char path[64];
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

	if (in < 0)
		kvt_die("inotify_init1");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	*wd = inotify_add_watch(in, path, IN_ALL_EVENTS);
	if (*wd < 0)
		kvt_die("inotify_add_watch memfd");
	return in;
}

/* Events of inotify @in so far: IN_IGNORED, IN_OPEN, IN_CLOSE_*, overflow. */
struct ino_counts {
	int ignored, opened, closed, overflow;
};

static void ino_drain(int in, struct ino_counts *c)
{
	char buf[8192] __attribute__((aligned(8)));
	ssize_t n, off;

	while ((n = read(in, buf, sizeof(buf))) > 0) {
		for (off = 0; off < n;) {
			struct inotify_event *e = (void *)(buf + off);

			c->ignored += !!(e->mask & IN_IGNORED);
			c->opened += !!(e->mask & IN_OPEN);
			c->closed += !!(e->mask & IN_CLOSE);
			c->overflow += !!(e->mask & IN_Q_OVERFLOW);
			off += sizeof(*e) + e->len;
		}
	}
}

static long long meminfo_kb(const char *key)
{
	char buf[4096], *p;

	if (kvt_read_file("/proc/meminfo", buf, sizeof(buf)) < 0)
		return -1;
	p = strstr(buf, key);
	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static int run(const char *prog, const char *a1, const char *a2)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (!pid) {
		execl(prog, prog, a1, a2, (char *)NULL);
		_exit(127);
	}
	return kvt_wait(pid);
}

/* ---------------------------------------------------------------- */
/* Deposits                                                           */
/* ---------------------------------------------------------------- */

#define MEMFD_LEN	(1U << 20)

/* Deposit, owner gone, a new owner fetches: the memfd's contents are there. */
static void test_roundtrip(void)
{
	int owner = kvt_setup_pool("kd", 16, 8, 8, KVPOOL_UNLIMITED);
	int m = memfd_filled("kd", MEMFD_LEN, 7), m2, in, wd, fd, fd2, fl;
	struct kvpool_features f;
	struct ino_counts ic = { 0 };
	uint64_t tag, epoch;
	uint32_t count;
	ino_t ino = inode_of(m), ino2;
	int tmpf, devnull;

	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_DEPOSIT | KVPOOL_FEAT_PARK;
	CHECK(!kvt_ioctl(owner, KVPOOL_IOC_FEATURES, &f) &&
	      f.enabled == (KVPOOL_FEAT_DEPOSIT | KVPOOL_FEAT_PARK),
	      "FEATURES has DEPOSIT and PARK");
	CHECK(kvt_sysfs_num("kd", NULL, "deposits") == 0, "deposits 0 at first");
	CHECK_RET(fetch(owner, 0, &tag, &fd, &count), -ENOENT, "FETCH with none");
	CHECK(count == 0 && fd == -1, "count 0 written back (%u), fd -1", count);
	CHECK_RET(drop(owner, KVPOOL_TAG_ALL), -ENOENT, "DROP ALL with none");

	CHECK_RET(deposit(owner, 7, m), 0, "DEPOSIT a 1 MiB memfd under tag 7");
	in = watch_fd(m, &wd);
	close(m);
	close(owner);
	CHECK(kvt_sysfs_num("kd", NULL, "deposits") == 1,
	      "orphaned pool keeps 1 deposit");
	ino_drain(in, &ic);
	CHECK(ic.ignored == 0, "the memfd lives on with no descriptor of ours");

	owner = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(owner, "kd", &epoch), 0, "new owner attaches");
	CHECK_RET(fetch(owner, 0, &tag, &fd, &count), 0, "FETCH index 0");
	CHECK(tag == 7 && count == 1 && fd >= 0, "tag 7, count 1, fd %d", fd);
	fl = fcntl(fd, F_GETFD);
	CHECK(fl >= 0 && (fl & FD_CLOEXEC), "the new descriptor is O_CLOEXEC");
	CHECK(inode_of(fd) == ino, "the same memfd (inode %lu)", (unsigned long)ino);
	CHECK(memfd_holds(fd, MEMFD_LEN, 7), "its 1 MiB contents survived the owner");
	CHECK_RET(fetch(owner, 0, &tag, &fd2, &count), 0, "FETCH again");
	CHECK(fd2 != fd && inode_of(fd2) == ino && count == 1,
	      "another descriptor of it, still deposited");
	close(fd2);
	CHECK_RET(fetch(owner, 1, &tag, &fd2, &count), -ENOENT, "FETCH index 1");
	CHECK(count == 1 && fd2 == -1, "count 1 written back on ENOENT");
	close(fd);
	ino_drain(in, &ic);
	CHECK(ic.ignored == 0, "still alive after closing the fetched fds");

	/* Replace under the same tag: the old file is released at once. */
	m2 = memfd_filled("kd2", 4096, 9);
	ino2 = inode_of(m2);
	CHECK_RET(deposit(owner, 7, m2), 0, "DEPOSIT another memfd under tag 7");
	close(m2);
	ino_drain(in, &ic);
	CHECK(ic.ignored == 1, "the replaced memfd is freed (inotify IN_IGNORED)");
	close(in);
	CHECK(kvt_sysfs_num("kd", NULL, "deposits") == 1, "still 1 deposit");
	CHECK(!fetch(owner, 0, &tag, &fd, &count) && inode_of(fd) == ino2 &&
	      memfd_holds(fd, 4096, 9), "tag 7 now gives the new memfd");
	close(fd);

	/* A regular file and a character device; order and drops. */
	tmpf = open("/tmp/kd-file", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	CHECK_RET(deposit(owner, 1, tmpf), 0, "DEPOSIT a tmpfs file (tag 1)");
	CHECK_RET(deposit(owner, 2, devnull), 0, "DEPOSIT /dev/null (tag 2)");
	CHECK_RET(deposit(owner, 3, tmpf), 0, "DEPOSIT the file again (tag 3)");
	close(tmpf);
	close(devnull);
	CHECK(kvt_sysfs_num("kd", NULL, "deposits") == 4, "4 deposits");
	CHECK(!fetch(owner, 1, &tag, &fd, &count) && tag == 1 && count == 4,
	      "deposit order: index 1 is tag 1");
	close(fd);
	CHECK_RET(drop(owner, 1), 0, "DROP tag 1");
	CHECK_RET(drop(owner, 1), -ENOENT, "DROP tag 1 again");
	CHECK_RET(drop(owner, 99), -ENOENT, "DROP an unknown tag");
	CHECK(!fetch(owner, 1, &tag, &fd, &count) && tag == 2 && count == 3,
	      "later deposits moved down: index 1 is tag 2");
	{
		struct stat st, null;

		CHECK(!fstat(fd, &st) && !stat("/dev/null", &null) &&
		      S_ISCHR(st.st_mode) && st.st_rdev == null.st_rdev,
		      "fetched /dev/null, a character device");
	}
	close(fd);
	CHECK_RET(drop(owner, KVPOOL_TAG_ALL), 0, "DROP ALL");
	CHECK(kvt_sysfs_num("kd", NULL, "deposits") == 0, "deposits 0");
	CHECK_RET(fetch(owner, 0, &tag, &fd, &count), -ENOENT, "FETCH after DROP ALL");
	CHECK(count == 0, "count 0");
	unlink("/tmp/kd-file");
	close(owner);
}

static void test_deposit_errors(void)
{
	int owner = kvt_setup_pool("ke", 16, 8, 8, KVPOOL_UNLIMITED);
	int other = kvt_setup_pool("ke2", 16, 8, 8, KVPOOL_UNLIMITED);
	int m = memfd_filled("ke", 4096, 1), client = kvt_open_or_die();
	int unbound = kvt_open_or_die(), sv[2], pf[2], efd, ep, dir, opath;
	struct kvpool_fd_deposit d;
	struct kvpool_fd_fetch fe;
	struct kvpool_fd_drop dr;
	unsigned long short_fetch;
	uint32_t count, i;
	uint64_t tag;
	int fd, before, st;
	void *ro;
	pid_t pid;

	CHECK_RET(kvt_attach(client, "ke", ""), 0, "a client file of ke");
	CHECK_RET(deposit(owner, 1, -1), -EBADF, "DEPOSIT fd -1");
	CHECK_RET(deposit(owner, 1, 4000), -EBADF, "DEPOSIT a closed fd");
	opath = open("/tmp", O_PATH | O_CLOEXEC);
	CHECK_RET(deposit(owner, 1, opath), -EBADF, "DEPOSIT an O_PATH fd");
	close(opath);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) || pipe(pf))
		kvt_die("socketpair/pipe");
	CHECK_RET(deposit(owner, 1, sv[0]), -EINVAL, "DEPOSIT a socket");
	CHECK_RET(deposit(owner, 1, pf[0]), -EINVAL, "DEPOSIT a pipe");
	efd = eventfd(0, EFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	dir = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK_RET(deposit(owner, 1, efd), -EINVAL, "DEPOSIT an eventfd");
	CHECK_RET(deposit(owner, 1, ep), -EINVAL, "DEPOSIT an epoll fd");
	CHECK_RET(deposit(owner, 1, dir), -EINVAL, "DEPOSIT a directory");
	CHECK_RET(deposit(owner, 1, client), -EINVAL, "DEPOSIT a /dev/kvpool client");
	CHECK_RET(deposit(owner, 1, unbound), -EINVAL, "DEPOSIT an unbound /dev/kvpool file");
	CHECK_RET(deposit(owner, 1, owner), -EINVAL, "DEPOSIT the owner file itself");
	CHECK_RET(deposit(owner, 1, other), -EINVAL, "DEPOSIT another pool's owner");
	close(sv[0]);
	close(sv[1]);
	close(pf[0]);
	close(pf[1]);
	close(efd);
	close(ep);
	close(dir);
	CHECK_RET(deposit(owner, KVPOOL_TAG_ALL, m), -EINVAL, "DEPOSIT tag ~0");

	memset(&d, 0, sizeof(d));
	d.fd = m;
	d.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DEPOSIT, &d), -EINVAL, "DEPOSIT flags");
	d.flags = 0;
	d.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DEPOSIT, &d), -EINVAL, "DEPOSIT reserved");
	memset(&fe, 0, sizeof(fe));
	fe.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_FETCH, &fe), -EINVAL, "FETCH flags");
	fe.flags = 0;
	fe.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_FETCH, &fe), -EINVAL, "FETCH reserved");
	memset(&dr, 0, sizeof(dr));
	dr.tag = KVPOOL_TAG_ALL;
	dr.flags = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DROP, &dr), -EINVAL, "DROP flags");
	dr.flags = 0;
	dr.pad = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DROP, &dr), -EINVAL, "DROP pad");
	dr.pad = 0;
	dr.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DROP, &dr), -EINVAL, "DROP reserved");
	CHECK(kvt_sysfs_num("ke", NULL, "deposits") == 0, "nothing deposited by the refusals");

	/* Non-owner files. */
	CHECK_RET(deposit(client, 1, m), -EPERM, "DEPOSIT on a client file");
	CHECK_RET(deposit(unbound, 1, m), -EPERM, "DEPOSIT on an unbound file");
	CHECK_RET(fetch(client, 0, NULL, NULL, NULL), -EPERM, "FETCH on a client file");
	CHECK_RET(drop(unbound, KVPOOL_TAG_ALL), -EPERM, "DROP on an unbound file");

	/* Full at KVPOOL_DEPOSIT_MAX (the same file under every tag). */
	for (i = 0; i < KVPOOL_DEPOSIT_MAX; i++)
		if (deposit(owner, 1000 + i, m))
			break;
	CHECK(i == KVPOOL_DEPOSIT_MAX, "%u deposits accepted", i);
	CHECK_RET(deposit(owner, 5000, m), -ENOSPC, "one more: ENOSPC");
	CHECK_RET(deposit(owner, 1000, m), 0, "replacing one is still possible");
	CHECK(kvt_sysfs_num("ke", NULL, "deposits") == KVPOOL_DEPOSIT_MAX,
	      "deposits = KVPOOL_DEPOSIT_MAX");
	CHECK(!fetch(owner, KVPOOL_DEPOSIT_MAX - 1, &tag, &fd, &count) &&
	      tag == 1000 + KVPOOL_DEPOSIT_MAX - 1 && count == KVPOOL_DEPOSIT_MAX,
	      "the last one fetched");
	close(fd);

	/* No free descriptor: EMFILE, and the deposit stays. */
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int low = dup(0);
		struct rlimit rl;

		if (low < 0)
			_exit(2);
		close(low);
		rl.rlim_cur = rl.rlim_max = (rlim_t)low;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			_exit(3);
		_exit(fetch(owner, 0, NULL, NULL, NULL) == -EMFILE ? 0 : 4);
	}
	st = kvt_wait(pid);
	CHECK(st == 0, "FETCH with no free descriptor: EMFILE (exit %d)", st);
	CHECK(kvt_sysfs_num("ke", NULL, "deposits") == KVPOOL_DEPOSIT_MAX,
	      "still %d deposits", KVPOOL_DEPOSIT_MAX);

	/* A fetch that cannot be written back installs no descriptor. */
	before = fd_count();
	ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_FETCH, ro), -EFAULT,
		  "FETCH into a read-only struct");
	short_fetch = _IOC(_IOC_READ | _IOC_WRITE, KVPOOL_IOC_MAGIC,
			   _IOC_NR(KVPOOL_IOC_FD_FETCH), 16);
	memset(&fe, 0, sizeof(fe));
	CHECK_RET(kvt_ioctl(owner, short_fetch, &fe), -EINVAL,
		  "FETCH with a struct too short for fd");
	CHECK(fd_count() == before, "no descriptor installed (%d open)", before);
	munmap(ro, 4096);

	/* An unprivileged process, even holding the owner file. */
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int bad = 0;

		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		bad |= deposit(owner, 1, m) != -EPERM;
		bad |= (fetch(owner, 0, NULL, NULL, NULL) != -EPERM) << 1;
		bad |= (drop(owner, KVPOOL_TAG_ALL) != -EPERM) << 2;
		_exit(bad ? 10 + bad : 0);
	}
	st = kvt_wait(pid);
	CHECK(st == 0, "uid 1000 with the owner file: DEPOSIT, FETCH, DROP all EPERM (exit %d)", st);
	CHECK(kvt_sysfs_num("ke", NULL, "deposits") == KVPOOL_DEPOSIT_MAX,
	      "the unprivileged calls changed nothing");
	CHECK_RET(drop(owner, KVPOOL_TAG_ALL), 0, "DROP ALL");
	close(m);
	close(client);
	close(unbound);
	close(other);
	close(owner);
}

/* ---------------------------------------------------------------- */
/* The owner killed while depositing                                  */
/* ---------------------------------------------------------------- */

#define KK_DIR		"/tmp/kk"

struct kk_shared {
	volatile uint32_t tried;	/* deposits begun */
	volatile uint32_t done;		/* deposits that returned 0 */
	volatile uint32_t failed;
};

static void test_owner_killed(void)
{
	struct kk_shared *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct ino_counts ic = { 0 };
	uint32_t count = 0, i, tried, done, bad = 0;
	int in, owner, ret, p[2];
	uint64_t tag;
	pid_t pid;
	char ok;

	if (sh == MAP_FAILED || pipe(p))
		kvt_die("mmap/pipe");
	mkdir(KK_DIR, 0700);
	/* Room for every event of the loop (the limit is taken at init). */
	kvt_write_file("/proc/sys/fs/inotify/max_queued_events", "1000000");
	in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (in < 0 || inotify_add_watch(in, KK_DIR, IN_OPEN | IN_CLOSE) < 0)
		kvt_die("inotify " KK_DIR);
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int o = kvt_setup_pool("kk", 16, 8, 8, KVPOOL_UNLIMITED);
		char path[64];

		if (write(p[1], "x", 1) != 1)
			_exit(1);
		/* Distinct tags up to the bound, then replacements, for ever. */
		for (i = 0; ; i++) {
			int fd;

			snprintf(path, sizeof(path), KK_DIR "/f%u", i % 1024);
			fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
			if (fd < 0 || pwrite(fd, &i, sizeof(i), 0) != sizeof(i))
				_exit(3);
			sh->tried = i + 1;
			if (deposit(o, i % KVPOOL_DEPOSIT_MAX, fd))
				sh->failed++;
			else
				sh->done = i + 1;
			close(fd);
		}
	}
	close(p[1]);
	CHECK(read(p[0], &ok, 1) == 1, "owner process created pool kk");
	close(p[0]);
	while (sh->done < 2 * KVPOOL_DEPOSIT_MAX && !sh->failed)
		sched_yield();
	/* While it lives, nobody else takes the pool or its deposits. */
	owner = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(owner, "kk", NULL), -EBUSY,
		  "a second owner: POOL_ATTACH EBUSY while the owner lives");
	CHECK_RET(fetch(owner, 0, NULL, NULL, NULL), -EPERM,
		  "and no FETCH on that file");
	kill(pid, SIGKILL);
	CHECK(kvt_wait(pid) == 128 + SIGKILL, "owner killed in its deposit loop");
	tried = sh->tried;
	done = sh->done;
	CHECK(sh->failed == 0, "no deposit of the loop failed");
	printf("# killed after %u deposits begun, %u returned\n", tried, done);
	CHECK(kvt_sysfs_num("kk", NULL, "deposits") == KVPOOL_DEPOSIT_MAX,
	      "the orphaned pool holds %d deposits", KVPOOL_DEPOSIT_MAX);

	CHECK_RET(kvt_pool_attach(owner, "kk", NULL), 0, "the next owner attaches");
	/* Tag t holds the latest deposit i = t mod 256 (the in-flight one or not). */
	for (i = 0; i < KVPOOL_DEPOSIT_MAX; i++) {
		uint32_t v = ~0U;
		int fd;

		ret = fetch(owner, i, &tag, &fd, &count);
		if (ret || pread(fd, &v, sizeof(v), 0) != sizeof(v)) {
			bad++;
			continue;
		}
		close(fd);
		if (v % KVPOOL_DEPOSIT_MAX != tag || v >= tried ||
		    v + KVPOOL_DEPOSIT_MAX < done)
			bad++;
	}
	CHECK(bad == 0 && count == KVPOOL_DEPOSIT_MAX,
	      "each tag holds its latest deposit (%u wrong)", bad);
	CHECK_RET(drop(owner, KVPOOL_TAG_ALL), 0, "DROP ALL");
	CHECK(kvt_sysfs_num("kk", NULL, "deposits") == 0, "deposits 0");
	ino_drain(in, &ic);
	CHECK(!ic.overflow && ic.opened > 0 && ic.opened == ic.closed,
	      "every file the loop opened was released: %d opens, %d closes",
	      ic.opened, ic.closed);
	close(in);
	close(owner);
	munmap(sh, 4096);
	for (i = 0; i < 1024; i++) {
		char path[64];

		snprintf(path, sizeof(path), KK_DIR "/f%u", i);
		unlink(path);
	}
	rmdir(KK_DIR);
}

/* ---------------------------------------------------------------- */
/* Kept leases                                                        */
/* ---------------------------------------------------------------- */

static void test_keep_adopt(void)
{
	struct kvpool_lease_info li[4];
	struct kvpool_block_owner bo[16];
	struct kvpool_snapshot s;
	struct kvpool_status st;
	struct kvpool_lease_keep k;
	struct kvpool_lease_adopt a;
	struct kvpool_lease_check lc;
	struct kvpool_event ev;
	uint32_t blocks[5], more[1];
	long long reclaim_before;
	uint64_t id = 0, got;
	int p[2], owner, f, f2, unbound, other, m, ret, i, rc;
	pid_t pid;

	if (pipe(p))
		kvt_die("pipe");
	/* The "daemon": owner of kp, and a kept lease of its own. */
	fflush(stdout);
	pid = fork();
	if (!pid) {
		int o = kvt_setup_pool("kp", 32, 8, 16, KVPOOL_UNLIMITED);
		int c = kvt_open_or_die(), c2 = kvt_open_or_die();
		uint32_t b[5], x[2];
		uint64_t lid = 0;

		if (kvt_attach(c, "kp", "") || kvt_lease(c, 5, 0, 0, b) != 5 ||
		    keep(c, o, KVPOOL_KEEP_ON, &lid) ||
		    kvt_attach(c2, "kp", "") || kvt_lease(c2, 2, 0, 0, x) != 2)
			lid = 0;
		if (write(p[1], &lid, sizeof(lid)) != sizeof(lid) ||
		    write(p[1], b, sizeof(b)) != sizeof(b))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	ret = read(p[0], &id, sizeof(id)) == sizeof(id) && id &&
	      read(p[0], blocks, sizeof(blocks)) == sizeof(blocks);
	CHECK(ret, "the owner process holds a kept lease of 5 blocks (lease %llu)",
	      (unsigned long long)id);
	close(p[0]);
	CHECK(kvt_sysfs_num("kp", NULL, "kept") == 1 &&
	      kvt_sysfs_num("kp", NULL, "parked") == 0, "kept 1, parked 0");
	kill(pid, SIGKILL);
	CHECK(kvt_wait(pid) == 128 + SIGKILL, "owner process killed");
	CHECK(kvt_sysfs_num("kp", NULL, "parked") == 1 &&
	      kvt_sysfs_num("kp", NULL, "kept") == 1, "its kept lease parked");
	CHECK(kvt_sysfs_num("kp", NULL, "used") == 5,
	      "used 5: the kept lease's blocks stay, the other's returned");
	CHECK(kvt_sysfs_num("kp", "uid-0", "blocks.current") == 5,
	      "still charged to its tenant");

	/* A reclaim target cannot reach a parked lease: none is posted. */
	reclaim_before = kvt_sysfs_event("kp", "uid-0", "reclaim");
	CHECK_RET(kvt_sysfs_set("kp", "uid-0", "blocks.max", "2"), 0,
		  "blocks.max 2 below current 5 while parked");
	CHECK(kvt_sysfs_event("kp", "uid-0", "reclaim") == reclaim_before,
	      "no reclaim posted to the parked lease");
	CHECK_RET(kvt_sysfs_set("kp", "uid-0", "blocks.max", "max"), 0,
		  "blocks.max back to max");

	owner = kvt_open_or_die();
	CHECK_RET(kvt_pool_attach(owner, "kp", NULL), 0, "new owner attaches");
	CHECK_RET(snapshot(owner, li, 4, bo, 16, &s), 0, "SNAPSHOT");
	CHECK(s.leases == 1 && s.blocks == 5 && li[0].lease_id == id &&
	      li[0].blocks == 5 &&
	      li[0].flags == (KVPOOL_LEASE_INFO_KEPT | KVPOOL_LEASE_INFO_PARKED),
	      "snapshot: the lease, 5 blocks, KEPT|PARKED (flags 0x%x)", li[0].flags);
	for (i = 0, ret = 0; i < 5; i++)
		ret |= bo[i].block != blocks[i] || bo[i].lease_id != id;
	CHECK(!ret, "snapshot: its 5 blocks");
	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)blocks;
	lc.lease_id = id;
	lc.count = 5;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -ENOENT,
		  "LEASE_CHECK of a parked lease: ENOENT");
	memset(&st, 0, sizeof(st));
	st.flags = KVPOOL_STATUS_LEASE;
	st.lease_id = id;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_STATUS, &st), -ENOENT,
		  "STATUS of a parked lease: ENOENT");

	/* ADOPT's error paths. */
	f = kvt_open_or_die();
	unbound = kvt_open_or_die();
	other = kvt_setup_pool("kp2", 8, 8, 8, KVPOOL_UNLIMITED);
	m = memfd_create("kp", MFD_CLOEXEC);
	f2 = kvt_open_or_die();
	CHECK_RET(kvt_attach(f2, "kp", ""), 0, "a client file of kp");
	CHECK_RET(adopt(f, -1, id), -EBADF, "ADOPT owner_fd -1");
	CHECK_RET(adopt(f, m, id), -EPERM, "ADOPT owner_fd a memfd");
	CHECK_RET(adopt(f, unbound, id), -EPERM, "ADOPT owner_fd an unbound file");
	CHECK_RET(adopt(f, f2, id), -EPERM, "ADOPT owner_fd a client file");
	CHECK_RET(adopt(f, other, id), -ENOENT, "ADOPT through another pool's owner");
	CHECK_RET(adopt(f, owner, id + 100), -ENOENT, "ADOPT an unknown lease");
	CHECK_RET(kvt_status(f2, &st), 0, "STATUS of the client");
	CHECK_RET(adopt(f, owner, st.lease_id), -ENOENT, "ADOPT an open lease");
	CHECK_RET(adopt(owner, owner, id), -EBUSY, "ADOPT onto the owner file");
	CHECK_RET(adopt(f2, owner, id), -EBUSY, "ADOPT onto a client file");
	memset(&a, 0, sizeof(a));
	a.owner_fd = owner;
	a.lease_id = id;
	a.flags = 1;
	CHECK_RET(kvt_ioctl(f, KVPOOL_IOC_LEASE_ADOPT, &a), -EINVAL, "ADOPT flags");
	a.flags = 0;
	a.reserved[0] = 1;
	CHECK_RET(kvt_ioctl(f, KVPOOL_IOC_LEASE_ADOPT, &a), -EINVAL, "ADOPT reserved");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		_exit(adopt(f, owner, id) == -EPERM ? 0 : 3);
	}
	rc = kvt_wait(pid);
	CHECK(rc == 0, "uid 1000 with the owner file: ADOPT EPERM (exit %d)", rc);
	CHECK(kvt_sysfs_num("kp", NULL, "parked") == 1, "still parked after the refusals");

	/* Adopt: the new file holds the blocks, still kept. */
	CHECK_RET(adopt(f, owner, id), 0, "ADOPT onto a new file");
	CHECK(kvt_sysfs_num("kp", NULL, "parked") == 0 &&
	      kvt_sysfs_num("kp", NULL, "kept") == 1, "parked 0, kept 1");
	CHECK_RET(kvt_status(f, &st), 0, "STATUS of the adopted file");
	CHECK(st.lease_id == id && st.held == 5 && !strcmp(st.tenant, "uid-0") &&
	      st.state == KVPOOL_STATE_LIVE && st.reclaim_target == 0,
	      "its lease, 5 blocks, uid-0, no reclaim target");
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), 0,
		  "LEASE_CHECK: the lease holds the same 5 blocks");
	CHECK_RET(snapshot(owner, li, 4, bo, 16, &s), 0, "SNAPSHOT");
	CHECK(s.leases == 2 && li[0].lease_id == id &&
	      li[0].flags == KVPOOL_LEASE_INFO_KEPT && li[1].flags == 0,
	      "snapshot: KEPT, not parked; the other lease's flags 0");
	CHECK_RET(adopt(f, owner, id), -EBUSY, "ADOPT again onto the same file");
	CHECK_RET(adopt(unbound, owner, id), -ENOENT, "ADOPT it onto another file");
	CHECK_RET(kvt_release(f, blocks + 3, 2), 2, "RELEASE 2 of its blocks");
	CHECK_RET(kvt_lease(f, 1, 0, 0, more), 1, "LEASE 1 more");
	CHECK(kvt_sysfs_num("kp", NULL, "used") == 4, "used 4");

	/* LEASE_KEEP's error paths. */
	CHECK_RET(keep(unbound, owner, KVPOOL_KEEP_ON, NULL), -EINVAL,
		  "KEEP on an unbound file");
	CHECK_RET(keep(owner, owner, KVPOOL_KEEP_ON, NULL), -EINVAL,
		  "KEEP on the owner file");
	CHECK_RET(keep(f2, -1, KVPOOL_KEEP_ON, NULL), -EBADF, "KEEP owner_fd -1");
	CHECK_RET(keep(f2, m, KVPOOL_KEEP_ON, NULL), -EPERM, "KEEP owner_fd a memfd");
	CHECK_RET(keep(f2, f, KVPOOL_KEEP_ON, NULL), -EPERM, "KEEP owner_fd a client");
	CHECK_RET(keep(f2, other, KVPOOL_KEEP_ON, NULL), -EPERM,
		  "KEEP owner_fd another pool's owner");
	CHECK_RET(keep(f2, owner, 2, NULL), -EINVAL, "KEEP unknown flag");
	memset(&k, 0, sizeof(k));
	k.owner_fd = owner;
	k.flags = KVPOOL_KEEP_ON;
	k.reserved[1] = 1;
	CHECK_RET(kvt_ioctl(f2, KVPOOL_IOC_LEASE_KEEP, &k), -EINVAL, "KEEP reserved");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		_exit(keep(f2, owner, KVPOOL_KEEP_ON, NULL) == -EPERM &&
		      keep(f, owner, 0, NULL) == -EPERM ? 0 : 3);
	}
	rc = kvt_wait(pid);
	CHECK(rc == 0, "uid 1000 with the owner file: KEEP EPERM (exit %d)", rc);
	CHECK(kvt_sysfs_num("kp", NULL, "kept") == 1, "kept 1 after the refusals");

	/* Unmarked, the lease closes like any: blocks back, CLIENT_CLOSED. */
	kvt_count_events(owner, KVPOOL_EVENT_CLIENT_CLOSED, NULL);
	CHECK_RET(keep(f, owner, 0, &got), 0, "KEEP 0 unmarks the adopted lease");
	CHECK(got == id && kvt_sysfs_num("kp", NULL, "kept") == 0,
	      "lease_id written back, kept 0");
	close(f);
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) &&
	      ev.lease_id == id && ev.blocks == 4,
	      "its close: CLIENT_CLOSED with its 4 blocks");
	CHECK(kvt_sysfs_num("kp", NULL, "used") == 0 &&
	      kvt_sysfs_num("kp", NULL, "parked") == 0, "used 0, parked 0");

	/* Kept while its owner lives: a close parks it too. */
	CHECK_RET(kvt_lease(f2, 3, 0, 0, blocks), 3, "client leases 3");
	CHECK_RET(keep(f2, owner, KVPOOL_KEEP_ON, &id), 0, "KEEP the client's lease");
	close(f2);
	CHECK(kvt_sysfs_num("kp", NULL, "parked") == 1 &&
	      kvt_sysfs_num("kp", NULL, "used") == 3, "closed: parked with 3 blocks");
	CHECK(!kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev),
	      "no CLIENT_CLOSED for a parked lease");
	f2 = kvt_open_or_die();
	CHECK_RET(adopt(f2, owner, id), 0, "adopted");
	CHECK_RET(kvt_release_all(f2), 3, "RELEASE ALL");
	CHECK_RET(keep(f2, owner, 0, NULL), 0, "unmarked");
	close(f2);
	CHECK(kvt_sysfs_num("kp", NULL, "kept") == 0 &&
	      kvt_sysfs_num("kp", NULL, "parked") == 0 &&
	      kvt_sysfs_num("kp", NULL, "used") == 0, "kept 0, parked 0, used 0");
	close(m);
	close(unbound);
	close(other);
	close(owner);
}

/* KVPOOL_PARK_MAX kept leases, all parked; one more is refused. */
static void test_park_max(void)
{
	static uint64_t ids[KVPOOL_PARK_MAX];
	int owner = kvt_setup_pool("km", 16, 8, 8, KVPOOL_UNLIMITED);
	int fd, i, bad = 0;

	for (i = 0; i < KVPOOL_PARK_MAX; i++) {
		fd = kvt_open_or_die();
		if (kvt_attach(fd, "km", "") ||
		    keep(fd, owner, KVPOOL_KEEP_ON, &ids[i]))
			bad++;
		close(fd);
	}
	CHECK(bad == 0, "%d leases kept and parked", KVPOOL_PARK_MAX);
	CHECK(kvt_sysfs_num("km", NULL, "kept") == KVPOOL_PARK_MAX &&
	      kvt_sysfs_num("km", NULL, "parked") == KVPOOL_PARK_MAX,
	      "kept and parked = KVPOOL_PARK_MAX");
	fd = kvt_open_or_die();
	CHECK_RET(kvt_attach(fd, "km", ""), 0, "one more lease");
	CHECK_RET(keep(fd, owner, KVPOOL_KEEP_ON, NULL), -ENOSPC, "KEEP it: ENOSPC");
	close(fd);
	CHECK(kvt_sysfs_num("km", NULL, "kept") == KVPOOL_PARK_MAX,
	      "it closed, the count did not move");
	for (i = 0; i < KVPOOL_PARK_MAX; i++) {
		fd = kvt_open_or_die();
		if (adopt(fd, owner, ids[i]) || keep(fd, owner, 0, NULL))
			bad++;
		close(fd);
	}
	CHECK(bad == 0, "each adopted, unmarked and closed");
	CHECK(kvt_sysfs_num("km", NULL, "kept") == 0 &&
	      kvt_sysfs_num("km", NULL, "parked") == 0, "kept 0, parked 0");
	close(owner);
}

/* ---------------------------------------------------------------- */
/* Released when the pool is destroyed (module unload)                */
/* ---------------------------------------------------------------- */

#define BIG_LEN		(32U << 20)

static void test_released_at_unload(void)
{
	int owner = kvt_setup_pool("kr", 16, 8, 8, KVPOOL_UNLIMITED);
	int m = memfd_filled("kr", BIG_LEN, 3), c = kvt_open_or_die();
	struct ino_counts mc = { 0 }, dc = { 0 };
	long long shmem_before, shmem_after;
	int in, wd, din, tf, rc;
	uint32_t b[2];

	mkdir("/tmp/kr", 0700);
	din = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (din < 0 || inotify_add_watch(din, "/tmp/kr", IN_CLOSE) < 0)
		kvt_die("inotify /tmp/kr");
	tf = open("/tmp/kr/file", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK_RET(deposit(owner, 1, m), 0, "DEPOSIT a 32 MiB memfd");
	CHECK_RET(deposit(owner, 2, tf), 0, "DEPOSIT a tmpfs file");
	CHECK_RET(kvt_attach(c, "kr", ""), 0, "a client");
	CHECK_RET(kvt_lease(c, 2, 0, 0, b), 2, "leases 2");
	CHECK_RET(keep(c, owner, KVPOOL_KEEP_ON, NULL), 0, "kept");
	in = watch_fd(m, &wd);
	close(m);
	close(tf);
	close(c);
	close(owner);
	CHECK(kvt_sysfs_num("kr", NULL, "deposits") == 2 &&
	      kvt_sysfs_num("kr", NULL, "parked") == 1,
	      "orphaned pool: 2 deposits, 1 parked lease");
	ino_drain(in, &mc);
	ino_drain(din, &dc);
	CHECK(mc.ignored == 0 && dc.closed == 0, "both files still open");
	shmem_before = meminfo_kb("Shmem:");

	/* No file of /dev/kvpool is open: the module unloads. */
	rc = run("/bin/rmmod", "kvpool", NULL);
	CHECK(rc == 0, "rmmod kvpool with deposits and a parked lease (exit %d)", rc);
	ino_drain(in, &mc);
	ino_drain(din, &dc);
	CHECK(mc.ignored == 1, "the deposited memfd was freed at unload");
	CHECK(dc.closed == 1, "the deposited tmpfs file was closed at unload");
	shmem_after = meminfo_kb("Shmem:");
	printf("# Shmem %lld kB before unload, %lld kB after\n", shmem_before,
	       shmem_after);
	CHECK(shmem_before >= 0 && shmem_after >= 0 &&
	      shmem_before - shmem_after >= (long long)(BIG_LEN / 1024) * 3 / 4,
	      "Shmem went down by the memfd's 32 MiB");
	close(in);
	close(din);
	unlink("/tmp/kr/file");
	rmdir("/tmp/kr");
	rc = run("/bin/insmod", "/kvpool.ko", "check_invariants=1");
	CHECK(rc == 0, "module loaded again (exit %d)", rc);
}

int main(void)
{
	int warns;

	kvt_init("keep");
	test_roundtrip();
	test_deposit_errors();
	test_owner_killed();
	test_keep_adopt();
	test_park_max();
	warns = kvt_klog_count("broken invariant");
	CHECK(warns == 0, "the invariant walk at every unlock found nothing (%d)",
	      warns);
	test_released_at_unload();
	return kvt_done();
}
