#!/bin/sh
# SPDX-License-Identifier: MIT
# test-scrub.sh on the cuda backend against the driver test double
# (kernels emulated): a GPU block another tenant used last is zeroed
# with cuMemsetD32Async on a stream before it is read, in the data plane
# and in swap jobs; the double checks every memset (context, stream,
# alignment, inside mapped device memory) and the daemon exits with
# every driver resource released.
FAKE=${FAKE:-build/tests/cudafake/libcuda.so.1}
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$FAKE"
emu_orders "$0" "$@"
LOG=$(mktemp /tmp/kvpool-scrub-cuda.XXXXXX) || exit 1
trap 'rm -f "$LOG"' EXIT
KVPOOL_LIBCUDA=$PWD/$FAKE KVPOOL_FAKE_CUDA_EXEC=1 KVPOOL_FAKE_CUDA_LOG=$LOG \
	BACKEND=cuda "$(dirname "$0")/test-scrub.sh" || exit 1
grep -q "VIOLATION" "$LOG" && { grep VIOLATION "$LOG"; echo "FAIL: the test double saw a violation"; exit 1; }
n=$(grep -c "^memset32 " "$LOG")
[ "$n" -gt 0 ] || { echo "FAIL: no cuMemsetD32Async on the GPU pool"; exit 1; }
echo "PASS: $n GPU memsets zeroed blocks for another tenant"
