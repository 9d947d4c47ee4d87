#!/bin/sh
# SPDX-License-Identifier: MIT
# Edits with lower tiers: the relief list compresses a sequence that has a
# budget before it swaps (a reclaim, and an append of tenant pe at its top
# max); a swapped sequence refuses edits (-EBUSY) until swapped in; an
# edited sequence swapped out and in keeps its keys.
. "$(dirname "$0")/lib.sh"

start_tiers_daemon --tenant pe:20
"$E2E_BIN/e2e-edits" "$SOCK" tiers || fail "edits with tiers"
"$E2E_BIN/e2e-edits" "$SOCK" pressure || fail "compression under pressure"
tiers_idle
daemon_alive
