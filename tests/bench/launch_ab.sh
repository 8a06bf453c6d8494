#!/bin/bash
# Launch figures of two builds side by side: tests/bench/launch.sh in its A/B mode (see there),
# under the names this script had. LAUNCH_AB_BASE=DIR: the other build's output directory;
# LAUNCH_AB_N (default 300) launches a round, LAUNCH_AB_ROUNDS (default 3) alternating rounds;
# LAUNCH_AB_GPU=1: both agents as on a node with 2 GPUs. Without LAUNCH_AB_BASE it skips (make
# bench runs it that way).
set -u
cd "$(dirname "$0")/../.."
[ -n "${LAUNCH_AB_BASE:-}" ] || { echo "SKIP: set LAUNCH_AB_BASE to another build's output directory"; exit 77; }
LAUNCH_BASE=$LAUNCH_AB_BASE LAUNCH_N=${LAUNCH_AB_N:-300} LAUNCH_ROUNDS=${LAUNCH_AB_ROUNDS:-3} \
	LAUNCH_GPU=${LAUNCH_AB_GPU:-0} exec tests/bench/launch.sh
