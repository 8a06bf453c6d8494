/* SPDX-License-Identifier: MIT */
/*
 * cgroup v1 backend: one directory per controller hierarchy (memory, cpu, cpuacct, pids,
 * blkio, freezer, devices; co-mounts such as "cpu,cpuacct" share one), plus the unified
 * (v2) mount on hybrid hosts. Hierarchies are found in /proc/self/mountinfo; with a non-default
 * fs_root (tests) the subdirectories of fs_root are taken as mounts named by their controllers.
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
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/magic.h>

#define CG_FREEZE_WAIT_MS   1000
#define CG_KILL_DEADLINE_MS 5000
#define CG_EMPTY_WAIT_MS    200

/* Controllers named in a comma-separated list ("rw,cpu,cpuacct" or "cpu,cpuacct"). */
static unsigned ctrls_from_list(const char *list)
{
	_cleanup_free_ char *s = strdup(list);
	char *save = NULL, *tok;
	unsigned mask = 0;

	if (!s)
		return 0;
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		enum cg_ctrl c = cg_ctrl_from_string(tok);

		if (c != _CG_C_INVALID)
			mask |= 1u << c;
	}
	return mask;
}

static int add_hier(struct cg_root *root, const char *mount, unsigned ctrls, bool unified)
{
	struct cg_hier *h;
	int r;

	if (!unified) {
		/* First mount of a controller wins (bind mounts may repeat one). */
		for (int c = 0; c < _CG_C_MAX; c++)
			if ((ctrls & (1u << c)) && root->ctrl_hier[c] >= 0)
				ctrls &= ~(1u << c);
		if (ctrls == 0)
			return 0;
	}
	if (root->n_hier >= CG_MAX_HIER)
		return -E2BIG;
	h = &root->hier[root->n_hier];
	h->dir_fd = -1;
	h->mount = strdup(mount);
	if (!h->mount || asprintf(&h->dir, "%s/%s", mount, root->subtree) < 0) {
		h->dir = NULL;
		free(h->mount);
		h->mount = NULL;
		return -ENOMEM;
	}
	h->ctrls = ctrls;
	h->unified = unified;
	root->n_hier++; /* from here on cg_root_free releases it */
	r = mkdir_p(h->dir, 0755);
	if (r < 0)
		return r;
	h->dir_fd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (h->dir_fd < 0)
		return -errno;
	for (int c = 0; c < _CG_C_MAX; c++)
		if (ctrls & (1u << c))
			root->ctrl_hier[c] = (int)(root->n_hier - 1);
	if (unified)
		root->unified_hier = (int)(root->n_hier - 1);
	return 0;
}

/* Decode mountinfo octal escapes (\040) in place. */
static void unescape(char *s)
{
	char *w = s;

	for (char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*w++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		} else {
			*w++ = *p;
		}
	}
	*w = 0;
}

/* Hierarchies from /proc/self/mountinfo: fstype "cgroup", mount point below fs_root. */
static int find_mounts_mountinfo(struct cg_root *root)
{
	_cleanup_free_ char *buf = NULL;
	char *save_line = NULL, *line;
	size_t rootlen = strlen(root->fs_root);
	int r;

	r = read_file("/proc/self/mountinfo", 4 * 1024 * 1024, &buf, NULL);
	if (r < 0)
		return r;
	for (line = strtok_r(buf, "\n", &save_line); line;
	     line = strtok_r(NULL, "\n", &save_line)) {
		char *sep = strstr(line, " - "), *save = NULL, *f, *mnt = NULL, *fstype, *opts;
		int field = 0;

		if (!sep)
			continue;
		*sep = 0;
		for (f = strtok_r(line, " ", &save); f; f = strtok_r(NULL, " ", &save))
			if (++field == 5)
				mnt = f;
		save = NULL;
		fstype = strtok_r(sep + 3, " ", &save);
		(void)strtok_r(NULL, " ", &save); /* source */
		opts = strtok_r(NULL, " ", &save);
		if (!mnt || !fstype || !opts || strcmp(fstype, "cgroup") != 0)
			continue;
		unescape(mnt);
		if (strncmp(mnt, root->fs_root, rootlen) != 0 || mnt[rootlen] != '/')
			continue;
		r = add_hier(root, mnt, ctrls_from_list(opts), false);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Fake trees: every subdirectory of fs_root named by its controllers ("cpu,cpuacct"). */
static int find_mounts_dirs(struct cg_root *root)
{
	_cleanup_closedir_ DIR *d = opendir(root->fs_root);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		unsigned mask;
		int r;

		if (de->d_name[0] == '.' || strcmp(de->d_name, "unified") == 0)
			continue;
		mask = ctrls_from_list(de->d_name);
		if (!mask)
			continue;
		if (asprintf(&path, "%s/%s", root->fs_root, de->d_name) < 0)
			return -ENOMEM;
		r = add_hier(root, path, mask, false);
		if (r < 0)
			return r;
	}
	return 0;
}

static int v1_setup(struct cg_root *root, const struct cg_root_opts *opts)
{
	_cleanup_free_ char *unified = NULL;
	struct statfs sfs;
	uint64_t v;
	int r, m;

	if (opts && opts->fs_root && strcmp(opts->fs_root, "/sys/fs/cgroup") != 0)
		r = find_mounts_dirs(root);
	else
		r = find_mounts_mountinfo(root);
	if (r < 0)
		return r;
	m = root->ctrl_hier[CG_C_MEMORY];
	if (m < 0)
		return -ENOENT;
	root->main_hier = m;
	/* Old kernels: hierarchical accounting is off unless asked for (always on since 6.x). */
	if (read_u64_file_at(root->hier[m].dir_fd, "memory.use_hierarchy", &v) == 0 && v == 0)
		(void)cg_write(root->hier[m].dir_fd, "memory.use_hierarchy", "1");
	root->swap_accounting =
	    faccessat(root->hier[m].dir_fd, "memory.memsw.limit_in_bytes", F_OK, 0) == 0;

	/* Hybrid: a cgroup2 mount at <fs_root>/unified. */
	if (asprintf(&unified, "%s/unified", root->fs_root) < 0)
		return -ENOMEM;
	if (statfs(unified, &sfs) == 0 &&
	    (unsigned long)sfs.f_type == (unsigned long)CGROUP2_SUPER_MAGIC) {
		r = add_hier(root, unified, 0, true);
		if (r < 0)
			return r;
	}
	return 0;
}

static int need_fd(const struct cg_task *t, enum cg_ctrl c, int *ret)
{
	int fd = cg_task_ctrl_fd(t, c);

	if (fd < 0)
		return -EOPNOTSUPP;
	*ret = fd;
	return 0;
}

static int v1_apply_limits(struct cg_task *t, const struct cg_limits *l)
{
	int fd, r;

	if (l->memory_max || l->memory_high || l->swap_max != UINT64_MAX) {
		r = need_fd(t, CG_C_MEMORY, &fd);
		if (r < 0)
			return r;
		if (l->memory_max) {
			r = cg_write_u64(fd, "memory.limit_in_bytes", l->memory_max);
			if (r < 0)
				return r;
		}
		/* memsw counts memory + swap; without a memory limit there is nothing to add
		 * swap to, and without swap accounting it cannot be set (documented). */
		if (l->swap_max != UINT64_MAX && l->memory_max && t->root->swap_accounting) {
			if (l->swap_max > UINT64_MAX - l->memory_max)
				return -ERANGE;
			r = cg_write_u64(fd, "memory.memsw.limit_in_bytes",
					 l->memory_max + l->swap_max);
			if (r < 0)
				return r;
		}
		if (l->memory_high) {
			r = cg_write_u64(fd, "memory.soft_limit_in_bytes", l->memory_high);
			if (r < 0)
				return r;
		}
	}
	if (l->cpus > 0 || l->cpu_weight) {
		r = need_fd(t, CG_C_CPU, &fd);
		if (r < 0)
			return r;
		if (l->cpus > 0) {
			uint64_t q;

			r = cg_cpu_quota_us(l->cpus, &q);
			if (r < 0)
				return r;
			r = cg_write_u64(fd, "cpu.cfs_period_us", CG_CPU_PERIOD_US);
			if (r < 0)
				return r;
			r = cg_write_u64(fd, "cpu.cfs_quota_us", q);
			if (r < 0)
				return r;
		}
		if (l->cpu_weight) {
			uint64_t shares;

			r = cg_weight_to_shares(l->cpu_weight, &shares);
			if (r < 0)
				return r;
			r = cg_write_u64(fd, "cpu.shares", shares);
			if (r < 0)
				return r;
		}
	}
	if (l->pids_max) {
		r = need_fd(t, CG_C_PIDS, &fd);
		if (r < 0)
			return r;
		r = cg_write_u64(fd, "pids.max", l->pids_max);
		if (r < 0)
			return r;
	}
	if (l->n_io > 0) {
		r = need_fd(t, CG_C_BLKIO, &fd);
		if (r < 0)
			return r;
		for (size_t i = 0; i < l->n_io; i++) {
			const struct cg_io_limit *io = &l->io[i];
			char buf[64];

			if (io->rbps) {
				snprintf(buf, sizeof(buf), "%u:%u %llu", io->major, io->minor,
					 (unsigned long long)io->rbps);
				r = cg_write(fd, "blkio.throttle.read_bps_device", buf);
				if (r < 0)
					return r;
			}
			if (io->wbps) {
				snprintf(buf, sizeof(buf), "%u:%u %llu", io->major, io->minor,
					 (unsigned long long)io->wbps);
				r = cg_write(fd, "blkio.throttle.write_bps_device", buf);
				if (r < 0)
					return r;
			}
		}
	}
	return 0;
}

/*
 * One read of each file (cg_task_read: no directory opened, a parked task's files by name);
 * the blkio file, which grows with the node's devices, on the heap past 4 KiB.
 */
static int v1_stats(const struct cg_task *t, struct cg_stats *s)
{
	long hz = sysconf(_SC_CLK_TCK);
	char buf[4096];
	uint64_t v;
	int r;

	if (cg_task_has_dir(t, CG_C_CPUACCT)) {
		r = cg_task_read_u64(t, CG_C_CPUACCT, "cpuacct.usage", &s->cpu_usage_ns);
		if (r < 0)
			return r;
		r = cg_task_read(t, CG_C_CPUACCT, "cpuacct.stat", buf, sizeof(buf));
		if (r < 0)
			return r;
		if (cg_parse_keyed(buf, "user", &v) == 0)
			s->cpu_user_ns = cg_ticks_to_ns(v, hz);
		if (cg_parse_keyed(buf, "system", &v) == 0)
			s->cpu_system_ns = cg_ticks_to_ns(v, hz);
	}
	if (cg_task_has_dir(t, CG_C_MEMORY)) {
		r = cg_task_read_u64(t, CG_C_MEMORY, "memory.usage_in_bytes", &s->memory_current);
		if (r < 0)
			return r;
		(void)cg_task_read_u64(t, CG_C_MEMORY, "memory.max_usage_in_bytes",
				       &s->memory_peak);
		/* failcnt: times a charge hit the limit, the closest v1 analogue of v2 "oom".
		 * With a memsw limit the combined counter is charged first and records the
		 * failure, so both are summed. */
		if (cg_task_read_u64(t, CG_C_MEMORY, "memory.failcnt", &v) == 0)
			s->oom_events = v;
		if (t->root->swap_accounting &&
		    cg_task_read_u64(t, CG_C_MEMORY, "memory.memsw.failcnt", &v) == 0)
			s->oom_events += v;
		r = cg_task_read(t, CG_C_MEMORY, "memory.oom_control", buf, sizeof(buf));
		if (r < 0)
			return r;
		(void)cg_parse_keyed(buf, "oom_kill", &s->oom_kills); /* absent before 4.13 */
	}
	if (cg_task_has_dir(t, CG_C_BLKIO)) {
		_cleanup_free_ char *big = NULL;
		const char *io = buf;

		r = cg_task_read(t, CG_C_BLKIO, "blkio.throttle.io_service_bytes", buf,
				 sizeof(buf));
		if (r == -EFBIG) { /* many devices */
			r = cg_task_read_alloc(t, CG_C_BLKIO, "blkio.throttle.io_service_bytes",
					       CG_FILE_MAX, &big);
			io = big;
		}
		if (r >= 0) {
			r = cg_parse_blkio_bytes(io, &s->io_read_bytes, &s->io_write_bytes);
			if (r < 0)
				return r;
			s->io_measured = true;
		}
	}
	if (cg_task_has_dir(t, CG_C_PIDS))
		(void)cg_task_read_u64(t, CG_C_PIDS, "pids.current", &s->pids_current);
	return 0;
}

/* Freeze and wait (bounded) until freezer.state reads FROZEN. -ETIMEDOUT if it does not. */
static int v1_freeze(int fd)
{
	int r = cg_write(fd, "freezer.state", "FROZEN");

	if (r < 0)
		return r;
	for (unsigned ms = 0; ms < CG_FREEZE_WAIT_MS; ms++) {
		_cleanup_free_ char *st = NULL;

		r = read_file_at(fd, "freezer.state", 64, &st, NULL);
		if (r < 0)
			return r;
		if (strncmp(st, "FROZEN", 6) == 0)
			return 0;
		cg_sleep_ms(1);
	}
	return -ETIMEDOUT;
}

static int wait_empty(const struct cg_task *t, unsigned max_ms)
{
	for (unsigned ms = 0;; ms++) {
		int r = cg_task_is_empty(t);

		if (r != 0 || ms >= max_ms)
			return r;
		cg_sleep_ms(1);
	}
}

/*
 * Freeze, signal every process, thaw. For SIGKILL repeat until the cgroup is empty (bounded
 * by CG_KILL_DEADLINE_MS): a fork that raced the freeze is caught by the next round.
 */
static int v1_kill(const struct cg_task *t, int sig)
{
	int ffd = cg_task_ctrl_fd(t, CG_C_FREEZER);
	int pfd = ffd >= 0 ? ffd : t->dir_fd[t->root->main_hier];
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + CG_KILL_DEADLINE_MS * 1000000ULL;

	for (;;) {
		int r = 0, q;

		/* signalled (pending until they leave the kernel), not waited for */
		if (sig == SIGKILL && cg_procs_stuck(t->dir_fd[t->root->main_hier])) {
			r = cg_signal_procs(pfd, sig, NULL);
			return r < 0 ? r : -EBUSY;
		}
		if (ffd >= 0) {
			r = v1_freeze(ffd);
			if (r < 0 && r != -ETIMEDOUT)
				return r;
			/* On timeout the signals still go out; the next round retries. */
		}
		r = cg_signal_procs(pfd, sig, NULL);
		if (ffd >= 0) {
			q = cg_write(ffd, "freezer.state", "THAWED");
			if (q < 0 && r == 0)
				r = q;
		}
		if (r < 0)
			return r;
		if (sig != SIGKILL)
			return 0;
		q = wait_empty(t, CG_EMPTY_WAIT_MS);
		if (q < 0)
			return q;
		if (q == 1)
			return 0;
		if (now_ns(CLOCK_MONOTONIC) > deadline)
			return -EBUSY;
	}
}

const struct cg_ops cg_v1_ops = {
    .setup = v1_setup,
    .apply_limits = v1_apply_limits,
    .stats = v1_stats,
    .kill = v1_kill,
};
