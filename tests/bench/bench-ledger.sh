#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench-ledger: the ledger core (kvpool-bench-ledger), then what a
# client pays per block for a lease + release through libkvlease
# (kvpool-bench-lease), in batches of 1 and 16:
#   - through kvpoold's socket: a private kvpoold (CPU backend, in-process
#     ledger) on a socket in a temporary directory;
#   - through /dev/kvpool: only where kvpool.ko is loaded and this runs as
#     root (a private kvpoold owns a pool in the module); otherwise the
#     line says why it was skipped.  The VM suite measures it in its boot
#     (tests/vm/guest.d/bench-lease.sh), under emulation.
# The last stdout line is one JSON object: {"ledger": {...},
# "lease_daemon": {...}, "lease_module": {...} or null,
# "lease_module_skipped": reason or null}.
B=${B:-build}
for p in "$B/bin/kvpool-bench-ledger" "$B/bin/kvpool-bench-lease" \
	 "$B/bin/kvpoold"; do
	[ -x "$p" ] || { echo "missing $p (run make)"; exit 1; }
done
TMP=$(mktemp -d /tmp/kvpool-bench-ledger.XXXXXX) || exit 1
DPID=
cleanup() {
	[ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$B/bin/kvpool-bench-ledger" | tee "$TMP/core.out" || exit 1
core=$(tail -n 1 "$TMP/core.out")

# start_daemon LEDGER: a private kvpoold answering on $TMP/kvpool.sock
start_daemon() {
	rm -f "$TMP/kvpool.sock"
	"$B/bin/kvpoold" --foreground --socket "$TMP/kvpool.sock" \
		--ledger "$1" --backend cpu --pool bench --block-bytes 4096 \
		--capacity 65536 --chunk-blocks 1024 --shrink-delay-ms 60000 \
		-q >>"$TMP/daemon.log" 2>&1 &
	DPID=$!
	i=0
	while [ $i -lt 100 ]; do
		[ -S "$TMP/kvpool.sock" ] && return 0
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "kvpoold did not start:"
	tail -n 5 "$TMP/daemon.log"
	return 1
}

stop_daemon() {
	kill "$DPID" 2>/dev/null
	wait "$DPID" 2>/dev/null
	DPID=
}

start_daemon inproc || exit 1
"$B/bin/kvpool-bench-lease" --transport daemon --socket "$TMP/kvpool.sock" \
	--pool bench | tee "$TMP/daemon.out" || exit 1
daemon=$(tail -n 1 "$TMP/daemon.out")
stop_daemon

module=null
why=
if [ ! -c /dev/kvpool ]; then
	why="no /dev/kvpool: kvpool.ko is not loaded on this machine"
elif [ "$(id -u)" != 0 ]; then
	why="not root: creating a pool in the module needs CAP_SYS_ADMIN"
elif start_daemon module; then
	if "$B/bin/kvpool-bench-lease" --transport module --pool bench \
		>"$TMP/module.out"; then
		cat "$TMP/module.out"
		module=$(tail -n 1 "$TMP/module.out")
	else
		why="kvpool-bench-lease failed: $(tail -n 1 "$TMP/module.out")"
	fi
	stop_daemon
else
	why="kvpoold --ledger module did not start"
fi
if [ -n "$why" ]; then
	echo "lease through /dev/kvpool: skipped ($why)"
	why="\"$why\""
else
	why=null
fi
echo "{\"ledger\": $core, \"lease_daemon\": $daemon, \"lease_module\": $module, \"lease_module_skipped\": $why}"
