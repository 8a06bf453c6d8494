#!/bin/bash
# The agent honours a collector's 503 + Retry-After, with jitter. A listener of this test's own
# (not the collector) answers the first three POSTs 503 with "Retry-After: 2", then like the
# collector (200, every record accepted), and writes down when each POST arrived (its own
# clock). Checked: no retry came sooner than 2 s after the 503 it follows (the agent's own
# backoff would have retried within 0.5, 1 and 2 s), none later than the rule allows
# (2 s + a jitter of at most 2, 4, 8 s: the window doubles per 503 in a row), every record of
# the task arrived.
# Then a second listener answers 503 + "Retry-After: 1" to everything and the agent is left
# alone for 12 s: the number of POSTs it made is bounded by what the rule allows.
. "$(dirname "$0")/lib.sh"
need_root
command -v python3 >/dev/null || skip "python3 missing"
read -r PORT PORT2 <<<"$(free_ports 2)"
echo "retry-after-token-0123456789" >"$T/token"
chmod 600 "$T/token"
LPID=
trap 'stop_agent; [ -n "$LPID" ] && kill "$LPID" 2>/dev/null; cleanup' EXIT

# listener PORT FAIL_FIRST RETRY_AFTER: POST times (monotonic s) to $T/posts, records to $T/ids
listener() {
	python3 - "$1" "$2" "$3" "$T" <<'PY' &
import http.server, json, sys, time, threading
port, fail_first, ra, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
n = [0]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            n[0] += 1
            k = n[0]
            with open(d + "/posts", "a") as f:
                f.write("%.6f %d\n" % (time.monotonic(), k))
        if fail_first < 0 or k <= fail_first:
            out = b'{"error":"overloaded"}\n'
            self.send_response(503)
            self.send_header("Retry-After", ra)
        else:
            lines = [json.loads(l) for l in body.split(b"\n") if l.strip()]
            with open(d + "/ids", "a") as f:
                for r in lines:
                    f.write(r["record_id"] + "\n")
            res = [{"i": i, "record_id": r["record_id"], "status": "accepted"} for i, r in enumerate(lines)]
            out = json.dumps({"accepted": len(lines), "duplicate": 0, "conflict": 0, "rejected": 0,
                              "results": res}).encode() + b"\n"
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
	LPID=$!
	# up when its port's listener is this python (not another process that holds the port)
	for _ in $(seq 200); do
		kill -0 "$LPID" 2>/dev/null || break
		ss -Hltnp "sport = :$1" | grep -q "pid=$LPID," && return 0
		sleep 0.05
	done
	echo "listener did not start on port $1"; exit 1
}

# --- 1. three 503s with Retry-After: 2, then 200 -------------------------------------------
listener "$PORT" 3 2
printf '[collector]\nbatch_delay = 100ms\n' >"$T/agent.conf"
start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token"
ctl run --wait -- /bin/true >/dev/null 2>&1 || fail "task did not run"
for _ in $(seq 600); do
	[ -s "$T/ids" ] && [ "$(wc -l <"$T/ids")" -ge 2 ] && break
	sleep 0.1
done
python3 - "$T/posts" <<'PY' && pass "three 503 + Retry-After: 2 honoured (gaps in the listener's clock above)" || fail "Retry-After not honoured"
import sys
t = [float(l.split()[0]) for l in open(sys.argv[1])]
if len(t) < 4:
    print("only %d POSTs" % len(t)); sys.exit(1)
gaps = [b - a for a, b in zip(t, t[1:4])]
print("gaps after the three 503s: " + ", ".join("%.3f s" % g for g in gaps))
ok = True
for k, g in enumerate(gaps):
    hi = 2 + 2 * 2 ** k + 0.5  # Retry-After + its window doubled per 503, 0.5 s slack
    if g < 2.0 or g > hi:
        print("gap %d: %.3f s outside [2, %.1f]" % (k + 1, g, hi)); ok = False
sys.exit(0 if ok else 1)
PY
ids=$(sort -u "$T/ids" | wc -l)
[ "$ids" -ge 2 ] && pass "the task's records arrived after the 503s ($ids records)" ||
	fail "records after the 503s: $ids"
stop_agent
kill "$LPID"; wait "$LPID" 2>/dev/null; LPID=

# --- 2. 503 + Retry-After: 1 for good: the agent does not hammer ---------------------------
rm -f "$T/posts" "$T/ids"
PORT=$PORT2
listener "$PORT" -1 1
start_agent --no-bpf --config "$T/agent.conf" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$T/token"
ctl run --wait -- /bin/true >/dev/null 2>&1 || fail "task did not run"
sleep 12
stop_agent
n=$(wc -l <"$T/posts" 2>/dev/null || echo 0)
# each wait is at least 1 s: at most 12 retries after the first POST
[ "$n" -ge 2 ] && [ "$n" -le 13 ] && pass "503 + Retry-After: 1 for 12 s: $n POSTs (at most 13 allowed)" ||
	fail "503 + Retry-After: 1 for 12 s: $n POSTs"
[ "$FAILS" -eq 0 ]
