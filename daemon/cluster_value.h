/* SPDX-License-Identifier: MIT */
/*
 * cluster_value.h - the keys and values of prefix blocks in the cluster
 * tier (Documentation/cluster.rst, "Keys and values").
 *
 * Key:   kvpool:b1:<model>:<layout>:<dtype>:<chain key>
 *        model and chain key in 32 hex digits, layout "l<layers>h<kv
 *        heads>d<head dim>t<tokens per block>", dtype "bf16", "fp8",
 *        "int8" or "int4".  No hash tag: a chain's blocks spread over
 *        every master, so one pipelined fetch reads from all of them.
 * Value: a header (struct kvc_hdr, little-endian), the block's token ids
 *        (u32 each), then the block's bytes up to its layout's used
 *        bytes.  The header's checksum is XXH3-128 over the namespace
 *        key, the header (checksum field zero), the token ids and the
 *        bytes.
 *
 * kvc_value_check() verifies everything a value claims against what the
 * caller expects (magic, version, sizes, model identity, chain and parent
 * keys, layout, dtype, token ids, checksum): anything else is a verdict
 * other than KVC_OK, never data.  Pure code: no I/O, no locks.
 */
#ifndef KVPOOL_CLUSTER_VALUE_H
#define KVPOOL_CLUSTER_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "prefix_index.h"

#define KVC_MAGIC	"KVPOOLB1"
#define KVC_VERSION	1
#define KVC_KEY_MAX	128

struct kvc_hdr {
	char magic[8];			/* KVC_MAGIC, no NUL */
	uint32_t version;		/* KVC_VERSION */
	uint32_t hdr_bytes;		/* sizeof(struct kvc_hdr) */
	uint64_t model[2];		/* model identity (lo, hi) */
	uint64_t key[2];		/* this block's chain key */
	uint64_t parent[2];		/* the previous block's (0: first) */
	uint32_t dtype;			/* enum kvk_dtype */
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t tokens_per_block;
	uint32_t ntok;			/* token ids that follow */
	uint64_t block_bytes;		/* the pool's block size */
	uint64_t payload_bytes;		/* bytes that follow the token ids */
	uint64_t sum[2];		/* XXH3-128, see above */
	uint64_t reserved;		/* zero */
};

/* What a block is: what a fetch expects, what a store writes. */
struct kvc_block {
	const uint8_t *salt;		/* the namespace key, PFX_SALT_BYTES */
	struct pfx_key model, key, parent;
	uint32_t dtype, layers, kv_heads, head_dim, tokens_per_block;
	uint64_t block_bytes, payload_bytes;
	const uint32_t *tokens;		/* tokens_per_block of them */
};

enum kvc_verdict {
	KVC_OK = 0,
	KVC_SHORT,		/* shorter than its header says (truncated) */
	KVC_FORMAT,		/* not a value of this format or version */
	KVC_MODEL,		/* another model, layout or dtype */
	KVC_CHAIN,		/* another chain or parent key */
	KVC_TOKENS,		/* other token ids */
	KVC_SUM,		/* checksum mismatch (corrupt, or another
				 * namespace key) */
	KVC_NVERDICTS,
};

/* "ok", "short", "format", "model", "chain", "tokens", "checksum". */
const char *kvc_verdict_name(int v);

/*
 * A tenant's namespace key (the bytes of its key file) as the salt of its
 * prefix-cache keys: XXH3-128 of "kvpool cluster namespace key v1", its
 * NUL and the key.  Every node and router derives the same salt.
 */
void kvc_namespace_salt(const void *key, size_t len,
			uint8_t salt[PFX_SALT_BYTES]);
/* The key of a block (NUL-terminated; out has KVC_KEY_MAX bytes). */
void kvc_key(char out[KVC_KEY_MAX], const struct kvc_block *b);
/* Bytes of a value. */
size_t kvc_value_bytes(const struct kvc_block *b);
/* Write the value of b with payload (payload_bytes) into out. */
void kvc_value_encode(void *out, const struct kvc_block *b,
		      const void *payload);
/* Verify a value against b: KVC_OK with *payload set, or the verdict. */
int kvc_value_check(const void *buf, size_t len, const struct kvc_block *b,
		    const void **payload);

/* 32 hex digits of a key (hi then lo), NUL-terminated (33 bytes). */
void kvc_hex(char out[33], const struct pfx_key *k);
/* And back: 0, or -EINVAL. */
int kvc_unhex(const char *s, size_t len, struct pfx_key *k);

#endif /* KVPOOL_CLUSTER_VALUE_H */
