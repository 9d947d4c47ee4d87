#!/bin/sh
# SPDX-License-Identifier: MIT
# A daemon with a descriptor limit of 64 (then 65, so that one of the two
# runs out exactly at an accept) and 60 connections held open at once: the
# ones beyond the limit are refused at once (accepted on a spare descriptor
# and closed, KVP_EV_REFUSED -EMFILE), the daemon does not spin meanwhile,
# and once they close it holds what it held before and serves a
# well-behaved client.
. "$(dirname "$0")/lib.sh"

command -v prlimit >/dev/null || { echo "prlimit missing (util-linux)"; exit 1; }
for lim in 64 65; do
	start_daemon --max-clients 1000
	prlimit --pid "$DPID" --nofile=$lim:$lim || fail "prlimit"
	"$UTIL" fd-exhaust "$SOCK" "$DPID" 60 || fail "fd-exhaust at $lim"
	daemon_alive
	kill "$DPID"; wait "$DPID" 2>/dev/null; DPID=
done
grep -q "no descriptor left" "$DLOG" || fail "no refusal logged"
