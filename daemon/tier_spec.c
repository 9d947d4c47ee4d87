// SPDX-License-Identifier: MIT
/*
 * tier_spec.c - a lower tier as the command line (--tier) and
 * kvpoold.conf (tier = in [pool]) give it: dram:SIZE[:NAME] or
 * nvme:PATH:SIZE[:NAME].  Only text to struct kvd_tier_spec; tier.c sets
 * the pools up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "tier_spec.h"

/* "N" blocks, or "N{K,M,G,T}" bytes (binary units). */
static int parse_size(const char *s, uint32_t *blocks, uint64_t *bytes)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!*s)
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: return -EINVAL;
	}
	if (*end && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B"))
		return -EINVAL;
	if (!v)
		return -EINVAL;
	if (!shift) {
		if (v > KVPOOL_MAX_CAPACITY)
			return -EINVAL;
		*blocks = (uint32_t)v;
		*bytes = 0;
		return 0;
	}
	if (v > (UINT64_MAX >> shift))
		return -EINVAL;
	*bytes = (uint64_t)v << shift;
	*blocks = 0;
	return 0;
}

static int valid_name(const char *s)
{
	size_t i, n = strlen(s);

	if (!n || n >= KVPOOL_NAME_LEN)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-') || (i == 0 && (c == '_' || c == '.' ||
					       c == '-')))
			return 0;
	}
	return 1;
}

/*
 * dram:SIZE[:NAME]        host memory
 * nvme:PATH:SIZE[:NAME]   blocks in the file PATH (created if missing)
 * SIZE: blocks, or bytes with a K/M/G/T suffix.
 */
int kvd_tier_spec_parse(const char *spec, struct kvd_tier_spec *out)
{
	struct kvd_tier_spec t;
	char buf[512], *f[8], *p;
	int n = 0, size_at;

	if (strlen(spec) >= sizeof(buf))
		return -E2BIG;
	memset(&t, 0, sizeof(t));
	strcpy(buf, spec);
	f[n++] = buf;
	for (p = buf; *p && n < 8; p++)
		if (*p == ':') {
			*p = 0;
			f[n++] = p + 1;
		}
	if (!strcmp(f[0], "dram")) {
		t.kind = KVP_TIER_DRAM;
		if (n < 2 || n > 3)
			return -EINVAL;
		size_at = 1;
	} else if (!strcmp(f[0], "nvme")) {
		t.kind = KVP_TIER_NVME;
		if (n < 3 || n > 4 || !f[1][0])
			return -EINVAL;
		/* absolute: a detached daemon runs in / */
		if (f[1][0] != '/') {
			char cwd[256];

			if (!getcwd(cwd, sizeof(cwd)) ||
			    (size_t)snprintf(t.path, sizeof(t.path), "%s/%s",
					     cwd, f[1]) >= sizeof(t.path))
				return -ENAMETOOLONG;
		} else if (strlen(f[1]) >= sizeof(t.path)) {
			return -ENAMETOOLONG;
		} else {
			strcpy(t.path, f[1]);
		}
		size_at = 2;
	} else {
		return -EINVAL;
	}
	if (parse_size(f[size_at], &t.capacity, &t.bytes))
		return -EINVAL;
	if (n > size_at + 1) {
		if (!valid_name(f[size_at + 1]))
			return -EINVAL;
		strcpy(t.name, f[size_at + 1]);
	}
	*out = t;
	return 0;
}

int kvd_tier_parse(struct kvd_opts *o, const char *spec)
{
	int r;

	if (o->ntiers >= KVD_MAX_TIERS - 1)
		return -E2BIG;
	r = kvd_tier_spec_parse(spec, &o->tiers[o->ntiers]);
	if (!r)
		o->ntiers++;
	return r;
}
