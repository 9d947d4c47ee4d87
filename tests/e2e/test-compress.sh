#!/bin/sh
# SPDX-License-Identifier: MIT
# Token-wise compression through libkvlease and kvpoold: the needle at
# 32,768 tokens survives a budget of 2,048 (sinks, window, positions kept,
# blocks back in the ledger), compression when a sequence reaches its
# budget, and the pressure hook kvl_compress_reclaim().
. "$(dirname "$0")/lib.sh"

start_daemon
"$E2E_BIN/e2e-edits" "$SOCK" compress || fail "compress"
"$UTIL" wait-used "$SOCK" 0 3000 || fail "blocks left leased"
daemon_alive
