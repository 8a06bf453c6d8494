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
# Node records: BENCH_NODES (default 10,000) nodes x 91 days (the range) of rollup_node_day rows (what
# node.sample records every 30 s make: 2,880 records a node and day, rolled up), written by
# SQL (generate the rows, not the 2.6 billion records), a quarter of the nodes of class gpu
# with 4 GPUs; node0..node199 are the nodes the tasks ran on. Then, side by side with the
# plain report in the same run: the report by account per day with --share-idle proportional
# (the idle capacity of every node shared over the accounts) and `capacity --by node --period
# month` against a hand-written SQL query of the capacity per node and month. The SQLite
# triggers of schema 12 count the node rows per capacity key as they are inserted
# (rollup_node_cap_day/_month, in the time printed for the node rows), and those of schema 13
# sum the node rows' unattributed energy per day (rollup_node_energy_day: the (idle) rows'
# energy, read as 91 rows, not the 910,000 node rows; the node rows carry energy, fractional
# joules).
# BENCH_PG_PROFILE=1 adds where PostgreSQL's time goes (plans, table sizes, text against binary
# results). Needs sqlite3 and bc. About 5 minutes on 2 shared cores.
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
# the command measured: report (default) or capacity, with EXTRA arguments
CMD=report
EXTRA=()
# bench NAME DBURI BY PERIOD BASELINE-COMMAND...
bench() {
	local name=$1 uri=$2 by=$3 period=$4 rt bt rf bf rl bl ri bi; shift 4
	rep() { "$COLL" $CMD --db "$uri" --prices "$T/p.ini" --from 2026-09-01 --to 2026-12-01 \
		--by "$by" --period "$period" --format csv "${EXTRA[@]}"; }
	rt=$(for _ in 1 2 3; do total rep; done | best)
	# the rows besides the (idle) rows of the nodes' unattributed energy (one a day with
	# --share-idle: the idle cost is shared, the energy stays)
	rl=$(grep -vc '(idle)' "$T/out")
	cp "$T/out" "$T/$name.csv"
	bt=$(for _ in 1 2 3; do total "$@"; done | best)
	bl=$(wc -l < "$T/out")
	rf=$(for _ in 1 2 3; do ttfb rep; done | best)
	bf=$(for _ in 1 2 3; do ttfb "$@"; done | best)
	ri=- bi=-
	case $name in sqlite*)
		ri=$(instr "$COLL" $CMD --db "$uri" --prices "$T/p.ini" --from 2026-09-01 \
			--to 2026-12-01 --by "$by" --period "$period" --format csv "${EXTRA[@]}")
		bi=$(instr "$@") ;;
	esac
	[ $((rl - 2)) = "$bl" ] || { echo "FAIL: $name report has $rl lines, baseline $bl"; return 1; }
	results+=("$name $rt $bt $rf $bf $bl $ri $bi")
}
# node_day rows: BENCH_NODES nodes x 90 days, in the table's own column order
NN=${BENCH_NODES:-10000}
NODE_ROWS="WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM d WHERE i < 90),
 n(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM n WHERE j < $NN - 1)
 SELECT strftime('%Y-%m-%d', '2026-09-01', '+' || i || ' days') AS bucket, 'node' || j AS node,
 'price_class' AS label_key, CASE WHEN j % 4 = 0 THEN 'gpu' ELSE 'std' END AS label_value,
 2880.0 AS tasks, 86400.0 AS wall_s, 64 * 86400.0 * ((i * 7 + j) % 10) / 20 AS cpu_s,
 16 * 86400.0 AS cpu_req_core_s, 64 * 86400.0 AS cpu_charged_core_s,
 128 * 1073741824.0 * 86400 AS mem_byte_s, 64 * 1073741824.0 * 86400 AS mem_req_byte_s,
 256 * 1073741824.0 * 86400 AS mem_charged_byte_s,
 CASE WHEN j % 4 = 0 THEN 2 * 86400.0 ELSE 0 END AS gpu_req_s,
 CASE WHEN j % 4 = 0 THEN 4 * 86400.0 ELSE 0 END AS gpu_charged_s,
 86400 * (40 + (i * 3 + j) % 23) + 0.001 * ((i * 7 + j) % 997) AS energy_cpu_j,
 86400 * (6 + (i + j) % 5) + 0.001 * ((i + 3 * j) % 991) AS energy_dram_j,
 CASE WHEN j % 4 = 0 THEN 86400 * (50 + (i + j) % 13) + 0.001 * (j % 983) ELSE 0 END AS gpu_s
 FROM d, n"
t0=$(now)
sqlite3 "$DB" "INSERT INTO rollup_node_day (bucket, node, label_key, label_value, tasks, wall_s,
 cpu_s, cpu_req_core_s, cpu_charged_core_s, mem_byte_s, mem_req_byte_s, mem_charged_byte_s,
 gpu_req_s, gpu_charged_s, energy_cpu_j, energy_dram_j, gpu_s) $NODE_ROWS" || { echo "FAIL: node rows"; exit 1; }
echo "sqlite: $(sqlite3 "$DB" 'SELECT count(*) FROM rollup_node_day') rollup_node_day rows written in $(echo "$(now) - $t0" | bc -l | cut -c1-5) s"
printf '[node_class:gpu]\ncpu_core_hour = 0.05\ngpu_hour = 2.10\n' >>"$T/p.ini"
# capacity per node and month, as the capacity report prices it (allocation aside)
QCAP="SELECT substr(bucket, 1, 7), node, label_value, sum(round(cpu_charged_core_s/3600*(CASE
 WHEN label_value = 'gpu' THEN 0.05 ELSE 0.031 END)*100) + round(mem_charged_byte_s/3600/1073741824.0*0.0043*100)
 + round(gpu_charged_s/3600*2.10*100))/100.0 FROM rollup_node_day WHERE bucket >= '2026-09-01'
 AND bucket < '2026-12-01' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;"
plain() { "$COLL" report --db "$1" --prices "$T/p.ini" --from 2026-09-01 --to 2026-12-01 \
	--by account --period day --format csv | sed '1d;$d'; } # (its rows, as the baselines)

bench sqlite "sqlite:$DB" account day sqlite3 "$DB" "$Q" || exit 1
bench sqlite-jn "sqlite:$DB" job,node month sqlite3 "$DB" "$QJN" || exit 1
EXTRA=(--share-idle proportional)
bench sqlite-idle "sqlite:$DB" account day plain "sqlite:$DB" || exit 1
CMD=capacity EXTRA=()
bench sqlite-cap "sqlite:$DB" node month sqlite3 "$DB" "$QCAP" || exit 1
CMD=report
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
	# (the counted capacity keys and the energy per day too, which the SQLite triggers made
	# from the same node rows:
	# the PostgreSQL trigger is off for the copy, session_replication_role = replica)
	for tbl in rollup_day rollup_job_month rollup_job_day rollup_node_day rollup_node_alloc_day \
		rollup_node_cap_day rollup_node_cap_month rollup_node_energy_day; do
		cols=$(sqlite3 "$DB" "SELECT group_concat(CASE WHEN type = 'REAL' THEN
			'printf(''%.17g'', ' || name || ')' ELSE '\"' || name || '\"' END, ', ')
			FROM pragma_table_info('$tbl')")
		sqlite3 -csv "$DB" "SELECT $cols FROM $tbl" > "$T/$tbl.csv"
		psql -q "$(pg rep)" -c "SET session_replication_role = replica" \
			-c "\\copy $tbl FROM '$T/$tbl.csv' CSV" || exit 1
	done
	psql -q "$(pg rep)" -c "ANALYZE" || exit 1
	bench postgresql "$(pg rep)" account day psql -At -F, "$(pg rep)" -c "$Q" || exit 1
	bench postgresql-jn "$(pg rep)" job,node month psql -At -F, "$(pg rep)" -c "$QJN" || exit 1
	EXTRA=(--share-idle proportional)
	bench postgresql-idle "$(pg rep)" account day plain "$(pg rep)" || exit 1
	CMD=capacity EXTRA=()
	bench postgresql-cap "$(pg rep)" node month psql -At -F, "$(pg rep)" -c "$QCAP" || exit 1
	CMD=report
	# BENCH_PG_PROFILE=1: where the server's time goes (one run each, not best of 3): the
	# plans of the node rows read one by one (as before schema 12) and of the month keys,
	# the table sizes, and the report's rollup_day rows sent as text against binary
	if [ "${BENCH_PG_PROFILE:-0}" = 1 ]; then
		R=$(pg rep)
		echo "--- postgresql profile"
		psql -At "$R" -c "SELECT relname || ': ' || n_live_tup || ' rows, ' ||
			pg_size_pretty(pg_relation_size(relid)) || ' heap, ' ||
			pg_size_pretty(pg_total_relation_size(relid)) || ' with indexes' FROM pg_stat_user_tables
			WHERE relname IN ('rollup_day', 'rollup_node_day', 'rollup_node_alloc_day',
			'rollup_node_cap_day', 'rollup_node_cap_month') ORDER BY relname"
		for q in "SELECT bucket, node, label_key, label_value, tasks, wall_s, cpu_s,
			cpu_charged_core_s, mem_charged_byte_s, gpu_charged_s FROM rollup_node_day
			WHERE bucket >= '2026-09-01' AND bucket < '2026-12-01' ORDER BY bucket, node, label_key, label_value" \
			"SELECT * FROM rollup_node_cap_month WHERE bucket >= '2026-09' AND bucket < '2026-12' AND units > 0"; do
			psql -At "$R" -c "EXPLAIN (ANALYZE, BUFFERS) $q" | grep -E "Scan|Sort|rows=|Execution|JIT|Timing" | head -6
		done
		cols=$(psql -At "$R" -c "SELECT string_agg(column_name, ', ' ORDER BY ordinal_position)
			FROM information_schema.columns WHERE table_name = 'rollup_day'")
		for fmt in text binary; do
			t0=$(now)
			psql -q "$R" -c "COPY (SELECT $cols FROM rollup_day WHERE bucket >= '2026-09-01' AND
				bucket < '2026-12-01' ORDER BY bucket, account, \"user\") TO '/dev/null' (FORMAT $fmt)"
			echo "rollup_day rows of the report sent as $fmt: $(echo "$(now) - $t0" | bc -l | cut -c1-5) s"
		done
	fi
	# money to the cent and counts exactly; quantities and ratios may differ in their last
	# printed digit (the copied doubles pass through sqlite3's printf)
	for v in "" -jn -idle -cap; do
	python3 - "$T/sqlite$v.csv" "$T/postgresql$v.csv" <<'PY' || { echo "FAIL: the two backends' reports differ ($v)"; exit 1; }
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
assert len(a) == len(b)
for x, y in zip(a, b):
    for k in x:
        if k.endswith("cost") or k in ("waste", "price_class", "tasks_ended", "tasks_active", "period", "first_day", "last_day",
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
printf 'reports over %s rollup_day rows (%s tasks; by job,node per month: + %s rollup_job_month rows, not the %s of rollup_job_day; idle and capacity: + %s rollup_node_day rows of %s nodes x 91 days and the %s rollup_node_alloc_day rows), best of 3, %s CPUs:\n' \
	"$ROWS" "$N" "$JROWS" "$JDROWS" "$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_node_day')" "$NN" "$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_node_alloc_day')" "$(nproc)"
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
