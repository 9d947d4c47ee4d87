/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The small shim that lets kvpool_ledger.c build in user space: kernel
 * types, list_head, allocation and bit helpers mapped onto libc.
 */
#ifndef KVPOOL_LEDGER_USER_H
#define KVPOOL_LEDGER_USER_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>

#ifndef EUCLEAN
#define EUCLEAN 117
#endif

typedef uint8_t u8;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

#ifndef U32_MAX
#define U32_MAX UINT32_MAX
#endif

#define GFP_KERNEL 0
#define kzalloc(sz, gfp) calloc(1, (sz))
#define kfree(p) free(p)
#define kvcalloc(n, sz, gfp) calloc((n), (sz))
#define kvfree(p) free(p)

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define WARN_ON(x) ({ int __w = !!(x); if (__w) \
	fprintf(stderr, "WARN_ON(%s) at %s:%d\n", #x, __FILE__, __LINE__); \
	__w; })

#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline unsigned long __ffs64(u64 w)
{
	return (unsigned long)__builtin_ctzll(w);
}

static inline size_t strscpy(char *dst, const char *src, size_t n)
{
	size_t len = strnlen(src, n);

	if (len >= n) {
		if (n) {
			memcpy(dst, src, n - 1);
			dst[n - 1] = '\0';
		}
		return (size_t)-E2BIG;
	}
	memcpy(dst, src, len + 1);
	return len;
}

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

struct list_head {
	struct list_head *next, *prev;
};

#define LIST_HEAD_INIT(name) { &(name), &(name) }

static inline void INIT_LIST_HEAD(struct list_head *l)
{
	l->next = l;
	l->prev = l;
}

static inline void __list_add(struct list_head *n, struct list_head *prev,
			      struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

static inline void list_add(struct list_head *n, struct list_head *h)
{
	__list_add(n, h, h->next);
}

static inline void list_add_tail(struct list_head *n, struct list_head *h)
{
	__list_add(n, h->prev, h);
}

static inline void list_del(struct list_head *e)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	e->next = NULL;
	e->prev = NULL;
}

static inline void list_del_init(struct list_head *e)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	INIT_LIST_HEAD(e);
}

static inline void list_move(struct list_head *e, struct list_head *h)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	list_add(e, h);
}

static inline void list_move_tail(struct list_head *e, struct list_head *h)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	list_add_tail(e, h);
}

static inline int list_empty(const struct list_head *h)
{
	return h->next == h;
}

#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(ptr, type, member) \
	list_entry((ptr)->next, type, member)
#define list_for_each_entry(pos, head, member)				\
	for (pos = list_entry((head)->next, __typeof__(*pos), member);	\
	     &pos->member != (head);					\
	     pos = list_entry(pos->member.next, __typeof__(*pos), member))
#define list_for_each_entry_safe(pos, n, head, member)			\
	for (pos = list_entry((head)->next, __typeof__(*pos), member),	\
	     n = list_entry(pos->member.next, __typeof__(*pos), member);	\
	     &pos->member != (head);					\
	     pos = n, n = list_entry(n->member.next, __typeof__(*n), member))

#endif /* KVPOOL_LEDGER_USER_H */
