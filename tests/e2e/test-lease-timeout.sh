#!/bin/sh
# SPDX-License-Identifier: MIT
# A LEASE with the largest timeout (2^64 - 1 ns) waits for blocks instead of
# failing at once with -ETIMEDOUT (the deadline saturates).
. "$(dirname "$0")/lib.sh"

start_daemon --capacity 64
"$UTIL" lease-timeout "$SOCK" || fail "lease-timeout"
daemon_alive
