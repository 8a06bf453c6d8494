#!/bin/bash
# The collector's own load shedding: max_queued batches waiting for the database, then 503 with
# Retry-After. A collector on PostgreSQL with one ingest connection, one server thread,
# max_queued = 1 and retry_after = 1; a session of this test's own holds an ACCESS EXCLUSIVE
# lock on records, so the batch in the worker waits in the database (seen in pg_stat_activity)
# and the next one waits in the queue. Then:
#  - further POSTs are answered 503 with "Retry-After: 1" before their decode; the clients'
#    own count of 503s equals corral_collector_shed_total and the 503 responses in /metrics;
#  - a real agent (corrald) with tasks ending meanwhile gets 503s too (its /metrics) and keeps
#    its records in the spool;
#  - the lock released: the two waiting batches answer 200, the agent's spool drains to 0, and
#    plain SQL finds every record of the batches answered 200 and of the agent's tasks stored
#    once, none of a refused batch; the refused batch sent again is accepted in full, a batch
#    sent again after its 200 is all duplicates.
. "$(dirname "$0")/lib.sh"
need_root
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
[ -x "$LOAD" ] || { echo "FAIL: $LOAD not built (make all)"; exit 1; }
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
on_exit() {
	local p
	stop_agent
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ -n "$PGDATA" ] && su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m immediate stop" >/dev/null 2>&1
	[ "$FAILS" -gt 0 ] && tail -n 5 "$T"/collector-*.log "$T/agent.log" "$T"/*.code "$T"/*.resp 2>/dev/null
	cleanup
}
trap on_exit EXIT
finish() { [ "$FAILS" = 0 ] && exit 0; exit 1; }

pg_start corral
case $? in
0) ;;
1) skip "PostgreSQL server binaries missing ($PGBIN)" ;;
*) fail "PostgreSQL did not start"; finish ;;
esac
DB=$(pg_uri corral)
sql() { psql "$DB" -Atqc "$1"; }
coll_tokens n1 n2
node_token n1 >"$T/token"
chmod 600 "$T/token"
TOK2=$(node_token n2)
cmetric() { curl -m 3 -fs "http://127.0.0.1:$P/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
ametric() { curl -m 3 -fs "http://$AM/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
# wait_for SECONDS CMD...: until CMD succeeds (1 when it did not)
wait_for() {
	local n=$(($1 * 20))
	shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}
# post NAME: POST $T/NAME.ndjson as n2; the status in $T/NAME.code, headers in $T/NAME.hdr
post() {
	curl -s -o "$T/$1.resp" -D "$T/$1.hdr" -w '%{http_code}' -H "Authorization: Bearer $TOK2" \
		-H 'Content-Type: application/x-ndjson' --data-binary "@$T/$1.ndjson" \
		"http://127.0.0.1:$P/v1/records" >"$T/$1.code"
}
# n2's records of batch NAME stored (plain SQL over the raw rows)
stored() { sql "SELECT count(*) FROM records WHERE record_id LIKE '$1%'"; }

for b in a b c d e; do "$LOAD" gen --node n2 --prefix "$b-" --count 50 >"$T/$b.ndjson" || exit 1; done
cat >"$T/coll.conf" <<CONF
[server]
threads = 1
max_queued = 1
retry_after = 1
CONF
P=$(free_port)
start_collector "$DB" "$P" --config "$T/coll.conf" --db-connections 1 || { fail "collector"; finish; }

# the lock holder: records locked until this session is ended
PGAPPNAME=shed-lock psql "$DB" -Atqc "BEGIN; LOCK TABLE records IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(300)" \
	>/dev/null 2>&1 &
PIDS+=($!)
locked() { [ "$(sql "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'records' AND l.mode = 'AccessExclusiveLock' AND l.granted")" = 1 ]; }
waiting() { [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name <> 'shed-lock'")" -ge "$1" ]; }
wait_for 20 locked || { fail "the lock on records was not taken"; finish; }

# an idle connection first, as an agent's between batches (a connection alone on its server
# thread is stored by that thread itself, never queued); the server has it when its
# descriptor is there
nfd() { find "/proc/$CPID/fd" -lname 'socket:*' | wc -l; }
fd0=$(nfd)
python3 -c 'import socket, sys, time; s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); time.sleep(300)' "$P" &
PIDS+=($!)
more_fds() { [ "$(nfd)" -gt "$fd0" ]; }
wait_for 20 more_fds || { fail "the idle connection was not accepted"; finish; }
post a &
PIDS+=($!)
wait_for 20 waiting 1 || { fail "batch a does not wait for the lock in the database"; finish; }
# b, c and d together: one of them waits in the queue (max_queued = 1), the other two are
# refused at once, whatever their order
for x in b c d; do
	post $x &
	PIDS+=($!)
done
shed() { [ "$(cmetric corral_collector_shed_total)" -ge "$1" ] 2>/dev/null; }
refusedn() { local x n=0; for x in b c d; do [ "$(cat "$T/$x.code" 2>/dev/null)" = 503 ] && n=$((n + 1)); done; echo $n; }
two_refused() { [ "$(refusedn)" = 2 ]; }
wait_for 20 two_refused && shed 2 && ok "max_queued reached: 2 of 3 POSTs answered 503 at once while a waits in the database and one in the queue" \
	|| fail "503s: b '$(cat "$T/b.code" 2>/dev/null)', c '$(cat "$T/c.code" 2>/dev/null)', d '$(cat "$T/d.code" 2>/dev/null)', shed_total '$(cmetric corral_collector_shed_total)'"
R=
for x in b c d; do [ "$(cat "$T/$x.code" 2>/dev/null)" = 503 ] && R=$x; done
[ -n "$R" ] || finish
ra=$(awk 'tolower($1) == "retry-after:" {print $2}' "$T/$R.hdr" | tr -d '\r')
[ "$ra" = 1 ] && grep -q "overloaded" "$T/$R.resp" && ok "the 503 carries Retry-After: $ra and says why ($(head -c 80 "$T/$R.resp"))" \
	|| fail "503 without Retry-After 1 (got '$ra'): $(cat "$T/$R.hdr" "$T/$R.resp")"

# a real agent meanwhile: its tasks' records stay in the spool
AM=127.0.0.1:$(free_port)
cat >"$T/agent.conf" <<CONF
[collector]
url = http://127.0.0.1:$P
token_file = $T/token
batch_records = 20
batch_delay = 100ms
CONF
start_agent --no-bpf --config "$T/agent.conf" --node n1 --metrics-listen "$AM"
for _ in 1 2 3 4 5; do ctl run -- /bin/true >/dev/null || fail "ctl run"; done
agent_503() { [ "$(ametric corral_upload_last_http_status)" = 503 ]; }
wait_for 20 agent_503 && ok "the agent's uploads are answered 503 ($(ametric corral_spool_pending_records) records in its spool)" \
	|| fail "the agent saw no 503 (last status '$(ametric corral_upload_last_http_status)')"
shed_n=$(cmetric corral_collector_shed_total)
r503=$(cmetric 'corral_collector_http_requests_total{code="503"}')

# the lock released: everything drains
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'shed-lock'" >/dev/null
for x in a b c d; do wait_for 30 test -s "$T/$x.code"; done
drained() { [ "$(ametric corral_spool_pending_records)" = 0 ]; }
wait_for 60 drained && ok "the agent's spool drained after the lock was released" \
	|| fail "the agent's spool still holds $(ametric corral_spool_pending_records) records"
[ "$(cat "$T/a.code")" = 200 ] || fail "batch a answered '$(cat "$T/a.code")' after the lock"
ok_batches=a
for x in b c d; do [ "$(cat "$T/$x.code")" = 200 ] && ok_batches="$ok_batches $x"; done
for x in a b c d; do
	n=$(stored "$x-")
	if [[ " $ok_batches " == *" $x "* ]]; then
		[ "$n" = 50 ] || fail "batch $x answered 200: $n of 50 records stored (SQL)"
	else
		[ "$n" = 0 ] || fail "batch $x answered 503: $n records stored (SQL)"
	fi
done
ok "stored (SQL): the 50 records of each batch answered 200 ($ok_batches), none of a refused one"
ends=$(sql "SELECT count(DISTINCT task_id) FROM records WHERE node = 'n1' AND type = 'task.end'")
dups=$(sql "SELECT count(*) - count(DISTINCT record_id) FROM records")
[ "$ends" = 5 ] && [ "$dups" = 0 ] && ok "the agent's 5 tasks stored after the 503s; no record stored twice (SQL)" \
	|| fail "agent tasks stored: $ends of 5; $dups records twice"
post "$R"
grep -q '"accepted": *50' "$T/$R.resp" && [ "$(stored "$R-")" = 50 ] && ok "the refused batch $R sent again: 50 accepted, 50 rows" \
	|| fail "batch $R again: $(cat "$T/$R.code") $(head -c 200 "$T/$R.resp")"
post a
grep -q '"duplicate": *50' "$T/a.resp" && [ "$(stored a-)" = 50 ] && ok "batch a sent again: 50 duplicates, still 50 rows" \
	|| fail "batch a again: $(head -c 200 "$T/a.resp")"
# counted: every 503 the clients saw is in the collector's shed counter and its 503 responses
[ "${shed_n:-0}" -ge 3 ] && [ "${shed_n:-0}" = "${r503:-x}" ] &&
	ok "metrics: corral_collector_shed_total $shed_n = its 503 responses $r503 (2 to curl, the rest to the agent)" \
	|| fail "metrics: shed_total '$shed_n', 503 responses '$r503'"
finish
