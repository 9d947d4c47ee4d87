// SPDX-License-Identifier: MIT
/*
 * cmocka tests of kvpoold's block tags (daemon/scrub.c): who used a block
 * last decides whether it is zeroed before a tenant's op uses it; fresh
 * and unmapped memory, blocks a caller keeps as they are, blocks named
 * twice and more than a batch, a zeroing that fails, swap destinations,
 * the tier's zero op and the host-memory fallback, a second connection
 * of the tenant while a block is being zeroed, tenant names.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>
#include <unistd.h>

#include "kvpoold.h"
#include "scrub.h"

#define NBLK	256
#define BB	512

/* what scrub.c needs of the rest of the daemon */
void kvd_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

uint64_t kvd_now_ns(void)
{
	return 0;
}

static uint8_t mem[NBLK * BB];
static uint32_t zeroed_blocks;	/* by the tier's zero op */
static int zero_result;		/* what it returns (0: it zeroes) */

static void *t_host_ptr(struct kvd_pool *p, uint32_t b)
{
	return mem + (size_t)b * p->block_bytes;
}

static void *t_no_host(struct kvd_pool *p, uint32_t b)
{
	return NULL;
}

static int t_zero(struct kvd_pool *p, struct kvd_io *io, const uint32_t *b,
		  uint32_t n)
{
	uint32_t i;

	if (zero_result)
		return zero_result;
	for (i = 0; i < n; i++)
		memset(mem + (size_t)b[i] * p->block_bytes, 0, p->block_bytes);
	zeroed_blocks += n;
	return 0;
}

static const struct kvd_tier_ops ops_zero = {
	.name = "test", .host_ptr = t_no_host, .zero = t_zero,
};
static const struct kvd_tier_ops ops_host = {
	.name = "test-host", .host_ptr = t_host_ptr,
};
static const struct kvd_tier_ops ops_none = {
	.name = "test-none", .host_ptr = t_no_host,
};

static struct kvd d;
static struct kvd_pool p;

static int setup(void **state)
{
	(void)state;
	memset(&d, 0, sizeof(d));
	memset(&p, 0, sizeof(p));
	p.d = &d;
	p.capacity = NBLK;
	p.block_bytes = BB;
	p.ops = &ops_zero;
	memset(mem, 0, sizeof(mem));
	zeroed_blocks = 0;
	zero_result = 0;
	return kvd_scrub_pool_init(&p);
}

static int teardown(void **state)
{
	(void)state;
	kvd_scrub_pool_fini(&p);
	return 0;
}

static void fill(const uint32_t *b, uint32_t n, uint8_t v)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		memset(mem + (size_t)b[i] * BB, v, BB);
}

static int is_filled(uint32_t b, uint8_t v)
{
	uint32_t i;

	for (i = 0; i < BB; i++)
		if (mem[(size_t)b * BB + i] != v)
			return 0;
	return 1;
}

static const uint32_t blk[] = { 0, 1, 2, 3, 7, 8 };
#define NB (sizeof(blk) / sizeof(blk[0]))

static void fresh_blocks_need_no_zeroing(void **state)
{
	uint32_t i;

	(void)state;
	assert_true(kvd_scrub_owned(&p, 5, blk, NB));	/* all ZERO */
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, 0);
	for (i = 0; i < NB; i++)
		assert_true(kvd_scrub_owned(&p, 5, &blk[i], 1));
	assert_false(kvd_scrub_owned(&p, 6, blk, NB));
}

static void another_tenants_blocks_are_zeroed_once(void **state)
{
	uint64_t n, ns;
	uint32_t i;

	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	fill(blk, NB, 0xaa);			/* tenant 5 writes */
	/* the same tenant again, another connection: bytes stay */
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, 0);
	assert_true(is_filled(blk[0], 0xaa));
	/* tenant 6 gets them */
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, NB);
	for (i = 0; i < NB; i++)
		assert_true(is_filled(blk[i], 0));
	assert_true(kvd_scrub_owned(&p, 6, blk, NB));
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, NB);
	kvd_scrub_stats(&p, &n, &ns);
	assert_int_equal(n, NB);
	/* an untouched block next to them was never written */
	assert_true(is_filled(4, 0));
}

static bool keep_odd(void *arg, uint32_t b)
{
	(*(int *)arg)++;
	return b & 1;
}

static void kept_blocks_stay_as_they_are(void **state)
{
	int asked = 0;
	uint32_t i;

	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	fill(blk, NB, 0x55);
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, keep_odd,
					 &asked), 0);
	assert_int_equal(asked, NB);
	for (i = 0; i < NB; i++) {
		assert_true(is_filled(blk[i], blk[i] & 1 ? 0x55 : 0));
		/* a kept block keeps its tag: still tenant 5's */
		assert_true(kvd_scrub_owned(&p, blk[i] & 1 ? 5 : 6, &blk[i],
					    1));
	}
}

static void named_twice_and_more_than_a_batch(void **state)
{
	uint32_t b[400], i;

	(void)state;
	for (i = 0; i < 200; i++)
		b[i] = b[200 + i] = i;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b, 400, NULL, NULL), 0);
	fill(b, 200, 0x11);
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, b, 400, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, 200);	/* each once */
	for (i = 0; i < 200; i++)
		assert_true(is_filled(i, 0));
	assert_true(kvd_scrub_owned(&p, 6, b, 400));
}

static void a_failed_zeroing_leaves_unknown(void **state)
{
	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	fill(blk, NB, 0x77);
	zero_result = -EIO;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL),
			 -EIO);
	assert_true(is_filled(blk[0], 0x77));
	/* neither tenant's any more: both get zeros next */
	assert_false(kvd_scrub_owned(&p, 6, blk, NB));
	assert_false(kvd_scrub_owned(&p, 5, blk, NB));
	zero_result = 0;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, NB);
	assert_true(is_filled(blk[0], 0));
}

static void out_of_range_is_refused(void **state)
{
	uint32_t b[2] = { 3, NBLK };

	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b, 2, NULL, NULL),
			 -EPERM);
	assert_false(kvd_scrub_owned(&p, 5, b, 2));
	/* also once the fast path has passed some */
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b, 1, NULL, NULL), 0);
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b, 2, NULL, NULL),
			 -EPERM);
}

static void swap_destinations(void **state)
{
	(void)state;
	/* a whole-block copy from tenant 6's blocks: they are 6's */
	kvd_scrub_filled(&p, 6, blk, NB, true);
	assert_true(kvd_scrub_owned(&p, 6, blk, NB));
	/* a copy of 5's that failed part way: no longer 6's, not 5's */
	kvd_scrub_filled(&p, 5, blk, 2, false);
	assert_false(kvd_scrub_owned(&p, 5, blk, 1));
	assert_false(kvd_scrub_owned(&p, 6, blk, 1));
	assert_true(kvd_scrub_owned(&p, 6, blk + 2, NB - 2));
	/* ... and one of 6's into its own blocks: still 6's */
	kvd_scrub_filled(&p, 6, blk + 2, 2, false);
	assert_true(kvd_scrub_owned(&p, 6, blk + 2, 2));
}

static void unmapped_memory(void **state)
{
	uint32_t b[3] = { 10, 11, 12 };

	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b, 3, NULL, NULL), 0);
	fill(b, 3, 0x99);
	kvd_scrub_unmapped(&p, 10, 12, true);	/* given back: zeros */
	assert_true(kvd_scrub_owned(&p, 6, b, 2));
	assert_false(kvd_scrub_owned(&p, 6, b + 2, 1));
	kvd_scrub_unmapped(&p, 12, NBLK + 5, false);	/* failed, clipped */
	assert_false(kvd_scrub_owned(&p, 5, b + 2, 1));
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, b + 2, 1, NULL, NULL),
			 0);
	assert_int_equal(zeroed_blocks, 1);
}

static void host_memory_without_a_zero_op(void **state)
{
	(void)state;
	p.ops = &ops_host;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	fill(blk, NB, 0x33);
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL), 0);
	assert_int_equal(zeroed_blocks, 0);	/* memset, not the op */
	assert_true(is_filled(blk[0], 0) && is_filled(blk[NB - 1], 0));
	/* a tier op that declines falls back to it too */
	p.ops = &ops_zero;
	zero_result = -EOPNOTSUPP;
	fill(blk, NB, 0x33);
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL),
			 -EOPNOTSUPP);	/* no host memory to fall back to */
	p.ops = &ops_none;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL),
			 -EOPNOTSUPP);
	assert_false(kvd_scrub_owned(&p, 6, blk, NB));
}

/* A zero op that takes its time, so that another claim comes meanwhile. */
static volatile int in_zero;

static int t_zero_slow(struct kvd_pool *pp, struct kvd_io *io,
		       const uint32_t *b, uint32_t n)
{
	in_zero = 1;
	usleep(100000);
	return t_zero(pp, io, b, n);
}

static const struct kvd_tier_ops ops_slow = {
	.name = "test-slow", .host_ptr = t_no_host, .zero = t_zero_slow,
};

static void *claim_thread(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL,
						 NULL);
}

static void a_second_connection_waits_for_the_zeros(void **state)
{
	pthread_t th;
	void *ret;
	uint32_t i;

	(void)state;
	assert_int_equal(kvd_scrub_claim(&p, NULL, 5, blk, NB, NULL, NULL), 0);
	fill(blk, NB, 0x66);
	p.ops = &ops_slow;
	in_zero = 0;
	assert_int_equal(pthread_create(&th, NULL, claim_thread, NULL), 0);
	while (!in_zero)
		usleep(1000);
	/* tenant 6's other connection: its claim returns only once the
	 * blocks are zeros */
	assert_int_equal(kvd_scrub_claim(&p, NULL, 6, blk, NB, NULL, NULL), 0);
	for (i = 0; i < NB; i++)
		assert_true(is_filled(blk[i], 0));
	assert_int_equal(pthread_join(th, &ret), 0);
	assert_int_equal((intptr_t)ret, 0);
	assert_int_equal(zeroed_blocks, NB);	/* once */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(fresh_blocks_need_no_zeroing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			another_tenants_blocks_are_zeroed_once, setup, teardown),
		cmocka_unit_test_setup_teardown(kept_blocks_stay_as_they_are,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			named_twice_and_more_than_a_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_failed_zeroing_leaves_unknown, setup, teardown),
		cmocka_unit_test_setup_teardown(out_of_range_is_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(swap_destinations, setup,
						teardown),
		cmocka_unit_test_setup_teardown(unmapped_memory, setup,
						teardown),
		cmocka_unit_test_setup_teardown(host_memory_without_a_zero_op,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_second_connection_waits_for_the_zeros, setup,
			teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
