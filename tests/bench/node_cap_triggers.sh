#!/bin/bash
# What the triggers of rollup_node_day cost the writes of node rows: those of schema 12
# (rollup_node_cap_day/_month, the counted capacity keys) and of schema 13 (rollup_node_energy_day,
# the nodes' unattributed energy per day), kept in step with it. CAP_NODES (default 2,000) nodes
# x CAP_DAYS (default 30) days of rollup_node_day rows inserted (with unattributed CPU, DRAM and
# GPU energy), then every row updated once with a new capacity and more energy (as a fold does
# when a node's next records arrive), on SQLite and on a PostgreSQL server the script starts
# (skipped without one), in a database with the triggers and in the same database without
# them, CAP_ROUNDS (default 3) alternating rounds; prints microseconds per row and the ratio
# (with / without) per round and of the medians. Then checks that the triggers did their work:
# rollup_node_energy_day of the database with them equals plain SQL over its rollup_node_day
# (exit 1 if not). Needs sqlite3.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
coll_init bench_node_cap
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
NN=${CAP_NODES:-2000}
ND=${CAP_DAYS:-30}
R=${CAP_ROUNDS:-3}
ROWS=$((NN * ND))
now() { date +%s.%N; }
INS_SQLITE="INSERT INTO rollup_node_day (bucket, node, label_key, label_value, tasks, wall_s, cpu_s,
 cpu_charged_core_s, mem_charged_byte_s, gpu_charged_s, energy_cpu_j, energy_dram_j, gpu_s) WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL
 SELECT i + 1 FROM d WHERE i < $ND - 1), n(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM n WHERE
 j < $NN - 1) SELECT strftime('%Y-%m-%d', '2026-09-01', '+' || i || ' days'), 'node' || j,
 'price_class', CASE WHEN j % 4 = 0 THEN 'gpu' ELSE 'std' END, 2880, 86400, 1000.5 * (j % 7),
 64 * 86400.0, 256 * 1073741824.0 * 86400, CASE WHEN j % 4 = 0 THEN 4 * 86400.0 ELSE 0 END,
 86400 * 41.25 + j, 86400 * 6.5, CASE WHEN j % 4 = 0 THEN 86400 * 60.125 ELSE 0 END
 FROM d, n"
INS_PG="INSERT INTO rollup_node_day (bucket, node, label_key, label_value, tasks, wall_s, cpu_s,
 cpu_charged_core_s, mem_charged_byte_s, gpu_charged_s, energy_cpu_j, energy_dram_j, gpu_s) SELECT to_char(date '2026-09-01' + i,
 'YYYY-MM-DD'), 'node' || j, 'price_class', CASE WHEN j % 4 = 0 THEN 'gpu' ELSE 'std' END, 2880,
 86400, 1000.5 * (j % 7), 64 * 86400.0, 256 * 1073741824.0 * 86400, CASE WHEN j % 4 = 0 THEN
 4 * 86400.0 ELSE 0 END, 86400 * 41.25 + j, 86400 * 6.5, CASE WHEN j % 4 = 0 THEN 86400 * 60.125
 ELSE 0 END FROM generate_series(0, $ND - 1) i, generate_series(0, $NN - 1) j"
UPD="UPDATE rollup_node_day SET cpu_charged_core_s = cpu_charged_core_s + 3600,
 wall_s = wall_s + 1, tasks = tasks + 1, energy_cpu_j = energy_cpu_j + 30.0005,
 energy_dram_j = energy_dram_j + 4.25"
CLEAR="DELETE FROM rollup_node_day; DELETE FROM rollup_node_cap_day; DELETE FROM rollup_node_cap_month;
 DELETE FROM rollup_node_energy_day"
# the energy per day kept by the triggers against plain SQL over rollup_node_day: the
# differing days (0 when they agree) and the days kept
ECHECK="SELECT (SELECT count(*) FROM (SELECT bucket, count(*) AS r,
 sum(CAST(round(energy_cpu_j * 1000) AS BIGINT)) AS c, sum(CAST(round(energy_dram_j * 1000) AS BIGINT)) AS d,
 sum(CAST(round(gpu_s * 1000) AS BIGINT)) AS g FROM rollup_node_day GROUP BY bucket) x FULL JOIN
 rollup_node_energy_day e USING (bucket) WHERE x.r IS DISTINCT FROM e.node_rows OR x.c IS DISTINCT FROM e.cpu_mj
 OR x.d IS DISTINCT FROM e.dram_mj OR x.g IS DISTINCT FROM e.gpu_mj) || ' ' || (SELECT count(*) FROM rollup_node_energy_day)"
# timed DB SQL: seconds of one statement, through sqlite3 or psql
timed() {
	local t0
	t0=$(now)
	case $1 in
	sqlite:*) sqlite3 "${1#sqlite:}" "$2" ;;
	*) psql -q "$1" -c "$2" ;;
	esac || return 1
	echo "$(now) - $t0" | bc -l
}
query() { # query DB SQL: one value, through sqlite3 or psql
	case $1 in
	sqlite:*) sqlite3 "${1#sqlite:}" "$2" ;;
	*) psql -qtAX "$1" -c "$2" ;;
	esac
}
med() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# run NAME WITH-DB WITHOUT-DB INSERT-SQL
run() {
	local name=$1 with=$2 without=$3 ins=$4 i db v iw uw io uo
	local -a iws=() uws=() ios=() uos=()
	for i in $(seq "$R"); do
		for db in with without; do
			v=${!db}
			timed "$v" "$CLEAR" >/dev/null || return 1
			iw=$(timed "$v" "$ins") && uw=$(timed "$v" "$UPD") || { echo "FAIL: $name $db"; return 1; }
			if [ $db = with ]; then
				iws+=("$iw") uws+=("$uw")
			else
				ios+=("$iw") uos+=("$uw")
			fi
		done
		printf '%s round %d: insert %.2f / %.2f us per row (%.2f), update %.2f / %.2f us (%.2f)\n' "$name" \
			"$i" "$(echo "${iws[-1]} * 1000000 / $ROWS" | bc -l)" "$(echo "${ios[-1]} * 1000000 / $ROWS" | bc -l)" \
			"$(echo "${iws[-1]} / ${ios[-1]}" | bc -l)" "$(echo "${uws[-1]} * 1000000 / $ROWS" | bc -l)" \
			"$(echo "${uos[-1]} * 1000000 / $ROWS" | bc -l)" "$(echo "${uws[-1]} / ${uos[-1]}" | bc -l)"
	done
	iw=$(printf '%s\n' "${iws[@]}" | med) io=$(printf '%s\n' "${ios[@]}" | med)
	uw=$(printf '%s\n' "${uws[@]}" | med) uo=$(printf '%s\n' "${uos[@]}" | med)
	printf '%-10s %8s rows: insert %7.2f us per row with the triggers, %7.2f without (%.2f); update %7.2f / %7.2f (%.2f), medians of %d rounds\n' \
		"$name" "$ROWS" "$(echo "$iw * 1000000 / $ROWS" | bc -l)" "$(echo "$io * 1000000 / $ROWS" | bc -l)" \
		"$(echo "$iw / $io" | bc -l)" "$(echo "$uw * 1000000 / $ROWS" | bc -l)" \
		"$(echo "$uo * 1000000 / $ROWS" | bc -l)" "$(echo "$uw / $uo" | bc -l)" "$R"
	v=$(query "$with" "$ECHECK")
	[ "${v% *}" = 0 ] && [ "${v#* }" = "$ND" ] ||
		{ echo "FAIL: $name: rollup_node_energy_day against rollup_node_day: ${v:-no answer}"; return 1; }
	echo "$name: rollup_node_energy_day equals plain SQL over rollup_node_day ($ND days)"
}
"$COLL" migrate --db "sqlite:$T/with.db" >/dev/null && "$COLL" migrate --db "sqlite:$T/without.db" >/dev/null &&
	sqlite3 "$T/without.db" "DROP TRIGGER rollup_node_cap_ins; DROP TRIGGER rollup_node_cap_del;
		DROP TRIGGER rollup_node_cap_upd" || { echo "FAIL: sqlite databases"; exit 1; }
run sqlite "sqlite:$T/with.db" "sqlite:$T/without.db" "$INS_SQLITE" || exit 1
if [ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1 && command -v psql >/dev/null; then
	pg_start with without || { echo "FAIL: PostgreSQL did not start"; exit 1; }
	"$COLL" migrate --db "$(pg_uri with)" >/dev/null && "$COLL" migrate --db "$(pg_uri without)" >/dev/null &&
		psql -q "$(pg_uri without)" -c "DROP TRIGGER rollup_node_cap ON rollup_node_day" ||
		{ echo "FAIL: postgresql databases"; exit 1; }
	run postgresql "$(pg_uri with)" "$(pg_uri without)" "$INS_PG" || exit 1
else
	echo "postgresql: SKIP: no server binaries in $PGBIN"
fi
