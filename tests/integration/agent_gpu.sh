#!/bin/bash
# GPUs through corrald, against the stand-in NVML and libcuda built in the test tree:
# inventory, allocation and refusal, CUDA_VISIBLE_DEVICES, device isolation on mknod nodes,
# the --gpu-memory limit enforced by the libcuda uprobe (exit status gpu_memory_limit),
# GPU-seconds and API telemetry in the record.
. "$(dirname "$0")/lib.sh"
need_root
GPU=$O/tests/gpu
APP=$O/tests/integration/helper_cudaapp
H=$O/tests/integration/helper_gpucheck
for f in "$GPU/libnvidia-ml.so.1" "$GPU/libcuda.so.1" "$APP" "$H"; do
	[ -e "$f" ] || { echo "FAIL: $f not built"; exit 1; }
done
export CORRAL_NVML_LIBRARY=$GPU/libnvidia-ml.so.1
export CORRAL_FAKE_NVML=$PWD/tests/integration/fixtures/nvml-2gpu.txt
export CORRAL_CUDA_LIBRARY=$GPU/libcuda.so.1
MPORT=$(free_port)
metric() { curl -fs "http://127.0.0.1:$MPORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
start_agent --no-bpf --metrics-listen 127.0.0.1:$MPORT
grep -q 'GPUs: 2 found' "$T/agent.log" && pass "inventory: 2 GPUs from NVML" || fail "inventory: $(grep -i gpu "$T/agent.log")"
UUID0=GPU-11111111-2222-3333-4444-555555555555
UUID1=GPU-66666666-7777-8888-9999-aaaaaaaaaaaa

run_wait --gpus 1 --stdout "$T/env.out" -- sh -c 'echo "$CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES"'
[ "$RC" = 0 ] && grep -qx "$UUID0 $UUID0" "$T/env.out" && pass "--gpus 1: CUDA_VISIBLE_DEVICES=$UUID0" \
	|| fail "env: rc $RC $(cat "$T/env.out") $REASON"
gs=$(ctl show "$ID" --json | jget usage.gpu_seconds)
src=$(ctl show "$ID" --json | jget sources.gpu_seconds)
[ "$src" = nvml ] && pass "record: gpu_seconds $gs (source $src)" || fail "gpu_seconds source: $src"

run_wait --gpus 0,1 --stdout "$T/env2.out" -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
grep -qx "$UUID0,$UUID1" "$T/env2.out" && pass "--gpus 0,1: both UUIDs" || fail "list: $(cat "$T/env2.out")"
run_wait --gpus 3 -- true
[ "$RC" != 0 ] && echo "$REASON" | grep -q 'GPU(s) requested' && pass "over-allocation refused: $(echo "$REASON" | tail -n1)" \
	|| fail "over-allocation: rc $RC $REASON"
id=$(ctl run --gpus 1,0 -- sleep 30 2>/dev/null | head -n1)
[ -z "$id" ] && id=$(ctl run --gpus 0 -- sleep 30 | head -n1)
run_wait --gpus 2 -- true
[ "$RC" != 0 ] && pass "GPUs held by a running task are not handed out twice" || fail "double allocation"
ctl kill "$id" --signal KILL; ctl wait "$id" >/dev/null 2>&1
run_wait --gpus 2 -- true
[ "$RC" = 0 ] && pass "GPUs are released when the task ends" || fail "release: $REASON"

# one device-policy program per distinct policy, loaded once and attached to each task's
# unified cgroup (loading costs milliseconds per task, attaching microseconds)
devprog() { bpftool cgroup show "/sys/fs/cgroup/unified/$SUBTREE/$1" 2>/dev/null |
	awk '$2 == "cgroup_device" && $NF == "corral_devices" { print $1 }'; }
if command -v bpftool >/dev/null && [ -d "/sys/fs/cgroup/unified/$SUBTREE" ]; then
	ids=()
	for g in "" "" 1 1 0; do
		ids+=("$(ctl run ${g:+--gpus $g} -- sleep 30 2>/dev/null | head -n1)")
	done
	p=()
	for id in "${ids[@]}"; do p+=("$(devprog "$id")"); done
	echo "device programs: ${p[*]} (no GPU, no GPU, GPU 0, GPU 1 given --gpus 1 twice, none)"
	[ -n "${p[0]}" ] && [ "${p[0]}" = "${p[1]}" ] && [ "${p[0]}" = "${p[4]}" ] &&
		[ -n "${p[2]}" ] && [ -n "${p[3]}" ] && [ "${p[2]}" != "${p[0]}" ] && [ "${p[2]}" != "${p[3]}" ] &&
		pass "device policy: one program per distinct policy, shared by the tasks that have it" ||
		fail "device programs per task: ${p[*]}"
	loads=$(metric corral_gpu_device_program_loads_total)
	alloc=$(metric corral_gpus_allocated)
	echo "metrics: corral_gpus $(metric corral_gpus), allocated $alloc, device program loads $loads, cached $(metric corral_gpu_device_programs_cached)"
	# policies used so far: GPU 0, GPUs 0+1 (three tasks), none and GPU 1 (the tasks above):
	# one load each, however many tasks had them
	[ "$alloc" = 2 ] && [ "$loads" = 4 ] &&
		pass "metrics: 2 GPUs allocated; 4 device programs loaded for the 4 distinct policies of 9 tasks" ||
		fail "metrics: allocated '$alloc' (want 2), device program loads '$loads' (want 4)"
	for id in "${ids[@]}"; do ctl kill "$id" --signal KILL >/dev/null 2>&1; done
	for id in "${ids[@]}"; do ctl wait "$id" >/dev/null 2>&1; done
else
	echo "(no bpftool or no unified hierarchy: program sharing not checked)"
fi

# device isolation on mknod-created nodes: GPU 1 allocated -> /dev/nvidia0 denied
mkdir -p "$T/dev"; mknod "$T/dev/nvidia0" c 195 0; mknod "$T/dev/nvidia1" c 195 1; chmod 666 "$T/dev/"*
run_wait --gpus 1 --stdout "$T/dev.out" -- sh -c "cat $T/dev/nvidia0 2>&1; cat $T/dev/nvidia1 2>&1; true"
# the stand-in allocates the lowest free GPU: index 0, minor 0
cat "$T/dev.out"
grep -q 'nvidia0.*No such device or address' "$T/dev.out" && grep -q 'nvidia1.*Operation not permitted' "$T/dev.out" \
	&& pass "device policy: allocated GPU reaches the driver (ENXIO), the other is denied (EPERM)" \
	|| fail "device policy: $(cat "$T/dev.out")"

# --gpu-memory enforced synchronously by the libcuda uprobe
run_wait --gpus 1 --gpu-memory 256M --stdout "$T/cuda.out" -- "$APP" "$GPU/libcuda.so.1" 512 64 3
st=$(status_of "$ID")
[ "$st" = gpu_memory_limit ] && [ "$RC" = 137 ] && pass "--gpu-memory 256M, 512M allocated: gpu_memory_limit (rc $RC)" \
	|| fail "gpu memory limit: rc $RC status $st ($REASON) $(cat "$T/cuda.out")"
run_wait --gpus 1 --gpu-memory 512M -- "$APP" "$GPU/libcuda.so.1" 256 64 7
rec=$(ctl show "$ID" --json)
[ "$RC" = 0 ] && [ "$(echo "$rec" | jget usage_detail.gpu_api.alloc_bytes)" = $((256 << 20)) ] \
	&& [ "$(echo "$rec" | jget usage_detail.gpu_api.launches)" = 7 ] \
	&& pass "under the limit: exit 0, API telemetry exact (256 MiB allocated, 7 launches)" \
	|| fail "telemetry: rc $RC $(echo "$rec" | jget usage_detail.gpu_api)"
stop_agent

# An agent killed while a GPU task runs: the restarted agent goes on with the task's meter from
# its state file, so the record bills the whole task (GPU-seconds from its start, energy from
# the counters at its start, the NVML peak seen before the crash).
cp "$CORRAL_FAKE_NVML" "$T/nvml.txt"
export CORRAL_FAKE_NVML=$T/nvml.txt
start_agent --no-bpf --sample-interval 1s
id=$(ctl run --gpus 1 -- sh -c "echo \$\$ >$T/gpu-task.pid; exec sleep 6" | head -n1)
for _ in $(seq 50); do [ -s "$T/gpu-task.pid" ] && break; sleep 0.1; done
echo "proc gpu=0 pid=$(cat "$T/gpu-task.pid") mem=1073741824 sm=50" >>"$T/nvml.txt"
sleep 2.5 # the agent's 250 ms GPU ticks see the 1 GiB
kill -9 "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null; AGENT_PID=
# while no agent runs: GPU 0 uses 500 J, the process frees its memory
sed -i -e "/^proc gpu=0 pid=$(cat "$T/gpu-task.pid") /d" \
	-e '/^device uuid=GPU-1111/s/energy=1000000/energy=1500000/' "$T/nvml.txt"
start_agent --no-bpf --sample-interval 1s
ctl wait "$id" >/dev/null 2>&1
rec=$(ctl show "$id" --json)
gs=$(jget usage.gpu_seconds <<<"$rec")
peak=$(jget usage.gpu_memory_peak_bytes <<<"$rec")
ej=$(jget usage_detail.gpu_energy_j <<<"$rec")
wall=$(jget usage.wall_ns <<<"$rec")
echo "after a kill -9 of the agent: wall_ns $wall gpu_seconds $gs peak $peak energy_j $ej"
python3 -c 'import sys; g, w = float(sys.argv[1] or 0), float(sys.argv[2] or 0) / 1e9
sys.exit(not (w >= 5.9 and abs(g - w) < 0.05))' "$gs" "$wall" && [ "$peak" = 1073741824 ] &&
	python3 -c 'import sys; sys.exit(abs(float(sys.argv[1] or -1) - 500) > 1e-6)' "$ej" &&
	pass "agent restarted mid-task: gpu_seconds $gs = wall, NVML peak 1 GiB from before the crash, 500 J" ||
	fail "GPU usage across an agent restart: gpu_seconds '$gs' wall_ns '$wall' peak '$peak' energy_j '$ej'"
# usage.energy_j: the GPU part from NVML (the same 500 J), no RAPL on this node (and the task
# re-adopted): cpu and dram not measured, so no total
python3 -c 'import sys, json; e = json.load(sys.stdin)["usage"]["energy_j"]
sys.exit(not (e["sources"] == {"cpu": "not_measured", "dram": "not_measured", "gpu": "nvml"}
    and abs(e["gpu"] - 500) < 1e-6 and "cpu" not in e and "total" not in e))' <<<"$rec" &&
	pass "usage.energy_j: gpu 500 J from nvml, cpu and dram not_measured (no number, no total)" ||
	fail "usage.energy_j: $(jget usage.energy_j <<<"$rec")"

# --gpu-memory limits resident memory (NVML's figure) both ways: what NVML shows beyond the
# tracked allocations (the CUDA context; 200 MiB in the stand-in here) counts against the
# limit in the synchronous uprobe check once a tick has measured it.
id=$(ctl run --gpus 1 --gpu-memory 384M --stdout "$T/ovh.out" -- sh -c \
	"echo \$\$ >$T/ovh.pid; sleep 3; exec $APP $GPU/libcuda.so.1 256 64 1" | head -n1)
for _ in $(seq 50); do [ -s "$T/ovh.pid" ] && break; sleep 0.1; done
echo "proc gpu=0 pid=$(cat "$T/ovh.pid") mem=209715200 sm=10" >>"$T/nvml.txt"
ctl wait "$id" >/dev/null 2>&1
st=$(status_of "$id")
cat "$T/ovh.out"
[ "$st" = gpu_memory_limit ] && grep -q '^step 2 allocated 128 MiB' "$T/ovh.out" &&
	! grep -q '^step 3' "$T/ovh.out" &&
	pass "--gpu-memory 384M with 200 MiB of context: killed at the allocation that crosses it (step 3: 192 + 200 MiB)" ||
	fail "context overhead in the limit: status $st, $(tail -n 2 "$T/ovh.out" | tr '\n' ' ')"
stop_agent

# GPU features off: no library -> logged once, everything else unaffected
CORRAL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 start_agent --no-bpf
grep -q 'GPU features off' "$T/agent.log" && pass "no NVML: GPU features off, logged" || fail "off log"
run_wait -- true
[ "$RC" = 0 ] && pass "tasks without GPUs still run" || fail "off: $REASON"
run_wait --gpus 1 -- true
[ "$RC" != 0 ] && echo "$REASON" | grep -q 'no usable GPU' && pass "--gpus refused: $(echo "$REASON" | tail -n1)" || fail "off gpus: $REASON"
finish
