#!/usr/bin/env python3
"""Man pages against the programs: fails when an option in a program's --help (or its getopt
table), a key its configuration parser accepts, or a subcommand is missing from its man page,
when the man page documents an option or key the program does not have, when a subcommand has
no example, or when `mandoc -T lint` says anything (its style messages included: a text line
longer than 80 bytes, as mandoc counts them, is one).

Keys are found by asking the programs: each quoted name in the parser's source is tried as a
key of each section the parser names, in a file whose next line is a sentinel unknown key; the
program says "unknown key" about the tried line only when it does not take it.

Conventions of the pages (docs/man): options in .TP entries whose tag line names them
(\\-\\-name); keys in .TP entries under ".SS [section]" in CONFIGURATION (every bold word of the
tag line that looks like a key); subcommands as .SS entries under COMMANDS; EXAMPLES holds a
line running each subcommand.

Usage: tests/man_check.py [BUILD_DIR] [PAGE...]   (default: $CORRAL_O or .output; all pages)
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
O = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CORRAL_O", os.path.join(ROOT, ".output"))
ONLY = set(sys.argv[2:])
MAN = os.path.join(ROOT, "docs", "man")
problems = []


def fail(msg):
    problems.append(msg)


def read(p):
    with open(os.path.join(ROOT, p), encoding="utf-8") as f:
        return f.read()


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, **kw)


# ---- the programs ----------------------------------------------------------------------------
def help_options(argv):
    r = run(argv)
    return set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", r.stdout + r.stderr))


def getopt_options(src, func=None):
    text = read(src)
    if func:
        i = text.index(func)
        j = text.find("\n}\n", i)
        text = text[i:j]
    return set(re.findall(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument', text))


def argv_options(src):
    """options a hand-written parser compares its arguments with (strcmp(argv[k], "--name"))"""
    return set(re.findall(r'strn?cmp\(argv\[\w+\](?:\s*\+\s*\w+)?,\s*"--([a-z][a-z0-9-]*)=?"', read(src)))


def argv_short_options(src):
    """one-letter options a hand-written parser takes (strcmp(argv[k], "-x"))"""
    return set(re.findall(r'strcmp\(argv\[\w+\],\s*"-([a-zA-Z])"\)', read(src)))


def optstring_letters(src):
    """the letters of the getopt option strings in src (OPTSTRING or getopt_long's argument)"""
    text = read(src)
    strs = re.findall(r'#define OPTSTRING\s+"([^"]*)"', text) + re.findall(
        r'getopt_long\([^;]*?,\s*"([^"]*)"', text)
    return {c for o in strs for c in o if c.isalpha()}


def check_short(page, prog, help_argv, src):
    """each one-letter option of the parser is in --help and in a tag line of the page"""
    if ONLY and page not in ONLY:
        return
    r = run(help_argv)
    tags = " ".join(unescape(t) for t in tag_lines(man_text(page).splitlines()))
    for o in sorted(argv_short_options(src) | optstring_letters(src)):
        if not re.search(rf"(?<![\w-])-{o}\b", r.stdout + r.stderr):
            fail(f"{prog} --help does not list -{o} (it takes it)")
        if not re.search(rf"(?<![\w-])-{o}\b", tags):
            fail(f"{page}: option -{o} is not documented")


def help_commands(argv, prog):
    """the subcommands a program's --help names: corralctl's "Commands:" block (its lines'
    first words), corral-collector's usage lines ("corral-collector NAME")"""
    r = run(argv)
    text = r.stdout + r.stderr
    m = re.search(r"^Commands:\n((?:  .*\n|\s{10,}.*\n)+)", text, re.M)
    if m:
        return {l.split()[0] for l in m.group(1).splitlines() if re.match(r"  [a-z]", l)}
    return set(re.findall(rf"(?<![\w-]){re.escape(prog)} ([a-z]+)\b", text))


def probe_keys(argv_for, sources, what):
    """(section, key) pairs the program accepts, among the quoted names of its sources."""
    text = "".join(read(s) for s in sources)
    names = set(re.findall(r'"([a-z][a-z0-9_]*)"', text))
    sections = set(re.findall(r'IS\("([a-z_]+)"', text)) | set(
        re.findall(r'strcmp\(section, "([a-z_]+)"\)', text))
    accepted = set()

    def probe(d, sec, key):
        path = os.path.join(d, f"{sec}.{key}.conf")
        with open(path, "w") as f:
            f.write(f"[{sec}]\n{key} = x\n[zz_sentinel]\nzz_sentinel = 1\n")
        r = run(argv_for(path))
        out = r.stdout + r.stderr
        if f":2: [{sec}] {key}: unknown key" in out:
            return None
        if ":4: [zz_sentinel] zz_sentinel: unknown key" not in out and ":2: " not in out:
            fail(f"{what}: probing [{sec}] {key}: unexpected answer: {out.strip()[:200]}")
            return None
        return (sec, key)

    with tempfile.TemporaryDirectory() as d, concurrent.futures.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(probe, d, sec, key) for sec in sorted(sections) for key in sorted(names)]
        accepted = {f.result() for f in futs} - {None}
    if not accepted:
        fail(f"{what}: no configuration key found by probing (is it built in {O}?)")
    return accepted


# ---- the man pages ---------------------------------------------------------------------------
def man_text(page):
    with open(os.path.join(MAN, page), encoding="utf-8") as f:
        return f.read()


def unescape(s):
    return s.replace("\\-", "-").replace("\\&", "").replace("\\(em", "").replace("\\fB", "").replace(
        "\\fR", "").replace("\\fI", "").replace("\\fP", "")


def sections(text):
    """{SH name: [lines]}"""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith(".SH "):
            cur = line[4:].strip().strip('"')
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def tag_lines(lines):
    """the line after each .TP"""
    return [lines[i + 1] for i in range(len(lines) - 1) if lines[i].startswith(".TP")]


def bold_words(line):
    """the bold words of a .B / .BR / .BI / .RB tag line"""
    m = re.match(r"\.(B|BR|BI|RB|IB)\s+(.*)", line)
    if not m:
        return []
    toks = re.findall(r'"[^"]*"|\S+', m.group(2))
    macro = m.group(1)
    if macro == "B":
        bold = toks
    else:
        first_bold = macro[0] == "B"
        bold = [t for i, t in enumerate(toks) if (i % 2 == 0) == first_bold]
    return [unescape(t.strip('"')).strip(",;.") for t in bold]


def man_options(text):
    opts = set()
    for tag in tag_lines(text.splitlines()):
        opts |= set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", unescape(tag)))
    return opts


def man_keys(text):
    keys, sec = set(), None
    lines = sections(text).get("CONFIGURATION", [])
    for i, line in enumerate(lines):
        m = re.match(r"\.SS \"?\[([a-z_]+)\]", line)
        if m:
            sec = m.group(1)
            continue
        if sec and i > 0 and lines[i - 1].startswith(".TP"):
            for w in bold_words(line):
                if re.fullmatch(r"[a-z][a-z0-9_]*", w):
                    keys.add((sec, w))
    return keys


def man_commands(text):
    return {unescape(l[4:]).strip().strip('"').split()[0] for l in sections(text).get("COMMANDS", [])
            if l.startswith(".SS ")}


def check_page(page, prog, opts_help, opts_src, keys, commands):
    if ONLY and page not in ONLY:
        return
    text = man_text(page)
    in_man = man_options(text)
    for o in sorted((opts_help | opts_src) - in_man):
        fail(f"{page}: option --{o} ({'--help' if o in opts_help else 'getopt table'}) is not documented")
    for o in sorted(in_man - opts_help - opts_src):
        fail(f"{page}: documents --{o}, which {prog} does not take")
    for o in sorted(opts_src - opts_help - {"help"}):
        fail(f"{prog} --help does not list --{o} (it takes it)")
    if keys is not None:
        mk = man_keys(text)
        for s, k in sorted(keys - mk):
            fail(f"{page}: configuration key [{s}] {k} is not documented")
        for s, k in sorted(mk - keys):
            fail(f"{page}: documents [{s}] {k}, which the parser does not take")
    documented = man_commands(text)
    examples = "\n".join(unescape(l) for l in sections(text).get("EXAMPLES", []))
    for c in commands:
        if c not in documented:
            fail(f"{page}: command '{c}' has no .SS entry under COMMANDS")
        if not re.search(rf"{re.escape(prog)}(\s+--?\S+(\s+\S+)?)*\s+{re.escape(c)}\b", examples):
            fail(f"{page}: command '{c}' has no example in EXAMPLES")
    r = run(["mandoc", "-T", "lint", os.path.join(MAN, page)])
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail(f"{page}: mandoc -T lint:\n{(r.stdout + r.stderr).strip()}")


def main():
    corrald, ctl, coll = (os.path.join(O, p) for p in ("corrald", "corralctl", "corral-collector"))
    for p in (corrald, ctl, coll):
        if not os.access(p, os.X_OK):
            print(f"man_check: {p} not built (make all)")
            return 1
    if run(["sh", "-c", "command -v mandoc"]).returncode != 0:
        print("man_check: mandoc missing (Debian package mandoc: tests/deps.sh)")
        return 1

    want = lambda page: not ONLY or page in ONLY
    keys = probe_keys(lambda f: [corrald, "--config", f], ["agent/config.c"],
                      "corrald") if want("corrald.8") else None
    check_page("corrald.8", "corrald", help_options([corrald, "--help"]),
               getopt_options("agent/corrald_main.c"), keys, [])

    ctl_help = help_options([ctl, "--help"])
    ctl_cmds = help_commands([ctl, "--help"], "corralctl")
    if len(ctl_cmds) < 6:
        fail(f"corralctl --help: commands not found ({sorted(ctl_cmds)})")
    check_page("corralctl.1", "corralctl", ctl_help, getopt_options("agent/corralctl_main.c") |
               argv_options("agent/corralctl_main.c"), None, sorted(ctl_cmds))

    check_short("corralctl.1", "corralctl", [ctl, "--help"], "agent/corralctl_main.c")
    check_short("corrald.8", "corrald", [corrald, "--help"], "agent/corrald_main.c")
    check_short("corral-collector.8", "corral-collector", [coll, "--help"],
                "collector/collector_main.c")

    ckeys = probe_keys(lambda f: [coll, "serve", "--config", f], ["collector/collector_main.c"],
                       "corral-collector") if want("corral-collector.8") else None
    coll_help = help_options([coll, "--help"]) | help_options([coll, "audit", "--help"])
    coll_src = getopt_options("collector/collector_main.c") | getopt_options("collector/audit_cli.c")
    coll_cmds = help_commands([coll, "--help"], "corral-collector")
    if len(coll_cmds) < 6:
        fail(f"corral-collector --help: commands not found ({sorted(coll_cmds)})")
    check_page("corral-collector.8", "corral-collector", coll_help,
               coll_src | argv_options("collector/collector_main.c"), ckeys, sorted(coll_cmds))

    for p in problems:
        print("FAIL: " + p)
    if problems:
        print(f"man_check: {len(problems)} problem(s)")
        return 1
    print("man_check: man pages match the programs' options, keys and commands; mandoc lint clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
