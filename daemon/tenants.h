/* SPDX-License-Identifier: MIT */
/*
 * tenants.h - the configuration's tenants, in either ledger (tenants.c).
 */
#ifndef KVD_TENANTS_H
#define KVD_TENANTS_H

#include "core.h"

/* tenants.c: the configuration's tenants, in either ledger. */
struct kvd_tenant_conf;
/* Fill up to cap records of pool p; returns the number of tenants or
 * -errno. */
int kvd_tenant_list(struct kvd_pool *p, struct kvp_tenant_rec *out,
		    uint32_t cap);
/* Does pool p have tenant @name?  1, 0 or -errno. */
int kvd_tenant_exists(struct kvd_pool *p, const char *name);
/*
 * The tenants of the top pool that a peer of @uid and groups gids[0..n)
 * may attach to by its uid or a group (their allow_uid or allow_gid; an
 * automatic uid-N tenant allows its uid): names in a malloc'd array, the
 * count or -errno.
 */
int kvd_tenants_visible(struct kvd *d, uint32_t uid, const uint32_t *gids,
			int ngids, char (**names)[KVPOOL_NAME_LEN]);
/* Unknown pools, limits a pool cannot hold: 0 or -EINVAL (logged with
 * the line). */
int kvd_tenants_check(struct kvd *d, const struct kvd_tenant_conf *t, int n);
/* Create/update t[0..n), delete what an earlier call declared and this
 * one does not (when idle).  0, or the first error (logged). */
int kvd_tenants_apply(struct kvd *d, const struct kvd_tenant_conf *t, int n);

#endif /* KVD_TENANTS_H */
