#!/bin/sh
# SPDX-License-Identifier: MIT
# Stands in for the fuzz corpora's replay in make check when clang cannot
# build libFuzzer programs: a failure, since make deps installs clang and
# libclang-rt-dev.
echo "FAIL: clang with -fsanitize=fuzzer not found: run make deps"
exit 1
