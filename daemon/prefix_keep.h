/* SPDX-License-Identifier: MIT */
/*
 * prefix_keep.h - the prefix cache's index kept across a restart of
 * kvpoold (prefix_keep.c), with the module.
 *
 * The cache's blocks are held by two leases per tenant (prefix.c), marked
 * kept (KVPOOL_IOC_LEASE_KEEP), so that they park with the pool when the
 * daemon dies instead of returning their blocks.  What the index knew of
 * them is written through, as it changes, into a region: one memfd kept
 * with the top pool (keep.h, kind KVD_KEEP_PREFIX), laid out as
 *
 *   header     magic, PK_VERSION, the pool's capacity, the slot size,
 *              a checksum over the header;
 *   tenants    per cache: its name, its own salt, the namespace it
 *              publishes to, the ids of its two leases;
 *   namespaces per shared namespace: its name and salt;
 *   slots      one per pool block: the entry that caches it (key, parent
 *              key, model, the ids that chain it, depth, token ids, the
 *              namespace), each with its own checksum.
 *
 * A record is written before its checksum, so that one torn by a kill
 * fails its checksum and is taken for absent.  A restarted daemon whose
 * pool memory the metadata region vouches for (restart.h) takes the
 * region back, adopts the parked leases and rebuilds the index from the
 * records that check out and whose block the snapshot shows in one of
 * their tenant's two leases; other blocks of those leases are given back.
 * Every restored entry starts unreferenced (cold): the clients that
 * referenced one match it again when they reconnect (libkvlease).
 *
 * Not kept: entries demoted to lower tiers or fetched from the cluster
 * tier's copies (prefix_tier.c keeps their maps in the heap), and entries
 * of more than PK_TOKENS token ids per block (their blocks are given back
 * at the restart).
 *
 * Floor: with the prefix cache (prefix.c), the only caller.
 */
#ifndef KVPOOLD_PREFIX_KEEP_H
#define KVPOOLD_PREFIX_KEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "prefix_index.h"

#define PK_VERSION	1
#define PK_TENANTS	512	/* caches kept; more are not kept */
#define PK_SHARED	64	/* shared namespaces kept */
#define PK_TOKENS	128	/* token ids a slot holds */
#define PK_NAME		32	/* KVPOOL_NAME_LEN */

struct pk_tenant {
	uint64_t sum;
	uint32_t used;
	uint32_t pad;
	char name[PK_NAME];
	char ns[PK_NAME];		/* "" : its own */
	uint8_t salt[PFX_SALT_BYTES];
	uint64_t hot_id, cold_id;
};

struct pk_ns {
	uint64_t sum;
	uint32_t used;
	uint32_t pad;
	char name[PK_NAME];
	uint8_t salt[PFX_SALT_BYTES];
};

#define PK_SLOT_FREE		0
#define PK_SLOT_INDEXED		1	/* found by lookups (only these are
					 * kept: a flushed or private entry's
					 * block is given back at a restart) */

struct pk_slot {
	uint64_t sum;
	uint32_t state;			/* PK_SLOT_* */
	uint32_t tix;			/* its tenant's record */
	uint64_t id, parent_id;		/* the index's ids in that life */
	struct pfx_key key, pkey, model;
	uint32_t depth, ntok;
	char ns[PK_NAME];		/* "" : its tenant's own */
	uint32_t tokens[PK_TOKENS];
};

struct pk_region;

/*
 * The region for a pool of @capacity blocks: a new one (kept with @d's top
 * pool), or, when @take, the one an earlier life kept, if it checks out
 * (*@restored then true).  NULL when nothing can be kept.
 */
struct kvd;
struct pk_region *pk_open(struct kvd *d, uint32_t capacity, bool take,
			  bool *restored);
/* Unmap it (it stays kept). */
void pk_close(struct pk_region *r);

/* Records, for writing (pk_*_sum after a change) and, after a restore,
 * reading (pk_*_ok). */
struct pk_tenant *pk_tenant_at(struct pk_region *r, uint32_t i);
struct pk_ns *pk_ns_at(struct pk_region *r, uint32_t i);
struct pk_slot *pk_slot_at(struct pk_region *r, uint32_t block);
uint32_t pk_capacity(const struct pk_region *r);

void pk_tenant_sum(struct pk_tenant *t);
void pk_ns_sum(struct pk_ns *n);
void pk_slot_sum(struct pk_slot *s);
bool pk_tenant_ok(const struct pk_tenant *t);
bool pk_ns_ok(const struct pk_ns *n);
bool pk_slot_ok(const struct pk_slot *s);
/* Forget every record (a restore that used none of them). */
void pk_clear(struct pk_region *r);

#endif /* KVPOOLD_PREFIX_KEEP_H */
