/* SPDX-License-Identifier: MIT */
/* common/ini_file.c and agent/config.c: file:line on every error, duplicate keys refused, the
 * files a configuration names checked before the agent starts. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/config.h"
#include "common/ini_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/corral-test-config-XXXXXX";

static const char *write_tmp(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Records every key with the line it came from (the test's own count of lines). */
struct seen {
	char keys[16][64];
	size_t n;
};

static int record_set(void *user, const char *section, const char *key, const char *value,
		      char *err, size_t errlen)
{
	struct seen *s = user;

	if (strcmp(value, "bad") == 0) {
		snprintf(err, errlen, "[%s] %s: bad value", section, key);
		return -EINVAL;
	}
	if (s->n < 16)
		snprintf(s->keys[s->n++], 64, "%s.%s=%s", section, key, value);
	return 0;
}

static void test_ini_lines(void **state)
{
	struct seen s = {0};
	char err[512];
	char long_line[600];
	char *text;
	int r;

	(void)state;
	/* an error on line 5, after a comment and a blank line */
	r = ini_file_load_string("x.conf", "[a]\nk = 1\n\n; note\nj = bad\n", record_set, &s, NULL,
				 err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_string_equal(err, "x.conf:5: [a] j: bad value");
	assert_int_equal(s.n, 1);

	/* a line longer than inih's buffer still counts as one line */
	memset(long_line, 'x', sizeof(long_line) - 1);
	long_line[sizeof(long_line) - 1] = 0;
	assert_true(asprintf(&text, "[a]\n# %s\nk = 1\nj = bad\n", long_line) > 0);
	r = ini_file_load_string("y.conf", text, record_set, &s, NULL, err, sizeof(err));
	free(text);
	assert_int_equal(r, -EINVAL);
	assert_string_equal(err, "y.conf:4: [a] j: bad value");

	/* a syntax error names its line */
	r = ini_file_load_string("z.conf", "[a]\nk = 1\nnot a key\n", record_set, &s, NULL, err,
				 sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "z.conf:3: syntax error"));
}

static void test_ini_duplicates(void **state)
{
	struct seen s = {0};
	char err[512];
	int r;

	(void)state;
	/* the same key in the same section, the section opened twice: refused, both lines */
	r = ini_file_load_string("d.conf", "[a]\nk = 1\n[b]\nk = 2\n\n[a]\nk = 3\n", record_set, &s,
				 NULL, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_string_equal(err, "d.conf:7: [a] k: duplicate key (first set on line 2)");
	/* the same key name in two sections is two keys */
	memset(&s, 0, sizeof(s));
	r = ini_file_load_string("e.conf", "[a]\nk = 1\n[b]\nk = 2\n", record_set, &s, NULL, err,
				 sizeof(err));
	assert_int_equal(r, 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.keys[1], "b.k=2");
}

static void test_agent_config_errors(void **state)
{
	struct agent_config c;
	const char *p;
	char err[1024];
	int r;

	(void)state;
	config_init_defaults(&c);
	p = write_tmp("a.conf", "[agent]\nnode = n1\n\n[metrics]\ntasks = off\n[agent]\n"
				"max_tasks = 0\n");
	r = config_load(&c, p, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "a.conf:7: [agent] max_tasks: expected an integer"));

	p = write_tmp("b.conf", "[agent]\nmax_tasks = 5\n[collector]\nurl = http://h\n[agent]\n"
				"max_tasks = 6\n");
	r = config_load(&c, p, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "b.conf:6: [agent] max_tasks: duplicate key (first set on "
				    "line 2)"));

	/* a list key may repeat: each url line adds one */
	p = write_tmp("u.conf", "[collector]\nurl = http://a:1\nurl = http://b:2\n");
	r = config_load(&c, p, err, sizeof(err));
	assert_int_equal(r, 0);
	assert_non_null(strstr(c.collector_url, "http://a:1"));
	assert_non_null(strstr(c.collector_url, "http://b:2"));

	/* unchanged_list_max: a size, 256 bytes to 192 KiB (a record is at most 256 KiB) */
	assert_int_equal(c.unchanged_list_max, 192 * 1024);
	p = write_tmp("l.conf", "[agent]\nunchanged_list_max = 193K\n");
	r = config_load(&c, p, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "l.conf:2: [agent] unchanged_list_max: expected a size from "
				    "256 to 192K"));
	p = write_tmp("l.conf", "[agent]\nunchanged_list_max = 255\n");
	assert_int_equal(config_load(&c, p, err, sizeof(err)), -EINVAL);
	p = write_tmp("l.conf", "[agent]\nunchanged_list_max = 1K\n");
	assert_int_equal(config_load(&c, p, err, sizeof(err)), 0);
	assert_int_equal(c.unchanged_list_max, 1024);

	p = write_tmp("c.conf", "[agent]\nbogus = 1\n");
	r = config_load(&c, p, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "c.conf:2: [agent] bogus: unknown key"));

	r = config_load(&c, "/nonexistent/corrald.conf", err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	config_free(&c);
}

static void test_agent_config_files(void **state)
{
	struct agent_config c;
	char err[1024], path[256], want[1024];
	int r;

	(void)state;
	config_init_defaults(&c);
	free(c.state_dir);
	c.state_dir = strdup(dir);
	free(c.seccomp_dir);
	c.seccomp_dir = strdup(dir);
	assert_int_equal(config_check_files(&c, err, sizeof(err)), 0);

	c.token_file = strdup("/nonexistent/token");
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_string_equal(err, "[collector] token_file /nonexistent/token: No such file or "
				 "directory");
	free(c.token_file);
	c.token_file = strdup(write_tmp("token", " \n"));
	assert_int_equal(chmod(c.token_file, 0600), 0);
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, ": empty"));
	free(c.token_file);
	c.token_file = strdup(write_tmp("token", "secret\n"));
	/* a secret others may read or write is refused, naming its mode (as ssh takes a key) */
	assert_int_equal(chmod(c.token_file, 0640), 0);
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -EPERM);
	snprintf(want, sizeof(want),
		 "[collector] token_file %s: mode 0640 lets group or others at a secret: refused "
		 "(chmod 600 it)",
		 c.token_file);
	assert_string_equal(err, want);
	assert_int_equal(chmod(c.token_file, 0602), 0);
	assert_int_equal(config_check_files(&c, err, sizeof(err)), -EPERM);
	assert_int_equal(chmod(c.token_file, 0600), 0);
	assert_int_equal(config_check_files(&c, err, sizeof(err)), 0);

	/* the node's TLS client key is a secret too */
	c.client_key = strdup(write_tmp("node.key", "key\n"));
	assert_int_equal(chmod(c.client_key, 0644), 0);
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -EPERM);
	snprintf(want, sizeof(want),
		 "[collector] client_key %s: mode 0644 lets group or others at a secret: refused "
		 "(chmod 600 it)",
		 c.client_key);
	assert_string_equal(err, want);
	assert_int_equal(chmod(c.client_key, 0600), 0);
	assert_int_equal(config_check_files(&c, err, sizeof(err)), 0);
	free(c.client_key);
	c.client_key = NULL;

	c.ca_file = strdup("/nonexistent/ca.pem");
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "[collector] ca_file /nonexistent/ca.pem"));
	free(c.ca_file);
	c.ca_file = NULL;

	/* a state directory that is a file */
	free(c.state_dir);
	c.state_dir = strdup(write_tmp("afile", "x"));
	r = config_check_files(&c, err, sizeof(err));
	assert_int_equal(r, -ENOTDIR);
	assert_non_null(strstr(err, "[agent] state_dir"));
	free(c.state_dir);
	c.state_dir = strdup(dir);

	/* a default profile that is not there */
	free(c.seccomp_default);
	c.seccomp_default = strdup("missing");
	r = config_check_files(&c, err, sizeof(err));
	assert_true(r < 0);
	assert_non_null(strstr(err, "[agent] seccomp_default"));
	snprintf(path, sizeof(path), "%s/missing.json", dir);
	assert_non_null(strstr(err, path));
	config_free(&c);
}

/* The trace of loading a file of text (name in the test's directory) and then a flag setting
 * [agent] node, as corrald's start and reload take them. */
static char *trace_of(const char *name, const char *text)
{
	struct agent_config c;
	char err[512];
	char *t;

	config_init_defaults(&c);
	assert_int_equal(config_trace_begin(), 0);
	assert_int_equal(config_load(&c, write_tmp(name, text), err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "agent", "node", "flag", err, sizeof(err)), 0);
	t = config_trace_end();
	config_free(&c);
	return t;
}

/* config_trace_*: what a reload changes, by the last value of each key (a list: all of them),
 * split between the keys applied live and the others. */
static void test_reload_changes(void **state)
{
	static const char *const live[] = {"agent.max_tasks", "metrics.tasks", NULL};
	char lv[256], rs[256], *t1, *t2;

	(void)state;
	t1 = trace_of("r1.conf", "[agent]\nmax_tasks = 5\nnode = n1\n[collector]\nurl = http://a\n"
				 "url = http://b\n[metrics]\ntasks = off\n");
	assert_non_null(t1);
	assert_non_null(strstr(t1, "[agent] max_tasks = 5\n"));
	assert_non_null(strstr(t1, "[agent] node = flag\n"));

	/* node: the file's value changed, the flag's (last) did not; url: a list, its order
	 * changed; max_tasks live, tasks live and unchanged, ended_keep new */
	t2 = trace_of("r2.conf", "[agent]\nmax_tasks = 6\nnode = n2\nended_keep = 9\n[collector]\n"
				 "url = http://b\nurl = http://a\n[metrics]\ntasks = off\n");
	config_trace_diff(t1, t2, live, lv, sizeof(lv), rs, sizeof(rs));
	assert_string_equal(lv, "[agent] max_tasks");
	assert_string_equal(rs, "[collector] url, [agent] ended_keep");
	config_trace_diff(t1, t1, live, lv, sizeof(lv), rs, sizeof(rs));
	assert_string_equal(lv, "");
	assert_string_equal(rs, "");
	/* a key gone from the file is a change too */
	config_trace_diff(t2, t1, live, lv, sizeof(lv), rs, sizeof(rs));
	assert_string_equal(rs, "[agent] ended_keep, [collector] url");
	free(t1);
	free(t2);
	assert_null(config_trace_end());
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ini_lines),		cmocka_unit_test(test_ini_duplicates),
	    cmocka_unit_test(test_agent_config_errors), cmocka_unit_test(test_agent_config_files),
	    cmocka_unit_test(test_reload_changes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
