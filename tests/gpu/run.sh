#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The GPU check, one shot, for a bare machine with an NVIDIA GPU (gcc,
# make, the driver, perhaps a CUDA toolkit and PyTorch; nothing else need
# be installed).  Every step runs under a timeout, a failing step does not
# stop the others, and everything goes under $OUT (default build/gpu-out).
#
# The kernels: best built beforehand, on a machine with nvcc, with
#   tests/gpu/run.sh --prepare
# which builds build/lib/kvpool_kernels.fatbin (sm_80 and sm_90 code),
# build/lib/kvpool_kernels.compat.ptx (PTX ISA 7.8, which a driver of CUDA
# 11.8 or later compiles itself), ptxas' report
# build/obj/kernels/kvpool_kernels.usage and build/lib/kvpool_kernels.toolkit
# (the toolkit's release), and exits 0, or 1 when any of it fails to build.
# Carry those four files to the GPU machine with the tree.  There the
# fatbin is used when the driver accepts the toolkit that built it (CUDA
# 13.x: driver 580 or later; 12.x: 525 or later; 11.x: 450 or later), and
# the machine's minutes go to running.  With an older driver, or with no
# carried fatbin, the kernels are built there with the nvcc found on PATH
# or in /usr/local/cuda*; without one an older driver still loads the
# compatible PTX (kernels/kvkern_cuda.c falls back to it).
#
#   step          limit  what
#   probes         45 s  nvidia-smi -L, -q and the CSV query (5 s each),
#                        nvcc --version (5 s), import torch (20 s), and
#                        1 s kill grace after each
#   build         110 s  kvpoold, libkvlease, the GPU tests and the
#                        daemon's e2e programs into build/gpu-run.
#                        Missing libcap or libnl headers drop features,
#                        reported
#   kernels      (110 s) at the same time, only when no carried fatbin
#                        serves: the fatbin with this machine's nvcc
#   spills          5 s  ptxas' report: no kernel spills
#   test-kvk-gpu   70 s  every op against the CPU, the primitive
#                        self-test, GQA 1..16, head_dim 32..256, the
#                        66,000-CTA prefill
#   test-kvk-gpu-edit 35 s the edit ops (splice, compact, score) against
#                        the CPU, every dtype
#   memcheck       30 s  compute-sanitizer memcheck, test-kvk-gpu --small
#                        (the quick grid without the big prefill)
#   racecheck      30 s  compute-sanitizer racecheck, the same
#   bench-kvk-gpu  60 s  decode KV GB/s against the same run's read
#                        kernel, per dtype and shape, judged at 32K x 16:
#                        0.85 for BF16, 0.7 for FP8 and INT8, INT4 3x
#                        BF16's tokens/s ("falls short" where not);
#                        chunk grow/shrink latency
#   bench-edits    40 s  kvpool-bench-edits --gpu: splice and compaction
#                        GB/s, against a re-prefill, on the GPU
#   sdpa-peer      30 s  PyTorch scaled_dot_product_attention, same
#                        shapes, BF16 (when `import torch` works)
#   daemon-gpu     35 s  kvpoold's cuda backend: device memory follows
#                        the leases, tenants against the CPU reference,
#                        device buffers (zero-copy)
#   cuda-keep      12 s  test-cuda-keep: the backend's chunks kept across
#                        processes (exported, imported in a new process
#                        with their bytes, mismatches refused, freed by a
#                        shrink), 20 MiB of device memory
#   kill grace     33 s  3 s after each of the 11 step limits (timeout -k)
#   worst case    535 s  on paper: probes 45 + steps 457 + grace 33, under
#                        a 540 s budget (printed at the start)
#
# Prints each step's PASS / FAIL / SKIP, the judgement and the benchmark
# tables, and writes $OUT/summary.txt.  Exit 0 when nothing failed, 1
# when a step failed (a kernel build that fails or times out is one, and
# no fatbin at all is another), 77 only when the machine has no NVIDIA GPU:
# at once when neither nvidia-smi nor /dev/nvidiactl says there is one, or
# when test-kvk-gpu finds no libcuda.so.1 or no device and nothing failed
# before it.

cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-build/gpu-out}
GRACE=3
# the limits of the table above; the sum is the worst case on paper
L_PROBES=45 L_BUILD=${BUILD_TIMEOUT:-110} L_SPILLS=5 L_TEST=70 L_EDIT=35
L_MEMCHECK=30 L_RACECHECK=30 L_BENCH=60 L_EDITS=40 L_SDPA=30 L_DAEMON=35
L_KEEP=12
KT=${KERNELS_TIMEOUT:-$L_BUILD}

# nvcc: PATH, then the usual toolkit places
find_nvcc() {
	NVCC=$(command -v nvcc 2>/dev/null)
	if [ -z "$NVCC" ]; then
		for n in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
			[ -x "$n" ] && NVCC=$n
		done
	fi
}

# The lowest driver (major version) that accepts a toolkit's code:
# CUDA's minor version compatibility within 11.x, 12.x and 13.x.
min_driver() {
	case $1 in
	13.*) echo 580 ;;
	12.*) echo 525 ;;
	11.*) echo 450 ;;
	*) echo 9999 ;;
	esac
}

# --prepare: the kernels, built here, for carrying to the GPU machine.
if [ "${1:-}" = --prepare ]; then
	find_nvcc
	if [ -z "$NVCC" ]; then
		echo "gpu run --prepare: no nvcc here: FAIL"
		exit 1
	fi
	rel=$(timeout 10 "$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
	make -j"${JOBS:-2}" NVCC="$NVCC" build/lib/kvpool_kernels.fatbin \
		build/lib/kvpool_kernels.compat.ptx \
		build/obj/kernels/kvpool_kernels.usage || {
		echo "gpu run --prepare: the kernels failed to build: FAIL"
		exit 1
	}
	echo "$rel" > build/lib/kvpool_kernels.toolkit
	echo "gpu run --prepare: kernels built with CUDA $rel (a driver of" \
	     "$(min_driver "$rel") or later runs the fatbin, CUDA 11.8's or" \
	     "later the compatible PTX); carry:"
	echo "  build/lib/kvpool_kernels.fatbin build/lib/kvpool_kernels.compat.ptx"
	echo "  build/lib/kvpool_kernels.toolkit build/obj/kernels/kvpool_kernels.usage"
	exit 0
fi
if [ $# -gt 0 ]; then
	echo "usage: $0 [--prepare]" >&2
	exit 2
fi

# No GPU: say so before building anything.
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /dev/nvidiactl ]; then
	echo "gpu run: no NVIDIA driver (no nvidia-smi, no /dev/nvidiactl): skipped"
	exit 77
fi
if command -v nvidia-smi >/dev/null 2>&1 &&
   ! timeout -k 1 5 nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
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
	timeout -k $GRACE "$to" "$@" > "$OUT/$name.log" 2>&1
	rc=$?
	record "$name" "$to" $rc $(( $(date +%s) - s ))
	return $rc
}

skip() {
	log "$(printf '%-14s %-5s %4ss  %s' "$1" SKIP 0 "$2")"
}

log "gpu run: $(date -u) on $(hostname)"
steps=$((L_BUILD + L_SPILLS + L_TEST + L_EDIT + L_MEMCHECK + L_RACECHECK + \
	L_BENCH + L_EDITS + L_SDPA + L_DAEMON + L_KEEP))
log "worst case on paper: probes $L_PROBES + steps $steps + kill grace" \
    "$((11 * GRACE)) = $((L_PROBES + steps + 11 * GRACE)) s (budget 540 s)"
timeout -k 1 5 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
	--format=csv,noheader > "$OUT/nvidia-smi.csv" 2>&1
timeout -k 1 5 nvidia-smi -q > "$OUT/nvidia-smi.txt" 2>&1
head -n 1 "$OUT/nvidia-smi.csv" | sed 's/^/gpu: /' | tee -a "$SUMMARY"
DRV=$(head -n 1 "$OUT/nvidia-smi.csv" | cut -d, -f2 | tr -d ' ')
DRV_MAJOR=$(echo "$DRV" | sed -n 's/^\([0-9][0-9]*\).*/\1/p')

find_nvcc
NVCC_VER=
[ -n "$NVCC" ] && NVCC_VER=$(timeout -k 1 5 "$NVCC" --version | tail -n 1)
SAN=$(command -v compute-sanitizer 2>/dev/null)
if [ -z "$SAN" ]; then
	for n in /usr/local/cuda/bin/compute-sanitizer \
		 /usr/local/cuda-*/bin/compute-sanitizer \
		 /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
		[ -x "$n" ] && SAN=$n
	done
fi
TORCH=0
timeout -k 1 20 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
	> "$OUT/torch.txt" 2>&1 && TORCH=1
{
	echo "nvcc: ${NVCC:-none} $NVCC_VER"
	echo "compute-sanitizer: ${SAN:-none}"
	echo "gcc: $(gcc --version | head -n 1)"
	echo "cores: $J"
	tail -n 1 "$OUT/torch.txt"
} | tee "$OUT/env.txt" | tee -a "$SUMMARY"

# ---- build ----
# The kernels: the carried fatbin when the driver accepts its toolkit,
# else built here (at the same time as the host programs, under its own
# limit, so that a slow or broken toolkit costs only the kernels), else
# the carried one as it is (an older driver loads its compatible PTX).
PROGS="$B/bin/kvpoold $B/lib/libkvlease.so.1 $B/tests/gpu/test-kvk-gpu
$B/tests/gpu/bench-kvk-gpu $B/tests/e2e/e2e-tenant $B/tests/e2e/e2e-util
$B/tests/e2e/e2e-devbuf $B/tests/gpu/test-kvk-gpu-edit $B/bin/kvpool-bench-edits
$B/tests/gpu/test-cuda-keep"
KSRC=none
use_carried() {
	mkdir -p $B/lib $B/obj/kernels
	rm -f $B/lib/kvpool_kernels.fatbin $B/lib/kvpool_kernels.compat.ptx \
	      $B/obj/kernels/kvpool_kernels.usage
	for f in build/lib/kvpool_kernels.fatbin \
		 build/lib/kvpool_kernels.compat.ptx; do
		[ -f "$f" ] && cp "$f" $B/lib/
	done
	[ -f build/obj/kernels/kvpool_kernels.usage ] &&
		cp build/obj/kernels/kvpool_kernels.usage $B/obj/kernels/
	KSRC=$1
}
if [ -f build/lib/kvpool_kernels.fatbin ] &&
   [ -f build/lib/kvpool_kernels.toolkit ]; then
	krel=$(cat build/lib/kvpool_kernels.toolkit)
	kmin=$(min_driver "$krel")
	if [ -n "$DRV_MAJOR" ] && [ "$DRV_MAJOR" -ge "$kmin" ]; then
		use_carried "carried, built with CUDA $krel (driver $DRV >= $kmin)"
	else
		log "  kernels: the carried fatbin (CUDA $krel) needs driver $kmin or later, this is ${DRV:-unknown}"
	fi
fi
if [ "$KSRC" = none ] && [ -n "$NVCC" ]; then
	# built anew: not a copy a previous run left
	rm -f $B/lib/kvpool_kernels.fatbin $B/lib/kvpool_kernels.compat.ptx \
	      $B/obj/kernels/kvpool_kernels.usage
	ks=$(date +%s)
	(
		timeout -k $GRACE "$KT" make -j"$J" B=$B NVCC="$NVCC" \
			KVK_NVCC_EXTRA="--threads 0" \
			$B/lib/kvpool_kernels.fatbin \
			$B/lib/kvpool_kernels.compat.ptx > "$OUT/kernels.log" 2>&1
		echo $? > "$OUT/kernels.rc"
	) &
	kpid=$!
fi
# shellcheck disable=SC2086
step build "$L_BUILD" make -j"$J" B=$B NVCC=/nonexistent/nvcc $PROGS
grep -h "^daemon: \|^libkvlease: \|^kernels: " "$OUT/build.log" 2>/dev/null |
	sort -u | sed 's/^/  skipped at build: /' | tee -a "$SUMMARY"
if [ -n "${kpid:-}" ]; then
	wait $kpid
	krc=$(cat "$OUT/kernels.rc" 2>/dev/null || echo 1)
	record kernels "$KT" "$krc" $(( $(date +%s) - ks ))
	if [ "$krc" = 0 ]; then
		KSRC="built here with $NVCC_VER"
	else
		tail -n 20 "$OUT/kernels.log"
	fi
fi
if [ "$KSRC" = none ] && [ -f build/lib/kvpool_kernels.fatbin ]; then
	use_carried "carried, toolkit $(cat build/lib/kvpool_kernels.toolkit 2>/dev/null || echo unknown), as it is"
fi
if [ "$KSRC" = none ]; then
	log "  kernels: none (no nvcc that built them, no build/lib/kvpool_kernels.fatbin): FAIL"
	FAILED=1
else
	log "  kernels: $KSRC"
fi
export KVPOOL_FATBIN=$PWD/$B/lib/kvpool_kernels.fatbin

# ---- tests ----
if [ -f $B/obj/kernels/kvpool_kernels.usage ]; then
	step spills "$L_SPILLS" env B=$B tests/kernels/test-ptxas-spills.sh
	grep -h "kernel reports" "$OUT/spills.log" | sed 's/^/  /' |
		tee -a "$SUMMARY"
else
	skip spills "no ptxas report (carry build/obj/kernels/kvpool_kernels.usage)"
fi

step test-kvk-gpu "$L_TEST" $B/tests/gpu/test-kvk-gpu
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

step test-kvk-gpu-edit "$L_EDIT" $B/tests/gpu/test-kvk-gpu-edit

if [ -n "$SAN" ]; then
	# small shapes only: the sanitizers slow kernels 10-100x
	step memcheck "$L_MEMCHECK" "$SAN" --tool memcheck --error-exitcode 1 \
		--print-limit 20 $B/tests/gpu/test-kvk-gpu --small
	step racecheck "$L_RACECHECK" "$SAN" --tool racecheck --error-exitcode 1 \
		--print-limit 20 $B/tests/gpu/test-kvk-gpu --small
	grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/memcheck.log" \
		"$OUT/racecheck.log" 2>/dev/null | sed 's/^/  /' | tee -a "$SUMMARY"
else
	skip memcheck "no compute-sanitizer"
	skip racecheck "no compute-sanitizer"
fi

step bench-kvk-gpu "$L_BENCH" $B/tests/gpu/bench-kvk-gpu
tail -n 1 "$OUT/bench-kvk-gpu.log" > "$OUT/bench-kvk-gpu.json"
grep -h "^device read bandwidth\|^judge " "$OUT/bench-kvk-gpu.log" |
	sed 's/^/  /' | tee -a "$SUMMARY"

step bench-edits "$L_EDITS" $B/bin/kvpool-bench-edits --gpu
tail -n 1 "$OUT/bench-edits.log" > "$OUT/bench-edits.json"

if [ $TORCH = 1 ]; then
	step sdpa-peer "$L_SDPA" python3 tests/gpu/sdpa_peer.py
	tail -n 1 "$OUT/sdpa-peer.log" > "$OUT/sdpa-peer.json"
else
	skip sdpa-peer "python3 cannot import torch"
fi

step daemon-gpu "$L_DAEMON" env B=$B tests/gpu/daemon-gpu.sh
grep -h "GPU used memory\|device buffer\|PASS\|FAIL" "$OUT/daemon-gpu.log" |
	sed 's/^/  /' | tee -a "$SUMMARY"

step cuda-keep "$L_KEEP" $B/tests/gpu/test-cuda-keep
grep -h "^reader: free\|^refuse: free\|FAIL\|PASS" "$OUT/cuda-keep.log" |
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
