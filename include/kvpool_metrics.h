/* SPDX-License-Identifier: MIT */
/*
 * kvpool_metrics.h - the metrics series of kvpool in the Prometheus text
 * exposition format (version 0.0.4), written from the admin records of
 * kvpool_proto.h.  `kvpoolctl metrics` and kvpoold's /metrics endpoint both
 * print through kvp_metrics_write(), so that they cannot drift apart.
 * Documentation/tools.rst lists the series.
 */
#ifndef KVPOOL_METRICS_H
#define KVPOOL_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvpool_proto.h"

/* The Content-Type of the text. */
#define KVP_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* One pool and what is in it. */
struct kvp_metrics_pool {
	struct kvp_pool_rec pool;
	const struct kvp_tenant_rec *tenants;
	uint32_t ntenants;
	const struct kvp_client_rec *clients;
	uint32_t nclients;
	bool have_clients;	/* false: leases unknown, series left out */
	const struct kvp_prefix_rec *prefix;	/* the tenants' prefix caches */
	uint32_t nprefix;
	bool have_prefix;	/* false: no kvpoold to ask, series left out */
};

/*
 * The tiers of a kvpoold with lower tiers: every pool it owns (top first)
 * with its swap counters, the tenants of each lower pool, and the clients'
 * blocks and sequences per tier.
 */
struct kvp_metrics_tiers {
	const struct kvp_tier_rec *tiers;	/* [0]: the top pool */
	uint32_t ntiers;
	const struct kvp_tenant_rec *tenants[KVP_MAX_TIERS];	/* [0] unused */
	uint32_t ntenants[KVP_MAX_TIERS];
	const struct kvp_client_tier_rec *clients;
	uint32_t nclients;
};

/*
 * Which series are written (Documentation/admin-guide.rst, "What a local
 * user sees"):
 *  KVP_METRICS_PUBLIC	what any local user may see: the pools, every
 *			tenant's limits, blocks and ledger events (as the
 *			module's sysfs shows them), the tiers' capacity and
 *			used blocks and the tenants' blocks in each tier;
 *  KVP_METRICS_OPERATOR	also the series of one client (lease and pid
 *			labels: kvpool_client_*), the prefix caches' and
 *			the swaps' activity (kvpool_prefix_*,
 *			kvpool_tier_swap_*).
 */
enum kvp_metrics_scope {
	KVP_METRICS_PUBLIC = 0,
	KVP_METRICS_OPERATOR = 1,
};

/*
 * Write the series of @scope for npools pools (each family once, with a
 * sample per pool, tenant or lease), and the tier series when tiers is not
 * NULL and has lower tiers (ntiers > 1).  0, or -errno if writing failed.
 */
int kvp_metrics_write(FILE *f, const struct kvp_metrics_pool *pools,
		      unsigned int npools,
		      const struct kvp_metrics_tiers *tiers,
		      enum kvp_metrics_scope scope);

/*
 * The cluster tier's series (kvpool_cluster_*), nothing when it is off.
 * 0, or -errno if writing failed.
 */
int kvp_metrics_write_cluster(FILE *f, const struct kvp_cluster_status *st);

/*
 * What the last start kept of the daemon before it (kvpool_restart_*):
 * pool-wide figures, in every scope.  0, or -errno if writing failed.
 */
int kvp_metrics_write_restart(FILE *f, const struct kvp_restart_info *ri);

#endif /* KVPOOL_METRICS_H */
