#!/bin/sh
# SPDX-License-Identifier: MIT
# libkvlease sequences through kvpoold: blocks leased in batches, a fork
# shares full blocks and copies the partial one, a write into a shared block
# copies it (copy-on-write) without touching the parent, truncate and free
# return blocks to the cache, trim gives them back to the ledger.
. "$(dirname "$0")/lib.sh"

start_daemon
"$UTIL" seqs "$SOCK" || fail "sequences"
daemon_alive
