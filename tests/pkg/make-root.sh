#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Debian 12 root of the package install test (tests/pkg/test-install.sh):
# debootstrap --variant=minbase bookworm from this machine's Debian mirror
# (the first bookworm one of /etc/apt/sources.list.d/*.sources or
# /etc/apt/sources.list*, or $KVPOOL_DEBIAN_MIRROR), with the packages'
# run-time dependencies and the test's tools, then the headers of Debian
# 12's second kernel, 6.12, from bookworm-security (likewise the first
# bookworm-security mirror, or $KVPOOL_DEBIAN_SECURITY_MIRROR).  Made once
# (a few minutes, mostly downloads) and kept in $KVPOOL_PKG_CACHE (default
# /var/cache/kvpool-test, outside the clone), keyed by what it holds; a
# later call finds it and returns at once.  Never changed by the test.
# Roots of other keys are removed once unused for a week.
#
# Prints the root's path.  Exit 0; 77 when it cannot be made here (not
# root, the mirror unreachable), with the reason on stderr; 1 without
# debootstrap (make deps installs it).

CACHE=${KVPOOL_PKG_CACHE:-/var/cache/kvpool-test}
SUITE=bookworm
# Depends of the five packages (debian/control and the shlibs of the
# binaries) and what the checks run: gcc and pkg-config for the example,
# dkms and the headers for the module, systemd-analyze, man; python3 and
# python3-numpy for python3-kvpool.
INCLUDE="adduser dkms linux-headers-amd64 gcc make libc6-dev pkg-config
kmod procps systemd man-db binutils libcap2 libinih1 libmicrohttpd12 libnl-3-200
libnl-genl-3-200 liburing2 libxxhash0 libhiredis0.14 python3 python3-numpy"
# From bookworm-security: the DKMS build is checked against both kernels.
INCLUDE_SECURITY="linux-headers-6.12-amd64"

skip() { echo "make-root: $*" >&2; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root"
command -v debootstrap >/dev/null ||
	{ echo "make-root: no debootstrap (make deps)" >&2; exit 1; }

mirror() {	# mirror SUITE OVERRIDE DEFAULT
	if [ -n "$2" ]; then
		echo "$2"
		return
	fi
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v s="$1" '
		/^Types:/ { deb = / deb( |$)/ }
		/^URIs:/ { uri = $2 }
		/^Suites:/ { for (i = 2; i <= NF; i++) if (deb && $i == s && uri != "") { print uri; exit } }
		/^$/ { deb = 0; uri = "" }')
	[ -n "$m" ] || m=$(grep -hE "^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+ +$1 " \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{ print $1; exit }')
	echo "${m:-$3}"
}

KEY=$(echo "$SUITE $INCLUDE security $INCLUDE_SECURITY" | md5sum | cut -c1-12)
BASE=$CACHE/root-$SUITE-$KEY
if [ -e "$BASE/.complete" ]; then
	touch "$BASE.used" 2>/dev/null
	echo "$BASE"
	exit 0
fi
mkdir -p "$CACHE" || skip "cannot create $CACHE"
exec 9>"$CACHE/lock"
flock 9
if [ ! -e "$BASE/.complete" ]; then
	M=$(mirror "$SUITE" "$KVPOOL_DEBIAN_MIRROR" http://deb.debian.org/debian)
	SM=$(mirror "$SUITE-security" "$KVPOOL_DEBIAN_SECURITY_MIRROR" \
		http://deb.debian.org/debian-security)
	echo "make-root: making the Debian 12 root $BASE from $M (once)" >&2
	rm -rf "$BASE.new"
	start=$(date +%s)
	if ! debootstrap --variant=minbase \
		--include="$(echo $INCLUDE | tr ' ' ,)" \
		"$SUITE" "$BASE.new" "$M" >"$CACHE/debootstrap.log" 2>&1; then
		tail -n 20 "$CACHE/debootstrap.log" >&2
		rm -rf "$BASE.new"
		skip "debootstrap cannot make a root from $M (above, and $CACHE/debootstrap.log)"
	fi
	printf 'APT::Install-Recommends "false";\n' \
		>"$BASE.new/etc/apt/apt.conf.d/99kvpool-test"
	echo "deb $SM $SUITE-security main" \
		>"$BASE.new/etc/apt/sources.list.d/security.list"
	mount -t proc proc "$BASE.new/proc" 2>/dev/null
	chroot "$BASE.new" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		DEBIAN_FRONTEND=noninteractive /bin/sh -c "apt-get update -q &&
		apt-get install -y -q --no-install-recommends $INCLUDE_SECURITY &&
		apt-get clean" >>"$CACHE/debootstrap.log" 2>&1
	rc=$?
	umount "$BASE.new/proc" 2>/dev/null
	if [ $rc != 0 ]; then
		tail -n 20 "$CACHE/debootstrap.log" >&2
		rm -rf "$BASE.new"
		skip "no $INCLUDE_SECURITY from $SM (above, and $CACHE/debootstrap.log)"
	fi
	rm -f "$BASE.new/var/cache/apt/archives/"*.deb
	touch "$BASE.new/.complete"
	rm -rf "$BASE"
	mv "$BASE.new" "$BASE"
	touch "$BASE.used"
	echo "make-root: made in $(( $(date +%s) - start )) s" >&2
	# roots of other keys unused for a week (the time of the last use, or
	# of the making of a root older than these stamps)
	for d in "$CACHE"/root-*; do
		case $d in "$BASE"|*.used|*.new) continue ;; esac
		stamp=$d.used
		[ -e "$stamp" ] || stamp=$d
		[ -n "$(find "$stamp" -maxdepth 0 -mtime +7)" ] && rm -rf "$d" "$d.used"
	done
fi
echo "$BASE"
