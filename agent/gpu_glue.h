/* SPDX-License-Identifier: MIT */
/* GPU support of the agent (agent/gpu_glue.c). All functions are no-ops without GPUs. */
#pragma once

#include "isolation/gpu.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct agent;
struct task;

int gpu_glue_init(struct agent *a);
void gpu_glue_fini(struct agent *a);
/* The task's GPUs back to the inventory (a launch that failed; at the end, the GPU meter's). */
void gpu_glue_release(struct agent *a, struct task *t);
/* The rest runs as the GPU meter of the task state machine (agent/meters.h, meter_gpu_ops):
 * allocation, the device policy and the task's variables and device nodes before the spawn
 * (its prepare, undone for a launch that fails), uprobe tracking and the NVML meter from the
 * child's pid, sampled each tick, the GPU memory limit it saw (its limit op: NVML's watchdog or
 * the uprobe's kill; supervise.c decides, the task table signals), the meter kept in the state file
 * and resumed at re-adoption. */

/* The node's GPU model names in index order (valid while the agent runs), at most max; the
 * number written (0 without GPUs). */
size_t gpu_glue_models(struct agent *a, const char **ret, size_t max);

/* The sum of the GPUs' energy counters (mJ) in *ret; false without GPUs or when one of them has
 * no counter or could not be read. */
bool gpu_glue_energy_mj(struct agent *a, unsigned long long *ret);
/* Each GPU's energy counter (mJ) by inventory index, *ret_n of them; false without GPUs or when
 * one has none. */
bool gpu_glue_energy_each_mj(struct agent *a, unsigned long long ret[GPU_MAX], size_t *ret_n);
/* A running task's GPUs' energy since its start (J), its counters read now (each allocated
 * GPU's value in ret_mj, the allocation in ret_mask); false when it has no GPU meter or one of
 * its GPUs reports no energy. */
bool gpu_glue_task_energy_j(struct agent *a, struct task *t, double *ret,
			    unsigned long long ret_mj[GPU_MAX], uint64_t *ret_mask);

/* For /metrics; false when GPU features are off. */
struct gpu_glue_stats {
	size_t gpus, gpus_allocated;
	bool api_uprobes;	       /* libcuda uprobes attached */
	uint64_t device_program_loads; /* device-policy programs loaded since start */
	size_t device_programs_cached;
};
bool gpu_glue_stats(const struct agent *a, struct gpu_glue_stats *ret);
