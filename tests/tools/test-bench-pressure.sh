#!/bin/sh
# SPDX-License-Identifier: MIT
# Every pressure policy (recompute, swap to dram, swap to nvme, stall,
# fail) on a small oversubscribed trace (kvpool-bench pressure --quick: a
# top pool of half the trace's peak demand): no request lost, every
# request's K/V and attention outputs equal to the unpressured run's (the
# bench exits 1 otherwise), the JSON last line names every policy, and
# the pressure happened, each policy answering it its own way
# (summary.json's counters, in every round's run):
#   unpressured  no drop, swap, stall, give-up or recomputed token;
#   recompute    sequences dropped and their tokens recomputed, no swap;
#   swap-*       blocks swapped out and every one back in; a sequence is
#                dropped (and recomputed) only where its swap found no
#                room in time, fewer than were swapped;
#   stall        waits for blocks, no drop or swap; each request the
#                engine gave up (a wait ran out) recomputed;
#   fail         requests given up by the engine and recomputed, no wait,
#                drop or swap.
BENCH=${KVPOOL_BENCH:-build/bin/kvpool-bench}
[ -x "$BENCH" ] || { echo "missing $BENCH (run make)"; exit 1; }
[ -x build/bin/kvpoold ] || { echo "missing build/bin/kvpoold (run make)"; exit 1; }
command -v python3 >/dev/null || { echo "no python3 (make deps)"; exit 1; }
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
python3 - "$TMP/summary.json" <<'PY' || exit 1
import json
import sys

s = json.load(open(sys.argv[1]))
# every run: the unpressured one, then each round's run of each policy
every = [s["runs"][0]] + s["round_runs"]
bad = []


def want(r, what, ok):
    got = {k: r[k] for k in ("drops", "recomputed_tokens", "blocks_out",
                             "blocks_in", "stalls", "no_room", "giveups")}
    print(f"{r['policy']:11s} round {r.get('round', '-')} {what:48s} "
          f"{'ok' if ok else 'FAIL'}  {got}")
    if not ok:
        bad.append(f"{r['policy']} round {r.get('round', '-')}: {what}")


if not 0 < s["pressured_blocks"] < s["peak_blocks"]:
    bad.append(f"top pool {s['pressured_blocks']} blocks is not below the "
               f"peak demand {s['peak_blocks']}")
seen = set()
for r in every:
    p = r["policy"]
    seen.add(p)
    if r["mismatches"] or r["completed"] != s["requests"]:
        bad.append(f"{p}: {r['completed']} completed, {r['mismatches']} "
                   "differ")
    if p == "unpressured":
        want(r, "no drop, swap, stall, give-up or recompute",
             not (r["drops"] or r["blocks_out"] or r["stalls"] or
                  r["giveups"] or r["recomputed_tokens"]))
    elif p == "recompute":
        want(r, "dropped and recomputed, no swap",
             r["drops"] > 0 and r["recomputed_tokens"] > 0 and
             r["blocks_out"] == 0 and r["giveups"] == 0)
    elif p in ("swap-dram", "swap-nvme"):
        # the tier is sized for the peak; a drop happens only where a
        # swap found no room in time (the file tier still growing on a
        # loaded machine), and then only its tokens are recomputed
        want(r, "swapped out, all back in, drops only without room",
             r["blocks_out"] > 0 and r["blocks_in"] == r["blocks_out"] and
             r["drops"] <= r["no_room"] and
             r["drops"] < r["swaps_out"] and
             r["recomputed_tokens"] == r["dropped_tokens"] and
             r["giveups"] == 0)
    elif p == "stall":
        want(r, "waited; each give-up after a wait, recomputed",
             r["stalls"] > 0 and r["giveups"] <= r["stalls"] and
             (r["giveups"] > 0) == (r["recomputed_tokens"] > 0) and
             r["drops"] == 0 and r["blocks_out"] == 0)
    elif p == "fail":
        want(r, "given up and recomputed, no wait, drop or swap",
             r["giveups"] > 0 and r["recomputed_tokens"] > 0 and
             r["stalls"] == 0 and r["drops"] == 0 and r["blocks_out"] == 0)
for p in ("unpressured", "recompute", "swap-dram", "swap-nvme", "stall",
          "fail"):
    if p not in seen:
        bad.append(f"{p}: no run in summary.json")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
echo "PASS: every policy completed the trace with equal outputs, under pressure, each by its own means"
