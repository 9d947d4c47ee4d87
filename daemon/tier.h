/* SPDX-License-Identifier: MIT */
/*
 * tier.h - the pools' memory: the backends (backend_cpu.c,
 * backend_cuda.c) and the tiers (tier.c, tier_dram.c, tier_nvme.c).
 */
#ifndef KVD_TIER_H
#define KVD_TIER_H

#include "core.h"

extern const struct kvd_backend_ops kvd_backend_cpu;
extern const struct kvd_backend_ops kvd_backend_cuda;
/* Close the driver the cuda probe opened, when cuda is not used. */
void kvd_cuda_probe_done(void);


extern const struct kvd_tier_ops kvd_tier_top;
extern const struct kvd_tier_ops kvd_tier_dram;
extern const struct kvd_tier_ops kvd_tier_nvme;

/* tier.c: the pools' memory. */
/* Fill d->pools from the options (top first) and set up their memory;
 * called before the ledger is opened. */
int kvd_pools_init(struct kvd *d);
void kvd_pools_fini(struct kvd *d);
/* Re-do a pool's memory set-up after the ledger gave it another
 * geometry (module re-attach). */
int kvd_pool_reinit(struct kvd_pool *p);
const char *kvd_tier_kind_name(uint32_t kind);


/* Backend-specific helpers. */
void *kvd_cpu_base(struct kvd *d);

#endif /* KVD_TIER_H */
