#!/bin/bash
# Collector ingest of two builds side by side: INGEST_AB_BASE=DIR names another build's output
# directory (say of an older commit: git worktree add /tmp/base REV && make -C /tmp/base),
# compared with this build. Rounds of tests/bench/ingest.sh alternate between the builds
# (INGEST_AB_ROUNDS, default 3), so both see the same host; medians per backend and column.
# Without INGEST_AB_BASE it skips (make bench runs it that way).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
BASE=${INGEST_AB_BASE:-}
R=${INGEST_AB_ROUNDS:-3}
[ -n "$BASE" ] || { echo "SKIP: set INGEST_AB_BASE to another build's output directory"; exit 77; }
[ -x "$BASE/corral-collector" ] || { echo "no $BASE/corral-collector"; exit 1; }
T=$(mktemp)
trap 'rm -f "$T" "$T.pg"' EXIT
for r in $(seq "$R"); do
	for b in "$BASE" "$O"; do
		tag=this; [ "$b" = "$BASE" ] && tag=base
		BENCH_ROUNDS=1 CORRAL_O=$b bash tests/bench/ingest.sh > "$T.out" 2>&1 ||
			{ cat "$T.out"; echo "ingest.sh failed for $b"; rm -f "$T.out"; exit 1; }
		awk -v tag="$tag" '$1 == "sqlite" { print tag, $1, $3, $4, $5, $7 }' \
			"$T.out" >> "$T"
		# PostgreSQL: ingest.sh's own alternation against psql \copy; kept per round: the
		# rate ratio to \copy and the collector's plus the server's CPU per 1,000 records
		sed -n 's/^\(with\|without\) rollups: rate ratio median \([0-9.]*\) .*medians: collector \([0-9.]*\) + server \([0-9.]*\) = .*/\1 \2 \3 \4/p' \
			"$T.out" | awk -v tag="$tag" '{ print tag, "pg-" $1, $2, $3, $4 }' >> "$T.pg"
		rm -f "$T.out"
	done
done
python3 - "$T" "$R" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    tag, be, *v = line.split()
    rows.setdefault((tag, be), []).append(list(map(float, v)))
print("ingest_ab: %s alternating rounds, medians, records/s (this build vs base)" % sys.argv[2])
print("%-11s %-14s %10s %10s %7s" % ("backend", "column", "this", "base", "ratio"))
for be in ("sqlite", "postgresql"):
    if (be, "this") not in [(b, t) for (t, b) in rows]:
        continue
    for i, col in enumerate(("direct", "coll 1 conn", "coll N conns", "no-rollup")):
        a = statistics.median(r[i] for r in rows[("this", be)])
        b = statistics.median(r[i] for r in rows[("base", be)])
        print("%-11s %-14s %10.0f %10.0f %7.2f" % (be, col, a, b, a / b if b else 0))
PY
[ -s "$T.pg" ] || exit 0
python3 - "$T.pg" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    tag, kind, *v = line.split()
    rows.setdefault((tag, kind), []).append(list(map(float, v)))
print("postgresql (each build against psql \\copy in its own rounds), medians:")
print("%-16s %-26s %10s %10s %7s" % ("run", "column", "this", "base", "ratio"))
for kind, name in (("pg-with", "rollups"), ("pg-without", "no rollups")):
    if ("this", kind) not in rows or ("base", kind) not in rows:
        continue
    for i, col in enumerate(("rate / psql \\copy", "collector CPU ms/1k rec", "server CPU ms/1k rec")):
        a = statistics.median(r[i] for r in rows[("this", kind)])
        b = statistics.median(r[i] for r in rows[("base", kind)])
        print("%-16s %-26s %10.2f %10.2f %7.2f" % (name, col, a, b, a / b if b else 0))
    for tag in ("this", "base"):
        print("%-16s %s rate / psql \\copy by round: %s" % (name, tag,
              " ".join("%.2f" % r[0] for r in rows[(tag, kind)])))
PY
