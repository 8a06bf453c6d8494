/* SPDX-License-Identifier: MIT */
/* isolation/seccomp: profile parsing errors, built-in profiles, and their effect in a child. */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/macro.h"
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
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child: %s %d", WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	sbx_filter_free(f);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_builtins),
		cmocka_unit_test(test_load_from_dir),
		cmocka_unit_test(test_semantics),
		cmocka_unit_test(test_default_in_child),
		cmocka_unit_test(test_strict_in_child),
		cmocka_unit_test(test_custom_rules_in_child),
#if defined(__x86_64__)
		cmocka_unit_test(test_foreign_abi_killed),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
