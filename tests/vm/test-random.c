// SPDX-License-Identifier: MIT
/*
 * Random ioctl sequences from many processes and threads at once, judged by
 * the ledger's own invariant walk (the module runs with check_invariants=1:
 * every unlock walks the whole pool and WARNs on a broken invariant) and by
 * the kernel log.
 *
 * An owner process answers GROW records (or says it cannot grow), shrinks
 * at random, takes snapshots and pins random leases for a moment as the
 * daemon's data plane does, and throws invalid ioctls at its own file; it
 * is killed once midway and a new owner re-attaches.  Client processes
 * (half of them as uid 1000) run several threads on each of their files:
 * leases of every kind (partial, non-blocking, timed, orphan-fail, into
 * read-only or bad arrays), releases of held, foreign and random indices,
 * release-all, status, attach to tenants they may or may not use, and
 * random command numbers with random struct contents.  The parent kills
 * clients with SIGKILL at random and starts new ones.  At the end every
 * block is back: used 0, every tenant's current 0, and no WARNING.
 */
#include <pthread.h>
#include <sys/mman.h>

#include "kvt.h"

#define POOL		"pr"
#define CAP		128
#define CHUNK		16
#define NCLIENTS	6
#define NFILES		2	/* per client process */
#define NTHREADS	3	/* per file */
#define RUN_NS		12000000000ULL
#define NT		4

static const char *const tnames[NT] = { "r0", "r1", "r2", "r3" };
static const uint32_t tmax[NT] = { 32, 64, KVPOOL_UNLIMITED, 16 };
static const uint32_t tmin[NT] = { 0, 16, 8, 0 };
static const uint32_t tuid[NT] = { KVT_UID, KVT_UID, 0, 0 };

struct shared {
	volatile int stop;
	volatile uint64_t ops, efault, granted, pins, grows, shrinks;
};

static struct shared *sh;

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#define RN(s, n) ((uint32_t)(rnd(s) % (n)))

/* ---- clients ---------------------------------------------------------- */

struct worker {
	int fd;
	uint64_t seed;
	uint32_t *ro;		/* a read-only page */
};

static void random_ioctl(struct worker *w)
{
	union {
		uint8_t raw[256];
		struct kvpool_lease_req lease;
		struct kvpool_release rel;
	} u;
	unsigned int nr = RN(&w->seed, 14), size = RN(&w->seed, 5) * 16;
	unsigned long cmd;
	uint32_t i;

	for (i = 0; i < sizeof(u.raw); i++)
		u.raw[i] = RN(&w->seed, 4) ? 0 : (uint8_t)rnd(&w->seed);
	/* Keep pointers harmless: inside our own buffers, or bad. */
	switch (RN(&w->seed, 3)) {
	case 0: u.lease.blocks_ptr = (uintptr_t)w->ro; break;
	case 1: u.lease.blocks_ptr = 8; break;
	default: u.lease.blocks_ptr = (uintptr_t)u.raw; break;
	}
	if (u.lease.count > 16)
		u.lease.count = u.lease.count % 16;
	u.lease.timeout_ns = 1000000;
	/* No random pools: their capacity could be anything. */
	if (nr == _IOC_NR(KVPOOL_IOC_POOL_CREATE) ||
	    nr == _IOC_NR(KVPOOL_IOC_POOL_ATTACH))
		u.raw[0] = '-';
	if (RN(&w->seed, 2))
		cmd = _IOC(RN(&w->seed, 4), KVPOOL_IOC_MAGIC, nr, size);
	else
		cmd = _IOWR(KVPOOL_IOC_MAGIC, nr, struct kvpool_lease_req);
	ioctl(w->fd, cmd, &u);
}

static void client_op(struct worker *w, uint32_t *held, uint32_t *nheld)
{
	uint32_t b[16], r = RN(&w->seed, 100), n, flags, i;
	struct kvpool_status st;
	int ret;

	sh->ops++;
	if (r < 40) {
		n = 1 + RN(&w->seed, 8);
		flags = RN(&w->seed, 8) & KVPOOL_LEASE_FLAGS;
		ret = kvt_lease(w->fd, n, flags, 1000000 + RN(&w->seed, 4000000),
				RN(&w->seed, 10) ? b : w->ro);
		if (ret == -EFAULT)
			sh->efault++;
		for (i = 0; ret > 0 && i < (uint32_t)ret && *nheld < 64; i++)
			held[(*nheld)++] = b[i];
		if (ret > 0)
			sh->granted += ret;
	} else if (r < 70) {
		/* Held by us, by another thread of the file, or by no one. */
		n = *nheld ? 1 + RN(&w->seed, *nheld) : 1;
		for (i = 0; i < n && i < 16; i++)
			b[i] = *nheld && RN(&w->seed, 8) ?
			       held[RN(&w->seed, *nheld)] : RN(&w->seed, CAP + 4);
		kvt_release(w->fd, b, i);
		*nheld = 0;
	} else if (r < 75) {
		kvt_release_all(w->fd);
		*nheld = 0;
	} else if (r < 82) {
		kvt_status(w->fd, &st);
	} else if (r < 85) {
		kvt_attach(w->fd, RN(&w->seed, 8) ? POOL : "nopool",
			   RN(&w->seed, 5) ? tnames[RN(&w->seed, NT)] : "");
	} else {
		random_ioctl(w);
	}
}

static void *client_thread(void *arg)
{
	struct worker w = *(struct worker *)arg;
	uint32_t held[64], nheld = 0;

	while (!sh->stop)
		client_op(&w, held, &nheld);
	return NULL;
}

static int client_main(uint64_t seed)
{
	struct worker w[NFILES][NTHREADS];
	pthread_t th[NFILES][NTHREADS];
	uint32_t *ro;
	int f, t;

	if ((seed & 1) && kvt_drop(KVT_UID, KVT_GID))
		return 2;
	ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED)
		return 3;
	for (f = 0; f < NFILES; f++) {
		int fd = kvt_open();

		if (fd < 0)
			return 4;
		if (seed % 3)
			kvt_attach(fd, POOL, tnames[seed % NT]);
		for (t = 0; t < NTHREADS; t++) {
			w[f][t].fd = fd;
			w[f][t].seed = seed * 7919 + (uint64_t)f * 31 + (uint64_t)t + 1;
			w[f][t].ro = ro;
			if (pthread_create(&th[f][t], NULL, client_thread, &w[f][t]))
				return 5;
		}
	}
	for (f = 0; f < NFILES; f++)
		for (t = 0; t < NTHREADS; t++)
			pthread_join(th[f][t], NULL);
	return 0;
}

/* ---- owner ------------------------------------------------------------- */

struct owner {
	int fd;
	uint64_t seed;
};

/* Answer GROW records, shrink at random, read the rest. */
static void *owner_events(void *arg)
{
	struct owner *o = arg;
	struct kvpool_event ev[4];

	while (!sh->stop) {
		struct pollfd pf = { .fd = o->fd, .events = POLLIN };
		ssize_t n;
		int i;

		if (!RN(&o->seed, 4)) {
			uint32_t to = RN(&o->seed, CAP / CHUNK + 1) * CHUNK;

			if (!kvt_shrink(o->fd, to))
				sh->shrinks++;
		}
		if (poll(&pf, 1, 20) <= 0)
			continue;
		n = read(o->fd, ev, sizeof(ev));
		for (i = 0; n > 0 && i < (int)(n / (ssize_t)sizeof(ev[0])); i++) {
			if (ev[i].type != KVPOOL_EVENT_GROW)
				continue;
			if (RN(&o->seed, 6)) {
				if (!kvt_grow(o->fd, ev[i].blocks, 0))
					sh->grows++;
			} else {
				kvt_grow(o->fd, 0, KVPOOL_GROW_FAILED);
			}
		}
	}
	return NULL;
}

/* Pin random leases' blocks for a moment, as the data plane does. */
static void *owner_pins(void *arg)
{
	static struct kvpool_lease_info li[64];
	static struct kvpool_block_owner bo[CAP];
	struct owner *o = arg;
	struct kvpool_snapshot s;

	while (!sh->stop) {
		struct kvpool_lease_check lc;
		struct kvpool_lease_unpin un;
		uint32_t blocks[8], n = 0, i, pick;
		uint64_t lease;

		memset(&s, 0, sizeof(s));
		s.leases_ptr = (uintptr_t)li;
		s.blocks_ptr = (uintptr_t)bo;
		s.leases_cap = 64;
		s.blocks_cap = CAP;
		if (kvt_ioctl(o->fd, KVPOOL_IOC_SNAPSHOT, &s) || !s.blocks)
			continue;
		pick = RN(&o->seed, s.blocks);
		lease = bo[pick].lease_id;
		for (i = 0; i < s.blocks && n < 8; i++)
			if (bo[i].lease_id == lease && RN(&o->seed, 2))
				blocks[n++] = bo[i].block;
		if (!n || RN(&o->seed, 10) == 0)
			blocks[n++] = RN(&o->seed, CAP);	/* maybe not its */
		memset(&lc, 0, sizeof(lc));
		lc.blocks_ptr = (uintptr_t)blocks;
		lc.lease_id = RN(&o->seed, 20) ? lease : lease + 1;
		lc.count = n;
		lc.flags = KVPOOL_LEASE_CHECK_PIN;
		if (kvt_ioctl(o->fd, KVPOOL_IOC_LEASE_CHECK, &lc))
			continue;
		sh->pins++;
		kvt_msleep(RN(&o->seed, 3));
		memset(&un, 0, sizeof(un));
		un.lease_id = lc.lease_id;
		kvt_ioctl(o->fd, KVPOOL_IOC_LEASE_UNPIN, &un);
		/* And something invalid now and then. */
		if (!RN(&o->seed, 8)) {
			un.lease_id = RN(&o->seed, 100);
			kvt_ioctl(o->fd, KVPOOL_IOC_LEASE_UNPIN, &un);
			kvt_grow(o->fd, RN(&o->seed, CAP + 8), RN(&o->seed, 3));
		}
	}
	return NULL;
}

static int owner_main(bool attach, uint64_t seed)
{
	struct owner o = { .seed = seed };
	pthread_t ev, pin;

	o.fd = kvt_open();
	if (o.fd < 0)
		return 2;
	if (attach ? kvt_pool_attach(o.fd, POOL, NULL) :
		     kvt_pool_create(o.fd, POOL, 4096, CAP, CHUNK, 48))
		return 3;
	if (pthread_create(&ev, NULL, owner_events, &o) ||
	    pthread_create(&pin, NULL, owner_pins, &o))
		return 4;
	pthread_join(ev, NULL);
	pthread_join(pin, NULL);
	return 0;
}

/* ---- parent ------------------------------------------------------------ */

static pid_t spawn(int (*fn)(bool, uint64_t), bool attach, uint64_t seed)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		kvt_die("fork");
	if (!pid)
		_exit(fn(attach, seed));
	return pid;
}

static int client_entry(bool unused, uint64_t seed)
{
	return client_main(seed);
}

int main(void)
{
	pid_t owner, clients[NCLIENTS];
	uint64_t seed = 0x5eed1234ULL, t0;
	int warn0, i, t, kills = 0, bad = 0, owner_kills = 0, st;
	bool owner_killed = false;

	kvt_init("random");
	warn0 = kvt_klog_count("WARNING:");
	if (warn0 < 0) {
		printf("# cannot read the kernel log: %s\n", strerror(-warn0));
		return 77;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		kvt_die("mmap");
	memset((void *)sh, 0, sizeof(*sh));
	printf("# seed %#llx\n", (unsigned long long)seed);
	owner = spawn(owner_main, false, seed);
	for (i = 0; i < 200 && access(KVT_SYSFS "/" POOL, F_OK); i++)
		kvt_msleep(10);
	for (t = 0; t < NT; t++)
		kvt_tenant_new(POOL, tnames[t], tmax[t], tmin[t], tuid[t],
			       KVPOOL_ID_NONE);
	for (i = 0; i < NCLIENTS; i++)
		clients[i] = spawn(client_entry, false, seed + (uint64_t)i);

	t0 = kvt_now_ns();
	while (kvt_now_ns() - t0 < RUN_NS) {
		kvt_msleep(100 + RN(&seed, 300));
		i = (int)RN(&seed, NCLIENTS);
		kill(clients[i], SIGKILL);
		kvt_wait(clients[i]);
		kills++;
		clients[i] = spawn(client_entry, false, rnd(&seed));
		/* Halfway: kill the owner; a new one re-attaches. */
		if (!owner_killed && kvt_now_ns() - t0 > RUN_NS / 2) {
			kill(owner, SIGKILL);
			kvt_wait(owner);
			owner_kills++;
			kvt_msleep(50);		/* grants wait while orphaned */
			owner = spawn(owner_main, true, rnd(&seed));
			owner_killed = true;
		}
	}
	sh->stop = 1;
	for (i = 0; i < NCLIENTS; i++) {
		st = kvt_wait(clients[i]);
		bad += st != 0;
	}
	st = kvt_wait(owner);
	printf("# random: %llu ops, %llu granted, %llu EFAULT, %llu pins, %llu grows, %llu shrinks, %d clients killed, owner killed %d\n",
	       (unsigned long long)sh->ops, (unsigned long long)sh->granted,
	       (unsigned long long)sh->efault, (unsigned long long)sh->pins,
	       (unsigned long long)sh->grows, (unsigned long long)sh->shrinks,
	       kills, owner_kills);
	CHECK(bad == 0, "every client that ran to the end exited 0 (%d did not)", bad);
	CHECK(st == 0, "the second owner exited 0 (%d)", st);
	CHECK(sh->ops > 10000 && sh->granted > 1000 && sh->pins > 100,
	      "the run did work (%llu ops, %llu granted, %llu pins)",
	      (unsigned long long)sh->ops, (unsigned long long)sh->granted,
	      (unsigned long long)sh->pins);
	CHECK(kvt_sysfs_num(POOL, NULL, "used") == 0, "used 0 once every client is gone");
	for (t = 0; t < NT; t++)
		CHECK(kvt_sysfs_num(POOL, tnames[t], "blocks.current") == 0,
		      "%s current 0", tnames[t]);
	CHECK(kvt_sysfs_num(POOL, "uid-0", "blocks.current") <= 0 &&
	      kvt_sysfs_num(POOL, "uid-1000", "blocks.current") <= 0,
	      "per-uid tenants current 0");
	CHECK(kvt_klog_count("broken invariant") == 0, "the invariant walk never failed");
	CHECK(kvt_klog_count("WARNING:") == warn0, "no WARNING in the kernel log");
	return kvt_done();
}
