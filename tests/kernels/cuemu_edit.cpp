// SPDX-License-Identifier: MIT
/*
 * cuemu_edit.cpp - the edit kernels (kernels/cuda/kvkern_edit.cu) built
 * for the host under tests/kernels/cuemu.h, and a launcher: every CTA of
 * the grid in turn, its threads as fibers meeting at __syncthreads().
 * Used by the driver double of test-kvk-cuemu-edit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuemu.h"
#include "../../kernels/cuda/kvkern_edit.cu"

/*
 * The threads of a CTA are fibers run one after the other on this host
 * thread: each runs until it reaches __syncthreads() or ends, and a
 * barrier opens when every live thread has reached it.  Kernels that
 * never wait (gather; scatter for BF16/INT4) run their threads as plain
 * calls, and a __syncthreads() there is an error.  On x86-64 a fiber
 * switch is a few instructions (cuemu_swap), elsewhere swapcontext().
 */
thread_local cuemu_dim threadIdx;
cuemu_dim blockIdx, blockDim, gridDim;

#define FIBER_STACK (64 * 1024)
#define MAX_THREADS 1024

static unsigned int cur;
static int done[MAX_THREADS];
static int direct;
static void (*cur_body)(void *);
static void *cur_arg;
static char *fstack;

static void fiber_run(void)
{
	threadIdx = { cur, 0, 0 };
	cur_body(cur_arg);
	done[cur] = 1;
}

#if defined(__x86_64__)
extern "C" void cuemu_swap(void **from_sp, void *to_sp);
asm(".text\n"
    ".globl cuemu_swap\n"
    ".type cuemu_swap,@function\n"
    "cuemu_swap:\n"
    "	pushq %rbp\n	pushq %rbx\n	pushq %r12\n"
    "	pushq %r13\n	pushq %r14\n	pushq %r15\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	popq %r15\n	popq %r14\n	popq %r13\n"
    "	popq %r12\n	popq %rbx\n	popq %rbp\n"
    "	ret\n"
    ".size cuemu_swap, .-cuemu_swap\n");

static void *sched_sp, *fiber_sp[MAX_THREADS];

static void fiber_entry(void)
{
	fiber_run();
	cuemu_swap(&fiber_sp[cur], sched_sp);	/* never resumed */
	abort();
}

static void fiber_make(unsigned int t)
{
	uintptr_t top = ((uintptr_t)(fstack + (size_t)(t + 1) * FIBER_STACK)) &
			~(uintptr_t)15;
	void **sp = (void **)top;

	*--sp = NULL;			/* fiber_entry's return address */
	*--sp = (void *)fiber_entry;	/* cuemu_swap returns here */
	for (int i = 0; i < 6; i++)
		*--sp = NULL;		/* rbp rbx r12 r13 r14 r15 */
	fiber_sp[t] = sp;
}

static void fiber_switch_in(unsigned int t)
{
	cuemu_swap(&sched_sp, fiber_sp[t]);
}

static void fiber_yield(void)
{
	cuemu_swap(&fiber_sp[cur], sched_sp);
}
#else
#include <ucontext.h>

static ucontext_t sched_ctx, fctx[MAX_THREADS];

static void fiber_make(unsigned int t)
{
	getcontext(&fctx[t]);
	fctx[t].uc_stack.ss_sp = fstack + (size_t)t * FIBER_STACK;
	fctx[t].uc_stack.ss_size = FIBER_STACK;
	fctx[t].uc_link = &sched_ctx;
	makecontext(&fctx[t], fiber_run, 0);
}

static void fiber_switch_in(unsigned int t)
{
	swapcontext(&sched_ctx, &fctx[t]);
}

static void fiber_yield(void)
{
	swapcontext(&fctx[cur], &sched_ctx);
}
#endif

void __syncthreads(void)
{
	if (direct) {
		fprintf(stderr, "cuemu: __syncthreads in a kernel run without "
			"fibers\n");
		abort();
	}
	fiber_yield();
}

static void run_cta(void (*body)(void *), void *arg, unsigned int threads)
{
	unsigned int t, live;

	cur_body = body;
	cur_arg = arg;
	if (direct) {
		for (t = 0; t < threads; t++) {
			cur = t;
			threadIdx = { t, 0, 0 };
			body(arg);
		}
		return;
	}
	for (t = 0; t < threads; t++) {
		done[t] = 0;
		fiber_make(t);
	}
	do {
		live = 0;
		for (t = 0; t < threads; t++) {
			if (done[t])
				continue;
			cur = t;
			threadIdx = { t, 0, 0 };
			fiber_switch_in(t);
			live += !done[t];
		}
	} while (live);
}

template <class P>
struct grid_job {
	void (*k)(P);
	const P *p;
};

template <class P>
static void call_kernel(void *a)
{
	const grid_job<P> *j = (const grid_job<P> *)a;

	j->k(*j->p);
}

template <class P>
static void run_grid(void (*k)(P), const P &p, unsigned int gx,
		     unsigned int gy, unsigned int threads)
{
	grid_job<P> j = { k, &p };

	if (threads > MAX_THREADS)
		abort();
	if (!fstack) {
		fstack = (char *)malloc((size_t)MAX_THREADS * FIBER_STACK);
		if (!fstack)
			abort();
	}
	gridDim = { gx, gy, 1 };
	blockDim = { threads, 1, 1 };
	for (unsigned int y = 0; y < gy; y++)
		for (unsigned int x = 0; x < gx; x++) {
			blockIdx = { x, y, 0 };
			run_cta(call_kernel<P>, &j, threads);
		}
}

extern "C" int cuemu_launch(const char *name, unsigned int gx,
			    unsigned int gy, unsigned int threads,
			    void *param);

/* 0, or -1 for a kernel this emulation does not have. */
extern "C" int cuemu_launch(const char *name, unsigned int gx,
			    unsigned int gy, unsigned int threads,
			    void *param)
{
	direct = 0;
	if (!strcmp(name, "kvk_edit_gather")) {
		direct = 1;
	} else if (!strcmp(name, "kvk_edit_scatter")) {
		uint32_t dt = ((const kvk_cu_edit *)param)->l.dtype;

		direct = dt == kvk_edit_dev::BF16 || dt == kvk_edit_dev::INT4;
	}
	if (!strcmp(name, "kvk_edit_gather"))
		run_grid(kvk_edit_gather, *(const kvk_cu_edit *)param, gx, gy,
			 threads);
	else if (!strcmp(name, "kvk_edit_scatter"))
		run_grid(kvk_edit_scatter, *(const kvk_cu_edit *)param, gx, gy,
			 threads);
	else if (!strcmp(name, "kvk_edit_score_stats"))
		run_grid(kvk_edit_score_stats, *(const kvk_cu_score *)param, gx,
			 gy, threads);
	else if (!strcmp(name, "kvk_edit_score_accum"))
		run_grid(kvk_edit_score_accum, *(const kvk_cu_score *)param, gx,
			 gy, threads);
	else
		return -1;
	return 0;
}
