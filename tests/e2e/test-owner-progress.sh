#!/bin/sh
# SPDX-License-Identifier: MIT
# The owner never waits behind the data plane: while 3 clients run long
# decode requests back to back (overlapping, so the memory is always in
# use), a new connection's status call is answered within 2 s, and memory
# another client gave back is unmapped meanwhile (new requests wait for a
# due unmap instead of starving it).  A daemon whose owner thread waits for
# the data plane answers after the clients stop (5 s).  (The shrink delay
# is shorter than the probes' interval: each probe's closing connection
# restarts it.)
. "$(dirname "$0")/lib.sh"

start_daemon --shrink-delay-ms 20
"$UTIL" busy "$SOCK" 5 3 || fail "busy"
daemon_alive
