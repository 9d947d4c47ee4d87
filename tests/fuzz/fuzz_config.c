// SPDX-License-Identifier: MIT
/*
 * fuzz_config - libFuzzer target for kvpoold's configuration parser
 * (daemon/config.c): any bytes in, either a configuration that keeps every
 * promise of kvpoold.conf(5) or a "line N: ..." error; never a crash, a
 * leak or undefined behaviour.  `make check` replays the corpus with this
 * build (tests/fuzz/replay.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kvpoold.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

static void check_str(const char *s, size_t cap, bool set)
{
	size_t n = strnlen(s, cap);

	CHECK(n < cap);
	CHECK(!set || n > 0);
}

static void check_conf(const struct kvd_conf *c)
{
	int i, j;

#define SET(k) (!!(c->set & (1U << (k))))
	CHECK(!(c->set >> KVD_K_NKEYS));
	check_str(c->socket_path, sizeof(c->socket_path), SET(KVD_K_SOCKET));
	check_str(c->device_path, sizeof(c->device_path), SET(KVD_K_DEVICE));
	check_str(c->backend, sizeof(c->backend), SET(KVD_K_BACKEND));
	check_str(c->ledger, sizeof(c->ledger), SET(KVD_K_LEDGER));
	check_str(c->user, sizeof(c->user), SET(KVD_K_USER));
	check_str(c->admin_group, sizeof(c->admin_group),
		  SET(KVD_K_ADMIN_GROUP));
	check_str(c->metrics_listen, sizeof(c->metrics_listen),
		  SET(KVD_K_METRICS_LISTEN));
	check_str(c->pool, sizeof(c->pool), SET(KVD_K_POOL_NAME));
	if (SET(KVD_K_SOCKET))
		CHECK(c->socket_path[0] == '/');
	if (SET(KVD_K_METRICS_LISTEN))
		CHECK(!kvd_listen_addr_check(c->metrics_listen));
	if (SET(KVD_K_POOL_NAME))
		CHECK(!kvpool_name_valid(c->pool));
	if (SET(KVD_K_BLOCK_BYTES))
		CHECK(c->block_bytes && c->block_bytes % 256 == 0 &&
		      c->block_bytes <= (1ULL << 30));
	if (SET(KVD_K_CAPACITY))
		CHECK(c->capacity && c->capacity <= KVPOOL_MAX_CAPACITY);
	if (SET(KVD_K_CHUNK_BLOCKS))
		CHECK(c->chunk_blocks && c->chunk_blocks <= KVPOOL_MAX_CAPACITY);
	if (SET(KVD_K_CAPACITY) && SET(KVD_K_CHUNK_BLOCKS))
		CHECK(c->chunk_blocks <= c->capacity);
	if (SET(KVD_K_LOG_LEVEL))
		CHECK(c->log_level >= KVD_ERR && c->log_level <= KVD_DEBUG);
	if (SET(KVD_K_CUDA_DEVICE))
		CHECK(c->cuda_device >= 0 && c->cuda_device <= 64);
	if (SET(KVD_K_METRICS_SCOPE))
		CHECK(c->metrics_scope == KVD_METRICS_PUBLIC ||
		      c->metrics_scope == KVD_METRICS_OPERATOR);
	if (SET(KVD_K_PREFIX_LEND_PERCENT))
		CHECK(c->prefix_lend_percent <= 100);
#undef SET
	CHECK(c->ntenants >= 0 && c->ntenants <= KVD_CONF_MAX_TENANTS);
	for (i = 0; i < c->ntenants; i++) {
		const struct kvd_tenant_conf *t = &c->tenants[i];

		CHECK(!kvpool_name_valid(t->name));
		CHECK(!t->pool[0] || !kvpool_name_valid(t->pool));
		CHECK(t->line > 0);
		CHECK(t->max == KVPOOL_UNLIMITED || t->min <= t->max);
		for (j = 0; j < i; j++)
			CHECK(strcmp(t->name, c->tenants[j].name) != 0 ||
			      strcmp(t->pool, c->tenants[j].pool) != 0);
	}
	CHECK(c->ntiers >= 0 && c->ntiers <= KVD_MAX_TIERS - 1);
	for (i = 0; i < c->ntiers; i++) {
		const struct kvd_tier_spec *t = &c->tiers[i];

		CHECK(t->kind == KVP_TIER_DRAM || t->kind == KVP_TIER_NVME);
		CHECK(t->capacity || t->bytes);
		CHECK(t->kind != KVP_TIER_NVME || t->path[0] == '/');
		for (j = 0; j < i; j++)
			CHECK(!t->name[0] || strcmp(t->name, c->tiers[j].name));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvd_conf c;
	char err[KVD_CONF_ERR_LEN];
	int r;

	memset(err, 'x', sizeof(err));
	r = kvd_conf_parse((const char *)data, size, &c, err, sizeof(err));
	CHECK(memchr(err, '\0', sizeof(err)));
	if (r == 0) {
		CHECK(err[0] == '\0');
		check_conf(&c);
	} else {
		CHECK(r == -EINVAL || r == -ENOMEM);
		CHECK(!strncmp(err, "line ", 5) || r == -ENOMEM);
	}
	return 0;
}
