/* SPDX-License-Identifier: MIT */
/* Task cgroups made ahead and removed when the loop is idle (agent/cgpool.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct agent;
struct cg_limits;
struct cg_task;

/* A ready cgroup for a launch with these limits, if one fits: then *ret, and the
 * task's seq and id that it was made for (the cgroup is named after the id). Limits are not
 * applied yet (cg_task_apply). */
bool agent_cg_pool_take(struct agent *a, const struct cg_limits *lim, uint64_t *key, char *id,
			size_t idlen, struct cg_task **ret);
/* An ended task's (empty) cgroup, removed when the loop is idle. */
void agent_cg_release(struct agent *a, struct cg_task *cg);
bool agent_has_idle_work(const struct agent *a);
void agent_idle_work(struct agent *a); /* one step: one directory removed or made */
void agent_cg_pool_fini(struct agent *a);
