// SPDX-License-Identifier: MIT
/*
 * config.c - kvpoold's configuration file: text in, struct kvd_conf out.
 *
 * libinih does the INI syntax.  It reads the text through our reader,
 * which counts lines (so that every error names its line), refuses NUL
 * bytes and over-long lines, strips leading blanks (so that an indented
 * line is an ordinary line, never a continuation) and notes each
 * "[section]" header as it goes by, so that an empty section is still seen
 * and checked.  The handler checks each value as the matching flag is
 * checked and keeps the first error.  See kvpoold.conf(5).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#ifdef KVD_HAVE_INIH
#include <ini.h>
#endif
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "core.h"
#include "tier_spec.h"

/* The biggest file read: far more than any real configuration. */
#define CONF_MAX_BYTES	(1 << 20)

enum sec {
	SEC_NONE,	/* before the first header */
	SEC_DAEMON,
	SEC_POOL,
	SEC_TENANT,
	SEC_CLUSTER,
};

struct ps {
	struct kvd_conf *c;
	const char *p, *end;	/* text not yet read */
	int line;		/* lines handed to libinih */
	int err_line;		/* our first error, 0: none */
	char *err;
	size_t errlen;
	enum sec sec;
	struct kvd_tenant_conf *tenant;	/* SEC_TENANT */
	uint8_t tenant_keys;		/* keys set in this [tenant] */
	int daemon_line, pool_line;	/* where those sections began */
	int cluster_line;
	uint32_t cluster_keys;		/* keys set in [cluster] */
	int key_line[KVD_K_NKEYS];
};

static void __attribute__((format(printf, 3, 4)))
fail(struct ps *s, int line, const char *fmt, ...)
{
	int n;
	va_list ap;

	if (s->err_line)
		return;
	s->err_line = line;
	n = snprintf(s->err, s->errlen, "line %d: ", line);
	if (n < 0 || (size_t)n >= s->errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(s->err + n, s->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' ||
	       ch == '\v' || ch == '\f';
}

/* ---- values ---------------------------------------------------------- */

/*
 * Decimal digits, optionally "max" (-> max_value) or, for sizes, a K, M or
 * G suffix (powers of 1024).  Nothing else: no sign, no blanks, no hex.
 */
static int parse_num(const char *v, uint64_t limit, bool max_ok,
		     bool size, uint64_t *out)
{
	uint64_t x = 0, mul = 1;
	const char *p = v;

	if (max_ok && !strcmp(v, "max")) {
		*out = limit;
		return 0;
	}
	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (x > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		x = x * 10 + (uint64_t)(*p - '0');
	}
	if (size && *p && !p[1]) {
		switch (*p) {
		case 'K': case 'k': mul = 1ULL << 10; p++; break;
		case 'M': case 'm': mul = 1ULL << 20; p++; break;
		case 'G': case 'g': mul = 1ULL << 30; p++; break;
		default: break;
		}
	}
	if (*p)
		return -EINVAL;
	if (x > UINT64_MAX / mul)
		return -ERANGE;
	x *= mul;
	if (x > limit)
		return -ERANGE;
	*out = x;
	return 0;
}

/* A uid or gid: a number, a name, or "-" / "none" for nobody. */
static int parse_id(const char *v, bool group, uint32_t *out)
{
	uint64_t x;

	if (!strcmp(v, "-") || !strcmp(v, "none")) {
		*out = KVPOOL_ID_NONE;
		return 0;
	}
	if (!parse_num(v, KVPOOL_ID_NONE - 1, false, false, &x)) {
		*out = (uint32_t)x;
		return 0;
	}
	if (*v >= '0' && *v <= '9')
		return -ERANGE;
	if (group) {
		struct group *g = getgrnam(v);

		if (!g)
			return -ENOENT;
		*out = g->gr_gid;
	} else {
		struct passwd *pw = getpwnam(v);

		if (!pw)
			return -ENOENT;
		*out = pw->pw_uid;
	}
	return 0;
}

int kvd_metrics_scope_parse(const char *s)
{
	if (!strcmp(s, "public"))
		return KVD_METRICS_PUBLIC;
	if (!strcmp(s, "operator"))
		return KVD_METRICS_OPERATOR;
	return -EINVAL;
}

int kvd_listen_addr_check(const char *s)
{
	const char *colon = strrchr(s, ':');
	uint64_t port;

	if (!colon || colon == s || !colon[1])
		return -EINVAL;
	if (s[0] == '[') {
		/* [v6]:PORT */
		if (colon[-1] != ']' || colon - s < 3)
			return -EINVAL;
	} else if (memchr(s, ':', (size_t)(colon - s))) {
		return -EINVAL;		/* a bare v6 address needs brackets */
	}
	for (const char *p = s; p < colon; p++)
		if (blank(*p))
			return -EINVAL;
	if (parse_num(colon + 1, 65535, false, false, &port))
		return -EINVAL;		/* port 0: any free port */
	return 0;
}

static int copy_str(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(v);

	if (!n)
		return -EINVAL;
	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(dst, v, n + 1);
	return 0;
}

static bool one_of(const char *v, const char *const *names)
{
	for (; *names; names++)
		if (!strcmp(v, *names))
			return true;
	return false;
}

/* A user or group name: no blanks, no ':' (never a path or a list). */
static bool plain_name(const char *v)
{
	if (!*v)
		return false;
	for (; *v; v++)
		if (blank(*v) || *v == ':' || *v == '/')
			return false;
	return true;
}

/* ---- the [daemon] and [pool] keys ------------------------------------- */

struct key {
	const char *name;
	enum sec sec;
	enum kvd_conf_key key;
};

static const struct key keys[] = {
	{ "socket", SEC_DAEMON, KVD_K_SOCKET },
	{ "device", SEC_DAEMON, KVD_K_DEVICE },
	{ "backend", SEC_DAEMON, KVD_K_BACKEND },
	{ "ledger", SEC_DAEMON, KVD_K_LEDGER },
	{ "user", SEC_DAEMON, KVD_K_USER },
	{ "admin_group", SEC_DAEMON, KVD_K_ADMIN_GROUP },
	{ "cuda_device", SEC_DAEMON, KVD_K_CUDA_DEVICE },
	{ "log_level", SEC_DAEMON, KVD_K_LOG_LEVEL },
	{ "metrics_listen", SEC_DAEMON, KVD_K_METRICS_LISTEN },
	{ "name", SEC_POOL, KVD_K_POOL_NAME },
	{ "block_bytes", SEC_POOL, KVD_K_BLOCK_BYTES },
	{ "capacity", SEC_POOL, KVD_K_CAPACITY },
	{ "chunk_blocks", SEC_POOL, KVD_K_CHUNK_BLOCKS },
	{ "default_max", SEC_POOL, KVD_K_DEFAULT_MAX },
	{ "shrink_delay_ms", SEC_POOL, KVD_K_SHRINK_DELAY_MS },
	{ "backing_limit", SEC_POOL, KVD_K_BACKING_LIMIT },
	{ "tier", SEC_POOL, KVD_K_TIER },		/* repeatable */
	{ "nvme_io", SEC_POOL, KVD_K_NVME_IO },
	{ "metrics_scope", SEC_DAEMON, KVD_K_METRICS_SCOPE },
	{ "prefix_lend_percent", SEC_POOL, KVD_K_PREFIX_LEND_PERCENT },
	{ "prefix_demote", SEC_POOL, KVD_K_PREFIX_DEMOTE },
};

static const char *const backends[] = { "auto", "cpu", "cuda", NULL };
static const char *const ledgers[] = { "auto", "module", "inproc", NULL };
static const char *const nvme_ios[] = { "auto", "uring", "pread", NULL };
static const char *const levels[] = {
	"error", "warning", "notice", "info", "debug", NULL,
};

/* Check v for key k and store it; a message for fail() otherwise. */
static const char *set_key(struct kvd_conf *c, enum kvd_conf_key k,
			   const char *v)
{
	uint64_t x;
	int i;

	switch (k) {
	case KVD_K_SOCKET:
		if (v[0] != '/')
			return "needs an absolute path";
		return copy_str(c->socket_path, sizeof(c->socket_path), v) ?
		       "path too long for a UNIX socket" : NULL;
	case KVD_K_DEVICE:
		if (v[0] != '/')
			return "needs an absolute path";
		return copy_str(c->device_path, sizeof(c->device_path), v) ?
		       "path too long" : NULL;
	case KVD_K_BACKEND:
		if (!one_of(v, backends))
			return "must be auto, cpu or cuda";
		return copy_str(c->backend, sizeof(c->backend), v) ? "?" : NULL;
	case KVD_K_LEDGER:
		if (!one_of(v, ledgers))
			return "must be auto, module or inproc";
		return copy_str(c->ledger, sizeof(c->ledger), v) ? "?" : NULL;
	case KVD_K_USER:
		if (!plain_name(v))
			return "must be a user name";
		return copy_str(c->user, sizeof(c->user), v) ?
		       "name too long" : NULL;
	case KVD_K_ADMIN_GROUP:
		if (!plain_name(v))
			return "must be a group name";
		return copy_str(c->admin_group, sizeof(c->admin_group), v) ?
		       "name too long" : NULL;
	case KVD_K_CUDA_DEVICE:
		if (parse_num(v, 64, false, false, &x))
			return "must be a device ordinal, 0 to 64";
		c->cuda_device = (int)x;
		return NULL;
	case KVD_K_LOG_LEVEL:
		for (i = 0; levels[i]; i++)
			if (!strcmp(v, levels[i]))
				break;
		if (!levels[i])
			return "must be error, warning, notice, info or debug";
		c->log_level = KVD_ERR + i;
		return NULL;
	case KVD_K_METRICS_LISTEN:
		if (kvd_listen_addr_check(v))
			return "must be ADDR:PORT (IPv6: [ADDR]:PORT)";
		return copy_str(c->metrics_listen, sizeof(c->metrics_listen),
				v) ? "address too long" : NULL;
	case KVD_K_METRICS_SCOPE:
		i = kvd_metrics_scope_parse(v);
		if (i < 0)
			return "must be public or operator";
		c->metrics_scope = i;
		return NULL;
	case KVD_K_PREFIX_LEND_PERCENT:
		if (parse_num(v, 100, false, false, &x))
			return "must be 0 to 100 (percent)";
		c->prefix_lend_percent = (uint32_t)x;
		return NULL;
	case KVD_K_POOL_NAME:
		if (kvpool_name_valid(v))
			return "must be 1 to 31 letters, digits, '_', '-' or "
			       "'.', starting with a letter or digit";
		memcpy(c->pool, v, strlen(v) + 1);
		return NULL;
	case KVD_K_BLOCK_BYTES:
		if (parse_num(v, 1ULL << 30, false, true, &x) || !x || x % 256)
			return "must be a multiple of 256 bytes up to 1G "
			       "(suffixes K, M, G)";
		c->block_bytes = x;
		return NULL;
	case KVD_K_CAPACITY:
		if (parse_num(v, KVPOOL_MAX_CAPACITY, false, false, &x) || !x)
			return "must be 1 to 67108864 blocks";
		c->capacity = (uint32_t)x;
		return NULL;
	case KVD_K_CHUNK_BLOCKS:
		if (parse_num(v, KVPOOL_MAX_CAPACITY, false, false, &x) || !x)
			return "must be 1 to 67108864 blocks";
		c->chunk_blocks = (uint32_t)x;
		return NULL;
	case KVD_K_DEFAULT_MAX:
		if (parse_num(v, KVPOOL_UNLIMITED, true, false, &x))
			return "must be a number of blocks or max";
		c->default_max = (uint32_t)x;
		return NULL;
	case KVD_K_SHRINK_DELAY_MS:
		if (parse_num(v, 3600000, false, false, &x))
			return "must be 0 to 3600000 ms";
		c->shrink_delay_ms = (uint32_t)x;
		return NULL;
	case KVD_K_BACKING_LIMIT:
		if (parse_num(v, KVPOOL_MAX_CAPACITY, false, false, &x))
			return "must be 0 (none) to 67108864 blocks";
		c->backing_limit = (uint32_t)x;
		return NULL;
	case KVD_K_TIER:
		if (c->ntiers >= KVD_MAX_TIERS - 1)
			return "at most 3 tiers below the top pool";
		if (!strncmp(v, "nvme:", 5) && v[5] != '/')
			return "the file needs an absolute path";
		if (kvd_tier_spec_parse(v, &c->tiers[c->ntiers]))
			return "must be dram:SIZE[:NAME] or "
			       "nvme:PATH:SIZE[:NAME] (SIZE in blocks, or "
			       "bytes with K, M, G or T)";
		for (i = 0; i < c->ntiers; i++)
			if (c->tiers[c->ntiers].name[0] &&
			    !strcmp(c->tiers[i].name, c->tiers[c->ntiers].name))
				return "a tier of that name is given already";
		c->ntiers++;
		return NULL;
	case KVD_K_NVME_IO:
		if (!one_of(v, nvme_ios))
			return "must be auto, uring or pread";
		return copy_str(c->nvme_io, sizeof(c->nvme_io), v) ? "?" : NULL;
	case KVD_K_PREFIX_DEMOTE:
		if (strcmp(v, "yes") && strcmp(v, "no"))
			return "must be yes or no";
		c->prefix_demote = !strcmp(v, "yes");
		return NULL;
	default:
		return "unknown key";
	}
}

/* ---- [tenant NAME], [tenant POOL/NAME] -------------------------------- */

/* "%s%s%s" arguments: POOL/NAME, or NAME without a pool. */
#define TENANT_ID(t) (t)->pool, (t)->pool[0] ? "/" : "", (t)->name

enum { TK_MAX = 1, TK_MIN = 2, TK_UID = 4, TK_GID = 8 };

static const char *set_tenant_key(struct kvd_tenant_conf *t, int tk,
				  const char *v)
{
	uint64_t x;
	int r;

	switch (tk) {
	case TK_MAX:
		if (parse_num(v, KVPOOL_UNLIMITED, true, false, &x))
			return "must be a number of blocks or max";
		t->max = (uint32_t)x;
		return NULL;
	case TK_MIN:
		if (parse_num(v, KVPOOL_UNLIMITED - 1, false, false, &x))
			return "must be a number of blocks";
		t->min = (uint32_t)x;
		return NULL;
	case TK_UID:
		r = parse_id(v, false, &t->uid);
		return r == -ENOENT ? "no such user" :
		       r ? "must be a uid, a user name or none" : NULL;
	case TK_GID:
		r = parse_id(v, true, &t->gid);
		return r == -ENOENT ? "no such group" :
		       r ? "must be a gid, a group name or none" : NULL;
	default:
		return "unknown key";
	}
}

static void tenant_defaults(struct kvd_tenant_conf *t)
{
	memset(t, 0, sizeof(*t));
	t->max = KVPOOL_UNLIMITED;
	t->uid = KVPOOL_ID_NONE;
	t->gid = KVPOOL_ID_NONE;
}

/* The end of the [tenant] section being read: min must fit under max. */
static void tenant_end(struct ps *s)
{
	struct kvd_tenant_conf *t = s->tenant;

	if (t && t->max != KVPOOL_UNLIMITED && t->min > t->max)
		fail(s, t->line, "tenant %s%s%s: min %u is above max %u",
		     TENANT_ID(t), t->min, t->max);
	s->tenant = NULL;
}

/* ---- sections (seen by the reader) ------------------------------------- */

static void section(struct ps *s, const char *hdr, size_t len)
{
	char name[KVD_CONF_MAX_LINE + 1];
	struct kvd_tenant_conf *t;
	const char *pool = "";
	char *arg, *slash;
	size_t kind;
	int i;

	tenant_end(s);
	while (len && blank(*hdr)) {
		hdr++;
		len--;
	}
	while (len && blank(hdr[len - 1]))
		len--;
	memcpy(name, hdr, len);
	name[len] = '\0';
	for (kind = 0; kind < len && !blank(name[kind]); kind++)
		;
	for (arg = name + kind; *arg && blank(*arg); arg++)
		;
	s->sec = SEC_NONE;
	if (kind == 6 && !strncmp(name, "daemon", 6) && !*arg) {
		if (s->daemon_line) {
			fail(s, s->line, "[daemon] given twice (first on "
			     "line %d)", s->daemon_line);
			return;
		}
		s->daemon_line = s->line;
		s->sec = SEC_DAEMON;
		return;
	}
	if (kind == 4 && !strncmp(name, "pool", 4) && !*arg) {
		if (s->pool_line) {
			fail(s, s->line, "[pool] given twice (first on line "
			     "%d)", s->pool_line);
			return;
		}
		s->pool_line = s->line;
		s->sec = SEC_POOL;
		return;
	}
	if (kind == 7 && !strncmp(name, "cluster", 7) && !*arg) {
		if (s->cluster_line) {
			fail(s, s->line, "[cluster] given twice (first on "
			     "line %d)", s->cluster_line);
			return;
		}
		s->cluster_line = s->line;
		s->c->has_cluster = 1;
		kvd_cluster_opts_default(&s->c->cluster);
		s->sec = SEC_CLUSTER;
		return;
	}
	if (kind != 6 || strncmp(name, "tenant", 6)) {
		fail(s, s->line, "unknown section [%s] (expected [daemon], "
		     "[pool], [cluster] or [tenant [POOL/]NAME])", name);
		return;
	}
	if (!*arg) {
		fail(s, s->line, "[tenant] needs a name: [tenant NAME] or "
		     "[tenant POOL/NAME]");
		return;
	}
	slash = strchr(arg, '/');
	if (slash) {
		*slash = '\0';
		if (kvpool_name_valid(arg)) {
			fail(s, s->line, "bad pool name '%s' in [tenant "
			     "POOL/NAME] (1 to 31 letters, digits, '_', '-' "
			     "or '.', starting with a letter or digit)", arg);
			return;
		}
		pool = arg;
		arg = slash + 1;
	}
	if (kvpool_name_valid(arg)) {
		fail(s, s->line, "bad tenant name '%s' (1 to 31 letters, "
		     "digits, '_', '-' or '.', starting with a letter or "
		     "digit)", arg);
		return;
	}
	for (i = 0; i < s->c->ntenants; i++) {
		if (!strcmp(s->c->tenants[i].pool, pool) &&
		    !strcmp(s->c->tenants[i].name, arg)) {
			fail(s, s->line, "tenant %s%s%s given twice (first on "
			     "line %d)", pool, pool[0] ? "/" : "", arg,
			     s->c->tenants[i].line);
			return;
		}
	}
	if (s->c->ntenants >= KVD_CONF_MAX_TENANTS) {
		fail(s, s->line, "more than %d tenants", KVD_CONF_MAX_TENANTS);
		return;
	}
	t = &s->c->tenants[s->c->ntenants++];
	tenant_defaults(t);
	memcpy(t->pool, pool, strlen(pool) + 1);
	memcpy(t->name, arg, strlen(arg) + 1);
	t->line = s->line;
	s->tenant = t;
	s->tenant_keys = 0;
	s->sec = SEC_TENANT;
}

/* libinih's fgets(): one line of the text per call. */
static char *reader(char *str, int num, void *stream)
{
	struct ps *s = stream;
	const char *nl, *p;
	size_t n, content;

	if (s->err_line || s->p >= s->end)
		return NULL;
	nl = memchr(s->p, '\n', (size_t)(s->end - s->p));
	n = nl ? (size_t)(nl - s->p) + 1 : (size_t)(s->end - s->p);
	p = s->p;
	s->p += n;
	s->line++;
	if (memchr(p, '\0', n)) {
		fail(s, s->line, "NUL byte in the file");
		return NULL;
	}
	/* a UTF-8 byte order mark before the first line */
	if (s->line == 1 && n >= 3 && !memcmp(p, "\xef\xbb\xbf", 3)) {
		p += 3;
		n -= 3;
	}
	while (n && blank(*p) && *p != '\n') {
		p++;
		n--;
	}
	content = n;
	while (content && (p[content - 1] == '\n' || p[content - 1] == '\r'))
		content--;
	if (content > KVD_CONF_MAX_LINE || num < 0 || n + 1 > (size_t)num) {
		fail(s, s->line, "longer than %d characters",
		     KVD_CONF_MAX_LINE);
		return NULL;
	}
	memcpy(str, p, n);
	str[n] = '\0';
	if (str[0] == '[') {
		const char *close = memchr(str, ']', content);

		if (close)
			section(s, str + 1, (size_t)(close - str - 1));
	}
	return s->err_line ? NULL : str;
}

/* A value ends at a '#' or ';' that starts it or follows a blank. */
static void cut_comment(char *v)
{
	char *p;

	for (p = v; *p; p++) {
		if ((*p == '#' || *p == ';') && (p == v || blank(p[-1]))) {
			*p = '\0';
			break;
		}
	}
	while (p > v && blank(p[-1]))
		*--p = '\0';
}

static int handler(void *user, const char *section_name, const char *name,
		   const char *value)
{
	static const char *const tkeys[] = { "max", "min", "uid", "gid" };
	char v[KVD_CONF_MAX_LINE + 1];
	struct ps *s = user;
	const char *msg;
	size_t i;

	(void)section_name;	/* the reader tracked it */
	if (s->err_line)
		return 1;
	snprintf(v, sizeof(v), "%s", value);
	cut_comment(v);
	if (!v[0]) {
		fail(s, s->line, "%s: empty value", name);
		return 0;
	}
	if (s->sec == SEC_NONE) {
		fail(s, s->line, "'%s' outside a section ([daemon], [pool] "
		     "or [tenant NAME])", name);
		return 0;
	}
	if (s->sec == SEC_CLUSTER) {
		for (i = 0; kvd_cluster_opt_keys[i]; i++)
			if (!strcmp(name, kvd_cluster_opt_keys[i]))
				break;
		if (!kvd_cluster_opt_keys[i]) {
			fail(s, s->line, "unknown key '%s' in [cluster]", name);
			return 0;
		}
		if (s->cluster_keys & (1U << i)) {
			fail(s, s->line, "%s set twice in [cluster]", name);
			return 0;
		}
		s->cluster_keys |= 1U << i;
		msg = kvd_cluster_opt_set(&s->c->cluster, name, v);
		if (msg) {
			fail(s, s->line, "%s = %s: %s", name, v, msg);
			return 0;
		}
		return 1;
	}
	if (s->sec == SEC_TENANT) {
		for (i = 0; i < 4; i++)
			if (!strcmp(name, tkeys[i]))
				break;
		if (i == 4) {
			fail(s, s->line, "unknown key '%s' in [tenant %s%s%s] "
			     "(expected max, min, uid or gid)", name,
			     TENANT_ID(s->tenant));
			return 0;
		}
		if (s->tenant_keys & (1U << i)) {
			fail(s, s->line, "%s set twice in [tenant %s%s%s]",
			     name, TENANT_ID(s->tenant));
			return 0;
		}
		s->tenant_keys |= (uint8_t)(1U << i);
		msg = set_tenant_key(s->tenant, 1 << i, v);
		if (msg) {
			fail(s, s->line, "%s = %s: %s", name, v, msg);
			return 0;
		}
		return 1;
	}
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (keys[i].sec == s->sec && !strcmp(name, keys[i].name))
			break;
	if (i == sizeof(keys) / sizeof(keys[0])) {
		fail(s, s->line, "unknown key '%s' in [%s]", name,
		     s->sec == SEC_DAEMON ? "daemon" : "pool");
		return 0;
	}
	if (s->key_line[keys[i].key] && keys[i].key != KVD_K_TIER) {
		fail(s, s->line, "%s set twice (first on line %d)", name,
		     s->key_line[keys[i].key]);
		return 0;
	}
	msg = set_key(s->c, keys[i].key, v);
	if (msg) {
		fail(s, s->line, "%s = %s: %s", name, v, msg);
		return 0;
	}
	s->key_line[keys[i].key] = s->line;
	s->c->set |= 1U << keys[i].key;
	return 1;
}

int kvd_conf_parse(const char *text, size_t len, struct kvd_conf *c,
		   char *err, size_t errlen)
{
	struct ps s;
	int r;

	memset(c, 0, sizeof(*c));
	memset(&s, 0, sizeof(s));
	if (errlen)
		err[0] = '\0';
	s.c = c;
	s.p = text;
	s.end = text + len;
	s.err = err;
	s.errlen = errlen;
#ifdef KVD_HAVE_INIH
	r = ini_parse_stream(reader, &s, handler, &s);
#else
	(void)reader;
	(void)handler;
	snprintf(err, errlen, "this kvpoold was built without libinih and "
		 "reads no configuration file");
	return -EOPNOTSUPP;
#endif
	if (!s.err_line && r == 0)
		tenant_end(&s);
	if (s.err_line && (r <= 0 || s.err_line <= r))
		return -EINVAL;
	if (r > 0) {
		s.err_line = 0;
		fail(&s, r, "expected [section], key = value or a comment");
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if ((c->set & (1U << KVD_K_CHUNK_BLOCKS)) &&
	    (c->set & (1U << KVD_K_CAPACITY)) &&
	    c->chunk_blocks > c->capacity) {
		fail(&s, s.key_line[KVD_K_CHUNK_BLOCKS], "chunk_blocks %u is "
		     "above capacity %u", c->chunk_blocks, c->capacity);
		return -EINVAL;
	}
	return 0;
}

int kvd_conf_load(const char *path, struct kvd_conf *c, char *err,
		  size_t errlen)
{
	struct stat st;
	char *buf;
	size_t got = 0;
	ssize_t n = 0;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "%s", strerror(-r));
		return r;
	}
	if (fstat(fd, &st)) {
		r = -errno;
		snprintf(err, errlen, "%s", strerror(-r));
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > CONF_MAX_BYTES) {
		r = S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
		snprintf(err, errlen, "%s", S_ISREG(st.st_mode) ?
			 "larger than 1 MiB" : "not a regular file");
		close(fd);
		return r;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r = n < 0 ? -errno : 0;
	close(fd);
	if (r) {
		snprintf(err, errlen, "%s", strerror(-r));
		free(buf);
		return r;
	}
	r = kvd_conf_parse(buf, got, c, err, errlen);
	free(buf);
	return r;
}

void kvd_conf_to_opts(const struct kvd_conf *c, struct kvd_opts *o)
{
#define SET(k) (c->set & (1U << (k)))
	if (SET(KVD_K_SOCKET))
		o->socket_path = c->socket_path;
	if (SET(KVD_K_DEVICE))
		o->device_path = c->device_path;
	if (SET(KVD_K_BACKEND))
		o->backend = c->backend;
	if (SET(KVD_K_LEDGER))
		o->ledger = c->ledger;
	if (SET(KVD_K_USER))
		o->user = c->user;
	if (SET(KVD_K_ADMIN_GROUP))
		o->admin_group = c->admin_group;
	if (SET(KVD_K_CUDA_DEVICE))
		o->cuda_device = c->cuda_device;
	if (SET(KVD_K_LOG_LEVEL))
		o->log_level = c->log_level;
	if (SET(KVD_K_METRICS_LISTEN))
		o->metrics_listen = c->metrics_listen;
	if (SET(KVD_K_POOL_NAME))
		o->pool = c->pool;
	if (SET(KVD_K_BLOCK_BYTES))
		o->block_bytes = c->block_bytes;
	if (SET(KVD_K_CAPACITY))
		o->capacity = c->capacity;
	if (SET(KVD_K_CHUNK_BLOCKS))
		o->chunk_blocks = c->chunk_blocks;
	if (SET(KVD_K_DEFAULT_MAX))
		o->default_max = c->default_max;
	if (SET(KVD_K_SHRINK_DELAY_MS))
		o->shrink_delay_ms = c->shrink_delay_ms;
	if (SET(KVD_K_BACKING_LIMIT))
		o->backing_limit = c->backing_limit;
	if (SET(KVD_K_TIER)) {
		memcpy(o->tiers, c->tiers, sizeof(o->tiers));
		o->ntiers = c->ntiers;
	}
	if (SET(KVD_K_NVME_IO))
		o->nvme_io = c->nvme_io;
	if (SET(KVD_K_METRICS_SCOPE))
		o->metrics_scope = c->metrics_scope;
	if (SET(KVD_K_PREFIX_LEND_PERCENT))
		o->prefix_lend_percent = c->prefix_lend_percent;
	if (SET(KVD_K_PREFIX_DEMOTE))
		o->prefix_demote = c->prefix_demote;
	if (c->has_cluster)
		o->cluster = c->cluster;
#undef SET
}

int kvd_tenant_spec_parse(const char *spec, struct kvd_tenant_conf *t)
{
	char buf[256], *field[5], *p;
	int n = 0, i;

	tenant_defaults(t);
	if (strlen(spec) >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, spec, strlen(spec) + 1);
	for (p = buf; n < 5; n++) {
		field[n] = p;
		p = strchr(p, ':');
		if (!p) {
			n++;
			break;
		}
		*p++ = '\0';
	}
	if (p)
		return -EINVAL;
	p = strchr(field[0], '/');
	if (p) {
		*p++ = '\0';
		if (kvpool_name_valid(field[0]))
			return -EINVAL;
		memcpy(t->pool, field[0], strlen(field[0]) + 1);
		field[0] = p;
	}
	if (kvpool_name_valid(field[0]))
		return -EINVAL;
	memcpy(t->name, field[0], strlen(field[0]) + 1);
	for (i = 1; i < n; i++) {
		if (!strcmp(field[i], "-"))
			continue;	/* the default */
		if (set_tenant_key(t, 1 << (i - 1), field[i]))
			return -EINVAL;
	}
	if (t->max != KVPOOL_UNLIMITED && t->min > t->max)
		return -EINVAL;
	return 0;
}

int kvd_conf_add_specs(struct kvd_conf *c, const char *const *specs, int n,
		       char *err, size_t errlen)
{
	struct kvd_tenant_conf t;
	int i, j;

	for (i = 0; i < n; i++) {
		if (kvd_tenant_spec_parse(specs[i], &t)) {
			snprintf(err, errlen, "--tenant %s: expected "
				 "[POOL/]NAME[:MAX[:MIN[:UID[:GID]]]] with "
				 "MIN <= MAX",
				 specs[i]);
			return -EINVAL;
		}
		for (j = 0; j < c->ntenants; j++)
			if (!strcmp(c->tenants[j].pool, t.pool) &&
			    !strcmp(c->tenants[j].name, t.name))
				break;
		if (j == KVD_CONF_MAX_TENANTS) {
			snprintf(err, errlen, "more than %d tenants",
				 KVD_CONF_MAX_TENANTS);
			return -EINVAL;
		}
		c->tenants[j] = t;
		if (j == c->ntenants)
			c->ntenants++;
	}
	return 0;
}
