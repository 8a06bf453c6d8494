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
O=${CORRAL_O:-.output}
COLL=$O/corral-collector
[ -x "$COLL" ] || { echo "FAIL: $COLL not built (make O=$O all)"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl(1) missing"; exit 1; }
T=$(mktemp -d /tmp/report_reconcile.XXXXXX)
CPID=
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGDATA=
cleanup() {
	[ -n "$CPID" ] && { kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; }
	[ -n "$PGDATA" ] && su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m immediate stop" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { echo "ok: $*"; }
MODEL=tests/integration/report_reconcile.py
NODES="n1 n2 n3"
RD=tok-reader-0123456789abcdef
{ for n in $NODES; do echo "node $n tok-node-$n-0123456789abcdef"; done; echo "reader ops $RD"; } > "$T/tokens"
chmod 600 "$T/tokens"
cat > "$T/prices.ini" <<'INI'
[prices]
currency = EUR
cpu_core_hour = 0.031
memory_gib_hour = 0.0043
gpu_hour = 1.70
io_read_gib = 0.0011
io_write_gib = 0.0023
net_gib = 0.013
INI
python3 "$MODEL" gen "$T" || { echo "FAIL: generating the fleet"; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# serve DB: a collector on PORT
serve() {
	"$COLL" serve --listen "127.0.0.1:$PORT" --db "$1" --tokens "$T/tokens" >"$T/log" 2>&1 &
	CPID=$!
	for _ in $(seq 200); do
		curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0
		kill -0 "$CPID" 2>/dev/null || break
		sleep 0.05
	done
	cat "$T/log"
	return 1
}
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
}

serve "sqlite:$T/c.db" || { echo "FAIL: collector did not come up"; exit 1; }
post "$T/ends.ndjson" && post "$T/samples.ndjson" && ok "sqlite: $(cat "$T"/*.ndjson | wc -l) records ingested" ||
	fail "sqlite ingest"
kill "$CPID"; wait "$CPID" 2>/dev/null; CPID=
reconcile "sqlite:$T/c.db" sqlite || fail "sqlite: reports differ from the model"

if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	chmod 755 "$T"; mkdir -p "$T/pg" && chown postgres "$T/pg"
	PGDATA=$T/pg/data
	PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	su postgres -s /bin/sh -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres >$T/pg/initdb.log 2>&1 &&
		$PGBIN/pg_ctl -D $PGDATA -o \"-k $T/pg -p $PGPORT -c listen_addresses=''\" -l $T/pg/log -w start >/dev/null &&
		$PGBIN/createdb -h $T/pg -p $PGPORT rep" || fail "PostgreSQL did not start"
	PDB="postgresql://postgres@/rep?host=$T/pg&port=$PGPORT"
	serve "$PDB" || fail "collector on PostgreSQL did not come up"
	post "$T/ends.ndjson" && post "$T/samples.ndjson" && ok "postgresql: records ingested" ||
		fail "postgresql ingest"
	kill "$CPID"; wait "$CPID" 2>/dev/null; CPID=
	reconcile "$PDB" postgresql || fail "postgresql: reports differ from the model"
else
	echo "skip: no PostgreSQL server binaries in $PGBIN"
fi

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
