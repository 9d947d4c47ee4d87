/* SPDX-License-Identifier: MIT */
/*
 * kvpoold.h - internals of the kvpool daemon: the interfaces of its files
 * above the ground floor (core.h: struct kvd, its pools, the log).
 */
#ifndef KVPOOLD_H
#define KVPOOLD_H

#include "core.h"

extern const struct kvd_backend_ops kvd_backend_cpu;
extern const struct kvd_backend_ops kvd_backend_cuda;
/* Close the driver the cuda probe opened, when cuda is not used. */
void kvd_cuda_probe_done(void);

extern const struct kvd_tier_ops kvd_tier_top;
extern const struct kvd_tier_ops kvd_tier_dram;
extern const struct kvd_tier_ops kvd_tier_nvme;

/*
 * main.c: set up the daemon described by d->o (backend, ledger,
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
/*
 * The tenant the client's lease is charged to now, with either ledger:
 * its serial (unique in the pool's life: a tenant deleted and created
 * again under its name has another) and its name; either may be NULL.
 * A client may attach its /dev/kvpool file to another tenant while it
 * holds no block: the daemon then acts for the new one (the connection's
 * references to cached blocks, taken for the old one, are dropped).
 * During an op whose blocks passed kvd_client_check_blocks() the answer
 * is the tenant that check vouched for (a pinned lease that holds a block
 * cannot change tenant).  The connection's thread only; 0, or -ENOENT
 * when the lease is gone (then the last tenant seen is returned).
 */
int kvd_client_tenant_id(struct kvd_client *c, uint64_t *serial,
			 char name[KVPOOL_NAME_LEN]);
/* Leases of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_list(struct kvd_pool *p, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid);

/* ledger.c: the ledger link (in-process core or /dev/kvpool owner), one
 * per pool. */
int kvd_ledger_open(struct kvd *d);
void kvd_ledger_close(struct kvd *d);
/* Owner duties, called by the main thread when a pool's wake fd / owner
 * fd is readable, and on its shrink timer. */
void kvd_owner_events(struct kvd_pool *p);
void kvd_owner_timer(struct kvd_pool *p);
/* Unmap above the ledger's backed count when no op holds the memory. */
void kvd_backing_trim(struct kvd_pool *p);
/* Data-plane ops and swap jobs: hold the memory (read lock), after any
 * due unmap, and let it go.  An op holds it for one bounded piece of
 * work (the bounds of kvpool_proto.h) and never takes it twice. */
void kvd_backing_rdlock(struct kvd_pool *p);
/* The same without waiting (the owner's thread): false while an unmap
 * is due or under way. */
bool kvd_backing_tryrdlock(struct kvd_pool *p);
void kvd_backing_unlock(struct kvd_pool *p);
/* The pool's backing lock and gate (at set-up, 0 or -ENOMEM), freed at
 * the end; at a stop, ops waiting at the gate go on. */
int kvd_backing_init(struct kvd_pool *p);
void kvd_backing_fini(struct kvd_pool *p);
void kvd_backing_stop(struct kvd_pool *p);
/* Retry interval of a waiting unmap, and when new ops start to wait. */
#define KVD_TRIM_RETRY_NS	10000000ULL
#define KVD_TRIM_GATE_NS	200000000ULL
int kvd_owner_poll_fd(struct kvd_pool *p);
/*
 * Check that lease_id holds every block of pool p: 0, -EPERM, -ENOENT.
 * With the module and @pin, a successful check also pins the lease (its
 * blocks cannot change hands) until kvd_lease_unpin().  The in-process
 * ledger needs no pin for an op served by the client's own thread: a
 * client's releases are served by the same thread as its operations.
 */
int kvd_lease_check(struct kvd_pool *p, uint64_t lease_id,
		    const uint32_t *blocks, uint32_t n, bool pin);
int kvd_lease_unpin(struct kvd_pool *p, uint64_t lease_id);
/*
 * Pin for work done outside the client's thread (swap jobs), with either
 * ledger: check like kvd_lease_check and pin until kvd_lease_pin_drop.
 * Meanwhile the client's releases wait and a close keeps the blocks.
 */
int kvd_lease_pin(struct kvd_pool *p, uint64_t lease_id,
		  const uint32_t *blocks, uint32_t n);
void kvd_lease_pin_drop(struct kvd_pool *p, uint64_t lease_id);
/*
 * kvd_lease_check, and on success *serial = the serial of the tenant the
 * lease is charged to, read with the check (a pinned lease that holds a
 * block keeps its tenant until the unpin).
 */
int kvd_lease_check_serial(struct kvd_pool *p, uint64_t lease_id,
			   const uint32_t *blocks, uint32_t n, bool pin,
			   uint64_t *serial);
/* The tenant lease_id of pool p is charged to now: 0 or -ENOENT. */
int kvd_lease_tenant(struct kvd_pool *p, uint64_t lease_id, uint64_t *serial,
		     char name[KVPOOL_NAME_LEN]);
/*
 * Module mode: is fd a file of /dev/kvpool (a character device with the
 * st_rdev of p's owner file)?  0 or -EBADF.  Only such a file's STATUS
 * can be trusted to name the caller's lease.
 */
int kvd_ledger_fd_check(struct kvd_pool *p, int fd);
uint64_t kvd_mapped_bytes(struct kvd_pool *p);
void kvd_ledger_pool_rec(struct kvd_pool *p, struct kvp_pool_rec *r);
/* The pool called name ("" or NULL: the top one), or NULL. */
struct kvd_pool *kvd_pool_by_name(struct kvd *d, const char *name);

/* tier_spec.c: a --tier spec (or a kvpoold.conf tier = value) into *t,
 * 0 or -errno; kvd_tier_parse() adds one to o->tiers (-E2BIG: full). */
int kvd_tier_spec_parse(const char *spec, struct kvd_tier_spec *t);
int kvd_tier_parse(struct kvd_opts *o, const char *spec);

/* tier.c: the pools' memory. */
/* Fill d->pools from the options (top first) and set up their memory;
 * called before the ledger is opened. */
int kvd_pools_init(struct kvd *d);
void kvd_pools_fini(struct kvd *d);
/* Re-do a pool's memory set-up after the ledger gave it another
 * geometry (module re-attach). */
int kvd_pool_reinit(struct kvd_pool *p);
const char *kvd_tier_kind_name(uint32_t kind);

/* swap.c: tier ops of the data plane, swap jobs and their workers. */
int kvd_swap_start(struct kvd *d);
void kvd_swap_stop(struct kvd *d);
int kvd_fill_tier_list(struct kvd *d, struct kvp_tier_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total);
/* Connections of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_tiers(struct kvd *d, struct kvp_client_tier_rec *out,
			  uint32_t start, uint32_t cap, uint32_t *total,
			  uid_t uid);

/* tenants.c: the configuration's tenants, in either ledger. */
struct kvd_tenant_conf;
/* Fill up to cap records of pool p; returns the number of tenants or
 * -errno. */
int kvd_tenant_list(struct kvd_pool *p, struct kvp_tenant_rec *out,
		    uint32_t cap);
/* Does pool p have tenant @name?  1, 0 or -errno. */
int kvd_tenant_exists(struct kvd_pool *p, const char *name);
/*
 * The tenants of the top pool that a peer of @uid and groups gids[0..n)
 * may attach to by its uid or a group (their allow_uid or allow_gid; an
 * automatic uid-N tenant allows its uid): names in a malloc'd array, the
 * count or -errno.
 */
int kvd_tenants_visible(struct kvd *d, uint32_t uid, const uint32_t *gids,
			int ngids, char (**names)[KVPOOL_NAME_LEN]);
/* Unknown pools, limits a pool cannot hold: 0 or -EINVAL (logged with
 * the line). */
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

/* server.c, for the device-buffer ops of devbuf.c */
const struct kvk_layout *kvd_client_layout(struct kvd_client *c, uint32_t id);
/* copy of u32 [n] at off in the client's region: 0, -EFAULT, -EINVAL */
int kvd_client_region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint32_t **out);
/* every block held by the client's lease (pinned until the op ends) or,
 * when not write, a prefix-cache block it references */
int kvd_client_check_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n, bool write);
/* every block mapped (the top pool's backing held for reading) */
int kvd_client_check_mapped(struct kvd_client *c, const uint32_t *b,
			    uint32_t n);
struct kvd_devbufs *kvd_client_devbufs(struct kvd_client *c);
struct kvd *kvd_client_daemon(struct kvd_client *c);
/* the block tag of the connection's tenant (scrub.h) */
uint64_t kvd_client_scrub_tag(struct kvd_client *c);
/*
 * The block tables of an attention request (ATTN, ATTN_DEV), sized
 * before anything is allocated: each sequence's block count comes from
 * its context length (-EINVAL beyond mbs or below n_new), the copy holds
 * batch x the longest sequence entries and the Q.K work is counted as
 * max(1, n_new) x ctx x q_heads x head_dim per sequence, both within the
 * bounds of kvpool_proto.h (-E2BIG); then only those entries are copied
 * out of the region, and a block named twice in one sequence is -EINVAL.
 * The lease check of t->used is the caller's.
 */
struct kvd_attn_tables {
	uint32_t *tables;		/* [batch][stride] */
	uint32_t *ctx;			/* [batch] context lengths */
	uint32_t *used;			/* [nused] every entry in use */
	uint32_t stride;		/* the longest sequence, in blocks */
	uint32_t nused;
};
int kvd_client_attn_tables(struct kvd_client *c, const struct kvk_layout *l,
			   uint32_t batch, uint32_t q_heads, uint32_t n_new,
			   uint64_t mbs, uint64_t off_tables, uint64_t off_ctx,
			   struct kvd_attn_tables *t);
void kvd_attn_tables_free(struct kvd_attn_tables *t);

/* devbuf.c: device buffers of GPU tenants */
struct kvd_devbufs {
	struct kvd_devbuf *b[KVP_MAX_DEVBUFS];
};
struct kvp_devbuf;
struct kvp_devbuf_reply;
struct kvp_devbuf_del;
struct kvp_kv_dev;
struct kvp_attn_dev;
/* fd: the descriptor that came with the request (-1: none); closed */
int kvd_op_devbuf_add(struct kvd_client *c, const struct kvp_devbuf *q,
		      int fd, struct kvp_devbuf_reply *rep);
int kvd_op_devbuf_del(struct kvd_client *c, const struct kvp_devbuf_del *q);
int kvd_op_kv_dev(struct kvd_client *c, const struct kvp_kv_dev *q,
		  bool write);
int kvd_op_attn_dev(struct kvd_client *c, const struct kvp_attn_dev *q);
void kvd_devbufs_clear(struct kvd *d, struct kvd_devbufs *t);

#endif /* KVPOOLD_H */
