// SPDX-License-Identifier: MIT
/*
 * Failed copy-outs leave the ledger as it was.  LEASE hands its blocks
 * over only once both the block array and the struct were written; a fault
 * returns exactly this call's blocks, whatever the owner (pins) and other
 * threads of the same file (releases, leases) do meanwhile; with the
 * copy held open by userfaultfd, the reclaim target after the fault is as
 * before the call (never above what the file holds).  The other
 * ioctls check that their struct can be written back before changing
 * anything.  Every case compares held (STATUS), used and blocks.current
 * (sysfs) before and after, and the kernel log must gain no WARNING.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>

#include "kvt.h"

#define POOL	"pc"
#define CAP	64

struct snap {
	long long held, used, current, peak;
};

static void snap(int fd, const char *tenant, struct snap *s)
{
	struct kvpool_status st;

	s->held = kvt_status(fd, &st) ? -1 : (long long)st.held;
	s->used = kvt_sysfs_num(POOL, NULL, "used");
	s->current = kvt_sysfs_num(POOL, tenant, "blocks.current");
	s->peak = kvt_sysfs_num(POOL, tenant, "blocks.peak");
}

static bool same(const struct snap *a, const struct snap *b)
{
	return a->held == b->held && a->used == b->used &&
	       a->current == b->current;
}

#define CHECK_SAME(a, b, what)						\
	CHECK(same(a, b), "%s: held %lld->%lld used %lld->%lld current %lld->%lld", \
	      what, (a)->held, (b)->held, (a)->used, (b)->used,		\
	      (a)->current, (b)->current)

/* A page that can be read but not written. */
static void *ro_page(void)
{
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		kvt_die("mmap");
	return p;
}

/* LEASE into a read-only block array, or with a read-only struct. */
static void test_readonly(void)
{
	struct kvpool_lease_req r, *rs;
	struct snap before, after;
	uint32_t b[8], *ro = ro_page();
	int fd = kvt_open_or_die();

	CHECK_RET(kvt_lease(fd, 1, 0, 0, b), 1, "lease 1 block");
	CHECK(b[0] == 0, "block 0 granted (got %u)", b[0]);
	snap(fd, "uid-0", &before);
	CHECK_RET(kvt_lease(fd, 4, 0, 0, ro), -EFAULT, "LEASE into a read-only array");
	snap(fd, "uid-0", &after);
	CHECK_SAME(&before, &after, "read-only array: nothing granted");
	CHECK(after.peak == before.peak, "read-only array: peak %lld -> %lld",
	      before.peak, after.peak);

	/* The struct is read, the blocks are copied, the struct is not. */
	rs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rs == MAP_FAILED)
		kvt_die("mmap");
	memset(rs, 0, sizeof(*rs));
	rs->blocks_ptr = (uintptr_t)b;
	rs->count = 4;
	mprotect(rs, 4096, PROT_READ);
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, rs), -EFAULT, "LEASE with a read-only struct");
	snap(fd, "uid-0", &after);
	CHECK_SAME(&before, &after, "read-only struct: nothing granted");

	/* The same blocks are free again: the next grant gets them. */
	memset(&r, 0, sizeof(r));
	r.blocks_ptr = (uintptr_t)b;
	r.count = 4;
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_LEASE, &r), 0, "LEASE after the faults");
	CHECK(r.granted == 4 && b[0] == 1 && b[3] == 4,
	      "the cancelled blocks come back lowest first (%u..%u)", b[0], b[3]);
	CHECK_RET(kvt_release_all(fd), 5, "release all");
	munmap(rs, 4096);
	munmap(ro, 4096);
	close(fd);
}

/* The owner pins the lease (a data-plane call): a fault still undoes. */
static void test_pinned(int owner)
{
	struct kvpool_lease_check lc;
	struct kvpool_lease_unpin un;
	struct kvpool_status st;
	struct snap before, after;
	uint32_t b[8], *ro = ro_page();
	int fd = kvt_open_or_die();

	CHECK_RET(kvt_lease(fd, 1, 0, 0, b), 1, "lease 1 block");
	CHECK_RET(kvt_status(fd, &st), 0, "STATUS");
	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)b;
	lc.lease_id = st.lease_id;
	lc.count = 1;
	lc.flags = KVPOOL_LEASE_CHECK_PIN;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), 0, "owner pins the lease");
	snap(fd, "uid-0", &before);
	CHECK(before.held == 1 && before.used == 1, "held 1, used 1 (%lld, %lld)",
	      before.held, before.used);
	CHECK_RET(kvt_lease(fd, 4, 0, 0, ro), -EFAULT, "LEASE into a read-only array while pinned");
	snap(fd, "uid-0", &after);
	CHECK_SAME(&before, &after, "pinned: nothing granted");
	memset(&un, 0, sizeof(un));
	un.lease_id = st.lease_id;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_UNPIN, &un), 0, "owner unpins");
	CHECK_RET(kvt_release_all(fd), 1, "release all: only the one block");
	munmap(ro, 4096);
	close(fd);
}

/*
 * The copy-out is held open (the block array is a page registered with
 * userfaultfd, so LEASE sleeps in its copy with the blocks pending) while
 * the owner moves blocks in and out of the lease and the tenant's max is
 * lowered; then the copy faults.  The reclaim target must be as before the
 * call, counting the pending blocks as given back, and never above what
 * the file holds: giving back what it holds clears it and POLLPRI.
 */
struct held_lease {
	int fd;
	uint32_t *blocks;
	int ret;
};

static void *held_lease_run(void *arg)
{
	struct held_lease *h = arg;

	h->ret = kvt_lease(h->fd, 8, 0, 0, h->blocks);
	return NULL;
}

static uint32_t target_of(int fd, uint32_t *held)
{
	struct kvpool_status st;

	if (kvt_status(fd, &st))
		return UINT32_MAX;
	if (held)
		*held = st.held;
	return st.reclaim_target;
}

static int move(int owner, int from, int to, const uint32_t *b, uint32_t n)
{
	struct kvpool_status sf, stt;
	struct kvpool_lease_move m;

	if (kvt_status(from, &sf) || kvt_status(to, &stt))
		return -EIO;
	memset(&m, 0, sizeof(m));
	m.blocks_ptr = (uintptr_t)b;
	m.from_lease = sf.lease_id;
	m.to_lease = stt.lease_id;
	m.count = n;
	return kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m);
}

static void test_cancel_target(int owner)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	struct uffdio_range wake;
	struct uffd_msg msg;
	struct held_lease h;
	struct pollfd pf;
	pthread_t th;
	uint32_t own[3], cb[6], held = 0, t;
	int cl, cache, uffd;
	void *page;

	kvt_tenant_new(POOL, "ct", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE,
		       KVPOOL_ID_NONE);
	cl = kvt_open_or_die();
	cache = kvt_open_or_die();
	CHECK_RET(kvt_attach(cl, POOL, "ct"), 0, "client in ct");
	CHECK_RET(kvt_attach(cache, POOL, "ct"), 0, "the owner's file in ct");
	CHECK_RET(kvt_lease(cl, 3, 0, 0, own), 3, "client leases 3");
	CHECK_RET(kvt_lease(cache, 6, 0, 0, cb), 6, "the other file leases 6");

	uffd = (int)syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (!CHECK(uffd >= 0, "userfaultfd: %s", uffd < 0 ? strerror(errno) : "ok"))
		return;
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		kvt_die("mmap");
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (uintptr_t)page;
	reg.range.len = 4096;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	CHECK(!ioctl(uffd, UFFDIO_API, &api) &&
	      !ioctl(uffd, UFFDIO_REGISTER, &reg), "register the block array");

	h.fd = cl;
	h.blocks = page;
	h.ret = 1;
	if (pthread_create(&th, NULL, held_lease_run, &h))
		kvt_die("pthread_create");
	pf.fd = uffd;
	pf.events = POLLIN;
	CHECK(poll(&pf, 1, 10000) == 1 && read(uffd, &msg, sizeof(msg)) ==
	      sizeof(msg) && msg.event == UFFD_EVENT_PAGEFAULT,
	      "LEASE sleeps in its copy-out");
	t = target_of(cl, &held);
	CHECK(held == 11 && t == 0, "8 blocks pending: held %u, target %u",
	      held, t);

	/* The owner moves 4 in, the max drops to 2, the 4 move out. */
	CHECK_RET(move(owner, cache, cl, cb, 4), 0, "move 4 blocks in");
	CHECK_RET(kvt_sysfs_set(POOL, "ct", "blocks.max", "2"), 0,
		  "lower ct's max to 2");
	t = target_of(cl, &held);
	CHECK(held == 15 && t == 15, "held %u, target %u (15, 15)", held, t);
	CHECK_RET(move(owner, cl, cache, cb, 4), 0, "move them out again");
	t = target_of(cl, &held);
	CHECK(held == 11 && t == 11, "held %u, target %u (11, 11)", held, t);

	/* Now the copy faults: the array's page becomes read-only. */
	CHECK(!mprotect(page, 4096, PROT_READ), "array read-only");
	wake.start = (uintptr_t)page;
	wake.len = 4096;
	CHECK(!ioctl(uffd, UFFDIO_WAKE, &wake), "wake the copy");
	pthread_join(th, NULL);
	CHECK(h.ret == -EFAULT, "LEASE fails with EFAULT (%d)", h.ret);
	t = target_of(cl, &held);
	CHECK(held == 3, "held 3 as before the call (%u)", held);
	CHECK(kvt_sysfs_num(POOL, "ct", "blocks.current") == 9,
	      "ct's current 9 (the client's 3 and the other file's 6)");
	CHECK(t <= held, "reclaim target %u not above what the file holds "
	      "(%u)", t, held);
	CHECK(t == 3, "target 3: the posted 11 less the 8 returned (%u)", t);
	CHECK_RET(kvt_release(cl, own, 3), 3, "the client gives back its 3");
	t = target_of(cl, &held);
	pf.fd = cl;
	pf.events = POLLPRI;
	CHECK(t == 0 && held == 0, "target %u with held %u: none", t, held);
	CHECK(poll(&pf, 1, 0) == 0, "POLLPRI is clear");

	close(uffd);
	munmap(page, 4096);
	CHECK_RET(kvt_sysfs_set(POOL, "ct", "blocks.max", "max"), 0,
		  "ct's max back");
	close(cl);
	close(cache);
}

/*
 * Other ioctls whose change cannot be undone check first that their struct
 * can be written back: a read-only struct fails with EFAULT and changes
 * nothing.
 */
static void test_readonly_struct(void)
{
	struct kvpool_release *rel;
	struct kvpool_tenant_attach *ta;
	struct kvpool_pool_create *pc;
	struct kvpool_status st;
	struct snap before, after;
	uint32_t b[2];
	char *page;
	int fd = kvt_open_or_die(), fd2 = kvt_open_or_die();

	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		kvt_die("mmap");
	rel = (void *)page;
	ta = (void *)(page + 256);
	pc = (void *)(page + 512);
	CHECK_RET(kvt_lease(fd, 2, 0, 0, b), 2, "lease 2 blocks");
	memset(rel, 0, sizeof(*rel));
	rel->blocks_ptr = (uintptr_t)b;
	rel->count = 2;
	memset(ta, 0, sizeof(*ta));
	strcpy(ta->pool, POOL);
	memset(pc, 0, sizeof(*pc));
	strcpy(pc->name, "pc-ro");
	pc->block_bytes = 4096;
	pc->capacity = 8;
	pc->chunk_blocks = 8;
	mprotect(page, 4096, PROT_READ);

	snap(fd, "uid-0", &before);
	CHECK_RET(kvt_ioctl(fd, KVPOOL_IOC_RELEASE, rel), -EFAULT, "RELEASE with a read-only struct");
	snap(fd, "uid-0", &after);
	CHECK_SAME(&before, &after, "read-only RELEASE: nothing released");
	CHECK_RET(kvt_ioctl(fd2, KVPOOL_IOC_TENANT_ATTACH, ta), -EFAULT,
		  "TENANT_ATTACH with a read-only struct");
	CHECK(!kvt_status(fd2, &st) && st.lease_id == 0,
	      "read-only TENANT_ATTACH: the file stays unbound (lease %llu)",
	      (unsigned long long)st.lease_id);
	CHECK_RET(kvt_ioctl(fd2, KVPOOL_IOC_POOL_CREATE, pc), -EFAULT,
		  "POOL_CREATE with a read-only struct");
	CHECK(access(KVT_SYSFS "/pc-ro", F_OK) != 0, "read-only POOL_CREATE: no pool created");
	CHECK_RET(kvt_pool_create(fd2, "pc-ro", 4096, 8, 8, KVPOOL_UNLIMITED), 0,
		  "the same POOL_CREATE with a writable struct");
	CHECK_RET(kvt_release(fd, b, 2), 2, "the same RELEASE with a writable struct");
	munmap(page, 4096);
	close(fd2);
	close(fd);
}

/*
 * Two threads of one file, as an unprivileged user: one leases into a
 * read-only array again and again (EFAULT each time), the other leases and
 * releases what it got (by index, or with RELEASE_ALL, which would also
 * free the first thread's blocks if they were already the lease's, so that
 * the second thread leases them again before the first one's undo).  Every
 * release of the second thread must return exactly its own blocks: the
 * first thread's undo must never touch them.
 */
#define RACE_NS		3000000000ULL

struct race {
	int fd;
	uint32_t *ro;
	volatile int stop;
	unsigned long faults, other_rc;		/* faulting thread */
	unsigned long leases, lost, bad;	/* working thread */
};

static void *race_fault(void *arg)
{
	struct race *r = arg;

	while (!r->stop) {
		int ret = kvt_lease(r->fd, 1 + (uint32_t)(r->faults % 3), 0, 0, r->ro);

		if (ret == -EFAULT)
			r->faults++;
		else
			r->other_rc++;
	}
	return NULL;
}

static void *race_work(void *arg)
{
	struct race *r = arg;
	uint32_t b[4];

	while (!r->stop) {
		uint32_t n = 1 + (uint32_t)(r->leases % 4);
		int ret = kvt_lease(r->fd, n, 0, 0, b);

		if (ret != (int)n) {
			r->bad++;
			continue;
		}
		/*
		 * Release exactly what we got; every other time with
		 * RELEASE_ALL, which must not see the other thread's blocks
		 * (they are not its until its LEASE returns).
		 */
		ret = r->leases++ % 2 ? kvt_release(r->fd, b, n) :
					kvt_release_all(r->fd);
		if (ret != (int)n)
			r->lost++;	/* a block was taken from under us */
	}
	return NULL;
}

static int race_child(struct race *out)
{
	struct race r = { 0 };
	pthread_t a, w;
	uint64_t t0;

	if (kvt_drop(KVT_UID, KVT_GID))
		return 2;
	r.fd = kvt_open();
	if (r.fd < 0)
		return 3;
	r.ro = ro_page();
	if (pthread_create(&a, NULL, race_fault, &r) ||
	    pthread_create(&w, NULL, race_work, &r))
		return 4;
	t0 = kvt_now_ns();
	while (kvt_now_ns() - t0 < RACE_NS)
		kvt_msleep(50);
	r.stop = 1;
	pthread_join(a, NULL);
	pthread_join(w, NULL);
	*out = r;
	{
		struct kvpool_status st;

		if (kvt_status(r.fd, &st) || st.held)
			return 5;
	}
	close(r.fd);
	return 0;
}

static void test_race(void)
{
	struct race *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	long long used0 = kvt_sysfs_num(POOL, NULL, "used");
	pid_t pid;
	int st;

	if (sh == MAP_FAILED)
		kvt_die("mmap");
	memset(sh, 0, sizeof(*sh));
	fflush(stdout);
	pid = fork();
	if (!pid)
		_exit(race_child(sh));
	st = kvt_wait(pid);
	printf("# race: %lu faulting leases, %lu leases+releases, %lu lost, %lu bad, %lu other\n",
	       sh->faults, sh->leases, sh->lost, sh->bad, sh->other_rc);
	CHECK(st == 0, "race child as uid %d ended with held 0 (exit %d)", KVT_UID, st);
	CHECK(sh->faults > 100 && sh->leases > 100,
	      "both threads ran (%lu faults, %lu leases)", sh->faults, sh->leases);
	CHECK(sh->other_rc == 0, "every read-only LEASE failed with EFAULT (%lu others)",
	      sh->other_rc);
	CHECK(sh->lost == 0, "no block was taken from the other thread (%lu releases failed)",
	      sh->lost);
	CHECK(sh->bad == 0, "every lease of the working thread succeeded (%lu failed)", sh->bad);
	CHECK(kvt_sysfs_num(POOL, NULL, "used") == used0, "used back to %lld", used0);
	CHECK(kvt_sysfs_num(POOL, "uid-1000", "blocks.current") == 0, "uid-1000 current 0");
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	int owner, warn0;

	kvt_init("copyout");
	warn0 = kvt_klog_count("WARNING:");
	if (warn0 < 0) {
		printf("# cannot read the kernel log: %s\n", strerror(-warn0));
		return 77;
	}
	owner = kvt_setup_pool(POOL, CAP, 8, CAP, KVPOOL_UNLIMITED);
	test_readonly();
	test_pinned(owner);
	test_cancel_target(owner);
	test_readonly_struct();
	test_race();
	CHECK(kvt_sysfs_num(POOL, NULL, "used") == 0, "used 0 at the end");
	CHECK(kvt_klog_count("WARNING:") == warn0, "no WARNING in the kernel log (%d before, %d after)",
	      warn0, kvt_klog_count("WARNING:"));
	close(owner);
	return kvt_done();
}
