#!/bin/bash
# A real Slurm as the client of corralctl run --wait: a one-node cluster on this host (munged,
# slurmctld, slurmd and slurmdbd from Debian's slurm-wlm, slurmdbd over a private MariaDB
# server, configs written here with their own ports and state directories,
# proctrack/linuxproc so that it does not touch cgroups) runs batch scripts whose steps are
# `corralctl run --wait`. Checked from outside: Slurm's output file, the task's cgroup as the
# host reads it after scancel, and Slurm's accounting (sacct, read from slurmdbd's database)
# against the Corral record as spooled. The cluster's config and daemons: slurm_lib.sh (shared
# with the VM case slurm_batch).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
need_root
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null ||
	! command -v sbatch >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null ||
	! command -v mariadb-install-db >/dev/null; then
	echo "installing slurmctld, slurmd, slurmdbd, munge, slurm-client, mariadb-server (apt-get)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd \
		slurmdbd munge slurm-client mariadb-server >"$T/apt.log" 2>&1 ||
		skip "Slurm or its accounting database cannot be installed here (apt-get install slurmctld slurmd slurmdbd munge slurm-client mariadb-server failed: $(tail -n1 "$T/apt.log"))"
fi
S=$T/slurm
mkdir -p "$S/out"
# the database on tmpfs where there is one (its bootstrap is fsync-bound: 0.8 s there, 6 s on
# this host's disk)
DB=$(mktemp -d -p /dev/shm corral-it-db.XXXXXX 2>/dev/null) || { DB=$S/db && mkdir -p "$DB"; }
PIDS=()
slurm_cleanup() {
	slurm_stop
	rm -rf "$DB"
	cleanup
}
trap slurm_cleanup EXIT
# MariaDB's system tables while the agent and munge start; small InnoDB files, no durability:
# the database lives as long as the test
DBOPTS=(--no-defaults --datadir="$DB/data" --user=root --innodb-buffer-pool-size=16M
	--innodb-log-file-size=4M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --skip-name-resolve)
mariadb-install-db "${DBOPTS[@]}" --auth-root-authentication-method=normal --skip-test-db \
	>"$DB/install.log" 2>&1 &
DBINST=$!
start_agent --no-bpf

# munge: its own key, socket and files
slurm_munge_start "$S" 2>"$S/munge.err" || { fail "munged did not start: $(cat "$S/munge.err")"; finish; }

# the accounting database: mariadbd on its own port and socket, a user for slurmdbd
MP=$(slurm_free_port)
wait "$DBINST" || { fail "mariadb-install-db failed: $(tail -n5 "$DB/install.log")"; finish; }
mariadbd "${DBOPTS[@]}" --port="$MP" --bind-address=127.0.0.1 --socket="$DB/sock" \
	--pid-file="$DB/pid" --log-error="$DB/err.log" --skip-log-bin >/dev/null 2>&1 &
PIDS+=($!)
sql() { mariadb --no-defaults -S "$DB/sock" -u root -N -B -e "$1"; }
for _ in $(seq 300); do sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.05; done
sql "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'corralit'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'" ||
	{ fail "MariaDB did not start: $(tail -n5 "$DB/err.log")"; finish; }

CP=$(slurm_free_port) DP=$(slurm_free_port) BP=$(slurm_free_port)
slurm_conf_write "$S" "$CP" "$DP" "$BP"
export SLURM_CONF=$S/slurm.conf
# slurmdbd reads slurmdbd.conf next to slurm.conf ($SLURM_CONF); it must be its user's, 0600
cat >"$S/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$S/munge/sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$BP
SlurmUser=root
PidFile=$S/dbd.pid
LogFile=$S/dbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MP
StorageUser=slurm
StoragePass=corralit
StorageLoc=slurm_acct_db
EOF
chmod 600 "$S/slurmdbd.conf"
slurmdbd -D >"$S/dbd.out" 2>&1 &
PIDS+=($!)
# (AccountingStoragePass: the munge socket of the connections to slurmdbd, default /run/munge)
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ] && ! sacctmgr -n -P show cluster >/dev/null 2>&1; do sleep 0.1; done
# the cluster, two accounts and root's associations (default account chem): with
# AccountingStorageEnforce=associations slurmctld takes only jobs of these
sacctmgr -i add cluster corralit >"$S/sacctmgr.log" 2>&1 &&
	sacctmgr -i add account physics,chem cluster=corralit >>"$S/sacctmgr.log" 2>&1 &&
	sacctmgr -i add user root account=chem,physics defaultaccount=chem cluster=corralit >>"$S/sacctmgr.log" 2>&1 ||
	{ fail "slurmdbd/sacctmgr: $(tail -n3 "$S/sacctmgr.log" "$S/dbd.log" 2>&1)"; finish; }
slurm_daemons_start "$S" 2>"$S/daemons.err" || { fail "$(cat "$S/daemons.err")"; finish; }
pass "one-node Slurm up after ${SECONDS} s (slurmctld port $CP, slurmd port $DP, slurmdbd port $BP over MariaDB port $MP, munge, proctrack/linuxproc)"

# the end record of a task as spooled: FIELD (see run_wait.sh)
spooled() {
	python3 - "$(dirname "$0")" "$1" "$2" "$STATE"/spool/seg-*.log <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from spool_frames import frames, record
tid, field = sys.argv[2], sys.argv[3]
for path in sys.argv[4:]:
    for pos, seq, enc, n in frames(path):
        try:
            r = json.loads(record(path, pos))
        except ValueError:
            continue
        if r.get("type") == "task.end" and r.get("task", {}).get("id") == tid:
            d = r
            for k in field.split("."):
                d = d.get(k) if isinstance(d, dict) else None
            print("" if d is None else d)
            sys.exit(0)
print("(no task.end spooled)")
PY
}
ended() { for _ in $(seq 200); do [ "$(spooled "$1" exit.status)" != "(no task.end spooled)" ] && return 0; sleep 0.05; done; return 1; }
# FIELD of job J as Slurm's accounting has it (sacct -X: the allocation's line), once slurmdbd
# has the job's end and every field (slurmctld sends the job's start and end as it goes: a
# line may show the end before the partition; waited for, at most 10 s); one complete sacct
# line per job, kept in $S/acct-J
ACCT_FIELDS=JobID,Account,User,Partition,State,ExitCode
acct() {
	local l
	for _ in $(seq 100); do
		[ -s "$S/acct-$1" ] && break
		l=$(sacct -n -X -P -j "$1" -o "$ACCT_FIELDS" 2>/dev/null | head -n1)
		case $(echo "$l" | cut -d'|' -f5) in "" | PENDING | RUNNING | REQUEUED | RESIZING | SUSPENDED) ;; *)
			case "|$l|" in *"||"*) ;; *) echo "$l" >"$S/acct-$1" && break ;; esac
			;;
		esac
		sleep 0.1
	done
	[ -s "$S/acct-$1" ] || { echo "(sacct has no complete line for job $1: '$l')"; return; }
	cut -d'|' -f"$(echo "$ACCT_FIELDS" | tr ',' '\n' | grep -nx "$2" | cut -d: -f1)" "$S/acct-$1"
}
# the job's row in slurmdbd's own table, by plain SQL: COLUMN
dbjob() { sql "SELECT $2 FROM slurm_acct_db.corralit_job_table WHERE id_job = $1"; }
CTL="$CORRALCTL --socket $SOCK"

# a Slurm time limit: submitted first (Slurm limits are whole minutes, checked every 30 s), it is
# looked at last
printf '#!/bin/sh\necho $$ >%s/tl.pid\nexec %s run --wait -q --workdir / -- sh -c %s\n' "$S" "$CTL" \
	"'echo \$CORRAL_TASK_ID >$S/tl.id; while read -r l; do case \$l in *:memory:*) echo \${l##*:} >$S/tl.cg;; esac; done </proc/self/cgroup; exec sleep 600'" >"$S/tl.sh"
TLJ=$(slurm_submit --time=1 -o "$S/out/tl.out" "$S/tl.sh")

# --- output in Slurm's output file; job and account as Slurm has them --------------------------
printf '#!/bin/sh\nexec %s run --wait -q --workdir / -- sh -c %s\n' "$CTL" \
	"'echo hello from corral; echo \$CORRAL_TASK_ID; echo to-stderr >&2; exit 3'" >"$S/out.sh"
J=$(slurm_submit -A physics -J corral-it -o "$S/out/out-%j.txt" "$S/out.sh")
slurm_job_done "$J" || fail "job $J did not end: $(slurm_job_field "$J" JobState)"
O=$S/out/out-$J.txt
tid=$(sed -n 2p "$O" 2>/dev/null)
grep -qx 'hello from corral' "$O" 2>/dev/null && grep -qx to-stderr "$O" && ended "$tid" &&
	pass "the step's output is in Slurm's output file ($(wc -l <"$O") lines, stdout and stderr)" ||
	fail "output file: $(cat "$O" 2>&1)"
[ "$(acct "$J" ExitCode)" = 3:0 ] && [ "$(acct "$J" State)" = FAILED ] &&
	pass "Slurm's accounting has the task's exit code (sacct: ExitCode 3:0, FAILED)" ||
	fail "exit code: sacct $(acct "$J" ExitCode) $(acct "$J" State), scontrol $(slurm_job_field "$J" ExitCode) $(slurm_job_field "$J" JobState)"
sj=$(acct "$J" JobID) sa=$(acct "$J" Account) su=$(acct "$J" User) sp=$(acct "$J" Partition)
[ "$(spooled "$tid" task.job)" = "$sj" ] && [ "$(spooled "$tid" task.account)" = "$sa" ] && [ "$sa" = physics ] &&
	[ "$(spooled "$tid" task.labels.slurm_partition)" = "$sp" ] && [ "$(spooled "$tid" task.labels.slurm_user)" = "$su" ] &&
	pass "the Corral record's job/account equal sacct's for the job (job $sj, account $sa; labels slurm_user $su, slurm_partition $sp)" ||
	fail "job/account: record $(spooled "$tid" task.job)/$(spooled "$tid" task.account)/$(spooled "$tid" task.labels.slurm_user)/$(spooled "$tid" task.labels.slurm_partition) vs sacct $sj/$sa/$su/$sp"

# --no-slurm, and an explicit --job, win over the Slurm job
printf '#!/bin/sh\n%s run --wait -q --no-slurm --workdir / -- sh -c "echo \\$CORRAL_TASK_ID"\n%s run --wait -q --job mine --workdir / -- sh -c "echo \\$CORRAL_TASK_ID"\n' "$CTL" "$CTL" >"$S/no.sh"
J2=$(slurm_submit -A physics -o "$S/out/no-%j.txt" "$S/no.sh")
slurm_job_done "$J2"
t1=$(sed -n 1p "$S/out/no-$J2.txt") t2=$(sed -n 2p "$S/out/no-$J2.txt")
ended "$t1" && ended "$t2" && [ -z "$(spooled "$t1" task.job)" ] && [ -z "$(spooled "$t1" task.account)" ] &&
	[ "$(spooled "$t2" task.job)" = mine ] && [ "$(spooled "$t2" task.account)" = physics ] &&
	pass "--no-slurm: no job/account from Slurm; --job mine wins, account still Slurm's" ||
	fail "no-slurm: '$(spooled "$t1" task.job)' '$(spooled "$t1" task.account)'; '$(spooled "$t2" task.job)' '$(spooled "$t2" task.account)'"

# --- scancel ends the Corral task (no orphan: its cgroup empty, from outside) -----------------
printf '#!/bin/sh\nexec %s run --wait -q --workdir / -- sh -c %s\n' "$CTL" \
	"'echo \$CORRAL_TASK_ID >$S/sc.id; while read -r l; do case \$l in *:memory:*) echo \${l##*:} >$S/sc.cg;; esac; done </proc/self/cgroup; exec sleep 600'" >"$S/sc.sh"
J3=$(slurm_submit -o "$S/out/sc.out" "$S/sc.sh")
for _ in $(seq 300); do [ -s "$S/sc.cg" ] && [ -s "$S/sc.id" ] && break; sleep 0.1; done
cg=/sys/fs/cgroup/memory$(cat "$S/sc.cg" 2>/dev/null) tid=$(cat "$S/sc.id" 2>/dev/null)
[ -n "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] && pass "scancel case: the task runs in $cg" || fail "scancel case did not start ($cg)"
t0=$(date +%s%N)
scancel "$J3"
gone=
for _ in $(seq 100); do # kill_grace is 2 s here
	{ [ ! -d "$cg" ] || [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ]; } && { gone=1; break; }
	sleep 0.05
done
t1=$(date +%s%N)
[ -n "$gone" ] && ended "$tid" && [ "$(spooled "$tid" exit.by)" = client ] && [ "$(acct "$J3" State)" = "CANCELLED by 0" ] &&
	pass "scancel: the Corral task's cgroup empty $(((t1 - t0) / 1000000)) ms later (kill_grace 2 s), exit.by client, signal $(spooled "$tid" exit.signal); sacct CANCELLED by 0" ||
	fail "scancel: cgroup '$cg' procs '$(cat "$cg/cgroup.procs" 2>/dev/null)' by $(spooled "$tid" exit.by), sacct $(acct "$J3" State)"

# --- a Corral --time inside a Slurm job --------------------------------------------------------
printf '#!/bin/sh\nexec %s run --wait -q --time 1 --workdir / -- sh -c %s\n' "$CTL" \
	"'echo \$CORRAL_TASK_ID; exec sleep 600'" >"$S/ct.sh"
J4=$(slurm_submit -o "$S/out/ct-%j.txt" "$S/ct.sh")
slurm_job_done "$J4" 200
tid=$(sed -n 1p "$S/out/ct-$J4.txt")
# sacct prints an exit status above 128 less 128 (143 as 15:0); slurmdbd's row has it whole
# (acct first: it waits until slurmdbd has the job's final row, which dbjob reads as it is)
ended "$tid" && [ "$(spooled "$tid" exit.status)" = time_limit ] && [ "$(spooled "$tid" exit.by)" = limit ] &&
	[ "$(acct "$J4" Account)" = chem ] && [ "$(spooled "$tid" task.account)" = chem ] &&
	[ "$(dbjob "$J4" exit_code)" = $((143 << 8)) ] && [ "$(slurm_job_field "$J4" ExitCode)" = 143:0 ] &&
	[ "$(spooled "$tid" task.job)" = "$(acct "$J4" JobID)" ] &&
	pass "corralctl --time 1 in a Slurm job: time_limit, exit.by limit, Slurm's exit status 143 (slurmdbd's row $(dbjob "$J4" exit_code) = 143 << 8, sacct $(acct "$J4" ExitCode)); no -A: record and sacct both have root's default account chem" ||
	fail "corral --time: $(spooled "$tid" exit.status) by $(spooled "$tid" exit.by), slurmdbd exit_code $(dbjob "$J4" exit_code), scontrol $(slurm_job_field "$J4" ExitCode), sacct account $(acct "$J4" Account), record $(spooled "$tid" task.account)"

# --- the Slurm time limit (1 min): Slurm's SIGTERM ends the Corral task ----------------------
for _ in $(seq 300); do [ -s "$S/tl.cg" ] && break; sleep 0.1; done
cg=/sys/fs/cgroup/memory$(cat "$S/tl.cg" 2>/dev/null) tid=$(cat "$S/tl.id" 2>/dev/null)
slurm_job_done "$TLJ" 1200
gone=
for _ in $(seq 100); do
	{ [ ! -d "$cg" ] || [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ]; } && { gone=1; break; }
	sleep 0.05
done
[ "$(acct "$TLJ" State)" = TIMEOUT ] && [ -n "$gone" ] && ended "$tid" && [ "$(spooled "$tid" exit.by)" = client ] &&
	pass "Slurm --time=1: sacct TIMEOUT, the Corral task ended with it (cgroup empty, exit.by client, signal $(spooled "$tid" exit.signal))" ||
	fail "slurm time limit: sacct $(acct "$TLJ" State), cgroup '$cg' gone '$gone', by $(spooled "$tid" exit.by)"
finish
