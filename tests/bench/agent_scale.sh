#!/bin/bash
# The agent's footprint as the number of live tasks grows, side by side with the same number of
# bare `sleep` processes in hand-made cgroups (the baseline: what the tasks cost without any
# agent). For each N in SCALE_NS (default 1 100 1000 4000) a fresh corrald is started
# (max_tasks N + 16, the descriptor limit raised for the run) and N minimal tasks
# (`sleep`, --no-sandbox) are launched; once all run and the launches have settled, over a
# window of SCALE_WINDOW seconds (default 60):
#   - corrald CPU: utime+stime of all its threads (/proc/PID/stat, ticks) and their run time
#     (/proc/PID/task/*/schedstat, ns), as % of one core; the ratio against N = 1 of this run.
#     Each window is divided by its measured length: the shims' reads (seconds at thousands
#     of tasks) come before and after corrald's window, not inside it (they were inside it
#     before, with the window taken as SCALE_WINDOW long: the figures at large N overstated)
#   - the shims' CPU (same sources, summed over the shims, over their own measured window)
#   - corrald RSS (VmRSS), shim PSS per task (smaps_rollup), the sleeps' PSS per task
#   - descriptors: corrald's open fds per live task (fds at N minus fds at the first N of the
#     run, divided by the difference in tasks; for the first N, minus the fds before any
#     launch) and each shim's fds; the agent runs with its hard descriptor limit as soft one
#   - `corralctl ps` latency (median of 5) and `ps --all --json` (the whole list)
#   - the records the agent spooled during the window and their bytes (its status)
#   - the node.sample change checks the window held, from the agent's /metrics
#     (corral_node_sample_checks_total{kind}, read before and after the window, outside it):
#     anchors (listing, a walk of every task with every unchanged one listed), statements from
#     the visit list (visits) and statements that asked every task (every_task); with the live
#     walks the eBPF meter made and skipped (corral_bpf_live_walks_total, _skipped_total).
#     An anchor comes at least every 20 node.sample records: a window of 20 sample intervals
#     (say SCALE_SAMPLE=3s SCALE_WINDOW=60) holds whole anchor periods, its CPU the
#     time-averaged cost with anchors; a window shorter than that may hold none.
# The baseline: N `sleep`s, each in its own cgroup in the memory and cpuacct hierarchies (made
# by this script), their CPU over the same window and their PSS per task.
# SCALE_QUICK=1: N = 1 100, a 10 s window (development). SCALE_SAMPLE=D: the agent's
# sample interval (default: the agent's default, 30s). SCALE_SETTLE=S: seconds between the
# last launch and the window (default 12); at least two sample intervals put every task's
# first task.sample before the window, which then holds the steady state (one node.sample
# per interval, a task.sample only for tasks that changed). SCALE_SLEEPS=0: no baseline of
# bare sleeps (its columns read 0; shorter runs). SCALE_BASE_O=DIR: the same N with
# another build's corrald (its output directory, e.g. of `git worktree add /tmp/base REV &&
# make -C /tmp/base`), in the same run, one row each after this build's (an N it cannot
# reach, say for want of descriptors, is reported failed and the run goes on).
# Then ended tasks (SCALE_ENDED, default 2,000, quick 300; 0: none): one agent with the default
# ended_keep (1,000) runs that many `true` tasks one after another; at every quarter corrald's
# RSS and the latency of `ps --all --json` (the whole list; median of 5) and of its first page
# (`--limit 50`), with the base build too when given.
# SCALE_V2=1: both agents in cgroup v2 mode on the unified hierarchy of this v1 hybrid host
# (CORRAL_TEST_CGROUP_V2_ROOT; no controller there, so no limits), where the live walk's skip
# compares the subtree's cpu.stat usage_usec; the base must be a build that knows the variable
# (a2a3b5e or later), or it runs on v1. Each row's build says in its start line which counter
# its live reads compare (printed after the table).
# Results: tables on stdout.
# Reported, not enforced (the host is shared); the enforced bound is
# tests/integration/agent_scale.sh.
set -u
cd "$(dirname "$0")/../.."
. tests/bench/proc_cpu_lib.sh
O=${CORRAL_O:-$PWD/.output}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -x "$O/corrald" ] || { echo "missing $O/corrald (make all)"; exit 1; }
if [ -n "${SCALE_QUICK:-}" ]; then
	NS=${SCALE_NS:-"1 100"}
	WIN=${SCALE_WINDOW:-10}
else
	NS=${SCALE_NS:-"1 100 1000 4000"}
	WIN=${SCALE_WINDOW:-60}
fi
SAMPLE=${SCALE_SAMPLE:-}
T=$(mktemp -d /tmp/corral-scale.XXXXXX)
chmod 755 "$T"
SOCK=$T/sock
SUB=corral-scale-$$
BSUB=corral-scale-base-$$
AG=
HZ=$(getconf CLK_TCK)

kill_cg() { # HIERARCHY-DIR: kill every process in it and below, remove the directories
	local h=$1 f p
	[ -d "$h" ] || return 0
	for f in $(find "$h" -name cgroup.procs); do
		for p in $(cat "$f"); do kill -9 "$p" 2>/dev/null; done
	done
	for _ in $(seq 50); do
		[ -z "$(find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
		sleep 0.1
	done
	find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
}
stop_agent() {
	[ -n "$AG" ] && { kill "$AG" 2>/dev/null; wait "$AG" 2>/dev/null; }
	AG=
	for h in /sys/fs/cgroup/*/"$SUB" /sys/fs/cgroup/unified/"$SUB"; do kill_cg "$h"; done
}
stop_base() {
	for h in /sys/fs/cgroup/*/"$BSUB"; do kill_cg "$h"; done
}
trap 'stop_agent; stop_base; rm -rf "$T"' EXIT

BO=$O # the build under test in this row
ctl() { "$BO/corralctl" --socket "$SOCK" "$@"; }
pss_kb() { # sum of Pss over pids, KiB
	local sum=0 p v
	for p in "$@"; do
		v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null) && sum=$((sum + v))
	done
	echo "$sum"
}
fds_of() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
# "<records> <bytes>" in the agent's spool (no collector here: all pending), from its status
spooled() {
	ctl status --json 2>/dev/null | python3 -c 'import sys, json
s = json.load(sys.stdin).get("spool", {})
print(s.get("pending_records", 0), s.get("bytes", 0))' 2>/dev/null || echo "0 0"
}
# "<listing> <visits> <every_task> <live walks> <skipped>" from the agent's /metrics
checks_now() {
	curl -fsS --max-time 10 "http://127.0.0.1:$MPORT/metrics" 2>/dev/null | awk '
		$1 == "corral_node_sample_checks_total{kind=\"listing\"}" {l = $2}
		$1 == "corral_node_sample_checks_total{kind=\"visits\"}" {v = $2}
		$1 == "corral_node_sample_checks_total{kind=\"every_task\"}" {e = $2}
		$1 == "corral_bpf_live_walks_total" {w = $2}
		$1 == "corral_bpf_live_walks_skipped_total" {k = $2}
		END {printf "%d %d %d %d %d\n", l, v, e, w, k}'
}
# The shims: the agent's descendants named corral-shim (forked by corrald or corral-spawn).
shims() {
	local p c
	for p in $(cat /proc/"$AG"/task/*/children 2>/dev/null); do
		for c in $p $(cat /proc/"$p"/task/*/children 2>/dev/null); do
			[ "$(cat /proc/"$c"/comm 2>/dev/null)" = corral-shim ] && echo "$c"
		done
	done
}
median_ms() { # CMD...: median wall time of 5 runs, ms
	local i t0 t1 ts=()
	for i in 1 2 3 4 5; do
		t0=$(date +%s%N); "$@" >/dev/null 2>&1; t1=$(date +%s%N)
		ts+=($(((t1 - t0) / 1000)))
	done
	printf '%s\n' "${ts[@]}" | sort -n | sed -n 3p | awk '{printf "%.2f", $1 / 1000}'
}
pct() { # ns over a window of W ns (default WIN seconds) -> % of one core
	awk -v n="$1" -v w="${2:-$((WIN * 1000000000))}" 'BEGIN {printf "%.3f", n / w * 100}'
}
tpct() { # ticks over W ns -> % of one core
	awk -v n="$1" -v w="$2" -v hz="$HZ" 'BEGIN {printf "%.3f", n / hz / (w / 1e9) * 100}'
}

run_agent() { # N
	local n=$1 fd0 fd1 i ids running shp c0 c1 s0 s1 k0 k1 t0 t1 ts0 ts1 conf=$T/a.conf
	rm -rf "$T/state"
	printf '[agent]\nmax_tasks = %d\n' $((n + 16)) >"$conf"
	[ -n "$SAMPLE" ] && printf 'sample_interval = %s\n' "$SAMPLE" >>"$conf"
	MPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	printf '[metrics]\nlisten = %s\n' "$MPORT" >>"$conf"
	(
		ulimit -n "$(ulimit -Hn)"
		exec "$BO/corrald" --socket "$SOCK" --state-dir "$T/state" --config "$conf" \
			--cgroup-subtree "$SUB" --node scale >"$T/agent.log" 2>&1
	) &
	AG=$!
	for _ in $(seq 200); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
	ctl status >/dev/null 2>&1 || { echo "agent did not start"; cat "$T/agent.log"; exit 1; }
	LIVE_SAY="$LIVE_SAY
$BO, N = $n: $(grep -o 'cgroups: [a-z0-9]* mode' "$T/agent.log"); $(grep -o 'live reads [^,]*, [^,]*' "$T/agent.log")"
	sleep 1
	fd0=$(fds_of "$AG")
	for i in $(seq "$n"); do
		ctl run --no-sandbox -- /bin/sleep 1000000 >/dev/null ||
			{ echo "launch $i of $n failed: $(tail -2 "$T/agent.log" | tr '\n' ' ')" >&2; stop_agent; return 1; }
	done
	for _ in $(seq 600); do
		running=$(ctl ps --json | python3 -c 'import sys,json
print(sum(1 for t in json.load(sys.stdin) if t.get("state") == "running"))')
		[ "$running" -ge "$n" ] && break
		sleep 0.5
	done
	# launches settled: the cgroup pool refilled, each task's audit budget saved once at the
	# first budget walk after its launch (every [audit] summary_interval, default 10 s)
	sleep "${SCALE_SETTLE:-12}"
	shp=$(shims)
	# The shims' reads take seconds at thousands of tasks: outside corrald's window, and each
	# window divided by its own measured length.
	s0=$(proc_cpu $shp); ts0=$(date +%s%N)
	r0=$(spooled)
	k0=($(checks_now))
	c0=$(proc_cpu "$AG"); t0=$(date +%s%N)
	sleep "$WIN"
	c1=$(proc_cpu "$AG"); t1=$(date +%s%N)
	k1=($(checks_now))
	r1=$(spooled)
	s1=$(proc_cpu $shp); ts1=$(date +%s%N)
	A_WIN=$((t1 - t0)) S_WIN=$((ts1 - ts0))
	CHECKS="$((k1[0] - k0[0])) / $((k1[1] - k0[1])) / $((k1[2] - k0[2]))"
	WALKS="$((k1[3] - k0[3])) / $((k1[4] - k0[4]))"
	RECS=$(( ${r1% *} - ${r0% *} )) RBYTES=$(( ${r1#* } - ${r0#* } ))
	fd1=$(fds_of "$AG")
	A_TICKS=$(( ${c1% *} - ${c0% *} )); A_NS=$(( ${c1#* } - ${c0#* } ))
	S_TICKS=$(( ${s1% *} - ${s0% *} )); S_NS=$(( ${s1#* } - ${s0#* } ))
	A_RSS=$(awk '/^VmRSS:/ {print $2}' "/proc/$AG/status")
	NSHIM=$(echo $shp | wc -w)
	SHIM_PSS=$(( $(pss_kb $shp) / (NSHIM > 0 ? NSHIM : 1) ))
	SHIM_FDS=$(fds_of "$(echo $shp | awk '{print $1}')")
	FD_PER_TASK=$(awk -v a="$fd1" -v b="$fd0" -v n="$n" 'BEGIN {printf "%.2f", (a - b) / n}')
	# beyond N = 1 of this run: what each further task adds (the ready cgroups of the pool
	# and the first launch's one-time descriptors cancel out)
	[ -n "$FIRST_FDS" ] && [ "$n" -gt "$FIRST_N" ] &&
		FD_PER_TASK=$(awk -v a="$fd1" -v b="$FIRST_FDS" -v n="$n" -v m="$FIRST_N" \
			'BEGIN {printf "%.2f", (a - b) / (n - m)}')
	A_FDS=$fd1
	PS_MS=$(median_ms ctl ps)
	PSA_MS=$(median_ms ctl ps --all --json)
	stop_agent
}

run_base() { # N
	local n=$1 i h pids=() c0 c1
	B_NS=0 B_PSS=0
	[ "${SCALE_SLEEPS:-1}" = 0 ] && return 0
	for h in memory cpuacct; do mkdir -p "/sys/fs/cgroup/$h/$BSUB"; done
	for i in $(seq "$n"); do
		for h in memory cpuacct; do mkdir "/sys/fs/cgroup/$h/$BSUB/b$i"; done
		sh -c 'for h in memory cpuacct; do echo $$ >/sys/fs/cgroup/$h/'"$BSUB"'/b'"$i"'/cgroup.procs; done
exec sleep 1000000' &
		pids+=($!)
		disown $!
	done
	sleep 3
	c0=$(proc_cpu "${pids[@]}")
	sleep "$WIN"
	c1=$(proc_cpu "${pids[@]}")
	B_NS=$(( ${c1#* } - ${c0#* } ))
	B_PSS=$(( $(pss_kb "${pids[@]}") / n ))
	stop_base
}

if [ -n "${SCALE_V2:-}" ]; then
	[ -f /sys/fs/cgroup/unified/cgroup.procs ] || { echo "SKIP: SCALE_V2 needs a v1 hybrid host"; exit 77; }
	export CORRAL_TEST_CGROUP_V2_ROOT=/sys/fs/cgroup/unified
fi
LIVE_SAY=
echo "agent_scale: ${SCALE_V2:+cgroup v2 mode (unified hierarchy), }window ${WIN}s after ${SCALE_SETTLE:-12}s, sample interval ${SAMPLE:-default}, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| N | corrald CPU %% (ticks / run time) | vs N=1 | shims CPU %% | sleeps (baseline) CPU %% | corrald RSS KiB | shim PSS KiB/task | sleep PSS KiB/task (baseline) | corrald fds | fds/task | shim fds | ps ms | ps --all ms | records spooled in the window | their bytes | checks in the window: anchors / visits / every task | live walks / skipped |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
row() { # N BUILD-LABEL
	local ratio
	[ -z "$FIRST_NS" ] && { FIRST_NS=$A_NS; FIRST_WIN=$A_WIN; FIRST_FDS=$A_FDS; FIRST_N=$1; }
	ratio=$(awk -v a="$A_NS" -v b="$FIRST_NS" -v wa="$A_WIN" -v wb="$FIRST_WIN" \
		'BEGIN {printf "%.2f", (b > 0 ? (a / wa) / (b / wb) : 0)}')
	printf '| %d%s | %s / %s | %s | %s | %s | %d | %d | %d | %d | %s | %d | %s | %s | %d | %d | %s | %s |\n' \
		"$1" "$2" "$(tpct "$A_TICKS" "$A_WIN")" "$(pct "$A_NS" "$A_WIN")" "$ratio" \
		"$(pct "$S_NS" "$S_WIN")" "$(pct "$B_NS")" \
		"$A_RSS" "$SHIM_PSS" "$B_PSS" "$A_FDS" "$FD_PER_TASK" "$SHIM_FDS" "$PS_MS" "$PSA_MS" \
		"$RECS" "$RBYTES" "$CHECKS" "$WALKS"
}
FIRST_NS= FIRST_WIN= FIRST_FDS= FIRST_N= BASE_FDS= BASE_N=
for n in $NS; do
	BO=$O
	run_agent "$n" || { echo "| $n | failed |"; continue; }
	run_base "$n"
	row "$n" ""
	if [ -n "${SCALE_BASE_O:-}" ]; then
		# the base build's ratio is against this build's N = 1
		BO=$SCALE_BASE_O
		SAVE_FDS=$FIRST_FDS SAVE_N=$FIRST_N
		FIRST_FDS=$BASE_FDS FIRST_N=$BASE_N
		if run_agent "$n"; then
			[ -z "$BASE_FDS" ] && { BASE_FDS=$A_FDS; BASE_N=$n; }
			row "$n" " (base)"
		else
			echo "| $n (base) | failed |"
		fi
		FIRST_FDS=$SAVE_FDS FIRST_N=$SAVE_N
	fi
done
echo "start lines:$LIVE_SAY"
run_ended() { # TOTAL LABEL: rows of the ended-task table
	local total=$1 label=$2 i q=$(( $1 / 4 ))
	rm -rf "$T/state"
	(
		ulimit -n "$(ulimit -Hn)"
		exec "$BO/corrald" --socket "$SOCK" --state-dir "$T/state" --cgroup-subtree "$SUB" \
			--node scale >"$T/agent.log" 2>&1
	) &
	AG=$!
	for _ in $(seq 200); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
	sleep 1
	for i in $(seq 0 "$total"); do
		if [ "$i" -gt 0 ]; then
			ctl run --wait --no-sandbox -- /bin/true >/dev/null 2>&1 ||
				{ echo "| $label | task $i failed |"; break; }
		fi
		[ $((i % q)) = 0 ] || continue
		# a build without pages answers --limit with an error: not timed
		printf '| %s | %d | %d | %s | %s |\n' "$label" "$i" \
			"$(awk '/^VmRSS:/ {print $2}' "/proc/$AG/status")" "$(median_ms ctl ps --all --json)" \
			"$(ctl ps --all --limit 1 >/dev/null 2>&1 && median_ms ctl ps --all --limit 50 || echo -)"
	done
	stop_agent
}
if [ -n "${SCALE_QUICK:-}" ]; then ENDED=${SCALE_ENDED:-300}; else ENDED=${SCALE_ENDED:-2000}; fi
if [ "$ENDED" -gt 0 ]; then
	echo
	echo "ended tasks (ended_keep 1000): corrald RSS and ps latency"
	echo '| build | ended tasks | corrald RSS KiB | ps --all ms | ps --all --limit 50 ms |'
	echo '|---|---|---|---|---|'
	BO=$O
	run_ended "$ENDED" this
	if [ -n "${SCALE_BASE_O:-}" ]; then
		BO=$SCALE_BASE_O
		run_ended "$ENDED" base
	fi
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
