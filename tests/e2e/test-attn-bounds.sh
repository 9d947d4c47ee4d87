#!/bin/sh
# SPDX-License-Identifier: MIT
# One attention request cannot make the daemon allocate or compute without
# limit: a block table declared as 4096 x 16384 entries (256 MiB) with
# one-token sequences costs only those entries (the daemon's peak memory
# does not follow the declaration), a block named twice in one sequence is
# refused (-EINVAL), and work beyond the bound is refused at once (-E2BIG).
. "$(dirname "$0")/lib.sh"

start_daemon --capacity 16384
"$UTIL" attn-bounds "$SOCK" "$DPID" || fail "attn-bounds"
daemon_alive
