#!/bin/bash
# audit.syscall through corrald and the collector: calls the seccomp profile denied become
# exactly one record each (name, number, action, errno, pid, args), the call still fails with
# the profile's errno inside the task; N denials give N records, beyond the per-task cap an
# exact count (audit.lost); under strict the call is recorded with action kill and the task
# ends seccomp_killed (159); agent restarts (kill -9 and SIGTERM) between denials neither lose
# nor repeat a record; the records are in the node's intact hash chain; with [audit] off there
# is no record and the profile answers as before.
. "$(dirname "$0")/lib.sh"
need_root
H=$O/tests/integration/helper_denied
[ -x "$H" ] || { echo "FAIL: $H not built (make O=$O helpers)"; exit 1; }
grep -q '^Seccomp_filters:' /proc/self/status || skip "kernel without CONFIG_SECCOMP_FILTER"
PORT=$(free_port)
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
node_token "$TOKEN"
trap 'kill $COLL 2>/dev/null; cleanup' EXIT
collector_up "$T/coll.log"
printf '[collector]\nbatch_delay = 100ms\n' >"$T/a.conf"
AGENT_ARGS=(--config "$T/a.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token")
start_agent "${AGENT_ARGS[@]}"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

# wait_rows SQL WANT: until the count query gives WANT (records arrive in batches)
wait_rows() {
	for _ in $(seq 150); do [ "$(q "$1")" = "$2" ] && return 0; sleep 0.2; done
	return 1
}
# syscalls ID: one line per audit.syscall record of task ID, in seq order
syscalls() {
	q "SELECT json_extract(body,'\$.event.seq')||' '||json_extract(body,'\$.event.name')||' '||json_extract(body,'\$.event.number')||' '||json_extract(body,'\$.event.action')||' '||ifnull(json_extract(body,'\$.event.errno'),'-') FROM records WHERE type='audit.syscall' AND task_id='$1' ORDER BY json_extract(body,'\$.event.seq')"
}
nsys() { q "SELECT count(*) FROM records WHERE type='audit.syscall' AND task_id='$1'"; }

# --- one denied call among ordinary work --------------------------------------------------
PY='import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())'
run_wait --stdout "$T/py.out" -- sh -c "ls / >/dev/null; python3 -c '$PY'"
ID1=$ID
[ "$RC" = 0 ] && [ "$(cat "$T/py.out")" = "-1 1" ] && pass "ptrace failed with EPERM inside the task" \
	|| fail "ptrace task: rc $RC out '$(cat "$T/py.out")' $REASON"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID1'" 1 || fail "task.end of $ID1 not stored"
got=$(syscalls "$ID1")
[ "$got" = "1 ptrace 101 errno 1" ] && pass "exactly one audit.syscall: $got" || fail "records of task 1: '$got'"
ev=$(q "SELECT json_extract(body,'\$.event') FROM records WHERE type='audit.syscall' AND task_id='$ID1'")
python3 - "$ev" <<'PY' && pass "event: pid, arch and args present" || fail "event fields: $ev"
import json, sys
e = json.loads(sys.argv[1])
assert e["pid"] > 1 and e["arch"] in ("x86_64", "aarch64"), e
assert e["args"][:4] == ["0x0"] * 4 and len(e["args"]) == 6, e
PY
if grep -q 'audit trail loaded' "$T/agent.log"; then
	pypid=$(q "SELECT json_extract(body,'\$.event.pid') FROM records WHERE type='audit.exec' AND task_id='$ID1' AND json_extract(body,'\$.event.path') LIKE '%python3%'")
	[ -n "$pypid" ] && [ "$pypid" = "$(echo "$ev" | jget pid)" ] && pass "pid is the python3 process of audit.exec ($pypid)" \
		|| fail "pid '$(echo "$ev" | jget pid)' vs exec '$pypid'"
fi
n=$(q "SELECT count(*) FROM records WHERE type='audit.syscall' AND task_id='$ID1' AND json_extract(body,'\$.task.id')='$ID1' AND json_extract(body,'\$.prev_hash') IS NOT NULL AND length(json_extract(body,'\$.hash'))=64")
[ "$n" = 1 ] && pass "record carries task identity and prev_hash/hash" || fail "identity/hash: $n"

# --- N denied calls: N records ------------------------------------------------------------
run_wait --stdout "$T/n.out" -- "$H" 50
ID2=$ID
[ "$RC" = 0 ] && [ "$(cat "$T/n.out")" = 50 ] && pass "50 denied calls, all EPERM" || fail "50 calls: rc $RC out $(cat "$T/n.out")"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID2'" 1 || fail "task.end of $ID2 not stored"
want=$(for i in $(seq 50); do echo "$i ptrace 101 errno 1"; done)
[ "$(syscalls "$ID2")" = "$want" ] && pass "50 records, seq 1..50" || fail "50 calls: $(nsys "$ID2") records"

# --- beyond the per-task cap: an exact count ------------------------------------------------
run_wait --stdout "$T/cap.out" -- "$H" 1700
ID3=$ID
[ "$RC" = 0 ] && [ "$(cat "$T/cap.out")" = 1700 ] && pass "1700 denied calls, all EPERM" || fail "1700 calls: rc $RC"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID3'" 1 || fail "task.end of $ID3 not stored"
# the batches may bring task.end before the last audit records: wait for those as well
wait_rows "SELECT count(*) FROM records WHERE type='audit.lost' AND task_id='$ID3'" 1
wait_rows "SELECT count(*) FROM records WHERE type='audit.syscall' AND task_id='$ID3'" 1000
n=$(q "SELECT count(DISTINCT json_extract(body,'\$.event.seq')) FROM records WHERE type='audit.syscall' AND task_id='$ID3'")
lost=$(q "SELECT json_extract(body,'\$.event.kind')||' '||json_extract(body,'\$.event.lost')||' '||json_extract(body,'\$.event.total') FROM records WHERE type='audit.lost' AND task_id='$ID3'")
[ "$(nsys "$ID3")" = 1000 ] && [ "$n" = 1000 ] && [ "$lost" = "syscall 700 1700" ] \
	&& pass "cap: 1000 records + audit.lost ($lost)" || fail "cap: $(nsys "$ID3") records ($n distinct), lost '$lost'"

# --- strict: recorded with action kill, the task ends seccomp_killed ----------------------------
MOUNT_PY='import ctypes
ctypes.CDLL(None, use_errno=True).mount(b"none", b"/nonexistent-corral", b"tmpfs", 0, None)
print("survived")'
run_wait --seccomp strict --stdout "$T/strict.out" -- python3 -c "$MOUNT_PY"
ID4=$ID
[ "$RC" = 159 ] && [ "$(status_of "$ID4")" = seccomp_killed ] && [ ! -s "$T/strict.out" ] \
	&& pass "strict: mount -> seccomp_killed (159)" || fail "strict: rc $RC $(status_of "$ID4") $(cat "$T/strict.out")"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID4'" 1 || fail "task.end of $ID4 not stored"
got=$(syscalls "$ID4")
[ "$got" = "1 mount 165 kill -" ] && pass "strict: audit.syscall $got" || fail "strict records: '$got'"
sig=$(q "SELECT json_extract(body,'\$.exit.signal') FROM records WHERE type='task.end' AND task_id='$ID4'")
[ "$sig" = 31 ] && pass "strict: task.end signal 31 (SIGSYS)" || fail "strict signal: $sig"

# --- a profile that denies execve: the denial is answered and recorded, nothing hangs ----------
# (the child cannot be cloned sharing the shim's memory then: nobody could answer its execve)
cat >"$T/noexec.json" <<'JSON'
{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["execve"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}
JSON
chmod 644 "$T/noexec.json"
t0=$(date +%s)
run_wait --seccomp "$T/noexec.json" -- /bin/true
IDX=$ID
[ "$RC" = 126 ] && [ $(($(date +%s) - t0)) -lt 10 ] && echo "$REASON" | grep -q 'exec /bin/true: Permission denied' \
	&& pass "execve denied by the profile: launch_failed, 126, '$REASON'" || fail "noexec: rc $RC '$REASON'"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$IDX'" 1 || fail "task.end of $IDX not stored"
got=$(syscalls "$IDX")
[ "$got" = "1 execve 59 errno 13" ] && pass "the denied execve is recorded: $got" || fail "noexec records: '$got'"

# --- agent restarts between denials: nothing lost, nothing twice ---------------------------------
mkdir -m 777 "$T/sync"
ID5=$(ctl run --stdout "$T/r.out" -- "$H" 4 "$T/sync" 4)
w() { for _ in $(seq 300); do [ -e "$T/sync/$1" ] && return 0; sleep 0.05; done; fail "task never reached $1"; }
w done.1
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
touch "$T/sync/go.1"; w done.2   # denied and answered while no agent runs
start_agent "${AGENT_ARGS[@]}"
sleep 0.6                        # the restarted agent reads round 2 (or not yet: either is fine)
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
start_agent "${AGENT_ARGS[@]}"
touch "$T/sync/go.2"; w done.3
stop_agent                       # SIGTERM this time
start_agent "${AGENT_ARGS[@]}"
touch "$T/sync/go.3"
ctl wait "$ID5" >/dev/null 2>&1; rc=$?
[ "$rc" = 0 ] && [ "$(cat "$T/r.out")" = 16 ] && pass "restarts: the task got EPERM 16 times" || fail "restart task: rc $rc out $(cat "$T/r.out")"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID5'" 1 || fail "task.end of $ID5 not stored"
want=$(for i in $(seq 16); do echo "$i ptrace 101 errno 1"; done)
got=$(syscalls "$ID5")
[ "$got" = "$want" ] && pass "restarts: 16 records, seq 1..16, none lost or repeated" \
	|| fail "restart records: $(nsys "$ID5") ($(echo "$got" | awk '{print $1}' | tr '\n' ' '))"
ls "$STATE"/tasks/*.syscalls >/dev/null 2>&1 && fail "syscalls files left: $(ls "$STATE"/tasks)" || pass "syscalls files removed with the tasks"

# --- crafted names beside a running task's file: the forged id of its key, keys that overflow
# or are not hex, an id longer than any task's, a bare suffix; each written to while the task
# waits. None is read as the task's, the agent stays up, the task's records stay exact ----------
mkdir -m 777 "$T/sync9"
ID9=$(ctl run --stdout "$T/c.out" -- "$H" 3 "$T/sync9" 2)
w9() { for _ in $(seq 300); do [ -e "$T/sync9/$1" ] && return 0; sleep 0.05; done; fail "task never reached $1"; }
w9 done.1
key=${ID9##*-}
long=$(printf 't-%0200d-%s' 0 "$key")
for n in "t-1-$key" "${ID9}0" "t-1-1${key}ffffffffffffffffffff" "t-1-zz" "-" "$long" ""; do
	printf 'garbage %s\n\0\377\n' "$n" >>"$STATE/tasks/$n.syscalls"
done
sleep 0.5
kill -0 "$AGENT_PID" 2>/dev/null && pass "agent up after crafted names in its tasks directory" || fail "agent died on crafted names"
touch "$T/sync9/go.1"
ctl wait "$ID9" >/dev/null 2>&1; rc=$?
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID9'" 1 || fail "task.end of $ID9 not stored"
want=$(for i in $(seq 6); do echo "$i ptrace 101 errno 1"; done)
got=$(syscalls "$ID9")
[ "$rc" = 0 ] && [ "$got" = "$want" ] && pass "crafted names: the task's 6 records exact" \
	|| fail "crafted names: rc $rc, $(nsys "$ID9") records ($(echo "$got" | awk '{print $1}' | tr '\n' ' '))"
n=$(q "SELECT count(*) FROM records WHERE type LIKE 'audit.%' AND (task_id IS NULL OR task_id NOT LIKE 't-%' OR task_id LIKE 't-1-%' OR length(task_id) > 64)")
[ "$n" = 0 ] && pass "no audit record for a crafted name" || fail "$n audit records for crafted names"
rm -f "$STATE"/tasks/*.syscalls

# --- denied calls made while no agent ran are read when the restarted agent re-adopts the task,
# not at the task's next denial or sample (none comes here: sample_interval 1h, the task waits) --
printf '[agent]\nsample_interval = 1h\n[collector]\nbatch_delay = 100ms\n' >"$T/slow.conf"
mkdir -m 777 "$T/sync7"
ID7=$(ctl run --stdout "$T/r7.out" -- "$H" 3 "$T/sync7" 2)
w7() { for _ in $(seq 300); do [ -e "$T/sync7/$1" ] && return 0; sleep 0.05; done; fail "task never reached $1"; }
w7 done.1
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
touch "$T/sync7/go.1"; w7 done.2   # round 2 denied while no agent runs
start_agent --config "$T/slow.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
wait_rows "SELECT count(*) FROM records WHERE type='audit.syscall' AND task_id='$ID7'" 6 &&
	pass "re-adoption reads the denied calls made while no agent ran: $(nsys "$ID7") records" ||
	fail "re-adoption: $(nsys "$ID7") of 6 records of $ID7 stored (the calls made while no agent ran not read)"
touch "$T/sync7/go.2"
ctl wait "$ID7" >/dev/null 2>&1

# --- a position taken from the spool at a restart is saved before the spool lets it go ----------
# A kill -9 between a record's spool append and the state file's write leaves the file one line
# behind (made here by rewriting it while the records wait unsent, no collector answering); the
# restarted agent takes the position from the unacked spool and must save it, or, once those
# records are acked, the next start turns their lines into records again.
stop_agent
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$(free_port)" --token-file "$T/token"
mkdir -m 777 "$T/sync6"
ID6=$(ctl run --stdout "$T/r6.out" -- "$H" 2 "$T/sync6" 2)
w6() { for _ in $(seq 300); do [ -e "$T/sync6/$1" ] && return 0; sleep 0.05; done; fail "task never reached $1"; }
w6 done.1
S6=$STATE/tasks/$ID6.json
for _ in $(seq 100); do grep -q '"syscalls_seq":2' "$S6" 2>/dev/null && break; sleep 0.05; done
stop_agent
grep -q '"syscalls_seq":2' "$S6" && sed -i 's/"syscalls_seq":2/"syscalls_seq":1/' "$S6" ||
	fail "state file $S6 without syscalls_seq 2: $(head -c 300 "$S6" 2>&1)"
start_agent "${AGENT_ARGS[@]}"
wait_rows "SELECT count(*) FROM records WHERE type='audit.syscall' AND task_id='$ID6'" 2 ||
	fail "records 1-2 of $ID6 not stored: $(nsys "$ID6")"
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
start_agent "${AGENT_ARGS[@]}"
touch "$T/sync6/go.1"
ctl wait "$ID6" >/dev/null 2>&1; rc=$?
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID6'" 1 || fail "task.end of $ID6 not stored"
want=$(for i in $(seq 4); do echo "$i ptrace 101 errno 1"; done)
got=$(syscalls "$ID6")
[ "$rc" = 0 ] && [ "$got" = "$want" ] &&
	pass "a position taken from the spool at a restart survives the next kill -9: 4 records, seq 1..4, none repeated" ||
	fail "spool position: rc $rc, $(nsys "$ID6") records ($(echo "$got" | awk '{print $1}' | tr '\n' ' '))"

# --- the hash chain holds them -----------------------------------------------------------------
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
out=$("$O/corral-collector" audit verify --db "sqlite:$DB" --node it-node); rc=$?
[ "$rc" = 0 ] && pass "audit verify: $out" || fail "verify: rc $rc $out"

# --- [audit] syscalls_max: the cap is the operator's ----------------------------------------------
stop_agent
printf '[collector]\nbatch_delay = 100ms\n[audit]\nsyscalls_max = 20\n' >"$T/a.conf"
start_agent "${AGENT_ARGS[@]}"
run_wait --stdout "$T/cap20.out" -- "$H" 30
ID7=$ID
[ "$RC" = 0 ] && [ "$(cat "$T/cap20.out")" = 30 ] || fail "syscalls_max task: rc $RC"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID7'" 1 || fail "task.end of $ID7 not stored"
lost=$(q "SELECT json_extract(body,'\$.event.lost')||' '||json_extract(body,'\$.event.total')||' '||json_extract(body,'\$.event.cap') FROM records WHERE type='audit.lost' AND task_id='$ID7'")
[ "$(nsys "$ID7")" = 20 ] && [ "$lost" = "10 30 20" ] && pass "syscalls_max = 20: 20 records, audit.lost 10 of 30 (cap 20)" ||
	fail "syscalls_max: $(nsys "$ID7") records, lost '$lost'"
printf '[audit]\nsyscalls_max = 0\n' >"$T/bad.conf"
out=$("$O/corrald" --config "$T/bad.conf" --socket "$T/x.sock" 2>&1); rc=$?
[ "$rc" != 0 ] && echo "$out" | grep -q syscalls_max && pass "bad syscalls_max named: $(echo "$out" | head -n1)" ||
	fail "bad syscalls_max: rc $rc $out"

# --- audit off: the profile as before, no records -----------------------------------------------
stop_agent
printf '[collector]\nbatch_delay = 100ms\n[audit]\nenable = no\n' >"$T/a.conf"
start_agent "${AGENT_ARGS[@]}"
run_wait --stdout "$T/off.out" -- "$H" 3
ID6=$ID
[ "$RC" = 0 ] && [ "$(cat "$T/off.out")" = 3 ] && pass "audit off: EPERM as before" || fail "audit off: rc $RC"
wait_rows "SELECT count(*) FROM records WHERE type='task.end' AND task_id='$ID6'" 1 || fail "task.end of $ID6 not stored"
[ "$(nsys "$ID6")" = 0 ] && pass "audit off: no audit.syscall record" || fail "audit off: $(nsys "$ID6") records"
finish
