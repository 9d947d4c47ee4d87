#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The GPU check, for a machine with an NVIDIA GPU: build the kernels
# (fatbin with nvcc when present), run every op on the GPU against the CPU
# (test-kvk-gpu, test-kvk-gpu-edit), run the GPU decode benchmark
# (bench-kvk-gpu) and the edit benchmark on the GPU (kvpool-bench-edits
# --gpu), then the daemon's GPU test (tests/gpu/daemon-gpu.sh) if it
# exists.  Outputs go to
# $OUT (default build/gpu-out): build.log, test-kvk-gpu.log,
# test-kvk-gpu-edit.log, bench-kvk-gpu.log, bench-kvk-gpu.json,
# bench-edits-gpu.log, bench-edits-gpu.json, nvidia-smi.txt, summary.txt.
# Exit 0 all passed, 77 no GPU, 1 a failure.  Meant to finish well under
# 5 minutes (each step has a timeout).

cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
J=${JOBS:-$(nproc 2>/dev/null || echo 4)}
rc=0

log() { echo "$*" | tee -a "$OUT/summary.txt"; }

: > "$OUT/summary.txt"
log "gpu run: $(date -u) on $(hostname)"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
head -n 15 "$OUT/nvidia-smi.txt" 2>/dev/null

if ! timeout 240 make -j"$J" build/lib/libkvkern.a build/lib/kvpool_kernels.fatbin \
	build/tests/gpu/test-kvk-gpu build/tests/gpu/bench-kvk-gpu \
	build/tests/gpu/test-kvk-gpu-edit build/bin/kvpool-bench-edits \
	> "$OUT/build.log" 2>&1; then
	log "BUILD FAILED (see build.log)"
	tail -n 30 "$OUT/build.log"
	exit 1
fi
log "build: ok"
if [ ! -f build/lib/kvpool_kernels.fatbin ]; then
	log "no build/lib/kvpool_kernels.fatbin (nvcc missing?)"
	exit 1
fi

timeout 150 build/tests/gpu/test-kvk-gpu > "$OUT/test-kvk-gpu.log" 2>&1
t=$?
tail -n 8 "$OUT/test-kvk-gpu.log"
case $t in
0) log "test-kvk-gpu: PASS" ;;
77) log "test-kvk-gpu: SKIP ($(tail -n 1 "$OUT/test-kvk-gpu.log"))"; exit 77 ;;
*) log "test-kvk-gpu: FAIL ($t)"; rc=1 ;;
esac

timeout 120 build/tests/gpu/test-kvk-gpu-edit > "$OUT/test-kvk-gpu-edit.log" 2>&1
t=$?
tail -n 6 "$OUT/test-kvk-gpu-edit.log"
case $t in
0) log "test-kvk-gpu-edit: PASS" ;;
77) log "test-kvk-gpu-edit: SKIP" ;;
*) log "test-kvk-gpu-edit: FAIL ($t)"; rc=1 ;;
esac

timeout 120 build/tests/gpu/bench-kvk-gpu > "$OUT/bench-kvk-gpu.log" 2>&1
b=$?
cat "$OUT/bench-kvk-gpu.log" | head -n 60
tail -n 1 "$OUT/bench-kvk-gpu.log" > "$OUT/bench-kvk-gpu.json"
if [ $b -eq 0 ]; then log "bench-kvk-gpu: ok"; else log "bench-kvk-gpu: FAIL ($b)"; rc=1; fi

timeout 180 build/bin/kvpool-bench-edits --gpu > "$OUT/bench-edits-gpu.log" 2>&1
b=$?
tail -n 12 "$OUT/bench-edits-gpu.log"
tail -n 1 "$OUT/bench-edits-gpu.log" > "$OUT/bench-edits-gpu.json"
if [ $b -eq 0 ]; then log "bench-edits --gpu: ok"; else log "bench-edits --gpu: FAIL ($b)"; rc=1; fi

if [ -x tests/gpu/daemon-gpu.sh ]; then
	timeout 120 tests/gpu/daemon-gpu.sh > "$OUT/daemon-gpu.log" 2>&1
	d=$?
	tail -n 10 "$OUT/daemon-gpu.log"
	case $d in
	0) log "daemon-gpu: PASS" ;;
	77) log "daemon-gpu: SKIP" ;;
	*) log "daemon-gpu: FAIL ($d)"; rc=1 ;;
	esac
fi
log "gpu run: done, rc=$rc"
exit $rc
