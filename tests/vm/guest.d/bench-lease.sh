#!/bin/sh
# SPDX-License-Identifier: MIT
#
# What a client pays for a lease with the real module (runs inside the VM,
# kvpool.ko freshly loaded): kvpool-bench-lease through /dev/kvpool (a
# kvpoold owns the pool in the module) and, for comparison in the same
# guest, through a second kvpoold's socket (in-process ledger).  The
# figures are printed to the console log; they are measured under QEMU's
# TCG emulation, so only their ratio says something about real hardware.
# Exit 0 pass, 1 fail, 77 skip (no /dev/kvpool or a program missing).
# Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold kvpool-bench-lease; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/bench-lease
rm -rf $T
mkdir -p $T
DPID=

cleanup() {
	[ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

# start_daemon LEDGER SOCKET
start_daemon() {
	kvpoold --foreground --socket $2 --ledger $1 --backend cpu \
		--pool bench --block-bytes 4096 --capacity 4096 \
		--chunk-blocks 256 --shrink-delay-ms 60000 -q \
		>>$T/daemon.log 2>&1 &
	DPID=$!
	i=0
	while [ $i -lt 100 ]; do
		[ -S $2 ] && return 0
		kill -0 $DPID 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "FAIL: kvpoold --ledger $1 did not start"
	tail -n 20 $T/daemon.log
	exit 1
}

stop_daemon() {
	kill $DPID 2>/dev/null
	wait $DPID 2>/dev/null
	DPID=
}

echo "bench-lease: under QEMU TCG emulation"
start_daemon module $T/module.sock
kvpool-bench-lease --transport module --pool bench --iters 500 || {
	echo "FAIL: lease bench through /dev/kvpool"; exit 1; }
stop_daemon
start_daemon inproc $T/inproc.sock
kvpool-bench-lease --transport daemon --socket $T/inproc.sock \
	--pool bench --iters 50 || {
	echo "FAIL: lease bench through the daemon socket"; exit 1; }
stop_daemon
echo "bench-lease: ok"
exit 0
