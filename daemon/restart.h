/* SPDX-License-Identifier: MIT */
/*
 * restart.h - what a restarted kvpoold keeps of the one before it
 * (restart.c): the metadata region that vouches for kept pool memory
 * (keep.h), the decision to use it or not, and what was preserved.
 *
 * The region is one page in a memfd, kept with the top pool:
 *
 *   header      magic, KVD_META_VERSION, the data epoch, the backend and
 *               ledger mode, every pool's name, kind and geometry, and a
 *               checksum over all of it (written once per life);
 *   live words  counters outside the checksum, each one atomic: the
 *               data-plane ops in flight that rewrite blocks in place and
 *               cannot be repeated (edits), and the lives the region has
 *               seen.
 *
 * A restarted daemon uses what was kept only when the region is there,
 * its magic, version and checksum are right, every pool's geometry is the
 * same and no edit was in flight.  Then it keeps the data epoch, so that
 * clients keep their sequences; otherwise it drops everything kept, its
 * pools start zeroed and the data epoch changes (every client recomputes,
 * as after a restart without kept memory).
 *
 * Floor: the pool floor (with ledger.c, tier.c, keep.c).
 */
#ifndef KVD_RESTART_H
#define KVD_RESTART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvd;
struct kvd_pool;
struct kvp_restart_info;

/* The layout of the region this build writes and reads.  A build that
 * changes the layout or the meaning of kept memory changes it. */
#ifndef KVD_META_VERSION
#define KVD_META_VERSION	1
#endif

/* At set-up, before any pool: pick the store. */
int kvd_restart_begin(struct kvd *d);
/*
 * Before pool @p's memory is set up (tier.c, once per pool): with the
 * module, attach to the orphaned pool of that name (p->owner_fd, which
 * ledger.c then uses) and load what it kept; decide, at the top pool,
 * whether the region vouches for it; check @p's geometry against it.
 */
int kvd_restart_pool(struct kvd_pool *p);
/* After pool @p's memory is set up: does the region's geometry match? */
int kvd_restart_pool_ready(struct kvd_pool *p);
/* Every pool is open and mapped: write this life's region, keep it.  What
 * the daemon's own state kept (the prefix cache's index) is taken back
 * after it, and kvd_keep_loaded_done() then drops what nobody took. */
int kvd_restart_done(struct kvd *d);
/* The daemon serves (its socket listens): for the resume time. */
void kvd_restart_serving(struct kvd *d);
/*
 * While the pools are mapped at a start that uses kept memory: part of
 * pool @p's could not be taken back (a chunk not kept, or refused): the
 * start then drops all of it (every pool zeroed, a new data epoch), as if
 * nothing had been kept.  Later calls do nothing.
 */
void kvd_restart_lost(struct kvd_pool *p, const char *why);
/* Is pool @p's kept memory being used (its contents kept)? */
bool kvd_restart_preserved(const struct kvd_pool *p);

/* An op that rewrites blocks in place and cannot be repeated begins /
 * ends: a restart during one cannot vouch for any block. */
void kvd_restart_edit_begin(struct kvd *d);
void kvd_restart_edit_end(struct kvd *d);

/* In-process, the leases restored at this start took @n more blocks of
 * pool @p back with their contents (ledger_keep.c; for kvd_restart_info). */
void kvd_restart_kept_blocks(struct kvd_pool *p, uint32_t n);
/* The prefix cache restored @n entries (for kvd_restart_info). */
void kvd_restart_prefix(struct kvd *d, uint64_t n);
/* The checksum of kept records: FNV-1a, 64 bits, against a torn or
 * foreign record, not an adversary (kept memory is reachable only by the
 * daemon and the module or service manager). */
static inline uint64_t kvd_restart_sum(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* What this start kept (KVP_OP_RESTART_INFO, /metrics). */
void kvd_restart_info(struct kvd *d, struct kvp_restart_info *out);

#endif /* KVD_RESTART_H */
