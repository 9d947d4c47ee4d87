# SPDX-License-Identifier: MIT
#
# A Redis Cluster of three masters and three replicas on loopback ports,
# in the test's temporary directory, for the cluster tier's tests and its
# benchmark; and kvpoold nodes that use it.  Sourced after lib.sh (TMP,
# PIDS, fail).  redis-server and redis-cli (packages redis-server and
# redis-tools, `make deps`) must be there: a missing program fails.
#   redis_ports          six free ports: RPORTS, and RSEEDS for kvpoold
#   redis_start          six servers on them: RPID_<port>
#   redis_create         the cluster (3 masters, 1 replica each), then waits
#                        for cluster_state:ok everywhere
#   redis_masters        the ports of the masters now
#   redis_wait_ok [MS]   cluster_state:ok on every live server
#   redis_wait_masters N [MS]  N masters (a failover done) and state ok
#   redis_keys PATTERN   every key of the cluster (each master's own)
#   node_start NAME [kvpoold options...]   a kvpoold on $TMP/NAME.sock using
#                        the cluster: NPID_<NAME>
#   CL: the cluster e2e program

CL="$E2E_BIN/e2e-cluster"
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
for p in "$REDIS_SERVER" "$REDIS_CLI"; do
	command -v "$p" >/dev/null 2>&1 || {
		echo "FAIL: $p is missing (make deps installs redis-server and redis-tools)"
		exit 1
	}
done
[ -x "$CL" ] || { echo "FAIL: missing $CL (run make)"; exit 1; }

port_free() {
	! ss -Htln "sport = :$1" 2>/dev/null | grep -q . &&
	! ss -Htln "sport = :$(( $1 + 10000 ))" 2>/dev/null | grep -q .
}

redis_ports() {
	base=$(( 20000 + ($$ % 1500) * 10 ))
	tries=0
	while :; do
		ok=1
		for i in 0 1 2 3 4 5; do
			port_free $((base + i)) || ok=0
		done
		[ $ok = 1 ] && break
		base=$((base + 10))
		tries=$((tries + 1))
		[ $tries -lt 100 ] || fail "no free ports for the cluster"
	done
	RPORTS=""
	RSEEDS=""
	for i in 0 1 2 3 4 5; do
		RPORTS="$RPORTS $((base + i))"
		RSEEDS="${RSEEDS:+$RSEEDS,}127.0.0.1:$((base + i))"
	done
}

redis_start() {
	[ -n "$RPORTS" ] || redis_ports
	for p in $RPORTS; do
		mkdir -p "$TMP/redis-$p"
		"$REDIS_SERVER" --port "$p" --bind 127.0.0.1 --protected-mode no \
			--cluster-enabled yes \
			--cluster-config-file "$TMP/redis-$p/nodes.conf" \
			--cluster-node-timeout 3000 --dir "$TMP/redis-$p" \
			--save "" --appendonly no --maxmemory 512mb \
			--maxmemory-policy allkeys-lru \
			--enable-debug-command local \
			--logfile "$TMP/redis-$p/log" >/dev/null 2>&1 &
		eval "RPID_$p=$!"
		PIDS="$PIDS $!"
	done
	for p in $RPORTS; do
		i=0
		until "$REDIS_CLI" -p "$p" ping >/dev/null 2>&1; do
			[ $i -lt 100 ] || fail "redis-server on $p did not start"
			sleep 0.1
			i=$((i + 1))
		done
	done
}

redis_wait_ok() {
	ms=${1:-30000}
	waited=0
	while :; do
		ok=1
		for p in $RPORTS; do
			eval "pid=\$RPID_$p"
			kill -0 "$pid" 2>/dev/null || continue
			"$REDIS_CLI" -p "$p" cluster info 2>/dev/null |
				grep -q '^cluster_state:ok' || ok=0
		done
		[ $ok = 1 ] && return 0
		[ $waited -lt "$ms" ] || fail "the cluster is not ok after $ms ms"
		sleep 0.2
		waited=$((waited + 200))
	done
}

redis_wait_masters() {
	ms=${2:-30000}
	waited=0
	until [ "$(redis_masters | wc -l)" = "$1" ]; do
		[ $waited -lt "$ms" ] || fail "not $1 masters after $ms ms"
		sleep 0.2
		waited=$((waited + 200))
	done
	redis_wait_ok "$ms"
}

redis_create() {
	args=""
	for p in $RPORTS; do
		args="$args 127.0.0.1:$p"
	done
	# shellcheck disable=SC2086
	"$REDIS_CLI" --cluster create $args --cluster-replicas 1 \
		--cluster-yes >"$TMP/cluster-create.log" 2>&1 ||
		fail "redis-cli --cluster create: $(tail -n 3 "$TMP/cluster-create.log")"
	redis_wait_ok 30000
}

redis_masters() {
	for p in $RPORTS; do
		eval "pid=\$RPID_$p"
		kill -0 "$pid" 2>/dev/null || continue
		"$REDIS_CLI" -p "$p" role 2>/dev/null | head -n 1 |
			grep -q '^master$' && echo "$p"
	done
}

redis_keys() {
	for p in $(redis_masters); do
		"$REDIS_CLI" -p "$p" --scan --pattern "$1"
	done | sort -u
}

# node_start NAME [options]: a kvpoold node of the cluster
node_start() {
	name=$1
	shift
	"$KVPOOLD" --foreground --config "" --socket "$TMP/$name.sock" \
		--ledger inproc --backend "${NODE_BACKEND:-cpu}" --block-bytes 65536 \
		--capacity 1024 --chunk-blocks 32 -v \
		--cluster-nodes "$RSEEDS" --cluster-name "$name" \
		--cluster-heartbeat-ms 500 "$@" >>"$TMP/$name.log" 2>&1 &
	eval "NPID_$name=$!"
	PIDS="$PIDS $!"
	i=0
	while [ $i -lt 100 ]; do
		"$UTIL" status "$TMP/$name.sock" >/dev/null 2>&1 && return 0
		eval "pid=\$NPID_$name"
		kill -0 "$pid" 2>/dev/null ||
			fail "kvpoold $name exited at start: $(tail -n 5 "$TMP/$name.log")"
		sleep 0.1
		i=$((i + 1))
	done
	fail "kvpoold $name did not answer within 10 s"
}

# stat SOCK FIELD: one counter of a node
stat() {
	"$CL" stats "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}
