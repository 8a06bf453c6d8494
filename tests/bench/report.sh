#!/bin/bash
# Showback report by account by day over generated rollup rows (SQLite): `corral-collector
# report --by account --period day --format csv` (time to first byte and total) side by side
# with the same aggregation as a hand-written SQL query run by sqlite3 (the baseline), in
# this run, as a ratio. The rows stand for ~10M task.end records: 1,000 accounts x 90 days x
# BENCH_USERS users (default 2) rollup rows, inserted directly (the ingest cost of rollups is
# measured by ingest.sh). PostgreSQL is not measured here.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
COLL=$O/corral-collector
U=${BENCH_USERS:-2}
[ -x "$COLL" ] || { echo "FAIL: $COLL not built"; exit 1; }
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
T=$(mktemp -d /tmp/bench_report.XXXXXX)
trap 'rm -rf "$T"' EXIT
DB=$T/r.db
"$COLL" migrate --db "sqlite:$DB" >/dev/null || { echo "FAIL: migrate"; exit 1; }
cat > "$T/p.ini" <<'INI'
[prices]
cpu_core_hour = 0.031
memory_gib_hour = 0.0043
gpu_hour = 1.70
io_read_gib = 0.0011
io_write_gib = 0.0023
net_gib = 0.013
INI
sqlite3 "$DB" <<SQL || { echo "FAIL: generating rows"; exit 1; }
WITH RECURSIVE a(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM a WHERE i < 999),
 d(j) AS (SELECT 0 UNION ALL SELECT j+1 FROM d WHERE j < 89),
 u(k) AS (SELECT 0 UNION ALL SELECT k+1 FROM u WHERE k < $U - 1)
INSERT INTO rollup_day SELECT date('2026-09-01', '+' || j || ' days'), 'acct' || i, 'user' || k,
 111, 3, 111*3600, 111*1800, 111*7200, 111*7300, 111*1e12, 111*2e12, 111*2.1e12,
 (i % 10)*360, (i % 10)*400, (i % 10)*400, 1e11 + i, 1e10 + j, 1e9 + k, 1e8
 FROM a, d, u;
SQL
ROWS=$(sqlite3 "$DB" 'SELECT count(*) FROM rollup_day')
Q="SELECT bucket, account, sum(round(cpu_charged_core_s/3600*0.031*100) +
 round(mem_charged_byte_s/3600/1073741824.0*0.0043*100) + round(gpu_charged_s/3600*1.70*100) +
 round(io_read_bytes/1073741824.0*0.0011*100 + io_write_bytes/1073741824.0*0.0023*100) +
 round((net_rx_bytes+net_tx_bytes)/1073741824.0*0.013*100))/100.0 AS cost
 FROM rollup_day WHERE bucket >= '2026-09-01' AND bucket < '2026-12-01'
 GROUP BY bucket, account ORDER BY bucket, account;"
now() { date +%s.%N; }
# time to first byte: the command's first output line, read as it arrives
ttfb() { local t0 t1; t0=$(now); "$@" | { IFS= read -r _; t1=$(now); cat >/dev/null; echo "$t1 - $t0" | bc -l; }; }
total() { local t0; t0=$(now); "$@" > "$T/out"; echo "$(now) - $t0" | bc -l; }
rep() { "$COLL" report --db "sqlite:$DB" --prices "$T/p.ini" --from 2026-09-01 --to 2026-12-01 \
	--by account --period day --format csv; }
base() { sqlite3 "$DB" "$Q"; }
best() { sort -n | head -1; }
rt=$(for _ in 1 2 3; do total rep; done | best)
rl=$(wc -l < "$T/out")
bt=$(for _ in 1 2 3; do total base; done | best)
bl=$(wc -l < "$T/out")
rf=$(for _ in 1 2 3; do ttfb rep; done | best)
bf=$(for _ in 1 2 3; do ttfb base; done | best)
[ $((rl - 2)) = "$bl" ] || { echo "FAIL: report has $rl lines, baseline $bl"; exit 1; }
printf 'report by account by day, %s rollup rows (~10M tasks), %s groups, best of 3:\n' "$ROWS" "$bl"
printf '  total:          corral %.3f s   sqlite3 %.3f s   ratio %.2f\n' "$rt" "$bt" "$(echo "$rt / $bt" | bc -l)"
printf '  first byte:     corral %.3f s   sqlite3 %.3f s   ratio %.2f\n' "$rf" "$bf" "$(echo "$rf / $bf" | bc -l)"
awk -v t="$rt" 'BEGIN { exit !(t <= 2.0) }' && echo "ok: within the 2 s target" ||
	echo "note: above the 2 s target on this (shared) machine"
