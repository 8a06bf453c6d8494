# SPDX-License-Identifier: MIT
#
# A one-node Slurm cluster in a directory of the caller's, for the tests whose client is a real
# Slurm: tests/integration/slurm.sh (on this host, with slurmdbd over MariaDB) and the VM case
# slurm_batch (tests/vm/guest-tests.sh: systemd 252, cgroup v2, no accounting database). Sourced
# by bash; it defines functions and the two empty arrays below. The daemons run in the
# foreground as the caller's background jobs (their pids are appended to the caller's array
# PIDS, to be killed in reverse order) or as transient systemd services (SLURM_SYSTEMD=1), with
# their own ports, munge socket and state directories, proctrack/linuxproc and task/none: the
# Corral task's cgroup is the agent's, whatever Slurm does with its own.
#
# Names: cluster corralit, node corralit1 (NodeHostname = this host's short name, address
# 127.0.0.1, 1 CPU), partition itpart (the default; up to 4 jobs on the CPU at once).

PIDS=() SLURM_UNITS=()

# slurm_free_port: a free TCP port on 127.0.0.1 (never a fixed one: other checkouts run too).
slurm_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# slurm_munge_start DIR: munged with a fresh key, its socket DIR/munge/sock; false (with the
# log's tail on stderr) when the socket does not appear within 10 s.
slurm_munge_start() {
	local m=$1/munge
	mkdir -p "$m"
	chmod 700 "$m"
	dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
	chmod 400 "$m/munge.key"
	munged -F --force --key-file="$m/munge.key" --socket="$m/sock" --pid-file="$m/pid" \
		--log-file="$m/log" --seed-file="$m/seed" >/dev/null 2>&1 &
	PIDS+=($!)
	for _ in $(seq 200); do [ -S "$m/sock" ] && return 0; sleep 0.05; done
	tail -n 3 "$m/log" >&2
	return 1
}

# slurm_conf_write DIR CTLD_PORT SLURMD_PORT [DBD_PORT]: DIR/slurm.conf for the one-node
# cluster, state and logs under DIR (ctld/, d/, ctld.log, d.log). With DBD_PORT, accounting goes
# to the slurmdbd on that port (associations enforced: the caller adds the cluster, accounts and
# users with sacctmgr); without, there is no accounting database and every ended job is written
# as a line of DIR/jobcomp.log (jobcomp/filetxt: JobId=, UserId=, JobState=, Account=,
# ExitCode=, ...), a record of Slurm's own outside its controller's memory.
slurm_conf_write() {
	local s=$1 cp=$2 dp=$3 bp=${4:-} h
	h=$(hostname -s)
	mkdir -p "$s/ctld" "$s/d"
	{
		cat <<EOF
ClusterName=corralit
SlurmctldHost=$h(127.0.0.1)
SlurmctldPort=$cp
SlurmdPort=$dp
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$s/munge/sock
CredType=cred/munge
StateSaveLocation=$s/ctld
SlurmdSpoolDir=$s/d
SlurmctldPidFile=$s/ctld.pid
SlurmdPidFile=$s/d.pid
SlurmctldLogFile=$s/ctld.log
SlurmdLogFile=$s/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
		if [ -n "$bp" ]; then
			# AccountingStoragePass: the munge socket of the connections to slurmdbd
			# (default /run/munge)
			cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$bp
AccountingStoragePass=$s/munge/sock
AccountingStorageEnforce=associations
EOF
		else
			cat <<EOF
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$s/jobcomp.log
EOF
		fi
		cat <<EOF
NodeName=corralit1 NodeHostname=$h NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=itpart Nodes=corralit1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
	} >"$s/slurm.conf"
}

# slurm_daemons_start DIR: slurmctld and slurmd of DIR/slurm.conf ($SLURM_CONF is set to it),
# then waits up to 60 s for the node to be IDLE; false (with the logs' tails on stderr) if not.
# With SLURM_SYSTEMD=1 each daemon runs as a transient service of PID 1 the way Debian's units
# run them (slurmd.service: Delegate=yes, KillMode=process; on cgroup v2 slurmd makes its own
# cgroups below its unit and starts slurmstepd.scope over D-Bus), stdout and stderr appended to
# DIR/ctld.out and DIR/d.out; their unit names go to SLURM_UNITS. Else they are children of
# the caller (PIDS).
slurm_daemons_start() {
	local s=$1 st= end
	export SLURM_CONF=$s/slurm.conf
	if [ "${SLURM_SYSTEMD:-0}" = 1 ]; then
		systemd-run --quiet --collect --unit=corralit-slurmctld -p KillMode=process \
			-p StandardOutput="append:$s/ctld.out" -p StandardError="append:$s/ctld.out" \
			slurmctld -D -i -f "$SLURM_CONF" || return 1
		SLURM_UNITS+=(corralit-slurmctld)
		systemd-run --quiet --collect --unit=corralit-slurmd -p Delegate=yes -p KillMode=process \
			-p StandardOutput="append:$s/d.out" -p StandardError="append:$s/d.out" \
			slurmd -D -N corralit1 -f "$SLURM_CONF" || return 1
		SLURM_UNITS+=(corralit-slurmd)
	else
		slurmctld -D -i -f "$SLURM_CONF" >"$s/ctld.out" 2>&1 &
		PIDS+=($!)
		slurmd -D -N corralit1 -f "$SLURM_CONF" >"$s/d.out" 2>&1 &
		PIDS+=($!)
	fi
	end=$((SECONDS + 60))
	while [ $SECONDS -lt $end ]; do
		st=$(timeout 10 scontrol show node corralit1 2>/dev/null | sed -n 's/.*State=\([A-Z+_]*\).*/\1/p' | head -n1)
		case $st in IDLE*) return 0 ;; esac
		sleep 0.1
	done
	echo "the Slurm node did not come up in 60 s (state '$st')" >&2
	slurm_logs "$s" >&2
	return 1
}

# slurm_logs DIR: the last lines of each daemon's log and output.
slurm_logs() {
	local f
	for f in "$1"/ctld.log "$1"/ctld.out "$1"/d.log "$1"/d.out "$1"/munge/log; do
		[ -s "$f" ] || continue
		echo "== $f"
		tail -n 8 "$f"
	done
}

# slurm_stop: the daemons of PIDS, last started first, and waits for them; the units of
# SLURM_UNITS, every process in them (slurmstepd too), and the scope slurmd made on cgroup v2.
slurm_stop() {
	local i
	for ((i = ${#SLURM_UNITS[@]} - 1; i >= 0; i--)); do
		systemctl kill --kill-who=all -s KILL "${SLURM_UNITS[i]}" 2>/dev/null
		systemctl stop "${SLURM_UNITS[i]}" 2>/dev/null
	done
	[ ${#SLURM_UNITS[@]} = 0 ] || systemctl stop slurmstepd.scope 2>/dev/null
	SLURM_UNITS=()
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
	for i in "${PIDS[@]}"; do wait "$i" 2>/dev/null; done
	PIDS=()
}

# slurm_submit ARGS...: sbatch --parsable ARGS; the job id.
slurm_submit() { sbatch --parsable "$@" | cut -d';' -f1; }

# slurm_job_field J FIELD: FIELD (JobState, ExitCode, Account, Partition, ...) of job J as
# slurmctld has it.
slurm_job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

# slurm_job_done J [TENTHS]: waits until job J left the running states (at most TENTHS tenths
# of a second, default 300); false if it did not.
slurm_job_done() {
	local s
	for _ in $(seq "${2:-300}"); do
		s=$(slurm_job_field "$1" JobState)
		case $s in PENDING | RUNNING | CONFIGURING | COMPLETING | "") sleep 0.1 ;; *) return 0 ;; esac
	done
	return 1
}

# slurm_jobcomp DIR J FIELD: FIELD of job J's line in DIR/jobcomp.log, once written (waited
# for, at most 10 s); empty if there is none.
slurm_jobcomp() {
	local l=
	for _ in $(seq 100); do
		l=$(grep -s "^JobId=$2 " "$1/jobcomp.log" | tail -n1)
		[ -n "$l" ] && break
		sleep 0.1
	done
	tr ' ' '\n' <<<"$l" | sed -n "s/^$3=//p" | head -n1
}
