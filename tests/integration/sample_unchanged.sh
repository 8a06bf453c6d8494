#!/bin/bash
# Running tasks whose usage did not change since their last task.sample are listed in the
# node.sample (tasks_unchanged) instead of getting a task.sample, then covered by later
# node.samples' one tasks_alive statement (schema v2: the tasks an earlier node.sample, the
# anchor, listed, less those excepted), and the collector moves their running charge to the
# node sample's time. Agent (BPF meter, 1 s samples) -> collector
# (SQLite), three sleeping tasks and a busy one that is stopped (SIGSTOP) midway; checked
# against truth from outside the agent's figures:
#  (a) a sleeping task, once listed unchanged, gets no task.sample more while node.sample
#      records list or cover it, and statements cover it (no entry of its own); the busy task
#      has full samples while it runs;
#  (b) the collector's open rows (what reports charge a running task from) equal the model
#      computed here from the tasks' start times (task.start) and the times of the node.sample
#      records listing or covering them (from the raw records): wall = t - start, requested core-s = cpus x wall, memory
#      byte-seconds of the last full sample + rss x the time since; and the report of the
#      day by job charges each the model's core-hours;
#  (c) the stopped task's last full sample has the CPU time its cgroup shows from outside
#      (cpuacct.usage, constant once stopped).
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/cpuacct ] || skip "needs the v1 cpuacct hierarchy"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DB=$T/records.db
TOKEN=it-unchanged-token-0123456789abcdef
node_token "$TOKEN"
trap 'kill "$COLL" 2>/dev/null; wait "$COLL" 2>/dev/null; cleanup' EXIT
collector_up "$T/collector.log"
printf '[agent]\nsample_interval = 1s\n[collector]\nbatch_delay = 100ms\n' >"$T/agent.conf"
start_agent --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" --token-file "$T/token"

idle=()
for i in 1 2 3; do
	idle+=("$(ctl run --no-sandbox --job idle$i --cpus 0.5 --memory 64M -- sleep 600 | head -n1)")
done
busy=$(ctl run --no-sandbox --job busy --cpus 0.25 --memory 64M -- sh -c \
	'while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done' | head -n1)
[ -n "${idle[2]}" ] && [ -n "$busy" ] || fail "launching the tasks"

# listed: the node.sample records naming a task in tasks_unchanged; covered: those whose
# tasks_alive statement refers to (since) a node.sample that listed the task and does not
# except it
listed() {
	q "SELECT count(*) FROM records r, json_each(json_extract(r.body, '\$.tasks_unchanged')) e
	   WHERE r.type = 'node.sample' AND json_extract(e.value, '\$[0]') = '$1'"
}
covered() {
	q "SELECT count(*) FROM records r WHERE r.type = 'node.sample'
	   AND json_extract(r.body, '\$.tasks_alive.since') IN (SELECT json_extract(l.body, '\$.time')
	     FROM records l, json_each(json_extract(l.body, '\$.tasks_unchanged')) le
	     WHERE l.type = 'node.sample' AND json_extract(le.value, '\$[0]') = '$1')
	   AND NOT EXISTS (SELECT 1 FROM json_each(json_extract(r.body, '\$.tasks_alive.except')) x
	     WHERE x.value = '$1')"
}
wait_listed() { # wait_listed TASK N SECONDS
	local i
	for i in $(seq $(($3 * 5))); do
		[ $(($(listed "$1") + $(covered "$1"))) -ge "$2" ] && return 0
		sleep 0.2
	done
	return 1
}
samples() { q "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = '$1'"; }

for t in "${idle[@]}"; do
	wait_listed "$t" 3 60 || fail "sleeping task $t listed or covered in fewer than 3 node.sample records"
done
wait_covered() { # wait_covered TASK N SECONDS
	local i
	for i in $(seq $(($3 * 5))); do
		[ "$(covered "$1")" -ge "$2" ] && return 0
		sleep 0.2
	done
	return 1
}
for t in "${idle[@]}"; do
	wait_covered "$t" 2 60 || fail "sleeping task $t covered by fewer than 2 tasks_alive statements"
done
# (a) once found unchanged, no full sample more (before: its first, and another if its start
# was still moving at the first, as on a loaded host)
first_listed() {
	q "SELECT min(r.time_ns) FROM records r, json_each(json_extract(r.body, '\$.tasks_unchanged')) e
	   WHERE r.type = 'node.sample' AND json_extract(e.value, '\$[0]') = '$1'"
}
later() { q "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = '$1' AND time_ns > $2"; }
declare -A FIRST
for t in "${idle[@]}"; do
	FIRST[$t]=$(first_listed "$t")
	n=$(later "$t" "${FIRST[$t]}")
	[ "$n" = 0 ] && pass "sleeping task $t: $(samples "$t") task.sample before it was listed, none after; listed in $(listed "$t") node.sample records, covered by $(covered "$t")" ||
		fail "sleeping task $t: $n task.sample records after it was listed unchanged"
done
nb=$(samples "$busy")
[ "$nb" -ge 2 ] && pass "busy task: $nb task.sample records while it ran" ||
	fail "busy task: $nb task.sample records (want >= 2)"

# (c) stop the busy task: its CPU time stays what its cgroup shows from outside
# twice: a child forked after the first list is stopped by the second (or has exited)
for _ in 1 2; do
	for p in $(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$busy/cgroup.procs"); do kill -STOP "$p"; done
	sleep 0.3
done
cpu_busy=$(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$busy/cpuacct.usage")
wait_listed "$busy" 2 30 || fail "stopped task not listed unchanged"
[ "$(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$busy/cpuacct.usage")" = "$cpu_busy" ] ||
	fail "the stopped task's cgroup CPU moved"
for t in "${idle[@]}"; do
	[ "$(later "$t" "${FIRST[$t]}")" = 0 ] || fail "sleeping task $t got another task.sample"
done
# the agent stopped (its tasks go on): what it spooled is uploaded, nothing moves after
stop_agent
sleep 1
# the report of today (UTC) by job: the charged core-hours of each running task
printf "[prices]\ncurrency = EUR\ncpu_core_hour = 0.031\nmemory_gib_hour = 0.0043\ngpu_hour = 1.70\nio_read_gib = 0.0011\nio_write_gib = 0.0023\nnet_gib = 0.013\n" >"$T/prices.ini"
"$O/corral-collector" report --db "sqlite:$DB" --prices "$T/prices.ini" --from "$(date -u +%F)" \
	--to "$(date -u -d tomorrow +%F)" --by job --period all --format csv >"$T/report.csv" ||
	fail "report"

python3 - "$DB" "$T/report.csv" "$busy" "$cpu_busy" "${idle[@]}" <<'PY' || FAILS=$((FAILS + 1))
import csv, json, sqlite3, sys
sys.path.insert(0, "tests/integration")
from unchanged_model import listed_until
db, report, busy, cpu_busy, idle = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
c = sqlite3.connect(db)
bad = 0
rep = {r['job']: r for r in csv.DictReader(open(report)) if r['period'] != 'total'}
nodes = [(t, json.loads(b)) for t, b in c.execute("SELECT time_ns, body FROM records WHERE"
                                                 " type = 'node.sample' ORDER BY time_ns")]
for task in idle + [busy]:
    start = json.loads(c.execute("SELECT body FROM records WHERE type='task.start' AND task_id=?",
                                 (task,)).fetchone()[0])
    cpus = start['request']['cpus']
    mem_req = start['request']['memory_bytes']
    start_ns = start['start_time'] * 1000  # us
    # the last full sample, from its raw record
    s_time, s_body = c.execute("SELECT time_ns, body FROM records WHERE type='task.sample' AND"
                               " task_id=? ORDER BY time_ns DESC LIMIT 1", (task,)).fetchone()
    u = json.loads(s_body)['usage']
    cpu_s = (u.get('cpu_user_ns', 0) + u.get('cpu_system_ns', 0)) / 1e9
    # the latest node.sample listing it after that sample, or covering it
    t, rss = listed_until(task, s_time, nodes)
    wall = (t - start_ns) / 1e9
    want = {'sample_ns': t, 'wall_s': wall, 'cpu_req_core_s': cpus * wall,
            'cpu_charged_core_s': max(cpus * wall, cpu_s),
            'mem_req_byte_s': mem_req * wall,
            'mem_byte_s': u.get('memory_byte_seconds', 0) + rss * (t - s_time) / 1e9}
    row = c.execute("SELECT sample_ns, wall_s, cpu_req_core_s, cpu_charged_core_s,"
                    " mem_req_byte_s, mem_byte_s FROM rollup_open WHERE task_id=?",
                    (task,)).fetchone()
    if row is None:
        print("FAIL: %s: no open row" % task); bad += 1; continue
    got = dict(zip(want.keys(), row))
    # the report's charged core-hours of the task's job (one task each)
    job = start['task']['job']
    ch = float(rep[job]['cpu_core_h']) if job in rep else -1
    if abs(ch - want['cpu_charged_core_s'] / 3600) > 1e-4 * want['cpu_charged_core_s'] / 3600 + 1e-6:
        print("FAIL: %s: report cpu_core_h %r, model %r" % (job, ch, want['cpu_charged_core_s'] / 3600))
        bad += 1
    for k, w in want.items():
        # start_time is in us: 1e-5 relative slack on the wall-based figures
        tol = 0 if k == 'sample_ns' else max(1e-5 * abs(w), 1e-3 * (mem_req if 'mem' in k else 1))
        if abs(got[k] - w) > tol:
            print("FAIL: %s: %s = %r, model %r" % (task, k, got[k], w)); bad += 1
    if task == busy:
        # (c) its last full sample against its cgroup from outside (2% + 10 ms)
        if abs(cpu_s - cpu_busy / 1e9) > 0.02 * cpu_busy / 1e9 + 0.01:
            print("FAIL: stopped task CPU %.6f s, cgroup %.6f s" % (cpu_s, cpu_busy / 1e9))
            bad += 1
        else:
            print("ok: stopped task's last sample CPU %.6f s, its cgroup %.6f s" %
                  (cpu_s, cpu_busy / 1e9))
    print("ok: %s open row at its latest listing: wall %.3f s, %.3f core-s requested" %
          (task, got['wall_s'], got['cpu_req_core_s'])) if not bad else None
sys.exit(1 if bad else 0)
PY
for p in $(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$busy/cgroup.procs"); do kill -CONT "$p"; done

# PostgreSQL: the same records, uploaded in small batches, give the same open rows
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	chmod 755 "$T"
	mkdir -p "$T/pg" && chown postgres "$T/pg"
	PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	if su postgres -s /bin/sh -c "$PGBIN/initdb -D $T/pg/data -A trust -U postgres >$T/pg/initdb.log 2>&1 &&
		$PGBIN/pg_ctl -D $T/pg/data -o \"-k $T/pg -p $PGPORT -c listen_addresses=''\" -l $T/pg/log -w start >/dev/null &&
		$PGBIN/createdb -h $T/pg -p $PGPORT unchanged"; then
		PORT2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
		"$O/corral-collector" serve --listen 127.0.0.1:$PORT2 --tokens "$T/tokens" \
			--db "postgresql://postgres@/unchanged?host=$T/pg&port=$PGPORT" >>"$T/collector-pg.log" 2>&1 &
		COLL2=$!
		wait_up "http://127.0.0.1:$PORT2/healthz" "$COLL2" "$T/collector-pg.log"
		q "SELECT body FROM records WHERE type IN ('task.start', 'task.sample', 'node.sample')
		   ORDER BY time_ns" >"$T/all.ndjson"
		split -l 5 "$T/all.ndjson" "$T/part."
		for f in "$T"/part.*; do
			curl -fs -o /dev/null -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/x-ndjson' \
				--data-binary "@$f" "http://127.0.0.1:$PORT2/v1/records" || fail "upload to the PostgreSQL collector"
		done
		cols="task_id, sample_ns, wall_s, cpu_req_core_s, cpu_charged_core_s, mem_byte_s, mem_req_byte_s"
		q "SELECT $cols FROM rollup_open ORDER BY task_id" | tr '|' ' ' >"$T/open.sqlite"
		su postgres -s /bin/sh -c "psql -h $T/pg -p $PGPORT -At -F ' ' -d unchanged \
			-c 'SELECT $cols FROM rollup_open ORDER BY task_id'" >"$T/open.pg"
		python3 - "$T/open.sqlite" "$T/open.pg" <<'PY' && pass "PostgreSQL: the same open rows as SQLite" || fail "PostgreSQL open rows differ"
import sys
a, b = ([l.split() for l in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b) == 4, (a, b)
for x, y in zip(a, b):
    assert x[:2] == y[:2], (x, y)
    for u, v in zip(x[2:], y[2:]):
        assert abs(float(u) - float(v)) <= 1e-9 * max(1, abs(float(u))), (x, y)
PY
		kill "$COLL2"; wait "$COLL2" 2>/dev/null
		su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $T/pg/data -m immediate stop" >/dev/null 2>&1
	else
		fail "PostgreSQL did not start: $(tail -3 "$T/pg/log" 2>/dev/null)"
	fi
fi

# A forged statement, built here from the open rows: the rows of the latest listing, their count
# and the XOR of their ids' FNV-1a hashes, in a node.sample 5 s after the last one. With its
# digest changed it moves no row and is counted in /metrics; with the right digest (the control)
# it moves those rows to its time and is not counted.
refused() { curl -fs "http://127.0.0.1:$PORT/metrics" | awk '$1 == "corral_collector_alive_statements_refused_total" {print $2}'; }
forge() { # DIGEST_XOR SUFFIX: the forged record, on stdout
	python3 - "$DB" "$1" "$2" <<'PY'
import datetime, json, sqlite3, sys
from functools import reduce
db, x, suffix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(db)
fnv = lambda s: reduce(lambda h, b: ((h ^ b) * 0x100000001b3) & (2**64 - 1), s.encode(), 0xcbf29ce484222325)
listed = c.execute("SELECT max(listed_ns) FROM rollup_open WHERE rss_bytes IS NOT NULL").fetchone()[0]
ids = [r[0] for r in c.execute("SELECT task_id FROM rollup_open WHERE rss_bytes IS NOT NULL"
                               " AND listed_ns = ?", (listed,))]
since = json.loads(c.execute("SELECT body FROM records WHERE type = 'node.sample' AND time_ns = ?",
                             (listed,)).fetchone()[0])["time"]
v2 = json.loads(c.execute("SELECT body FROM records WHERE type = 'node.sample' AND body LIKE"
                          " '%tasks_alive%' LIMIT 1").fetchone()[0])["schema"]
r = json.loads(c.execute("SELECT body FROM records WHERE type = 'node.sample'"
                         " ORDER BY time_ns DESC LIMIT 1").fetchone()[0])
t = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ") + datetime.timedelta(seconds=5)
r.update(schema=v2, time=t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
         record_id=r["record_id"][:-len(suffix)] + suffix,
         tasks_alive={"since": since, "n": len(ids), "except": [],
                      "digest": "%016x" % (reduce(lambda a, i: a ^ fnv(i), ids, 0) ^ x)})
r.pop("tasks_unchanged", None)
print(json.dumps(r))
PY
}
post_one() { curl -fs -o /dev/null -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/x-ndjson' \
	--data-binary "@$1" "http://127.0.0.1:$PORT/v1/records"; }
open_rows() { q "SELECT group_concat(task_id || ':' || sample_ns) FROM rollup_open ORDER BY task_id"; }
before=$(open_rows)
n_listed=$(q "SELECT count(*) FROM rollup_open WHERE rss_bytes IS NOT NULL AND listed_ns =
	(SELECT max(listed_ns) FROM rollup_open WHERE rss_bytes IS NOT NULL)")
r0=$(refused)
forge 1 ff01 >"$T/forged.ndjson" && post_one "$T/forged.ndjson" || fail "posting the forged statement"
r1=$(refused)
[ "$(open_rows)" = "$before" ] && [ "${r0:-x}" = 0 ] && [ "${r1:-x}" = 1 ] &&
	pass "a statement with a wrong digest moves nothing and is counted ($r0 -> $r1 refused)" ||
	fail "wrong digest: refused $r0 -> $r1, open rows $before -> $(open_rows)"
forge 0 ff02 >"$T/control.ndjson" && post_one "$T/control.ndjson" || fail "posting the control statement"
t_ctl=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["time"])' "$T/control.ndjson")
moved=$(q "SELECT count(*) FROM rollup_open WHERE sample_ns = (SELECT time_ns FROM records
	WHERE type = 'node.sample' AND json_extract(body, '\$.time') = '$t_ctl')")
[ "$(refused)" = 1 ] && [ "$n_listed" -ge 1 ] && [ "$moved" = "$n_listed" ] &&
	pass "the same statement with the right digest moves the $moved rows of the listing" ||
	fail "control: refused $(refused), moved $moved of $n_listed"
finish
