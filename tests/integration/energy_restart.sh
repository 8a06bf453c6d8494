#!/bin/bash
# Energy per task across an agent restart: a busy task (one core) keeps running while corrald
# stops (SIGTERM) and starts again; the stand-in RAPL counters (as in energy_tasks.sh) run on
# meanwhile. The re-adopted task's CPU energy is still measured (source rapl) and covers the
# whole run, the downtime included: checked against its CPU time read from its cgroup
# (cpuacct.usage) from outside times the power per CPU; and exactly, in microjoules, the
# task's energy plus the node records' unattributed energy = the node records' energy, the
# record after the restart covering the downtime.
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
agent() { start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"; }
agent

busy=$(ctl run --job busy --account phys -- sh -c 'while :; do :; done' | head -n1)
[ -n "$busy" ] || fail "run"
t0=$(date +%s%N)
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $t0" 2 30 >/dev/null
stop_agent
[ -s "$STATE/node-energy.json" ] && grep -rq '"energy":{' "$STATE" --include="$busy.json" ||
	fail "no energy state saved at the stop: $(ls -R "$STATE" | head -20)"
pass "at the stop: the sampler's energy state and the task's baseline saved"
sleep 2 # the downtime: the task burns on, the counters step on
tr=$(date +%s%N)
agent
grep -q "energy state of the previous run taken back (1 task(s) go on)" "$T/agent.log" || fail "not taken back: $(tail -5 "$T/agent.log")"
[ -e "$STATE/node-energy.json" ] && fail "the saved state was not removed once read"
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $tr" 2 30 >/dev/null
cpu_busy=$(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$busy/cpuacct.usage")
ctl kill "$busy" >/dev/null
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" 1 30)
[ "$n" = 1 ] || { fail "task.end records: $n; $(upload_state)"; finish; }
tend=$(q "SELECT max(time_ns) FROM records WHERE type='task.end'")
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $tend" 2 30 >/dev/null
stop_agent

python3 - "$DB" "$cpu_busy" "$(nproc)" "$PKG_W" "$tr" <<'PY'
import json, sqlite3, sys
db = sys.argv[1]
cpu_busy, ncpu, pw, tr = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
con = sqlite3.connect(db)
uj = lambda x: round(x * 1e6)
end = json.loads(con.execute("SELECT body FROM records WHERE type='task.end'").fetchone()[0])
nodes = [(t, json.loads(b)) for t, b in con.execute(
    "SELECT time_ns, body FROM records WHERE type='node.sample' ORDER BY time_ns")]
bad = []
e = end['usage']['energy_j']
print('task.end energy_j %s, adopted %s' % (e, end.get('adopted')))
if e['sources'].get('cpu') != 'rapl' or e['sources'].get('dram') != 'rapl': bad.append('sources %s' % e['sources'])
for k, part in (('package', 'cpu'), ('dram', 'dram')):
    node = sum(uj(n['energy'][k + '_j']) for _, n in nodes if k + '_j' in n['energy'])
    una = sum(uj(n['energy'].get('unattributed_%s_j' % k, 0)) for _, n in nodes)
    print('%s: node %d uJ = task %d + unattributed %d (difference %d)' % (k, node, uj(e[part]), una, node - uj(e[part]) - una))
    if node != uj(e[part]) + una: bad.append('%s does not sum' % k)
# the first record after the restart covers the downtime (>= 2 s)
after = [n for t, n in nodes if t > tr]
p = after[0]['period_ns'] / 1e9 if after else 0
print('first node.sample after the restart: period %.3f s' % p)
if p < 2: bad.append('period %.3f s' % p)
want = pw * cpu_busy / 1e9 / ncpu
print('task cpu energy %.4f J, from cpuacct.usage %.4f J' % (e['cpu'], want))
if abs(e['cpu'] - want) > 0.10 * want + pw / ncpu * 0.02: bad.append('cpu energy %.4f, want %.4f' % (e['cpu'], want))
for m in bad: print(m)
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && pass "re-adopted task: energy measured across the restart (= power per CPU x cpuacct.usage, downtime included), task + unattributed = node energy to the microjoule" \
	|| fail "energy across the restart (above)"
finish
