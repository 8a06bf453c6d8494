# The CPU a set of processes used, read from /proc, for the benchmarks that measure a daemon's
# own cost over a window (agent_scale.sh, agent_profile.sh, energy_scale.sh): read before and
# after the window, the difference is what the processes ran in it. Sourced; not a benchmark.
# shellcheck shell=bash

# proc_cpu PID...: "<ticks> <ns>", summed over the pids and all their threads: utime + stime
# (/proc/PID/stat, in ticks of getconf CLK_TCK) and the run time (/proc/PID/task/*/schedstat,
# ns). A pid that is gone counts 0.
proc_cpu() {
	local ticks=0 ns=0 p f s

	for p in "$@"; do
		# the fields after the command name, which may hold spaces: utime and stime are the
		# 12th and 13th from the state on (the 14th and 15th of the line)
		s=$(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null) &&
			[ -n "$s" ] && ticks=$((ticks + s))
		for f in /proc/"$p"/task/*/schedstat; do
			s=$(awk '{print $1}' "$f" 2>/dev/null) && [ -n "$s" ] && ns=$((ns + s))
		done
	done
	echo "$ticks $ns"
}

# proc_run_ns PID...: the run time alone (ns), as proc_cpu
proc_run_ns() {
	local c

	c=$(proc_cpu "$@")
	echo "${c#* }"
}
