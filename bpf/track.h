/* SPDX-License-Identifier: MIT */
/*
 * Task membership, user-space side, shared by the BPF loaders (meter.c, audit.c, cuda.c):
 * each loader's table of tracked tasks, the cgroup id of a task's directory, the process
 * entries of the membership maps ("procs": TGID -> a value that starts with the task key).
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* First member of each loader's struct for a tracked task. */
struct track_slot {
	uint64_t key;
	bool used;
};

/*
 * The used slot of key in a table of n structs of stride bytes, each starting with a struct
 * track_slot; NULL if none.
 */
void *track_find(void *table, size_t stride, uint32_t n, uint64_t key);
/* The cgroup id of a cgroup2 directory (its kernfs node id). */
int track_cgroup_id(int dirfd, uint64_t *ret);
/*
 * Adds process tgid to a membership map with value (which starts with the task key).
 * -EBUSY: the process is a member already; -ENOSPC: the map is full.
 */
int track_add_proc(int map_fd, pid_t tgid, const void *value);
/*
 * Deletes every entry of a hash map (keys of ksize bytes, values of vsize bytes that start with
 * the __u64 task key) whose task is task_key; walks at most max + 1 keys. Returns the number
 * of entries it deleted (an entry a program deleted meanwhile is not counted).
 */
int track_delete_by_task(int map_fd, size_t ksize, size_t vsize, uint64_t task_key, uint32_t max);

/*
 * What the running kernel offers the tracepoint programs, read once per process from its BTF
 * (/sys/kernel/btf/vmlinux), without loading anything: tp_btf programs (the btf_trace_*
 * typedefs of the tracepoints used) and the task kfuncs of accounting at exit
 * (bpf_task_acquire/release, Linux 6.2+). The loaders load the variant this picks, once; they
 * fall back to the next one only if that load fails after all.
 */
struct track_kernel {
	bool tp_btf;
	bool task_kfuncs;
};
void track_probe_kernel(struct track_kernel *ret);
