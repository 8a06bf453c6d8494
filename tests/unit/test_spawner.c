/* SPDX-License-Identifier: MIT */
/* The launch spawner's message (isolation/spawner.c): round trip and malformed input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "isolation/launch.h"
#include "isolation/seccomp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static char *argv_[] = {"python3", "-c", "print(1)", NULL};
static char *env_[] = {"PATH=/usr/bin:/bin", "HOME=/home/u", "EMPTY=", NULL};
static char *paths_[] = {"/usr/bin/python3", "/bin/python3", NULL};
static const gid_t groups_[] = {1000, 27, 100};

struct fx {
	struct sbx_filter *filter;
	struct launch_plan plan;
	struct launch_shim_fds f;
	char *buf;
	size_t len, nfds;
	int fds[LAUNCH_WIRE_FDS_MAX];
};

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	char err[256];
	const char *json = sbx_builtin_profile("default");

	if (!x || !json ||
	    sbx_profile_compile_flags(json, strlen(json), SBX_COMPILE_NOTIFY, &x->filter, err,
				      sizeof(err)) < 0)
		return -1;
	x->plan = (struct launch_plan){.argv = argv_,
				       .env = env_,
				       .exec_paths = paths_,
				       .workdir = "/home/u/work",
				       .uid = 1000,
				       .gid = 1000,
				       .groups = groups_,
				       .n_groups = 3,
				       .switch_user = true,
				       .stdout_path = "/tmp/out",
				       .stderr_path = NULL,
				       .stdin_path = "/tmp/in",
				       .stdio_fds = 1u << 1 | 1u << 2,
				       .stdio_fd = {-1, 43, 44},
				       .stdio_tty = true,
				       .clone_cgroup_fd = 40,
				       .n_join = 2,
				       .join_fd = {41, 42},
				       .join_unified = {false, true},
				       .clone_joins_all = false,
				       .filter = x->filter,
				       .n_rlimits = 2,
				       .rlimits = {{RLIMIT_NOFILE, {1024, 4096}},
						   {RLIMIT_CPU, {RLIM_INFINITY, RLIM_INFINITY}}},
				       .exit_file = "/run/corral/tasks/t-1.exit",
				       .syscalls_file = "/run/corral/tasks/t-1.syscalls",
				       .syscalls_max = 1000};
	/* Stand-in fd numbers: nothing is opened, the message only carries their order. */
	x->f = (struct launch_shim_fds){.status_r = 9,
					.status_w = 30,
					.err_r = 9,
					.err_w = 31,
					.sync_r = 32,
					.sync_w = 9,
					.sc_fd = 33};
	if (launch_wire_pack(&x->plan, &x->f, &x->buf, &x->len, x->fds, &x->nfds) < 0)
		return -1;
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;

	free(x->buf);
	sbx_filter_free(x->filter);
	free(x);
	return 0;
}

static void assert_strv_equal(char *const *a, char *const *b)
{
	size_t i = 0;

	for (; a[i] && b[i]; i++)
		assert_string_equal(a[i], b[i]);
	assert_null(a[i]);
	assert_null(b[i]);
}

static void test_round_trip(void **state)
{
	struct fx *x = *state;
	const struct launch_plan *p;
	const struct launch_shim_fds *f;
	struct launch_wire *w = NULL;
	char *buf2 = NULL;
	size_t len2 = 0, n2 = 0;
	int fds2[LAUNCH_WIRE_FDS_MAX];

	/* fds in the order status, err, sync, syscalls file, clone cgroup, the joins, then the
	 * passed stdio (stdout, stderr here; none for stdin) */
	assert_int_equal(x->nfds, 9);
	assert_int_equal(x->fds[0], 30);
	assert_int_equal(x->fds[4], 40);
	assert_int_equal(x->fds[6], 42);
	assert_int_equal(x->fds[7], 43);
	assert_int_equal(x->fds[8], 44);
	assert_int_equal(launch_wire_unpack(x->buf, x->len, x->fds, x->nfds, &w), 0);
	p = launch_wire_plan(w);
	f = launch_wire_fds(w);
	assert_strv_equal(p->argv, argv_);
	assert_strv_equal(p->env, env_);
	assert_strv_equal(p->exec_paths, paths_);
	assert_string_equal(p->workdir, "/home/u/work");
	assert_int_equal(p->uid, 1000);
	assert_int_equal(p->n_groups, 3);
	assert_memory_equal(p->groups, groups_, sizeof(groups_));
	assert_true(p->switch_user);
	assert_string_equal(p->stdout_path, "/tmp/out");
	assert_null(p->stderr_path);
	assert_string_equal(p->stdin_path, "/tmp/in");
	assert_int_equal(p->stdio_fds, 1u << 1 | 1u << 2);
	assert_int_equal(p->stdio_fd[1], 43);
	assert_int_equal(p->stdio_fd[2], 44);
	assert_true(p->stdio_tty);
	assert_int_equal(p->n_rlimits, 2);
	assert_int_equal(p->rlimits[0].resource, RLIMIT_NOFILE);
	assert_int_equal(p->rlimits[0].rl.rlim_max, 4096);
	assert_true(p->rlimits[1].rl.rlim_cur == RLIM_INFINITY);
	assert_string_equal(p->exit_file, "/run/corral/tasks/t-1.exit");
	assert_string_equal(p->syscalls_file, "/run/corral/tasks/t-1.syscalls");
	assert_int_equal(p->syscalls_max, 1000);
	assert_int_equal(p->clone_cgroup_fd, 40);
	assert_int_equal(p->n_join, 2);
	assert_int_equal(p->join_fd[1], 42);
	assert_false(p->join_unified[0]);
	assert_true(p->join_unified[1]);
	assert_false(p->clone_joins_all);
	assert_int_equal(f->status_w, 30);
	assert_int_equal(f->err_w, 31);
	assert_int_equal(f->sync_r, 32);
	assert_int_equal(f->sc_fd, 33);
	/* the filter came across whole: it notifies, and packs to the same bytes */
	assert_non_null(p->filter);
	assert_true(sbx_filter_notifies(p->filter));
	assert_int_equal(sbx_filter_len(p->filter), sbx_filter_len(x->filter));
	/* and the decoded plan encodes to the same message */
	assert_int_equal(launch_wire_pack(p, f, &buf2, &len2, fds2, &n2), 0);
	assert_int_equal(len2, x->len);
	assert_memory_equal(buf2, x->buf, x->len);
	free(buf2);
	launch_wire_free(w);
}

/* Every truncation and a flipped bit anywhere: refused or decoded, never a read past the end
 * (the ASan build checks that). */
static void test_malformed(void **state)
{
	struct fx *x = *state;
	struct launch_wire *w = NULL;
	char *copy = malloc(x->len);

	assert_non_null(copy);
	for (size_t n = 0; n < x->len; n++) {
		memcpy(copy, x->buf, n);
		assert_int_equal(launch_wire_unpack(copy, n, x->fds, x->nfds, &w), -EPROTO);
	}
	for (size_t i = 0; i < x->len; i++) {
		memcpy(copy, x->buf, x->len);
		copy[i] ^= 0x40;
		if (launch_wire_unpack(copy, x->len, x->fds, x->nfds, &w) == 0)
			launch_wire_free(w);
	}
	/* more bytes than the message: refused */
	free(copy);
	copy = calloc(1, x->len + 4);
	assert_non_null(copy);
	memcpy(copy, x->buf, x->len);
	assert_int_equal(launch_wire_unpack(copy, x->len + 4, x->fds, x->nfds, &w), -EPROTO);
	/* fewer fds than the message names */
	assert_int_equal(launch_wire_unpack(x->buf, x->len, x->fds, 3, &w), -EPROTO);
	free(copy);
}

/* A plan without filter, files or cgroup. */
static void test_minimal(void **state)
{
	struct launch_plan p = {.argv = argv_,
				.env = env_,
				.exec_paths = paths_,
				.clone_cgroup_fd = -1,
				.exit_file = "/x.exit"};
	struct launch_shim_fds f = {.status_w = 3, .err_w = 4, .sync_r = 5, .sc_fd = -1};
	struct launch_wire *w = NULL;
	char *buf = NULL;
	size_t len = 0, nfds = 0;
	int fds[LAUNCH_WIRE_FDS_MAX];

	(void)state;
	assert_int_equal(launch_wire_pack(&p, &f, &buf, &len, fds, &nfds), 0);
	assert_int_equal(nfds, 3);
	assert_int_equal(launch_wire_unpack(buf, len, fds, nfds, &w), 0);
	assert_null(launch_wire_plan(w)->filter);
	assert_null(launch_wire_plan(w)->workdir);
	assert_int_equal(launch_wire_plan(w)->clone_cgroup_fd, -1);
	assert_int_equal(launch_wire_fds(w)->sc_fd, -1);
	launch_wire_free(w);
	free(buf);
}

/* The sandbox's mounts and namespaces, Landlock targets included, cross intact; an unknown
 * Landlock kind or namespace bit is refused. */
static void test_mounts(void **state)
{
	struct launch_mount m[] = {
	    {.op = LAUNCH_MOUNT_TMPFS, .path = "/tmp", .data = "size=1M,mode=1777"},
	    {.op = LAUNCH_MOUNT_READ_ONLY,
	     .path = "/boot",
	     .optional = true,
	     .landlock = LAUNCH_LANDLOCK_READ_ONLY},
	    {.op = LAUNCH_MOUNT_BIND, .path = "/mnt", .src = "/data", .data = "ro"},
	    {.op = LAUNCH_MOUNT_NONE, .path = "/data/x", .landlock = LAUNCH_LANDLOCK_DENY},
	};
	struct launch_plan p = {.argv = argv_,
				.env = env_,
				.exec_paths = paths_,
				.clone_cgroup_fd = -1,
				.exit_file = "/x.exit",
				.ns_flags = LAUNCH_NS_MOUNT | LAUNCH_NS_PID | LAUNCH_NS_LANDLOCK,
				.n_mounts = 4,
				.mounts = m};
	struct launch_shim_fds f = {.status_w = 3, .err_w = 4, .sync_r = 5, .sc_fd = -1};
	const struct launch_plan *q;
	struct launch_wire *w = NULL;
	char *buf = NULL;
	size_t len = 0, nfds = 0;
	int fds[LAUNCH_WIRE_FDS_MAX];

	(void)state;
	assert_int_equal(launch_wire_pack(&p, &f, &buf, &len, fds, &nfds), 0);
	assert_int_equal(launch_wire_unpack(buf, len, fds, nfds, &w), 0);
	q = launch_wire_plan(w);
	assert_int_equal(q->ns_flags, p.ns_flags);
	assert_int_equal(q->n_mounts, 4);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(q->mounts[i].op, m[i].op);
		assert_string_equal(q->mounts[i].path, m[i].path);
		assert_int_equal(q->mounts[i].optional, m[i].optional);
		assert_int_equal(q->mounts[i].landlock, m[i].landlock);
	}
	assert_string_equal(q->mounts[2].src, "/data");
	assert_string_equal(q->mounts[2].data, "ro");
	launch_wire_free(w);
	free(buf);
	p.ns_flags |= 1U << 20;
	assert_int_equal(launch_wire_pack(&p, &f, &buf, &len, fds, &nfds), 0);
	assert_int_equal(launch_wire_unpack(buf, len, fds, nfds, &w), -EPROTO);
	free(buf);
	p.ns_flags &= ~(1U << 20);
	m[3].landlock = 3;
	assert_int_equal(launch_wire_pack(&p, &f, &buf, &len, fds, &nfds), 0);
	assert_int_equal(launch_wire_unpack(buf, len, fds, nfds, &w), -EPROTO);
	free(buf);
}

/* The messages of the sandbox's steps name the layer and what to do about it. */
static void test_sandbox_errors(void **state)
{
	const struct launch_mount m[] = {
	    {.op = LAUNCH_MOUNT_DEV, .path = "/dev", .data = "infiniband"},
	};
	struct launch_plan p = {.argv = argv_, .n_mounts = 1, .mounts = m};
	char buf[512];

	(void)state;
	launch_format_error(&p, LAUNCH_STEP_LANDLOCK, EOPNOTSUPP, buf, sizeof(buf));
	assert_non_null(strstr(buf, "landlock: "));
	assert_non_null(strstr(buf, "not enabled at boot"));
	assert_non_null(strstr(buf, "[sandbox] landlock = no"));
	launch_format_error(&p, LAUNCH_STEP_LANDLOCK, ENOSYS, buf, sizeof(buf));
	assert_non_null(strstr(buf, "kernel without Landlock"));
	launch_format_error(&p, LAUNCH_STEP_CODE(LAUNCH_STEP_MOUNT, 0), EPERM, buf, sizeof(buf));
	assert_non_null(strstr(buf, "mount namespace: private /dev at /dev: "));
	assert_non_null(strstr(buf, "CAP_SYS_ADMIN"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
	    cmocka_unit_test(test_minimal),
	    cmocka_unit_test(test_mounts),
	    cmocka_unit_test(test_sandbox_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
