/* SPDX-License-Identifier: MIT */
/*
 * turn_lock.h - a mutual-exclusion lock taken in the order it was asked
 * for.
 *
 * A pthread mutex lets the thread that has just unlocked take the lock
 * again before a woken waiter runs, so a few threads issuing ops back to
 * back can keep another thread waiting for as long as they go on.  When
 * one lock serialises different tenants' ops (the cuda backend's kernels
 * and stream), that is one tenant stalling another.  With a turn lock a
 * thread waits only for the holders that asked before it: at most one
 * op of each other thread.
 */
#ifndef KVD_TURN_LOCK_H
#define KVD_TURN_LOCK_H

#include <pthread.h>
#include <stdint.h>

struct kvd_turn_lock {
	pthread_mutex_t m;	/* guards next and serving only */
	pthread_cond_t cv;
	uint64_t next;		/* the turn the next caller takes */
	uint64_t serving;	/* the turn that holds the lock */
};

static inline void kvd_turn_init(struct kvd_turn_lock *t)
{
	pthread_mutex_init(&t->m, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->next = 0;
	t->serving = 0;
}

static inline void kvd_turn_destroy(struct kvd_turn_lock *t)
{
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->m);
}

static inline void kvd_turn_lock(struct kvd_turn_lock *t)
{
	uint64_t me;

	pthread_mutex_lock(&t->m);
	me = t->next++;
	while (t->serving != me)
		pthread_cond_wait(&t->cv, &t->m);
	pthread_mutex_unlock(&t->m);
}

static inline void kvd_turn_unlock(struct kvd_turn_lock *t)
{
	pthread_mutex_lock(&t->m);
	t->serving++;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->m);
}

#endif
