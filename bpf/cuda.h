/* SPDX-License-Identifier: MIT */
/*
 * CUDA driver API telemetry per task and the synchronous GPU memory limit (user-space side of
 * bpf/cuda.bpf.c): uprobes on libcuda.so.1's exported entry points (cuMemAlloc_v2,
 * cuMemAllocManaged, cuMemAllocPitch_v2, cuMemAllocAsync, cuMemFree_v2, cuMemFreeAsync,
 * cuLaunchKernel, cuMemcpyHtoD_v2, cuMemcpyDtoH_v2 and their Async_v2 variants). Tasks are
 * tracked by TGID (inherited on fork). The figures are API telemetry (what the application
 * asked for), labelled as such in records; resident GPU memory comes from NVML (isolation/gpu.h).
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cuda_opts {
	uint32_t max_tasks;  /* default 1024 */
	uint32_t max_pids;   /* tracked processes, default max_tasks * 64 (shared: the map's) */
	uint32_t max_allocs; /* live tracked allocations, default 262144 */
	/*
	 * Use the metering programs' task membership map (meter_members_fd) instead of a fork
	 * program and a map of its own: the meter's fork and exit programs keep it. -EINVAL when
	 * members_fd is not such a map.
	 */
	bool share_members;
	int members_fd;
};
#define CUDA_OPTS_SHARE_MEMBERS 1 /* cuda_opts has share_members */

struct cuda_usage {
	uint64_t limit_bytes;	/* 0 = none */
	uint64_t current_bytes; /* live tracked allocations */
	uint64_t peak_bytes;
	uint64_t alloc_bytes; /* total bytes of successful allocations */
	uint64_t alloc_calls;
	uint64_t free_bytes;
	uint64_t free_calls;
	uint64_t launches;
	uint64_t memcpy_htod_bytes;
	uint64_t memcpy_dtoh_bytes;
	uint64_t untracked; /* allocations not followed (maps full) */
	bool limit_fired;   /* an allocation was refused with SIGKILL */
	uint32_t killed_tgid;
	uint64_t killed_request_bytes;
};

struct cuda_meter;

/* Open and load the programs (not yet attached to any library). */
int cuda_open(const struct cuda_opts *opts, struct cuda_meter **ret);
/* Whether the membership map is the meter's (cuda_opts.share_members) and its id. */
bool cuda_members_shared(const struct cuda_meter *c);
int cuda_members_fd(const struct cuda_meter *c);
void cuda_free(struct cuda_meter *c);
/*
 * Attach the uprobes to one libcuda file (path as the tasks load it; symlinks are resolved by
 * the kernel to the inode). Required: cuMemAlloc_v2, cuMemFree_v2, cuLaunchKernel (-ENOENT if
 * one is missing, nothing left attached); the others are attached where the library has them.
 * May be called once per library file. Returns the number of probes attached.
 */
int cuda_attach_library(struct cuda_meter *c, const char *path);
/* Resolve the libcuda.so.1 the dynamic loader would pick (dlopen(RTLD_LAZY) + dlinfo, then
 * dlclose; cuInit is not called). -ENOENT when there is none. */
int cuda_find_library(char *buf, size_t len);
/*
 * Track tgid as part of task_key (creates the task's entry on first use, with its limit in
 * bytes, 0 = none; later calls leave the limit alone). Call before the child's exec. With the
 * meter's map, a process the meter tracks for the same task already is a member (nothing
 * added); -EBUSY when it is another task's.
 */
int cuda_track(struct cuda_meter *c, uint64_t task_key, pid_t tgid, uint64_t gpu_memory_limit);
int cuda_read(struct cuda_meter *c, uint64_t task_key, struct cuda_usage *ret);
/*
 * Resident GPU memory of the task that its tracked allocations do not account for (CUDA
 * contexts; from NVML: resident - tracked). From then on an allocation is refused when tracked
 * + request + overhead exceeds the limit, so the limit is on resident memory, as NVML's.
 */
int cuda_set_overhead(struct cuda_meter *c, uint64_t task_key, uint64_t bytes);
/* Drop the task and every process and allocation entry of it (with the meter's map: the
 * membership entries only where the meter never took the task's first process over). */
int cuda_forget(struct cuda_meter *c, uint64_t task_key);
unsigned cuda_probes_attached(const struct cuda_meter *c);
