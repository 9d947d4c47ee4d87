// SPDX-License-Identifier: MIT
/*
 * test_cluster_value - keys and values of the cluster tier
 * (daemon/cluster_value.c): a value verifies only against the block it
 * was written for; a truncated, garbage, other-model, other-chain,
 * other-token, corrupt or other-namespace value is a verdict, never data.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster_value.h"

#define TPB	16
#define BYTES	4096

static uint8_t salt[PFX_SALT_BYTES] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static uint8_t salt2[PFX_SALT_BYTES] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 11 };
static uint32_t toks[TPB];
static uint8_t payload[BYTES];

static struct kvc_block blk(void)
{
	struct kvc_block b;
	uint32_t i;

	memset(&b, 0, sizeof(b));
	for (i = 0; i < TPB; i++)
		toks[i] = 1000 + i;
	for (i = 0; i < BYTES; i++)
		payload[i] = (uint8_t)(i * 7);
	b.salt = salt;
	b.model.lo = 0x1111;
	b.model.hi = 0x2222;
	b.key.lo = 0xabcdef;
	b.key.hi = 0x123456789abcdef0ULL;
	b.parent.lo = 7;
	b.dtype = 1;
	b.layers = 2;
	b.kv_heads = 2;
	b.head_dim = 64;
	b.tokens_per_block = TPB;
	b.block_bytes = 8192;
	b.payload_bytes = BYTES;
	b.tokens = toks;
	return b;
}

static uint8_t *encode(const struct kvc_block *b, size_t *len)
{
	uint8_t *v;

	*len = kvc_value_bytes(b);
	assert_int_equal(*len, sizeof(struct kvc_hdr) + TPB * 4 + BYTES);
	v = malloc(*len);
	kvc_value_encode(v, b, payload);
	return v;
}

static void test_roundtrip(void **state)
{
	struct kvc_block b = blk();
	const void *p = NULL;
	size_t len;
	uint8_t *v = encode(&b, &len);

	assert_int_equal(kvc_value_check(v, len, &b, &p), KVC_OK);
	assert_ptr_equal(p, v + sizeof(struct kvc_hdr) + TPB * 4);
	assert_memory_equal(p, payload, BYTES);
	free(v);
}

static void test_truncated_and_garbage(void **state)
{
	struct kvc_block b = blk();
	const void *p;
	size_t len, cut;
	uint8_t *v = encode(&b, &len), *g;

	/* a prefix of a value, wherever it is cut */
	for (cut = 0; cut < len; cut += 97)
		assert_int_equal(kvc_value_check(v, cut, &b, &p), KVC_SHORT);
	assert_int_equal(kvc_value_check(v, len - 1, &b, &p), KVC_SHORT);
	assert_int_equal(kvc_value_check(v, 0, &b, &p), KVC_SHORT);
	/* longer than it says */
	g = malloc(len + 1);
	memcpy(g, v, len);
	assert_int_equal(kvc_value_check(g, len + 1, &b, &p), KVC_FORMAT);
	/* garbage of the right size, and short garbage */
	memset(g, 0x5a, len);
	assert_int_equal(kvc_value_check(g, len, &b, &p), KVC_FORMAT);
	assert_int_equal(kvc_value_check("garbage!!", 9, &b, &p), KVC_FORMAT);
	/* another version */
	memcpy(g, v, len);
	((struct kvc_hdr *)g)->version = 2;
	assert_int_equal(kvc_value_check(g, len, &b, &p), KVC_FORMAT);
	free(g);
	free(v);
}

static void test_other_model_chain_tokens(void **state)
{
	struct kvc_block b = blk(), o;
	const void *p;
	size_t len;
	uint8_t *v = encode(&b, &len);

	o = b;
	o.model.hi ^= 1;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_MODEL);
	o = b;
	o.dtype = 2;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_MODEL);
	o = b;
	o.head_dim = 128;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_MODEL);
	o = b;
	o.key.lo ^= 1;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_CHAIN);
	o = b;
	o.parent.hi = 9;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_CHAIN);
	{
		uint32_t t2[TPB];

		memcpy(t2, toks, sizeof(t2));
		t2[TPB - 1]++;
		o = b;
		o.tokens = t2;
		assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_TOKENS);
	}
	free(v);
}

static void test_corrupt_and_namespace(void **state)
{
	struct kvc_block b = blk(), o;
	const void *p;
	size_t len, i;
	uint8_t *v = encode(&b, &len);

	/* one flipped bit anywhere in the payload or the token ids */
	for (i = sizeof(struct kvc_hdr) + TPB * 4; i < len; i += 511) {
		v[i] ^= 0x10;
		assert_int_equal(kvc_value_check(v, len, &b, &p), KVC_SUM);
		v[i] ^= 0x10;
	}
	v[sizeof(struct kvc_hdr) + 3] ^= 1;	/* a token id */
	assert_int_equal(kvc_value_check(v, len, &b, &p), KVC_TOKENS);
	v[sizeof(struct kvc_hdr) + 3] ^= 1;
	((struct kvc_hdr *)v)->sum[1] ^= 4;
	assert_int_equal(kvc_value_check(v, len, &b, &p), KVC_SUM);
	((struct kvc_hdr *)v)->sum[1] ^= 4;
	/* the same block written under another namespace key */
	o = b;
	o.salt = salt2;
	assert_int_equal(kvc_value_check(v, len, &o, &p), KVC_SUM);
	assert_int_equal(kvc_value_check(v, len, &b, &p), KVC_OK);
	free(v);
}

static void test_keys(void **state)
{
	struct kvc_block b = blk();
	char k[KVC_KEY_MAX], h[33];
	struct pfx_key x;

	kvc_key(k, &b);
	assert_string_equal(k, "kvpool:b1:00000000000022220000000000001111:"
			    "l2h2d64t16:bf16:123456789abcdef00000000000abcdef");
	/* no hash tag: blocks spread over the slots */
	assert_null(strchr(k, '{'));
	kvc_hex(h, &b.key);
	assert_int_equal(kvc_unhex(h, 32, &x), 0);
	assert_true(x.lo == b.key.lo && x.hi == b.key.hi);
	assert_int_equal(kvc_unhex(h, 31, &x), -EINVAL);
	h[5] = 'G';
	assert_int_equal(kvc_unhex(h, 32, &x), -EINVAL);
	assert_string_equal(kvc_verdict_name(KVC_SUM), "checksum");
	assert_string_equal(kvc_verdict_name(99), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_truncated_and_garbage),
		cmocka_unit_test(test_other_model_chain_tokens),
		cmocka_unit_test(test_corrupt_and_namespace),
		cmocka_unit_test(test_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
