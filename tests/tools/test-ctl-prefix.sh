#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoolctl and the prefix cache, against a running kvpoold (in-process
# ledger, CPU backend): the cache counters in status, status --json,
# metrics and top; prefix list/flush/share/unshare; their usage errors and
# exit codes; permission denied for an unprivileged user; no daemon.
K=${KVPOOLCTL:-build/bin/kvpoolctl}
D=${KVPOOLD:-build/bin/kvpoold}
P=${E2E_PREFIX:-build/tests/e2e/e2e-prefix}
for x in "$K" "$D" "$P"; do
	[ -x "$x" ] || { echo "missing $x (run make)"; exit 1; }
done
. tests/tools/ctl-lib.sh
start_daemon --tenant app

run 0 status
has "no tenant has used the prefix cache"
# 3 blocks published, 9 hits (the copy-on-write test leaves them cached)
"$P" cow "$KVPOOL_SOCKET" app >/dev/null || { echo "FAIL: e2e-prefix cow"; fail=1; }
run 0 status
has "^PREFIX CACHE +NAMESPACE +CACHED +REFD +HITS +MISSES +HIT_TOKENS +EVICTED +PUBLISHED +HIT%"
has "^app +- +3 +0 +9 +0 +576 +0 +3 +100.0%"
has " cache$"
run 0 --json status
has '"prefix": \['
has '"cached": 3'
has '"hit_tokens": 576'
has '"prefix_cache": true'
run 0 metrics
has '^kvpool_prefix_cached_blocks\{pool="host",tenant="app"\} 3$'
has '^kvpool_prefix_hits_total\{pool="host",tenant="app"\} 9$'
has '^# TYPE kvpool_prefix_evictions_total counter$'
run 0 top --once
has "^PREFIX CACHE"
run 0 prefix list
has "^app +- +3 "
run 0 prefix list --json
has '"tenant": "app"'
run 0 prefix share app common
run 0 prefix list
has "^app +common +0 "
run 0 prefix unshare app
run 0 prefix list --json
has '"namespace": null'
run 0 prefix flush app
has "0 blocks given back"
run 5 prefix flush nosuch
run 5 prefix share nosuch common
# usage errors
run 2 prefix
run 2 prefix bogus
run 2 prefix flush
run 2 prefix share app
run 2 prefix flush app extra
run 2 prefix flush "bad/name"
run 2 prefix share app "-dash"
run 2 prefix list --bogus
run 0 help prefix
has "named namespace"

if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
	$nobody "$K" prefix list >"$tmp/out" 2>"$tmp/err" ||
		{ echo "FAIL: prefix list as nobody: $(cat "$tmp/err")"; fail=1; }
	$nobody "$K" prefix flush app >"$tmp/out" 2>"$tmp/err"
	[ $? = 4 ] || { echo "FAIL: prefix flush as nobody not refused"; fail=1; }
	$nobody "$K" prefix share app x >"$tmp/out" 2>"$tmp/err"
	[ $? = 4 ] || { echo "FAIL: prefix share as nobody not refused"; fail=1; }
else
	echo "note: not root (or no setpriv): permission checks skipped"
fi

kill $dpid
wait $dpid 2>/dev/null
run 3 prefix list
grep -q "kvpoold" "$tmp/err" || { echo "FAIL: no hint at kvpoold: $(cat "$tmp/err")"; fail=1; }
[ $fail = 0 ] && echo "kvpoolctl and the prefix cache: all as expected"
exit $fail
