/* SPDX-License-Identifier: MIT */
/*
 * The live tasks by key (agent/task_index.h).
 */
#include "agent/task_index.h"

#include <stdlib.h>

/*
 * The live tasks by key (a->live_ix): open addressing with linear probing over at least twice
 * as many cells as tasks, deletion by backward shift (no tombstones). An event that names a
 * task by its key (audit, OOM, the meter's settle) finds it in O(1) instead of a walk.
 */
static uint32_t live_ix_home(uint64_t key, uint32_t mask)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

static void live_ix_insert(struct task **cells, uint32_t mask, struct task *t)
{
	uint32_t i = live_ix_home(t->key, mask);

	while (cells[i])
		i = (i + 1) & mask;
	cells[i] = t;
}

void task_index_put(struct agent *a, struct task *t)
{
	if (a->live_ix_failed)
		return;
	if (!a->live_ix || 2 * (a->live_ix_n + 1) > a->live_ix_mask + 1) {
		uint32_t n = a->live_ix ? 2 * (a->live_ix_mask + 1) : 256;
		struct task **c = calloc(n, sizeof(*c));

		if (!c) {
			/* from now on task_live walks the list */
			free(a->live_ix);
			a->live_ix = NULL;
			a->live_ix_failed = true;
			return;
		}
		for (uint32_t i = 0; a->live_ix && i <= a->live_ix_mask; i++)
			if (a->live_ix[i])
				live_ix_insert(c, n - 1, a->live_ix[i]);
		free(a->live_ix);
		a->live_ix = c;
		a->live_ix_mask = n - 1;
	}
	live_ix_insert(a->live_ix, a->live_ix_mask, t);
	a->live_ix_n++;
}

void task_index_del(struct agent *a, struct task *t)
{
	uint32_t mask = a->live_ix_mask, i, j;

	if (!a->live_ix)
		return;
	for (i = live_ix_home(t->key, mask); a->live_ix[i] != t; i = (i + 1) & mask)
		if (!a->live_ix[i])
			return;
	a->live_ix_n--;
	/* backward shift: a later entry of the run moves into the hole when its home is not
	 * between the hole and itself (cyclically) */
	for (j = (i + 1) & mask; a->live_ix[j]; j = (j + 1) & mask) {
		uint32_t h = live_ix_home(a->live_ix[j]->key, mask);

		if (((j - h) & mask) >= ((j - i) & mask)) {
			a->live_ix[i] = a->live_ix[j];
			i = j;
		}
	}
	a->live_ix[i] = NULL;
}

struct task *task_live(struct agent *a, uint64_t key)
{
	if (!a->live_ix) {
		for (struct task *t = a->tasks; t; t = t->next)
			if (t->key == key)
				return t;
		return NULL;
	}
	for (uint32_t i = live_ix_home(key, a->live_ix_mask); a->live_ix[i];
	     i = (i + 1) & a->live_ix_mask)
		if (a->live_ix[i]->key == key)
			return a->live_ix[i];
	return NULL;
}

void task_index_free(struct agent *a)
{
	free(a->live_ix);
	a->live_ix = NULL;
	a->live_ix_mask = a->live_ix_n = 0;
}
