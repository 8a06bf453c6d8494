#!/bin/bash
# The HTML showback report rendered by headless Chromium: the fleet of report_reconcile.py
# (3,000 tasks) on SQLite, reports by account (5 groups), by all five dimensions (1,524 groups,
# 4,129 rows: the top 10 and "other", the rows table cut at 2,000) and by account,job (45
# groups), per day, as HTML and JSON; the DOM Chromium builds (--dump-dom) is checked against
# the JSON: the headline total and waste, every group's cost components, cost, waste and
# efficiency, the "other" bucket (the rest, summing exactly to the total), the total row,
# every day's stacked bar per component, the currency on every amount, the header (window,
# generation time, price sheet, nodes, efficiency rule), and no script or external resource.
# A screenshot is kept as a test artifact: $O/test-artifacts/report_html.png (not in the repo).
# Skipped (77) without chromium.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; }
coll_init report_html
coll_tokens n1 n2 n3
coll_prices "$T/prices.ini"
python3 tests/integration/report_reconcile.py gen "$T" || { echo "FAIL: generating the fleet"; exit 1; }
PORT=$(free_port)
start_collector "sqlite:$T/c.db" "$PORT" || fail "collector did not come up"
for f in ends samples; do
	for n in n1 n2 n3; do
		grep -F "\"node\": \"$n\"" "$T/$f.ndjson" | split -l 500 - "$T/batch."
		for b in "$T"/batch.*; do
			code=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/x-ndjson' \
				-H "Authorization: Bearer tok-node-$n-0123456789abcdef" --data-binary "@$b" \
				"http://127.0.0.1:$PORT/v1/records")
			[ "$code" = 200 ] || fail "ingest $f ($n): $code"
			rm -f "$b"
		done
	done
done
stop_collector
mkdir -p "$O/test-artifacts"
for by in account account,user,job,node,label:project account,job; do
	R=(--db "sqlite:$T/c.db" --prices "$T/prices.ini" --from 2026-11-25 --to 2026-12-08 --by "$by" --period day)
	"$COLL" report "${R[@]}" --format json > "$T/r.json" || fail "json report"
	"$COLL" report "${R[@]}" --format html > "$T/r.html" || fail "html report"
	! grep -qi '<script\|src=\|href=\|url(' "$T/r.html" && ok "--by $by: no script, no external resource" ||
		fail "--by $by: the HTML refers to something outside it"
	timeout 60 "$CHROME" --headless --no-sandbox --disable-gpu --dump-dom "file://$T/r.html" \
		> "$T/dom.html" 2>/dev/null || fail "chromium --dump-dom"
	python3 - "$T/dom.html" "$T/r.json" <<'PY' && ok "--by $by: the numbers Chromium shows equal the JSON report's" || fail "--by $by: DOM vs JSON"
import json, re, sys
from html.parser import HTMLParser
from collections import defaultdict

class Dom(HTMLParser):
    """elements as (tag, attrs, text) with the text of their whole subtree"""
    def __init__(self):
        super().__init__()
        self.stack, self.out = [], []
    def handle_starttag(self, tag, attrs):
        if tag in ("meta", "rect", "line", "br"):
            self.out.append((tag, dict(attrs), "", [s[0] for s in self.stack]))
            return
        self.stack.append([tag, dict(attrs), []])
    def handle_endtag(self, tag):
        while self.stack:
            t, a, txt = self.stack.pop()
            text = "".join(txt)
            self.out.append((t, a, text, [s[0] for s in self.stack]))
            if self.stack:
                self.stack[-1][2].append(text)
            if t == tag:
                break
    def handle_data(self, d):
        if self.stack:
            self.stack[-1][2].append(d)

dom = Dom()
dom.feed(open(sys.argv[1]).read())
rep = json.load(open(sys.argv[2]))
cur = rep["currency"]
NB = "\u202f"
def cents(s):
    return int(round(float(s) * 100))
def amt(text):
    m = re.fullmatch(r"\s*(\d+\.\d\d)" + NB + re.escape(cur) + r"\s*", text)
    assert m, "amount without its currency: %r" % text
    return cents(m.group(1))
def by_id(i):
    return [e for e in dom.out if e[1].get("id") == i][0]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)

tot = rep["total"]
check(by_id("total-cost")[2] == tot["cost"], "total-cost %s vs %s" % (by_id("total-cost")[2], tot["cost"]))
check(amt(by_id("total-waste")[2]) == cents(tot["waste"]), "total-waste")
hdr = by_id("header")[2]
for want in ("2026-11-25 00:00 UTC to 2026-12-08 00:00 UTC", "prices.ini", "EUR", "3: n1, n2, n3",
             "max(requested, used)", "tasks_without_request", "generated"):
    check(want in hdr, "header lacks %r" % want)
check(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", by_id("generated")[2]), "generation time")

# groups: the JSON rows summed per key
dims = rep["by"]
groups = defaultdict(lambda: defaultdict(float))
COMP = ["cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost", "cost", "waste"]
for r in rep["rows"]:
    g = groups[" / ".join(r[d] for d in dims)]
    for c in COMP:
        g[c] += cents(r[c])
    for c in ("tasks_ended", "tasks_without_request", "running_tasks", "cpu_core_h", "cpu_used_core_h",
              "mem_gib_h", "mem_used_gib_h", "gpu_h", "gpu_used_h"):
        g[c] += float(r[c])
    # active over the range: ended + running + those running on past the range's last day
    # (the last day's row: its active count less its ended and running ones)
    if r["last_day"] == tot["last_day"]:
        g["carried"] += int(r["tasks_active"]) - int(r["tasks_ended"]) - int(r["running_tasks"])
for g in groups.values():
    g["tasks_active"] = g["tasks_ended"] + g["running_tasks"] + g["carried"]
# re-parse the groups table alone, row by row
src = open(sys.argv[1]).read()
gt = src[src.index('<table id="groups"'):]
gt = gt[:gt.index("</table>")]
shown = 0
other_n = 0
sum_top = defaultdict(int)
for tr in re.findall(r'<tr class="(group|other|total)">(.*?)</tr>', gt, re.S):
    cls, body = tr
    td = [re.sub(r"<[^>]+>", "", x) for x in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
    td = [x.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&#39;", "'") for x in td]
    key, nums = td[0], td[1:]
    money_cells = dict(zip(COMP[:5] + ["cost", "waste"], [amt(x) for x in nums[4:11]]))
    effs = [float(x.rstrip("%")) for x in nums[11:14]]
    check(all(0 <= e <= 100 for e in effs), "%s: efficiency %s" % (key, effs))
    if cls == "group":
        g = groups.get(key)
        check(g is not None, "group %r not in the JSON" % key)
        if g is None:
            continue
        shown += 1
        for c, v in money_cells.items():
            check(v == g[c], "%s %s: %d cents, JSON %d" % (key, c, v, g[c]))
            sum_top[c] += v
        check(int(nums[0]) == g["tasks_ended"] and int(nums[1]) == g["tasks_active"]
              and int(nums[2]) == g["tasks_without_request"]
              and int(nums[3]) == g["running_tasks"], "%s counts" % key)
        check(g["cost"] == 0 or g["tasks_active"] > 0, "%s: cost without an active task" % key)
        for i, (u, ch) in enumerate((("cpu_used_core_h", "cpu_core_h"), ("mem_used_gib_h", "mem_gib_h"),
                                     ("gpu_used_h", "gpu_h"))):
            want = 100 * (g[u] / g[ch] if g[ch] > 0 else 1)
            check(abs(effs[i] - want) <= 0.051, "%s efficiency %d: %s, JSON %.3f" % (key, i, effs[i], want))
    elif cls == "other":
        other_n = int(re.search(r"other \((\d+) groups\)", key).group(1))
        for c, v in money_cells.items():
            check(v == cents(tot[c]) - sum_top[c], "other %s: %d, total - top = %d" % (c, v, cents(tot[c]) - sum_top[c]))
    else:
        for c, v in money_cells.items():
            check(v == cents(tot[c]), "total %s" % c)
check(shown + other_n == len(groups), "groups shown %d + other %d != %d" % (shown, other_n, len(groups)))
check(shown == min(len(groups), 10 if len(groups) > 11 else len(groups)), "top groups shown: %d" % shown)
# the top groups are the most expensive ones
costs = sorted((g["cost"] for g in groups.values()), reverse=True)
check(sum_top["cost"] == sum(costs[:shown]), "top groups are not the most expensive")

# days: every bar's title and its components equal the JSON rows of that day
days = defaultdict(lambda: defaultdict(int))
for r in rep["rows"]:
    for c in COMP:
        days[r["period"]][c] += cents(r[c])
dc = src[src.index('id="days-chart"'):]
dc = dc[:dc.index("</svg>")]
nday = 0
for day, body in re.findall(r'<g class="day" data-day="([0-9-]+)">(.*?)</g>', dc, re.S):
    nday += 1
    title = re.search(r"<title>(.*?)</title>", body).group(1)
    m = re.match(r"[0-9-]+: (\d+\.\d\d)" + NB + cur, title)
    check(m and cents(m.group(1)) == days[day]["cost"], "day %s: %s vs %d" % (day, title, days[day]["cost"]))
    for comp, a in re.findall(r'data-component="(\w+)" data-amount="([0-9.]+)"', body):
        check(cents(a) == days[day][comp], "day %s %s" % (day, comp))
check(nday == 13, "days in the chart: %d" % nday)
# every amount in the SVG text and the tables carries the currency
for e in dom.out:
    if e[0] in ("td",) and e[1].get("class") in COMP + ["cost", "waste"]:
        amt(e[2])
    if e[0] == "text" and e[1].get("class") in ("amount", "waste"):
        amt(e[2].replace("waste ", ""))
if fails:
    print("\n".join(fails[:20]))
    sys.exit(1)
print("%d groups (%d shown, %d in other), %d days, total %s %s" % (len(groups), shown, other_n, nday, tot["cost"], cur))
PY
done
# (a second try with more time: a browser start can take over a minute on a loaded host)
shot=
for limit in 60 180; do
	rm -f "$O/test-artifacts/report_html.png"
	timeout "$limit" "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars \
		--window-size=1280,2600 --screenshot="$O/test-artifacts/report_html.png" \
		"file://$T/r.html" >"$T/chrome.log" 2>&1
	rc=$?
	[ -s "$O/test-artifacts/report_html.png" ] && { shot=1; break; }
done
[ -n "$shot" ] && ok "screenshot: $O/test-artifacts/report_html.png" ||
	fail "chromium screenshot (rc $rc): $(tail -n 3 "$T/chrome.log")"

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
