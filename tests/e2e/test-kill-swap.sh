#!/bin/sh
# SPDX-License-Identifier: MIT
# kill -9 in the middle of swapping:
#  1. of a client that swaps a 48-block sequence out and in without pause:
#     no block stays leased in any pool, a tenant next to it finishes with
#     correct outputs, another swapping client carries on;
#  2. of the daemon: after a restart a swapped sequence reports DROPPED
#     with its old length (contents do not survive: see tiers.rst), no
#     block of a lower tier stays held, swapping clients carry on.
. "$(dirname "$0")/lib.sh"

start_tiers_daemon
"$TIERS" churn "$SOCK" "$TMP/a.ready" >"$TMP/ta.out" 2>&1 &
A=$!
"$TIERS" churn "$SOCK" "$TMP/b.ready" >"$TMP/tb.out" 2>&1 &
B=$!
tenant_run 1 --delay-ms 20 &
T=$!
PIDS="$A $B $T"
i=0
until [ -e "$TMP/a.ready" ] && [ -e "$TMP/b.ready" ]; do
	[ $i -lt 100 ] || fail "churn clients did not start swapping"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.3
kill -9 $A
wait $A 2>/dev/null
echo "killed a swapping client"
wait $T || { cat "$TMP/t1.out" "$TMP/t1.err"; fail "the tenant next to it failed"; }
kill -0 $B || fail "the other swapping client died"
cp "$TMP/b.ready" "$TMP/b.seen"
rm -f "$TMP/b.ready"
kill -9 $B
wait $B 2>/dev/null
tiers_idle
echo "no block leaked in any pool"

# 2: the daemon, mid-swap
"$TIERS" churn "$SOCK" "$TMP/c.ready" >"$TMP/tc.out" 2>&1 &
C=$!
"$TIERS" restart "$SOCK" "$TMP/r.ready" >"$TMP/tr.out" 2>&1 &
R=$!
PIDS="$C $R"
i=0
until [ -e "$TMP/c.ready" ] && [ -e "$TMP/r.ready" ]; do
	[ $i -lt 100 ] || fail "clients did not start"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.3
kill -9 "$DPID"
wait "$DPID" 2>/dev/null
echo "killed kvpoold mid-swap"
sleep 0.3
start_tiers_daemon
wait $R || { cat "$TMP/tr.out"; fail "restart client"; }
cat "$TMP/tr.out"
i=0
until [ -e "$TMP/c.ready.2" ]; do
	[ $i -lt 100 ] || { cat "$TMP/tc.out"; fail "swapping client did not carry on"; }
	sleep 0.1
	i=$((i + 1))
done
kill -9 $C
wait $C 2>/dev/null
tiers_idle
daemon_alive
echo "PASS: kill -9 of a client and of the daemon mid-swap leak nothing"
