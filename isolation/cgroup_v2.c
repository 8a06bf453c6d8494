/* SPDX-License-Identifier: MIT */
/*
 * cgroup v2 backend: <fs_root><v2_base>/<subtree>/<task>, controllers memory cpu pids io
 * enabled down the chain from the delegated base. The agent itself lives in a leaf
 * (<subtree>/<leaf>, cg_root_move_self) so that the subtree root obeys the "no internal
 * processes" rule and can enable controllers for the task cgroups.
 */
#include "isolation/cgroup.h"
#include "isolation/cgroup_internal.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_FREEZE_WAIT_MS   1000
#define CG_KILL_DEADLINE_MS 5000
#define CG_EMPTY_WAIT_MS    200

static const char *const v2_controllers[] = {"memory", "cpu", "pids", "io"};

/* Whether word appears as a space-separated token of list. */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		if (strncmp(p, word, n) == 0 && (p[n] == 0 || p[n] == ' ' || p[n] == '\n'))
			return true;
		p = strpbrk(p, " \n");
	}
	return false;
}

/* Enable our controllers in dir's subtree_control (those it offers and lacks). */
static int enable_in(const char *dir)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *avail = NULL, *enabled = NULL;
	int r;

	if (fd < 0)
		return -errno;
	r = read_file_at(fd, "cgroup.controllers", 4096, &avail, NULL);
	if (r < 0)
		return r;
	r = read_file_at(fd, "cgroup.subtree_control", 4096, &enabled, NULL);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(v2_controllers); i++) {
		char buf[16];

		if (!has_word(avail, v2_controllers[i]) || has_word(enabled, v2_controllers[i]))
			continue;
		snprintf(buf, sizeof(buf), "+%s", v2_controllers[i]);
		r = cg_write(fd, "cgroup.subtree_control", buf);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Enable controllers at every level from the base down to the subtree directory. */
static int enable_chain(struct cg_root *root)
{
	_cleanup_free_ char *path = strdup(root->v2_base), *sub = strdup(root->subtree);
	char *save = NULL, *tok;
	int r;

	if (!path || !sub)
		return -ENOMEM;
	r = enable_in(path);
	if (r < 0)
		return r;
	for (tok = strtok_r(sub, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		char *np;

		if (asprintf(&np, "%s/%s", path, tok) < 0)
			return -ENOMEM;
		free(path);
		path = np;
		r = enable_in(path);
		if (r < 0)
			return r;
	}
	root->v2_enable_pending = false;
	root->swap_accounting = faccessat(root->hier[0].dir_fd, "memory.swap.max", F_OK, 0) == 0 ||
				root->swap_accounting;
	return 0;
}

static bool base_valid(const char *base)
{
	_cleanup_free_ char *s = NULL;
	char *save = NULL, *tok;

	if (!base || base[0] != '/' || strlen(base) > 512)
		return false;
	s = strdup(base);
	if (!s)
		return false;
	for (tok = strtok_r(s, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
		if (strcmp(tok, ".") == 0 || strcmp(tok, "..") == 0)
			return false;
	return true;
}

static int v2_setup(struct cg_root *root, const struct cg_root_opts *opts)
{
	const char *base = opts && opts->v2_base ? opts->v2_base : "/";
	struct cg_hier *h = &root->hier[0];
	int r;

	if (!base_valid(base))
		return -EINVAL;
	if (asprintf(&root->v2_base, "%s%s", root->fs_root, strcmp(base, "/") == 0 ? "" : base) <
	    0) {
		root->v2_base = NULL;
		return -ENOMEM;
	}
	h->dir_fd = -1;
	h->unified = true;
	h->mount = strdup(root->fs_root);
	if (!h->mount || asprintf(&h->dir, "%s/%s", root->v2_base, root->subtree) < 0) {
		h->dir = NULL;
		return -ENOMEM;
	}
	root->n_hier = 1;
	r = mkdir_p(h->dir, 0755);
	if (r < 0)
		return r;
	h->dir_fd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (h->dir_fd < 0)
		return -errno;
	root->unified_hier = 0;
	root->main_hier = 0;
	r = enable_chain(root);
	if (r == -EBUSY) /* processes in the base: cg_root_move_self will retry */
		root->v2_enable_pending = true;
	else if (r < 0)
		return r;
	return 0;
}

static int v2_move_self(struct cg_root *root, const char *leaf)
{
	_cleanup_close_ int fd = -1;
	char buf[DECIMAL_STR_MAX(pid_t)];
	char *l;
	int r;

	if (mkdirat(root->hier[0].dir_fd, leaf, 0755) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(root->hier[0].dir_fd, leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	snprintf(buf, sizeof(buf), "%d", (int)getpid());
	r = cg_write(fd, "cgroup.procs", buf);
	if (r < 0)
		return r;
	l = strdup(leaf);
	if (!l)
		return -ENOMEM;
	free(root->leaf);
	root->leaf = l;
	return enable_chain(root);
}

static int v2_prepare_task(struct cg_root *root)
{
	if (!root->v2_enable_pending)
		return 0;
	return enable_chain(root);
}

static int v2_apply_limits(struct cg_task *t, const struct cg_limits *l)
{
	int fd = t->dir_fd[0], r;
	char buf[128];

	if (l->memory_max) {
		r = cg_write_u64(fd, "memory.max", l->memory_max);
		if (r < 0)
			return r;
	}
	if (l->memory_high) {
		r = cg_write_u64(fd, "memory.high", l->memory_high);
		if (r < 0)
			return r;
	}
	if (l->swap_max != UINT64_MAX) {
		if (faccessat(fd, "memory.swap.max", F_OK, 0) < 0)
			return -EOPNOTSUPP;
		r = cg_write_u64(fd, "memory.swap.max", l->swap_max);
		if (r < 0)
			return r;
	}
	if (l->cpus > 0) {
		uint64_t q;

		r = cg_cpu_quota_us(l->cpus, &q);
		if (r < 0)
			return r;
		snprintf(buf, sizeof(buf), "%llu %llu", (unsigned long long)q,
			 (unsigned long long)CG_CPU_PERIOD_US);
		r = cg_write(fd, "cpu.max", buf);
		if (r < 0)
			return r;
	}
	if (l->cpu_weight) {
		if (l->cpu_weight > 10000)
			return -ERANGE;
		r = cg_write_u64(fd, "cpu.weight", l->cpu_weight);
		if (r < 0)
			return r;
	}
	if (l->pids_max) {
		r = cg_write_u64(fd, "pids.max", l->pids_max);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < l->n_io; i++) {
		const struct cg_io_limit *io = &l->io[i];
		int n;

		if (!io->rbps && !io->wbps)
			continue;
		n = snprintf(buf, sizeof(buf), "%u:%u", io->major, io->minor);
		if (io->rbps)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, " rbps=%llu",
				      (unsigned long long)io->rbps);
		if (io->wbps)
			snprintf(buf + n, sizeof(buf) - (size_t)n, " wbps=%llu",
				 (unsigned long long)io->wbps);
		r = cg_write(fd, "io.max", buf);
		if (r < 0)
			return r;
	}
	return 0;
}

/* One read of each file (cg_task_read: a parked task's files by name, no directory opened). */
static int v2_stats(const struct cg_task *t, struct cg_stats *s)
{
	const enum cg_ctrl main = _CG_C_MAX;
	_cleanup_free_ char *big = NULL;
	const char *io = NULL;
	char buf[4096];
	uint64_t v;
	int r;

	r = cg_task_read(t, main, "cpu.stat", buf, sizeof(buf));
	if (r < 0)
		return r;
	if (cg_parse_keyed(buf, "usage_usec", &v) == 0)
		s->cpu_usage_ns = v * NSEC_PER_USEC;
	if (cg_parse_keyed(buf, "user_usec", &v) == 0)
		s->cpu_user_ns = v * NSEC_PER_USEC;
	if (cg_parse_keyed(buf, "system_usec", &v) == 0)
		s->cpu_system_ns = v * NSEC_PER_USEC;
	/* memory, io, pids files exist only when the controller is enabled: optional */
	(void)cg_task_read_u64(t, main, "memory.current", &s->memory_current);
	(void)cg_task_read_u64(t, main, "memory.peak", &s->memory_peak); /* 5.19+ */
	if (cg_task_read(t, main, "memory.events", buf, sizeof(buf)) >= 0) {
		(void)cg_parse_keyed(buf, "oom", &s->oom_events);
		(void)cg_parse_keyed(buf, "oom_kill", &s->oom_kills);
	}
	r = cg_task_read(t, main, "io.stat", buf, sizeof(buf));
	if (r >= 0)
		io = buf;
	else if (r == -EFBIG && cg_task_read_alloc(t, main, "io.stat", CG_FILE_MAX, &big) >= 0)
		io = big; /* many devices */
	if (io) {
		r = cg_parse_io_stat(io, &s->io_read_bytes, &s->io_write_bytes);
		if (r < 0)
			return r;
		s->io_measured = true;
	}
	(void)cg_task_read_u64(t, main, "pids.current", &s->pids_current);
	return 0;
}

static int v2_freeze(int fd, bool on)
{
	int r = cg_write(fd, "cgroup.freeze", on ? "1" : "0");

	if (r < 0 || !on)
		return r;
	for (unsigned ms = 0; ms < CG_FREEZE_WAIT_MS; ms++) {
		_cleanup_free_ char *ev = NULL;
		uint64_t frozen = 0;

		r = read_file_at(fd, "cgroup.events", 4096, &ev, NULL);
		if (r < 0)
			return r;
		if (cg_parse_keyed(ev, "frozen", &frozen) == 0 && frozen == 1)
			return 0;
		cg_sleep_ms(1);
	}
	return -ETIMEDOUT;
}

static int v2_kill(const struct cg_task *t, int sig)
{
	int fd = t->dir_fd[0];
	bool freezer = faccessat(fd, "cgroup.freeze", F_OK, 0) == 0;
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + CG_KILL_DEADLINE_MS * 1000000ULL;

	/* cgroup.kill (5.14+): the kernel kills every process, new forks included. */
	if (sig == SIGKILL && faccessat(fd, "cgroup.kill", F_OK, 0) == 0)
		return cg_write(fd, "cgroup.kill", "1");
	for (;;) {
		int r = 0, q;

		/* signalled (pending until they leave the kernel), not waited for */
		if (sig == SIGKILL && cg_procs_stuck(fd)) {
			r = cg_signal_procs(fd, sig, NULL);
			return r < 0 ? r : -EBUSY;
		}
		if (freezer) {
			r = v2_freeze(fd, true);
			if (r < 0 && r != -ETIMEDOUT)
				return r;
		}
		r = cg_signal_procs(fd, sig, NULL);
		if (freezer) {
			q = v2_freeze(fd, false);
			if (q < 0 && r == 0)
				r = q;
		}
		if (r < 0 || sig != SIGKILL)
			return r;
		for (unsigned ms = 0;; ms++) {
			q = cg_task_is_empty(t);
			if (q != 0 || ms >= CG_EMPTY_WAIT_MS)
				break;
			cg_sleep_ms(1);
		}
		if (q < 0)
			return q;
		if (q == 1)
			return 0;
		if (now_ns(CLOCK_MONOTONIC) > deadline)
			return -EBUSY;
	}
}

const struct cg_ops cg_v2_ops = {
    .setup = v2_setup,
    .prepare_task = v2_prepare_task,
    .apply_limits = v2_apply_limits,
    .stats = v2_stats,
    .kill = v2_kill,
    .move_self = v2_move_self,
};
