#!/bin/bash
# Energy per task (usage.energy_j) end to end over a stand-in RAPL powercap tree whose counters
# this test steps at a constant power (package 36 kW, DRAM 7.2 kW: enough for whole mWh in the
# reports; from the wall clock, every 10 ms): a busy task (one core) and a near-idle one
# holding 96 MiB, agent -> collector (SQLite). Checked against truth read here: each task's CPU energy against its CPU time read
# from its cgroup (cpuacct.usage) from outside times the power per CPU, the memory task's DRAM
# energy against its cgroup's memory read from outside; and exactly, in microjoules: the tasks'
# energies plus the node records' unattributed energy = the node records' energy.
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/cpuacct ] && [ -d /sys/fs/cgroup/memory ] || skip "needs the v1 cpuacct and memory hierarchies"
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-energy-token-0123456789abcdef
node_token "$TOKEN"
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"

PC=$T/powercap
PKG_W=36000 DRAM_W=7200
# package and DRAM counters stepped every 10 ms at a constant power (rapl_lib.sh)
rapl_tree "$PC"
rapl_writer "$PC" "$PKG_W" "$DRAM_W" || { fail "the stand-in RAPL counter does not step"; finish; }
printf '[agent]\nsample_interval = 1s\n[energy]\npowercap_root = %s\n[collector]\nbatch_delay = 100ms\n' "$PC" >"$T/agent.conf"
start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"

busy=$(ctl run --job busy --account phys -- sh -c 'while :; do :; done' | head -n1)
mem=$(ctl run --job mem --account chem -- python3 -c 'import time; b = bytearray(96 << 20); time.sleep(600)' | head -n1)
[ -n "$busy" ] && [ -n "$mem" ] || fail "launching the tasks"
CG=/sys/fs/cgroup
# the memory task's cgroup memory, read here every 100 ms while it runs (its mean, bytes)
msum=0 mn=0
for _ in $(seq 50); do
	v=$(cat "$CG/memory/$SUBTREE/$mem/memory.usage_in_bytes" 2>/dev/null) || continue
	msum=$((msum + v)); mn=$((mn + 1)); sleep 0.1
done
cpu_busy=$(cat "$CG/cpuacct/$SUBTREE/$busy/cpuacct.usage")
cpu_mem=$(cat "$CG/cpuacct/$SUBTREE/$mem/cpuacct.usage")
ctl kill "$busy" >/dev/null; ctl kill "$mem" >/dev/null
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" 2 30)
[ "$n" = 2 ] || { fail "task.end records: $n; $(upload_state)"; finish; }
# two node records after both ends: the period each ended in is closed
tend=$(q "SELECT max(time_ns) FROM records WHERE type='task.end'")
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $tend" 2 30 >/dev/null
# the attribution's own cost in `corralctl status`: one attribution per node record with RAPL
nrec=$(q "SELECT count(*) FROM records WHERE type='node.sample'")
est=$(ctl status --json | python3 -c 'import json, sys
e = json.load(sys.stdin)["energy"]
print(e["rapl"], e["attributions"], e["attribution_cpu_ns"])')
set -- $est
[ "$1" = True ] && [ "$2" -ge $((nrec - 1)) ] && [ "$3" -gt 0 ] &&
	ctl status | grep -q "^Energy: *RAPL; $2 periods attributed" &&
	pass "status: RAPL, $2 periods attributed ($nrec node records), $3 ns of CPU" ||
	fail "status energy: $est, $nrec node records"
stop_agent

python3 - "$DB" "$busy" "$mem" "$cpu_busy" "$cpu_mem" "$msum" "$mn" "$(nproc)" "$PKG_W" "$DRAM_W" <<'PY'
import json, sqlite3, sys
db, busy, mem = sys.argv[1:4]
cpu_busy, cpu_mem, msum, mn, ncpu = (int(x) for x in sys.argv[4:9])
pw, dw = float(sys.argv[9]), float(sys.argv[10])
memtotal = next(int(l.split()[1]) * 1024 for l in open('/proc/meminfo') if l.startswith('MemTotal:'))
con = sqlite3.connect(db)
uj = lambda x: round(x * 1e6)
ends = {json.loads(b)['task']['id']: json.loads(b) for (b,) in con.execute(
    "SELECT body FROM records WHERE type='task.end'")}
nodes = [json.loads(b)['energy'] for (b,) in con.execute(
    "SELECT body FROM records WHERE type='node.sample' ORDER BY time_ns")]
bad = []
for tid, r in ends.items():
    e = r['usage']['energy_j']
    if e['sources'] != {'cpu': 'rapl', 'dram': 'rapl', 'gpu': 'none'}:
        bad.append('%s sources %s' % (tid, e['sources']))
    if uj(e['total']) != uj(e['cpu']) + uj(e['dram']) + uj(e['gpu']):
        bad.append('%s total %s' % (tid, e))
# exact: the tasks' shares + unattributed = the node's energy, in microjoules
for k, part in (('package', 'cpu'), ('dram', 'dram')):
    node = sum(uj(n[k + '_j']) for n in nodes)
    una = sum(uj(n.get('unattributed_%s_j' % k, 0)) for n in nodes)
    tasks = sum(uj(r['usage']['energy_j'][part]) for r in ends.values())
    print('%s: node %d uJ = tasks %d + unattributed %d (difference %d)' % (k, node, tasks, una, node - tasks - una))
    if node != tasks + una: bad.append('%s does not sum' % k)
    if any(n.get('unattributed_%s_j' % k, 0) > n[k + '_j'] for n in nodes): bad.append('unattributed above the node')
# CPU shares: energy = package power per CPU x the CPU time read from the cgroup here (the
# kill lands after that read, and the task's exit costs CPU too: 20 ms of CPU allowed for it);
# the counter's 10 ms steps and the load bound the rest
for tid, cpu in ((busy, cpu_busy), (mem, cpu_mem)):
    got = ends[tid]['usage']['energy_j']['cpu']
    want = pw * cpu / 1e9 / ncpu
    print('task %s: cpu energy %.4f J, from cpuacct.usage %.4f J' % (tid, got, want))
    if abs(got - want) > 0.10 * want + pw / ncpu * 0.02: bad.append('%s cpu energy %.4f, want %.4f' % (tid, got, want))
# DRAM share: DRAM power x the task's mean cgroup memory over MemTotal x its wall time
r = ends[mem]
got = r['usage']['energy_j']['dram']
want = dw * (msum / mn) / memtotal * r['usage']['wall_ns'] / 1e9
print('task %s: dram energy %.5f J, from memory.usage_in_bytes %.5f J' % (mem, got, want))
if abs(got - want) > 0.15 * want: bad.append('dram energy %.5f, want %.5f' % (got, want))
for m in bad: print(m)
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && pass "per-task CPU energy = power per CPU x cpuacct.usage, DRAM energy by memory, tasks + unattributed = node energy to the microjoule" \
	|| fail "energy per task (above)"

# the reports: kWh per group against plain SQL over the stored task.end records; the rows sum to
# the total exactly (CSV by user and by job, JSON by job and node)
kill "$COLL"; wait "$COLL" 2>/dev/null
printf '[prices]\ncpu_core_hour = 0.03\nmemory_gib_hour = 0.004\ngpu_hour = 1.7\nio_read_gib = 0.001\nio_write_gib = 0.002\nnet_gib = 0.01\n' >"$T/prices.ini"
rep() { "$O/corral-collector" report --db "sqlite:$DB" --prices "$T/prices.ini" --from 2000-01-01 --to 2100-01-01 "$@" 2>>"$T/report.err"; }
rep --by user --format csv >"$T/user.csv" && rep --by job --period day --format csv >"$T/job.csv" &&
	rep --by job,node --format json >"$T/job.json" && rep --by user --format table >"$T/user.txt" || fail "report: $(cat "$T/report.err")"
raw=$(q "SELECT printf('%.9f', sum(json_extract(body, '$.usage.energy_j.total'))) FROM records WHERE type='task.end'")
python3 - "$T/user.csv" "$T/job.csv" "$T/job.json" "$raw" <<'PY'
import csv, json, sys
raw_j = float(sys.argv[4])
want = round(raw_j / 3.6)  # whole mWh
mwh = lambda s: int(s.replace('.', ''))
bad = [] if want > 0 else ['no energy in the task.end records']
for path in sys.argv[1:3]:
    rows = list(csv.DictReader(open(path)))
    body, total = rows[:-1], rows[-1]
    if mwh(total['energy_kwh']) != want: bad.append('%s total %s, SQL %d mWh' % (path, total['energy_kwh'], want))
    if sum(mwh(r['energy_kwh']) for r in body) != mwh(total['energy_kwh']): bad.append('%s rows do not sum' % path)
    if total['energy_unmeasured_tasks'] != '0': bad.append('unmeasured %s' % total['energy_unmeasured_tasks'])
    parts = sum(float(total[k]) for k in ('energy_cpu_kwh', 'energy_dram_kwh', 'energy_gpu_kwh'))
    if abs(parts * 3.6e6 - raw_j) > 1e-6 * raw_j: bad.append('parts %.9f kWh vs SQL %.9f J' % (parts, raw_j))
j = json.load(open(sys.argv[3]))
if mwh(j['total']['energy_kwh']) != want or sum(mwh(r['energy_kwh']) for r in j['rows']) != want:
    bad.append('json by job,node')
print('energy: SQL over task.end %.6f J = %d mWh; reports total %s kWh' % (raw_j, want, j['total']['energy_kwh']))
for m in bad: print(m)
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && grep -q KWH "$T/user.txt" && ! grep -q "KWH\*" "$T/user.txt" && pass "reports: energy_kwh total = plain SQL over task.end (to the mWh), rows sum to it exactly (CSV by user, by job per day; JSON by job,node; table)" \
	|| fail "energy in reports (above)"

# idle energy: with --idle each period's "(idle)" row holds the nodes' unattributed energy, so
# the report's total = the nodes' measured energy: plain SQL over the node.sample records
# (energy.package_j + energy.dram_j), and the idle rows = their unattributed parts
rep --by user --idle --format json >"$T/idle.json" && rep --by user --period day --idle --format csv >"$T/idle.csv" ||
	fail "idle report: $(cat "$T/report.err")"
node_j=$(q "SELECT printf('%.9f', sum(json_extract(body, '$.energy.package_j')) + sum(json_extract(body, '$.energy.dram_j'))) FROM records WHERE type='node.sample'")
una_j=$(q "SELECT printf('%.9f', sum(coalesce(json_extract(body, '$.energy.unattributed_package_j'), 0)) + sum(coalesce(json_extract(body, '$.energy.unattributed_dram_j'), 0))) FROM records WHERE type='node.sample'")
python3 - "$T/idle.json" "$T/idle.csv" "$node_j" "$una_j" <<'PY'
import csv, json, sys
mwh = lambda s: int(s.replace('.', ''))
node_j, una_j = float(sys.argv[3]), float(sys.argv[4])
j = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
body, total = rows[:-1], rows[-1]
idle = [r for r in j['rows'] if r['user'] == '(idle)']
idle_csv = [r for r in body if r['user'] == '(idle)']
print('idle energy: SQL nodes %.6f J = %d mWh, unattributed %.6f J; report total %s kWh, (idle) %s kWh; CSV per day: %d idle rows, total %s' % (
    node_j, round(node_j / 3.6), una_j, j['total']['energy_kwh'], [r['energy_kwh'] for r in idle], len(idle_csv), total['energy_kwh']))
bad = []
if abs(mwh(j['total']['energy_kwh']) - round(node_j / 3.6)) > 1: bad.append('total is not the nodes\' energy')
if len(idle) != 1 or abs(mwh(idle[0]['energy_kwh']) - round(una_j / 3.6)) > 1: bad.append('idle row is not the unattributed energy')
if sum(mwh(r['energy_kwh']) for r in j['rows']) != mwh(j['total']['energy_kwh']): bad.append('json rows do not sum')
if sum(mwh(r['energy_kwh']) for r in body) != mwh(total['energy_kwh']) or total['energy_kwh'] != j['total']['energy_kwh']: bad.append('csv rows do not sum')
if not idle_csv or abs(sum(mwh(r['energy_kwh']) for r in idle_csv) - round(una_j / 3.6)) > len(idle_csv): bad.append('csv idle rows')
for m in bad: print(m)
sys.exit(1 if bad or una_j <= 0 else 0)
PY
[ $? = 0 ] && pass "idle energy: --idle rows (idle) = the nodes' unattributed energy and total = the nodes' measured energy (plain SQL over node.sample), rows sum exactly" \
	|| fail "idle energy (above)"

# carbon: an hourly series for the tasks' days (relative to the sheet); kg CO2e per row summing
# exactly to the total, the total = the energy x the day's mean intensity (from the SQL above)
days=$(q "SELECT DISTINCT date(time_ns / 1000000000, 'unixepoch') FROM records WHERE type='task.end'")
for d in $days; do for h in $(seq -w 0 23); do echo "${d}T$h,$((200 + 10#$h * 10))"; done; done >"$T/grid.csv"
cp "$T/prices.ini" "$T/carbon.ini"; printf '[carbon]\nseries = grid.csv\n' >>"$T/carbon.ini"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/carbon.ini" --from 2000-01-01 --to 2100-01-01 \
	--by job --period day --format csv >"$T/carbon.csv" 2>"$T/carbon.err" || fail "carbon report: $(cat "$T/carbon.err")"
python3 - "$T/carbon.csv" "$raw" "$(echo $days | wc -w)" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
body, total = rows[:-1], rows[-1]
g = lambda s: int(s.replace('.', ''))
want = round(float(sys.argv[2]) / 3.6e6 * 315)  # the mean of 200, 210, ..., 430
print('carbon: rows %s, total %s kg CO2e, from SQL x 315 g/kWh %d g' % ([r['co2e_kg'] for r in body], total['co2e_kg'], want))
ok = sum(g(r['co2e_kg']) for r in body) == g(total['co2e_kg'])
if sys.argv[3] == '1': ok = ok and abs(g(total['co2e_kg']) - want) <= 1
sys.exit(0 if ok else 1)
PY
[ $? = 0 ] && pass "carbon from an hourly series: kg CO2e rows sum to the total exactly, total = energy x the day's mean intensity" || fail "carbon (above)"
tot=$(tail -n1 "$T/carbon.csv" | python3 -c 'import csv, sys; print(next(csv.reader(sys.stdin))[-4])')
for fmt in table html; do
	"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/carbon.ini" --from 2000-01-01 --to 2100-01-01 \
		--by job --period day --format $fmt >"$T/carbon.$fmt" 2>>"$T/carbon.err" || fail "carbon $fmt report"
done
grep -q "KG_CO2E" "$T/carbon.table" && grep "^TOTAL" "$T/carbon.table" | grep -qF " $tot " &&
	grep -q "<th>kg CO2e</th>" "$T/carbon.html" && pass "carbon in the table (KG_CO2E, total $tot) and the HTML rows table" ||
	fail "carbon in the table/HTML (total $tot): $(grep -E '^TOTAL|KG' "$T/carbon.table")"
# a bad line in the series: the report refuses, naming the file and the line
printf '2026-12-01T00,300\n2026-12-01T01,310\n2026-12-01T02,lots\n' >"$T/grid.csv"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/carbon.ini" --from 2000-01-01 --to 2100-01-01 >/dev/null 2>"$T/carbon.err"
rc=$?
[ $rc != 0 ] && grep -q "grid.csv:3: expected a number" "$T/carbon.err" && pass "a bad series line: refused with $(head -c 120 "$T/carbon.err")" \
	|| fail "bad series line: rc $rc, $(cat "$T/carbon.err")"
# carbon zones: the tasks' node in a zone of 50000 g/kWh (the default 999 not used): the total =
# the SQL energy x 50000; a sheet whose only zone matches no node: no carbon, all uncovered
node=$(q "SELECT DISTINCT node FROM records WHERE type='task.end'")
cp "$T/prices.ini" "$T/zones.ini"
printf '[carbon]\ngco2e_per_kwh = 999\n[carbon:other]\nnodes = zz-*\ngco2e_per_kwh = 5\n[carbon:here]\nnodes = x-*, %s\ngco2e_per_kwh = 50000\n' "$node" >>"$T/zones.ini"
cp "$T/prices.ini" "$T/nozone.ini"; printf '[carbon:other]\nnodes = zz-*\ngco2e_per_kwh = 5\n' >>"$T/nozone.ini"
for z in zones nozone; do
	"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/$z.ini" --from 2000-01-01 --to 2100-01-01 \
		--by job,node --period day --format json >"$T/$z.json" 2>"$T/carbon.err" || fail "$z report: $(cat "$T/carbon.err")"
done
python3 - "$T/zones.json" "$T/nozone.json" "$raw" <<'PY'
import json, sys
z, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
g = lambda s: int(s.replace('.', ''))
want = round(float(sys.argv[3]) / 3.6e6 * 50000)
print('zones: total %s kg CO2e, SQL energy x 50000 g/kWh = %d g; rows sum %d g; no zone: %s kg, uncovered %s kWh of %s' % (
    z['total']['co2e_kg'], want, sum(g(r['co2e_kg']) for r in z['rows']), n['total']['co2e_kg'],
    n['total']['carbon_uncovered_kwh'], n['total']['energy_kwh']))
ok = abs(g(z['total']['co2e_kg']) - want) <= 1 and sum(g(r['co2e_kg']) for r in z['rows']) == g(z['total']['co2e_kg'])
ok = ok and g(z['total']['carbon_uncovered_kwh']) == 0
ok = ok and g(n['total']['co2e_kg']) == 0 and n['total']['carbon_uncovered_kwh'] == n['total']['energy_kwh']
sys.exit(0 if ok else 1)
PY
[ $? = 0 ] && pass "carbon zones: the node's zone's intensity (total = SQL energy x 50000 g/kWh, rows sum exactly); a node in no zone and no [carbon]: uncovered" || fail "carbon zones (above)"
printf '[carbon:a]\nnodes = a\nnodes = b\n' >>"$T/nozone.ini"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/nozone.ini" --from 2000-01-01 --to 2100-01-01 >/dev/null 2>"$T/carbon.err"
rc=$?
[ $rc != 0 ] && grep -q "nozone.ini:[0-9]*: \[carbon:a\] nodes: set twice" "$T/carbon.err" && pass "a bad zone key: refused with $(head -c 120 "$T/carbon.err")" \
	|| fail "bad zone key: rc $rc, $(cat "$T/carbon.err")"
finish
