#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A short kvpool-bench run (about 15 s of workload, its own kvpoold on a
# temporary socket with a dram tier) with a kill -9 of one tenant process
# mid-run, a kill -9 and restart of kvpoold, and an operator lowering one
# tenant's max.  Checks the invariants from summary.json: every tenant
# made progress, no tenant went above its max, backed returned to idle, no
# process failed, the killed process's blocks came back, the daemon served
# again after its restart; that the swap policy swapped sequences to the
# dram tier (the reasoning tenant needs more than its max), that the
# shared-prefix tenant found its system prompt in the prefix cache, and
# that the CSV and SVG exist (the SVG marks the restart).
BENCH=${KVPOOL_BENCH:-build/bin/kvpool-bench}
[ -x "$BENCH" ] || { echo "missing $BENCH (run make)"; exit 1; }
[ -x build/bin/kvpoold ] || { echo "missing build/bin/kvpoold (run make)"; exit 1; }
out=${KVPOOL_TEST_OUT:-build/tests/tools/bench}
rm -rf "$out"
unset KVPOOL_SOCKET

"$BENCH" --duration 15 --drain 15 --kill --squeeze --quiet --out "$out" \
	--step-sleep-us 200
rc=$?
fail=0
[ $rc = 0 ] || { echo "FAIL: kvpool-bench exit $rc"; fail=1; }
s="$out/summary.json"
[ -s "$s" ] || { echo "FAIL: no $s"; exit 1; }
for inv in every_tenant_progressed no_tenant_above_max backed_returned_to_idle \
	   no_process_failed killed_blocks_returned daemon_served_after_restart; do
	grep -q "\"$inv\": true" "$s" || { echo "FAIL: invariant $inv"; fail=1; }
done
grep -q '^  "ok": true' "$s" || { echo "FAIL: summary not ok"; fail=1; }
# every tenant decoded tokens (the "tokens" lines are all non-zero)
n=$(grep -c '"tokens": [1-9]' "$s")
[ "$n" -ge 3 ] || { echo "FAIL: only $n tenants with tokens"; fail=1; }
grep -q '"returned": true' "$s" || { echo "FAIL: kill: blocks not returned"; fail=1; }
grep -A3 '"restart": {' "$s" | grep -q '"served": true' ||
	{ echo "FAIL: restart: no restart of kvpoold, or it did not serve again"; fail=1; }
grep -q '"policy": "swap"' "$s" || { echo "FAIL: the workers' policy is not swap"; fail=1; }
grep -q '"swaps_out": [1-9]' "$s" || { echo "FAIL: no sequence was swapped out"; fail=1; }
grep -A30 '"mix": "shared-prefix"' "$s" | grep -q '"prefix_hit_tokens": [1-9]' ||
	{ echo "FAIL: the shared-prefix tenant found nothing in the prefix cache"; fail=1; }
# the squeezed tenant came down to its new max (reclaim, preemption)
grep -A8 '"squeeze": {' "$s" | grep -q '"done": true' ||
	{ echo "FAIL: squeeze: tenant did not come down to its new max"; fail=1; }
[ "$(head -1 "$out/samples.csv" | cut -d, -f1-3)" = "time_s,backed_blocks,used_blocks" ] ||
	{ echo "FAIL: CSV header"; fail=1; }
[ "$(wc -l < "$out/samples.csv")" -gt 20 ] || { echo "FAIL: too few samples"; fail=1; }
grep -q '^<svg ' "$out/blocks.svg" && grep -q '</svg>' "$out/blocks.svg" ||
	{ echo "FAIL: SVG"; fail=1; }
grep -q 'kvpoold kill -9, restart' "$out/blocks.svg" ||
	{ echo "FAIL: the SVG does not mark the restart"; fail=1; }
[ $fail = 0 ] && echo "bench: invariants hold"
[ $fail = 0 ] || cat "$s"
exit $fail
