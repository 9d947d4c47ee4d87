/* SPDX-License-Identifier: MIT */
/*
 * core.h - the ground floor of kvpoold: the daemon (struct kvd), its pools
 * (struct kvd_pool), its options, the interfaces of memory backends and
 * tiers, and the log and clock of core.c.  Every file of the daemon may
 * include it; it includes no header of a higher floor
 * (Documentation/daemon.rst, "Floors").
 *
 * The daemon owns one pool per tier (struct kvd_pool): the top one
 * (d->top, the backend's memory) and the lower ones (host DRAM, a file).
 *
 * Threads: the main thread is every pool's owner (accepts connections,
 * reads owner events, grows and shrinks the backing); every connection gets
 * its own thread that serves its requests one at a time; every lower tier
 * has a swap worker thread (swap.c).  Shared state, per pool:
 *  - p->lock (in-process ledger only) around every ledger-core call, with
 *    p->waiters for grants that wait and releases that wait for an unpin;
 *  - p->backing (ledger.c's, opaque): data-plane ops and swap jobs hold it
 *    for reading while they touch pool memory, only through
 *    kvd_backing_rdlock() (which waits while an unmap is due) and
 *    kvd_backing_unlock(); the owner tries it for writing to unmap chunks;
 * and d->clients_lock around the list of connections.
 */
#ifndef KVD_CORE_H
#define KVD_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool_ledger.h"
#include "kvpool_proto.h"
#include "../kernels/kvkern.h"
#include "cluster_conf.h"

struct kvd;
struct kvd_client;
struct kvd_backing;

/* A client's device buffer as the backend mapped it (devbuf.c). */
struct kvd_devbuf {
	uint64_t addr;			/* device address in the daemon */
	uint64_t bytes;
	void *priv;			/* the backend's */
};

/* A connection's device buffers (devbuf.c). */
struct kvd_devbufs {
	struct kvd_devbuf *b[KVP_MAX_DEVBUFS];
};

/* Logging (syslog levels). */
#define KVD_ERR		3
#define KVD_WARN	4
#define KVD_NOTICE	5
#define KVD_INFO	6
#define KVD_DEBUG	7

void kvd_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kvd_log_set_level(int level);
/* From now on to syslog (the caller opened it), not stderr. */
void kvd_log_to_syslog(void);
uint64_t kvd_now_ns(void);

/* A memory backend: reserve the address space of the whole pool once,
 * then make chunks of it real and unreal.  The backend serves the top
 * pool (tier 0); its geometry is d->block_bytes, d->capacity and
 * d->chunk_blocks. */
struct kvd_backend_ops {
	const char *name;
	/* Probe: 0 if usable on this machine. */
	int (*probe)(void);
	/* Reserve bytes of address space; may round chunk sizes up:
	 * *align is the granularity chunk sizes must respect. */
	int (*init)(struct kvd *d, uint64_t *align);
	void (*fini)(struct kvd *d);
	/* Make blocks [from, to) accessible / give them back. */
	int (*map)(struct kvd *d, uint32_t from, uint32_t to);
	int (*unmap)(struct kvd *d, uint32_t from, uint32_t to);
	/* Data plane (pool memory read lock held by the caller). */
	int (*write_kv)(struct kvd *d, const struct kvk_layout *l,
			uint32_t layer, uint32_t ntok, const uint32_t *blocks,
			const uint32_t *slots, const float *k,
			const float *v);
	int (*read_kv)(struct kvd *d, const struct kvk_layout *l,
		       uint32_t layer, uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, float *k, float *v);
	int (*decode)(struct kvd *d, struct kvk_decode_args *a);
	int (*prefill)(struct kvd *d, struct kvk_prefill_args *a);
	int (*copy)(struct kvd *d, const uint32_t *src, const uint32_t *dst,
		    uint32_t n);
	/* Edits (kernels/kvkern.h; NULL: -EOPNOTSUPP). */
	int (*write_kv_flags)(struct kvd *d, const struct kvk_layout *l,
			      uint32_t layer, uint32_t ntok,
			      const uint32_t *blocks, const uint32_t *slots,
			      const float *k, const float *v, uint32_t flags);
	int (*splice)(struct kvd *d, struct kvk_splice_args *a);
	int (*compact)(struct kvd *d, struct kvk_compact_args *a);
	int (*score)(struct kvd *d, struct kvk_score_args *a);
	/* Optional (NULL: not supported).  Refuse a layout the backend's
	 * kernels cannot serve: 0 or -EOPNOTSUPP. */
	int (*layout_ok)(struct kvd *d, const struct kvk_layout *l);
	/* Device buffers of GPU tenants: import an exported allocation
	 * (the fd stays the caller's) and map it; release it. */
	int (*devbuf_import)(struct kvd *d, int fd, uint64_t bytes,
			     struct kvd_devbuf **out);
	void (*devbuf_release)(struct kvd *d, struct kvd_devbuf *b);
	/* Data plane with bulk arrays (k, v, q, out) at device addresses. */
	int (*write_kv_dev)(struct kvd *d, const struct kvk_layout *l,
			    uint32_t layer, uint32_t ntok,
			    const uint32_t *blocks, const uint32_t *slots,
			    uint64_t k, uint64_t v, int bf16);
	int (*read_kv_dev)(struct kvd *d, const struct kvk_layout *l,
			   uint32_t layer, uint32_t ntok,
			   const uint32_t *blocks, const uint32_t *slots,
			   uint64_t k, uint64_t v);
	int (*attn_dev)(struct kvd *d, struct kvk_prefill_args *a, uint64_t q,
			uint64_t out);
	/* The owner's periodic duties (spare memory), every loop turn. */
	void (*tick)(struct kvd *d);
	/*
	 * Swap support (daemon/swap.c), all optional.  A backend whose pool
	 * is host memory gives host_ptr; one whose pool is device memory
	 * gives dev_read/dev_write instead: copy whole blocks between the
	 * pool and host buffers (one per block, block_bytes each) on the
	 * stream of a swap worker (io_open/io_close; NULL stream: none).
	 * host_pin/host_unpin make host memory of a lower tier DMA-able
	 * (page-locked); host_alloc/host_free give page-locked staging.
	 */
	void *(*host_ptr)(struct kvd *d, uint32_t block);
	/* Zero whole blocks (scrub.c), ordered before any later use: on
	 * @stream (a swap worker's) or, when NULL, the data plane's.
	 * NULL: the pool is host memory (host_ptr), memset. */
	int (*zero)(struct kvd *d, void *stream, const uint32_t *blocks,
		    uint32_t n);
	int (*io_open)(struct kvd *d, void **stream);
	void (*io_close)(struct kvd *d, void *stream);
	int (*dev_read)(struct kvd *d, void *stream, const uint32_t *blocks,
			void *const *bufs, uint32_t n);
	int (*dev_write)(struct kvd *d, void *stream, const uint32_t *blocks,
			 const void *const *bufs, uint32_t n);
	int (*host_pin)(struct kvd *d, void *p, uint64_t len);
	void (*host_unpin)(struct kvd *d, void *p, uint64_t len);
	int (*host_alloc)(struct kvd *d, uint64_t len, void **p);
	void (*host_free)(struct kvd *d, void *p);
};

/* Most pools (tiers) one daemon owns: the top one and the lower ones. */
#define KVD_MAX_TIERS		4

struct kvd_pool;

/* I/O state of one swap worker for one pool (kvd_tier_ops.io_open). */
struct kvd_io {
	void *stream;			/* top pool on cuda: its stream */
	void *ring;			/* nvme: a struct io_uring, or NULL */
	uint8_t *bounce;		/* nvme: depth slots, 4 KiB aligned */
	uint32_t depth;
};

/*
 * The memory of one pool (tier): the top pool's goes through the backend
 * (tier.c), a lower tier's is host memory (tier_dram.c) or a file
 * (tier_nvme.c).  Blocks move between pools only through the swap engine
 * (swap.c), which uses host_ptr when a pool is host-addressable and
 * read/write otherwise.
 */
struct kvd_tier_ops {
	const char *name;
	/* Set up (address space, file); *align: chunk granularity. */
	int (*init)(struct kvd_pool *p, uint64_t *align);
	void (*fini)(struct kvd_pool *p);
	int (*map)(struct kvd_pool *p, uint32_t from, uint32_t to);
	int (*unmap)(struct kvd_pool *p, uint32_t from, uint32_t to);
	/* Host address of a block, or NULL when not host memory. */
	void *(*host_ptr)(struct kvd_pool *p, uint32_t block);
	/* Copy n whole blocks to / from host buffers (4 KiB aligned when
	 * the pool needs it: see kvd_io). */
	int (*read)(struct kvd_pool *p, struct kvd_io *io,
		    const uint32_t *blocks, void *const *bufs, uint32_t n);
	int (*write)(struct kvd_pool *p, struct kvd_io *io,
		     const uint32_t *blocks, const void *const *bufs,
		     uint32_t n);
	/* Zero whole blocks before another tenant uses them (scrub.c);
	 * io: a swap worker's, or NULL.  NULL or -EOPNOTSUPP: memset of
	 * host_ptr. */
	int (*zero)(struct kvd_pool *p, struct kvd_io *io,
		    const uint32_t *blocks, uint32_t n);
	/* Per swap worker I/O state (an io_uring ring, a stream). */
	int (*io_open)(struct kvd_pool *p, struct kvd_io *io);
	void (*io_close)(struct kvd_pool *p, struct kvd_io *io);
	/* KVP_TIER_F_* of this pool. */
	uint32_t (*flags)(struct kvd_pool *p);
};

/* Swap counters of one pool (atomics; "out" = blocks copied into this
 * pool from a higher one, "in" = copied out of it to a higher one). */
struct kvd_tier_stats {
	_Atomic uint64_t swaps;		/* jobs done with this pool as either
					 * end */
	_Atomic uint64_t blocks_in;	/* blocks copied into this pool */
	_Atomic uint64_t blocks_out;	/* blocks copied out of it */
	_Atomic uint64_t bytes_in;
	_Atomic uint64_t bytes_out;
	_Atomic uint64_t copy_in_ns;	/* time spent copying in */
	_Atomic uint64_t copy_out_ns;	/* and out */
	_Atomic uint64_t errors;	/* jobs that failed */
	_Atomic uint64_t lat_us[16];	/* job latency, log2 buckets of us */
};

/* One pool owned by the daemon: a tier. */
struct kvd_pool {
	struct kvd *d;
	unsigned int tier;		/* index in d->pools; 0 = top */
	uint32_t kind;			/* KVP_TIER_* */
	char name[KVPOOL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t backing_limit;		/* most blocks backed (0: capacity) */
	const struct kvd_tier_ops *ops;
	void *priv;
	char path[256];			/* nvme: the file */

	/* Backing: blocks [0, mapped) are accessible; the owner thread
	 * only writes it, under backing for writing when shrinking.
	 * Data-plane ops and swap jobs hold backing for reading through
	 * kvd_backing_rdlock() and kvd_backing_unlock() only: the lock
	 * itself is private to ledger.c, so that no op can pass the gate
	 * of a due unmap; the owner never waits for it
	 * (kvd_backing_trim). */
	struct kvd_backing *backing;
	uint32_t mapped;
	uint64_t trim_at_ns;		/* retry the unmap then (0: none) */
	uint64_t trim_since_ns;		/* first failed try of this unmap */

	/* In-process ledger: lock around every core call, waiters for
	 * grants that wait (and releases waiting for an unpin). */
	pthread_mutex_t lock;
	pthread_cond_t waiters;
	struct kvpool_pool *pool;
	int wake_fd;			/* eventfd: owner events pending */

	/* Module: the owner file of this pool (opened by restart.c when
	 * it attached early to read what the pool kept). */
	int owner_fd;
	uint64_t attached_epoch;	/* its POOL_ATTACH epoch, or 0 */

	/* Shrink timer: 0 = none. */
	uint64_t shrink_at_ns;

	struct kvd_tier_stats st;
	struct kvd_swapper *swapper;	/* lower tiers: the swap worker */
	struct kvd_tags *tags;		/* who used each block last (scrub.h) */
};

struct kvd_tier_spec {
	uint32_t kind;			/* KVP_TIER_DRAM, KVP_TIER_NVME */
	uint32_t capacity;		/* blocks */
	uint64_t bytes;			/* or bytes (0: use capacity) */
	char name[KVPOOL_NAME_LEN];
	char path[256];
};

struct kvd_opts {
	const char *config_path;	/* kvpoold.conf(5) */
	const char *socket_path;
	const char *device_path;
	const char *backend;		/* "auto", "cpu", "cuda" */
	const char *ledger;		/* "auto", "module", "inproc" */
	const char *user;		/* drop to this user (root only) */
	const char *admin_group;	/* group allowed admin writes */
	const char *pool;		/* pool name ("" = by backend) */
	const char *metrics_listen;	/* ADDR:PORT of /metrics, NULL: off */
	int metrics_scope;		/* KVD_METRICS_* */
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t default_max;
	uint32_t shrink_delay_ms;
	uint32_t backing_limit;		/* most blocks backed (0: capacity) */
	bool capacity_set;		/* --capacity given */
	uint64_t reserve_bytes;		/* cuda: free memory left to others */
	uint32_t spare_chunks;		/* cuda: spare physical chunks */
	uint32_t max_clients;		/* connections in all */
	uint32_t max_clients_per_uid;	/* connections of one non-admin uid */
	int cuda_device;
	int log_level;
	bool foreground;
	bool use_syslog;
	const char *tenants[64];	/* --tenant specs */
	int ntenants;
	struct kvd_tier_spec tiers[KVD_MAX_TIERS - 1];	/* --tier */
	int ntiers;
	const char *nvme_io;		/* "auto", "uring", "pread" */
	uint32_t inject_io_error;	/* tests: every Nth file I/O fails */
	unsigned int prefix_hash_bits;	/* --prefix-hash-bits (tests) */
	/* Most of a tenant's max (percent) that other tenants of its shared
	 * namespace may hold referenced in its prefix cache. */
	uint32_t prefix_lend_percent;
	uint32_t kernel_threads;	/* cpu backend: 0 = the CPUs it may use */
	bool keep_off;			/* --no-keep: nothing outlives us */
	uint32_t claim_grace_ms;	/* in-process: restored leases wait
					 * this long for their clients */
	bool prefix_demote;		/* --prefix-demote: evicted prefix
					 * blocks go down the tiers */
	struct kvd_cluster_opts cluster;	/* [cluster], --cluster-* */
};

/* kvd_opts.metrics_scope: the values of enum kvp_metrics_scope
 * (kvpool_metrics.h). */
#define KVD_METRICS_PUBLIC	0
#define KVD_METRICS_OPERATOR	1

struct kvd_client;
struct kvd_swapper;

/* Largest --max-clients / --max-clients-per-uid. */
#define KVD_MAX_CLIENTS		65536

/* A tenant of one pool, as the configuration declared it. */
struct kvd_tenant_ref {
	char pool[KVPOOL_NAME_LEN];
	char name[KVPOOL_NAME_LEN];
};

/*
 * The calls the pool floor (ledger.c) makes on the floors above it, as
 * hooks that those floors install (main.c, at set-up, before the ledger
 * opens); a NULL hook is a call nobody above takes.
 */
struct kvd_hooks {
	/* A pool is short of free blocks: @n are given back, if they can be,
	 * from the prefix cache of the top pool for @asker ("": any tenant;
	 * the count given back is returned) or from the demoted prefix
	 * blocks of lower pool @p. */
	uint32_t (*cache_evict)(struct kvd *d, const char *asker, uint32_t n);
	void (*tier_short)(struct kvd_pool *p, uint32_t n);
	/* In-process ledger, p->lock held, must not block: a reclaim target
	 * for the lease of a connection (@client, the lease's host) or for
	 * the prefix cache's leases of the top pool. */
	void (*client_reclaim)(void *client, uint32_t target);
	void (*cache_reclaim)(struct kvd *d);
	/* Lease listings: is @lease_id of pool @p served by a connection of
	 * this daemon now?  1 or 0. */
	int (*client_connected)(struct kvd_pool *p, uint64_t lease_id);
};

struct kvd {
	struct kvd_opts o;
	int mode;			/* KVP_MODE_* */
	const struct kvd_backend_ops *be;
	void *be_priv;
	/* The top pool's geometry as the backend sees it (the same values
	 * as pools[0]). */
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint64_t epoch;
	uid_t self_uid;
	gid_t admin_gid;		/* (gid_t)-1: none */

	/* Pools, one per tier: pools[0] is the top one (top). */
	struct kvd_pool pools[KVD_MAX_TIERS];
	unsigned int npools;
	struct kvd_pool *top;

	/* CPU kernels thread pool (one user at a time, trylock). */
	struct kvk_cpu *cpu;
	pthread_mutex_t cpu_lock;

	/* Prefix cache (prefix.c) and its cluster tier (cluster.c). */
	struct kvd_prefix *prefix;
	struct kvd_cluster *cluster;
	struct kvd_ptier *ptier;	/* its demotion chain (prefix_tier.c) */

	struct kvd_hooks hooks;		/* the pool floor's calls up */

	int listen_fd;
	int reserve_fd;			/* spare descriptor for EMFILE */
	uint64_t accept_paused_until_ns;	/* 0: accepting */
	uint64_t refused;		/* connections refused so far */
	uint64_t refused_logged_ns;
	char sock_dir[108];		/* created by us (chown on --user) */
	pthread_mutex_t clients_lock;
	struct kvd_client *clients;
	unsigned int nclients;
	_Atomic uint64_t stack_depth;	/* deepest connection stack seen */
	volatile int stop;

	/* Tenants the configuration declared last, per pool (tenants.c). */
	struct kvd_tenant_ref *conf_tenants;
	int nconf_tenants;

	/* The /metrics endpoint (metrics.c): -1 / NULL when off. */
	int metrics_fd;
	void *metrics;
	char metrics_addr[64];		/* bound ADDR:PORT */
};

#endif /* KVD_CORE_H */
