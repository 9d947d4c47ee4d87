// SPDX-License-Identifier: MIT
/*
 * test-kvk-nan.c - NaN in the cache, per documented behaviour: BF16 and
 * FP8 store NaN, and attention over it yields NaN for exactly the query
 * heads of that kv head in that sequence (scalar and optimised path
 * alike); INT8/INT4 store NaN as 0, so every output stays finite.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvk_test.h"

static void run(uint32_t dtype, uint32_t kv, struct kvk_cpu *cpu)
{
	uint32_t ctx[2] = { 40, 40 }, H = 2, G = 2, D = 64, b, h, d, p;
	uint32_t stores_nan = dtype == KVK_BF16 || dtype == KVK_FP8;
	struct kt_batch kb;
	float q[2 * 4 * 64], out[2][2 * 4 * 64], *x;
	uint32_t blk, slot, pass;

	KT_CHECK(kt_batch_init(&kb, 1, H, D, dtype, 16, 2, ctx, G, 0) == 0,
		 "init");
	for (d = 0; d < sizeof(q) / sizeof(q[0]); d++)
		q[d] = kt_gauss();
	/* poison position 21 of sequence 1, kv head 1, element 5 of K or V */
	p = 21;
	blk = kb.tables[1 * kb.mbps + p / 16];
	slot = p % 16;
	x = (kv ? kb.v[1] : kb.k[1]) + ((size_t)p * H + 1) * D;
	x[5] = NAN;
	KT_CHECK(kvk_write_kv(&kb.l, kb.pool, 0, 1, &blk, &slot,
			      kb.k[1] + (size_t)p * H * D,
			      kb.v[1] + (size_t)p * H * D) == 0, "write");
	for (pass = 0; pass < 2; pass++) {
		struct kvk_decode_args a = {
			.layout = &kb.l, .pool_base = kb.pool, .batch = 2,
			.q_heads = H * G, .max_blocks_per_seq = kb.mbps,
			.q = q, .block_tables = kb.tables, .ctx_lens = kb.ctx,
			.scale = 0.125f, .out = out[pass],
		};
		KT_CHECK((pass ? kvk_decode(&a, cpu) : kvk_decode_ref(&a)) == 0,
			 "decode");
	}
	for (pass = 0; pass < 2; pass++)
		for (b = 0; b < 2; b++)
			for (h = 0; h < H * G; h++) {
				int want = stores_nan && b == 1 && h / G == 1;
				int nan = 0;

				for (d = 0; d < D; d++)
					nan |= isnan(out[pass][(b * H * G + h) *
							       D + d]);
				KT_CHECK(nan == want, "%s %s pass %u seq %u head "
					 "%u: NaN %d, expected %d",
					 kvk_dtype_name(dtype), kv ? "V" : "K",
					 pass, b, h, nan, want);
			}
	kt_batch_free(&kb);
}

int main(void)
{
	struct kvk_cpu *cpu;
	uint32_t dt, kv;

	if (kvk_cpu_init(&cpu, 2))
		return 1;
	for (dt = KVK_BF16; dt <= KVK_INT4; dt++)
		for (kv = 0; kv < 2; kv++)
			run(dt, kv, cpu);
	kvk_cpu_free(cpu);
	printf("%d failures\n", kt_failures);
	return kt_failures ? 1 : 0;
}
