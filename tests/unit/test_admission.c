/* SPDX-License-Identifier: MIT */
/* Admission of a launch (agent/admission.c): users, privilege, node capacity and reserve. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/admission.h"
#include "agent/spec.h"
#include "agent/users.h"

#include <errno.h>
#include <string.h>

#define MIB (1ULL << 20)

static void test_slots(void **state)
{
	struct admission_node n = {.max_tasks = 2, .n_live = 1};
	char err[256] = "";

	assert_int_equal(admission_check_slots(&n, err, sizeof(err)), 0);
	n.n_live = 2;
	assert_int_equal(admission_check_slots(&n, err, sizeof(err)), -EBUSY);
	assert_string_equal(err, "refused: the node runs its maximum of 2 tasks (max_tasks)");
}

static void test_reserve(void **state)
{
	struct admission_node n = {.mem_total = 1024 * MIB,
				   .reserve_memory = 256 * MIB,
				   .mem_used = 512 * MIB,
				   .ncpus = 4,
				   .reserve_cpus = 1,
				   .cpus_used = 2};
	struct task_spec s;
	char err[512] = "";

	spec_init(&s);
	/* nothing asked: always fits */
	assert_int_equal(admission_check_reserve(&n, &s, err, sizeof(err)), 0);
	/* exactly what is left */
	s.memory_max = 256 * MIB;
	s.cpus = 1;
	assert_int_equal(admission_check_reserve(&n, &s, err, sizeof(err)), 0);
	/* one byte more */
	s.memory_max = 256 * MIB + 1;
	assert_int_equal(admission_check_reserve(&n, &s, err, sizeof(err)), -ENOSPC);
	assert_string_equal(err, "refused: memory request 256 MiB exceeds what is left on the "
				 "node (1024 MiB total, 256 MiB reserved, 512 MiB requested by "
				 "running tasks)");
	/* unknown memory total: not checked */
	n.mem_total = 0;
	assert_int_equal(admission_check_reserve(&n, &s, err, sizeof(err)), 0);
	s.cpus = 1.5;
	assert_int_equal(admission_check_reserve(&n, &s, err, sizeof(err)), -ENOSPC);
	assert_string_equal(err, "refused: cpus request 1.50 exceeds what is left on the node "
				 "(4 cpus, 1.00 reserved, 2.00 requested by running tasks)");
	spec_clear(&s);
}

static void test_may_act_as(void **state)
{
	struct admission_policy p = {.allowed_group = "batch", .allowed_users = "alice, bob"};
	char err[512] = "";

	/* anyone as itself, privileged or not, even for a user not listed */
	assert_int_equal(admission_may_act_as(&p, 1000, false, 1000, "carol", err, sizeof(err)), 0);
	/* not privileged: only itself */
	assert_int_equal(admission_may_act_as(&p, 1000, false, 1001, "bob", err, sizeof(err)),
			 -EPERM);
	assert_non_null(strstr(err, "uid 1000 may only run tasks as itself (not as \"bob\")"));
	assert_non_null(strstr(err, "group \"batch\""));
	/* privileged: the listed users */
	assert_int_equal(admission_may_act_as(&p, 1000, true, 1001, "bob", err, sizeof(err)), 0);
	assert_int_equal(admission_may_act_as(&p, 1000, true, 1002, "carol", err, sizeof(err)),
			 -EPERM);
	assert_string_equal(err, "permission denied: user \"carol\" is not in allowed_users");
	/* a member as root: only with allow_root_tasks; root as root always */
	assert_int_equal(admission_may_act_as(&p, 1000, true, 0, "root", err, sizeof(err)), -EPERM);
	assert_string_equal(err, "permission denied: tasks as root need allow_root_tasks=yes");
	p.allow_root_tasks = true;
	assert_int_equal(admission_may_act_as(&p, 1000, true, 0, "root", err, sizeof(err)), 0);
	p.allow_root_tasks = false;
	assert_int_equal(admission_may_act_as(&p, 0, true, 0, "root", err, sizeof(err)), 0);
	/* root as another user: allowed_users applies to it too; "*" or none: anyone */
	assert_int_equal(admission_may_act_as(&p, 0, true, 1002, "carol", err, sizeof(err)),
			 -EPERM);
	p.allowed_users = "*";
	assert_int_equal(admission_may_act_as(&p, 0, true, 1002, "carol", err, sizeof(err)), 0);
	p.allowed_users = NULL;
	assert_int_equal(admission_may_act_as(&p, 0, true, 1002, "carol", err, sizeof(err)), 0);
	/* a list entry is a whole name, not a prefix */
	p.allowed_users = "carolyn,bob";
	assert_int_equal(admission_may_act_as(&p, 0, true, 1002, "carol", err, sizeof(err)),
			 -EPERM);
}

static void test_privileged(void **state)
{
	struct admission_policy p = {.allowed_group = NULL};
	struct users *u = users_new(NULL);

	assert_non_null(u);
	assert_true(admission_is_privileged(&p, u, 0, 0));
	assert_false(admission_is_privileged(&p, u, 4000000, 4000000));
	p.allowed_group = "no-such-group-corral-test";
	assert_false(admission_is_privileged(&p, u, 4000000, 4000000));
	/* the peer's gid is the group's ("root" is gid 0 on every system here) */
	p.allowed_group = "root";
	assert_true(admission_is_privileged(&p, u, 4000000, 0));
	assert_false(admission_is_privileged(&p, u, 4000000, 4000000));
	users_free(u);
}

static void test_resolve_user(void **state)
{
	struct users *u = users_new(NULL);
	const struct user_info *pw = NULL;
	char err[256] = "";

	assert_non_null(u);
	assert_int_equal(admission_resolve_user(u, "root", 1000, &pw, err, sizeof(err)), 0);
	assert_int_equal(pw->uid, 0);
	pw = NULL;
	assert_int_equal(admission_resolve_user(u, "0", 1000, &pw, err, sizeof(err)), 0);
	assert_string_equal(pw->name, "root");
	pw = NULL;
	assert_int_equal(admission_resolve_user(u, NULL, 0, &pw, err, sizeof(err)), 0);
	assert_string_equal(pw->name, "root");
	pw = NULL;
	assert_int_equal(
	    admission_resolve_user(u, "no-such-user-corral-test", 0, &pw, err, sizeof(err)),
	    -ENOENT);
	assert_null(pw);
	assert_string_equal(err, "user: no such user \"no-such-user-corral-test\"");
	assert_int_equal(admission_resolve_user(u, NULL, 4000000, &pw, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "user: uid 4000000 has no passwd entry");
	users_free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slots),	 cmocka_unit_test(test_reserve),
	    cmocka_unit_test(test_may_act_as),	 cmocka_unit_test(test_privileged),
	    cmocka_unit_test(test_resolve_user),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
