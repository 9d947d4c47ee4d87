/* SPDX-License-Identifier: MIT */
/*
 * reload.h - a re-read configuration applied (reload.c).
 */
#ifndef KVD_RELOAD_H
#define KVD_RELOAD_H

#include "core.h"

/* reload.c: apply a re-read configuration (SIGHUP). */
int kvd_reconfigure(struct kvd *d, const struct kvd_opts *n,
		    const struct kvd_tenant_conf *t, int nt);

#endif /* KVD_RELOAD_H */
