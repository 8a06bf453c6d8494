#!/bin/bash
# Launch figures of two builds side by side: LAUNCH_AB_BASE=DIR names another build's output
# directory (say of an older commit: git worktree add /tmp/base REV && make -C /tmp/base),
# compared with this build. The rounds alternate, so both builds see the same host. Per round
# and build: API launch-to-exit median of LAUNCH_AB_N launches of /bin/true, then sustained
# launches/s with 8 in flight. Each build runs as it would on a node: the state directory
# (spool, fsync'd) on disk, and for builds that have it the runtime directory on a tmpfs
# (/dev/shm stands in for /run/corral).
# LAUNCH_AB_GPU=1: both agents run as on a node with 2 GPUs (this build's stand-in NVML), so
# every task gets the GPU device policy.
# Without LAUNCH_AB_BASE it skips (make bench runs it that way).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
BASE=${LAUNCH_AB_BASE:-}
N=${LAUNCH_AB_N:-300}
R=${LAUNCH_AB_ROUNDS:-3}
[ -n "$BASE" ] || { echo "SKIP: set LAUNCH_AB_BASE to another build's output directory"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -x "$BASE/corrald" ] || { echo "no $BASE/corrald"; exit 1; }
if [ "${LAUNCH_AB_GPU:-0}" = 1 ]; then
	export CORRAL_NVML_LIBRARY=$O/tests/gpu/libnvidia-ml.so.1
	export CORRAL_FAKE_NVML=$PWD/tests/integration/fixtures/nvml-2gpu.txt
fi
H=$O/tests/bench/helper_launch_bench
SUB=corral-bench-ab-$$
D=""
RT=""
A=""
cleanup() {
	[ -n "$A" ] && { kill "$A" 2>/dev/null; wait "$A" 2>/dev/null; }
	for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	[ -n "$D" ] && rm -rf "$D"
	[ -n "$RT" ] && rm -rf "$RT"
}
trap cleanup EXIT
# one BUILD_DIR TAG: prints "TAG median_us launches_per_s"
one() {
	local rt=()

	D=$(mktemp -d)
	if "$1/corrald" --help 2>&1 | grep -q -- --runtime-dir; then
		RT=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
		rt=(--runtime-dir "$RT")
	fi
	"$1/corrald" --socket "$D/s" --state-dir "$D/state" "${rt[@]}" \
		--cgroup-subtree "$SUB" --node bench --log-level warning >"$D/log" 2>&1 &
	A=$!
	for _ in $(seq 100); do [ -S "$D/s" ] && break; sleep 0.05; done
	lat=$($H "$N" api "$D/s" | sed -n 's/.*median_us=\([0-9]*\).*/\1/p')
	tput=$($H $((N * 2)) throughput "$D/s" 8 | sed -n 's/.*launches_per_s=\([0-9]*\).*/\1/p')
	[ -n "$lat" ] && [ -n "$tput" ] || { echo "$2: benchmark failed"; cat "$D/log"; exit 1; }
	echo "$2 $lat $tput"
	cleanup
	A=""
	D=""
	RT=""
}
rows=$(for r in $(seq "$R"); do
	if [ $((r % 2)) = 1 ]; then one "$BASE" base; one "$O" this; else one "$O" this; one "$BASE" base; fi
done) || { echo "$rows"; exit 1; }
echo "$rows"
echo "$rows" | python3 -c '
import sys, statistics as st
v = {"base": [], "this": []}
for l in sys.stdin:
    t, lat, tput = l.split()
    v[t].append((int(lat), int(tput)))
b, n = v["base"], v["this"]
bl, nl = st.median(x[0] for x in b), st.median(x[0] for x in n)
bt, nt = st.median(x[1] for x in b), st.median(x[1] for x in n)
print()
print("%-34s %10s %10s %8s" % ("median over %d alternating rounds" % len(b), "base", "this", "ratio"))
print("%-34s %10.0f %10.0f %8.2f" % ("API launch median (us)", bl, nl, nl / bl))
print("%-34s %10.0f %10.0f %8.2f" % ("launches/s, 8 in flight", bt, nt, nt / bt))
'
