// SPDX-License-Identifier: MIT
/*
 * Failed copy-outs leave the ledger as it was.  LEASE hands its blocks
 * over only once both the block array and the struct were written; a fault
 * returns exactly this call's blocks, whatever the owner (pins) and other
 * threads of the same file (releases, leases) do meanwhile.  The other
 * ioctls check that their struct can be written back before changing
 * anything.  Every case compares held (STATUS), used and blocks.current
 * (sysfs) before and after, and the kernel log must gain no WARNING.
 */
#include <pthread.h>
#include <sys/mman.h>

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
	test_readonly_struct();
	test_race();
	CHECK(kvt_sysfs_num(POOL, NULL, "used") == 0, "used 0 at the end");
	CHECK(kvt_klog_count("WARNING:") == warn0, "no WARNING in the kernel log (%d before, %d after)",
	      warn0, kvt_klog_count("WARNING:"));
	close(owner);
	return kvt_done();
}
