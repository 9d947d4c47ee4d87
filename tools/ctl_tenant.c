// SPDX-License-Identifier: MIT
/*
 * ctl_tenant.c - `kvpoolctl tenant add|set|del|list`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <linux/kvpool.h>

#include "kvlease.h"
#include "kvpoolctl.h"

/* Tenant names: [a-zA-Z0-9_.-], alphanumeric first, < KVPOOL_NAME_LEN. */
static bool valid_name(const char *s)
{
	size_t i, n = strlen(s);

	if (!n || n >= KVPOOL_NAME_LEN)
		return false;
	for (i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

static int parse_id(const char *opt, const char *v, uint32_t *out)
{
	int ret;

	if (!strcmp(v, "none") || !strcmp(v, "-")) {
		*out = KVPOOL_ID_NONE;
		return 0;
	}
	ret = ctl_parse_u32(v, out);
	if (!ret && *out >= KVL_ADMIN_KEEP)
		ret = -ERANGE;
	return ret ? ctl_bad_value(opt, v, ret) : 0;
}

int cmd_tenant(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "max", required_argument, NULL, 'M' },
		{ "min", required_argument, NULL, 'm' },
		{ "uid", required_argument, NULL, 'u' },
		{ "gid", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t max = KVL_ADMIN_KEEP, min = KVL_ADMIN_KEEP;
	uint32_t uid = KVL_ADMIN_KEEP, gid = KVL_ADMIN_KEEP;
	const char *verb, *name;
	struct kvl_admin *adm;
	int c, ret;

	if (argc < 2) {
		ctl_err("tenant: missing action (add, set, del, list)");
		ctl_usage_hint("tenant");
		return CTL_EXIT_USAGE;
	}
	verb = argv[1];
	if (!strcmp(verb, "list") || !strcmp(verb, "ls"))
		return ctl_tenant_list(argc - 1, argv + 1);
	if (strcmp(verb, "add") && strcmp(verb, "set") && strcmp(verb, "del") &&
	    strcmp(verb, "delete") && strcmp(verb, "rm")) {
		ctl_err("tenant: unknown action '%s' (add, set, del, list)", verb);
		ctl_usage_hint("tenant");
		return CTL_EXIT_USAGE;
	}

	optind = 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'M':
			ret = ctl_parse_limit(optarg, &max);
			if (ret)
				return ctl_bad_value("--max", optarg, ret);
			break;
		case 'm':
			ret = ctl_parse_u32(optarg, &min);
			if (!ret && min >= KVL_ADMIN_KEEP)
				ret = -ERANGE;
			if (ret)
				return ctl_bad_value("--min", optarg, ret);
			break;
		case 'u':
			ret = parse_id("--uid", optarg, &uid);
			if (ret)
				return ret;
			break;
		case 'g':
			ret = parse_id("--gid", optarg, &gid);
			if (ret)
				return ret;
			break;
		case ':':
			ctl_err("tenant: option %s needs a value", argv[optind - 1]);
			return CTL_EXIT_USAGE;
		default:
			ctl_err("tenant: unknown option '%s'", argv[optind - 1]);
			ctl_usage_hint("tenant");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		ctl_err("tenant %s: give exactly one tenant NAME", verb);
		ctl_usage_hint("tenant");
		return CTL_EXIT_USAGE;
	}
	name = argv[optind];
	if (!valid_name(name)) {
		ctl_err("tenant: '%s' is not a valid name ([a-zA-Z0-9_.-], alphanumeric first, at most %d characters)",
			name, KVPOOL_NAME_LEN - 1);
		return CTL_EXIT_USAGE;
	}
	if (verb[0] == 'd' || verb[0] == 'r') {
		if (max != KVL_ADMIN_KEEP || min != KVL_ADMIN_KEEP ||
		    uid != KVL_ADMIN_KEEP || gid != KVL_ADMIN_KEEP) {
			ctl_err("tenant del: takes no options");
			return CTL_EXIT_USAGE;
		}
	} else if (!strcmp(verb, "add")) {
		if (max == KVL_ADMIN_KEEP)
			max = KVPOOL_UNLIMITED;
		if (min == KVL_ADMIN_KEEP)
			min = 0;
		if (uid == KVL_ADMIN_KEEP)
			uid = KVPOOL_ID_NONE;
		if (gid == KVL_ADMIN_KEEP)
			gid = KVPOOL_ID_NONE;
	} else if (max == KVL_ADMIN_KEEP && min == KVL_ADMIN_KEEP &&
		   uid == KVL_ADMIN_KEEP && gid == KVL_ADMIN_KEEP) {
		ctl_err("tenant set: nothing to change (--max, --min, --uid, --gid)");
		return CTL_EXIT_USAGE;
	}
	if (max != KVL_ADMIN_KEEP && max != KVPOOL_UNLIMITED &&
	    min != KVL_ADMIN_KEEP && min > max) {
		ctl_err("tenant: --min %u is above --max %u", min, max);
		return CTL_EXIT_USAGE;
	}

	ret = kvl_admin_open(ctl_g.socket, &adm);
	if (ret)
		return ctl_fail("tenant", ret);
	if (!strcmp(verb, "add"))
		ret = kvl_admin_tenant_add(adm, ctl_g.pool, name, max, min, uid,
					   gid);
	else if (!strcmp(verb, "set"))
		ret = kvl_admin_tenant_set(adm, ctl_g.pool, name, max, min, uid,
					   gid);
	else
		ret = kvl_admin_tenant_del(adm, ctl_g.pool, name);
	kvl_admin_close(adm);
	if (ret == -EEXIST) {
		ctl_err("tenant add: tenant '%s' already exists", name);
		return CTL_EXIT_ERROR;
	}
	if (ret == -EBUSY) {
		ctl_err("tenant del: tenant '%s' is in use (it holds blocks or has clients)",
			name);
		return CTL_EXIT_ERROR;
	}
	if (ret == -ENOENT) {
		ctl_err("tenant %s: no tenant '%s'%s", verb, name,
			ctl_g.pool ? " in that pool" : "");
		return CTL_EXIT_NOENT;
	}
	if (ret)
		return ctl_fail("tenant", ret);
	return CTL_EXIT_OK;
}
