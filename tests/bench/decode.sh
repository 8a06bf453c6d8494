#!/bin/bash
# Record decoder cost per record (the collector's ingest CPU is mostly decoding): the full
# strict decode versus building jansson's tree of the same lines, one run, as a ratio.
# BENCH_DECODE_RECORDS (default 20000) task.end records of ~1 KiB.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
for b in "$O/tests/bench/helper_decode_bench" "$O/tests/bench/helper_ingest_load"; do
	[ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }
done
T=$(mktemp /tmp/bench_decode.XXXXXX)
trap 'rm -f "$T"' EXIT
"$O/tests/bench/helper_ingest_load" gen --node bench --count "${BENCH_DECODE_RECORDS:-20000}" > "$T" || exit 1
exec "$O/tests/bench/helper_decode_bench" "$T" "${BENCH_DECODE_ROUNDS:-5}"
