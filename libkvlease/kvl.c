// SPDX-License-Identifier: MIT
/*
 * kvl.c - libkvlease: context, transports (module ioctls or the daemon's
 * in-process ledger), leases, and the data-plane calls on raw blocks.
 * Lower tiers and swaps: kvl_tier.c; pressure policies: kvl_policy.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvl_internal.h"

#define DEFAULT_REGION	(16ULL << 20)
#define DEFAULT_BATCH	16
#define DEFAULT_TIMEOUT	(10ULL * 1000000000ULL)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void kvl_logf(struct kvl_ctx *ctx, int level, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	if (level > ctx->log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (ctx->log)
		ctx->log(ctx->log_arg, level, buf);
	else
		fprintf(stderr, "libkvlease: %s\n", buf);
}

static void copy_name(char *dst, const char *src)
{
	memset(dst, 0, KVL_NAME_LEN);
	if (src)
		strncpy(dst, src, KVL_NAME_LEN - 1);
}

/* ---- daemon transport ------------------------------------------------- */

static int sock_connect(struct kvl_ctx *ctx)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(ctx->socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, ctx->socket_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static bool conn_error(int r)
{
	return r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN ||
	       r == -ECONNREFUSED || r == -ESHUTDOWN;
}

/*
 * The connection was closed on us: if the daemon refused it (connection
 * limits), its KVP_EV_REFUSED record may still be queued; return its
 * status, else @err.
 */
static int refused_status(struct kvl_ctx *ctx, int err)
{
	struct kvp_reply *rep = (struct kvp_reply *)ctx->msg;
	ssize_t n = recv(ctx->sock, ctx->msg, sizeof(ctx->msg), MSG_DONTWAIT);

	if (n >= (ssize_t)sizeof(*rep) && rep->hdr.magic == KVP_MAGIC &&
	    rep->hdr.op == KVP_EV_REFUSED && rep->status < 0)
		return rep->status;
	return err;
}

/*
 * One request, one reply.  Returns the reply status (>= 0 or -errno from
 * the daemon), or a transport error (conn_error()).  The reply body goes
 * to rbody (up to rcap bytes, *rlen set).
 */
static int rpc_raw(struct kvl_ctx *ctx, uint16_t op, const void *body,
		   size_t blen, const int *fds, int nfds, void *rbody,
		   size_t rcap, size_t *rlen)
{
	struct kvp_hdr *h = (struct kvp_hdr *)ctx->msg;
	struct kvp_reply *rep = (struct kvp_reply *)ctx->msg;
	union {
		char buf[CMSG_SPACE(sizeof(int) * 2)];
		struct cmsghdr align;
	} cm;
	struct iovec iov;
	struct msghdr mh;
	uint32_t id;
	ssize_t n;

	if (ctx->sock < 0)
		return -ENOTCONN;
	if (sizeof(*h) + blen > KVP_MSG_MAX)
		return -EMSGSIZE;
	id = ++ctx->req_id;
	if (!id)
		id = ++ctx->req_id;
	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = id;
	if (blen)
		memcpy(h + 1, body, blen);
	iov.iov_base = ctx->msg;
	iov.iov_len = h->len;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	if (sendmsg(ctx->sock, &mh, MSG_NOSIGNAL) < 0) {
		int e = errno;

		/* Closed on us: a refusal may be waiting to be read. */
		if (e == EPIPE || e == ECONNRESET)
			return refused_status(ctx, -e);
		return e == EAGAIN ? -EIO : -e;
	}
	for (;;) {
		n = recv(ctx->sock, ctx->msg, sizeof(ctx->msg), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET)
			return refused_status(ctx, -ECONNRESET);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		if ((size_t)n < sizeof(*rep) || rep->hdr.magic != KVP_MAGIC)
			return -EPROTO;
		/* The daemon refused the connection (limits): say why. */
		if (rep->hdr.op == KVP_EV_REFUSED)
			return rep->status < 0 ? rep->status : -ECONNREFUSED;
		if (rep->hdr.op == KVP_EV_RECLAIM ||
		    rep->hdr.op == KVP_EV_SWAP_DONE) {
			kvl_note_event(ctx, ctx->msg, (size_t)n);
			continue;
		}
		if (rep->hdr.req_id != id)
			continue;	/* a stale reply: skip it */
		break;
	}
	if (rep->status >= 0 && rbody) {
		size_t got = (size_t)n - sizeof(*rep);

		if (got > rcap)
			got = rcap;
		memcpy(rbody, rep + 1, got);
		if (rlen)
			*rlen = got;
	}
	return rep->status;
}

/* @claim: take back the lease a restarted in-process daemon kept. */
static int hello(struct kvl_ctx *ctx, bool claim)
{
	struct kvp_hello h;
	struct kvp_hello_reply rep;
	int fds[2], nfds = 0, r;
	unsigned int i;

	memset(&h, 0, sizeof(h));
	memset(&rep, 0, sizeof(rep));
	h.version = KVP_VERSION;
	if (ctx->mode == KVL_MODE_MODULE) {
		h.flags |= KVP_HELLO_LEDGER_FD;
		fds[nfds++] = ctx->dev_fd;
	} else {
		memcpy(h.pool, ctx->pool_req, KVL_NAME_LEN);
		memcpy(h.tenant, ctx->tenant_req, KVL_NAME_LEN);
		if (claim) {
			h.flags |= KVP_HELLO_CLAIM;
			h.reserved[0] = ctx->lease_id;
			h.reserved[1] = ctx->lease_secret;
		}
	}
	h.flags |= KVP_HELLO_REGION;
	h.region_bytes = ctx->region_bytes;
	fds[nfds++] = ctx->memfd;
	r = rpc_raw(ctx, KVP_OP_HELLO, &h, sizeof(h), fds, nfds, &rep,
		    sizeof(rep), NULL);
	if (r < 0)
		return r;
	if ((ctx->mode == KVL_MODE_MODULE) != (rep.mode == KVP_MODE_MODULE)) {
		kvl_logf(ctx, KVL_LOG_ERR, "kvpoold uses the %s ledger, we "
			 "do not", rep.mode == KVP_MODE_MODULE ? "module" :
			 "in-process");
		return -EPROTO;
	}
	ctx->lease_id = rep.lease_id;
	ctx->lease_secret = rep.mode == KVP_MODE_INPROC ? rep.reserved[0] : 0;
	if (ctx->refcnt && rep.capacity != ctx->capacity) {
		free(ctx->refcnt);
		free(ctx->merged);	/* kvl_edit.c: per block, as refcnt */
		ctx->merged = NULL;
		ctx->merged_cap = 0;
		ctx->refcnt = calloc(rep.capacity, sizeof(*ctx->refcnt));
		if (!ctx->refcnt)
			return -ENOMEM;
	}
	if (ctx->pfx_ref && rep.capacity != ctx->capacity) {
		free(ctx->pfx_ref);	/* references died with the connection */
		ctx->pfx_ref = NULL;
		ctx->npfx = 0;
	}
	ctx->block_bytes = rep.block_bytes;
	ctx->capacity = rep.capacity;
	memcpy(ctx->pool, rep.pool, KVL_NAME_LEN);
	ctx->pool[KVL_NAME_LEN - 1] = 0;
	memcpy(ctx->backend, rep.backend, sizeof(ctx->backend));
	ctx->backend[sizeof(ctx->backend) - 1] = 0;
	/* Layouts are per connection: declare them again, same ids. */
	for (i = 0; i < ctx->nlayouts; i++) {
		struct kvl_layout_slot *s = &ctx->layouts[i];
		struct kvp_layout_model lm;
		struct kvp_layout_reply lr;

		memset(&lm, 0, sizeof(lm));
		lm.layout.layers = s->l.layers;
		lm.layout.kv_heads = s->l.kv_heads;
		lm.layout.head_dim = s->l.head_dim;
		lm.layout.dtype = s->l.dtype;
		lm.layout.rope_base = s->l.rope_base;
		memcpy(lm.model, s->model, sizeof(lm.model));
		if (s->model[0])
			r = rpc_raw(ctx, KVP_OP_LAYOUT_MODEL, &lm, sizeof(lm),
				    NULL, 0, &lr, sizeof(lr), NULL);
		else
			r = rpc_raw(ctx, KVP_OP_LAYOUT, &lm.layout,
				    sizeof(lm.layout), NULL, 0, &lr, sizeof(lr),
				    NULL);
		if (r < 0)
			return r;
		s->id = lr.layout_id;
		if (s->has_rope) {
			s->rope.layout_id = s->id;
			r = rpc_raw(ctx, KVP_OP_LAYOUT_ROPE, &s->rope,
				    sizeof(s->rope), NULL, 0, NULL, 0, NULL);
			if (r < 0)
				return r;
		}
	}
	/* and device buffers */
	return kvl_dev_rehello(ctx);
}

/* After a transport error during request @op: reconnect (waiting for a
 * restarted daemon). */
static int reconnect(struct kvl_ctx *ctx, uint16_t op)
{
	uint64_t old = ctx->epoch, deadline = now_ns() + ctx->timeout_ns;
	struct kvp_reply *rep = (struct kvp_reply *)ctx->msg;
	bool claim = ctx->mode == KVL_MODE_DAEMON && ctx->lease_secret;
	bool claimed = false;
	int r = -ECONNREFUSED;

	if (ctx->sock >= 0)
		close(ctx->sock);
	ctx->sock = -1;
	if (ctx->flags & KVL_OPEN_NO_RECONNECT)
		return -ECONNRESET;
	kvl_logf(ctx, KVL_LOG_WARNING, "lost kvpoold, reconnecting");
	while (now_ns() < deadline) {
		r = sock_connect(ctx);
		if (r >= 0) {
			ctx->sock = r;
			r = hello(ctx, claim);
			if (claim && (r == -ENOENT || r == -EPERM)) {
				/* the restarted daemon did not keep it */
				kvl_logf(ctx, KVL_LOG_WARNING, "kvpoold kept "
					 "no lease %llu for us (%s)",
					 (unsigned long long)ctx->lease_id,
					 strerror(-r));
				r = hello(ctx, false);
				claim = false;
			}
			claimed = claim && !r;
			if (!r)
				break;
			close(ctx->sock);
			ctx->sock = -1;
		}
		usleep(50000);
	}
	if (r)
		return r;
	ctx->epoch = rep->epoch;
	ctx->reconnects++;
	/* swap tickets were the lost connection's */
	memset(ctx->done, 0, sizeof(ctx->done));
	kvl_tiers_reconnect(ctx);
	/* With the in-process ledger the lease died with the connection
	 * unless the daemon kept it and gave it back (claimed); with the
	 * module only the contents did, and only on a new epoch. */
	if (claimed && ctx->epoch != old) {
		/* kept without its contents: none of it can be used */
		struct kvp_release ra = { .flags = KVPOOL_RELEASE_ALL };

		rpc_raw(ctx, KVP_OP_RELEASE, &ra, sizeof(ra), NULL, 0, NULL, 0,
			NULL);
		claimed = false;
	}
	if ((ctx->mode == KVL_MODE_DAEMON && !claimed) || ctx->epoch != old) {
		kvl_logf(ctx, KVL_LOG_WARNING, "kvpoold epoch %llu -> %llu: "
			 "block contents lost%s", (unsigned long long)old,
			 (unsigned long long)ctx->epoch,
			 ctx->mode == KVL_MODE_DAEMON ? ", lease lost" : "");
		kvl_seq_epoch_reset(ctx, ctx->mode == KVL_MODE_DAEMON);
		return -ESTALE;
	}
	if (claimed && kvl_seq_claimed(ctx, op))
		return -ESTALE;
	/* References to cached blocks died with the connection: take them
	 * again where the prefix index kept the blocks. */
	if (ctx->npfx) {
		int lost = kvl_prefix_rematch(ctx);

		if (lost) {
			kvl_logf(ctx, KVL_LOG_WARNING, "kvpoold restarted: %s",
				 lost < 0 ? "cached prefixes lost" :
				 "sequences whose cached prefix went are reset");
			if (lost < 0)
				kvl_seq_epoch_reset(ctx, false);
			return -ESTALE;
		}
	}
	return 0;
}

/* rpc with recovery: a lost daemon makes the call fail with -ESTALE (or
 * be retried once when nothing was lost). */
static int rpc(struct kvl_ctx *ctx, uint16_t op, const void *body,
	       size_t blen, void *rbody, size_t rcap, size_t *rlen);

int kvl_rpc(struct kvl_ctx *ctx, uint16_t op, const void *body, size_t blen,
	    void *rbody, size_t rcap, size_t *rlen)
{
	return rpc(ctx, op, body, blen, rbody, rcap, rlen);
}

/* A request whose reply nobody waits for (the next rpc skips it). */
void kvl_send_only(struct kvl_ctx *ctx, uint16_t op, const void *body,
		   size_t blen)
{
	uint8_t msg[sizeof(struct kvp_hdr) + 256] __attribute__((aligned(8)));
	struct kvp_hdr *h = (struct kvp_hdr *)msg;

	if (ctx->sock < 0 || blen > 256)
		return;
	memset(h, 0, sizeof(*h));
	h->magic = KVP_MAGIC;
	h->op = op;
	h->len = (uint32_t)(sizeof(*h) + blen);
	h->req_id = ++ctx->req_id;
	if (!h->req_id)
		h->req_id = ++ctx->req_id;
	memcpy(h + 1, body, blen);
	if (send(ctx->sock, msg, h->len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* informational only */
	}
}

int kvl_rpc_fd(struct kvl_ctx *ctx, uint16_t op, const void *body,
	       size_t blen, int fd, void *rbody, size_t rcap, size_t *rlen)
{
	return rpc_raw(ctx, op, body, blen, &fd, fd >= 0 ? 1 : 0, rbody,
		       rcap, rlen);
}

static int rpc(struct kvl_ctx *ctx, uint16_t op, const void *body,
	       size_t blen, void *rbody, size_t rcap, size_t *rlen)
{
	struct kvp_reply *rep = (struct kvp_reply *)ctx->msg;
	int r, tries;

	for (tries = 0; tries < 2; tries++) {
		r = rpc_raw(ctx, op, body, blen, NULL, 0, rbody, rcap, rlen);
		if (!conn_error(r)) {
			if (r != -EPROTO && rep->epoch != ctx->epoch &&
			    ctx->epoch) {
				/* should not happen without a reconnect */
				ctx->epoch = rep->epoch;
				kvl_seq_epoch_reset(ctx, false);
				return -ESTALE;
			}
			return r;
		}
		r = reconnect(ctx, op);
		if (r)
			return r;
		/* In-process, a lease claimed back: a release the daemon did
		 * before it died finds the blocks gone (all or none of them
		 * were released: -EINVAL); it is done. */
		if (ctx->mode == KVL_MODE_DAEMON && op == KVP_OP_RELEASE &&
		    blen >= sizeof(struct kvp_release)) {
			r = rpc_raw(ctx, op, body, blen, NULL, 0, rbody, rcap,
				    rlen);
			if (r == -EINVAL)
				r = (int)((const struct kvp_release *)
					  body)->count;
			if (!conn_error(r))
				return r;
			r = reconnect(ctx, op);
			return r ? r : -ECONNRESET;
		}
	}
	return -ECONNRESET;
}

uint8_t *kvl_region(struct kvl_ctx *ctx, uint64_t *bytes)
{
	*bytes = ctx->region_bytes;
	return ctx->region;
}

/* ---- open / close ----------------------------------------------------- */

static int make_region(struct kvl_ctx *ctx)
{
	int fd = memfd_create("kvlease", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *m;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)ctx->region_bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL)) {
		int e = -errno;

		close(fd);
		return e;
	}
	m = mmap(NULL, ctx->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	if (m == MAP_FAILED) {
		int e = -errno;

		close(fd);
		return e;
	}
	ctx->memfd = fd;
	ctx->region = m;
	return 0;
}

static int module_attach(struct kvl_ctx *ctx)
{
	struct kvpool_tenant_attach ta;
	struct kvpool_status st;

	memset(&ta, 0, sizeof(ta));
	memcpy(ta.pool, ctx->pool_req, KVL_NAME_LEN);
	memcpy(ta.tenant, ctx->tenant_req, KVL_NAME_LEN);
	if (ioctl(ctx->dev_fd, KVPOOL_IOC_TENANT_ATTACH, &ta))
		return -errno;
	ctx->lease_id = ta.lease_id;
	memset(&st, 0, sizeof(st));
	if (ioctl(ctx->dev_fd, KVPOOL_IOC_STATUS, &st))
		return -errno;
	ctx->block_bytes = st.block_bytes;
	ctx->capacity = st.capacity;
	ctx->epoch = st.epoch;
	memcpy(ctx->pool, st.pool, KVL_NAME_LEN);
	ctx->pool[KVL_NAME_LEN - 1] = 0;
	return 0;
}

KVL_EXPORT int kvl_open(const struct kvl_opts *opts, struct kvl_ctx **out)
{
	struct kvl_opts def;
	struct kvl_ctx *ctx;
	const char *s;
	unsigned int i;
	int r;

	*out = NULL;
	if (!opts) {
		memset(&def, 0, sizeof(def));
		opts = &def;
	}
	for (i = 0; i < 3; i++)
		if (opts->reserved[i])
			return -EINVAL;
	if (opts->policy > KVL_POLICY_FAIL)
		return -EINVAL;
	if (opts->flags & ~(KVL_OPEN_NO_DAEMON | KVL_OPEN_NO_MODULE |
			    KVL_OPEN_NO_RECONNECT))
		return -EINVAL;
	if ((opts->flags & KVL_OPEN_NO_DAEMON) &&
	    (opts->flags & KVL_OPEN_NO_MODULE))
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->dev_fd = ctx->sock = ctx->memfd = -1;
	ctx->flags = opts->flags;
	ctx->lease_batch = opts->lease_batch ? opts->lease_batch :
			   DEFAULT_BATCH;
	ctx->timeout_ns = opts->timeout_ns ? opts->timeout_ns :
			  DEFAULT_TIMEOUT;
	ctx->region_bytes = opts->region_bytes ? opts->region_bytes :
			    DEFAULT_REGION;
	ctx->region_bytes = (ctx->region_bytes + 4095) & ~4095ULL;
	ctx->log = opts->log;
	ctx->log_arg = opts->log_arg;
	ctx->log_level = opts->log_level ? opts->log_level : KVL_LOG_WARNING;
	ctx->policy = opts->policy ? opts->policy : KVL_POLICY_STALL;
	ctx->stall_ms = opts->stall_ms;
	s = opts->socket_path;
	if (!s || !s[0])
		s = getenv(KVL_SOCKET_ENV);
	if (!s || !s[0])
		s = KVL_DEFAULT_SOCKET;
	ctx->socket_path = strdup(s);
	s = opts->device_path;
	if (!s || !s[0])
		s = getenv(KVL_DEVICE_ENV);
	if (!s || !s[0])
		s = KVL_DEFAULT_DEVICE;
	ctx->device_path = strdup(s);
	if ((opts->pool && strlen(opts->pool) >= KVL_NAME_LEN) ||
	    (opts->tenant && strlen(opts->tenant) >= KVL_NAME_LEN)) {
		r = -EINVAL;
		goto err;
	}
	copy_name(ctx->pool_req, opts->pool);
	copy_name(ctx->tenant_req, opts->tenant);
	if (!ctx->socket_path || !ctx->device_path) {
		r = -ENOMEM;
		goto err;
	}

	ctx->mode = KVL_MODE_DAEMON;
	if (!(ctx->flags & KVL_OPEN_NO_MODULE)) {
		ctx->dev_fd = open(ctx->device_path, O_RDWR | O_CLOEXEC);
		if (ctx->dev_fd >= 0) {
			ctx->mode = KVL_MODE_MODULE;
			r = module_attach(ctx);
			if (r)
				goto err;
		} else if (ctx->flags & KVL_OPEN_NO_DAEMON) {
			r = -errno;
			goto err;
		}
	}
	if (!(ctx->flags & KVL_OPEN_NO_DAEMON)) {
		r = make_region(ctx);
		if (r)
			goto err;
		r = sock_connect(ctx);
		if (r < 0) {
			kvl_logf(ctx, KVL_LOG_ERR, "cannot reach kvpoold at "
				 "%s: %s", ctx->socket_path, strerror(-r));
			goto err;
		}
		ctx->sock = r;
		r = hello(ctx, false);
		if (r)
			goto err;
		ctx->epoch = ((struct kvp_reply *)ctx->msg)->epoch;
	}
	*out = ctx;
	return 0;
err:
	kvl_close(ctx);
	return r;
}

KVL_EXPORT void kvl_close(struct kvl_ctx *ctx)
{
	if (!ctx)
		return;
	ctx->closing = true;	/* closing the socket drops our references */
	while (ctx->seqs)
		kvl_seq_free(ctx->seqs);
	kvl_dev_close_all(ctx);
	kvl_tiers_close(ctx);
	if (ctx->sock >= 0)
		close(ctx->sock);
	if (ctx->dev_fd >= 0)
		close(ctx->dev_fd);	/* returns every block */
	if (ctx->region)
		munmap(ctx->region, ctx->region_bytes);
	if (ctx->memfd >= 0)
		close(ctx->memfd);
	free(ctx->refcnt);
	free(ctx->merged);
	free(ctx->cache);
	free(ctx->dropped);
	free(ctx->pfx_ref);
	free(ctx->unref_q);
	free(ctx->socket_path);
	free(ctx->device_path);
	free(ctx);
}

KVL_EXPORT uint64_t kvl_epoch(const struct kvl_ctx *ctx)
{
	return ctx->epoch;
}

/* ---- leases ------------------------------------------------------------ */

KVL_EXPORT int kvl_attach_tenant(struct kvl_ctx *ctx, const char *pool,
				 const char *tenant)
{
	if ((pool && strlen(pool) >= KVL_NAME_LEN) ||
	    (tenant && strlen(tenant) >= KVL_NAME_LEN))
		return -EINVAL;
	copy_name(ctx->pool_req, pool);
	copy_name(ctx->tenant_req, tenant);
	if (ctx->mode == KVL_MODE_MODULE) {
		return module_attach(ctx);
	} else {
		struct kvp_attach a;
		struct kvp_attach_reply ar;

		memcpy(a.pool, ctx->pool_req, KVL_NAME_LEN);
		memcpy(a.tenant, ctx->tenant_req, KVL_NAME_LEN);
		return rpc(ctx, KVP_OP_ATTACH, &a, sizeof(a), &ar, sizeof(ar),
			   NULL);
	}
}

KVL_EXPORT int kvl_lease(struct kvl_ctx *ctx, uint32_t count, uint32_t flags,
			 uint64_t timeout_ns, uint32_t *blocks)
{
	if (!count)
		return -EINVAL;
	if (ctx->mode == KVL_MODE_MODULE) {
		struct kvpool_lease_req l;

		memset(&l, 0, sizeof(l));
		l.blocks_ptr = (uintptr_t)blocks;
		l.count = count;
		l.flags = flags;
		l.timeout_ns = timeout_ns;
		if (ioctl(ctx->dev_fd, KVPOOL_IOC_LEASE, &l))
			return -errno;
		return (int)l.granted;
	} else {
		struct kvp_lease l = {
			.count = count, .flags = flags,
			.timeout_ns = timeout_ns,
		};

		if (count > KVP_IO_MAX_BLOCKS)
			return -EINVAL;
		return rpc(ctx, KVP_OP_LEASE, &l, sizeof(l), blocks,
			   (size_t)count * sizeof(uint32_t), NULL);
	}
}

static int release_raw(struct kvl_ctx *ctx, const uint32_t *blocks,
		       uint32_t count, uint32_t flags)
{
	if (ctx->mode == KVL_MODE_MODULE) {
		struct kvpool_release rl;

		memset(&rl, 0, sizeof(rl));
		rl.blocks_ptr = (uintptr_t)blocks;
		rl.count = count;
		rl.flags = flags;
		if (ioctl(ctx->dev_fd, KVPOOL_IOC_RELEASE, &rl))
			return -errno;
		return (int)rl.released;
	} else {
		uint8_t buf[sizeof(struct kvp_release) +
			    KVP_IO_MAX_BLOCKS * sizeof(uint32_t)]
			__attribute__((aligned(8)));
		struct kvp_release *rl = (struct kvp_release *)buf;

		if (count > KVP_IO_MAX_BLOCKS)
			return -EINVAL;
		rl->count = count;
		rl->flags = flags;
		if (count)
			memcpy(rl + 1, blocks, (size_t)count * 4);
		return rpc(ctx, KVP_OP_RELEASE, buf,
			   sizeof(*rl) + (size_t)count * 4, NULL, 0, NULL);
	}
}

KVL_EXPORT int kvl_release(struct kvl_ctx *ctx, const uint32_t *blocks,
			   uint32_t count)
{
	int total = 0;

	if (!count)
		return -EINVAL;
	if (ctx->mode == KVL_MODE_DAEMON && count > KVP_IO_MAX_BLOCKS) {
		/* all-or-nothing is kept per batch only */
		while (count) {
			uint32_t n = count > KVP_IO_MAX_BLOCKS ?
				     KVP_IO_MAX_BLOCKS : count;
			int r = release_raw(ctx, blocks, n, 0);

			if (r < 0)
				return total ? total : r;
			total += r;
			blocks += n;
			count -= n;
		}
		return total;
	}
	return release_raw(ctx, blocks, count, 0);
}

/* Internal: blocks the library gives back from its cache. */
int kvl_release_internal(struct kvl_ctx *ctx, const uint32_t *blocks,
			 uint32_t count)
{
	return kvl_release(ctx, blocks, count);
}

KVL_EXPORT int kvl_release_all(struct kvl_ctx *ctx)
{
	int r = release_raw(ctx, NULL, 0, KVPOOL_RELEASE_ALL);

	if (r >= 0) {
		/* cached blocks were never in the lease: drop them too */
		kvl_prefix_forget(ctx, true);
		kvl_seq_forget_all(ctx);
	}
	return r;
}

KVL_EXPORT int kvl_reclaim_fd(struct kvl_ctx *ctx, short *events)
{
	if (ctx->mode == KVL_MODE_MODULE) {
		*events = POLLPRI;
		return ctx->dev_fd;
	}
	*events = POLLIN;
	return ctx->sock >= 0 ? ctx->sock : -ENOTCONN;
}

KVL_EXPORT int kvl_status(struct kvl_ctx *ctx, struct kvl_status *st)
{
	struct kvp_status_reply sr;
	struct kvpool_status *ls = &sr.ledger;
	int r;

	memset(st, 0, sizeof(*st));
	memset(&sr, 0, sizeof(sr));
	if (ctx->mode == KVL_MODE_MODULE) {
		if (ioctl(ctx->dev_fd, KVPOOL_IOC_STATUS, ls))
			return -errno;
		if (ctx->sock >= 0) {
			struct kvp_status_reply dr;

			r = rpc(ctx, KVP_OP_STATUS, NULL, 0, &dr, sizeof(dr),
				NULL);
			if (r == -ESTALE)
				return r;
			if (!r)
				memcpy(st->backend, dr.backend,
				       sizeof(st->backend));
		}
		/* data epoch: the daemon's (the ledger's owner epoch) */
	} else {
		r = rpc(ctx, KVP_OP_STATUS, NULL, 0, &sr, sizeof(sr), NULL);
		if (r < 0)
			return r;
		memcpy(st->backend, sr.backend, sizeof(st->backend));
	}
	memcpy(st->pool, ls->pool, KVL_NAME_LEN);
	memcpy(st->tenant, ls->tenant, KVL_NAME_LEN);
	st->pool[KVL_NAME_LEN - 1] = st->tenant[KVL_NAME_LEN - 1] = 0;
	st->backend[sizeof(st->backend) - 1] = 0;
	st->lease_id = ls->lease_id;
	st->block_bytes = ls->block_bytes;
	st->capacity = ls->capacity;
	st->backed = ls->backed;
	st->used = ls->used;
	st->held = ls->held;
	st->tenant_max = ls->tenant_max;
	st->tenant_min = ls->tenant_min;
	st->tenant_current = ls->tenant_current;
	st->tenant_peak = ls->tenant_peak;
	st->reclaim_target = ls->reclaim_target;
	st->state = ls->state;
	st->epoch = ctx->mode == KVL_MODE_MODULE && ctx->sock < 0 ?
		    ls->epoch : ctx->epoch;
	st->mode = (uint32_t)ctx->mode;
	st->cached = ctx->ncache;
	st->region_bytes = ctx->region_bytes;
	return 0;
}

KVL_EXPORT int kvl_reclaim_target(struct kvl_ctx *ctx, uint32_t *target)
{
	struct kvl_status st;
	int r = kvl_status(ctx, &st);

	if (r)
		return r;
	*target = st.reclaim_target;
	ctx->reclaim_target = st.reclaim_target;
	return 0;
}

/* ---- layouts and the data plane ------------------------------------------ */

KVL_EXPORT int kvl_layout_declare(struct kvl_ctx *ctx, struct kvl_layout *l)
{
	struct kvp_layout lq = {
		.layers = l->layers, .kv_heads = l->kv_heads,
		.head_dim = l->head_dim, .dtype = l->dtype,
		.rope_base = l->rope_base,
	};
	struct kvp_layout_reply lr;
	struct kvl_layout_slot *s;
	int r;

	if (ctx->sock < 0)
		return -ENOTCONN;
	if (ctx->nlayouts >= KVP_MAX_LAYOUTS)
		return -ENOSPC;
	r = rpc(ctx, KVP_OP_LAYOUT, &lq, sizeof(lq), &lr, sizeof(lr), NULL);
	if (r < 0)
		return r;
	l->tokens_per_block = lr.tokens_per_block;
	l->bytes_per_token = lr.bytes_per_token;
	s = &ctx->layouts[ctx->nlayouts];
	s->l = *l;
	s->id = lr.layout_id;
	return (int)ctx->nlayouts++;
}

static const struct kvl_layout *layout_of(struct kvl_ctx *ctx, int id)
{
	if (id < 0 || (unsigned int)id >= ctx->nlayouts)
		return NULL;
	return &ctx->layouts[id].l;
}

/* Region bump allocator: 64-byte aligned slices. */
struct ralloc {
	uint64_t used;
};

uint64_t kvl_region_put(struct kvl_ctx *ctx, uint64_t *used, const void *src,
			uint64_t bytes)
{
	uint64_t off = *used;

	*used += (bytes + 63) & ~63ULL;
	if (src)
		memcpy(ctx->region + off, src, bytes);
	return off;
}

static uint64_t rput(struct kvl_ctx *ctx, struct ralloc *ra,
		     const void *src, uint64_t bytes)
{
	return kvl_region_put(ctx, &ra->used, src, bytes);
}

static int kv_io(struct kvl_ctx *ctx, int layout, uint32_t layer,
		 uint32_t ntok, const uint32_t *blocks, const uint32_t *slots,
		 float *k, float *v, bool write, uint32_t flags)
{
	const struct kvl_layout *l = layout_of(ctx, layout);
	uint64_t row, per, max_tok;
	uint32_t done = 0;

	if (!l || !ntok)
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	row = (uint64_t)l->kv_heads * l->head_dim * sizeof(float);
	per = 2 * 64 + 2 * row + 8;
	max_tok = (ctx->region_bytes - 4 * 64) / per;
	if (max_tok > 65536)
		max_tok = 65536;
	if (!max_tok)
		return -E2BIG;
	while (done < ntok) {
		uint32_t n = ntok - done > max_tok ? (uint32_t)max_tok :
			     ntok - done;
		struct ralloc ra = { 0 };
		struct kvp_kv q;
		int r;

		memset(&q, 0, sizeof(q));
		q.layout_id = ctx->layouts[layout].id;
		q.layer = layer;
		q.ntok = n;
		q.flags = flags;
		q.off_blocks = rput(ctx, &ra, blocks + done, n * 4ULL);
		q.off_slots = rput(ctx, &ra, slots + done, n * 4ULL);
		if (write) {
			q.off_k = rput(ctx, &ra, k + done * row / 4, n * row);
			q.off_v = rput(ctx, &ra, v + done * row / 4, n * row);
		} else {
			q.off_k = k ? rput(ctx, &ra, NULL, n * row) :
				  KVP_OFF_NONE;
			q.off_v = v ? rput(ctx, &ra, NULL, n * row) :
				  KVP_OFF_NONE;
		}
		r = rpc(ctx, write ? KVP_OP_WRITE_KV : KVP_OP_READ_KV, &q,
			sizeof(q), NULL, 0, NULL);
		if (r < 0)
			return r;
		if (!write) {
			if (k)
				memcpy(k + done * row / 4,
				       ctx->region + q.off_k, n * row);
			if (v)
				memcpy(v + done * row / 4,
				       ctx->region + q.off_v, n * row);
		}
		done += n;
	}
	return 0;
}

KVL_EXPORT int kvl_write_kv(struct kvl_ctx *ctx, int layout, uint32_t layer,
			    uint32_t ntok, const uint32_t *blocks,
			    const uint32_t *slots, const float *k,
			    const float *v)
{
	return kv_io(ctx, layout, layer, ntok, blocks, slots, (float *)k,
		     (float *)v, true, 0);
}

int kvl_write_kv_flags(struct kvl_ctx *ctx, int layout, uint32_t layer,
		       uint32_t ntok, const uint32_t *blocks,
		       const uint32_t *slots, const float *k, const float *v,
		       uint32_t flags)
{
	return kv_io(ctx, layout, layer, ntok, blocks, slots, (float *)k,
		     (float *)v, true, flags);
}

KVL_EXPORT int kvl_read_kv(struct kvl_ctx *ctx, int layout, uint32_t layer,
			   uint32_t ntok, const uint32_t *blocks,
			   const uint32_t *slots, float *k, float *v)
{
	return kv_io(ctx, layout, layer, ntok, blocks, slots, k, v, false, 0);
}

KVL_EXPORT int kvl_attention(struct kvl_ctx *ctx, int layout,
			     const struct kvl_attn_args *a)
{
	const struct kvl_layout *l = layout_of(ctx, layout);
	uint64_t qrow, per, max_b;
	uint32_t done = 0, nq;

	if (!l || !a->batch || !a->q_heads || !a->max_blocks_per_seq ||
	    a->reserved[0] || a->reserved[1])
		return -EINVAL;
	if (ctx->sock < 0)
		return -ENOTCONN;
	nq = a->n_new ? a->n_new : 1;
	qrow = (uint64_t)nq * a->q_heads * l->head_dim * sizeof(float);
	per = 2 * qrow + (uint64_t)a->max_blocks_per_seq * 4 + 4;
	max_b = (ctx->region_bytes - 4 * 64) / per;
	if (max_b > 4096)
		max_b = 4096;
	if (!max_b)
		return -E2BIG;
	while (done < a->batch) {
		uint32_t n = a->batch - done > max_b ? (uint32_t)max_b :
			     a->batch - done;
		struct ralloc ra = { 0 };
		struct kvp_attn q;
		int r;

		memset(&q, 0, sizeof(q));
		q.layout_id = ctx->layouts[layout].id;
		q.layer = a->layer;
		q.batch = n;
		q.q_heads = a->q_heads;
		q.max_blocks_per_seq = a->max_blocks_per_seq;
		q.n_new = a->n_new;
		q.scale = a->scale;
		q.off_q = rput(ctx, &ra, (const uint8_t *)a->q + done * qrow,
			       n * qrow);
		q.off_tables = rput(ctx, &ra, a->block_tables +
				    (uint64_t)done * a->max_blocks_per_seq,
				    (uint64_t)n * a->max_blocks_per_seq * 4);
		q.off_ctx = rput(ctx, &ra, a->ctx_lens + done, n * 4ULL);
		q.off_out = rput(ctx, &ra, NULL, n * qrow);
		r = rpc(ctx, KVP_OP_ATTN, &q, sizeof(q), NULL, 0, NULL);
		if (r < 0)
			return r;
		memcpy((uint8_t *)a->out + done * qrow, ctx->region + q.off_out,
		       n * qrow);
		done += n;
	}
	return 0;
}

KVL_EXPORT int kvl_copy_blocks(struct kvl_ctx *ctx, const uint32_t *src,
			       const uint32_t *dst, uint32_t n)
{
	uint32_t done = 0;

	if (!n)
		return 0;
	if (ctx->sock < 0)
		return -ENOTCONN;
	while (done < n) {
		uint32_t k = n - done > KVP_IO_MAX_BLOCKS ? KVP_IO_MAX_BLOCKS :
			     n - done;
		struct ralloc ra = { 0 };
		struct kvp_copy q;
		int r;

		memset(&q, 0, sizeof(q));
		q.n = k;
		q.off_src = rput(ctx, &ra, src + done, k * 4ULL);
		q.off_dst = rput(ctx, &ra, dst + done, k * 4ULL);
		r = rpc(ctx, KVP_OP_COPY, &q, sizeof(q), NULL, 0, NULL);
		if (r < 0)
			return r;
		done += k;
	}
	return 0;
}
