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
	const char *socket_path;
	const char *device_path;
	const char *backend;		/* "auto", "cpu", "cuda" */
	const char *ledger;		/* "auto", "module", "inproc" */
	const char *user;		/* drop to this user (root only) */
	const char *admin_group;	/* group allowed admin writes */
	const char *pool;		/* pool name ("" = by backend) */
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t default_max;
	uint32_t shrink_delay_ms;
	uint32_t backing_limit;		/* most blocks backed (0: capacity) */
	uint32_t max_clients;		/* connections in all */
	uint32_t max_clients_per_uid;	/* connections of one non-admin uid */
	int cuda_device;
	int log_level;
	bool foreground;
	bool use_syslog;
	const char *tenants[64];	/* --tenant specs (in-process) */
	int ntenants;
};

struct kvd_client;

/* Largest --max-clients / --max-clients-per-uid. */
#define KVD_MAX_CLIENTS		65536

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
	 * writes it, under backing for writing when shrinking.  Data-plane
	 * ops take backing for reading through kvd_backing_rdlock(); the
	 * owner never waits for it (kvd_backing_trim). */
	pthread_rwlock_t backing;
	uint32_t mapped;
	uint64_t trim_at_ns;		/* retry the unmap then (0: none) */
	uint64_t trim_since_ns;		/* first failed try of this unmap */
	_Atomic bool trim_gate;		/* new ops wait: an unmap is due */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cv;

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
};

/*
 * kvpoold.c: set up the daemon described by d->o (backend, ledger,
 * socket); main() does it after parsing options, the fuzz harness
 * (tests/fuzz/fuzz_request.c) with options of its own.
 */
int kvd_setup(struct kvd *d);

/* server.c */
int kvd_listen(struct kvd *d);
void kvd_accept(struct kvd *d);
/*
 * One connection, without its thread (kvd_accept() adds the thread; the
 * fuzz harness drives a client directly): kvd_client_new() takes over the
 * connected socket @fd (-EUSERS: refused by the connection limits);
 * kvd_client_serve() receives and answers one record (0, or -errno when
 * the connection must end); kvd_client_free() closes everything and
 * returns the lease.
 */
int kvd_client_new(struct kvd *d, int fd, struct kvd_client **out);
/* Stack size of a connection thread (sized for the CPU kernels). */
uint64_t kvd_client_stack_bytes(void);
int kvd_client_serve(struct kvd_client *c);
void kvd_client_free(struct kvd_client *c);
void kvd_clients_stop(struct kvd *d);
/* Leases of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_list(struct kvd *d, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid);

/* ledger.c: the ledger link (in-process core or /dev/kvpool owner). */
int kvd_ledger_open(struct kvd *d);
void kvd_ledger_close(struct kvd *d);
/* Owner duties, called by the main thread when the wake fd / owner fd is
 * readable, and on the shrink timer. */
void kvd_owner_events(struct kvd *d);
void kvd_owner_timer(struct kvd *d);
/* Unmap above the ledger's backed count when no op holds the memory. */
void kvd_backing_trim(struct kvd *d);
/* Data-plane ops: hold the memory (read lock), after any due unmap. */
void kvd_backing_rdlock(struct kvd *d);
/* Retry interval of a waiting unmap, and when new ops start to wait. */
#define KVD_TRIM_RETRY_NS	10000000ULL
#define KVD_TRIM_GATE_NS	200000000ULL
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

/* Backend-specific helpers. */
void *kvd_cpu_base(struct kvd *d);

#endif /* KVPOOLD_H */
