#!/bin/sh
# SPDX-License-Identifier: MIT
# A tenant's max holds through the daemon path (-EDQUOT at once, shared by
# the tenant's clients, partial grants stop at max).
. "$(dirname "$0")/lib.sh"

start_daemon --tenant q:8
"$UTIL" quota "$SOCK" q 8 || fail "quota"
"$UTIL" tenant "$SOCK" q
daemon_alive
