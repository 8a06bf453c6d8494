#!/bin/bash
# A path a client names on a filesystem that never answers (a FUSE mount whose server answers
# INIT and nothing else, helper_fuse_hang, mounted allow_other as a user's mount with
# user_allow_other would be) never stops the agent: while tasks name it as their working
# directory (a user's and root's), stdout, stderr, a read-only path and a bind source, and while
# root sends it as a seccomp profile path through the API, corrald answers status at once
# (measured, reported) and serves other launches; the stuck tasks fail after the bounded start
# wait with a message that says what to look at, and leave no process behind; a user's
# corralctl reading a --seccomp file there waits by itself, the agent untouched.
. "$(dirname "$0")/lib.sh"
need_root
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
id -u corral-it-user >/dev/null 2>&1 || useradd -M -r -s /bin/sh corral-it-user
U=$(id -u corral-it-user)
chmod 755 "$T"
F=$T/fuse
mkdir "$F"
printf '[agent]\nsocket_mode = 0666\n' >"$T/a.conf"
start_agent --no-bpf --config "$T/a.conf"
"$O/tests/integration/helper_fuse_hang" "$F" "$U" "$U" >"$T/fuse.out" 2>&1 &
FUSE=$!
for _ in $(seq 100); do grep -q ready "$T/fuse.out" 2>/dev/null && break; kill -0 $FUSE 2>/dev/null || break; sleep 0.05; done
grep -q ready "$T/fuse.out" || { kill $FUSE 2>/dev/null; skip "no FUSE mount: $(cat "$T/fuse.out")"; }
PIDS=()
unmount() { [ -n "$FUSE" ] && { kill $FUSE 2>/dev/null; wait $FUSE 2>/dev/null; FUSE=; }; umount -l "$F" 2>/dev/null; }
trap 'for p in "${PIDS[@]}"; do kill -9 $p 2>/dev/null; done; unmount; cleanup' EXIT
as() { setpriv --reuid corral-it-user --regid corral-it-user --clear-groups "$@"; }
uctl() { as "$CORRALCTL" --socket "$SOCK" "$@"; }
# served LABEL: status answers (2 s at most); its latency in ms into the report
LAT=
served() {
	local t0 t1
	t0=$(date +%s%N)
	timeout -s KILL 2 "$CORRALCTL" --socket "$SOCK" status >/dev/null 2>&1 || { fail "$1: status not answered within 2 s"; return; }
	t1=$(date +%s%N)
	LAT="$LAT $1=$(((t1 - t0) / 1000000))ms"
}
# run in the background, each writing its ids/errors to a file (root's: the task's own streams
# are /dev/null unless the case names one, a user's task may not get root's files)
bg() {
	local n=$1 c=$2 op=$3
	shift 3
	"$c" "$op" --stdin /dev/null --stdout /dev/null --stderr /dev/null "$@" >"$T/$n.out" 2>"$T/$n.err" &
	PIDS+=($!)
}
bg workdir uctl run --wait --workdir "$F/x" -- true
bg rootwd ctl run --wait --workdir "$F/x" -- true
bg stdout uctl run --wait --workdir / --stdout "$F/out" -- true
bg stderr uctl run --wait --workdir / --stderr "$F/err" -- true
bg readonly uctl run --wait --workdir / --read-only "$F/ro" -- true
bg bind uctl run --wait --workdir / --bind "$F/src:/mnt" -- true
bg clientsec uctl run --wait --workdir / --seccomp "$F/p.json" -- true
sleep 1
served "with 6 tasks starting on it"
out=$(timeout -s KILL 5 python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n"); print(s.makefile().readline().strip())' "$SOCK" \
	"{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"seccomp\":\"$F/p.json\"}}"); rc=$?
[ "$rc" = 0 ] && echo "$out" | grep -q 'read by the client' && pass "root's seccomp path on it through the API: refused unopened" || fail "root API seccomp: rc $rc '$out'"
served "after the API request"
r=$(timeout -s KILL 10 "$CORRALCTL" --socket "$SOCK" run --wait --workdir / -- /bin/true 2>&1) && pass "another task runs meanwhile" || fail "other launch: $r"
served "after another launch"
n=$(ctl ps --json | python3 -c 'import sys,json; print(sum(1 for t in json.load(sys.stdin) if t["state"] == "starting"))')
[ "$n" = 6 ] && pass "6 tasks starting, waiting on the mount (none of them blocks the agent)" || fail "starting: $n $(ctl ps)"
# the stuck tasks fail after the start wait (30 s), with the reason
for i in "${!PIDS[@]}"; do
	[ "$i" = 6 ] && continue # the client reading its own file: still waiting, by itself
	timeout 60 tail --pid="${PIDS[$i]}" -f /dev/null
done
for c in workdir rootwd stdout stderr readonly bind; do
	grep -q 'did not reach execve within 30s (its working directory, output files or sandbox paths may be on a filesystem that does not answer)' "$T/$c.err" &&
		pass "$c on the hung mount: the task failed after the bounded start wait" || fail "$c: $(cat "$T/$c.err" "$T/$c.out")"
done
served "after the failures"
kill -0 "${PIDS[6]}" 2>/dev/null && pass "a user's corralctl reading --seccomp there waits by itself (the agent served meanwhile)" || fail "client seccomp: $(cat "$T/clientsec.err")"
# their processes cannot die while the mount holds them (the kernel waits uninterruptibly for
# the directory another lookup holds): the tasks are ended after the ending wait and their
# cgroups left for later, without the agent sleeping on them
slow=0
for _ in $(seq 300); do
	j=$(timeout -s KILL 2 "$CORRALCTL" --socket "$SOCK" ps --json) || slow=$((slow + 1))
	[ "$(echo "$j" | python3 -c 'import sys,json; print(len(json.load(sys.stdin)))' 2>/dev/null)" = 0 ] && break
	sleep 0.1
done
[ "$slow" = 0 ] && pass "ps answered within 2 s every 0.1 s while the tasks were ending" || fail "ps not answered within 2 s $slow time(s) while the tasks were ending"
left=$(ctl ps --json | python3 -c 'import sys,json; print(len(json.load(sys.stdin)))')
[ "$left" = 0 ] && pass "no task left starting or ending" || fail "tasks left: $(ctl ps)"
served "after the tasks ended"
served "once more"
echo "status latencies:$LAT"
unmount
wait "${PIDS[6]}" 2>/dev/null
grep -q 'Transport endpoint is not connected\|Software caused' "$T/clientsec.err" && pass "the client's read failed once the mount went away: $(tail -n1 "$T/clientsec.err")" ||
	fail "client after unmount: $(cat "$T/clientsec.err")"
finish
