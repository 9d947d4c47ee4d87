#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: with every key forced equal (kvpoold --prefix-hash-bits 0)
# a different token sequence misses and never gets the other's blocks, at
# the first block or deeper in the chain; each sequence still finds its
# own blocks (token ids are verified on every hit).
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant app --prefix-hash-bits 0
"$PFX" collide "$SOCK" app || fail "collisions"
daemon_alive
