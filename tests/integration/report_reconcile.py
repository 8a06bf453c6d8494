#!/usr/bin/env python3
# Independent model of the showback report (docs/reports.md) for report_reconcile.sh. Shares
# nothing with the collector: it reads the raw JSON records the test wrote and recomputes every
# row. Usage:
#   report_reconcile.py gen DIR                  writes DIR/{ends,samples}.ndjson
#   report_reconcile.py check DIR FROM TO OUT... compares each OUT/<by>@<period>.csv
#   report_reconcile.py shared FROM TO BASE OUT  checks OUT/<by>@<period>.csv (the price sheet
#       with SHARED's sections) against BASE/<by>@<period>.csv (without): shared_cost per row
import csv, datetime, json, math, os, random, sys
from collections import defaultdict

DAY = 86400 * 10**9
GIB = 1073741824.0
PRICE = dict(cpu=0.031, mem=0.0043, gpu=1.70, io_r=0.0011, io_w=0.0023, net=0.013)
NONE = "(none)"
ACCOUNTS = ["physics", "chem", "bio", "", None, "+ops"]  # blank, missing, a formula
USERS = ["alice", "bob", "carol", ""]
PROJECTS = ["lattice", "qcd", "fold", "", None]  # blank label, missing label
NODES = ["n1", "n2", "n3"]


def ts(ns):
    d = datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % (ns % 10**9 // 1000)


def gen(out):
    random.seed(33)
    base = int(datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc).timestamp()) * 10**9
    ends, samples = [], []
    for i in range(3000):
        wall_s = random.choice([random.randint(1, 600), random.randint(600, 30000),
                                random.randint(30000, 3 * 86400)])
        wall = wall_s * 10**9 + random.randint(0, 999999) * 1000
        end = base + random.randint(0, 12 * 86400) * 10**9 + random.randint(0, 999999) * 1000
        cpus = random.choice([0, 0.5, 1, 2, 4, 8])  # 0: no CPU request
        mem = random.choice([0, 1 << 28, 1 << 30, 4 << 30])  # 0: no memory request
        gpus = random.choice([0] * 6 + [1, 2])
        cpu_ns = int(wall * max(cpus, 1) * random.uniform(0, 1.6))  # some use more than asked
        task = {"id": "t%d" % i, "uid": 1000}
        acc = random.choice(ACCOUNTS)
        if acc is not None:
            task["account"] = acc
        task["user"] = random.choice(USERS)
        if random.random() < 0.9:
            task["job"] = "job%d" % random.randint(0, 7)
        proj = random.choice(PROJECTS)
        task["labels"] = {} if proj is None else {"project": proj}
        rec = {"schema": "corral.record/v1", "record_id": "e-%06d" % i, "type": "task.end",
               "time": ts(end), "node": random.choice(NODES), "task": task,
               "request": {"cpus": cpus, "memory_bytes": mem, "pids": 0, "gpus": gpus,
                           "time_limit_s": 0, "cpu_time_limit_s": 0, "gpu_memory_bytes": 0},
               "usage": {"wall_ns": wall, "cpu_user_ns": cpu_ns // 2,
                         "cpu_system_ns": cpu_ns - cpu_ns // 2, "memory_peak_bytes": 0,
                         "memory_byte_seconds": float(random.randint(0, 6 << 30)) * wall / 1e9,
                         "io_read_bytes": random.randint(0, 10**11),
                         "io_write_bytes": random.randint(0, 10**10),
                         "net_rx_bytes": random.randint(0, 10**10),
                         "net_tx_bytes": random.randint(0, 10**9),
                         "gpu_seconds": gpus * wall / 1e9 * random.uniform(0, 1),
                         "gpu_memory_peak_bytes": 0, "gpu_util_avg": 0},
               "exit": {"status": random.choice(["exited"] * 8 + ["oom_killed", "time_limit",
                                                                  "signaled"]),
                        "code": 0, "signal": 0}}
        ends.append(rec)
        if i < 90:  # still running: one or two samples (the later one wins), no end
            run = json.loads(json.dumps(rec))
            run["task"]["id"] = "run%d" % i
            del run["exit"]
            run["type"] = "task.sample"
            for k in range(1 + i % 2):
                s = json.loads(json.dumps(run))
                s["record_id"] = "s-%d-%d" % (i, k)
                s["time"] = ts(end - (1 - k) * 3600 * 10**9)
                s["usage"]["wall_ns"] = wall - (1 - k) * 3600 * 10**9 if wall > 4000 * 10**9 else wall
                samples.append(s)
        elif i < 120:  # a sample of an ended task, arriving after its end: ignored
            s = json.loads(json.dumps(rec))
            s["record_id"] = "late-%d" % i
            s["type"] = "task.sample"
            del s["exit"]
            samples.append(s)
    for name, recs in (("ends", ends), ("samples", samples)):
        with open(os.path.join(out, name + ".ndjson"), "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")


def parse_ns(t):
    d = datetime.datetime.strptime(t[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp()) * 10**9 + int(t[20:26]) * 1000


def day_of(ns):
    return datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc).strftime("%Y-%m-%d")


def day_ns(day):
    return int(datetime.datetime.strptime(day, "%Y-%m-%d").replace(
        tzinfo=datetime.timezone.utc).timestamp()) * 10**9


def quantities(r):
    u, q = r["usage"], r["request"]
    wall = u["wall_ns"] / 1e9
    cpu = (u["cpu_user_ns"] + u["cpu_system_ns"]) / 1e9
    mem = u["memory_byte_seconds"]
    gpu = u["gpu_seconds"]
    return {"cpu_ch": max(q["cpus"] * wall, cpu), "cpu": cpu,
            "mem_ch": max(q["memory_bytes"] * wall, mem), "mem": mem,
            "gpu_ch": max(q["gpus"] * wall, gpu), "gpu": gpu,
            "io_r": u["io_read_bytes"], "io_w": u["io_write_bytes"],
            "net": u["net_rx_bytes"] + u["net_tx_bytes"]}


def money(q):
    m = {"cpu_cost": q["cpu_ch"] / 3600 * PRICE["cpu"],
         "mem_cost": q["mem_ch"] / 3600 / GIB * PRICE["mem"],
         "gpu_cost": q["gpu_ch"] / 3600 * PRICE["gpu"],
         "io_cost": q["io_r"] / GIB * PRICE["io_r"] + q["io_w"] / GIB * PRICE["io_w"],
         "net_cost": q["net"] / GIB * PRICE["net"]}
    m["waste"] = (max(0, q["cpu_ch"] - q["cpu"]) / 3600 * PRICE["cpu"] +
                  max(0, q["mem_ch"] - q["mem"]) / 3600 / GIB * PRICE["mem"] +
                  max(0, q["gpu_ch"] - q["gpu"]) / 3600 * PRICE["gpu"])
    return m


COMPONENTS = ["cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost", "waste"]
QKEYS = ["cpu_ch", "cpu", "mem_ch", "mem", "gpu_ch", "gpu", "io_r", "io_w", "net"]
COUNTS = ["tasks_ended", "tasks_active", "tasks_without_request", "running_tasks", "failed_tasks", "oom_killed",
          "time_limit"]


def shares(ends, samples, frm, to):
    """(day, fraction, record, counted, running) for every day a task ran inside [frm, to)."""
    a_ns, b_ns = day_ns(frm), day_ns(to)
    ended = {(r["node"], r["task"]["id"]) for r in ends}
    out = []
    for r in ends:
        end = parse_ns(r["time"])
        wall = r["usage"]["wall_ns"]
        start = end - wall
        d = start // DAY * DAY
        while d < end:
            ov = min(end, d + DAY) - max(start, d)
            day = day_of(d)
            if ov > 0 and frm <= day < to:
                out.append((day, ov / wall, r, day == day_of(end - 1), False))
            d += DAY
    latest = {}
    for s in samples:
        k = (s["node"], s["task"]["id"])
        if k in ended:
            continue
        if k not in latest or parse_ns(s["time"]) > parse_ns(latest[k]["time"]):
            latest[k] = s
    for s in latest.values():
        t = parse_ns(s["time"])
        wall = s["usage"]["wall_ns"]
        a, b = max(t - wall, a_ns), min(t, b_ns)
        if b <= a:
            continue
        d = a // DAY * DAY
        while d < b:
            ov = min(b, d + DAY) - max(a, d)
            out.append((day_of(d), ov / wall, s, False, d + DAY >= b))
            d += DAY
    return out


def period(p, day, frm, to):
    last = (datetime.date.fromisoformat(to) - datetime.timedelta(days=1)).isoformat()
    dd = datetime.date.fromisoformat(day)
    if p == "day":
        lab, first, lst = day, day, day
    elif p == "week":
        y, w, wd = dd.isocalendar()
        lab = "%04d-W%02d" % (y, w)
        first = (dd - datetime.timedelta(days=wd - 1)).isoformat()
        lst = (dd + datetime.timedelta(days=7 - wd)).isoformat()
    elif p == "month":
        lab = day[:7]
        first = day[:7] + "-01"
        nxt = (dd.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
        lst = (nxt - datetime.timedelta(days=1)).isoformat()
    else:
        lab, first, lst = "%s..%s" % (frm, last), frm, last
    return lab, max(first, frm), min(lst, last)


def dim(r, d):
    t = r["task"]
    if d == "account":
        v = t.get("account", "")
    elif d == "user":
        v = t.get("user", "")
    elif d == "job":
        v = t.get("job", "")
    elif d == "node":
        v = r["node"]
    else:
        v = t.get("labels", {}).get(d[6:], "")
    return v if v else NONE


def csv_text(v):
    return "'" + v if v and v[0] in "=+-@\t\r" else v


def cents(x):
    return int(math.floor(x * 100 + 0.5))


def weight(money):
    """collector: report_weight, hundredths of a cent, half away from zero"""
    return max(0, int(math.floor(money * 10000 + 0.5)))


def apportion(total, w):
    """Largest remainder in integers, ties to the lower index (docs/reports.md)."""
    s = sum(w)
    if s == 0 or total <= 0:
        return [total] + [0] * (len(w) - 1)
    out = [total * x // s for x in w]
    rem = [total * x % s for x in w]
    for i in sorted(range(len(w)), key=lambda i: (-rem[i], i))[:total - sum(out)]:
        out[i] += 1
    return out


def month_mode(dims, p, frm, to):
    """The whole months read from rollup_job_month: by job or node, no label, per month/all."""
    if not any(d in ("job", "node") for d in dims) or any(d.startswith("label:") for d in dims) \
            or p not in ("month", "all"):
        return None
    y, m = int(frm[:4]), int(frm[5:7])
    if frm[8:] != "01":
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    lo, hi = "%04d-%02d" % (y, m), to[:7]
    return (lo, hi) if lo < hi else None


def check(dir_, frm, to, outdir):
    ends = [json.loads(l) for l in open(os.path.join(dir_, "ends.ndjson"))]
    samples = [json.loads(l) for l in open(os.path.join(dir_, "samples.ndjson"))]
    sh = shares(ends, samples, frm, to)
    # the rounding unit: each (day, account, user) cell's component, half away from zero
    cellq = defaultdict(lambda: defaultdict(float))
    for day, f, r, _, _ in sh:
        q = quantities(r)
        c = cellq[(day, r["task"].get("account", ""), r["task"].get("user", ""))]
        for k in QKEYS:
            c[k] += q[k] * f
    cellc = {k: {m: cents(v) for m, v in money(c).items()} for k, c in cellq.items()}
    grand = sum(cc[m] for cc in cellc.values() for m in COMPONENTS[:5])
    active_all = len({(r["node"], r["task"]["id"], r["type"]) for _, _, r, _, _ in sh})
    fails = checked = rows_total = 0
    for name in sorted(os.listdir(outdir)):
        by, p = name[:-4].split("@")
        dims = by.split(",")
        exact = all(d in ("account", "user") for d in dims)
        # cents: each cell's (day, account, user; a whole month's in month mode) cents per
        # component apportioned to the report's keys in it by their money, exactly
        mm = month_mode(dims, p, frm, to)
        cellk = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
        for day, f, r, _, _ in sh:
            unit = day[:7] if mm and mm[0] <= day[:7] < mm[1] else day
            q = quantities(r)
            ck = cellk[(unit, r["task"].get("account", ""), r["task"].get("user", ""))]
            kq = ck[tuple(dim(r, d) for d in dims)]
            for k in QKEYS:
                kq[k] += q[k] * f
        unitc = defaultdict(lambda: defaultdict(int))
        for (day, acc, usr), cc in cellc.items():
            unit = day[:7] if mm and mm[0] <= day[:7] < mm[1] else day
            for m in COMPONENTS:
                unitc[(unit, acc, usr)][m] += cc[m]
        expc = defaultdict(lambda: defaultdict(int))
        for cid, ck in cellk.items():
            keys = sorted(ck)
            day0 = cid[0] if len(cid[0]) == 10 else cid[0] + "-01"
            lab = period(p, max(day0, frm), frm, to)[0]
            monies = [money(ck[k]) for k in keys]
            for m in COMPONENTS:
                for k, c in zip(keys, apportion(unitc[cid][m], [weight(x[m]) for x in monies])):
                    expc[(lab,) + k][m] += c
        exp = defaultdict(lambda: {"q": defaultdict(float), "n": defaultdict(int),
                                   "cells": set(), "parts": set(), "first": None, "last": None,
                                   "active": set()})
        for day, f, r, counted, running in sh:
            lab, first, last = period(p, day, frm, to)
            key = (lab,) + tuple(dim(r, d) for d in dims)
            e = exp[key]
            e["first"], e["last"] = first, last
            q = quantities(r)
            for k in QKEYS:
                e["q"][k] += q[k] * f
            # active: the tasks with a share of a day of the period (ran at least partly in it)
            e["active"].add((r["node"], r["task"]["id"], r["type"]))
            if counted:
                st = r["exit"]["status"]
                e["n"]["tasks_ended"] += 1
                e["n"]["tasks_without_request"] += (r["request"]["cpus"] <= 0 or
                                                    r["request"]["memory_bytes"] == 0)
                e["n"]["failed_tasks"] += not (st == "exited" and r["exit"]["code"] == 0)
                e["n"]["oom_killed"] += st == "oom_killed"
                e["n"]["time_limit"] += st == "time_limit"
            e["n"]["running_tasks"] += running
            cell = (day, r["task"].get("account", ""), r["task"].get("user", ""))
            e["cells"].add(cell)
            e["parts"].add(cell + (r["task"].get("job", ""), r["node"],
                                   json.dumps(r["task"].get("labels", {}))) +
                           ((r["task"]["id"],) if r["type"] == "task.sample" else ()))
        exp = {k: e for k, e in exp.items()
               if any(v > 0 for v in e["q"].values()) or any(e["n"].values()) or e["active"]}
        for e in exp.values():
            e["n"]["tasks_active"] = len(e["active"])
        got = {}
        total = None
        for row in csv.DictReader(open(os.path.join(outdir, name))):
            if row["period"] == "total":
                total = row
                continue
            key = (row["period"],) + tuple(row["label:project" if d.startswith("label:") else d]
                                           for d in dims)
            if key in got:
                print("FAIL %s: row %s twice" % (name, key))
                fails += 1
            got[key] = row
        want = {(k[0],) + tuple(csv_text(v) for v in k[1:]): e for k, e in exp.items()}
        exp_raw_key = {(k[0],) + tuple(csv_text(v) for v in k[1:]): k[1:] for k in exp}
        if set(got) != set(want):
            print("FAIL %s: rows differ: only in report %s, only expected %s" % (
                name, sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5]))
            fails += 1
        gsum = 0
        for key in set(got) & set(want):
            row, e = got[key], want[key]
            q = e["q"]
            bad = []
            if (row["first_day"], row["last_day"]) != (e["first"], e["last"]):
                bad.append("days %s..%s, expected %s..%s" % (row["first_day"], row["last_day"],
                                                             e["first"], e["last"]))
            for c in COUNTS:
                if int(row[c]) != e["n"][c]:
                    bad.append("%s %s, expected %d" % (c, row[c], e["n"][c]))
            for col, v in (("cpu_core_h", q["cpu_ch"] / 3600), ("cpu_used_core_h", q["cpu"] / 3600),
                           ("mem_gib_h", q["mem_ch"] / 3600 / GIB),
                           ("mem_used_gib_h", q["mem"] / 3600 / GIB),
                           ("gpu_h", q["gpu_ch"] / 3600), ("gpu_used_h", q["gpu"] / 3600),
                           ("io_gib", (q["io_r"] + q["io_w"]) / GIB), ("net_gib", q["net"] / GIB)):
                if abs(float(row[col]) - v) > 1e-9 * max(abs(v), 1e-3):
                    bad.append("%s %s, expected %.17g" % (col, row[col], v))
            for col, u, c in (("cpu_eff", "cpu", "cpu_ch"), ("mem_eff", "mem", "mem_ch"),
                              ("gpu_eff", "gpu", "gpu_ch")):
                v = q[u] / q[c] if q[c] > 0 else 1.0
                x = float(row[col])
                if not (0 <= x <= 1) or abs(x - min(v, 1.0)) > 1e-9:
                    bad.append("%s %s, expected %.12f" % (col, row[col], v))
            # costs, every component to the cent: the cells' cents (account and user rows: the
            # cells' own), apportioned as above; and within 1.5 cents per part of the row's
            # unrounded money (half a cent of the cell's rounding, below a cent of the largest
            # remainder)
            m = money(q)
            ek = (key[0],) + tuple(exp_raw_key[key])
            for comp in COMPONENTS:
                rc = int(round(float(row[comp]) * 100))
                ec = expc[ek][comp]
                if exact and ec != sum(cellc[c][comp] for c in e["cells"]):
                    bad.append("model: %s apportioned %d != cells' cents" % (comp, ec))
                if rc != ec:
                    bad.append("%s %s, expected %d cents" % (comp, row[comp], ec))
                if abs(rc - m[comp] * 100) > 1.5 * len(e["parts"]) + 1e-6:
                    bad.append("%s %s, not within %.1f cents of %.4f" % (
                        comp, row[comp], 1.5 * len(e["parts"]), m[comp]))
            if int(row["tasks_active"]) < 1:
                bad.append("a row with no active task")
            cost = sum(int(round(float(row[c]) * 100)) for c in COMPONENTS[:5])
            if cost != int(round(float(row["cost"]) * 100)):
                bad.append("cost %s is not the sum of its components" % row["cost"])
            gsum += cost
            if bad:
                fails += 1
                if fails < 20:
                    print("FAIL %s %s: %s" % (name, key, "; ".join(bad)))
            checked += 1
        rows_total += len(got)
        if total is None or int(round(float(total["cost"]) * 100)) != grand or gsum != grand:
            print("FAIL %s: total %s, rows sum to %d cents, expected %d" % (
                name, total and total["cost"], gsum, grand))
            fails += 1
        for c in ("tasks_ended", "tasks_without_request", "running_tasks"):
            s = sum(int(r[c]) for r in got.values())
            if total is None or int(total[c]) != s:
                print("FAIL %s: total %s != rows' %d" % (name, c, s))
                fails += 1
        # active over the whole range: every task with a share of a day of it, once
        if total is None or int(total["tasks_active"]) != active_all:
            print("FAIL %s: total tasks_active %s, expected %d" % (
                name, total and total["tasks_active"], active_all))
            fails += 1
    print("%s..%s: %d reports, %d rows checked, grand total %d cents, %d failures" % (
        frm, to, len(os.listdir(outdir)), checked, grand, fails))
    return fails


# The sheet's [shared:NAME] sections of report_reconcile.sh: (name, cents a month, match,
# spread); docs/reports.md "Shared costs"
SHARED = [("ops", 120000, ("all",), ("proportional",)),
          ("lab", 3107, ("account", "physics"), ("even",)),
          ("proj", 50000, ("label:project", "qcd"), ("to", "chem"))]


def day_cents(monthly, day):
    """A monthly amount's cents on one day: even over the month, the extra cents first."""
    y, m, d = int(day[:4]), int(day[5:7]), int(day[8:10])
    nd = (datetime.date(y + m // 12, m % 12 + 1, 1) - datetime.date(y, m, 1)).days
    q, r = divmod(monthly, nd)
    return q + (1 if d <= r else 0)


def shared(frm, to, base, out):
    fails = checked = 0
    days = []
    d = datetime.date.fromisoformat(frm)
    while d.isoformat() < to:
        days.append(d.isoformat())
        d += datetime.timedelta(days=1)
    for name in sorted(os.listdir(out)):
        by, p = name[:-4].split("@")
        dims = by.split(",")
        cols = ["label:project" if x.startswith("label:") else x for x in dims]
        brows = [r for r in csv.DictReader(open(os.path.join(base, name)))
                 if r["period"] != "total"]
        periods = {}
        for day in days:
            lab = period(p, day, frm, to)[0]
            periods.setdefault(lab, []).append(day)
        exp = defaultdict(int)
        want_total = 0
        for lab, pdays in periods.items():
            rows = [r for r in brows if r["period"] == lab]
            left = 0
            for _, monthly, match, spread in SHARED:
                amount = sum(day_cents(monthly, x) for x in pdays)
                want_total += amount
                col = {"account": "account", "label:project": "label:project"}.get(match[0])
                take = [r for r in rows if match[0] == "all" or
                        (col in cols and r[col] == match[1])]
                if spread[0] == "to":
                    take = [r for r in take if "account" in cols and r["account"] == spread[1]]
                w = [int(round(float(r["cost"]) * 100)) for r in take]
                if not take or (spread[0] != "even" and sum(x for x in w if x > 0) == 0):
                    left += amount
                    continue
                if spread[0] == "even":
                    q, rem = divmod(amount, len(take))
                    parts = [q + (1 if i < rem else 0) for i in range(len(take))]
                else:
                    parts = apportion(amount, [max(x, 0) for x in w])
                for r, c in zip(take, parts):
                    exp[(lab,) + tuple(r[c2] for c2 in cols)] += c
            if left:
                exp[(lab,) + ("(shared)",) * len(cols)] += left
        base_cost = {(r["period"],) + tuple(r[c] for c in cols): int(round(float(r["cost"]) * 100))
                     for r in brows}
        got_total = None
        seen = set()
        for r in csv.DictReader(open(os.path.join(out, name))):
            if r["period"] == "total":
                got_total = int(round(float(r["shared_cost"]) * 100))
                continue
            key = (r["period"],) + tuple(r[c] for c in cols)
            seen.add(key)
            sc = int(round(float(r["shared_cost"]) * 100))
            cost = int(round(float(r["cost"]) * 100))
            checked += 1
            if sc != exp.get(key, 0) or cost != base_cost.get(key, 0) + sc:
                fails += 1
                if fails < 20:
                    print("FAIL shared %s %s: shared_cost %d cost %d, expected %d and %d" % (
                        name, key, sc, cost, exp.get(key, 0), base_cost.get(key, 0) + sc))
        missing = [k for k, v in exp.items() if v and k not in seen]
        if missing or got_total != want_total:
            fails += 1
            print("FAIL shared %s: total %s, expected %d; rows missing %s" % (
                name, got_total, want_total, missing[:5]))
    print("%s..%s: shared costs of %d reports, %d rows checked, %d failures" % (
        frm, to, len(os.listdir(out)), checked, fails))
    return fails


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif sys.argv[1] == "shared":
        sys.exit(1 if shared(*sys.argv[2:6]) else 0)
    else:
        fails = 0
        for i in range(3, len(sys.argv), 3):
            fails += check(sys.argv[2], sys.argv[i], sys.argv[i + 1], sys.argv[i + 2])
        sys.exit(1 if fails else 0)
