#!/bin/bash
# Cost of a connect flood to the node, with and without the per-task record budget, side by
# side with no flood, in one run. Each scenario starts a fresh corrald (SQLite collector up,
# audit on) and runs the same 20 ordinary tasks (sh -c 'ls /') one after another:
#   none:      no flood
#   budget:    plus a task making BUDGET_BENCH_CONNECTS connects, default budget
#   unbounded: the same flood with the budget off ([audit] task_rate = 0, task_bytes = 0:
#              every event a record, as before the budget existed)
#   base:      with BUDGET_BENCH_BASE_O=DIR (the output directory of another build, e.g. the
#              previous commit's): the budget scenario with that build's corrald, for an A/B in
#              the same run
# For each flood: the connect programs' cost per event (BPF run-time statistics of the
# agent's own audit_connect4 program while the flood ran, tests/bench/helper_bpf_stats) and the
# events lost in the ring buffer (the audit.lost records at the collector).
# For each: corrald CPU (utime+stime of all its threads, /proc/PID/stat) from the first task
# until every record is acked by the collector, the records spooled (the agent's counter) and
# stored (rows in the collector's database), and the rates: records/s into the spool while
# the flood ran, and records/s drained (stored / time until the spool was empty).
# Reported, not enforced: the host is shared and noisy; ratios are within one run.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
FLOOD=$O/tests/integration/helper_connect_flood
[ -x "$FLOOD" ] || { echo "missing $FLOOD (make all)"; exit 1; }
N=${BUDGET_BENCH_CONNECTS:-400000}
BASE_O=${BUDGET_BENCH_BASE_O:-}
STATS=$O/tests/bench/helper_bpf_stats
T=$(mktemp -d /tmp/corral-bench.XXXXXX)
SOCK=$T/sock
PORT=$((22000 + RANDOM % 20000))
TOKEN=bench-node-token-0123456789abcdef
printf 'node bench %s\n' "$TOKEN" >"$T/tokens"; chmod 600 "$T/tokens"; echo "$TOKEN" >"$T/token"; chmod 600 "$T/token"
COLL= AG=
stop() {
	[ -n "$AG" ] && { kill "$AG" 2>/dev/null; wait "$AG" 2>/dev/null; }
	[ -n "$COLL" ] && { kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; }
	AG= COLL=
	for h in /sys/fs/cgroup/*/corral-bench-$$ /sys/fs/cgroup/unified/corral-bench-$$; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
}
trap 'stop; rm -rf "$T"' EXIT
ctl() { "$BO/corralctl" --socket "$SOCK" "$@"; }
BO=$O
st() { ctl status --json | python3 -c 'import sys,json; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$AG/stat"; }
now_ms() { date +%s%3N; }

scenario() { # NAME FLOOD(0/1) BUDGETCONF [BUILD_DIR]
	local name=$1 flood=$2 conf=$3 db=$T/$1.db t0 t1 t2 c0 c1 s0 s1 rows fpid=
	BO=${4:-$O}
	rm -rf "$T/state"
	"$O/corral-collector" serve --listen 127.0.0.1:$PORT --db "sqlite:$db" --tokens "$T/tokens" >"$T/coll.log" 2>&1 &
	COLL=$!
	for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
	printf '[collector]\nbatch_delay = 100ms\n[audit]\n%s\n' "$conf" >"$T/a.conf"
	"$BO/corrald" --socket "$SOCK" --state-dir "$T/state" --cgroup-subtree corral-bench-$$ --node bench \
		--config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token" >"$T/agent.log" 2>&1 &
	AG=$!
	for _ in $(seq 200); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
	c0=$(cpu_ms) s0=$(st records_spooled) t0=$(now_ms)
	if [ "$flood" = 1 ]; then
		"$STATS" "$AG" audit_connect4 -- "$BO/corralctl" --socket "$SOCK" run --wait --workdir / \
			-- "$FLOOD" "$N" 9 >"$T/$name.bpf" 2>&1 &
		fpid=$!
	fi
	for _ in $(seq 20); do ctl run --wait --workdir / -- /bin/sh -c 'ls / >/dev/null' >/dev/null 2>&1; done
	[ -n "$fpid" ] && wait "$fpid"
	t1=$(now_ms) s1=$(st records_spooled)
	for _ in $(seq 3000); do [ "$(st spool_entries_pending)" = 0 ] && break; sleep 0.1; done
	t2=$(now_ms) c1=$(cpu_ms)
	rows=$(sqlite3 "$db" "SELECT count(*) FROM records")
	RES[$name]="$((c1 - c0)) $((s1 - s0)) $rows $((t1 - t0)) $((t2 - t0)) $(st audit_summarized)"
	BPF[$name]=$(awk '$1 == "total" {sub("ns_per_run=", "", $4); print $4}' "$T/$name.bpf" 2>/dev/null)
	LOST[$name]=$(sqlite3 "$db" "SELECT coalesce(sum(json_extract(body,'\$.event.lost')),0) FROM records WHERE type='audit.lost'")
	stop
}
declare -A RES BPF LOST
SCEN="none budget unbounded"
scenario none 0 ""
scenario budget 1 ""
if [ -n "$BASE_O" ]; then
	scenario base 1 "" "$BASE_O"
	SCEN="none budget base unbounded"
fi
scenario unbounded 1 "$(printf 'task_rate = 0\ntask_bytes = 0')"
printf '%-10s %12s %10s %10s %10s %10s %14s %14s %12s %10s\n' scenario "corrald CPU" "spooled" "stored" \
	"run ms" "drained ms" "spooled rec/s" "drained rec/s" "BPF ns/ev" "rb lost"
for s in $SCEN; do
	read -r cpu sp rows run dr summ <<<"${RES[$s]}"
	printf '%-10s %9s ms %10s %10s %10s %10s %14s %14s %12s %10s\n' "$s" "$cpu" "$sp" "$rows" "$run" "$dr" \
		"$(awk -v a="$sp" -v b="$run" 'BEGIN {printf "%.0f", a * 1000 / b}')" \
		"$(awk -v a="$rows" -v b="$dr" 'BEGIN {printf "%.0f", a * 1000 / b}')" \
		"${BPF[$s]:--}" "${LOST[$s]:--}"
	[ "$s" = budget ] && echo "           (budget: $summ events counted in audit.summary records)"
done
read -r cn _ <<<"${RES[none]}"; read -r cb _ <<<"${RES[budget]}"; read -r cu _ <<<"${RES[unbounded]}"
echo "flood of $N connects next to 20 ordinary tasks:"
awk -v n="$cn" -v b="$cb" -v u="$cu" 'BEGIN {
	printf "  corrald CPU, flood with budget / no flood:    %.2f\n", (n > 0) ? b / n : 0
	printf "  corrald CPU, flood unbounded / no flood:      %.2f\n", (n > 0) ? u / n : 0
	printf "  corrald CPU, flood with budget / unbounded:   %.3f\n", (u > 0) ? b / u : 0 }'
if [ -n "$BASE_O" ]; then
	read -r cB _ <<<"${RES[base]}"
	awk -v b="$cb" -v B="$cB" -v e="${BPF[budget]:-0}" -v E="${BPF[base]:-0}" 'BEGIN {
	printf "  corrald CPU, flood with budget: this build / base build: %.3f\n", (B > 0) ? b / B : 0
	printf "  BPF ns per connect event: this build / base build:       %.3f\n", (E > 0) ? e / E : 0 }'
fi
