/* SPDX-License-Identifier: MIT */
/*
 * kvlease.h - libkvlease, the kvpool client library.
 *
 * CONTRACT: this header is the contract between libkvlease and its users
 * (engines, kvpoolctl, kvpool-bench, libkvlease/kvl_admin.c).
 * Change it only by adding; never change an existing signature or struct.
 *
 * A struct kvl_ctx is one client of one pool: a lease (the blocks it holds,
 * charged to one tenant), a connection to kvpoold for the data plane (K/V
 * writes, attention, block copies) and a shared memory region for bulk data.
 * The ledger is /dev/kvpool when the module is loaded, otherwise the ledger
 * hosted inside kvpoold; the library picks the transport, the calls are the
 * same.  A context is not thread-safe: use one per thread, or lock.
 *
 * Every function returns 0, a count, or -errno; none sets errno as its
 * interface.  Block indices are pool indices (0..capacity-1).
 *
 * Under pressure (the lease cannot grow) the context's policy decides what
 * happens (stall, swap, recompute or fail: see "pressure" below); the
 * daemon's lower tiers (host DRAM, a file) hold swapped sequences.
 *
 * Daemon restarts: when kvpoold restarts, block contents are lost.  The
 * library reconnects by itself; the call that notices returns -ESTALE once
 * and kvl_epoch() changes.  Sequences then have length 0 (their blocks, if
 * still leased, stay theirs), their state is KVL_SEQ_DROPPED (swapped ones
 * too: lower tiers lose their contents as well) and must be re-filled by
 * the caller.  With the
 * in-process ledger the lease itself died with the daemon: the library
 * leases a fresh set of blocks for its sequences when they grow again.  Raw
 * block numbers obtained with kvl_lease() before the restart are invalid in
 * that mode (kvl_status().held tells what is held).
 */
#ifndef KVLEASE_H
#define KVLEASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVL_NAME_LEN		32

/* Default daemon socket; $KVPOOL_SOCKET overrides it (kvl_opts too). */
#define KVL_DEFAULT_SOCKET	"/run/kvpool/kvpool.sock"
#define KVL_SOCKET_ENV		"KVPOOL_SOCKET"
/* Default ledger device; $KVPOOL_DEVICE overrides it. */
#define KVL_DEFAULT_DEVICE	"/dev/kvpool"
#define KVL_DEVICE_ENV		"KVPOOL_DEVICE"

struct kvl_ctx;
struct kvl_seq;
struct kvl_admin;

/* Log levels (syslog numbering). */
#define KVL_LOG_ERR		3
#define KVL_LOG_WARNING		4
#define KVL_LOG_INFO		6
#define KVL_LOG_DEBUG		7

typedef void (*kvl_log_fn)(void *arg, int level, const char *msg);

/* kvl_opts.flags */
/* Ledger only: do not connect to kvpoold (needs the module). */
#define KVL_OPEN_NO_DAEMON	(1U << 0)
/* Ignore /dev/kvpool even when present: use the daemon's ledger. */
#define KVL_OPEN_NO_MODULE	(1U << 1)
/* Do not reconnect after a daemon restart: calls fail with -ECONNRESET. */
#define KVL_OPEN_NO_RECONNECT	(1U << 2)

struct kvl_opts {
	const char *socket_path;	/* NULL: $KVPOOL_SOCKET or default */
	const char *device_path;	/* NULL: $KVPOOL_DEVICE or default */
	const char *pool;		/* NULL or "": the first pool */
	const char *tenant;		/* NULL or "": per-uid tenant */
	uint32_t flags;			/* KVL_OPEN_* */
	uint32_t lease_batch;		/* blocks leased at once for
					 * sequences; 0: 16 */
	uint64_t region_bytes;		/* shared region; 0: 16 MiB */
	uint64_t timeout_ns;		/* lease wait for sequences and
					 * reconnects; 0: 10 s */
	kvl_log_fn log;			/* NULL: stderr for errors */
	void *log_arg;
	int log_level;			/* 0: KVL_LOG_WARNING */
	int pad;
	uint32_t policy;		/* KVL_POLICY_* under pressure;
					 * 0: KVL_POLICY_STALL */
	uint32_t stall_ms;		/* STALL's wait (0: timeout_ns); with
					 * SWAP/RECOMPUTE, a wait before the
					 * caller's own sequence is preempted
					 * (0: none) */
	uint64_t reserved[3];		/* must be zero */
};

/* Transport of the ledger (kvl_status.mode). */
#define KVL_MODE_MODULE		1	/* /dev/kvpool ioctls */
#define KVL_MODE_DAEMON		2	/* kvpoold's in-process ledger */

int kvl_open(const struct kvl_opts *opts, struct kvl_ctx **out);
void kvl_close(struct kvl_ctx *ctx);

/* ---- leases ---------------------------------------------------------- */

/* Lease flags: the same bits as KVPOOL_LEASE_* of <linux/kvpool.h>. */
#define KVL_LEASE_PARTIAL	(1U << 0)
#define KVL_LEASE_NONBLOCK	(1U << 1)
#define KVL_LEASE_ORPHAN_FAIL	(1U << 2)

/* Bind to a pool/tenant (NULL or "" for defaults); only while holding no
 * block (-EBUSY).  kvl_open() already attaches to opts->pool/tenant. */
int kvl_attach_tenant(struct kvl_ctx *ctx, const char *pool,
		      const char *tenant);
/* Lease count blocks into blocks[]; returns the number granted. Errors as
 * KVPOOL_IOC_LEASE: -EDQUOT, -EAGAIN, -ETIMEDOUT, -ENOMEM, -ENXIO, -ENOSPC.
 * timeout_ns 0 waits without limit. */
int kvl_lease(struct kvl_ctx *ctx, uint32_t count, uint32_t flags,
	      uint64_t timeout_ns, uint32_t *blocks);
/* Release blocks (all validated first, -EINVAL if one is not held);
 * returns the number released. */
int kvl_release(struct kvl_ctx *ctx, const uint32_t *blocks, uint32_t count);
/* Release every block of the lease, sequences' blocks and cache included
 * (sequences keep existing with length 0). Returns the number released. */
int kvl_release_all(struct kvl_ctx *ctx);
/* A file descriptor to poll for reclaim requests: *events is set to the
 * poll event to wait for (POLLPRI on /dev/kvpool, POLLIN on the daemon
 * socket).  Then call kvl_reclaim_target(). */
int kvl_reclaim_fd(struct kvl_ctx *ctx, short *events);
/* Blocks the ledger asks this client to give back (0: none). */
int kvl_reclaim_target(struct kvl_ctx *ctx, uint32_t *target);
/* Give cached (leased but unused) blocks back; returns the number. */
int kvl_trim(struct kvl_ctx *ctx);

struct kvl_status {
	char pool[KVL_NAME_LEN];
	char tenant[KVL_NAME_LEN];
	uint64_t lease_id;
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t backed;
	uint32_t used;
	uint32_t held;		/* blocks held by this client */
	uint32_t tenant_max;	/* 0xffffffff: unlimited */
	uint32_t tenant_min;
	uint32_t tenant_current;
	uint32_t tenant_peak;
	uint32_t reclaim_target;
	uint32_t state;		/* KVPOOL_STATE_* */
	uint64_t epoch;		/* data epoch: changes when kvpoold restarts */
	uint32_t mode;		/* KVL_MODE_* */
	uint32_t cached;	/* leased blocks kept by the library, unused */
	uint64_t region_bytes;	/* size of the shared region */
	char backend[16];	/* "cpu", "cuda" or "" (no daemon) */
	uint64_t reserved[4];
};

int kvl_status(struct kvl_ctx *ctx, struct kvl_status *st);
/* Current data epoch (0 before the first successful daemon call). */
uint64_t kvl_epoch(const struct kvl_ctx *ctx);

/* ---- KV layout ------------------------------------------------------- */

/* Element types: the values of enum kvk_dtype (kernels/kvkern.h). */
#define KVL_DTYPE_BF16		1
#define KVL_DTYPE_FP8		2
#define KVL_DTYPE_INT8		3
#define KVL_DTYPE_INT4		4

struct kvl_layout {
	/* in */
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;	/* multiple of 32, 32..256 */
	uint32_t dtype;		/* KVL_DTYPE_* */
	float rope_base;	/* informational (0: none); RoPE data for
				 * edits: kvl_layout_set_rope() */
	/* out */
	uint32_t tokens_per_block;
	uint64_t bytes_per_token;
	uint64_t reserved[2];
};

/* Declare a model's layout to the daemon: returns a layout id (>= 0) for
 * the calls below, and fills tokens_per_block.  Up to 8 per context. */
int kvl_layout_declare(struct kvl_ctx *ctx, struct kvl_layout *l);

/* ---- data plane on raw blocks (engines with their own tables) -------- */

/* Write K and V of ntok tokens of one layer: token t -> slot slots[t] of
 * block blocks[t]; k, v: [ntok][kv_heads][head_dim] FP32. */
int kvl_write_kv(struct kvl_ctx *ctx, int layout, uint32_t layer,
		 uint32_t ntok, const uint32_t *blocks, const uint32_t *slots,
		 const float *k, const float *v);
/* Read back (dequantised), same shapes; k or v may be NULL. */
int kvl_read_kv(struct kvl_ctx *ctx, int layout, uint32_t layer,
		uint32_t ntok, const uint32_t *blocks, const uint32_t *slots,
		float *k, float *v);

/* Attention for a batch of sequences (semantics of kvk_decode and, with
 * n_new >= 1, kvk_prefill with a causal mask). */
struct kvl_attn_args {
	uint32_t layer;
	uint32_t batch;
	uint32_t q_heads;
	uint32_t max_blocks_per_seq;
	uint32_t n_new;			/* 0: decode (one query per seq) */
	float scale;			/* 0: 1/sqrt(head_dim) */
	const float *q;			/* [batch][max(n_new,1)][q_heads][hd] */
	const uint32_t *block_tables;	/* [batch][max_blocks_per_seq] */
	const uint32_t *ctx_lens;	/* [batch] */
	float *out;			/* like q */
	uint64_t reserved[2];
};
int kvl_attention(struct kvl_ctx *ctx, int layout,
		  const struct kvl_attn_args *a);

/* Copy whole blocks: dst[i] = src[i] for i in order. */
int kvl_copy_blocks(struct kvl_ctx *ctx, const uint32_t *src,
		    const uint32_t *dst, uint32_t n);

/* ---- device buffers (GPU tenants, the daemon's cuda backend) --------- */

/*
 * An engine on the GPU keeps queries, new K/V and outputs in device
 * memory.  A device buffer is a CUDA VMM allocation on the daemon's GPU
 * that the daemon imports and maps too; the *_dev calls read their bulk
 * arrays from it and write their outputs into it, so activations never
 * cross host memory.  Index arrays (blocks, slots, block tables, context
 * lengths) stay host arrays: the daemon checks them against the lease.
 * The library loads the CUDA driver (libcuda.so.1, or $KVPOOL_LIBCUDA)
 * with dlopen() when a device buffer is first made: programs that never
 * make one do not need a driver.
 *
 * Ordering: a *_dev call first synchronises `stream` (a CUstream of the
 * caller's current context, NULL for the legacy default stream), so the
 * inputs the caller produced on it are complete; the daemon runs the op
 * on its own stream and synchronises it before it replies, so when the
 * call returns the outputs are complete and visible to any later work.
 *
 * After a daemon restart the library registers its buffers again.
 * Errors: -EOPNOTSUPP when the daemon's backend has no device memory
 * (cpu), -ENODEV without a CUDA driver, -EBADF when the descriptor is
 * not an exported allocation, -EXDEV when the buffer is not on the
 * daemon's device, -EFAULT for an array outside the buffer, -EINVAL for
 * an offset not a multiple of 16.
 */
struct kvl_dev_buf;

/* "no array" for kvl_read_kv_dev's k or v */
#define KVL_DEV_NONE		UINT64_MAX
/* kvl_write_kv_dev flags */
#define KVL_DEV_BF16		(1U << 0)	/* k, v are BF16, not FP32 */

/* Allocate at least bytes (rounded up to the device's allocation
 * granularity) on CUDA device `device` (this process's ordinal of the
 * daemon's GPU), exportable, mapped read-write here, and register it with
 * the daemon. */
int kvl_dev_buf_create(struct kvl_ctx *ctx, int device, uint64_t bytes,
		       struct kvl_dev_buf **out);
/* Register an allocation the caller made and exported itself
 * (cuMemExportToShareableHandle, POSIX file descriptor); fd stays the
 * caller's.  bytes: the size to map, a multiple of the granularity. */
int kvl_dev_buf_register(struct kvl_ctx *ctx, int fd, uint64_t bytes,
			 struct kvl_dev_buf **out);
/* Unregister (and, for kvl_dev_buf_create's, free) the buffer. */
void kvl_dev_buf_free(struct kvl_dev_buf *buf);
/* Device address of the buffer in this process (a CUdeviceptr; 0 for a
 * registered buffer) and its size. */
uint64_t kvl_dev_buf_addr(const struct kvl_dev_buf *buf);
uint64_t kvl_dev_buf_size(const struct kvl_dev_buf *buf);

/* kvl_write_kv / kvl_read_kv with k and v at byte offsets into buf. */
int kvl_write_kv_dev(struct kvl_ctx *ctx, int layout, uint32_t layer,
		     uint32_t ntok, const uint32_t *blocks,
		     const uint32_t *slots, struct kvl_dev_buf *buf,
		     uint64_t off_k, uint64_t off_v, uint32_t flags,
		     void *stream);
int kvl_read_kv_dev(struct kvl_ctx *ctx, int layout, uint32_t layer,
		    uint32_t ntok, const uint32_t *blocks,
		    const uint32_t *slots, struct kvl_dev_buf *buf,
		    uint64_t off_k, uint64_t off_v, void *stream);
/* kvl_attention with q and out at byte offsets into buf (a->q and a->out
 * are ignored). */
int kvl_attention_dev(struct kvl_ctx *ctx, int layout,
		      const struct kvl_attn_args *a, struct kvl_dev_buf *buf,
		      uint64_t off_q, uint64_t off_out, void *stream);

/* ---- sequences ------------------------------------------------------- */

int kvl_seq_create(struct kvl_ctx *ctx, int layout, struct kvl_seq **out);
/* Frees the sequence; blocks no other sequence shares go back to the
 * library's cache (and to the ledger beyond 2 * lease_batch). */
void kvl_seq_free(struct kvl_seq *seq);
/* Grow by ntok positions, leasing blocks in batches as needed; returns
 * the new length.  -EDQUOT/-ETIMEDOUT/-ENOMEM... from the ledger. */
int kvl_seq_append(struct kvl_seq *seq, uint32_t ntok);
/* Write K/V of positions pos..pos+ntok-1 (< length) of one layer; k, v:
 * [ntok][kv_heads][head_dim].  A shared block is copied first (COW). */
int kvl_seq_write_kv(struct kvl_seq *seq, uint32_t layer, uint32_t pos,
		     uint32_t ntok, const float *k, const float *v);
int kvl_seq_read_kv(struct kvl_seq *seq, uint32_t layer, uint32_t pos,
		    uint32_t ntok, float *k, float *v);
/* Decode for nseq sequences of one layout: q, out [nseq][q_heads][hd];
 * each attends to its whole length. */
int kvl_seq_decode(struct kvl_seq *const *seqs, uint32_t nseq,
		   uint32_t layer, uint32_t q_heads, const float *q,
		   float scale, float *out);
/* Multi-token causal attention for the last n_new positions of each:
 * q, out [nseq][n_new][q_heads][hd]. */
int kvl_seq_attention(struct kvl_seq *const *seqs, uint32_t nseq,
		      uint32_t layer, uint32_t q_heads, uint32_t n_new,
		      const float *q, float scale, float *out);
/* Fork: the child shares every full block (copy-on-write) and gets a copy
 * of the partial last block. */
int kvl_seq_fork(struct kvl_seq *seq, struct kvl_seq **child);
/* Drop the slots from len on (blocks that become empty are freed). */
int kvl_seq_truncate(struct kvl_seq *seq, uint32_t len);
uint32_t kvl_seq_len(const struct kvl_seq *seq);
/* The block table: *nblocks entries, position p is in table[p / tpb]. */
int kvl_seq_block_table(const struct kvl_seq *seq, const uint32_t **table,
			uint32_t *nblocks);

/* ---- editing sequences (kvl_edit.c, Documentation/edits.rst) ---------- */

/*
 * How a layout's keys were rotated (RoPE); keys are written already
 * rotated, at the position kvl_seq_positions() gives for their slot.
 * Pair i of a head is (i, i + rotary_dims / 2) for NEOX and (2i, 2i + 1)
 * for GPTJ and turns by position * inv_freq[i]; inv_freq is
 * base^(-2i / rotary_dims) unless given (nfreq = rotary_dims / 2 values:
 * linear/NTK/Llama-3/YaRN frequencies).  Without RoPE data an edit that
 * must turn keys fails with -ENODATA.
 */
#define KVL_ROPE_NONE		0
#define KVL_ROPE_NEOX		1
#define KVL_ROPE_GPTJ		2

struct kvl_rope {
	uint32_t style;			/* KVL_ROPE_*; NONE clears */
	uint32_t rotary_dims;		/* 0: head_dim; else even */
	float base;			/* for the derived table */
	uint32_t nfreq;			/* 0, or rotary_dims / 2 */
	const float *inv_freq;		/* [nfreq] or NULL */
	uint64_t reserved[2];		/* must be zero */
};
int kvl_layout_set_rope(struct kvl_ctx *ctx, int layout,
			const struct kvl_rope *rope);

/*
 * Edits need the sequence in the top pool: a swapped one refuses splice,
 * compact and compress with -EBUSY (kvl_seq_swap_in() first), a dropped
 * one answers -ENODATA; kvl_seq_score() brings a swapped one back.  An
 * edit ends the sequence's run of known token ids (kvl_seq_tokens()) at
 * the first slot it changed: only blocks before it are published.
 *
 * Positions apart from slots: a sequence has a length (slots in use) and
 * a next position, the RoPE position to rotate the next appended token's
 * query and key with.  Appending takes positions from the next one on;
 * a compaction keeps positions (gaps appear); a splice gives the slots it
 * makes the positions of the span it replaces and shifts the tail's;
 * truncating makes the first dropped slot's position the next one.
 */
uint32_t kvl_seq_next_pos(const struct kvl_seq *seq);
/* Positions of slots [slot, slot + n) into pos; -ERANGE past the end. */
int kvl_seq_positions(const struct kvl_seq *seq, uint32_t slot, uint32_t n,
		      uint32_t *pos);

/*
 * Delete slots [at, at + ndel), make nins slots at at (zeros until the
 * caller writes their K/V, rotated at their positions) and move the tail,
 * its keys turned by the position delta in the daemon.  Returns the new
 * length.  -ERANGE: span beyond the length; -ENODATA: the tail must turn
 * and the layout has no RoPE data; -EOVERFLOW: positions past 2^31 - 1;
 * errors from leasing (new blocks) or the daemon.  On error the sequence
 * is unchanged.
 */
int kvl_seq_splice(struct kvl_seq *seq, uint32_t at, uint32_t ndel,
		   uint32_t nins);
/* Keep slots keep[0..nkeep) (strictly increasing, else -EINVAL), in
 * order, in the fewest blocks; the others are dropped and blocks freed.
 * Returns the new length. */
int kvl_seq_compact(struct kvl_seq *seq, const uint32_t *keep,
		    uint32_t nkeep);

/*
 * Score one layer's slots with n_q recent queries q [n_q][q_heads][hd]
 * (rotated, as for attention): scores[slot] (may be NULL) is the sum over
 * queries and query heads of the softmax weight on that slot, or the
 * maximum with KVL_SCORE_MAX; KVL_SCORE_CAUSAL: the queries are the last
 * n_q slots (each sees the slots up to its own).  The scores are also
 * added (KVL_SCORE_MAX: maxed) into the sequence's importance, kept per
 * slot across layers and calls until KVL_SCORE_RESET; kvl_seq_compress()
 * ranks by it.
 */
#define KVL_SCORE_MAX		(1U << 0)
#define KVL_SCORE_CAUSAL	(1U << 1)
#define KVL_SCORE_RESET		(1U << 2)
#define KVL_SCORE_FLAGS		(KVL_SCORE_MAX | KVL_SCORE_CAUSAL | \
				 KVL_SCORE_RESET)
int kvl_seq_score(struct kvl_seq *seq, uint32_t layer, uint32_t q_heads,
		  uint32_t n_q, const float *q, float scale, uint32_t flags,
		  float *scores);

/*
 * Token-wise compression: keep the first `sinks` slots, the last `window`
 * slots and the highest-scoring others (importance from kvl_seq_score(),
 * most recent first without scores) up to `budget` slots, and compact.
 * budget 0: the policy's.  Returns the new length; -EINVAL when sinks +
 * window exceed the budget.  Freed blocks go to the library's cache and
 * beyond 2 * lease_batch to the ledger.
 */
int kvl_seq_compress(struct kvl_seq *seq, uint32_t budget);

struct kvl_compress_policy {
	uint32_t sinks;			/* first slots always kept */
	uint32_t window;		/* last slots always kept */
	uint32_t budget;		/* slots kept by kvl_seq_compress(seq,
					 * 0) and kvl_compress_reclaim() */
	uint32_t max_tokens;		/* 0, or: kvl_seq_append() first
					 * compresses (to budget, or lower to
					 * fit) when the length would pass it */
	uint64_t reserved[2];		/* must be zero */
};
/* Set (p NULL: remove) the sequence's policy; without one, sinks 4 and
 * window 32. */
int kvl_seq_set_compress(struct kvl_seq *seq,
			 const struct kvl_compress_policy *p);
/*
 * The relief list's compression step alone (the swap and recompute
 * policies run it under pressure, after the prefix cache and before
 * swap): compress the resident sequences that have a policy with a
 * budget, the one holding the most blocks first, until `blocks` blocks
 * (0: as many as the policies give) are back in the library's cache;
 * returns that number.  The blocks stay leased: the next kvl_seq_append()
 * takes them, kvl_trim() gives them back.
 */
int kvl_compress_reclaim(struct kvl_ctx *ctx, uint32_t blocks);

/* ---- prefix cache (kvl_prefix.c) -------------------------------------- */

/*
 * kvpoold keeps one prefix cache per tenant, shared by all its processes:
 * full blocks named by a hash chain of their token ids and the model's
 * identity, verified on every hit, charged to the tenant and held by the
 * daemon (they outlive the process that computed them).  A sequence that
 * matches cached blocks references them read-only; writing into one
 * copies it first.  See Documentation/prefix-cache.rst.
 */
#define KVL_MODEL_LEN		64

/* kvl_layout_declare() plus the model's identity (name and revision,
 * 1..63 characters): the cache keys of this layout's sequences. */
int kvl_layout_declare_model(struct kvl_ctx *ctx, struct kvl_layout *l,
			     const char *model);
/* kvl_seq_append() carrying the token ids of the new positions. */
int kvl_seq_append_tokens(struct kvl_seq *seq, const uint32_t *tokens,
			  uint32_t ntok);
/* The token ids known, from position 0: *ntok of them. */
int kvl_seq_tokens(const struct kvl_seq *seq, const uint32_t **tokens,
		   uint32_t *ntok);
/* On a new (empty) sequence: attach the longest cached prefix of full
 * blocks of tokens[0..ntok); returns the tokens matched (a multiple of
 * tokens_per_block, possibly 0).  Pass ntok - 1 to keep the last token
 * to compute.  -ENOKEY: the layout has no model identity. */
int kvl_seq_match(struct kvl_seq *seq, const uint32_t *tokens, uint32_t ntok);
/* Offer the sequence's full blocks (with known token ids) to the cache;
 * returns the blocks it added (0: all were cached already).  -EBUSY: a
 * swap of this context is still copying (kvl_swap_wait, then again). */
int kvl_seq_publish(struct kvl_seq *seq);
/* Give back up to count unreferenced cached blocks of this tenant, least
 * recently used first (room under the tenant's max); returns how many. */
int kvl_prefix_evict(struct kvl_ctx *ctx, uint32_t count);

/* ---- admin (kvl_admin.c) --------------------------------------------- */

struct kvl_pool_info {
	char name[KVL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t backed;
	uint32_t used;
	uint32_t state;		/* KVPOOL_STATE_* */
	uint64_t epoch;
	uint32_t leases;	/* open leases */
	uint32_t chunk_blocks;
	uint32_t tenants;
	uint32_t mode;		/* KVL_MODE_* of the answering side */
	char backend[16];	/* "cpu"/"cuda", "" when unknown */
	uint64_t reserved[4];
};

struct kvl_tenant_info {
	char name[KVL_NAME_LEN];
	uint32_t max;		/* 0xffffffff: unlimited */
	uint32_t min;
	uint32_t current;
	uint32_t peak;
	uint64_t ev_max;
	uint64_t ev_stall;
	uint64_t ev_reclaim;
	uint64_t ev_fail;
	uint32_t uid;		/* allowed uid, 0xffffffff: none */
	uint32_t gid;		/* allowed gid, 0xffffffff: none */
	uint32_t leases;
	uint32_t pad;
	uint64_t reserved[2];
};

struct kvl_client_info {
	uint64_t lease_id;
	uint32_t pid;
	uint32_t uid;
	char tenant[KVL_NAME_LEN];
	uint32_t blocks;	/* blocks held */
	uint32_t connected;	/* 1: has a data-plane connection */
	uint64_t reserved[2];
};

/* A tenant's prefix cache (kvl_admin_prefix_list). */
struct kvl_prefix_info {
	char tenant[KVL_NAME_LEN];
	char ns[KVL_NAME_LEN];	/* shared namespace, "" for its own */
	uint64_t hot_lease;	/* the daemon's leases for it (0: none) */
	uint64_t cold_lease;
	uint32_t cached;	/* cached blocks charged to the tenant */
	uint32_t referenced;	/* of which in use by some sequence */
	uint64_t hits;		/* blocks found by match */
	uint64_t misses;	/* full blocks asked for and not found */
	uint64_t hit_tokens;	/* tokens in the blocks found */
	uint64_t evictions;	/* blocks given back */
	uint64_t published;	/* blocks added by publish */
	uint64_t reserved[2];
};

/* socket_path NULL: $KVPOOL_SOCKET or default. */
int kvl_admin_open(const char *socket_path, struct kvl_admin **out);
void kvl_admin_close(struct kvl_admin *adm);
int kvl_admin_tenant_add(struct kvl_admin *adm, const char *pool,
			 const char *name, uint32_t max, uint32_t min,
			 uint32_t uid, uint32_t gid);
int kvl_admin_tenant_del(struct kvl_admin *adm, const char *pool,
			 const char *name);
/* KVL_ADMIN_KEEP in a field leaves it unchanged. */
#define KVL_ADMIN_KEEP		0xfffffffeU
int kvl_admin_tenant_set(struct kvl_admin *adm, const char *pool,
			 const char *name, uint32_t max, uint32_t min,
			 uint32_t uid, uint32_t gid);
/* Fills up to cap entries; returns the total number of tenants. */
int kvl_admin_tenant_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_tenant_info *out, size_t cap);
int kvl_admin_pool_status(struct kvl_admin *adm, struct kvl_pool_info *out);
/* Fills up to cap entries; returns the total number of leases. */
int kvl_admin_client_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_client_info *out, size_t cap);
/* Prefix caches (kvpoold only: -EOPNOTSUPP without it).  Fills up to cap
 * entries; returns the number of tenants with a cache. */
int kvl_admin_prefix_list(struct kvl_admin *adm, const char *pool,
			  struct kvl_prefix_info *out, size_t cap);
/* Give back a tenant's unreferenced cached blocks; returns how many. */
int kvl_admin_prefix_flush(struct kvl_admin *adm, const char *pool,
			   const char *tenant);
/* The tenant joins the shared namespace ns (NULL or "": its own again);
 * its cache is flushed. */
int kvl_admin_prefix_share(struct kvl_admin *adm, const char *pool,
			   const char *tenant, const char *ns);

/*
 * The daemon's cluster tier (Documentation/cluster.rst): its state and
 * counters, field for field the daemon's KVP_OP_CLUSTER_STATUS record.
 * state: 0 off, 1 unavailable (no cluster client in this build), 2 down
 * (no slot map), 3 up, 4 partial; policy: 0 through, 1 back, 2 read.
 * fetch_invalid[]: values refused because short, not a block value,
 * another model, another chain, other tokens, checksum, not a string.
 */
struct kvl_cluster_info {
	char node[64];
	uint32_t state, policy, deadline_ms, masters, slots, tenants;
	uint64_t fetches, fetch_blocks, fetch_hits, fetch_absent;
	uint64_t fetch_invalid[8];
	uint64_t fetch_errors, fetch_timeouts, fetch_late, fetch_dropped;
	uint64_t fetch_no_room, fetch_bytes, fetch_ns;
	uint64_t put_blocks, put_bytes, put_oom, put_errors, put_timeouts;
	uint64_t put_dropped, put_queued_bytes, put_ns;
	uint64_t events, events_dropped, heartbeats, heartbeat_errors;
	uint64_t moved, ask, connects, connect_errors, io_errors;
	uint64_t refreshes, refresh_errors;
	uint64_t reserved[4];
};

/* kvpoold's cluster tier (state 0 when it has none). */
int kvl_admin_cluster_status(struct kvl_admin *adm,
			     struct kvl_cluster_info *out);

/*
 * What kvpoold kept of the daemon before it (Documentation/daemon.rst,
 * "Restart and epochs"), field for field its KVP_OP_RESTART_INFO record.
 * store: where pool memory is kept for the next start (0 nowhere, 1 the
 * module, 2 the service manager); kept: an earlier life's memory was
 * there; preserved: it was used (blocks, bytes, prefix_entries: what it
 * held), else why says why not; resume_ns: from this start to serving.
 */
struct kvl_restart_info {
	uint32_t store, kept, preserved, pad;
	uint64_t lives, blocks, bytes, prefix_entries;
	uint64_t resume_ns, uptime_ns;
	char why[96];
	uint64_t reserved[4];
};

int kvl_admin_restart_info(struct kvl_admin *adm,
			   struct kvl_restart_info *out);

/* ---- tiers, swap and pressure policies (kvl_tier.c, kvl_policy.c) ------ */

/*
 * A daemon owns one pool per tier: tier 0 is the top pool (the one this
 * context is bound to), lower tiers hold host DRAM ("dram") and blocks in a
 * file ("nvme"), faster first.  A context joins a lower tier (a lease
 * there, charged to the same tenant, with that pool's quotas) on first use.
 */
#define KVL_MAX_TIERS		4

/* kvl_tier_info.kind */
#define KVL_TIER_TOP		1
#define KVL_TIER_DRAM		2
#define KVL_TIER_NVME		3

struct kvl_tier_info {
	char name[KVL_NAME_LEN];	/* its pool */
	uint32_t tier;			/* 0: top */
	uint32_t kind;			/* KVL_TIER_* */
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t backed;
	uint32_t used;
	uint32_t joined;		/* 1: this context holds a lease there */
	uint32_t held;			/* blocks this context holds there */
	uint32_t pad;
	uint64_t reserved[4];
};

/* Fill up to cap entries, top first; returns the number of tiers. */
int kvl_tiers(struct kvl_ctx *ctx, struct kvl_tier_info *out, uint32_t cap);
/* Take a lease in a lower tier (same tenant); 0 if joined already.
 * -ENOENT no such tier, -EACCES/-ENOENT from the ledger's attach. */
int kvl_tier_join(struct kvl_ctx *ctx, uint32_t tier);
/* Lease / release blocks of a tier (tier 0: as kvl_lease/kvl_release). */
int kvl_tier_lease(struct kvl_ctx *ctx, uint32_t tier, uint32_t count,
		   uint32_t flags, uint64_t timeout_ns, uint32_t *blocks);
int kvl_tier_release(struct kvl_ctx *ctx, uint32_t tier,
		     const uint32_t *blocks, uint32_t count);

/*
 * Copy n whole blocks (bytes, scales included) from blocks src[] held in
 * src_tier to blocks dst[] held in dst_tier; leases do not change.  The
 * copy is asynchronous: *ticket identifies it for kvl_swap_wait() and
 * kvl_swap_poll().  Swapping out is: lease below, kvl_swap, wait, release
 * above (kvl_seq_swap_out() does it all).  Errors at submission: -ENOENT
 * no such tier, -EUNATCH tier not joined, -EPERM a block not held there,
 * -EINVAL bad counts or a destination named twice, -EBUSY 64 copies in
 * flight already.
 */
int kvl_swap(struct kvl_ctx *ctx, uint32_t src_tier, const uint32_t *src,
	     uint32_t dst_tier, const uint32_t *dst, uint32_t n,
	     uint64_t *ticket);
/* Wait for a copy (timeout_ns 0: no limit): returns its status (0, or
 * -EIO when the file tier's I/O failed...), -ETIMEDOUT, -ENOENT. */
int kvl_swap_wait(struct kvl_ctx *ctx, uint64_t ticket, uint64_t timeout_ns);
/* 1 and *status when the copy is done, 0 while it runs (never blocks). */
int kvl_swap_poll(struct kvl_ctx *ctx, uint64_t ticket, int *status);
/* The descriptor to poll (POLLIN) for copy completions. */
int kvl_swap_fd(struct kvl_ctx *ctx);
/* FNV-1a 64 of each block's bytes, in any tier (verification). */
int kvl_block_sums(struct kvl_ctx *ctx, uint32_t tier, const uint32_t *blocks,
		   uint32_t n, uint64_t *sums);

/*
 * Pressure policies: what a call does when the sequence it serves needs
 * top-pool blocks and the lease cannot grow (-EAGAIN, -EDQUOT, -ENOMEM
 * from the ledger).  Chosen per context (kvl_opts.policy,
 * kvl_set_policy()) and per call (kvl_seq_append_policy(),
 * kvl_seq_swap_in()).
 *   STALL      wait up to stall_ms (or timeout_ns) for blocks, then fail
 *              with -ETIMEDOUT; nothing else changes (the default).
 *   SWAP       free blocks cheapest first (kvl_reclaim's order): the
 *              library's unused leased blocks, the tenant's unreferenced
 *              prefix-cache blocks, then swap a victim sequence out to the
 *              first lower tier with room, then, when no tier has room,
 *              drop it (as RECOMPUTE).
 *   RECOMPUTE  free blocks by dropping a victim: its blocks go, its state
 *              becomes KVL_SEQ_DROPPED and the caller must re-fill it
 *              (kvl_dropped() lists them).
 *   FAIL       fail at once with the ledger's error.
 * Victim: the least recently used sequence of this context (last append,
 * write, read or attention; in a batched call, earlier in the batch is
 * older) other than the ones the call is serving.  When no victim is left,
 * SWAP and RECOMPUTE preempt the caller's own sequence (swapped or dropped)
 * and the call fails with the ledger's error: kvl_seq_info() says which.
 * A swapped sequence comes back by itself at the next call that needs it
 * (or with kvl_seq_swap_in()).
 */
#define KVL_POLICY_DEFAULT	0	/* per call: the context's policy */
#define KVL_POLICY_STALL	1
#define KVL_POLICY_SWAP		2
#define KVL_POLICY_RECOMPUTE	3
#define KVL_POLICY_FAIL		4

/* policy 0: STALL; stall_ms 0: timeout_ns. */
int kvl_set_policy(struct kvl_ctx *ctx, uint32_t policy, uint32_t stall_ms);
const char *kvl_policy_name(uint32_t policy);	/* NULL if unknown */
int kvl_policy_from_name(const char *name);	/* policy or -EINVAL */

/* kvl_seq_info.state */
#define KVL_SEQ_RESIDENT	1	/* every block in the top pool */
#define KVL_SEQ_SWAPPED		2	/* its blocks in a lower tier */
#define KVL_SEQ_DROPPED		3	/* contents gone: re-fill it */

struct kvl_seq_info {
	uint32_t state;			/* KVL_SEQ_* */
	uint32_t tier;			/* SWAPPED: the tier holding it */
	uint32_t len;			/* positions (0 when dropped) */
	uint32_t dropped_len;		/* DROPPED: the length it had */
	uint32_t nblocks;		/* block table entries */
	uint32_t swapped_blocks;	/* entries in the lower tier (blocks
					 * shared with a fork stay on top) */
	uint64_t last_use;		/* the context's use counter */
	uint32_t swaps_out;
	uint32_t swaps_in;
	uint32_t drops;
	uint32_t pad;
	uint64_t reserved[4];
};
int kvl_seq_info(const struct kvl_seq *seq, struct kvl_seq_info *out);
/* Append with a policy for this call (KVL_POLICY_DEFAULT: the context's). */
int kvl_seq_append_policy(struct kvl_seq *seq, uint32_t ntok,
			  uint32_t policy);
/* Swap out to tier (-1: the first lower tier with room); 0 also when
 * nothing is left on top.  -EDQUOT/-EAGAIN/-ENOMEM: no room there. */
int kvl_seq_swap_out(struct kvl_seq *seq, int tier);
/* Bring a swapped sequence back (policy: how to find top blocks). */
int kvl_seq_swap_in(struct kvl_seq *seq, uint32_t policy);
/* Sequences dropped since the last call (up to cap; the rest stay
 * listed); returns the number written. */
int kvl_dropped(struct kvl_ctx *ctx, struct kvl_seq **out, uint32_t cap);
/* Give target blocks back to the ledger, cheapest first (unused leased
 * blocks, then, as the policy allows, swap, then drop); returns the number
 * given back.  For reclaim requests (kvl_reclaim_target()). */
int kvl_reclaim(struct kvl_ctx *ctx, uint32_t target);

struct kvl_policy_stats {
	uint64_t swaps_out;		/* sequences swapped out */
	uint64_t swaps_in;
	uint64_t blocks_out;
	uint64_t blocks_in;
	uint64_t bytes_out;
	uint64_t bytes_in;
	uint64_t swap_out_ns;		/* time swapping out: lease below,
					 * copy, release above */
	uint64_t swap_in_ns;		/* and in */
	uint64_t copy_out_ns;		/* of which the daemon's copying */
	uint64_t copy_in_ns;
	uint64_t drops;			/* sequences dropped */
	uint64_t dropped_tokens;	/* their lengths */
	uint64_t self_preempts;		/* the caller's own sequence */
	uint64_t no_room;		/* swaps that found no tier with room */
	uint64_t stalls;		/* waits for blocks */
	uint64_t compressions;		/* sequences compressed by the
					 * relief list (kvl_seq_set_compress) */
	uint64_t compressed_blocks;	/* top blocks those gave back */
};
int kvl_policy_stats(struct kvl_ctx *ctx, struct kvl_policy_stats *out);

/* Admin: every tier of the daemon, with its swap figures. */
struct kvl_tier_stats {
	struct kvl_pool_info pool;
	uint32_t tier;
	uint32_t kind;			/* KVL_TIER_* */
	uint32_t flags;			/* KVL_TIER_F_* */
	uint32_t pad;
	uint64_t swaps;			/* copies with this pool at one end */
	uint64_t blocks_in;		/* copied into this pool */
	uint64_t blocks_out;		/* copied out of it */
	uint64_t bytes_in;
	uint64_t bytes_out;
	uint64_t copy_in_ns;		/* time copying into this pool */
	uint64_t copy_out_ns;		/* and out of it */
	uint64_t errors;
	uint64_t lat_us[16];		/* copies of [2^i, 2^(i+1)) us */
	uint64_t mapped_bytes;		/* memory or file space backed now */
	uint64_t prefix_blocks;		/* demoted prefix-cache blocks here */
	uint64_t prefix_in;		/* prefix blocks demoted into it */
	uint64_t prefix_out;		/* and promoted out of it */
};
#define KVL_TIER_F_DIRECT	(1U << 0)	/* file opened O_DIRECT */
#define KVL_TIER_F_URING	(1U << 1)	/* file I/O through io_uring */
#define KVL_TIER_F_PINNED	(1U << 2)	/* host memory page-locked */

/* Fills up to cap entries; returns the number of tiers. */
int kvl_admin_tier_list(struct kvl_admin *adm, struct kvl_tier_stats *out,
			size_t cap);

struct kvl_client_tiers {
	uint64_t lease_id;		/* top pool */
	uint32_t pid;
	uint32_t uid;
	char tenant[KVL_NAME_LEN];
	uint32_t blocks[KVL_MAX_TIERS];	/* held per tier */
	uint32_t joined[KVL_MAX_TIERS];	/* 1: has a lease there */
	uint32_t seq_resident;		/* as its library last reported */
	uint32_t seq_dropped;
	uint32_t seq_swapped[KVL_MAX_TIERS];
	uint64_t swaps;
	uint64_t bytes_out;		/* copied to lower tiers */
	uint64_t bytes_in;		/* copied back up */
	uint64_t reserved[2];
};
/* Fills up to cap entries; returns the number of connected clients. */
int kvl_admin_client_tiers(struct kvl_admin *adm,
			   struct kvl_client_tiers *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* KVLEASE_H */
