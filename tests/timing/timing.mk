# SPDX-License-Identifier: MIT
#
# make check's time table (tests/timing/table.sh, printed at its end):
# while `check` is a goal, every recipe line runs through
# tests/timing/recipe-sh, which logs its target, wall and CPU time to
# $(B)/timing/recipes.log; tests/run-tests.sh logs each test's.  Read
# last by the Makefile, so that the $(shell) calls of the other fragments
# run with /bin/sh.
#   CHECK_JOBS   tests run at a time (default: the CPUs, at least 2)

CHECK_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -ge 2 ] && echo $$n || echo 2)

ifneq ($(filter check,$(MAKECMDGOALS)),)
export KVPOOL_TIMING_LOG := $(CURDIR)/$(B)/timing/recipes.log
_timing := $(shell mkdir -p $(B)/timing && : >$(B)/timing/recipes.log && \
	rm -f $(B)/timing/tests-start && date +%s.%N >$(B)/timing/start)
SHELL := $(CURDIR)/tests/timing/recipe-sh
.SHELLFLAGS = $@ -c
endif
