// SPDX-License-Identifier: MIT
/*
 * cmocka tests of the prefix cache's index (daemon/prefix_index.c): keys
 * of the hash chain, verified lookups (namespace, model, parent entry,
 * token ids), forced collisions, removal, growth, LRU order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "prefix_index.h"

#define TPB	16

static const uint8_t salt_a[PFX_SALT_BYTES] = { 1, 2, 3 };
static const uint8_t salt_b[PFX_SALT_BYTES] = { 9, 9, 9 };
static int ns_a, ns_b;		/* namespace cookies */
static int owner;

static void toks(uint32_t seed, uint32_t *t)
{
	uint32_t i;

	for (i = 0; i < TPB; i++)
		t[i] = seed * 1000 + i;
}

static struct pfx_key key_of(const struct pfx_index *ix, const uint8_t *salt,
			     const struct pfx_key *parent,
			     const struct pfx_key *model, const uint32_t *t)
{
	uint8_t scratch[48 + 4 * TPB];
	struct pfx_key k;

	pfx_key_compute(ix, &k, salt, parent, model, t, TPB, scratch);
	return k;
}

static void keys_depend_on_everything(void **state)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m1, m2, k, k2;
	uint32_t t[TPB], u[TPB];

	(void)state;
	assert_int_equal(pfx_index_init(&ix, 128), 0);
	pfx_model_identity(&m1, "llama@1", 32, 8, 128, 1, 500000.0f, 16, 65536);
	pfx_model_identity(&m2, "llama@2", 32, 8, 128, 1, 500000.0f, 16, 65536);
	assert_false(m1.lo == m2.lo && m1.hi == m2.hi);
	pfx_model_identity(&m2, "llama@1", 32, 8, 128, 2, 500000.0f, 16, 65536);
	assert_false(m1.lo == m2.lo && m1.hi == m2.hi);	/* dtype */
	pfx_model_identity(&m2, "llama@1", 32, 8, 128, 1, 10000.0f, 16, 65536);
	assert_false(m1.lo == m2.lo && m1.hi == m2.hi);	/* RoPE base */
	pfx_model_identity(&m2, "llama@1", 32, 8, 128, 1, 500000.0f, 16, 65536);
	assert_true(m1.lo == m2.lo && m1.hi == m2.hi);	/* deterministic */

	toks(1, t);
	toks(1, u);
	k = key_of(&ix, salt_a, &zero, &m1, t);
	k2 = key_of(&ix, salt_a, &zero, &m1, u);
	assert_true(k.lo == k2.lo && k.hi == k2.hi);
	u[TPB - 1]++;
	k2 = key_of(&ix, salt_a, &zero, &m1, u);
	assert_false(k.lo == k2.lo && k.hi == k2.hi);	/* a token */
	k2 = key_of(&ix, salt_b, &zero, &m1, t);
	assert_false(k.lo == k2.lo && k.hi == k2.hi);	/* the salt */
	k2 = key_of(&ix, salt_a, &k, &m1, t);
	assert_false(k.lo == k2.lo && k.hi == k2.hi);	/* the parent */
	pfx_index_fini(&ix);

	/* The test hook keeps N bits. */
	assert_int_equal(pfx_index_init(&ix, 0), 0);
	k = key_of(&ix, salt_a, &zero, &m1, t);
	assert_true(k.lo == 0 && k.hi == 0);
	pfx_index_fini(&ix);
	assert_int_equal(pfx_index_init(&ix, 12), 0);
	k = key_of(&ix, salt_a, &zero, &m1, t);
	assert_true(k.lo < 4096 && k.hi == 0);
	pfx_index_fini(&ix);
	assert_int_equal(pfx_index_init(&ix, 100), 0);
	k = key_of(&ix, salt_a, &zero, &m1, t);
	assert_true(k.hi < (1ULL << 36));
	pfx_index_fini(&ix);
}

static void lookup_verifies(void **state)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m1, m2, k;
	struct pfx_entry *e;
	uint32_t t[TPB], u[TPB];

	(void)state;
	assert_int_equal(pfx_index_init(&ix, 128), 0);
	pfx_model_identity(&m1, "m", 2, 2, 64, 1, 0, TPB, 65536);
	pfx_model_identity(&m2, "n", 2, 2, 64, 1, 0, TPB, 65536);
	toks(1, t);
	k = key_of(&ix, salt_a, &zero, &m1, t);
	e = pfx_entry_new(&ix, &k, &ns_a, &owner, &m1, 0, 42, t, TPB);
	assert_non_null(e);
	assert_true(e->id > 0);
	assert_int_equal(pfx_index_reserve(&ix, 1), 0);
	pfx_insert(&ix, e);
	assert_ptr_equal(pfx_lookup(&ix, &k, &ns_a, &m1, 0, t, TPB), e);
	assert_ptr_equal(pfx_by_block(&ix, 42), e);
	assert_null(pfx_by_block(&ix, 43));
	/* Same key, anything else different: no hit. */
	assert_null(pfx_lookup(&ix, &k, &ns_b, &m1, 0, t, TPB));
	assert_null(pfx_lookup(&ix, &k, &ns_a, &m2, 0, t, TPB));
	assert_null(pfx_lookup(&ix, &k, &ns_a, &m1, e->id, t, TPB));
	memcpy(u, t, sizeof(u));
	u[3] ^= 1;
	assert_null(pfx_lookup(&ix, &k, &ns_a, &m1, 0, u, TPB));
	assert_null(pfx_lookup(&ix, &k, &ns_a, &m1, 0, t, TPB - 1));
	/* Unindexed: found by block, not by key. */
	pfx_unindex(&ix, e);
	assert_null(pfx_lookup(&ix, &k, &ns_a, &m1, 0, t, TPB));
	assert_ptr_equal(pfx_by_block(&ix, 42), e);
	assert_int_equal(ix.nkeyed, 0);
	assert_int_equal(ix.nentries, 1);
	pfx_remove(&ix, e);
	assert_null(pfx_by_block(&ix, 42));
	assert_int_equal(ix.nentries, 0);
	pfx_index_fini(&ix);
}

/* Every key equal: each chain entry is found only by its own inputs. */
static void forced_collisions(void **state)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m, k;
	struct pfx_entry *roots[50], *kids[50];
	uint32_t t[TPB], i;

	(void)state;
	assert_int_equal(pfx_index_init(&ix, 0), 0);
	pfx_model_identity(&m, "m", 2, 2, 64, 1, 0, TPB, 65536);
	assert_int_equal(pfx_index_reserve(&ix, 100), 0);
	for (i = 0; i < 50; i++) {
		toks(i, t);
		k = key_of(&ix, salt_a, &zero, &m, t);
		roots[i] = pfx_entry_new(&ix, &k, &ns_a, &owner, &m, 0, i, t,
					 TPB);
		pfx_insert(&ix, roots[i]);
		/* The same child tokens under every root. */
		toks(999, t);
		k = key_of(&ix, salt_a, &k, &m, t);
		kids[i] = pfx_entry_new(&ix, &k, &ns_a, &owner, &m,
					roots[i]->id, 100 + i, t, TPB);
		pfx_insert(&ix, kids[i]);
	}
	toks(999, t);
	for (i = 0; i < 50; i++) {
		/* key 0 for all; the parent entry tells the children apart */
		assert_ptr_equal(pfx_lookup(&ix, &zero, &ns_a, &m, roots[i]->id,
					    t, TPB), kids[i]);
	}
	toks(7, t);
	assert_ptr_equal(pfx_lookup(&ix, &zero, &ns_a, &m, 0, t, TPB), roots[7]);
	toks(5000, t);
	assert_null(pfx_lookup(&ix, &zero, &ns_a, &m, 0, t, TPB));
	pfx_index_fini(&ix);
}

static void grows_and_removes(void **state)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m, k;
	struct pfx_entry **es = calloc(20000, sizeof(*es));
	uint32_t t[TPB], i;

	(void)state;
	assert_int_equal(pfx_index_init(&ix, 128), 0);
	pfx_model_identity(&m, "m", 2, 2, 64, 1, 0, TPB, 65536);
	for (i = 0; i < 20000; i++) {
		toks(i, t);
		k = key_of(&ix, salt_a, &zero, &m, t);
		es[i] = pfx_entry_new(&ix, &k, &ns_a, &owner, &m, 0, i, t, TPB);
		assert_int_equal(pfx_index_reserve(&ix, 1), 0);
		pfx_insert(&ix, es[i]);
	}
	assert_true(ix.kmask + 1 >= 20000 && ix.bmask + 1 >= 20000);
	for (i = 0; i < 20000; i += 2)
		pfx_remove(&ix, es[i]);
	for (i = 0; i < 20000; i++) {
		toks(i, t);
		k = key_of(&ix, salt_a, &zero, &m, t);
		if (i % 2)
			assert_ptr_equal(pfx_lookup(&ix, &k, &ns_a, &m, 0, t,
						    TPB), es[i]);
		else
			assert_null(pfx_lookup(&ix, &k, &ns_a, &m, 0, t, TPB));
		assert_true((pfx_by_block(&ix, i) != NULL) == (i % 2));
	}
	assert_int_equal(ix.nentries, 10000);
	pfx_index_fini(&ix);
	free(es);
}

static void lru_order(void **state)
{
	struct pfx_index ix;
	struct pfx_key zero = { 0, 0 }, m, k;
	struct pfx_lru a = { 0 }, b = { 0 };
	struct pfx_entry *e[4];
	uint32_t t[TPB], i;

	(void)state;
	assert_int_equal(pfx_index_init(&ix, 128), 0);
	pfx_model_identity(&m, "m", 2, 2, 64, 1, 0, TPB, 65536);
	assert_int_equal(pfx_index_reserve(&ix, 4), 0);
	for (i = 0; i < 4; i++) {
		toks(i, t);
		k = key_of(&ix, salt_a, &zero, &m, t);
		e[i] = pfx_entry_new(&ix, &k, &ns_a, &owner, &m, 0, i, t, TPB);
		pfx_insert(&ix, e[i]);
	}
	pfx_lru_push(&ix, &a, e[0]);
	pfx_lru_push(&ix, &a, e[1]);
	pfx_lru_push(&ix, &b, e[2]);
	pfx_lru_push(&ix, &a, e[3]);
	assert_int_equal(a.n, 3);
	assert_ptr_equal(pfx_lru_oldest(&a), e[0]);
	assert_true(e[0]->stamp < e[1]->stamp && e[1]->stamp < e[2]->stamp &&
		    e[2]->stamp < e[3]->stamp);
	/* Used again: off the list and back at the head. */
	pfx_lru_del(e[0]);
	assert_ptr_equal(pfx_lru_oldest(&a), e[1]);
	pfx_lru_push(&ix, &a, e[0]);
	assert_ptr_equal(a.head, e[0]);
	assert_ptr_equal(pfx_lru_oldest(&a), e[1]);
	/* Removing an entry takes it off its list. */
	pfx_remove(&ix, e[1]);
	assert_ptr_equal(pfx_lru_oldest(&a), e[3]);
	assert_int_equal(a.n, 2);
	pfx_remove(&ix, e[2]);
	assert_null(pfx_lru_oldest(&b));
	assert_int_equal(b.n, 0);
	pfx_index_fini(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(keys_depend_on_everything),
		cmocka_unit_test(lookup_verifies),
		cmocka_unit_test(forced_collisions),
		cmocka_unit_test(grows_and_removes),
		cmocka_unit_test(lru_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
