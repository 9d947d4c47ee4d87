/* SPDX-License-Identifier: MIT */
/*
 * hash128.h - the 128-bit hash of the prefix cache's keys when the build
 * has no libxxhash headers (a GPU machine without -dev packages).
 *
 * It provides the few XXH3 calls daemon/prefix_index.c makes, computed
 * with MurmurHash3_x64_128 (Austin Appleby, public domain) instead: NOT
 * bit-compatible with XXH3, which does not matter, because keys live only
 * in the running daemon's memory and are never compared with keys from
 * another build.  The streaming state buffers its input and hashes it
 * whole at the digest.
 */
#ifndef KVPOOL_HASH128_H
#define KVPOOL_HASH128_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	uint64_t low64, high64;
} XXH128_hash_t;

typedef enum { XXH_OK = 0, XXH_ERROR = 1 } XXH_errorcode;

typedef struct {
	unsigned char *buf;
	size_t len, cap;
} XXH3_state_t;

static inline uint64_t h128_rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t h128_fmix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* MurmurHash3_x64_128 with seed 0 (little-endian loads). */
static inline XXH128_hash_t XXH3_128bits(const void *data, size_t len)
{
	const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
	const unsigned char *p = data;
	unsigned char tail[16];
	uint64_t h1 = 0, h2 = 0, k1, k2;
	size_t i, nblocks = len / 16, rem = len % 16;
	XXH128_hash_t h;

	for (i = 0; i < nblocks; i++) {
		memcpy(&k1, p + 16 * i, 8);
		memcpy(&k2, p + 16 * i + 8, 8);
		k1 *= c1;
		k1 = h128_rotl(k1, 31);
		k1 *= c2;
		h1 ^= k1;
		h1 = h128_rotl(h1, 27);
		h1 += h2;
		h1 = h1 * 5 + 0x52dce729;
		k2 *= c2;
		k2 = h128_rotl(k2, 33);
		k2 *= c1;
		h2 ^= k2;
		h2 = h128_rotl(h2, 31);
		h2 += h1;
		h2 = h2 * 5 + 0x38495ab5;
	}
	memset(tail, 0, sizeof(tail));
	if (rem)
		memcpy(tail, p + 16 * nblocks, rem);
	memcpy(&k1, tail, 8);
	memcpy(&k2, tail + 8, 8);
	if (rem > 8) {
		k2 *= c2;
		k2 = h128_rotl(k2, 33);
		k2 *= c1;
		h2 ^= k2;
	}
	if (rem) {
		k1 *= c1;
		k1 = h128_rotl(k1, 31);
		k1 *= c2;
		h1 ^= k1;
	}
	h1 ^= (uint64_t)len;
	h2 ^= (uint64_t)len;
	h1 += h2;
	h2 += h1;
	h1 = h128_fmix(h1);
	h2 = h128_fmix(h2);
	h1 += h2;
	h2 += h1;
	h.low64 = h1;
	h.high64 = h2;
	return h;
}

static inline XXH3_state_t *XXH3_createState(void)
{
	return calloc(1, sizeof(XXH3_state_t));
}

static inline XXH_errorcode XXH3_freeState(XXH3_state_t *st)
{
	if (st)
		free(st->buf);
	free(st);
	return XXH_OK;
}

static inline XXH_errorcode XXH3_128bits_reset(XXH3_state_t *st)
{
	st->len = 0;
	return XXH_OK;
}

static inline XXH_errorcode XXH3_128bits_update(XXH3_state_t *st,
						const void *data, size_t len)
{
	if (len > st->cap - st->len) {
		size_t cap = st->cap ? st->cap : 256;
		unsigned char *b;

		while (cap - st->len < len)
			cap *= 2;
		b = realloc(st->buf, cap);
		if (!b)
			return XXH_ERROR;
		st->buf = b;
		st->cap = cap;
	}
	if (len)
		memcpy(st->buf + st->len, data, len);
	st->len += len;
	return XXH_OK;
}

static inline XXH128_hash_t XXH3_128bits_digest(const XXH3_state_t *st)
{
	return XXH3_128bits(st->buf ? st->buf : (const unsigned char *)"",
			    st->len);
}

#endif
