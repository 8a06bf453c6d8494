/* SPDX-License-Identifier: MIT */
/* The agent's cache of compiled seccomp filters (agent/profiles.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/profiles.h"
#include "isolation/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DENY_GETPID                                                                                \
	"{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"getpid\"],"             \
	"\"action\":\"SCMP_ACT_ERRNO\"}]}"

static int get(struct profile_cache *c, const char *dir, const char *name, const char *content,
	       unsigned flags, const struct sbx_filter **f)
{
	char err[512], notice[512];

	return profile_cache_get(c, dir, name, content, flags, f, err, sizeof(err), notice,
				 sizeof(notice));
}

static void test_builtin_and_content_cached(void **state)
{
	struct profile_cache *c;
	const struct sbx_filter *a = NULL, *b = NULL, *n = NULL;

	assert_int_equal(profile_cache_new(&c), 0);
	assert_int_equal(get(c, "/nonexistent", "default", NULL, 0, &a), 0);
	assert_non_null(a);
	assert_int_equal(get(c, "/nonexistent", "default", NULL, 0, &b), 0);
	assert_ptr_equal(a, b);
	/* other flags: another entry */
	assert_int_equal(get(c, "/nonexistent", "default", NULL, SBX_COMPILE_NOTIFY, &n), 0);
	assert_ptr_not_equal(a, n);
	/* content: keyed by its text, whatever the label */
	assert_int_equal(get(c, "/nonexistent", "x", DENY_GETPID, 0, &a), 0);
	assert_int_equal(get(c, "/nonexistent", "y", DENY_GETPID, 0, &b), 0);
	assert_ptr_equal(a, b);
	profile_cache_free(c);
	profile_cache_free(NULL);
}

static void test_file_changed_recompiled(void **state)
{
	char dir[] = "/tmp/test_profiles.XXXXXX", path[128], err[512], notice[512];
	const struct sbx_filter *a = NULL, *b = NULL;
	struct profile_cache *c;
	struct timespec ts[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/p.json", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(DENY_GETPID, f);
	fclose(f);
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(profile_cache_new(&c), 0);
	assert_int_equal(get(c, dir, "p", NULL, 0, &a), 0);
	assert_int_equal(get(c, dir, "p", NULL, 0, &b), 0);
	assert_ptr_equal(a, b);
	/* a new mtime: compiled again, into the same entry */
	ts[0].tv_sec = ts[1].tv_sec = 2000;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(get(c, dir, "p", NULL, 0, &b), 0);
	assert_non_null(b);
	/* a broken profile: the error says why, no filter */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{", f);
	fclose(f);
	ts[0].tv_sec = ts[1].tv_sec = 3000;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_true(profile_cache_get(c, dir, "p", NULL, 0, &b, err, sizeof(err), notice,
				      sizeof(notice)) < 0);
	assert_true(err[0] != 0);
	/* a path that is not a regular file */
	assert_int_equal(
	    profile_cache_get(c, dir, dir, NULL, 0, &b, err, sizeof(err), notice, sizeof(notice)),
	    -EBADFD);
	assert_string_equal(err, "not a regular file");
	profile_cache_free(c);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_builtin_and_content_cached),
	    cmocka_unit_test(test_file_changed_recompiled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
