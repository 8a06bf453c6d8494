#!/bin/bash
# corrald's CPU instructions per task launch (valgrind's callgrind, the agent process only: the
# launch spawner it execs and the shims run natively), BENCH_LAUNCHES (default 200) launches of
# /bin/true one after the other through the API (helper_launch_bench api: each waits for the
# task's end), without BPF (--no-bpf: the same path under valgrind for every build) and with
# the unconfined seccomp profile and no mount namespace (valgrind knows neither seccomp(2) nor
# mount_setattr(2)). Each build
# is run twice, with no launch and with BENCH_LAUNCHES of them; the difference divided by the
# launches is the figure, so the start and the stop cancel out. The 250 ms tick's instructions
# (on_tick, inclusive) are left out of the figure: a run that took longer (a busy host) has
# more ticks, which made the same build differ by 14% between two runs; they are shown apart.
# Instruction counts do not depend on the host's load otherwise, so two builds compare on a
# busy host: LAUNCH_AB_BASE=DIR (another build's output directory, as for launch_ab.sh) adds
# that build's figure, in LAUNCH_INSTR_ROUNDS (default 3) alternating rounds, and the ratio
# this / base of the medians. LAUNCH_SPOOL_COMPRESS=no turns the spool's zstd frames off in
# every build that has them. LAUNCH_INSTR_TASKSTATS=no runs the agents with --no-taskstats: the
# taskstats listener receives the exit of every process on the node, so on a busy host the
# other work's exits add to the count (tens of thousands of instructions per launch, varying
# from run to run); without it the figure is the launch's alone. LAUNCH_INSTR_PROFILE=N (with a
# base) prints the N functions whose instructions per launch differ most between the builds
# (tests/bench/callgrind_diff.py). Skips without valgrind or root.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
BASE=${LAUNCH_AB_BASE:-}
N=${BENCH_LAUNCHES:-200}
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
H=$O/tests/bench/helper_launch_bench
SUB=corral-bench-instr-$$
D=""
A=""
cleanup() {
	[ -n "$A" ] && { kill "$A" 2>/dev/null; wait "$A" 2>/dev/null; }
	for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	[ -n "$D" ] && rm -rf "$D"
	A=""
	D=""
}
trap cleanup EXIT

# instructions BUILD_DIR LAUNCHES -> the agent's instructions from start to exit, and those of
# its ticks (one line: "all ticks")
instructions() {
	local o=$1 n=$2 out
	D=$(mktemp -d)
	# valgrind knows neither seccomp(2), which compiling a filter probes, nor mount_setattr(2):
	# tasks unconfined, without a mount namespace
	printf '[agent]\nseccomp_default = unconfined\n[sandbox]\nmount_namespace = no\n' >"$D/c.conf"
	# LAUNCH_SPOOL_COMPRESS=no: the spool's zstd frames off, where the build has them (a build
	# that does not know the key has none)
	if [ "${LAUNCH_SPOOL_COMPRESS:-yes}" = no ]; then
		printf '[spool]\ncompress = false\n' >>"$D/c.conf"
		"$o/corrald" --config "$D/c.conf" --version >/dev/null 2>&1 ||
			printf '[agent]\nseccomp_default = unconfined\n[sandbox]\nmount_namespace = no\n' >"$D/c.conf"
	fi
	valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$o/corrald" --config "$D/c.conf" \
		--socket "$D/s" --state-dir "$D/state" --cgroup-subtree "$SUB" --node bench --no-bpf \
		"${TS[@]}" --log-level warning >"$D/log" 2>"$D/vg" &
	A=$!
	for _ in $(seq 1200); do [ -S "$D/s" ] && "$o/corralctl" --socket "$D/s" status >/dev/null 2>&1 && break; sleep 0.1; done
	if [ "$n" -gt 0 ]; then
		out=$("$H" "$n" api "$D/s") || { echo "launches failed: $out" >&2; cat "$D/log" >&2; return 1; }
	fi
	kill -TERM "$A"
	wait "$A" 2>/dev/null
	out=$(sed -n "s/^==$A== Collected : \([0-9]*\).*/\1/p" "$D/vg" | head -1)
	[ -n "$out" ] || { echo "no count:" >&2; tail -5 "$D/vg" >&2; return 1; }
	tick=$(callgrind_annotate --inclusive=yes "$D/cg.out" 2>/dev/null |
		awk '/[:]on_tick / {gsub(",", "", $1); print $1; exit}')
	A=""
	# LAUNCH_INSTR_PROFILE: the profile of the busy run kept, named by the build
	[ -n "${PROFILE_AS:-}" ] && [ "$n" -gt 0 ] && cp "$D/cg.out" "$PROF/$PROFILE_AS.out"
	cleanup
	echo "$out ${tick:-0}"
}

# per_launch BUILD_DIR TAG -> "TAG per_launch per_launch_with_ticks ticks_of_the_busy_run"
per_launch() {
	local idle itick busy btick
	TS=()
	[ "${LAUNCH_INSTR_TASKSTATS:-yes}" = no ] && TS=(--no-taskstats)
	read -r idle itick < <(instructions "$1" 0) || return 1
	read -r busy btick < <(PROFILE_AS=${PROF:+$2} instructions "$1" "$N") || return 1
	echo "$2 $(( (busy - btick - idle + itick) / N )) $(( (busy - idle) / N )) $btick"
}

echo "launch_instr: $N launches of /bin/true through the API, --no-bpf, corrald's instructions" \
	"(callgrind) per launch, without and with the 250 ms ticks"
R=${LAUNCH_INSTR_ROUNDS:-3}
PROF=
if [ -n "${LAUNCH_INSTR_PROFILE:-}" ] && [ -n "$BASE" ]; then
	PROF=$(mktemp -d)
	trap 'cleanup; rm -rf "$PROF"' EXIT
fi
[ -n "$BASE" ] || R=1
rows=$(for r in $(seq "$R"); do
	if [ -z "$BASE" ]; then per_launch "$O" this
	elif [ $((r % 2)) = 1 ]; then per_launch "$O" this && per_launch "$BASE" base
	else per_launch "$BASE" base && per_launch "$O" this; fi || exit 1
done) || { echo "FAIL: $rows"; exit 1; }
printf '%-6s %14s %16s %14s\n' build per_launch with_ticks ticks_of_run
echo "$rows" | while read -r t a b c; do printf '%-6s %14s %16s %14s\n' "$t" "$a" "$b" "$c"; done
[ -n "$BASE" ] && echo "$rows" | python3 -c '
import sys, statistics as st
v = {"this": [], "base": []}
for l in sys.stdin:
    t, a, b, c = l.split()
    v[t].append((int(a), int(b)))
m = {k: (st.median(x[0] for x in r), st.median(x[1] for x in r)) for k, r in v.items()}
print("medians over %d rounds: this %d (%d with ticks), base %d (%d with ticks)" %
      (len(v["this"]), m["this"][0], m["this"][1], m["base"][0], m["base"][1]))
print("ratio this/base: %.3f (with ticks %.3f)" % (m["this"][0] / m["base"][0],
      m["this"][1] / m["base"][1]))
'
# Where the difference is: the functions whose instructions (inclusive, per launch) differ
# most between the builds' busy runs of the last round, start and stop included.
if [ -n "$PROF" ] && [ -f "$PROF/this.out" ] && [ -f "$PROF/base.out" ]; then
	echo "largest differences per launch, inclusive, last round (this - base, this, base, function):"
	python3 tests/bench/callgrind_diff.py "$PROF/this.out" "$PROF/base.out" "$N" "${LAUNCH_INSTR_PROFILE}"
fi
exit 0
