#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoold on a GPU (cuda backend).  Needs an NVIDIA GPU (exit 77 without).
#  - builds what it needs;
#  - records the device's used memory before kvpoold starts, at idle (no
#    chunk mapped: only the CUDA context), with 2 GiB of blocks leased, and
#    after release + the shrink delay (chunks unmapped and released);
#  - runs the end-to-end tenants (4 KV layouts) against the cuda daemon:
#    every output is compared with the CPU reference (kvk_decode_ref /
#    kvk_prefill_ref) inside e2e-tenant.
# Run from the repository root: tests/gpu/daemon-gpu.sh
command -v nvidia-smi >/dev/null 2>&1 || { echo "no nvidia-smi: no GPU"; exit 77; }
nvidia-smi -L 2>/dev/null | grep -q "^GPU" || { echo "no NVIDIA GPU"; exit 77; }

make -j"$(nproc)" build/bin/kvpoold build/tests/e2e/e2e-tenant \
	build/tests/e2e/e2e-util >/dev/null || { echo "FAIL: build"; exit 1; }
[ -f build/lib/kvpool_kernels.fatbin ] || { echo "FAIL: no fatbin (nvcc?)"; exit 1; }

BACKEND=cuda
export BACKEND
. tests/e2e/lib.sh

mem() {	# MiB used on device 0
	nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 |
		tr -d ' '
}

before=$(mem)
start_daemon
grep -q "cuda backend" "$DLOG" || fail "kvpoold did not pick the cuda backend"
"$UTIL" wait-mapped "$SOCK" 0 3000 || fail "idle daemon has chunks mapped"
sleep 0.5
idle=$(mem)
# 2048 blocks of 64 KiB = 128 MiB is the e2e pool; lease all of it.
"$UTIL" hold "$SOCK" "" 2048 "$TMP/h.ready" &
hpid=$!
PIDS=$hpid
i=0
while [ ! -s "$TMP/h.ready" ]; do
	[ $i -lt 200 ] || fail "holder did not lease"
	sleep 0.1
	i=$((i + 1))
done
sleep 0.5
loaded=$(mem)
"$UTIL" status "$SOCK"
kill $hpid
wait $hpid 2>/dev/null
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks not returned"
"$UTIL" wait-mapped "$SOCK" 0 5000 || fail "chunks not unmapped after the delay"
sleep 0.5
after=$(mem)
echo "GPU used memory (MiB): before kvpoold $before, idle $idle, 2048 blocks (128 MiB) leased $loaded, after shrink $after"
[ "$loaded" -ge $((idle + 120)) ] || fail "device memory did not rise with the leases"
[ "$after" -le $((idle + 8)) ] || fail "device memory did not fall back to idle"

pids=
for n in 1 2 3 4; do
	tenant_run $n &
	pids="$pids $!"
done
PIDS=$pids
# shellcheck disable=SC2086
wait_pids_ok $pids || { cat "$TMP"/t*.out "$TMP"/t*.err; fail "a tenant failed against the cuda backend"; }
cat "$TMP"/t*.out
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
daemon_alive
echo "PASS: cuda backend: lazy device memory, outputs equal the CPU reference"
