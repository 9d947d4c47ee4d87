# SPDX-License-Identifier: MIT
#
# Sourced by the kvpoolctl tests that need a running kvpoold: K (kvpoolctl)
# and D (kvpoold) must be set and built.
#   start_daemon [ARGS...]   kvpoold with the in-process ledger and the CPU
#                            backend (256 blocks of 64 KiB) on a socket in
#                            $tmp, stopped and $tmp removed at exit
#   run RC ARGS...           kvpoolctl ARGS must exit RC (else fail=1);
#                            output in $tmp/out, $tmp/err
#   has RE                   $tmp/out matches RE (else fail=1)

[ -e "${KVPOOL_DEVICE:-/dev/kvpool}" ] &&
	{ echo "skip: /dev/kvpool present (this test drives the in-process ledger)"; exit 77; }

tmp=$(mktemp -d)
chmod 755 "$tmp"
export KVPOOL_SOCKET="$tmp/kvpool.sock"
fail=0

start_daemon() {
	"$D" --foreground --socket "$KVPOOL_SOCKET" --ledger inproc --backend cpu \
		--capacity 256 --block-bytes 65536 --chunk-blocks 16 "$@" \
		>"$tmp/kvpoold.log" 2>&1 &
	dpid=$!
	trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$tmp"' EXIT
	i=0
	while [ ! -S "$KVPOOL_SOCKET" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -S "$KVPOOL_SOCKET" ] || { echo "FAIL: kvpoold did not start"; cat "$tmp/kvpoold.log"; exit 1; }
}

run() {
	want=$1; shift
	"$K" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: kvpoolctl $*: exit $rc, want $want: $(cat "$tmp/err")"
		fail=1
	fi
}

has() {
	grep -Eq -e "$1" "$tmp/out" ||
		{ echo "FAIL: output lacks /$1/:"; sed 's/^/    /' "$tmp/out"; fail=1; }
}
