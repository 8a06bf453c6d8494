#!/bin/bash
# Showback report end to end: generated task.end records POSTed to the collector (SQLite),
# then `corral-collector report --format csv` and GET /v1/reports/showback checked against an
# independent computation in python3 over the same records (per account, to the cent), and
# every grouping checked to sum to the grand total. HTML checked in headless chromium when
# it is installed (else that part is skipped with a message).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
COLL=$O/corral-collector
[ -x "$COLL" ] || { echo "FAIL: $COLL not built (make O=$O all)"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl(1) missing"; exit 1; }
T=$(mktemp -d /tmp/collector_report.XXXXXX)
CPID=
cleanup() { [ -n "$CPID" ] && { kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; }; rm -rf "$T"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { echo "ok: $*"; }

N1=tok-node-n1-0123456789abcdef
RD=tok-reader-0123456789abcdef
printf 'node n1 %s\nreader ops %s\n' "$N1" "$RD" > "$T/tokens"
chmod 600 "$T/tokens"
cat > "$T/prices.ini" <<'INI'
[prices]
currency = EUR
cpu_core_hour = 0.031
memory_gib_hour = 0.0043
gpu_hour = 1.70
io_read_gib = 0.0011
io_write_gib = 0.0023
net_gib = 0.013
INI

# generated records: 2000 tasks over 10 days, 7 accounts, 4 users, a project label
python3 - "$T/recs.ndjson" <<'PY'
import json, random, sys
random.seed(5)
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
               "time": t, "node": "n1",
               "task": {"id": "t%d" % i, "job": "j", "user": random.choice(users), "uid": 1000,
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
               "exit": {"status": "exited" if random.random() < 0.9 else "oom_killed",
                        "code": 0, "signal": 0}}
        f.write(json.dumps(rec) + "\n")
PY

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DB="sqlite:$T/c.db"
"$COLL" serve --listen "127.0.0.1:$PORT" --db "$DB" --tokens "$T/tokens" \
	--prices "$T/prices.ini" >"$T/log" 2>&1 &
CPID=$!
up=0
for _ in $(seq 200); do
	curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && { up=1; break; }
	kill -0 "$CPID" 2>/dev/null || break
	sleep 0.05
done
[ $up = 1 ] || { cat "$T/log"; echo "FAIL: collector did not come up"; exit 1; }

CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $N1" \
	-H 'Content-Type: application/x-ndjson' --data-binary "@$T/recs.ndjson" \
	"http://127.0.0.1:$PORT/v1/records")
[ "$CODE" = 200 ] && ok "2000 records ingested" || fail "ingest: $CODE $(head -c 300 "$T/resp")"

R=(--db "$DB" --prices "$T/prices.ini" --from 2026-11-01 --to 2026-12-01)
"$COLL" report "${R[@]}" --by account --format csv > "$T/acct.csv" || fail "report csv"

# independent computation: per (day, account, user) cell, each component rounded to the cent
python3 - "$T/recs.ndjson" "$T/acct.csv" <<'PY' && ok "CSV per-account costs match python3" || fail "CSV vs python3"
import csv, json, sys
from collections import defaultdict
P = dict(cpu=0.031, mem=0.0043, gpu=1.70, r=0.0011, w=0.0023, net=0.013)
G = 1073741824.0
cells = defaultdict(lambda: [0.0] * 6)
for line in open(sys.argv[1]):
    d = json.loads(line)
    u, q = d["usage"], d["request"]
    wall = u["wall_ns"] / 1e9
    cpu = (u["cpu_user_ns"] + u["cpu_system_ns"]) / 1e9
    creq, mreq, greq = q["cpus"] * wall, q["memory_bytes"] * wall, q["gpus"] * wall
    c = cells[(d["time"][:10], d["task"]["account"], d["task"]["user"])]
    c[0] += max(creq, cpu); c[1] += max(mreq, u["memory_byte_seconds"])
    c[2] += max(greq, u["gpu_seconds"]); c[3] += u["io_read_bytes"]; c[4] += u["io_write_bytes"]
    c[5] += u["net_rx_bytes"] + u["net_tx_bytes"]
want = defaultdict(int)
for (day, acc, user), c in cells.items():
    comps = [c[0] / 3600 * P["cpu"], c[1] / 3600 / G * P["mem"], c[2] / 3600 * P["gpu"],
             c[3] / G * P["r"] + c[4] / G * P["w"], c[5] / G * P["net"]]
    want[acc] += sum(round(x * 100) for x in comps)
got, total = {}, None
for row in csv.DictReader(open(sys.argv[2])):
    cents = round(float(row["cost"]) * 100)
    if row["period"] == "total":
        total = cents
    else:
        got[row["account"]] = cents
bad = [(a, want[a], got.get(a)) for a in want if got.get(a) != want[a]]
# float summation order may move a cell across a half cent: allow 1 cent per account
if any(g is None or abs(g - w) > 1 for a, w, g in bad):
    print("mismatch:", bad); sys.exit(1)
if total != sum(got.values()):
    print("total", total, "!= sum", sum(got.values())); sys.exit(1)
print("accounts %d, total %.2f EUR, exact matches %d/%d" % (len(got), total / 100,
      len(got) - len(bad), len(got)))
PY

# every grouping and period sums to the same grand total, to the cent
for by in account user account,user label:project user,label:project; do
	for period in day week month all; do
		"$COLL" report "${R[@]}" --by "$by" --period "$period" --format csv > "$T/g.csv" ||
			{ fail "report --by $by --period $period"; continue; }
		python3 - "$T/g.csv" "$T/acct.csv" <<'PY' || fail "--by $by --period $period does not reconcile"
import csv, sys
def load(p):
    rows = list(csv.DictReader(open(p)))
    tot = [r for r in rows if r["period"] == "total"][0]
    return rows, tot
rows, tot = load(sys.argv[1])
_, ref = load(sys.argv[2])
for col in ("cost", "waste", "cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost"):
    s = sum(round(float(r[col]) * 100) for r in rows if r["period"] != "total")
    if s != round(float(tot[col]) * 100) or tot["cost"] != ref["cost"]:
        print(col, s, tot[col], ref["cost"]); sys.exit(1)
PY
	done
done
[ $fails = 0 ] && ok "5 groupings x 4 periods reconcile to the grand total"

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
	"http://127.0.0.1:$PORT/v1/reports/showback?from=2026-11-01&to=2026-12-01&by=node")
[ "$CODE" = 400 ] && grep -q '"by: ' "$T/resp" && ok "bad by= answered 400 naming it" ||
	fail "bad by: $CODE $(cat "$T/resp")"

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

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; grep -i error "$T/log" | head
exit 1
