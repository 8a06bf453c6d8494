#!/bin/bash
# Accounting pipeline under faults, agent + collector (SQLite) end to end:
#  1. collector down while 1,000 tasks finish, then up: every end record arrives once;
#  2. kill -9 of corrald in the middle of uploading: after restart no duplicates, no gaps;
#  3. spool full: tasks still run, the loss is counted and visible in status and /metrics;
#  4. the agent restarted with an empty state directory on the same boot: every record arrives
#     (record ids carry the state directory's instance id), none is answered duplicate;
#  5. a record id the collector holds with another body: answered conflict, kept with both
#     bodies, counted, logged and set aside by the agent, and the stream goes on;
#  6. a flipped byte in a spool segment while the agent is down: that frame logged once,
#     counted (the count survives restarts), kept in spool/damaged/, every other record
#     delivered;
#  7. a full state filesystem (a tmpfs of fixed size, filled): the audit chain head is saved at
#     SIGTERM, the agent starts degraded (tasks re-adopted, spool uploaded and trimmed, no new
#     task), says so in status and /metrics, and recovers by itself when space returns;
#  8. a state filesystem full before the agent's first start on an older state directory (no
#     reserve file, no spool state file: nothing was ever acked): the acks find no room and no
#     reserve, the acked segments make it; every record stored, the spool emptied.
. "$(dirname "$0")/lib.sh"
need_root
N=${PIPELINE_N:-1000}
read -r PORT MPORT <<<"$(free_ports 2)"
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
node_token "$TOKEN" "reader it it-reader-token-0123456789"
COLL=
start_collector() {
	collector_up "$T/collector.log"
}
stop_collector() { [ -n "$COLL" ] && kill "$COLL" 2>/dev/null && wait "$COLL" 2>/dev/null; COLL=; }
FS=
trap 'stop_collector; stop_agent; [ -n "$FS" ] && umount -l "$FS"; cleanup' EXIT
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
# (entries as they are: compressed, 1,500 tasks' records would fit in 1M)
cat >"$T/small.conf" <<CONF
[spool]
max_bytes = 1M
compress = false
CONF
rm -rf "$STATE"
start_agent --no-bpf --config "$T/small.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
"$H" 1500 throughput "$SOCK" 8 && pass "1500 tasks ran with the spool full" || fail "tasks failed while the spool was full"
refused=$(ctl status --json | jget records_spool_refused)
metric=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '/^corral_spool_refused_total /{print $2}')
[ "${refused:-0}" -gt 0 ] && [ "$metric" = "$refused" ] && pass "spool full: $refused records refused, counted in status and corral_spool_refused_total" \
	|| fail "spool full: refused=$refused metric=$metric"
grep -q 'spool refused' "$T/agent.log" && [ "$(grep -c 'spool refused' "$T/agent.log")" = 1 ] \
	&& pass "the loss is logged once" || fail "spool-full log lines: $(grep -c 'spool refused' "$T/agent.log")"
stop_agent

# --- 4. empty state directory, same boot --------------------------------------------------------
# Truth: the records each agent spooled and had acknowledged (its own counter, read once its
# spool is empty) against plain SQL over the stored rows; and no "duplicate" answer at all.
rm -rf "$DB" "$DB"-* "$STATE"
start_collector
K=60
metric() { curl -fs "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
drained() { # acked records of the agent once its spool is empty
	for _ in $(seq 300); do [ "$(metric $MPORT corral_spool_pending_records)" = 0 ] && break; sleep 0.2; done
	metric $MPORT corral_upload_records_acked_total
}
run_fresh() { # a fresh state directory, K tasks of which one emits audit.limit, all uploaded
	start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" \
		--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
	"$H" "$((K - 1))" throughput "$SOCK" 8 >/dev/null || fail "launching $K tasks"
	ctl run --wait --time 1 -- sleep 30 >/dev/null 2>&1
}
run_fresh
inst1=$(jget instance <"$STATE/counters.json")
a1=$(drained)
stop_agent
rm -rf "$STATE"
run_fresh
inst2=$(jget instance <"$STATE/counters.json")
a2=$(drained)
stored=$(q "SELECT count(*) FROM records")
ends=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
dup=$(metric $PORT 'corral_collector_records_total{status="duplicate"}')
[ "$stored" = $((a1 + a2)) ] && [ "$ends" = $((2 * K)) ] && [ "$dup" = 0 ] && [ "$inst1" != "$inst2" ] \
	&& pass "state directory wiped on the same boot: all $stored records of both lives stored ($a1 + $a2 acked), $ends tasks, 0 answered duplicate (instances $inst1, $inst2)" \
	|| fail "after wiping the state directory: $stored stored, acked $a1 + $a2; $ends tasks of $((2 * K)); $dup duplicates; instances $inst1 $inst2"
stop_agent

# --- 5. a conflict: the same record id with another body ------------------------------------------
rm -rf "$STATE"
# The first sequential record id of the next agent (its instance is made at start), taken
# beforehand by another body.
boot=$(cut -c1-12 /proc/sys/kernel/random/boot_id)
mkdir -p "$STATE"
printf '{"instance":"0123456789ab","task_seq":0,"task_seq_reserved":0,"record_seq_reserved":0}' >"$STATE/counters.json"
rid="it-node/$boot/0123456789ab-0"
printf '{"schema":"corral.record/v1","record_id":"%s","type":"task.sample","time":"2026-12-02T15:14:05Z","node":"it-node","task":{"id":"squatter"},"usage":{"cpu_user_ns":1}}\n' "$rid" >"$T/squat.ndjson"
curl -fs -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/x-ndjson' \
	--data-binary @"$T/squat.ndjson" "http://127.0.0.1:$PORT/v1/records" | grep -q '"accepted":1' \
	|| fail "pre-storing $rid"
before=$(q "SELECT count(*) FROM records")
run_fresh
a3=$(drained)
stored=$(q "SELECT count(*) FROM records")
kept=$(q "SELECT count(*) FROM conflicts WHERE record_id='$rid' AND json_extract(stored_body, '\$.task.id')='squatter' AND coalesce(json_extract(received_body, '\$.task.id'), '') != 'squatter'")
cm=$(metric $PORT 'corral_collector_records_total{status="conflict"}')
am=$(metric $MPORT corral_upload_conflicts_total)
dl=$(grep -c '"status":"conflict"' "$STATE/dead-letter.ndjson" 2>/dev/null)
[ "$((stored - before))" = $((a3 - 1)) ] \
	&& pass "conflict: the other $((a3 - 1)) records of the run stored, the stream went on" \
	|| fail "conflict: $((stored - before)) stored of $a3 acked (want all but one)"
[ "$kept" = 1 ] && [ "$cm" = 1 ] && pass "collector kept both bodies in conflicts and counted it (records_total{status=\"conflict\"} $cm)" \
	|| fail "conflicts rows $kept, metric $cm"
[ "$dl" = 1 ] && [ "$am" = 1 ] && grep -q "record $rid .*CONFLICTS" "$T/agent.log" \
	&& pass "agent set it aside (dead-letter, corral_upload_conflicts_total $am) and logged it" \
	|| fail "agent: dead-letter lines $dl, metric $am, log: $(grep -c CONFLICTS "$T/agent.log")"
stop_agent

# --- 6. a flipped byte in the spool -------------------------------------------------------------
stop_collector
rm -rf "$STATE"
run_fresh
stop_agent
# Truth from the segment file itself (tests/integration/spool_frames.py): its frames but
# node.sample ones (each start of the agent below adds one), the record_id of the 10th, whose
# stored payload gets one byte flipped in its middle, and the digest of that frame as flipped
# (the copy kept in spool/damaged/ must be those bytes).
read -r frames lost frame_sha < <(python3 - "$STATE"/spool/seg-*.log <<'PY'
import hashlib, json, sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames, record
path = sys.argv[1]
fl = [fr for fr in frames(path) if json.loads(record(path, fr[0]))["type"] != "node.sample"]
pos, _, _, n = fl[9]
lost = json.loads(record(path, pos))["record_id"]
b = bytearray(open(path, "rb").read())
b[pos + 24 + n // 2] ^= 0x20
open(path, "r+b").write(b)
print(len(fl), lost, hashlib.sha256(b[pos:pos + 24 + n]).hexdigest())
PY
)
# started twice before the collector is back: the damage is found at each open, reported once
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
cf1=$(metric $MPORT corral_spool_corrupt_frames_total)
stop_agent
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
before=$(q "SELECT count(*) FROM records WHERE type != 'node.sample'") # (the collector is down: nothing arrives meanwhile)
start_collector
drained >/dev/null
stored=$(($(q "SELECT count(*) FROM records WHERE type != 'node.sample'") - before))
gone=$(q "SELECT count(*) FROM records WHERE record_id = '$lost'")
cf=$(metric $MPORT corral_spool_corrupt_frames_total)
logged=$(grep -c 'damaged bytes at offset' "$T/agent.log")
kept=$(sha256sum "$STATE"/spool/damaged/*.bin 2>/dev/null | grep -c "^$frame_sha ")
[ "$stored" = $((frames - 1)) ] && [ "$gone" = 0 ] \
	&& pass "flipped byte in the spool: $stored of $frames records delivered, only the damaged one ($lost) missing" \
	|| fail "flipped byte: $stored of $frames delivered (want $((frames - 1))), damaged one stored: $gone"
[ "$logged" = 1 ] && [ "$kept" = 1 ] && [ "$cf1" = 1 ] && [ "$cf" = 1 ] \
	&& pass "the damaged frame: logged once over two starts, counted once (corral_spool_corrupt_frames_total $cf1, then $cf after a restart), kept in spool/damaged/" \
	|| fail "damaged frame: logged $logged, kept $kept, metric $cf1 then $cf (want 1 then 1: counted once, kept across restarts)"
stop_agent

# --- 7. full state filesystem -------------------------------------------------------------------
stop_collector
FS=$T/fs
mkdir -p "$FS"
mount -t tmpfs -o size=6m tmpfs "$FS" || skip "cannot mount a tmpfs"
STATE=$FS/state
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"
l1=$(ctl run -- sleep 300); l2=$(ctl run -- sleep 300)
"$H" 20 throughput "$SOCK" 8 >/dev/null || fail "launching 20 tasks"
ctl run --wait --time 1 -- sleep 30 >/dev/null 2>&1 # an audit.limit record: the chain has a head
dd if=/dev/zero of="$FS/fill" bs=4k >/dev/null 2>&1
stop_agent
# Truth from the spool itself: its frames, and the hash of the last audit record in it.
read -r frames head < <(python3 - "$STATE"/spool/seg-*.log <<'PY'
import json, sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames, record
n, head = 0, "-"
for path in sys.argv[1:]:
    for fr in frames(path):
        r = json.loads(record(path, fr[0]))
        n += r["type"] != "node.sample" # (the next start adds one)
        if r["type"].startswith("audit."):
            head = r["hash"]
print(n, head)
PY
)
[ "$(cat "$STATE/audit-chain" 2>/dev/null)" = "$head" ] && ! grep -q 'audit chain head' "$T/agent.log" \
	&& pass "state filesystem full at SIGTERM: the audit chain head saved (the last audit record's hash in the spool)" \
	|| fail "audit chain head on a full disk: file '$(cat "$STATE/audit-chain" 2>/dev/null)', spool's $head; log: $(grep 'audit chain head' "$T/agent.log")"
# The reserve given up at SIGTERM left about its size free: filled to 256 KiB, so that a page
# freed at the next start (a rewritten state file) cannot make room for the reserve (1 MiB)
# and end the degraded mode before the checks below.
avail=$(df -k --output=avail "$FS" | tail -n 1)
[ "$avail" -gt 256 ] && dd if=/dev/zero of="$FS/fill2" bs=4k count=$(((avail - 256) / 4)) >/dev/null 2>&1
start_agent --no-bpf --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
ctl status --json >"$T/st.json"
live=$(jget tasks_live <"$T/st.json"); deg=$(jget degraded <"$T/st.json")
ctl run -- /bin/true >/dev/null 2>"$T/run.err" && fail "a task started on a full state filesystem"
[ "$deg" = True ] && [ "$live" = 2 ] && [ "$(metric $MPORT corral_agent_degraded)" = 1 ] \
	&& grep -q 'agent degraded: state filesystem full' "$T/run.err" \
	&& pass "started on a full state filesystem: degraded in status ($(jget degraded_reason <"$T/st.json")) and /metrics, 2 tasks re-adopted, run refused: $(cat "$T/run.err")" \
	|| fail "full disk start: degraded $deg, live $live, metric $(metric $MPORT corral_agent_degraded), run: $(cat "$T/run.err")"
rm -f "$DB" "$DB"-*
start_collector
drained >/dev/null
stored=$(q "SELECT count(*) FROM records WHERE type != 'node.sample'")
segs=$(ls "$STATE"/spool/seg-*.log 2>/dev/null | wc -l)
conf=$(q "SELECT count(*) FROM conflicts")
[ "$stored" = "$frames" ] && [ "$segs" = 0 ] && [ "$conf" = 0 ] \
	&& pass "the spool drained on the full disk: all $frames records stored, the spool trimmed (the re-adopted tasks' task.start, emitted again, no conflict)" \
	|| fail "full disk drain: $stored of $frames stored, $segs segments left, $conf conflicts"
rm -f "$FS/fill" "$FS/fill2"
for _ in $(seq 50); do [ "$(ctl status --json | jget degraded)" = False ] && break; sleep 0.2; done
ctl run --wait -- /bin/true >/dev/null 2>&1 && ctl kill "$l1" >/dev/null && ctl kill "$l2" >/dev/null \
	|| fail "after space returned: run or kill failed"
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end' AND task_id IN ('$l1','$l2')" 2 30)
[ "$(ctl status --json | jget degraded)" = False ] && [ "$n" = 2 ] && grep -q 'has space again' "$T/agent.log" \
	&& pass "space back: degraded mode left by itself, tasks run again, the re-adopted tasks' ends stored" \
	|| fail "recovery: degraded $(ctl status --json | jget degraded), ends stored $n"

# --- 8. full before the first start, on an older state directory --------------------------------
stop_agent
stop_collector
umount -l "$FS"
mount -t tmpfs -o size=6m tmpfs "$FS" || skip "cannot mount a tmpfs"
STATE=$FS/state
# an older agent: entries as they are (the byte layout this case was made for; both agents,
# so the new one's node.sample does not fit in the slack of the last page either)
printf '[collector]\nbatch_records = 40\nbatch_delay = 200ms\n[spool]\ncompress = false\n' >"$T/old.conf"
start_agent --no-bpf --config "$T/old.conf"
"$H" 30 throughput "$SOCK" 8 >/dev/null || fail "launching 30 tasks"
stop_agent
# as an older agent left it: no reserve, and no spool state file (it never acked)
rm -f "$STATE/reserve" "$STATE/spool/acked"
dd if=/dev/zero of="$FS/fill" bs=4k >/dev/null 2>&1
frames=$(python3 - "$STATE"/spool/seg-*.log <<'PY'
import sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames
print(sum(len(list(frames(p))) for p in sys.argv[1:]))
PY
)
rm -f "$DB" "$DB"-*
start_collector
start_agent --no-bpf --config "$T/old.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
drained >/dev/null
stored=$(q "SELECT count(*) FROM records")
segs=$(ls "$STATE"/spool/seg-*.log 2>/dev/null | wc -l)
nd=$(metric $MPORT corral_spool_acks_not_durable_total)
[ "$stored" = "$frames" ] && [ "$frames" -ge 60 ] && [ "$segs" = 0 ] && [ "${nd:-0}" -ge 1 ] \
	&& [ "$(tr -d '\000' <"$STATE/spool/acked" 2>/dev/null | grep -c '^CSPS gen=.* acked=0*'"$frames"' ')" = 1 ] \
	&& pass "full before the first start, no reserve, never acked: all $stored spooled records stored, the spool emptied, the ack made durable in the room the acked segments left ($nd ack(s) first without it)" \
	|| fail "full before the first start: $stored stored of $frames, $segs segments left, acks not durable $nd, state file '$(tr -d '\000' <"$STATE/spool/acked" 2>/dev/null)'"
finish
