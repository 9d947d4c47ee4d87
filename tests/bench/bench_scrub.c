// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-scrub - what zeroing freed blocks between tenants costs.
 *
 * Starts its own kvpoold (in-process ledger, cpu backend, a dram tier and
 * an nvme tier in a file under the temporary directory, private socket,
 * tenants "a" and "b").  A block is zeroed the first time a tenant other
 * than the one that used it last names it; so each figure below is the
 * same op timed twice per round, on blocks that another process of the
 * same tenant used last ("same": nothing zeroed) and on blocks that the
 * other tenant used last ("other": every block zeroed first), with the
 * two orders alternating from round to round:
 *
 *   top     READ_KV of one token in each of N blocks of the top pool;
 *   dram    a swap of N blocks from the dram tier up to the top pool;
 *   nvme    the same from the nvme tier (zeroing: fallocate, no I/O on
 *           filesystems that can);
 *   grant   lease 16 blocks + READ_KV of one token in each + release,
 *           ns per block, by one tenant ("same") or by the two in turn
 *           ("other": every grant is another tenant's blocks), the
 *           kvpool-bench-lease loop with a first use added.
 *
 * And memset() of N blocks in this process, in every round, the baseline
 * that zeroing is compared with.  Printed per op: the median over the
 * rounds (and min..max) of "same" and "other" and the extra time per
 * block; per pool, the bytes the daemon zeroed per second (its own count
 * of blocks zeroed and time spent, logged at exit) against memset's.  On
 * the nvme tier "other" can be the faster one: zeroed blocks are
 * unwritten extents, read without I/O.  The last line is one JSON object.
 *
 * Options: -d KVPOOLD (build/bin/kvpoold), -n BLOCKS per op (512), -r
 * ROUNDS (7), -g grant iterations per round (400).  Exit 0, 1 on error.
 */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvlease.h"

#define BLOCK_BYTES	65536
#define MAX_N		2048
#define MAX_ROUNDS	31
#define LAYERS		2
#define KV_HEADS	2
#define HEAD_DIM	64
#define ROW		(KV_HEADS * HEAD_DIM)

static const char *sock_path;
static uint32_t n_blocks = 512, rounds = 7, grant_iters = 400;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#define TRY(expr, what) do { int r_ = (expr); if (r_ < 0) { \
	fprintf(stderr, "kvpool-bench-scrub: %s: %s\n", what, \
		strerror(-r_)); exit(1); } } while (0)

struct client {
	struct kvl_ctx *ctx;
	int layout;
};

static void client_open(struct client *c, const char *tenant)
{
	struct kvl_opts o;
	struct kvl_layout l;

	memset(&o, 0, sizeof(o));
	o.socket_path = sock_path;
	o.tenant = tenant;
	o.region_bytes = 16 << 20;
	o.timeout_ns = 10000000000ULL;
	TRY(kvl_open(&o, &c->ctx), "kvl_open");
	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KV_HEADS;
	l.head_dim = HEAD_DIM;
	l.dtype = KVL_DTYPE_BF16;
	c->layout = kvl_layout_declare(c->ctx, &l);
	TRY(c->layout, "declare layout");
	TRY(kvl_tier_join(c->ctx, 1), "join dram");
	TRY(kvl_tier_join(c->ctx, 2), "join nvme");
}

static uint32_t zeros_slots[MAX_N];
static float kbuf[MAX_N * ROW], vbuf[MAX_N * ROW];

static void lease(struct client *c, uint32_t tier, uint32_t n, uint32_t *b)
{
	int r = kvl_tier_lease(c->ctx, tier, n, 0, 0, b);

	if (r != (int)n) {
		fprintf(stderr, "kvpool-bench-scrub: lease %u in tier %u: %d\n",
			n, tier, r);
		exit(1);
	}
}

static void release(struct client *c, uint32_t tier, const uint32_t *b,
		    uint32_t n)
{
	TRY(kvl_tier_release(c->ctx, tier, b, n), "release");
}

/* One token in each block: a write (the block is now c's) or a read. */
static void touch(struct client *c, const uint32_t *b, uint32_t n, bool wr)
{
	if (wr)
		TRY(kvl_write_kv(c->ctx, c->layout, 0, n, b, zeros_slots, kbuf,
				 vbuf), "write_kv");
	else
		TRY(kvl_read_kv(c->ctx, c->layout, 0, n, b, zeros_slots, kbuf,
				vbuf), "read_kv");
}

static void swap(struct client *c, uint32_t from, const uint32_t *src,
		 uint32_t to, const uint32_t *dst, uint32_t n)
{
	uint64_t ticket;

	TRY(kvl_swap(c->ctx, from, src, to, dst, n, &ticket), "swap");
	TRY(kvl_swap_wait(c->ctx, ticket, 0), "swap wait");
}

static void same_blocks(const uint32_t *a, const uint32_t *b, uint32_t n)
{
	if (memcmp(a, b, n * sizeof(*a))) {
		fprintf(stderr, "kvpool-bench-scrub: the second lease did not "
			"get the first one's blocks\n");
		exit(1);
	}
}

/* w leaves N blocks of tier used by it; then r's op on the same blocks,
 * timed (ns). */
static double first_use(struct client *w, struct client *r, uint32_t tier)
{
	uint32_t top[MAX_N], low[MAX_N], top2[MAX_N], low2[MAX_N];
	uint32_t n = n_blocks;
	double t0, t;

	lease(w, 0, n, top);
	touch(w, top, n, true);
	if (tier) {
		lease(w, tier, n, low);
		swap(w, 0, top, tier, low, n);
		release(w, tier, low, n);
	}
	release(w, 0, top, n);
	if (!tier) {
		lease(r, 0, n, top2);
		same_blocks(top, top2, n);
		t0 = now_ns();
		touch(r, top2, n, false);
		t = now_ns() - t0;
		release(r, 0, top2, n);
		return t;
	}
	lease(r, tier, n, low2);
	same_blocks(low, low2, n);
	lease(r, 0, n, top2);
	t0 = now_ns();
	swap(r, tier, low2, 0, top2, n);
	t = now_ns() - t0;
	release(r, 0, top2, n);
	release(r, tier, low2, n);
	return t;
}

/* lease 16 + first use + release, by c[0] only or by c[0] and c[1] in
 * turn: ns per block. */
static double grants(struct client *c0, struct client *c1)
{
	uint32_t b[16], i;
	double t0 = now_ns();

	for (i = 0; i < grant_iters; i++) {
		struct client *c = (i & 1) ? c1 : c0;

		lease(c, 0, 16, b);
		touch(c, b, 16, false);
		release(c, 0, b, 16);
	}
	return (now_ns() - t0) / (grant_iters * 16.0);
}

static double memset_ns(uint8_t *buf, size_t bytes)
{
	double t0 = now_ns();

	memset(buf, (int)(t0) | 1, bytes);
	__asm__ __volatile__("" : : "r"(buf) : "memory");
	return now_ns() - t0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct stat3 {
	double med, lo, hi;
};

static struct stat3 stats(const double *v, uint32_t n)
{
	double s[MAX_ROUNDS];
	struct stat3 r;

	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_d);
	r.med = s[n / 2];
	r.lo = s[0];
	r.hi = s[n - 1];
	return r;
}

/* The daemon's count for pool @name, from its exit log: bytes/ns. */
static double daemon_zero_gbps(const char *dir, const char *name,
			       unsigned long long *blocks)
{
	char path[4200], line[512], pat[64];
	double mib, ms, gbps = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/kvpoold.log", dir);
	snprintf(pat, sizeof(pat), " %s: zeroed ", name);
	*blocks = 0;
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, pat);

		if (p && sscanf(p + strlen(pat), "%llu blocks (%lf MiB) before "
				"another tenant used them, in %lf ms", blocks,
				&mib, &ms) == 3 && ms > 0)
			gbps = mib * (1 << 20) / (ms * 1e6);
	}
	fclose(f);
	return gbps;
}

static pid_t start_daemon(const char *kvpoold, const char *dir)
{
	char log[4096], nvme[4200];
	pid_t pid;
	int i;

	snprintf(log, sizeof(log), "%s/kvpoold.log", dir);
	snprintf(nvme, sizeof(nvme), "nvme:%s/nvme.swap:%uM", dir,
		 (unsigned)((uint64_t)n_blocks * BLOCK_BYTES * 2 >> 20) + 1);
	pid = fork();
	if (!pid) {
		char cap[32], dram[48];
		FILE *f = freopen(log, "w", stderr);

		(void)f;
		snprintf(cap, sizeof(cap), "%u", n_blocks * 2 + 64);
		snprintf(dram, sizeof(dram), "dram:%u", n_blocks * 2);
		execl(kvpoold, kvpoold, "--foreground", "--config", "",
		      "--socket", sock_path, "--ledger", "inproc", "--backend",
		      "cpu", "--block-bytes", "65536", "--capacity", cap,
		      "--chunk-blocks", "64", "--shrink-delay-ms", "600000",
		      "--tier", dram, "--tier", nvme, "--tenant", "a",
		      "--tenant", "b", (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 200; i++) {
		struct kvl_admin *adm;

		if (!kvl_admin_open(sock_path, &adm)) {
			kvl_admin_close(adm);
			return pid;
		}
		usleep(50000);
	}
	kill(pid, SIGKILL);
	return -1;
}

int main(int argc, char **argv)
{
	static const char *const names[] = { "top", "dram", "nvme" };
	static const char *const pools[] = { "host", "dram", "nvme" };
	unsigned long long zeroed[3];
	double zgbps[3];
	const char *kvpoold = "build/bin/kvpoold";
	double same[4][MAX_ROUNDS], other[4][MAX_ROUNDS], ms[MAX_ROUNDS];
	struct stat3 s[4], o[4], m;
	struct client a1, a2, b;
	char dir[] = "/tmp/kvpool-bench-scrub.XXXXXX", sp[4096];
	double bytes, memset_gbps;
	uint8_t *buf;
	uint32_t k, i;
	int opt;
	pid_t d;

	while ((opt = getopt(argc, argv, "d:n:r:g:h")) != -1) {
		switch (opt) {
		case 'd':
			kvpoold = optarg;
			break;
		case 'n':
			n_blocks = (uint32_t)atoi(optarg);
			break;
		case 'r':
			rounds = (uint32_t)atoi(optarg);
			break;
		case 'g':
			grant_iters = (uint32_t)atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: kvpool-bench-scrub [-d KVPOOLD] "
				"[-n BLOCKS (512)] [-r ROUNDS (7)] "
				"[-g GRANTS (400)]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (n_blocks < 16 || n_blocks > MAX_N || rounds < 1 ||
	    rounds > MAX_ROUNDS || grant_iters < 2) {
		fprintf(stderr, "kvpool-bench-scrub: -n 16..%d, -r 1..%d, "
			"-g 2 or more\n", MAX_N, MAX_ROUNDS);
		return 2;
	}
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(sp, sizeof(sp), "%s/kvpool.sock", dir);
	sock_path = sp;
	d = start_daemon(kvpoold, dir);
	if (d < 0) {
		fprintf(stderr, "kvpool-bench-scrub: %s did not start (log in "
			"%s)\n", kvpoold, dir);
		return 1;
	}
	bytes = (double)n_blocks * BLOCK_BYTES;
	buf = malloc((size_t)bytes);
	if (!buf)
		return 1;
	memset(buf, 0, (size_t)bytes);		/* faulted in */
	client_open(&a1, "a");
	client_open(&a2, "a");
	client_open(&b, "b");
	printf("kvpool-bench-scrub: %u blocks of %u KiB per op (%.0f MiB), "
	       "%u rounds, cpu backend, dram and nvme tiers (%s)\n", n_blocks,
	       BLOCK_BYTES >> 10, bytes / (1 << 20), rounds, dir);
	/* warm-up: every block mapped and used once */
	for (k = 0; k < 3; k++)
		first_use(&a1, &b, k);
	for (i = 0; i < rounds; i++) {
		for (k = 0; k < 3; k++) {
			if (i & 1) {
				other[k][i] = first_use(&a1, &b, k);
				same[k][i] = first_use(&a1, &a2, k);
			} else {
				same[k][i] = first_use(&a1, &a2, k);
				other[k][i] = first_use(&a1, &b, k);
			}
		}
		ms[i] = memset_ns(buf, (size_t)bytes);
	}
	kvl_close(a1.ctx);
	kvl_close(a2.ctx);
	kvl_close(b.ctx);
	kill(d, SIGTERM);
	waitpid(d, NULL, 0);
	for (k = 0; k < 3; k++)
		zgbps[k] = daemon_zero_gbps(dir, pools[k], &zeroed[k]);
	/* the grant loop on a daemon of its own: its small zeroings are not
	 * in the counts above */
	d = start_daemon(kvpoold, dir);
	if (d < 0) {
		fprintf(stderr, "kvpool-bench-scrub: %s did not start again "
			"(log in %s)\n", kvpoold, dir);
		return 1;
	}
	client_open(&a1, "a");
	client_open(&a2, "a");
	client_open(&b, "b");
	grants(&a1, &b);
	for (i = 0; i < rounds; i++) {
		if (i & 1) {
			other[3][i] = grants(&a1, &b);
			same[3][i] = grants(&a1, &a2);
		} else {
			same[3][i] = grants(&a1, &a2);
			other[3][i] = grants(&a1, &b);
		}
	}
	kvl_close(a1.ctx);
	kvl_close(a2.ctx);
	kvl_close(b.ctx);
	kill(d, SIGTERM);
	waitpid(d, NULL, 0);
	m = stats(ms, rounds);
	memset_gbps = bytes / m.med;
	printf("memset of %.0f MiB in this process: %.2f ms (%.2f..%.2f), "
	       "%.2f GB/s\n", bytes / (1 << 20), m.med / 1e6, m.lo / 1e6,
	       m.hi / 1e6, memset_gbps);
	printf("%-6s %24s %24s %13s %10s %10s %9s\n", "op", "same tenant ms",
	       "other tenant ms", "extra ns/blk", "zeroed", "zero GB/s",
	       "/memset");
	for (k = 0; k < 3; k++) {
		s[k] = stats(same[k], rounds);
		o[k] = stats(other[k], rounds);
		printf("%-6s %8.2f (%6.2f..%6.2f) %8.2f (%6.2f..%6.2f) %13.0f "
		       "%10llu %10.2f %9.2f\n", names[k], s[k].med / 1e6,
		       s[k].lo / 1e6, s[k].hi / 1e6, o[k].med / 1e6,
		       o[k].lo / 1e6, o[k].hi / 1e6,
		       (o[k].med - s[k].med) / n_blocks, zeroed[k], zgbps[k],
		       zgbps[k] / memset_gbps);
	}
	s[3] = stats(same[3], rounds);
	o[3] = stats(other[3], rounds);
	printf("grant  lease 16 + first use + release: %.0f ns/blk (%.0f..%.0f) "
	       "by one tenant, %.0f ns/blk (%.0f..%.0f) by two in turn: "
	       "+%.0f ns per block granted to another tenant\n", s[3].med,
	       s[3].lo, s[3].hi, o[3].med, o[3].lo, o[3].hi,
	       o[3].med - s[3].med);
	printf("zeroing on release instead would add a memset of the block to "
	       "every release, the same tenant's too: %.0f ns per block\n",
	       m.med / n_blocks);
	printf("{\"blocks\": %u, \"block_bytes\": %u, \"rounds\": %u, "
	       "\"memset_gbps\": %.3f", n_blocks, BLOCK_BYTES, rounds,
	       memset_gbps);
	for (k = 0; k < 3; k++) {
		double extra = o[k].med - s[k].med;

		printf(", \"%s_same_ms\": %.3f, \"%s_other_ms\": %.3f, "
		       "\"%s_extra_ns_per_block\": %.0f, \"%s_zero_gbps\": %.3f",
		       names[k], s[k].med / 1e6, names[k], o[k].med / 1e6,
		       names[k], extra / n_blocks, names[k], zgbps[k]);
	}
	printf(", \"grant_same_ns_per_block\": %.0f, "
	       "\"grant_other_ns_per_block\": %.0f, "
	       "\"memset_ns_per_block\": %.0f}\n", s[3].med, o[3].med,
	       m.med / n_blocks);
	free(buf);
	snprintf(sp, sizeof(sp), "%s/kvpoold.log", dir);
	unlink(sp);
	snprintf(sp, sizeof(sp), "%s/kvpool.sock", dir);
	unlink(sp);
	rmdir(dir);
	return 0;
}
