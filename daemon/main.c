// SPDX-License-Identifier: MIT
/*
 * kvpoold - the kvpool daemon: owns a pool per memory tier (GPU or host
 * memory on top, then host DRAM and a file below), backs them lazily,
 * serves the data plane (swaps between tiers included) and, without the
 * kernel module, hosts the ledger itself.  See Documentation/daemon.rst,
 * Documentation/tiers.rst and kvpoold(8).
 *
 * main.c is the top floor of the daemon: option parsing, set-up, the main
 * loop and the order in which the subsystems start and stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef KVD_HAVE_LIBCAP
#include <sys/capability.h>
#endif
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "restart.h"
#include "keep.h"
#include "ledger_keep.h"
#include "config.h"
#include "core.h"
#include "ledger.h"
#include "tier_spec.h"
#include "tier.h"
#include "swap.h"
#include "tenants.h"
#include "reload.h"
#include "metrics.h"
#include "server.h"
#include "conn.h"
#include "kvpoold.h"
#include "prefix.h"
#include "cluster.h"
#include "prefix_tier.h"

static void usage(FILE *f)
{
	fprintf(f,
"Usage: kvpoold [OPTIONS]\n"
"  -c, --config PATH         configuration file (default " KVD_CONF_DEFAULT ",\n"
"                            if it exists; \"\" for none); flags override it\n"
"  -f, --foreground          stay in the foreground, log to stderr\n"
"  -s, --socket PATH         UNIX socket (default " "/run/kvpool/kvpool.sock"
")\n"
"  -d, --device PATH         ledger device (default /dev/kvpool)\n"
"  -b, --backend NAME        auto (default), cpu or cuda\n"
"  -l, --ledger MODE         auto (default), module or inproc\n"
"  -p, --pool NAME           pool name (default gpu0 / host by backend)\n"
"      --block-bytes N       bytes per block (default 262144)\n"
"      --capacity N          blocks in the pool (default: cpu 16384; cuda\n"
"                            the device's free memory less --reserve-bytes)\n"
"      --reserve-bytes N     cuda: free device memory not given to the pool\n"
"                            by default (default 1 GiB)\n"
"      --spare-chunks N      cuda: physical chunks kept ready while the\n"
"                            pool is in use (default 1)\n"
"      --chunk-blocks N      grow/shrink granularity (default 64)\n"
"      --default-max N       blocks.max of per-uid tenants (default max)\n"
"      --shrink-delay-ms N   idle time before a shrink (default 5000)\n"
"      --backing-limit N     never back more than N blocks (grows beyond\n"
"                            fail: waiting clients get -ENOMEM)\n"
"      --tenant SPEC         [POOL/]NAME[:MAX[:MIN[:UID[:GID]]]] (repeatable;\n"
"                            without POOL/: limits in the top pool, no\n"
"                            limit in the lower ones)\n"
"      --tier SPEC           a lower tier: dram:SIZE[:NAME] (host memory) or\n"
"                            nvme:PATH:SIZE[:NAME] (a file); SIZE in blocks\n"
"                            or bytes with K/M/G/T; repeat (up to 3)\n"
"      --nvme-io MODE        auto (default: io_uring if it works), uring or\n"
"                            pread\n"
"      --max-clients N       connections in all (default 256; admin peers\n"
"                            may open 8 more)\n"
"      --max-clients-per-uid N  connections of one non-admin uid (default 64)\n"
"      --metrics-listen ADDR:PORT\n"
"                            serve Prometheus metrics at /metrics (off)\n"
"      --metrics-scope SCOPE public (default: what any local user may see)\n"
"                            or operator (also every client's lease and pid,\n"
"                            the prefix caches' and the swaps' activity)\n"
"      --cuda-device N       CUDA device ordinal (default 0)\n"
"      --prefix-lend-percent N  most of a tenant's max (percent, default\n"
"                            50) that other tenants of its shared namespace\n"
"                            may hold referenced in its prefix cache\n"
"      --kernel-threads N    cpu backend: threads of the attention kernels\n"
"                            (default 0: one per CPU kvpoold may run on)\n"
"      --prefix-hash-bits N  tests: keep N bits of prefix-cache keys (0:\n"
"                            every key collides; default 128)\n"
"      --prefix-demote       evicted prefix-cache blocks go down the lower\n"
"                            tiers (dram, nvme, then the cluster tier)\n"
"                            instead of being dropped\n"
"      --no-keep             keep no pool memory for a restarted daemon\n"
"                            (default: kept where the module or the service\n"
"                            manager can hold it; see kvpoold(8), RESTART)\n"
"      --claim-grace-ms MS   in-process ledger kept by the service manager:\n"
"                            how long a restored lease waits for its client\n"
"                            to claim it before its blocks are freed\n"
"                            (default 60000)\n"
"      --cluster-nodes HOST:PORT[,...]  a Redis Cluster below the tiers for\n"
"                            prefix blocks (off); --cluster-name NAME,\n"
"                            --cluster-keys DIR, --cluster-policy\n"
"                            through|back|read, --cluster-deadline-ms N,\n"
"                            --cluster-heartbeat-ms N,\n"
"                            --cluster-stream-maxlen N, --cluster-value-ttl-s\n"
"                            N, --cluster-queue-bytes N, --cluster-fetch-bytes\n"
"                            N: kvpoold.conf(5) [cluster]\n"
"  -u, --user NAME           drop to this user after start (as root)\n"
"  -g, --admin-group NAME    group allowed to change tenants\n"
"      --syslog              log to syslog even in the foreground\n"
"  -v, --verbose             more logging (twice: debug)\n"
"  -q, --quiet               errors only\n"
"  -h, --help                this text\n");
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!strcmp(s, "max")) {
		*out = max;
		return 0;
	}
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

enum {
	O_BLOCK = 256, O_CAP, O_CHUNK, O_DMAX, O_DELAY, O_TENANT, O_CUDADEV,
	O_SYSLOG, O_BLIMIT, O_METRICS, O_TIER, O_NVMEIO, O_INJECT, O_PFXBITS,
	O_RESERVE, O_SPARE, O_MAXCL, O_MAXCLUID, O_MSCOPE, O_PFXLEND,
	O_KTHREADS, O_DEMOTE, O_NOKEEP, O_GRACE,
	O_CLUSTER,	/* + index in kvd_cluster_opt_keys[] */
};

static int parse(struct kvd_opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "socket", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'd' },
		{ "backend", required_argument, NULL, 'b' },
		{ "ledger", required_argument, NULL, 'l' },
		{ "pool", required_argument, NULL, 'p' },
		{ "user", required_argument, NULL, 'u' },
		{ "admin-group", required_argument, NULL, 'g' },
		{ "block-bytes", required_argument, NULL, O_BLOCK },
		{ "capacity", required_argument, NULL, O_CAP },
		{ "chunk-blocks", required_argument, NULL, O_CHUNK },
		{ "default-max", required_argument, NULL, O_DMAX },
		{ "shrink-delay-ms", required_argument, NULL, O_DELAY },
		{ "tenant", required_argument, NULL, O_TENANT },
		{ "cuda-device", required_argument, NULL, O_CUDADEV },
		{ "syslog", no_argument, NULL, O_SYSLOG },
		{ "backing-limit", required_argument, NULL, O_BLIMIT },
		{ "metrics-listen", required_argument, NULL, O_METRICS },
		{ "tier", required_argument, NULL, O_TIER },
		{ "nvme-io", required_argument, NULL, O_NVMEIO },
		{ "inject-io-error", required_argument, NULL, O_INJECT },
		{ "reserve-bytes", required_argument, NULL, O_RESERVE },
		{ "spare-chunks", required_argument, NULL, O_SPARE },
		{ "prefix-hash-bits", required_argument, NULL, O_PFXBITS },
		{ "max-clients", required_argument, NULL, O_MAXCL },
		{ "max-clients-per-uid", required_argument, NULL, O_MAXCLUID },
		{ "metrics-scope", required_argument, NULL, O_MSCOPE },
		{ "prefix-lend-percent", required_argument, NULL, O_PFXLEND },
		{ "kernel-threads", required_argument, NULL, O_KTHREADS },
		{ "prefix-demote", no_argument, NULL, O_DEMOTE },
		{ "no-keep", no_argument, NULL, O_NOKEEP },
		{ "claim-grace-ms", required_argument, NULL, O_GRACE },
		{ "cluster-nodes", required_argument, NULL, O_CLUSTER + 0 },
		{ "cluster-name", required_argument, NULL, O_CLUSTER + 1 },
		{ "cluster-keys", required_argument, NULL, O_CLUSTER + 2 },
		{ "cluster-policy", required_argument, NULL, O_CLUSTER + 3 },
		{ "cluster-deadline-ms", required_argument, NULL, O_CLUSTER + 4 },
		{ "cluster-heartbeat-ms", required_argument, NULL,
		  O_CLUSTER + 5 },
		{ "cluster-stream-maxlen", required_argument, NULL,
		  O_CLUSTER + 6 },
		{ "cluster-value-ttl-s", required_argument, NULL,
		  O_CLUSTER + 7 },
		{ "cluster-queue-bytes", required_argument, NULL,
		  O_CLUSTER + 8 },
		{ "cluster-fetch-bytes", required_argument, NULL,
		  O_CLUSTER + 9 },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int ch;

	optind = 0;	/* parsed again on reload: start afresh */
	while ((ch = getopt_long(argc, argv, "c:fs:d:b:l:p:u:g:vqh", lo,
				 NULL)) != -1) {
		switch (ch) {
		case 'c': o->config_path = optarg; break;
		case 'f': o->foreground = true; break;
		case 's': o->socket_path = optarg; break;
		case 'd': o->device_path = optarg; break;
		case 'b': o->backend = optarg; break;
		case 'l': o->ledger = optarg; break;
		case 'p': o->pool = optarg; break;
		case 'u': o->user = optarg; break;
		case 'g': o->admin_group = optarg; break;
		case 'v': o->log_level++; break;
		case 'q': o->log_level = KVD_ERR; break;
		case O_SYSLOG: o->use_syslog = true; break;
		case O_DEMOTE: o->prefix_demote = true; break;
		case O_NOKEEP: o->keep_off = true; break;
		case O_BLOCK:
			if (parse_u64(optarg, 1ULL << 30, &v) || !v ||
			    v % 256)
				goto bad;
			o->block_bytes = v;
			break;
		case O_CAP:
			if (parse_u64(optarg, KVPOOL_MAX_CAPACITY, &v) || !v)
				goto bad;
			o->capacity = (uint32_t)v;
			o->capacity_set = true;
			break;
		case O_GRACE:
			if (parse_u64(optarg, 3600000, &v))
				goto bad;
			o->claim_grace_ms = (uint32_t)v;
			break;
		case O_RESERVE:
			if (parse_u64(optarg, UINT64_MAX / 2, &v))
				goto bad;
			o->reserve_bytes = v;
			break;
		case O_SPARE:
			if (parse_u64(optarg, 64, &v))
				goto bad;
			o->spare_chunks = (uint32_t)v;
			break;
		case O_CHUNK:
			if (parse_u64(optarg, KVPOOL_MAX_CAPACITY, &v) || !v)
				goto bad;
			o->chunk_blocks = (uint32_t)v;
			break;
		case O_DMAX:
			if (parse_u64(optarg, KVPOOL_UNLIMITED, &v))
				goto bad;
			o->default_max = (uint32_t)v;
			break;
		case O_DELAY:
			if (parse_u64(optarg, 3600000, &v))
				goto bad;
			o->shrink_delay_ms = (uint32_t)v;
			break;
		case O_BLIMIT:
			if (parse_u64(optarg, KVPOOL_MAX_CAPACITY, &v))
				goto bad;
			o->backing_limit = (uint32_t)v;
			break;
		case O_PFXBITS:
			if (parse_u64(optarg, 128, &v))
				goto bad;
			o->prefix_hash_bits = (unsigned int)v;
			break;
		case O_KTHREADS:
			if (parse_u64(optarg, 1024, &v))
				goto bad;
			o->kernel_threads = (uint32_t)v;
			break;
		case O_MAXCL:
		case O_MAXCLUID:
			if (parse_u64(optarg, KVD_MAX_CLIENTS, &v) || !v)
				goto bad;
			if (ch == O_MAXCL)
				o->max_clients = (uint32_t)v;
			else
				o->max_clients_per_uid = (uint32_t)v;
			break;
		case O_TENANT:
			if (o->ntenants >= 64)
				goto bad;
			o->tenants[o->ntenants++] = optarg;
			break;
		case O_METRICS:
			if (kvd_listen_addr_check(optarg))
				goto bad;
			o->metrics_listen = optarg;
			break;
		case O_MSCOPE:
			o->metrics_scope = kvd_metrics_scope_parse(optarg);
			if (o->metrics_scope < 0)
				goto bad;
			break;
		case O_PFXLEND:
			if (parse_u64(optarg, 100, &v))
				goto bad;
			o->prefix_lend_percent = (uint32_t)v;
			break;
		case O_TIER:
			if (kvd_tier_parse(o, optarg))
				goto bad;
			break;
		case O_NVMEIO:
			if (strcmp(optarg, "auto") && strcmp(optarg, "uring") &&
			    strcmp(optarg, "pread"))
				goto bad;
			o->nvme_io = optarg;
			break;
		case O_INJECT:
			/* tests: every Nth file I/O of a lower tier fails */
			if (parse_u64(optarg, 1000000000, &v))
				goto bad;
			o->inject_io_error = (uint32_t)v;
			break;
		case O_CUDADEV:
			if (parse_u64(optarg, 64, &v))
				goto bad;
			o->cuda_device = (int)v;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			if (ch >= O_CLUSTER &&
			    ch < O_CLUSTER + KVD_CLUSTER_NOPTS) {
				const char *key =
					kvd_cluster_opt_keys[ch - O_CLUSTER];
				const char *msg =
					kvd_cluster_opt_set(&o->cluster, key,
							    optarg);

				if (msg) {
					fprintf(stderr, "kvpoold: bad value "
						"for option: %s (%s: %s)\n",
						optarg, key, msg);
					return -EINVAL;
				}
				break;
			}
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
bad:
	fprintf(stderr, "kvpoold: bad value for option: %s\n", optarg);
	return -EINVAL;
}

static int pick_backend(struct kvd *d)
{
	const char *b = d->o.backend;

	if (!strcmp(b, "cpu")) {
		d->be = &kvd_backend_cpu;
	} else if (!strcmp(b, "cuda")) {
		d->be = &kvd_backend_cuda;
	} else if (!strcmp(b, "auto")) {
		d->be = kvd_backend_cuda.probe() == 0 ? &kvd_backend_cuda :
			&kvd_backend_cpu;
		if (d->be != &kvd_backend_cuda)
			kvd_cuda_probe_done();
	} else {
		kvd_log(KVD_ERR, "unknown backend %s", b);
		return -EINVAL;
	}
	return 0;
}

static int pick_ledger(struct kvd *d)
{
	const char *l = d->o.ledger;

	if (!strcmp(l, "inproc")) {
		d->mode = KVP_MODE_INPROC;
	} else if (!strcmp(l, "module")) {
		d->mode = KVP_MODE_MODULE;
	} else if (!strcmp(l, "auto")) {
		d->mode = access(d->o.device_path, F_OK) == 0 ?
			  KVP_MODE_MODULE : KVP_MODE_INPROC;
	} else {
		kvd_log(KVD_ERR, "unknown ledger mode %s", l);
		return -EINVAL;
	}
	return 0;
}

/* ---- privileges ---------------------------------------------------------- */

#ifdef KVD_HAVE_LIBCAP
/* Capabilities kept after the drop: none with the in-process ledger; with
 * the module, CAP_SYS_ADMIN for the owner's ioctls. */
static int check_caps(const cap_value_t *keep, int nkeep)
{
	cap_t now = cap_get_proc();
	cap_value_t v;
	int bad = 0;

	if (!now)
		return -errno;
	for (v = 0; v <= CAP_LAST_CAP; v++) {
		cap_flag_value_t e = CAP_CLEAR, p = CAP_CLEAR;
		int i, kept = 0;

		for (i = 0; i < nkeep; i++)
			kept |= keep[i] == v;
		cap_get_flag(now, v, CAP_EFFECTIVE, &e);
		cap_get_flag(now, v, CAP_PERMITTED, &p);
		if (!kept && (e == CAP_SET || p == CAP_SET)) {
			kvd_log(KVD_ERR, "still holds capability %s",
				cap_to_name(v));
			bad = 1;
		}
	}
	cap_free(now);
	return bad ? -EPERM : 0;
}

static int drop_privileges(struct kvd *d)
{
	cap_value_t keep[1] = { CAP_SYS_ADMIN };
	int nkeep = d->mode == KVP_MODE_MODULE ? 1 : 0;
	struct passwd *pw;
	cap_t caps;
	cap_value_t v;

	if (!d->o.user) {
		if (geteuid() == 0)
			kvd_log(KVD_WARN, "running as root (use --user)");
		return 0;
	}
	if (geteuid() != 0) {
		kvd_log(KVD_ERR, "becoming user %s (--user, or user in the "
			"configuration file) needs root", d->o.user);
		return -EPERM;
	}
	pw = getpwnam(d->o.user);
	if (!pw) {
		kvd_log(KVD_ERR, "unknown user %s", d->o.user);
		return -ENOENT;
	}
	if (pw->pw_uid == 0) {
		kvd_log(KVD_ERR, "--user must not be root");
		return -EINVAL;
	}
	/* The socket (and a directory we created for it) belong to the new
	 * user, so that it can remove the socket at exit. */
	if (chown(d->o.socket_path, pw->pw_uid, pw->pw_gid))
		kvd_log(KVD_WARN, "chown %s: %m", d->o.socket_path);
	if (d->sock_dir[0] && chown(d->sock_dir, pw->pw_uid, pw->pw_gid))
		kvd_log(KVD_WARN, "chown %s: %m", d->sock_dir);
	for (v = 0; v <= CAP_LAST_CAP; v++)
		if (!(nkeep && v == CAP_SYS_ADMIN) && CAP_IS_SUPPORTED(v))
			cap_drop_bound(v);
	if (prctl(PR_SET_KEEPCAPS, 1) ||
	    initgroups(pw->pw_name, pw->pw_gid) || setgid(pw->pw_gid) ||
	    setuid(pw->pw_uid)) {
		kvd_log(KVD_ERR, "cannot become %s: %m", d->o.user);
		return -EPERM;
	}
	caps = cap_init();
	if (!caps)
		return -ENOMEM;
	if (nkeep && (cap_set_flag(caps, CAP_PERMITTED, nkeep, keep, CAP_SET) ||
		      cap_set_flag(caps, CAP_EFFECTIVE, nkeep, keep, CAP_SET))) {
		cap_free(caps);
		return -EINVAL;
	}
	if (cap_set_proc(caps)) {
		cap_free(caps);
		kvd_log(KVD_ERR, "cap_set_proc: %m");
		return -EPERM;
	}
	cap_free(caps);
	prctl(PR_SET_KEEPCAPS, 0);
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	d->self_uid = pw->pw_uid;
	kvd_log(KVD_INFO, "running as %s (uid %u), keeping %s", d->o.user,
		pw->pw_uid, nkeep ? "cap_sys_admin" : "no capability");
	/* Refuse to run with more than we asked for. */
	return check_caps(keep, nkeep);
}
#else
/* Built without libcap: no capability handling, so no --user. */
static int drop_privileges(struct kvd *d)
{
	if (!d->o.user) {
		if (geteuid() == 0)
			kvd_log(KVD_WARN, "running as root (use --user)");
		return 0;
	}
	kvd_log(KVD_ERR, "--user needs kvpoold built with libcap (its headers "
		"were missing at build time)");
	return -EOPNOTSUPP;
}
#endif

/* ---- main ------------------------------------------------------------------ */

/*
 * Descriptors: each connection holds two (its socket and an eventfd) and
 * briefly the ones its HELLO passes.  Raise the soft limit towards what
 * the connection limits need, and keep one spare descriptor so that at the
 * limit a pending connection can still be accepted and refused.
 */
static void fd_limits(struct kvd *d)
{
	rlim_t want = 4 * (rlim_t)(d->o.max_clients + 8) + 64;
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < want &&
	    rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			kvd_log(KVD_WARN, "setrlimit(RLIMIT_NOFILE): %m");
	}
	d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int setup(struct kvd *d, const struct kvd_conf *c)
{
	int r;

	pthread_mutex_init(&d->clients_lock, NULL);
	pthread_mutex_init(&d->cpu_lock, NULL);
	/* what the pool floor calls above itself */
	d->hooks.cache_evict = kvd_prefix_evict_pool;
	d->hooks.tier_short = kvd_ptier_short;
	d->hooks.client_reclaim = kvd_client_reclaim;
	d->hooks.cache_reclaim = kvd_prefix_reclaim_wake;
	d->hooks.client_connected = kvd_client_connected;

	r = pick_backend(d);
	if (!r)
		r = pick_ledger(d);
	if (!r)
		r = kvd_restart_begin(d);
	if (r)
		return r;
	r = kvd_pools_init(d);
	if (r)
		return r;
	if (d->be == &kvd_backend_cpu) {
		r = kvk_cpu_init(&d->cpu, d->o.kernel_threads);
		if (r) {
			kvd_log(KVD_WARN, "cpu kernels: no thread pool (%s): "
				"one thread per call", strerror(-r));
			d->cpu = NULL;
		} else {
			kvd_log(KVD_NOTICE, "cpu kernels: %u threads, %s",
				kvk_cpu_threads(d->cpu), kvk_cpu_simd(d->cpu));
		}
	}
	d->epoch = (uint64_t)time(NULL) * 1000000ULL +
		   (kvd_now_ns() / 1000) % 1000000ULL;
	r = kvd_ledger_open(d);
	if (r) {
		kvd_log(KVD_ERR, "ledger (%s): %s",
			d->mode == KVP_MODE_MODULE ? d->o.device_path :
			"in-process", strerror(-r));
		return r;
	}
	kvd_restart_done(d);
	r = kvd_lkeep_begin(d);
	if (r)
		return r;
	fd_limits(d);
	r = kvd_tenants_apply(d, c->tenants, c->ntenants);
	if (r)
		return r;
	kvd_lkeep_restore(d);
	r = kvd_prefix_init(d);
	if (r) {
		kvd_log(KVD_ERR, "prefix cache: %s", strerror(-r));
		return r;
	}
	kvd_keep_loaded_done(d);
	r = kvd_cluster_init(d);
	if (!r)
		r = kvd_ptier_init(d);
	if (r)
		return r;
	r = kvd_swap_start(d);
	if (r) {
		kvd_log(KVD_ERR, "swap workers: %s", strerror(-r));
		return r;
	}
	r = kvd_listen(d);
	if (r) {
		kvd_log(KVD_ERR, "socket %s: %s", d->o.socket_path,
			r == -EADDRINUSE ? "another kvpoold is serving it" :
			strerror(-r));
		return r;
	}
	return kvd_metrics_bind(d);
}

static void opts_defaults(struct kvd_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->socket_path = getenv("KVPOOL_SOCKET");
	if (!o->socket_path || !o->socket_path[0])
		o->socket_path = "/run/kvpool/kvpool.sock";
	o->device_path = getenv("KVPOOL_DEVICE");
	if (!o->device_path || !o->device_path[0])
		o->device_path = "/dev/kvpool";
	o->backend = "auto";
	o->ledger = "auto";
	o->block_bytes = 256 * 1024;
	o->capacity = 16384;
	o->chunk_blocks = 64;
	o->default_max = KVPOOL_UNLIMITED;
	o->shrink_delay_ms = 5000;
	o->reserve_bytes = 1ULL << 30;
	o->spare_chunks = 1;
	o->prefix_hash_bits = 128;
	o->prefix_lend_percent = 50;
	o->max_clients = 256;
	o->claim_grace_ms = 60000;
	o->max_clients_per_uid = 64;
	o->log_level = KVD_NOTICE;
	kvd_cluster_opts_default(&o->cluster);
}

/*
 * The options: the defaults, then the configuration file (c), then the
 * flags; --tenant flags replace the file's tenants of the same pool and
 * name, --tier flags all of the file's tiers.
 * 0, 2 for a bad flag (usage printed) or -errno for a bad file (logged).
 */
static int load_options(struct kvd_opts *o, struct kvd_conf *c, int argc,
			char **argv)
{
	char err[KVD_CONF_ERR_LEN];
	const char *path;
	int r;

	opts_defaults(o);
	if (parse(o, argc, argv))	/* for --config */
		return 2;
	path = o->config_path ? o->config_path : KVD_CONF_DEFAULT;
	memset(c, 0, sizeof(*c));
	if (path[0]) {
		r = kvd_conf_load(path, c, err, sizeof(err));
		if (r == -ENOENT && !o->config_path) {
			memset(c, 0, sizeof(*c));	/* none: defaults */
		} else if (r) {
			kvd_log(KVD_ERR, "%s: %s", path, err);
			return r;
		}
	}
	opts_defaults(o);
	kvd_conf_to_opts(c, o);
	/* --tier flags replace the file's tiers (all of them) */
	o->ntiers = 0;
	if (parse(o, argc, argv))
		return 2;
	if (!o->ntiers) {
		memcpy(o->tiers, c->tiers, sizeof(o->tiers));
		o->ntiers = c->ntiers;
	}
	r = kvd_conf_add_specs(c, o->tenants, o->ntenants, err, sizeof(err));
	if (r) {
		kvd_log(KVD_ERR, "%s", err);
		return 2;
	}
	return 0;
}

/* Milliseconds until @at_ns (0: no timer), at most @cap. */
static int timer_ms(uint64_t at_ns, int cap)
{
	uint64_t now = kvd_now_ns(), ms;

	if (!at_ns)
		return cap;
	ms = at_ns <= now ? 0 : (at_ns - now) / 1000000 + 1;
	return ms < (uint64_t)cap ? (int)ms : cap;
}

/* The daemon without its configuration file (the fuzz harness). */
int kvd_setup(struct kvd *d)
{
	static const struct kvd_conf none;

	return setup(d, &none);
}

/* SIGHUP: read the file again; a bad one changes nothing. */
static void reload(struct kvd *d, int argc, char **argv)
{
	struct kvd_conf *c = malloc(sizeof(*c));
	struct kvd_opts o;

	if (!c) {
		kvd_log(KVD_ERR, "reload: out of memory");
		return;
	}
	if (load_options(&o, c, argc, argv))
		kvd_log(KVD_ERR, "reload: the running configuration stays "
			"in force");
	else
		kvd_reconfigure(d, &o, c->tenants, c->ntenants);
	free(c);
}

static int run(struct kvd *d, int sfd, int argc, char **argv)
{
	for (;;) {
		struct pollfd pf[2 + KVD_MAX_TIERS];
		int timeout = 1000;
		unsigned int i;

		pf[0].fd = d->listen_fd;
		pf[1].fd = sfd;
		for (i = 0; i < d->npools; i++)
			pf[2 + i].fd = kvd_owner_poll_fd(&d->pools[i]);
		for (i = 0; i < 2 + d->npools; i++) {
			pf[i].events = POLLIN;
			pf[i].revents = 0;
		}
		/* Accepts paused at the descriptor limit: do not poll. */
		if (d->accept_paused_until_ns) {
			uint64_t now = kvd_now_ns();

			if (now >= d->accept_paused_until_ns) {
				d->accept_paused_until_ns = 0;
			} else {
				pf[0].fd = -1;
				timeout = (int)((d->accept_paused_until_ns -
						 now) / 1000000 + 1);
			}
		}
		for (i = 0; i < d->npools; i++) {
			timeout = timer_ms(d->pools[i].shrink_at_ns, timeout);
			timeout = timer_ms(d->pools[i].trim_at_ns, timeout);
		}
		timeout = timer_ms(kvd_lkeep_due_ns(), timeout);
		if (poll(pf, 2 + d->npools, timeout) < 0 && errno != EINTR)
			return -errno;
		if (pf[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) != sizeof(si)) {
				/* nothing: poll again */
			} else if (si.ssi_signo == SIGHUP) {
				kvd_log(KVD_NOTICE, "SIGHUP: reloading the "
					"configuration");
				reload(d, argc, argv);
			} else {
				kvd_log(KVD_NOTICE, "signal %u, exiting",
					si.ssi_signo);
				return 0;
			}
		}
		for (i = 0; i < d->npools; i++)
			if (pf[2 + i].revents & POLLIN)
				kvd_owner_events(&d->pools[i]);
		if (pf[0].revents & POLLIN)
			kvd_accept(d);
		for (i = 0; i < d->npools; i++)
			kvd_owner_timer(&d->pools[i]);
		kvd_lkeep_timer(d);
		if (d->be->tick)
			d->be->tick(d);
	}
}
int main(int argc, char **argv)
{
	static struct kvd dd;
	static struct kvd_conf conf;	/* d->o's strings point into it */
	struct kvd *d = &dd;
	sigset_t ss;
	unsigned int i;
	int sfd, r;

	d->listen_fd = -1;
	d->reserve_fd = -1;
	d->metrics_fd = -1;
	d->admin_gid = (gid_t)-1;
	d->self_uid = geteuid();
	if (load_options(&d->o, &conf, argc, argv))
		return 2;
	kvd_log_set_level(d->o.log_level);
	if (d->o.capacity_set && d->o.chunk_blocks > d->o.capacity)
		d->o.chunk_blocks = d->o.capacity;
	if (d->o.admin_group) {
		struct group *g = getgrnam(d->o.admin_group);

		if (!g) {
			fprintf(stderr, "kvpoold: unknown group %s\n",
				d->o.admin_group);
			return 2;
		}
		d->admin_gid = g->gr_gid;
	}
	if (!d->o.foreground) {
		if (daemon(0, 0)) {
			perror("kvpoold: daemon");
			return 1;
		}
		d->o.use_syslog = true;
	}
	if (d->o.use_syslog) {
		openlog("kvpoold", LOG_PID, LOG_DAEMON);
		kvd_log_to_syslog();
	}
	signal(SIGPIPE, SIG_IGN);
	/* a file tier past a file size limit fails with EFBIG instead */
	signal(SIGXFSZ, SIG_IGN);
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &ss, NULL);
	sfd = signalfd(-1, &ss, SFD_CLOEXEC);
	if (sfd < 0) {
		kvd_log(KVD_ERR, "signalfd: %m");
		return 1;
	}

	r = setup(d, &conf);
	if (!r)
		r = drop_privileges(d);
	if (!r)
		r = kvd_prefix_start(d);
	if (!r)
		r = kvd_cluster_start(d);
	if (!r)
		r = kvd_ptier_start(d);
	if (!r)
		r = kvd_metrics_start(d);
	if (r) {
		if (d->listen_fd >= 0)
			unlink(d->o.socket_path);
		return 1;
	}
	kvd_restart_serving(d);
	kvd_log(KVD_NOTICE, "serving %s: pool %s, %s backend, %s ledger, "
		"%u blocks of %llu bytes, chunk %u, epoch %llu",
		d->o.socket_path, d->top->name, d->be->name,
		d->mode == KVP_MODE_MODULE ? "module" : "in-process",
		d->top->capacity, (unsigned long long)d->top->block_bytes,
		d->top->chunk_blocks, (unsigned long long)d->epoch);
	for (i = 1; i < d->npools; i++)
		kvd_log(KVD_NOTICE, "tier %u: pool %s (%s%s%s), %u blocks, "
			"chunk %u", i, d->pools[i].name,
			kvd_tier_kind_name(d->pools[i].kind),
			d->pools[i].path[0] ? " " : "", d->pools[i].path,
			d->pools[i].capacity, d->pools[i].chunk_blocks);
	r = run(d, sfd, argc, argv);
	kvd_metrics_stop(d);
	close(d->listen_fd);
	unlink(d->o.socket_path);
	kvd_clients_stop(d);
	kvd_swap_stop(d);
	kvd_prefix_fini(d);
	kvd_ptier_stop(d);
	kvd_cluster_stop(d);
	kvd_log(KVD_NOTICE, "deepest connection stack: %llu KiB of %llu KiB",
		(unsigned long long)atomic_load(&d->stack_depth) / 1024,
		(unsigned long long)kvd_client_stack_bytes() / 1024);
	kvd_ledger_close(d);
	free(d->conf_tenants);
	kvd_pools_fini(d);
	if (d->cpu)
		kvk_cpu_free(d->cpu);
	return r ? 1 : 0;
}
