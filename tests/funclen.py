#!/usr/bin/env python3
"""Production functions longer than a bound: `tests/funclen.py [MAX] [FILE...]`.

MAX defaults to 120 lines (the function's first line to its closing brace); the files default
to every library and program source (the BPF programs aside). Prints FILE:LINE:
NAME LINES for each one over the bound; exits 1 if there is any. Relies on the tree's
clang-format layout: a function body opens with `{` and closes with `}` in column 0."""
import glob
import re
import sys

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 120
files = sys.argv[2:] or sorted(
    f for d in ("common", "accounting", "collector", "isolation", "bpf", "agent")
    for f in glob.glob(d + "/*.c") if not f.endswith(".bpf.c"))
over = 0
for path in files:
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            head = i - 1  # back to the line that starts the declaration
            while head > 0 and lines[head][:1] in ("\t", " ", ")"):
                head -= 1
            end = i + 1
            while end < len(lines) and lines[end] != "}":
                end += 1
            n = end - head + 1
            if n > limit:
                m = re.search(r"(\w+)\s*\(", lines[head])
                print("%s:%d: %s %d lines" % (path, head + 1, m.group(1) if m else "?", n))
                over += 1
            i = end
        i += 1
sys.exit(1 if over else 0)
