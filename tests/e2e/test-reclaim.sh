#!/bin/sh
# SPDX-License-Identifier: MIT
# Reclaim through the daemon's in-process ledger: a tenant below its min
# waits; the ledger posts a reclaim target to the tenant above its min; that
# client sees its reclaim fd ready (KVP_EV_RECLAIM on the socket), reads the
# target, releases, and the waiter is granted.
. "$(dirname "$0")/lib.sh"

start_daemon --capacity 64 --tenant greedy --tenant prot
"$UTIL" reclaim "$SOCK" greedy prot || fail "reclaim"
daemon_alive
