/* SPDX-License-Identifier: MIT */
#include "isolation/launch.h"
#include "isolation/cgroup.h"
#include "isolation/seccomp.h"
#include "common/macro.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static const char *const step_names[_LAUNCH_STEP_MAX] = {
    [LAUNCH_STEP_NONE] = "none",
    [LAUNCH_STEP_CLONE] = "clone",
    [LAUNCH_STEP_CGROUP] = "join cgroup",
    [LAUNCH_STEP_SYNC] = "wait for agent",
    [LAUNCH_STEP_SETSID] = "setsid",
    [LAUNCH_STEP_SIGNALS] = "reset signals",
    [LAUNCH_STEP_RLIMIT] = "setrlimit",
    [LAUNCH_STEP_CAPBSET] = "drop capability bounding set",
    [LAUNCH_STEP_SETGROUPS] = "setgroups",
    [LAUNCH_STEP_SETGID] = "setgid",
    [LAUNCH_STEP_SETUID] = "setuid",
    [LAUNCH_STEP_CHDIR] = "chdir",
    [LAUNCH_STEP_STDIN] = "open stdin",
    [LAUNCH_STEP_STDOUT] = "open stdout",
    [LAUNCH_STEP_STDERR] = "open stderr",
    [LAUNCH_STEP_NO_NEW_PRIVS] = "set no_new_privs",
    [LAUNCH_STEP_CAPS] = "drop capabilities",
    [LAUNCH_STEP_CLOSE_FDS] = "close file descriptors",
    [LAUNCH_STEP_SECCOMP] = "install seccomp filter",
    [LAUNCH_STEP_EXEC] = "exec",
};

const char *launch_step_to_string(enum launch_step s)
{
	if ((unsigned)s >= _LAUNCH_STEP_MAX)
		return "unknown step";
	return step_names[s];
}

void launch_format_error(const struct launch_plan *plan, enum launch_step step, int err, char *buf,
			 size_t len)
{
	const char *what = NULL;

	switch (step) {
	case LAUNCH_STEP_EXEC:
		what = plan->argv ? plan->argv[0] : NULL;
		break;
	case LAUNCH_STEP_CHDIR:
		what = plan->workdir ? plan->workdir : "/";
		break;
	case LAUNCH_STEP_STDOUT:
		what = plan->stdout_path;
		break;
	case LAUNCH_STEP_STDERR:
		what = plan->stderr_path;
		break;
	default:
		break;
	}
	if (what)
		snprintf(buf, len, "%s %s: %s", launch_step_to_string(step), what, strerror(err));
	else
		snprintf(buf, len, "%s: %s", launch_step_to_string(step), strerror(err));
}

struct child_error {
	int32_t step;
	int32_t err;
};

_noreturn_ static void child_fail(int err_fd, enum launch_step step, int err)
{
	struct child_error ce = {.step = (int32_t)step, .err = err ? err : EIO};
	ssize_t n = write(err_fd, &ce, sizeof(ce));

	(void)n;
	_exit(127);
}

static int open_stdio(const char *path, int target, int flags)
{
	int fd = open(path ? path : "/dev/null", flags | O_NOCTTY | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	if (fd != target) {
		if (dup2(fd, target) < 0) {
			int e = errno;

			close(fd);
			return -e;
		}
		close(fd);
	} else {
		/* Same number: clear close-on-exec instead of dup2. */
		if (fcntl(fd, F_SETFD, 0) < 0)
			return -errno;
	}
	return 0;
}

/*
 * The task child. Only async-signal-safe calls from here on: it is cloned with a raw clone3 by
 * the shim (no atfork handlers ran).
 */
_noreturn_ static void run_child(const struct launch_plan *p, int err_fd, int sync_fd,
				 bool need_join)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2] = {{0}};
	sigset_t all;
	char go;
	ssize_t n;
	int r, exec_err;

	if (need_join && p->cg) {
		r = cg_task_join_self(p->cg);
		if (r < 0)
			child_fail(err_fd, LAUNCH_STEP_CGROUP, -r);
	}
	do {
		n = read(sync_fd, &go, 1);
	} while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(126); /* the agent gave up on us (launch_abort): nothing to report */

	if (setsid() < 0)
		child_fail(err_fd, LAUNCH_STEP_SETSID, errno);

	for (int sig = 1; sig < _NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);
	sigemptyset(&all);
	if (sigprocmask(SIG_SETMASK, &all, NULL) < 0)
		child_fail(err_fd, LAUNCH_STEP_SIGNALS, errno);

	for (size_t i = 0; i < p->n_rlimits; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].rl) < 0)
			child_fail(err_fd, LAUNCH_STEP_RLIMIT, errno);

	if (p->switch_user) {
		/* The bounding set can only be dropped while we still hold CAP_SETPCAP. */
		for (int c = 0; c <= p->cap_last_cap; c++)
			if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
				child_fail(err_fd, LAUNCH_STEP_CAPBSET, errno);
		if (setgroups(p->n_groups, p->groups) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETGROUPS, errno);
		if (setresgid(p->gid, p->gid, p->gid) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETGID, errno);
		if (setresuid(p->uid, p->uid, p->uid) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETUID, errno);
	}

	if (chdir(p->workdir ? p->workdir : "/") < 0)
		child_fail(err_fd, LAUNCH_STEP_CHDIR, errno);
	r = open_stdio(NULL, STDIN_FILENO, O_RDONLY);
	if (r < 0)
		child_fail(err_fd, LAUNCH_STEP_STDIN, -r);
	r = open_stdio(p->stdout_path, STDOUT_FILENO, O_WRONLY | O_CREAT | O_APPEND);
	if (r < 0)
		child_fail(err_fd, LAUNCH_STEP_STDOUT, -r);
	r = open_stdio(p->stderr_path, STDERR_FILENO, O_WRONLY | O_CREAT | O_APPEND);
	if (r < 0)
		child_fail(err_fd, LAUNCH_STEP_STDERR, -r);

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(err_fd, LAUNCH_STEP_NO_NEW_PRIVS, errno);
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (p->switch_user && syscall(SYS_capset, &hdr, data) < 0)
		child_fail(err_fd, LAUNCH_STEP_CAPS, errno);

	/* Everything but stdio goes away at exec (the error pipe is already close-on-exec). */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		for (int fd = 3; fd < 65536; fd++)
			(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	}

	if (p->filter) {
		r = sbx_filter_apply(p->filter);
		if (r < 0)
			child_fail(err_fd, LAUNCH_STEP_SECCOMP, -r);
	}

	exec_err = ENOENT;
	for (char *const *c = p->exec_paths; c && *c; c++) {
		execve(*c, p->argv, p->env);
		if (errno == EACCES)
			exec_err = EACCES;
		else if (errno != ENOENT && errno != ENOTDIR) {
			exec_err = errno;
			break;
		}
	}
	child_fail(err_fd, LAUNCH_STEP_EXEC, exec_err);
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The shim: a forked copy of the agent (glibc fork, so malloc/stdio are usable). */
_noreturn_ static void run_shim(const struct launch_plan *p, int status_w, int err_w, int sync_r)
{
	struct clone_args ca = {0};
	struct rusage ru;
	sigset_t all;
	char line[160];
	bool need_join = true;
	int status = 0, null_fd;
	pid_t child;
	long c;

	/* Never be killed by stray signals meant for the agent; EPIPE instead of SIGPIPE. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	(void)setsid();
	(void)prctl(PR_SET_NAME, "corral-shim", 0, 0, 0);
	(void)prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);

	ca.exit_signal = SIGCHLD;
	if (p->clone_cgroup_fd >= 0) {
		ca.flags = CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)p->clone_cgroup_fd;
	}
	c = p->clone_cgroup_fd >= 0 ? syscall(SYS_clone3, &ca, sizeof(ca)) : -1;
	if (c < 0) {
		/* Kernels without clone3/CLONE_INTO_CGROUP, or v1: plain fork, then join. */
		c = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	} else {
		need_join = false;
	}
	if (c == 0) {
		close(status_w);
		run_child(p, err_w, sync_r, need_join);
	}
	if (c < 0) {
		struct child_error ce = {.step = LAUNCH_STEP_CLONE, .err = errno};

		(void)!write(err_w, &ce, sizeof(ce));
		_exit(1);
	}
	child = (pid_t)c;

	/* Drop every inherited fd of the agent except the status pipe. */
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0) {
		dup2(null_fd, 0);
		dup2(null_fd, 1);
		dup2(null_fd, 2);
	}
	if (status_w != 3) {
		if (dup2(status_w, 3) < 0)
			_exit(1);
		status_w = 3;
	}
	if (syscall(SYS_close_range, 4U, ~0U, 0) < 0)
		for (int fd = 4; fd < 65536; fd++)
			close(fd);

	snprintf(line, sizeof(line), "P %d\n", (int)child);
	(void)write_all(status_w, line, strlen(line));

	for (;;) {
		pid_t w = wait4(child, &status, 0, &ru);

		if (w == child)
			break;
		if (w < 0 && errno != EINTR) {
			status = -1;
			memset(&ru, 0, sizeof(ru));
			break;
		}
	}
	{
		uint64_t ut =
		    (uint64_t)ru.ru_utime.tv_sec * USEC_PER_SEC + (uint64_t)ru.ru_utime.tv_usec;
		uint64_t st =
		    (uint64_t)ru.ru_stime.tv_sec * USEC_PER_SEC + (uint64_t)ru.ru_stime.tv_usec;
		uint64_t end = now_ns(CLOCK_REALTIME);
		char file[256];
		int len;

		len = snprintf(file, sizeof(file),
			       "status=%d utime_us=%llu stime_us=%llu maxrss_kb=%llu end_ns=%llu\n",
			       status, (unsigned long long)ut, (unsigned long long)st,
			       (unsigned long long)ru.ru_maxrss, (unsigned long long)end);
		if (p->exit_file)
			(void)write_file_replace(p->exit_file, file, (size_t)len, 0600);
		snprintf(line, sizeof(line), "X %d %llu %llu %llu %llu\n", status,
			 (unsigned long long)ut, (unsigned long long)st,
			 (unsigned long long)ru.ru_maxrss, (unsigned long long)end);
		(void)write_all(status_w, line, strlen(line));
	}
	_exit(0);
}

static int poll_in(int fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int r;

	do {
		r = poll(&pfd, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

int launch_start(const struct launch_plan *plan, struct launch_handle *ret)
{
	int status_p[2] = {-1, -1}, err_p[2] = {-1, -1}, sync_p[2] = {-1, -1};
	char buf[64];
	size_t got = 0;
	pid_t shim;
	int r;

	if (pipe2(status_p, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(err_p, O_CLOEXEC) < 0) {
		r = -errno;
		goto out_close;
	}
	if (pipe2(sync_p, O_CLOEXEC) < 0) {
		r = -errno;
		goto out_close;
	}
	shim = fork();
	if (shim < 0) {
		r = -errno;
		goto out_close;
	}
	if (shim == 0) {
		close(status_p[0]);
		close(err_p[0]);
		close(sync_p[1]);
		run_shim(plan, status_p[1], err_p[1], sync_p[0]);
	}
	close(status_p[1]);
	close(err_p[1]);
	close(sync_p[0]);
	status_p[1] = err_p[1] = sync_p[0] = -1;

	*ret = (struct launch_handle){
	    .shim_pid = shim,
	    .shim_pidfd = (int)syscall(SYS_pidfd_open, shim, 0),
	    .task_pid = -1,
	    .status_fd = status_p[0],
	    .err_fd = err_p[0],
	    .sync_fd = sync_p[1],
	};
	/* The shim's first line is the task pid ("P <pid>\n"), or it reports a clone error. */
	while (got < sizeof(buf) - 1) {
		ssize_t n;

		r = poll_in(ret->status_fd, 10000);
		if (r < 0)
			goto out_fail;
		n = read(ret->status_fd, buf + got, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			struct child_error ce;

			r = -ECHILD;
			if (read(ret->err_fd, &ce, sizeof(ce)) == (ssize_t)sizeof(ce))
				r = -ce.err;
			goto out_fail;
		}
		got++;
		if (buf[got - 1] == '\n')
			break;
	}
	buf[got] = 0;
	if (buf[0] != 'P' || parse_int(strtok(buf + 2, "\n"), &ret->task_pid) < 0 ||
	    ret->task_pid <= 0) {
		r = -EPROTO;
		goto out_fail;
	}
	if (fcntl(ret->status_fd, F_SETFL, O_NONBLOCK) < 0) {
		r = -errno;
		goto out_fail;
	}
	return 0;

out_fail:
	launch_abort(ret);
	launch_handle_close(ret);
	return r;
out_close:
	for (int i = 0; i < 2; i++) {
		closep(&status_p[i]);
		closep(&err_p[i]);
		closep(&sync_p[i]);
	}
	return r;
}

int launch_release(struct launch_handle *h, int timeout_ms, enum launch_step *ret_step)
{
	struct child_error ce;
	char go = 'g';
	ssize_t n;
	int r;

	if (write(h->sync_fd, &go, 1) != 1)
		return -errno;
	closep(&h->sync_fd);
	h->sync_fd = -1;
	r = poll_in(h->err_fd, timeout_ms);
	if (r < 0)
		return r;
	do {
		n = read(h->err_fd, &ce, sizeof(ce));
	} while (n < 0 && errno == EINTR);
	closep(&h->err_fd);
	h->err_fd = -1;
	if (n == 0)
		return 0; /* EOF: close-on-exec fired, the job is running */
	if (n != (ssize_t)sizeof(ce))
		return -EPROTO;
	if (ret_step)
		*ret_step = (enum launch_step)ce.step;
	return ce.err > 0 ? -ce.err : -EIO;
}

void launch_abort(struct launch_handle *h)
{
	/* Closing the sync pipe makes the waiting child exit without running anything. */
	closep(&h->sync_fd);
	h->sync_fd = -1;
	if (h->task_pid > 0)
		kill(h->task_pid, SIGKILL);
}

void launch_handle_close(struct launch_handle *h)
{
	closep(&h->shim_pidfd);
	closep(&h->status_fd);
	closep(&h->err_fd);
	closep(&h->sync_fd);
	h->shim_pidfd = h->status_fd = h->err_fd = h->sync_fd = -1;
}

static int parse_exit_fields(char *s, struct launch_exit *ret)
{
	unsigned long long ut, st, rss, end;
	int status;

	if (sscanf(s, "status=%d utime_us=%llu stime_us=%llu maxrss_kb=%llu end_ns=%llu", &status,
		   &ut, &st, &rss, &end) != 5 &&
	    sscanf(s, "X %d %llu %llu %llu %llu", &status, &ut, &st, &rss, &end) != 5)
		return -EINVAL;
	*ret = (struct launch_exit){.wait_status = status,
				    .utime_us = ut,
				    .stime_us = st,
				    .maxrss_kb = rss,
				    .end_realtime_ns = end};
	return 0;
}

int launch_read_status(int status_fd, struct launch_exit *ret)
{
	char buf[256];
	ssize_t n;

	/* The exit line is written in one write(2) of < PIPE_BUF bytes: it arrives whole. */
	do {
		n = read(status_fd, buf, sizeof(buf) - 1);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	if (n == 0)
		return -EPIPE;
	buf[n] = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if (line[0] == 'X' && parse_exit_fields(line, ret) == 0)
			return 1;
	return 0;
}

int launch_read_exit_file(const char *path, struct launch_exit *ret)
{
	_cleanup_free_ char *s = NULL;
	int r = read_file(path, 4096, &s, NULL);

	if (r < 0)
		return r;
	return parse_exit_fields(s, ret);
}
