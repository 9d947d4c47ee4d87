// SPDX-License-Identifier: MIT
/*
 * Quotas and protection through sysfs: blocks.max (refused with -EDQUOT),
 * blocks.min (protected against another tenant; never above a finite
 * blocks.max), blocks.peak and its reset, a new max recomputing the
 * reclaim targets (raised to current: withdrawn, POLLPRI cleared),
 * blocks.events counters, lowering blocks.max below blocks.current (grants
 * refused, reclaim posted), bad writes (-EINVAL, nothing changed) and
 * writes without CAP_SYS_ADMIN.
 */
#include <linux/capability.h>
#include <sys/syscall.h>

#include "kvt.h"

/* Drop CAP_SYS_ADMIN from this (root) process, keeping the others. */
static int drop_sys_admin(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		return -errno;
	d[CAP_SYS_ADMIN / 32].effective &= ~(1U << (CAP_SYS_ADMIN % 32));
	d[CAP_SYS_ADMIN / 32].permitted &= ~(1U << (CAP_SYS_ADMIN % 32));
	if (syscall(SYS_capset, &h, d))
		return -errno;
	return 0;
}

static void test_files(void)
{
	char buf[64];
	struct stat sb;
	pid_t pid;

	CHECK(kvt_sysfs_num("pq", "ta", "blocks.max") == 10, "ta blocks.max 10");
	CHECK(kvt_read_file(kvt_path("pq", "tc", "blocks.max"), buf, sizeof(buf)) > 0 &&
	      !strcmp(buf, "max\n"), "unlimited blocks.max reads \"max\"");
	CHECK(kvt_sysfs_num("pq", "tb", "blocks.min") == 12, "tb blocks.min 12");
	CHECK(kvt_read_file(kvt_path("pq", "ta", "blocks.events"), buf, sizeof(buf)) > 0 &&
	      !strcmp(buf, "max 0\nstall 0\nreclaim 0\nfail 0\n"),
	      "blocks.events lists max, stall, reclaim, fail");
	CHECK(stat(kvt_path("pq", "ta", "blocks.max"), &sb) == 0 &&
	      (sb.st_mode & 0777) == 0644, "blocks.max mode 0644");
	CHECK(stat(kvt_path("pq", "ta", "blocks.current"), &sb) == 0 &&
	      (sb.st_mode & 0777) == 0444, "blocks.current mode 0444");
	CHECK(stat(kvt_path("pq", NULL, "used"), &sb) == 0 &&
	      (sb.st_mode & 0777) == 0444, "pool used mode 0444");

	CHECK_RET(kvt_sysfs_set("pq", "tc", "blocks.max", "20\n"), 0, "write blocks.max 20");
	CHECK(kvt_sysfs_num("pq", "tc", "blocks.max") == 20, "blocks.max now 20");
	CHECK_RET(kvt_sysfs_set("pq", "tc", "blocks.max", "max"), 0, "write blocks.max max");
	CHECK(kvt_sysfs_num("pq", "tc", "blocks.max") == KVPOOL_UNLIMITED, "blocks.max max again");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "abc"), -EINVAL, "blocks.max garbage");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "-1"), -EINVAL, "blocks.max negative");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "5 6"), -EINVAL, "blocks.max two words");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "33"), -EINVAL,
		  "blocks.max above capacity");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "99999999999"), -EINVAL,
		  "blocks.max overflow");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "4294967295"), -EINVAL,
		  "blocks.max 4294967295: only the word max means unlimited");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.max") == 10, "bad writes changed nothing");
	/* min above a finite max is refused, from either side. */
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.min", "11"), -EINVAL,
		  "blocks.min above blocks.max");
	CHECK_RET(kvt_sysfs_set("pq", "tb", "blocks.max", "11"), -EINVAL,
		  "blocks.max below blocks.min");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.min") == 0 &&
	      kvt_sysfs_num("pq", "tb", "blocks.max") == KVPOOL_UNLIMITED,
	      "min > max refusals changed nothing");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.min", "10"), 0, "blocks.min equal to blocks.max");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.min", "0"), 0, "blocks.min back to 0");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.min", "max"), -EINVAL, "blocks.min max");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.min", "40"), -EINVAL, "blocks.min above capacity");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.min") == 0, "blocks.min unchanged");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.peak", "5"), -EINVAL, "blocks.peak non-zero");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.current", "0"), -EACCES,
		  "blocks.current is read-only");
	CHECK_RET(kvt_sysfs_set("pq", NULL, "used", "0"), -EACCES, "pool used is read-only");

	pid = fork();
	if (!pid) {
		if (drop_sys_admin())
			_exit(100);
		_exit(-kvt_sysfs_set("pq", "ta", "blocks.max", "3"));
	}
	CHECK(kvt_wait(pid) == EPERM, "root without CAP_SYS_ADMIN: write refused -EPERM");
	pid = fork();
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(100);
		_exit(-kvt_sysfs_set("pq", "ta", "blocks.max", "3"));
	}
	CHECK(kvt_wait(pid) == EACCES, "unprivileged user: write refused -EACCES");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.max") == 10, "refused writes changed nothing");
}

static void test_quota(void)
{
	int a1 = kvt_open_or_die(), b1 = kvt_open_or_die(), c1 = kvt_open_or_die();
	uint32_t b[32];
	struct kvpool_status st;
	struct pollfd p;

	CHECK_RET(kvt_attach(a1, "pq", "ta"), 0, "a1 in ta");
	CHECK_RET(kvt_attach(b1, "pq", "tb"), 0, "b1 in tb");
	CHECK_RET(kvt_attach(c1, "pq", "tc"), 0, "c1 in tc");

	/* max */
	CHECK_RET(kvt_lease(a1, 11, 0, 0, b), -EDQUOT, "lease above max: -EDQUOT at once");
	CHECK_RET(kvt_lease(a1, 10, 0, 0, b), 10, "lease up to max");
	CHECK_RET(kvt_lease(a1, 1, 0, 0, b + 10), -EDQUOT, "one more: -EDQUOT");
	CHECK_RET(kvt_lease(a1, 4, KVPOOL_LEASE_PARTIAL, 0, b + 10), -EDQUOT,
		  "PARTIAL at max: -EDQUOT");
	CHECK(kvt_sysfs_event("pq", "ta", "max") == 3, "events max counts 3 refusals (got %lld)",
	      kvt_sysfs_event("pq", "ta", "max"));
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.current") == 10, "ta current 10");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.peak") == 10, "ta peak 10");

	/* min: tb's 12 blocks are protected from tc. 32 - 10 = 22 free. */
	CHECK_RET(kvt_lease(c1, 11, KVPOOL_LEASE_NONBLOCK, 0, b + 10), -EAGAIN,
		  "tc cannot eat into tb's min");
	CHECK(kvt_sysfs_event("pq", "tc", "fail") == 1, "tc events fail 1");
	CHECK_RET(kvt_lease(c1, 11, KVPOOL_LEASE_PARTIAL, 0, b + 10), 10,
		  "tc PARTIAL gets only the unprotected 10");
	CHECK(kvt_sysfs_num("pq", NULL, "used") == 20, "used 20");
	CHECK_RET(kvt_lease(b1, 12, KVPOOL_LEASE_NONBLOCK, 0, b + 20), 12,
		  "tb gets its protected 12");
	CHECK(kvt_sysfs_num("pq", NULL, "used") == 32, "pool full");
	CHECK_RET(kvt_lease(b1, 1, KVPOOL_LEASE_NONBLOCK, 0, b), -EAGAIN, "pool full: -EAGAIN");

	/* peak reset */
	CHECK_RET(kvt_release(a1, b, 5), 5, "ta releases 5");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.peak") == 10, "peak stays 10");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.peak", "0"), 0, "write 0 to blocks.peak");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.peak") == 5, "peak reset to current 5");

	/* Lowering max below current: grants refused, reclaim posted. */
	p.fd = a1;
	p.events = POLLPRI;
	CHECK(poll(&p, 1, 0) == 0, "no POLLPRI before");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "2"), 0,
		  "lower blocks.max below blocks.current");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.current") == 5, "current unchanged (5)");
	CHECK_RET(kvt_lease(a1, 1, KVPOOL_LEASE_NONBLOCK, 0, b), -EDQUOT,
		  "grant refused above the lowered max");
	CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLPRI), "POLLPRI on the tenant's file");
	CHECK_RET(kvt_status(a1, &st), 0, "STATUS");
	CHECK(st.reclaim_target == 3, "reclaim target 3 (got %u)", st.reclaim_target);
	CHECK(kvt_sysfs_event("pq", "ta", "reclaim") == 1, "events reclaim 1");
	/* A new max recomputes the target: raised above current, none. */
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "4"), 0, "raise blocks.max to 4");
	CHECK(!kvt_status(a1, &st) && st.reclaim_target == 1,
	      "target now the excess over 4: 1 (got %u)", st.reclaim_target);
	CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLPRI), "POLLPRI still raised");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "5"), 0,
		  "raise blocks.max to current (5)");
	CHECK(!kvt_status(a1, &st) && st.reclaim_target == 0, "target withdrawn (got %u)",
	      st.reclaim_target);
	CHECK(poll(&p, 1, 0) == 0, "POLLPRI cleared by raising max");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "2"), 0, "lower blocks.max to 2 again");
	CHECK(!kvt_status(a1, &st) && st.reclaim_target == 3, "target 3 again (got %u)",
	      st.reclaim_target);
	CHECK_RET(kvt_release(a1, b + 5, 3), 3, "give back 3");
	CHECK_RET(kvt_status(a1, &st), 0, "STATUS");
	CHECK(st.reclaim_target == 0, "target cleared");
	CHECK(poll(&p, 1, 0) == 0, "POLLPRI cleared");
	CHECK_RET(kvt_sysfs_set("pq", "ta", "blocks.max", "max"), 0, "ta unlimited again");
	CHECK_RET(kvt_lease(a1, 3, 0, 0, b), 3, "grants resume");

	close(a1);
	close(b1);
	close(c1);
	CHECK(kvt_sysfs_num("pq", NULL, "used") == 0, "used 0 after close");
	CHECK(kvt_sysfs_num("pq", "ta", "blocks.current") == 0 &&
	      kvt_sysfs_num("pq", "tb", "blocks.current") == 0 &&
	      kvt_sysfs_num("pq", "tc", "blocks.current") == 0, "every tenant's current 0");
}

int main(void)
{
	int owner;

	kvt_init("sysfs");
	owner = kvt_setup_pool("pq", 32, 8, 32, KVPOOL_UNLIMITED);
	kvt_tenant_new("pq", "ta", 10, 0, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	kvt_tenant_new("pq", "tb", KVPOOL_UNLIMITED, 12, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	kvt_tenant_new("pq", "tc", KVPOOL_UNLIMITED, 0, KVPOOL_ID_NONE, KVPOOL_ID_NONE);
	test_files();
	test_quota();
	close(owner);
	return kvt_done();
}
