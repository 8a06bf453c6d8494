#!/bin/bash
# Showback report end to end: generated task.end and task.sample records POSTed to the
# collector (SQLite), then `corral-collector report --format csv` and GET /v1/reports/showback
# checked against an independent computation in python3 over the same records (per account,
# to the cent: usage split over the days each task ran, running tasks charged from their
# latest sample up to the report's end; kill counts per reason), and every grouping checked to
# sum to the grand total. HTML checked in headless chromium when it is installed (else that
# part is skipped with a message).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
coll_init collector_report
# the schema version the collector migrates to (collector/store.h)
SCHEMA=$(awk '$2 == "COLL_SCHEMA_VERSION" {print $3}' collector/store.h)
NODES="n1 n2 n3"
coll_tokens --reader $NODES
coll_prices "$T/prices.ini"

# generated records: 2000 tasks over 10 days, 7 accounts, 4 users, a project label, 10 jobs on
# 3 nodes (each node's records written with its own token); then 30
# tasks still running (two samples each, the last one straddling the report's end) and 10
# tasks whose samples come first and whose task.end comes in a later batch
python3 - "$T/recs.ndjson" "$T/samples.ndjson" "$T/ends.ndjson" <<'PY'
import json, random, sys
random.seed(5)
def sample_of(rec, rid, t, wall):
    s = json.loads(json.dumps(rec))
    s["record_id"], s["type"], s["time"] = rid, "task.sample", t
    s["usage"]["wall_ns"] = wall * 10**9
    s["usage"]["cpu_user_ns"] = int(s["usage"]["cpu_user_ns"] * 0.5)
    del s["exit"]
    return s
acc = ["physics", "chem", "bio", "astro", "geo", "math", "cs"]
users = ["alice", "bob", "carol", "dave"]
with open(sys.argv[1], "w") as f:
    for i in range(2000):
        wall = random.randint(1, 30000)
        cpus = random.randint(1, 16) / 2
        cpu_ns = int(wall * cpus * random.randint(0, 130) / 100 * 1e9)
        mem = random.randint(1, 64) << 28
        gpus = random.randint(1, 4) if random.random() < 0.2 else 0
        day = random.randint(0, 9)
        t = "2026-11-%02dT%02d:%02d:%02d.000000Z" % (20 + day, random.randint(0, 23),
                                                      random.randint(0, 59), random.randint(0, 59))
        labels = {"project": random.choice(["lattice", "qcd", "fold"])} if random.random() < 0.7 else {}
        rec = {"schema": "corral.record/v1", "record_id": "rep-%06d" % i, "type": "task.end",
               "time": t, "node": random.choice(["n1", "n2", "n3"]),
               "task": {"id": "t%d" % i, "job": "job%d" % random.randint(0, 9),
                        "user": random.choice(users), "uid": 1000,
                        "account": random.choice(acc), "labels": labels},
               "request": {"cpus": cpus, "memory_bytes": mem, "pids": 512, "gpus": gpus,
                           "time_limit_s": 0, "cpu_time_limit_s": 0, "gpu_memory_bytes": 0},
               "usage": {"wall_ns": wall * 10**9, "cpu_user_ns": cpu_ns, "cpu_system_ns": 0,
                         "memory_peak_bytes": mem // 2,
                         "memory_byte_seconds": float(mem * wall * random.randint(0, 120) // 100),
                         "io_read_bytes": random.randint(0, 10**11),
                         "io_write_bytes": random.randint(0, 10**10),
                         "net_rx_bytes": random.randint(0, 10**10),
                         "net_tx_bytes": random.randint(0, 10**9),
                         "gpu_seconds": gpus * wall * 0.8, "gpu_memory_peak_bytes": 0,
                         "gpu_util_avg": 0.5},
               "exit": {"status": random.choice(["exited"] * 16 + ["oom_killed", "time_limit"]),
                        "code": 0, "signal": 0}}
        f.write(json.dumps(rec) + "\n")
        if i < 40:
            run = json.loads(json.dumps(rec))
            run["task"]["id"] = "run%d" % i
            if i < 30:   # still running: samples only
                wall = random.randint(3600, 40000)
                f2 = open(sys.argv[2], "a")
                f2.write(json.dumps(sample_of(run, "run-s1-%d" % i, "2026-11-30T%02d:00:00.000000Z" % (i % 20), wall // 2)) + "\n")
                f2.write(json.dumps(sample_of(run, "run-s2-%d" % i, "2026-12-01T02:%02d:00.000000Z" % i, wall)) + "\n")
                f2.close()
            else:        # sampled, then ended later
                with open(sys.argv[2], "a") as f2:
                    f2.write(json.dumps(sample_of(run, "late-s-%d" % i, run["time"], 600)) + "\n")
                run["record_id"] = "late-e-%d" % i
                with open(sys.argv[3], "a") as f3:
                    f3.write(json.dumps(run) + "\n")
PY

PORT=$(free_port)
DB="sqlite:$T/c.db"
start_collector "$DB" "$PORT" --prices "$T/prices.ini" || { echo "FAIL: collector did not come up"; exit 1; }

# post FILE: its records, one batch per node with that node's token; 0 if all answered 200
post() {
	local n code rc=0
	for n in $NODES; do
		grep -F "\"node\": \"$n\"" "$1" > "$T/post.ndjson" || continue
		code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer tok-node-$n-0123456789abcdef" \
			-H 'Content-Type: application/x-ndjson' --data-binary "@$T/post.ndjson" \
			"http://127.0.0.1:$PORT/v1/records")
		[ "$code" = 200 ] || { echo "ingest $1 ($n): $code $(head -c 300 "$T/resp")"; rc=1; }
	done
	return $rc
}
for b in recs samples ends; do
	post "$T/$b.ndjson" && ok "$(wc -l < "$T/$b.ndjson") $b ingested" || fail "ingest $b"
done

R=(--db "$DB" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01)
"$COLL" report "${R[@]}" --by account --format csv > "$T/acct.csv" || fail "report csv"

# independent computation: each task's charged quantities split over the UTC days of
# [end - wall, end] in proportion (running tasks: of [sample - wall, sample], clipped to the
# report's end); per (day, account, user) cell, each component rounded to the cent
python3 - "$T/acct.csv" "$T/recs.ndjson" "$T/samples.ndjson" "$T/ends.ndjson" <<'PY' && ok "CSV per-account costs and counts match python3" || fail "CSV vs python3"
import csv, json, sys, datetime
from collections import defaultdict
P = dict(cpu=0.031, mem=0.0043, gpu=1.70, r=0.0011, w=0.0023, net=0.013)
G = 1073741824.0
DAY = 86400 * 10**9
FROM, TO = (int(datetime.datetime(2026, m, 1, tzinfo=datetime.timezone.utc).timestamp()) * 10**9
            for m in (11, 12))
def ns(t):
    d = datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp()) * 10**9 + d.microsecond * 1000
ends, samples = {}, {}
for path in sys.argv[2:]:
    for line in open(path):
        d = json.loads(line)
        key = (d["node"], d["task"]["id"])
        if d["type"] == "task.end":
            ends[key] = d
        elif key not in samples or ns(d["time"]) > ns(samples[key]["time"]):
            samples[key] = d
cells = defaultdict(lambda: [0.0] * 6)
counts = defaultdict(lambda: defaultdict(int))
def spread(d, running):
    u, q = d["usage"], d["request"]
    wall = u["wall_ns"] / 1e9
    cpu = (u["cpu_user_ns"] + u["cpu_system_ns"]) / 1e9
    creq, mreq, greq = q["cpus"] * wall, q["memory_bytes"] * wall, q["gpus"] * wall
    v = [max(creq, cpu), max(mreq, u["memory_byte_seconds"]), max(greq, u["gpu_seconds"]),
         u["io_read_bytes"], u["io_write_bytes"], u["net_rx_bytes"] + u["net_tx_bytes"]]
    end = ns(d["time"]); start = end - u["wall_ns"]
    lo, hi = (max(start, FROM), min(end, TO)) if running else (start, end)
    acc = d["task"]["account"]
    day = lo // DAY * DAY
    while day < hi:
        frac = (min(hi, day + DAY) - max(lo, day)) / (end - start)
        c = cells[(day, acc, d["task"]["user"])]
        for k in range(6):
            c[k] += v[k] * frac
        day += DAY
    if running:
        if hi > lo:
            counts[acc]["running_tasks"] += 1
    else:
        counts[acc][d["exit"]["status"]] += 1
for key, d in ends.items():
    spread(d, False)
for key, d in samples.items():
    if key not in ends:
        spread(d, True)
want = defaultdict(int)
for (day, acc, user), c in cells.items():
    if not FROM <= day < TO:
        continue
    comps = [c[0] / 3600 * P["cpu"], c[1] / 3600 / G * P["mem"], c[2] / 3600 * P["gpu"],
             c[3] / G * P["r"] + c[4] / G * P["w"], c[5] / G * P["net"]]
    want[acc] += sum(int(x * 100 + 0.5) for x in comps)
got, total = {}, None
for row in csv.DictReader(open(sys.argv[1])):
    cents = round(float(row["cost"]) * 100)
    if row["period"] == "total":
        total = cents
        continue
    got[row["account"]] = cents
    for col in ("oom_killed", "time_limit", "running_tasks"):
        if int(row[col]) != counts[row["account"]][col]:
            print("count", row["account"], col, row[col], counts[row["account"]][col]); sys.exit(1)
bad = [(a, want[a], got.get(a)) for a in want if got.get(a) != want[a]]
# float summation order may move a cell across a half cent: allow 1 cent per account
if any(g is None or abs(g - w) > 1 for a, w, g in bad):
    print("mismatch:", bad); sys.exit(1)
if total != sum(got.values()):
    print("total", total, "!= sum", sum(got.values())); sys.exit(1)
print("accounts %d, total %.2f EUR, exact matches %d/%d, running %d, oom %d, time_limit %d" % (
      len(got), total / 100, len(got) - len(bad), len(got),
      sum(c["running_tasks"] for c in counts.values()), sum(c["oom_killed"] for c in counts.values()),
      sum(c["time_limit"] for c in counts.values())))
PY

# every grouping and period sums to the same grand total, to the cent; groupings with account
# sum per account to the account report's cents exactly (the same cells, split)
GROUPINGS="account user account,user label:project user,label:project job node account,job,node
	label:project,job node,label:project label:project,job,node account,user,job,node,label:project"
reconcile() { # DB REF-CSV WHAT
	local db=$1 ref=$2 what=$3 n=0 by period
	for by in $GROUPINGS; do
		for period in day week month all; do
			"$COLL" report --db "$db" --prices "$T/prices.ini" --from 2026-11-01 \
				--to 2026-12-01 --by "$by" --period "$period" --format csv > "$T/g.csv" ||
				{ fail "$what: report --by $by --period $period"; continue; }
			"$COLL" report --db "$db" --prices "$T/prices.ini" --from 2026-11-01 \
				--to 2026-12-01 --by account --period "$period" --format csv > "$T/ga.csv" ||
				{ fail "$what: report --by account --period $period"; continue; }
			python3 - "$T/g.csv" "$ref" "$T/ga.csv" <<'PY' || fail "$what: --by $by --period $period does not reconcile"
import csv, sys
from collections import defaultdict
def load(p):
    rows = list(csv.DictReader(open(p)))
    tot = [r for r in rows if r["period"] == "total"][0]
    return [r for r in rows if r["period"] != "total"], tot
rows, tot = load(sys.argv[1])
_, ref = load(sys.argv[2])
acc_rows, _ = load(sys.argv[3])
cols = ("cost", "waste", "cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost")
for col in cols:
    s = sum(round(float(r[col]) * 100) for r in rows)
    if s != round(float(tot[col]) * 100) or tot["cost"] != ref["cost"]:
        print(col, s, tot[col], ref["cost"]); sys.exit(1)
if "account" in rows[0]:
    per = defaultdict(lambda: [0] * len(cols))
    for r in rows:
        for i, col in enumerate(cols):
            per[(r["period"], r["account"])][i] += round(float(r[col]) * 100)
    want = {(r["period"], r["account"]): [round(float(r[c]) * 100) for c in cols] for r in acc_rows}
    if dict(per) != want:
        print("per account differs"); sys.exit(1)
PY
			n=$((n + 1))
		done
	done
	NREC=$n
}
before=$fails
reconcile "$DB" "$T/acct.csv" sqlite
[ $fails = $before ] && ok "sqlite: $NREC groupings x periods reconcile to the grand total (label with job and node included)"

# the label per job and node, against python3 over the same records: tasks, running tasks and
# charged core-hours per (project, job, node), in the report's range
"$COLL" report "${R[@]}" --by label:project,job,node --format csv > "$T/ljn.csv" || fail "report label,job,node"
python3 - "$T/ljn.csv" "$T/recs.ndjson" "$T/samples.ndjson" "$T/ends.ndjson" <<'PY' && ok "label:project,job,node quantities match python3" || fail "label:project,job,node vs python3"
import csv, json, sys, datetime
from collections import defaultdict
DAY = 86400 * 10**9
FROM, TO = (int(datetime.datetime(2026, m, 1, tzinfo=datetime.timezone.utc).timestamp()) * 10**9
            for m in (11, 12))
def ns(t):
    d = datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp()) * 10**9 + d.microsecond * 1000
ends, samples = {}, {}
for path in sys.argv[2:]:
    for line in open(path):
        d = json.loads(line)
        key = (d["node"], d["task"]["id"])
        if d["type"] == "task.end":
            ends[key] = d
        elif key not in samples or ns(d["time"]) > ns(samples[key]["time"]):
            samples[key] = d
want = defaultdict(lambda: [0, 0, 0.0])
def add(d, running):
    u, q = d["usage"], d["request"]
    wall = u["wall_ns"] / 1e9
    charged = max(q["cpus"] * wall, (u["cpu_user_ns"] + u["cpu_system_ns"]) / 1e9)
    end = ns(d["time"]); start = end - u["wall_ns"]
    lo, hi = max(start, FROM), min(end, TO)
    k = (d["task"]["labels"].get("project", "(none)"), d["task"]["job"], d["node"])
    if hi > lo:
        want[k][2] += charged * (hi - lo) / (end - start) / 3600
    if running and hi > lo:
        want[k][1] += 1
    elif not running and FROM <= end - 1 < TO:
        want[k][0] += 1
for key, d in ends.items():
    add(d, False)
for key, d in samples.items():
    if key not in ends:
        add(d, True)
got = {(r["label:project"], r["job"], r["node"]): r for r in csv.DictReader(open(sys.argv[1]))
       if r["period"] != "total"}
bad = 0
for k, (tasks, running, core_h) in want.items():
    r = got.get(k)
    if r is None or int(r["tasks_ended"]) != tasks or int(r["running_tasks"]) != running or \
            abs(float(r["cpu_core_h"]) - core_h) > 1e-5 * max(1, core_h):
        print("mismatch", k, (tasks, running, core_h), r and (r["tasks_ended"], r["running_tasks"], r["cpu_core_h"]))
        bad += 1
extra = [k for k in got if k not in want and float(got[k]["cost"]) != 0]
print("%d (project, job, node) groups, %d mismatches, %d unexpected" % (len(want), bad, len(extra)))
sys.exit(1 if bad or extra else 0)
PY

# API: reader token gets JSON and CSV; node token refused; bad parameter names itself
CODE=$(curl -s -o "$T/api.csv" -w '%{http_code}' -H "Authorization: Bearer $RD" \
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01&by=account&format=csv")
[ "$CODE" = 200 ] && cmp -s "$T/api.csv" "$T/acct.csv" && ok "API CSV equals CLI CSV" ||
	fail "API csv: $CODE"
CODE=$(curl -s -o "$T/api.json" -w '%{http_code}' -H "Authorization: Bearer $RD" \
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01&by=account,label:project&period=week")
python3 - "$T/api.json" "$T/acct.csv" <<'PY' && [ "$CODE" = 200 ] && ok "API JSON total matches" || fail "API json: $CODE"
import csv, json, sys
d = json.load(open(sys.argv[1]))
ref = [r for r in csv.DictReader(open(sys.argv[2])) if r["period"] == "total"][0]
assert d["total"]["cost"] == ref["cost"], (d["total"]["cost"], ref["cost"])
assert sum(round(float(r["cost"]) * 100) for r in d["rows"]) == round(float(ref["cost"]) * 100)
PY
CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $N1" \
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01")
[ "$CODE" = 403 ] && ok "node token refused (403)" || fail "node token: $CODE"
CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $RD" \
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01&by=nodes")
[ "$CODE" = 400 ] && grep -q '"by: ' "$T/resp" && ok "bad by= answered 400 naming it" ||
	fail "bad by: $CODE $(cat "$T/resp")"

CODE=$(curl -s -o "$T/api_ljn.csv" -w '%{http_code}' -H "Authorization: Bearer $RD" \
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01&by=label:project,job,node&format=csv")
[ "$CODE" = 200 ] && cmp -s "$T/api_ljn.csv" "$T/ljn.csv" && ok "API by=label:project,job,node equals the CLI's" ||
	fail "API label,job,node: $CODE $(head -c 200 "$T/api_ljn.csv")"

# HTML: self-contained, renders in headless chromium, total equals the CSV's
"$COLL" report "${R[@]}" --by account --period day --format html > "$T/r.html" || fail "html"
REF=$(python3 -c 'import csv,sys; print([r for r in csv.DictReader(open(sys.argv[1])) if r["period"]=="total"][0]["cost"])' "$T/acct.csv")
grep -q "<b id=\"total-cost\">$REF</b>" "$T/r.html" && ! grep -qi '<script\|src=\|href=' "$T/r.html" &&
	ok "HTML total $REF equals CSV, no external resources" || fail "HTML total/self-containment"
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROME" ]; then
	timeout 60 "$CHROME" --headless --no-sandbox --disable-gpu --dump-dom "file://$T/r.html" \
		> "$T/dom.html" 2>/dev/null
	grep -q "id=\"total-cost\">$REF<" "$T/dom.html" && grep -q '<rect' "$T/dom.html" &&
		ok "chromium renders the HTML, total $REF" || fail "chromium dump-dom"
else
	echo "skip: chromium not installed, HTML not rendered (apt-get install chromium)"
fi

# A version 2 database (before rollup_job_label_day and rollup_job_month) is migrated on open:
# the new tables are filled from the stored records, and the reports are the same
stop_collector
MIGR_BY="label:project,job,node:day job,node:month account,node,label:project:all"
migrated_same() { # DB WHAT
	local spec by period
	for spec in $MIGR_BY; do
		by=${spec%:*}; period=${spec##*:}
		"$COLL" report --db "$1" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01 \
			--by "$by" --period "$period" --format csv > "$T/m-$period.csv" &&
			python3 - "$T/pre-$2-$period.csv" "$T/m-$period.csv" <<'PY' ||
import csv, sys
# the rebuilt rows are summed in record order, not batch order: a cent may move between
# parts at an exact half; keys, counts and the total (whose cells are not rebuilt) are exact
a, b = ([r for r in csv.DictReader(open(p))] for p in sys.argv[1:])
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    assert list(x.keys()) == list(y.keys())
    for col in x:
        if col.endswith("cost") or col == "waste":
            assert abs(round(float(x[col]) * 100) - round(float(y[col]) * 100)) <= (0 if x["period"] == "total" else 1), (col, x, y)
        elif col.endswith("_h") or col.endswith("_gib") or col.endswith("_eff"):
            assert abs(float(x[col]) - float(y[col])) <= 1e-5 * max(1, abs(float(x[col]))), (col, x, y)
        else:
            assert x[col] == y[col], (col, x, y)
PY
			{ fail "$2: report --by $by --period $period changed by the migration"; return 1; }
	done
}
pre_reports() { # DB WHAT
	local spec by period
	for spec in $MIGR_BY; do
		by=${spec%:*}; period=${spec##*:}
		"$COLL" report --db "$1" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01 \
			--by "$by" --period "$period" --format csv > "$T/pre-$2-$period.csv" || fail "$2 report $by"
	done
}
# (a version 2 database also had rollup_hour, which version 4 drops, and no conflicts table,
# which version 7 adds; version 8 rebuilds every rollup with carried_tasks, version 9 adds rollup_node_day, 10 rollup_node_alloc_day, 11 the energy sums, 12 the counted capacity keys, 13 the energy per day)
DOWNGRADE="DROP TABLE rollup_job_label_day; DROP TABLE rollup_job_month; DROP TABLE conflicts; DROP TABLE rollup_node_day; DROP TABLE rollup_node_alloc_day; DROP TABLE rollup_node_cap_day; DROP TABLE rollup_node_cap_month; DROP TABLE rollup_node_energy_day; UPDATE schema_version SET version = 2;
CREATE TABLE rollup_hour (bucket TEXT NOT NULL, account TEXT NOT NULL, \"user\" TEXT NOT NULL, tasks REAL NOT NULL DEFAULT 0, PRIMARY KEY (bucket, account, \"user\"));"
if command -v sqlite3 >/dev/null; then
	pre_reports "$DB" sqlite
	sqlite3 "$T/c.db" "$DOWNGRADE" || fail "sqlite downgrade"
	"$COLL" migrate --db "$DB" >/dev/null || fail "sqlite migrate"
	[ "$(sqlite3 "$T/c.db" 'SELECT max(version) FROM schema_version')" = "$SCHEMA" ] ||
		fail "sqlite schema version $(sqlite3 "$T/c.db" 'SELECT max(version) FROM schema_version'), want $SCHEMA"
	[ "$(sqlite3 "$T/c.db" 'SELECT count(*) FROM conflicts')" = 0 ] || fail "sqlite: no conflicts table after the migration"
	[ "$(sqlite3 "$T/c.db" "SELECT count(*) FROM sqlite_master WHERE name = 'rollup_hour'")" = 0 ] ||
		fail "sqlite: rollup_hour still there after the migration to version 9"
	migrated_same "$DB" sqlite && ok "sqlite: a version 2 database migrated gives the same reports"
else
	echo "skip: sqlite3 CLI missing, migration of a version 2 database not checked"
fi

# PostgreSQL: the same batches through a collector on a server this test starts; the
# report (rollups, open tasks, kill counts) must equal SQLite's to the cent per account
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	pg_start rep || fail "PostgreSQL did not start"
	PDB=$(pg_uri rep)
	start_collector "$PDB" "$PORT" || fail "collector on PostgreSQL did not come up"
	for b in recs samples ends; do
		post "$T/$b.ndjson" || fail "postgresql ingest $b"
	done
	"$COLL" report --db "$PDB" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01 \
		--by account --format csv > "$T/pg.csv" || fail "postgresql report"
	python3 - "$T/acct.csv" "$T/pg.csv" <<'PY' && ok "PostgreSQL report equals SQLite's" || fail "PostgreSQL vs SQLite"
import csv, sys
a, b = ({r["account"] or r["period"]: r for r in csv.DictReader(open(p))} for p in sys.argv[1:])
assert a.keys() == b.keys(), (a.keys(), b.keys())
for k in a:
    for col in ("tasks_ended", "tasks_active", "oom_killed", "time_limit", "running_tasks"):
        assert a[k][col] == b[k][col], (k, col, a[k][col], b[k][col])
    # float summation order may move a cell across a half cent: 1 cent per account
    lim = len(a) if k == "total" else 1
    assert abs(round(float(a[k]["cost"]) * 100) - round(float(b[k]["cost"]) * 100)) <= lim, k
print("accounts %d, total %s / %s" % (len(a) - 1, a["total"]["cost"], b["total"]["cost"]))
PY
	stop_collector
	"$COLL" report --db "$PDB" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01 \
		--by label:project,job,node --format csv > "$T/pg-ljn.csv" || fail "postgresql report label,job,node"
	python3 - "$T/ljn.csv" "$T/pg-ljn.csv" <<'PY' && ok "PostgreSQL label:project,job,node report equals SQLite's" || fail "PostgreSQL label,job,node vs SQLite"
import csv, sys
a, b = ([r for r in csv.DictReader(open(p))] for p in sys.argv[1:])
assert len(a) == len(b), (len(a), len(b))
for x, y in zip(a, b):
    for col in ("period", "label:project", "job", "node", "tasks_ended", "tasks_active",
                "running_tasks", "oom_killed"):
        assert x[col] == y[col], (col, x, y)
    # float summation order may move a cell across a half cent
    assert abs(round(float(x["cost"]) * 100) - round(float(y["cost"]) * 100)) <= (len(a) if x["period"] == "total" else 1), (x, y)
PY
	before=$fails
	reconcile "$PDB" "$T/pg.csv" postgresql
	[ $fails = $before ] && ok "postgresql: $NREC groupings x periods reconcile to the grand total"
	PSQL=$(command -v psql || echo "$PGBIN/psql")
	pre_reports "$PDB" postgresql
	"$PSQL" -q "$PDB" -c "$DOWNGRADE" >/dev/null || fail "postgresql downgrade"
	"$COLL" migrate --db "$PDB" >/dev/null || fail "postgresql migrate"
	[ "$("$PSQL" -At "$PDB" -c 'SELECT max(version) FROM schema_version')" = "$SCHEMA" ] ||
		fail "postgresql schema version, want $SCHEMA"
	[ "$("$PSQL" -At "$PDB" -c 'SELECT count(*) FROM conflicts')" = 0 ] || fail "postgresql: no conflicts table after the migration"
	[ "$("$PSQL" -At "$PDB" -c "SELECT to_regclass('rollup_hour') IS NULL")" = t ] ||
		fail "postgresql: rollup_hour still there after the migration to version 9"
	migrated_same "$PDB" postgresql && ok "postgresql: a version 2 database migrated gives the same reports"
else
	echo "skip: no PostgreSQL server binaries in $PGBIN"
fi

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; grep -i error "$T"/collector-*.log | head
exit 1
