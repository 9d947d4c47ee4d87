#!/bin/sh
# SPDX-License-Identifier: MIT
# Names of 32 bytes (no NUL in the field) are refused with -EINVAL in
# TENANT_ADD, TENANT_LIST, HELLO and ATTACH instead of being cut to 31.
. "$(dirname "$0")/lib.sh"

start_daemon
"$UTIL" names "$SOCK" || fail "names"
daemon_alive
