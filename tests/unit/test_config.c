// SPDX-License-Identifier: MIT
/*
 * test_config - kvpoold's configuration parser (daemon/config.c): a full
 * file, the syntax it accepts (comments, blanks, indentation, a BOM, CRLF),
 * every error with its line number, the --tenant spec parser, flags
 * replacing the file's tenants, the [cluster] section, and kvd_conf_load()
 * on real files.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "kvpoold.h"

static struct kvd_conf conf;
static char err[KVD_CONF_ERR_LEN];

static int parse(const char *text)
{
	return kvd_conf_parse(text, strlen(text), &conf, err, sizeof(err));
}

/* The text must fail with this message (the line number included). */
static void bad(const char *text, const char *want)
{
	int r = parse(text);

	if (r != -EINVAL || !strstr(err, want))
		fail_msg("parse of <<%s>>: r=%d err '%s', want '%s'", text, r,
			 err, want);
}

#define SET(k) (conf.set & (1U << (k)))

static void test_full_file(void **state)
{
	static const char text[] =
		"# kvpoold.conf\n"
		"; another comment\n"
		"\n"
		"[daemon]\n"
		"socket = /run/kvpool/test.sock\n"
		"device = /dev/kvpool\n"
		"backend = cpu\n"
		"ledger = inproc\n"
		"user = kvpool\n"
		"admin_group = kvpool\n"
		"cuda_device = 1\n"
		"log_level = debug\n"
		"metrics_listen = 127.0.0.1:9477\n"
		"metrics_scope = operator\n"
		"[pool]\n"
		"name = gpu0\n"
		"block_bytes = 256K\n"
		"capacity = 16384\n"
		"chunk_blocks = 64\n"
		"default_max = max\n"
		"shrink_delay_ms = 1500\n"
		"backing_limit = 4096\n"
		"tier = dram:8G\n"
		"tier = nvme:/var/lib/kvpool/kv.pool:1T:ssd\n"
		"nvme_io = pread\n"
		"prefix_lend_percent = 25\n"
		"prefix_demote = no\n"
		"[tenant chat]\n"
		"max = 4096\n"
		"min = 512\n"
		"uid = 1000\n"
		"gid = 0\n"
		"[tenant batch]\n"
		"max = max\n"
		"[tenant idle]\n"
		"[tenant ssd/chat]\n"
		"max = 100000\n";

	assert_int_equal(parse(text), 0);
	assert_string_equal(err, "");
	assert_int_equal(conf.set, (1U << KVD_K_NKEYS) - 1);
	assert_string_equal(conf.socket_path, "/run/kvpool/test.sock");
	assert_string_equal(conf.device_path, "/dev/kvpool");
	assert_string_equal(conf.backend, "cpu");
	assert_string_equal(conf.ledger, "inproc");
	assert_string_equal(conf.user, "kvpool");
	assert_string_equal(conf.admin_group, "kvpool");
	assert_int_equal(conf.cuda_device, 1);
	assert_int_equal(conf.log_level, KVD_DEBUG);
	assert_string_equal(conf.metrics_listen, "127.0.0.1:9477");
	assert_string_equal(conf.pool, "gpu0");
	assert_int_equal(conf.block_bytes, 262144);
	assert_int_equal(conf.capacity, 16384);
	assert_int_equal(conf.chunk_blocks, 64);
	assert_int_equal(conf.default_max, KVPOOL_UNLIMITED);
	assert_int_equal(conf.shrink_delay_ms, 1500);
	assert_int_equal(conf.backing_limit, 4096);
	assert_int_equal(conf.ntiers, 2);
	assert_int_equal(conf.tiers[0].kind, KVP_TIER_DRAM);
	assert_int_equal(conf.tiers[0].bytes, 8ULL << 30);
	assert_string_equal(conf.tiers[0].name, "");
	assert_int_equal(conf.tiers[1].kind, KVP_TIER_NVME);
	assert_string_equal(conf.tiers[1].path, "/var/lib/kvpool/kv.pool");
	assert_int_equal(conf.tiers[1].bytes, 1ULL << 40);
	assert_string_equal(conf.tiers[1].name, "ssd");
	assert_string_equal(conf.nvme_io, "pread");
	assert_int_equal(conf.metrics_scope, KVD_METRICS_OPERATOR);
	assert_int_equal(conf.prefix_lend_percent, 25);
	assert_int_equal(conf.ntenants, 4);
	assert_string_equal(conf.tenants[0].pool, "");
	assert_string_equal(conf.tenants[0].name, "chat");
	assert_int_equal(conf.tenants[0].max, 4096);
	assert_int_equal(conf.tenants[0].min, 512);
	assert_int_equal(conf.tenants[0].uid, 1000);
	assert_int_equal(conf.tenants[0].gid, 0);
	assert_int_equal(conf.tenants[0].line, 28);
	assert_string_equal(conf.tenants[1].name, "batch");
	assert_int_equal(conf.tenants[1].max, KVPOOL_UNLIMITED);
	assert_int_equal(conf.tenants[1].min, 0);
	assert_int_equal(conf.tenants[1].uid, KVPOOL_ID_NONE);
	assert_int_equal(conf.tenants[1].gid, KVPOOL_ID_NONE);
	/* an empty section is still a tenant, with the defaults */
	assert_string_equal(conf.tenants[2].name, "idle");
	assert_int_equal(conf.tenants[2].max, KVPOOL_UNLIMITED);
	assert_int_equal(conf.tenants[2].line, 35);
	/* the same name in a lower pool is another tenant */
	assert_string_equal(conf.tenants[3].pool, "ssd");
	assert_string_equal(conf.tenants[3].name, "chat");
	assert_int_equal(conf.tenants[3].max, 100000);
	assert_int_equal(conf.tenants[3].line, 36);
}

static void test_empty_and_comments(void **state)
{
	assert_int_equal(parse(""), 0);
	assert_int_equal(conf.set, 0);
	assert_int_equal(conf.ntenants, 0);
	assert_int_equal(parse("# nothing\n\n   \n; at all\n"), 0);
	assert_int_equal(conf.set, 0);
	/* no newline at the end, indentation, CRLF, a BOM, inline comments */
	assert_int_equal(parse("\xef\xbb\xbf[pool]\r\n"
			       "    capacity = 100   # blocks\r\n"
			       "\tchunk_blocks=10 ; blocks\r\n"
			       "  [tenant a.b-c_d]\n"
			       "  max = 7"), 0);
	assert_int_equal(conf.capacity, 100);
	assert_int_equal(conf.chunk_blocks, 10);
	assert_int_equal(conf.ntenants, 1);
	assert_string_equal(conf.tenants[0].name, "a.b-c_d");
	assert_int_equal(conf.tenants[0].max, 7);
	/* '#' inside a value (no blank before it) is part of it */
	assert_int_equal(parse("[daemon]\nsocket = /tmp/a#b\n"), 0);
	assert_string_equal(conf.socket_path, "/tmp/a#b");
	/* the sections need not come in any order */
	assert_int_equal(parse("[tenant x]\n[pool]\ncapacity=5\n[daemon]\n"
			       "backend=auto\n"), 0);
	assert_int_equal(conf.capacity, 5);
	assert_string_equal(conf.backend, "auto");
}

static void test_sizes(void **state)
{
	assert_int_equal(parse("[pool]\nblock_bytes = 1M\n"), 0);
	assert_int_equal(conf.block_bytes, 1 << 20);
	assert_int_equal(parse("[pool]\nblock_bytes = 1G\n"), 0);
	assert_int_equal(conf.block_bytes, 1 << 30);
	assert_int_equal(parse("[pool]\nblock_bytes = 4096\n"), 0);
	assert_int_equal(conf.block_bytes, 4096);
	bad("[pool]\nblock_bytes = 2G\n", "line 2: block_bytes = 2G: must be");
	bad("[pool]\nblock_bytes = 100\n", "line 2: block_bytes = 100");
	bad("[pool]\nblock_bytes = 0\n", "line 2: block_bytes");
	bad("[pool]\nblock_bytes = 1T\n", "line 2: block_bytes");
	bad("[pool]\nblock_bytes = 1KK\n", "line 2: block_bytes");
	bad("[pool]\nblock_bytes = -256\n", "line 2: block_bytes");
	bad("[pool]\nblock_bytes = 0x100\n", "line 2: block_bytes");
	bad("[pool]\nblock_bytes = 99999999999999999999999\n",
	    "line 2: block_bytes");
	bad("[pool]\ncapacity = 1K\n", "line 2: capacity = 1K");
}

static void test_value_errors(void **state)
{
	bad("[daemon]\nsocket = relative.sock\n",
	    "line 2: socket = relative.sock: needs an absolute path");
	bad("[daemon]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	    "line 2: socket");
	bad("[daemon]\nbackend = gpu\n", "line 2: backend = gpu: must be auto");
	bad("[daemon]\nledger = kernel\n", "line 2: ledger = kernel");
	bad("[daemon]\nuser = two words\n", "line 2: user = two words");
	bad("[daemon]\nadmin_group = a:b\n", "line 2: admin_group = a:b");
	bad("[daemon]\ncuda_device = 65\n", "line 2: cuda_device = 65");
	bad("[daemon]\nlog_level = loud\n", "line 2: log_level = loud");
	bad("[daemon]\nmetrics_listen = 9477\n", "line 2: metrics_listen");
	bad("[daemon]\nmetrics_listen = :9477\n", "line 2: metrics_listen");
	bad("[daemon]\nmetrics_listen = ::1:9477\n", "line 2: metrics_listen");
	bad("[daemon]\nmetrics_listen = host:65536\n",
	    "line 2: metrics_listen");
	bad("[daemon]\nmetrics_scope = all\n",
	    "line 2: metrics_scope = all: must be public or operator");
	bad("[pool]\nprefix_lend_percent = 101\n",
	    "line 2: prefix_lend_percent = 101: must be 0 to 100");
	bad("[daemon]\nprefix_lend_percent = 5\n",
	    "line 2: unknown key 'prefix_lend_percent' in [daemon]");
	bad("[pool]\nname = -bad\n", "line 2: name = -bad");
	bad("[pool]\nname = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", "line 2: name");
	bad("[pool]\ncapacity = 0\n", "line 2: capacity = 0");
	bad("[pool]\ncapacity = 67108865\n", "line 2: capacity");
	bad("[pool]\nchunk_blocks = 0\n", "line 2: chunk_blocks");
	bad("[pool]\ndefault_max = lots\n", "line 2: default_max = lots");
	bad("[pool]\nshrink_delay_ms = 3600001\n", "line 2: shrink_delay_ms");
	bad("[pool]\nbacking_limit = max\n", "line 2: backing_limit");
	bad("[pool]\ncapacity =\n", "line 2: capacity: empty value");
	bad("[pool]\ncapacity = # nothing\n", "line 2: capacity: empty value");
	bad("[pool]\ntier = ram:10\n", "line 2: tier = ram:10: must be "
	    "dram:SIZE[:NAME] or nvme:PATH:SIZE[:NAME]");
	bad("[pool]\ntier = dram\n", "line 2: tier = dram: must be");
	bad("[pool]\ntier = dram:0\n", "line 2: tier = dram:0: must be");
	bad("[pool]\ntier = dram:10X\n", "line 2: tier = dram:10X");
	bad("[pool]\ntier = dram:10:-x\n", "line 2: tier = dram:10:-x");
	bad("[pool]\ntier = nvme:kv.pool:1G\n",
	    "line 2: tier = nvme:kv.pool:1G: the file needs an absolute path");
	bad("[pool]\ntier = nvme:/kv:1G:a:b\n", "line 2: tier = nvme:/kv:1G:a:b");
	bad("[pool]\ntier = dram:1:a\ntier = nvme:/f:1:a\n",
	    "line 3: tier = nvme:/f:1:a: a tier of that name is given already");
	bad("[pool]\ntier = dram:1\ntier = dram:1\ntier = dram:1\n"
	    "tier = dram:1\n", "line 5: tier = dram:1: at most 3 tiers");
	bad("[pool]\nnvme_io = direct\n", "line 2: nvme_io = direct: must be "
	    "auto, uring or pread");
	bad("[pool]\nnvme_io = pread\nnvme_io = uring\n",
	    "line 3: nvme_io set twice (first on line 2)");
	bad("[daemon]\ntier = dram:1\n", "line 2: unknown key 'tier' in "
	    "[daemon]");
	bad("[pool]\ncapacity = 10\nchunk_blocks = 20\n",
	    "line 3: chunk_blocks 20 is above capacity 10");
}

static void test_structure_errors(void **state)
{
	bad("capacity = 10\n", "line 1: 'capacity' outside a section");
	bad("# c\n[pools]\n", "line 2: unknown section [pools]");
	bad("[pool gpu0]\n", "line 1: unknown section [pool gpu0]");
	bad("[daemon]\n[pool]\n\n[daemon]\n",
	    "line 4: [daemon] given twice (first on line 1)");
	bad("[pool]\n[pool]\n", "line 2: [pool] given twice (first on line 1)");
	bad("[pool]\ncapacity = 10\n\ncapacity = 20\n",
	    "line 4: capacity set twice (first on line 2)");
	bad("[pool]\nsize = 10\n", "line 2: unknown key 'size' in [pool]");
	bad("[daemon]\ncapacity = 10\n",
	    "line 2: unknown key 'capacity' in [daemon]");
	bad("[pool]\nthis line has no equals sign\n",
	    "line 2: expected [section], key = value or a comment");
	bad("\n\n[pool\n", "line 3: expected [section]");
	bad("[tenant]\n", "line 1: [tenant] needs a name");
	bad("[tenant  ]\n", "line 1: [tenant] needs a name");
	bad("[tenant a b]\n", "line 1: bad tenant name 'a b'");
	bad("[tenant _x]\n", "line 1: bad tenant name '_x'");
	bad("[tenant -p/x]\n", "line 1: bad pool name '-p'");
	bad("[tenant /x]\n", "line 1: bad pool name ''");
	bad("[tenant dram/]\n", "line 1: bad tenant name ''");
	bad("[tenant a/b/c]\n", "line 1: bad tenant name 'b/c'");
	bad("[tenant dram/a]\nsize = 1\n",
	    "line 2: unknown key 'size' in [tenant dram/a]");
	bad("[tenant dram/a]\nmax = 1\nmin = 2\n",
	    "line 1: tenant dram/a: min 2 is above max 1");
	bad("[tenant dram/a]\n[tenant a]\n[tenant dram/a]\n",
	    "line 3: tenant dram/a given twice (first on line 1)");
	bad("[tenant a]\n[tenant b]\n[tenant a]\n",
	    "line 3: tenant a given twice (first on line 1)");
	bad("[tenant a]\nmax = 10\nsize = 1\n",
	    "line 3: unknown key 'size' in [tenant a]");
	bad("[tenant a]\nmax = 10\nmax = 11\n", "line 3: max set twice");
	bad("[tenant a]\nmax = ten\n", "line 2: max = ten");
	bad("[tenant a]\nmin = max\n", "line 2: min = max");
	bad("[tenant a]\nuid = 4294967295\n", "line 2: uid = 4294967295");
	bad("[tenant a]\nuid = no-such-user-here\n",
	    "line 2: uid = no-such-user-here: no such user");
	bad("[tenant a]\ngid = no-such-group-here\n",
	    "line 2: gid = no-such-group-here: no such group");
	/* min above max: reported at the tenant's header */
	bad("[pool]\n[tenant a]\nmax = 10\nmin = 11\n[pool]\n",
	    "line 2: tenant a: min 11 is above max 10");
	bad("[tenant a]\nmin = 11\nmax = 10\n",
	    "line 1: tenant a: min 11 is above max 10");
}

static void test_first_error_wins(void **state)
{
	/* a syntax error before a bad value */
	bad("[pool]\nbroken\ncapacity = x\n", "line 2: expected");
	/* a bad value before a syntax error */
	bad("[pool]\ncapacity = x\nbroken\n", "line 2: capacity = x");
	/* a bad header before a syntax error */
	bad("[nope]\nbroken\n", "line 1: unknown section [nope]");
}

static void test_lines_and_bytes(void **state)
{
	char text[512];

	/* the longest line accepted, and one more */
	memset(text, 0, sizeof(text));
	strcpy(text, "[pool]\n# ");
	memset(text + strlen(text), 'c', KVD_CONF_MAX_LINE - 2);
	strcat(text, "\ncapacity = 3\n");
	assert_int_equal(parse(text), 0);
	assert_int_equal(conf.capacity, 3);
	memset(text, 0, sizeof(text));
	strcpy(text, "[pool]\n# ");
	memset(text + strlen(text), 'c', KVD_CONF_MAX_LINE - 1);
	strcat(text, "\n");
	bad(text, "line 2: longer than 196 characters");
	/* a NUL byte anywhere is an error of its line */
	assert_int_equal(kvd_conf_parse("[pool]\ncapa\0city = 1\n", 21, &conf,
					err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 2: NUL byte"));
	/* only len bytes are read: the rest of the buffer is not text */
	assert_int_equal(kvd_conf_parse("[pool]\ncapacity = 12garbage", 20,
					&conf, err, sizeof(err)), 0);
	assert_int_equal(conf.capacity, 12);
	/* a tiny error buffer stays terminated */
	assert_int_equal(kvd_conf_parse("x", 1, &conf, err, 8), -EINVAL);
	assert_int_equal(strlen(err), 7);
}

static void test_many_tenants(void **state)
{
	size_t cap = (KVD_CONF_MAX_TENANTS + 2) * 24, n = 0;
	char *text = malloc(cap);
	int i;

	assert_non_null(text);
	for (i = 0; i < KVD_CONF_MAX_TENANTS; i++)
		n += (size_t)snprintf(text + n, cap - n, "[tenant t%d]\n", i);
	assert_int_equal(parse(text), 0);
	assert_int_equal(conf.ntenants, KVD_CONF_MAX_TENANTS);
	snprintf(text + n, cap - n, "[tenant one-more]\n");
	bad(text, "more than 256 tenants");
	free(text);
}

static void test_tenant_spec(void **state)
{
	struct kvd_tenant_conf t;

	assert_int_equal(kvd_tenant_spec_parse("web", &t), 0);
	assert_string_equal(t.name, "web");
	assert_int_equal(t.max, KVPOOL_UNLIMITED);
	assert_int_equal(t.min, 0);
	assert_int_equal(t.uid, KVPOOL_ID_NONE);
	assert_int_equal(t.line, 0);
	assert_int_equal(kvd_tenant_spec_parse("web:100:10:1000:0", &t), 0);
	assert_int_equal(t.max, 100);
	assert_int_equal(t.min, 10);
	assert_int_equal(t.uid, 1000);
	assert_int_equal(t.gid, 0);
	assert_int_equal(kvd_tenant_spec_parse("web:max:-:-:5", &t), 0);
	assert_int_equal(t.max, KVPOOL_UNLIMITED);
	assert_int_equal(t.uid, KVPOOL_ID_NONE);
	assert_int_equal(t.gid, 5);
	assert_int_equal(kvd_tenant_spec_parse("web:-:3", &t), 0);
	assert_int_equal(t.max, KVPOOL_UNLIMITED);
	assert_int_equal(t.min, 3);
	assert_int_equal(kvd_tenant_spec_parse("", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse(":1", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("web:x", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("web:10:11", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("web:1:0:0:0:0", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("web:1:", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("dram/web:20", &t), 0);
	assert_string_equal(t.pool, "dram");
	assert_string_equal(t.name, "web");
	assert_int_equal(t.max, 20);
	assert_int_equal(kvd_tenant_spec_parse("web", &t), 0);
	assert_string_equal(t.pool, "");
	assert_int_equal(kvd_tenant_spec_parse("/web", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("dram/", &t), -EINVAL);
	assert_int_equal(kvd_tenant_spec_parse("a/b/c", &t), -EINVAL);
}

static void test_flags_replace_tenants(void **state)
{
	const char *specs[] = { "chat:50", "new:7:1", "dram/chat:9" };

	assert_int_equal(parse("[tenant chat]\nmax = 100\nmin = 10\n"
			       "[tenant batch]\n"), 0);
	assert_int_equal(kvd_conf_add_specs(&conf, specs, 3, err,
					    sizeof(err)), 0);
	assert_int_equal(conf.ntenants, 4);
	assert_string_equal(conf.tenants[0].name, "chat");
	assert_int_equal(conf.tenants[0].max, 50);
	assert_int_equal(conf.tenants[0].min, 0);	/* the flag's, all of it */
	assert_int_equal(conf.tenants[0].line, 0);
	assert_string_equal(conf.tenants[1].name, "batch");
	assert_string_equal(conf.tenants[2].name, "new");
	/* another pool's chat: added, not replacing the top pool's */
	assert_string_equal(conf.tenants[3].pool, "dram");
	assert_string_equal(conf.tenants[3].name, "chat");
	assert_int_equal(conf.tenants[3].max, 9);
	specs[0] = "bad:";
	assert_int_equal(kvd_conf_add_specs(&conf, specs, 1, err,
					    sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--tenant bad:"));
}

static void test_to_opts(void **state)
{
	struct kvd_opts o;

	memset(&o, 0, sizeof(o));
	o.capacity = 99;
	o.backend = "auto";
	assert_int_equal(parse("[pool]\nblock_bytes = 64K\n[daemon]\n"
			       "metrics_listen = [::1]:0\n"), 0);
	kvd_conf_to_opts(&conf, &o);
	assert_int_equal(o.block_bytes, 65536);
	assert_int_equal(o.capacity, 99);		/* not in the file */
	assert_string_equal(o.backend, "auto");		/* not in the file */
	assert_string_equal(o.metrics_listen, "[::1]:0");
	assert_int_equal(o.ntiers, 0);
	assert_int_equal(parse("[pool]\ntier = dram:64\ntier = nvme:/tmp/f:1M\n"
			       "nvme_io = uring\n"), 0);
	kvd_conf_to_opts(&conf, &o);
	assert_int_equal(o.ntiers, 2);
	assert_int_equal(o.tiers[0].capacity, 64);
	assert_string_equal(o.tiers[1].path, "/tmp/f");
	assert_string_equal(o.nvme_io, "uring");
	assert_false(o.prefix_demote);
	assert_int_equal(parse("[pool]\nprefix_demote = yes\n"), 0);
	kvd_conf_to_opts(&conf, &o);
	assert_true(o.prefix_demote);
	bad("[pool]\nprefix_demote = maybe\n",
	    "line 2: prefix_demote = maybe: must be yes or no");
}

/* [cluster]: the cluster tier's keys, checked as the --cluster-* flags. */
static void test_cluster(void **state)
{
	struct kvd_opts o;

	memset(&o, 0, sizeof(o));
	kvd_cluster_opts_default(&o.cluster);
	assert_int_equal(parse("[daemon]\nuser = root\n"), 0);
	assert_false(conf.has_cluster);
	kvd_conf_to_opts(&conf, &o);
	assert_string_equal(o.cluster.nodes, "");
	assert_int_equal(o.cluster.deadline_ms, 50);
	assert_int_equal(parse("[cluster]\n"
			       "nodes = 10.0.0.1:6379,redis-b:7000\n"
			       "name = node-1.a\n"
			       "keys = /etc/kvpool/cluster-keys\n"
			       "policy = back\n"
			       "deadline_ms = 20\n"
			       "heartbeat_ms = 500\n"
			       "stream_maxlen = 1000\n"
			       "value_ttl_s = 3600\n"
			       "queue_bytes = 16M\n"
			       "fetch_bytes = 1G\n"), 0);
	assert_true(conf.has_cluster);
	kvd_conf_to_opts(&conf, &o);
	assert_string_equal(o.cluster.nodes, "10.0.0.1:6379,redis-b:7000");
	assert_string_equal(o.cluster.name, "node-1.a");
	assert_string_equal(o.cluster.keys, "/etc/kvpool/cluster-keys");
	assert_int_equal(o.cluster.policy, KVP_CLUSTER_BACK);
	assert_int_equal(o.cluster.deadline_ms, 20);
	assert_int_equal(o.cluster.heartbeat_ms, 500);
	assert_int_equal(o.cluster.stream_maxlen, 1000);
	assert_int_equal(o.cluster.value_ttl_s, 3600);
	assert_int_equal(o.cluster.queue_bytes, 16ULL << 20);
	assert_int_equal(o.cluster.fetch_bytes, 1ULL << 30);
	/* a section with only some keys: defaults for the others */
	assert_int_equal(parse("[cluster]\nnodes = h:1\n"), 0);
	assert_int_equal(conf.cluster.policy, KVP_CLUSTER_THROUGH);
	assert_int_equal(conf.cluster.deadline_ms, 50);
	bad("[cluster]\npolicy = sideways\n",
	    "line 2: policy = sideways: expected through, back or read");
	bad("[cluster]\nnodes = host\n", "line 2: nodes = host: expected");
	bad("[cluster]\nnodes = h:1,\n", "line 2: nodes = h:1,: expected");
	bad("[cluster]\nnodes = h:99999\n", "line 2: nodes = h:99999");
	bad("[cluster]\nname = a/b\n", "line 2: name = a/b: letters");
	bad("[cluster]\nkeys = relative/dir\n", "expected an absolute path");
	bad("[cluster]\ndeadline_ms = 0\n", "expected 1 to 60000");
	bad("[cluster]\nqueue_bytes = 1K\n", "expected 1M to 1024G");
	bad("[cluster]\nnope = 1\n", "line 2: unknown key 'nope' in [cluster]");
	bad("[cluster]\nname = a\nname = b\n", "line 3: name set twice");
	bad("[cluster]\n[cluster]\n", "line 2: [cluster] given twice");
	bad("[cluster x]\n", "line 1: unknown section [cluster x]");
}

static void test_listen_addr(void **state)
{
	assert_int_equal(kvd_listen_addr_check("127.0.0.1:9477"), 0);
	assert_int_equal(kvd_listen_addr_check("localhost:1"), 0);
	assert_int_equal(kvd_listen_addr_check("[::]:65535"), 0);
	assert_int_equal(kvd_listen_addr_check("0.0.0.0:0"), 0);
	assert_int_equal(kvd_listen_addr_check("127.0.0.1"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("127.0.0.1:"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check(":80"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("[]:80"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("[::1:80"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("::1:80"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("a b:80"), -EINVAL);
	assert_int_equal(kvd_listen_addr_check("host:http"), -EINVAL);
}

static void test_load(void **state)
{
	char path[] = "/tmp/test_config.XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "[pool]\ncapacity = 77\n", 21), 21);
	close(fd);
	assert_int_equal(kvd_conf_load(path, &conf, err, sizeof(err)), 0);
	assert_int_equal(conf.capacity, 77);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "[pool]\n\ncapacity = 0\n", 21), 21);
	close(fd);
	assert_int_equal(kvd_conf_load(path, &conf, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "line 3: capacity = 0"));
	unlink(path);
	assert_int_equal(kvd_conf_load(path, &conf, err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(kvd_conf_load("/tmp", &conf, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "not a regular file");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_file),
		cmocka_unit_test(test_empty_and_comments),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_value_errors),
		cmocka_unit_test(test_structure_errors),
		cmocka_unit_test(test_first_error_wins),
		cmocka_unit_test(test_lines_and_bytes),
		cmocka_unit_test(test_many_tenants),
		cmocka_unit_test(test_tenant_spec),
		cmocka_unit_test(test_flags_replace_tenants),
		cmocka_unit_test(test_to_opts),
		cmocka_unit_test(test_cluster),
		cmocka_unit_test(test_listen_addr),
		cmocka_unit_test(test_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
