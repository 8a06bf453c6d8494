#!/bin/bash
# The verifier's cost of each audit program (bpf/audit.bpf.c), loaded alone by
# helper_bpf_verify as corrald loads it: it must load, verify at most MAX_INSNS instructions
# (bpf_prog_info.verified_insns; the kernel refuses a program at 1,000,000) and load within
# MAX_MS. The instruction count does not depend on the host's load: it is the guard, the time
# only catches a verifier that runs for minutes. The VM tier checks the same on Linux 6.1
# (case bpf_verify). See docs/audit.md, "Verifier cost". Then the programs of bpf/meter.bpf.c and
# bpf/cuda.bpf.c the same way.
#   the helper's own check: with a budget below what a program needs, it fails and names it
#   the budget: every program within MAX_INSNS (50,000) and MAX_MS (10,000)
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_bpf_verify
MAX_INSNS=${MAX_INSNS:-50000}
MAX_MS=${MAX_MS:-10000}
[ -x "$H" ] || { echo "missing $H (build with make O=$O all)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }

fail=0
# The check can fail: a budget of 20 instructions is below every audit program's.
out=$("$H" --max-insns 20 2>&1)
r=$?
if [ "$r" = 1 ] && grep -q '^audit_connect4 FAIL verified_insns [0-9]* > 20$' <<<"$out"; then
	echo "ok: a budget of 20 instructions fails and names the program"
else
	echo "FAIL: helper with --max-insns 20: exit $r"; echo "$out"; fail=1
fi

out=$("$H" --max-insns "$MAX_INSNS" --max-ms "$MAX_MS" 2>&1)
r=$?
echo "$out"
n=$(grep -c ' verified_insns=' <<<"$out")
if [ "$r" != 0 ]; then
	echo "FAIL: an audit program over the verifier budget ($MAX_INSNS instructions, $MAX_MS ms) or not loaded"
	fail=1
elif [ "$n" -lt 10 ]; then
	echo "FAIL: $n programs measured, expected the 10 of bpf/audit.bpf.c"; fail=1
else
	echo "ok: $n audit programs within $MAX_INSNS verified instructions and $MAX_MS ms each"
fi
# The metering and GPU API objects, each program alone (cuda: loaded on GPU nodes with libcuda
# only, so this is where other nodes see it verify; its fork program loads only without the
# meter's membership map).
for obj in meter:19 cuda:9; do
	f=$O/bpf/${obj%%:*}.bpf.o
	out=$("$H" --max-insns "$MAX_INSNS" --max-ms "$MAX_MS" "$f" 2>&1)
	r=$?
	echo "$out"
	n=$(grep -c ' verified_insns=' <<<"$out")
	if [ "$r" != 0 ] || [ "$n" -lt "${obj#*:}" ]; then
		echo "FAIL: $f: exit $r, $n programs measured, expected ${obj#*:} within the budget"; fail=1
	else
		echo "ok: $n programs of $f within $MAX_INSNS verified instructions and $MAX_MS ms each"
	fi
done
[ "$fail" = 0 ]
