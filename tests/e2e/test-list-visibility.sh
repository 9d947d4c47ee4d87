#!/bin/sh
# SPDX-License-Identifier: MIT
# What CLIENT_LIST and CLIENT_TIERS show: an admin peer (root, the
# daemon's uid, the admin group) sees every lease and connection with its
# pid, uid and tenant; another user sees only its own uid's, like /proc
# with hidepid.  PREFIX_LIST and TIER_LIST, which need no HELLO: another
# user sees the prefix caches of the tenants it may attach to (by its uid
# or a group of its) and none of the tiers' swap counters; an admin sees
# every cache and the counters.  Needs root (the
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

# The prefix caches and the tiers' counters.
PFX=$E2E_BIN/e2e-prefix
[ -x "$PFX" ] || fail "missing $PFX (run make)"
kill "$DPID"
wait "$DPID" 2>/dev/null
nuid=$(id -u nobody)
ngid=$(id -g nobody)
start_tiers_daemon --tenant "mine:max:0:$nuid" --tenant "grp:max:0:-:$ngid" \
	--tenant theirs:max:0:0 --tenant open
for t in mine grp theirs open; do
	"$PFX" put "$SOCK" $t 5 128 >/dev/null || fail "put into $t's cache"
done
"$TIERS" roundtrip "$SOCK" >"$TMP/rt.out" 2>&1 || { cat "$TMP/rt.out"; fail "swaps"; }
out=$(setpriv --reuid=nobody --regid="$ngid" --clear-groups \
	"$UTIL" visible "$SOCK") || fail "visible as nobody"
echo "as nobody: $out"
[ "$out" = "prefix grp mine tiers 3 swaps 0 blocks 0 bytes 0 ns 0 errors 0 jobs 0" ] ||
	fail "nobody sees other tenants' caches or the swap traffic: $out"
out=$("$UTIL" visible "$SOCK") || fail "visible as root"
echo "as root: $out"
case $out in
"prefix grp mine open theirs tiers 3 swaps "[1-9]*" errors 0 jobs "[1-9]*) ;;
*) fail "root does not see every cache and the swap traffic: $out" ;;
esac
daemon_alive
