#!/bin/bash
# OOM kills that a task survives are reported as they happen, not at its next sample: with
# samples an hour apart, a task whose worker is OOM-killed (the task goes on) gets its
# audit.limit "oom_kill" record in the spool (read from outside with spool_frames.py) soon
# after the kill, with the count the cgroup itself gives (memory.oom_control read from
# outside). The test waits for the events (the task's own marker after the kill, then the
# record), never sleeps a fixed time; an agent that finds OOM kills only at samples writes no
# such record before the hour is up, and the wait (20 s at most) fails. A second kill in the
# same task gives a second record. The latencies are printed, not asserted: from the worker's
# death (the clock read by the task's shell right after it) to the record's own time.
# Where the agent loads the meter's OOM victim program (oom:mark_victim, the same program that
# reports a node-wide OOM kill, which cannot be caused here without harming the host), each
# record names its victim: victim_pids holds the worker's pid as its shell knew it ($!) and
# detected_by is "ebpf"; where it is not loaded, "cgroup".
. "$(dirname "$0")/lib.sh"
need_root
[ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
	skip "no memory controller"

# records of TYPE for task TID in the spool: "<count> <last oom_kills> <last new_kills>"
oom_records() {
	python3 - "$(dirname "$0")" "$1" "$STATE"/spool/seg-*.log <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from spool_frames import frames, record
tid, n, last = sys.argv[2], 0, {}
for path in sys.argv[3:]:
    for pos, seq, enc, k in frames(path):
        try:
            r = json.loads(record(path, pos))
        except ValueError:
            continue
        ev = r.get("event") or {}
        if r.get("type") == "audit.limit" and r.get("task", {}).get("id") == tid and \
                ev.get("limit") == "oom_kill":
            n += 1
            last = dict(ev, time=r.get("time"))
import datetime
t = last.get("time")
ns = "-"
if t:
    d = datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    ns = int(d.timestamp()) * 10**9 + d.microsecond * 1000
print(n, last.get("oom_kills", "-"), last.get("new_kills", "-"), ns,
      last.get("detected_by", "-"), ",".join(str(p) for p in last.get("victim_pids", [])) or "-")
PY
}
wait_records() { # TID COUNT: until COUNT oom_kill records are spooled (20 s at most)
	local end=$(($(date +%s) + 20))
	while [ "$(date +%s)" -le "$end" ]; do
		[ "$(oom_records "$1" | cut -d' ' -f1)" -ge "$2" ] && return 0
		sleep 0.05
	done
	return 1
}
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (b - a) / 1e6}'; }

printf '[agent]\nsample_interval = 1h\n' >"$T/a.conf"
start_agent --config "$T/a.conf"
mkfifo "$T/go1" "$T/go2"
# the worker (python) is the biggest process in the cgroup: the OOM killer's victim; the
# shell goes on and says so
ctl run --memory 64M --swap 0 -- sh -c '
while read -r l; do case $l in *:memory:*) echo "${l##*:}" >'"$T/cg"' ;; 0::*) echo "${l#0::}" >'"$T/cg2"' ;; esac; done </proc/self/cgroup
read x <'"$T/go1"'
python3 -c "x = b\"x\" * (256 << 20)" & p=$!; wait $p; echo $? $(date +%s%N) $p >'"$T/k1"'
read x <'"$T/go2"'
python3 -c "x = b\"x\" * (256 << 20)" & p=$!; wait $p; echo $? $(date +%s%N) $p >'"$T/k2"'
exec sleep 1000' >"$T/id"
ID=$(head -n1 "$T/id")
for _ in $(seq 300); do [ -s "$T/cg" ] || [ -s "$T/cg2" ] && break; sleep 0.05; done
if [ -s "$T/cg" ]; then
	oc=/sys/fs/cgroup/memory$(cat "$T/cg")/memory.oom_control
else
	oc=/sys/fs/cgroup$(cat "$T/cg2")/memory.events
fi
[ -r "$oc" ] || fail "the task's memory cgroup file $oc"
# the victims' source the records must name: the meter's program wherever the kernel has the
# tracepoint and the agent loaded BPF metering
if grep -qa btf_trace_mark_victim /sys/kernel/btf/vmlinux 2>/dev/null &&
	grep -q 'BPF metering loaded' "$T/agent.log"; then
	src=ebpf
	grep -q 'OOM victims \(tp_btf\|raw_tp\)' "$T/agent.log" ||
		fail "the kernel has oom:mark_victim but the agent did not load its program: $(grep 'BPF metering' "$T/agent.log")"
else
	src=cgroup
fi
# victim check: detected_by and victim_pids of the last record against the worker's pid
victim_ok() { # DETECTED_BY PIDS WORKER_PID
	if [ "$src" = ebpf ]; then
		[ "$1" = ebpf ] && [ "$2" = "$3" ]
	else
		[ "$1" = cgroup ] && [ "$2" = - ]
	fi
}
kills() { awk '$1 == "oom_kill" {print $2}' "$oc"; }

echo >"$T/go1"
for _ in $(seq 600); do [ -s "$T/k1" ] && break; sleep 0.05; done
set -- $(cat "$T/k1" 2>/dev/null)
t0=${2:-0}
w1=${3:-}
[ "${1:-}" = 137 ] || fail "the first worker was not killed: $(cat "$T/k1" 2>/dev/null)"
if wait_records "$ID" 1; then
	set -- $(oom_records "$ID")
	dt=$(ms_between "$t0" "$4")
	[ "$1" = 1 ] && [ "$2" = "$(kills)" ] && [ "$2" = 1 ] &&
		pass "OOM kill in a running task (samples 1 h apart): audit.limit oom_kill spooled, its time ${dt} ms after the worker's death, oom_kills $2 (cgroup: $(kills))" ||
		fail "first OOM kill: records $1, oom_kills $2, cgroup $(kills)"
	victim_ok "$5" "$6" "$w1" &&
		pass "the record names its victim: detected_by $5, victim_pids $6 (the worker's pid: $w1)" ||
		fail "first OOM kill: detected_by $5, victim_pids $6, worker pid $w1 (expected source $src)"
else
	fail "no oom_kill record within 20 s of the kill (cgroup counts $(kills)): reported at samples only?"
fi
echo >"$T/go2"
for _ in $(seq 600); do [ -s "$T/k2" ] && break; sleep 0.05; done
set -- $(cat "$T/k2" 2>/dev/null)
t0=${2:-0}
w2=${3:-}
if wait_records "$ID" 2; then
	set -- $(oom_records "$ID")
	dt=$(ms_between "$t0" "$4")
	[ "$1" = 2 ] && [ "$2" = 2 ] && [ "$3" = 1 ] && [ "$(kills)" = 2 ] &&
		pass "a second OOM kill: a second record, its time ${dt} ms after the death, oom_kills $2 new_kills $3 (cgroup: $(kills))" ||
		fail "second OOM kill: records $1, oom_kills $2, new_kills $3, cgroup $(kills)"
	victim_ok "$5" "$6" "$w2" &&
		pass "the second record names its own victim: detected_by $5, victim_pids $6 (worker: $w2)" ||
		fail "second OOM kill: detected_by $5, victim_pids $6, worker pid $w2 (expected source $src)"
else
	fail "no second oom_kill record within 20 s (cgroup counts $(kills))"
fi
[ "$(ctl show "$ID" --json | jget state)" = running ] &&
	pass "the task runs on" || fail "task state: $(ctl show "$ID" --json | jget state)"
ctl kill "$ID" >/dev/null

# A node-wide OOM kill on v1 comes with no notification of the task's cgroup (the kernel
# signals a memory cgroup's own OOM only): the agent started without its cgroup notifications
# (CORRAL_TEST_NO_OOM_NOTIFY) has only the meter's program to learn of a kill before the next
# sample, an hour away. The same wait (20 s at most) must see the record: with the programs
# corrald picks (tp_btf here), then with the raw_tp variants ([metering] bpf = raw_tp).
no_notify_kill() { # MODE CONF
	local n=$1 id w t0
	stop_agent
	CORRAL_TEST_NO_OOM_NOTIFY=1 start_agent --config "$2"
	grep 'BPF metering loaded' "$T/agent.log" | tail -n1 | grep -q 'OOM victims' ||
		fail "$1: no BPF metering with OOM victims: $(grep 'BPF metering' "$T/agent.log" | tail -n1)"
	mkfifo "$T/go-$n"
	ctl run --memory 64M --swap 0 -- sh -c '
read x <'"$T/go-$n"'
python3 -c "x = b\"x\" * (256 << 20)" & p=$!; wait $p; echo $? $(date +%s%N) $p >'"$T/k-$n"'
exec sleep 1000' >"$T/id-$n"
	id=$(head -n1 "$T/id-$n")
	echo >"$T/go-$n"
	for _ in $(seq 600); do [ -s "$T/k-$n" ] && break; sleep 0.05; done
	set -- $(cat "$T/k-$n" 2>/dev/null)
	t0=${2:-0}
	w=${3:-}
	[ "${1:-}" = 137 ] || fail "$n: the worker was not killed: $(cat "$T/k-$n" 2>/dev/null)"
	if wait_records "$id" 1; then
		set -- $(oom_records "$id")
		[ "$1" = 1 ] && [ "$2" = 1 ] && [ "$5" = ebpf ] && [ "$6" = "$w" ] &&
			pass "$n, without the cgroup's notification (a node-wide OOM kill's case): the victim program's record, its time $(ms_between "$t0" "$4") ms after the death, victim_pids $6 (worker: $w)" ||
			fail "$n, without the cgroup's notification: records $1, oom_kills $2, detected_by $5, victim_pids $6, worker $w"
	else
		fail "$n, without the cgroup's notification: no oom_kill record within 20 s of the kill"
	fi
	ctl kill "$id" >/dev/null
}
if [ "$src" = ebpf ]; then
	no_notify_kill default "$T/a.conf"
	printf '[agent]\nsample_interval = 1h\n[metering]\nbpf = raw_tp\n' >"$T/raw.conf"
	no_notify_kill raw_tp "$T/raw.conf"
	grep 'BPF metering loaded' "$T/agent.log" | tail -n1 | grep -q 'raw_tp.*OOM victims raw_tp' ||
		fail "raw_tp: $(grep 'BPF metering loaded' "$T/agent.log" | tail -n1)"
fi
finish
