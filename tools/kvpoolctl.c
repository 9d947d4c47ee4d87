// SPDX-License-Identifier: MIT
/*
 * kvpoolctl.c - the kvpool operator's tool: git-style subcommands.
 *
 *   kvpoolctl [--json] [--socket PATH] [--pool NAME] COMMAND [ARGS]
 *
 * See kvpoolctl(8) and `kvpoolctl help COMMAND`.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpoolctl.h"

#ifndef KVPOOL_VERSION
#define KVPOOL_VERSION "0.1"
#endif

struct ctl_global ctl_g;

struct ctl_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
	const char *usage;	/* after "kvpoolctl NAME" */
	const char *help;	/* longer text for `kvpoolctl help NAME` */
};

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const struct ctl_cmd cmds[] = {
	{ "status", cmd_status, "show pools, tenants and clients",
	  "[--json]",
	  "Shows each pool (block size, capacity, backed, used), its tenants\n"
	  "(max, min, current, peak, events), their prefix caches (cached,\n"
	  "referenced, hits, misses, hit tokens, evictions; from kvpoold) and\n"
	  "its clients (lease, pid, uid, tenant, blocks held; 'cache' marks the\n"
	  "daemon's leases of a prefix cache).  Reads the module (sysfs,\n"
	  "generic netlink) when /dev/kvpool exists, otherwise asks kvpoold\n"
	  "over its socket.\n" },
	{ "tenant", cmd_tenant, "add, delete, change or list tenants",
	  "add NAME [--max N|max] [--min N] [--uid UID] [--gid GID]\n"
	  "       kvpoolctl tenant set NAME [--max N|max] [--min N] [--uid UID] [--gid GID]\n"
	  "       kvpoolctl tenant del NAME\n"
	  "       kvpoolctl tenant list [--json]",
	  "A tenant is an accounting group with a hard limit (--max, blocks,\n"
	  "or 'max' for none) and a protected amount (--min, blocks).  --uid and\n"
	  "--gid name who may attach to it (besides CAP_SYS_ADMIN).  Changing\n"
	  "tenants needs CAP_SYS_ADMIN (module) or the daemon's admin rights.\n"
	  "Lowering max below current refuses new grants and posts reclaim.\n" },
	{ "prefix", cmd_prefix, "list, flush or share tenants' prefix caches",
	  "list [--json]\n"
	  "       kvpoolctl prefix flush TENANT\n"
	  "       kvpoolctl prefix share TENANT NAMESPACE\n"
	  "       kvpoolctl prefix unshare TENANT",
	  "kvpoold keeps one prefix cache per tenant, shared by all its\n"
	  "processes: full KV blocks found again by their token ids.  'list'\n"
	  "shows each tenant's cached and referenced blocks, hits, misses, hit\n"
	  "tokens, evictions and blocks published.  'flush' gives back every\n"
	  "unreferenced cached block of the tenant (the referenced ones are no\n"
	  "longer found and go when their last user lets go).  'share' puts the\n"
	  "tenant in a named namespace whose members hit each other's blocks:\n"
	  "each member learns which prompts the others served (match counts,\n"
	  "timing).  'unshare' gives it its own namespace back.  Both flush the\n"
	  "tenant's cache.  Needs kvpoold; changes need its admin rights.\n" },
	{ "cluster", cmd_cluster, "the nodes of a cluster tier, or this node's counters",
	  "[--nodes HOST:PORT[,...]] [--json]",
	  "With --nodes (the Redis Cluster's seeds): every live kvpool node,\n"
	  "from its heartbeat: free, capacity, used and backed blocks of its\n"
	  "top pool, block size, blocks in its prefix caches and the blocks its\n"
	  "stream of events says it holds; --json prints each heartbeat record.\n"
	  "Without: the local kvpoold's cluster tier (state, slot map, fetch\n"
	  "and store counters, values refused by reason, routing counters).\n"
	  "See Documentation/cluster.rst.\n" },
	{ "restart", cmd_restart, "what kvpoold kept of the daemon before it",
	  "[--json]",
	  "Where kvpoold keeps its pools' memory for the next start (with the\n"
	  "module's pools, in the service manager's store, or nowhere), and\n"
	  "what this start found: nothing, an earlier daemon's memory used\n"
	  "(blocks, bytes, prefix-cache entries kept: clients go on without\n"
	  "recomputing) or refused (why: another metadata version, a changed\n"
	  "geometry, an edit in flight; every pool then started zeroed), and\n"
	  "how long after its start it served.  Needs kvpoold.\n" },
	{ "route", cmd_route, "the node holding the longest cached prefix of a prompt",
	  "--nodes HOST:PORT[,...] --model NAME --key FILE --tokens FILE [--json]",
	  "Reads the nodes' heartbeats and streams of stored/removed blocks and\n"
	  "names the live node that holds the longest prefix of full blocks of\n"
	  "the token ids in FILE (decimal, '-' for stdin) for model NAME (as\n"
	  "the engine declared it) and the tenant whose cluster namespace key\n"
	  "is --key; ties and misses go to the node with the most free blocks.\n"
	  "libkvroute (kvroute.h) answers the same for a router.\n" },
	{ "monitor", cmd_monitor, "print ledger events as they happen",
	  "[--json] [--count N] [--timeout SECONDS]",
	  "Subscribes to the 'event' multicast group of the generic netlink\n"
	  "family 'kvpool' and prints one line per event (grow, idle, reclaim,\n"
	  "quota, stall, client closed, owner).  Observers may lose events:\n"
	  "a jump in the sequence number is reported as a gap.  Needs the\n"
	  "module; without it kvpoolctl says so and exits with status 3.\n" },
	{ "top", cmd_top, "refreshing view of pools and tenants",
	  "[--interval SECONDS] [--once] [--count N] [--json]",
	  "Redraws pools and tenants every --interval seconds (default 1)\n"
	  "with the rate of change of used blocks; q or Ctrl-C quits.\n"
	  "--once prints one frame without clearing the screen; --json prints\n"
	  "the status object once per frame.\n" },
	{ "metrics", cmd_metrics, "Prometheus text exposition of every counter",
	  "[--output FILE] [--scope public|operator] [--json]",
	  "Prints every gauge and counter of every pool and tenant in the\n"
	  "Prometheus text format (kvpool_pool_*, kvpool_tenant_*,\n"
	  "kvpool_prefix_* when kvpoold runs).  --output\n"
	  "writes FILE atomically (for node_exporter's textfile collector).\n"
	  "--scope public leaves out the series of one client and the prefix\n"
	  "caches' and swaps' activity, as kvpoold's /metrics does by default;\n"
	  "operator (the default) writes everything the caller may see.\n"
	  "--json prints the same figures as 'kvpoolctl status --json'.\n" },
	{ "plan", cmd_plan, "KV-cache capacity arithmetic for a model",
	  "[--model NAME | --layers N --kv-heads N --head-dim N] [--ctx N]\n"
	  "       [--dtype bf16|fp8|int8|int4] [--block-tokens N | --block-bytes B]\n"
	  "       [--gpu-mem B] [--tp N] [--weights-bytes B] [--overhead B]\n"
	  "       [--util F] [--json] | --list-models",
	  "Bytes per token = 2 x layers x kv_heads x head_dim x bytes per\n"
	  "element (bf16 2, fp8 1, int8 1, int4 0.5 plus an FP16 scale per 32\n"
	  "values); bytes per request = bytes per token x ctx; blocks per\n"
	  "request; how many requests fit in one GPU after the weights; and what\n"
	  "a fixed gpu_memory_utilization (--util) leaves for KV, or that it\n"
	  "leaves nothing.  Needs neither the module nor the daemon.\n" },
	{ "help", cmd_help, "show help for a command", "[COMMAND]", NULL },
	{ "version", cmd_version, "show the version", "", NULL },
};

#define N_CMDS (sizeof(cmds) / sizeof(cmds[0]))

void ctl_err(const char *fmt, ...)
{
	va_list ap;

	fputs("kvpoolctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int ctl_bad_value(const char *opt, const char *val, int err)
{
	ctl_err("%s: '%s' is %s", opt, val,
		err == -ERANGE ? "out of range" : "not a valid number");
	return CTL_EXIT_USAGE;
}

int ctl_fail(const char *what, int err)
{
	switch (err) {
	case -EPERM:
	case -EACCES:
		ctl_err("%s: permission denied (needs root/CAP_SYS_ADMIN or the daemon's admin rights)",
			what);
		return CTL_EXIT_PERM;
	case -ENOENT:
	case -ENODEV:
		ctl_err("%s: no such pool or tenant", what);
		return CTL_EXIT_NOENT;
	case -ECONNREFUSED:
	case -ENXIO:
	case -ENOTCONN:
	case -EHOSTDOWN: {
		const char *dev = getenv("KVPOOL_DEVICE");
		const char *sock = ctl_g.socket ? ctl_g.socket :
				   getenv("KVPOOL_SOCKET") ? getenv("KVPOOL_SOCKET") :
				   "/run/kvpool/kvpool.sock";

		if (!dev || !*dev)
			dev = "/dev/kvpool";
		if (access(dev, F_OK))
			ctl_err("%s: no ledger: %s is absent (module not loaded) and kvpoold is not running (socket %s)",
				what, dev, sock);
		else
			ctl_err("%s: no ledger: the module's generic netlink family 'kvpool' is not available and kvpoold is not running (socket %s)",
				what, sock);
		return CTL_EXIT_NOLEDGER;
	}
	default:
		ctl_err("%s: %s", what, strerror(-err));
		return CTL_EXIT_ERROR;
	}
}

static const struct ctl_cmd *find_cmd(const char *name)
{
	size_t i;

	for (i = 0; i < N_CMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

void ctl_usage_hint(const char *sub)
{
	const struct ctl_cmd *c = find_cmd(sub);

	if (c)
		fprintf(stderr, "usage: kvpoolctl %s %s\n", c->name, c->usage);
}

static void usage(FILE *f)
{
	size_t i;

	fputs("usage: kvpoolctl [--json] [--socket PATH] [--pool NAME] COMMAND [ARGS]\n\n"
	      "Commands:\n", f);
	for (i = 0; i < N_CMDS; i++)
		fprintf(f, "  %-9s %s\n", cmds[i].name, cmds[i].summary);
	fputs("\n'kvpoolctl help COMMAND' shows a command's options.\n"
	      "Exit status: 0 ok, 1 error, 2 usage, 3 no module and no daemon,\n"
	      "4 permission denied, 5 no such pool or tenant.\n", f);
}

static int cmd_help(int argc, char **argv)
{
	const struct ctl_cmd *c;

	if (argc < 2) {
		usage(stdout);
		return CTL_EXIT_OK;
	}
	c = find_cmd(argv[1]);
	if (!c) {
		ctl_err("help: unknown command '%s'", argv[1]);
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
	printf("usage: kvpoolctl %s %s\n\n%s\n", c->name, c->usage, c->summary);
	if (c->help) {
		printf("\n%s", c->help);
		printf("\nSee kvpoolctl-%s(8).\n", c->name);
	}
	return CTL_EXIT_OK;
}

static int cmd_version(int argc, char **argv)
{
	printf("kvpoolctl %s\n", KVPOOL_VERSION);
	return CTL_EXIT_OK;
}

int main(int argc, char **argv)
{
	const struct ctl_cmd *c;
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (a[0] != '-')
			break;
		if (!strcmp(a, "--json") || !strcmp(a, "-j")) {
			ctl_g.json = true;
		} else if (!strcmp(a, "--socket") || !strcmp(a, "--pool")) {
			if (i + 1 >= argc) {
				ctl_err("option %s needs a value", a);
				return CTL_EXIT_USAGE;
			}
			if (!strcmp(a, "--socket"))
				ctl_g.socket = argv[++i];
			else
				ctl_g.pool = argv[++i];
		} else if (!strncmp(a, "--socket=", 9)) {
			ctl_g.socket = a + 9;
		} else if (!strncmp(a, "--pool=", 7)) {
			ctl_g.pool = a + 7;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return CTL_EXIT_OK;
		} else if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
			return cmd_version(0, NULL);
		} else {
			ctl_err("unknown option '%s'", a);
			usage(stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return CTL_EXIT_USAGE;
	}
	c = find_cmd(argv[i]);
	if (!c) {
		ctl_err("unknown command '%s' (see 'kvpoolctl help')", argv[i]);
		return CTL_EXIT_USAGE;
	}
	if (i + 1 < argc && (!strcmp(argv[i + 1], "--help") ||
			     !strcmp(argv[i + 1], "-h"))) {
		char *hargv[] = { (char *)"help", (char *)c->name, NULL };

		return cmd_help(2, hargv);
	}
	return c->fn(argc - i, argv + i);
}
