#!/bin/sh
# SPDX-License-Identifier: MIT
# Device buffers and module mode through the binding
# (python/tests/test_device.py): device buffers against kvpoold's cuda
# backend on the CUDA driver's test double (built when nvcc is there, as
# for tests/e2e/test-devbuf.sh), kernels run on its host emulation; the
# torch wrapping needs a GPU and module mode /dev/kvpool (both skip
# without).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../../tests/nvcc.sh"
FAKE=${FAKE:-$B/tests/cudafake/libcuda.so.1}
need_nvcc_built "$FAKE" "$B/lib/kvpool_kernels.fatbin"
need_modules numpy pytest
KVPOOL_FAKE_LIBCUDA=$(realpath "$FAKE")
export KVPOOL_FAKE_LIBCUDA
d=$(dirname "$0")
run_pytest "$d/test_device.py"
