/* SPDX-License-Identifier: MIT */
/* The passwd/group cache of the launch path (agent/users.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/users.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fixture {
	char dir[64], file[96];
	struct users *c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *watch[2];
	FILE *fp;

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_users.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->file, sizeof(f->file), "%s/passwd", f->dir);
	fp = fopen(f->file, "w");
	if (!fp)
		return -1;
	fputs("one\n", fp);
	fclose(fp);
	watch[0] = f->file;
	watch[1] = NULL;
	f->c = users_new(watch);
	*state = f;
	return f->c ? 0 : -1;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	users_free(f->c);
	unlink(f->file);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void test_root_cached(void **state)
{
	struct fixture *f = *state;
	const struct user_info *a, *b, *n;
	struct passwd *pw = getpwuid(0);

	assert_non_null(pw);
	users_refresh(f->c, 1);
	a = users_by_uid(f->c, 0);
	assert_non_null(a);
	assert_string_equal(a->name, pw->pw_name);
	assert_string_equal(a->dir, pw->pw_dir);
	assert_int_equal(a->uid, 0);
	assert_int_equal(a->gid, pw->pw_gid);
	assert_true(a->n_groups >= 1);
	assert_int_equal(a->groups[0], pw->pw_gid);
	/* served from the cache: the same entry, by uid and by name */
	b = users_by_uid(f->c, 0);
	n = users_by_name(f->c, pw->pw_name);
	assert_ptr_equal(a, b);
	assert_ptr_equal(a, n);
	users_refresh(f->c, 2);
	assert_ptr_equal(users_by_uid(f->c, 0), a);
	assert_int_equal(users_generation(f->c), 0);
}

static void test_dropped_on_change_and_ttl(void **state)
{
	struct fixture *f = *state;
	const struct user_info *a;
	FILE *fp;

	users_refresh(f->c, 1);
	a = users_by_uid(f->c, 0);
	assert_non_null(a);
	/* a watched file changes (size here): the next refresh drops every entry */
	fp = fopen(f->file, "a");
	assert_non_null(fp);
	fputs("two\n", fp);
	fclose(fp);
	users_refresh(f->c, 2);
	assert_int_equal(users_generation(f->c), 1);
	a = users_by_uid(f->c, 0);
	assert_non_null(a);
	assert_int_equal(a->uid, 0);
	/* nothing changed, but the entries are older than the TTL */
	users_refresh(f->c, 3);
	assert_int_equal(users_generation(f->c), 1);
	users_refresh(f->c, 2 + USERS_TTL_NS);
	assert_int_equal(users_generation(f->c), 2);
	/* an empty cache is not dropped again */
	users_refresh(f->c, 3 + 2 * USERS_TTL_NS);
	assert_int_equal(users_generation(f->c), 2);
}

static void test_unknown(void **state)
{
	struct fixture *f = *state;

	users_refresh(f->c, 1);
	errno = 0;
	assert_null(users_by_uid(f->c, 4000000001u));
	assert_int_equal(errno, ENOENT);
	errno = 0;
	assert_null(users_by_name(f->c, "no-such-user-corral-test"));
	assert_int_equal(errno, ENOENT);
}

/* More entries than the cache keeps: all served, the surplus dropped at the next refresh. */
static void test_many(void **state)
{
	struct fixture *f = *state;
	const struct user_info *first;
	uid_t uids[80];
	size_t n = 0;
	struct passwd *pw;

	setpwent();
	while (n < 80 && (pw = getpwent()))
		uids[n++] = pw->pw_uid;
	endpwent();
	users_refresh(f->c, 1);
	first = users_by_uid(f->c, uids[0]);
	assert_non_null(first);
	for (size_t i = 0; i < n; i++) {
		const struct user_info *u = users_by_uid(f->c, uids[i]);

		assert_non_null(u);
		assert_int_equal(u->uid, uids[i]);
	}
	/* still valid: nothing is dropped between refreshes */
	assert_int_equal(first->uid, uids[0]);
	users_refresh(f->c, 2);
	assert_int_equal(users_generation(f->c), n > 64 ? 1 : 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_root_cached, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dropped_on_change_and_ttl, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unknown, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_many, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
