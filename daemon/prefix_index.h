/* SPDX-License-Identifier: MIT */
/*
 * prefix_index.h - the prefix cache's index: cached blocks by key and by
 * block number, their token ids, and LRU lists of unreferenced blocks.
 *
 * A full block's key is a hash chain: XXH3-128 (libxxhash) of the
 * namespace's salt, the parent block's key (zero for the first block), the
 * model identity and the block's token ids.  A lookup compares everything
 * that went into the key, not only the key: the namespace, the model
 * identity, the token ids and the parent *entry* (its unique id, not its
 * key), so that two different token sequences whose keys collide (at any
 * depth) never share an entry: a collision costs a miss, never wrong data.
 *
 * Pure data structure: no locking, no I/O, no ledger.  daemon/prefix.c
 * owns one index and holds its lock around every call.
 */
#ifndef KVPOOLD_PREFIX_INDEX_H
#define KVPOOLD_PREFIX_INDEX_H

#include <stdbool.h>
#include <stdint.h>

struct pfx_key {
	uint64_t lo, hi;
};

#define PFX_SALT_BYTES	16

struct pfx_lru;

struct pfx_entry {
	struct pfx_key key;
	struct pfx_key pkey;		/* the parent's key (0: first block) */
	uint64_t id;			/* unique for the index's life, > 0 */
	uint64_t parent_id;		/* 0: the first block of a sequence */
	uint64_t stamp;			/* LRU clock when last put on a list */
	const void *ns;			/* namespace (the caller's cookie) */
	void *owner;			/* who is charged (the caller's cookie) */
	struct pfx_key model;		/* model identity */
	uint32_t block;			/* pool block index */
	uint32_t ntok;			/* token ids stored */
	uint32_t refs;			/* references (connections) */
	uint32_t xrefs;			/* of which by other tenants' */
	uint32_t depth;			/* position in its sequence, blocks */
	bool indexed;			/* found by lookups (false: flushed) */
	struct pfx_entry *hnext;	/* key bucket chain */
	struct pfx_entry *bnext;	/* block bucket chain */
	struct pfx_entry *lprev, *lnext; /* on an LRU list (refs == 0) */
	struct pfx_lru *lru;		/* the list it is on, or NULL */
	uint32_t tokens[];
};

/* Unreferenced entries of one owner: head most recent, tail oldest. */
struct pfx_lru {
	struct pfx_entry *head, *tail;
	uint32_t n;
};

struct pfx_index {
	struct pfx_entry **kb;		/* key buckets */
	uint32_t kmask;
	uint32_t nkeyed;		/* entries with indexed set */
	struct pfx_entry **bb;		/* block buckets */
	uint32_t bmask;
	uint32_t nentries;		/* every entry (indexed or not) */
	uint64_t next_id;
	uint64_t clock;
	unsigned int hash_bits;		/* key bits kept (128: all) */
};

int pfx_index_init(struct pfx_index *ix, unsigned int hash_bits);
/* Frees every entry. */
void pfx_index_fini(struct pfx_index *ix);

/* The model identity: name/revision and the layout that stores it. */
void pfx_model_identity(struct pfx_key *out, const char *model,
			uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
			uint32_t dtype, float rope_base,
			uint32_t tokens_per_block, uint64_t block_bytes);

/*
 * key = XXH3-128(salt | parent key | model | tokens[0..ntok)), keeping
 * ix->hash_bits bits.  @scratch holds 48 + 4 * ntok bytes.
 */
void pfx_key_compute(const struct pfx_index *ix, struct pfx_key *out,
		     const uint8_t salt[PFX_SALT_BYTES],
		     const struct pfx_key *parent, const struct pfx_key *model,
		     const uint32_t *tokens, uint32_t ntok, uint8_t *scratch);

/* The indexed entry with everything equal, or NULL. */
struct pfx_entry *pfx_lookup(const struct pfx_index *ix,
			     const struct pfx_key *key, const void *ns,
			     const struct pfx_key *model, uint64_t parent_id,
			     const uint32_t *tokens, uint32_t ntok);

/*
 * A new entry (not yet in the index), with a fresh id; NULL when out of
 * memory.  pfx_entry_free() frees one that was never inserted.
 */
struct pfx_entry *pfx_entry_new(struct pfx_index *ix, const struct pfx_key *key,
				const void *ns, void *owner,
				const struct pfx_key *model, uint64_t parent_id,
				uint32_t block, const uint32_t *tokens,
				uint32_t ntok);
void pfx_entry_free(struct pfx_entry *e);

/* Grow the tables for @more entries ahead of pfx_insert (0 or -ENOMEM). */
int pfx_index_reserve(struct pfx_index *ix, uint32_t more);
/* Insert by key and by block (indexed).  Never fails after a reserve. */
void pfx_insert(struct pfx_index *ix, struct pfx_entry *e);
/* No more lookups find it (it stays found by block). */
void pfx_unindex(struct pfx_index *ix, struct pfx_entry *e);
/* Remove it altogether (unindexing it first if needed) and free it. */
void pfx_remove(struct pfx_index *ix, struct pfx_entry *e);
struct pfx_entry *pfx_by_block(const struct pfx_index *ix, uint32_t block);

/* LRU lists (the entry must be on no list / on @l). */
void pfx_lru_push(struct pfx_index *ix, struct pfx_lru *l,
		  struct pfx_entry *e);
void pfx_lru_del(struct pfx_entry *e);
static inline struct pfx_entry *pfx_lru_oldest(const struct pfx_lru *l)
{
	return l->tail;
}

#endif /* KVPOOLD_PREFIX_INDEX_H */
