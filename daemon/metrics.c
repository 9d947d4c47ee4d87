// SPDX-License-Identifier: MIT
/*
 * metrics.c - kvpoold's Prometheus endpoint: GET /metrics over HTTP
 * (libmicrohttpd, one internal thread) on the address of --metrics-listen
 * or metrics_listen in kvpoold.conf; off when neither is given.
 *
 * Each scrape takes a fresh snapshot of the top pool, its tenants and,
 * with lower tiers, every tier (its pool and tenants) through the same
 * calls as the admin socket, and writes it with kvp_metrics_write(), the
 * function `kvpoolctl metrics` uses: one set of series, one format.  The
 * endpoint has no authentication, so by default (metrics_scope public) it
 * shows what any local user may see; with metrics_scope operator the
 * snapshot also has the leases, the prefix caches, the tiers' swap
 * counters and the clients' sequences, and the scrape their series.  The socket is bound before the daemon drops root
 * (kvd_metrics_bind), the server starts after (kvd_metrics_start), so its
 * thread runs with the daemon's reduced privileges.
 */
#include <errno.h>
#include <arpa/inet.h>
#ifdef KVD_HAVE_MHD
#include <microhttpd.h>
#endif
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "restart.h"
#include "kvpool_metrics.h"
#include "core.h"
#include "ledger.h"
#include "swap.h"
#include "tenants.h"
#include "metrics.h"
#include "server.h"
#include "prefix.h"
#include "cluster.h"

_Static_assert(KVD_METRICS_PUBLIC == (int)KVP_METRICS_PUBLIC &&
	       KVD_METRICS_OPERATOR == (int)KVP_METRICS_OPERATOR,
	       "kvd_opts.metrics_scope holds enum kvp_metrics_scope");

#define METRICS_MAX_CONNECTIONS	16
#define METRICS_TIMEOUT_S	10
#define METRICS_FIRST_CLIENTS	256

/* The address a socket is bound to, as ADDR:PORT (port 0 picks one). */
static void where(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN], port[8];

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port,
			sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(out, len, "?");
		return;
	}
	snprintf(out, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s",
		 host, port);
}

int kvd_metrics_bind(struct kvd *d)
{
	const char *spec = d->o.metrics_listen;
	struct addrinfo hints, *ai = NULL;
	char host[128];
	const char *colon, *h;
	size_t hl;
	int fd, one = 1, r;

	d->metrics_fd = -1;
	if (!spec || !spec[0])
		return 0;
	colon = strrchr(spec, ':');
	if (!colon || colon == spec)
		return -EINVAL;
	h = spec;
	hl = (size_t)(colon - spec);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return -ENAMETOOLONG;
	memcpy(host, h, hl);
	host[hl] = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r) {
		kvd_log(KVD_ERR, "metrics_listen %s: %s", spec,
			gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 16)) {
		r = -errno;
		close(fd);
		goto out;
	}
	d->metrics_fd = fd;
	where(fd, d->metrics_addr, sizeof(d->metrics_addr));
	r = 0;
out:
	if (r)
		kvd_log(KVD_ERR, "metrics_listen %s: %s", spec, strerror(-r));
	freeaddrinfo(ai);
	return r;
}

#ifdef KVD_HAVE_MHD
enum list_kind { L_TENANTS, L_CLIENTS, L_CLIENT_TIERS };

/* List pool p's tenants or leases, or the clients' tiers, into a buffer
 * that grows until everything fits. */
static void *list_all(struct kvd_pool *p, enum list_kind what, size_t rec,
		      uint32_t *n, int *err)
{
	uint32_t cap = METRICS_FIRST_CLIENTS, total = 0;
	void *buf = NULL;
	int tries, r = 0;

	for (tries = 0; tries < 4; tries++) {
		void *nb = realloc(buf, (size_t)cap * rec);

		if (!nb) {
			r = -ENOMEM;
			break;
		}
		buf = nb;
		switch (what) {
		case L_TENANTS:
			r = kvd_tenant_list(p, buf, cap);
			total = r < 0 ? 0 : (uint32_t)r;
			break;
		case L_CLIENTS:
			r = kvd_fill_client_list(p, buf, 0, cap, &total,
						 (uid_t)-1);
			break;
		case L_CLIENT_TIERS:
			r = kvd_fill_client_tiers(p->d, buf, 0, cap, &total,
						  (uid_t)-1);
			break;
		}
		if (r < 0 || total <= cap)
			break;
		cap = total + 64;	/* more arrived: try again */
	}
	*n = total < cap ? total : cap;
	*err = r < 0 ? r : 0;
	return buf;
}

/* The tiers, when the daemon has lower ones; what was allocated goes to
 * lists (freed by the caller). */
static void tiers_get(struct kvd *d, struct kvp_metrics_tiers *m,
		      struct kvp_tier_rec *tr, void **lists, bool operator)
{
	uint32_t total, k;
	int err;

	memset(m, 0, sizeof(*m));
	if (d->npools < 2)
		return;
	m->ntiers = (uint32_t)kvd_fill_tier_list(d, tr, 0, KVP_MAX_TIERS,
						 &total);
	m->tiers = tr;
	for (k = 1; k < m->ntiers; k++) {
		lists[k] = list_all(&d->pools[k], L_TENANTS,
				    sizeof(struct kvp_tenant_rec),
				    &m->ntenants[k], &err);
		if (err) {
			kvd_log(KVD_WARN, "metrics: tenant list of %s: %s",
				d->pools[k].name, strerror(-err));
			m->ntenants[k] = 0;
		}
		m->tenants[k] = lists[k];
	}
	if (!operator)
		return;		/* no series of one client */
	lists[0] = list_all(d->top, L_CLIENT_TIERS,
			    sizeof(struct kvp_client_tier_rec), &m->nclients,
			    &err);
	if (err)
		m->nclients = 0;
	m->clients = lists[0];
}

/* The prefix caches, through the admin op that lists them (paged). */
static struct kvp_prefix_rec *prefix_all(struct kvd *d, uint32_t *n, int *err)
{
	struct kvp_prefix_rec *out = NULL, *nb;
	struct kvp_list_reply *lr;
	struct kvp_list q;
	uint32_t got = 0;
	size_t rlen;
	char *page;
	int r = 0;

	page = malloc(KVP_MSG_MAX);
	if (!page) {
		*err = -ENOMEM;
		return NULL;
	}
	lr = (struct kvp_list_reply *)page;
	for (;;) {
		memset(&q, 0, sizeof(q));
		q.start = got;
		rlen = 0;
		r = kvd_prefix_admin(d, false, KVP_OP_PREFIX_LIST, &q, sizeof(q),
				     page, &rlen);
		if (r < 0)
			break;
		if (!lr->count)
			break;
		nb = realloc(out, (size_t)(got + lr->count) * sizeof(*out));
		if (!nb) {
			r = -ENOMEM;
			break;
		}
		out = nb;
		memcpy(out + got, lr + 1, (size_t)lr->count * sizeof(*out));
		got += lr->count;
		if (got >= lr->total)
			break;
	}
	free(page);
	*n = r < 0 ? 0 : got;
	*err = r < 0 ? r : 0;
	return out;
}

/* The text of one scrape (malloc'd), or NULL. */
static char *render(struct kvd *d, size_t *len)
{
	struct kvp_tier_rec tr[KVP_MAX_TIERS];
	void *lists[KVP_MAX_TIERS] = { NULL };
	struct kvp_metrics_pool mp;
	struct kvp_metrics_tiers mt;
	enum kvp_metrics_scope scope = d->o.metrics_scope;
	bool operator = scope == KVP_METRICS_OPERATOR;
	struct kvp_tenant_rec *t;
	struct kvp_client_rec *c = NULL;
	struct kvp_prefix_rec *x = NULL;
	char *text = NULL;
	FILE *f;
	int terr, cerr = -EPERM, xerr = -EPERM, r, i;

	memset(&mp, 0, sizeof(mp));
	kvd_ledger_pool_rec(d->top, &mp.pool);
	t = list_all(d->top, L_TENANTS, sizeof(*t), &mp.ntenants, &terr);
	/* The clients and the caches' activity: the operator's scope only. */
	if (operator) {
		c = list_all(d->top, L_CLIENTS, sizeof(*c), &mp.nclients,
			     &cerr);
		x = prefix_all(d, &mp.nprefix, &xerr);
	}
	if (terr) {
		kvd_log(KVD_WARN, "metrics: tenant list: %s", strerror(-terr));
		mp.ntenants = 0;
	}
	mp.tenants = t;
	mp.clients = c;
	mp.have_clients = !cerr && c;
	mp.prefix = x;
	mp.have_prefix = !xerr;
	tiers_get(d, &mt, tr, lists, operator);
	f = open_memstream(&text, len);
	if (f) {
		r = kvp_metrics_write(f, &mp, 1, &mt, scope);
		if (!r) {
			struct kvp_restart_info ri;

			kvd_restart_info(d, &ri);
			r = kvp_metrics_write_restart(f, &ri);
		}
		/* the cluster tier's activity: the operator's */
		if (!r && scope == KVP_METRICS_OPERATOR) {
			struct kvp_cluster_status cs;

			kvd_cluster_status(d, &cs);
			r = kvp_metrics_write_cluster(f, &cs);
		}
		if (fclose(f) || r) {
			free(text);
			text = NULL;
		}
	}
	for (i = 0; i < KVP_MAX_TIERS; i++)
		free(lists[i]);
	free(t);
	free(c);
	free(x);
	return text;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int code,
			     const char *type, char *body, size_t len,
			     enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp;
	enum MHD_Result r;

	resp = MHD_create_response_from_buffer(len, body, mode);
	if (!resp) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
					"GET, HEAD");
	r = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return r;
}

#define TEXT "text/plain; charset=utf-8"
#define STATIC_TEXT(s) (char *)(s), sizeof(s) - 1, MHD_RESPMEM_PERSISTENT

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **req)
{
	struct kvd *d = cls;
	char *text;
	size_t len = 0;

	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, TEXT,
			     STATIC_TEXT("only GET and HEAD\n"));
	if (*upload_size)
		return reply(conn, MHD_HTTP_BAD_REQUEST, TEXT,
			     STATIC_TEXT("no body expected\n"));
	if (!strcmp(url, "/"))
		return reply(conn, MHD_HTTP_OK, TEXT,
			     STATIC_TEXT("kvpoold: the metrics are at "
					 "/metrics\n"));
	if (strcmp(url, "/metrics"))
		return reply(conn, MHD_HTTP_NOT_FOUND, TEXT,
			     STATIC_TEXT("not found: the metrics are at "
					 "/metrics\n"));
	text = render(d, &len);
	if (!text)
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, TEXT,
			     STATIC_TEXT("cannot take a snapshot\n"));
	return reply(conn, MHD_HTTP_OK, KVP_METRICS_CONTENT_TYPE, text, len,
		     MHD_RESPMEM_MUST_FREE);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
	char msg[256];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	kvd_log(KVD_WARN, "metrics: %s", msg);
}

int kvd_metrics_start(struct kvd *d)
{
	struct MHD_Daemon *mhd;

	d->metrics = NULL;
	if (d->metrics_fd < 0)
		return 0;
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
			       MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0,
			       NULL, NULL, on_request, d,
			       MHD_OPTION_EXTERNAL_LOGGER, on_log, d,
			       MHD_OPTION_LISTEN_SOCKET, d->metrics_fd,
			       MHD_OPTION_CONNECTION_LIMIT,
			       (unsigned int)METRICS_MAX_CONNECTIONS,
			       MHD_OPTION_CONNECTION_TIMEOUT,
			       (unsigned int)METRICS_TIMEOUT_S,
			       MHD_OPTION_END);
	if (!mhd) {
		kvd_log(KVD_ERR, "metrics: cannot start the HTTP server on %s",
			d->o.metrics_listen);
		return -EIO;
	}
	d->metrics = mhd;
	kvd_log(KVD_NOTICE, "metrics at http://%s/metrics", d->metrics_addr);
	if (d->o.metrics_scope == KVP_METRICS_OPERATOR)
		kvd_log(KVD_NOTICE, "metrics: operator scope: whoever can "
			"connect to %s sees every client's lease, pid and "
			"activity", d->metrics_addr);
	return 0;
}

void kvd_metrics_stop(struct kvd *d)
{
	if (d->metrics)
		MHD_stop_daemon(d->metrics);	/* closes the socket */
	else if (d->metrics_fd >= 0)
		close(d->metrics_fd);
	d->metrics = NULL;
	d->metrics_fd = -1;
}
#else	/* built without libmicrohttpd: no /metrics endpoint */
int kvd_metrics_start(struct kvd *d)
{
	d->metrics = NULL;
	if (d->metrics_fd < 0)
		return 0;
	kvd_log(KVD_ERR, "metrics: this kvpoold was built without "
		"libmicrohttpd and cannot serve %s", d->o.metrics_listen);
	return -EOPNOTSUPP;
}

void kvd_metrics_stop(struct kvd *d)
{
	if (d->metrics_fd >= 0)
		close(d->metrics_fd);
	d->metrics_fd = -1;
}
#endif
