#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The launches of test-kvk-gpu's whole grid against the driver test
# double, as an sm_90 (H200-like) device and, on the quick grid, as an
# sm_80 (A100-like) one (their shared memory, SM count and cubin differ):
# every driver call and every kernel launch is checked against the
# documented preconditions (grid and block limits, shared memory, the
# parameter buffer against the kernel's, device ranges inside
# allocations; the double aborts on the first violation).  The kernels do
# not run here, so no result is compared: test-kvk-gpu-emu.sh runs them
# (emulated, smaller grid) and compares with the CPU, and test-kvk-gpu
# does on a GPU.  The streams' work is deferred (the checks run when it
# does), in the random order of seed CUEMU_SEED (default 1) on sm_90 and
# in reverse on sm_80, and the quick grid again in forward order on both
# (about a second each), so that each model sees two orders.  Exit 77
# only without nvcc (the double is not built).
B=${B:-build}
fake=$B/tests/cudafake/libcuda.so.1
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$fake" "$B/tests/gpu/test-kvk-gpu"
for run in 90:random 80:reverse 90:forward 80:forward; do
	arch=${run%:*} order=${run#*:}
	[ $arch = 80 ] || [ $order = forward ] && quick=--quick || quick=
	[ $order = random ] && order="random:${CUEMU_SEED:-1}"
	echo "== sm_$arch, CUEMU_ORDER=$order${quick:+, quick grid}"
	KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_ARCH=$arch CUEMU_ORDER=$order \
	KVPOOL_FAKE_CUDA_MEM=$((4 << 30)) \
		"$B/tests/gpu/test-kvk-gpu" $quick || exit 1
done
