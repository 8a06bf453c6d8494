# The stand-in RAPL powercap tree of the energy tests and benchmarks: zones laid out as the
# kernel's powercap class lays out intel-rapl, their counters set by the test or stepped at a
# constant power by a writer in the background. Sourced by lib.sh (every integration test) and
# by tests/bench/energy_scale.sh.
# shellcheck shell=bash

RAPL_WRITER=

# rapl_zone DIR ZONE NAME [MAX_UJ [UJ]]: the zone DIR/ZONE named NAME, its counter at UJ (0),
# wrapping at MAX_UJ (10^15: never within a test)
rapl_zone() {
	mkdir -p "$1/$2" && echo "$3" >"$1/$2/name" &&
		echo "${4:-1000000000000000}" >"$1/$2/max_energy_range_uj" &&
		echo "${5:-0}" >"$1/$2/energy_uj"
}

# rapl_set DIR ZONE UJ: the zone's counter to UJ, replaced whole (a reader never sees it
# half-written)
rapl_set() { echo "$3" >"$1/$2/energy_uj.new" && mv "$1/$2/energy_uj.new" "$1/$2/energy_uj"; }

# rapl_tree DIR: a package zone (intel-rapl:0, package-0) and its DRAM zone (intel-rapl:0:1),
# both counters at 0
rapl_tree() { rapl_zone "$1" intel-rapl:0 package-0 && rapl_zone "$1" intel-rapl:0:1 dram; }

# rapl_writer DIR PKG_W DRAM_W [PERIOD_S]: steps the counters of rapl_tree DIR in the
# background: energy_uj = power x time since the start, rewritten every PERIOD_S (0.01), at a
# real-time priority so that, like the hardware's, the updates do not wait for a busy task
# (where this cgroup has no real-time budget chrt is refused: then at the normal priority).
# RAPL_WRITER is its pid (rapl_stop ends it). Returns 1 when the package counter has not
# stepped within 5 s.
rapl_writer() {
	local rt="chrt -f 10"

	$rt true 2>/dev/null || rt=
	$rt python3 - "$1" "$2" "$3" "${4:-0.01}" <<'PY' &
import os, sys, time
pc, pw, dw, period = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
t0 = time.monotonic()
def put(zone, uj):
    p = os.path.join(pc, zone, 'energy_uj')
    with open(p + '.new', 'w') as f: f.write('%d\n' % uj)
    os.rename(p + '.new', p)
while True:
    t = time.monotonic() - t0
    put('intel-rapl:0', int(t * pw * 1e6)); put('intel-rapl:0:1', int(t * dw * 1e6))
    time.sleep(period)
PY
	RAPL_WRITER=$!
	for _ in $(seq 50); do
		[ "$(cat "$1/intel-rapl:0/energy_uj")" != 0 ] && return 0
		sleep 0.1
	done
	return 1
}

# rapl_stop: ends the writer of rapl_writer, if any
rapl_stop() {
	[ -n "$RAPL_WRITER" ] || return 0
	kill "$RAPL_WRITER" 2>/dev/null
	wait "$RAPL_WRITER" 2>/dev/null
	RAPL_WRITER=
}
