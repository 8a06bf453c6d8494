#!/bin/bash
# Launch-to-exit latency of /bin/true: bare fork+exec (baseline), bwrap, the agent's API and
# corralctl run --wait; plus sustained launches per second through the API; and the API latency
# on a node with GPUs (2 GPUs from the stand-in NVML of the test tree: every task, with or
# without GPUs, gets the GPU device policy on its cgroup, as on a real GPU node).
# LAUNCH_ROUNDS (default 3): the whole set is measured that many times in a row and the table
# shows the medians over the rounds (each round's own median and p99, then their medians), with
# each round's overhead and rate listed below it; the targets are judged on the medians.
#
# LAUNCH_BASE=DIR (another build's output directory, say of an older commit: git worktree add
# --detach /tmp/base REV && make -C /tmp/base -j2 all; then DIR=/tmp/base/.output): an A/B run
# instead. Each of LAUNCH_ROUNDS rounds measures bare fork+exec once, then each build in turn
# (the order alternating from round to round, so both see the same host): its agent started
# as on a node (state directory on disk, the runtime directory on a tmpfs where the build has
# it), LAUNCH_N API launches of /bin/true one after the other, then 2 x LAUNCH_N with 8 in
# flight; the agent's CPU time per API launch (all its threads, from /proc) beside the wall time.
# It prints the medians over the rounds, the ratios this / base and each round's
# ratios (how far the host moved them). LAUNCH_GPU=1: both agents as on a node with 2 GPUs
# (this build's stand-in NVML). LAUNCH_SPOOL_COMPRESS=no: the spool's zstd frames off
# ([spool] compress = false) in every build that has them (a build that does not know the key
# has none), so that what the frames cost is out of the comparison.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
N=${LAUNCH_N:-500}
NGAP=${LAUNCH_GAP_N:-40}
R=${LAUNCH_ROUNDS:-3}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
A=; D=$(mktemp -d); SUB=corral-bench-$$
# The live-task files go to a tmpfs, as /run/corral is on a systemd host (runtime_dir in the
# shipped configuration); this VM's /run is on disk, so /dev/shm stands in.
RT=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
start() { # start SOCKET_DIR [corrald args]
	"$O/corrald" --socket "$1/s" --state-dir "$1/state" --cgroup-subtree "$SUB" --node bench \
		--log-level warning "${@:2}" >>"$1/log" 2>&1 &
	A=$!
	for _ in $(seq 600); do [ -S "$1/s" ] && break; sleep 0.05; done # BPF loads slowly on a busy host
}
trap 'kill $A 2>/dev/null; wait $A 2>/dev/null; for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do [ -d $h ] && find $h -depth -type d -exec rmdir {} \; 2>/dev/null; done; rm -rf $D $RT' EXIT
H=$O/tests/bench/helper_launch_bench
if [ -n "${LAUNCH_BASE:-}" ]; then
	[ -x "$LAUNCH_BASE/corrald" ] || { echo "no $LAUNCH_BASE/corrald"; exit 1; }
	if [ "${LAUNCH_GPU:-0}" = 1 ]; then
		export CORRAL_NVML_LIBRARY=$O/tests/gpu/libnvidia-ml.so.1
		export CORRAL_FAKE_NVML=$PWD/tests/integration/fixtures/nvml-2gpu.txt
	fi
	printf '[spool]\ncompress = false\n' >"$D/nocompress.conf"
	# ab_one BUILD_DIR TAG: "TAG api_median_us launches_per_s" of that build's agent
	ab_one() {
		local args=(--runtime-dir "$RT") lat tput
		"$1/corrald" --help 2>&1 | grep -q -- --runtime-dir || args=()
		if [ "${LAUNCH_SPOOL_COMPRESS:-yes}" = no ] &&
			"$1/corrald" --config "$D/nocompress.conf" --version >/dev/null 2>&1; then
			args+=(--config "$D/nocompress.conf")
		fi
		mkdir -p "$D/$2"
		start "$D/$2" "${args[@]}"
		c0=$(agent_cpu_ns)
		lat=$($H "$N" api "$D/$2/s" | sed -n 's/.*median_us=\([0-9]*\).*/\1/p')
		c1=$(agent_cpu_ns)
		tput=$($H $((N * 2)) throughput "$D/$2/s" 8 | sed -n 's/.*launches_per_s=\([0-9]*\).*/\1/p')
		kill $A; wait $A 2>/dev/null
		[ -n "$lat" ] && [ -n "$tput" ] || { echo "$2: benchmark failed"; cat "$D/$2/log"; return 1; }
		rm -rf "${D:?}/$2" "${RT:?}"/*
		echo "$2 $lat $tput $(((c1 - c0) / N / 1000))"
	}
	# the agent's CPU time so far (ns, every thread: schedstat's time on a CPU), which the
	# host's load moves far less than the wall time of a launch
	agent_cpu_ns() {
		cat /proc/$A/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }'
	}
	rows=$(for r in $(seq "$R"); do
		echo "bare $($H "$N" bare | sed -n 's/.*median_us=\([0-9]*\).*/\1/p') 0 0"
		if [ $((r % 2)) = 1 ]; then ab_one "$LAUNCH_BASE" base && ab_one "$O" this
		else ab_one "$O" this && ab_one "$LAUNCH_BASE" base; fi || exit 1
	done) || { echo "$rows"; exit 1; }
	echo "$rows"
	echo "$rows" | python3 -c '
import sys, statistics as st
rounds, v = [], {"base": [], "this": [], "bare": []}
for l in sys.stdin:
    t, *x = l.split()
    x = tuple(map(int, x))
    if t == "bare":
        rounds.append({})
    rounds[-1][t] = x
    v[t].append(x)
med = lambda t, i: st.median(x[i] for x in v[t])
print()
print("launch A/B, %d alternating rounds, %s launches each; spool compression %s" % (len(rounds), sys.argv[1], sys.argv[2]))
print("%-34s %10s %10s %8s" % ("median over the rounds", "base", "this", "ratio"))
for i, what in ((0, "API launch median (us)"), (2, "agent CPU per API launch (us)"), (1, "launches/s, 8 in flight")):
    print("%-34s %10.0f %10.0f %8.3f" % (what, med("base", i), med("this", i), med("this", i) / max(med("base", i), 1)))
print("bare fork+exec median (us), the host: %.0f (rounds %s)" % (med("bare", 0), " ".join(str(x[0]) for x in v["bare"])))
for i, d in enumerate(rounds):
    b, n = d["base"], d["this"]
    print("round %d: API %d vs %d us (%.3f), agent CPU %d vs %d us (%.3f), %d vs %d launches/s (%.3f)" %
          (i + 1, n[0], b[0], n[0] / b[0], n[2], b[2], n[2] / max(b[2], 1), n[1], b[1], n[1] / b[1]))
' "$N" "${LAUNCH_SPOOL_COMPRESS:-as configured}"
	exit 0
fi
out=
for round in $(seq "$R"); do
	start "$D" --runtime-dir "$RT"
	o=$({
		$H "$N" bare
		$H "$N" bwrap
		# The sandbox rows: the peer (bwrap with a PID namespace, a private /tmp, / read-only),
		# the agent's default sandbox (api), without a mount namespace (api_nosb: the launch
		# as it was before the sandbox), with a private /tmp and /dev/shm, and with IPC + UTS
		# namespaces as well; each against bare fork+exec in the table.
		$H "$N" bwrap_sb
		$H "$N" api "$D/s"
		$H "$N" api_nosb "$D/s"
		$H "$N" api_tmp "$D/s"
		$H "$N" api_ns "$D/s"
		$H "$N" ctl "$D/s" "$O/corralctl"
		$H $((N * 2)) throughput "$D/s" 8
		# Its baseline: bare fork+execs of /bin/true, 8 in flight (what this host's process
		# creation allows at most, before any agent work).
		$H $((N * 2)) bare_throughput 8
		# Isolated launches (100 ms apart): what a user sees after a quiet spell, when kernel
		# paths that wait for an RCU grace period (cgroup.procs writes on v1) are cold.
		LAUNCH_GAP_MS=100 $H "$NGAP" bare
		LAUNCH_GAP_MS=100 $H "$NGAP" api "$D/s"
		# The same throughput with the live-task files on this disk (runtime_dir unset).
		kill $A; wait $A 2>/dev/null
		mkdir -p "$D/disk"
		start "$D/disk"
		echo "disk_$($H $((N * 2)) throughput "$D/disk/s" 8)"
		kill $A; wait $A 2>/dev/null
		mkdir -p "$D/gpu"
		CORRAL_NVML_LIBRARY=$O/tests/gpu/libnvidia-ml.so.1 \
			CORRAL_FAKE_NVML=$PWD/tests/integration/fixtures/nvml-2gpu.txt \
			start "$D/gpu" --runtime-dir "$RT" --log-level info
		grep -q 'GPUs: 2 found' "$D/gpu/log" || { echo "GPU agent: $(cat "$D/gpu/log")"; exit 1; }
		echo "gpu_$($H "$N" api "$D/gpu/s")"
		kill $A; wait $A 2>/dev/null # (this subshell's agent: the trap knows only the first)
	} 2>&1) || { echo "$o"; echo "benchmark failed"; exit 1; }
	kill $A 2>/dev/null; wait $A 2>/dev/null
	rm -rf "$D/disk" "$D/gpu" "$D/state" "${RT:?}"/*
	out+=$(echo "$o" | sed "s/^/round=$round /")$'\n'
done
echo "$out"
echo "$out" | python3 -c '
import sys,re,statistics
rounds={}
for l in sys.stdin:
    m=re.match(r"round=(\d+) (.*)",l)
    if not m: continue
    r,l=int(m.group(1)),m.group(2)
    d=rounds.setdefault(r,{})
    m=re.match(r"(\S+)\s+n=\d+ median_us=(\d+) p99_us=(\d+)",l)
    if m: d[m.group(1)]=(int(m.group(2)),int(m.group(3)))
    m=re.search(r"launches_per_s=(\d+)",l)
    if m and l.startswith("disk_"): d["tput_disk"]=int(m.group(1))
    elif m and l.startswith("bare_throughput"): d["tput_bare"]=int(m.group(1))
    elif m: d["tput"]=int(m.group(1))
rs=[rounds[k] for k in sorted(rounds)]
med=lambda f: statistics.median(f(d) for d in rs)
rows={k:(med(lambda d:d[k][0]),med(lambda d:d[k][1])) for k in ("bare","bwrap","bwrap_sb","api","api_nosb","api_tmp","api_ns","ctl","bare_gap","api_gap","gpu_api")}
tput=med(lambda d:d["tput"]); tput_disk=med(lambda d:d["tput_disk"]); tput_bare=med(lambda d:d["tput_bare"])
b=rows["bare"]
print()
print("medians over %d round(s)" % len(rs))
print("%-10s %10s %10s %14s %12s" % ("path","median_us","p99_us","median/bare","overhead_ms"))
for k in ("bare","bwrap","api","ctl"):
    m,p=rows[k]
    print("%-10s %10d %10d %14.2f %12.3f" % (k,m,p,m/b[0],(m-b[0])/1000))
print("sandbox (ratio to bare; last column: to the launch without a mount namespace)")
nosb=rows["api_nosb"][0]
for k,what in (("bwrap_sb","bwrap --unshare-pid --tmpfs /tmp --ro-bind / /"),("api_nosb","API, no mount namespace"),("api","API, default sandbox"),("api_tmp","API, + private /tmp, /dev/shm"),("api_ns","API, + IPC, UTS namespaces")):
    m,p=rows[k]
    print("%-10s %10d %10d %14.2f %12.3f   %.2f  %s" % (k,m,p,m/b[0],(m-b[0])/1000,m/nosb,what))
print("sandbox cost: default %.3f ms, with private /tmp %.3f ms over no mount namespace; default sandbox vs the bwrap peer: %.2f" % ((rows["api"][0]-nosb)/1000,(rows["api_tmp"][0]-nosb)/1000,rows["api"][0]/rows["bwrap_sb"][0]))
g=rows["bare_gap"]
m,p=rows["api_gap"]
print("%-10s %10d %10d %14.2f %12.3f   (100 ms apart, vs bare_gap %d us)" % ("api_gap",m,p,m/g[0],(m-g[0])/1000,g[0]))
m,p=rows["gpu_api"]
print("%-10s %10d %10d %14.2f %12.3f   (node with 2 GPUs: device policy on every task; api ratio %.2f)" % ("api_gpu",m,p,m/b[0],(m-b[0])/1000,m/rows["api"][0]))
print("sustained launches/s through the API (8 in flight): %d (runtime_dir on tmpfs); %d with it on this disk (ratio %.2f)" % (tput, tput_disk, tput/tput_disk))
print("sustained bare fork+exec of /bin/true (8 in flight): %d /s; API rate / bare rate %.2f" % (tput_bare, tput/tput_bare))
for i,d in enumerate(rs):
    print("round %d: bare %d us, api %d us, overhead %.3f ms, %d launches/s (bare %d /s)" % (i+1, d["bare"][0], d["api"][0], (d["api"][0]-d["bare"][0])/1000, d["tput"], d["tput_bare"]))
ov=(rows["api"][0]-b[0])/1000 # as in the table: median api - median bare
print("target: in-agent overhead <= 2 ms (median %.3f ms): %s; >= 300 launches/s (median %d): %s" %
      (ov, "met" if ov<=2 else "NOT met", tput, "met" if tput>=300 else "NOT met"))
'
