/* SPDX-License-Identifier: MIT */
/*
 * hostmem.h - pool memory in the host (hostmem.c): the cpu backend's pool
 * and a dram tier.
 *
 * The whole capacity is one memfd (sealed against shrinking and growing),
 * mapped shared once with PROT_NONE (address space only), where the
 * daemon keeps pool memory for its next start (keep.h); elsewhere, or
 * when the file size limit is lower than the pool, anonymous memory.  A grow makes a
 * range read-write and populates it, so the daemon's memory really rises;
 * a shrink punches the range out of the file (its pages are freed) and
 * makes it inaccessible again, so it falls.  The memfd is kept (keep.h)
 * as (pool, KVD_KEEP_WHOLE, 0): a restarted daemon maps the same pages.
 * Being shmem, the pool gets transparent huge pages only where
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled is "advise" (or
 * "always"): Debian's default, "never", leaves it 4 KiB pages.
 */
#ifndef KVD_HOSTMEM_H
#define KVD_HOSTMEM_H

#include <stdbool.h>
#include <stdint.h>

struct kvd_pool;

struct kvd_hostmem {
	uint8_t *base;
	uint64_t bytes;			/* mapped (page multiple) */
	uint64_t page;
	int fd;				/* the memfd, or -1: anonymous */
	bool kept;			/* an earlier life's pages */
};

/* @bytes of pool @p (rounded up to pages): the kept memfd, or a new one
 * (kept from now on).  0 or -errno. */
int kvd_hostmem_init(struct kvd_hostmem *h, struct kvd_pool *p,
		     uint64_t bytes);
/* Unmap and close; the pages live on while the memfd is kept. */
void kvd_hostmem_fini(struct kvd_hostmem *h);
/* Make [off, off + len) accessible and populated / punch it out. */
int kvd_hostmem_map(struct kvd_hostmem *h, uint64_t off, uint64_t len);
int kvd_hostmem_unmap(struct kvd_hostmem *h, uint64_t off, uint64_t len);

#endif /* KVD_HOSTMEM_H */
