#!/bin/bash
# Cost of the audit exec path: execs/s of a fork+exec loop (posix_spawn of a static, libc-free
# program, 2 parallel loops, inside one task's cgroup) without the audit programs, and with
# them loaded, attached and the loop tracked (every exec an event, consumed while running).
# Interleaved rounds in one run; medians side by side and their ratio (reported, not
# enforced: the host is shared and noisy).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_audit
X=$O/tests/integration/audit_exit0
for b in "$H" "$X"; do
	[ -x "$b" ] || { echo "missing $b (build with make O=$O all)"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
ROUNDS=${AUDIT_BENCH_ROUNDS:-5}
EXECS=${AUDIT_BENCH_EXECS:-10000}

rate() { # prints execs/s of one run, or exits with the helper's status
	local out rc
	out=$(timeout 300 "$H" "$@" --target "$X" storm "$EXECS")
	rc=$?
	[ "$rc" = 77 ] && { echo "$out"; exit 77; }
	[ "$rc" = 0 ] || { echo "run failed ($*): $out" >&2; exit 1; }
	echo "$out" | sed -n 's/.*(\([0-9]*\)\/s).*/\1/p'
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

base=() with=()
for i in $(seq "$ROUNDS"); do
	b=$(rate --no-audit) || exit $?
	w=$(rate) || exit $?
	base+=("$b") with+=("$w")
	echo "round $i: without audit ${b}/s, with audit ${w}/s"
done
mb=$(median "${base[@]}") mw=$(median "${with[@]}")
printf '%-34s %12s %12s %8s\n' "exec loop ($EXECS execs, median)" "no audit" "audit" "ratio"
printf '%-34s %10s/s %10s/s %8s\n' "execs per second" "$mb" "$mw" \
	"$(awk -v a="$mw" -v b="$mb" 'BEGIN {printf "%.3f", (b > 0) ? a / b : 0}')"
