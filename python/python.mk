# SPDX-License-Identifier: MIT
#
# python/: the Python binding of libkvlease (python/kvpool/, ctypes, no
# build step), its tests and the example engine (python/examples/).
#   $(B)/tests/python/kvlease-abi   kvlease.h's struct layouts, for the
#                                   binding's ABI test
#   make python-check               the binding's, the device buffers' and
#                                   the engine's tests
#   make bench-python               the engine's tokens/s, kvpool vs dense;
#                                   prefix-sharing TTFT, pressure goodput
#   make install-python             the kvpool package into dist-packages
# The tests run with Debian's /usr/bin/python3 (python3-numpy,
# python3-pytest, python3-torch; mypy for the type check); see
# python/tests/lib.sh.

PY_OUT := $(B)/tests/python
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)

$(PY_OUT)/kvlease-abi: python/tests/kvlease-abi.c libkvlease/kvlease.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease $(CFLAGS_BASE) $< -o $@

ALL += $(PY_OUT)/kvlease-abi

PY_TESTS := python/tests/test-binding.sh python/tests/test-engine.sh \
	    python/tests/test-device.sh
# mypy --strict of the binding's type hints, where Debian's mypy is
# installed (make deps installs it)
PY_TESTS += $(if $(wildcard /usr/bin/mypy),python/tests/test-types.sh)
CHECK_PROGS += $(PY_TESTS)

# test-device.sh: the CUDA driver's test double and the kernels' fatbin,
# built when nvcc is there
PY_DEPS := $(B)/bin/kvpoold $(KVL_SO) $(B)/bin/kvlease-example \
	   $(PY_OUT)/kvlease-abi $(if $(HAVE_NVCC),$(CUDAFAKE) $(KVK_FATBIN))

.PHONY: python-check install-python
python-check: $(PY_DEPS)
	@tests/run-tests.sh $(PY_TESTS)

# Into the interpreter's dist-packages under $(PREFIX) (Debian's
# /usr/local/lib/python3.X/dist-packages for PREFIX=/usr/local).
PY_SITE = $(PREFIX)/lib/$(shell $(PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/dist-packages
install-python:
	install -d $(DESTDIR)$(PY_SITE)/kvpool
	install -m 644 python/kvpool/*.py python/kvpool/py.typed \
		$(DESTDIR)$(PY_SITE)/kvpool/

INSTALL_TGTS += install-python

# Decode tokens/s of the example engine, KV cache in kvpool against
# PyTorch's dense attention (FP32 and BF16 caches), both on the same thread
# and CPU (bench_engine.py --threads, default 1), 3 interleaved rounds,
# with the time split by part.  Then the serving example (serve.py, every
# process and daemon on one CPU): the time to first token of engine
# processes sharing a system prompt through the prefix cache against
# prefilling it, and the goodput of each pressure policy with a pool
# smaller than the demand against the unpressured run, 3 rounds each.
.PHONY: bench-python
bench-python: $(B)/bin/kvpoold $(KVL_SO)
	@$(PYTHON) -c 'import torch' 2>/dev/null || \
		{ echo "bench-python: $(PYTHON) has no torch (make deps)"; exit 1; }
	KVPOOLD=$(B)/bin/kvpoold KVPOOL_LIBKVLEASE=$(KVL_SO) \
		$(PYTHON) python/examples/bench_engine.py --profile
	KVPOOLD=$(B)/bin/kvpoold KVPOOL_LIBKVLEASE=$(KVL_SO) \
		$(PYTHON) python/examples/serve.py prefix
	KVPOOLD=$(B)/bin/kvpoold KVPOOL_LIBKVLEASE=$(KVL_SO) \
		$(PYTHON) python/examples/serve.py pressure

BENCH += bench-python
