#!/bin/sh
# SPDX-License-Identifier: MIT
# A malformed request (oversized) gets an error record; the same connection,
# another client's blocks and a new client keep working.
. "$(dirname "$0")/lib.sh"

start_daemon
"$UTIL" bad "$SOCK" oversized || fail "oversized"
daemon_alive
