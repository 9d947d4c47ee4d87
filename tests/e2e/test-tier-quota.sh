#!/bin/sh
# SPDX-License-Identifier: MIT
# Quotas per tier hold under swapping: tenant q may hold 8 blocks in dram;
# a larger swap there fails with -EDQUOT and the swap policy falls back to
# nvme, then, with no room in nvme either (max 0), drops the sequence.
. "$(dirname "$0")/lib.sh"

start_tiers_daemon --tenant q:max --tenant dram/q:8
"$TIERS" quota "$SOCK" q 1 8 next || fail "quota, falling back to nvme"
build/bin/kvpoolctl --socket "$SOCK" --pool nvme tenant set q --max 0 ||
	fail "kvpoolctl tenant set"
"$TIERS" quota "$SOCK" q 1 8 drop || fail "quota, dropping"
tiers_idle
daemon_alive
echo "PASS: per-tier quotas hold, the swap policy falls back as documented"
