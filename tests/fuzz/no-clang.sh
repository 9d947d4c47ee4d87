#!/bin/sh
# SPDX-License-Identifier: MIT
# The fuzz targets need clang with libFuzzer (make deps installs clang and
# libclang-rt-dev); without them the regression run is skipped.
echo "SKIP: clang with -fsanitize=fuzzer not found (make deps)"
exit 77
