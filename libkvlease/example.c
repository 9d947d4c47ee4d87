// SPDX-License-Identifier: MIT
/*
 * kvlease-example - the smallest complete libkvlease client: open a
 * context, declare a KV layout, grow a sequence, write K/V for every token
 * and run one decode step.  Needs a running kvpoold ($KVPOOL_SOCKET or
 * --socket).  Exit 0 on success.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvlease.h"

int main(int argc, char **argv)
{
	struct kvl_opts o;
	struct kvl_ctx *ctx;
	struct kvl_layout l;
	struct kvl_seq *seq;
	struct kvl_status st;
	enum { LAYERS = 2, KVH = 2, HD = 64, QH = 4, NTOK = 100 };
	static float k[NTOK * KVH * HD], v[NTOK * KVH * HD];
	static float q[QH * HD], out[QH * HD];
	int lay, r, i;

	memset(&o, 0, sizeof(o));
	if (argc == 3 && !strcmp(argv[1], "--socket"))
		o.socket_path = argv[2];
	r = kvl_open(&o, &ctx);
	if (r) {
		fprintf(stderr, "kvl_open: %s\n", strerror(-r));
		return 1;
	}
	memset(&l, 0, sizeof(l));
	l.layers = LAYERS;
	l.kv_heads = KVH;
	l.head_dim = HD;
	l.dtype = KVL_DTYPE_BF16;
	l.rope_base = 10000.0f;
	lay = kvl_layout_declare(ctx, &l);
	if (lay < 0) {
		fprintf(stderr, "layout: %s\n", strerror(-lay));
		goto fail;
	}
	r = kvl_seq_create(ctx, lay, &seq);
	if (!r)
		r = kvl_seq_append(seq, NTOK);
	if (r < 0) {
		fprintf(stderr, "sequence: %s\n", strerror(-r));
		goto fail;
	}
	for (i = 0; i < NTOK * KVH * HD; i++) {
		k[i] = sinf((float)i * 0.01f);
		v[i] = cosf((float)i * 0.02f);
	}
	for (i = 0; i < QH * HD; i++)
		q[i] = sinf((float)i * 0.03f);
	for (i = 0; i < LAYERS; i++) {
		r = kvl_seq_write_kv(seq, (uint32_t)i, 0, NTOK, k, v);
		if (r)
			break;
	}
	if (!r)
		r = kvl_seq_decode(&seq, 1, 1, QH, q, 0.0f, out);
	if (r) {
		fprintf(stderr, "data plane: %s\n", strerror(-r));
		goto fail;
	}
	kvl_status(ctx, &st);
	printf("pool %s (%s backend): %u tokens/block, holding %u blocks, "
	       "out[0] = %.5f\n", st.pool, st.backend, l.tokens_per_block,
	       st.held, out[0]);
	kvl_seq_free(seq);
	kvl_close(ctx);
	return 0;
fail:
	kvl_close(ctx);
	return 1;
}
