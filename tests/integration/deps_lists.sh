#!/bin/bash
# The package lists of tests/deps.sh against what runs.
# make demo installs what the demo runs and no test-only package: tests/deps.sh is asked for
# its "demo" and "test" lists as root on a machine where nothing is installed (dpkg-query and
# apt-get stood in for on PATH, so nothing is installed here), then tests/demo.sh runs under
# strace; every program it executed (outside the build) must come from a package of the demo
# list, a package those depend on (apt-cache depends, recursively) or an Essential one, and the
# demo list must hold no package that only the test list adds.
# make check installs what the tests need: every program a test looks for (command -v NAME)
# and every Python module a test imports (tests/vm's guest and tests/gpu's device checks
# aside: the VM image has its own list, GPUs their driver), where this machine has it, comes from a package of
# the test list, one those depend on or an Essential one (python3-cryptography, which
# collector_tls.sh imports, was missing).
. "$(dirname "$0")/lib.sh"
need_root
for c in strace dpkg apt-cache; do
	command -v "$c" >/dev/null || { echo "FAIL: $c missing (tests/deps.sh)"; exit 1; }
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

# the lists, from the script itself: nothing installed, apt-get only records what it is asked
mkdir -p "$T/stub"
printf '#!/bin/sh\nexit 1\n' >"$T/stub/dpkg-query"
printf '#!/bin/sh\n[ "$1" = update ] && exit 0\necho "$@" >>"%s/apt.args"\n' "$T" >"$T/stub/apt-get"
chmod 755 "$T/stub/dpkg-query" "$T/stub/apt-get"
asked() { # LIST: the packages tests/deps.sh LIST would install on an empty machine
	: >"$T/apt.args"
	PATH="$T/stub:$PATH" "$ROOT/tests/deps.sh" "$1" >/dev/null 2>&1 || { fail "deps.sh $1 failed"; return; }
	tr ' ' '\n' <"$T/apt.args" | grep -v '^-\|^install$\|^$' | sort -u
}
asked demo >"$T/demo.pkgs"
asked test >"$T/test.pkgs"
asked build >"$T/build.pkgs"
only_test=$(comm -13 "$T/demo.pkgs" "$T/test.pkgs")
[ -s "$T/demo.pkgs" ] && [ -n "$only_test" ] || fail "deps.sh lists: demo '$(cat "$T/demo.pkgs")', test adds '$only_test'"
comm -23 "$T/build.pkgs" "$T/demo.pkgs" | grep -q . && fail "the demo list lacks build packages: $(comm -23 "$T/build.pkgs" "$T/demo.pkgs")"
for p in libcmocka-dev postgresql qemu-system-x86 chromium mmdebstrap linux-perf prometheus; do
	grep -qx "$p" "$T/demo.pkgs" && fail "make demo would install the test-only package $p"
	grep -qx "$p" "$T/test.pkgs" || fail "make check would not install $p"
done
pass "deps.sh demo: $(wc -l <"$T/demo.pkgs") packages, none of the $(echo "$only_test" | wc -l) the test list adds"

# what the demo runs, from outside: its successful execve calls
out=$(strace -f -qq -z -e trace=execve -e signal=none -o "$T/demo.strace" "$ROOT/tests/demo.sh" 2>&1); rc=$?
[ "$rc" = 0 ] || { fail "the demo failed (rc $rc): $(echo "$out" | tail -n 5)"; finish; }
grep -oE 'execve\("[^"]+"' "$T/demo.strace" | sed 's/^execve("//; s/"$//' | sort -u >"$T/execs"
# the packages the demo list brings (with their dependencies) and the Essential ones
apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
	--no-replaces --no-enhances $(cat "$T/demo.pkgs") 2>/dev/null | grep -v '^ ' | sed 's/:.*//' >"$T/allowed"
dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" {print $1}' >>"$T/allowed"
sort -u -o "$T/allowed" "$T/allowed"
owner() { # PATH: its Debian package (usrmerge: /usr/bin/x may be known as /bin/x), or nothing
	local p b=${1##*/} c
	for c in "$(realpath "$1")" "$1" /bin/"$b" /usr/bin/"$b" /sbin/"$b" /usr/sbin/"$b"; do
		p=$(dpkg -S "$c" 2>/dev/null | grep -v "^diversion" | head -n1 | cut -d: -f1) && [ -n "$p" ] && { echo "$p"; return; }
	done
}
bad= n=0
while read -r x; do
	case $x in "$O"/* | "$ROOT"/* | tests/*) continue ;; esac
	n=$((n + 1))
	p=$(owner "$x")
	if [ -z "$p" ]; then
		echo "note: $x belongs to no package (a local install): not checked"
	elif ! grep -qx "$p" "$T/allowed"; then
		bad="$bad $x($p)"
	fi
done <"$T/execs"
[ "$n" -ge 5 ] && [ -z "$bad" ] &&
	pass "the demo ran $n programs besides the build's, each from the demo list, its dependencies or an Essential package" ||
	fail "the demo ran programs that make demo does not install:$bad ($n checked)"

# the test list: what the tests look for and import
apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
	--no-replaces --no-enhances $(cat "$T/test.pkgs") 2>/dev/null | grep -v '^ ' | sed 's/:.*//' >"$T/tallowed"
dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" {print $1}' >>"$T/tallowed"
sort -u -o "$T/tallowed" "$T/tallowed"
bad= n=0 absent=
for c in $(grep -rhoE --exclude-dir=vm --exclude-dir=gpu 'command -v [a-z0-9_.+-]+' "$ROOT/tests" | awk '{print $3}' | sort -u); do
	x=$(command -v "$c") || { absent="$absent $c"; continue; }
	n=$((n + 1))
	p=$(owner "$x")
	[ -n "$p" ] && ! grep -qx "$p" "$T/tallowed" && bad="$bad $c($p)"
done
for m in $(grep -rhoE --exclude-dir=vm --exclude-dir=gpu '^\s*(import|from) [a-zA-Z_][a-zA-Z0-9_]*' "$ROOT/tests" | awk '{print $2}' | sort -u); do
	f=$(cd / && /usr/bin/python3 -c "import $m, sys; print(getattr($m, '__file__', '') or '')" 2>/dev/null)
	[ -n "$f" ] || continue # built in, or a module of tests/ (not found from /)
	n=$((n + 1))
	p=$(dpkg -S "$f" 2>/dev/null | grep -v '^diversion' | head -n1 | cut -d: -f1)
	[ -n "$p" ] && ! grep -qx "$p" "$T/tallowed" && bad="$bad python:$m($p)"
done
[ "$n" -ge 20 ] && [ -z "$bad" ] &&
	pass "make check's list: $n programs and Python modules the tests use come from it, its dependencies or an Essential package (not here:${absent:- none})" ||
	fail "the tests use what tests/deps.sh test does not install:$bad ($n checked)"
finish
