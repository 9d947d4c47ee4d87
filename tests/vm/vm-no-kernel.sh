#!/bin/sh
# SPDX-License-Identifier: MIT
# Stands in for the VM suite in make check when no 6.1 kernel headers and
# image are installed: a failure, since make deps installs them (make
# vm-check does too).
echo "FAIL: no Debian 6.1 linux-headers/linux-image: run make deps or make vm-check"
exit 1
