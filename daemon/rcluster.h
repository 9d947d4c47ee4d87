/* SPDX-License-Identifier: MIT */
/*
 * rcluster.h - a Redis Cluster client on top of hiredis (0.14's API),
 * written against the Redis Cluster specification:
 *
 *  - key slots: CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the
 *    key, or of its hash tag (the bytes between the first '{' and the
 *    first '}' after it, when there is at least one), modulo 16384;
 *  - the slot map from CLUSTER SLOTS, asked of any node that answers;
 *  - MOVED redirections (the slot's new owner is remembered at once, and a
 *    refresh of the whole map is due), ASK redirections (ASKING, then the
 *    command, on the named node, the map unchanged);
 *  - one pipelined round per call: every command goes to its slot's node,
 *    all nodes are written and read in parallel (non-blocking sockets and
 *    one poll()), until every command has its reply or the call's
 *    deadline passes;
 *  - reconnects with exponential back-off: a node that refused a
 *    connection or failed mid-call is not tried again before its back-off
 *    ends; commands for it fail at once (-EHOSTUNREACH) meanwhile.
 *
 * A connection that still owes replies when the deadline passes is closed
 * (its replies would otherwise arrive for later commands) and reopened
 * next time.  No threads, no locks: one struct rc_cluster belongs to one
 * thread.  Replies are hiredis' (free them with freeReplyObject()).
 */
#ifndef KVPOOL_RCLUSTER_H
#define KVPOOL_RCLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RC_SLOTS	16384
#define RC_MAX_NODES	64

struct rc_cluster;
struct redisReply;

struct rc_opts {
	const char *seeds;		/* "HOST:PORT[,HOST:PORT...]" */
	uint32_t connect_timeout_ms;	/* one connection attempt (1000) */
	uint32_t backoff_min_ms;	/* first back-off (100) */
	uint32_t backoff_max_ms;	/* longest back-off (5000) */
	uint32_t max_redirects;		/* per command and call (5) */
};

/* One command of a call. */
struct rc_cmd {
	/* in */
	int argc;
	const char **argv;
	const size_t *argvlen;
	int key;			/* argv index of the key; -1: any node */
	/* out */
	struct redisReply *reply;	/* the reply (error replies too), or
					 * NULL with err set */
	int err;			/* 0, -ETIMEDOUT (deadline), -EHOSTUNREACH
					 * (no reachable node for the slot),
					 * -ECONNRESET (the connection failed
					 * before the reply), -EAGAIN (TRYAGAIN,
					 * CLUSTERDOWN, LOADING, MASTERDOWN),
					 * -ELOOP (too many redirections),
					 * -ENOMEM */
	uint32_t redirects;		/* MOVED and ASK followed */
};

struct rc_stats {
	uint64_t calls;
	uint64_t commands;
	uint64_t moved;			/* MOVED redirections followed */
	uint64_t ask;			/* ASK redirections followed */
	uint64_t connects;		/* connections opened */
	uint64_t connect_errors;	/* refused, failed, timed out */
	uint64_t io_errors;		/* connections lost mid-call */
	uint64_t timeouts;		/* commands past their deadline */
	uint64_t unreachable;		/* commands for a node in back-off */
	uint64_t refreshes;		/* slot maps read */
	uint64_t refresh_errors;
};

/* CRC16/XMODEM of buf (the specification's test: "123456789" -> 0x31c3). */
uint16_t rc_crc16(const void *buf, size_t len);
/* The slot of a key, hash tags included. */
uint16_t rc_slot(const void *key, size_t len);

/* The client: seeds parsed, nothing connected.  0, -EINVAL, -ENOMEM. */
int rc_open(const struct rc_opts *o, struct rc_cluster **out);
void rc_close(struct rc_cluster *c);

/*
 * Run cmds[0..n) as one pipelined round until each has a reply or
 * deadline_ns (CLOCK_MONOTONIC) passes.  Returns the number of commands
 * with a reply (of any type); the others have err set.
 */
int rc_exec(struct rc_cluster *c, struct rc_cmd *cmds, size_t n,
	    uint64_t deadline_ns);
/*
 * Read the slot map (CLUSTER SLOTS) from the first node that answers,
 * known nodes first, then the seeds.  0, or -errno (the map unchanged).
 */
int rc_refresh(struct rc_cluster *c, uint64_t deadline_ns);
/* A MOVED reply, a lost connection, no map yet or a map that does not
 * cover every slot: refresh soon. */
bool rc_refresh_due(const struct rc_cluster *c);
/* Masters in the current map (0: no map), slots the map covers. */
unsigned int rc_masters(const struct rc_cluster *c);
unsigned int rc_slots_covered(const struct rc_cluster *c);
/* The node that serves a slot in the map: 0, or -ENOENT. */
int rc_slot_owner(const struct rc_cluster *c, uint16_t slot, char *host,
		  size_t hostlen, int *port);
void rc_get_stats(const struct rc_cluster *c, struct rc_stats *st);

uint64_t rc_now_ns(void);

#endif /* KVPOOL_RCLUSTER_H */
