/* SPDX-License-Identifier: MIT */
/*
 * kvl_internal.h - libkvlease internals shared by kvl.c (context,
 * transports, raw blocks), kvl_seq.c (sequences), kvl_tier.c (lower tiers
 * and swaps) and kvl_policy.c (what to do under pressure).
 */
#ifndef KVL_INTERNAL_H
#define KVL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kvlease.h"
#include "kvpool_proto.h"

#define KVL_EXPORT __attribute__((visibility("default")))

struct kvl_layout_slot {
	struct kvl_layout l;
	uint32_t id;		/* the daemon's layout id */
	char model[KVP_MODEL_LEN];	/* "" : no model identity */
	bool has_rope;		/* rope sent with LAYOUT_ROPE (kvl_edit.c) */
	struct kvp_layout_rope rope;
};

struct kvl_seq_edit;

/* Completions kept for kvl_swap_wait/poll, by ticket % KVL_KEEP_DONE. */
#define KVL_KEEP_DONE		256

struct kvl_tier {
	char name[KVL_NAME_LEN];	/* its pool */
	uint32_t kind;			/* KVP_TIER_* */
	uint32_t capacity;
	uint64_t block_bytes;
	int dev_fd;			/* module: /dev/kvpool bound to it */
	uint64_t lease_id;
	bool joined;
	int join_err;			/* the last failed join, or 0 */
};

struct kvl_seq {
	struct kvl_ctx *ctx;
	struct kvl_seq *next;
	int layout;
	uint32_t len;
	uint32_t nblocks;
	uint32_t cap;
	uint32_t *table;
	uint8_t *where;		/* per entry: the tier of table[i] (0: top) */
	uint32_t state;		/* KVL_SEQ_* */
	uint32_t tier;		/* SWAPPED: where its swapped entries are */
	uint32_t nswapped;	/* entries below the top */
	uint32_t dropped_len;
	uint64_t last_use;	/* ctx->use_clock when last used */
	uint64_t busy;		/* == ctx->call: the current call uses it */
	uint32_t swaps_out, swaps_in, drops;
	bool listed;		/* in ctx->dropped */
	/* token ids of positions [0, ntok_known) (kvl_prefix.c) */
	uint32_t *tok;
	uint32_t ntok_known;
	uint32_t tok_cap;
	struct kvl_seq_edit *edit;	/* positions, scores, compression
					 * policy (kvl_edit.c); NULL: none */
};

struct kvl_ctx {
	uint32_t flags;
	uint32_t lease_batch;
	uint64_t timeout_ns;
	char *socket_path;
	char *device_path;
	char pool_req[KVL_NAME_LEN];
	char tenant_req[KVL_NAME_LEN];
	kvl_log_fn log;
	void *log_arg;
	int log_level;

	int mode;		/* KVL_MODE_* */
	int dev_fd;		/* /dev/kvpool, module mode */
	int sock;		/* kvpoold, -1 without daemon */
	int memfd;
	uint8_t *region;
	uint64_t region_bytes;
	uint32_t req_id;
	uint64_t epoch;
	uint64_t reconnects;		/* to a daemon, after a lost one */
	uint64_t lease_id;
	/* in-process: what claims the lease back from a restarted daemon
	 * (KVP_HELLO_CLAIM); 0: it dies with the daemon */
	uint64_t lease_secret;
	uint64_t block_bytes;
	uint32_t capacity;
	char pool[KVL_NAME_LEN];
	char backend[16];
	uint32_t reclaim_target;	/* last one the daemon sent */
	bool in_reconnect;

	struct kvl_layout_slot layouts[KVP_MAX_LAYOUTS];
	unsigned int nlayouts;

	/* device buffers (kvl_dev.c) */
	struct kvl_cuda *cuda;		/* the driver, loaded on first use */
	struct kvl_dev_buf *devbufs;

	/* tiers (kvl_tier.c); tiers[0] is the top pool */
	struct kvl_tier tiers[KVP_MAX_TIERS];
	uint32_t ntiers;
	bool tiers_known;
	struct kvp_swap_done done[KVL_KEEP_DONE];

	/* pressure (kvl_policy.c) */
	uint32_t policy;
	uint32_t stall_ms;
	uint64_t use_clock;
	uint64_t call;		/* +1 per public sequence call */
	bool in_relief;
	uint32_t relief_given;	/* blocks a relief step gave to the ledger */
	struct kvl_seq **dropped;
	uint32_t ndropped;
	uint32_t dropped_cap;
	struct kvl_policy_stats pst;
	struct kvp_seq_report last_report;

	/* sequences */
	uint16_t *refcnt;	/* per pool block, blocks in sequences */
	uint8_t *merged;	/* per pool block: an edit moved tokens into
				 * it (kvl_edit.c); NULL until the first edit */
	uint32_t merged_cap;
	uint32_t *cache;	/* leased, in no sequence */
	uint32_t ncache;
	uint32_t cache_cap;
	struct kvl_seq *seqs;

	/* prefix cache (kvl_prefix.c) */
	uint8_t *pfx_ref;	/* per pool block: we reference it, cached */
	uint32_t npfx;		/* blocks set in pfx_ref */
	uint32_t *unref_q;	/* references to drop (kvl_prefix_unref_flush) */
	uint32_t nunref, unref_cap;
	bool closing;		/* kvl_close: the daemon drops them all */

	uint8_t msg[KVP_MSG_MAX] __attribute__((aligned(16)));
};

void kvl_logf(struct kvl_ctx *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* kvl.c: the region and its size */
uint8_t *kvl_region(struct kvl_ctx *ctx, uint64_t *bytes);
/* kvl_dev.c: register every device buffer again (after a reconnect),
 * and free them all (kvl_close) */
int kvl_dev_rehello(struct kvl_ctx *ctx);
void kvl_dev_close_all(struct kvl_ctx *ctx);
/* Called after a daemon restart: lease_lost when the blocks went too. */
void kvl_seq_epoch_reset(struct kvl_ctx *ctx, bool lease_lost);
/* The lease was claimed back from a restarted in-process daemon, during
 * request @op: match what we hold to what it holds.  0, or -ESTALE when
 * the sequences were reset (kvl_seq.c). */
int kvl_seq_claimed(struct kvl_ctx *ctx, uint16_t op);
/* One sequence lost its contents (the lease and the epoch survived). */
void kvl_seq_reset(struct kvl_seq *s);
/* Release everything the sequences and the cache hold (release_all). */
void kvl_seq_forget_all(struct kvl_ctx *ctx);

/* kvl.c */
/* One request with reconnect-on-loss (-ESTALE after a restart). */
int kvl_rpc(struct kvl_ctx *ctx, uint16_t op, const void *body, size_t blen,
	    void *rbody, size_t rcap, size_t *rlen);
/* A request whose reply is not waited for (informational). */
void kvl_send_only(struct kvl_ctx *ctx, uint16_t op, const void *body,
		   size_t blen);
uint64_t kvl_now_ns(void);
/* One request carrying a descriptor, no reconnect. */
int kvl_rpc_fd(struct kvl_ctx *ctx, uint16_t op, const void *body,
	       size_t blen, int fd, void *rbody, size_t rcap, size_t *rlen);
/* Region slices for requests: bump allocator from the region's start. */
uint64_t kvl_region_put(struct kvl_ctx *ctx, uint64_t *used, const void *src,
			uint64_t bytes);
int kvl_release_internal(struct kvl_ctx *ctx, const uint32_t *blocks,
			 uint32_t count);

/* kvl_tier.c */
/* An asynchronous record arrived (rpc loop or poll). */
void kvl_note_event(struct kvl_ctx *ctx, const void *msg, size_t n);
int kvl_tiers_load(struct kvl_ctx *ctx);
/* After a reconnect: rejoin the tiers (module: the leases survived). */
void kvl_tiers_reconnect(struct kvl_ctx *ctx);
void kvl_tiers_close(struct kvl_ctx *ctx);
/* Lease n blocks in tier t without waiting for other tenants: waits only
 * for the pool to grow when it has free blocks. */
int kvl_tier_lease_room(struct kvl_ctx *ctx, uint32_t tier, uint32_t n,
			uint32_t *blocks);
/* Copy and wait: 0 or -errno; *copy_ns: the daemon's copy time. */
int kvl_swap_sync(struct kvl_ctx *ctx, uint32_t src_tier, const uint32_t *src,
		  uint32_t dst_tier, const uint32_t *dst, uint32_t n,
		  uint64_t *copy_ns);

/* kvl_seq.c: the cache of leased, unused top blocks, and moving a
 * sequence's blocks between tiers (used by kvl_policy.c). */
int kvl_cache_lease(struct kvl_ctx *ctx, uint32_t need, uint32_t flags,
		    uint64_t timeout_ns);
void kvl_cache_trim(struct kvl_ctx *ctx, uint32_t keep);
/* Move the sequence's own top blocks to tier (one tier, no fallback). */
int kvl_seq_move_out(struct kvl_seq *s, uint32_t tier);
/* Bring it back; the cache must hold s->nswapped blocks. */
int kvl_seq_move_in(struct kvl_seq *s);
/* Drop its contents (blocks go back to the cache / the lower tier). */
void kvl_seq_drop(struct kvl_seq *s);
/* Top blocks a swap-out or drop of s would give back. */
uint32_t kvl_seq_own_top(const struct kvl_seq *s);
/* Mark s used by the current call. */
void kvl_seq_touch(struct kvl_seq *s);

/* kvl_policy.c */
/* Make the cache hold `need` blocks under policy (KVL_POLICY_DEFAULT:
 * the context's); the current call's sequences are never victims. */
int kvl_need_blocks(struct kvl_ctx *ctx, uint32_t need, uint32_t policy);
/* A sequence could not get its blocks under SWAP/RECOMPUTE: preempt it. */
void kvl_preempt_self(struct kvl_seq *s, uint32_t policy);
/* Effective policy of a call. */
uint32_t kvl_policy_of(const struct kvl_ctx *ctx, uint32_t policy);
/* s was dropped: list it for kvl_dropped(). */
void kvl_policy_listed(struct kvl_seq *s);
/* s is going away: unlist it. */
void kvl_policy_forget(struct kvl_seq *s);
/* Tell the daemon how many sequences are in each state (for kvpoolctl). */
void kvl_policy_report(struct kvl_ctx *ctx);
/* kvl_seq.c */
int kvl_seq_refcnt_init(struct kvl_ctx *ctx);
int kvl_seq_table_grow(struct kvl_seq *s, uint32_t n);
void kvl_seq_put_block(struct kvl_ctx *ctx, uint32_t b);

/* kvl_prefix.c: the sequences' part of the prefix cache. */
static inline bool kvl_pfx_cached(const struct kvl_ctx *ctx, uint32_t b)
{
	return ctx->pfx_ref && ctx->pfx_ref[b];
}
/* A cached block's last local reference went: drop it at the daemon
 * (queued; sent by kvl_prefix_unref_flush()). */
void kvl_prefix_unref(struct kvl_ctx *ctx, uint32_t b);
/* Send the queued drops (every public call that frees ends with it). */
void kvl_prefix_unref_flush(struct kvl_ctx *ctx);
/* Forget every reference (the daemon dropped them: new connection);
 * @tell: ask the daemon to drop them first (release_all). */
void kvl_prefix_forget(struct kvl_ctx *ctx, bool tell);
/* After a reconnect that kept the data epoch: reference the sequences'
 * cached blocks again; the number of sequences reset (their prefix is not
 * cached any more), or -errno. */
int kvl_prefix_rematch(struct kvl_ctx *ctx);
/* Token ids of a sequence follow its length (truncate). */
void kvl_seq_tokens_truncate(struct kvl_seq *s, uint32_t len);

/* kvl.c, for kvl_edit.c */
/* Copy bytes into the shared region at *used (64-byte aligned slices;
 * src NULL reserves); returns the offset. */
uint64_t kvl_region_put(struct kvl_ctx *ctx, uint64_t *used, const void *src,
			uint64_t bytes);
/* kvl_write_kv() with KVP_KV_* flags. */
int kvl_write_kv_flags(struct kvl_ctx *ctx, int layout, uint32_t layer,
		       uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, const float *k, const float *v,
		       uint32_t flags);

/* kvl_seq.c, for kvl_edit.c */
int kvl_seq_cow(struct kvl_seq *s, uint32_t i);

/* kvl_edit.c, called by kvl_seq.c */
int kvl_edit_before_append(struct kvl_seq *s, uint32_t ntok);
void kvl_edit_after_append(struct kvl_seq *s, uint32_t old_len);
void kvl_edit_before_truncate(struct kvl_seq *s, uint32_t len);
int kvl_edit_fork(struct kvl_seq *parent, struct kvl_seq *child);
void kvl_edit_free(struct kvl_seq *s);
void kvl_edit_reset(struct kvl_seq *s);
/* The block lost its last reference, or was copied (cow). */
void kvl_edit_block_freed(struct kvl_ctx *ctx, uint32_t b);
void kvl_edit_block_copied(struct kvl_ctx *ctx, uint32_t from, uint32_t to);
bool kvl_edit_block_merged(const struct kvl_ctx *ctx, uint32_t b);
/*
 * The compression step of the relief list (kvl_policy.c): compress
 * resident sequences with a budget that the current call does not use
 * until `blocks` blocks came back to the cache (0: all of them).  Returns
 * the blocks that came back, or -errno.
 */
int kvl_compress_relief(struct kvl_ctx *ctx, uint32_t blocks);
/* kvl_seq_move_in() brought s's blocks back into top[0..n). */
void kvl_edit_moved_in(struct kvl_seq *s, const uint32_t *top, uint32_t n);

#endif /* KVL_INTERNAL_H */
