#!/bin/sh
# SPDX-License-Identifier: MIT
# A client that attaches its lease to another tenant after HELLO (in
# process here, with the module in tests/vm/guest.d/iso-module.sh): the
# prefix cache's MATCH, PUBLISH and EVICT act for the new tenant, never
# the old one, and the references taken for a tenant go when the lease
# leaves it.
. "$(dirname "$0")/lib.sh"
ISO="$E2E_BIN/e2e-iso"
[ -x "$ISO" ] || { echo "missing $ISO (run make)"; exit 1; }

start_daemon --tenant ta --tenant tb
"$ISO" retenant "$SOCK" ta tb >"$TMP/t1.out" 2>&1 || {
	cat "$TMP/t1.out"; fail "retenant"; }
cat "$TMP/t1.out"
daemon_alive
echo "PASS: the daemon acts for the lease's tenant of the moment"
