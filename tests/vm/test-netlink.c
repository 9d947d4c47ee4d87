// SPDX-License-Identifier: MIT
/*
 * Generic netlink family "kvpool": TENANT_NEW / DEL / SET / GET (+dump),
 * POOL_GET (+dump), their errors and permission checks (unprivileged users,
 * root without CAP_NET_ADMIN and CAP_SYS_ADMIN, root with only
 * CAP_NET_ADMIN), and the "event" multicast group seen by a listener.
 */
#include <linux/capability.h>
#include <sys/syscall.h>

#include "kvt.h"

static int keep_caps(uint64_t keep)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	int i;

	if (syscall(SYS_capget, &h, d))
		return -errno;
	for (i = 0; i < 2; i++) {
		d[i].effective &= (uint32_t)(keep >> (32 * i));
		d[i].permitted &= (uint32_t)(keep >> (32 * i));
		d[i].inheritable = 0;
	}
	if (syscall(SYS_capset, &h, d))
		return -errno;
	return 0;
}

struct tenant_reply {
	int n;
	char name[KVPOOL_NAME_LEN];
	uint32_t max, min, cur, peak, uid, gid;
	uint64_t ev_max;
};

static void tenant_cb(struct nlmsghdr *nh, void *arg)
{
	struct tenant_reply *r = arg;
	struct nlattr *tb[KVPOOL_A_MAXATTR + 1];

	kvt_nl_parse(nh, tb, KVPOOL_A_MAXATTR);
	r->n++;
	snprintf(r->name, sizeof(r->name), "%s", kvt_nla_str_get(tb[KVPOOL_A_TENANT]));
	r->max = kvt_nla_get_u32(tb[KVPOOL_A_MAX]);
	r->min = kvt_nla_get_u32(tb[KVPOOL_A_MIN]);
	r->cur = kvt_nla_get_u32(tb[KVPOOL_A_CURRENT]);
	r->peak = kvt_nla_get_u32(tb[KVPOOL_A_PEAK]);
	r->uid = kvt_nla_get_u32(tb[KVPOOL_A_UID]);
	r->gid = kvt_nla_get_u32(tb[KVPOOL_A_GID]);
	r->ev_max = kvt_nla_get_u64(tb[KVPOOL_A_EV_MAX]);
}

static int tenant_get(struct kvt_nl *nl, const char *pool, const char *tenant,
		      bool dump, struct tenant_reply *r)
{
	struct kvt_nlmsg m;

	memset(r, 0, sizeof(*r));
	kvt_nl_init_msg(nl, &m, nl->family, KVPOOL_CMD_TENANT_GET, dump ? NLM_F_DUMP : 0);
	if (pool)
		kvt_nla_str(&m, KVPOOL_A_POOL, pool);
	if (tenant)
		kvt_nla_str(&m, KVPOOL_A_TENANT, tenant);
	return kvt_nl_talk(nl, &m, tenant_cb, r);
}

struct pool_reply {
	int n;
	char name[KVPOOL_NAME_LEN];
	uint64_t block_bytes;
	uint32_t capacity, backed, used, state, leases;
};

static void pool_cb(struct nlmsghdr *nh, void *arg)
{
	struct pool_reply *r = arg;
	struct nlattr *tb[KVPOOL_A_MAXATTR + 1];

	kvt_nl_parse(nh, tb, KVPOOL_A_MAXATTR);
	r->n++;
	snprintf(r->name, sizeof(r->name), "%s", kvt_nla_str_get(tb[KVPOOL_A_POOL]));
	r->block_bytes = kvt_nla_get_u64(tb[KVPOOL_A_BLOCK_BYTES]);
	r->capacity = kvt_nla_get_u32(tb[KVPOOL_A_CAPACITY]);
	r->backed = kvt_nla_get_u32(tb[KVPOOL_A_BACKED]);
	r->used = kvt_nla_get_u32(tb[KVPOOL_A_USED]);
	r->state = kvt_nla_get_u32(tb[KVPOOL_A_STATE]);
	r->leases = kvt_nla_get_u32(tb[KVPOOL_A_LEASES]);
}

static int pool_get(struct kvt_nl *nl, const char *pool, bool dump,
		    struct pool_reply *r)
{
	struct kvt_nlmsg m;

	memset(r, 0, sizeof(*r));
	kvt_nl_init_msg(nl, &m, nl->family, KVPOOL_CMD_POOL_GET, dump ? NLM_F_DUMP : 0);
	if (pool)
		kvt_nla_str(&m, KVPOOL_A_POOL, pool);
	return kvt_nl_talk(nl, &m, pool_cb, r);
}

/* Child: open a socket, drop privileges, try the admin commands. */
static int perm_child(int mode)
{
	struct kvt_nl nl;
	struct tenant_reply r;
	int ret = kvt_nl_open(&nl);

	if (ret)
		return 10;
	if (mode == 0)
		ret = kvt_drop(KVT_UID, KVT_GID);
	else if (mode == 1)
		ret = keep_caps(0);
	else
		ret = keep_caps(1ULL << CAP_NET_ADMIN);
	if (ret)
		return 11;
	if (mode == 2)	/* CAP_NET_ADMIN alone is enough */
		return kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_SET, "pn", "t1", 7,
				     KVT_KEEP, KVT_KEEP, KVT_KEEP) ? 12 : 0;
	if (kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_NEW, "pn", "tx", KVT_KEEP, KVT_KEEP,
			  KVT_KEEP, KVT_KEEP) != -EPERM)
		return 13;
	if (kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_SET, "pn", "t1", 1, KVT_KEEP,
			  KVT_KEEP, KVT_KEEP) != -EPERM)
		return 14;
	if (kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_DEL, "pn", "t1", KVT_KEEP, KVT_KEEP,
			  KVT_KEEP, KVT_KEEP) != -EPERM)
		return 15;
	if (tenant_get(&nl, "pn", "t1", false, &r) || r.n != 1)
		return 16;	/* queries are open to everyone */
	return 0;
}

static int run_perm_child(int mode)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (!pid)
		_exit(perm_child(mode));
	return kvt_wait(pid);
}

/* Pass @fd over the unix socket @sock. */
static int send_fd(int sock, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	char byte = 0;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cm.buf, .msg_controllen = sizeof(cm.buf),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -errno;
}

static int recv_fd(int sock)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cm.buf, .msg_controllen = sizeof(cm.buf),
	};
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
		return -errno;
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/*
 * The admin capability is needed by the socket's opener too: a socket
 * opened by uid 1000 and used by root is refused, with send() and with a
 * sendto() that names the kernel (which netlink_capable() alone lets by).
 */
static void test_opener(void)
{
	struct kvt_nl nl;
	struct stat sb;
	int sv[2], fd;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv))
		kvt_die("socketpair");
	fflush(stdout);
	pid = fork();
	if (!pid) {
		if (kvt_drop(KVT_UID, KVT_GID))
			_exit(2);
		fd = kvt_nl_socket();
		_exit(fd < 0 || send_fd(sv[1], fd) ? 3 : 0);
	}
	fd = recv_fd(sv[0]);
	CHECK(kvt_wait(pid) == 0 && fd >= 0, "uid 1000 opened a genl socket and passed it to root");
	close(sv[0]);
	close(sv[1]);
	if (fd < 0)
		return;
	CHECK_RET(kvt_nl_open_fd(&nl, fd), 0, "root resolves the family on it");
	CHECK_RET(kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_NEW, "pn", "to", KVT_KEEP, KVT_KEEP,
				KVT_KEEP, KVT_KEEP), -EPERM,
		  "root on uid 1000's socket, send(): TENANT_NEW -EPERM");
	nl.sendto_kernel = true;
	CHECK_RET(kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_NEW, "pn", "to", KVT_KEEP, KVT_KEEP,
				KVT_KEEP, KVT_KEEP), -EPERM,
		  "root on uid 1000's socket, sendto() the kernel: TENANT_NEW -EPERM");
	CHECK_RET(kvt_nl_tenant(&nl, KVPOOL_CMD_TENANT_SET, "pn", "t1", 2, KVT_KEEP,
				KVT_KEEP, KVT_KEEP), -EPERM,
		  "root on uid 1000's socket, sendto() the kernel: TENANT_SET -EPERM");
	CHECK(stat(KVT_SYSFS "/pn/tenants/to", &sb) < 0, "no tenant created through it");
	kvt_nl_close(&nl);
}

static void test_commands(struct kvt_nl *nl)
{
	struct tenant_reply r;
	struct pool_reply pr;
	struct stat sb;
	int c;

#define TN(cmd, pool, t, max, min, uid, gid) \
	kvt_nl_tenant(nl, KVPOOL_CMD_##cmd, pool, t, max, min, uid, gid)
#define K KVT_KEEP
	CHECK_RET(TN(TENANT_NEW, "pn", "t1", 10, 2, 1000, K), 0, "TENANT_NEW t1");
	CHECK(stat(KVT_SYSFS "/pn/tenants/t1", &sb) == 0, "sysfs directory of t1");
	CHECK(kvt_sysfs_num("pn", "t1", "blocks.max") == 10 &&
	      kvt_sysfs_num("pn", "t1", "blocks.min") == 2, "t1 limits in sysfs");
	CHECK_RET(TN(TENANT_NEW, "pn", "t2", K, K, K, K), 0, "TENANT_NEW t2 with defaults");
	CHECK(kvt_sysfs_num("pn", "t2", "blocks.max") == KVPOOL_UNLIMITED &&
	      kvt_sysfs_num("pn", "t2", "blocks.min") == 0, "defaults: max, 0");
	CHECK_RET(TN(TENANT_NEW, "pn", "t1", K, K, K, K), -EEXIST, "TENANT_NEW duplicate");
	CHECK_RET(TN(TENANT_NEW, "pn", NULL, K, K, K, K), -EINVAL, "TENANT_NEW without name");
	CHECK_RET(TN(TENANT_NEW, "pn", "a b", K, K, K, K), -EINVAL, "TENANT_NEW invalid name");
	CHECK_RET(TN(TENANT_NEW, "pn", "t3", 100, K, K, K), -EINVAL,
		  "TENANT_NEW max above capacity");
	CHECK_RET(TN(TENANT_NEW, "nopool", "t3", K, K, K, K), -ENOENT,
		  "TENANT_NEW unknown pool");
	CHECK_RET(TN(TENANT_NEW, "pn2", "t9", K, K, K, K), 0, "TENANT_NEW in pool pn2");
	CHECK_RET(TN(TENANT_NEW, NULL, "t8", K, K, K, K), 0,
		  "TENANT_NEW without POOL: the first pool");
	CHECK(stat(KVT_SYSFS "/pn/tenants/t8", &sb) == 0, "t8 is in pn");

	CHECK_RET(tenant_get(nl, "pn", "t1", false, &r), 0, "TENANT_GET t1");
	CHECK(r.n == 1 && !strcmp(r.name, "t1") && r.max == 10 && r.min == 2 &&
	      r.cur == 0 && r.uid == 1000 && r.gid == KVPOOL_ID_NONE,
	      "TENANT_GET attributes");
	CHECK_RET(tenant_get(nl, "pn", "nosuch", false, &r), -ENOENT, "TENANT_GET unknown");
	CHECK_RET(tenant_get(nl, "pn", NULL, false, &r), -EINVAL, "TENANT_GET without name");
	CHECK_RET(tenant_get(nl, "pn", NULL, true, &r), 0, "TENANT_GET dump of pn");
	CHECK(r.n == 3, "dump of pn: t1 t2 t8 (%d)", r.n);
	CHECK_RET(tenant_get(nl, NULL, NULL, true, &r), 0, "TENANT_GET dump of all pools");
	CHECK(r.n == 4, "dump of all: 4 tenants (%d)", r.n);

	CHECK_RET(TN(TENANT_SET, "pn", "t1", 5, 1, 1001, 1002), 0, "TENANT_SET all");
	CHECK_RET(tenant_get(nl, "pn", "t1", false, &r), 0, "TENANT_GET");
	CHECK(r.max == 5 && r.min == 1 && r.uid == 1001 && r.gid == 1002, "TENANT_SET applied");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", KVPOOL_UNLIMITED, K, K, K), 0, "TENANT_SET max unlimited");
	CHECK(kvt_sysfs_num("pn", "t1", "blocks.max") == KVPOOL_UNLIMITED, "sysfs reads max");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", K, 99, K, K), -EINVAL, "TENANT_SET min above capacity");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", 99, 3, K, K), -EINVAL,
		  "TENANT_SET max above capacity (with a valid min)");
	CHECK(kvt_sysfs_num("pn", "t1", "blocks.min") == 1, "refused TENANT_SET changed nothing");
	/* min above a finite max: refused at creation and in every SET. */
	CHECK_RET(TN(TENANT_NEW, "pn", "t3", 4, 8, K, K), -EINVAL, "TENANT_NEW min above max");
	CHECK(stat(KVT_SYSFS "/pn/tenants/t3", &sb) < 0, "no t3 created");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", 4, 6, K, K), -EINVAL, "TENANT_SET min above max");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", 0, K, K, K), -EINVAL,
		  "TENANT_SET max below the current min");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", K, 40, K, K), -EINVAL,
		  "TENANT_SET min above capacity (max unlimited)");
	CHECK(kvt_sysfs_num("pn", "t1", "blocks.min") == 1 &&
	      kvt_sysfs_num("pn", "t1", "blocks.max") == KVPOOL_UNLIMITED,
	      "refused min/max pairs changed nothing");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", 0, 0, K, K), 0,
		  "TENANT_SET lowers max and min together");
	CHECK_RET(TN(TENANT_SET, "pn", "t1", KVPOOL_UNLIMITED, 1, K, K), 0, "and back");
	CHECK_RET(TN(TENANT_SET, "pn", "nosuch", 1, K, K, K), -ENOENT, "TENANT_SET unknown");

	CHECK_RET(pool_get(nl, "pn", false, &pr), 0, "POOL_GET pn");
	CHECK(pr.n == 1 && !strcmp(pr.name, "pn") && pr.capacity == 32 &&
	      pr.block_bytes == 4096 && pr.backed == 32 && pr.used == 0 &&
	      pr.state == KVPOOL_STATE_LIVE && pr.leases == 0, "POOL_GET attributes");
	CHECK_RET(pool_get(nl, "nopool", false, &pr), -ENOENT, "POOL_GET unknown");
	CHECK_RET(pool_get(nl, NULL, true, &pr), 0, "POOL_GET dump");
	CHECK(pr.n == 2, "dump: 2 pools (%d)", pr.n);

	/* DEL */
	c = kvt_open_or_die();
	CHECK_RET(kvt_attach(c, "pn", "t2"), 0, "a client in t2");
	CHECK_RET(TN(TENANT_DEL, "pn", "t2", K, K, K, K), -EBUSY, "TENANT_DEL in use");
	close(c);
	CHECK_RET(TN(TENANT_DEL, "pn", "t2", K, K, K, K), 0, "TENANT_DEL t2");
	CHECK(stat(KVT_SYSFS "/pn/tenants/t2", &sb) < 0 && errno == ENOENT,
	      "t2's sysfs directory is gone");
	CHECK_RET(TN(TENANT_DEL, "pn", "t2", K, K, K, K), -ENOENT, "TENANT_DEL unknown");
	CHECK_RET(TN(TENANT_NEW, "pn", "t2", 3, K, K, K), 0, "TENANT_NEW t2 again");
	CHECK(kvt_sysfs_num("pn", "t2", "blocks.max") == 3, "the new t2 in sysfs");

	/*
	 * Delete and re-create a tenant while another process reads and
	 * writes its sysfs files: removal must not wait on a handler that
	 * waits for the pool lock, and a handler of a deleted tenant fails.
	 */
	{
		pid_t rd;
		int i, bad = 0;

		TN(TENANT_NEW, "pn", "tz", K, K, K, K);
		fflush(stdout);
		rd = fork();
		if (!rd) {
			for (i = 0; i < 3000; i++) {
				long long v = kvt_sysfs_num("pn", "tz", "blocks.current");
				int w = kvt_sysfs_set("pn", "tz", "blocks.max", "5");

				if ((v < 0 && v != -ENOENT && v != -ENODEV) ||
				    (w && w != -ENOENT && w != -ENODEV))
					_exit(1);
			}
			_exit(0);
		}
		for (i = 0; i < 300; i++) {
			bad |= TN(TENANT_DEL, "pn", "tz", K, K, K, K) != 0;
			bad |= TN(TENANT_NEW, "pn", "tz", K, K, K, K) != 0;
		}
		CHECK(!bad, "300 deletes and re-creates of tz");
		CHECK(kvt_wait(rd) == 0, "concurrent sysfs reads and writes saw values, ENOENT or ENODEV");
		CHECK_RET(TN(TENANT_DEL, "pn", "tz", K, K, K, K), 0, "TENANT_DEL tz");
	}

	test_opener();
	CHECK(run_perm_child(0) == 0, "uid 1000: admin commands -EPERM, GET allowed");
	CHECK(run_perm_child(1) == 0, "root without capabilities: admin commands -EPERM");
	CHECK(run_perm_child(2) == 0, "root with only CAP_NET_ADMIN: TENANT_SET allowed");
	CHECK(kvt_sysfs_num("pn", "t1", "blocks.max") == 7, "CAP_NET_ADMIN's TENANT_SET applied");
}

struct seen {
	uint64_t last_seq;
	bool monotonic;
	int types[16];
	int closed_blocks;
};

static void test_events(int owner)
{
	struct kvt_nl ls;
	struct seen s = { .monotonic = true };
	char buf[8192];
	uint32_t b[8];
	int c, n = 0;
	pid_t pid;

	CHECK_RET(kvt_nl_open(&ls), 0, "listener socket");
	CHECK(ls.event_group != 0, "the family has the \"event\" group");
	/* Listening is open to everyone: subscribe as an unprivileged user. */
	fflush(stdout);
	pid = fork();
	if (!pid) {
		struct kvt_nl u;

		_exit(kvt_drop(KVT_UID, KVT_GID) || kvt_nl_open(&u) || kvt_nl_subscribe(&u));
	}
	CHECK(kvt_wait(pid) == 0, "an unprivileged user can subscribe");
	CHECK_RET(kvt_nl_subscribe(&ls), 0, "subscribe to the event group");

	/* Generate: QUOTA, STALL, CLIENT_CLOSED, BACKED, OWNER, RECLAIM. */
	c = kvt_open_or_die();
	kvt_attach(c, "pn", "t2");			/* max 3 */
	CHECK_RET(kvt_lease(c, 4, 0, 0, b), -EDQUOT, "QUOTA refusal");
	CHECK_RET(kvt_lease(c, 3, 0, 0, b), 3, "lease 3");
	CHECK_RET(kvt_sysfs_set("pn", "t2", "blocks.max", "1"), 0, "lower max: RECLAIM");
	close(c);					/* CLIENT_CLOSED, 3 blocks */
	CHECK_RET(kvt_shrink(owner, 16), 0, "shrink: BACKED");
	c = kvt_open_or_die();
	kvt_attach(c, "pn", "");
	CHECK_RET(kvt_lease(c, 20, 0, 1000000, b), -ETIMEDOUT, "a short wait: STALL");
	close(c);

	for (;;) {
		struct pollfd p = { .fd = ls.fd, .events = POLLIN };
		struct nlmsghdr *nh;
		ssize_t len;

		if (poll(&p, 1, 500) != 1)
			break;
		len = recv(ls.fd, buf, sizeof(buf), 0);
		if (len <= 0)
			break;
		for (nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, len); nh = NLMSG_NEXT(nh, len)) {
			struct nlattr *tb[KVPOOL_A_MAXATTR + 1];
			struct genlmsghdr *gh = NLMSG_DATA(nh);
			uint32_t type;
			uint64_t seq;

			if (nh->nlmsg_type != ls.family || gh->cmd != KVPOOL_CMD_EVENT)
				continue;
			kvt_nl_parse(nh, tb, KVPOOL_A_MAXATTR);
			type = kvt_nla_get_u32(tb[KVPOOL_A_EVENT_TYPE]);
			seq = kvt_nla_get_u64(tb[KVPOOL_A_EVENT_SEQ]);
			if (strcmp(kvt_nla_str_get(tb[KVPOOL_A_POOL]), "pn"))
				continue;
			if (seq <= s.last_seq)
				s.monotonic = false;
			s.last_seq = seq;
			if (type < 16)
				s.types[type]++;
			if (type == KVPOOL_EVENT_CLIENT_CLOSED &&
			    !strcmp(kvt_nla_str_get(tb[KVPOOL_A_TENANT]), "t2"))
				s.closed_blocks = (int)kvt_nla_get_u32(tb[KVPOOL_A_EVENT_BLOCKS]);
			n++;
		}
	}
	/* Closing the owner: an OWNER (orphaned) event. */
	close(owner);
	{
		struct pollfd p = { .fd = ls.fd, .events = POLLIN };
		ssize_t len;

		if (poll(&p, 1, 2000) == 1 && (len = recv(ls.fd, buf, sizeof(buf), 0)) > 0) {
			struct nlmsghdr *nh = (struct nlmsghdr *)buf;
			struct nlattr *tb[KVPOOL_A_MAXATTR + 1];

			kvt_nl_parse(nh, tb, KVPOOL_A_MAXATTR);
			if (kvt_nla_get_u32(tb[KVPOOL_A_EVENT_TYPE]) == KVPOOL_EVENT_OWNER &&
			    kvt_nla_get_u32(tb[KVPOOL_A_EVENT_ARG]) == KVPOOL_STATE_ORPHANED)
				s.types[KVPOOL_EVENT_OWNER]++;
		}
	}
	CHECK(n > 0, "the listener received %d events", n);
	CHECK(s.monotonic, "sequence numbers increase");
	CHECK(s.types[KVPOOL_EVENT_QUOTA] == 1, "one QUOTA event");
	CHECK(s.types[KVPOOL_EVENT_RECLAIM] >= 1, "a RECLAIM event");
	CHECK(s.types[KVPOOL_EVENT_CLIENT_CLOSED] >= 1 && s.closed_blocks == 3,
	      "CLIENT_CLOSED with 3 blocks");
	CHECK(s.types[KVPOOL_EVENT_BACKED] == 1, "one BACKED event");
	CHECK(s.types[KVPOOL_EVENT_STALL] == 1, "one STALL event");
	CHECK(s.types[KVPOOL_EVENT_OWNER] == 1, "OWNER orphaned event on the owner's close");
	kvt_nl_close(&ls);
}

int main(void)
{
	struct kvt_nl nl;
	int owner, owner2, ret;

	kvt_init("netlink");
	owner = kvt_setup_pool("pn", 32, 8, 32, KVPOOL_UNLIMITED);
	owner2 = kvt_setup_pool("pn2", 8, 8, 8, KVPOOL_UNLIMITED);
	ret = kvt_nl_open(&nl);
	CHECK(ret == 0, "family \"" KVPOOL_GENL_NAME "\" resolved (%d)", ret);
	if (ret)
		return kvt_done();
	test_commands(&nl);
	test_events(owner);
	kvt_nl_close(&nl);
	close(owner2);
	return kvt_done();
}
