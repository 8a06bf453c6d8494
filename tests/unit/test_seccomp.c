/* SPDX-License-Identifier: MIT */
/* isolation/seccomp: profile parsing errors, built-in profiles, and their effect in a child. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/bpf.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <seccomp.h>

#include "common/macro.h"
#include "isolation/launch.h"
#include "isolation/seccomp.h"

#define ALLOW_HEAD "{\"defaultAction\":\"SCMP_ACT_ALLOW\","

struct err_case {
	const char *json;
	const char *want; /* substring of err */
};

static const struct err_case err_cases[] = {
    {"not json", "line 1"},
    {"[]", "profile: must be an object"},
    {"{}", "defaultAction: missing"},
    {"{\"defaultAction\":\"X\"}", "defaultAction: unknown action \"X\""},
    {"{\"defaultAction\":5}", "defaultAction: must be a string, not an integer"},
    {ALLOW_HEAD "\"bogus\":1}", "bogus: unknown key"},
    {ALLOW_HEAD "\"defaultErrnoRet\":1}", "defaultErrnoRet: only valid with SCMP_ACT_ERRNO"},
    {"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":5000}",
     "defaultErrnoRet: 5000 out of range"},
    {ALLOW_HEAD "\"defaultAction\":\"SCMP_ACT_LOG\"}", "duplicate object key"},
    {ALLOW_HEAD "\"architectures\":[\"SCMP_ARCH_X86_64\",\"SCMP_ARCH_FOO\"]}",
     "architectures[1]: unknown architecture \"SCMP_ARCH_FOO\""},
    {ALLOW_HEAD "\"architectures\":\"SCMP_ARCH_X86_64\"}", "architectures: must be an array"},
    {ALLOW_HEAD "\"archMap\":[{\"architecture\":\"SCMP_ARCH_X86_64\",\"sub\":[]}]}",
     "archMap[0].sub: unknown key"},
    {ALLOW_HEAD "\"syscalls\":{}}", "syscalls: must be an array, not an object"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ERRNO\"},"
		"{\"names\":[\"getppid\",\"foo\"],\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[1].names[1]: unknown syscall \"foo\""},
    {ALLOW_HEAD "\"syscalls\":[{\"name\":\"nosuchcall\",\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0].name: unknown syscall \"nosuchcall\""},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":\"getpid\",\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0].names: must be an array, not a string"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[],\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0].names: empty"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"]}]}", "syscalls[0].action: missing"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_NOPE\"}]}",
     "syscalls[0].action: unknown action \"SCMP_ACT_NOPE\""},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_NOTIFY\"}]}",
     "syscalls[0].action: action \"SCMP_ACT_NOTIFY\" is not supported"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_KILL\","
		"\"errnoRet\":1}]}",
     "syscalls[0].errnoRet: only valid with"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"errnoRet\":-1}]}",
     "syscalls[0].errnoRet: -1 out of range"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"color\":\"red\"}]}",
     "syscalls[0].color: unknown key"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"args\":[{\"index\":6,\"value\":1,\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "syscalls[0].args[0].index: argument index 6 out of range"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"args\":[{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_APPROX\"}]}]}",
     "syscalls[0].args[0].op: unknown operator \"SCMP_CMP_APPROX\""},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"args\":[{\"index\":0,\"value\":\"1\",\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "syscalls[0].args[0].value: must be an integer, not a string"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"args\":[{\"index\":0,\"value\":1,\"valueTwo\":2,\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "syscalls[0].args[0].valueTwo: only used with SCMP_CMP_MASKED_EQ"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"args\":[{\"index\":0,\"op\":\"SCMP_CMP_EQ\"}]}]}",
     "syscalls[0].args[0].value: missing"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"includes\":{\"arches\":[\"vax\"]}}]}",
     "syscalls[0].includes.arches[0]: unknown architecture \"vax\""},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"excludes\":{\"minKernel\":\"five\"}}]}",
     "syscalls[0].excludes.minKernel: not a kernel version"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\","
		"\"includes\":{\"privileged\":true}}]}",
     "syscalls[0].includes.privileged: unknown key"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"name\":\"dup\","
		"\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0]: both \"names\" and \"name\" given"},
    /* OCI members and containers-common's errno names */
    {ALLOW_HEAD "\"flags\":[\"SECCOMP_FILTER_FLAG_LOG\",\"SECCOMP_FILTER_FLAG_NOPE\"]}",
     "flags[1]: unknown flag \"SECCOMP_FILTER_FLAG_NOPE\""},
    {ALLOW_HEAD "\"flags\":\"SECCOMP_FILTER_FLAG_LOG\"}", "flags: must be an array"},
    {ALLOW_HEAD "\"listenerPath\":5}", "listenerPath: must be a string, not an integer"},
    {ALLOW_HEAD "\"listenerMetadata\":[]}", "listenerMetadata: must be a string, not an array"},
    {"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrno\":\"ENOPE\"}",
     "defaultErrno: unknown errno name \"ENOPE\""},
    {"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":1,\"defaultErrno\":\"ENOSYS\"}",
     "defaultErrno: \"ENOSYS\" (38) disagrees with defaultErrnoRet (1)"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_KILL\","
		"\"errno\":\"EPERM\"}]}",
     "syscalls[0].errno: only valid with"},
    /* a name this libseccomp does not know cannot be denied: an error, not a silent allow */
    {ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getpid\",\"corral_future_call\"],"
		"\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0].names[1]: unknown syscall \"corral_future_call\""},
    /* ... and in an allow rule only names shaped like syscall names are skipped */
    {"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"names\":[\"Get-Pid\"],"
     "\"action\":\"SCMP_ACT_ALLOW\"}]}",
     "syscalls[0].names[0]: unknown syscall \"Get-Pid\""},
    /* null means absent; a required member that is null is missing */
    {"{\"defaultAction\":null}", "defaultAction: missing"},
    {ALLOW_HEAD "\"syscalls\":[{\"names\":null,\"action\":\"SCMP_ACT_ERRNO\"}]}",
     "syscalls[0].names: missing"},
};

static void test_error_messages(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(err_cases); i++) {
		struct sbx_filter *f = NULL;
		char err[256] = "";
		int r;

		r = sbx_profile_compile(err_cases[i].json, strlen(err_cases[i].json), &f, err,
					sizeof(err));
		if (r != -EINVAL || !strstr(err, err_cases[i].want))
			fail_msg("case %zu: r=%d err=\"%s\", want -EINVAL and \"%s\"", i, r, err,
				 err_cases[i].want);
		assert_null(f);
	}
}

static void test_bounds(void **state)
{
	struct sbx_filter *f = NULL;
	char err[256] = "";
	size_t n = 1025, cap = 64 + n * 64;
	char *buf = malloc(cap), *p = buf;
	int r;

	assert_non_null(buf);
	p += sprintf(p, ALLOW_HEAD "\"syscalls\":[");
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s{\"names\":[\"getpid\"],\"action\":\"SCMP_ACT_LOG\"}",
			     i ? "," : "");
	p += sprintf(p, "]}");
	r = sbx_profile_compile(buf, (size_t)(p - buf), &f, err, sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_non_null(strstr(err, "syscalls: too many entries (1025"));
	free(buf);

	/* Over the size bound: refused before parsing. */
	buf = calloc(1, 2u << 20);
	assert_non_null(buf);
	memset(buf, ' ', (2u << 20) - 1);
	r = sbx_profile_compile(buf, (2u << 20) - 1, &f, err, sizeof(err));
	assert_int_equal(r, -E2BIG);
	assert_non_null(strstr(err, "too large"));
	free(buf);
}

static void test_builtins(void **state)
{
	struct sbx_filter *f = NULL;
	char err[256] = "";

	assert_non_null(sbx_builtin_profile("default"));
	assert_non_null(sbx_builtin_profile("strict"));
	assert_null(sbx_builtin_profile("unconfined"));
	assert_null(sbx_builtin_profile("nope"));
	assert_non_null(strstr(sbx_builtin_profile("default"), "\"defaultAction\""));

	assert_int_equal(sbx_profile_load("default", NULL, &f, err, sizeof(err)), 0);
	assert_non_null(f);
	assert_true(sbx_filter_len(f) > 20);
	sbx_filter_free(f);
	f = NULL;
	assert_int_equal(sbx_profile_load("strict", NULL, &f, err, sizeof(err)), 0);
	assert_non_null(f);
	assert_true(sbx_filter_len(f) > 20);
	sbx_filter_free(f);

	f = (struct sbx_filter *)&f; /* must be overwritten */
	assert_int_equal(sbx_profile_load("unconfined", NULL, &f, err, sizeof(err)), 0);
	assert_null(f);
	assert_int_equal(sbx_filter_apply(NULL), 0);
	assert_int_equal(sbx_filter_len(NULL), 0);

	assert_int_equal(sbx_profile_load("nope", NULL, &f, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "nope"));
	assert_int_equal(sbx_profile_load("..", "/tmp", &f, err, sizeof(err)), -EINVAL);
}

static void test_load_from_dir(void **state)
{
	char dir[] = "/tmp/corral-test-seccomp.XXXXXX", path[128], err[512] = "";
	struct sbx_filter *f = NULL;
	FILE *fp;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/custom.json", dir);
	fp = fopen(path, "we");
	assert_non_null(fp);
	fputs(ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\"}]}",
	      fp);
	fclose(fp);
	assert_int_equal(sbx_profile_load("custom", dir, &f, err, sizeof(err)), 0);
	assert_non_null(f);
	sbx_filter_free(f);
	f = NULL;
	assert_int_equal(sbx_profile_load(path, NULL, &f, err, sizeof(err)), 0);
	sbx_filter_free(f);
	f = NULL;
	assert_int_equal(sbx_profile_load("missing", dir, &f, err, sizeof(err)), -ENOENT);

	snprintf(path, sizeof(path), "%s/bad.json", dir);
	fp = fopen(path, "we");
	assert_non_null(fp);
	fputs(ALLOW_HEAD "\"syscalls\":[{\"names\":[\"foo\"],\"action\":\"SCMP_ACT_ERRNO\"}]}", fp);
	fclose(fp);
	assert_int_equal(sbx_profile_load("bad", dir, &f, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bad.json: syscalls[0].names[0]: unknown syscall \"foo\""));
	assert_null(f);
	/* Given by path, the caller names the profile: the path is not repeated. */
	assert_int_equal(sbx_profile_load(path, NULL, &f, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "syscalls[0].names[0]: unknown syscall \"foo\"");
	assert_null(f);
	snprintf(path, sizeof(path), "%s/none.json", dir);
	assert_int_equal(sbx_profile_load(path, NULL, &f, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, strerror(ENOENT));
	snprintf(path, sizeof(path), "%s/bad.json", dir);

	unlink(path);
	snprintf(path, sizeof(path), "%s/custom.json", dir);
	unlink(path);
	rmdir(dir);
}

static void test_semantics(void **state)
{
	struct sbx_filter *f = NULL;
	char err[256];
	size_t base, with;
	const char *p_base = ALLOW_HEAD "\"syscalls\":[]}";
	/* includes.caps never matches (tasks hold no capabilities), excludes.caps never excludes;
	 * a rule equal to the default action is a no-op; legacy "name" is accepted. */
	const char *p_caps =
	    ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\","
		       "\"includes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
		       "{\"name\":\"getpid\",\"action\":\"SCMP_ACT_ALLOW\"}]}";
	const char *p_excl =
	    ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\","
		       "\"excludes\":{\"caps\":[\"CAP_SYS_ADMIN\"]},"
		       "\"includes\":{\"minKernel\":\"3.0\"}}]}";
	const char *p_future =
	    ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\","
		       "\"includes\":{\"minKernel\":\"999.0\"}}]}";

	assert_int_equal(sbx_profile_compile(p_base, strlen(p_base), &f, err, sizeof(err)), 0);
	base = sbx_filter_len(f);
	sbx_filter_free(f);
	assert_int_equal(sbx_profile_compile(p_caps, strlen(p_caps), &f, err, sizeof(err)), 0);
	assert_int_equal(sbx_filter_len(f), base);
	sbx_filter_free(f);
	assert_int_equal(sbx_profile_compile(p_future, strlen(p_future), &f, err, sizeof(err)), 0);
	assert_int_equal(sbx_filter_len(f), base);
	sbx_filter_free(f);
	assert_int_equal(sbx_profile_compile(p_excl, strlen(p_excl), &f, err, sizeof(err)), 0);
	with = sbx_filter_len(f);
	assert_true(with > base);
	sbx_filter_free(f);
}

/* ---- in a child ----------------------------------------------------------------------------- */

static struct sbx_filter *load(const char *name)
{
	struct sbx_filter *f = NULL;
	char err[256] = "";

	if (sbx_profile_load(name, NULL, &f, err, sizeof(err)) < 0)
		fail_msg("load %s: %s", name, err);
	return f;
}

static struct sbx_filter *compile(const char *json)
{
	struct sbx_filter *f = NULL;
	char err[256] = "";

	if (sbx_profile_compile(json, strlen(json), &f, err, sizeof(err)) < 0)
		fail_msg("compile: %s", err);
	return f;
}

/* Child exit codes: 0 all checks passed, N = check N failed, 100+ = setup failed. */
/* A child's wait status is a clean exit 0, else fail saying how it ended (its exit code is
 * the number of the CHECK that failed). */
#define assert_child_ok(st)                                                                        \
	do {                                                                                       \
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)                                        \
			fail_msg("child: %s %d", WIFEXITED(st) ? "exit" : "signal",                \
				 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));                  \
	} while (0)

#define CHECK(n, cond)                                                                             \
	do {                                                                                       \
		if (!(cond))                                                                       \
			_exit(n);                                                                  \
	} while (0)

static void confine(const struct sbx_filter *f)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(100);
	if (sbx_filter_apply(f) < 0)
		_exit(101);
}

static int wait_child(pid_t pid)
{
	int st;

	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static void *thread_fn(void *arg)
{
	return arg;
}

static int fails_with(long r, int e)
{
	return r == -1 && errno == e;
}

static void default_checks(void)
{
	static int token;
	pthread_t t;
	void *tr = NULL;
	pid_t c;
	int st;

	CHECK(1, fails_with(mount("none", "/nonexistent-corral", "tmpfs", 0, NULL), EPERM));
	CHECK(2, fails_with(ptrace(PTRACE_TRACEME, 0, NULL, NULL), EPERM));
	CHECK(3, fails_with(syscall(SYS_bpf, BPF_MAP_CREATE, NULL, 0), EPERM));
	CHECK(4, fails_with(unshare(CLONE_NEWUSER), EPERM));
	CHECK(5, fails_with(unshare(CLONE_NEWNS), EPERM));
	CHECK(6, fails_with(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), EPERM));
	CHECK(7, fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS));
	CHECK(8, fails_with(syscall(SYS_setns, -1, 0), EPERM));
	CHECK(9, fails_with(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM));
	CHECK(10, fails_with(syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM));
	CHECK(11, fails_with(syscall(SYS_process_vm_readv, getppid(), NULL, 0, NULL, 0, 0), EPERM));
	CHECK(20, getpid() > 1 && syscall(SYS_getpid) == getpid());
	c = fork();
	CHECK(21, c >= 0);
	if (c == 0)
		_exit(7);
	CHECK(22, waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 7);
	CHECK(23, pthread_create(&t, NULL, thread_fn, &token) == 0);
	CHECK(24, pthread_join(t, &tr) == 0 && tr == &token);
	CHECK(25, unshare(CLONE_FILES) == 0); /* not a namespace */
	_exit(0);
}

static void test_default_in_child(void **state)
{
	struct sbx_filter *f = load("default");
	pid_t pid;
	int st;

	/* Control: without the filter PTRACE_TRACEME succeeds, so check 2 can fail. */
	pid = fork();
	if (pid == 0)
		_exit(ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0 ? 0 : 1);
	st = wait_child(pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	pid = fork();
	if (pid == 0) {
		confine(f);
		default_checks();
	}
	st = wait_child(pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child under default: %s %d", WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	sbx_filter_free(f);
}

static void test_strict_in_child(void **state)
{
	struct sbx_filter *f = load("strict");
	int p[2], st;
	char c = 0;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		confine(f);
		CHECK(1, getpid() > 1);
		CHECK(2, fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS));
		CHECK(3, write(p[1], "k", 1) == 1);
		mount("none", "/nonexistent-corral", "tmpfs", 0, NULL);
		_exit(50);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	assert_int_equal(c, 'k');
	close(p[0]);
	st = wait_child(pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSYS)
		fail_msg("child under strict: %s %d, want SIGSYS",
			 WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	sbx_filter_free(f);
}

static void test_custom_rules_in_child(void **state)
{
	struct sbx_filter *f = compile(
	    ALLOW_HEAD "\"syscalls\":["
		       "{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":99},"
		       "{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":77,"
		       "\"args\":[{\"index\":0,\"value\":0,\"op\":\"SCMP_CMP_EQ\"}]},"
		       "{\"names\":[\"getpriority\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":55,"
		       "\"args\":[{\"index\":1,\"value\":4095,\"valueTwo\":4095,"
		       "\"op\":\"SCMP_CMP_MASKED_EQ\"}]}]}");
	pid_t pid;
	int st;

	pid = fork();
	if (pid == 0) {
		int fd;

		confine(f);
		CHECK(1, fails_with(syscall(SYS_getppid), 99));
		CHECK(2, fails_with(dup(0), 77));
		fd = dup(1);
		CHECK(3, fd >= 0);
		CHECK(4, fails_with(syscall(SYS_getpriority, PRIO_PROCESS, 4095), 55));
		CHECK(5, !fails_with(syscall(SYS_getpriority, PRIO_PROCESS, 0), 55));
		_exit(0);
	}
	st = wait_child(pid);
	assert_child_ok(st);
	sbx_filter_free(f);
}

/*
 * OCI members, JSON null as absent everywhere, errno names, names this libseccomp does not
 * know in allow rules: accepted (compiled), with the notice in err.
 */
static void test_oci_members_and_nulls(void **state)
{
	static const char *const ok[] = {
	    /* every optional member null */
	    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":null,\"defaultErrno\":null,"
	    "\"architectures\":null,\"archMap\":null,\"syscalls\":null,\"comment\":null,"
	    "\"flags\":null,\"listenerPath\":null,\"listenerMetadata\":null}",
	    ALLOW_HEAD "\"archMap\":[{\"architecture\":\"SCMP_ARCH_X86_64\","
		       "\"subArchitectures\":null},{\"architecture\":\"SCMP_ARCH_RISCV64\","
		       "\"subArchitectures\":null}]}",
	    ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"name\":null,"
		       "\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":null,\"errno\":null,"
		       "\"args\":null,\"comment\":null,\"includes\":null,\"excludes\":null}]}",
	    ALLOW_HEAD "\"syscalls\":[{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_ERRNO\","
		       "\"includes\":{\"caps\":null,\"arches\":null,\"minKernel\":null},"
		       "\"excludes\":{\"caps\":null,\"arches\":null,\"minKernel\":null},"
		       "\"args\":[{\"index\":0,\"value\":1,\"valueTwo\":null,"
		       "\"op\":\"SCMP_CMP_EQ\"}]}]}",
	    /* OCI runtime-spec members */
	    ALLOW_HEAD "\"flags\":[\"SECCOMP_FILTER_FLAG_TSYNC\",\"SECCOMP_FILTER_FLAG_LOG\","
		       "\"SECCOMP_FILTER_FLAG_SPEC_ALLOW\","
		       "\"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV\"],"
		       "\"listenerPath\":\"/run/agent.sock\",\"listenerMetadata\":\"x\"}",
	    ALLOW_HEAD "\"architectures\":[\"SCMP_ARCH_NATIVE\",\"SCMP_ARCH_LOONGARCH64\","
		       "\"SCMP_ARCH_M68K\",\"SCMP_ARCH_SH\",\"SCMP_ARCH_SHEB\"]}",
	    /* containers-common: errno by name, alone or agreeing with the number */
	    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":38,"
	    "\"defaultErrno\":\"ENOSYS\",\"syscalls\":[{\"names\":[\"exit_group\"],"
	    "\"action\":\"SCMP_ACT_ALLOW\"},{\"names\":[\"getppid\"],"
	    "\"action\":\"SCMP_ACT_ERRNO\",\"errno\":\"EPERM\"}]}",
	};
	static const char *const skip =
	    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[{\"names\":[\"getpid\","
	    "\"corral_future_call\",\"another_new_call\"],\"action\":\"SCMP_ACT_ALLOW\"}]}";
	struct sbx_filter *f = NULL;
	char err[512];

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		int r = sbx_profile_compile(ok[i], strlen(ok[i]), &f, err, sizeof(err));

		if (r < 0 || !f || err[0])
			fail_msg("case %zu: r=%d err=\"%s\"", i, r, err);
		sbx_filter_free(f);
		f = NULL;
	}
	assert_int_equal(sbx_profile_compile(skip, strlen(skip), &f, err, sizeof(err)), 0);
	assert_non_null(f);
	assert_non_null(strstr(err, "2 allowed syscall name(s) unknown to libseccomp"));
	assert_non_null(strstr(err, "corral_future_call, another_new_call"));
	sbx_filter_free(f);
}

/* The profiles the container runtimes ship, as fetched (tests/fixtures/seccomp/README.md). */
static const char *fixture(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "tests/fixtures/seccomp/%s", name);
	if (access(buf, R_OK) < 0)
		fail_msg("%s: %s (run from the source tree)", buf, strerror(errno));
	return buf;
}

static const char *const runtime_profiles[] = {
    "moby-default.json",
    "containers-common-seccomp.json",
    "containers-common-example.json",
    "crun-seccomp-allow-default.json",
    "crun-seccomp-architectures.json",
    "crun-seccomp-block-syscall.json",
    "crun-seccomp-comparison-ops.json",
    "crun-seccomp-errno-default.json",
    "crun-seccomp-flags.json",
    "crun-seccomp-kill-action.json",
    "crun-seccomp-listener.json",
    "crun-seccomp-log-action.json",
    "crun-seccomp-multiple-syscalls.json",
    "crun-seccomp-syscall-args.json",
};

static void test_runtime_profiles_load(void **state)
{
	char path[256], err[512];

	for (size_t i = 0; i < ARRAY_SIZE(runtime_profiles); i++)
		for (unsigned int flags = 0; flags <= SBX_COMPILE_NOTIFY;
		     flags += SBX_COMPILE_NOTIFY) {
			struct sbx_filter *f = NULL;
			int r =
			    sbx_profile_load_flags(fixture(runtime_profiles[i], path, sizeof(path)),
						   NULL, flags, &f, err, sizeof(err));

			if (r < 0 || !f)
				fail_msg("%s (flags %u): r=%d %s", runtime_profiles[i], flags, r,
					 err);
			if (flags)
				assert_true(sbx_filter_notifies(f));
			sbx_filter_free(f);
		}

	/* moby allows calls newer than libseccomp 2.5's tables: skipped, and said so. */
	{
		struct sbx_filter *f = NULL;

		assert_int_equal(sbx_profile_load(fixture("moby-default.json", path, sizeof(path)),
						  NULL, &f, err, sizeof(err)),
				 0);
		sbx_filter_free(f);
		if (seccomp_syscall_resolve_name("mseal") == __NR_SCMP_ERROR)
			assert_non_null(strstr(err, "mseal"));
	}
	/* crun's test of its fail-unknown-syscall annotation: a deny rule for a call unknown to
	 * libseccomp cannot be honoured, so Corral refuses it (as crun does with the annotation).
	 */
	{
		struct sbx_filter *f = NULL;

		assert_int_equal(
		    sbx_profile_load(fixture("crun-annotation-seccomp-fail-unknown-syscall.json",
					     path, sizeof(path)),
				     NULL, &f, err, sizeof(err)),
		    -EINVAL);
		assert_string_equal(
		    err,
		    "syscalls[0].names[0]: unknown syscall \"this_syscall_does_not_exist_12345\"");
		assert_null(f);
	}
}

/* Applied in a child: the errno each profile gives is the one its JSON says. */
static void test_runtime_profiles_apply(void **state)
{
	static const struct {
		const char *name;
		int add_key_errno; /* add_key(NULL, ...): EFAULT without a filter */
		int getpid_errno;  /* 0: allowed */
	} cases[] = {
	    /* add_key is not in moby's allowlist: defaultErrnoRet 1 */
	    {"moby-default.json", EPERM, 0},
	    /* nor in containers-common's: defaultErrnoRet 38 / defaultErrno "ENOSYS" */
	    {"containers-common-seccomp.json", ENOSYS, 0},
	    /* crun's test blocks getpid with errnoRet 1 */
	    {"crun-seccomp-block-syscall.json", EFAULT, EPERM},
	    {"crun-seccomp-flags.json", EFAULT, 0},
	    {"crun-seccomp-listener.json", EFAULT, 0},
	};
	char path[256], err[512];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct sbx_filter *f = NULL;
		pid_t pid;
		int st;

		assert_int_equal(sbx_profile_load(fixture(cases[i].name, path, sizeof(path)), NULL,
						  &f, err, sizeof(err)),
				 0);
		pid = fork();
		if (pid == 0) {
			confine(f);
			CHECK(1, fails_with(syscall(SYS_add_key, NULL, NULL, NULL, 0, 0),
					    cases[i].add_key_errno));
			if (cases[i].getpid_errno)
				CHECK(2, fails_with(syscall(SYS_getpid), cases[i].getpid_errno));
			else
				CHECK(3, syscall(SYS_getpid) == getpid());
			_exit(0);
		}
		st = wait_child(pid);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("%s: child %s %d", cases[i].name,
				 WIFEXITED(st) ? "exit" : "signal",
				 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		sbx_filter_free(f);
	}
}

#if defined(__x86_64__)
static long int80_getpid(void)
{
	long r = 20; /* __NR_getpid on i386 */

	__asm__ volatile("int $0x80" : "+a"(r) : : "memory");
	return r;
}

/* Foreign ABIs (x32 numbers, i386 via int 0x80) are not covered by native rules: killed. */
static void test_foreign_abi_killed(void **state)
{
	struct sbx_filter *f = load("default");
	pid_t pid;
	int st;

	/* x32 syscall numbers (with __X32_SYSCALL_BIT): the filter decides before the kernel
	 * looks the number up, so this holds whether or not the kernel has x32 support. */
	pid = fork();
	if (pid == 0) {
		confine(f);
		syscall(0x40000000L | SYS_getpid);
		_exit(0);
	}
	st = wait_child(pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);

	pid = fork();
	if (pid == 0)
		_exit(int80_getpid() == getpid() ? 0 : 1);
	st = wait_child(pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		sbx_filter_free(f);
		skip(); /* kernel without IA32 emulation */
	}
	pid = fork();
	if (pid == 0) {
		confine(f);
		int80_getpid();
		_exit(0);
	}
	st = wait_child(pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);
	sbx_filter_free(f);
}
#endif

/* ---- audit of denied calls: SBX_COMPILE_NOTIFY --------------------------------------------- */

static struct sbx_filter *load_notify(const char *name)
{
	struct sbx_filter *f = NULL;
	char err[256];

	if (sbx_profile_load_flags(name, NULL, SBX_COMPILE_NOTIFY, &f, err, sizeof(err)) < 0)
		fail_msg("load %s (notify): %s", name, err);
	assert_true(sbx_filter_notifies(f));
	return f;
}

static struct sbx_filter *compile_notify(const char *json)
{
	struct sbx_filter *f = NULL;
	char err[256];

	if (sbx_profile_compile_flags(json, strlen(json), SBX_COMPILE_NOTIFY, &f, err,
				      sizeof(err)) < 0)
		fail_msg("compile (notify): %s", err);
	return f;
}

static uint32_t native_arch(void)
{
	return seccomp_arch_native(); /* SCMP_ARCH_* tokens are the AUDIT_ARCH_* values */
}

static uint32_t eval(const struct sbx_filter *f, bool installed, int nr, uint64_t a0)
{
	struct seccomp_data d = {.nr = nr, .arch = native_arch(), .args = {a0}};

	return sbx_filter_eval(f, &d, installed);
}

#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | (uint32_t)(e))

/* The interpreter gives what the kernel gives; the notifying variant differs exactly where
 * the profile denies with an errno other than ENOSYS or kills. */
static void test_eval_and_notify_variant(void **state)
{
	struct sbx_filter *plain = load("default"), *nd = load_notify("default");
	struct sbx_filter *ns = load_notify("strict");

	assert_false(sbx_filter_notifies(plain));
	assert_true(sbx_filter_len(nd) > 0);
	for (int installed = 0; installed < 2; installed++) {
		/* the plain filter's installed program is the profile itself */
		assert_int_equal(eval(plain, installed, SYS_ptrace, 0), RET_ERRNO(EPERM));
		assert_int_equal(eval(plain, installed, SYS_getpid, 0), SECCOMP_RET_ALLOW);
		assert_int_equal(eval(plain, installed, SYS_clone3, 0), RET_ERRNO(ENOSYS));
	}
	/* reference program of the notifying filter = the profile */
	assert_int_equal(eval(nd, false, SYS_ptrace, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nd, false, SYS_unshare, CLONE_NEWUSER), RET_ERRNO(EPERM));
	assert_int_equal(eval(nd, false, SYS_unshare, CLONE_FILES), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nd, false, SYS_clone3, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(nd, false, SYS_getpid, 0), SECCOMP_RET_ALLOW);
	/* installed: denials notify, ENOSYS answers and allowed calls stay in the kernel */
	assert_int_equal(eval(nd, true, SYS_ptrace, 0), SECCOMP_RET_USER_NOTIF);
	assert_int_equal(eval(nd, true, SYS_unshare, CLONE_NEWUSER), SECCOMP_RET_USER_NOTIF);
	assert_int_equal(eval(nd, true, SYS_unshare, CLONE_FILES), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nd, true, SYS_clone3, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(nd, true, SYS_io_uring_setup, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(nd, true, SYS_getpid, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nd, true, SYS_sendmsg, 3), SECCOMP_RET_ALLOW);
	/* strict: kill-process in the profile, a notification in the installed program */
	assert_int_equal(eval(ns, false, SYS_mount, 0), SECCOMP_RET_KILL_PROCESS);
	assert_int_equal(eval(ns, true, SYS_mount, 0), SECCOMP_RET_USER_NOTIF);
	assert_int_equal(eval(ns, true, SYS_clone3, 0), RET_ERRNO(ENOSYS));
#if defined(__x86_64__)
	{
		/* foreign ABIs: killed by the profile, notified by the installed program */
		struct seccomp_data x32 = {.nr = 0x40000000 | SYS_getpid,
					   .arch = AUDIT_ARCH_X86_64};
		struct seccomp_data i386 = {.nr = 20, .arch = AUDIT_ARCH_I386};

		assert_int_equal(sbx_filter_eval(nd, &x32, false), SECCOMP_RET_KILL_PROCESS);
		assert_int_equal(sbx_filter_eval(nd, &i386, false), SECCOMP_RET_KILL_PROCESS);
		assert_int_equal(sbx_filter_eval(nd, &x32, true), SECCOMP_RET_USER_NOTIF);
		assert_int_equal(sbx_filter_eval(plain, &i386, true), SECCOMP_RET_KILL_PROCESS);
	}
#endif
	sbx_filter_free(plain);
	sbx_filter_free(nd);
	sbx_filter_free(ns);
}

/* An allowlist: an errno default notifies; a kill rule maps to the same installed action. */
static void test_notify_allowlist(void **state)
{
	struct sbx_filter *f = compile_notify(
	    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":13,\"syscalls\":["
	    "{\"names\":[\"read\",\"sendmsg\",\"getpid\"],\"action\":\"SCMP_ACT_ALLOW\"},"
	    "{\"names\":[\"getppid\"],\"action\":\"SCMP_ACT_KILL_PROCESS\"},"
	    "{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":38}]}");

	assert_int_equal(eval(f, false, SYS_getuid, 0), RET_ERRNO(13));
	assert_int_equal(eval(f, true, SYS_getuid, 0), SECCOMP_RET_USER_NOTIF);
	assert_int_equal(eval(f, false, SYS_getppid, 0), SECCOMP_RET_KILL_PROCESS);
	assert_int_equal(eval(f, true, SYS_getppid, 0), SECCOMP_RET_USER_NOTIF);
	assert_int_equal(eval(f, true, SYS_dup, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(f, true, SYS_getpid, 0), SECCOMP_RET_ALLOW);
	sbx_filter_free(f);
}

struct supervised {
	struct sbx_notify_event ev[64];
	size_t n;
	bool killed[64];
	int status;
};

/*
 * The supervisor's side of a child running under a notifying filter: receive the listener,
 * answer every notification until the child is gone, reap it. Returns -EPIPE when the child
 * never handed a listener over (it then ran under the profile's own program).
 */
static int supervise_ack(pid_t pid, int sock, const struct sbx_filter *f, struct supervised *out,
			 bool ack)
{
	struct sbx_notifier *n = NULL;
	int lfd = -1, pfd, r;

	memset(out, 0, sizeof(*out));
	pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(pfd >= 0);
	r = sbx_listener_receive(sock, &lfd, ack);
	if (r < 0) {
		out->status = wait_child(pid);
		close(pfd);
		return r;
	}
	assert_true(fcntl(lfd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(sbx_notifier_new(lfd, f, &n), 0);
	for (;;) {
		struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = pfd, .events = POLLIN}};

		assert_true(poll(p, 2, -1) > 0);
		if (p[0].revents & POLLIN) {
			struct sbx_notify_event ev;

			r = sbx_notifier_receive(n, &ev);
			if (r == -ENOENT)
				continue;
			assert_int_equal(r, 0);
			assert_true(out->n < ARRAY_SIZE(out->ev));
			assert_true(sbx_notifier_pending(n, &ev));
			out->ev[out->n] = ev;
			assert_int_equal(sbx_notifier_answer(n, &ev, &out->killed[out->n]), 0);
			out->n++;
			continue;
		}
		if (p[1].revents & POLLIN)
			break;
	}
	out->status = wait_child(pid);
	/* reaped: no process uses the filter any more */
	{
		struct pollfd p = {.fd = lfd, .events = POLLIN};

		assert_int_equal(poll(&p, 1, 0), 1);
		assert_true(p.revents & POLLHUP);
	}
	sbx_notifier_free(n);
	close(lfd);
	close(pfd);
	return 0;
}

static int supervise(pid_t pid, int sock, const struct sbx_filter *f, struct supervised *out)
{
	return supervise_ack(pid, sock, f, out, true);
}

static void child_handoff(const struct sbx_filter *f, int sock, int want)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(100);
	if (sbx_filter_apply_handoff(f, sock, 0) != want)
		_exit(101);
	close(sock);
}

static void test_notify_in_child(void **state)
{
	struct sbx_filter *f = load_notify("default");
	struct supervised sv;
	int sp[2];
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pid = fork();
	if (pid == 0) {
		close(sp[0]);
		child_handoff(f, sp[1], 1);
		/* the same results as without audit (default_checks), each denial notified */
		CHECK(1, fails_with(ptrace(PTRACE_TRACEME, 0, NULL, NULL), EPERM));
		CHECK(2, syscall(SYS_getpid) == getpid());
		CHECK(3, fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS)); /* not notified */
		for (int i = 0; i < 5; i++)
			CHECK(4, fails_with(mount("none", "/nonexistent-corral", "tmpfs", 0, NULL),
					    EPERM));
		CHECK(5, fails_with(unshare(CLONE_NEWUSER), EPERM));
		CHECK(6, unshare(CLONE_FILES) == 0);
		_exit(0);
	}
	close(sp[1]);
	assert_int_equal(supervise(pid, sp[0], f, &sv), 0);
	close(sp[0]);
	assert_child_ok(sv.status);
	assert_int_equal(sv.n, 7);
	assert_int_equal(sv.ev[0].nr, SYS_ptrace);
	assert_int_equal(sv.ev[0].args[0], PTRACE_TRACEME);
	assert_int_equal(sv.ev[0].tid, pid);
	assert_int_equal(sv.ev[0].arch, native_arch());
	assert_int_equal(sv.ev[0].action, RET_ERRNO(EPERM));
	for (size_t i = 1; i <= 5; i++) {
		assert_int_equal(sv.ev[i].nr, SYS_mount);
		assert_int_equal(sv.ev[i].action, RET_ERRNO(EPERM));
		assert_false(sv.killed[i]);
	}
	assert_int_equal(sv.ev[6].nr, SYS_unshare);
	assert_int_equal(sv.ev[6].args[0], CLONE_NEWUSER);
	sbx_filter_free(f);
}

/*
 * SBX_HANDOFF_NO_ACK (a child whose supervisor is suspended until it execs): no ack awaited,
 * the child's listener is close-on-exec (execve drops it without a call under the filter),
 * and denials after the handoff are still answered once the supervisor receives it.
 */
static void test_notify_no_ack(void **state)
{
	struct sbx_filter *f = load_notify("default");
	struct supervised sv;
	int sp[2];
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pid = fork();
	if (pid == 0) {
		char *const argv[] = {"true", NULL}, *const envp[] = {NULL};
		bool before[1024];
		int new_fds = 0;

		close(sp[0]);
		for (int fd = 0; fd < 1024; fd++)
			before[fd] = fcntl(fd, F_GETFD) >= 0;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			_exit(100);
		if (sbx_filter_apply_handoff(f, sp[1], SBX_HANDOFF_NO_ACK) != 1)
			_exit(101);
		for (int fd = 0; fd < 1024; fd++) {
			int fl = fcntl(fd, F_GETFD);

			if (fl < 0 || before[fd])
				continue;
			new_fds++; /* the listener, still open */
			if (!(fl & FD_CLOEXEC))
				_exit(102);
		}
		if (new_fds != 1)
			_exit(103);
		CHECK(1, fails_with(ptrace(PTRACE_TRACEME, 0, NULL, NULL), EPERM));
		execve("/bin/true", argv, envp);
		_exit(104);
	}
	close(sp[1]);
	assert_int_equal(supervise_ack(pid, sp[0], f, &sv, false), 0);
	close(sp[0]);
	assert_child_ok(sv.status);
	assert_int_equal(sv.n, 1);
	assert_int_equal(sv.ev[0].nr, SYS_ptrace);
	assert_int_equal(sv.ev[0].action, RET_ERRNO(EPERM));
	sbx_filter_free(f);
}

/* strict: the notified call is answered by killing the process; it never returns. */
static void test_notify_strict_kills(void **state)
{
	struct sbx_filter *f = load_notify("strict");
	struct supervised sv;
	int sp[2];
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pid = fork();
	if (pid == 0) {
		close(sp[0]);
		child_handoff(f, sp[1], 1);
		CHECK(1, fails_with(syscall(SYS_clone3, NULL, 0), ENOSYS));
		mount("none", "/nonexistent-corral", "tmpfs", 0, NULL);
		_exit(50);
	}
	close(sp[1]);
	assert_int_equal(supervise(pid, sp[0], f, &sv), 0);
	close(sp[0]);
	assert_int_equal(sv.n, 1);
	assert_int_equal(sv.ev[0].nr, SYS_mount);
	assert_int_equal(sv.ev[0].action, SECCOMP_RET_KILL_PROCESS);
	assert_true(sv.killed[0]);
	if (!WIFSIGNALED(sv.status) || WTERMSIG(sv.status) != SIGKILL)
		fail_msg("child: %s %d, want SIGKILL", WIFEXITED(sv.status) ? "exit" : "signal",
			 WIFEXITED(sv.status) ? WEXITSTATUS(sv.status) : WTERMSIG(sv.status));
	sbx_filter_free(f);
}

/* A profile that would notify the handoff's own sendmsg is installed without a listener. */
static void test_notify_handoff_refused(void **state)
{
	struct sbx_filter *f =
	    compile_notify(ALLOW_HEAD "\"syscalls\":[{\"names\":[\"sendmsg\",\"getppid\"],"
				      "\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":77}]}");
	struct supervised sv;
	int sp[2];
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pid = fork();
	if (pid == 0) {
		close(sp[0]);
		child_handoff(f, sp[1], 0);
		CHECK(1, fails_with(syscall(SYS_getppid), 77)); /* the profile still applies */
		_exit(0);
	}
	close(sp[1]);
	assert_int_equal(supervise(pid, sp[0], f, &sv), -EPIPE);
	close(sp[0]);
	assert_true(WIFEXITED(sv.status));
	assert_int_equal(WEXITSTATUS(sv.status), 0);
	sbx_filter_free(f);
}

static void test_names(void **state)
{
	char buf[64];
	const char *arch = NULL;

	assert_int_equal(sbx_syscall_name(native_arch(), SYS_ptrace, buf, sizeof(buf), &arch), 0);
	assert_string_equal(buf, "ptrace");
#if defined(__x86_64__)
	assert_string_equal(arch, "x86_64");
	assert_int_equal(sbx_syscall_name(AUDIT_ARCH_X86_64, 101, buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "ptrace");
	assert_int_equal(sbx_syscall_name(AUDIT_ARCH_I386, 26, buf, sizeof(buf), &arch), 0);
	assert_string_equal(buf, "ptrace");
	assert_string_equal(arch, "x86");
	assert_int_equal(
	    sbx_syscall_name(AUDIT_ARCH_X86_64, 0x40000000 | 39, buf, sizeof(buf), &arch), 0);
	assert_string_equal(buf, "getpid");
	assert_string_equal(arch, "x32");
#endif
	assert_int_equal(sbx_syscall_name(native_arch(), 99999, buf, sizeof(buf), NULL), -ENOENT);
	assert_string_equal(buf, "nr_99999");
	assert_string_equal(sbx_action_name(RET_ERRNO(EPERM)), "errno");
	assert_string_equal(sbx_action_name(SECCOMP_RET_KILL_PROCESS), "kill");
	assert_string_equal(sbx_action_name(SECCOMP_RET_KILL_THREAD), "kill_thread");
	assert_string_equal(sbx_action_name(SECCOMP_RET_ALLOW), "allow");
}

/* The shim's lines (isolation/launch.h), as the agent parses them. */
static void test_syscall_lines(void **state)
{
	struct launch_syscall_line l;

	assert_int_equal(launch_parse_syscall_line("S 3 1700000000123456789 41 42 c000003e 101 "
						   "50001 0 0 0 0 ffffffffffffffff 7",
						   &l),
			 0);
	assert_int_equal(l.kind, LAUNCH_SYSCALL_CALL);
	assert_int_equal(l.seq, 3);
	assert_int_equal(l.time_ns, 1700000000123456789ULL);
	assert_int_equal(l.pid, 41);
	assert_int_equal(l.tid, 42);
	assert_int_equal(l.arch, 0xc000003e);
	assert_int_equal(l.nr, 101);
	assert_int_equal(l.action, RET_ERRNO(EPERM));
	assert_int_equal(l.args[4], UINT64_MAX);
	assert_int_equal(l.args[5], 7);
	assert_int_equal(launch_parse_syscall_line("E 1001 5000 1000 1", &l), 0);
	assert_int_equal(l.kind, LAUNCH_SYSCALL_END);
	assert_int_equal(l.seq, 1001);
	assert_int_equal(l.total, 5000);
	assert_int_equal(l.recorded, 1000);
	assert_true(l.listener);
	assert_int_equal(launch_parse_syscall_line("E 1 0 0 0", &l), 0);
	assert_false(l.listener);
	assert_int_equal(launch_parse_syscall_line("E 1 0 0 2", &l), -EINVAL);
	assert_int_equal(launch_parse_syscall_line("E 0 0 0 1", &l), -EINVAL);
	assert_int_equal(launch_parse_syscall_line("S 3 1 41 42 c000003e 101 50001 0 0 0", &l),
			 -EINVAL);
	assert_int_equal(launch_parse_syscall_line("E 1 0 0 1 junk", &l), -EINVAL);
	assert_int_equal(launch_parse_syscall_line("X 0 0 0 0 0", &l), -EINVAL);
	assert_int_equal(launch_parse_syscall_line("", &l), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_builtins),
		cmocka_unit_test(test_load_from_dir),
		cmocka_unit_test(test_semantics),
		cmocka_unit_test(test_oci_members_and_nulls),
		cmocka_unit_test(test_runtime_profiles_load),
		cmocka_unit_test(test_runtime_profiles_apply),
		cmocka_unit_test(test_default_in_child),
		cmocka_unit_test(test_strict_in_child),
		cmocka_unit_test(test_custom_rules_in_child),
#if defined(__x86_64__)
		cmocka_unit_test(test_foreign_abi_killed),
#endif
		cmocka_unit_test(test_eval_and_notify_variant),
		cmocka_unit_test(test_notify_allowlist),
		cmocka_unit_test(test_notify_in_child),
		cmocka_unit_test(test_notify_no_ack),
		cmocka_unit_test(test_notify_strict_kills),
		cmocka_unit_test(test_notify_handoff_refused),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_syscall_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
