// SPDX-License-Identifier: MIT
/*
 * ctl_util.h - helpers shared by kvpoolctl and kvpool-bench: number parsing
 * with size suffixes, human-readable sizes, a small JSON writer, exit codes.
 */
#ifndef KVPOOL_CTL_UTIL_H
#define KVPOOL_CTL_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of kvpoolctl (documented in kvpoolctl(8)). */
#define CTL_EXIT_OK		0	/* success */
#define CTL_EXIT_ERROR		1	/* the operation failed */
#define CTL_EXIT_USAGE		2	/* bad command line */
#define CTL_EXIT_NOLEDGER	3	/* no module and no daemon reachable */
#define CTL_EXIT_PERM		4	/* permission denied */
#define CTL_EXIT_NOENT		5	/* no such pool or tenant */

/*
 * Parse an unsigned decimal number with an optional size suffix:
 * k/K M G T (powers of 1000), Ki Mi Gi Ti (powers of 1024), an optional
 * trailing "B" (so "80GiB", "141GB", "4k").  Returns 0 or -EINVAL (junk,
 * empty, negative) or -ERANGE (overflow).
 */
int ctl_parse_size(const char *s, uint64_t *out);
/* Plain decimal u32 (no suffix); -EINVAL/-ERANGE. */
int ctl_parse_u32(const char *s, uint32_t *out);
/* A block limit: "max" (KVPOOL_UNLIMITED) or a u32 below it. */
int ctl_parse_limit(const char *s, uint32_t *out);
/* A decimal fraction in (0, 1]. */
int ctl_parse_fraction(const char *s, double *out);

/* "1.5 GiB" style into buf; returns buf. */
const char *ctl_human(uint64_t bytes, char *buf, size_t len);
/* "42,949,672,960" into buf; returns buf. */
const char *ctl_commas(uint64_t v, char *buf, size_t len);

/* Minimal streaming JSON writer. */
#define JW_MAX_DEPTH 16
struct jw {
	FILE *f;
	int depth;
	bool need_comma[JW_MAX_DEPTH];
};

void jw_init(struct jw *w, FILE *f);
void jw_obj(struct jw *w, const char *key);	/* key NULL in arrays/top */
void jw_obj_end(struct jw *w);
void jw_arr(struct jw *w, const char *key);
void jw_arr_end(struct jw *w);
void jw_u64(struct jw *w, const char *key, uint64_t v);
void jw_i64(struct jw *w, const char *key, int64_t v);
void jw_dbl(struct jw *w, const char *key, double v);
void jw_str(struct jw *w, const char *key, const char *s);
void jw_bool(struct jw *w, const char *key, bool v);
void jw_null(struct jw *w, const char *key);
/* Ends the document with a newline. */
void jw_end(struct jw *w);

/* Monotonic time in nanoseconds. */
uint64_t ctl_now_ns(void);

#endif /* KVPOOL_CTL_UTIL_H */
