/* SPDX-License-Identifier: MIT */
/*
 * kvpoold.h - internals of the kvpool daemon.
 *
 * Threads: the main thread is the pool owner (accepts connections, reads
 * owner events, grows and shrinks the backing); every connection gets its
 * own thread that serves its requests one at a time.  Shared state:
 *  - d->lock (in-process ledger only) around every ledger-core call, with
 *    d->waiters for grants that wait;
 *  - d->backing (rwlock): data-plane ops hold it for reading while they
 *    touch pool memory, the owner takes it for writing to unmap chunks;
 *  - d->clients_lock around the list of connections.
 */
#ifndef KVPOOLD_H
#define KVPOOLD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool_ledger.h"
#include "kvpool_proto.h"
#include "../kernels/kvkern.h"

struct kvd;

/* Logging (syslog levels). */
#define KVD_ERR		3
#define KVD_WARN	4
#define KVD_NOTICE	5
#define KVD_INFO	6
#define KVD_DEBUG	7

void kvd_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kvd_log_set_level(int level);
uint64_t kvd_now_ns(void);

/* A memory backend: reserve the address space of the whole pool once,
 * then make chunks of it real and unreal. */
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
};

extern const struct kvd_backend_ops kvd_backend_cpu;
extern const struct kvd_backend_ops kvd_backend_cuda;

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
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t default_max;
	uint32_t shrink_delay_ms;
	uint32_t backing_limit;		/* most blocks backed (0: capacity) */
	int cuda_device;
	int log_level;
	bool foreground;
	bool use_syslog;
	const char *tenants[64];	/* --tenant specs */
	int ntenants;
	unsigned int prefix_hash_bits;	/* --prefix-hash-bits (tests) */
};

struct kvd_client;

struct kvd {
	struct kvd_opts o;
	int mode;			/* KVP_MODE_* */
	const struct kvd_backend_ops *be;
	void *be_priv;
	char pool_name[KVPOOL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint64_t epoch;
	uid_t self_uid;
	gid_t admin_gid;		/* (gid_t)-1: none */

	/* Backing: blocks [0, mapped) are accessible; owner thread only
	 * writes it, under backing for writing when shrinking. */
	pthread_rwlock_t backing;
	uint32_t mapped;

	/* In-process ledger. */
	pthread_mutex_t lock;
	pthread_cond_t waiters;
	struct kvpool_pool *pool;
	int wake_fd;			/* eventfd: owner events pending */

	/* Module. */
	int owner_fd;

	/* Shrink timer: 0 = none. */
	uint64_t shrink_at_ns;

	/* CPU kernels thread pool (one user at a time, trylock). */
	struct kvk_cpu *cpu;
	pthread_mutex_t cpu_lock;

	/* Prefix cache (prefix.c). */
	struct kvd_prefix *prefix;

	int listen_fd;
	char sock_dir[108];		/* created by us (chown on --user) */
	pthread_mutex_t clients_lock;
	struct kvd_client *clients;
	unsigned int nclients;
	volatile int stop;

	/* Tenants the configuration declared last (tenants.c). */
	char (*conf_tenants)[KVPOOL_NAME_LEN];
	int nconf_tenants;

	/* The /metrics endpoint (metrics.c): -1 / NULL when off. */
	int metrics_fd;
	void *metrics;
	char metrics_addr[64];		/* bound ADDR:PORT */
};

/* server.c */
int kvd_listen(struct kvd *d);
void kvd_accept(struct kvd *d);
void kvd_clients_stop(struct kvd *d);
int kvd_fill_client_list(struct kvd *d, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total);

/* ledger.c: the ledger link (in-process core or /dev/kvpool owner). */
int kvd_ledger_open(struct kvd *d);
void kvd_ledger_close(struct kvd *d);
/* Owner duties, called by the main thread when the wake fd / owner fd is
 * readable, and on the shrink timer. */
void kvd_owner_events(struct kvd *d);
void kvd_owner_timer(struct kvd *d);
int kvd_owner_poll_fd(struct kvd *d);
/*
 * Check that lease_id holds every block: 0, -EPERM, -ENOENT.  With the
 * module and @pin, a successful check also pins the lease (its blocks
 * cannot change hands) until kvd_lease_unpin().  The in-process ledger
 * needs no pin: a client's releases are served by the same thread as its
 * operations.
 */
int kvd_lease_check(struct kvd *d, uint64_t lease_id, const uint32_t *blocks,
		    uint32_t n, bool pin);
int kvd_lease_unpin(struct kvd *d, uint64_t lease_id);
uint64_t kvd_mapped_bytes(struct kvd *d);
void kvd_ledger_pool_rec(struct kvd *d, struct kvp_pool_rec *r);

/* tenants.c: the configuration's tenants, in either ledger. */
struct kvd_tenant_conf;
/* Fill up to cap records; returns the number of tenants or -errno. */
int kvd_tenant_list(struct kvd *d, struct kvp_tenant_rec *out, uint32_t cap);
/* Limits the pool cannot hold: 0 or -EINVAL (logged with the line). */
int kvd_tenants_check(struct kvd *d, const struct kvd_tenant_conf *t, int n);
/* Create/update t[0..n), delete what an earlier call declared and this
 * one does not (when idle).  0, or the first error (logged). */
int kvd_tenants_apply(struct kvd *d, const struct kvd_tenant_conf *t, int n);

/* reload.c: apply a re-read configuration (SIGHUP). */
int kvd_reconfigure(struct kvd *d, const struct kvd_opts *n,
		    const struct kvd_tenant_conf *t, int nt);

/* metrics.c: the Prometheus endpoint.  bind before dropping privileges
 * (the address may be a low port), start after; both 0 when off. */
int kvd_metrics_bind(struct kvd *d);
int kvd_metrics_start(struct kvd *d);
void kvd_metrics_stop(struct kvd *d);

/* Backend-specific helpers. */
void *kvd_cpu_base(struct kvd *d);

#endif /* KVPOOLD_H */
