#!/bin/bash
# The agent's idle cost does not grow with its tasks: with 200 sleeping tasks corrald holds at
# most 4 descriptors per task (its /proc/PID/fd counted from outside, against 1 task), and its
# CPU over 10 s (run time of all its threads, /proc/PID/task/*/schedstat) stays within twice
# that with 1 task plus 30 ms (an agent that reads each task's cgroup at every tick spends
# about 250 ms there). Tasks keep ending and hitting limits on time meanwhile: a killed task
# ends, a --time 2 task ends time_limit, both within seconds. The samples are set an hour
# apart: the windows measure the idle loop, not sample records (tests/bench/agent_scale.sh
# measures those too).
. "$(dirname "$0")/lib.sh"
need_root
N=${SCALE_IT_TASKS:-200}
WIN=10

run_ns() { # corrald's run time, ns, all threads
	local ns=0 f s
	for f in /proc/"$AGENT_PID"/task/*/schedstat; do
		s=$(awk '{print $1}' "$f" 2>/dev/null) && ns=$((ns + s))
	done
	echo "$ns"
}
fds() { ls "/proc/$AGENT_PID/fd" | wc -l; }
running() {
	ctl ps --json | python3 -c 'import sys,json
print(sum(1 for t in json.load(sys.stdin) if t.get("state") == "running"))'
}
wait_running() { # COUNT
	for _ in $(seq 600); do [ "$(running)" -ge "$1" ] && return 0; sleep 0.1; done
	return 1
}
window() { # corrald's CPU over WIN seconds, ns
	local c0 c1
	c0=$(run_ns); sleep "$WIN"; c1=$(run_ns)
	echo $((c1 - c0))
}

# summary_interval 1s: each task's budget is saved once after its first audit record, at the
# first budget walk after its launch (one state file each), before the windows
printf '[agent]\nmax_tasks = %d\nsample_interval = 1h\n[audit]\nsummary_interval = 1s\n' \
	$((N + 16)) >"$T/a.conf"
start_agent --config "$T/a.conf"
ctl run --no-sandbox -- sleep 1000 >/dev/null || fail "first launch"
wait_running 1 || fail "first task not running"
sleep 2 # the cgroup pool refilled
fd1=$(fds)
cpu1=$(window)
for i in $(seq 2 "$N"); do
	ctl run --no-sandbox -- sleep 1000 >/dev/null || { fail "launch $i"; break; }
done
wait_running "$N" || fail "$N tasks not running: $(running)"
sleep 2
fdn=$(fds)
cpun=$(window)
per=$(awk -v a="$fdn" -v b="$fd1" -v n="$N" 'BEGIN {printf "%.2f", (a - b) / (n - 1)}')
awk -v p="$per" 'BEGIN {exit !(p <= 4)}' &&
	pass "descriptors per live task: $per (corrald: $fd1 fds with 1 task, $fdn with $N)" ||
	fail "descriptors per live task: $per > 4 ($fd1 with 1 task, $fdn with $N)"
bound=$((2 * cpu1 + 30000000))
[ "$cpun" -le "$bound" ] &&
	pass "corrald CPU over ${WIN}s: $((cpun / 1000)) us with $N tasks, $((cpu1 / 1000)) us with 1 (bound $((bound / 1000)) us)" ||
	fail "corrald CPU over ${WIN}s: $((cpun / 1000)) us with $N tasks > bound $((bound / 1000)) us (1 task: $((cpu1 / 1000)) us)"

# events still drive the tasks among the idle ones
victim=$(ctl ps --json | python3 -c 'import sys,json
print([t["id"] for t in json.load(sys.stdin) if t.get("state") == "running"][0])')
ctl kill "$victim" >/dev/null || fail "kill $victim"
for _ in $(seq 100); do [ "$(status_of "$victim")" = signaled ] && break; sleep 0.1; done
[ "$(status_of "$victim")" = signaled ] && pass "a killed task among $N ends signaled" ||
	fail "killed task: $(status_of "$victim")"
t0=$(date +%s%N)
run_wait --no-sandbox --time 2 -- sleep 100
dt=$((($(date +%s%N) - t0) / 1000000))
[ "$(status_of "$ID")" = time_limit ] && [ "$dt" -lt 8000 ] &&
	pass "--time 2 among $N idle tasks: time_limit after $dt ms" ||
	fail "--time 2: $(status_of "$ID") after $dt ms"
finish
