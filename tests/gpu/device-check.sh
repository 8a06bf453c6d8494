#!/bin/bash
# tests/gpu/device-check.sh: the GPU checks that need a real NVIDIA GPU and driver (root).
# One run: builds the GPU helpers, then
#   1. NVML inventory (isolation/gpu.c) against `nvidia-smi --query-gpu`,
#   2. a real CUDA context + allocations + PTX kernel (tests/integration/helper_cudaapp.c) run
#      as a tracked task under the libcuda uprobes (bpf/cuda.c); while it holds its memory,
#      NVML per-process sampling is compared with `nvidia-smi --query-compute-apps`, and the
#      uprobe counters are compared with what the program did,
#   3. the synchronous GPU memory limit on the real library (SIGKILL at the crossing step),
#   4. the device policy (cgroup_device on v2/unified, devices cgroup on v1) on the real
#      /dev/nvidia* nodes: allowed GPU opens and runs the kernel, the others fail with EPERM,
#   5. the whole agent: corrald + corralctl run --gpus 1 of the CUDA program under the default
#      seccomp profile (exit code, verified output, UUID in CUDA_VISIBLE_DEVICES, the record's
#      GPU usage from NVML and the uprobes), a task without --gpus cannot reach the GPU, and
#      --gpu-memory ends a task with gpu_memory_limit, and a kill -9 of the agent during a CUDA
#      task: the restarted agent bills the whole task.
# Prints the node's facts and a summary; exit 0 when every check passed.
# Usage: tests/gpu/device-check.sh [O=dir] [--prebuilt]
#   --prebuilt  build nothing: O holds a bundle made by tests/gpu/bundle.sh on a build machine
#               (for a GPU node without compiler or -dev packages); O/lib goes on
#               LD_LIBRARY_PATH for the programs of the bundle.
set -u
cd "$(dirname "$0")/../.." || exit 1
O=${CORRAL_O:-.output-devcheck}
prebuilt=0
for a in "$@"; do
	case $a in
	O=*) O=${a#O=} ;;
	--prebuilt) prebuilt=1 ;;
	*) echo "usage: $0 [O=dir] [--prebuilt]" >&2; exit 2 ;;
	esac
done
case $O in /*) ;; *) O=$PWD/$O ;; esac
# Python (record fields) and nvidia-smi run without the bundle's libraries.
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
jget() { # jget FIELD.PATH < json
	py -c 'import sys,json
d=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else d)' "$1"
}
MiB=$((1 << 20))
H=$O/tests/integration/helper_gpucheck
APP=$O/tests/integration/helper_cudaapp
pass=0 fail=0
summary=()
ok() { pass=$((pass + 1)); summary+=("PASS  $*"); echo "ok: $*"; }
bad() { # one line in the summary, whatever the message holds
	fail=$((fail + 1))
	summary+=("FAIL  $(tr '\n' ' ' <<<"$*")")
	echo "FAIL: $*"
}
info() { summary+=("INFO  $*"); echo "info: $*"; }
val() { sed -n "s/^$1=//p" <<<"$2" | head -1; } # val KEY OUTPUT
finish() {
	echo
	echo "==== GPU device check summary ($(date -u +%FT%TZ), $(uname -r)) ===="
	printf '%s\n' "${summary[@]}"
	echo "==== $pass passed, $fail failed ===="
	[ $fail = 0 ]
	exit $?
}

[ "$(id -u)" = 0 ] || { bad "needs root"; finish; }
command -v nvidia-smi >/dev/null || { bad "nvidia-smi not found"; finish; }
nvidia-smi -L || { bad "nvidia-smi -L failed (driver not loaded?)"; finish; }
nvidia-smi() { env -u LD_LIBRARY_PATH nvidia-smi "$@"; }
info "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"

echo "== node"
info "kernel $(uname -r); /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup 2>/dev/null)$(
	[ -r /sys/fs/cgroup/cgroup.controllers ] && echo " (controllers: $(cat /sys/fs/cgroup/cgroup.controllers))")"
info "BTF: $([ -r /sys/kernel/btf/vmlinux ] && echo present || echo absent); tracefs: $(
	grep -q ' tracefs ' /proc/mounts && echo mounted || echo 'not mounted')"
nvidia-smi --query-gpu=name,memory.total,mig.mode.current,persistence_mode --format=csv,noheader
if [ $prebuilt = 1 ]; then
	echo "== prebuilt bundle $O"
	for f in "$H" "$APP" "$O/tests/unit/test_gpu" "$O/corrald" "$O/corralctl"; do
		[ -x "$f" ] || { bad "--prebuilt: $f missing (make the bundle with tests/gpu/bundle.sh)"; finish; }
	done
	[ -d "$O/lib" ] && export LD_LIBRARY_PATH=$O/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	missing=$(ldd "$H" "$O/corrald" "$O/tests/unit/test_gpu" 2>&1 | grep 'not found' | sort -u)
	[ -z "$missing" ] && ok "bundle loads (every library found)" || { bad "bundle: $missing"; finish; }
else
	echo "== build"
	mkdir -p "$O"
	log=$O/device-check-build.log
	if ! make O="$O" -j"$(nproc)" "$H" "$APP" "$O/tests/unit/test_gpu" "$O/corrald" "$O/corralctl" \
		"$O/corral-spawn" >"$log" 2>&1; then
		tail -30 "$log"
		bad "build failed (log: $log; missing -dev packages? see tests/deps.sh, or use --prebuilt)"
		finish
	fi
	ok "built helpers"
fi
"$O/tests/unit/test_gpu" >/dev/null 2>&1 && ok "unit test_gpu (stand-in NVML)" || bad "unit test_gpu"

work=$(mktemp -d /tmp/corral-devcheck.XXXXXX)
cg=""
runner=""
agent=""
cleanup() {
	exec 3>&- 2>/dev/null
	[ -n "$runner" ] && kill "$runner" 2>/dev/null
	[ -n "$agent" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent"
	[ -n "$cg" ] && rmdir "$cg" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# ---- 1. inventory --------------------------------------------------------------------------
echo "== inventory"
inv=$("$H" nvml 2>&1); rc=$?
echo "$inv"
if [ $rc != 0 ]; then bad "NVML inventory: $inv"; finish; fi
smi_uuids=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tr -d ' ' | sort)
our_uuids=$(sed -n 's/^gpu [0-9]* uuid=\([^ ]*\) .*/\1/p' <<<"$inv" | sort)
[ "$smi_uuids" = "$our_uuids" ] && ok "inventory UUIDs match nvidia-smi ($(wc -l <<<"$our_uuids") GPUs)" ||
	bad "inventory UUIDs differ: ours [$our_uuids] nvidia-smi [$smi_uuids]"
uuid0=$(sed -n 's/^gpu 0 uuid=\([^ ]*\) .*/\1/p' <<<"$inv")
minor0=$(sed -n 's/^gpu 0 .* minor=\([0-9]*\) .*/\1/p' <<<"$inv")
smi_minor0=$(nvidia-smi -q -i "$uuid0" | awk -F': *' '/Minor Number/ { print $2; exit }')
[ "$smi_minor0" = "$minor0" ] && ok "GPU 0 minor number $minor0 matches" ||
	bad "GPU 0 minor: ours $minor0, nvidia-smi '$smi_minor0'"
mig0=$(sed -n 's/^gpu 0 .* mig=\([0-9]\) .*/\1/p' <<<"$inv")
[ "$mig0" = 1 ] && info "GPU 0 has MIG enabled: the whole-GPU run below may fail (MIG needs MIG UUIDs)"
smi_mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
our_mem=$(sed -n 's/^gpu 0 .* memory=\([0-9]*\) .*/\1/p' <<<"$inv")
[ "$((our_mem / MiB))" = "$smi_mem" ] && ok "GPU 0 memory.total $smi_mem MiB matches" ||
	bad "GPU 0 memory: ours $((our_mem / MiB)) MiB, nvidia-smi $smi_mem MiB"

LIB=$("$H" find-libcuda 2>&1) || { bad "libcuda.so.1 not resolvable: $LIB"; finish; }
info "libcuda: $LIB ($(readlink -f "$LIB"))"

# ---- 2. metered run, sampled while it holds its memory ------------------------------------
echo "== metered run"
mkfifo "$work/in"
CUDA_VISIBLE_DEVICES=$uuid0 "$H" cuda-run "$LIB" 0 -- "$APP" "$LIB" 256 64 10 --verify --hold \
	<"$work/in" >"$work/out" 2>&1 &
runner=$!
exec 3>"$work/in" # opens once the runner has the read side: the app blocks on it in --hold
held=0
for _ in $(seq 1200); do # wait for the event, at most 120 s
	grep -qx holding "$work/out" && { held=1; break; }
	kill -0 "$runner" 2>/dev/null || break
	sleep 0.1
done
if [ $held = 1 ]; then
	apppid=$(sed -n 's/^pid //p' "$work/out")
	smi_apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits)
	echo "nvidia-smi compute apps:"; echo "$smi_apps"
	smi_used=$(awk -F', *' -v p="$apppid" '$1 == p { print $2 }' <<<"$smi_apps")
	nv=$("$H" nvml "$apppid" 2>&1)
	echo "$nv" | grep -E '^(nvml|samples)'
	nv_bytes=$(val nvml_memory_bytes "$nv")
	if [ -z "$smi_used" ]; then
		bad "nvidia-smi does not list pid $apppid (pid namespace?)"
	elif [ -z "$nv_bytes" ]; then
		bad "NVML sampling failed: $nv"
	else
		d=$((nv_bytes / MiB - smi_used)); d=${d#-}
		[ "$d" -le 1 ] && ok "NVML per-process memory $((nv_bytes / MiB)) MiB = nvidia-smi $smi_used MiB" ||
			bad "NVML $((nv_bytes / MiB)) MiB vs nvidia-smi $smi_used MiB"
		[ "$nv_bytes" -ge $((256 * MiB)) ] && ok "resident >= the 256 MiB allocated (context overhead $((nv_bytes / MiB - 256)) MiB)" ||
			bad "resident $((nv_bytes / MiB)) MiB < 256 MiB allocated"
	fi
	info "NVML utilization sample: $(val nvml_util "$nv")%"
else
	bad "app never reached its hold point: $(tail -5 "$work/out")"
fi
exec 3>&-
wait "$runner"; runner=""
out=$(cat "$work/out")
echo "$out"
[ "$(val exit "$out")" = code:0 ] && ok "CUDA app exited 0 under the uprobes" || bad "CUDA app: $(val exit "$out")"
grep -q '^verified 256 words' <<<"$out" && ok "kernel output verified" || bad "kernel output not verified"
probes=$(val probes "$out")
info "uprobes attached: $probes"
for kv in alloc_bytes=$((256 * MiB)) alloc_calls=4 free_bytes=$((256 * MiB)) free_calls=4 \
	peak_bytes=$((256 * MiB)) launches=10 htod_bytes=4096 dtoh_bytes=4096 current_bytes=0; do
	k=${kv%%=*}
	[ "$(val "$k" "$out")" = "${kv#*=}" ] && ok "uprobe $kv" || bad "uprobe $k=$(val "$k" "$out"), want ${kv#*=}"
done

# ---- 3. synchronous limit on the real library --------------------------------------------
echo "== limit"
out=$(CUDA_VISIBLE_DEVICES=$uuid0 "$H" cuda-run "$LIB" $((128 * MiB)) -- "$APP" "$LIB" 256 64 1 2>&1 </dev/null)
echo "$out"
[ "$(val exit "$out")" = signal:9 ] && ok "128 MiB limit: SIGKILL" || bad "limit: $(val exit "$out")"
[ "$(val limit_fired "$out")" = 1 ] && ok "limit fired in BPF" || bad "limit_fired=$(val limit_fired "$out")"
grep -q '^step 2 allocated 128 MiB' <<<"$out" && ! grep -q '^step 3' <<<"$out" &&
	ok "killed at the crossing step (3)" || bad "wrong kill point"
smi_left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c . || true)
info "compute apps left after the kill: $smi_left"

# ---- 4. device policy on the real nodes ---------------------------------------------------
echo "== device policy"
uvm=$("$H" uvm-major /proc/devices | sed -n 's/^uvm_major=//p')
info "nvidia-uvm major: ${uvm:-none}"
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
	mode=bpf-run cg=/sys/fs/cgroup/corral-devcheck-$$
elif [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
	mode=bpf-run cg=/sys/fs/cgroup/unified/corral-devcheck-$$
else
	mode=v1-run cg=/sys/fs/cgroup/devices/corral-devcheck-$$
fi
info "device policy mode: $mode on $cg"
nodes=(/dev/nvidia"$minor0" /dev/nvidiactl)
[ -e /dev/nvidia-uvm ] && nodes+=(/dev/nvidia-uvm)
other=""
for n in /dev/nvidia[0-9]*; do
	[ -e "$n" ] && [ "$n" != "/dev/nvidia$minor0" ] && { other=$n; break; }
done
[ -n "$other" ] && nodes+=("$other")
if mkdir "$cg"; then
	out=$("$H" "$mode" "$cg" "$minor0" "${uvm:-0}" -- "$H" open "${nodes[@]}" 2>&1)
	echo "$out"
	grep -qx "/dev/nvidia$minor0 OK" <<<"$out" && ok "allowed GPU node opens" || bad "allowed GPU node: $(grep "nvidia$minor0 " <<<"$out")"
	grep -qx "/dev/nvidiactl OK" <<<"$out" && ok "nvidiactl opens" || bad "nvidiactl: $(grep nvidiactl <<<"$out")"
	if [ -n "$other" ]; then
		grep -qx "$other EPERM" <<<"$out" && ok "other GPU node $other denied (EPERM)" || bad "other GPU node: $(grep "$other " <<<"$out")"
	else
		info "single GPU: no unallocated node to deny"
	fi
	rmdir "$cg"
	mkdir "$cg" &&
		out=$(CUDA_VISIBLE_DEVICES=$uuid0 "$H" "$mode" "$cg" "$minor0" "${uvm:-0}" -- "$APP" "$LIB" 64 64 1 --verify 2>&1 </dev/null)
	grep -qx 'exit=code:0' <<<"$out" && grep -q '^verified' <<<"$out" &&
		ok "CUDA kernel runs under the device policy" || bad "CUDA under policy: $out"
	rmdir "$cg"
	mkdir "$cg" &&
		out=$(CUDA_VISIBLE_DEVICES=$uuid0 "$H" "$mode" "$cg" - "${uvm:-0}" -- "$APP" "$LIB" 64 64 1 2>&1 </dev/null)
	grep -qx 'exit=code:0' <<<"$out" && bad "CUDA ran with no GPU allowed" ||
		ok "no GPU allowed: CUDA fails ($(grep -m1 'failed' <<<"$out"))"
	rmdir "$cg"; cg=""
else
	bad "cannot create $cg"
fi

# ---- 5. the whole agent ------------------------------------------------------------------
echo "== agent"
A=$work/agent
sub=corral-devcheck-agent-$$
mkdir -p "$A"
chmod 755 "$work" "$A"
ctl() { "$O/corralctl" --socket "$A/sock" "$@"; }
start_agent() {
	"$O/corrald" --socket "$A/sock" --state-dir "$A/state" --cgroup-subtree "$sub" --node devcheck \
		--kill-grace 2s --sample-interval 1s >>"$A/agent.log" 2>&1 &
	agent=$!
	for _ in $(seq 200); do
		[ -S "$A/sock" ] && ctl status >/dev/null 2>&1 && break
		kill -0 $agent 2>/dev/null || break
		sleep 0.05
	done
	ctl status >/dev/null 2>&1 && return 0
	bad "corrald did not start: $(tail -20 "$A/agent.log")"
	finish
}
start_agent
sed 's/^/  agent: /' "$A/agent.log"
grep -q "GPUs: $(wc -l <<<"$our_uuids") found via NVML" "$A/agent.log" && ok "corrald: GPUs found via NVML" ||
	bad "corrald inventory: $(grep -i gpu "$A/agent.log")"
grep -q 'GPU API uprobes attached' "$A/agent.log" && ok "corrald: libcuda uprobes attached" ||
	bad "corrald uprobes: $(grep -i 'uprobe\|telemetry' "$A/agent.log")"
# run_wait ARGS... -> RC, ID, REASON
run_wait() {
	local out
	out=$(ctl run --wait --stdin /dev/null --stdout /dev/null --stderr /dev/null "$@" 2>"$A/stderr")
	RC=$?
	ID=$(head -n1 <<<"$out")
	REASON=$(cat "$A/stderr")
}

# a CUDA program through the agent, default seccomp profile; it holds its memory until the
# 8 s sleep ends (CUDA's start takes a few of them) so that the NVML samples see it
run_wait --gpus 1 --stdout "$A/t1.out" -- /bin/sh -c \
	'echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 8 | "$0" "$1" 256 64 10 --verify --hold' "$APP" "$LIB"
cat "$A/t1.out"
rec=$(ctl show "$ID" --json)
echo "$rec" | py -m json.tool --indent 1 | grep -E '"(status|code|reason|gpus|gpu_[a-z_]+|alloc_[a-z]+|launches|peak_bytes|memcpy_[a-z]+|untracked|limit_fired|wall_ns|source)"'
[ "$RC" = 0 ] && grep -q '^verified 256 words' "$A/t1.out" &&
	ok "corralctl run --wait --gpus 1: CUDA kernel ran and verified under the default profile (rc 0)" ||
	bad "agent CUDA run: rc $RC $REASON $(tail -3 "$A/t1.out")"
grep -qx "cvd=$uuid0" "$A/t1.out" && ok "task's CUDA_VISIBLE_DEVICES = $uuid0" ||
	bad "task's CUDA_VISIBLE_DEVICES: $(grep cvd= "$A/t1.out")"
src=$(jget sources.gpu_seconds <<<"$rec")
gs=$(jget usage.gpu_seconds <<<"$rec")
py -c 'import sys; sys.exit(not 8.0 <= float(sys.argv[1]) <= 60.0)' "${gs:-0}" &&
	ok "record: gpu_seconds $gs (source $src), at least the 8 s the task ran" || bad "gpu_seconds '$gs' (source $src)"
peak=$(jget usage.gpu_memory_peak_bytes <<<"$rec")
[ "${peak:-0}" -ge $((256 * MiB)) ] && ok "record: gpu_memory_peak_bytes $((peak / MiB)) MiB >= 256 MiB" ||
	bad "gpu_memory_peak_bytes '${peak}'"
for kv in alloc_bytes=$((256 * MiB)) alloc_calls=4 peak_bytes=$((256 * MiB)) launches=10 \
	memcpy_htod_bytes=4096 memcpy_dtoh_bytes=4096 untracked=0; do
	k=${kv%%=*}
	v=$(jget "usage_detail.gpu_api.$k" <<<"$rec")
	[ "$v" = "${kv#*=}" ] && ok "record: gpu_api $kv" || bad "record: gpu_api $k=$v, want ${kv#*=}"
done

# no --gpus: the GPU's nodes are denied and CUDA sees no device even if told the UUID
run_wait --stdout "$A/t2.out" --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" -- /bin/sh -c \
	'"$0" open /dev/nvidia'"$minor0"' /dev/nvidiactl; CUDA_VISIBLE_DEVICES='"$uuid0"' "$1" "$2" 64 64 1' \
	"$H" "$APP" "$LIB"
cat "$A/t2.out"
grep -qx "/dev/nvidia$minor0 EPERM" "$A/t2.out" && ok "task without --gpus: /dev/nvidia$minor0 EPERM" ||
	bad "task without --gpus: $(grep "nvidia$minor0 " "$A/t2.out")"
[ "$RC" != 0 ] && ! grep -q '^step 1' "$A/t2.out" && ok "task without --gpus: CUDA fails (rc $RC)" ||
	bad "task without --gpus ran CUDA: rc $RC"

# --gpu-memory: killed at the crossing allocation, exit status gpu_memory_limit
run_wait --gpus 1 --gpu-memory 128M --stdout "$A/t3.out" -- "$APP" "$LIB" 256 64 1
st=$(ctl show "$ID" --json | jget exit.status)
cat "$A/t3.out"
[ "$st" = gpu_memory_limit ] && [ "$RC" = 137 ] && ok "--gpu-memory 128M: gpu_memory_limit, rc 137" ||
	bad "--gpu-memory: rc $RC status $st $REASON"

# kill -9 of the agent while a CUDA task holds its memory: the restarted agent re-adopts it and
# bills the whole task (GPU-seconds = wall, the NVML peak and energy from before the crash)
id=$(ctl run --gpus 1 --stdout "$A/t4.out" -- /bin/sh -c 'sleep 12 | "$0" "$1" 256 64 10 --hold' \
	"$APP" "$LIB" | head -n1)
for _ in $(seq 600); do grep -qx holding "$A/t4.out" 2>/dev/null && break; sleep 0.1; done
sleep 2.5 # the agent's 250 ms GPU ticks sample the held memory
kill -9 $agent; wait $agent 2>/dev/null
start_agent
ctl wait "$id" >/dev/null 2>&1
rec=$(ctl show "$id" --json)
gs=$(jget usage.gpu_seconds <<<"$rec")
wall=$(jget usage.wall_ns <<<"$rec")
peak=$(jget usage.gpu_memory_peak_bytes <<<"$rec")
ej=$(jget usage_detail.gpu_energy_j <<<"$rec")
info "after kill -9 of corrald: status $(jget exit.status <<<"$rec") code $(jget exit.code <<<"$rec"), wall_ns $wall, gpu_seconds $gs, peak $peak, energy_j $ej"
py -c 'import sys; g, w = float(sys.argv[1] or 0), float(sys.argv[2] or 0) / 1e9
sys.exit(not (w >= 11 and abs(g - w) < 0.05))' "$gs" "$wall" &&
	ok "restarted agent: gpu_seconds $gs = the task's wall time" || bad "gpu_seconds '$gs' vs wall_ns '$wall' after a restart"
[ "${peak:-0}" -ge $((256 * MiB)) ] && ok "restarted agent: NVML peak $((peak / MiB)) MiB from before the crash" ||
	bad "peak '$peak' after a restart"
py -c 'import sys; sys.exit(not float(sys.argv[1] or 0) > 0)' "$ej" &&
	ok "restarted agent: energy $ej J over the whole task" || bad "energy '$ej' after a restart"
kill -TERM $agent; wait $agent; agent=""
info "agent log tail: $(tail -3 "$A/agent.log" | tr '\n' ' ')"
for h in /sys/fs/cgroup/"$sub" /sys/fs/cgroup/*/"$sub" /sys/fs/cgroup/unified/"$sub"; do
	[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
done
finish
