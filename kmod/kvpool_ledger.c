// SPDX-License-Identifier: GPL-2.0
/*
 * kvpool ledger core: pools, tenants, leases and the rules of DESIGN 2.1.
 *
 * Builds in the kernel (kvpool.ko) and in user space (kvpoold's in-process
 * ledger, the unit tests) through kvpool_ledger_user.h.  See the header for
 * the locking contract and the data structures.
 */
#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/string.h>
#include <linux/bitops.h>
#include <linux/minmax.h>
#endif

#include "kvpool_ledger.h"

#define BITS_PER_WORD	64
#define NO_SLOT		U32_MAX
/*
 * owner_of[] of a block granted by kvpool_lease_grant_pending() and not yet
 * committed: charged to its lease, but neither releasable nor checkable.
 */
#define OWNER_PENDING	(1U << 31)
#define OWNER_SLOT(v)	((v) & ~OWNER_PENDING)

static void lease_close_finish(struct kvpool_lease *lease);
static int lease_free_all(struct kvpool_lease *lease, bool pending);

/* ------------------------------------------------------------------ */
/* Free-block bitmap                                                    */
/* ------------------------------------------------------------------ */

static int bm_alloc(struct kvpool_pool *pool)
{
	u32 n = pool->capacity, l = 0;

	do {
		u32 words = DIV_ROUND_UP(n, BITS_PER_WORD);

		if (l >= ARRAY_SIZE(pool->levels))
			return -EINVAL;
		pool->levels[l] = kvcalloc(words, sizeof(u64), GFP_KERNEL);
		if (!pool->levels[l])
			return -ENOMEM;
		pool->level_words[l] = words;
		n = words;
		l++;
	} while (n > 1);
	pool->nlevels = l;
	return 0;
}

static void bm_free(struct kvpool_pool *pool)
{
	u32 l;

	for (l = 0; l < ARRAY_SIZE(pool->levels); l++) {
		kvfree(pool->levels[l]);
		pool->levels[l] = NULL;
	}
}

/* Mark block b free (set its bit and its ancestors' bits). */
static void bm_set(struct kvpool_pool *pool, u32 b)
{
	u32 l;

	for (l = 0; l < pool->nlevels; l++) {
		u64 *w = &pool->levels[l][b / BITS_PER_WORD];
		u64 was = *w;

		*w = was | (1ULL << (b % BITS_PER_WORD));
		if (was)
			break;
		b /= BITS_PER_WORD;
	}
}

/* Word `word` of level 0 became zero: clear it in the levels above. */
static void bm_clear_up(struct kvpool_pool *pool, u32 word);

/* Take free block b (clear its bit, and its ancestors' when they empty). */
static void bm_clear(struct kvpool_pool *pool, u32 b)
{
	u64 *w = &pool->levels[0][b / BITS_PER_WORD];

	*w &= ~(1ULL << (b % BITS_PER_WORD));
	if (!*w)
		bm_clear_up(pool, b / BITS_PER_WORD);
}

static void bm_clear_up(struct kvpool_pool *pool, u32 word)
{
	u32 l;

	for (l = 1; l < pool->nlevels; l++) {
		u64 *w = &pool->levels[l][word / BITS_PER_WORD];

		*w &= ~(1ULL << (word % BITS_PER_WORD));
		if (*w)
			break;
		word /= BITS_PER_WORD;
	}
}

/* Lowest free block, or NO_SLOT if none. */
static u32 bm_first(const struct kvpool_pool *pool)
{
	u32 l = pool->nlevels - 1;
	u64 w = pool->levels[l][0];
	u32 i;

	if (!w)
		return NO_SLOT;
	i = __ffs64(w);
	while (l-- > 0)
		i = i * BITS_PER_WORD + __ffs64(pool->levels[l][i]);
	return i;
}

/* Are all blocks in [from, to) free? */
static bool bm_range_free(const struct kvpool_pool *pool, u32 from, u32 to)
{
	const u64 *l0 = pool->levels[0];

	while (from < to) {
		u32 bit = from % BITS_PER_WORD;
		u32 n = min_t(u32, BITS_PER_WORD - bit, to - from);
		u64 mask = (n == BITS_PER_WORD ? ~0ULL : ((1ULL << n) - 1)) << bit;

		if ((l0[from / BITS_PER_WORD] & mask) != mask)
			return false;
		from += n;
	}
	return true;
}

/*
 * Take the `count` lowest free blocks and mark them `mark` in owner_of[]
 * (slot + 1, with OWNER_PENDING for a pending grant); the caller has
 * checked that at least `count` free blocks lie below pool->backed.
 */
static void bm_take(struct kvpool_pool *pool, u32 mark, u32 count, u32 *out)
{
	u64 *l0 = pool->levels[0];
	u32 k = 0;

	while (k < count) {
		u32 b = bm_first(pool);
		u32 wi = b / BITS_PER_WORD;
		u64 w = l0[wi];

		while (w && k < count) {
			u32 blk = wi * BITS_PER_WORD + __ffs64(w);

			w &= w - 1;
			pool->owner_of[blk] = mark;
			out[k++] = blk;
		}
		l0[wi] = w;
		if (!w)
			bm_clear_up(pool, wi);
	}
}

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

int kvpool_name_valid(const char *name)
{
	size_t i, len = strnlen(name, KVPOOL_NAME_LEN);

	if (len == 0 || len >= KVPOOL_NAME_LEN)
		return -EINVAL;
	for (i = 0; i < len; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '_' && c != '-' && c != '.')))
			return -EINVAL;
	}
	return 0;
}

static u32 tenant_unmet(const struct kvpool_tenant *t)
{
	return t->cur < t->min ? t->min - t->cur : 0;
}

static u32 tenant_room(const struct kvpool_tenant *t)
{
	if (t->max == KVPOOL_UNLIMITED)
		return U32_MAX;
	return t->cur < t->max ? t->max - t->cur : 0;
}

static void tenant_charge(struct kvpool_tenant *t, u32 n)
{
	struct kvpool_pool *pool = t->pool;

	pool->unmet_min -= tenant_unmet(t);
	t->cur += n;
	pool->unmet_min += tenant_unmet(t);
	if (t->cur > t->peak)
		t->peak = t->cur;
}

static void tenant_uncharge(struct kvpool_tenant *t, u32 n)
{
	struct kvpool_pool *pool = t->pool;

	pool->unmet_min -= tenant_unmet(t);
	t->cur -= n;
	pool->unmet_min += tenant_unmet(t);
}

static void wake_waiters(struct kvpool_pool *pool)
{
	if (pool->ops && pool->ops->waiters_wake)
		pool->ops->waiters_wake(pool);
}

static void owned(struct kvpool_pool *pool, const u32 *blocks, u32 n,
		  u64 lease_id)
{
	if (n && pool->ops && pool->ops->blocks_owned)
		pool->ops->blocks_owned(pool, blocks, n, lease_id);
}

static void wake_owner(struct kvpool_pool *pool)
{
	if (pool->ops && pool->ops->owner_wake)
		pool->ops->owner_wake(pool);
}

static void set_reclaim(struct kvpool_lease *lease, u32 target)
{
	struct kvpool_pool *pool = lease->pool;

	if (lease->reclaim_target == target)
		return;
	lease->reclaim_target = target;
	if (pool->ops && pool->ops->reclaim_wake)
		pool->ops->reclaim_wake(lease);
}

/*
 * Generate an event: a new sequence number, the observers, and (for the
 * types the owner reads) the owner's queue.  @slot is the coalescing slot
 * for GROW/IDLE/RECLAIM, NULL for observer-only events.
 */
static void emit(struct kvpool_pool *pool, u32 type, u32 arg, u64 lease_id,
		 u32 blocks, const char *tenant, struct kvpool_event *slot)
{
	struct kvpool_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = type;
	ev.arg = arg;
	ev.seq = ++pool->seq;
	ev.lease_id = lease_id;
	ev.blocks = blocks;
	if (tenant)
		strscpy(ev.tenant, tenant, sizeof(ev.tenant));
	if (pool->ops && pool->ops->observe)
		pool->ops->observe(pool, &ev);
	if (slot && pool->owner) {
		*slot = ev;
		wake_owner(pool);
	}
}

/* ------------------------------------------------------------------ */
/* Pools                                                                */
/* ------------------------------------------------------------------ */

int kvpool_pool_create(const struct kvpool_pool_params *p,
		       const struct kvpool_ledger_ops *ops, void *host,
		       void *owner, struct kvpool_pool **out)
{
	struct kvpool_pool *pool;
	u32 b;
	int ret;

	if (kvpool_name_valid(p->name))
		return -EINVAL;
	if (!p->block_bytes || p->block_bytes % 256 ||
	    p->block_bytes > (1ULL << 30))
		return -EINVAL;
	if (!p->capacity || p->capacity > KVPOOL_MAX_CAPACITY)
		return -EINVAL;
	if (!p->chunk_blocks || p->chunk_blocks > p->capacity)
		return -EINVAL;

	pool = kzalloc(sizeof(*pool), GFP_KERNEL);
	if (!pool)
		return -ENOMEM;
	strscpy(pool->name, p->name, sizeof(pool->name));
	pool->block_bytes = p->block_bytes;
	pool->capacity = p->capacity;
	pool->chunk_blocks = p->chunk_blocks;
	pool->default_max = p->default_max;
	pool->epoch = 1;
	pool->next_lease_id = 1;
	pool->owner = owner;
	pool->ops = ops;
	pool->host = host;
	INIT_LIST_HEAD(&pool->tenants);
	INIT_LIST_HEAD(&pool->leases);
	INIT_LIST_HEAD(&pool->closed);

	ret = bm_alloc(pool);
	if (ret)
		goto err;
	ret = -ENOMEM;
	pool->owner_of = kvcalloc(p->capacity, sizeof(u32), GFP_KERNEL);
	if (!pool->owner_of)
		goto err;
	for (b = 0; b < p->capacity; b++)
		bm_set(pool, b);
	*out = pool;
	return 0;
err:
	bm_free(pool);
	kfree(pool);
	return ret;
}

static void tenant_free(struct kvpool_tenant *t)
{
	struct kvpool_pool *pool = t->pool;

	pool->unmet_min -= tenant_unmet(t);
	pool->ntenants--;
	list_del(&t->node);
	if (pool->ops && pool->ops->tenant_removed)
		pool->ops->tenant_removed(t);
	kfree(t);
}

static void closed_flush(struct kvpool_pool *pool)
{
	struct kvpool_lease *l, *n;

	list_for_each_entry_safe(l, n, &pool->closed, pool_node) {
		list_del(&l->pool_node);
		kfree(l);
	}
	pool->nclosed = 0;
	memset(&pool->closed_many_ev, 0, sizeof(pool->closed_many_ev));
	memset(&pool->grow_ev, 0, sizeof(pool->grow_ev));
	memset(&pool->idle_ev, 0, sizeof(pool->idle_ev));
	memset(&pool->reclaim_ev, 0, sizeof(pool->reclaim_ev));
	memset(&pool->short_ev, 0, sizeof(pool->short_ev));
}

void kvpool_pool_destroy(struct kvpool_pool *pool)
{
	struct kvpool_lease *l, *ln;
	struct kvpool_tenant *t, *tn;

	list_for_each_entry_safe(l, ln, &pool->leases, pool_node) {
		list_del(&l->pool_node);
		list_del(&l->tenant_node);
		kfree(l);
	}
	closed_flush(pool);
	list_for_each_entry_safe(t, tn, &pool->tenants, node)
		tenant_free(t);
	kvfree(pool->owner_of);
	kvfree(pool->slots);
	kvfree(pool->slot_free);
	bm_free(pool);
	kfree(pool);
}

int kvpool_owner_attach(struct kvpool_pool *pool, void *owner)
{
	if (pool->owner)
		return -EBUSY;
	pool->owner = owner;
	pool->epoch++;
	pool->grow_asked = 0;
	emit(pool, KVPOOL_EVENT_OWNER, KVPOOL_STATE_LIVE, 0, pool->backed,
	     NULL, NULL);
	/* Waiters retry: those needing a grow post it to the new owner. */
	wake_waiters(pool);
	return 0;
}

void kvpool_owner_detach(struct kvpool_pool *pool)
{
	struct kvpool_lease *l, *n;

	pool->owner = NULL;
	/* The owner's operations died with it: nothing stays pinned. */
	list_for_each_entry_safe(l, n, &pool->leases, pool_node) {
		l->pins = 0;
		if (l->closing)
			lease_close_finish(l);
	}
	/* The next owner rebuilds from a snapshot: pending events go. */
	closed_flush(pool);
	emit(pool, KVPOOL_EVENT_OWNER, KVPOOL_STATE_ORPHANED, 0, pool->backed,
	     NULL, NULL);
	wake_waiters(pool);
}

static bool backed_value_ok(const struct kvpool_pool *pool, u32 backed)
{
	return backed == pool->capacity || backed % pool->chunk_blocks == 0;
}

int kvpool_pool_grow(struct kvpool_pool *pool, u32 backed, u32 flags)
{
	if (flags & ~KVPOOL_GROW_FLAGS)
		return -EINVAL;
	if (flags & KVPOOL_GROW_FAILED) {
		if (backed)
			return -EINVAL;
		pool->grow_fail_seq++;
		pool->grow_asked = 0;
		memset(&pool->grow_ev, 0, sizeof(pool->grow_ev));
		wake_waiters(pool);
		return 0;
	}
	if (backed <= pool->backed || backed > pool->capacity ||
	    !backed_value_ok(pool, backed))
		return -EINVAL;
	pool->backed = backed;
	if (pool->grow_ev.seq && pool->grow_ev.blocks <= backed)
		memset(&pool->grow_ev, 0, sizeof(pool->grow_ev));
	emit(pool, KVPOOL_EVENT_BACKED, 0, 0, backed, NULL, NULL);
	wake_waiters(pool);
	return 0;
}

u32 kvpool_pool_shrink_floor(struct kvpool_pool *pool)
{
	const u64 *l0 = pool->levels[0];
	u32 top = pool->backed, floor;

	/* Highest leased block below backed, scanning whole words down. */
	while (top > 0) {
		u32 b = top - 1;
		u32 bit = b % BITS_PER_WORD;
		u64 mask = bit == 63 ? ~0ULL : ((1ULL << (bit + 1)) - 1);
		u64 leased = ~l0[b / BITS_PER_WORD] & mask;

		if (leased) {
			top = (b / BITS_PER_WORD) * BITS_PER_WORD +
			      (63 - __builtin_clzll(leased)) + 1;
			break;
		}
		top = b - bit;
	}
	floor = DIV_ROUND_UP(top, pool->chunk_blocks) * pool->chunk_blocks;
	return min(floor, pool->backed);
}

int kvpool_pool_shrink(struct kvpool_pool *pool, u32 backed)
{
	if (backed >= pool->backed || !backed_value_ok(pool, backed))
		return -EINVAL;
	if (!bm_range_free(pool, backed, pool->backed))
		return -EBUSY;
	pool->backed = backed;
	/* Targets asked before are above what is backed now: ask again. */
	pool->grow_asked = min(pool->grow_asked, backed);
	emit(pool, KVPOOL_EVENT_BACKED, 0, 0, backed, NULL, NULL);
	return 0;
}

int kvpool_snapshot(struct kvpool_pool *pool,
		    struct kvpool_lease_info *leases, u32 leases_cap,
		    struct kvpool_block_owner *blocks, u32 blocks_cap,
		    struct kvpool_snapshot *out)
{
	struct kvpool_lease *l;
	u32 i = 0, b;

	out->leases = pool->nleases;
	out->blocks = pool->used;
	out->backed = pool->backed;
	out->epoch = pool->epoch;
	if (!leases && !blocks)
		return 0;
	if ((!leases && pool->nleases) || (!blocks && pool->used) ||
	    leases_cap < pool->nleases || blocks_cap < pool->used)
		return -ENOSPC;

	list_for_each_entry(l, &pool->leases, pool_node) {
		struct kvpool_lease_info *li = &leases[i++];

		memset(li, 0, sizeof(*li));
		li->lease_id = l->id;
		li->blocks = l->held;
		li->uid = l->uid;
		li->pid = l->pid;
		li->flags = (l->keep ? KVPOOL_LEASE_INFO_KEPT : 0) |
			    (l->parked ? KVPOOL_LEASE_INFO_PARKED : 0);
		strscpy(li->tenant, l->tenant->name, sizeof(li->tenant));
	}
	for (i = 0, b = 0; b < pool->backed && i < pool->used; b++) {
		u32 s = OWNER_SLOT(pool->owner_of[b]);

		if (!s)
			continue;
		blocks[i].block = b;
		blocks[i].pad = 0;
		blocks[i].lease_id = pool->slots[s - 1]->id;
		i++;
	}
	return 0;
}

/*
 * The lease with @id; a closing or parked one only if @closing (parked
 * leases are not open: only an unpin or an adopt reaches them).
 */
static struct kvpool_lease *lease_by_id(struct kvpool_pool *pool, u64 id,
					bool closing)
{
	struct kvpool_lease *l;

	list_for_each_entry(l, &pool->leases, pool_node)
		if (l->id == id)
			return closing || (!l->closing && !l->parked) ?
			       l : NULL;
	return NULL;
}

int kvpool_lease_check(struct kvpool_pool *pool, u64 lease_id,
		       const u32 *blocks, u32 count, u32 *bad_index)
{
	struct kvpool_lease *l;
	u32 i;

	*bad_index = 0;
	if (!count || count > KVPOOL_IO_MAX_BLOCKS)
		return -EINVAL;
	l = lease_by_id(pool, lease_id, false);
	if (!l)
		return -ENOENT;
	for (i = 0; i < count; i++) {
		if (blocks[i] >= pool->capacity ||
		    pool->owner_of[blocks[i]] != l->slot + 1) {
			*bad_index = i;
			return -EPERM;
		}
	}
	return 0;
}

struct kvpool_lease *kvpool_lease_find(struct kvpool_pool *pool, u64 lease_id)
{
	return lease_by_id(pool, lease_id, false);
}

int kvpool_lease_pin(struct kvpool_pool *pool, u64 lease_id,
		     const u32 *blocks, u32 count, u32 *bad_index)
{
	int ret = kvpool_lease_check(pool, lease_id, blocks, count, bad_index);

	if (ret)
		return ret;
	lease_by_id(pool, lease_id, false)->pins++;
	return 0;
}

int kvpool_lease_unpin(struct kvpool_pool *pool, u64 lease_id)
{
	struct kvpool_lease *l = lease_by_id(pool, lease_id, true);

	if (!l)
		return -ENOENT;
	if (!l->pins)
		return -EINVAL;
	if (--l->pins)
		return 0;
	if (l->closing)
		lease_close_finish(l);
	else
		wake_waiters(pool);	/* releases waiting for the unpin */
	return 0;
}

int kvpool_lease_move(struct kvpool_pool *pool, u64 from_id, u64 to_id,
		      const u32 *blocks, u32 count, u32 *bad_index)
{
	struct kvpool_lease *from, *to;
	u32 i, me, dst;
	int ret;

	*bad_index = 0;
	if (!count || count > KVPOOL_IO_MAX_BLOCKS || from_id == to_id)
		return -EINVAL;
	from = lease_by_id(pool, from_id, false);
	to = lease_by_id(pool, to_id, false);
	if (!from || !to)
		return -ENOENT;
	if (from->tenant != to->tenant)
		return -EXDEV;
	/*
	 * An operation of the owner uses the source's blocks (a data-plane
	 * call, a swap job): they must not change hands under it, or a
	 * release by the destination could hand them to another tenant
	 * while the operation still reads or writes them.
	 */
	if (from->pins)
		return -EBUSY;
	/* Validate everything first; mark to catch repeated indices. */
	me = from->slot + 1;
	for (i = 0; i < count; i++) {
		u32 b = blocks[i];

		if (b >= pool->capacity || pool->owner_of[b] != me)
			break;
		pool->owner_of[b] = U32_MAX;
	}
	if (i < count) {
		ret = blocks[i] < pool->capacity &&
		      pool->owner_of[blocks[i]] == U32_MAX ? -EINVAL : -EPERM;
		*bad_index = i;
		while (i-- > 0)
			pool->owner_of[blocks[i]] = me;
		return ret;
	}
	dst = to->slot + 1;
	for (i = 0; i < count; i++)
		pool->owner_of[blocks[i]] = dst;
	owned(pool, blocks, count, to->id);
	from->held -= count;
	to->held += count;
	if (from->reclaim_target > from->held)
		set_reclaim(from, from->held);
	return count;
}

bool kvpool_owner_has_events(struct kvpool_pool *pool)
{
	return !list_empty(&pool->closed) || pool->closed_many_ev.seq ||
	       pool->grow_ev.seq || pool->idle_ev.seq ||
	       pool->reclaim_ev.seq || pool->short_ev.seq;
}

int kvpool_owner_read_event(struct kvpool_pool *pool, struct kvpool_event *ev)
{
	struct kvpool_event *slots[5] = {
		&pool->grow_ev, &pool->idle_ev, &pool->reclaim_ev,
		&pool->short_ev, &pool->closed_many_ev,
	};
	struct kvpool_event *best = NULL;
	struct kvpool_lease *closed = NULL;
	u32 i;

	if (!list_empty(&pool->closed)) {
		closed = list_first_entry(&pool->closed, struct kvpool_lease,
					  pool_node);
		best = &closed->closed_ev;
	}
	for (i = 0; i < ARRAY_SIZE(slots); i++)
		if (slots[i]->seq && (!best || slots[i]->seq < best->seq))
			best = slots[i];
	if (!best)
		return 0;
	*ev = *best;
	if (closed && best == &closed->closed_ev) {
		list_del(&closed->pool_node);
		pool->nclosed--;
		kfree(closed);
	} else {
		memset(best, 0, sizeof(*best));
	}
	return 1;
}

/* ------------------------------------------------------------------ */
/* Tenants                                                              */
/* ------------------------------------------------------------------ */

struct kvpool_tenant *kvpool_tenant_find(struct kvpool_pool *pool,
					 const char *name)
{
	struct kvpool_tenant *t;

	list_for_each_entry(t, &pool->tenants, node)
		if (!strncmp(t->name, name, KVPOOL_NAME_LEN))
			return t;
	return NULL;
}

/* Limits a tenant may have: each within the capacity, min not above max. */
static bool limits_valid(const struct kvpool_pool *pool, u32 max, u32 min)
{
	if (min > pool->capacity)
		return false;
	if (max == KVPOOL_UNLIMITED)
		return true;
	return max <= pool->capacity && min <= max;
}

static int tenant_new(struct kvpool_pool *pool, const char *name, u32 max,
		      u32 min, u32 allow_uid, u32 allow_gid, bool automatic,
		      struct kvpool_tenant **out)
{
	struct kvpool_tenant *t;
	int ret;

	if (kvpool_name_valid(name))
		return -EINVAL;
	if (!limits_valid(pool, max, min))
		return -EINVAL;
	if (kvpool_tenant_find(pool, name))
		return -EEXIST;
	if (pool->ntenants >= KVPOOL_MAX_TENANTS)
		return -ENOSPC;
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	t->pool = pool;
	strscpy(t->name, name, sizeof(t->name));
	t->max = max;
	t->min = min;
	t->allow_uid = allow_uid;
	t->allow_gid = allow_gid;
	t->automatic = automatic;
	/* Taken even if tenant_added refuses: a serial is never reused. */
	t->serial = ++pool->tenant_serial;
	INIT_LIST_HEAD(&t->leases);
	list_add_tail(&t->node, &pool->tenants);
	pool->ntenants++;
	pool->unmet_min += tenant_unmet(t);
	if (pool->ops && pool->ops->tenant_added) {
		ret = pool->ops->tenant_added(t);
		if (ret) {
			pool->unmet_min -= tenant_unmet(t);
			pool->ntenants--;
			list_del(&t->node);
			kfree(t);
			return ret;
		}
	}
	if (out)
		*out = t;
	return 0;
}

int kvpool_tenant_create(struct kvpool_pool *pool, const char *name,
			 u32 max, u32 min, u32 allow_uid, u32 allow_gid,
			 struct kvpool_tenant **out)
{
	return tenant_new(pool, name, max, min, allow_uid, allow_gid, false,
			  out);
}

int kvpool_tenant_delete(struct kvpool_pool *pool, const char *name)
{
	struct kvpool_tenant *t = kvpool_tenant_find(pool, name);

	if (!t)
		return -ENOENT;
	if (t->nleases || t->cur)
		return -EBUSY;
	tenant_free(t);
	/* Its protection is gone: waiters may now fit. */
	wake_waiters(pool);
	return 0;
}

/* Ask the leases of @t to give back @need blocks in all; returns the ask. */
static u32 post_to_tenant(struct kvpool_tenant *t, u32 need)
{
	struct kvpool_lease *l;
	u32 asked = 0;

	/* RECLAIM_FIRST leases are at the head of the list. */
	list_for_each_entry(l, &t->leases, tenant_node) {
		u32 give = min(l->held, need - asked);

		/* A parked lease has nobody to answer: never asked. */
		if (!give || l->reclaim_order == KVPOOL_RECLAIM_NEVER ||
		    l->parked)
			continue;
		set_reclaim(l, max(l->reclaim_target, give));
		asked += give;
		if (asked == need)
			break;
	}
	if (asked) {
		t->ev_reclaim++;
		emit(t->pool, KVPOOL_EVENT_RECLAIM, 0, 0, asked, t->name,
		     &t->pool->reclaim_ev);
	}
	return asked;
}

/*
 * Apply limits already validated.  A new max withdraws the reclaim targets
 * of the tenant's leases and posts the excess over it again: raising max
 * to current or above clears them (and POLLPRI).  A waiter below its min
 * that still needs blocks posts its targets again when it retries (the
 * waiters are woken).
 */
static void tenant_apply(struct kvpool_tenant *t, u32 max, u32 min,
			 bool new_max)
{
	struct kvpool_pool *pool = t->pool;
	struct kvpool_lease *l;

	pool->unmet_min -= tenant_unmet(t);
	t->min = min;
	pool->unmet_min += tenant_unmet(t);
	if (new_max) {
		t->max = max;
		list_for_each_entry(l, &t->leases, tenant_node)
			set_reclaim(l, 0);
		if (max != KVPOOL_UNLIMITED && t->cur > max)
			post_to_tenant(t, t->cur - max);
	}
	wake_waiters(pool);
}

int kvpool_tenant_set_limits(struct kvpool_tenant *t, u32 max, u32 min)
{
	if (!limits_valid(t->pool, max, min))
		return -EINVAL;
	tenant_apply(t, max, min, true);
	return 0;
}

int kvpool_tenant_set_max(struct kvpool_tenant *t, u32 max)
{
	return kvpool_tenant_set_limits(t, max, t->min);
}

int kvpool_tenant_set_min(struct kvpool_tenant *t, u32 min)
{
	if (!limits_valid(t->pool, t->max, min))
		return -EINVAL;
	tenant_apply(t, t->max, min, false);
	return 0;
}

void kvpool_tenant_reset_peak(struct kvpool_tenant *t)
{
	t->peak = t->cur;
}

/*
 * Rule 5: a waiter of @asker, below its min, is short of @need blocks:
 * post reclaim targets to the leases of tenants above their min, largest
 * excess first.
 */
static void post_reclaim(struct kvpool_tenant *asker, u32 need)
{
	struct kvpool_pool *pool = asker->pool;
	u64 gen = ++pool->reclaim_gen;

	while (need) {
		struct kvpool_tenant *t, *best = NULL;
		u32 best_excess = 0;

		list_for_each_entry(t, &pool->tenants, node) {
			u32 excess = t->cur > t->min ?
				     t->cur - t->min : 0;

			if (t == asker || t->reclaim_mark == gen)
				continue;
			if (excess > best_excess) {
				best = t;
				best_excess = excess;
			}
		}
		if (!best)
			break;
		best->reclaim_mark = gen;
		need -= post_to_tenant(best, min(best_excess, need));
	}
}

/* ------------------------------------------------------------------ */
/* Leases                                                               */
/* ------------------------------------------------------------------ */

static int slot_get(struct kvpool_pool *pool, struct kvpool_lease *lease)
{
	if (!pool->nslot_free) {
		u32 n = pool->nslots ? pool->nslots * 2 : 16;
		struct kvpool_lease **slots;
		u32 *fr, i;

		if (pool->nslots >= KVPOOL_MAX_LEASES)
			return -EMFILE;
		n = min_t(u32, n, KVPOOL_MAX_LEASES);
		slots = kvcalloc(n, sizeof(*slots), GFP_KERNEL);
		fr = kvcalloc(n, sizeof(*fr), GFP_KERNEL);
		if (!slots || !fr) {
			kvfree(slots);
			kvfree(fr);
			return -ENOMEM;
		}
		if (pool->nslots)
			memcpy(slots, pool->slots,
			       pool->nslots * sizeof(*slots));
		kvfree(pool->slots);
		kvfree(pool->slot_free);
		pool->slots = slots;
		pool->slot_free = fr;
		/* Push new slots so the lowest is handed out first. */
		for (i = n; i > pool->nslots; i--)
			pool->slot_free[pool->nslot_free++] = i - 1;
		pool->nslots = n;
	}
	lease->slot = pool->slot_free[--pool->nslot_free];
	pool->slots[lease->slot] = lease;
	return 0;
}

static void slot_put(struct kvpool_pool *pool, struct kvpool_lease *lease)
{
	pool->slots[lease->slot] = NULL;
	pool->slot_free[pool->nslot_free++] = lease->slot;
}

static int auto_tenant(struct kvpool_pool *pool, u32 uid,
		       struct kvpool_tenant **out)
{
	char name[KVPOOL_NAME_LEN];
	struct kvpool_tenant *t;

	snprintf(name, sizeof(name), "uid-%u", uid);
	t = kvpool_tenant_find(pool, name);
	if (t) {
		*out = t;
		return 0;
	}
	return tenant_new(pool, name, pool->default_max == KVPOOL_UNLIMITED ?
			  KVPOOL_UNLIMITED :
			  min(pool->default_max, pool->capacity),
			  0, uid, KVPOOL_ID_NONE, true, out);
}

static void lease_bind(struct kvpool_lease *lease, struct kvpool_tenant *t)
{
	lease->tenant = t;
	if (lease->reclaim_order == KVPOOL_RECLAIM_FIRST)
		list_add(&lease->tenant_node, &t->leases);
	else
		list_add_tail(&lease->tenant_node, &t->leases);
	t->nleases++;
}

static void lease_unbind(struct kvpool_lease *lease)
{
	list_del(&lease->tenant_node);
	lease->tenant->nleases--;
	lease->tenant = NULL;
}

/* A new lease @id of @uid in tenant @t (the caller checked the limits). */
static int lease_new(struct kvpool_pool *pool, struct kvpool_tenant *t,
		     u64 id, u32 uid, u32 pid, struct kvpool_lease **out)
{
	struct kvpool_lease *lease = kzalloc(sizeof(*lease), GFP_KERNEL);
	int ret;

	if (!lease)
		return -ENOMEM;
	ret = slot_get(pool, lease);
	if (ret) {
		kfree(lease);
		return ret;
	}
	lease->pool = pool;
	lease->id = id;
	if (pool->next_lease_id <= id)
		pool->next_lease_id = id + 1;
	lease->uid = uid;
	lease->pid = pid;
	lease_bind(lease, t);
	list_add_tail(&lease->pool_node, &pool->leases);
	pool->nleases++;
	*out = lease;
	return 0;
}

int kvpool_lease_open(struct kvpool_pool *pool, const struct kvpool_cred *cred,
		      struct kvpool_lease **out)
{
	struct kvpool_tenant *t;
	int ret;

	if (pool->nleases >= KVPOOL_MAX_LEASES)
		return -EMFILE;
	ret = auto_tenant(pool, cred->uid, &t);
	if (ret)
		return ret;
	return lease_new(pool, t, pool->next_lease_id, cred->uid, cred->pid,
			 out);
}

int kvpool_lease_attach(struct kvpool_lease *lease, const char *tenant,
			const struct kvpool_cred *cred)
{
	struct kvpool_pool *pool = lease->pool;
	struct kvpool_tenant *t;
	int ret;

	if (!tenant[0]) {
		ret = auto_tenant(pool, cred->uid, &t);
		if (ret)
			return ret;
	} else {
		if (kvpool_name_valid(tenant))
			return -EINVAL;
		t = kvpool_tenant_find(pool, tenant);
		if (!t)
			return -ENOENT;
		if (!cred->admin &&
		    !(t->allow_uid != KVPOOL_ID_NONE &&
		      t->allow_uid == cred->uid) &&
		    !(t->allow_gid != KVPOOL_ID_NONE &&
		      (t->allow_gid == cred->gid ||
		       (pool->ops && pool->ops->in_group &&
			pool->ops->in_group(cred, t->allow_gid)))))
			return -EACCES;
	}
	if (t == lease->tenant)
		return 0;
	if (lease->held)
		return -EBUSY;
	lease_unbind(lease);
	lease_bind(lease, t);
	return 0;
}

int kvpool_lease_set_reclaim_order(struct kvpool_lease *lease, u32 order,
				   const struct kvpool_cred *cred)
{
	struct kvpool_tenant *t = lease->tenant;

	if (order > KVPOOL_RECLAIM_NEVER)
		return -EINVAL;
	if (order != KVPOOL_RECLAIM_NORMAL && !cred->admin)
		return -EPERM;
	lease->reclaim_order = order;
	if (order == KVPOOL_RECLAIM_FIRST)
		list_move(&lease->tenant_node, &t->leases);
	else
		list_move_tail(&lease->tenant_node, &t->leases);
	if (order == KVPOOL_RECLAIM_NEVER)
		set_reclaim(lease, 0);
	return 0;
}

/*
 * Free blocks[0..n) of @lease (already validated).  @credit: the blocks
 * count against the lease's reclaim target (a release, not the undo of a
 * grant that never reached its caller).
 */
static void blocks_free(struct kvpool_lease *lease, const u32 *blocks, u32 n,
			bool credit)
{
	struct kvpool_pool *pool = lease->pool;
	u32 i, top_chunk, top = 0;

	for (i = 0; i < n; i++) {
		pool->owner_of[blocks[i]] = 0;
		bm_set(pool, blocks[i]);
		top = max(top, blocks[i]);
	}
	owned(pool, blocks, n, 0);
	pool->used -= n;
	lease->held -= n;
	tenant_uncharge(lease->tenant, n);
	if (credit && lease->reclaim_target)
		set_reclaim(lease, lease->reclaim_target > n ?
			    lease->reclaim_target - n : 0);

	/* The top backed chunk became idle: the owner may shrink. */
	top_chunk = pool->backed > pool->chunk_blocks ?
		    ((pool->backed - 1) / pool->chunk_blocks) *
		    pool->chunk_blocks : 0;
	if ((top >= top_chunk || !pool->used) &&
	    bm_range_free(pool, top_chunk, pool->backed))
		emit(pool, KVPOOL_EVENT_IDLE, 0, 0, pool->used, NULL,
		     &pool->idle_ev);
	wake_waiters(pool);
}

int kvpool_lease_release(struct kvpool_lease *lease, const u32 *blocks,
			 u32 count)
{
	struct kvpool_pool *pool = lease->pool;
	u32 me = lease->slot + 1, i;

	if (!count || count > KVPOOL_IO_MAX_BLOCKS)
		return -EINVAL;
	if (lease->pins)
		return -EBUSY;
	/* Validate everything first; mark to catch repeated indices. */
	for (i = 0; i < count; i++) {
		u32 b = blocks[i];

		if (b >= pool->capacity || pool->owner_of[b] != me)
			break;
		pool->owner_of[b] = U32_MAX;
	}
	if (i < count) {
		while (i-- > 0)
			pool->owner_of[blocks[i]] = me;
		return -EINVAL;
	}
	blocks_free(lease, blocks, count, true);
	return count;
}

int kvpool_lease_release_all(struct kvpool_lease *lease)
{
	if (lease->pins)
		return -EBUSY;
	return lease_free_all(lease, false);
}

/* Free every block of @lease; pending ones too if @pending (a close). */
static int lease_free_all(struct kvpool_lease *lease, bool pending)
{
	struct kvpool_pool *pool = lease->pool;
	u32 me = lease->slot + 1, b, n = 0, k = 0, batch[64];
	u32 total = lease->held;

	for (b = 0; b < pool->backed && n + k < total; b++) {
		u32 o = pool->owner_of[b];

		if (o != me && !(pending && o == (me | OWNER_PENDING)))
			continue;
		batch[k++] = b;
		if (k == ARRAY_SIZE(batch)) {
			blocks_free(lease, batch, k, true);
			n += k;
			k = 0;
		}
	}
	if (k)
		blocks_free(lease, batch, k, true);
	return n + k;
}

/* Return the pending (uncommitted) grants of @lease, as a cancel would. */
static void lease_free_pending(struct kvpool_lease *lease)
{
	struct kvpool_pool *pool = lease->pool;
	u32 mark = (lease->slot + 1) | OWNER_PENDING, b, k = 0, batch[64];

	for (b = 0; b < pool->backed; b++) {
		if (pool->owner_of[b] != mark)
			continue;
		batch[k++] = b;
		if (k == ARRAY_SIZE(batch)) {
			blocks_free(lease, batch, k, false);
			k = 0;
		}
	}
	if (k)
		blocks_free(lease, batch, k, false);
}

/* A kept lease's file is gone: keep its blocks for the next host. */
static void lease_park(struct kvpool_lease *lease)
{
	struct kvpool_pool *pool = lease->pool;

	lease_free_pending(lease);
	lease->parked = true;
	pool->nparked++;
	set_reclaim(lease, 0);
}

int kvpool_lease_set_keep(struct kvpool_lease *lease, bool keep)
{
	struct kvpool_pool *pool = lease->pool;

	if (lease->parked || lease->closing)
		return -EINVAL;
	if (keep == lease->keep)
		return 0;
	if (keep && pool->nkept >= KVPOOL_PARK_MAX)
		return -ENOSPC;
	lease->keep = keep;
	if (keep)
		pool->nkept++;
	else
		pool->nkept--;
	return 0;
}

int kvpool_lease_adopt(struct kvpool_pool *pool, u64 lease_id,
		       const struct kvpool_cred *cred,
		       struct kvpool_lease **out)
{
	struct kvpool_lease *l = lease_by_id(pool, lease_id, true);

	if (!l || !l->parked)
		return -ENOENT;
	l->parked = false;
	pool->nparked--;
	l->pid = cred->pid;
	*out = l;
	/* Its tenant's waiters may now ask it for blocks again. */
	wake_waiters(pool);
	return 0;
}

int kvpool_lease_restore(struct kvpool_pool *pool, u64 lease_id, u32 uid,
			 const char *tenant, const u32 *blocks, u32 n,
			 struct kvpool_lease **out)
{
	struct kvpool_tenant *t;
	struct kvpool_lease *lease;
	u32 i;
	int ret;

	if (!lease_id || lease_by_id(pool, lease_id, true))
		return -EEXIST;
	if (pool->nkept >= KVPOOL_PARK_MAX)
		return -ENOSPC;
	if (pool->nleases >= KVPOOL_MAX_LEASES)
		return -EMFILE;
	/* Free and backed, none twice: mark each while checking, as a
	 * release does. */
	for (i = 0; i < n; i++) {
		u32 b = blocks[i];

		if (b >= pool->backed || pool->owner_of[b] ||
		    !(pool->levels[0][b / BITS_PER_WORD] &
		      (1ULL << (b % BITS_PER_WORD))))
			break;
		pool->owner_of[b] = U32_MAX;
	}
	ret = i < n ? -EINVAL : 0;
	while (i-- > 0)
		pool->owner_of[blocks[i]] = 0;
	if (ret)
		return ret;
	if (tenant && tenant[0]) {
		t = kvpool_tenant_find(pool, tenant);
		if (!t)
			return -ENOENT;
	} else {
		ret = auto_tenant(pool, uid, &t);
		if (ret)
			return ret;
	}
	ret = lease_new(pool, t, lease_id, uid, 0, &lease);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		bm_clear(pool, blocks[i]);
		pool->owner_of[blocks[i]] = lease->slot + 1;
	}
	pool->used += n;
	lease->held = n;
	tenant_charge(t, n);
	lease->keep = true;
	pool->nkept++;
	lease->parked = true;
	pool->nparked++;
	*out = lease;
	return 0;
}

void kvpool_lease_close(struct kvpool_lease *lease)
{
	if (lease->keep) {
		lease_park(lease);
		return;
	}
	if (lease->pins) {
		/* The owner is using its blocks: finish at the last unpin. */
		lease->closing = true;
		lease->reclaim_target = 0;
		return;
	}
	lease_close_finish(lease);
}

/*
 * The owner's queue of CLIENT_CLOSED records is full: merge @ev into the
 * one pending CLOSED_MANY record (a count of files and of blocks), so the
 * owner's memory stays bounded and it still learns that it must read a
 * snapshot.
 */
static void closed_merge(struct kvpool_pool *pool,
			 const struct kvpool_event *ev)
{
	struct kvpool_event *m = &pool->closed_many_ev;

	if (!m->seq) {
		memset(m, 0, sizeof(*m));
		m->type = KVPOOL_EVENT_CLOSED_MANY;
	}
	m->seq = ev->seq;
	if (m->arg != U32_MAX)
		m->arg++;
	m->blocks = m->blocks > U32_MAX - ev->blocks ? U32_MAX :
		    m->blocks + ev->blocks;
	wake_owner(pool);
}

static void lease_close_finish(struct kvpool_lease *lease)
{
	struct kvpool_pool *pool = lease->pool;
	struct kvpool_tenant *t = lease->tenant;
	u32 returned = lease_free_all(lease, true);
	struct kvpool_event *ev = &lease->closed_ev;

	list_del(&lease->pool_node);
	pool->nleases--;
	if (lease->keep)
		pool->nkept--;
	slot_put(pool, lease);
	memset(ev, 0, sizeof(*ev));
	ev->type = KVPOOL_EVENT_CLIENT_CLOSED;
	ev->seq = ++pool->seq;
	ev->lease_id = lease->id;
	ev->blocks = returned;
	strscpy(ev->tenant, t->name, sizeof(ev->tenant));
	lease_unbind(lease);
	if (pool->ops && pool->ops->observe)
		pool->ops->observe(pool, ev);
	if (pool->owner && pool->nclosed < KVPOOL_CLOSED_QUEUE_MAX) {
		list_add_tail(&lease->pool_node, &pool->closed);
		pool->nclosed++;
		wake_owner(pool);
	} else {
		if (pool->owner)
			closed_merge(pool, ev);
		kfree(lease);
	}
	wake_waiters(pool);
}

static int grant_wait(struct kvpool_lease *lease, u32 count, u32 flags,
		      struct kvpool_wait *w)
{
	struct kvpool_tenant *t = lease->tenant;

	if (flags & KVPOOL_LEASE_NONBLOCK) {
		t->ev_fail++;
		return -EAGAIN;
	}
	if (!w->started) {
		w->started = true;
		w->grow_fail_seq = lease->pool->grow_fail_seq;
	}
	if (!w->stalled) {
		w->stalled = true;
		t->ev_stall++;
		emit(lease->pool, KVPOOL_EVENT_STALL, 0, lease->id, count,
		     t->name, NULL);
	}
	return -EAGAIN;
}

static void post_grow(struct kvpool_pool *pool, u32 want)
{
	u32 target = DIV_ROUND_UP(want, pool->chunk_blocks) *
		     pool->chunk_blocks;

	target = min(target, pool->capacity);
	/* Ask once per target: retries of waiters do not repeat it. */
	if (target <= pool->grow_asked)
		return;
	pool->grow_asked = target;
	emit(pool, KVPOOL_EVENT_GROW, 0, 0, target, NULL, &pool->grow_ev);
}

static int lease_grant(struct kvpool_lease *lease, u32 count, u32 flags,
		       u32 *blocks, struct kvpool_wait *w, bool pending)
{
	struct kvpool_pool *pool = lease->pool;
	struct kvpool_tenant *t = lease->tenant;
	bool partial = flags & KVPOOL_LEASE_PARTIAL;
	u32 room, avail, backed_free;
	u64 protect, free;

	if (flags & ~KVPOOL_LEASE_FLAGS)
		return -EINVAL;
	if (!count || count > KVPOOL_IO_MAX_BLOCKS)
		return -EINVAL;
	if (count > pool->capacity && !partial)
		return -ENOSPC;

	/* Rule 2: the tenant's max, at once and without waiting. */
	room = tenant_room(t);
	if (count > room) {
		if (!partial || !room) {
			t->ev_max++;
			emit(pool, KVPOOL_EVENT_QUOTA, 0, lease->id, count,
			     t->name, NULL);
			return -EDQUOT;
		}
		count = room;
	}

	/* Rule 8: no owner, no grants. */
	if (!pool->owner) {
		if (flags & KVPOOL_LEASE_ORPHAN_FAIL) {
			t->ev_fail++;
			return -ENXIO;
		}
		return grant_wait(lease, count, flags, w);
	}

	/* Rule 2: other tenants' unmet min is not ours to take. */
	protect = pool->unmet_min - tenant_unmet(t);
	free = pool->capacity - pool->used;
	avail = free > protect ? (u32)(free - protect) : 0;
	if (count > avail) {
		if (!partial || !avail) {
			/*
			 * Rule 5: below our min, ask others to give back;
			 * otherwise tell the owner, who may hold blocks it
			 * can give back (its cached blocks).
			 */
			if (t->cur < t->min)
				post_reclaim(t, min(count - avail,
						    t->min - t->cur));
			else
				emit(pool, KVPOOL_EVENT_SHORT, 0, lease->id,
				     count - avail, t->name, &pool->short_ev);
			return grant_wait(lease, count, flags, w);
		}
		count = avail;
	}

	/* Rule 6: free blocks only above backed: ask the owner to grow. */
	backed_free = pool->backed - pool->used;
	if (count > backed_free) {
		if (!partial || !backed_free) {
			/* The owner said it cannot grow since we began. */
			if (w->started &&
			    w->grow_fail_seq != pool->grow_fail_seq) {
				t->ev_fail++;
				return -ENOMEM;
			}
			post_grow(pool, pool->used + count);
			return grant_wait(lease, count, flags, w);
		}
		post_grow(pool, pool->used + count);
		count = backed_free;
	}

	/* Rule 3: lowest free index first. */
	bm_take(pool, (lease->slot + 1) | (pending ? OWNER_PENDING : 0), count,
		blocks);
	if (!pending)
		owned(pool, blocks, count, lease->id);
	pool->used += count;
	lease->held += count;
	w->target_before = lease->reclaim_target;
	w->peak_before = t->peak;
	tenant_charge(t, count);
	w->peak_after = t->peak;
	return count;
}

int kvpool_lease_grant(struct kvpool_lease *lease, u32 count, u32 flags,
		       u32 *blocks, struct kvpool_wait *w)
{
	return lease_grant(lease, count, flags, blocks, w, false);
}

int kvpool_lease_grant_pending(struct kvpool_lease *lease, u32 count,
			       u32 flags, u32 *blocks, struct kvpool_wait *w)
{
	return lease_grant(lease, count, flags, blocks, w, true);
}

/*
 * Are blocks[0..n) distinct pending grants of @lease?  Marks them U32_MAX
 * while checking (to catch a repeated index) and puts back @restore
 * (pending, or committed) on each.
 */
static bool blocks_pending(struct kvpool_lease *lease, const u32 *blocks,
			   u32 n, u32 restore)
{
	struct kvpool_pool *pool = lease->pool;
	u32 mark = (lease->slot + 1) | OWNER_PENDING, i;
	bool ok = true;

	for (i = 0; i < n; i++) {
		if (blocks[i] >= pool->capacity ||
		    pool->owner_of[blocks[i]] != mark) {
			ok = false;
			restore = mark;
			break;
		}
		pool->owner_of[blocks[i]] = U32_MAX;
	}
	while (i-- > 0)
		pool->owner_of[blocks[i]] = restore;
	return ok;
}

int kvpool_lease_grant_commit(struct kvpool_lease *lease, const u32 *blocks,
			      u32 n)
{
	if (!blocks_pending(lease, blocks, n, lease->slot + 1))
		return -EINVAL;
	owned(lease->pool, blocks, n, lease->id);
	return 0;
}

int kvpool_lease_grant_cancel(struct kvpool_lease *lease, const u32 *blocks,
			      u32 n, const struct kvpool_wait *w)
{
	struct kvpool_tenant *t = lease->tenant;
	u32 target;

	if (!blocks_pending(lease, blocks, n,
			    (lease->slot + 1) | OWNER_PENDING))
		return -EINVAL;
	/* No pin matters: the owner could never check or use these blocks. */
	target = lease->reclaim_target;
	blocks_free(lease, blocks, n, false);
	/*
	 * The reclaim target as before the call.  A target posted while the
	 * blocks were pending (a max lowered meanwhile) counted them: their
	 * return counts against what it added, as a release would.  Never
	 * above what the lease still holds.
	 */
	if (target > w->target_before)
		target -= min(n, target - w->target_before);
	set_reclaim(lease, min(target, lease->held));
	/* The peak this grant set, unless a later grant went higher. */
	if (t->peak == w->peak_after)
		t->peak = max(w->peak_before, t->cur);
	return 0;
}

void kvpool_lease_wait_end(struct kvpool_lease *lease, struct kvpool_wait *w,
			   int err)
{
	if (err && lease->tenant)
		lease->tenant->ev_fail++;
}

void kvpool_status_fill(struct kvpool_pool *pool, struct kvpool_lease *lease,
			struct kvpool_status *st)
{
	strscpy(st->pool, pool->name, sizeof(st->pool));
	st->block_bytes = pool->block_bytes;
	st->capacity = pool->capacity;
	st->backed = pool->backed;
	st->used = pool->used;
	st->state = pool->owner ? KVPOOL_STATE_LIVE : KVPOOL_STATE_ORPHANED;
	st->epoch = pool->epoch;
	if (lease) {
		struct kvpool_tenant *t = lease->tenant;

		strscpy(st->tenant, t->name, sizeof(st->tenant));
		st->tenant_serial = t->serial;
		st->lease_id = lease->id;
		st->held = lease->held;
		st->reclaim_target = lease->reclaim_target;
		st->tenant_max = t->max;
		st->tenant_min = t->min;
		st->tenant_current = t->cur;
		st->tenant_peak = t->peak;
	}
}

/* ------------------------------------------------------------------ */
/* Invariants                                                           */
/* ------------------------------------------------------------------ */

#define CHECK(cond, msg) do {			\
	if (!(cond)) {				\
		if (why)			\
			*why = msg;		\
		return -EUCLEAN;		\
	}					\
} while (0)

int kvpool_pool_check(struct kvpool_pool *pool, const char **why)
{
	struct kvpool_tenant *t;
	struct kvpool_lease *l;
	u64 sum_current = 0, sum_held = 0, unmet = 0, nfree = 0;
	u32 b, lv, nleases = 0, ntenants = 0, nkept = 0, nparked = 0;

	for (b = 0; b < pool->capacity; b++) {
		bool is_free = pool->levels[0][b / 64] & (1ULL << (b % 64));
		u32 s = OWNER_SLOT(pool->owner_of[b]);

		CHECK(is_free == !s, "free bit disagrees with owner array");
		if (is_free) {
			nfree++;
			continue;
		}
		CHECK(b < pool->backed, "leased block at or above backed");
		CHECK(s - 1 < pool->nslots && pool->slots[s - 1],
		      "leased block owned by an empty slot");
	}
	for (b = pool->capacity; b < pool->level_words[0] * 64; b++)
		CHECK(!(pool->levels[0][b / 64] & (1ULL << (b % 64))),
		      "free bit beyond capacity");
	for (lv = 1; lv < pool->nlevels; lv++) {
		u32 w;

		for (w = 0; w < pool->level_words[lv - 1]; w++) {
			bool up = pool->levels[lv][w / 64] & (1ULL << (w % 64));

			CHECK(up == !!pool->levels[lv - 1][w],
			      "bitmap summary level inconsistent");
		}
	}
	CHECK(nfree == pool->capacity - pool->used, "free count != capacity - used");
	CHECK(pool->backed <= pool->capacity, "backed above capacity");
	CHECK(pool->used <= pool->backed, "used above backed");

	list_for_each_entry(l, &pool->leases, pool_node) {
		u32 held = 0;

		nleases++;
		nkept += l->keep;
		nparked += l->parked;
		CHECK(!l->parked || l->keep, "parked lease not kept");
		CHECK(!l->parked || !l->reclaim_target,
		      "reclaim target on a parked lease");
		CHECK(!(l->parked && l->closing), "parked lease closing");
		CHECK(pool->slots[l->slot] == l, "lease slot mismatch");
		for (b = 0; b < pool->backed; b++)
			held += OWNER_SLOT(pool->owner_of[b]) == l->slot + 1;
		CHECK(held == l->held, "lease held count wrong");
		CHECK(l->reclaim_target <= l->held,
		      "reclaim target above what the lease holds");
		sum_held += l->held;
	}
	CHECK(nleases == pool->nleases, "lease count wrong");
	CHECK(nkept == pool->nkept, "kept lease count wrong");
	CHECK(nparked == pool->nparked, "parked lease count wrong");
	CHECK(pool->nkept <= KVPOOL_PARK_MAX, "more kept leases than allowed");
	list_for_each_entry(t, &pool->tenants, node) {
		u64 cur = 0;
		u32 n = 0;

		ntenants++;
		list_for_each_entry(l, &t->leases, tenant_node) {
			CHECK(l->tenant == t, "lease on wrong tenant list");
			cur += l->held;
			n++;
		}
		CHECK(cur == t->cur, "tenant current != sum of its leases");
		CHECK(n == t->nleases, "tenant lease count wrong");
		CHECK(t->peak >= t->cur, "peak below current");
		sum_current += t->cur;
		unmet += tenant_unmet(t);
	}
	CHECK(ntenants == pool->ntenants, "tenant count wrong");
	CHECK(sum_current == pool->used, "sum of tenants' current != used");
	CHECK(sum_held == pool->used, "sum of leases != used");
	CHECK(unmet == pool->unmet_min, "unmet min sum wrong");
	return 0;
}
