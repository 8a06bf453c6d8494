/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA device-node policy for a task: every NVIDIA GPU node (char 195:0..253) is denied
 * except the GPUs allocated to the task; nvidiactl (195:255) and nvidia-modeset (195:254) stay
 * allowed; nvidia-uvm (its major from /proc/devices) is allowed only when the task holds at
 * least one GPU. Every other device is left alone.
 *   v1: writes to the task's devices cgroup (devices.deny), see devices_v1_apply.
 *   v2, and the unified directory of a v1 hybrid host: a BPF_PROG_TYPE_CGROUP_DEVICE program
 *       (bpf/devices.bpf.c) with a map of allowed (major, minor) pairs.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "isolation/gpu.h"

#define DEVICES_GPU_MINOR_MAX 253 /* 195:254 nvidia-modeset, 195:255 nvidiactl */

struct devices_policy {
	unsigned uvm_major;	/* 0: nvidia-uvm not registered (nothing to deny) */
	uint64_t gpu_minors[4]; /* bit m: /dev/nvidia<m> (195:m) allowed */
};

/* Majors from a /proc/devices-format file (NULL = /proc/devices), character section:
 * *ret_uvm = "nvidia-uvm" major or 0 when absent. */
int devices_read_uvm_major(const char *proc_devices, unsigned *ret_uvm);

/* Empty policy: no GPU node allowed, nvidia-uvm denied when uvm_major != 0. */
void devices_policy_init(struct devices_policy *p, unsigned uvm_major);
/* Allow /dev/nvidia<minor>. -ERANGE beyond DEVICES_GPU_MINOR_MAX. */
int devices_policy_allow_minor(struct devices_policy *p, unsigned minor);
/* Allow the device nodes of an allocation (minors from the inventory). */
int devices_policy_allow_gpus(struct devices_policy *p, const struct gpu_inventory *inv,
			      const struct gpu_allocation *a);
bool devices_policy_allows(const struct devices_policy *p, unsigned major, unsigned minor);

/*
 * v1: apply to a devices-controller cgroup directory (fd, e.g. cg_task_v1_dir_fd(t, "devices")),
 * before any process joins it. The cgroup inherits its parent's list, normally "a *:* rwm"
 * (allow by default); in that mode an allow entry cannot carve an exception out of a wildcard
 * deny, so each denied GPU minor is written on its own ("c 195:m rwm" for m not allowed) and
 * nvidia-uvm as "c U:* rwm" when denied. A parent that is deny-by-default but allows NVIDIA
 * majors by wildcard cannot be narrowed this way: -EOPNOTSUPP.
 */
int devices_v1_apply(int devices_dirfd, const struct devices_policy *p);

/* Same allowed set (the padding of the struct is not compared). */
bool devices_policy_equal(const struct devices_policy *a, const struct devices_policy *b);
