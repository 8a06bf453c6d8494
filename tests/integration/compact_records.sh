#!/bin/bash
# Compact records: spool entries compressed one by one (zstd against the built-in dictionary)
# and upload bodies compressed (Content-Encoding: zstd) once the collector advertises it.
# Truth from outside the agent: the spool read with tests/integration/spool_frames.py (its own
# decoder), the rows the collector stored (plain SQL), and a forwarder that counts the bytes
# and headers of every POST.
#  1. collector: a zstd body is stored as the same records (the plain resend is duplicate);
#     answers advertise Accept-Encoding: zstd; a zstd bomb (1 KiB -> 64 MiB) is 413 with the
#     collector's memory bounded; a broken zstd body 400; Content-Encoding: gzip 415; nothing
#     stored on any refusal.
#  2. agent -> forwarder -> collector: 40 tasks spooled while the collector is down; every
#     spooled record (decoded from outside) is stored byte-for-byte equal as JSON; the spool's
#     records took at most a third of their size on disk; the first POST plain, the others zstd,
#     and the bytes on the wire at most a quarter of the NDJSON.
#  3. a collector that does not advertise zstd: the agent never compresses, everything stored.
#  4. behind a balancer where every second zstd POST reaches a collector that reads it as
#     NDJSON (400 without Accept-Encoding): each such batch is resent plain, nothing
#     dead-lettered, everything stored once.
. "$(dirname "$0")/lib.sh"
need_root
command -v zstd >/dev/null || skip "zstd missing"
read -r PORT PPORT MPORT <<<"$(free_ports 3)"
DB=$T/records.db
TOKEN=it-node-token-0123456789abcdef
node_token "$TOKEN"
COLL= PROXY=
start_collector() {
	collector_up "$T/collector.log" --max-body 2M
}
stop_collector() { [ -n "$COLL" ] && kill "$COLL" 2>/dev/null && wait "$COLL" 2>/dev/null; COLL=; }
start_proxy() { # MODE
	: >"$T/wire"
	python3 tests/integration/http_count_proxy.py $PPORT $PORT "$T/wire" "$1" &
	PROXY=$!
	for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PPORT) 2>/dev/null && return; sleep 0.1; done
	fail "forwarder did not start"
}
stop_proxy() { [ -n "$PROXY" ] && kill "$PROXY" 2>/dev/null && wait "$PROXY" 2>/dev/null; PROXY=; }
trap 'stop_proxy; stop_collector; cleanup' EXIT
post() { # FILE [curl args]: CODE, $T/resp, $T/hdr
	local f=$1
	shift
	CODE=$(curl -s -D "$T/hdr" -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-H 'Content-Type: application/x-ndjson' "$@" --data-binary "@$f" \
		"http://127.0.0.1:$PORT/v1/records")
}

# --- 1. the collector ---------------------------------------------------------------------------
start_collector
"$O/tests/bench/helper_ingest_load" gen --node it-node --count 200 --prefix zz- >"$T/b200"
zstd -q -19 -c "$T/b200" >"$T/b200.zst"
post "$T/b200.zst" -H 'Content-Encoding: zstd'
acc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["accepted"])' "$T/resp" 2>/dev/null)
[ "$CODE" = 200 ] && [ "$acc" = 200 ] && [ "$(q 'SELECT count(*) FROM records')" = 200 ] \
	&& pass "a zstd body ($(stat -c %s "$T/b200.zst") bytes for $(stat -c %s "$T/b200")) stored as 200 records" \
	|| fail "zstd body: HTTP $CODE, accepted $acc: $(head -c 300 "$T/resp")"
grep -qi '^Accept-Encoding: zstd' "$T/hdr" && pass "answers advertise Accept-Encoding: zstd" \
	|| fail "no Accept-Encoding in: $(cat "$T/hdr")"
post "$T/b200"
dup=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["duplicate"])' "$T/resp" 2>/dev/null)
[ "$CODE" = 200 ] && [ "$dup" = 200 ] && pass "the same batch plain: 200 duplicate (the same records)" \
	|| fail "plain resend: HTTP $CODE, duplicate $dup"
python3 -c 'import sys; sys.stdout.buffer.write(b"\n" * (64 << 20))' | zstd -q -19 -c >"$T/bomb.zst"
rss0=$(awk '/VmHWM/{print $2}' /proc/$COLL/status)
post "$T/bomb.zst" -H 'Content-Encoding: zstd'
rss1=$(awk '/VmHWM/{print $2}' /proc/$COLL/status)
[ "$CODE" = 413 ] && [ $((rss1 - rss0)) -lt 16384 ] \
	&& pass "zstd bomb ($(stat -c %s "$T/bomb.zst") bytes -> 64 MiB): 413 ($(head -c 120 "$T/resp")), peak memory +$((rss1 - rss0)) KiB" \
	|| fail "zstd bomb: HTTP $CODE, peak memory $rss0 -> $rss1 KiB"
head -c 300 /dev/urandom >"$T/junk"
post "$T/junk" -H 'Content-Encoding: zstd'
[ "$CODE" = 400 ] && pass "a broken zstd body: 400 ($(head -c 100 "$T/resp"))" || fail "junk zstd: HTTP $CODE"
head -c -20 "$T/b200.zst" >"$T/cut.zst"
post "$T/cut.zst" -H 'Content-Encoding: zstd'
[ "$CODE" = 400 ] && pass "a zstd body cut short: 400" || fail "cut zstd: HTTP $CODE"
post "$T/b200" -H 'Content-Encoding: gzip'
[ "$CODE" = 415 ] && pass "Content-Encoding: gzip: 415 ($(head -c 100 "$T/resp"))" || fail "gzip: HTTP $CODE"
[ "$(q 'SELECT count(*) FROM records')" = 200 ] && pass "nothing stored on any refusal" \
	|| fail "records after refusals: $(q 'SELECT count(*) FROM records')"
stop_collector
rm -f "$DB" "$DB"-*

# --- 2. agent -> forwarder -> collector ---------------------------------------------------------
printf '[collector]\nbatch_records = 25\nbatch_delay = 100ms\n' >"$T/batch.conf"
phase() { # NAME MODE: 40 tasks spooled with the collector down, then uploaded through MODE
	local name=$1 mode=$2
	rm -rf "$STATE" "$DB" "$DB"-*
	start_agent --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PPORT" \
		--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
	for i in $(seq 40); do ctl run --label phase=$name -- sh -c "echo $i >/dev/null" >/dev/null; done
	# all 40 ended (60 s at most: a loaded host), else the spool below is not the whole phase
	local live=?
	for _ in $(seq 600); do
		live=$(ctl ps --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null)
		[ "$live" = 0 ] && break
		sleep 0.1
	done
	[ "$live" = 0 ] || fail "$name: $live of the 40 tasks still live after 60 s"
	stop_agent
	# every record the agent spooled, decoded from outside
	python3 - "$STATE"/spool/seg-*.log >"$T/spooled.$name" <<'PY'
import json, sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames, record
raw = stored = 0
for p in sys.argv[1:]:
    for pos, seq, enc, n in frames(p):
        r = record(p, pos)
        raw += len(r)
        stored += n
        print(json.dumps(json.loads(r), sort_keys=True))
print("#", raw, stored, file=sys.stderr)
PY
	SPOOL_RAW_STORED=$(python3 - "$STATE"/spool/seg-*.log <<'PY'
import sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames, record
raw = stored = 0
for p in sys.argv[1:]:
    for pos, seq, enc, n in frames(p):
        raw += len(record(p, pos)); stored += n
print(raw, stored)
PY
)
	start_collector
	start_proxy "$mode"
	start_agent --config "$T/batch.conf" --collector-url "http://127.0.0.1:$PPORT" \
		--token-file "$T/token" --metrics-listen 127.0.0.1:$MPORT
	for _ in $(seq 150); do
		[ "$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '$1 == "corral_spool_pending_records" {print $2}')" = 0 ] && break
		sleep 0.2
	done
	stop_agent
	stop_proxy
	sqlite3 "$DB" "SELECT body FROM records" | python3 -c '
import json, sys
for l in sys.stdin:
    print(json.dumps(json.loads(l), sort_keys=True))' >"$T/stored.$name"
	stop_collector
	n=$(wc -l <"$T/spooled.$name")
	# stored = spooled + the node.sample of the second start (emitted after the snapshot)
	missing=$(sort "$T/spooled.$name" | comm -23 - <(sort "$T/stored.$name") | wc -l)
	extra=$(sort "$T/stored.$name" | comm -13 <(sort "$T/spooled.$name") - | grep -vc '"type": "node.sample"')
	if [ "$n" -ge 80 ] && [ "$missing" = 0 ] && [ "$extra" = 0 ]; then
		pass "$name: all $n spooled records stored, each equal to the spool's own bytes"
	else
		fail "$name: spooled $n, stored $(wc -l <"$T/stored.$name"): $missing missing, $extra other than node.sample added: $(sort "$T/spooled.$name" "$T/stored.$name" | uniq -u | head -c 400)"
	fi
	[ -s "$STATE/dead-letter.ndjson" ] && fail "$name: dead-lettered: $(head -c 300 "$STATE/dead-letter.ndjson")"
	WIRE=$(python3 - "$T/wire" <<'PY'
import json, sys
posts = [json.loads(l) for l in open(sys.argv[1]) if '"POST"' in l]
z = [p for p in posts if p["ce"] == "zstd"]
print(len(posts), len(z), sum(p["bytes"] for p in z), sum(p["raw"] for p in z),
      sum(1 for p in z if p["status"] == 400), posts[0]["ce"] or "plain" if posts else "-")
PY
)
}
phase zstd pass
read -r raw stored <<<"$SPOOL_RAW_STORED"
[ "$((stored * 3))" -le "$raw" ] && pass "spool: $raw bytes of records stored in $stored ($(python3 -c "print(round($raw/$stored, 2))")x)" \
	|| fail "spool: $raw bytes of records stored in $stored"
read -r posts zposts wire raw refused first <<<"$WIRE"
[ "$first" = plain ] && [ "$zposts" = $((posts - 1)) ] && [ "$((wire * 4))" -le "$raw" ] \
	&& pass "wire: $posts POSTs, the first plain, then $zposts zstd bodies of $wire bytes for $raw of NDJSON ($(python3 -c "print(round($raw/$wire, 2))")x)" \
	|| fail "wire: $posts POSTs ($first first), $zposts zstd, $wire bytes for $raw of NDJSON"

phase strip strip
read -r posts zposts wire raw refused first <<<"$WIRE"
[ "$zposts" = 0 ] && [ "$posts" -gt 1 ] && pass "a collector without zstd: $posts POSTs, none compressed" \
	|| fail "strip: $zposts of $posts POSTs compressed"

phase mixed mixed
read -r posts zposts wire raw refused first <<<"$WIRE"
[ "$refused" -ge 1 ] && pass "mixed balancer: $refused zstd POSTs answered 400 by an older collector, resent plain; $posts POSTs" \
	|| fail "mixed: no zstd POST refused ($zposts zstd of $posts)"
finish
