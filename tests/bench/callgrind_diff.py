#!/usr/bin/env python3
"""Two callgrind profiles side by side: the functions whose inclusive instruction counts differ
most, divided by a number of operations (per launch, per record).

Usage: callgrind_diff.py THIS.out BASE.out OPERATIONS [ROWS]
       callgrind_diff.py --top THIS.out OPERATIONS [ROWS]   (one profile's largest functions)
Functions are matched by source file name and function name (the builds' paths differ);
library functions without symbols are left out; a function listed under two spellings of
its file counts once.
"""
import os
import re
import subprocess
import sys


def load(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+)", line)
        if not m:
            continue
        n, f = int(m.group(1).replace(",", "")), m.group(2)
        if f == "=>":
            continue
        if f.startswith("???:0x") or f.startswith("???:(below"):
            continue  # no symbol: inclusive counts of these do not add up
        if ":" in f:
            file, fn = f.rsplit(":", 1)
            f = os.path.basename(file) + ":" + fn
        # a function listed under two spellings of its file (absolute and relative) once
        d[f] = max(d.get(f, 0), n)
    return d


def top():
    this = load(sys.argv[2])
    ops = float(sys.argv[3])
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    print("%10s  %s" % ("this", "function"))
    for k in sorted(this, key=lambda k: -this[k])[:rows]:
        print("%10.0f  %s" % (this[k] / ops, k))


def main():
    if sys.argv[1] == "--top":
        top()
        return
    this, base = load(sys.argv[1]), load(sys.argv[2])
    ops = float(sys.argv[3])
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    keys = sorted(set(this) | set(base), key=lambda k: -abs(this.get(k, 0) - base.get(k, 0)))
    print("%10s %10s %10s  %s" % ("this-base", "this", "base", "function"))
    for k in keys[:rows]:
        a, b = this.get(k, 0), base.get(k, 0)
        print("%10.0f %10.0f %10.0f  %s" % ((a - b) / ops, a / ops, b / ops, k))


if __name__ == "__main__":
    main()
