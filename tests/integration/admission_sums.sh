#!/bin/bash
# Admission against the running tasks' requests, which the agent keeps as sums as tasks join and
# leave (no walk of the tasks at each launch). On a node of NCPU CPUs and M bytes, two running
# tasks ask 0.6 and 0.3 of the CPUs and 0.5 and 0.25 of the memory; then:
#  (a) a third asking 0.2 of the CPUs is refused, and the refusal names the CPUs the running
#      tasks requested: 0.9 of NCPU, as summed here from the requests;
#  (b) one asking 0.4 of the memory is refused likewise, naming 0.75 of M (MiB);
#  (c) once the first task has ended, the same two requests are accepted (its requests left the
#      sums), and a refusal names what the tasks still running requested.
. "$(dirname "$0")/lib.sh"
need_root
start_agent
out=$(ctl run --no-sandbox --cpus 4096 -- true 2>&1)
NCPU=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cpus, \([0-9.]*\) reserved.*/\1/p')
RES=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cpus, \([0-9.]*\) reserved.*/\2/p')
[ -n "$NCPU" ] && [ -n "$RES" ] || { fail "no CPU refusal to read the node from: $out"; finish; }
out=$(ctl run --no-sandbox --memory 100T -- true 2>&1)
MTOT=$(echo "$out" | sed -n 's/.*(\([0-9]*\) MiB total, \([0-9]*\) MiB reserved.*/\1/p')
MRES=$(echo "$out" | sed -n 's/.*(\([0-9]*\) MiB total, \([0-9]*\) MiB reserved.*/\2/p')
[ -n "$MTOT" ] && [ -n "$MRES" ] || { fail "no memory refusal to read the node from: $out"; finish; }
frac() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) * float(sys.argv[2])))" "$1" "$2"; }
mib() { python3 -c "import sys; print(int(int(sys.argv[1]) * float(sys.argv[2])))" "$1" "$2"; }
FREE=$(python3 -c "print($NCPU - $RES)")
MFREE=$((MTOT - MRES))
c1=$(frac "$FREE" 0.6)
c2=$(frac "$FREE" 0.3)
c3=$(frac "$FREE" 0.2)
m1=$(mib "$MFREE" 0.5)
m2=$(mib "$MFREE" 0.25)
m3=$(mib "$MFREE" 0.4)
a=$(ctl run --no-sandbox --cpus "$c1" --memory "${m1}M" -- sleep 600 | head -n1)
b=$(ctl run --no-sandbox --cpus "$c2" --memory "${m2}M" -- sleep 600 | head -n1)
[ -n "$a" ] && [ -n "$b" ] || { fail "launching the two tasks ($c1 / $c2 CPUs, $m1 / $m2 MiB)"; finish; }
used_c=$(python3 -c "print('%.2f' % ($c1 + $c2))")
used_m=$((m1 + m2))
# (a)
out=$(ctl run --no-sandbox --cpus "$c3" -- true 2>&1)
echo "$out" | grep -q "$used_c requested by running tasks" &&
	pass "CPUs: $c3 refused with $c1 + $c2 of $NCPU ($RES reserved) running: $(echo "$out" | tail -n1)" ||
	fail "CPUs: $c3 with $c1 + $c2 running, want a refusal naming $used_c: $out"
# (b)
out=$(ctl run --no-sandbox --memory "${m3}M" -- true 2>&1)
echo "$out" | grep -q "$used_m MiB requested by running tasks" &&
	pass "memory: $m3 MiB refused with $m1 + $m2 MiB of $MTOT running: $(echo "$out" | tail -n1)" ||
	fail "memory: $m3 MiB with $m1 + $m2 running, want a refusal naming $used_m MiB: $out"
# (c)
ctl kill "$a" --signal KILL >/dev/null
ctl wait "$a" >/dev/null 2>&1
[ "$(status_of "$a")" != "" ] || fail "the first task did not end"
run_wait --no-sandbox --cpus "$c3" --memory "${m3}M" -- true
[ "$RC" = 0 ] && pass "after the first task's end: $c3 CPUs and $m3 MiB accepted" ||
	fail "after the first task's end: $c3 CPUs and $m3 MiB: rc $RC $REASON"
out=$(ctl run --no-sandbox --cpus 4096 -- true 2>&1)
echo "$out" | grep -q "$c2 requested by running tasks" &&
	pass "a refusal now names $c2 CPUs requested by running tasks" ||
	fail "a refusal now, want $c2 CPUs requested by running tasks: $out"
finish
