#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoolctl and kvpool-bench against the real module (runs inside the VM
# of tests/vm, kvpool.ko freshly loaded; listed in VM_EXTRA_TESTS by
# tests/tools/tools-tests.mk).  kvpoold owns a pool through /dev/kvpool;
# kvpoolctl must read it over generic netlink (and sysfs), change tenants
# over netlink (checked in sysfs), refuse an unprivileged user, follow the
# event group, and kvpool-bench must run its workload on the module ledger.
# Exit 0 pass, 1 fail, 77 skip.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold kvpoolctl kvpool-bench; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done
T=/tmp/vm-kvpoolctl
rm -rf $T
mkdir -p $T
chmod 755 $T
S=$T/kvpool.sock
export KVPOOL_SOCKET=$S
SYS=/sys/kernel/kvpool/gpu0
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - kvpoolctl: $*"; }
bad() { n=$((n + 1)); echo "not ok $n - kvpoolctl: $*"; fail=1; }
check() {	# description command...
	d=$1; shift
	if "$@" >$T/out 2>$T/err; then ok "$d"; else bad "$d (exit $?: $(cat $T/err))"; fi
}

kvpoold --foreground --socket $S --ledger module --backend cpu --pool gpu0 \
	--block-bytes 65536 --capacity 256 --chunk-blocks 16 \
	--shrink-delay-ms 300 >$T/daemon.log 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null; kill $MPID 2>/dev/null; wait 2>/dev/null' EXIT
i=0
while [ $i -lt 100 ] && [ ! -d $SYS ]; do sleep 0.1; i=$((i + 1)); done
[ -d $SYS ] || { echo "kvpoold did not create gpu0"; cat $T/daemon.log; exit 1; }

check "status reads the module" kvpoolctl status
grep -q "^pool gpu0: module ledger" $T/out || bad "status: not the module ledger: $(head -1 $T/out)"
grep -q "capacity 256 blocks" $T/out && ok "status: capacity from netlink" ||
	bad "status: capacity: $(cat $T/out)"
check "tenant add over netlink" kvpoolctl tenant add vmt --max 40 --min 4 --uid 1000
[ "$(cat $SYS/tenants/vmt/blocks.max)" = 40 ] && ok "sysfs blocks.max = 40" ||
	bad "sysfs blocks.max: $(cat $SYS/tenants/vmt/blocks.max)"
[ "$(cat $SYS/tenants/vmt/blocks.min)" = 4 ] && ok "sysfs blocks.min = 4" ||
	bad "sysfs blocks.min: $(cat $SYS/tenants/vmt/blocks.min)"
check "tenant set --max max" kvpoolctl tenant set vmt --max max
[ "$(cat $SYS/tenants/vmt/blocks.max)" = max ] && ok "sysfs blocks.max = max" ||
	bad "sysfs blocks.max after set: $(cat $SYS/tenants/vmt/blocks.max)"
kvpoolctl tenant add vmt >$T/out 2>$T/err
[ $? = 1 ] && ok "duplicate add exits 1" || bad "duplicate add: $(cat $T/err)"
kvpoolctl tenant set nosuch --max 3 >$T/out 2>$T/err
[ $? = 5 ] && ok "unknown tenant exits 5" || bad "unknown tenant: $(cat $T/err)"
check "tenant list --json" kvpoolctl tenant list --json
grep -q '"name": "vmt"' $T/out && grep -q '"uid": 1000' $T/out &&
	ok "tenant list shows vmt, uid 1000" || bad "tenant list: $(cat $T/out)"
su kvt -c "/bin/kvpoolctl tenant add evil --max 1" >$T/out 2>$T/err
rc=$?
[ $rc = 4 ] && ok "unprivileged tenant add exits 4" || bad "unprivileged add: exit $rc: $(cat $T/err)"
[ -d $SYS/tenants/evil ] && bad "unprivileged user created a tenant"
check "metrics" kvpoolctl metrics
grep -q '^kvpool_pool_capacity_blocks{pool="gpu0"} 256$' $T/out &&
	ok "metrics: capacity" || bad "metrics: $(head -20 $T/out)"
check "top --once" kvpoolctl top --once

# events: a monitor while a short bench runs on the module ledger
kvpoolctl monitor --json --timeout 40 >$T/events 2>$T/mon.err &
MPID=$!
sleep 1
kvpool-bench --socket $S --duration 8 --drain 15 --quiet --out $T/bench \
	--tenant chat:chat:1:48:8:2 --tenant reas:reasoning:1:32:0:2 \
	--kill=reas --kill-at 0.6 --step-sleep-us 1000 >$T/bench.out 2>&1
rc=$?
[ $rc = 0 ] && ok "kvpool-bench on the module ledger" ||
	{ bad "kvpool-bench exit $rc"; tail -30 $T/bench.out; cat $T/bench/summary.json; }
grep -q '"mode": "module"' $T/bench/summary.json && ok "bench ran on the module" ||
	bad "bench mode: $(grep mode $T/bench/summary.json)"
kill $MPID 2>/dev/null
wait $MPID 2>/dev/null
MPID=
grep -q '"event": "grow"' $T/events && ok "monitor saw grow events" ||
	bad "monitor: no grow event: $(head -5 $T/events) $(cat $T/mon.err)"
grep -q '"event": "client-closed"' $T/events && ok "monitor saw client-closed" ||
	bad "monitor: no client-closed event"
grep -q '"gap"' $T/events && echo "# monitor reported a gap (lost events)"
check "tenant del" kvpoolctl tenant del vmt
[ -d $SYS/tenants/vmt ] && bad "tenant vmt still in sysfs"
echo "# $n checks"
exit $fail
