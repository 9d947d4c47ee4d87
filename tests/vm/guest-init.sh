#!/bin/busybox sh
# SPDX-License-Identifier: MIT
#
# /init of the kvpool VM suite's initramfs.  For every test listed in
# /tests/order (and every /tests/guest.d/*.sh) it loads kvpool.ko afresh,
# runs the test under a timeout, prints "KVT-RESULT <name> <exit>", and
# unloads the module (which frees every pool).  Then it dumps the kernel
# log between markers and powers off.  The host (vm-check.sh) reads all of
# this from the serial console.
/bin/busybox --install -s /bin
export PATH=/bin:/tests
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp && mount -t tmpfs tmpfs /tmp
chmod 1777 /tmp
echo "KVT-BEGIN uptime $(cut -d' ' -f1 /proc/uptime)"
echo "KVT-KERNEL $(uname -r)"
echo "KVT-VERSION $(cat /proc/version)"

run_one() {	# name invariant-check-period command...
	name=$1 every=$2
	shift 2
	if ! insmod /kvpool.ko check_invariants="$every"; then
		echo "KVT-RESULT insmod-$name 1"
		return
	fi
	echo "KVT-RUN $name"
	start=$(cut -d' ' -f1 /proc/uptime)
	timeout -s KILL 300 "$@" </dev/null 2>&1
	rc=$?
	end=$(cut -d' ' -f1 /proc/uptime)
	echo "KVT-RESULT $name $rc $start $end"
	# Children of a killed test may still hold /dev/kvpool open.
	for i in 1 2 3 4 5 6 7 8 9 10; do
		rmmod kvpool 2>/dev/null && return
		sleep 1
	done
	echo "KVT-RESULT rmmod-after-$name 1"
}

# rmmod is refused while a file of /dev/kvpool is open, and works after.
rmmod_busy() {
	insmod /kvpool.ko || return 1
	exec 3<>/dev/kvpool
	if rmmod kvpool 2>/dev/null; then
		echo "not ok 1 - rmmod: unloaded with /dev/kvpool open"
		return 1
	fi
	echo "ok 1 - rmmod: refused while /dev/kvpool is open"
	exec 3>&-
	rmmod kvpool || { echo "not ok 2 - rmmod: refused after close"; return 1; }
	echo "ok 2 - rmmod: unloads once every file is closed"
}
rmmod_busy
echo "KVT-RESULT rmmod-busy $?"

while read -r name every; do
	[ -n "$name" ] && run_one "$name" "$every" "/tests/$name"
done < /tests/order
for s in /tests/guest.d/*.sh; do
	[ -x "$s" ] && run_one "guest.d/$(basename "$s")" 1 "$s"
done
while read -r t; do
	[ -n "$t" ] && run_one "extra/$(basename "$t")" 1 "$t"
done < /tests/extra-tests

echo "KVT-DMESG-BEGIN"
dmesg
echo "KVT-DMESG-END"
echo "KVT-END uptime $(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
