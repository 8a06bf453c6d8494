#!/bin/bash
# ps --all in pages: with ended_keep = 20 and 30 tasks ended (the 10 oldest dropped), 2 live
# tasks: pages of 7 (corralctl ps --all --limit 7 --after C, C printed on stderr) list every
# task kept exactly once, newest first (the live ones, then the ended ones by end), the same
# rows as one ps --all; a cursor taken before 5 more tasks end still continues where it was
# (the rows after it, no repeats); the table without --limit is a page of 100 with the next
# page's command on stderr; bad limits and cursors are refused naming the field.
. "$(dirname "$0")/lib.sh"
need_root
printf '[agent]\nended_keep = 20\n' >"$T/a.conf"
start_agent --config "$T/a.conf"

for i in $(seq 30); do run_wait --no-sandbox -- true; done
ctl run --no-sandbox -- sleep 100 >/dev/null
ctl run --no-sandbox -- sleep 100 >/dev/null
ids() { python3 -c 'import sys,json; [print(t["id"]) for t in json.load(sys.stdin)]'; }
ctl ps --all --json | ids >"$T/all"
[ "$(wc -l <"$T/all")" = 22 ] && pass "ps --all: 22 rows (2 live, ended_keep 20)" ||
	fail "ps --all: $(wc -l <"$T/all") rows"
# what is kept on disk is bounded the same way: the ended/ directory, read from outside, holds
# the 20 newest ended tasks' files
ls "$STATE/ended" | sort >"$T/ended.files"
ctl ps --all --json | python3 -c 'import sys,json; [print(t["id"]) for t in json.load(sys.stdin) if t["state"] == "ended"]' | sort >"$T/ended.ids"
[ "$(wc -l <"$T/ended.files")" = 20 ] && [ "$(sed 's/\..*//' "$T/ended.files" | sort -u)" = "$(cat "$T/ended.ids")" ] &&
	pass "ended/: 20 files, one per ended task listed" ||
	fail "ended/: $(wc -l <"$T/ended.files") files: $(head -c 300 "$T/ended.files")"

pages() { # pages of $1 from cursor $2 (may be empty): ids to stdout, pages counted in $T/np
	local after=$2 n=0
	: >"$T/np"
	while :; do
		if [ -n "$after" ]; then
			ctl ps --all --json --limit "$1" --after "$after" 2>"$T/err" | ids
		else
			ctl ps --all --json --limit "$1" 2>"$T/err" | ids
		fi
		n=$((n + 1)); echo "$n" >"$T/np"
		after=$(sed -n 's/^more: .* --after //p' "$T/err")
		[ -n "$after" ] || break
		[ "$n" -lt 20 ] || break
	done
}
pages 7 "" >"$T/paged"
cmp -s "$T/all" "$T/paged" && [ "$(cat "$T/np")" = 4 ] &&
	pass "pages of 7: the same 22 rows in order, 4 pages" ||
	fail "pages of 7 ($(cat "$T/np") pages): $(diff "$T/all" "$T/paged" | head -5)"
ctl ps --all --json | python3 -c 'import sys,json
t = json.load(sys.stdin)
st = [x["state"] for x in t]
ends = [x["start_ns"] for x in t if x["state"] == "ended"]
sys.exit(0 if st[:2] == ["running", "running"] and all(s == "ended" for s in st[2:]) and ends == sorted(ends, reverse=True) else 1)' &&
	pass "newest first: live tasks, then ended ones" || fail "order: $(ctl ps --all --json | head -c 300)"

# a cursor in the ended part survives tasks ending meanwhile (and the oldest being dropped)
ctl ps --all --json --limit 9 >/dev/null 2>"$T/err"
cur=$(sed -n 's/^more: .* --after //p' "$T/err")
ctl ps --all --json --limit 100 --after "$cur" 2>/dev/null | ids >"$T/before"
for i in $(seq 5); do run_wait --no-sandbox -- true; done
ctl ps --all --json --limit 100 --after "$cur" 2>/dev/null | ids >"$T/after"
# the 5 new ones pushed the 5 oldest out: the rest after the cursor is the same, minus those
head -n $(($(wc -l <"$T/before") - 5)) "$T/before" >"$T/expect"
[ -n "$cur" ] && cmp -s "$T/expect" "$T/after" &&
	pass "cursor $cur: the same rows after it once 5 more tasks ended ($(wc -l <"$T/after") left)" ||
	fail "cursor $cur after 5 more ended: $(diff "$T/expect" "$T/after" | head -5)"

# the table (no --json) pages by itself: the newest 100 rows, then the command for the next
# page, which lists the rest; --json without --limit is the whole list
stop_agent
printf '[agent]\nended_keep = 200\n' >"$T/b.conf"
start_agent --config "$T/b.conf"
for i in $(seq 110); do ctl run --no-sandbox -- true >/dev/null; done
for _ in $(seq 100); do [ "$(ctl ps --json | ids | wc -l)" -le 2 ] && break; sleep 0.1; done # the two sleeps
ctl ps --all --json | ids >"$T/all2"
ctl ps --all >"$T/t1" 2>"$T/e1"
tail -n +2 "$T/t1" | awk '{print $1}' >"$T/t1.ids"
cur=$(sed -n 's/^more: corralctl ps --all --limit 100 --after //p' "$T/e1")
ctl ps --all --limit 100 --after "$cur" 2>"$T/e2" | tail -n +2 | awk '{print $1}' >"$T/t2.ids"
n=$(wc -l <"$T/all2")
[ "$n" -gt 120 ] && [ "$(wc -l <"$T/t1.ids")" = 100 ] && cmp -s "$T/t1.ids" <(head -n 100 "$T/all2") &&
	cmp -s "$T/t2.ids" <(tail -n +101 "$T/all2") && [ ! -s "$T/e2" ] &&
	pass "ps --all as a table: 100 rows, then the other $((n - 100)) from the printed cursor" ||
	fail "ps --all table: $(wc -l <"$T/t1.ids") rows of $n, cursor '$cur', next $(wc -l <"$T/t2.ids")"

out=$(ctl ps --all --limit 0 2>&1) && fail "limit 0 accepted" ||
	{ echo "$out" | grep -q -- "--limit" && pass "--limit 0 refused: $out" || fail "--limit 0: $out"; }
out=$(ctl ps --all --limit 5 --after bogus 2>&1) && fail "bad cursor accepted" ||
	{ echo "$out" | grep -q "after" && pass "a bad cursor refused: $out" || fail "bad cursor: $out"; }
finish
