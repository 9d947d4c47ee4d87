#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench-cluster: prefix blocks shared between two kvpoold nodes
# through a Redis Cluster (3 masters, 3 replicas, on loopback ports).
# Node A's tenant prefills NPREFIX shared prefixes and publishes them
# (write-through); then, interleaved for ROUNDS rounds, NPROC replicas of
# the tenant on node B ask for them (every request the node's first for
# its prefix: see kvpool-bench-cluster run), once on a node without the
# cluster tier (B0: it recomputes) and once on a node with it (B: it
# fetches), and the cluster's own pipelined GET rate for values of the
# same size is measured in the same round.  Last, the same requests on B
# with one master killed (kill -9) halfway.  Prints a table and, last, one
# JSON line.  Environment: ROUNDS (3), NPREFIX (8), NPROC (4), NREQ (2),
# DEADLINE (the nodes' fetch deadline, 250 ms), OUT (build/bench-cluster).
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../e2e/cluster-lib.sh"
BENCH=${BENCH:-build/bin/kvpool-bench-cluster}
[ -x "$BENCH" ] || fail "missing $BENCH (run make)"
ROUNDS=${ROUNDS:-3}
NPREFIX=${NPREFIX:-8}
NPROC=${NPROC:-4}
NREQ=${NREQ:-2}
OUT=${OUT:-build/bench-cluster}
mkdir -p "$OUT"
rm -f "$OUT"/*.txt
GEOM="--block-bytes 262144 --capacity 1024 --chunk-blocks 64"
DEADLINE=${DEADLINE:-250}	# ms; the daemon's default is 50

mkdir -p "$TMP/keys"
umask 077
head -c 32 /dev/urandom >"$TMP/keys/app"
umask 022
redis_ports
redis_start
redis_create
# shellcheck disable=SC2086
node_start A --tenant app --cluster-keys "$TMP/keys" $GEOM \
	--cluster-deadline-ms "$DEADLINE"
# shellcheck disable=SC2086
node_start B --tenant app --cluster-keys "$TMP/keys" $GEOM \
	--cluster-deadline-ms "$DEADLINE"
"$KVPOOLD" --foreground --config "" --socket "$TMP/B0.sock" --ledger inproc \
	--backend cpu $GEOM --tenant app >>"$TMP/B0.log" 2>&1 &
PIDS="$PIDS $!"
i=0
until "$UTIL" status "$TMP/B0.sock" >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "B0 did not start"
	sleep 0.1
	i=$((i + 1))
done
"$CL" wait "$TMP/A.sock" state 3 20000 || fail "A did not join"
"$CL" wait "$TMP/B.sock" state 3 20000 || fail "B did not join"

echo "prefilling $NPREFIX shared prefixes on node A"
"$BENCH" prefill "$TMP/A.sock" app "$NPREFIX" || fail "prefill on A"
"$CL" wait "$TMP/A.sock" put_blocks $((NPREFIX * 8)) 60000 ||
	fail "A did not store its prefixes"
VBYTES=$("$BENCH" value-bytes)

for r in $(seq 1 "$ROUNDS"); do
	echo "round $r of $ROUNDS"
	b0=$(stat "$TMP/B.sock" fetch_bytes)
	n0=$(stat "$TMP/B.sock" fetch_ns)
	if [ $((r % 2)) = 1 ]; then
		"$BENCH" run "$TMP/B0.sock" app "$NPREFIX" "$NPROC" "$NREQ" \
			"$OUT/local.$r.txt" || fail "local round $r"
		"$BENCH" run "$TMP/B.sock" app "$NPREFIX" "$NPROC" "$NREQ" \
			"$OUT/cluster.$r.txt" || fail "cluster round $r"
	else
		"$BENCH" run "$TMP/B.sock" app "$NPREFIX" "$NPROC" "$NREQ" \
			"$OUT/cluster.$r.txt" || fail "cluster round $r"
		"$BENCH" run "$TMP/B0.sock" app "$NPREFIX" "$NPROC" "$NREQ" \
			"$OUT/local.$r.txt" || fail "local round $r"
	fi
	b1=$(stat "$TMP/B.sock" fetch_bytes)
	n1=$(stat "$TMP/B.sock" fetch_ns)
	awk -v b=$((b1 - b0)) -v n=$((n1 - n0)) \
		'BEGIN { printf "%.3f\n", n ? b / n : 0 }' >"$OUT/loaded.$r.txt"
	# the fetch path alone, then the cluster alone, back to back
	"$BENCH" fetch "$TMP/B.sock" app "$NPREFIX" 2 | awk '{ print $2 }' \
		>"$OUT/match.$r.txt" || fail "fetch round $r"
	b2=$(stat "$TMP/B.sock" fetch_bytes)
	n2=$(stat "$TMP/B.sock" fetch_ns)
	awk -v b=$((b2 - b1)) -v n=$((n2 - n1)) \
		'BEGIN { printf "%.3f\n", n ? b / n : 0 }' >"$OUT/fetch.$r.txt"
	"$BENCH" rawget "$RSEEDS" "$VBYTES" 8 5 |
		awk '{ print $2 }' | sort -n | sed -n 3p >"$OUT/raw.$r.txt" ||
		fail "rawget round $r"
done

VICTIM=$(redis_masters | tail -n 1)
eval "vpid=\$RPID_$VICTIM"
echo "failover: kill -9 of the master on port $VICTIM halfway"
"$BENCH" run "$TMP/B.sock" app "$NPREFIX" "$NPROC" $((NREQ * 2)) \
	"$OUT/failover.txt" "$vpid" || fail "failover run"

# ---- figures -----------------------------------------------------------------
# pct FILE... P: the P-th percentile (nearest rank) of the first column
pct() {
	p=$1
	shift
	cat "$@" | awk '{ print $1 }' | sort -n |
		awk -v p="$p" '{ v[NR] = $1 } END {
			if (!NR) { print 0; exit }
			k = int(NR * p / 100 + 0.999999); if (k < 1) k = 1
			printf "%.1f\n", v[k] }'
}
hits() {
	cat "$@" | awk '{ m += $2; b += $3 } END { printf "%.3f\n", b ? m / b : 0 }'
}
wrong() {
	cat "$@" | awk '{ w += $4 } END { print w + 0 }'
}
spread() {	# min-max of per-round values of a command
	what=$1
	shift
	for r in $(seq 1 "$ROUNDS"); do
		$what "$@" "$r"
	done | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END {
		printf "%s-%s", lo, hi }'
}
p50_of() { pct 50 "$OUT/$1.$2.txt"; }
rate_of() { cat "$OUT/$1.$2.txt"; }
med() {
	cat "$@" | sort -n | awk '{ v[NR] = $1 } END {
		printf "%.3f\n", NR ? v[int((NR + 1) / 2)] : 0 }'
}

L50=$(pct 50 "$OUT"/local.*.txt)
L99=$(pct 99 "$OUT"/local.*.txt)
C50=$(pct 50 "$OUT"/cluster.*.txt)
C99=$(pct 99 "$OUT"/cluster.*.txt)
F50=$(pct 50 "$OUT/failover.txt")
F99=$(pct 99 "$OUT/failover.txt")
HIT=$(hits "$OUT"/cluster.*.txt)
FHIT=$(hits "$OUT/failover.txt")
WRONG=$(wrong "$OUT"/cluster.*.txt "$OUT"/local.*.txt)
FWRONG=$(wrong "$OUT/failover.txt")
FETCH=$(med "$OUT"/fetch.*.txt)
MATCH=$(med "$OUT"/match.*.txt)
LOADED=$(med "$OUT"/loaded.*.txt)
RAW=$(med "$OUT"/raw.*.txt)
N=$(cat "$OUT"/cluster.*.txt | wc -l)

printf '\n%-26s %12s %12s %12s\n' "node B, $N requests" "no cluster" "cluster" "failover"
printf '%-26s %12s %12s %12s\n' "TTFT p50 (ms)" "$L50" "$C50" "$F50"
printf '%-26s %12s %12s %12s\n' "TTFT p99 (ms)" "$L99" "$C99" "$F99"
printf '%-26s %12s %12s %12s\n' "TTFT p50 per round (ms)" \
	"$(spread p50_of local)" "$(spread p50_of cluster)" "-"
printf '%-26s %12s %12s %12s\n' "hit rate (blocks)" "0" "$HIT" "$FHIT"
printf '%-26s %12s %12s %12s\n' "wrong blocks" \
	"$(wrong "$OUT"/local.*.txt)" "$(wrong "$OUT"/cluster.*.txt)" "$FWRONG"
printf '\nGB/s, median of rounds (spread)   %s-byte values, chains of 8\n' "$VBYTES"
printf '  raw pipelined GET (this client)  %s (%s)\n' "$RAW" "$(spread rate_of raw)"
printf '  kvpoold fetch rounds, alone      %s (%s): %s of raw\n' "$FETCH" \
	"$(spread rate_of fetch)" \
	"$(awk -v a="$FETCH" -v b="$RAW" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
printf '  MATCH calls, alone (end to end)  %s (%s): %s of raw\n' "$MATCH" \
	"$(spread rate_of match)" \
	"$(awk -v a="$MATCH" -v b="$RAW" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
printf '  kvpoold fetch rounds, under load %s (%s)\n' "$LOADED" \
	"$(spread rate_of loaded)"
echo "B's counters: $("$CL" stats "$TMP/B.sock" | cut -d' ' -f7-24)"
printf '{"ttft_p50_ms_cluster": %s, "ttft_p99_ms_cluster": %s, "ttft_p50_ms_local": %s, "ttft_p99_ms_local": %s, "fetch_gbps": %s, "match_gbps": %s, "loaded_fetch_gbps": %s, "raw_get_gbps": %s, "hit_rate": %s, "wrong_blocks": %s, "failover_ttft_p50_ms": %s, "failover_ttft_p99_ms": %s, "failover_hit_rate": %s, "failover_wrong_blocks": %s, "requests": %s, "rounds": %s, "value_bytes": %s}\n' \
	"$C50" "$C99" "$L50" "$L99" "$FETCH" "$MATCH" "$LOADED" "$RAW" "$HIT" "$WRONG" "$F50" \
	"$F99" "$FHIT" "$FWRONG" "$N" "$ROUNDS" "$VBYTES" |
	tee "$OUT/summary.json"
[ "$WRONG" = 0 ] && [ "$FWRONG" = 0 ] || exit 1
