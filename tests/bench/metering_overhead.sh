#!/bin/bash
# Overhead of the metering BPF programs on a context-switch-heavy workload (pipe ping-pong
# between two processes), a syscall-heavy one (1-byte writes to /dev/null) and a process-exit
# one (fork + exit at 10,000/s: the cost per exit): without any program, with an empty
# sched_switch program (the floor of any program there) and with the metering programs
# loaded+attached (workload tracked) as corrald loads them (CPU and IO at exit) and with CPU
# and IO accounted at every sched_switch, interleaved rounds in one run; the per-switch run time
# of the metering vs the empty program (BPF statistics); then the loader's own cost with 500
# idle tracked tasks. Targets: <= 3% sched, <= 5% syscall (reported, not enforced: the host is
# shared and noisy).
#
# METER_BENCH_BASE=DIR: A/B against another build. DIR is a source tree built with make (say
# of an older commit: git worktree add /tmp/base REV && make -C /tmp/base all); this tree's
# bench program is compiled against DIR's meter library, and rounds alternate between the two
# builds (METER_BENCH_AB_ROUNDS, default 5), so both see the same host; medians per build.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
B=$O/tests/bench/helper_meter_bench
[ -x "$B" ] || { echo "missing $B"; exit 1; }
ROUNDS=${METER_BENCH_ROUNDS:-7}
BASE=${METER_BENCH_BASE:-}
if [ -z "$BASE" ]; then
	exec "$B" "$ROUNDS" "${METER_BENCH_PINGPONG:-200000}" "${METER_BENCH_WRITES:-2000000}" 500
fi

[ -f "$BASE/.output/libcorral.a" ] || { echo "no $BASE/.output/libcorral.a (make -C $BASE all)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The base's headers and library first: the same bench source on the other meter.
cc -std=gnu11 -O2 -D_GNU_SOURCE -I"$BASE" -I"$BASE/.output" -I"$BASE/.output/bpf" -I. -I"$O" \
	-I"$O/bpf" tests/bench/helper_meter_bench.c -o "$T/bench_base" "$BASE/.output/libcorral.a" \
	$(pkg-config --libs libbpf 2>/dev/null || echo -lbpf) -lelf -lz -lm -ldl -lpthread \
	-ljansson -lcgroup -lnl-genl-3 -lnl-3 -lsystemd -lseccomp 2>"$T/cc.log" ||
	{ cat "$T/cc.log"; echo "cannot build the bench against $BASE"; exit 1; }
R=${METER_BENCH_AB_ROUNDS:-5}
for r in $(seq "$R"); do
	for b in base this; do
		bin=$B; [ $b = base ] && bin=$T/bench_base
		METER_BENCH_QUICK=1 "$bin" 1 "${METER_BENCH_PINGPONG:-200000}" \
			"${METER_BENCH_WRITES:-2000000}" 0 >"$T/out" 2>&1 ||
			{ cat "$T/out"; echo "bench failed ($b)"; exit 1; }
		awk -v b=$b '$1 == "RESULT" { print b, $2, $3, $4, $5 }
			$1 == "RESULT_EXIT_NS" { print b, "exit_ns", $2, 0, 0 }' "$T/out" >>"$T/results"
		grep -q "^attach mode" "$T/out" && [ $b = this ] && grep "^attach mode" "$T/out" | tail -n1 >"$T/mode"
	done
done
python3 - "$T/results" "$R" "$(cat "$T/mode" 2>/dev/null)" <<'PY'
import sys, statistics
v = {}
ens = {}
for line in open(sys.argv[1]):
    b, w, c, arm, x = line.split()
    if w == "exit_ns":
        ens.setdefault(b, []).append(float(c))
        continue
    v.setdefault((b, int(w), int(c), int(arm)), []).append(float(x))
R = sys.argv[2]
print("metering_overhead A/B: %s alternating rounds of each build; %s" % (R, sys.argv[3]))
print("ratio = median over rounds of metering/off in the same round (higher is better)")
names = ["sched pipe ping-pong", "1-byte write /dev/null", "fork+exit, 10k/s"]
OFF, FLOOR, METER, SWITCH = range(4)
def ratios(b, w, c, arm):
    return [m / o for m, o in zip(v[(b, w, c, arm)], v[(b, w, c, OFF)])]
print("%-24s %-7s %-12s %10s %10s %8s" % ("workload", "per", "arm", "this", "base", "this/base"))
for w in range(3):
    for c, per in ((0, "wall-s"), (1, "cpu-s")):
        for arm, an in ((METER, "default/off"), (SWITCH, "switch/off")):
            if (("base", w, c, arm)) not in v:
                continue
            a = statistics.median(ratios("this", w, c, arm))
            bb = statistics.median(ratios("base", w, c, arm))
            print("%-24s %-7s %-12s %10.4f %10.4f %8.4f" % (names[w], per, an, a, bb, a / bb))
for b in ("this", "base"):
    off = statistics.median(v[(b, 2, 1, OFF)])
    met = statistics.median(v[(b, 2, 1, METER)])
    print("cost per process exit at 10k/s (%s): %.2f us CPU off, %.2f us default (+%.2f us);"
          " BPF run time per exit %.0f ns" % (b, 1e6 / off, 1e6 / met, 1e6 / met - 1e6 / off,
          statistics.median(ens.get(b, [-1]))))
t, bb = statistics.median(ens.get("this", [-1])), statistics.median(ens.get("base", [-1]))
if t > 0 and bb > 0:
    print("BPF run time per exit: this %.0f ns, base %.0f ns, ratio %.3f" % (t, bb, t / bb))
PY
