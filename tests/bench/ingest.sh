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
# PostgreSQL: each round alternates `psql \copy` and the collector (copy, collector with
# rollups, copy, collector without rollups), and each collector run is set against the copy
# just before it, so a slow minute of the host lands on both sides of a ratio. The ratios are
# summarised as median and spread (min-max) over the rounds, next to the CPU each side spent
# per 1,000 records (psql's own and the server's for the copy; the collector's and the
# server's for the collector; the server's read from /proc, see pg_cpu_ticks), which moves
# less with the host's load than the rates do.
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

# collector_rate DB CONNECTIONS [serve args] -> "accepted records/s collector_ms_per_1k
# server_ms_per_1k" of the helper's upload (generation untimed); the server's CPU only on
# PostgreSQL (0 on SQLite, where the database is in the collector)
collector_rate() {
	local db=$1 k=$2 port out p0=0 p1=0 sub; shift 2
	port=$(free_port)
	"$COLL" migrate --db "$db" >/dev/null || return 1
	[[ $db == postgresql* ]] && p0=$(pg_cpu_ticks)
	( "$COLL" serve --listen "127.0.0.1:$port" --db "$db" --tokens "$T/tokens" "$@" 2>>"$T/coll.log" &
	  echo $! > "$T/cpid"; wait $!; times > "$T/times" ) &
	sub=$!
	# up to 30 s: a collector on PostgreSQL can start slowly on a loaded host
	for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
	CPID=$(cat "$T/cpid")
	out=$("$LOAD" post --url "http://127.0.0.1:$port/v1/records" --token "$TOK" --node bench \
		--count "$N" --batch "$B" --connections "$k") ||
		{ echo "post failed: $out" >&2; kill "$CPID"; return 1; }
	# the collector applies what rollup work it left queued (PostgreSQL) before it exits:
	# the clock runs from the first POST until then
	kill -TERM "$CPID"; wait "$sub" 2>/dev/null; CPID=
	t_end=$(now)
	[[ $db == postgresql* ]] && p1=$(pg_cpu_ticks)
	acc=$(echo "$out" | sed -n 's/.*accepted=\([0-9]*\).*/\1/p')
	start=$(echo "$out" | sed -n 's/.*start=\([0-9.]*\).*/\1/p')
	echo "$acc $(rate "$start" "$t_end") $(cpu_per_1k "$(tail -1 "$T/times")") $(ticks_per_1k "$p0" "$p1")"
}

# cpu_per_1k "TIMES LINE": the user+system time of a `times` line, in ms per 1,000 records
cpu_per_1k() {
	python3 -c "import re, sys
t = sum(int(m[0]) * 60 + float(m[1]) for m in re.findall(r'(\d+)m([\d.]+)s', sys.argv[2]))
print('%.1f' % (t * 1e6 / int(sys.argv[1])))" "$N" "$1"
}
# ticks_per_1k T0 T1: clock ticks between two pg_cpu_ticks, in ms per 1,000 records
ticks_per_1k() {
	python3 -c "import sys; print('%.1f' % ((int(sys.argv[3]) - int(sys.argv[2])) / $HZ * 1e6 / int(sys.argv[1])))" "$N" "$1" "$2"
}
HZ=$(getconf CLK_TCK)

# psql_copy DB -> "records/s psql_ms_per_1k server_ms_per_1k" of a \copy of the rows into DB
psql_copy() {
	local p0 p1 t0 t1
	"$COLL" migrate --db "$(pg "$1")" >/dev/null || return 1
	p0=$(pg_cpu_ticks)
	t0=$(now)
	( psql -q "$(pg "$1")" -c "\\copy records FROM '$T/rows.copy'" || exit 1; times > "$T/times" ) || return 1
	t1=$(now)
	p1=$(pg_cpu_ticks)
	echo "$(rate "$t0" "$t1") $(cpu_per_1k "$(tail -1 "$T/times")") $(ticks_per_1k "$p0" "$p1")"
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
	read -r acc sq_one _ < <(collector_rate "sqlite:$T/coll1.db" 1)
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: sqlite collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc sq_coll _ < <(collector_rate "sqlite:$T/coll.db" "$K")
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: sqlite collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc sq_norl _ < <(collector_rate "sqlite:$T/coll-norollup.db" "$K" --no-rollups)
	echo "sqlite $round $sq_direct $sq_one $sq_coll $sq_norl 50000" >> "$T/rounds"
	fi

	# ---- PostgreSQL ----
	[ -n "$PG_OK" ] && [[ $BACKENDS == *" postgresql "* ]] || continue
	su postgres -s /bin/sh -c "for d in direct1 direct2 coll1 coll norollup; do
		$PGBIN/dropdb --if-exists -h $T/pg -p $PGPORT \$d 2>/dev/null && $PGBIN/createdb -h $T/pg -p $PGPORT \$d || exit 1; done" ||
		{ echo "FAIL: PostgreSQL databases not made"; exit 1; }
	# copy, collector with rollups, copy, collector without: each collector run against the
	# copy just before it
	copy_a=$(psql_copy direct1) || exit 1
	read -r acc coll < <(collector_rate "$(pg coll)" "$K" --db-connections "$K")
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: postgresql collector accepted ${acc:-0} of $N"; exit 1; }
	copy_b=$(psql_copy direct2) || exit 1
	read -r acc norl < <(collector_rate "$(pg norollup)" "$K" --db-connections "$K" --no-rollups)
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: postgresql collector accepted ${acc:-0} of $N"; exit 1; }
	read -r acc one _ < <(collector_rate "$(pg coll1)" 1 --db-connections 1)
	[ "${acc:-0}" = "$N" ] || { echo "FAIL: postgresql collector accepted ${acc:-0} of $N"; exit 1; }
	echo "$round|$copy_a|$coll|$copy_b|$norl|$one" >> "$T/pgrounds"
done

echo "ingest: $N task.end records, batches of $B, loopback HTTP/1.1 keep-alive, $(nproc) CPUs, $R round(s)"
python3 - "$T/rounds" "$K" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
k = sys.argv[2]
if not rows:
    sys.exit(0)
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
[ -s "$T/pgrounds" ] || exit 0
echo "postgresql: psql \\copy and the collector ($K connections) alternating; CPU in ms per 1,000 records; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(the collector, not \\copy: HTTP/1.1 per batch with a bearer token checked, the JSON decode and checks of every record, the per-record answer, duplicates told from new records, rollup deltas queued and folded; no rollups: the same without the last)"
python3 - "$T/pgrounds" "$K" <<'PY'
import statistics, sys
rows = [[list(map(float, c.split())) for c in l.strip().split("|")[1:]] for l in open(sys.argv[1])]
print("%-6s %10s %9s %9s %12s %9s %9s %7s %10s %9s %9s %12s %9s %9s %7s %10s" % (
      "round", "copy r/s", "psql cpu", "srv cpu", "rollups r/s", "coll cpu", "srv cpu",
      "ratio", "copy r/s", "psql cpu", "srv cpu", "no-rollup r/s", "coll cpu", "srv cpu",
      "ratio", "1 conn r/s"))
ratio_r, ratio_n = [], []
for i, (ca, co, cb, nr, one) in enumerate(rows):
    ratio_r.append(co[0] / ca[0])
    ratio_n.append(nr[0] / cb[0])
    print("%-6d %10.0f %9.1f %9.1f %12.0f %9.1f %9.1f %7.2f %10.0f %9.1f %9.1f %12.0f %9.1f %9.1f %7.2f %10.0f" % (
          i + 1, *ca, *co, ratio_r[-1], *cb, *nr, ratio_n[-1], one[0]))
def summary(name, ratios, k):
    copy = [r[0 if k == 1 else 2] for r in rows]
    coll = [r[k] for r in rows]
    med = lambda xs: statistics.median(xs)
    cc, cs = med([c[1] for c in coll]), med([c[2] for c in coll])
    pc, ps = med([c[1] for c in copy]), med([c[2] for c in copy])
    print("%s: rate ratio median %.2f (spread %.2f-%.2f over %d rounds; target 0.9 %s);"
          " CPU per 1,000 records, medians: collector %.1f + server %.1f = %.1f ms against"
          " psql %.1f + server %.1f = %.1f ms (%.2f), server alone %.2f" % (
          name, med(ratios), min(ratios), max(ratios), len(ratios),
          "met" if med(ratios) >= 0.9 else "not met", cc, cs, cc + cs, pc, ps, pc + ps,
          (cc + cs) / (pc + ps), cs / ps))
summary("with rollups", ratio_r, 1)
summary("without rollups", ratio_n, 3)
PY
