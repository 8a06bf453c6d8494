#!/bin/bash
# make demo: the main job end to end on this machine. Starts corral-collector on SQLite,
# starts corrald pointing at it, runs sample tasks under limits, prints what the collector
# stored, then the showback report of the demo's tasks (table) and its HTML version, written to
# a path it names and kept (CORRAL_DEMO_REPORT, default .output/demo/showback.html). Everything
# else lives in a temporary directory and is removed at the end.
set -u
cd "$(dirname "$0")/.."
O=${CORRAL_O:-$PWD/.output}
if [ "$(id -u)" != 0 ]; then
	echo "make demo needs root (it creates cgroups and switches users): sudo make demo" >&2
	exit 1
fi
D=$(mktemp -d /tmp/corral-demo.XXXXXX)
chmod 755 "$D"
PORT=$((20000 + RANDOM % 20000))
SUB=corral-demo-$$
cleanup() {
	[ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
	[ -n "${COLL:-}" ] && kill "$COLL" 2>/dev/null && wait "$COLL" 2>/dev/null
	for h in /sys/fs/cgroup/*/"$SUB" /sys/fs/cgroup/unified/"$SUB"; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	rm -rf "$D"
}
trap cleanup EXIT

TOKEN=demo-node-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
READER=demo-reader-token-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
printf 'node demo-node %s\nreader demo %s\n' "$TOKEN" "$READER" >"$D/tokens"
chmod 600 "$D/tokens"
printf '%s\n' "$TOKEN" >"$D/node.token"
chmod 600 "$D/node.token"

echo "== starting corral-collector (SQLite) on 127.0.0.1:$PORT"
"$O/corral-collector" serve --listen 127.0.0.1:$PORT --db "sqlite:$D/records.db" \
	--tokens "$D/tokens" >"$D/collector.log" 2>&1 &
COLL=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

echo "== starting corrald (node demo-node)"
"$O/corrald" --node demo-node --socket "$D/corrald.sock" --state-dir "$D/state" \
	--cgroup-subtree "$SUB" --collector-url "http://127.0.0.1:$PORT" \
	--token-file "$D/node.token" --sample-interval 1s --kill-grace 2s >"$D/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 100); do [ -S "$D/corrald.sock" ] && break; sleep 0.05; done
ctl() { "$O/corralctl" --socket "$D/corrald.sock" "$@"; }
ctl status

run() {
	echo
	echo "\$ corralctl run --wait $*"
	ctl run --wait "$@"
	echo "  -> exit code $?"
}
run --account physics --job sim-1 --label project=demo --cpus 0.5 --memory 256M -- \
	python3 -c 'import time; t=time.time()
while time.time()-t < 2: pass'
run --account physics --job hog --memory 64M -- python3 -c 'x = b"x" * (512 << 20)'
run --account chem --job sleeper --time 1 -- sleep 30
run --account chem --job forky --pids 16 --time 2 -- bash -c 'for i in $(seq 64); do sleep 5 & done; wait'
run --account chem --job nope -- /no/such/program
run --account bio --job sandbox --seccomp strict -- python3 -c 'import ctypes; ctypes.CDLL(None).mount(b"x",b"/mnt",b"tmpfs",0,None)'
run --account bio --job ok --label project=demo -- sh -c 'echo hello from a task >/dev/null; exit 0'

# Wait until every record is acked by the collector (spool empty), bounded.
for _ in $(seq 100); do
	n=$("$O/corral-collector" dump --db "sqlite:$D/records.db" --type task.end --format json 2>/dev/null | grep -c '"record_id"')
	[ "${n:-0}" -ge 7 ] && break
	sleep 0.2
done
echo
echo "== what the collector stored (task.end records)"
"$O/corral-collector" dump --db "sqlite:$D/records.db" --type task.end --format table
echo
echo "== record counts by type"
sqlite3 "$D/records.db" 'SELECT type, count(*) FROM records GROUP BY type ORDER BY type;' 2>/dev/null
echo
echo "== one record in full (schema corral.record/v1)"
"$O/corral-collector" dump --db "sqlite:$D/records.db" --type task.end --format json --limit 1
echo
echo "== showback report of these tasks (corral-collector report --by account,job; demo prices:"
echo "   100,000x a cloud's, so that seconds-long tasks cost cents)"
cat >"$D/prices.ini" <<'INI'
# demo price sheet: 100,000 times a cloud's prices, so that tasks of a few seconds cost
# cents (a real sheet: cpu_core_hour = 0.031, memory_gib_hour = 0.0043, ...)
[prices]
currency = EUR
cpu_core_hour = 3100
memory_gib_hour = 430
gpu_hour = 170000
io_read_gib = 110
io_write_gib = 230
net_gib = 1300
INI
FROM=$(date -u -d yesterday +%F)
TO=$(date -u -d tomorrow +%F)
"$O/corral-collector" report --db "sqlite:$D/records.db" --prices "$D/prices.ini" \
	--from "$FROM" --to "$TO" --by account,job --format table
HTML=${CORRAL_DEMO_REPORT:-$O/demo/showback.html}
mkdir -p "$(dirname "$HTML")"
if "$O/corral-collector" report --db "sqlite:$D/records.db" --prices "$D/prices.ini" \
	--from "$FROM" --to "$TO" --by account --period day --format html >"$HTML"; then
	echo
	echo "== HTML report (kept after the demo): $(realpath "$HTML")"
	echo "   open it in a browser, or: corral-collector report --db ... --format html"
fi
