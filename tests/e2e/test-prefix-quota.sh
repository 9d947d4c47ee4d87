#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: cached blocks count in the tenant's current; a sequence
# that needs room under the tenant's max gets it from unreferenced cached
# blocks (and -EDQUOT once there are none); eviction is least recently
# used first, the deepest blocks of a sequence before its first ones.
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant q:12 --tenant lru
"$PFX" quota "$SOCK" q 12 || fail "quota"
"$PFX" lru "$SOCK" lru || fail "lru"
"$PFX" stats "$SOCK" q
"$PFX" stats "$SOCK" lru
daemon_alive
