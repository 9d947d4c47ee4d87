// SPDX-License-Identifier: MIT
/*
 * compat_ioctl: the same ioctls from a 32-bit (i386) program.  Built with
 * -m32 when the compiler can (gcc-multilib); every struct must have the
 * same layout for 32- and 64-bit callers, so the values must round-trip.
 */
#include "kvt.h"

_Static_assert(sizeof(void *) == 4, "build this test with -m32");
_Static_assert(sizeof(struct kvpool_features) == 48, "kvpool_features layout");
_Static_assert(sizeof(struct kvpool_pool_create) == 96, "kvpool_pool_create layout");
_Static_assert(sizeof(struct kvpool_lease_req) == 48, "kvpool_lease_req layout");
_Static_assert(sizeof(struct kvpool_status) == 168, "kvpool_status layout");
_Static_assert(sizeof(struct kvpool_event) == 80, "kvpool_event layout");
_Static_assert(sizeof(struct kvpool_lease_info) == 56, "kvpool_lease_info layout");
_Static_assert(sizeof(struct kvpool_snapshot) == 64, "kvpool_snapshot layout");
_Static_assert(sizeof(struct kvpool_lease_move) == 56, "kvpool_lease_move layout");
_Static_assert(sizeof(struct kvpool_fd_deposit) == 32, "kvpool_fd_deposit layout");
_Static_assert(sizeof(struct kvpool_fd_fetch) == 40, "kvpool_fd_fetch layout");
_Static_assert(sizeof(struct kvpool_fd_drop) == 32, "kvpool_fd_drop layout");
_Static_assert(sizeof(struct kvpool_lease_keep) == 32, "kvpool_lease_keep layout");
_Static_assert(sizeof(struct kvpool_lease_adopt) == 32, "kvpool_lease_adopt layout");

int main(void)
{
	struct kvpool_features f;
	struct kvpool_status st;
	struct kvpool_snapshot s;
	struct kvpool_lease_info li[2];
	struct kvpool_block_owner bo[8];
	struct kvpool_lease_check lc;
	struct kvpool_event ev;
	uint32_t b[8], q[2];
	int owner, c, cache_fd;

	kvt_init("compat");
	owner = kvt_open_or_die();
	memset(&f, 0, sizeof(f));
	f.requested = KVPOOL_FEAT_WAIT;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FEATURES, &f), 0, "32-bit FEATURES");
	CHECK(f.supported == KVPOOL_FEATURES_ALL && f.enabled == KVPOOL_FEAT_WAIT,
	      "features round-trip");
	CHECK_RET(kvt_pool_create(owner, "p32", 8192, 16, 4, KVPOOL_UNLIMITED), 0,
		  "32-bit POOL_CREATE");
	CHECK_RET(kvt_grow(owner, 8, 0), 0, "32-bit POOL_GROW");
	c = kvt_open_or_die();
	CHECK_RET(kvt_attach(c, "p32", ""), 0, "32-bit TENANT_ATTACH");
	CHECK_RET(kvt_lease(c, 5, 0, 0, b), 5, "32-bit LEASE");
	CHECK(b[0] == 0 && b[4] == 4, "blocks written through a 32-bit pointer");
	CHECK_RET(kvt_lease(c, 6, KVPOOL_LEASE_PARTIAL | KVPOOL_LEASE_NONBLOCK, 0, b + 5), 3,
		  "32-bit PARTIAL");
	CHECK_RET(kvt_lease(c, 1, 0, 50000000ULL, q), -ETIMEDOUT,
		  "32-bit timed wait (u64 timeout)");
	CHECK_RET(kvt_status(c, &st), 0, "32-bit STATUS");
	CHECK(!strcmp(st.pool, "p32") && st.block_bytes == 8192 && st.capacity == 16 &&
	      st.backed == 8 && st.used == 8 && st.held == 8 && st.epoch == 1 &&
	      st.tenant_max == KVPOOL_UNLIMITED && st.state == KVPOOL_STATE_LIVE,
	      "status fields round-trip");

	memset(&s, 0, sizeof(s));
	s.leases_ptr = (uintptr_t)li;
	s.blocks_ptr = (uintptr_t)bo;
	s.leases_cap = 2;
	s.blocks_cap = 8;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_SNAPSHOT, &s), 0, "32-bit SNAPSHOT");
	CHECK(s.leases == 1 && s.blocks == 8 && li[0].lease_id == st.lease_id &&
	      li[0].blocks == 8 && bo[7].block == 7 && bo[7].lease_id == st.lease_id,
	      "snapshot arrays round-trip");
	q[0] = 1;
	q[1] = 12;
	memset(&lc, 0, sizeof(lc));
	lc.blocks_ptr = (uintptr_t)q;
	lc.lease_id = st.lease_id;
	lc.count = 2;
	CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_CHECK, &lc), -EPERM, "32-bit LEASE_CHECK");
	CHECK(lc.bad_index == 1, "bad_index round-trips");
	{
		struct kvpool_lease_move m;
		struct kvpool_tenant_attach ta;
		struct kvpool_status cs;
		int cache = kvt_open_or_die();

		memset(&ta, 0, sizeof(ta));
		strcpy(ta.pool, "p32");
		ta.flags = KVPOOL_ATTACH_RECLAIM_FIRST;
		CHECK_RET(kvt_ioctl(cache, KVPOOL_IOC_TENANT_ATTACH, &ta), 0,
			  "32-bit TENANT_ATTACH with a reclaim order");
		memset(&m, 0, sizeof(m));
		m.blocks_ptr = (uintptr_t)q;
		m.from_lease = st.lease_id;
		m.to_lease = ta.lease_id;
		m.count = 2;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), -EPERM,
			  "32-bit LEASE_MOVE of a block not held");
		CHECK(m.bad_index == 1, "its bad_index round-trips");
		q[1] = 7;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_LEASE_MOVE, &m), 0,
			  "32-bit LEASE_MOVE");
		CHECK(kvt_status(cache, &cs) == 0 && cs.held == 2,
		      "the moved blocks are the other file's");
		cache_fd = cache;
	}
	{
		struct kvpool_fd_deposit d;
		struct kvpool_fd_fetch fe;
		struct kvpool_fd_drop dr;
		struct kvpool_lease_keep k;
		struct kvpool_lease_adopt a;
		int null = open("/dev/null", O_RDWR | O_CLOEXEC), n;

		memset(&d, 0, sizeof(d));
		d.tag = 0x1122334455667788ULL;
		d.fd = null;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DEPOSIT, &d), 0,
			  "32-bit FD_DEPOSIT");
		memset(&fe, 0, sizeof(fe));
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_FETCH, &fe), 0,
			  "32-bit FD_FETCH");
		CHECK(fe.tag == d.tag && fe.count == 1 && fe.fd > null,
		      "tag (u64), count and fd round-trip");
		close(fe.fd);
		memset(&dr, 0, sizeof(dr));
		dr.tag = KVPOOL_TAG_ALL;
		CHECK_RET(kvt_ioctl(owner, KVPOOL_IOC_FD_DROP, &dr), 0,
			  "32-bit FD_DROP");
		close(null);

		memset(&k, 0, sizeof(k));
		k.owner_fd = owner;
		k.flags = KVPOOL_KEEP_ON;
		CHECK_RET(kvt_ioctl(cache_fd, KVPOOL_IOC_LEASE_KEEP, &k), 0,
			  "32-bit LEASE_KEEP");
		CHECK(k.lease_id != 0 && k.lease_id != st.lease_id,
		      "lease_id round-trips");
		close(cache_fd);
		cache_fd = kvt_open_or_die();
		memset(&a, 0, sizeof(a));
		a.owner_fd = owner;
		a.lease_id = k.lease_id;
		CHECK_RET(kvt_ioctl(cache_fd, KVPOOL_IOC_LEASE_ADOPT, &a), 0,
			  "32-bit LEASE_ADOPT of the parked lease");
		n = kvt_release_all(cache_fd);
		k.flags = 0;
		CHECK(n == 2 && !kvt_ioctl(cache_fd, KVPOOL_IOC_LEASE_KEEP, &k),
		      "its 2 blocks released, unmarked");
	}
	CHECK_RET(kvt_release(c, b + 2, 2), 2, "32-bit RELEASE");
	CHECK_RET(kvt_release_all(c), 4, "32-bit RELEASE_ALL");
	close(c);
	CHECK(kvt_find_event(owner, KVPOOL_EVENT_CLIENT_CLOSED, &ev) &&
	      ev.lease_id == st.lease_id, "32-bit read() of an event record");
	close(cache_fd);
	close(owner);
	return kvt_done();
}
