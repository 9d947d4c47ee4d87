# SPDX-License-Identifier: MIT
# shellcheck shell=sh
#
# Sourced by the tests of what only nvcc builds (the fatbin, the driver
# test double, ptxas' report).  need_nvcc_built FILE...: without nvcc
# (the build's NVCC, default /usr/local/cuda/bin/nvcc) the build leaves
# them out and the test skips (77), saying so; with nvcc a missing file is
# a broken build, and the test fails.
need_nvcc_built() {
	for f in "$@"; do
		[ -e "$f" ] && continue
		if [ -x "${NVCC:-/usr/local/cuda/bin/nvcc}" ]; then
			echo "FAIL: missing $f although ${NVCC:-/usr/local/cuda/bin/nvcc} is there (run make)"
			exit 1
		fi
		echo "no nvcc (${NVCC:-/usr/local/cuda/bin/nvcc}): $f is not built"
		exit 77
	done
}

# emu_orders "$0" "$@" (after need_nvcc_built, before the test starts
# anything): the test runs again under each of two orders of the CUDA
# emulation (CUEMU_ORDER, tests/cudafake/cuemu.h): forward, and random
# with seed CUEMU_SEED (default 1), each with the streams' work deferred,
# so that a missing synchronisation shows in one of them.  With
# CUEMU_ORDER set the test runs once, in that order.
emu_orders() {
	[ -n "${CUEMU_ORDER:-}" ] && return 0
	for o in forward "random:${CUEMU_SEED:-1}"; do
		echo "== CUEMU_ORDER=$o"
		CUEMU_ORDER=$o "$@" || exit $?
	done
	exit 0
}
