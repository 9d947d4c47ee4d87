#!/bin/sh
# SPDX-License-Identifier: MIT
# Lower tiers from kvpoold.conf (in-process ledger, CPU backend):
#  - tier = lines make the same pools as --tier flags; [tenant NAME] has its
#    limits in the top pool and no limit in the lower ones, [tenant
#    POOL/NAME] sets one lower pool's limits;
#  - --tier flags replace the file's tiers; an unknown pool in [tenant
#    POOL/NAME] and a bad tier line are refused with their line numbers;
#  - SIGHUP changes a lower pool's tenant limits, deletes an idle one the
#    file no longer names, and says that changed tiers wait for a restart;
#    a bad file changes nothing;
#  - after swaps, /metrics (metrics_scope = operator) carries the tier
#    series with the swap counts, promtool accepts it, it is the text of
#    `kvpoolctl metrics`, and it has every tier series the Grafana
#    dashboard queries.
. "$(dirname "$0")/lib.sh"

CTL=${KVPOOLCTL:-build/bin/kvpoolctl}
for p in curl promtool; do
	command -v $p >/dev/null 2>&1 || { echo "no $p (make deps)"; exit 1; }
done
[ -x "$CTL" ] || { echo "missing $CTL (run make)"; exit 1; }
[ -x "$TIERS" ] || { echo "missing $TIERS (run make)"; exit 1; }
[ -e "${KVPOOL_DEVICE:-/dev/kvpool}" ] &&
	{ echo "/dev/kvpool present: kvpoolctl would read the module"; exit 77; }

CONF=$TMP/kvpoold.conf
ctl() { KVPOOL_SOCKET=$SOCK "$CTL" "$@"; }
# limits POOL TENANT: "MAX MIN" from kvpoolctl tenant list
limits() {
	ctl --pool "$1" tenant list | awk -v t="$2" '$1 == t { print $2, $3 }'
}
want_limits() {
	got=$(limits "$1" "$2")
	[ "$got" = "$3" ] || fail "tenant $2 in $1: '$got', want '$3'"
}
wait_log() {
	i=0
	while [ "$(grep -c -e "$1" "$DLOG")" -lt "$2" ]; do
		[ $i -lt 100 ] || fail "log lacks $2 x '$1'"
		kill -0 "$DPID" 2>/dev/null || fail "kvpoold died"
		sleep 0.1
		i=$((i + 1))
	done
}
# refused FILE PATTERN: kvpoold with this file exits 1 at start, saying it
refused() {
	"$KVPOOLD" --foreground --config "$1" --socket "$TMP/r.sock" \
		--ledger inproc --backend cpu --block-bytes 65536 \
		--capacity 2048 --chunk-blocks 32 >"$TMP/r.log" 2>&1
	rc=$?
	[ $rc -ne 0 ] || fail "kvpoold started with $(cat "$1")"
	grep -q -e "$2" "$TMP/r.log" || { cat "$TMP/r.log"; fail "want '$2'"; }
	[ -e "$TMP/r.sock" ] && fail "the refused daemon left its socket"
	return 0
}

cat >"$CONF" <<END
[daemon]
metrics_scope = operator

[pool]
tier = dram:512
tier = nvme:$SWAPFILE:32M
nvme_io = pread

[tenant chat]
max = 100
min = 10
[tenant dram/chat]
max = 300
min = 5
[tenant nvme/old]
max = 7
END
start_daemon --config "$CONF" --metrics-listen 127.0.0.1:0
grep -q "tier 1: pool dram (dram), 512 blocks" "$DLOG" || fail "no dram tier"
grep -q "tier 2: pool nvme (nvme $SWAPFILE), 512 blocks" "$DLOG" ||
	fail "no nvme tier"
want_limits host chat "100 10"
want_limits dram chat "300 5"
want_limits nvme chat "max 0"		# implicit: no limit below the top
want_limits nvme old "7 0"
[ -z "$(limits host old)" ] || fail "nvme/old made a tenant in the top pool"

# Swaps, then the tier series.
"$TIERS" roundtrip "$SOCK" >"$TMP/t1.out" 2>&1 || { cat "$TMP/t1.out"; fail "roundtrip"; }
tiers_idle
ADDR=$(sed -n 's|.*metrics at http://\(.*\)/metrics$|\1|p' "$DLOG")
[ -n "$ADDR" ] || fail "no metrics address in the log"
URL=http://$ADDR/metrics
n=0
while :; do
	curl -sS -f -o "$TMP/a.prom" "$URL" || fail "GET $URL"
	ctl metrics >"$TMP/ctl.prom" || fail "kvpoolctl metrics"
	curl -sS -f -o "$TMP/b.prom" "$URL" || fail "GET $URL"
	if cmp -s "$TMP/a.prom" "$TMP/b.prom"; then
		diff -u "$TMP/ctl.prom" "$TMP/a.prom" && break
	fi
	n=$((n + 1))
	[ $n -lt 20 ] || fail "/metrics and kvpoolctl metrics differ"
	sleep 0.2
done
promtool check metrics <"$TMP/a.prom" >"$TMP/promtool.out" 2>&1 ||
	{ cat "$TMP/promtool.out"; fail "promtool check metrics"; }
[ -s "$TMP/promtool.out" ] && { cat "$TMP/promtool.out"; fail "promtool lint"; }
for want in \
	'kvpool_tier_info{pool="host",tier="0",kind="top"} 1' \
	'kvpool_tier_info{pool="dram",tier="1",kind="dram"} 1' \
	'kvpool_tier_info{pool="nvme",tier="2",kind="nvme"} 1' \
	'kvpool_tier_capacity_blocks{pool="dram",tier="1"} 512' \
	'kvpool_tier_used_blocks{pool="nvme",tier="2"} 0' \
	'kvpool_tier_tenant_current_blocks{pool="nvme",tenant="old"} 0' \
	'# TYPE kvpool_tier_swap_latency_seconds histogram'; do
	grep -qxF "$want" "$TMP/a.prom" || fail "/metrics lacks: $want"
done
# every tier series the Grafana dashboard queries exists
DASH=Documentation/grafana-kvpool.json
for m in $(grep -o 'kvpool_tier_[a-z_]*\|kvpool_client_sequences' "$DASH" |
	   sed 's/_bucket$//' | sort -u); do
	grep -q "^# TYPE $m " "$TMP/a.prom" || fail "$DASH queries $m: no such series"
done
# every lower tier saw blocks go in and come out; each histogram counts
# every job of its tier (le="+Inf" = _count > 0)
for p in dram nvme; do
	for s in swap_in_blocks_total swap_out_blocks_total; do
		v=$(sed -n "s/^kvpool_tier_$s{pool=\"$p\",tier=\"[0-9]\"} //p" "$TMP/a.prom")
		[ -n "$v" ] && [ "$v" -gt 0 ] || fail "kvpool_tier_$s of $p: '$v'"
	done
	inf=$(sed -n "s/^kvpool_tier_swap_latency_seconds_bucket{pool=\"$p\",tier=\"[0-9]\",le=\"+Inf\"} //p" "$TMP/a.prom")
	cnt=$(sed -n "s/^kvpool_tier_swap_latency_seconds_count{pool=\"$p\",tier=\"[0-9]\"} //p" "$TMP/a.prom")
	[ -n "$cnt" ] && [ "$cnt" -gt 0 ] && [ "$inf" = "$cnt" ] ||
		fail "latency histogram of $p: +Inf '$inf', count '$cnt'"
done

# Reload: dram/chat changes, nvme/old goes, a tier change waits.
cat >"$CONF" <<END
[pool]
tier = dram:256
tier = nvme:$SWAPFILE:32M
nvme_io = pread

[tenant chat]
max = 100
min = 10
[tenant dram/chat]
max = 200
END
kill -HUP "$DPID"
wait_log "configuration reloaded" 1
grep -q "reload: tiers changed: it takes effect when kvpoold restarts" "$DLOG" ||
	fail "no note that the tiers wait for a restart"
want_limits dram chat "200 0"
want_limits host chat "100 10"
[ -z "$(limits nvme old)" ] || fail "nvme/old not deleted on reload"
grep -q "tenant old in nvme deleted" "$DLOG" || fail "no log of the delete"
grep -q "tier 1: pool dram (dram), 512 blocks" "$DLOG" || fail "dram resized?"

# A bad file on reload: refused with its line, nothing changes.
cat >"$CONF" <<END
[pool]
tier = dram:512

[tenant dram/chat]
max = 1
tier = dram:1
END
kill -HUP "$DPID"
wait_log "reload: the running configuration stays in force" 1
grep -q "line 6: unknown key 'tier' in \[tenant dram/chat\]" "$DLOG" ||
	fail "the bad line was not named"
want_limits dram chat "200 0"
printf '[pool]\ntier = dram:512\n[tenant nosuch/chat]\nmax = 1\n' >"$CONF"
kill -HUP "$DPID"
wait_log "reload: the running configuration stays in force" 2
grep -q "line 3: tenant nosuch/chat: the daemon has no pool nosuch" "$DLOG" ||
	fail "unknown pool on reload not named with its line"
want_limits dram chat "200 0"
daemon_alive

# Refused at start, with the line.
printf '[pool]\ntier = dram:512\n\n[tenant nosuch/x]\n' >"$TMP/bad1.conf"
refused "$TMP/bad1.conf" "line 4: tenant nosuch/x: the daemon has no pool nosuch"
printf '[pool]\ncapacity = 64\ntier = nvme:rel.swap:1M\n' >"$TMP/bad2.conf"
refused "$TMP/bad2.conf" "line 3: tier = nvme:rel.swap:1M: the file needs an absolute path"
printf '[pool]\ntier = dram:64\n[tenant dram/x]\nmax = 65\n' >"$TMP/bad3.conf"
refused "$TMP/bad3.conf" "line 3: tenant x: max 65 is above pool dram's capacity 64"

# --tier flags replace the file's tiers.
printf '[pool]\ntier = dram:512\ntier = nvme:%s:32M\n' "$SWAPFILE" >"$TMP/t.conf"
"$KVPOOLD" --foreground --config "$TMP/t.conf" --socket "$TMP/f.sock" \
	--ledger inproc --backend cpu --block-bytes 65536 --capacity 2048 \
	--chunk-blocks 32 --tier dram:64:small >"$TMP/f.log" 2>&1 &
F=$!
PIDS="$PIDS $F"
i=0
until "$UTIL" status "$TMP/f.sock" >/dev/null 2>&1; do
	[ $i -lt 100 ] || { cat "$TMP/f.log"; fail "the --tier daemon did not start"; }
	sleep 0.1
	i=$((i + 1))
done
grep -q "tier 1: pool small (dram), 64 blocks" "$TMP/f.log" ||
	{ cat "$TMP/f.log"; fail "--tier did not make its pool"; }
grep -q "tier 2" "$TMP/f.log" && fail "the file's tiers were kept beside --tier"
kill "$F"
daemon_alive
echo "tiers from kvpoold.conf: ok"
