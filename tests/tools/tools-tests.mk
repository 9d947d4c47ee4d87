# SPDX-License-Identifier: MIT
#
# tests/tools/: kvpoolctl and kvpool-bench (shell scripts, run from the
# repository root by tests/run-tests.sh; exit 0 pass, 1 fail, 77 skip).
#   test-plan.sh        plan figures against hand arithmetic
#   test-cli-errors.sh  usage errors, no module and no daemon
#   test-ctl-daemon.sh  status/tenant/metrics/top against kvpoold, and
#                       permission denied for an unprivileged user
#   test-bench.sh       a ~15 s kvpool-bench run and its invariants
#   test-ctl-prefix.sh  the prefix cache in status/metrics/top, and
#                       kvpoolctl prefix list/flush/share/unshare
#   test-bench-pressure.sh  every pressure policy on a small oversubscribed
#                       trace: no request lost, outputs equal, and each
#                       policy's drops, swaps, stalls and give-ups seen

CHECK_PROGS += tests/tools/test-plan.sh tests/tools/test-cli-errors.sh \
	       tests/tools/test-ctl-daemon.sh tests/tools/test-bench.sh \
	       tests/tools/test-ctl-prefix.sh tests/tools/test-bench-pressure.sh
# workloads with progress invariants: alone
CHECK_SERIAL += tests/tools/test-bench.sh tests/tools/test-bench-pressure.sh

# In the VM suite (tests/vm): the same tools against the real module.
VM_EXTRA_PROGS += $(B)/bin/kvpoolctl $(B)/bin/kvpool-bench $(B)/bin/kvpoold
VM_EXTRA_TESTS += tests/tools/vm-kvpoolctl.sh
