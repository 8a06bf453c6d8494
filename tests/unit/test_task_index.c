/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of agent/task_index.c (the live tasks by key): against a plain walk of the tasks,
 * through puts and deletes in random order (growth, long probe runs, wrap-around, backward
 * shifts), and its fallback to the walk when the index cannot grow (malloc is wrapped here:
 * tests/unit/task_index.mk).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/task_index.h"

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);

/* malloc of the objects linked here (the index's cells) fails while this is set */
static bool fail_malloc;

void *__wrap_malloc(size_t n)
{
	return fail_malloc ? NULL : __real_malloc(n);
}

/* What task_live must answer: the walk of a->tasks (the list is kept here by hand). */
static struct task *walk(struct agent *a, uint64_t key)
{
	for (struct task *t = a->tasks; t; t = t->next)
		if (t->key == key)
			return t;
	return NULL;
}

static void unlink_task(struct agent *a, struct task *t)
{
	for (struct task **pp = &a->tasks; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			return;
		}
}

static void test_index_matches_the_walk(void **state)
{
	enum { KEYS = 3000 };
	static struct task tasks[KEYS];
	static bool in[KEYS];
	struct agent *a = calloc(1, sizeof(*a));
	uint64_t seed = 7;
	size_t n = 0;

	(void)state;
	assert_non_null(a);
	for (size_t i = 0; i < KEYS; i++)
		/* keys 256 apart: many share a home cell in a small table */
		tasks[i].key = 1000 + (uint64_t)i * 256;
	for (int step = 0; step < 200000; step++) {
		size_t i;
		uint64_t probe;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		/* the live set grows to about 2,000 then shrinks: the table grows, runs wrap */
		i = (size_t)(seed >> 33) % (step < 100000 ? KEYS : KEYS / 3);
		if (in[i]) {
			task_index_del(a, &tasks[i]);
			unlink_task(a, &tasks[i]);
			in[i] = false;
			n--;
		} else {
			tasks[i].next = a->tasks;
			a->tasks = &tasks[i];
			task_index_put(a, &tasks[i]);
			in[i] = true;
			n++;
		}
		probe =
		    tasks[(seed >> 20) % KEYS].key + ((seed >> 60) == 0); /* a miss now and then */
		assert_ptr_equal(task_live(a, probe), walk(a, probe));
		assert_ptr_equal(task_live(a, tasks[i].key), in[i] ? &tasks[i] : NULL);
	}
	assert_int_equal(a->live_ix.n, n);
	for (size_t i = 0; i < KEYS; i++)
		assert_ptr_equal(task_live(a, tasks[i].key), in[i] ? &tasks[i] : NULL);
	assert_false(a->live_ix_failed);
	task_index_free(a);
	free(a);
}

/*
 * The index cannot grow (malloc fails at the put that would double it): it is dropped, and
 * every task, those before and after, is still found by walking the list.
 */
static void test_failed_growth_walks(void **state)
{
	enum { N = 300 };
	static struct task tasks[N];
	struct agent *a = calloc(1, sizeof(*a));

	(void)state;
	assert_non_null(a);
	for (size_t i = 0; i < N; i++) {
		tasks[i].key = 77 + i * 3;
		tasks[i].next = a->tasks;
		a->tasks = &tasks[i];
		/* 256 cells hold 128 keys: the 129th put must grow, and fails */
		fail_malloc = i == 128;
		task_index_put(a, &tasks[i]);
		fail_malloc = false;
		assert_int_equal(a->live_ix_failed, i >= 128);
	}
	assert_null(a->live_ix.cells);
	for (size_t i = 0; i < N; i++)
		assert_ptr_equal(task_live(a, tasks[i].key), &tasks[i]);
	assert_null(task_live(a, 78));
	/* a delete after the failure: the list is the truth, the task leaves it */
	task_index_del(a, &tasks[5]);
	a->tasks = NULL;
	assert_null(task_live(a, tasks[5].key));
	task_index_free(a);
	free(a);
}

/* A key put again for another task: a later delete of the first task leaves the second. */
static void test_del_keeps_a_replacing_task(void **state)
{
	struct task old = {.key = 42}, cur = {.key = 42};
	struct agent *a = calloc(1, sizeof(*a));

	(void)state;
	assert_non_null(a);
	task_index_put(a, &old);
	task_index_put(a, &cur);
	task_index_del(a, &old);
	assert_ptr_equal(task_live(a, 42), &cur);
	task_index_del(a, &cur);
	assert_null(task_live(a, 42));
	assert_int_equal(a->live_ix.n, 0);
	task_index_free(a);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_index_matches_the_walk),
	    cmocka_unit_test(test_failed_growth_walks),
	    cmocka_unit_test(test_del_keeps_a_replacing_task),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
