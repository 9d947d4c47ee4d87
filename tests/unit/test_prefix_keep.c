// SPDX-License-Identifier: MIT
/*
 * cmocka tests of the region that keeps the prefix cache's index across a
 * restart (daemon/prefix_keep.c): a new region is kept, a restarted
 * daemon takes the same bytes back; a region of another size or layout
 * version is refused; a record torn by a kill (its checksum not written,
 * or its bytes changed after it) reads as absent; slots with an unknown
 * state, too many token ids, an unterminated name or a tenant index out
 * of range read as absent; nothing kept means no region.
 *
 * The store is a test double here: it holds the descriptor that kvpoold
 * deposits with the module (keep.c), as the module would.
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
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvpoold.h"
#include "keep.h"
#include "prefix_keep.h"

#define CAP	64

/* ---- what prefix_keep.c needs of the daemon ---------------------------- */

void kvd_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

static int stored = -1;		/* the kept descriptor */
static bool enabled = true;
static int put_result;

bool kvd_keep_enabled(struct kvd *d)
{
	(void)d;
	return enabled;
}

int kvd_keep_put(struct kvd_pool *p, uint32_t kind, uint32_t index, int fd)
{
	assert_int_equal(kind, KVD_KEEP_PREFIX);
	assert_int_equal(index, 0);
	if (put_result)
		return put_result;
	if (stored >= 0)
		close(stored);
	stored = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	assert_true(stored >= 0);
	return 0;
}

int kvd_keep_take(struct kvd_pool *p, uint32_t kind, uint32_t index)
{
	assert_int_equal(kind, KVD_KEEP_PREFIX);
	if (stored < 0)
		return -ENOENT;
	return fcntl(stored, F_DUPFD_CLOEXEC, 3);
}

static struct kvd_pool top;
static struct kvd d = { .top = &top };

static int setup(void **state)
{
	(void)state;
	if (stored >= 0)
		close(stored);
	stored = -1;
	enabled = true;
	put_result = 0;
	return 0;
}

static struct pk_region *fresh(void)
{
	bool restored = true;
	struct pk_region *r = pk_open(&d, CAP, false, &restored);

	assert_non_null(r);
	assert_false(restored);
	return r;
}

static void fill_slot(struct pk_slot *s, uint32_t ntok)
{
	uint32_t i;

	memset(s, 0, sizeof(*s));
	s->state = PK_SLOT_INDEXED;
	s->tix = 3;
	s->id = 42;
	s->parent_id = 41;
	s->key.lo = 0x1234;
	s->depth = 1;
	s->ntok = ntok;
	for (i = 0; i < ntok; i++)
		s->tokens[i] = 1000 + i;
	pk_slot_sum(s);
}

static void kept_and_taken_back(void **state)
{
	struct pk_region *r = fresh(), *r2;
	struct pk_tenant *t = pk_tenant_at(r, 3);
	bool restored = false;

	assert_int_equal(pk_capacity(r), CAP);
	assert_null(pk_slot_at(r, CAP));
	assert_null(pk_tenant_at(r, PK_TENANTS));
	assert_null(pk_ns_at(r, PK_SHARED));
	t->used = 1;
	strcpy(t->name, "chat");
	t->hot_id = 7;
	t->cold_id = 8;
	pk_tenant_sum(t);
	fill_slot(pk_slot_at(r, 5), 64);
	pk_close(r);

	r2 = pk_open(&d, CAP, true, &restored);
	assert_non_null(r2);
	assert_true(restored);
	t = pk_tenant_at(r2, 3);
	assert_true(pk_tenant_ok(t));
	assert_string_equal(t->name, "chat");
	assert_int_equal(t->cold_id, 8);
	assert_true(pk_slot_ok(pk_slot_at(r2, 5)));
	assert_int_equal(pk_slot_at(r2, 5)->tokens[63], 1063);
	assert_false(pk_slot_ok(pk_slot_at(r2, 6)));	/* never written */
	assert_false(pk_tenant_ok(pk_tenant_at(r2, 0)));

	pk_clear(r2);
	assert_false(pk_tenant_ok(pk_tenant_at(r2, 3)));
	assert_false(pk_slot_ok(pk_slot_at(r2, 5)));
	pk_close(r2);
}

static void torn_records(void **state)
{
	struct pk_region *r = fresh();
	struct pk_slot *s = pk_slot_at(r, 1);
	struct pk_tenant *t = pk_tenant_at(r, 0);
	struct pk_ns *n = pk_ns_at(r, 0);

	fill_slot(s, 16);
	assert_true(pk_slot_ok(s));
	s->tokens[15]++;		/* written after its checksum */
	assert_false(pk_slot_ok(s));
	pk_slot_sum(s);
	assert_true(pk_slot_ok(s));
	s->sum = 0;			/* the checksum never written */
	assert_false(pk_slot_ok(s));

	/* token ids past the ones in use are not covered */
	fill_slot(s, 16);
	s->tokens[16] = 99;
	assert_true(pk_slot_ok(s));

	t->used = 1;
	strcpy(t->name, "a");
	pk_tenant_sum(t);
	assert_true(pk_tenant_ok(t));
	t->hot_id++;
	assert_false(pk_tenant_ok(t));

	n->used = 1;
	strcpy(n->name, "common");
	pk_ns_sum(n);
	assert_true(pk_ns_ok(n));
	n->salt[0] ^= 1;
	assert_false(pk_ns_ok(n));
	pk_close(r);
}

static void bad_records(void **state)
{
	struct pk_region *r = fresh();
	struct pk_slot *s = pk_slot_at(r, 2);
	struct pk_tenant *t = pk_tenant_at(r, 1);
	struct pk_ns *n = pk_ns_at(r, 1);

	fill_slot(s, PK_TOKENS);
	assert_true(pk_slot_ok(s));
	fill_slot(s, PK_TOKENS + 1);	/* more than a slot holds */
	assert_false(pk_slot_ok(s));
	fill_slot(s, 0);		/* no token */
	assert_false(pk_slot_ok(s));
	fill_slot(s, 4);
	s->state = 7;			/* unknown */
	pk_slot_sum(s);
	assert_false(pk_slot_ok(s));
	fill_slot(s, 4);
	s->state = PK_SLOT_FREE;
	pk_slot_sum(s);
	assert_false(pk_slot_ok(s));
	fill_slot(s, 4);
	s->tix = PK_TENANTS;		/* no such record */
	pk_slot_sum(s);
	assert_false(pk_slot_ok(s));
	fill_slot(s, 4);
	memset(s->ns, 'x', sizeof(s->ns));	/* unterminated */
	pk_slot_sum(s);
	assert_false(pk_slot_ok(s));

	t->used = 1;
	memset(t->name, 'x', sizeof(t->name));
	pk_tenant_sum(t);
	assert_false(pk_tenant_ok(t));
	memset(t, 0, sizeof(*t));
	strcpy(t->name, "b");
	pk_tenant_sum(t);		/* not in use */
	assert_false(pk_tenant_ok(t));

	n->used = 1;			/* a shared namespace has a name */
	pk_ns_sum(n);
	assert_false(pk_ns_ok(n));
	pk_close(r);
}

static void refused_regions(void **state)
{
	struct pk_region *r = fresh();
	bool restored = true;
	uint32_t *version;
	void *m;

	pk_close(r);
	/* another pool size: refused, a new region made instead */
	r = pk_open(&d, CAP * 2, true, &restored);
	assert_non_null(r);
	assert_false(restored);
	pk_close(r);

	/* another layout version */
	r = pk_open(&d, CAP, false, &restored);
	assert_non_null(r);
	pk_close(r);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, stored, 0);
	assert_true(m != MAP_FAILED);
	version = (uint32_t *)((char *)m + 8);
	assert_int_equal(*version, PK_VERSION);
	(*version)++;
	munmap(m, 4096);
	r = pk_open(&d, CAP, true, &restored);
	assert_non_null(r);		/* a fresh one */
	assert_false(restored);
	pk_close(r);
}

static void nothing_kept(void **state)
{
	bool restored = true;

	enabled = false;
	assert_null(pk_open(&d, CAP, true, &restored));
	assert_false(restored);
	enabled = true;
	put_result = -ENOSPC;		/* the pool's deposits full */
	assert_null(pk_open(&d, CAP, false, &restored));
	assert_false(restored);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(kept_and_taken_back, setup),
		cmocka_unit_test_setup(torn_records, setup),
		cmocka_unit_test_setup(bad_records, setup),
		cmocka_unit_test_setup(refused_regions, setup),
		cmocka_unit_test_setup(nothing_kept, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
