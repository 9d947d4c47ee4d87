/* SPDX-License-Identifier: MIT */
/*
 * scrub.h - zeroing freed blocks between tenants (scrub.c).
 *
 * The promise: a block granted to a tenant other than the one that last
 * wrote it reads as zeros, in every pool and on every backend.  Grants
 * and releases go straight to /dev/kvpool in module mode, so the daemon
 * keeps the promise where it does see blocks: every data-plane op, swap
 * job and block checksum names the blocks it uses.  Each pool keeps a tag
 * per block saying who used it last:
 *
 *   KVD_TAG_ZERO      it reads as zeros (fresh memory: every map gives
 *                     zeros, on every backend and tier);
 *   KVD_TAG_UNKNOWN   contents not known (an unmap that failed);
 *   1..KVD_TAG_MAX    the tenant (kvd_client_scrub_tag()) whose op used
 *                     it last.
 *
 * Before an op of tenant T uses a block whose tag is neither T nor ZERO,
 * the block is zeroed (under the pool's scrub lock, so that two
 * connections of T never both zero it or read it half zeroed) and then
 * tagged T.  The common case, T using its own blocks again, is one load
 * of the tag per block and no lock.
 *
 * Prefix-cache blocks that a connection references read-only are left
 * as they are (the tenants of a shared namespace read each other's
 * blocks: the documented exception); a block enters the cache only with
 * its publisher's tag (kvd_scrub_owned()).
 */
#ifndef KVPOOLD_SCRUB_H
#define KVPOOLD_SCRUB_H

#include <stdbool.h>
#include <stdint.h>

struct kvd;
struct kvd_pool;
struct kvd_io;

/* Tags are 64 bits: a tenant's never runs out or comes back. */
#define KVD_TAG_ZERO		0ULL
#define KVD_TAG_UNKNOWN		UINT64_MAX
#define KVD_TAG_MAX		(UINT64_MAX - 2)

/* Tags of p->capacity blocks, all ZERO (fresh memory); 0 or -ENOMEM.
 * Called again after the pool's geometry changed. */
int kvd_scrub_pool_init(struct kvd_pool *p);
void kvd_scrub_pool_fini(struct kvd_pool *p);

/* Blocks that a caller may read without taking them (shared prefix
 * blocks): true to leave @block as it is. */
typedef bool (*kvd_scrub_keep_fn)(void *arg, uint32_t block);

/*
 * Tenant @tag is about to use blocks b[0..n) of pool p: it holds them
 * (pinned: they cannot change hands meanwhile) and p->backing is held
 * for reading.  Every block another tenant used last is zeroed first
 * (through @io: a swap worker's stream or ring; NULL for the data
 * plane's), then every block is @tag's, except those @keep keeps.
 * 0 or -errno (then the blocks not zeroed are still not @tag's).
 */
int kvd_scrub_claim(struct kvd_pool *p, struct kvd_io *io, uint64_t tag,
		    const uint32_t *b, uint32_t n, kvd_scrub_keep_fn keep,
		    void *arg);
/*
 * Whole blocks b[0..n) of pool p were overwritten from @tag's blocks
 * (a swap's destinations, p->backing held): @ok, they are @tag's; not
 * @ok (a copy that failed part way), those that were not @tag's have
 * unknown contents.
 */
void kvd_scrub_filled(struct kvd_pool *p, uint64_t tag, const uint32_t *b,
		      uint32_t n, bool ok);
/* Blocks [from, to) were unmapped (p->backing held for writing): they
 * read as zeros when mapped again, unless the unmap failed (!ok). */
void kvd_scrub_unmapped(struct kvd_pool *p, uint32_t from, uint32_t to,
			bool ok);
/* Is every block of b[0..n) @tag's or zeros? (lock-free) */
bool kvd_scrub_owned(struct kvd_pool *p, uint64_t tag, const uint32_t *b,
		     uint32_t n);

/* Blocks zeroed in pool p so far, and the time spent on them. */
void kvd_scrub_stats(struct kvd_pool *p, uint64_t *blocks, uint64_t *ns);

#endif /* KVPOOLD_SCRUB_H */
