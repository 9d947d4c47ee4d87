#!/bin/sh
# SPDX-License-Identifier: MIT
#
# ptxas' report of the fatbin (nvcc --resource-usage, kept by the build in
# build/obj/kernels/kvpool_kernels.usage): no kernel may spill registers
# or use a stack frame on sm_80 or sm_90.  Prints registers per kernel.
B=${B:-build}
u=$B/obj/kernels/kvpool_kernels.usage
. "$(dirname "$0")/../nvcc.sh"
need_nvcc_built "$u"
awk '
/Compiling entry function/ { split($0, q, "\047"); fn = q[2]; arch = q[4]; next }
/bytes stack frame/ {
	stack = $1; spill_st = $5; spill_ld = $9
	if (stack + 0 || spill_st + 0 || spill_ld + 0) {
		printf "FAIL %s (%s): %s bytes stack frame, %s bytes spill stores, %s bytes spill loads\n", fn, arch, stack, spill_st, spill_ld
		bad++
	}
	next
}
/Used [0-9]+ registers/ {
	r = $0; sub(/.*Used /, "", r); r += 0
	printf "%-22s %s %3d registers\n", fn, arch, r
	n++
}
END {
	if (n < 40) { print "only " n " kernel reports: is this the fatbin report?"; exit 1 }
	printf "%d kernel reports, %d with spills\n", n, bad
	exit bad ? 1 : 0
}' "$u"
