#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Runs inside the test VM (tests/vm/run) as corral-vm-tests.service, after corrald and
# corral-collector have been started at boot by systemd, with cgroup v2. Each case prints
#   CORRAL-VM-RESULT: <name> PASS|FAIL|SKIP <detail>
# on the console (ttyS0); a failed case also prints its log as "CORRAL-VM-LOG: <name>: ..."
# lines. The last line is "CORRAL-VM-DONE rc=N". The unit powers the VM off afterwards.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0 LC_ALL=C.UTF-8

logs=/var/log/corral-vm
mkdir -p "$logs" /run/corral-vm
rc=0
only=$(cat /usr/lib/corral-vm/only 2>/dev/null || true)
selftest_hang=""
# A rerun after a hung boot (tests/vm/run) names its cases on the kernel command line.
for w in $(cat /proc/cmdline); do
	case $w in
	corral.only=*) only=$(echo "${w#corral.only=}" | tr ',' '\n') ;;
	# Harness self-test (tests/vm/run's rerun path): the runner itself stops in this case.
	corral.selftest_hang=*) selftest_hang=${w#corral.selftest_hang=} ;;
	esac
done
CASE_TIMEOUT=${CASE_TIMEOUT:-210}
UNIT_CG=/sys/fs/cgroup/system.slice/corrald.service
# Tasks live in a delegated transient scope of their own (agent/scope.c).
TASKS_CG=/sys/fs/cgroup/corral.slice/corral-tasks.scope

# The marker is the last thing on the console; then power off at once (the image is thrown
# away, nothing to unmount cleanly) when run by the VM unit.
finish() {
	echo "CORRAL-VM-DONE rc=$rc"
	if [ "${CORRAL_VM_POWEROFF:-0}" = 1 ]; then
		sync
		systemctl poweroff --force --force
	fi
}
trap finish EXIT
echo "CORRAL-VM-BEGIN uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r) systemd=$(systemctl --version | head -n1 | cut -d' ' -f2)"

# ---- helpers (used inside cases; a case fails by returning non-zero with a message) ------
# Cases run in a subshell: fail ends the case.
fail() { echo "FAIL-REASON: $*"; exit 1; }
# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds or the time is up.
wait_for() {
	local end=$(( $(date +%s) + $1 ))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.2
	done
}
main_pid() { systemctl show -p MainPID --value corrald.service; }
agent_active() { [ "$(systemctl is-active corrald.service)" = active ]; }
json_get() { # json_get EXPR (python expression over d) < json
	python3 -c 'import json,sys
d=json.load(sys.stdin)
try:
    v=eval(sys.argv[1])
except (KeyError, IndexError, TypeError):
    v=None
print("" if v is None else v)' "$1"
}
task_status() { corralctl show "$1" --json | json_get 'd["exit"]["status"]'; }
task_cgroup() { # the task's cgroup directory: from the record if it says, else by its name
	local cg
	cg=$(corralctl show "$1" --json 2>/dev/null | json_get 'd.get("cgroup")')
	if [ -n "$cg" ] && [ -d "/sys/fs/cgroup$cg" ]; then echo "/sys/fs/cgroup$cg"; return; fi
	find "$TASKS_CG" "$UNIT_CG" -mindepth 1 -maxdepth 4 -type d -name "$1" 2>/dev/null | head -n1
}
# agent_back_from PID: true once a new agent is active, or once a start failed with
# 219/CGROUP (the caller then sees it is not active).
agent_back_from() {
	local p
	p=$(main_pid)
	[ "$p" != 0 ] && [ "$p" != "$1" ] && agent_active && return 0
	[ "$(systemctl show -p ExecMainStatus --value corrald.service)" = 219 ]
}
has_cgroup() { [ -n "$(task_cgroup "$1")" ]; }
pid_alive() { kill -0 "$1" 2>/dev/null; }
need_agent() { agent_active || fail "corrald is not active ($(systemctl is-active corrald.service))"; }
# run_hold NAME: start a task that runs until /run/corral-vm/go-NAME exists, then exits 7.
run_hold() {
	corralctl run -- /bin/sh -c "while [ ! -e /run/corral-vm/go-$1 ]; do sleep 0.2; done; exit 7"
}
first_pid() { head -n1 "$1/cgroup.procs" 2>/dev/null; }

# run_case NAME: runs case_NAME with a timeout, prints the marker, keeps the log.
# kill_tree SIG PID: signal PID and all its descendants (children first are listed last, so
# a parent cannot respawn what was just killed).
kill_tree() {
	local sig=$1 pid=$2 c
	for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
		kill_tree "$sig" "$c"
	done
	kill -"$sig" "$pid" 2>/dev/null || true
}
# What a hung case was doing, on the console (the case log may never be read back).
case_timeout_report() { # case_timeout_report NAME PID
	{
		echo "== case $1 (pid $2) timed out after ${CASE_TIMEOUT}s; processes:"
		ps axf -o pid,ppid,stat,wchan:24,etime,args | grep -v '\[.*\]$' | head -n 60
		echo "== systemd jobs:"
		timeout 10 systemctl list-jobs --no-pager 2>&1
		echo "== corrald:"
		timeout 10 systemctl show -p MainPID -p ActiveState -p SubState -p Result corrald.service 2>&1
		echo "== case log (last 30 lines):"
		tail -n 30 "$logs/$1.log"
		echo "== journal (last 40 lines):"
		timeout 10 journalctl -b --no-pager -n 40 2>&1
	} 2>&1 | sed "s/^/CORRAL-VM-LOG: $1: timeout: /"
}

run_case() {
	local name=$1 out verdict detail t0 t1
	if [ -n "$only" ] && ! grep -qx "$name" <<<"$only"; then
		return 0
	fi
	t0=$(cut -d' ' -f1 /proc/uptime)
	out=$logs/$name.log
	local was_active=0
	agent_active && was_active=1
	# A start marker, so a guest that hangs inside a case still says which case it was.
	echo "CORRAL-VM-CASE: $name start (uptime $t0)"
	if [ "$name" = "$selftest_hang" ] && ! grep -q 'corral.only=' /proc/cmdline; then
		sleep infinity
	fi
	# Run in this shell (functions), bounded by a watchdog subshell.
	(
		set -o pipefail
		"case_$name"
	) >"$out" 2>&1 &
	local cpid=$! wpid
	(
		sleep "$CASE_TIMEOUT"
		echo "FAIL-REASON: case timed out after ${CASE_TIMEOUT}s" >>"$out"
		case_timeout_report "$name" "$cpid"
		kill_tree TERM "$cpid"
		sleep 2
		kill_tree KILL "$cpid"
	) &
	wpid=$!
	wait "$cpid"
	local crc=$?
	kill "$wpid" 2>/dev/null
	wait "$wpid" 2>/dev/null
	t1=$(cut -d' ' -f1 /proc/uptime)
	detail=$(grep -a '^DETAIL: ' "$out" | tail -n1 | sed 's/^DETAIL: //')
	case $crc in
	0) verdict=PASS ;;
	77) verdict=SKIP; detail=$(grep -a '^SKIP: ' "$out" | tail -n1 | sed 's/^SKIP: //') ;;
	*) verdict=FAIL; rc=1
	   detail=$(grep -a '^FAIL-REASON: ' "$out" | tail -n1 | sed 's/^FAIL-REASON: //')
	   [ -n "$detail" ] || detail="exit $crc" ;;
	esac
	echo "CORRAL-VM-RESULT: $name $verdict ${detail:-ok} ($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s)"
	if [ "$verdict" = FAIL ]; then
		tail -n 40 "$out" | sed "s/^/CORRAL-VM-LOG: $name: /"
	fi
	# A failed case must not take the following ones down with it.
	rm -f /run/systemd/system/corrald.service.d/90-vm-*.conf
	if [ "$was_active" = 1 ] && ! wait_for 10 agent_active; then
		# Last resort: kill what is left in the unit (tasks included) so systemd removes
		# its cgroup and a fresh agent can start.
		echo "CORRAL-VM-LOG: $name: agent not active after the case; killing the unit and starting afresh"
		systemctl daemon-reload
		systemctl stop corrald.service 2>/dev/null
		systemctl kill -s KILL corrald.service 2>/dev/null
		wait_for 10 sh -c '! grep -q . /sys/fs/cgroup/system.slice/corrald.service/cgroup.events 2>/dev/null || grep -q "populated 0" /sys/fs/cgroup/system.slice/corrald.service/cgroup.events'
		systemctl reset-failed corrald.service 2>/dev/null
		systemctl start corrald.service 2>/dev/null
	fi
}

# ---- cases ---------------------------------------------------------------------------------

# The harness itself: real systemd as PID 1, cgroup v2 only, controllers available.
case_boot_cgroup_v2() {
	[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm)"
	[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || fail "/sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup)"
	local c
	for c in cpu memory io pids; do
		grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || fail "controller $c missing"
	done
	getent group corral >/dev/null || fail "sysusers: group corral missing"
	getent passwd corral-collector >/dev/null || fail "sysusers: user corral-collector missing"
	echo "DETAIL: systemd $(systemctl --version | head -n1 | cut -d' ' -f2), kernel $(uname -r), $(systemctl is-system-running)"
}

# The layout corrald relies on, shown with systemd alone (no agent): a Delegate=yes unit whose
# main process sits in <unit>/agent and a "task" in <unit>/tasks/t1 with controllers enabled.
# `systemctl restart` must start a new main process and leave the task running.
case_systemd_delegated_restart() {
	local u=corral-vm-deleg
	cat >/run/corral-vm/deleg-main.sh <<'SH'
#!/bin/bash
set -x
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
base=${cg%/agent}
mkdir -p "$base/agent"
echo $$ >"$base/agent/cgroup.procs"
echo "+memory +pids +cpu" >"$base/cgroup.subtree_control"
if [ ! -d "$base/tasks/t1" ]; then
	mkdir -p "$base/tasks/t1"
	echo "+memory +pids +cpu" >"$base/tasks/cgroup.subtree_control"
	echo 32 >"$base/tasks/t1/pids.max"
	sh -c 'echo $$ >'"$base"'/tasks/t1/cgroup.procs; exec sleep 1000' &
fi
exec sleep infinity
SH
	chmod +x /run/corral-vm/deleg-main.sh
	cat >/run/systemd/system/$u.service <<UNIT
[Service]
ExecStart=/bin/bash /run/corral-vm/deleg-main.sh
Delegate=yes
KillMode=process
UNIT
	systemctl daemon-reload
	systemctl start $u || fail "start failed"
	local base=/sys/fs/cgroup/system.slice/$u.service
	if ! wait_for 20 grep -q . "$base/tasks/t1/cgroup.procs"; then
		systemctl status --no-pager $u
		journalctl -u $u --no-pager -n 30
		find "$base" -maxdepth 3
		fail "task cgroup not populated"
	fi
	local tpid pid1 pid2
	tpid=$(first_pid "$base/tasks/t1")
	pid1=$(systemctl show -p MainPID --value $u)
	systemctl restart $u
	local r=$?
	pid2=$(systemctl show -p MainPID --value $u)
	systemctl status --no-pager $u || true
	journalctl -u $u --no-pager -n 20 || true
	pid_alive "$tpid" || fail "task died on restart"
	[ "$r" = 0 ] && [ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ] ||
		{ systemctl kill -s KILL $u; systemctl reset-failed $u
		  fail "systemd $(systemctl --version | head -n1 | cut -d' ' -f2) cannot restart a delegated unit whose cgroup has controllers enabled and a live task below it (restart rc=$r, MainPID $pid1 -> $pid2; 219/CGROUP: DelegateSubgroup= needs systemd >= 254)"; }
	systemctl kill -s KILL $u
	systemctl stop $u
	echo "DETAIL: MainPID $pid1 -> $pid2, task $tpid alive"
}

# The alternative layout that does not depend on the systemd version: each task in its own
# transient scope (Delegate=yes) in corral.slice, created over D-Bus, outside the agent's
# unit. Restarting the agent's unit (even with KillMode=control-group) leaves it alone.
case_systemd_scope_restart() {
	local u=corral-vm-scopeagent pid1 pid2 tpid
	cat >/run/systemd/system/$u.service <<UNIT
[Service]
ExecStart=/bin/sleep infinity
UNIT
	systemctl daemon-reload
	systemctl start $u || fail "start failed"
	systemd-run --quiet --scope --unit=corral-vm-t1 --slice=corral -p Delegate=yes \
		/bin/sleep 1000 </dev/null >/dev/null 2>&1 &
	wait_for 20 sh -c '[ "$(systemctl is-active corral-vm-t1.scope)" = active ]' ||
		fail "transient scope did not start"
	tpid=$(first_pid /sys/fs/cgroup/corral.slice/corral-vm-t1.scope)
	pid1=$(systemctl show -p MainPID --value $u)
	systemctl restart $u || fail "restart failed"
	pid2=$(systemctl show -p MainPID --value $u)
	pid_alive "$tpid" || fail "scoped task died on restart"
	[ "$pid2" != "$pid1" ] || fail "no new main process"
	systemctl stop corral-vm-t1.scope $u
	echo "DETAIL: scoped task $tpid survived restart (MainPID $pid1 -> $pid2)"
}

case_agent_ready() {
	need_agent || return 1
	local pid st cg
	pid=$(main_pid)
	st=$(systemctl show -p StatusText --value corrald.service)
	systemctl status --no-pager corrald.service || true
	[ "$(systemctl show -p Type --value corrald.service)" = notify ] || fail "unit is not Type=notify"
	# Type=notify: active means READY=1 arrived. The agent stays in its unit's cgroup; tasks
	# and their supervisors go to the delegated scope corral-tasks.scope.
	cg=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
	case $cg in
	/system.slice/corrald.service*) ;;
	*) fail "agent runs in cgroup $cg, expected /system.slice/corrald.service" ;;
	esac
	[ "$(systemctl show -p Delegate --value corral-tasks.scope)" = yes ] ||
		fail "corral-tasks.scope is not delegated"
	grep -q memory "$TASKS_CG/tasks/cgroup.subtree_control" ||
		fail "memory controller not enabled for task cgroups"
	corralctl ps || fail "corralctl ps failed"
	# The installed units pass systemd's own check (unknown keys, bad values, programs that
	# are not there); silent when they do.
	local units out
	units=$(for u in corrald.service corral-collector.service; do
		systemctl show -p FragmentPath --value "$u"; done | tr "\n" " ")
	echo "DETAIL: systemd-analyze verify" $units
	out=$(systemd-analyze verify --man=no $units 2>&1) && [ -z "$out" ] ||
		fail "systemd-analyze verify $units: $out"
	# The audit programs (record budget, network policy) pass this kernel's verifier.
	journalctl -u corrald.service --no-pager | grep -q 'audit trail loaded' ||
		fail "audit trail not loaded: $(journalctl -u corrald.service --no-pager | grep -i audit | tail -n3)"
	# The installed launch spawner forks the supervisors (the agent's own fork is the
	# fallback): a task's shim is a child of corral-spawn, a child of the agent.
	local sp shim tid
	sp=$(pgrep -P "$pid" -x corral-spawn) || fail "no corral-spawn under MainPID $pid"
	# run returns once the task has exec'd: its shim exists and has named itself
	tid=$(corralctl run -- sleep 2) || fail "run failed"
	shim=$(pgrep -P "$sp" -x corral-shim | head -n1)
	[ -n "$shim" ] || fail "the task's shim is not a child of corral-spawn $sp"
	corralctl wait "$tid" >/dev/null || fail "wait $tid failed"
	echo "DETAIL: MainPID $pid in $cg; spawner $sp forked shim $shim; tasks in $TASKS_CG/tasks${st:+; status: $st}"
}

# The audit programs, each loaded alone by the helper, within a budget of the verifier's
# work on this kernel (Linux 6.1: an older verifier that prunes less than the build host's);
# see docs/audit.md, "Verifier cost". The figures are in the case's log.
case_bpf_verify() {
	local h=/usr/lib/corral-vm/o/tests/integration/helper_bpf_verify out r
	out=$("$h" --max-insns "${CORRAL_VM_BPF_MAX_INSNS:-50000}" --max-ms 20000 2>&1)
	r=$?
	echo "$out"
	[ "$r" = 0 ] || fail "$(grep -E 'FAIL' <<<"$out" | head -n3 | tr '\n' ';')"
	echo "DETAIL: $(awk '/verified_insns=/ { split($3, v, "="); split($7, l, "=");
		if (v[2] + 0 > mi) { mi = v[2] + 0; pi = $1 } if (l[2] + 0 > ml) { ml = l[2] + 0; pl = $1 } }
		END { printf "most verified insns %d (%s), longest load %.0f ms (%s)", mi, pi, ml, pl }' <<<"$out")"
}

case_oom_killed() {
	need_agent || return 1
	local out r
	out=$(corralctl run --wait --memory 64M -- python3 -c 'b = b"x" * (512 << 20); print(len(b))' 2>&1)
	r=$?
	echo "$out"
	[ "$r" = 137 ] || fail "exit code $r, expected 137 (SIGKILL)"
	grep -q oom_killed <<<"$out" || fail "no oom_killed reason on stderr: $out"
	local id
	id=$(grep -o 't-[A-Za-z0-9_-]*' <<<"$out" | head -n1)
	if [ -n "$id" ]; then
		[ "$(task_status "$id")" = oom_killed ] || fail "show $id: exit.status $(task_status "$id")"
	fi
	echo "DETAIL: exit 137, oom_killed"
}

# OOM kills a task survives, on v2 under systemd: reported as they happen (the agent's inotify
# watch on memory.events, and the meter's OOM victim program where the kernel has one), not at
# the next sample. The agent runs with samples an hour apart (a drop-in with its own config);
# a worker of a task is killed over the task's memory.max and the task goes on. The audit.limit
# "oom_kill" record must reach the collector within 30 s, its oom_kills equal to memory.events
# oom_kill read here, its victim the worker's pid where the agent loaded the victim program.
case_oom_events_v2() {
	need_agent || return 1
	local d=/run/systemd/system/corrald.service.d conf=/run/corral-vm/oom-corrald.conf
	local id cg k r src=cgroup
	mkdir -p "$d"
	sed 's/^sample_interval = .*/sample_interval = 1h/' /etc/corral/corrald.conf >"$conf"
	grep -q '^sample_interval = 1h' "$conf" || fail "no sample_interval line to change"
	printf '[Service]\nExecStart=\nExecStart=/usr/sbin/corrald --config %s\n' "$conf" \
		>"$d/90-vm-oom.conf"
	systemctl daemon-reload
	systemctl restart corrald.service
	wait_for 60 agent_active || fail "corrald with samples an hour apart did not start"
	journalctl -u corrald.service --no-pager | grep 'BPF metering loaded' | tail -n1
	journalctl -u corrald.service --no-pager | grep 'BPF metering loaded' | tail -n1 |
		grep -q 'OOM victims \(tp_btf\|raw_tp\)' && src=ebpf
	rm -f /run/corral-vm/oom-go /run/corral-vm/oom-k
	id=$(corralctl run --memory 64M --swap 0 -- sh -c '
while [ ! -e /run/corral-vm/oom-go ]; do sleep 0.1; done
python3 -c "x = b\"x\" * (512 << 20)" & p=$!; wait $p; echo $? $(date +%s%N) $p >/run/corral-vm/oom-k.tmp
mv /run/corral-vm/oom-k.tmp /run/corral-vm/oom-k
exec sleep 300') || fail "run failed"
	echo "task $id"
	wait_for 10 has_cgroup "$id" || fail "no cgroup for $id"
	cg=$(task_cgroup "$id")
	touch /run/corral-vm/oom-go
	wait_for 60 test -s /run/corral-vm/oom-k || fail "the worker did not end"
	set -- $(cat /run/corral-vm/oom-k)
	echo "worker: exit $1, death at $2 ns, pid $3"
	[ "$1" = 137 ] || fail "the worker was not killed: exit $1"
	k=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.events")
	echo "memory.events oom_kill $k"
	local t0=$2 wpid=$3
	oomrec() {
		corral-collector dump --db sqlite:/var/lib/corral-collector/records.db \
			--type audit.limit --task "$id" --format json >/run/corral-vm/oom.json \
			2>/run/corral-vm/oom.err || return 1
		grep -q '"oom_kill"' /run/corral-vm/oom.json
	}
	wait_for 30 oomrec || { cat /run/corral-vm/oom.err; journalctl -u corrald --no-pager -n 30
		fail "no oom_kill record of $id in the collector within 30 s (samples 1 h apart)"; }
	r=$(python3 - "$t0" /run/corral-vm/oom.json <<'PY'
import datetime, json, sys
for line in open(sys.argv[2]):
    rec = json.loads(line)
    ev = rec.get("event") or {}
    if ev.get("limit") != "oom_kill":
        continue
    d = datetime.datetime.strptime(rec["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)
    ns = int(d.timestamp()) * 10**9 + d.microsecond * 1000
    print(ev.get("oom_kills"), ev.get("detected_by"),
          ",".join(str(p) for p in ev.get("victim_pids", [])) or "-",
          "%.1f" % ((ns - int(sys.argv[1])) / 1e6))
    break
PY
)
	echo "record: oom_kills detected_by victim_pids ms_after_death: $r"
	set -- $r
	corralctl kill "$id" >/dev/null 2>&1
	rm -f "$d/90-vm-oom.conf"
	systemctl daemon-reload
	systemctl restart corrald.service
	wait_for 60 agent_active || fail "corrald did not come back with its own config"
	[ "${1:-}" = "$k" ] && [ "$k" = 1 ] ||
		fail "record oom_kills ${1:-none}, memory.events oom_kill $k"
	if [ "$src" = ebpf ]; then
		[ "$2" = ebpf ] && [ "$3" = "$wpid" ] ||
			fail "detected_by $2, victim_pids $3, the worker's pid $wpid (victim program loaded)"
	fi
	echo "DETAIL: oom_kill record at $4 ms from the shell's clock read after the worker's death (samples 1 h apart), oom_kills $1 = memory.events, detected_by $2, victim $3 (worker $wpid)"
}

case_cgroup_limits() {
	need_agent || return 1
	local id cg dev
	dev=$(lsblk -dno MAJ:MIN /dev/vda 2>/dev/null | tr -d ' ')
	[ -n "$dev" ] || dev=$(printf '%d:%d' "0x$(stat -c %t /dev/vda)" "0x$(stat -c %T /dev/vda)")
	id=$(corralctl run --memory 64M --cpus 0.5 --pids 16 --io-write-bps /dev/vda=1048576 \
		--io-read-bps /dev/vda=2097152 -- sleep 300) || fail "run failed"
	echo "task $id"
	cg=$(task_cgroup "$id")
	[ -n "$cg" ] || cg=$(wait_for 10 has_cgroup "$id"; task_cgroup "$id")
	[ -n "$cg" ] || fail "no cgroup named $id below $TASKS_CG"
	wait_for 10 grep -q . "$cg/cgroup.procs" || fail "task cgroup $cg has no process"
	grep -H . "$cg"/memory.max "$cg"/cpu.max "$cg"/pids.max "$cg"/io.max
	[ "$(cat "$cg/memory.max")" = 67108864 ] || fail "memory.max $(cat "$cg/memory.max")"
	[ "$(cat "$cg/cpu.max")" = "50000 100000" ] || fail "cpu.max '$(cat "$cg/cpu.max")'"
	[ "$(cat "$cg/pids.max")" = 16 ] || fail "pids.max $(cat "$cg/pids.max")"
	grep -q "^$dev .*wbps=1048576" "$cg/io.max" || fail "io.max '$(cat "$cg/io.max")' lacks $dev wbps=1048576"
	grep -q "^$dev .*rbps=2097152" "$cg/io.max" || fail "io.max '$(cat "$cg/io.max")' lacks $dev rbps=2097152"
	corralctl kill "$id"
	timeout 30 corralctl wait "$id"
	echo "DETAIL: memory.max cpu.max pids.max io.max set in ${cg#/sys/fs/cgroup}"
}

case_pids_limit() {
	need_agent || return 1
	# 40 forks under pids.max=16: the ones past the limit fail with EAGAIN inside the task.
	local out r n
	rm -f /run/corral-vm/pids.out
	out=$(corralctl run --wait --pids 16 -- python3 -c '
import os, time
pids = []
for i in range(40):
    try:
        p = os.fork()
    except OSError:
        break
    if p == 0:
        time.sleep(30)
        os._exit(0)
    pids.append(p)
with open("/run/corral-vm/pids.out", "w") as f:
    f.write("started=%d\n" % len(pids))
for p in pids:
    os.kill(p, 9)
' 2>&1)
	r=$?
	echo "$out"
	# Task output is not forwarded to corralctl: the task writes its count to a file.
	n=$(sed -n 's/.*started=\([0-9]*\).*/\1/p' /run/corral-vm/pids.out 2>/dev/null)
	[ -n "$n" ] || fail "no output (rc=$r)"
	[ "$n" -lt 16 ] || fail "$n processes started under pids.max=16"
	[ "$r" = 0 ] || fail "exit $r"
	echo "DETAIL: $n of 40 forks succeeded under pids.max=16"
}

case_time_limit() {
	need_agent || return 1
	local out r t0 t1 id
	t0=$(date +%s)
	out=$(corralctl run --wait --time 1 -- sleep 30 2>&1)
	r=$?
	t1=$(date +%s)
	echo "$out"
	[ $((t1 - t0)) -lt 20 ] || fail "took $((t1 - t0))s for a 1 s limit"
	[ "$r" -gt 128 ] || fail "exit code $r, expected 128+signal"
	grep -q time_limit <<<"$out" || fail "no time_limit reason on stderr: $out"
	id=$(grep -o 't-[A-Za-z0-9_-]*' <<<"$out" | head -n1)
	if [ -n "$id" ]; then
		[ "$(task_status "$id")" = time_limit ] || fail "show $id: exit.status $(task_status "$id")"
	fi
	echo "DETAIL: killed after $((t1 - t0))s, exit $r, time_limit"
}

# A task started before an agent restart keeps running and its end record is complete.
survive_check() { # survive_check NAME ACTION
	local name=$1 action=$2 id cg tpid pid1 pid2 r st code
	id=$(run_hold "$name") || fail "run failed"
	echo "task $id"
	echo "$id" >"/run/corral-vm/task-$name"
	cg=$(task_cgroup "$id")
	[ -n "$cg" ] || cg=$(wait_for 10 has_cgroup "$id"; task_cgroup "$id")
	[ -n "$cg" ] || fail "no cgroup named $id below $TASKS_CG"
	wait_for 10 grep -q . "$cg/cgroup.procs" || fail "task cgroup $cg has no process"
	tpid=$(first_pid "$cg")
	pid1=$(main_pid)
	case $action in
	restart) systemctl restart corrald.service ||
		{ systemctl status --no-pager corrald.service; journalctl -u corrald --no-pager -n 15
		  fail "systemctl restart failed: $(journalctl -u corrald --no-pager -n 30 | grep -o 'status=[0-9]*/[A-Z]*' | tail -n1)"; } ;;
	kill9) kill -9 "$pid1" ;;
	esac
	# A new agent, started by systemd (restart job, or Restart=on-failure after SIGKILL);
	# a start that failed at the cgroup step (219/CGROUP) will not get better by waiting.
	wait_for 60 agent_back_from "$pid1"
	[ "$(main_pid)" != "$pid1" ] && [ "$(main_pid)" != 0 ] && agent_active ||
		fail "agent not back after $action (MainPID $(main_pid), $(systemctl is-active corrald.service), ExecMainStatus=$(systemctl show -p ExecMainStatus --value corrald.service))"
	pid2=$(main_pid)
	pid_alive "$tpid" || fail "task process $tpid died across $action"
	corralctl ps | grep -q "$id" || fail "re-adopted agent does not list $id"
	touch "/run/corral-vm/go-$name"
	timeout 60 corralctl wait "$id"
	r=$?
	[ "$r" = 7 ] || fail "corralctl wait $id: exit $r, expected 7"
	corralctl show "$id" --json >"/run/corral-vm/show-$name.json" || fail "show failed"
	cat "/run/corral-vm/show-$name.json"
	st=$(json_get 'd["exit"]["status"]' <"/run/corral-vm/show-$name.json")
	code=$(json_get 'd["exit"]["code"]' <"/run/corral-vm/show-$name.json")
	[ "$st" = exited ] && [ "$code" = 7 ] || fail "record exit {status: $st, code: $code}, expected exited/7"
	echo "DETAIL: task $tpid survived ($action: MainPID $pid1 -> $pid2), end record exited/7"
}
case_restart_keeps_tasks() { need_agent || return 1; survive_check restart restart; }
case_kill9_keeps_tasks() { need_agent || return 1; survive_check kill9 kill9; }

case_watchdog() {
	need_agent || return 1
	local d=/run/systemd/system/corrald.service.d pid1 pid2 r=0
	mkdir -p "$d"
	printf '[Service]\nWatchdogSec=5s\nTimeoutAbortSec=5s\n' >"$d/90-vm-watchdog.conf"
	systemctl daemon-reload
	systemctl restart corrald.service || fail "restart with WatchdogSec=5s failed"
	pid1=$(main_pid)
	# The agent must keep pinging: alive after more than 2 watchdog periods.
	sleep 12
	[ "$(main_pid)" = "$pid1" ] || { r=1; echo "FAIL-REASON: healthy agent was restarted by the watchdog (no WATCHDOG=1?)"; }
	if [ "$r" = 0 ]; then
		kill -STOP "$pid1"
		wait_for 60 sh -c "p=\$(systemctl show -p MainPID --value corrald.service); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid1 ] &&
			[ \"\$(systemctl is-active corrald.service)\" = active ]" ||
			{ r=1; echo "FAIL-REASON: hung agent not replaced (MainPID $(main_pid))"; }
		pid2=$(main_pid)
		journalctl -u corrald.service --no-pager -n 30 | tee /run/corral-vm/watchdog.journal
		grep -qi watchdog /run/corral-vm/watchdog.journal ||
			{ [ "$r" = 1 ] || { r=1; echo "FAIL-REASON: journal does not mention the watchdog"; }; }
	fi
	rm -f "$d/90-vm-watchdog.conf"
	systemctl daemon-reload
	systemctl restart corrald.service
	[ "$r" = 0 ] || return 1
	echo "DETAIL: pinging agent kept; SIGSTOPped agent $pid1 replaced by $pid2"
}

case_stop_clean() {
	need_agent || return 1
	local id tpid cg res st
	id=$(run_hold stop) || fail "run failed"
	cg=$(task_cgroup "$id")
	[ -n "$cg" ] || cg=$(wait_for 10 has_cgroup "$id"; task_cgroup "$id")
	[ -n "$cg" ] || fail "no cgroup named $id below $TASKS_CG"
	wait_for 10 grep -q . "$cg/cgroup.procs" || fail "task cgroup has no process"
	tpid=$(first_pid "$cg")
	systemctl stop corrald.service
	res=$(systemctl show -p Result --value corrald.service)
	st=$(systemctl show -p ExecMainStatus --value corrald.service)
	systemctl status --no-pager corrald.service
	[ "$(systemctl is-active corrald.service)" = inactive ] || fail "state $(systemctl is-active corrald.service) after stop"
	[ "$res" = success ] || fail "Result=$res ExecMainStatus=$st after stop"
	pid_alive "$tpid" || fail "task died on stop (KillMode)"
	systemctl start corrald.service || fail "start after stop failed"
	touch /run/corral-vm/go-stop
	timeout 60 corralctl wait "$id"
	[ $? = 7 ] || fail "task end not reported after stop/start"
	echo "DETAIL: stopped with Result=success, status $st; task survived and was reaped after start"
}

case_collector_ingest() {
	need_agent || return 1
	[ "$(systemctl is-active corral-collector.service)" = active ] ||
		{ systemctl status --no-pager corral-collector.service; journalctl -u corral-collector --no-pager -n 30
		  fail "corral-collector is $(systemctl is-active corral-collector.service)"; }
	local id want f
	id=$(corralctl run --wait -- /bin/true 2>&1 | grep -o 't-[A-Za-z0-9_-]*' | head -n1)
	[ -n "$id" ] || id=$(corralctl run -- /bin/true) || fail "run failed"
	timeout 30 corralctl wait "$id" >/dev/null 2>&1
	want="$id"
	# The tasks that lived through restarts must have complete end records too.
	for f in /run/corral-vm/task-*; do [ -e "$f" ] && want="$want $(cat "$f")"; done
	echo "expecting task.end for: $want"
	dump() {
		corral-collector dump --db sqlite:/var/lib/corral-collector/records.db --type task.end \
			--format json >/run/corral-vm/dump.json 2>/run/corral-vm/dump.err || return 1
		local t
		for t in $want; do grep -q "$t" /run/corral-vm/dump.json || return 1; done
	}
	if ! wait_for 60 dump; then
		cat /run/corral-vm/dump.err
		head -c 3000 /run/corral-vm/dump.json
		journalctl -u corral-collector -u corrald --no-pager -n 40
		fail "task.end records of $want not in the collector after 60 s"
	fi
	echo "DETAIL: $(echo "$want" | wc -w) task.end records ingested"
}

# The metering accuracy tests of the metering issue, on cgroup v2 and the guest's stock
# kernel: the agent has its BPF programs loaded, a task's record has eBPF CPU equal to the
# cgroup's cpu.stat usage and write(2) bytes exact, then tests/integration/metering_accuracy.sh
# (installed with its helpers) compares CPU, RSS peak, IO, network and forks with cpu.stat
# usage_usec, memory.peak, /proc/PID/io and the received payload, in tp_btf and raw_tp modes.
case_metering_v2() {
	need_agent || return 1
	local st id rec
	st=$(systemctl show -p StatusText --value corrald.service)
	case $st in
	*"metering tp_btf"* | *"metering raw_tp"*) ;;
	*)
		echo "agent status: $st; libbpf says:"
		timeout 8 env CORRAL_BPF_DEBUG=1 /usr/sbin/corrald --socket /run/corral-dbg.sock \
			--state-dir /run/corral-dbg --cgroup-subtree corral-dbg --node dbg 2>&1 |
			grep -vE 'CO-RE relocating|relo #|skipped loading' |
			grep -iE -B6 -A2 'fail|error|invalid|unknown|unsupported|-22|warn|not found' |
			head -n 120
		fail "BPF metering not loaded: $st"
		;;
	esac
	id=$(corralctl run --wait --stdout /dev/null -- python3 -c '
import threading, time
def burn():
    t = time.time()
    while time.time() - t < 1.5: pass
ts = [threading.Thread(target=burn) for _ in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
with open("/dev/null", "wb") as f:
    for _ in range(50): f.write(b"x" * (1 << 20))
' 2>/dev/null | head -n1)
	rec=$(corralctl show "$id" --json)
	echo "$rec" | python3 -c '
import json, sys
r = json.load(sys.stdin); d = r["usage_detail"]; u = r["usage"]
cpu = d["ebpf_cpu_ns"] / d["cgroup_cpu_ns"]
print("DETAIL: agent record: cpu ebpf/cgroup %.4f, io_write_bytes %d, sources cpu %s io %s" %
      (cpu, u["io_write_bytes"], r["sources"]["cpu_user_ns"], r["sources"]["io_write_bytes"]))
ok = abs(cpu - 1) <= 0.01 and u["io_write_bytes"] >= 50 << 20 and r["sources"]["cpu_user_ns"] == "ebpf"
sys.exit(0 if ok else 1)' || fail "agent record accuracy out of bounds"
	CORRAL_O=/usr/lib/corral-vm/o timeout 600 /usr/lib/corral-vm/metering_accuracy.sh \
		>/run/corral-vm/accuracy.log 2>&1
	local r=$?
	grep -E "ratio|diff=|forks=|attach mode|passed|FAIL|SKIP" /run/corral-vm/accuracy.log | head -n 60
	# failures first in full (the summary above is cut at 60 lines)
	grep -iE -B3 "fail" /run/corral-vm/accuracy.log | grep -v "^ok" | head -n 60 | sed 's/^/FAILED-LINE: /'
	[ "$r" = 0 ] || fail "metering_accuracy.sh on v2: rc $r"
	echo "DETAIL: $(tail -n 1 /run/corral-vm/accuracy.log); $(awk '
		/attach mode:/ { mode = $3; sub(/,/, "", mode) }
		/ratio=/ { for (i = 1; i <= NF; i++) if ($i ~ /^ratio=/) printf "%s %s %s, ", mode, $1, substr($i, 7) }
		/ diff=/ { for (i = 1; i <= NF; i++) if ($i ~ /^diff=/) printf "%s %s %s, ", mode, $1, $i }
		' /run/corral-vm/accuracy.log)"
}

# GPUs under systemd on v2, with the stand-in NVML (two GPUs) given to the installed agent by a
# drop-in: the device-policy program attached in the delegated scope denies the unallocated
# GPU's node, one program per distinct policy (the metrics), and the agent back as it was.
gpu_metric() {
	python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode().splitlines():
    f = l.split()
    if len(f) == 2 and f[0] == sys.argv[1]: print(f[1])' "$1"
}
gpu_restore() {
	rm -rf /run/systemd/system/corrald.service.d /dev/corral-vm-gpu /dev/nvidia0 /dev/nvidia1
	systemctl daemon-reload
	systemctl restart corrald.service
	wait_for 60 agent_active
}
case_gpu_v2() {
	need_agent || return 1
	local d=/run/systemd/system/corrald.service.d dev=/dev out loads
	local uuid0=GPU-11111111-2222-3333-4444-555555555555 ids=() id
	mkdir -p "$d" "$dev"
	cat >"$d/gpu.conf" <<CONF
[Service]
Environment=CORRAL_NVML_LIBRARY=/usr/lib/corral-vm/o/tests/gpu/libnvidia-ml.so.1
Environment=CORRAL_FAKE_NVML=/usr/lib/corral-vm/nvml-2gpu.txt
CONF
	trap gpu_restore EXIT
	systemctl daemon-reload
	systemctl restart corrald.service
	wait_for 60 agent_active || fail "agent not back after the restart with GPUs"
	[ "$(gpu_metric corral_gpus)" = 2 ] ||
		fail "corral_gpus '$(gpu_metric corral_gpus)'; journal: $(journalctl -b -u corrald --no-pager | grep -i gpu | tail -n 5)"
	# on devtmpfs: /run is mounted nodev (EACCES for any device node there); at the usual
	# names, which a task's private /dev binds for its GPUs
	mknod "$dev/nvidia0" c 195 0
	mknod "$dev/nvidia1" c 195 1
	chmod 666 "$dev"/nvidia0 "$dev"/nvidia1
	# the private /dev (the default) has the task's GPU node only
	corralctl run --wait --gpus 1 --stdout /run/corral-vm/gpu1p.out -- sh -c \
		"ls /dev; cat $dev/nvidia0 2>&1; cat $dev/nvidia1 2>&1; true" ||
		fail "--gpus 1 task (private /dev) failed"
	out=$(cat /run/corral-vm/gpu1p.out)
	echo "$out"
	grep -q 'nvidia0.*No such device or address' <<<"$out" && grep -q 'nvidia1.*No such file or directory' <<<"$out" ||
		fail "private /dev with GPU 0: $out"
	corralctl run --wait --stdout /run/corral-vm/gpu0p.out -- sh -c "ls /dev | grep -c nvidia; true" ||
		fail "task without GPUs (private /dev) failed"
	[ "$(cat /run/corral-vm/gpu0p.out)" = 0 ] || fail "private /dev without GPUs: $(cat /run/corral-vm/gpu0p.out) nvidia nodes"
	# the device policy on the node's /dev: the stand-in hands out GPU 0 (minor 0) first: it
	# reaches the (absent) driver, GPU 1 not
	corralctl run --wait --no-private-dev --gpus 1 --stdout /run/corral-vm/gpu1.out -- sh -c \
		"echo \$CUDA_VISIBLE_DEVICES; cat $dev/nvidia0 2>&1; cat $dev/nvidia1 2>&1; true" ||
		fail "--gpus 1 task failed"
	out=$(cat /run/corral-vm/gpu1.out)
	echo "$out"
	grep -qx "$uuid0" <<<"$out" || fail "CUDA_VISIBLE_DEVICES: $out"
	grep -q 'nvidia0.*No such device or address' <<<"$out" && grep -q 'nvidia1.*Operation not permitted' <<<"$out" ||
		fail "device policy with GPU 0: $out"
	corralctl run --wait --no-private-dev --stdout /run/corral-vm/gpu0.out -- sh -c "cat $dev/nvidia0 2>&1; true" ||
		fail "task without GPUs failed"
	out=$(cat /run/corral-vm/gpu0.out)
	grep -q 'nvidia0.*Operation not permitted' <<<"$out" || fail "device policy without GPUs: $out"
	for _ in 1 2 3; do
		id=$(corralctl run -- sleep 30 2>/dev/null | head -n1) && ids+=("$id")
	done
	id=$(corralctl run --gpus 1 -- sleep 30 2>/dev/null | head -n1) && ids+=("$id")
	loads=$(gpu_metric corral_gpu_device_program_loads_total)
	[ "$(gpu_metric corral_gpus_allocated)" = 1 ] || fail "corral_gpus_allocated '$(gpu_metric corral_gpus_allocated)'"
	for id in "${ids[@]}"; do corralctl kill "$id" --signal KILL >/dev/null 2>&1; done
	for id in "${ids[@]}"; do corralctl wait "$id" >/dev/null 2>&1; done
	# policies used: GPU 0, none: two loads for six tasks
	[ "$loads" = 2 ] || fail "device programs loaded: '$loads', want 2 (GPU 0 and none) for 6 tasks"
	echo "DETAIL: 2 GPUs (stand-in NVML) under systemd: a GPU 0 task's private /dev has nvidia0 only, a task without GPUs none; on the node's /dev GPU 1's node EPERM for a GPU 0 task, GPU 0's for a task without GPUs; 2 device programs loaded for 6 tasks"
}

# The task sandbox (docs/sandbox.md) on cgroup v2 under systemd (Delegate=yes): every write a
# task once made to leave its limits must fail, for a root and a non-root task, each checked
# from outside (memory.max, cgroup.procs, the spool, /etc/passwd as the node reads them); and no
# process of a task outlives `corralctl kill`.
case_sandbox_v2() {
	need_agent || return 1
	local who id out cg pid left=$((900000 + $$)) u=corral-vm-user
	[ "$(corralctl status --json 2>/dev/null | json_get 'd["sandbox"]["mount_namespace"]')" = on ] ||
		fail "corralctl status: sandbox.mount_namespace is not on: $(corralctl status --json | json_get 'd.get("sandbox")')"
	id -u $u >/dev/null 2>&1 || useradd -M -r -s /bin/sh $u || fail "useradd $u"
	local passwd0
	passwd0=$(sha256sum </etc/passwd)
	cat >/run/corral-vm/escape.sh <<'SH'
cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
try() { name=$1; shift; if ( "$@" ) 2>/dev/null; then echo "$name:ESCAPED"; else echo "$name:ok"; fi; }
try limit sh -c "echo 2147483648 > /sys/fs/cgroup$cg/memory.max"
try move_parent sh -c "echo $$ > /sys/fs/cgroup${cg%/*}/cgroup.procs"
try move_root sh -c "echo $$ > /sys/fs/cgroup/cgroup.procs"
try subcgroup mkdir "/sys/fs/cgroup$cg/escape"
try spool sh -c "echo x > /var/lib/corral/spool/escape"
try passwd sh -c ": >> /etc/passwd"
echo "pid $$ cg $cg"
# a process of its own session, that would outlive the task if it left the cgroup
setsid sleep "$LEFT" </dev/null >/dev/null 2>&1 &
echo done
exec sleep 1000
SH
	chmod 755 /run/corral-vm/escape.sh
	mkdir -p /var/lib/corral/spool
	for who in root $u; do
		out=/run/corral-vm/escape-$who.out
		: >"$out"
		chown $who "$out"
		id=$(corralctl run --user $who --memory 100M --workdir / --stdout "$out" \
			--env LEFT=$left -- /bin/sh /run/corral-vm/escape.sh) || fail "$who: run failed"
		wait_for 30 grep -q '^done' "$out" || fail "$who: escape script did not finish: $(cat "$out")"
		cat "$out"
		for n in limit move_parent move_root subcgroup spool passwd; do
			grep -qx "$n:ok" "$out" || fail "$who task: $n: $(grep "^$n:" "$out")"
		done
		pid=$(awk '/^pid/ {print $2}' "$out")
		cg=/sys/fs/cgroup$(awk '/^pid/ {print $4}' "$out")
		# the truth from outside
		grep -qx "$pid" "$cg/cgroup.procs" || fail "$who task: pid $pid left $cg"
		[ "$(cat "$cg/memory.max")" = 104857600 ] || fail "$who task: memory.max $(cat "$cg/memory.max")"
		[ ! -e "$cg/escape" ] || fail "$who task: sub-cgroup $cg/escape made"
		[ ! -e /var/lib/corral/spool/escape ] || fail "$who task: wrote the spool"
		wait_for 10 pgrep -fx "sleep $left" || fail "$who task: its background process did not start"
		grep -qx "$(pgrep -fx "sleep $left")" "$cg/cgroup.procs" ||
			fail "$who task: its background process is not in $cg"
		corralctl kill "$id" >/dev/null || fail "$who: kill failed"
		timeout 30 corralctl wait "$id" >/dev/null
		[ "$(task_status "$id")" != running ] || fail "$who task still running 30 s after kill"
		wait_for 10 sh -c "! pgrep -fx 'sleep $left'" ||
			fail "$who task: a process outlived corralctl kill: $(pgrep -afx "sleep $left")"
		left=$((left + 1))
	done
	[ "$(sha256sum </etc/passwd)" = "$passwd0" ] || fail "/etc/passwd changed"
	echo "DETAIL: root and non-root task: memory.max, cgroup.procs (parent, root), mkdir, spool, /etc/passwd refused; memory.max 100M and pid in place from outside; nothing outlived kill"
}

# The live walk's skip on v2 as the installed agent under systemd has it (docs/metering.md):
# the tasks' parent <scope>/tasks holds only task cgroups (no process of its own, the agent in
# its unit's cgroup), so its cpu.stat usage_usec, read here from outside, stays while the tasks
# sleep whatever the agent does (status, show, /metrics between the reads) and moves by a
# task's burn; the agent names the counter it compares where it accounts at exit (Linux 6.2+:
# then idle reads skip and a woken task's burn is read within 5 s), and "none" where live reads
# are not needed (accounting at every switch: Linux 6.1's missing task kfuncs).
vm_metric() { # vm_metric SERIES: its value on the installed agent's /metrics (the whole line's name)
	python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode().splitlines():
    if not l.startswith("#") and l.rsplit(" ", 1)[0] == sys.argv[1]: print(l.rsplit(" ", 1)[1])' "$1"
}
tasks_usage_us() { awk '$1 == "usage_usec" { print $2 }' "$TASKS_CG/tasks/cpu.stat"; }
case_live_walk_v2() {
	need_agent || return 1
	local pid id w u0 u1 s0 s1 w0 w1 line got want
	pid=$(main_pid)
	[ -z "$(cat "$TASKS_CG/tasks/cgroup.procs")" ] || fail "$TASKS_CG/tasks holds processes of its own"
	grep -q "^0::/system.slice/corrald.service" "/proc/$pid/cgroup" || fail "the agent is not in its unit's cgroup"
	mkfifo -m 600 /run/corral-vm/wake
	id=$(corralctl run --no-sandbox --job idle -- sleep 600 | head -n1)
	w=$(corralctl run --no-sandbox --job waker -- sh -c 'read x </run/corral-vm/wake; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exec sleep 600' | head -n1)
	[ -n "$id" ] && [ -n "$w" ] || fail "run failed"
	# the tasks' start done: two equal reads a second apart
	for _ in $(seq 20); do u0=$(tasks_usage_us); sleep 1; [ "$(tasks_usage_us)" = "$u0" ] && break; done
	u0=$(tasks_usage_us)
	for _ in 1 2 3; do corralctl status >/dev/null; corralctl show "$id" >/dev/null; vm_metric corral_bpf_loaded >/dev/null; sleep 1; done
	u1=$(tasks_usage_us)
	echo "tasks/ usage_usec while they sleep and the agent works: $u0 -> $u1"
	[ "$u1" = "$u0" ] || fail "$TASKS_CG/tasks usage_usec moved while every task slept ($u0 -> $u1)"
	line=$(journalctl -u corrald.service -b --no-pager | grep 'BPF metering loaded' | tail -n1)
	echo "$line"
	s0=$(vm_metric corral_bpf_live_walks_skipped_total) w0=$(vm_metric corral_bpf_live_walks_total)
	if grep -q 'accounted at exit' <<<"$line"; then
		grep -q "skipped while the subtree's cpu.stat usage_usec stays (microseconds)" <<<"$line" ||
			fail "accounting at exit, but the start line names no cpu.stat source: $line"
		[ "$(vm_metric 'corral_bpf_live_walk_source_info{source="cpu.stat usage_usec",resolution_ns="1000"}')" = 1 ] ||
			fail "/metrics does not name cpu.stat usage_usec"
		sleep 3
		s1=$(vm_metric corral_bpf_live_walks_skipped_total)
		[ "$s1" -gt "$s0" ] || fail "idle live reads did not skip ($s0 -> $s1)"
	else
		grep -q "live reads not needed" <<<"$line" || fail "unexpected start line: $line"
		[ "$(vm_metric 'corral_bpf_live_walk_source_info{source="none",resolution_ns="0"}')" = 1 ] ||
			fail "/metrics names a source where live reads are not needed"
	fi
	echo go >/run/corral-vm/wake
	wait_for 30 sh -c "[ \"\$(awk '\$1 == \"usage_usec\" { print \$2 }' $TASKS_CG/tasks/cpu.stat)\" -gt $((u1 + 10000)) ]" ||
		fail "tasks/ usage_usec did not move by the burn ($u1 -> $(tasks_usage_us))"
	wait_for 60 sh -c "for p in \$(cat $TASKS_CG/tasks/$w/cgroup.procs); do [ \"\$(cat /proc/\$p/comm)\" = sleep ] || exit 1; done" ||
		fail "the woken task did not get to its sleep"
	sleep 1 # then show: its live read folds the burn (at exit: a walk, the counter moved)
	got=$(corralctl show "$w" --json | python3 -c 'import json, sys; u = json.load(sys.stdin)["usage"]; print(u["cpu_user_ns"] + u["cpu_system_ns"])')
	want=$(($(awk '$1 == "usage_usec" { print $2 }' "$TASKS_CG/tasks/$w/cpu.stat") * 1000))
	w1=$(vm_metric corral_bpf_live_walks_total)
	python3 -c "import sys; g, w = map(int, sys.argv[1:]); sys.exit(not w - 10**7 <= g <= w + 10**7)" "$got" "$want" ||
		fail "woken task: show gives $got ns, its cgroup $want ns"
	corralctl kill "$id" >/dev/null; corralctl kill "$w" >/dev/null
	line=${line#*live reads }
	echo "DETAIL: $(uname -r): live reads ${line%%, changes*}; tasks/ usage_usec still over 3 s of agent work, +$(( $(tasks_usage_us) - u1 )) us by the burn; woken task show $got ns, cgroup $want ns; live walks $w0 -> $w1, skipped $s0 -> $(vm_metric corral_bpf_live_walks_skipped_total)"
}

# The installed agent's idle CPU at 1 and at 100 sleeping tasks (not in the default run: name it
# in CORRAL_VM_ONLY), the harness's configuration (5 s samples) with max_tasks 128 by a drop-in:
# the agent's run time over a window of VM_IDLE_WINDOW seconds (default 30) each,
# from /proc/MainPID/stat and the threads' schedstat, read from outside, and the ratio. Under
# TCG emulation: read the ratio, not the percentages.
vm_cpu_ns() { awk '{ s += $1 } END { printf "%.0f\n", s }' /proc/"$1"/task/*/schedstat; } # mawk: %d stops at 2^31
vm_ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }
vm_running() { corralctl ps --json | python3 -c 'import json, sys; print(sum(t.get("state") == "running" for t in json.load(sys.stdin)))'; }
case_idle_scale_v2() {
	need_agent || return 1
	local pid win=${VM_IDLE_WINDOW:-30} n c0 c1 k0 k1 t0 t1 out="" i d=/run/systemd/system/corrald.service.d
	# the harness's configuration (5 s samples) with room for 100 tasks
	sed 's/^max_tasks = .*/max_tasks = 128/' /etc/corral/corrald.conf >/run/corral-vm/scale.conf
	mkdir -p "$d"
	printf '[Service]\nExecStart=\nExecStart=/usr/sbin/corrald --config /run/corral-vm/scale.conf\n' \
		>"$d/90-vm-scale.conf"
	systemctl daemon-reload
	systemctl restart corrald.service || fail "restart with max_tasks 128 failed"
	pid=$(main_pid)
	for n in 1 100; do
		for i in $(seq "$(vm_running)" $((n - 1))); do
			corralctl run -- sleep 100000 >/dev/null || fail "launch $i failed"
		done
		sleep 12 # past two sample intervals: every task's first task.sample before the window
		c0=$(vm_cpu_ns "$pid") k0=$(vm_ticks "$pid") t0=$(date +%s%N)
		sleep "$win"
		c1=$(vm_cpu_ns "$pid") k1=$(vm_ticks "$pid") t1=$(date +%s%N)
		out="$out $(vm_running) $((c1 - c0)) $((k1 - k0)) $((t1 - t0))"
	done
	corralctl ps --json | python3 -c 'import json, sys; [print(t["id"]) for t in json.load(sys.stdin)]' |
		while read -r i; do corralctl kill "$i" >/dev/null 2>&1; done
	rm -f "$d/90-vm-scale.conf"
	systemctl daemon-reload
	systemctl restart corrald.service
	[ "$(echo $out | wc -w)" = 8 ] || fail "no figure: $out"
	python3 - "$(getconf CLK_TCK)" $out <<'PY'
import sys
hz = int(sys.argv[1]); v = list(map(int, sys.argv[2:])); rows = [v[i:i + 4] for i in range(0, len(v), 4)]
pct = {n: (ns / w * 100, t / hz / (w / 1e9) * 100) for n, ns, t, w in rows}
print("DETAIL: TCG, %s: " % open("/proc/sys/kernel/osrelease").read().strip() + "; ".join(
    "N=%d %.3f%% (ticks %.3f%%)" % (n, p[0], p[1]) for n, p in pct.items()) +
    "; N=%d / N=%d %.2fx" % (rows[1][0], rows[0][0], pct[rows[1][0]][0] / pct[rows[0][0]][0]))
PY
}

# corralctl run --wait -- /bin/true with the caller's stdio passed to the task (SCM_RIGHTS, the
# default of --wait), side by side with systemd-run --wait --pipe --quiet /bin/true (a transient
# service of PID 1 with the caller's stdio) and the bare fork+exec of /bin/true, under this
# VM's systemd: the three modes alternate in each of 3 rounds of 8 launches each (systemd-run
# takes about a second a launch under TCG: 15 a round made the case 86 s long); the medians of
# the rounds' medians and their ratios are in the detail line (docs/benchmarks.md). The VM is
# emulated (TCG): read the ratios, not the times.
case_run_wait_bench() {
	need_agent || return 1
	local h=/usr/lib/corral-vm/o/tests/bench/helper_launch_bench out=/run/corral-vm/run_wait_bench.txt
	local n=8 r=3 m l round
	command -v systemd-run >/dev/null || fail "systemd-run not found"
	: >"$out"
	for round in $(seq "$r"); do
		for m in bare ctl systemd_run; do
			if [ $m = ctl ]; then
				l=$("$h" "$n" ctl /run/corral/corrald.sock /usr/bin/corralctl </dev/null 2>&1)
			else
				l=$("$h" "$n" $m </dev/null 2>&1)
			fi || fail "$m round $round: $l"
			echo "$round $l" | tee -a "$out"
		done
	done
	python3 - "$out" "$n" "$r" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    rows.setdefault(f[1], []).append(float(kv["median_us"]))
med = {m: st.median(v) for m, v in rows.items()}
rounds = "; ".join(f"{m} " + "/".join(f"{v:.0f}" for v in rows[m]) for m in ("bare", "ctl", "systemd_run"))
print(f"DETAIL: {sys.argv[2]} launches x {sys.argv[3]} rounds, medians: bare fork+exec {med['bare']:.0f} us; "
      f"corralctl run --wait (stdio passed) {med['ctl']:.0f} us ({med['ctl'] / med['bare']:.1f}x bare); "
      f"systemd-run --wait --pipe {med['systemd_run']:.0f} us ({med['systemd_run'] / med['bare']:.1f}x bare); "
      f"corralctl / systemd-run {med['ctl'] / med['systemd_run']:.2f} (rounds, us: {rounds})")
PY
}

# A real Slurm as the client of corralctl run --wait under systemd 252 and cgroup v2 (corrald
# the installed unit, Delegate=yes): a one-node cluster (munged, slurmctld, slurmd from Debian's
# slurm-wlm, no accounting database; slurmctld and slurmd transient services of PID 1 as Debian's
# units run them, slurmd with Delegate=yes; config and daemons by slurm_lib.sh, shared with
# tests/integration/slurm.sh) started by the case, three batch jobs at once whose steps are
# `corralctl run --wait`. Checked from outside the agent: Slurm's output file; the exit code as
# slurmctld (scontrol) and Slurm's job completion log have it; after scancel, the task's cgroup as
# /sys/fs/cgroup has it (no process left) and the task ended by the forwarded SIGTERM, before
# kill_grace's SIGKILL; a Corral --time ending the task (exit.by limit); and the end records as
# the collector stored them against the Slurm jobs' ids and accounts. Slurm's own time limit
# (whole minutes) is left to the host test.
slurm_rec() { # slurm_rec TASK EXPR: EXPR over the task's end record as the collector stored it
	corral-collector dump --db sqlite:/var/lib/corral-collector/records.db --type task.end \
		--task "$1" --format json 2>/dev/null | head -n1 | json_get "$2"
}
slurm_stored() { [ -n "$(slurm_rec "$1" 'd["exit"]["status"]')" ]; }
slurm_cg_empty() { [ ! -d "$1" ] || ! grep -q . "$1/cgroup.procs" 2>/dev/null; }
case_slurm_batch() {
	need_agent || return 1
	local t S=/var/tmp/corral-vm-slurm ctl=/usr/bin/corralctl J J3 J4 O tid tid3 tid4 cg pid t0 t1 ms up
	SECONDS=0
	for t in munged slurmctld slurmd sbatch scontrol scancel; do
		command -v $t >/dev/null || fail "$t not in the image (tests/vm/run GUEST_PKGS)"
	done
	. /usr/lib/corral-vm/slurm_lib.sh || fail "slurm_lib.sh"
	PIDS=() SLURM_UNITS=() SLURM_SYSTEMD=1
	# on failure the daemons' logs after the reason (the runner prints a failed case's last lines)
	trap 'r=$?; [ $r = 0 ] || slurm_logs "$S"; slurm_stop; ip addr del 127.0.0.2/8 dev lo 2>/dev/null; exit $r' EXIT
	# Slurm's daemons find no address to listen on where 127.0.0.1 is a node's only address (as
	# in this VM without network: getaddrinfo's AI_ADDRCONFIG does not count it; "Unable to
	# resolve (null)", then "Address family not supported"): a second one on lo while the case runs
	ip addr add 127.0.0.2/8 dev lo || fail "ip addr add 127.0.0.2/8 dev lo"
	# (not below /run: the guest mounts it noexec, and slurmd runs the batch script from its
	# spool directory)
	mkdir -p "$S/out"
	cd "$S" || fail "cd $S"
	slurm_munge_start "$S" || fail "munged did not start"
	slurm_conf_write "$S" "$(slurm_free_port)" "$(slurm_free_port)"
	slurm_daemons_start "$S" || fail "the one-node Slurm did not come up in 60 s"
	up=$SECONDS
	echo "Slurm up after ${up}s"
	# 1: output and exit code; 3: scancel; 4: a Corral --time (1 s), all on the node at once
	printf '#!/bin/sh\nexec %s run --wait -q --workdir / -- sh -c %s\n' "$ctl" \
		"'echo hello from corral; echo \$CORRAL_TASK_ID; echo to-stderr >&2; exit 3'" >"$S/out.sh"
	printf '#!/bin/sh\nexec %s run --wait -q --workdir / -- sh -c %s\n' "$ctl" \
		"'echo \$CORRAL_TASK_ID >$S/sc.id; sed -n s/^0:://p /proc/self/cgroup >$S/sc.cg; echo \$\$ >$S/sc.pid; exec sleep 600'" >"$S/sc.sh"
	printf '#!/bin/sh\nexec %s run --wait -q --time 1 --workdir / -- sh -c %s\n' "$ctl" \
		"'echo \$CORRAL_TASK_ID; exec sleep 600'" >"$S/ct.sh"
	J=$(slurm_submit -A physics -J corral-vm -o "$S/out/out-%j.txt" "$S/out.sh") || fail "sbatch out.sh"
	J3=$(slurm_submit -A chem -o "$S/out/sc.out" "$S/sc.sh") || fail "sbatch sc.sh"
	J4=$(slurm_submit -A chem -o "$S/out/ct-%j.txt" "$S/ct.sh") || fail "sbatch ct.sh"
	echo "jobs $J $J3 $J4"

	# scancel: the task's cgroup, read here, has no process left; the forwarded SIGTERM ended it
	wait_for 40 test -s "$S/sc.pid" || fail "scancel job $J3 did not start: $(slurm_job_field "$J3" JobState) $(cat "$S/out/sc.out" 2>&1)"
	tid3=$(cat "$S/sc.id") cg=/sys/fs/cgroup$(cat "$S/sc.cg") pid=$(cat "$S/sc.pid")
	grep -qx "$pid" "$cg/cgroup.procs" || fail "the task's pid $pid is not in $cg"
	t0=$(date +%s%N)
	scancel "$J3" || fail "scancel $J3"
	wait_for 20 slurm_cg_empty "$cg" || fail "20 s after scancel $cg still has $(cat "$cg/cgroup.procs" | tr '\n' ' ')"
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	wait_for 30 slurm_stored "$tid3" || fail "no end record of $tid3 in the collector"
	[ "$(slurm_rec "$tid3" 'd["exit"]["by"]')" = client ] && [ "$(slurm_rec "$tid3" 'd["exit"]["signal"]')" = 15 ] ||
		fail "scancel: exit $(slurm_rec "$tid3" 'd["exit"]')"
	slurm_job_done "$J3" 200 && [ "$(slurm_job_field "$J3" JobState)" = CANCELLED ] ||
		fail "job $J3 state $(slurm_job_field "$J3" JobState)"

	# output in Slurm's output file, the exit code in Slurm's view, the record's job and account
	slurm_job_done "$J" 300 || fail "job $J did not end: $(slurm_job_field "$J" JobState)"
	O=$S/out/out-$J.txt
	cat "$O"
	tid=$(sed -n 2p "$O")
	grep -qx 'hello from corral' "$O" && grep -qx to-stderr "$O" && [ -n "$tid" ] || fail "output file: $(cat "$O" 2>&1)"
	[ "$(slurm_job_field "$J" ExitCode)" = 3:0 ] && [ "$(slurm_job_field "$J" JobState)" = FAILED ] &&
		[ "$(slurm_jobcomp "$S" "$J" ExitCode)" = 3:0 ] ||
		fail "exit code: scontrol $(slurm_job_field "$J" ExitCode) $(slurm_job_field "$J" JobState), jobcomp $(slurm_jobcomp "$S" "$J" ExitCode)"
	wait_for 30 slurm_stored "$tid" || fail "no end record of $tid in the collector"
	[ "$(slurm_rec "$tid" 'd["task"]["job"]')" = "$(slurm_job_field "$J" JobId)" ] &&
		[ "$(slurm_rec "$tid" 'd["task"]["account"]')" = "$(slurm_jobcomp "$S" "$J" Account)" ] &&
		[ "$(slurm_rec "$tid" 'd["task"]["account"]')" = physics ] &&
		[ "$(slurm_rec "$tid" 'd["task"]["labels"]["slurm_partition"]')" = "$(slurm_job_field "$J" Partition)" ] &&
		[ "$(slurm_rec "$tid" 'd["exit"]["code"]')" = 3 ] ||
		fail "record $(slurm_rec "$tid" 'd["task"]') exit $(slurm_rec "$tid" 'd["exit"]') vs job $(slurm_job_field "$J" JobId) account $(slurm_jobcomp "$S" "$J" Account) partition $(slurm_job_field "$J" Partition)"

	# a Corral --time 1 inside the job: exit.by limit, 143 (SIGTERM) as Slurm's exit status
	slurm_job_done "$J4" 300 || fail "job $J4 did not end: $(slurm_job_field "$J4" JobState)"
	tid4=$(sed -n 1p "$S/out/ct-$J4.txt")
	wait_for 30 slurm_stored "$tid4" || fail "no end record of '$tid4' in the collector"
	[ "$(slurm_rec "$tid4" 'd["exit"]["status"]')" = time_limit ] && [ "$(slurm_rec "$tid4" 'd["exit"]["by"]')" = limit ] &&
		[ "$(slurm_job_field "$J4" ExitCode)" = 143:0 ] &&
		[ "$(slurm_rec "$tid4" 'd["task"]["job"]')" = "$J4" ] && [ "$(slurm_rec "$tid4" 'd["task"]["account"]')" = chem ] ||
		fail "--time: exit $(slurm_rec "$tid4" 'd["exit"]') task $(slurm_rec "$tid4" 'd["task"]'), scontrol $(slurm_job_field "$J4" ExitCode) $(slurm_job_field "$J4" JobState)"
	grep . "$S/jobcomp.log"
	echo "DETAIL: one-node Slurm up in ${up}s; the step's output in Slurm's file; exit 3 (scontrol and jobcomp 3:0, FAILED); scancel: cgroup empty ${ms} ms later, SIGTERM forwarded (exit.by client, before kill_grace's SIGKILL), CANCELLED; corralctl --time 1: time_limit, exit.by limit, scontrol 143:0; records' job/account = the jobs' ($J/physics, $J4/chem)"
}

cases="boot_cgroup_v2 systemd_scope_restart agent_ready live_walk_v2 bpf_verify oom_killed oom_events_v2 cgroup_limits
	pids_limit time_limit restart_keeps_tasks kill9_keeps_tasks watchdog stop_clean
	collector_ingest metering_v2 gpu_v2 sandbox_v2 run_wait_bench slurm_batch"
echo "CORRAL-VM-CASES:" $cases
for c in $cases; do
	run_case "$c"
done
# Long measurements, run only when named (CORRAL_VM_ONLY).
for c in idle_scale_v2; do
	[ -n "$only" ] && grep -qx "$c" <<<"$only" && CASE_TIMEOUT=280 run_case "$c"
done
if [ "$rc" != 0 ]; then
	journalctl -b --no-pager -o short-monotonic -u corrald -u corral-collector | tail -n 60 |
		sed 's/^/CORRAL-VM-LOG: journal: /'
fi
