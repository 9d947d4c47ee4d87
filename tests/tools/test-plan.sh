#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoolctl plan: figures against hand arithmetic (DESIGN section 1).
#   bytes/token = 2 x layers x kv_heads x head_dim x bytes/element
#   (int4: head_dim/2 + 2 x head_dim/32 bytes per row)
K=${KVPOOLCTL:-build/bin/kvpoolctl}
[ -x "$K" ] || { echo "missing $K (run make)"; exit 1; }
fail=0

# expect "ARGS" KEY VALUE [KEY VALUE...]
expect() {
	args=$1; shift
	# shellcheck disable=SC2086
	out=$($K plan $args --json 2>&1) || { echo "FAIL: plan $args: exit $?: $out"; fail=1; return; }
	while [ $# -ge 2 ]; do
		if ! printf '%s\n' "$out" | grep -q "^  \"$1\": $2,\{0,1\}\$"; then
			got=$(printf '%s\n' "$out" | grep "\"$1\"")
			echo "FAIL: plan $args: $1 want $2, got: ${got:-nothing}"
			fail=1
		fi
		shift 2
	done
}

# The DESIGN figure: Llama-3.1-70B, 80 x 8 x 128, BF16: 327,680 B/token,
# 131,072 tokens = 42,949,672,960 B; 16-token blocks of 5 MiB, 8192 blocks.
expect "--model llama-3.1-70b --ctx 131072 --dtype bf16" \
	bytes_per_token 327680 bytes_per_request 42949672960 \
	block_bytes 5242880 tokens_per_block 16 blocks_per_request 8192
# 70B in BF16 (141 GB) does not fit one 80 GiB GPU: util leaves nothing.
expect "--model llama-3.1-70b" kv_bytes_per_gpu 0 util_leaves_nothing true \
	util_kv_bytes_per_gpu 0 requests_fit 0
# FP8/INT8 halve it; int4: 2 x 80 x 8 x (64 + 2 x 4) = 92,160 B/token.
expect "--model llama-3.1-70b --ctx 131072 --dtype fp8" bytes_per_token 163840 \
	bytes_per_request 21474836480
expect "--model llama-3.1-70b --ctx 131072 --dtype int8" bytes_per_token 163840
expect "--model llama-3.1-70b --ctx 131072 --dtype int4" bytes_per_token 92160 \
	bytes_per_request 12079595520
# 8B: 2 x 32 x 8 x 128 x 2 = 131,072 B/token; 8192 tokens = 1 GiB.
expect "--model llama-3.1-8b --ctx 8192" bytes_per_token 131072 \
	bytes_per_request 1073741824 blocks_per_request 512 util_leaves_nothing false
# 405B: 126 layers: 516,096 B/token.
expect "--model llama-3.1-405b --ctx 1000" bytes_per_token 516096 \
	bytes_per_request 516096000
# Qwen2.5-7B: 28 x 4 KV heads: 57,344 B/token BF16; FP8 28,672 B/token plus
# 2 x 28 x 4 FP32 scales (896 B) per block: 896 + 16 x 28,672 = 459,648,
# rounded up to 256 B = 459,776.
expect "--model qwen2.5-7b --ctx 32768" bytes_per_token 57344 \
	bytes_per_request 1879048192
expect "--model qwen2.5-7b --ctx 32768 --dtype fp8" bytes_per_token 28672 \
	block_meta_bytes 896 block_bytes 459776 blocks_per_request 2048
# Qwen2.5-72B and Mistral-7B (int4: 2 x 32 x 8 x 72 = 36,864).
expect "--model qwen2.5-72b --ctx 32768" bytes_per_token 327680 \
	bytes_per_request 10737418240
expect "--model mistral-7b --ctx 32768 --dtype int4" bytes_per_token 36864
# Explicit layout, int4, block size given: row 32 + 4 = 36 B, token
# 2 x 2 x 36 = 144 B, 1024-byte block holds 7, 100 tokens need 15 blocks.
expect "--layers 2 --kv-heads 1 --head-dim 64 --dtype int4 --ctx 100 --block-bytes 1024" \
	bytes_per_token 144 bytes_per_request 14400 tokens_per_block 7 \
	blocks_per_request 15 weights_bytes 0
# Tensor parallel 8: one KV head per GPU, 40,960 B/token/GPU, weights / 8.
# 80 GiB - 17,638,426,624 = 68,260,919,296 B = 104,157 blocks of 655,360 B
# = 12 requests of 8192 blocks; util 0.9: 77,309,411,328 - weights =
# 59,670,984,704 B = 91,050 blocks = 11 requests.
expect "--model llama-3.1-70b --tp 8" kv_heads_per_gpu 1 \
	bytes_per_token_per_gpu 40960 weights_bytes_per_gpu 17638426624 \
	kv_bytes_per_gpu 68260919296 blocks_fit 104157 requests_fit 12 \
	util_claimed_bytes_per_gpu 77309411328 \
	util_kv_bytes_per_gpu 59670984704 util_requests_fit 11
# tp above kv_heads replicates: Qwen2.5-7B (4 KV heads) on 8 GPUs.
expect "--model qwen2.5-7b --tp 8" kv_heads_per_gpu 1 bytes_per_token_per_gpu 14336
# explicit sizes with suffixes, weights and util
expect "--layers 32 --kv-heads 8 --head-dim 128 --ctx 4Ki --gpu-mem 24GiB --weights-bytes 16G --util 0.5" \
	ctx 4096 bytes_per_request 536870912 util_claimed_bytes_per_gpu 12884901888 \
	util_leaves_nothing true kv_bytes_per_gpu 9769803776

# the text form names the same figure
$K plan --model llama-3.1-70b --ctx 131072 | grep -q "42,949,672,960" ||
	{ echo "FAIL: text output lacks 42,949,672,960"; fail=1; }
$K plan --list-models | grep -q "qwen2.5-72b" || { echo "FAIL: --list-models"; fail=1; }

[ $fail = 0 ] && echo "plan: all figures match"
exit $fail
