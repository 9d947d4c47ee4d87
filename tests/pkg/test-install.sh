#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Debian packages of `make deb`, installed into a fresh Debian 12 root:
#  1. dpkg installs all five; the maintainer scripts create the user
#     kvpool; the files are in place (binaries, unit, udev rule, conffile,
#     library and its SONAME link, header, pkg-config file, man pages in
#     sections 1, 3, 5 and 8, the module's source and dkms.conf);
#  2. systemd-analyze verify accepts kvpoold.service (its binaries and
#     man pages exist);
#  3. pkg-config --cflags --libs kvlease works and the shipped example
#     compiles against the installed library; it runs against the
#     installed kvpoold (started as root with the shipped kvpoold.conf: it
#     drops to the user kvpool), and kvpoolctl reads the pool; a kvpoold
#     with a dram tier and a file tier in /var/lib/kvpool (the unit's
#     StateDirectory) from a kvpoold.conf serves their pools and series;
#     python3-kvpool, the sixth package, installs, imports and leases
#     from the installed kvpoold, and purges without a trace;
#  4. dkms status lists kvpool; installing kvpool-dkms built the module
#     against the headers of both kernels Debian 12 ships
#     (linux-headers-amd64: 6.1, and linux-headers-6.12-amd64) and dkms
#     installed it under /lib/modules for each, with that kernel's
#     vermagic;
#  5. removing and purging the packages leaves no kvpool file behind (the
#     state directory included).
#
# The root is tests/pkg/make-root.sh's, made once and cached outside the
# clone; each run mounts an overlay on it (a copy where overlayfs is
# missing), so the cached root is never changed.
#
# Usage: test-install.sh [DEB_DIR] (default build/deb).  Exit 0 pass, 1
# fail (also without debootstrap or chroot: make deps installs them), 77
# skip (not root, no mirror reachable).

DEB_DIR=${1:-build/deb}

skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null ||
	{ echo "FAIL: no debootstrap (make deps)"; exit 1; }
command -v chroot >/dev/null || { echo "FAIL: no chroot (coreutils)"; exit 1; }
DEBS=$(ls "$DEB_DIR"/kvpool-dkms_*_all.deb "$DEB_DIR"/kvpoold_*.deb \
	"$DEB_DIR"/libkvlease1_*.deb "$DEB_DIR"/libkvlease-dev_*.deb \
	"$DEB_DIR"/kvpool-tools_*.deb 2>/dev/null)
[ "$(echo "$DEBS" | wc -w)" = 5 ] ||
	fail "want the five packages in $DEB_DIR (make deb): $DEBS"

BASE=$(tests/pkg/make-root.sh) || exit $?
[ -e "$BASE/.complete" ] || fail "no root from tests/pkg/make-root.sh"

# This run's root: an overlay on the cached one.
RUN=$(mktemp -d /tmp/kvpool-pkg.XXXXXX) || exit 1
R=$RUN/root
mkdir -p "$R" "$RUN/upper" "$RUN/work"
MOUNTS=""
cleanup() {
	if [ -n "$KPID" ]; then
		chroot "$R" /bin/sh -c "kill $KPID" 2>/dev/null
	fi
	for m in $MOUNTS; do
		umount -l "$m" 2>/dev/null
	done
	umount -l "$R" 2>/dev/null
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$R" 2>/dev/null; then
	echo "root: overlay on $BASE"
else
	echo "root: copy of $BASE (no overlayfs)"
	cp -a "$BASE/." "$R/" || fail "copy of the root"
fi
for m in proc sys dev dev/pts; do
	mkdir -p "$R/$m"
	mount --bind "/$m" "$R/$m" || fail "bind mount /$m"
	MOUNTS="$R/$m $MOUNTS"
done
mkdir -p "$R/tmp/debs"
cp $DEBS "$R/tmp/debs/" || fail "copy the packages"
# shellcheck disable=SC2016
IN() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/sh -c "$*"; }
# No service starts inside the root (there is no systemd running anyway).
printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
chmod 755 "$R/usr/sbin/policy-rc.d"

errors=0
check() {	# check WHAT COMMAND...
	what=$1
	shift
	if IN "$*" >"$RUN/out" 2>&1; then
		echo "ok: $what"
	else
		echo "FAIL: $what"
		sed 's/^/    /' "$RUN/out" | tail -n 30
		errors=$((errors + 1))
	fi
}

# 1. install
start=$(date +%s)
check "dpkg -i of the five packages" 'dpkg -i /tmp/debs/*.deb'
echo "install took $(( $(date +%s) - start )) s (DKMS builds the module for each kernel)"
check "all five installed" 'for p in kvpool-dkms kvpoold libkvlease1 libkvlease-dev kvpool-tools; do
	dpkg-query -W -f="\${Status}\n" $p | grep -qx "install ok installed" || { echo "$p not installed"; exit 1; }; done'
check "system user and group kvpool" 'getent passwd kvpool && getent group kvpool &&
	[ "$(getent passwd kvpool | cut -d: -f7)" = /usr/sbin/nologin ]'
ML=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
VER=$(dpkg-deb -f "$(ls "$DEB_DIR"/kvpool-dkms_*_all.deb)" Version)
check "files in place" "set -e; for f in /usr/sbin/kvpoold /usr/bin/kvpoolctl /usr/bin/kvpool-bench \
	/lib/systemd/system/kvpoold.service /lib/udev/rules.d/60-kvpool.rules \
	/etc/kvpool/kvpoold.conf $ML/libkvlease.so.1 $ML/libkvlease.so $ML/libkvlease.a \
	$ML/pkgconfig/kvlease.pc /usr/include/kvpool/kvlease.h \
	/usr/share/doc/libkvlease-dev/examples/example.c \
	/usr/share/man/man8/kvpoold.8.gz /usr/share/man/man5/kvpoold.conf.5.gz \
	/usr/share/man/man8/kvpoolctl.8.gz /usr/share/man/man8/kvpoolctl-metrics.8.gz \
	/usr/share/man/man1/kvpool-bench.1.gz /usr/share/man/man3/kvl_open.3.gz \
	/usr/share/man/man3/kvl_tier_join.3.gz /usr/share/man/man3/kvl_seq_swap_out.3.gz \
	/usr/share/man/man3/kvl_admin_tier_list.3.gz \
	/usr/src/kvpool-$VER/dkms.conf /usr/src/kvpool-$VER/Kbuild \
	/usr/src/kvpool-$VER/kvpool_ledger.c /usr/src/kvpool-$VER/include/uapi/linux/kvpool.h; do
	[ -e \$f ] || { echo \"missing \$f\"; exit 1; }; done
	[ -x /usr/sbin/kvpoold ] && [ -x /usr/bin/kvpoolctl ]
	[ \"\$(readlink $ML/libkvlease.so)\" = libkvlease.so.1 ]
	objdump -p $ML/libkvlease.so.1 2>/dev/null | grep -q 'SONAME *libkvlease.so.1' ||
		{ readelf -d $ML/libkvlease.so.1 2>/dev/null | grep -q 'libkvlease.so.1'; }"
check "kvpoold.conf is a conffile" \
	'dpkg-query -W -f="\${Conffiles}\n" kvpoold | grep -q " /etc/kvpool/kvpoold.conf "'
check "the unit names the packaged paths" \
	'grep -qx "ExecStart=/usr/sbin/kvpoold --foreground --syslog --config /etc/kvpool/kvpoold.conf" /lib/systemd/system/kvpoold.service'
check "man kvpoold.conf" 'man -P cat kvpoold.conf 2>/dev/null | grep -q "metrics_listen" &&
	man -P cat kvpoold.conf 2>/dev/null | grep -q "tier nvme:PATH:SIZE"'
check "the library exports the tier calls" \
	"nm -D --defined-only $ML/libkvlease.so.1 | grep -q ' kvl_tier_join@@KVLEASE_1\$' &&
	 nm -D --defined-only $ML/libkvlease.so.1 | grep -q ' kvl_seq_swap_out@@KVLEASE_1\$'"

# 2. the unit
check "systemd-analyze verify kvpoold.service" \
	'out=$(systemd-analyze verify /lib/systemd/system/kvpoold.service 2>&1); rc=$?;
	 echo "$out"; [ $rc = 0 ] && ! echo "$out" | grep -q kvpoold'

# 3. the library, the example, the daemon
check "pkg-config --cflags --libs kvlease" \
	'pkg-config --cflags --libs kvlease && [ "$(echo $(pkg-config --cflags kvlease))" = "-I/usr/include/kvpool" ] &&
	 [ "$(echo $(pkg-config --libs kvlease))" = "-lkvlease" ] && pkg-config --modversion kvlease'
check "the example compiles against the installed library" \
	'gcc -O2 -Wall -Werror -o /tmp/kvlease-example /usr/share/doc/libkvlease-dev/examples/example.c \
	 $(pkg-config --cflags --libs kvlease) -lm && ldd /tmp/kvlease-example | grep "libkvlease.so.1 => /.*/libkvlease.so.1"'
KPID=$(IN 'mkdir -p /run/kvpool && /usr/sbin/kvpoold --config /etc/kvpool/kvpoold.conf \
	--ledger inproc --backend cpu --capacity 512 --block-bytes 65536 \
	--foreground -v >/tmp/kvpoold.log 2>&1 & echo $!')
check "installed kvpoold starts with the shipped kvpoold.conf and drops to kvpool" \
	'i=0; while ! grep -q "serving /run/kvpool/kvpool.sock" /tmp/kvpoold.log && [ $i -lt 600 ]; do
		sleep 0.1; i=$((i+1)); done;
	 cat /tmp/kvpoold.log; [ -S /run/kvpool/kvpool.sock ] &&
	 [ "$(stat -c %U /proc/'"$KPID"')" = kvpool ] && grep -q "running as kvpool" /tmp/kvpoold.log'
check "the example runs against it" '/tmp/kvlease-example'
check "kvpoolctl status and metrics" 'kvpoolctl status && kvpoolctl metrics | grep -q "^kvpool_pool_capacity_blocks{pool=\"host\"} 512$"'
# python3-kvpool, the sixth package: the binding on the installed
# library, against the installed kvpoold; then removed again
cp "$DEB_DIR"/python3-kvpool_*_all.deb "$R/tmp/" || fail "no python3-kvpool in $DEB_DIR"
check "python3-kvpool installs, imports and leases from the installed kvpoold" \
	'dpkg -i /tmp/python3-kvpool_*_all.deb && cd / && python3 -c "
import kvpool, numpy as np
assert kvpool.__file__.startswith(\"/usr/lib/python3/dist-packages/kvpool/\"), kvpool.__file__
assert kvpool.library_path() == \"libkvlease.so.1\", kvpool.library_path()
with kvpool.Context() as ctx:
    lay = ctx.declare_layout(1, 2, 64)
    s = lay.sequence()
    s.append(10)
    k = np.ones((10, 2, 64), np.float32)
    s.write_kv(0, 0, k, k)
    assert np.array_equal(s.read_kv(0, 0, 10)[0], k)
    print(ctx.status())
" && [ -e /usr/lib/python3/dist-packages/kvpool/py.typed ] &&
	 dpkg --purge python3-kvpool && ! ls -d /usr/lib/python3/dist-packages/kvpool 2>/dev/null'
IN "kill $KPID; i=0; while kill -0 $KPID && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done" 2>/dev/null
KPID=
# the tiers, from a configuration file, in the unit's state directory
KPID=$(IN 'mkdir -p /var/lib/kvpool && chmod 750 /var/lib/kvpool &&
	sed "/^\[pool\]\$/a tier = dram:64\ntier = nvme:/var/lib/kvpool/kv.swap:4M" \
		/etc/kvpool/kvpoold.conf >/tmp/tiers.conf &&
	printf "[tenant dram/chat]\nmax = 32\n" >>/tmp/tiers.conf &&
	/usr/sbin/kvpoold --config /tmp/tiers.conf --ledger inproc --backend cpu \
	--capacity 512 --block-bytes 65536 --foreground -v >/tmp/kvpoold-tiers.log 2>&1 & echo $!')
check "installed kvpoold with a dram and a file tier from kvpoold.conf" \
	'i=0; while ! kvpoolctl status >/dev/null 2>&1 && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done;
	 cat /tmp/kvpoold-tiers.log; grep -q "tier 1: pool dram (dram), 64 blocks" /tmp/kvpoold-tiers.log &&
	 grep -q "tier 2: pool nvme (nvme /var/lib/kvpool/kv.swap), 64 blocks" /tmp/kvpoold-tiers.log &&
	 kvpoolctl --pool dram tenant list | grep -E "^chat +32 " &&
	 m=$(kvpoolctl metrics) && echo "$m" | grep -qx "kvpool_tier_info{pool=\"nvme\",tier=\"2\",kind=\"nvme\"} 1" &&
	 echo "$m" | grep -qx "kvpool_tier_capacity_blocks{pool=\"dram\",tier=\"1\"} 64"'
IN "kill $KPID" 2>/dev/null
KPID=

# 4. DKMS: kvpool-dkms's postinst built and installed the module for each
# kernel whose headers the root has (6.1 and 6.12)
KVERS=$(IN 'ls -d /usr/src/linux-headers-*-amd64 | sed "s|.*/linux-headers-||" | sort -V')
for series in 6.1 6.12; do
	echo "$KVERS" | grep -q "^$series\." || fail "no linux-headers of $series in the root: $KVERS"
done
check "dkms status lists kvpool" "dkms status | grep -E '^kvpool/$VER'"
KOS=
for KVER in $KVERS; do
	check "dkms built and installed the module for $KVER at install" \
		"dkms status -m kvpool -v $VER -k $KVER | grep -q ': installed\$' &&
		 modinfo -F vermagic /lib/modules/$KVER/updates/dkms/kvpool.ko* | grep -q '^$KVER '"
	KOS="$KOS /lib/modules/$KVER/updates/dkms/kvpool.ko*"
done

# 5. remove, purge
check "dpkg --purge of the five packages" \
	'dpkg --purge kvpool-tools libkvlease-dev libkvlease1 kvpoold kvpool-dkms'
check "nothing of kvpool left" "! ls -d /usr/src/kvpool-$VER /etc/kvpool /usr/sbin/kvpoold \
	$KOS \
	/var/lib/dkms/kvpool /var/lib/kvpool 2>/dev/null | grep ."

[ $errors = 0 ] || fail "$errors check(s) failed"
echo "package install test: all checks passed"
