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

/*
 * A keyed index: task key -> a 64-bit value (a loader's slot, the agent's task), an
 * open-addressing hash (linear probing, deletion by backward shift, so no tombstones) of at
 * least twice as many cells as keys. A loader sizes it for its table of n slots
 * (track_index_init) and keeps it in step: track_index_put when it marks a slot used,
 * track_index_del before it frees one. The agent's live tasks have no fixed count: their index
 * is a zeroed struct, which starts empty and doubles as it fills. A lookup costs O(1) instead
 * of a walk.
 */
struct track_index_cell {
	uint64_t key;
	uint64_t val; /* TRACK_INDEX_EMPTY: a free cell */
};
#define TRACK_INDEX_EMPTY UINT64_MAX
struct track_index {
	struct track_index_cell *cells;
	uint32_t mask; /* cells - 1 (a power of two) */
	uint32_t n;    /* keys held */
	bool sized;    /* a fixed table behind it (track_index_init); zeroed: grows */
};
/* An index for a table of up to n slots (n <= 2^30). -ENOMEM, -EINVAL. */
int track_index_init(struct track_index *ix, uint32_t n);
/* Frees the cells: the index is zeroed (empty, growing) after it. */
void track_index_free(struct track_index *ix);
/*
 * key -> val (val <= INT64_MAX); replaces the value of a key held already. -ENOSPC past the
 * table's n slots (a sized index); -ENOMEM when a growing index cannot grow (it is unchanged).
 */
int track_index_put(struct track_index *ix, uint64_t key, uint64_t val);
/* Drops key; a key not held is no error. */
void track_index_del(struct track_index *ix, uint64_t key);
/* Drops key only while its value is val (one lookup); whether it did. */
bool track_index_del_val(struct track_index *ix, uint64_t key, uint64_t val);
/* The value of key, or -1. */
int64_t track_index_get(const struct track_index *ix, uint64_t key);
/*
 * track_find through the index: the used slot of key in table (stride bytes per struct, each
 * starting with a struct track_slot), checked against the slot itself; NULL if none.
 */
void *track_index_find(const struct track_index *ix, void *table, size_t stride, uint64_t key);
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
 * Every entry of a map, up to chunk at a time (one bpf_map_lookup_batch system call each) into
 * keys and vals (room for chunk keys and values; a per-CPU map's values are ncpus each), each
 * chunk handed to fn(ctx, n). Keys of at most 8 bytes (the batch token is one key). -errno;
 * a kernel without batched lookups for the map's type gives -EINVAL or -ENOTSUPP/-EOPNOTSUPP.
 */
int track_map_read_all(int map_fd, uint32_t chunk, void *keys, void *vals,
		       void (*fn)(void *ctx, uint32_t n), void *ctx);

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
