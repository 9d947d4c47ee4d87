#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The floors of kvpoold (Documentation/daemon.rst, "Floors"): every file of
# daemon/ is on one floor, and a file includes only headers of its own
# floor or of those below.  A lower floor reaches a higher one only through
# a hook it was handed (struct kvd_hooks in core.h), never through a
# header.  This test reads the #include "..." lines of daemon/*.c and
# daemon/*.h and fails on every include that runs up, and on every file
# that is on no floor.
#
#   test-daemon-floors.sh              the check (make check runs it)
#   test-daemon-floors.sh -v           and every arrow between two files
#   test-daemon-floors.sh -c OBJDIR    the same check for the calls between
#                                      the daemon's objects (nm), e.g.
#                                      build/obj/daemon
#
# The floors, lowest first; a name stands for NAME.c and NAME.h.
FLOORS=(
	"ground:    core config cluster_conf tier_spec prefix_index hash128
	            cluster_value rcluster cuda_chunks turn_lock"
	"pool:      ledger inproc tier tier_dram tier_nvme backend_cpu
	            backend_cuda scrub keep restart ledger_keep hostmem"
	"conn:      conn tenants swap prefix prefix_tier prefix_keep cluster"
	"dataplane: ops devbuf"
	"server:    server metrics reload"
	"top:       main kvpoold"
)

cd "$(dirname "$0")/../.." || exit 1
verbose=0 objdir=
while getopts vc: o; do
	case $o in
	v) verbose=1 ;;
	c) objdir=$OPTARG ;;
	*) echo "usage: $0 [-v] [-c OBJDIR]" >&2; exit 2 ;;
	esac
done

declare -A floor_of
declare -a floor_name
for i in "${!FLOORS[@]}"; do
	line=${FLOORS[$i]}
	floor_name[i]=${line%%:*}
	for n in ${line#*:}; do
		floor_of[$n]=$i
	done
done

# "FROM TO" pairs of file names (without .c/.h) on stdin: count, report
# the arrows that run up.
judge() {
	local what=$1 from to n=0 up=0 bad=0
	while read -r from to; do
		[ "$from" = "$to" ] && continue
		if [ -z "${floor_of[$from]}" ]; then
			echo "FAIL: daemon/$from is on no floor ($0)"
			bad=1
			continue
		fi
		if [ -z "${floor_of[$to]}" ]; then
			echo "FAIL: daemon/$to is on no floor ($0)"
			bad=1
			continue
		fi
		n=$((n + 1))
		if [ "${floor_of[$to]}" -gt "${floor_of[$from]}" ]; then
			echo "FAIL: $what runs up: $from (${floor_name[${floor_of[$from]}]}) -> $to (${floor_name[${floor_of[$to]}]})"
			up=$((up + 1))
		elif [ $verbose = 1 ]; then
			echo "  $from (${floor_name[${floor_of[$from]}]}) -> $to (${floor_name[${floor_of[$to]}]})"
		fi
	done
	echo "$what: $n arrows between files of daemon/, $up running up"
	[ $up = 0 ] && [ $bad = 0 ]
}

# Every file of daemon/ must be on a floor, even one that includes nothing.
rc=0
for f in daemon/*.c daemon/*.h; do
	n=$(basename "${f%.?}")
	if [ -z "${floor_of[$n]}" ]; then
		echo "FAIL: $f is on no floor ($0)"
		rc=1
	fi
done

# The includes: "daemon/x.c includes y.h" with y.h a file of daemon/.
for f in daemon/*.c daemon/*.h; do
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
	while read -r h; do
		[ -e "daemon/$h" ] || continue
		case $h in */*) continue ;; esac
		echo "$(basename "${f%.?}") $(basename "${h%.?}")"
	done
done | sort -u | judge includes || rc=1

# The calls: an object's undefined symbol that another object defines.
if [ -n "$objdir" ]; then
	if ! ls "$objdir"/*.o >/dev/null 2>&1; then
		echo "FAIL: no objects in $objdir"
		exit 1
	fi
	defs=$(mktemp) uses=$(mktemp)
	trap 'rm -f "$defs" "$uses"' EXIT
	for o in "$objdir"/*.o; do
		n=$(basename "$o" .o)
		[ -e "daemon/$n.c" ] || continue
		nm -g --defined-only "$o" | awk -v n="$n" 'NF == 3 { print $3, n }'
	done | sort >"$defs"
	for o in "$objdir"/*.o; do
		n=$(basename "$o" .o)
		[ -e "daemon/$n.c" ] || continue
		nm -u "$o" | awk -v n="$n" '{ print $NF, n }'
	done | sort >"$uses"
	join "$uses" "$defs" | awk '{ print $2, $3 }' | sort -u |
		judge calls || rc=1
fi
exit $rc
