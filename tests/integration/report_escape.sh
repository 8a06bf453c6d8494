#!/bin/bash
# Report output a task's names cannot subvert: task.end records whose account, user, job and
# label value hold each code point U+0001..U+00FF (U+0000 is refused at ingest, checked) (C0 and C1 controls, DEL, backslash, markup
# and quote characters) and the invisible format characters (bidi overrides and isolates,
# zero-width, line separator, BOM) are POSTed to a collector; then rollup rows whose account,
# user and job hold each raw byte 0x01..0xff (bytes that are not UTF-8 included: ingest refuses
# them, a database written by other means may hold them) are added with sqlite3. Every report
# format is checked from outside (python3, its own escaping rules): the table and the HTML are
# valid UTF-8 with no control character but the line ends, no DEL, no C1, no format
# character, and show each name escaped (\xHH, \n, \\, \u202e ...; HTML markup escaped too);
# the JSON parses and gives back each ingested name exactly; the CSV gives back each name
# exactly, a leading = + - @ neutralised.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 CLI missing"; exit 77; }
coll_init report_escape
coll_tokens n1
cat > "$T/prices.ini" <<'INI'
[prices]
cpu_core_hour = 0.10
memory_gib_hour = 0.01
gpu_hour = 1
io_read_gib = 0.001
io_write_gib = 0.001
net_gib = 0.001
INI
# the records: one per code point, the same character in every name
python3 - "$T/recs.ndjson" <<'PY'
import json, sys
FORMAT = [0x061c, 0x200b, 0x200e, 0x202a, 0x202e, 0x2066, 0x2069, 0x2028, 0x2029, 0xfeff]
cps = list(range(1, 256)) + FORMAT
with open(sys.argv[1], "w") as f:
    for i, cp in enumerate(cps):
        c = chr(cp)
        rec = {"schema": "corral.record/v1", "record_id": "x-%d" % i, "type": "task.end",
               "time": "2026-12-02T%02d:%02d:00.000000Z" % (1 + i // 60, i % 60), "node": "n1",
               "task": {"id": "t%d" % i, "uid": 1000, "account": "a" + c + "z",
                        "user": "u" + c, "job": "j" + c, "labels": {"project": "p" + c}},
               "request": {"cpus": 1, "memory_bytes": 1 << 30, "pids": 0, "gpus": 0,
                           "time_limit_s": 0, "cpu_time_limit_s": 0, "gpu_memory_bytes": 0},
               "usage": {"wall_ns": 60 * 10**9, "cpu_user_ns": 10**10, "cpu_system_ns": 0,
                         "memory_peak_bytes": 0, "memory_byte_seconds": 1e9,
                         "io_read_bytes": 0, "io_write_bytes": 0, "net_rx_bytes": 0,
                         "net_tx_bytes": 0, "gpu_seconds": 0, "gpu_memory_peak_bytes": 0,
                         "gpu_util_avg": 0},
               "exit": {"status": "exited", "code": 0, "signal": 0}}
        f.write(json.dumps(rec) + "\n")  # \uXXXX escapes: the line itself is ASCII
    for i, name in enumerate(["=HYPERLINK(\"http://x\",\"y\")", "+cmd", "-2+3", "@SUM(A1)"]):
        rec["record_id"] = "f-%d" % i
        rec["task"] = dict(rec["task"], id="f%d" % i, account=name)
        f.write(json.dumps(rec) + "\n")
PY
PORT=$(free_port)
start_collector "sqlite:$T/c.db" "$PORT" || fail "collector did not come up"
code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer tok-node-n1-0123456789abcdef" \
	-H 'Content-Type: application/x-ndjson' --data-binary "@$T/recs.ndjson" "http://127.0.0.1:$PORT/v1/records")
[ "$code" = 200 ] && ok "$(wc -l < "$T/recs.ndjson") records with every code point in their names ingested" ||
	fail "ingest: $code $(head -c 300 "$T/resp")"
# U+0000 cannot be in a name: the record is refused, naming it (the others of the batch are not)
sed -n 1p "$T/recs.ndjson" | sed 's/"x-0"/"nul-0"/; s/"a\\u0001z"/"a\\u0000z"/' > "$T/nul.ndjson"
code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer tok-node-n1-0123456789abcdef" \
	-H 'Content-Type: application/x-ndjson' --data-binary "@$T/nul.ndjson" "http://127.0.0.1:$PORT/v1/records")
grep -q 'a\\u0000z' "$T/nul.ndjson" && [ "$code" = 422 ] && grep -q 'NUL byte' "$T/resp" &&
	ok "a name with U+0000 refused: $(head -c 200 "$T/resp")" || fail "U+0000: $code $(head -c 300 "$T/resp")"
stop_collector
# raw bytes 0x01..0xff (0x80..0xff alone are not UTF-8) in a day row and its job row
{
	echo "BEGIN;"
	for b in $(seq 1 255); do
		h=$(printf %02x "$b")
		echo "INSERT INTO rollup_day (bucket, account, \"user\", tasks, wall_s, cpu_s, cpu_charged_core_s) VALUES ('2026-12-03', CAST(X'62${h}7a' AS TEXT), CAST(X'72${h}' AS TEXT), 1, 60, 10, 60);"
		echo "INSERT INTO rollup_job_day (bucket, account, \"user\", job, node, tasks, wall_s, cpu_s, cpu_charged_core_s) VALUES ('2026-12-03', CAST(X'62${h}7a' AS TEXT), CAST(X'72${h}' AS TEXT), CAST(X'6b${h}' AS TEXT), 'n1', 1, 60, 10, 60);"
	done
	echo "COMMIT;"
} | sqlite3 "$T/c.db" || fail "adding the raw-byte rows"
for fmt in table html csv json; do
	for by in account,user,job,node,label:project account,user,job; do
		"$COLL" report --db "sqlite:$T/c.db" --prices "$T/prices.ini" --from 2026-12-01 --to 2026-12-04 \
			--by "$by" --period day --format "$fmt" > "$T/$by.$fmt" || fail "report --by $by --format $fmt"
	done
done
python3 - "$T" <<'PY' && ok "table and HTML show every name escaped (valid UTF-8, no control or format character); JSON and CSV give the names back" || fail "escaping"
import csv, html, io, json, re, sys
T = sys.argv[1]
FORMAT = [0x061c, 0x200b, 0x200e, 0x202a, 0x202e, 0x2066, 0x2069, 0x2028, 0x2029, 0xfeff]
BAD = set(range(0x20)) - {0x0a} | {0x7f} | set(range(0x80, 0xa0)) | set(FORMAT) | \
    {0x180e} | set(range(0x200b, 0x2010)) | set(range(0x2028, 0x202f)) | set(range(0x2060, 0x2070))
NAMED = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r"}
def shown_bytes(b):
    """the escaped form of raw bytes: valid UTF-8 kept but controls and format characters"""
    out, i = "", 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                c = b[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                c = None
        if c is None:
            out += "\\x%02x" % b[i]
            i += 1
            continue
        cp = ord(c)
        if c == "\\":
            out += "\\\\"
        elif cp in NAMED:
            out += "\\" + NAMED[cp]
        elif cp < 0x20 or cp == 0x7f:
            out += "\\x%02x" % cp
        elif 0x80 <= cp <= 0x9f:
            out += "".join("\\x%02x" % x for x in c.encode())
        elif cp in BAD:
            out += "\\u%04x" % cp
        else:
            out += c
        i += len(c.encode())
    return out
names = []  # (raw bytes, ingested as JSON)
for cp in list(range(1, 256)) + FORMAT:
    c = chr(cp).encode()
    names += [(b"a" + c + b"z", True), (b"u" + c, True), (b"j" + c, True), (b"p" + c, True)]
for b in range(1, 256):
    names += [(b"b" + bytes([b]) + b"z", False), (b"r" + bytes([b]), False), (b"k" + bytes([b]), False)]
fails = []
for by, keys in (("account,user,job,node,label:project", "aujp"), ("account,user,job", "aujbrk")):
    tab = open("%s/%s.table" % (T, by), "rb").read()
    page = open("%s/%s.html" % (T, by), "rb").read()
    for what, data in (("table", tab), ("html", page)):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            fails.append("%s %s: not UTF-8: %s" % (by, what, e))
            continue
        bad = sorted({hex(ord(c)) for c in text if ord(c) in BAD})
        if bad:
            fails.append("%s %s: raw characters %s" % (by, what, bad[:10]))
    ttext = tab.decode("utf-8", "replace")
    htext = page.decode("utf-8", "replace")
    tags = {t.lower() for t in re.findall(r"<(/?[!a-zA-Z][a-zA-Z0-9]*)", htext)} - {
        "!doctype", "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "div",
        "span", "b", "dl", "dt", "dd", "table", "tr", "th", "td", "svg", "g", "rect", "text",
        "line"}
    tags = {t for t in tags if t.lstrip("/") not in ("html", "head", "title", "style", "body", "h1",
            "h2", "h3", "p", "div", "span", "b", "dl", "dt", "dd", "table", "tr", "th", "td", "svg", "g",
            "text")}
    if tags:
        fails.append("%s html: unexpected tags %s" % (by, sorted(tags)[:5]))
    n = 0
    for raw, _ in names:
        if chr(raw[0]) not in keys:
            continue
        s = shown_bytes(raw)
        n += 1
        if s not in ttext:
            fails.append("%s table: %r not shown as %r" % (by, raw, s))
        if html.escape(s, quote=True).replace("&#x27;", "&#39;") not in htext:
            fails.append("%s html: %r not shown as %r" % (by, raw, html.escape(s)))
    # JSON: valid, the ingested names exactly, the raw ones escaped
    js = json.loads(open("%s/%s.json" % (T, by), "rb").read().decode("utf-8"))
    got = {r[d] for r in js["rows"] for d in ("account", "user", "job")}
    for raw, ingested in names:
        if raw[:1] in (b"a", b"u", b"j") and ingested and raw.decode() not in got:
            fails.append("%s json: %r missing" % (by, raw))
        if raw[:1] in (b"b", b"r", b"k") and by == "account,user,job":
            want = raw.decode() if raw[1] < 0x80 else shown_bytes(raw)
            if want not in got:
                fails.append("%s json: raw %r missing (want %r)" % (by, raw, want))
    # CSV: the names as they are (formulas neutralised)
    rows = list(csv.DictReader(io.StringIO(open("%s/%s.csv" % (T, by), "rb").read().decode("utf-8", "surrogateescape"), newline="")))
    gotc = {r["account"] for r in rows}
    for raw, ingested in names:
        if raw[:1] == b"a" and raw.decode() not in gotc:
            fails.append("%s csv: %r missing" % (by, raw))
    for f in ("=HYPERLINK(\"http://x\",\"y\")", "+cmd", "-2+3", "@SUM(A1)"):
        if "'" + f not in gotc:
            fails.append("%s csv: %r not neutralised" % (by, f))
    print("%s: %d names checked in the table and HTML" % (by, n))
print("\n".join(fails[:20]))
sys.exit(1 if fails else 0)
PY
[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
