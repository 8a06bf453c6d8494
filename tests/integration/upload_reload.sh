#!/bin/bash
# SIGHUP applies a change of the agent's [collector] url and token_file while records stream:
# two SQLite collectors, each knowing only its own node token; corrald uploads to the first;
# tasks are launched all along. A reload naming a token file others may read is refused (the
# uploads stay with the first, the change named as waiting for a restart); the reload naming
# the second collector and its token (mode 0600) moves the uploads there once the batch in
# flight (to the first, stopped until the move is due) is finished. Checked with plain SQL on
# both databases once the spool is empty: every task's start and end stored once in all, no
# record id in both, the numbered ids (samples) without a gap; nothing reached the first after
# the move; the second refused no request; the agent's acked counter (carried across the move)
# equals the rows stored.
. "$(dirname "$0")/lib.sh"
need_root
read -r P1 P2 MPORT <<<"$(free_ports 3)"
TOK1=tok-reload-one-0123456789abcdef
TOK2=tok-reload-two-0123456789abcdef
printf 'node it-node %s\n' "$TOK1" >"$T/tokens1"
printf 'node it-node %s\n' "$TOK2" >"$T/tokens2"
echo "$TOK1" >"$T/token1"
echo "$TOK2" >"$T/token2"
chmod 600 "$T/tokens1" "$T/tokens2" "$T/token1" "$T/token2"
cp "$T/token2" "$T/loose-token"
chmod 644 "$T/loose-token"
COLLS=()
on_exit() {
	local p
	for p in "${COLLS[@]}" ${LAUNCH:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	cleanup
}
trap on_exit EXIT
for i in 1 2; do
	eval "port=\$P$i"
	"$O/corral-collector" serve --listen "127.0.0.1:$port" --db "sqlite:$T/c$i.db" \
		--tokens "$T/tokens$i" >>"$T/coll$i.log" 2>&1 &
	COLLS+=($!)
	wait_up "http://127.0.0.1:$port/healthz" "$!" "$T/coll$i.log"
done
q1() { sqlite3 "$T/c1.db" "$1" 2>/dev/null; }
q2() { sqlite3 "$T/c2.db" "$1" 2>/dev/null; }
conf() { # conf PORT TOKEN-FILE: the agent's configuration
	printf '[collector]\nurl = http://127.0.0.1:%s\ntoken_file = %s\nbatch_records = 10\nbatch_delay = 50ms\n' \
		"$1" "$2" >"$T/a.conf"
}
conf "$P1" "$T/token1"
start_agent --no-bpf --config "$T/a.conf" --sample-interval 1s --metrics-listen "127.0.0.1:$MPORT"
# tasks launched until $T/stop appears, each counted in $T/launched
(while [ ! -e "$T/stop" ]; do ctl run -- sleep 0.3 >/dev/null || exit 1; echo >>"$T/launched"; sleep 0.05; done) &
LAUNCH=$!
for _ in $(seq 100); do [ "$(q1 'SELECT count(*) FROM records')" -ge 40 ] && break; sleep 0.1; done

# a token file others may read: the reload keeps the running uploader
conf "$P2" "$T/loose-token"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q "changed but not applied" "$T/agent.log" && break; sleep 0.05; done
c1=$(q1 'SELECT count(*) FROM records')
sleep 1
c1b=$(q1 'SELECT count(*) FROM records')
grep -q "token_file $T/loose-token: mode 0$(stat -c %a "$T/loose-token") lets group or others at a secret" "$T/agent.log" &&
	grep "changed but not applied until corrald restarts" "$T/agent.log" | grep -q '\[collector\] url' &&
	[ "$c1b" -gt "$c1" ] && [ "$(q2 'SELECT count(*) FROM records')" = 0 ] &&
	pass "reload with a token file of mode 644: refused, uploads stay with the first ($c1 -> $c1b records)" ||
	fail "loose token reload: first $c1 -> $c1b, second $(q2 'SELECT count(*) FROM records'): $(grep -i 'collector\|reload' "$T/agent.log" | tail -n 4)"

# the second collector and its token, while a batch is in flight to the first: the first is
# stopped (SIGSTOP) until the kernel holds a request it has not read (Recv-Q of its end of the
# connection, from ss); the move waits for that batch's answer, given once it runs again
kill -STOP "${COLLS[0]}"
held=0
for _ in $(seq 100); do
	held=$(ss -Htn state established "sport = :$P1" | awk '{s += $1} END {print s + 0}')
	[ "$held" -gt 0 ] && break
	sleep 0.05
done
conf "$P2" "$T/token2"
kill -HUP "$AGENT_PID"
sleep 2
early=$(grep -c "uploading to http://127.0.0.1:$P2 with the reloaded" "$T/agent.log")
c2=$(q2 'SELECT count(*) FROM records')
kill -CONT "${COLLS[0]}"
[ "$held" -gt 0 ] && [ "$early" = 0 ] && [ "$c2" = 0 ] &&
	pass "a batch in flight to the stopped first collector ($held bytes unread): no move for 2 s, nothing at the second" ||
	fail "batch in flight: $held bytes unread at the first, moved early: $early, second $c2 records"
for _ in $(seq 200); do grep -q "uploading to http://127.0.0.1:$P2 with the reloaded" "$T/agent.log" && break; sleep 0.05; done
moved=$(q1 'SELECT count(*) FROM records')
kill -0 "$LAUNCH" 2>/dev/null && loaded=yes || loaded=no
grep -q "uploading to http://127.0.0.1:$P2 with the reloaded" "$T/agent.log" &&
	grep "configuration reloaded" "$T/agent.log" | tail -n 1 | grep -q 'applied: .*\[collector\] url.*\[collector\] token_file' &&
	[ "$loaded" = yes ] && pass "reload to the second collector applied under load: $(grep 'configuration reloaded' "$T/agent.log" | tail -n 1)" ||
	fail "reload to the second collector (tasks still launching: $loaded): $(grep -i 'collector\|reload' "$T/agent.log" | tail -n 4)"
sleep 1
touch "$T/stop"
wait "$LAUNCH" || fail "launching tasks"
LAUNCH=
N=$(wc -l <"$T/launched")
for _ in $(seq 300); do
	[ "$(ctl status --json | jget upload.pending_records)" = 0 ] && [ "$(ctl status --json | jget tasks_live)" = 0 ] && break
	sleep 0.1
done
# the agent's acked counter, carried across the move, against the rows of both (a node.sample
# may arrive between two reads: read again until they agree)
for _ in $(seq 50); do
	acked=$(metric corral_upload_records_acked_total)
	rows=$(($(q1 'SELECT count(*) FROM records') + $(q2 'SELECT count(*) FROM records')))
	[ "$acked" = "$rows" ] && break
	sleep 0.1
done
[ "$acked" = "$rows" ] && [ "$(metric corral_upload_duplicates_total)" = 0 ] &&
	pass "records acked by the agent $acked = rows stored in both, no duplicate answered" ||
	fail "acked $acked, rows $rows, duplicates $(metric corral_upload_duplicates_total)"
stop_agent

r1=$(q1 'SELECT count(*) FROM records')
r2=$(q2 'SELECT count(*) FROM records')
[ "$r1" = "$moved" ] && [ "$r2" -gt 0 ] &&
	pass "nothing at the first after the move ($r1 records), $r2 at the second" ||
	fail "first $moved at the move, $r1 at the end; second $r2"
both=$(sqlite3 "$T/c1.db" "ATTACH '$T/c2.db' AS b; SELECT count(*) FROM records r JOIN b.records s USING (record_id)")
read -r starts ends tasks <<<"$(sqlite3 -separator ' ' "$T/c1.db" "ATTACH '$T/c2.db' AS b;
	WITH u AS (SELECT record_id, type, task_id FROM records UNION ALL SELECT record_id, type, task_id FROM b.records)
	SELECT (SELECT count(*) FROM u WHERE type = 'task.start'), (SELECT count(*) FROM u WHERE type = 'task.end'),
	       (SELECT count(DISTINCT task_id) FROM u WHERE type = 'task.end')")"
[ "$both" = 0 ] && [ "$starts" = "$N" ] && [ "$ends" = "$N" ] && [ "$tasks" = "$N" ] &&
	pass "$N tasks: $starts starts and $ends ends over both collectors, none in both" ||
	fail "starts $starts, ends $ends ($tasks tasks), ids in both: $both, want $N"
# numbered ids (NODE/BOOT/INSTANCE-N): one instance, N from its first to its last without a gap
gaps=$( { q1 'SELECT record_id FROM records'; q2 'SELECT record_id FROM records'; } | python3 -c 'import re, sys
seq = {}
for line in sys.stdin:
    m = re.fullmatch(r"(.*)-([0-9]+)", line.strip())
    if m and not line.strip().endswith(("/start", "/end")):
        seq.setdefault(m.group(1), []).append(int(m.group(2)))
if len(seq) != 1:
    print("instances: %d" % len(seq)); sys.exit()
n = sorted(next(iter(seq.values())))
print(len(n), n[-1] - n[0] + 1 - len(set(n)), len(n) - len(set(n)))')
read -r numbered missing twice <<<"$gaps"
[ "${missing:-x}" = 0 ] && [ "${twice:-x}" = 0 ] && [ "$numbered" -gt 0 ] &&
	pass "$numbered numbered records, no gap, none twice" || fail "numbered records: $gaps"
refused=$(grep -c "refused a request" "$T/coll2.log")
[ "$refused" = 0 ] && pass "the second collector refused no request (the new token sent)" ||
	fail "second collector refused $refused: $(grep 'refused a request' "$T/coll2.log" | head -n 2)"
exit $((FAILS > 0))
