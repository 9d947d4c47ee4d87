/* SPDX-License-Identifier: MIT */
/*
 * server.h - the connection server (server.c): the listening socket,
 * connections and their requests.
 */
#ifndef KVD_SERVER_H
#define KVD_SERVER_H

#include "core.h"

/* server.c */
int kvd_listen(struct kvd *d);
void kvd_accept(struct kvd *d);
/*
 * One connection, without its thread (kvd_accept() adds the thread; the
 * fuzz harness drives a client directly): kvd_client_new() takes over the
 * connected socket @fd (-EUSERS: refused by the connection limits);
 * kvd_client_serve() receives and answers one record (0, or -errno when
 * the connection must end); kvd_client_free() closes everything and
 * returns the lease.
 */
int kvd_client_new(struct kvd *d, int fd, struct kvd_client **out);
/* Stack size of a connection thread (sized for the CPU kernels). */
uint64_t kvd_client_stack_bytes(void);
int kvd_client_serve(struct kvd_client *c);
void kvd_client_free(struct kvd_client *c);
void kvd_clients_stop(struct kvd *d);
/* Leases of @uid only, unless @uid is (uid_t)-1 (an admin peer). */
int kvd_fill_client_list(struct kvd_pool *p, struct kvp_client_rec *out,
			 uint32_t start, uint32_t cap, uint32_t *total,
			 uid_t uid);

#endif /* KVD_SERVER_H */
