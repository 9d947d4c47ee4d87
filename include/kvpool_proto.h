/* SPDX-License-Identifier: MIT */
/*
 * kvpool_proto.h - the wire protocol of kvpoold's UNIX socket.
 *
 * CONTRACT: this header is the contract between kvpoold/libkvlease and the
 * tools (libkvlease/kvl_admin.c, kvpoolctl).  Change it only by adding ops
 * or using reserved fields; never change an existing record.
 *
 * Transport: a SOCK_SEQPACKET UNIX socket (default /run/kvpool/kvpool.sock),
 * so every record is one message and message boundaries are kept.  Every
 * request is one message: a struct kvp_hdr followed by the op's fixed-size
 * body (KVP_OP_RELEASE alone has a trailing array).  hdr.len must equal the
 * message length and the exact size the op expects.  Every request gets
 * exactly one reply message: struct kvp_reply (hdr.op = request op |
 * KVP_REPLY, same req_id) followed by the op's reply body when status >= 0.
 * Messages are at most KVP_MSG_MAX bytes either way.  Integers are host
 * order (the socket is local), little-endian on every supported machine.
 *
 * Bulk data (block lists, K/V, queries, outputs) never travels in records:
 * it lives in the client's shared region, a memfd the client passes with
 * KVP_OP_HELLO (SCM_RIGHTS); records give byte offsets into it.  Every
 * offset/length must fall inside the region (-EFAULT otherwise), arrays of
 * u32/float must be 4-byte aligned (-EINVAL).
 *
 * Errors for malformed requests (the connection stays open, other clients
 * are never affected):
 *   -EBADMSG	shorter than struct kvp_hdr, bad magic, hdr.len differs from
 *		the message length, or the body size is wrong for the op
 *		(a truncated record);
 *   -EMSGSIZE	longer than KVP_MSG_MAX (an oversized record);
 *   -EOPNOTSUPP unknown op;
 *   -EINVAL	a reserved/pad field or unknown flag is non-zero, bad value;
 *   -EFAULT	an offset or length outside the shared region;
 *   -EPERM	a block that the caller's lease does not hold;
 *   -EACCES	admin write op from a peer that is not root, not the daemon's
 *		own uid and not in the daemon's admin group (SO_PEERCRED);
 *   -ENOTCONN	a data-plane or ledger op before a successful HELLO;
 *   -EBADF	more descriptors than the op takes (all of them are closed);
 *   -E2BIG	a request beyond the daemon's per-request bounds (ATTN and
 *		ATTN_DEV: a block table of more than 2^20 entries once cut
 *		to the sequences' lengths, more than 2^34 multiply-adds of
 *		Q.K, max(1, n_new) x ctx x q_heads x head_dim summed over
 *		the batch; SCORE: more than 2^34, n_q x len x q_heads x
 *		head_dim; COPY: more than 4 GiB; SPLICE and COMPACT:
 *		rewriting more than 4 GiB of blocks): split it.  The bounds
 *		keep every
 *		request's hold on the pool's memory short: an unmap that is
 *		due waits for the requests in flight only, and new ones
 *		wait for it.
 * ATTN, ATTN_DEV, SCORE, SPLICE and COMPACT refuse a block named twice in
 * one sequence (-EINVAL).
 * When the request is too short to carry a req_id, the reply has req_id 0.
 * Name fields (pool, tenant) hold at most KVP_NAME_LEN - 1 characters and
 * their NUL: a field without a NUL is refused with -EINVAL, never cut.
 *
 * Connections are limited (kvpoold --max-clients, --max-clients-per-uid):
 * a refused one receives one KVP_EV_REFUSED record and is closed.
 * CLIENT_LIST and CLIENT_TIERS show a peer that is not an admin only its
 * own uid's leases and connections.
 *
 * Asynchronous records: the daemon may send records with req_id 0 and op
 * KVP_EV_* at any time (e.g. a reclaim target); clients skip or note them
 * while waiting for a reply.
 *
 * Identity: with the module, the client passes its /dev/kvpool file in
 * HELLO; the daemon asks the ledger whose lease it is (KVPOOL_IOC_STATUS),
 * closes its copy at once and checks every block of later requests with
 * KVPOOL_IOC_LEASE_CHECK.  Without the module, the connection itself is the
 * lease (the in-process ledger), and closing it returns every block.
 */
#ifndef KVPOOL_PROTO_H
#define KVPOOL_PROTO_H

#include <stdint.h>
#include <linux/kvpool.h>

#define KVP_MAGIC		0x3150564bU	/* "KVP1" */
#define KVP_VERSION		1
#define KVP_MSG_MAX		65536
#define KVP_NAME_LEN		32
/* Most blocks in one LEASE reply or RELEASE request. */
#define KVP_IO_MAX_BLOCKS	8192
/* "No array" in an offset field (READ_KV's k or v). */
#define KVP_OFF_NONE		UINT64_MAX

struct kvp_hdr {
	uint32_t magic;		/* KVP_MAGIC */
	uint16_t op;		/* KVP_OP_*; | KVP_REPLY in replies */
	uint16_t flags;		/* must be 0 */
	uint32_t len;		/* bytes of the whole message, header included */
	uint32_t req_id;	/* chosen by the client, echoed in the reply */
};

#define KVP_REPLY		0x8000

struct kvp_reply {
	struct kvp_hdr hdr;
	int32_t status;		/* 0, a count, or -errno */
	uint32_t pad;
	uint64_t epoch;		/* the daemon's current data epoch */
};

enum kvp_op {
	/* session */
	KVP_OP_HELLO = 1,	/* struct kvp_hello -> struct kvp_hello_reply */
	/* ledger (in-process ledger only; with the module use ioctls:
	 * -EOPNOTSUPP) */
	KVP_OP_ATTACH = 2,	/* struct kvp_attach -> struct kvp_attach_reply */
	KVP_OP_LEASE = 3,	/* struct kvp_lease -> u32 blocks[status] */
	KVP_OP_RELEASE = 4,	/* struct kvp_release + u32[count] -> - */
	KVP_OP_STATUS = 5,	/* (no body) -> struct kvp_status_reply */
	KVP_OP_HELD = 6,	/* struct kvp_held -> u32 blocks[status] */
	/* data plane */
	KVP_OP_LAYOUT = 16,	/* struct kvp_layout -> struct kvp_layout_reply */
	KVP_OP_WRITE_KV = 17,	/* struct kvp_kv -> - */
	KVP_OP_READ_KV = 18,	/* struct kvp_kv -> - */
	KVP_OP_ATTN = 19,	/* struct kvp_attn -> - */
	KVP_OP_COPY = 20,	/* struct kvp_copy -> - */
	KVP_OP_LAYOUT_ROPE = 21, /* struct kvp_layout_rope -> - */
	KVP_OP_SPLICE = 22,	/* struct kvp_splice -> - */
	KVP_OP_COMPACT = 23,	/* struct kvp_compact -> - */
	KVP_OP_SCORE = 24,	/* struct kvp_score -> - */
	/* admin (no HELLO needed) */
	KVP_OP_TENANT_ADD = 32,	/* struct kvp_tenant -> - */
	KVP_OP_TENANT_DEL = 33,	/* struct kvp_tenant (limits ignored) -> - */
	KVP_OP_TENANT_SET = 34,	/* struct kvp_tenant (KVP_KEEP fields) -> - */
	KVP_OP_TENANT_LIST = 35, /* struct kvp_list -> struct kvp_list_reply +
				  * struct kvp_tenant_rec[count] */
	KVP_OP_POOL_STATUS = 36, /* (no body) -> struct kvp_pool_rec */
	KVP_OP_CLIENT_LIST = 37, /* struct kvp_list -> struct kvp_list_reply +
				  * struct kvp_client_rec[count] */
	/* prefix cache, data plane (see "prefix cache" below) */
	KVP_OP_PREFIX_MATCH = 48,   /* struct kvp_prefix_match ->
				     * struct kvp_prefix_match_reply */
	KVP_OP_PREFIX_PUBLISH = 49, /* struct kvp_prefix_publish ->
				     * struct kvp_prefix_publish_reply */
	KVP_OP_PREFIX_UNREF = 50,   /* struct kvp_prefix_unref -> - */
	KVP_OP_PREFIX_EVICT = 51,   /* struct kvp_prefix_evict -> - */
	KVP_OP_LAYOUT_MODEL = 52,   /* struct kvp_layout_model ->
				     * struct kvp_layout_reply */
	/* prefix cache, admin (no HELLO needed) */
	KVP_OP_PREFIX_LIST = 56,    /* struct kvp_list -> struct kvp_list_reply
				     * + struct kvp_prefix_rec[count] */
	KVP_OP_PREFIX_FLUSH = 57,   /* struct kvp_prefix_tenant -> - */
	KVP_OP_PREFIX_SHARE = 58,   /* struct kvp_prefix_tenant -> - */
	/* tiers: the daemon's pools (see "Tiers and swap" below) */
	KVP_OP_TIER_LIST = 64,	/* struct kvp_list -> struct kvp_list_reply +
				 * struct kvp_tier_rec[count]; no HELLO */
	KVP_OP_TIER_ATTACH = 65, /* struct kvp_tier_attach ->
				  * struct kvp_tier_attach_reply */
	KVP_OP_TIER_LEASE = 66,	/* struct kvp_tier_lease -> u32 blocks[status]
				 * (in-process ledger only) */
	KVP_OP_TIER_RELEASE = 67, /* struct kvp_tier_release + u32[count] -> -
				   * (in-process ledger only) */
	KVP_OP_TIER_STATUS = 68, /* struct kvp_tier_sel ->
				  * struct kvp_status_reply */
	KVP_OP_SWAP = 69,	/* struct kvp_swap -> struct kvp_swap_reply */
	KVP_OP_SWAP_WAIT = 70,	/* struct kvp_swap_wait ->
				 * struct kvp_swap_done */
	KVP_OP_BLOCK_SUM = 71,	/* struct kvp_block_sum -> - */
	KVP_OP_SEQ_REPORT = 72,	/* struct kvp_seq_report -> - */
	KVP_OP_CLIENT_TIERS = 73, /* struct kvp_list -> struct kvp_list_reply +
				   * struct kvp_client_tier_rec[count] */
	/* data plane on device buffers (GPU tenants, cuda backend) */
	KVP_OP_DEVBUF_ADD = 80,	/* struct kvp_devbuf + one fd ->
				 * struct kvp_devbuf_reply */
	KVP_OP_DEVBUF_DEL = 81,	/* struct kvp_devbuf_del -> - */
	KVP_OP_WRITE_KV_DEV = 82, /* struct kvp_kv_dev -> - */
	KVP_OP_READ_KV_DEV = 83, /* struct kvp_kv_dev -> - */
	KVP_OP_ATTN_DEV = 84,	/* struct kvp_attn_dev -> - */
	/* the cluster tier (Documentation/cluster.rst); no HELLO */
	KVP_OP_CLUSTER_STATUS = 96, /* (no body) -> struct kvp_cluster_status */
	/* what the last start kept of the daemon before it; no HELLO */
	KVP_OP_RESTART_INFO = 97, /* (no body) -> struct kvp_restart_info */
};

/* Asynchronous records from the daemon (req_id 0, body below). */
enum kvp_event {
	KVP_EV_RECLAIM = 0x4001,	/* struct kvp_ev_reclaim */
	KVP_EV_SWAP_DONE = 0x4002,	/* struct kvp_swap_done */
	KVP_EV_REFUSED = 0x4003,	/* struct kvp_ev_refused, then close */
};

/* ---- session ----------------------------------------------------------- */

/* kvp_hello.flags: which descriptors ride along (SCM_RIGHTS, this order). */
#define KVP_HELLO_LEDGER_FD	(1U << 0)	/* the client's /dev/kvpool fd */
#define KVP_HELLO_REGION	(1U << 1)	/* a memfd of region_bytes */
/* In-process ledger: take back the lease a restarted daemon restored
 * (reserved[0]: its id, reserved[1]: its secret, from the same uid) instead
 * of opening one; tenant is then ignored.  -ENOENT: no such lease waits
 * (not kept, claimed, or past the daemon's --claim-grace-ms): say HELLO
 * without it and start again; -EPERM: the secret or the uid is not the
 * lease's.  -EINVAL with the module. */
#define KVP_HELLO_CLAIM		(1U << 2)
#define KVP_HELLO_FLAGS		(KVP_HELLO_LEDGER_FD | KVP_HELLO_REGION | \
				 KVP_HELLO_CLAIM)

struct kvp_hello {
	uint32_t version;	/* KVP_VERSION */
	uint32_t flags;		/* KVP_HELLO_* */
	uint64_t region_bytes;	/* size of the region (<= its memfd size) */
	/* in-process ledger: the pool/tenant to attach to (may be empty) */
	char pool[KVP_NAME_LEN];
	char tenant[KVP_NAME_LEN];
	uint64_t reserved[2];	/* 0; KVP_HELLO_CLAIM: lease id, secret */
};

/* kvp_hello_reply.mode */
#define KVP_MODE_MODULE		1	/* ledger is /dev/kvpool */
#define KVP_MODE_INPROC		2	/* ledger inside kvpoold */

struct kvp_hello_reply {
	uint32_t mode;		/* KVP_MODE_* */
	uint32_t capacity;
	uint64_t block_bytes;
	uint64_t lease_id;	/* the caller's lease */
	char pool[KVP_NAME_LEN];
	char backend[16];	/* "cpu", "cuda" */
	uint32_t chunk_blocks;
	uint32_t pad;
	/* [0]: in-process, the lease's secret for KVP_HELLO_CLAIM after a
	 * restart of the daemon (0: the lease dies with it); [1]: 0 */
	uint64_t reserved[2];
};

/* ---- ledger (in-process) ----------------------------------------------- */

struct kvp_attach {
	char pool[KVP_NAME_LEN];
	char tenant[KVP_NAME_LEN];
};

struct kvp_attach_reply {
	uint64_t lease_id;
};

/* The blocks the caller's lease holds, from block index @from up, in
 * order, at most @count (1..KVP_IO_MAX_BLOCKS): fewer than @count when
 * there are no more.  For a client that claimed its lease back after a
 * restart of the daemon (KVP_HELLO_CLAIM) and checks what it holds. */
struct kvp_held {
	uint32_t from;
	uint32_t count;
};

struct kvp_lease {
	uint32_t count;		/* 1..KVP_IO_MAX_BLOCKS */
	uint32_t flags;		/* KVPOOL_LEASE_* */
	uint64_t timeout_ns;	/* 0: no limit (bounded by the daemon's life) */
};

struct kvp_release {
	uint32_t count;		/* entries following; 0 with RELEASE_ALL */
	uint32_t flags;		/* KVPOOL_RELEASE_* */
	/* uint32_t blocks[count]; */
};

struct kvp_status_reply {
	struct kvpool_status ledger;	/* as KVPOOL_IOC_STATUS */
	uint32_t mode;			/* KVP_MODE_* */
	uint32_t chunk_blocks;
	char backend[16];
	uint64_t region_bytes;
	uint64_t reserved[2];
};

/* ---- data plane --------------------------------------------------------- */

struct kvp_layout {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t dtype;		/* enum kvk_dtype */
	float rope_base;
	uint32_t pad;
};

struct kvp_layout_reply {
	uint32_t layout_id;	/* per connection, 0..KVP_MAX_LAYOUTS-1 */
	uint32_t tokens_per_block;
	uint64_t bytes_per_token;
};

#define KVP_MAX_LAYOUTS		8

/* WRITE_KV / READ_KV: ntok tokens of one layer; offsets into the region
 * of u32 blocks[ntok], u32 slots[ntok], float k/v[ntok][kv_heads][hd]. */
struct kvp_kv {
	uint32_t layout_id;
	uint32_t layer;
	uint32_t ntok;
	uint32_t flags;		/* WRITE_KV: KVP_KV_*; READ_KV: 0 (this
				 * field was padding, 0, before) */
	uint64_t off_blocks;
	uint64_t off_slots;
	uint64_t off_k;		/* READ_KV: may be KVP_OFF_NONE */
	uint64_t off_v;		/* READ_KV: may be KVP_OFF_NONE */
};

/* ATTN: n_new 0 = decode, else multi-token causal (kvk_prefill). */
struct kvp_attn {
	uint32_t layout_id;
	uint32_t layer;
	uint32_t batch;
	uint32_t q_heads;
	uint32_t max_blocks_per_seq;
	uint32_t n_new;
	float scale;
	uint32_t pad;
	uint64_t off_q;		/* float [batch][max(1,n_new)][q_heads][hd] */
	uint64_t off_tables;	/* u32 [batch][max_blocks_per_seq] */
	uint64_t off_ctx;	/* u32 [batch] */
	uint64_t off_out;	/* float, like q */
};

struct kvp_copy {
	uint32_t n;
	uint32_t pad;
	uint64_t off_src;	/* u32 [n] */
	uint64_t off_dst;	/* u32 [n] */
};

/* kvp_kv.flags (WRITE_KV): the write never starts a block afresh
 * (KVK_WRITE_MERGE of kernels/kvkern.h). */
#define KVP_KV_MERGE		(1U << 0)
#define KVP_KV_FLAGS		KVP_KV_MERGE

/*
 * Editing sequences in place (Documentation/edits.rst).  A sequence is
 * named by its block table: slot p is slot p % tokens_per_block of block
 * table[p / tokens_per_block]; every table entry an op uses must be held
 * (-EPERM) and distinct (-EINVAL).  Nothing is changed when an op fails
 * its checks.
 */

/* LAYOUT_ROPE: how a declared layout's keys were rotated. */
#define KVP_ROPE_NONE		0
#define KVP_ROPE_NEOX		1	/* pairs (i, i + rotary_dims / 2) */
#define KVP_ROPE_GPTJ		2	/* pairs (2i, 2i + 1) */
#define KVP_ROPE_MAX_FREQ	128

struct kvp_layout_rope {
	uint32_t layout_id;
	uint32_t style;		/* KVP_ROPE_* (NONE clears) */
	uint32_t rotary_dims;	/* 0: head_dim; else even, <= head_dim */
	uint32_t nfreq;		/* 0: derive from base; else rotary_dims/2 */
	float base;
	uint32_t pad;		/* must be 0 */
	uint64_t reserved[2];	/* must be 0 */
	float inv_freq[KVP_ROPE_MAX_FREQ];	/* nfreq used, the rest 0 */
};

/* SPLICE: kvk_splice() on the sequence of table (-ENODATA: the tail must
 * turn and the layout has no RoPE data; -ERANGE: a span beyond len or a
 * new length beyond the table; -E2BIG: it would rewrite more than 4 GiB of
 * blocks, from the one holding slot at to the one holding the last slot
 * that changes). */
struct kvp_splice {
	uint32_t layout_id;
	uint32_t nblocks;	/* entries at off_table, 1..capacity */
	uint32_t len;		/* slots in use before */
	uint32_t at;
	uint32_t ndel;
	uint32_t nins;
	int64_t delta;		/* RoPE position shift of the tail */
	uint64_t off_table;	/* u32 [nblocks] */
	uint64_t reserved[2];	/* must be 0 */
};

/* COMPACT: kvk_compact(): slot keep[i] -> slot i (strictly increasing;
 * -E2BIG: it would rewrite more than 4 GiB of blocks, from the one holding
 * the first slot that moves to the one holding slot nkeep - 1). */
struct kvp_compact {
	uint32_t layout_id;
	uint32_t nblocks;
	uint32_t len;
	uint32_t nkeep;
	uint64_t off_table;	/* u32 [nblocks] */
	uint64_t off_keep;	/* u32 [nkeep] */
	uint64_t reserved[2];	/* must be 0 */
};

/* SCORE: kvk_score() of one layer: out[len] floats (-E2BIG beyond 2^34
 * multiply-adds, n_q x len x q_heads x head_dim). */
#define KVP_SCORE_MAX		(1U << 0)	/* max instead of sum */
#define KVP_SCORE_CAUSAL	(1U << 1)	/* queries are the last n_q slots */
#define KVP_SCORE_FLAGS		(KVP_SCORE_MAX | KVP_SCORE_CAUSAL)

struct kvp_score {
	uint32_t layout_id;
	uint32_t layer;
	uint32_t q_heads;
	uint32_t n_q;		/* 1..256 */
	uint32_t len;
	uint32_t nblocks;
	uint32_t flags;		/* KVP_SCORE_* */
	float scale;		/* 0: 1/sqrt(head_dim) */
	uint64_t off_q;		/* float [n_q][q_heads][hd] */
	uint64_t off_table;	/* u32 [nblocks] */
	uint64_t off_out;	/* float [len] */
	uint64_t reserved[2];	/* must be 0 */
};

/* ---- device buffers (GPU tenants) ---------------------------------------- */

/*
 * A GPU tenant keeps queries, new K/V and outputs in device memory: it
 * allocates a buffer with the CUDA VMM API (cuMemCreate with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, on the daemon's device),
 * exports it (cuMemExportToShareableHandle) and passes the descriptor
 * with DEVBUF_ADD (SCM_RIGHTS, exactly one).  The daemon imports and maps
 * the buffer for its lifetime (DEVBUF_DEL or the end of the connection)
 * and closes the descriptor at once.  The *_DEV ops then read and write
 * bulk arrays at byte offsets into such a buffer; index arrays (blocks,
 * slots, block tables, context lengths) stay in the shared host region,
 * because the daemon checks them against the lease.  Offsets into a
 * device buffer must be 16-byte aligned and the array inside the buffer
 * (-EFAULT otherwise).
 *
 * Ordering: the tenant finishes the work that produces its inputs
 * (cuStreamSynchronize of its stream) before sending an op; the daemon
 * runs the op on its own stream and synchronises that stream before it
 * replies, so the outputs are complete and visible to any later work of
 * the tenant's once the reply arrives.
 *
 * Errors: -EOPNOTSUPP on a backend without device memory (cpu); -EBADF
 * when the descriptor is missing or is not an exported allocation;
 * -EXDEV when the allocation is on another device; -EINVAL when bytes is
 * 0 or not a multiple of the device's allocation granularity or larger
 * than the allocation; -ENOSPC beyond KVP_MAX_DEVBUFS per connection;
 * -ENOENT for an unknown buf_id.
 */
#define KVP_MAX_DEVBUFS		16
/* kvp_kv_dev.flags */
#define KVP_DEV_BF16		(1U << 0)	/* WRITE: k/v are BF16 */
#define KVP_DEV_FLAGS		KVP_DEV_BF16

struct kvp_devbuf {
	uint64_t bytes;		/* mapped from offset 0 */
	uint32_t flags;		/* must be 0 */
	uint32_t pad;
	uint64_t reserved[2];	/* must be 0 */
};

struct kvp_devbuf_reply {
	uint32_t buf_id;
	uint32_t pad;
	uint64_t bytes;
	uint64_t reserved[2];
};

struct kvp_devbuf_del {
	uint32_t buf_id;
	uint32_t pad;
};

/* WRITE_KV_DEV / READ_KV_DEV: like struct kvp_kv, with k and v at byte
 * offsets into device buffer buf_id (READ: either may be KVP_OFF_NONE). */
struct kvp_kv_dev {
	uint32_t layout_id;
	uint32_t layer;
	uint32_t ntok;
	uint32_t buf_id;
	uint64_t off_blocks;	/* region: u32 [ntok] */
	uint64_t off_slots;	/* region: u32 [ntok] */
	uint64_t dev_k;		/* buffer: float (or BF16) [ntok][kv_heads][hd] */
	uint64_t dev_v;
	uint32_t flags;		/* KVP_DEV_* */
	uint32_t pad;
	uint64_t reserved[2];	/* must be 0 */
};

/* ATTN_DEV: like struct kvp_attn (its checks and bounds), q and out in
 * device buffer buf_id. */
struct kvp_attn_dev {
	uint32_t layout_id;
	uint32_t layer;
	uint32_t batch;
	uint32_t q_heads;
	uint32_t max_blocks_per_seq;
	uint32_t n_new;
	float scale;
	uint32_t buf_id;
	uint64_t off_tables;	/* region: u32 [batch][max_blocks_per_seq] */
	uint64_t off_ctx;	/* region: u32 [batch] */
	uint64_t dev_q;		/* buffer: float [batch][max(1,n_new)][q_heads][hd] */
	uint64_t dev_out;	/* buffer: float, like q */
	uint64_t reserved[2];	/* must be 0 */
};

/* ---- admin --------------------------------------------------------------- */

/* A field left unchanged by TENANT_SET. */
#define KVP_KEEP		0xfffffffeU

struct kvp_tenant {
	char pool[KVP_NAME_LEN];	/* empty: the daemon's pool */
	char name[KVP_NAME_LEN];
	uint32_t max;		/* KVPOOL_UNLIMITED for none */
	uint32_t min;
	uint32_t uid;		/* KVPOOL_ID_NONE for nobody */
	uint32_t gid;
};

struct kvp_list {
	char pool[KVP_NAME_LEN];
	uint32_t start;		/* index of the first entry wanted */
	uint32_t pad;
};

struct kvp_list_reply {
	uint32_t total;		/* entries in all */
	uint32_t count;		/* entries in this reply, from start */
};

struct kvp_tenant_rec {
	char name[KVP_NAME_LEN];
	uint32_t max;
	uint32_t min;
	uint32_t current;
	uint32_t peak;
	uint64_t ev_max;
	uint64_t ev_stall;
	uint64_t ev_reclaim;
	uint64_t ev_fail;
	uint32_t uid;
	uint32_t gid;
	uint32_t leases;
	uint32_t pad;
};

struct kvp_pool_rec {
	char name[KVP_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t backed;
	uint32_t used;
	uint32_t state;		/* KVPOOL_STATE_* */
	uint64_t epoch;
	uint32_t leases;
	uint32_t chunk_blocks;
	uint32_t tenants;
	uint32_t mode;		/* KVP_MODE_* */
	char backend[16];
	uint64_t mapped_bytes;	/* memory the backend has mapped now */
	uint64_t reserved[3];
};

struct kvp_client_rec {
	uint64_t lease_id;
	uint32_t pid;
	uint32_t uid;
	char tenant[KVP_NAME_LEN];
	uint32_t blocks;
	uint32_t connected;	/* 1: has a data-plane connection */
};

/* ---- prefix cache ------------------------------------------------------ */

/*
 * A tenant's prefix cache, kept by the daemon for all its processes: full
 * blocks named by a hash chain of their token ids (the daemon computes the
 * keys; clients send token ids, never keys), verified on every hit.
 * Cached blocks are held by the daemon in two leases charged to the
 * tenant: "hot" (referenced by some connection) and "cold" (unreferenced,
 * LRU, given back first under pressure).  A connection references a
 * cached block from MATCH (or PUBLISH) until UNREF or until it closes; it
 * may read referenced blocks (READ_KV, ATTN, COPY's source) but never
 * write them (-EROFS).  The cache is that of the tenant the lease is
 * charged to at each op: after the client's file is attached to another
 * tenant, MATCH, PUBLISH and EVICT act for the new one and the references
 * taken for the old one are dropped.  Blocks of another tenant (a shared
 * namespace) stay charged to it: a tenant lends at most kvpoold's
 * --prefix-lend-percent of its max to the others; past that MATCH stops
 * and PUBLISH keeps the caller's own copy (result[i] is the caller's
 * block).  Errors besides the general ones:
 *   -ENOKEY	the layout was declared without a model identity
 *		(KVP_OP_LAYOUT instead of KVP_OP_LAYOUT_MODEL);
 *   -EPERM	PUBLISH names a block the caller neither holds nor references;
 *   -EXDEV	MATCH or PUBLISH while the connection holds references
 *		taken for another tenant (UNREF them first);
 *   -EBUSY	PUBLISH while the caller's lease is pinned (a swap job of the
 *		caller, or with the module another connection's call on the
 *		same lease): a block in use never changes hands; retry after;
 *   -EAGAIN	PUBLISH: a block was released and granted again while it
 *		was being published (with another tenant's bytes between):
 *		nothing is cached, try again;
 *   -EOPNOTSUPP the ledger cannot move blocks (a module without
 *		KVPOOL_FEAT_LEASE_MOVE).
 * On any error nothing changed.
 */
#define KVP_MODEL_LEN		64
/* Most token ids in one MATCH or PUBLISH. */
#define KVP_PREFIX_MAX_TOKENS	(1U << 20)

/* LAYOUT_MODEL: a layout and the model whose KV it stores; the model
 * identity is this string (name and revision, NUL-terminated, not empty)
 * and the layout itself, so two models never share a cached block. */
struct kvp_layout_model {
	struct kvp_layout layout;
	char model[KVP_MODEL_LEN];
	uint64_t reserved[2];	/* must be 0 */
};

/* MATCH: the longest cached prefix of full blocks of token ids
 * u32 tokens[ntok] at off_tokens; the blocks go to u32 [max_blocks] at
 * off_blocks; status = blocks matched (now referenced by the caller). */
struct kvp_prefix_match {
	uint32_t layout_id;
	uint32_t ntok;		/* 0..KVP_PREFIX_MAX_TOKENS; partial tail ignored */
	uint64_t off_tokens;
	uint64_t off_blocks;
	uint32_t max_blocks;	/* at most this many blocks */
	uint32_t flags;		/* must be 0 */
	uint64_t reserved[2];	/* must be 0 */
};

struct kvp_prefix_match_reply {
	uint32_t blocks;	/* blocks matched */
	uint32_t tokens;	/* blocks * tokens_per_block */
	uint64_t daemon_ns;	/* time the daemon spent (lookup + attach) */
	uint64_t reserved[2];
};

/* PUBLISH: the first nblocks full blocks of a sequence, u32 blocks at
 * off_blocks (held by the caller, or cached blocks it references), their
 * token ids u32 [ntok = nblocks * tokens_per_block] at off_tokens.  For
 * each block the daemon writes u32 result[i] at off_result: the cached
 * block that now stands for position i (the caller's own, moved into the
 * cache, or one that was cached already: the caller then frees its own).
 * Every result block is referenced by the caller.  status = blocks moved
 * into the cache. */
struct kvp_prefix_publish {
	uint32_t layout_id;
	uint32_t nblocks;	/* 1..KVP_IO_MAX_BLOCKS */
	uint32_t ntok;		/* nblocks * tokens_per_block, else -EINVAL */
	uint32_t flags;		/* must be 0 */
	uint64_t off_tokens;
	uint64_t off_blocks;
	uint64_t off_result;
	uint64_t reserved[2];	/* must be 0 */
};

struct kvp_prefix_publish_reply {
	uint32_t added;		/* blocks moved from the caller's lease */
	uint32_t shared;	/* positions already cached (deduplicated) */
	uint64_t reserved[2];
};

/* UNREF: drop the caller's references to u32 blocks[n] at off_blocks
 * (every one must be referenced, no repeats: -EINVAL, nothing dropped),
 * or to every block with KVP_PREFIX_UNREF_ALL (n 0).  status = dropped. */
#define KVP_PREFIX_UNREF_ALL	(1U << 0)
struct kvp_prefix_unref {
	uint32_t n;		/* 0..KVP_IO_MAX_BLOCKS */
	uint32_t flags;
	uint64_t off_blocks;
	uint64_t reserved[2];	/* must be 0 */
};

/* EVICT: give back up to count unreferenced cached blocks of the caller's
 * tenant, least recently used first; status = blocks given back. */
struct kvp_prefix_evict {
	uint32_t count;		/* >= 1 */
	uint32_t flags;		/* must be 0 */
	uint64_t reserved[2];	/* must be 0 */
};

/* PREFIX_FLUSH: give back every unreferenced cached block of tenant and
 * stop finding its referenced ones (they go when their last reference
 * does); status = blocks given back.  With KVP_PREFIX_FORGET, for a
 * tenant deleted from the ledger by other means than the daemon (netlink
 * with the module): the daemon forgets its record too (namespace
 * membership, counters), -EBUSY while the ledger still has the tenant;
 * status 0.  PREFIX_SHARE: tenant joins the shared namespace ns ("" :
 * back to its own), after a flush.  Both -ENOENT for a tenant the ledger
 * does not have. */
#define KVP_PREFIX_FORGET	(1U << 0)
struct kvp_prefix_tenant {
	char pool[KVP_NAME_LEN];	/* empty: the daemon's pool */
	char tenant[KVP_NAME_LEN];
	char ns[KVP_NAME_LEN];		/* PREFIX_SHARE only, else empty */
	uint32_t flags;			/* KVP_PREFIX_FORGET (FLUSH), or 0 */
	uint32_t pad;
	uint64_t reserved[2];
};

struct kvp_prefix_rec {
	char tenant[KVP_NAME_LEN];
	char ns[KVP_NAME_LEN];		/* shared namespace, "" if its own */
	uint64_t hot_lease;		/* lease ids (0: not open) */
	uint64_t cold_lease;
	uint32_t cached;		/* cached blocks charged to it */
	uint32_t referenced;		/* of which referenced */
	uint64_t hits;			/* blocks found by MATCH */
	uint64_t misses;		/* full blocks asked for, not found */
	uint64_t hit_tokens;		/* tokens in the blocks found */
	uint64_t evictions;		/* blocks given back (LRU) */
	uint64_t published;		/* blocks moved into the cache */
	uint64_t reserved[2];
};

/* ---- async -------------------------------------------------------------- */

struct kvp_ev_reclaim {
	uint32_t target;	/* blocks asked back (0: request withdrawn) */
	uint32_t pad;
};

/*
 * The daemon refuses the connection and closes it (sent right after the
 * accept; reply.status has the same value): -EUSERS too many connections
 * in all or of the peer's uid, -EMFILE the daemon is out of descriptors.
 */
struct kvp_ev_refused {
	int32_t status;
	uint32_t pad;
};

/* ---- tiers and swap ------------------------------------------------------ *
 *
 * One daemon owns a pool per tier: tier 0 is the top pool (the one HELLO
 * binds to: "gpu0" on cuda, "host" on cpu), the lower ones hold host DRAM
 * ("dram") and blocks in a file ("nvme"), in that order.  Every pool has
 * the ledger's rules, tenants and quotas of its own.  A client that wants
 * a lower tier joins it with TIER_ATTACH and then holds one lease per pool:
 * with the module, a /dev/kvpool file per pool, attached to that pool with
 * KVPOOL_IOC_TENANT_ATTACH and passed along (SCM_RIGHTS, closed by the
 * daemon at once, like HELLO's); in-process, the connection holds a lease
 * in each pool it joined, and closing it returns them all.
 *
 * SWAP copies whole blocks (data and scales, byte for byte) from blocks
 * the caller holds in one pool to blocks it holds in another; it changes
 * no lease.  Swapping out is: lease below, SWAP, release above; swapping
 * in is the reverse.  So each pool charges the tenant for what it holds,
 * and a crash at any point leaks nothing: every block is in some lease of
 * the caller.  Every source and destination block is checked (-EPERM) and
 * both leases are pinned until the copy is done (a release waits, a close
 * keeps the blocks until then).  The reply comes at once with a ticket; the
 * copy runs on the lower tier's swap worker and ends with exactly one
 * KVP_EV_SWAP_DONE record on the socket (req_id 0).  SWAP_WAIT waits for a
 * ticket (its reply comes after that record).  KVP_SWAP_SYNC makes SWAP
 * itself wait: its reply status is then the copy's.  At most
 * KVP_SWAP_INFLIGHT jobs per connection (-EBUSY beyond).
 *
 * Errors: -ENOENT no such tier; -EUNATCH the caller has not joined that
 * tier; -EINVAL same tier twice, a count of 0 or above KVP_IO_MAX_BLOCKS,
 * a destination block named twice, non-zero reserved fields; -EPERM a
 * block the caller does not hold there; -EBUSY too many jobs in flight;
 * and in the completion: -EIO (the file's I/O failed), -ECANCELED (the
 * daemon stopped first).  After a failed copy the destination blocks hold
 * unspecified bytes; every block stays the caller's.
 */

#define KVP_MAX_TIERS		4
#define KVP_SWAP_INFLIGHT	64

/* kvp_tier_rec.kind */
#define KVP_TIER_TOP		1	/* device (cuda) or host (cpu) memory */
#define KVP_TIER_DRAM		2	/* host memory (pinned on cuda) */
#define KVP_TIER_NVME		3	/* blocks in a file */

/* kvp_tier_rec.flags */
#define KVP_TIER_F_DIRECT	(1U << 0)	/* file opened O_DIRECT */
#define KVP_TIER_F_URING	(1U << 1)	/* file I/O through io_uring */
#define KVP_TIER_F_PINNED	(1U << 2)	/* host memory page-locked */

/* Swap latency histogram: bucket i counts jobs of [2^i, 2^(i+1)) us. */
#define KVP_LAT_BUCKETS		16

struct kvp_tier_rec {
	struct kvp_pool_rec pool;	/* as POOL_STATUS, for this pool */
	uint32_t tier;			/* 0: the top pool */
	uint32_t kind;			/* KVP_TIER_* */
	uint32_t flags;			/* KVP_TIER_F_* */
	uint32_t pad;
	uint64_t swaps;			/* jobs with this pool at one end */
	uint64_t blocks_in;		/* blocks copied into this pool */
	uint64_t blocks_out;		/* blocks copied out of it */
	uint64_t bytes_in;
	uint64_t bytes_out;
	uint64_t copy_in_ns;		/* time copying into this pool */
	uint64_t copy_out_ns;		/* time copying out of it */
	uint64_t errors;		/* jobs that failed */
	uint64_t lat_us[KVP_LAT_BUCKETS];	/* job latency, submit to done */
	uint64_t prefix_blocks;		/* demoted prefix blocks held here */
	uint64_t prefix_in;		/* prefix blocks demoted into it */
	uint64_t prefix_out;		/* and promoted out of it */
	uint64_t reserved[1];
};

/* kvp_tier_attach.flags */
#define KVP_TIER_LEDGER_FD	(1U << 0)	/* a /dev/kvpool fd rides along */

struct kvp_tier_attach {
	uint32_t tier;			/* 1..: a lower tier */
	uint32_t flags;			/* KVP_TIER_LEDGER_FD with the module */
	char tenant[KVP_NAME_LEN];	/* in-process: "" = per-uid tenant */
	uint64_t reserved[2];
};

struct kvp_tier_attach_reply {
	uint64_t lease_id;		/* the caller's lease in that pool */
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	char pool[KVP_NAME_LEN];
	uint64_t reserved[2];
};

struct kvp_tier_lease {
	uint32_t tier;
	uint32_t count;			/* 1..KVP_IO_MAX_BLOCKS */
	uint32_t flags;			/* KVPOOL_LEASE_* */
	uint32_t pad;
	uint64_t timeout_ns;		/* 0: no limit */
	uint64_t reserved;
};

struct kvp_tier_release {
	uint32_t tier;
	uint32_t count;			/* entries following; 0 with
					 * KVPOOL_RELEASE_ALL */
	uint32_t flags;			/* KVPOOL_RELEASE_* */
	uint32_t pad;
	/* uint32_t blocks[count]; */
};

struct kvp_tier_sel {
	uint32_t tier;
	uint32_t pad;
};

/* kvp_swap.flags */
#define KVP_SWAP_SYNC		(1U << 0)	/* reply when the copy is done */
#define KVP_SWAP_FLAGS		KVP_SWAP_SYNC

struct kvp_swap {
	uint32_t src_tier;
	uint32_t dst_tier;
	uint32_t n;			/* blocks, 1..KVP_IO_MAX_BLOCKS */
	uint32_t flags;			/* KVP_SWAP_* */
	uint64_t off_src;		/* u32 [n]: blocks in src_tier */
	uint64_t off_dst;		/* u32 [n]: blocks in dst_tier */
	uint64_t reserved[2];
};

struct kvp_swap_reply {
	uint64_t ticket;		/* per connection, from 1 */
	uint64_t reserved;
};

struct kvp_swap_wait {
	uint64_t ticket;
	uint64_t timeout_ns;		/* 0: no limit */
};

/* The end of a swap job: the KVP_EV_SWAP_DONE record's body and the
 * SWAP_WAIT reply's (whose status is 0 once the job is done, -ETIMEDOUT,
 * or -ENOENT for a ticket never issued or no longer remembered: the last
 * 4 * KVP_SWAP_INFLIGHT results are kept). */
struct kvp_swap_done {
	uint64_t ticket;
	int32_t status;			/* 0 or -errno */
	uint32_t blocks;
	uint64_t bytes;
	uint64_t ns;			/* submit to done */
	uint64_t copy_ns;		/* copying */
};

struct kvp_block_sum {
	uint32_t tier;
	uint32_t n;			/* 1..KVP_IO_MAX_BLOCKS */
	uint64_t off_blocks;		/* u32 [n]: blocks held in tier */
	uint64_t off_sums;		/* u64 [n] out: FNV-1a 64 of each
					 * block's bytes */
	uint64_t reserved;
};

/* What the library's sequences look like, for kvpoolctl (informational;
 * the daemon only stores it). */
struct kvp_seq_report {
	uint32_t resident;		/* sequences wholly in the top pool */
	uint32_t dropped;		/* must be re-filled by the caller */
	uint32_t swapped[KVP_MAX_TIERS];	/* sequences with blocks in
						 * tier i (index 0 unused) */
	uint64_t reserved[2];
};

struct kvp_client_tier_rec {
	uint64_t lease_id;		/* in the top pool */
	uint32_t pid;
	uint32_t uid;
	char tenant[KVP_NAME_LEN];
	uint32_t blocks[KVP_MAX_TIERS];	/* held in each tier */
	uint64_t tier_lease[KVP_MAX_TIERS];	/* 0: not joined */
	struct kvp_seq_report seqs;	/* as last reported */
	uint64_t swaps;			/* jobs submitted */
	uint64_t bytes_out;		/* copied down (to a lower tier) */
	uint64_t bytes_in;		/* copied up */
	uint64_t reserved[2];
};

/* ---- the cluster tier (Documentation/cluster.rst) ---------------------- */

/* kvp_cluster_status.state */
enum kvp_cluster_state {
	KVP_CLUSTER_OFF = 0,		/* not configured */
	KVP_CLUSTER_UNAVAILABLE = 1,	/* configured, but this build has no
					 * cluster client (hiredis) */
	KVP_CLUSTER_DOWN = 2,		/* no slot map: every lookup misses */
	KVP_CLUSTER_UP = 3,		/* a slot map covering every slot */
	KVP_CLUSTER_PARTIAL = 4,	/* a slot map with slots missing */
};

/* kvp_cluster_status.policy: when prefix blocks are written */
enum kvp_cluster_policy {
	KVP_CLUSTER_THROUGH = 0,	/* when published */
	KVP_CLUSTER_BACK = 1,		/* when evicted */
	KVP_CLUSTER_READ = 2,		/* never: fetch only */
};

/* Why a fetched value was not used (kvp_cluster_status.fetch_invalid[]). */
enum kvp_cluster_invalid {
	KVP_CLI_SHORT = 0,		/* truncated */
	KVP_CLI_FORMAT,			/* not a block value (garbage, version) */
	KVP_CLI_MODEL,			/* another model, layout or dtype */
	KVP_CLI_CHAIN,			/* another chain or parent key */
	KVP_CLI_TOKENS,			/* other token ids */
	KVP_CLI_SUM,			/* checksum: corrupt or other key */
	KVP_CLI_TYPE,			/* not a string reply */
	KVP_CLI_MAX = 8,
};

struct kvp_cluster_status {
	char node[64];			/* this node's name in the cluster */
	uint32_t state;			/* enum kvp_cluster_state */
	uint32_t policy;		/* enum kvp_cluster_policy */
	uint32_t deadline_ms;		/* MATCH waits at most this long */
	uint32_t masters;		/* in the fetch thread's slot map */
	uint32_t slots;			/* slots the map covers */
	uint32_t tenants;		/* tenants with a cluster key */
	/* fetches (MATCH) */
	uint64_t fetches;		/* lookups sent (one round each) */
	uint64_t fetch_blocks;		/* blocks asked for */
	uint64_t fetch_hits;		/* blocks fetched, verified, cached */
	uint64_t fetch_absent;		/* not in the cluster */
	uint64_t fetch_invalid[KVP_CLI_MAX];	/* values refused, by reason */
	uint64_t fetch_errors;		/* node down, failover, TRYAGAIN */
	uint64_t fetch_timeouts;	/* not there by the deadline */
	uint64_t fetch_late;		/* answered after MATCH gave up */
	uint64_t fetch_dropped;		/* queue full: not asked */
	uint64_t fetch_no_room;		/* verified, but no block to hold it */
	uint64_t fetch_bytes;		/* value bytes received */
	uint64_t fetch_ns;		/* time in fetch rounds */
	/* stores */
	uint64_t put_blocks;		/* values stored */
	uint64_t put_bytes;
	uint64_t put_oom;		/* refused: the cluster is full */
	uint64_t put_errors;		/* other errors, node down */
	uint64_t put_timeouts;
	uint64_t put_dropped;		/* queue full: not stored */
	uint64_t put_queued_bytes;	/* waiting now */
	uint64_t put_ns;		/* time in store rounds */
	/* the cluster view */
	uint64_t events;		/* stored/removed keys sent */
	uint64_t events_dropped;	/* queue full or failed */
	uint64_t heartbeats;
	uint64_t heartbeat_errors;
	/* routing (both threads) */
	uint64_t moved;
	uint64_t ask;
	uint64_t connects;
	uint64_t connect_errors;
	uint64_t io_errors;
	uint64_t refreshes;
	uint64_t refresh_errors;
	uint64_t reserved[4];
};

/* ---- restarts (Documentation/daemon.rst, "Restart and epochs") --------- */

/* kvp_restart_info.store: where pool memory is kept for the next start. */
#define KVP_KEEP_NONE		0	/* nowhere: contents die with kvpoold */
#define KVP_KEEP_MODULE		1	/* deposited with the module's pools */
#define KVP_KEEP_SYSTEMD	2	/* the service manager's fd store */

/* What this kvpoold kept of the one before it: pool-wide figures, open
 * to every local user like POOL_STATUS. */
struct kvp_restart_info {
	uint32_t store;			/* KVP_KEEP_* */
	uint32_t kept;			/* 1: memory of an earlier life offered */
	uint32_t preserved;		/* 1: ... and used (contents kept) */
	uint32_t pad;
	uint64_t lives;			/* starts on the kept metadata region */
	uint64_t blocks;		/* blocks whose contents were kept */
	uint64_t bytes;
	uint64_t prefix_entries;	/* prefix-cache entries kept */
	uint64_t resume_ns;		/* from this start to serving */
	uint64_t uptime_ns;		/* since this start */
	char why[96];			/* kept && !preserved: why not */
	uint64_t reserved[4];
};

#endif /* KVPOOL_PROTO_H */
