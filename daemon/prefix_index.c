// SPDX-License-Identifier: MIT
/*
 * prefix_index.c - the prefix cache's index (see prefix_index.h): two
 * chained hash tables (by key, by block) that double when full, and
 * intrusive LRU lists.  Keys are XXH3-128 from Debian's libxxhash.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "prefix_index.h"

#define MIN_BUCKETS	64

static uint32_t bucket_of_key(const struct pfx_index *ix,
			      const struct pfx_key *k)
{
	/* The low word mixes every input bit; with few key bits (tests)
	 * every key falls in the same bucket, as it should. */
	return (uint32_t)(k->lo ^ (k->lo >> 32)) & ix->kmask;
}

static uint32_t bucket_of_block(const struct pfx_index *ix, uint32_t b)
{
	return (b * 0x9e3779b1U) & ix->bmask;
}

int pfx_index_init(struct pfx_index *ix, unsigned int hash_bits)
{
	memset(ix, 0, sizeof(*ix));
	ix->kb = calloc(MIN_BUCKETS, sizeof(*ix->kb));
	ix->bb = calloc(MIN_BUCKETS, sizeof(*ix->bb));
	if (!ix->kb || !ix->bb) {
		free(ix->kb);
		free(ix->bb);
		return -ENOMEM;
	}
	ix->kmask = ix->bmask = MIN_BUCKETS - 1;
	ix->next_id = 1;
	ix->hash_bits = hash_bits > 128 ? 128 : hash_bits;
	return 0;
}

void pfx_index_fini(struct pfx_index *ix)
{
	uint32_t i;

	for (i = 0; ix->bb && i <= ix->bmask; i++) {
		struct pfx_entry *e = ix->bb[i], *n;

		for (; e; e = n) {
			n = e->bnext;
			free(e);
		}
	}
	free(ix->kb);
	free(ix->bb);
	memset(ix, 0, sizeof(*ix));
}

void pfx_model_identity(struct pfx_key *out, const char *model,
			uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
			uint32_t dtype, float rope_base,
			uint32_t tokens_per_block, uint64_t block_bytes)
{
	struct {
		uint32_t layers, kv_heads, head_dim, dtype;
		uint32_t rope_bits, tokens_per_block;
		uint64_t block_bytes;
	} lay;
	XXH3_state_t *st = XXH3_createState();
	XXH128_hash_t h;

	memset(&lay, 0, sizeof(lay));
	lay.layers = layers;
	lay.kv_heads = kv_heads;
	lay.head_dim = head_dim;
	lay.dtype = dtype;
	memcpy(&lay.rope_bits, &rope_base, sizeof(lay.rope_bits));
	lay.tokens_per_block = tokens_per_block;
	lay.block_bytes = block_bytes;
	if (st && XXH3_128bits_reset(st) == XXH_OK &&
	    XXH3_128bits_update(st, &lay, sizeof(lay)) == XXH_OK &&
	    XXH3_128bits_update(st, model, strlen(model) + 1) == XXH_OK) {
		h = XXH3_128bits_digest(st);
	} else {
		/* no memory for a state: hash one buffer instead */
		char buf[sizeof(lay) + 256];
		size_t n = strnlen(model, 255);

		memcpy(buf, &lay, sizeof(lay));
		memcpy(buf + sizeof(lay), model, n);
		buf[sizeof(lay) + n] = 0;
		h = XXH3_128bits(buf, sizeof(lay) + n + 1);
	}
	XXH3_freeState(st);
	out->lo = h.low64;
	out->hi = h.high64;
}

void pfx_key_compute(const struct pfx_index *ix, struct pfx_key *out,
		     const uint8_t salt[PFX_SALT_BYTES],
		     const struct pfx_key *parent, const struct pfx_key *model,
		     const uint32_t *tokens, uint32_t ntok, uint8_t *scratch)
{
	XXH128_hash_t h;
	unsigned int bits = ix->hash_bits;

	memcpy(scratch, salt, PFX_SALT_BYTES);
	memcpy(scratch + 16, parent, sizeof(*parent));
	memcpy(scratch + 32, model, sizeof(*model));
	memcpy(scratch + 48, tokens, (size_t)ntok * sizeof(uint32_t));
	h = XXH3_128bits(scratch, 48 + (size_t)ntok * sizeof(uint32_t));
	out->lo = h.low64;
	out->hi = h.high64;
	/* Test hook: keep only the low @bits bits (0: every key is equal). */
	if (bits < 128) {
		if (bits <= 64) {
			out->hi = 0;
			out->lo = bits == 64 ? out->lo :
				  bits ? out->lo & ((1ULL << bits) - 1) : 0;
		} else {
			out->hi &= (1ULL << (bits - 64)) - 1;
		}
	}
}

static bool key_eq(const struct pfx_key *a, const struct pfx_key *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

struct pfx_entry *pfx_lookup(const struct pfx_index *ix,
			     const struct pfx_key *key, const void *ns,
			     const struct pfx_key *model, uint64_t parent_id,
			     const uint32_t *tokens, uint32_t ntok)
{
	struct pfx_entry *e;

	for (e = ix->kb[bucket_of_key(ix, key)]; e; e = e->hnext) {
		if (!key_eq(&e->key, key) || e->ns != ns ||
		    e->parent_id != parent_id || !key_eq(&e->model, model) ||
		    e->ntok != ntok)
			continue;
		/* Verify the token ids on every hit. */
		if (!memcmp(e->tokens, tokens, (size_t)ntok * sizeof(uint32_t)))
			return e;
	}
	return NULL;
}

struct pfx_entry *pfx_entry_new(struct pfx_index *ix, const struct pfx_key *key,
				const void *ns, void *owner,
				const struct pfx_key *model, uint64_t parent_id,
				uint32_t block, const uint32_t *tokens,
				uint32_t ntok)
{
	struct pfx_entry *e = malloc(sizeof(*e) +
				     (size_t)ntok * sizeof(uint32_t));

	if (!e)
		return NULL;
	memset(e, 0, sizeof(*e));
	e->key = *key;
	e->id = ix->next_id++;
	e->parent_id = parent_id;
	e->ns = ns;
	e->owner = owner;
	e->model = *model;
	e->block = block;
	e->ntok = ntok;
	memcpy(e->tokens, tokens, (size_t)ntok * sizeof(uint32_t));
	return e;
}

void pfx_entry_free(struct pfx_entry *e)
{
	free(e);
}

/* Double the key table (@by_key) or the block table. */
static int rehash(struct pfx_index *ix, bool by_key)
{
	struct pfx_entry ***tab = by_key ? &ix->kb : &ix->bb;
	uint32_t *mask = by_key ? &ix->kmask : &ix->bmask;
	uint32_t oldn = *mask + 1, n = oldn * 2, i;
	struct pfx_entry **nt = calloc(n, sizeof(*nt)), **old = *tab;

	if (!nt)
		return -ENOMEM;
	*tab = nt;
	*mask = n - 1;
	for (i = 0; i < oldn; i++) {
		struct pfx_entry *e = old[i], *next;

		for (; e; e = next) {
			if (by_key) {
				uint32_t j = bucket_of_key(ix, &e->key);

				next = e->hnext;
				e->hnext = nt[j];
				nt[j] = e;
			} else {
				uint32_t j = bucket_of_block(ix, e->block);

				next = e->bnext;
				e->bnext = nt[j];
				nt[j] = e;
			}
		}
	}
	free(old);
	return 0;
}

int pfx_index_reserve(struct pfx_index *ix, uint32_t more)
{
	uint64_t want = (uint64_t)ix->nentries + more;

	while (want > (uint64_t)ix->bmask + 1)
		if (rehash(ix, false))
			return -ENOMEM;
	while (want > (uint64_t)ix->kmask + 1)
		if (rehash(ix, true))
			return -ENOMEM;
	return 0;
}

void pfx_insert(struct pfx_index *ix, struct pfx_entry *e)
{
	uint32_t k = bucket_of_key(ix, &e->key), b = bucket_of_block(ix, e->block);

	e->hnext = ix->kb[k];
	ix->kb[k] = e;
	e->bnext = ix->bb[b];
	ix->bb[b] = e;
	e->indexed = true;
	ix->nkeyed++;
	ix->nentries++;
}

void pfx_unindex(struct pfx_index *ix, struct pfx_entry *e)
{
	struct pfx_entry **pp;

	if (!e->indexed)
		return;
	for (pp = &ix->kb[bucket_of_key(ix, &e->key)]; *pp; pp = &(*pp)->hnext)
		if (*pp == e) {
			*pp = e->hnext;
			break;
		}
	e->hnext = NULL;
	e->indexed = false;
	ix->nkeyed--;
}

void pfx_remove(struct pfx_index *ix, struct pfx_entry *e)
{
	struct pfx_entry **pp;

	pfx_unindex(ix, e);
	if (e->lru)
		pfx_lru_del(e);
	for (pp = &ix->bb[bucket_of_block(ix, e->block)]; *pp;
	     pp = &(*pp)->bnext)
		if (*pp == e) {
			*pp = e->bnext;
			break;
		}
	ix->nentries--;
	free(e);
}

struct pfx_entry *pfx_by_block(const struct pfx_index *ix, uint32_t block)
{
	struct pfx_entry *e;

	for (e = ix->bb[bucket_of_block(ix, block)]; e; e = e->bnext)
		if (e->block == block)
			return e;
	return NULL;
}

void pfx_lru_push(struct pfx_index *ix, struct pfx_lru *l, struct pfx_entry *e)
{
	e->stamp = ++ix->clock;
	e->lprev = NULL;
	e->lnext = l->head;
	if (l->head)
		l->head->lprev = e;
	else
		l->tail = e;
	l->head = e;
	e->lru = l;
	l->n++;
}

void pfx_lru_del(struct pfx_entry *e)
{
	struct pfx_lru *l = e->lru;

	if (!l)
		return;
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		l->head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		l->tail = e->lprev;
	e->lprev = e->lnext = NULL;
	e->lru = NULL;
	l->n--;
}
