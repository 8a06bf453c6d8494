#!/bin/bash
# Showback reconciliation against an independent model: a generated fleet (3,000 tasks with
# and without CPU/memory requests, some using more than requested, spanning midnights and the
# November/December month end, GPU tasks, 90 running tasks and late samples, blank and missing
# accounts, users, jobs and labels, an account that a spreadsheet would read as a formula) is
# POSTed to a collector on SQLite and on PostgreSQL; every row of 10 groupings x 4 periods x 2
# ranges (one with clipped weeks and months, one with a whole month) is recomputed by
# report_reconcile.py from the raw records written here: rows and their period labels and
# days, counts exactly, quantities to 1e-9 relative, efficiencies in [0, 1] and equal to
# used / charged, costs to the cent (account and user groupings cell by cell; apportioned
# parts within their rounding bound, summing exactly to the grand total).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
coll_init report_reconcile
MODEL=tests/integration/report_reconcile.py
NODES="n1 n2 n3"
coll_tokens --reader $NODES
coll_prices "$T/prices.ini"
{ cat "$T/prices.ini"; printf '%s\n' '[shared:ops]' 'amount = 1200.00' 'match = all' \
	'spread = proportional' '[shared:lab]' 'amount = 31.07' 'match = account:physics' \
	'spread = even' '[shared:proj]' 'amount = 500' 'match = label:project=qcd' 'spread = to:chem'; } \
	> "$T/shared.ini"
python3 "$MODEL" gen "$T" || { echo "FAIL: generating the fleet"; exit 1; }
PORT=$(free_port)

# serve DB: a collector on PORT
serve() { start_collector "$1" "$PORT"; }
# post FILE: its records per node with that node's token, 500 a batch
post() {
	local n code rc=0
	for n in $NODES; do
		grep -F "\"node\": \"$n\"" "$1" | split -l 500 - "$T/batch."
		for b in "$T"/batch.*; do
			[ -e "$b" ] || continue
			code=$(curl -s -o "$T/resp" -w '%{http_code}' \
				-H "Authorization: Bearer tok-node-$n-0123456789abcdef" \
				-H 'Content-Type: application/x-ndjson' --data-binary "@$b" \
				"http://127.0.0.1:$PORT/v1/records")
			[ "$code" = 200 ] || { echo "ingest $1 ($n): $code $(head -c 300 "$T/resp")"; rc=1; }
			rm -f "$b"
		done
	done
	return $rc
}
BYS="account user job node label:project account,user account,label:project job,node
label:project,job,node account,user,job,node,label:project"
RANGES="2026-11-27:2026-12-04 2026-11-01:2026-12-07"
# reconcile DB NAME: every report as CSV, then the model
reconcile() {
	local args=() r from to out by p
	for r in $RANGES; do
		from=${r%:*} to=${r#*:} out=$T/$2-$from
		mkdir -p "$out"
		for by in $BYS; do
			for p in day week month all; do
				"$COLL" report --db "$1" --prices "$T/prices.ini" --from "$from" --to "$to" \
					--by "$by" --period "$p" --format csv > "$out/$by@$p.csv" ||
					fail "$2: report --by $by --period $p"
			done
		done
		args+=("$from" "$to" "$out")
	done
	python3 "$MODEL" check "$T" "${args[@]}" && ok "$2: every row of $(ls "$T/$2"-* | grep -c csv) reports equals the model"
	# shared costs: the same reports with the sheet's [shared:NAME] sections, each row's
	# shared_cost to the cent against the model's spread of the amounts over the rows above
	for r in $RANGES; do
		from=${r%:*} to=${r#*:} out=$T/$2-shared-$from
		mkdir -p "$out"
		for by in account account,label:project user; do
			for p in day week month all; do
				"$COLL" report --db "$1" --prices "$T/shared.ini" --from "$from" --to "$to" \
					--by "$by" --period "$p" --format csv > "$out/$by@$p.csv" ||
					fail "$2: shared report --by $by --period $p"
			done
		done
		python3 "$MODEL" shared "$from" "$to" "$T/$2-$from" "$out" &&
			ok "$2: shared costs of $from..$to equal the model" ||
			fail "$2: shared costs differ from the model"
	done
}

serve "sqlite:$T/c.db" || { echo "FAIL: collector did not come up"; exit 1; }
post "$T/ends.ndjson" && post "$T/samples.ndjson" && ok "sqlite: $(cat "$T"/*.ndjson | wc -l) records ingested" ||
	fail "sqlite ingest"
stop_collector
reconcile "sqlite:$T/c.db" sqlite || fail "sqlite: reports differ from the model"

if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	pg_start rep || fail "PostgreSQL did not start"
	PDB=$(pg_uri rep)
	serve "$PDB" || fail "collector on PostgreSQL did not come up"
	post "$T/ends.ndjson" && post "$T/samples.ndjson" && ok "postgresql: records ingested" ||
		fail "postgresql ingest"
	stop_collector
	reconcile "$PDB" postgresql || fail "postgresql: reports differ from the model"
else
	echo "skip: no PostgreSQL server binaries in $PGBIN"
fi

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
