/* SPDX-License-Identifier: MIT */
/* Spare-inode pool: reuse, recycling on replace and remove, cap, place/fill, reopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fpool.h"
#include "common/util.h"

struct tctx {
	char dir[64], pool[96];
};

static int setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	snprintf(t->dir, sizeof(t->dir), "/tmp/corral-fpool-XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	snprintf(t->pool, sizeof(t->pool), "%s/spare", t->dir);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", t->dir);
	assert_int_equal(system(cmd), 0);
	free(t);
	return 0;
}

static char *path_in(const struct tctx *t, const char *name)
{
	static char buf[4][160];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", t->dir, name);
	return buf[i];
}

static char *slurp(const char *path)
{
	char *s = NULL;

	if (read_file(path, 1 << 20, &s, NULL) < 0)
		return NULL;
	return s;
}

static ino_t ino_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_ino : 0;
}

static size_t count_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void assert_content(const char *path, const char *want)
{
	char *s = slurp(path);

	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
}

static void test_create_remove_reuse(void **state)
{
	struct tctx *t = *state;
	struct fpool p;
	const char *long_text = "a much longer content than the next one, left in the spare";
	ino_t ino;

	assert_int_equal(fpool_open(&p, t->pool, 8), 0);
	assert_int_equal(p.n, 0);
	/* empty pool: a new file */
	assert_int_equal(
	    fpool_replace(&p, path_in(t, "a.json"), long_text, strlen(long_text), 0600), 0);
	assert_int_equal(p.created, 1);
	assert_content(path_in(t, "a.json"), long_text);
	ino = ino_of(path_in(t, "a.json"));
	/* remove: the inode is a spare now */
	assert_int_equal(fpool_remove(&p, path_in(t, "a.json")), 0);
	assert_int_equal(access(path_in(t, "a.json"), F_OK), -1);
	assert_int_equal(p.n, 1);
	assert_int_equal(count_dir(t->pool), 1);
	/* the next file is made from it: same inode, no stale bytes after the new content */
	assert_int_equal(fpool_replace(&p, path_in(t, "b.json"), "short", 5, 0640), 0);
	assert_int_equal(p.reused, 1);
	assert_int_equal(p.created, 1);
	assert_int_equal(ino_of(path_in(t, "b.json")), ino);
	assert_content(path_in(t, "b.json"), "short");
	{
		struct stat st;

		assert_int_equal(stat(path_in(t, "b.json"), &st), 0);
		assert_int_equal(st.st_mode & 07777, 0640);
	}
	assert_int_equal(count_dir(t->pool), 0);
	/* removing what is not there */
	assert_int_equal(fpool_remove(&p, path_in(t, "nope")), -ENOENT);
	fpool_close(&p);
}

static void test_replace_recycles_old(void **state)
{
	struct tctx *t = *state;
	struct fpool p;
	ino_t first, second;

	assert_int_equal(fpool_open(&p, t->pool, 8), 0);
	assert_int_equal(fpool_replace(&p, path_in(t, "s.json"), "one", 3, 0600), 0);
	first = ino_of(path_in(t, "s.json"));
	assert_int_equal(fpool_replace(&p, path_in(t, "s.json"), "two", 3, 0600), 0);
	second = ino_of(path_in(t, "s.json"));
	assert_true(first != second);
	assert_content(path_in(t, "s.json"), "two");
	/* the replaced inode went to the pool (exchange), no temporary left */
	assert_int_equal(p.n, 1);
	assert_int_equal(count_dir(t->dir), 2); /* s.json and spare/ */
	/* and the third write takes it back: the two inodes alternate, none is created */
	assert_int_equal(fpool_replace(&p, path_in(t, "s.json"), "three", 5, 0600), 0);
	assert_int_equal(ino_of(path_in(t, "s.json")), first);
	assert_int_equal(p.created, 2);
	assert_content(path_in(t, "s.json"), "three");
	fpool_close(&p);
}

static void test_cap_and_reopen(void **state)
{
	struct tctx *t = *state;
	struct fpool p;
	char name[32];

	assert_int_equal(fpool_open(&p, t->pool, 3), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		assert_int_equal(fpool_replace(&p, path_in(t, name), "x", 1, 0600), 0);
	}
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		assert_int_equal(fpool_remove(&p, path_in(t, name)), 0);
	}
	assert_int_equal(p.n, 3);
	assert_int_equal(p.recycled, 3);
	assert_int_equal(p.unlinked, 2);
	assert_int_equal(count_dir(t->pool), 3);
	fpool_close(&p);

	/* reopen: the spares are found again, new names do not collide with them */
	assert_int_equal(fpool_open(&p, t->pool, 3), 0);
	assert_int_equal(p.n, 3);
	assert_true(p.seq >= 3);
	assert_int_equal(fpool_replace(&p, path_in(t, "g"), "y", 1, 0600), 0);
	assert_int_equal(p.reused, 1);
	assert_int_equal(fpool_remove(&p, path_in(t, "g")), 0);
	assert_int_equal(count_dir(t->pool), 3);
	fpool_close(&p);

	/* reopen with a smaller cap: the extra spares are unlinked */
	assert_int_equal(fpool_open(&p, t->pool, 1), 0);
	assert_int_equal(p.n, 1);
	assert_int_equal(count_dir(t->pool), 1);
	fpool_close(&p);
}

static void test_stale_spare_skipped(void **state)
{
	struct tctx *t = *state;
	struct fpool p;
	char spare[200];

	assert_int_equal(fpool_open(&p, t->pool, 4), 0);
	assert_int_equal(fpool_replace(&p, path_in(t, "a"), "1", 1, 0600), 0);
	assert_int_equal(fpool_replace(&p, path_in(t, "b"), "2", 1, 0600), 0);
	assert_int_equal(fpool_remove(&p, path_in(t, "a")), 0);
	assert_int_equal(fpool_remove(&p, path_in(t, "b")), 0);
	/* someone else took the newest spare (a shim racing for it): the next one is used */
	snprintf(spare, sizeof(spare), "%s/%s", t->pool, p.names[p.n - 1]);
	assert_int_equal(unlink(spare), 0);
	assert_int_equal(fpool_replace(&p, path_in(t, "c"), "3", 1, 0600), 0);
	assert_int_equal(p.reused, 1);
	assert_int_equal(p.n, 0);
	assert_content(path_in(t, "c"), "3");
	fpool_close(&p);
}

static void test_place_and_fill(void **state)
{
	struct tctx *t = *state;
	struct fpool p;
	ino_t ino;

	assert_int_equal(fpool_open(&p, t->pool, 4), 0);
	/* nothing to place */
	assert_int_equal(fpool_place(&p, path_in(t, "x.exit.tmp")), -ENOENT);
	assert_int_equal(fpool_replace(&p, path_in(t, "old"), "0123456789", 10, 0600), 0);
	ino = ino_of(path_in(t, "old"));
	assert_int_equal(fpool_remove(&p, path_in(t, "old")), 0);
	assert_int_equal(fpool_place(&p, path_in(t, "x.exit.tmp")), 0);
	assert_int_equal(ino_of(path_in(t, "x.exit.tmp")), ino);
	/* another process fills it in place and renames it */
	assert_int_equal(
	    fpool_fill(path_in(t, "x.exit.tmp"), path_in(t, "x.exit"), "st=0\n", 5, 0600), 0);
	assert_int_equal(ino_of(path_in(t, "x.exit")), ino);
	assert_int_equal(access(path_in(t, "x.exit.tmp"), F_OK), -1);
	assert_content(path_in(t, "x.exit"), "st=0\n");
	/* without a placed spare, fill creates */
	assert_int_equal(
	    fpool_fill(path_in(t, "y.exit.tmp"), path_in(t, "y.exit"), "st=9\n", 5, 0600), 0);
	assert_content(path_in(t, "y.exit"), "st=9\n");
	fpool_close(&p);
}

static void test_no_pool(void **state)
{
	struct tctx *t = *state;
	struct fpool p;

	assert_int_equal(fpool_open(&p, t->pool, 0), 0);
	assert_int_equal(p.dirfd, -1);
	assert_int_equal(access(t->pool, F_OK), -1); /* not even made */
	assert_int_equal(fpool_replace(&p, path_in(t, "a"), "1", 1, 0600), 0);
	assert_int_equal(fpool_replace(&p, path_in(t, "a"), "22", 2, 0600), 0);
	assert_content(path_in(t, "a"), "22");
	assert_int_equal(fpool_remove(&p, path_in(t, "a")), 0);
	assert_int_equal(access(path_in(t, "a"), F_OK), -1);
	assert_int_equal(p.unlinked, 1);
	assert_int_equal(count_dir(t->dir), 0);
	/* a NULL pool works the same */
	assert_int_equal(fpool_replace(NULL, path_in(t, "b"), "1", 1, 0600), 0);
	assert_int_equal(fpool_remove(NULL, path_in(t, "b")), 0);
	fpool_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_create_remove_reuse, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replace_recycles_old, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cap_and_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stale_spare_skipped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_place_and_fill, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_pool, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
