#!/bin/sh
# SPDX-License-Identifier: MIT
# The prefix cache's demotion chain through the lower tiers (kvpoold
# --prefix-demote, in-process ledger, cpu backend, a dram tier and an nvme
# tier): evicted prefix
# blocks go to dram instead of being dropped, charged to their tenant
# there; with the tenant's dram quota full the least recently used go on
# to nvme; a later match finds them in either tier, copies them up, K/V
# bit-equal to a private prefill, and they leave the lower tiers; another
# tenant never finds them; a flush drops them from every tier and the
# tenant can then be deleted; they take at most half of a tier (swaps
# find the rest), and a tier that is short (a grant waits) gets its
# blocks back from them, which go on down.
. "$(dirname "$0")/lib.sh"
CL="$E2E_BIN/e2e-cluster"
TIERS="$E2E_BIN/e2e-tiers"
for p in "$CL" "$TIERS"; do
	[ -x "$p" ] || { echo "FAIL: missing $p (run make)"; exit 1; }
done
CTL=${KVPOOLCTL:-build/bin/kvpoolctl}

# dram: 64 blocks, of which app may hold 4; nvme: 64 blocks
start_daemon --prefix-demote --tenant app --tenant other \
	--tenant dram/app:4 --tier dram:64 --tier "nvme:$TMP/swap:64"

"$CL" publish "$SOCK" app 1 512 >"$TMP/t1.out" || fail "publish"
"$TIERS" wait-used "$SOCK" 0 8 5000 || fail "8 cached blocks on top"
"$CL" evict "$SOCK" app 100 >"$TMP/t2.out" || fail "evict"
grep -q "^evicted 8" "$TMP/t2.out" || fail "evicted: $(cat "$TMP/t2.out")"
# 4 in dram (the tenant's quota there), the 4 older ones went on to nvme
"$TIERS" wait-used "$SOCK" 1 4 5000 || fail "dram does not hold 4"
"$TIERS" wait-used "$SOCK" 2 4 5000 || fail "nvme does not hold 4"
"$TIERS" wait-used "$SOCK" 0 0 5000 || fail "blocks left on top"
"$UTIL" tenant "$SOCK" app | grep -q "current=0 " ||
	fail "the top pool still charges app"
"$CTL" --socket "$SOCK" metrics >"$TMP/m1" || fail "metrics"
grep -q '^kvpool_tier_prefix_blocks{pool="dram",tier="1"} 4$' "$TMP/m1" &&
grep -q '^kvpool_tier_prefix_blocks{pool="nvme",tier="2"} 4$' "$TMP/m1" &&
grep -q '^kvpool_tier_prefix_demoted_blocks_total{pool="dram",tier="1"} 8$' "$TMP/m1" ||
	fail "tier prefix metrics: $(grep prefix "$TMP/m1" | grep tier)"
echo "8 evicted blocks: 4 in dram, 4 in nvme, none on top"

# another tenant does not find them
"$CL" hit "$SOCK" other 1 512 0 >"$TMP/t3.out" || fail "other's match"
grep -q "^matched 0 " "$TMP/t3.out" || fail "other found app's demoted blocks"
"$TIERS" wait-used "$SOCK" 1 4 2000 || fail "dram changed"
# app finds them all, from both tiers, and they come up
"$CL" hit "$SOCK" app 1 512 8 >"$TMP/t4.out" || fail "app's match"
cat "$TMP/t4.out"
"$TIERS" wait-used "$SOCK" 1 0 5000 || fail "dram still holds blocks"
"$TIERS" wait-used "$SOCK" 2 0 5000 || fail "nvme still holds blocks"
"$TIERS" wait-used "$SOCK" 0 8 5000 || fail "the blocks are not back on top"
"$CTL" --socket "$SOCK" metrics >"$TMP/m2" || fail "metrics"
grep -q '^kvpool_tier_prefix_promoted_blocks_total{pool="dram",tier="1"} 4$' "$TMP/m2" &&
grep -q '^kvpool_tier_prefix_promoted_blocks_total{pool="nvme",tier="2"} 4$' "$TMP/m2" ||
	fail "promotion metrics: $(grep prefix "$TMP/m2" | grep tier)"
echo "matched from dram and nvme: K/V equal to a private prefill, promoted"

# a flush drops them from every tier; the tenant can go
"$CL" evict "$SOCK" app 100 >/dev/null || fail "evict again"
"$TIERS" wait-used "$SOCK" 1 4 5000 || fail "dram does not hold 4 again"
"$CTL" --socket "$SOCK" prefix flush app >/dev/null || fail "flush"
for t in 0 1 2; do
	"$TIERS" wait-used "$SOCK" $t 0 5000 || fail "tier $t holds blocks after the flush"
done
"$CL" hit "$SOCK" app 1 512 0 >"$TMP/t5.out" || fail "match after the flush"
grep -q "^matched 0 " "$TMP/t5.out" || fail "flushed blocks found"
echo "a flush dropped them from every tier"

daemon_alive
"$CTL" --socket "$SOCK" tenant del app || fail "app cannot be deleted"
echo "app deleted"

# demoted blocks take at most half a tier: swaps (they do not wait for
# room) find the rest; a grant that waits for more (the pool is short:
# its SHORT event) gets demoted blocks back, which go on to nvme
stop_daemon
start_daemon --prefix-demote --tenant app --tenant other --tier dram:16 \
	--tier "nvme:$TMP/swap2:64"
"$CL" publish "$SOCK" other 2 512 >/dev/null || fail "publish other 2"
"$CL" publish "$SOCK" other 3 512 >/dev/null || fail "publish other 3"
"$CL" evict "$SOCK" other 100 >/dev/null || fail "evict other"
"$TIERS" wait-used "$SOCK" 1 8 5000 || fail "dram does not hold half"
"$TIERS" wait-used "$SOCK" 2 8 5000 || fail "nvme does not hold the rest"
"$TIERS" roundtrip "$SOCK" app >"$TMP/t6.out" 2>&1 ||
	fail "swaps next to demoted blocks: $(tail -n 3 "$TMP/t6.out")"
"$CL" tierlease "$SOCK" app 1 12 >"$TMP/t7.out" ||
	fail "a waiting lease of 12 dram blocks (8 free)"
# 4 of the 8 at least; a SHORT posted again by the waiting lease before
# the first was answered may send the other 4 down too
"$TIERS" wait-used "$SOCK" 2 12-16 5000 ||
	fail "the demoted blocks dram gave back did not go on to nvme"
"$CL" hit "$SOCK" other 2 512 8 >"$TMP/t8.out" || fail "other's match"
"$CL" hit "$SOCK" other 3 512 8 >>"$TMP/t8.out" || fail "other's match"
echo "half of dram for demoted blocks, swaps beside them; a short dram gave 4 (or all 8) back to nvme; other then matched all"
daemon_alive
echo "PASS: demoted prefix blocks go down the tiers, come back up, stay the tenant's"
