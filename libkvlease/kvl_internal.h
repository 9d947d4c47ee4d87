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
};

struct kvl_seq {
	struct kvl_ctx *ctx;
	struct kvl_seq *next;
	int layout;
	uint32_t len;
	uint32_t nblocks;
	uint32_t cap;
	uint32_t *table;
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

	/* device buffers (kvl_dev.c) */
	struct kvl_cuda *cuda;		/* the driver, loaded on first use */
	struct kvl_dev_buf *devbufs;

	/* sequences */
	uint16_t *refcnt;	/* per pool block, blocks in sequences */
	uint32_t *cache;	/* leased, in no sequence */
	uint32_t ncache;
	uint32_t cache_cap;
	struct kvl_seq *seqs;

	uint8_t msg[KVP_MSG_MAX] __attribute__((aligned(16)));
};

void kvl_logf(struct kvl_ctx *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* kvl.c: one request with descriptors, no recovery (transport errors are
 * returned as they are) */
int kvl_rpc_fds(struct kvl_ctx *ctx, uint16_t op, const void *body,
		size_t blen, const int *fds, int nfds, void *rbody,
		size_t rcap);
/* kvl.c: one request with recovery (see rpc() in kvl.c) */
int kvl_rpc(struct kvl_ctx *ctx, uint16_t op, const void *body, size_t blen,
	    void *rbody, size_t rcap);
/* kvl.c: the region and its size */
uint8_t *kvl_region(struct kvl_ctx *ctx, uint64_t *bytes);
/* kvl_dev.c: register every device buffer again (after a reconnect),
 * and free them all (kvl_close) */
int kvl_dev_rehello(struct kvl_ctx *ctx);
void kvl_dev_close_all(struct kvl_ctx *ctx);
/* Called after a daemon restart: lease_lost when the blocks went too. */
void kvl_seq_epoch_reset(struct kvl_ctx *ctx, bool lease_lost);
/* Release everything the sequences and the cache hold (release_all). */
void kvl_seq_forget_all(struct kvl_ctx *ctx);

#endif /* KVL_INTERNAL_H */
