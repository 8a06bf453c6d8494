/* SPDX-License-Identifier: MIT */
/*
 * GPUs: inventory through NVML (libnvidia-ml.so.1 opened with dlopen, the few calls used are
 * declared in gpu.c), a per-node allocator of whole GPUs, the environment a task gets, and
 * per-task sampling of NVML per-process memory/utilization plus device energy.
 *
 * No NVML library, NVML failing to initialise, or no GPU: the inventory is "off" (gpu_enabled
 * false, gpu_off_reason says why) and every other call degrades: a request for 0 GPUs
 * succeeds, any other request fails with -ENODEV. Nothing else in the agent is affected.
 *
 * Library code: never prints, returns 0 or -errno. Not thread-safe (single-threaded agent).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GPU_MAX	     64	  /* devices handled per node (allocation masks are 64-bit) */
#define GPU_UUID_MAX 96	  /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define GPU_NAME_MAX 96	  /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define GPU_PIDS_MAX 4096 /* processes per task considered by one sample */
/* "GPU-<36>" per device, comma separated, for GPU_MAX devices, plus NUL. */
#define GPU_UUID_LIST_MAX (GPU_MAX * GPU_UUID_MAX)

struct gpu_device {
	unsigned index;		 /* NVML index (not necessarily CUDA's order: use the UUID) */
	char uuid[GPU_UUID_MAX]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	char name[GPU_NAME_MAX];
	uint64_t memory_total; /* bytes (nvmlDeviceGetMemoryInfo) */
	unsigned minor;	       /* /dev/nvidia<minor>, char 195:<minor> */
	bool mig_enabled;      /* MIG mode on: listed, not allocatable as a whole GPU */
	bool energy_supported; /* nvmlDeviceGetTotalEnergyConsumption works (Volta and later) */
};

struct gpu_opts {
	/* dlopen path; NULL = $CORRAL_NVML_LIBRARY if set, else "libnvidia-ml.so.1" */
	const char *library_path;
};

struct gpu_inventory;

/*
 * Load NVML and list the devices. Succeeds with an "off" inventory when the library is absent,
 * fails to initialise or reports no device; fails only on -ENOMEM.
 */
int gpu_open(const struct gpu_opts *opts, struct gpu_inventory **ret);
/* nvmlShutdown, dlclose, free. NULL is fine. */
void gpu_free(struct gpu_inventory *inv);
bool gpu_enabled(const struct gpu_inventory *inv);
/* Why GPU features are off (static or owned by inv), NULL when enabled. */
const char *gpu_off_reason(const struct gpu_inventory *inv);
size_t gpu_count(const struct gpu_inventory *inv);
/* Device by position 0..gpu_count-1 (== NVML index), NULL beyond. */
const struct gpu_device *gpu_device(const struct gpu_inventory *inv, size_t i);
/* Position of the device with that UUID, -ENOENT. */
int gpu_find_uuid(const struct gpu_inventory *inv, const char *uuid);
/* Device i's energy counter (NVML total energy since the driver loaded, mJ); -EOPNOTSUPP where
 * the device has none, -EIO when NVML fails. */
int gpu_device_energy_mj(const struct gpu_inventory *inv, size_t i, unsigned long long *ret);

/* ---- allocation ------------------------------------------------------------------------ */

/* What `--gpus` asked for: a count ("2") or explicit NVML indices ("0,2"). */
struct gpu_request {
	bool by_index;
	unsigned count;	     /* by_index false: how many */
	uint64_t index_mask; /* by_index true: which (bit i = index i) */
};

/* "N" (0..GPU_MAX) or "i,j,..." (distinct indices < GPU_MAX). -EINVAL, -ERANGE. */
int gpu_request_parse(const char *s, struct gpu_request *ret);
/* Number of GPUs requested. */
unsigned gpu_request_count(const struct gpu_request *req);

struct gpu_allocation {
	uint64_t mask; /* bit i = device i of the inventory */
};
unsigned gpu_allocation_count(const struct gpu_allocation *a);

/*
 * Allocate free GPUs to task_key (lowest free indices for a count). Errors:
 *   -ENODEV  GPU features off (and GPUs requested), or an index that does not exist
 *   -EOPNOTSUPP an explicitly requested GPU has MIG enabled
 *   -EBUSY   an explicitly requested GPU belongs to another task
 *   -ENOSPC  fewer free GPUs than requested
 *   -EEXIST  task_key already holds GPUs
 * Nothing changes on failure. A request for 0 GPUs succeeds with an empty allocation.
 */
int gpu_alloc(struct gpu_inventory *inv, uint64_t task_key, const struct gpu_request *req,
	      struct gpu_allocation *ret);
/* Release task_key's GPUs (0 if it held none). */
int gpu_release(struct gpu_inventory *inv, uint64_t task_key);
/* Free (unallocated, non-MIG) GPUs. */
unsigned gpu_free_count(const struct gpu_inventory *inv);
/* Allocation held by task_key (empty if none). */
void gpu_task_allocation(const struct gpu_inventory *inv, uint64_t task_key,
			 struct gpu_allocation *ret);

/*
 * Persisted form of an allocation, for re-adoption after an agent restart: the UUIDs, comma
 * separated ("" for none). UUIDs, not indices: indices may change across reboots/driver reloads.
 * buf of at least GPU_UUID_LIST_MAX bytes; -ENOBUFS if shorter than needed.
 */
int gpu_allocation_format(const struct gpu_inventory *inv, const struct gpu_allocation *a,
			  char *buf, size_t len);
/*
 * Re-adopt: mark the GPUs named by a persisted string as task_key's.
 * -ENODEV a UUID is unknown now, -EBUSY owned by another task, -EINVAL malformed;
 * nothing changes on failure.
 */
int gpu_adopt(struct gpu_inventory *inv, uint64_t task_key, const char *persisted,
	      struct gpu_allocation *ret);

/*
 * The task's environment: "CUDA_VISIBLE_DEVICES=<uuids>" and "NVIDIA_VISIBLE_DEVICES=<uuids>".
 * With GPU features on and an empty allocation: CUDA_VISIBLE_DEVICES= (empty: CUDA sees no
 * device) and NVIDIA_VISIBLE_DEVICES=void. With GPU features off: *ret_n = 0 (nothing set).
 * ret: two malloc'd strings (free each); ret_n: 0 or 2.
 */
int gpu_env(const struct gpu_inventory *inv, const struct gpu_allocation *a, char *ret[2],
	    size_t *ret_n);

/* ---- per-task sampling ----------------------------------------------------------------- */

struct gpu_usage {
	double gpu_seconds;	       /* allocated GPUs x wall seconds (billing basis) */
	uint64_t memory_current_bytes; /* last sample: sum of usedGpuMemory over the task's pids */
	uint64_t memory_peak_bytes;    /* high-water of that sum */
	double util_avg;	       /* mean SM utilization, percent of the allocation (0..100) */
	uint64_t samples;	       /* ticks sampled */
	bool energy_valid;	       /* every allocated GPU reports energy */
	double energy_j;	       /* energy of the allocated GPUs since the meter started */
	bool memory_limit_exceeded;    /* a sample exceeded memory_limit (watchdog fired) */
};

struct gpu_meter;

/*
 * Start metering an allocation. memory_limit: bytes, 0 = none (NVML watchdog threshold).
 * start_ns: CLOCK_MONOTONIC (or any clock used consistently with gpu_meter_sample).
 */
int gpu_meter_new(struct gpu_inventory *inv, const struct gpu_allocation *a, uint64_t memory_limit,
		  uint64_t start_ns, struct gpu_meter **ret);
void gpu_meter_free(struct gpu_meter *m);
/*
 * One tick: NVML compute processes and process utilization of the allocated GPUs, summed over
 * pids (the task's processes, host pid namespace). Returns 1 the first time resident memory
 * exceeds the limit (the caller kills the cgroup, exit status gpu_memory_limit), 0 otherwise,
 * or -errno (NVML error: usage keeps its previous values).
 */
/* The allocated GPUs' energy counters read now into the meter (gpu_meter_usage's energy_j then
 * runs to now; a counter read lower than before is left as it was), and out: ret_mj[i] the
 * meter's value of each allocated GPU i, ret_mask the allocation. -ENODATA where the meter has
 * no valid energy, -EIO when a read fails. */
int gpu_meter_energy_refresh(struct gpu_inventory *inv, struct gpu_meter *m,
			     unsigned long long ret_mj[GPU_MAX], uint64_t *ret_mask);
int gpu_meter_sample(struct gpu_inventory *inv, struct gpu_meter *m, const pid_t *pids, size_t n,
		     uint64_t now_ns);
/* Usage so far; gpu_seconds counted up to now_ns. */
void gpu_meter_usage(const struct gpu_meter *m, uint64_t now_ns, struct gpu_usage *ret);

/*
 * What a restarted agent needs to go on with a task's meter (kept in its state file): the
 * start, each allocated GPU's energy counter at the start, and the peak and utilization so far.
 */
struct gpu_meter_state {
	uint64_t start_ns;
	bool energy_valid;
	unsigned long long energy_start_mj[GPU_MAX]; /* by inventory index, allocated GPUs */
	uint64_t mem_peak;
	double util_sum;
	uint64_t samples;
	bool limit_fired;
};
void gpu_meter_get_state(const struct gpu_meter *m, struct gpu_meter_state *ret);
/* NVML resident-memory peak so far (bytes). */
uint64_t gpu_meter_peak(const struct gpu_meter *m);
/*
 * A meter for the same allocation going on from a saved state: gpu_seconds from the saved
 * start, energy from the saved counters (invalid if a counter went backwards: driver reloaded),
 * peak and utilization carried on.
 */
int gpu_meter_resume(struct gpu_inventory *inv, const struct gpu_allocation *a,
		     uint64_t memory_limit, const struct gpu_meter_state *s,
		     struct gpu_meter **ret);
