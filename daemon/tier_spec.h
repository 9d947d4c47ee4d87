/* SPDX-License-Identifier: MIT */
/*
 * tier_spec.h - --tier specs and kvpoold.conf tier values (tier_spec.c).
 */
#ifndef KVD_TIER_SPEC_H
#define KVD_TIER_SPEC_H

#include "core.h"

/* tier_spec.c: a --tier spec (or a kvpoold.conf tier = value) into *t,
 * 0 or -errno; kvd_tier_parse() adds one to o->tiers (-E2BIG: full). */
int kvd_tier_spec_parse(const char *spec, struct kvd_tier_spec *t);
int kvd_tier_parse(struct kvd_opts *o, const char *spec);

#endif /* KVD_TIER_SPEC_H */
