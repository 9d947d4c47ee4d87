#!/bin/sh
# SPDX-License-Identifier: MIT
# More cached tenants than any fixed poll set: 300 tenants with one cached
# block each (4 KiB blocks); the first one's max goes to 0 and its cache
# answers the reclaim target within 5 s, the others keep their blocks.
# The same check runs with the module in the VM (tests/vm/guest.d/
# prefix-module.sh), where the daemon polls one file per cold lease.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || fail "missing $PFX (run make)"

start_daemon --block-bytes 4096 --capacity 1024
"$PFX" many "$SOCK" m 300 || fail "many cached tenants"
"$UTIL" wait-used "$SOCK" 299 5000 || fail "used != 299"
daemon_alive
