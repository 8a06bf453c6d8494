#!/bin/bash
# live_walk_skip.sh with the agent in cgroup v2 mode (see there): the skip's v2 counter, the
# subtree's cpu.stat usage_usec, on this host's kernel (the VM's has no accounting at exit).
LIVE_WALK_V2=1 exec "$(dirname "$0")/live_walk_skip.sh"
