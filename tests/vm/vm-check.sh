#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The kvpool VM suite: for each kernel of $KVERS (Debian 12's 6.1 and
# 6.12), packs an initramfs (busybox-static, that kernel's kvpool.ko, the
# static test programs, guest.d scripts and VM_EXTRA_* programs), boots
# the kernel once under qemu-system-x86_64 -accel tcg, and reads every
# test's result and the guest's kernel log from the serial console.  The
# kernels boot side by side (VM_PARALLEL=0: one after the other); the
# output of each is printed under its version, as the guest reports it.
# Fails on any failed test, any BUG:/WARNING:/Oops/lockdep/"general
# protection"/KASAN line in a kernel log, a guest that runs another kernel
# than the one booted, or a kernel series without a kernel ($KMISSING).
# Run from the repository root (make vm-check, or make check); the build
# writes $B/tests/vm/vm.conf.  A test that skips in the guest (77) fails
# the suite: the guest has the module and everything its tests need.
# Exit 0 pass, 1 fail (also when qemu, a kernel image or a static busybox
# is missing: make deps installs them).
# VM_CHECK_LOG=FILE skips the boot and judges FILE (to test this script),
# for the kernel $KVER of the configuration; VM_CHECK_LOGS=DIR judges
# DIR/<version>.log for each kernel of $KVERS; VM_KVER=VERSION boots that
# kernel only.  VM_GUEST=SCRIPT boots with that one guest script instead
# of the suite (no test programs, guest.d scripts or extra tests), on
# VM_KVER or else the first kernel of $KVERS, and prints its output from
# the console log (make vm-bench-restart).
set -u
B=${B:-build}
conf=$B/tests/vm/vm.conf
[ -r "$conf" ] || { echo "vm-check: $conf missing: run make vm-check"; exit 1; }
case $conf in /*) ;; *) conf=./$conf ;; esac
KVERS= KMISSING= KVER= KO= KO_DIR=$B/kmod
. "$conf"		# KVERS KMISSING KO_DIR TESTS EXTRA_PROGS EXTRA_TESTS
GUEST=${VM_GUEST:-}
if [ -n "$GUEST" ]; then
	[ -x "$GUEST" ] || { echo "vm-check: FAIL: VM_GUEST=$GUEST is not an executable script"; exit 1; }
	TESTS= EXTRA_TESTS=
	[ -n "${VM_KVER:-}" ] || VM_KVER=${KVERS%% *}
	[ -n "$VM_KVER" ] || { echo "vm-check: FAIL: no kernel to boot"; exit 1; }
fi

if [ -z "${VM_CHECK_LOG:-}" ] && [ -z "${VM_KVER:-}" ]; then
	# Every kernel, each in its own directory, then each one's output.
	fail=0 pids=
	for k in $KVERS; do
		mkdir -p "$B/tests/vm/$k"
		[ -z "${VM_CHECK_LOGS:-}" ] || export VM_CHECK_LOG="$VM_CHECK_LOGS/$k.log"
		if [ "${VM_PARALLEL:-1}" = 0 ]; then
			VM_KVER=$k "$0" >"$B/tests/vm/$k/vm-check.out" 2>&1
			echo $? >"$B/tests/vm/$k/vm-check.rc"
		else
			{ VM_KVER=$k "$0" >"$B/tests/vm/$k/vm-check.out" 2>&1
			  echo $? >"$B/tests/vm/$k/vm-check.rc"; } &
			pids="$pids $!"
		fi
	done
	[ -z "$pids" ] || wait $pids
	summary= skipped=0
	for k in $KVERS; do
		rc=$(cat "$B/tests/vm/$k/vm-check.rc" 2>/dev/null || echo 1)
		echo "==== kernel $k"
		cat "$B/tests/vm/$k/vm-check.out"
		case $rc in
		0) r=PASS ;;
		77) r=SKIP; skipped=$((skipped + 1)) ;;
		*) r=FAIL; fail=1 ;;
		esac
		o=$B/tests/vm/$k/vm-check.out
		summary="$summary
vm-check: $r $k: guest $(sed -n 's/^vm-check: guest kernel: //p' "$o" | head -n 1), $(sed -n 's/^vm-check: \([0-9]* checks passed, [0-9]* failed\);.*/\1/p' "$o" | head -n 1), qemu wall $(sed -n 's/.*qemu wall \([0-9]*s\).*/\1/p' "$o" | head -n 1)"
	done
	echo "===="
	for s in $KMISSING; do
		echo "vm-check: FAIL: no $s kernel (linux-image and linux-headers of $s): run make deps"
		fail=1
	done
	[ -n "$KVERS" ] || { echo "vm-check: FAIL: no kernel to boot"; fail=1; }
	echo "${summary#?}"
	if [ $fail = 0 ] && [ "$skipped" -gt 0 ]; then
		echo "vm-check: SKIP"
		exit 77
	fi
	[ $fail -eq 0 ] && echo "vm-check: PASS ($(echo $KVERS | wc -w) kernels)" || echo "vm-check: FAIL"
	exit $fail
fi
[ -z "${VM_KVER:-}" ] || { KVER=$VM_KVER; KO=$KO_DIR/$KVER/kvpool.ko; }

bins=$B/tests/vm
out=$B/tests/vm/$KVER
mkdir -p "$out"
root=$out/initramfs
log=$out/console.log
start=$(date +%s)
qrc=0
if [ -n "${VM_CHECK_LOG:-}" ]; then
	log=$VM_CHECK_LOG
else
kernel=/boot/vmlinuz-$KVER
qemu=$(command -v qemu-system-x86_64)
[ -n "$qemu" ] || { echo "FAIL: qemu-system-x86_64 missing (make deps)"; exit 1; }
[ -r "$kernel" ] || { echo "FAIL: $kernel missing (make deps)"; exit 1; }
busybox=$(command -v busybox || echo /bin/busybox)
ldd "$busybox" 2>&1 | grep -q 'not a dynamic executable' ||
	{ echo "FAIL: $busybox is not static (install busybox-static)"; exit 1; }
rm -rf "$root"
mkdir -p "$root/bin" "$root/tests/guest.d" "$root/proc" "$root/sys" \
	 "$root/dev" "$root/tmp" "$root/etc"
cp "$busybox" "$root/bin/busybox"
cp "$KO" "$root/kvpool.ko"
cp tests/vm/guest-init.sh "$root/init"
: >"$root/tests/order"
for t in $TESTS; do		# name:invariant-check-period
	cp "$bins/${t%%:*}" "$root/tests/"
	echo "${t%%:*} ${t##*:}" >>"$root/tests/order"
done
if [ -n "$GUEST" ]; then
	cp "$GUEST" "$root/tests/guest.d/"
else
	for s in tests/vm/guest.d/*.sh; do
		[ -x "$s" ] && cp "$s" "$root/tests/guest.d/"
	done
fi
echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
echo "kvt:x:1000:1000:kvt:/tmp:/bin/sh" >>"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"
echo "kvt:x:1000:" >>"$root/etc/group"

# Extra programs (and their shared libraries) go to /bin; extra tests are
# also run, each with a freshly loaded module.
copy_prog() {
	cp "$1" "$root/bin/" || return 1
	ldd "$1" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}
: >"$root/tests/extra-tests"
for p in $EXTRA_PROGS; do copy_prog "$p" || exit 1; done
for p in $EXTRA_TESTS; do
	copy_prog "$p" || exit 1
	echo "/bin/$(basename "$p")" >>"$root/tests/extra-tests"
done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initramfs.cpio.gz" ||
	{ echo "vm-check: cannot pack the initramfs"; exit 1; }

echo "vm-check: booting $kernel (tcg, 2 cpus, 1G) with $(echo $TESTS | wc -w) tests"
timeout -k 10 900 "$qemu" -accel tcg -m 1G -smp 2 -nographic -no-reboot \
	-kernel "$kernel" -initrd "$out/initramfs.cpio.gz" \
	-append "console=ttyS0 loglevel=4 panic=10 rdinit=/init" \
	</dev/null 2>&1 | tr -d '\r' >"$log"
qrc=$?
fi
wall=$(( $(date +%s) - start ))

fail=0
if [ -n "$GUEST" ]; then
	g=guest.d/$(basename "$GUEST")
	awk -v run="KVT-RUN $g" '$0 == run { on = 1; next }
		on && /^KVT-RESULT / { exit } on' "$log"
	grep -q "^KVT-RESULT $g " "$log" || { echo "FAIL $g: no result"; fail=1; }
else
	grep -E '^(ok|not ok) [0-9]+ - |^# ' "$log"
fi
echo "----"
# The kernel the guest runs: the one booted.
running=$(sed -n 's/^KVT-KERNEL //p' "$log" | head -n 1)
if [ "$running" != "$KVER" ]; then
	echo "vm-check: FAIL: booted $KVER, the guest runs '${running:-?}'"
	fail=1
fi
if ! grep -q '^KVT-END' "$log"; then
	echo "vm-check: FAIL: the guest did not finish (qemu exit $qrc); tail of $log:"
	tail -n 40 "$log"
	fail=1
fi
grep '^KVT-RESULT' "$log" | while read -r _ name rc t0 t1; do
	case $rc in
	0)  echo "PASS $name${t0:+ (${t0}s..${t1}s guest uptime)}" ;;
	77) echo "FAIL $name (skipped in the guest)" ;;
	*)  echo "FAIL $name (exit $rc)" ;;
	esac
done
if grep '^KVT-RESULT' "$log" | awk '$3 != 0 { bad = 1 } END { exit !bad }'; then
	fail=1
fi
# Every listed test must have reported.
for t in $TESTS; do
	grep -q "^KVT-RESULT ${t%%:*} " "$log" || { echo "FAIL ${t%%:*}: no result"; fail=1; }
done
# The kernel log: the dump at the end, and anything printed on the console.
bad='BUG:|WARNING:|Oops|general protection|KASAN|UBSAN|lockdep|possible circular locking|possible recursive locking|INFO: task .* blocked|kernel BUG|Call Trace|list_add corruption|list_del corruption|refcount_t:|kvpool: .*broken invariant'
if grep -E "$bad" "$log" | grep -v -E '^(ok|not ok) [0-9]+ - ' >"$out/kernel-bad.log"; then
	echo "vm-check: FAIL: kernel log:"
	cat "$out/kernel-bad.log"
	fail=1
fi
checks=$(grep -E '^ok [0-9]+ - ' "$log" | grep -c -v '# TODO')
failed=$(grep -E '^not ok [0-9]+ - ' "$log" | grep -c -v '# TODO')
todo=$(grep -E '^(not )?ok [0-9]+ - .*# TODO' "$log")
[ -z "$todo" ] || { echo "vm-check: known bugs of other parts (TODO, not failures):"; echo "$todo"; }
boot=$(sed -n 's/.*KVT-BEGIN uptime //p' "$log")
end=$(sed -n 's/^KVT-END uptime //p' "$log")
version=$(sed -n 's/^KVT-VERSION //p' "$log" | head -n 1)
pkg=$(echo "$version" | sed -n 's/.* Debian \([^ ]*\) .*/\1/p')
echo "vm-check: guest kernel: ${running:-?}${pkg:+ (Debian $pkg)}"
echo "vm-check: ${version:-no /proc/version}"
echo "vm-check: boot to /init ${boot:-?}s, guest done at ${end:-?}s (uptime), qemu wall ${wall}s, 1 boot"
echo "vm-check: $checks checks passed, $failed failed; console log: $log"
[ "$failed" -eq 0 ] || fail=1
[ $fail -eq 0 ] && echo "vm-check: PASS" || echo "vm-check: FAIL"
exit $fail
