# SPDX-License-Identifier: MIT
#
# Common part of the end-to-end tests: a private kvpoold on a socket in a
# temporary directory (never the real one), helpers, bounded waits and a
# cleanup that kills only the processes the test started.
# Environment: KVPOOLD, E2E_BIN (programs), LEDGER (inproc|module, default
# inproc), BACKEND (default cpu).

KVPOOLD=${KVPOOLD:-build/bin/kvpoold}
E2E_BIN=${E2E_BIN:-build/tests/e2e}
LEDGER=${LEDGER:-inproc}
BACKEND=${BACKEND:-cpu}
UTIL="$E2E_BIN/e2e-util"
TENANT="$E2E_BIN/e2e-tenant"

# The test's daemons are not a service manager's: nothing of theirs goes
# to the fd store of whatever service runs the tests.
unset NOTIFY_SOCKET LISTEN_PID LISTEN_FDS LISTEN_FDNAMES

for p in "$KVPOOLD" "$UTIL" "$TENANT"; do
	[ -x "$p" ] || { echo "missing $p (run make)"; exit 1; }
done

TMP=$(mktemp -d /tmp/kvpool-e2e.XXXXXX) || exit 1
SOCK=$TMP/kvpool.sock
DLOG=$TMP/daemon.log
DPID=
PIDS=

cleanup() {
	for p in $PIDS $DPID; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*"
	for f in "$TMP"/t*.out "$TMP"/t*.err; do
		[ -s "$f" ] && { echo "--- $(basename "$f")"; tail -n 5 "$f"; }
	done
	echo "--- daemon log (last lines)"
	tail -n 40 "$DLOG" 2>/dev/null
	exit 1
}

# start_daemon [extra kvpoold options...] (no configuration file unless
# the options name one)
start_daemon() {
	"$KVPOOLD" --foreground --config "" --socket "$SOCK" --ledger "$LEDGER" \
		--backend "$BACKEND" --block-bytes 65536 --capacity 2048 \
		--chunk-blocks 32 --shrink-delay-ms 300 -v "$@" \
		>>"$DLOG" 2>&1 &
	DPID=$!
	i=0
	while [ $i -lt 100 ]; do
		"$UTIL" status "$SOCK" >/dev/null 2>&1 && return 0
		kill -0 "$DPID" 2>/dev/null || fail "kvpoold exited at start"
		sleep 0.1
		i=$((i + 1))
	done
	fail "kvpoold did not answer within 10 s"
}

# Stop the daemon with SIGTERM and check what it logs at exit: the deepest
# stack a connection thread used must leave half of the stack unused.
stop_daemon() {
	kill -TERM "$DPID" 2>/dev/null
	i=0
	while kill -0 "$DPID" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$DPID" 2>/dev/null && fail "kvpoold did not stop on SIGTERM"
	wait "$DPID" 2>/dev/null
	DPID=
	line=$(grep "deepest connection stack" "$DLOG" | tail -n 1)
	echo "${line#*notice: }"
	used=$(echo "$line" | sed -n 's/.*stack: \([0-9]*\) KiB of \([0-9]*\) KiB.*/\1/p')
	size=$(echo "$line" | sed -n 's/.*stack: \([0-9]*\) KiB of \([0-9]*\) KiB.*/\2/p')
	[ -n "$used" ] || fail "no stack figure at exit"
	[ $((used * 2)) -le "$size" ] || fail "connection stacks nearly full: $used of $size KiB"
}

# wait_leases N: until the daemon shows N leases (10 s at most)
wait_leases() {
	i=0
	until "$UTIL" status "$SOCK" | grep -q " leases=$1 "; do
		[ $i -lt 100 ] || fail "the tenants did not connect ($1 leases)"
		sleep 0.1
		i=$((i + 1))
	done
}

daemon_alive() {
	kill -0 "$DPID" 2>/dev/null || fail "kvpoold died"
	"$UTIL" status "$SOCK" >/dev/null || fail "kvpoold does not answer"
}

# The four tenants of the end-to-end runs: different KV layouts.
# tenant_run N [extra e2e-tenant options...] &   (always in the background:
# it execs, so $! is the tenant itself; output in $TMP/tN.out)
tenant_run() {
	n=$1
	shift
	case $n in
	1) lay="--dtype bf16 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 4" ;;
	2) lay="--dtype fp8 --layers 3 --kv-heads 1 --head-dim 128 --q-heads 8" ;;
	3) lay="--dtype int8 --layers 2 --kv-heads 4 --head-dim 32 --q-heads 4" ;;
	*) lay="--dtype int4 --layers 2 --kv-heads 2 --head-dim 64 --q-heads 8" ;;
	esac
	# shellcheck disable=SC2086
	exec "$TENANT" --socket "$SOCK" --seed "$n" $lay --seqs 3 --tokens 192 \
		--step 16 "$@" >"$TMP/t$n.out" 2>"$TMP/t$n.err"
}

# tenants_start [extra e2e-tenant options...]: the four tenants in the
# background, their pids in $pids
tenants_start() {
	pids=
	for n in 1 2 3 4; do
		tenant_run $n "$@" &
		pids="$pids $!"
	done
}

# wait_pids_ok PID... : every one must exit 0 (bounded by run-tests.sh's
# timeout; each tenant's own waits are bounded by libkvlease's timeout).
wait_pids_ok() {
	bad=0
	for p in "$@"; do
		wait "$p" || bad=1
	done
	return $bad
}

rss_kb() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

TIERS="$E2E_BIN/e2e-tiers"
SWAPFILE=$TMP/nvme.swap

# start_tiers_daemon [extra kvpoold options...]: the usual daemon with a
# dram tier of 512 blocks and an nvme tier of 32 MiB in $SWAPFILE.
start_tiers_daemon() {
	[ -x "$TIERS" ] || { echo "missing $TIERS (run make)"; exit 1; }
	start_daemon --tier dram:512 --tier "nvme:$SWAPFILE:32M" "$@"
}

# every tier back to used 0
tiers_idle() {
	for t in 0 1 2; do
		"$TIERS" wait-used "$SOCK" $t 0 5000 || fail "tier $t: blocks leaked"
	done
}
