// SPDX-License-Identifier: MIT
/*
 * tier_nvme.c - a lower tier in a file ("nvme"), e.g. on an NVMe drive.
 *
 * Block i lives at offset i * slot in the file the operator names, where
 * slot is block_bytes rounded up to 4 KiB.  The file is opened O_DIRECT
 * (when the filesystem allows it; buffered otherwise) and emptied at
 * start, unless an earlier life kept its descriptor (keep.h) and the
 * metadata region vouches for it (restart.c): then the restarted daemon
 * uses that very file (even if the path now names another) as it is.  Backing is lazy like
 * the memory tiers': a grow allocates the chunk's range with fallocate(2)
 * (so a full filesystem shows at grow time: the ledger's waiters get
 * -ENOMEM, never a swap that fails half way), a shrink punches the range
 * out (FALLOC_FL_PUNCH_HOLE) and truncates the file to the new top.
 * Blocks another tenant used last are zeroed in place before they are
 * read (nvme_zero, called by scrub.c), without I/O where the filesystem
 * can.
 *
 * I/O goes through io_uring (Debian's liburing) with up to KVD_NVME_DEPTH
 * requests in flight per swap worker, or plain pread/pwrite when io_uring
 * is not available (or --nvme-io pread).  O_DIRECT wants 4 KiB-aligned
 * buffers and lengths: a block whose buffer or size does not fit goes
 * through a bounce slot.  --inject-io-error N (tests) fails every Nth
 * block I/O with -EIO.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KVD_NO_URING
#include <liburing.h>
#endif

#include "core.h"
#include "tier.h"
#include "keep.h"

#define KVD_NVME_DEPTH	32
#define SLOT_ALIGN	4096ULL

struct nvme_priv {
	int fd;
	uint64_t slot;		/* bytes per block in the file */
	bool direct;		/* O_DIRECT */
	bool uring;		/* I/O through io_uring */
	uint32_t inject;	/* every Nth I/O fails (0: never) */
	_Atomic uint64_t nio;
	_Atomic int zero_how;	/* nvme_zero: 0 zero range, 1 hole, 2 write */
};

static struct nvme_priv *P(struct kvd_pool *p)
{
	return p->priv;
}

static bool uring_works(void)
{
#ifndef KVD_NO_URING
	struct io_uring r;

	if (io_uring_queue_init(4, &r, 0) == 0) {
		io_uring_queue_exit(&r);
		return true;
	}
#endif
	return false;
}

static int nvme_init(struct kvd_pool *p, uint64_t *align)
{
	struct kvd *d = p->d;
	const char *mode = d->o.nvme_io ? d->o.nvme_io : "auto";
	struct nvme_priv *np;
	struct stat sb;
	bool kept = false;
	int fd, e;

	np = calloc(1, sizeof(*np));
	if (!np)
		return -ENOMEM;
	np->direct = true;
	fd = kvd_keep_take(p, KVD_KEEP_WHOLE, 0);
	if (fd >= 0) {
		kept = true;
		np->direct = (fcntl(fd, F_GETFL) & O_DIRECT) != 0;
	} else {
		fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT,
			  0600);
	}
	if (fd < 0 && errno == EINVAL) {
		/* the filesystem has no O_DIRECT (tmpfs...) */
		np->direct = false;
		fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		e = -errno;
		kvd_log(KVD_ERR, "tier %s: cannot open %s: %s", p->name,
			p->path, strerror(-e));
		free(np);
		return e;
	}
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		kvd_log(KVD_ERR, "tier %s: %s is not a regular file", p->name,
			p->path);
		close(fd);
		free(np);
		return -EINVAL;
	}
	/* Contents from an earlier life mean nothing unless kept: start
	 * empty. */
	if (!kept && ftruncate(fd, 0)) {
		e = -errno;
		kvd_log(KVD_ERR, "tier %s: truncate %s: %s", p->name, p->path,
			strerror(-e));
		close(fd);
		free(np);
		return e;
	}
	if (!np->direct)
		kvd_log(KVD_NOTICE, "tier %s: %s does not take O_DIRECT, "
			"using buffered I/O", p->name, p->path);
	np->fd = fd;
	np->slot = (p->block_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	np->inject = d->o.inject_io_error;
	if (!strcmp(mode, "pread")) {
		np->uring = false;
	} else {
		np->uring = uring_works();
		if (!np->uring && !strcmp(mode, "uring")) {
			kvd_log(KVD_ERR, "tier %s: io_uring is not available",
				p->name);
			close(fd);
			free(np);
			return -ENOSYS;
		}
		if (!np->uring)
			kvd_log(KVD_NOTICE, "tier %s: io_uring not available, "
				"using pread/pwrite", p->name);
	}
	p->priv = np;
	*align = 1;
	if (!kept && kvd_keep_enabled(d))
		kvd_keep_put(p, KVD_KEEP_WHOLE, 0, fd);	/* logs a failure */
	return 0;
}

static void nvme_fini(struct kvd_pool *p)
{
	struct nvme_priv *np = P(p);

	if (!np)
		return;
	/* give the space back, unless a restarted daemon may want it */
	if (!kvd_keep_enabled(p->d) && ftruncate(np->fd, 0)) {
		/* nothing more to do */
	}
	close(np->fd);
	free(np);
	p->priv = NULL;
}

/* fallocate(2), again when a signal cut it short (EINTR). */
static int falloc(int fd, int mode, off_t off, off_t len)
{
	int r;

	do
		r = fallocate(fd, mode, off, len);
	while (r && errno == EINTR);
	return r;
}

static int nvme_map(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	struct nvme_priv *np = P(p);
	off_t off = (off_t)((uint64_t)from * np->slot);
	off_t len = (off_t)((uint64_t)(to - from) * np->slot);

	if (to <= from)
		return 0;
	if (falloc(np->fd, 0, off, len)) {
		int e = errno;

		kvd_log(KVD_WARN, "tier %s: cannot allocate %lld bytes in %s: "
			"%s", p->name, (long long)len, p->path, strerror(e));
		/* a full filesystem or a file size limit: no more room */
		if (e == ENOSPC || e == EFBIG || e == EDQUOT)
			return -ENOSPC;
		return -e;
	}
	return 0;
}

static int nvme_unmap(struct kvd_pool *p, uint32_t from, uint32_t to)
{
	struct nvme_priv *np = P(p);
	off_t off = (off_t)((uint64_t)from * np->slot);
	off_t len = (off_t)((uint64_t)(to - from) * np->slot);

	if (to <= from)
		return 0;
	if (falloc(np->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
		      len) && errno != EOPNOTSUPP)
		return -errno;
	if (ftruncate(np->fd, off))
		return -errno;
	return 0;
}

static int nvme_io_open(struct kvd_pool *p, struct kvd_io *io)
{
	struct nvme_priv *np = P(p);

	io->depth = KVD_NVME_DEPTH;
	io->bounce = aligned_alloc(SLOT_ALIGN, io->depth * np->slot);
	if (!io->bounce)
		return -ENOMEM;
	io->ring = NULL;
#ifndef KVD_NO_URING
	if (np->uring) {
		struct io_uring *r = calloc(1, sizeof(*r));

		if (r && io_uring_queue_init(io->depth, r, 0) == 0) {
			io->ring = r;
		} else {
			free(r);
			kvd_log(KVD_WARN, "tier %s: io_uring set-up failed, "
				"using pread/pwrite", p->name);
		}
	}
#endif
	return 0;
}

static void nvme_io_close(struct kvd_pool *p, struct kvd_io *io)
{
#ifndef KVD_NO_URING
	if (io->ring) {
		io_uring_queue_exit(io->ring);
		free(io->ring);
	}
#endif
	io->ring = NULL;
	free(io->bounce);
	io->bounce = NULL;
}

/* One block's I/O, as prepared. */
struct nvme_req {
	uint8_t *use;		/* buffer the file I/O uses */
	uint8_t *user;		/* the caller's buffer */
	uint64_t off;
	uint32_t len;
	int res;		/* bytes done or -errno */
};

static int sync_io(struct nvme_priv *np, struct nvme_req *q, bool wr)
{
	uint32_t done = 0;

	while (done < q->len) {
		ssize_t n = wr ? pwrite(np->fd, q->use + done, q->len - done,
					(off_t)(q->off + done)) :
				 pread(np->fd, q->use + done, q->len - done,
				       (off_t)(q->off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (uint32_t)n;
	}
	return (int)done;
}

#ifndef KVD_NO_URING
static int uring_batch(struct io_uring *ring, int fd, struct nvme_req *q,
		       uint32_t k, bool wr)
{
	uint32_t j, sub = 0, got = 0;
	int r;

	for (j = 0; j < k; j++) {
		struct io_uring_sqe *sqe;

		if (q[j].res)
			continue;	/* failed already (injected) */
		sqe = io_uring_get_sqe(ring);
		if (!sqe)
			return -EBUSY;
		if (wr)
			io_uring_prep_write(sqe, fd, q[j].use, q[j].len,
					    q[j].off);
		else
			io_uring_prep_read(sqe, fd, q[j].use, q[j].len,
					   q[j].off);
		io_uring_sqe_set_data(sqe, &q[j]);
		sub++;
	}
	if (!sub)
		return 0;
	r = io_uring_submit(ring);
	if (r < 0)
		return r;
	while (got < sub) {
		struct io_uring_cqe *cqe;
		struct nvme_req *rq;

		r = io_uring_wait_cqe(ring, &cqe);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		rq = io_uring_cqe_get_data(cqe);
		rq->res = cqe->res;
		if (cqe->res == 0)
			rq->res = -EIO;
		io_uring_cqe_seen(ring, cqe);
		got++;
	}
	return 0;
}
#endif

static int nvme_rw(struct kvd_pool *p, struct kvd_io *io,
		   const uint32_t *blocks, uint8_t *const *bufs, uint32_t n,
		   bool wr)
{
	struct nvme_priv *np = P(p);
	struct nvme_req q[KVD_NVME_DEPTH];
	uint32_t i, j, k;
	int r = 0;

	for (i = 0; i < n && !r; i += k) {
		k = n - i < io->depth ? n - i : io->depth;
		for (j = 0; j < k; j++) {
			uint8_t *buf = bufs[i + j];
			bool fits = !np->direct ||
				    (p->block_bytes == np->slot &&
				     !((uintptr_t)buf & (SLOT_ALIGN - 1)));

			q[j].user = buf;
			q[j].use = fits ? buf : io->bounce + j * np->slot;
			q[j].off = (uint64_t)blocks[i + j] * np->slot;
			q[j].len = np->direct ? (uint32_t)np->slot :
					(uint32_t)p->block_bytes;
			q[j].res = 0;
			if (wr && q[j].use != buf) {
				memcpy(q[j].use, buf, p->block_bytes);
				memset(q[j].use + p->block_bytes, 0,
				       np->slot - p->block_bytes);
			}
			if (np->inject &&
			    atomic_fetch_add(&np->nio, 1) % np->inject ==
			    np->inject - 1)
				q[j].res = -EIO;
		}
#ifndef KVD_NO_URING
		if (io->ring) {
			r = uring_batch(io->ring, np->fd, q, k, wr);
			if (r) {
				/* the ring itself failed: requests may still
				 * be in it; drop it, go on with pread */
				kvd_log(KVD_WARN, "tier %s: io_uring: %s, "
					"using pread/pwrite", p->name,
					strerror(-r));
				io_uring_queue_exit(io->ring);
				free(io->ring);
				io->ring = NULL;
				r = 0;
				for (j = 0; j < k; j++)
					if (!q[j].res || q[j].res > 0)
						q[j].res = sync_io(np, &q[j],
								   wr);
			}
		} else
#endif
		{
			for (j = 0; j < k; j++)
				if (!q[j].res)
					q[j].res = sync_io(np, &q[j], wr);
		}
		for (j = 0; j < k && !r; j++) {
			if (q[j].res < 0)
				r = q[j].res;
			else if ((uint32_t)q[j].res != q[j].len)
				r = -EIO;
			else if (!wr && q[j].use != q[j].user)
				memcpy(q[j].user, q[j].use, p->block_bytes);
		}
	}
	if (r)
		kvd_log(KVD_WARN, "tier %s: %s failed: %s", p->name,
			wr ? "write" : "read", strerror(-r));
	return r;
}

static int nvme_read(struct kvd_pool *p, struct kvd_io *io,
		     const uint32_t *blocks, void *const *bufs, uint32_t n)
{
	return nvme_rw(p, io, blocks, (uint8_t *const *)bufs, n, false);
}

static int nvme_write(struct kvd_pool *p, struct kvd_io *io,
		      const uint32_t *blocks, const void *const *bufs,
		      uint32_t n)
{
	return nvme_rw(p, io, blocks, (uint8_t *const *)bufs, n, true);
}

/* Write zeros over [off, off + len) (slot multiples). */
static int write_zeros(struct nvme_priv *np, uint64_t off, uint64_t len)
{
	uint8_t *z = aligned_alloc(SLOT_ALIGN, np->slot);
	struct nvme_req q;
	int r = 0;

	if (!z)
		return -ENOMEM;
	memset(z, 0, np->slot);
	q.use = q.user = z;
	q.len = (uint32_t)np->slot;
	for (q.off = off; q.off < off + len && r >= 0; q.off += np->slot)
		r = sync_io(np, &q, true);
	free(z);
	return r < 0 ? r : 0;
}

/*
 * Zero whole blocks before another tenant uses them.  The range becomes
 * zeros without I/O where the filesystem can (FALLOC_FL_ZERO_RANGE: ext4,
 * xfs), else a hole that is allocated again at once (tmpfs: a swap into
 * it must not find the filesystem full), else zeros written.
 */
static int nvme_zero(struct kvd_pool *p, struct kvd_io *io,
		     const uint32_t *blocks, uint32_t n)
{
	struct nvme_priv *np = P(p);
	uint32_t i, j;
	int r = 0;

	for (i = 0; i < n && !r; i = j) {
		off_t off, len;
		int how = atomic_load(&np->zero_how);

		for (j = i + 1; j < n && blocks[j] == blocks[j - 1] + 1; j++)
			;
		off = (off_t)((uint64_t)blocks[i] * np->slot);
		len = (off_t)((uint64_t)(j - i) * np->slot);
		if (how == 0 &&
		    !falloc(np->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
			       off, len))
			continue;
		if (how == 0 && errno != EOPNOTSUPP)
			return -errno;
		if (how <= 1 &&
		    !falloc(np->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       off, len)) {
			atomic_store(&np->zero_how, 1);
			if (falloc(np->fd, 0, off, len))
				return errno == ENOSPC ? -ENOSPC : -errno;
			continue;
		}
		if (how <= 1 && errno != EOPNOTSUPP)
			return -errno;
		atomic_store(&np->zero_how, 2);
		r = write_zeros(np, (uint64_t)off, (uint64_t)len);
	}
	return r;
}

static void *nvme_host_ptr(struct kvd_pool *p, uint32_t block)
{
	return NULL;
}

static uint32_t nvme_flags(struct kvd_pool *p)
{
	struct nvme_priv *np = P(p);

	if (!np)
		return 0;
	return (np->direct ? KVP_TIER_F_DIRECT : 0) |
	       (np->uring ? KVP_TIER_F_URING : 0);
}

const struct kvd_tier_ops kvd_tier_nvme = {
	.name = "nvme",
	.init = nvme_init,
	.fini = nvme_fini,
	.map = nvme_map,
	.unmap = nvme_unmap,
	.host_ptr = nvme_host_ptr,
	.read = nvme_read,
	.write = nvme_write,
	.zero = nvme_zero,
	.io_open = nvme_io_open,
	.io_close = nvme_io_close,
	.flags = nvme_flags,
};
