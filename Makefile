# SPDX-License-Identifier: MIT
#
# kvpool top-level build.  Every part lives in its own directory and adds
# itself through a make fragment (<dir>/<name>.mk) that appends to:
#   ALL            files built by `make`
#   CHECK_PROGS    test programs/scripts run by `make check` (exit 0/1/77)
#   BENCH          phony targets run by `make bench`
#   INSTALL_TGTS   phony targets run by `make install`
# Outputs go under $(B): programs in $(B)/bin, libraries in $(B)/lib,
# objects in $(B)/obj/<dir>, the module in $(B)/kmod, tests in $(B)/tests,
# sanitizer builds in $(B)/asan.

B       ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= gcc
NVCC    ?= /usr/local/cuda/bin/nvcc

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	   -Wmissing-prototypes -Wformat=2 -Wundef -Wpointer-arith \
	   -Wno-unused-parameter
CPPFLAGS_BASE := -D_GNU_SOURCE -Ikmod/include/uapi -Ikmod -Iinclude
CFLAGS_BASE   := -std=gnu11 -O2 -g -fPIC $(WARN)
SAN_FLAGS     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
		 -fno-sanitize-recover=all
ASAN_ENV      := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

HAVE_NVCC := $(shell test -x $(NVCC) && echo 1)

ALL          :=
CHECK_PROGS  :=
BENCH        :=
INSTALL_TGTS :=

.PHONY: all check bench install clean deps demo
all: real-all

# Keep every intermediate file (sanitizer binaries behind wrapper scripts).
.SECONDARY:

# Parts.  Missing fragments are fine while a part does not exist yet.
-include kmod/kmod.mk
-include kernels/kernels.mk
-include libkvlease/libkvlease.mk
-include daemon/daemon.mk
-include tools/tools.mk
-include tests/unit/unit.mk
-include tests/kernels/kernels-tests.mk
-include tests/vm/vm.mk
-include tests/e2e/e2e.mk
-include tests/tools/tools-tests.mk
-include tests/gpu/gpu.mk
-include python/python.mk

real-all: $(ALL)

# Run every test that can run here; exit non-zero on any failure.
check: $(ALL) $(CHECK_PROGS)
	@tests/run-tests.sh $(CHECK_PROGS)

bench: $(BENCH)

install: $(ALL) $(INSTALL_TGTS)

deps:
	@tools/install-deps.sh

# The main job; tools/tools.mk gives it its prerequisites and recipe (the
# multi-tenant demo).
demo:

clean:
	rm -rf $(B)
