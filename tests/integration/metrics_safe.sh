#!/bin/bash
# The agent's /metrics: a bare port listens on 127.0.0.1 only; per-task series follow
# [metrics] tasks (off: no account, job or user of anyone's task; account: running tasks summed
# per account, no task, job or user; task: one series per task); and 1,000 slow connections
# (half a request each, then silence) neither lock out a scrape nor stay open past the timeout.
. "$(dirname "$0")/lib.sh"
need_root
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
ulimit -n 8192 # what corrald.service's LimitNOFILE gives it (65536), at least
id -u corral-it-user >/dev/null 2>&1 || useradd -M -r -s /bin/sh corral-it-user
MPORT=$(free_port)
scrape() { curl -fsS --max-time 5 "http://127.0.0.1:$MPORT/metrics"; }

conf() { printf '[agent]\nsocket_mode = 0666\n[metrics]\nlisten = %s\ntasks = %s\ntimeout = 2s\n' "$MPORT" "$1" >"$T/a.conf"; }
conf off
start_agent --no-bpf --config "$T/a.conf"
l=$(ss -Hltn "sport = :$MPORT" | awk '{print $4}')
[ "$l" = "127.0.0.1:$MPORT" ] && pass "listen = PORT binds 127.0.0.1 only ($l)" || fail "listening on '$l'"

# a task of another user with names it may want to keep to itself
secret() {
	setpriv --reuid corral-it-user --regid corral-it-user --clear-groups "$CORRALCTL" --socket "$SOCK" \
		run --workdir / --account alice-secret-acct --job secret-job -- sleep 30
}
for mode in off account task; do
	if [ "$mode" != off ]; then stop_agent; conf "$mode"; start_agent --no-bpf --config "$T/a.conf"; fi
	id=$(secret)
	m=$(scrape)
	case $mode in
	off) ! echo "$m" | grep -Eq 'alice-secret-acct|secret-job|corral-it-user|corral_task_' && echo "$m" | grep -q '^corral_tasks_live 1' &&
		pass "tasks = off: node-wide series only (corral_tasks_live 1, no names)" || fail "off: $(echo "$m" | grep -E 'secret|corral_task_')" ;;
	account) echo "$m" | grep -q '^corral_account_tasks_running{account="alice-secret-acct"} 1' && ! echo "$m" | grep -Eq 'secret-job|corral-it-user|corral_task_' &&
		pass "tasks = account: per account only, no task, job or user" || fail "account: $(echo "$m" | grep -E 'secret|corral_task_|corral_account')" ;;
	task) echo "$m" | grep -q "^corral_task_cpu_seconds_total{task=\"$id\",user=\"corral-it-user\",account=\"alice-secret-acct\",job=\"secret-job\"}" &&
		pass "tasks = task: one series per task with its labels" || fail "task: $(echo "$m" | grep corral_task_ | head -3)" ;;
	esac
	ctl kill "$id" >/dev/null
done

# 1,000 slow connections held open while root scrapes
python3 - "$MPORT" >"$T/slow.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1]); socks = []
for i in range(1000):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")   # never finished
    socks.append(s)
print("open", len(socks), flush=True)
time.sleep(1)
# wait for the agent to drop them (idle timeout 2 s): each recv returns b"" (closed) or fails
t0 = time.time(); closed = 0
for s in socks:
    s.settimeout(max(0.1, 15 - (time.time() - t0)))
    try:
        closed += s.recv(1) == b""
    except OSError:
        closed += 1
print("closed", closed, "after %.1f s" % (time.time() - t0), flush=True)
PY
SLOW=$!
for _ in $(seq 200); do grep -q '^open' "$T/slow.out" && break; sleep 0.05; done
grep -q '^open 1000' "$T/slow.out" && pass "1,000 slow connections open" || fail "slow connections: $(cat "$T/slow.out")"
n=$(ss -Htn state established "sport = :$MPORT" | wc -l)
t0=$(date +%s%N); out=$(scrape | grep -c '^corral_tasks_live'); t1=$(date +%s%N)
[ "$out" = 1 ] && pass "scrape served with $n slow connections held ($(((t1 - t0) / 1000000)) ms)" || fail "scrape failed with $n slow connections held"
wait $SLOW
grep -q '^closed 1000 ' "$T/slow.out" && pass "the agent closed all of them at its timeout: $(tail -n1 "$T/slow.out")" || fail "slow connections: $(cat "$T/slow.out")"
ctl status >/dev/null && pass "control socket answers after the slow clients" || fail "agent unresponsive"
finish
