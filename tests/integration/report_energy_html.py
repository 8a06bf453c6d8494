#!/usr/bin/env python3
# Independent model for report_energy_html.sh: a fleet of task.end records with measured,
# partly measured and unmeasured energy, and the checks of the showback HTML (cost, kWh and
# kg CO2e charts) and of shared_cost over the REST API against the JSON report and against
# figures computed here from the raw records and the price sheet alone. Usage:
#   report_energy_html.py gen DIR            writes DIR/ends.ndjson and DIR/prices.ini
#   report_energy_html.py html DOM JSON DIR  the HTML (as Chromium built it) against the JSON
#   report_energy_html.py shared JSON SHEET  shared_cost per row against the model of the
#       sheet's [shared:NAME] sections (match all or account:X; spread even, or proportional
#       or to:ACCOUNT where one row per day takes it)
#   report_energy_html.py periods HTML JSON  a week/month report: each period's days sum to its
#       rows (kWh, kg CO2e)
#   report_energy_html.py sheet N OUT        writes OUT: the sheet of gen with N [shared:]
#       sections (the limit's test) in place of SHARED
import calendar, datetime, json, os, random, re, sys
from collections import defaultdict

FROM, TO = "2026-11-25", "2026-12-08"
ACCOUNTS = ["phys", "chem", "bio", "dark"]  # dark: no energy_j at all (an older agent)
EMPTY_DAY = "2026-12-03"  # no task: cost from shared amounts only, no energy
INTENSITY = 350  # gCO2e/kWh
# [shared:NAME]: cents a month, match, spread (the model below knows these three rules)
SHARED = [("ops", 123456, "all", "even"), ("lic", 31000, "account:phys", "proportional"),
          ("net", -3100, "all", "to:chem")]


def ts(ns):
    d = datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % (ns % 10**9 // 1000)


def days():
    d = datetime.date.fromisoformat(FROM)
    while d.isoformat() < TO:
        yield d.isoformat()
        d += datetime.timedelta(days=1)


def gen(out):
    random.seed(30)
    recs = []
    for i in range(600):
        day = random.choice([d for d in days() if d != EMPTY_DAY])
        midnight = calendar.timegm(datetime.date.fromisoformat(day).timetuple())
        wall_s = random.randint(600, 5 * 3600)
        end = (midnight + random.randint(wall_s + 60, 86399)) * 10**9
        acc = random.choice(ACCOUNTS)
        gpus = random.choice([0, 0, 0, 1])
        cpus = random.choice([1, 2, 4])
        rec = {"schema": "corral.record/v1", "record_id": "en-%05d" % i, "type": "task.end",
               "time": ts(end), "node": random.choice(["n1", "n2", "n3"]),
               "task": {"id": "t%d" % i, "uid": 1000, "account": acc,
                        "user": random.choice(["ann", "ben"]), "job": "j%d" % (i % 5),
                        "labels": {}},
               "request": {"cpus": cpus, "memory_bytes": 1 << 30, "pids": 0, "gpus": gpus,
                           "time_limit_s": 0, "cpu_time_limit_s": 0, "gpu_memory_bytes": 0},
               "usage": {"wall_ns": wall_s * 10**9, "cpu_user_ns": wall_s * 10**9 // 2,
                         "cpu_system_ns": wall_s * 10**8, "memory_peak_bytes": 0,
                         "memory_byte_seconds": float(wall_s) * (1 << 29),
                         "io_read_bytes": random.randint(0, 10**10), "io_write_bytes": 0,
                         "net_rx_bytes": random.randint(0, 10**9), "net_tx_bytes": 0,
                         "gpu_seconds": gpus * wall_s * 0.5, "gpu_memory_peak_bytes": 0,
                         "gpu_util_avg": 0},
               "exit": {"status": "exited", "code": 0, "signal": 0}}
        if acc != "dark":
            e = {"cpu": round(random.uniform(1e5, 5e6), 3), "sources": {"cpu": "rapl"}}
            if random.random() < 0.12:  # DRAM not measured on that node
                e["sources"]["dram"] = "not_measured"
            else:
                e["dram"] = round(random.uniform(1e4, 5e5), 3)
                e["sources"]["dram"] = "rapl"
            e["gpu"] = round(random.uniform(1e5, 2e6), 3) if gpus else 0
            e["sources"]["gpu"] = "nvml" if gpus else "none"
            if "dram" in e:  # no total when a part is not measured
                e["total"] = e["cpu"] + e["dram"] + e["gpu"]
            rec["usage"]["energy_j"] = e
        recs.append(rec)
    with open(os.path.join(out, "ends.ndjson"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out, "prices.ini"), "w") as f:
        f.write("[prices]\ncurrency = EUR\ncpu_core_hour = 0.031\nmemory_gib_hour = 0.0043\n"
                "gpu_hour = 1.70\nio_read_gib = 0.0011\nio_write_gib = 0.0023\nnet_gib = 0.013\n")
        for name, c, match, spread in SHARED:
            f.write("[shared:%s]\namount = %s%d.%02d\nmatch = %s\nspread = %s\n" % (
                name, "-" if c < 0 else "", abs(c) // 100, abs(c) % 100, match, spread))
        f.write("[carbon]\ngco2e_per_kwh = %d\n" % INTENSITY)


def raw(dir_):
    """per day: measured joules by part, unmeasured tasks (from the records alone)"""
    j = defaultdict(lambda: [0.0, 0.0, 0.0])
    un = defaultdict(int)
    for line in open(os.path.join(dir_, "ends.ndjson")):
        r = json.loads(line)
        d = r["time"][:10]
        e = r["usage"].get("energy_j")
        if e is None:
            un[d] += 1
            continue
        if "not_measured" in e["sources"].values():
            un[d] += 1
        for k, p in enumerate(("cpu", "dram", "gpu")):
            j[d][k] += e.get(p, 0)
    return j, un


def day_cents(monthly, day):
    """a monthly amount's cents on one day: even over the month, the rest to the first days"""
    d = datetime.date.fromisoformat(day)
    nd = calendar.monthrange(d.year, d.month)[1]
    sign, a = (-1, -monthly) if monthly < 0 else (1, monthly)
    return sign * (a // nd + (1 if d.day - 1 < a % nd else 0))


def cents(s):
    return int(round(float(s) * 100))


def mwh(s):
    return int(s.replace(".", ""))


def sheet_sections(path):
    """the [shared:NAME] sections of a price sheet: (name, cents a month, match, spread)"""
    out, cur = [], None
    for line in open(path):
        line = line.strip()
        if line.startswith("["):
            cur = None
            if line.startswith("[shared:"):
                cur = {"name": line[8:-1]}
                out.append(cur)
        elif cur is not None and "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            cur[k] = v
    return [(c["name"], int(round(float(c["amount"]) * 100)), c["match"], c["spread"]) for c in out]


def write_sheet(n, path):
    """gen's sheet with n [shared:] sections: every rule the model knows, credits among them"""
    secs = []
    for i in range(n):
        match, spread = [("all", "even"), ("account:phys", "proportional"), ("all", "to:chem"),
                         ("account:bio", "even"), ("account:chem", "to:chem")][i % 5]
        secs.append(("s%02d" % (i + 1), (-1 if i % 7 == 3 else 1) * (1000 + 3713 * i), match, spread))
    with open(path, "w") as f:
        f.write("[prices]\ncurrency = EUR\ncpu_core_hour = 0.031\nmemory_gib_hour = 0.0043\n"
                "gpu_hour = 1.70\nio_read_gib = 0.0011\nio_write_gib = 0.0023\nnet_gib = 0.013\n")
        for name, c, match, spread in secs:
            f.write("[shared:%s]\namount = %s%d.%02d\nmatch = %s\nspread = %s\n" % (
                name, "-" if c < 0 else "", abs(c) // 100, abs(c) % 100, match, spread))


def shared_model(rep, sections):
    """each row's shared_cost by the sections' rules (by account, per day)"""
    want = defaultdict(int)
    for day in days():
        rows = [r for r in rep["rows"] if r["period"] == day and r["account"] not in ("(shared)", "(idle)")]
        left = 0
        for name, monthly, match, spread in sections:
            amount = day_cents(monthly, day)
            sel = [r for r in rows if match == "all" or r["account"] == match.split(":")[1]]
            if spread.startswith("to:"):
                sel = [r for r in sel if r["account"] == spread[3:]]
            if not sel:
                left += amount
                continue
            if spread == "even":
                n = len(sel)
                sgn, a = (-1, -amount) if amount < 0 else (1, amount)
                for i, r in enumerate(sel):
                    want[(day, r["account"])] += sgn * (a // n + (1 if i < a % n else 0))
            else:  # proportional to the cost before shared costs; here one row takes it all
                assert len(sel) == 1
                w = cents(sel[0]["cost"]) - cents(sel[0]["shared_cost"])
                if w <= 0:
                    left += amount
                else:
                    want[(day, sel[0]["account"])] += amount
        if left:
            want[(day, "(shared)")] += left
    return want


def check_shared(json_path, sheet):
    rep = json.load(open(json_path))
    sections = sheet_sections(sheet)
    want = shared_model(rep, sections)
    bad = []
    got = {(r["period"], r["account"]): cents(r["shared_cost"]) for r in rep["rows"]}
    for k in set(want) | set(got):
        if want.get(k, 0) != got.get(k, 0):
            bad.append("%s %s: shared_cost %d, model %d" % (k[0], k[1], got.get(k, 0), want.get(k, 0)))
    total = sum(day_cents(m, d) for d in days() for _, m, _, _ in sections)
    if cents(rep["total"]["shared_cost"]) != total:
        bad.append("total shared_cost %s, model %d" % (rep["total"]["shared_cost"], total))
    for r in rep["rows"] + [rep["total"]]:
        parts = sum(cents(r[k]) for k in ("cpu_cost", "mem_cost", "gpu_cost", "io_cost",
                                          "net_cost", "shared_cost"))
        if parts != cents(r["cost"]):
            bad.append("%s %s: parts %d != cost %s" % (r.get("period"), r.get("account"), parts, r["cost"]))
    print("shared_cost: %d sections, %d rows, total %s (model %d cents)" % (
        len(sections), len(got), rep["total"]["shared_cost"], total))
    for b in bad[:20]:
        print("FAIL", b)
    return not bad


def check_html(dom_path, json_path, dir_):
    src = open(dom_path).read()
    rep = json.load(open(json_path))
    tot = rep["total"]
    j, un = raw(dir_)
    bad = []

    def check(c, what):
        if not c:
            bad.append(what)

    def chart(cid):
        i = src.index('id="%s"' % cid)
        return src[i:src.index("</svg>", i)]

    # independent truth: the records' joules (model) and the price sheet's intensity
    all_j = sum(sum(v) for v in j.values())
    check(mwh(tot["energy_kwh"]) == round(all_j / 3.6), "total %s kWh, records %.3f J" % (tot["energy_kwh"], all_j))
    want_g = sum(round(sum(v) / 3.6e6 * INTENSITY) for v in j.values())
    check(mwh(tot["co2e_kg"]) == want_g, "total %s kg, records x intensity %d g" % (tot["co2e_kg"], want_g))
    check(int(tot["energy_unmeasured_tasks"]) == sum(un.values()), "unmeasured total")
    # rows per day and per account, summed from the JSON
    COMP = ["cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost", "idle_cost", "shared_cost"]
    byday, bygroup = defaultdict(lambda: defaultdict(int)), defaultdict(lambda: defaultdict(int))
    for r in rep["rows"]:
        for agg in (byday[r["period"]], bygroup[r["account"]]):
            for c in COMP + ["cost"]:
                if c in r:
                    agg[c] += cents(r[c])
            agg["mwh"] += mwh(r["energy_kwh"])
            agg["g"] += mwh(r["co2e_kg"])
            agg["un"] += int(r["energy_unmeasured_tasks"])
            agg["rows"] += 1
    # cost per day: shared costs stacked; the parts sum to the day's cost, equal the JSON's,
    # and the day's shared part is the sheet's amounts for that day (model)
    n = 0
    for day, body in re.findall(r'<g class="day" data-day="([0-9-]+)">(.*?)</g>', chart("days-chart"), re.S):
        n += 1
        parts = dict((c, cents(a)) for c, a in re.findall(r'data-component="(\w+)" data-amount="(-?[0-9.]+)"', body))
        m = re.search(r"<title>[0-9-]+: (-?\d+\.\d\d)", body)
        check(m and cents(m.group(1)) == byday[day]["cost"], "day %s cost" % day)
        check(sum(parts.values()) == byday[day]["cost"], "day %s: parts %s != cost %d" % (day, parts, byday[day]["cost"]))
        for c, v in parts.items():
            check(v == byday[day][c], "day %s %s %d, JSON %d" % (day, c, v, byday[day][c]))
        sh = sum(day_cents(mm, day) for _, mm, _, _ in SHARED)
        check(byday[day]["shared_cost"] == sh, "day %s shared %d, sheet %d" % (day, byday[day]["shared_cost"], sh))
        check(parts.get("shared_cost", 0) == (sh if sh > 0 else 0), "day %s shared part %s, sheet %d" % (day, parts.get("shared_cost"), sh))
    check(n == 13, "cost days %d" % n)
    # cost per group: the shared part stacked too
    ng = 0
    for body in re.findall(r'<g class="group">(.*?)</g>', chart("groups-chart"), re.S):
        key = re.search(r"<text[^>]*>([^<]*)</text>", body).group(1)
        parts = dict((c, cents(a)) for c, a in re.findall(r'data-component="(\w+)" data-amount="(-?[0-9.]+)"', body))
        g = bygroup[key]
        check(sum(parts.values()) == g["cost"], "group %s: parts %s != cost %d" % (key, parts, g["cost"]))
        for c, v in parts.items():
            check(v == g[c], "group %s %s" % (key, c))
        check(key == "(shared)" or parts.get("shared_cost", 0) == g["shared_cost"], "group %s: shared not stacked" % key)
        ng += 1
    check(ng == len(bygroup), "cost groups %d of %d" % (ng, len(bygroup)))

    def bars(cid, cls):
        out = []
        for attrs, body in re.findall(r'<g class="%s"([^>]*)>(.*?)</g>' % cls, chart(cid), re.S):
            a = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', attrs))
            parts = dict(re.findall(r'data-part="(\w+)" data-amount="([0-9.]+)"', body))
            out.append((a, parts, body))
        return out

    for unit, key, conv in (("kwh", "mwh", mwh), ("co2e", "g", mwh)):
        # per day: the day's total equals the JSON's rows of that day exactly, its parts sum
        # to it; unmeasured days are marked
        tsum = 0
        dd = bars("%s-days-chart" % unit, "eday")
        check(len(dd) == 13, "%s days %d" % (unit, len(dd)))
        for a, parts, body in dd:
            day, total = a["data-day"], conv(a["data-total"])
            tsum += total
            check(total == byday[day][key], "%s %s: %d, JSON rows %d" % (unit, day, total, byday[day][key]))
            check(sum(conv(v) for v in parts.values()) == total, "%s %s: parts %s" % (unit, day, parts))
            check(int(a["data-unmeasured"]) == un.get(day, 0) == byday[day]["un"], "%s %s unmeasured" % (unit, day))
            check(('class="unmeasured"' in body) == (un.get(day, 0) > 0), "%s %s: marker" % (unit, day))
            if unit == "kwh":  # against the records: within the rows' rounding
                ex = sum(j[day]) / 3.6
                check(abs(total - ex) <= byday[day]["rows"], "kwh %s: %d mWh, records %.1f" % (day, total, ex))
                for k, p in enumerate(("cpu", "dram", "gpu")):  # parts: floor or ceil of their share
                    share = total * j[day][k] / sum(j[day]) if sum(j[day]) else 0
                    check(abs(conv(parts.get(p, "0")) - share) < 1, "kwh %s %s: %s vs %.2f" % (day, p, parts.get(p), share))
        check(tsum == conv(tot["energy_kwh" if unit == "kwh" else "co2e_kg"]), "%s days sum %d" % (unit, tsum))
        # per group: equals the group's JSON rows; a wholly unmeasured group says so (never 0)
        gg = bars("%s-groups-chart" % unit, "egroup")
        check(len(gg) == len(bygroup), "%s groups %d" % (unit, len(gg)))
        gsum = 0
        for a, parts, body in gg:
            name = re.search(r"<text[^>]*>([^<]*)</text>", body).group(1)
            amount = re.search(r'<text class="eamount"[^>]*>([^<]*)</text>', body).group(1)
            total = conv(a["data-total"])
            gsum += total
            g = bygroup[name]
            check(total == g[key], "%s %s: %d, JSON %d" % (unit, name, total, g[key]))
            check(sum(conv(v) for v in parts.values()) == total, "%s %s parts" % (unit, name))
            check(int(a["data-unmeasured"]) == g["un"], "%s %s unmeasured" % (unit, name))
            if name == "dark":
                check(total == 0 and amount.startswith("not measured (") and not parts,
                      "%s dark: %r (a plain 0?)" % (unit, amount))
            elif g["un"]:
                check(amount.endswith("(%d task(s) not measured)" % g["un"]) and "*" in amount, "%s %s: %r" % (unit, name, amount))
            else:
                check("*" not in amount and "not measured" not in amount, "%s %s: %r" % (unit, name, amount))
        check(gsum == conv(tot["energy_kwh" if unit == "kwh" else "co2e_kg"]), "%s groups sum" % unit)
    check(re.search(r'id="unmeasured">%d task' % sum(un.values()), src), "unmeasured note")
    print("html: %d days, %d groups; total %s EUR (shared %s), %s kWh, %s kg CO2e, %d tasks unmeasured" % (
        n, ng, tot["cost"], tot["shared_cost"], tot["energy_kwh"], tot["co2e_kg"], sum(un.values())))
    for b in bad[:20]:
        print("FAIL", b)
    return not bad


def check_periods(html_path, json_path):
    """a week or month report: each day's bar is its period's share, the days of a period sum
    to its rows exactly (kWh and kg CO2e)"""
    src = open(html_path).read()
    rep = json.load(open(json_path))
    bad = []
    for unit, field in (("kwh", "energy_kwh"), ("co2e", "co2e_kg")):
        i = src.index('id="%s-days-chart"' % unit)
        chart = src[i:src.index("</svg>", i)]
        days = {d: mwh(t) for d, t in re.findall(r'<g class="eday" data-day="([0-9-]+)" data-total="([0-9.]+)"', chart)}
        periods = defaultdict(lambda: [None, None, 0])
        for r in rep["rows"]:
            p = periods[r["period"]]
            p[0], p[1] = r["first_day"], r["last_day"]
            p[2] += mwh(r[field])
        for name, (first, last, want) in periods.items():
            got = sum(v for d, v in days.items() if first <= d <= last)
            if got != want:
                bad.append("%s %s: days %d, rows %d" % (unit, name, got, want))
        if sum(days.values()) != mwh(rep["total"][field]):
            bad.append("%s: days sum %d, total %s" % (unit, sum(days.values()), rep["total"][field]))
    print("%s periods: %d, their days' kWh and kg CO2e sum to their rows" % (rep["period"], len(periods)))
    for b in bad:
        print("FAIL", b)
    return not bad


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif sys.argv[1] == "html":
        sys.exit(0 if check_html(*sys.argv[2:5]) else 1)
    elif sys.argv[1] == "shared":
        sys.exit(0 if check_shared(*sys.argv[2:4]) else 1)
    elif sys.argv[1] == "periods":
        sys.exit(0 if check_periods(*sys.argv[2:4]) else 1)
    elif sys.argv[1] == "sheet":
        write_sheet(int(sys.argv[2]), sys.argv[3])
