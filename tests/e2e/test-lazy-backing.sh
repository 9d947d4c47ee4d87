#!/bin/sh
# SPDX-License-Identifier: MIT
# Lazy backing on the cpu backend: kvpoold's resident memory rises when
# blocks are leased (chunks mapped and populated) and falls back to its
# idle level once they are released and the shrink delay has passed.
# Prints both figures.
. "$(dirname "$0")/lib.sh"

[ "$BACKEND" = cpu ] || { echo "the $BACKEND backend: this test is for the cpu backend"; exit 77; }
start_daemon
"$UTIL" wait-mapped "$SOCK" 0 3000 || fail "idle daemon has chunks mapped"
idle=$(rss_kb "$DPID")
"$UTIL" hold "$SOCK" "" 1024 "$TMP/h.ready" &
hpid=$!
PIDS=$hpid
i=0
while [ ! -s "$TMP/h.ready" ]; do
	[ $i -lt 100 ] || fail "holder did not lease"
	sleep 0.1
	i=$((i + 1))
done
loaded=$(rss_kb "$DPID")
"$UTIL" status "$SOCK"
kill $hpid
wait $hpid 2>/dev/null
"$UTIL" wait-used "$SOCK" 0 3000 || fail "blocks not returned"
"$UTIL" wait-mapped "$SOCK" 0 5000 || fail "chunks not unmapped after the delay"
after=$(rss_kb "$DPID")
echo "kvpoold RSS: idle ${idle} KiB, 1024 blocks of 64 KiB leased ${loaded} KiB, released + delay ${after} KiB"
[ "$loaded" -ge $((idle + 60000)) ] || fail "RSS did not rise by the 64 MiB leased"
[ "$after" -le $((idle + 8192)) ] || fail "RSS did not fall back to idle"
echo "PASS"
