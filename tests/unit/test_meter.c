/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of bpf/meter.c and bpf/taskstats.c that need neither root nor BPF: option
 * validation happens before anything is loaded. The real programs are exercised by
 * tests/integration/metering_accuracy.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bpf/print.h"
#include "bpf/meter.h"
#include "bpf/taskstats.h"

static void test_open_rejects_too_many_tasks(void **state)
{
	struct meter_opts o = {.max_tasks = (1u << 20) + 1};
	struct meter *m = (struct meter *)0x1;

	assert_int_equal(meter_open(&o, &m), -EINVAL);
	assert_ptr_equal(m, (struct meter *)0x1); /* ret_ untouched on failure */
}

static void test_open_rejects_fewer_pids_than_tasks(void **state)
{
	struct meter_opts o = {.max_tasks = 100, .max_pids = 10};
	struct meter *m = NULL;

	assert_int_equal(meter_open(&o, &m), -EINVAL);
	assert_null(m);
}

static void test_open_rejects_too_many_pids(void **state)
{
	struct meter_opts o = {.max_tasks = 16, .max_pids = (1u << 22) + 1};
	struct meter *m = NULL;

	assert_int_equal(meter_open(&o, &m), -EINVAL);
	assert_null(m);
}

static void test_taskstats_query_rejects_bad_pid(void **state)
{
	struct taskstats_client *c = NULL;
	struct taskstats_usage u;
	int r = taskstats_open(&c);

	if (r < 0)
		skip(); /* no genetlink TASKSTATS family here */
	assert_int_equal(taskstats_query_pid(c, 0, &u), -EINVAL);
	assert_int_equal(taskstats_query_tgid(c, -1, &u), -EINVAL);
	taskstats_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_rejects_too_many_tasks),
	    cmocka_unit_test(test_open_rejects_fewer_pids_than_tasks),
	    cmocka_unit_test(test_open_rejects_too_many_pids),
	    cmocka_unit_test(test_taskstats_query_rejects_bad_pid),
	};

	libbpf_set_print(bpf_print_env);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
