#!/bin/bash
# The operator's surfaces of the three programs: --version; a bad option is one line and a
# hint (exit 2); dump --type refuses an unknown type; config errors name file:line and both
# lines of a duplicate key (agent and collector); a missing token file stops corrald before
# anything is set up (no cgroup made); a token file, tokens file or TLS key others may reach or
# another user owns is refused; SIGHUP rereads the file in use (absolute path), keeps
# the flags and says which changes it applied and which wait for a restart; corralctl status reads as text (upload failing, then delivered) and as JSON.
. "$(dirname "$0")/lib.sh"
need_root
COLL=$O/corral-collector

# --version: the same version on all three
v1=$("$CORRALD" --version) v2=$("$CORRALCTL" --version) v3=$("$COLL" --version)
[ "${v1#corrald }" = "${v2#corralctl }" ] && [ "${v1#corrald }" = "${v3#corral-collector }" ] &&
	echo "$v1" | grep -Eq '^corrald [0-9]+\.[0-9]+\.[0-9]+' &&
	pass "--version: $v1 / $v2 / $v3" || fail "--version: '$v1' '$v2' '$v3'"

# bad options: one line on stderr, naming the option, with a hint; exit 2; nothing on stdout
bad() {
	local out err rc
	out=$("$@" 2>"$T/err"); rc=$?
	err=$(cat "$T/err")
	if [ "$rc" = 2 ] && [ -z "$out" ] && [ "$(wc -l <"$T/err")" = 1 ] && echo "$err" | grep -q 'try --help'; then
		pass "${*#"$O/"}: $err"
	else
		fail "${*#"$O/"}: rc $rc, stdout '$out', stderr: $err"
	fi
}
bad "$CORRALD" --bogus
bad "$CORRALD" --max-tasks
bad "$CORRALCTL" --bogus status
bad "$CORRALCTL" status --bogus
bad "$CORRALCTL" ps --bogus
bad "$CORRALCTL" show --bogus t-1
bad "$CORRALCTL" kill t-1 --bogus
bad "$CORRALCTL" wait
bad "$CORRALCTL" run --bogus -- true
bad "$CORRALCTL" bogus
bad "$CORRALCTL"
bad "$CORRALCTL" --socket
bad "$CORRALCTL" wait --bogus
bad "$CORRALCTL" wait t-1 t-2
bad "$CORRALCTL" ps --limit
bad "$CORRALCTL" kill t-1 --signal
bad "$CORRALCTL" status extra
bad "$COLL" --bogus
bad "$COLL" serve --bogus
bad "$COLL" dump --db "sqlite:$T/c.db" --limit
bad "$COLL" audit --bogus
bad "$COLL" bogus
bad "$COLL" migrate --db "sqlite:$T/c.db" extra

# each message says what was wrong: an option taken as a task id, or a value missing called an
# unknown option, would mislead
msg() { # WANT CMD...: stderr is "PROGRAM: WANT; try --help"
	local want=$1 err
	shift
	err=$("$@" 2>&1 >/dev/null </dev/null)
	[ "${err#*: }" = "$want; try --help" ] && pass "${*#"$O/"}: $err" || fail "${*#"$O/"}: '$err', want '$want'"
}
msg "wait: unknown option --bogus" "$CORRALCTL" --socket "$T/none.sock" wait --bogus
msg "wait: unexpected argument \"t-2\"" "$CORRALCTL" wait t-1 t-2
msg "option --socket needs an argument" "$CORRALCTL" --socket
msg "ps: option --limit needs an argument" "$CORRALCTL" ps --all --limit
msg "ps: option --after needs an argument" "$CORRALCTL" ps --all --limit 5 --after
msg "kill: option --signal needs an argument" "$CORRALCTL" kill t-1 --signal
msg "show: unknown option --bogus" "$CORRALCTL" show --bogus
msg "status: unexpected argument \"extra\"" "$CORRALCTL" status extra
msg "unknown option '--bogus'" "$COLL" --bogus
# --help after a subcommand: the usage on stdout, exit 0 (not an unknown option)
for sub in run ps show kill wait status; do
	out=$("$CORRALCTL" --socket "$T/none.sock" "$sub" --help 2>&1); rc=$?
	[ "$rc" = 0 ] && echo "$out" | grep -q "^Usage: corralctl" || fail "corralctl $sub --help: rc $rc: $(echo "$out" | head -n2)"
done
pass "corralctl SUBCOMMAND --help: the usage, exit 0"

# dump --type: an unknown type is refused with the valid ones, before the database is opened
"$COLL" migrate --db "sqlite:$T/c.db" >/dev/null
out=$("$COLL" dump --db "sqlite:$T/c.db" --type task.ned 2>&1); rc=$?
[ "$rc" = 2 ] && echo "$out" | grep -q "unknown record type 'task.ned'" && echo "$out" | grep -q 'task.end' &&
	pass "dump --type task.ned refused: $out" || fail "dump --type task.ned: rc $rc: $out"
out=$("$COLL" dump --db "sqlite:$T/c.db" --type task.end 2>&1); rc=$?
[ "$rc" = 0 ] && echo "$out" | grep -q '(0 records)' && pass "dump --type task.end accepted" ||
	fail "dump --type task.end: rc $rc: $out"

# config errors: file:line, duplicate keys with both lines (agent)
printf '[agent]\nmax_tasks = 5\n\n[metrics]\ntasks = off\n[agent]\n# again\nmax_tasks = 6\n' >"$T/dup.conf"
out=$("$CORRALD" --config "$T/dup.conf" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$out" = "corrald: $T/dup.conf:8: [agent] max_tasks: duplicate key (first set on line 2)" ] &&
	pass "agent duplicate key: $out" || fail "agent duplicate key: rc $rc: $out"
printf '[agent]\nnode = n\n[spool]\nmax_bytes = 10\n' >"$T/bad.conf"
out=$("$CORRALD" --config "$T/bad.conf" 2>&1); rc=$?
[ "$rc" = 2 ] && echo "$out" | grep -q "^corrald: $T/bad.conf:4: \[spool\] max_bytes: " &&
	pass "agent bad value: $out" || fail "agent bad value: rc $rc: $out"
# (collector)
printf '[server]\nlisten = 127.0.0.1:1\n[storage]\ndb = sqlite:%s/c.db\n[server]\nlisten = 127.0.0.1:2\n' "$T" >"$T/cdup.conf"
out=$("$COLL" serve --config "$T/cdup.conf" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$out" = "corral-collector: $T/cdup.conf:6: [server] listen: duplicate key (first set on line 2)" ] &&
	pass "collector duplicate key: $out" || fail "collector duplicate key: rc $rc: $out"
printf '[server]\n\nmax_records = lots\n' >"$T/cbad.conf"
out=$("$COLL" serve --config "$T/cbad.conf" 2>&1); rc=$?
[ "$rc" = 2 ] && echo "$out" | grep -q "^corral-collector: $T/cbad.conf:3: \[server\] max_records: " &&
	pass "collector bad value: $out" || fail "collector bad value: rc $rc: $out"

# a missing token file: refused before anything is set up (no cgroup of the agent's made)
out=$("$CORRALD" --socket "$SOCK" --state-dir "$STATE" --cgroup-subtree "$SUBTREE" \
	--collector-url http://127.0.0.1:1 --token-file "$T/no-token" 2>&1); rc=$?
made=$(ls -d /sys/fs/cgroup/*/"$SUBTREE" 2>/dev/null | wc -l)
[ "$rc" = 2 ] && [ "$made" = 0 ] && echo "$out" | grep -q "token_file $T/no-token: No such file" &&
	! echo "$out" | grep -qi 'bpf\|cgroups:' &&
	pass "missing token file refused before setup: $out" || fail "missing token file: rc $rc, $made cgroups: $out"

# files the configuration names that are not regular files (a FIFO would block the open for
# ever, a directory reads as an error later): refused at once by name, before any setup; a
# dangling symlink is a missing file; a symlink to a token file is followed
mkfifo "$T/fifo"
printf 'tok-node-it-0123456789abcdef\n' >"$T/real-token"
chmod 600 "$T/real-token"
ln -s "$T/real-token" "$T/link-token"
ln -s "$T/gone" "$T/dangling-token"
printf '[agent]\nseccomp_default = %s\n' "$T/fifo" >"$T/sd.conf"
printf '[collector]\nurl = http://127.0.0.1:1\nca_file = %s\n' "$T/fifo" >"$T/ca.conf"
refused() { # WHAT WANT-IN-MESSAGE CMD...: exit 2 within 10 s, the message, no cgroup made
	local what=$1 want=$2 out rc made
	shift 2
	out=$(timeout -s KILL 10 "$@" 2>&1 </dev/null); rc=$?
	made=$(ls -d /sys/fs/cgroup/*/"$SUBTREE" 2>/dev/null | wc -l)
	[ "$rc" = 2 ] && [ "$made" = 0 ] && echo "$out" | grep -qF -- "$want" &&
		pass "$what: $out" || fail "$what: rc $rc, $made cgroups: $out"
}
AGENT_ARGS=(--socket "$SOCK" --state-dir "$STATE" --cgroup-subtree "$SUBTREE")
refused "FIFO token file" "token_file $T/fifo: not a regular file" \
	"$CORRALD" "${AGENT_ARGS[@]}" --collector-url http://127.0.0.1:1 --token-file "$T/fifo"
refused "dangling symlink token file" "token_file $T/dangling-token: No such file" \
	"$CORRALD" "${AGENT_ARGS[@]}" --collector-url http://127.0.0.1:1 --token-file "$T/dangling-token"
refused "directory as token file" "token_file $T: not a regular file" \
	"$CORRALD" "${AGENT_ARGS[@]}" --collector-url http://127.0.0.1:1 --token-file "$T"
refused "FIFO configuration file" "corrald: $T/fifo: not a regular file" "$CORRALD" "${AGENT_ARGS[@]}" -c "$T/fifo"
refused "FIFO seccomp_default profile" "seccomp_default $T/fifo: not a regular file" \
	"$CORRALD" "${AGENT_ARGS[@]}" -c "$T/sd.conf"
refused "FIFO ca_file" "ca_file $T/fifo: not a regular file" "$CORRALD" "${AGENT_ARGS[@]}" -c "$T/ca.conf"
out=$(timeout -s KILL 10 "$COLL" serve --listen 127.0.0.1:0 --db "sqlite:$T/c.db" --tokens "$T/fifo" 2>&1); rc=$?
[ "$rc" = 1 ] && echo "$out" | grep -qF "$T/fifo: not a regular file" && pass "collector FIFO tokens file: $out" ||
	fail "collector FIFO tokens file: rc $rc: $out"
printf 'node it-node tok-node-it-0123456789abcdef\n' >"$T/ftokens"
chmod 600 "$T/ftokens"
out=$(timeout -s KILL 10 "$COLL" serve --listen 127.0.0.1:0 --db "sqlite:$T/c.db" --tokens "$T/ftokens" --prices "$T/fifo" 2>&1); rc=$?
[ "$rc" = 1 ] && echo "$out" | grep -qF "$T/fifo: not a regular file" && pass "collector FIFO price sheet: $out" ||
	fail "collector FIFO price sheet: rc $rc: $out"
printf '[server]\nlisten = 127.0.0.1:0\ntokens_file = %s\ntls_cert = %s\ntls_key = %s\n[storage]\ndb = sqlite:%s/c.db\n' \
	"$T/ftokens" "$T/fifo" "$T/fifo" "$T" >"$T/ctls.conf"
out=$(timeout -s KILL 10 "$COLL" serve --config "$T/ctls.conf" 2>&1); rc=$?
[ "$rc" = 1 ] && echo "$out" | grep -qF "tls_cert $T/fifo: not a regular file" && pass "collector FIFO TLS certificate: $out" ||
	fail "collector FIFO TLS certificate: rc $rc: $out"
out=$(timeout -s KILL 10 "$COLL" serve --config "$T/fifo" 2>&1); rc=$?
[ "$rc" = 2 ] && echo "$out" | grep -qF "$T/fifo: not a regular file" && pass "collector FIFO configuration file: $out" ||
	fail "collector FIFO configuration file: rc $rc: $out"

# secrets as ssh takes a private key: a token file (agent) or tokens file (collector) that group
# or others may read or write, or that another user than the one running (nor root) owns, is
# refused at start, exit 2, naming the file and its mode (read here with stat) or its owner,
# before anything is set up; the same file at 0600 and root's is taken (the starts below)
for m in 644 640 604 620 602 610; do
	cp "$T/real-token" "$T/loose-token"
	chmod "$m" "$T/loose-token"
	seen=$(stat -c %a "$T/loose-token")
	refused "token file of mode $seen" "token_file $T/loose-token: mode 0$seen lets group or others at a secret: refused" \
		"$CORRALD" "${AGENT_ARGS[@]}" --collector-url http://127.0.0.1:1 --token-file "$T/loose-token"
	cp "$T/ftokens" "$T/loose-tokens"
	chmod "$m" "$T/loose-tokens"
	out=$(timeout -s KILL 10 "$COLL" serve --listen 127.0.0.1:0 --db "sqlite:$T/loose.db" --tokens "$T/loose-tokens" 2>&1); rc=$?
	[ "$rc" = 2 ] && [ ! -e "$T/loose.db" ] &&
		echo "$out" | grep -qF "tokens file $T/loose-tokens: mode 0$(stat -c %a "$T/loose-tokens") lets group or others at a secret: refused" &&
		pass "collector tokens file of mode $m: $out" || fail "collector tokens file of mode $m: rc $rc: $out"
done
cp "$T/real-token" "$T/their-token"
cp "$T/ftokens" "$T/their-tokens"
chmod 600 "$T/their-token" "$T/their-tokens"
chown nobody "$T/their-token" "$T/their-tokens"
owner=$(stat -c %u "$T/their-token")
refused "token file of uid $owner, mode 600" "token_file $T/their-token: owned by uid $owner, not by uid 0 that runs this or root: refused" \
	"$CORRALD" "${AGENT_ARGS[@]}" --collector-url http://127.0.0.1:1 --token-file "$T/their-token"
out=$(timeout -s KILL 10 "$COLL" serve --listen 127.0.0.1:0 --db "sqlite:$T/loose.db" --tokens "$T/their-tokens" 2>&1); rc=$?
[ "$rc" = 2 ] && [ ! -e "$T/loose.db" ] && echo "$out" | grep -qF "tokens file $T/their-tokens: owned by uid $owner, not by uid 0" &&
	pass "collector tokens file of uid $owner: $out" || fail "collector tokens file of uid $owner: rc $rc: $out"

# a FIFO among the profiles a task may name: the launch is refused and the agent goes on (it
# blocked in the open for ever, with every client)
mkdir -p "$T/sc"
mkfifo "$T/sc/hang.json"
printf '[agent]\nseccomp_dir = %s\n' "$T/sc" >"$T/sc.conf"
start_agent --no-bpf --config "$T/sc.conf"
out=$(timeout -s KILL 10 "$CORRALCTL" --socket "$SOCK" run --seccomp hang -- true 2>&1); rc=$?
st=$(timeout -s KILL 5 "$CORRALCTL" --socket "$SOCK" status --json | jget tasks_live)
[ "$rc" = 1 ] && echo "$out" | grep -q "hang.json: not a regular file" && [ "$st" = 0 ] &&
	pass "a FIFO profile: $out; the agent still answers" || fail "FIFO profile: rc $rc: $out; status: '$st'"
[ "$st" = 0 ] || kill -9 "$AGENT_PID" # a wedged agent does not read its SIGTERM
stop_agent

# SIGHUP: the file in use, by its absolute path, and the flags applied again
printf '[agent]\nmax_tasks = 5\nreserve_cpus = 0\n' >"$T/a.conf"
(cd "$T" && start_agent --config a.conf --no-bpf --kill-grace 3s)
AGENT_PID=$(pgrep -f -- "--socket $SOCK" | head -n1)
printf '[agent]\nmax_tasks = 9\nkill_grace = 1s\n' >"$T/a.conf"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'configuration reloaded' "$T/agent.log" && break; sleep 0.05; done
mt=$(ctl status --json | jget max_tasks)
grep -q "configuration reloaded from $T/a.conf; applied: \[agent\] max_tasks, \[agent\] reserve_cpus\$" "$T/agent.log" && [ "$mt" = 9 ] &&
	pass "SIGHUP: $(grep -o 'configuration reloaded.*' "$T/agent.log"), max_tasks now $mt (kill_grace: the flag still wins)" ||
	fail "SIGHUP: max_tasks $mt, log: $(grep -i reload "$T/agent.log")"
# a key only a restart applies ([metrics] listen) is named as such, and nothing listens there
MP=$(free_port)
printf '[agent]\nmax_tasks = 7\nkill_grace = 1s\n[metrics]\nlisten = %s\n' "$MP" >"$T/a.conf"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'not applied until' "$T/agent.log" && break; sleep 0.05; done
grep -q "configuration reloaded from $T/a.conf; applied: \[agent\] max_tasks\$" "$T/agent.log" &&
	grep -q "changed but not applied until corrald restarts: \[metrics\] listen\$" "$T/agent.log" &&
	[ "$(ctl status --json | jget max_tasks)" = 7 ] && [ -z "$(ss -Hltn "sport = :$MP")" ] &&
	pass "SIGHUP with a restart-only key: $(grep -o 'changed but not applied.*' "$T/agent.log")" ||
	fail "SIGHUP with [metrics] listen changed: $(grep -i 'reload\|not applied' "$T/agent.log")"
# a second reload still names it (it is still not in force)
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do [ "$(grep -c 'not applied until' "$T/agent.log")" = 2 ] && break; sleep 0.05; done
[ "$(grep -c 'not applied until corrald restarts: \[metrics\] listen$' "$T/agent.log")" = 2 ] &&
	pass "SIGHUP again: [metrics] listen still named" || fail "second SIGHUP: $(grep -i 'reload\|not applied' "$T/agent.log")"
printf '[agent]\nmax_tasks = 9\nmax_tasks = 10\n' >"$T/a.conf"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'reload of' "$T/agent.log" && break; sleep 0.05; done
grep -q "a.conf:3: \[agent\] max_tasks: duplicate key" "$T/agent.log" && grep -q "reload of $T/a.conf failed" "$T/agent.log" &&
	[ "$(ctl status --json | jget max_tasks)" = 7 ] &&
	pass "SIGHUP with a bad file: refused with file:line, the running configuration kept" ||
	fail "SIGHUP with a bad file: $(grep -i 'reload\|duplicate' "$T/agent.log")"
stop_agent

# corralctl status: text by default; upload health from the uploader (failing, then delivered)
CPORT=$(free_port)
echo "node it-node tok-node-it-0123456789abcdef" >"$T/tokens"
chmod 600 "$T/tokens"
echo "tok-node-it-0123456789abcdef" >"$T/token"
chmod 600 "$T/token"
start_agent --no-bpf --collector-url "http://127.0.0.1:$CPORT" --token-file "$T/token"
ctl run --wait -- true >/dev/null
for _ in $(seq 100); do ctl status | grep -q FAILING && break; sleep 0.1; done
st=$(ctl status)
echo "$st" | grep -q "^Upload:" && echo "$st" | grep -q "state  *FAILING" && echo "$st" | grep -q "last success  *never" &&
	echo "$st" | grep -q "last error .*127.0.0.1" && echo "$st" | grep -Eq "pending  *[1-9][0-9]* records" &&
	echo "$st" | grep -q "^Enforcement:" && echo "$st" | grep -q "seccomp  *default profile default" &&
	echo "$st" | grep -q "^Spool: " && pass "status, collector down: $(echo "$st" | grep -A6 '^Upload:' | tr -s ' ' | tr '\n' ';')" ||
	fail "status with the collector down: $st"
# pending and spool use against the spool read from outside: its segment files' frames (none
# acked yet) and sizes; the text's values in one column, the spool's size in readable units
spool_outside() { python3 -c 'import glob, os, sys
sys.path.insert(0, sys.argv[1])
import spool_frames
segs = glob.glob(sys.argv[2] + "/seg-*")
print(sum(1 for p in segs for _ in spool_frames.frames(p)), sum(os.path.getsize(p) for p in segs))' "$(dirname "$0")" "$STATE/spool"; }
for _ in 1 2 3; do
	js=$(ctl status --json)
	read -r frames disk <<<"$(spool_outside)"
	pend=$(echo "$js" | jget upload.pending_records) sbytes=$(echo "$js" | jget spool.bytes)
	[ "$pend" = "$frames" ] && [ "$sbytes" = "$disk" ] && break
	sleep 0.2
done
st=$(ctl status)
want=$(python3 -c 'import sys; b = int(sys.argv[1]); print(f"{b} B" if b < 1024 else f"{b / 1024:.1f} KiB")' "$sbytes")
[ "$pend" = "$frames" ] && [ "$sbytes" = "$disk" ] && [ "$frames" -ge 1 ] &&
	echo "$st" | grep -q "^Spool:        $want of 1.0 GiB (0.0%), 0 records refused\$" &&
	echo "$st" | grep -q "^  pending         $frames records\$" &&
	! echo "$st" | grep -E '^[A-Z][a-z]+: ' | grep -vqE '^.{13} [^ ]' &&
	pass "status, collector down: pending $pend = $frames frames in the spool's segments, spool $sbytes bytes = $disk on disk ('$(echo "$st" | grep '^Spool:')')" ||
	fail "status, collector down: pending $pend, frames $frames, spool $sbytes bytes, disk $disk: $st"
# "next retry in" is the time left, not the whole backoff: once the backoff is 3 s or more,
# 1.5 s later the text says what last_error_ns + backoff_ms - now gives (within 0.3 s)
for _ in $(seq 150); do [ "$(ctl status --json | jget upload.backoff_ms)" -ge 3000 ] && break; sleep 0.1; done
sleep 1.5
st=$(ctl status)
js=$(ctl status --json)
got=$(echo "$st" | sed -n 's/^  next retry in  *\([0-9.]*\) s$/\1/p')
want=$(echo "$js" | python3 -c 'import json, sys, time
u = json.load(sys.stdin)["upload"]
print("%.1f" % ((u["last_error_ns"] / 1e6 + u["backoff_ms"] - time.time() * 1e3) / 1e3))')
python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.3 else 1)' "${got:-99}" "$want" &&
	pass "next retry in $got s (backoff $(echo "$js" | jget upload.backoff_ms) ms from the last error: $want s left)" ||
	fail "next retry: text '$got', left by the JSON $want s: $(echo "$st" | grep -A1 'last error')"
"$COLL" serve --listen "127.0.0.1:$CPORT" --db "sqlite:$T/c.db" --tokens "$T/tokens" >"$T/coll.log" 2>&1 &
CPID=$!
wait_up "http://127.0.0.1:$CPORT/healthz" "$CPID" "$T/coll.log"
# the uploader's backoff may have grown long: a restart sends what the spool holds at once
# (through a symlink to the token file, of mode 0600: followed)
stop_agent
start_agent --no-bpf --collector-url "http://127.0.0.1:$CPORT" --token-file "$T/link-token"
ctl run --wait -- true >/dev/null
for _ in $(seq 300); do
	[ "$(ctl status --json | jget upload.pending_records)" = 0 ] && [ "$(ctl status --json | jget upload.last_success_ns)" != 0 ] && break
	sleep 0.1
done
st=$(ctl status)
rows=$(sqlite3 "$T/c.db" "select count(*) from records where node = 'it-node'" 2>/dev/null)
echo "$st" | grep -q "state  *ok" && echo "$st" | grep -Eq "last success  *[0-9]{4}-" &&
	echo "$st" | grep -q "pending  *0 records" && [ "${rows:-0}" -ge 4 ] &&
	pass "status, delivered: $(echo "$st" | grep -A5 '^Upload:' | tr -s ' ' | tr '\n' ';') ($rows rows in the collector)" ||
	fail "status after delivery ($rows rows): $st"
ls=$(ctl status --json | jget upload.last_success_ns)
[ "${ls:-0}" -gt 0 ] && ctl status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["spool"]["max_bytes"] > 0 and "enforcement" in d' &&
	pass "status --json: upload.last_success_ns $ls, spool and enforcement objects" || fail "status --json: $(ctl status --json)"
kill "$CPID"; wait "$CPID" 2>/dev/null
finish
