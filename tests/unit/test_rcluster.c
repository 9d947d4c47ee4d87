// SPDX-License-Identifier: MIT
/*
 * test_rcluster - the Redis Cluster routing of daemon/rcluster.c against
 * the specification: CRC16 and key slots (hash tags included, the values
 * CLUSTER KEYSLOT of redis-server 7.0 gives), and, against scripted cluster
 * nodes on loopback sockets (threads speaking RESP: CLUSTER SLOTS, GET,
 * SET, ASKING, MOVED and ASK replies as a real node gives them), the slot
 * map, MOVED, ASK, a slot moving to another node in the middle of a
 * pipeline, a slow node and the deadline, a node that is gone and the
 * back-off, and error replies.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "rcluster.h"

/* ---- scripted nodes ---------------------------------------------------------- */

#define NNODES		3
#define MAXKV		1024
#define MAXCONN		16

struct fnode {
	int lfd, port;
	pthread_t th;
	int delay_ms;			/* before each reply */
	int served;			/* GET/SET served here */
	const char *fail_with;		/* reply every GET/SET with this error */
	volatile int gone;		/* close the listening socket */
};

static struct {
	pthread_mutex_t mu;
	struct fnode n[NNODES];
	int owner[RC_SLOTS];
	struct { int node; char key[64]; char val[64]; } kv[MAXKV];
	int nkv;
	/* ASK: slot being migrated from owner to migrate_to */
	int migrating, migrate_to;
	/* after flip_after commands on node flip_from, flip_slot moves to
	 * flip_to with its keys */
	int flip_from, flip_after, flip_slot, flip_to;
	volatile int stop;
} F;

static int kv_find(int node, const char *k)
{
	int i;

	for (i = 0; i < F.nkv; i++)
		if (F.kv[i].node == node && !strcmp(F.kv[i].key, k))
			return i;
	return -1;
}

static void kv_put(int node, const char *k, const char *v)
{
	int i = kv_find(node, k);

	if (i < 0) {
		assert_true(F.nkv < MAXKV);
		i = F.nkv++;
		F.kv[i].node = node;
		snprintf(F.kv[i].key, sizeof(F.kv[i].key), "%s", k);
	}
	snprintf(F.kv[i].val, sizeof(F.kv[i].val), "%s", v);
}

static void move_slot(int slot, int to)
{
	int i;

	for (i = 0; i < F.nkv; i++)
		if (rc_slot(F.kv[i].key, strlen(F.kv[i].key)) == slot)
			F.kv[i].node = to;
	F.owner[slot] = to;
}

/* One RESP array of bulk strings from buf: argc, or 0 if incomplete. */
static int parse(char *buf, size_t len, size_t *used, char **argv,
		 size_t *argl, int max)
{
	char *p = buf, *e = buf + len, *nl;
	long n, i, l;

	if (len < 4 || *p != '*')
		return 0;
	nl = memchr(p, '\n', (size_t)(e - p));
	if (!nl)
		return 0;
	n = strtol(p + 1, NULL, 10);
	p = nl + 1;
	if (n <= 0 || n > max)
		return -1;
	for (i = 0; i < n; i++) {
		if (p >= e || *p != '$')
			return 0;
		nl = memchr(p, '\n', (size_t)(e - p));
		if (!nl)
			return 0;
		l = strtol(p + 1, NULL, 10);
		p = nl + 1;
		if (e - p < l + 2)
			return 0;
		argv[i] = p;
		argl[i] = (size_t)l;
		p[l] = 0;		/* overwrites the \r */
		p += l + 2;
	}
	*used = (size_t)(p - buf);
	return (int)n;
}

static void out(char *o, size_t *ol, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	*ol += (size_t)vsnprintf(o + *ol, 65536 - *ol, fmt, ap);
	va_end(ap);
}

static void redirect(char *o, size_t *ol, const char *kind, int slot, int to)
{
	out(o, ol, "-%s %d 127.0.0.1:%d\r\n", kind, slot, F.n[to].port);
}

/* Serve one command of node @me. */
static void serve(int me, int *asking, char **argv, size_t *argl, int argc,
		  char *o, size_t *ol)
{
	struct fnode *n = &F.n[me];
	int slot, i;

	if (argc == 2 && !strcasecmp(argv[0], "CLUSTER") &&
	    !strcasecmp(argv[1], "SLOTS")) {
		int runs = 0, s, start;
		char body[8192];
		size_t bl = 0;

		for (s = 0; s < RC_SLOTS; s = i) {
			start = s;
			for (i = s; i < RC_SLOTS && F.owner[i] == F.owner[s];
			     i++)
				;
			bl += (size_t)snprintf(body + bl, sizeof(body) - bl,
				"*3\r\n:%d\r\n:%d\r\n*3\r\n$9\r\n127.0.0.1\r\n"
				":%d\r\n$4\r\nid%02d\r\n", start, i - 1,
				F.n[F.owner[s]].port, F.owner[s]);
			runs++;
		}
		out(o, ol, "*%d\r\n%.*s", runs, (int)bl, body);
		return;
	}
	if (argc == 1 && !strcasecmp(argv[0], "ASKING")) {
		*asking = 1;
		out(o, ol, "+OK\r\n");
		return;
	}
	if (argc < 2 || (strcasecmp(argv[0], "GET") &&
			 strcasecmp(argv[0], "SET"))) {
		out(o, ol, "-ERR unknown command\r\n");
		return;
	}
	slot = rc_slot(argv[1], argl[1]);
	if (F.owner[slot] != me) {
		if (!(*asking && F.migrating == slot && F.migrate_to == me)) {
			redirect(o, ol, "MOVED", slot, F.owner[slot]);
			*asking = 0;
			return;
		}
	} else if (F.migrating == slot && kv_find(me, argv[1]) < 0) {
		redirect(o, ol, "ASK", slot, F.migrate_to);
		*asking = 0;
		return;
	}
	*asking = 0;
	n->served++;
	if (n->fail_with) {
		out(o, ol, "-%s\r\n", n->fail_with);
	} else if (!strcasecmp(argv[0], "SET") && argc == 3) {
		kv_put(me, argv[1], argv[2]);
		out(o, ol, "+OK\r\n");
	} else {
		i = kv_find(me, argv[1]);
		if (i < 0)
			out(o, ol, "$-1\r\n");
		else
			out(o, ol, "$%zu\r\n%s\r\n", strlen(F.kv[i].val),
			    F.kv[i].val);
	}
	if (F.flip_from == me && n->served == F.flip_after)
		move_slot(F.flip_slot, F.flip_to);
}

static void *node_main(void *arg)
{
	int me = (int)(intptr_t)arg;
	struct fnode *n = &F.n[me];
	struct { int fd, asking; char buf[65536]; size_t len; } *cs;
	int nc = 0, i;

	cs = calloc(MAXCONN, sizeof(*cs));
	while (!F.stop) {
		struct pollfd pf[MAXCONN + 1];

		if (n->gone && n->lfd >= 0) {
			close(n->lfd);
			n->lfd = -1;
		}

		pf[0].fd = n->lfd;
		pf[0].events = POLLIN;
		for (i = 0; i < nc; i++) {
			pf[i + 1].fd = cs[i].fd;
			pf[i + 1].events = POLLIN;
		}
		if (poll(pf, (nfds_t)nc + 1, 20) <= 0)
			continue;
		if ((pf[0].revents & POLLIN) && nc < MAXCONN) {
			int fd = accept(n->lfd, NULL, NULL);

			if (fd >= 0) {
				memset(&cs[nc], 0, sizeof(cs[nc]));
				cs[nc++].fd = fd;
			}
		}
		for (i = 0; i < nc; i++) {
			char *argv[8], o[65536];
			size_t argl[8], used, ol = 0;
			ssize_t r;
			int argc;

			if (!(pf[i + 1].revents & (POLLIN | POLLHUP)))
				continue;
			r = read(cs[i].fd, cs[i].buf + cs[i].len,
				 sizeof(cs[i].buf) - cs[i].len);
			if (r <= 0) {
				close(cs[i].fd);
				cs[i] = cs[--nc];
				pf[i + 1] = pf[nc + 1];
				i--;
				continue;
			}
			cs[i].len += (size_t)r;
			if (n->delay_ms)
				usleep((useconds_t)n->delay_ms * 1000);
			pthread_mutex_lock(&F.mu);
			while ((argc = parse(cs[i].buf, cs[i].len, &used,
					     argv, argl, 8)) > 0) {
				serve(me, &cs[i].asking, argv, argl, argc, o,
				      &ol);
				memmove(cs[i].buf, cs[i].buf + used,
					cs[i].len - used);
				cs[i].len -= used;
			}
			pthread_mutex_unlock(&F.mu);
			if (ol && write(cs[i].fd, o, ol) != (ssize_t)ol) {
				/* the client went away */
			}
		}
	}
	for (i = 0; i < nc; i++)
		close(cs[i].fd);
	free(cs);
	return NULL;
}

static int listen_any(int *port)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 64), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* Three nodes, the slots in three ranges, keys k0..k299 at their owners. */
static int setup(void **state)
{
	int i;

	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.mu, NULL);
	F.migrating = F.migrate_to = -1;
	F.flip_from = -1;
	for (i = 0; i < RC_SLOTS; i++)
		F.owner[i] = i < 5461 ? 0 : i < 10923 ? 1 : 2;
	for (i = 0; i < 300; i++) {
		char k[32], v[32];

		snprintf(k, sizeof(k), "k%d", i);
		snprintf(v, sizeof(v), "v%d", i);
		kv_put(F.owner[rc_slot(k, strlen(k))], k, v);
	}
	for (i = 0; i < NNODES; i++) {
		F.n[i].lfd = listen_any(&F.n[i].port);
		pthread_create(&F.n[i].th, NULL, node_main,
			       (void *)(intptr_t)i);
	}
	*state = NULL;
	return 0;
}

static int teardown(void **state)
{
	int i;

	F.stop = 1;
	for (i = 0; i < NNODES; i++) {
		pthread_join(F.n[i].th, NULL);
		if (F.n[i].lfd >= 0)
			close(F.n[i].lfd);
	}
	return 0;
}

static struct rc_cluster *client(int seed)
{
	struct rc_opts o;
	struct rc_cluster *c;
	char seeds[64];

	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", F.n[seed].port);
	memset(&o, 0, sizeof(o));
	o.seeds = seeds;
	o.backoff_min_ms = 300;
	assert_int_equal(rc_open(&o, &c), 0);
	return c;
}

/* GET of keys[0..n): replies checked against want[] ("" = nil). */
struct gets {
	char keys[512][32];
	const char *argv[512][2];
	size_t len[512][2];
	struct rc_cmd cmds[512];
	size_t n;
};

static void gets_add(struct gets *g, const char *key)
{
	size_t i = g->n++;

	snprintf(g->keys[i], sizeof(g->keys[i]), "%s", key);
	g->argv[i][0] = "GET";
	g->argv[i][1] = g->keys[i];
	g->len[i][0] = 3;
	g->len[i][1] = strlen(g->keys[i]);
	memset(&g->cmds[i], 0, sizeof(g->cmds[i]));
	g->cmds[i].argc = 2;
	g->cmds[i].argv = g->argv[i];
	g->cmds[i].argvlen = g->len[i];
	g->cmds[i].key = 1;
}

static void gets_free(struct gets *g)
{
	size_t i;

	for (i = 0; i < g->n; i++)
		if (g->cmds[i].reply)
			freeReplyObject(g->cmds[i].reply);
}

/* Every reply is the value v<N> of key k<N> (or {tag}k<N>). */
static void expect_values(struct gets *g)
{
	size_t i;

	for (i = 0; i < g->n; i++) {
		const char *k = strrchr(g->keys[i], 'k');
		redisReply *r = g->cmds[i].reply;
		char want[32];

		snprintf(want, sizeof(want), "v%s", k + 1);
		assert_int_equal(g->cmds[i].err, 0);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_STRING);
		assert_string_equal(r->str, want);
	}
}

static uint64_t in_ms(uint64_t ms)
{
	return rc_now_ns() + ms * 1000000ULL;
}

/* ---- the tests ------------------------------------------------------------------ */

static void test_crc16_and_slots(void **state)
{
	static const struct { const char *k; unsigned int slot; } v[] = {
		{ "123456789", 12739 }, { "foo", 12182 }, { "bar", 5061 },
		{ "hello", 866 }, { "{user1000}.following", 3443 },
		{ "user1000", 3443 }, { "foo{}{bar}", 8363 },
		{ "foo{{bar}}zap", 4015 }, { "{bar", 4015 },
		{ "foo{bar}{zap}", 5061 }, { "{}", 15257 },
	};
	size_t i;

	/* the specification's test vector */
	assert_int_equal(rc_crc16("123456789", 9), 0x31c3);
	assert_int_equal(rc_crc16("", 0), 0);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		assert_int_equal(rc_slot(v[i].k, strlen(v[i].k)), v[i].slot);
	/* a tag routes keys together, whatever follows */
	assert_int_equal(rc_slot("{s}a", 4), rc_slot("{s}bcdef", 8));
	assert_int_equal(rc_slot("x{s}", 4), rc_slot("s", 1));
}

static void test_bad_seeds(void **state)
{
	struct rc_opts o;
	struct rc_cluster *c;
	static const char *bad[] = { "", "host", "host:", "host:0",
				     "host:70000", "a:1,", ":6379",
				     "h:12x" };
	size_t i;

	memset(&o, 0, sizeof(o));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.seeds = bad[i];
		assert_int_equal(rc_open(&o, &c), -EINVAL);
	}
	o.seeds = "127.0.0.1:1,[::1]:2,localhost:6379";
	assert_int_equal(rc_open(&o, &c), 0);
	rc_close(c);
}

static void test_slot_map(void **state)
{
	struct rc_cluster *c = client(1);
	struct gets *g = calloc(1, sizeof(*g));
	struct rc_stats st;
	char host[64];
	int port, i;

	assert_true(rc_refresh_due(c));
	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	assert_false(rc_refresh_due(c));
	assert_int_equal(rc_masters(c), 3);
	assert_int_equal(rc_slots_covered(c), RC_SLOTS);
	assert_int_equal(rc_slot_owner(c, 0, host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, F.n[0].port);
	assert_int_equal(rc_slot_owner(c, 16383, host, sizeof(host), &port), 0);
	assert_int_equal(port, F.n[2].port);
	for (i = 0; i < 300; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 300);
	expect_values(g);
	rc_get_stats(c, &st);
	assert_int_equal(st.moved, 0);
	assert_int_equal(st.ask, 0);
	/* one pipelined round: one connection per node */
	assert_int_equal(st.connects, 3);
	gets_free(g);
	free(g);
	rc_close(c);
}

/* No map at all: the seed answers MOVED and the command follows it. */
static void test_moved_without_map(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	struct rc_stats st;
	int i;

	for (i = 0; i < 300; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 300);
	expect_values(g);
	rc_get_stats(c, &st);
	assert_true(st.moved > 0);
	assert_true(rc_refresh_due(c));
	gets_free(g);
	/* the slots it learnt need no redirection the second time */
	g->n = 0;
	for (i = 0; i < 300; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 300);
	expect_values(g);
	{
		struct rc_stats st2;

		rc_get_stats(c, &st2);
		assert_int_equal(st2.moved, st.moved);
	}
	gets_free(g);
	free(g);
	rc_close(c);
}

/* A slot moves after the map was read: MOVED, the new owner remembered. */
static void test_moved(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	uint16_t slot = rc_slot("k7", 2);
	int from, to, port, i;
	struct rc_stats st;
	char host[64];

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	pthread_mutex_lock(&F.mu);
	from = F.owner[slot];
	to = (from + 1) % NNODES;
	move_slot(slot, to);
	pthread_mutex_unlock(&F.mu);
	for (i = 0; i < 20; i++)
		gets_add(g, "k7");
	gets_add(g, "k8");
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 21);
	expect_values(g);
	rc_get_stats(c, &st);
	assert_int_equal(st.moved, 20);
	assert_int_equal(g->cmds[0].redirects, 1);
	assert_int_equal(rc_slot_owner(c, slot, host, sizeof(host), &port), 0);
	assert_int_equal(port, F.n[to].port);
	assert_true(rc_refresh_due(c));
	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	assert_int_equal(rc_slot_owner(c, slot, host, sizeof(host), &port), 0);
	assert_int_equal(port, F.n[to].port);
	gets_free(g);
	free(g);
	rc_close(c);
}

/* A slot being migrated: keys already moved are asked for with ASKING at
 * the target; the map does not change. */
static void test_ask(void **state)
{
	struct rc_cluster *c = client(2);
	struct gets *g = calloc(1, sizeof(*g));
	char k[8][32], host[64];
	int from, to, port, i;
	uint16_t slot;
	struct rc_stats st;

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	slot = rc_slot("{m}k0", 5);
	pthread_mutex_lock(&F.mu);
	from = F.owner[slot];
	to = (from + 2) % NNODES;
	for (i = 0; i < 8; i++) {
		char v[32];

		snprintf(k[i], sizeof(k[i]), "{m}k%d", 500 + i);
		snprintf(v, sizeof(v), "v%d", 500 + i);
		/* half already at the target */
		kv_put(i % 2 ? to : from, k[i], v);
	}
	F.migrating = slot;
	F.migrate_to = to;
	pthread_mutex_unlock(&F.mu);
	for (i = 0; i < 8; i++)
		gets_add(g, k[i]);
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 8);
	expect_values(g);
	rc_get_stats(c, &st);
	assert_int_equal(st.ask, 4);
	assert_int_equal(st.moved, 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(g->cmds[i].redirects, (unsigned int)(i % 2));
	assert_int_equal(rc_slot_owner(c, slot, host, sizeof(host), &port), 0);
	assert_int_equal(port, F.n[from].port);
	pthread_mutex_lock(&F.mu);
	F.migrating = F.migrate_to = -1;
	pthread_mutex_unlock(&F.mu);
	gets_free(g);
	free(g);
	rc_close(c);
}

/* The slot changes owner while a pipeline for it is being served: the
 * first commands are answered by the old owner, the rest are MOVED and
 * follow to the new one, in the same call. */
static void test_map_change_mid_pipeline(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	uint16_t slot = rc_slot("{p}k0", 5);
	struct rc_stats st;
	int from, i, served0;

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	pthread_mutex_lock(&F.mu);
	from = F.owner[slot];
	for (i = 0; i < 200; i++) {
		char k[32], v[32];

		snprintf(k, sizeof(k), "{p}k%d", 1000 + i);
		snprintf(v, sizeof(v), "v%d", 1000 + i);
		kv_put(from, k, v);
	}
	served0 = F.n[from].served;
	F.flip_from = from;
	F.flip_after = served0 + 50;
	F.flip_slot = slot;
	F.flip_to = (from + 1) % NNODES;
	pthread_mutex_unlock(&F.mu);
	for (i = 0; i < 200; i++) {
		char k[32];

		snprintf(k, sizeof(k), "{p}k%d", 1000 + i);
		gets_add(g, k);
	}
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(3000)), 200);
	expect_values(g);
	rc_get_stats(c, &st);
	assert_int_equal(st.moved, 150);
	for (i = 0; i < 200; i++)
		assert_int_equal(g->cmds[i].redirects, i < 50 ? 0 : 1);
	pthread_mutex_lock(&F.mu);
	F.flip_from = -1;
	pthread_mutex_unlock(&F.mu);
	gets_free(g);
	free(g);
	rc_close(c);
}

/* A slow node: its commands time out at the deadline, the others are
 * answered; the next call (node fast again) works. */
static void test_deadline(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	int slow, i, ok = 0, late = 0;
	uint64_t t0, took;
	struct rc_stats st;

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	slow = F.owner[rc_slot("k0", 2)];
	F.n[slow].delay_ms = 1500;
	for (i = 0; i < 60; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	t0 = rc_now_ns();
	rc_exec(c, g->cmds, g->n, in_ms(200));
	took = rc_now_ns() - t0;
	/* bounded by the deadline, not by the node (1.5 s) */
	assert_true(took < 1000000000ULL);
	for (i = 0; i < 60; i++) {
		if (F.owner[rc_slot(g->keys[i], strlen(g->keys[i]))] == slow) {
			assert_int_equal(g->cmds[i].err, -ETIMEDOUT);
			assert_null(g->cmds[i].reply);
			late++;
		} else {
			assert_int_equal(g->cmds[i].err, 0);
			ok++;
		}
	}
	assert_true(late > 0 && ok > 0);
	rc_get_stats(c, &st);
	assert_int_equal(st.timeouts, (uint64_t)late);
	gets_free(g);
	F.n[slow].delay_ms = 0;
	usleep(1600 * 1000);		/* the node catches up */
	g->n = 0;
	for (i = 0; i < 60; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 60);
	expect_values(g);	/* no reply of the old call answers these */
	gets_free(g);
	free(g);
	rc_close(c);
}

/* Error replies: a node's own errors reach the caller, TRYAGAIN and
 * CLUSTERDOWN are -EAGAIN. */
static void test_error_replies(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	int node = F.owner[rc_slot("k1", 2)];

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	F.n[node].fail_with = "OOM command not allowed when used memory > "
			      "'maxmemory'.";
	gets_add(g, "k1");
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 1);
	assert_int_equal(g->cmds[0].err, 0);
	assert_int_equal(g->cmds[0].reply->type, REDIS_REPLY_ERROR);
	assert_memory_equal(g->cmds[0].reply->str, "OOM", 3);
	gets_free(g);
	g->n = 0;
	F.n[node].fail_with = "TRYAGAIN Multiple keys request during rehashing "
			      "of slot";
	gets_add(g, "k1");
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 0);
	assert_int_equal(g->cmds[0].err, -EAGAIN);
	g->n = 0;
	F.n[node].fail_with = "CLUSTERDOWN The cluster is down";
	gets_add(g, "k1");
	assert_int_equal(rc_exec(c, g->cmds, g->n, in_ms(2000)), 0);
	assert_int_equal(g->cmds[0].err, -EAGAIN);
	F.n[node].fail_with = NULL;
	free(g);
	rc_close(c);
}

/* A node that is gone: its commands fail at once, the others are served;
 * during the back-off no connection is tried; the map from another node
 * (here the same, in a real failover the replica's) is read. */
static void test_node_gone(void **state)
{
	struct rc_cluster *c = client(0);
	struct gets *g = calloc(1, sizeof(*g));
	struct rc_stats st, st2;
	int gone = 2, i, ok = 0, bad = 0;
	uint64_t t0;

	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	/* stop listening: connections are refused */
	F.n[gone].gone = 1;
	while (F.n[gone].lfd >= 0)
		usleep(1000);
	for (i = 0; i < 60; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	t0 = rc_now_ns();
	rc_exec(c, g->cmds, g->n, in_ms(5000));
	assert_true(rc_now_ns() - t0 < 2000000000ULL);
	for (i = 0; i < 60; i++) {
		if (F.owner[rc_slot(g->keys[i], strlen(g->keys[i]))] == gone) {
			assert_true(g->cmds[i].err == -EHOSTUNREACH ||
				    g->cmds[i].err == -ECONNRESET);
			bad++;
		} else {
			assert_int_equal(g->cmds[i].err, 0);
			ok++;
		}
	}
	assert_true(bad > 0 && ok > 0);
	assert_true(rc_refresh_due(c));
	gets_free(g);
	rc_get_stats(c, &st);
	assert_true(st.connect_errors >= 1);
	assert_int_equal(st.io_errors, 0);
	/* within the back-off: refused without a connection attempt */
	g->n = 0;
	for (i = 0; i < 60; i++) {
		char k[32];

		snprintf(k, sizeof(k), "k%d", i);
		gets_add(g, k);
	}
	rc_exec(c, g->cmds, g->n, in_ms(5000));
	rc_get_stats(c, &st2);
	assert_int_equal(st2.connects, st.connects);
	assert_true(st2.unreachable >= (uint64_t)bad);
	gets_free(g);
	/* the map is read from a node that answers */
	assert_int_equal(rc_refresh(c, in_ms(2000)), 0);
	free(g);
	rc_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_and_slots),
		cmocka_unit_test(test_bad_seeds),
		cmocka_unit_test_setup_teardown(test_slot_map, setup, teardown),
		cmocka_unit_test_setup_teardown(test_moved_without_map, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_moved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ask, setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_change_mid_pipeline,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_replies, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_node_gone, setup,
						teardown),
	};

	signal(SIGPIPE, SIG_IGN);	/* a node answering a closed client */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
