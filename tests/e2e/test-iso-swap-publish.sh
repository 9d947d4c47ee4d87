#!/bin/sh
# SPDX-License-Identifier: MIT
# Tenant isolation, swap jobs and the prefix cache (in-process ledger; the
# module runs the same in tests/vm/guest.d/iso-module.sh): tenant ta
# queues swap jobs on a block behind other copies, publishes the block,
# drops its reference and evicts it; tenant tb leases a block and fills
# it.  The publish is refused while the jobs have the block pinned
# (-EBUSY), tb reads only what it wrote, ta's DRAM copy holds only ta's
# bytes; after the jobs the publish works.
. "$(dirname "$0")/lib.sh"
ISO="$E2E_BIN/e2e-iso"
[ -x "$ISO" ] || { echo "missing $ISO (run make)"; exit 1; }

start_daemon --tier dram:1024 --tenant ta --tenant tb
"$ISO" swap-publish "$SOCK" ta tb >"$TMP/t1.out" 2>&1 || {
	cat "$TMP/t1.out"; fail "swap-publish"; }
cat "$TMP/t1.out"
daemon_alive
grep -q "swap .* blocks: " "$DLOG" && fail "a swap job failed"
echo "PASS: no tenant reads the other's bytes through swap jobs and the cache"
