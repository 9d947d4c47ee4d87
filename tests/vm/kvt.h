// SPDX-License-Identifier: MIT
/*
 * kvt: helpers for the VM tests of kvpool.ko.  Every test is one static
 * program run inside the guest; it prints one TAP-style line per check
 * ("ok N - ..." / "not ok N - ...") and exits 0 (all passed), 1 (a check
 * failed) or 77 (skipped).  Helpers return 0/count or -errno.
 */
#ifndef KVT_H
#define KVT_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>

#include <linux/kvpool.h>

#define KVT_DEV		"/dev/kvpool"
#define KVT_SYSFS	"/sys/kernel/kvpool"
#define KVT_UID		1000	/* the unprivileged user of the tests */
#define KVT_GID		1000
#define KVT_UID2	1001
#define KVT_GID2	1002

static const char *kvt_name = "kvt";
static int kvt_checks, kvt_failed;

static inline void kvt_init(const char *name)
{
	kvt_name = name;
	setvbuf(stdout, NULL, _IOLBF, 0);
}

__attribute__((format(printf, 3, 4)))
static inline bool kvt_check(bool ok, int line, const char *fmt, ...)
{
	va_list ap;

	kvt_checks++;
	if (!ok)
		kvt_failed++;
	printf("%sok %d - %s: ", ok ? "" : "not ", kvt_checks, kvt_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (!ok)
		printf(" (line %d)", line);
	printf("\n");
	return ok;
}

#define CHECK(cond, ...) kvt_check(!!(cond), __LINE__, __VA_ARGS__)

/*
 * A check of a known bug that another part must fix (TAP "TODO"): printed
 * as "[not ]ok N - ... # TODO why", never counted as a failure.
 */
static inline void kvt_todo(bool ok, int line, const char *what, const char *why)
{
	kvt_checks++;
	printf("%sok %d - %s: %s%s # TODO %s\n", ok ? "" : "not ", kvt_checks,
	       kvt_name, what, ok ? " (now passes: drop the TODO)" : "", why);
	if (!ok)
		printf("#   line %d\n", line);
}

#define CHECK_TODO(cond, what, why) kvt_todo(!!(cond), __LINE__, what, why)

/* Check that an expression returning 0/-errno returns exactly @want. */
#define CHECK_RET(expr, want, desc) do {				\
	long __r = (expr);						\
	kvt_check(__r == (long)(want), __LINE__, "%s: got %ld (%s), want %ld", \
		  desc, __r, __r < 0 ? strerror((int)-__r) : "ok",	\
		  (long)(want));					\
} while (0)

static inline int kvt_done(void)
{
	printf("# %s: %d checks, %d failed\n", kvt_name, kvt_checks, kvt_failed);
	return kvt_failed ? 1 : 0;
}

static inline void kvt_die(const char *what)
{
	printf("not ok %d - %s: fatal: %s: %s\n", ++kvt_checks, kvt_name, what,
	       strerror(errno));
	exit(1);
}

/* ---------------------------------------------------------------- */
/* Processes                                                          */
/* ---------------------------------------------------------------- */

/* Become an unprivileged user: no supplementary groups, no capabilities. */
static inline int kvt_drop(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) || setresgid(gid, gid, gid) ||
	    setresuid(uid, uid, uid))
		return -errno;
	return 0;
}

/* Wait for a child: its exit status, or 128 + signal. */
static inline int kvt_wait(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

static inline uint64_t kvt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static inline void kvt_msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Read the state letter of a process from /proc (R, S, D, Z...). */
static inline char kvt_proc_state(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')) || !p[1])
		return '?';
	return p[2];
}

/* Wait until @pid sleeps (state S or D), up to ~20 s. */
static inline bool kvt_wait_sleeping(pid_t pid)
{
	int i;

	for (i = 0; i < 2000; i++) {
		char s = kvt_proc_state(pid);

		if (s == 'S' || s == 'D')
			return true;
		kvt_msleep(10);
	}
	return false;
}

/* Occurrences of @needle in the kernel log (needs CAP_SYSLOG), or -errno. */
static inline int kvt_klog_count(const char *needle)
{
	static char buf[1 << 20];
	int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof(buf) - 1);
	int count = 0;
	char *p;

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	for (p = buf; (p = strstr(p, needle)); p += strlen(needle))
		count++;
	return count;
}

/* ---------------------------------------------------------------- */
/* ioctls                                                             */
/* ---------------------------------------------------------------- */

static inline int kvt_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

static inline int kvt_open(void)
{
	int fd = open(KVT_DEV, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static inline int kvt_open_or_die(void)
{
	int fd = kvt_open();

	if (fd < 0) {
		errno = -fd;
		kvt_die("open " KVT_DEV);
	}
	return fd;
}

static inline int kvt_pool_create(int fd, const char *name, uint64_t block_bytes,
				  uint32_t capacity, uint32_t chunk,
				  uint32_t default_max)
{
	struct kvpool_pool_create a;

	memset(&a, 0, sizeof(a));
	strncpy(a.name, name, sizeof(a.name) - 1);
	a.block_bytes = block_bytes;
	a.capacity = capacity;
	a.chunk_blocks = chunk;
	a.default_max = default_max;
	return kvt_ioctl(fd, KVPOOL_IOC_POOL_CREATE, &a);
}

static inline int kvt_pool_attach(int fd, const char *name, uint64_t *epoch)
{
	struct kvpool_pool_attach a;
	int ret;

	memset(&a, 0, sizeof(a));
	strncpy(a.name, name, sizeof(a.name) - 1);
	ret = kvt_ioctl(fd, KVPOOL_IOC_POOL_ATTACH, &a);
	if (!ret && epoch)
		*epoch = a.epoch;
	return ret;
}

static inline int kvt_grow(int fd, uint32_t backed, uint32_t flags)
{
	struct kvpool_pool_resize a;

	memset(&a, 0, sizeof(a));
	a.backed = backed;
	a.flags = flags;
	return kvt_ioctl(fd, KVPOOL_IOC_POOL_GROW, &a);
}

static inline int kvt_shrink(int fd, uint32_t backed)
{
	struct kvpool_pool_resize a;

	memset(&a, 0, sizeof(a));
	a.backed = backed;
	return kvt_ioctl(fd, KVPOOL_IOC_POOL_SHRINK, &a);
}

/* A pool owned by a new file: returns the owner fd or dies. */
static inline int kvt_setup_pool(const char *name, uint32_t capacity,
				 uint32_t chunk, uint32_t backed,
				 uint32_t default_max)
{
	int fd = kvt_open_or_die();
	int ret = kvt_pool_create(fd, name, 4096, capacity, chunk, default_max);

	if (ret) {
		errno = -ret;
		kvt_die("POOL_CREATE");
	}
	if (backed && (ret = kvt_grow(fd, backed, 0))) {
		errno = -ret;
		kvt_die("POOL_GROW");
	}
	return fd;
}

static inline int kvt_attach(int fd, const char *pool, const char *tenant)
{
	struct kvpool_tenant_attach a;

	memset(&a, 0, sizeof(a));
	strncpy(a.pool, pool, sizeof(a.pool) - 1);
	strncpy(a.tenant, tenant, sizeof(a.tenant) - 1);
	return kvt_ioctl(fd, KVPOOL_IOC_TENANT_ATTACH, &a);
}

/* Lease @count blocks: the number granted, or -errno. */
static inline int kvt_lease(int fd, uint32_t count, uint32_t flags,
			    uint64_t timeout_ns, uint32_t *blocks)
{
	struct kvpool_lease_req a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.blocks_ptr = (uintptr_t)blocks;
	a.count = count;
	a.flags = flags;
	a.timeout_ns = timeout_ns;
	ret = kvt_ioctl(fd, KVPOOL_IOC_LEASE, &a);
	return ret ? ret : (int)a.granted;
}

static inline int kvt_release(int fd, const uint32_t *blocks, uint32_t count)
{
	struct kvpool_release a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.blocks_ptr = (uintptr_t)blocks;
	a.count = count;
	ret = kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &a);
	return ret ? ret : (int)a.released;
}

static inline int kvt_release_all(int fd)
{
	struct kvpool_release a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.flags = KVPOOL_RELEASE_ALL;
	ret = kvt_ioctl(fd, KVPOOL_IOC_RELEASE, &a);
	return ret ? ret : (int)a.released;
}

static inline int kvt_status(int fd, struct kvpool_status *st)
{
	memset(st, 0, sizeof(*st));
	return kvt_ioctl(fd, KVPOOL_IOC_STATUS, st);
}

/* Read one owner event (non-blocking fd or not): 1, 0 if none, -errno. */
static inline int kvt_read_event(int fd, struct kvpool_event *ev)
{
	ssize_t n = read(fd, ev, sizeof(*ev));

	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	return n == sizeof(*ev) ? 1 : -EIO;
}

/* Drain the owner's events without waiting, counting those of @type. */
static inline int kvt_count_events(int fd, uint32_t type, int *total)
{
	struct kvpool_event ev;
	int fl = fcntl(fd, F_GETFL), n = 0, all = 0;

	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	while (kvt_read_event(fd, &ev) == 1) {
		all++;
		if (ev.type == type)
			n++;
	}
	fcntl(fd, F_SETFL, fl);
	if (total)
		*total = all;
	return n;
}

/* Drain the owner's events without waiting; the first of @type into @ev. */
static inline bool kvt_find_event(int fd, uint32_t type, struct kvpool_event *ev)
{
	struct kvpool_event e;
	int fl = fcntl(fd, F_GETFL);
	bool found = false;

	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	while (kvt_read_event(fd, &e) == 1) {
		if (!found && e.type == type) {
			*ev = e;
			found = true;
		}
	}
	fcntl(fd, F_SETFL, fl);
	return found;
}

/* ---------------------------------------------------------------- */
/* sysfs                                                              */
/* ---------------------------------------------------------------- */

static inline int kvt_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return (int)n;
}

static inline int kvt_write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	close(fd);
	if (n < 0)
		return -errno;
	return n == (ssize_t)strlen(val) ? 0 : -EIO;
}

/* Path of a pool file (tenant NULL) or a tenant file. */
static inline const char *kvt_path(const char *pool, const char *tenant,
				   const char *file)
{
	static char path[256];

	if (tenant)
		snprintf(path, sizeof(path), KVT_SYSFS "/%s/tenants/%s/%s",
			 pool, tenant, file);
	else
		snprintf(path, sizeof(path), KVT_SYSFS "/%s/%s", pool, file);
	return path;
}

/* A numeric sysfs value ("max" reads as KVPOOL_UNLIMITED), or -errno. */
static inline long long kvt_sysfs_num(const char *pool, const char *tenant,
				      const char *file)
{
	char buf[64];
	int ret = kvt_read_file(kvt_path(pool, tenant, file), buf, sizeof(buf));

	if (ret < 0)
		return ret;
	if (!strcmp(buf, "max\n"))
		return KVPOOL_UNLIMITED;
	return strtoll(buf, NULL, 10);
}

static inline int kvt_sysfs_set(const char *pool, const char *tenant,
				const char *file, const char *val)
{
	return kvt_write_file(kvt_path(pool, tenant, file), val);
}

/* One counter of blocks.events ("max", "stall", "reclaim", "fail"). */
static inline long long kvt_sysfs_event(const char *pool, const char *tenant,
					const char *name)
{
	char buf[256], *p;
	size_t len = strlen(name);
	int ret = kvt_read_file(kvt_path(pool, tenant, "blocks.events"), buf,
				sizeof(buf));

	if (ret < 0)
		return ret;
	for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, len) && p[len] == ' ')
			return strtoll(p + len + 1, NULL, 10);
	return -ENOENT;
}

/*
 * Wait until a grant of @tenant has started to wait: its "stall" counter
 * (counted once per waiting call, before it sleeps) goes above @before.
 * From then on any release wakes it, so the tests need no sleep.
 */
static inline bool kvt_wait_stall(const char *pool, const char *tenant,
				  long long before)
{
	int i;

	for (i = 0; i < 4000; i++) {
		if (kvt_sysfs_event(pool, tenant, "stall") > before)
			return true;
		kvt_msleep(5);
	}
	return false;
}

/* ---------------------------------------------------------------- */
/* Generic netlink, on raw sockets                                     */
/* ---------------------------------------------------------------- */

struct kvt_nl {
	int fd;
	uint16_t family;
	uint32_t event_group;
	uint32_t seq;
	bool sendto_kernel;	/* sendto() naming the kernel, not send() */
};

struct kvt_nlmsg {
	struct nlmsghdr nh;
	struct genlmsghdr gh;
	char attrs[1024];
};

#define KVT_NLA_DATA(na)	((void *)((char *)(na) + NLA_HDRLEN))

static inline void kvt_nla_put(struct kvt_nlmsg *m, uint16_t type,
			       const void *data, uint16_t len)
{
	struct nlattr *na = (struct nlattr *)((char *)m + NLMSG_ALIGN(m->nh.nlmsg_len));

	na->nla_type = type;
	na->nla_len = NLA_HDRLEN + len;
	memcpy(KVT_NLA_DATA(na), data, len);
	m->nh.nlmsg_len = NLMSG_ALIGN(m->nh.nlmsg_len) + NLA_ALIGN(na->nla_len);
}

static inline void kvt_nla_str(struct kvt_nlmsg *m, uint16_t type, const char *s)
{
	kvt_nla_put(m, type, s, (uint16_t)(strlen(s) + 1));
}

static inline void kvt_nla_u32(struct kvt_nlmsg *m, uint16_t type, uint32_t v)
{
	kvt_nla_put(m, type, &v, sizeof(v));
}

static inline void kvt_nl_init_msg(struct kvt_nl *nl, struct kvt_nlmsg *m,
				   uint16_t family, uint8_t cmd, uint16_t flags)
{
	memset(m, 0, sizeof(*m));
	m->nh.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN);
	m->nh.nlmsg_type = family;
	m->nh.nlmsg_flags = NLM_F_REQUEST | flags;
	m->nh.nlmsg_seq = ++nl->seq;
	m->gh.cmd = cmd;
	m->gh.version = 1;
}

/* Parse the attributes of a genl message into tb[0..max]. */
static inline void kvt_nl_parse(struct nlmsghdr *nh, struct nlattr **tb, int max)
{
	struct nlattr *na = (struct nlattr *)((char *)NLMSG_DATA(nh) + GENL_HDRLEN);
	int len = (int)nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);

	memset(tb, 0, sizeof(*tb) * (max + 1));
	while (len >= NLA_HDRLEN && na->nla_len >= NLA_HDRLEN &&
	       na->nla_len <= len) {
		int type = na->nla_type & NLA_TYPE_MASK;

		if (type <= max)
			tb[type] = na;
		len -= NLA_ALIGN(na->nla_len);
		na = (struct nlattr *)((char *)na + NLA_ALIGN(na->nla_len));
	}
}

static inline uint32_t kvt_nla_get_u32(struct nlattr *na)
{
	uint32_t v = 0;

	if (na)
		memcpy(&v, KVT_NLA_DATA(na), sizeof(v));
	return v;
}

static inline uint64_t kvt_nla_get_u64(struct nlattr *na)
{
	uint64_t v = 0;

	if (na)
		memcpy(&v, KVT_NLA_DATA(na), sizeof(v));
	return v;
}

static inline const char *kvt_nla_str_get(struct nlattr *na)
{
	return na ? (const char *)KVT_NLA_DATA(na) : "";
}

/*
 * Send @m and collect the answer.  For each data message, @cb (if any) is
 * called.  Returns 0 or the -errno of the kernel's error ack.
 */
typedef void (*kvt_nl_cb)(struct nlmsghdr *nh, void *arg);

static inline int kvt_nl_talk(struct kvt_nl *nl, struct kvt_nlmsg *m,
			      kvt_nl_cb cb, void *arg)
{
	static char buf[65536];
	bool dump = m->nh.nlmsg_flags & NLM_F_DUMP;

	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t sent;

	m->nh.nlmsg_flags |= NLM_F_ACK;
	if (nl->sendto_kernel)
		sent = sendto(nl->fd, m, m->nh.nlmsg_len, 0,
			      (struct sockaddr *)&kernel, sizeof(kernel));
	else
		sent = send(nl->fd, m, m->nh.nlmsg_len, 0);
	if (sent < 0)
		return -errno;
	for (;;) {
		ssize_t n = recv(nl->fd, buf, sizeof(buf), 0);
		struct nlmsghdr *nh;

		if (n < 0)
			return -errno;
		for (nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, n);
		     nh = NLMSG_NEXT(nh, n)) {
			if (nh->nlmsg_seq != m->nh.nlmsg_seq)
				continue;	/* a multicast event */
			if (nh->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(nh);

				return e->error;
			}
			if (nh->nlmsg_type == NLMSG_DONE)
				return 0;
			if (cb)
				cb(nh, arg);
		}
		(void)dump;
	}
}

static void kvt_nl_family_cb(struct nlmsghdr *nh, void *arg)
{
	struct kvt_nl *nl = arg;
	struct nlattr *tb[CTRL_ATTR_MAX + 1];
	struct nlattr *grp;
	int len;

	kvt_nl_parse(nh, tb, CTRL_ATTR_MAX);
	if (tb[CTRL_ATTR_FAMILY_ID])
		memcpy(&nl->family, KVT_NLA_DATA(tb[CTRL_ATTR_FAMILY_ID]), 2);
	if (!tb[CTRL_ATTR_MCAST_GROUPS])
		return;
	/* Nested: a list of nests of (NAME, ID). */
	grp = KVT_NLA_DATA(tb[CTRL_ATTR_MCAST_GROUPS]);
	len = tb[CTRL_ATTR_MCAST_GROUPS]->nla_len - NLA_HDRLEN;
	while (len >= NLA_HDRLEN && grp->nla_len >= NLA_HDRLEN) {
		struct nlattr *a = KVT_NLA_DATA(grp);
		int alen = grp->nla_len - NLA_HDRLEN;
		const char *name = NULL;
		uint32_t id = 0;

		while (alen >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN) {
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_MCAST_GRP_NAME)
				name = KVT_NLA_DATA(a);
			if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_MCAST_GRP_ID)
				memcpy(&id, KVT_NLA_DATA(a), 4);
			alen -= NLA_ALIGN(a->nla_len);
			a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
		}
		if (name && !strcmp(name, KVPOOL_GENL_EVENT_GROUP))
			nl->event_group = id;
		len -= NLA_ALIGN(grp->nla_len);
		grp = (struct nlattr *)((char *)grp + NLA_ALIGN(grp->nla_len));
	}
}

/* Resolve the kvpool family on a bound genl socket @fd (taken over). */
static inline int kvt_nl_open_fd(struct kvt_nl *nl, int fd)
{
	struct kvt_nlmsg m;
	struct timeval tv = { .tv_sec = 20 };
	int ret;

	memset(nl, 0, sizeof(*nl));
	nl->fd = fd;
	setsockopt(nl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	kvt_nl_init_msg(nl, &m, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0);
	kvt_nla_str(&m, CTRL_ATTR_FAMILY_NAME, KVPOOL_GENL_NAME);
	ret = kvt_nl_talk(nl, &m, kvt_nl_family_cb, nl);
	if (ret)
		return ret;
	return nl->family ? 0 : -ENOENT;
}

/* A bound genl socket, or -errno. */
static inline int kvt_nl_socket(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -errno;
	}
	return fd;
}

/* Open a genl socket and resolve the kvpool family. */
static inline int kvt_nl_open(struct kvt_nl *nl)
{
	int fd = kvt_nl_socket();

	if (fd < 0) {
		memset(nl, 0, sizeof(*nl));
		nl->fd = -1;
		return fd;
	}
	return kvt_nl_open_fd(nl, fd);
}

static inline int kvt_nl_subscribe(struct kvt_nl *nl)
{
	int g = (int)nl->event_group;

	if (!g)
		return -ENOENT;
	if (setsockopt(nl->fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &g,
		       sizeof(g)) < 0)
		return -errno;
	return 0;
}

static inline void kvt_nl_close(struct kvt_nl *nl)
{
	close(nl->fd);
}

/*
 * A tenant command: TENANT_NEW / DEL / SET with the limits given (pass
 * KVT_KEEP to leave one out).
 */
#define KVT_KEEP	0xfffffffeU

static inline int kvt_nl_tenant(struct kvt_nl *nl, uint8_t cmd,
				const char *pool, const char *tenant,
				uint32_t max, uint32_t min, uint32_t uid,
				uint32_t gid)
{
	struct kvt_nlmsg m;

	kvt_nl_init_msg(nl, &m, nl->family, cmd, 0);
	if (pool)
		kvt_nla_str(&m, KVPOOL_A_POOL, pool);
	if (tenant)
		kvt_nla_str(&m, KVPOOL_A_TENANT, tenant);
	if (max != KVT_KEEP)
		kvt_nla_u32(&m, KVPOOL_A_MAX, max);
	if (min != KVT_KEEP)
		kvt_nla_u32(&m, KVPOOL_A_MIN, min);
	if (uid != KVT_KEEP)
		kvt_nla_u32(&m, KVPOOL_A_UID, uid);
	if (gid != KVT_KEEP)
		kvt_nla_u32(&m, KVPOOL_A_GID, gid);
	return kvt_nl_talk(nl, &m, NULL, NULL);
}

/* Create a tenant, or die. */
static inline void kvt_tenant_new(const char *pool, const char *tenant,
				  uint32_t max, uint32_t min, uint32_t uid,
				  uint32_t gid)
{
	struct kvt_nl nl;
	int ret = kvt_nl_open(&nl);

	if (!ret)
		ret = kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_NEW, pool, tenant,
				    max, min, uid, gid);
	if (ret) {
		errno = -ret;
		kvt_die("netlink TENANT_NEW");
	}
	kvt_nl_close(&nl);
}

#endif /* KVT_H */
