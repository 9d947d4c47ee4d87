#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpoold.conf at start and on SIGHUP (in-process ledger, CPU backend):
#  - the file's tenants and limits take effect; a flag overrides the file;
#  - a reload while leases are held changes limits (a max below current is
#    accepted, the lease keeps its blocks), creates new tenants, deletes an
#    idle tenant the file no longer names and keeps a busy one until a
#    later reload finds it idle;
#  - a file with an error is refused with its line number and the running
#    configuration stays in force.
. "$(dirname "$0")/lib.sh"

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
# tenant_has NAME PATTERN
tenant_has() {
	out=$("$UTIL" tenant "$SOCK" "$1") || fail "no tenant $1"
	echo "$out" | grep -q -e "$2" || fail "tenant $1: '$out' lacks '$2'"
}
wait_file() {
	i=0
	while [ ! -s "$1" ]; do
		[ $i -lt 100 ] || fail "no $1"
		sleep 0.1
		i=$((i + 1))
	done
}

cat >"$CONF" <<'END'
# the flag --capacity 2048 of start_daemon wins over this
[pool]
capacity = 1024
default_max = 64

[tenant chat]
max = 100
min = 10
[tenant batch]
max = 50
[tenant gone]
END
start_daemon --config "$CONF"
"$UTIL" status "$SOCK" | grep -q " capacity=2048 " ||
	fail "the --capacity flag did not override the file"
tenant_has chat "max=100 min=10 "
tenant_has batch "max=50 min=0 "
tenant_has gone "max=4294967295 "

"$UTIL" hold "$SOCK" chat 40 "$TMP/h-chat" &
PIDS="$PIDS $!"
"$UTIL" hold "$SOCK" gone 5 "$TMP/h-gone" &
GONE=$!
PIDS="$PIDS $GONE"
"$UTIL" hold "$SOCK" "" 70 "$TMP/h-auto" 2>"$TMP/h-auto.err" &
AUTO=$!
PIDS="$PIDS $AUTO"
wait_file "$TMP/h-chat"
wait_file "$TMP/h-gone"
# default_max 64 from the file: a per-uid tenant cannot get 70
sleep 0.3
[ -s "$TMP/h-auto" ] && fail "default_max 64 from the file not applied"
kill "$AUTO" 2>/dev/null
"$UTIL" wait-used "$SOCK" 45 5000 || fail "used != 45"

cat >"$CONF" <<'END'
[pool]
capacity = 1024
[tenant chat]
max = 30
min = 5
uid = 0
[tenant fresh]
max = 8
END
kill -HUP "$DPID"
wait_log "configuration reloaded" 1
tenant_has chat "current=40 peak=40 max=30 min=5 leases=1"
tenant_has fresh "max=8 min=0 "
tenant_has gone "current=5 "
grep -q "tenant gone in host is no longer configured but holds blocks" "$DLOG" ||
	fail "busy tenant 'gone' not reported"
"$UTIL" tenant "$SOCK" batch >/dev/null 2>&1 && fail "idle tenant batch kept"
"$UTIL" wait-used "$SOCK" 45 2000 || fail "a lease changed in the reload"

# A bad file: refused, with its line; the running configuration stays.
cat >"$CONF" <<'END'
[pool]
capacity = 1024

[tenant chat]
max = lots
END
kill -HUP "$DPID"
wait_log "the running configuration stays in force" 1
grep -q "kvpoold.conf: line 5: max = lots: must be a number of blocks" \
	"$DLOG" || fail "no line number for the bad value"
tenant_has chat "max=30 min=5 "
tenant_has fresh "max=8 "
printf '[pool]\ncapacity = 1024\n[tenant chat]\nmax = 4096\n' >"$CONF"
kill -HUP "$DPID"
wait_log "the running configuration stays in force" 2
grep -q "kvpoold.conf: line 3: tenant chat: max 4096 is above pool host's capacity 2048" \
	"$DLOG" || fail "no line for a max above capacity"
tenant_has chat "max=30 "

# Once idle, the unconfigured tenant goes at the next reload.
kill "$GONE"
"$UTIL" wait-used "$SOCK" 40 5000 || fail "gone's blocks did not return"
printf '[tenant chat]\nmax = 40\n' >"$CONF"
kill -HUP "$DPID"
wait_log "configuration reloaded" 2
"$UTIL" tenant "$SOCK" gone >/dev/null 2>&1 && fail "idle tenant gone kept"
"$UTIL" tenant "$SOCK" fresh >/dev/null 2>&1 && fail "tenant fresh kept"
tenant_has chat "current=40 peak=40 max=40 min=0 "
daemon_alive
echo "config reload: ok"
