// SPDX-License-Identifier: MIT
/*
 * cluster_value.c - keys and values of prefix blocks in the cluster tier:
 * encoding, and the verification every fetched value goes through.  See
 * cluster_value.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#ifdef KVD_HAVE_XXHASH
#include <xxhash.h>
#else
#include "hash128.h"
#endif

#include "cluster_value.h"

static const char *const verdicts[KVC_NVERDICTS] = {
	"ok", "short", "format", "model", "chain", "tokens", "checksum",
};

const char *kvc_verdict_name(int v)
{
	return v >= 0 && v < KVC_NVERDICTS ? verdicts[v] : "?";
}

static const char *dtype_name(uint32_t d)
{
	static const char *const n[] = { "?", "bf16", "fp8", "int8", "int4" };

	return d < sizeof(n) / sizeof(n[0]) ? n[d] : "?";
}

void kvc_hex(char out[33], const struct pfx_key *k)
{
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)k->hi,
		 (unsigned long long)k->lo);
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int kvc_unhex(const char *s, size_t len, struct pfx_key *k)
{
	uint64_t w[2] = { 0, 0 };
	size_t i;

	if (len != 32)
		return -EINVAL;
	for (i = 0; i < 32; i++) {
		int v = nibble(s[i]);

		if (v < 0)
			return -EINVAL;
		w[i / 16] = (w[i / 16] << 4) | (uint64_t)v;
	}
	k->hi = w[0];
	k->lo = w[1];
	return 0;
}

void kvc_namespace_salt(const void *key, size_t len,
			uint8_t salt[PFX_SALT_BYTES])
{
	static const char dom[] = "kvpool cluster namespace key v1";
	XXH3_state_t *st = XXH3_createState();
	XXH128_hash_t h;

	memset(salt, 0, PFX_SALT_BYTES);
	if (!st)
		return;
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, dom, sizeof(dom));
	XXH3_128bits_update(st, key, len);
	h = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	memcpy(salt, &h.low64, 8);
	memcpy(salt + 8, &h.high64, 8);
}

void kvc_key(char out[KVC_KEY_MAX], const struct kvc_block *b)
{
	char m[33], k[33];

	kvc_hex(m, &b->model);
	kvc_hex(k, &b->key);
	snprintf(out, KVC_KEY_MAX, "kvpool:b1:%s:l%uh%ud%ut%u:%s:%s", m,
		 b->layers, b->kv_heads, b->head_dim, b->tokens_per_block,
		 dtype_name(b->dtype), k);
}

size_t kvc_value_bytes(const struct kvc_block *b)
{
	return sizeof(struct kvc_hdr) +
	       (size_t)b->tokens_per_block * sizeof(uint32_t) +
	       (size_t)b->payload_bytes;
}

static void fill_hdr(struct kvc_hdr *h, const struct kvc_block *b)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KVC_MAGIC, sizeof(h->magic));
	h->version = KVC_VERSION;
	h->hdr_bytes = sizeof(*h);
	h->model[0] = b->model.lo;
	h->model[1] = b->model.hi;
	h->key[0] = b->key.lo;
	h->key[1] = b->key.hi;
	h->parent[0] = b->parent.lo;
	h->parent[1] = b->parent.hi;
	h->dtype = b->dtype;
	h->layers = b->layers;
	h->kv_heads = b->kv_heads;
	h->head_dim = b->head_dim;
	h->tokens_per_block = b->tokens_per_block;
	h->ntok = b->tokens_per_block;
	h->block_bytes = b->block_bytes;
	h->payload_bytes = b->payload_bytes;
}

/* XXH3-128(salt | header with sum 0 | tokens | payload) */
static void checksum(uint64_t out[2], const uint8_t *salt,
		     const struct kvc_hdr *h, const void *tokens, size_t tlen,
		     const void *payload, size_t plen)
{
	struct kvc_hdr z = *h;
	XXH3_state_t *st = XXH3_createState();
	XXH128_hash_t x;

	z.sum[0] = z.sum[1] = 0;
	if (!st) {
		/* never true data: a value cannot verify without memory */
		out[0] = out[1] = ~0ULL;
		return;
	}
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, salt, PFX_SALT_BYTES);
	XXH3_128bits_update(st, &z, sizeof(z));
	XXH3_128bits_update(st, tokens, tlen);
	XXH3_128bits_update(st, payload, plen);
	x = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	out[0] = x.low64;
	out[1] = x.high64;
}

void kvc_value_encode(void *out, const struct kvc_block *b,
		      const void *payload)
{
	struct kvc_hdr h;
	size_t tlen = (size_t)b->tokens_per_block * sizeof(uint32_t);
	uint8_t *o = out;

	fill_hdr(&h, b);
	checksum(h.sum, b->salt, &h, b->tokens, tlen, payload,
		 (size_t)b->payload_bytes);
	memcpy(o, &h, sizeof(h));
	memcpy(o + sizeof(h), b->tokens, tlen);
	memcpy(o + sizeof(h) + tlen, payload, (size_t)b->payload_bytes);
}

int kvc_value_check(const void *buf, size_t len, const struct kvc_block *b,
		    const void **payload)
{
	const uint8_t *p = buf;
	struct kvc_hdr h;
	uint64_t sum[2];
	size_t tlen;

	if (len < sizeof(h))
		return len >= 8 && memcmp(p, KVC_MAGIC, 8) ? KVC_FORMAT :
		       KVC_SHORT;
	memcpy(&h, p, sizeof(h));
	if (memcmp(h.magic, KVC_MAGIC, sizeof(h.magic)) ||
	    h.version != KVC_VERSION || h.hdr_bytes != sizeof(h) ||
	    h.reserved || h.ntok != h.tokens_per_block)
		return KVC_FORMAT;
	if (h.model[0] != b->model.lo || h.model[1] != b->model.hi ||
	    h.dtype != b->dtype || h.layers != b->layers ||
	    h.kv_heads != b->kv_heads || h.head_dim != b->head_dim ||
	    h.tokens_per_block != b->tokens_per_block ||
	    h.block_bytes != b->block_bytes ||
	    h.payload_bytes != b->payload_bytes)
		return KVC_MODEL;
	if (h.key[0] != b->key.lo || h.key[1] != b->key.hi ||
	    h.parent[0] != b->parent.lo || h.parent[1] != b->parent.hi)
		return KVC_CHAIN;
	tlen = (size_t)h.ntok * sizeof(uint32_t);
	if (len != sizeof(h) + tlen + h.payload_bytes)
		return len < sizeof(h) + tlen + h.payload_bytes ? KVC_SHORT :
		       KVC_FORMAT;
	if (memcmp(p + sizeof(h), b->tokens, tlen))
		return KVC_TOKENS;
	checksum(sum, b->salt, &h, p + sizeof(h), tlen, p + sizeof(h) + tlen,
		 (size_t)h.payload_bytes);
	if (sum[0] != h.sum[0] || sum[1] != h.sum[1])
		return KVC_SUM;
	*payload = p + sizeof(h) + tlen;
	return KVC_OK;
}
