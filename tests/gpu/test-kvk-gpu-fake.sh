#!/bin/sh
# SPDX-License-Identifier: MIT
#
# test-kvk-gpu against the driver test double, the whole grid as an sm_90
# (H200-like) device and the quick one as an sm_80 (A100-like) device (its
# shared memory, SM count and cubin differ): every driver call and
# every launch is checked against the documented preconditions (the
# double aborts on the first violation; results are not compared, the
# kernels do not run).  Exit 77 when the double was not built (no nvcc).
B=${B:-build}
fake=$B/tests/cudafake/libcuda.so.1
[ -f "$fake" ] || { echo "no $fake (needs nvcc)"; exit 77; }
for arch in 90 80; do
	echo "== sm_$arch"
	[ $arch = 80 ] && quick=--quick || quick=
	KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_ARCH=$arch \
	KVPOOL_FAKE_CUDA_MEM=$((4 << 30)) \
		"$B/tests/gpu/test-kvk-gpu" $quick || exit 1
done
