#!/bin/sh
# SPDX-License-Identifier: MIT
# Connection limits: a non-admin uid gets --max-clients-per-uid connections
# and the next one is refused with -EUSERS; --max-clients bounds them all,
# and admin peers (root) still get in over it.  Needs root (the clients run
# as nobody: root and the daemon's own uid are admin peers, not limited).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "no user nobody"; exit 1; }
command -v setpriv >/dev/null || { echo "setpriv missing (util-linux)"; exit 1; }
chmod 755 "$TMP"
as_nobody() {
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"
}
start_daemon --max-clients-per-uid 4
as_nobody "$UTIL" conn-limit "$SOCK" 4 || fail "per-uid limit"
kill "$DPID"; wait "$DPID" 2>/dev/null; DPID=
start_daemon --max-clients 3
as_nobody "$UTIL" conn-limit "$SOCK" 3 || fail "total limit"
# Admin peers have a reserve over --max-clients.
"$UTIL" status "$SOCK" >/dev/null || fail "root refused at the total limit"
grep -q "too many connections" "$DLOG" || fail "no refusal logged"
daemon_alive
