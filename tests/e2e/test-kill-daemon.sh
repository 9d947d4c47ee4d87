#!/bin/sh
# SPDX-License-Identifier: MIT
# kill -9 of kvpoold mid-run, then a restart on the same socket: every
# tenant sees the new epoch (-ESTALE from libkvlease), re-leases and
# re-fills its sequences, and finishes with correct outputs.
# In-process ledger: the leases die with the daemon (the restarted daemon
# starts empty).  Module ledger (LEDGER=module): the leases survive in
# /dev/kvpool and the daemon re-attaches to the orphaned pool.
. "$(dirname "$0")/lib.sh"

start_daemon
epoch1=$("$UTIL" status "$SOCK" | sed 's/.*epoch=//')
tenants_start --delay-ms 150
PIDS=$pids
# Kill it once all four are connected and working.
wait_leases 4
sleep 0.5
"$UTIL" status "$SOCK"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null
echo "killed kvpoold $DPID"
sleep 0.3
start_daemon
epoch2=$("$UTIL" status "$SOCK" | sed 's/.*epoch=//')
echo "epoch $epoch1 -> $epoch2"
[ "$epoch1" != "$epoch2" ] || fail "epoch did not change"
# shellcheck disable=SC2086
wait_pids_ok $pids || { cat "$TMP"/t*.out "$TMP"/t*.err; fail "a tenant failed"; }
cat "$TMP"/t*.out
for n in 1 2 3 4; do
	grep -q "restarts [1-9]" "$TMP/t$n.out" ||
		fail "tenant $n did not see the restart"
done
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
daemon_alive
echo "PASS: daemon restarted, tenants recovered with correct outputs"
