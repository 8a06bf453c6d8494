/* SPDX-License-Identifier: MIT */
/* Energy per task and the node sampler's state (agent/node_energy.c, agent/node_sample.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "accounting/record.h"
#include "agent/energy.h"
#include "isolation/gpu.h"

struct agent;
struct task;

/* The node sampler's state (one per agent, a->node_sampler). */
struct node_sampler {
	uint64_t last_mono;    /* monotonic time of the last record */
	uint64_t last_busy_ns; /* node CPU time then */
	bool have_busy;
	bool failed_logged;
	bool rapl; /* energy meter opened */
	struct energy_meter energy;
	/* each GPU's energy counter at the last record (an allocated GPU's as its task's meter
	 * read it), and what tasks that ended since were given (mJ) */
	bool have_gpu_mj;
	size_t n_gpu;
	unsigned long long last_gpu_mj[GPU_MAX];
	uint64_t ended_gpu_mj;
	/* the current period: what tasks that ended within it were given (uJ) */
	uint64_t ended_uj[_ENERGY_KIND_MAX];
	uint64_t attr_periods, attr_cpu_ns; /* node_energy_stats */
};

/*
 * Energy per task (docs/reports.md "Energy"): at each period boundary the period's RAPL
 * package energy is shared among the tasks by their CPU time in it over the node's CPU time
 * (CPUs x period), the DRAM energy by their memory byte-seconds over the node's (MemTotal x
 * period), in whole microjoules; what no task got is the record's unattributed energy.
 * node_energy_task_end gives an ending task its share of the period so far (called once,
 * after its final usage is read) and sets t->usage.energy; node_energy_usage fills
 * usage.energy_j from the shares so far (agent/usage.c, at every usage read).
 */
void node_energy_task_end(struct agent *a, struct task *t);
/* The node's RAPL energy is shared among the tasks (each task's share moves every period). */
bool node_energy_shared(const struct agent *a);
void node_energy_usage(struct agent *a, const struct task *t, struct acct_energy *ret);
/* The task takes a share of the node's energy now (running, not ended, measured from its
 * start or restored across a restart). */
bool node_energy_task_shares(const struct task *t);
/* At a period's end: the RAPL zones and the GPUs' counters since the last record into ns, the
 * RAPL part shared among the tasks (their shares added to each task). */
void node_energy_add(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns,
		     uint64_t now_mono);
