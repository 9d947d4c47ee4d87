#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: a reclaim target posted to a tenant (a waiter of a tenant
# below its min) is met from the tenant's unreferenced cached blocks first:
# its process keeps its blocks and gets no target (the counters say so);
# a pool short of free blocks (the ledger's SHORT event) is answered the
# same way.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --capacity 64 --tenant greedy --tenant prot:max:24
"$PFX" reclaim "$SOCK" greedy prot || fail "reclaim"
"$PFX" stats "$SOCK" greedy
daemon_alive
