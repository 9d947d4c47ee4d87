#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvpoolctl error handling: usage errors exit 2, no ledger exits 3 with a
# clear message, every error names what went wrong on stderr.
K=${KVPOOLCTL:-build/bin/kvpoolctl}
[ -x "$K" ] || { echo "missing $K (run make)"; exit 1; }
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect RC PATTERN ARGS...: exit status RC and PATTERN (grep -E) in stderr
expect() {
	want=$1 pat=$2; shift 2
	"$K" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: kvpoolctl $*: exit $rc, want $want; stderr: $(cat "$tmp/err")"
		fail=1
	elif [ -n "$pat" ] && ! grep -Eq -e "$pat" "$tmp/err"; then
		echo "FAIL: kvpoolctl $*: stderr lacks /$pat/: $(cat "$tmp/err")"
		fail=1
	fi
}

expect 2 "usage"
expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "unknown option" --bogus status
expect 0 "" help
expect 0 "" help plan
expect 0 "" plan --help
expect 0 "" version
expect 2 "unknown command 'nope'" help nope
expect 2 "--ctx: 'abc' is not a valid number" plan --model llama-3.1-8b --ctx abc
expect 2 "--ctx: '-5' is not a valid number" plan --model llama-3.1-8b --ctx -5
expect 2 "--ctx: '12x' is not a valid number" plan --model llama-3.1-8b --ctx 12x
expect 2 "out of range" plan --model llama-3.1-8b --ctx 99999999999999999999999
expect 2 "out of range" plan --model llama-3.1-8b --ctx 0
expect 2 "out of range" plan --model llama-3.1-8b --util 1.5
expect 2 "not a valid number" plan --model llama-3.1-8b --util abc
expect 2 "not one of bf16" plan --model llama-3.1-8b --dtype fp16
expect 2 "unknown model 'gpt-5'" plan --model gpt-5
expect 2 "needs a value" plan --model
expect 2 "give --model NAME" plan --layers 4
expect 2 "does not divide" plan --model llama-3.1-8b --tp 3
expect 2 "not a multiple of 256" plan --model llama-3.1-8b --block-bytes 1000
expect 2 "cannot hold one token" plan --model llama-3.1-70b --block-bytes 256
expect 2 "unexpected argument" plan --model llama-3.1-8b extra
expect 2 "missing action" tenant
expect 2 "unknown action 'frob'" tenant frob x
expect 2 "--max: '12x' is not a valid number" tenant add t1 --max 12x
expect 2 "--min: 'lots'" tenant add t1 --min lots
expect 2 "out of range" tenant add t1 --max 4294967295
expect 2 "not a valid name" tenant add "bad/name"
expect 2 "not a valid name" tenant add -- -dash
expect 2 "exactly one tenant NAME" tenant add
expect 2 "above --max" tenant add t1 --max 4 --min 8
expect 2 "nothing to change" tenant set t1
expect 2 "takes no options" tenant del t1 --max 3
expect 2 "unknown argument" status --frob
expect 2 "out of range" top --interval 0
expect 2 "bad option" monitor --frob

# No module, no daemon: a clear message and exit 3 for every command that
# needs the ledger.  (With the module loaded this part does not apply.)
if [ ! -e "${KVPOOL_DEVICE:-/dev/kvpool}" ]; then
	export KVPOOL_SOCKET="$tmp/no-such.sock"
	expect 3 "no ledger: /dev/kvpool is absent .* kvpoold is not running" status
	expect 3 "no ledger" --json status
	expect 3 "no ledger" tenant list
	expect 3 "no ledger" tenant add t1 --max 10
	expect 3 "no ledger" tenant set t1 --max 10
	expect 3 "no ledger" tenant del t1
	expect 3 "no ledger" metrics
	expect 3 "no ledger" top --once
	expect 3 "module is not loaded" monitor
	expect 3 "no ledger" --socket "$tmp/other.sock" status
	unset KVPOOL_SOCKET
else
	echo "note: /dev/kvpool exists; no-ledger checks skipped"
fi

[ $fail = 0 ] && echo "cli errors: all as expected"
exit $fail
