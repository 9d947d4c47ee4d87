// SPDX-License-Identifier: MIT
/*
 * keep.c - kept backing (keep.h): the descriptors that hold pool memory,
 * kept where they outlive the daemon.
 *
 * Two stores:
 *  - module: each pool's own owner file, KVPOOL_IOC_FD_DEPOSIT (the module
 *    keeps the file while no owner runs, FD_FETCH hands it back to the
 *    owner that re-attaches, FD_DROP forgets it);
 *  - the service manager's file descriptor store (in-process ledger, when
 *    $NOTIFY_SOCKET is set and the ledger is kept too: restart.c):
 *    sd_pid_notify_with_fds("FDSTORE=1\nFDNAME=kvp-<tag>"), handed back at
 *    the next start as $LISTEN_FDS with $LISTEN_FDNAMES.
 *
 * A restarted daemon first loads what was kept into a table (tag -> fd);
 * kvd_keep_take() dups from it; kvd_keep_discard() empties table and
 * store when the metadata region does not vouch for the contents.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef KVD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "core.h"
#include "keep.h"
#include "restart.h"

/* What was kept by an earlier life, not yet used or discarded. */
struct kept {
	uint64_t tag;
	int fd;
	bool taken;
};

#define KEPT_MAX	(KVPOOL_DEPOSIT_MAX * KVD_MAX_TIERS)

static struct kept kept[KEPT_MAX];
static unsigned int nkept;
/* Put before the pool's owner file existed (module): deposited then. */
static struct kept pending[KEPT_MAX];
static unsigned int npending;
static int store;		/* KVD_KEEP_STORE_* */
static unsigned long long nput, ndrop;

#define FDNAME_PREFIX	"kvp-"

int kvd_keep_store(void)
{
	return store;
}

bool kvd_keep_enabled(struct kvd *d)
{
	(void)d;
	return store != KVD_KEEP_STORE_NONE;
}

static void kept_add(uint64_t tag, int fd)
{
	unsigned int i;

	for (i = 0; i < nkept; i++)
		if (kept[i].tag == tag) {
			close(kept[i].fd);
			kept[i].fd = fd;
			return;
		}
	if (nkept == KEPT_MAX) {
		close(fd);
		return;
	}
	kept[nkept].tag = tag;
	kept[nkept].fd = fd;
	kept[nkept].taken = false;
	nkept++;
}

static int kept_find(uint64_t tag)
{
	unsigned int i;

	for (i = 0; i < nkept; i++)
		if (kept[i].tag == tag)
			return (int)i;
	return -1;
}

static void kept_forget(uint64_t tag)
{
	int i = kept_find(tag);

	if (i < 0)
		return;
	close(kept[i].fd);
	kept[i] = kept[--nkept];
}

/* ---- the module's deposit ------------------------------------------------ */

static void pending_forget(uint64_t tag)
{
	unsigned int i;

	for (i = 0; i < npending; i++)
		if (pending[i].tag == tag) {
			close(pending[i].fd);
			pending[i] = pending[--npending];
			return;
		}
}

static int module_put(struct kvd_pool *p, uint64_t tag, int fd)
{
	struct kvpool_fd_deposit dp;

	if (p->owner_fd < 0) {
		int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);

		if (dup < 0)
			return -errno;
		pending_forget(tag);
		if (npending == KEPT_MAX) {
			close(dup);
			return -ENOSPC;
		}
		pending[npending].tag = tag;
		pending[npending].fd = dup;
		npending++;
		return 0;
	}
	memset(&dp, 0, sizeof(dp));
	dp.tag = tag;
	dp.fd = fd;
	return ioctl(p->owner_fd, KVPOOL_IOC_FD_DEPOSIT, &dp) ? -errno : 0;
}

static void module_drop(struct kvd_pool *p, uint64_t tag)
{
	struct kvpool_fd_drop dr;

	if (p->owner_fd < 0) {
		pending_forget(tag);
		return;
	}
	memset(&dr, 0, sizeof(dr));
	dr.tag = tag;
	if (ioctl(p->owner_fd, KVPOOL_IOC_FD_DROP, &dr) && errno != ENOENT)
		kvd_log(KVD_WARN, "pool %s: dropping kept descriptor %llx: %s",
			p->name, (unsigned long long)tag, strerror(errno));
}

/* What pool @p's owner file holds for us: into the table. */
int kvd_keep_load_module(struct kvd_pool *p)
{
	struct kvpool_fd_fetch f;
	uint32_t i;
	int n = 0;

	for (i = 0; i < KVPOOL_DEPOSIT_MAX; i++) {
		memset(&f, 0, sizeof(f));
		f.index = i;
		if (ioctl(p->owner_fd, KVPOOL_IOC_FD_FETCH, &f)) {
			if (errno == ENOENT)
				break;
			return -errno;
		}
		/* a tag of another pool cannot be ours: forget it */
		if ((f.tag >> 56) != p->tier) {
			close(f.fd);
			continue;
		}
		kept_add(f.tag, f.fd);
		n++;
	}
	return n;
}

/* ---- the service manager's store ----------------------------------------- */

#ifdef KVD_HAVE_SYSTEMD
static void sd_drop(uint64_t tag);

static int sd_put(uint64_t tag, int fd)
{
	char msg[96];
	int r;

	/* the store keeps every descriptor under a name: replace it */
	sd_drop(tag);
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=" FDNAME_PREFIX "%016llx",
		 (unsigned long long)tag);
	r = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
	if (r < 0)
		return r;
	return r ? 0 : -EOPNOTSUPP;	/* 0: no $NOTIFY_SOCKET */
}

static void sd_drop(uint64_t tag)
{
	char msg[96];

	snprintf(msg, sizeof(msg),
		 "FDSTOREREMOVE=1\nFDNAME=" FDNAME_PREFIX "%016llx",
		 (unsigned long long)tag);
	if (sd_pid_notify(0, 0, msg) < 0)
		kvd_log(KVD_WARN, "service manager: cannot remove kept "
			"descriptor %llx", (unsigned long long)tag);
}

bool kvd_keep_sd_available(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	return e && e[0];
}

int kvd_keep_load_listen(void)
{
	char **names = NULL;
	int n, i, got = 0;

	n = sd_listen_fds_with_names(1, &names);
	if (n <= 0)
		return n;
	for (i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *nm = names ? names[i] : NULL;
		unsigned long long tag;
		char *end;

		if (!nm || strncmp(nm, FDNAME_PREFIX, strlen(FDNAME_PREFIX))) {
			/* not ours (a socket to listen on...): left alone */
			free(names ? names[i] : NULL);
			continue;
		}
		errno = 0;
		tag = strtoull(nm + strlen(FDNAME_PREFIX), &end, 16);
		if (errno || *end) {
			close(fd);
		} else {
			int c = fcntl(fd, F_SETFD, FD_CLOEXEC);

			(void)c;
			kept_add(tag, fd);
			got++;
		}
		free(names[i]);
	}
	free(names);
	return got;
}
#else
static int sd_put(uint64_t tag, int fd)
{
	(void)tag;
	(void)fd;
	return -EOPNOTSUPP;
}

static void sd_drop(uint64_t tag)
{
	(void)tag;
}

bool kvd_keep_sd_available(void)
{
	return false;
}

int kvd_keep_load_listen(void)
{
	return 0;
}
#endif

/* ---- the interface ---------------------------------------------------------- */

void kvd_keep_set_store(int s)
{
	store = s;
}

int kvd_keep_memfd(const char *name, size_t bytes, void **map)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r;
	void *m;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)) {
		r = -errno;
		close(fd);
		return r;
	}
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		r = -errno;
		close(fd);
		return r;
	}
	*map = m;
	return fd;
}

int kvd_keep_put(struct kvd_pool *p, uint32_t kind, uint32_t index, int fd)
{
	uint64_t tag = kvd_keep_tag(p->tier, kind, index);
	int r;

	switch (store) {
	case KVD_KEEP_STORE_MODULE:
		r = module_put(p, tag, fd);
		break;
	case KVD_KEEP_STORE_SYSTEMD:
		r = sd_put(tag, fd);
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (r)
		kvd_log(KVD_WARN, "pool %s: cannot keep descriptor %llx: %s",
			p->name, (unsigned long long)tag, strerror(-r));
	else
		nput++;
	return r;
}

void kvd_keep_drop(struct kvd_pool *p, uint32_t kind, uint32_t index)
{
	uint64_t tag = kvd_keep_tag(p->tier, kind, index);

	kept_forget(tag);
	switch (store) {
	case KVD_KEEP_STORE_MODULE:
		module_drop(p, tag);
		break;
	case KVD_KEEP_STORE_SYSTEMD:
		sd_drop(tag);
		break;
	default:
		return;
	}
	ndrop++;
}

int kvd_keep_take(struct kvd_pool *p, uint32_t kind, uint32_t index)
{
	int i = kept_find(kvd_keep_tag(p->tier, kind, index)), fd;

	if (i < 0)
		return -ENOENT;
	kept[i].taken = true;
	fd = fcntl(kept[i].fd, F_DUPFD_CLOEXEC, 3);
	return fd < 0 ? -errno : fd;
}

bool kvd_keep_has(struct kvd_pool *p)
{
	unsigned int i;

	for (i = 0; i < nkept; i++)
		if ((kept[i].tag >> 56) == p->tier)
			return true;
	return false;
}

/* Forget everything an earlier life kept for pool @p (or all: NULL). */
void kvd_keep_discard(struct kvd *d, struct kvd_pool *p)
{
	unsigned int i = 0;

	while (i < nkept) {
		uint64_t tag = kept[i].tag;
		struct kvd_pool *q;

		if (p && (tag >> 56) != p->tier) {
			i++;
			continue;
		}
		q = (tag >> 56) < d->npools ? &d->pools[tag >> 56] : NULL;
		if (q)
			kvd_keep_drop(q, (uint32_t)(tag >> 48) & 0xff,
				      (uint32_t)tag);
		else
			kept_forget(tag);
	}
	if (!p && store == KVD_KEEP_STORE_MODULE)
		for (i = 0; i < d->npools; i++) {
			struct kvpool_fd_drop dr;

			if (d->pools[i].owner_fd < 0)
				continue;
			memset(&dr, 0, sizeof(dr));
			dr.tag = KVPOOL_TAG_ALL;
			if (ioctl(d->pools[i].owner_fd, KVPOOL_IOC_FD_DROP,
				  &dr) && errno != ENOENT)
				kvd_log(KVD_WARN, "pool %s: dropping kept "
					"descriptors: %s", d->pools[i].name,
					strerror(errno));
		}
}

void kvd_keep_flush(struct kvd_pool *p)
{
	unsigned int i = 0;

	while (i < npending) {
		struct kept k = pending[i];

		if ((k.tag >> 56) != p->tier) {
			i++;
			continue;
		}
		pending[i] = pending[--npending];
		if (store == KVD_KEEP_STORE_MODULE && p->owner_fd >= 0 &&
		    module_put(p, k.tag, k.fd))
			kvd_log(KVD_WARN, "pool %s: cannot keep descriptor "
				"%llx: %s", p->name, (unsigned long long)k.tag,
				strerror(errno));
		close(k.fd);
	}
}

/* Every pool is mapped: what nobody took back (a chunk above the backed
 * blocks, a kind this build does not know) is dropped from the store, so
 * that it frees its memory; then the table is closed. */
void kvd_keep_loaded_done(struct kvd *d)
{
	unsigned int i = 0;

	while (i < nkept) {
		uint64_t tag = kept[i].tag;
		unsigned int tier = (unsigned int)(tag >> 56);

		if (kept[i].taken || tier >= d->npools) {
			i++;
			continue;
		}
		kvd_log(KVD_INFO, "pool %s: dropping kept descriptor %llx that "
			"nothing took back", d->pools[tier].name,
			(unsigned long long)tag);
		kvd_keep_drop(&d->pools[tier], (uint32_t)(tag >> 48) & 0xff,
			      (uint32_t)tag);	/* removes kept[i] */
	}
	while (nkept)
		close(kept[--nkept].fd);
}

void kvd_keep_counts(unsigned long long *put, unsigned long long *drop)
{
	*put = nput;
	*drop = ndrop;
}
