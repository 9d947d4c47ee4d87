/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the ledger core's user-space tests: a host that counts
 * the callbacks the core makes.
 */
#ifndef LEDGER_TEST_H
#define LEDGER_TEST_H

#include "kvpool_ledger.h"

struct test_host {
	unsigned int owner_wakes;
	unsigned int waiter_wakes;
	unsigned int reclaim_wakes;
	unsigned int observed;
	unsigned int tenants_added;
	unsigned int tenants_removed;
	int fail_tenant_added;		/* error returned by tenant_added */
	struct kvpool_event last_observed;
	unsigned int observed_by_type[16];
	u64 owned[256];			/* blocks_owned: block -> lease id */
	unsigned int owned_calls;
};

static inline struct test_host *host_of(struct kvpool_pool *pool)
{
	return pool->host;
}

static inline void th_owner_wake(struct kvpool_pool *pool)
{
	host_of(pool)->owner_wakes++;
}

static inline void th_waiters_wake(struct kvpool_pool *pool)
{
	host_of(pool)->waiter_wakes++;
}

static inline void th_reclaim_wake(struct kvpool_lease *lease)
{
	host_of(lease->pool)->reclaim_wakes++;
}

static inline void th_observe(struct kvpool_pool *pool, const struct kvpool_event *ev)
{
	struct test_host *h = host_of(pool);

	h->observed++;
	h->last_observed = *ev;
	if (ev->type < 16)
		h->observed_by_type[ev->type]++;
}

static inline int th_tenant_added(struct kvpool_tenant *t)
{
	struct test_host *h = host_of(t->pool);

	if (h->fail_tenant_added)
		return h->fail_tenant_added;
	h->tenants_added++;
	return 0;
}

static inline void th_tenant_removed(struct kvpool_tenant *t)
{
	host_of(t->pool)->tenants_removed++;
}

/* In these tests uid U is also in the supplementary group U + 1000. */
static inline bool th_in_group(const struct kvpool_cred *cred, u32 gid)
{
	return gid == cred->uid + 1000;
}

static inline void th_blocks_owned(struct kvpool_pool *pool, const u32 *b,
				   u32 n, u64 lease_id)
{
	struct test_host *h = host_of(pool);
	u32 i;

	h->owned_calls++;
	for (i = 0; i < n; i++)
		if (b[i] < 256)
			h->owned[b[i]] = lease_id;
}

static const struct kvpool_ledger_ops test_ops = {
	.owner_wake = th_owner_wake,
	.waiters_wake = th_waiters_wake,
	.reclaim_wake = th_reclaim_wake,
	.observe = th_observe,
	.tenant_added = th_tenant_added,
	.tenant_removed = th_tenant_removed,
	.in_group = th_in_group,
	.blocks_owned = th_blocks_owned,
};

static int test_owner_cookie;
#define TEST_OWNER ((void *)&test_owner_cookie)

static inline int test_pool_new(struct test_host *h, u32 capacity, u32 chunk,
				u32 backed, u32 default_max,
				struct kvpool_pool **out)
{
	struct kvpool_pool_params p = {
		.name = "gpu0",
		.block_bytes = 65536,
		.capacity = capacity,
		.chunk_blocks = chunk,
		.default_max = default_max,
	};
	int ret = kvpool_pool_create(&p, &test_ops, h, TEST_OWNER, out);

	if (ret || !backed)
		return ret;
	return kvpool_pool_grow(*out, backed, 0);
}

static inline struct kvpool_cred test_cred(u32 uid, u32 gid, bool admin)
{
	struct kvpool_cred c = { .uid = uid, .gid = gid, .pid = 100 + uid,
				 .admin = admin };
	return c;
}

#endif /* LEDGER_TEST_H */
