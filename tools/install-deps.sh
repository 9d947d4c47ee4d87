#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install what kvpool's build and tests need from Debian 12's packages.
# Does nothing slow when everything is already there.  Needs root to install.
set -e

# Build: compilers, libnl, libcap, libinih (kvpoold.conf), libmicrohttpd
# (the /metrics endpoint), libsystemd (the service manager's fd store),
# cmocka; clang and libFuzzer (make fuzz-config).
# Kernel tests: the headers and images of both kernels Debian 12 ships,
# 6.1 (linux-image-amd64) and 6.12 (linux-image-6.12-amd64, from
# bookworm-security; the meta-packages follow the newest version of
# each), qemu, busybox.  End to end: curl and
# promtool (package prometheus) check the /metrics endpoint.  The cluster
# tier: hiredis (its client), redis-server and redis-tools (its tests start
# a Redis Cluster on loopback ports).  Packages
# (make deb, tests/pkg): debhelper, dh-dkms, lintian, debootstrap.  The
# Python binding's type check (python/python.mk): mypy.
PKGS="gcc g++ make pkg-config libc6-dev gcc-multilib
libnl-3-dev libnl-genl-3-dev libcap-dev libcmocka-dev libxxhash-dev liburing-dev
libinih-dev libmicrohttpd-dev libhiredis-dev libsystemd-dev redis-server redis-tools
clang libclang-rt-14-dev
linux-headers-amd64 linux-image-amd64
linux-headers-6.12-amd64 linux-image-6.12-amd64 kmod
qemu-system-x86 busybox-static cpio gzip sparse
procps psmisc util-linux curl prometheus
python3 python3-numpy python3-pytest python3-torch libopenblas0-pthread mypy
libclang-rt-dev llvm
dpkg-dev debhelper dh-dkms dkms fakeroot lintian debootstrap"

missing=""
for p in $PKGS; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done

if [ -z "$missing" ]; then
	echo "install-deps: all packages present"
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing packages:$missing" >&2
	echo "install-deps: run as root (or: sudo $0)" >&2
	exit 1
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
