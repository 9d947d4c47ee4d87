#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: another tenant never hits a tenant's cache (keys are
# salted per tenant); a shared namespace that two tenants join (the
# operator's choice) lets them hit each other's blocks, charged to the
# publisher; a third tenant stays out; leaving the namespace stops it.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant ta --tenant tb --tenant tc
"$PFX" tenants "$SOCK" ta tb tc || fail "tenants"
daemon_alive
