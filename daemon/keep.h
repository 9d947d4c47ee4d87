/* SPDX-License-Identifier: MIT */
/*
 * keep.h - kept backing: pool memory that outlives kvpoold (keep.c).
 *
 * A pool's memory is held by descriptors: one memfd for the whole pool on
 * the cpu backend and in a dram tier, one exported allocation per chunk on
 * the cuda backend, the file of an nvme tier, and the daemon's metadata
 * region (restart.c).  While the daemon runs it keeps a duplicate of each
 * somewhere that outlives it: with the module, deposited with the pool
 * (KVPOOL_IOC_FD_DEPOSIT); in-process under a service manager, in its file
 * descriptor store (FDSTORE=1).  A restarted daemon takes them back before
 * it maps its pools, and uses them only when its metadata region vouches
 * for their contents; otherwise every kept descriptor is dropped first and
 * the pools start zeroed, as if nothing had been kept.
 *
 * Floor: with the pool floor (ledger.c); backends and tiers call it.
 */
#ifndef KVD_KEEP_H
#define KVD_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool_proto.h"

struct kvd;
struct kvd_pool;

/* What a kept descriptor is (the kind of its tag). */
#define KVD_KEEP_WHOLE		1	/* the memfd of a whole pool */
#define KVD_KEEP_CHUNK		2	/* one chunk (index: its number) */
#define KVD_KEEP_META		3	/* the metadata region (top pool) */
#define KVD_KEEP_TAGS		4	/* the pool's scrub tags (scrub.c) */
#define KVD_KEEP_PREFIX		5	/* the prefix index (prefix_keep.c) */
#define KVD_KEEP_LEDGER		6	/* the in-process ledger's journal
					 * (ledger_keep.c) */

/* Where descriptors are kept (kvd_keep_store()). */
#define KVD_KEEP_STORE_NONE	KVP_KEEP_NONE	/* nowhere: contents die with us */
#define KVD_KEEP_STORE_MODULE	KVP_KEEP_MODULE	/* deposited with the module's pool */
#define KVD_KEEP_STORE_SYSTEMD	KVP_KEEP_SYSTEMD	/* the service manager's fd store */

/* The 64-bit tag of a kept descriptor: its pool (tier), kind, index. */
static inline uint64_t kvd_keep_tag(unsigned int tier, uint32_t kind,
				    uint32_t index)
{
	return ((uint64_t)(tier & 0xff) << 56) |
	       ((uint64_t)(kind & 0xff) << 48) | index;
}

/*
 * A sealed memfd of @bytes (it cannot shrink or grow under a mapping),
 * mapped shared at *@map: for what the daemon writes through to keep
 * (the metadata region, the ledger's journal).  The fd or -errno.
 */
int kvd_keep_memfd(const char *name, size_t bytes, void **map);

/* Whether this daemon keeps descriptors at all (a store exists). */
bool kvd_keep_enabled(struct kvd *d);

/*
 * Keep a duplicate of @fd as (@p, @kind, @index), replacing one kept under
 * the same tag; @fd stays the caller's.  0 or -errno; -EOPNOTSUPP when
 * nothing can be kept (the contents then die with the daemon).
 */
int kvd_keep_put(struct kvd_pool *p, uint32_t kind, uint32_t index, int fd);

/* Forget the descriptor kept as (@p, @kind, @index), if any. */
void kvd_keep_drop(struct kvd_pool *p, uint32_t kind, uint32_t index);

/*
 * A restarted daemon: a new descriptor for what was kept as (@p, @kind,
 * @index), still kept; the caller closes it.  -ENOENT when nothing was
 * kept under that tag or its contents are not to be used.
 */
int kvd_keep_take(struct kvd_pool *p, uint32_t kind, uint32_t index);

/* ---- for the daemon's set-up (restart.c) ---------------------------- */

void kvd_keep_set_store(int store);
int kvd_keep_store(void);
/* Load what pool @p's owner file (module) or the service manager
 * ($LISTEN_FDS) kept: the count, or -errno. */
int kvd_keep_load_module(struct kvd_pool *p);
int kvd_keep_load_listen(void);
/* Is there a service manager to keep descriptors ($NOTIFY_SOCKET, and
 * this build has libsystemd)? */
bool kvd_keep_sd_available(void);
/* Was anything kept for pool @p? */
bool kvd_keep_has(struct kvd_pool *p);
/* Forget what an earlier life kept, for pool @p or (NULL) every pool,
 * in the table and in the store. */
void kvd_keep_discard(struct kvd *d, struct kvd_pool *p);
/* Deposit what was put before pool @p's owner file existed. */
void kvd_keep_flush(struct kvd_pool *p);
/* Close the table (every pool is mapped). */
void kvd_keep_loaded_done(struct kvd *d);
void kvd_keep_counts(unsigned long long *put, unsigned long long *drop);

#endif /* KVD_KEEP_H */
