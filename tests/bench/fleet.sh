#!/bin/bash
# A fleet of N simulated nodes against one collector on loopback (tests/bench/helper_fleet:
# one epoll loop, a keep-alive connection, a token, a source address and record ids per node;
# a task.end per node every 10 s and a task.sample every 30 s; retries by the agent's rule,
# Retry-After honoured with jitter). For each backend and each N (FLEET_NODES, default
# "100 1000 10000"): FLEET_SECONDS (default 40) of uploads, then until every node's queue is
# acknowledged. Reported: records offered and stored per second, upload latency p50/p99/max
# (first byte written to last byte of the answer), the collector's peak RSS, threads and open
# descriptors (sampled from /proc every second), its CPU and the PostgreSQL server's (every
# process of it, from /proc) per 1,000 records, 503s, and the records in the database
# counted with plain SQL against the records the nodes made (lost = made - counted); one
# table, each figure also as a ratio to the smallest N.
# Then the reconnect storm (FLEET_STORM_NODES, default 10000; 0 = none): after 20 s of
# uploads the collector is killed (-9) for FLEET_OUTAGE s (default 60), started again, and
# the nodes come back by the retry rule: the time until every record made before the restart
# is stored (drain), the latency after the restart, the 503s, nothing lost.
# FLEET_BACKENDS (default "sqlite postgresql"). FLEET_SERVE_CONFIG: a config file for the
# collector (e.g. a [server] max_queued to compare). Run it under nice on a shared host.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
H=$O/tests/bench/helper_fleet
NODES=${FLEET_NODES:-100 1000 10000}
SECS=${FLEET_SECONDS:-40}
BACKENDS=" ${FLEET_BACKENDS:-sqlite postgresql} "
STORM_N=${FLEET_STORM_NODES:-10000}
OUTAGE=${FLEET_OUTAGE:-60}
command -v sqlite3 >/dev/null || { echo "FAIL: sqlite3 CLI missing"; exit 1; }
coll_init bench_fleet "$H"
MAXN=$STORM_N
for n in $NODES; do [ "$n" -gt "$MAXN" ] && MAXN=$n; done

t0=$(date +%s.%N)
"$H" tokens --nodes "$MAXN" >"$T/tokens" && chmod 600 "$T/tokens" || exit 1
t1=$(date +%s.%N)
echo "tokens file for $MAXN nodes written in $(python3 -c "print('%.2f' % ($t1 - $t0))") s"

PG_OK=
if [[ $BACKENDS == *" postgresql "* ]]; then
	pg_start
	case $? in
	0) PG_OK=1 ;;
	1) echo "postgresql: SKIP: no server binaries in $PGBIN" ;;
	*) echo "FAIL: PostgreSQL did not start"; exit 1 ;;
	esac
fi

# fresh_db BACKEND NAME -> the URI of an empty, migrated database
fresh_db() {
	local uri
	if [ "$1" = sqlite ]; then
		rm -f "$T/$2.db" "$T/$2.db-wal" "$T/$2.db-shm"
		uri="sqlite:$T/$2.db"
	else
		su postgres -s /bin/sh -c "$PGBIN/dropdb --if-exists -h $T/pg -p $PGPORT $2 2>/dev/null;
			$PGBIN/createdb -h $T/pg -p $PGPORT $2" || return 1
		uri=$(pg_uri "$2")
	fi
	"$COLL" migrate --db "$uri" >/dev/null || return 1
	echo "$uri"
}

# count URI: records stored, by plain SQL
count() {
	case $1 in
	sqlite:*) sqlite3 "${1#sqlite:}" "SELECT count(*) FROM records" ;;
	*) psql -tAq "$1" -c "SELECT count(*) FROM records" ;;
	esac
}

# serve URI PORT: a collector in the background (CPID); 1 if it does not answer
serve() {
	"$COLL" serve --listen "127.0.0.1:$2" --db "$1" --tokens "$T/tokens" \
		${FLEET_SERVE_CONFIG:+--config "$FLEET_SERVE_CONFIG"} >>"$T/collector.log" 2>&1 &
	CPID=$!
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$2/healthz" >/dev/null && return 0
		kill -0 "$CPID" 2>/dev/null || break
		sleep 0.05
	done
	echo "collector did not start:"; tail -5 "$T/collector.log"; return 1
}

# monitor PID FILE: peak VmRSS (kB), threads and descriptors, and CPU time (user + system,
# clock ticks), every second, until killed
monitor() {
	local rss=0 thr=0 fds=0 cpu=0 r t f c
	while kill -0 "$1" 2>/dev/null; do
		r=$(awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null)
		t=$(awk '/^Threads/{print $2}' "/proc/$1/status" 2>/dev/null)
		f=$(ls "/proc/$1/fd" 2>/dev/null | wc -l)
		[ "${r:-0}" -gt "$rss" ] && rss=$r
		[ "${t:-0}" -gt "$thr" ] && thr=$t
		[ "${f:-0}" -gt "$fds" ] && fds=$f
		c=$(awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null)
		[ -n "$c" ] && cpu=$c
		echo "$rss $thr $fds $cpu" >"$2"
		sleep 1
	done
}

kv() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

: >"$T/rows"
for backend in sqlite postgresql; do
	[[ $BACKENDS == *" $backend "* ]] || continue
	[ "$backend" = postgresql ] && [ -z "$PG_OK" ] && continue
	for n in $NODES; do
		uri=$(fresh_db "$backend" "fleet$n") || { echo "FAIL: $backend database"; exit 1; }
		port=$(free_port)
		pg0=0
		[ "$backend" = postgresql ] && pg0=$(pg_cpu_ticks)
		serve "$uri" "$port" || exit 1
		monitor "$CPID" "$T/mon" &
		MPID=$!
		out=$(nice "$H" --url "http://127.0.0.1:$port" --nodes "$n" --seconds "$SECS" \
			2>>"$T/helper.log")
		sleep 1.2 # the monitor's last sample covers the drain
		kill "$MPID" 2>/dev/null; wait "$MPID" 2>/dev/null
		read -r rss thr fds cpu <"$T/mon"
		stop_collector
		pgcpu=0
		[ "$backend" = postgresql ] && pgcpu=$(($(pg_cpu_ticks) - pg0))
		stored=$(count "$uri")
		echo "$backend $n: $out collector_cpu_ticks=$cpu server_cpu_ticks=$pgcpu" >>"$T/raw"
		echo "$backend $n $(kv "$out" offered_rps) $(kv "$out" stored_rps) $(kv "$out" p50) \
$(kv "$out" p99) $(kv "$out" max) $rss $thr $fds $(kv "$out" s503) $(kv "$out" conn_err) \
$(kv "$out" generated) ${stored:-0} $cpu $pgcpu" >>"$T/rows"
	done
done

: >"$T/storm"
if [ "$STORM_N" -gt 0 ]; then
	for backend in sqlite postgresql; do
		[[ $BACKENDS == *" $backend "* ]] || continue
		[ "$backend" = postgresql ] && [ -z "$PG_OK" ] && continue
		uri=$(fresh_db "$backend" storm) || { echo "FAIL: $backend database"; exit 1; }
		port=$(free_port)
		serve "$uri" "$port" || exit 1
		# 20 s of uploads, the outage, 20 s more of new records while the fleet comes back
		nice "$H" --url "http://127.0.0.1:$port" --nodes "$STORM_N" \
			--seconds $((40 + OUTAGE)) >"$T/storm.out" 2>>"$T/helper.log" &
		HPID=$!
		sleep 20
		kill -9 "$CPID"; wait "$CPID" 2>/dev/null; CPID=
		sleep "$OUTAGE"
		serve "$uri" "$port" || exit 1
		kill -USR1 "$HPID"
		monitor "$CPID" "$T/mon" &
		MPID=$!
		pg0=0
		[ "$backend" = postgresql ] && pg0=$(pg_cpu_ticks)
		wait "$HPID"
		kill "$MPID" 2>/dev/null; wait "$MPID" 2>/dev/null
		read -r rss thr fds cpu <"$T/mon"
		stop_collector
		pgcpu=0
		[ "$backend" = postgresql ] && pgcpu=$(($(pg_cpu_ticks) - pg0))
		out=$(cat "$T/storm.out")
		stored=$(count "$uri")
		echo "$backend storm: $out" >>"$T/raw"
		echo "$backend $STORM_N $(kv "$out" drain_s) $(kv "$out" storm_posts) \
$(kv "$out" storm_503) $(kv "$out" storm_p50) $(kv "$out" storm_p99) $(kv "$out" storm_max) \
$rss $(kv "$out" generated) ${stored:-0} $(kv "$out" conn_err) $cpu $pgcpu" >>"$T/storm"
	done
fi

echo "fleet: $NODES nodes, $SECS s of uploads each (a task.end per node per 10 s, a task.sample per 30 s), loopback, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$T/raw"
python3 - "$T/rows" "$T/storm" "$OUTAGE" "$(getconf CLK_TCK)" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
storm = [l.split() for l in open(sys.argv[2]) if l.strip()]
bad = 0
hz = float(sys.argv[4])
print("%-10s %6s %9s %9s %8s %8s %8s %8s %7s %5s %5s %6s %8s %9s %8s  %s" % ("backend", "nodes",
      "offer r/s", "store r/s", "p50 ms", "p99 ms", "max ms", "RSS MiB", "threads", "fds",
      "503s", "connE", "lost", "CPU ms/1k", "PG ms/1k",
      "ratios to the first N: stored, p99, RSS, threads, CPU per record"))
for be in ("sqlite", "postgresql"):
    mine = [r for r in rows if r[0] == be]
    if not mine:
        continue
    base = [float(x) for x in mine[0][2:]]
    for r in mine:
        v = [float(x) for x in r[2:]]
        off, sto, p50, p99, mx, rss, thr, fds, s503, ce, made, cnt, cpu, pgcpu = v
        lost = made - cnt
        bad += lost != 0
        # collector CPU per 1,000 records stored (ms): start, uploads and drain
        cpr = cpu / hz * 1000 / (cnt / 1000) if cnt else 0
        bcpr = base[12] / hz * 1000 / (base[11] / 1000) if base[11] else 0
        # the PostgreSQL server's CPU per 1,000 records stored (ms), every process of it
        pgr = pgcpu / hz * 1000 / (cnt / 1000) if cnt else 0
        q = lambda i: v[i] / base[i] if base[i] else float("nan")
        print("%-10s %6s %9.0f %9.0f %8.1f %8.1f %8.1f %8.1f %7.0f %5.0f %5.0f %6.0f %8.0f %9.0f "
              "%8.0f  %.1f, %.2f, %.2f, %.2f, %.2f%s" % (be, r[1], off, sto, p50, p99, mx,
              rss / 1024, thr, fds, s503, ce, lost, cpr, pgr, q(1), q(3), q(5), q(6),
              cpr / bcpr if bcpr else float("nan"), "" if p99 < 1000 else "  (p99 over 1 s)"))
if storm:
    print("reconnect storm after a %s s outage (collector killed -9, started again):" % sys.argv[3])
    print("%-10s %6s %9s %8s %6s %8s %8s %8s %8s %8s %10s %9s" % ("backend", "nodes",
          "drain s", "POSTs", "503s", "p50 ms", "p99 ms", "max ms", "RSS MiB", "lost",
          "coll CPU s", "PG CPU s"))
    for s in storm:
        be, n, drain, posts, s503, p50, p99, mx, rss, made, cnt, ce, cpu, pgcpu = s
        lost = float(made) - float(cnt)
        bad += lost != 0
        print("%-10s %6s %9s %8s %6s %8s %8s %8s %8.1f %8.0f %10.1f %9.1f" % (be, n, drain,
              posts, s503, p50, p99, mx, float(rss) / 1024, lost, float(cpu) / hz,
              float(pgcpu) / hz))
sys.exit(1 if bad else 0)
PY
