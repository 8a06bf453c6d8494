#!/bin/bash
# The system calls behind run_wait.sh's two corralctl modes, counted (strace -c), not timed:
# corralctl run --wait -- /bin/true with its stdio passed (SCM_RIGHTS) against the same with
# --stdin/--stdout/--stderr /dev/null. Per launch: corralctl's calls (strace -f of one run per
# mode) and the agent's (corrald and its spawner, strace -f -p over RUN_WAIT_SC_N launches,
# default 20); then the calls whose counts differ between the modes. strace attaches to the
# shims as they fork, so a few per-launch setup calls of theirs may be missed in either mode.
set -u
cd "$(dirname "$0")/../.." || exit 1
O=${CORRAL_O:-$PWD/.output}
N=${RUN_WAIT_SC_N:-20}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v strace >/dev/null || { echo "SKIP: strace not installed"; exit 77; }
D=$(mktemp -d) SUB=corral-bench-$$
"$O/corrald" --socket "$D/s" --state-dir "$D/state" --cgroup-subtree "$SUB" --node bench \
	--log-level warning >>"$D/log" 2>&1 &
A=$!
trap 'kill $A 2>/dev/null; wait $A 2>/dev/null; for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do [ -d $h ] && find $h -depth -type d -exec rmdir {} \; 2>/dev/null; done; rm -rf $D' EXIT
for _ in $(seq 200); do "$O/corralctl" --socket "$D/s" status >/dev/null 2>&1 && break; sleep 0.05; done
# CALL COUNT lines of an strace -c summary
calls() { awk '$1 ~ /^[0-9.]+$/ && $NF != "total" {print $NF, $4}' "$1" | sort; }
total() { awk '$NF == "total" {print $4}' "$1"; }
for m in passed files; do
	args=()
	[ $m = files ] && args=(--stdin /dev/null --stdout /dev/null --stderr /dev/null)
	strace -f -c -o "$D/ctl-$m" "$O/corralctl" --socket "$D/s" run --wait -q "${args[@]}" -- /bin/true \
		</dev/null >/dev/null 2>&1
	strace -f -c -o "$D/agent-$m" -p "$A" -p "$(cut -d' ' -f1 /proc/$A/task/$A/children)" 2>/dev/null &
	S=$!
	sleep 1
	for _ in $(seq "$N"); do
		"$O/corralctl" --socket "$D/s" run --wait -q "${args[@]}" -- /bin/true </dev/null >/dev/null 2>&1
	done
	kill -INT $S
	wait $S
	calls "$D/ctl-$m" >"$D/c-$m"
	calls "$D/agent-$m" >"$D/a-$m"
	echo "$m: corralctl $(total "$D/ctl-$m") calls per run; agent $(awk -v t="$(total "$D/agent-$m")" -v n="$N" 'BEGIN { printf "%.1f", t / n }') calls per launch ($N launches)"
done
echo "corralctl, calls that differ (passed files):"
join -a1 -a2 -e0 -o 0,1.2,2.2 "$D/c-passed" "$D/c-files" | awk '$2 != $3 {print "  " $0}'
echo "agent per launch, calls that differ by more than 0.5 (passed files):"
join -a1 -a2 -e0 -o 0,1.2,2.2 "$D/a-passed" "$D/a-files" |
	awk -v n="$N" '{a = $2 / n; b = $3 / n; if (a - b > 0.5 || b - a > 0.5) printf "  %s %.1f %.1f\n", $1, a, b}'
