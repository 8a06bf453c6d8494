/* SPDX-License-Identifier: MIT */
/*
 * The live tasks by key (agent/task_index.h): bpf/track.c's keyed index (the agent's zeroed
 * struct is an empty one that grows as tasks come), each key's value the task's address. When
 * the index cannot grow (no memory) it is dropped and every lookup walks the list from then
 * on: slower, never wrong.
 */
#include "agent/task_index.h"

#include <stdint.h>

void task_index_put(struct agent *a, struct task *t)
{
	if (a->live_ix_failed)
		return;
	if (track_index_put(&a->live_ix, t->key, (uint64_t)(uintptr_t)t) < 0) {
		track_index_free(&a->live_ix);
		a->live_ix_failed = true;
	}
}

void task_index_del(struct agent *a, struct task *t)
{
	track_index_del_val(&a->live_ix, t->key, (uint64_t)(uintptr_t)t);
}

struct task *task_live(struct agent *a, uint64_t key)
{
	int64_t v;

	if (a->live_ix_failed) {
		for (struct task *t = a->tasks; t; t = t->next)
			if (t->key == key)
				return t;
		return NULL;
	}
	v = track_index_get(&a->live_ix, key);
	return v < 0 ? NULL : (struct task *)(uintptr_t)v;
}

void task_index_free(struct agent *a)
{
	track_index_free(&a->live_ix);
}
