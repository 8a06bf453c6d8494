#!/bin/bash
# Record budget and billing reserve: one user's connect flood (400,000 connects) cannot cost
# another user's task its records, with the collector up and with it down, on a 4 MiB spool.
#  1. collector up: an unprivileged flood next to another user's ordinary task. Every record of
#     the ordinary task reaches the collector; the flood's connects are all accounted for, one
#     by one or counted in audit.summary records (recorded + summarized + ring-buffer lost ==
#     connects made, from the raw rows); its task.end says how many were summarized. The budget
#     is kept in the kernel: events past it are counted there, not sent through the ring
#     buffer, so none is lost (audit.lost 0) and the kernel's count is in the summaries.
#  2. collector down: the same again; the per-task budget keeps the flood from filling the
#     spool, so the ordinary task's records all arrive once the collector is back.
#  3. collector down, a flood with a large budget granted by root: the spool fills up to its
#     billing reserve, audit records are shed; the ordinary task next to it still gets its
#     task.start and task.end, the flood its own too; the shed records are declared by an
#     audit.gap record.
#  4. the same with the collector up (the flood outruns the upload); at the end every billing
#     record is stored and `audit verify` says the chain is intact with N records shed.
#  5. the agent restarts in the middle of a flood (the flood stopped with SIGSTOP meanwhile, so
#     that no event falls between two agents): the re-adopted task is audited again, with its
#     budget as it was (no second burst: fewer records one by one after the restart than the
#     burst, though the flood made far more events) and its totals continued (its task.end
#     counts the events of both agents; recorded + summarized == connects made).
. "$(dirname "$0")/lib.sh"
need_root
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
FLOOD=$O/tests/integration/helper_connect_flood
N=${FLOOD_CONNECTS:-400000}
node_token "$TOKEN"
COLL=
coll_start() {
	collector_up "$T/coll.log"
}
coll_stop() { kill $COLL 2>/dev/null; wait $COLL 2>/dev/null; COLL=; }
trap 'coll_stop; cleanup' EXIT
coll_start
mkdir -m 1777 "$T/out"
for u in corral-it-user corral-it-flood; do
	id -u $u >/dev/null 2>&1 || useradd -M -r -s /bin/sh $u
done
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
[spool]
max_bytes = 4M
billing_reserve = 512K
EOF
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
grep -q 'audit trail loaded' "$T/agent.log" || skip "audit programs did not load: $(grep -i audit "$T/agent.log")"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
as() { local u=$1; shift; setpriv --reuid "$u" --regid "$u" --clear-groups "$CORRALCTL" --socket "$SOCK" "$@"; }

# flood USER OUT [ARGS...]: a flood task in the background; its id in $OUT.id, its count in OUT
flood() {
	local u=$1 out=$2; shift 2
	local before; before=$(st audit_summarized)
	if [ "$u" = root ]; then
		ctl run --wait --workdir / --user corral-it-flood --stdout "$out" "$@" -- "$FLOOD" "$N" 9 >"$out.id" 2>"$out.err" &
	else
		as "$u" run --wait --workdir / --stdout "$out" "$@" -- "$FLOOD" "$N" 9 >"$out.id" 2>"$out.err" &
	fi
	FPID=$!
	# the ordinary task starts once the flood is past its budget (events being summarized)
	for _ in $(seq 300); do
		kill -0 $FPID 2>/dev/null || break
		[ "$(st audit_summarized)" -gt "$before" ] && break
		sleep 0.05
	done
}
# ordinary USER: a short task with a few execs; sets OID
ordinary() {
	OID=$(as "$1" run --wait --stdout /dev/null --workdir / -- /bin/sh -c 'ls / >/dev/null; true; /bin/true' | head -n1)
}
# every record the agent spooled for a task, as the agent's own ended-task view cannot tell:
# the collector's rows for it
rows() { q "SELECT type FROM records WHERE task_id='$1' ORDER BY type" | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}'; }
st() { ctl status --json | jget "$1"; }
drained() { # wait until the spool is empty (the collector acked everything)
	for _ in $(seq 600); do
		[ "$(st spool_entries_pending)" = 0 ] && return 0
		sleep 0.1
	done
	return 1
}

# ---- 1. collector up
flood corral-it-flood "$T/out/f1"
ordinary corral-it-user; O1=$OID
wait $FPID; F1=$(head -n1 "$T/out/f1.id"); C1=$(cat "$T/out/f1")
[ "$C1" -ge 400000 ] && pass "flood 1 made $C1 connects" || fail "flood 1: '$C1' $(cat "$T/out/f1.err")"
drained || fail "spool did not drain"
r=$(rows "$O1")
[ "$r" = "audit.exec:3 task.end:1 task.start:1 " ] && pass "ordinary task next to the flood, collector up: $r" || fail "ordinary task 1: '$r'"
rec=$(q "SELECT count(*) FROM records WHERE task_id='$F1' AND type='audit.connect'")
sum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.by_type.\"audit.connect\"')),0) FROM records WHERE task_id='$F1' AND type='audit.summary'")
lost=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.lost')),0) FROM records WHERE task_id='$F1' AND type='audit.lost'")
[ $((rec + sum + lost)) = "$C1" ] && pass "flood 1: $rec connects recorded + $sum summarized + $lost lost = $C1 made" ||
	fail "flood 1: $rec recorded + $sum summarized + $lost lost != $C1"
[ "$rec" -lt $((C1 / 10)) ] && pass "flood 1: only $rec recorded one by one (its budget)" || fail "flood 1 recorded $rec"
es=$(q "SELECT json_extract(body,'\$.audit.summarized') FROM records WHERE task_id='$F1' AND type='task.end'")
[ "$es" = "$sum" ] && pass "flood 1's task.end says $es events were summarized" || fail "task.end audit.summarized '$es' vs $sum"
[ "$(rows "$F1" | grep -o 'task.start:1 ')" ] && pass "flood 1's own task.start and task.end are there" || fail "flood 1 rows: $(rows "$F1")"
[ "$lost" = 0 ] && pass "flood 1: no event lost in the ring buffer" || fail "flood 1: $lost events lost"
kin=$(q "SELECT json_extract(body,'\$.audit.in_kernel.connect_allow') FROM records WHERE task_id='$F1' AND type='task.end'")
ksum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.in_kernel.connect_allow')),0) FROM records WHERE task_id='$F1' AND type='audit.summary'")
seen=$(q "SELECT coalesce(sum(json_array_length(body,'\$.event.sample')),0) FROM records WHERE task_id='$F1' AND type='audit.summary'")
[ "${kin:-0}" -gt $((C1 / 2)) ] && [ "$kin" = "$ksum" ] &&
	pass "flood 1: $kin events counted in the kernel (task.end and the summaries agree), $seen sent as samples" ||
	fail "flood 1: in_kernel task.end '$kin' summaries '$ksum'"

# ---- 2. collector down: the budget keeps the spool from filling
coll_stop
flood corral-it-flood "$T/out/f2"
ordinary corral-it-user; O2=$OID
wait $FPID; F2=$(head -n1 "$T/out/f2.id")
[ "$(st records_spool_refused)" = 0 ] && pass "no record refused by the spool with the collector down" || fail "refused: $(st records_spool_refused)"
coll_start
drained || fail "spool did not drain (2)"
r=$(rows "$O2")
[ "$r" = "audit.exec:3 task.end:1 task.start:1 " ] && pass "ordinary task next to the flood, collector down: $r" || fail "ordinary task 2: '$r'"
[ "$(rows "$F2" | grep -c 'task.end:1.*task.start:1')" = 1 ] && pass "flood 2's task.start and task.end are there" || fail "flood 2 rows: $(rows "$F2")"
C2=$(cat "$T/out/f2")
rec=$(q "SELECT count(*) FROM records WHERE task_id='$F2' AND type='audit.connect'")
sum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.by_type.\"audit.connect\"')),0) FROM records WHERE task_id='$F2' AND type='audit.summary'")
lost=$(q "SELECT count(*) FROM records WHERE task_id='$F2' AND type='audit.lost'")
[ $((rec + sum)) = "$C2" ] && [ "$lost" = 0 ] && pass "flood 2: $rec recorded + $sum summarized = $C2 made, none lost" ||
	fail "flood 2: $rec recorded + $sum summarized vs $C2, $lost audit.lost"
shed2=$(st audit_shed)
[ "${shed2:-0}" = 0 ] && pass "no audit record shed while the budget held" || fail "shed while within budget: $shed2"

# ---- 3. collector down, root grants an audit-heavy budget: the spool fills to the reserve
coll_stop
flood corral-it-flood "$T/out/f3" --audit-rate 1000000
grep -q "limits.audit_rate: at most" "$T/out/f3.err" && pass "an unprivileged user cannot raise its own budget" || fail "budget override by a user: $(cat "$T/out/f3.err")"
wait $FPID
N=150000 flood root "$T/out/f4" --audit-rate 1000000 --audit-bytes 64M
for _ in $(seq 300); do grep -q "spool full for audit records" "$T/agent.log" && break; sleep 0.1; done
grep -q "spool full for audit records" "$T/agent.log" && pass "spool filled up to the billing reserve" || fail "spool did not fill"
ordinary corral-it-user; O3=$OID
wait $FPID; F3=$(head -n1 "$T/out/f4.id")
coll_start
drained || fail "spool did not drain (3)"
for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM records WHERE type='audit.gap'")" -ge 1 ] && break; sleep 0.1; done
r=$(rows "$O3")
echo "$r" | grep -q "task.end:1 task.start:1" && pass "billing records of the task next to a full spool: $r" || fail "ordinary task 3: '$r'"
[ "$(rows "$F3" | grep -c 'task.end:1.*task.start:1')" = 1 ] && pass "flood 3's task.start and task.end are there" || fail "flood 3 rows: $(rows "$F3")"
gap=$(q "SELECT sum(json_extract(body,'\$.event.shed')) FROM records WHERE type='audit.gap'")
[ "${gap:-0}" -gt 0 ] && pass "audit.gap declares $gap shed records" || fail "no audit.gap"
# The agent declares what it shed at its next budget tick after the spool has room (every
# summary_interval), which can come after the drain above: wait for that declaration (up to 20 s).
for _ in $(seq 200); do
	d3=$(q "SELECT count(*) FROM records WHERE task_id='$O3' AND type='audit.exec'")
	g3=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.tasks.\"$O3\"')),0) FROM records WHERE type='audit.gap'")
	[ $((d3 + g3)) -ge 3 ] && break
	sleep 0.1
done
[ $((d3 + g3)) = 3 ] && pass "its 3 exec records: $d3 delivered, $g3 declared shed in audit.gap" || fail "ordinary task 3 execs: $d3 delivered + $g3 declared != 3"

# ---- 4. collector up, the same audit-heavy flood: it outruns the upload, the spool fills to
# the reserve while records are being delivered, and the task next to it is still billed
gaps0=$(grep -c "spool full for audit records" "$T/agent.log")
N=150000 flood root "$T/out/f5" --audit-rate 1000000 --audit-bytes 64M
ordinary corral-it-user; O4=$OID
wait $FPID; F4=$(head -n1 "$T/out/f5.id")
[ "$(grep -c "spool full for audit records" "$T/agent.log")" -gt "$gaps0" ] && pass "collector up: the flood filled the spool up to the reserve" ||
	fail "collector up: the spool did not fill"
drained || fail "spool did not drain (4)"
for _ in $(seq 100); do [ "$(st audit_gaps)" -ge 2 ] && break; sleep 0.1; done
drained || fail "spool did not drain (4b)"
r=$(rows "$O4")
echo "$r" | grep -q "task.end:1 task.start:1" && pass "collector up: billing records of the task next to the flood: $r" || fail "ordinary task 4: '$r'"
[ "$(rows "$F4" | grep -c 'task.end:1.*task.start:1')" = 1 ] && pass "flood 4's task.start and task.end are there" || fail "flood 4 rows: $(rows "$F4")"
gap=$(q "SELECT sum(json_extract(body,'\$.event.shed')) FROM records WHERE type='audit.gap'")
miss=$(q "SELECT count(*) FROM records WHERE type IN ('task.start','task.end')")
[ "$miss" = 16 ] && pass "all 16 billing records of the 8 tasks reached the collector" || fail "billing records: $miss of 16"
[ "$(st records_spool_refused)" = 0 ] && pass "the spool refused no billing record" || fail "refused: $(st records_spool_refused)"
out=$("$O/corral-collector" audit verify --db "sqlite:$DB" --node it-node); rc=$?
[ "$rc" = 0 ] && echo "$out" | grep -q "$gap records shed by policy at" && pass "audit verify: $(echo "$out" | tr '\n' ' ')" ||
	fail "verify: rc $rc $out"
echo "$out" | grep -q BROKEN && fail "verify says BROKEN"

# ---- 5. agent restart in the middle of a flood
before=$(st audit_summarized)
F6=$(as corral-it-flood run --workdir / --stdout "$T/out/f6" --audit-rate 20 --audit-bytes 64M -- "$FLOOD" 400000 9)
FP=$(ctl show "$F6" --json | jget pid)
for _ in $(seq 300); do [ "$(st audit_summarized)" -gt $((before + 5000)) ] && break; sleep 0.05; done
kill -STOP "$FP"
AGENT_LOG_LINES=$(wc -l <"$T/agent.log")
stop_agent
T_RESTART=$(date +%s%N)
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
kill -CONT "$FP"
ctl wait "$F6" >/dev/null 2>&1
C6=$(cat "$T/out/f6")
tail -n +"$AGENT_LOG_LINES" "$T/agent.log" | grep -q "task $F6: audit tracking resumed.*budget carried over" &&
	pass "flood 5: audit tracking resumed after the restart, its budget carried over" ||
	fail "flood 5: not re-tracked: $(tail -n +"$AGENT_LOG_LINES" "$T/agent.log" | grep "$F6" | head -3)"
drained || fail "spool did not drain (5)"
for _ in $(seq 100); do [ -n "$(q "SELECT 1 FROM records WHERE task_id='$F6' AND type='task.end'")" ] && break; sleep 0.1; done
rec=$(q "SELECT count(*) FROM records WHERE task_id='$F6' AND type='audit.connect'")
after=$(q "SELECT count(*) FROM records WHERE task_id='$F6' AND type='audit.connect' AND time_ns >= $T_RESTART")
sum=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.by_type.\"audit.connect\"')),0) FROM records WHERE task_id='$F6' AND type='audit.summary'")
sum_after=$(q "SELECT coalesce(sum(json_extract(body,'\$.event.by_type.\"audit.connect\"')),0) FROM records WHERE task_id='$F6' AND type='audit.summary' AND time_ns >= $T_RESTART")
lost=$(q "SELECT count(*) FROM records WHERE task_id='$F6' AND type='audit.lost'")
es=$(q "SELECT json_extract(body,'\$.audit.summarized') || ' ' || json_extract(body,'\$.audit.recorded') FROM records WHERE task_id='$F6' AND type='task.end'")
[ "$C6" -ge 400000 ] && [ $((rec + sum)) = "$C6" ] && [ "$lost" = 0 ] &&
	pass "flood 5 across the restart: $rec recorded + $sum summarized = $C6 made, none lost" ||
	fail "flood 5: $rec recorded + $sum summarized vs '$C6' made, $lost audit.lost"
all=$(q "SELECT count(*) FROM records WHERE task_id='$F6' AND type IN ('audit.connect','audit.exec')")
[ "$es" = "$sum $all" ] && pass "flood 5's task.end counts both agents' events: summarized $sum, recorded $all (its exec too)" ||
	fail "flood 5 task.end audit '$es' vs summarized $sum recorded $all"
[ "$after" -lt 2000 ] && [ "$sum_after" -gt 2000 ] &&
	pass "flood 5: $after records one by one after the restart (burst 2000, no second one), $sum_after events summarized after it" ||
	fail "flood 5: $after records after the restart, $sum_after summarized after it"
finish
