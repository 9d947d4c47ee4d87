/* SPDX-License-Identifier: MIT */
/*
 * devbuf.h - device buffers of GPU tenants (devbuf.c).
 */
#ifndef KVD_DEVBUF_H
#define KVD_DEVBUF_H

#include "core.h"

/* devbuf.c: device buffers of GPU tenants */
struct kvp_devbuf;
struct kvp_devbuf_reply;
struct kvp_devbuf_del;
struct kvp_kv_dev;
struct kvp_attn_dev;
/* fd: the descriptor that came with the request (-1: none); closed */
int kvd_op_devbuf_add(struct kvd_client *c, const struct kvp_devbuf *q,
		      int fd, struct kvp_devbuf_reply *rep);
int kvd_op_devbuf_del(struct kvd_client *c, const struct kvp_devbuf_del *q);
int kvd_op_kv_dev(struct kvd_client *c, const struct kvp_kv_dev *q,
		  bool write);
int kvd_op_attn_dev(struct kvd_client *c, const struct kvp_attn_dev *q);
void kvd_devbufs_clear(struct kvd *d, struct kvd_devbufs *t);

#endif /* KVD_DEVBUF_H */
