/* SPDX-License-Identifier: MIT */
/*
 * swap.h - between the connection server (server.c) and the tier ops and
 * swap jobs (swap.c).  A connection's tier state (struct kvd_ctier) holds
 * its leases in the lower pools, its swap tickets and the completions its
 * thread still has to send.
 */
#ifndef KVPOOLD_SWAP_H
#define KVPOOLD_SWAP_H

#include "kvpoold.h"

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

/* server.c, for swap.c */
int kvd_client_send(struct kvd_client *c, const void *buf, size_t len);
int kvd_client_take_fd(struct kvd_client *c);
int kvd_client_sock(struct kvd_client *c);
void kvd_client_cred(struct kvd_client *c, struct kvpool_cred *cred);
/* (also in prefix.h) */
int kvd_client_region_ptr(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint64_t size, void **p);
int kvd_client_region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint32_t **out);

#endif /* KVPOOLD_SWAP_H */
