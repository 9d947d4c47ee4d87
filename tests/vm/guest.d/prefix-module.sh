#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The prefix cache with the real module (runs inside the VM, kvpool.ko
# freshly loaded, programs in /bin): kvpoold holds each tenant's cached
# blocks in leases of its own (/dev/kvpool files attached with
# KVPOOL_ATTACH_RECLAIM_FIRST / _NEVER) and moves blocks into them with
# KVPOOL_IOC_LEASE_MOVE.
#  1. two processes of one tenant share a prefix; the publisher is killed
#     with kill -9 while the other decodes: the other carries on with
#     outputs equal to a private copy's, the cache keeps the blocks (in
#     the tenant's blocks.current), nothing else stays leased;
#  2. copy-on-write of cached blocks; the daemon stops: the cache's
#     leases park (kept for the next daemon), and one started with
#     --no-keep gives them back;
#  3. a reclaim target is met from unreferenced cached blocks first, and
#     a short pool too (the owner's SHORT event);
#  4. 300 cached tenants (more than any fixed poll set; the daemon polls
#     one cold-lease file each): the first one's max goes to 0 and its
#     cache answers the reclaim target;
#  5. kvpoolctl tenant del (netlink) of a tenant in a shared namespace,
#     then tenant add: the new tenant has an empty cache of its own and
#     matches nothing of the namespace.
# Exit 0 pass, 1 fail, 77 skip.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-prefix e2e-util kvpoolctl; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/prefix-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
export KVPOOL_SOCKET=$S
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
	for f in $T/*.out $T/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

start_daemon() {	# capacity pool [block bytes [option]]
	kvpoold --foreground --socket $S --ledger module --backend cpu \
		--pool $2 --block-bytes ${3:-65536} --capacity $1 $4 \
		--chunk-blocks 32 --shrink-delay-ms 300 -vv >>$T/daemon.log 2>&1 &
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

stop_daemon() {
	kill $DPID
	wait $DPID 2>/dev/null
	DPID=
}

used() {
	cat /sys/kernel/kvpool/gpu0/used
}

# 1: two processes share; the publisher dies.
start_daemon 2048 gpu0
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
kvpoolctl tenant add app >/dev/null || fail "tenant add"
e2e-prefix publish $S app 7 300 $T/pub.ready >$T/pub.out 2>$T/pub.err &
pub=$!
ALL=$pub
i=0
until [ -s $T/pub.ready ]; do
	[ $i -lt 300 ] || fail "the publisher did not publish"
	sleep 0.1
	i=$((i + 1))
done
e2e-prefix read $S app 7 300 $T/rd.ready $T/go >$T/rd.out 2>$T/rd.err &
rd=$!
ALL="$pub $rd"
i=0
until [ -e $T/rd.ready ]; do
	[ $i -lt 300 ] || fail "the reader did not start decoding"
	kill -0 $rd 2>/dev/null || fail "the reader failed"
	sleep 0.1
	i=$((i + 1))
done
kill -9 $pub
wait $pub 2>/dev/null
echo "killed the publisher while the reader decodes"
touch $T/go
wait $rd || fail "the reader failed after the publisher died"
cat $T/rd.out
e2e-prefix stats $S app >$T/st.out
cat $T/st.out
grep -q "cached=4 referenced=0 hits=4 " $T/st.out || fail "the cache lost its blocks"
[ "$(cat /sys/kernel/kvpool/gpu0/tenants/app/blocks.current)" = 4 ] ||
	fail "the cache's blocks are not in app's blocks.current"
[ "$(used)" = 4 ] || fail "used $(used), want the cache's 4: a leak"
kvpoolctl status | grep -q "cache" || fail "status does not show the cache leases"
kvpoolctl prefix flush app || fail "flush"
[ "$(used)" = 0 ] || fail "flushed blocks not returned (used $(used))"

# 2: copy-on-write.
e2e-prefix cow $S app >$T/cow.out 2>&1 || fail "copy-on-write"
cat $T/cow.out
stop_daemon
# The cache's two leases are kept: parked with their blocks for the next
# daemon; one that keeps nothing gives them back.
[ "$(cat /sys/kernel/kvpool/gpu0/parked)" = 2 ] ||
	fail "the cache's leases did not park (parked $(cat /sys/kernel/kvpool/gpu0/parked))"
[ "$(used)" -gt 0 ] || fail "the parked cache holds no block"
start_daemon 2048 gpu0 65536 --no-keep
[ "$(used)" = 0 ] && [ "$(cat /sys/kernel/kvpool/gpu0/parked)" = 0 ] ||
	fail "a daemon that keeps nothing did not give back the parked cache (used $(used))"
stop_daemon
[ "$(used)" = 0 ] || fail "the daemon's cache leases outlived it (used $(used))"

# 3: reclaim and SHORT, in a 64-block pool of its own.
start_daemon 64 small
kvpoolctl --pool small tenant add greedy >/dev/null || fail "tenant add greedy"
kvpoolctl --pool small tenant add prot --min 24 >/dev/null || fail "tenant add prot"
E2E_POOL=small e2e-prefix reclaim $S greedy prot >$T/rc.out 2>&1 || fail "reclaim"
cat $T/rc.out
E2E_POOL=small e2e-prefix stats $S greedy
stop_daemon

# 4: many cached tenants, 4 KiB blocks.
start_daemon 1024 many 4096
E2E_POOL=many e2e-prefix many $S m 300 >$T/many.out 2>&1 || fail "many cached tenants"
cat $T/many.out
stop_daemon
echo "many: parked $(cat /sys/kernel/kvpool/many/parked) leases"
start_daemon 1024 many 4096 --no-keep
stop_daemon
[ "$(cat /sys/kernel/kvpool/many/used 2>/dev/null || echo 0)" = 0 ] ||
	fail "the cache leases of 300 tenants outlived the daemon"

# 5: deleted and created again through netlink.
start_daemon 2048 gpu0
for t in pub del1; do
	kvpoolctl --pool gpu0 tenant add $t >/dev/null || fail "tenant add $t"
	kvpoolctl --pool gpu0 prefix share $t common >/dev/null ||
		fail "share $t"
done
export E2E_POOL=gpu0
e2e-prefix put $S pub 9 256 >/dev/null || fail "pub publishes"
e2e-prefix put $S del1 10 128 >/dev/null || fail "del1 publishes"
[ "$(e2e-prefix hit $S del1 9 256)" = "matched 256 tokens" ] ||
	fail "del1 does not share"
kvpoolctl --pool gpu0 tenant del del1 || fail "tenant del del1"
kvpoolctl --pool gpu0 tenant add del1 >/dev/null || fail "tenant add del1 again"
out=$(e2e-prefix stats $S del1)
echo "$out"
case $out in
*" ns= cached=0 "*) ;;
*) fail "re-created del1 has the old cache's record: $out" ;;
esac
out=$(e2e-prefix hit $S del1 9 256)
[ "$out" = "matched 0 tokens" ] || fail "re-created del1 rejoined: $out"
[ "$(used)" = 4 ] || fail "used $(used), want pub's 4 cached blocks"
stop_daemon
echo "PASS: the prefix cache with the module"
