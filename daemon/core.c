// SPDX-License-Identifier: MIT
/*
 * core.c - the ground floor of kvpoold: its log and its clock, which every
 * other file of the daemon uses (Documentation/daemon.rst, "Floors").
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static int log_level = KVD_NOTICE;
static bool log_syslog;

void kvd_log_set_level(int level)
{
	log_level = level > KVD_DEBUG ? KVD_DEBUG : level;
}

void kvd_log_to_syslog(void)
{
	log_syslog = true;
}

void kvd_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {
		"emerg", "alert", "crit", "error", "warning", "notice",
		"info", "debug",
	};
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	if (log_syslog) {
		vsyslog(level, fmt, ap);
	} else {
		fprintf(stderr, "kvpoold[%d]: %s: ", (int)getpid(),
			names[level & 7]);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

uint64_t kvd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
