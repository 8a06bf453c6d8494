#!/bin/bash
# Audit trail through corrald and the collector: a task that runs sh, ls and a python3
# connect yields exactly those exec records and an allowed connect; --deny-net makes the
# connect fail with EPERM inside the task and is audited as a deny; a time limit and an OOM
# kill each yield an audit.limit record with the limit and the observed values; the records
# form an intact per-node hash chain.
. "$(dirname "$0")/lib.sh"
need_root
PORT=$(free_port) LPORT=$(free_port)
while [ "$LPORT" = "$PORT" ]; do LPORT=$(free_port); done
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
node_token "$TOKEN"
trap 'kill $COLL $LIS 2>/dev/null; cleanup' EXIT
collector_up "$T/coll.log"
python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
while True:
    c,_=s.accept(); c.close()' $LPORT &
LIS=$!
# the listener must be up before the task connects (a refused connect exits 211)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$LPORT") 2>/dev/null && break; sleep 0.05; done
printf '[collector]\nbatch_delay = 100ms\n' >"$T/a.conf"
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
grep -q 'audit trail loaded' "$T/agent.log" || skip "audit programs did not load: $(grep -i audit "$T/agent.log")"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
CONNECT="import socket,sys,errno
s=socket.socket(); s.settimeout(2)
try:
    s.connect(('127.0.0.1', $LPORT)); sys.exit(0)
except OSError as e:
    sys.exit(100 + (e.errno or 0))"
run_wait --env PATH=/usr/bin:/bin -- /bin/sh -c "ls >/dev/null; python3 -c \"$CONNECT\""
[ "$RC" = 0 ] && pass "task ran (connect allowed)" || fail "allowed run: rc $RC $REASON"
ID1=$ID
run_wait --env PATH=/usr/bin:/bin --deny-net 127.0.0.1/32:$LPORT -- /bin/sh -c "python3 -c \"$CONNECT\""
[ "$RC" = 101 ] && pass "--deny-net: connect failed with EPERM inside the task" || fail "deny: rc $RC $REASON"
ID2=$ID
# audit.limit: every limit action with the values at the time
run_wait --time 1 -- sleep 30
IDT=$ID
run_wait --memory 32M --swap 0 -- python3 -c 'b = bytearray(256 << 20)'
IDM=$ID
# two workers OOM-killed inside a task that goes on: an audit.limit "oom_kill" per increment
run_wait --memory 32M --swap 0 -- sh -c 'for i in 1 2; do python3 -c "b = bytearray(256 << 20)"; done; exit 0'
IDS=$ID
# an argument that is not UTF-8 reaches the task exactly and its audit.exec escaped, named
run_wait --workdir / -- /bin/sh -c 'printf %s "$0" >"$1"' $'\xff\xfe\\x' "$T/bytes.out"
IDB=$ID
[ "$(status_of "$IDT")" = time_limit ] && [ "$(status_of "$IDM")" = oom_killed ] &&
	pass "limit tasks ended time_limit / oom_killed" || fail "limit tasks: $(status_of "$IDT") $(status_of "$IDM")"
for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM records WHERE type='task.end'")" -ge 4 ] && break; sleep 0.2; done
lt=$(q "SELECT json_extract(body,'\$.event.limit')||' '||json_extract(body,'\$.event.action')||' '||json_extract(body,'\$.event.limit_value')||' '||(json_extract(body,'\$.event.observed') >= json_extract(body,'\$.event.limit_value')) FROM records WHERE type='audit.limit' AND task_id='$IDT'")
[ "$lt" = "time_limit SIGTERM 1000000000 1" ] && pass "audit.limit of the time limit: $lt" || fail "audit.limit time: '$lt'"
lm=$(q "SELECT json_extract(body,'\$.event.limit')||' '||json_extract(body,'\$.event.limit_value')||' '||(json_extract(body,'\$.event.oom_kills') >= 1) FROM records WHERE type='audit.limit' AND task_id='$IDM' AND json_extract(body,'\$.event.limit')='oom_killed'")
[ "$lm" = "oom_killed 33554432 1" ] && pass "audit.limit of the OOM kill: $lm" || fail "audit.limit oom: '$lm'"
for _ in $(seq 50); do [ "$(q "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$IDS'")" = 1 ] && break; sleep 0.2; done
ls_=$(q "SELECT sum(json_extract(body,'\$.event.new_kills'))||' '||max(json_extract(body,'\$.event.oom_kills')) FROM records WHERE type='audit.limit' AND task_id='$IDS' AND json_extract(body,'\$.event.limit')='oom_kill'")
es=$(q "SELECT json_extract(body,'\$.exit.status')||' '||json_extract(body,'\$.exit.code')||' '||json_extract(body,'\$.exit.oom_kills') FROM records WHERE type='task.end' AND task_id='$IDS'")
[ "$ls_" = "2 2" ] && [ "$es" = "exited 0 2" ] &&
	pass "surviving task: audit.limit oom_kill records for 2 kills, task.end exited 0 with exit.oom_kills 2" ||
	fail "surviving task: audit '$ls_', end '$es'"
for _ in $(seq 50); do [ -n "$(q "SELECT 1 FROM records WHERE type='audit.exec' AND task_id='$IDB'")" ] && break; sleep 0.2; done
eb=$(q "SELECT json_extract(body,'\$.event.argv[3]')||' '||json_extract(body,'\$.event.escaped') FROM records WHERE type='audit.exec' AND task_id='$IDB'")
[ "$(od -An -tx1 "$T/bytes.out" | tr -d ' \n')" = fffe5c78 ] && [ "$eb" = '\xff\xfe\\x ["argv[3]"]' ] &&
	pass "argument \$'\\xff\\xfe\\\\x': exact in the task, escaped in audit.exec: $eb" ||
	fail "bytes argument: task got $(od -An -tx1 "$T/bytes.out"), audit.exec '$eb'"
execs=$(q "SELECT json_extract(body, '\$.event.path') FROM records WHERE type='audit.exec' AND task_id='$ID1' ORDER BY time" | xargs -n1 basename | tr '\n' ' ')
[ "$execs" = "sh ls python3 " ] && pass "exec records of task 1: $execs" || fail "exec records: '$execs'"
c1=$(q "SELECT json_extract(body,'\$.event.verdict')||' '||json_extract(body,'\$.event.address')||':'||json_extract(body,'\$.event.port') FROM records WHERE type='audit.connect' AND task_id='$ID1'")
[ "$c1" = "allow 127.0.0.1:$LPORT" ] && pass "connect record: $c1" || fail "connect record: '$c1'"
c2=$(q "SELECT json_extract(body,'\$.event.verdict') FROM records WHERE type='audit.connect' AND task_id='$ID2'")
[ "$c2" = deny ] && pass "denied connect audited" || fail "deny record: '$c2'"
q "SELECT body FROM records WHERE type LIKE 'audit.%'" >"$T/audit.ndjson"
python3 - "$T/audit.ndjson" <<'PY' && pass "audit records form an intact hash chain" || fail "hash chain broken"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_prev = {r["prev_hash"]: r for r in recs}
heads = [r for r in recs if r["prev_hash"] not in {x["hash"] for x in recs}]
assert len(heads) == 1, "chain has %d heads" % len(heads)
n, cur = 1, heads[0]
while cur["hash"] in by_prev:
    cur = by_prev[cur["hash"]]; n += 1
assert n == len(recs), "chain covers %d of %d" % (n, len(recs))
print("chain of", n, "audit records")
PY
# corral-collector audit: queries and chain verification
n=$("$O/corral-collector" audit --db "sqlite:$DB" --task "$ID1" --type exec --format json | wc -l)
[ "$n" = 3 ] && pass "audit --task --type exec: 3 records" || fail "audit query: $n"
n=$("$O/corral-collector" audit --db "sqlite:$DB" --user root --type connect --format json | wc -l)
[ "$n" = 2 ] && pass "audit --user --type connect: 2 records" || fail "audit connect query: $n"
out=$("$O/corral-collector" audit verify --db "sqlite:$DB" --node it-node); rc=$?
[ "$rc" = 0 ] && pass "audit verify: $out" || fail "verify intact: rc $rc $out"
bad=$(q "SELECT record_id FROM records WHERE type='audit.exec' AND task_id='$ID1' AND body LIKE '%\"ls\"%'")
q "UPDATE records SET body = replace(body, '\"ls\"', '\"cat\"') WHERE record_id='$bad'"
out=$("$O/corral-collector" audit verify --db "sqlite:$DB" --node it-node); rc=$?
[ "$rc" = 1 ] && echo "$out" | grep -qF "$bad" && pass "edited row detected: $out" || fail "tamper: rc $rc '$out' (edited $bad)"
finish
