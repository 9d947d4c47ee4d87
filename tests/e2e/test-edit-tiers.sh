#!/bin/sh
# SPDX-License-Identifier: MIT
# Edits with lower tiers: the relief list compresses a sequence that has a
# budget before it swaps; a swapped sequence refuses edits (-EBUSY) until
# swapped in; an edited sequence swapped out and in keeps its keys.
. "$(dirname "$0")/lib.sh"

start_tiers_daemon
"$E2E_BIN/e2e-edits" "$SOCK" tiers || fail "edits with tiers"
tiers_idle
daemon_alive
