#!/bin/bash
# GPU limits and device isolation without a GPU (root):
#  1. uprobe path: helper_cudaapp allocates through the stand-in libcuda.so.1 as a tracked task
#     with a 256 MiB GPU memory limit: 512 MiB in 64 MiB steps is SIGKILLed at step 5 (the step
#     that crosses the limit, before it runs) and the BPF side reports the limit fired; 256 MiB
#     exits 0 with exact counters. Again with the meter's membership map shared, the app a
#     shell's child (a member through the meter's fork program).
#  2. device policy on mknod-created nodes (no driver here): an allowed node opens as far as the
#     missing driver (ENXIO: the cgroup let it through), a denied one fails with EPERM.
#     a) v1 devices cgroup, b) cgroup_device BPF program on a unified-hierarchy cgroup.
set -u
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_gpucheck
APP=$O/tests/integration/helper_cudaapp
CUDA=$O/tests/gpu/libcuda.so.1
MiB=$((1 << 20))
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect() { # expect OUTPUT LINE DESCRIPTION
	if grep -qxF -- "$2" <<<"$1"; then ok "$3 ($2)"; else bad "$3: want '$2'"; fi
}

[ "$(id -u)" = 0 ] || { echo "FAIL: needs root"; exit 1; }
for f in "$H" "$APP" "$CUDA"; do
	[ -x "$f" ] || [ -f "$f" ] || { echo "FAIL: $f not built (make O=$O all)"; exit 1; }
done

tmp=$(mktemp -d /tmp/corral-gputest.XXXXXX)
v1=/sys/fs/cgroup/devices/corral-gputest-$$
uni=/sys/fs/cgroup/unified/corral-gputest-$$
cleanup() {
	rmdir "$v1" "$uni" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# ---- 1. uprobe metering and the synchronous limit ----------------------------------------
out=$("$H" cuda-run "$CUDA" $((256 * MiB)) -- "$APP" "$CUDA" 512 64 7 2>&1)
echo "$out" | sed 's/^/  over | /'
expect "$out" "probes=15" "all uprobes attached to the stand-in"
expect "$out" "exit=signal:9" "over the limit: SIGKILL"
expect "$out" "step 4 allocated 256 MiB" "steps up to the limit ran"
if grep -q "step 5" <<<"$out"; then bad "step 5 ran past the limit"; else ok "step 5 never returned"; fi
expect "$out" "limit_fired=1" "BPF reports the limit fired"
expect "$out" "killed_request_bytes=$((64 * MiB))" "refused request size"
pid=$(sed -n 's/^pid //p' <<<"$out")
expect "$out" "killed_tgid=$pid" "killed process is the app"
expect "$out" "alloc_bytes=$((256 * MiB))" "allocated before the kill"
expect "$out" "peak_bytes=$((256 * MiB))" "peak before the kill"
expect "$out" "current_bytes=0" "process exit released its allocations"
expect "$out" "launches=0" "no launch before the kill"
expect "$out" "forget=0 read_after_forget=-2" "forget drops the task"

out=$("$H" cuda-run "$CUDA" $((256 * MiB)) -- "$APP" "$CUDA" 256 64 7 2>&1)
echo "$out" | sed 's/^/  under | /'
expect "$out" "exit=code:0" "at the limit: exits 0"
expect "$out" "limit_fired=0" "limit did not fire"
expect "$out" "alloc_bytes=$((256 * MiB))" "bytes allocated exact"
expect "$out" "alloc_calls=4" "allocation calls exact"
expect "$out" "peak_bytes=$((256 * MiB))" "peak exact"
expect "$out" "free_bytes=$((256 * MiB))" "bytes freed exact"
expect "$out" "free_calls=4" "free calls exact"
expect "$out" "current_bytes=0" "nothing left"
expect "$out" "launches=7" "launches exact"
expect "$out" "htod_bytes=4096" "HtoD bytes exact"
expect "$out" "dtoh_bytes=4096" "DtoH bytes exact"
expect "$out" "untracked=0" "nothing untracked"

# The same with the meter's membership map (as corrald loads them: no fork program of the
# uprobes' own): the app started by a shell, so it is a member through the meter's fork
# program; the kill releases its allocations at its exit, and forget leaves no entry.
out=$(CORRAL_TEST_CUDA_SHARE=1 "$H" cuda-run "$CUDA" $((256 * MiB)) -- \
	/bin/sh -c '"$@"; exit $?' sh "$APP" "$CUDA" 512 64 7 2>&1)
echo "$out" | sed 's/^/  shared | /'
expect "$out" "members shared=1 same_map=1" "shared: the uprobes use the meter's membership map"
expect "$out" "probes=15" "shared: all uprobes attached"
expect "$out" "exit=code:137" "shared: the shell's child over the limit: SIGKILL"
if grep -q "step 5" <<<"$out"; then bad "shared: step 5 ran past the limit"; else ok "shared: step 5 never returned"; fi
expect "$out" "limit_fired=1" "shared: BPF reports the limit fired"
expect "$out" "alloc_bytes=$((256 * MiB))" "shared: allocated before the kill"
expect "$out" "current_bytes=0" "shared: process exit released its allocations"
expect "$out" "forget=0 read_after_forget=-2" "shared: forget drops the task"
expect "$out" "members_left=0" "shared: no membership entry left"
out=$(CORRAL_TEST_CUDA_SHARE=1 "$H" cuda-run "$CUDA" $((256 * MiB)) -- "$APP" "$CUDA" 256 64 7 2>&1)
expect "$out" "exit=code:0" "shared, at the limit: exits 0"
expect "$out" "free_bytes=$((256 * MiB))" "shared: bytes freed exact"
expect "$out" "launches=7" "shared: launches exact"
expect "$out" "current_bytes=0" "shared: nothing left"

# No limit: 512 MiB runs to the end.
out=$("$H" cuda-run "$CUDA" 0 -- "$APP" "$CUDA" 512 64 1 2>&1)
expect "$out" "exit=code:0" "no limit: exits 0"
expect "$out" "peak_bytes=$((512 * MiB))" "no limit: peak 512 MiB"

# Untracked processes are not metered (and never killed).
out=$("$APP" "$CUDA" 512 64 1 2>&1); rc=$?
[ $rc = 0 ] && ok "untracked process unaffected" || bad "untracked process rc=$rc: $out"

# NVML path through the stand-in (inventory, env, one sample summed over two pids).
out=$(CORRAL_NVML_LIBRARY=$(realpath "$O")/tests/gpu/libnvidia-ml.so.1 \
	CORRAL_FAKE_NVML=tests/integration/fixtures/nvml-2gpu.txt "$H" nvml 4242 4243 2>&1)
expect "$out" "gpus=2" "stand-in NVML: two GPUs"
expect "$out" "CUDA_VISIBLE_DEVICES=GPU-11111111-2222-3333-4444-555555555555,GPU-66666666-7777-8888-9999-aaaaaaaaaaaa" "env by UUID"
expect "$out" "nvml_memory_bytes=$((1536 * MiB))" "NVML memory summed over the pid set"
out=$(CORRAL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$H" nvml 2>&1)
grep -q "^gpu=off reason=/nonexistent/libnvidia-ml.so.1" <<<"$out" && ok "no NVML: GPU features off" ||
	bad "no NVML: $out"

# ---- 2. device policy --------------------------------------------------------------------
# A major not registered on this host plays nvidia-uvm.
uvm=0
for m in $(seq 511 -1 400); do
	grep -qE "^ *$m " /proc/devices || { uvm=$m; break; }
done
[ $uvm != 0 ] || { echo "FAIL: no free major for the nvidia-uvm stand-in"; exit 1; }
printf 'Character devices:\n  1 mem\n195 nvidia-frontend\n%d nvidia-uvm\n\nBlock devices:\n  8 sd\n%d other\n' \
	"$uvm" $((uvm - 1)) >"$tmp/devices"
out=$("$H" uvm-major "$tmp/devices")
expect "$out" "uvm_major=$uvm" "nvidia-uvm major parsed from a /proc/devices file"

mknod "$tmp/nvidia0" c 195 0 && mknod "$tmp/nvidia1" c 195 1 &&
	mknod "$tmp/nvidia-modeset" c 195 254 && mknod "$tmp/nvidiactl" c 195 255 &&
	mknod "$tmp/nvidia-uvm" c "$uvm" 0 || { echo "FAIL: mknod"; exit 1; }
nodes=("$tmp/nvidia0" "$tmp/nvidia1" "$tmp/nvidia-modeset" "$tmp/nvidiactl" "$tmp/nvidia-uvm" /dev/null)
out=$("$H" open "${nodes[@]}")
expect "$out" "$tmp/nvidia0 ENXIO" "outside any policy: 195:0 reaches the (missing) driver"

check_policy() { # MODE DIR LABEL
	local mode=$1 dir=$2 label=$3
	out=$("$H" "$mode" "$dir" 1 "$uvm" -- "$H" open "${nodes[@]}" 2>&1)
	echo "$out" | sed "s/^/  $label gpu1 | /"
	expect "$out" "exit=code:0" "$label: child ran"
	expect "$out" "$tmp/nvidia0 EPERM" "$label GPU 1 allocated: 195:0 denied"
	expect "$out" "$tmp/nvidia1 ENXIO" "$label GPU 1 allocated: 195:1 let through"
	expect "$out" "$tmp/nvidia-modeset ENXIO" "$label: nvidia-modeset let through"
	expect "$out" "$tmp/nvidiactl ENXIO" "$label: nvidiactl let through"
	expect "$out" "$tmp/nvidia-uvm ENXIO" "$label GPU allocated: nvidia-uvm let through"
	expect "$out" "/dev/null OK" "$label: other devices untouched"
	[ "$mode" = bpf-run ] && expect "$out" "denials=1" "$label: program counted the denial"
	[ "$mode" = bpf-run ] && expect "$out" "detach=0" "$label: detached"
}

# a) v1 devices cgroup
mkdir "$v1" || { echo "FAIL: mkdir $v1"; exit 1; }
check_policy v1-run "$v1" v1
rmdir "$v1"
mkdir "$v1" || { echo "FAIL: mkdir $v1"; exit 1; }
out=$("$H" v1-run "$v1" - "$uvm" -- "$H" open "${nodes[@]}" 2>&1)
echo "$out" | sed 's/^/  v1 none | /'
expect "$out" "$tmp/nvidia1 EPERM" "v1 no GPU: 195:1 denied"
expect "$out" "$tmp/nvidia-uvm EPERM" "v1 no GPU: nvidia-uvm denied"
expect "$out" "$tmp/nvidiactl ENXIO" "v1 no GPU: nvidiactl let through"
grep -q "^a \*:\* rwm$" "$v1/devices.list" && ok "v1: allow-by-default list kept" ||
	bad "v1: devices.list changed mode: $(head -3 "$v1/devices.list")"
rmdir "$v1"

# b) cgroup_device program on a unified-hierarchy cgroup (v2 mount of this hybrid host)
if ! mkdir "$uni" 2>/dev/null; then
	echo "SKIP: no writable unified hierarchy at /sys/fs/cgroup/unified"
	[ $fail = 0 ] && exit 77
	exit 1
fi
check_policy bpf-run "$uni" bpf
out=$("$H" bpf-run "$uni" - "$uvm" -- "$H" open "${nodes[@]}" 2>&1)
echo "$out" | sed 's/^/  bpf none | /'
expect "$out" "$tmp/nvidia0 EPERM" "bpf no GPU: 195:0 denied"
expect "$out" "$tmp/nvidia1 EPERM" "bpf no GPU: 195:1 denied"
expect "$out" "$tmp/nvidia-uvm EPERM" "bpf no GPU: nvidia-uvm denied"
expect "$out" "$tmp/nvidiactl ENXIO" "bpf no GPU: nvidiactl let through"
expect "$out" "denials=3" "bpf no GPU: three denials counted"
# After detach the same cgroup lets everything through again.
out=$("$H" open "$tmp/nvidia0")
expect "$out" "$tmp/nvidia0 ENXIO" "after detach: open reaches the driver"

# The attachment belongs to the cgroup, not to the loader (re-adoption after a restart).
out=$("$H" bpf-attach "$uni" - "$uvm" 2>&1)
expect "$out" "attached=persistent" "attached by a loader that exited"
out=$(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$uni" "$H" open "$tmp/nvidia0" "$tmp/nvidiactl" 2>&1)
expect "$out" "$tmp/nvidia0 EPERM" "policy still enforced after the loader exited"
expect "$out" "$tmp/nvidiactl ENXIO" "  and still lets nvidiactl through"
rmdir "$uni" && ok "cgroup with the attached program removed" || bad "rmdir $uni"

[ $fail = 0 ] && echo "gpu_limits: all checks passed" || echo "gpu_limits: FAILED"
exit $fail
