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
# Then process and thread storms (tests/bench/helper_storm_bench.c): fork+exec, fork+exit and
# thread create+join as fast as they go, with nothing loaded, with the hooks corrald loads by
# default (meter and audit trail) and the workload outside any task, and with it inside a task,
# as ratios hooks/off in interleaved rounds (METER_BENCH_STORM_ROUNDS, default 5); then the
# run time of each program per operation (BPF statistics): where the time goes. Target: <= 3%
# inside a task. METER_BENCH_FORKEXEC / _FORKEXIT / _THREADS: operations per workload and round.
#
# METER_BENCH_BASE=DIR: A/B against another build. DIR is a source tree built with make (say
# of an older commit: git worktree add /tmp/base REV && make -C /tmp/base all); this tree's
# bench program is compiled against DIR's meter library, and rounds alternate between the two
# builds (METER_BENCH_AB_ROUNDS, default 5), so both see the same host; medians per build.
# The storms too, followed by each build's run time per program and operation
# (METER_BENCH_PP_ROUNDS alternating rounds; METER_BENCH_AB_ROUNDS=0: only these).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
B=$O/tests/bench/helper_meter_bench
[ -x "$B" ] || { echo "missing $B"; exit 1; }
ROUNDS=${METER_BENCH_ROUNDS:-7}
BASE=${METER_BENCH_BASE:-}
S=$O/tests/bench/helper_storm_bench
[ -x "$S" ] || { echo "missing $S"; exit 1; }
SROUNDS=${METER_BENCH_STORM_ROUNDS:-5}
STORM_ARGS="${METER_BENCH_FORKEXEC:-1500} ${METER_BENCH_FORKEXIT:-5000} ${METER_BENCH_THREADS:-10000}"
if [ -z "$BASE" ]; then
	"$B" "$ROUNDS" "${METER_BENCH_PINGPONG:-200000}" "${METER_BENCH_WRITES:-2000000}" 500
	rc=$?
	[ $rc -eq 0 ] || exit $rc
	echo
	# shellcheck disable=SC2086
	"$S" "$SROUNDS" $STORM_ARGS | grep -v '^STORM '
	exit "${PIPESTATUS[0]}"
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
cc -std=gnu11 -O2 -D_GNU_SOURCE -I"$BASE" -I"$BASE/.output" -I"$BASE/.output/bpf" -I. -I"$O" \
	-I"$O/bpf" tests/bench/helper_storm_bench.c -o "$T/storm_base" "$BASE/.output/libcorral.a" \
	$(pkg-config --libs libbpf 2>/dev/null || echo -lbpf) -lelf -lz -lm -ldl -lpthread \
	-ljansson -lcgroup -lnl-genl-3 -lnl-3 -lsystemd -lseccomp -lcrypto 2>"$T/cc.log" ||
	{ cat "$T/cc.log"; echo "cannot build the storm bench against $BASE"; exit 1; }
R=${METER_BENCH_AB_ROUNDS:-5}
# METER_BENCH_AB_ROUNDS=0: only the per-program run times below.
[ "$R" -gt 0 ] 2>/dev/null || R=0
for r in $(seq "$R"); do
	for b in base this; do
		bin=$B; [ $b = base ] && bin=$T/bench_base
		METER_BENCH_QUICK=1 "$bin" 1 "${METER_BENCH_PINGPONG:-200000}" \
			"${METER_BENCH_WRITES:-2000000}" 0 >"$T/out" 2>&1 ||
			{ cat "$T/out"; echo "bench failed ($b)"; exit 1; }
		awk -v b=$b '$1 == "RESULT" { print b, $2, $3, $4, $5 }
			$1 == "RESULT_EXIT_NS" { print b, "exit_ns", $2, 0, 0 }' "$T/out" >>"$T/results"
		grep -q "^attach mode" "$T/out" && [ $b = this ] && grep "^attach mode" "$T/out" | tail -n1 >"$T/mode"
		bin=$S; [ $b = base ] && bin=$T/storm_base
		# shellcheck disable=SC2086
		METER_BENCH_QUICK=1 "$bin" 1 $STORM_ARGS >"$T/out" 2>&1 ||
			{ cat "$T/out"; echo "storm bench failed ($b)"; exit 1; }
		awk -v b=$b '$1 == "STORM" { print b, $2, $3, $4, $5 }' "$T/out" >>"$T/storms"
	done
done
[ "$R" = 0 ] || python3 - "$T/results" "$R" "$(cat "$T/mode" 2>/dev/null)" <<'PY'
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
[ "$R" = 0 ] || python3 - "$T/storms" "$R" <<'PY'
import sys, statistics
v = {}
for line in open(sys.argv[1]):
    b, w, c, arm, x = line.split()
    v.setdefault((b, int(w), int(c), int(arm)), []).append(float(x))
print("\nprocess/thread storms A/B: %s alternating rounds of each build; ratio = median over"
      " rounds of hooks/off in the same round (1 = no cost)" % sys.argv[2])
names = ["fork+exec", "fork+exit", "thread create+join"]
print("%-20s %-7s %-8s %10s %10s" % ("workload", "per", "task", "this", "base"))
for w in range(3):
    for c, per in ((1, "cpu-s"), (0, "wall-s")):
        for arm, an in ((1, "outside"), (2, "inside")):
            r = {}
            for b in ("this", "base"):
                r[b] = statistics.median([h / o for h, o in zip(v[(b, w, c, arm)], v[(b, w, c, 0)])])
            print("%-20s %-7s %-8s %10.4f %10.4f" % (names[w], per, an, r["this"], r["base"]))
PY
# Where the time goes in each build: the run time of each program per operation (one round of
# each, BPF statistics), this build then the base.
# METER_BENCH_PP_ROUNDS (default 1) alternating rounds of this, each build's last printed.
PR=${METER_BENCH_PP_ROUNDS:-1}
for r in $(seq "$PR"); do
	for b in this base; do
		bin=$S; [ $b = base ] && bin=$T/storm_base
		# shellcheck disable=SC2086
		"$bin" 1 $STORM_ARGS >"$T/pp.$b" 2>&1
		grep '^NET ' "$T/pp.$b" >>"$T/net.$b"
		sed -n '/^per-program run time/,$p' "$T/pp.$b" | awk -v r="$r" '
			NF >= 6 && $NF ~ /^[0-9.]+$/ && $(NF-1) ~ /^[0-9.]+$/ &&
			$(NF-2) ~ /^[0-9.]+$/ && ($(NF-4) == "inside" || $(NF-4) == "outside") {
				w = $1; for (i = 2; i <= NF - 5; i++) w = w "_" $i
				print r, w, $(NF-4), $(NF-3), $NF }' >>"$T/prog.$b"
	done
done
for b in this base; do
	echo
	echo "per-program run time, $b build (round $PR of $PR):"
	sed -n '/^per-program run time/,$p' "$T/pp.$b" | tail -n +2 | grep -v '^NET '
done
# Each program's run time per operation, the median over the rounds (a program's runs of one
# round summed when two objects give it the same name), side by side: which program moved.
echo
echo "run time per operation of each program, median of $PR alternating rounds (ns):"
printf '%-20s %-8s %-18s %10s %10s %8s\n' workload task program this base this/base
python3 - "$T/prog.this" "$T/prog.base" <<'PY'
import sys, statistics
d = []
for f in sys.argv[1:3]:
    v = {}
    try:
        lines = open(f).read().split("\n")
    except OSError:
        lines = []
    for line in lines:
        if not line.strip():
            continue
        r, w, i, prog, ns = line.split()
        k = (w, i, prog)
        v.setdefault(k, {}).setdefault(r, 0.0)
        v[k][r] += float(ns)
    d.append({k: statistics.median(x.values()) for k, x in v.items()})
order = []
for v in d:
    for k in v:
        if k not in order:
            order.append(k)
for k in order:
    a, b = d[0].get(k, 0.0), d[1].get(k, 0.0)
    print("%-20s %-8s %-18s %10.0f %10.0f %8s" % (k[0].replace("_", " "), k[1], k[2], a, b,
          "%.3f" % (a / b) if b > 0 else "-"))
PY
# The net run time of all programs per operation as a share of the workload's CPU, side by side:
# the median over the rounds of each round's median of the repetitions; then the spread of the
# rounds (lowest and highest round, ns per operation).
echo
echo "net BPF run time per operation, share of the workload's CPU ($PR alternating rounds):"
printf '%-20s %-8s %18s %18s %8s %24s\n' workload task this base this/base "rounds this; base (ns)"
python3 - "$T/net.this" "$T/net.base" <<'PY'
import sys, statistics
d = []
for f in sys.argv[1:3]:
    v = {}
    for line in open(f):
        _, w, i, ns, share = line.split()
        v.setdefault((int(w), int(i)), []).append((float(ns), float(share)))
    d.append(v)
names = ["fork+exec", "fork+exit", "thread create+join"]
for w in range(3):
    for i in range(2):
        cells = []
        spread = []
        for v in d:
            r = v.get((w, i), [])
            ns = statistics.median([x[0] for x in r]) if r else float("nan")
            sh = statistics.median([x[1] for x in r]) if r else float("nan")
            cells.append((ns, sh))
            spread.append("%.0f-%.0f" % (min(x[0] for x in r), max(x[0] for x in r))
                          if r else "-")
        print("%-20s %-8s %18s %18s %8.3f %24s" % (names[w], "inside" if i else "outside",
              "%.0f ns %.2f%%" % cells[0], "%.0f ns %.2f%%" % cells[1],
              cells[0][0] / cells[1][0] if cells[1][0] > 0 else float("nan"),
              "%s; %s" % (spread[0], spread[1])))
PY
