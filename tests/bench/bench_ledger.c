// SPDX-License-Identifier: MIT
/*
 * Ledger core benchmark: ns per block leased + released.
 *
 *  trace:  256 concurrent sequences, 16 tokens per block; each step every
 *          sequence appends a token and leases one block every 16 tokens;
 *          a sequence ends after a seeded uniform 64..4096 tokens, releases
 *          its blocks and a new one starts; pool of 65,536 blocks; about
 *          2 million grants.
 *  bulk:   lease 16 blocks then release them, 200,000 times.
 *  trace2: the trace split over 2 threads (2 leases, 128 sequences each)
 *          contending for one pool behind one mutex, as the daemon's
 *          in-process ledger does.
 *
 * The last stdout line is a JSON object with trace_ns_per_block,
 * bulk_ns_per_block and trace2_ns_per_block.  What a client pays per
 * lease through the daemon or /dev/kvpool is kvpool-bench-lease's figure
 * (tests/bench/bench_lease.c); make bench-ledger runs both.
 */
#include <pthread.h>
#include <time.h>
#include "kvpool_ledger.h"

#define CAPACITY	65536
#define SEQS		256
#define TOK_PER_BLOCK	16
#define TARGET_GRANTS	2000000ULL
#define BULK_ITERS	200000
#define BULK_N		16

struct seq {
	u32 tokens, len, nblocks;
	u32 blocks[4096 / TOK_PER_BLOCK + 1];
};

struct worker {
	struct kvpool_pool *pool;
	pthread_mutex_t *lock;
	struct kvpool_lease *lease;
	u32 nseq;
	u64 grants_wanted;
	u64 grants, releases;
	u64 rng;
	u32 *ops;
	u64 nops;
	int err;
};

static int owner_cookie;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static u32 rnd_len(u64 *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return 64 + (u32)(*s % (4096 - 64 + 1));
}

static struct kvpool_pool *pool_new(void)
{
	struct kvpool_pool_params p = {
		.name = "bench", .block_bytes = 65536, .capacity = CAPACITY,
		.chunk_blocks = 256, .default_max = KVPOOL_UNLIMITED,
	};
	struct kvpool_pool *pool;

	if (kvpool_pool_create(&p, NULL, NULL, &owner_cookie, &pool) ||
	    kvpool_pool_grow(pool, CAPACITY, 0)) {
		fprintf(stderr, "pool create failed\n");
		exit(1);
	}
	return pool;
}

#define OP_RELEASE	0x80000000U

/*
 * Record the trace's ledger operations first (the token-by-token stepping
 * is the workload's cost, not the ledger's), then replay them timed.
 */
static u32 *record_trace(u32 nseq, u64 grants_wanted, u64 rng, u64 *nops)
{
	u32 *tokens = calloc(nseq, sizeof(u32)), *len = calloc(nseq, sizeof(u32));
	u64 cap = grants_wanted + grants_wanted / 4 + 1024, n = 0, grants = 0;
	u32 *ops = malloc(cap * sizeof(u32)), i;

	for (i = 0; i < nseq; i++)
		len[i] = rnd_len(&rng);
	while (grants < grants_wanted) {
		for (i = 0; i < nseq; i++) {
			if (tokens[i] % TOK_PER_BLOCK == 0) {
				ops[n++] = i;
				grants++;
			}
			if (++tokens[i] < len[i])
				continue;
			ops[n++] = i | OP_RELEASE;
			tokens[i] = 0;
			len[i] = rnd_len(&rng);
		}
	}
	free(tokens);
	free(len);
	*nops = n;
	return ops;
}

static void *run_trace(void *arg)
{
	struct worker *w = arg;
	struct seq *seqs = calloc(w->nseq, sizeof(*seqs));
	struct kvpool_wait wait;
	u64 k;

	for (k = 0; k < w->nops; k++) {
		u32 op = w->ops[k];
		struct seq *s = &seqs[op & ~OP_RELEASE];
		int ret;

		if (w->lock)
			pthread_mutex_lock(w->lock);
		if (op & OP_RELEASE) {
			ret = kvpool_lease_release(w->lease, s->blocks,
						   s->nblocks);
			if (ret == (int)s->nblocks) {
				w->releases += s->nblocks;
				s->nblocks = 0;
				ret = 1;
			}
		} else {
			memset(&wait, 0, sizeof(wait));
			ret = kvpool_lease_grant(w->lease, 1, 0,
						 &s->blocks[s->nblocks++],
						 &wait);
			w->grants++;
		}
		if (w->lock)
			pthread_mutex_unlock(w->lock);
		if (ret != 1) {
			w->err = ret;
			break;
		}
	}
	free(seqs);
	return NULL;
}

static double trace(int nthreads)
{
	struct kvpool_pool *pool = pool_new();
	struct kvpool_cred cred = { .uid = 1000, .gid = 1000 };
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct worker w[2];
	pthread_t th[2];
	u64 blocks = 0;
	double t0, t1;
	int i;

	memset(w, 0, sizeof(w));
	for (i = 0; i < nthreads; i++) {
		w[i].pool = pool;
		w[i].lock = nthreads > 1 ? &lock : NULL;
		w[i].nseq = SEQS / nthreads;
		w[i].grants_wanted = TARGET_GRANTS / nthreads;
		w[i].rng = 0x5eed0000ULL + i;
		w[i].ops = record_trace(w[i].nseq, w[i].grants_wanted,
					w[i].rng, &w[i].nops);
		if (kvpool_lease_open(pool, &cred, &w[i].lease))
			exit(1);
	}
	t0 = now_ns();
	if (nthreads == 1) {
		run_trace(&w[0]);
	} else {
		for (i = 0; i < nthreads; i++)
			pthread_create(&th[i], NULL, run_trace, &w[i]);
		for (i = 0; i < nthreads; i++)
			pthread_join(th[i], NULL);
	}
	t1 = now_ns();
	for (i = 0; i < nthreads; i++) {
		if (w[i].err) {
			fprintf(stderr, "trace: error %d\n", w[i].err);
			exit(1);
		}
		blocks += w[i].grants;
		printf("  thread %d: %llu grants, %llu blocks released\n", i,
		       (unsigned long long)w[i].grants,
		       (unsigned long long)w[i].releases);
		kvpool_lease_close(w[i].lease);
		free(w[i].ops);
	}
	kvpool_pool_destroy(pool);
	return (t1 - t0) / (double)blocks;
}

static double bulk(void)
{
	struct kvpool_pool *pool = pool_new();
	struct kvpool_cred cred = { .uid = 1000, .gid = 1000 };
	struct kvpool_lease *lease;
	struct kvpool_wait wait;
	u32 blocks[BULK_N];
	double t0, t1;
	int i;

	if (kvpool_lease_open(pool, &cred, &lease))
		exit(1);
	/* Some resident leases so the free map is not trivially empty. */
	for (i = 0; i < 1000; i++) {
		memset(&wait, 0, sizeof(wait));
		kvpool_lease_grant(lease, 7, 0, blocks, &wait);
		if (i % 3 == 0)
			kvpool_lease_release(lease, blocks + 2, 3);
	}
	t0 = now_ns();
	for (i = 0; i < BULK_ITERS; i++) {
		memset(&wait, 0, sizeof(wait));
		if (kvpool_lease_grant(lease, BULK_N, 0, blocks, &wait) != BULK_N ||
		    kvpool_lease_release(lease, blocks, BULK_N) != BULK_N) {
			fprintf(stderr, "bulk: error\n");
			exit(1);
		}
	}
	t1 = now_ns();
	kvpool_lease_close(lease);
	kvpool_pool_destroy(pool);
	return (t1 - t0) / ((double)BULK_ITERS * BULK_N);
}

int main(void)
{
	double tr, bu, tr2;

	printf("kvpool ledger benchmark (pool %d blocks, %d sequences, "
	       "%d tokens/block, ~%llu grants)\n", CAPACITY, SEQS,
	       TOK_PER_BLOCK, (unsigned long long)TARGET_GRANTS);
	tr = trace(1);
	printf("trace:  %.1f ns per block (grant + release)\n", tr);
	bu = bulk();
	printf("bulk:   %.1f ns per block (lease %d + release %d)\n", bu,
	       BULK_N, BULK_N);
	tr2 = trace(2);
	printf("trace2: %.1f ns per block (2 threads, one mutex)\n", tr2);
	printf("{\"trace_ns_per_block\": %.1f, \"bulk_ns_per_block\": %.1f, "
	       "\"trace2_ns_per_block\": %.1f}\n", tr, bu, tr2);
	return 0;
}
