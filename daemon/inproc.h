/* SPDX-License-Identifier: MIT */
/*
 * inproc.h - kvpoold's in-process ledger requests (ledger.c); what they
 * call back above the ledger goes through d->hooks (core.h).  Every
 * request names the pool (tier) it is about.
 */
#ifndef KVPOOLD_INPROC_H
#define KVPOOLD_INPROC_H

#include "core.h"

int kvd_ip_lease_open(struct kvd_pool *p, const struct kvpool_cred *cred,
		      void *client, const char *tenant,
		      struct kvpool_lease **out);
void kvd_ip_lease_close(struct kvd_pool *p, struct kvpool_lease *lease);
int kvd_ip_attach(struct kvd_pool *p, struct kvpool_lease *lease,
		  const char *pool, const char *tenant,
		  const struct kvpool_cred *cred);
int kvd_ip_grant(struct kvd_pool *p, struct kvpool_lease *lease,
		 uint32_t count, uint32_t flags, uint64_t timeout_ns,
		 uint32_t *blocks, int sock);
int kvd_ip_release(struct kvd_pool *p, struct kvpool_lease *lease,
		   const uint32_t *blocks, uint32_t count, uint32_t flags);
/* The blocks @lease holds from index @from up, at most @count: the count. */
int kvd_ip_held(struct kvd_pool *p, struct kvpool_lease *lease,
		uint32_t from, uint32_t count, uint32_t *blocks);
void kvd_ip_status(struct kvd_pool *p, struct kvpool_lease *lease,
		   struct kvpool_status *st);
int kvd_ip_tenant_op(struct kvd *d, int op, const struct kvp_tenant *t);
int kvd_ip_tenant_list(struct kvd_pool *p, struct kvp_tenant_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total);
int kvd_ip_lease_list(struct kvd_pool *p, struct kvp_client_rec *out,
		      uint32_t start, uint32_t cap, uint32_t *total, uid_t uid);
int kvd_mod_lease_list(struct kvd_pool *p, struct kvp_client_rec *out,
		       uint32_t start, uint32_t cap, uint32_t *total, uid_t uid);
/* Back blocks [0, @blocks) and tell the ledger (a restart's restored
 * leases): 0 or -ENOMEM. */
int kvd_ip_back(struct kvd_pool *p, uint32_t blocks);
uint32_t kvd_lease_blocks(struct kvd_pool *p, uint64_t lease_id);

#endif /* KVPOOLD_INPROC_H */
