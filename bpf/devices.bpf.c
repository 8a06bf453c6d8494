// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device policy for a task's cgroup on the unified hierarchy (BPF_PROG_TYPE_CGROUP_DEVICE).
 * Every character device of the NVIDIA major (195) and of nvidia-uvm's major (uvm_major, read
 * from /proc/devices by the loader) is denied unless listed in "allowed"; every other device
 * is left to the rest of the policy (allowed here). One object per distinct policy, attached to
 * the cgroup of every task with that policy (the agent keeps the loaded objects), with
 * BPF_F_ALLOW_MULTI so policies of parent cgroups (systemd's DevicePolicy) still apply.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "bpf/devices_types.h"

#define DEVCG_DEV_CHAR 2 /* BPF_DEVCG_DEV_CHAR */

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 uvm_major = 0; /* 0: nvidia-uvm not registered */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEVICES_ALLOWED_MAX);
	__type(key, struct devices_key);
	__type(value, __u8);
} allowed SEC(".maps");

__u64 denials = 0;
__u32 last_denied_major = 0;
__u32 last_denied_minor = 0;

SEC("cgroup/dev")
int corral_devices(struct bpf_cgroup_dev_ctx *ctx)
{
	struct devices_key k = {.major = ctx->major, .minor = ctx->minor};

	if ((ctx->access_type & 0xFFFF) != DEVCG_DEV_CHAR)
		return 1;
	if (ctx->major != DEVICES_NVIDIA_MAJOR && (uvm_major == 0 || ctx->major != uvm_major))
		return 1;
	if (bpf_map_lookup_elem(&allowed, &k))
		return 1;
	k.minor = DEVICES_MINOR_ANY;
	if (bpf_map_lookup_elem(&allowed, &k))
		return 1;
	__sync_fetch_and_add(&denials, 1);
	last_denied_major = ctx->major;
	last_denied_minor = ctx->minor;
	return 0;
}
