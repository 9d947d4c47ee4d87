#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpoold --kernel-threads N sizes the cpu backend's kernel thread pool
# (the daemon has N - 1 more threads than with 1, and logs "cpu kernels: N
# threads"); without it the pool has one thread per CPU of the daemon's
# affinity mask (taskset -c 0: one); values beyond 1024 or not numbers
# are refused.
. "$(dirname "$0")/lib.sh"

threads() {	# threads of the running daemon
	sed -n 's/^Threads:[[:space:]]*//p' "/proc/$DPID/status"
}

logged() {	# the pool size the daemon logged last
	sed -n 's/.*cpu kernels: \([0-9]*\) threads.*/\1/p' "$DLOG" | tail -n 1
}

start_daemon --kernel-threads 1
[ "$(logged)" = 1 ] || fail "--kernel-threads 1: logged $(logged)"
t1=$(threads)
stop_daemon
start_daemon --kernel-threads 4
[ "$(logged)" = 4 ] || fail "--kernel-threads 4: logged $(logged)"
t4=$(threads)
stop_daemon
[ $((t4 - t1)) = 3 ] || fail "--kernel-threads 4 has $t4 threads, 1 has $t1"
echo "threads: $t1 with --kernel-threads 1, $t4 with 4"

if command -v taskset >/dev/null; then
	KVPOOLD_REAL=$KVPOOLD
	KVPOOLD="$TMP/pinned"
	printf '#!/bin/sh\nexec taskset -c 0 "%s" "$@"\n' "$KVPOOLD_REAL" >"$KVPOOLD"
	chmod +x "$KVPOOLD"
	start_daemon
	[ "$(logged)" = 1 ] || fail "taskset -c 0, no option: logged $(logged)"
	[ "$(threads)" = "$t1" ] || fail "taskset -c 0: $(threads) threads, not $t1"
	stop_daemon
	KVPOOLD=$KVPOOLD_REAL
	echo "taskset -c 0: one kernel thread"
else
	fail "no taskset (util-linux)"
fi

for bad in 1025 x -1; do
	"$KVPOOLD" --foreground --config "" --socket "$TMP/bad.sock" \
		--ledger inproc --backend cpu --kernel-threads "$bad" \
		>"$TMP/bad.log" 2>&1 && fail "--kernel-threads $bad accepted"
	grep -q "bad value" "$TMP/bad.log" ||
		fail "--kernel-threads $bad: $(cat "$TMP/bad.log")"
done
echo "PASS: --kernel-threads sizes the kernel thread pool"
