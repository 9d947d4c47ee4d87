#!/bin/sh
# SPDX-License-Identifier: MIT
# Bad edits: through libkvlease (splice beyond the length, no RoPE data,
# unsorted compact lists, bad budgets and RoPE data: the error, sequence
# unchanged) and as raw records (a table naming another client's block,
# reserved fields, bad RoPE data, unsorted keep lists: the error, the other
# client's block unchanged, the daemon still serving).
. "$(dirname "$0")/lib.sh"

start_daemon
"$E2E_BIN/e2e-edits" "$SOCK" bad || fail "bad edits (library)"
for c in splice-not-held compact-not-held score-not-held compact-unsorted \
	splice-reserved rope-bad; do
	"$UTIL" bad "$SOCK" "$c" || fail "bad request $c"
done
daemon_alive
