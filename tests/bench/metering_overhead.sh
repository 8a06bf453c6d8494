#!/bin/bash
# Overhead of the metering BPF programs on a context-switch-heavy workload (pipe ping-pong
# between two processes) and a syscall-heavy one (1-byte writes to /dev/null): without any
# program, with an empty sched_switch program (the floor of any program there) and with the
# metering programs loaded+attached (workload tracked) as corrald loads them (CPU and IO at
# exit) and with CPU and IO accounted at every sched_switch, interleaved rounds in one run; the
# per-switch run time of the metering vs the empty program (BPF statistics); then the
# loader's own cost with 500 idle tracked tasks. Targets: <= 3% sched, <= 5% syscall
# (reported, not enforced: the host is shared and noisy).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
B=$O/tests/bench/helper_meter_bench
[ -x "$B" ] || { echo "missing $B"; exit 1; }
ROUNDS=${METER_BENCH_ROUNDS:-7}
exec "$B" "$ROUNDS" "${METER_BENCH_PINGPONG:-200000}" "${METER_BENCH_WRITES:-2000000}" 500
