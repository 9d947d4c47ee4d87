/* SPDX-License-Identifier: MIT */
/*
 * conn.h - one connection's state (conn.c): its socket and the descriptors
 * that came with its request, its shared region, layouts and lease, the
 * tenant it acts for, and the checks of the blocks an op names.  The
 * connection server (server.c) keeps the list of connections and serves
 * their requests; the data-plane files (devbuf.c, swap.c, prefix.c) ask
 * a connection through the functions below.
 */
#ifndef KVD_CONN_H
#define KVD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core.h"

/* Descriptors kept from one received record (the others are closed). */
#define KVD_CLIENT_MAX_FDS	2

/* The fields are conn.c's and server.c's; others use the functions. */
struct kvd_client {
	struct kvd *d;
	struct kvd_client *next;
	int sock;
	int evfd;
	pthread_t th;
	struct ucred cred;
	bool admin;
	bool hello;
	uint64_t lease_id;
	struct kvpool_lease *lease;	/* in-process ledger */
	uint8_t *region;
	uint64_t region_bytes;
	struct kvk_layout layouts[KVP_MAX_LAYOUTS];
	unsigned int nlayouts;
	_Atomic uint32_t reclaim_target;
	uint32_t pins;			/* module ledger pins held by this op */
	struct kvd_devbufs devbufs;	/* GPU tenant's buffers (devbuf.c) */
	struct kvd_ctier *ct;		/* tiers and swaps (swap.c) */
	/* the tenant of the lease as last seen (kvd_client_tenant_id) */
	char tenant[KVPOOL_NAME_LEN];
	uint64_t tenant_serial;
	uint32_t tenant_gen;		/* +1 at each change of tenant */
	bool tenant_checked;		/* module: by a pin of this op */
	struct kvd_prefix_conn *pfx;	/* cached blocks it references */
	int fds[KVD_CLIENT_MAX_FDS];
	int nfds;
	uint8_t in[KVP_MSG_MAX] __attribute__((aligned(16)));
	uint8_t out[KVP_MSG_MAX] __attribute__((aligned(16)));
};

/* The next descriptor that came with the request, or -1. */
int kvd_client_take_fd(struct kvd_client *c);
int kvd_client_send(struct kvd_client *c, const void *buf, size_t len);
int kvd_client_sock(struct kvd_client *c);
void kvd_client_cred(struct kvd_client *c, struct kvpool_cred *cred);
struct kvd *kvd_client_daemon(struct kvd_client *c);
uint64_t kvd_client_lease_id(const struct kvd_client *c);

/* [off, off + n * size) of the client's region, 4-byte aligned: 0,
 * -EFAULT, -EINVAL. */
int kvd_client_region_ptr(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint64_t size, void **p);
/* A private copy of u32[n] at @off (free() it): 0, -EFAULT, -EINVAL,
 * -ENOMEM. */
int kvd_client_region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint32_t **out);

const struct kvk_layout *kvd_client_layout(struct kvd_client *c, uint32_t id);
/* LAYOUT: a new layout of the connection. */
int kvd_client_layout_add(struct kvd_client *c, const struct kvp_layout *l,
			  struct kvp_layout_reply *rep);

/* every block held by the client's lease (pinned until the op ends) or,
 * when not write, a prefix-cache block it references */
int kvd_client_check_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n, bool write);
/* every block mapped (the top pool's backing held for reading) */
int kvd_client_check_mapped(struct kvd_client *c, const uint32_t *b,
			    uint32_t n);
/* The end of an op: the ledger pins its block checks took go. */
void kvd_client_unpin_blocks(struct kvd_client *c);
/* Zero what another tenant left in the caller's own blocks among b[0..n)
 * (scrub.h), before they are published: 0 (also when they are not all
 * its own: the publish then fails) or -errno. */
int kvd_client_claim_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n);

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
/* The tenant the connection's lease is charged to (as
 * kvd_client_tenant_id(), the last one seen on an error). */
void kvd_client_tenant(struct kvd_client *c, char name[KVPOOL_NAME_LEN]);
/* the block tag of the connection's tenant (scrub.h) */
uint64_t kvd_client_scrub_tag(struct kvd_client *c);

struct kvd_devbufs *kvd_client_devbufs(struct kvd_client *c);
struct kvd_prefix_conn **kvd_client_prefix(struct kvd_client *c);

/* The hooks of the pool floor (struct kvd_hooks): a reclaim target for a
 * connection's lease (called with p->lock held; must not block), and
 * whether a connection holds @lease_id of @p. */
void kvd_client_reclaim(void *client, uint32_t target);
int kvd_client_connected(struct kvd_pool *p, uint64_t lease_id);

#endif /* KVD_CONN_H */
