// SPDX-License-Identifier: MIT
/*
 * conn.c - one connection's state: the descriptors passed with its
 * request, its shared region, its layouts, the tenant its lease is
 * charged to, and the checks of the blocks an op names (the lease's own,
 * or cached blocks it references; mapped; zeroed when another tenant
 * used them last).  server.c serves the connection's requests; devbuf.c,
 * swap.c and prefix.c ask it through conn.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"
#include "conn.h"
#include "ledger.h"
#include "swap.h"
#include "prefix.h"
#include "scrub.h"

static int take_fd(struct kvd_client *c)
{
	int fd;

	if (!c->nfds)
		return -1;
	fd = c->fds[0];
	memmove(c->fds, c->fds + 1, sizeof(int) * (size_t)(KVD_CLIENT_MAX_FDS - 1));
	c->nfds--;
	return fd;
}

/* [off, off + n * size) inside the region, 4-byte aligned. */
static int region_ptr(struct kvd_client *c, uint64_t off, uint64_t n,
		      uint64_t size, void **p)
{
	uint64_t len;

	if (!c->region)
		return -EFAULT;
	if (__builtin_mul_overflow(n, size, &len))
		return -EFAULT;
	if (off > c->region_bytes || len > c->region_bytes - off)
		return -EFAULT;
	if (off & 3)
		return -EINVAL;
	*p = c->region + off;
	return 0;
}

/* Copy an index array out of the shared region (the client may change the
 * region while we work: indices are checked on our own copy). */
static int region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
		      uint32_t **out)
{
	void *p;
	int r = region_ptr(c, off, n, sizeof(uint32_t), &p);

	if (r)
		return r;
	*out = malloc(n ? n * sizeof(uint32_t) : 1);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, p, n * sizeof(uint32_t));
	return 0;
}

static void tenant_seen(struct kvd_client *c, uint64_t serial,
			const char *name);

static int check_blocks(struct kvd_client *c, const uint32_t *b, uint32_t n)
{
	struct kvd *d = c->d;
	char name[KVPOOL_NAME_LEN];
	uint64_t serial = 0;
	uint32_t i;

	for (i = 0; i < n; i++)
		if (b[i] >= d->top->capacity)
			return -EPERM;
	/*
	 * With the module the check also pins the lease until the op is
	 * done (unpin_blocks), so the client cannot release a block and have
	 * it granted to someone else while we still use it, nor attach its
	 * file to another tenant (it holds a block).  The check says which
	 * tenant the lease is charged to: the op acts for that one.
	 */
	if (kvd_lease_check_serial(d->top, c->lease_id, b, n, true, &serial))
		return -EPERM;
	if (d->mode != KVP_MODE_INPROC)
		c->pins++;
	if (serial != c->tenant_serial) {
		if (kvd_lease_tenant(d->top, c->lease_id, &serial, name))
			return -EPERM;
		tenant_seen(c, serial, name);
	}
	c->tenant_checked = d->mode != KVP_MODE_INPROC;
	return 0;
}

static void unpin_blocks(struct kvd_client *c)
{
	for (; c->pins; c->pins--)
		kvd_lease_unpin(c->d->top, c->lease_id);
	c->tenant_checked = false;
}

void kvd_client_unpin_blocks(struct kvd_client *c)
{
	unpin_blocks(c);
}

/*
 * Blocks an op only reads: the caller's own, or cached blocks it
 * references (prefix cache; they stay allocated while it does).  A
 * cached block it references but would write is -EROFS.
 */
static int check_blocks_ro(struct kvd_client *c, const uint32_t *b,
			   uint32_t n)
{
	uint32_t *own, k = 0, i, gen;
	int r;

	if (!c->pfx)
		return check_blocks(c, b, n);
	own = malloc(n ? n * sizeof(*own) : 1);
	if (!own)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		if (!kvd_prefix_referenced(c->pfx, b[i]))
			own[k++] = b[i];
	/* Which tenant the lease belongs to now (the references are its). */
	gen = c->tenant_gen;
	r = k ? check_blocks(c, own, k) : kvd_client_tenant_id(c, NULL, NULL);
	free(own);
	/* A new tenant: the old one's references went, and with them the
	 * right to read those blocks. */
	if (!r && k < n && gen != c->tenant_gen)
		r = -EPERM;
	return r;
}

static int check_blocks_rw(struct kvd_client *c, const uint32_t *b,
			   uint32_t n)
{
	int r = check_blocks(c, b, n);
	uint32_t i;

	if (r == -EPERM && c->pfx)
		for (i = 0; i < n; i++)
			if (kvd_prefix_referenced(c->pfx, b[i]))
				return -EROFS;
	return r;
}

static bool keep_referenced(void *pc, uint32_t b)
{
	return kvd_prefix_referenced(pc, b);
}

/*
 * Every block must be mapped too (a lying ledger must not crash us);
 * called with the top pool's backing held for reading, after the lease
 * check, right before the op uses the blocks: those another tenant used
 * last are zeroed first, except cached blocks the connection references
 * (shared read-only within their namespace).
 */
static int check_mapped(struct kvd_client *c, const uint32_t *b, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (b[i] >= c->d->top->mapped)
			return -EPERM;
	return kvd_scrub_claim(c->d->top, NULL, c->tenant_serial, b, n,
			       c->pfx ? keep_referenced : NULL, c->pfx);
}

static const struct kvk_layout *get_layout(struct kvd_client *c, uint32_t id)
{
	return id < c->nlayouts ? &c->layouts[id] : NULL;
}

int kvd_client_check_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n, bool write)
{
	return write ? check_blocks_rw(c, b, n) : check_blocks_ro(c, b, n);
}

int kvd_client_check_mapped(struct kvd_client *c, const uint32_t *b,
			    uint32_t n)
{
	return check_mapped(c, b, n);
}

/* before the caller's blocks among b[0..n) are published (prefix.c) */
int kvd_client_claim_blocks(struct kvd_client *c, const uint32_t *b,
			    uint32_t n)
{
	struct kvd *d = c->d;
	int r;

	/* not all the caller's (or referenced): the publish fails anyway */
	if (check_blocks_ro(c, b, n))
		return 0;
	kvd_backing_rdlock(d->top);
	r = check_mapped(c, b, n);
	kvd_backing_unlock(d->top);
	/* the blocks change hands next: no pin may stay */
	unpin_blocks(c);
	return r == -EPERM ? 0 : r;
}

struct kvd_devbufs *kvd_client_devbufs(struct kvd_client *c)
{
	return &c->devbufs;
}

static int send_msg(struct kvd_client *c, const void *buf, size_t len)
{
	ssize_t n = send(c->sock, buf, len, MSG_NOSIGNAL);

	return n == (ssize_t)len ? 0 : -errno;
}

/*
 * The tag that the pools' blocks carry for this connection's tenant
 * (scrub.h): the tenant's serial in the top pool's ledger, never reused,
 * so that a tenant deleted and created again under the same name does
 * not read what the old one left.  A block a connection uses is zeroed
 * first unless its tag is this one.
 */
uint64_t kvd_client_scrub_tag(struct kvd_client *c)
{
	uint64_t serial = c->tenant_serial;

	kvd_client_tenant_id(c, &serial, NULL);
	return serial;
}

static int op_layout(struct kvd_client *c, const struct kvp_layout *l,
		     struct kvp_layout_reply *rep)
{
	struct kvk_layout kl;
	int r;

	if (l->pad)
		return -EINVAL;
	if (c->nlayouts >= KVP_MAX_LAYOUTS)
		return -ENOSPC;
	r = kvk_layout_init(&kl, l->layers, l->kv_heads, l->head_dim,
			    l->dtype, c->d->top->block_bytes);
	if (!r && c->d->be->layout_ok)
		r = c->d->be->layout_ok(c->d, &kl);
	if (r)
		return r;
	kl.pool_blocks = c->d->top->capacity;
	c->layouts[c->nlayouts] = kl;
	rep->layout_id = c->nlayouts++;
	rep->tokens_per_block = kl.tokens_per_block;
	rep->bytes_per_token = kl.bytes_per_token;
	return 0;
}

/* ---- the connection's parts, for the data-plane files ---------------- */

int kvd_client_send(struct kvd_client *c, const void *buf, size_t len)
{
	return send_msg(c, buf, len);
}

int kvd_client_take_fd(struct kvd_client *c)
{
	return take_fd(c);
}

int kvd_client_sock(struct kvd_client *c)
{
	return c->sock;
}

void kvd_client_cred(struct kvd_client *c, struct kvpool_cred *cred)
{
	memset(cred, 0, sizeof(*cred));
	cred->uid = c->cred.uid;
	cred->gid = c->cred.gid;
	cred->pid = (u32)c->cred.pid;
	cred->admin = c->cred.uid == 0;
}

int kvd_client_region_ptr(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint64_t size, void **p)
{
	return region_ptr(c, off, n, size, p);
}

int kvd_client_region_u32(struct kvd_client *c, uint64_t off, uint64_t n,
			  uint32_t **out)
{
	return region_u32(c, off, n, out);
}

const struct kvk_layout *kvd_client_layout(struct kvd_client *c, uint32_t id)
{
	return get_layout(c, id);
}

int kvd_client_layout_add(struct kvd_client *c, const struct kvp_layout *l,
			  struct kvp_layout_reply *rep)
{
	return op_layout(c, l, rep);
}

uint64_t kvd_client_lease_id(const struct kvd_client *c)
{
	return c->lease_id;
}

struct kvd *kvd_client_daemon(struct kvd_client *c)
{
	return c->d;
}

/*
 * The lease is charged to tenant @serial (@name) now: if that is not the
 * one the connection last acted for, the references it took to cached
 * blocks go (they were the other tenant's to give), and from here on the
 * connection acts for the new one.  The connection's thread only.
 */
static void tenant_seen(struct kvd_client *c, uint64_t serial,
			const char *name)
{
	if (serial == c->tenant_serial)
		return;
	kvd_log(KVD_INFO, "lease %llu: charged to tenant %.*s now (was %s)",
		(unsigned long long)c->lease_id, KVPOOL_NAME_LEN - 1, name,
		c->tenant);
	if (c->pfx)
		kvd_prefix_conn_unref_all(c->d, c->pfx);
	memcpy(c->tenant, name, KVPOOL_NAME_LEN);
	c->tenant[KVPOOL_NAME_LEN - 1] = 0;
	c->tenant_serial = serial;
	c->tenant_gen++;
	if (c->ct)
		kvd_ctier_set_tenant(c->ct, c->tenant);
}

int kvd_client_tenant_id(struct kvd_client *c, uint64_t *serial,
			 char name[KVPOOL_NAME_LEN])
{
	char now[KVPOOL_NAME_LEN];
	uint64_t s;
	int r = 0;

	if (!c->lease_id)
		return -ENOTCONN;
	/* A pin of this op vouched for it, and holds it until the unpin. */
	if (c->lease) {
		/* in process: the lease is at hand */
		pthread_mutex_lock(&c->d->top->lock);
		s = c->lease->tenant->serial;
		memcpy(now, c->lease->tenant->name, KVPOOL_NAME_LEN);
		pthread_mutex_unlock(&c->d->top->lock);
		tenant_seen(c, s, now);
	} else if (!c->tenant_checked) {
		r = kvd_lease_tenant(c->d->top, c->lease_id, &s, now);
		if (!r)
			tenant_seen(c, s, now);
	}
	if (serial)
		*serial = c->tenant_serial;
	if (name)
		memcpy(name, c->tenant, KVPOOL_NAME_LEN);
	return r;
}

void kvd_client_tenant(struct kvd_client *c, char name[KVPOOL_NAME_LEN])
{
	kvd_client_tenant_id(c, NULL, name);
}

struct kvd_prefix_conn **kvd_client_prefix(struct kvd_client *c)
{
	return &c->pfx;
}

/* ---- hooks for the ledger (d->lock held) ------------------------------ */

void kvd_client_reclaim(void *client, uint32_t target)
{
	struct kvd_client *c = client;
	uint64_t one = 1;

	atomic_store(&c->reclaim_target, target);
	if (write(c->evfd, &one, sizeof(one)) < 0) {
		/* saturated: a wake is pending */
	}
}

int kvd_client_connected(struct kvd_pool *p, uint64_t lease_id)
{
	struct kvd *d = p->d;
	struct kvd_client *c;
	int found = 0;

	pthread_mutex_lock(&d->clients_lock);
	for (c = d->clients; c && !found; c = c->next)
		found = c->hello && (p->tier ?
			kvd_ctier_connected(c->ct, p->tier, lease_id) :
			c->lease_id == lease_id);
	pthread_mutex_unlock(&d->clients_lock);
	return found;
}
