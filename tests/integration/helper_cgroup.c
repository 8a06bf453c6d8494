/* SPDX-License-Identifier: MIT */
/*
 * Exercises the real cgroup backend (v1/hybrid on this host) for tests/integration/cgroup_v1.sh.
 * helper_cgroup SUBTREE           run every check, print figures, exit 0 if all pass
 * helper_cgroup --work hog|spin|forkbomb|daemon|sleep   (workloads, exec'd inside the task)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libcgroup.h>

#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "isolation/cgroup.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (cond) {                                                                        \
			printf("ok   ");                                                           \
		} else {                                                                           \
			printf("FAIL ");                                                           \
			failures++;                                                                \
		}                                                                                  \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
		fflush(stdout);                                                                    \
	} while (0)

static const char *self_exe;

/* ---- workloads ---- */

static _noreturn_ int work_hog(void)
{
	/* touch 1 MiB chunks, kept reachable (a compiler may drop unused allocations), until
	 * the OOM killer ends us */
	void **list = NULL;

	for (;;) {
		void **p = malloc(1 << 20);

		if (!p)
			continue;
		memset(p, 0x5a, 1 << 20);
		p[0] = list;
		list = p;
		__asm__ volatile("" : : "r"(list) : "memory");
	}
}

static _noreturn_ int work_spin(void)
{
	volatile unsigned long x = 0;

	for (;;)
		x++;
}

/* Fork until fork fails, report the count of live children on fd 3, then wait. */
static int work_forkbomb(void)
{
	unsigned forked = 0, failed = 0;
	char buf[64];

	while (failed < 50) {
		pid_t p = fork();

		if (p == 0) {
			for (;;)
				pause();
		}
		if (p < 0)
			failed++;
		else
			forked++;
		if (forked > 1000)
			break;
	}
	snprintf(buf, sizeof(buf), "%u\n", forked);
	if (write(3, buf, strlen(buf)) < 0)
		return 1;
	for (;;)
		pause();
}

/* Double-fork a daemonized grandchild (setsid, parent exits); report its pid on fd 3. */
static int work_daemon(void)
{
	pid_t p = fork();

	if (p < 0)
		return 1;
	if (p == 0) {
		if (setsid() < 0)
			_exit(1);
		p = fork();
		if (p == 0) {
			char buf[32];

			snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
			if (write(3, buf, strlen(buf)) < 0)
				_exit(1);
			close(3);
			for (;;)
				pause();
		}
		_exit(p < 0);
	}
	waitpid(p, NULL, 0);
	close(3);
	for (;;)
		pause();
}

/* ---- harness ---- */

/* Fork a child that joins t and execs "self --work NAME"; fd 3 of the child = pipe write end. */
static pid_t spawn(struct cg_task *t, const char *work, int *ret_rfd)
{
	int p[2] = {-1, -1};
	pid_t pid;

	if (ret_rfd && pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (cg_task_join_self(t, false) < 0)
			_exit(126);
		if (ret_rfd && dup2(p[1], 3) < 0)
			_exit(126);
		execl(self_exe, self_exe, "--work", work, (char *)NULL);
		_exit(127);
	}
	if (ret_rfd) {
		close(p[1]);
		*ret_rfd = p[0];
	}
	return pid;
}

/* Read a line from fd with a timeout; returns bytes or -1. */
static ssize_t read_line_timeout(int fd, char *buf, size_t len, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -1;
	n = read(fd, buf, len - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* waitpid with a deadline (polling WNOHANG): 0 and *status, or -1 on timeout. */
static int wait_child(pid_t pid, int *status, int timeout_ms)
{
	for (int ms = 0; ms < timeout_ms; ms += 5) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		if (r < 0)
			return -1;
		usleep(5000);
	}
	return -1;
}

static int wait_empty(struct cg_task *t, int timeout_ms)
{
	for (int ms = 0; ms < timeout_ms; ms += 5) {
		if (cg_task_is_empty(t) == 1)
			return 0;
		usleep(5000);
	}
	return -1;
}

static const char *const hier_dirs[] = {"memory", "cpu",     "cpuacct", "pids",
					"blkio",  "freezer", "devices", "unified"};

static int count_dirs(const char *subtree, const char *name)
{
	int n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(hier_dirs); i++) {
		char p[512];
		struct stat st;

		snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s/%s", hier_dirs[i], subtree, name);
		if (stat(p, &st) == 0)
			n++;
	}
	return n;
}

static struct cg_task *create(struct cg_root *root, const char *name, const struct cg_limits *l)
{
	struct cg_task *t = NULL;
	int r = cg_task_create(root, name, l, &t);

	CHECK(r == 0, "create %s: %s", name, r == 0 ? cg_task_path(t) : strerror(-r));
	return t;
}

static void destroy(struct cg_task *t, const char *subtree)
{
	char name[80];
	int r;

	snprintf(name, sizeof(name), "%s", cg_task_name(t));
	r = cg_task_destroy(t);
	CHECK(r == 0 && count_dirs(subtree, name) == 0,
	      "destroy %s: r=%d, directories left in all hierarchies: %d", name, r,
	      count_dirs(subtree, name));
	cg_task_free(t);
}

static struct cg_limits std_limits(void)
{
	struct cg_limits l = {
	    .memory_max = 64ULL << 20,
	    .swap_max = 0,
	    .cpus = 0.5,
	    .pids_max = 16,
	    .block_stats = true, /* every v1 hierarchy, for the mount cross-check below */
	    .devices = true,
	};
	return l;
}

static void check_mounts_libcgroup(struct cg_task *t)
{
	/* independent cross-check of mount discovery through libcgroup */
	static const char *const ctrls[] = {"memory",  "cpu",	  "cpuacct", "pids",
					    "freezer", "devices", "blkio"};
	int r = cgroup_init();

	if (r != 0) {
		CHECK(0, "libcgroup cgroup_init: %s", cgroup_strerror(r));
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ctrls); i++) {
		char *mp = NULL, link[64], target[512];
		int fd = cg_task_v1_dir_fd(t, ctrls[i]);
		ssize_t n;

		if (cgroup_get_subsys_mount_point(ctrls[i], &mp) != 0 || fd < 0) {
			CHECK(0, "mount of %s (libcgroup %s, fd %d)", ctrls[i], mp ? mp : "-", fd);
			free(mp);
			continue;
		}
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = 0;
		CHECK(strncmp(target, mp, strlen(mp)) == 0 && target[strlen(mp)] == '/',
		      "%s hierarchy %s agrees with libcgroup mount %s", ctrls[i], target, mp);
		free(mp);
	}
}

static void test_oom(struct cg_root *root, const char *subtree)
{
	struct cg_limits l = std_limits();
	struct cg_task *t;
	struct cg_stats s;
	pid_t pid;
	int status = 0;

	t = create(root, "oom", &l);
	if (!t)
		return;
	check_mounts_libcgroup(t);
	CHECK(cg_task_unified_fd(t) >= 0 && cg_task_unified_id(t) != 0,
	      "hybrid: unified dir fd %d, cgroup id %llu", cg_task_unified_fd(t),
	      (unsigned long long)cg_task_unified_id(t));
	pid = spawn(t, "hog", NULL);
	if (wait_child(pid, &status, 60000) < 0) {
		CHECK(0, "memory hog did not end within 60 s");
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	cg_task_stats(t, &s);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && s.oom_kills >= 1,
	      "memory hog under 64M: %s %d, oom_kills=%llu peak=%llu MiB failcnt=%llu",
	      WIFSIGNALED(status) ? "signal" : "exit",
	      WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
	      (unsigned long long)s.oom_kills, (unsigned long long)(s.memory_peak >> 20),
	      (unsigned long long)s.oom_events);
	CHECK(s.memory_peak <= (64ULL << 20) && s.memory_peak > (32ULL << 20),
	      "memory peak %llu bytes within the 64M limit", (unsigned long long)s.memory_peak);
	destroy(t, subtree);

	t = create(root, "kill9", &l);
	if (!t)
		return;
	pid = spawn(t, "sleep", NULL);
	/* wait until the child is inside the cgroup, then kill -9 it from outside */
	for (int i = 0; i < 2000 && cg_task_is_empty(t) == 1; i++)
		usleep(1000);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	cg_task_stats(t, &s);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && s.oom_kills == 0,
	      "plain kill -9: signal %d, oom_kills=%llu (not an OOM kill)",
	      WIFSIGNALED(status) ? WTERMSIG(status) : 0, (unsigned long long)s.oom_kills);
	CHECK(wait_empty(t, 5000) == 0, "kill9 task empty");
	destroy(t, subtree);
}

static void test_forkbomb(struct cg_root *root, const char *subtree)
{
	struct cg_limits l = std_limits();
	struct cg_task *t;
	struct cg_stats s;
	char buf[64];
	int rfd = -1, status, r;
	pid_t pid;
	unsigned forked = 0;

	t = create(root, "forkbomb", &l);
	if (!t)
		return;
	pid = spawn(t, "forkbomb", &rfd);
	if (read_line_timeout(rfd, buf, sizeof(buf), 30000) > 0)
		forked = (unsigned)atoi(buf);
	close(rfd);
	cg_task_stats(t, &s);
	CHECK(forked > 0 && forked <= 15 && s.pids_current <= 16,
	      "fork bomb under pids 16: %u forks succeeded, pids.current=%llu", forked,
	      (unsigned long long)s.pids_current);
	r = cg_task_kill(t, SIGKILL);
	CHECK(r == 0 && cg_task_is_empty(t) == 1, "fork bomb killed: r=%d", r);
	waitpid(pid, &status, 0);
	destroy(t, subtree);
}

static void test_cpu(struct cg_root *root, const char *subtree)
{
	struct cg_limits l = std_limits();
	struct cg_task *t;
	struct cg_stats a, b;
	uint64_t w0, w1;
	double ratio;
	pid_t pid;
	int status;

	/*
	 * This checks the quota ceiling, not fair sharing: give the test's own subtree (and the
	 * task) a large weight so that unrelated load on the shared cores does not starve the
	 * spinner below its quota.
	 */
	l.cpu_weight = 10000;
	t = create(root, "cpu", &l);
	if (!t)
		return;
	{
		_cleanup_close_ int sfd =
		    openat(cg_task_v1_dir_fd(t, "cpu"), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		CHECK(sfd >= 0 && write_file_at(sfd, "cpu.shares", "262144") == 0,
		      "test subtree cpu.shares = 262144, task cpu.shares = 102400");
	}
	pid = spawn(t, "spin", NULL);
	for (int i = 0; i < 2000 && cg_task_is_empty(t) == 1; i++)
		usleep(1000);
	usleep(300000); /* let the spinner reach steady state (exec done, throttling engaged) */
	/*
	 * Up to three 3 s windows: the 2 cores are shared, so one window may be starved by
	 * unrelated load; an unenforced quota reads ~100% in every window and still fails.
	 */
	for (int w = 1; w <= 3; w++) {
		_cleanup_free_ char *cs = NULL;
		int cfd = cg_task_v1_dir_fd(t, "cpu");

		cg_task_stats(t, &a);
		w0 = now_ns(CLOCK_MONOTONIC);
		usleep(3000000); /* measurement window */
		cg_task_stats(t, &b);
		w1 = now_ns(CLOCK_MONOTONIC);
		ratio = (double)(b.cpu_usage_ns - a.cpu_usage_ns) / (double)(w1 - w0);
		if (cfd >= 0)
			(void)read_file_at(cfd, "cpu.stat", 4096, &cs, NULL);
		for (char *c = cs; c && *c; c++)
			if (*c == '\n')
				*c = ' ';
		printf("     window %d: %.1f%% of one core over %.2f s; cpu.stat: %s\n", w,
		       ratio * 100, (double)(w1 - w0) / 1e9, cs ? cs : "-");
		if (ratio >= 0.40 && ratio <= 0.60)
			break;
	}
	CHECK(ratio >= 0.40 && ratio <= 0.60,
	      "spinner under cpus 0.5: %.1f%% of one core (cpuacct.usage vs wall; "
	      "user %.2f s, system %.2f s total at USER_HZ precision)",
	      ratio * 100, (double)b.cpu_user_ns / 1e9, (double)b.cpu_system_ns / 1e9);
	cg_task_kill(t, SIGKILL);
	waitpid(pid, &status, 0);
	destroy(t, subtree);
}

static void test_kill(struct cg_root *root, const char *subtree)
{
	struct cg_limits l = std_limits();
	struct cg_task *t;
	pid_t pid, gc = 0, *pids = NULL;
	size_t n = 0;
	char buf[64], statp[64];
	int rfd = -1, status, r;
	bool gc_in = false;
	uint64_t t0, t1;

	t = create(root, "kill", &l);
	if (!t)
		return;
	pid = spawn(t, "daemon", &rfd);
	if (read_line_timeout(rfd, buf, sizeof(buf), 10000) > 0)
		gc = atoi(buf);
	close(rfd);
	if (cg_task_pids(t, &pids, &n) == 0)
		for (size_t i = 0; i < n; i++)
			gc_in |= pids[i] == gc;
	free(pids);
	CHECK(gc > 0 && gc_in, "daemonized grandchild %d is in the task cgroup (%zu pids)", gc, n);
	{
		/* joined every hierarchy, the unified one included */
		_cleanup_free_ char *cg = NULL;
		char p[64], want_v1[256], want_v2[256];

		snprintf(p, sizeof(p), "/proc/%d/cgroup", gc);
		snprintf(want_v1, sizeof(want_v1), ":memory:/%s/kill\n", subtree);
		snprintf(want_v2, sizeof(want_v2), "0::/%s/kill\n", subtree);
		(void)read_file(p, 65536, &cg, NULL);
		CHECK(cg && strstr(cg, want_v1) && strstr(cg, want_v2),
		      "grandchild's /proc/PID/cgroup names the task in memory and unified");
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	r = cg_task_kill(t, SIGKILL);
	t1 = now_ns(CLOCK_MONOTONIC);
	waitpid(pid, &status, 0);
	snprintf(statp, sizeof(statp), "/proc/%d/status", gc);
	{
		_cleanup_free_ char *st = NULL;
		bool gone = read_file(statp, 65536, &st, NULL) < 0 || strstr(st, "State:\tZ");

		CHECK(r == 0 && cg_task_is_empty(t) == 1 && gone,
		      "cg_task_kill(SIGKILL): r=%d in %.1f ms, cgroup empty, grandchild gone", r,
		      (double)(t1 - t0) / 1e6);
	}
	destroy(t, subtree);
}

static void test_term(struct cg_root *root, const char *subtree)
{
	struct cg_limits l = std_limits();
	struct cg_task *t;
	_cleanup_free_ char *st = NULL;
	int status = 0, r;
	pid_t pid;

	t = create(root, "term", &l);
	if (!t)
		return;
	pid = spawn(t, "sleep", NULL);
	for (int i = 0; i < 2000 && cg_task_is_empty(t) == 1; i++)
		usleep(1000);
	r = cg_task_kill(t, SIGTERM); /* freeze, signal, thaw */
	if (wait_child(pid, &status, 10000) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	(void)read_file_at(cg_task_v1_dir_fd(t, "freezer"), "freezer.state", 64, &st, NULL);
	CHECK(r == 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM && st &&
		  strncmp(st, "THAWED", 6) == 0,
	      "cg_task_kill(SIGTERM) via freezer: r=%d, child signal %d, freezer.state %s", r,
	      WIFSIGNALED(status) ? WTERMSIG(status) : 0, st ? strtok(st, "\n") : "?");
	CHECK(wait_empty(t, 5000) == 0, "term task empty");
	destroy(t, subtree);
}

int main(int argc, char **argv)
{
	struct cg_root_opts o = {.force_mode = _CG_MODE_INVALID};
	struct cg_root *root = NULL;
	int r;

	self_exe = "/proc/self/exe";
	if (argc == 3 && strcmp(argv[1], "--work") == 0) {
		if (strcmp(argv[2], "hog") == 0)
			return work_hog();
		if (strcmp(argv[2], "spin") == 0)
			return work_spin();
		if (strcmp(argv[2], "forkbomb") == 0)
			return work_forkbomb();
		if (strcmp(argv[2], "daemon") == 0)
			return work_daemon();
		if (strcmp(argv[2], "sleep") == 0) {
			for (;;)
				pause();
		}
		return 2;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s SUBTREE\n", argv[0]);
		return 2;
	}
	o.subtree = argv[1];
	r = cg_root_open(&o, &root);
	if (r < 0) {
		printf("FAIL cg_root_open: %s\n", strerror(-r));
		return 1;
	}
	printf("mode %s, unified %s, swap accounting %s\n", cg_mode_to_string(cg_root_mode(root)),
	       cg_root_has_unified(root) ? "yes" : "no",
	       cg_root_swap_accounting(root) ? "yes" : "no");
	test_oom(root, argv[1]);
	test_forkbomb(root, argv[1]);
	test_cpu(root, argv[1]);
	test_term(root, argv[1]);
	test_kill(root, argv[1]);
	cg_root_free(root);
	printf("%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
