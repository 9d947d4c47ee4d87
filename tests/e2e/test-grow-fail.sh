#!/bin/sh
# SPDX-License-Identifier: MIT
# When the backend cannot give memory (simulated with --backing-limit), the
# grow fails cleanly: the waiting client gets -ENOMEM, the daemon keeps
# serving and smaller leases still work.
. "$(dirname "$0")/lib.sh"

start_daemon --backing-limit 64
"$UTIL" nomem "$SOCK" 64 || fail "nomem"
daemon_alive
