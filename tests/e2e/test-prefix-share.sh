#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: two processes of one tenant share a prompt's blocks.  The
# reader's matched K/V are bit-identical to a private copy and its decode
# outputs equal the private copy's; the publisher is killed with kill -9
# while the reader decodes: the reader carries on, the cache keeps the
# blocks (charged to the tenant, held by the daemon), nothing else stays
# leased, and a flush gives them back.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant app
"$PFX" publish "$SOCK" app 7 300 "$TMP/pub.ready" >"$TMP/t1.out" 2>"$TMP/t1.err" &
pub=$!
PIDS=$pub
i=0
until [ -s "$TMP/pub.ready" ]; do
	[ $i -lt 100 ] || fail "the publisher did not publish"
	sleep 0.1
	i=$((i + 1))
done
[ "$(cat "$TMP/pub.ready")" = 4 ] || fail "published $(cat "$TMP/pub.ready") blocks, want 4"
"$PFX" read "$SOCK" app 7 300 "$TMP/rd.ready" "$TMP/go" >"$TMP/t2.out" 2>"$TMP/t2.err" &
rd=$!
PIDS="$pub $rd"
i=0
until [ -e "$TMP/rd.ready" ]; do
	[ $i -lt 100 ] || fail "the reader did not start decoding"
	kill -0 $rd 2>/dev/null || fail "the reader failed"
	sleep 0.1
	i=$((i + 1))
done
"$PFX" stats "$SOCK" app
kill -9 $pub
wait $pub 2>/dev/null
echo "killed the publisher ($pub) while the reader decodes"
touch "$TMP/go"
wait $rd || fail "the reader failed after the publisher died"
cat "$TMP/t2.out"
"$PFX" stats "$SOCK" app >"$TMP/st"
cat "$TMP/st"
grep -q "cached=4 referenced=0 hits=4 " "$TMP/st" || fail "the cache lost its blocks"
# Nothing leaked: the cache's 4 blocks are all that is leased.
"$UTIL" wait-used "$SOCK" 4 5000 || fail "blocks leaked"
"$UTIL" tenant "$SOCK" app | grep -q "current=4 " || fail "the cache is not charged to the tenant"
build/bin/kvpoolctl --socket "$SOCK" prefix flush app || fail "flush"
"$UTIL" wait-used "$SOCK" 0 5000 || fail "flushed blocks not returned"
daemon_alive
echo "PASS: shared prefix survives its publisher, nothing leaked"
