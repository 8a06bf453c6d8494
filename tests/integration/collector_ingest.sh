#!/bin/bash
# corral-collector ingest faults, on SQLite and on a PostgreSQL server started here:
# resend -> all duplicate; wrong token -> 401; another node's records -> 403;
# malformed line -> 422 naming it; oversize body -> 413; empty/bad type -> 400; two
# collectors ingesting the same batch at once -> each record once; concurrent overlapping
# batches to one collector (group commit) -> each record accepted once; kill -9 of the
# collector during a 50,000-record batch -> all or nothing, the resend completes it.
# Queued rollup deltas (both backends): applied without a report, after a kill -9 by the next
# collector, by two collectors at once each once; a malformed queued batch fails the report.
# Nothing stored on any rejection. Skips the PostgreSQL half only without its binaries.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
coll_init collector_ingest "$LOAD"
coll_tokens --reader n1 n2

# post FILE TOKEN PORT -> sets CODE and BODY ($T/resp)
post() {
	CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $2" \
		-H 'Content-Type: application/x-ndjson' --data-binary "@$1" \
		"http://127.0.0.1:$3/v1/records")
	BODY=$(head -c 600 "$T/resp")
}
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/resp" "$1"; }
count() { "$COLL" dump --db "$1" --format json | wc -l; }

run_suite() {
	local db=$1 name=$2 port port2 before n
	port=$(free_port)
	echo "== $name"
	# PostgreSQL with 2 connections, not its default 4: six concurrent batches must find
	# them all busy now and then for the group commit check below (transactions no longer
	# wait on each other's rollup rows, so with 4 they seldom queue)
	local conns=()
	[ "$name" = postgresql ] && conns=(--db-connections 2)
	start_collector "$db" "$port" --max-body 2M "${conns[@]}" || { fail "$name: start"; return; }
	local pid=$CPID

	"$LOAD" gen --node n1 --count 1000 --prefix "$name-" > "$T/b1000"
	post "$T/b1000" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["accepted"]')" = 1000 ] && [ "$(jget 'len(d["results"])')" = 1000 ] \
		&& ok "$name: 1000 accepted" || fail "$name: first post: $CODE $BODY"
	post "$T/b1000" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["duplicate"]')" = 1000 ] && [ "$(jget 'd["accepted"]')" = 0 ] \
		&& [ "$(jget 'all(r["status"]=="duplicate" for r in d["results"])')" = True ] \
		&& ok "$name: resend all duplicate" || fail "$name: resend: $CODE $BODY"
	n=$(count "$db"); [ "$n" = 1000 ] && ok "$name: count 1000" || fail "$name: count $n != 1000"
	# the same id: reformatted (keys reordered, spaces) is a resend; another body a conflict,
	# next to a resend, and twice (kept once)
	python3 - "$T/b1000" "$T/bconf" "$T/bsame" "$name" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().split("\n")
r0, r1 = json.loads(lines[0]), json.loads(lines[1])
open(sys.argv[3], "w").write(json.dumps(dict(reversed(list(r0.items()))), indent=None) + "\n")
r1["usage"]["wall_ns"] += 1
open(sys.argv[2], "w").write("\n".join(json.dumps(x) for x in (r1, r0, r1)) + "\n")
# the task's end made again by a restarted agent: later, other figures, "adopted"
r2 = json.loads(lines[2]); r2["time"] = "2026-12-31T00:00:00Z"; r2["usage"]["wall_ns"] += 7
r2["adopted"] = True
open(sys.argv[3] + ".adopted", "w").write(json.dumps(r2) + "\n")
PY
	post "$T/bsame.adopted" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["duplicate"]')" = 1 ] \
		&& ok "$name: a task.end made again (later, other figures) by a restarted agent (adopted) is a duplicate" \
		|| fail "$name: re-made task.end: $CODE $BODY"
	post "$T/bsame" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["duplicate"]')" = 1 ] && ok "$name: a reformatted resend is a duplicate" \
		|| fail "$name: reformatted resend: $CODE $BODY"
	post "$T/bconf" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget '[r["status"] for r in d["results"]]')" = "['conflict', 'duplicate', 'conflict']" ] \
		&& [ "$(jget 'd["conflict"]')" = 2 ] && [ "$(jget 'd["duplicate"]')" = 1 ] \
		&& ok "$name: another body under a stored id answered conflict, never duplicate" \
		|| fail "$name: conflict: $CODE $BODY"
	n=$(count "$db"); [ "$n" = 1000 ] || fail "$name: count $n after the conflict (want 1000)"
	n=$(sql "$db" "SELECT count(*) FROM conflicts WHERE record_id = '$name-n1-000000000001'")
	[ "$n" = 1 ] || fail "$name: $n rows in conflicts (want 1: the same body twice)"
	n=$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "corral_collector_records_total{status=\"conflict\"}" {print $2}')
	[ "$n" = 2 ] || fail "$name: conflict metric $n"
	grep -q "record id conflict from node n1: $name-n1-000000000001" "$T/collector-$port.log" \
		|| fail "$name: conflict not logged"

	"$LOAD" gen --node n1 --count 10 --start 5000 --prefix "$name-" > "$T/b10"
	post "$T/b10" "wrong-token-0123456789" "$port"
	[ "$CODE" = 401 ] || fail "$name: wrong token gave $CODE"
	CODE=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/x-ndjson' \
		--data-binary "@$T/b10" "http://127.0.0.1:$port/v1/records")
	[ "$CODE" = 401 ] || fail "$name: no token gave $CODE"
	post "$T/b10" "$RD" "$port"
	[ "$CODE" = 403 ] || fail "$name: reader token writing gave $CODE"
	"$LOAD" gen --node n2 --count 10 --start 6000 --prefix "$name-" > "$T/b10n2"
	cat "$T/b10" "$T/b10n2" > "$T/bmix"
	post "$T/bmix" "$N1" "$port"
	[ "$CODE" = 403 ] && grep -q "node 'n2'" "$T/resp" && ok "$name: other node 403" \
		|| fail "$name: other node: $CODE $BODY"
	n=$(count "$db"); [ "$n" = 1000 ] && ok "$name: nothing stored on 401/403" || fail "$name: count $n after 401/403"

	# malformed: garbage on line 1, a type error on line 3
	{ head -1 "$T/b10"; echo '{"schema":"corral.record/v1", not json'; sed -n 2p "$T/b10" \
		| sed 's/"wall_ns":[0-9]*/"wall_ns":"soon"/'; sed -n 3p "$T/b10"; } > "$T/bbad"
	post "$T/bbad" "$N1" "$port"
	if [ "$CODE" = 422 ] && [ "$(jget 'len(d["results"])')" = 4 ] \
		&& [ "$(jget 'd["rejected"]')" = 2 ] \
		&& [ "$(jget 'd["results"][1]["status"]')" = rejected ] \
		&& [ "$(jget '"usage.wall_ns" in d["results"][2]["reason"]')" = True ] \
		&& [ "$(jget 'd["results"][2]["record_id"]')" = "$name-n1-000000005001" ]; then
		ok "$name: malformed 422, reason: $(jget 'd["results"][2]["reason"]')"
	else
		fail "$name: malformed: $CODE $BODY"
	fi
	: > "$T/empty"
	post "$T/empty" "$N1" "$port"; [ "$CODE" = 400 ] || fail "$name: empty body gave $CODE"
	CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $N1" \
		-H 'Content-Type: text/plain' --data-binary "@$T/b10" "http://127.0.0.1:$port/v1/records")
	[ "$CODE" = 400 ] || fail "$name: text/plain gave $CODE"
	"$LOAD" gen --node n1 --count 4000 --start 10000 --prefix "$name-" > "$T/big"
	post "$T/big" "$N1" "$port"
	[ "$CODE" = 413 ] && ok "$name: oversize 413 ($(stat -c %s "$T/big") bytes > 2M)" || fail "$name: oversize gave $CODE"
	CODE=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$port/v1/records")
	[ "$CODE" = 405 ] || fail "$name: DELETE gave $CODE"
	CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/nope")
	[ "$CODE" = 404 ] || fail "$name: /nope gave $CODE"
	n=$(count "$db"); [ "$n" = 1000 ] && ok "$name: nothing stored on 422/413/400" || fail "$name: count $n after 4xx"
	curl -s "http://127.0.0.1:$port/metrics" > "$T/metrics"
	grep -q '^corral_collector_records_total{status="accepted"} 1000$' "$T/metrics" \
		&& grep -q '^corral_collector_http_requests_total{code="422"} 1$' "$T/metrics" \
		&& ok "$name: metrics" || fail "$name: metrics: $(grep records_total "$T/metrics")"
	CODE=$(curl -s -o "$T/q" -w '%{http_code}' -H "Authorization: Bearer $RD" \
		"http://127.0.0.1:$port/v1/records?node=n1&task=n1-t5&limit=5")
	[ "$CODE" = 200 ] && [ "$(wc -l < "$T/q")" = 1 ] && ok "$name: reader query" || fail "$name: query $CODE"

	# group commit: concurrent POSTs of overlapping batches to one collector. Batches that
	# queue while every connection is busy share a transaction; each record must still be
	# accepted exactly once and every reply must say which of its records were new. Rounds
	# are repeated until one of them grouped (so the grouped path is the one checked).
	local round grouped=0 tx0 tx1 base
	for round in 1 2 3 4 5; do
		base=$((200000 + round * 10000))
		for k in 0 1 2 3 4 5; do
			"$LOAD" gen --node n1 --count 600 --start $((base + k * 300)) --prefix "$name-" > "$T/g$k"
		done
		tx0=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^corral_collector_db_transactions_total //p')
		before=$(count "$db")
		local cps=()
		for k in 0 1 2 3 4 5; do
			curl -s -o "$T/gr$k" -H "Authorization: Bearer $N1" -H 'Content-Type: application/x-ndjson' \
				--data-binary "@$T/g$k" "http://127.0.0.1:$port/v1/records" &
			cps+=($!)
		done
		wait "${cps[@]}"
		tx1=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^corral_collector_db_transactions_total //p')
		n=$(count "$db")
		local check
		check=$(python3 - "$T" <<'PY'
import json, sys
acc, dup, seen = [], 0, set()
for k in range(6):
    d = json.load(open("%s/gr%d" % (sys.argv[1], k)))
    for r in d["results"]:
        seen.add(r["record_id"])
        if r["status"] == "accepted":
            acc.append(r["record_id"])
        elif r["status"] == "duplicate":
            dup += 1
    assert d["accepted"] == sum(r["status"] == "accepted" for r in d["results"])
print("ok" if len(acc) == len(set(acc)) == len(seen) == 2100 and dup == 1500
      else "accepted %d (%d distinct) of %d, duplicate %d" % (len(acc), len(set(acc)), len(seen), dup))
PY
)
		if [ "$check" != ok ] || [ "$n" != $((before + 2100)) ]; then
			fail "$name: group commit round $round: $check, count +$((n - before))"
			break
		fi
		if [ $((tx1 - tx0)) -lt 6 ]; then
			grouped=1
			ok "$name: group commit: 6 concurrent batches in $((tx1 - tx0)) transactions, each record accepted once"
			break
		fi
	done
	[ "$grouped" = 1 ] || [ "$check" != ok ] || fail "$name: no round grouped batches (5 rounds)"

	# two collectors on one database ingest the same batch at the same time
	port2=$(free_port)
	start_collector "$db" "$port2" || { fail "$name: second collector"; return; }
	"$LOAD" gen --node n2 --count 1500 --start 20000 --prefix "$name-" > "$T/b1500"
	before=$(count "$db")
	curl -s -o "$T/r1" -H "Authorization: Bearer $N2" -H 'Content-Type: application/x-ndjson' \
		--data-binary "@$T/b1500" "http://127.0.0.1:$port/v1/records" &
	local c1=$!
	curl -s -o "$T/r2" -H "Authorization: Bearer $N2" -H 'Content-Type: application/x-ndjson' \
		--data-binary "@$T/b1500" "http://127.0.0.1:$port2/v1/records"
	wait $c1
	local sum
	sum=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); print(a["accepted"]+b["accepted"], a["duplicate"]+b["duplicate"])' "$T/r1" "$T/r2" 2>&1)
	n=$(count "$db")
	[ "$sum" = "1500 1500" ] && [ "$n" = $((before + 1500)) ] && ok "$name: concurrent collectors: each record once" \
		|| fail "$name: concurrent: accepted/duplicate '$sum', count $n"
	kill -TERM "$CPID"; wait "$CPID" 2>/dev/null

	# kill -9 during a 50,000-record batch
	"$LOAD" gen --node n1 --count 50000 --start 100000 --prefix "$name-" > "$T/b50k"
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
	start_collector "$db" "$port" --max-body 256M --max-records 50000 || { fail "$name: restart"; return; }
	pid=$CPID
	before=$(count "$db")
	curl -s -o "$T/rk" -w '%{http_code}' -H "Authorization: Bearer $N1" \
		-H 'Content-Type: application/x-ndjson' --data-binary "@$T/b50k" \
		"http://127.0.0.1:$port/v1/records" > "$T/rk.code" &
	local cpid=$! caught=0
	# wait until the batch is in its transaction (the body has been read and the database
	# is being written), then SIGKILL
	for _ in $(seq 3000); do
		if in_transaction "$db" "$pid"; then caught=1; break; fi
		kill -0 $cpid 2>/dev/null || break
		sleep 0.01
	done
	kill -9 "$pid"; wait "$pid" 2>/dev/null
	wait $cpid
	[ "$caught" = 1 ] || fail "$name: the 50k batch finished before it could be killed"
	[ "$(cat "$T/rk.code")" != 200 ] || fail "$name: killed collector still answered 200"
	start_collector "$db" "$port" --max-body 256M --max-records 50000 || { fail "$name: restart after kill"; return; }
	pid=$CPID
	n=$(count "$db")
	if [ "$n" = "$before" ] || [ "$n" = $((before + 50000)) ]; then
		ok "$name: after kill -9: $((n - before)) of 50000 (all or nothing)"
	else
		fail "$name: after kill -9: $((n - before)) of 50000 stored (partial batch)"
	fi
	post "$T/b50k" "$N1" "$port"
	n=$(count "$db")
	if [ "$CODE" = 200 ] && [ "$n" = $((before + 50000)) ] \
		&& [ "$(jget 'd["accepted"]+d["duplicate"]')" = 50000 ]; then
		ok "$name: resend completes it: accepted $(jget 'd["accepted"]') duplicate $(jget 'd["duplicate"]')"
	else
		fail "$name: resend after kill: $CODE, count $n (want $((before + 50000)))"
	fi
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
	grep -q "finishing in-flight" "$T/collector-$port.log" || fail "$name: no graceful stop message"
}

# Ingest queues its rollup deltas in rollup_pending and a folder applies them (both backends).
# sql DB STATEMENT: runs it on either backend, prints the rows ('|' between columns).
sql() {
	case $1 in
	sqlite:*) sqlite3 -batch "${1#sqlite:}" "$2" ;;
	*) psql "$1" -Atqc "$2" ;;
	esac
}
# pending_zero DB: waits (10 s at most) until nothing is queued.
pending() { sql "$1" 'SELECT count(*) FROM rollup_pending'; }
pending_zero() {
	for _ in $(seq 200); do [ "$(pending "$1")" = 0 ] && return 0; sleep 0.05; done
	return 1
}
# rollups_match DB N: rollup_day counts N tasks and its CPU equals the records' (each delta
# applied once, none lost)
rollups_match() {
	sql "$1" "SELECT CASE WHEN (SELECT sum(tasks) FROM rollup_day) = $2 AND
		abs((SELECT sum(cpu_s) FROM rollup_day) -
		    (SELECT sum(cpu_user_ns + cpu_system_ns) / 1e9 FROM records WHERE type = 'task.end'))
		< 1e-6 * (SELECT sum(cpu_s) FROM rollup_day) THEN 't' ELSE 'f' END"
}
# post_queued DB PORT START FILE: a collector that does not fold (--fold-delay 3600000) on PORT
# (CPID), 2,000 task ends from START posted to it and left queued
post_queued() {
	start_collector "$1" "$2" --fold-delay 3600000 || { fail "fold: start"; return 1; }
	"$LOAD" gen --node n1 --count 2000 --start "$3" --prefix fold- > "$4"
	post "$4" "$N1" "$2"
	[ "$CODE" = 200 ] || fail "fold: post: $CODE $BODY"
	[ "$(pending "$1")" -gt 0 ] || fail "fold: nothing queued with --fold-delay 3600000"
}
fold_suite() {
	local db=$1 port port2 pid pid2 p1 p2
	"$COLL" migrate --db "$db" >/dev/null || { fail "fold: migrate"; return; }
	port=$(free_port)
	start_collector "$db" "$port" || { fail "fold: start"; return; }
	pid=$CPID
	"$LOAD" gen --node n1 --count 2000 --prefix fold- > "$T/f1"
	post "$T/f1" "$N1" "$port"
	[ "$CODE" = 200 ] || fail "fold: post: $CODE $BODY"
	if pending_zero "$db" && [ "$(rollups_match "$db" 2000)" = t ]; then
		ok "fold: the folder applied the queued deltas with no report asked for"
	else
		fail "fold: after 10 s: $(pending "$db") queued, rollups_match $(rollups_match "$db" 2000)"
	fi
	curl -s "http://127.0.0.1:$port/metrics" | grep -Eq '^corral_collector_rollup_folds_total [1-9]' ||
		fail "fold: corral_collector_rollup_folds_total not counted"
	kill -TERM "$pid"; wait "$pid" 2>/dev/null

	# queued deltas survive a kill -9 of the collector; the next one applies them at start
	post_queued "$db" "$port" 2000 "$T/f2" || return
	pid=$CPID
	kill -9 "$pid"; wait "$pid" 2>/dev/null
	start_collector "$db" "$port" || { fail "fold: restart"; return; }
	pid=$CPID
	if pending_zero "$db" && [ "$(rollups_match "$db" 4000)" = t ]; then
		ok "fold: deltas queued before a kill -9 applied once by the next collector"
	else
		fail "fold: after kill -9 and restart: $(pending "$db") queued, rollups_match $(rollups_match "$db" 4000)"
	fi
	kill -TERM "$pid"; wait "$pid" 2>/dev/null

	# 10,000 records committed since the last fold (two batches here): the folder folds at
	# once, not after the delay (COLL_FOLD_BACKLOG_RECORDS)
	start_collector "$db" "$port" --fold-delay 3600000 || { fail "fold: start"; return; }
	pid=$CPID
	"$LOAD" gen --node n1 --count 6000 --start 4000 --prefix fold- > "$T/f3"
	"$LOAD" gen --node n1 --count 6000 --start 10000 --prefix fold- > "$T/f4"
	post "$T/f3" "$N1" "$port"
	[ "$CODE" = 200 ] || fail "fold: post: $CODE $BODY"
	post "$T/f4" "$N1" "$port"
	[ "$CODE" = 200 ] || fail "fold: post: $CODE $BODY"
	if pending_zero "$db" && [ "$(rollups_match "$db" 16000)" = t ]; then
		ok "fold: 12,000 records committed: folded without waiting for the 1 h delay"
	else
		fail "fold: 12,000 records with --fold-delay 3600000: $(pending "$db") queued after 10 s, rollups_match $(rollups_match "$db" 16000)"
	fi
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
	case $db in postgresql*) fold_pg_restart "$db" ;; esac
	start_collector "$db" "$port" || { fail "fold: restart"; return; }
	pid=$CPID

	printf '[prices]\ncurrency = EUR\ncpu_core_hour = 0.03\nmemory_gib_hour = 0.004\ngpu_hour = 1.7\nio_read_gib = 0.001\nio_write_gib = 0.002\nnet_gib = 0.01\n' > "$T/prices.ini"
	case $db in sqlite:*) fold_malformed "$db"; fold_two "$db" 56000; return ;; esac
	# a batch queued by an older collector (layout 29: rollup_in rows in binary COPY form,
	# made here by PostgreSQL itself) is still applied, once
	local legacy sums="7::float8, 1::float8, 30::float8, 1.5::float8"
	for _ in $(seq 16); do sums="$sums, 0::float8"; done
	legacy=$(psql "$db" -Atc "COPY (SELECT 0::int4, '2026-11-15'::text, 'legacy'::text,
		'old'::text, ''::text, ''::text, ''::text, ''::text, ''::text, $sums)
		TO STDOUT WITH (FORMAT binary)" | tail -c +20 | head -c -2 | od -An -tx1 -v | tr -d ' \n')
	psql "$db" -qc "INSERT INTO rollup_pending VALUES (29, '\\x$legacy')" ||
		fail "fold: queue a layout-29 batch"
	# (a report folds first)
	"$COLL" report --db "$db" --prices "$T/prices.ini" --from 2026-11-01 --to 2027-01-01 \
		> "$T/rep.out" 2> "$T/rep.err" || fail "fold: report: $(cat "$T/rep.err")"
	if [ "$(pending "$db")" = 0 ] && [ "$(psql "$db" -Atc "SELECT tasks, failed_tasks, wall_s, cpu_s
		FROM rollup_day WHERE account = 'legacy'")" = "7|1|30|1.5" ]; then
		ok "fold: a batch queued in the older layout (29-field rollup_in rows) applied once"
	else
		fail "fold: layout-29 batch: $(pending "$db") queued, rollup_day: $(psql "$db" -Atc \
			"SELECT * FROM rollup_day WHERE account = 'legacy'")"
	fi
	psql "$db" -qc "DELETE FROM rollup_day WHERE account = 'legacy'"
	fold_malformed "$db"
	fold_two "$db" 58000
}

# PostgreSQL restarted while deltas are queued and no fold is due: the collector's final fold
# at stop finds the folder's connection broken (its first use after the restart), folds again
# on a fresh one, and nothing stays queued (16,000 task ends before, 2,000 more here)
fold_pg_restart() {
	local db=$1 port pid
	port=$(free_port)
	post_queued "$db" "$port" 50000 "$T/f5" || return
	pid=$CPID
	# pg_ctl restart keeps the server's options (postmaster.opts)
	su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m fast -w -l $T/pg/log restart" \
		>/dev/null 2>&1 || { fail "fold: PostgreSQL restart: $(tail -3 "$T/pg/log")"; return; }
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
	if [ "$(pending "$db")" = 0 ] && [ "$(rollups_match "$db" 18000)" = t ]; then
		ok "fold: PostgreSQL restarted with deltas queued: the final fold at stop applies them on a fresh connection"
	else
		fail "fold: PostgreSQL restarted before stop: $(pending "$db") queued, rollups_match $(rollups_match "$db" 18000)"
	fi
}

fold_malformed() {
	local db=$1
	# queued batches that are not rollup_in rows: a report fails naming rollup_pending, the
	# batches stay queued (never dropped). First the right layout over rows that are not 29
	# fields (the row parser rejects it), then a wrong layout beside it, then bytes that are
	# not the compact form.
	local layout want=0
	for layout in 29 27 1001; do
		want=$((want + 1))
		case $db in
		sqlite:*) sql "$db" "INSERT INTO rollup_pending (layout, deltas) VALUES ($layout, x'0001ffff')" ;;
		*) psql "$db" -qc "INSERT INTO rollup_pending VALUES ($layout, '\\x0001ffff')" ;;
		esac ||
			fail "fold: insert a bad batch"
		if "$COLL" report --db "$db" --prices "$T/prices.ini" --from 2026-11-01 --to 2027-01-01 \
			> "$T/rep.out" 2> "$T/rep.err"; then
			fail "fold: a report over a malformed queued batch (layout $layout) succeeded"
		elif grep -q 'rollup_pending' "$T/rep.err" && [ "$(pending "$db")" = "$want" ]; then
			ok "fold: malformed queued batch, layout $layout: the report fails naming rollup_pending, $want stay queued: $(head -c 160 "$T/rep.err")"
		else
			fail "fold: malformed queued batch, layout $layout: $(cat "$T/rep.err"), $(pending "$db") queued"
		fi
	done
	sql "$db" "DELETE FROM rollup_pending"
	"$COLL" report --db "$db" --prices "$T/prices.ini" --from 2026-11-01 --to 2027-01-01 \
		> "$T/rep.out" 2> "$T/rep.err" || fail "fold: report: $(cat "$T/rep.err")"
}

# fold_two DB TOTAL: TOTAL task ends in the database after its 40,000
fold_two() {
	local db=$1 total=$2 port port2 pid pid2 p1 p2
	port=$(free_port)
	start_collector "$db" "$port" || { fail "fold: restart"; return; }
	pid=$CPID

	# two collectors on one database fold at once (a fleet): every delta applied once
	port2=$(free_port)
	start_collector "$db" "$port2" --fold-delay 0 || { fail "fold: second collector"; return; }
	pid2=$CPID
	"$LOAD" post --url "http://127.0.0.1:$port/v1/records" --token "$N1" --node n1 \
		--count 20000 --start 10000 --batch 250 --connections 2 > "$T/p1" 2>&1 &
	p1=$!
	"$LOAD" post --url "http://127.0.0.1:$port2/v1/records" --token "$N2" --node n2 \
		--count 20000 --start 10000 --batch 250 --connections 2 > "$T/p2" 2>&1 &
	p2=$!
	wait $p1 || fail "fold: posting to the first collector: $(cat "$T/p1")"
	wait $p2 || fail "fold: posting to the second collector: $(cat "$T/p2")"
	kill -TERM "$pid" "$pid2"; wait "$pid" "$pid2" 2>/dev/null
	if [ "$(pending "$db")" = 0 ] && [ "$(rollups_match "$db" "$total")" = t ]; then
		ok "fold: two collectors ingesting and folding at once: $total tasks, each once"
	else
		fail "fold: two collectors: $(pending "$db") queued, rollups_match $(rollups_match "$db" "$total")"
	fi
}

# in_transaction DB PID: the collector is writing the big batch.
in_transaction() {
	case $1 in
	sqlite:*)
		# the WAL grows while the batch's pages are written, before COMMIT
		local wal=${1#sqlite:}-wal sz
		sz=$(stat -c %s "$wal" 2>/dev/null || echo 0)
		[ "$sz" -gt $((WAL0 + 8 * 1024 * 1024)) ] ;;
	*)
		# a backend of this database holding a transaction id has written rows of the batch
		[ "$(psql "$1" -Atc "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND datname = current_database() AND pid <> pg_backend_pid()" 2>/dev/null)" -gt 0 ] 2>/dev/null ;;
	esac
}

WAL0=0
SQ="sqlite:$T/sqlite/collector.db"
mkdir -p "$T/sqlite"
"$COLL" migrate --db "$SQ" >/dev/null || fail "sqlite migrate"
WAL0=$(stat -c %s "$T/sqlite/collector.db-wal" 2>/dev/null || echo 0)
# the WAL is reused after checkpoints: measure growth from its size at the big batch
run_suite_sqlite() { WAL0=$(stat -c %s "$T/sqlite/collector.db-wal" 2>/dev/null || echo 0); run_suite "$SQ" sqlite; }
run_suite_sqlite

# serve checkpoints its WAL from a thread of its own (collector/store_sqlite.c): during
# 60,000 records on 4 connections the WAL never passes the writer's own bound (160 MiB, where
# it would be without the thread: the writes are about 150 MiB), the database file fills
# while the collector runs, and every task is stored and counted once.
ckpt_suite() {
	local db="sqlite:$T/ckpt/c.db" f=$T/ckpt/c.db port max=0 sz out lpid
	mkdir -p "$T/ckpt"
	"$COLL" migrate --db "$db" >/dev/null || { fail "ckpt: migrate"; return; }
	port=$(free_port)
	start_collector "$db" "$port" || { fail "ckpt: start"; return; }
	"$LOAD" post --url "http://127.0.0.1:$port/v1/records" --token "$N1" --node n1 \
		--count 60000 --batch 500 --connections 4 > "$T/ckpt/post" 2>&1 &
	lpid=$!
	while kill -0 "$lpid" 2>/dev/null; do
		sz=$(stat -c %s "$f-wal" 2>/dev/null || echo 0)
		[ "$sz" -gt "$max" ] && max=$sz
		sleep 0.02
	done
	wait "$lpid" || { fail "ckpt: post: $(cat "$T/ckpt/post")"; return; }
	sz=$(stat -c %s "$f")
	kill -TERM "$CPID"; wait "$CPID" 2>/dev/null # (its last fold applies what is queued)
	out=$(sqlite3 "$f" "SELECT count(*) FROM records; SELECT sum(tasks) FROM rollup_day" | tr '\n' ' ')
	grep -q "accepted=60000 " "$T/ckpt/post" || fail "ckpt: accepted: $(cat "$T/ckpt/post")"
	[ "$max" -lt $((100 << 20)) ] && ok "ckpt: WAL at most $((max >> 20)) MiB during 60,000 records" \
		|| fail "ckpt: WAL reached $((max >> 20)) MiB"
	[ "$sz" -gt $((40 << 20)) ] && ok "ckpt: database file $((sz >> 20)) MiB before the collector stopped" \
		|| fail "ckpt: database file only $sz bytes while the collector ran"
	[ "$out" = "60000 60000.0 " ] && ok "ckpt: 60000 records, 60000 tasks in rollup_day" \
		|| fail "ckpt: records / rollup tasks: $out"
}
ckpt_suite
mkdir -p "$T/fold"
fold_suite "sqlite:$T/fold/c.db"

pg_start corral fold
case $? in
0)
	run_suite "$(pg_uri corral)" postgresql
	fold_suite "$(pg_uri fold)"
	;;
1) echo "postgresql: SKIP: PostgreSQL server binaries not found in $PGBIN" ;;
*) fail "could not start PostgreSQL" ;;
esac

if [ "$fails" -gt 0 ]; then
	echo "collector_ingest: $fails failure(s)"
	for f in "$T"/collector-*.log; do echo "--- $f"; tail -5 "$f"; done
	exit 1
fi
echo "collector_ingest: all passed"
