// SPDX-License-Identifier: MIT
/*
 * ctl_monitor.c - `kvpoolctl monitor`: the generic netlink "event" group of
 * the "kvpool" family, one line (or JSON object) per event, with gaps in
 * the per-pool sequence numbers reported as lost events.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netlink/errno.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>

#include <linux/kvpool.h>

#include "kvlease.h"
#include "kvpoolctl.h"

#define MON_POOLS 16

struct mon {
	struct {
		char name[KVPOOL_NAME_LEN];
		uint64_t last_seq;
	} pools[MON_POOLS];
	uint64_t events, lost;
	uint64_t max_events;
	bool done;
};

static volatile sig_atomic_t mon_stop;

static void mon_sig(int sig)
{
	mon_stop = 1;
}

static const char *event_name(uint32_t t)
{
	switch (t) {
	case KVPOOL_EVENT_CLIENT_CLOSED: return "client-closed";
	case KVPOOL_EVENT_GROW: return "grow";
	case KVPOOL_EVENT_IDLE: return "idle";
	case KVPOOL_EVENT_RECLAIM: return "reclaim";
	case KVPOOL_EVENT_QUOTA: return "quota";
	case KVPOOL_EVENT_STALL: return "stall";
	case KVPOOL_EVENT_BACKED: return "backed";
	case KVPOOL_EVENT_OWNER: return "owner";
	default: return "unknown";
	}
}

static uint64_t *pool_seq(struct mon *m, const char *pool)
{
	int i;

	for (i = 0; i < MON_POOLS; i++) {
		if (!strcmp(m->pools[i].name, pool))
			return &m->pools[i].last_seq;
		if (!m->pools[i].name[0]) {
			snprintf(m->pools[i].name, sizeof(m->pools[i].name),
				 "%s", pool);
			return &m->pools[i].last_seq;
		}
	}
	return &m->pools[MON_POOLS - 1].last_seq;
}

static void stamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min,
		 tm.tm_sec, ts.tv_nsec / 1000000);
}

static int mon_event(struct nl_msg *msg, void *arg)
{
	struct mon *m = arg;
	struct nlattr *tb[KVPOOL_A_MAXATTR + 1];
	const char *pool = "", *tenant = "";
	uint32_t type = 0, blocks = 0, earg = 0;
	uint64_t seq = 0, lease = 0, *last;
	char ts[32];

	if (genlmsg_hdr(nlmsg_hdr(msg))->cmd != KVPOOL_CMD_EVENT)
		return NL_SKIP;
	if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, KVPOOL_A_MAXATTR, NULL) < 0)
		return NL_SKIP;
	if (tb[KVPOOL_A_POOL])
		pool = nla_get_string(tb[KVPOOL_A_POOL]);
	if (tb[KVPOOL_A_TENANT])
		tenant = nla_get_string(tb[KVPOOL_A_TENANT]);
	if (tb[KVPOOL_A_EVENT_TYPE])
		type = nla_get_u32(tb[KVPOOL_A_EVENT_TYPE]);
	if (tb[KVPOOL_A_EVENT_SEQ])
		seq = nla_get_u64(tb[KVPOOL_A_EVENT_SEQ]);
	if (tb[KVPOOL_A_EVENT_LEASE])
		lease = nla_get_u64(tb[KVPOOL_A_EVENT_LEASE]);
	if (tb[KVPOOL_A_EVENT_BLOCKS])
		blocks = nla_get_u32(tb[KVPOOL_A_EVENT_BLOCKS]);
	if (tb[KVPOOL_A_EVENT_ARG])
		earg = nla_get_u32(tb[KVPOOL_A_EVENT_ARG]);

	stamp(ts, sizeof(ts));
	last = pool_seq(m, pool);
	if (*last && seq > *last + 1) {
		uint64_t lost = seq - *last - 1;

		m->lost += lost;
		if (ctl_g.json)
			printf("{\"time\": \"%s\", \"pool\": \"%s\", \"gap\": %llu, \"from_seq\": %llu, \"to_seq\": %llu}\n",
			       ts, pool, (unsigned long long)lost,
			       (unsigned long long)(*last + 1),
			       (unsigned long long)(seq - 1));
		else
			printf("%s %-8s GAP: %llu event(s) lost (seq %llu..%llu)\n",
			       ts, pool, (unsigned long long)lost,
			       (unsigned long long)(*last + 1),
			       (unsigned long long)(seq - 1));
	}
	*last = seq;
	m->events++;
	if (ctl_g.json)
		printf("{\"time\": \"%s\", \"pool\": \"%s\", \"seq\": %llu, \"event\": \"%s\", \"tenant\": \"%s\", \"lease_id\": %llu, \"blocks\": %u, \"arg\": %u}\n",
		       ts, pool, (unsigned long long)seq, event_name(type),
		       tenant, (unsigned long long)lease, blocks, earg);
	else
		printf("%s %-8s seq %-8llu %-13s tenant %-12s lease %-6llu blocks %-8u arg %u\n",
		       ts, pool, (unsigned long long)seq, event_name(type),
		       tenant[0] ? tenant : "-", (unsigned long long)lease,
		       blocks, earg);
	fflush(stdout);
	if (m->max_events && m->events >= m->max_events)
		m->done = true;
	return NL_OK;
}

int cmd_monitor(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct mon m = { 0 };
	uint64_t timeout_s = 0, v, deadline = 0;
	struct nl_sock *sk = NULL;
	struct sigaction sa;
	const char *dev;
	int c, ret, grp;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:t:j", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			ret = ctl_parse_size(optarg, &v);
			if (ret)
				return ctl_bad_value("--count", optarg, ret);
			m.max_events = v;
			break;
		case 't':
			ret = ctl_parse_size(optarg, &v);
			if (!ret && (v == 0 || v > 86400 * 365))
				ret = -ERANGE;
			if (ret)
				return ctl_bad_value("--timeout", optarg, ret);
			timeout_s = v;
			break;
		case 'j':
			ctl_g.json = true;
			break;
		default:
			ctl_err("monitor: bad option '%s'", argv[optind - 1]);
			ctl_usage_hint("monitor");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		ctl_err("monitor: unexpected argument '%s'", argv[optind]);
		return CTL_EXIT_USAGE;
	}

	dev = getenv(KVL_DEVICE_ENV);
	if (!dev || !*dev)
		dev = KVL_DEFAULT_DEVICE;
	if (access(dev, F_OK)) {
		ctl_err("monitor: %s is absent: the kvpool module is not loaded. Events come from the module's generic netlink group; kvpoold's in-process ledger has no event stream (use 'kvpoolctl top' to watch it)",
			dev);
		return CTL_EXIT_NOLEDGER;
	}
	sk = nl_socket_alloc();
	if (!sk)
		return ctl_fail("monitor", -ENOMEM);
	nl_socket_disable_seq_check(sk);
	ret = genl_connect(sk);
	if (ret < 0) {
		nl_socket_free(sk);
		ctl_err("monitor: generic netlink: %s", nl_geterror(ret));
		return CTL_EXIT_ERROR;
	}
	grp = genl_ctrl_resolve_grp(sk, KVPOOL_GENL_NAME,
				    KVPOOL_GENL_EVENT_GROUP);
	if (grp < 0) {
		nl_socket_free(sk);
		ctl_err("monitor: generic netlink family '%s' (group '%s') not found: %s",
			KVPOOL_GENL_NAME, KVPOOL_GENL_EVENT_GROUP,
			nl_geterror(grp));
		return CTL_EXIT_NOLEDGER;
	}
	ret = nl_socket_add_membership(sk, grp);
	if (ret < 0) {
		nl_socket_free(sk);
		ctl_err("monitor: joining group '%s': %s",
			KVPOOL_GENL_EVENT_GROUP, nl_geterror(ret));
		return ret == -NLE_PERM || ret == -NLE_NOACCESS ?
		       CTL_EXIT_PERM : CTL_EXIT_ERROR;
	}
	nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, mon_event, &m);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = mon_sig;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (timeout_s)
		deadline = ctl_now_ns() + timeout_s * 1000000000ULL;
	if (!ctl_g.json)
		fprintf(stderr, "kvpoolctl: monitoring kvpool events (Ctrl-C stops)\n");

	ret = CTL_EXIT_OK;
	while (!mon_stop && !m.done) {
		struct pollfd pfd = { .fd = nl_socket_get_fd(sk),
				      .events = POLLIN };
		int wait_ms = 500, r;

		if (deadline) {
			uint64_t now = ctl_now_ns();

			if (now >= deadline)
				break;
			if ((deadline - now) / 1000000 < (uint64_t)wait_ms)
				wait_ms = (int)((deadline - now) / 1000000) + 1;
		}
		r = poll(&pfd, 1, wait_ms);
		if (r <= 0)
			continue;
		r = nl_recvmsgs_default(sk);
		if (r == -NLE_NOMEM) {
			/* ENOBUFS: the socket's receive buffer overflowed */
			printf("%s events lost: receive buffer overflow (the next sequence gap tells how many)\n",
			       ctl_g.json ? "#" : "!!");
		} else if (r < 0 && r != -NLE_AGAIN && r != -NLE_INTR) {
			ctl_err("monitor: %s", nl_geterror(r));
			ret = CTL_EXIT_ERROR;
			break;
		}
	}
	if (!ctl_g.json)
		fprintf(stderr, "kvpoolctl: %llu event(s), %llu lost\n",
			(unsigned long long)m.events,
			(unsigned long long)m.lost);
	nl_socket_free(sk);
	return ret;
}
