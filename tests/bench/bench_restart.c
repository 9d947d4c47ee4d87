// SPDX-License-Identifier: MIT
/*
 * bench_restart.c - kvpool-bench-restart: what a kill -9 of kvpoold costs
 * its tenants, with the pool memory kept (the default) and without it
 * (--no-keep: the contents dropped, every tenant recomputes), in the same
 * run, rounds interleaved.
 *
 * Per round and mode: a private kvpoold (cpu backend, a dram tier), four
 * e2e-tenant processes decoding (bf16, fp8, int8, int4; each checks every
 * output against the reference computed in the tenant, which is the
 * uninterrupted run), a kill -9 of the daemon once every tenant is past a
 * quarter of its steps, the daemon started again (by this program, or by
 * the keeper in front of it: --keeper), then:
 *   serve_ms   kill to the first request the new daemon answers;
 *   resume_ms  kill to every tenant's next decoded step (the slowest);
 *   recomputed tokens written again by the tenants (their replays);
 *   outputs    every tenant finished with every output correct.
 * The last stdout line is one JSON object.  Exit 1 when a round fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvlease.h"

#define NT	4

static const char *daemon_path, *tenant_path, *keeper_path, *ledger = "inproc";
static unsigned int rounds = 3, tokens = 320, delay_ms = 40;

static const char *const layouts[NT][2] = {
	{ "bf16", "--layers 4 --kv-heads 2 --head-dim 64 --q-heads 8" },
	{ "fp8", "--layers 3 --kv-heads 1 --head-dim 128 --q-heads 8" },
	{ "int8", "--layers 2 --kv-heads 4 --head-dim 32 --q-heads 4" },
	{ "int4", "--layers 2 --kv-heads 2 --head-dim 64 --q-heads 8" },
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

struct run {
	char dir[64], sock[96];
	pid_t daemon;			/* or the keeper */
	pid_t tenant[NT];
	int progress[NT];		/* read ends */
	unsigned int steps[NT];		/* last step seen */
	uint64_t resumed_ns[NT];	/* first step after the kill */
	FILE *out[NT];
};

struct result {
	double serve_ms, resume_ms;
	unsigned long long recomputed;
	unsigned int restarts;
	int outputs_ok;
};

static int split(char *s, char **argv, int max)
{
	int n = 0;

	for (s = strtok(s, " "); s && n < max - 1; s = strtok(NULL, " "))
		argv[n++] = s;
	argv[n] = NULL;
	return n;
}

static pid_t start_daemon(struct run *r, int keep, int under_keeper)
{
	char args[1024], *argv[64];
	int n = 0, fd;
	pid_t p;

	snprintf(args, sizeof(args),
		 "%s%s%s --foreground --socket %s --ledger %s --backend cpu "
		 "--pool bench --block-bytes 65536 --capacity 1024 "
		 "--chunk-blocks 32 --tier dram:512 --kernel-threads 1 -q%s",
		 under_keeper ? keeper_path : "", under_keeper ? " -- " : "",
		 daemon_path, r->sock, ledger, keep ? "" : " --no-keep");
	n = split(args, argv, 64);
	if (!n)
		return -1;
	p = fork();
	if (p)
		return p;
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
	}
	execv(argv[0], argv);
	_exit(127);
}

/* Until the daemon answers a request on its socket (with the module the
 * admin calls that netlink answers succeed without it): 0, or
 * -ETIMEDOUT. */
static int wait_served(struct run *r, uint64_t *at, uint64_t timeout_ns)
{
	uint64_t end = now_ns() + timeout_ns;
	struct kvl_restart_info ri;
	struct kvl_admin *adm;

	while (now_ns() < end) {
		if (!kvl_admin_open(r->sock, &adm)) {
			int e = kvl_admin_restart_info(adm, &ri);

			kvl_admin_close(adm);
			if (!e) {
				*at = now_ns();
				return 0;
			}
		}
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* The keeper's child: the kvpoold serving r->sock. */
static pid_t daemon_of_keeper(const struct run *r)
{
	char path[64], buf[4096];
	unsigned int pid;
	pid_t found = -1;

	for (pid = 2; pid < 4194304 && found < 0; pid++) {
		ssize_t n, i;
		int fd;

		snprintf(path, sizeof(path), "/proc/%u/cmdline", pid);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0 || (pid_t)pid == r->daemon)
			continue;
		for (i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n] = 0;
		if (!strncmp(buf, daemon_path, strlen(daemon_path)) &&
		    strstr(buf, r->sock))
			found = (pid_t)pid;
	}
	return found;
}

static int start_tenant(struct run *r, unsigned int i)
{
	char args[1024], *argv[64], fdarg[16];
	int pfd[2], ofd;
	pid_t p;

	if (pipe(pfd))
		return -errno;
	snprintf(fdarg, sizeof(fdarg), "%d", pfd[1]);
	snprintf(args, sizeof(args),
		 "%s --socket %s --seed %u --dtype %s %s --seqs 3 --tokens %u "
		 "--step 16 --delay-ms %u --no-fork --progress-fd %s",
		 tenant_path, r->sock, i + 1, layouts[i][0], layouts[i][1],
		 tokens, delay_ms, fdarg);
	split(args, argv, 64);
	snprintf(args + 900, 100, "%s/t%u.out", r->dir, i);
	ofd = open(args + 900, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (ofd < 0)
		return -errno;
	p = fork();
	if (!p) {
		close(pfd[0]);
		dup2(ofd, 1);
		dup2(ofd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	close(ofd);
	if (p < 0)
		return -errno;
	r->tenant[i] = p;
	r->progress[i] = pfd[0];
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	return 0;
}

/* Read progress lines; note the first one after @kill_ns. */
static void drain(struct run *r, uint64_t kill_ns)
{
	char buf[256];
	unsigned int i;

	for (i = 0; i < NT; i++) {
		ssize_t n;

		while ((n = read(r->progress[i], buf, sizeof(buf) - 1)) > 0) {
			char *nl, *s = buf;

			buf[n] = 0;
			while ((nl = strchr(s, '\n'))) {
				*nl = 0;
				r->steps[i] = (unsigned int)atoi(s);
				if (kill_ns && !r->resumed_ns[i])
					r->resumed_ns[i] = now_ns();
				s = nl + 1;
			}
		}
	}
}

static void parse_out(struct run *r, unsigned int i, struct result *res)
{
	char path[160], line[512];
	FILE *f;
	unsigned int rs;
	unsigned long long rc;

	snprintf(path, sizeof(path), "%s/t%u.out", r->dir, i);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "restarts ");

		if (p && sscanf(p, "restarts %u, recomputed %llu,", &rs,
				&rc) == 2) {
			res->restarts += rs;
			res->recomputed += rc;
		}
	}
	fclose(f);
}

static int one(int keep, struct result *res)
{
	struct run r;
	uint64_t t0, kill_ns, served = 0, end;
	unsigned int i, want = tokens / 16 / 4, ok = 0;
	int under = keeper_path != NULL, status, e = 0;

	memset(&r, 0, sizeof(r));
	memset(res, 0, sizeof(*res));
	snprintf(r.dir, sizeof(r.dir), "/tmp/kvpool-bench-restart.XXXXXX");
	if (!mkdtemp(r.dir))
		return -errno;
	snprintf(r.sock, sizeof(r.sock), "%s/kvpool.sock", r.dir);
	r.daemon = start_daemon(&r, keep, under);
	if (r.daemon < 0 || wait_served(&r, &t0, 10000000000ULL)) {
		fprintf(stderr, "bench-restart: kvpoold did not start\n");
		e = -EIO;
		goto out;
	}
	for (i = 0; i < NT; i++)
		if (start_tenant(&r, i)) {
			e = -EIO;
			goto out;
		}
	/* every tenant past a quarter of its steps */
	end = now_ns() + 120000000000ULL;
	for (;;) {
		unsigned int past = 0;

		drain(&r, 0);
		for (i = 0; i < NT; i++) {
			past += r.steps[i] >= want;
			if (waitpid(r.tenant[i], &status, WNOHANG) ==
			    r.tenant[i]) {
				r.tenant[i] = 0;
				fprintf(stderr, "bench-restart: tenant %u exited "
					"before the kill (status %d): %s/t%u.out\n",
					i, status, r.dir, i);
				e = -EIO;
				goto out;
			}
		}
		if (past == NT)
			break;
		if (now_ns() > end) {
			fprintf(stderr, "bench-restart: tenants too slow\n");
			e = -ETIMEDOUT;
			goto out;
		}
		usleep(2000);
	}
	kill_ns = now_ns();
	if (under) {
		/* the keeper restarts the daemon it runs */
		pid_t dp = daemon_of_keeper(&r);

		if (dp < 0) {
			fprintf(stderr, "bench-restart: no kvpoold under the "
				"keeper\n");
			e = -EIO;
			goto out;
		}
		kill(dp, SIGKILL);
	} else {
		kill(r.daemon, SIGKILL);
		waitpid(r.daemon, NULL, 0);
		r.daemon = start_daemon(&r, keep, 0);
	}
	if (wait_served(&r, &served, 30000000000ULL)) {
		fprintf(stderr, "bench-restart: the restarted kvpoold did not "
			"answer\n");
		e = -EIO;
		goto out;
	}
	res->serve_ms = (served - kill_ns) / 1e6;
	/* every tenant's next step, then their end */
	end = now_ns() + 300000000000ULL;
	for (;;) {
		unsigned int live = 0;

		drain(&r, kill_ns);
		for (i = 0; i < NT; i++) {
			if (r.tenant[i] && waitpid(r.tenant[i], &status,
						   WNOHANG) == r.tenant[i]) {
				drain(&r, kill_ns);
				if (WIFEXITED(status) && !WEXITSTATUS(status))
					ok++;
				r.tenant[i] = 0;
			}
			live += r.tenant[i] != 0;
		}
		if (!live)
			break;
		if (now_ns() > end) {
			e = -ETIMEDOUT;
			goto out;
		}
		usleep(2000);
	}
	for (i = 0; i < NT; i++) {
		double ms = r.resumed_ns[i] ?
			    (r.resumed_ns[i] - kill_ns) / 1e6 : -1;

		if (ms > res->resume_ms)
			res->resume_ms = ms;
		parse_out(&r, i, res);
	}
	res->outputs_ok = ok == NT;
out:
	for (i = 0; i < NT; i++) {
		if (r.tenant[i]) {
			kill(r.tenant[i], SIGKILL);
			waitpid(r.tenant[i], NULL, 0);
		}
		if (r.progress[i] > 0)
			close(r.progress[i]);
	}
	if (r.daemon > 0) {
		kill(r.daemon, SIGTERM);
		waitpid(r.daemon, NULL, 0);
	}
	if (!e && res->outputs_ok) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", r.dir);
		if (system(cmd)) {
			/* left behind */
		}
	} else {
		fprintf(stderr, "bench-restart: round failed; its files: %s\n",
			r.dir);
	}
	return e;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "daemon", 1, NULL, 'd' }, { "tenant", 1, NULL, 't' },
		{ "keeper", 1, NULL, 'k' }, { "ledger", 1, NULL, 'l' },
		{ "rounds", 1, NULL, 'r' }, { "tokens", 1, NULL, 'n' },
		{ "delay-ms", 1, NULL, 'D' }, { NULL, 0, NULL, 0 },
	};
	struct result res[2][16];
	double sv[2][16], rv[2][16], ratio[16] = { 0 };
	unsigned long long rec[2] = { 0, 0 };
	unsigned int k, m;
	int ch, fails = 0, all_ok = 1;

	while ((ch = getopt_long(argc, argv, "d:t:k:l:r:n:D:", lo, NULL)) !=
	       -1) {
		switch (ch) {
		case 'd': daemon_path = optarg; break;
		case 't': tenant_path = optarg; break;
		case 'k': keeper_path = optarg; break;
		case 'l': ledger = optarg; break;
		case 'r': rounds = (unsigned int)atoi(optarg); break;
		case 'n': tokens = (unsigned int)atoi(optarg); break;
		case 'D': delay_ms = (unsigned int)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: kvpool-bench-restart --daemon "
				"KVPOOLD --tenant E2E-TENANT [--keeper KEEPER] "
				"[--ledger inproc|module] [--rounds N] "
				"[--tokens N] [--delay-ms N]\n");
			return 2;
		}
	}
	if (!daemon_path || !tenant_path || !rounds || rounds > 16 ||
	    tokens < 128) {
		fprintf(stderr, "bench-restart: --daemon and --tenant needed, "
			"1 to 16 rounds, 128 tokens or more\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	printf("bench-restart: %u rounds, kept and dropped alternating, %d "
	       "tenants x 3 sequences x %u tokens, kill -9 of kvpoold (%s "
	       "ledger%s) past a quarter of the run\n", rounds, NT, tokens,
	       ledger, keeper_path ? ", under its keeper" : "");
	for (k = 0; k < rounds; k++)
		for (m = 0; m < 2; m++) {
			/* kept first in even rounds, dropped first in odd */
			unsigned int mode = (k + m) % 2;	/* 0 kept */
			struct result *x = &res[mode][k];
			int e = one(mode == 0, x);

			if (e || !x->outputs_ok) {
				fails++;
				all_ok = 0;
			}
			printf("round %u %-7s serve %8.1f ms, resume %8.1f ms, "
			       "restarts seen %u, recomputed %llu tokens, "
			       "outputs %s%s%s\n", k + 1,
			       mode ? "dropped" : "kept", x->serve_ms,
			       x->resume_ms, x->restarts, x->recomputed,
			       x->outputs_ok ? "correct" : "WRONG",
			       e ? ": " : "", e ? strerror(-e) : "");
			fflush(stdout);
			sv[mode][k] = x->serve_ms;
			rv[mode][k] = x->resume_ms;
			rec[mode] += x->recomputed;
		}
	for (k = 0; k < rounds; k++)
		ratio[k] = rv[0][k] > 0 ? rv[1][k] / rv[0][k] : 0;
	{
		double r0[16], r1[16], rr[16];
		double mk, md, mr, lo0 = 1e18, hi0 = 0, lo1 = 1e18, hi1 = 0;
		double lor = 1e18, hir = 0;

		memcpy(r0, rv[0], sizeof(r0));
		memcpy(r1, rv[1], sizeof(r1));
		memcpy(rr, ratio, sizeof(rr));
		for (k = 0; k < rounds; k++) {
			lo0 = rv[0][k] < lo0 ? rv[0][k] : lo0;
			hi0 = rv[0][k] > hi0 ? rv[0][k] : hi0;
			lo1 = rv[1][k] < lo1 ? rv[1][k] : lo1;
			hi1 = rv[1][k] > hi1 ? rv[1][k] : hi1;
			lor = ratio[k] < lor ? ratio[k] : lor;
			hir = ratio[k] > hir ? ratio[k] : hir;
		}
		mk = median(r0, rounds);
		md = median(r1, rounds);
		mr = median(rr, rounds);
		printf("resume after kill -9: kept %.1f ms [%.1f-%.1f], dropped "
		       "%.1f ms [%.1f-%.1f]; dropped/kept %.2fx [%.2f-%.2f] "
		       "(medians of %u rounds, [min-max])\n", mk, lo0, hi0, md,
		       lo1, hi1, mr, lor, hir, rounds);
		printf("tokens recomputed: kept %llu, dropped %llu (all "
		       "rounds)\n", rec[0], rec[1]);
		printf("{\"rounds\": %u, \"ledger\": \"%s\", "
		       "\"resume_ms_preserved\": %.1f, \"resume_ms_dropped\": "
		       "%.1f, \"resume_ratio\": %.2f, \"serve_ms_preserved\": "
		       "%.1f, \"serve_ms_dropped\": %.1f, "
		       "\"recomputed_tokens_preserved\": %llu, "
		       "\"recomputed_tokens_dropped\": %llu, "
		       "\"outputs_equal\": %s}\n", rounds, ledger, mk, md, mr,
		       median(sv[0], rounds), median(sv[1], rounds), rec[0],
		       rec[1], all_ok ? "true" : "false");
	}
	return fails ? 1 : 0;
}
