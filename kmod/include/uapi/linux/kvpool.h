/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * kvpool: a ledger of GPU KV-cache blocks shared by many processes.
 *
 * This is the one UAPI header of the project: ioctls on /dev/kvpool, the
 * owner's event records, and the generic netlink family "kvpool".  See
 * Documentation/uapi.rst for the full reference.
 *
 * Conventions (Documentation/process/botching-up-ioctls.rst):
 *  - fixed-width types only, user pointers travel as __u64;
 *  - every struct is padded explicitly to a multiple of 8 bytes;
 *  - every reserved field and every unknown flag must be zero, or the ioctl
 *    fails with -EINVAL;
 *  - one _IOWR per operation; timeouts are in nanoseconds.
 *
 * Vocabulary: a pool is an array of blocks of block_bytes each, indices
 * 0..capacity-1; backed blocks (the lowest `backed` indices) have physical
 * memory behind them; a lease is the set of blocks held by one open file; a
 * tenant is an accounting group with limits (max, min); the owner is the open
 * file (the daemon) that created or attached to the pool.
 */
#ifndef _UAPI_LINUX_KVPOOL_H
#define _UAPI_LINUX_KVPOOL_H

#include <linux/types.h>
#include <linux/ioctl.h>

/* Name of the misc device: /dev/kvpool. */
#define KVPOOL_DEV_NAME		"kvpool"

/*
 * Length of pool and tenant names including the terminating NUL.  Names use
 * [a-zA-Z0-9_.-], start with an alphanumeric character and are NUL-padded.
 */
#define KVPOOL_NAME_LEN		32

/* A limit value meaning "no limit" (reads "max" in sysfs). */
#define KVPOOL_UNLIMITED	0xffffffffU

/* A uid/gid value meaning "nobody" in tenant permissions. */
#define KVPOOL_ID_NONE		0xffffffffU

/* Largest count accepted by one LEASE, RELEASE or LEASE_CHECK call. */
#define KVPOOL_IO_MAX_BLOCKS	(1U << 20)

/* Largest pool capacity in blocks. */
#define KVPOOL_MAX_CAPACITY	(1U << 26)

/* ------------------------------------------------------------------ */
/* Features: a 64-bit flag word that user space asks for.               */
/* ------------------------------------------------------------------ */

/* LEASE understands KVPOOL_LEASE_PARTIAL. */
#define KVPOOL_FEAT_PARTIAL	(1ULL << 0)
/* LEASE waits with a timeout (timeout_ns) and KVPOOL_LEASE_NONBLOCK. */
#define KVPOOL_FEAT_WAIT	(1ULL << 1)
/* Client files poll POLLPRI for reclaim targets (kvpool_status). */
#define KVPOOL_FEAT_RECLAIM	(1ULL << 2)
/* Owner recovery: POOL_ATTACH and SNAPSHOT. */
#define KVPOOL_FEAT_RECOVERY	(1ULL << 3)
/* Per-tenant min protection. */
#define KVPOOL_FEAT_MIN		(1ULL << 4)
/* Generic netlink family "kvpool". */
#define KVPOOL_FEAT_NETLINK	(1ULL << 5)
/* Owner-side LEASE_CHECK. */
#define KVPOOL_FEAT_LEASE_CHECK	(1ULL << 6)
/* LEASE_CHECK with KVPOOL_LEASE_CHECK_PIN, and LEASE_UNPIN. */
#define KVPOOL_FEAT_PIN		(1ULL << 7)
/* Owner-side LEASE_MOVE between two leases of one tenant. */
#define KVPOOL_FEAT_LEASE_MOVE	(1ULL << 8)
/* TENANT_ATTACH with KVPOOL_ATTACH_RECLAIM_FIRST / _NEVER. */
#define KVPOOL_FEAT_RECLAIM_ORDER (1ULL << 9)
/* The owner reads KVPOOL_EVENT_SHORT records. */
#define KVPOOL_FEAT_SHORT_EVENT	(1ULL << 10)
/* The owner's queue of CLIENT_CLOSED records is bounded (CLOSED_MANY). */
#define KVPOOL_FEAT_CLOSED_MANY	(1ULL << 11)
/*
 * Tenant serial numbers: kvpool_status.tenant_serial and
 * kvpool_lease_check.tenant_serial, and STATUS of any lease of its pool
 * for the owner (KVPOOL_STATUS_LEASE).  LEASE_MOVE refuses a pinned
 * source (-EBUSY) wherever this bit is set.
 */
#define KVPOOL_FEAT_TENANT_SERIAL (1ULL << 12)
/* Descriptors deposited with a pool: FD_DEPOSIT, FD_FETCH, FD_DROP. */
#define KVPOOL_FEAT_DEPOSIT	(1ULL << 13)
/*
 * Kept leases: LEASE_KEEP, LEASE_ADOPT, and kvpool_lease_info.flags in
 * SNAPSHOT (KVPOOL_LEASE_INFO_*).
 */
#define KVPOOL_FEAT_PARK	(1ULL << 14)

#define KVPOOL_FEATURES_ALL	(KVPOOL_FEAT_PARTIAL | KVPOOL_FEAT_WAIT | \
				 KVPOOL_FEAT_RECLAIM | KVPOOL_FEAT_RECOVERY | \
				 KVPOOL_FEAT_MIN | KVPOOL_FEAT_NETLINK | \
				 KVPOOL_FEAT_LEASE_CHECK | KVPOOL_FEAT_PIN | \
				 KVPOOL_FEAT_LEASE_MOVE | \
				 KVPOOL_FEAT_RECLAIM_ORDER | \
				 KVPOOL_FEAT_SHORT_EVENT | \
				 KVPOOL_FEAT_CLOSED_MANY | \
				 KVPOOL_FEAT_TENANT_SERIAL | \
				 KVPOOL_FEAT_DEPOSIT | KVPOOL_FEAT_PARK)

/*
 * Most CLIENT_CLOSED records kept for the owner per pool (about 200 bytes
 * each); further closes before the owner reads are merged into one
 * CLOSED_MANY record.
 */
#define KVPOOL_CLOSED_QUEUE_MAX	1024

/* Most descriptors deposited with one pool (FD_DEPOSIT). */
#define KVPOOL_DEPOSIT_MAX	256

/* Most kept leases per pool, parked or not (LEASE_KEEP). */
#define KVPOOL_PARK_MAX		1024

/**
 * struct kvpool_features - KVPOOL_IOC_FEATURES
 * @requested: in: features the caller wants to use.
 * @supported: out: every feature this ledger implements.
 * @enabled: out: @requested & @supported.  A caller should check that
 *	every feature it relies on is set here.
 * @reserved: must be zero.
 */
struct kvpool_features {
	__u64 requested;
	__u64 supported;
	__u64 enabled;
	__u64 reserved[3];
};

/* ------------------------------------------------------------------ */
/* Pools (owner side; creating or attaching needs CAP_SYS_ADMIN).       */
/* ------------------------------------------------------------------ */

/**
 * struct kvpool_pool_create - KVPOOL_IOC_POOL_CREATE
 * @name: in: pool name (e.g. "gpu0"), NUL-padded.
 * @block_bytes: in: bytes per block; a multiple of 256, at most 1 GiB.
 * @capacity: in: number of blocks (a ceiling, not a reservation), 1 to
 *	KVPOOL_MAX_CAPACITY.
 * @chunk_blocks: in: grow/shrink granularity in blocks, 1 to @capacity.
 *	@backed is always a multiple of it or equal to @capacity.
 * @default_max: in: blocks.max of automatic per-uid tenants
 *	(KVPOOL_UNLIMITED for none).
 * @flags: in: must be zero.
 * @epoch: out: owner epoch, 1 for a new pool; +1 at each POOL_ATTACH.
 * @reserved: must be zero.
 *
 * The calling file becomes the pool's owner: it reads struct kvpool_event
 * records with read(2) and polls POLLIN for them.  A file owns at most one
 * pool and cannot also hold a lease.
 */
struct kvpool_pool_create {
	char name[KVPOOL_NAME_LEN];
	__u64 block_bytes;
	__u32 capacity;
	__u32 chunk_blocks;
	__u32 default_max;
	__u32 flags;
	__u64 epoch;
	__u64 reserved[4];
};

/**
 * struct kvpool_pool_attach - KVPOOL_IOC_POOL_ATTACH
 * @name: in: name of an orphaned pool (its owner file was closed).
 * @flags: in: must be zero.
 * @pad: must be zero.
 * @epoch: out: the new owner epoch.
 * @reserved: must be zero.
 *
 * Makes the calling file the owner again (-EBUSY if the pool has an owner).
 * The new owner should read SNAPSHOT to rebuild its state.
 */
struct kvpool_pool_attach {
	char name[KVPOOL_NAME_LEN];
	__u32 flags;
	__u32 pad;
	__u64 epoch;
	__u64 reserved[4];
};

/* kvpool_pool_resize.flags for POOL_GROW: the owner cannot back more. */
#define KVPOOL_GROW_FAILED	(1U << 0)
#define KVPOOL_GROW_FLAGS	KVPOOL_GROW_FAILED

/**
 * struct kvpool_pool_resize - KVPOOL_IOC_POOL_GROW and KVPOOL_IOC_POOL_SHRINK
 * @backed: in: the new number of backed blocks: a multiple of chunk_blocks
 *	or equal to capacity; above the current value for GROW, below it for
 *	SHRINK.  Ignored (must be zero) with KVPOOL_GROW_FAILED.
 * @flags: in: GROW: KVPOOL_GROW_FAILED tells the ledger the owner could not
 *	map memory: callers waiting for a grow fail with -ENOMEM.  SHRINK: 0.
 * @used: out: blocks leased after the call.
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * SHRINK fails with -EBUSY when any block at or above @backed is leased.
 */
struct kvpool_pool_resize {
	__u32 backed;
	__u32 flags;
	__u32 used;
	__u32 pad;
	__u64 reserved[2];
};

/* kvpool_lease_info.flags (KVPOOL_FEAT_PARK; zero without it). */
#define KVPOOL_LEASE_INFO_KEPT		(1U << 0)	/* LEASE_KEEP set */
#define KVPOOL_LEASE_INFO_PARKED	(1U << 1)	/* no file: adopt it */

/**
 * struct kvpool_lease_info - one lease in a snapshot
 * @lease_id: the lease (unique per pool for the pool's life, never 0).
 * @blocks: blocks it holds.
 * @uid: uid of the process that opened the file.
 * @pid: pid (in the initial namespace) of the process that opened it (or
 *	adopted it last: LEASE_ADOPT).
 * @flags: KVPOOL_LEASE_INFO_*.  This was a zero pad before
 *	KVPOOL_FEAT_PARK, and stays zero for every lease never kept.
 * @tenant: the tenant it is charged to.
 */
struct kvpool_lease_info {
	__u64 lease_id;
	__u32 blocks;
	__u32 uid;
	__u32 pid;
	__u32 flags;
	char tenant[KVPOOL_NAME_LEN];
};

/**
 * struct kvpool_block_owner - one leased block in a snapshot
 * @block: the block index.
 * @pad: zero.
 * @lease_id: the lease holding it.
 */
struct kvpool_block_owner {
	__u32 block;
	__u32 pad;
	__u64 lease_id;
};

/**
 * struct kvpool_snapshot - KVPOOL_IOC_SNAPSHOT (owner only)
 * @leases_ptr: in: user array of struct kvpool_lease_info, or 0.
 * @blocks_ptr: in: user array of struct kvpool_block_owner, or 0.
 * @leases_cap: in: entries available at @leases_ptr.
 * @blocks_cap: in: entries available at @blocks_ptr.
 * @leases: out: number of leases in the pool.
 * @blocks: out: number of leased blocks (the pool's used count).
 * @backed: out: backed blocks.
 * @flags: in: must be zero.
 * @epoch: out: owner epoch.
 * @reserved: must be zero.
 *
 * Call with zero capacities to learn the sizes; if a capacity is smaller
 * than the count the call fails with -ENOSPC and writes nothing (counts are
 * still returned), so the caller can grow its buffers and retry.  Blocks are
 * listed in increasing index order.
 */
struct kvpool_snapshot {
	__u64 leases_ptr;
	__u64 blocks_ptr;
	__u32 leases_cap;
	__u32 blocks_cap;
	__u32 leases;
	__u32 blocks;
	__u32 backed;
	__u32 flags;
	__u64 epoch;
	__u64 reserved[2];
};

/*
 * LEASE_CHECK: on success also pin the lease until LEASE_UNPIN: while
 * pinned, the client's RELEASE waits and a close of its file keeps the
 * blocks leased, so blocks the owner is using never change hands.
 */
#define KVPOOL_LEASE_CHECK_PIN		(1U << 0)
#define KVPOOL_LEASE_CHECK_FLAGS	KVPOOL_LEASE_CHECK_PIN

/**
 * struct kvpool_lease_check - KVPOOL_IOC_LEASE_CHECK (owner only)
 * @blocks_ptr: in: user array of __u32 block indices.
 * @lease_id: in: the lease that must hold every block.
 * @count: in: number of blocks, 1 to KVPOOL_IO_MAX_BLOCKS.
 * @flags: in: KVPOOL_LEASE_CHECK_*.
 * @bad_index: out: 0 on success; on -EPERM, the position in the array of
 *	the first block that the lease does not hold.
 * @pad: must be zero.
 * @tenant_serial: out (KVPOOL_FEAT_TENANT_SERIAL): on success, the serial
 *	of the tenant the lease is charged to (kvpool_status.tenant_serial),
 *	taken with the check; 0 on failure.  Ignored on input.
 * @reserved: must be zero.
 *
 * Lets the daemon check that a data-plane request names only the caller's
 * blocks, and for which tenant it acts: a pinned lease that holds a block
 * cannot change tenant until the unpin.  -ENOENT if the lease does not
 * exist (or its file was closed).
 */
struct kvpool_lease_check {
	__u64 blocks_ptr;
	__u64 lease_id;
	__u32 count;
	__u32 flags;
	__u32 bad_index;
	__u32 pad;
	__u64 tenant_serial;
	__u64 reserved[1];
};

/**
 * struct kvpool_lease_unpin - KVPOOL_IOC_LEASE_UNPIN (owner only)
 * @lease_id: in: a lease pinned by LEASE_CHECK with KVPOOL_LEASE_CHECK_PIN.
 * @flags: in: must be zero.
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * Drops one pin.  At the last one, waiting releases go ahead and a lease
 * whose file was closed meanwhile returns its blocks (CLIENT_CLOSED).
 * -ENOENT if the lease does not exist, -EINVAL if it is not pinned.  An
 * owner that goes away drops all its pins.
 */
struct kvpool_lease_unpin {
	__u64 lease_id;
	__u32 flags;
	__u32 pad;
	__u64 reserved[2];
};

/**
 * struct kvpool_lease_move - KVPOOL_IOC_LEASE_MOVE (owner only)
 * @blocks_ptr: in: user array of @count __u32 block indices.
 * @from_lease: in: the lease that holds every block now.
 * @to_lease: in: the lease that holds them after the call; another open
 *	lease charged to the same tenant.
 * @count: in: number of blocks, 1 to KVPOOL_IO_MAX_BLOCKS.
 * @flags: in: must be zero.
 * @bad_index: out: 0 on success; on -EPERM (or -EINVAL for a repeated
 *	index), the position in the array of the first offending block.
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * Moves blocks from one lease to another in one step: no block is free in
 * between, the tenant's current and peak, the pool's used and every
 * counter stay as they are (the blocks stay charged to the same tenant).
 * All or nothing: every index is checked first.  The source's reclaim
 * target is capped at what it still holds.  Lets the daemon give a
 * tenant's blocks to a lease of its own (the tenant's prefix cache) so that
 * they outlive the client's file.  -ENOENT if a lease does not exist (or
 * its file was closed), -EXDEV if the two leases are charged to different
 * tenants, -EBUSY while the source is pinned (LEASE_CHECK with
 * KVPOOL_LEASE_CHECK_PIN): a block an operation uses never changes hands.
 */
struct kvpool_lease_move {
	__u64 blocks_ptr;
	__u64 from_lease;
	__u64 to_lease;
	__u32 count;
	__u32 flags;
	__u32 bad_index;
	__u32 pad;
	__u64 reserved[2];
};

/* FD_DROP: every deposited descriptor.  Not a valid tag to deposit. */
#define KVPOOL_TAG_ALL		(~0ULL)

/**
 * struct kvpool_fd_deposit - KVPOOL_IOC_FD_DEPOSIT (owner only)
 * @tag: in: the caller's name for the descriptor; any value but
 *	KVPOOL_TAG_ALL.  A descriptor deposited under the same tag before is
 *	replaced (in its place in the deposit order).
 * @fd: in: the descriptor: a regular file (a memfd is one) or a character
 *	device other than /dev/kvpool (-EINVAL for anything else: sockets,
 *	pipes, eventfd, epoll, io_uring, any kvpool file), -EBADF if it is
 *	not an open descriptor.
 * @flags: in: must be zero.
 * @reserved: must be zero.
 *
 * The pool keeps a reference to the open file (not to @fd: the caller may
 * close it) while no owner runs, and hands it back to the owner that
 * attaches next (FD_FETCH), so memory behind it outlives the daemon.
 * -ENOSPC when KVPOOL_DEPOSIT_MAX are deposited already (replacing one is
 * always possible).  The reference is dropped by FD_DROP, by another
 * deposit under the tag, or when the pool is destroyed (module unload).
 */
struct kvpool_fd_deposit {
	__u64 tag;
	__s32 fd;
	__u32 flags;
	__u64 reserved[2];
};

/**
 * struct kvpool_fd_fetch - KVPOOL_IOC_FD_FETCH (owner only)
 * @index: in: which deposit, 0 for the oldest (deposit order).
 * @flags: in: must be zero.
 * @tag: out: its tag.
 * @fd: out: a new descriptor (O_CLOEXEC) of the deposited file, which
 *	stays deposited.
 * @count: out: descriptors deposited now; also written on -ENOENT
 *	(@index >= @count), so index 0 learns the count.
 * @reserved: must be zero.
 *
 * @tag, @fd and @count are ignored on input.
 */
struct kvpool_fd_fetch {
	__u32 index;
	__u32 flags;
	__u64 tag;
	__s32 fd;
	__u32 count;
	__u64 reserved[2];
};

/**
 * struct kvpool_fd_drop - KVPOOL_IOC_FD_DROP (owner only)
 * @tag: in: the deposit to drop, or KVPOOL_TAG_ALL for every one.
 * @flags: in: must be zero.
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * -ENOENT when nothing is deposited under @tag (or nothing at all, for
 * KVPOOL_TAG_ALL).  The deposits after a dropped one move down one index.
 */
struct kvpool_fd_drop {
	__u64 tag;
	__u32 flags;
	__u32 pad;
	__u64 reserved[2];
};

/* LEASE_KEEP: mark the lease kept (0: unmark it). */
#define KVPOOL_KEEP_ON		(1U << 0)
#define KVPOOL_KEEP_FLAGS	KVPOOL_KEEP_ON

/**
 * struct kvpool_lease_keep - KVPOOL_IOC_LEASE_KEEP (on a client file)
 * @owner_fd: in: a descriptor of the current owner file of the pool the
 *	calling file's lease belongs to (-EPERM for any other file, -EBADF
 *	if it is not an open descriptor).
 * @flags: in: KVPOOL_KEEP_ON to mark the lease kept, 0 to unmark it.
 * @lease_id: out: the lease.
 * @reserved: must be zero.
 *
 * Needs CAP_SYS_ADMIN (-EPERM).  A kept lease is parked, not closed, when
 * its file is closed: its blocks stay leased and charged to its tenant,
 * SNAPSHOT lists it with KVPOOL_LEASE_INFO_PARKED, and an owner adopts it
 * onto a new file (LEASE_ADOPT).  -EINVAL on a file that holds no lease
 * (unbound, or an owner); -ENOSPC when the pool has KVPOOL_PARK_MAX kept
 * leases already.  Marking a kept lease again changes nothing.
 */
struct kvpool_lease_keep {
	__s32 owner_fd;
	__u32 flags;
	__u64 lease_id;
	__u64 reserved[2];
};

/**
 * struct kvpool_lease_adopt - KVPOOL_IOC_LEASE_ADOPT (on a new file)
 * @owner_fd: in: a descriptor of the current owner file of the pool
 *	(-EPERM for any other file, -EBADF if it is not an open descriptor).
 * @flags: in: must be zero.
 * @lease_id: in: a parked lease of that pool (-ENOENT for any other).
 * @reserved: must be zero.
 *
 * Needs CAP_SYS_ADMIN (-EPERM).  The calling file, which must have no role
 * yet (-EBUSY: it is an owner or already holds a lease), becomes the
 * lease's file: it holds its blocks, still kept, as if it had leased them.
 */
struct kvpool_lease_adopt {
	__s32 owner_fd;
	__u32 flags;
	__u64 lease_id;
	__u64 reserved[2];
};

/* ------------------------------------------------------------------ */
/* Clients: tenants, leases.                                            */
/* ------------------------------------------------------------------ */

/*
 * TENANT_ATTACH: where this file stands when the ledger posts reclaim
 * targets to its tenant (both need CAP_SYS_ADMIN, at most one of them):
 * RECLAIM_FIRST files are asked before the tenant's other files (blocks
 * that are cheapest to give back, e.g. unused cached blocks);
 * RECLAIM_NEVER files are never asked (blocks in use by other files).
 * Without either the file is asked in the order the files attached.
 */
#define KVPOOL_ATTACH_RECLAIM_FIRST	(1U << 0)
#define KVPOOL_ATTACH_RECLAIM_NEVER	(1U << 1)
#define KVPOOL_ATTACH_FLAGS		(KVPOOL_ATTACH_RECLAIM_FIRST | \
					 KVPOOL_ATTACH_RECLAIM_NEVER)

/**
 * struct kvpool_tenant_attach - KVPOOL_IOC_TENANT_ATTACH
 * @pool: in: pool name; empty for the first pool created.
 * @tenant: in: tenant name; empty for the automatic per-uid tenant
 *	("uid-<uid>").  A named tenant must exist (-ENOENT) and allow the
 *	caller's uid or gid, unless the caller has CAP_SYS_ADMIN (-EACCES).
 * @flags: in: KVPOOL_ATTACH_* (0: asked for reclaim in attach order).
 * @pad: must be zero.
 * @lease_id: out: the lease id of this file.
 * @reserved: must be zero.
 *
 * Binds the file to a pool and a tenant.  A file that leases without
 * attaching is bound to the first pool and its per-uid tenant.  Re-attaching
 * to another tenant is allowed only while the file holds no block (-EBUSY);
 * a file cannot move to another pool (-EBUSY).
 */
struct kvpool_tenant_attach {
	char pool[KVPOOL_NAME_LEN];
	char tenant[KVPOOL_NAME_LEN];
	__u32 flags;
	__u32 pad;
	__u64 lease_id;
	__u64 reserved[2];
};

/* Grant what can be granted (at least one block) instead of all or none. */
#define KVPOOL_LEASE_PARTIAL		(1U << 0)
/* Never wait: fail with -EAGAIN when blocks are short. */
#define KVPOOL_LEASE_NONBLOCK		(1U << 1)
/* Fail with -ENXIO instead of waiting while the pool has no owner. */
#define KVPOOL_LEASE_ORPHAN_FAIL	(1U << 2)
#define KVPOOL_LEASE_FLAGS		(KVPOOL_LEASE_PARTIAL | \
					 KVPOOL_LEASE_NONBLOCK | \
					 KVPOOL_LEASE_ORPHAN_FAIL)

/**
 * struct kvpool_lease_req - KVPOOL_IOC_LEASE
 * @blocks_ptr: in: user array of @count __u32 entries; out: the granted
 *	block indices, lowest first, in its first @granted entries.
 * @count: in: blocks wanted, 1 to KVPOOL_IO_MAX_BLOCKS.
 * @flags: in: KVPOOL_LEASE_*.
 * @timeout_ns: in: longest wait in nanoseconds; 0 waits without limit.
 *	Ignored with KVPOOL_LEASE_NONBLOCK.
 * @granted: out: blocks granted (@count unless KVPOOL_LEASE_PARTIAL).
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * Errors: -EDQUOT the tenant's max would be exceeded (at once, no wait);
 * -EAGAIN blocks are short and the call may not wait; -ETIMEDOUT the wait
 * ran out; -ENOMEM the owner could not back more memory; -ENXIO orphaned
 * pool with KVPOOL_LEASE_ORPHAN_FAIL; -ENOSPC @count exceeds the pool's
 * capacity; -EINTR a signal arrived (nothing granted).
 */
struct kvpool_lease_req {
	__u64 blocks_ptr;
	__u32 count;
	__u32 flags;
	__u64 timeout_ns;
	__u32 granted;
	__u32 pad;
	__u64 reserved[2];
};

/* Release every block of this file's lease; count must be 0. */
#define KVPOOL_RELEASE_ALL	(1U << 0)
#define KVPOOL_RELEASE_FLAGS	KVPOOL_RELEASE_ALL

/**
 * struct kvpool_release - KVPOOL_IOC_RELEASE
 * @blocks_ptr: in: user array of @count __u32 block indices.
 * @count: in: 1 to KVPOOL_IO_MAX_BLOCKS (0 with KVPOOL_RELEASE_ALL).
 * @flags: in: KVPOOL_RELEASE_*.
 * @released: out: blocks released.
 * @pad: must be zero.
 * @reserved: must be zero.
 *
 * Every index is validated before anything changes: -EINVAL if one is not
 * held by this file (or is repeated), and then nothing is released.  While
 * the owner has the lease pinned (a data-plane operation on its blocks is
 * in flight) the call waits, killably, for the unpin.
 */
struct kvpool_release {
	__u64 blocks_ptr;
	__u32 count;
	__u32 flags;
	__u32 released;
	__u32 pad;
	__u64 reserved[2];
};

/*
 * STATUS, owner only: report the lease @lease_id of the owner's pool as
 * STATUS on that lease's own file would (tenant, serial, held, target).
 */
#define KVPOOL_STATUS_LEASE	(1U << 0)
#define KVPOOL_STATUS_FLAGS	KVPOOL_STATUS_LEASE

/* Pool states (kvpool_status.state). */
#define KVPOOL_STATE_LIVE	1	/* an owner is attached */
#define KVPOOL_STATE_ORPHANED	2	/* the owner is gone; grants wait */

/**
 * struct kvpool_status - KVPOOL_IOC_STATUS
 * @pool: out: pool name (empty if the file is bound to none yet).
 * @tenant: out: tenant this file is charged to (empty for an owner).
 * @lease_id: out: this file's lease id (0 for an owner or unbound file).
 *	In, with KVPOOL_STATUS_LEASE: the lease to report.
 * @block_bytes: out: bytes per block.
 * @capacity: out: pool capacity in blocks.
 * @backed: out: backed blocks.
 * @used: out: leased blocks in the pool.
 * @held: out: blocks held by this file.
 * @tenant_max: out: the tenant's blocks.max (KVPOOL_UNLIMITED if none).
 * @tenant_min: out: the tenant's blocks.min.
 * @tenant_current: out: the tenant's blocks.current.
 * @tenant_peak: out: the tenant's blocks.peak.
 * @reclaim_target: out: blocks the ledger asks this file to give back
 *	(0: none).  POLLPRI is raised on the file while it is non-zero.
 * @state: out: KVPOOL_STATE_*.
 * @epoch: out: owner epoch; changes when a new owner attaches.
 * @flags: in: KVPOOL_STATUS_* (KVPOOL_FEAT_TENANT_SERIAL).
 * @pad: must be zero.
 * @tenant_serial: out (KVPOOL_FEAT_TENANT_SERIAL): the serial number of
 *	@tenant, unique in the pool's life (a tenant deleted and created
 *	again under the same name gets a new one); 0 without a tenant.
 *	Ignored on input.
 * @reserved: must be zero.
 *
 * A file not yet bound to a pool reports the first pool, if any (-ENOENT if
 * there is none), without binding.  With KVPOOL_STATUS_LEASE the owner
 * reads the lease @lease_id of its pool (-EPERM for any other file,
 * -ENOENT if there is no such lease or its file was closed).
 */
struct kvpool_status {
	char pool[KVPOOL_NAME_LEN];
	char tenant[KVPOOL_NAME_LEN];
	__u64 lease_id;
	__u64 block_bytes;
	__u32 capacity;
	__u32 backed;
	__u32 used;
	__u32 held;
	__u32 tenant_max;
	__u32 tenant_min;
	__u32 tenant_current;
	__u32 tenant_peak;
	__u32 reclaim_target;
	__u32 state;
	__u64 epoch;
	__u32 flags;
	__u32 pad;
	__u64 tenant_serial;
	__u64 reserved[3];
};

#define KVPOOL_IOC_MAGIC	0xB7

#define KVPOOL_IOC_FEATURES	_IOWR(KVPOOL_IOC_MAGIC, 0x00, struct kvpool_features)
#define KVPOOL_IOC_POOL_CREATE	_IOWR(KVPOOL_IOC_MAGIC, 0x01, struct kvpool_pool_create)
#define KVPOOL_IOC_POOL_ATTACH	_IOWR(KVPOOL_IOC_MAGIC, 0x02, struct kvpool_pool_attach)
#define KVPOOL_IOC_POOL_GROW	_IOWR(KVPOOL_IOC_MAGIC, 0x03, struct kvpool_pool_resize)
#define KVPOOL_IOC_POOL_SHRINK	_IOWR(KVPOOL_IOC_MAGIC, 0x04, struct kvpool_pool_resize)
#define KVPOOL_IOC_SNAPSHOT	_IOWR(KVPOOL_IOC_MAGIC, 0x05, struct kvpool_snapshot)
#define KVPOOL_IOC_LEASE_CHECK	_IOWR(KVPOOL_IOC_MAGIC, 0x06, struct kvpool_lease_check)
#define KVPOOL_IOC_TENANT_ATTACH _IOWR(KVPOOL_IOC_MAGIC, 0x07, struct kvpool_tenant_attach)
#define KVPOOL_IOC_LEASE	_IOWR(KVPOOL_IOC_MAGIC, 0x08, struct kvpool_lease_req)
#define KVPOOL_IOC_RELEASE	_IOWR(KVPOOL_IOC_MAGIC, 0x09, struct kvpool_release)
#define KVPOOL_IOC_STATUS	_IOWR(KVPOOL_IOC_MAGIC, 0x0a, struct kvpool_status)
#define KVPOOL_IOC_LEASE_UNPIN	_IOWR(KVPOOL_IOC_MAGIC, 0x0b, struct kvpool_lease_unpin)
#define KVPOOL_IOC_LEASE_MOVE	_IOWR(KVPOOL_IOC_MAGIC, 0x0c, struct kvpool_lease_move)
#define KVPOOL_IOC_FD_DEPOSIT	_IOWR(KVPOOL_IOC_MAGIC, 0x0d, struct kvpool_fd_deposit)
#define KVPOOL_IOC_FD_FETCH	_IOWR(KVPOOL_IOC_MAGIC, 0x0e, struct kvpool_fd_fetch)
#define KVPOOL_IOC_FD_DROP	_IOWR(KVPOOL_IOC_MAGIC, 0x0f, struct kvpool_fd_drop)
#define KVPOOL_IOC_LEASE_KEEP	_IOWR(KVPOOL_IOC_MAGIC, 0x10, struct kvpool_lease_keep)
#define KVPOOL_IOC_LEASE_ADOPT	_IOWR(KVPOOL_IOC_MAGIC, 0x11, struct kvpool_lease_adopt)

/* ------------------------------------------------------------------ */
/* Events: read(2) by the owner, and multicast on netlink to observers. */
/* ------------------------------------------------------------------ */

enum kvpool_event_type {
	KVPOOL_EVENT_NONE = 0,
	/* A client file was closed; @lease_id, @blocks returned, @tenant. */
	KVPOOL_EVENT_CLIENT_CLOSED = 1,
	/* Callers wait for backing: grow to at least @blocks backed blocks. */
	KVPOOL_EVENT_GROW = 2,
	/* Blocks were released; top chunks may be idle (@blocks = used). */
	KVPOOL_EVENT_IDLE = 3,
	/* Reclaim targets were posted: @tenant asked for @blocks blocks. */
	KVPOOL_EVENT_RECLAIM = 4,
	/* A grant was refused by @tenant's max (observers only). */
	KVPOOL_EVENT_QUOTA = 5,
	/* A caller of @tenant waits for @blocks blocks (observers only). */
	KVPOOL_EVENT_STALL = 6,
	/* The pool was grown or shrunk to @blocks backed (observers only). */
	KVPOOL_EVENT_BACKED = 7,
	/* The owner left (orphaned) or attached (observers only), @arg state. */
	KVPOOL_EVENT_OWNER = 8,
	/*
	 * A grant of @tenant, at or above its min, waits (or failed at
	 * once) because free blocks are short: @blocks more were wanted (a
	 * tenant below its min posts reclaim targets instead).  The owner
	 * may give back blocks it holds itself (e.g. unused cached blocks).
	 */
	KVPOOL_EVENT_SHORT = 9,
	/*
	 * Owner only: more client files closed than KVPOOL_CLOSED_QUEUE_MAX
	 * records hold while the owner did not read; @arg files (saturating)
	 * whose CLIENT_CLOSED records were merged into this one, @blocks
	 * they returned in all.  Read SNAPSHOT to learn which leases remain.
	 */
	KVPOOL_EVENT_CLOSED_MANY = 10,
};

/**
 * struct kvpool_event - one event record
 * @type: KVPOOL_EVENT_*.
 * @arg: type-specific (OWNER: KVPOOL_STATE_*).
 * @seq: sequence number, per pool, +1 for every event generated (a reader
 *	that sees a gap lost events; the owner's stream never loses one, but
 *	consecutive GROW, IDLE, RECLAIM and SHORT events are merged into the
 *	latest of each kind).
 * @lease_id: the lease concerned, or 0.
 * @blocks: type-specific block count (see enum kvpool_event_type).
 * @pad: zero.
 * @tenant: the tenant concerned, or empty.
 * @reserved: zero.
 *
 * read(2) on the owner's file returns whole records only (-EINVAL if the
 * buffer cannot hold one), blocking unless O_NONBLOCK (-EAGAIN).
 */
struct kvpool_event {
	__u32 type;
	__u32 arg;
	__u64 seq;
	__u64 lease_id;
	__u32 blocks;
	__u32 pad;
	char tenant[KVPOOL_NAME_LEN];
	__u64 reserved[2];
};

/* ------------------------------------------------------------------ */
/* Generic netlink family "kvpool".                                     */
/* ------------------------------------------------------------------ */

#define KVPOOL_GENL_NAME		"kvpool"
#define KVPOOL_GENL_VERSION		1
#define KVPOOL_GENL_EVENT_GROUP		"event"

enum kvpool_genl_cmd {
	KVPOOL_CMD_UNSPEC,
	KVPOOL_CMD_TENANT_NEW,	/* admin: POOL, TENANT, [MAX, MIN, UID, GID] */
	KVPOOL_CMD_TENANT_DEL,	/* admin: POOL, TENANT (-EBUSY while in use) */
	KVPOOL_CMD_TENANT_SET,	/* admin: POOL, TENANT, any of MAX MIN UID GID */
	KVPOOL_CMD_TENANT_GET,	/* POOL, TENANT; dump: all tenants [of POOL] */
	KVPOOL_CMD_POOL_GET,	/* POOL; dump: all pools */
	KVPOOL_CMD_EVENT,	/* multicast on the "event" group */
	__KVPOOL_CMD_MAX,
};
#define KVPOOL_CMD_MAX (__KVPOOL_CMD_MAX - 1)

enum kvpool_genl_attr {
	KVPOOL_A_UNSPEC,
	KVPOOL_A_PAD,			/* padding for u64 attributes */
	KVPOOL_A_POOL,			/* string: pool name */
	KVPOOL_A_TENANT,		/* string: tenant name */
	KVPOOL_A_MAX,			/* u32: blocks.max (KVPOOL_UNLIMITED) */
	KVPOOL_A_MIN,			/* u32: blocks.min */
	KVPOOL_A_CURRENT,		/* u32: blocks.current */
	KVPOOL_A_PEAK,			/* u32: blocks.peak */
	KVPOOL_A_EV_MAX,		/* u64: events "max" */
	KVPOOL_A_EV_STALL,		/* u64: events "stall" */
	KVPOOL_A_EV_RECLAIM,		/* u64: events "reclaim" */
	KVPOOL_A_EV_FAIL,		/* u64: events "fail" */
	KVPOOL_A_UID,			/* u32: allowed uid (KVPOOL_ID_NONE) */
	KVPOOL_A_GID,			/* u32: allowed gid (KVPOOL_ID_NONE) */
	KVPOOL_A_BLOCK_BYTES,		/* u64: bytes per block */
	KVPOOL_A_CAPACITY,		/* u32: blocks */
	KVPOOL_A_BACKED,		/* u32: backed blocks */
	KVPOOL_A_USED,			/* u32: leased blocks */
	KVPOOL_A_STATE,			/* u32: KVPOOL_STATE_* */
	KVPOOL_A_LEASES,		/* u32: open leases */
	KVPOOL_A_EVENT_TYPE,		/* u32: enum kvpool_event_type */
	KVPOOL_A_EVENT_SEQ,		/* u64: event sequence number */
	KVPOOL_A_EVENT_LEASE,		/* u64: lease id */
	KVPOOL_A_EVENT_BLOCKS,		/* u32: block count */
	KVPOOL_A_EVENT_ARG,		/* u32: type-specific */
	__KVPOOL_A_MAX,
};
#define KVPOOL_A_MAXATTR (__KVPOOL_A_MAX - 1)

#endif /* _UAPI_LINUX_KVPOOL_H */
