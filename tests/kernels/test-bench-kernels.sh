#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A short kvpool-bench-kernels run (contexts 1K and 8K, batches 1 and 16,
# every dtype, 2 threads, a 64 MiB pool, 0.02 s per shape; a bad -b is
# refused, and so is a -g outside 1..16) and the invariants of its
# JSON line: every path the CPU offers (best first; amx and avx512bf16
# together), every dtype and shape present; positive, finite figures;
# 3 rounds by default, in the JSON and every result; the read bandwidth
# is the highest of its measurements (one per round and one at the end);
# ratio = gbps / read_gbps, ratio_min/_max = gbps_min/_max / read_gbps,
# gbps_min <= gbps <= gbps_max; a positive cpu_ratio; tokens_per_s x ctx
# x bytes per token = gbps, with 4096 bytes per token for BF16 (2 planes x
# 8 kv heads x 128 x 2 bytes) and one bytes-per-token figure per dtype,
# fewer for each smaller precision; vs_bf16 (the median of the per-round
# ratios of tokens_per_s to BF16's on the same path and shape) within its
# [vs_bf16_min, vs_bf16_max], and so is the ratio of the medians.  Then
# -g 16 (128 query heads): the JSON says so, and BF16 still reads 4096
# bytes per token (the query heads share the kv heads' bytes).
# It checks the benchmark's arithmetic and coverage, not a speed.
BENCH=${KVPOOL_BENCH_KERNELS:-build/bin/kvpool-bench-kernels}
[ -x "$BENCH" ] || { echo "missing $BENCH (run make)"; exit 1; }
command -v python3 >/dev/null || { echo "no python3 (make deps)"; exit 1; }
"$BENCH" -b 0 -q 2>/dev/null && { echo "FAIL: -b 0 accepted"; exit 1; }
for g in 0 17; do
	"$BENCH" -g $g -q 2>/dev/null && { echo "FAIL: -g $g accepted"; exit 1; }
done
out=$("$BENCH" -q -b 16 -t 2 -m 64 -s 0.02) || { echo "FAIL: $BENCH exit $?"; exit 1; }
printf '%s\n' "$out" | sed '$d'
printf '%s\n' "$out" | tail -n 1 | python3 -c '
import json, math, sys

j = json.loads(sys.stdin.read())
fail = []
def check(cond, what):
    if not cond:
        fail.append(what)

paths = j["paths"]
check(len(paths) >= 1, "no path")
if paths and paths[0] == "amx":
    check(paths == ["amx", "avx512bf16"], "paths %s" % paths)
check(j["threads"] == 2, "threads %s" % j["threads"])
check(j["rounds"] == 3, "rounds %s" % j.get("rounds"))
allr = j["read_gbps_all"]
check(len(allr) == j["rounds"] + 1 and min(allr) > 0 and
      j["read_gbps_first"] == allr[0] and j["read_gbps_last"] == allr[-1] and
      j["read_cpu_gbps"] > 0, "read bandwidth %s" % allr)
check(abs(j["read_gbps"] - max(allr)) <= 0.011,
      "read_gbps is not the highest measurement")
dtypes = ["bf16", "fp8", "int8", "int4"]
res = {(r["path"], r["dtype"], r["ctx"], r["batch"]): r for r in j["results"]}
check(len(res) == len(j["results"]), "duplicate results")
bpt = {}
for p in paths:
    for d in dtypes:
        for c in (1024, 8192):
            for b in (1, 16):
                r = res.get((p, d, c, b))
                if r is None:
                    fail.append("missing %s %s %d x %d" % (p, d, c, b))
                    continue
                g, t = r["gbps"], r["tokens_per_s"]
                check(math.isfinite(g) and g > 0 and t > 0,
                      "%s %s %d x %d: gbps %s tok/s %s" % (p, d, c, b, g, t))
                check(r["rounds"] == j["rounds"] and
                      0 < r["gbps_min"] <= g <= r["gbps_max"],
                      "%s %s %d x %d: gbps %s not in [%s, %s]" %
                      (p, d, c, b, g, r["gbps_min"], r["gbps_max"]))
                for m in ("min", "max"):
                    R = j["read_gbps"]
                    gm = r["gbps_" + m]
                    check(abs(r["ratio_" + m] - gm / R) <= 0.0006 +
                          (0.0051 / gm + 0.0051 / R) * r["ratio_" + m],
                          "%s %s %d x %d: ratio_%s" % (p, d, c, b, m))
                if not (g > 0 and t > 0):
                    continue
                # the JSON rounds gbps to 2 decimals, tokens_per_s to 1
                R = j["read_gbps"]
                check(abs(r["ratio"] - g / R) <= 0.0006 +
                      (0.0051 / g + 0.0051 / R) * r["ratio"],
                      "%s %s %d x %d: ratio %s, gbps say %.4f" %
                      (p, d, c, b, r["ratio"], g / R))
                cr = r["cpu_ratio"]
                check(math.isfinite(cr) and cr > 0,
                      "%s %s %d x %d: cpu_ratio %s" % (p, d, c, b, cr))
                bpt.setdefault(d, []).append((g * 1e9 / (t * c), g, t, c))
                base = res.get((p, "bf16", c, b))
                if d == "bf16":
                    check(r["vs_bf16"] is None, "bf16 vs_bf16 not null")
                elif base and base["tokens_per_s"] > 0:
                    tb = base["tokens_per_s"]
                    v = t / tb
                    lo, hi = r["vs_bf16_min"], r["vs_bf16_max"]
                    eps = 0.0006 + (0.051 / t + 0.051 / tb) * v
                    check(r["vs_bf16"] is not None and
                          lo - 0.0006 <= r["vs_bf16"] <= hi + 0.0006 and
                          lo - eps <= v <= hi + eps,
                          "%s %s %d x %d: vs_bf16 %s [%s, %s], medians "
                          "say %.3f" % (p, d, c, b, r["vs_bf16"], lo, hi, v))
# one bytes-per-token figure per dtype (within the JSON rounding: gbps
# has 2 decimals, tokens_per_s 1)
per = {}
for d, xs in bpt.items():
    e0, g0, t0, c0 = max(xs, key=lambda x: x[1])
    for e, g, t, c in xs:
        tol = (0.0051 / g + 0.051 / t + 0.0051 / g0 + 0.051 / t0) * max(e, e0)
        check(abs(e - e0) <= tol + 1,
              "%s: %.1f and %.1f bytes per token" % (d, e, e0))
    per[d] = e0
if "bf16" in per:
    check(abs(per["bf16"] - 4096) <= 4096 * 0.01,
          "bf16: %.1f bytes per token, not 4096" % per["bf16"])
for a, b in (("bf16", "fp8"), ("bf16", "int8"), ("fp8", "int4"),
             ("int8", "int4")):
    if a in per and b in per:
        check(per[b] < per[a], "%s reads no fewer bytes than %s" % (b, a))
for f in fail:
    print("FAIL: " + f)
print("bytes per token: " + ", ".join("%s %.0f" % (d, per[d]) for d in per))
sys.exit(1 if fail else 0)
' || exit 1
out=$("$BENCH" -q -b 1 -t 2 -m 64 -s 0.02 -R 1 -k bf16 -g 16) ||
	{ echo "FAIL: $BENCH -g 16 exit $?"; exit 1; }
printf '%s\n' "$out" | tail -n 1 | python3 -c '
import json, sys

j = json.loads(sys.stdin.read())
fail = []
if (j["q_heads"], j["kv_heads"], j["head_dim"]) != (128, 8, 128):
    fail.append("-g 16: heads %s/%s, head_dim %s" %
                (j["q_heads"], j["kv_heads"], j["head_dim"]))
rs = [r for r in j["results"] if r["dtype"] == "bf16"]
if len(rs) != 2 * len(j["paths"]):
    fail.append("-g 16: %d results" % len(rs))
for r in rs:
    e = r["gbps"] * 1e9 / (r["tokens_per_s"] * r["ctx"])
    if abs(e - 4096) > 4096 * 0.01 + 1:
        fail.append("-g 16 %s %d: %.1f bytes per token" %
                    (r["path"], r["ctx"], e))
for f in fail:
    print("FAIL: " + f)
print("-g 16: %d query heads, %d results" % (j["q_heads"], len(rs)))
sys.exit(1 if fail else 0)
'
