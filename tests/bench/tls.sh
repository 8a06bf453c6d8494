#!/bin/bash
# The cost of TLS on ingest: the same batches (500 task.end records of ~1 KiB each) posted to a
# collector over plain HTTP and to one over HTTPS with client certificates (tls_client_ca: each
# POST's certificate verified and its name checked), on fresh SQLite databases, side by side in
# each round (plain first, then TLS, then the next round). BENCH_CONNECTIONS (default 4)
# keep-alive connections at once, as that many nodes; BENCH_RECORDS (default 20000);
# BENCH_ROUNDS (default 3). Prints records/s of each and the ratio TLS / plain per round and
# the medians. The rate is the load helper's: from its first POST to its last answer. Also the
# collector's CPU time (user + system, /proc/PID/stat) per 1,000 records, which a loaded host
# disturbs less than the rate.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
LOAD=$O/tests/bench/helper_ingest_load
N=${BENCH_RECORDS:-20000}
K=${BENCH_CONNECTIONS:-4}
R=${BENCH_ROUNDS:-3}
command -v openssl >/dev/null || { echo "FAIL: openssl missing"; exit 1; }
coll_init bench_tls "$LOAD"
coll_tokens bench
TOK=$(node_token bench)

P=$T/pki
mkdir -p "$P"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench-ca" \
	-keyout "$P/ca.key" -out "$P/ca.pem" 2>/dev/null
mkcert() { # mkcert NAME SAN
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$P/$1.key" -out "$P/$1.csr" 2>/dev/null
	printf 'subjectAltName=%s\n' "$2" >"$P/$1.ext"
	openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
		-days 2 -extfile "$P/$1.ext" -out "$P/$1.pem" 2>/dev/null
}
mkcert server "IP:127.0.0.1"
mkcert bench "DNS:bench"
printf '[server]\ntls_cert = %s\ntls_key = %s\ntls_client_ca = %s\n' \
	"$P/server.pem" "$P/server.key" "$P/ca.pem" >"$T/tls.conf"
: >"$T/empty.conf"

# rate SCHEME CONF -> accepted records/s CPU-ms-per-1000-records
rate() {
	local scheme=$1 conf=$2 port out db
	port=$(free_port)
	db=$T/$scheme-$RANDOM.db
	"$COLL" serve --config "$conf" --listen "127.0.0.1:$port" --db "sqlite:$db" \
		--tokens "$T/tokens" 2>>"$T/coll.log" &
	CPID=$!
	for _ in $(seq 600); do
		curl -sf --cacert "$P/ca.pem" "$scheme://127.0.0.1:$port/healthz" >/dev/null && break
		sleep 0.05
	done
	out=$(INGEST_CACERT=$P/ca.pem INGEST_CERT=$P/bench.pem INGEST_KEY=$P/bench.key \
		"$LOAD" post --url "$scheme://127.0.0.1:$port/v1/records" --token "$TOK" \
		--node bench --count "$N" --batch 500 --connections "$K") ||
		echo "post failed: $out" >&2
	# utime + stime of the collector, in clock ticks, before it stops
	cpu=$(awk -v hz="$(getconf CLK_TCK)" -v n="$N" '{printf "%.1f", ($14 + $15) * 1000 / hz / (n / 1000)}' \
		"/proc/$CPID/stat")
	kill -TERM "$CPID"; wait "$CPID" 2>/dev/null; CPID=
	rm -f "$db" "$db"-*
	echo "$(echo "$out" | sed -n 's/.*accepted=\([0-9]*\).* rate=\([0-9]*\).*/\1 \2/p') $cpu"
}

F='%-6s %12s %12s %9s %14s %14s %9s\n'
printf "$F" round "plain rec/s" "TLS rec/s" "TLS/plain" "plain CPU ms" "TLS CPU ms" "TLS/plain"
printf "$F" "" "" "" "(rate)" "/1000 rec" "/1000 rec" "(CPU)"
: >"$T/rounds"
for r in $(seq "$R"); do
	read -r pa plain pcpu < <(rate http "$T/empty.conf")
	read -r ta tls tcpu < <(rate https "$T/tls.conf")
	if [ "${pa:-0}" != "$N" ] || [ "${ta:-0}" != "$N" ]; then
		echo "FAIL: round $r: accepted plain ${pa:-0}, TLS ${ta:-0} of $N"; exit 1
	fi
	ratio=$(awk -v a="$tls" -v b="$plain" 'BEGIN{printf "%.2f", a / b}')
	cratio=$(awk -v a="$tcpu" -v b="$pcpu" 'BEGIN{printf "%.2f", a / b}')
	printf "$F" "$r" "$plain" "$tls" "$ratio" "$pcpu" "$tcpu" "$cratio"
	echo "$plain $tls $ratio $pcpu $tcpu $cratio" >>"$T/rounds"
done
med() { sort -n | awk '{v[NR]=$1} END{print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
col() { cut -d' ' -f"$1" "$T/rounds" | med; }
printf "$F" median "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)" "$(col 6)"
echo "($N records, batches of 500, $K keep-alive connections, SQLite, ECDSA P-256 certificates, client certificates verified per POST; load $(cut -d' ' -f1-3 /proc/loadavg))"
