#!/bin/bash
# Collector ingest over loopback, batches of 500 task.end records (~1 KiB each), against the
# same rows inserted directly (sqlite3 CLI .import in one transaction / psql \copy), measured
# side by side in this run. The collector is measured with one uploading connection (one node)
# and with BENCH_CONNECTIONS (default 4) at once (several nodes, the collector's normal load;
# PostgreSQL gets as many database connections). Also: rollup maintenance cost (collector with
# vs without rollups, both with the parallel connections). BENCH_RECORDS (default 50000).
# BENCH_ROUNDS (default 3): every figure is measured that many times, SQLite and PostgreSQL
# taking turns, and the table shows each round and the medians; the targets are judged on
# the medians (one run on this shared 2-core host can be 30% off the next).
# BENCH_BACKENDS (default "sqlite postgresql"): the backends measured.
# A collector's rate runs from its first POST until it has exited after SIGTERM: on PostgreSQL
# ingest queues the rollup deltas and a folder applies them, the last of them at exit.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
N=${BENCH_RECORDS:-50000}
B=500
K=${BENCH_CONNECTIONS:-4}
R=${BENCH_ROUNDS:-3}
BACKENDS=" ${BENCH_BACKENDS:-sqlite postgresql} "
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
coll_init bench_ingest "$LOAD"
coll_tokens bench
TOK=$(node_token bench)
now() { date +%s.%N; }
rate() { python3 -c "import sys; print('%.0f' % ($N / (float(sys.argv[2]) - float(sys.argv[1]))))" "$1" "$2"; }

# collector_rate DB CONNECTIONS [serve args] -> records/s of the helper (generation untimed)
collector_rate() {
	local db=$1 k=$2 port out; shift 2
	port=$(free_port)
	"$COLL" migrate --db "$db" >/dev/null || return 1
	"$COLL" serve --listen "127.0.0.1:$port" --db "$db" --tokens "$T/tokens" "$@" 2>>"$T/coll.log" &
	CPID=$!
	# up to 30 s: a collector on PostgreSQL can start slowly on a loaded host
	for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
	out=$("$LOAD" post --url "http://127.0.0.1:$port/v1/records" --token "$TOK" --node bench \
		--count "$N" --batch "$B" --connections "$k") ||
		{ echo "post failed: $out" >&2; kill "$CPID"; return 1; }
	# the collector applies what rollup work it left queued (PostgreSQL) before it exits:
	# the clock runs from the first POST until then
	kill -TERM "$CPID"; wait "$CPID" 2>/dev/null; CPID=
	t_end=$(now)
	acc=$(echo "$out" | sed -n 's/.*accepted=\([0-9]*\).*/\1/p')
	start=$(echo "$out" | sed -n 's/.*start=\([0-9.]*\).*/\1/p')
	echo "$acc $(rate "$start" "$t_end")"
}

"$LOAD" csv --node bench --count "$N" > "$T/rows.csv"
"$LOAD" copy --node bench --count "$N" > "$T/rows.copy"

# Both backends are measured in each round (fresh databases), the rounds one after another,
# so a slow minute of the host shows in one round, not in one backend.
: > "$T/rounds"
PG_OK=
pg_start
case $? in
0) PG_OK=1 ;;
1) echo "postgresql: SKIP: no server binaries in $PGBIN" ;;
*) echo "FAIL: PostgreSQL did not start"; exit 1 ;;
esac
pg() { pg_uri "$1"; }
for round in $(seq "$R"); do
	# ---- SQLite ----
	if [[ $BACKENDS == *" sqlite "* ]]; then
	rm -f "$T"/*.db "$T"/*.db-wal "$T"/*.db-shm
	"$COLL" migrate --db "sqlite:$T/direct.db" >/dev/null
	t0=$(now)
	sqlite3 "$T/direct.db" -cmd "PRAGMA synchronous=FULL" ".mode csv" ".import $T/rows.csv records" || exit 1
	t1=$(now)
	sq_direct=$(rate "$t0" "$t1")
	read -r acc sq_one < <(collector_rate "sqlite:$T/coll1.db" 1)
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: sqlite collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc sq_coll < <(collector_rate "sqlite:$T/coll.db" "$K")
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: sqlite collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc sq_norl < <(collector_rate "sqlite:$T/coll-norollup.db" "$K" --no-rollups)
	echo "sqlite $round $sq_direct $sq_one $sq_coll $sq_norl 50000" >> "$T/rounds"
	fi

	# ---- PostgreSQL ----
	[ -n "$PG_OK" ] && [[ $BACKENDS == *" postgresql "* ]] || continue
	su postgres -s /bin/sh -c "for d in direct coll1 coll norollup; do
		$PGBIN/dropdb --if-exists -h $T/pg -p $PGPORT \$d 2>/dev/null && $PGBIN/createdb -h $T/pg -p $PGPORT \$d || exit 1; done" ||
		{ echo "FAIL: PostgreSQL databases not made"; exit 1; }
	"$COLL" migrate --db "$(pg direct)" >/dev/null
	t0=$(now)
	psql -q "$(pg direct)" -c "\\copy records FROM '$T/rows.copy'" || exit 1
	t1=$(now)
	pg_direct=$(rate "$t0" "$t1")
	read -r acc pg_one < <(collector_rate "$(pg coll1)" 1 --db-connections 1)
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: postgresql collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc pg_coll < <(collector_rate "$(pg coll)" "$K" --db-connections "$K")
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: postgresql collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc pg_norl < <(collector_rate "$(pg norollup)" "$K" --db-connections "$K" --no-rollups)
	echo "postgresql $round $pg_direct $pg_one $pg_coll $pg_norl 30000" >> "$T/rounds"
done

echo "ingest: $N task.end records, batches of $B, loopback HTTP/1.1 keep-alive, $(nproc) CPUs, $R round(s)"
python3 - "$T/rounds" "$K" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
k = sys.argv[2]
print("%-11s %5s %12s %11s %12s %9s %14s %9s %s" % ("backend", "round", "direct rec/s",
      "coll 1 conn", "coll %s conns" % k, "coll/dir", "no-rollup r/s", "rollup %", "target"))
def line(name, rnd, direct, one, coll, norl, target):
    cost = (norl - coll) / norl * 100 if norl else 0
    print("%-11s %5s %12.0f %11.0f %12.0f %9.2f %14.0f %8.1f%% %s" % (name, rnd, direct, one,
          coll, coll / direct, norl, cost, ("met" if coll >= target else "below %.0f" % target)
          + ", " + ("within 2x" if coll * 2 >= direct else "beyond 2x")))
for name in ("sqlite", "postgresql"):
    mine = [list(map(float, r[2:])) for r in rows if r[0] == name]
    if not mine:
        continue
    if len(mine) > 1:
        for i, r in enumerate(mine):
            line(name, str(i + 1), *r)
    # each column's median over the rounds; the verdict is the median's
    med = [statistics.median(c) for c in zip(*mine)]
    line(name, "med" if len(mine) > 1 else "1", *med)
PY
