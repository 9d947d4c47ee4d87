#!/bin/sh
# SPDX-License-Identifier: MIT
# Prefix cache: a write into a shared cached block copies it first
# (copy-on-write, also through a fork); the other sequences and later
# matches read the cached values unchanged; a raw write into a cached block
# is refused (-EROFS).
. "$(dirname "$0")/lib.sh"
PFX="$E2E_BIN/e2e-prefix"
[ -x "$PFX" ] || { echo "missing $PFX (run make)"; exit 1; }

start_daemon --tenant app
"$PFX" cow "$SOCK" app || fail "copy-on-write"
daemon_alive
