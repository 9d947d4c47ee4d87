#!/bin/sh
# SPDX-License-Identifier: MIT
# The libkvlease example program runs against a private kvpoold.
. "$(dirname "$0")/lib.sh"

EX=${EXAMPLE:-build/bin/kvlease-example}
[ -x "$EX" ] || { echo "missing $EX (run make)"; exit 1; }
start_daemon
"$EX" --socket "$SOCK" || fail "example"
KVPOOL_SOCKET=$SOCK "$EX" || fail "example with \$KVPOOL_SOCKET"
daemon_alive
