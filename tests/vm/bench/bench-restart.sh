#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench-restart with the real module (make vm-bench-restart boots a
# kernel with this one guest script, kvpool.ko freshly loaded): a kill -9
# of kvpoold under four decoding tenants, with the pool memory kept in
# the module and without it, rounds interleaved (kvpool-bench-restart
# --ledger module).  The figures are printed to the console log and
# measured under QEMU's TCG emulation: their ratio says more than their
# size.  Exit 0 pass, 1 fail (a round failed or a program is missing),
# 77 no /dev/kvpool.  Busybox sh only.

[ -c /dev/kvpool ] || { echo "no /dev/kvpool"; exit 77; }
for p in kvpoold kvpool-bench-restart e2e-tenant; do
	command -v $p >/dev/null 2>&1 || { echo "no $p in PATH"; exit 1; }
done
cd /tmp || exit 1
echo "bench-restart: under QEMU TCG emulation, ledger in kvpool.ko"
kvpool-bench-restart --daemon "$(command -v kvpoold)" \
	--tenant "$(command -v e2e-tenant)" --ledger module
