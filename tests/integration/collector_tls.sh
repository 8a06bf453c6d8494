#!/bin/bash
# corral-collector over TLS with client certificates, against a CA and certificates made here
# (openssl):
#  0. refused at start, naming the key: a key not the certificate's, tls_cert without tls_key,
#     a tls_client_ca that holds no certificate; a key group or others may reach or another
#     user owns (exit 2); a certificate, key or CA file over 16 MiB (one of exactly 16 MiB,
#     comments then the PEM, loads and is served);
#  1. corrald -> collector over HTTPS, the collector's key pinned, the node's certificate
#     presented: every task's records stored (counted with sqlite3);
#  2. refused: a client that trusts another CA; a node certificate from another CA, or issued
#     for servers only (extendedKeyUsage serverAuth); the
#     certificate of another node with n1's token; no certificate with a node token; plain HTTP
#     to the TLS port; nothing of these stored;
#  3. an agent whose pin does not match: nothing stored, the error in its log;
#  4. SIGHUP: a new certificate and key are served from then on (fingerprint read with
#     openssl s_client), an agent pinning both keys goes on delivering; a broken file at
#     SIGHUP keeps the loaded certificate.
. "$(dirname "$0")/lib.sh"
need_root
command -v openssl >/dev/null || skip "openssl missing"
command -v sqlite3 >/dev/null || skip "sqlite3 missing"
H=$O/tests/bench/helper_launch_bench
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DB=$T/records.db
N1TOK=tls-node-n1-token-0123456789abcdef
RDTOK=tls-reader-token-0123456789abcdef
printf 'node n1 %s\nnode n2 tls-node-n2-token-0123456789abcdef\nreader ops %s\n' "$N1TOK" "$RDTOK" >"$T/tokens"
chmod 600 "$T/tokens"
echo "$N1TOK" >"$T/token"
chmod 600 "$T/token"
COLL=
trap '[ -n "$COLL" ] && kill -9 "$COLL" 2>/dev/null; cleanup' EXIT

# --- certificates --------------------------------------------------------------------------
P=$T/pki
mkdir -p "$P"
mkca() { # mkca NAME
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj "/CN=$1" -keyout "$P/$1.key" -out "$P/$1.pem" 2>/dev/null
}
mkcert() { # mkcert CA NAME SAN...: NAME.pem/NAME.key signed by CA
	local ca=$1 name=$2 san
	shift 2
	san=$(IFS=,; echo "$*")
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=${name%%-*}" \
		-keyout "$P/$name.key" -out "$P/$name.csr" 2>/dev/null
	printf 'subjectAltName=%s\n' "$san" >"$P/$name.ext"
	openssl x509 -req -in "$P/$name.csr" -CA "$P/$ca.pem" -CAkey "$P/$ca.key" -CAcreateserial \
		-days 2 -extfile "$P/$name.ext" -out "$P/$name.pem" 2>/dev/null
}
pin_of() { openssl x509 -in "$1" -pubkey -noout | openssl pkey -pubin -outform der |
	openssl dgst -sha256 -binary | base64; }
fp_of() { openssl x509 -in "$1" -noout -fingerprint -sha256 | cut -d= -f2; }
served_fp() { openssl s_client -connect "127.0.0.1:$PORT" </dev/null 2>/dev/null |
	openssl x509 -noout -fingerprint -sha256 | cut -d= -f2; }
mkca ca
mkca otherca
mkcert ca server DNS:localhost IP:127.0.0.1
mkcert ca server2 DNS:localhost IP:127.0.0.1
mkcert ca n1 DNS:n1
mkcert ca n2 DNS:n2
mkcert otherca n1-other DNS:n1
mkcert ca n1-server DNS:n1
# the same name, issued for servers only (extendedKeyUsage serverAuth)
printf 'subjectAltName=DNS:n1\nextendedKeyUsage=serverAuth\n' >"$P/n1-server.ext"
openssl x509 -req -in "$P/n1-server.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
	-days 2 -extfile "$P/n1-server.ext" -out "$P/n1-server.pem" 2>/dev/null
# mkexpired NAME SAN...: NAME.pem/NAME.key signed by ca, valid only in 2020 (openssl 3.0's x509
# command cannot backdate a certificate)
mkexpired() {
	python3 - "$P" "$@" <<'PY'
import datetime, ipaddress, os, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
d, name, sans = sys.argv[1], sys.argv[2], sys.argv[3:]
ca_key = serialization.load_pem_private_key(open(d + "/ca.key", "rb").read(), None)
ca = x509.load_pem_x509_certificate(open(d + "/ca.pem", "rb").read())
key = ec.generate_private_key(ec.SECP256R1())
alt = [x509.IPAddress(ipaddress.ip_address(v[3:])) if v.startswith("IP:") else x509.DNSName(v[4:])
       for v in sans]
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
        name.split("-")[0])])).issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.datetime(2020, 1, 1)).not_valid_after(datetime.datetime(2020, 1, 2))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False).sign(ca_key, hashes.SHA256()))
open(d + "/" + name + ".pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(d + "/" + name + ".key", "wb").write(key.private_bytes(serialization.Encoding.PEM,
     serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
os.chmod(d + "/" + name + ".key", 0o600)  # the collector refuses a key others may read
PY
}
mkexpired n1-expired DNS:n1
mkexpired server-expired DNS:localhost IP:127.0.0.1
for f in ca server server2 n1 n2 n1-other n1-server n1-expired server-expired; do
	[ -s "$P/$f.pem" ] || { fail "openssl could not make $f.pem"; finish; }
done
cp "$P/server.pem" "$T/served.pem"
cp "$P/server.key" "$T/served.key"

# configuration errors, each naming the key: a key that is not the certificate's, a missing key,
# a file that is not PEM
bad_start() { # bad_start WANT CONF-LINES...
	local want=$1 rc
	shift
	printf '[server]\n' >"$T/bad.conf"
	printf '%s\n' "$@" >>"$T/bad.conf"
	timeout 10 "$O/corral-collector" serve --config "$T/bad.conf" --listen 127.0.0.1:0 \
		--db "sqlite:$T/bad.db" --tokens "$T/tokens" >"$T/bad.log" 2>&1
	rc=$?
	[ $rc = "${WANT_RC:-1}" ] && grep -q "$want" "$T/bad.log" && pass "refused at start: $(head -1 "$T/bad.log" | cut -c1-150)" \
		|| fail "want '$want', rc $rc: $(cat "$T/bad.log")"
}
bad_start "does not go with tls_cert" "tls_cert = $P/server.pem" "tls_key = $P/n1.key"
bad_start "tls_key missing" "tls_cert = $P/server.pem" "tls_client_ca = $P/ca.pem"
bad_start "tls_client_ca .*expected PEM CA certificates" "tls_cert = $P/server.pem" \
	"tls_key = $P/server.key" "tls_client_ca = $T/tokens"
# a private key group or others may reach, or another user owns, is refused as ssh refuses one
# (a configuration error: exit 2), naming the file and its mode as stat reads it
cp "$P/server.key" "$T/loose.key"
for m in 640 604 620; do
	chmod "$m" "$T/loose.key"
	WANT_RC=2 bad_start "tls_key $T/loose.key: mode 0$(stat -c %a "$T/loose.key") lets group or others at a secret: refused" \
		"tls_cert = $P/server.pem" "tls_key = $T/loose.key"
done
chmod 600 "$T/loose.key"
chown nobody "$T/loose.key"
WANT_RC=2 bad_start "tls_key $T/loose.key: owned by uid $(stat -c %u "$T/loose.key"), not by uid 0 that runs this or root" \
	"tls_cert = $P/server.pem" "tls_key = $T/loose.key"

# the 16 MiB cap on a certificate, key or CA file: files of exactly 16 MiB (comment lines, which
# PEM parsing skips, then the PEM) load and the certificate is served; one byte more or 17 MiB is
# refused naming the file (sizes read back with stat)
pad_pem() { # pad_pem SRC DST SIZE: comment lines, then SRC's PEM, SIZE bytes in all
	python3 - "$@" <<'PY'
import sys
src, dst, size = open(sys.argv[1], "rb").read(), sys.argv[2], int(sys.argv[3])
line = b"# padding before the PEM block, which PEM readers skip\n"
pad = line * ((size - len(src)) // len(line))
left = size - len(src) - len(pad)
pad += (b"#" * (left - 1) + b"\n") if left else b""
open(dst, "wb").write(pad + src)
PY
}
MIB16=$((16 << 20))
pad_pem "$P/server.pem" "$T/big.pem" $MIB16
pad_pem "$P/server.key" "$T/big.key" $MIB16
pad_pem "$P/ca.pem" "$T/big-ca.pem" $MIB16
chmod 600 "$T/big.key"
BPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf '[server]\ntls_cert = %s\ntls_key = %s\ntls_client_ca = %s\n' "$T/big.pem" "$T/big.key" "$T/big-ca.pem" >"$T/big.conf"
"$O/corral-collector" serve --config "$T/big.conf" --listen "127.0.0.1:$BPORT" --db "sqlite:$T/big.db" \
	--tokens "$T/tokens" >"$T/big.log" 2>&1 &
BIG=$!
wait_up "https://127.0.0.1:$BPORT/healthz" "$BIG" "$T/big.log" --cacert "$P/ca.pem"
got=$(openssl s_client -connect "127.0.0.1:$BPORT" </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256 | cut -d= -f2)
sizes=$(stat -c %s "$T/big.pem" "$T/big.key" "$T/big-ca.pem" | sort -u)
kill "$BIG"; wait "$BIG"
[ "$sizes" = $MIB16 ] && [ "$got" = "$(fp_of "$P/server.pem")" ] &&
	pass "certificate, key and CA of $sizes bytes each (comments, then the PEM): loaded, server.pem served" ||
	fail "16 MiB files (sizes $sizes): served '$got': $(cat "$T/big.log")"
for extra in 1 $((1 << 20)); do
	pad_pem "$P/server.pem" "$T/over.pem" $((MIB16 + extra))
	bad_start "tls_cert $T/over.pem: cannot read (larger than 16 MiB)" "tls_cert = $T/over.pem" "tls_key = $P/server.key"
	pad_pem "$P/server.key" "$T/over.key" $((MIB16 + extra))
	chmod 600 "$T/over.key"
	bad_start "tls_key $T/over.key: cannot read (larger than 16 MiB)" "tls_cert = $P/server.pem" "tls_key = $T/over.key"
	pad_pem "$P/ca.pem" "$T/over-ca.pem" $((MIB16 + extra))
	bad_start "tls_client_ca $T/over-ca.pem: cannot read (larger than 16 MiB)" "tls_cert = $P/server.pem" \
		"tls_key = $P/server.key" "tls_client_ca = $T/over-ca.pem"
done
rm -f "$T"/big* "$T"/over*

cat >"$T/collector.conf" <<CONF
[server]
tls_cert = $T/served.pem
tls_key = $T/served.key
tls_client_ca = $P/ca.pem
CONF
"$O/corral-collector" serve --config "$T/collector.conf" --listen "127.0.0.1:$PORT" \
	--db "sqlite:$DB" --tokens "$T/tokens" >>"$T/collector.log" 2>&1 &
COLL=$!
wait_up "https://127.0.0.1:$PORT/healthz" "$COLL" "$T/collector.log" --cacert "$P/ca.pem"
grep -q "https, certificate sha256:" "$T/collector.log" && pass "collector serves HTTPS: $(head -1 "$T/collector.log")" \
	|| { fail "collector did not start over TLS: $(cat "$T/collector.log")"; finish; }

# --- 1. agent over TLS, pinned, with its certificate ----------------------------------------
PIN1=$(pin_of "$P/server.pem")
PIN2=$(pin_of "$P/server2.pem")
cat >"$T/agent.conf" <<CONF
[collector]
url = https://127.0.0.1:$PORT
ca_file = $P/ca.pem
pin = sha256//$PIN1;sha256//$PIN2
client_cert = $P/n1.pem
client_key = $P/n1.key
token_file = $T/token
batch_delay = 200ms
CONF
start_agent --no-bpf --config "$T/agent.conf" --node n1
"$H" 20 throughput "$SOCK" 4 >/dev/null || fail "launching 20 tasks"
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end' AND node='n1'" 20 60)
d=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
[ "$n" = 20 ] && [ "$d" = 20 ] && pass "agent -> collector over TLS (pinned, client certificate): 20 task ends stored once" \
	|| fail "over TLS: $n task.end records ($d distinct), want 20"
stop_agent

# --- 2. refusals -------------------------------------------------------------------------------
before=$(q "SELECT count(*) FROM records")
"$O/tests/bench/helper_ingest_load" gen --node n1 --count 3 --prefix tls- >"$T/batch"
post() { # post CURL-ARGS... -> CODE, BODY
	CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/x-ndjson' \
		--data-binary "@$T/batch" "$@")
	BODY=$(head -c 300 "$T/resp" 2>/dev/null)
}
post --cacert "$P/otherca.pem" -H "Authorization: Bearer $N1TOK" --cert "$P/n1.pem" --key "$P/n1.key" \
	"https://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 000 ] && pass "a client trusting another CA refuses the collector" || fail "other CA: HTTP $CODE"
post --cacert "$P/ca.pem" -H "Authorization: Bearer $N1TOK" --cert "$P/n1-other.pem" --key "$P/n1-other.key" \
	"https://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 403 ] && echo "$BODY" | grep -q "does not verify against tls_client_ca" \
	&& pass "node certificate of another CA: 403 $BODY" || fail "n1 certificate of another CA: $CODE $BODY"
post --cacert "$P/ca.pem" -H "Authorization: Bearer $N1TOK" --cert "$P/n1-server.pem" \
	--key "$P/n1-server.key" "https://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 403 ] && echo "$BODY" | grep -q "does not verify against tls_client_ca" \
	&& pass "n1's certificate issued for servers only: 403 $BODY" || fail "serverAuth-only certificate: $CODE $BODY"
post --cacert "$P/ca.pem" -H "Authorization: Bearer $N1TOK" --cert "$P/n2.pem" --key "$P/n2.key" \
	"https://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 403 ] && echo "$BODY" | grep -q "names 'n2', not node 'n1'" \
	&& pass "n1's token with n2's certificate: 403 $BODY" || fail "n2 certificate, n1 token: $CODE $BODY"
post --cacert "$P/ca.pem" -H "Authorization: Bearer $N1TOK" "https://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 403 ] && echo "$BODY" | grep -q "no client certificate" \
	&& pass "node token without a certificate: 403" || fail "no certificate: $CODE $BODY"
post -H "Authorization: Bearer $N1TOK" "http://127.0.0.1:$PORT/v1/records"
[ "$CODE" = 000 ] && pass "plain HTTP to the TLS port: no HTTP answer" || fail "plain HTTP: $CODE $BODY"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$P/ca.pem" -H "Authorization: Bearer $RDTOK" \
	"https://127.0.0.1:$PORT/v1/records?limit=1")
[ "$code" = 200 ] && pass "a reader token needs no client certificate" || fail "reader: HTTP $code"
after=$(q "SELECT count(*) FROM records")
[ "$before" = "$after" ] && pass "nothing stored by the refused requests ($after records)" \
	|| fail "records $before -> $after after refusals"

# --- 3. an agent whose pin does not match ------------------------------------------------------
sed "s|^pin = .*|pin = sha256//$(pin_of "$P/n2.pem")|" "$T/agent.conf" >"$T/agent-badpin.conf"
start_agent --no-bpf --config "$T/agent-badpin.conf" --node n1
"$H" 5 throughput "$SOCK" 4 >/dev/null || fail "launching 5 tasks"
for _ in $(seq 100); do grep -qi "pinned\|public key" "$T/agent.log" && break; sleep 0.1; done
grep -i "pinned\|public key" "$T/agent.log" | head -1 | grep -q . \
	&& pass "wrong pin: refused ($(grep -i "pinned\|public key" "$T/agent.log" | head -1 | cut -c1-160))" \
	|| fail "wrong pin: no error in the agent log"
n=$(q "SELECT count(*) FROM records WHERE type='task.end'")
[ "$n" = 20 ] && pass "wrong pin: nothing more stored" || fail "wrong pin: $n task ends stored"
stop_agent

# --- 4. SIGHUP reload ----------------------------------------------------------------------------
old=$(served_fp)
[ "$old" = "$(fp_of "$P/server.pem")" ] && pass "served certificate is server.pem" || fail "served $old"
echo garbage >"$T/served.pem"
kill -HUP "$COLL"
for _ in $(seq 100); do grep -q "certificates loaded before stay in use" "$T/collector.log" && break; sleep 0.05; done
grep -q "SIGHUP: \[server\] tls_cert .*stay in use" "$T/collector.log" && [ "$(served_fp)" = "$old" ] \
	&& pass "SIGHUP with a broken tls_cert: logged, the old certificate still served" \
	|| fail "broken reload: $(tail -2 "$T/collector.log")"
cp "$P/server2.pem" "$T/served.pem"
cp "$P/server2.key" "$T/served.key"
kill -HUP "$COLL"
for _ in $(seq 100); do grep -q "TLS files read again" "$T/collector.log" && break; sleep 0.05; done
new=$(served_fp)
[ "$new" = "$(fp_of "$P/server2.pem")" ] && [ "$new" != "$old" ] \
	&& pass "SIGHUP: the new certificate is served ($new)" || fail "after SIGHUP served $new"
# the agent pinning both keys goes on (its spool still holds the 5 tasks of step 3)
start_agent --no-bpf --config "$T/agent.conf" --node n1
"$H" 5 throughput "$SOCK" 4 >/dev/null || fail "launching 5 tasks"
n=$(wait_count "SELECT count(*) FROM records WHERE type='task.end'" 30 60)
d=$(q "SELECT count(DISTINCT task_id) FROM records WHERE type='task.end'")
[ "$n" = 30 ] && [ "$d" = 30 ] && pass "after the certificate change: 30 task ends stored once" \
	|| fail "after reload: $n task ends ($d distinct), want 30"
stop_agent

# --- 5. expired certificates: the node's, then the collector's ----------------------------------
before=$(q "SELECT count(*) FROM records")
sed -e "s|^client_cert = .*|client_cert = $P/n1-expired.pem|" \
	-e "s|^client_key = .*|client_key = $P/n1-expired.key|" "$T/agent.conf" >"$T/agent-expired.conf"
: >"$T/agent.log"
start_agent --no-bpf --config "$T/agent-expired.conf" --node n1
"$H" 2 throughput "$SOCK" 2 >/dev/null || fail "launching 2 tasks"
for _ in $(seq 150); do grep -q "refused a request from .*expired" "$T/collector.log" && break; sleep 0.1; done
line=$(grep "refused a request from .*expired" "$T/collector.log" | head -1)
[ -n "$line" ] && pass "expired node certificate refused; collector: ${line:0:200}" \
	|| fail "expired client certificate: no refusal naming the expiry in the collector log: $(tail -3 "$T/collector.log")"
for _ in $(seq 100); do grep -q "403.*expired" "$T/agent.log" && break; sleep 0.1; done
grep -q "403.*expired" "$T/agent.log" && pass "the agent logs the refusal: $(grep -m1 -o '403.*expired[^"]*' "$T/agent.log" | cut -c1-160)" \
	|| fail "expired client certificate: the agent log does not name it: $(tail -3 "$T/agent.log")"
stop_agent
# the collector serving an expired certificate (of the same CA, unpinned agent)
cp "$P/server-expired.pem" "$T/served.pem"
cp "$P/server-expired.key" "$T/served.key"
kill -HUP "$COLL"
for _ in $(seq 100); do [ "$(served_fp)" = "$(fp_of "$P/server-expired.pem")" ] && break; sleep 0.05; done
grep -v "^pin = " "$T/agent.conf" >"$T/agent-nopin.conf"
: >"$T/agent.log"
start_agent --no-bpf --config "$T/agent-nopin.conf" --node n1
"$H" 2 throughput "$SOCK" 2 >/dev/null || fail "launching 2 tasks"
for _ in $(seq 150); do grep -qi "expired" "$T/agent.log" && break; sleep 0.1; done
line=$(grep -i -m1 "expired" "$T/agent.log")
[ -n "$line" ] && pass "expired collector certificate refused; agent: ${line:0:200}" \
	|| fail "expired server certificate: the agent log does not name it: $(tail -3 "$T/agent.log")"
stop_agent
after=$(q "SELECT count(*) FROM records")
[ "$before" = "$after" ] && pass "nothing stored over expired certificates ($after records)" \
	|| fail "records $before -> $after over expired certificates"
kill "$COLL"; wait "$COLL"; rc=$?; COLL=
[ $rc = 0 ] && pass "collector stopped cleanly" || fail "collector exit $rc"
finish
