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
 *   -E2BIG	a request beyond the daemon's per-request bounds (ATTN: a
 *		block table of more than 2^20 entries once cut to the
 *		sequences' lengths, more than 2^34 multiply-adds; COPY: more
 *		than 4 GiB): split it.
 * ATTN refuses a block named twice in one sequence (-EINVAL).
 * When the request is too short to carry a req_id, the reply has req_id 0.
 * Name fields (pool, tenant) hold at most KVP_NAME_LEN - 1 characters and
 * their NUL: a field without a NUL is refused with -EINVAL, never cut.
 *
 * Connections are limited (kvpoold --max-clients, --max-clients-per-uid):
 * a refused one receives one KVP_EV_REFUSED record and is closed.
 * CLIENT_LIST shows a peer that is not an admin only its own uid's leases.
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
	/* data plane */
	KVP_OP_LAYOUT = 16,	/* struct kvp_layout -> struct kvp_layout_reply */
	KVP_OP_WRITE_KV = 17,	/* struct kvp_kv -> - */
	KVP_OP_READ_KV = 18,	/* struct kvp_kv -> - */
	KVP_OP_ATTN = 19,	/* struct kvp_attn -> - */
	KVP_OP_COPY = 20,	/* struct kvp_copy -> - */
	/* admin (no HELLO needed) */
	KVP_OP_TENANT_ADD = 32,	/* struct kvp_tenant -> - */
	KVP_OP_TENANT_DEL = 33,	/* struct kvp_tenant (limits ignored) -> - */
	KVP_OP_TENANT_SET = 34,	/* struct kvp_tenant (KVP_KEEP fields) -> - */
	KVP_OP_TENANT_LIST = 35, /* struct kvp_list -> struct kvp_list_reply +
				  * struct kvp_tenant_rec[count] */
	KVP_OP_POOL_STATUS = 36, /* (no body) -> struct kvp_pool_rec */
	KVP_OP_CLIENT_LIST = 37, /* struct kvp_list -> struct kvp_list_reply +
				  * struct kvp_client_rec[count] */
};

/* Asynchronous records from the daemon (req_id 0, body below). */
enum kvp_event {
	KVP_EV_RECLAIM = 0x4001,	/* struct kvp_ev_reclaim */
	KVP_EV_REFUSED = 0x4002,	/* struct kvp_ev_refused, then close */
};

/* ---- session ----------------------------------------------------------- */

/* kvp_hello.flags: which descriptors ride along (SCM_RIGHTS, this order). */
#define KVP_HELLO_LEDGER_FD	(1U << 0)	/* the client's /dev/kvpool fd */
#define KVP_HELLO_REGION	(1U << 1)	/* a memfd of region_bytes */
#define KVP_HELLO_FLAGS		(KVP_HELLO_LEDGER_FD | KVP_HELLO_REGION)

struct kvp_hello {
	uint32_t version;	/* KVP_VERSION */
	uint32_t flags;		/* KVP_HELLO_* */
	uint64_t region_bytes;	/* size of the region (<= its memfd size) */
	/* in-process ledger: the pool/tenant to attach to (may be empty) */
	char pool[KVP_NAME_LEN];
	char tenant[KVP_NAME_LEN];
	uint64_t reserved[2];	/* must be 0 */
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
	uint32_t pad;
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

#endif /* KVPOOL_PROTO_H */
