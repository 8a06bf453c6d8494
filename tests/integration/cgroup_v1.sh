#!/bin/bash
# Real cgroup v1 (hybrid) backend: OOM kill detection, pids containment, CFS quota accuracy,
# kill without escapes, removal in every hierarchy. Root only.
set -u
O=${CORRAL_O:-.output}
helper=$O/tests/integration/helper_cgroup
subtree=corral-test-$$

if [ "$(id -u)" -ne 0 ]; then
	echo "FAIL: needs root"
	exit 1
fi
if [ ! -x "$helper" ]; then
	echo "FAIL: $helper not built (make O=$O helpers)"
	exit 1
fi
if [ "$(stat -f -c %T /sys/fs/cgroup)" != "tmpfs" ] || [ ! -d /sys/fs/cgroup/memory ]; then
	echo "SKIP: no cgroup v1 hierarchies on this kernel"
	exit 77
fi

cleanup() {
	# Only our uniquely named subtree: kill what is left in it, remove it depth-first.
	for d in /sys/fs/cgroup/*/"$subtree"; do
		[ -d "$d" ] || continue
		find "$d" -depth -type d | while read -r c; do
			for p in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
			[ -f "$c/freezer.state" ] && echo THAWED >"$c/freezer.state" 2>/dev/null
		done
	done
	for d in /sys/fs/cgroup/*/"$subtree"; do
		[ -d "$d" ] || continue
		for i in $(seq 50); do
			find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
			[ -d "$d" ] || break
			sleep 0.1
		done
		[ -d "$d" ] && echo "cleanup: could not remove $d"
	done
}
trap cleanup EXIT

"$helper" "$subtree"
rc=$?
left=$(find /sys/fs/cgroup/*/"$subtree" -mindepth 1 -type d 2>/dev/null | wc -l)
echo "task directories left under $subtree before cleanup: $left"
[ "$left" -eq 0 ] || rc=1
exit $rc
