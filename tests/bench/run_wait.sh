#!/bin/bash
# corralctl run --wait -- /bin/true with the caller's stdio passed to the task (SCM_RIGHTS, the
# default of run --wait), against the same with --stdin/--stdout/--stderr /dev/null (nothing
# passed) and against bare fork+exec of /bin/true, in alternating rounds of one run; medians of
# the rounds' medians, as ratios. (systemd-run --wait --pipe needs systemd: the
# VM case run_wait_bench in tests/vm/guest-tests.sh.)
# RUN_WAIT_N launches per mode and round (default 100), RUN_WAIT_ROUNDS rounds (default 3).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
N=${RUN_WAIT_N:-100}
R=${RUN_WAIT_ROUNDS:-3}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
D=$(mktemp -d) SUB=corral-bench-$$
RT=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
"$O/corrald" --socket "$D/s" --state-dir "$D/state" --runtime-dir "$RT" --cgroup-subtree "$SUB" \
	--node bench --log-level warning >>"$D/log" 2>&1 &
A=$!
trap 'kill $A 2>/dev/null; wait $A 2>/dev/null; for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do [ -d $h ] && find $h -depth -type d -exec rmdir {} \; 2>/dev/null; done; rm -rf $D $RT' EXIT
for _ in $(seq 600); do [ -S "$D/s" ] && "$O/corralctl" --socket "$D/s" status >/dev/null 2>&1 && break; sleep 0.05; done
H=$O/tests/bench/helper_launch_bench
# the agent's own CPU time (utime + stime of corrald and its spawner, in clock ticks): what each
# launch costs the agent, less sensitive to the host's load than the wall clock
agent_ticks() {
	local t=0 p
	for p in $A $(cat /proc/$A/task/*/children 2>/dev/null); do
		[ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat)))
	done
	echo $t
}
out=
for round in $(seq "$R"); do
	for m in bare ctl ctl_files; do
		c0=$(agent_ticks)
		if [ "$m" = bare ]; then l=$($H "$N" bare </dev/null); else l=$($H "$N" "$m" "$D/s" "$O/corralctl" </dev/null); fi
		out="$out$round $l agent_ticks=$(($(agent_ticks) - c0))"$'\n'
	done
done
python3 - "$N" "$R" <<PY
import sys, statistics as st
rows = {}
for line in """$out""".strip().splitlines():
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    rows.setdefault(f[1], []).append((float(kv["median_us"]), float(kv["p99_us"]),
                                      float(kv["agent_ticks"])))
med = {m: st.median(v[0] for v in rows[m]) for m in rows}
p99 = {m: st.median(v[1] for v in rows[m]) for m in rows}
print(f"run --wait -- /bin/true, {sys.argv[1]} launches x {sys.argv[2]} alternating rounds (median of the rounds' medians)")
print(f"{'mode':<44} {'median_us':>10} {'p99_us':>10} {'vs bare':>8}")
names = {"bare": "bare fork+exec of /bin/true",
         "ctl": "corralctl run --wait (stdio passed)",
         "ctl_files": "corralctl run --wait --std* /dev/null"}
for m in ("bare", "ctl", "ctl_files"):
    print(f"{names[m]:<44} {med[m]:>10.0f} {p99[m]:>10.0f} {med[m] / med['bare']:>8.2f}")
print(f"stdio passed / files: {med['ctl'] / med['ctl_files']:.3f}")
import os
hz = os.sysconf("SC_CLK_TCK")
cpu = {m: sum(v[2] for v in rows[m]) / len(rows[m]) / int(sys.argv[1]) / hz * 1e6 for m in rows}
print(f"agent CPU per launch (corrald + spawner, mean over rounds): stdio passed {cpu['ctl']:.0f} us, "
      f"files {cpu['ctl_files']:.0f} us, ratio {cpu['ctl'] / cpu['ctl_files'] if cpu['ctl_files'] else float('nan'):.3f}")
for m in ("bare", "ctl", "ctl_files"):
    print(f"  rounds {m}: " + ", ".join(f"{v[0]:.0f}" for v in rows[m]))
PY
