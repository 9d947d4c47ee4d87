/* SPDX-License-Identifier: MIT */
/*
 * kvl_internal.h - libkvlease internals shared by kvl.c and kvl_seq.c.
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
};

struct kvl_seq {
	struct kvl_ctx *ctx;
	struct kvl_seq *next;
	int layout;
	uint32_t len;
	uint32_t nblocks;
	uint32_t cap;
	uint32_t *table;
	/* token ids of positions [0, ntok_known) (kvl_prefix.c) */
	uint32_t *tok;
	uint32_t ntok_known;
	uint32_t tok_cap;
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
	uint64_t lease_id;
	uint64_t block_bytes;
	uint32_t capacity;
	char pool[KVL_NAME_LEN];
	char backend[16];
	uint32_t reclaim_target;	/* last one the daemon sent */
	bool in_reconnect;

	struct kvl_layout_slot layouts[KVP_MAX_LAYOUTS];
	unsigned int nlayouts;

	/* sequences */
	uint16_t *refcnt;	/* per pool block, blocks in sequences */
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
/* Called after a daemon restart: lease_lost when the blocks went too. */
void kvl_seq_epoch_reset(struct kvl_ctx *ctx, bool lease_lost);
/* Release everything the sequences and the cache hold (release_all). */
void kvl_seq_forget_all(struct kvl_ctx *ctx);

/* kvl.c: one request, with reconnect (kvl_prefix.c uses it). */
int kvl_rpc(struct kvl_ctx *ctx, uint16_t op, const void *body, size_t blen,
	    void *rbody, size_t rcap, size_t *rlen);
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
/* Token ids of a sequence follow its length (truncate). */
void kvl_seq_tokens_truncate(struct kvl_seq *s, uint32_t len);

#endif /* KVL_INTERNAL_H */
