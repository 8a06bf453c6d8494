/* SPDX-License-Identifier: MIT */
/*
 * cgroup layer on a fake cgroupfs tree in a temp dir (no root needed). mkdir/mkdirat are
 * wrapped to populate new directories with the control files the kernel would create, rmdir
 * (unlinkat AT_REMOVEDIR) removes them first, statfs reports the type the test asks for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>

#include "common/macro.h"
#include "common/fileio.h"
#include "isolation/cgroup.h"
#include "isolation/cgroup_internal.h"

/* ---- fake cgroupfs ---- */

static char fake_root[256];
static long fake_root_type; /* statfs f_type reported for fake_root, 0 = real */
static bool fake_unified;   /* <fake_root>/unified reports cgroup2 */
static bool fake_no_memsw;  /* do not create memory.memsw.* */
static const char *fake_controllers = "cpu io memory pids\n";

int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_mkdir(const char *path, mode_t mode);
int __real_unlinkat(int dirfd, const char *path, int flags);
int __real_statfs(const char *path, struct statfs *buf);
int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_mkdir(const char *path, mode_t mode);
int __wrap_unlinkat(int dirfd, const char *path, int flags);
int __wrap_statfs(const char *path, struct statfs *buf);

static const struct {
	const char *name;
	const char *content;
} fake_files[] = {
    {"cgroup.procs", ""},
    {"tasks", ""},
    {"cgroup.controllers", NULL}, /* fake_controllers */
    {"cgroup.subtree_control", ""},
    {"cgroup.events", "populated 0\nfrozen 1\n"},
    {"cgroup.freeze", "0"},
    {"cgroup.kill", ""},
    {"memory.max", ""},
    {"memory.high", ""},
    {"memory.swap.max", ""},
    {"cpu.max", ""},
    {"cpu.weight", ""},
    {"pids.max", ""},
    {"io.max", ""},
    {"memory.limit_in_bytes", ""},
    {"memory.memsw.limit_in_bytes", ""},
    {"memory.soft_limit_in_bytes", ""},
    {"memory.use_hierarchy", "1\n"},
    {"cpu.cfs_quota_us", ""},
    {"cpu.cfs_period_us", ""},
    {"cpu.shares", ""},
    {"blkio.throttle.read_bps_device", ""},
    {"blkio.throttle.write_bps_device", ""},
    {"freezer.state", "THAWED\n"},
};

static bool under_fake(const char *path)
{
	size_t n = strlen(fake_root);

	return n > 0 && strncmp(path, fake_root, n) == 0 && (path[n] == '/' || path[n] == 0);
}

static void populate(const char *dir)
{
	for (size_t i = 0; i < ARRAY_SIZE(fake_files); i++) {
		char p[512];
		const char *c = fake_files[i].content ? fake_files[i].content : fake_controllers;
		FILE *f;

		if (fake_no_memsw && (strstr(fake_files[i].name, "memsw") ||
				      strcmp(fake_files[i].name, "memory.swap.max") == 0))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, fake_files[i].name);
		f = fopen(p, "we");
		assert_non_null(f);
		fputs(c, f);
		fclose(f);
	}
}

static int fd_path(int dirfd, const char *name, char *buf, size_t len)
{
	char link[64], target[400];
	ssize_t n;

	if (name[0] == '/' || dirfd == AT_FDCWD) {
		snprintf(buf, len, "%s", name);
		return 0;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -1;
	target[n] = 0;
	snprintf(buf, len, "%s/%s", target, name);
	return 0;
}

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
	char full[512];
	int r = __real_mkdirat(dirfd, path, mode);

	if (r == 0 && fd_path(dirfd, path, full, sizeof(full)) == 0 && under_fake(full))
		populate(full);
	return r;
}

int __wrap_mkdir(const char *path, mode_t mode)
{
	int r = __real_mkdir(path, mode);

	if (r == 0 && under_fake(path))
		populate(path);
	return r;
}

int __wrap_unlinkat(int fd, const char *path, int flags)
{
	char full[512];

	if ((flags & AT_REMOVEDIR) && fd_path(fd, path, full, sizeof(full)) == 0 &&
	    under_fake(full)) {
		DIR *d = opendir(full);
		struct dirent *de;
		bool has_subdir = false;

		if (d) {
			int dfd = dirfd(d);

			/* like cgroupfs: a child cgroup blocks removal, control files do not */
			while ((de = readdir(d)))
				if (de->d_type == DT_DIR && de->d_name[0] != '.')
					has_subdir = true;
			rewinddir(d);
			while (!has_subdir && (de = readdir(d)))
				if (de->d_type == DT_REG)
					__real_unlinkat(dfd, de->d_name, 0);
			closedir(d);
		}
	}
	return __real_unlinkat(fd, path, flags);
}

int __wrap_statfs(const char *path, struct statfs *buf)
{
	char u[300];
	int r = __real_statfs(path, buf);

	if (r < 0)
		return r;
	snprintf(u, sizeof(u), "%s/unified", fake_root);
	if (fake_root_type && strcmp(path, fake_root) == 0)
		buf->f_type = fake_root_type;
	else if (fake_unified && strcmp(path, u) == 0)
		buf->f_type = CGROUP2_SUPER_MAGIC;
	return 0;
}

static void fpath(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", fake_root, rel);
}

static void mkdir_rel(const char *rel)
{
	char p[512];

	fpath(p, sizeof(p), rel);
	assert_int_equal(mkdir_p(p, 0755), 0);
}

static void write_rel(const char *rel, const char *content)
{
	char p[512];
	FILE *f;

	fpath(p, sizeof(p), rel);
	f = fopen(p, "we");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

/* Contents of a fake file, trailing newline stripped. Static buffer. */
static const char *read_rel(const char *rel)
{
	static char out[4096];
	char p[512];
	_cleanup_free_ char *s = NULL;
	size_t len = 0;

	fpath(p, sizeof(p), rel);
	if (read_file(p, sizeof(out) - 1, &s, &len) < 0)
		return NULL;
	while (len > 0 && s[len - 1] == '\n')
		s[--len] = 0;
	memcpy(out, s, len + 1);
	return out;
}

static bool exists_rel(const char *rel)
{
	char p[512];

	fpath(p, sizeof(p), rel);
	return access(p, F_OK) == 0;
}

static int rm_rf_cb(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

static int setup_tree(void **state)
{
	snprintf(fake_root, sizeof(fake_root), "/tmp/corral-cgtest-XXXXXX");
	if (!mkdtemp(fake_root))
		return -1;
	fake_root_type = 0;
	fake_unified = false;
	fake_no_memsw = false;
	fake_controllers = "cpu io memory pids\n";
	return 0;
}

static int teardown_tree(void **state)
{
	(void)rm_rf_cb(fake_root);
	fake_root[0] = 0;
	return 0;
}

static const char *v1_ctrls[] = {"memory", "cpu", "cpuacct", "pids", "blkio", "freezer", "devices"};

static void make_v1_tree(bool unified)
{
	for (size_t i = 0; i < ARRAY_SIZE(v1_ctrls); i++)
		mkdir_rel(v1_ctrls[i]);
	mkdir_rel("systemd"); /* named hierarchy: ignored */
	if (unified) {
		mkdir_rel("unified");
		fake_unified = true;
	}
}

static struct cg_root *open_root(enum cg_mode mode, const char *base)
{
	struct cg_root_opts o = {
	    .fs_root = fake_root, .subtree = "corral-test", .force_mode = mode, .v2_base = base};
	struct cg_root *root = NULL;

	assert_int_equal(cg_root_open(&o, &root), 0);
	return root;
}

static struct cg_limits test_limits(void)
{
	struct cg_limits l = {
	    .memory_max = 64ULL << 20,
	    .memory_high = 48ULL << 20,
	    .swap_max = 0,
	    .cpus = 0.5,
	    .cpu_weight = 200,
	    .pids_max = 16,
	    .n_io = 1,
	    .io = {{.major = 8, .minor = 0, .rbps = 1048576, .wbps = 2097152}},
	};
	return l;
}

/* ---- pure helpers ---- */

static void test_names(void **state)
{
	char long_name[80];

	assert_true(cg_name_valid("task-1.a_B"));
	assert_true(cg_name_valid("x"));
	assert_false(cg_name_valid(""));
	assert_false(cg_name_valid(NULL));
	assert_false(cg_name_valid("."));
	assert_false(cg_name_valid(".."));
	assert_false(cg_name_valid(".hidden"));
	assert_false(cg_name_valid("a/b"));
	assert_false(cg_name_valid("../x"));
	assert_false(cg_name_valid("a b"));
	assert_false(cg_name_valid("a\nb"));
	memset(long_name, 'a', 64);
	long_name[64] = 0;
	assert_true(cg_name_valid(long_name));
	long_name[64] = 'a';
	long_name[65] = 0;
	assert_false(cg_name_valid(long_name));

	assert_true(cg_subtree_valid("corral"));
	assert_true(cg_subtree_valid("/corral/tasks/"));
	assert_false(cg_subtree_valid("corral/../etc"));
	assert_false(cg_subtree_valid("/"));
	assert_false(cg_subtree_valid(""));
}

static void test_cpu_quota(void **state)
{
	uint64_t q = 0;

	assert_int_equal(cg_cpu_quota_us(0.5, &q), 0);
	assert_int_equal(q, 50000);
	assert_int_equal(cg_cpu_quota_us(2, &q), 0);
	assert_int_equal(q, 200000);
	assert_int_equal(cg_cpu_quota_us(1.25, &q), 0);
	assert_int_equal(q, 125000);
	assert_int_equal(cg_cpu_quota_us(0.001, &q), 0);
	assert_int_equal(q, 1000); /* kernel minimum */
	assert_int_equal(cg_cpu_quota_us(0, &q), -EINVAL);
	assert_int_equal(cg_cpu_quota_us(5000, &q), -ERANGE);
	assert_int_equal(cg_cpu_quota_us(NAN, &q), -ERANGE);
	assert_int_equal(cg_weight_to_shares(100, &q), 0);
	assert_int_equal(q, 1024);
	assert_int_equal(cg_weight_to_shares(1, &q), 0);
	assert_int_equal(q, 10);
	assert_int_equal(cg_weight_to_shares(10001, &q), -ERANGE);
	assert_int_equal(cg_ticks_to_ns(250, 100), 2500000000ULL);
	assert_int_equal(cg_ticks_to_ns(3, 250), 12000000ULL);
}

static void test_limits_validate(void **state)
{
	struct cg_limits l = {.swap_max = UINT64_MAX};

	assert_int_equal(cg_limits_validate(&l), 0);
	assert_int_equal(cg_limits_validate(NULL), -EINVAL);
	l.cpus = 4097;
	assert_int_equal(cg_limits_validate(&l), -ERANGE);
	l.cpus = NAN;
	assert_int_equal(cg_limits_validate(&l), -ERANGE);
	l.cpus = 0.5;
	l.cpu_weight = 10001;
	assert_int_equal(cg_limits_validate(&l), -ERANGE);
	l.cpu_weight = 10000;
	l.n_io = CG_IO_MAX + 1;
	assert_int_equal(cg_limits_validate(&l), -E2BIG);
	l.n_io = 1;
	assert_int_equal(cg_limits_validate(&l), -EINVAL);
	l.io[0].wbps = 1;
	assert_int_equal(cg_limits_validate(&l), 0);
}

static void test_parse_keyed(void **state)
{
	const char *cpu_stat = "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"
			       "nr_periods 10\nnr_throttled 3\nthrottled_usec 12\n";
	const char *events = "low 0\nhigh 4\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n";
	const char *cpuacct = "user 250\nsystem 30\n";
	const char *oomc = "oom_kill_disable 0\nunder_oom 1\noom_kill 3\n";
	uint64_t v = 0;

	assert_int_equal(cg_parse_keyed(cpu_stat, "usage_usec", &v), 0);
	assert_int_equal(v, 1500000);
	assert_int_equal(cg_parse_keyed(cpu_stat, "system_usec", &v), 0);
	assert_int_equal(v, 500000);
	assert_int_equal(cg_parse_keyed(events, "oom", &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(cg_parse_keyed(events, "oom_kill", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(cg_parse_keyed(events, "oom_group", &v), -ENOENT);
	assert_int_equal(cg_parse_keyed(cpuacct, "user", &v), 0);
	assert_int_equal(v, 250);
	assert_int_equal(cg_parse_keyed(cpuacct, "system", &v), 0);
	assert_int_equal(v, 30);
	assert_int_equal(cg_parse_keyed(oomc, "oom_kill", &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(cg_parse_keyed(oomc, "under_oom", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(cg_parse_keyed("oom_kill x\n", "oom_kill", &v), -EINVAL);
	assert_int_equal(cg_parse_keyed("oom_kill -1\n", "oom_kill", &v), -EINVAL);
	assert_int_equal(cg_parse_keyed("", "oom_kill", &v), -ENOENT);
	/* no trailing newline */
	assert_int_equal(cg_parse_keyed("a 1\nb 2", "b", &v), 0);
	assert_int_equal(v, 2);
}

static void test_parse_io(void **state)
{
	const char *io = "8:0 rbytes=1000 wbytes=2000 rios=10 wios=20 dbytes=0 dios=0\n"
			 "8:16 rbytes=5 wbytes=7 rios=1 wios=1 dbytes=0 dios=0\n"
			 "253:0 rbytes=100 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n";
	const char *blk = "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n"
			  "8:0 Discard 0\n8:0 Total 12288\n"
			  "8:16 Read 1\n8:16 Write 2\n8:16 Total 3\nTotal 12291\n";
	uint64_t r = 0, w = 0;

	assert_int_equal(cg_parse_io_stat(io, &r, &w), 0);
	assert_int_equal(r, 1105);
	assert_int_equal(w, 2007);
	assert_int_equal(cg_parse_io_stat("", &r, &w), 0);
	assert_int_equal(r, 0);
	assert_int_equal(cg_parse_io_stat("8:0 rbytes=x\n", &r, &w), -EINVAL);
	assert_int_equal(cg_parse_io_stat("garbage rbytes=1\n", &r, &w), -EINVAL);

	assert_int_equal(cg_parse_blkio_bytes(blk, &r, &w), 0);
	assert_int_equal(r, 4097);
	assert_int_equal(w, 8194);
	assert_int_equal(cg_parse_blkio_bytes("Total 0\n", &r, &w), 0);
	assert_int_equal(r + w, 0);
	assert_int_equal(cg_parse_blkio_bytes("8:0 Read\n", &r, &w), -EINVAL);
}

static void test_parse_pids(void **state)
{
	_cleanup_free_ pid_t *p = NULL;
	size_t n = 0;

	assert_int_equal(cg_parse_pids("30\n10\n20\n10\n", &p, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(p[0], 10);
	assert_int_equal(p[2], 30);
	free(TAKE_PTR(p));
	assert_int_equal(cg_parse_pids("", &p, &n), 0);
	assert_int_equal(n, 0);
	free(TAKE_PTR(p));
	assert_int_equal(cg_parse_pids("12\nabc\n", &p, &n), -EINVAL);
	assert_int_equal(cg_parse_pids("-3\n", &p, &n), -EINVAL);
}

/* ---- v1 on a fake tree ---- */

static void test_detect(void **state)
{
	struct cg_root_opts o = {
	    .fs_root = fake_root, .subtree = "c", .force_mode = _CG_MODE_INVALID};
	struct cg_root *root = NULL;

	make_v1_tree(true);
	fake_root_type = TMPFS_MAGIC;
	assert_int_equal(cg_root_open(&o, &root), 0);
	assert_int_equal(cg_root_mode(root), CG_MODE_V1);
	assert_true(cg_root_has_unified(root));
	cg_root_free(root);
	root = NULL;

	fake_root_type = EXT4_SUPER_MAGIC;
	assert_int_equal(cg_root_open(&o, &root), -ENOMEDIUM);
	assert_null(root);

	fake_root_type = CGROUP2_SUPER_MAGIC;
	write_rel("cgroup.controllers", "cpu io memory pids\n");
	write_rel("cgroup.subtree_control", "cpu io memory pids\n");
	assert_int_equal(cg_root_open(&o, &root), 0);
	assert_int_equal(cg_root_mode(root), CG_MODE_V2);
	cg_root_free(root);

	o.subtree = "../escape";
	assert_int_equal(cg_root_open(&o, &root), -EINVAL);
	o.subtree = "c";
	o.force_mode = 7;
	assert_int_equal(cg_root_open(&o, &root), -EINVAL);
}

static void test_v1_limits(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL, *t2 = NULL;
	struct cg_limits l = test_limits();

	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	assert_int_equal(cg_root_mode(root), CG_MODE_V1);
	assert_true(cg_root_has_unified(root));
	assert_true(cg_root_swap_accounting(root));
	assert_true(exists_rel("memory/corral-test"));
	assert_true(exists_rel("unified/corral-test"));
	assert_false(exists_rel("systemd/corral-test"));

	assert_int_equal(cg_task_create(root, "t1", &l, &t), 0);
	assert_string_equal(read_rel("memory/corral-test/t1/memory.limit_in_bytes"), "67108864");
	assert_string_equal(read_rel("memory/corral-test/t1/memory.memsw.limit_in_bytes"),
			    "67108864");
	assert_string_equal(read_rel("memory/corral-test/t1/memory.soft_limit_in_bytes"),
			    "50331648");
	assert_string_equal(read_rel("cpu/corral-test/t1/cpu.cfs_quota_us"), "50000");
	assert_string_equal(read_rel("cpu/corral-test/t1/cpu.cfs_period_us"), "100000");
	assert_string_equal(read_rel("cpu/corral-test/t1/cpu.shares"), "2048");
	assert_string_equal(read_rel("pids/corral-test/t1/pids.max"), "16");
	assert_string_equal(read_rel("blkio/corral-test/t1/blkio.throttle.read_bps_device"),
			    "8:0 1048576");
	assert_string_equal(read_rel("blkio/corral-test/t1/blkio.throttle.write_bps_device"),
			    "8:0 2097152");
	/* the cpu hierarchy got no memory limit, etc. */
	assert_string_equal(read_rel("cpu/corral-test/t1/memory.limit_in_bytes"), "");
	assert_true(exists_rel("unified/corral-test/t1"));
	/* only the hierarchies the task needs: no GPU/device policy asked for */
	assert_false(exists_rel("devices/corral-test/t1"));
	assert_true(exists_rel("freezer/corral-test/t1"));
	assert_true(exists_rel("cpuacct/corral-test/t1"));

	assert_true(cg_task_unified_fd(t) >= 0);
	assert_true(cg_task_unified_id(t) != 0);
	/* hybrid: clone3 into the unified directory, the v1 ones joined after */
	assert_int_equal(cg_task_clone_fd(t), cg_task_unified_fd(t));
	assert_false(cg_task_clone_joins_all(t));
	assert_int_equal(cg_task_v1_dir_fd(t, "devices"), -1);
	assert_true(cg_task_v1_dir_fd(t, "freezer") >= 0);
	assert_int_equal(cg_task_v1_dir_fd(t, "cpuset"), -1);
	assert_int_equal(cg_task_v1_dir_fd(t, NULL), -1);
	assert_string_equal(cg_task_name(t), "t1");
	assert_non_null(strstr(cg_task_path(t), "/memory/corral-test/t1"));

	/* same name again: -EEXIST, the existing one untouched */
	assert_int_equal(cg_task_create(root, "t1", &l, &t2), -EEXIST);
	assert_null(t2);
	assert_true(exists_rel("memory/corral-test/t1"));
	assert_true(exists_rel("unified/corral-test/t1"));

	/* join self writes "0" to every v1 tasks file (thread move: no threadgroup lock) and to
	 * the unified cgroup.procs unless the child was cloned into it */
	assert_int_equal(cg_task_join_self(t, true), 0);
	assert_string_equal(read_rel("freezer/corral-test/t1/tasks"), "0");
	assert_string_equal(read_rel("memory/corral-test/t1/tasks"), "0");
	assert_string_equal(read_rel("freezer/corral-test/t1/cgroup.procs"), "");
	assert_string_equal(read_rel("unified/corral-test/t1/cgroup.procs"), "");
	assert_int_equal(cg_task_join_self(t, false), 0);
	assert_string_equal(read_rel("unified/corral-test/t1/cgroup.procs"), "0");

	assert_int_equal(cg_task_destroy(t), 0);
	for (size_t i = 0; i < ARRAY_SIZE(v1_ctrls); i++) {
		char rel[128];

		snprintf(rel, sizeof(rel), "%s/corral-test/t1", v1_ctrls[i]);
		assert_false(exists_rel(rel));
	}
	assert_false(exists_rel("unified/corral-test/t1"));
	cg_task_free(t);
	cg_root_free(root);
}

static void test_v1_no_memsw_and_failure_cleanup(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_limits l = test_limits();

	fake_no_memsw = true;
	make_v1_tree(false);
	root = open_root(CG_MODE_V1, NULL);
	assert_false(cg_root_swap_accounting(root));
	assert_false(cg_root_has_unified(root));
	/* swap_max not enforceable: memory limit still applied, no memsw file written */
	assert_int_equal(cg_task_create(root, "t", &l, &t), 0);
	assert_string_equal(read_rel("memory/corral-test/t/memory.limit_in_bytes"), "67108864");
	assert_false(exists_rel("memory/corral-test/t/memory.memsw.limit_in_bytes"));
	assert_int_equal(cg_task_unified_fd(t), -1);
	assert_int_equal(cg_task_unified_id(t), 0);
	assert_int_equal(cg_task_destroy(t), 0);
	cg_task_free(t);
	t = NULL;

	/* an invalid limit fails before anything is created */
	l.cpus = 100000;
	assert_int_equal(cg_task_create(root, "bad", &l, &t), -ERANGE);
	assert_null(t);
	assert_false(exists_rel("memory/corral-test/bad"));

	/* a failure half-way (a leftover in one hierarchy) removes only what this call made */
	l.cpus = 0.5;
	mkdir_rel("pids/corral-test/bad");
	write_rel("pids/corral-test/bad/pids.max", "7");
	assert_int_equal(cg_task_create(root, "bad", &l, &t), -EEXIST);
	assert_null(t);
	assert_false(exists_rel("memory/corral-test/bad"));
	assert_false(exists_rel("cpu/corral-test/bad"));
	assert_false(exists_rel("devices/corral-test/bad"));
	assert_string_equal(read_rel("pids/corral-test/bad/pids.max"), "7");
	cg_root_free(root);
}

static void test_v1_foreign(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	char **names = NULL;
	size_t n = 0;

	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	/* things the agent did not create under its subtree, and outside it */
	mkdir_rel("memory/corral-test/.hidden");
	mkdir_rel("memory/corral-test/has space");
	mkdir_rel("memory/other");
	mkdir_rel("pids/corral-test/leftover");
	assert_int_equal(cg_task_create(root, "a", NULL, &t), 0);
	assert_int_equal(cg_root_list_tasks(root, &names, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(names[0], "a");
	assert_string_equal(names[1], "leftover");
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);

	assert_int_equal(cg_task_create(root, "../other", NULL, &t), -EINVAL);
	assert_int_equal(cg_task_create(root, ".hidden", NULL, &t), -EINVAL);
	assert_int_equal(cg_task_open(root, "has space", &t), -EINVAL);
	assert_int_equal(cg_task_open(root, "..", &t), -EINVAL);
	assert_int_equal(cg_task_open(root, "nonexistent", &t), -ENOENT);
	cg_task_free(t);
	t = NULL;

	/* a leftover present in only one hierarchy: open needs the main (memory) dir */
	assert_int_equal(cg_task_open(root, "leftover", &t), -ENOENT);
	mkdir_rel("memory/corral-test/leftover");
	assert_int_equal(cg_task_open(root, "leftover", &t), 0);
	assert_int_equal(cg_task_destroy(t), 0);
	cg_task_free(t);
	assert_false(exists_rel("memory/corral-test/leftover"));
	assert_false(exists_rel("pids/corral-test/leftover"));
	assert_true(exists_rel("memory/corral-test/.hidden"));
	assert_true(exists_rel("memory/corral-test/has space"));
	assert_true(exists_rel("memory/other"));

	/* re-open and destroy "a"; a child cgroup inside blocks removal */
	assert_int_equal(cg_task_open(root, "a", &t), 0);
	mkdir_rel("memory/corral-test/a/sub");
	assert_int_equal(cg_task_destroy(t), -ENOTEMPTY);
	assert_true(exists_rel("memory/corral-test/a"));
	assert_false(exists_rel("cpu/corral-test/a")); /* others went, the main one stays */
	cg_task_free(t);
	cg_root_free(root);
}

/* v1: a task's cgroup is made only in the hierarchies it needs (each join costs an RCU sync). */
static void test_v1_needed_hierarchies(void **state)
{
	struct cg_limits none = {.swap_max = UINT64_MAX};
	struct cg_limits dev = {.swap_max = UINT64_MAX, .devices = true, .cpu_weight = 50};
	struct cg_task *t = NULL, *t2 = NULL;
	struct cg_root *root;

	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	assert_int_equal(cg_task_create(root, "plain", &none, &t), 0);
	assert_true(exists_rel("memory/corral-test/plain"));
	assert_true(exists_rel("cpuacct/corral-test/plain"));
	assert_true(exists_rel("freezer/corral-test/plain"));
	assert_true(exists_rel("unified/corral-test/plain"));
	assert_false(exists_rel("cpu/corral-test/plain"));
	assert_false(exists_rel("pids/corral-test/plain"));
	assert_false(exists_rel("blkio/corral-test/plain"));
	assert_false(exists_rel("devices/corral-test/plain"));
	assert_int_equal(cg_task_create(root, "gpu", &dev, &t2), 0);
	assert_true(exists_rel("devices/corral-test/gpu"));
	assert_true(exists_rel("cpu/corral-test/gpu"));
	assert_true(cg_task_v1_dir_fd(t2, "devices") >= 0);
	/* destroy removes exactly what was made; a re-open finds the same set */
	assert_int_equal(cg_task_destroy(t), 0);
	assert_false(exists_rel("memory/corral-test/plain"));
	assert_int_equal(cg_task_destroy(t2), 0);
	assert_false(exists_rel("devices/corral-test/gpu"));
	cg_task_free(t);
	cg_task_free(t2);
	cg_root_free(root);
}

/* Made ahead, limits later: precreate makes the hierarchies of `like` only; fits() refuses a
 * cgroup with a v1 directory the task does not need; apply() adds what the limits need. */
static void test_v1_precreate_apply(void **state)
{
	struct cg_limits none = {.swap_max = UINT64_MAX};
	struct cg_limits pids = {.swap_max = UINT64_MAX, .pids_max = 32};
	struct cg_limits bad = {.swap_max = UINT64_MAX, .cpus = -1};
	struct cg_task *t = NULL, *t2 = NULL;
	struct cg_root *root;

	(void)state;
	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	assert_int_equal(cg_task_precreate(root, "p1", &none, &t), 0);
	assert_true(exists_rel("memory/corral-test/p1"));
	assert_true(exists_rel("unified/corral-test/p1"));
	assert_false(exists_rel("pids/corral-test/p1"));
	assert_true(cg_task_fits(t, &none));
	assert_true(cg_task_fits(t, &pids)); /* missing ones are made by apply */
	assert_int_equal(cg_task_apply(t, &bad), -ERANGE);
	assert_int_equal(cg_task_apply(t, &pids), 0);
	assert_true(exists_rel("pids/corral-test/p1"));
	assert_string_equal(read_rel("pids/corral-test/p1/pids.max"), "32");
	assert_true(cg_task_fits(t, &pids));
	assert_false(cg_task_fits(t, &none)); /* a pids directory that task would join */
	assert_int_equal(cg_task_precreate(root, "p1", &none, &t2), -EEXIST);
	assert_int_equal(cg_task_precreate(root, "../x", &none, &t2), -EINVAL);
	assert_int_equal(cg_task_destroy(t), 0);
	assert_false(exists_rel("pids/corral-test/p1"));
	assert_false(exists_rel("memory/corral-test/p1"));
	cg_task_free(t);
	cg_root_free(root);
}

/* The same cgroup made and removed one directory per call, as the agent's idle steps do. */
static void test_v1_steps(void **state)
{
	static const char *const dirs[] = {"memory/corral-test/q1", "cpuacct/corral-test/q1",
					   "freezer/corral-test/q1", "unified/corral-test/q1"};
	struct cg_limits none = {.swap_max = UINT64_MAX};
	struct cg_limits pids = {.swap_max = UINT64_MAX, .pids_max = 32};
	struct cg_task *t = NULL, *t2 = NULL;
	struct cg_root *root;
	int steps = 0, r, made;

	(void)state;
	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	assert_int_equal(cg_task_precreate_begin(root, "../x", &none, &t2), -EINVAL);
	assert_int_equal(cg_task_precreate_begin(root, "q1", &none, &t), 0);
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		assert_false(exists_rel(dirs[i]));
	do {
		r = cg_task_precreate_step(t);
		assert_true(r >= 0);
		steps++;
		made = 0;
		for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
			made += exists_rel(dirs[i]);
		assert_int_equal(made, steps); /* one more directory per step */
	} while (r > 0);
	assert_int_equal(steps, (int)ARRAY_SIZE(dirs));
	assert_false(exists_rel("pids/corral-test/q1"));
	assert_int_equal(cg_task_precreate_step(t), -EINVAL); /* complete */
	assert_true(cg_task_unified_id(t) != 0);
	assert_non_null(cg_task_path(t));
	assert_int_equal(cg_task_apply(t, &pids), 0);
	assert_string_equal(read_rel("pids/corral-test/q1/pids.max"), "32");
	/* a second cgroup of the same name fails at its first step, leaving the first intact */
	assert_int_equal(cg_task_precreate_begin(root, "q1", &none, &t2), 0);
	assert_int_equal(cg_task_precreate_step(t2), -EEXIST);
	cg_task_free(t2);
	assert_true(exists_rel("memory/corral-test/q1"));

	steps = 0;
	while ((r = cg_task_destroy_step(t)) > 0) {
		steps++;
		assert_true(exists_rel("memory/corral-test/q1")); /* the main one goes last */
	}
	assert_int_equal(r, 0);
	assert_int_equal(steps, (int)ARRAY_SIZE(dirs)); /* 5 with pids: 4 calls say more */
	assert_false(exists_rel("memory/corral-test/q1"));
	assert_false(exists_rel("pids/corral-test/q1"));
	assert_int_equal(cg_task_destroy_step(t), 0); /* nothing left */
	cg_task_free(t);
	cg_root_free(root);
}

static void test_v1_stats_and_kill(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_stats s;
	long hz = sysconf(_SC_CLK_TCK);
	char buf[32];
	pid_t child;
	int status;

	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	/* block stats and a pids limit: blkio and pids are joined too */
	{
		struct cg_limits sl = {
		    .swap_max = UINT64_MAX, .pids_max = 100, .block_stats = true};

		assert_int_equal(cg_task_create(root, "s", &sl, &t), 0);
	}
	write_rel("cpuacct/corral-test/s/cpuacct.usage", "2500000000\n");
	write_rel("cpuacct/corral-test/s/cpuacct.stat", "user 150\nsystem 50\n");
	write_rel("memory/corral-test/s/memory.usage_in_bytes", "1048576\n");
	write_rel("memory/corral-test/s/memory.max_usage_in_bytes", "67108864\n");
	write_rel("memory/corral-test/s/memory.failcnt", "40\n");
	write_rel("memory/corral-test/s/memory.memsw.failcnt", "2\n");
	write_rel("memory/corral-test/s/memory.oom_control",
		  "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
	write_rel("blkio/corral-test/s/blkio.throttle.io_service_bytes",
		  "8:0 Read 100\n8:0 Write 200\n8:0 Total 300\n8:16 Read 1\n8:16 Write 2\n"
		  "8:16 Total 3\nTotal 303\n");
	write_rel("pids/corral-test/s/pids.current", "3\n");
	assert_int_equal(cg_task_stats(t, &s), 0);
	assert_int_equal(s.cpu_usage_ns, 2500000000ULL);
	assert_int_equal(s.cpu_user_ns, 150ULL * NSEC_PER_SEC / (uint64_t)hz);
	assert_int_equal(s.cpu_system_ns, 50ULL * NSEC_PER_SEC / (uint64_t)hz);
	assert_int_equal(s.memory_current, 1048576);
	assert_int_equal(s.memory_peak, 67108864);
	assert_int_equal(s.oom_kills, 1);
	assert_int_equal(s.oom_events, 42);
	assert_int_equal(s.io_read_bytes, 101);
	assert_int_equal(s.io_write_bytes, 202);
	assert_int_equal(s.pids_current, 3);

	/* kill: freezer FROZEN -> signal every listed pid -> THAWED */
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		for (;;)
			pause();
	}
	snprintf(buf, sizeof(buf), "%d\n", (int)child);
	write_rel("freezer/corral-test/s/cgroup.procs", buf);
	assert_int_equal(cg_task_kill(t, SIGTERM), 0);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGTERM);
	assert_string_equal(read_rel("freezer/corral-test/s/freezer.state"), "THAWED");
	write_rel("freezer/corral-test/s/cgroup.procs", "");
	assert_int_equal(cg_task_kill(t, SIGKILL), 0); /* empty: returns at once */
	assert_int_equal(cg_task_kill(t, 0), -EINVAL);
	assert_int_equal(cg_task_is_empty(t), 1);
	assert_int_equal(cg_task_destroy(t), 0);
	cg_task_free(t);
	cg_root_free(root);
}

/* Parked: the task holds no fd; the periodic calls reopen by name and close again. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void test_v1_park(void **state)
{
	struct cg_limits lim = {.swap_max = UINT64_MAX, .pids_max = 10};
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_stats s;
	uint64_t cur = 0;
	pid_t *pids = NULL;
	size_t n = 1;
	int before, open_n, fd;

	make_v1_tree(true);
	root = open_root(CG_MODE_V1, NULL);
	before = open_fds();
	assert_int_equal(cg_task_create(root, "p", &lim, &t), 0);
	open_n = open_fds();
	assert_true(open_n > before);
	write_rel("cpuacct/corral-test/p/cpuacct.usage", "7\n");
	write_rel("cpuacct/corral-test/p/cpuacct.stat", "user 0\nsystem 0\n");
	write_rel("memory/corral-test/p/memory.usage_in_bytes", "4096\n");
	write_rel("memory/corral-test/p/memory.oom_control", "oom_kill 0\n");
	write_rel("pids/corral-test/p/pids.current", "2\n");
	cg_task_park(t);
	cg_task_park(t); /* twice: no change */
	assert_int_equal(open_fds(), before);
	assert_int_equal(cg_task_stats(t, &s), 0);
	assert_int_equal(s.cpu_usage_ns, 7);
	assert_int_equal(s.memory_current, 4096);
	assert_int_equal(s.pids_current, 2);
	assert_int_equal(cg_task_memory_current(t, &cur), 0);
	assert_int_equal(cur, 4096);
	assert_int_equal(cg_task_pids(t, &pids, &n), 0);
	assert_int_equal(n, 0);
	free(pids);
	assert_int_equal(cg_task_is_empty(t), 1);
	assert_int_equal(cg_task_kill(t, SIGKILL), 0);
	assert_int_equal(open_fds(), before); /* parked again after each */
	assert_true(cg_task_fits(t, &lim));
	/* an fd asked for stays open until the next park */
	fd = cg_task_v1_dir_fd(t, "pids");
	assert_true(fd >= 0);
	assert_int_equal(read_u64_file_at(fd, "pids.current", &cur), 0);
	assert_int_equal(cur, 2);
	assert_true(open_fds() > before);
	cg_task_park(t);
	assert_int_equal(open_fds(), before);
	/* a parked task is destroyed like any other */
	assert_int_equal(cg_task_destroy(t), 0);
	assert_false(exists_rel("memory/corral-test/p"));
	assert_false(exists_rel("pids/corral-test/p"));
	cg_task_free(t);
	assert_int_equal(open_fds(), before);
	cg_root_free(root);
}

static void test_v1_comount(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_limits l = {.swap_max = UINT64_MAX, .cpus = 1.5};
	struct cg_stats s;
	struct stat a, b;

	/* other hosts co-mount cpu and cpuacct: one hierarchy serves both */
	mkdir_rel("memory");
	mkdir_rel("cpu,cpuacct");
	mkdir_rel("freezer");
	root = open_root(CG_MODE_V1, NULL);
	assert_int_equal(cg_task_create(root, "t", &l, &t), 0);
	assert_string_equal(read_rel("cpu,cpuacct/corral-test/t/cpu.cfs_quota_us"), "150000");
	assert_int_equal(fstat(cg_task_v1_dir_fd(t, "cpu"), &a), 0);
	assert_int_equal(fstat(cg_task_v1_dir_fd(t, "cpuacct"), &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(cg_task_v1_dir_fd(t, "pids"), -1);
	write_rel("cpu,cpuacct/corral-test/t/cpuacct.usage", "7\n");
	write_rel("cpu,cpuacct/corral-test/t/cpuacct.stat", "user 0\nsystem 0\n");
	write_rel("memory/corral-test/t/memory.usage_in_bytes", "1\n");
	write_rel("memory/corral-test/t/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
	assert_int_equal(cg_task_stats(t, &s), 0);
	assert_int_equal(s.cpu_usage_ns, 7);
	assert_int_equal(s.oom_kills, 0); /* pre-4.13 oom_control without oom_kill */
	/* a limit needing an absent controller is refused, nothing left behind */
	l.pids_max = 10;
	assert_int_equal(cg_task_create(root, "u", &l, NULL), -EINVAL);
	{
		struct cg_task *u = NULL;

		assert_int_equal(cg_task_create(root, "u", &l, &u), -EOPNOTSUPP);
		assert_false(exists_rel("memory/corral-test/u"));
		assert_false(exists_rel("cpu,cpuacct/corral-test/u"));
	}
	assert_int_equal(cg_task_destroy(t), 0);
	assert_false(exists_rel("cpu,cpuacct/corral-test/t"));
	cg_task_free(t);
	cg_root_free(root);
}

/* ---- v2 on a fake tree ---- */

static void make_v2_base(void)
{
	mkdir_rel("system.slice/corrald.service");
	write_rel("cgroup.subtree_control", "cpu io memory pids\n");
	write_rel("system.slice/cgroup.subtree_control", "cpu io memory pids\n");
	/* the service's own level lacks io */
	write_rel("system.slice/corrald.service/cgroup.subtree_control", "cpu memory pids\n");
}

static void test_v2_limits(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_limits l = test_limits();
	char **names = NULL;
	size_t n = 0;

	make_v2_base();
	root = open_root(CG_MODE_V2, "/system.slice/corrald.service");
	assert_int_equal(cg_root_mode(root), CG_MODE_V2);
	assert_true(cg_root_has_unified(root));
	assert_true(cg_root_swap_accounting(root));
	/* only the missing controller is enabled at the base: one write of "+io" (the fake
	 * file is overwritten in place, so the old content shows behind it) */
	assert_string_equal(read_rel("system.slice/corrald.service/cgroup.subtree_control"),
			    "+io memory pids");
	assert_string_equal(read_rel("system.slice/cgroup.subtree_control"), "cpu io memory pids");

	assert_int_equal(cg_root_move_self(root, "agent"), 0);
	assert_int_equal(atoi(read_rel("system.slice/corrald.service/corral-test/agent/"
				       "cgroup.procs")),
			 (int)getpid());
	assert_int_equal(cg_task_create(root, "agent", &l, &t), -EINVAL);

	assert_int_equal(cg_task_create(root, "t1", &l, &t), 0);
#define T1 "system.slice/corrald.service/corral-test/t1/"
	assert_string_equal(read_rel(T1 "memory.max"), "67108864");
	assert_string_equal(read_rel(T1 "memory.high"), "50331648");
	assert_string_equal(read_rel(T1 "memory.swap.max"), "0");
	assert_string_equal(read_rel(T1 "cpu.max"), "50000 100000");
	assert_string_equal(read_rel(T1 "cpu.weight"), "200");
	assert_string_equal(read_rel(T1 "pids.max"), "16");
	assert_string_equal(read_rel(T1 "io.max"), "8:0 rbps=1048576 wbps=2097152");
	assert_true(cg_task_clone_fd(t) >= 0);
	assert_int_equal(cg_task_clone_fd(t), cg_task_unified_fd(t));
	assert_true(cg_task_clone_joins_all(t));
	assert_true(cg_task_unified_id(t) != 0);
	assert_int_equal(cg_task_v1_dir_fd(t, "devices"), -1);

	assert_int_equal(cg_root_list_tasks(root, &names, &n), 0);
	assert_int_equal(n, 1); /* the agent leaf is not a task */
	assert_string_equal(names[0], "t1");
	free(names[0]);
	free(names);

	/* stats fixtures */
	write_rel(T1 "cpu.stat", "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n"
				 "nr_periods 5\nnr_throttled 1\nthrottled_usec 10\n");
	write_rel(T1 "memory.current", "4096\n");
	write_rel(T1 "memory.peak", "8192\n");
	write_rel(T1 "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
	write_rel(T1 "io.stat", "8:0 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n"
				"259:1 rbytes=5 wbytes=6 rios=1 wios=1 dbytes=0 dios=0\n");
	write_rel(T1 "pids.current", "2\n");
	{
		struct cg_stats s;

		assert_int_equal(cg_task_stats(t, &s), 0);
		assert_int_equal(s.cpu_usage_ns, 3000000000ULL);
		assert_int_equal(s.cpu_user_ns, 2000000000ULL);
		assert_int_equal(s.cpu_system_ns, 1000000000ULL);
		assert_int_equal(s.memory_current, 4096);
		assert_int_equal(s.memory_peak, 8192);
		assert_int_equal(s.oom_events, 2);
		assert_int_equal(s.oom_kills, 1);
		assert_int_equal(s.io_read_bytes, 15);
		assert_int_equal(s.io_write_bytes, 26);
		assert_int_equal(s.pids_current, 2);
	}

	/* SIGKILL goes through cgroup.kill; other signals freeze/thaw */
	assert_int_equal(cg_task_kill(t, SIGKILL), 0);
	assert_string_equal(read_rel(T1 "cgroup.kill"), "1");
	assert_int_equal(cg_task_kill(t, SIGTERM), 0);
	assert_string_equal(read_rel(T1 "cgroup.freeze"), "0");

	assert_int_equal(cg_task_destroy(t), 0);
	assert_false(exists_rel(T1));
	assert_true(exists_rel("system.slice/corrald.service/corral-test/agent"));
	cg_task_free(t);
	cg_root_free(root);
#undef T1
}

/* The subtree's CPU time for the live walk's skip: v2's cpu.stat usage_usec in nanoseconds, and
 * none once the agent's own leaf is in the subtree (its CPU would move the count). */
static void test_v2_cpu_usage(void **state)
{
	struct cg_root *root;
	uint64_t ns = 0, res = 0;

	make_v2_base();
	root = open_root(CG_MODE_V2, "/system.slice/corrald.service");
	write_rel("system.slice/corrald.service/corral-test/cpu.stat",
		  "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n");
	assert_int_equal(cg_root_cpu_usage(root, &ns), 0);
	assert_int_equal(ns, 1234567000ULL);
	assert_string_equal(cg_root_cpu_usage_source(root, &res), "cpu.stat usage_usec");
	assert_int_equal(res, 1000);
	write_rel("system.slice/corrald.service/corral-test/cpu.stat", "user_usec 1\n");
	assert_int_equal(cg_root_cpu_usage(root, &ns), -EIO);
	assert_int_equal(cg_root_move_self(root, "agent"), 0);
	assert_int_equal(cg_root_cpu_usage(root, &ns), -EOPNOTSUPP);
	assert_null(cg_root_cpu_usage_source(root, &res));
	cg_root_free(root);
}

static void test_v2_no_swap(void **state)
{
	struct cg_root *root;
	struct cg_task *t = NULL;
	struct cg_limits l = {.swap_max = 0};
	struct cg_root_opts o = {
	    .fs_root = fake_root, .force_mode = CG_MODE_V2, .v2_base = "/system.slice/../etc"};

	fake_no_memsw = true; /* kernel without swap accounting: no memory.swap.max */
	make_v2_base();
	root = open_root(CG_MODE_V2, "/system.slice/corrald.service");
	assert_false(cg_root_swap_accounting(root));
	/* v2 refuses an unenforceable swap limit explicitly, and leaves nothing behind */
	assert_int_equal(cg_task_create(root, "u", &l, &t), -EOPNOTSUPP);
	assert_null(t);
	assert_false(exists_rel("system.slice/corrald.service/corral-test/u"));
	l.swap_max = UINT64_MAX;
	assert_int_equal(cg_task_create(root, "u", &l, &t), 0);
	assert_int_equal(cg_task_destroy(t), 0);
	cg_task_free(t);
	cg_root_free(root);

	assert_int_equal(cg_root_open(&o, &root), -EINVAL);
	o.v2_base = "relative";
	assert_int_equal(cg_root_open(&o, &root), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_cpu_quota),
	    cmocka_unit_test(test_limits_validate),
	    cmocka_unit_test(test_parse_keyed),
	    cmocka_unit_test(test_parse_io),
	    cmocka_unit_test(test_parse_pids),
	    cmocka_unit_test_setup_teardown(test_detect, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_limits, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_no_memsw_and_failure_cleanup, setup_tree,
					    teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_foreign, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_needed_hierarchies, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_precreate_apply, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_steps, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_stats_and_kill, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_park, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v1_comount, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v2_limits, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v2_cpu_usage, setup_tree, teardown_tree),
	    cmocka_unit_test_setup_teardown(test_v2_no_swap, setup_tree, teardown_tree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
