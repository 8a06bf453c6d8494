#!/bin/bash
# Spool append+fsync cost per record for batches of 1, 10, 100 and 500 records (one
# spool_append_many, i.e. one fdatasync, per batch), side by side with a baseline of plain
# write() + fdatasync() of the same framed bytes to one file, batch by batch alternating with
# the spool in the same run (median of 5 rounds). Record size 600 bytes (a task.end line).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
H=$O/tests/bench/helper_spool_bench
[ -x "$H" ] || { echo "missing $H (make helpers)"; exit 1; }
D=$(mktemp -d "${SPOOL_BENCH_DIR:-$O}/spool-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
SIZE=${SPOOL_BENCH_SIZE:-600}
out=""
for spec in 1:200 10:1000 100:5000 500:10000; do
	b=${spec%%:*} n=${spec##*:}
	line=$("$H" "$D" "$b" "$n" "$SIZE" 5) || { echo "benchmark failed"; exit 1; }
	out+="$line"$'\n'
done
echo "filesystem: $(stat -f -c %T "$D"), record size $SIZE bytes"
printf '%-8s %16s %16s %10s\n' batch spool_us/rec baseline_us/rec ratio
echo -n "$out" | sed -E 's/batch=([0-9]+) .*spool_us_per_rec=([0-9.]+) base_us_per_rec=([0-9.]+) ratio=([0-9.]+)/\1 \2 \3 \4/' |
	while read -r b s p r; do printf '%-8s %16s %16s %10s\n' "$b" "$s" "$p" "$r"; done
