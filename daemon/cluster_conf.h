/* SPDX-License-Identifier: MIT */
/*
 * cluster_conf.h - the options of the cluster tier: kvpoold.conf's
 * [cluster] section and the --cluster-KEY flags take the same keys and
 * values (kvpoold.conf(5), Documentation/cluster.rst).
 */
#ifndef KVPOOLD_CLUSTER_CONF_H
#define KVPOOLD_CLUSTER_CONF_H

#include <stdint.h>

struct kvd_cluster_opts {
	char nodes[256];	/* seeds HOST:PORT[,...]; "": no cluster tier */
	char name[64];		/* this node's name (default: the host's) */
	char keys[160];		/* folder of namespace key files, or "" */
	uint32_t policy;	/* enum kvp_cluster_policy */
	uint32_t deadline_ms;	/* MATCH waits at most this long (50) */
	uint32_t heartbeat_ms;	/* heartbeat period; its TTL is 3 times */
	uint32_t stream_maxlen;	/* events kept per node (about) */
	uint32_t value_ttl_s;	/* EX of stored values, 0: none */
	uint64_t queue_bytes;	/* values waiting to be stored, at most */
	uint64_t fetch_bytes;	/* value bytes one MATCH fetches, at most */
};

/* The keys, in the order of the --cluster-KEY flags ('_' is '-' there). */
extern const char *const kvd_cluster_opt_keys[];
#define KVD_CLUSTER_NOPTS	10

void kvd_cluster_opts_default(struct kvd_cluster_opts *o);
/* Set key to value: NULL, or what is wrong (a static string). */
const char *kvd_cluster_opt_set(struct kvd_cluster_opts *o, const char *key,
				const char *value);

#endif /* KVPOOLD_CLUSTER_CONF_H */
