#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache, bad input: publish of blocks not held or not full, of a
# repeated block, of a cached block not referenced; match without a model
# identity or outside the region; a mismatched model identity (misses);
# attention, reads and copies naming a cached block the caller does not
# reference; bad unrefs.  Clear errors, nothing changed, the connections
# keep working.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant app
"$PFX" bad "$SOCK" app || fail "bad input"
daemon_alive
