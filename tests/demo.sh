#!/bin/bash
# make demo: the main job end to end on this machine. Starts corral-collector on SQLite,
# starts corrald pointing at it, runs sample tasks under limits, prints what the collector
# stored. Everything lives in a temporary directory and is removed at the end.
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
