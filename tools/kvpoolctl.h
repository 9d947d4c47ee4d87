// SPDX-License-Identifier: MIT
/*
 * kvpoolctl.h - the subcommands of kvpoolctl(8).
 */
#ifndef KVPOOLCTL_H
#define KVPOOLCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl_util.h"

/* Options given before the subcommand. */
struct ctl_global {
	bool json;		/* --json / -j */
	const char *socket;	/* --socket PATH: the daemon's socket */
	const char *pool;	/* --pool NAME */
};

extern struct ctl_global ctl_g;

/* Each returns a CTL_EXIT_* code.  argv[0] is the subcommand's name. */
int cmd_plan(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_tenant(int argc, char **argv);
int cmd_monitor(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
/* `tenant list` (in ctl_status.c, shares the tenant table). */
int ctl_tenant_list(int argc, char **argv);
int cmd_prefix(int argc, char **argv);
int cmd_cluster(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int ctl_restart_metrics(FILE *f);
int cmd_route(int argc, char **argv);
/* ctl_cluster.c: the kvpool_cluster_* series of the local kvpoold (none
 * when it has no cluster tier or does not answer). */
int ctl_cluster_metrics(FILE *f);

/* ctl_prefix.c: the prefix caches' part of status and top. */
struct kvl_admin;
struct kvl_prefix_info;
int ctl_prefix_get(struct kvl_admin *adm, const char *pool,
		   struct kvl_prefix_info *out, int cap, int *n);
void ctl_prefix_print(const struct kvl_prefix_info *p, int n, int err);
void ctl_prefix_json(struct jw *w, const struct kvl_prefix_info *p, int n,
		     int err);
bool ctl_prefix_lease(const struct kvl_prefix_info *p, int n, uint64_t id);

/* Print "kvpoolctl: <what>: <strerror>" style errors. */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report a bad option value and return CTL_EXIT_USAGE. */
int ctl_bad_value(const char *opt, const char *val, int err);
/* Map an -errno from the admin API to an exit code, with a message. */
int ctl_fail(const char *what, int err);
/* Short usage line of a subcommand, for errors. */
void ctl_usage_hint(const char *sub);

#endif /* KVPOOLCTL_H */
