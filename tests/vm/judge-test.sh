#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tests the judge of the VM suite (vm-check.sh) without booting: synthetic
# console logs must pass or fail as they should.  Run from the repository
# root; exit 0 pass, 1 fail.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tests/vm"
echo "KVER=x KO=x TESTS='t1:1 t2:1' EXTRA_PROGS= EXTRA_TESTS=" >"$tmp/tests/vm/vm.conf"

good() {
	cat <<'LOG'
KVT-BEGIN uptime 2.50
KVT-KERNEL x
KVT-VERSION Linux version x (test) #1 SMP Debian 1-x (2026-01-01)
ok 1 - rmmod: refused while /dev/kvpool is open
KVT-RESULT rmmod-busy 0
KVT-RUN t1
ok 1 - a: first
ok 2 - a: second
not ok 3 - a: known # TODO another part
KVT-RESULT t1 0 2.6 2.7
KVT-RUN t2
ok 1 - b: first
KVT-RESULT t2 0 2.8 2.9
KVT-DMESG-BEGIN
[    2.6] kvpool: loading out-of-tree module taints kernel.
KVT-DMESG-END
KVT-END uptime 3.00
LOG
}

fails=0
judge() {	# want-exit description < log
	cat >"$tmp/log"
	B=$tmp VM_CHECK_LOG=$tmp/log tests/vm/vm-check.sh >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" = "$1" ]; then
		echo "ok - $2 (exit $rc)"
	else
		echo "not ok - $2 (exit $rc, want $1)"
		sed 's/^/#   /' "$tmp/out"
		fails=$((fails + 1))
	fi
}

good | judge 0 "a clean log passes"
good | sed 's/^ok 2 - a: second/not ok 2 - a: second/' | judge 1 "a failed check fails"
good | sed 's/^KVT-RESULT t2 0/KVT-RESULT t2 1/' | judge 1 "a failed test fails"
good | sed 's/^KVT-RESULT t2 0/KVT-RESULT t2 77/' | judge 1 "a test skipped in the guest fails"
good | grep -v '^KVT-RESULT t1 ' | judge 1 "a test without a result fails"
good | grep -v '^KVT-END' | judge 1 "a guest that did not finish fails"
good | sed 's/^KVT-KERNEL x/KVT-KERNEL y/' | judge 1 "a guest running another kernel fails"
good | grep -v '^KVT-KERNEL' | judge 1 "a guest that does not say its kernel fails"
for line in 'WARNING: CPU: 0 PID: 1 at kvpool_main.c:80 kvpool_pool_unlock' \
	    'BUG: kernel NULL pointer dereference, address: 0000000000000008' \
	    'Oops: 0000 [#1] PREEMPT SMP NOPTI' \
	    'general protection fault, probably for non-canonical address' \
	    'BUG: KASAN: use-after-free in kvpool_release' \
	    'WARNING: possible circular locking dependency detected' \
	    'INFO: task kvpool-test:42 blocked for more than 120 seconds.' \
	    'Call Trace:' \
	    'kvpool: pool p: broken invariant: sum of leases != used'; do
	good | sed "s/^KVT-DMESG-END/[    2.7] $line\nKVT-DMESG-END/" |
		judge 1 "kernel log line fails: ${line%%:*}"
done
good >"$tmp/log"
B=$tmp VM_CHECK_LOG=$tmp/log tests/vm/vm-check.sh | grep -q '4 checks passed, 0 failed' &&
	echo "ok - checks counted without the TODO" ||
	{ echo "not ok - checks counted without the TODO"; fails=$((fails + 1)); }
# One guest script (VM_GUEST, make vm-bench-restart): its output printed,
# its result required.
printf '#!/bin/sh\necho figures\n' >"$tmp/g.sh"
chmod +x "$tmp/g.sh"
guest() {
	cat <<'LOG'
KVT-BEGIN uptime 2.50
KVT-KERNEL x
KVT-VERSION Linux version x (test) #1 SMP Debian 1-x (2026-01-01)
KVT-RESULT rmmod-busy 0
KVT-RUN guest.d/g.sh
bench: 1.23x
KVT-RESULT guest.d/g.sh 0 2.6 9.9
KVT-DMESG-BEGIN
KVT-DMESG-END
KVT-END uptime 10.00
LOG
}
judge_guest() {	# want-exit description < log
	cat >"$tmp/log"
	B=$tmp VM_GUEST=$tmp/g.sh VM_KVER=x VM_CHECK_LOG=$tmp/log \
		tests/vm/vm-check.sh >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" = "$1" ] && { [ "$1" != 0 ] || grep -q '^bench: 1.23x$' "$tmp/out"; }; then
		echo "ok - $2 (exit $rc)"
	else
		echo "not ok - $2 (exit $rc, want $1)"
		sed 's/^/#   /' "$tmp/out"
		fails=$((fails + 1))
	fi
}
guest | judge_guest 0 "one guest script: passes, its output printed"
guest | grep -v '^KVT-RESULT guest.d/g.sh' | judge_guest 1 "one guest script without a result fails"
guest | sed 's/^KVT-RESULT guest.d\/g.sh 0/KVT-RESULT guest.d\/g.sh 1/' |
	judge_guest 1 "one guest script that fails fails"
# Several kernels (as make check runs it): each judged, each named.
echo "KVERS='k1 k2' KMISSING= TESTS='t1:1 t2:1' EXTRA_PROGS= EXTRA_TESTS=" >"$tmp/tests/vm/vm.conf"
mkdir -p "$tmp/logs"
kernels() {	# want-exit description (logs in $tmp/logs)
	B=$tmp VM_CHECK_LOGS=$tmp/logs tests/vm/vm-check.sh >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" = "$1" ] && grep -q '^vm-check: PASS k1: guest k1 (Debian 1-k1), ' "$tmp/out" &&
	   grep -q '^vm-check: [A-Z]* k2: guest k2 (Debian 1-k2), ' "$tmp/out"; then
		echo "ok - $2 (exit $rc)"
	else
		echo "not ok - $2 (exit $rc, want $1)"
		sed 's/^/#   /' "$tmp/out"
		fails=$((fails + 1))
	fi
}
for k in k1 k2; do good | sed "s/\bx\b/$k/g" >"$tmp/logs/$k.log"; done
kernels 0 "two clean kernels pass, each named"
sed -i 's/^ok 2 - a: second/not ok 2 - a: second/' "$tmp/logs/k2.log"
kernels 1 "a failed check on one kernel fails"
good | sed "s/\bx\b/k2/g; s/^KVT-DMESG-END/[    2.7] Oops: 0000 [#1] PREEMPT SMP NOPTI\nKVT-DMESG-END/" >"$tmp/logs/k2.log"
kernels 1 "an Oops on one kernel fails"
good | sed "s/\bx\b/k2/g" >"$tmp/logs/k2.log"
sed -i "s/KMISSING=/KMISSING=6.12/" "$tmp/tests/vm/vm.conf"
kernels 1 "a kernel series without a kernel fails"
echo "# judge: $fails failed"
[ $fails -eq 0 ]
