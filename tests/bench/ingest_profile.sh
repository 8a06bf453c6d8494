#!/bin/bash
# Where PostgreSQL ingest spends its time: the collector (4 connections, batches of 500
# task.end records, as ingest.sh) with rollups, without rollups, and `psql \copy` of the same
# rows, side by side in each round (PROFILE_ROUNDS, default 2; PROFILE_RECORDS, default
# 50000). For each: the rate (first POST until the collector has exited, its last fold
# included), the collector's CPU (user+system, from its parent's accounting of it), the
# PostgreSQL server's CPU (every process of the server: the postmaster's own and reaped
# children's ticks plus the live backends', from /proc), both per 1,000 records; then, for the
# last round's runs, PostgreSQL's statements by total execution time (pg_stat_statements) and,
# for the collector with rollups, the rows each table took (inserted, updated, HOT updates).
# PROFILE_SERVE_ARGS: more options for the collector with rollups (e.g. "--fold-delay 1000").
# PROFILE_AB_ARGS: a second collector with rollups in each round with these options instead,
# compared with the first (e.g. "--fold-delay 200").
# PROFILE_EXPLAIN=MS: the plans (EXPLAIN ANALYZE, auto_explain) of every statement of over MS
# milliseconds are kept in $O/ingest_profile.pg.log.
# PROFILE_PERF=1: the last round's collector with rollups under `perf record`, its top
# functions (self time) printed at the end. PROFILE_PERF=server: the PostgreSQL server's
# processes instead (the whole host recorded, the server's samples kept: `perf report --comm
# postgres`), its top functions by self time as shares of the server's samples.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
N=${PROFILE_RECORDS:-50000}
R=${PROFILE_ROUNDS:-2}
K=4
B=500
coll_init bench_ingest_profile "$LOAD"
coll_tokens bench
TOK=$(node_token bench)
PG_SERVER_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
if [ -n "${PROFILE_EXPLAIN:-}" ]; then
	PG_SERVER_OPTS="-c shared_preload_libraries=pg_stat_statements,auto_explain"
	PG_SERVER_OPTS+=" -c pg_stat_statements.track=all"
	PG_SERVER_OPTS+=" -c auto_explain.log_min_duration=${PROFILE_EXPLAIN}ms"
	PG_SERVER_OPTS+=" -c auto_explain.log_analyze=on -c auto_explain.log_buffers=on"
fi
pg_start
case $? in
0) ;;
1) echo "SKIP: no PostgreSQL server binaries in $PGBIN"; exit 77 ;;
*) echo "FAIL: PostgreSQL did not start"; exit 1 ;;
esac
PSQL() { psql -qAtX "$(pg_uri "$1")" "${@:2}"; }
now() { date +%s.%N; }
HZ=$(getconf CLK_TCK)
su postgres -s /bin/sh -c "$PGBIN/createdb -h $T/pg -p $PGPORT prof" || exit 1
PSQL prof -c "CREATE EXTENSION pg_stat_statements" || exit 1
"$LOAD" copy --node bench --count "$N" > "$T/rows.copy"

fresh_db() {
	su postgres -s /bin/sh -c "$PGBIN/dropdb --if-exists -h $T/pg -p $PGPORT $1 2>/dev/null;
		$PGBIN/createdb -h $T/pg -p $PGPORT $1" || exit 1
	"$COLL" migrate --db "$(pg_uri "$1")" >/dev/null || exit 1
	PSQL prof -c "SELECT pg_stat_statements_reset()" >/dev/null
}

# statements DB LABEL: the top statements of database DB by total execution time
statements() {
	echo "-- $2: statements by total execution time (ms), calls, rows"
	PSQL prof -F ' | ' -c "SELECT round(total_exec_time), calls, rows,
		left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$1')
		ORDER BY total_exec_time DESC LIMIT 10"
}

# tables DB LABEL: rows inserted, updated and updated in place (HOT) per table of DB with any
# (pg_stat_user_tables, flushed at each backend's exit: read after the collector has exited)
tables() {
	echo "-- $2: rows written per table: inserted | updated | of them HOT | table bytes"
	PSQL "$1" -F ' | ' -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd,
		pg_relation_size(relid) FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd > 0
		ORDER BY relname"
}

# run_coll DB [serve args]: one collector run; prints "rate coll_ms_per_1k pg_ms_per_1k"
run_coll() {
	local db=$1 port out p0 p1 t_end start acc cpid
	shift
	fresh_db "$db"
	port=$(free_port)
	p0=$(pg_cpu_ticks)
	( "$COLL" serve --listen "127.0.0.1:$port" --db "$(pg_uri "$db")" --tokens "$T/tokens" \
		--db-connections "$K" "$@" 2>>"$T/coll.log" &
	  echo $! > "$T/cpid"; wait $!; times > "$T/times" ) &
	local sub=$!
	for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
	cpid=$(cat "$T/cpid")
	if [ -n "${PERF_THIS:-}" ]; then
		if [ "$PERF_THIS" = server ]; then
			perf record -q -g -a -o "$T/perf.data" 2>/dev/null &
		else
			perf record -q -g -o "$T/perf.data" -p "$cpid" 2>/dev/null &
		fi
		PERF_PID=$!
		sleep 0.5
	fi
	out=$("$LOAD" post --url "http://127.0.0.1:$port/v1/records" --token "$TOK" --node bench \
		--count "$N" --batch "$B" --connections "$K") || { echo "post failed: $out" >&2; exit 1; }
	kill -TERM "$cpid"; wait "$sub"
	[ "${PERF_THIS:-}" = server ] && kill -INT "$PERF_PID"
	[ -n "${PERF_THIS:-}" ] && wait
	t_end=$(now)
	p1=$(pg_cpu_ticks)
	acc=$(echo "$out" | sed -n 's/.*accepted=\([0-9]*\).*/\1/p')
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: accepted ${acc:-0} of $N" >&2; exit 1; }
	start=$(echo "$out" | sed -n 's/.*start=\([0-9.]*\).*/\1/p')
	python3 - "$N" "$start" "$t_end" "$p0" "$p1" "$HZ" "$(tail -1 "$T/times")" <<'PY'
import re, sys
n, t0, t1, p0, p1, hz = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
secs = lambda s: int(s.group(1)) * 60 + float(s.group(2))
u, s = [secs(m) for m in re.finditer(r"(\d+)m([\d.]+)s", sys.argv[7])]
print("%.0f %.1f %.1f" % (n / (t1 - t0), (u + s) * 1e6 / n, (p1 - p0) / hz * 1e6 / n))
PY
}

: > "$T/rounds"
for round in $(seq "$R"); do
	fresh_db direct
	p0=$(pg_cpu_ticks); t0=$(now)
	PSQL direct -c "\\copy records FROM '$T/rows.copy'" || exit 1
	t1=$(now); p1=$(pg_cpu_ticks)
	d=$(python3 -c "import sys; n,a,b,c,d,hz=map(float,sys.argv[1:]); print('%.0f 0 %.1f' % (n/(b-a), (d-c)/hz*1e6/n))" "$N" "$t0" "$t1" "$p0" "$p1" "$HZ")
	[ "$round" = "$R" ] && statements direct "psql \\copy" > "$T/st_direct"
	PERF_THIS=
	[ "$round" = "$R" ] && [ -n "${PROFILE_PERF:-}" ] && PERF_THIS=$PROFILE_PERF
	# shellcheck disable=SC2086
	r=$(PERF_THIS=$PERF_THIS run_coll coll ${PROFILE_SERVE_ARGS:-}) || exit 1
	[ "$round" = "$R" ] && statements coll "collector with rollups" > "$T/st_coll" &&
		tables coll "collector with rollups" >> "$T/st_coll"
	ab=
	if [ -n "${PROFILE_AB_ARGS:-}" ]; then
		# shellcheck disable=SC2086
		ab=$(run_coll collab $PROFILE_AB_ARGS) || exit 1
		[ "$round" = "$R" ] && statements collab "collector with rollups, $PROFILE_AB_ARGS" > "$T/st_collab"
	fi
	nr=$(run_coll norl --no-rollups) || exit 1
	[ "$round" = "$R" ] && statements norl "collector without rollups" > "$T/st_norl"
	echo "$round|$d|$r|$nr|$ab" >> "$T/rounds"
done

echo "ingest profile: $N task.end records, batches of $B, $K connections, PostgreSQL $($PGBIN/postgres --version | awk '{print $3}'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$T/rounds" "${PROFILE_SERVE_ARGS:-}" "${PROFILE_AB_ARGS:-}" <<'PY'
import statistics, sys
names = ["psql \\copy", "with rollups " + sys.argv[2], "without rollups", "with rollups " + sys.argv[3]]
rows = [[list(map(float, c.split())) for c in l.rstrip("\n").split("|")[1:] if c.strip()]
        for l in open(sys.argv[1])]
runs = len(rows[0])
med = [[statistics.median(r[k][j] for r in rows) for j in range(3)] for k in range(runs)]
print("%-16s %-30s %10s %12s %12s %12s %10s" % ("round", "run", "rec/s", "coll ms/1k",
      "server ms/1k", "total ms/1k", "rate/copy"))
for i, r in enumerate(rows + [med]):
    for k in range(runs):
        print("%-16s %-30s %10.0f %12.1f %12.1f %12.1f %10.2f" % (str(i + 1) if i < len(rows)
              else "median", names[k].strip(), r[k][0], r[k][1], r[k][2], r[k][1] + r[k][2],
              r[k][0] / r[0][0]))
tot = lambda k: med[k][1] + med[k][2]
print("medians: CPU per record with rollups %.2f of without (collector %+.1f, server %+.1f ms"
      " per 1,000 records)" % (tot(1) / tot(2), med[1][1] - med[2][1], med[1][2] - med[2][2]))
if runs > 3:
    print("medians: '%s' against '%s': CPU per record %.2f, server CPU %.2f, rate %.2f" % (
          names[3].strip(), names[1].strip(), tot(3) / tot(1), med[3][2] / med[1][2],
          med[3][0] / med[1][0]))
PY
cat "$T/st_direct" "$T/st_coll" "$T/st_collab" "$T/st_norl" 2>/dev/null
if [ "${PROFILE_PERF:-}" = server ] && [ -s "$T/perf.data" ]; then
	# self time: the call chains of a server built without frame pointers are not reliable
	echo "-- the server during the collector with rollups: functions by self time, % of the server's samples (perf)"
	all=$(perf report -i "$T/perf.data" --sort comm --stdio 2>/dev/null |
		awk '$NF == "postgres" { sub("%", "", $1); print $1 }')
	perf report -i "$T/perf.data" --comm postgres --no-children --sort symbol --stdio \
		2>/dev/null | awk -v all="${all:-0}" '/^ +[0-9.]+%/ && n < 30 {
			sub("%", "", $1); n++
			printf "%6.1f%%  %s\n", (all > 0 ? 100 * $1 / all : 0), $3 }'
	cp "$T/perf.data" "$O/ingest_profile.perf.data" && echo "(kept in $O/ingest_profile.perf.data)"
elif [ -n "${PROFILE_PERF:-}" ] && [ -s "$T/perf.data" ]; then
	echo "-- the collector with rollups: functions by self time (perf)"
	perf report -i "$T/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
		grep -E '^ +[0-9.]+%' | head -30
	cp "$T/perf.data" "$O/ingest_profile.perf.data" && echo "(kept in $O/ingest_profile.perf.data)"
fi
if [ -n "${PROFILE_EXPLAIN:-}" ]; then
	cp "$T/pg/log" "$O/ingest_profile.pg.log" && echo "(plans in $O/ingest_profile.pg.log)"
fi
