#!/bin/bash
# Energy attribution at scale: the agent's CPU per node sample with N live tasks, with a stand-in
# RAPL powercap tree (tests/integration/rapl_lib.sh: package and DRAM counters stepped at a
# constant power every 50 ms, at a real-time priority where chrt is allowed) and
# without one (the same agent, [energy] powercap_root an empty directory: no RAPL, so no
# attribution), side by side in one run, for each N in ESCALE_NS (default 1 1000). For each
# (N, mode) a fresh corrald (--no-bpf, sample_interval ESCALE_SAMPLE, default 1s, its own node
# name) uploads to one collector (SQLite); N minimal tasks (`sleep`, --no-sandbox) are launched;
# once all run and a few node samples have passed, over a window of ESCALE_WINDOW seconds
# (default 20):
#   - the attribution's own CPU time per node sample: `corralctl status` agent.energy
#     (attribution_cpu_ns / attributions: the agent's thread CPU time in reading the zones and
#     sharing each period among the live tasks), with RAPL; its ratio largest N / N = 1, and per
#     task;
#   - corrald's whole CPU per node sample (run time, /proc/PID/task/*/schedstat, over the
#     node.sample records it wrote in the window, counted in the collector; that includes the
#     task samples and uploads of the same interval), with and without RAPL: the ratio RAPL /
#     no RAPL at each N (the attribution's share of the agent's work; noisy on a shared host).
# Then, with RAPL at the largest N, the sum rule: the tasks are killed from outside (their
# `sleep` processes, found in their cgroups), and once every task.end and two later node samples are in, for package
# and DRAM: the tasks' energy (task.end usage.energy_j) + the node records' unattributed energy
# = the node records' energy, exactly in microjoules (exit 1 if not).
# CPU times are the host's, shared with other work: read the ratios, not the absolute figures.
# ESCALE_QUICK=1: N = 1 100, a 10 s window (development).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
for b in corrald corralctl corral-collector; do
	[ -x "$O/$b" ] || { echo "missing $O/$b (make all)"; exit 1; }
done
if [ -n "${ESCALE_QUICK:-}" ]; then
	NS=${ESCALE_NS:-"1 100"}
	WIN=${ESCALE_WINDOW:-10}
else
	NS=${ESCALE_NS:-"1 1000"}
	WIN=${ESCALE_WINDOW:-20}
fi
SAMPLE=${ESCALE_SAMPLE:-1s}
T=$(mktemp -d /tmp/corral-escale.XXXXXX)
chmod 755 "$T"
SOCK=$T/sock
SUB=corral-escale-$$
AG= COLL=
DB=$T/c.db
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TOKEN=escale-token-0123456789abcdef
. tests/integration/rapl_lib.sh
. tests/bench/proc_cpu_lib.sh

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
trap 'stop_agent; rapl_stop; [ -n "$COLL" ] && kill "$COLL" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
ctl() { "$O/corralctl" --socket "$SOCK" "$@"; }
q() { sqlite3 "$DB" "$1" 2>/dev/null; }
nsamples() { q "SELECT count(*) FROM records WHERE type='node.sample' AND node='$1'"; }

# the stand-in powercap tree (tests/integration/rapl_lib.sh): energy_uj = power x time,
# package 36 kW and DRAM 7.2 kW, rewritten every 50 ms
PC=$T/powercap
mkdir -p "$T/no-rapl"
rapl_tree "$PC"
rapl_writer "$PC" 36000 7200 0.05 || { echo "FAIL: the stand-in RAPL counter does not step"; exit 1; }

NODES=
for n in $NS; do for m in rapl none; do NODES="$NODES e-$m-$n"; done; done
for nd in $NODES; do printf 'node %s %s\n' "$nd" "$TOKEN-$nd"; done >"$T/tokens"
chmod 600 "$T/tokens"
"$O/corral-collector" serve --listen "127.0.0.1:$PORT" --db "sqlite:$DB" --tokens "$T/tokens" \
	>"$T/collector.log" 2>&1 &
COLL=$!
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.05; done

# the agent's energy counters: "<attributions> <attribution_cpu_ns>"
estat() {
	ctl status --json | python3 -c 'import json, sys
e = json.load(sys.stdin)["energy"]
print(e["attributions"], e["attribution_cpu_ns"])'
}

run_agent() { # N MODE: sets PER_NS (agent ns per node sample), NS_WIN, SAMPLES, ATTR_NS, ATTR_N
	local n=$1 mode=$2 node=e-$2-$1 conf=$T/a.conf i running c0 c1 k0 k1 e0 e1
	rm -rf "$T/state"
	echo "$TOKEN-$node" >"$T/token"
	chmod 600 "$T/token"
	printf '[agent]\nmax_tasks = %d\nsample_interval = %s\n[energy]\npowercap_root = %s\n[collector]\nbatch_delay = 100ms\n' \
		$((n + 16)) "$SAMPLE" "$([ "$mode" = rapl ] && echo "$PC" || echo "$T/no-rapl")" >"$conf"
	(
		ulimit -n "$(ulimit -Hn)"
		exec "$O/corrald" --socket "$SOCK" --state-dir "$T/state" --config "$conf" --no-bpf \
			--cgroup-subtree "$SUB" --node "$node" --collector-url "http://127.0.0.1:$PORT" \
			--token-file "$T/token" >"$T/agent-$node.log" 2>&1
	) &
	AG=$!
	for _ in $(seq 200); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
	ctl status >/dev/null 2>&1 || { echo "agent did not start"; cat "$T/agent-$node.log"; exit 1; }
	for i in $(seq "$n"); do
		ctl run --no-sandbox -- /bin/sleep 1000000 >/dev/null ||
			{ echo "launch $i of $n failed: $(tail -2 "$T/agent-$node.log" | tr '\n' ' ')" >&2; stop_agent; return 1; }
	done
	for _ in $(seq 600); do
		running=$(ctl ps --json | python3 -c 'import sys,json
print(sum(1 for t in json.load(sys.stdin) if t.get("state") == "running"))')
		[ "$running" -ge "$n" ] && break
		sleep 0.5
	done
	sleep 5 # every task has its baseline; the launches' uploads are done
	k0=$(nsamples "$node"); c0=$(proc_run_ns "$AG"); e0=$(estat)
	sleep "$WIN"
	k1=$(nsamples "$node"); c1=$(proc_run_ns "$AG"); e1=$(estat)
	NS_WIN=$((c1 - c0)); SAMPLES=$((k1 - k0))
	ATTR_N=$((${e1% *} - ${e0% *})); ATTR_NS=$((${e1#* } - ${e0#* }))
	PER_NS=$((SAMPLES > 0 ? NS_WIN / SAMPLES : 0))
}

# the sum rule over node's records (after its tasks ended): exact in microjoules
sum_rule() { # NODE N
	python3 - "$DB" "$1" "$2" <<'PY'
import json, sqlite3, sys
db, node, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db)
uj = lambda x: round(x * 1e6)
ends = [json.loads(b) for (b,) in con.execute("SELECT body FROM records WHERE type='task.end' AND node=?", (node,))]
nodes = [json.loads(b)['energy'] for (b,) in con.execute("SELECT body FROM records WHERE type='node.sample' AND node=?", (node,))]
ok = len(ends) == n
for k, part in (('package', 'cpu'), ('dram', 'dram')):
    tot = sum(uj(x[k + '_j']) for x in nodes)
    una = sum(uj(x.get('unattributed_%s_j' % k, 0)) for x in nodes)
    tasks = sum(uj(r['usage']['energy_j'][part]) for r in ends)
    print('  %s: node %d uJ = tasks %d + unattributed %d (difference %d) over %d task.end, %d node.sample' % (
        k, tot, tasks, una, tot - tasks - una, len(ends), len(nodes)))
    ok = ok and tot == tasks + una and tasks > 0
sys.exit(0 if ok else 1)
PY
}

echo "energy_scale: window ${WIN}s, sample interval $SAMPLE, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo '| N | mode | corrald CPU in window ms | node samples | corrald CPU per node sample us | RAPL / no RAPL | attributions | attribution CPU per sample us |'
echo '|---|---|---|---|---|---|---|---|'
declare -A PER ATTR
rc=0
for n in $NS; do
	for m in none rapl; do
		run_agent "$n" "$m" || { echo "| $n | $m | failed |"; rc=1; continue; }
		PER[$n-$m]=$PER_NS
		ratio=-
		[ "$m" = rapl ] && [ "${PER[$n-none]:-0}" -gt 0 ] &&
			ratio=$(awk -v a="$PER_NS" -v b="${PER[$n-none]}" 'BEGIN {printf "%.3f", a / b}')
		attr=-
		[ "$ATTR_N" -gt 0 ] && { ATTR[$n]=$((ATTR_NS / ATTR_N)); attr=$(awk -v x=${ATTR[$n]} 'BEGIN {printf "%.1f", x / 1e3}'); }
		printf '| %d | %s | %.1f | %d | %.1f | %s | %d | %s |\n' "$n" "$m" "$(awk -v x=$NS_WIN 'BEGIN {print x / 1e6}')" \
			"$SAMPLES" "$(awk -v x=$PER_NS 'BEGIN {print x / 1e3}')" "$ratio" "$ATTR_N" "$attr"
		if [ "$m" = rapl ] && [ "$n" = "${NS##* }" ]; then
			# the sum rule at the largest N: kill the tasks from outside, wait for their ends
			for h in /sys/fs/cgroup/*/"$SUB"; do
				for f in $(find "$h" -mindepth 2 -name cgroup.procs); do
					for p in $(cat "$f" 2>/dev/null); do
						[ "$(cat /proc/"$p"/comm 2>/dev/null)" = sleep ] && kill -9 "$p" 2>/dev/null
					done
				done
			done
			node=e-rapl-$n
			for _ in $(seq 600); do
				[ "$(q "SELECT count(*) FROM records WHERE type='task.end' AND node='$node'")" -ge "$n" ] && break
				sleep 0.5
			done
			k=$(nsamples "$node")
			for _ in $(seq 100); do [ "$(nsamples "$node")" -ge $((k + 2)) ] && break; sleep 0.2; done
			stop_agent
			sleep 1 # the last upload
			SUMRULE=$(sum_rule "$node" "$n") && SUMOK=1 || SUMOK=
		fi
		stop_agent
	done
done
echo
echo "energy attribution's own CPU per node sample (corralctl status agent.energy, with RAPL):"
first= last=
for n in $NS; do
	[ -n "${ATTR[$n]:-}" ] || continue
	printf '  N = %d: %.1f us per sample, %.3f us per task; of the agent'"'"'s CPU per sample %.2f%%\n' "$n" \
		"$(awk -v x=${ATTR[$n]} 'BEGIN {print x / 1e3}')" "$(awk -v x=${ATTR[$n]} -v n=$n 'BEGIN {print x / 1e3 / n}')" \
		"$(awk -v a=${ATTR[$n]} -v b=${PER[$n-rapl]:-0} 'BEGIN {print (b > 0 ? a / b * 100 : 0)}')"
	[ -z "$first" ] && first=${ATTR[$n]}
	last=${ATTR[$n]}
done
[ -n "$first" ] && [ "$first" != "$last" ] &&
	echo "  largest N / smallest N: $(awk -v a="$last" -v b="$first" 'BEGIN {printf "%.1f", b != 0 ? a / b : 0}')"
echo
echo "sum rule at N = ${NS##* } (tasks + unattributed = node, exact):"
echo "${SUMRULE:-  not run}"
[ -n "${SUMOK:-}" ] && echo "  holds" || { echo "  FAILS"; rc=1; }
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
