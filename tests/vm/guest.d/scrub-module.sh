#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Freed blocks keep no bytes across tenants, with the real module (runs
# inside the VM, kvpool.ko freshly loaded, programs in /bin): grants and
# releases go straight to /dev/kvpool, kvpoold only sees the blocks the
# data plane and swap jobs name.  Tenant ta writes every byte of 8 blocks
# of gpu0 (then of dram and nvme, swapped down) and exits; another
# process of ta gets the same blocks and reads its own data; tenant tb
# gets them next and reads zeros (block sums, K/V, attention; the lower
# tiers' blocks there and swapped up).  Prefix-cache blocks ta published
# and flushed read as zeros for tb too.  Exit 0 pass, 1 fail, 77 skip.
# Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-scrub e2e-util kvpoolctl; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 77; }
done

T=/tmp/scrub-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
SYS=/sys/kernel/kvpool
DPID=

cleanup() {
	[ -n "$DPID" ] && kill -9 "$DPID" 2>/dev/null
	wait 2>/dev/null
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	tail -n 30 $T/daemon.log
	for f in $T/*.out; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 10 "$f"; }
	done
	exit 1
}

kvpoold --foreground --socket $S --ledger module --backend cpu \
	--pool gpu0 --block-bytes 65536 --capacity 1024 --chunk-blocks 32 \
	--shrink-delay-ms 600000 --tier dram:512 --tier nvme:$T/swap:32M -v \
	>>$T/daemon.log 2>&1 &
DPID=$!
i=0
until e2e-util status $S >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "kvpoold did not answer"
	kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
	sleep 0.1
	i=$((i + 1))
done
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
for t in ta tb; do
	for p in gpu0 dram nvme; do
		kvpoolctl --socket $S --pool $p tenant add $t --max max ||
			fail "tenant add $t ($p)"
	done
done

# every pool back to used 0, read in sysfs (the module's own count)
idle() {
	for p in gpu0 dram nvme; do
		i=0
		until [ "$(cat $SYS/$p/used)" = 0 ]; do
			[ $i -lt 100 ] || fail "$p: $(cat $SYS/$p/used) blocks leaked"
			sleep 0.05
			i=$((i + 1))
		done
	done
}

for tier in 0 1 2; do
	e2e-scrub write $S ta $tier 8 $T/w$tier >>$T/a.out 2>&1 ||
		fail "ta writes tier $tier"
	idle
	e2e-scrub read $S ta $tier 8 $T/w$tier same >>$T/a.out 2>&1 ||
		fail "another process of ta does not read its data in tier $tier"
	idle
	e2e-scrub read $S tb $tier 8 $T/w$tier zero >>$T/b.out 2>&1 ||
		fail "tb reads what ta left in tier $tier"
	idle
done
cat $T/a.out $T/b.out
echo "ok: a block of ta reads as zeros for tb in gpu0, dram and nvme"

e2e-scrub publish $S ta 4 $T/p >$T/p.out 2>&1 || fail "ta publishes"
[ "$(cat $SYS/gpu0/used)" = 4 ] || fail "the cache does not hold 4 blocks"
kvpoolctl --socket $S prefix flush ta >/dev/null || fail "flush"
idle
e2e-scrub read $S tb 0 4 $T/p zero >>$T/p.out 2>&1 ||
	fail "tb reads a block that ta's cache gave back"
cat $T/p.out
echo "ok: a block ta's prefix cache gave back reads as zeros for tb"

kill $DPID
wait $DPID 2>/dev/null
DPID=
for p in gpu0 dram nvme; do
	grep -q " $p: zeroed [1-9][0-9]* blocks" $T/daemon.log ||
		fail "the daemon zeroed no block in $p"
done
echo "PASS: freed blocks read as zeros for another tenant, module ledger"
