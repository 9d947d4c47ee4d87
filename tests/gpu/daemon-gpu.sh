#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoold on a GPU (cuda backend).  Needs an NVIDIA GPU (exit 77 without).
#  - records the device's used memory before kvpoold starts, at idle (no
#    chunk mapped: only the CUDA context), with 2048 blocks (128 MiB)
#    leased, and after release + the shrink delay (chunks unmapped, the
#    spare chunk released one delay later);
#  - runs the end-to-end tenants (4 KV layouts) against the cuda daemon:
#    every output is compared with the CPU reference inside e2e-tenant;
#  - a GPU tenant with its queries, K/V and outputs in a device buffer
#    (e2e-devbuf: exported, imported and mapped by the daemon), equal to
#    the host path and the reference; every device-buffer refusal.
# Expects the programs built (tests/gpu/run.sh builds them); B= picks the
# build directory.  Run from the repository root.
command -v nvidia-smi >/dev/null 2>&1 || { echo "no nvidia-smi: no GPU"; exit 77; }
nvidia-smi -L 2>/dev/null | grep -q "^GPU" || { echo "no NVIDIA GPU"; exit 77; }

B=${B:-build}
KVPOOLD=${KVPOOLD:-$B/bin/kvpoold}
E2E_BIN=${E2E_BIN:-$B/tests/e2e}
BACKEND=cuda
export BACKEND KVPOOLD E2E_BIN
. tests/e2e/lib.sh
[ -f "$B/lib/kvpool_kernels.fatbin" ] || fail "no $B/lib/kvpool_kernels.fatbin"

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
sleep 2	# the spare chunk goes one shrink delay later (main loop: 1 s)
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
"$E2E_BIN/e2e-devbuf" --socket "$SOCK" || fail "device buffers on the GPU"
"$UTIL" devbuf-bad "$SOCK" || fail "device-buffer refusals"
daemon_alive
echo "PASS: cuda backend: lazy device memory, outputs equal the CPU reference, device buffers"
