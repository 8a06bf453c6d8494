#!/bin/bash
# A power cut under corral-collector on SQLite: every record it acknowledged is stored.
# The collector's ingest commits without fsync (synchronous=NORMAL) and fsyncs the WAL itself
# before it answers (docs/collector.md, "Commit, then fsync beside the writer"); this checks
# that no answer goes out before the fsync that covers its batch.
# A power cut is made with libpowercut.so (tests/integration/powercut/): the collector's
# writes to its WAL stay in its memory until it fsyncs the file, so a kill -9 loses what was
# not synced, as a power cut loses the page cache. First the library itself is checked: a
# SQLite commit without fsync (synchronous=OFF) is lost at the kill, one with it is kept.
# Then 4 uploaders post 100 batches of 200 records concurrently, the collector is killed once
# 4,000 have been acknowledged, and the database is opened again: every acknowledged record is
# there, the database passes its integrity check, and a resend of every batch to a new
# collector ends with each of the 20,000 records stored once.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
COLL=$O/corral-collector
LOAD=$O/tests/bench/helper_ingest_load
CUT=$PWD/$O/tests/integration/libpowercut.so
case $O in /*) CUT=$O/tests/integration/libpowercut.so ;; esac
for b in "$COLL" "$LOAD" "$CUT"; do
	[ -e "$b" ] || { echo "FAIL: $b not built (make O=$O all)"; exit 1; }
done
command -v curl >/dev/null || { echo "FAIL: curl(1) missing"; exit 1; }

T=$(mktemp -d /tmp/collector_powercut.XXXXXX)
CPID=
cleanup() {
	[ -n "$CPID" ] && kill -9 "$CPID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { echo "ok: $*"; }
TOK=tok-node-pc-0123456789abcdef
printf 'node pc %s\n' "$TOK" > "$T/tokens"
chmod 600 "$T/tokens"

# ---- the library: what is not synced is lost at the kill, what is synced is kept ----
cat > "$T/cut.py" <<'EOF'
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("PRAGMA synchronous=%s" % sys.argv[2])
c.execute("BEGIN")
c.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
c.execute("COMMIT")
assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 100
os.kill(os.getpid(), signal.SIGKILL)
EOF
for mode in OFF:0 FULL:100; do
	rm -f "$T"/h.db*
	python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL');
c.execute('CREATE TABLE t(x)'); c.commit()" "$T/h.db"
	LD_PRELOAD=$CUT POWERCUT_FILE=$T/h.db-wal python3 "$T/cut.py" "$T/h.db" "${mode%:*}" 2>/dev/null
	n=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])" "$T/h.db")
	[ "$n" = "${mode#*:}" ] && ok "library: synchronous=${mode%:*}: $n of 100 rows after the cut" \
		|| fail "library: synchronous=${mode%:*}: $n rows after the cut, expected ${mode#*:}"
done

# ---- the collector ----
for i in $(seq 0 99); do
	"$LOAD" gen --node pc --count 200 --start $((i * 200)) --prefix cut- > "$T/b$i"
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DB=sqlite:$T/c.db
"$COLL" migrate --db "$DB" >/dev/null || { echo "FAIL: migrate"; exit 1; }
start() { # start [env...]: a collector on $DB, waits for /healthz
	env "$@" "$COLL" serve --listen "127.0.0.1:$port" --db "$DB" --tokens "$T/tokens" \
		>>"$T/collector.log" 2>&1 &
	CPID=$!
	for _ in $(seq 200); do
		# answered by this collector (not one whose port it could not take)
		curl -sf "http://127.0.0.1:$port/healthz" >/dev/null &&
			ss -Hltnp "sport = :$port" | grep -q "pid=$CPID," && return 0
		sleep 0.05
	done
	echo "FAIL: collector did not come up"; cat "$T/collector.log"; exit 1
}
start LD_PRELOAD="$CUT" POWERCUT_FILE="$T/c.db-wal" POWERCUT_STATS="$T/stats"

# 4 uploaders; each acknowledged record id is appended to acked (flushed) as its answer arrives
cat > "$T/post.py" <<'EOF'
import http.client, json, sys, threading
port, tok, out, files = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
lock = threading.Lock()
ack = open(out, "a")
def worker(mine):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for f in mine:
            c.request("POST", "/v1/records", open(f, "rb").read(),
                      {"Authorization": "Bearer " + tok, "Content-Type": "application/x-ndjson"})
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                continue
            ids = [x["record_id"] for x in json.loads(body)["results"]
                   if x["status"] in ("accepted", "duplicate")]
            with lock:
                ack.write("".join(i + "\n" for i in ids))
                ack.flush()
    except Exception:
        pass  # the collector is gone: this uploader stops
ts = [threading.Thread(target=worker, args=(files[k::4],)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
EOF
: > "$T/acked"
python3 "$T/post.py" "$port" "$TOK" "$T/acked" $(for i in $(seq 0 99); do echo "$T/b$i"; done) &
PY=$!
for _ in $(seq 600); do
	[ "$(wc -l < "$T/acked")" -ge 4000 ] && break
	kill -0 $PY 2>/dev/null || break
	sleep 0.01
done
kill -9 "$CPID"; wait "$CPID" 2>/dev/null; CPID=
wait $PY
acked=$(sort -u "$T/acked" | wc -l)
syncs=$(tail -1 "$T/stats" 2>/dev/null | sed -n 's/syncs=\([0-9]*\).*/\1/p')
if [ "$acked" -ge 4000 ] && [ "$acked" -lt 20000 ] && [ "${syncs:-0}" -ge 1 ]; then
	ok "cut after $acked acknowledged records ($syncs fsyncs of the WAL before it: $(tail -1 "$T/stats"))"
else
	fail "the cut: $acked acknowledged, ${syncs:-no} syncs (want 4000..19999 and >= 1)"
	tail -5 "$T/collector.log"
fi

# what the database holds after the cut (opened without the library: recovery from the file)
"$COLL" dump --db "$DB" --format json > "$T/dump" 2>"$T/dump.err" || fail "dump after the cut: $(cat "$T/dump.err")"
python3 -c 'import json,sys; [print(json.loads(l)["record_id"]) for l in open(sys.argv[1])]' "$T/dump" |
	sort -u > "$T/stored"
lost=$(comm -23 <(sort -u "$T/acked") "$T/stored" | wc -l)
stored=$(wc -l < "$T/stored")
[ "$lost" = 0 ] && ok "every acknowledged record stored ($acked acknowledged, $stored stored)" \
	|| fail "$lost acknowledged records lost in the cut (e.g. $(comm -23 <(sort -u "$T/acked") "$T/stored" | head -1))"
ic=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])" "$T/c.db")
[ "$ic" = ok ] && ok "integrity_check: ok" || fail "integrity_check: $ic"

# the uploaders resend everything to a new collector: each record once
start
for i in $(seq 0 99); do
	code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $TOK" \
		-H 'Content-Type: application/x-ndjson' --data-binary "@$T/b$i" \
		"http://127.0.0.1:$port/v1/records")
	[ "$code" = 200 ] || fail "resend of batch $i: $code $(head -c 300 "$T/resp")"
done
kill "$CPID"; wait "$CPID" 2>/dev/null; CPID=
n=$("$COLL" dump --db "$DB" --format json | wc -l)
u=$("$COLL" dump --db "$DB" --format json | python3 -c 'import json,sys; print(len({json.loads(l)["record_id"] for l in sys.stdin}))')
[ "$n" = 20000 ] && [ "$u" = 20000 ] && ok "after the resend: 20000 records, each once" \
	|| fail "after the resend: $n records, $u distinct (want 20000)"

[ "$fails" = 0 ] || { echo "collector_powercut: $fails failure(s)"; exit 1; }
echo "collector_powercut: all passed"
