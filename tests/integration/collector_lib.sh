# Shared preamble of the collector tests and benchmarks (collector_*.sh, report_*.sh,
# tests/bench/ingest.sh and report.sh). Source it from the repository root:
#   cd "$(dirname "$0")/../.." && . tests/integration/collector_lib.sh
#   coll_init NAME [BINARY...]
# then: coll_tokens, coll_prices, start_collector, pg_start / pg_uri, fail / ok ($fails).
# shellcheck shell=bash

O=${CORRAL_O:-.output}
COLL=$O/corral-collector
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PIDS=()
CPID=
PGDATA=
PGPORT=
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { echo "ok: $*"; }

coll_cleanup() {
	local p
	for p in "${PIDS[@]}" $CPID; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ -n "$PGDATA" ] && su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $PGDATA -m immediate stop" >/dev/null 2>&1
	rm -rf "$T"
}

# coll_init NAME [BINARY...]: the collector and the named helpers must be built, curl and
# python3 installed; T is a private directory (readable by the postgres user), removed at exit
# with every collector started here and the PostgreSQL server of pg_start.
coll_init() {
	local name=$1 b t
	shift
	for b in "$COLL" "$@"; do
		[ -x "$b" ] || { echo "FAIL: $b not built (make O=$O all)"; exit 1; }
	done
	for t in curl python3; do
		command -v $t >/dev/null || { echo "FAIL: $t missing"; exit 1; }
	done
	T=$(mktemp -d "/tmp/$name.XXXXXX")
	chmod 755 "$T"
	trap coll_cleanup EXIT
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Tokens: node_token NODE, the reader RD (name ops), the auditor AU (name sec).
node_token() { echo "tok-node-$1-0123456789abcdef"; }
N1=$(node_token n1)
N2=$(node_token n2)
RD=tok-reader-0123456789abcdef
AU=tok-auditor-0123456789abcdef
# coll_tokens [--reader] [--auditor] NODE...: $T/tokens with a node token per NODE.
coll_tokens() {
	local reader= auditor= n
	while [ $# -gt 0 ]; do
		case $1 in
		--reader) reader=1 ;;
		--auditor) auditor=1 ;;
		*) break ;;
		esac
		shift
	done
	{
		for n in "$@"; do echo "node $n $(node_token "$n")"; done
		[ -n "$reader" ] && echo "reader ops $RD"
		[ -n "$auditor" ] && echo "auditor sec $AU"
	} > "$T/tokens"
	chmod 600 "$T/tokens"
}

# coll_prices FILE: a price sheet at a cloud's list prices (EUR).
coll_prices() {
	cat > "$1" <<'INI'
[prices]
currency = EUR
cpu_core_hour = 0.031
memory_gib_hour = 0.0043
gpu_hour = 1.70
io_read_gib = 0.0011
io_write_gib = 0.0023
net_gib = 0.013
INI
}

# start_collector DB PORT [serve args]: in the background (CPID, also in PIDS; its output in
# $T/collector-PORT.log) until /healthz answers; 1 with its log shown when it does not.
start_collector() {
	local db=$1 port=$2
	shift 2
	"$COLL" serve --listen "127.0.0.1:$port" --db "$db" --tokens "$T/tokens" "$@" \
		>>"$T/collector-$port.log" 2>&1 &
	CPID=$!
	PIDS+=("$CPID")
	for _ in $(seq 200); do
		curl -sf "http://127.0.0.1:$port/healthz" >/dev/null &&
			ss -Hltnp "sport = :$port" | grep -q "pid=$CPID," && return 0
		kill -0 "$CPID" 2>/dev/null || break
		sleep 0.05
	done
	echo "collector did not come up:"; cat "$T/collector-$port.log"
	return 1
}

# stop_collector: SIGTERM to CPID and wait (it finishes its in-flight batches and folds).
stop_collector() {
	[ -n "$CPID" ] || return 0
	kill "$CPID" 2>/dev/null
	wait "$CPID" 2>/dev/null
	CPID=
}

# pg_start DB...: a PostgreSQL server of this test's own in $T/pg (unix socket only, a free
# port number), with the databases DB... created. 1 without the server binaries (skip that
# half), 2 when it did not start (with the reason on stdout). PG_SERVER_OPTS: more server
# options ("-c name=value ...").
pg_start() {
	local db
	[ -x "$PGBIN/initdb" ] && id postgres >/dev/null 2>&1 || return 1
	mkdir -p "$T/pg" && chown postgres "$T/pg"
	PGDATA=$T/pg/data
	PGPORT=$(free_port)
	if ! su postgres -s /bin/sh -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres >$T/pg/initdb.log 2>&1 &&
		$PGBIN/pg_ctl -D $PGDATA -o \"-k $T/pg -p $PGPORT -c listen_addresses='' ${PG_SERVER_OPTS:-}\" -l $T/pg/log -w start >/dev/null"; then
		echo "PostgreSQL did not start: $(tail -5 "$T/pg/initdb.log" "$T/pg/log" 2>/dev/null)"
		return 2
	fi
	for db in "$@"; do
		su postgres -s /bin/sh -c "$PGBIN/createdb -h $T/pg -p $PGPORT $db" || return 2
	done
}
# pg_cpu_ticks: the CPU time (user + system, clock ticks) of pg_start's server so far: the
# postmaster's own and its reaped children's (exited backends, auxiliary processes), plus
# every live child's.
pg_cpu_ticks() {
	python3 - "$(head -1 "$PGDATA/postmaster.pid")" <<'PY'
import os, sys
pm = sys.argv[1]
def st(p):
    with open("/proc/%s/stat" % p) as f:
        return f.read().rsplit(")", 1)[1].split()
t = sum(int(x) for x in st(pm)[11:15])  # utime stime cutime cstime
for p in os.listdir("/proc"):
    if p.isdigit() and p != pm:
        try:
            c = st(p)
        except OSError:
            continue
        if c[1] == pm:
            t += int(c[11]) + int(c[12])
print(t)
PY
}
# pg_uri DB: the URI of a database of pg_start's server.
pg_uri() { echo "postgresql://postgres@/$1?host=$T/pg&port=$PGPORT"; }
