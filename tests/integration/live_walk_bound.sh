#!/bin/bash
# The live walk's skip (live_walk_skip.sh) trusts the subtree's cpuacct.usage (cgroup v1) to move
# whenever a tracked thread runs. A tracked process that moved itself out of its task's cgroup
# runs unseen by it; the agent bounds how long: an anchor's live read walks whatever the source
# says, and so does one at least every 20 node.sample records. Agent (BPF meter, accounting at
# exit, 1 s samples, /metrics). Checked from outside the agent's figures:
#  (a) under the default sandbox a task (root, the client's user) cannot move itself out of its
#      cgroup: it tries to write its pid into a cpuacct cgroup this test made; that cgroup stays
#      empty and the task's process stays in its task's cgroup (/proc/PID/cgroup);
#  (b) a task without the sandbox (root) moves itself there, burns CPU, then sleeps; while
#      every task sleeps the live reads skip their walk (corral_bpf_live_walks_skipped_total
#      grows), and yet within 20 sample intervals (plus 5 s) `corralctl show` gives the CPU
#      time of both cgroups the task's processes ran in (cpuacct.usage: its own and the one it
#      moved to; not below it, at most 1 ms above). A build whose reads skip whenever the
#      source did not move (no forced walk) never shows the burn: the check fails.
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/cpuacct ] || skip "needs the v1 cpuacct hierarchy"
OUT=/sys/fs/cgroup/cpuacct/corral-it-out-$$
mkdir "$OUT" || fail "making $OUT"
outside_cleanup() {
	local p
	for p in $(cat "$OUT/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	for _ in $(seq 50); do [ -z "$(cat "$OUT/cgroup.procs" 2>/dev/null)" ] && break; sleep 0.1; done
	rmdir "$OUT" 2>/dev/null
	cleanup
}
trap outside_cleanup EXIT
live_walk_agent
procs_of() { cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$1/cgroup.procs"; }

# (a)
boxed=$(ctl run --job boxed -- sh -c "echo \$\$ >$OUT/cgroup.procs; exec sleep 600" | head -n1)
[ -n "$boxed" ] || fail "launching the sandboxed task"
wait_for task_asleep "$boxed" || fail "the sandboxed task did not get to its sleep"
p=$(procs_of "$boxed" | head -n1)
if [ -z "$(cat "$OUT/cgroup.procs")" ] && [ -n "$p" ] &&
	grep -q ":cpuacct:/$SUBTREE/$boxed\$" "/proc/$p/cgroup"; then
	pass "default sandbox: the task could not move itself out (pid $p: $(grep :cpuacct: "/proc/$p/cgroup"))"
else
	fail "default sandbox: the task moved (out: '$(cat "$OUT/cgroup.procs")', pid '$p')"
fi

# (b)
mkfifo -m 600 "$T/wake" "$T/burn"
BURN='i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'
mover=$(ctl run --no-sandbox --job mover -- \
	sh -c "read x <$T/wake; echo \$\$ >$OUT/cgroup.procs || exit 3; read y <$T/burn; $BURN; exec sleep 600" |
	head -n1)
[ -n "$mover" ] || fail "launching the task that moves"
wait_for task_asleep "$boxed" || fail "the sandboxed task went on"
echo go >"$T/wake"
moved() { [ -n "$(cat "$OUT/cgroup.procs")" ] && [ -z "$(procs_of "$mover")" ]; }
wait_for moved || fail "the task did not move itself out"
mp=$(cat "$OUT/cgroup.procs")
# what it ran in its own cgroup is folded by a walk (the source moved); then it burns outside
w0=$(metric corral_bpf_live_walks_total)
walked() { [ "$(metric corral_bpf_live_walks_total)" -gt "$w0" ]; }
wait_for walked || fail "no walk after the move"
before=$(cpu_of "$mover")
s0=$(metric corral_bpf_live_walks_skipped_total)
echo go >"$T/burn"
out_asleep() { [ "$(cat "/proc/$mp/comm" 2>/dev/null)" = sleep ]; }
wait_for out_asleep || fail "the moved process did not get to its sleep"
t_burnt=$(date +%s%N)
want() { echo $(($(cg_cpu "$mover") + $(cat "$OUT/cpuacct.usage"))); }
shown() { [ "$(cpu_of "$mover")" -ge "$(want)" ]; }
for _ in $(seq 50); do shown && break; sleep 1; done
t_shown=$(date +%s%N)
got=$(cpu_of "$mover")
w=$(want)
s1=$(metric corral_bpf_live_walks_skipped_total)
[ "$s1" -gt "$s0" ] && pass "while it ran and slept outside: live reads skipped the walk ($s0 -> $s1)" ||
	fail "while it ran and slept outside: no live read skipped the walk ($s0 -> $s1): nothing to bound"
waited=$(((t_shown - t_burnt) / 1000000))
python3 -c "import sys; g, w, b, t = map(int, sys.argv[1:]); sys.exit(not (w <= g <= w + 10**6 and g - b >= 10**7 and t <= 25000))" \
	"$got" "$w" "$before" "$waited" &&
	pass "moved task: show gives $got ns (before the burn $before) ${waited} ms after its burn; both cgroups $w ns" ||
	fail "moved task: show gives $got ns (before the burn $before) ${waited} ms after its burn; both cgroups $w ns (bound: 25,000 ms)"
finish
