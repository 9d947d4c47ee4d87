// SPDX-License-Identifier: MIT
/*
 * kvpool-bench.c - the multi-tenant workload driver of kvpool.
 *
 * Starts kvpoold if none answers (CPU backend and in-process ledger unless
 * the module and a GPU are present), creates tenants with quotas, forks
 * tenant processes running the chat, reasoning and shared-prefix mixes
 * through libkvlease, samples the ledger while they run, optionally kills
 * one of them (--kill), then waits for the pool's backed memory to return
 * to idle and prints a per-tenant report.  Writes samples.csv, blocks.svg
 * and summary.json to --out (default build/demo).  See kvpool-bench(1).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/kvpool.h>

#include "bench.h"
#include "ctl_util.h"

#define EXIT_USAGE 2

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	interrupted = 1;
}

static void usage(FILE *f)
{
	fputs("usage: kvpool-bench [OPTIONS]\n"
	      "  -d, --duration SECONDS  workload phase (default 40)\n"
	      "  -o, --out DIR           CSV, SVG and JSON go here (default build/demo)\n"
	      "  -k, --kill[=TENANT]     SIGKILL one process of TENANT (default reasoning)\n"
	      "                          at --kill-at of the run and watch its blocks return\n"
	      "                          (on by default with the default tenants; --no-kill)\n"
	      "      --kill-at FRACTION  when to kill (default 0.55)\n"
	      "      --restart[=AT]      kill -9 the kvpoold this program started at fraction AT\n"
	      "                          of the run (default 0.4) and start it again; the\n"
	      "                          tenants reconnect (on by default with the default\n"
	      "                          tenants and a started daemon; --no-restart)\n"
	      "      --dram N            a dram tier of N blocks for a started daemon (default\n"
	      "                          twice --capacity; 0: none)\n"
	      "      --policy NAME       what the tenants do under pressure: swap (default with\n"
	      "                          a lower tier), recompute, stall (default without)\n"
	      "      --squeeze[=TENANT:MAX[:AT]]  lower TENANT's max to MAX at fraction AT\n"
	      "                          of the run, as an operator would with kvpoolctl\n"
	      "                          tenant set: reclaim requests (default chat:48:0.75;\n"
	      "                          on by default with the default tenants; --no-squeeze)\n"
	      "  -s, --socket PATH       use the kvpoold at PATH (default: $KVPOOL_SOCKET if\n"
	      "                          it answers, otherwise start one on a temp socket)\n"
	      "      --daemon PATH       kvpoold binary to start (default: next to this one)\n"
	      "      --daemon-args ARGS  extra kvpoold arguments (split on spaces)\n"
	      "      --capacity N        pool blocks for a started daemon (default 224)\n"
	      "      --block-bytes N     block size for a started daemon (default 65536)\n"
	      "      --chunk-blocks N    grow/shrink granularity (default 16)\n"
	      "      --tenant SPEC       NAME:MIX:PROCS:MAX[:MIN[:BATCH[:START:STOP]]]\n"
	      "                          MIX chat|reasoning|shared-prefix, MAX blocks or\n"
	      "                          'max', START/STOP fractions of the run; repeat.\n"
	      "                          Default: chat:chat:2:96:48:4:0.05:0.95,\n"
	      "                          reasoning:reasoning:1:64:0:2:0.2:0.85,\n"
	      "                          prefix:shared-prefix:1:80:40:4:0.1:0.7\n"
	      "      --layers N --kv-heads N --head-dim N --q-heads N --dtype D\n"
	      "                          model layout (default 4, 2, 64, 8, bf16)\n"
	      "      --step-sleep-us N   pause between decode steps (default 0)\n"
	      "      --tick-ms N         sampling period (default 200)\n"
	      "      --drain SECONDS     longest wait for backed to return to idle (default 20)\n"
	      "      --seed N            workload seed (default 1)\n"
	      "  -q, --quiet             no progress lines\n"
	      "      --json              print summary.json to stdout too\n"
	      "  -h, --help\n", f);
}

static int parse_mix(const char *s, enum bench_mix *m)
{
	if (!strcmp(s, "chat"))
		*m = MIX_CHAT;
	else if (!strcmp(s, "reasoning"))
		*m = MIX_REASONING;
	else if (!strcmp(s, "shared-prefix") || !strcmp(s, "prefix"))
		*m = MIX_PREFIX;
	else
		return -EINVAL;
	return 0;
}

static int parse_frac(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < 0.0 || v > 1.0)
		return -EINVAL;
	*out = v;
	return 0;
}

/* NAME:MIX:PROCS:MAX[:MIN[:BATCH[:START:STOP]]] */
static int parse_tenant(const char *spec, struct bench_tenant *t)
{
	char buf[256], *f[8], *save = NULL, *p;
	uint32_t v;
	int n = 0;

	if (strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	for (p = strtok_r(buf, ":", &save); p && n < 8;
	     p = strtok_r(NULL, ":", &save))
		f[n++] = p;
	if (n < 4 || n == 7 || strlen(f[0]) >= KVL_NAME_LEN)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	strcpy(t->name, f[0]);
	if (parse_mix(f[1], &t->mix))
		return -EINVAL;
	if (ctl_parse_u32(f[2], &t->procs) || !t->procs || t->procs > 8)
		return -EINVAL;
	if (ctl_parse_limit(f[3], &t->max))
		return -EINVAL;
	t->batch = t->mix == MIX_REASONING ? 2 : 4;
	t->start_frac = 0.0;
	t->stop_frac = 1.0;
	if (n > 4 && ctl_parse_u32(f[4], &t->min))
		return -EINVAL;
	if (n > 5) {
		if (ctl_parse_u32(f[5], &v) || !v || v > 16)
			return -EINVAL;
		t->batch = v;
	}
	if (n > 7 && (parse_frac(f[6], &t->start_frac) ||
		      parse_frac(f[7], &t->stop_frac) ||
		      t->start_frac >= t->stop_frac))
		return -EINVAL;
	return 0;
}

static const char *const default_tenants[] = {
	"chat:chat:2:96:48:4:0.05:0.95",
	"reasoning:reasoning:1:64:0:2:0.2:0.85",
	"prefix:shared-prefix:1:80:40:4:0.1:0.7",
};

static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX], *p;

	if (strlen(dir) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, dir);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---------------- daemon ---------------- */

static char tmpdir[64];
static char sockpath[128];
static pid_t daemon_pid = -1;

static int admin_try(const char *sock, struct kvl_admin **adm)
{
	struct kvl_pool_info p;
	int ret;

	ret = kvl_admin_open(sock, adm);
	if (ret)
		return ret;
	ret = kvl_admin_pool_status(*adm, &p);
	if (ret) {
		kvl_admin_close(*adm);
		*adm = NULL;
	}
	return ret;
}

static void daemon_path(const char *argv0, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *dir = dirname(self);

		/* the build tree (build/bin), then an installed sbin */
		snprintf(out, len, "%s/kvpoold", dir);
		if (!access(out, X_OK))
			return;
		snprintf(out, len, "%s/../sbin/kvpoold", dir);
		if (!access(out, X_OK))
			return;
	}
	snprintf(out, len, "kvpoold");
}

/* Start kvpoold on sockpath (again: @again, its log appended) and wait
 * until it answers. */
static int spawn_daemon(const struct bench_cfg *cfg, const char *bin,
			struct kvl_admin **adm, bool again)
{
	char *args[48], cap[16], bb[24], chunk[16], logpath[PATH_MAX];
	char extra[512], tier[32];
	int n = 0, i, ret = -ETIMEDOUT, status;
	char *p, *save = NULL;

	snprintf(cap, sizeof(cap), "%u", cfg->capacity);
	snprintf(bb, sizeof(bb), "%llu", (unsigned long long)cfg->block_bytes);
	snprintf(chunk, sizeof(chunk), "%u", cfg->chunk_blocks);
	snprintf(logpath, sizeof(logpath), "%s/kvpoold.log", cfg->out_dir);

	args[n++] = (char *)bin;
	args[n++] = (char *)"--foreground";
	/* a private daemon: not the system's kvpoold.conf */
	args[n++] = (char *)"--config";
	args[n++] = (char *)"";
	args[n++] = (char *)"--socket";
	args[n++] = sockpath;
	args[n++] = (char *)"--capacity";
	args[n++] = cap;
	args[n++] = (char *)"--block-bytes";
	args[n++] = bb;
	args[n++] = (char *)"--chunk-blocks";
	args[n++] = chunk;
	args[n++] = (char *)"--shrink-delay-ms";
	args[n++] = (char *)"1000";
	if (cfg->dram_blocks) {
		snprintf(tier, sizeof(tier), "dram:%u", cfg->dram_blocks);
		args[n++] = (char *)"--tier";
		args[n++] = tier;
	}
	if (cfg->daemon_args) {
		snprintf(extra, sizeof(extra), "%s", cfg->daemon_args);
		for (p = strtok_r(extra, " ", &save); p && n < 46;
		     p = strtok_r(NULL, " ", &save))
			args[n++] = p;
	}
	args[n] = NULL;

	daemon_pid = fork();
	if (daemon_pid < 0)
		return -errno;
	if (daemon_pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_CLOEXEC |
			      (again ? O_APPEND : O_TRUNC), 0644);

		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		signal(SIGINT, SIG_IGN);
		/* do not outlive the bench */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execvp(bin, args);
		fprintf(stderr, "kvpool-bench: cannot run %s: %s\n", bin,
			strerror(errno));
		_exit(127);
	}
	/* wait up to 10 s for it to answer */
	for (i = 0; i < 2000; i++) {
		usleep(5000);
		if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			fprintf(stderr, "kvpool-bench: %s exited (status %d); see %s\n",
				bin, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
				logpath);
			return -ECHILD;
		}
		ret = admin_try(sockpath, adm);
		if (!ret)
			return 0;
	}
	return ret;
}

static int start_daemon(const struct bench_cfg *cfg, const char *bin,
			struct kvl_admin **adm)
{
	strcpy(tmpdir, "/tmp/kvpool-bench.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -errno;
	snprintf(sockpath, sizeof(sockpath), "%s/kvpool.sock", tmpdir);
	return spawn_daemon(cfg, bin, adm, false);
}

static void stop_daemon(void)
{
	int i, status;

	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		for (i = 0; i < 100; i++) {
			if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid)
				break;
			usleep(50000);
		}
		if (i == 100) {
			kill(daemon_pid, SIGKILL);
			waitpid(daemon_pid, &status, 0);
		}
		daemon_pid = -1;
	}
	if (sockpath[0])
		unlink(sockpath);
	if (tmpdir[0])
		rmdir(tmpdir);
}

/* ---------------- sampling ---------------- */

struct driver {
	struct bench_cfg *cfg;
	struct bench_result *r;
	struct kvl_admin *adm;
	struct kvl_tenant_info tl[64];
	uint64_t t0;
	double last_progress;
	uint64_t last_tokens[BENCH_MAX_TENANTS];
	double last_t;
};

static int find_tenant(const struct kvl_tenant_info *tl, int n,
		       const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(tl[i].name, name))
			return i;
	return -1;
}

static int sample(struct driver *d, struct bench_sample *s)
{
	struct kvl_pool_info p;
	int ret, n, i, j;

	memset(s, 0, sizeof(*s));
	s->t = (double)(ctl_now_ns() - d->t0) / 1e9;
	if (!d->adm)
		return -ENOTCONN;
	ret = kvl_admin_pool_status(d->adm, &p);
	if (ret)
		return ret;
	s->backed = p.backed;
	s->used = p.used;
	n = kvl_admin_tenant_list(d->adm, p.name, d->tl, 64);
	if (n < 0)
		return n;
	if (n > 64)
		n = 64;
	for (i = 0; i < (int)d->cfg->ntenants; i++) {
		j = find_tenant(d->tl, n, d->cfg->tenants[i].name);
		if (j >= 0) {
			s->current[i] = d->tl[j].current;
			/* peaks and events of the last daemon life */
			if (d->tl[j].peak < d->r->ten_end[i].peak)
				d->tl[j].peak = d->r->ten_end[i].peak;
			d->r->ten_end[i] = d->tl[j];
		}
	}
	for (i = 0; i < (int)d->r->nworkers; i++)
		s->swaps_out += d->r->ws[i].swaps_out;
	return 0;
}

static void add_sample(struct driver *d)
{
	struct bench_result *r = d->r;
	struct bench_sample s;

	if (sample(d, &s))
		return;
	if (r->nsamples < BENCH_MAX_SAMPLES)
		r->samples[r->nsamples++] = s;
	if (s.backed > r->peak_backed)
		r->peak_backed = s.backed;
	if (s.used > r->peak_used)
		r->peak_used = s.used;
}

static void progress(struct driver *d, bool force)
{
	const struct bench_result *r = d->r;
	const struct bench_sample *s;
	double t, dt;
	uint32_t i, w;

	if (d->cfg->quiet || !r->nsamples)
		return;
	s = &r->samples[r->nsamples - 1];
	t = s->t;
	if (!force && t - d->last_progress < 2.0)
		return;
	dt = t - d->last_t;
	d->last_progress = t;
	fprintf(stderr, "[%5.1fs] backed %4u used %4u |", t, s->backed, s->used);
	for (i = 0; i < d->cfg->ntenants; i++) {
		uint64_t tok = 0;

		for (w = 0; w < r->nworkers; w++)
			if (r->ws[w].tenant == i)
				tok += r->ws[w].gen_tokens;
		fprintf(stderr, " %s %u blk %5.0f tok/s |",
			d->cfg->tenants[i].name, s->current[i],
			dt > 0 ? (double)(tok - d->last_tokens[i]) / dt : 0.0);
		d->last_tokens[i] = tok;
	}
	fputc('\n', stderr);
	d->last_t = t;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* ---------------- kill ---------------- */

static void do_kill(struct driver *d, struct bench_ctl *ctl)
{
	struct bench_result *r = d->r;
	struct kvl_client_info ci[256];
	struct bench_sample s;
	uint32_t w, t;
	int i, n, status;
	uint64_t k0;

	for (t = 0; t < d->cfg->ntenants; t++)
		if (!strcmp(d->cfg->tenants[t].name, d->cfg->kill_tenant))
			break;
	if (t == d->cfg->ntenants)
		return;
	for (w = 0; w < r->nworkers; w++)
		if (r->ws[w].tenant == t && r->ws[w].state == 1)
			break;
	if (w == r->nworkers) {
		fprintf(stderr, "kvpool-bench: --kill: no running process of tenant %s\n",
			d->cfg->kill_tenant);
		r->killed = true;	/* do not try again */
		r->kill_pid = 0;
		return;
	}
	/* what the victim holds, from the owner's point of view */
	r->kill_held = r->ws[w].held;
	n = kvl_admin_client_list(d->adm, NULL, ci, 256);
	for (i = 0; i < n && i < 256; i++)
		if (ci[i].pid == (uint32_t)r->ws[w].pid)
			r->kill_held = ci[i].blocks;
	if (!sample(d, &s))
		r->kill_before = s.current[t];
	r->killed = true;
	r->kill_pid = r->ws[w].pid;
	r->kill_tenant = t;
	r->kill_t = (double)(ctl_now_ns() - d->t0) / 1e9;
	k0 = ctl_now_ns();
	kill(r->ws[w].pid, SIGKILL);
	waitpid(r->ws[w].pid, &status, 0);
	r->ws[w].state = 4;
	r->ws[w].held = 0;
	/* watch the lease disappear and its blocks come back */
	while (ctl_now_ns() - k0 < 5000000000ULL) {
		bool gone = true;

		n = kvl_admin_client_list(d->adm, NULL, ci, 256);
		for (i = 0; i < n && i < 256; i++)
			if (ci[i].pid == (uint32_t)r->kill_pid)
				gone = false;
		if (n == -EOPNOTSUPP)
			gone = true;
		if (gone && !sample(d, &s)) {
			r->kill_after = s.current[t];
			r->kill_returned = true;
			r->kill_return_ms = (double)(ctl_now_ns() - k0) / 1e6;
			break;
		}
		sleep_ms(2);
	}
	if (!d->cfg->quiet)
		fprintf(stderr, "[%5.1fs] killed pid %d of tenant %s (kill -9) holding %u blocks: %s\n",
			r->kill_t, (int)r->kill_pid, d->cfg->kill_tenant,
			r->kill_held, r->kill_returned ?
			"its lease is gone, blocks returned" :
			"its blocks did NOT come back within 5 s");
	(void)ctl;
}

/* ---------------- restart ---------------- */

static int setup_tenants(struct kvl_admin *adm, const struct bench_cfg *c,
			 const char *pool);

/* kill -9 of the daemon this program started, and the same daemon again,
 * as a crash and a service manager's restart would: the tenants reconnect
 * by themselves; the tenants of an in-process ledger are created again,
 * as its configuration file would. */
static void do_restart(struct driver *d, const char *bin)
{
	struct bench_result *r = d->r;
	struct kvl_restart_info ri;
	uint64_t k0;
	int status, e;

	r->restarted = true;
	r->restart_t = (double)(ctl_now_ns() - d->t0) / 1e9;
	if (!d->cfg->quiet)
		fprintf(stderr, "[%5.1fs] kill -9 of kvpoold (pid %d), starting it again\n",
			r->restart_t, (int)daemon_pid);
	k0 = ctl_now_ns();
	kill(daemon_pid, SIGKILL);
	waitpid(daemon_pid, &status, 0);
	daemon_pid = -1;
	kvl_admin_close(d->adm);
	d->adm = NULL;
	e = spawn_daemon(d->cfg, bin, &d->adm, true);
	if (e) {
		r->restart_err = e;
		fprintf(stderr, "kvpool-bench: kvpoold did not come back: %s\n",
			strerror(-e));
		return;
	}
	r->restart_serve_ms = (double)(ctl_now_ns() - k0) / 1e6;
	e = setup_tenants(d->adm, d->cfg, r->pool.name);
	if (e)
		r->restart_err = e;
	memset(&ri, 0, sizeof(ri));
	if (!kvl_admin_restart_info(d->adm, &ri)) {
		r->restart_epoch_kept = ri.preserved;
		r->restart_kept_blocks = ri.blocks;
	}
	if (!d->cfg->quiet)
		fprintf(stderr, "[%5.1fs] kvpoold serving again after %.0f ms: %s\n",
			(double)(ctl_now_ns() - d->t0) / 1e9,
			r->restart_serve_ms, r->restart_epoch_kept ?
			"block contents kept" :
			"block contents lost (in-process ledger)");
}

/* ---------------- squeeze ---------------- */

static void do_squeeze(struct driver *d)
{
	struct bench_result *r = d->r;
	const struct bench_cfg *c = d->cfg;
	struct bench_sample s;
	uint32_t t;

	r->squeezed = true;
	for (t = 0; t < c->ntenants; t++)
		if (!strcmp(c->tenants[t].name, c->squeeze_tenant))
			break;
	if (t == c->ntenants) {
		fprintf(stderr, "kvpool-bench: --squeeze: no tenant %s\n",
			c->squeeze_tenant);
		r->squeeze_err = -ENOENT;
		return;
	}
	r->squeeze_tenant = t;
	r->squeeze_old_max = c->tenants[t].max;
	if (!sample(d, &s))
		r->squeeze_before = s.current[t];
	r->squeeze_t = (double)(ctl_now_ns() - d->t0) / 1e9;
	r->squeeze_err = kvl_admin_tenant_set(d->adm, r->pool.name,
					      c->tenants[t].name, c->squeeze_max,
					      KVL_ADMIN_KEEP, KVL_ADMIN_KEEP,
					      KVL_ADMIN_KEEP);
	if (!c->quiet)
		fprintf(stderr, "[%5.1fs] operator: kvpoolctl tenant set %s --max %u (it holds %u blocks)%s%s\n",
			r->squeeze_t, c->tenants[t].name, c->squeeze_max,
			r->squeeze_before, r->squeeze_err ? ": " : "",
			r->squeeze_err ? strerror(-r->squeeze_err) : "");
}

/* After a squeeze: has the tenant come down to its new max? */
static void watch_squeeze(struct driver *d)
{
	struct bench_result *r = d->r;
	const struct bench_sample *s;

	if (!r->squeezed || r->squeeze_err || r->squeeze_done || !r->nsamples)
		return;
	s = &r->samples[r->nsamples - 1];
	if (s->t < r->squeeze_t || s->current[r->squeeze_tenant] > d->cfg->squeeze_max)
		return;
	r->squeeze_done = true;
	r->squeeze_ms = (s->t - r->squeeze_t) * 1000.0;
	if (!d->cfg->quiet)
		fprintf(stderr, "[%5.1fs] tenant %s is down to %u blocks (max %u) after %.0f ms\n",
			s->t, d->cfg->tenants[r->squeeze_tenant].name,
			s->current[r->squeeze_tenant], d->cfg->squeeze_max,
			r->squeeze_ms);
}

/* ---------------- main ---------------- */

enum {
	O_KILL_AT = 256, O_SQUEEZE, O_NO_KILL, O_NO_SQUEEZE, O_DAEMON, O_DAEMON_ARGS, O_CAP, O_BB, O_CHUNK,
	O_TENANT, O_LAYERS, O_KVH, O_HD, O_QH, O_DTYPE, O_SLEEP, O_TICK,
	O_DRAIN, O_SEED, O_JSON, O_RESTART, O_NO_RESTART, O_DRAM, O_POLICY,
};

static int parse_args(int argc, char **argv, struct bench_cfg *c)
{
	static const struct option opts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "out", required_argument, NULL, 'o' },
		{ "kill", optional_argument, NULL, 'k' },
		{ "kill-at", required_argument, NULL, O_KILL_AT },
		{ "squeeze", optional_argument, NULL, O_SQUEEZE },
		{ "no-kill", no_argument, NULL, O_NO_KILL },
		{ "no-squeeze", no_argument, NULL, O_NO_SQUEEZE },
		{ "restart", optional_argument, NULL, O_RESTART },
		{ "no-restart", no_argument, NULL, O_NO_RESTART },
		{ "dram", required_argument, NULL, O_DRAM },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "socket", required_argument, NULL, 's' },
		{ "daemon", required_argument, NULL, O_DAEMON },
		{ "daemon-args", required_argument, NULL, O_DAEMON_ARGS },
		{ "capacity", required_argument, NULL, O_CAP },
		{ "block-bytes", required_argument, NULL, O_BB },
		{ "chunk-blocks", required_argument, NULL, O_CHUNK },
		{ "tenant", required_argument, NULL, O_TENANT },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "kv-heads", required_argument, NULL, O_KVH },
		{ "head-dim", required_argument, NULL, O_HD },
		{ "q-heads", required_argument, NULL, O_QH },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "step-sleep-us", required_argument, NULL, O_SLEEP },
		{ "tick-ms", required_argument, NULL, O_TICK },
		{ "drain", required_argument, NULL, O_DRAIN },
		{ "seed", required_argument, NULL, O_SEED },
		{ "quiet", no_argument, NULL, 'q' },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v64;
	uint32_t v;
	double dv;
	char *end;
	bool custom, kill_set = false, squeeze_set = false, restart_set = false;
	bool dram_set = false;
	int pol = -1;
	int ch, ret = 0;
	size_t i;

	c->kill_tenant = "reasoning";
	c->squeeze_tenant = "chat";
	c->squeeze_max = 48;
	while ((ch = getopt_long(argc, argv, "d:o:k::s:qh", opts, NULL)) != -1) {
		switch (ch) {
		case 'd':
		case O_DRAIN:
			dv = strtod(optarg, &end);
			if (*end || end == optarg || !(dv > 0 && dv <= 3600)) {
				fprintf(stderr, "kvpool-bench: bad seconds '%s'\n", optarg);
				return EXIT_USAGE;
			}
			if (ch == 'd')
				c->duration_s = dv;
			else
				c->drain_s = dv;
			break;
		case 'o':
			c->out_dir = optarg;
			break;
		case 'k':
			c->kill_tenant = optarg ? optarg : "reasoning";
			kill_set = true;
			break;
		case O_KILL_AT:
			if (parse_frac(optarg, &c->kill_frac)) {
				fprintf(stderr, "kvpool-bench: bad --kill-at '%s'\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case O_NO_KILL:
			c->kill_tenant = NULL;
			kill_set = true;
			break;
		case O_NO_SQUEEZE:
			c->squeeze_tenant = NULL;
			squeeze_set = true;
			break;
		case O_RESTART:
			c->restart_frac = 0.4;
			if (optarg && parse_frac(optarg, &c->restart_frac)) {
				fprintf(stderr, "kvpool-bench: bad --restart '%s'\n", optarg);
				return EXIT_USAGE;
			}
			restart_set = true;
			break;
		case O_NO_RESTART:
			c->restart_frac = -1;
			restart_set = true;
			break;
		case O_DRAM:
			if (ctl_parse_u32(optarg, &c->dram_blocks))
				goto bad;
			dram_set = true;
			break;
		case O_POLICY:
			pol = kvl_policy_from_name(optarg);
			if (pol <= 0) {
				fprintf(stderr, "kvpool-bench: bad --policy '%s' (swap, recompute, stall, fail)\n",
					optarg);
				return EXIT_USAGE;
			}
			break;
		case O_SQUEEZE: {
			static char sq[64];
			char *a, *b, *save2 = NULL;

			snprintf(sq, sizeof(sq), "%s", optarg ? optarg : "chat:48:0.75");
			a = strtok_r(sq, ":", &save2);
			b = strtok_r(NULL, ":", &save2);
			if (!a || !b || ctl_parse_u32(b, &c->squeeze_max) ||
			    c->squeeze_max >= KVPOOL_UNLIMITED) {
				fprintf(stderr, "kvpool-bench: bad --squeeze '%s' (TENANT:MAX[:AT])\n",
					optarg);
				return EXIT_USAGE;
			}
			c->squeeze_tenant = a;
			squeeze_set = true;
			b = strtok_r(NULL, ":", &save2);
			if (b && parse_frac(b, &c->squeeze_frac)) {
				fprintf(stderr, "kvpool-bench: bad --squeeze fraction '%s'\n", b);
				return EXIT_USAGE;
			}
			break;
		}
		case 's':
			c->socket = optarg;
			break;
		case O_DAEMON:
			c->daemon_bin = optarg;
			break;
		case O_DAEMON_ARGS:
			c->daemon_args = optarg;
			break;
		case O_BB:
			ret = ctl_parse_size(optarg, &v64);
			if (ret || v64 < 256 || v64 % 256 || v64 > (1ULL << 30))
				goto bad;
			c->block_bytes = v64;
			break;
		case O_TENANT:
			if (c->ntenants >= BENCH_MAX_TENANTS ||
			    parse_tenant(optarg, &c->tenants[c->ntenants])) {
				fprintf(stderr, "kvpool-bench: bad --tenant '%s' (NAME:MIX:PROCS:MAX[:MIN[:BATCH[:START:STOP]]])\n",
					optarg);
				return EXIT_USAGE;
			}
			c->ntenants++;
			break;
		case O_DTYPE:
			if (!strcmp(optarg, "bf16"))
				c->model.dtype = KVL_DTYPE_BF16;
			else if (!strcmp(optarg, "fp8"))
				c->model.dtype = KVL_DTYPE_FP8;
			else if (!strcmp(optarg, "int8"))
				c->model.dtype = KVL_DTYPE_INT8;
			else if (!strcmp(optarg, "int4"))
				c->model.dtype = KVL_DTYPE_INT4;
			else
				goto bad;
			break;
		case O_CAP: case O_CHUNK: case O_LAYERS: case O_KVH: case O_HD:
		case O_QH: case O_SLEEP: case O_TICK: case O_SEED:
			ret = ctl_parse_u32(optarg, &v);
			if (ret || (!v && ch != O_SLEEP && ch != O_SEED))
				goto bad;
			switch (ch) {
			case O_CAP: c->capacity = v; break;
			case O_CHUNK: c->chunk_blocks = v; break;
			case O_LAYERS: c->model.layers = v; break;
			case O_KVH: c->model.kv_heads = v; break;
			case O_HD: c->model.head_dim = v; break;
			case O_QH: c->model.q_heads = v; break;
			case O_SLEEP: c->step_sleep_us = v; break;
			case O_TICK: c->tick_ms = v; break;
			case O_SEED: c->seed = v; break;
			}
			break;
		case 'q':
			c->quiet = true;
			break;
		case O_JSON:
			c->json_stdout = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvpool-bench: unexpected argument '%s'\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	custom = c->ntenants > 0;
	if (!c->ntenants)
		for (i = 0; i < sizeof(default_tenants) / sizeof(default_tenants[0]); i++)
			parse_tenant(default_tenants[i], &c->tenants[c->ntenants++]);
	/* custom tenants: kill and squeeze only on request */
	if (custom && !kill_set)
		c->kill_tenant = NULL;
	if (custom && !squeeze_set)
		c->squeeze_tenant = NULL;
	if (!restart_set)
		c->restart_frac = custom ? -1 : 0.4;
	c->restart_asked = restart_set && c->restart_frac >= 0;
	if (c->socket && c->restart_asked) {
		fprintf(stderr, "kvpool-bench: --restart needs a kvpoold of its own (no --socket)\n");
		return EXIT_USAGE;
	}
	if (!dram_set)
		c->dram_blocks = 2 * c->capacity;
	c->policy = pol > 0 ? (uint32_t)pol : 0;	/* 0: main decides */
	if (c->model.q_heads % c->model.kv_heads) {
		fprintf(stderr, "kvpool-bench: --q-heads must be a multiple of --kv-heads\n");
		return EXIT_USAGE;
	}
	return 0;
bad:
	fprintf(stderr, "kvpool-bench: bad value '%s' for %s\n", optarg,
		argv[optind - 1]);
	return EXIT_USAGE;
}

static int setup_tenants(struct kvl_admin *adm, const struct bench_cfg *c,
			 const char *pool)
{
	uint32_t i;
	int ret;

	for (i = 0; i < c->ntenants; i++) {
		const struct bench_tenant *t = &c->tenants[i];

		ret = kvl_admin_tenant_add(adm, pool, t->name, t->max, t->min,
					   getuid(), KVPOOL_ID_NONE);
		if (ret == -EEXIST)
			ret = kvl_admin_tenant_set(adm, pool, t->name, t->max,
						   t->min, getuid(),
						   KVL_ADMIN_KEEP);
		if (ret) {
			fprintf(stderr, "kvpool-bench: tenant %s: %s\n", t->name,
				strerror(-ret));
			return ret;
		}
		/* and in the dram tier, unlimited there, so that the swap
		 * policy has somewhere to put its sequences */
		if (!c->dram_blocks)
			continue;
		ret = kvl_admin_tenant_add(adm, "dram", t->name,
					   KVPOOL_UNLIMITED, 0, getuid(),
					   KVPOOL_ID_NONE);
		if (ret && ret != -EEXIST) {
			fprintf(stderr, "kvpool-bench: tenant %s in the dram tier: %s\n",
				t->name, strerror(-ret));
			return ret;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct bench_cfg cfg;
	static struct bench_result res;
	struct driver d;
	struct bench_ctl *ctl;
	struct sigaction sa;
	char bin[PATH_MAX], path[PATH_MAX + 32];
	const char *env;
	uint32_t i, p, w, running;
	size_t shm_len;
	void *shm;
	int ret, rc = 0, status;
	bool stopped = false;
	uint64_t next_tick, t_end, t_drain_end;

	if (argc > 1 && !strcmp(argv[1], "pressure")) {
		ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);

		bin[n > 0 ? n : 0] = 0;
		return bench_pressure_main(argc - 1, argv + 1,
					   n > 0 ? bin : argv[0]);
	}
	cfg.duration_s = 40;
	cfg.drain_s = 20;
	cfg.out_dir = "build/demo";
	cfg.kill_frac = 0.55;
	cfg.squeeze_frac = 0.75;
	cfg.tick_ms = 200;
	cfg.capacity = 224;
	cfg.block_bytes = 65536;
	cfg.chunk_blocks = 16;
	cfg.seed = 1;
	cfg.model = (struct bench_model){ 4, 2, 64, 8, KVL_DTYPE_BF16 };
	ret = parse_args(argc, argv, &cfg);
	if (ret)
		return ret;
	ret = mkdir_p(cfg.out_dir);
	if (ret) {
		fprintf(stderr, "kvpool-bench: %s: %s\n", cfg.out_dir,
			strerror(-ret));
		return 1;
	}

	memset(&d, 0, sizeof(d));
	d.cfg = &cfg;
	d.r = &res;
	res.cfg = &cfg;
	res.t_idle_again = -1;
	res.samples = calloc(BENCH_MAX_SAMPLES, sizeof(*res.samples));
	if (!res.samples)
		return 1;

	/* a daemon: the given one, $KVPOOL_SOCKET's, or our own */
	env = getenv(KVL_SOCKET_ENV);
	if (cfg.socket) {
		ret = admin_try(cfg.socket, &d.adm);
		if (ret) {
			fprintf(stderr, "kvpool-bench: no kvpoold answers at %s: %s\n",
				cfg.socket, strerror(-ret));
			return 1;
		}
	} else if (env && *env && !admin_try(env, &d.adm)) {
		cfg.socket = env;
	} else {
		if (cfg.daemon_bin)
			snprintf(bin, sizeof(bin), "%s", cfg.daemon_bin);
		else
			daemon_path(argv[0], bin, sizeof(bin));
		ret = start_daemon(&cfg, bin, &d.adm);
		if (ret) {
			fprintf(stderr, "kvpool-bench: could not start %s: %s\n",
				bin, strerror(-ret));
			stop_daemon();
			return 1;
		}
		cfg.socket = sockpath;
		res.started_daemon = true;
	}
	setenv(KVL_SOCKET_ENV, cfg.socket, 1);
	/* a daemon of someone else's: its tiers as they are, no restart */
	if (!res.started_daemon) {
		cfg.dram_blocks = 0;
		if (cfg.restart_asked) {
			fprintf(stderr, "kvpool-bench: --restart needs a kvpoold of its own\n");
			rc = EXIT_USAGE;
			goto out_daemon;
		}
		cfg.restart_frac = -1;
	}
	if (!cfg.policy)
		cfg.policy = cfg.dram_blocks ? KVL_POLICY_SWAP : KVL_POLICY_STALL;
	res.dram_blocks = cfg.dram_blocks;

	ret = kvl_admin_pool_status(d.adm, &res.pool);
	if (!ret)
		ret = setup_tenants(d.adm, &cfg, res.pool.name);
	if (ret) {
		fprintf(stderr, "kvpool-bench: pool setup: %s\n", strerror(-ret));
		rc = 1;
		goto out_daemon;
	}

	for (i = 0; i < cfg.ntenants; i++)
		res.nworkers += cfg.tenants[i].procs;
	if (res.nworkers > BENCH_MAX_WORKERS) {
		fprintf(stderr, "kvpool-bench: at most %d processes\n",
			BENCH_MAX_WORKERS);
		rc = EXIT_USAGE;
		goto out_daemon;
	}
	shm_len = sizeof(*ctl) + res.nworkers * sizeof(struct bench_wstats);
	shm = mmap(NULL, shm_len, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED) {
		rc = 1;
		goto out_daemon;
	}
	ctl = shm;
	res.ws = (struct bench_wstats *)((char *)shm + sizeof(*ctl));

	if (!cfg.quiet) {
		char h[32];

		fprintf(stderr,
			"kvpool-bench: pool %s (%s ledger, %s backend): %u blocks of %s, chunk %u%s\n"
			"kvpool-bench: model layout %u layers x %u KV heads x head_dim %u, %u query heads\n"
			"kvpool-bench: %u tenant processes for %.0f s, then waiting for backed to return to idle\n",
			res.pool.name,
			res.pool.mode == KVL_MODE_MODULE ? "module" : "in-process",
			res.pool.backend[0] ? res.pool.backend : "?",
			res.pool.capacity, ctl_human(res.pool.block_bytes, h, sizeof(h)),
			res.pool.chunk_blocks,
			res.started_daemon ? " (kvpoold started by kvpool-bench)" : "",
			cfg.model.layers, cfg.model.kv_heads, cfg.model.head_dim,
			cfg.model.q_heads, res.nworkers, cfg.duration_s);
		for (i = 0; i < cfg.ntenants; i++) {
			const struct bench_tenant *t = &cfg.tenants[i];
			char m[16];

			if (t->max == KVPOOL_UNLIMITED)
				strcpy(m, "max");
			else
				snprintf(m, sizeof(m), "%u", t->max);
			fprintf(stderr, "kvpool-bench:   tenant %-10s %-13s x%u  max %s min %u, active %2.0f%%-%2.0f%% of the run\n",
				t->name, bench_mix_name(t->mix), t->procs, m,
				t->min, t->start_frac * 100, t->stop_frac * 100);
		}
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* idle baseline */
	d.t0 = ctl_now_ns();
	add_sample(&d);
	res.idle_before = res.nsamples ? res.samples[0].backed : 0;

	ctl->t0_ns = ctl_now_ns() + 500000000ULL;	/* 0.5 s of idle first */
	ctl->run_ns = (uint64_t)(cfg.duration_s * 1e9);
	fflush(NULL);
	for (i = 0, w = 0; i < cfg.ntenants; i++) {
		for (p = 0; p < cfg.tenants[i].procs; p++, w++) {
			pid_t pid;

			res.ws[w].tenant = i;
			pid = fork();
			if (pid < 0) {
				ctl->stop = 1;
				rc = 1;
				break;
			}
			if (pid == 0) {
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				bench_worker_main(&cfg, ctl, &res.ws[w], i, p);
			}
			res.ws[w].pid = pid;
		}
	}

	t_end = ctl->t0_ns + ctl->run_ns;
	next_tick = ctl_now_ns();
	for (;;) {
		uint64_t now = ctl_now_ns();

		if (now >= next_tick) {
			add_sample(&d);
			watch_squeeze(&d);
			progress(&d, false);
			next_tick += (uint64_t)cfg.tick_ms * 1000000ULL;
		}
		if (cfg.squeeze_tenant && !res.squeezed &&
		    now >= ctl->t0_ns + (uint64_t)(cfg.squeeze_frac * (double)ctl->run_ns))
			do_squeeze(&d);
		if (cfg.kill_tenant && !res.killed &&
		    now >= ctl->t0_ns + (uint64_t)(cfg.kill_frac * (double)ctl->run_ns))
			do_kill(&d, ctl);
		if (cfg.restart_frac >= 0 && !res.restarted &&
		    now >= ctl->t0_ns + (uint64_t)(cfg.restart_frac * (double)ctl->run_ns))
			do_restart(&d, bin);
		if (!stopped && (now >= t_end || interrupted)) {
			ctl->stop = 1;
			stopped = true;
		}
		/* reap */
		running = 0;
		for (w = 0; w < res.nworkers; w++) {
			if (res.ws[w].pid > 0 && res.ws[w].state != 4 &&
			    waitpid(res.ws[w].pid, &status, WNOHANG) == 0)
				running++;
			else if (res.ws[w].state < 2)
				res.ws[w].state = 3;	/* died early */
		}
		if (!running)
			break;
		sleep_ms(10);
	}
	res.t_work_start = (double)(ctl->t0_ns - d.t0) / 1e9;
	res.t_work_end = (double)(ctl_now_ns() - d.t0) / 1e9;
	res.elapsed_s = (double)(ctl_now_ns() - ctl->t0_ns) / 1e9;
	if (res.elapsed_s > cfg.duration_s)
		res.elapsed_s = cfg.duration_s;

	/* the prefix cache keeps what it cached until pressure asks for
	 * it: give it back now, as an operator ending the run would */
	for (i = 0; d.adm && i < cfg.ntenants; i++) {
		int n = kvl_admin_prefix_flush(d.adm, res.pool.name,
					       cfg.tenants[i].name);

		if (n > 0) {
			res.prefix_flushed += (uint32_t)n;
			if (!cfg.quiet)
				fprintf(stderr, "kvpool-bench: prefix cache of %s: %d blocks given back\n",
					cfg.tenants[i].name, n);
		}
	}
	/* drain: wait for the owner to shrink back to idle */
	t_drain_end = ctl_now_ns() + (uint64_t)(cfg.drain_s * 1e9);
	if (!cfg.quiet)
		fprintf(stderr, "kvpool-bench: workload done; waiting for the pool to shrink back to idle (%u blocks backed)\n",
			res.idle_before);
	while (ctl_now_ns() < t_drain_end && !interrupted) {
		add_sample(&d);
		progress(&d, false);
		if (res.nsamples && res.samples[res.nsamples - 1].backed <= res.idle_before &&
		    res.samples[res.nsamples - 1].used == 0) {
			res.drained = true;
			res.t_idle_again = res.samples[res.nsamples - 1].t;
			break;
		}
		sleep_ms(cfg.tick_ms);
	}
	/* one last sample for the end figures (idle for a moment on the chart) */
	if (res.drained && !interrupted)
		sleep_ms(500);
	add_sample(&d);
	progress(&d, true);
	if (res.nsamples) {
		res.idle_after = res.samples[res.nsamples - 1].backed;
		if (res.idle_after <= res.idle_before &&
		    res.samples[res.nsamples - 1].used == 0 && !res.drained) {
			res.drained = true;
			res.t_idle_again = res.samples[res.nsamples - 1].t;
		}
	}

	bench_report_text(&res);
	snprintf(path, sizeof(path), "%s/samples.csv", cfg.out_dir);
	if (bench_write_csv(&res, path))
		rc = 1;
	snprintf(path, sizeof(path), "%s/blocks.svg", cfg.out_dir);
	if (bench_write_svg(&res, path))
		rc = 1;
	snprintf(path, sizeof(path), "%s/summary.json", cfg.out_dir);
	if (bench_write_json(&res, path))
		rc = 1;
	if (cfg.json_stdout) {
		FILE *f = fopen(path, "re");
		int c;

		while (f && (c = fgetc(f)) != EOF)
			putchar(c);
		if (f)
			fclose(f);
	}
	printf("\nwrote %s/samples.csv, %s/blocks.svg, %s/summary.json\n",
	       cfg.out_dir, cfg.out_dir, cfg.out_dir);
	if (bench_check(&res, true))
		rc = rc ? rc : 1;
	else
		printf("invariants: OK (every tenant made progress, none went above its max, backed returned to idle)\n");
	if (interrupted)
		rc = 130;

out_daemon:
	if (d.adm) {
		/* leave the daemon as we found it */
		if (!res.started_daemon)
			for (i = 0; i < cfg.ntenants; i++)
				kvl_admin_tenant_del(d.adm, res.pool.name,
						     cfg.tenants[i].name);
		kvl_admin_close(d.adm);
	}
	stop_daemon();
	return rc;
}
