// SPDX-License-Identifier: MIT
/*
 * cmocka tests of the cuda backend's lock (daemon/turn_lock.h): threads
 * that ask for it while it is held get it in the order they asked, the
 * holder cannot take it back ahead of them, and it excludes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>

#include "turn_lock.h"

#define NWAIT	6

static struct kvd_turn_lock L;
static int order[NWAIT + 1], norder;

struct waiter {
	pthread_t th;
	int id;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	kvd_turn_lock(&L);
	order[norder++] = w->id;
	kvd_turn_unlock(&L);
	return NULL;
}

/* turns handed out so far */
static uint64_t asked(void)
{
	uint64_t n;

	pthread_mutex_lock(&L.m);
	n = L.next;
	pthread_mutex_unlock(&L.m);
	return n;
}

/* Waiters started one at a time, each once the one before has asked, get
 * the lock in that order, and a holder that unlocks and locks again at
 * once comes after all of them. */
static void test_turns_in_order(void **state)
{
	struct waiter w[NWAIT];
	int i;

	(void)state;
	kvd_turn_init(&L);
	norder = 0;
	kvd_turn_lock(&L);
	for (i = 0; i < NWAIT; i++) {
		w[i].id = i + 1;
		assert_int_equal(pthread_create(&w[i].th, NULL, waiter_main,
						&w[i]), 0);
		while (asked() < (uint64_t)i + 2)
			sched_yield();
	}
	kvd_turn_unlock(&L);
	kvd_turn_lock(&L);		/* the holder again: last in line */
	order[norder++] = 0;
	kvd_turn_unlock(&L);
	for (i = 0; i < NWAIT; i++)
		pthread_join(w[i].th, NULL);
	assert_int_equal(norder, NWAIT + 1);
	for (i = 0; i < NWAIT; i++)
		assert_int_equal(order[i], i + 1);
	assert_int_equal(order[NWAIT], 0);
	assert_int_equal(L.serving, L.next);
	kvd_turn_destroy(&L);
}

/* Threads incrementing a counter under the lock lose no increment. */
#define NTHR	4
#define NINC	20000

static unsigned long counter;

static void *inc_main(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < NINC; i++) {
		kvd_turn_lock(&L);
		counter = counter + 1;
		kvd_turn_unlock(&L);
	}
	return NULL;
}

static void test_excludes(void **state)
{
	pthread_t th[NTHR];
	int i;

	(void)state;
	kvd_turn_init(&L);
	counter = 0;
	for (i = 0; i < NTHR; i++)
		assert_int_equal(pthread_create(&th[i], NULL, inc_main, NULL),
				 0);
	for (i = 0; i < NTHR; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(counter, (unsigned long)NTHR * NINC);
	assert_int_equal(L.next, (uint64_t)NTHR * NINC);
	kvd_turn_destroy(&L);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_turns_in_order),
		cmocka_unit_test(test_excludes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
