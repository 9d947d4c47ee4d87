#!/bin/sh
# SPDX-License-Identifier: MIT
#
# test-kvk-gpu --quick and test-kvk-gpu-edit --quick against the driver
# test double with the kernels run
# by the host emulation of the CUDA execution model (KVPOOL_FAKE_CUDA_EXEC):
# the kernels' results are compared with the CPU reference, on the sm_90
# model with the FP8 conversion of sm_89+ and on sm_80 (software FP8).
# The emulation follows the PTX ISA's definitions of the warp-level
# instructions; it proves the kernels' indexing, pipeline and numerics,
# not their speed or the hardware (tests/gpu/run.sh does).
# Each runs under three orders of the emulated threads, blocks and
# streams' deferred work (CUEMU_ORDER, tests/cudafake/cuemu.h): forward,
# reverse and random with seed CUEMU_SEED (default 1), so that a missing
# barrier or stream synchronisation shows in at least one of them.
# Exit 77 only without nvcc (the double is not built).
B=${B:-build}
fake=$B/tests/cudafake/libcuda.so.1
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$fake" "$B/tests/gpu/test-kvk-gpu" "$B/tests/gpu/test-kvk-gpu-edit"
for arch in 90 80; do
	for order in forward reverse "random:${CUEMU_SEED:-1}"; do
		echo "== sm_$arch, CUEMU_ORDER=$order"
		for t in test-kvk-gpu test-kvk-gpu-edit; do
			KVPOOL_LIBCUDA=$fake KVPOOL_FAKE_CUDA_EXEC=1 \
			KVPOOL_FAKE_CUDA_ARCH=$arch CUEMU_ORDER=$order \
			KVPOOL_FAKE_CUDA_MEM=$((4 << 30)) \
				"$B/tests/gpu/$t" --quick || exit 1
		done
	done
done
