/* SPDX-License-Identifier: MIT */
/*
 * node.sample records (agent/node_sample.c): the node's capacity, what its running tasks
 * requested and what it used, emitted when the agent starts and every sample_interval after,
 * through agent_emit_record (the spool, exactly-once ids). One batch per interval: the only
 * per-task work is the sum of the live tasks' requests, once per interval.
 */
#pragma once

#include <stdint.h>

#include "accounting/record.h"

struct agent;
struct task;

/* Node-wide figures read from procfs. */
struct node_proc {
	uint64_t busy_ns;	  /* CPU time of all CPUs but idle and iowait, since boot */
	uint64_t mem_used_bytes;  /* MemTotal - MemAvailable */
	uint64_t mem_total_bytes; /* MemTotal */
};

/* Reads <proc_root>/stat and <proc_root>/meminfo ("/proc" normally); -errno, -EBADMSG when a
 * file is not as expected. */
int node_proc_read(const char *proc_root, struct node_proc *ret);

/* Emits the first node.sample (period 0); later ones come from node_sample_tick. */
int node_sample_start(struct agent *a, uint64_t now_mono);
/* Emits a node.sample when sample_interval has passed since the last one. */
void node_sample_tick(struct agent *a, uint64_t now_mono);
void node_sample_stop(struct agent *a);

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

/*
 * What the energy attribution costs the agent (corralctl status "energy"): whether RAPL is
 * read, the periods attributed (one per node.sample with RAPL) and the agent's CPU time in
 * reading the zones and sharing each period among the tasks (CLOCK_THREAD_CPUTIME_ID: the
 * agent is single-threaded). All zero before node_sample_start.
 */
struct node_energy_stats {
	bool rapl;
	uint64_t periods, cpu_ns;
};
void node_energy_stats(const struct agent *a, struct node_energy_stats *ret);
