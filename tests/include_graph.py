#!/usr/bin/env python3
"""The layers of agent/: `tests/include_graph.py [--objects DIR] [--dot]`.

A unit is a file's name without its extension (agent/task.c and agent/task.h are the unit
"task"). Fails (exit 1, each offence named) when
  - the #include "agent/..." lines between units form a cycle, or a unit includes the header
    of a unit in a higher layer than its own;
  - with --objects DIR (the build's output folder, e.g. .output): the calls between units
    (the symbols an object file uses and another defines, read with nm) form a cycle or go
    up a layer.
A unit missing from LAYERS is an error too: a new file gets its place here.
--dot prints the include graph in Graphviz form (docs/design.md shows it).
"""
import os
import re
import subprocess
import sys

# Lowest first. A unit may use units of its own layer or below, never above; within a layer
# the graph must still have no cycle.
LAYERS = [
    # libraries: nothing of the agent object
    ("lib", ["log", "loop", "spec", "config", "users", "admission", "profiles", "energy"]),
    # the agent object and the task record (types only)
    ("object", ["agent", "budget_types", "task_index"]),
    # persistence: state files, counters, ids
    ("state", ["state"]),
    # record emission: ids, the audit chain, the group commit
    ("emit", ["emit"]),
    # launch stages, meters and the node's records: called by the task table (or the main
    # loop), never calling it
    ("stages", ["scope", "spawner", "sandbox", "cgpool", "plan", "budget", "audit_glue",
                "gpu_glue", "taskstats_glue", "meter_ebpf", "meters", "usage", "node_energy",
                "supervise"]),
    # the task table and its state machine
    ("task", ["task"]),
    # above the task table: re-adoption at start, the control API
    ("api", ["adopt", "node_sample", "control"]),
    # services and programs
    ("main", ["hooks", "corrald_main", "corralctl_main", "spawn_main"]),
]
LAYER = {u: i for i, (_, us) in enumerate(LAYERS) for u in us}
NAME = {i: n for i, (n, _) in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"agent/([A-Za-z0-9_]+)\.h"', re.M)


def unit_of(path):
    return os.path.basename(path).split(".")[0]


def include_graph(root):
    g = {}
    d = os.path.join(root, "agent")
    for f in sorted(os.listdir(d)):
        if not (f.endswith(".c") or f.endswith(".h")):
            continue
        u = unit_of(f)
        g.setdefault(u, {})
        with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
            for m in INCLUDE.finditer(fh.read()):
                v = m.group(1)
                if v != u:
                    g[u].setdefault(v, []).append(f)
                    g.setdefault(v, {})
    return g


def call_graph(objdir):
    defs, uses = {}, {}
    d = os.path.join(objdir, "agent")
    for f in sorted(os.listdir(d)):
        if not f.endswith(".o"):
            continue
        u = unit_of(f)
        out = subprocess.run(["nm", os.path.join(d, f)], capture_output=True, text=True,
                             check=True).stdout
        uses.setdefault(u, set())
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBR":
                defs[p[2]] = u
            elif len(p) == 2 and p[0] == "U":
                uses[u].add(p[1])
    g = {u: {} for u in uses}
    for u, syms in uses.items():
        for s in sorted(syms):
            v = defs.get(s)
            if v and v != u:
                g[u].setdefault(v, []).append(s)
    return g


def cycles(g):
    """Strongly connected sets of more than one unit (Tarjan, iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check(g, what):
    bad = 0
    for u in sorted(g):
        if u not in LAYER:
            print(f"{what}: agent/{u}: not in a layer (tests/include_graph.py LAYERS)")
            bad += 1
    for comp in cycles(g):
        print(f"{what}: cycle between " + ", ".join(comp))
        for u in comp:
            for v in comp:
                if v in g[u]:
                    print(f"  {u} -> {v}: {' '.join(sorted(set(g[u][v]))[:6])}")
        bad += 1
    for u in sorted(g):
        for v in sorted(g[u]):
            if u in LAYER and v in LAYER and LAYER[v] > LAYER[u]:
                print(f"{what}: {u} ({NAME[LAYER[u]]}) uses {v} ({NAME[LAYER[v]]}), a higher "
                      f"layer: {' '.join(sorted(set(g[u][v]))[:6])}")
                bad += 1
    return bad


def dot(g):
    print("digraph agent {\n\trankdir=BT;")
    for i, (name, units) in enumerate(LAYERS):
        print(f"\tsubgraph cluster_{i} {{ label=\"{name}\"; " +
              " ".join(f'"{u}";' for u in units if u in g) + " }")
    for u in sorted(g):
        for v in sorted(g[u]):
            print(f'\t"{u}" -> "{v}";')
    print("}")


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objdir = None
    if "--objects" in argv:
        objdir = argv[argv.index("--objects") + 1]
    g = include_graph(root)
    if "--dot" in argv:
        dot(g)
        return 0
    bad = check(g, "includes")
    if objdir:
        if not os.path.isdir(os.path.join(objdir, "agent")):
            print(f"{objdir}/agent: no objects (build first)")
            return 1
        bad += check(call_graph(objdir), "calls")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
