#!/bin/bash
# The sandbox's launch cost, in alternating rounds so that a busy host's drift hits every mode
# alike: per round, N launches of /bin/true each as bare fork+exec, the bwrap peer (bwrap
# --unshare-pid --tmpfs /tmp --ro-bind / /), and through this build's agent: without a mount
# namespace, the default sandbox, and each option (no private /dev, private /tmp, IPC + UTS
# namespaces, PID namespace, read-only/inaccessible paths and a bind, the same with Landlock);
# then the same requests to an agent of the build before (SANDBOX_AB_BASE, a commit, built into
# a scratch directory; the modes it knows). Prints each round and the medians over the rounds,
# as ratios to bare fork+exec, to the API without a mount namespace and to the bwrap peer. The
# order of the modes turns by one each round.
# SANDBOX_AB_N (default 100) launches per mode and round, SANDBOX_AB_ROUNDS (default 8),
# SANDBOX_AB_BASE (default 93644ac; empty: no baseline); SANDBOX_AB_MODES, SANDBOX_AB_BASE_MODES:
# the API modes to run (default: all of them).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
N=${SANDBOX_AB_N:-100}
R=${SANDBOX_AB_ROUNDS:-8}
BASE=${SANDBOX_AB_BASE-93644ac}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v bwrap >/dev/null || { echo "SKIP: bwrap not installed"; exit 77; }
D=$(mktemp -d); SUB=corral-bench-sb-$$
RT=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
A= B=
trap 'kill $A $B 2>/dev/null; wait $A $B 2>/dev/null; for h in /sys/fs/cgroup/*/$SUB* /sys/fs/cgroup/unified/$SUB*; do [ -d $h ] && find $h -depth -type d -exec rmdir {} \; 2>/dev/null; done; rm -rf $D $RT' EXIT
if [ -n "$BASE" ]; then
	echo "building the baseline $BASE in $D/base ..."
	mkdir -p "$D/base"
	git archive "$BASE" | tar -x -C "$D/base" && make -C "$D/base" -j2 all >"$D/base.log" 2>&1 ||
		{ tail -n 20 "$D/base.log"; echo "baseline build failed"; exit 1; }
fi
mkdir -p "$RT/new" "$RT/base"
"$O/corrald" --socket "$D/s" --state-dir "$D/state" --runtime-dir "$RT/new" --cgroup-subtree "$SUB" \
	--node bench --log-level warning >>"$D/log" 2>&1 &
A=$!
if [ -n "$BASE" ]; then
	"$D/base/.output/corrald" --socket "$D/bs" --state-dir "$D/bstate" --runtime-dir "$RT/base" \
		--cgroup-subtree "$SUB-base" --node bench --log-level warning >>"$D/blog" 2>&1 &
	B=$!
fi
for _ in $(seq 600); do [ -S "$D/s" ] && { [ -z "$BASE" ] || [ -S "$D/bs" ]; } && break; sleep 0.05; done
H=$O/tests/bench/helper_launch_bench
NEW_MODES=${SANDBOX_AB_MODES:-api_nosb api api_nodev api_tmp api_ns api_pid api_paths api_landlock}
BASE_MODES=${SANDBOX_AB_BASE_MODES:-api_nosb api api_tmp api_ns api_pid api_paths}
out=
ALL=(bare bwrap_sb $NEW_MODES ${BASE:+$(printf 'base_%s ' $BASE_MODES)})
for round in $(seq "$R"); do
	# each round starts one mode further on: a mode's cost does not always fall on the same
	# successor (a namespace's teardown is partly deferred to after its last process)
	order=("${ALL[@]:$(((round - 1) % ${#ALL[@]}))}" "${ALL[@]:0:$(((round - 1) % ${#ALL[@]}))}")
	for m in "${order[@]}"; do
		case $m in
		bare | bwrap_sb) l=$($H "$N" $m) ;;
		base_*) l=$($H "$N" "${m#base_}" "$D/bs") && l="base_$l" ;;
		*) l=$($H "$N" $m "$D/s") ;;
		esac || { echo "$m failed: $l"; cat "$D/log" "$D/blog" 2>/dev/null; exit 1; }
		out+="round=$round $l"$'\n'
	done
done
echo "$out"
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; kernel $(uname -r)"
echo "$out" | BASE=$BASE python3 -c '
import os,sys,re,statistics
v={}
for l in sys.stdin:
    m=re.match(r"round=(\d+) (\S+)\s+n=\d+ median_us=(\d+)",l)
    if m: v.setdefault(m.group(2),[]).append(int(m.group(3)))
med={k:statistics.median(x) for k,x in v.items()}
print("medians over %d alternating rounds (us); ratios to bare fork+exec, to the API without a mount namespace, to the bwrap peer; base: %s" % (len(v["bare"]), os.environ.get("BASE") or "none"))
what={"bare":"fork+exec","bwrap_sb":"bwrap --unshare-pid --tmpfs /tmp --ro-bind / /",
      "api_nosb":"API, no mount namespace","api":"API, default sandbox",
      "api_nodev":"API, default without the private /dev","api_tmp":"API, + private /tmp, /dev/shm",
      "api_ns":"API, + private /tmp, IPC, UTS namespaces","api_pid":"API, + PID namespace (and, in this build, its init)",
      "api_paths":"API, + a read-only path, an inaccessible one, a bind","api_landlock":"API, + those with Landlock"}
print("%-18s %8s %7s %7s %7s  %s" % ("mode","us","/bare","/nosb","/bwrap",""))
for k in ["bare","bwrap_sb"]+[k for k in what if k.startswith("api")]+["base_"+k for k in what if k.startswith("api")]:
    if k not in med: continue
    nosb=med.get("base_api_nosb" if k.startswith("base_") else "api_nosb", float("nan"))
    w=what.get(k.replace("base_",""),"")
    print("%-18s %8.0f %7.2f %7.2f %7.2f  %s%s" % (k,med[k],med[k]/med["bare"],med[k]/nosb,med[k]/med["bwrap_sb"],w," (build before)" if k.startswith("base_") else ""))
for k in ("api_nosb","api","api_tmp","api_ns","api_pid","api_paths"):
    if "base_"+k in med:
        print("this build / build before, %-9s %.2f" % (k, med[k]/med["base_"+k]))
'
