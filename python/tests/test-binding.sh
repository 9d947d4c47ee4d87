#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python binding against a private kvpoold (CPU backend, in-process
# ledger): python/tests/test_{binding,abi,example,kill9}.py; the prefix
# cache, tiers and swap, and edits against one with a dram and an nvme
# tier: test_{prefix,tiers,edits}.py.
. "$(dirname "$0")/lib.sh"
need_modules numpy pytest
d=$(dirname "$0")
run_pytest "$d/test_binding.py" "$d/test_abi.py" "$d/test_example.py" \
	"$d/test_kill9.py" "$d/test_prefix.py" "$d/test_tiers.py" \
	"$d/test_edits.py"
