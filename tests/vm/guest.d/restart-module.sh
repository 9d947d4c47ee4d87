#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The KV cache survives kvpoold (runs inside the VM, kvpool.ko freshly
# loaded): pool memory is kept (memfds deposited with the module's pools,
# the nvme file, the scrub tags, the metadata region), so a restarted
# daemon serves the same bytes.
#  1. kvpoold with a dram and an nvme tier; four tenants decoding (bf16,
#     fp8, int8, int4), each checking every output against the reference,
#     and a client with one sequence swapped to each lower tier; kill -9 of
#     kvpoold mid-decode, a restart: the kept memory is used, the data
#     epoch stays, every tenant finishes with every output correct, no
#     restart seen and 0 tokens recomputed; the swapped sequences are still
#     swapped and read back bit for bit; a fifth tenant decoding on
#     blocks of its prefix cache (published by another process) goes on
#     through the restart with the same outputs as a private copy: the
#     index and the cache's leases were kept, and its references taken
#     again; the cache still hits afterwards;
#  2. the same kill, then a restart onto a build whose metadata version
#     differs (an upgrade): it refuses the region, every pool starts
#     zeroed, the epoch changes and every tenant recovers by recompute with
#     correct outputs; the prefix cache starts empty;
#  3. sysfs: what is deposited with each pool; nothing leased at the end.
# Exit 0 pass, 1 fail, 77 skip (no /dev/kvpool).  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold kvpoold-metav2 e2e-tenant e2e-tiers e2e-util e2e-prefix \
	kvpoolctl; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/restart-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
export KVPOOL_SOCKET=$S
SYS=/sys/kernel/kvpool
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
	for f in $T/*.out $T/*.err; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
	done
	exit 1
}

start_daemon() {	# BINARY
	$1 --foreground --socket $S --ledger module --backend cpu \
		--pool gpu0 --block-bytes 65536 --capacity 2048 \
		--chunk-blocks 32 --shrink-delay-ms 300 --tier dram:512 \
		--tier nvme:$T/swap:32M -v >>$T/daemon.log 2>&1 &
	DPID=$!
	i=0
	until e2e-util status $S >/dev/null 2>&1; do
		[ $i -lt 150 ] || fail "kvpoold did not answer"
		kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
		sleep 0.1
		i=$((i + 1))
	done
}

tenant() {	# N delay-ms
	case $1 in
	1) lay="--dtype bf16 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 4" ;;
	2) lay="--dtype fp8 --layers 3 --kv-heads 1 --head-dim 128 --q-heads 8" ;;
	3) lay="--dtype int8 --layers 2 --kv-heads 4 --head-dim 32 --q-heads 4" ;;
	*) lay="--dtype int4 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 8" ;;
	esac
	exec e2e-tenant --socket $S --seed $1 $lay --seqs 3 --tokens 160 \
		--step 16 --delay-ms $2 >$T/t$1.out 2>$T/t$1.err
}

# The data epoch of the daemon serving now (the clients' epoch; the
# pool's owner epoch goes up at every attach).
epoch() {
	sed -n 's/.*notice: serving .*, epoch \([0-9]*\)$/\1/p' $T/daemon.log |
		tail -n 1
}

# Start the four tenants and the swapped client (round $1), wait until
# all are mid-run.
start_clients() {
	pids=
	for n in 1 2 3 4; do
		tenant $n 150 &
		pids="$pids $!"
	done
	rm -f $T/k.ready $T/k.ready.go
	e2e-tiers kept $S $T/k.ready >$T/k$1.out 2>&1 &
	K=$!
	ALL="$pids $K"
	i=0
	until e2e-util status $S | grep -q " leases=5 " && [ -e $T/k.ready ]; do
		[ $i -lt 200 ] || fail "clients did not start"
		sleep 0.1
		i=$((i + 1))
	done
	sleep 0.5
}

kill_daemon() {
	kill -9 $DPID
	wait $DPID 2>/dev/null
	DPID=
	for p in gpu0 dram nvme; do
		echo "after kill -9: $p used $(cat $SYS/$p/used), deposits $(cat $SYS/$p/deposits)"
		[ "$(cat $SYS/$p/deposits)" -gt 0 ] || fail "$p: nothing deposited"
	done
}

# A process publishes 256 tokens (4 blocks) to tenant pfx's prefix cache
# and keeps its references; another matches them and decodes on them,
# against a private copy, until $T/rd.go exists.
start_prefix() {
	rm -f $T/pub.ready $T/rd.ready $T/rd.go
	e2e-prefix publish $S pfx 7 256 $T/pub.ready >$T/pub.out 2>$T/pub.err &
	PUB=$!
	ALL="$ALL $PUB"
	i=0
	until [ -s $T/pub.ready ]; do
		[ $i -lt 300 ] || fail "the publisher did not publish"
		sleep 0.1
		i=$((i + 1))
	done
	e2e-prefix read $S pfx 7 256 $T/rd.ready $T/rd.go >$T/rd.out \
		2>$T/rd.err &
	RD=$!
	ALL="$ALL $RD"
	i=0
	until [ -e $T/rd.ready ]; do
		[ $i -lt 300 ] || fail "the prefix reader did not start decoding"
		kill -0 $RD 2>/dev/null || fail "the prefix reader failed"
		sleep 0.1
		i=$((i + 1))
	done
}

# 1: a crash, the kept memory used.
start_daemon kvpoold
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
kvpoolctl tenant add pfx >/dev/null || fail "tenant add pfx"
e1=$(epoch)
start_clients 1
start_prefix
kill_daemon
sleep 0.3
start_daemon kvpoold
grep -q "kept memory used" $T/daemon.log || fail "kvpoold did not use the kept memory"
grep "prefix cache: .* entries kept" $T/daemon.log
grep -q "prefix cache: 4 entries kept from the last life" $T/daemon.log ||
	fail "the prefix index was not kept"
kvpoolctl restart | tee $T/ri.out
grep -q ", 4 prefix" $T/ri.out || fail "kvpoolctl restart: no prefix entries"
e2=$(epoch)
echo "epoch $e1 -> $e2"
[ "$e1" = "$e2" ] || fail "the data epoch changed though the memory was kept"
touch $T/k.ready.go
for p in $pids; do
	wait $p || fail "a tenant failed after the restart"
done
wait $K || fail "the swapped client failed after the restart"
cat $T/k1.out
for n in 1 2 3 4; do
	cat $T/t$n.out
	grep -q "restarts 0, recomputed 0," $T/t$n.out ||
		fail "tenant $n recomputed after a restart that kept its memory"
done
touch $T/rd.go
wait $RD || fail "the prefix reader failed after the restart"
cat $T/rd.out
grep -q "outputs equal to the private copy" $T/rd.out ||
	fail "the prefix reader's outputs"
kill -9 $PUB
wait $PUB 2>/dev/null
e2e-prefix hit $S pfx 7 256 >$T/hit1.out 2>&1 || fail "hit after the restart"
grep -q "matched 256 tokens" $T/hit1.out ||
	fail "the prefix cache lost its entries: $(cat $T/hit1.out)"
kvpoolctl prefix flush pfx >/dev/null || fail "flush"
e2e-util wait-used $S 0 5000 || fail "blocks leaked"

# 2: the same crash, restarted onto a build with another metadata version.
start_clients 2
e2e-prefix put $S pfx 7 256 >/dev/null || fail "publish before the upgrade"
kill_daemon
sleep 0.3
start_daemon kvpoold-metav2
grep -q "metadata version 1, this build reads 2" $T/daemon.log ||
	fail "the upgraded daemon did not refuse the region"
e3=$(epoch)
echo "upgrade: epoch $e2 -> $e3"
[ "$e3" != "$e2" ] || fail "the epoch did not change though the region was refused"
touch $T/k.ready.go
for p in $pids; do
	wait $p || fail "a tenant failed after the upgrade"
done
# the swapped client is told its contents are gone (-ESTALE, then its
# sequences are dropped): it must not find them kept
wait $K && fail "the swapped client found kept sequences after a refused region"
grep -q "block contents lost" $T/k2.out &&
	grep -q "FAIL: sequence 0 .*after the restart" $T/k2.out ||
	fail "the swapped client did not see its sequences go"
for n in 1 2 3 4; do
	cat $T/t$n.out
	grep -q "restarts [1-9]" $T/t$n.out ||
		fail "tenant $n did not recompute after a refused region"
done
e2e-prefix hit $S pfx 7 256 >$T/hit2.out 2>&1 || fail "hit after the upgrade"
grep -q "matched 0 tokens" $T/hit2.out ||
	fail "a refused region kept the prefix cache: $(cat $T/hit2.out)"
e2e-util wait-used $S 0 5000 || fail "blocks leaked after the upgrade"

# 3: deposits are the pools' now (the new daemon's own), per pool.
for p in gpu0 dram nvme; do
	echo "$p: deposits $(cat $SYS/$p/deposits)"
done
kill $DPID
wait $DPID 2>/dev/null
DPID=
echo "PASS: kept memory across kvpoold restarts"
