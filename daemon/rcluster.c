// SPDX-License-Identifier: MIT
/*
 * rcluster.c - Redis Cluster routing on hiredis: slots, the slot map,
 * MOVED/ASK, pipelined calls with a deadline, reconnects with back-off.
 * See rcluster.h; the specification is the Redis Cluster specification
 * (redis.io, "Redis cluster specification"): key distribution model,
 * hash tags, MOVED and ASK redirections, CLUSTER SLOTS.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "rcluster.h"

#define NO_NODE		0xff
#define ASK_MARK	0x80000000U	/* fifo entry: the reply of an ASKING */

struct rc_node {
	char host[64];
	int port;
	bool seed;
	redisContext *ctx;		/* NULL: not connected */
	bool connecting;		/* non-blocking connect in progress */
	uint64_t connect_until;
	uint64_t down_until;		/* back-off: no connect before */
	uint32_t backoff_ms;
	/* the commands whose replies this connection owes, in order */
	uint32_t *fifo;
	uint32_t fifo_head, fifo_n, fifo_cap;
};

struct rc_cluster {
	struct rc_opts o;
	struct rc_node nodes[RC_MAX_NODES];
	unsigned int nnodes;
	uint8_t slot_node[RC_SLOTS];
	unsigned int nmasters, ncovered;
	bool refresh_due;
	struct rc_stats st;
};

enum { ST_TODO, ST_SENT, ST_DONE };

struct cmd_state {
	uint8_t state;
	uint8_t ask;			/* node to ASK, or NO_NODE */
	uint8_t force;			/* node forced by the caller, or NO_NODE */
};

uint64_t rc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- slots ---------------------------------------------------------------- */

uint16_t rc_crc16(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint16_t crc = 0;
	size_t i;
	int b;

	for (i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) :
					       (uint16_t)(crc << 1);
	}
	return crc;
}

uint16_t rc_slot(const void *key, size_t len)
{
	const char *k = key;
	size_t s, e;

	for (s = 0; s < len && k[s] != '{'; s++)
		;
	if (s < len) {
		for (e = s + 1; e < len && k[e] != '}'; e++)
			;
		/* "{...}" with something inside: only that is hashed */
		if (e < len && e > s + 1)
			return rc_crc16(k + s + 1, e - s - 1) & (RC_SLOTS - 1);
	}
	return rc_crc16(k, len) & (RC_SLOTS - 1);
}

/* ---- nodes ------------------------------------------------------------------ */

static int node_find(struct rc_cluster *c, const char *host, size_t hl,
		     int port, bool add)
{
	unsigned int i;

	if (hl >= sizeof(c->nodes[0].host))
		return -EINVAL;
	for (i = 0; i < c->nnodes; i++)
		if (c->nodes[i].port == port &&
		    strlen(c->nodes[i].host) == hl &&
		    !memcmp(c->nodes[i].host, host, hl))
			return (int)i;
	if (!add)
		return -ENOENT;
	if (c->nnodes >= RC_MAX_NODES)
		return -ENOSPC;
	i = c->nnodes++;
	memset(&c->nodes[i], 0, sizeof(c->nodes[i]));
	memcpy(c->nodes[i].host, host, hl);
	c->nodes[i].host[hl] = 0;
	c->nodes[i].port = port;
	return (int)i;
}

/* "HOST:PORT" (the last ':' splits; an empty HOST is @dflt's). */
static int node_parse(struct rc_cluster *c, const char *s, size_t len,
		      const char *dflt, bool add)
{
	const char *colon = NULL;
	char num[8];
	size_t i;
	long port;
	char *end;

	for (i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon || (size_t)(s + len - colon - 1) >= sizeof(num) ||
	    colon == s + len - 1)
		return -EINVAL;
	memcpy(num, colon + 1, (size_t)(s + len - colon - 1));
	num[s + len - colon - 1] = 0;
	port = strtol(num, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return -EINVAL;
	if (colon == s) {
		if (!dflt)
			return -EINVAL;
		return node_find(c, dflt, strlen(dflt), (int)port, add);
	}
	return node_find(c, s, (size_t)(colon - s), (int)port, add);
}

static void fifo_clear(struct rc_node *n)
{
	n->fifo_head = n->fifo_n = 0;
}

static int fifo_push(struct rc_node *n, uint32_t v)
{
	if (n->fifo_head + n->fifo_n == n->fifo_cap) {
		uint32_t cap = n->fifo_cap ? n->fifo_cap * 2 : 64;
		uint32_t *f;

		if (n->fifo_head) {
			memmove(n->fifo, n->fifo + n->fifo_head,
				n->fifo_n * sizeof(*n->fifo));
			n->fifo_head = 0;
		}
		if (n->fifo_n == n->fifo_cap) {
			f = realloc(n->fifo, cap * sizeof(*f));
			if (!f)
				return -ENOMEM;
			n->fifo = f;
			n->fifo_cap = cap;
		}
	}
	n->fifo[n->fifo_head + n->fifo_n++] = v;
	return 0;
}

static void node_disconnect(struct rc_node *n)
{
	if (n->ctx)
		redisFree(n->ctx);
	n->ctx = NULL;
	n->connecting = false;
}

/* The node failed: close it, no connection before its back-off ends. */
static void node_down(struct rc_cluster *c, struct rc_node *n, uint64_t now)
{
	node_disconnect(n);
	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : c->o.backoff_min_ms;
	if (n->backoff_ms > c->o.backoff_max_ms)
		n->backoff_ms = c->o.backoff_max_ms;
	n->down_until = now + (uint64_t)n->backoff_ms * 1000000ULL;
	c->refresh_due = true;
}

/* Start a connection (non-blocking): 0, or -EHOSTUNREACH (in back-off or
 * refused at once). */
static int node_connect(struct rc_cluster *c, struct rc_node *n, uint64_t now)
{
	if (n->ctx)
		return 0;
	if (n->down_until > now)
		return -EHOSTUNREACH;
	c->st.connects++;
	n->ctx = redisConnectNonBlock(n->host, n->port);
	if (!n->ctx || n->ctx->err) {
		c->st.connect_errors++;
		node_down(c, n, now);
		return -EHOSTUNREACH;
	}
	n->connecting = true;
	n->connect_until = now + (uint64_t)c->o.connect_timeout_ms * 1000000ULL;
	return 0;
}

/* ---- options ------------------------------------------------------------------ */

int rc_open(const struct rc_opts *o, struct rc_cluster **out)
{
	struct rc_cluster *c;
	const char *p, *e;
	int r;

	if (!o->seeds || !o->seeds[0])
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	c->o.seeds = NULL;
	if (!c->o.connect_timeout_ms)
		c->o.connect_timeout_ms = 1000;
	if (!c->o.backoff_min_ms)
		c->o.backoff_min_ms = 100;
	if (!c->o.backoff_max_ms)
		c->o.backoff_max_ms = 5000;
	if (c->o.backoff_max_ms < c->o.backoff_min_ms)
		c->o.backoff_max_ms = c->o.backoff_min_ms;
	if (!c->o.max_redirects)
		c->o.max_redirects = 5;
	memset(c->slot_node, NO_NODE, sizeof(c->slot_node));
	for (p = o->seeds;; p = e + 1) {
		e = strchr(p, ',');
		if (!e)
			e = p + strlen(p);
		r = node_parse(c, p, (size_t)(e - p), NULL, true);
		if (r < 0) {
			rc_close(c);
			return r == -ENOSPC ? -E2BIG : -EINVAL;
		}
		c->nodes[r].seed = true;
		if (!*e)
			break;
	}
	c->refresh_due = true;
	*out = c;
	return 0;
}

void rc_close(struct rc_cluster *c)
{
	unsigned int i;

	if (!c)
		return;
	for (i = 0; i < c->nnodes; i++) {
		node_disconnect(&c->nodes[i]);
		free(c->nodes[i].fifo);
	}
	free(c);
}

/* ---- one pipelined round ------------------------------------------------------- */

/* The node a command goes to, or NO_NODE. */
static uint8_t route(struct rc_cluster *c, const struct rc_cmd *cmd,
		     const struct cmd_state *s, uint64_t now)
{
	unsigned int i;

	if (s->force != NO_NODE)
		return s->force;
	if (s->ask != NO_NODE)
		return s->ask;
	if (cmd->key >= 0) {
		uint16_t slot = rc_slot(cmd->argv[cmd->key],
					cmd->argvlen[cmd->key]);

		if (c->slot_node[slot] != NO_NODE)
			return c->slot_node[slot];
	}
	/* No map for it (or any node will do): a node that is up, those in
	 * the map first; a wrong one answers MOVED. */
	for (i = 0; i < c->nnodes; i++)
		if (c->nodes[i].ctx && !c->nodes[i].connecting)
			return (uint8_t)i;
	for (i = 0; i < c->nnodes; i++)
		if (c->nodes[i].down_until <= now)
			return (uint8_t)i;
	return NO_NODE;
}

static bool err_is(const struct redisReply *r, const char *word)
{
	size_t n = strlen(word);

	return r->len >= n && !memcmp(r->str, word, n) &&
	       (r->len == n || r->str[n] == ' ');
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the slot and the node. */
static int parse_redirect(struct rc_cluster *c, const struct redisReply *r,
			  const struct rc_node *from, uint16_t *slot)
{
	const char *p = memchr(r->str, ' ', r->len), *q;
	char *end;
	unsigned long s;

	if (!p)
		return -EPROTO;
	s = strtoul(p + 1, &end, 10);
	if (end == p + 1 || *end != ' ' || s >= RC_SLOTS)
		return -EPROTO;
	q = end + 1;
	*slot = (uint16_t)s;
	return node_parse(c, q, r->len - (size_t)(q - r->str), from->host,
			  true);
}

static void finish(struct rc_cmd *cmd, struct cmd_state *s, int err,
		   redisReply *reply)
{
	cmd->err = err;
	cmd->reply = reply;
	s->state = ST_DONE;
}

static void on_reply(struct rc_cluster *c, unsigned int ni, redisReply *r,
		     struct rc_cmd *cmds, struct cmd_state *ss, size_t n)
{
	struct rc_node *node = &c->nodes[ni];
	uint32_t v = node->fifo[node->fifo_head];
	struct rc_cmd *cmd;
	struct cmd_state *s;
	uint16_t slot;
	int to;

	node->fifo_head++;
	node->fifo_n--;
	node->backoff_ms = 0;
	if (v & ASK_MARK || v >= n) {
		freeReplyObject(r);	/* ASKING's +OK */
		return;
	}
	cmd = &cmds[v];
	s = &ss[v];
	if (r->type != REDIS_REPLY_ERROR) {
		finish(cmd, s, 0, r);
		return;
	}
	if (err_is(r, "MOVED") || err_is(r, "ASK")) {
		bool moved = err_is(r, "MOVED");

		to = parse_redirect(c, r, node, &slot);
		freeReplyObject(r);
		if (to < 0) {
			finish(cmd, s, to == -ENOSPC ? -EHOSTUNREACH : -EPROTO,
			       NULL);
			return;
		}
		if (++cmd->redirects > c->o.max_redirects) {
			finish(cmd, s, -ELOOP, NULL);
			return;
		}
		if (moved) {
			c->st.moved++;
			c->slot_node[slot] = (uint8_t)to;
			c->refresh_due = true;
			s->ask = NO_NODE;
		} else {
			c->st.ask++;
			s->ask = (uint8_t)to;
		}
		s->force = NO_NODE;
		s->state = ST_TODO;
		return;
	}
	if (err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN") ||
	    err_is(r, "LOADING") || err_is(r, "MASTERDOWN")) {
		freeReplyObject(r);
		c->refresh_due = true;
		finish(cmd, s, -EAGAIN, NULL);
		return;
	}
	finish(cmd, s, 0, r);		/* another error: the caller's */
}

/* The connection failed: what it owed fails, the node backs off. */
static void node_fail(struct rc_cluster *c, unsigned int ni,
		      struct rc_cmd *cmds, struct cmd_state *ss, size_t n,
		      uint64_t now)
{
	struct rc_node *node = &c->nodes[ni];
	uint32_t i;

	for (i = 0; i < node->fifo_n; i++) {
		uint32_t v = node->fifo[node->fifo_head + i];

		if (!(v & ASK_MARK) && v < n && ss[v].state == ST_SENT)
			finish(&cmds[v], &ss[v], -ECONNRESET, NULL);
	}
	fifo_clear(node);
	if (node->connecting)
		c->st.connect_errors++;
	else
		c->st.io_errors++;
	node_down(c, node, now);
}

static int send_cmd(struct rc_cluster *c, unsigned int ni, uint32_t idx,
		    const struct rc_cmd *cmd, bool asking)
{
	struct rc_node *node = &c->nodes[ni];
	static const char *ask_argv[] = { "ASKING" };
	static const size_t ask_len[] = { 6 };

	if (asking) {
		if (redisAppendCommandArgv(node->ctx, 1, ask_argv, ask_len) !=
		    REDIS_OK || fifo_push(node, idx | ASK_MARK))
			return -ENOMEM;
	}
	if (redisAppendCommandArgv(node->ctx, cmd->argc, cmd->argv,
				   cmd->argvlen) != REDIS_OK ||
	    fifo_push(node, idx))
		return -ENOMEM;
	return 0;
}

static int exec_impl(struct rc_cluster *c, struct rc_cmd *cmds, size_t n,
		     uint64_t deadline, uint8_t force)
{
	struct cmd_state *ss = calloc(n ? n : 1, sizeof(*ss));
	struct pollfd pf[RC_MAX_NODES];
	unsigned int pn[RC_MAX_NODES];
	size_t i, done = 0;
	int replies = 0;

	if (!ss) {
		for (i = 0; i < n; i++)
			cmds[i].err = -ENOMEM, cmds[i].reply = NULL;
		return 0;
	}
	c->st.calls++;
	c->st.commands += n;
	for (i = 0; i < n; i++) {
		cmds[i].reply = NULL;
		cmds[i].err = 0;
		cmds[i].redirects = 0;
		ss[i].state = ST_TODO;
		ss[i].ask = NO_NODE;
		ss[i].force = force;
	}
	for (i = 0; i < c->nnodes; i++)
		fifo_clear(&c->nodes[i]);
	for (;;) {
		uint64_t now = rc_now_ns();
		unsigned int np = 0, k;
		size_t sent = 0;
		int ms;

		if (now >= deadline)
			break;
		/* route and append what has no node yet */
		for (i = 0; i < n; i++) {
			uint8_t ni;

			if (ss[i].state == ST_SENT)
				sent++;
			if (ss[i].state != ST_TODO)
				continue;
			ni = route(c, &cmds[i], &ss[i], now);
			if (ni == NO_NODE ||
			    node_connect(c, &c->nodes[ni], now)) {
				/* its slots may have moved (a failover) */
				c->refresh_due = true;
				c->st.unreachable++;
				finish(&cmds[i], &ss[i], -EHOSTUNREACH, NULL);
				continue;
			}
			if (send_cmd(c, ni, (uint32_t)i, &cmds[i],
				     ss[i].ask != NO_NODE)) {
				finish(&cmds[i], &ss[i], -ENOMEM, NULL);
				continue;
			}
			ss[i].state = ST_SENT;
			sent++;
		}
		if (!sent)
			break;
		for (k = 0; k < c->nnodes; k++) {
			struct rc_node *node = &c->nodes[k];

			if (!node->ctx || (!node->fifo_n && !node->connecting))
				continue;
			if (node->connecting && now >= node->connect_until) {
				node_fail(c, k, cmds, ss, n, now);
				continue;
			}
			pf[np].fd = node->ctx->fd;
			pf[np].events = POLLIN;
			if (node->connecting || sdslen(node->ctx->obuf))
				pf[np].events |= POLLOUT;
			pf[np].revents = 0;
			pn[np++] = k;
		}
		if (!np)
			continue;	/* all failed: route again */
		ms = (int)((deadline - now + 999999) / 1000000);
		if (poll(pf, np, ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (k = 0; k < np; k++) {
			struct rc_node *node = &c->nodes[pn[k]];
			unsigned int reads;
			bool rerr = false;
			redisReply *r;
			int wdone;

			if (!pf[k].revents || !node->ctx)
				continue;
			if (node->connecting) {
				int err = 0;
				socklen_t el = sizeof(err);

				if (!(pf[k].revents & (POLLOUT | POLLERR |
						       POLLHUP)))
					continue;
				if (getsockopt(node->ctx->fd, SOL_SOCKET,
					       SO_ERROR, &err, &el) || err) {
					node_fail(c, pn[k], cmds, ss, n, now);
					continue;
				}
				node->connecting = false;
			}
			if ((pf[k].revents & POLLOUT) &&
			    sdslen(node->ctx->obuf) &&
			    redisBufferWrite(node->ctx, &wdone) != REDIS_OK) {
				node_fail(c, pn[k], cmds, ss, n, now);
				continue;
			}
			if (!(pf[k].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			/* read what the socket has (a large value comes in
			 * many reads) before polling again */
			for (reads = 0; reads < 256 && node->fifo_n; reads++) {
				size_t had = node->ctx->reader->len;

				if (redisBufferRead(node->ctx) != REDIS_OK) {
					rerr = true;
					break;
				}
				while (node->fifo_n &&
				       redisGetReplyFromReader(node->ctx,
							(void **)&r) ==
				       REDIS_OK && r)
					on_reply(c, pn[k], r, cmds, ss, n);
				if (node->ctx->reader->len == had)
					break;	/* nothing more for now */
			}
			if (rerr) {
				/* the complete replies it did get are taken */
				while (node->fifo_n &&
				       redisGetReplyFromReader(node->ctx,
							(void **)&r) ==
				       REDIS_OK && r)
					on_reply(c, pn[k], r, cmds, ss, n);
				node_fail(c, pn[k], cmds, ss, n, now);
				continue;
			}
			if (node->ctx->err)
				node_fail(c, pn[k], cmds, ss, n, now);
		}
	}
	/* Past the deadline: what is left times out; a connection that owes
	 * replies is closed (they would answer later commands). */
	for (i = 0; i < n; i++) {
		if (ss[i].state != ST_DONE) {
			c->st.timeouts++;
			finish(&cmds[i], &ss[i], -ETIMEDOUT, NULL);
		}
		if (cmds[i].reply)
			replies++;
		done++;
	}
	for (i = 0; i < c->nnodes; i++) {
		if (c->nodes[i].fifo_n || c->nodes[i].connecting)
			node_disconnect(&c->nodes[i]);
		fifo_clear(&c->nodes[i]);
	}
	free(ss);
	return replies;
}

int rc_exec(struct rc_cluster *c, struct rc_cmd *cmds, size_t n,
	    uint64_t deadline_ns)
{
	return exec_impl(c, cmds, n, deadline_ns, NO_NODE);
}

/* ---- the slot map ----------------------------------------------------------- */

static const redisReply *elem(const redisReply *r, size_t i, int type)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
	    !r->element[i] || r->element[i]->type != type)
		return NULL;
	return r->element[i];
}

/* CLUSTER SLOTS: [[start, end, [host, port, id...], replicas...]...] */
static int apply_slots(struct rc_cluster *c, const redisReply *r,
		       const struct rc_node *from)
{
	uint8_t map[RC_SLOTS];
	bool master[RC_MAX_NODES];
	unsigned int nm = 0, nc = 0;
	size_t i;

	if (r->type != REDIS_REPLY_ARRAY)
		return -EPROTO;
	memset(map, NO_NODE, sizeof(map));
	memset(master, 0, sizeof(master));
	for (i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];
		const redisReply *s = elem(e, 0, REDIS_REPLY_INTEGER);
		const redisReply *t = elem(e, 1, REDIS_REPLY_INTEGER);
		const redisReply *m = elem(e, 2, REDIS_REPLY_ARRAY);
		const redisReply *h, *p;
		long long k;
		int ni;

		if (!s || !t || !m || s->integer < 0 ||
		    t->integer >= RC_SLOTS || s->integer > t->integer)
			return -EPROTO;
		h = elem(m, 0, REDIS_REPLY_STRING);
		p = elem(m, 1, REDIS_REPLY_INTEGER);
		if (!h || !p || p->integer <= 0 || p->integer > 65535)
			return -EPROTO;
		if (!h->len || (h->len == 1 && h->str[0] == '?'))
			ni = node_find(c, from->host, strlen(from->host),
				       (int)p->integer, true);
		else
			ni = node_find(c, h->str, h->len, (int)p->integer,
				       true);
		if (ni < 0)
			return ni == -ENOSPC ? -E2BIG : -EPROTO;
		if (!master[ni]) {
			master[ni] = true;
			nm++;
		}
		for (k = s->integer; k <= t->integer; k++) {
			if (map[k] == NO_NODE)
				nc++;
			map[k] = (uint8_t)ni;
		}
	}
	memcpy(c->slot_node, map, sizeof(map));
	c->nmasters = nm;
	c->ncovered = nc;
	return 0;
}

int rc_refresh(struct rc_cluster *c, uint64_t deadline_ns)
{
	static const char *argv[] = { "CLUSTER", "SLOTS" };
	static const size_t len[] = { 7, 5 };
	struct rc_cmd cmd;
	unsigned int pass, i;
	int r = -EHOSTUNREACH;

	/* nodes of the map (and known to work) first, then every other */
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < c->nnodes; i++) {
			struct rc_node *node = &c->nodes[i];
			uint64_t now = rc_now_ns();

			if (now >= deadline_ns)
				goto out;
			if ((pass == 0) != (node->ctx != NULL) ||
			    node->down_until > now)
				continue;
			memset(&cmd, 0, sizeof(cmd));
			cmd.argc = 2;
			cmd.argv = argv;
			cmd.argvlen = len;
			cmd.key = -1;
			exec_impl(c, &cmd, 1, deadline_ns, (uint8_t)i);
			if (!cmd.reply) {
				r = cmd.err;
				continue;
			}
			r = cmd.reply->type == REDIS_REPLY_ERROR ? -EPROTO :
			    apply_slots(c, cmd.reply, node);
			freeReplyObject(cmd.reply);
			if (!r) {
				c->st.refreshes++;
				/* a map with holes (a cluster being made, a
				 * failover): ask again */
				c->refresh_due = c->ncovered < RC_SLOTS;
				return 0;
			}
		}
	}
out:
	c->st.refresh_errors++;
	return r;
}

bool rc_refresh_due(const struct rc_cluster *c)
{
	return c->refresh_due;
}

unsigned int rc_masters(const struct rc_cluster *c)
{
	return c->nmasters;
}

unsigned int rc_slots_covered(const struct rc_cluster *c)
{
	return c->ncovered;
}

int rc_slot_owner(const struct rc_cluster *c, uint16_t slot, char *host,
		  size_t hostlen, int *port)
{
	const struct rc_node *n;

	if (slot >= RC_SLOTS || c->slot_node[slot] == NO_NODE)
		return -ENOENT;
	n = &c->nodes[c->slot_node[slot]];
	snprintf(host, hostlen, "%s", n->host);
	*port = n->port;
	return 0;
}

void rc_get_stats(const struct rc_cluster *c, struct rc_stats *st)
{
	*st = c->st;
}
