#!/bin/sh
# SPDX-License-Identifier: MIT
# Bad edits: through libkvlease (splice beyond the length, no RoPE data,
# unsorted compact lists, bad budgets and RoPE data: the error, sequence
# unchanged) and as raw records (a table naming another client's block,
# reserved fields, bad RoPE data, unsorted keep lists, a table naming the
# caller's block twice: -EINVAL; a score beyond ATTN's bound of work and,
# with blocks of 8 MiB, a splice or compaction rewriting more than a COPY
# moves: -E2BIG, while a compaction of as long a sequence that rewrites
# one block is not refused for its size; each with the other client's
# block unchanged and the daemon still serving).
. "$(dirname "$0")/lib.sh"

start_daemon
"$E2E_BIN/e2e-edits" "$SOCK" bad || fail "bad edits (library)"
for c in splice-not-held compact-not-held score-not-held compact-unsorted \
	splice-reserved rope-bad splice-repeat compact-repeat score-repeat \
	score-big; do
	"$UTIL" bad "$SOCK" "$c" || fail "bad request $c"
done
daemon_alive
kill "$DPID"
wait "$DPID"
DPID=

start_daemon --block-bytes 8388608 --capacity 1024
for c in splice-big compact-big compact-long; do
	"$UTIL" bad "$SOCK" "$c" || fail "bad request $c"
done
daemon_alive
