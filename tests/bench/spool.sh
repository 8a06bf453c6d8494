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

# Compressed entries ([spool] compress, the agent's default) against plain ones, the same
# realistic record (a task.sample line of the dictionary's shape with other values) in the
# same run: the CPU zstd adds per record, and the bytes it saves.
REC=$D/record.json
python3 - "$REC" <<'PY'
import json, sys
r = json.loads(open("accounting/spool_dict_v1.ndjson").read().splitlines()[-1])
r["record_id"] = "node-17/9f3e2a11-4c1/123456"
r["time"] = "2026-12-07T13:14:15.161718Z"
r["node"] = "node-17"
r["task"]["id"] = "t-7a1b2c3d-42"
r["usage"] = {k: (v * 7 + 12345 if isinstance(v, int) else v * 3.7) for k, v in r["usage"].items()}
open(sys.argv[1], "w").write(json.dumps(r, separators=(",", ":")))
PY
RSIZE=$(stat -c %s "$REC")
echo
echo "compressed vs plain spool entries, record of $RSIZE bytes (a task.sample):"
printf '%-8s %16s %16s %10s\n' batch zstd_us/rec plain_us/rec ratio
for spec in 1:200 100:5000; do
	b=${spec%%:*} n=${spec##*:}
	z=$(SPOOL_BENCH_RECORD=$REC SPOOL_BENCH_COMPRESS=1 "$H" "$D/z" "$b" "$n" "$RSIZE" 5) || exit 1
	p=$(SPOOL_BENCH_RECORD=$REC "$H" "$D/p" "$b" "$n" "$RSIZE" 5) || exit 1
	zs=$(echo "$z" | sed -E 's/.*spool_us_per_rec=([0-9.]+).*/\1/')
	ps=$(echo "$p" | sed -E 's/.*spool_us_per_rec=([0-9.]+).*/\1/')
	printf '%-8s %16s %16s %10s\n' "$b" "$zs" "$ps" "$(python3 -c "print('%.3f' % ($zs / $ps))")"
done
