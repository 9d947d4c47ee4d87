#!/bin/sh
# SPDX-License-Identifier: MIT
#
# End to end with the real module (runs inside the VM, kvpool.ko freshly
# loaded, programs in /bin via VM_EXTRA_PROGS from tests/e2e/e2e.mk):
#  1. kvpoold owns the pool through /dev/kvpool (module ledger); 4 tenant
#     processes with different KV layouts lease through ioctls, pass their
#     /dev/kvpool fd to the daemon, write K/V and run attention; outputs
#     match the kernels' reference;
#  2. kill -9 of a tenant mid-run: its blocks return, the others finish;
#  3. kill -9 of kvpoold mid-run and a restart: it re-attaches to the
#     orphaned pool (new epoch, leases intact), tenants recover;
#  4. nothing is leased at the end.
# Exit 0 pass, 1 fail, 77 skip (no /dev/kvpool or a program missing).
# Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-tenant e2e-util; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/e2e-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
DPID=
ALL=

cleanup() {
	for p in $ALL $DPID; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	tail -n 40 $T/daemon.log
	for f in $T/t*.out $T/t*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

start_daemon() {
	kvpoold --foreground --socket $S --ledger module --backend cpu \
		--pool gpu0 --block-bytes 65536 --capacity 2048 \
		--chunk-blocks 32 --shrink-delay-ms 300 --no-keep -v >>$T/daemon.log 2>&1 &
	DPID=$!
	i=0
	while [ $i -lt 100 ]; do
		e2e-util status $S >/dev/null 2>&1 && return 0
		kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
		sleep 0.1
		i=$((i + 1))
	done
	fail "kvpoold did not answer"
}

tenant() {	# N delay-ms  (run in the background; execs)
	case $1 in
	1) lay="--dtype bf16 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 4" ;;
	2) lay="--dtype fp8 --layers 3 --kv-heads 1 --head-dim 128 --q-heads 8" ;;
	3) lay="--dtype int8 --layers 2 --kv-heads 4 --head-dim 32 --q-heads 4" ;;
	*) lay="--dtype int4 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 8" ;;
	esac
	exec e2e-tenant --socket $S --seed $1 $lay --seqs 3 --tokens 192 \
		--step 16 --delay-ms $2 >$T/t$1.out 2>$T/t$1.err
}

used() {
	e2e-util status $S | sed 's/.* used=\([0-9]*\) .*/\1/'
}

# 1 + 2: four tenants, one killed mid-run.
start_daemon
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
pids=
for n in 1 2 3; do
	tenant $n 100 &
	pids="$pids $!"
done
tenant 4 1000 &
victim=$!
ALL="$pids $victim"
i=0
while ! grep -q . $T/t4.err 2>/dev/null && [ "$(used)" -lt 4 ]; do
	[ $i -lt 100 ] || fail "tenants did not lease"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.5
before=$(used)
kill -9 $victim
wait $victim 2>/dev/null
echo "killed tenant $victim mid-run (pool used $before)"
for p in $pids; do
	wait $p || fail "a tenant failed"
done
cat $T/t1.out $T/t2.out $T/t3.out
e2e-util wait-used $S 0 5000 || fail "blocks leaked after a tenant was killed"

# 3: kill -9 of the daemon mid-run.
epoch1=$(e2e-util status $S | sed 's/.*epoch=//')
pids=
for n in 1 2 3 4; do
	tenant $n 150 &
	pids="$pids $!"
done
ALL=$pids
i=0
until e2e-util status $S | grep -q " leases=4 "; do
	[ $i -lt 100 ] || fail "tenants did not connect"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.5
e2e-util status $S
kill -9 $DPID
wait $DPID 2>/dev/null
echo "killed kvpoold; leases stay in /dev/kvpool:"
cat /sys/kernel/kvpool/gpu0/used 2>/dev/null
sleep 0.3
start_daemon
grep -q "re-attached" $T/daemon.log || fail "kvpoold did not re-attach"
epoch2=$(e2e-util status $S | sed 's/.*epoch=//')
echo "epoch $epoch1 -> $epoch2"
[ "$epoch1" != "$epoch2" ] || fail "epoch did not change"
for p in $pids; do
	wait $p || fail "a tenant failed after the restart"
done
cat $T/t*.out
for n in 1 2 3 4; do
	grep -q "restarts [1-9]" $T/t$n.out || fail "tenant $n missed the restart"
done
e2e-util wait-used $S 0 5000 || fail "blocks leaked"
# Lazy backing with the module: idle chunks are shrunk (POOL_SHRINK).
e2e-util wait-mapped $S 0 5000 || fail "idle chunks not shrunk"
cat /sys/kernel/kvpool/gpu0/backed 2>/dev/null
e2e-util status $S
kill $DPID
wait $DPID 2>/dev/null
DPID=
echo "PASS: end to end with the module"
