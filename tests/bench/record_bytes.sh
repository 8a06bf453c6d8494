#!/bin/bash
# Compact records: bytes per record kind as JSON (what the spool held and the wire carried
# before compression) and as stored (one zstd frame against the built-in dictionary), and the
# batch on the wire (NDJSON vs Content-Encoding: zstd), and per kind on the wire: NDJSON bytes per
# record before compression, after it (zstd level 3, no dictionary, as the uploader sends a
# body) in a batch of that kind alone, and what the kind adds to the mixed batch compressed (the
# batch's size less the batch without that kind's records, per record); then the upload rate of the same spooled
# records over a constrained link (a veth pair into a network namespace this script makes, tc
# tbf at RECORD_BYTES_RATE, default 2mbit, on the way to the collector), compression off and on
# in the same run. Sizes are read from outside the agent (tests/integration/spool_frames.py);
# the rate from the rows the collector stored (plain SQL) over wall time.
#   RECORD_BYTES_TASKS  tasks of the upload run (default 600: 1,200 task records + audit)
#   RECORD_BYTES_KIND_TASKS  tasks of the record-kind run (default 4; each requests 0.05 CPU)
set -u
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
O=${CORRAL_O:-$PWD/.output}
H=$O/tests/bench/helper_launch_bench
NTASKS=${RECORD_BYTES_TASKS:-600}
KTASKS=${RECORD_BYTES_KIND_TASKS:-4}
RATE=${RECORD_BYTES_RATE:-2mbit}
T=$(mktemp -d /tmp/corral-rb.XXXXXX)
NS=crb$$
SUB=corral-rb-$$
TOKEN=rb-node-token-0123456789abcdef
printf 'node rb-node %s\n' "$TOKEN" >"$T/tokens"
chmod 600 "$T/tokens"
echo "$TOKEN" >"$T/token"
chmod 600 "$T/token"
APID= CPID=
cleanup() {
	[ -n "$APID" ] && kill "$APID" 2>/dev/null && wait "$APID" 2>/dev/null
	[ -n "$CPID" ] && kill "$CPID" 2>/dev/null && wait "$CPID" 2>/dev/null
	ip netns del "$NS" 2>/dev/null
	ip link del "v$NS" 2>/dev/null
	for h in /sys/fs/cgroup/*/"$SUB"; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	rm -rf "$T"
}
trap cleanup EXIT
agent() { # STATE URL [args]
	local st=$1 url=$2
	shift 2
	"$O/corrald" --socket "$T/sock" --state-dir "$st" --cgroup-subtree "$SUB" --node rb-node \
		--collector-url "$url" --token-file "$T/token" "$@" >>"$T/agent.log" 2>&1 &
	APID=$!
	for _ in $(seq 200); do [ -S "$T/sock" ] && "$O/corralctl" --socket "$T/sock" status >/dev/null 2>&1 && return 0; sleep 0.05; done
	echo "agent did not start"; tail "$T/agent.log"; exit 1
}
stop_agent() { kill "$APID" 2>/dev/null; wait "$APID" 2>/dev/null; APID=; rm -f "$T/sock"; }
ctl() { "$O/corralctl" --socket "$T/sock" "$@"; }

# --- 1. every record kind, from a real agent (eBPF and audit on) -----------------------------
printf '[agent]\nsample_interval = 1s\n' >"$T/kinds.conf"
agent "$T/kinds" http://127.0.0.1:9 --config "$T/kinds.conf"
for i in $(seq "$KTASKS"); do
	ctl run --memory 256M --cpus 0.05 --label team=ml --label run=$i -- sh -c \
		'for i in 1 2 3; do /bin/true; done; python3 -c "import socket; socket.socket().connect_ex((\"127.0.0.1\", 9))"; sleep 3.5' >/dev/null
done
ctl run --wait --time 1 -- sleep 30 >/dev/null 2>&1
sleep 4.5
stop_agent
python3 - "$T"/kinds/spool/seg-*.log <<'PY'
import collections, ctypes, ctypes.util, json, sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames, record
z = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
z.ZSTD_compress.restype = ctypes.c_size_t
z.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                            ctypes.c_int]
kinds = collections.defaultdict(lambda: [0, 0, 0])
ndjson = b""
lines = []
for p in sys.argv[1:]:
    for fr in frames(p):
        r = record(p, fr[0])
        t = json.loads(r)["type"]
        k = kinds[t]
        k[0] += 1
        k[1] += len(r)
        k[2] += fr[3]
        ndjson += r + b"\n"
        lines.append((t, r + b"\n"))
def zstd(b):  # the uploader's body coding: one frame, level 3, no dictionary
    out = ctypes.create_string_buffer(len(b) + 4096)
    return z.ZSTD_compress(out, len(out), b, len(b), 3)
wire = zstd(ndjson)
print("%-14s %6s %12s %14s %8s" % ("kind", "count", "json_bytes", "stored_bytes", "ratio"))
tr = ts = 0
for t in sorted(kinds):
    n, raw, st = kinds[t]
    tr += raw
    ts += st
    print("%-14s %6d %12d %14d %8.2f" % (t, n, raw // n, st // n, raw / st))
print("%-14s %6d %12d %14d %8.2f" % ("all (spool)", sum(k[0] for k in kinds.values()), tr, ts, tr / ts))
print("%-14s %6s %12d %14d %8.2f" % ("batch (wire)", "", len(ndjson), wire, len(ndjson) / wire))
print()
print("on the wire, bytes per record (NDJSON; zstd of a batch of the kind alone; what the kind")
print("adds to the mixed batch of %d records compressed, %d bytes):" % (len(lines), wire))
print("%-14s %6s %10s %10s %8s %10s %8s" % ("kind", "count", "ndjson", "zstd_alone", "ratio",
                                           "zstd_mixed", "ratio"))
for t in sorted(kinds):
    mine = b"".join(l for k, l in lines if k == t)
    rest = b"".join(l for k, l in lines if k != t)
    n = kinds[t][0]
    alone = zstd(mine) / n
    mixed = (wire - (zstd(rest) if rest else 0)) / n
    print("%-14s %6d %10.0f %10.1f %8.2f %10.1f %8.2f" % (t, n, len(mine) / n, alone,
          len(mine) / n / alone, mixed, len(mine) / n / mixed if mixed > 0 else 0))
s = kinds.get("task.sample")
if s:
    h = 1000 * 120 * 3600 // 3600
    print("1,000 tasks, 30 s samples, one hour: task.sample spool %.1f MB as JSON, %.1f MB stored"
          % (h * s[1] / s[0] / 1e6, h * s[2] / s[0] / 1e6))
PY

# --- 2. upload rate over a constrained link ---------------------------------------------------
ip netns add "$NS" || { echo "SKIP: cannot make a network namespace"; exit 77; }
ip link add "v$NS" type veth peer name "p$NS" || exit 1
ip link set "p$NS" netns "$NS"
ip addr add 10.213.7.1/30 dev "v$NS"
ip link set "v$NS" up
ip netns exec "$NS" ip addr add 10.213.7.2/30 dev "p$NS"
ip netns exec "$NS" ip link set "p$NS" up
ip netns exec "$NS" ip link set lo up
tc qdisc add dev "v$NS" root tbf rate "$RATE" burst 16kb latency 200ms || exit 1
PORT=$((20000 + RANDOM % 20000))
printf '[collector]\nbatch_records = 200\nbatch_delay = 100ms\n' >"$T/up.conf"
agent "$T/fill" http://10.213.7.2:$PORT --config "$T/up.conf" --no-bpf
"$H" "$NTASKS" throughput "$T/sock" 8 >/dev/null || { echo "launching failed"; exit 1; }
stop_agent
echo
echo "upload of the same spool over $RATE (tbf), $NTASKS tasks:"
printf '%-8s %8s %10s %12s %12s\n' compress records seconds records_s wire_bytes
for arm in none zstd; do
	rm -rf "$T/st-$arm" "$T/db-$arm"*
	cp -a "$T/fill" "$T/st-$arm"
	ip netns exec "$NS" "$O/corral-collector" serve --listen 10.213.7.2:$PORT \
		--db "sqlite:$T/db-$arm" --tokens "$T/tokens" >>"$T/collector.log" 2>&1 &
	CPID=$!
	for _ in $(seq 100); do ip netns exec "$NS" curl -fs "http://10.213.7.2:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
	want=$(python3 -c '
import sys
sys.path.insert(0, "tests/integration")
from spool_frames import frames
print(sum(len(list(frames(p))) for p in sys.argv[1:]))' "$T/st-$arm"/spool/seg-*.log)
	tx0=$(cat /sys/class/net/v$NS/statistics/tx_bytes)
	printf '[collector]\nbatch_records = 200\nbatch_delay = 100ms\ncompress = %s\n' "$arm" >"$T/arm.conf"
	t0=$(date +%s.%N)
	agent "$T/st-$arm" http://10.213.7.2:$PORT --config "$T/arm.conf" --no-bpf
	n=0
	for _ in $(seq 1200); do
		n=$(sqlite3 "$T/db-$arm" 'SELECT count(*) FROM records' 2>/dev/null || echo 0)
		[ "${n:-0}" -ge "$want" ] && break
		sleep 0.1
	done
	t1=$(date +%s.%N)
	tx=$(($(cat /sys/class/net/v$NS/statistics/tx_bytes) - tx0))
	stop_agent
	kill "$CPID"; wait "$CPID" 2>/dev/null; CPID=
	python3 -c "import sys; n,w,t0,t1,tx,a=sys.argv[1:]; d=float(t1)-float(t0); print('%-8s %8s %10.2f %12.0f %12s' % (a, n, d, int(n)/d, tx))" \
		"$n" "$want" "$t0" "$t1" "$tx" "$arm" | tee -a "$T/rates"
	# (the agent's own node.sample records of this run may add to the spool's)
	[ "$n" -ge "$want" ] || { echo "only $n of $want records stored"; exit 1; }
done
python3 -c '
import sys
r = [l.split() for l in open(sys.argv[1])]
print("ratio zstd/none: records/s %.2f, bytes on the link %.3f" % (float(r[1][3]) / float(r[0][3]), int(r[1][4]) / int(r[0][4])))' "$T/rates"
