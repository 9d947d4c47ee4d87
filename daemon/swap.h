/* SPDX-License-Identifier: MIT */
/*
 * swap.h - between the connections (server.c, conn.c) and the tier ops and
 * swap jobs (swap.c).  A connection's tier state (struct kvd_ctier) holds
 * its leases in the lower pools, its swap tickets and the completions its
 * thread still has to send.
 */
#ifndef KVPOOLD_SWAP_H
#define KVPOOLD_SWAP_H

#include "core.h"

struct kvd_ctier;

/* swap.c */
struct kvd_ctier *kvd_ctier_new(struct kvd *d, uint64_t top_lease_id,
				struct kvpool_lease *top_lease,
				const char *tenant);
/* The connection is gone (closes its lower-tier leases). */
void kvd_ctier_release(struct kvd_ctier *ct);
/* Readable when completion records are ready: then kvd_ctier_flush. */
int kvd_ctier_fd(const struct kvd_ctier *ct);
void kvd_ctier_flush(struct kvd_client *c, struct kvd_ctier *ct);
void kvd_ctier_set_tenant(struct kvd_ctier *ct, const char *tenant);
int kvd_tier_dispatch(struct kvd_client *c, struct kvd_ctier *ct,
		      uint16_t op, const void *body, size_t blen,
		      void *rbody, size_t *rlen);
void kvd_ctier_rec(struct kvd_ctier *ct, struct kvp_client_tier_rec *o);
int kvd_ctier_connected(struct kvd_ctier *ct, unsigned int tier,
			uint64_t lease_id);


/* swap.c: tier ops of the data plane, swap jobs and their workers. */
int kvd_swap_start(struct kvd *d);
void kvd_swap_stop(struct kvd *d);
int kvd_fill_tier_list(struct kvd *d, struct kvp_tier_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total);
/* Connections of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_tiers(struct kvd *d, struct kvp_client_tier_rec *out,
			  uint32_t start, uint32_t cap, uint32_t *total,
			  uid_t uid);

#ifdef KVD_FUZZ_HOLD
/* The fuzz build only (swap.c): the workers are held; run up to @max
 * queued jobs (0: all) of lower tier @tier (0: every tier), oldest first,
 * in the caller's thread; the number run. */
unsigned int kvd_swap_fuzz_run(struct kvd *d, unsigned int tier,
			       unsigned int max);
/* Every queued job, in order (the workers' queue locked). */
struct kvd_swap_fuzz_job {
	struct kvd_pool *src, *dst;
	uint64_t src_lease, dst_lease;	/* the leases it pinned */
	const uint32_t *sb, *db;
	uint32_t n;
};
void kvd_swap_fuzz_each(struct kvd *d, void (*fn)(void *arg,
			const struct kvd_swap_fuzz_job *fj), void *arg);
#endif

#endif /* KVPOOLD_SWAP_H */
