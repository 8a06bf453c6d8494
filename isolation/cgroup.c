/* SPDX-License-Identifier: MIT */
/*
 * Common cgroup layer: mode detection, task directories in every hierarchy, joining,
 * listing, destroying; limits, stats and kill are delegated to the backend ops table.
 * Direct cgroupfs access throughout (fd-based); see docs/cgroup.md for why not libcgroup.
 */
#include "isolation/cgroup.h"
#include "isolation/cgroup_internal.h"
#include "common/macro.h"
#include "common/fileio.h"
#include "common/parse.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#define CG_DEFAULT_FS_ROOT "/sys/fs/cgroup"
#define CG_DEFAULT_SUBTREE "corral"
/* Bounded wait for rmdir while the last processes are exiting. */
#define CG_RMDIR_TRIES	  200
#define CG_RMDIR_SLEEP_MS 5

static const char *const ctrl_names[_CG_C_MAX] = {
    [CG_C_MEMORY] = "memory",	[CG_C_CPU] = "cpu",	[CG_C_CPUACCT] = "cpuacct",
    [CG_C_PIDS] = "pids",	[CG_C_BLKIO] = "blkio", [CG_C_FREEZER] = "freezer",
    [CG_C_DEVICES] = "devices",
};

const char *cg_ctrl_to_string(enum cg_ctrl c)
{
	if (c < 0 || c >= _CG_C_MAX)
		return NULL;
	return ctrl_names[c];
}

enum cg_ctrl cg_ctrl_from_string(const char *s)
{
	if (!s)
		return _CG_C_INVALID;
	for (int i = 0; i < _CG_C_MAX; i++)
		if (strcmp(s, ctrl_names[i]) == 0)
			return (enum cg_ctrl)i;
	return _CG_C_INVALID;
}

const char *cg_mode_to_string(enum cg_mode m)
{
	switch (m) {
	case CG_MODE_V1:
		return "v1";
	case CG_MODE_V2:
		return "v2";
	default:
		return NULL;
	}
}

bool cg_name_valid(const char *name)
{
	size_t n;

	if (!name || name[0] == '.' || name[0] == 0)
		return false;
	n = strnlen(name, CG_NAME_MAX + 1);
	if (n > CG_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!isalnum(c) && c != '.' && c != '_' && c != '-')
			return false;
	}
	return true;
}

bool cg_subtree_valid(const char *subtree)
{
	_cleanup_free_ char *s = NULL;
	char *save = NULL, *tok;
	size_t n = 0;

	if (!subtree || strlen(subtree) > 512)
		return false;
	s = strdup(subtree);
	if (!s)
		return false;
	for (tok = strtok_r(s, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!cg_name_valid(tok))
			return false;
		n++;
	}
	return n > 0;
}

/* ---- small IO helpers ---- */

int cg_write(int dirfd, const char *name, const char *v)
{
	return write_file_at(dirfd, name, v);
}

int cg_write_u64(int dirfd, const char *name, uint64_t v)
{
	char buf[DECIMAL_STR_MAX(uint64_t)];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return write_file_at(dirfd, name, buf);
}

void cg_sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int cg_signal_procs(int dirfd, int sig, size_t *ret_n)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0, sent = 0;
	int r;

	r = read_file_at(dirfd, "cgroup.procs", CG_FILE_MAX, &buf, NULL);
	if (r < 0)
		return r;
	r = cg_parse_pids(buf, &pids, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (pids[i] <= 1)
			continue;
		if (kill(pids[i], sig) == 0)
			sent++;
		else if (errno != ESRCH)
			r = -errno;
	}
	if (ret_n)
		*ret_n = sent;
	return r;
}

bool cg_procs_stuck(int dirfd)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;

	if (read_file_at(dirfd, "cgroup.procs", CG_FILE_MAX, &buf, NULL) < 0 ||
	    cg_parse_pids(buf, &pids, &n) < 0 || n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *st = NULL;
		char path[64];
		const char *p;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pids[i]);
		if (read_file_at(AT_FDCWD, path, 4096, &st, NULL) < 0)
			continue; /* gone */
		p = strrchr(st, ')');
		if (!p || p[1] != ' ' || p[2] != 'D')
			return false;
	}
	return true;
}

/* ---- parsers ---- */

int cg_parse_keyed(const char *buf, const char *key, uint64_t *ret)
{
	size_t klen = strlen(key);
	const char *p = buf;

	while (p && *p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);

		if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == ' ') {
			char num[32];
			size_t nlen = len - klen - 1;

			if (nlen == 0 || nlen >= sizeof(num))
				return -EINVAL;
			memcpy(num, p + klen + 1, nlen);
			num[nlen] = 0;
			return parse_u64(num, ret);
		}
		p = eol ? eol + 1 : NULL;
	}
	return -ENOENT;
}

/* Parse "maj:min" at the start of tok; 0 or -EINVAL. */
static int parse_devnum(const char *tok)
{
	unsigned maj, min;
	int n = 0;

	if (sscanf(tok, "%u:%u%n", &maj, &min, &n) != 2 || tok[n] != 0)
		return -EINVAL;
	return 0;
}

int cg_parse_io_stat(const char *buf, uint64_t *ret_read, uint64_t *ret_write)
{
	_cleanup_free_ char *s = strdup(buf ? buf : "");
	uint64_t rd = 0, wr = 0;
	char *save_line = NULL, *line;

	if (!s)
		return -ENOMEM;
	for (line = strtok_r(s, "\n", &save_line); line; line = strtok_r(NULL, "\n", &save_line)) {
		char *save = NULL, *tok = strtok_r(line, " \t", &save);

		if (!tok || parse_devnum(tok) < 0)
			return -EINVAL;
		while ((tok = strtok_r(NULL, " \t", &save))) {
			char *eq = strchr(tok, '=');
			uint64_t v;

			if (!eq)
				return -EINVAL;
			*eq = 0;
			if (parse_u64(eq + 1, &v) < 0)
				return -EINVAL;
			if (strcmp(tok, "rbytes") == 0)
				rd += v;
			else if (strcmp(tok, "wbytes") == 0)
				wr += v;
		}
	}
	*ret_read = rd;
	*ret_write = wr;
	return 0;
}

int cg_parse_blkio_bytes(const char *buf, uint64_t *ret_read, uint64_t *ret_write)
{
	_cleanup_free_ char *s = strdup(buf ? buf : "");
	uint64_t rd = 0, wr = 0;
	char *save_line = NULL, *line;

	if (!s)
		return -ENOMEM;
	for (line = strtok_r(s, "\n", &save_line); line; line = strtok_r(NULL, "\n", &save_line)) {
		char *save = NULL, *dev, *op, *val, *extra;
		uint64_t v;

		dev = strtok_r(line, " \t", &save);
		if (!dev)
			continue;
		op = strtok_r(NULL, " \t", &save);
		if (strcmp(dev, "Total") == 0)
			continue;
		val = strtok_r(NULL, " \t", &save);
		extra = strtok_r(NULL, " \t", &save);
		if (parse_devnum(dev) < 0 || !op || !val || extra || parse_u64(val, &v) < 0)
			return -EINVAL;
		if (strcmp(op, "Read") == 0)
			rd += v;
		else if (strcmp(op, "Write") == 0)
			wr += v;
	}
	*ret_read = rd;
	*ret_write = wr;
	return 0;
}

static int pid_cmp(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return x < y ? -1 : x > y;
}

int cg_parse_pids(const char *buf, pid_t **ret, size_t *ret_n)
{
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0, cap = 0, u = 0;
	const char *p = buf ? buf : "";

	while (*p) {
		char num[DECIMAL_STR_MAX(int)];
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		int v;

		if (len > 0) {
			if (len >= sizeof(num))
				return -EINVAL;
			memcpy(num, p, len);
			num[len] = 0;
			if (parse_int(num, &v) < 0 || v <= 0)
				return -EINVAL;
			if (n == cap) {
				pid_t *np;

				if (cap >= CG_PIDS_MAX)
					return -E2BIG;
				cap = cap ? cap * 2 : 16;
				np = realloc(pids, cap * sizeof(*np));
				if (!np)
					return -ENOMEM;
				pids = np;
			}
			pids[n++] = v;
		}
		if (!eol)
			break;
		p = eol + 1;
	}
	if (n > 0) {
		qsort(pids, n, sizeof(*pids), pid_cmp);
		for (size_t i = 0; i < n; i++)
			if (u == 0 || pids[u - 1] != pids[i])
				pids[u++] = pids[i];
	}
	*ret = TAKE_PTR(pids);
	*ret_n = u;
	return 0;
}

int cg_cpu_quota_us(double cpus, uint64_t *ret)
{
	double q;

	if (!isfinite(cpus) || cpus > CG_CPUS_MAX)
		return -ERANGE;
	if (cpus <= 0)
		return -EINVAL;
	q = round(cpus * (double)CG_CPU_PERIOD_US);
	if (q < 1000)
		q = 1000; /* the kernel's minimum quota is 1 ms */
	*ret = (uint64_t)q;
	return 0;
}

int cg_weight_to_shares(uint32_t weight, uint64_t *ret)
{
	uint64_t s;

	if (weight < 1 || weight > 10000)
		return -ERANGE;
	s = (uint64_t)weight * 1024 / 100;
	*ret = MAX(s, 2);
	return 0;
}

uint64_t cg_ticks_to_ns(uint64_t ticks, long hz)
{
	if (hz <= 0)
		hz = 100;
	return ticks / (uint64_t)hz * NSEC_PER_SEC +
	       ticks % (uint64_t)hz * NSEC_PER_SEC / (uint64_t)hz;
}

/* ---- root ---- */

static int detect_mode(const char *fs_root, enum cg_mode *ret)
{
	struct statfs sfs;

	if (statfs(fs_root, &sfs) < 0)
		return -errno;
	if ((unsigned long)sfs.f_type == (unsigned long)CGROUP2_SUPER_MAGIC) {
		*ret = CG_MODE_V2;
		return 0;
	}
	if ((unsigned long)sfs.f_type == (unsigned long)TMPFS_MAGIC) {
		*ret = CG_MODE_V1;
		return 0;
	}
	return -ENOMEDIUM;
}

void cg_root_free(struct cg_root *root)
{
	if (!root)
		return;
	for (size_t i = 0; i < root->n_hier; i++) {
		closep(&root->hier[i].dir_fd);
		free(root->hier[i].mount);
		free(root->hier[i].dir);
	}
	free(root->fs_root);
	free(root->subtree);
	free(root->leaf);
	free(root->v2_base);
	free(root);
}

static void cg_root_freep(struct cg_root **p)
{
	cg_root_free(*p);
}

int cg_root_open(const struct cg_root_opts *opts, struct cg_root **ret)
{
	_cleanup_(cg_root_freep) struct cg_root *root = NULL;
	const char *fs_root = opts && opts->fs_root ? opts->fs_root : CG_DEFAULT_FS_ROOT;
	const char *subtree = opts && opts->subtree ? opts->subtree : CG_DEFAULT_SUBTREE;
	enum cg_mode mode = opts ? opts->force_mode : _CG_MODE_INVALID;
	int r;

	if (!ret || fs_root[0] != '/' || strlen(fs_root) > 256 || !cg_subtree_valid(subtree))
		return -EINVAL;
	if (mode != CG_MODE_V1 && mode != CG_MODE_V2) {
		if (mode != _CG_MODE_INVALID)
			return -EINVAL;
		r = detect_mode(fs_root, &mode);
		if (r < 0)
			return r;
	}
	root = calloc(1, sizeof(*root));
	if (!root)
		return -ENOMEM;
	root->mode = mode;
	root->ops = mode == CG_MODE_V2 ? &cg_v2_ops : &cg_v1_ops;
	root->unified_hier = -1;
	root->main_hier = -1;
	for (int i = 0; i < _CG_C_MAX; i++)
		root->ctrl_hier[i] = -1;
	root->fs_root = strdup(fs_root);
	/* normalised: no leading/trailing '/' */
	while (*subtree == '/')
		subtree++;
	root->subtree = strdup(subtree);
	if (!root->fs_root || !root->subtree)
		return -ENOMEM;
	for (size_t l = strlen(root->subtree); l > 0 && root->subtree[l - 1] == '/'; l--)
		root->subtree[l - 1] = 0;
	r = root->ops->setup(root, opts);
	if (r < 0)
		return r;
	if (root->main_hier < 0)
		return -ENOENT;
	*ret = TAKE_PTR(root);
	return 0;
}

enum cg_mode cg_root_mode(const struct cg_root *root)
{
	return root ? root->mode : _CG_MODE_INVALID;
}

bool cg_root_has_unified(const struct cg_root *root)
{
	return root && root->unified_hier >= 0;
}

int cg_root_unified_fd(const struct cg_root *root)
{
	if (!root || root->unified_hier < 0)
		return -1;
	return root->hier[root->unified_hier].dir_fd;
}

/* v2: the subtree's own cpu.stat, where the subtree holds nothing but task cgroups. */
static bool v2_usage_whole(const struct cg_root *root)
{
	return root->mode == CG_MODE_V2 && !root->leaf;
}

const char *cg_root_cpu_usage_source(const struct cg_root *root, uint64_t *ret_res_ns)
{
	if (!root)
		return NULL;
	*ret_res_ns = v2_usage_whole(root) ? NSEC_PER_USEC : 1;
	if (v2_usage_whole(root))
		return "cpu.stat usage_usec";
	if (root->mode == CG_MODE_V1 && root->ctrl_hier[CG_C_CPUACCT] >= 0)
		return "cpuacct.usage";
	return NULL;
}

int cg_root_cpu_usage(const struct cg_root *root, uint64_t *ret_ns)
{
	_cleanup_close_ int fd = -1;
	char buf[4096]; /* as v2_stats reads a task's cpu.stat */
	uint64_t us;
	ssize_t n;
	int h;

	if (!root || !ret_ns)
		return -EINVAL;
	if (v2_usage_whole(root)) {
		fd = openat(root->hier[0].dir_fd, "cpu.stat", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		n = read_once(fd, buf, sizeof(buf));
		if (n < 0)
			return (int)n;
		if (cg_parse_keyed(buf, "usage_usec", &us) < 0)
			return -EIO;
		*ret_ns = us * NSEC_PER_USEC;
		return 0;
	}
	if (root->mode != CG_MODE_V1 || (h = root->ctrl_hier[CG_C_CPUACCT]) < 0)
		return -EOPNOTSUPP;
	fd = openat(root->hier[h].dir_fd, "cpuacct.usage", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return read_u64_fd(fd, ret_ns);
}

bool cg_root_swap_accounting(const struct cg_root *root)
{
	return root && root->swap_accounting;
}

int cg_root_move_self(struct cg_root *root, const char *leaf)
{
	if (!root || !cg_name_valid(leaf))
		return -EINVAL;
	if (!root->ops->move_self)
		return 0;
	return root->ops->move_self(root, leaf);
}

/* Is name something this agent may treat as one of its task cgroups? */
static bool is_task_name(const struct cg_root *root, const char *name)
{
	if (!cg_name_valid(name))
		return false;
	if (root->leaf && strcmp(name, root->leaf) == 0)
		return false;
	return true;
}

/* ---- tasks ---- */

void cg_task_free(struct cg_task *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < CG_MAX_HIER; i++) {
		closep(&t->dir_fd[i]);
		closep(&t->procs_fd[i]);
		closep(&t->join_fd[i]);
	}
	free(t->path);
	free(t);
}

static void cg_task_freep(struct cg_task **p)
{
	cg_task_free(*p);
}

static struct cg_task *task_new(struct cg_root *root, const char *name)
{
	struct cg_task *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->root = root;
	snprintf(t->name, sizeof(t->name), "%s", name);
	for (size_t i = 0; i < CG_MAX_HIER; i++)
		t->dir_fd[i] = t->procs_fd[i] = t->join_fd[i] = -1;
	return t;
}

/* Open the fds of directory i of t (already existing). */
static int task_open_hier(struct cg_task *t, size_t i)
{
	struct cg_hier *h = &t->root->hier[i];

	t->dir_fd[i] = openat(h->dir_fd, t->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (t->dir_fd[i] < 0)
		return -errno;
	t->procs_fd[i] = openat(t->dir_fd[i], "cgroup.procs", O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (t->procs_fd[i] < 0) {
		int r = -errno;

		closep(&t->dir_fd[i]);
		return r;
	}
	if (!h->unified) {
		t->join_fd[i] = openat(t->dir_fd[i], "tasks", O_WRONLY | O_CLOEXEC | O_NOCTTY);
		if (t->join_fd[i] < 0) {
			int r = -errno;

			closep(&t->procs_fd[i]);
			closep(&t->dir_fd[i]);
			return r;
		}
	}
	return 0;
}

void cg_task_park(struct cg_task *t)
{
	if (!t || t->parked)
		return;
	t->parked_dirs = 0;
	for (size_t i = 0; i < t->root->n_hier; i++) {
		if (t->dir_fd[i] >= 0)
			t->parked_dirs |= 1u << i;
		closep(&t->dir_fd[i]);
		closep(&t->procs_fd[i]);
		closep(&t->join_fd[i]);
		t->dir_fd[i] = t->procs_fd[i] = t->join_fd[i] = -1;
	}
	t->parked = true;
}

/*
 * A parked task's directories open again (with join: their cgroup.procs and tasks files
 * too, for attaching and joining). A directory gone meanwhile stays -1, as if the task had
 * none there. The fds are a cache of the names: callers given a const task may reopen them.
 */
static int task_unpark(const struct cg_task *ct, bool join)
{
	struct cg_task *t = (struct cg_task *)ct;

	if (!t->parked)
		return 0;
	for (size_t i = 0; i < t->root->n_hier; i++) {
		int r;

		if (!(t->parked_dirs & (1u << i)))
			continue;
		if (join) {
			r = task_open_hier(t, i);
		} else {
			t->dir_fd[i] = openat(t->root->hier[i].dir_fd, t->name,
					      O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			r = t->dir_fd[i] < 0 ? -errno : 0;
		}
		if (r < 0 && r != -ENOENT) {
			for (size_t k = 0; k < i; k++) {
				closep(&t->dir_fd[k]);
				closep(&t->procs_fd[k]);
				closep(&t->join_fd[k]);
				t->dir_fd[k] = t->procs_fd[k] = t->join_fd[k] = -1;
			}
			return r;
		}
	}
	t->parked = false;
	return 0;
}

/* For the periodic calls: unparked for the call (*was says whether to park it again). */
static int task_unpark_for_call(const struct cg_task *t, bool *was)
{
	*was = t->parked;
	return task_unpark(t, false);
}

static void task_repark(const struct cg_task *t, bool was)
{
	if (was)
		cg_task_park((struct cg_task *)t);
}

static int task_finish_open(struct cg_task *t)
{
	struct cg_root *root = t->root;
	int m = root->main_hier;
	struct stat st;

	if (asprintf(&t->path, "%s/%s", root->hier[m].dir, t->name) < 0) {
		t->path = NULL;
		return -ENOMEM;
	}
	if (root->unified_hier >= 0 && t->dir_fd[root->unified_hier] >= 0) {
		if (fstat(t->dir_fd[root->unified_hier], &st) < 0)
			return -errno;
		t->unified_id = (uint64_t)st.st_ino;
	}
	return 0;
}

/* Does the directory still list a process? (An unreadable list counts as one.) */
static bool has_procs(int dirfd)
{
	_cleanup_free_ char *buf = NULL;

	if (dirfd < 0 || read_file_at(dirfd, "cgroup.procs", CG_FILE_MAX, &buf, NULL) < 0)
		return dirfd >= 0;
	for (const char *p = buf; *p; p++)
		if (*p >= '0' && *p <= '9')
			return true;
	return false;
}

/*
 * rmdir the task's directory in hierarchy i, retrying EBUSY briefly while processes finish
 * exiting; at once -EBUSY when it still lists a process (one that cannot be killed, waiting
 * in the kernel on a filesystem that does not answer, would otherwise cost a second of
 * sleeping per directory and attempt).
 */
static int task_rmdir(struct cg_task *t, size_t i)
{
	struct cg_hier *h = &t->root->hier[i];

	for (int tries = 0;; tries++) {
		if (unlinkat(h->dir_fd, t->name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY || tries >= CG_RMDIR_TRIES)
			return -errno;
		if (has_procs(t->dir_fd[i]))
			return -EBUSY;
		cg_sleep_ms(CG_RMDIR_SLEEP_MS);
	}
}

int cg_limits_validate(const struct cg_limits *l)
{
	if (!l)
		return -EINVAL;
	if (l->n_io > CG_IO_MAX)
		return -E2BIG;
	if (!isfinite(l->cpus) || l->cpus < 0 || l->cpus > CG_CPUS_MAX)
		return -ERANGE;
	if (l->cpu_weight > 10000)
		return -ERANGE;
	for (size_t i = 0; i < l->n_io; i++)
		if (!l->io[i].rbps && !l->io[i].wbps)
			return -EINVAL;
	return 0;
}

/* A task without limits. */
static const struct cg_limits no_limits = {.swap_max = UINT64_MAX};

/* Controllers a task with these limits (NULL: none) needs (see struct cg_limits). */
static unsigned hierarchies_needed(const struct cg_limits *l)
{
	unsigned need = 1u << CG_C_MEMORY | 1u << CG_C_CPUACCT | 1u << CG_C_FREEZER;

	if (!l)
		l = &no_limits;

	if (l->cpus > 0 || l->cpu_weight)
		need |= 1u << CG_C_CPU;
	if (l->pids_max)
		need |= 1u << CG_C_PIDS;
	if (l->n_io > 0 || l->block_stats)
		need |= 1u << CG_C_BLKIO;
	if (l->devices)
		need |= 1u << CG_C_DEVICES;
	return need;
}

/* Whether a task whose limits need the controllers in need has a directory in hierarchy i:
 * the unified and the main one always, a v1 one when it serves one of them. */
static bool hier_wanted(const struct cg_root *root, size_t i, unsigned need)
{
	return root->hier[i].unified || (root->hier[i].ctrls & need) || (int)i == root->main_hier;
}

/* The first hierarchy from i on where t, for the controllers in need, should have a directory
 * and has none; n_hier if there is none. */
static size_t next_missing(const struct cg_task *t, size_t i, unsigned need)
{
	while (i < t->root->n_hier && (t->dir_fd[i] >= 0 || !hier_wanted(t->root, i, need)))
		i++;
	return i;
}

/* mkdir and open t's directory in hierarchy i. On failure nothing of it is left. */
static int task_make_hier(struct cg_task *t, size_t i)
{
	int r;

	if (mkdirat(t->root->hier[i].dir_fd, t->name, 0755) < 0)
		return -errno;
	r = task_open_hier(t, i);
	if (r < 0)
		(void)unlinkat(t->root->hier[i].dir_fd, t->name, AT_REMOVEDIR);
	return r;
}

/* mkdir and open t's directory in every hierarchy of need it does not have yet. On failure
 * what this call made is removed again. */
static int task_add_hiers(struct cg_task *t, unsigned need)
{
	struct cg_root *root = t->root;
	bool created[CG_MAX_HIER] = {false};
	int r = 0;

	for (size_t i = next_missing(t, 0, need); i < root->n_hier;
	     i = next_missing(t, i + 1, need)) {
		r = task_make_hier(t, i);
		if (r < 0)
			break;
		created[i] = true;
	}
	if (r >= 0)
		return 0;
	for (size_t i = 0; i < root->n_hier; i++) {
		if (!created[i])
			continue;
		closep(&t->dir_fd[i]);
		closep(&t->procs_fd[i]);
		closep(&t->join_fd[i]);
		t->dir_fd[i] = t->procs_fd[i] = t->join_fd[i] = -1;
		(void)unlinkat(root->hier[i].dir_fd, t->name, AT_REMOVEDIR);
	}
	return r;
}

int cg_task_precreate_begin(struct cg_root *root, const char *name, const struct cg_limits *like,
			    struct cg_task **ret)
{
	struct cg_task *t;
	int r;

	if (!root || !ret || !is_task_name(root, name))
		return -EINVAL;
	if (root->ops->prepare_task) {
		r = root->ops->prepare_task(root);
		if (r < 0)
			return r;
	}
	t = task_new(root, name);
	if (!t)
		return -ENOMEM;
	t->pre_need = hierarchies_needed(like);
	*ret = t;
	return 0;
}

int cg_task_precreate_step(struct cg_task *t)
{
	size_t i;
	int r;

	if (!t || !t->pre_need)
		return -EINVAL;
	r = task_unpark(t, true);
	if (r < 0)
		return r;
	i = next_missing(t, 0, t->pre_need);
	if (i < t->root->n_hier) {
		r = task_make_hier(t, i);
		if (r < 0)
			return r;
		if (next_missing(t, i + 1, t->pre_need) < t->root->n_hier)
			return 1;
	}
	t->pre_need = 0;
	return task_finish_open(t);
}

int cg_task_precreate(struct cg_root *root, const char *name, const struct cg_limits *like,
		      struct cg_task **ret)
{
	_cleanup_(cg_task_freep) struct cg_task *t = NULL;
	int r;

	r = cg_task_precreate_begin(root, name, like, &t);
	if (r < 0)
		return r;
	r = task_add_hiers(t, t->pre_need);
	if (r < 0)
		return r;
	t->pre_need = 0;
	r = task_finish_open(t);
	if (r < 0) {
		(void)cg_task_destroy(t);
		return r;
	}
	*ret = TAKE_PTR(t);
	return 0;
}

bool cg_task_fits(const struct cg_task *t, const struct cg_limits *limits)
{
	const struct cg_root *root = t->root;
	unsigned need = hierarchies_needed(limits);

	for (size_t i = 0; i < root->n_hier; i++)
		if ((t->parked ? (t->parked_dirs & (1u << i)) != 0 : t->dir_fd[i] >= 0) &&
		    !hier_wanted(root, i, need))
			return false;
	return true;
}

int cg_task_apply(struct cg_task *t, const struct cg_limits *limits)
{
	int r;

	if (!t)
		return -EINVAL;
	if (limits) {
		r = cg_limits_validate(limits);
		if (r < 0)
			return r;
	}
	r = task_unpark(t, true);
	if (r < 0)
		return r;
	r = task_add_hiers(t, hierarchies_needed(limits));
	if (r < 0)
		return r;
	return t->root->ops->apply_limits(t, limits ? limits : &no_limits);
}

int cg_task_create(struct cg_root *root, const char *name, const struct cg_limits *limits,
		   struct cg_task **ret)
{
	_cleanup_(cg_task_freep) struct cg_task *t = NULL;
	int r;

	if (!root || !ret || !is_task_name(root, name))
		return -EINVAL;
	if (limits) {
		r = cg_limits_validate(limits);
		if (r < 0)
			return r;
	}
	r = cg_task_precreate(root, name, limits, &t);
	if (r < 0)
		return r;
	r = cg_task_apply(t, limits);
	if (r < 0) {
		(void)cg_task_destroy(t);
		return r;
	}
	*ret = TAKE_PTR(t);
	return 0;
}

int cg_task_open(struct cg_root *root, const char *name, struct cg_task **ret)
{
	_cleanup_(cg_task_freep) struct cg_task *t = NULL;
	size_t found = 0;
	int r;

	if (!root || !ret || !is_task_name(root, name))
		return -EINVAL;
	t = task_new(root, name);
	if (!t)
		return -ENOMEM;
	/* Tolerant: a half-removed leftover still opens, so that it can be destroyed. */
	for (size_t i = 0; i < root->n_hier; i++) {
		r = task_open_hier(t, i);
		if (r == 0)
			found++;
		else if (r != -ENOENT)
			return r;
	}
	if (found == 0 || t->dir_fd[root->main_hier] < 0)
		return -ENOENT;
	r = task_finish_open(t);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(t);
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int cg_root_list_tasks(struct cg_root *root, char ***ret_names, size_t *ret_n)
{
	char **names = NULL;
	size_t n = 0, cap = 0, u = 0;
	int r = 0;

	if (!root || !ret_names || !ret_n)
		return -EINVAL;
	for (size_t i = 0; i < root->n_hier && r == 0; i++) {
		_cleanup_closedir_ DIR *d = NULL;
		struct dirent *de;
		int fd = openat(root->hier[i].dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0) {
			r = -errno;
			break;
		}
		d = fdopendir(fd);
		if (!d) {
			r = -errno;
			close(fd);
			break;
		}
		while ((de = readdir(d))) {
			if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
				continue;
			if (!is_task_name(root, de->d_name))
				continue;
			if (n == cap) {
				char **nn;

				if (cap >= CG_TASKS_MAX) {
					r = -E2BIG;
					break;
				}
				cap = cap ? cap * 2 : 16;
				nn = realloc(names, cap * sizeof(*nn));
				if (!nn) {
					r = -ENOMEM;
					break;
				}
				names = nn;
			}
			names[n] = strdup(de->d_name);
			if (!names[n]) {
				r = -ENOMEM;
				break;
			}
			n++;
		}
	}
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return r;
	}
	if (n > 0)
		qsort(names, n, sizeof(*names), str_cmp);
	for (size_t i = 0; i < n; i++) {
		if (u > 0 && strcmp(names[u - 1], names[i]) == 0) {
			free(names[i]);
			continue;
		}
		names[u++] = names[i];
	}
	*ret_names = names;
	*ret_n = u;
	return 0;
}

int cg_task_clone_fd(const struct cg_task *t)
{
	if (!t || task_unpark(t, true) < 0)
		return -1;
	if (t->root->mode == CG_MODE_V2)
		return t->dir_fd[t->root->main_hier];
	return t->root->unified_hier >= 0 ? t->dir_fd[t->root->unified_hier] : -1;
}

size_t cg_task_join_fds(const struct cg_task *t, int *fds, bool *unified, size_t max)
{
	size_t n = 0;

	if (!t || task_unpark(t, true) < 0)
		return 0;
	for (size_t i = 0; i < t->root->n_hier && n < max; i++) {
		int fd = t->root->hier[i].unified ? t->procs_fd[i] : t->join_fd[i];

		if (fd < 0)
			continue;
		if (unified)
			unified[n] = t->root->hier[i].unified;
		fds[n++] = fd;
	}
	return n;
}

bool cg_task_clone_joins_all(const struct cg_task *t)
{
	return t && t->root->mode == CG_MODE_V2;
}

int cg_task_unified_fd(const struct cg_task *t)
{
	if (!t || t->root->unified_hier < 0 || task_unpark(t, false) < 0)
		return -1;
	return t->dir_fd[t->root->unified_hier];
}

uint64_t cg_task_unified_id(const struct cg_task *t)
{
	return t ? t->unified_id : 0;
}

int cg_task_ctrl_fd(const struct cg_task *t, enum cg_ctrl c)
{
	if (!t || t->root->mode != CG_MODE_V1 || c < 0 || c >= _CG_C_MAX ||
	    t->root->ctrl_hier[c] < 0)
		return -1;
	return t->dir_fd[t->root->ctrl_hier[c]];
}

/* The hierarchy index of controller c (_CG_C_MAX: the main one), -1 without it. */
static int task_hier_of(const struct cg_task *t, enum cg_ctrl c)
{
	if (c == _CG_C_MAX || t->root->mode != CG_MODE_V1)
		return t->root->main_hier;
	if (c < 0 || c > _CG_C_MAX)
		return -1;
	return t->root->ctrl_hier[c];
}

bool cg_task_has_dir(const struct cg_task *t, enum cg_ctrl c)
{
	int h = task_hier_of(t, c);

	if (h < 0)
		return false;
	return t->parked ? (t->parked_dirs & (1u << h)) != 0 : t->dir_fd[h] >= 0;
}

/* A file of the task's directory in the hierarchy of c, parked or not: an fd or -errno. */
static int task_open_file(const struct cg_task *t, enum cg_ctrl c, const char *file, int flags)
{
	char path[CG_NAME_MAX + 1 + 64];
	int h = task_hier_of(t, c), fd;

	if (!cg_task_has_dir(t, c))
		return -ENOENT;
	flags |= O_CLOEXEC | O_NOCTTY | O_NOFOLLOW;
	if (t->parked) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", t->name, file) >= sizeof(path))
			return -ENAMETOOLONG;
		fd = openat(t->root->hier[h].dir_fd, path, flags);
	} else {
		fd = openat(t->dir_fd[h], file, flags);
	}
	return fd < 0 ? -errno : fd;
}

int cg_task_read(const struct cg_task *t, enum cg_ctrl c, const char *file, char *buf, size_t size)
{
	_cleanup_close_ int fd = -1;

	if (size < 2)
		return -EINVAL;
	fd = task_open_file(t, c, file, O_RDONLY);
	if (fd < 0)
		return fd;
	return (int)read_once(fd, buf, size);
}

int cg_task_read_alloc(const struct cg_task *t, enum cg_ctrl c, const char *file, size_t max,
		       char **ret)
{
	char path[CG_NAME_MAX + 1 + 64];
	int h = task_hier_of(t, c);

	if (!cg_task_has_dir(t, c))
		return -ENOENT;
	if (!t->parked)
		return read_file_at(t->dir_fd[h], file, max, ret, NULL);
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", t->name, file) >= sizeof(path))
		return -ENAMETOOLONG;
	return read_file_at(t->root->hier[h].dir_fd, path, max, ret, NULL);
}

int cg_task_read_u64(const struct cg_task *t, enum cg_ctrl c, const char *file, uint64_t *ret)
{
	_cleanup_close_ int fd = task_open_file(t, c, file, O_RDONLY);

	if (fd < 0)
		return fd;
	return read_u64_fd(fd, ret);
}

int cg_task_oom_kills(const struct cg_task *t, uint64_t *ret)
{
	char buf[1024];
	int r;

	if (!t || !ret)
		return -EINVAL;
	if (t->root->mode == CG_MODE_V2)
		r = cg_task_read(t, _CG_C_MAX, "memory.events", buf, sizeof(buf));
	else
		r = cg_task_read(t, CG_C_MEMORY, "memory.oom_control", buf, sizeof(buf));
	if (r < 0)
		return r;
	*ret = 0;
	(void)cg_parse_keyed(buf, "oom_kill", ret); /* absent before 4.13 */
	return 0;
}

int cg_task_oom_eventfd(const struct cg_task *t)
{
	_cleanup_close_ int efd = -1, ofd = -1, cfd = -1;
	char buf[64];
	int n;

	if (!t)
		return -EINVAL;
	if (t->root->mode != CG_MODE_V1)
		return -EOPNOTSUPP;
	ofd = task_open_file(t, CG_C_MEMORY, "memory.oom_control", O_RDONLY);
	if (ofd < 0)
		return ofd == -ENOENT ? -EOPNOTSUPP : ofd;
	cfd = task_open_file(t, CG_C_MEMORY, "cgroup.event_control", O_WRONLY);
	if (cfd < 0)
		return cfd;
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0)
		return -errno;
	/* "<event_fd> <fd of memory.oom_control>": the kernel keeps the registration (and
	 * signals the eventfd when the cgroup is removed), not the two files */
	n = snprintf(buf, sizeof(buf), "%d %d", efd, ofd);
	if (write(cfd, buf, (size_t)n) != n)
		return -errno;
	return TAKE_FD(efd);
}

int cg_task_v1_dir_fd(const struct cg_task *t, const char *controller)
{
	if (!t || task_unpark(t, false) < 0)
		return -1;
	return cg_task_ctrl_fd(t, cg_ctrl_from_string(controller));
}

/*
 * Async-signal-safe: only write(2). "0" moves the writing thread (v1 tasks) or process
 * (cgroup.procs); the caller is single-threaded.
 */
int cg_join_fds(const int *fds, const bool *unified, size_t n, bool unified_done)
{
	for (size_t i = 0; i < n; i++) /* "0": the calling thread, the whole (new) process */
		if (!(unified_done && unified[i]) && write(fds[i], "0", 1) != 1)
			return -errno;
	return 0;
}

int cg_task_join_self(const struct cg_task *t, bool unified_done)
{
	int fds[CG_MAX_HIER];
	bool unified[CG_MAX_HIER];

	if (!t)
		return -EINVAL;
	return cg_join_fds(fds, unified, cg_task_join_fds(t, fds, unified, CG_MAX_HIER),
			   unified_done);
}

int cg_task_attach(const struct cg_task *t, pid_t pid)
{
	char buf[DECIMAL_STR_MAX(pid_t)];
	int len;

	if (!t || pid <= 0)
		return -EINVAL;
	if (task_unpark(t, true) < 0)
		return -errno;
	len = snprintf(buf, sizeof(buf), "%d", (int)pid);
	for (size_t i = 0; i < t->root->n_hier; i++) {
		if (t->procs_fd[i] < 0)
			continue;
		if (write(t->procs_fd[i], buf, (size_t)len) != len)
			return -errno;
	}
	return 0;
}

int cg_task_stats(const struct cg_task *t, struct cg_stats *ret)
{
	struct cg_stats s = {0};
	int r;

	if (!t || !ret)
		return -EINVAL;
	/* parked or not: the backends read a parked task's files by name (cg_task_read) */
	r = t->root->ops->stats(t, &s);
	if (r < 0)
		return r;
	*ret = s;
	return 0;
}

int cg_task_memory_current(const struct cg_task *t, uint64_t *ret)
{
	if (!t || !ret)
		return -EINVAL;
	if (t->root->mode == CG_MODE_V2)
		return cg_task_read_u64(t, _CG_C_MAX, "memory.current", ret);
	if (!cg_task_has_dir(t, CG_C_MEMORY))
		return -EOPNOTSUPP;
	return cg_task_read_u64(t, CG_C_MEMORY, "memory.usage_in_bytes", ret);
}

int cg_task_pids(const struct cg_task *t, pid_t **ret, size_t *ret_n)
{
	_cleanup_free_ char *buf = NULL;
	bool was;
	int r;

	if (!t || !ret || !ret_n)
		return -EINVAL;
	r = task_unpark_for_call(t, &was);
	if (r < 0)
		return r;
	r = read_file_at(t->dir_fd[t->root->main_hier], "cgroup.procs", CG_FILE_MAX, &buf, NULL);
	task_repark(t, was);
	if (r < 0)
		return r;
	return cg_parse_pids(buf, ret, ret_n);
}

int cg_task_is_empty(const struct cg_task *t)
{
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;
	int r = cg_task_pids(t, &pids, &n);

	if (r < 0)
		return r;
	return n == 0;
}

int cg_task_kill(const struct cg_task *t, int sig)
{
	bool was;
	int r;

	if (!t || sig <= 0 || sig >= NSIG)
		return -EINVAL;
	r = task_unpark_for_call(t, &was);
	if (r < 0)
		return r;
	r = t->root->ops->kill(t, sig);
	task_repark(t, was);
	return r;
}

/* Remove t's directory in hierarchy i and close its fds there. */
static int task_remove_hier(struct cg_task *t, size_t i)
{
	/* Open fds on cgroupfs files do not keep a directory busy. */
	int r = task_rmdir(t, i);

	if (r < 0)
		return r;
	closep(&t->procs_fd[i]);
	closep(&t->join_fd[i]);
	closep(&t->dir_fd[i]);
	t->procs_fd[i] = t->join_fd[i] = t->dir_fd[i] = -1;
	return 0;
}

/*
 * The k-th position of the removal order, from k on, where t still has a directory: the main
 * directory comes last, so that a failure leaves the task re-openable. n_hier if none is left.
 * *i gets the hierarchy.
 */
static size_t next_present(const struct cg_task *t, size_t k, size_t *i)
{
	size_t n = t->root->n_hier;

	for (; k < n; k++) {
		*i = (size_t)((t->root->main_hier + 1 + (int)k) % (int)n);
		if (t->dir_fd[*i] >= 0)
			break;
	}
	return k;
}

static int destroy_check(const struct cg_task *t)
{
	if (!t)
		return -EINVAL;
	return is_task_name(t->root, t->name) ? 0 : -EPERM;
}

int cg_task_destroy(struct cg_task *t)
{
	size_t i = 0;
	int r = destroy_check(t);

	if (r < 0)
		return r;
	r = task_unpark(t, false);
	if (r < 0)
		return r;
	for (size_t k = next_present(t, 0, &i); k < t->root->n_hier;
	     k = next_present(t, k + 1, &i)) {
		int q = task_remove_hier(t, i);

		if (q < 0 && r == 0)
			r = q;
	}
	return r;
}

int cg_task_destroy_step(struct cg_task *t)
{
	size_t i = 0, k;
	int r = destroy_check(t);

	if (r < 0)
		return r;
	r = task_unpark(t, false);
	if (r < 0)
		return r;
	k = next_present(t, 0, &i);
	if (k == t->root->n_hier)
		return 0;
	r = task_remove_hier(t, i);
	if (r < 0)
		return r;
	return next_present(t, k + 1, &i) < t->root->n_hier;
}

const char *cg_task_name(const struct cg_task *t)
{
	return t ? t->name : NULL;
}

const char *cg_task_path(const struct cg_task *t)
{
	return t ? t->path : NULL;
}
