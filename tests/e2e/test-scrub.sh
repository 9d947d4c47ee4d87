#!/bin/sh
# SPDX-License-Identifier: MIT
# Freed blocks keep no bytes across tenants: tenant ta writes every byte
# of blocks and releases them (its process exits); another process of ta
# leased the same blocks (lowest free first) reads ta's own data back;
# tenant tb, leasing them next, reads zeros without writing anything:
# block sums, K/V and an attention over them.  The same through the dram
# tier and the nvme tier (swapped down by ta, read there and swapped up
# by tb), and for prefix-cache blocks that ta published and that were
# flushed.  The daemon logs that it zeroed blocks in every pool.
# $BACKEND picks the backend (test-scrub-cuda-fake.sh runs it on cuda).
. "$(dirname "$0")/lib.sh"
SCRUB="$E2E_BIN/e2e-scrub"
[ -x "$SCRUB" ] || { echo "missing $SCRUB (run make)"; exit 1; }
CTL=${CTL:-build/bin/kvpoolctl}
[ -x "$CTL" ] || { echo "missing $CTL (run make)"; exit 1; }

# a long shrink delay: the blocks stay mapped between the steps (an unmap
# gives the memory back, and the same tenant would read zeros too)
start_tiers_daemon --tenant ta --tenant tb --shrink-delay-ms 600000
for tier in 0 1 2; do
	"$SCRUB" write "$SOCK" ta $tier 8 "$TMP/w$tier" >>"$TMP/t1.out" 2>&1 ||
		fail "ta writes tier $tier"
	tiers_idle
	"$SCRUB" read "$SOCK" ta $tier 8 "$TMP/w$tier" same >>"$TMP/t1.out" 2>&1 ||
		fail "another process of ta does not read its data in tier $tier"
	tiers_idle
	"$SCRUB" read "$SOCK" tb $tier 8 "$TMP/w$tier" zero >>"$TMP/t2.out" 2>&1 ||
		fail "tb reads what ta left in tier $tier"
	tiers_idle
done
cat "$TMP/t1.out" "$TMP/t2.out"
echo "ok: a block of ta reads as zeros for tb on top, in dram and in nvme"

# cached blocks given back by the cache
: >"$TMP/t1.out"
"$SCRUB" publish "$SOCK" ta 4 "$TMP/p" >"$TMP/t1.out" 2>&1 || fail "ta publishes"
"$UTIL" wait-used "$SOCK" 4 5000 || fail "the cache does not hold 4 blocks"
"$CTL" --socket "$SOCK" prefix flush ta >/dev/null || fail "flush"
"$UTIL" wait-used "$SOCK" 0 5000 || fail "flushed blocks not returned"
"$SCRUB" read "$SOCK" tb 0 4 "$TMP/p" zero >"$TMP/t2.out" 2>&1 ||
	fail "tb reads a block that ta's cache gave back"
cat "$TMP/t1.out" "$TMP/t2.out"
echo "ok: a block ta's prefix cache gave back reads as zeros for tb"
daemon_alive

stop_daemon
for pool in "$(sed -n 's/.*: serving .*: pool \([^,]*\),.*/\1/p' "$DLOG" | head -n 1)" dram nvme; do
	[ -n "$pool" ] || fail "no top pool name in the log"
	grep -q " $pool: zeroed [1-9][0-9]* blocks" "$DLOG" ||
		fail "the daemon zeroed no block in $pool"
done
grep ": zeroed [0-9]* blocks" "$DLOG" | sed 's/.*: \([^ ]*: zeroed\)/\1/'
echo "PASS: freed blocks read as zeros for another tenant in every tier"
