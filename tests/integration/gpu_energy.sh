#!/bin/bash
# The GPUs' energy no task was given (node.sample energy.unattributed_gpu_j) against the
# stand-in NVML, whose counters this test steps (GPU 0 at 300 W, GPU 1 at 100 W, every 20 ms):
# a task holds GPU 0 for a few node records, across an agent restart, then both GPUs are
# idle; GPU 1 is never allocated. Checked exactly, in mJ, over the stored records: the task's GPU energy
# (usage.energy_j.gpu) + the node records' unattributed GPU energy = the node records' GPU
# energy; and the unattributed part at least GPU 1's energy over the records (never given).
. "$(dirname "$0")/lib.sh"
need_root
GPU=$O/tests/gpu
[ -e "$GPU/libnvidia-ml.so.1" ] || { echo "FAIL: $GPU/libnvidia-ml.so.1 not built"; exit 1; }
export CORRAL_NVML_LIBRARY=$GPU/libnvidia-ml.so.1
export CORRAL_FAKE_NVML=$T/nvml.txt
cp tests/integration/fixtures/nvml-2gpu.txt "$T/nvml.txt"
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-energy-token-0123456789abcdef
node_token "$TOKEN"
WRITER=
trap '[ -n "$WRITER" ] && kill "$WRITER" 2>/dev/null; [ -n "$COLL" ] && { kill "$COLL"; wait "$COLL"; } 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
python3 - "$T/nvml.txt" <<'PY' &
import os, re, sys, time
path = sys.argv[1]
text = open(path).read()
t0 = time.monotonic()
while True:
    t = time.monotonic() - t0
    e = [1000000 + int(t * 300e3), 2000000 + int(t * 100e3)]  # mJ: 300 W and 100 W
    lines, i = [], 0
    for l in text.splitlines():
        if l.startswith('device '):
            l = re.sub(r'energy=\d+', 'energy=%d' % e[i], l); i += 1
        lines.append(l)
    with open(path + '.new', 'w') as f: f.write('\n'.join(lines) + '\n')
    os.rename(path + '.new', path)
    time.sleep(0.02)
PY
WRITER=$!
# a RAPL stand-in (still counters) so that the agent's energy state is saved across a restart
PC=$T/powercap
rapl_zone "$PC" intel-rapl:0 package-0
printf '[agent]\nsample_interval = 1s\n[energy]\npowercap_root = %s\n[collector]\nbatch_delay = 100ms\n' "$PC" >"$T/agent.conf"
agent() { start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"; }
agent
grep -q 'GPUs: 2 found' "$T/agent.log" || fail "inventory: $(grep -i gpu "$T/agent.log")"

id=$(ctl run --gpus 1 -- sleep 60 | head -n1)
[ -n "$id" ] || fail "run --gpus 1"
t0=$(date +%s%N)
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $t0" 2 30 >/dev/null
# an agent restart while the task runs: the GPUs' counters and the task's GPU energy given
# so far are saved at the stop, the first record after it covers the downtime
stop_agent
sleep 1
tr=$(date +%s%N)
agent
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $tr" 2 30 >/dev/null
ctl kill "$id" >/dev/null
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" 1 30)
[ "$n" = 1 ] || { fail "task.end records: $n; $(upload_state)"; finish; }
tend=$(q "SELECT max(time_ns) FROM records WHERE type='task.end'")
wait_count "SELECT count(*) FROM records WHERE type='node.sample' AND time_ns > $tend" 2 30 >/dev/null
stop_agent

python3 - "$DB" "$tr" <<'PY'
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
tr = int(sys.argv[2])
mj = lambda x: round(x * 1e3)
end = json.loads(con.execute("SELECT body FROM records WHERE type='task.end'").fetchone()[0])
nodes = [json.loads(b) for (b,) in con.execute(
    "SELECT body FROM records WHERE type='node.sample' ORDER BY time_ns")]
e = end['usage']['energy_j']
bad = []
if e['sources'].get('gpu') != 'nvml': bad.append('task gpu source %s' % e['sources'])
en = [n.get('energy', {}) for n in nodes]
node = sum(mj(x.get('gpu_j', 0)) for x in en)
una = sum(mj(x.get('unattributed_gpu_j', 0)) for x in en)
missing = [i for i, x in enumerate(en) if 'gpu_j' in x and i > 0 and 'unattributed_gpu_j' not in x]
srcs = set(x.get('sources', {}).get('unattributed_gpu_j') for x in en if 'unattributed_gpu_j' in x)
period = sum(n['period_ns'] for n in nodes) / 1e9
print('GPU energy: nodes %d mJ = task %d + unattributed %d (difference %d); %d records over %.2f s, %d without the unattributed part; GPU 1 at 100 W over them %.0f mJ' % (
    node, mj(e['gpu']), una, node - mj(e['gpu']) - una, len(nodes), period, len(missing), period * 1e5))
if node != mj(e['gpu']) + una: bad.append('does not sum')
if missing: bad.append('records without unattributed_gpu_j: %s' % missing)
if srcs != {'nvml'}: bad.append('sources %s' % srcs)
if una < period * 1e5 * 0.9: bad.append('unattributed below GPU 1 alone')
after = [json.loads(b) for (b,) in con.execute(
    "SELECT body FROM records WHERE type='node.sample' AND time_ns > ? ORDER BY time_ns LIMIT 1", (tr,))]
p0 = after[0]['period_ns'] / 1e9 if after else 0
g0 = after[0].get('energy', {}).get('gpu_j', 0) if after else 0
print('first record after the restart: period %.3f s, gpu_j %.3f J (400 W over it: %.3f J)' % (p0, g0, 400 * p0))
if p0 < 1 or abs(g0 - 400 * p0) > 0.1 * 400 * p0: bad.append('the restart\'s downtime not covered')
if mj(e['gpu']) <= 0: bad.append('task got no GPU energy')
for m in bad: print(m)
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && pass "unattributed GPU energy: task + unattributed = the node's GPU energy to the mJ, the idle GPU's energy in it, source nvml" \
	|| fail "unattributed GPU energy (above)"

# the report's (idle) row (--idle): the GPU part = the records' unattributed GPU energy (SQL)
kill "$COLL"; wait "$COLL" 2>/dev/null; COLL=
printf '[prices]\ncpu_core_hour = 0.03\nmemory_gib_hour = 0.004\ngpu_hour = 1.7\nio_read_gib = 0.001\nio_write_gib = 0.002\nnet_gib = 0.01\n' >"$T/prices.ini"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/prices.ini" --from 2000-01-01 --to 2100-01-01 \
	--by user --idle --format json >"$T/idle.json" 2>"$T/report.err" || fail "report: $(cat "$T/report.err")"
una=$(sqlite3 "$DB" "SELECT printf('%.6f', sum(coalesce(json_extract(body, '$.energy.unattributed_gpu_j'), 0))) FROM records WHERE type='node.sample'")
python3 - "$T/idle.json" "$una" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
una = float(sys.argv[2])
idle = [r for r in j['rows'] if r['user'] == '(idle)']
got = sum(float(r['energy_gpu_kwh']) for r in idle) * 3.6e6
print('(idle) rows GPU energy %.3f J, SQL over node.sample unattributed_gpu_j %.3f J' % (got, una))
sys.exit(0 if idle and abs(got - una) <= 1e-6 * una + 1e-3 else 1)
PY
[ $? = 0 ] && pass "--idle: the (idle) row's GPU energy = the records' unattributed GPU energy" || fail "idle GPU energy in the report (above)"
finish
