/* SPDX-License-Identifier: MIT */
/*
 * cluster.h - the cluster tier (cluster.c): full, published prefix blocks
 * of tenants with a cluster namespace key, stored in a Redis Cluster and
 * fetched from it on a local miss; each node's heartbeat and its block
 * stored/removed events (Documentation/cluster.rst).
 *
 * Two threads of its own, each with its own connections (rcluster.c): the
 * fetch thread serves MATCH's lookups, the store thread writes values,
 * events and heartbeats.  Callers only copy into bounded queues (a full
 * queue drops, counted) or wait, at most the configured deadline, for a
 * fetch: nothing here waits for the cluster on the daemon's behalf.
 *
 * The hooks below are called by prefix.c; none takes prefix.c's lock, and
 * every one may be called with it held except kvd_cluster_fetch().
 */
#ifndef KVPOOLD_CLUSTER_H
#define KVPOOLD_CLUSTER_H

#include "core.h"
#include "prefix_index.h"

struct kvd_cluster;
struct kvd_cluster_fetch;

/* Before privileges are dropped (reads the key files).  0, or -errno
 * when the tier is configured but cannot work (logged). */
int kvd_cluster_init(struct kvd *d);
/* After: the threads (nothing connects before). */
int kvd_cluster_start(struct kvd *d);
void kvd_cluster_stop(struct kvd *d);

/* Is there a cluster tier, and its policy (enum kvp_cluster_policy). */
bool kvd_cluster_on(const struct kvd *d);
uint32_t kvd_cluster_policy(const struct kvd *d);

/*
 * The namespace key of @tenant, as the salt of its prefix-cache keys:
 * true when it has one (so its keys are the same on every node).
 */
bool kvd_cluster_tenant_key(struct kvd *d, const char *tenant,
			    uint8_t salt[PFX_SALT_BYTES]);
/* A layout with a model identity, declared by a client of @tenant: what
 * the cluster needs to write and check its blocks' values. */
void kvd_cluster_model(struct kvd *d, const char *tenant,
		       const struct pfx_key *id, const char *name,
		       const struct kvk_layout *l);

/* One block of a prefix chain. */
struct kvd_cluster_blk {
	struct pfx_key key;		/* its chain key */
	struct pfx_key parent;		/* the previous block's (0: first) */
	const uint32_t *tokens;		/* tokens_per_block ids */
	uint32_t block;			/* in the top pool */
};

/*
 * Store @n blocks of model @model under the namespace key @salt: their
 * bytes are copied now (the caller guarantees that they do not change
 * meanwhile), then written by the store thread.  @may_wait false (the
 * owner thread): a block whose memory is being unmapped is skipped.
 */
void kvd_cluster_store(struct kvd *d, const uint8_t *salt,
		       const struct pfx_key *model,
		       const struct kvd_cluster_blk *b, uint32_t n,
		       bool may_wait);
/* The same for one block whose bytes are at @bytes (the end of the
 * demotion chain, prefix_tier.c); b->block is not used. */
void kvd_cluster_store_bytes(struct kvd *d, const uint8_t *salt,
			     const struct pfx_key *model,
			     const struct kvd_cluster_blk *b, const void *bytes);
/* Blocks that entered (@stored) or left this node's cache. */
void kvd_cluster_event(struct kvd *d, bool stored,
		       const struct pfx_key *model, const struct pfx_key *keys,
		       uint32_t n);

/* Most blocks of @model one fetch asks for (0: the model is unknown). */
uint32_t kvd_cluster_fetch_max(struct kvd *d, const struct pfx_key *model);
/*
 * Look blocks keys[0..n) up (one pipelined round), waiting at most the
 * deadline: returns how many of the first ones arrived and verified
 * (their payloads: kvd_cluster_payload()), and *out to pass to
 * kvd_cluster_fetch_end() when it is > 0.  @parent0: the key before
 * keys[0]; @tokens: n * tokens_per_block ids.
 */
int kvd_cluster_fetch(struct kvd *d, const uint8_t *salt,
		      const struct pfx_key *model, const struct pfx_key *keys,
		      const struct pfx_key *parent0, const uint32_t *tokens,
		      uint32_t n, struct kvd_cluster_fetch **out);
const void *kvd_cluster_payload(const struct kvd_cluster_fetch *f,
				uint32_t i, uint64_t *bytes);
/* @used of them were cached (the others found no block). */
void kvd_cluster_fetch_end(struct kvd *d, struct kvd_cluster_fetch *f,
			   uint32_t used);
/* Write a fetched payload into top block @block (a block the daemon
 * holds) and zero the rest of the block. */
int kvd_cluster_block_write(struct kvd *d, uint32_t block,
			    const void *payload, uint64_t bytes);

/* server.c: KVP_OP_CLUSTER_STATUS. */
void kvd_cluster_status(struct kvd *d, struct kvp_cluster_status *st);

/* prefix.c, for the heartbeat: entries in the cache. */
uint32_t kvd_prefix_entries(struct kvd *d);

#endif /* KVPOOLD_CLUSTER_H */
