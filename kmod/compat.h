/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels kvpool.ko is built for: Debian 12's
 * 6.1 (linux-image-amd64) and 6.12 (linux-image-6.12-amd64), the range in
 * Documentation/admin-guide.rst.  Every kernel version test of the module
 * is in this file; the rest of it is written for the newest API.
 *
 * Also between the two, and needing nothing here: .llseek is left unset
 * (no_llseek is gone in 6.12, and stream_open() makes the file
 * unseekable on both).
 */
#ifndef KVPOOL_COMPAT_H
#define KVPOOL_COMPAT_H

#include <linux/version.h>
#include <net/genetlink.h>

/*
 * The parsed attributes of a dump request.  Up to 6.1 they are in struct
 * genl_dumpit_info itself; from 6.2 on in its struct genl_info, which
 * genl_info_dump() returns.
 */
static inline struct nlattr **kvpool_genl_dump_attrs(struct netlink_callback *cb)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
	return genl_info_dump(cb)->attrs;
#else
	return genl_dumpit_info(cb)->attrs;
#endif
}

#endif /* KVPOOL_COMPAT_H */
