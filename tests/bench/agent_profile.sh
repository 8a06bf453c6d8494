#!/bin/bash
# Where corrald's time goes with N sleeping tasks (PROFILE_N, default 1000), samples included:
# a fresh corrald (sample_interval PROFILE_SAMPLE, default 5s, so that the window holds several
# batches), N minimal tasks (`sleep`, --no-sandbox), then `perf record --call-graph dwarf`
# (cpu-clock) on
# corrald over PROFILE_WINDOW seconds (default 30). Prints corrald's run time over the window
# (schedstat of its threads), the records spooled in it (corralctl status; all
# task.sample but for a few node records), the run time per sample, and the top of `perf report` (self time, then the
# callers of the top entries). PROFILE_PERF=0: no perf, the figures only. PROFILE_SETTLE=S:
# seconds between the last launch and the window (default 15); two sample intervals or more put
# every task's first task.sample before the window, which then holds the steady state.
# PROFILE_BPFCALLS=1: instead of perf, the bpf() system calls corrald makes in the window
# (strace -c), a count that does not depend on the host's load.
set -u
cd "$(dirname "$0")/../.."
. tests/bench/proc_cpu_lib.sh
O=${CORRAL_O:-$PWD/.output}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -x "$O/corrald" ] || { echo "missing $O/corrald (make all)"; exit 1; }
N=${PROFILE_N:-1000}
SAMPLE=${PROFILE_SAMPLE:-5s}
WIN=${PROFILE_WINDOW:-30}
PERF=${PROFILE_PERF:-1}
T=$(mktemp -d /tmp/corral-profile.XXXXXX)
chmod 755 "$T"
SOCK=$T/sock
SUB=corral-profile-$$
AG=
ctl() { "$O/corralctl" --socket "$SOCK" "$@"; }
kill_cg() {
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
trap 'stop_agent; rm -rf "$T"' EXIT
records() { # records appended to the spool so far (corralctl status)
	ctl status --json 2>/dev/null | python3 -c 'import sys,json
def f(o):
    if isinstance(o, dict):
        if "records_spooled" in o: return o["records_spooled"]
        for v in o.values():
            r = f(v)
            if r is not None: return r
print(f(json.load(sys.stdin)) or 0)'
}

printf '[agent]\nmax_tasks = %d\nsample_interval = %s\n' $((N + 16)) "$SAMPLE" >"$T/a.conf"
(
	ulimit -n "$(ulimit -Hn)"
	exec "$O/corrald" --socket "$SOCK" --state-dir "$T/state" --config "$T/a.conf" \
		--cgroup-subtree "$SUB" --node profile >"$T/agent.log" 2>&1
) &
AG=$!
for _ in $(seq 200); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
ctl status >/dev/null 2>&1 || { echo "agent did not start"; cat "$T/agent.log"; exit 1; }
for i in $(seq "$N"); do
	ctl run --no-sandbox -- /bin/sleep 1000000 >/dev/null || { echo "launch $i failed"; exit 1; }
done
sleep "${PROFILE_SETTLE:-15}" # launches settled (cgroup pool, budgets saved once)
s0=$(records)
c0=$(proc_run_ns "$AG")
if [ "${PROFILE_BPFCALLS:-0}" = 1 ]; then
	PERF=0
	timeout "$WIN" strace -c -e trace=bpf -p "$AG" -o "$T/strace.txt" >/dev/null 2>&1
	echo "bpf() calls in the window: $(awk '$NF == "bpf" {print $4}' "$T/strace.txt")"
elif [ "$PERF" = 1 ]; then
	perf record -q --call-graph dwarf,16384 -F 999 -p "$AG" -o "$T/perf.data" -- sleep "$WIN" \
		>/dev/null 2>&1
else
	sleep "$WIN"
fi
c1=$(proc_run_ns "$AG")
s1=$(records)
echo "agent_profile: N=$N, sample_interval $SAMPLE, window ${WIN}s after ${PROFILE_SETTLE:-15}s, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "corrald run time: $(((c1 - c0) / 1000)) us, records spooled: $((${s1:-0} - ${s0:-0}))" \
	"($(awk -v c=$((c1 - c0)) -v s=$((${s1:-0} - ${s0:-0})) 'BEGIN {printf "%.1f", s ? c / s / 1000 : 0}') us per record)"
if [ "$PERF" = 1 ]; then
	echo "--- self time"
	perf report -i "$T/perf.data" --no-children --stdio --sort symbol -g none 2>/dev/null |
		grep -v '^#' | grep -v '^$' | head -40
	echo "--- with children"
	perf report -i "$T/perf.data" --children --stdio --sort symbol -g none 2>/dev/null |
		grep -v '^#' | grep -v '^$' | grep -v '\[k\]' | head -${PROFILE_LINES:-60}
fi
