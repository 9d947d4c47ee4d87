/* SPDX-License-Identifier: MIT */
/*
 * config.h - kvpoold's configuration file (kvpoold.conf(5)).
 *
 * An INI file parsed with libinih: [daemon], [pool], [cluster] and [tenant
 * NAME] (or [tenant POOL/NAME]) sections of "key = value" lines.  kvd_conf_parse() turns the text into a
 * struct kvd_conf, checking every value the way the command-line flags are
 * checked; the first error comes back as "line N: ..." and the struct is
 * then unusable.  The parser touches nothing else: the daemon decides what
 * to do with the result (kvd_conf_to_opts(), and the reload in tenants.c).
 */
#ifndef KVPOOLD_CONFIG_H
#define KVPOOLD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <linux/kvpool.h>

#include "core.h"

/* Where the daemon looks when no --config is given. */
#ifndef KVD_CONF_DEFAULT
#define KVD_CONF_DEFAULT	"/etc/kvpool/kvpoold.conf"
#endif

#define KVD_CONF_MAX_TENANTS	256
/* Longest line the file may have (libinih's line buffer, less the end). */
#define KVD_CONF_MAX_LINE	196
#define KVD_CONF_ERR_LEN	256

/* Keys of the file; bit (1 << key) of kvd_conf.set says the file set it. */
enum kvd_conf_key {
	KVD_K_SOCKET, KVD_K_DEVICE, KVD_K_BACKEND, KVD_K_LEDGER, KVD_K_USER,
	KVD_K_ADMIN_GROUP, KVD_K_CUDA_DEVICE, KVD_K_LOG_LEVEL,
	KVD_K_METRICS_LISTEN,
	KVD_K_POOL_NAME, KVD_K_BLOCK_BYTES, KVD_K_CAPACITY, KVD_K_CHUNK_BLOCKS,
	KVD_K_DEFAULT_MAX, KVD_K_SHRINK_DELAY_MS, KVD_K_BACKING_LIMIT,
	KVD_K_TIER, KVD_K_NVME_IO,
	KVD_K_METRICS_SCOPE, KVD_K_PREFIX_LEND_PERCENT, KVD_K_PREFIX_DEMOTE,
	KVD_K_NKEYS,
};

/* A tenant: from a [tenant [POOL/]NAME] section or a --tenant flag. */
struct kvd_tenant_conf {
	char pool[KVPOOL_NAME_LEN];	/* "": the top pool (and no limit in
					 * the lower ones) */
	char name[KVPOOL_NAME_LEN];
	uint32_t max;		/* KVPOOL_UNLIMITED: no limit */
	uint32_t min;
	uint32_t uid;		/* allowed uid, KVPOOL_ID_NONE: nobody */
	uint32_t gid;		/* allowed gid, KVPOOL_ID_NONE: nobody */
	int line;		/* its section's line; 0: a flag */
};

struct kvd_conf {
	uint32_t set;		/* 1 << enum kvd_conf_key */
	char socket_path[108];
	char device_path[160];
	char backend[8];
	char ledger[8];
	char user[64];
	char admin_group[64];
	char metrics_listen[128];	/* "" (off) or ADDR:PORT */
	char pool[KVPOOL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity;
	uint32_t chunk_blocks;
	uint32_t default_max;
	uint32_t shrink_delay_ms;
	uint32_t backing_limit;
	int ntiers;			/* tier = lines, in order */
	struct kvd_tier_spec tiers[KVD_MAX_TIERS - 1];
	char nvme_io[8];
	int metrics_scope;		/* KVP_METRICS_PUBLIC / _OPERATOR */
	uint32_t prefix_lend_percent;
	int prefix_demote;		/* prefix_demote = yes */
	int cuda_device;
	int log_level;			/* KVD_ERR .. KVD_DEBUG */
	int ntenants;
	struct kvd_tenant_conf tenants[KVD_CONF_MAX_TENANTS];
	int has_cluster;		/* a [cluster] section */
	struct kvd_cluster_opts cluster;
};

/*
 * Parse len bytes of text (need not end in NUL).  0 on success; -EINVAL
 * with "line N: what" in err (errlen bytes, always terminated) otherwise.
 */
int kvd_conf_parse(const char *text, size_t len, struct kvd_conf *c,
		   char *err, size_t errlen);

/*
 * Read and parse a file.  -ENOENT if it does not exist (err says so), other
 * -errno for I/O errors, -EINVAL for a bad file.
 */
int kvd_conf_load(const char *path, struct kvd_conf *c, char *err,
		  size_t errlen);

/* Copy every key the file set into o (its strings point into c); the
 * file's tiers too. */
void kvd_conf_to_opts(const struct kvd_conf *c, struct kvd_opts *o);

/*
 * A --tenant spec, [POOL/]NAME[:MAX[:MIN[:UID[:GID]]]] ("max" or "-":
 * unlimited / nobody), checked like a [tenant] section.  0 or -EINVAL.
 */
int kvd_tenant_spec_parse(const char *spec, struct kvd_tenant_conf *t);

/*
 * Add --tenant specs to c's tenants; a spec replaces the file's tenant of
 * the same pool and name (flags override the file).  0 or -EINVAL (err says why).
 */
int kvd_conf_add_specs(struct kvd_conf *c, const char *const *specs, int n,
		       char *err, size_t errlen);

/* metrics_scope / --metrics-scope: "public" or "operator" into
 * KVD_METRICS_*, else -EINVAL. */
int kvd_metrics_scope_parse(const char *s);

/* ADDR:PORT ("[v6]:PORT" for IPv6): 0 if well formed, else -EINVAL. */
int kvd_listen_addr_check(const char *s);

#endif /* KVPOOLD_CONFIG_H */
