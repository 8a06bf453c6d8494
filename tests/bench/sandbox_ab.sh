#!/bin/bash
# The sandbox's launch cost, in alternating rounds on one agent so that a busy host's drift
# hits every mode alike: per round, N launches of /bin/true each as bare fork+exec, the bwrap
# peer (bwrap --unshare-pid --tmpfs /tmp --ro-bind / /), the API without a mount namespace, the
# API with the default sandbox, and with a private /tmp and /dev/shm. Prints each round and the
# medians over the rounds, as ratios to bare and to the API without a mount namespace.
# SANDBOX_AB_N (default 100) launches per mode and round, SANDBOX_AB_ROUNDS (default 8).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-$PWD/.output}
N=${SANDBOX_AB_N:-100}
R=${SANDBOX_AB_ROUNDS:-8}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v bwrap >/dev/null || { echo "SKIP: bwrap not installed"; exit 77; }
D=$(mktemp -d); SUB=corral-bench-sb-$$
RT=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
"$O/corrald" --socket "$D/s" --state-dir "$D/state" --runtime-dir "$RT" --cgroup-subtree "$SUB" \
	--node bench --log-level warning >>"$D/log" 2>&1 &
A=$!
trap 'kill $A 2>/dev/null; wait $A 2>/dev/null; for h in /sys/fs/cgroup/*/$SUB /sys/fs/cgroup/unified/$SUB; do [ -d $h ] && find $h -depth -type d -exec rmdir {} \; 2>/dev/null; done; rm -rf $D $RT' EXIT
for _ in $(seq 600); do [ -S "$D/s" ] && break; sleep 0.05; done
H=$O/tests/bench/helper_launch_bench
out=
for round in $(seq "$R"); do
	for m in bare bwrap_sb api_nosb api api_tmp; do
		case $m in bare | bwrap_sb) l=$($H "$N" $m) ;; *) l=$($H "$N" $m "$D/s") ;; esac || {
			echo "$m failed: $l"; cat "$D/log"; exit 1; }
		out+="round=$round $l"$'\n'
	done
done
echo "$out"
echo "$out" | python3 -c '
import sys,re,statistics
v={}
for l in sys.stdin:
    m=re.match(r"round=(\d+) (\S+)\s+n=\d+ median_us=(\d+)",l)
    if m: v.setdefault(m.group(2),[]).append(int(m.group(3)))
med={k:statistics.median(x) for k,x in v.items()}
print("medians over %d alternating rounds (us); ratio to bare; ratio to the API without a mount namespace" % len(v["bare"]))
for k,w in (("bare","fork+exec"),("bwrap_sb","bwrap --unshare-pid --tmpfs /tmp --ro-bind / /"),("api_nosb","API, no mount namespace"),("api","API, default sandbox"),("api_tmp","API, + private /tmp, /dev/shm")):
    print("%-9s %8.0f %7.2f %7.2f  %s" % (k,med[k],med[k]/med["bare"],med[k]/med["api_nosb"],w))
print("sandbox cost over no mount namespace: default %.3f ms, with private /tmp %.3f ms; default sandbox / bwrap peer %.2f" % ((med["api"]-med["api_nosb"])/1000,(med["api_tmp"]-med["api_nosb"])/1000,med["api"]/med["bwrap_sb"]))
'
