#!/bin/bash
# Schema migration runtime: a database of BENCH_MIGRATE_TASKS (default 1,000,000) task.end
# records at schema version 5 (rollup tables without no_request_tasks and carried_tasks, no
# conflicts table) migrated to the current version by `corral-collector migrate`: the
# migrations to 6 and 8 rebuild every rollup from the stored records (each record decoded once,
# its deltas, the upserts; one transaction), which is what keeps a collector from starting
# during an upgrade. Side by side, in the same database, the baseline: a plain copy of the
# records table (CREATE TABLE ... AS SELECT * FROM records), as a ratio. On SQLite and on a
# PostgreSQL server the script starts (skipped without one). The records are
# helper_ingest_load's (sqlite3 .import / psql \copy straight into the records table); the
# migrated rollups must count every task. Needs sqlite3. About 6 minutes on 2 shared cores.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
COLL=$O/corral-collector
LOAD=$O/tests/bench/helper_ingest_load
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
N=${BENCH_MIGRATE_TASKS:-1000000}
for b in "$COLL" "$LOAD"; do [ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }; done
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
T=$(mktemp -d /tmp/bench_migrate.XXXXXX)
chmod 755 "$T"
PGDATA=
cleanup() {
	[ -n "$PGDATA" ] && su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m immediate stop" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT
now() { date +%s.%N; }
secs() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
# The SQL that takes a current database back to version 5 (its rollups are empty: the records
# were loaded straight into their table)
TABLES="rollup_day rollup_label_day rollup_job_day rollup_job_label_day rollup_job_month rollup_open"
DOWN=$(for t in $TABLES; do echo "ALTER TABLE $t DROP COLUMN no_request_tasks; ALTER TABLE $t DROP COLUMN carried_tasks;"; done
	echo "DROP TABLE conflicts; DELETE FROM schema_version; INSERT INTO schema_version VALUES (5);")
results=()

# ---- SQLite ----
"$LOAD" csv --node bench --count "$N" > "$T/rows.csv" || { echo "FAIL: records"; exit 1; }
DB=$T/m.db
"$COLL" migrate --db "sqlite:$DB" >/dev/null || { echo "FAIL: sqlite schema"; exit 1; }
sqlite3 "$DB" ".mode csv" ".import $T/rows.csv records" || { echo "FAIL: sqlite import"; exit 1; }
rm -f "$T/rows.csv"
sqlite3 "$DB" "BEGIN; $DOWN COMMIT;" || { echo "FAIL: sqlite downgrade"; exit 1; }
t0=$(now)
sqlite3 "$DB" "CREATE TABLE records_copy AS SELECT * FROM records;" || exit 1
t1=$(now)
sqlite3 "$DB" "DROP TABLE records_copy;" || exit 1
t2=$(now)
"$COLL" migrate --db "sqlite:$DB" >/dev/null || { echo "FAIL: sqlite migrate"; exit 1; }
t3=$(now)
v=$(sqlite3 "$DB" "SELECT max(version) FROM schema_version")
tasks=$(sqlite3 "$DB" "SELECT CAST(sum(tasks) AS INTEGER) FROM rollup_day")
carried=$(sqlite3 "$DB" "SELECT CAST(sum(carried_tasks) AS INTEGER) FROM rollup_day")
[ "$tasks" = "$N" ] || { echo "FAIL: sqlite: the migrated rollups count $tasks tasks of $N"; exit 1; }
results+=("sqlite $(secs "$t2" "$t3") $(secs "$t0" "$t1") $v $carried $(du -m "$DB" | cut -f1)")
rm -f "$DB"

# ---- PostgreSQL ----
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1; then
	mkdir -p "$T/pg" && chown postgres "$T/pg"
	PGDATA=$T/pg/data
	PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	su postgres -s /bin/sh -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres >$T/pg/initdb.log 2>&1 &&
		$PGBIN/pg_ctl -D $PGDATA -o \"-k $T/pg -p $PGPORT -c listen_addresses=''\" -l $T/pg/log -w start >/dev/null &&
		$PGBIN/createdb -h $T/pg -p $PGPORT m" || { echo "FAIL: PostgreSQL did not start"; exit 1; }
	PDB="postgresql://postgres@/m?host=$T/pg&port=$PGPORT"
	PSQL=$(command -v psql || echo "$PGBIN/psql")
	"$LOAD" copy --node bench --count "$N" > "$T/rows.copy" || { echo "FAIL: records"; exit 1; }
	"$COLL" migrate --db "$PDB" >/dev/null || { echo "FAIL: postgresql schema"; exit 1; }
	"$PSQL" -q "$PDB" -c "\\copy records FROM '$T/rows.copy'" || { echo "FAIL: postgresql copy"; exit 1; }
	rm -f "$T/rows.copy"
	"$PSQL" -q "$PDB" -c "BEGIN; $DOWN COMMIT;" -c "VACUUM ANALYZE records;" >/dev/null ||
		{ echo "FAIL: postgresql downgrade"; exit 1; }
	t0=$(now)
	"$PSQL" -q "$PDB" -c "CREATE TABLE records_copy AS SELECT * FROM records;" || exit 1
	t1=$(now)
	"$PSQL" -q "$PDB" -c "DROP TABLE records_copy; CHECKPOINT;" || exit 1
	t2=$(now)
	"$COLL" migrate --db "$PDB" >/dev/null || { echo "FAIL: postgresql migrate"; exit 1; }
	t3=$(now)
	v=$("$PSQL" -At "$PDB" -c "SELECT max(version) FROM schema_version")
	tasks=$("$PSQL" -At "$PDB" -c "SELECT sum(tasks)::bigint FROM rollup_day")
	carried=$("$PSQL" -At "$PDB" -c "SELECT sum(carried_tasks)::bigint FROM rollup_day")
	[ "$tasks" = "$N" ] || { echo "FAIL: postgresql: the migrated rollups count $tasks tasks of $N"; exit 1; }
	mb=$("$PSQL" -At "$PDB" -c "SELECT pg_database_size('m') / 1048576")
	results+=("postgresql $(secs "$t2" "$t3") $(secs "$t0" "$t1") $v $carried $mb")
else
	echo "postgresql: SKIP: no server binaries in $PGBIN"
fi

echo "migrate: $N task.end records, schema version 5 to the current one, $(nproc) CPUs"
printf '%-11s %11s %15s %7s %8s %14s %8s\n' backend "migrate (s)" "copy table (s)" ratio \
	version "carried_tasks" "db (MiB)"
for r in "${results[@]}"; do
	set -- $r
	printf '%-11s %11s %15s %7.1f %8s %14s %8s\n' "$1" "$2" "$3" \
		"$(python3 -c "import sys; print(float(sys.argv[1]) / max(float(sys.argv[2]), 1e-9))" "$2" "$3")" \
		"$4" "$5" "$6"
done
