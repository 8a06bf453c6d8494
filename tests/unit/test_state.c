/* SPDX-License-Identifier: MIT */
/* Persistence of a live task (agent/state.c): its state file's JSON, written and read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/agent.h"
#include "agent/audit_glue.h"
#include "agent/state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void task_init(struct task *t)
{
	memset(t, 0, sizeof(*t));
	t->shim_pidfd = t->status_fd = -1;
	spec_init(&t->spec);
}

static void task_clear(struct task *t)
{
	spec_clear(&t->spec);
	free(t->user);
	free(t->cg_name);
	free(t->exit_message);
}

static void test_round_trip(void **state)
{
	static char *argv[] = {"/bin/sleep", "10", NULL};
	struct agent a = {0};
	struct task t, back;
	char err[256];
	json_t *j;

	snprintf(a.boot_id, sizeof(a.boot_id), "0123456789abcdef0123456789abcdef0123");
	task_init(&t);
	snprintf(t.id, sizeof(t.id), "t-6b14f6c3-661f0a219d7ac");
	assert_int_equal(spec_set_argv(&t.spec, argv, 2), 0);
	t.spec.memory_max = 64ULL << 20;
	t.spec.cpus = 1.5;
	t.spec.user = strdup("nobody");
	t.key = 0x661f0a219d7acULL;
	t.user = strdup("nobody");
	t.uid = 65534;
	t.gid = 65534;
	t.submitter_uid = 1000;
	t.cg_name = strdup(t.id);
	t.shim_pid = 4242;
	t.shim_start = 123456;
	t.pid = 4243;
	t.pid_start = 123457;
	t.start_ns = 1765000000000000000ULL;
	t.mem_byte_seconds_cg = 12345.5;
	t.limit_reason = ACCT_EXIT_TIME_LIMIT;
	t.limit_value = 64ULL << 20;
	t.limit_observed = 65ULL << 20;
	t.exit_message = strdup("out of memory");
	t.syscall_audit = true;
	t.syscalls_seq = 9; /* not yet known to be spooled: the file keeps the saved one */
	t.syscalls_seq_saved = 7;
	t.syscalls_max = 100;

	j = state_task_encode(&a, &t);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "boot_id")), a.boot_id);

	task_init(&back);
	assert_int_equal(state_task_decode(j, &back, err, sizeof(err)), 0);
	assert_string_equal(back.id, t.id);
	assert_int_equal(back.spec.argc, 2);
	assert_string_equal(back.spec.argv[1], "10");
	assert_int_equal(back.spec.memory_max, t.spec.memory_max);
	assert_true(back.spec.cpus == 1.5);
	assert_string_equal(back.spec.user, "nobody");
	assert_int_equal(back.key, t.key);
	assert_string_equal(back.user, "nobody");
	assert_int_equal(back.uid, 65534);
	assert_int_equal(back.gid, 65534);
	assert_int_equal(back.submitter_uid, 1000);
	assert_string_equal(back.cg_name, t.id);
	assert_int_equal(back.shim_pid, 4242);
	assert_int_equal(back.shim_start, 123456);
	assert_int_equal(back.pid, 4243);
	assert_int_equal(back.pid_start, 123457);
	assert_int_equal(back.start_ns, t.start_ns);
	assert_true(back.mem_byte_seconds_cg == 12345.5);
	assert_int_equal(back.limit_reason, ACCT_EXIT_TIME_LIMIT);
	assert_int_equal(back.limit_value, t.limit_value);
	assert_int_equal(back.limit_observed, t.limit_observed);
	assert_string_equal(back.exit_message, "out of memory");
	assert_true(back.syscall_audit);
	assert_int_equal(back.syscalls_seq, 7);
	assert_int_equal(back.syscalls_max, 100);
	json_decref(j);
	task_clear(&back);
	task_clear(&t);
}

static void test_bad_input(void **state)
{
	struct task t;
	char err[256];
	json_t *j;

	/* an id that is not a task id (a path component, say) */
	j = json_pack("{s:s}", "id", "../../etc");
	task_init(&t);
	assert_int_equal(state_task_decode(j, &t, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "");
	json_decref(j);
	task_clear(&t);
	/* a bad spec names its field */
	j = json_pack("{s:s,s:{s:s}}", "id", "t-1-2", "spec", "command", "sh");
	task_init(&t);
	assert_int_equal(state_task_decode(j, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "command"));
	json_decref(j);
	task_clear(&t);
	/* an unknown limit reason reads as none; a file older than syscalls_max gets the default */
	j = json_pack("{s:s,s:{s:[s]},s:s}", "id", "t-1-2", "spec", "command", "true",
		      "limit_reason", "no-such-reason");
	task_init(&t);
	assert_int_equal(state_task_decode(j, &t, err, sizeof(err)), 0);
	assert_int_equal(t.limit_reason, ACCT_EXIT_NONE);
	assert_int_equal(t.syscalls_max, AUDIT_SYSCALLS_MAX);
	assert_string_equal(t.cg_name, "t-1-2");
	json_decref(j);
	task_clear(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
