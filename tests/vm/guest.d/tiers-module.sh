#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tiers with the real module (runs inside the VM, kvpool.ko freshly loaded,
# programs in /bin via VM_EXTRA_PROGS): kvpoold owns three pools in
# /dev/kvpool (gpu0 on top, dram, nvme in a file under /tmp), one owner
# file each; clients hold a /dev/kvpool file per pool.
#  1. swap round trip of every dtype through dram and nvme (bytes, K/V);
#  2. per-tier quotas (netlink tenants): -EDQUOT in dram, the swap policy
#     falls back to nvme; peak in sysfs never above max;
#  3. bad swaps: clear errors, the daemon keeps serving;
#  4. kill -9 of a client mid-swap: every pool back to used 0 in sysfs,
#     a tenant next to it finishes, another swapping client carries on;
#  5. kill -9 of kvpoold mid-swap and a restart: it re-attaches to all
#     three orphaned pools, a swapped sequence reports DROPPED and its
#     lower-tier blocks are given back, swapping carries on; nothing leaked.
# Exit 0 pass, 1 fail, 77 skip.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-tiers e2e-tenant e2e-util kvpoolctl; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/tiers-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
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
	tail -n 30 $T/daemon.log
	for f in $T/*.out; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 10 "$f"; }
	done
	exit 1
}

start_daemon() {
	kvpoold --foreground --socket $S --ledger module --backend cpu \
		--pool gpu0 --block-bytes 65536 --capacity 1024 \
		--chunk-blocks 32 --shrink-delay-ms 300 --no-keep --tier dram:512 \
		--tier nvme:$T/swap:32M -v >>$T/daemon.log 2>&1 &
	DPID=$!
	i=0
	# the daemon itself must answer (kvpoolctl status reads the module)
	until e2e-util status $S >/dev/null 2>&1; do
		[ $i -lt 100 ] || fail "kvpoold did not answer"
		kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
		sleep 0.1
		i=$((i + 1))
	done
}

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

start_daemon
for p in gpu0 dram nvme; do
	[ -d $SYS/$p ] || fail "no pool $p in sysfs"
done
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"

# 1
e2e-tiers roundtrip $S >$T/rt.out 2>&1 || fail "round trip"
echo "$(grep -c identical $T/rt.out) round trips byte-identical"
idle
echo "ok: round trip of 4 dtypes through dram and nvme, module ledger"

# 2
kvpoolctl --socket $S tenant add q --max max || fail "tenant add (gpu0)"
kvpoolctl --socket $S --pool dram tenant add q --max 8 || fail "tenant add (dram)"
kvpoolctl --socket $S --pool nvme tenant add q --max max || fail "tenant add (nvme)"
e2e-tiers quota $S q 1 8 next >$T/q.out 2>&1 || fail "quota"
peak=$(cat $SYS/dram/tenants/q/blocks.peak)
[ "$peak" -le 8 ] || fail "dram peak $peak above max 8"
idle
echo "ok: dram quota held (peak $peak of 8), fell back to nvme"

# 3
e2e-tiers bad $S >$T/bad.out 2>&1 || fail "bad swaps"
idle
echo "ok: bad swaps answered, daemon serving"

# 4
e2e-tiers churn $S $T/a.ready >$T/a.out 2>&1 &
A=$!
e2e-tiers churn $S $T/b.ready >$T/b.out 2>&1 &
B=$!
e2e-tenant --socket $S --seed 1 --dtype bf16 --layers 2 --kv-heads 2 \
	--head-dim 64 --q-heads 4 --seqs 3 --tokens 128 --step 16 \
	--delay-ms 20 >$T/t.out 2>&1 &
TT=$!
ALL="$A $B $TT"
i=0
until [ -e $T/a.ready ] && [ -e $T/b.ready ]; do
	[ $i -lt 200 ] || fail "churn clients did not start"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.3
kill -9 $A
wait $A 2>/dev/null
wait $TT || fail "the tenant next to the killed client failed"
kill -0 $B 2>/dev/null || fail "the other swapping client died"
kill -9 $B
wait $B 2>/dev/null
idle
echo "ok: kill -9 of a client mid-swap, nothing leaked in any pool"

# 5
e2e-tiers churn $S $T/c.ready >$T/c.out 2>&1 &
C=$!
e2e-tiers restart $S $T/r.ready >$T/r.out 2>&1 &
R=$!
ALL="$C $R"
i=0
until [ -e $T/c.ready ] && [ -e $T/r.ready ]; do
	[ $i -lt 200 ] || fail "clients did not start"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.3
kill -9 $DPID
wait $DPID 2>/dev/null
for p in gpu0 dram nvme; do
	echo "after kill -9 of kvpoold: $p used $(cat $SYS/$p/used)"
done
sleep 0.3
start_daemon
for p in gpu0 dram nvme; do
	grep -q "re-attached to pool $p" $T/daemon.log || fail "did not re-attach to $p"
done
wait $R || fail "restart client"
grep "after the restart" $T/r.out
i=0
until [ -e $T/c.ready.2 ]; do
	[ $i -lt 200 ] || fail "swapping client did not carry on"
	sleep 0.1
	i=$((i + 1))
done
kill -9 $C
wait $C 2>/dev/null
idle
kill $DPID
wait $DPID 2>/dev/null
DPID=
echo "PASS: tiers with the module"
