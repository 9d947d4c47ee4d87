/* SPDX-License-Identifier: MIT */
/*
 * keep_store.h - a test double of daemon/keep.c: the functions of
 * daemon/keep.h over a table of descriptors in this process, and the
 * table's passage to another process over a unix socket (SCM_RIGHTS), as
 * a store outside the daemon would hand it back after a restart.
 */
#ifndef KEEP_STORE_H
#define KEEP_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "keep.h"

struct ks_stats {
	unsigned int puts;		/* kvd_keep_put calls that kept */
	unsigned int drops;		/* kvd_keep_drop calls that dropped */
	unsigned int takes;		/* kvd_keep_take calls that gave one */
	unsigned int misses;		/* and that found nothing */
};

extern bool ks_enabled;		/* what kvd_keep_enabled says */
extern struct ks_stats ks_st;
/* kvd_restart_lost() calls: chunks a real start would drop it all for */
extern unsigned int ks_lost;

/* Keep @fd (now the table's) as @tag: 0 or -errno. */
int ks_add(uint64_t tag, int fd);
/* Descriptors kept; whether one is kept as @tag. */
unsigned int ks_count(void);
bool ks_has(uint64_t tag);
/* Send every kept descriptor over @sock, then close them: 0 or -errno. */
int ks_send(int sock);
/* Receive what ks_send sent into the table: the count or -errno. */
int ks_recv(int sock);
/* Close every kept descriptor. */
void ks_clear(void);

#endif /* KEEP_STORE_H */
