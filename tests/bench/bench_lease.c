// SPDX-License-Identifier: MIT
/*
 * kvpool-bench-lease - what a client pays for a lease: ns per block of
 * kvl_lease() + kvl_release() through libkvlease, in batches of 1 and 16
 * blocks, on one transport:
 *
 *   --transport daemon   through kvpoold's socket (its in-process ledger;
 *                        the library ignores /dev/kvpool)
 *   --transport module   through /dev/kvpool ioctls only (no daemon
 *                        connection; a pool must exist, e.g. created by
 *                        kvpoold --ledger module)
 *
 * Options: --socket PATH, --device PATH, --pool NAME, --iters N (lease +
 * release rounds per batch size, default 20000).  The last stdout line is
 * a JSON object: {"transport", "batch1_ns_per_block",
 * "batch16_ns_per_block", "iters"}.  Exit 0, 1 on error, 77 when the
 * transport is not there (no daemon at the socket, no /dev/kvpool).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlease.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Lease + release `batch` blocks `iters` times; ns per block, or < 0. */
static double rounds(struct kvl_ctx *ctx, uint32_t batch, long iters)
{
	uint32_t blocks[16];
	double t0, best = -1;
	long i;
	int r, rep;

	/* warm-up, then the best of three: the host is shared */
	for (rep = 0; rep < 4; rep++) {
		t0 = now_ns();
		for (i = 0; i < (rep ? iters : iters / 10 + 1); i++) {
			r = kvl_lease(ctx, batch, 0, 0, blocks);
			if (r != (int)batch) {
				fprintf(stderr, "kvl_lease(%u): %s\n", batch,
					r < 0 ? strerror(-r) : "short grant");
				return -1;
			}
			r = kvl_release(ctx, blocks, batch);
			if (r != (int)batch) {
				fprintf(stderr, "kvl_release(%u): %s\n", batch,
					r < 0 ? strerror(-r) : "short release");
				return -1;
			}
		}
		if (rep) {
			double ns = (now_ns() - t0) / ((double)iters * batch);

			if (best < 0 || ns < best)
				best = ns;
		}
	}
	return best;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "transport", required_argument, NULL, 't' },
		{ "socket", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'd' },
		{ "pool", required_argument, NULL, 'p' },
		{ "iters", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvl_opts o;
	struct kvl_status st;
	struct kvl_ctx *ctx;
	const char *transport = "daemon";
	long iters = 20000;
	double b1, b16;
	int c, r;

	memset(&o, 0, sizeof(o));
	while ((c = getopt_long(argc, argv, "t:s:d:p:n:", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			transport = optarg;
			break;
		case 's':
			o.socket_path = optarg;
			break;
		case 'd':
			o.device_path = optarg;
			break;
		case 'p':
			o.pool = optarg;
			break;
		case 'n':
			iters = strtol(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s [--transport daemon|module] "
				"[--socket PATH] [--device PATH] [--pool NAME] "
				"[--iters N]\n", argv[0]);
			return 1;
		}
	}
	if (iters < 1) {
		fprintf(stderr, "--iters: at least 1\n");
		return 1;
	}
	if (!strcmp(transport, "daemon")) {
		o.flags = KVL_OPEN_NO_MODULE;
	} else if (!strcmp(transport, "module")) {
		o.flags = KVL_OPEN_NO_DAEMON;
	} else {
		fprintf(stderr, "--transport: daemon or module\n");
		return 1;
	}
	o.log_level = KVL_LOG_ERR;
	r = kvl_open(&o, &ctx);
	if (r) {
		printf("skipped: %s transport: %s\n", transport, strerror(-r));
		return (r == -ENOENT || r == -ECONNREFUSED || r == -ENXIO) ?
		       77 : 1;
	}
	r = kvl_status(ctx, &st);
	if (r || st.mode != (o.flags & KVL_OPEN_NO_MODULE ? KVL_MODE_DAEMON :
			     KVL_MODE_MODULE)) {
		fprintf(stderr, "kvl_status: %s, mode %u\n",
			r ? strerror(-r) : "ok", st.mode);
		kvl_close(ctx);
		return 1;
	}
	b1 = rounds(ctx, 1, iters);
	b16 = b1 < 0 ? -1 : rounds(ctx, 16, iters / 4 + 1);
	kvl_close(ctx);
	if (b1 < 0 || b16 < 0)
		return 1;
	printf("lease + release through %s (pool %s): batch 1: %.0f ns per "
	       "block, batch 16: %.0f ns per block\n", transport, st.pool, b1,
	       b16);
	printf("{\"transport\": \"%s\", \"batch1_ns_per_block\": %.1f, "
	       "\"batch16_ns_per_block\": %.1f, \"iters\": %ld}\n", transport,
	       b1, b16, iters);
	return 0;
}
