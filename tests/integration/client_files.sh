#!/bin/bash
# Files a client names are read with the client's rights and never block the agent:
# --seccomp and --spec are read by corralctl (a FIFO, /dev/zero, a 10 GB sparse file are
# refused at once, /etc/shadow and a root-only JSON file fail with the user's own
# "Permission denied" and nothing of their content); a profile path sent to the API by a user
# (root's too) is refused without being opened (same answer whether the path exists or not,
# a FIFO included, while other clients are served); --workdir and device paths give a user the same
# answer for a path that exists and one that does not, where it cannot see them.
. "$(dirname "$0")/lib.sh"
need_root
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
id -u corral-it-user >/dev/null 2>&1 || useradd -M -r -s /bin/sh corral-it-user
printf '[agent]\nsocket_mode = 0666\n' >"$T/a.conf"
start_agent --no-bpf --config "$T/a.conf"
as() { setpriv --reuid corral-it-user --regid corral-it-user --clear-groups "$@"; }
uctl() { as "$CORRALCTL" --socket "$SOCK" "$@"; }
# api JSON: one request straight to the socket as the user, prints the reply
api() {
	as python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n"); print(s.makefile().readline().strip())' "$SOCK" "$1"
}
mkdir -m 755 "$T/pub"; chown corral-it-user "$T/pub"
mkdir -m 700 "$T/priv"; mkdir "$T/priv/x"
printf '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["SECRETVALUE-1"],"action":"hunter2-xyz"}]}\n' >"$T/priv/secret.json"
cp "$T/priv/secret.json" "$T/root-only.json"; chmod 600 "$T/root-only.json"
mkfifo -m 666 "$T/pub/p.json"
truncate -s 10G "$T/pub/sparse.json"; chmod 644 "$T/pub/sparse.json"

# corralctl reads the files, with the user's rights, without waiting
for f in "$T/pub/p.json" /dev/zero "$T/pub/sparse.json"; do
	for opt in --seccomp --spec; do
		out=$(timeout 5 "$CORRALCTL" --socket "$SOCK" run $opt "$f" -- true 2>&1); rc=$?
		[ "$rc" != 124 ] && [ "$rc" != 0 ] && echo "$out" | grep -Eq 'not a regular file|larger than' &&
			pass "$opt $(basename "$f"): refused at once ($(echo "$out" | tail -n1))" || fail "$opt $f: rc $rc $out"
	done
done
for f in /etc/shadow "$T/root-only.json"; do
	out=$(uctl run --wait --seccomp "$f" -- true 2>&1); rc=$?
	[ "$rc" != 0 ] && echo "$out" | grep -q 'Permission denied' && ! echo "$out" | grep -Eq 'root:|SECRET|hunter' &&
		pass "user --seccomp $f: $out" || fail "user --seccomp $f: rc $rc $out"
done
# a profile the user may read works, content and all (its parse errors quote the user's own file)
printf '{"defaultAction":"SCMP_ACT_ALLOW"}\n' >"$T/pub/ok.json"; chmod 644 "$T/pub/ok.json"
out=$(uctl run --wait --workdir / --seccomp "$T/pub/ok.json" -- true 2>&1); rc=$?
[ "$rc" = 0 ] && pass "user --seccomp of its own readable profile runs" || fail "own profile: rc $rc $out"
ctl run --wait --workdir / --seccomp "$T/pub/ok.json" -- true >/dev/null 2>&1 && pass "root --seccomp PATH runs" || fail "root profile path"

# the API: a path from a user is never opened by the agent
r1=$(api "{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"seccomp\":\"$T/root-only.json\"}}")
r2=$(api "{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"seccomp\":\"$T/priv/nope.json\"}}")
api "{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"seccomp\":\"$T/pub/p.json\"}}" >"$T/r3" &
API=$!
st=$(timeout 5 "$CORRALCTL" --socket "$SOCK" status >/dev/null 2>&1 && echo served)
wait $API; r3=$(cat "$T/r3")
echo "$r1" | grep -q 'read by the client' && [ "$(echo "$r1" | sed "s#$T/root-only.json#P#")" = "$(echo "$r2" | sed "s#$T/priv/nope.json#P#")" ] &&
	! echo "$r1" | grep -Eq 'SECRET|hunter' && pass "API seccomp path from a user: refused unopened, same answer exists/missing" ||
	fail "API seccomp path: '$r1' vs '$r2'"
[ "$st" = served ] && echo "$r3" | grep -q 'read by the client' && pass "API seccomp FIFO from a user: refused at once, other clients served" ||
	fail "API FIFO: status '$st', reply '$r3'"
# root's path is not opened by the agent either (a file that never answers would stop it:
# fuse_hang.sh): refused at once
out=$(timeout 5 python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n"); print(s.makefile().readline().strip())' "$SOCK" \
	"{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"seccomp\":\"$T/pub/p.json\"}}"); rc=$?
[ "$rc" = 0 ] && echo "$out" | grep -q 'read by the client' && pass "API seccomp path from root: refused unopened: $out" || fail "root FIFO: rc $rc $out"

# workdir and devices: the same answer whether a hidden path exists or not
e1=$(uctl run --wait --workdir "$T/priv/x" -- true 2>&1 | sed "s#$T/priv/x#D#; s/t-[0-9a-f-]*/ID/g")
e2=$(uctl run --wait --workdir "$T/priv/nope" -- true 2>&1 | sed "s#$T/priv/nope#D#; s/t-[0-9a-f-]*/ID/g")
[ "$e1" = "$e2" ] && echo "$e1" | grep -q 'chdir D: Permission denied' &&
	pass "--workdir hidden path: same answer for existing and missing ($(echo "$e1" | tail -n1))" || fail "workdir: '$e1' vs '$e2'"
d1=$(api "{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"limits\":{\"io_read_bps\":{\"$T/priv/x\":1048576}}}}" | sed "s#$T/priv/x#D#")
d2=$(api "{\"op\":\"run\",\"spec\":{\"command\":[\"/bin/true\"],\"workdir\":\"/\",\"limits\":{\"io_read_bps\":{\"$T/priv/nope\":1048576}}}}" | sed "s#$T/priv/nope#D#")
[ "$d1" = "$d2" ] && echo "$d1" | grep -q 'under /dev' && pass "device path outside /dev from a user: same answer ($d1)" || fail "device: '$d1' vs '$d2'"
d3=$(api '{"op":"run","spec":{"command":["/bin/true"],"workdir":"/","limits":{"io_read_bps":{"/dev/../root/x":1048576}}}}')
echo "$d3" | grep -q 'under /dev' && pass "device path with .. refused" || fail "device ..: $d3"
finish
