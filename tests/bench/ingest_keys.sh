#!/bin/bash
# The rollup rows PostgreSQL's folds write per ingested record, counted without a database
# (helper_ingest_load keys: each fold's deltas built and merged as ingest and the fold do):
# for ingest.sh's records (one node, one job; 50,000 in folds of 12,500: ingest_profile.sh
# counted 4 folds of 50,000 records at the 1 s fold delay, and 10,740 rows upserted by them,
# which the count here should match; and in folds of 500, one batch each) and for a fleet's (KEYS_FLEET nodes, default 10,000, each
# ending a task every 10 s: folds of 1,000 records are 1 s of the fleet, 10,000 are 10 s,
# 60,000 a minute). Counts, not times: the host's load does not move them.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
H=$O/tests/bench/helper_ingest_load
F=${KEYS_FLEET:-10000}
[ -x "$H" ] || { echo "FAIL: $H not built"; exit 1; }
"$H" keys --count 50000 --window 12500 || exit 1
last() { tail -1 | awk -v w="$1" '{ printf "%-22s %16s %12s %16s\n", "all, folds of " w, $2, $3, $4 }'; }
"$H" keys --count 50000 --window 500 | last 500
for w in 1000 10000 60000; do
	"$H" keys --count $((F * 24)) --window "$w" --fleet "$F" > "${TMPDIR:-/tmp}/keys.$$" || exit 1
	if [ "$w" = 1000 ]; then cat "${TMPDIR:-/tmp}/keys.$$"; else
		last "$w" < "${TMPDIR:-/tmp}/keys.$$"; fi
done
rm -f "${TMPDIR:-/tmp}/keys.$$"
