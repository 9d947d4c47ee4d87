#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run test programs, each under a timeout.  Exit status of a test:
# 0 pass, 77 skip, anything else fail.  Prints one line per test as it
# ends and a closing "N passed, N failed, N skipped" line; exits 1 if any
# test failed.
#   -j N     run up to N tests at a time (default 1)
#   -s TEST  run TEST alone, once the others are done (a test that
#            measures, or needs the machine to itself); may be repeated
# KVPOOL_TEST_TIMEOUT (seconds, default 600) bounds each test.  Each
# test's output goes to $KVPOOL_TEST_LOGS/<name>.log (default
# build/test-logs); $KVPOOL_TEST_LOGS/times gets one line per test,
# "WALL_MS CPU_MS RESULT TEST" (CPU: user + sys of the test and of what it
# waited for), which tests/timing/table.sh reads.
# The skipped tests are listed again at the end with their reasons (the
# last line of each one's log).  KVPOOL_ALLOW_SKIP, when set, names the
# tests (file names, e.g. "test-kvk-gpu daemon-gpu.sh") that may skip: any
# other test that skips then counts as failed (.ci/run sets it).

timeout_s=${KVPOOL_TEST_TIMEOUT:-600}
pass=0 fail=0 skip=0 failed="" skipped=""
logdir=${KVPOOL_TEST_LOGS:-build/test-logs}
mkdir -p "$logdir"

jobs=1 serial=" "
while getopts j:s: o; do
	case $o in
	j) jobs=$OPTARG ;;
	s) serial="$serial$OPTARG " ;;
	*) echo "usage: $0 [-j N] [-s TEST]... TEST..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
: >"$logdir/times"

log_of() {
	echo "$logdir/$(echo "$1" | sed 's|^build/||; s|/|_|g').log"
}

# In the background: the test, then "EXIT START_US END_US CPU_TICKS" in
# its log's .result file.
run_one() {
	local t=$1 log s e stat
	log=$(log_of "$t")
	s=$EPOCHREALTIME
	timeout -k 10 "$timeout_s" "$t" >"$log" 2>&1 </dev/null
	rc=$?
	e=$EPOCHREALTIME
	read -r stat </proc/$BASHPID/stat
	# shellcheck disable=SC2086
	set -- ${stat##*) }
	echo "$rc ${s//[.,]/} ${e//[.,]/} $(( ${14} + ${15} ))" >"$log.result"
}

# Wait for one test to end and report it.
declare -A test_of
hz=$(getconf CLK_TCK)
running=0
reap() {
	local p t log rc s e ticks secs
	wait -n -p p
	t=${test_of[$p]}
	unset "test_of[$p]"
	running=$((running - 1))
	log=$(log_of "$t")
	read -r rc s e ticks <"$log.result"
	rm -f "$log.result"
	secs=$(( (e - s) / 1000000 ))
	echo "$(( (e - s) / 1000 )) $(( ticks * 1000 / hz )) $rc $t" \
		>>"$logdir/times"
	case $rc in
	0)  pass=$((pass + 1)); echo "PASS $t (${secs}s)" ;;
	77) skip=$((skip + 1)); skipped="$skipped $t"
	    echo "SKIP $t: $(tail -n 1 "$log")" ;;
	*)  fail=$((fail + 1)); failed="$failed $t"
	    echo "FAIL $t (exit $rc, ${secs}s); last lines of $log:"
	    tail -n 30 "$log" | sed 's/^/    /' ;;
	esac
}

start() {
	run_one "$1" &
	test_of[$!]=$1
	running=$((running + 1))
}

for t in "$@"; do
	case $serial in *" $t "*) continue ;; esac
	while [ $running -ge "$jobs" ]; do reap; done
	start "$t"
done
while [ $running -gt 0 ]; do reap; done
for t in "$@"; do
	case $serial in *" $t "*) start "$t"; reap ;; esac
done

# The skips again, with their reasons; those KVPOOL_ALLOW_SKIP does not
# allow are failures.
if [ -n "$skipped" ]; then
	echo "skipped:"
	for t in $skipped; do
		name=$(echo "$t" | sed 's|^build/||; s|/|_|g')
		why=$(tail -n 1 "$logdir/$name.log")
		if [ -n "${KVPOOL_ALLOW_SKIP+set}" ]; then
			# shellcheck disable=SC2086
			case " $(echo $KVPOOL_ALLOW_SKIP) " in
			*" $(basename "$t") "*) ;;
			*) fail=$((fail + 1)); failed="$failed $t"
			   why="$why [not allowed to skip: KVPOOL_ALLOW_SKIP]" ;;
			esac
		fi
		echo "    $t: $why"
	done
fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
exit 0
