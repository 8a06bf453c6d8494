#!/bin/bash
# The listing's bound filled: [agent] unchanged_list_max = 512 bytes (a statement's record: 128)
# with 24 sleeping tasks, 1 s samples, SQLite collector. The unchanged tasks past the bound must
# get a task.sample, never go uncharged; checked from the raw records and plain SQL:
#  (a) no node.sample carries more tasks_unchanged entries than the bound (each entry's bytes as
#      the agent counts them: ["id",age,rss] and a comma), and an anchor is filled (it lists
#      some tasks, not all);
#  (b) every node.sample accounts for every live task: listed, covered by its tasks_alive
#      statement, or sampled (a task.sample after it, before the next but one node.sample);
#      tasks past the bound are sampled again and again;
#  (c) each task's open row equals the model from its task.start, its last task.sample and
#      the node.sample records listing or covering it (unchanged_model.py).
. "$(dirname "$0")/lib.sh"
need_root
N=24
CAP=512
DB=$T/records.db
TOKEN=it-unchanged-fill-0123456789abcdef
node_token "$TOKEN"
PORT=$(free_port)
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
printf '[agent]\nsample_interval = 1s\nunchanged_list_max = %d\n[collector]\nbatch_delay = 100ms\n' \
	"$CAP" >"$T/agent.conf"
start_agent --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
for i in $(seq "$N"); do
	ctl run --no-sandbox -- sleep 600 >/dev/null || { fail "launch $i"; finish; }
done
t0=$(q "SELECT ifnull(max(time_ns), 0) FROM records WHERE type = 'task.start'")
# ten node.sample records after the last start
for _ in $(seq 600); do
	[ "$(q "SELECT count(*) FROM records WHERE type = 'node.sample' AND time_ns > $t0")" -ge 10 ] && break
	sleep 0.1
done
stop_agent
sleep 1
kill "$COLL"
wait "$COLL" 2>/dev/null

python3 - "$DB" "$N" "$CAP" "$t0" <<'PY' || FAILS=$((FAILS + 1))
import json, sqlite3, sys
sys.path.insert(0, "tests/integration")
from unchanged_model import open_rows_check
db, n_want, cap, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = sqlite3.connect(db)
bad = 0
tasks = [r[0] for r in c.execute("SELECT task_id FROM records WHERE type = 'task.start'")]
if len(tasks) != n_want:
    print("FAIL: %d task.start records, want %d" % (len(tasks), n_want)); sys.exit(1)
nodes = [(t, json.loads(b)) for t, b in c.execute(
    "SELECT time_ns, body FROM records WHERE type = 'node.sample' ORDER BY time_ns")]
samples = {}
for task, t in c.execute("SELECT task_id, time_ns FROM records WHERE type = 'task.sample'"):
    samples.setdefault(task, []).append(t)
# (a) the bound, in the agent's own count of an entry's bytes
over = filled = 0
for t, n in nodes:
    lst = n.get('tasks_unchanged', [])
    b = sum(len(e[0]) + len("%d%d" % (e[1], e[2])) + 7 for e in lst)
    limit = cap // 4 if n.get('tasks_alive') else cap
    over += b > limit
    if not n.get('tasks_alive') and 0 < len(lst) < n_want and b + 40 > cap:
        filled += 1
if over:
    print("FAIL: %d node.sample records list more than the bound" % over); bad += 1
elif not filled:
    print("FAIL: no anchor filled to its bound (%d bytes)" % cap); bad += 1
else:
    print("ok: no node.sample over the bound, %d anchors filled to it" % filled)
# (b) every live task accounted for at every node.sample after the last start
listed = {}  # task -> listing record's time string
missing = checked = 0
for i, (t, n) in enumerate(nodes):
    al = n.get('tasks_alive')
    here = {e[0] for e in n.get('tasks_unchanged', [])}
    if al:
        here |= {k for k, v in listed.items() if v == al['since'] and k not in al['except']}
    for e in n.get('tasks_unchanged', []):
        listed[e[0]] = n['time']
    if t <= t0 or i + 2 >= len(nodes):
        continue
    end = nodes[i + 2][0]
    for task in tasks:
        checked += 1
        if task not in here and not any(t < s <= end for s in samples.get(task, [])):
            if missing < 3:
                print("FAIL: %s neither listed, covered nor sampled at the node.sample of %s" % (task, n['time']))
            missing += 1
resampled = sum(1 for k in tasks if sum(s > t0 for s in samples.get(k, [])) >= 4)
if missing:
    bad += 1
elif not resampled:
    print("FAIL: no task past the bound sampled again and again"); bad += 1
else:
    print("ok: %d task/node.sample pairs each listed, covered or sampled; %d tasks past the bound sampled at least 4 times" % (checked, resampled))
# (c) the open rows against the model
if not open_rows_check(c, tasks, nodes):
    bad += 1
sys.exit(1 if bad else 0)
PY
finish
