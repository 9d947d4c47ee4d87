#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The GPU check, one shot, for a bare machine with an NVIDIA GPU (gcc,
# make, the driver, perhaps a CUDA toolkit and PyTorch; nothing else need
# be installed).  Every step runs under a timeout, a failing step does not
# stop the others, and everything goes under $OUT (default build/gpu-out):
#
#   step          timeout  what
#   build           150 s  kvpoold, libkvlease, the GPU tests and the
#                          daemon's e2e programs into build/gpu-run.
#                          Missing libcap or libnl headers drop features,
#                          reported
#   kernels       (150 s)  at the same time: the fatbin, with the nvcc
#                          found on PATH or in /usr/local/cuda*; without
#                          one (or when it fails) the normal build's
#                          build/lib fatbin is used as it is
#   spills            5 s  ptxas' report: no kernel spills (needs nvcc)
#   test-kvk-gpu     90 s  every op against the CPU, the primitive
#                          self-test, GQA 1..16, head_dim 32..256
#   test-kvk-gpu-edit 45 s the edit ops (splice, compact, score) against
#                          the CPU, every dtype
#   memcheck         35 s  compute-sanitizer memcheck, test-kvk-gpu --quick
#   racecheck        30 s  compute-sanitizer racecheck, the same
#   bench-kvk-gpu    65 s  decode KV GB/s against read bandwidth, per dtype
#                          and shape; chunk grow/shrink latency
#   bench-edits      60 s  kvpool-bench-edits --gpu: splice and compaction
#                          GB/s, against a re-prefill, on the GPU
#   sdpa-peer        40 s  PyTorch scaled_dot_product_attention, same
#                          shapes, BF16 (when `import torch` works)
#   daemon-gpu       40 s  kvpoold's cuda backend: device memory follows
#                          the leases, tenants against the CPU reference,
#                          device buffers (zero-copy)
#   total           560 s  at most, on paper; a few minutes in practice
#
# Prints each step's PASS / FAIL / SKIP and the benchmark tables, and
# writes $OUT/summary.txt.  Exit 0 when nothing failed, 1 when a step
# failed (a kernel build that fails or times out is one, and no fatbin at
# all is another), 77 only when the machine has no NVIDIA GPU: at once
# when neither nvidia-smi nor /dev/nvidiactl says there is one, or when
# test-kvk-gpu finds no libcuda.so.1 or no device and nothing failed
# before it.

cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-build/gpu-out}

# No GPU: say so before building anything.
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /dev/nvidiactl ]; then
	echo "gpu run: no NVIDIA driver (no nvidia-smi, no /dev/nvidiactl): skipped"
	exit 77
fi
if command -v nvidia-smi >/dev/null 2>&1 &&
   ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
	echo "gpu run: nvidia-smi lists no GPU: skipped"
	exit 77
fi

mkdir -p "$OUT"
J=${JOBS:-$(nproc 2>/dev/null || echo 4)}
B=build/gpu-run
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0
T0=$(date +%s)

log() { echo "$*" | tee -a "$SUMMARY"; }

# record NAME TIMEOUT RC SECS: PASS (0), SKIP (77, the log's last line) or
# FAIL (anything else; 124/137: the timeout) into the summary.
record() {
	case $3 in
	0)  res=PASS ;;
	77) res="SKIP ($(tail -n 1 "$OUT/$1.log"))" ;;
	124|137) res="FAIL (timeout after ${2}s)"; FAILED=1 ;;
	*)  res="FAIL (exit $3)"; FAILED=1 ;;
	esac
	log "$(printf '%-14s %-5s %4ss  %s' "$1" "${res%% *}" "$4" \
	       "$(echo "$res" | sed -n 's/^[A-Z]* //p')")"
}

# step NAME TIMEOUT CMD...: runs CMD under the timeout into $OUT/NAME.log
# and records the result.
step() {
	name=$1
	to=$2
	shift 2
	s=$(date +%s)
	timeout -k 5 "$to" "$@" > "$OUT/$name.log" 2>&1
	rc=$?
	record "$name" "$to" $rc $(( $(date +%s) - s ))
	return $rc
}

skip() {
	log "$(printf '%-14s %-5s %4ss  %s' "$1" SKIP 0 "$2")"
}

log "gpu run: $(date -u) on $(hostname)"
{
	timeout 10 nvidia-smi
	timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
	timeout 10 nvidia-smi -q
} > "$OUT/nvidia-smi.txt" 2>&1
timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
	head -n 1 | sed 's/^/gpu: /' | tee -a "$SUMMARY"

# nvcc: PATH, then the usual toolkit places
NVCC=$(command -v nvcc 2>/dev/null)
if [ -z "$NVCC" ]; then
	for n in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
		[ -x "$n" ] && NVCC=$n
	done
fi
SAN=$(command -v compute-sanitizer 2>/dev/null)
if [ -z "$SAN" ]; then
	for n in /usr/local/cuda/bin/compute-sanitizer \
		 /usr/local/cuda-*/bin/compute-sanitizer \
		 /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
		[ -x "$n" ] && SAN=$n
	done
fi
TORCH=0
timeout 30 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
	> "$OUT/torch.txt" 2>&1 && TORCH=1
{
	echo "nvcc: ${NVCC:-none} $([ -n "$NVCC" ] && "$NVCC" --version | tail -n 1)"
	echo "compute-sanitizer: ${SAN:-none}"
	echo "gcc: $(gcc --version | head -n 1)"
	echo "cores: $J"
	tail -n 1 "$OUT/torch.txt"
} | tee "$OUT/env.txt" | tee -a "$SUMMARY"

# ---- build ----
# The host programs (no nvcc involved) and the kernels at the same time,
# each under its own limit, so that a slow or broken toolkit costs only
# the kernels, and the fatbin of the normal build (build/lib, e.g. carried
# from a machine with nvcc) stands in.  The AVX-512 CPU kernels (the
# reference's fast path) are the longest host compile, about a minute.
PROGS="$B/bin/kvpoold $B/lib/libkvlease.so.1 $B/tests/gpu/test-kvk-gpu
$B/tests/gpu/bench-kvk-gpu $B/tests/e2e/e2e-tenant $B/tests/e2e/e2e-util
$B/tests/e2e/e2e-devbuf $B/tests/gpu/test-kvk-gpu-edit $B/bin/kvpool-bench-edits"
KT=${KERNELS_TIMEOUT:-150}
if [ -n "$NVCC" ]; then
	ks=$(date +%s)
	(
		timeout -k 5 "$KT" make -j"$J" B=$B NVCC="$NVCC" \
			KVK_NVCC_EXTRA="--threads 0" \
			$B/lib/kvpool_kernels.fatbin \
			$B/lib/kvpool_kernels.compat.ptx > "$OUT/kernels.log" 2>&1
		echo $? > "$OUT/kernels.rc"
	) &
	kpid=$!
fi
# shellcheck disable=SC2086
step build ${BUILD_TIMEOUT:-150} make -j"$J" B=$B NVCC=/nonexistent/nvcc $PROGS
grep -h "^daemon: \|^libkvlease: \|^kernels: " "$OUT/build.log" 2>/dev/null |
	sort -u | sed 's/^/  skipped at build: /' | tee -a "$SUMMARY"
KSRC=none
if [ -n "$NVCC" ]; then
	wait $kpid
	krc=$(cat "$OUT/kernels.rc" 2>/dev/null || echo 1)
	record kernels "$KT" "$krc" $(( $(date +%s) - ks ))
	if [ "$krc" = 0 ]; then
		KSRC="built here with $("$NVCC" --version | tail -n 1)"
	else
		tail -n 20 "$OUT/kernels.log"
	fi
fi
if [ "$KSRC" = none ] && [ -f build/lib/kvpool_kernels.fatbin ]; then
	mkdir -p $B/lib
	rm -f $B/lib/kvpool_kernels.fatbin $B/lib/kvpool_kernels.compat.ptx
	for f in build/lib/kvpool_kernels.fatbin \
		 build/lib/kvpool_kernels.compat.ptx; do
		[ -f "$f" ] && cp "$f" $B/lib/
	done
	KSRC="the normal build's (build/lib)"
fi
if [ "$KSRC" = none ]; then
	log "  kernels: none (no nvcc that built them, no build/lib/kvpool_kernels.fatbin): FAIL"
	FAILED=1
else
	log "  kernels: $KSRC"
fi
export KVPOOL_FATBIN=$PWD/$B/lib/kvpool_kernels.fatbin

# ---- tests ----
if [ -n "$NVCC" ] && [ -f $B/obj/kernels/kvpool_kernels.usage ]; then
	step spills 5 env B=$B tests/kernels/test-ptxas-spills.sh
else
	skip spills "no nvcc: ptxas' report comes with the build"
fi

step test-kvk-gpu 90 $B/tests/gpu/test-kvk-gpu
gt=$?
grep -h "^device:\|self-test\|worst\|row blocks\|cases" "$OUT/test-kvk-gpu.log" |
	sed 's/^/  /' | tee -a "$SUMMARY"
# 77 from test-kvk-gpu: no libcuda.so.1, or the driver reports no device
# (a missing fatbin or a module that does not load fails it instead).
if [ $gt -eq 77 ]; then
	log "gpu run: no device ($(tail -n 1 "$OUT/test-kvk-gpu.log"))"
	[ $FAILED -eq 0 ] || { log "gpu run: and a step FAILED before"; exit 1; }
	exit 77
fi

step test-kvk-gpu-edit 45 $B/tests/gpu/test-kvk-gpu-edit

if [ -n "$SAN" ]; then
	step memcheck 35 "$SAN" --tool memcheck --error-exitcode 1 \
		--print-limit 20 $B/tests/gpu/test-kvk-gpu --quick
	step racecheck 30 "$SAN" --tool racecheck --error-exitcode 1 \
		--print-limit 20 $B/tests/gpu/test-kvk-gpu --quick
	grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/memcheck.log" \
		"$OUT/racecheck.log" 2>/dev/null | sed 's/^/  /' | tee -a "$SUMMARY"
else
	skip memcheck "no compute-sanitizer"
	skip racecheck "no compute-sanitizer"
fi

step bench-kvk-gpu 65 $B/tests/gpu/bench-kvk-gpu
tail -n 1 "$OUT/bench-kvk-gpu.log" > "$OUT/bench-kvk-gpu.json"

step bench-edits 60 $B/bin/kvpool-bench-edits --gpu
tail -n 1 "$OUT/bench-edits.log" > "$OUT/bench-edits.json"

if [ $TORCH = 1 ]; then
	step sdpa-peer 40 python3 tests/gpu/sdpa_peer.py
	tail -n 1 "$OUT/sdpa-peer.log" > "$OUT/sdpa-peer.json"
else
	skip sdpa-peer "python3 cannot import torch"
fi

step daemon-gpu 40 env B=$B tests/gpu/daemon-gpu.sh
grep -h "GPU used memory\|device buffer\|PASS\|FAIL" "$OUT/daemon-gpu.log" |
	sed 's/^/  /' | tee -a "$SUMMARY"

# ---- summary ----
echo
echo "---- bench-kvk-gpu"
grep -v "^{" "$OUT/bench-kvk-gpu.log"
if [ -s "$OUT/bench-edits.log" ]; then
	echo "---- bench-edits --gpu"
	grep -v "^{" "$OUT/bench-edits.log"
fi
if [ -s "$OUT/sdpa-peer.log" ]; then
	echo "---- sdpa-peer (PyTorch, same run)"
	grep -v "^{" "$OUT/sdpa-peer.log"
fi
echo
log "gpu run: done in $(( $(date +%s) - T0 )) s, $([ $FAILED -eq 0 ] && echo "nothing failed" || echo "a step FAILED")"
echo "logs and figures: $OUT"
[ $FAILED -eq 0 ] || exit 1
exit 0
