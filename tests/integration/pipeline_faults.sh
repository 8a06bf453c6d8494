#!/bin/bash
# Accounting pipeline under faults, agent + collector (SQLite) end to end:
#  1. collector down while 1,000 tasks finish, then up: every end record arrives once;
#  2. kill -9 of corrald in the middle of uploading: after restart no duplicates, no gaps;
#  3. spool full: tasks still run, the loss is counted and visible in status and /metrics.
. "$(dirname "$0")/lib.sh"
need_root
N=${PIPELINE_N:-1000}
PORT=$((21000 + RANDOM % 20000))
MPORT=$((PORT + 1))
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
printf 'node it-node %s\nreader it %s\n' "$TOKEN" it-reader-token-0123456789 >"$T/tokens"
chmod 600 "$T/tokens"
echo "$TOKEN" >"$T/token"
COLL=
start_collector() {
	"$O/corral-collector" serve --listen 127.0.0.1:$PORT --db "sqlite:$DB" --tokens "$T/tokens" \
		>>"$T/collector.log" 2>&1 &
	COLL=$!
	for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return; sleep 0.1; done
	echo "collector did not start"; cat "$T/collector.log"; exit 1
}
stop_collector() { [ -n "$COLL" ] && kill "$COLL" 2>/dev/null && wait "$COLL" 2>/dev/null; COLL=; }
trap 'stop_collector; cleanup' EXIT
q() { sqlite3 "$DB" "$1" 2>/dev/null; }
wait_count() { # wait_count SQL WANT SECONDS
	local i n
	for i in $(seq $(($3 * 5))); do
		n=$(q "$1"); [ "${n:-0}" -ge "$2" ] && break; sleep 0.2
	done
	echo "${n:-0}"
}
H=$O/tests/bench/helper_launch_bench

# --- 1. collector down while N tasks finish ---------------------------------------------------
# Small batches, so that step 2 can kill the agent between two of them.
printf '[collector]\nbatch_records = 40\nbatch_delay = 200ms\n' >"$T/batch.conf"
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token" \
	--metrics-listen 127.0.0.1:$MPORT
"$H" "$N" throughput "$SOCK" 8 || fail "launching $N tasks"
pending=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '/^corral_spool_pending_records /{print $2}')
[ "${pending:-0}" -ge $((2 * N)) ] && pass "$N tasks finished with the collector down; $pending records held in the spool" \
	|| fail "spool pending: $pending"
start_collector
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" "$N" 120)
d=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
[ "$n" = "$N" ] && [ "$d" = "$N" ] && pass "collector up: all $N end records arrived, once each" \
	|| fail "after outage: $n end records, $d distinct tasks (want $N)"

# --- 2. kill -9 of the agent while it uploads ------------------------------------------------------
stop_collector
M=300
"$H" "$M" throughput "$SOCK" 8 || fail "launching $M tasks"
start_collector
# Kill the agent as soon as the first of these records reaches the collector.
for _ in $(seq 200); do
	[ "$(q "SELECT count(*) FROM records WHERE type='task.end'")" -gt "$N" ] && break
	sleep 0.02
done
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
mid=$(q "SELECT count(*) FROM records WHERE type='task.end'")
[ "$mid" -lt $((N + M)) ] && pass "agent killed mid-upload ($mid of $((N + M)) end records stored)" \
	|| echo "note: the upload finished before the kill ($mid stored)"
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" $((N + M)) 120)
d=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
s=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.start'")
[ "$n" = $((N + M)) ] && [ "$d" = $((N + M)) ] && [ "$s" = $((N + M)) ] \
	&& pass "kill -9 mid-upload (at $mid/$((N + M))): after restart $n end records, no duplicates, no gaps" \
	|| fail "after kill -9: $n end, $d distinct, $s starts (want $((N + M)))"
dups=$(q "SELECT count(*) FROM (SELECT task_id, type FROM records WHERE type IN ('task.start','task.end') GROUP BY task_id, type HAVING count(*) > 1)")
[ "$dups" = 0 ] && pass "no task counted twice" || fail "$dups duplicated task records"
stop_agent

# --- 3. spool full ------------------------------------------------------------------------------
stop_collector
cat >"$T/small.conf" <<CONF
[spool]
max_bytes = 1M
CONF
rm -rf "$STATE"
start_agent --no-bpf --config "$T/small.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
"$H" 1500 throughput "$SOCK" 8 && pass "1500 tasks ran with the spool full" || fail "tasks failed while the spool was full"
refused=$(ctl status | jget records_spool_refused)
metric=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '/^corral_spool_refused_total /{print $2}')
[ "${refused:-0}" -gt 0 ] && [ "$metric" = "$refused" ] && pass "spool full: $refused records refused, counted in status and corral_spool_refused_total" \
	|| fail "spool full: refused=$refused metric=$metric"
grep -q 'spool refused' "$T/agent.log" && [ "$(grep -c 'spool refused' "$T/agent.log")" = 1 ] \
	&& pass "the loss is logged once" || fail "spool-full log lines: $(grep -c 'spool refused' "$T/agent.log")"
finish
