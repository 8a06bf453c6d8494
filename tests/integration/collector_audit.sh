#!/bin/bash
# corral-collector audit trail, on SQLite and on a PostgreSQL server started here:
# GET /v1/audit filters (task/job/user/type/time, paging with "next") for an auditor token;
# reader and node tokens get 403 there (and auditors 403 on the reader endpoints); chain
# verification at ingest: a missing record, a tampered one and a restarted chain are flagged
# (metric, log, GET /v1/audit/breaks) while every record is stored; resent duplicates and a
# collector restart, or a second collector on the same database, flag nothing; an edited row
# makes GET /v1/audit/verify and `audit verify` fail naming it. An audit record whose id was
# stored with another body (a conflict: kept in table conflicts, not stored) is a link of the
# chain, named by verify, not a break; a row deleted after it, or the kept body edited, are.
# Skips the PostgreSQL half only without its binaries.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
GEN=$O/tests/integration/helper_audit_chain
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 missing"; exit 1; }
coll_init collector_audit "$GEN"
coll_tokens --reader --auditor n1 n2 n3
N3=$(node_token n3)

# post FILE TOKEN PORT -> CODE, $T/resp
post() {
	CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $2" \
		-H 'Content-Type: application/x-ndjson' --data-binary "@$1" \
		"http://127.0.0.1:$3/v1/records")
}
# get PATH TOKEN PORT -> CODE, $T/resp
get() {
	CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H "Authorization: Bearer $2" \
		"http://127.0.0.1:$3$1")
}
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/resp" "$1"; }
metric() { curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
gen() { "$GEN" "$@" > "$T/batch"; }

# sql DB STATEMENT: run on the store directly (to tamper with it)
sql() {
	case $1 in
	sqlite:*) sqlite3 -cmd '.timeout 10000' "${1#sqlite:}" "$2" ;; # waits out the collector's own writes (fold)
	*) psql "$1" -Atqc "$2" ;;
	esac
}

run_suite() {
	local db=$1 name=$2 port port2 n ids
	port=$(free_port)
	echo "== $name"
	start_collector "$db" "$port" || { fail "$name: start"; return; }
	local pid=$CPID

	# n1: records 0..19 in two batches, then the first one resent
	gen --node n1 --from 0 --to 10; post "$T/batch" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["accepted"]')" = 10 ] || fail "$name: post 0..9: $CODE"
	cp "$T/batch" "$T/first"
	gen --node n1 --from 10 --to 20; post "$T/batch" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["accepted"]')" = 10 ] || fail "$name: post 10..19: $CODE"
	post "$T/first" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["duplicate"]')" = 10 ] || fail "$name: resend: $CODE"
	[ "$(metric corral_collector_audit_chain_breaks_total "$port")" = 0 ] \
		&& [ "$(metric corral_collector_audit_records_checked_total "$port")" = 20 ] \
		&& ok "$name: 20 chained records checked at ingest, resend of 10: no break" \
		|| fail "$name: breaks $(metric corral_collector_audit_chain_breaks_total "$port") checked $(metric corral_collector_audit_records_checked_total "$port")"
	# a task.end record for the reader
	python3 - "$T/first" > "$T/taskend" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
print(json.dumps({"schema": "corral.record/v1", "record_id": "n1-end0", "type": "task.end",
    "time": r["time"], "node": "n1", "task": r["task"], "usage": {"wall_ns": 1000000000},
    "exit": {"status": "exited", "code": 0}}))
PY
	post "$T/taskend" "$N1" "$port"; [ "$CODE" = 200 ] || fail "$name: task.end post: $CODE $(cat "$T/resp")"

	# filters (records 0..19: task i/4, job i/8, user bob for odd tasks, connect when i%3==2)
	local q expect got
	while read -r q expect; do
		get "/v1/audit?$q" "$AU" "$port"
		got=$(jget 'd["count"]' 2>/dev/null)
		[ "$CODE" = 200 ] && [ "$got" = "$expect" ] || fail "$name: /v1/audit?$q: $CODE count $got, want $expect"
	done <<-'EOF2'
	node=n1 20
	task=n1-t1 4
	job=job1 8
	user=bob 8
	type=connect 6
	type=exec&user=alice&job=job0 3
	from=2026-03-01T00:00:05Z&to=2026-03-01T00:00:09Z 4
	from=2026-03-01T00:00:18.5Z 1
	node=n2 0
	EOF2
	get "/v1/audit?task=n1-t1" "$AU" "$port"
	[ "$(jget '[r["record_id"] for r in d["records"]]')" = "['n1-a4', 'n1-a5', 'n1-a6', 'n1-a7']" ] \
		&& [ "$(jget 'all(r["task"]["id"] == "n1-t1" for r in d["records"])')" = True ] \
		&& ok "$name: /v1/audit filters by task/job/user/type/time, oldest first" \
		|| fail "$name: task filter: $(head -c 300 "$T/resp")"
	python3 - "$T/resp" "$T/first" <<'PY' && ok "$name: records returned as stored" || fail "$name: records differ from what was posted"
import json, sys
got = json.load(open(sys.argv[1]))["records"]
sent = {json.loads(l)["record_id"]: json.loads(l) for l in open(sys.argv[2])}
assert got and all(r == sent[r["record_id"]] for r in got if r["record_id"] in sent)
PY
	# paging: 7 + 7 + 6, no record twice
	ids=; local cur= pages=0
	while :; do
		get "/v1/audit?node=n1&limit=7${cur:+&after=$cur}" "$AU" "$port"
		[ "$CODE" = 200 ] || { fail "$name: page $pages: $CODE"; break; }
		ids="$ids $(jget '" ".join(r["record_id"] for r in d["records"])')"
		cur=$(jget 'd["next"] or ""'); pages=$((pages+1))
		[ -n "$cur" ] && [ $pages -lt 10 ] || break
	done
	n=$(echo $ids | wc -w); [ "$pages" = 3 ] && [ "$n" = 20 ] \
		&& [ "$(echo $ids | tr ' ' '\n' | sort -u | wc -l)" = 20 ] \
		&& ok "$name: paging with next: $pages pages, 20 records" || fail "$name: paging: $pages pages, $n records"
	# CLI: same filters
	n=$("$COLL" audit --db "$db" --user bob --type exec --format json | wc -l)
	[ "$n" = 6 ] && ok "$name: audit --user bob --type exec: 6" || fail "$name: CLI filter gave $n"
	n=$("$COLL" audit --db "$db" --from 2026-03-01T00:00:05Z --to 2026-03-01T00:00:09Z --format json | wc -l)
	[ "$n" = 4 ] || fail "$name: CLI --from/--to gave $n"
	# bad parameters name themselves
	local bad
	for bad in "limit=0:limit" "limit=x:limit" "from=yesterday:from" "to=2026-13-01T00:00:00Z:to" \
		"type=open:type" "bogus=1:bogus" "from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z:to" \
		"after=zz:after" "task=:task"; do
		get "/v1/audit?${bad%:*}" "$AU" "$port"
		[ "$CODE" = 400 ] && grep -q "${bad##*:}" "$T/resp" || fail "$name: ?${bad%:*}: $CODE $(cat "$T/resp")"
	done
	get "/v1/audit/verify" "$AU" "$port"; [ "$CODE" = 400 ] && grep -q node "$T/resp" || fail "$name: verify without node: $CODE"
	get "/v1/audit/verify?node=n1&task=x" "$AU" "$port"; [ "$CODE" = 400 ] || fail "$name: verify ?task: $CODE"
	"$COLL" audit --db "$db" --limit 0 2>"$T/err"; [ $? = 2 ] && grep -q -- '--limit' "$T/err" || fail "$name: CLI --limit 0"
	ok "$name: bad parameters: 400 naming them (API), exit 2 naming the flag (CLI)"

	# roles
	get "/v1/audit?node=n1" "$RD" "$port"; local c1=$CODE
	get "/v1/audit?node=n1" "$N1" "$port"; local c2=$CODE
	get "/v1/audit/verify?node=n1" "$RD" "$port"; local c3=$CODE
	get "/v1/audit/breaks" "$RD" "$port"; local c4=$CODE
	get "/v1/records?type=audit.exec" "$RD" "$port"; local c5=$CODE
	get "/v1/records?node=n1" "$RD" "$port"; local c6=$CODE lines
	lines=$(grep -c '"type":"audit\.' "$T/resp"); grep -q n1-end0 "$T/resp" || lines=missing-task-end
	get "/v1/records?node=n1" "$AU" "$port"; local c7=$CODE
	get "/v1/reports/showback?from=2026-03-01&to=2026-03-02" "$AU" "$port"; local c8=$CODE
	CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/audit"); local c9=$CODE
	[ "$c1 $c2 $c3 $c4 $c5 $c6 $lines $c7 $c8 $c9" = "403 403 403 403 403 200 0 403 403 401" ] \
		&& ok "$name: reader/node tokens 403 on audit, reader sees no audit record, auditor 403 on reader endpoints" \
		|| fail "$name: roles: $c1 $c2 $c3 $c4 $c5 $c6 $lines $c7 $c8 $c9"

	# verify intact
	get "/v1/audit/verify?node=n1" "$AU" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["intact"], d["checked"]')" = "(True, 20)" ] \
		&& ok "$name: /v1/audit/verify: intact, 20" || fail "$name: verify: $CODE $(cat "$T/resp")"

	# breaks at ingest on n2: record 8 lost, record 12 tampered, record 14 restarts the chain
	gen --node n2 --from 0 --to 6; post "$T/batch" "$N2" "$port"
	gen --node n2 --from 6 --to 12 --skip 8; cp "$T/batch" "$T/gap"; post "$T/batch" "$N2" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["accepted"]')" = 5 ] || fail "$name: gap batch: $CODE"
	gen --node n2 --from 12 --to 14 --tamper 12; post "$T/batch" "$N2" "$port"
	gen --node n2 --from 14 --to 16 --restart 14; post "$T/batch" "$N2" "$port"
	post "$T/gap" "$N2" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["duplicate"]')" = 5 ] || fail "$name: gap resend: $CODE"
	get "/v1/audit/breaks?node=n2" "$AU" "$port"
	got=$(jget '" ".join(b["record_id"] + ":" + b["kind"] for b in d["breaks"])')
	n=$("$COLL" dump --db "$db" --node n2 --format json | wc -l)
	[ "$(metric corral_collector_audit_chain_breaks_total "$port")" = 3 ] \
		&& [ "$got" = "n2-a9:link n2-a12:hash n2-a14:restart" ] && [ "$n" = 15 ] \
		&& [ "$(grep -c 'audit chain break' "$T/collector-$port.log")" = 3 ] \
		&& ok "$name: breaks flagged at ingest ($got), logged once each, metric 3, all 15 records stored" \
		|| fail "$name: breaks: metric $(metric corral_collector_audit_chain_breaks_total "$port") list '$got' stored $n log $(grep -c 'audit chain break' "$T/collector-$port.log")"
	get "/v1/audit/verify?node=n2" "$AU" "$port"
	[ "$(jget 'd["intact"], d["first_bad"]')" = "(False, 'n2-a9')" ] || fail "$name: verify n2: $(cat "$T/resp")"
	"$COLL" audit breaks --db "$db" --node n2 | grep -q 'n2-a12 *hash\|hash *record n2-a12' \
		|| fail "$name: audit breaks CLI: $("$COLL" audit breaks --db "$db" --node n2)"

	# n3: record 4's id was stored before with another body (a task.end of an earlier life of
	# the node): the audit record is a conflict, held in table conflicts; the chain goes
	# through it, at ingest and in verify, and verify names it
	python3 - > "$T/other" <<'PY'
import json
print(json.dumps({"schema": "corral.record/v1", "record_id": "n3-a4", "type": "task.end",
    "time": "2026-02-01T00:00:00Z", "node": "n3", "task": {"id": "old-t1", "user": "alice"},
    "usage": {"wall_ns": 1000000000}, "exit": {"status": "exited", "code": 0}}))
PY
	post "$T/other" "$N3" "$port"; [ "$CODE" = 200 ] || fail "$name: n3 other body: $CODE $(cat "$T/resp")"
	local breaks0 out rc
	breaks0=$(metric corral_collector_audit_chain_breaks_total "$port")
	gen --node n3 --from 0 --to 10; post "$T/batch" "$N3" "$port"
	[ "$CODE" = 200 ] && [ "$(jget 'd["accepted"], d["conflict"]')" = "(9, 1)" ] \
		|| fail "$name: n3 chain: $CODE $(head -c 300 "$T/resp")"
	get "/v1/audit/breaks?node=n3" "$AU" "$port"
	[ "$(jget 'd["count"]')" = 0 ] && [ "$(metric corral_collector_audit_chain_breaks_total "$port")" = "$breaks0" ] \
		|| fail "$name: n3: a break flagged at ingest: $(cat "$T/resp")"
	get "/v1/audit/verify?node=n3" "$AU" "$port"
	out=$("$COLL" audit verify --db "$db" --node n3); rc=$?
	[ "$(jget 'd["intact"], d["checked"], d["held_as_conflict"], d["held_ids"]')" = "(True, 9, 1, 'n3-a4')" ] \
		&& [ "$rc" = 0 ] && echo "$out" | grep -q "1 record held as a conflict.*: n3-a4" \
		&& ok "$name: a record held as a conflict is a link of the chain: no break at ingest, verify intact and names it" \
		|| fail "$name: n3 verify: $(cat "$T/resp") / rc $rc $out"
	# a stored record missing after it is still a break
	sql "$db" "DELETE FROM records WHERE record_id = 'n3-a7'" >/dev/null
	get "/v1/audit/verify?node=n3" "$AU" "$port"
	[ "$(jget 'd["intact"], d["first_bad"]')" = "(False, 'n3-a8')" ] \
		|| fail "$name: n3 with a7 deleted: $(cat "$T/resp")"
	# the held body edited: it no longer links, the chain breaks at the record after it
	sql "$db" "UPDATE conflicts SET received_body = replace(received_body, '\"prog4\"', '\"cat\"') WHERE record_id = 'n3-a4'" >/dev/null
	get "/v1/audit/verify?node=n3" "$AU" "$port"
	out=$("$COLL" audit verify --db "$db" --node n3); rc=$?
	[ "$(jget 'd["intact"], d["first_bad"], d["held_as_conflict"]')" = "(False, 'n3-a5', 0)" ] \
		&& [ "$rc" = 1 ] && echo "$out" | grep -q "BROKEN at record n3-a5" \
		&& ok "$name: a deleted record after the held one, and the held body edited: breaks" \
		|| fail "$name: n3 tampered conflict: $(cat "$T/resp") / rc $rc $out"

	# restart: the head comes from the database, no false break; breaks are still listed
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
	start_collector "$db" "$port" || { fail "$name: restart"; return; }
	pid=$CPID
	gen --node n1 --from 20 --to 30; post "$T/batch" "$N1" "$port"
	[ "$CODE" = 200 ] && [ "$(metric corral_collector_audit_chain_breaks_total "$port")" = 0 ] \
		&& [ "$(metric corral_collector_audit_records_checked_total "$port")" = 10 ] \
		|| fail "$name: after restart: $CODE breaks $(metric corral_collector_audit_chain_breaks_total "$port")"
	# a second collector on the same database takes the next batch, then the first one again
	port2=$(free_port)
	start_collector "$db" "$port2" || { fail "$name: second collector"; return; }
	gen --node n1 --from 30 --to 40; post "$T/batch" "$N1" "$port2"
	gen --node n1 --from 40 --to 50; post "$T/batch" "$N1" "$port"
	local b1 b2
	b1=$(metric corral_collector_audit_chain_breaks_total "$port")
	b2=$(metric corral_collector_audit_chain_breaks_total "$port2")
	get "/v1/audit/breaks" "$AU" "$port"
	[ "$b1 $b2" = "0 0" ] && [ "$(jget 'd["count"]')" = 3 ] \
		&& ok "$name: restart and a second collector: no false break, 3 breaks still listed" \
		|| fail "$name: restart/second collector: breaks $b1 $b2, listed $(jget 'd["count"]')"
	kill -TERM "$CPID"; wait "$CPID" 2>/dev/null
	get "/v1/audit/verify?node=n1" "$AU" "$port"
	[ "$(jget 'd["intact"], d["checked"]')" = "(True, 50)" ] || fail "$name: verify n1 50: $(cat "$T/resp")"

	# an edited row: the API and the CLI name it
	case $db in
	sqlite:*) sql "$db" "UPDATE records SET body = replace(body, '\"prog4\"', '\"cat\"') WHERE record_id = 'n1-a4'" ;;
	*) sql "$db" "UPDATE records SET body = replace(body::text, '\"prog4\"', '\"cat\"')::json WHERE record_id = 'n1-a4'" ;;
	esac
	get "/v1/audit/verify?node=n1" "$AU" "$port"
	local out rc
	out=$("$COLL" audit verify --db "$db" --node n1); rc=$?
	[ "$CODE" = 200 ] && [ "$(jget 'd["intact"], d["first_bad"]')" = "(False, 'n1-a4')" ] \
		&& [ "$rc" = 1 ] && echo "$out" | grep -q "BROKEN at record n1-a4" \
		&& ok "$name: edited row n1-a4: verify API and CLI name it ($(jget 'd["why"]'))" \
		|| fail "$name: tamper: $CODE $(cat "$T/resp") / rc $rc $out"
	kill -TERM "$pid"; wait "$pid" 2>/dev/null
}

SQ="sqlite:$T/sqlite.db"
run_suite "$SQ" sqlite

pg_start corral
case $? in
0) run_suite "$(pg_uri corral)" postgresql ;;
1) echo "postgresql: SKIP: PostgreSQL server binaries not found in $PGBIN" ;;
*) fail "could not start PostgreSQL" ;;
esac

if [ "$fails" -gt 0 ]; then
	echo "collector_audit: $fails failure(s)"
	for f in "$T"/collector-*.log; do echo "--- $f"; tail -8 "$f"; done
	exit 1
fi
echo "collector_audit: all passed"
