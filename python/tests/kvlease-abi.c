// SPDX-License-Identifier: MIT
/*
 * kvlease-abi - prints the size of every struct of kvlease.h that the
 * Python binding mirrors, and the offset and size of each of its fields,
 * one per line ("kvl_status.epoch 120 8", "kvl_status 192"), for
 * python/tests/test_abi.py to compare with ctypes.
 */
#include <stddef.h>
#include <stdio.h>

#include "kvlease.h"

#define S(s) printf(#s " %zu\n", sizeof(struct s))
#define F(s, f) printf(#s "." #f " %zu %zu\n", offsetof(struct s, f), \
		       sizeof(((struct s *)0)->f))

int main(void)
{
	S(kvl_opts);
	F(kvl_opts, socket_path);
	F(kvl_opts, device_path);
	F(kvl_opts, pool);
	F(kvl_opts, tenant);
	F(kvl_opts, flags);
	F(kvl_opts, lease_batch);
	F(kvl_opts, region_bytes);
	F(kvl_opts, timeout_ns);
	F(kvl_opts, log);
	F(kvl_opts, log_arg);
	F(kvl_opts, log_level);
	F(kvl_opts, pad);
	F(kvl_opts, policy);
	F(kvl_opts, stall_ms);
	F(kvl_opts, reserved);
	S(kvl_status);
	F(kvl_status, pool);
	F(kvl_status, tenant);
	F(kvl_status, lease_id);
	F(kvl_status, block_bytes);
	F(kvl_status, capacity);
	F(kvl_status, backed);
	F(kvl_status, used);
	F(kvl_status, held);
	F(kvl_status, tenant_max);
	F(kvl_status, tenant_min);
	F(kvl_status, tenant_current);
	F(kvl_status, tenant_peak);
	F(kvl_status, reclaim_target);
	F(kvl_status, state);
	F(kvl_status, epoch);
	F(kvl_status, mode);
	F(kvl_status, cached);
	F(kvl_status, region_bytes);
	F(kvl_status, backend);
	F(kvl_status, reserved);
	S(kvl_layout);
	F(kvl_layout, layers);
	F(kvl_layout, kv_heads);
	F(kvl_layout, head_dim);
	F(kvl_layout, dtype);
	F(kvl_layout, rope_base);
	F(kvl_layout, tokens_per_block);
	F(kvl_layout, bytes_per_token);
	F(kvl_layout, reserved);
	S(kvl_attn_args);
	F(kvl_attn_args, layer);
	F(kvl_attn_args, batch);
	F(kvl_attn_args, q_heads);
	F(kvl_attn_args, max_blocks_per_seq);
	F(kvl_attn_args, n_new);
	F(kvl_attn_args, scale);
	F(kvl_attn_args, q);
	F(kvl_attn_args, block_tables);
	F(kvl_attn_args, ctx_lens);
	F(kvl_attn_args, out);
	F(kvl_attn_args, reserved);
	S(kvl_pool_info);
	F(kvl_pool_info, name);
	F(kvl_pool_info, block_bytes);
	F(kvl_pool_info, capacity);
	F(kvl_pool_info, backed);
	F(kvl_pool_info, used);
	F(kvl_pool_info, state);
	F(kvl_pool_info, epoch);
	F(kvl_pool_info, leases);
	F(kvl_pool_info, chunk_blocks);
	F(kvl_pool_info, tenants);
	F(kvl_pool_info, mode);
	F(kvl_pool_info, backend);
	F(kvl_pool_info, reserved);
	S(kvl_tenant_info);
	F(kvl_tenant_info, name);
	F(kvl_tenant_info, max);
	F(kvl_tenant_info, min);
	F(kvl_tenant_info, current);
	F(kvl_tenant_info, peak);
	F(kvl_tenant_info, ev_max);
	F(kvl_tenant_info, ev_stall);
	F(kvl_tenant_info, ev_reclaim);
	F(kvl_tenant_info, ev_fail);
	F(kvl_tenant_info, uid);
	F(kvl_tenant_info, gid);
	F(kvl_tenant_info, leases);
	F(kvl_tenant_info, pad);
	F(kvl_tenant_info, reserved);
	S(kvl_client_info);
	F(kvl_client_info, lease_id);
	F(kvl_client_info, pid);
	F(kvl_client_info, uid);
	F(kvl_client_info, tenant);
	F(kvl_client_info, blocks);
	F(kvl_client_info, connected);
	F(kvl_client_info, reserved);
	return 0;
}
