/* SPDX-License-Identifier: MIT */
/*
 * A task's usage (agent/usage.c): wall time from its start, the cgroup's figures (exact CPU,
 * peak memory, block IO where kept, the memory integral of the agent's samples), then each
 * meter's usage op over them (agent/meters.h: eBPF, taskstats, NVML), and where the block IO
 * figures come from. Into t->usage, t->sources and t->usage_detail.
 */
#pragma once

struct agent;
struct task;
struct cg_stats;

/* pre: the cgroup's stats, read after it was found empty (final), or NULL to read them. */
void usage_collect(struct agent *a, struct task *t, const struct cg_stats *pre);
