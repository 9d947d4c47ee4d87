// SPDX-License-Identifier: MIT
/*
 * test-kvk-layout.c - layout derivation, disjoint placement of rows and
 * scales inside a block, argument checks of every op (-EINVAL), block
 * copy, dtype names, the thread pool.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"
#include "kvkern_internal.h"

static void test_init(void)
{
	struct kvk_layout l;
	uint64_t pt, fx;

	KT_CHECK(kvk_layout_init(&l, 80, 8, 128, KVK_BF16, 16 * 327680) == 0,
		 "llama-70b bf16");
	KT_CHECK(l.bytes_per_token == 327680, "327680 B/token: %llu",
		 (unsigned long long)l.bytes_per_token);
	KT_CHECK(l.tokens_per_block == 16, "16 tokens");
	KT_CHECK(l.used_bytes == l.block_bytes, "fully used");
	KT_CHECK(kvk_layout_init(&l, 80, 8, 128, KVK_FP8, 16 * 327680) == 0,
		 "fp8");
	KT_CHECK(l.tokens_per_block == 31, "fp8: 31 tokens + scales (%u)",
		 l.tokens_per_block);
	KT_CHECK(l.used_bytes <= l.block_bytes, "fits");
	KT_CHECK(kvk_layout_init(&l, 1, 1, 64, KVK_INT4, 4096) == 0, "int4");
	KT_CHECK(l.bytes_per_token == 2 * (32 + 4), "int4 per token %llu",
		 (unsigned long long)l.bytes_per_token);
	KT_CHECK(l.tokens_per_block == 4096 / 72, "int4 tokens %u",
		 l.tokens_per_block);

	KT_CHECK(kvk_layout_init(&l, 1, 1, 48, KVK_BF16, 4096) == -EINVAL,
		 "head_dim 48");
	KT_CHECK(kvk_layout_init(&l, 1, 1, 288, KVK_BF16, 1 << 20) == -EINVAL,
		 "head_dim 288");
	KT_CHECK(kvk_layout_init(&l, 1, 1, 0, KVK_BF16, 4096) == -EINVAL,
		 "head_dim 0");
	KT_CHECK(kvk_layout_init(&l, 1, 1, 64, 0, 4096) == -EINVAL, "dtype 0");
	KT_CHECK(kvk_layout_init(&l, 1, 1, 64, 5, 4096) == -EINVAL, "dtype 5");
	KT_CHECK(kvk_layout_init(&l, 0, 1, 64, KVK_BF16, 4096) == -EINVAL,
		 "0 layers");
	KT_CHECK(kvk_layout_init(&l, 1, 0, 64, KVK_BF16, 4096) == -EINVAL,
		 "0 heads");
	KT_CHECK(kvk_layout_init(NULL, 1, 1, 64, KVK_BF16, 4096) == -EINVAL,
		 "NULL");
	KT_CHECK(kvk_layout_cost(2, 2, 64, KVK_FP8, &pt, &fx) == 0, "cost");
	KT_CHECK(kvk_layout_init(&l, 2, 2, 64, KVK_FP8, pt + fx - 1) ==
		 -EINVAL, "one byte short of a token");
	KT_CHECK(kvk_layout_init(&l, 2, 2, 64, KVK_FP8, pt + fx) == 0 &&
		 l.tokens_per_block == 1, "exactly one token");
}

/* Every byte of every row and scale lies in the block, none overlaps. */
static void test_disjoint(uint32_t dtype)
{
	struct kvk_layout l;
	uint32_t L = 3, H = 2, D = 64, ly, kv, h, t, i, n;
	uint8_t *map;
	int bad = 0;

	kvk_layout_init(&l, L, H, D, dtype, 5000);
	map = calloc(1, l.block_bytes);
	for (ly = 0; ly < L; ly++)
		for (kv = 0; kv < 2; kv++)
			for (h = 0; h < H; h++) {
				for (t = 0; t < l.tokens_per_block; t++) {
					uint64_t o = kvk_row_offset(&l, ly, kv,
								    h, t);

					for (i = 0; i < l.row_bytes; i++)
						bad += o + i >= l.used_bytes ||
						       map[o + i]++;
					if (dtype != KVK_INT4)
						continue;
					o = kvk_scale_offset(&l, ly, kv, h, t);
					n = D / KVK_INT4_GROUP * 2;
					for (i = 0; i < n; i++)
						bad += o + i >= l.used_bytes ||
						       map[o + i]++;
				}
				if (dtype == KVK_FP8 || dtype == KVK_INT8) {
					uint64_t o = kvk_scale_offset(&l, ly,
								      kv, h, 0);

					bad += o % 4 != 0;
					for (i = 0; i < 4; i++)
						bad += o + i >= l.used_bytes ||
						       map[o + i]++;
				}
			}
	for (i = 0; i < l.used_bytes; i++)
		bad += map[i] != 1;
	KT_CHECK(bad == 0, "%s: %d misplaced bytes", kvk_dtype_name(dtype),
		 bad);
	free(map);
}

static void test_args(void)
{
	struct kvk_layout l;
	uint32_t blocks[4] = { 0, 0, 0, 1 }, slots[4] = { 0, 1, 2, 0 };
	uint32_t ctx[2] = { 3, 0 }, bt[4] = { 0, 1, 2, 3 }, i;
	float q[2 * 8 * 64], out[2 * 8 * 64], k[4 * 2 * 64], v[4 * 2 * 64];
	uint8_t *pool;
	struct kvk_decode_args a;
	struct kvk_prefill_args p;

	kvk_layout_init(&l, 2, 2, 64, KVK_INT8, 4096);
	l.pool_blocks = 4;
	pool = calloc(4, l.block_bytes);
	for (i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		k[i] = v[i] = 1.0f;
	for (i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		q[i] = 0.1f;
	KT_CHECK(kvk_write_kv(&l, pool, 0, 4, blocks, slots, k, v) == 0, "w");
	KT_CHECK(kvk_write_kv(&l, pool, 2, 1, blocks, slots, k, v) == -EINVAL,
		 "layer 2 of 2");
	blocks[0] = 4;
	KT_CHECK(kvk_write_kv(&l, pool, 0, 1, blocks, slots, k, v) == -EINVAL,
		 "block beyond pool");
	blocks[0] = 0;
	slots[0] = l.tokens_per_block;
	KT_CHECK(kvk_write_kv(&l, pool, 0, 1, blocks, slots, k, v) == -EINVAL,
		 "slot beyond block");
	slots[0] = 0;
	KT_CHECK(kvk_write_kv(&l, pool, 0, 1, NULL, slots, k, v) == -EINVAL,
		 "NULL blocks");
	KT_CHECK(kvk_write_kv(&l, pool, 0, 0, NULL, NULL, NULL, NULL) == 0,
		 "0 tokens");
	KT_CHECK(kvk_read_kv(&l, pool, 0, 1, blocks, slots, NULL, NULL) ==
		 -EINVAL, "read nothing");

	memset(&a, 0, sizeof(a));
	a.layout = &l;
	a.pool_base = pool;
	a.batch = 2;
	a.q_heads = 8;
	a.max_blocks_per_seq = 2;
	a.q = q;
	a.block_tables = bt;
	a.ctx_lens = ctx;
	a.scale = 0.125f;
	a.out = out;
	memset(out, 0x7f, sizeof(out));
	KT_CHECK(kvk_decode_ref(&a) == 0, "decode_ref");
	KT_CHECK(out[8 * 64] == 0.0f && out[2 * 8 * 64 - 1] == 0.0f,
		 "ctx 0 -> zeros");
	memset(out, 0x7f, sizeof(out));
	KT_CHECK(kvk_decode(&a, NULL) == 0, "decode");
	KT_CHECK(out[8 * 64] == 0.0f && out[2 * 8 * 64 - 1] == 0.0f,
		 "ctx 0 -> zeros (opt)");
	KT_CHECK(fabsf(out[0] - 1.0f) < 0.02f, "value %g", out[0]);
	a.q_heads = 7;
	KT_CHECK(kvk_decode(&a, NULL) == -EINVAL, "q_heads not a multiple of kv_heads");
	a.q_heads = 34;
	KT_CHECK(kvk_decode_ref(&a) == -EINVAL, "GQA 17");
	a.q_heads = 8;
	a.layer = 2;
	KT_CHECK(kvk_decode(&a, NULL) == -EINVAL, "layer");
	a.layer = 0;
	ctx[0] = 2 * l.tokens_per_block + 1;
	KT_CHECK(kvk_decode(&a, NULL) == -EINVAL, "ctx > table");
	ctx[0] = 3;
	bt[2] = 9;		/* seq 1 block 0: ctx 0 reads none: fine */
	KT_CHECK(kvk_decode(&a, NULL) == 0, "unused entries unchecked");
	ctx[1] = 1;
	KT_CHECK(kvk_decode(&a, NULL) == -EINVAL, "block beyond pool");
	KT_CHECK(kvk_decode_ref(&a) == -EINVAL, "block beyond pool (ref)");
	bt[2] = 2;
	a.q = NULL;
	KT_CHECK(kvk_decode(&a, NULL) == -EINVAL, "NULL q");
	a.q = q;
	KT_CHECK(kvk_decode(NULL, NULL) == -EINVAL, "NULL args");

	memset(&p, 0, sizeof(p));
	p.layout = &l;
	p.pool_base = pool;
	p.batch = 2;
	p.q_heads = 8;
	p.max_blocks_per_seq = 2;
	p.n_new = 1;
	p.q = q;
	p.block_tables = bt;
	p.ctx_lens = ctx;
	p.scale = 0.125f;
	p.out = out;
	KT_CHECK(kvk_prefill(&p, NULL) == 0, "prefill");
	p.n_new = 0;
	KT_CHECK(kvk_prefill(&p, NULL) == -EINVAL, "n_new 0");
	p.n_new = 2;
	KT_CHECK(kvk_prefill_ref(&p) == -EINVAL, "ctx < n_new");
	p.n_new = 1;
	p.pad = 1;
	KT_CHECK(kvk_prefill(&p, NULL) == -EINVAL, "pad");
	free(pool);
}

static void test_copy(void)
{
	uint8_t pool[6 * 16];
	uint32_t src[3] = { 0, 1, 4 }, dst[3] = { 1, 2, 4 }, i;

	for (i = 0; i < sizeof(pool); i++)
		pool[i] = (uint8_t)(i / 16);
	/* in order: 1 = 0, then 2 = (new) 1 = 0; 4 -> 4 no-op */
	KT_CHECK(kvk_copy_blocks(pool, 16, 6, src, dst, 3) == 0, "copy");
	KT_CHECK(pool[16] == 0 && pool[47] == 0 && pool[64] == 4 &&
		 pool[80] == 5, "copied in order");
	dst[0] = 6;
	KT_CHECK(kvk_copy_blocks(pool, 16, 6, src, dst, 1) == -EINVAL,
		 "beyond pool");
	KT_CHECK(kvk_copy_blocks(pool, 16, 6, src, dst, 0) == 0, "n 0");
	KT_CHECK(kvk_copy_blocks(NULL, 16, 6, src, dst, 1) == -EINVAL, "NULL");
}

static void count_item(void *ctx, uint32_t i, unsigned int th)
{
	__atomic_add_fetch((uint32_t *)ctx + i, 1, __ATOMIC_RELAXED);
}

static void test_pool(void)
{
	struct kvk_cpu *cpu;
	uint32_t hits[1000] = { 0 }, i, bad = 0, r;

	KT_CHECK(kvk_cpu_init(&cpu, 0) == 0 && cpu, "cpu init");
	KT_CHECK(kvk_cpu_threads(cpu) >= 1, "threads");
	for (r = 0; r < 50; r++)
		kvk_parallel_for(cpu, 1000, count_item, hits);
	for (i = 0; i < 1000; i++)
		bad += hits[i] != 50;
	KT_CHECK(bad == 0, "each item once per round");
	kvk_cpu_free(cpu);
	KT_CHECK(kvk_cpu_init(NULL, 1) == -EINVAL, "NULL");
}

int main(void)
{
	uint32_t dt;

	test_init();
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++)
		test_disjoint(dt);
	test_args();
	test_copy();
	test_pool();
	KT_CHECK(kvk_dtype_from_name("fp8") == KVK_FP8, "name");
	KT_CHECK(kvk_dtype_from_name("INT4") == KVK_INT4, "name case");
	KT_CHECK(kvk_dtype_from_name("fp16") == -EINVAL, "bad name");
	KT_CHECK(!strcmp(kvk_dtype_name(KVK_BF16), "bf16"), "bf16");
	KT_CHECK(kvk_dtype_name(9) == NULL, "bad dtype");
	printf("simd: %s\n", kvk_cpu_simd(NULL));
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
