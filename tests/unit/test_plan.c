/* SPDX-License-Identifier: MIT */
/*
 * The launch plan's pure parts (agent/plan.c) without root: the task's environment (the
 * defaults, the meters' extra variables, the spec's variables over them, nothing dropped
 * however many) and where argv[0] is looked for (a path as given, else each PATH directory
 * of the task's environment, an empty one meaning "."). The truth is the inputs of the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/plan.h"
#include "agent/spec.h"
#include "agent/users.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct user_info alice = {
    .name = "alice", .dir = "/home/alice", .shell = "/bin/bash", .uid = 1001, .gid = 1001};

static size_t strv_len(char **v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

/* The value of key in v, NULL if absent; fails the test if key is there twice. */
static const char *strv_get(char **v, const char *key)
{
	const size_t kl = strlen(key);
	const char *found = NULL;

	for (size_t i = 0; v && v[i]; i++)
		if (strncmp(v[i], key, kl) == 0 && v[i][kl] == '=') {
			assert_null(found);
			found = v[i] + kl + 1;
		}
	return found;
}

static void test_env_defaults(void **state)
{
	struct task_spec s;
	char **env;

	(void)state;
	spec_init(&s);
	env = plan_env(&s, &alice, "t-1", NULL);
	assert_non_null(env);
	assert_string_equal(strv_get(env, "HOME"), "/home/alice");
	assert_string_equal(strv_get(env, "USER"), "alice");
	assert_string_equal(strv_get(env, "LOGNAME"), "alice");
	assert_string_equal(strv_get(env, "SHELL"), "/bin/bash");
	assert_string_equal(strv_get(env, "CORRAL_TASK_ID"), "t-1");
	assert_non_null(strv_get(env, "PATH"));
	assert_null(strv_get(env, "CORRAL_JOB"));
	assert_null(strv_get(env, "CORRAL_ACCOUNT"));
	plan_strv_free(env);
	spec_clear(&s);
}

static void test_env_spec_overrides(void **state)
{
	struct task_spec s;
	struct user_info noshell = alice;
	char *spec_env[] = {"PATH=/opt/x/bin", "FOO=bar", "HOME=/scratch", NULL};
	const char *extra[] = {"CUDA_VISIBLE_DEVICES=0", NULL};
	char **env;

	(void)state;
	spec_init(&s);
	s.env = spec_env;
	s.envc = 3;
	s.job = "j7";
	s.account = "physics";
	noshell.shell = "";
	env = plan_env(&s, &noshell, "t-2", extra);
	assert_non_null(env);
	assert_string_equal(strv_get(env, "PATH"), "/opt/x/bin");
	assert_string_equal(strv_get(env, "HOME"), "/scratch");
	assert_string_equal(strv_get(env, "FOO"), "bar");
	assert_string_equal(strv_get(env, "SHELL"), "/bin/sh");
	assert_string_equal(strv_get(env, "CORRAL_JOB"), "j7");
	assert_string_equal(strv_get(env, "CORRAL_ACCOUNT"), "physics");
	assert_string_equal(strv_get(env, "CUDA_VISIBLE_DEVICES"), "0");
	/* 9 defaults (job and account set), 1 extra, FOO new; PATH and HOME replaced */
	assert_int_equal(strv_len(env), 11);
	s.env = NULL;
	s.envc = 0;
	s.job = s.account = NULL;
	plan_strv_free(env);
	spec_clear(&s);
}

/* However many extra and spec variables, none is dropped. */
static void test_env_many(void **state)
{
	struct task_spec s;
	enum { NX = 40, NS = 300 };
	char *extra[NX + 1] = {0}, *spec_env[NS + 1] = {0};
	char **env;

	(void)state;
	spec_init(&s);
	for (int i = 0; i < NX; i++)
		assert_true(asprintf(&extra[i], "X%d=%d", i, i) > 0);
	for (int i = 0; i < NS; i++)
		assert_true(asprintf(&spec_env[i], "S%d=%d", i, i) > 0);
	s.env = spec_env;
	s.envc = NS;
	env = plan_env(&s, &alice, "t-3", (const char *const *)extra);
	assert_non_null(env);
	assert_int_equal(strv_len(env), 7 + NX + NS);
	assert_string_equal(strv_get(env, "X39"), "39");
	assert_string_equal(strv_get(env, "S299"), "299");
	plan_strv_free(env);
	for (int i = 0; i < NX; i++)
		free(extra[i]);
	for (int i = 0; i < NS; i++)
		free(spec_env[i]);
	s.env = NULL;
	s.envc = 0;
	spec_clear(&s);
}

static void test_exec_paths(void **state)
{
	char *env[] = {"HOME=/h", "PATH=/a:/b/c::/d", NULL};
	char **v;

	(void)state;
	v = plan_exec_paths("./run.sh", env);
	assert_non_null(v);
	assert_int_equal(strv_len(v), 1);
	assert_string_equal(v[0], "./run.sh");
	plan_strv_free(v);

	v = plan_exec_paths("job", env);
	assert_non_null(v);
	/* strtok_r skips the empty component between "::" */
	assert_int_equal(strv_len(v), 3);
	assert_string_equal(v[0], "/a/job");
	assert_string_equal(v[1], "/b/c/job");
	assert_string_equal(v[2], "/d/job");
	plan_strv_free(v);

	v = plan_exec_paths("job", NULL); /* no PATH: the default one */
	assert_non_null(v);
	assert_true(strv_len(v) >= 3);
	assert_string_equal(v[0], "/usr/local/bin/job");
	plan_strv_free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_env_defaults),
	    cmocka_unit_test(test_env_spec_overrides),
	    cmocka_unit_test(test_env_many),
	    cmocka_unit_test(test_exec_paths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
