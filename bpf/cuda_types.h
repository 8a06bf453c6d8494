/* SPDX-License-Identifier: MIT */
/*
 * Types shared by bpf/cuda.bpf.c and its loader bpf/cuda.c. Not a wire format: fixed-width
 * __u32/__u64 only, one layout for both sides of the same build.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Per-task CUDA driver API telemetry (map "tasks", key: __u64 task_key). Atomics in BPF. */
struct cuda_task {
	__u64 limit_bytes;   /* gpu memory limit, 0 = none (set by user space) */
	__s64 tracked_bytes; /* live tracked allocations (reserved at call entry) */
	__u64 peak_bytes;    /* high-water of tracked_bytes after successful allocations */
	__u64 alloc_bytes;   /* bytes of successful allocations */
	__u64 alloc_calls;
	__u64 free_bytes; /* bytes released by cuMemFree* of tracked allocations */
	__u64 free_calls;
	__u64 launches;		    /* cuLaunchKernel calls */
	__u64 htod_bytes;	    /* cuMemcpyHtoD* ByteCount */
	__u64 dtoh_bytes;	    /* cuMemcpyDtoH* ByteCount */
	__u64 limit_fired;	    /* allocations refused by SIGKILL */
	__u64 killed_request_bytes; /* size of the last refused allocation */
	__u32 killed_tgid;	    /* process killed last */
	__u32 root_tgid;	    /* user space: the first process cuda_track added */
	__u64 untracked;	    /* allocations not recorded (allocs/pending map full) */
};

/* A process's share of its task's tracked bytes (map "pbytes", key: __u32 tgid), made at its
 * first allocation, released at its leader's exit. Membership is "procs" (member_types.h). */
struct cuda_proc {
	__u64 task_key;
	__s64 tracked_bytes; /* this process's share of the task's tracked_bytes */
};

/* Live allocation (map "allocs"). */
struct cuda_alloc_key {
	__u32 tgid;
	__u32 _pad;
	__u64 dptr;
};
struct cuda_alloc {
	__u64 task_key;
	__u64 size;
};

/* Allocation in flight between entry and return probes (map "pending", key: pid_tgid). */
struct cuda_pending {
	__u64 task_key;
	__u64 size;	   /* reserved at entry */
	__u64 dptr_uaddr;  /* CUdeviceptr * argument */
	__u64 pitch_uaddr; /* size_t *pPitch (cuMemAllocPitch), 0 otherwise */
	__u64 height;
};
