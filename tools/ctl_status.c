// SPDX-License-Identifier: MIT
/*
 * ctl_status.c - `kvpoolctl status`, `top` and `metrics`: one snapshot of
 * the pool, its tenants and its clients through the admin API, printed
 * three ways; with lower tiers, every tier too (its pool, its tenants'
 * current, swaps in and out, copy rate and latency) and the clients'
 * blocks and sequences per tier.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <linux/kvpool.h>

#include "kvlease.h"
#include "kvpool_metrics.h"
#include "kvpoolctl.h"

#define SNAP_MAX_TENANTS	1024
#define SNAP_MAX_CLIENTS	4096

struct ctl_snap {
	struct kvl_pool_info pool;
	struct kvl_tenant_info *tenants;
	int ntenants;
	struct kvl_client_info *clients;
	int nclients;
	int clients_err;	/* -EOPNOTSUPP: module without kvpoold */
	/* tiers (only from kvpoold; ntiers 0 without lower tiers) */
	struct kvl_tier_stats tiers[KVL_MAX_TIERS];
	int ntiers;
	struct kvl_tenant_info *ttenants[KVL_MAX_TIERS];	/* [0] unused */
	int nttenants[KVL_MAX_TIERS];
	struct kvl_client_tiers *ctiers;
	int nctiers;
	struct kvl_prefix_info *prefix;	/* kvpoold's prefix caches */
	int nprefix;
	int prefix_err;
};

static void snap_free(struct ctl_snap *s)
{
	int i;

	free(s->tenants);
	free(s->clients);
	for (i = 0; i < KVL_MAX_TIERS; i++)
		free(s->ttenants[i]);
	free(s->ctiers);
	free(s->prefix);
	memset(s, 0, sizeof(*s));
}

/* Lower tiers, when the daemon has any. */
static void snap_tiers(struct kvl_admin *adm, struct ctl_snap *s)
{
	int n = kvl_admin_tier_list(adm, s->tiers, KVL_MAX_TIERS), i, r;

	if (n <= 1)
		return;
	s->ntiers = n < KVL_MAX_TIERS ? n : KVL_MAX_TIERS;
	for (i = 1; i < s->ntiers; i++) {
		s->ttenants[i] = calloc(SNAP_MAX_TENANTS,
					sizeof(*s->ttenants[i]));
		if (!s->ttenants[i])
			continue;
		r = kvl_admin_tenant_list(adm, s->tiers[i].pool.name,
					  s->ttenants[i], SNAP_MAX_TENANTS);
		s->nttenants[i] = r < 0 ? 0 : r < SNAP_MAX_TENANTS ? r :
				  SNAP_MAX_TENANTS;
	}
	s->ctiers = calloc(SNAP_MAX_CLIENTS, sizeof(*s->ctiers));
	if (s->ctiers) {
		r = kvl_admin_client_tiers(adm, s->ctiers, SNAP_MAX_CLIENTS);
		s->nctiers = r < 0 ? 0 : r < SNAP_MAX_CLIENTS ? r :
			     SNAP_MAX_CLIENTS;
	}
}

static int snap_get(struct kvl_admin *adm, struct ctl_snap *s)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->tenants = calloc(SNAP_MAX_TENANTS, sizeof(*s->tenants));
	s->clients = calloc(SNAP_MAX_CLIENTS, sizeof(*s->clients));
	s->prefix = calloc(SNAP_MAX_TENANTS, sizeof(*s->prefix));
	if (!s->tenants || !s->clients || !s->prefix) {
		snap_free(s);
		return -ENOMEM;
	}
	ret = kvl_admin_pool_status(adm, &s->pool);
	if (ret)
		goto fail;
	/* the admin API's pool is the first (the top one); --pool may
	 * also name a lower tier of kvpoold */
	if (ctl_g.pool && strcmp(ctl_g.pool, s->pool.name)) {
		struct kvl_tier_stats ts[KVL_MAX_TIERS];
		int n = kvl_admin_tier_list(adm, ts, KVL_MAX_TIERS), i;

		for (i = 0; i < n && i < KVL_MAX_TIERS; i++)
			if (!strcmp(ts[i].pool.name, ctl_g.pool))
				break;
		if (i >= n || i >= KVL_MAX_TIERS) {
			ctl_err("no pool '%s' here (the ledger's pool is "
				"'%s')", ctl_g.pool, s->pool.name);
			ret = -ENOENT;
			goto fail;
		}
		s->pool = ts[i].pool;
	}
	ret = kvl_admin_tenant_list(adm, ctl_g.pool ? ctl_g.pool : s->pool.name,
				    s->tenants, SNAP_MAX_TENANTS);
	if (ret < 0)
		goto fail;
	s->ntenants = ret < SNAP_MAX_TENANTS ? ret : SNAP_MAX_TENANTS;
	ret = kvl_admin_client_list(adm, ctl_g.pool ? ctl_g.pool : s->pool.name,
				    s->clients, SNAP_MAX_CLIENTS);
	if (ret < 0) {
		s->clients_err = ret;
	} else {
		s->nclients = ret < SNAP_MAX_CLIENTS ? ret : SNAP_MAX_CLIENTS;
	}
	s->prefix_err = ctl_prefix_get(adm, ctl_g.pool ? ctl_g.pool :
				       s->pool.name, s->prefix,
				       SNAP_MAX_TENANTS, &s->nprefix);
	snap_tiers(adm, s);
	return 0;
fail:
	snap_free(s);
	return ret;
}

static int open_admin(const char *what, struct kvl_admin **adm)
{
	int ret = kvl_admin_open(ctl_g.socket, adm);

	return ret ? ctl_fail(what, ret) : 0;
}

static const char *state_name(uint32_t st)
{
	switch (st) {
	case KVPOOL_STATE_LIVE: return "live";
	case KVPOOL_STATE_ORPHANED: return "orphaned";
	default: return "unknown";
	}
}

static const char *mode_name(uint32_t m)
{
	return m == KVL_MODE_MODULE ? "module" :
	       m == KVL_MODE_DAEMON ? "daemon" : "unknown";
}

static const char *limit_str(uint32_t v, char *buf, size_t len)
{
	if (v == KVPOOL_UNLIMITED)
		return "max";
	snprintf(buf, len, "%u", v);
	return buf;
}

static const char *id_str(uint32_t v, char *buf, size_t len)
{
	if (v == KVPOOL_ID_NONE)
		return "-";
	snprintf(buf, len, "%u", v);
	return buf;
}

/* ---------------- text ---------------- */

static void print_pool(const struct kvl_pool_info *p)
{
	char a[32], b[32], c[32];

	printf("pool %s: %s ledger, %s backend, %s, epoch %llu\n", p->name,
	       mode_name(p->mode), p->backend[0] ? p->backend : "unknown",
	       state_name(p->state), (unsigned long long)p->epoch);
	printf("  block %s, capacity %u blocks (%s)", ctl_human(p->block_bytes, a, sizeof(a)),
	       p->capacity, ctl_human(p->block_bytes * p->capacity, b, sizeof(b)));
	if (p->chunk_blocks)
		printf(", chunk %u blocks", p->chunk_blocks);
	printf("\n  backed %u blocks (%s), used %u blocks (%s), %u lease%s\n",
	       p->backed, ctl_human(p->block_bytes * p->backed, b, sizeof(b)),
	       p->used, ctl_human(p->block_bytes * p->used, c, sizeof(c)),
	       p->leases, p->leases == 1 ? "" : "s");
}

static void print_tenants(const struct ctl_snap *s)
{
	int i;

	printf("\n%-16s %8s %8s %8s %8s %8s %8s %8s %8s %6s %6s\n", "TENANT",
	       "MAX", "MIN", "CURRENT", "PEAK", "EV_MAX", "EV_STALL",
	       "EV_RCLM", "EV_FAIL", "UID", "GID");
	for (i = 0; i < s->ntenants; i++) {
		const struct kvl_tenant_info *t = &s->tenants[i];
		char m[16], u[16], g[16];

		printf("%-16s %8s %8u %8u %8u %8llu %8llu %8llu %8llu %6s %6s\n",
		       t->name, limit_str(t->max, m, sizeof(m)), t->min,
		       t->current, t->peak, (unsigned long long)t->ev_max,
		       (unsigned long long)t->ev_stall,
		       (unsigned long long)t->ev_reclaim,
		       (unsigned long long)t->ev_fail,
		       id_str(t->uid, u, sizeof(u)), id_str(t->gid, g, sizeof(g)));
	}
	if (!s->ntenants)
		printf("(no tenants)\n");
}

static void print_clients(const struct ctl_snap *s)
{
	int i;

	if (s->clients_err) {
		printf("\nclients: not available (%s)\n",
		       s->clients_err == -EOPNOTSUPP ?
		       "kvpoold is not running; only the pool's owner lists leases" :
		       strerror(-s->clients_err));
		return;
	}
	printf("\n%-8s %8s %6s %-16s %8s %s\n", "LEASE", "PID", "UID",
	       "TENANT", "BLOCKS", "DATA");
	for (i = 0; i < s->nclients; i++) {
		const struct kvl_client_info *c = &s->clients[i];

		printf("%-8llu %8u %6u %-16s %8u %s\n",
		       (unsigned long long)c->lease_id, c->pid, c->uid,
		       c->tenant, c->blocks,
		       ctl_prefix_lease(s->prefix, s->nprefix, c->lease_id) ?
		       "cache" : c->connected ? "yes" : "no");
	}
	if (!s->nclients)
		printf("(no clients)\n");
}

static const char *kind_name(uint32_t k)
{
	return k == KVL_TIER_TOP ? "top" : k == KVL_TIER_DRAM ? "dram" :
	       k == KVL_TIER_NVME ? "nvme" : "?";
}

/* Latency percentile from the log2 buckets, in us (bucket's upper end). */
static uint64_t lat_pct(const struct kvl_tier_stats *t, double p)
{
	uint64_t n = 0, c = 0;
	int i;

	for (i = 0; i < 16; i++)
		n += t->lat_us[i];
	if (!n)
		return 0;
	for (i = 0; i < 16; i++) {
		c += t->lat_us[i];
		if ((double)c >= p * (double)n)
			return 2ULL << i;
	}
	return 1ULL << 16;
}

static double rate_gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

static const struct kvl_tenant_info *tier_tenant(const struct ctl_snap *s,
						 int tier, const char *name)
{
	int i;

	for (i = 0; i < s->nttenants[tier]; i++)
		if (!strcmp(s->ttenants[tier][i].name, name))
			return &s->ttenants[tier][i];
	return NULL;
}

static void print_tiers(const struct ctl_snap *s)
{
	char a[32], b[32], c[32];
	int i, k;

	if (!s->ntiers)
		return;
	printf("\n%-4s %-12s %-5s %10s %8s %8s %20s %20s %11s %15s\n",
	       "TIER", "POOL", "KIND", "CAPACITY", "BACKED", "USED",
	       "SWAPPED IN", "SWAPPED OUT", "COPY GB/s", "LAT p50/p99");
	for (i = 0; i < s->ntiers; i++) {
		const struct kvl_tier_stats *t = &s->tiers[i];
		char in[48], out[48], rt[32], lat[40];

		snprintf(in, sizeof(in), "%llu (%s)",
			 (unsigned long long)t->blocks_in,
			 ctl_human(t->bytes_in, a, sizeof(a)));
		snprintf(out, sizeof(out), "%llu (%s)",
			 (unsigned long long)t->blocks_out,
			 ctl_human(t->bytes_out, b, sizeof(b)));
		snprintf(rt, sizeof(rt), "%.2f/%.2f",
			 rate_gbps(t->bytes_in, t->copy_in_ns),
			 rate_gbps(t->bytes_out, t->copy_out_ns));
		snprintf(lat, sizeof(lat), "%llu/%llu us",
			 (unsigned long long)lat_pct(t, 0.5),
			 (unsigned long long)lat_pct(t, 0.99));
		printf("%-4u %-12s %-5s %10s %8u %8u %20s %20s %11s %15s",
		       t->tier, t->pool.name, kind_name(t->kind),
		       ctl_human(t->pool.block_bytes * t->pool.capacity, c,
				 sizeof(c)), t->pool.backed, t->pool.used, in,
		       out, t->swaps ? rt : "-", t->swaps ? lat : "-");
		if (t->flags)
			printf("  %s%s%s", t->flags & KVL_TIER_F_DIRECT ?
			       "O_DIRECT " : "", t->flags & KVL_TIER_F_URING ?
			       "io_uring " : "", t->flags & KVL_TIER_F_PINNED ?
			       "pinned" : "");
		printf("\n");
	}
	/* every tenant's current (and max) in every tier */
	printf("\n%-16s", "TENANT");
	for (i = 0; i < s->ntiers; i++)
		printf(" %17s", s->tiers[i].pool.name);
	printf("\n");
	for (k = 0; k < s->ntenants; k++) {
		const struct kvl_tenant_info *t0 = &s->tenants[k];
		char m[16], cell[40];

		printf("%-16s", t0->name);
		snprintf(cell, sizeof(cell), "%u/%s", t0->current,
			 limit_str(t0->max, m, sizeof(m)));
		printf(" %17s", cell);
		for (i = 1; i < s->ntiers; i++) {
			const struct kvl_tenant_info *t =
				tier_tenant(s, i, t0->name);

			if (t)
				snprintf(cell, sizeof(cell), "%u/%s",
					 t->current,
					 limit_str(t->max, m, sizeof(m)));
			else
				snprintf(cell, sizeof(cell), "-");
			printf(" %17s", cell);
		}
		printf("\n");
	}
	printf("(current/max blocks in each tier)\n");
	if (!s->nctiers)
		return;
	printf("\n%-8s %8s %-16s", "LEASE", "PID", "TENANT");
	for (i = 0; i < s->ntiers; i++)
		printf(" %10s", s->tiers[i].pool.name);
	printf(" %24s %21s\n", "SEQS RESIDENT/SWAP/DROP", "SWAPPED DOWN/UP");
	for (k = 0; k < s->nctiers; k++) {
		const struct kvl_client_tiers *c0 = &s->ctiers[k];
		uint32_t sw = 0;
		char cell[64];

		printf("%-8llu %8u %-16s", (unsigned long long)c0->lease_id,
		       c0->pid, c0->tenant);
		for (i = 0; i < s->ntiers && i < KVL_MAX_TIERS; i++) {
			if (c0->joined[i])
				printf(" %10u", c0->blocks[i]);
			else
				printf(" %10s", "-");
			sw += c0->seq_swapped[i];
		}
		snprintf(cell, sizeof(cell), "%u/%u/%u", c0->seq_resident, sw,
			 c0->seq_dropped);
		printf(" %24s", cell);
		snprintf(cell, sizeof(cell), "%s/%s",
			 ctl_human(c0->bytes_out, a, sizeof(a)),
			 ctl_human(c0->bytes_in, b, sizeof(b)));
		printf(" %21s\n", cell);
	}
}

/* ---------------- JSON ---------------- */

static void json_pool(struct jw *w, const struct kvl_pool_info *p)
{
	jw_obj(w, "pool");
	jw_str(w, "name", p->name);
	jw_str(w, "mode", mode_name(p->mode));
	jw_str(w, "backend", p->backend);
	jw_str(w, "state", state_name(p->state));
	jw_u64(w, "epoch", p->epoch);
	jw_u64(w, "block_bytes", p->block_bytes);
	jw_u64(w, "capacity", p->capacity);
	jw_u64(w, "chunk_blocks", p->chunk_blocks);
	jw_u64(w, "backed", p->backed);
	jw_u64(w, "used", p->used);
	jw_u64(w, "backed_bytes", p->backed * p->block_bytes);
	jw_u64(w, "used_bytes", p->used * p->block_bytes);
	jw_u64(w, "leases", p->leases);
	jw_obj_end(w);
}

static void json_limit(struct jw *w, const char *key, uint32_t v)
{
	if (v == KVPOOL_UNLIMITED)
		jw_str(w, key, "max");
	else
		jw_u64(w, key, v);
}

static void json_id(struct jw *w, const char *key, uint32_t v)
{
	if (v == KVPOOL_ID_NONE)
		jw_null(w, key);
	else
		jw_u64(w, key, v);
}

static void json_tenants(struct jw *w, const struct ctl_snap *s)
{
	int i;

	jw_arr(w, "tenants");
	for (i = 0; i < s->ntenants; i++) {
		const struct kvl_tenant_info *t = &s->tenants[i];

		jw_obj(w, NULL);
		jw_str(w, "name", t->name);
		json_limit(w, "max", t->max);
		jw_u64(w, "min", t->min);
		jw_u64(w, "current", t->current);
		jw_u64(w, "peak", t->peak);
		jw_obj(w, "events");
		jw_u64(w, "max", t->ev_max);
		jw_u64(w, "stall", t->ev_stall);
		jw_u64(w, "reclaim", t->ev_reclaim);
		jw_u64(w, "fail", t->ev_fail);
		jw_obj_end(w);
		json_id(w, "uid", t->uid);
		json_id(w, "gid", t->gid);
		jw_u64(w, "leases", t->leases);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

static void json_clients(struct jw *w, const struct ctl_snap *s)
{
	int i;

	if (s->clients_err) {
		jw_null(w, "clients");
		return;
	}
	jw_arr(w, "clients");
	for (i = 0; i < s->nclients; i++) {
		const struct kvl_client_info *c = &s->clients[i];

		jw_obj(w, NULL);
		jw_u64(w, "lease_id", c->lease_id);
		jw_u64(w, "pid", c->pid);
		jw_u64(w, "uid", c->uid);
		jw_str(w, "tenant", c->tenant);
		jw_u64(w, "blocks", c->blocks);
		jw_bool(w, "connected", c->connected);
		jw_bool(w, "prefix_cache",
			ctl_prefix_lease(s->prefix, s->nprefix, c->lease_id));
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

static void json_tiers(struct jw *w, const struct ctl_snap *s)
{
	int i, k;

	jw_arr(w, "tiers");
	for (i = 0; i < s->ntiers; i++) {
		const struct kvl_tier_stats *t = &s->tiers[i];

		jw_obj(w, NULL);
		jw_u64(w, "tier", t->tier);
		jw_str(w, "pool", t->pool.name);
		jw_str(w, "kind", kind_name(t->kind));
		jw_u64(w, "capacity", t->pool.capacity);
		jw_u64(w, "backed", t->pool.backed);
		jw_u64(w, "used", t->pool.used);
		jw_u64(w, "mapped_bytes", t->mapped_bytes);
		jw_bool(w, "direct", t->flags & KVL_TIER_F_DIRECT);
		jw_bool(w, "io_uring", t->flags & KVL_TIER_F_URING);
		jw_bool(w, "pinned", t->flags & KVL_TIER_F_PINNED);
		jw_u64(w, "swaps", t->swaps);
		jw_u64(w, "blocks_in", t->blocks_in);
		jw_u64(w, "blocks_out", t->blocks_out);
		jw_u64(w, "bytes_in", t->bytes_in);
		jw_u64(w, "bytes_out", t->bytes_out);
		jw_u64(w, "copy_in_ns", t->copy_in_ns);
		jw_u64(w, "copy_out_ns", t->copy_out_ns);
		jw_u64(w, "errors", t->errors);
		jw_u64(w, "latency_p50_us", lat_pct(t, 0.5));
		jw_u64(w, "latency_p99_us", lat_pct(t, 0.99));
		jw_arr(w, "tenants");
		for (k = 0; i && k < s->nttenants[i]; k++) {
			const struct kvl_tenant_info *tt = &s->ttenants[i][k];

			jw_obj(w, NULL);
			jw_str(w, "name", tt->name);
			json_limit(w, "max", tt->max);
			jw_u64(w, "min", tt->min);
			jw_u64(w, "current", tt->current);
			jw_u64(w, "peak", tt->peak);
			jw_obj_end(w);
		}
		jw_arr_end(w);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_arr(w, "client_tiers");
	for (k = 0; k < s->nctiers; k++) {
		const struct kvl_client_tiers *c = &s->ctiers[k];

		jw_obj(w, NULL);
		jw_u64(w, "lease_id", c->lease_id);
		jw_u64(w, "pid", c->pid);
		jw_str(w, "tenant", c->tenant);
		jw_arr(w, "blocks");
		for (i = 0; i < s->ntiers; i++)
			jw_u64(w, NULL, c->joined[i] ? c->blocks[i] : 0);
		jw_arr_end(w);
		jw_u64(w, "seq_resident", c->seq_resident);
		jw_arr(w, "seq_swapped");
		for (i = 0; i < s->ntiers; i++)
			jw_u64(w, NULL, c->seq_swapped[i]);
		jw_arr_end(w);
		jw_u64(w, "seq_dropped", c->seq_dropped);
		jw_u64(w, "bytes_out", c->bytes_out);
		jw_u64(w, "bytes_in", c->bytes_in);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

static void json_status(const struct ctl_snap *s)
{
	struct jw w;

	jw_init(&w, stdout);
	jw_obj(&w, NULL);
	json_pool(&w, &s->pool);
	json_tenants(&w, s);
	ctl_prefix_json(&w, s->prefix, s->nprefix, s->prefix_err);
	json_clients(&w, s);
	if (s->ntiers)
		json_tiers(&w, s);
	jw_obj_end(&w);
	jw_end(&w);
}

static int parse_common(int argc, char **argv, const char *sub)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j")) {
			ctl_g.json = true;
		} else {
			ctl_err("%s: unknown argument '%s'", sub, argv[i]);
			ctl_usage_hint(sub);
			return CTL_EXIT_USAGE;
		}
	}
	return 0;
}

int cmd_status(int argc, char **argv)
{
	struct kvl_admin *adm;
	struct ctl_snap s;
	int ret;

	ret = parse_common(argc, argv, "status");
	if (ret)
		return ret;
	ret = open_admin("status", &adm);
	if (ret)
		return ret;
	ret = snap_get(adm, &s);
	kvl_admin_close(adm);
	if (ret)
		return ctl_fail("status", ret);
	if (ctl_g.json) {
		json_status(&s);
	} else {
		print_pool(&s.pool);
		print_tenants(&s);
		ctl_prefix_print(s.prefix, s.nprefix, s.prefix_err);
		print_clients(&s);
		print_tiers(&s);
	}
	snap_free(&s);
	return CTL_EXIT_OK;
}

/* ---------------- tenant list (shares the table) ---------------- */

int ctl_tenant_list(int argc, char **argv)
{
	struct kvl_admin *adm;
	struct ctl_snap s;
	int ret;

	ret = parse_common(argc, argv, "tenant");
	if (ret)
		return ret;
	ret = open_admin("tenant list", &adm);
	if (ret)
		return ret;
	ret = snap_get(adm, &s);
	kvl_admin_close(adm);
	if (ret)
		return ctl_fail("tenant list", ret);
	if (ctl_g.json) {
		struct jw w;

		jw_init(&w, stdout);
		jw_obj(&w, NULL);
		jw_str(&w, "pool", s.pool.name);
		json_tenants(&w, &s);
		jw_obj_end(&w);
		jw_end(&w);
	} else {
		printf("pool %s", s.pool.name);
		print_tenants(&s);
	}
	snap_free(&s);
	return CTL_EXIT_OK;
}

/* ---------------- metrics ---------------- */

/* The snapshot as the wire records that kvp_metrics_write() takes (the
 * daemon's /metrics endpoint writes the same records). */
static void pool_to_wire(const struct kvl_pool_info *p, struct kvp_pool_rec *r)
{
	memset(r, 0, sizeof(*r));
	memcpy(r->name, p->name, sizeof(r->name));
	r->block_bytes = p->block_bytes;
	r->capacity = p->capacity;
	r->backed = p->backed;
	r->used = p->used;
	r->state = p->state;
	r->epoch = p->epoch;
	r->leases = p->leases;
	r->chunk_blocks = p->chunk_blocks;
	r->tenants = p->tenants;
	r->mode = p->mode == KVL_MODE_MODULE ? KVP_MODE_MODULE :
		  p->mode == KVL_MODE_DAEMON ? KVP_MODE_INPROC : 0;
	memcpy(r->backend, p->backend, sizeof(r->backend));
}

static struct kvp_tenant_rec *tenants_to_wire(const struct kvl_tenant_info *ti,
					      int n)
{
	struct kvp_tenant_rec *t = calloc((size_t)n + 1, sizeof(*t));
	int i;

	for (i = 0; t && i < n; i++) {
		memcpy(t[i].name, ti[i].name, sizeof(t[i].name));
		t[i].max = ti[i].max;
		t[i].min = ti[i].min;
		t[i].current = ti[i].current;
		t[i].peak = ti[i].peak;
		t[i].ev_max = ti[i].ev_max;
		t[i].ev_stall = ti[i].ev_stall;
		t[i].ev_reclaim = ti[i].ev_reclaim;
		t[i].ev_fail = ti[i].ev_fail;
		t[i].uid = ti[i].uid;
		t[i].gid = ti[i].gid;
		t[i].leases = ti[i].leases;
	}
	return t;
}

/* The tiers (nothing when the daemon has no lower tier). */
static int tiers_to_wire(const struct ctl_snap *s, struct kvp_metrics_tiers *m,
			 struct kvp_tier_rec *tr,
			 struct kvp_tenant_rec **ttn,
			 struct kvp_client_tier_rec *ct)
{
	int i, k;

	memset(m, 0, sizeof(*m));
	for (i = 0; i < s->ntiers && i < KVP_MAX_TIERS; i++) {
		const struct kvl_tier_stats *x = &s->tiers[i];
		struct kvp_tier_rec *r = &tr[i];

		memset(r, 0, sizeof(*r));
		pool_to_wire(&x->pool, &r->pool);
		r->tier = x->tier;
		r->kind = x->kind;
		r->flags = x->flags;
		r->swaps = x->swaps;
		r->blocks_in = x->blocks_in;
		r->blocks_out = x->blocks_out;
		r->bytes_in = x->bytes_in;
		r->bytes_out = x->bytes_out;
		r->copy_in_ns = x->copy_in_ns;
		r->copy_out_ns = x->copy_out_ns;
		r->errors = x->errors;
		r->prefix_blocks = x->prefix_blocks;
		r->prefix_in = x->prefix_in;
		r->prefix_out = x->prefix_out;
		memcpy(r->lat_us, x->lat_us, sizeof(r->lat_us));
		if (i) {
			ttn[i] = tenants_to_wire(s->ttenants[i],
						 s->nttenants[i]);
			if (!ttn[i])
				return -ENOMEM;
			m->tenants[i] = ttn[i];
			m->ntenants[i] = (uint32_t)s->nttenants[i];
		}
	}
	m->tiers = tr;
	m->ntiers = (uint32_t)i;
	for (i = 0; i < s->nctiers; i++) {
		const struct kvl_client_tiers *c = &s->ctiers[i];
		struct kvp_client_tier_rec *r = &ct[i];

		memset(r, 0, sizeof(*r));
		r->lease_id = c->lease_id;
		r->pid = c->pid;
		r->uid = c->uid;
		memcpy(r->tenant, c->tenant, sizeof(r->tenant));
		for (k = 0; k < KVP_MAX_TIERS && k < KVL_MAX_TIERS; k++) {
			r->blocks[k] = c->blocks[k];
			r->seqs.swapped[k] = c->seq_swapped[k];
		}
		r->seqs.resident = c->seq_resident;
		r->seqs.dropped = c->seq_dropped;
		r->swaps = c->swaps;
		r->bytes_out = c->bytes_out;
		r->bytes_in = c->bytes_in;
	}
	m->clients = ct;
	m->nclients = (uint32_t)s->nctiers;
	return 0;
}

static int write_metrics(FILE *f, const struct ctl_snap *s,
			 enum kvp_metrics_scope scope)
{
	struct kvp_tier_rec tr[KVP_MAX_TIERS];
	struct kvp_tenant_rec *ttn[KVP_MAX_TIERS] = { NULL };
	struct kvp_metrics_pool mp;
	struct kvp_metrics_tiers mt;
	struct kvp_tenant_rec *t;
	struct kvp_client_rec *c;
	struct kvp_prefix_rec *pr;
	struct kvp_client_tier_rec *ct;
	int i, ret;

	memset(&mp, 0, sizeof(mp));
	t = tenants_to_wire(s->tenants, s->ntenants);
	c = calloc((size_t)s->nclients + 1, sizeof(*c));
	pr = calloc((size_t)s->nprefix + 1, sizeof(*pr));
	ct = calloc((size_t)s->nctiers + 1, sizeof(*ct));
	if (!t || !c || !pr || !ct) {
		free(t);
		free(c);
		free(pr);
		free(ct);
		return -ENOMEM;
	}
	pool_to_wire(&s->pool, &mp.pool);
	for (i = 0; i < s->nclients; i++) {
		const struct kvl_client_info *ci = &s->clients[i];

		c[i].lease_id = ci->lease_id;
		c[i].pid = ci->pid;
		c[i].uid = ci->uid;
		memcpy(c[i].tenant, ci->tenant, sizeof(c[i].tenant));
		c[i].blocks = ci->blocks;
		c[i].connected = ci->connected;
	}
	for (i = 0; i < s->nprefix && !s->prefix_err; i++) {
		const struct kvl_prefix_info *pi = &s->prefix[i];

		memcpy(pr[i].tenant, pi->tenant, sizeof(pr[i].tenant));
		memcpy(pr[i].ns, pi->ns, sizeof(pr[i].ns));
		pr[i].hot_lease = pi->hot_lease;
		pr[i].cold_lease = pi->cold_lease;
		pr[i].cached = pi->cached;
		pr[i].referenced = pi->referenced;
		pr[i].hits = pi->hits;
		pr[i].misses = pi->misses;
		pr[i].hit_tokens = pi->hit_tokens;
		pr[i].evictions = pi->evictions;
		pr[i].published = pi->published;
	}
	mp.tenants = t;
	mp.ntenants = (uint32_t)s->ntenants;
	mp.clients = c;
	mp.nclients = (uint32_t)s->nclients;
	mp.have_clients = !s->clients_err;
	mp.prefix = pr;
	mp.nprefix = s->prefix_err ? 0 : (uint32_t)s->nprefix;
	mp.have_prefix = !s->prefix_err;
	ret = tiers_to_wire(s, &mt, tr, ttn, ct);
	if (!ret)
		ret = kvp_metrics_write(f, &mp, 1, &mt, scope);
	if (!ret)
		ret = ctl_restart_metrics(f);
	/* the cluster tier's activity: the operator's */
	if (!ret && scope == KVP_METRICS_OPERATOR)
		ret = ctl_cluster_metrics(f);
	for (i = 0; i < KVP_MAX_TIERS; i++)
		free(ttn[i]);
	free(t);
	free(c);
	free(pr);
	free(ct);
	return ret;
}

int cmd_metrics(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "scope", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	enum kvp_metrics_scope scope = KVP_METRICS_OPERATOR;
	const char *output = NULL;
	struct kvl_admin *adm;
	struct ctl_snap s;
	int c, ret;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:js:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			output = optarg;
			break;
		case 's':
			if (!strcmp(optarg, "public")) {
				scope = KVP_METRICS_PUBLIC;
			} else if (!strcmp(optarg, "operator")) {
				scope = KVP_METRICS_OPERATOR;
			} else {
				ctl_err("metrics: --scope must be public or "
					"operator");
				return CTL_EXIT_USAGE;
			}
			break;
		case 'j':
			ctl_g.json = true;	/* the status object instead */
			break;
		default:
			ctl_err("metrics: bad option '%s'", argv[optind - 1]);
			ctl_usage_hint("metrics");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		ctl_err("metrics: unexpected argument '%s'", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	ret = open_admin("metrics", &adm);
	if (ret)
		return ret;
	ret = snap_get(adm, &s);
	kvl_admin_close(adm);
	if (ret)
		return ctl_fail("metrics", ret);
	if (ctl_g.json && !output) {
		json_status(&s);
	} else if (output) {
		char tmp[4096];
		FILE *f;

		snprintf(tmp, sizeof(tmp), "%s.tmp.%d", output, (int)getpid());
		f = fopen(tmp, "we");
		if (!f) {
			ret = -errno;
			snap_free(&s);
			return ctl_fail(output, ret);
		}
		ret = write_metrics(f, &s, scope);
		if (fclose(f) && !ret)
			ret = -errno;
		if (!ret && rename(tmp, output))
			ret = -errno;
		if (ret) {
			unlink(tmp);
			snap_free(&s);
			return ctl_fail(output, ret);
		}
	} else {
		ret = write_metrics(stdout, &s, scope);
		if (ret) {
			snap_free(&s);
			return ctl_fail("metrics", ret);
		}
	}
	snap_free(&s);
	return CTL_EXIT_OK;
}

/* ---------------- top ---------------- */

static volatile sig_atomic_t top_stop;

static void top_sig(int sig)
{
	top_stop = 1;
}

int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "once", no_argument, NULL, '1' },
		{ "count", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct termios old_tio, tio;
	bool once = false, tty;
	uint32_t interval_ms = 1000, count = 0, frame = 0;
	uint64_t v, prev_t = 0;
	uint32_t prev_used = 0;
	struct kvl_admin *adm;
	struct sigaction sa;
	int c, ret;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":i:1n:j", opts, NULL)) != -1) {
		switch (c) {
		case 'i': {
			double d;
			char *end;

			d = strtod(optarg, &end);
			if (*end || !(d >= 0.1 && d <= 3600))
				return ctl_bad_value("--interval", optarg, -ERANGE);
			interval_ms = (uint32_t)(d * 1000);
			break;
		}
		case '1':
			once = true;
			break;
		case 'j':
			ctl_g.json = true;
			break;
		case 'n':
			ret = ctl_parse_size(optarg, &v);
			if (ret || v > UINT32_MAX)
				return ctl_bad_value("--count", optarg,
						     ret ? ret : -ERANGE);
			count = (uint32_t)v;
			break;
		default:
			ctl_err("top: bad option '%s'", argv[optind - 1]);
			ctl_usage_hint("top");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		ctl_err("top: unexpected argument '%s'", argv[optind]);
		return CTL_EXIT_USAGE;
	}
	if (once)
		count = 1;
	ret = open_admin("top", &adm);
	if (ret)
		return ret;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = top_sig;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	tty = !once && !ctl_g.json && isatty(STDIN_FILENO) &&
	      !tcgetattr(STDIN_FILENO, &old_tio);
	if (tty) {
		tio = old_tio;
		tio.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		tcsetattr(STDIN_FILENO, TCSANOW, &tio);
	}
	ret = CTL_EXIT_OK;
	while (!top_stop) {
		struct ctl_snap s;
		uint64_t now = ctl_now_ns();
		struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
		int err;

		err = snap_get(adm, &s);
		if (err) {
			ret = ctl_fail("top", err);
			break;
		}
		if (ctl_g.json) {
			/* one status object per frame, for scripts */
			json_status(&s);
			snap_free(&s);
			if (count && ++frame >= count)
				break;
			poll(NULL, 0, (int)interval_ms);
			continue;
		}
		if (!once)
			fputs("\033[H\033[2J", stdout);
		print_pool(&s.pool);
		if (prev_t)
			printf("  used %+.1f blocks/s", ((double)s.pool.used -
			       (double)prev_used) * 1e9 / (double)(now - prev_t));
		else
			printf("  used +0.0 blocks/s");
		printf("   (%s)\n", once ? "one frame" :
		       "q or Ctrl-C quits");
		print_tenants(&s);
		ctl_prefix_print(s.prefix, s.nprefix, s.prefix_err);
		print_clients(&s);
		print_tiers(&s);
		fflush(stdout);
		prev_t = now;
		prev_used = s.pool.used;
		snap_free(&s);
		if (count && ++frame >= count)
			break;
		if (poll(tty ? &pfd : NULL, tty ? 1 : 0, (int)interval_ms) > 0) {
			char ch;

			if (read(STDIN_FILENO, &ch, 1) == 1 &&
			    (ch == 'q' || ch == 'Q'))
				break;
		}
	}
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, &old_tio);
	kvl_admin_close(adm);
	return ret;
}
