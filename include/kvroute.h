/* SPDX-License-Identifier: MIT */
/*
 * kvroute.h - libkvroute: which kvpool node holds the longest cached
 * prefix of a request, for a router written in C (or in Python through
 * ctypes: python/kvpool/route.py).  Documentation/cluster.rst, "The
 * cluster view".
 *
 * It reads what every kvpoold of a cluster tier publishes in the Redis
 * Cluster: the set kvpool:nodes, each node's heartbeat (the hash
 * kvpool:node:NAME, with a TTL: a node whose heartbeat expired is gone)
 * and each node's stream of stored/removed block events
 * (kvpool:events:NAME, bounded).  The view is kept between calls and
 * brought up to date by kvr_refresh() (new stream entries only).
 *
 * A request's blocks are found by their chain keys, so the router needs
 * what the nodes use: the model's name as the engine declares it, and the
 * tenant's cluster namespace key (the bytes of its key file).  Every call
 * returns 0 / a count or -errno.
 */
#ifndef KVROUTE_H
#define KVROUTE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvr;

struct kvr_node {
	char name[64];
	uint64_t free;			/* top pool: blocks not leased */
	uint64_t capacity;
	uint64_t used;
	uint64_t backed;
	uint64_t block_bytes;
	uint64_t prefix_entries;	/* blocks in its prefix caches */
	uint64_t keys;			/* blocks the stream says it holds */
	uint64_t reserved[4];
};

struct kvr_route {
	char node[64];			/* the node to send the request to */
	uint32_t blocks;		/* full blocks of the prompt it holds */
	uint32_t tokens;		/* tokens in them */
	uint64_t free;			/* its free blocks */
	uint32_t nodes;			/* live nodes considered */
	uint32_t pad;
	uint64_t reserved[4];
};

/* seeds: "HOST:PORT[,HOST:PORT...]" of the Redis Cluster; timeout_ms
 * bounds each round of reads (0: 2000).  Nothing is read yet. */
int kvr_open(const char *seeds, uint32_t timeout_ms, struct kvr **out);
void kvr_close(struct kvr *r);
/* Read heartbeats and new events: returns the live nodes. */
int kvr_refresh(struct kvr *r);
/* The live nodes of the last refresh (up to cap); returns their number. */
int kvr_nodes(struct kvr *r, struct kvr_node *out, size_t cap);
/* A node's heartbeat as its JSON text (valid until the next refresh). */
const char *kvr_node_json(struct kvr *r, size_t i);
/*
 * The node holding the longest prefix of tokens[0..ntok) of model (as
 * declared with kvl_layout_declare_model) for the tenant whose namespace
 * key is key[0..keylen); ties and misses go to the node with the most
 * free blocks.  Refreshes first.  -ENOENT: no live node, or none
 * declared that model.
 */
int kvr_route(struct kvr *r, const void *key, size_t keylen,
	      const char *model, const uint32_t *tokens, size_t ntok,
	      struct kvr_route *out);

#ifdef __cplusplus
}
#endif

#endif /* KVROUTE_H */
