#!/bin/sh
# SPDX-License-Identifier: MIT
# Descriptors passed with records (an empty record, a short one, too many
# for the op) are all closed by the daemon: with 40 such connections open
# it holds only their sockets, and after they close exactly what it held
# before; a well-behaved client is then served.
. "$(dirname "$0")/lib.sh"

start_daemon
"$UTIL" fd-leak "$SOCK" "$DPID" 40 || fail "fd-leak"
daemon_alive
