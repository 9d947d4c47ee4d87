// SPDX-License-Identifier: MIT
/*
 * bench.h - kvpool-bench: the driver (kvpool-bench.c), the tenant worker
 * processes (bench_worker.c) and the report (bench_report.c).
 *
 * The driver maps one shared anonymous region before forking workers; each
 * worker updates its own struct bench_wstats there, the driver samples the
 * ledger (kvl_admin_*) every tick and reads the stats.
 */
#ifndef KVPOOL_BENCH_H
#define KVPOOL_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvlease.h"

#define BENCH_MAX_TENANTS	8
#define BENCH_MAX_WORKERS	32
#define BENCH_MAX_SAMPLES	4096
#define BENCH_LAT_BUCKETS	512	/* log buckets, factor 1.04 from 1 us */

enum bench_mix { MIX_CHAT, MIX_REASONING, MIX_PREFIX };

struct bench_model {
	uint32_t layers, kv_heads, head_dim, q_heads, dtype;
};

struct bench_tenant {
	char name[KVL_NAME_LEN];
	enum bench_mix mix;
	uint32_t procs;
	uint32_t max, min;		/* blocks; max KVPOOL_UNLIMITED */
	double start_frac, stop_frac;	/* active window in the run */
	uint32_t batch;			/* concurrent sequences per process */
};

/* Per worker, in shared memory: written by the worker only. */
struct bench_wstats {
	volatile int state;		/* 0 starting, 1 running, 2 done,
					 * 3 failed, 4 killed */
	volatile int err;		/* -errno of a fatal error */
	pid_t pid;
	uint32_t tenant;		/* index into the tenant table */
	volatile uint64_t gen_tokens;	/* decoded tokens */
	volatile uint64_t prefill_tokens;
	volatile uint64_t steps;
	volatile uint64_t requests;	/* finished requests */
	volatile uint64_t quota_hits;	/* -EDQUOT from the ledger */
	volatile uint64_t stalls;	/* leases that waited and timed out
					 * or were refused for lack of blocks */
	volatile uint64_t reclaims;	/* reclaim requests seen */
	volatile uint64_t preempts;	/* sequences dropped to make room */
	volatile uint64_t swaps_out;	/* sequences swapped to a lower tier
					 * to make room (SWAP policy) */
	volatile uint64_t swaps_in;	/* and back */
	volatile uint64_t prefix_hit_tokens;	/* matched in the prefix
						 * cache (shared-prefix) */
	volatile uint64_t prefix_miss_tokens;	/* prefilled instead */
	volatile uint64_t restarts;	/* daemon restarts this process saw
					 * (-ESTALE) */
	volatile uint64_t restart_lost;	/* requests lost to them */
	volatile uint64_t restart_tokens; /* their tokens, recomputed */
	volatile uint32_t held;		/* blocks held now (kvl_status) */
	volatile uint32_t peak_held;
	volatile uint64_t busy_ns;	/* time in steps */
	volatile uint64_t lat[BENCH_LAT_BUCKETS];
	char errmsg[96];
};

/* Driver-to-worker control, in shared memory. */
struct bench_ctl {
	volatile int stop;		/* all workers: finish now */
	uint64_t t0_ns;			/* CLOCK_MONOTONIC start of the run */
	uint64_t run_ns;
};

struct bench_sample {
	double t;			/* seconds since the start */
	uint32_t backed, used;
	uint32_t current[BENCH_MAX_TENANTS];
	uint64_t swaps_out;		/* all workers, so far */
};

struct bench_cfg {
	double duration_s;
	double drain_s;
	const char *out_dir;
	const char *socket;		/* NULL: start a daemon */
	const char *daemon_bin;
	const char *daemon_args;
	const char *kill_tenant;	/* NULL: no kill */
	double kill_frac;
	const char *squeeze_tenant;	/* NULL: no squeeze */
	uint32_t squeeze_max;		/* the lowered max */
	double squeeze_frac;
	double restart_frac;		/* kill -9 and restart of the
					 * daemon it started; < 0: none */
	bool restart_asked;		/* --restart given */
	uint32_t dram_blocks;		/* a dram tier of the daemon it
					 * starts; 0: none */
	uint32_t policy;		/* KVL_POLICY_* of the workers */
	uint32_t tick_ms;
	uint32_t step_sleep_us;
	uint32_t capacity, chunk_blocks;
	uint64_t block_bytes;
	uint32_t seed;
	bool quiet, json_stdout;
	struct bench_model model;
	uint32_t ntenants;
	struct bench_tenant tenants[BENCH_MAX_TENANTS];
};

/* Filled by the driver for the report. */
struct bench_result {
	const struct bench_cfg *cfg;
	struct kvl_pool_info pool;	/* at the start */
	struct kvl_tenant_info ten_end[BENCH_MAX_TENANTS];
	struct bench_sample *samples;
	uint32_t nsamples;
	struct bench_wstats *ws;
	uint32_t nworkers;
	uint32_t tokens_per_block;
	uint64_t bytes_per_token;
	double elapsed_s;		/* workload phase */
	double t_work_start;		/* sample time of the workload start */
	double t_work_end;		/* sample time the workers stopped */
	double t_idle_again;		/* first sample back at idle, or -1 */
	uint32_t idle_before, idle_after, peak_backed, peak_used;
	bool drained;			/* backed back to idle */
	bool started_daemon;
	/* --kill */
	bool killed;
	pid_t kill_pid;
	uint32_t kill_tenant;
	double kill_t;
	uint32_t kill_held;		/* blocks the process held */
	uint32_t kill_before;		/* tenant current before */
	uint32_t kill_after;		/* tenant current after return */
	double kill_return_ms;		/* time until they came back */
	bool kill_returned;
	/* --squeeze: an operator lowers a tenant's max mid-run */
	bool squeezed;
	int squeeze_err;
	uint32_t squeeze_tenant;
	double squeeze_t;
	uint32_t squeeze_before;	/* tenant current when lowered */
	uint32_t squeeze_old_max;
	bool squeeze_done;		/* current came down to the new max */
	double squeeze_ms;		/* how long that took */
	/* the daemon killed (kill -9) and started again mid-run */
	bool restarted;
	int restart_err;
	double restart_t;
	double restart_serve_ms;	/* kill to the first answer */
	bool restart_epoch_kept;	/* block contents kept */
	uint64_t restart_kept_blocks;
	uint32_t dram_blocks;		/* the first lower tier's size */
	uint32_t prefix_flushed;	/* cached blocks given back at the end */
};

/* bench_worker.c: runs in the child; never returns. */
void bench_worker_main(const struct bench_cfg *cfg, struct bench_ctl *ctl,
		       struct bench_wstats *ws, uint32_t tenant,
		       uint32_t index) __attribute__((noreturn));
const char *bench_mix_name(enum bench_mix m);

/* bench_pressure.c: `kvpool-bench pressure` (self: this program's path,
 * to find kvpoold next to it). */
int bench_pressure_main(int argc, char **argv, const char *self);

/* bench_report.c */
double bench_lat_percentile(const struct bench_wstats *const *ws, int n,
			    double p);	/* microseconds */
uint32_t bench_lat_bucket(uint64_t ns);
void bench_report_text(const struct bench_result *r);
int bench_write_csv(const struct bench_result *r, const char *path);
int bench_write_svg(const struct bench_result *r, const char *path);
int bench_write_json(const struct bench_result *r, const char *path);
/* Invariants: 0 when all hold; prints each failure. */
int bench_check(const struct bench_result *r, bool print);

#endif /* KVPOOL_BENCH_H */
