/* SPDX-License-Identifier: MIT */
/*
 * kvpoold.h - the whole daemon, for what drives it from outside its files
 * (main.c's kvd_setup(), the request fuzzer, the unit tests): the headers
 * of every floor, core.h first.  A file of daemon/ includes the headers of
 * what it uses instead (Documentation/daemon.rst, "Floors").
 */
#ifndef KVPOOLD_H
#define KVPOOLD_H

#include "core.h"
#include "ledger.h"
#include "tier_spec.h"
#include "tier.h"
#include "swap.h"
#include "tenants.h"
#include "reload.h"
#include "metrics.h"
#include "server.h"
#include "conn.h"
#include "ops.h"
#include "devbuf.h"

/*
 * main.c: set up the daemon described by d->o (backend, ledger,
 * socket); main() does it after parsing options, the fuzz harness
 * (tests/fuzz/fuzz_request.c) with options of its own.
 */
int kvd_setup(struct kvd *d);

#endif /* KVPOOLD_H */
