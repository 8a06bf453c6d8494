#!/bin/bash
# Both /metrics endpoints pass `promtool check metrics` with tasks running (the agent with its
# BPF meter, so that the families only it serves are linted too; per-task series on,
# bounded by [metrics] tasks_max) and after uploads; the build-info, last-upload, pending and
# spool series are there with true values; the collector counts refused requests by reason
# and logs them with the client and the token (a node writing another node's records: both
# nodes), rate-limited; the alert rules pass `promtool check rules` and their unit tests
# (`promtool test rules`, docs/monitoring/corral-alerts.test.yml), and every metric the rules
# and the Grafana dashboard use is served.
. "$(dirname "$0")/lib.sh"
need_root
command -v promtool >/dev/null || { echo "FAIL: promtool missing (Debian package prometheus: tests/deps.sh)"; exit 1; }
COLL=$O/corral-collector
MON=$(dirname "$0")/../../docs/monitoring
read -r CPORT MPORT <<<"$(free_ports 2)"
NODETOK=tok-node-it-0123456789abcdef
printf 'node it-node %s\nreader ops tok-reader-0123456789abcdef\n' "$NODETOK" >"$T/tokens"
chmod 600 "$T/tokens"
echo "$NODETOK" >"$T/token"
chmod 600 "$T/token"
"$COLL" serve --listen "127.0.0.1:$CPORT" --db "sqlite:$T/c.db" --tokens "$T/tokens" >"$T/coll.log" 2>&1 &
CPID=$!
wait_up "http://127.0.0.1:$CPORT/healthz" "$CPID" "$T/coll.log"
printf '[metrics]\nlisten = %s\ntasks = task\ntasks_max = 2\n' "$MPORT" >"$T/a.conf"
start_agent --config "$T/a.conf" --collector-url "http://127.0.0.1:$CPORT" --token-file "$T/token"

# three running tasks (two with limits), one ended; wait until the collector has its records
for i in 1 2 3; do ctl run --account "acct-$i" --job "job \"$i\"" --memory 64M --cpus 0.5 -- sleep 60 >/dev/null; done
ctl run --wait -- true >/dev/null
for _ in $(seq 200); do
	[ "$(ctl status --json | jget upload.pending_records)" = 0 ] && [ "$(ctl status --json | jget upload.last_success_ns)" != 0 ] && break
	sleep 0.1
done
now=$(date +%s)
curl -fsS "http://127.0.0.1:$MPORT/metrics" >"$T/agent.prom"
out=$(promtool check metrics <"$T/agent.prom" 2>&1); rc=$?
[ "$rc" = 0 ] && [ -z "$out" ] && pass "agent /metrics: promtool check metrics clean ($(grep -c '^corral_' "$T/agent.prom") samples, $(grep -c '^# TYPE' "$T/agent.prom") families, BPF loaded: $(awk '$1 == "corral_bpf_loaded" {print $2}' "$T/agent.prom"))" ||
	fail "agent /metrics: promtool (rc $rc): $out"
val() { awk -v m="$1" '$1 == m { print $2 }' "$2"; }
v=$(val corral_upload_last_success_timestamp_seconds "$T/agent.prom")
python3 -c "import sys; t=float(sys.argv[1]); sys.exit(0 if abs(t - int(sys.argv[2])) < 60 else 1)" "${v:-0}" "$now" &&
	pass "corral_upload_last_success_timestamp_seconds $v (now $now)" || fail "last success timestamp '$v', now $now"
stored=$(sqlite3 "$T/c.db" "select count(*) from records where node = 'it-node'")
[ "$(val corral_spool_pending_records "$T/agent.prom")" = 0 ] && [ "$(val corral_upload_records_acked_total "$T/agent.prom")" = "$stored" ] &&
	pass "pending 0, records acked $(val corral_upload_records_acked_total "$T/agent.prom") = rows in the collector's database $stored" ||
	fail "pending $(val corral_spool_pending_records "$T/agent.prom"), acked $(val corral_upload_records_acked_total "$T/agent.prom"), stored $stored"
spool=$(val corral_spool_bytes "$T/agent.prom")
disk=$(find "$STATE/spool" -maxdepth 1 -type f -name 'seg-*' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
[ -n "$spool" ] && [ "$spool" -ge "$disk" ] && [ "$(val corral_spool_max_bytes "$T/agent.prom")" = 1073741824 ] &&
	pass "corral_spool_bytes $spool (segments on disk $disk), corral_spool_max_bytes 1 GiB" || fail "spool bytes '$spool', segments $disk"
grep -q "^corral_build_info{program=\"corrald\",version=\"$("$CORRALD" --version | cut -d' ' -f2)\"} 1$" "$T/agent.prom" &&
	pass "corral_build_info names corrald's version" || fail "build info: $(grep build_info "$T/agent.prom")"
! grep -q '_ms\b\|_ms ' "$T/agent.prom" && grep -q '^corral_upload_backoff_seconds ' "$T/agent.prom" &&
	pass "backoff in seconds, no _ms unit" || fail "backoff: $(grep backoff "$T/agent.prom")"
# per-task series: bounded by tasks_max (3 running, 2 shown, 1 counted as omitted)
ntasks=$(grep -o '^corral_task_cpu_seconds_total{task="[^"]*"' "$T/agent.prom" | sort -u | wc -l)
running=0
for d in /sys/fs/cgroup/memory/"$SUBTREE"/t-*; do [ -n "$(cat "$d/cgroup.procs" 2>/dev/null)" ] && running=$((running + 1)); done
[ "$running" = 3 ] && [ "$ntasks" = 2 ] && [ "$(val corral_metrics_series_omitted "$T/agent.prom")" = 1 ] &&
	grep -q '^corral_task_memory_limit_bytes{.*} 67108864$' "$T/agent.prom" &&
	pass "per-task series: $ntasks of $running running tasks (cgroups with processes), 1 omitted" ||
	fail "per-task series: $ntasks shown, $running running, omitted $(val corral_metrics_series_omitted "$T/agent.prom")"

# the other two modes, through a reload: per account (3 accounts, 2 shown), and off (no
# per-task or per-account series); promtool clean in each
for mode in account off; do
	printf '[metrics]\nlisten = %s\ntasks = %s\ntasks_max = 2\n' "$MPORT" "$mode" >"$T/a.conf"
	n0=$(grep -c 'configuration reloaded' "$T/agent.log")
	kill -HUP "$AGENT_PID"
	for _ in $(seq 100); do [ "$(grep -c 'configuration reloaded' "$T/agent.log")" -gt "$n0" ] && break; sleep 0.05; done
	curl -fsS "http://127.0.0.1:$MPORT/metrics" >"$T/agent-$mode.prom"
	out=$(promtool check metrics <"$T/agent-$mode.prom" 2>&1); rc=$?
	accts=$(grep -o '^corral_account_tasks_running{account="[^"]*"' "$T/agent-$mode.prom" | sort -u | wc -l)
	tasks=$(grep -c '^corral_task_' "$T/agent-$mode.prom")
	if [ "$mode" = account ]; then
		[ "$rc" = 0 ] && [ -z "$out" ] && [ "$accts" = 2 ] && [ "$tasks" = 0 ] &&
			[ "$(val corral_metrics_series_omitted "$T/agent-$mode.prom")" = 1 ] &&
			pass "tasks = account: promtool clean, 2 of 3 accounts, 1 omitted, no per-task series" ||
			fail "tasks = account: promtool rc $rc ($out), $accts accounts, $tasks task samples"
	else
		[ "$rc" = 0 ] && [ -z "$out" ] && [ "$accts" = 0 ] && [ "$tasks" = 0 ] &&
			pass "tasks = off: promtool clean, no per-task or per-account series" ||
			fail "tasks = off: promtool rc $rc ($out), $accts accounts, $tasks task samples"
	fi
done

# refused requests: one 403 (a reader token writing), then eight 401 (unknown token)
post() { curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/x-ndjson' \
	-H "Authorization: Bearer $1" --data-binary '{}' "http://127.0.0.1:$CPORT/v1/records"; }
codes=$(post tok-reader-0123456789abcdef)
for _ in $(seq 8); do codes="$codes $(post tok-bogus-0123456789abcdef)"; done
# and a node writing another node's records: refused naming the node, counted apart
"$O/tests/bench/helper_ingest_load" gen --node n2 --count 2 --start 1 --prefix lint- >"$T/n2.ndjson"
other=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/x-ndjson' \
	-H "Authorization: Bearer $NODETOK" --data-binary "@$T/n2.ndjson" "http://127.0.0.1:$CPORT/v1/records")
curl -fsS "http://127.0.0.1:$CPORT/metrics" >"$T/coll.prom"
out=$(promtool check metrics <"$T/coll.prom" 2>&1); rc=$?
[ "$rc" = 0 ] && [ -z "$out" ] && pass "collector /metrics: promtool check metrics clean" ||
	fail "collector /metrics: promtool (rc $rc): $out"
r401=$(val 'corral_collector_requests_refused_total{reason="unknown_token"}' "$T/coll.prom")
r403=$(val 'corral_collector_requests_refused_total{reason="wrong_role"}' "$T/coll.prom")
rnode=$(val 'corral_collector_requests_refused_total{reason="other_node"}' "$T/coll.prom")
[ "$other" = 403 ] && [ "$rnode" = 1 ] &&
	grep -q "refused a request from 127.0.0.1 (node token of 'it-node'): 403 record 0 (.*): node 'n2' may not be written with the node token of 'it-node' \[other_node\]" "$T/coll.log" &&
	[ "$(sqlite3 "$T/c.db" "select count(*) from records where node = 'n2'")" = 0 ] &&
	pass "another node's records: 403, counted other_node $rnode, logged with the node and the record's node, none stored" ||
	fail "another node's records: answer $other, counted $rnode, log: $(grep "it-node'):" "$T/coll.log")"
[ "$codes" = "403 401 401 401 401 401 401 401 401" ] && [ "$r401" = 8 ] && [ "$r403" = 1 ] &&
	pass "refused requests counted: unknown_token $r401, wrong_role $r403 (answers: $codes)" ||
	fail "refused: answers $codes, counted unknown_token $r401 wrong_role $r403"
logged=$(grep -c 'refused a request from' "$T/coll.log")
grep -q "refused a request from 127.0.0.1 (reader token of 'ops'): 403 only node tokens may write records \[wrong_role\]" "$T/coll.log" &&
	grep -q "refused a request from 127.0.0.1 (a token the collector does not know): 401 missing or unknown bearer token \[unknown_token\]" "$T/coll.log" &&
	[ "$logged" -ge 5 ] && [ "$logged" -le 10 ] &&
	pass "refusals logged with address, token and reason, $logged lines for 9 (at most 5 per 10 s window)" ||
	fail "refusal log ($logged lines): $(grep refused "$T/coll.log")"
# the next window says how many went unlogged (waits for the next 10 s boundary)
if [ "$logged" -lt 9 ]; then
	sleep $((10 - $(date +%s) % 10)).2
	post tok-bogus-0123456789abcdef >/dev/null
	grep -q "more refused requests not logged" "$T/coll.log" &&
		pass "next window: $(grep -o '[0-9]* more refused requests not logged' "$T/coll.log" | tail -n1)" ||
		fail "no count of unlogged refusals: $(tail -n3 "$T/coll.log")"
fi
# the alert rules and the dashboard: valid, and every metric they use is served
out=$(promtool check rules "$MON/corral-alerts.yml" 2>&1) && pass "promtool check rules: $(echo "$out" | tail -n1 | tr -s ' ')" ||
	fail "promtool check rules: $out"
# ... and each fires on its condition, after its "for", and not on a healthy node (unit tests)
out=$(cd "$MON" && promtool test rules corral-alerts.test.yml 2>&1) && pass "promtool test rules: $(echo "$out" | tail -n1 | tr -s ' ')" ||
	fail "promtool test rules: $out"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$MON/corral-dashboard.json" || fail "dashboard: not JSON"
missing=
for m in $(grep -ho 'corral_[a-z_]*' "$MON/corral-alerts.yml" "$MON/corral-dashboard.json" | sort -u); do
	b=${m%_bucket}
	[ "$m" = corral-overview ] && continue
	grep -q "^# TYPE $b " "$T/agent.prom" "$T/coll.prom" || missing="$missing $m"
done
[ -z "$missing" ] && pass "every metric of the alert rules and the dashboard is served" || fail "not served:$missing"
kill "$CPID"; wait "$CPID" 2>/dev/null
finish
