#!/bin/bash
# Every byte 0x00-0xff in argv, env, job, account and labels: carried exactly (the task itself
# writes what it got; argv and env values also when not UTF-8), or refused with a message
# naming the field (NUL, bytes that are not UTF-8 in job/account/labels/names, controls in
# job/account/labels), never dropped; and whatever was carried reaches
# ps, show, run --wait's stderr and the agent log escaped: no C0 but the line ends, no DEL, no
# C1, valid UTF-8, one log entry per line (a program whose path holds a newline, a fake ps row
# and OSC 52 / OSC 0 sequences, an exit message with CSI 2J).
. "$(dirname "$0")/lib.sh"
need_root
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
start_agent --no-bpf
mkdir -m 777 "$T/o"
# safe FILE: the bytes are valid UTF-8 with no control character but newline, no DEL, no C1
safe() {
	python3 -c 'import sys,unicodedata
b = open(sys.argv[1], "rb").read()
s = b.decode("utf-8")   # raises on invalid UTF-8
bad = [hex(ord(c)) for c in s if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
sys.exit(1 if bad else 0)' "$1"
}
hex() { od -An -tx1 "$1" | tr -d ' \n'; }

# --- 0x01..0x7f: one task per byte, the byte in its argv and its environment (and job,
# account and label where it is printable; a control byte there is refused by name)
bad=0 refused=0
for b in $(seq 1 127); do
	x=$(printf '\\x%02x' "$b")
	v=$(printf "a${x}z")
	[ "$b" = 10 ] && v=$'a\nz'
	extra=()
	if [ "$b" -ge 32 ] && [ "$b" -lt 127 ]; then
		extra=(--job "j$v" --account "c$v" --label "k=l$v")
	else
		for f in --job --account; do
			out=$(ctl run $f "$v" -- true 2>&1) && { bad=$((bad + 1)); echo "accepted $f byte $b"; }
			echo "$out" | grep -q -- "${f#--}" || { bad=$((bad + 1)); echo "$f byte $b: $out"; }
		done
		out=$(ctl run --label "k=$v" -- true 2>&1) && { bad=$((bad + 1)); echo "accepted label byte $b"; }
		echo "$out" | grep -q 'label' || { bad=$((bad + 1)); echo "label byte $b: $out"; }
		refused=$((refused + 3))
	fi
	ctl run --wait --stdout /dev/null --workdir / --env "V=$v" "${extra[@]}" -- /bin/sh -c 'printf %s "$1" >"$2"; printf %s "$V" >"$3"' \
		sh "$v" "$T/o/a$b" "$T/o/e$b" >"$T/o/id$b" 2>"$T/o/err$b"
	printf %s "$v" >"$T/o/want"
	w=$(hex "$T/o/want")
	[ "$(hex "$T/o/a$b" 2>/dev/null)" = "$w" ] && [ "$(hex "$T/o/e$b" 2>/dev/null)" = "$w" ] ||
		{ bad=$((bad + 1)); echo "byte $b: argv $(hex "$T/o/a$b" 2>/dev/null) env $(hex "$T/o/e$b" 2>/dev/null) want $w: $(cat "$T/o/err$b")"; }
	if [ ${#extra[@]} -gt 0 ]; then
		id=$(head -n1 "$T/o/id$b")
		j=$(ctl show "$id" --json | python3 -c 'import sys,json; t=json.load(sys.stdin)["task"]; sys.stdout.write(t["job"][1:]+"|"+t["account"][1:]+"|"+t["labels"]["k"][1:])')
		[ "$j" = "$v|$v|$v" ] || { bad=$((bad + 1)); echo "byte $b: job/account/label came back as '$j'"; }
	fi
done
[ "$bad" = 0 ] && pass "bytes 0x01-0x7f: argv and env carried exactly, job/account/label exact or refused by name ($refused refusals)" ||
	fail "bytes 0x01-0x7f: $bad problem(s)"

# --- 0x80..0xff alone are not UTF-8: carried exactly in argv and env values (one task, one
# argument and one variable per byte, each written back by the task); refused by corralctl in
# job, account, label and a variable name, naming the argument
bad=0
args=() envs=()
for b in $(seq 128 255); do
	v=$(printf "a\\x$(printf %02x "$b")z")
	args+=("$v") envs+=(--env "V$b=$v")
	for args2 in "--job" "--account" "--label k=" "--env" ; do
		set -- $args2
		if [ "$1" = --env ]; then out=$(ctl run --env "$v=1" -- true 2>&1); rc=$?
		elif [ $# = 2 ]; then out=$(ctl run "$1" "$2$v" -- true 2>&1); rc=$?
		else out=$(ctl run "$1" "$v" -- true 2>&1); rc=$?; fi
		{ [ "$rc" = 2 ] && echo "$out" | grep -q 'not valid UTF-8' && echo "$out" | grep -q -- "$1"; } ||
			{ bad=$((bad + 1)); echo "byte $b $1: rc $rc $out"; }
	done
done
[ "$bad" = 0 ] && pass "bytes 0x80-0xff: refused in job, account, label and variable names with a message naming the argument" ||
	fail "bytes 0x80-0xff refusals: $bad problem(s)"
mkdir -m 777 "$T/hi"
ctl run --wait --workdir / "${envs[@]}" -- /bin/sh -c 'i=127; for a; do i=$((i + 1)); printf %s "$a" >"$0/a$i"; eval "printf %s \"\$V$i\"" >"$0/e$i"; done' \
	"$T/hi" "${args[@]}" >/dev/null 2>"$T/hi.err" || fail "high bytes task: $(cat "$T/hi.err")"
bad=0
for b in $(seq 128 255); do
	printf "a\\x$(printf %02x "$b")z" >"$T/o/want"
	w=$(hex "$T/o/want")
	[ "$(hex "$T/hi/a$b" 2>/dev/null)" = "$w" ] && [ "$(hex "$T/hi/e$b" 2>/dev/null)" = "$w" ] ||
		{ bad=$((bad + 1)); echo "byte $b: argv $(hex "$T/hi/a$b" 2>/dev/null) env $(hex "$T/hi/e$b" 2>/dev/null) want $w"; }
done
[ "$bad" = 0 ] && pass "bytes 0x80-0xff: each carried exactly in argv and in an environment value" || fail "bytes 0x80-0xff: $bad not carried"
# every byte 0x01-0xff in one argument and one environment value
ALL=$(python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(1, 256)))')
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(1, 256)))' >"$T/o/want"
ctl run --wait --workdir / --env "ALL=$ALL" -- /bin/sh -c 'printf %s "$1" >"$2"; printf %s "$ALL" >"$3"' sh "$ALL" "$T/o/all.a" "$T/o/all.e" >/dev/null 2>"$T/all.err"
[ "$(hex "$T/o/all.a")" = "$(hex "$T/o/want")" ] && [ "$(hex "$T/o/all.e")" = "$(hex "$T/o/want")" ] &&
	pass "every byte 0x01-0xff in one argument and one environment value: carried exactly (255 bytes)" ||
	fail "all bytes: argv $(hex "$T/o/all.a" | cut -c1-80)... env $(hex "$T/o/all.e" | cut -c1-80)... $(cat "$T/all.err")"
ctl run --wait --workdir / --stdout "$T/o/pf.out" -- printf '%s' $'\xff\xfe' >/dev/null
[ "$(hex "$T/o/pf.out")" = fffe ] && pass "run -- printf '%s' \$'\\xff\\xfe': the task printed ff fe" || fail "printf: $(hex "$T/o/pf.out")"
# --- 0x00 through the API: refused by field
for f in job account; do
	out=$(python3 -c 'import socket,sys,json
spec = {"command": ["/bin/true"], "workdir": "/", sys.argv[2]: "a\u0000z"}
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(json.dumps({"op":"run","spec":spec}).encode()+b"\n")
print(s.makefile().readline().strip())' "$SOCK" "$f")
	echo "$out" | grep -q "\"ok\": *false" && echo "$out" | grep -q 'u0000 is not allowed' && pass "NUL in $f: refused ($out)" || fail "NUL in $f: $out"
done
out=$(python3 -c 'import socket,sys,json
spec = {"command": ["/bin/true", "a\u0000z"], "workdir": "/"}
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(json.dumps({"op":"run","spec":spec}).encode()+b"\n")
print(s.makefile().readline().strip())' "$SOCK")
echo "$out" | grep -q "\"ok\": *false" && pass "NUL in argv: refused ($out)" || fail "NUL in argv: $out"

# --- hostile names on output: ps, show, run --wait, the agent log
EVIL=$T/o/$'evil\nroot         1 init\e]52;c;aGFja2Vk\a\e]0;pwned\a\xc2\x9b2J'
printf '#!/bin/sh\nsleep 30\n' >"$EVIL"; chmod 755 "$EVIL"
id=$(ctl run --workdir / --job $'job\xc2\xa0ok' -- "$EVIL" $'arg\e[2J' $'\xc2\x9b31m')
ctl ps >"$T/ps.out"; ctl ps --all --json >"$T/psj.out"; ctl show "$id" >"$T/show.out"
ctl kill "$id" >/dev/null
out=$(ctl run --wait --stdout /dev/null -- $'/nonexistent/evil\e[2Jcmd' 2>"$T/run.err")
ctl wait "$(echo "$out" | head -n1)" >/dev/null 2>&1 # --wait may return while it is still ending
ctl show "$(echo "$out" | head -n1)" >"$T/show2.out"
for f in ps.out psj.out show.out show2.out run.err agent.log; do
	safe "$T/$f" && pass "$f: no control byte, no C1, valid UTF-8" || fail "$f carries raw controls: $(od -c "$T/$f" | head -5)"
done
[ "$(grep -c 'root         1 init' "$T/ps.out")" = 1 ] && [ "$(wc -l <"$T/ps.out")" = 2 ] &&
	grep -q 'evil\\nroot         1 init\\x1b]52;c;aGFja2Vk\\a' "$T/ps.out" && pass "ps: the fake row stays inside the command column: $(tail -n1 "$T/ps.out" | cut -c1-120)" ||
	fail "ps: $(cat "$T/ps.out")"
grep -q 'evil\\x1b\[2Jcmd' "$T/run.err" && grep -q 'evil\\x1b\[2Jcmd' "$T/show2.out" && pass "exit message escaped: $(tail -n1 "$T/run.err")" || fail "exit message: $(cat "$T/run.err")"
grep -q $'job\xc2\xa0ok' "$T/show.out" && pass "printable UTF-8 shown as is (job with U+00A0)" || fail "show: $(cat "$T/show.out")"
# (a sanitizer build's own warnings, written by the runtime, are not agent log entries)
n=$(grep -v -E '^==[0-9]+==|^False positive error reports|^For details see https://github.com/google/sanitizers' "$T/agent.log" | grep -vc '^<[0-7]>')
[ "$n" = 0 ] && grep -q 'evil\\nroot' "$T/agent.log" && pass "agent log: one entry per line, the newline in the program path escaped" || fail "agent log: $n line(s) without a priority prefix"
finish
