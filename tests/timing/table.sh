#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The table at the end of `make check`: where the time went.  Each build
# phase (its recipes, from tests/timing/recipe-sh's log), with its wall
# time (the span its recipes ran, overlaps counted once) and its CPU time
# (user + sys), then the tests (tests/run-tests.sh's times file) and the
# ten longest of them.  Phases run side by side under make -j, so their
# walls add up to more than the total.
# Usage: table.sh [B [TEST_LOG_DIR]] (default build, $B/test-logs).
B=${1:-build}
logdir=${2:-${KVPOOL_TEST_LOGS:-$B/test-logs}}
recipes=$B/timing/recipes.log
times=$logdir/times
[ -r "$recipes" ] || { echo "timing: no $recipes"; exit 0; }
now=$(date +%s.%N)
start=$(cat "$B/timing/start" 2>/dev/null || echo "$now")
tstart=$(cat "$B/timing/tests-start" 2>/dev/null || echo "$now")
hz=$(getconf CLK_TCK)

{
	# recipes: TARGET START END UTIME STIME
	awk -v B="$B/" -v hz="$hz" '
	function phase(t) {
		if (t == "check") return "";
		if (index(t, B "asan/") == 1) return "6 sanitizer builds (ASan+UBSan)";
		if (index(t, B "o0/") == 1) return "7 -O0 daemon";
		if (index(t, B "fuzz/") == 1 || index(t, B "tests/fuzz/") == 1)
			return "8 fuzz builds (clang, libFuzzer)";
		if (index(t, B "deb/") == 1 || index(t, B "deb-test/") == 1 ||
		    t ~ /^(deb|pkg-root)$/ || index(t, B "tests/pkg/") == 1)
			return "9 packages (dpkg-buildpackage, lintian)";
		if (index(t, B "kmod/") == 1 || t ~ /^kmod/)
			return "5 kernel module (Kbuild, W=1, sparse)";
		if (t ~ /kvpool_kernels\.(fatbin|usage|sm80\.ptx|compat\.ptx)$/)
			return "2 build: CUDA kernels (nvcc)";
		if (index(t, B "obj/kernels/") == 1 || t == B "lib/libkvkern.a")
			return "1 build: CPU kernels";
		if (index(t, B "obj/tests/cudafake/") == 1 || index(t, B "tests/cudafake/") == 1)
			return "3 build: CUDA test double and emulation";
		return "4 build: the rest";
	}
	{
		p = phase($1);
		if (p == "") next;
		cpu[p] += ($4 + $5) / hz;
		if (!((p, $1) in seen)) { seen[p, $1] = 1; n[p]++; }
		# the span: sorted later, one interval per line
		print p "\t" $2 "\t" $3 > "/dev/stderr";
	}
	END { for (p in cpu) printf "C\t%s\t%.1f\t%d\n", p, cpu[p], n[p]; }
	' "$recipes" 2>"$B/timing/spans"
	# wall of each phase: the union of its recipes' intervals
	sort -t "$(printf '\t')" -k1,1 -k2,2n "$B/timing/spans" | awk -F '\t' '
	function flush() { if (p != "") { w[p] += e - s; } }
	$1 != p { flush(); p = $1; s = $2; e = $3; next }
	$2 > e { flush(); s = $2; e = $3; next }
	$3 > e { e = $3 }
	END { flush(); for (q in w) printf "W\t%s\t%.1f\n", q, w[q]; }'
} | awk -F '\t' -v start="$start" -v tstart="$tstart" -v now="$now" -v times="$times" '
	$1 == "C" { cpu[$2] = $3; n[$2] = $4; ph[$2] = 1 }
	$1 == "W" { wall[$2] = $3; ph[$2] = 1 }
	END {
		np = 0;
		for (p in ph) list[++np] = p;
		for (i = 2; i <= np; i++)	# insertion sort by the leading digit
			for (j = i; j > 1 && list[j] < list[j - 1]; j--) {
				t = list[j]; list[j] = list[j - 1]; list[j - 1] = t;
			}
		printf "\n== where the time went (make check) ==\n";
		printf "%-44s %8s %8s %8s\n", "phase", "wall s", "CPU s", "targets";
		tc = 0;
		for (i = 1; i <= np; i++) {
			p = list[i];
			printf "%-44s %8.1f %8.1f %8d\n", substr(p, 3), wall[p], cpu[p], n[p];
			tc += cpu[p];
		}
		nt = 0; tw = 0; tcpu = 0; first = 0; last = 0;
		while ((getline line < times) > 0) {
			split(line, f, " ");
			nt++; tcpu += f[2] / 1000;
			tw += f[1] / 1000;
			tl[nt] = sprintf("%8.1f %8.1f  %s%s", f[1] / 1000, f[2] / 1000,
				f[4], f[3] == 0 ? "" : f[3] == 77 ? " (skipped)" : " (FAILED)");
			tk[nt] = f[1] + 0;
		}
		printf "%-44s %8.1f %8.1f %8s\n", sprintf("tests (%d; their walls add up to %.0f s)", nt, tw),
			now - tstart, tcpu, "";
		printf "%-44s %8.1f %8.1f\n", "total (wall: since make started)",
			now - start, tc + tcpu;
		printf "ten longest tests:\n%8s %8s  %s\n", "wall s", "CPU s", "test";
		for (k = 1; k <= 10 && k <= nt; k++) {
			m = 0;
			for (i = 1; i <= nt; i++)
				if (!(i in done) && (m == 0 || tk[i] > tk[m])) m = i;
			done[m] = 1;
			print tl[m];
		}
	}'
rm -f "$B/timing/spans"
