# SPDX-License-Identifier: MIT
#
# kvpool top-level build.  Every part lives in its own directory and adds
# itself through a make fragment (<dir>/<name>.mk) that appends to:
#   ALL            files built by `make`
#   CHECK_PROGS    test programs/scripts run by `make check` (exit 0/1/77)
#   CHECK_SERIAL   those of them that run alone (they measure, or need the
#                  machine to themselves)
#   CHECK_FIRST    those of them that start first, longest first (they take
#                  long: the others fill the other slots meanwhile)
#   BENCH          phony targets run by `make bench`
#   INSTALL_TGTS   phony targets run by `make install`
# Outputs go under $(B): programs in $(B)/bin, libraries in $(B)/lib,
# objects in $(B)/obj/<dir>, the module in $(B)/kmod, tests in $(B)/tests,
# sanitizer builds in $(B)/asan.

B       ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
# Installation directories (the Debian packages set them: debian/rules).
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
LIBDIR     ?= $(PREFIX)/lib
UNITDIR    ?= $(PREFIX)/lib/systemd/system
UDEVDIR    ?= $(PREFIX)/lib/udev/rules.d
# $(call kvp_stamp,NAME,VALUE): $(B)/NAME holds VALUE and is written only
# when VALUE changes, so what depends on it is rebuilt then (and only that).
kvp_stamp = $(shell mkdir -p $(B) && { [ "$$(cat $(B)/$(1) 2>/dev/null)" = "$(2)" ] || \
	echo "$(2)" >$(B)/$(1); })
# The paths compiled into the programs.
KVPOOL_PATHS := $(PREFIX) $(SYSCONFDIR) $(LIBDIR)
_paths := $(call kvp_stamp,paths,$(KVPOOL_PATHS))
CC      ?= gcc
NVCC    ?= /usr/local/cuda/bin/nvcc

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	   -Wmissing-prototypes -Wformat=2 -Wundef -Wpointer-arith \
	   -Wno-unused-parameter
# CPPFLAGS, CFLAGS and LDFLAGS from the environment or the command line are
# added (dpkg-buildflags' hardening flags in the Debian packages).
CPPFLAGS_BASE := -D_GNU_SOURCE -Ikmod/include/uapi -Ikmod -Iinclude $(CPPFLAGS)
CFLAGS_BASE   := -std=gnu11 -O2 -g -fPIC $(WARN) $(CFLAGS)
SAN_FLAGS     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
		 -fno-sanitize-recover=all
ASAN_ENV      := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

HAVE_NVCC := $(shell test -x $(NVCC) && echo 1)

ALL          :=
CHECK_PROGS  :=
CHECK_SERIAL :=
CHECK_FIRST  :=
BENCH        :=
INSTALL_TGTS :=

.PHONY: all check bench install install-files clean deps demo
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
-include tests/cudafake/cudafake.mk
-include tests/kernels/kernels-tests.mk
-include tests/vm/vm.mk
-include tests/e2e/e2e.mk
-include tests/tools/tools-tests.mk
-include tests/gpu/gpu.mk
-include python/python.mk
-include tests/fuzz/fuzz.mk
-include tests/fuzz/fuzz-config.mk
-include debian/deb.mk
-include tests/pkg/pkg.mk
# The optional libraries found (pkg-config) decide what is compiled in:
# $(B)/features holds their flags, so a make after make deps (or after a
# library was removed) compiles again what reads them.  The parts' header
# lists (KVD_HDRS, KVL_HDRS, TOOLS_HDRS) name it.
_features := $(call kvp_stamp,features,$(KVD_FEAT_CPPFLAGS) | $(KVL_CPPFLAGS) | $(TOOLS_NL_CFLAGS))
# last: it sets the recipes' SHELL
-include tests/timing/timing.mk

real-all: $(ALL)

# Run every test that can run here; exit non-zero on any failure.  Tests
# run CHECK_JOBS at a time, those of CHECK_FIRST first, those of
# CHECK_SERIAL alone at the end; then the table of where the time went
# (tests/timing/timing.mk).
CHECK_ORDER = $(foreach t,$(CHECK_FIRST),$(filter $(t),$(CHECK_PROGS))) \
	$(filter-out $(CHECK_FIRST),$(CHECK_PROGS))
check: $(ALL) $(CHECK_PROGS)
	@date +%s.%N >$(B)/timing/tests-start
	@tests/run-tests.sh -j $(CHECK_JOBS) $(addprefix -s ,$(CHECK_SERIAL)) \
		$(CHECK_ORDER); rc=$$?; tests/timing/table.sh $(B); exit $$rc

bench: $(BENCH)

install: $(ALL) $(INSTALL_TGTS)

# Install what the parts install, building only that (no test programs,
# no module: the Debian packages use this).
install-files: $(INSTALL_TGTS)

deps:
	@tools/install-deps.sh

# The main job; tools/tools.mk gives it its prerequisites and recipe (the
# multi-tenant demo).
demo:

clean:
	rm -rf $(B)
