// SPDX-License-Identifier: MIT
/*
 * keep_store.c - a test double of daemon/keep.c (see keep_store.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"
#include "keep_store.h"
#include "restart.h"

#define KS_MAX 256

static struct {
	uint64_t tag;
	int fd;
} tab[KS_MAX];
static unsigned int ntab;

bool ks_enabled = true;
struct ks_stats ks_st;

static int find(uint64_t tag)
{
	unsigned int i;

	for (i = 0; i < ntab; i++)
		if (tab[i].tag == tag)
			return (int)i;
	return -1;
}

static void remove_at(int i)
{
	close(tab[i].fd);
	tab[i] = tab[--ntab];
}

int ks_add(uint64_t tag, int fd)
{
	int i = find(tag);

	if (i >= 0)
		remove_at(i);
	if (ntab == KS_MAX) {
		close(fd);
		return -ENOSPC;
	}
	tab[ntab].tag = tag;
	tab[ntab].fd = fd;
	ntab++;
	return 0;
}

unsigned int ks_count(void)
{
	return ntab;
}

bool ks_has(uint64_t tag)
{
	return find(tag) >= 0;
}

void ks_clear(void)
{
	while (ntab)
		remove_at((int)ntab - 1);
}

bool kvd_keep_enabled(struct kvd *d)
{
	(void)d;
	return ks_enabled;
}

int kvd_keep_put(struct kvd_pool *p, uint32_t kind, uint32_t index, int fd)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int r;

	if (!ks_enabled)
		return -EOPNOTSUPP;
	if (dup < 0)
		return -errno;
	r = ks_add(kvd_keep_tag(p->tier, kind, index), dup);
	if (!r)
		ks_st.puts++;
	return r;
}

void kvd_keep_drop(struct kvd_pool *p, uint32_t kind, uint32_t index)
{
	int i = find(kvd_keep_tag(p->tier, kind, index));

	if (i >= 0) {
		remove_at(i);
		ks_st.drops++;
	}
}

int kvd_keep_take(struct kvd_pool *p, uint32_t kind, uint32_t index)
{
	int i = find(kvd_keep_tag(p->tier, kind, index)), fd;

	if (i < 0) {
		ks_st.misses++;
		return -ENOENT;
	}
	fd = fcntl(tab[i].fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -errno;
	ks_st.takes++;
	return fd;
}

/* one message per descriptor: its tag, the descriptor; then tag ~0 */
static int send_one(int sock, uint64_t tag, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &tag, sizeof(tag) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(tag) ?
	       0 : -EIO;
}

int ks_send(int sock)
{
	unsigned int i;
	int r = 0;

	for (i = 0; !r && i < ntab; i++)
		r = send_one(sock, tab[i].tag, tab[i].fd);
	r = r ? r : send_one(sock, ~0ULL, -1);
	ks_clear();
	return r;
}

int ks_recv(int sock)
{
	int n = 0;

	for (;;) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		uint64_t tag;
		struct iovec iov = { &tag, sizeof(tag) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *c;
		int fd = -1;

		if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(tag))
			return -EIO;
		c = CMSG_FIRSTHDR(&m);
		if (c && c->cmsg_level == SOL_SOCKET &&
		    c->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
		if (tag == ~0ULL) {
			if (fd >= 0)
				close(fd);
			return n;
		}
		if (fd < 0 || ks_add(tag, fd))
			return -EIO;
		n++;
	}
}

/* restart.h: a start that keeps memory drops it all when part of it is
 * lost; here the losses are counted for the test to read. */
unsigned int ks_lost;

void kvd_restart_lost(struct kvd_pool *p, const char *why)
{
	(void)p;
	(void)why;
	ks_lost++;
}
