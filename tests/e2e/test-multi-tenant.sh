#!/bin/sh
# SPDX-License-Identifier: MIT
# kvpoold + 4 tenant processes with different KV layouts (bf16, fp8, int8,
# int4) writing K/V and running decode and multi-token attention at the
# same time; every output matches kvk_decode_ref/kvk_prefill_ref.  After
# they exit, nothing is leased, and at exit the daemon's deepest
# connection-thread stack left half of the stack unused.
. "$(dirname "$0")/lib.sh"

start_daemon
tenants_start
PIDS=$pids
# shellcheck disable=SC2086
wait_pids_ok $pids || { cat "$TMP"/t*.out "$TMP"/t*.err; fail "a tenant failed"; }
cat "$TMP"/t*.out
"$UTIL" wait-used "$SOCK" 0 5000 || fail "blocks leaked"
daemon_alive
"$UTIL" status "$SOCK"
stop_daemon
echo "PASS: 4 tenants, outputs equal the reference"
