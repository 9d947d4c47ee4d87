#!/bin/sh
# SPDX-License-Identifier: MIT
# Stands in for the VM suite in make check when neither Debian 12 kernel
# (6.1, 6.12) has its headers and image installed: a failure, since make
# deps installs them (make vm-check does too).
echo "FAIL: no Debian 12 linux-headers/linux-image (6.1, 6.12): run make deps or make vm-check"
exit 1
