// SPDX-License-Identifier: MIT
/*
 * ctl_cluster.c - `kvpoolctl cluster` (the nodes of a cluster tier and
 * their capacity, from their heartbeats; or the local kvpoold's cluster
 * counters) and `kvpoolctl route` (the node holding the longest cached
 * prefix of a prompt), through libkvroute (include/kvroute.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlease.h"
#include "kvpool_metrics.h"
#include "kvpoolctl.h"
#ifdef KVL_HAVE_HIREDIS
#include "kvroute.h"
#endif

static const char *const states[] = { "off", "unavailable", "down", "up",
				      "partial" };
static const char *const policies[] = { "through", "back", "read" };
static const char *const invalid[] = { "short", "format", "model", "chain",
				       "tokens", "checksum", "type" };

int ctl_cluster_metrics(FILE *f)
{
	struct kvl_cluster_info st;
	struct kvp_cluster_status w;
	struct kvl_admin *adm;
	int r;

	if (kvl_admin_open(ctl_g.socket, &adm))
		return 0;
	r = kvl_admin_cluster_status(adm, &st);
	kvl_admin_close(adm);
	if (r)
		return 0;	/* an older kvpoold, or none */
	memcpy(&w, &st, sizeof(w));
	return kvp_metrics_write_cluster(f, &w);
}

/* The local kvpoold's cluster tier. */
static int local_status(void)
{
	struct kvl_cluster_info st;
	struct kvl_admin *adm;
	uint64_t bad = 0;
	int r, i;

	r = kvl_admin_open(ctl_g.socket, &adm);
	if (r)
		return ctl_fail("cluster", r);
	r = kvl_admin_cluster_status(adm, &st);
	kvl_admin_close(adm);
	if (r)
		return ctl_fail("cluster", r);
	for (i = 0; i < 7; i++)
		bad += st.fetch_invalid[i];
	if (ctl_g.json) {
		struct jw w;

		jw_init(&w, stdout);
		jw_obj(&w, NULL);
		jw_str(&w, "node", st.node);
		jw_str(&w, "state", st.state < 5 ? states[st.state] : "?");
		if (st.state) {
			jw_str(&w, "policy", st.policy < 3 ?
			       policies[st.policy] : "?");
			jw_u64(&w, "deadline_ms", st.deadline_ms);
			jw_u64(&w, "masters", st.masters);
			jw_u64(&w, "slots", st.slots);
			jw_u64(&w, "tenants", st.tenants);
			jw_u64(&w, "fetches", st.fetches);
			jw_u64(&w, "fetch_blocks", st.fetch_blocks);
			jw_u64(&w, "fetch_hits", st.fetch_hits);
			jw_u64(&w, "fetch_absent", st.fetch_absent);
			jw_obj(&w, "fetch_invalid");
			for (i = 0; i < 7; i++)
				jw_u64(&w, invalid[i], st.fetch_invalid[i]);
			jw_obj_end(&w);
			jw_u64(&w, "fetch_errors", st.fetch_errors);
			jw_u64(&w, "fetch_timeouts", st.fetch_timeouts);
			jw_u64(&w, "fetch_late", st.fetch_late);
			jw_u64(&w, "fetch_dropped", st.fetch_dropped);
			jw_u64(&w, "fetch_no_room", st.fetch_no_room);
			jw_u64(&w, "fetch_bytes", st.fetch_bytes);
			jw_u64(&w, "put_blocks", st.put_blocks);
			jw_u64(&w, "put_bytes", st.put_bytes);
			jw_u64(&w, "put_oom", st.put_oom);
			jw_u64(&w, "put_errors", st.put_errors);
			jw_u64(&w, "put_timeouts", st.put_timeouts);
			jw_u64(&w, "put_dropped", st.put_dropped);
			jw_u64(&w, "put_queued_bytes", st.put_queued_bytes);
			jw_u64(&w, "events", st.events);
			jw_u64(&w, "events_dropped", st.events_dropped);
			jw_u64(&w, "heartbeats", st.heartbeats);
			jw_u64(&w, "heartbeat_errors", st.heartbeat_errors);
			jw_u64(&w, "moved", st.moved);
			jw_u64(&w, "ask", st.ask);
			jw_u64(&w, "connects", st.connects);
			jw_u64(&w, "connect_errors", st.connect_errors);
			jw_u64(&w, "io_errors", st.io_errors);
			jw_u64(&w, "refreshes", st.refreshes);
		}
		jw_obj_end(&w);
		jw_end(&w);
		return CTL_EXIT_OK;
	}
	if (!st.state) {
		printf("cluster tier: off (kvpoold.conf [cluster] nodes, or "
		       "--cluster-nodes)\n");
		return CTL_EXIT_OK;
	}
	printf("node %s: %s, policy %s, deadline %u ms, %u masters, %u slots, "
	       "%u tenants with a key\n", st.node,
	       st.state < 5 ? states[st.state] : "?",
	       st.policy < 3 ? policies[st.policy] : "?", st.deadline_ms,
	       st.masters, st.slots, st.tenants);
	printf("fetch: %llu rounds, %llu blocks asked, fetch hits %llu, absent "
	       "%llu, refused %llu (short %llu, format %llu, model %llu, chain "
	       "%llu, tokens %llu, checksum %llu), errors %llu, past the "
	       "deadline %llu, queue full %llu, no room %llu, %llu bytes\n",
	       (unsigned long long)st.fetches,
	       (unsigned long long)st.fetch_blocks,
	       (unsigned long long)st.fetch_hits,
	       (unsigned long long)st.fetch_absent, (unsigned long long)bad,
	       (unsigned long long)st.fetch_invalid[0],
	       (unsigned long long)st.fetch_invalid[1],
	       (unsigned long long)st.fetch_invalid[2],
	       (unsigned long long)st.fetch_invalid[3],
	       (unsigned long long)st.fetch_invalid[4],
	       (unsigned long long)st.fetch_invalid[5],
	       (unsigned long long)st.fetch_errors,
	       (unsigned long long)st.fetch_timeouts,
	       (unsigned long long)st.fetch_dropped,
	       (unsigned long long)st.fetch_no_room,
	       (unsigned long long)st.fetch_bytes);
	printf("store: %llu blocks, %llu bytes, full (OOM) %llu, errors %llu, "
	       "timeouts %llu, queue full %llu, waiting %llu bytes\n",
	       (unsigned long long)st.put_blocks,
	       (unsigned long long)st.put_bytes,
	       (unsigned long long)st.put_oom,
	       (unsigned long long)st.put_errors,
	       (unsigned long long)st.put_timeouts,
	       (unsigned long long)st.put_dropped,
	       (unsigned long long)st.put_queued_bytes);
	printf("view: %llu events (%llu dropped), %llu heartbeats (%llu "
	       "failed); routing: %llu MOVED, %llu ASK, %llu connects (%llu "
	       "failed), %llu lost connections, %llu slot maps\n",
	       (unsigned long long)st.events,
	       (unsigned long long)st.events_dropped,
	       (unsigned long long)st.heartbeats,
	       (unsigned long long)st.heartbeat_errors,
	       (unsigned long long)st.moved, (unsigned long long)st.ask,
	       (unsigned long long)st.connects,
	       (unsigned long long)st.connect_errors,
	       (unsigned long long)st.io_errors,
	       (unsigned long long)st.refreshes);
	return CTL_EXIT_OK;
}

#ifdef KVL_HAVE_HIREDIS
static int nodes_list(const char *seeds)
{
	struct kvr_node nodes[256];
	struct kvr *r;
	int n, i, ret = kvr_open(seeds, 0, &r);

	if (ret)
		return ctl_fail("cluster", ret);
	n = kvr_refresh(r);
	if (n < 0) {
		kvr_close(r);
		ctl_err("cluster %s: %s", seeds, strerror(-n));
		return CTL_EXIT_ERROR;
	}
	n = kvr_nodes(r, nodes, 256);
	if (ctl_g.json) {
		printf("{\"nodes\":[");
		for (i = 0; i < n && i < 256; i++)
			printf("%s%s", i ? "," : "", kvr_node_json(r, i));
		printf("]}\n");
	} else {
		printf("%-16s %10s %10s %10s %10s %12s %10s %10s\n", "NODE",
		       "FREE", "CAPACITY", "USED", "BACKED", "BLOCK_BYTES",
		       "CACHED", "STREAMED");
		for (i = 0; i < n && i < 256; i++)
			printf("%-16s %10llu %10llu %10llu %10llu %12llu %10llu "
			       "%10llu\n", nodes[i].name,
			       (unsigned long long)nodes[i].free,
			       (unsigned long long)nodes[i].capacity,
			       (unsigned long long)nodes[i].used,
			       (unsigned long long)nodes[i].backed,
			       (unsigned long long)nodes[i].block_bytes,
			       (unsigned long long)nodes[i].prefix_entries,
			       (unsigned long long)nodes[i].keys);
		if (!n)
			printf("(no live node)\n");
	}
	kvr_close(r);
	return CTL_EXIT_OK;
}
#endif

int cmd_cluster(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "nodes", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	const char *seeds = NULL;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "n:j", lo, NULL)) != -1) {
		switch (ch) {
		case 'n': seeds = optarg; break;
		case 'j': ctl_g.json = true; break;
		default: ctl_usage_hint("cluster"); return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		ctl_usage_hint("cluster");
		return CTL_EXIT_USAGE;
	}
	if (!seeds)
		return local_status();
#ifdef KVL_HAVE_HIREDIS
	return nodes_list(seeds);
#else
	ctl_err("cluster --nodes: this kvpoolctl was built without hiredis");
	return CTL_EXIT_ERROR;
#endif
}

#ifdef KVL_HAVE_HIREDIS
/* Token ids: decimal numbers separated by blanks, commas or newlines. */
static int read_tokens(const char *path, uint32_t **out, size_t *n)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	size_t cap = 1024, k = 0;
	uint32_t *t = malloc(cap * sizeof(*t));
	unsigned long v;
	int c;

	if (!f || !t) {
		free(t);
		return -errno ? -errno : -ENOMEM;
	}
	for (;;) {
		while ((c = fgetc(f)) != EOF &&
		       (c == ' ' || c == '\n' || c == ',' || c == '\t' ||
			c == '\r'))
			;
		if (c == EOF)
			break;
		ungetc(c, f);
		if (fscanf(f, "%lu", &v) != 1 || v > UINT32_MAX) {
			free(t);
			if (f != stdin)
				fclose(f);
			return -EINVAL;
		}
		if (k == cap) {
			uint32_t *nt = realloc(t, cap * 2 * sizeof(*t));

			if (!nt) {
				free(t);
				return -ENOMEM;
			}
			t = nt;
			cap *= 2;
		}
		t[k++] = (uint32_t)v;
	}
	if (f != stdin)
		fclose(f);
	*out = t;
	*n = k;
	return 0;
}

static int read_key(const char *path, unsigned char *buf, size_t cap,
		    size_t *len)
{
	FILE *f = fopen(path, "rb");

	if (!f)
		return -errno;
	*len = fread(buf, 1, cap, f);
	fclose(f);
	return *len >= 16 && *len <= 4096 ? 0 : -EINVAL;
}
#endif

int cmd_route(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "nodes", required_argument, NULL, 'n' },
		{ "model", required_argument, NULL, 'm' },
		{ "tokens", required_argument, NULL, 't' },
		{ "key", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	const char *seeds = NULL, *model = NULL, *tokens = NULL, *key = NULL;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "n:m:t:k:j", lo, NULL)) != -1) {
		switch (ch) {
		case 'n': seeds = optarg; break;
		case 'm': model = optarg; break;
		case 't': tokens = optarg; break;
		case 'k': key = optarg; break;
		case 'j': ctl_g.json = true; break;
		default: ctl_usage_hint("route"); return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc || !seeds || !model || !tokens || !key) {
		ctl_usage_hint("route");
		return CTL_EXIT_USAGE;
	}
#ifdef KVL_HAVE_HIREDIS
	{
		unsigned char kb[4097];
		struct kvr_route rt;
		uint32_t *tok = NULL;
		size_t ntok = 0, klen = 0;
		struct kvr *r;
		int ret;

		ret = read_key(key, kb, sizeof(kb), &klen);
		if (ret) {
			ctl_err("route --key %s: %s", key, ret == -EINVAL ?
				"not a key file (16 to 4096 bytes)" :
				strerror(-ret));
			return CTL_EXIT_USAGE;
		}
		ret = read_tokens(tokens, &tok, &ntok);
		if (ret) {
			ctl_err("route --tokens %s: %s", tokens, ret == -EINVAL ?
				"expected token ids (decimal numbers)" :
				strerror(-ret));
			return CTL_EXIT_USAGE;
		}
		ret = kvr_open(seeds, 0, &r);
		if (ret) {
			free(tok);
			return ctl_fail("route", ret);
		}
		ret = kvr_route(r, kb, klen, model, tok, ntok, &rt);
		memset(kb, 0, sizeof(kb));
		free(tok);
		kvr_close(r);
		if (ret == -ENOENT) {
			ctl_err("route: no live node has declared model %s",
				model);
			return CTL_EXIT_NOENT;
		}
		if (ret)
			return ctl_fail("route", ret);
		if (ctl_g.json)
			printf("{\"node\":\"%s\",\"blocks\":%u,\"tokens\":%u,"
			       "\"free\":%llu,\"nodes\":%u}\n", rt.node,
			       rt.blocks, rt.tokens,
			       (unsigned long long)rt.free, rt.nodes);
		else
			printf("node %s blocks %u tokens %u free %llu (of %u "
			       "live nodes)\n", rt.node, rt.blocks, rt.tokens,
			       (unsigned long long)rt.free, rt.nodes);
		return CTL_EXIT_OK;
	}
#else
	ctl_err("route: this kvpoolctl was built without hiredis");
	return CTL_EXIT_ERROR;
#endif
}
