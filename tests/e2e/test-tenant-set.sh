#!/bin/sh
# SPDX-License-Identifier: MIT
# TENANT_SET validates every field before it applies any: a valid max with
# an invalid min, a max below the min, a min above the max change nothing;
# max and min lowered together in one request work.
. "$(dirname "$0")/lib.sh"

start_daemon
"$UTIL" tenant-set "$SOCK" || fail "tenant-set"
daemon_alive
