// SPDX-License-Identifier: MIT
/*
 * Stress: KVT_WORKERS processes run KVT_OPS random lease/release operations
 * each (non-blocking, partial and short timed leases, partial releases,
 * release-all) against a small pool with quotas and a protected tenant;
 * KVT_VICTIMS more are killed with SIGKILL midway.  A sampler process reads
 * sysfs all along and checks that no tenant's blocks.current ever exceeds
 * its blocks.max.  Afterwards used is 0, every tenant's current is 0 and no
 * tenant's peak exceeded its max.  The module runs with check_invariants,
 * so a broken ledger invariant is a WARNING in the kernel log.
 */
#include <sys/mman.h>

#include "kvt.h"

#define KVT_WORKERS	32
#define KVT_VICTIMS	8
#define KVT_OPS		10000
#define KVT_CAPACITY	128
#define KVT_NT		4
#define KVT_MAXHELD	64

static const char *const tnames[KVT_NT] = { "q0", "q1", "q2", "q3" };
static const uint32_t tmax[KVT_NT] = { 24, 48, 64, 96 };
static const uint32_t tmin[KVT_NT] = { 0, 24, 0, 0 };

struct shared {
	volatile uint64_t ops[KVT_WORKERS + KVT_VICTIMS];
	volatile int stop_sampler;
	volatile uint64_t samples;
	volatile uint64_t violations;
	volatile uint64_t max_seen[KVT_NT];
};

static uint32_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 11);
}

static int worker(int id, struct shared *sh)
{
	uint32_t held[KVT_MAXHELD + 8], got[8], rel[KVT_MAXHELD];
	uint8_t mine[KVT_CAPACITY] = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1);
	int fd = kvt_open(), nheld = 0, ret, i;
	uint64_t op, nops = id < KVT_WORKERS ? KVT_OPS : UINT64_MAX;	/* victims run until killed */

	if (fd < 0 || kvt_attach(fd, "px", tnames[id % KVT_NT])) {
		printf("# worker %d: cannot attach\n", id);
		return 1;
	}
	for (op = 0; op < nops; op++) {
		uint32_t r = rnd(&seed) % 100;

		sh->ops[id] = op;
		if (nheld < KVT_MAXHELD - 8 && (r < 55 || !nheld)) {
			uint32_t k = 1 + rnd(&seed) % 8, flags;
			uint64_t timeout = 0;

			if (r % 5 == 0) {
				flags = 0;
				timeout = 1000000;	/* 1 ms */
			} else if (r % 5 == 1) {
				flags = KVPOOL_LEASE_PARTIAL | KVPOOL_LEASE_NONBLOCK;
			} else {
				flags = KVPOOL_LEASE_NONBLOCK;
			}
			ret = kvt_lease(fd, k, flags, timeout, got);
			if (ret == -EAGAIN || ret == -EDQUOT || ret == -ETIMEDOUT)
				continue;
			if (ret <= 0 || (uint32_t)ret > k ||
			    (!(flags & KVPOOL_LEASE_PARTIAL) && (uint32_t)ret != k)) {
				printf("# worker %d: lease %u (flags %u) -> %d\n", id, k, flags, ret);
				return 1;
			}
			for (i = 0; i < ret; i++) {
				if (got[i] >= KVT_CAPACITY || mine[got[i]]) {
					printf("# worker %d: bad block %u\n", id, got[i]);
					return 1;
				}
				mine[got[i]] = 1;
				held[nheld++] = got[i];
			}
		} else if (r >= 97) {
			ret = kvt_release_all(fd);
			if (ret != nheld) {
				printf("# worker %d: release all -> %d, held %d\n", id, ret, nheld);
				return 1;
			}
			memset(mine, 0, sizeof(mine));
			nheld = 0;
		} else {
			int n = 1 + (int)(rnd(&seed) % (uint32_t)nheld);

			for (i = 0; i < n; i++) {
				int j = (int)(rnd(&seed) % (uint32_t)nheld);

				rel[i] = held[j];
				held[j] = held[--nheld];
				mine[rel[i]] = 0;
			}
			ret = kvt_release(fd, rel, (uint32_t)n);
			if (ret != n) {
				printf("# worker %d: release %d -> %d\n", id, n, ret);
				return 1;
			}
		}
	}
	sh->ops[id] = op;
	close(fd);
	return 0;
}

static int sampler(struct shared *sh)
{
	while (!sh->stop_sampler) {
		int t;

		for (t = 0; t < KVT_NT; t++) {
			long long cur = kvt_sysfs_num("px", tnames[t], "blocks.current");

			if (cur < 0 || cur > tmax[t])
				sh->violations++;
			if (cur > (long long)sh->max_seen[t])
				sh->max_seen[t] = (uint64_t)cur;
		}
		if (kvt_sysfs_num("px", NULL, "used") > KVT_CAPACITY)
			sh->violations++;
		sh->samples++;
	}
	return 0;
}

int main(void)
{
	pid_t pids[KVT_WORKERS + KVT_VICTIMS], spid;
	struct shared *sh;
	uint64_t t0, total = 0;
	int owner, i, t, bad = 0, killed = 0;

	kvt_init("stress");
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		kvt_die("mmap");
	memset(sh, 0, sizeof(*sh));
	owner = kvt_setup_pool("px", KVT_CAPACITY, 32, KVT_CAPACITY, KVPOOL_UNLIMITED);
	for (t = 0; t < KVT_NT; t++)
		kvt_tenant_new("px", tnames[t], tmax[t], tmin[t], KVT_UID,
			       KVPOOL_ID_NONE);

	fflush(stdout);
	spid = fork();
	if (!spid)
		_exit(sampler(sh));
	t0 = kvt_now_ns();
	for (i = 0; i < KVT_WORKERS + KVT_VICTIMS; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			kvt_die("fork");
		if (!pids[i]) {
			/* Half the workers run unprivileged. */
			if (i % 2 && kvt_drop(KVT_UID, KVT_GID))
				_exit(2);
			_exit(worker(i, sh));
		}
	}
	/* Kill the victims once they are well into their run. */
	for (i = KVT_WORKERS; i < KVT_WORKERS + KVT_VICTIMS; i++) {
		uint64_t at = 1000 + (uint64_t)(i - KVT_WORKERS) * 700;
		int spins = 0;

		while (sh->ops[i] < at && spins++ < 60000)
			kvt_msleep(5);
		kill(pids[i], SIGKILL);
	}
	for (i = 0; i < KVT_WORKERS + KVT_VICTIMS; i++) {
		int st = kvt_wait(pids[i]);

		total += sh->ops[i];
		if (i >= KVT_WORKERS) {
			killed += st == 128 + SIGKILL;
			continue;
		}
		if (st != 0)
			bad++;
	}
	sh->stop_sampler = 1;
	kvt_wait(spid);

	printf("# stress: %d workers x %d ops + %d killed, %llu ops in %.1f s, %llu sysfs samples\n",
	       KVT_WORKERS, KVT_OPS, KVT_VICTIMS, (unsigned long long)total,
	       (double)(kvt_now_ns() - t0) / 1e9, (unsigned long long)sh->samples);
	CHECK(bad == 0, "%d workers completed %d ops each (%d failed)", KVT_WORKERS, KVT_OPS, bad);
	CHECK(killed == KVT_VICTIMS, "%d workers killed midway (%d)", KVT_VICTIMS, killed);
	CHECK(sh->samples > 0, "the sampler read sysfs %llu times",
	      (unsigned long long)sh->samples);
	CHECK(sh->violations == 0, "no sample saw a tenant above its max (%llu violations)",
	      (unsigned long long)sh->violations);
	CHECK(kvt_sysfs_num("px", NULL, "used") == 0, "used 0 after everything closed");
	for (t = 0; t < KVT_NT; t++) {
		long long peak = kvt_sysfs_num("px", tnames[t], "blocks.peak");

		CHECK(kvt_sysfs_num("px", tnames[t], "blocks.current") == 0,
		      "%s current 0", tnames[t]);
		CHECK(peak >= 0 && peak <= tmax[t], "%s peak %lld <= max %u (sampled max %llu)",
		      tnames[t], peak, tmax[t], (unsigned long long)sh->max_seen[t]);
		CHECK(kvt_sysfs_event("px", tnames[t], "max") >= 0, "%s events: max %lld stall %lld fail %lld",
		      tnames[t], kvt_sysfs_event("px", tnames[t], "max"),
		      kvt_sysfs_event("px", tnames[t], "stall"),
		      kvt_sysfs_event("px", tnames[t], "fail"));
	}
	/* Every dead client produced a close event for the owner. */
	CHECK(kvt_count_events(owner, KVPOOL_EVENT_CLIENT_CLOSED, NULL) ==
	      KVT_WORKERS + KVT_VICTIMS, "one CLIENT_CLOSED per worker");
	close(owner);
	return kvt_done();
}
