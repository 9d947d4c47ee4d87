#!/bin/sh
# SPDX-License-Identifier: MIT
# Swap round trip for every dtype through both lower tiers (dram, and nvme
# in a file): block bytes identical after out and in, K/V read back
# equal; with io_uring and then with plain pread/pwrite for the file; a
# sequence holding prefix-cache blocks swaps only its own blocks.
. "$(dirname "$0")/lib.sh"

start_tiers_daemon
grep -q "tier 2: pool nvme" "$DLOG" || fail "no nvme tier"
"$TIERS" roundtrip "$SOCK" >"$TMP/t1.out" 2>&1 || { cat "$TMP/t1.out"; fail "roundtrip (io auto)"; }
cat "$TMP/t1.out"
"$TIERS" prefix "$SOCK" || fail "a sequence with prefix-cache blocks"
tiers_idle
kill "$DPID"
wait "$DPID" 2>/dev/null
start_tiers_daemon --nvme-io pread
"$TIERS" roundtrip "$SOCK" >"$TMP/t2.out" 2>&1 || { cat "$TMP/t2.out"; fail "roundtrip (pread)"; }
tail -n 2 "$TMP/t2.out"
tiers_idle
daemon_alive
echo "PASS: every dtype round-trips through dram and nvme, io_uring and pread"
