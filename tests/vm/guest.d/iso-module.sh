#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tenant isolation with the real module (runs inside the VM, kvpool.ko
# freshly loaded, programs in /bin): kvpoold owns gpu0 and a dram tier.
#  1. swap jobs and the prefix cache: a block that swap jobs have pinned
#     (LEASE_CHECK with KVPOOL_LEASE_CHECK_PIN) is not published
#     (LEASE_MOVE -EBUSY), and neither tenant sees the other's bytes;
#  2. a client says HELLO as tenant ta, then attaches its file to tb
#     (TENANT_ATTACH with held 0): MATCH, PUBLISH and EVICT act for tb,
#     never ta;
#  3. descriptors that are not /dev/kvpool at HELLO and TIER_ATTACH (a
#     pipe, /dev/null, a file, a memfd, and with fuse.ko and cuse.ko in
#     /bin a CUSE device that answers KVPOOL_IOC_STATUS with the victim's
#     lease) are refused with -EBADF.
# Exit 0 pass, 1 fail, 77 skip.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-iso e2e-util kvpoolctl; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/iso-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
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
		[ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }
	done
	exit 1
}

# --no-keep: nothing parks at the stop (the prefix cache's leases would),
# so that the end can check that nothing stays leased
kvpoold --foreground --socket $S --ledger module --backend cpu \
	--pool gpu0 --block-bytes 65536 --capacity 2048 --chunk-blocks 32 \
	--shrink-delay-ms 300 --tier dram:1024 --no-keep -v >>$T/daemon.log 2>&1 &
DPID=$!
i=0
until e2e-util status $S >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "kvpoold did not answer"
	kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
	sleep 0.1
	i=$((i + 1))
done
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
for t in ta tb victim attacker; do
	kvpoolctl --socket $S tenant add $t >/dev/null || fail "tenant add $t"
	kvpoolctl --socket $S --pool dram tenant add $t >/dev/null ||
		fail "tenant add $t (dram)"
done

timeout 200 e2e-iso swap-publish $S ta tb >$T/swap.out 2>&1 ||
	fail "swap-publish"
cat $T/swap.out
timeout 100 e2e-iso retenant $S ta tb >$T/retenant.out 2>&1 || fail "retenant"
cat $T/retenant.out

# The fake device needs CUSE: fuse.ko and cuse.ko of this kernel.
if [ -f /bin/fuse.ko ] && [ -f /bin/cuse.ko ]; then
	insmod /bin/fuse.ko 2>/dev/null
	insmod /bin/cuse.ko 2>/dev/null
fi
timeout 100 e2e-iso fakefd $S victim attacker >$T/fakefd.out 2>&1 ||
	fail "fakefd"
cat $T/fakefd.out
grep -q "CUSE device" $T/fakefd.out ||
	echo "# fuse.ko/cuse.ko missing: the CUSE case did not run"
kill -0 $DPID 2>/dev/null || fail "kvpoold died"
kill $DPID
wait $DPID 2>/dev/null
DPID=
rmmod cuse 2>/dev/null
rmmod fuse 2>/dev/null
for p in gpu0 dram; do
	[ "$(cat /sys/kernel/kvpool/$p/used)" = 0 ] ||
		fail "$p: blocks left leased after the daemon stopped"
done
echo "PASS: tenant isolation with the module"
