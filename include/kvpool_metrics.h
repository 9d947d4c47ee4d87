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
 * Write every series for npools pools (each family once, with a sample per
 * pool, tenant or lease).  0, or -errno if writing failed.
 */
int kvp_metrics_write(FILE *f, const struct kvp_metrics_pool *pools,
		      unsigned int npools);

#endif /* KVPOOL_METRICS_H */
