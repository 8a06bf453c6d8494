#!/bin/bash
# Metering without BPF (corrald --no-bpf): CPU and memory from the cgroup, syscall IO bytes from
# taskstats exit records attributed to the task by the agent. Ground truth: every process of
# the task reports its own /proc/self/io wchar/rchar just before it exits; the record must sum
# to the same figures (each report adds its own few bytes after reading, hence the slack), and
# `sources` must say which mechanism measured each field.
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.sh
need_root
start_agent --no-bpf
grep -q "taskstats" "$T/agent.log" || skip "taskstats unavailable here: $(grep -i taskstats "$T/agent.log")"

cat >"$T/w.py" <<'EOF'
# Writes WRITE bytes to /dev/null from a process tree (parent, child, grandchild that exits
# first, and two threads), each process appending "wchar rchar" to REPORT just before exit.
import os, sys, threading
report, mib = sys.argv[1], int(sys.argv[2])
def write_mib(n):
    fd = os.open("/dev/null", os.O_WRONLY)
    buf = b"x" * (1 << 20)
    for _ in range(n):
        os.write(fd, buf)
    os.close(fd)
def done():
    # some CPU of its own first, so the part taskstats cannot see (the teardown after the
    # exit record, a few ms per process) is small beside what the CPU check compares
    sum(range(3000000))
    with open("/proc/self/io") as f:
        io = dict(l.split(": ") for l in f.read().splitlines())
    fd = os.open(report, os.O_WRONLY | os.O_APPEND)
    os.write(fd, ("%s %s\n" % (io["wchar"], io["rchar"])).encode())
    os._exit(0)
pid = os.fork()
if pid == 0:
    gpid = os.fork()
    if gpid == 0:
        write_mib(mib)
        done()
    os.waitpid(gpid, 0)
    write_mib(mib)
    done()
ts = [threading.Thread(target=write_mib, args=(mib,)) for _ in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
os.waitpid(pid, 0)
done()
EOF
chmod 644 "$T/w.py"
: >"$T/report"
chmod 666 "$T/report"

run_wait -- python3 "$T/w.py" "$T/report" 8
[ "$RC" = 0 ] || fail "task rc $RC: $REASON"
rec=$(ctl show "$ID" --json)
python3 - "$T/report" "$rec" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().split()
w, r = int(lines[-2]), int(lines[-1])  # the first process reports last: its figures include all
slack = 1024 * 5  # 5 threads, each rounded down to whole KiB
rec = json.loads(sys.argv[2]); u = rec["usage"]; s = rec.get("sources", {}); d = rec.get("usage_detail", {})
ok = True
def check(cond, msg):
    global ok
    print(("ok: " if cond else "FAIL: ") + msg)
    ok &= cond
check(len(lines) == 6, "3 processes reported (%d lines)" % (len(lines) // 2))
check(0 <= w - u["io_write_bytes"] <= slack,
      "io_write_bytes %d vs wchar %d of the first process (diff %d, 32 MiB written)" % (u["io_write_bytes"], w, u["io_write_bytes"] - w))
check(0 <= r - u["io_read_bytes"] <= slack,
      "io_read_bytes %d vs rchar %d of the first process (diff %d)" % (u["io_read_bytes"], r, u["io_read_bytes"] - r))
check(s.get("io_write_bytes") == "taskstats" and s.get("io_read_bytes") == "taskstats",
      "sources io = taskstats (%s, %s)" % (s.get("io_write_bytes"), s.get("io_read_bytes")))
check(s.get("cpu_user_ns") == "cgroup", "sources cpu = cgroup (%s)" % s.get("cpu_user_ns"))
check(s.get("memory_peak_bytes") == "cgroup", "sources memory_peak = cgroup (%s)" % s.get("memory_peak_bytes"))
check(d.get("taskstats_processes", 0) >= 3, "processes attributed: %s" % d.get("taskstats_processes"))
cg, ts = d.get("cgroup_cpu_ns", 0), d.get("taskstats_cpu_ns", 0)
# taskstats reads a thread's on-CPU time as it starts to exit (the mm teardown after it is
# not in the record), so it is a little below the cgroup's exact figure.
check(cg > 0 and 0.75 * cg <= ts <= cg * 1.01, "taskstats on-CPU %d vs cgroup %d" % (ts, cg))
sys.exit(0 if ok else 1)
EOF
[ $? = 0 ] || fail "taskstats figures"

# A second task at the same time must not get the first one's bytes (attribution by process tree).
: >"$T/report"
ID1=$(ctl run -- python3 "$T/w.py" "$T/report" 4 | head -n1)
ID2=$(ctl run -- sh -c 'exec python3 -c "import time; time.sleep(0.3)"' | head -n1)
ctl wait "$ID1" >/dev/null 2>&1
ctl wait "$ID2" >/dev/null 2>&1
w2=$(ctl show "$ID2" --json | jget usage.io_write_bytes)
w1=$(ctl show "$ID1" --json | jget usage.io_write_bytes)
if [ "${w2:-x}" -lt 65536 ] 2>/dev/null && [ "${w1:-0}" -ge $((16 << 20)) ]; then
	pass "concurrent tasks: $w1 bytes vs $w2 bytes (not mixed)"
else
	fail "concurrent tasks: task 1 $w1, task 2 $w2"
fi

# --no-taskstats: IO falls back to the cgroup's block counters, and sources say so.
stop_agent
start_agent --no-bpf --no-taskstats
run_wait -- sh -c 'head -c 1048576 /dev/zero > /dev/null'
src=$(ctl show "$ID" --json | jget sources.io_write_bytes)
[ "$src" = cgroup ] && pass "no taskstats: io source cgroup" || fail "no taskstats: io source '$src'"
finish
