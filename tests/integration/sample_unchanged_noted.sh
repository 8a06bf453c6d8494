#!/bin/bash
# The bound of the noted marks filled: the change check of a tasks_alive statement visits the
# tasks whose BPF mark a read outside it took (`corralctl show`, a task.sample: ebpf_note), kept
# in a list of at most 4 x live tasks + 64 keys; past it the list is dropped and the next check
# asks every task. Agent (BPF meter, 6 s samples) -> collector (SQLite): three sleeping tasks,
# a busy one (--cpus 0.2) read by `corralctl show` in a loop (each read after a walk folded it
# takes a set mark: far more notes per interval than the bound, 80 here), and one that waits on
# a FIFO. Once statements cover it, it is woken about 4 s after a node.sample (the list full
# by then), burns CPU briefly and sleeps, read by a second `show` loop from before its wakeup
# until after the next node.sample. Checked against truth from outside the agent's figures:
#  (a) statements asked every task while the busy task was read (the metric
#      corral_node_sample_checks_total{kind="every_task"} grew): the bound was reached;
#  (b) the woken task gets a task.sample after its wakeup (its note, past the bound, is not
#      lost: it is not covered as unchanged);
#  (c) its last task.sample has the CPU time its cgroup shows (cpuacct.usage, 2% + 10 ms);
#  (d) the sleeping tasks get no task.sample after their first listing, and every statement
#      after the wakeup has the count and digest of the tasks it covers, computed here.
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/cpuacct ] || skip "needs the v1 cpuacct hierarchy"
DB=$T/records.db
TOKEN=it-unchanged-noted-0123456789abcdef
node_token "$TOKEN"
PORT=$(free_port)
MPORT=$(free_port)
SHOWS=
trap '[ -n "$SHOWS" ] && kill $SHOWS 2>/dev/null; kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
printf '[agent]\nsample_interval = 6s\n[collector]\nbatch_delay = 100ms\n[metrics]\nlisten = %s\n' \
	"$MPORT" >"$T/agent.conf"
start_agent --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
checks() { # KIND: corral_node_sample_checks_total of that kind
	curl -fsS "http://127.0.0.1:$MPORT/metrics" |
		awk -v k="corral_node_sample_checks_total{kind=\"$1\"}" '$1 == k {print $2}'
}

idle=()
for i in 1 2 3; do
	idle+=("$(ctl run --no-sandbox --job idle$i -- sleep 600 | head -n1)")
done
busy=$(ctl run --no-sandbox --cpus 0.2 --job busy -- sh -c 'while :; do :; done' | head -n1)
BURN='i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done'
mkfifo -m 600 "$T/wake"
waker=$(ctl run --no-sandbox --job waker -- sh -c "read x <$T/wake; $BURN; exec sleep 600" | head -n1)
[ -n "${idle[2]}" ] && [ -n "$busy" ] && [ -n "$waker" ] || fail "launching the tasks"

covered_twice() { [ "$(covered_after "$1" 0)" -ge 2 ]; }
node_samples() { q "SELECT count(*) FROM records WHERE type = 'node.sample'"; }

wait_for covered_twice "$waker" || fail "the waiting task not covered by 2 tasks_alive statements"
e0=$(checks every_task)
(while :; do ctl show "$busy" >/dev/null 2>&1; done) &
SHOWS=$!
(while :; do ctl show "$waker" >/dev/null 2>&1; done) &
SHOWS="$SHOWS $!"
# a node.sample, then 4 s for the busy task's notes to fill the list, then the wakeup
n0=$(node_samples)
wait_for eval '[ "$(node_samples)" -gt "$n0" ]' || fail "no node.sample"
sleep 4
t_wake=$(date +%s%N)
echo go >"$T/wake"
wait_for task_asleep "$waker" || fail "the woken task did not get to its sleep"
n1=$(node_samples)
wait_for eval '[ "$(node_samples)" -gt $((n1 + 1)) ]' || fail "no node.sample after the wakeup"
kill $SHOWS
wait $SHOWS 2>/dev/null
SHOWS=
e1=$(checks every_task)
# (a)
[ "${e1:-0}" -gt "${e0:-0}" ] && pass "busy task read in a loop: $((e1 - e0)) statements asked every task" ||
	fail "busy task read in a loop: no statement asked every task ($e0 -> $e1): the bound not reached"
# (b)
n=$(q "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = '$waker' AND time_ns > $t_wake")
[ "$n" -ge 1 ] && pass "woken task: $n task.sample records after its wakeup" ||
	fail "woken task: no task.sample after its wakeup (covered as unchanged)"
# (c)
cpu_check "woken task" "$waker"
# (d)
unsampled_after_listing "${idle[@]}"
python3 - "$DB" "$t_wake" <<'PY' || FAILS=$((FAILS + 1))
import json, sqlite3, sys
db, t_wake = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
def fnv(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
listed, checked, bad = {}, 0, 0
for t, b in c.execute("SELECT time_ns, body FROM records WHERE type = 'node.sample' ORDER BY time_ns"):
    n = json.loads(b)
    al = n.get('tasks_alive')
    if al and t > t_wake:
        cov = [k for k, v in listed.items() if v == al['since'] and k not in al['except']]
        d = 0
        for k in cov:
            d ^= fnv(k)
        checked += 1
        if al['n'] != len(cov) or int(al['digest'], 16) != d:
            print("FAIL: statement at %s: n %d digest %s, here %d %016x" % (n['time'], al['n'], al['digest'], len(cov), d))
            bad += 1
    for e in n.get('tasks_unchanged', []):
        listed[e[0]] = n['time']
if not checked:
    print("FAIL: no statement after the wakeup"); bad += 1
elif not bad:
    print("ok: %d statements after the wakeup: count and digest as computed here" % checked)
sys.exit(1 if bad else 0)
PY
finish
