#!/bin/bash
# Showback reports over the rollups of BENCH_TASKS (default 10,000,000) task.end records,
# 1,000 accounts x 90 days x 2 users: `corral-collector report --by account --period day
# --format csv` and `--by job,node --period month` (time to first byte and total) side by
# side with the same aggregation as a hand-written SQL query run by sqlite3 / psql (the
# baseline), in this run, as ratios, on SQLite and on a PostgreSQL server the script starts
# (skipped without one).
#
# The rollups are made by tests/bench/helper_rollup_load: the records go through the rollup
# maintenance of ingest (coll_deltas_build and the backend's upserts, a transaction per
# batch), without storing the raw records (10M raw rows of ~1 KiB would not fit the time
# budget; the raw insert path is measured by ingest.sh). Its rate is the rollups' ingest
# cost. On PostgreSQL the rollup rate is measured on BENCH_PG_TASKS (default 1,000,000)
# records at the same density (over 90 x BENCH_PG_TASKS / BENCH_TASKS days), and the report
# database gets the SQLite run's rollup_day and rollup_job_month rows (\copy, all 17 digits),
# the same rows the helper made; both backends' reports must agree to the cent.
# Needs sqlite3 and bc. About 4 minutes on 2 shared cores.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_rollup_load
N=${BENCH_TASKS:-10000000}
NPG=${BENCH_PG_TASKS:-1000000}
PGDAYS=$(( 90 * NPG / N > 0 ? 90 * NPG / N : 1 ))
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
command -v bc >/dev/null || { echo "FAIL: bc missing"; exit 1; }
coll_init bench_report "$LOAD"
DB=$T/r.db
coll_prices "$T/p.ini"
rate() { sed -n 's/.*seconds=\([0-9.]*\) rate=\([0-9]*\).*/\1 \2/p'; }
read -r sq_s sq_rate < <("$LOAD" --db "sqlite:$DB" --tasks "$N" --accounts 1000 --days 90 \
	--batch 50000 | rate) || { echo "FAIL: rollup load"; exit 1; }
[ -n "${sq_rate:-}" ] || { echo "FAIL: rollup load"; exit 1; }
echo "sqlite: rollups of $N tasks made in $sq_s s"

Q="SELECT bucket, account, sum(round(cpu_charged_core_s/3600*0.031*100) +
 round(mem_charged_byte_s/3600/1073741824.0*0.0043*100) + round(gpu_charged_s/3600*1.70*100) +
 round(io_read_bytes/1073741824.0*0.0011*100 + io_write_bytes/1073741824.0*0.0023*100) +
 round((net_rx_bytes+net_tx_bytes)/1073741824.0*0.013*100))/100.0 AS cost
 FROM rollup_day WHERE bucket >= '2026-09-01' AND bucket < '2026-12-01'
 GROUP BY bucket, account ORDER BY bucket, account;"
# by job and node per month: what the report reads for whole months (rollup_job_month)
QJN="SELECT bucket, job, node, sum(round(cpu_charged_core_s/3600*0.031*100) +
 round(mem_charged_byte_s/3600/1073741824.0*0.0043*100) + round(gpu_charged_s/3600*1.70*100) +
 round(io_read_bytes/1073741824.0*0.0011*100 + io_write_bytes/1073741824.0*0.0023*100) +
 round((net_rx_bytes+net_tx_bytes)/1073741824.0*0.013*100))/100.0 AS cost
 FROM rollup_job_month WHERE bucket >= '2026-09' AND bucket < '2026-12'
 GROUP BY bucket, job, node ORDER BY bucket, job, node;"
now() { date +%s.%N; }
# time to first byte: the command's first output line, read as it arrives
ttfb() { local t0 t1; t0=$(now); "$@" | { IFS= read -r _; t1=$(now); cat >/dev/null; echo "$t1 - $t0" | bc -l; }; }
total() { local t0; t0=$(now); "$@" > "$T/out"; echo "$(now) - $t0" | bc -l; }
best() { sort -n | head -1; }
# instructions a command executes (valgrind's callgrind, with BENCH_INSTR=1; "-" otherwise):
# unlike times, not moved by other work on the machine; SQLite only (on PostgreSQL the work
# is the server's). About 50 times slower than the command.
instr() {
	[ "${BENCH_INSTR:-0}" = 1 ] && command -v valgrind >/dev/null || { echo -; return; }
	valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" >/dev/null 2>"$T/vg" ||
		{ echo -; return; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$T/vg" | head -1
}
results=()
# bench NAME DBURI BY PERIOD BASELINE-COMMAND...
bench() {
	local name=$1 uri=$2 by=$3 period=$4 rt bt rf bf rl bl ri bi; shift 4
	rep() { "$COLL" report --db "$uri" --prices "$T/p.ini" --from 2026-09-01 --to 2026-12-01 \
		--by "$by" --period "$period" --format csv; }
	rt=$(for _ in 1 2 3; do total rep; done | best)
	rl=$(wc -l < "$T/out")
	cp "$T/out" "$T/$name.csv"
	bt=$(for _ in 1 2 3; do total "$@"; done | best)
	bl=$(wc -l < "$T/out")
	rf=$(for _ in 1 2 3; do ttfb rep; done | best)
	bf=$(for _ in 1 2 3; do ttfb "$@"; done | best)
	ri=- bi=-
	case $name in sqlite*)
		ri=$(instr "$COLL" report --db "$uri" --prices "$T/p.ini" --from 2026-09-01 \
			--to 2026-12-01 --by "$by" --period "$period" --format csv)
		bi=$(instr "$@") ;;
	esac
	[ $((rl - 2)) = "$bl" ] || { echo "FAIL: $name report has $rl lines, baseline $bl"; return 1; }
	results+=("$name $rt $bt $rf $bf $bl $ri $bi")
}
bench sqlite "sqlite:$DB" account day sqlite3 "$DB" "$Q" || exit 1
bench sqlite-jn "sqlite:$DB" job,node month sqlite3 "$DB" "$QJN" || exit 1
ROWS=$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_day')
JROWS=$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_job_month')
JDROWS=$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_job_day')

# ---- PostgreSQL ----
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1 && command -v psql >/dev/null; then
	pg_start rep load || { echo "FAIL: PostgreSQL did not start"; exit 1; }
	pg() { pg_uri "$1"; }
	read -r pg_s pg_rate < <("$LOAD" --db "$(pg load)" --tasks "$NPG" --accounts 1000 --days "$PGDAYS" \
		--batch 50000 | rate) || { echo "FAIL: PostgreSQL rollup load"; exit 1; }
	echo "postgresql: rollups of $NPG tasks ($PGDAYS days) made in $pg_s s"
	"$COLL" migrate --db "$(pg rep)" >/dev/null || { echo "FAIL: migrate"; exit 1; }
	# the report by account reads rollup_day (and rollup_open, empty here) only; by job and
	# node per whole months, rollup_job_month too
	for tbl in rollup_day rollup_job_month; do
		cols=$(sqlite3 "$DB" "SELECT group_concat(CASE WHEN type = 'REAL' THEN
			'printf(''%.17g'', ' || name || ')' ELSE '\"' || name || '\"' END, ', ')
			FROM pragma_table_info('$tbl')")
		sqlite3 -csv "$DB" "SELECT $cols FROM $tbl" > "$T/$tbl.csv"
		psql -q "$(pg rep)" -c "\\copy $tbl FROM '$T/$tbl.csv' CSV" || exit 1
	done
	psql -q "$(pg rep)" -c "ANALYZE" || exit 1
	bench postgresql "$(pg rep)" account day psql -At -F, "$(pg rep)" -c "$Q" || exit 1
	bench postgresql-jn "$(pg rep)" job,node month psql -At -F, "$(pg rep)" -c "$QJN" || exit 1
	# money to the cent and counts exactly; quantities and ratios may differ in their last
	# printed digit (the copied doubles pass through sqlite3's printf)
	for v in "" -jn; do
	python3 - "$T/sqlite$v.csv" "$T/postgresql$v.csv" <<'PY' || { echo "FAIL: the two backends' reports differ ($v)"; exit 1; }
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
assert len(a) == len(b)
for x, y in zip(a, b):
    for k in x:
        if k.endswith("cost") or k in ("waste", "tasks_ended", "tasks_active", "period", "first_day", "last_day",
                                       "account", "job", "node", "oom_killed",
                                       "tasks_without_request", "running_tasks"):
            assert x[k] == y[k], (k, x, y)
        else:
            assert abs(float(x[k]) - float(y[k])) <= 1e-3 * max(1.0, abs(float(x[k]))), (k, x, y)
PY
	done
else
	echo "postgresql: SKIP: no server binaries in $PGBIN"
fi

printf 'rollups at ingest (helper_rollup_load, batches of 50000): sqlite %s tasks in %.1f s = %s tasks/s' \
	"$N" "$sq_s" "$sq_rate"
[ -n "${pg_rate:-}" ] && printf '; postgresql %s tasks in %.1f s = %s tasks/s' "$NPG" "$pg_s" "$pg_rate"
echo
printf 'reports over %s rollup_day rows (%s tasks; by job,node per month: + %s rollup_job_month rows, not the %s of rollup_job_day), best of 3, %s CPUs:\n' \
	"$ROWS" "$N" "$JROWS" "$JDROWS" "$(nproc)"
printf '%-14s %8s %8s %6s %8s %8s %6s %7s %8s %8s %6s %s\n' backend total base ratio "1st byte" base \
	ratio groups "Minstr" base ratio target
for r in "${results[@]}"; do
	set -- $r
	printf '%-14s %7.3fs %7.3fs %6.2f %7.3fs %7.3fs %6.2f %7s %8s %8s %6s %s\n' "$1" "$2" "$3" \
		"$(echo "$2 / $3" | bc -l)" "$4" "$5" "$(echo "$4 / $5" | bc -l)" "$6" \
		"$(awk -v i="$7" 'BEGIN { print (i == "-") ? "-" : sprintf("%.0f", i / 1e6) }')" \
		"$(awk -v i="$8" 'BEGIN { print (i == "-") ? "-" : sprintf("%.0f", i / 1e6) }')" \
		"$(awk -v a="$7" -v b="$8" 'BEGIN { print (a == "-" || b == "-") ? "-" : sprintf("%.2f", a / b) }')" \
		"$(awk -v t="$2" 'BEGIN { print (t <= 2.0) ? "met (<= 2 s)" : "above 2 s" }')"
done
