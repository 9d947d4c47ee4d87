// SPDX-License-Identifier: MIT
/*
 * cuemu.cc - the CUDA execution model on the host (see cuemu.h): fibers
 * with a small x86-64 context switch, a scheduler that completes barriers
 * and warp collectives, and the warp-level instructions computed from
 * their PTX ISA definitions.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuemu.h"
#include "cuemu_launch.h"
#include "kvkern.h"

#if !defined(__x86_64__)
#error "the CUDA emulation switches contexts with x86-64 code"
#endif

/* cuemu_switch(save, next): save callee-saved registers and the stack
 * pointer into *save, continue on stack next. */
extern "C" void cuemu_switch(void **save, void *next);
extern "C" void cuemu_trampoline(void);
asm(".text\n"
    ".globl cuemu_switch\n"
    ".type cuemu_switch, @function\n"
    "cuemu_switch:\n"
    "	pushq %rbp\n"
    "	pushq %rbx\n"
    "	pushq %r12\n"
    "	pushq %r13\n"
    "	pushq %r14\n"
    "	pushq %r15\n"
    "	movq %rsp, (%rdi)\n"
    "	movq %rsi, %rsp\n"
    "	popq %r15\n"
    "	popq %r14\n"
    "	popq %r13\n"
    "	popq %r12\n"
    "	popq %rbx\n"
    "	popq %rbp\n"
    "	ret\n"
    ".size cuemu_switch, .-cuemu_switch\n"
    ".globl cuemu_trampoline\n"
    ".type cuemu_trampoline, @function\n"
    "cuemu_trampoline:\n"
    "	movq %r12, %rdi\n"
    "	callq *%r13\n"
    "	ud2\n"
    ".size cuemu_trampoline, .-cuemu_trampoline\n");

enum { ST_RUN, ST_WAIT, ST_DONE };
enum {
	OP_NONE, OP_BAR, OP_SYNCWARP, OP_SHFL, OP_REDUX, OP_LDSM, OP_MMA,
	OP_MOVM,
};
static const char *const op_names[] = {
	"none", "__syncthreads", "__syncwarp", "shfl.bfly", "redux.max",
	"ldmatrix", "mma.sync", "movmatrix",
};

struct copy {
	void *dst;
	const void *src;
	uint32_t size, src_size;
};

#define MAX_COPIES 256
#define MAX_GROUPS 32
#define STACK_BYTES (128 * 1024)

struct fiber {
	void *sp;
	uint8_t *stack;
	unsigned int tid;
	dim3 tidx;
	int state;
	/* collective in progress */
	int op;
	uint32_t mask, v, res;
	int arg;
	const void *addr;
	int trans, bf16;
	float *d;
	uint32_t a[4], b0, b1;
	uint32_t *res4;
	/* cp.async */
	struct copy copies[MAX_COPIES];
	int ncopies;
	int group_end[MAX_GROUPS];	/* copies[0..group_end[i]) per group */
	int ngroups;
};

static struct {
	struct fiber *f;
	unsigned int nf, cap;
	void *sched_sp;
	struct fiber *cur;
	dim3 grid, block, bidx;
	uint8_t *smem;
	size_t smem_bytes, smem_map;
	void (*fn)(const void *);
	const void *params;
	const char *name;
	int sm;
	/* CUEMU_ORDER */
	int order_read, order;
	uint64_t rng;
	char order_name[40];
	unsigned int *perm;
	unsigned int perm_cap;
} E;

/* the static shared memory of every kernel (cuemu.h's __shared__) */
extern "C" uint8_t __start_cuemu_smem[] __attribute__((weak, visibility("hidden")));
extern "C" uint8_t __stop_cuemu_smem[] __attribute__((weak, visibility("hidden")));

static void read_order(void)
{
	const char *s = getenv("CUEMU_ORDER");

	if (E.order_read)
		return;
	E.order_read = 1;
	E.order = 0;
	E.rng = 0;
	if (!s || !*s || !strcmp(s, "forward")) {
		E.order = 0;
	} else if (!strcmp(s, "reverse")) {
		E.order = 1;
	} else if (!strncmp(s, "random:", 7) && s[7]) {
		char *end;

		E.order = 2;
		E.rng = strtoull(s + 7, &end, 0);
		if (*end) {
			fprintf(stderr, "cudafake: CUEMU_ORDER=%s: the seed is "
				"not a number\n", s);
			abort();
		}
	} else {
		fprintf(stderr, "cudafake: CUEMU_ORDER=%s: want forward, "
			"reverse or random:SEED\n", s);
		abort();
	}
	snprintf(E.order_name, sizeof(E.order_name), "%s",
		 s && *s ? s : "forward");
	E.rng = E.rng * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
}

extern "C" int cuemu_order(void)
{
	read_order();
	return E.order;
}

extern "C" const char *cuemu_order_name(void)
{
	read_order();
	return E.order_name;
}

/* xorshift64* */
extern "C" unsigned int cuemu_rand(void)
{
	read_order();
	E.rng ^= E.rng >> 12;
	E.rng ^= E.rng << 25;
	E.rng ^= E.rng >> 27;
	return (unsigned int)((E.rng * 0x2545f4914f6cdd1dull) >> 32);
}

/* p[0..n): the identity, its reverse or a fresh random permutation */
static void order_perm(unsigned int *p, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		p[i] = E.order == 1 ? n - 1 - i : i;
	if (E.order == 2)
		for (i = n; i > 1; i--) {
			unsigned int j = cuemu_rand() % i, t = p[i - 1];

			p[i - 1] = p[j];
			p[j] = t;
		}
}

void cuemu_fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "cudafake: emulated kernel %s, block (%u,%u,%u), "
		"thread %u: ", E.name ? E.name : "?", E.bidx.x, E.bidx.y,
		E.bidx.z, E.cur ? E.cur->tid : 0);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

dim3 cuemu_thread_idx(void)
{
	return E.cur->tidx;
}

dim3 cuemu_block_idx(void)
{
	return E.bidx;
}

dim3 cuemu_block_dim(void)
{
	return E.block;
}

dim3 cuemu_grid_dim(void)
{
	return E.grid;
}

void *cuemu_dyn_smem(void)
{
	return E.smem;
}

int cuemu_sm(void)
{
	return E.sm ? E.sm : 90;
}

extern "C" void cuemu_set_sm(int sm)
{
	E.sm = sm;
}

static void yield_wait(int op)
{
	struct fiber *f = E.cur;

	f->op = op;
	f->state = ST_WAIT;
	cuemu_switch(&f->sp, E.sched_sp);
}

static void fiber_main(struct fiber *f)
{
	E.fn(E.params);
	if (f->ncopies)
		cuemu_fail("exits with %d cp.async copies never waited for",
			   f->ncopies);
	f->state = ST_DONE;
	cuemu_switch(&f->sp, E.sched_sp);
	abort();
}

static void fiber_start(struct fiber *f)
{
	uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
	void **a = (void **)(top - 24);		/* return address slot */

	a[0] = (void *)cuemu_trampoline;
	/* popped: r15, r14, r13 (function), r12 (argument), rbx, rbp */
	a[-1] = NULL;				/* rbp */
	a[-2] = NULL;				/* rbx */
	a[-3] = f;				/* r12 */
	a[-4] = (void *)fiber_main;		/* r13 */
	a[-5] = NULL;				/* r14 */
	a[-6] = NULL;				/* r15 */
	f->sp = &a[-6];
	f->state = ST_RUN;
	f->op = OP_NONE;
	f->ncopies = f->ngroups = 0;
}

/* ---- warp collectives ---- */

static float elem16(uint16_t h, int bf16)
{
	if (bf16)
		return __uint_as_float((uint32_t)h << 16);
	return cuemu_f16_to_f32(h);
}

/*
 * mma.sync.m16n8k16 with FP32 accumulation, as the tensor cores do it:
 * each product of two BF16 (FP16) elements is exact in FP32 (8 x 8 (11 x
 * 11) significand bits), the 16 products and the accumulator are summed
 * in FP32, rounded after every addition (the hardware's order of the
 * additions is not documented; this one is C first, then k = 0..15).
 */
static void do_mma(struct fiber *w)
{
	float A[16][16], B[16][8], C[16][8];
	int l;

	for (l = 0; l < 32; l++) {
		const struct fiber *f = &w[l];
		int g = l >> 2, c = l & 3, bf = w[0].bf16;

		A[g][2 * c] = elem16(f->a[0] & 0xffff, bf);
		A[g][2 * c + 1] = elem16(f->a[0] >> 16, bf);
		A[g + 8][2 * c] = elem16(f->a[1] & 0xffff, bf);
		A[g + 8][2 * c + 1] = elem16(f->a[1] >> 16, bf);
		A[g][2 * c + 8] = elem16(f->a[2] & 0xffff, bf);
		A[g][2 * c + 9] = elem16(f->a[2] >> 16, bf);
		A[g + 8][2 * c + 8] = elem16(f->a[3] & 0xffff, bf);
		A[g + 8][2 * c + 9] = elem16(f->a[3] >> 16, bf);
		B[2 * c][g] = elem16(f->b0 & 0xffff, bf);
		B[2 * c + 1][g] = elem16(f->b0 >> 16, bf);
		B[2 * c + 8][g] = elem16(f->b1 & 0xffff, bf);
		B[2 * c + 9][g] = elem16(f->b1 >> 16, bf);
		C[g][2 * c] = f->d[0];
		C[g][2 * c + 1] = f->d[1];
		C[g + 8][2 * c] = f->d[2];
		C[g + 8][2 * c + 1] = f->d[3];
	}
	for (l = 0; l < 32; l++) {
		int g = l >> 2, c = l & 3, i;
		int rows[4] = { g, g, g + 8, g + 8 };
		int cols[4] = { 2 * c, 2 * c + 1, 2 * c, 2 * c + 1 };

		for (i = 0; i < 4; i++) {
			float s = C[rows[i]][cols[i]];
			int k;

			for (k = 0; k < 16; k++)
				s += A[rows[i]][k] * B[k][cols[i]];
			w[l].d[i] = s;
		}
	}
}

static void do_ldsm(struct fiber *w)
{
	uint16_t m[4][8][8];
	int l, j;

	for (l = 0; l < 32; l++) {
		if ((uintptr_t)w[l].addr & 15)
			cuemu_fail("ldmatrix: lane %d row address %p is not "
				   "16-byte aligned", l, w[l].addr);
		memcpy(m[l / 8][l % 8], w[l].addr, 16);
	}
	for (l = 0; l < 32; l++) {
		int g = l >> 2, c = l & 3;

		for (j = 0; j < 4; j++) {
			uint16_t lo, hi;

			if (w[0].trans) {
				lo = m[j][2 * c][g];
				hi = m[j][2 * c + 1][g];
			} else {
				lo = m[j][g][2 * c];
				hi = m[j][g][2 * c + 1];
			}
			w[l].res4[j] = lo | ((uint32_t)hi << 16);
		}
	}
}

static void do_movm(struct fiber *w)
{
	uint16_t m[8][8];
	int l;

	for (l = 0; l < 32; l++) {
		m[l >> 2][2 * (l & 3)] = (uint16_t)w[l].v;
		m[l >> 2][2 * (l & 3) + 1] = (uint16_t)(w[l].v >> 16);
	}
	for (l = 0; l < 32; l++) {
		int g = l >> 2, c = l & 3;

		w[l].res = m[2 * c][g] | ((uint32_t)m[2 * c + 1][g] << 16);
	}
}

/* all 32 lanes of warp w wait at one collective: check it and do it */
static void complete_warp(struct fiber *w, int warp)
{
	int op = w[0].op, l;

	for (l = 0; l < 32; l++) {
		if (w[l].op != op)
			cuemu_fail("warp %d diverges: lane 0 at %s, lane %d at "
				   "%s", warp, op_names[op], l,
				   op_names[w[l].op]);
		if (op != OP_LDSM && op != OP_MMA && op != OP_MOVM &&
		    w[l].mask != 0xffffffffu)
			cuemu_fail("warp %d: %s with mask %#x (the kernels use "
				   "whole warps)", warp, op_names[op],
				   w[l].mask);
	}
	switch (op) {
	case OP_SYNCWARP:
		break;
	case OP_SHFL:
		for (l = 0; l < 32; l++)
			w[l].res = w[l ^ (w[l].arg & 31)].v;
		break;
	case OP_REDUX: {
		uint32_t mx = 0;

		for (l = 0; l < 32; l++)
			mx = w[l].v > mx ? w[l].v : mx;
		for (l = 0; l < 32; l++)
			w[l].res = mx;
		break;
	}
	case OP_LDSM:
		for (l = 1; l < 32; l++)
			if (w[l].trans != w[0].trans)
				cuemu_fail("ldmatrix .trans differs in warp %d",
					   warp);
		do_ldsm(w);
		break;
	case OP_MMA:
		for (l = 1; l < 32; l++)
			if (w[l].bf16 != w[0].bf16)
				cuemu_fail("mma types differ in warp %d", warp);
		do_mma(w);
		break;
	case OP_MOVM:
		do_movm(w);
		break;
	default:
		cuemu_fail("internal: op %d", op);
	}
	for (l = 0; l < 32; l++) {
		w[l].state = ST_RUN;
		w[l].op = OP_NONE;
	}
}

static int is_warp_op(int op)
{
	return op >= OP_SYNCWARP;
}

static void run_block(unsigned int *perm)
{
	unsigned int n = E.nf, i;
	unsigned int nwarps = (n + 31) / 32;

	if (n % 32)
		cuemu_fail("block of %u threads is not whole warps", n);
	for (i = 0; i < n; i++)
		fiber_start(&E.f[i]);
	order_perm(perm, n);
	for (;;) {
		unsigned int done = 0, at_bar = 0, progressed = 0, w;

		if (E.order == 2)
			order_perm(perm, n);
		for (i = 0; i < n; i++) {
			struct fiber *f = &E.f[perm[i]];

			if (f->state != ST_RUN)
				continue;
			E.cur = f;
			cuemu_switch(&E.sched_sp, f->sp);
			E.cur = NULL;
			progressed = 1;
		}
		for (w = 0; w < nwarps; w++) {
			struct fiber *wf = &E.f[w * 32];
			unsigned int nwait = 0, ndone = 0, l;

			for (l = 0; l < 32; l++) {
				if (wf[l].state == ST_DONE)
					ndone++;
				else if (wf[l].state == ST_WAIT &&
					 is_warp_op(wf[l].op))
					nwait++;
			}
			if (nwait == 32) {
				complete_warp(wf, (int)w);
				progressed = 1;
			} else if (nwait && ndone) {
				E.cur = &wf[0];
				cuemu_fail("warp %u: %u lanes wait at a warp "
					   "collective, %u lanes have exited",
					   w, nwait, ndone);
			}
		}
		for (i = 0; i < n; i++) {
			done += E.f[i].state == ST_DONE;
			at_bar += E.f[i].state == ST_WAIT &&
				  E.f[i].op == OP_BAR;
		}
		if (done == n)
			return;
		if (at_bar && at_bar + done == n) {
			for (i = 0; i < n; i++)
				if (E.f[i].state == ST_WAIT) {
					E.f[i].state = ST_RUN;
					E.f[i].op = OP_NONE;
				}
			continue;
		}
		if (!progressed) {
			for (i = 0; i < n; i++)
				if (E.f[i].state == ST_WAIT)
					fprintf(stderr, "cudafake: thread %u waits "
						"at %s\n", i,
						op_names[E.f[i].op]);
			cuemu_fail("deadlock: %u threads at __syncthreads, %u "
				   "done, the others at warp collectives",
				   at_bar, done);
		}
	}
}

extern "C" int cuemu_launch(const char *name, void (*fn)(const void *),
			    const void *params, unsigned int gx,
			    unsigned int gy, unsigned int gz, unsigned int bx,
			    unsigned int by, unsigned int bz, size_t smem)
{
	dim3 grid = { gx, gy, gz }, block = { bx, by, bz };
	unsigned int n = bx * by * bz, i;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (n > E.cap) {
		for (i = 0; i < E.cap; i++)
			munmap(E.f[i].stack, STACK_BYTES);
		free(E.f);
		E.f = (struct fiber *)calloc(n, sizeof(*E.f));
		if (!E.f)
			return -ENOMEM;
		for (i = 0; i < n; i++) {
			E.f[i].stack = (uint8_t *)mmap(NULL, STACK_BYTES,
				PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (E.f[i].stack == MAP_FAILED)
				return -ENOMEM;
		}
		E.cap = n;
	}
	E.nf = n;
	for (i = 0; i < n; i++) {
		E.f[i].tid = i;
		E.f[i].tidx.x = i % block.x;
		E.f[i].tidx.y = i / block.x % block.y;
		E.f[i].tidx.z = i / block.x / block.y;
	}
	/* dynamic shared memory ends at a guard page */
	if (E.smem_map)
		munmap(E.smem - (E.smem_map - page - E.smem_bytes), E.smem_map);
	E.smem_bytes = (smem + 15) & ~(size_t)15;
	E.smem_map = ((E.smem_bytes + page - 1) / page + 1) * page;
	{
		uint8_t *m = (uint8_t *)mmap(NULL, E.smem_map,
					     PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (m == MAP_FAILED)
			return -ENOMEM;
		mprotect(m + E.smem_map - page, page, PROT_NONE);
		E.smem = m + E.smem_map - page - E.smem_bytes;
	}
	read_order();
	{
		/* the blocks in the order's order, then the fibers */
		uint64_t nb = (uint64_t)gx * gy * gz, k;
		uint64_t cap = nb > n ? nb : n;
		unsigned int *bperm;

		if (cap > 0xffffffffu)
			return -ENOMEM;
		if (cap > E.perm_cap) {
			free(E.perm);
			E.perm = (unsigned int *)malloc(sizeof(unsigned int) *
							(size_t)cap * 2);
			if (!E.perm) {
				E.perm_cap = 0;
				return -ENOMEM;
			}
			E.perm_cap = (unsigned int)cap;
		}
		bperm = E.perm + E.perm_cap;
		order_perm(bperm, (unsigned int)nb);
		E.grid = grid;
		E.block = block;
		E.fn = fn;
		E.params = params;
		E.name = name;
		for (k = 0; k < nb; k++) {
			unsigned int b = bperm[k];

			E.bidx.x = b % gx;
			E.bidx.y = b / gx % gy;
			E.bidx.z = b / gx / gy;
			/* uninitialised shared memory reads as NaN */
			memset(E.smem, 0xff, E.smem_bytes);
			if (__start_cuemu_smem && __stop_cuemu_smem)
				memset(__start_cuemu_smem, 0xff,
				       (size_t)(__stop_cuemu_smem -
						__start_cuemu_smem));
			run_block(E.perm);
		}
	}
	E.name = NULL;
	return 0;
}

extern "C" const char *cuemu_current_kernel(void)
{
	return E.name;
}

/* ---- collectives called by the kernels ---- */

void cuemu_syncthreads(void)
{
	yield_wait(OP_BAR);
}

void cuemu_syncwarp(unsigned int mask)
{
	E.cur->mask = mask;
	yield_wait(OP_SYNCWARP);
}

uint32_t cuemu_shfl_xor(unsigned int mask, uint32_t v, int lane_mask)
{
	struct fiber *f = E.cur;

	f->mask = mask;
	f->v = v;
	f->arg = lane_mask;
	yield_wait(OP_SHFL);
	return f->res;
}

uint32_t cuemu_redux_max(unsigned int mask, uint32_t v)
{
	struct fiber *f = E.cur;

	f->mask = mask;
	f->v = v;
	yield_wait(OP_REDUX);
	return f->res;
}

void cuemu_ldmatrix_x4(const void *row_addr, int trans, uint32_t r[4])
{
	struct fiber *f = E.cur;

	f->addr = row_addr;
	f->trans = trans;
	f->res4 = r;
	yield_wait(OP_LDSM);
}

void cuemu_mma_m16n8k16(int bf16, float d[4], const uint32_t a[4],
			uint32_t b0, uint32_t b1)
{
	struct fiber *f = E.cur;

	f->bf16 = bf16;
	f->d = d;
	memcpy(f->a, a, sizeof(f->a));
	f->b0 = b0;
	f->b1 = b1;
	yield_wait(OP_MMA);
}

uint32_t cuemu_movmatrix_trans(uint32_t x)
{
	struct fiber *f = E.cur;

	f->v = x;
	yield_wait(OP_MOVM);
	return f->res;
}

/* ---- cp.async ---- */

void cuemu_cp_async(void *dst, const void *src, uint32_t cp_size,
		    uint32_t src_size)
{
	struct fiber *f = E.cur;
	struct copy *c;

	if ((uintptr_t)dst % cp_size || (src_size && (uintptr_t)src % cp_size))
		cuemu_fail("cp.async of %u bytes: dst %p / src %p not aligned",
			   cp_size, dst, src);
	if (src_size > cp_size)
		cuemu_fail("cp.async src-size %u > cp-size %u", src_size,
			   cp_size);
	if (((uint8_t *)dst + cp_size > E.smem + E.smem_bytes &&
	     (uint8_t *)dst < E.smem + E.smem_bytes + 65536) ||
	    ((uint8_t *)dst < E.smem && (uint8_t *)dst + 65536 > E.smem))
		cuemu_fail("cp.async writes past dynamic shared memory "
			   "(%p, %zu bytes at %p)", dst, E.smem_bytes,
			   (void *)E.smem);
	if (f->ncopies == MAX_COPIES)
		cuemu_fail("more than %d cp.async copies pending", MAX_COPIES);
	c = &f->copies[f->ncopies++];
	c->dst = dst;
	c->src = src;
	c->size = cp_size;
	c->src_size = src_size;
}

void cuemu_cp_async_commit(void)
{
	struct fiber *f = E.cur;

	if (f->ngroups == MAX_GROUPS)
		cuemu_fail("more than %d cp.async groups pending", MAX_GROUPS);
	f->group_end[f->ngroups++] = f->ncopies;
}

void cuemu_cp_async_wait(int n)
{
	struct fiber *f = E.cur;
	int done, i, k;

	if (f->ngroups <= n)
		return;
	done = f->group_end[f->ngroups - n - 1];
	for (i = 0; i < done; i++) {
		struct copy *c = &f->copies[i];

		memcpy(c->dst, c->src, c->src_size);
		memset((uint8_t *)c->dst + c->src_size, 0,
		       c->size - c->src_size);
	}
	memmove(f->copies, f->copies + done,
		sizeof(struct copy) * (size_t)(f->ncopies - done));
	f->ncopies -= done;
	for (k = 0; k < n; k++)
		f->group_end[k] = f->group_end[f->ngroups - n + k] - done;
	f->ngroups = n;
}

/* ---- conversions ---- */

uint16_t cuemu_f32_to_f16(float x)
{
	return kvk_f32_to_f16(x);
}

float cuemu_f16_to_f32(uint16_t h)
{
	return kvk_f16_to_f32(h);
}

uint16_t cuemu_f32_to_bf16(float x)
{
	return kvk_f32_to_bf16(x);
}

float cuemu_fp8_to_f32(uint8_t b)
{
	return kvk_fp8_to_f32(b);
}
