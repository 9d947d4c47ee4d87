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
