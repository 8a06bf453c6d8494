/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of collector/refuse_log.c, the per-client rate limit of the refused requests' log:
 * a noisy client does not hide another's refusals, each client's unlogged count is said at its
 * next window or when its entry is reused, all clients together stay under the overall cap,
 * and the table never holds more than REFUSE_LOG_CLIENTS clients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collector/refuse_log.h"

static struct refuse_log L;

static int setup(void **state)
{
	(void)state;
	refuse_log_init(&L);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	refuse_log_fini(&L);
	return 0;
}

/* refusals of key at now: how many were allowed; the missed counts summed into *missed */
static unsigned refuse(const char *key, uint64_t now, unsigned n, uint64_t *missed)
{
	struct refuse_log_missed m[REFUSE_LOG_MISSED_MAX];
	unsigned ok = 0;
	size_t k;

	for (unsigned i = 0; i < n; i++) {
		if (refuse_log_allow(&L, key, now, m, &k))
			ok++;
		for (size_t j = 0; j < k && missed; j++)
			*missed += m[j].count;
	}
	return ok;
}

static void test_noisy_client_hides_no_other(void **state)
{
	struct refuse_log_missed m[REFUSE_LOG_MISSED_MAX];
	uint64_t missed = 0;
	size_t k;

	(void)state;
	/* node a floods: 5 lines, 995 counted */
	assert_int_equal(refuse("node-a", 1000, 1000, &missed), REFUSE_LOG_PER_CLIENT);
	assert_int_equal(missed, 0);
	/* node b, same window: its refusals are logged all the same */
	assert_int_equal(refuse("node-b", 1001, 2, &missed), 2);
	assert_int_equal(refuse("10.0.0.7", 1002, 1, &missed), 1);
	/* node a's next window: its first refusal says the 995 */
	assert_true(refuse_log_allow(&L, "node-a", 1000 + REFUSE_LOG_WINDOW_S, m, &k));
	assert_int_equal(k, 1);
	assert_string_equal(m[0].key, "node-a");
	assert_int_equal(m[0].count, 1000 - REFUSE_LOG_PER_CLIENT);
}

static void test_overall_cap_and_bounded_table(void **state)
{
	char key[32];
	uint64_t missed = 0, allowed = 0;

	(void)state;
	/* 1,000 clients in one window: at most REFUSE_LOG_ALL lines */
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "10.1.%d.%d", i / 256, i % 256);
		allowed += refuse(key, 5000, 1, &missed);
	}
	assert_int_equal(allowed, REFUSE_LOG_ALL);
	/* the next window says what the cap held back, whoever comes first */
	missed = 0;
	assert_int_equal(refuse("node-z", 5000 + REFUSE_LOG_WINDOW_S, 1, &missed), 1);
	assert_int_equal(missed, 1000 - REFUSE_LOG_ALL);
	/* the table is fixed: nothing of it grew (all entries hold valid keys) */
	for (size_t i = 0; i < REFUSE_LOG_CLIENTS; i++)
		assert_true(strlen(L.clients[i].key) < REFUSE_LOG_KEY_MAX);
}

static void test_reused_entry_says_its_count(void **state)
{
	char key[32];
	uint64_t missed = 0;

	(void)state;
	/* a noisy node, then REFUSE_LOG_CLIENTS others in later windows push it out: its
	 * unlogged count is said when its entry is reused */
	assert_int_equal(refuse("noisy", 100, 8, &missed), REFUSE_LOG_PER_CLIENT);
	for (int i = 0; i < REFUSE_LOG_CLIENTS; i++) {
		snprintf(key, sizeof(key), "node-%d", i);
		refuse(key, 200 + (uint64_t)i * REFUSE_LOG_WINDOW_S, 1, &missed);
	}
	assert_int_equal(missed, 8 - REFUSE_LOG_PER_CLIENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_noisy_client_hides_no_other, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overall_cap_and_bounded_table, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reused_entry_says_its_count, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
