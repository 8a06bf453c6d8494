#!/bin/bash
# Agent failover over a list of collectors: two corral-collector on one PostgreSQL, corrald with
# both URLs; the collector in use is killed with SIGKILL while tasks end and records stream.
# Checked with plain SQL over the raw rows: every task's start and end stored, none twice;
# the agent moved to the second collector (its log, the second collector's own /metrics) and
# the time from the kill to the first record stored after it is printed. Then the first comes
# back and, after the failback delay, receives batches again (its /metrics). Then it hangs
# (SIGSTOP): with request_timeout = 2s one timeout moves the agent, every record stored once.
# With Debian's haproxy installed, the same kill behind one haproxy address (agent -> haproxy
# -> two collectors, `balance first`): every batch at the first before the kill (its /metrics),
# the second takes over, nothing lost, nothing doubled, the time to move printed.
. "$(dirname "$0")/lib.sh"
need_root
. tests/integration/collector_lib.sh
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
on_exit() {
	local p
	stop_agent
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ -n "$PGDATA" ] && su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m immediate stop" >/dev/null 2>&1
	if [ "$FAILS" -gt 0 ]; then
		tail -n 5 "$T"/collector-*.log 2>/dev/null
		grep -h "collector:" "$T/agent.log" 2>/dev/null | tail -n 10
	fi
	cleanup
}
trap on_exit EXIT
H=$O/tests/bench/helper_launch_bench
N=${FAILOVER_N:-400}
pg_start corral
case $? in
0) ;;
1) skip "PostgreSQL server binaries missing ($PGBIN)" ;;
*) fail "PostgreSQL did not start"; finish ;;
esac
DB=$(pg_uri corral)
sql() { psql "$DB" -Atqc "$1"; }
coll_tokens n1
node_token n1 >"$T/token"
chmod 600 "$T/token"
metric() { # metric PORT NAME -> value (empty: no answer)
	curl -fs "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v n="$2" '$1 == n {print $2}'
}
accepted() { metric "$1" 'corral_collector_records_total{status="accepted"}'; }
now() { date +%s.%N; }
wait_sql() { # wait_sql SQL WANT SECONDS -> last value
	local v
	for _ in $(seq $(($3 * 20))); do
		v=$(sql "$1"); [ "${v:-0}" -ge "$2" ] && break; sleep 0.05
	done
	echo "${v:-0}"
}

read -r PA PB <<<"$(free_ports 2)"
start_collector "$DB" "$PA" || { fail "collector A"; finish; }
CA=$CPID
start_collector "$DB" "$PB" || { fail "collector B"; finish; }
CB=$CPID
cat >"$T/agent.conf" <<CONF
[collector]
url = http://127.0.0.1:$PA
url = http://127.0.0.1:$PB
token_file = $T/token
batch_records = 20
batch_delay = 100ms
failback = 4s
CONF
start_agent --no-bpf --config "$T/agent.conf" --node n1 --metrics-listen "127.0.0.1:$(free_port)"

# --- kill -9 of the collector in use, mid-stream ------------------------------------------------
"$H" "$N" throughput "$SOCK" 4 >"$T/launch.log" 2>&1 &
LAUNCH=$!
PIDS+=("$LAUNCH")
c=$(wait_sql "SELECT count(*) FROM records" 100 60)
a0=$(accepted "$PA")
b0=$(accepted "$PB")
[ "${a0:-0}" -gt 0 ] && [ "${b0:-0}" = 0 ] && pass "streaming to the first URL ($a0 records at A, 0 at B)" \
	|| fail "before the kill: A accepted '$a0', B '$b0'"
kill -9 "$CA"; wait "$CA" 2>/dev/null
t0=$(now)
c0=$(sql "SELECT count(*) FROM records")
c1=$(wait_sql "SELECT count(*) FROM records" $((c0 + 1)) 60)
t1=$(now)
[ "$c1" -gt "$c0" ] && pass "$(printf 'time to move: %.2f s from kill -9 of A to the first record stored after it (%s stored at the kill)' \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')" "$c0")" || fail "nothing stored after the kill in 60 s"
wait "$LAUNCH" || fail "launching $N tasks: $(tail -3 "$T/launch.log")"
n=$(wait_sql "SELECT count(*) FROM records WHERE type='task.end'" "$N" 120)
ends=$(sql "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
starts=$(sql "SELECT count(DISTINCT task_id) FROM records WHERE type='task.start'")
dups=$(sql "SELECT count(*) FROM (SELECT task_id, type FROM records WHERE type IN ('task.start','task.end') GROUP BY task_id, type HAVING count(*) > 1) d")
[ "$n" = "$N" ] && [ "$ends" = "$N" ] && [ "$starts" = "$N" ] && [ "$dups" = 0 ] \
	&& pass "kill -9 mid-stream: $N task starts and $N task ends stored, none twice (plain SQL)" \
	|| fail "after the kill: $n end rows, $ends distinct ends, $starts distinct starts (want $N), $dups doubled"
b1=$(accepted "$PB")
grep -q "collector: uploading to http://127.0.0.1:$PB (place 2" "$T/agent.log" && [ "${b1:-0}" -gt 0 ] \
	&& pass "the agent moved to B ($b1 records accepted by B; log: $(grep -h "uploading to" "$T/agent.log" | head -1 | cut -c1-100))" \
	|| fail "no move to B in the agent log, B accepted '$b1'"

# --- the first comes back: failback after 2-6 s ------------------------------------------------
start_collector "$DB" "$PA" || fail "collector A again"
CA=$CPID
"$H" 40 throughput "$SOCK" 4 >/dev/null 2>&1 || fail "launching 40 tasks"
moved=
for _ in $(seq 300); do
	[ "$(accepted "$PA")" -gt 0 ] 2>/dev/null && { moved=1; break; }
	"$H" 2 throughput "$SOCK" 2 >/dev/null 2>&1
	sleep 0.05
done
[ -n "$moved" ] && pass "failback: A receives batches again ($(accepted "$PA") records)" \
	|| fail "no failback to A"
total=$(sql "SELECT count(*) FROM (SELECT DISTINCT task_id FROM records WHERE type='task.end') d")
dups=$(sql "SELECT count(*) FROM (SELECT task_id, type FROM records WHERE type IN ('task.start','task.end') GROUP BY task_id, type HAVING count(*) > 1) d")
[ "$dups" = 0 ] && pass "after the failback: $total tasks, none counted twice" || fail "$dups doubled"
stop_agent

# --- the collector in use hangs (SIGSTOP): a request timeout moves at once -------------------
sed -e "s|^failback = .*|failback = 1h|" "$T/agent.conf" >"$T/agent-hang.conf"
printf 'request_timeout = 2s\n' >>"$T/agent-hang.conf"
start_agent --no-bpf --config "$T/agent-hang.conf" --node n1
a0=$(accepted "$PA")
b0=$(accepted "$PB")
p0=$(sql "SELECT count(*) FROM records WHERE type='task.end'")
"$H" 20 throughput "$SOCK" 4 >/dev/null 2>&1 || fail "launching 20 tasks"
before=$(wait_sql "SELECT count(*) FROM records WHERE type='task.end'" $((p0 + 20)) 60)
[ "$before" = $((p0 + 20)) ] && [ "$(accepted "$PA")" -gt "$a0" ] && [ "$(accepted "$PB")" = "$b0" ] \
	|| fail "restarted agent: $((before - p0)) of 20 task ends, A accepted $a0 -> $(accepted "$PA"), B $b0 -> $(accepted "$PB")"
b0=$(accepted "$PB")
kill -STOP "$CA"
t0=$(now)
"$H" 100 throughput "$SOCK" 4 >/dev/null 2>&1 || fail "launching 100 tasks"
c1=$(wait_sql "SELECT count(*) FROM records WHERE type='task.end'" $((before + 1)) 60)
t1=$(now)
[ "$c1" -gt "$before" ] && pass "$(printf 'A stopped (SIGSTOP), request_timeout = 2s: first record stored %.2f s after the stop' \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')")" || fail "A stopped: nothing stored in 60 s"
n=$(wait_sql "SELECT count(*) FROM records WHERE type='task.end'" $((before + 100)) 120)
[ "$n" = $((before + 100)) ] && [ "$(accepted "$PB")" -gt "$b0" ] \
	&& pass "A stopped: 100 more task ends stored, through B" \
	|| fail "A stopped: $((n - before)) of 100 task ends, B accepted $b0 -> $(accepted "$PB")"
# The move at the first timeout, not after failover_after (3) of them: the agent's log line,
# or, when the next batch's success came before the agent logged the error (it logs the
# uploader's last error once per tick), the first record through B within two timeouts.
moved=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print (b - a < 4) ? 1 : 0}')
if grep -q "Timeout was reached; moving to http://127.0.0.1:$PB" "$T/agent.log"; then
	pass "the timeout moved it at once (log: $(grep -h "Timeout was reached; moving" "$T/agent.log" | head -1 | cut -c1-120))"
elif [ "$moved" = 1 ] && [ "$(accepted "$PB")" -gt "$b0" ]; then
	pass "the timeout moved it at once (B took the first record within two 2 s timeouts; the log line was overtaken)"
else
	fail "no move at the first timeout: no log line, first record after $(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}') s"
fi
kill -CONT "$CA"
stop_agent
dups=$(sql "SELECT count(*) FROM (SELECT task_id, type FROM records WHERE type IN ('task.start','task.end') GROUP BY task_id, type HAVING count(*) > 1) d")
[ "$dups" = 0 ] && pass "A resumed (what it held committed late): none counted twice" || fail "$dups doubled"

# --- behind haproxy ----------------------------------------------------------------------------
if ! command -v haproxy >/dev/null; then
	echo "note: haproxy not installed, the load-balancer form is not tested"
	finish
fi
PH=$(free_port)
cat >"$T/haproxy.cfg" <<CFG
global
	maxconn 1000
defaults
	mode tcp
	timeout connect 1s
	timeout client 60s
	timeout server 60s
	retries 2
	option redispatch
frontend collectors
	bind 127.0.0.1:$PH
	default_backend collectors
backend collectors
	balance first
	server a 127.0.0.1:$PA check inter 500ms fall 2 rise 2
	server b 127.0.0.1:$PB check inter 500ms fall 2 rise 2
CFG
haproxy -f "$T/haproxy.cfg" -db >"$T/haproxy.log" 2>&1 &
HP=$!
PIDS+=("$HP")
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PH/healthz" >/dev/null && break; sleep 0.05; done
curl -fs "http://127.0.0.1:$PH/healthz" >/dev/null || { fail "haproxy: $(tail -3 "$T/haproxy.log")"; finish; }
before=$(sql "SELECT count(*) FROM records WHERE type='task.end'")
sed -e "/^url = /d" -e "s|^\[collector\]|[collector]\nurl = http://127.0.0.1:$PH|" "$T/agent.conf" >"$T/agent-lb.conf"
start_agent --no-bpf --config "$T/agent-lb.conf" --node n1
"$H" "$N" throughput "$SOCK" 4 >"$T/launch.log" 2>&1 &
LAUNCH=$!
PIDS+=("$LAUNCH")
a0=$(accepted "$PA")
b0=$(accepted "$PB")
wait_sql "SELECT count(*) FROM records WHERE type='task.end'" $((before + 50)) 60 >/dev/null
a1=$(accepted "$PA")
[ "$a1" -gt "$a0" ] && [ "$(accepted "$PB")" = "$b0" ] && pass "haproxy sends every batch to A ($((a1 - a0)) records)" \
	|| fail "haproxy: A accepted $a0 -> $a1, B $b0 -> $(accepted "$PB")"
kill -9 "$CA"; wait "$CA" 2>/dev/null
t0=$(now)
c0=$(sql "SELECT count(*) FROM records")
c1=$(wait_sql "SELECT count(*) FROM records" $((c0 + 1)) 60)
t1=$(now)
[ "$c1" -gt "$c0" ] && pass "$(printf 'behind haproxy, time to move: %.2f s from kill -9 of A to the first record stored after it' \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')")" || fail "haproxy: nothing stored after the kill in 60 s"
wait "$LAUNCH" || fail "launching $N tasks behind haproxy"
n=$(wait_sql "SELECT count(*) FROM records WHERE type='task.end'" $((before + N)) 120)
dups=$(sql "SELECT count(*) FROM (SELECT task_id, type FROM records WHERE type IN ('task.start','task.end') GROUP BY task_id, type HAVING count(*) > 1) d")
[ "$n" = $((before + N)) ] && [ "$dups" = 0 ] && [ "$(accepted "$PB")" -gt "$b0" ] \
	&& pass "behind haproxy, A killed mid-stream: $N more task ends stored (B took over), none twice" \
	|| fail "behind haproxy: $((n - before)) of $N task ends, $dups doubled, B accepted $b0 -> $(accepted "$PB")"
stop_agent
finish
