/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - the Prometheus endpoint (metrics.c).
 */
#ifndef KVD_METRICS_H
#define KVD_METRICS_H

#include "core.h"

/* metrics.c: the Prometheus endpoint.  bind before dropping privileges
 * (the address may be a low port), start after; both 0 when off. */
int kvd_metrics_bind(struct kvd *d);
int kvd_metrics_start(struct kvd *d);
void kvd_metrics_stop(struct kvd *d);

#endif /* KVD_METRICS_H */
