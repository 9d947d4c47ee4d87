// SPDX-License-Identifier: MIT
/*
 * ctl_restart.c - `kvpoolctl restart`: what the local kvpoold kept of the
 * daemon before it (kept pool memory, Documentation/daemon.rst, "Restart
 * and epochs"), and its kvpool_restart_* series for `kvpoolctl metrics`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "kvlease.h"
#include "kvpool_metrics.h"
#include "kvpoolctl.h"

static const char *const stores[] = { "none", "module", "systemd" };

static int restart_get(struct kvl_restart_info *ri)
{
	struct kvl_admin *adm;
	int r;

	r = kvl_admin_open(ctl_g.socket, &adm);
	if (r)
		return r;
	r = kvl_admin_restart_info(adm, ri);
	kvl_admin_close(adm);
	return r;
}

int ctl_restart_metrics(FILE *f)
{
	struct kvl_restart_info ri;
	struct kvp_restart_info w;

	if (restart_get(&ri))
		return 0;	/* an older kvpoold, or none */
	memcpy(&w, &ri, sizeof(w));
	return kvp_metrics_write_restart(f, &w);
}

int cmd_restart(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvl_restart_info ri;
	const char *store;
	int ch, r;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "j", lo, NULL)) != -1) {
		switch (ch) {
		case 'j': ctl_g.json = true; break;
		default: ctl_usage_hint("restart"); return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		ctl_usage_hint("restart");
		return CTL_EXIT_USAGE;
	}
	r = restart_get(&ri);
	if (r)
		return ctl_fail("restart", r);
	store = ri.store < 3 ? stores[ri.store] : "?";
	if (ctl_g.json) {
		struct jw w;

		jw_init(&w, stdout);
		jw_obj(&w, NULL);
		jw_str(&w, "store", store);
		jw_bool(&w, "kept", ri.kept);
		jw_bool(&w, "preserved", ri.preserved);
		jw_str(&w, "why", ri.why);
		jw_u64(&w, "lives", ri.lives);
		jw_u64(&w, "blocks", ri.blocks);
		jw_u64(&w, "bytes", ri.bytes);
		jw_u64(&w, "prefix_entries", ri.prefix_entries);
		jw_u64(&w, "resume_ns", ri.resume_ns);
		jw_u64(&w, "uptime_ns", ri.uptime_ns);
		jw_obj_end(&w);
		jw_end(&w);
		return CTL_EXIT_OK;
	}
	printf("kept for the next start: %s\n",
	       ri.store ? (ri.store == 1 ? "with the module's pools" :
			   "in the service manager's store") :
	       "nothing (contents die with kvpoold)");
	if (!ri.kept)
		printf("this start: fresh (nothing kept by an earlier daemon)\n");
	else if (ri.preserved)
		printf("this start: kept %llu blocks (%.1f MiB), %llu prefix "
		       "entries; start %llu on this memory\n",
		       (unsigned long long)ri.blocks, ri.bytes / 1048576.0,
		       (unsigned long long)ri.prefix_entries,
		       (unsigned long long)ri.lives);
	else
		printf("this start: kept memory refused (%s); every pool "
		       "started zeroed\n", ri.why);
	printf("serving %.1f ms after start; up %.1f s\n", ri.resume_ns / 1e6,
	       ri.uptime_ns / 1e9);
	return CTL_EXIT_OK;
}
