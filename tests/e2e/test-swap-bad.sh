#!/bin/sh
# SPDX-License-Identifier: MIT
# Bad input to the tiers: malformed swaps (each a clear error, the daemon
# keeps serving), an nvme file that cannot be opened (the daemon refuses
# to start and says why), a full nvme file (-ENOMEM, nothing changes),
# injected I/O errors (-EIO, the sequence stays intact).
. "$(dirname "$0")/lib.sh"

start_tiers_daemon
"$TIERS" bad "$SOCK" || fail "bad swaps"
tiers_idle
daemon_alive
kill "$DPID"
wait "$DPID" 2>/dev/null

# a file that cannot be opened: a path under a missing directory
if "$KVPOOLD" --foreground --socket "$TMP/x.sock" --ledger "$LEDGER" \
	--backend "$BACKEND" --tier "nvme:$TMP/no/such/dir/swap:16M" \
	>"$TMP/open.log" 2>&1; then
	fail "kvpoold started with an nvme file it cannot open"
fi
grep -q "cannot open $TMP/no/such/dir/swap" "$TMP/open.log" ||
	{ cat "$TMP/open.log"; fail "no clear error for the nvme file"; }
echo "unopenable nvme file: $(grep 'cannot open' "$TMP/open.log")"

# a full file: the daemon may write at most 4 MiB per file (64 blocks)
start_daemon_limited() {
	prlimit --fsize=4194304 "$KVPOOLD" --foreground --socket "$SOCK" \
		--ledger "$LEDGER" --backend "$BACKEND" --block-bytes 65536 \
		--capacity 2048 --chunk-blocks 32 --shrink-delay-ms 300 \
		--tier "nvme:$SWAPFILE:32M" >>"$DLOG" 2>&1 &
	DPID=$!
	i=0
	until "$UTIL" status "$SOCK" >/dev/null 2>&1; do
		[ $i -lt 100 ] || fail "kvpoold did not answer"
		sleep 0.1
		i=$((i + 1))
	done
}
start_daemon_limited
"$TIERS" full "$SOCK" 1 80 || fail "full nvme file"
"$TIERS" wait-used "$SOCK" 1 0 5000 || fail "blocks leaked in nvme"
daemon_alive
kill "$DPID"
wait "$DPID" 2>/dev/null

# injected I/O errors in the file tier (every 3rd block I/O fails)
start_tiers_daemon --inject-io-error 3
"$TIERS" ioerr "$SOCK" 2 || fail "injected I/O errors"
tiers_idle
daemon_alive
echo "PASS: bad swaps, unopenable and full nvme files, I/O errors"
