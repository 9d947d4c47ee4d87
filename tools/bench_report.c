// SPDX-License-Identifier: MIT
/*
 * bench_report.c - kvpool-bench's report: per-tenant table, backed memory
 * over time (text chart), samples.csv, blocks.svg, summary.json and the
 * invariants the CI test checks.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/kvpool.h>

#include "bench.h"
#include "ctl_util.h"

#define LAT_BASE_NS	1000.0
#define LAT_FACTOR	1.04

uint32_t bench_lat_bucket(uint64_t ns)
{
	double b;

	if ((double)ns <= LAT_BASE_NS)
		return 0;
	b = log((double)ns / LAT_BASE_NS) / log(LAT_FACTOR);
	if (b >= BENCH_LAT_BUCKETS - 1)
		return BENCH_LAT_BUCKETS - 1;
	return (uint32_t)b;
}

/* Upper edge of a bucket, in microseconds. */
static double bucket_us(uint32_t b)
{
	return LAT_BASE_NS * pow(LAT_FACTOR, (double)b + 1.0) / 1000.0;
}

double bench_lat_percentile(const struct bench_wstats *const *ws, int n,
			    double p)
{
	uint64_t total = 0, acc = 0, want;
	uint32_t b;
	int i;

	for (i = 0; i < n; i++)
		for (b = 0; b < BENCH_LAT_BUCKETS; b++)
			total += ws[i]->lat[b];
	if (!total)
		return 0.0;
	want = (uint64_t)ceil(p * (double)total);
	if (!want)
		want = 1;
	for (b = 0; b < BENCH_LAT_BUCKETS; b++) {
		for (i = 0; i < n; i++)
			acc += ws[i]->lat[b];
		if (acc >= want)
			return bucket_us(b);
	}
	return bucket_us(BENCH_LAT_BUCKETS - 1);
}

struct tagg {
	uint64_t tokens, prefill, steps, requests;
	uint64_t quota, stalls, reclaims, preempts;
	uint64_t swaps_out, swaps_in, hit_tokens, miss_tokens;
	uint64_t restarts, restart_lost, restart_tokens;
	uint32_t procs, failed, killed;
	uint32_t sampled_peak;
	double window_s, tok_s, p50_us, p99_us;
	const char *err;
};

static void aggregate(const struct bench_result *r, uint32_t t,
		      struct tagg *a)
{
	const struct bench_cfg *c = r->cfg;
	const struct bench_tenant *bt = &c->tenants[t];
	const struct bench_wstats *ws[BENCH_MAX_WORKERS];
	uint32_t w, s;
	int n = 0;

	memset(a, 0, sizeof(*a));
	for (w = 0; w < r->nworkers; w++) {
		const struct bench_wstats *x = &r->ws[w];

		if (x->tenant != t)
			continue;
		ws[n++] = x;
		a->procs++;
		a->tokens += x->gen_tokens;
		a->prefill += x->prefill_tokens;
		a->steps += x->steps;
		a->requests += x->requests;
		a->quota += x->quota_hits;
		a->stalls += x->stalls;
		a->reclaims += x->reclaims;
		a->preempts += x->preempts;
		a->swaps_out += x->swaps_out;
		a->swaps_in += x->swaps_in;
		a->hit_tokens += x->prefix_hit_tokens;
		a->miss_tokens += x->prefix_miss_tokens;
		a->restarts += x->restarts;
		a->restart_lost += x->restart_lost;
		a->restart_tokens += x->restart_tokens;
		if (x->state == 3) {
			a->failed++;
			a->err = x->errmsg;
		}
		if (x->state == 4)
			a->killed++;
	}
	for (s = 0; s < r->nsamples; s++)
		if (r->samples[s].current[t] > a->sampled_peak)
			a->sampled_peak = r->samples[s].current[t];
	a->window_s = (bt->stop_frac - bt->start_frac) * r->elapsed_s;
	if (a->window_s > 0)
		a->tok_s = (double)a->tokens / a->window_s;
	a->p50_us = bench_lat_percentile(ws, n, 0.50);
	a->p99_us = bench_lat_percentile(ws, n, 0.99);
}

static const char *lim(uint32_t v, char *buf, size_t len)
{
	if (v == KVPOOL_UNLIMITED)
		return "max";
	snprintf(buf, len, "%u", v);
	return buf;
}

static void text_chart(const struct bench_result *r)
{
	enum { COLS = 64, ROWS = 10 };
	uint32_t bmax[COLS] = { 0 }, umax[COLS] = { 0 }, top = 1;
	double tmax;
	uint32_t s, c, row;

	if (r->nsamples < 2)
		return;
	tmax = r->samples[r->nsamples - 1].t;
	if (tmax <= 0)
		return;
	for (s = 0; s < r->nsamples; s++) {
		c = (uint32_t)(r->samples[s].t / tmax * (COLS - 1));
		if (c >= COLS)
			c = COLS - 1;
		if (r->samples[s].backed > bmax[c])
			bmax[c] = r->samples[s].backed;
		if (r->samples[s].used > umax[c])
			umax[c] = r->samples[s].used;
		if (r->samples[s].backed > top)
			top = r->samples[s].backed;
	}
	/* carry values over columns without samples */
	for (c = 1; c < COLS; c++)
		if (!bmax[c] && !umax[c] && (bmax[c - 1] || umax[c - 1])) {
			bmax[c] = bmax[c - 1];
			umax[c] = umax[c - 1];
		}
	printf("\nbacked (+) and used (#) blocks over time:\n");
	for (row = ROWS; row >= 1; row--) {
		double level = (double)top * ((double)row - 0.5) / ROWS;

		printf("%6u |", row == ROWS ? top :
		       (uint32_t)((double)top * row / ROWS));
		for (c = 0; c < COLS; c++)
			putchar(umax[c] >= level ? '#' :
				bmax[c] >= level ? '+' : ' ');
		putchar('\n');
	}
	printf("%6u +", 0);
	for (c = 0; c < COLS; c++)
		putchar('-');
	printf("\n        0 s%*s%.0f s\n", COLS - 6, "", tmax);
}

void bench_report_text(const struct bench_result *r)
{
	const struct bench_cfg *c = r->cfg;
	uint64_t bb = r->pool.block_bytes;
	char h1[32], h2[32], h3[32];
	uint32_t t;

	printf("\n== kvpool-bench report: %u tenants, %u processes, %.1f s of workload ==\n",
	       c->ntenants, r->nworkers, r->elapsed_s);
	printf("%-10s %-13s %5s %9s %8s %9s %9s %6s %6s %6s %6s %7s %7s %6s %6s %7s\n",
	       "TENANT", "MIX", "PROCS", "TOKENS", "TOK/S", "P50_MS",
	       "P99_MS", "MAX", "PEAK", "STALLS", "QUOTA", "RECLAIM",
	       "PREEMPT", "SWAPS", "HIT%", "STATUS");
	for (t = 0; t < c->ntenants; t++) {
		const struct kvl_tenant_info *ti = &r->ten_end[t];
		struct tagg a;
		char m[16], hit[16];

		aggregate(r, t, &a);
		if (a.hit_tokens + a.miss_tokens)
			snprintf(hit, sizeof(hit), "%.0f", 100.0 * a.hit_tokens /
				 (double)(a.hit_tokens + a.miss_tokens));
		else
			strcpy(hit, "-");
		printf("%-10s %-13s %5u %9llu %8.0f %9.3f %9.3f %6s %6u %6llu %6llu %7llu %7llu %6llu %6s %7s\n",
		       c->tenants[t].name, bench_mix_name(c->tenants[t].mix),
		       a.procs, (unsigned long long)a.tokens, a.tok_s,
		       a.p50_us / 1000.0, a.p99_us / 1000.0,
		       lim(c->tenants[t].max, m, sizeof(m)),
		       ti->peak > a.sampled_peak ? ti->peak : a.sampled_peak,
		       (unsigned long long)ti->ev_stall,
		       (unsigned long long)ti->ev_max,
		       (unsigned long long)ti->ev_reclaim,
		       (unsigned long long)a.preempts,
		       (unsigned long long)a.swaps_out, hit,
		       a.failed ? "FAILED" : a.killed ? "killed" : "ok");
		if (a.failed && a.err)
			printf("           error: %s\n", a.err);
	}
	printf("(TOKENS: decoded tokens; P50/P99: one decode step of the whole batch: append, K/V write\n"
	       " and decode attention for every layer; PEAK: the ledger's blocks.peak; STALLS, QUOTA,\n"
	       " RECLAIM: the ledger's blocks.events counters; PREEMPT: requests dropped to make room;\n"
	       " SWAPS: sequences swapped to a lower tier instead (the SWAP policy); HIT%%: system\n"
	       " prompt tokens found in the tenant's prefix cache instead of prefilled)\n");

	text_chart(r);
	printf("\npool memory: idle %u blocks (%s) -> peak %u backed (%s), %u used -> idle again %u blocks (%s)",
	       r->idle_before, ctl_human(r->idle_before * bb, h1, sizeof(h1)),
	       r->peak_backed, ctl_human(r->peak_backed * bb, h2, sizeof(h2)),
	       r->peak_used, r->idle_after,
	       ctl_human(r->idle_after * bb, h3, sizeof(h3)));
	if (r->t_idle_again >= 0 && r->drained)
		printf(", %.1f s after the workload stopped\n",
		       r->t_idle_again - r->t_work_end);
	else
		printf(": NOT back to idle after the drain wait\n");
	printf("capacity %u blocks (%s): a fixed reservation would have held all of it for the whole run\n",
	       r->pool.capacity,
	       ctl_human((uint64_t)r->pool.capacity * bb, h1, sizeof(h1)));
	if (r->killed && r->kill_pid > 0)
		printf("kill -9 of pid %d (tenant %s) at %.1f s: it held %u blocks; tenant current %u -> %u, lease gone after %.1f ms%s\n",
		       (int)r->kill_pid, c->tenants[r->kill_tenant].name,
		       r->kill_t, r->kill_held, r->kill_before, r->kill_after,
		       r->kill_return_ms,
		       r->kill_returned ? "" : " (NOT returned)");
	if (r->squeezed && !r->squeeze_err)
		printf("operator lowered %s's max %u -> %u at %.1f s while it held %u blocks: %s",
		       c->tenants[r->squeeze_tenant].name, r->squeeze_old_max,
		       c->squeeze_max, r->squeeze_t, r->squeeze_before,
		       r->squeeze_done ? "" : "it did NOT come down to it\n");
	if (r->squeezed && !r->squeeze_err && r->squeeze_done)
		printf("reclaim requests, it was within the new max after %.0f ms\n",
		       r->squeeze_ms);
	if (r->dram_blocks)
		printf("lower tier: dram, %u blocks; workers under the %s policy\n",
		       r->dram_blocks, kvl_policy_name(c->policy) ?
		       kvl_policy_name(c->policy) : "?");
	if (r->restarted) {
		uint64_t lost = 0, tok = 0, seen = 0;

		for (t = 0; t < c->ntenants; t++) {
			struct tagg a;

			aggregate(r, t, &a);
			lost += a.restart_lost;
			tok += a.restart_tokens;
			seen += a.restarts;
		}
		if (r->restart_err)
			printf("kill -9 of kvpoold at %.1f s: it did not come back (%s)\n",
			       r->restart_t, strerror(-r->restart_err));
		else
			printf("kill -9 of kvpoold at %.1f s, started again: serving after %.0f ms, %s; "
			       "%llu requests lost (%llu tokens to compute again), %llu restarts seen by the tenants\n",
			       r->restart_t, r->restart_serve_ms,
			       r->restart_epoch_kept ? "block contents kept" :
			       "block contents lost (in-process ledger: leases and contents die with the daemon)",
			       (unsigned long long)lost, (unsigned long long)tok,
			       (unsigned long long)seen);
	}
	printf("\nWhat to look at: each tenant's PEAK stays at or below its MAX (QUOTA counts the refusals\n"
	       "and PREEMPT and SWAPS what the tenant did about them: a swapped sequence is kept in the\n"
	       "DRAM tier and comes back, a preempted one is lost); the shared-prefix tenant finds its\n"
	       "system prompt in the prefix cache (HIT%%); backed memory follows the load up and goes back\n"
	       "to idle when the load stops, instead of staying reserved; after --kill the dead\n"
	       "process's blocks are back in the pool within milliseconds; after the daemon's restart\n"
	       "the tenants go on.  Chart: blocks.svg.\n");
}

int bench_write_csv(const struct bench_result *r, const char *path)
{
	const struct bench_cfg *c = r->cfg;
	uint32_t s, t;
	FILE *f;

	f = fopen(path, "we");
	if (!f) {
		fprintf(stderr, "kvpool-bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	fprintf(f, "time_s,backed_blocks,used_blocks");
	for (t = 0; t < c->ntenants; t++)
		fprintf(f, ",%s_blocks", c->tenants[t].name);
	fputc('\n', f);
	for (s = 0; s < r->nsamples; s++) {
		const struct bench_sample *x = &r->samples[s];

		fprintf(f, "%.3f,%u,%u", x->t, x->backed, x->used);
		for (t = 0; t < c->ntenants; t++)
			fprintf(f, ",%u", x->current[t]);
		fputc('\n', f);
	}
	return fclose(f) ? -errno : 0;
}

static const char *const colors[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
	"#e377c2", "#17becf",
};

int bench_write_svg(const struct bench_result *r, const char *path)
{
	const struct bench_cfg *c = r->cfg;
	const double W = 1000, H = 480, L = 70, R = 230, T = 40, B = 50;
	double pw = W - L - R, ph = H - T - B, tmax, ymax, ystep;
	uint32_t s, t, i;
	FILE *f;

	if (!r->nsamples)
		return 0;
	f = fopen(path, "we");
	if (!f) {
		fprintf(stderr, "kvpool-bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	tmax = r->samples[r->nsamples - 1].t;
	if (tmax <= 0)
		tmax = 1;
	ymax = r->peak_backed;
	for (t = 0; t < c->ntenants; t++)
		if (c->tenants[t].max != KVPOOL_UNLIMITED &&
		    c->tenants[t].max > ymax)
			ymax = c->tenants[t].max;
	ymax = ymax < 8 ? 8 : ymax * 1.1;
	/* round ticks: 1, 2 or 5 times a power of ten, about 5 of them */
	ystep = pow(10.0, floor(log10(ymax / 5.0)));
	if (ymax / ystep > 25)
		ystep *= 5;
	else if (ymax / ystep > 10)
		ystep *= 2;
	ymax = ceil(ymax / ystep) * ystep;

#define X(tv) (L + (tv) / tmax * pw)
#define Y(bv) (T + ph - (double)(bv) / ymax * ph)
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
		W, H);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">kvpool-bench: pool %s, %u blocks of %llu bytes; backed and used blocks per tenant</text>\n",
		L, r->pool.name, r->pool.capacity,
		(unsigned long long)r->pool.block_bytes);
	/* grid and axes */
	for (i = 0; i * ystep <= ymax + 1e-9; i++) {
		double yv = i * ystep;

		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
			L, Y(yv), L + pw, Y(yv));
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
			L - 6, Y(yv) + 4, yv);
	}
	for (i = 0; i <= 10; i++) {
		double tv = tmax * i / 10.0;

		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
			X(tv), T + ph + 18, tv);
	}
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time (s)</text>\n",
		L + pw / 2, H - 8);
	fprintf(f, "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">blocks</text>\n",
		T + ph / 2, T + ph / 2);
	fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
		L, T, pw, ph);
	/* workload window */
	fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f8ff\"/>\n",
		X(r->t_work_start), T, X(r->t_work_end) - X(r->t_work_start), ph);
	/* backed: filled step area */
	fprintf(f, "<path fill=\"#cccccc\" fill-opacity=\"0.6\" stroke=\"#888\" d=\"M%.1f %.1f",
		X(r->samples[0].t), Y(0));
	for (s = 0; s < r->nsamples; s++) {
		fprintf(f, " L%.1f %.1f", X(r->samples[s].t),
			Y(s ? r->samples[s - 1].backed : r->samples[0].backed));
		fprintf(f, " L%.1f %.1f", X(r->samples[s].t),
			Y(r->samples[s].backed));
	}
	fprintf(f, " L%.1f %.1f Z\"/>\n", X(r->samples[r->nsamples - 1].t), Y(0));
	/* used */
	fprintf(f, "<polyline fill=\"none\" stroke=\"black\" stroke-width=\"2\" points=\"");
	for (s = 0; s < r->nsamples; s++)
		fprintf(f, "%.1f,%.1f ", X(r->samples[s].t), Y(r->samples[s].used));
	fprintf(f, "\"/>\n");
	/* tenants and their max */
	for (t = 0; t < c->ntenants; t++) {
		const char *col = colors[t % 8];

		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
			col);
		for (s = 0; s < r->nsamples; s++)
			fprintf(f, "%.1f,%.1f ", X(r->samples[s].t),
				Y(r->samples[s].current[t]));
		fprintf(f, "\"/>\n");
		if (c->tenants[t].max != KVPOOL_UNLIMITED)
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6 4\"/>\n",
				L, Y(c->tenants[t].max), L + pw,
				Y(c->tenants[t].max), col);
	}
	if (r->killed && r->kill_pid > 0) {
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"red\" stroke-dasharray=\"3 3\"/>\n",
			X(r->kill_t), T, X(r->kill_t), T + ph);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"red\">kill -9 %s</text>\n",
			X(r->kill_t) + 4, T + 14, c->tenants[r->kill_tenant].name);
	}
	if (r->squeezed && !r->squeeze_err) {
		const char *col = colors[r->squeeze_tenant % 8];

		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6 4\"/>\n",
			X(r->squeeze_t), Y(c->squeeze_max), L + pw,
			Y(c->squeeze_max), col);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">max -> %u</text>\n",
			X(r->squeeze_t) + 4, Y(c->squeeze_max) - 4, col,
			c->squeeze_max);
	}
	if (r->restarted && !r->restart_err) {
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#7b2cbf\" stroke-width=\"2\" stroke-dasharray=\"2 2\"/>\n",
			X(r->restart_t), T, X(r->restart_t), T + ph);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#7b2cbf\">kvpoold kill -9, restart (%s)</text>\n",
			X(r->restart_t) + 4, T + 28,
			r->restart_epoch_kept ? "contents kept" : "contents lost");
	}
	/* swaps: a tick at the bottom per sample in which sequences were
	 * swapped out, its height the number */
	for (s = 1; s < r->nsamples; s++) {
		uint64_t n = r->samples[s].swaps_out - r->samples[s - 1].swaps_out;

		if (r->samples[s].swaps_out < r->samples[s - 1].swaps_out || !n)
			continue;
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e07b00\" stroke-width=\"2\"/>\n",
			X(r->samples[s].t), T + ph, X(r->samples[s].t),
			T + ph - (n > 20 ? 20 : (double)n) * 2);
	}
	/* legend */
	{
		double lx = L + pw + 16, ly = T + 10;

		fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"#cccccc\" stroke=\"#888\"/><text x=\"%.1f\" y=\"%.1f\">backed</text>\n",
			lx, ly, lx + 20, ly + 9);
		ly += 18;
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">used</text>\n",
			lx, ly + 5, lx + 14, ly + 5, lx + 20, ly + 9);
		for (t = 0; t < c->ntenants; t++) {
			char m[16];

			ly += 18;
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">%s, max %s</text>\n",
				lx, ly + 5, lx + 14, ly + 5, colors[t % 8],
				lx + 20, ly + 9, c->tenants[t].name,
				lim(c->tenants[t].max, m, sizeof(m)));
			ly += 14;
			fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">(%s)</text>\n",
				lx + 20, ly + 9, bench_mix_name(c->tenants[t].mix));
		}
		ly += 18;
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">dashed: tenant max</text>\n",
			lx, ly + 9);
		ly += 16;
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">shaded: workload phase</text>\n",
			lx, ly + 9);
		ly += 16;
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#e07b00\">orange ticks: swaps out</text>\n",
			lx, ly + 9);
	}
	fprintf(f, "</svg>\n");
#undef X
#undef Y
	return fclose(f) ? -errno : 0;
}

struct checks {
	bool progress, under_max, drained, no_failures, kill_ok, restart_ok;
};

static void run_checks(const struct bench_result *r, struct checks *k,
		       bool print)
{
	const struct bench_cfg *c = r->cfg;
	uint32_t t;

	k->progress = k->under_max = k->no_failures = k->kill_ok = true;
	k->restart_ok = !r->restarted || !r->restart_err;
	if (!k->restart_ok && print)
		printf("invariant FAILED: kvpoold did not serve again after its restart\n");
	k->drained = r->drained;
	for (t = 0; t < c->ntenants; t++) {
		const struct kvl_tenant_info *ti = &r->ten_end[t];
		uint32_t max = c->tenants[t].max;
		struct tagg a;

		aggregate(r, t, &a);
		if (!a.tokens) {
			k->progress = false;
			if (print)
				printf("invariant FAILED: tenant %s made no progress\n",
				       c->tenants[t].name);
		}
		if (max != KVPOOL_UNLIMITED &&
		    (ti->peak > max || a.sampled_peak > max)) {
			k->under_max = false;
			if (print)
				printf("invariant FAILED: tenant %s peak %u (sampled %u) above its max %u\n",
				       c->tenants[t].name, ti->peak,
				       a.sampled_peak, max);
		}
		if (a.failed) {
			k->no_failures = false;
			if (print)
				printf("invariant FAILED: tenant %s: %u process(es) failed: %s\n",
				       c->tenants[t].name, a.failed,
				       a.err ? a.err : "?");
		}
	}
	if (!r->drained && print)
		printf("invariant FAILED: backed %u blocks at the end, idle was %u\n",
		       r->idle_after, r->idle_before);
	if (r->killed && r->kill_pid > 0 && !r->kill_returned) {
		k->kill_ok = false;
		if (print)
			printf("invariant FAILED: the killed process's lease did not go away\n");
	}
}

int bench_check(const struct bench_result *r, bool print)
{
	struct checks k;

	run_checks(r, &k, print);
	return k.progress && k.under_max && k.drained && k.no_failures &&
	       k.kill_ok && k.restart_ok ? 0 : -1;
}

int bench_write_json(const struct bench_result *r, const char *path)
{
	const struct bench_cfg *c = r->cfg;
	struct checks k;
	struct jw w;
	uint32_t t;
	FILE *f;

	run_checks(r, &k, false);
	f = fopen(path, "we");
	if (!f) {
		fprintf(stderr, "kvpool-bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	jw_init(&w, f);
	jw_obj(&w, NULL);
	jw_bool(&w, "ok", k.progress && k.under_max && k.drained &&
		k.no_failures && k.kill_ok && k.restart_ok);
	jw_obj(&w, "invariants");
	jw_bool(&w, "every_tenant_progressed", k.progress);
	jw_bool(&w, "no_tenant_above_max", k.under_max);
	jw_bool(&w, "backed_returned_to_idle", k.drained);
	jw_bool(&w, "no_process_failed", k.no_failures);
	jw_bool(&w, "killed_blocks_returned", k.kill_ok);
	jw_bool(&w, "daemon_served_after_restart", k.restart_ok);
	jw_obj_end(&w);
	jw_dbl(&w, "duration_s", r->elapsed_s);
	jw_bool(&w, "started_daemon", r->started_daemon);
	jw_obj(&w, "pool");
	jw_str(&w, "name", r->pool.name);
	jw_str(&w, "mode", r->pool.mode == KVL_MODE_MODULE ? "module" : "daemon");
	jw_str(&w, "backend", r->pool.backend);
	jw_u64(&w, "block_bytes", r->pool.block_bytes);
	jw_u64(&w, "capacity", r->pool.capacity);
	jw_u64(&w, "chunk_blocks", r->pool.chunk_blocks);
	jw_obj_end(&w);
	jw_obj(&w, "model");
	jw_u64(&w, "layers", c->model.layers);
	jw_u64(&w, "kv_heads", c->model.kv_heads);
	jw_u64(&w, "head_dim", c->model.head_dim);
	jw_u64(&w, "q_heads", c->model.q_heads);
	jw_str(&w, "dtype", c->model.dtype == KVL_DTYPE_FP8 ? "fp8" :
			    c->model.dtype == KVL_DTYPE_INT8 ? "int8" :
			    c->model.dtype == KVL_DTYPE_INT4 ? "int4" : "bf16");
	jw_obj_end(&w);
	jw_obj(&w, "backed");
	jw_u64(&w, "idle_before", r->idle_before);
	jw_u64(&w, "peak", r->peak_backed);
	jw_u64(&w, "peak_used", r->peak_used);
	jw_u64(&w, "idle_after", r->idle_after);
	jw_bool(&w, "drained", r->drained);
	if (r->t_idle_again >= 0 && r->drained)
		jw_dbl(&w, "idle_again_after_s", r->t_idle_again - r->t_work_end);
	else
		jw_null(&w, "idle_again_after_s");
	jw_obj_end(&w);
	jw_arr(&w, "tenants");
	for (t = 0; t < c->ntenants; t++) {
		const struct kvl_tenant_info *ti = &r->ten_end[t];
		struct tagg a;

		aggregate(r, t, &a);
		jw_obj(&w, NULL);
		jw_str(&w, "name", c->tenants[t].name);
		jw_str(&w, "mix", bench_mix_name(c->tenants[t].mix));
		jw_u64(&w, "procs", a.procs);
		if (c->tenants[t].max == KVPOOL_UNLIMITED)
			jw_str(&w, "max", "max");
		else
			jw_u64(&w, "max", c->tenants[t].max);
		jw_u64(&w, "min", c->tenants[t].min);
		jw_u64(&w, "tokens", a.tokens);
		jw_u64(&w, "prefill_tokens", a.prefill);
		jw_u64(&w, "requests", a.requests);
		jw_u64(&w, "steps", a.steps);
		jw_dbl(&w, "tokens_per_s", a.tok_s);
		jw_dbl(&w, "p50_step_ms", a.p50_us / 1000.0);
		jw_dbl(&w, "p99_step_ms", a.p99_us / 1000.0);
		jw_u64(&w, "peak_blocks", ti->peak);
		jw_u64(&w, "sampled_peak_blocks", a.sampled_peak);
		jw_u64(&w, "ledger_stalls", ti->ev_stall);
		jw_u64(&w, "ledger_quota_hits", ti->ev_max);
		jw_u64(&w, "ledger_reclaims", ti->ev_reclaim);
		jw_u64(&w, "ledger_fails", ti->ev_fail);
		jw_u64(&w, "client_stalls", a.stalls);
		jw_u64(&w, "client_quota_hits", a.quota);
		jw_u64(&w, "client_reclaims", a.reclaims);
		jw_u64(&w, "preempts", a.preempts);
		jw_u64(&w, "swaps_out", a.swaps_out);
		jw_u64(&w, "swaps_in", a.swaps_in);
		jw_u64(&w, "prefix_hit_tokens", a.hit_tokens);
		jw_u64(&w, "prefix_miss_tokens", a.miss_tokens);
		jw_u64(&w, "restarts_seen", a.restarts);
		jw_u64(&w, "restart_lost_requests", a.restart_lost);
		jw_u64(&w, "restart_recompute_tokens", a.restart_tokens);
		jw_u64(&w, "failed_procs", a.failed);
		jw_u64(&w, "killed_procs", a.killed);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	if (r->killed && r->kill_pid > 0) {
		jw_obj(&w, "kill");
		jw_str(&w, "tenant", c->tenants[r->kill_tenant].name);
		jw_u64(&w, "pid", (uint64_t)r->kill_pid);
		jw_dbl(&w, "at_s", r->kill_t);
		jw_u64(&w, "held_blocks", r->kill_held);
		jw_u64(&w, "tenant_before", r->kill_before);
		jw_u64(&w, "tenant_after", r->kill_after);
		jw_bool(&w, "returned", r->kill_returned);
		jw_dbl(&w, "return_ms", r->kill_return_ms);
		jw_obj_end(&w);
	} else {
		jw_null(&w, "kill");
	}
	if (r->squeezed && !r->squeeze_err) {
		jw_obj(&w, "squeeze");
		jw_str(&w, "tenant", c->tenants[r->squeeze_tenant].name);
		jw_dbl(&w, "at_s", r->squeeze_t);
		jw_u64(&w, "old_max", r->squeeze_old_max);
		jw_u64(&w, "new_max", c->squeeze_max);
		jw_u64(&w, "current_before", r->squeeze_before);
		jw_bool(&w, "done", r->squeeze_done);
		jw_dbl(&w, "took_ms", r->squeeze_ms);
		jw_obj_end(&w);
	} else {
		jw_null(&w, "squeeze");
	}
	jw_u64(&w, "dram_blocks", r->dram_blocks);
	jw_u64(&w, "prefix_flushed_blocks", r->prefix_flushed);
	jw_str(&w, "policy", kvl_policy_name(c->policy) ?
			     kvl_policy_name(c->policy) : "?");
	if (r->restarted) {
		jw_obj(&w, "restart");
		jw_dbl(&w, "at_s", r->restart_t);
		jw_bool(&w, "served", !r->restart_err);
		jw_dbl(&w, "serve_ms", r->restart_serve_ms);
		jw_bool(&w, "contents_kept", r->restart_epoch_kept);
		jw_u64(&w, "kept_blocks", r->restart_kept_blocks);
		jw_obj_end(&w);
	} else {
		jw_null(&w, "restart");
	}
	jw_obj_end(&w);
	jw_end(&w);
	return fclose(f) ? -errno : 0;
}
