#!/bin/sh
# SPDX-License-Identifier: MIT
# Edits and the prefix cache: a splice, a compaction or an append that
# compresses ends the sequence's run of known token ids where its slots
# stop being the tokens at their own positions; such a sequence publishes
# (and others match) only the blocks before the edit, with their keys.
. "$(dirname "$0")/lib.sh"

start_daemon
"$E2E_BIN/e2e-edits" "$SOCK" tokens || fail "token ids after edits"
daemon_alive
