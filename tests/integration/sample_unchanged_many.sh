#!/bin/bash
# More live tasks than one batched read of the BPF maps holds (1,024 entries a call): 1,030
# sleeping tasks, 1 s samples, SQLite collector. The change check must read every task's
# figures right, those past the first batch included (a task misread there looks changed and
# gets a task.sample each interval, or looks unchanged when it is not); checked from the raw
# records and plain SQL, not the agent's figures:
#  (a) every task is listed unchanged after its first task.sample(s) and gets no task.sample
#      after that, covered by tasks_alive statements: one statement covers all 1,030
#      (n), with a digest equal to the XOR of the FNV-1a hashes of their ids computed here,
#      and no entry of its own;
#  (b) each task's open row (what reports charge a running task from) equals the model from
#      its task.start, its task.sample and the node.sample records listing or covering it,
#      as in sample_unchanged.sh.
# Then, among them (the BPF meter marks what changed and the agent reads only the marked tasks:
# a missed mark lists a task that ran as unchanged):
#  (c) a task that burns CPU and then sleeps: once it sleeps it is listed unchanged, and its last
#      task.sample has the CPU time its cgroup shows from outside (cpuacct.usage, 2% + 10 ms);
#  (d) a task asleep on a FIFO through several node.sample records (listed or covered in them)
#      that is woken and burns CPU: it gets a task.sample after the wakeup, before the second
#      node.sample after its burn ended, and its last task.sample has its cgroup's CPU time
#      (2% + 10 ms); it is listed again afterwards.
. "$(dirname "$0")/lib.sh"
need_root
N=1030
DB=$T/records.db
TOKEN=it-unchanged-many-0123456789abcdef
node_token "$TOKEN"
PORT=$(free_port)
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
printf '[agent]\nmax_tasks = %d\nsample_interval = 1s\n[collector]\nbatch_delay = 100ms\n' \
	$((N + 16)) >"$T/agent.conf"
ulimit -n "$(ulimit -Hn)" # about 2 descriptors per task
start_agent --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
for i in $(seq "$N"); do
	ctl run --no-sandbox -- sleep 600 >/dev/null || { fail "launch $i"; finish; }
done

# (a) a statement covering all N, made after every task's anchor
covering() {
	q "SELECT count(*) FROM records WHERE type = 'node.sample'
	   AND json_extract(body, '\$.tasks_alive.n') = $N"
}
ok=
for _ in $(seq 600); do
	[ "$(covering)" -ge 2 ] && ok=1 && break
	sleep 0.2
done
[ -n "$ok" ] || fail "no two tasks_alive statements covering all $N tasks within 120 s ($(q "SELECT count(*) FROM records WHERE type = 'node.sample'") node.sample records)"

# (c), (d): node.sample records after time T (ns) that list TASK or cover it
seen_after() { # TASK T
	q "SELECT count(*) FROM records r WHERE r.type = 'node.sample' AND r.time_ns > $2 AND (
	   EXISTS (SELECT 1 FROM json_each(json_extract(r.body, '\$.tasks_unchanged')) e
	     WHERE json_extract(e.value, '\$[0]') = '$1')
	   OR (json_extract(r.body, '\$.tasks_alive.since') IN (SELECT json_extract(l.body, '\$.time')
	     FROM records l, json_each(json_extract(l.body, '\$.tasks_unchanged')) le
	     WHERE l.type = 'node.sample' AND json_extract(le.value, '\$[0]') = '$1')
	   AND NOT EXISTS (SELECT 1 FROM json_each(json_extract(r.body, '\$.tasks_alive.except')) x
	     WHERE x.value = '$1')))"
}
wait_seen_after() { # TASK T N: wait until N node.sample records after T list or cover TASK
	for _ in $(seq 600); do
		[ "$(seen_after "$1" "$2")" -ge "$3" ] && return 0
		sleep 0.2
	done
	return 1
}
BURN='i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'
mkfifo -m 600 "$T/wake"
burn=$(ctl run --no-sandbox --job burn -- sh -c "$BURN; exec sleep 600" | head -n1)
waker=$(ctl run --no-sandbox --job waker -- sh -c "read x <$T/wake; $BURN; exec sleep 600" | head -n1)
EXTRA="$burn $waker"
[ -n "$burn" ] && [ -n "$waker" ] || fail "launching the burning and the waking task"
# (c)
wait_for task_asleep "$burn" || fail "the burning task did not get to its sleep"
t_slept=$(date +%s%N)
wait_seen_after "$burn" "$t_slept" 1 || fail "the burning task, asleep, not listed unchanged"
cpu_check "a task that burned CPU among $N sleeping ones" "$burn"
# (d) asleep through 3 node.sample records, then woken
wait_seen_after "$waker" 0 3 || fail "the waiting task not listed or covered 3 times"
t_wake=$(date +%s%N)
echo go >"$T/wake"
wait_for task_asleep "$waker" || fail "the woken task did not get to its sleep"
t_done=$(date +%s%N)
wait_seen_after "$waker" "$t_done" 1 || fail "the woken task, asleep again, not listed unchanged"
for _ in $(seq 600); do
	[ "$(q "SELECT count(*) FROM records WHERE type = 'node.sample' AND time_ns > $t_done")" -ge 2 ] && break
	sleep 0.2
done
first_after=$(q "SELECT min(time_ns) FROM records WHERE type = 'task.sample' AND task_id = '$waker' AND time_ns > $t_wake")
second_node=$(q "SELECT time_ns FROM records WHERE type = 'node.sample' AND time_ns > $t_done ORDER BY time_ns LIMIT 1 OFFSET 1")
[ -n "$first_after" ] && [ -n "$second_node" ] && [ "$first_after" -lt "$second_node" ] &&
	pass "woken task: a task.sample after its wakeup, before the second node.sample after its burn" ||
	fail "woken task: first task.sample after the wakeup '$first_after', second node.sample after its burn '$second_node'"
cpu_check "a task woken after 3 intervals asleep" "$waker"
stop_agent
sleep 1
kill "$COLL"
wait "$COLL" 2>/dev/null

python3 - "$DB" "$N" $EXTRA <<'PY' || FAILS=$((FAILS + 1))
import json, sqlite3, sys
from functools import reduce
sys.path.insert(0, "tests/integration")
from unchanged_model import open_rows_check
db, n_want, extra = sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])
c = sqlite3.connect(db)
bad = 0
def fnv(s):
    return reduce(lambda h, b: ((h ^ b) * 0x100000001b3) & (2**64 - 1), s.encode(), 0xcbf29ce484222325)
tasks = [r[0] for r in c.execute("SELECT task_id FROM records WHERE type = 'task.start'")
         if r[0] not in extra]  # (c) and (d)'s tasks: checked above
if len(tasks) != n_want:
    print("FAIL: %d task.start records, want %d" % (len(tasks), n_want)); sys.exit(1)
nodes = [(t, json.loads(b)) for t, b in c.execute("SELECT time_ns, body FROM records WHERE type = 'node.sample' ORDER BY time_ns")]
first = {}  # task -> time of the first node.sample listing it
for t, n in nodes:
    for e in n.get('tasks_unchanged', []):
        first.setdefault(e[0], t)
after = [t for t in tasks if t not in first or c.execute(
    "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = ? AND time_ns > ?",
    (t, first[t])).fetchone()[0]]
if after:
    print("FAIL: %d tasks never listed or sampled after their first listing, e.g. %s" % (len(after), after[0])); bad += 1
else:
    print("ok: each of the %d tasks listed, and no task.sample after its first listing" % n_want)
listed = {}  # task -> (listing record's time string, rss)
full = 0
for t, n in nodes:
    al = n.get('tasks_alive')
    if al and al['n'] == n_want:
        cov = [k for k, v in listed.items() if v[0] == al['since'] and k not in al['except']]
        d = reduce(lambda x, k: x ^ fnv(k), cov, 0)
        own = [e for e in n.get('tasks_unchanged', []) if e[0] not in extra]
        if len(cov) != n_want or "%016x" % d != al['digest'] or own:
            print("FAIL: statement at %s: n %d, covered here %d, digest %s here %016x, %d entries" %
                  (n['time'], al['n'], len(cov), al['digest'], d, len(own))); bad += 1
        else:
            full += 1
    for e in n.get('tasks_unchanged', []):
        listed[e[0]] = (n['time'], e[2])
if full >= 2:
    print("ok: %d statements cover all %d tasks, count and digest as computed here, no entry each" % (full, n_want))
else:
    print("FAIL: %d statements covering all tasks checked" % full); bad += 1
# (b) the open rows against the model
if not open_rows_check(c, tasks, nodes):
    bad += 1
sys.exit(1 if bad else 0)
PY
finish
