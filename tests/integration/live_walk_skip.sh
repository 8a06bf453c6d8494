#!/bin/bash
# A live read skips its walk of the node's threads while no task's CPU time moved (the subtree's
# cpuacct.usage, cgroup v1), and walks again as soon as one did, so that what ran is folded in.
# Agent (BPF meter, accounting at exit, 1 s samples, /metrics), three sleeping tasks and one
# that waits on a FIFO. Checked from outside the agent's figures:
#  (a) while every task sleeps, live reads skip the walk (corral_bpf_live_walks_skipped_total
#      grows by 3 or more);
#  (b) the woken task burns CPU then sleeps again: the next reads walk
#      (corral_bpf_live_walks_total grows within 5 s of its sleep) and `corralctl show` gives the CPU time its cgroup
#      shows (cpuacct.usage; a skipped fold would miss the whole burn, tens of ms);
#  (c) each sleeping task's CPU time in `corralctl show` is its cgroup's.
# "Its cgroup's": not below it, and at most 1 ms above (the meter counts the task's first
# process from its fork; the kernel may charge the few microseconds it ran before it joined
# its cgroups to the shim's, where a switch came in between).
# LIVE_WALK_V2=1 (live_walk_skip_v2.sh): the same with the agent in cgroup v2 mode on the unified
# hierarchy of a v1 hybrid host (CORRAL_TEST_CGROUP_V2_ROOT), where the skip compares the
# subtree's cpu.stat usage_usec: "its cgroup's" is then the task's cpu.stat usage_usec, read
# from outside, and the start line and /metrics must name that counter.
. "$(dirname "$0")/lib.sh"
need_root
if [ -n "${LIVE_WALK_V2:-}" ]; then
	U=/sys/fs/cgroup/unified
	[ -f $U/cgroup.procs ] && [ -d /sys/fs/cgroup/cpuacct ] ||
		skip "needs a v1 hybrid host (the unified hierarchy beside v1's)"
	export CORRAL_TEST_CGROUP_V2_ROOT=$U
	cg_cpu() { echo $(($(awk '$1 == "usage_usec" { print $2 }' "$U/$SUBTREE/$1/cpu.stat") * 1000)); }
	TASKS_CG_ROOT=$U
	SOURCE="cpu.stat usage_usec" RES=1000
else
	[ -d /sys/fs/cgroup/cpuacct ] || skip "needs the v1 cpuacct hierarchy"
	SOURCE=cpuacct.usage RES=1
fi
# listed: no anchor at each change of the tasks (stated's), whose live read walks whatever the
# counter says: the only forced walk is then every 20th record (20 s), after the checks, so
# a build that skips whatever the counter says fails (b) and (c).
live_walk_agent "sample_unchanged = listed"
grep -q "live reads [a-z]*, skipped while the subtree's $SOURCE stays" "$T/agent.log" &&
	curl -fsS "http://127.0.0.1:$MPORT/metrics" |
	grep -qFx "corral_bpf_live_walk_source_info{source=\"$SOURCE\",resolution_ns=\"$RES\"} 1" &&
	pass "the start line and /metrics name $SOURCE (resolution $RES ns)" ||
	fail "the start line or /metrics do not name $SOURCE: $(grep -m1 'BPF metering' "$T/agent.log"); $(curl -fsS "http://127.0.0.1:$MPORT/metrics" | grep live_walk_source)"

idle=()
for i in 1 2 3; do
	idle+=("$(ctl run --no-sandbox --job idle$i -- sleep 600 | head -n1)")
done
mkfifo -m 600 "$T/wake"
BURN='i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'
waker=$(ctl run --no-sandbox --job waker -- sh -c "read x <$T/wake; $BURN; exec sleep 600" | head -n1)
[ -n "${idle[2]}" ] && [ -n "$waker" ] || fail "launching the tasks"
[ -n "$(metric corral_bpf_live_walks_skipped_total)" ] || { fail "no live-walk metrics"; finish; }

# (a)
s0=$(metric corral_bpf_live_walks_skipped_total)
skipped() { [ "$(metric corral_bpf_live_walks_skipped_total)" -ge $((s0 + 3)) ]; }
wait_for skipped && pass "all tasks asleep: live reads skipped the walk ($s0 -> $(metric corral_bpf_live_walks_skipped_total))" ||
	fail "all tasks asleep: live reads did not skip the walk ($s0 -> $(metric corral_bpf_live_walks_skipped_total))"

# (b)
before=$(cpu_of "$waker")
w0=$(metric corral_bpf_live_walks_total)
echo go >"$T/wake"
wait_for task_asleep "$waker" || fail "the woken task did not get to its sleep"
sleep 1.5 # a sample interval: its change check's live read
walked() { [ "$(metric corral_bpf_live_walks_total)" -gt "$w0" ]; }
# within 5 s (5 samples), long before the every-20th-record walk
for _ in $(seq 25); do walked && break; sleep 0.2; done
walked && pass "after the wakeup: live reads walk again ($w0 -> $(metric corral_bpf_live_walks_total))" ||
	fail "after the wakeup: no walk ($w0 -> $(metric corral_bpf_live_walks_total))"
got=$(cpu_of "$waker")
want=$(cg_cpu "$waker")
python3 -c "import sys; g, w, b = map(int, sys.argv[1:]); sys.exit(not w <= g <= w + 10**6 or g - b < 10**7)" \
	"$got" "$want" "$before" &&
	pass "woken task: show gives $got ns (before the burn $before), its cgroup $want ns" ||
	fail "woken task: show gives $got ns (before the burn $before), its cgroup $want ns"

# (c)
for t in "${idle[@]}"; do
	got=$(cpu_of "$t")
	want=$(cg_cpu "$t")
	[ "$got" -ge "$want" ] && [ "$got" -le $((want + 1000000)) ] && pass "sleeping task $t: show gives $got ns, its cgroup $want ns" ||
		fail "sleeping task $t: show gives $got ns, its cgroup $want ns"
done
finish
