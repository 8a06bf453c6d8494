#!/bin/bash
# Network metering through the agent: the cgroup_skb programs are attached once to the parent
# of the task cgroups (the agent's unified subtree) and count per task cgroup id. A task sending
# 10 MiB over loopback TCP to a receiver outside it gets tx = payload + headers in its record,
# while a task running at the same time that sends nothing gets 0 (no mixing between siblings).
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.sh
need_root
[ -d /sys/fs/cgroup/unified ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || skip "no unified hierarchy for cgroup_skb"
start_agent
grep -q "BPF metering loaded" "$T/agent.log" || skip "BPF metering not loadable here: $(grep -i metering "$T/agent.log")"
grep -q "attaching per task" "$T/agent.log" && fail "root attach failed: $(grep 'attaching per task' "$T/agent.log")"

# receiver outside the task: counts payload bytes, prints them when the sender closes
python3 - >"$T/recv.out" 2>&1 <<'EOF2' &
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    n += len(b)
print(n, flush=True)
EOF2
RPID=$!
for _ in $(seq 100); do [ -s "$T/recv.out" ] && break; sleep 0.05; done
PORT=$(head -n1 "$T/recv.out")

IDQ=$(ctl run -- python3 -c 'import time; time.sleep(1.5)' | head -n1)
# The sender also reports the kernel's own count of the payload it put on the wire,
# retransmissions included (TCP_INFO tcpi_bytes_sent): a loaded host may retransmit.
run_wait -- python3 -c "
import socket, struct
s = socket.create_connection(('127.0.0.1', $PORT))
s.sendall(b'x' * (10 << 20)); s.shutdown(socket.SHUT_WR)
while s.recv(4096): pass
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
open('$T/sent', 'w').write(str(struct.unpack_from('Q', info, 200)[0] if len(info) >= 216 else 10 << 20))
s.close()"
[ "$RC" = 0 ] || fail "sender rc $RC: $REASON"
wait "$RPID"
GOT=$(sed -n 2p "$T/recv.out")
ctl wait "$IDQ" >/dev/null 2>&1
rec=$(ctl show "$ID" --json)
tx=$(echo "$rec" | jget usage.net_tx_bytes)
src=$(echo "$rec" | jget sources.net_tx_bytes)
pk=$(echo "$rec" | jget usage_detail.net_tx_packets)
qtx=$(ctl show "$IDQ" --json | jget usage.net_tx_bytes)
# headers: 52 bytes a packet on loopback IPv4 (IP 20 + TCP 20 + timestamps 12), SYN/FIN a few more
SENT=$(cat "$T/sent" 2>/dev/null || echo 0)
python3 - "$GOT" "$tx" "$pk" "$SENT" <<'EOF2'
import sys
got, tx, pk, sent = map(int, sys.argv[1:])
ref = sent + 52 * pk
ok = got == 10 << 20 and sent >= got and abs(tx - ref) <= 0.01 * ref
print("%s: tx %d vs bytes sent %d (payload %d + %d retransmitted) + 52 x %d packets = %d (ratio %.5f)"
      % ("ok" if ok else "FAIL", tx, sent, got, sent - got, pk, ref, tx / ref))
sys.exit(0 if ok else 1)
EOF2
[ $? = 0 ] || fail "net tx of the sender"
[ "$src" = ebpf ] && pass "sources.net_tx_bytes = ebpf" || fail "source '$src'"
[ "${qtx:-x}" = 0 ] && pass "quiet sibling task: net_tx_bytes 0" || fail "quiet task tx '$qtx'"

# Every map entry of a task is given back when it ends: with max_tasks 4, the 13th task
# in a row is still metered by BPF (the per-task net entries once leaked, so after max_tasks
# tasks every later one fell back to cgroup files).
stop_agent
MPORT=$(free_port)
start_agent --max-tasks 4 --metrics-listen 127.0.0.1:$MPORT
for i in $(seq 12); do
	run_wait -- /bin/true
	[ "$RC" = 0 ] || fail "task $i of 12: rc $RC: $REASON"
done
# The task's RSS is its own: /bin/true's high-water is about 1 MiB. The task child runs in
# the shim's address space until its execve (a vfork child); counting that one gave every
# task the shim's RSS (7 MiB here) as its peak.
peak=$(ctl show "$ID" --json | jget usage_detail.ebpf_rss_peak_bytes)
[ "${peak:-0}" -gt 0 ] && [ "$peak" -lt $((3 << 20)) ] &&
	pass "/bin/true: eBPF RSS peak $peak bytes (not the shim's)" ||
	fail "/bin/true: eBPF RSS peak '$peak' bytes"
# Process and address-space entries too (max_tasks 4 gives 256 of each): 10 tasks of 32
# processes each would fill them if an ended task's entries stayed behind.
for i in $(seq 10); do
	run_wait -- sh -c 'for i in $(seq 30); do /bin/true; done; python3 -c 1'
	[ "$RC" = 0 ] || fail "fork task $i of 10: rc $RC: $REASON"
done
full=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '$1 == "corral_bpf_map_full_total" {print $2}')
[ "$full" = 0 ] && pass "320 processes through max_tasks 4: no BPF map ever full" ||
	fail "corral_bpf_map_full_total '$full' after 10 fork tasks"
# accounting at exit: every exited thread's tail was read (the map of exited threads, 1024
# entries, never full)
lost=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | awk '$1 == "corral_bpf_exit_tail_lost_total" {print $2}')
[ "$lost" = 0 ] && pass "corral_bpf_exit_tail_lost_total 0 after 320 processes" ||
	fail "corral_bpf_exit_tail_lost_total '$lost' after 10 fork tasks"
# The programs gave every entry back themselves: no task's end had to walk a whole map (a
# vfork child's pages once bound the shim's address space to the task, and the per-CPU
# residue of an exiting mm kept its entry: then about 4 task ends in 10 swept "mms").
sweeps=$(curl -fs "http://127.0.0.1:$MPORT/metrics" | grep '^corral_bpf_map_sweeps_total')
[ "$(echo "$sweeps" | awk '{n++; s += $2} END {print n "/" s}')" = "2/0" ] &&
	pass "22 task ends, no BPF map sweep (metering and audit)" ||
	fail "map sweeps after 22 tasks: $(echo $sweeps)"
# CPU accounting mode the agent runs: exit (the default from Linux 6.2) or switch
acc=$(ctl status --json | jget cpu_accounting)
# and nothing of them is left in the per-process maps (no task runs now)
if command -v bpftool >/dev/null; then
	left=""
	maps="procs mms"
	# the map of exited threads exists with accounting at exit only
	[ "$acc" = exit ] && maps="$maps dying"
	# this agent's maps only (other agents on the host have maps of the same names)
	ids=$(sed -n 's/^map_id:[[:space:]]*//p' /proc/"$AGENT_PID"/fdinfo/* 2>/dev/null | sort -u)
	for m in $maps; do
		n=0 seen=0
		for id in $ids; do
			k=$(bpftool -j map show id "$id" 2>/dev/null | python3 -c '
import json, sys
print(json.load(sys.stdin).get("name", ""))' 2>/dev/null)
			[ "$k" = "$m" ] || continue
			seen=1
			k=$(bpftool -j map dump id "$id" 2>/dev/null |
				python3 -c 'import json, sys; print(len(json.load(sys.stdin)))' 2>/dev/null)
			n=$((n + ${k:-1000000}))
		done
		[ "$seen" = 1 ] || n="no map of the agent"
		[ "$n" = 0 ] || left="$left $m:$n"
	done
	[ -z "$left" ] && pass "BPF maps $maps empty after the tasks ended" ||
		fail "entries left after the tasks ended:$left"
fi
run_wait -- python3 -c "x = sum(range(200000))"
[ "$RC" = 0 ] || fail "13th task rc $RC: $REASON"
rec=$(ctl show "$ID" --json)
csrc=$(echo "$rec" | jget sources.cpu_user_ns)
nsrc=$(echo "$rec" | jget sources.net_tx_bytes)
grep -q "BPF metering unavailable for this task" "$T/agent.log" &&
	fail "a task lost BPF metering: $(grep -m1 'BPF metering unavailable for this task' "$T/agent.log")"
[ "$csrc" = ebpf ] && [ "$nsrc" = ebpf ] &&
	pass "13th task with max_tasks 4: cpu and net from ebpf (map entries given back)" ||
	fail "13th task with max_tasks 4: sources cpu '$csrc' net '$nsrc'"
# Accounting at exit (the default where the kernel allows it: nothing on sched_switch): the
# agent says so, a task's record waits for its threads' final figures (their last switch-out
# included), and those equal the cgroup's own CPU time. A process tree (a shell running 20
# short children and 2 busy threads) and a live read while it runs.
if [ "$acc" = exit ]; then
	pass "status: cpu_accounting exit"
	# the task's last step waits for the file $T/live-read (60 s at most): the live read below
	# happens while it runs whatever the host's load (a fixed sleep let a loaded host end the
	# task before the read, and the loop's bound ran out while the threads still burnt)
	IDL=$(ctl run -- python3 -c '
import os, sys, threading, time, subprocess
def burn(s):
    t = time.thread_time()
    while time.thread_time() - t < s: pass
ts = [threading.Thread(target=burn, args=(0.6,)) for _ in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
for _ in range(20): subprocess.run(["sh", "-c", "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done"])
end = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < end: time.sleep(0.05)' "$T/live-read" | head -n1)
	# live: the threads have burnt their CPU, the task still runs (it waits for the file)
	lc= state=
	for _ in $(seq 600); do
		live=$(ctl show "$IDL" --json)
		state=$(echo "$live" | jget state)
		[ "$state" = running ] || break
		lc=$(echo "$live" | jget usage_detail.ebpf_cpu_ns)
		[ "${lc:-0}" -gt 1000000000 ] && break
		sleep 0.1
	done
	touch "$T/live-read"
	[ "$state" = running ] || lc="(the task was $state before the read)"
	[ "${lc:-0}" -gt 1000000000 ] && pass "live read while running: ebpf cpu ${lc} ns" ||
		fail "live read: ebpf cpu '${lc}' ns, expected > 1 s of the 2 x 0.6 s burnt"
	ctl wait "$IDL" >/dev/null 2>&1
	rec=$(ctl show "$IDL" --json)
	msg=$(python3 - "$(echo "$rec" | jget usage_detail.ebpf_cpu_ns)" \
		"$(echo "$rec" | jget usage_detail.cgroup_cpu_ns)" \
		"$(echo "$rec" | jget usage_detail.ebpf_cpu_accounting)" \
		"$(echo "$rec" | jget usage_detail.forks)" <<'EOF2'
import sys
e, c, forks = int(sys.argv[1] or 0), int(sys.argv[2] or 0), int(sys.argv[4] or 0)
ok = sys.argv[3] == "exit" and c > 0 and abs(e - c) <= 0.01 * c and forks >= 20
print("accounting at exit: ebpf cpu %d ns vs cgroup %d ns (ratio %.5f), %d forks, mode %s"
      % (e, c, e / c if c else 0, forks, sys.argv[3]))
sys.exit(0 if ok else 1)
EOF2
	)
	[ $? = 0 ] && pass "$msg" || fail "$msg"
elif [ "$acc" = switch ] && ! awk -F. '{exit !($1 > 6 || ($1 == 6 && $2 >= 2))}' <<<"$(uname -r)"; then
	# the automatic fallback before Linux 6.2 (no task kfuncs): nothing of the above to check
	echo "note: status: cpu_accounting switch on $(uname -r) (accounting at exit needs 6.2):" \
		"its checks not run here"
else
	fail "status: cpu_accounting '$acc' on $(uname -r), expected exit (the default from 6.2)"
fi
finish
