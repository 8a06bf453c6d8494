#!/bin/bash
# The task sandbox (docs/sandbox.md), through corrald on this host's cgroups (v1 hybrid):
# every escape a root task (uid 0, no capabilities) once made must fail, for a root and a
# non-root task, each checked from outside (the cgroup files as the host reads them, the spool
# directory, /etc); private /tmp and /dev/shm (not shared between tasks nor with the node, sized,
# charged to the task's memory cgroup, gone with the task); read_only_paths, inaccessible_paths,
# bind; a clear error when a layer cannot be set up; corralctl status names the layers.
. "$(dirname "$0")/lib.sh"
need_root
start_agent --no-bpf

st=$(ctl status --json)
for l in mount_namespace sys_read_only agent_files_hidden protect_system private_dev; do
	v=$(echo "$st" | jget "sandbox.$l")
	[ "$v" = on ] && pass "status: $l on" || fail "status: $l is '$v'"
done

id -u corral-it-user >/dev/null 2>&1 || useradd -M -r -s /bin/sh corral-it-user
mkdir -p "$STATE/spool"
# The escapes of a task that runs as root, each printing NAME:ok (refused) or NAME:ESCAPED.
cat >"$T/escape.sh" <<'SH'
cg=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
ucg=$(sed -n 's/^0:://p' /proc/self/cgroup)
parent=${cg%/*}
try() { name=$1; shift; if ( "$@" ) 2>/dev/null; then echo "$name:ESCAPED"; else echo "$name:ok"; fi; }
try limit sh -c "echo 2147483648 > /sys/fs/cgroup/memory$cg/memory.limit_in_bytes"
try move_procs sh -c "echo $$ > /sys/fs/cgroup/memory$parent/cgroup.procs"
try move_tasks sh -c "echo $$ > /sys/fs/cgroup/memory$parent/tasks"
try move_unified sh -c "echo $$ > /sys/fs/cgroup/unified/cgroup.procs"
try move_unified_parent sh -c "echo $$ > /sys/fs/cgroup/unified${ucg%/*}/cgroup.procs"
try subcgroup mkdir "/sys/fs/cgroup/memory$cg/escape"
try spool sh -c "echo x > $STATE_DIR/spool/escape"
try state_listed sh -c "ls $STATE_DIR | grep -q spool"
try etc touch /etc/corral-it-escape-$MARK
try usr touch /usr/corral-it-escape-$MARK
try sysctl sh -c "cat /proc/sys/kernel/domainname > /proc/sys/kernel/domainname"
try socket python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])" "$SOCK_PATH"
echo "pid $$ cg $cg"
echo done
exec sleep 60
SH
chmod 755 "$T/escape.sh"

escapes() { # WHO [FLAGS]: run the escape script as WHO (root or corral-it-user), check from outside
	local who=$1 out=$T/escape-$1.out id pid cg lim
	shift
	rm -f "$out"
	: >"$out"
	: >"$T/escape-$who.err"
	chown "$who" "$out" "$T/escape-$who.err"
	id=$(ctl run "$@" --user "$who" --memory 100M --workdir / --stdout "$out" --stderr "$T/escape-$who.err" \
		--env STATE_DIR="$STATE" --env SOCK_PATH="$SOCK" --env MARK=$$ -- /bin/sh "$T/escape.sh")
	for _ in $(seq 200); do grep -q '^done' "$out" 2>/dev/null && break; sleep 0.05; done
	grep -q '^done' "$out" || { fail "$who: escape script did not finish: $(cat "$out" "$T/escape-$who.err")"; return; }
	for n in limit move_procs move_tasks move_unified move_unified_parent subcgroup spool state_listed etc usr sysctl socket; do
		grep -q "^$n:ok$" "$out" && pass "$who task: $n refused" || fail "$who task: $n: $(grep "^$n:" "$out")"
	done
	pid=$(awk '/^pid/ {print $2}' "$out")
	cg=$(awk '/^pid/ {print $4}' "$out")
	# the truth from outside
	grep -qx "$pid" "/sys/fs/cgroup/memory$cg/cgroup.procs" &&
		pass "$who task: still in its memory cgroup (host view)" || fail "$who task: pid $pid left $cg"
	lim=$(cat "/sys/fs/cgroup/memory$cg/memory.limit_in_bytes")
	[ "$lim" = 104857600 ] && pass "$who task: memory limit still 100M (host view)" || fail "$who task: limit $lim"
	[ ! -e "/sys/fs/cgroup/memory$cg/escape" ] && [ ! -e "$STATE/spool/escape" ] &&
		[ ! -e "/etc/corral-it-escape-$$" ] && [ ! -e "/usr/corral-it-escape-$$" ] &&
		pass "$who task: no sub-cgroup, spool file, /etc or /usr file (host view)" ||
		fail "$who task: something was written"
	rm -f "/etc/corral-it-escape-$$" "/usr/corral-it-escape-$$" "$STATE/spool/escape"
	ctl kill --signal KILL "$id" >/dev/null
	ctl wait "$id" >/dev/null 2>&1
}
escapes root
escapes corral-it-user
# and with the Landlock rules on top (the mounts and the rules must not conflict)
case $(ctl status --json | jget sandbox.landlock) in "off (kernel offers"*) escapes root --landlock ;; esac

# --- private /dev: a root task cannot see or open the node's disks or consoles ---------------
# (uid 0 without capabilities opens a root-owned 0600 node: loop and zram disks, the console,
# the virtual consoles' screens, wherever the device cgroup allows them)
devs=$(find /dev -maxdepth 1 -type b | tr '\n' ' ')
devs="$devs /dev/console /dev/vcs /dev/tty1"
cat >"$T/opendev.py" <<'PY'
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
        print("opened", p)
    except OSError:
        pass
PY
M=corral-it-shm-$$
run_wait --workdir / --stdout "$T/dev.out" -- sh -c "
	python3 $T/opendev.py $devs
	for d in $devs; do test -e \$d && echo seen \$d; done
	ls /dev | tr '\n' ' '; echo
	echo x > /dev/null && head -c 4 /dev/urandom | wc -c | grep -qx 4 && echo nodes:ok
	python3 -c 'import pty; pty.openpty(); print(\"pty:ok\")'
	echo x > /dev/shm/$M && echo shm:ok
	touch /dev/corral-it-$$ 2>/dev/null && echo devfs:written || echo devfs:ro"
echo "private /dev: $(tr '\n' ' ' <"$T/dev.out")"
grep -q '^opened\|^seen' "$T/dev.out" && fail "private /dev: $(grep '^opened\|^seen' "$T/dev.out" | tr '\n' ' ')" ||
	pass "private /dev: a root task neither sees nor opens the node's $(echo $devs | wc -w) disks and consoles"
grep -q nodes:ok "$T/dev.out" && grep -q pty:ok "$T/dev.out" && grep -q devfs:ro "$T/dev.out" &&
	pass "private /dev: null, urandom, a pty work; the /dev tmpfs is read-only" || fail "private /dev nodes: $(cat "$T/dev.out")"
grep -q shm:ok "$T/dev.out" && [ -e "/dev/shm/$M" ] && pass "private /dev without private_tmp: /dev/shm is the node's" ||
	fail "private /dev shm: $(cat "$T/dev.out")"
rm -f "/dev/shm/$M"
# without it (root may turn it off) they open: the check above can fail
run_wait --no-private-dev --workdir / --stdout "$T/dev2.out" -- python3 "$T/opendev.py" $devs
n=$(grep -c '^opened' "$T/dev2.out")
[ "$n" -gt 0 ] && pass "--no-private-dev: a root task opens $n of them ($(sed -n 's/^opened //p' "$T/dev2.out" | head -n3 | tr '\n' ' ')...)" ||
	echo "note: no node of $devs opens for a root task here even without a private /dev"
run_wait --user corral-it-user --no-private-dev -- true
[ "$RC" = 0 ] && pass "--no-private-dev for a non-root task: allowed" || fail "non-root no-private-dev: $RC $REASON"

# --- private /tmp and /dev/shm --------------------------------------------------------------
M=corral-it-mark-$$
# (--workdir /: the current directory may be under the node's /tmp, which these tasks do not see)
a=$(ctl run --private-tmp --workdir / --memory 200M --stdout "$T/a.out" -- sh -c \
	"echo a > /tmp/$M && echo a > /dev/shm/$M && head -c 50000000 /dev/zero > /tmp/fill && sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup && echo ready; exec sleep 60")
for _ in $(seq 200); do grep -q ready "$T/a.out" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$T/a.out" && pass "private /tmp: a task writes /tmp and /dev/shm" || fail "private tmp task: $(cat "$T/a.out")"
[ ! -e "/tmp/$M" ] && [ ! -e "/dev/shm/$M" ] && pass "private /tmp: the node does not see the task's files" ||
	fail "private /tmp: the node sees /tmp/$M"
run_wait --private-tmp --workdir / --stdout "$T/b.out" -- sh -c "test -e /tmp/$M || test -e /dev/shm/$M && echo seen || echo unseen"
[ "$(cat "$T/b.out")" = unseen ] && pass "private /tmp: another task does not see them" || fail "other task: $(cat "$T/b.out")"
cg=$(head -n1 "$T/a.out")
use=0; [ -n "$cg" ] && [ "$cg" != / ] && use=$(cat "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes" 2>/dev/null || echo 0)
[ "${use:-0}" -ge 50000000 ] && pass "private /tmp: 50 MB in /tmp charged to the task's memory cgroup ($use bytes)" ||
	fail "tmpfs charge: usage $use of $cg"
ctl kill --signal KILL "$a" >/dev/null; ctl wait "$a" >/dev/null 2>&1
run_wait --private-tmp --workdir / --tmp-size 1M --stdout "$T/c.out" -- sh -c 'head -c 2000000 /dev/zero > /tmp/big 2>/dev/null && echo fits || echo full'
[ "$(cat "$T/c.out")" = full ] && pass "--tmp-size 1M: 2 MB do not fit" || fail "tmp size: $(cat "$T/c.out")"
run_wait --stdout "$T/d.out" -- sh -c "test -e /tmp/$M && echo seen || echo unseen"
[ "$(cat "$T/d.out")" = unseen ] && pass "after the task: its /tmp is gone with its namespace" || fail "leftover: $(cat "$T/d.out")"

# --- PID namespace: an init is PID 1, /proc shows the task's processes, its leftovers die with
# it, signals reach the main process, orphans are reaped, the exit status is the main's ------
run_wait --pid-ns --stdout "$T/p.out" -- sh -c 'echo "pid $$"; cat /proc/1/comm; ls /proc | grep -c "^[0-9]"; (exec -a corral-it-left-'$$' sleep 100 &); echo x > /proc/sys/kernel/domainname 2>/dev/null && echo sysctl:no || echo sysctl:ok; exit 3'
[ "$(sed -n 1,2p "$T/p.out" | tr '\n' ' ')" = "pid 2 corral-init " ] && pass "--pid-ns: the task is PID 2, corral-init PID 1" || fail "pid-ns: $(cat "$T/p.out")"
n=$(sed -n 3p "$T/p.out")
[ -n "$n" ] && [ "$n" -le 5 ] && pass "--pid-ns: /proc shows the task's $n processes" || fail "pid-ns /proc: $n"
[ "$RC" = 3 ] && [ "$(status_of "$ID")" = exited ] && pass "--pid-ns: exit code 3 of the main process is the task's" || fail "pid-ns exit: rc $RC $(status_of "$ID")"
run_wait --pid-ns -- sh -c 'kill -USR1 $$; sleep 5'
[ "$RC" = 138 ] && [ "$(ctl show "$ID" --json | jget exit.signal)" = 10 ] && pass "--pid-ns: a main process killed by SIGUSR1 is reported so (signal 10)" ||
	fail "pid-ns signal status: rc $RC $(ctl show "$ID" --json | jget exit)"
# corralctl kill (SIGTERM) ends a program that does not catch it: the init forwards it
id=$(ctl run --pid-ns -- sleep 100)
ctl kill "$id" >/dev/null
timeout 20 "$CORRALCTL" --socket "$SOCK" wait "$id" >/dev/null 2>&1
[ "$(ctl show "$id" --json | jget exit.signal)" = 15 ] && [ "$(status_of "$id")" = signaled ] &&
	pass "--pid-ns: corralctl kill (TERM) ends sleep, signaled 15" || fail "pid-ns kill: $(ctl show "$id" --json | jget exit)"
id=$(ctl run --pid-ns --stdout "$T/h.out" -- sh -c 'trap "exit 9" HUP; echo ready; sleep 100 & wait')
for _ in $(seq 200); do grep -q ready "$T/h.out" 2>/dev/null && break; sleep 0.05; done
ctl kill --signal HUP "$id" >/dev/null
timeout 20 "$CORRALCTL" --socket "$SOCK" wait "$id" >/dev/null 2>&1
[ "$(ctl show "$id" --json | jget exit.code)" = 9 ] && pass "--pid-ns: HUP forwarded to the main process's handler (exit 9)" ||
	fail "pid-ns HUP: $(ctl show "$id" --json | jget exit)"
# orphans that end are reaped by the init: no zombie in the namespace
run_wait --pid-ns --stdout "$T/z.out" -- sh -c 'for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; cat /proc/[0-9]*/stat | grep -c ") Z " ; true'
[ "$(cat "$T/z.out")" = 0 ] && pass "--pid-ns: five orphans reaped (no zombie)" || fail "pid-ns zombies: $(cat "$T/z.out")"
grep -q sysctl:ok "$T/p.out" && pass "--pid-ns: /proc/sys of the new /proc read-only" || fail "pid-ns sysctl: $(cat "$T/p.out")"
pgrep -f "corral-it-left-$$" >/dev/null && fail "--pid-ns: a background process outlived PID 1" ||
	pass "--pid-ns: a background process does not outlive the task"

# --- IPC namespace: a message queue a task makes is not the node's ----------------------------
if command -v ipcmk >/dev/null && command -v ipcs >/dev/null; then
	# the queue is told apart by its mode (0601)
	q601() { ipcs -q | awk '$4 == 601' | wc -l; }
	before=$(q601)
	run_wait --ipc-ns --uts-ns --stdout "$T/ipc.out" -- sh -c "ipcmk -Q -p 0601 >/dev/null && ipcs -q | awk '\$4 == 601' | wc -l"
	[ "$(cat "$T/ipc.out")" = 1 ] && [ "$(q601)" = "$before" ] &&
		pass "--ipc-ns: the task's System V queue is not in the node's IPC namespace" ||
		fail "ipc-ns: task sees $(cat "$T/ipc.out"), node $(q601) (before $before)"
	run_wait --stdout "$T/ipc2.out" -- sh -c "ipcmk -Q -p 0601"
	id=$(sed -n 's/.*id: *//p' "$T/ipc2.out")
	[ "$(q601)" = $((before + 1)) ] && pass "without --ipc-ns the node sees it (control)" ||
		fail "ipc control: $(cat "$T/ipc2.out"), node $(q601)"
	[ -n "$id" ] && ipcrm -q "$id" 2>/dev/null
fi

# --- read_only_paths, inaccessible_paths, bind ---------------------------------------------
mkdir -p "$T/ro" "$T/bsrc"
echo secret >"$T/secret"
echo bound >"$T/bsrc/f"
chmod 777 "$T/ro"
run_wait --read-only "$T/ro" --inaccessible "$T/secret" --bind "$T/bsrc:/mnt:ro" --stdout "$T/e.out" -- sh -c \
	"touch $T/ro/x 2>/dev/null && echo ro:no || echo ro:ok; cat $T/secret 2>/dev/null | grep -q secret && echo hidden:no || echo hidden:ok; cat /mnt/f; touch /mnt/g 2>/dev/null && echo bindro:no || echo bindro:ok"
grep -q ro:ok "$T/e.out" && [ ! -e "$T/ro/x" ] && pass "--read-only: write refused" || fail "read-only: $(cat "$T/e.out")"
grep -q hidden:ok "$T/e.out" && pass "--inaccessible: file not readable" || fail "inaccessible: $(cat "$T/e.out")"
grep -q '^bound$' "$T/e.out" && grep -q bindro:ok "$T/e.out" && pass "--bind SRC:/mnt:ro: visible, read-only" || fail "bind: $(cat "$T/e.out")"

# --- Landlock: a read-only or inaccessible path holds through a path no mount covers --------
# Binds made before the read-only mount (/mnt: the read-only directory itself, /opt: one below
# it, /srv: the inaccessible one) are writable or readable without Landlock; with it every
# write and read through them is refused, checked from the node; the rest of the view works.
ll=$(ctl status --json | jget sandbox.landlock)
case $ll in
"off (kernel offers ABI "*)
	# (outside /tmp: the directories above a protected path are not writable under Landlock)
	L=$(mktemp -d /var/tmp/corral-it-ll.XXXXXX)
	mkdir -p "$L/llro/sub" "$L/llsec"
	chmod 777 "$L/llro" "$L/llro/sub"
	echo old >"$L/llro/old"
	chmod 666 "$L/llro/old"
	echo secret >"$L/llsec/f"
	cp /bin/true "$T/true-copy" # a program beside the agent's (hidden) state directory
	for mode in no-landlock landlock; do
		run_wait --$mode --read-only "$L/llro" --inaccessible "$L/llsec" --bind "$L/llro:/mnt" \
			--bind "$L/llro/sub:/opt" --bind "$L/llsec:/srv" --workdir / \
			--stdout "$T/ll-$mode.out" -- sh -c "
			echo x > /mnt/new-$mode && echo mnt:written
			echo x >> /mnt/old && echo old:written
			echo x > /opt/new-$mode && echo opt:written
			cat /srv/f 2>/dev/null | grep -q secret && echo srv:read
			echo x > /tmp/t && cat /tmp/t >/dev/null && echo tmp:ok
			ls / | grep -qx usr && ls /etc | grep -qx passwd && echo view:ok
			$T/true-copy; echo exec:\$?"
		echo "$mode: $(tr '\n' ' ' <"$T/ll-$mode.out")"
	done
	[ "$RC" = 0 ] && grep -q tmp:ok "$T/ll-landlock.out" && grep -q view:ok "$T/ll-landlock.out" &&
		grep -q exec:0 "$T/ll-landlock.out" && pass "--landlock: the task runs, writes its /tmp, lists / and /etc, execs" ||
		fail "--landlock task: rc $RC $REASON $(cat "$T/ll-landlock.out")"
	# without Landlock the binds get through (else this test could not fail)
	[ "$(grep -c ':written\|:read' "$T/ll-no-landlock.out")" = 4 ] &&
		pass "without Landlock the binds reach the protected paths (4 of 4)" ||
		fail "no-landlock control: $(cat "$T/ll-no-landlock.out")"
	grep -q ':written\|:read' "$T/ll-landlock.out" && fail "--landlock: $(grep ':written\|:read' "$T/ll-landlock.out")" ||
		pass "--landlock: writes through a bind of the read-only path (and one below it), the read of the inaccessible one, refused"
	[ ! -e "$L/llro/new-landlock" ] && [ ! -e "$L/llro/sub/new-landlock" ] && [ "$(cat "$L/llro/old")" = "old
x" ] && pass "--landlock: the read-only directory is as it was (node view)" ||
		fail "--landlock: the node sees a write: $(ls "$L/llro" "$L/llro/sub"; cat "$L/llro/old")"
	rm -rf "$L"
	run_wait --landlock --no-sandbox -- true
	grep -q 'landlock.* need mount_namespace' "$T/stderr" && pass "--landlock without the mount namespace: refused ($(cat "$T/stderr"))" ||
		fail "landlock without mount ns: $RC $(cat "$T/stderr")"
	;;
"unavailable: "*) echo "note: Landlock not tested: $ll" ;;
*) fail "status: landlock is '$ll'" ;;
esac

# --- a layer that cannot be set up: a clear error, the task launch_failed ------------------
run_wait --bind /nonexistent-corral:/mnt -- true
[ "$RC" = 126 ] && echo "$REASON" | grep -q 'mount namespace: bind /mnt from /nonexistent-corral: No such file' &&
	pass "a failing mount is named: $(echo "$REASON" | sed 's/.*launch_failed: //')" || fail "bind error: $RC $REASON"
out=$(ctl run --read-only relative/path -- true 2>&1)
echo "$out" | grep -q 'read-only: "relative/path": expected an absolute path' && pass "bad path refused: $out" || fail "bad path: $out"
# root may turn the sandbox off (then the node's /tmp is shared)
run_wait --no-sandbox --stdout "$T/f.out" -- sh -c "grep -c ' /sys ro\| /sys .*ro,' /proc/self/mountinfo"
[ "$RC" = 1 ] || [ "$(cat "$T/f.out")" = 0 ] && pass "--no-sandbox by root: /sys as the node has it" || fail "no-sandbox: $(cat "$T/f.out")"

# --- the agent's secrets: its token file and TLS client key hidden from a root task (which owns
# them: mode 0600 keeps no root task out), and so are those a reload replaced (they may still
# hold a secret that works); each read tried from inside (a hidden file reads empty: /dev/null
# is bound over it), what it got written to a file
secrets_hidden() { # LABEL FILE...: a root task's read of each FILE must not give its secret
	local label=$1 out=$T/secrets-$1.out id f
	shift
	: >"$out"
	id=$(ctl run --user root --workdir / --stdout "$out" -- /bin/sh -c \
		'for f; do if grep -q secret "$f" 2>/dev/null; then echo "$f:READ"; else echo "$f:hidden"; fi; done' sh "$@")
	ctl wait "$id" >/dev/null 2>&1
	for f; do
		grep -qx "$f:hidden" "$out" && pass "$label: $f hidden from a root task" ||
			fail "$label: $f: $(grep "^$f:" "$out")"
	done
}
S=$T/secrets
mkdir -p "$S"
for f in token token2 node.key node2.key; do (umask 077; echo "secret-$f" >"$S/$f"); done
stop_agent
printf '[collector]\ntoken_file = %s\nclient_key = %s\n' "$S/token" "$S/node.key" >"$T/secrets.conf"
start_agent --no-bpf --config "$T/secrets.conf"
secrets_hidden "at the start" "$S/token" "$S/node.key"
printf '[collector]\ntoken_file = %s\nclient_key = %s\n' "$S/token2" "$S/node2.key" >"$T/secrets.conf"
: >"$T/agent.log"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'configuration reloaded' "$T/agent.log" && break; sleep 0.05; done
grep -q 'configuration reloaded' "$T/agent.log" || fail "no reload: $(cat "$T/agent.log")"
secrets_hidden "after a reload to other files" "$S/token2" "$S/node2.key" "$S/token" "$S/node.key"
finish
