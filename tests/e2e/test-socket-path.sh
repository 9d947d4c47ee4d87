#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpoold replaces only a stale socket of its own at its socket path: a
# regular file, a symlink and (as root) another user's socket are left
# alone and the daemon refuses to start; a stale socket of ours is removed.
. "$(dirname "$0")/lib.sh"

refuses() {	# what (a daemon that starts is stopped after 5 s: rc 124)
	timeout 5 "$KVPOOLD" --foreground --socket "$SOCK" --ledger inproc \
		--backend cpu --capacity 64 >"$TMP/start.log" 2>&1
	[ $? = 1 ] || fail "kvpoold started over $1"
	echo "refused over $1: $(tail -n 1 "$TMP/start.log")"
}
echo precious >"$SOCK"
refuses "a regular file"
[ "$(cat "$SOCK")" = precious ] || fail "the regular file was changed"
rm -f "$SOCK"
echo target >"$TMP/target"
ln -s "$TMP/target" "$SOCK"
refuses "a symlink"
[ -L "$SOCK" ] && [ "$(cat "$TMP/target")" = target ] || fail "the symlink was changed"
rm -f "$SOCK"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
	chmod 1777 "$TMP"
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
		"$UTIL" stale-socket "$SOCK" || fail "stale socket as nobody"
	refuses "another user's socket"
	[ -S "$SOCK" ] || fail "another user's socket was removed"
	rm -f "$SOCK"
fi
"$UTIL" stale-socket "$SOCK" || fail "stale socket"
start_daemon
grep -q "removed the stale socket" "$DLOG" || fail "stale socket not reported"
daemon_alive
