#!/bin/bash
# A task covered by tasks_alive statements that changes while its record is read again and again
# (`corralctl show`: each read takes the BPF meter's mark of what changed): a statement looks
# only at the tasks marked since the last one and at those whose mark another read took, so
# such a task must still be found changed. Agent (BPF meter, 1 s samples) -> collector
# (SQLite), four sleeping tasks and one that waits on a FIFO; once statements cover it, it is
# woken just after a node.sample and burns CPU briefly (well within the interval) then sleeps,
# while `corralctl show` reads it in a loop from before the wakeup until more than an interval
# after its burn (so the reads, not the next change check, take every mark of the change).
# Checked against truth from outside the agent's figures:
#  (a) it gets a task.sample after its wakeup (it is not covered as unchanged through it);
#  (b) its last task.sample has the CPU time its cgroup shows from outside (cpuacct.usage,
#      2% + 10 ms) once it sleeps again and a statement or listing covers it;
#  (c) the sleeping tasks get no task.sample after their first listing.
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/cpuacct ] || skip "needs the v1 cpuacct hierarchy"
DB=$T/records.db
TOKEN=it-unchanged-show-0123456789abcdef
node_token "$TOKEN"
PORT=$(free_port)
SHOWS=
trap '[ -n "$SHOWS" ] && kill "$SHOWS" 2>/dev/null; kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
printf '[agent]\nsample_interval = 1s\n[collector]\nbatch_delay = 100ms\n' >"$T/agent.conf"
start_agent --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"

idle=()
for i in 1 2 3 4; do
	idle+=("$(ctl run --no-sandbox --job idle$i -- sleep 600 | head -n1)")
done
BURN='i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done'
mkfifo -m 600 "$T/wake"
waker=$(ctl run --no-sandbox --job waker -- sh -c "read x <$T/wake; $BURN; exec sleep 600" | head -n1)
[ -n "${idle[3]}" ] && [ -n "$waker" ] || fail "launching the tasks"

# node.sample records after time T (ns) that cover TASK (covered_after) or list it
seen_after() { # TASK T
	echo $(($(covered_after "$1" "$2") + $(q "SELECT count(*) FROM records r,
	   json_each(json_extract(r.body, '\$.tasks_unchanged')) e WHERE r.type = 'node.sample'
	   AND r.time_ns > $2 AND json_extract(e.value, '\$[0]') = '$1'")))
}
covered_twice() { [ "$(covered_after "$1" 0)" -ge 2 ]; }
seen_once_after() { [ "$(seen_after "$1" "$2")" -ge 1 ]; }

wait_for covered_twice "$waker" || fail "the waiting task not covered by 2 tasks_alive statements"
# reads of its record from now until after its burn
(while :; do ctl show "$waker" >/dev/null 2>&1; done) &
SHOWS=$!
sleep 1
# the wakeup just after a node.sample reached the collector: its burn ends long before the next
n0=$(q "SELECT count(*) FROM records WHERE type = 'node.sample'")
for _ in $(seq 500); do
	[ "$(q "SELECT count(*) FROM records WHERE type = 'node.sample'")" -gt "$n0" ] && break
	sleep 0.01
done
t_wake=$(date +%s%N)
echo go >"$T/wake"
wait_for task_asleep "$waker" || fail "the woken task did not get to its sleep"
echo "woken task: asleep again $((($(date +%s%N) - t_wake) / 1000000)) ms after its wakeup (polled every 200 ms)"
sleep 2.5
kill "$SHOWS"
wait "$SHOWS" 2>/dev/null
SHOWS=
t_done=$(date +%s%N)
wait_for seen_once_after "$waker" "$t_done" || fail "the woken task, asleep again, not listed or covered"
# (a)
n=$(q "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = '$waker' AND time_ns > $t_wake")
[ "$n" -ge 1 ] && pass "woken task read by show in a loop: $n task.sample records after its wakeup" ||
	fail "woken task read by show in a loop: no task.sample after its wakeup (covered as unchanged)"
# (b)
cpu_check "woken task" "$waker"
# (c)
unsampled_after_listing "${idle[@]}"
finish
