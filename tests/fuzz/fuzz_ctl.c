// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: kvpoolctl's command-line parsers.
 *
 * The first byte of the input picks a parser, the rest is split at NUL
 * bytes into strings:
 *   0-3  the value parsers of tools/ctl_util.c (ctl_parse_size, _u32,
 *        _limit, _fraction) on each string; a value they accept must
 *        print back to the same number where that is defined;
 *   4    `kvpoolctl plan ARGS...` (option parsing and the arithmetic;
 *        output goes to /dev/null);
 *   5    `kvpoolctl tenant ARGS...` (option parsing; the admin call that
 *        follows fails at once: no module, no daemon at the socket path);
 *   6    the configuration file parser, when there is one: add its entry
 *        point to parsers[] below and seed corpus/ctl/ with files that
 *        start with byte 6.
 * kvpoolctl.c is linked with its main() renamed, so the subcommands run
 * exactly as on the command line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/kvpool.h>

#include "kvpoolctl.h"

#define MAXARGS	32

static void value_parsers(unsigned int which, char **argv, int argc)
{
	char buf[64];
	int i;

	for (i = 1; i < argc; i++) {
		uint64_t v64;
		uint32_t v32;
		double f;

		switch (which) {
		case 0:
			ctl_parse_size(argv[i], &v64);
			break;
		case 1:
			if (!ctl_parse_u32(argv[i], &v32)) {
				snprintf(buf, sizeof(buf), "%" PRIu32, v32);
				if (strtoull(buf, NULL, 10) != strtoull(argv[i], NULL, 10))
					abort();
			}
			break;
		case 2:
			if (!ctl_parse_limit(argv[i], &v32) &&
			    v32 == KVPOOL_UNLIMITED && strcmp(argv[i], "max"))
				abort();	/* only the word means unlimited */
			break;
		default:
			if (!ctl_parse_fraction(argv[i], &f) &&
			    !(f > 0.0 && f <= 1.0))
				abort();
			break;
		}
	}
}

/* A fresh getopt: a parse that stopped inside "-ab" leaves state behind. */
static void getopt_reset(void)
{
	static char prog[] = "x";
	char *argv[] = { prog, NULL };

	optind = 0;
	getopt(1, argv, "");
}

typedef int (*subcommand_fn)(int argc, char **argv);

static const struct {
	const char *name;
	subcommand_fn fn;
} parsers[] = {
	{ "plan", cmd_plan },
	{ "tenant", cmd_tenant },
	/* { "config", <the configuration file parser> }, */
};

static void init_once(void)
{
	static bool done;

	if (done)
		return;
	done = true;
	/* The subcommands print; libFuzzer reports on stderr. */
	if (!freopen("/dev/null", "w", stdout))
		abort();
	setenv("KVPOOL_DEVICE", "/nonexistent/kvpool", 1);
	ctl_g.socket = "/nonexistent/kvpool.sock";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf, *argv[MAXARGS + 1], *p;
	unsigned int which;
	int argc = 0;

	if (!size)
		return 0;
	init_once();
	which = data[0] % 8;
	buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	/* argv[0] is the subcommand's name, as kvpoolctl passes it. */
	argv[argc++] = (char *)(which == 5 ? "tenant" : "plan");
	for (p = buf; p < buf + size - 1 && argc < MAXARGS; p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	if (which < 4) {
		value_parsers(which, argv, argc);
	} else if (which - 4 < sizeof(parsers) / sizeof(parsers[0])) {
		getopt_reset();
		parsers[which - 4].fn(argc, argv);
	}
	free(buf);
	return 0;
}
