// SPDX-License-Identifier: MIT
/*
 * cluster_conf.c - the cluster tier's options, checked the same way for
 * kvpoold.conf's [cluster] section and the --cluster-KEY flags.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_conf.h"
#include "kvpool_proto.h"

const char *const kvd_cluster_opt_keys[KVD_CLUSTER_NOPTS + 1] = {
	"nodes", "name", "keys", "policy", "deadline_ms", "heartbeat_ms",
	"stream_maxlen", "value_ttl_s", "queue_bytes", "fetch_bytes", NULL,
};

void kvd_cluster_opts_default(struct kvd_cluster_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->policy = KVP_CLUSTER_THROUGH;
	o->deadline_ms = 50;
	o->heartbeat_ms = 2000;
	o->stream_maxlen = 10000;
	o->queue_bytes = 64ULL << 20;
	o->fetch_bytes = 64ULL << 20;
}

/* Decimal, an optional K/M/G suffix when size; in [lo, hi]. */
static int num(const char *v, uint64_t lo, uint64_t hi, int size,
	       uint64_t *out)
{
	uint64_t x = 0, mul = 1;
	const char *p = v;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (x > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		x = x * 10 + (uint64_t)(*p - '0');
	}
	if (size && *p && !p[1]) {
		if (*p == 'K' || *p == 'k')
			mul = 1ULL << 10;
		else if (*p == 'M' || *p == 'm')
			mul = 1ULL << 20;
		else if (*p == 'G' || *p == 'g')
			mul = 1ULL << 30;
		if (mul > 1)
			p++;
	}
	if (*p)
		return -EINVAL;
	if (x > UINT64_MAX / mul || x * mul < lo || x * mul > hi)
		return -ERANGE;
	*out = x * mul;
	return 0;
}

/* HOST:PORT[,HOST:PORT...], each port 1..65535 */
static int nodes_ok(const char *v)
{
	const char *p = v;

	while (*p) {
		const char *e = strchr(p, ','), *c;
		char *end;
		long port;

		if (!e)
			e = p + strlen(p);
		for (c = e; c > p && c[-1] != ':'; c--)
			;
		if (c <= p + 1 || c == e)
			return 0;
		port = strtol(c, &end, 10);
		if (end != e || port < 1 || port > 65535)
			return 0;
		if (!*e)
			break;
		p = e + 1;
		if (!*p)
			return 0;
	}
	return 1;
}

static const char *copy(char *dst, size_t cap, const char *v)
{
	if (strlen(v) >= cap)
		return "too long";
	memcpy(dst, v, strlen(v) + 1);
	return NULL;
}

const char *kvd_cluster_opt_set(struct kvd_cluster_opts *o, const char *key,
				const char *v)
{
	uint64_t x;

	if (!strcmp(key, "nodes")) {
		if (v[0] && !nodes_ok(v))
			return "expected HOST:PORT[,HOST:PORT...]";
		return copy(o->nodes, sizeof(o->nodes), v);
	}
	if (!strcmp(key, "name")) {
		const char *p;

		for (p = v; *p; p++)
			if (!((*p >= 'a' && *p <= 'z') ||
			      (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '-' ||
			      *p == '_' || *p == '.'))
				return "letters, digits, '-', '_' or '.' only";
		if (!v[0])
			return "empty";
		return copy(o->name, sizeof(o->name), v);
	}
	if (!strcmp(key, "keys")) {
		if (v[0] && v[0] != '/')
			return "expected an absolute path";
		return copy(o->keys, sizeof(o->keys), v);
	}
	if (!strcmp(key, "policy")) {
		if (!strcmp(v, "through"))
			o->policy = KVP_CLUSTER_THROUGH;
		else if (!strcmp(v, "back"))
			o->policy = KVP_CLUSTER_BACK;
		else if (!strcmp(v, "read"))
			o->policy = KVP_CLUSTER_READ;
		else
			return "expected through, back or read";
		return NULL;
	}
	if (!strcmp(key, "deadline_ms")) {
		if (num(v, 1, 60000, 0, &x))
			return "expected 1 to 60000";
		o->deadline_ms = (uint32_t)x;
		return NULL;
	}
	if (!strcmp(key, "heartbeat_ms")) {
		if (num(v, 100, 3600000, 0, &x))
			return "expected 100 to 3600000";
		o->heartbeat_ms = (uint32_t)x;
		return NULL;
	}
	if (!strcmp(key, "stream_maxlen")) {
		if (num(v, 100, 100000000, 0, &x))
			return "expected 100 to 100000000";
		o->stream_maxlen = (uint32_t)x;
		return NULL;
	}
	if (!strcmp(key, "value_ttl_s")) {
		if (num(v, 0, 365 * 86400, 0, &x))
			return "expected 0 to 31536000";
		o->value_ttl_s = (uint32_t)x;
		return NULL;
	}
	if (!strcmp(key, "queue_bytes") || !strcmp(key, "fetch_bytes")) {
		if (num(v, 1 << 20, 1ULL << 40, 1, &x))
			return "expected 1M to 1024G";
		if (key[0] == 'q')
			o->queue_bytes = x;
		else
			o->fetch_bytes = x;
		return NULL;
	}
	return "unknown key";
}
