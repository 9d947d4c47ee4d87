#!/bin/sh
# SPDX-License-Identifier: MIT
# The cluster tier against a real Redis Cluster (3 masters, 3 replicas on
# loopback ports) and two kvpoold nodes, A and B, with tenant processes on
# both:
#  - the cluster is down when the nodes start: they serve from their own
#    caches, then join when it comes up (heartbeats, a slot map);
#  - B's tenant hits what A's published (write-through), K/V bit-equal to
#    a private prefill and equal on both nodes; another tenant, and a
#    tenant whose key file others may read, keep private namespaces;
#  - the cluster view: heartbeats, the stream, kvpoolctl cluster and
#    kvpoolctl route; the kvpool_cluster_* metrics;
#  - a value overwritten with garbage, truncated or from another model is
#    a counted miss, never data;
#  - a full cluster (maxmemory reached, noeviction): OOM replies are
#    counted, publishing and matching go on;
#  - every master slowed with DEBUG SLEEP (2.5 s, below the cluster's node
#    timeout): MATCH returns by its deadline (1 s);
#  - kill -9 of a master while A publishes and B fetches (it gives its
#    cache back after every request): no wrong block, no client error,
#    the replica takes over, B's fetches hit again;
#  - write-back (node C, with a dram tier where the tenant may hold
#    nothing): stored only when evicted, at the end of the demotion
#    chain, then served to B;
#  - the cuda backend against the driver test double (when it is built):
#    its device blocks stored and fetched, bit-equal, on node D in the
#    emulation's forward order and on node E in the random order of seed
#    CUEMU_SEED (default 1).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cluster-lib.sh"
CTL=${KVPOOLCTL:-build/bin/kvpoolctl}
[ -x "$CTL" ] || fail "missing $CTL (run make)"

NTOK=512			# 8 blocks of 64 tokens
mkdir -p "$TMP/keys"
umask 077
head -c 32 /dev/urandom >"$TMP/keys/app"
head -c 32 /dev/urandom >"$TMP/keys/loose"
chmod 644 "$TMP/keys/loose"	# others may read it: refused
umask 022
OPTS="--tenant app --tenant other --tenant loose --cluster-keys $TMP/keys
      --cluster-deadline-ms 1000"
SA=$TMP/A.sock
SB=$TMP/B.sock

# hit_until SOCK TENANT SEED NTOK MIN OUT: the machine may be loaded (a
# fetch that misses the deadline is a miss, the blocks that did arrive
# are kept): retry a few times
hit_until() {
	i=0
	until "$CL" hit "$1" "$2" "$3" "$4" "$5" >"$6" 2>"$6.err"; do
		grep -q "^FAIL: matched" "$6.err" || fail "hit: $(cat "$6.err")"
		[ $i -lt 20 ] || fail "$1 $2 $3: $(cat "$6.err"); $("$CL" stats "$1")"
		sleep 0.5
		i=$((i + 1))
	done
}

# ---- the cluster down at start ------------------------------------------------
redis_ports
# shellcheck disable=SC2086
node_start A $OPTS
# shellcheck disable=SC2086
node_start B $OPTS
grep -q "loose: readable or writable by others" "$TMP/A.log" ||
	fail "a key file others may read was not refused"
[ "$(stat "$SA" state)" = 2 ] || fail "A's cluster tier is not down"
"$CL" publish "$SA" app 1 $NTOK >"$TMP/t1.out" || fail "publish while down"
"$CL" hit "$SA" app 1 $NTOK 8 >"$TMP/t1.out" || fail "local hit while down"
echo "cluster down: A serves from its own cache ($(cat "$TMP/t1.out"))"
redis_start
redis_create
echo "cluster up: masters $(redis_masters | tr '\n' ' ')"
"$CL" wait "$SA" state 3 20000 || fail "A did not join the cluster"
"$CL" wait "$SB" state 3 20000 || fail "B did not join the cluster"
"$CL" wait "$SA" heartbeats 1 10000 || fail "no heartbeat from A"
"$CL" wait "$SB" heartbeats 1 10000 || fail "no heartbeat from B"
echo "A and B joined: $("$CL" stats "$SA" | cut -d' ' -f1-6)"

# ---- B hits what A published ---------------------------------------------------
p0=$(stat "$SA" put_blocks)
"$CL" publish "$SA" app 2 $NTOK >"$TMP/t2.out" || fail "publish on A"
"$CL" wait "$SA" put_blocks $((p0 + 8)) 10000 || fail "A stored nothing"
hit_until "$SB" app 2 $NTOK 8 "$TMP/t3.out"
"$CL" hit "$SA" app 2 $NTOK 8 >"$TMP/t4.out" || fail "A's own hit"
kb=$(sed -n 's/.*kv=\([0-9a-f]*\).*/\1/p' "$TMP/t3.out")
ka=$(sed -n 's/.*kv=\([0-9a-f]*\).*/\1/p' "$TMP/t4.out")
[ -n "$ka" ] && [ "$ka" = "$kb" ] || fail "K/V differ between nodes ($ka, $kb)"
echo "B: $(cat "$TMP/t3.out") from the cluster; equal to a private prefill and to A's"
[ "$(stat "$SB" fetch_hits)" -ge 8 ] || fail "B counted no fetch hits"
# B holds them now: a second hit is local
f0=$(stat "$SB" fetches)
"$CL" hit "$SB" app 2 $NTOK 8 >/dev/null || fail "B's second hit"
[ "$(stat "$SB" fetches)" = "$f0" ] || fail "B fetched blocks it holds"

# other tenants: private per-node namespaces
"$CL" publish "$SA" other 3 $NTOK >/dev/null || fail "publish other on A"
"$CL" publish "$SA" loose 3 $NTOK >/dev/null || fail "publish loose on A"
sleep 1
"$CL" hit "$SB" other 3 $NTOK 0 >"$TMP/t5.out" || fail "hit other on B"
grep -q "^matched 0 " "$TMP/t5.out" || fail "tenant other shared across nodes"
"$CL" hit "$SB" loose 3 $NTOK 0 >"$TMP/t5.out" || fail "hit loose on B"
grep -q "^matched 0 " "$TMP/t5.out" || fail "a tenant with a refused key shared"
"$CL" hit "$SB" other 2 $NTOK 0 >"$TMP/t5.out" || fail "hit app's prompt as other"
grep -q "^matched 0 " "$TMP/t5.out" || fail "tenant other hit app's blocks"
echo "tenants without a key (or with a refused one) keep private namespaces"

# ---- the cluster view -----------------------------------------------------------
P0=$(redis_masters | head -n 1)
"$REDIS_CLI" -c -p "$P0" hget kvpool:node:A json | grep -q '"node":"A"' ||
	fail "no heartbeat record for A"
"$REDIS_CLI" -c -p "$P0" sismember kvpool:nodes B | grep -q 1 ||
	fail "B is not in kvpool:nodes"
n=$("$REDIS_CLI" -c -p "$P0" xlen kvpool:events:A)
[ "$n" -ge 2 ] || fail "A's stream has $n entries"
"$CTL" cluster --nodes "$RSEEDS" >"$TMP/ctl.out" || fail "kvpoolctl cluster"
cat "$TMP/ctl.out"
grep -q '^A ' "$TMP/ctl.out" && grep -q '^B ' "$TMP/ctl.out" ||
	fail "kvpoolctl cluster does not list A and B"
"$CTL" cluster --nodes "$RSEEDS" --json | grep -q '"node":"A"' ||
	fail "kvpoolctl cluster --json"
"$CTL" --socket "$SB" cluster >"$TMP/ctl.out" || fail "kvpoolctl cluster (local)"
grep -q "fetch hits" "$TMP/ctl.out" || fail "kvpoolctl cluster shows no counters"
# the counters in kvpoolctl metrics (the text of /metrics), promtool-clean
"$CTL" --socket "$SB" metrics >"$TMP/metrics.prom" || fail "kvpoolctl metrics"
grep -q '^kvpool_cluster_fetch_blocks_total{node="B",result="hit"} [1-9]' \
	"$TMP/metrics.prom" || fail "no kvpool_cluster_* fetch hits in the metrics"
grep -q '^kvpool_cluster_state{node="B",state="up"} 1' "$TMP/metrics.prom" ||
	fail "no kvpool_cluster_state in the metrics"
promtool check metrics <"$TMP/metrics.prom" >"$TMP/promtool.out" 2>&1 ||
	fail "promtool check metrics: $(cat "$TMP/promtool.out")"
[ -s "$TMP/promtool.out" ] && fail "promtool lint: $(cat "$TMP/promtool.out")"
# a prompt only A holds, one both hold, one nobody holds
"$CL" publish "$SA" app 4 $NTOK >/dev/null || fail "publish 4"
sleep 1.5
"$CL" tokens 4 $NTOK >"$TMP/tok4"
"$CL" tokens 2 $NTOK >"$TMP/tok2"
"$CL" tokens 99 $NTOK >"$TMP/tok99"
"$CTL" route --nodes "$RSEEDS" --model e2e-model@1 --key "$TMP/keys/app" \
	--tokens "$TMP/tok4" >"$TMP/route.out" || fail "kvpoolctl route"
cat "$TMP/route.out"
grep -q '^node A blocks 8 tokens 512 ' "$TMP/route.out" ||
	fail "route does not name A for a prompt only A holds"
"$CTL" route --nodes "$RSEEDS" --model e2e-model@1 --key "$TMP/keys/app" \
	--tokens "$TMP/tok2" --json >"$TMP/route.out" || fail "route --json"
grep -q '"blocks":8' "$TMP/route.out" || fail "route: prompt 2 not held"
"$CTL" route --nodes "$RSEEDS" --model e2e-model@1 --key "$TMP/keys/app" \
	--tokens "$TMP/tok99" >"$TMP/route.out" || fail "route (nowhere)"
grep -q 'blocks 0 ' "$TMP/route.out" || fail "route found an unknown prompt"
# the same question from Python, through libkvroute and ctypes
KVR_LIB=${KVR_LIB:-build/lib/libkvroute.so.1}
[ -f "$KVR_LIB" ] || fail "missing $KVR_LIB (run make)"
python3 - "$KVR_LIB" "$RSEEDS" "$TMP/keys/app" "$TMP/tok4" \
	>"$TMP/py.out" 2>&1 <<'PY' || fail "libkvroute from Python: $(cat "$TMP/py.out")"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
class Route(ctypes.Structure):
    _fields_ = [("node", ctypes.c_char * 64), ("blocks", ctypes.c_uint32),
                ("tokens", ctypes.c_uint32), ("free", ctypes.c_uint64),
                ("nodes", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("reserved", ctypes.c_uint64 * 4)]
r = ctypes.c_void_p()
assert lib.kvr_open(sys.argv[2].encode(), 0, ctypes.byref(r)) == 0
key = open(sys.argv[3], "rb").read()
prompt = [int(x) for x in open(sys.argv[4]).read().split()]
toks = (ctypes.c_uint32 * len(prompt))(*prompt)
rt = Route()
ret = lib.kvr_route(r, key, len(key), b"e2e-model@1", toks, len(prompt),
                    ctypes.byref(rt))
lib.kvr_close(r)
assert ret == 0, ret
print(rt.node.decode(), rt.blocks, rt.tokens)
assert rt.node == b"A" and rt.blocks == 8 and rt.tokens == 512
PY
echo "kvpoolctl cluster and route, and libkvroute from Python, answer from heartbeats and streams"

# ---- values that are not data: counted misses ---------------------------------------
"$REDIS_CLI" -c -p "$P0" keys 'x' >/dev/null
redis_keys 'kvpool:b1:*' >"$TMP/k0"
"$CL" publish "$SA" app 801 64 >/dev/null || fail "publish 801"
sleep 1
redis_keys 'kvpool:b1:*' >"$TMP/k1"
K801=$(comm -13 "$TMP/k0" "$TMP/k1")
[ "$(echo "$K801" | wc -w)" = 1 ] || fail "not one new key for 801: $K801"
"$CL" publish "$SA" app 802 64 >/dev/null || fail "publish 802"
sleep 1
redis_keys 'kvpool:b1:*' >"$TMP/k2"
K802=$(comm -13 "$TMP/k1" "$TMP/k2")
E2E_MODEL=other-model@1 "$CL" publish "$SA" app 803 64 >/dev/null ||
	fail "publish 803 (other model)"
sleep 1
redis_keys 'kvpool:b1:*' >"$TMP/k3"
K803M=$(comm -13 "$TMP/k2" "$TMP/k3")
"$CL" publish "$SA" app 803 64 >/dev/null || fail "publish 803"
sleep 1
redis_keys 'kvpool:b1:*' >"$TMP/k4"
K803=$(comm -13 "$TMP/k3" "$TMP/k4")
[ -n "$K802" ] && [ -n "$K803M" ] && [ -n "$K803" ] || fail "keys not found"
"$REDIS_CLI" -c -p "$P0" set "$K801" "garbage, not a block" >/dev/null
"$REDIS_CLI" -c -p "$P0" eval "local v = redis.call('GET', KEYS[1])
	redis.call('SET', KEYS[1], string.sub(v, 1, 1000)) return #v" 1 "$K802" \
	>/dev/null || fail "truncate"
"$REDIS_CLI" -c -p "$P0" --raw get "$K803M" | head -c -1 >"$TMP/v803m"
"$REDIS_CLI" -c -p "$P0" -x set "$K803" <"$TMP/v803m" >/dev/null
i0=$("$CL" stats "$SB")
"$CL" hit "$SB" app 801 64 0 >"$TMP/t6.out" || fail "hit 801"
"$CL" hit "$SB" app 802 64 0 >>"$TMP/t6.out" || fail "hit 802"
"$CL" hit "$SB" app 803 64 0 >>"$TMP/t6.out" || fail "hit 803"
[ "$(grep -c '^matched 0 ' "$TMP/t6.out")" = 3 ] ||
	fail "a bad value was used: $(cat "$TMP/t6.out")"
for f in invalid_format invalid_short invalid_model; do
	a=$(echo "$i0" | tr ' ' '\n' | sed -n "s/^$f=//p")
	b=$(stat "$SB" $f)
	[ "$b" = $((a + 1)) ] || fail "$f: $a -> $b, want one more"
done
echo "garbage, truncated and other-model values: counted misses, K/V recomputed and equal"

# ---- slow masters: the deadline holds -----------------------------------------------------
"$CL" publish "$SA" app 5 $NTOK >/dev/null || fail "publish 5"
sleep 1
t0=$(stat "$SB" fetch_timeouts)
# every master sleeps, and is seen asleep (a PING goes unanswered) before
# the MATCH starts: on a loaded machine the sleeper may start late
SLEEPERS=
MASTERS=$(redis_masters)
for p in $MASTERS; do
	"$REDIS_CLI" -p "$p" debug sleep 2.5 >/dev/null &
	SLEEPERS="$SLEEPERS $!"
done
for p in $MASTERS; do
	i=0
	while timeout 0.2 "$REDIS_CLI" -p "$p" ping >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 40 ] || fail "master $p does not sleep"
		sleep 0.05
	done
done
"$CL" hit "$SB" app 5 $NTOK 0 >"$TMP/t7.out" || fail "hit while the masters sleep"
ms=$(sed -n 's/.* ms=\([0-9]*\).*/\1/p' "$TMP/t7.out")
# shellcheck disable=SC2086
wait $SLEEPERS
echo "the masters in DEBUG SLEEP 2.5: $(cat "$TMP/t7.out")"
[ "${ms:-9999}" -lt 1800 ] || fail "MATCH waited for the slow masters (${ms} ms)"
[ "$(stat "$SB" fetch_timeouts)" -gt "$t0" ] || fail "no fetch timed out"
hit_until "$SB" app 5 $NTOK 8 "$TMP/t7.out"

# ---- a full cluster: OOM replies -------------------------------------------------------------
for p in $(redis_masters); do
	"$REDIS_CLI" -p "$p" config set maxmemory-policy noeviction >/dev/null
	"$REDIS_CLI" -p "$p" config set maxmemory 1 >/dev/null
done
o0=$(stat "$SA" put_oom)
"$CL" publish "$SA" app 9 $NTOK >/dev/null || fail "publish into a full cluster"
"$CL" wait "$SA" put_oom $((o0 + 1)) 10000 || fail "no OOM counted"
"$CL" hit "$SB" app 9 $NTOK 0 >"$TMP/t14.out" || fail "hit while the cluster is full"
for p in $(redis_masters); do
	"$REDIS_CLI" -p "$p" config set maxmemory 512mb >/dev/null
	"$REDIS_CLI" -p "$p" config set maxmemory-policy allkeys-lru >/dev/null
done
echo "a full cluster: stores refused with OOM ($(stat "$SA" put_oom) counted), B: $(cat "$TMP/t14.out")"

# ---- kill -9 of a master under load --------------------------------------------------------
rm -f "$TMP/stop"
"$CL" load "$SA" app 6 256 "$TMP/stop" >"$TMP/t8.out" 2>"$TMP/t8.err" &
LA=$!
"$CL" load "$SB" app 6 256 "$TMP/stop" evict >"$TMP/t9.out" 2>"$TMP/t9.err" &
LB=$!
PIDS="$PIDS $LA $LB"
sleep 2
VICTIM=$(redis_masters | tail -n 1)
eval "vpid=\$RPID_$VICTIM"
kill -9 "$vpid"
echo "killed the master on port $VICTIM under load"
redis_wait_masters 3 30000
echo "the replica took over: masters $(redis_masters | tr '\n' ' ')"
h0=$(stat "$SB" fetch_hits)
sleep 3
h1=$(stat "$SB" fetch_hits)
touch "$TMP/stop"
wait $LA || fail "a client of A failed during the failover: $(tail -n 3 "$TMP/t8.err")"
wait $LB || fail "a client of B failed during the failover: $(tail -n 3 "$TMP/t9.err")"
echo "A: $(cat "$TMP/t8.out"); B: $(cat "$TMP/t9.out")"
"$CL" publish "$SA" app 6 $NTOK >/dev/null || fail "publish after the failover"
"$CL" wait "$SA" state 3 10000 || fail "A's slot map is not whole again"
# A's store queue may still hold values of the load, retried after the
# failover: seed 6's arrive after them
hit_until "$SB" app 6 $NTOK 8 "$TMP/t10.out"
[ "$h1" -gt "$h0" ] || fail "B's load fetched nothing after the failover"
echo "after the failover: B's load fetched $((h1 - h0)) blocks in 3 s; $(cat "$TMP/t10.out")"

# ---- write-back --------------------------------------------------------------------------
# shellcheck disable=SC2086
node_start C $OPTS --cluster-policy back --prefix-demote --tier dram:64 \
	--tenant dram/app:0
"$CL" wait "$TMP/C.sock" state 3 20000 || fail "C did not join"
"$CL" publish "$TMP/C.sock" app 7 $NTOK >/dev/null || fail "publish on C"
sleep 1
[ "$(stat "$TMP/C.sock" put_blocks)" = 0 ] || fail "write-back stored on publish"
"$CL" evict "$TMP/C.sock" app 8 >"$TMP/t11.out" || fail "evict on C"
"$CL" wait "$TMP/C.sock" put_blocks 8 10000 || fail "evicted blocks not stored"
hit_until "$SB" app 7 $NTOK 8 "$TMP/t11.out"
echo "write-back: C's evicted blocks went down its tiers (dram, where app may hold none) to the cluster; B: $(cat "$TMP/t11.out")"

# ---- the cuda backend (the driver test double) ---------------------------------------
# its blocks are device memory: stored through the top pool's read op,
# fetched into it through its write op
FAKE=build/tests/cudafake/libcuda.so.1
if [ -f "$FAKE" ]; then
	seed=11
	for n in D:forward "E:random:${CUEMU_SEED:-1}"; do
		node=${n%%:*} order=${n#*:}
		# shellcheck disable=SC2086
		KVPOOL_LIBCUDA=$PWD/$FAKE KVPOOL_FAKE_CUDA_EXEC=1 \
		KVPOOL_FAKE_CUDA_LOG=$TMP/cuda-$node.log CUEMU_ORDER=$order \
		NODE_BACKEND=cuda node_start $node $OPTS
		grep -q "cuda backend" "$TMP/$node.log" ||
			fail "$node does not use the cuda backend"
		"$CL" wait "$TMP/$node.sock" state 3 20000 || fail "$node did not join"
		"$CL" publish "$TMP/$node.sock" app $seed $NTOK >/dev/null ||
			fail "publish on $node"
		hit_until "$SB" app $seed $NTOK 8 "$TMP/t12.out"
		hit_until "$TMP/$node.sock" app 2 $NTOK 8 "$TMP/t13.out"
		echo "cuda backend (test double, CUEMU_ORDER=$order): B hit $node's device blocks, $node fetched A's into device blocks"
		seed=$((seed + 1))
	done
else
	echo "no $FAKE (built with nvcc): the cuda backend's part is not run"
fi

"$CL" stats "$SB"
for n in A B C; do
	eval "pid=\$NPID_$n"
	kill -0 "$pid" 2>/dev/null || fail "kvpoold $n died"
done
echo "PASS: prefix blocks shared through a Redis Cluster, verified, through a failover"
