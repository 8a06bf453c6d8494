#!/bin/bash
# Capacity and idle cost against an independent model: node.sample records of 6 nodes (one
# changing its price class during a day, a gap, an agent restart, periods over midnight), 2,500
# task.end records on them and on a node without node records, 60 running tasks, POSTed to a
# collector on SQLite and on PostgreSQL; `capacity` by node, price_class and none x 4 periods
# recomputed by capacity_reconcile.py from the raw records: every row and cost component to
# the cent (capacity = allocated + idle, used <= allocated), every quantity to 1e-9, the
# totals the sums of the rows (records sent out of order, node records after the tasks of
# their days, 700 resent); the showback report by account with --idle and --share-idle
# proportional, by-request and to:chem: each period's rows gain exactly its idle cents,
# apportioned as the model does, and the total is the plain report's plus the idle; the API's
# capacity CSV byte-identical to the CLI's; the showback HTML with --share-idle: the idle of
# each day in its chart equal to the capacity report's, per group and in total to the JSON's.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
coll_init capacity_reconcile
MODEL=tests/integration/capacity_reconcile.py
NODES="n1 n2 n3 n4 n5 n6 n9"
coll_tokens --reader $NODES
python3 "$MODEL" gen "$T" || { echo "FAIL: generating the fleet"; exit 1; }
PORT=$(free_port)
FROM=2026-11-28 TO=2026-12-05

post() { # post FILE: its records per node with that node's token, 500 a batch
	local n code rc=0
	for n in $NODES; do
		grep -F "\"node\": \"$n\"" "$1" | split -l 500 - "$T/batch."
		for b in "$T"/batch.*; do
			[ -e "$b" ] || continue
			code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $(node_token "$n")" \
				-H 'Content-Type: application/x-ndjson' --data-binary "@$b" "http://127.0.0.1:$PORT/v1/records")
			[ "$code" = 200 ] || { echo "ingest $1 ($n): $code $(head -c 300 "$T/resp")"; rc=1; }
			rm -f "$b"
		done
	done
	return $rc
}
reconcile() { # reconcile DB NAME [FROM TO]
	local out=$T/$2 by p rule FROM=${3:-$FROM} TO=${4:-$TO}
	mkdir -p "$out"
	for p in day week month all; do
		for by in node price_class none; do
			"$COLL" capacity --db "$1" --prices "$T/prices.ini" --from $FROM --to $TO --by $by \
				--period $p --format csv >"$out/cap-$by@$p.csv" || fail "$2: capacity --by $by --period $p"
		done
		"$COLL" report --db "$1" --prices "$T/prices.ini" --from $FROM --to $TO --by account \
			--period $p --format csv >"$out/show-plain@$p.csv" || fail "$2: report $p"
		"$COLL" report --db "$1" --prices "$T/prices.ini" --from $FROM --to $TO --by account \
			--period $p --format csv --idle >"$out/show-row@$p.csv" || fail "$2: report --idle $p"
		for rule in proportional by-request to:chem; do
			"$COLL" report --db "$1" --prices "$T/prices.ini" --from $FROM --to $TO --by account \
				--period $p --format csv --share-idle $rule >"$out/show-$rule@$p.csv" ||
				fail "$2: report --share-idle $rule $p"
		done
	done
	python3 "$MODEL" check "$T" $FROM $TO "$out" && ok "$2: capacity and idle reports equal the model" ||
		fail "$2: capacity or idle reports differ from the model"
}
run() { # run DB NAME
	start_collector "$1" "$PORT" --prices "$T/prices.ini" || { fail "$2: collector did not come up"; return; }
	# out of order and late: half the node records, the tasks newest first, then the other
	# half of the node records (days whose allocation is already in), then 700 records
	# resent (duplicates: counted once)
	awk 'NR % 2' "$T/nodes.ndjson" >"$T/late.1"
	awk '!(NR % 2)' "$T/nodes.ndjson" >"$T/late.3"
	tac "$T/tasks.ndjson" >"$T/late.2"
	{ head -n 400 "$T/tasks.ndjson"; head -n 300 "$T/nodes.ndjson"; } >"$T/late.4"
	post "$T/late.1" && post "$T/late.2" && post "$T/late.3" && post "$T/late.4" &&
		ok "$2: $(cat "$T"/*.ndjson | wc -l) records ingested (out of order, late, 700 resent)" ||
		fail "$2: ingest"
	curl -sf -H "Authorization: Bearer $RD" \
		"http://127.0.0.1:$PORT/v1/reports/capacity?from=$FROM&to=$TO&by=node&period=day&format=csv" >"$T/api.csv" ||
		fail "$2: GET /v1/reports/capacity"
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $RD" \
		"http://127.0.0.1:$PORT/v1/reports/showback?from=$FROM&to=$TO&by=user&share_idle=to:chem")
	[ "$code" = 400 ] && ok "$2: share_idle=to:ACCOUNT without account in by: 400" || fail "$2: to:chem by user: $code"
	stop_collector
	reconcile "$1" "$2"
	cmp -s "$T/api.csv" "$T/$2/cap-node@day.csv" && ok "$2: the API's capacity CSV is the CLI's" ||
		fail "$2: API capacity CSV differs from the CLI's"
	# whole months: by node per month and in all, the month keys (rollup_node_cap_month)
	reconcile "$1" "$2-months" 2026-11-01 2027-01-01
	counted_keys "$1" "$2" "kept at ingest"
	# schema 11 to 12: the keys made by the migration from rollup_node_day
	sql "$1" "$DROP_V12" && "$COLL" migrate --db "$1" >/dev/null && counted_keys "$1" "$2" "made by the migration 11 -> 13" ||
		fail "$2: migration 11 -> 13"
	# schema 12 to 13: the energy per day made by the migration, then kept by the replaced
	# triggers (a node row's energy changed and one deleted)
	sql "$1" "$DROP_V13" && "$COLL" migrate --db "$1" >/dev/null && counted_keys "$1" "$2" "made by the migration 12 -> 13" &&
		sql "$1" "UPDATE rollup_node_day SET energy_cpu_j = energy_cpu_j + 1.0005 WHERE bucket = (SELECT min(bucket) FROM rollup_node_day);
			DELETE FROM rollup_node_day WHERE bucket = (SELECT max(bucket) FROM rollup_node_day)" &&
		counted_keys "$1" "$2" "kept by the triggers after the migration 12 -> 13" ||
		fail "$2: migration 12 -> 13"
}
# sql DB STATEMENTS: through sqlite3 or psql
sql() { case $1 in sqlite:*) sqlite3 "${1#sqlite:}" "$2" ;; *) psql -qAt "$1" -c "$2" ;; esac; }
DROP_V12="DROP TABLE rollup_node_cap_day; DROP TABLE rollup_node_cap_month; DROP TABLE rollup_node_energy_day; UPDATE schema_version SET version = 11;"
DROP_V13="DROP TABLE rollup_node_energy_day; UPDATE schema_version SET version = 12;"
# counted_keys DB NAME WHAT: rollup_node_cap_day and _month hold the node rows counted per
# capacity key as plain SQL over rollup_node_day counts them: the same keys, units exactly,
# the sums to 1e-9 (kept by adding and taking away rows: the last digits may differ)
counted_keys() {
	local k key tbl node q
	for k in "bucket|rollup_node_cap_day|''" "substr(bucket, 1, 7)|rollup_node_cap_month|node"; do
		IFS='|' read -r key tbl node <<<"$k"
		q="SELECT $key AS b, $node AS n, label_value AS l, cpu_charged_core_s AS c,
			mem_charged_byte_s AS m, gpu_charged_s AS g, count(*) AS u, sum(tasks) AS t,
			sum(wall_s) AS w, sum(cpu_s) AS s FROM rollup_node_day GROUP BY 1, 2, 3, 4, 5, 6"
		[ "$(sql "$1" "SELECT count(*) FROM ($q) p JOIN $tbl k ON k.bucket = p.b AND $([ "$node" = node ] && echo k.node || echo "''") = p.n
			AND k.label_value = p.l AND k.cpu_cap = p.c AND k.mem_cap = p.m AND k.gpu_cap = p.g
			AND k.units = p.u AND abs(k.tasks - p.t) <= 1e-9 * (1 + abs(p.t))
			AND abs(k.wall_s - p.w) <= 1e-9 * (1 + abs(p.w)) AND abs(k.cpu_s - p.s) <= 1e-9 * (1 + abs(p.s))")" = \
			"$(sql "$1" "SELECT count(*) FROM ($q) p")" ] &&
			[ "$(sql "$1" "SELECT count(*) FROM $tbl")" = "$(sql "$1" "SELECT count(*) FROM ($q) p")" ] ||
			{ fail "$2: $tbl differs from rollup_node_day counted ($3)"; return 1; }
	done
	# the unattributed energy per day (schema 13): plain SQL's integer mJ sums, exactly
	q="SELECT bucket AS b, count(*) AS u, sum(CAST(round(energy_cpu_j * 1000) AS BIGINT)) AS c,
		sum(CAST(round(energy_dram_j * 1000) AS BIGINT)) AS d,
		sum(CAST(round(gpu_s * 1000) AS BIGINT)) AS g FROM rollup_node_day GROUP BY bucket"
	[ "$(sql "$1" "SELECT count(*) FROM ($q) p JOIN rollup_node_energy_day e ON e.bucket = p.b
		AND e.node_rows = p.u AND e.cpu_mj = p.c AND e.dram_mj = p.d AND e.gpu_mj = p.g")" = \
		"$(sql "$1" "SELECT count(*) FROM ($q) p")" ] &&
		[ "$(sql "$1" "SELECT count(*) FROM rollup_node_energy_day")" = "$(sql "$1" "SELECT count(*) FROM ($q) p")" ] &&
		[ "$(sql "$1" "SELECT count(*) FROM rollup_node_energy_day WHERE cpu_mj > 0 AND dram_mj > 0 AND gpu_mj > 0")" -gt 0 ] ||
		{ fail "$2: rollup_node_energy_day differs from rollup_node_day's energy summed ($3)"; return 1; }
	ok "$2: the unattributed energy per day ($3) = plain SQL's sums in mJ, exactly: $(sql "$1" 'SELECT sum(cpu_mj) || '"' + '"' || sum(dram_mj) || '"' + '"' || sum(gpu_mj) FROM rollup_node_energy_day') mJ over $(sql "$1" 'SELECT count(*) FROM rollup_node_energy_day') days"
	ok "$2: the node rows counted per capacity key ($3) as plain SQL counts them: $(sql "$1" 'SELECT count(*) FROM rollup_node_cap_day') day keys, $(sql "$1" 'SELECT count(*) FROM rollup_node_cap_month') month keys of $(sql "$1" 'SELECT count(*) FROM rollup_node_day') node rows"
}

run "sqlite:$T/c.db" sqlite
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	pg_start cap || fail "PostgreSQL did not start"
	run "$(pg_uri cap)" postgresql
	cmp -s "$T/sqlite/cap-node@week.csv" "$T/postgresql/cap-node@week.csv" &&
		ok "postgresql: the capacity report by node and week equals SQLite's" ||
		fail "postgresql and sqlite capacity reports differ"
else
	echo "skip: no PostgreSQL server binaries in $PGBIN"
fi
# the worked example of docs/reports.md "Capacity and idle cost", figure for figure
mkdir -p "$T/ex"
python3 - "$T/ex" <<'PY'
import datetime, json, sys
t0 = int(datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc).timestamp())
ts = lambda s: datetime.datetime.fromtimestamp(s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
G, H = 1 << 30, 3600 * 10**9
with open(sys.argv[1] + "/recs.ndjson", "w") as out:
    for i in range(1, 49):
        out.write(json.dumps({"schema": "corral.record/v1", "record_id": "n1/ex/%d" % i, "type": "node.sample",
                              "time": ts(t0 + 1800 * i), "node": "n1", "period_ns": 1800 * 10**9, "price_class": "std",
                              "capacity": {"cpus": 16, "memory_bytes": 64 * G, "gpus": 0}}) + "\n")
    for tid, acct, cpus, mem, used, mused in (("p1", "physics", 7, 14 * G, 42 * H, 60 * G * 3600),
                                              ("c1", "chem", 3, 10 * G, 18 * H, 40 * G * 3600)):
        out.write(json.dumps({"schema": "corral.record/v1", "record_id": "n1/%s/end" % tid, "type": "task.end",
                              "time": ts(t0 + 12 * 3600), "node": "n1", "task": {"id": tid, "account": acct},
                              "request": {"cpus": cpus, "memory_bytes": mem},
                              "usage": {"wall_ns": 10 * H, "cpu_user_ns": used, "memory_byte_seconds": mused},
                              "exit": {"status": "exited", "code": 0}}) + "\n")
PY
printf '[prices]\ncpu_core_hour = 0.031\nmemory_gib_hour = 0.0043\ngpu_hour = 1.70\nio_read_gib = 0\nio_write_gib = 0\nnet_gib = 0\n' >"$T/ex/prices.ini"
start_collector "sqlite:$T/ex/c.db" "$PORT" && post "$T/ex/recs.ndjson" || fail "example: ingest"
stop_collector
ex=$("$COLL" capacity --db "sqlite:$T/ex/c.db" --prices "$T/ex/prices.ini" --from 2026-12-01 --to 2026-12-02 --format json |
	python3 -c 'import json,sys; t=json.load(sys.stdin)["total"]; print(" ".join(t[k] for k in ("cpu_capacity_cost","mem_capacity_cost","capacity_cost","cpu_allocated_cost","mem_allocated_cost","allocated_cost","used_cost","allocated_unused_cost","cpu_idle_cost","mem_idle_cost","idle_cost")))')
sh=$("$COLL" report --db "sqlite:$T/ex/c.db" --prices "$T/ex/prices.ini" --from 2026-12-01 --to 2026-12-02 --share-idle proportional --format json |
	python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%s:%s+%s=%s" % (r["account"], r["idle_cost"], str(round(float(r["cost"])-float(r["idle_cost"]),2)), r["cost"]) for r in d["rows"]), d["total"]["cost"])')
[ "$ex" = "11.90 6.60 18.50 3.10 1.03 4.13 2.29 1.84 8.80 5.57 14.37" ] && [ "$sh" = "chem:4.73+1.36=6.09 physics:9.64+2.77=12.41 18.50" ] &&
	ok "the worked example of docs/reports.md: $ex; $sh" || fail "worked example: capacity '$ex', showback '$sh'"

h=$("$COLL" capacity --db "sqlite:$T/ex/c.db" --prices "$T/ex/prices.ini" --from 2026-12-01 --to 2026-12-02 --format html |
	sed -n 's/.*id="capacity-cost">\([^<]*\)<.*id="allocated-cost">\([^<]*\)<.*id="idle-cost">\([^<]*\)<.*/\1 \2 \3/p')
[ "$h" = "18.50 4.13 14.37" ] && ok "the example's HTML page: capacity 18.50 = allocated 4.13 + idle 14.37" ||
	fail "example HTML: '$h'"

# the showback HTML with idle: its idle per day, per group and in total against the capacity
# report per day (checked against the model above) and the JSON of the same report
for rule in proportional to:chem; do
	"$COLL" report --db "sqlite:$T/c.db" --prices "$T/prices.ini" --from $FROM --to $TO --by account \
		--period week --share-idle $rule --format html >"$T/idle.html" &&
		"$COLL" report --db "sqlite:$T/c.db" --prices "$T/prices.ini" --from $FROM --to $TO \
			--by account --period week --share-idle $rule --format json >"$T/idle.json" &&
		"$COLL" capacity --db "sqlite:$T/c.db" --prices "$T/prices.ini" --from $FROM --to $TO \
			--by none --period day --format csv >"$T/idle-days.csv" || fail "showback HTML ($rule)"
	python3 - "$T/idle.html" "$T/idle.json" "$T/idle-days.csv" <<'PY' && ok "showback HTML with --share-idle $rule: idle per day, per group and in total" || fail "showback HTML with --share-idle $rule"
import csv, json, re, sys
from html.parser import HTMLParser
html, js = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
days = {r["period"]: r["idle_cost"] for r in csv.DictReader(open(sys.argv[3])) if r["period"] != "total"}
cents = lambda s: int(round(float(s) * 100))
tot = js["total"]
m = re.search(r'id="total-idle">([0-9.]+)&#8239;EUR<', html)
assert m and m.group(1) == tot["idle_cost"], ("headline idle", m and m.group(1), tot["idle_cost"])
m = re.search(r'id="total-cost">([0-9.]+)<', html)
assert m and m.group(1) == tot["cost"], ("headline total", m and m.group(1), tot["cost"])
assert cents(tot["idle_cost"]) == sum(cents(v) for v in days.values()) > 0
# the days chart: each day's idle rect is the capacity report's idle of that day
seen = {}
for g in re.finditer(r'<g class="day" data-day="([0-9-]+)">(.*?)</g>', html):
    a = re.findall(r'data-component="idle_cost" data-amount="([0-9.]+)"', g.group(2))
    seen[g.group(1)] = a[0] if a else "0.00"
assert set(seen) == set(days), (sorted(seen), sorted(days))
for d, v in days.items():
    assert cents(seen[d]) == cents(v), (d, seen[d], v)
assert "idle capacity" in html and html.count('fill="#bab0ac"') > len(days)
# the groups table: each account's idle over the range as the JSON rows sum it
class T(HTMLParser):
    def __init__(s):
        super().__init__(); s.rows, s.cls, s.row = [], None, None
    def handle_starttag(s, tag, a):
        a = dict(a)
        if tag == "tr" and a.get("class") == "group": s.row = {}
        if tag == "td" and s.row is not None: s.cls = a.get("class")
    def handle_endtag(s, tag):
        if tag == "tr" and s.row is not None: s.rows.append(s.row); s.row = None
        if tag == "td": s.cls = None
    def handle_data(s, d):
        if s.row is not None and s.cls: s.row[s.cls] = s.row.get(s.cls, "") + d
t = T(); t.feed(html[html.index('id="groups"'):])
want = {}
for r in js["rows"]:
    want[r["account"]] = want.get(r["account"], 0) + cents(r["idle_cost"])
got = {r["k"]: cents(r["idle_cost"].split("\u202f")[0]) for r in t.rows}
assert got and all(got[k] == want[k] for k in got), (got, want)
print("idle %s EUR over %d days, %d groups" % (tot["idle_cost"], len(days), len(got)))
PY
done

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
