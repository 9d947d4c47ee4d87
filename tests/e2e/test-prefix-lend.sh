#!/bin/sh
# SPDX-License-Identifier: MIT
# Shared namespaces: the blocks other tenants reference stay charged to
# their publisher, who cannot give them back meanwhile; so a publisher
# lends at most --prefix-lend-percent of its max (here 50 % of 8).  Past
# that, another tenant's MATCH stops and its PUBLISH caches its own copy
# (charged to it, found by nobody); the publisher keeps the rest of its
# max for itself.  A bad percentage is refused at start.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || fail "missing $PFX (run make)"

"$KVPOOLD" --foreground --config "" --socket "$TMP/b.sock" --ledger inproc \
	--backend cpu --prefix-lend-percent 101 >"$TMP/bad.log" 2>&1
[ $? = 2 ] || fail "--prefix-lend-percent 101 accepted"
start_daemon --prefix-lend-percent 50 --tenant owner:8 --tenant other
"$PFX" lend "$SOCK" owner other 8 || fail "lend"
"$UTIL" wait-used "$SOCK" 4 5000 || fail "blocks leaked"
daemon_alive
