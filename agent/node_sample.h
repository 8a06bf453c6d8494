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
