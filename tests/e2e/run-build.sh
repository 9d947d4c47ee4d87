#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Run end-to-end tests against another build of kvpoold ($KVPOOLD, set by
# the wrapper generated in tests/e2e/e2e.mk: the sanitizer build, the -O0
# build).  Each named test runs as in make check.  A sanitizer report makes
# the daemon abort, so its test fails; an "ERROR: AddressSanitizer" or
# "runtime error:" line in the output fails it too.  Prints the deepest
# connection stack the daemon logged, when the test stops it cleanly.
# Exit 0 pass, 1 fail, 77 when none failed but some skipped (the last line
# names them with their reasons).
set -u
fail=0
skipped=""
for t in "$@"; do
	out=$(timeout -k 10 300 "tests/e2e/$t.sh" 2>&1)
	rc=$?
	stack=$(echo "$out" | grep -o 'deepest connection stack: .*' | tail -n 1)
	if [ $rc = 0 ] && ! echo "$out" | grep -q -E 'ERROR: AddressSanitizer|runtime error:'; then
		echo "PASS $t ($KVPOOLD)${stack:+; $stack}"
	elif [ $rc = 77 ]; then
		echo "SKIP $t: $(echo "$out" | tail -n 1)"
		skipped="$skipped${skipped:+; }$t: $(echo "$out" | tail -n 1)"
	else
		echo "FAIL $t ($KVPOOLD, exit $rc); last lines:"
		echo "$out" | tail -n 30 | sed 's/^/    /'
		fail=1
	fi
done
[ $fail = 0 ] && [ -n "$skipped" ] && { echo "skipped: $skipped"; exit 77; }
exit $fail
