// SPDX-License-Identifier: MIT
/*
 * kvpool_metrics.c - kvpool's metrics series in the Prometheus text
 * exposition format (see kvpool_metrics.h).  Names carry their unit
 * (_blocks, _bytes), counters end in _total, every family has HELP and
 * TYPE lines and appears once, label values are escaped.
 */
#include <errno.h>
#include <string.h>

#include "kvpool_metrics.h"

/* KVPOOL_STATE_* and KVPOOL_UNLIMITED of the UAPI, repeated so that this
 * file needs only the wire protocol. */
#define M_STATE_LIVE		1
#define M_STATE_ORPHANED	2
#define M_UNLIMITED		0xffffffffU

static const char *state_name(uint32_t st)
{
	switch (st) {
	case M_STATE_LIVE: return "live";
	case M_STATE_ORPHANED: return "orphaned";
	default: return "unknown";
	}
}

static const char *mode_name(uint32_t m)
{
	return m == KVP_MODE_MODULE ? "module" :
	       m == KVP_MODE_INPROC ? "daemon" : "unknown";
}

/* A label value: at most cap bytes of s, with \ " and newline escaped. */
static void label(FILE *f, const char *key, const char *s, size_t cap)
{
	size_t i, n = strnlen(s, cap);

	fprintf(f, "%s=\"", key);
	for (i = 0; i < n; i++) {
		if (s[i] == '\\' || s[i] == '"')
			fprintf(f, "\\%c", s[i]);
		else if (s[i] == '\n')
			fputs("\\n", f);
		else
			fputc(s[i], f);
	}
	fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type,
		 const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void pool_labels(FILE *f, const char *name,
			const struct kvp_metrics_pool *p)
{
	fprintf(f, "%s{", name);
	label(f, "pool", p->pool.name, sizeof(p->pool.name));
}

enum pool_val {
	PV_BLOCK_BYTES, PV_CAPACITY, PV_BACKED, PV_USED, PV_BACKED_BYTES,
	PV_USED_BYTES, PV_CHUNK, PV_LEASES, PV_TENANTS, PV_EPOCH, PV_STATE,
};

static uint64_t pool_val(const struct kvp_metrics_pool *p, enum pool_val v)
{
	const struct kvp_pool_rec *r = &p->pool;

	switch (v) {
	case PV_BLOCK_BYTES: return r->block_bytes;
	case PV_CAPACITY: return r->capacity;
	case PV_BACKED: return r->backed;
	case PV_USED: return r->used;
	case PV_BACKED_BYTES: return (uint64_t)r->backed * r->block_bytes;
	case PV_USED_BYTES: return (uint64_t)r->used * r->block_bytes;
	case PV_CHUNK: return r->chunk_blocks;
	case PV_LEASES: return r->leases;
	case PV_TENANTS: return p->ntenants;
	case PV_EPOCH: return r->epoch;
	case PV_STATE: return r->state;
	}
	return 0;
}

enum tenant_val {
	TV_MIN, TV_CURRENT, TV_PEAK, TV_LEASES, TV_EV_MAX, TV_EV_STALL,
	TV_EV_RECLAIM, TV_EV_FAIL,
};

static uint64_t tenant_val(const struct kvp_tenant_rec *t, enum tenant_val v)
{
	switch (v) {
	case TV_MIN: return t->min;
	case TV_CURRENT: return t->current;
	case TV_PEAK: return t->peak;
	case TV_LEASES: return t->leases;
	case TV_EV_MAX: return t->ev_max;
	case TV_EV_STALL: return t->ev_stall;
	case TV_EV_RECLAIM: return t->ev_reclaim;
	case TV_EV_FAIL: return t->ev_fail;
	}
	return 0;
}

static const struct {
	const char *name, *help;
	enum pool_val v;
} pool_series[] = {
	{ "kvpool_pool_block_bytes", "Bytes per block.", PV_BLOCK_BYTES },
	{ "kvpool_pool_capacity_blocks", "Pool capacity in blocks.",
	  PV_CAPACITY },
	{ "kvpool_pool_backed_blocks",
	  "Blocks with physical memory behind them.", PV_BACKED },
	{ "kvpool_pool_used_blocks", "Leased blocks.", PV_USED },
	{ "kvpool_pool_backed_bytes", "Backed memory in bytes.",
	  PV_BACKED_BYTES },
	{ "kvpool_pool_used_bytes", "Leased memory in bytes.", PV_USED_BYTES },
	{ "kvpool_pool_chunk_blocks", "Grow/shrink granularity in blocks.",
	  PV_CHUNK },
	{ "kvpool_pool_leases", "Open leases.", PV_LEASES },
	{ "kvpool_pool_tenants", "Tenants.", PV_TENANTS },
	{ "kvpool_pool_epoch", "Owner epoch (changes on daemon restart).",
	  PV_EPOCH },
	{ "kvpool_pool_state",
	  "Pool state: 1 live (owner attached), 2 orphaned.", PV_STATE },
};

static const struct {
	const char *name, *type, *help;
	enum tenant_val v;
} tenant_series[] = {
	{ "kvpool_tenant_min_blocks", "gauge", "Protected blocks.", TV_MIN },
	{ "kvpool_tenant_current_blocks", "gauge", "Blocks held now.",
	  TV_CURRENT },
	{ "kvpool_tenant_peak_blocks", "gauge", "Most blocks ever held.",
	  TV_PEAK },
	{ "kvpool_tenant_leases", "gauge", "Open leases of the tenant.",
	  TV_LEASES },
	{ "kvpool_tenant_max_events_total", "counter",
	  "Grants refused by the tenant's max.", TV_EV_MAX },
	{ "kvpool_tenant_stall_events_total", "counter",
	  "Callers that waited for blocks.", TV_EV_STALL },
	{ "kvpool_tenant_reclaim_events_total", "counter",
	  "Reclaim requests posted to the tenant.", TV_EV_RECLAIM },
	{ "kvpool_tenant_fail_events_total", "counter",
	  "Grants that failed (timeout, no memory).", TV_EV_FAIL },
};

enum prefix_val {
	XV_CACHED, XV_REFERENCED, XV_HITS, XV_MISSES, XV_HIT_TOKENS,
	XV_EVICTIONS, XV_PUBLISHED,
};

static uint64_t prefix_val(const struct kvp_prefix_rec *x, enum prefix_val v)
{
	switch (v) {
	case XV_CACHED: return x->cached;
	case XV_REFERENCED: return x->referenced;
	case XV_HITS: return x->hits;
	case XV_MISSES: return x->misses;
	case XV_HIT_TOKENS: return x->hit_tokens;
	case XV_EVICTIONS: return x->evictions;
	case XV_PUBLISHED: return x->published;
	}
	return 0;
}

static const struct {
	const char *name, *type, *help;
	enum prefix_val v;
} prefix_series[] = {
	{ "kvpool_prefix_cached_blocks", "gauge",
	  "Blocks in the tenant's prefix cache (counted in its current).",
	  XV_CACHED },
	{ "kvpool_prefix_referenced_blocks", "gauge",
	  "Cached blocks in use by some sequence.", XV_REFERENCED },
	{ "kvpool_prefix_hits_total", "counter",
	  "Full blocks found in the prefix cache.", XV_HITS },
	{ "kvpool_prefix_misses_total", "counter",
	  "Full blocks looked up and not found.", XV_MISSES },
	{ "kvpool_prefix_hit_tokens_total", "counter",
	  "Tokens in the blocks found (prefill not computed).", XV_HIT_TOKENS },
	{ "kvpool_prefix_evictions_total", "counter",
	  "Unreferenced cached blocks given back.", XV_EVICTIONS },
	{ "kvpool_prefix_published_total", "counter",
	  "Blocks added to the prefix cache.", XV_PUBLISHED },
};

static void tenant_labels(FILE *f, const char *name,
			  const struct kvp_metrics_pool *p,
			  const struct kvp_tenant_rec *t)
{
	pool_labels(f, name, p);
	fputc(',', f);
	label(f, "tenant", t->name, sizeof(t->name));
	fputs("} ", f);
}

/* ---- tiers ------------------------------------------------------------ */

static const char *tier_kind(uint32_t k)
{
	switch (k) {
	case KVP_TIER_TOP: return "top";
	case KVP_TIER_DRAM: return "dram";
	case KVP_TIER_NVME: return "nvme";
	default: return "unknown";
	}
}

enum tier_val {
	RV_CAPACITY, RV_BACKED, RV_USED, RV_BYTES_IN, RV_BYTES_OUT,
	RV_BLOCKS_IN, RV_BLOCKS_OUT, RV_ERRORS, RV_PFX, RV_PFX_IN,
	RV_PFX_OUT,
};

static uint64_t tier_val(const struct kvp_tier_rec *x, enum tier_val v)
{
	switch (v) {
	case RV_CAPACITY: return x->pool.capacity;
	case RV_BACKED: return x->pool.backed;
	case RV_USED: return x->pool.used;
	case RV_BYTES_IN: return x->bytes_in;
	case RV_BYTES_OUT: return x->bytes_out;
	case RV_BLOCKS_IN: return x->blocks_in;
	case RV_BLOCKS_OUT: return x->blocks_out;
	case RV_ERRORS: return x->errors;
	case RV_PFX: return x->prefix_blocks;
	case RV_PFX_IN: return x->prefix_in;
	case RV_PFX_OUT: return x->prefix_out;
	}
	return 0;
}

/* .traffic: the swaps' activity, written in the operator's scope only */
static const struct {
	const char *name, *type, *help;
	enum tier_val v;
	bool traffic;
} tier_series[] = {
	{ "kvpool_tier_capacity_blocks", "gauge", "Tier capacity in blocks.",
	  RV_CAPACITY, false },
	{ "kvpool_tier_backed_blocks", "gauge",
	  "Tier blocks with memory or file space behind them.", RV_BACKED,
	  false },
	{ "kvpool_tier_used_blocks", "gauge", "Tier blocks leased.", RV_USED,
	  false },
	{ "kvpool_tier_swap_in_bytes_total", "counter",
	  "Bytes copied into this tier by swaps.", RV_BYTES_IN, true },
	{ "kvpool_tier_swap_out_bytes_total", "counter",
	  "Bytes copied out of this tier by swaps.", RV_BYTES_OUT, true },
	{ "kvpool_tier_swap_in_blocks_total", "counter",
	  "Blocks copied into this tier by swaps.", RV_BLOCKS_IN, true },
	{ "kvpool_tier_swap_out_blocks_total", "counter",
	  "Blocks copied out of this tier by swaps.", RV_BLOCKS_OUT, true },
	{ "kvpool_tier_swap_errors_total", "counter",
	  "Swaps with this tier at one end that failed.", RV_ERRORS, true },
	{ "kvpool_tier_prefix_blocks", "gauge",
	  "Evicted prefix-cache blocks held in this tier.", RV_PFX, true },
	{ "kvpool_tier_prefix_demoted_blocks_total", "counter",
	  "Prefix-cache blocks demoted into this tier.", RV_PFX_IN, true },
	{ "kvpool_tier_prefix_promoted_blocks_total", "counter",
	  "Prefix-cache blocks found in this tier and copied up.",
	  RV_PFX_OUT, true },
};

static void tier_labels(FILE *f, const char *name,
			const struct kvp_tier_rec *x)
{
	fprintf(f, "%s{", name);
	label(f, "pool", x->pool.name, sizeof(x->pool.name));
	fprintf(f, ",tier=\"%u\"", x->tier);
}

#define LAT "kvpool_tier_swap_latency_seconds"

static void write_tiers(FILE *f, const struct kvp_metrics_tiers *m,
			bool operator)
{
	static const char *const states[] = { "resident", "swapped",
					      "dropped" };
	const struct kvp_tier_rec *x;
	unsigned int k, b, s;
	uint32_t i, j;

	head(f, "kvpool_tier_info", "gauge", "A tier of the daemon (value 1).");
	for (x = m->tiers; x < m->tiers + m->ntiers; x++) {
		tier_labels(f, "kvpool_tier_info", x);
		fprintf(f, ",kind=\"%s\"} 1\n", tier_kind(x->kind));
	}
	for (k = 0; k < sizeof(tier_series) / sizeof(tier_series[0]); k++) {
		if (tier_series[k].traffic && !operator)
			continue;
		head(f, tier_series[k].name, tier_series[k].type,
		     tier_series[k].help);
		for (x = m->tiers; x < m->tiers + m->ntiers; x++) {
			tier_labels(f, tier_series[k].name, x);
			fprintf(f, "} %llu\n", (unsigned long long)
				tier_val(x, tier_series[k].v));
		}
	}
	for (x = m->tiers; operator && x < m->tiers + m->ntiers; x++) {
		if (x == m->tiers)
			head(f, "kvpool_tier_swap_copy_seconds_total",
			     "counter", "Time spent copying, by direction.");
		tier_labels(f, "kvpool_tier_swap_copy_seconds_total", x);
		fprintf(f, ",dir=\"in\"} %.6f\n", (double)x->copy_in_ns / 1e9);
		tier_labels(f, "kvpool_tier_swap_copy_seconds_total", x);
		fprintf(f, ",dir=\"out\"} %.6f\n",
			(double)x->copy_out_ns / 1e9);
	}
	/* bucket b counts jobs of [2^b, 2^(b+1)) us: le is 2^(b+1) us; the
	 * daemon keeps no sum of latencies, so there is no _sum sample */
	for (x = m->tiers; operator && x < m->tiers + m->ntiers; x++) {
		uint64_t cum = 0;

		if (x == m->tiers)
			head(f, LAT, "histogram",
			     "Swap latency, submit to done.");

		for (b = 0; b < KVP_LAT_BUCKETS; b++) {
			cum += x->lat_us[b];
			tier_labels(f, LAT "_bucket", x);
			fprintf(f, ",le=\"%g\"} %llu\n",
				(double)(2ULL << b) / 1e6,
				(unsigned long long)cum);
		}
		tier_labels(f, LAT "_bucket", x);
		fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
		tier_labels(f, LAT "_count", x);
		fprintf(f, "} %llu\n", (unsigned long long)cum);
	}
	head(f, "kvpool_tier_tenant_current_blocks", "gauge",
	     "Blocks a tenant holds in a lower tier.");
	for (k = 1; k < m->ntiers && k < KVP_MAX_TIERS; k++) {
		for (j = 0; j < m->ntenants[k]; j++) {
			const struct kvp_tenant_rec *t = &m->tenants[k][j];

			fputs("kvpool_tier_tenant_current_blocks{", f);
			label(f, "pool", m->tiers[k].pool.name,
			      sizeof(m->tiers[k].pool.name));
			fputc(',', f);
			label(f, "tenant", t->name, sizeof(t->name));
			fprintf(f, "} %u\n", t->current);
		}
	}
	if (!operator)
		return;
	head(f, "kvpool_client_sequences", "gauge",
	     "A client's sequences by state, as it reports them.");
	for (i = 0; i < m->nclients; i++) {
		const struct kvp_client_tier_rec *c = &m->clients[i];
		uint32_t n[3], sw = 0;

		for (k = 1; k < KVP_MAX_TIERS; k++)
			sw += c->seqs.swapped[k];
		n[0] = c->seqs.resident;
		n[1] = sw;
		n[2] = c->seqs.dropped;
		for (s = 0; s < 3; s++)
			fprintf(f, "kvpool_client_sequences{lease=\"%llu\","
				"state=\"%s\"} %u\n",
				(unsigned long long)c->lease_id, states[s],
				n[s]);
	}
}

int kvp_metrics_write(FILE *f, const struct kvp_metrics_pool *pools,
		      unsigned int npools,
		      const struct kvp_metrics_tiers *tiers,
		      enum kvp_metrics_scope scope)
{
	const struct kvp_metrics_pool *p;
	unsigned int i, k;
	uint32_t j;
	bool clients = false, prefix = false;
	bool operator = scope == KVP_METRICS_OPERATOR;

	head(f, "kvpool_pool_info", "gauge", "Pool description (value 1).");
	for (p = pools; p < pools + npools; p++) {
		pool_labels(f, "kvpool_pool_info", p);
		fprintf(f, ",mode=\"%s\",", mode_name(p->pool.mode));
		label(f, "backend", p->pool.backend, sizeof(p->pool.backend));
		fprintf(f, ",state=\"%s\"} 1\n", state_name(p->pool.state));
	}
	for (k = 0; k < sizeof(pool_series) / sizeof(pool_series[0]); k++) {
		head(f, pool_series[k].name, "gauge", pool_series[k].help);
		for (p = pools; p < pools + npools; p++) {
			pool_labels(f, pool_series[k].name, p);
			fprintf(f, "} %llu\n", (unsigned long long)
				pool_val(p, pool_series[k].v));
		}
	}

	head(f, "kvpool_tenant_max_blocks", "gauge",
	     "Hard limit in blocks (+Inf: unlimited).");
	for (p = pools; p < pools + npools; p++) {
		for (j = 0; j < p->ntenants; j++) {
			const struct kvp_tenant_rec *t = &p->tenants[j];

			tenant_labels(f, "kvpool_tenant_max_blocks", p, t);
			if (t->max == M_UNLIMITED)
				fputs("+Inf\n", f);
			else
				fprintf(f, "%u\n", t->max);
		}
	}
	for (k = 0; k < sizeof(tenant_series) / sizeof(tenant_series[0]); k++) {
		head(f, tenant_series[k].name, tenant_series[k].type,
		     tenant_series[k].help);
		for (p = pools; p < pools + npools; p++) {
			for (j = 0; j < p->ntenants; j++) {
				tenant_labels(f, tenant_series[k].name, p,
					      &p->tenants[j]);
				fprintf(f, "%llu\n", (unsigned long long)
					tenant_val(&p->tenants[j],
						   tenant_series[k].v));
			}
		}
	}

	for (i = 0; operator && i < npools; i++)
		clients |= pools[i].have_clients;
	if (clients) {
		head(f, "kvpool_client_blocks", "gauge",
		     "Blocks held by one client (lease).");
		for (p = pools; p < pools + npools; p++) {
			if (!p->have_clients)
				continue;
			for (j = 0; j < p->nclients; j++) {
				const struct kvp_client_rec *c = &p->clients[j];

				pool_labels(f, "kvpool_client_blocks", p);
				fputc(',', f);
				label(f, "tenant", c->tenant,
				      sizeof(c->tenant));
				fprintf(f, ",lease=\"%llu\",pid=\"%u\"} %u\n",
					(unsigned long long)c->lease_id,
					c->pid, c->blocks);
			}
		}
	}
	for (i = 0; operator && i < npools; i++)
		prefix |= pools[i].have_prefix;
	for (k = 0; prefix &&
	     k < sizeof(prefix_series) / sizeof(prefix_series[0]); k++) {
		head(f, prefix_series[k].name, prefix_series[k].type,
		     prefix_series[k].help);
		for (p = pools; p < pools + npools; p++) {
			if (!p->have_prefix)
				continue;
			for (j = 0; j < p->nprefix; j++) {
				const struct kvp_prefix_rec *x = &p->prefix[j];

				pool_labels(f, prefix_series[k].name, p);
				fputc(',', f);
				label(f, "tenant", x->tenant, sizeof(x->tenant));
				fprintf(f, "} %llu\n", (unsigned long long)
					prefix_val(x, prefix_series[k].v));
			}
		}
	}
	if (tiers && tiers->ntiers > 1)
		write_tiers(f, tiers, operator);
	if (fflush(f) || ferror(f))
		return errno ? -errno : -EIO;
	return 0;
}

/* ---- the cluster tier ------------------------------------------------------- */

static void cl_sample(FILE *f, const char *name, const char *node,
		      const char *lkey, const char *lval, uint64_t v)
{
	fprintf(f, "%s{", name);
	label(f, "node", node, 64);
	if (lkey)
		fprintf(f, ",%s=\"%s\"", lkey, lval);
	fprintf(f, "} %llu\n", (unsigned long long)v);
}

static void cl_secs(FILE *f, const char *name, const char *help,
		    const char *node, uint64_t ns)
{
	head(f, name, "counter", help);
	fprintf(f, "%s{", name);
	label(f, "node", node, 64);
	fprintf(f, "} %.6f\n", (double)ns / 1e9);
}

int kvp_metrics_write_cluster(FILE *f, const struct kvp_cluster_status *st)
{
	static const char *const states[] = { "off", "unavailable", "down",
					      "up", "partial" };
	static const char *const reasons[] = { "short", "format", "model",
					       "chain", "tokens", "checksum",
					       "type" };
	const char *n = st->node;
	unsigned int i;

	if (st->state == KVP_CLUSTER_OFF)
		return ferror(f) ? -EIO : 0;
	head(f, "kvpool_cluster_state", "gauge",
	     "The cluster tier's state (value 1).");
	fprintf(f, "kvpool_cluster_state{");
	label(f, "node", n, sizeof(st->node));
	fprintf(f, ",state=\"%s\"} 1\n", st->state < 5 ? states[st->state] :
		"unknown");
	head(f, "kvpool_cluster_masters", "gauge",
	     "Masters in the slot map.");
	cl_sample(f, "kvpool_cluster_masters", n, NULL, NULL, st->masters);
	head(f, "kvpool_cluster_slots", "gauge",
	     "Slots the slot map covers (16384: all).");
	cl_sample(f, "kvpool_cluster_slots", n, NULL, NULL, st->slots);
	head(f, "kvpool_cluster_tenants", "gauge",
	     "Tenants with a cluster namespace key.");
	cl_sample(f, "kvpool_cluster_tenants", n, NULL, NULL, st->tenants);
	head(f, "kvpool_cluster_fetches_total", "counter",
	     "Lookups sent to the cluster (one pipelined round each).");
	cl_sample(f, "kvpool_cluster_fetches_total", n, NULL, NULL,
		  st->fetches);
	head(f, "kvpool_cluster_fetch_blocks_total", "counter",
	     "Blocks looked up in the cluster, by outcome.");
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result", "hit",
		  st->fetch_hits);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result",
		  "absent", st->fetch_absent);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result",
		  "error", st->fetch_errors);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result",
		  "timeout", st->fetch_timeouts);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result", "late",
		  st->fetch_late);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result",
		  "queue_full", st->fetch_dropped);
	cl_sample(f, "kvpool_cluster_fetch_blocks_total", n, "result",
		  "no_room", st->fetch_no_room);
	head(f, "kvpool_cluster_fetch_invalid_total", "counter",
	     "Fetched values refused (a miss, never data), by reason.");
	for (i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		cl_sample(f, "kvpool_cluster_fetch_invalid_total", n, "reason",
			  reasons[i], st->fetch_invalid[i]);
	head(f, "kvpool_cluster_fetch_bytes_total", "counter",
	     "Value bytes received.");
	cl_sample(f, "kvpool_cluster_fetch_bytes_total", n, NULL, NULL,
		  st->fetch_bytes);
	cl_secs(f, "kvpool_cluster_fetch_seconds_total",
		"Time in lookup rounds.", n, st->fetch_ns);
	head(f, "kvpool_cluster_store_blocks_total", "counter",
	     "Blocks written to the cluster, by outcome.");
	cl_sample(f, "kvpool_cluster_store_blocks_total", n, "result",
		  "stored", st->put_blocks);
	cl_sample(f, "kvpool_cluster_store_blocks_total", n, "result", "oom",
		  st->put_oom);
	cl_sample(f, "kvpool_cluster_store_blocks_total", n, "result", "error",
		  st->put_errors);
	cl_sample(f, "kvpool_cluster_store_blocks_total", n, "result",
		  "timeout", st->put_timeouts);
	cl_sample(f, "kvpool_cluster_store_blocks_total", n, "result",
		  "queue_full", st->put_dropped);
	head(f, "kvpool_cluster_store_bytes_total", "counter",
	     "Value bytes stored.");
	cl_sample(f, "kvpool_cluster_store_bytes_total", n, NULL, NULL,
		  st->put_bytes);
	head(f, "kvpool_cluster_store_queued_bytes", "gauge",
	     "Value bytes waiting to be stored.");
	cl_sample(f, "kvpool_cluster_store_queued_bytes", n, NULL, NULL,
		  st->put_queued_bytes);
	cl_secs(f, "kvpool_cluster_store_seconds_total",
		"Time in store rounds.", n, st->put_ns);
	head(f, "kvpool_cluster_events_total", "counter",
	     "Block stored/removed events for the stream, by outcome.");
	cl_sample(f, "kvpool_cluster_events_total", n, "result", "sent",
		  st->events);
	cl_sample(f, "kvpool_cluster_events_total", n, "result", "dropped",
		  st->events_dropped);
	head(f, "kvpool_cluster_heartbeats_total", "counter",
	     "Heartbeats, by outcome.");
	cl_sample(f, "kvpool_cluster_heartbeats_total", n, "result", "sent",
		  st->heartbeats);
	cl_sample(f, "kvpool_cluster_heartbeats_total", n, "result", "failed",
		  st->heartbeat_errors);
	head(f, "kvpool_cluster_redirects_total", "counter",
	     "MOVED and ASK redirections followed.");
	cl_sample(f, "kvpool_cluster_redirects_total", n, "kind", "moved",
		  st->moved);
	cl_sample(f, "kvpool_cluster_redirects_total", n, "kind", "ask",
		  st->ask);
	head(f, "kvpool_cluster_connects_total", "counter",
	     "Connections to cluster nodes opened, by outcome.");
	cl_sample(f, "kvpool_cluster_connects_total", n, "result", "opened",
		  st->connects - (st->connect_errors < st->connects ?
				  st->connect_errors : st->connects));
	cl_sample(f, "kvpool_cluster_connects_total", n, "result", "failed",
		  st->connect_errors);
	head(f, "kvpool_cluster_connections_lost_total", "counter",
	     "Connections that failed in the middle of a round.");
	cl_sample(f, "kvpool_cluster_connections_lost_total", n, NULL, NULL,
		  st->io_errors);
	head(f, "kvpool_cluster_slot_maps_total", "counter",
	     "Slot maps read (CLUSTER SLOTS), by outcome.");
	cl_sample(f, "kvpool_cluster_slot_maps_total", n, "result", "read",
		  st->refreshes);
	cl_sample(f, "kvpool_cluster_slot_maps_total", n, "result", "failed",
		  st->refresh_errors);
	return ferror(f) ? -EIO : 0;
}

int kvp_metrics_write_restart(FILE *f, const struct kvp_restart_info *ri)
{
	static const char *const stores[] = { "none", "module", "systemd" };

	head(f, "kvpool_restart_store", "gauge",
	     "Where pool memory is kept for the next start (value 1).");
	fprintf(f, "kvpool_restart_store{store=\"%s\"} 1\n",
		ri->store < 3 ? stores[ri->store] : "unknown");
	head(f, "kvpool_restart_preserved", "gauge",
	     "1 when this start used the memory an earlier daemon kept.");
	fprintf(f, "kvpool_restart_preserved %u\n", ri->preserved ? 1 : 0);
	head(f, "kvpool_restart_lives", "gauge",
	     "Daemon starts on the kept metadata region (1: a first start).");
	fprintf(f, "kvpool_restart_lives %llu\n",
		(unsigned long long)ri->lives);
	head(f, "kvpool_restart_preserved_blocks", "gauge",
	     "Blocks whose contents this start kept.");
	fprintf(f, "kvpool_restart_preserved_blocks %llu\n",
		(unsigned long long)ri->blocks);
	head(f, "kvpool_restart_preserved_bytes", "gauge",
	     "Bytes of those blocks.");
	fprintf(f, "kvpool_restart_preserved_bytes %llu\n",
		(unsigned long long)ri->bytes);
	head(f, "kvpool_restart_preserved_prefix_entries", "gauge",
	     "Prefix-cache entries this start kept.");
	fprintf(f, "kvpool_restart_preserved_prefix_entries %llu\n",
		(unsigned long long)ri->prefix_entries);
	head(f, "kvpool_restart_resume_seconds", "gauge",
	     "From this start of kvpoold to serving.");
	fprintf(f, "kvpool_restart_resume_seconds %.6f\n",
		(double)ri->resume_ns / 1e9);
	return ferror(f) ? -EIO : 0;
}
