#!/bin/bash
# corral-collector's listening socket: a port in use (by another collector or by any other
# process) is an error naming the address, never a silent share; with [server] reuse_port =
# true in both, two collectors share one port and the kernel spreads connections over them
# (each stores what it received: counted with plain SQL on each database).
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
coll_init collector_listen "$LOAD"
coll_tokens --reader n1

port=$(free_port)
start_collector "sqlite:$T/a.db" "$port" || { fail "first collector did not start"; exit 1; }
first=$CPID

# a second collector on the same port: refused at start, with a message naming the port
timeout 10 "$COLL" serve --listen "127.0.0.1:$port" --db "sqlite:$T/b.db" --tokens "$T/tokens" \
	>"$T/second.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "127.0.0.1:$port: address already in use" "$T/second.log" \
	&& grep -q "reuse_port" "$T/second.log" \
	&& ok "second collector on a port in use exits 1: $(head -1 "$T/second.log")" \
	|| fail "second collector: rc $rc, $(cat "$T/second.log")"
kill "$first"; wait "$first" 2>/dev/null

# a port held by another program, reuse_port or not
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); open(sys.argv[2], "w").close(); time.sleep(60)
' "$port" "$T/held" &
holder=$!
PIDS+=("$holder")
for _ in $(seq 100); do [ -e "$T/held" ] && break; sleep 0.05; done
[ -e "$T/held" ] || fail "the holder could not bind port $port"
for reuse in false true; do
	printf '[server]\nreuse_port = %s\n' "$reuse" > "$T/c-$reuse.conf"
	timeout 10 "$COLL" serve --config "$T/c-$reuse.conf" --listen "127.0.0.1:$port" \
		--db "sqlite:$T/c.db" --tokens "$T/tokens" >"$T/held-$reuse.log" 2>&1
	rc=$?
	# with reuse_port too: the holder did not set SO_REUSEPORT, so it does not share
	[ $rc = 1 ] && grep -q "address already in use" "$T/held-$reuse.log" \
		&& ok "port held by another program, reuse_port = $reuse: refused" \
		|| fail "held port, reuse_port = $reuse: rc $rc $(cat "$T/held-$reuse.log")"
done
kill "$holder"; wait "$holder" 2>/dev/null

# a bad value names the key
printf '[server]\nreuse_port = maybe\n' > "$T/bad.conf"
"$COLL" serve --config "$T/bad.conf" --listen "127.0.0.1:$port" --db "sqlite:$T/c.db" \
	--tokens "$T/tokens" >"$T/bad.log" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "\[server\] reuse_port: expected true or false" "$T/bad.log" \
	&& ok "reuse_port = maybe: $(head -1 "$T/bad.log")" || fail "bad reuse_port: rc $rc $(cat "$T/bad.log")"

# reuse_port = true in both: the local scale-out mode, both serve and both store
printf '[server]\nreuse_port = true\n' > "$T/reuse.conf"
start_collector "sqlite:$T/r1.db" "$port" --config "$T/reuse.conf" || fail "reuse: first"
r1=$CPID
start_collector "sqlite:$T/r2.db" "$port" --config "$T/reuse.conf" || fail "reuse: second"
r2=$CPID
kill -0 "$r1" 2>/dev/null && kill -0 "$r2" 2>/dev/null && ok "reuse_port: two collectors share port $port" \
	|| fail "reuse_port: both should run"
# one record per connection (curl opens a new one each time): the kernel spreads them
"$LOAD" gen --node n1 --count 40 --prefix reuse- > "$T/recs"
while IFS= read -r line; do
	printf '%s\n' "$line" > "$T/rec"
	curl -s -o /dev/null -H "Authorization: Bearer $N1" -H 'Content-Type: application/x-ndjson' \
		--data-binary "@$T/rec" "http://127.0.0.1:$port/v1/records"
done < "$T/recs"
stop_collector
kill "$r1"; wait "$r1" 2>/dev/null
a=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from records").fetchone()[0])' "$T/r1.db")
b=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from records").fetchone()[0])' "$T/r2.db")
[ $((a + b)) = 40 ] && [ "$a" -gt 0 ] && [ "$b" -gt 0 ] \
	&& ok "reuse_port: 40 records over two collectors ($a + $b, counted in each database)" \
	|| fail "reuse_port: $a + $b records, expected 40 spread over both"

[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
