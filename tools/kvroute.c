// SPDX-License-Identifier: MIT
/*
 * kvroute.c - libkvroute: the cluster view of kvpool nodes (heartbeats
 * and block events in a Redis Cluster) and the routing question "which
 * node holds the longest cached prefix of these tokens".  See kvroute.h.
 *
 * Per node: the heartbeat's fields and a set of the (model, chain key)
 * pairs its stream says it holds, replayed in order: "stored" adds keys,
 * "removed" takes them away, "reset" (the node started) empties the set.
 * Routing computes the request's chain keys as the nodes do
 * (pfx_key_compute() of daemon/prefix_index.c with the tenant's salt,
 * kvc_namespace_salt()) and walks them down each node's set.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster_value.h"
#include "kvroute.h"
#include "prefix_index.h"
#include "rcluster.h"

#define MAX_NODES	256
#define XRANGE_COUNT	"1000"

struct kset_ent {
	struct pfx_key model, key;
	struct kset_ent *next;
};

struct kset {
	struct kset_ent **b;
	uint32_t mask, n;
};

struct rnode {
	struct kvr_node info;
	char *json;
	char *models;			/* "<id> <tpb> <name>\n"... */
	char last_id[48];		/* the last stream entry read */
	struct kset keys;
	bool live;
};

struct kvr {
	struct rc_cluster *rc;
	uint32_t timeout_ms;
	struct rnode *nodes;
	unsigned int nnodes;
};

/* ---- key sets --------------------------------------------------------------- */

static uint32_t kset_hash(const struct pfx_key *m, const struct pfx_key *k)
{
	uint64_t h = k->lo ^ (k->hi * 0x9e3779b97f4a7c15ULL) ^ m->lo;

	return (uint32_t)(h ^ (h >> 29));
}

static bool same(const struct pfx_key *a, const struct pfx_key *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

static void kset_clear(struct kset *s)
{
	uint32_t i;

	for (i = 0; s->b && i <= s->mask; i++) {
		struct kset_ent *e = s->b[i], *n;

		for (; e; e = n) {
			n = e->next;
			free(e);
		}
	}
	free(s->b);
	memset(s, 0, sizeof(*s));
}

static struct kset_ent **kset_slot(struct kset *s, const struct pfx_key *m,
				   const struct pfx_key *k)
{
	struct kset_ent **pp = &s->b[kset_hash(m, k) & s->mask];

	while (*pp && !(same(&(*pp)->key, k) && same(&(*pp)->model, m)))
		pp = &(*pp)->next;
	return pp;
}

static bool kset_has(const struct kset *s, const struct pfx_key *m,
		     const struct pfx_key *k)
{
	if (!s->n)
		return false;
	return *kset_slot((struct kset *)s, m, k) != NULL;
}

static int kset_grow(struct kset *s)
{
	uint32_t cap = s->b ? (s->mask + 1) * 2 : 1024, i;
	struct kset_ent **nb = calloc(cap, sizeof(*nb));

	if (!nb)
		return -ENOMEM;
	for (i = 0; s->b && i <= s->mask; i++) {
		struct kset_ent *e = s->b[i], *n;

		for (; e; e = n) {
			uint32_t h = kset_hash(&e->model, &e->key) & (cap - 1);

			n = e->next;
			e->next = nb[h];
			nb[h] = e;
		}
	}
	free(s->b);
	s->b = nb;
	s->mask = cap - 1;
	return 0;
}

static int kset_add(struct kset *s, const struct pfx_key *m,
		    const struct pfx_key *k)
{
	struct kset_ent **pp, *e;

	if ((!s->b || s->n >= s->mask + 1) && kset_grow(s))
		return -ENOMEM;
	pp = kset_slot(s, m, k);
	if (*pp)
		return 0;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->model = *m;
	e->key = *k;
	e->next = NULL;
	*pp = e;
	s->n++;
	return 0;
}

static void kset_del(struct kset *s, const struct pfx_key *m,
		     const struct pfx_key *k)
{
	struct kset_ent **pp, *e;

	if (!s->n)
		return;
	pp = kset_slot(s, m, k);
	e = *pp;
	if (!e)
		return;
	*pp = e->next;
	free(e);
	s->n--;
}

/* ---- reading the view ---------------------------------------------------------- */

int kvr_open(const char *seeds, uint32_t timeout_ms, struct kvr **out)
{
	struct rc_opts o;
	struct kvr *r;
	int ret;

	if (!seeds || !out)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->nodes = calloc(MAX_NODES, sizeof(*r->nodes));
	if (!r->nodes) {
		free(r);
		return -ENOMEM;
	}
	memset(&o, 0, sizeof(o));
	o.seeds = seeds;
	o.backoff_min_ms = 50;
	o.backoff_max_ms = 1000;
	ret = rc_open(&o, &r->rc);
	if (ret) {
		free(r->nodes);
		free(r);
		return ret;
	}
	r->timeout_ms = timeout_ms ? timeout_ms : 2000;
	*out = r;
	return 0;
}

void kvr_close(struct kvr *r)
{
	unsigned int i;

	if (!r)
		return;
	for (i = 0; i < r->nnodes; i++) {
		kset_clear(&r->nodes[i].keys);
		free(r->nodes[i].json);
		free(r->nodes[i].models);
	}
	free(r->nodes);
	rc_close(r->rc);
	free(r);
}

static uint64_t deadline(const struct kvr *r)
{
	return rc_now_ns() + (uint64_t)r->timeout_ms * 1000000ULL;
}

/* One command, its reply (or NULL with *err). */
static redisReply *call(struct kvr *r, int argc, const char **argv, int *err)
{
	size_t len[8];
	struct rc_cmd c;
	int i;

	for (i = 0; i < argc; i++)
		len[i] = strlen(argv[i]);
	memset(&c, 0, sizeof(c));
	c.argc = argc;
	c.argv = argv;
	c.argvlen = len;
	c.key = argc > 1 ? 1 : -1;
	rc_exec(r->rc, &c, 1, deadline(r));
	if (c.reply && c.reply->type == REDIS_REPLY_ERROR) {
		freeReplyObject(c.reply);
		*err = -EIO;
		return NULL;
	}
	*err = c.err;
	return c.reply;
}

static struct rnode *node_get(struct kvr *r, const char *name, size_t len)
{
	unsigned int i;

	if (len >= sizeof(r->nodes[0].info.name))
		return NULL;
	for (i = 0; i < r->nnodes; i++)
		if (strlen(r->nodes[i].info.name) == len &&
		    !memcmp(r->nodes[i].info.name, name, len))
			return &r->nodes[i];
	if (r->nnodes >= MAX_NODES)
		return NULL;
	memcpy(r->nodes[r->nnodes].info.name, name, len);
	r->nodes[r->nnodes].info.name[len] = 0;
	strcpy(r->nodes[r->nnodes].last_id, "-");
	return &r->nodes[r->nnodes++];
}

static char *dup_reply(const redisReply *v)
{
	char *s = malloc(v->len + 1);

	if (s) {
		memcpy(s, v->str, v->len);
		s[v->len] = 0;
	}
	return s;
}

/* The heartbeat hash: live if it has not expired. */
static int read_heartbeat(struct kvr *r, struct rnode *n)
{
	char key[96];
	const char *argv[2] = { "HGETALL", key };
	redisReply *rep;
	size_t i;
	int err;

	snprintf(key, sizeof(key), "kvpool:node:%s", n->info.name);
	rep = call(r, 2, argv, &err);
	if (!rep)
		return err ? err : -EIO;
	n->live = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2;
	for (i = 0; n->live && i + 1 < rep->elements; i += 2) {
		const redisReply *k = rep->element[i], *v = rep->element[i + 1];
		uint64_t x;

		if (k->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		x = strtoull(v->str, NULL, 10);
		if (!strcmp(k->str, "json")) {
			free(n->json);
			n->json = dup_reply(v);
		} else if (!strcmp(k->str, "models")) {
			free(n->models);
			n->models = dup_reply(v);
		} else if (!strcmp(k->str, "free")) {
			n->info.free = x;
		} else if (!strcmp(k->str, "capacity")) {
			n->info.capacity = x;
		} else if (!strcmp(k->str, "used")) {
			n->info.used = x;
		} else if (!strcmp(k->str, "backed")) {
			n->info.backed = x;
		} else if (!strcmp(k->str, "block_bytes")) {
			n->info.block_bytes = x;
		} else if (!strcmp(k->str, "prefix_entries")) {
			n->info.prefix_entries = x;
		}
	}
	freeReplyObject(rep);
	return 0;
}

/* One stream entry: [id, [field, value, ...]]. */
static void apply_event(struct rnode *n, const redisReply *e)
{
	const redisReply *f;
	const char *op = NULL, *keys = NULL;
	size_t i, klen = 0;
	struct pfx_key model = { 0, 0 };
	bool have_model = false;

	if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING ||
	    e->element[1]->type != REDIS_REPLY_ARRAY)
		return;
	snprintf(n->last_id, sizeof(n->last_id), "%s", e->element[0]->str);
	f = e->element[1];
	for (i = 0; i + 1 < f->elements; i += 2) {
		const redisReply *k = f->element[i], *v = f->element[i + 1];

		if (k->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (!strcmp(k->str, "op"))
			op = v->str;
		else if (!strcmp(k->str, "model"))
			have_model = !kvc_unhex(v->str, v->len, &model);
		else if (!strcmp(k->str, "keys")) {
			keys = v->str;
			klen = v->len;
		}
	}
	if (!op)
		return;
	if (!strcmp(op, "reset")) {
		kset_clear(&n->keys);
		return;
	}
	if (!have_model || !keys)
		return;
	for (i = 0; i + 32 <= klen; i += 33) {
		struct pfx_key k;

		if (kvc_unhex(keys + i, 32, &k))
			break;
		if (!strcmp(op, "stored"))
			kset_add(&n->keys, &model, &k);
		else if (!strcmp(op, "removed"))
			kset_del(&n->keys, &model, &k);
	}
}

/* New entries of the node's stream, in order. */
static int read_stream(struct kvr *r, struct rnode *n)
{
	char key[96], from[56];
	const char *argv[6] = { "XRANGE", key, from, "+", "COUNT",
				XRANGE_COUNT };
	int err, rounds;

	snprintf(key, sizeof(key), "kvpool:events:%s", n->info.name);
	for (rounds = 0; rounds < 100000; rounds++) {
		redisReply *rep;
		size_t i, got;

		if (!strcmp(n->last_id, "-"))
			snprintf(from, sizeof(from), "-");
		else
			snprintf(from, sizeof(from), "(%s", n->last_id);
		rep = call(r, 6, argv, &err);
		if (!rep)
			return err ? err : -EIO;
		got = rep->type == REDIS_REPLY_ARRAY ? rep->elements : 0;
		for (i = 0; i < got; i++)
			apply_event(n, rep->element[i]);
		freeReplyObject(rep);
		if (got < (size_t)atoi(XRANGE_COUNT))
			break;
	}
	n->info.keys = n->keys.n;
	return 0;
}

int kvr_refresh(struct kvr *r)
{
	const char *argv[2] = { "SMEMBERS", "kvpool:nodes" };
	redisReply *rep;
	unsigned int i, live = 0;
	int err;

	if (!r)
		return -EINVAL;
	if (rc_refresh_due(r->rc))
		rc_refresh(r->rc, deadline(r));
	rep = call(r, 2, argv, &err);
	if (!rep)
		return err ? err : -EIO;
	for (i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++)
		if (rep->element[i]->type == REDIS_REPLY_STRING)
			node_get(r, rep->element[i]->str,
				 rep->element[i]->len);
	freeReplyObject(rep);
	for (i = 0; i < r->nnodes; i++) {
		struct rnode *n = &r->nodes[i];

		err = read_heartbeat(r, n);
		if (err)
			return err;
		if (!n->live)
			continue;
		err = read_stream(r, n);
		if (err)
			return err;
		live++;
	}
	return (int)live;
}

int kvr_nodes(struct kvr *r, struct kvr_node *out, size_t cap)
{
	unsigned int i, k = 0;

	if (!r || (cap && !out))
		return -EINVAL;
	for (i = 0; i < r->nnodes; i++) {
		if (!r->nodes[i].live)
			continue;
		if (k < cap)
			out[k] = r->nodes[i].info;
		k++;
	}
	return (int)k;
}

const char *kvr_node_json(struct kvr *r, size_t idx)
{
	unsigned int i, k = 0;

	for (i = 0; r && i < r->nnodes; i++) {
		if (!r->nodes[i].live)
			continue;
		if (k++ == idx)
			return r->nodes[i].json ? r->nodes[i].json : "{}";
	}
	return NULL;
}

/* The models the nodes declared under @name: up to cap (id, tpb). */
static int models_named(struct kvr *r, const char *name, struct pfx_key *ids,
			uint32_t *tpb, int cap)
{
	unsigned int i;
	int n = 0, j;

	for (i = 0; i < r->nnodes; i++) {
		const char *p = r->nodes[i].live ? r->nodes[i].models : NULL;

		while (p && *p) {
			const char *nl = strchr(p, '\n'), *nm;
			struct pfx_key id;
			unsigned long t;
			char *end;

			if (!nl)
				nl = p + strlen(p);
			if (nl - p > 34 && !kvc_unhex(p, 32, &id) &&
			    p[32] == ' ') {
				t = strtoul(p + 33, &end, 10);
				nm = end + 1;
				if (*end == ' ' && t &&
				    (size_t)(nl - nm) == strlen(name) &&
				    !memcmp(nm, name, strlen(name))) {
					for (j = 0; j < n; j++)
						if (same(&ids[j], &id))
							break;
					if (j == n && n < cap) {
						ids[n] = id;
						tpb[n++] = (uint32_t)t;
					}
				}
			}
			p = *nl ? nl + 1 : nl;
		}
	}
	return n;
}

int kvr_route(struct kvr *r, const void *key, size_t keylen,
	      const char *model, const uint32_t *tokens, size_t ntok,
	      struct kvr_route *out)
{
	struct pfx_index ix;
	struct pfx_key ids[16], *chain = NULL;
	uint32_t tpb[16];
	uint8_t salt[PFX_SALT_BYTES], *scratch = NULL;
	struct rnode *best = NULL;
	uint32_t best_blocks = 0;
	int live, nm, m, ret = 0;
	unsigned int i;

	if (!r || !key || !model || (ntok && !tokens) || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	live = kvr_refresh(r);
	if (live < 0)
		return live;
	if (!live)
		return -ENOENT;
	out->nodes = (uint32_t)live;
	nm = models_named(r, model, ids, tpb, 16);
	if (!nm)
		return -ENOENT;
	memset(&ix, 0, sizeof(ix));
	ix.hash_bits = 128;
	kvc_namespace_salt(key, keylen, salt);
	for (m = 0; m < nm; m++) {
		size_t nb = ntok / tpb[m], b;
		struct pfx_key parent = { 0, 0 };

		free(chain);
		free(scratch);
		chain = malloc((nb ? nb : 1) * sizeof(*chain));
		scratch = malloc(48 + (size_t)tpb[m] * 4);
		if (!chain || !scratch) {
			ret = -ENOMEM;
			goto out;
		}
		for (b = 0; b < nb; b++) {
			pfx_key_compute(&ix, &chain[b], salt, &parent, &ids[m],
					tokens + b * tpb[m], tpb[m], scratch);
			parent = chain[b];
		}
		for (i = 0; i < r->nnodes; i++) {
			struct rnode *n = &r->nodes[i];
			uint32_t held = 0;

			if (!n->live)
				continue;
			while (held < nb && kset_has(&n->keys, &ids[m],
						     &chain[held]))
				held++;
			if (!best || held > best_blocks ||
			    (held == best_blocks &&
			     n->info.free > best->info.free)) {
				best = n;
				best_blocks = held;
				out->tokens = held * tpb[m];
			}
		}
	}
	if (best) {
		snprintf(out->node, sizeof(out->node), "%s", best->info.name);
		out->blocks = best_blocks;
		out->free = best->info.free;
	}
out:
	free(chain);
	free(scratch);
	return ret;
}
