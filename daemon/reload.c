// SPDX-License-Identifier: MIT
/*
 * reload.c - a new configuration (SIGHUP, `systemctl reload kvpoold`) for
 * a running daemon.  The caller has read the file again and laid the
 * command-line flags over it; this applies what can change while leases
 * are held (tenants and their limits, the admin group, the shrink delay,
 * the backing limit, default_max of the in-process ledger, the log level,
 * the metrics' scope, the prefix caches' lend percent) and says which
 * other changes wait for a restart.  A file with an error never gets
 * here: the running configuration stays in force.
 */
#include <errno.h>
#include <grp.h>
#include <string.h>

#include "config.h"
#include "core.h"
#include "tenants.h"
#include "reload.h"

static bool differ(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") != 0;
}

static void restart_note(const char *key)
{
	kvd_log(KVD_WARN, "reload: %s changed: it takes effect when kvpoold "
		"restarts", key);
}

int kvd_reconfigure(struct kvd *d, const struct kvd_opts *n,
		    const struct kvd_tenant_conf *t, int nt)
{
	const struct kvd_opts *o = &d->o;
	gid_t gid = (gid_t)-1;
	int r;

	/* Check first, so that nothing changes when something is wrong. */
	if (n->admin_group) {
		struct group *g = getgrnam(n->admin_group);

		if (!g) {
			kvd_log(KVD_ERR, "reload: unknown group %s",
				n->admin_group);
			r = -ENOENT;
			goto refused;
		}
		gid = g->gr_gid;
	}
	r = kvd_tenants_check(d, t, nt);
	if (r)
		goto refused;

	if (differ(o->socket_path, n->socket_path))
		restart_note("socket");
	if (differ(o->device_path, n->device_path))
		restart_note("device");
	if (differ(o->backend, n->backend))
		restart_note("backend");
	if (differ(o->ledger, n->ledger))
		restart_note("ledger");
	if (differ(o->user, n->user))
		restart_note("user");
	if (differ(o->pool, n->pool))
		restart_note("pool name");
	if (differ(o->metrics_listen, n->metrics_listen))
		restart_note("metrics_listen");
	if (o->block_bytes != n->block_bytes)
		restart_note("block_bytes");
	if (o->capacity != n->capacity)
		restart_note("capacity");
	if (o->chunk_blocks != n->chunk_blocks)
		restart_note("chunk_blocks");
	if (o->cuda_device != n->cuda_device)
		restart_note("cuda_device");
	if (o->ntiers != n->ntiers ||
	    memcmp(o->tiers, n->tiers, sizeof(o->tiers[0]) * (size_t)n->ntiers))
		restart_note("tiers");
	if (differ(o->nvme_io, n->nvme_io))
		restart_note("nvme_io");
	if (o->prefix_demote != n->prefix_demote)
		restart_note("prefix_demote");
	if (memcmp(&o->cluster, &n->cluster, sizeof(o->cluster)))
		restart_note("[cluster]");

	kvd_log_set_level(n->log_level);
	d->o.log_level = n->log_level;
	d->admin_gid = gid;
	d->o.shrink_delay_ms = n->shrink_delay_ms;
	d->o.backing_limit = n->backing_limit;
	d->o.metrics_scope = n->metrics_scope;
	d->o.prefix_lend_percent = n->prefix_lend_percent;
	d->top->backing_limit = n->backing_limit;	/* the top pool's */
	if (o->default_max != n->default_max) {
		if (d->mode == KVP_MODE_INPROC) {
			unsigned int i;

			for (i = 0; i < d->npools; i++) {
				struct kvd_pool *p = &d->pools[i];

				pthread_mutex_lock(&p->lock);
				p->pool->default_max = n->default_max;
				pthread_mutex_unlock(&p->lock);
			}
			d->o.default_max = n->default_max;
		} else {
			kvd_log(KVD_WARN, "reload: default_max changed: the "
				"module keeps the value its pool was created "
				"with");
		}
	}
	r = kvd_tenants_apply(d, t, nt);
	kvd_log(KVD_NOTICE, "configuration reloaded: %d tenant%s%s", nt,
		nt == 1 ? "" : "s", r ? " (some refused, see above)" : "");
	return r;
refused:
	kvd_log(KVD_ERR, "reload: the running configuration stays in force");
	return r;
}
