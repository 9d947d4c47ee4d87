#!/bin/sh
# SPDX-License-Identifier: MIT
# What CLIENT_LIST and CLIENT_TIERS show: an admin peer (root, the
# daemon's uid, the admin group) sees every lease and connection with its
# pid, uid and tenant; another user sees only its own uid's, like /proc
# with hidepid.  Needs root (the
# unprivileged client runs as nobody).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "no user nobody"; exit 1; }
command -v setpriv >/dev/null || { echo "setpriv missing (util-linux)"; exit 1; }
chmod 1777 "$TMP"
start_daemon
"$UTIL" hold "$SOCK" "" 2 "$TMP/held" &
PIDS="$PIDS $!"
setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
	"$UTIL" hold "$SOCK" "" 1 "$TMP/held2" &
PIDS="$PIDS $!"
for i in $(seq 50); do [ -s "$TMP/held" ] && [ -s "$TMP/held2" ] && break; sleep 0.1; done
[ -s "$TMP/held" ] && [ -s "$TMP/held2" ] || fail "the holding clients did not lease"
out=$(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
	"$UTIL" list "$SOCK") || fail "list as nobody"
echo "as nobody: $out"
[ "$out" = "leases 2 mine 2 total 2 clients 2 mine 2 total 2" ] ||
	fail "nobody sees other users' leases or connections: $out"
out=$("$UTIL" list "$SOCK") || fail "list as root"
echo "as root: $out"
[ "$out" = "leases 3 mine 2 total 3 clients 3 mine 2 total 3" ] ||
	fail "root does not see every lease and connection: $out"
daemon_alive
