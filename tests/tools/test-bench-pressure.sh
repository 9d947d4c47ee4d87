#!/bin/sh
# SPDX-License-Identifier: MIT
# Every pressure policy (recompute, swap to dram, swap to nvme, stall,
# fail) on a small oversubscribed trace (kvpool-bench pressure --quick: a
# top pool of half the trace's peak demand): no request lost, every
# request's K/V and attention outputs equal to the unpressured run's (the
# bench exits 1 otherwise), and the JSON last line names every policy.
BENCH=${KVPOOL_BENCH:-build/bin/kvpool-bench}
[ -x "$BENCH" ] || { echo "missing $BENCH (run make)"; exit 77; }
[ -x build/bin/kvpoold ] || { echo "missing build/bin/kvpoold"; exit 77; }
TMP=$(mktemp -d /tmp/kvpool-pressure.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT

"$BENCH" pressure --quick --out "$TMP" \
	--policies recompute,swap-dram,swap-nvme,stall,fail >"$TMP/out" 2>&1
rc=$?
cat "$TMP/out"
[ $rc -eq 0 ] || { echo "FAIL: kvpool-bench pressure exited $rc"; exit 1; }
for p in recompute swap-dram swap-nvme stall fail; do
	grep -q "^$p  *12/12 .* equal$" "$TMP/out" ||
		{ echo "FAIL: $p: not every request completed equal"; exit 1; }
	tail -n 1 "$TMP/out" | grep -q "\"policy\": \"$p\"" ||
		{ echo "FAIL: $p missing from the JSON line"; exit 1; }
done
grep -q '"mismatches": 0' "$TMP/summary.json" || { echo "FAIL: summary.json"; exit 1; }
echo "PASS: every policy completed the trace with equal outputs"
