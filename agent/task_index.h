/* SPDX-License-Identifier: MIT */
/*
 * The live tasks (a->tasks: starting, running, ending) by key, for what names a task by its
 * key (an audit event, the meter's settle and OOM events, the meter's marks): O(1) instead
 * of a walk of the tasks. The task table (agent/task.c) puts a task in when it links it and
 * takes it out when it leaves the list.
 */
#pragma once

#include "agent/agent.h"

void task_index_put(struct agent *a, struct task *t);
void task_index_del(struct agent *a, struct task *t);
/* The live task of key, NULL if none. */
struct task *task_live(struct agent *a, uint64_t key);
/* At exit, with the tasks. */
void task_index_free(struct agent *a);
