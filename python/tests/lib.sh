# SPDX-License-Identifier: MIT
#
# Common part of the Python test scripts: the interpreter with Debian's
# packages (python3-numpy, python3-pytest, python3-torch), the paths of the
# built programs, and pytest run so that it writes nothing into the tree.
# Environment: PYTHON (default /usr/bin/python3 when present: a python3
# earlier on $PATH, such as a pyenv one, does not see Debian's packages),
# KVPOOLD, KVPOOL_LIBKVLEASE, B (build directory, default build).

B=${B:-build}
if [ -z "$PYTHON" ]; then
	if [ -x /usr/bin/python3 ]; then
		PYTHON=/usr/bin/python3
	else
		PYTHON=$(command -v python3) || { echo "no python3 (make deps)"; exit 1; }
	fi
fi
export KVPOOLD=${KVPOOLD:-$B/bin/kvpoold}
export KVPOOL_LIBKVLEASE=${KVPOOL_LIBKVLEASE:-$B/lib/libkvlease.so.1}
export KVLEASE_ABI=${KVLEASE_ABI:-$B/tests/python/kvlease-abi}
export KVLEASE_EXAMPLE=${KVLEASE_EXAMPLE:-$B/bin/kvlease-example}
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$B/pycache}
unset KVPOOL_SOCKET

for p in "$KVPOOLD" "$KVPOOL_LIBKVLEASE" "$KVLEASE_ABI" "$KVLEASE_EXAMPLE"; do
	[ -e "$p" ] || { echo "missing $p (run make)"; exit 1; }
done

# need_modules MOD...: fail unless $PYTHON imports every one (make deps
# installs them).
need_modules() {
	for m in "$@"; do
		"$PYTHON" -c "import $m" 2>/dev/null || {
			echo "FAIL: $PYTHON cannot import $m (make deps" \
			     "installs python3-$m)"
			exit 1
		}
	done
}

# run_pytest FILE...: pytest's exit status, 5 (no test ran) made a failure.
run_pytest() {
	"$PYTHON" -m pytest -v -rs -p no:cacheprovider "$@"
	rc=$?
	[ $rc -eq 5 ] && { echo "FAIL: pytest ran no test"; return 1; }
	return $rc
}
