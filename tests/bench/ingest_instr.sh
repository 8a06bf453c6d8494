#!/bin/bash
# Collector CPU instructions per ingested record (valgrind's callgrind, every thread of
# `corral-collector serve` from its start to its exit after SIGTERM), one uploading
# connection, BENCH_RECORDS (default 5000) task.end records in batches of 500.
# INGEST_INSTR_BACKEND: sqlite (default) or postgresql (a server of the test's own, a fresh
# database per run, one database connection; the server's own instructions are not counted,
# only the collector's: its decode, deltas, COPY data, libpq and its share of the folds).
# INGEST_INSTR_TOP=N: the N functions of this build with the most inclusive instructions per
# record (without a base too); INGEST_INSTR_KEEP=FILE keeps that profile (callgrind_annotate
# FILE). Instruction
# counts do not depend on the host's load, so two builds can be compared on a busy host:
# INGEST_AB_BASE=DIR (another build's output directory, as for ingest_ab.sh) adds that build's
# figure and the ratio this / base; INGEST_INSTR_PROFILE=N then lists the N functions that
# differ most. Skips without valgrind.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
N=${BENCH_RECORDS:-5000}
BASE=${INGEST_AB_BASE:-}
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
BACKEND=${INGEST_INSTR_BACKEND:-sqlite}
case $BACKEND in sqlite|postgresql) ;; *) echo "INGEST_INSTR_BACKEND: sqlite or postgresql"; exit 1 ;; esac
coll_init bench_ingest_instr "$LOAD"
coll_tokens bench
if [ "$BACKEND" = postgresql ]; then
	pg_start
	case $? in
	0) ;;
	1) echo "SKIP: no PostgreSQL server binaries in $PGBIN"; exit 77 ;;
	*) echo "FAIL: PostgreSQL did not start"; exit 1 ;;
	esac
fi
# fresh_db -> the URI of an empty, migrated database of BACKEND (by this run's collector)
fresh_db() {
	local o=$1 db name
	if [ "$BACKEND" = postgresql ]; then
		name=i$(date +%s%N) # each run its own (this runs in a subshell: no counter)
		su postgres -s /bin/sh -c "$PGBIN/createdb -h $T/pg -p $PGPORT $name" || return 1
		db=$(pg_uri "$name")
	else
		rm -f "$T/i.db"*
		db=sqlite:$T/i.db
	fi
	"$o/corral-collector" migrate --db "$db" >/dev/null || return 1
	echo "$db"
}

# instructions BUILD_DIR -> the collector's instructions for N records (one line)
instructions() {
	local o=$1 port out pid db args=()
	port=$(free_port)
	db=$(fresh_db "$o") || return 1
	[ "$BACKEND" = postgresql ] && args=(--db-connections 1)
	valgrind --tool=callgrind --callgrind-out-file="${2:-/dev/null}" \
		"$o/corral-collector" serve --listen "127.0.0.1:$port" --db "$db" \
		--tokens "$T/tokens" "${args[@]}" >/dev/null 2>"$T/vg" &
	pid=$!
	PIDS+=("$pid")
	for _ in $(seq 1200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
	out=$("$o/tests/bench/helper_ingest_load" post --url "http://127.0.0.1:$port/v1/records" \
		--token "$(node_token bench)" --node bench --count "$N" --batch 500 --connections 1) ||
		{ echo "post failed: $out" >&2; return 1; }
	kill -TERM "$pid"
	wait "$pid" 2>/dev/null
	echo "$out" | grep -q "accepted=$N " || { echo "not all accepted: $out" >&2; return 1; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$T/vg" | head -1
}

# INGEST_INSTR_PROFILE=N (with a base): the N functions whose instructions per record differ
# most between the builds (tests/bench/callgrind_diff.py)
P=
[ -n "${INGEST_INSTR_PROFILE:-}" ] && [ -n "$BASE" ] && P=$T/cg
[ -n "${INGEST_INSTR_TOP:-}" ] && P=$T/cg
this=$(instructions "$O" ${P:+$P-this.out}) || { echo "FAIL: this build"; exit 1; }
[ -n "${INGEST_INSTR_KEEP:-}" ] && [ -n "$P" ] && cp "$P-this.out" "$INGEST_INSTR_KEEP"
echo "ingest_instr: $N records, $BACKEND, 1 connection, collector instructions (callgrind)"
printf '%-6s %14s %12s\n' build instructions per_record
printf '%-6s %14s %12.0f\n' this "$this" "$(echo "$this / $N" | bc -l)"
if [ -n "$BASE" ]; then
	base=$(instructions "$BASE" ${P:+$P-base.out}) || { echo "FAIL: base build"; exit 1; }
	printf '%-6s %14s %12.0f\n' base "$base" "$(echo "$base / $N" | bc -l)"
	printf 'ratio this/base: %.3f\n' "$(echo "$this / $base" | bc -l)"
fi
if [ -n "${INGEST_INSTR_TOP:-}" ]; then
	echo "this build's functions by inclusive instructions per record (this, function):"
	python3 tests/bench/callgrind_diff.py --top "$P-this.out" "$N" "$INGEST_INSTR_TOP"
fi
if [ -n "$P" ] && [ -n "${INGEST_INSTR_PROFILE:-}" ] && [ -n "$BASE" ]; then
	echo "largest differences per record, inclusive (this - base, this, base, function):"
	python3 tests/bench/callgrind_diff.py "$P-this.out" "$P-base.out" "$N" "$INGEST_INSTR_PROFILE"
fi
