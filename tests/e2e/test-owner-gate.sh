#!/bin/sh
# SPDX-License-Identifier: MIT
# Every data-plane op passes the owner's gate: for each kind of op
# (WRITE_KV, READ_KV, ATTN, COPY, SPLICE, COMPACT, SCORE, BLOCK_SUM, SWAP),
# three connections loop it back to back, always overlapping, while
# another makes an unmap of the top pool due.  Within each 5 s attack
# another tenant's WRITE_KV calls all finish within 2 s, the memory is
# unmapped and the other tenant reads back what it wrote (e2e-gate).  With
# SPLICE, COMPACT and SCORE taking the lock past the gate, the unmap and
# the other tenant's calls waited for the whole attack.
. "$(dirname "$0")/lib.sh"

GATE=$E2E_BIN/e2e-gate
[ -x "$GATE" ] || fail "missing $GATE (run make)"
start_daemon -v --capacity 8192 --shrink-delay-ms 20 --tenant victim --tenant attack \
	--tier dram:4096
"$GATE" "$SOCK" 5 write read attn copy splice compact score block-sum swap ||
	fail "e2e-gate"
grep -c "shrink waits for data-plane ops" "$DLOG" |
	sed 's/^/unmaps that closed the gate: /'
daemon_alive
