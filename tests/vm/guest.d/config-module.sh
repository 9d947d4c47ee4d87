#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoold.conf with the real module (runs inside the VM, kvpool.ko freshly
# loaded; kvpoold and e2e-util in /bin via VM_EXTRA_PROGS):
#  1. the file's [pool] creates the pool in /dev/kvpool, its tenants are
#     created in the module's ledger (generic netlink), as sysfs shows;
#  2. SIGHUP while a lease is held: limits change (a max below current is
#     accepted, the lease keeps its blocks), a new tenant appears, an idle
#     one the file no longer names is deleted;
#  3. a file with an error changes nothing and names its line;
#  4. /metrics (metrics_listen, metrics_scope operator) serves the
#     module's pool and tenants and the lease;
#  5. tier = lines make lower pools in the module; [tenant NAME] is
#     unlimited there, [tenant POOL/NAME] sets that pool's limits (sysfs of
#     the lower pool), a reload changes them; /metrics has the tiers.
# Exit 0 pass, 1 fail, 77 skip.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold e2e-util wget; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done

T=/tmp/config-module
rm -rf $T
mkdir -p $T
S=$T/kvpool.sock
SYS=/sys/kernel/kvpool/gpu0
DPID=
HOLD=

cleanup() {
	for p in $HOLD $DPID; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	tail -n 40 $T/daemon.log
	exit 1
}

# sysval TENANT FILE
sysval() {
	cat $SYS/tenants/$1/blocks.$2 2>/dev/null
}

# want TENANT FILE VALUE
want() {
	v=$(sysval $1 $2)
	[ "$v" = "$3" ] || fail "tenant $1 blocks.$2 is '$v', want $3"
}

wait_log() {	# PATTERN COUNT
	i=0
	while [ "$(grep -c -e "$1" $T/daemon.log)" -lt "$2" ]; do
		[ $i -lt 100 ] || fail "log lacks $2 x '$1'"
		kill -0 $DPID 2>/dev/null || fail "kvpoold died"
		sleep 0.1
		i=$((i + 1))
	done
}

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

cat >$T/kvpoold.conf <<END
[daemon]
ledger = module
backend = cpu
socket = $S
metrics_listen = 127.0.0.1:0
metrics_scope = operator
log_level = info

[pool]
name = gpu0
block_bytes = 64K
capacity = 1024
chunk_blocks = 32
shrink_delay_ms = 300

[tenant chat]
max = 100
min = 10
[tenant batch]
max = 50
END

kvpoold --foreground --config $T/kvpoold.conf >$T/daemon.log 2>&1 &
DPID=$!
i=0
until e2e-util status $S >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "kvpoold did not answer"
	kill -0 $DPID 2>/dev/null || fail "kvpoold exited at start"
	sleep 0.1
	i=$((i + 1))
done
grep -q "module ledger" $T/daemon.log || fail "kvpoold is not using the module"
[ "$(cat $SYS/capacity)" = 1024 ] || fail "capacity from the file not used"
want chat max 100
want chat min 10
want batch max 50
echo "ok 1 - the file's pool and tenants are in the module"

e2e-util hold $S chat 40 $T/held &
HOLD=$!
i=0
while [ ! -s $T/held ]; do
	[ $i -lt 100 ] || fail "no lease for chat"
	sleep 0.1
	i=$((i + 1))
done
want chat current 40

cat >$T/kvpoold.conf <<END
[daemon]
ledger = module
backend = cpu
socket = $S
metrics_listen = 127.0.0.1:0
metrics_scope = operator
log_level = info

[pool]
name = gpu0
block_bytes = 64K
capacity = 1024
chunk_blocks = 32
shrink_delay_ms = 300

[tenant chat]
max = 30
min = 5
[tenant fresh]
max = 8
END
kill -HUP $DPID
wait_log "configuration reloaded" 1
want chat max 30
want chat min 5
want chat current 40
want fresh max 8
[ -d $SYS/tenants/batch ] && fail "idle tenant batch not deleted"
[ "$(cat $SYS/used)" = 40 ] || fail "the reload changed a lease"
echo "ok 2 - SIGHUP: limits changed under a held lease, tenants added and deleted"

printf '[pool]\nname = gpu0\n\n[tenant chat]\nmax = lots\n' >$T/kvpoold.conf
kill -HUP $DPID
wait_log "the running configuration stays in force" 1
grep -q "line 5: max = lots" $T/daemon.log || fail "no line number"
want chat max 30
want fresh max 8
echo "ok 3 - a bad file changes nothing"

ADDR=$(sed -n 's|.*metrics at http://\(.*\)/metrics$|\1|p' $T/daemon.log)
[ -n "$ADDR" ] || fail "no metrics address in the log"
wget -q -O $T/metrics.prom "http://$ADDR/metrics" || fail "GET /metrics"
for w in 'kvpool_pool_info{pool="gpu0",mode="module",backend="cpu",state="live"} 1' \
	'kvpool_pool_used_blocks{pool="gpu0"} 40' \
	'kvpool_tenant_current_blocks{pool="gpu0",tenant="chat"} 40' \
	'kvpool_tenant_max_blocks{pool="gpu0",tenant="chat"} 30' \
	'kvpool_tenant_max_blocks{pool="gpu0",tenant="fresh"} 8'; do
	grep -qxF "$w" $T/metrics.prom || { cat $T/metrics.prom; fail "/metrics lacks $w"; }
done
grep -q '^kvpool_client_blocks{pool="gpu0",tenant="chat",.*} 40$' $T/metrics.prom ||
	fail "/metrics lacks the lease"
echo "ok 4 - /metrics serves the module's pool and tenants"

kill $HOLD
wait $HOLD 2>/dev/null
HOLD=
kill $DPID
wait $DPID 2>/dev/null
DPID=

# 5. tiers from the file, tenants in the lower pool through netlink
tiers_conf() {	# DRAM_CHAT_MAX
	cat >$T/kvpoold.conf <<END
[daemon]
ledger = module
backend = cpu
socket = $S
metrics_listen = 127.0.0.1:0
log_level = info

[pool]
name = gpu0
block_bytes = 64K
capacity = 1024
chunk_blocks = 32
tier = dram:256
tier = nvme:$T/swap:4M

[tenant chat]
max = 100
[tenant dram/chat]
max = $1
min = 4
[tenant batch]
END
}
tiers_conf 64
: >$T/daemon.log
kvpoold --foreground --config $T/kvpoold.conf >$T/daemon.log 2>&1 &
DPID=$!
i=0
until e2e-util status $S >/dev/null 2>&1; do
	[ $i -lt 100 ] || fail "kvpoold with tiers did not answer"
	kill -0 $DPID 2>/dev/null || fail "kvpoold with tiers exited at start"
	sleep 0.1
	i=$((i + 1))
done
D=/sys/kernel/kvpool/dram/tenants
N=/sys/kernel/kvpool/nvme/tenants
[ "$(cat /sys/kernel/kvpool/dram/capacity)" = 256 ] || fail "no dram pool of 256 blocks"
[ "$(cat /sys/kernel/kvpool/nvme/capacity)" = 64 ] || fail "no nvme pool of 64 blocks"
want chat max 100
[ "$(cat $D/chat/blocks.max)" = 64 ] || fail "dram/chat max: $(cat $D/chat/blocks.max)"
[ "$(cat $D/chat/blocks.min)" = 4 ] || fail "dram/chat min: $(cat $D/chat/blocks.min)"
[ "$(cat $N/chat/blocks.max)" = max ] || fail "nvme/chat max: $(cat $N/chat/blocks.max)"
[ "$(cat $D/batch/blocks.max)" = max ] || fail "dram/batch max: $(cat $D/batch/blocks.max)"
tiers_conf 32
kill -HUP $DPID
wait_log "configuration reloaded" 1
[ "$(cat $D/chat/blocks.max)" = 32 ] || fail "reload: dram/chat max $(cat $D/chat/blocks.max)"
ADDR=$(sed -n 's|.*metrics at http://\(.*\)/metrics$|\1|p' $T/daemon.log)
wget -q -O $T/tiers.prom "http://$ADDR/metrics" || fail "GET /metrics (tiers)"
for w in 'kvpool_tier_info{pool="dram",tier="1",kind="dram"} 1' \
	'kvpool_tier_info{pool="nvme",tier="2",kind="nvme"} 1' \
	'kvpool_tier_capacity_blocks{pool="dram",tier="1"} 256' \
	'kvpool_tier_tenant_current_blocks{pool="dram",tenant="chat"} 0'; do
	grep -qxF "$w" $T/tiers.prom || { cat $T/tiers.prom; fail "/metrics lacks $w"; }
done
kill $DPID
wait $DPID 2>/dev/null
DPID=
echo "ok 5 - tiers from the file: lower pools and their tenants in the module, reload"
echo "PASS: kvpoold.conf with the module"
