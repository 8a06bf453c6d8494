#!/bin/bash
# Accuracy of the eBPF meter against the kernel's own figures (root, real BPF, real v1
# cgroups here; v2 cgroups in the VM tier). Each case runs in three modes: as corrald loads the
# programs (tp_btf, CPU and IO accounted at each thread's exit and last switch-out where the
# kernel allows it), tp_btf with accounting at every sched_switch (--switch), and raw_tp forced:
#   cpu   2 threads x 2 s burn      cpu_ns vs cpuacct.usage              (1%)
#   mem   touch 300 MiB             rss peak vs memory.max_usage_in_bytes (2%)
#   io    write(2) 100 MiB          io_write_bytes vs /proc/PID/io wchar  (4096 bytes)
#   net   50 MiB over loopback TCP  tx bytes (IP+TCP) vs payload received (1%)
#   fork  100 children x 20 ms      cpu_ns vs cpuacct.usage, forks == 100 (1%)
# The io case again with IO counted by the sys_exit program (meter_opts.io_from_syscalls).
# Then the taskstats fallback (meter not used): exit stats of a process.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_meter
W=$O/tests/integration/helper_meter_work
for b in "$H" "$W"; do
	[ -x "$b" ] || { echo "missing $b (build with make O=$O helpers)"; exit 1; }
done
# v1-hybrid (this host) or unified-only (the VM tier runs this script under systemd).
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
	for d in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/memory /sys/fs/cgroup/unified; do
		[ -d "$d" ] || { echo "SKIP: no $d and no unified hierarchy"; exit 77; }
	done
fi

fail=0 pass=0
for mode in "" --switch --raw; do
	for c in cpu mem io net fork; do
		echo "--- $c ${mode:-(default: tp_btf, accounting at exit preferred)}"
		timeout 180 "$H" $mode "$c" "$W"
		rc=$?
		case $rc in
		0) pass=$((pass+1)) ;;
		77) exit 77 ;;
		*) fail=$((fail+1)); echo "case $c $mode failed (rc=$rc)" ;;
		esac
	done
done
# Accounting at exit with the final figures read 3 s after the end (long after the kernel
# freed the threads): the references kept from their exit still give the exact figures.
echo "--- fork --late (final figures read 3 s after the task's end)"
if timeout 180 "$H" --late fork "$W"; then pass=$((pass+1)); else fail=$((fail+1)); fi
for mode in --sys "--raw --sys"; do
	echo "--- io $mode (IO bytes from the sys_exit program)"
	if timeout 180 "$H" $mode io "$W"; then pass=$((pass+1)); else fail=$((fail+1)); fi
done
echo "--- taskstats fallback"
if timeout 120 "$H" taskstats "$W"; then pass=$((pass+1)); else fail=$((fail+1)); fi
echo "metering_accuracy: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
