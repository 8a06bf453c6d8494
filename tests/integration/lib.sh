# Shared helpers for the root integration tests (sourced). Each test gets its own agent:
# private socket, state dir and cgroup subtree, all removed on exit.
set -u
O=${CORRAL_O:-$PWD/.output}
CORRALD=$O/corrald
CORRALCTL=$O/corralctl
T=$(mktemp -d /tmp/corral-it.XXXXXX)
chmod 755 "$T"
SOCK=$T/corrald.sock
STATE=$T/state
SUBTREE=corral-it-$$
AGENT_PID=
FAILS=0

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
need_root() { [ "$(id -u)" = 0 ] || skip "needs root"; }
# free_port: a TCP port on 127.0.0.1 that nothing listens on now, from the kernel (a port drawn at
# random may be another listener's, and then the test talks to the wrong server)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# free_ports N: N such ports, all different (held together while the kernel picks them), on one
# line: read -r A B <<<"$(free_ports 2)"
# q SQL: one query on the test's SQLite collector database ($DB); wait_count SQL WANT SECONDS:
# q's count once it reaches WANT (or where it stood after SECONDS)
q() { sqlite3 "$DB" "$1" 2>/dev/null; }
wait_count() {
	local i n
	for i in $(seq $(($3 * 5))); do
		n=$(q "$1"); [ "${n:-0}" -ge "$2" ] && break; sleep 0.2
	done
	echo "${n:-0}"
}
# upload_state: the tail of the test's collector log and the agent's upload state, for a
# failure where records did not arrive
upload_state() { echo "collector: $(tail -n 5 "$T/collector.log"); agent: $(ctl status 2>&1 | grep -i -A3 upload)"; }
free_ports() {
	python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}

ctl() { "$CORRALCTL" --socket "$SOCK" "$@"; }
# the stand-in RAPL powercap tree: rapl_zone, rapl_set, rapl_tree, rapl_writer, rapl_stop
. "$(dirname "${BASH_SOURCE[0]}")/rapl_lib.sh"

# wait_up URL PID LOG [CURL ARGS...]: waits (up to 20 s) until URL answers and its port's
# listener is PID, the server this test started; else fails the test at once with the tail of
# LOG. (A server that did not come up, its port taken or an option refused, would otherwise
# show up later as records that never arrive; an answer from another listener is not ours.)
wait_up() {
	local url=$1 pid=$2 log=$3 port
	shift 3
	port=${url#*://}; port=${port%%/*}; port=${port##*:}
	for _ in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		curl -fs "$@" "$url" >/dev/null 2>&1 && ss -Hltnp "sport = :$port" | grep -q "pid=$pid," && return 0
		sleep 0.1
	done
	fail "$url: not up (pid $pid $(kill -0 "$pid" 2>/dev/null && echo running || echo exited)): $(tail -n 5 "$log" 2>/dev/null)"
	finish
}

# node_token TOKEN [LINE]: the collector's token file $T/tokens (mode 600) naming node it-node
# with TOKEN, and LINE after it if given; the agent's token file $T/token.
node_token() {
	printf 'node it-node %s\n' "$1" >"$T/tokens"
	[ -z "${2:-}" ] || printf '%s\n' "$2" >>"$T/tokens"
	chmod 600 "$T/tokens"
	echo "$1" >"$T/token"
	chmod 600 "$T/token"
}

# collector_up LOG [SERVE OPTIONS...]: corral-collector serve on 127.0.0.1:$PORT with the SQLite
# database $DB and the tokens of $T/tokens, its output appended to LOG; sets COLL to its pid and
# waits until it answers (wait_up). The test's EXIT trap stops it.
collector_up() {
	local log=$1
	shift
	"$O/corral-collector" serve --listen "127.0.0.1:$PORT" --db "sqlite:$DB" --tokens "$T/tokens" \
		"$@" >>"$log" 2>&1 &
	COLL=$!
	wait_up "http://127.0.0.1:$PORT/healthz" "$COLL" "$log"
}

start_agent() {
	"$CORRALD" --socket "$SOCK" --state-dir "$STATE" --cgroup-subtree "$SUBTREE" \
		--node it-node --kill-grace 2s "$@" >>"$T/agent.log" 2>&1 &
	AGENT_PID=$!
	for _ in $(seq 200); do
		[ -S "$SOCK" ] && ctl status >/dev/null 2>&1 && return 0
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "agent did not start:"; cat "$T/agent.log"; exit 1
}

stop_agent() {
	[ -n "$AGENT_PID" ] || return 0
	kill -TERM "$AGENT_PID" 2>/dev/null
	wait "$AGENT_PID" 2>/dev/null
	AGENT_PID=
}

cleanup() {
	stop_agent
	rapl_stop
	# Kill whatever is left in our subtree (only ours), then remove it.
	for h in /sys/fs/cgroup/*/"$SUBTREE" /sys/fs/cgroup/unified/"$SUBTREE"; do
		[ -d "$h" ] || continue
		for f in $(find "$h" -name cgroup.procs); do
			for p in $(cat "$f"); do kill -9 "$p" 2>/dev/null; done
		done
	done
	sleep 0.2
	for h in /sys/fs/cgroup/*/"$SUBTREE" /sys/fs/cgroup/unified/"$SUBTREE"; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	if [ "$FAILS" -gt 0 ] || [ -n "${KEEP_LOGS:-}" ]; then
		echo "--- agent log"; tail -n 50 "$T/agent.log" 2>/dev/null
	fi
	rm -rf "$T"
}
trap cleanup EXIT

# ---- the tasks_alive tests (sample_unchanged*, live_walk_skip): a SQLite collector's $DB -------
# wait_for COMMAND...: runs it every 0.2 s until it succeeds, 120 s at most (status 1 then).
wait_for() {
	for _ in $(seq 600); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}
# task_asleep TASK: the task has processes and every one of them is `sleep` (its cgroup under
# $TASKS_CG_ROOT: v1 cpuacct unless set).
task_asleep() {
	local p n=0
	for p in $(cat "${TASKS_CG_ROOT:-/sys/fs/cgroup/cpuacct}/$SUBTREE/$1/cgroup.procs"); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = sleep ] || return 1
		n=$((n + 1))
	done
	[ "$n" -gt 0 ]
}
# covered_after TASK T: the node.sample records after time T (ns) whose tasks_alive statement
# covers TASK (it was listed in the record the statement names, and is not excepted).
covered_after() {
	q "SELECT count(*) FROM records r WHERE r.type = 'node.sample' AND r.time_ns > $2
	   AND json_extract(r.body, '\$.tasks_alive.since') IN (SELECT json_extract(l.body, '\$.time')
	     FROM records l, json_each(json_extract(l.body, '\$.tasks_unchanged')) le
	     WHERE l.type = 'node.sample' AND json_extract(le.value, '\$[0]') = '$1')
	   AND NOT EXISTS (SELECT 1 FROM json_each(json_extract(r.body, '\$.tasks_alive.except')) x
	     WHERE x.value = '$1')"
}
# cpu_check WHAT TASK: the CPU time of TASK's last task.sample against what its cgroup shows
# from outside (cpuacct.usage), within 2% + 10 ms.
cpu_check() {
	local got want
	got=$(q "SELECT json_extract(body, '\$.usage.cpu_user_ns') + json_extract(body, '\$.usage.cpu_system_ns')
		FROM records WHERE type = 'task.sample' AND task_id = '$2' ORDER BY time_ns DESC LIMIT 1")
	want=$(cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$2/cpuacct.usage")
	python3 -c "import sys; g, w = int(sys.argv[1] or 0), int(sys.argv[2]); sys.exit(abs(g - w) > 0.02 * w + 1e7)" "$got" "$want" &&
		pass "$1: last task.sample CPU $got ns, its cgroup $want ns" ||
		fail "$1: last task.sample CPU '$got' ns, its cgroup $want ns"
}
# unsampled_after_listing TASK...: each sleeping TASK was listed unchanged, and got no
# task.sample after its first listing.
unsampled_after_listing() {
	local t first n
	for t in "$@"; do
		first=$(q "SELECT min(r.time_ns) FROM records r, json_each(json_extract(r.body, '\$.tasks_unchanged')) e
			WHERE r.type = 'node.sample' AND json_extract(e.value, '\$[0]') = '$t'")
		n=$(q "SELECT count(*) FROM records WHERE type = 'task.sample' AND task_id = '$t' AND time_ns > ${first:-0}")
		[ -n "$first" ] && [ "$n" = 0 ] && pass "sleeping task $t: no task.sample after its first listing" ||
			fail "sleeping task $t: first listed '$first', $n task.sample records after"
	done
}

# json FIELD.PATH < json  -> value (python3 is a test dependency)
jget() {
	python3 -c 'import sys,json
d=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else d)' "$1"
}

# run_wait ARGS... : runs corralctl run --wait, sets RC, ID, REASON (stderr); the task's stdio
# is /dev/null (not this shell's), so the id is the first line on stdout
run_wait() {
	local out
	out=$(ctl run --wait --stdin /dev/null --stdout /dev/null --stderr /dev/null "$@" 2>"$T/stderr")
	RC=$?
	ID=$(echo "$out" | head -n1)
	REASON=$(cat "$T/stderr")
}

status_of() { ctl show "$1" --json | jget exit.status; }

# live_walk_agent [LINE]: an agent with 1 s samples and its /metrics on $MPORT (the tests of the live
# walk's skip); skips where CPU is not accounted at exit, which the skip needs. metric NAME:
# a series' value there; cpu_of TASK: the task's CPU in its record (show); cg_cpu TASK: its
# v1 cgroup's cpuacct.usage read from outside
live_walk_agent() { # [LINE]: one more line of [agent] in its configuration
	MPORT=$(free_port)
	printf '[agent]\nsample_interval = 1s\n%s\n[metrics]\nlisten = %s\n' "${1:-}" "$MPORT" >"$T/agent.conf"
	start_agent --config "$T/agent.conf"
	grep -q "CPU and IO accounted at exit" "$T/agent.log" ||
		skip "accounting at exit not in use here: $(grep -m1 'BPF metering' "$T/agent.log")"
}
metric() { curl -fsS "http://127.0.0.1:$MPORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
cpu_of() {
	ctl show "$1" --json | python3 -c 'import json, sys
u = json.load(sys.stdin)["usage"]
print(u["cpu_user_ns"] + u["cpu_system_ns"])'
}
cg_cpu() { cat "/sys/fs/cgroup/cpuacct/$SUBTREE/$1/cpuacct.usage"; }

finish() {
	if [ "$FAILS" -gt 0 ]; then
		echo "$FAILS check(s) failed"
		exit 1
	fi
	echo "all checks passed"
	exit 0
}
