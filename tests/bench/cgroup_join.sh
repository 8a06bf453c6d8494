#!/bin/bash
# The task child joining its v1 cgroups through the hierarchies' tasks files (what the
# agent does) vs through cgroup.procs (the baseline), after 50 ms of quiet each round, in one
# run (helper_cgjoin_bench; rounds alternate). v1 only: skipped on a unified-only host.
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/bench/helper_cgjoin_bench
[ -x "$H" ] || { echo "FAIL: $H not built"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (cgroups)"; exit 77; }
exec "$H" join "${BENCH_JOIN_ROUNDS:-20}"
