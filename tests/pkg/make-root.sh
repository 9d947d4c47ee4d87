#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Debian 12 root of the package install test (tests/pkg/test-install.sh):
# debootstrap --variant=minbase bookworm from this machine's Debian mirror
# (the first bookworm one of /etc/apt/sources.list.d/*.sources or
# /etc/apt/sources.list*, or $KVPOOL_DEBIAN_MIRROR), with the packages'
# run-time dependencies and the test's tools.  Made once (a few minutes,
# mostly downloads) and kept in $KVPOOL_PKG_CACHE (default
# /var/cache/kvpool-test, outside the clone), keyed by what it holds; a
# later call finds it and returns at once.  Never changed by the test.
#
# Prints the root's path.  Exit 0; 77 when it cannot be made here (not
# root, the mirror unreachable), with the reason on stderr; 1 without
# debootstrap (make deps installs it).

CACHE=${KVPOOL_PKG_CACHE:-/var/cache/kvpool-test}
SUITE=bookworm
# Depends of the five packages (debian/control and the shlibs of the
# binaries) and what the checks run: gcc and pkg-config for the example,
# dkms and the headers for the module, systemd-analyze, man.
INCLUDE="adduser dkms linux-headers-amd64 gcc make libc6-dev pkg-config
kmod procps systemd man-db binutils libcap2 libinih1 libmicrohttpd12 libnl-3-200
libnl-genl-3-200 liburing2 libxxhash0 libhiredis0.14"

skip() { echo "make-root: $*" >&2; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root"
command -v debootstrap >/dev/null ||
	{ echo "make-root: no debootstrap (make deps)" >&2; exit 1; }

mirror() {
	if [ -n "$KVPOOL_DEBIAN_MIRROR" ]; then
		echo "$KVPOOL_DEBIAN_MIRROR"
		return
	fi
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
		/^Types:/ { deb = / deb( |$)/ }
		/^URIs:/ { uri = $2 }
		/^Suites:/ { if (deb && / bookworm( |$)/ && uri != "") { print uri; exit } }
		/^$/ { deb = 0; uri = "" }')
	[ -n "$m" ] || m=$(grep -hE '^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+ +bookworm ' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{ print $1; exit }')
	echo "${m:-http://deb.debian.org/debian}"
}

KEY=$(echo "$SUITE $INCLUDE" | md5sum | cut -c1-12)
BASE=$CACHE/root-$SUITE-$KEY
if [ -e "$BASE/.complete" ]; then
	echo "$BASE"
	exit 0
fi
mkdir -p "$CACHE" || skip "cannot create $CACHE"
exec 9>"$CACHE/lock"
flock 9
if [ ! -e "$BASE/.complete" ]; then
	M=$(mirror)
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
	rm -f "$BASE.new/var/cache/apt/archives/"*.deb
	touch "$BASE.new/.complete"
	rm -rf "$BASE"
	mv "$BASE.new" "$BASE"
	echo "make-root: made in $(( $(date +%s) - start )) s" >&2
	# roots of other keys are no longer used
	for d in "$CACHE"/root-*; do
		[ "$d" = "$BASE" ] || rm -rf "$d"
	done
fi
echo "$BASE"
