/* SPDX-License-Identifier: MIT */
/*
 * prefix_tier.h - the demotion chain of the prefix cache (prefix_tier.c):
 * a block evicted from the top pool's cache goes to the first lower tier
 * (dram, then nvme, in the order of --tier) instead of being dropped, an
 * entry evicted from a lower tier goes to the next one, and from the last
 * one to the cluster tier (a tenant with a cluster key, write-back) or
 * away.  MATCH looks the lower tiers up before the cluster: a block found
 * there is copied up into the tenant's hot lease and leaves its tier.
 *
 * The blocks are held by the daemon in leases of their tenant in each
 * tier (charged to it, that pool's quotas applying, asked first when the
 * ledger wants blocks back), in at most half of each tier: the rest stays
 * for swaps, which do not wait for room.  prefix.c calls in under its own lock:
 * nothing here waits while that is held (a demotion copies the block into
 * a bounded queue; a worker thread leases, writes and cascades).
 *
 * Locking: one mutex of its own, taken after prefix.c's and before any
 * pool's.
 */
#ifndef KVPOOLD_PREFIX_TIER_H
#define KVPOOLD_PREFIX_TIER_H

#include "cluster.h"
#include "core.h"
#include "prefix_index.h"

struct kvd_ptier;
struct kvd_ptier_fetch;

/* With lower tiers: the state (nothing runs yet).  0 or -errno. */
int kvd_ptier_init(struct kvd *d);
/* After privileges are dropped: the worker. */
int kvd_ptier_start(struct kvd *d);
/* Before the ledger closes: the worker stops, every block goes back. */
void kvd_ptier_stop(struct kvd *d);
bool kvd_ptier_on(const struct kvd *d);

/*
 * A cached block of @tenant leaves the top pool's cache: its bytes are
 * copied now (never waiting: skipped while the pool's memory is being
 * unmapped) and go down the chain.  @salt names its namespace; at the end
 * of the chain it goes to the cluster tier if @to_cluster.
 */
void kvd_ptier_demote(struct kvd *d, const char *tenant, const uint8_t *salt,
		      const struct pfx_key *model, uint32_t tokens_per_block,
		      const struct kvd_cluster_blk *b, bool to_cluster);
/*
 * MATCH: the blocks keys[0..n) of namespace @salt and model @model from
 * the lower tiers, in chain order up to the first miss (@parent0 before
 * keys[0]; @tokens: n * tokens_per_block ids, compared in full).
 * Returns how many were read and verified (payloads: kvd_ptier_payload),
 * and *out for kvd_ptier_fetch_end() when > 0.
 */
int kvd_ptier_fetch(struct kvd *d, const uint8_t *salt,
		    const struct pfx_key *model, const struct pfx_key *keys,
		    const struct pfx_key *parent0, const uint32_t *tokens,
		    uint32_t tokens_per_block, uint32_t n,
		    struct kvd_ptier_fetch **out);
const void *kvd_ptier_payload(const struct kvd_ptier_fetch *f, uint32_t i,
			      uint64_t *bytes);
/* The first @used were cached in the top pool: they leave their tiers. */
void kvd_ptier_fetch_end(struct kvd *d, struct kvd_ptier_fetch *f,
			 uint32_t used);
/* Every demoted block of @tenant goes (a flush, a namespace change, the
 * tenant's deletion): its leases in the lower tiers close. */
void kvd_ptier_flush(struct kvd *d, const char *tenant);
/* Owner thread: lower pool @p is short of @n blocks (its SHORT event, a
 * failed grow): the worker gives back that many, least recently used
 * first.  Never waits. */
void kvd_ptier_short(struct kvd_pool *p, uint32_t n);
/* Prefix blocks held in pool @p now, demoted into it, promoted from it. */
void kvd_ptier_counts(struct kvd_pool *p, uint64_t *held, uint64_t *in,
		      uint64_t *out);

#endif /* KVPOOLD_PREFIX_TIER_H */
