#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpoold's Prometheus endpoint (--metrics-listen, in-process ledger):
# with --metrics-scope operator, GET /metrics while tenants hold leases,
# and again with a prefix cache; promtool check metrics accepts the text
# (exposition format and naming conventions); it is the same text as
# `kvpoolctl metrics`; the figures are the ledger's and the prefix caches';
# HEAD, 404, 405; every series the Grafana dashboard queries exists.  In
# the default scope (public) a scrape by a user who is not an admin has
# no series of one client (no lease or pid label) and none of the prefix
# caches' activity, only the pools and the tenants' figures, and it is the
# text of `kvpoolctl metrics --scope public`.  The endpoint is off by
# default; a bad address, a bad scope and a port in use are refused at
# start.
. "$(dirname "$0")/lib.sh"

CTL=${KVPOOLCTL:-build/bin/kvpoolctl}
for p in curl promtool; do
	command -v $p >/dev/null 2>&1 || { echo "no $p (make deps)"; exit 1; }
done
[ -x "$CTL" ] || { echo "missing $CTL (run make)"; exit 1; }
[ -e "${KVPOOL_DEVICE:-/dev/kvpool}" ] &&
	{ echo "/dev/kvpool present: kvpoolctl would read the module"; exit 77; }

start_daemon --metrics-listen 127.0.0.1:0 --metrics-scope operator \
	--tenant chat:100:10 --tenant batch
ADDR=$(sed -n 's|.*metrics at http://\(.*\)/metrics$|\1|p' "$DLOG")
[ -n "$ADDR" ] || fail "no metrics address in the log"
URL=http://$ADDR/metrics

"$UTIL" hold "$SOCK" chat 20 "$TMP/h1" &
PIDS="$PIDS $!"
"$UTIL" hold "$SOCK" batch 7 "$TMP/h2" &
PIDS="$PIDS $!"
"$UTIL" wait-used "$SOCK" 27 5000 || fail "leases not granted"

curl -sS -f -D "$TMP/headers" -o "$TMP/http.prom" "$URL" || fail "GET $URL"
grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/headers" ||
	fail "Content-Type: $(grep -i content-type "$TMP/headers")"
promtool check metrics <"$TMP/http.prom" >"$TMP/promtool.out" 2>&1 ||
	{ cat "$TMP/promtool.out"; fail "promtool check metrics"; }
[ -s "$TMP/promtool.out" ] && { cat "$TMP/promtool.out"; fail "promtool lint"; }
# same_text NAME [OPTION...]: a scrape, kvpoolctl metrics [OPTION...], a
# scrape; the two scrapes equal (nothing moved meanwhile: the backing
# shrinks after a delay) and kvpoolctl's text equal to them; tried up to
# 20 times.
same_text() {
	name=$1
	shift
	n=0
	while :; do
		curl -sS -f -o "$TMP/$name.a" "$URL" || fail "GET $URL"
		KVPOOL_SOCKET=$SOCK "$CTL" metrics "$@" >"$TMP/$name.ctl" ||
			fail "kvpoolctl metrics $*"
		curl -sS -f -o "$TMP/$name.b" "$URL" || fail "GET $URL"
		if cmp -s "$TMP/$name.a" "$TMP/$name.b"; then
			diff -u "$TMP/$name.ctl" "$TMP/$name.a" && return 0
		fi
		n=$((n + 1))
		[ $n -lt 20 ] || fail "/metrics and kvpoolctl metrics differ ($name)"
		sleep 0.2
	done
}
same_text leases
for want in \
	'kvpool_pool_used_blocks{pool="host"} 27' \
	'kvpool_pool_capacity_blocks{pool="host"} 2048' \
	'kvpool_pool_leases{pool="host"} 2' \
	'kvpool_tenant_current_blocks{pool="host",tenant="chat"} 20' \
	'kvpool_tenant_current_blocks{pool="host",tenant="batch"} 7' \
	'kvpool_tenant_max_blocks{pool="host",tenant="chat"} 100' \
	'kvpool_tenant_max_blocks{pool="host",tenant="batch"} +Inf' \
	'kvpool_tenant_min_blocks{pool="host",tenant="chat"} 10' \
	'# TYPE kvpool_tenant_stall_events_total counter'; do
	grep -qxF "$want" "$TMP/http.prom" || fail "/metrics lacks: $want"
done
[ "$(grep -c '^kvpool_client_blocks{.*,pid="[0-9]*"} ' "$TMP/http.prom")" = 2 ] ||
	fail "want 2 kvpool_client_blocks samples with their pids"
# Every series the Grafana dashboard queries exists (those of lower tiers:
# test-tiers-config.sh).
DASH=Documentation/grafana-kvpool.json
for m in $(grep -o 'kvpool_[a-z_]*' "$DASH" | sort -u |
	   grep -v '^kvpool_tier_\|^kvpool_client_sequences'); do
	grep -q "^# TYPE $m " "$TMP/http.prom" || fail "$DASH queries $m: no such series"
done

# The prefix caches' series (e2e-prefix cow leaves 3 cached blocks).
PFX=$E2E_BIN/e2e-prefix
[ -x "$PFX" ] || fail "missing $PFX (run make)"
"$PFX" cow "$SOCK" batch >"$TMP/cow.out" 2>&1 || { cat "$TMP/cow.out"; fail "e2e-prefix cow"; }
curl -sS -f -o "$TMP/http2.prom" "$URL" || fail "GET $URL"
promtool check metrics <"$TMP/http2.prom" >"$TMP/promtool2.out" 2>&1 ||
	{ cat "$TMP/promtool2.out"; fail "promtool check metrics (prefix)"; }
[ -s "$TMP/promtool2.out" ] && { cat "$TMP/promtool2.out"; fail "promtool lint (prefix)"; }
same_text prefix
for want in \
	'kvpool_prefix_cached_blocks{pool="host",tenant="batch"} 3' \
	'kvpool_prefix_published_total{pool="host",tenant="batch"} 3' \
	'# TYPE kvpool_prefix_hits_total counter'; do
	grep -qxF "$want" "$TMP/http2.prom" || fail "/metrics lacks: $want"
done

code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code -I "$URL")" = 200 ] || fail "HEAD /metrics"
[ "$(code "http://$ADDR/nope")" = 404 ] || fail "GET /nope is not 404"
[ "$(code -X POST -d x "$URL")" = 405 ] || fail "POST is not 405"
daemon_alive

# The default scope: what any local user may see.  Scraped by nobody.
kill "$DPID"
wait "$DPID" 2>/dev/null
for p in $PIDS; do kill "$p" 2>/dev/null; done
start_daemon --metrics-listen 127.0.0.1:0 --tenant chat:100:10 --tenant batch
ADDR=$(sed -n 's|.*metrics at http://\(.*\)/metrics$|\1|p' "$DLOG" | tail -n 1)
URL=http://$ADDR/metrics
[ "$(grep -c "metrics: operator scope" "$DLOG")" = 1 ] ||
	fail "the default scope is the operator's"
"$UTIL" hold "$SOCK" chat 20 "$TMP/h3" &
PIDS="$PIDS $!"
"$UTIL" wait-used "$SOCK" 20 5000 || fail "lease not granted"
"$PFX" cow "$SOCK" batch >"$TMP/cow2.out" 2>&1 || { cat "$TMP/cow2.out"; fail "e2e-prefix cow"; }
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null &&
   [ "$(id -u)" = 0 ]; then
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
		curl -sS -f "$URL" >"$TMP/pub.prom" || fail "GET $URL as nobody"
else
	curl -sS -f -o "$TMP/pub.prom" "$URL" || fail "GET $URL"
fi
promtool check metrics <"$TMP/pub.prom" >"$TMP/promtool3.out" 2>&1 ||
	{ cat "$TMP/promtool3.out"; fail "promtool check metrics (public)"; }
[ -s "$TMP/promtool3.out" ] && { cat "$TMP/promtool3.out"; fail "promtool lint (public)"; }
for bad in 'pid="' 'lease="' '^kvpool_client_' '^# TYPE kvpool_client_' \
	   '^kvpool_prefix_' '^# TYPE kvpool_prefix_'; do
	grep -q "$bad" "$TMP/pub.prom" && fail "the public scrape has $bad: $(grep "$bad" "$TMP/pub.prom" | head -n 1)"
done
for want in \
	'kvpool_pool_used_blocks{pool="host"} 23' \
	'kvpool_tenant_current_blocks{pool="host",tenant="chat"} 20' \
	'kvpool_tenant_current_blocks{pool="host",tenant="batch"} 3' \
	'kvpool_tenant_max_blocks{pool="host",tenant="chat"} 100'; do
	grep -qxF "$want" "$TMP/pub.prom" || fail "the public scrape lacks: $want"
done
same_text public --scope public
KVPOOL_SOCKET=$SOCK "$CTL" metrics --scope nosuch >/dev/null 2>&1 &&
	fail "kvpoolctl metrics --scope nosuch accepted"
daemon_alive

# Refused at start: a malformed address, a bad scope, a port in use.
"$KVPOOLD" --foreground --socket "$TMP/b.sock" --ledger inproc --backend cpu \
	--metrics-listen 9477 >"$TMP/bad1.log" 2>&1
[ $? = 2 ] || fail "--metrics-listen 9477 accepted"
"$KVPOOLD" --foreground --socket "$TMP/b.sock" --ledger inproc --backend cpu \
	--metrics-listen 127.0.0.1:0 --metrics-scope all >"$TMP/bad3.log" 2>&1
[ $? = 2 ] || fail "--metrics-scope all accepted"
"$KVPOOLD" --foreground --socket "$TMP/b.sock" --ledger inproc --backend cpu \
	--metrics-listen "$ADDR" >"$TMP/bad2.log" 2>&1
[ $? = 1 ] || fail "a second daemon on $ADDR started"
grep -q "metrics_listen $ADDR: Address already in use" "$TMP/bad2.log" ||
	fail "port in use: $(cat "$TMP/bad2.log")"
[ -e "$TMP/b.sock" ] && fail "the refused daemon left its socket"

# Off by default: a daemon without the option listens on no TCP socket.
"$KVPOOLD" --foreground --socket "$TMP/c.sock" --ledger inproc --backend cpu \
	--config "" >"$TMP/off.log" 2>&1 &
OFF=$!
PIDS="$PIDS $OFF"
i=0
until "$UTIL" status "$TMP/c.sock" >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "the second daemon did not start"
	sleep 0.1
	i=$((i + 1))
done
inodes=$(ls -l /proc/$OFF/fd | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p')
[ -n "$inodes" ] || fail "no socket of the second daemon seen"
for ino in $inodes; do
	awk -v i="$ino" '$4 == "0A" && $10 == i { f = 1 } END { exit !f }' \
		/proc/net/tcp /proc/net/tcp6 &&
		fail "kvpoold listens on TCP without --metrics-listen"
done
grep -q "metrics at" "$TMP/off.log" && fail "metrics on by default"
daemon_alive
echo "metrics endpoint: ok"
