// SPDX-License-Identifier: MIT
/*
 * ctl_util.c - number parsing, size formatting and a JSON writer for the
 * kvpool tools.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <linux/kvpool.h>

#include "ctl_util.h"

static int parse_digits(const char **sp, uint64_t *out)
{
	const char *s = *sp;
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	while (isdigit((unsigned char)*s)) {
		unsigned int d = (unsigned int)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
		s++;
	}
	*sp = s;
	*out = v;
	return 0;
}

int ctl_parse_size(const char *s, uint64_t *out)
{
	uint64_t v, mult = 1, base = 1000;
	int ret, exp = 0;

	if (!s)
		return -EINVAL;
	ret = parse_digits(&s, &v);
	if (ret)
		return ret;
	switch (*s) {
	case 'k': case 'K': exp = 1; break;
	case 'm': case 'M': exp = 2; break;
	case 'g': case 'G': exp = 3; break;
	case 't': case 'T': exp = 4; break;
	default: break;
	}
	if (exp) {
		s++;
		if (*s == 'i') {
			base = 1024;
			s++;
		}
	}
	if (*s == 'B')
		s++;
	if (*s)
		return -EINVAL;
	while (exp--)
		mult *= base;
	if (v && mult > UINT64_MAX / v)
		return -ERANGE;
	*out = v * mult;
	return 0;
}

int ctl_parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	int ret;

	if (!s)
		return -EINVAL;
	ret = parse_digits(&s, &v);
	if (ret)
		return ret;
	if (*s)
		return -EINVAL;
	if (v > UINT32_MAX)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

int ctl_parse_limit(const char *s, uint32_t *out)
{
	int ret;

	if (s && !strcmp(s, "max")) {
		*out = KVPOOL_UNLIMITED;
		return 0;
	}
	ret = ctl_parse_u32(s, out);
	if (!ret && *out == KVPOOL_UNLIMITED)
		return -ERANGE;
	return ret;
}

int ctl_parse_fraction(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end || errno)
		return -EINVAL;
	if (!(v > 0.0 && v <= 1.0))
		return -ERANGE;
	*out = v;
	return 0;
}

const char *ctl_human(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB",
					    "PiB" };
	double v = (double)bytes;
	unsigned int u = 0;

	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

const char *ctl_commas(uint64_t v, char *buf, size_t len)
{
	char tmp[32];
	size_t n, i, o = 0;

	n = (size_t)snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
	for (i = 0; i < n && o + 2 < len; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = '\0';
	return buf;
}

/* ---------------- JSON ---------------- */

void jw_init(struct jw *w, FILE *f)
{
	memset(w, 0, sizeof(*w));
	w->f = f;
}

static void jw_indent(struct jw *w)
{
	int i;

	for (i = 0; i < w->depth; i++)
		fputs("  ", w->f);
}

static void jw_puts_escaped(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		switch (c) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (c < 0x20)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		}
	}
	fputc('"', f);
}

static void jw_key(struct jw *w, const char *key)
{
	if (w->depth > 0) {
		if (w->need_comma[w->depth])
			fputc(',', w->f);
		fputc('\n', w->f);
		jw_indent(w);
		w->need_comma[w->depth] = true;
	}
	if (key) {
		jw_puts_escaped(w->f, key);
		fputs(": ", w->f);
	}
}

static void jw_open(struct jw *w, const char *key, char c)
{
	jw_key(w, key);
	fputc(c, w->f);
	if (w->depth < JW_MAX_DEPTH - 1)
		w->depth++;
	w->need_comma[w->depth] = false;
}

static void jw_close(struct jw *w, char c)
{
	bool had = w->need_comma[w->depth];

	if (w->depth > 0)
		w->depth--;
	if (had) {
		fputc('\n', w->f);
		jw_indent(w);
	}
	fputc(c, w->f);
}

void jw_obj(struct jw *w, const char *key) { jw_open(w, key, '{'); }
void jw_obj_end(struct jw *w) { jw_close(w, '}'); }
void jw_arr(struct jw *w, const char *key) { jw_open(w, key, '['); }
void jw_arr_end(struct jw *w) { jw_close(w, ']'); }

void jw_u64(struct jw *w, const char *key, uint64_t v)
{
	jw_key(w, key);
	fprintf(w->f, "%llu", (unsigned long long)v);
}

void jw_i64(struct jw *w, const char *key, int64_t v)
{
	jw_key(w, key);
	fprintf(w->f, "%lld", (long long)v);
}

void jw_dbl(struct jw *w, const char *key, double v)
{
	jw_key(w, key);
	if (isfinite(v))
		fprintf(w->f, "%.6g", v);
	else
		fputs("null", w->f);
}

void jw_str(struct jw *w, const char *key, const char *s)
{
	jw_key(w, key);
	jw_puts_escaped(w->f, s ? s : "");
}

void jw_bool(struct jw *w, const char *key, bool v)
{
	jw_key(w, key);
	fputs(v ? "true" : "false", w->f);
}

void jw_null(struct jw *w, const char *key)
{
	jw_key(w, key);
	fputs("null", w->f);
}

void jw_end(struct jw *w)
{
	fputc('\n', w->f);
	fflush(w->f);
}

uint64_t ctl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
