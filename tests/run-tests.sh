#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Run test programs one by one, each under a timeout.  Exit status of a test:
# 0 pass, 77 skip, anything else fail.  Prints one line per test and a
# closing "N passed, N failed, N skipped" line; exits 1 if any test failed.
# KVPOOL_TEST_TIMEOUT (seconds, default 600) bounds each test.

timeout_s=${KVPOOL_TEST_TIMEOUT:-600}
pass=0 fail=0 skip=0 failed=""
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
	77) skip=$((skip + 1)); echo "SKIP $t: $(tail -n 1 "$log")" ;;
	*)  fail=$((fail + 1)); failed="$failed $t"
	    echo "FAIL $t (exit $rc, ${secs}s); last lines of $log:"
	    tail -n 30 "$log" | sed 's/^/    /' ;;
	esac
done

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
exit 0
