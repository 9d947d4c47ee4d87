#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoolctl against a running kvpoold (in-process ledger, CPU backend):
# status, tenant add/set/list/del, metrics, top --once, exit codes for
# duplicates and unknown tenants, and permission denied for an
# unprivileged user (admin writes need root, the daemon's uid or its admin
# group).
K=${KVPOOLCTL:-build/bin/kvpoolctl}
D=${KVPOOLD:-build/bin/kvpoold}
[ -x "$K" ] || { echo "missing $K (run make)"; exit 1; }
[ -x "$D" ] || { echo "missing $D (run make)"; exit 1; }
. tests/tools/ctl-lib.sh
start_daemon

run 0 status
has "^pool host: daemon ledger, cpu backend, live"
has "capacity 256 blocks"
run 5 --pool nosuch status
run 0 --pool host status
run 0 --json status
has '"capacity": 256'
has '"backed": 0'
run 0 tenant add web --max 100 --min 10 --uid 1000
run 0 tenant add batch --max max
run 1 tenant add web --max 5
grep -q "already exists" "$tmp/err" || { echo "FAIL: duplicate add message"; fail=1; }
run 0 tenant set web --max 50
run 2 tenant set web --max 5 --min 8
run 5 tenant set nosuch --max 5
run 0 tenant list --json
has '"name": "web"'
has '"max": 50'
has '"min": 10'
has '"uid": 1000'
has '"max": "max"'
run 0 tenant list
has "^web +50 +10 +0 +0"
run 0 metrics
has '^kvpool_pool_capacity_blocks\{pool="host"\} 256$'
has '^kvpool_tenant_max_blocks\{pool="host",tenant="web"\} 50$'
has '^kvpool_tenant_max_blocks\{pool="host",tenant="batch"\} \+Inf$'
has '^# TYPE kvpool_tenant_max_events_total counter$'
run 0 metrics --output "$tmp/kvpool.prom"
grep -q 'kvpool_pool_used_blocks{pool="host"} 0' "$tmp/kvpool.prom" ||
	{ echo "FAIL: metrics --output file"; fail=1; }
run 0 top --once
has "TENANT"
run 0 top --json --count 2 --interval 0.1
[ "$(grep -c '"capacity": 256' "$tmp/out")" = 2 ] || { echo "FAIL: top --json frames"; fail=1; }
run 0 metrics --json
has '"name": "web"'
run 3 monitor
run 0 tenant del batch
run 5 tenant del batch

# An unprivileged user may read but not change tenants.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
	$nobody "$K" status >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 0 ] || { echo "FAIL: status as nobody: exit $rc: $(cat "$tmp/err")"; fail=1; }
	$nobody "$K" tenant add evil --max 1 >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 4 ] || { echo "FAIL: tenant add as nobody: exit $rc, want 4: $(cat "$tmp/err")"; fail=1; }
	grep -q "permission denied" "$tmp/err" ||
		{ echo "FAIL: no 'permission denied' message: $(cat "$tmp/err")"; fail=1; }
	$nobody "$K" tenant set web --max 1 >"$tmp/out" 2>"$tmp/err"
	[ $? = 4 ] || { echo "FAIL: tenant set as nobody not refused"; fail=1; }
	run 0 tenant list --json
	grep -q '"name": "evil"' "$tmp/out" && { echo "FAIL: nobody created a tenant"; fail=1; }
	has '"max": 50'
else
	echo "note: not root (or no setpriv): permission checks skipped"
fi

run 0 tenant del web
[ $fail = 0 ] && echo "kvpoolctl against kvpoold: all as expected"
exit $fail
