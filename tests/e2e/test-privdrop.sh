#!/bin/sh
# SPDX-License-Identifier: MIT
# Started as root with --user nobody, kvpoold ends up with nobody's uid and
# gid, no capability at all (in-process ledger), no_new_privs, and still
# serves.  Skips when not root or without a "nobody" user.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "no user nobody"; exit 1; }
chmod 755 "$TMP"
start_daemon --user nobody
st=/proc/$DPID/status
grep -E '^(Uid|Gid|CapPrm|CapEff|CapBnd|NoNewPrivs)' "$st"
uid=$(id -u nobody)
grep -q "^Uid:[[:space:]]*$uid[[:space:]]*$uid[[:space:]]*$uid" "$st" || fail "uid is not nobody's"
grep -q '^CapEff:[[:space:]]*0*$' "$st" || fail "effective capabilities left"
grep -q '^CapPrm:[[:space:]]*0*$' "$st" || fail "permitted capabilities left"
grep -q '^CapBnd:[[:space:]]*0*$' "$st" || fail "bounding set not dropped"
grep -q '^NoNewPrivs:[[:space:]]*1' "$st" || fail "no_new_privs not set"
EX=${EXAMPLE:-build/bin/kvlease-example}
[ -x "$EX" ] && { "$EX" --socket "$SOCK" || fail "example against the dropped daemon"; }
daemon_alive
echo "PASS: privileges dropped"
