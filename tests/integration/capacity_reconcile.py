#!/usr/bin/env python3
"""Independent model of the capacity and idle report (docs/reports.md "Capacity and idle cost").

  capacity_reconcile.py gen DIR      writes DIR/nodes.ndjson (node.sample records of 6 nodes,
                                     one changing class, gaps, periods over midnight),
                                     DIR/tasks.ndjson (task.end and task.sample records on
                                     those nodes and on one without node records) and
                                     DIR/prices.ini (node classes and a node override)
  capacity_reconcile.py check DIR FROM TO OUTDIR
                                     OUTDIR/cap-BY@PERIOD.csv (corral-collector capacity) and
                                     OUTDIR/show-RULE@PERIOD.csv (report --by account with
                                     idle) against the model computed here from the raw records

The model splits each record over the hours of its interval in proportion (as ingest does),
sums per (day, node, class), takes the tasks' charged reservations per (day, node) as the
allocation, splits it over a node's classes of a day by capacity, and rounds every (day,
node, class, component) to cents with its own code; rows must equal it to the cent.
"""
import csv
import json
import math
import os
import random
import sys
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

HOUR = 3600 * 10**9
DAY = 24 * HOUR
GIB = 1073741824.0
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)
COMPS = ("cpu", "mem", "gpu")
PARTS = ("capacity", "allocated", "used", "idle")
NODES = {  # node: (cpus, memory bytes, gpus)
    "n1": (16, 64 << 30, 0),
    "n2": (32, 128 << 30, 0),
    "n3": (8, 32 << 30, 0),
    "n4": (64, 512 << 30, 4),
    "n5": (16, 64 << 30, 0),
    "n6": (4, 8 << 30, 0),
}
PRICES = """[prices]
currency = EUR
cpu_core_hour = 0.031
memory_gib_hour = 0.0043
gpu_hour = 1.70
io_read_gib = 0.0011
io_write_gib = 0.0023
net_gib = 0.013
[node_class:gpu]
cpu_core_hour = 0.05
gpu_hour = 2.10
[node_class:spot]
cpu_core_hour = 0.01
memory_gib_hour = 0.001
[node:n5]
cpu_core_hour = 0.02
"""
PRICE = {"base": (0.031, 0.0043, 1.70), "gpu": (0.05, 0.0043, 2.10), "spot": (0.01, 0.001, 1.70),
         "node:n5": (0.02, 0.0043, 1.70)}


def ts(ns):
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + \
        ".%06dZ" % (ns % 10**9 // 1000)


def ns_of(dt):
    return int(dt.timestamp()) * 10**9


def klass(node, t_ns):
    if node == "n3":  # std, then spot from 2026-12-01T12:00
        return "spot" if t_ns > ns_of(datetime(2026, 12, 1, 12, tzinfo=timezone.utc)) else "std"
    return {"n1": "std", "n2": None, "n4": "gpu", "n5": "std", "n6": "spot"}[node]


def gen(d):
    rnd = random.Random(30)
    ernd = random.Random(31)  # the energy's own draws: the other figures stay as they were
    nodes, tasks = [], []
    seq = 0
    for node, (cpus, mem, gpus) in NODES.items():
        # node.sample every 30 min (n6: every 37 min, so periods cross midnight), a gap on n2,
        # an agent restart (period 0) on n1
        step = 2220 if node == "n6" else 1800
        t = ns_of(T0) + rnd.randrange(0, 600) * 10**9
        prev = None
        while t < ns_of(T0 + timedelta(days=9)):
            gap = node == "n2" and ns_of(datetime(2026, 11, 30, 3, tzinfo=timezone.utc)) <= t < \
                ns_of(datetime(2026, 11, 30, 9, tzinfo=timezone.utc))
            restart = node == "n1" and ns_of(datetime(2026, 12, 2, 10, tzinfo=timezone.utc)) <= t < \
                ns_of(datetime(2026, 12, 2, 10, 30, tzinfo=timezone.utc))
            if gap:
                prev = None
            else:
                seq += 1
                period = 0 if prev is None or restart else t - prev
                cls = klass(node, t)
                r = {"schema": "corral.record/v1", "record_id": "%s/b/%d" % (node, seq),
                     "type": "node.sample", "time": ts(t), "node": node, "period_ns": period,
                     "labels": {"rack": "r" + node[1]},
                     "capacity": {"cpus": cpus, "memory_bytes": mem, "gpus": gpus,
                                  "gpu_models": ["NVIDIA H100 80GB HBM3"] * gpus},
                     "allocated": {"cpus": 0, "memory_bytes": 0, "gpus": 0, "tasks": 0},
                     "used": {"cpu_ns": rnd.randrange(0, cpus * max(period, 1)),
                              "memory_bytes": rnd.randrange(0, mem)}}
                if cls:
                    r["price_class"] = cls
                if period and ernd.random() < 0.7:
                    # measured energy, fractional joules (microjoules), unattributed parts:
                    # rollup_node_energy_day sums them per day in integer millijoules
                    pkg, dram = ernd.randrange(0, 10**11) / 1e6, ernd.randrange(0, 10**10) / 1e6
                    e = {"package_j": pkg, "dram_j": dram,
                         "unattributed_package_j": ernd.randrange(0, int(pkg * 1e6) + 1) / 1e6,
                         "unattributed_dram_j": ernd.randrange(0, int(dram * 1e6) + 1) / 1e6,
                         "sources": {"package_j": "rapl", "dram_j": "rapl"}}
                    if gpus:
                        g = ernd.randrange(0, 10**11) / 1e6
                        e["gpu_j"] = g
                        e["unattributed_gpu_j"] = ernd.randrange(0, int(g * 1e6) + 1) / 1e6
                        e["sources"]["gpu_j"] = e["sources"]["unattributed_gpu_j"] = "nvml"
                    r["energy"] = e
                nodes.append(r)
                prev = t
            t += step * 10**9
    # tasks: ending 11-27..12-06 on n1..n6 and n9 (no node records), up to 30 h long
    accounts = ["physics", "chem", "bio", "+ops"]
    for i in range(2500):
        node = rnd.choice(list(NODES) + ["n9"])
        cpus_cap = NODES.get(node, (8, 32 << 30, 0))[0]
        end = ns_of(T0) + rnd.randrange(HOUR, 10 * DAY)
        wall = rnd.randrange(60, 30 * 3600) * 10**9
        req = rnd.choice([0, 1, 2, 4, 8, 16]) if rnd.random() > 0.1 else 0
        used = int(wall * rnd.uniform(0, 1.5) * max(req, 1))
        mem = rnd.choice([0, 1 << 30, 4 << 30, 16 << 30])
        gpus = rnd.choice([0, 0, 0, 1, 2]) if node == "n4" else 0
        r = {"schema": "corral.record/v1", "record_id": "t%d/end" % i, "type": "task.end",
             "time": ts(end), "node": node,
             "task": {"id": "t%d" % i, "account": rnd.choice(accounts), "user": "u%d" % (i % 7)},
             "request": {"cpus": req, "memory_bytes": mem, "gpus": gpus},
             "usage": {"wall_ns": wall, "cpu_user_ns": used,
                       "memory_byte_seconds": rnd.uniform(0, 1.2) * mem * wall / 1e9,
                       "gpu_seconds": rnd.uniform(0, 1) * gpus * wall / 1e9},
             "exit": {"status": "exited", "code": 0}}
        del cpus_cap
        tasks.append(r)
    # running tasks: one or two samples, no end
    for i in range(60):
        node = rnd.choice(list(NODES))
        start = ns_of(T0) + rnd.randrange(5 * DAY, 8 * DAY)
        for k in range(rnd.choice([1, 2])):
            t = start + (k + 1) * rnd.randrange(HOUR, 20 * HOUR)
            wall = t - start
            tasks.append({"schema": "corral.record/v1", "record_id": "r%d/s%d" % (i, k),
                          "type": "task.sample", "time": ts(t), "node": node,
                          "task": {"id": "r%d" % i, "account": rnd.choice(accounts), "user": "run"},
                          "request": {"cpus": 2, "memory_bytes": 2 << 30},
                          "usage": {"wall_ns": wall, "cpu_user_ns": int(wall * rnd.uniform(0, 3)),
                                    "memory_byte_seconds": (1 << 30) * wall / 1e9}})
    with open(os.path.join(d, "nodes.ndjson"), "w") as f:
        for r in nodes:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "tasks.ndjson"), "w") as f:
        for r in tasks:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "prices.ini"), "w") as f:
        f.write(PRICES)


def parse_ns(s):
    base, frac = s[:19], s[20:-1]
    dt = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return ns_of(dt) + int(frac.ljust(9, "0")[:9]) * (1 if frac else 0)


def day_of(ns):
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%d")


def spread(start, end, vals):
    """Per day: vals over the hours of [start, end] in proportion (ingest's split)."""
    out = defaultdict(lambda: [0.0] * len(vals))
    h0, h1 = start // HOUR, (end - 1 if end > start else end) // HOUR
    for h in range(h0, h1 + 1):
        hs, he = h * HOUR, h * HOUR + HOUR
        frac = (min(end, he) - max(start, hs)) / (end - start) if end > start else 1.0
        acc = out[day_of(hs)]
        for i, v in enumerate(vals):
            acc[i] += v * frac
    return out


def cents(money):
    return int(Decimal(money * 100.0).to_integral_value(rounding=ROUND_HALF_UP))


def model(d, frm, to):
    lo, hi = ns_of(datetime.strptime(frm, "%Y-%m-%d").replace(tzinfo=timezone.utc)), \
        ns_of(datetime.strptime(to, "%Y-%m-%d").replace(tzinfo=timezone.utc))
    units = defaultdict(lambda: [0.0] * 6)  # (day, node, cls): hours, records, cap x3, nodecpu
    for line in open(os.path.join(d, "nodes.ndjson")):
        r = json.loads(line)
        end = parse_ns(r["time"])
        start = end - min(r["period_ns"], end)
        p = r["period_ns"] / 1e9
        c = r["capacity"]
        vals = [p, 0.0, c["cpus"] * p, c["memory_bytes"] * p, c["gpus"] * p, r["used"]["cpu_ns"] / 1e9]
        for day, v in spread(start, end, vals).items():
            u = units[(day, r["node"], r.get("price_class", ""))]
            for i in range(6):
                u[i] += v[i]
        units[(day_of(end - 1 if end > start else end), r["node"], r.get("price_class", ""))][1] += 1
    alloc = defaultdict(lambda: [0.0] * 6)  # (day, node): charged x3, used x3
    ends, samples = set(), {}
    for line in open(os.path.join(d, "tasks.ndjson")):
        r = json.loads(line)
        if r["type"] == "task.end":
            ends.add((r["node"], r["task"]["id"]))
    for line in open(os.path.join(d, "tasks.ndjson")):
        r = json.loads(line)
        u, q = r["usage"], r.get("request", {})
        wall = u["wall_ns"] / 1e9
        cpu = u["cpu_user_ns"] / 1e9
        mreq = q.get("memory_bytes", 0) * wall
        greq = q.get("gpus", 0) * wall
        vals = [max(q.get("cpus", 0) * wall, cpu), max(mreq, u.get("memory_byte_seconds", 0)),
                max(greq, u.get("gpu_seconds", 0)), cpu, u.get("memory_byte_seconds", 0),
                u.get("gpu_seconds", 0)]
        end = parse_ns(r["time"])
        if r["type"] == "task.end":
            start = end - min(u["wall_ns"], end)
            for day, v in spread(start, end, vals).items():
                a = alloc[(day, r["node"])]
                for i in range(6):
                    a[i] += v[i]
        elif (r["node"], r["task"]["id"]) not in ends:
            k = (r["node"], r["task"]["id"])
            if k not in samples or parse_ns(samples[k][0]["time"]) < end:
                samples[k] = (r, vals)
    for (node, _), (r, vals) in samples.items():
        end = parse_ns(r["time"])
        start = end - r["usage"]["wall_ns"]
        a, b = max(start, lo), min(end, hi)
        if b <= a:
            continue
        dd = a // DAY * DAY
        while dd <= b - 1:
            frac = (min(b, dd + DAY) - max(a, dd)) / (end - start)
            x = alloc[(day_of(dd), node)]
            for i in range(6):
                x[i] += vals[i] * frac
            dd += DAY
    # price each unit
    out = []
    capsum = defaultdict(lambda: [0.0] * 3)
    for (day, node, cls), u in units.items():
        if frm <= day < to:
            for c in range(3):
                capsum[(day, node)][c] += u[2 + c]
    seen = set()
    keys = [k for k in units if frm <= k[0] < to]
    keys += [(day, node, "") for (day, node) in alloc
             if frm <= day < to and not any(k[0] == day and k[1] == node for k in keys)]
    for (day, node, cls) in keys:
        u = units.get((day, node, cls), [0.0] * 6)
        a = alloc.get((day, node), [0.0] * 6)
        pr = PRICE["node:" + node] if "node:" + node in PRICE else PRICE.get(cls or "base", PRICE["base"])
        per = (pr[0] / 3600.0, pr[1] / 3600.0 / GIB, pr[2] / 3600.0)
        scale = (1 / 3600.0, 1 / 3600.0 / GIB, 1 / 3600.0)
        row = {"day": day, "node": node, "cls": cls, "node_h": u[0] / 3600.0, "records": u[1],
               "node_cpu": u[5] / 3600.0}
        for c in range(3):
            cap = u[2 + c]
            share = 1.0
            cs = capsum.get((day, node), [0, 0, 0])[c]
            if cs > 0 and cs != cap:
                share = cap / cs
            al, us = a[c] * share, a[3 + c] * share
            aa = min(al, cap)
            uu = min(us, aa)
            row[(COMPS[c], "q:cap")] = cap * scale[c]
            row[(COMPS[c], "q:alloc")] = aa * scale[c]
            row[(COMPS[c], "q:used")] = uu * scale[c]
            row[(COMPS[c], "q:over")] = max(0.0, al - cap) * scale[c]
            cc, ca, cu = cents(cap * per[c]), cents(aa * per[c]), cents(uu * per[c])
            row[(COMPS[c], "capacity")] = cc
            row[(COMPS[c], "allocated")] = ca
            row[(COMPS[c], "used")] = cu
            row[(COMPS[c], "idle")] = cc - ca
        seen.add((day, node, cls))
        out.append(row)
    return out


def period_of(day, period, frm, to_last):
    dt = datetime.strptime(day, "%Y-%m-%d")
    if period == "day":
        return day
    if period == "month":
        return day[:7]
    if period == "week":
        y, w, _ = dt.isocalendar()
        return "%d-W%02d" % (y, w)
    return "%s..%s" % (frm, to_last)


def money(c):
    return "%s%d.%02d" % ("-" if c < 0 else "", abs(c) // 100, abs(c) % 100)


def apportion(total, w):
    s = sum(w)
    if s == 0:
        return [total] + [0] * (len(w) - 1)
    out = [total * x // s for x in w]
    rem = [(total * x % s, -i) for i, x in enumerate(w)]
    for _, i in sorted(rem, reverse=True)[:total - sum(out)]:
        out[-i] += 1
    return out


def check(d, frm, to, outdir):
    units = model(d, frm, to)
    to_last = (datetime.strptime(to, "%Y-%m-%d") - timedelta(days=1)).strftime("%Y-%m-%d")
    bad = []
    nrows = 0
    idle_by_period = {}
    for by in ("node", "price_class", "none"):
        for period in ("day", "week", "month", "all"):
            want = defaultdict(lambda: defaultdict(float))
            for u in units:
                key = (period_of(u["day"], period, frm, to_last),
                       u["node"] if by == "node" else "",
                       u["cls"] if by != "none" else "")
                w = want[key]
                for k, v in u.items():
                    if k not in ("day", "node", "cls"):
                        w[k] += v
            rows = list(csv.DictReader(open(os.path.join(outdir, "cap-%s@%s.csv" % (by, period)))))
            total = rows.pop()
            got = {}
            for r in rows:
                key = (r["period"], r.get("node", "") if by == "node" else "",
                       r.get("price_class", "") if by != "none" else "")
                key = (key[0], "" if key[1] == "(none)" and by != "node" else key[1],
                       "" if key[2] == "(none)" else key[2])
                got[key] = r
            if set(got) != set(want):
                bad.append("cap %s@%s: rows %s vs model %s" % (by, period, sorted(set(got) ^ set(want))[:5], ""))
                continue
            sums = defaultdict(int)
            for key, w in want.items():
                r = got[key]
                nrows += 1
                for c in COMPS:
                    for p in PARTS:
                        col = "%s_%s_cost" % (c, p)
                        if r[col] != money(int(w[(c, p)])):
                            bad.append("cap %s@%s %s %s: %s, model %s" % (by, period, key, col, r[col], money(int(w[(c, p)]))))
                        sums[col] += int(w[(c, p)])
                    for q, unit in (("cap", "core_h" if c == "cpu" else "gib_h" if c == "mem" else "h"),
                                    ("alloc", None), ("used", None), ("over", None)):
                        unit = "core_h" if c == "cpu" else "gib_h" if c == "mem" else "h"
                        col = "%s_%s_%s" % (c, q, unit)
                        g, m = float(r[col]), w[(c, "q:" + q)]
                        if abs(g - m) > 1e-9 * max(1.0, abs(m)):
                            bad.append("cap %s@%s %s %s: %s, model %r" % (by, period, key, col, r[col], m))
                cap = int(sum(w[(c, "capacity")] for c in COMPS))
                al = int(sum(w[(c, "allocated")] for c in COMPS))
                idle = int(sum(w[(c, "idle")] for c in COMPS))
                if r["capacity_cost"] != money(cap) or r["allocated_cost"] != money(al) or \
                        r["idle_cost"] != money(idle) or cap != al + idle:
                    bad.append("cap %s@%s %s: capacity %s allocated %s idle %s" % (
                        by, period, key, r["capacity_cost"], r["allocated_cost"], r["idle_cost"]))
                for c in COMPS:
                    if not 0 <= w[(c, "used")] <= w[(c, "allocated")] <= w[(c, "capacity")]:
                        bad.append("cap %s@%s %s %s: used/allocated/capacity out of order" % (by, period, key, c))
                if by == "none":
                    idle_by_period.setdefault(period, {})[key[0]] = int(idle)
            for col, v in sums.items():
                if total[col] != money(v):
                    bad.append("cap %s@%s total %s: %s, rows %s" % (by, period, col, total[col], money(v)))
    # showback with idle: per period the rows gain exactly the period's idle cents
    for period in ("day", "week", "month", "all"):
        plain = list(csv.DictReader(open(os.path.join(outdir, "show-plain@%s.csv" % period))))
        ptotal = plain.pop()
        pidle = idle_by_period[period]
        for rule in ("row", "proportional", "by-request", "to:chem"):
            rows = list(csv.DictReader(open(os.path.join(outdir, "show-%s@%s.csv" % (rule, period)))))
            total = rows.pop()
            tidle = sum(pidle.values())
            if total["idle_cost"] != money(tidle) or \
                    total["cost"] != money(int(round(float(ptotal["cost"]) * 100)) + tidle):
                bad.append("show %s@%s total: cost %s idle %s, plain %s + idle %s" % (
                    rule, period, total["cost"], total["idle_cost"], ptotal["cost"], money(tidle)))
            per = defaultdict(int)
            for r in rows:
                per[r["period"]] += int(round(float(r["idle_cost"]) * 100))
                if int(round(float(r["cost"]) * 100)) != sum(int(round(float(r[k]) * 100)) for k in (
                        "cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost", "idle_cost")):
                    bad.append("show %s@%s %s: cost is not the sum of its parts" % (rule, period, r["account"]))
            for p, v in pidle.items():
                if per.get(p, 0) != v:
                    bad.append("show %s@%s %s: rows' idle %s, capacity's %s" % (rule, period, p, money(per.get(p, 0)), money(v)))
            if rule == "row":
                for r in rows:
                    if r["account"] == "(idle)" and int(round(float(r["idle_cost"]) * 100)) != pidle[r["period"]]:
                        bad.append("show row@%s %s: idle row %s" % (period, r["period"], r["idle_cost"]))
            if rule in ("proportional", "to:chem"):
                for p, v in pidle.items():
                    prow = [r for r in plain if r["period"] == p and (rule == "proportional" or r["account"] == "chem")]
                    w = [int(round(float(r["cost"]) * 100)) for r in prow]
                    if not prow or sum(w) == 0:
                        continue
                    share = apportion(v, w)
                    got = {r["account"]: r for r in rows if r["period"] == p}
                    for r, s in zip(prow, share):
                        g = got.get(r["account"])
                        if not g or int(round(float(g["idle_cost"]) * 100)) != s:
                            bad.append("show %s@%s %s %s: idle %s, model %s" % (
                                rule, period, p, r["account"], g and g["idle_cost"], money(s)))
    for b in bad[:30]:
        print(b)
    if bad:
        print("%d difference(s)" % len(bad))
        return 1
    print("%d capacity rows, showback with idle (4 rules x 4 periods) equal to the model" % nrows)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        sys.exit(check(*sys.argv[2:6]))
