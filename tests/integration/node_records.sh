#!/bin/bash
# node.sample records end to end (agent -> spool -> collector, SQLite): emitted at start and
# every sample_interval, with the [node] price class and labels; capacity checked against
# nproc and /proc/meminfo read here, allocation against the requests this test made, each
# record stored once; the collector's rollup_node_day against the sum of the stored records'
# periods computed here from their JSON; after an agent restart the first record covers the
# time since the last one before the stop; node energy from a stand-in RAPL powercap tree the test advances (a counter
# wrap included) against the sum of the steps it wrote.
. "$(dirname "$0")/lib.sh"
need_root
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
node_token "$TOKEN"
COLL=
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
# a stand-in RAPL powercap tree (package, DRAM, and a core zone that is not counted)
PC=$T/powercap
rapl_zone "$PC" intel-rapl:0 package-0 1000000 900000
rapl_zone "$PC" intel-rapl:0:0 core 1000000 5
rapl_zone "$PC" intel-rapl:0:1 dram 65712999613 100
printf '[agent]\nsample_interval = 1s\n[node]\nprice_class = cpu-std\nlabels = rack=r7,zone=eu-1\n[energy]\npowercap_root = %s\n[collector]\nbatch_delay = 100ms\n' "$PC" >"$T/agent.conf"
start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"

# two tasks with requests, running while the node is sampled
a=$(ctl run --cpus 0.5 --memory 64M -- sleep 30)
b=$(ctl run --cpus 0.25 --memory 32M -- sleep 30)
[ -n "$a" ] && [ -n "$b" ] || fail "launching the tasks"
after=$(date +%s%N)
# records made after both tasks ran (their time is later than $after)
n=$(wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $after" 3 30)
[ "$n" -ge 3 ] && pass "$n node.sample records stored while the tasks ran" || fail "node.sample records: $n"

python3 - "$DB" "$after" "$(nproc)" <<'PY' || fail "node.sample contents (above)"
import json, sqlite3, sys
db, after, ncpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mem = next(int(l.split()[1]) * 1024 for l in open('/proc/meminfo') if l.startswith('MemTotal:'))
rows = sqlite3.connect(db).execute(
    "SELECT body, time_ns FROM records WHERE type='node.sample' ORDER BY time_ns").fetchall()
recs = [json.loads(b) for b, _ in rows]
bad = []
first = recs[0]
if first['period_ns'] != 0: bad.append('first period %d' % first['period_ns'])
for r in recs:
    c = r['capacity']
    if c['cpus'] != ncpu or c['memory_bytes'] != mem or c['gpus'] != 0 or c['gpu_models'] != []:
        bad.append('capacity %s (nproc %d, MemTotal %d)' % (c, ncpu, mem))
    if r['price_class'] != 'cpu-std' or r['labels'] != {'rack': 'r7', 'zone': 'eu-1'}:
        bad.append('class/labels %s %s' % (r.get('price_class'), r.get('labels')))
    if 'task' in r: bad.append('a task member')
    if r['used']['memory_bytes'] > mem: bad.append('used memory above capacity')
for (b, t) in rows:
    r = json.loads(b)
    if t > after:
        a = r['allocated']
        if a['tasks'] != 2 or abs(a['cpus'] - 0.75) > 1e-9 or a['memory_bytes'] != 96 << 20:
            bad.append('allocated %s, want 2 tasks, 0.75 cpus, 96 MiB' % a)
# consecutive records: the period is the time between them (same agent run)
for p, r in zip(rows, rows[1:]):
    gap = r[1] - p[1]
    per = json.loads(r[0])['period_ns']
    if abs(gap - per) > 200_000_000: bad.append('period %d vs time gap %d' % (per, gap))
ids = [r['record_id'] for r in recs]
if len(set(ids)) != len(ids): bad.append('repeated record ids')
for m in bad[:10]: print(m)
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && pass "capacity = nproc and MemTotal, allocation = the two tasks' requests, class and labels from [node], periods = the time between records"

# energy: the counters advanced by steps, each seen by a record (the package one wraps at
# 1 J); the records' joules summed against the steps written here
ns() { q "SELECT count(*) FROM records WHERE type='node.sample'"; }
for step in "950000 300" "20000 600" "520000 1000"; do
	set -- $step
	c=$(ns)
	rapl_set "$PC" intel-rapl:0 "$1"; rapl_set "$PC" intel-rapl:0:1 "$2"; rapl_set "$PC" intel-rapl:0:0 "$RANDOM"
	wait_count "SELECT count(*) FROM records WHERE type='node.sample'" $((c + 2)) 30 >/dev/null
done
e=$(q "SELECT printf('%.6f %.6f %d', sum(json_extract(body, '$.energy.package_j')),
	sum(json_extract(body, '$.energy.dram_j')), sum(json_extract(body, '$.energy.sources.package_j') = 'rapl'))
	FROM records WHERE type='node.sample'")
# package: 900000 -> 950000 -> (wrap at 1000000) 20000 -> 520000 = 50000 + 70000 + 500000 uJ
[ "$e" = "0.620000 0.000900 $(ns)" ] && pass "energy from the stand-in RAPL tree: package 0.62 J (a wrap included), DRAM 0.0009 J, every record sourced rapl" \
	|| fail "energy: $e (want 0.620000 0.000900 $(ns))"

ctl kill "$a" >/dev/null 2>&1; ctl kill "$b" >/dev/null 2>&1
stop_agent
before=$(q "SELECT count(*) FROM records WHERE type='node.sample'")
start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
n=$(wait_count "SELECT count(*) FROM records WHERE type='node.sample'" $((before + 2)) 30)
# a stop and start on the same boot with RAPL energy: the first record after the restart goes
# on from the last one before the stop (its period the time between them: no gap, no overlap;
# reports.md "Across an agent restart")
zeros=$(q "SELECT count(*) FROM records WHERE type='node.sample' AND json_extract(body, '$.period_ns') = 0")
gap=$(q "SELECT b.time_ns - a.time_ns - json_extract(b.body, '$.period_ns') FROM records a, records b
	WHERE a.type='node.sample' AND b.type='node.sample'
	AND a.time_ns = (SELECT time_ns FROM records WHERE type='node.sample' ORDER BY time_ns LIMIT 1 OFFSET $((before - 1)))
	AND b.time_ns = (SELECT time_ns FROM records WHERE type='node.sample' ORDER BY time_ns LIMIT 1 OFFSET $before)")
[ "$zeros" = 1 ] && [ -n "$gap" ] && [ "${gap#-}" -lt 50000000 ] && pass "after a restart the first record covers the time since the last one before the stop (off by $gap ns; 1 record with period 0 of $n)" \
	|| fail "records with period 0: $zeros (want 1), gap $gap ns"
stop_agent

# the rollup against the stored records: sum of periods and of capacity x period, from their
# JSON; a report folds the collector's queued rollup deltas first
kill "$COLL"; wait "$COLL" 2>/dev/null
printf '[prices]\ncpu_core_hour = 0.03\nmemory_gib_hour = 0.004\ngpu_hour = 1.7\nio_read_gib = 0.001\nio_write_gib = 0.002\nnet_gib = 0.01\n' >"$T/prices.ini"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/prices.ini" --from 2000-01-01 --to 2100-01-01 >/dev/null \
	|| fail "report"
want=$(q "SELECT printf('%.6f %.6f %d', sum(json_extract(body, '$.period_ns')) / 1e9,
	sum(json_extract(body, '$.period_ns') * json_extract(body, '$.capacity.cpus')) / 1e9, count(*))
	FROM records WHERE type='node.sample'")
got=$(q "SELECT printf('%.6f %.6f %d', sum(wall_s), sum(cpu_charged_core_s), sum(tasks)) FROM rollup_node_day
	WHERE node='it-node' AND label_key='price_class' AND label_value='cpu-std'")
[ -n "$want" ] && [ "$got" = "$want" ] && pass "rollup_node_day: seconds, core-seconds of capacity and records ($got) = the stored records' sums" \
	|| fail "rollup_node_day $got, records $want"
finish
