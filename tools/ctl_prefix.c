// SPDX-License-Identifier: MIT
/*
 * ctl_prefix.c - `kvpoolctl prefix list|flush|share|unshare`, and the
 * prefix-cache part of `status`, `top` and `metrics`.  The counters come
 * from kvpoold (the daemon keeps the caches), over its socket.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <linux/kvpool.h>

#include "kvlease.h"
#include "kvpoolctl.h"

int ctl_prefix_get(struct kvl_admin *adm, const char *pool,
		   struct kvl_prefix_info *out, int cap, int *n)
{
	int ret = kvl_admin_prefix_list(adm, pool, out, (size_t)cap);

	if (ret < 0)
		return ret;
	*n = ret < cap ? ret : cap;
	return 0;
}

static double hit_rate(const struct kvl_prefix_info *p)
{
	uint64_t asked = p->hits + p->misses;

	return asked ? (double)p->hits / (double)asked : 0.0;
}

void ctl_prefix_print(const struct kvl_prefix_info *p, int n, int err)
{
	int i;

	if (err) {
		printf("\nprefix cache: not available (%s)\n",
		       err == -EOPNOTSUPP || err == -ENOTCONN ?
		       "kvpoold keeps the caches and is not running" :
		       strerror(-err));
		return;
	}
	printf("\n%-16s %-12s %8s %8s %10s %10s %12s %9s %9s %6s\n",
	       "PREFIX CACHE", "NAMESPACE", "CACHED", "REFD", "HITS",
	       "MISSES", "HIT_TOKENS", "EVICTED", "PUBLISHED", "HIT%");
	for (i = 0; i < n; i++)
		printf("%-16s %-12s %8u %8u %10llu %10llu %12llu %9llu %9llu %5.1f%%\n",
		       p[i].tenant, p[i].ns[0] ? p[i].ns : "-", p[i].cached,
		       p[i].referenced, (unsigned long long)p[i].hits,
		       (unsigned long long)p[i].misses,
		       (unsigned long long)p[i].hit_tokens,
		       (unsigned long long)p[i].evictions,
		       (unsigned long long)p[i].published,
		       100.0 * hit_rate(&p[i]));
	if (!n)
		printf("(no tenant has used the prefix cache)\n");
}

void ctl_prefix_json(struct jw *w, const struct kvl_prefix_info *p, int n,
		     int err)
{
	int i;

	if (err) {
		jw_null(w, "prefix");
		return;
	}
	jw_arr(w, "prefix");
	for (i = 0; i < n; i++) {
		jw_obj(w, NULL);
		jw_str(w, "tenant", p[i].tenant);
		if (p[i].ns[0])
			jw_str(w, "namespace", p[i].ns);
		else
			jw_null(w, "namespace");
		jw_u64(w, "cached", p[i].cached);
		jw_u64(w, "referenced", p[i].referenced);
		jw_u64(w, "hits", p[i].hits);
		jw_u64(w, "misses", p[i].misses);
		jw_u64(w, "hit_tokens", p[i].hit_tokens);
		jw_u64(w, "evictions", p[i].evictions);
		jw_u64(w, "published", p[i].published);
		jw_dbl(w, "hit_rate", hit_rate(&p[i]));
		jw_u64(w, "hot_lease", p[i].hot_lease);
		jw_u64(w, "cold_lease", p[i].cold_lease);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

void ctl_prefix_metrics(FILE *f, const char *pool,
			const struct kvl_prefix_info *p, int n)
{
	static const struct {
		const char *name, *type, *help;
	} m[] = {
		{ "kvpool_prefix_cached_blocks", "gauge",
		  "Blocks in the tenant's prefix cache (counted in its current)." },
		{ "kvpool_prefix_referenced_blocks", "gauge",
		  "Cached blocks in use by some sequence." },
		{ "kvpool_prefix_hits_total", "counter",
		  "Full blocks found in the prefix cache." },
		{ "kvpool_prefix_misses_total", "counter",
		  "Full blocks looked up and not found." },
		{ "kvpool_prefix_hit_tokens_total", "counter",
		  "Tokens in the blocks found (prefill not computed)." },
		{ "kvpool_prefix_evictions_total", "counter",
		  "Unreferenced cached blocks given back." },
		{ "kvpool_prefix_published_total", "counter",
		  "Blocks added to the prefix cache." },
	};
	size_t k;
	int i;

	for (k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help,
			m[k].name, m[k].type);
		for (i = 0; i < n; i++) {
			uint64_t v[] = {
				p[i].cached, p[i].referenced, p[i].hits,
				p[i].misses, p[i].hit_tokens, p[i].evictions,
				p[i].published,
			};

			fprintf(f, "%s{pool=\"%s\",tenant=\"%s\"} %llu\n",
				m[k].name, pool, p[i].tenant,
				(unsigned long long)v[k]);
		}
	}
}

/* Is @id one of the leases the daemon holds for a prefix cache? */
bool ctl_prefix_lease(const struct kvl_prefix_info *p, int n, uint64_t id)
{
	int i;

	for (i = 0; i < n; i++)
		if (id && (p[i].hot_lease == id || p[i].cold_lease == id))
			return true;
	return false;
}

/* ---- kvpoolctl prefix ---------------------------------------------------- */

static int prefix_fail(const char *what, int err)
{
	if (err == -EOPNOTSUPP || err == -ENOTCONN) {
		ctl_err("%s: the prefix caches live in kvpoold, which is not running",
			what);
		return CTL_EXIT_NOLEDGER;
	}
	return ctl_fail(what, err);
}

static bool valid_name(const char *s)
{
	size_t i, n = strlen(s);

	if (!n || n >= KVPOOL_NAME_LEN)
		return false;
	for (i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

static int prefix_list(int argc, char **argv)
{
	struct kvl_prefix_info p[256];
	struct kvl_admin *adm;
	int i, n = 0, ret;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j")) {
			ctl_g.json = true;
		} else {
			ctl_err("prefix list: unknown argument '%s'", argv[i]);
			ctl_usage_hint("prefix");
			return CTL_EXIT_USAGE;
		}
	}
	ret = kvl_admin_open(ctl_g.socket, &adm);
	if (ret)
		return ctl_fail("prefix list", ret);
	ret = ctl_prefix_get(adm, ctl_g.pool, p, 256, &n);
	kvl_admin_close(adm);
	if (ret)
		return prefix_fail("prefix list", ret);
	if (ctl_g.json) {
		struct jw w;

		jw_init(&w, stdout);
		jw_obj(&w, NULL);
		ctl_prefix_json(&w, p, n, 0);
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		ctl_prefix_print(p, n, 0);
	}
	return CTL_EXIT_OK;
}

int cmd_prefix(int argc, char **argv)
{
	const char *verb, *tenant, *ns = NULL;
	struct kvl_admin *adm;
	int want, ret;

	if (argc < 2) {
		ctl_err("prefix: missing action (list, flush, share, unshare)");
		ctl_usage_hint("prefix");
		return CTL_EXIT_USAGE;
	}
	verb = argv[1];
	if (!strcmp(verb, "list") || !strcmp(verb, "ls"))
		return prefix_list(argc - 1, argv + 1);
	if (!strcmp(verb, "flush") || !strcmp(verb, "unshare")) {
		want = 3;
	} else if (!strcmp(verb, "share")) {
		want = 4;
	} else {
		ctl_err("prefix: unknown action '%s' (list, flush, share, unshare)",
			verb);
		ctl_usage_hint("prefix");
		return CTL_EXIT_USAGE;
	}
	if (argc != want) {
		ctl_err("prefix %s: give %s", verb, want == 4 ?
			"a TENANT and a NAMESPACE" : "one TENANT");
		ctl_usage_hint("prefix");
		return CTL_EXIT_USAGE;
	}
	tenant = argv[2];
	if (want == 4)
		ns = argv[3];
	if (!valid_name(tenant) || (ns && !valid_name(ns))) {
		ctl_err("prefix %s: '%s' is not a valid name ([a-zA-Z0-9_.-], alphanumeric first, at most %d characters)",
			verb, valid_name(tenant) ? ns : tenant,
			KVPOOL_NAME_LEN - 1);
		return CTL_EXIT_USAGE;
	}
	ret = kvl_admin_open(ctl_g.socket, &adm);
	if (ret)
		return ctl_fail("prefix", ret);
	if (!strcmp(verb, "flush"))
		ret = kvl_admin_prefix_flush(adm, ctl_g.pool, tenant);
	else
		ret = kvl_admin_prefix_share(adm, ctl_g.pool, tenant, ns);
	kvl_admin_close(adm);
	if (ret < 0)
		return prefix_fail(verb, ret);
	if (!strcmp(verb, "flush"))
		printf("prefix cache of %s flushed: %d blocks given back\n",
		       tenant, ret);
	else if (ns)
		printf("tenant %s shares namespace %s (its cache was flushed)\n",
		       tenant, ns);
	else
		printf("tenant %s uses its own namespace again (its cache was flushed)\n",
		       tenant);
	return CTL_EXIT_OK;
}
