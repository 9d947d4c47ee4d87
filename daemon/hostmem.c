// SPDX-License-Identifier: MIT
/*
 * hostmem.c - pool memory in the host: one memfd per pool (hostmem.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "hostmem.h"
#include "keep.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static int memfd_new(const struct kvd_pool *p, uint64_t bytes)
{
	char name[64];
	int fd, e;

	snprintf(name, sizeof(name), "kvpool-%s", p->name);
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int kvd_hostmem_init(struct kvd_hostmem *h, struct kvd_pool *p,
		     uint64_t bytes)
{
	struct stat sb;
	void *m;
	int fd, r;

	memset(h, 0, sizeof(*h));
	h->fd = -1;
	h->page = (uint64_t)sysconf(_SC_PAGESIZE);
	h->bytes = (bytes + h->page - 1) / h->page * h->page;
	if (!h->bytes)
		h->bytes = h->page;
	fd = kvd_keep_take(p, KVD_KEEP_WHOLE, 0);
	if (fd >= 0) {
		/* the geometry was checked (restart.c): a memfd of another
		 * size is not ours to use, and not to be replaced silently */
		if (fstat(fd, &sb) || (uint64_t)sb.st_size != h->bytes) {
			kvd_log(KVD_ERR, "pool %s: kept memory is %lld bytes, "
				"the pool needs %llu", p->name,
				(long long)sb.st_size,
				(unsigned long long)h->bytes);
			close(fd);
			return -EIO;
		}
		h->kept = true;
	} else if (kvd_keep_enabled(p->d)) {
		fd = memfd_new(p, h->bytes);
		if (fd == -EFBIG)	/* RLIMIT_FSIZE holds for memfds too */
			kvd_log(KVD_WARN, "pool %s: %llu bytes exceed the file "
				"size limit: its memory is not kept", p->name,
				(unsigned long long)h->bytes);
		else if (fd < 0)
			return fd;
	}
	if (fd < 0) {
		/* nothing keeps it: anonymous memory, as it dies with us */
		m = mmap(NULL, h->bytes, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED)
			return -errno;
		h->base = m;
		return 0;
	}
	m = mmap(NULL, h->bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (m == MAP_FAILED) {
		r = -errno;
		close(fd);
		return r;
	}
	/* shmem gets huge pages only where shmem_enabled allows "advise"
	 * (anonymous memory had them wherever THP is "always") */
	madvise(m, h->bytes, MADV_HUGEPAGE);
	h->base = m;
	h->fd = fd;
	if (!h->kept && kvd_keep_enabled(p->d))
		kvd_keep_put(p, KVD_KEEP_WHOLE, 0, fd);	/* logs a failure */
	return 0;
}

void kvd_hostmem_fini(struct kvd_hostmem *h)
{
	if (h->base)
		munmap(h->base, h->bytes);
	if (h->fd >= 0)
		close(h->fd);
	h->base = NULL;
	h->fd = -1;
}

int kvd_hostmem_map(struct kvd_hostmem *h, uint64_t off, uint64_t len)
{
	uint64_t i;

	if (!len)
		return 0;
	if (mprotect(h->base + off, len, PROT_READ | PROT_WRITE))
		return -errno;
	/* Back it now, like cuMemCreate does on a GPU (kept pages stay). */
	if (!madvise(h->base + off, len, MADV_POPULATE_WRITE))
		return 0;
	if (errno == ENOMEM) {
		mprotect(h->base + off, len, PROT_NONE);
		return -ENOMEM;
	}
	/* an older kernel: touch every page without changing it */
	for (i = 0; i < len; i += h->page) {
		volatile uint8_t *b = h->base + off + i;

		*b = *b;
	}
	return 0;
}

int kvd_hostmem_unmap(struct kvd_hostmem *h, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	if (h->fd < 0 ? madvise(h->base + off, len, MADV_DONTNEED) :
	    fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len))
		return -errno;
	if (mprotect(h->base + off, len, PROT_NONE))
		return -errno;
	return 0;
}
