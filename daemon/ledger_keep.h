/* SPDX-License-Identifier: MIT */
/*
 * ledger_keep.h - the in-process ledger's journal (ledger_keep.c): who
 * holds which block of the top pool, kept where it outlives kvpoold, so
 * that a restarted daemon gives every connection's lease back to the
 * client that reconnects, with its blocks and their contents.
 *
 * The journal is one memfd, kept (keep.h, KVD_KEEP_LEDGER) beside the
 * pool memory and vouched for by the same metadata region (restart.h):
 *
 *   header      magic, version, capacity, record count, the highest tenant
 *               serial handed out, and a checksum of the header;
 *   records     one per connection's lease: lease id, a 64-bit secret the
 *               daemon drew for it (handed to the client in HELLO's
 *               reply), uid, tenant name and serial, and a checksum of the
 *               record (a torn record is not used);
 *   owners      per block, the id of the lease that holds it, or 0.
 *
 * Every change of hands goes to the journal from the ledger core
 * (kvpool_ledger_ops.blocks_owned) before the client hears of it; a
 * record is written before HELLO's reply and cleared at the close.
 * A restarted daemon whose metadata region vouches for the pool restores
 * each recorded lease parked (kvpool_lease_restore), with the blocks the
 * journal gives it; a client claims it back with HELLO (KVP_HELLO_CLAIM:
 * lease id and secret, from the same uid).  What nobody claims within
 * --claim-grace-ms is closed and its blocks freed (and zeroed before
 * another tenant uses them, scrub.h).  Blocks of leases without a record
 * (the prefix cache's, the lower tiers') are not restored.
 *
 * Floor: the pool floor (with ledger.c, restart.c, keep.c); the server
 * calls the record and claim functions.
 */
#ifndef KVD_LEDGER_KEEP_H
#define KVD_LEDGER_KEEP_H

#include <stdbool.h>
#include <stdint.h>

struct kvd;
struct kvd_pool;
struct kvpool_pool;
struct kvpool_lease;

/* The journal's layout; a build that changes it changes this. */
#define KVD_LKEEP_VERSION	1

/* In-process, after the core pools exist and before any tenant: read
 * what an earlier life journalled (its tenant serials stay taken). */
int kvd_lkeep_begin(struct kvd *d);
/* After the named tenants: restore the journalled leases (parked), back
 * their blocks, and keep this life's journal.  0 or -errno (then nothing
 * is journalled: the ledger dies with the daemon). */
int kvd_lkeep_restore(struct kvd *d);
/* The core's hook (kvpool_ledger_ops.blocks_owned), p->lock held. */
void kvd_lkeep_owned(struct kvpool_pool *pool, const uint32_t *blocks,
		     uint32_t n, uint64_t lease_id);
/* A connection's lease in the top pool (takes p->lock): record it and
 * give its secret (0: nothing journalled). */
uint64_t kvd_lkeep_record(struct kvd_pool *p, struct kvpool_lease *l);
/* Its tenant changed / it closes (p->lock held). */
void kvd_lkeep_retenant(struct kvd_pool *p, struct kvpool_lease *l);
void kvd_lkeep_forget(struct kvd_pool *p, struct kvpool_lease *l);
/*
 * HELLO with KVP_HELLO_CLAIM (takes p->lock): the parked lease @id, if
 * @secret and @uid are its record's, adopted for @client; its secret
 * stays.  -ENOENT: no such parked lease (never kept, claimed already, or
 * past the grace); -EPERM: the secret or the uid differs.
 */
int kvd_lkeep_claim(struct kvd_pool *p, uint64_t id, uint64_t secret,
		    uint32_t uid, uint32_t pid, void *client,
		    struct kvpool_lease **out);
/* The main loop: close restored leases nobody claimed in time, due at
 * kvd_lkeep_due_ns() (0: nothing due). */
void kvd_lkeep_timer(struct kvd *d);
uint64_t kvd_lkeep_due_ns(void);
/* Restored at this start, claimed since, closed unclaimed. */
void kvd_lkeep_counts(uint64_t *restored, uint64_t *claimed,
		      uint64_t *expired);

#endif /* KVD_LEDGER_KEEP_H */
