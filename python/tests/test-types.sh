#!/bin/sh
# SPDX-License-Identifier: MIT
# The binding's type hints: mypy --strict (Debian's mypy) accepts the
# package (python/kvpool, marked py.typed) and a caller of its public API
# (python/tests/typed_use.py).  python/python.mk lists this test when
# mypy is installed (make deps installs it).
. "$(dirname "$0")/lib.sh"
need_modules numpy mypy
d=$(dirname "$0")
MYPYPATH=$d/..
export MYPYPATH
"$PYTHON" -m mypy --strict --cache-dir "$B/mypy-cache" \
	"$d/../kvpool" "$d/typed_use.py" || { echo "FAIL: mypy --strict"; exit 1; }
echo "PASS: mypy --strict accepts the binding and a caller of it"
