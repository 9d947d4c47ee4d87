#!/bin/sh
# SPDX-License-Identifier: MIT
# Deleting a tenant deletes its prefix cache's record with it: its cached
# blocks are given back and it leaves its shared namespace, so that a
# tenant created later under the same name starts with an empty cache of
# its own and matches nothing of the namespace.  Both ways the daemon
# deletes: the socket's TENANT_DEL (kvpoolctl tenant del) and a reload of
# kvpoold.conf that no longer names the tenant (the cache's own leases do
# not keep it alive).
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
CTL=${KVPOOLCTL:-build/bin/kvpoolctl}
for p in "$PFX" "$CTL"; do
	[ -x "$p" ] || fail "missing $p (run make)"
done
[ -e "${KVPOOL_DEVICE:-/dev/kvpool}" ] &&
	{ echo "/dev/kvpool present: kvpoolctl would use the module"; exit 77; }
ctl() { "$CTL" --socket "$SOCK" "$@"; }
CONF=$TMP/kvpoold.conf
# wait_log PATTERN N: the daemon log has N lines matching PATTERN (10 s)
wait_log() {
	i=0
	while [ "$(grep -c -e "$1" "$DLOG")" -lt "$2" ]; do
		[ $i -lt 100 ] || fail "log lacks $2 x '$1'"
		kill -0 "$DPID" 2>/dev/null || fail "kvpoold died"
		sleep 0.1
		i=$((i + 1))
	done
}
# fresh NAME: the tenant's cache is empty, in its own namespace, and it
# matches none of the shared prompt
fresh() {
	out=$("$PFX" stats "$SOCK" "$1") || fail "stats $1"
	echo "$out"
	case $out in
	*" ns= cached=0 "*) ;;
	*) fail "re-created $1 has the old cache's record: $out" ;;
	esac
	out=$("$PFX" hit "$SOCK" "$1" 9 256) || fail "match as $1"
	[ "$out" = "matched 0 tokens" ] ||
		fail "re-created $1 rejoined the shared namespace: $out"
}

printf '[tenant pub]\n[tenant gone]\n' >"$CONF"
start_daemon --config "$CONF"
ctl tenant add del1 >/dev/null || fail "tenant add del1"
for t in pub del1 gone; do
	ctl prefix share $t common >/dev/null || fail "share $t"
done
"$PFX" put "$SOCK" pub 9 256 >/dev/null || fail "pub publishes"
"$PFX" put "$SOCK" del1 10 128 >/dev/null || fail "del1 publishes"
"$PFX" put "$SOCK" gone 11 128 >/dev/null || fail "gone publishes"
for t in del1 gone; do
	out=$("$PFX" hit "$SOCK" $t 9 256) || fail "match as $t"
	[ "$out" = "matched 256 tokens" ] || fail "$t does not share: $out"
done
"$UTIL" wait-used "$SOCK" 8 5000 || fail "8 cached blocks"

# 1: the socket's TENANT_DEL.
ctl tenant del del1 || fail "tenant del del1"
"$UTIL" wait-used "$SOCK" 6 5000 || fail "del1's cached blocks not given back"
ctl tenant add del1 >/dev/null || fail "tenant add del1 again"
fresh del1

# 2: a reload that no longer names the tenant; then names it again.
printf '[tenant pub]\n' >"$CONF"
kill -HUP "$DPID"
wait_log "configuration reloaded" 1
grep -q "tenant gone in host is no longer configured but holds blocks" "$DLOG" &&
	fail "gone's cache kept it alive"
"$UTIL" tenant "$SOCK" gone >/dev/null 2>&1 && fail "tenant gone kept"
"$UTIL" wait-used "$SOCK" 4 5000 || fail "gone's cached blocks not given back"
printf '[tenant pub]\n[tenant gone]\n' >"$CONF"
kill -HUP "$DPID"
wait_log "configuration reloaded" 2
fresh gone

# The publisher that stays keeps its cache and its namespace.
out=$("$PFX" stats "$SOCK" pub)
case $out in
*" ns=common cached=4 "*) ;;
*) fail "pub's cache changed: $out" ;;
esac
daemon_alive
echo "PASS: a deleted tenant's cache goes with it (socket and reload)"
