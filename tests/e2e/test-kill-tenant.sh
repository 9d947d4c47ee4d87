#!/bin/sh
# SPDX-License-Identifier: MIT
# kill -9 of a tenant mid-run (a working tenant of its own tenant group,
# "victim"): its blocks return to the pool at once and the other tenants
# finish with correct outputs; nothing stays leased.
. "$(dirname "$0")/lib.sh"

start_daemon --tenant victim
pids=
for n in 1 2 3; do
	tenant_run $n --delay-ms 150 &
	pids="$pids $!"
done
tenant_run 4 --tenant victim --delay-ms 1000 &
vpid=$!
PIDS="$pids $vpid"
i=0
until "$UTIL" tenant "$SOCK" victim | grep -q "current=[1-9]"; do
	[ $i -lt 100 ] || fail "victim did not lease"
	sleep 0.1
	i=$((i + 1))
done
"$UTIL" tenant "$SOCK" victim
kill -9 $vpid
wait $vpid 2>/dev/null
echo "killed tenant $vpid mid-run"
i=0
until "$UTIL" tenant "$SOCK" victim | grep -q "current=0 "; do
	[ $i -lt 50 ] || fail "victim's blocks did not return"
	sleep 0.1
	i=$((i + 1))
done
"$UTIL" tenant "$SOCK" victim
# shellcheck disable=SC2086
wait_pids_ok $pids || { cat "$TMP"/t*.out "$TMP"/t*.err; fail "a survivor failed"; }
cat "$TMP"/t[123].out
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
daemon_alive
echo "PASS: killed tenant's blocks returned, survivors correct"
