#!/bin/bash
# The audit budgets' walk looks only at the tasks whose budget can have moved (an audit event, a
# pending summary, a kernel bucket short of a token): a task idle for many walks is not looked
# at, until it floods. Here an unprivileged task sleeps through 8 walks (summary_interval 1 s)
# next to 20 sleeping tasks, then makes 100,000 connects as fast as it can. Checked from the raw
# rows the collector stored, against the count the flood itself prints:
#  (a) every connect is accounted for: recorded one by one + summarized (audit.summary) +
#      lost in the ring buffer (audit.lost) == connects made, and none lost;
#  (b) it is held to its budget: no more recorded one by one than its burst plus its rate over
#      the task's whole run (task_burst 2,000 + task_rate 1,000/s), far fewer than it made;
#  (c) its task.end says as many summarized as the summaries hold, and the kernel's count
#      (in_kernel) agrees between the task.end and the summaries;
#  (d) it was idle before the flood: no connect, summary or lost record in its first 8 s.
. "$(dirname "$0")/lib.sh"
need_root
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-idle-flood-token-0123456789abcdef
FLOOD=$O/tests/integration/helper_connect_flood
N=100000
IDLE_S=8
node_token "$TOKEN"
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/coll.log"
mkdir -m 1777 "$T/out"
id -u corral-it-flood >/dev/null 2>&1 || useradd -M -r -s /bin/sh corral-it-flood
cat >"$T/a.conf" <<EOF
[agent]
socket_mode = 0666
[audit]
task_rate = 1000
task_burst = 2000
task_bytes = 1M
summary_interval = 1s
[collector]
batch_delay = 100ms
EOF
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
grep -q 'audit trail loaded' "$T/agent.log" || skip "audit programs did not load: $(grep -i audit "$T/agent.log")"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
as() { local u=$1; shift; setpriv --reuid "$u" --regid "$u" --clear-groups "$CORRALCTL" --socket "$SOCK" "$@"; }
st() { ctl status --json | jget "$1"; }

for i in $(seq 20); do
	ctl run --no-sandbox -- sleep 600 >/dev/null || fail "launching sleeping task $i"
done
t0=$(date +%s%N)
as corral-it-flood run --wait --workdir / --stdout "$T/out/f" -- /bin/sh -c \
	"sleep $IDLE_S; exec $FLOOD $N 9" >"$T/out/f.id" 2>"$T/out/f.err"
t1=$(date +%s%N)
F=$(head -n1 "$T/out/f.id")
C=$(cat "$T/out/f" 2>/dev/null)
[ -n "$F" ] && [ "${C:-0}" -ge "$N" ] && pass "the flood made $C connects after $IDLE_S s asleep" ||
	fail "flood: id '$F', count '$C': $(cat "$T/out/f.err")"
for _ in $(seq 600); do
	[ "$(st spool_entries_pending)" = 0 ] && break
	sleep 0.1
done
[ "$(st spool_entries_pending)" = 0 ] || fail "spool did not drain"
# (a)
rec=$(q "SELECT count(*) FROM records WHERE task_id='$F' AND type='audit.connect'")
sum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.by_type.\"audit.connect\"')),0) FROM records WHERE task_id='$F' AND type='audit.summary'")
lost=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.lost')),0) FROM records WHERE task_id='$F' AND type='audit.lost'")
[ $((rec + sum + lost)) = "$C" ] && [ "$lost" = 0 ] &&
	pass "$rec connects recorded + $sum summarized + $lost lost = $C made" ||
	fail "$rec recorded + $sum summarized + $lost lost, $C made"
# (b) burst + rate x the whole run (the bucket fills while the task sleeps, up to the burst)
max=$(python3 -c "import sys; print(int(2000 + 1000 * (int(sys.argv[2]) - int(sys.argv[1])) / 1e9))" "$t0" "$t1")
[ "$rec" -le "$max" ] && [ "$rec" -lt $((C / 10)) ] &&
	pass "held to its budget: $rec recorded one by one (at most $max: burst + rate over its run)" ||
	fail "recorded one by one: $rec, at most $max (burst + rate over its run)"
# (c)
es=$(q "SELECT json_extract(body,'\$.audit.summarized') FROM records WHERE task_id='$F' AND type='task.end'")
kin=$(q "SELECT json_extract(body,'\$.audit.in_kernel.connect_allow') FROM records WHERE task_id='$F' AND type='task.end'")
ksum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.in_kernel.connect_allow')),0) FROM records WHERE task_id='$F' AND type='audit.summary'")
[ "$es" = "$sum" ] && [ "${kin:-x}" = "$ksum" ] &&
	pass "task.end: $es summarized as the summaries say, $kin counted in the kernel as they say" ||
	fail "task.end summarized '$es' against $sum, in_kernel '$kin' against $ksum"
# (d)
start=$(q "SELECT min(time_ns) FROM records WHERE task_id='$F' AND type='task.start'")
early=$(q "SELECT count(*) FROM records WHERE task_id='$F'
	AND type IN ('audit.connect', 'audit.summary', 'audit.lost')
	AND time_ns < ${start:-0} + $((IDLE_S * 1000000000))")
[ -n "$start" ] && [ "$early" = 0 ] && pass "no connect, summary or lost record while it slept" ||
	fail "$early connect, summary or lost records in its first $IDLE_S s (task.start '$start')"
finish
