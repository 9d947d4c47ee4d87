#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Run test programs one by one, each under a timeout.  Exit status of a test:
# 0 pass, 77 skip, anything else fail.  Prints one line per test and a
# closing "N passed, N failed, N skipped" line; exits 1 if any test failed.
# KVPOOL_TEST_TIMEOUT (seconds, default 600) bounds each test.
# The skipped tests are listed again at the end with their reasons (the
# last line of each one's log).  KVPOOL_ALLOW_SKIP, when set, names the
# tests (file names, e.g. "test-kvk-gpu daemon-gpu.sh") that may skip: any
# other test that skips then counts as failed (.ci/run sets it).

timeout_s=${KVPOOL_TEST_TIMEOUT:-600}
pass=0 fail=0 skip=0 failed="" skipped=""
logdir=${KVPOOL_TEST_LOGS:-build/test-logs}
mkdir -p "$logdir"

for t in "$@"; do
	name=$(echo "$t" | sed 's|^build/||; s|/|_|g')
	log="$logdir/$name.log"
	start=$(date +%s)
	timeout -k 10 "$timeout_s" "$t" >"$log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - start ))
	case $rc in
	0)  pass=$((pass + 1)); echo "PASS $t (${secs}s)" ;;
	77) skip=$((skip + 1)); skipped="$skipped $t"
	    echo "SKIP $t: $(tail -n 1 "$log")" ;;
	*)  fail=$((fail + 1)); failed="$failed $t"
	    echo "FAIL $t (exit $rc, ${secs}s); last lines of $log:"
	    tail -n 30 "$log" | sed 's/^/    /' ;;
	esac
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
