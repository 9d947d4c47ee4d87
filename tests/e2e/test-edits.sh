#!/bin/sh
# SPDX-License-Identifier: MIT
# Splices through libkvlease and kvpoold (BF16 NEOX, FP8 GPT-J with a
# frequency table): keys re-rotated to their new positions, V unchanged,
# new slots written next to moved tokens, forks untouched, attention as
# over the edited content.
. "$(dirname "$0")/lib.sh"

start_daemon
"$E2E_BIN/e2e-edits" "$SOCK" splice || fail "splice"
daemon_alive
