#!/bin/sh
# SPDX-License-Identifier: MIT
# The in-process ledger under a real service manager: kvpoold runs as a
# unit of a systemd user instance (in a private mount namespace, with its
# own /run), keeps its pool memory and its ledger's journal in the
# manager's file descriptor store (FDSTORE=1), and is killed with -9 while
# four tenants decode.  systemd starts it again with the kept descriptors
# ($LISTEN_FDS); every tenant claims its lease back and finishes with
# correct outputs, no restart seen and no token recomputed.  An upgrade
# onto another metadata version refuses what was kept: the tenants
# recompute, with correct outputs.  Claims with
# a wrong secret, from another uid or of a lease in use are refused, and
# a lease that nobody claims is freed after --claim-grace-ms.
if [ -z "$KVP_FDSTORE_NS" ]; then
	for p in unshare /lib/systemd/systemd systemctl; do
		command -v "$p" >/dev/null || { echo "missing $p"; exit 1; }
	done
	KVP_FDSTORE_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

mount -t tmpfs tmpfs /run || fail "cannot mount a private /run"
mkdir -p /run/systemd/system "$TMP/run" "$TMP/cfg/systemd/user"
chmod 700 "$TMP/run"
export XDG_RUNTIME_DIR="$TMP/run" XDG_CONFIG_HOME="$TMP/cfg"
unset DBUS_SESSION_BUS_ADDRESS
/lib/systemd/systemd --user >"$TMP/systemd.log" 2>&1 &
SDPID=$!
PIDS="$SDPID"
sdcleanup() {
	systemctl --user stop kvpt.service >/dev/null 2>&1
	pkill -9 -f -- "--socket $SOCK" 2>/dev/null
	cleanup
}
trap sdcleanup EXIT
i=0
until [ -S "$XDG_RUNTIME_DIR/systemd/private" ]; do
	[ $i -lt 100 ] || { cat "$TMP/systemd.log"; fail "systemd --user did not start"; }
	sleep 0.1
	i=$((i + 1))
done

unit() {	# unit KVPOOLD EXTRA-OPTIONS: the kvpoold service
	cat >"$TMP/cfg/systemd/user/kvpt.service" <<EOT
[Service]
Type=simple
NotifyAccess=main
FileDescriptorStoreMax=64
ExecStart=$(realpath "$1") --foreground --config "" --socket $SOCK --ledger inproc --backend cpu --block-bytes 65536 --capacity 2048 --chunk-blocks 32 --tier dram:512 -v $2
Restart=always
RestartSec=100ms
StandardOutput=append:$DLOG
StandardError=append:$DLOG
EOT
	systemctl --user daemon-reload || fail "daemon-reload"
}

main_pid() {
	systemctl --user show -p MainPID --value kvpt.service
}

# until the unit's main PID differs from $1 and answers
wait_served() {
	i=0
	while :; do
		p=$(main_pid)
		[ "$p" != 0 ] && [ "$p" != "$1" ] &&
			"$UTIL" status "$SOCK" >/dev/null 2>&1 && break
		[ $i -lt 150 ] || fail "kvpoold not served again by systemd"
		sleep 0.1
		i=$((i + 1))
	done
	DPID=$p
}

unit "$KVPOOLD" ""
systemctl --user start kvpt.service || fail "cannot start the unit"
wait_served 0
chmod 755 "$TMP"	# uid 65534 reaches the socket
"$UTIL" claim-bad "$SOCK" || fail "a bad claim was not refused"
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
epoch1=$("$UTIL" status "$SOCK" | sed 's/.*epoch=//')
tenants_start --delay-ms 150
PIDS="$SDPID $pids"
wait_leases 4
sleep 0.8
"$UTIL" status "$SOCK"
old=$(main_pid)
kill -9 "$old"
echo "killed kvpoold $old"
wait_served "$old"
epoch2=$("$UTIL" status "$SOCK" | sed 's/.*epoch=//')
echo "served again by $DPID, epoch $epoch1 -> $epoch2"
[ "$epoch1" = "$epoch2" ] || fail "the data epoch changed: nothing was kept"
grep -q "leases restored" "$DLOG" || fail "no lease restored"
# shellcheck disable=SC2086
wait_pids_ok $pids || fail "a tenant failed"
cat "$TMP"/t*.out
for n in 1 2 3 4; do
	grep -q "restarts 0, recomputed 0," "$TMP/t$n.out" ||
		fail "tenant $n recomputed after the restart"
	grep -q "OK$" "$TMP/t$n.out" || fail "tenant $n: wrong outputs"
done
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked after the tenants closed"

# An upgrade onto a build whose metadata region has another version: the
# kept memory and the leases are refused, the tenants recompute, their
# outputs stay correct.
METAV2=${METAV2:-build/tests/bin/kvpoold-metav2}
[ -x "$METAV2" ] || fail "missing $METAV2 (run make)"
pids=
for n in 2 3; do
	tenant_run $n --delay-ms 150 &
	pids="$pids $!"
done
PIDS="$SDPID $pids"
wait_leases 2
sleep 0.8
unit "$METAV2" ""
old=$(main_pid)
kill -9 "$old"
wait_served "$old"
epoch3=$("$UTIL" status "$SOCK" | sed 's/.*epoch=//')
[ "$epoch3" != "$epoch1" ] || fail "the upgrade kept the data epoch"
grep -q "metadata version 1, this build reads 2" "$DLOG" ||
	fail "the upgrade did not refuse the region"
# shellcheck disable=SC2086
wait_pids_ok $pids || fail "a tenant failed after the upgrade"
for n in 2 3; do
	tail -n 1 "$TMP/t$n.out"
	grep -q "restarts 1, recomputed [1-9]" "$TMP/t$n.out" ||
		fail "tenant $n did not recompute after the upgrade"
	grep -q "OK$" "$TMP/t$n.out" || fail "tenant $n: wrong outputs"
done
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked after the upgrade"

# A lease whose client never comes back: freed after the grace.
unit "$KVPOOLD" "--claim-grace-ms 1500"
systemctl --user restart kvpt.service || fail "cannot restart the unit"
wait_served "$DPID"
tenant_run 1 --delay-ms 100 --tokens 4096 &
t=$!
PIDS="$SDPID $t"
wait_leases 1
sleep 0.5
old=$(main_pid)
kill -9 "$old" "$t"
wait_served "$old"
"$UTIL" status "$SOCK"
"$UTIL" status "$SOCK" | grep -q " used=0 " &&
	fail "the orphan's blocks were not kept for it"
"$UTIL" wait-used "$SOCK" 0 5000 || fail "an unclaimed lease was not freed"
grep -q "not claimed in 1500 ms" "$DLOG" || fail "no unclaimed lease in the log"
n=$(grep -c "the service manager kept" "$DLOG")
kept=$(grep "the service manager kept" "$DLOG" | tail -n 1 | sed 's/.*kept \([0-9]*\) desc.*/\1/')
echo "restarts with kept descriptors: $n, the last with $kept"
[ "$kept" -le 6 ] || fail "the fd store grows with every restart ($kept descriptors)"
systemctl --user stop kvpt.service
echo "PASS: kept in the service manager's fd store, no recompute; unclaimed lease freed"
