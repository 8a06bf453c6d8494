/* SPDX-License-Identifier: MIT */
#include "isolation/launch.h"
#include "isolation/cgroup.h"
#include "isolation/seccomp.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
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
    [LAUNCH_STEP_NAMESPACES] = "unshare namespaces",
    [LAUNCH_STEP_MOUNT] = "mount",
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
    [LAUNCH_STEP_LANDLOCK] = "landlock",
};

void launch_plan_set_cgroup(struct launch_plan *p, const struct cg_task *cg)
{
	p->clone_cgroup_fd = cg_task_clone_fd(cg);
	p->n_join = cg_task_join_fds(cg, p->join_fd, p->join_unified, LAUNCH_JOIN_MAX);
	p->clone_joins_all = cg_task_clone_joins_all(cg);
}

const char *launch_step_to_string(enum launch_step s)
{
	s = LAUNCH_STEP_BASE(s);
	if ((unsigned)s >= _LAUNCH_STEP_MAX)
		return "unknown step";
	return step_names[s];
}

void launch_format_error(const struct launch_plan *plan, enum launch_step step, int err, char *buf,
			 size_t len)
{
	static const char *const mount_what[_LAUNCH_MOUNT_MAX] = {
	    [LAUNCH_MOUNT_TMPFS] = "private tmpfs",
	    [LAUNCH_MOUNT_READ_ONLY] = "read-only",
	    [LAUNCH_MOUNT_HIDE] = "hide",
	    [LAUNCH_MOUNT_BIND] = "bind",
	    [LAUNCH_MOUNT_PROC] = "procfs of the PID namespace at",
	    [LAUNCH_MOUNT_NONE] = "landlock target",
	    [LAUNCH_MOUNT_DEV] = "private /dev at",
	};
	const char *what = NULL;
	int idx = LAUNCH_STEP_INDEX(step);

	step = LAUNCH_STEP_BASE(step);
	if (step == LAUNCH_STEP_MOUNT && idx >= 0 && (size_t)idx < plan->n_mounts) {
		const struct launch_mount *m = &plan->mounts[idx];
		const char *hint = "";

		if (err == ENOSYS && m->op == LAUNCH_MOUNT_READ_ONLY)
			hint = " (read-only mounts need mount_setattr, Linux 5.12)";
		else if (err == EPERM || err == EACCES)
			hint =
			    " (the agent needs CAP_SYS_ADMIN; set [sandbox] mount_namespace = no "
			    "to run without)";
		snprintf(buf, len, "mount namespace: %s %s%s%s: %s%s",
			 (unsigned)m->op < _LAUNCH_MOUNT_MAX ? mount_what[m->op] : "?", m->path,
			 m->src ? " from " : "", m->src ? m->src : "", strerror(err), hint);
		return;
	}
	if (step == LAUNCH_STEP_LANDLOCK) {
		snprintf(buf, len, "landlock: %s%s", strerror(err),
			 err == ENOSYS ? " (kernel without Landlock; set [sandbox] landlock = no)"
			 : err == EOPNOTSUPP ? " (Landlock not enabled at boot: lsm=...,landlock; "
					       "set [sandbox] landlock = no)"
			 : err == ENOSPC     ? " (more protected paths than the launch can track)"
					     : "");
		return;
	}
	if (step == LAUNCH_STEP_NAMESPACES) {
		snprintf(buf, len, "unshare namespaces (%s%s%s): %s%s",
			 plan->ns_flags & LAUNCH_NS_MOUNT ? "mount " : "",
			 plan->ns_flags & LAUNCH_NS_IPC ? "ipc " : "",
			 plan->ns_flags & LAUNCH_NS_UTS ? "uts" : "", strerror(err),
			 err == EINVAL ? " (kernel without CONFIG_NAMESPACES for one of them)"
				       : "");
		return;
	}
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
	case LAUNCH_STEP_STDIN:
		what = plan->stdin_path;
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

void launch_report_error(int err_fd, enum launch_step step, int err)
{
	struct child_error ce = {.step = (int32_t)step, .err = err ? err : EIO};

	(void)!write(err_fd, &ce, sizeof(ce));
}

_noreturn_ static void child_fail(int err_fd, enum launch_step step, int err)
{
	launch_report_error(err_fd, step, err);
	_exit(127);
}

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
struct launch_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

/* The mount at path and every mount below it read-only (one mount_setattr(2)). */
static int mount_read_only(const char *path)
{
	struct launch_mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};

	if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &a, sizeof(a)) < 0)
		return -errno;
	return 0;
}

/*
 * A private /dev (like systemd's PrivateDevices= or bwrap --dev): a small tmpfs with the usual
 * nodes bound from the node's /dev (bind mounts keep the node's device numbers without
 * CAP_MKNOD), the node's /dev/shm and /dev/hugepages, a devpts instance of its own, the /proc
 * links, and the names in extra (the task's GPU nodes, a site's dev_paths). What the node's
 * /dev lacks is skipped. The tmpfs itself is read-only once filled.
 */
#define DEV_ENTRIES_MAX 48
/* One entry of the node's /dev, taken before the private one hides it: an O_PATH fd of it, or
 * a symbolic link's target. */
struct dev_entry {
	char name[64];
	char target[108]; /* a symbolic link's */
	int fd;
	mode_t mode;
};

/* The entry placed in the private /dev at path: the same symbolic link, or a node or directory
 * bind-mounted from the node's. */
static int dev_entry_place(const char *path, const struct dev_entry *e)
{
	char p[256], src[40];
	int fd, r = 0;

	if (snprintf(p, sizeof(p), "%s/%s", path, e->name) >= (int)sizeof(p))
		return 0;
	/* parents of a nested name ("dri/renderD128") */
	for (char *s = strchr(p + strlen(path) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		(void)mkdir(p, 0755);
		*s = '/';
	}
	if (S_ISLNK(e->mode))
		return symlink(e->target, p) < 0 && errno != EEXIST ? -errno : 0;
	if (S_ISDIR(e->mode)) {
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			r = -errno;
	} else {
		fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			r = -errno;
		else
			close(fd);
	}
	snprintf(src, sizeof(src), "/proc/self/fd/%d", e->fd);
	if (r == 0 && mount(src, p, NULL, MS_BIND | MS_REC, NULL) < 0)
		r = -errno;
	return r;
}

static int mount_private_dev(const char *path, const char *extra)
{
	static const char *const base[] = {"null", "zero", "full",	"random", "urandom",
					   "tty",  "shm",  "hugepages", "log"};
	static const char *const links[][2] = {{"fd", "/proc/self/fd"},
					       {"stdin", "/proc/self/fd/0"},
					       {"stdout", "/proc/self/fd/1"},
					       {"stderr", "/proc/self/fd/2"},
					       {"ptmx", "pts/ptmx"}};
	struct dev_entry e[DEV_ENTRIES_MAX];
	size_t n = 0;
	char p[256];
	const char *x = extra ? extra : "";
	int dfd, r = 0;

	dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	/* Before the tmpfs hides them: an O_PATH fd of each of the node's entries. */
	for (size_t i = 0; n < DEV_ENTRIES_MAX; i++) {
		const char *name;
		size_t len;
		struct stat st;

		if (i < ARRAY_SIZE(base)) {
			name = base[i];
			len = strlen(name);
		} else {
			while (*x == ' ')
				x++;
			if (!*x)
				break;
			name = x;
			len = strcspn(x, " ");
			x += len;
		}
		if (len == 0 || len >= sizeof(e[n].name))
			continue;
		memcpy(e[n].name, name, len);
		e[n].name[len] = 0;
		/* names below /dev only: no "..", no absolute path */
		if (e[n].name[0] == '/' || strstr(e[n].name, ".."))
			continue;
		if (fstatat(dfd, e[n].name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		e[n].mode = st.st_mode;
		e[n].fd = -1;
		if (S_ISLNK(st.st_mode)) {
			ssize_t l =
			    readlinkat(dfd, e[n].name, e[n].target, sizeof(e[n].target) - 1);

			if (l <= 0)
				continue;
			e[n].target[l] = 0;
		} else if ((e[n].fd = openat(dfd, e[n].name, O_PATH | O_NOFOLLOW | O_CLOEXEC)) <
			   0) {
			continue;
		}
		n++;
	}
	close(dfd);
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NOEXEC | MS_STRICTATIME,
		  "mode=755,size=64k,nr_inodes=256") < 0) {
		r = -errno;
		goto out;
	}
	for (size_t i = 0; i < n && r == 0; i++)
		r = dev_entry_place(path, &e[i]);
	if (r < 0)
		goto out;
	snprintf(p, sizeof(p), "%s/pts", path);
	if (mkdir(p, 0755) < 0 || mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC,
					"newinstance,ptmxmode=0666,mode=620") < 0) {
		r = -errno;
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		snprintf(p, sizeof(p), "%s/%s", path, links[i][0]);
		if (symlink(links[i][1], p) < 0 && errno != EEXIST) {
			r = -errno;
			goto out;
		}
	}
	{
		struct launch_mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};

		if (syscall(SYS_mount_setattr, AT_FDCWD, path, 0, &a, sizeof(a)) < 0)
			r = -errno;
	}
out:
	for (size_t i = 0; i < n; i++)
		if (e[i].fd >= 0)
			close(e[i].fd);
	return r;
}

/* One planned mount, in the task's mount namespace. Raw system calls only. */
static int apply_mount(const struct launch_mount *m)
{
	struct stat st;

	if (m->optional && stat(m->path, &st) < 0 && errno == ENOENT)
		return 0;
	switch (m->op) {
	case LAUNCH_MOUNT_TMPFS:
		if (mount("tmpfs", m->path, "tmpfs", MS_NOSUID | MS_NODEV, m->data) < 0)
			return -errno;
		return 0;
	case LAUNCH_MOUNT_READ_ONLY:
		/* A bind of itself first: /usr may be no mount point of its own. */
		if (mount(m->path, m->path, NULL, MS_BIND | MS_REC, NULL) < 0)
			return -errno;
		return mount_read_only(m->path);
	case LAUNCH_MOUNT_HIDE:
		if (stat(m->path, &st) < 0)
			return -errno;
		if (S_ISDIR(st.st_mode)) {
			if (mount("tmpfs", m->path, "tmpfs",
				  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
				  "size=4k,nr_inodes=1,mode=000") < 0)
				return -errno;
			return 0;
		}
		if (mount("/dev/null", m->path, NULL, MS_BIND, NULL) < 0)
			return -errno;
		return mount_read_only(m->path);
	case LAUNCH_MOUNT_BIND:
		if (mount(m->src, m->path, NULL, MS_BIND | MS_REC, NULL) < 0)
			return -errno;
		if (m->data && strcmp(m->data, "ro") == 0)
			return mount_read_only(m->path);
		return 0;
	case LAUNCH_MOUNT_PROC:
		if (mount("proc", m->path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			return -errno;
		return 0;
	case LAUNCH_MOUNT_NONE:
		return 0;
	case LAUNCH_MOUNT_DEV:
		return mount_private_dev(m->path, m->data);
	default:
		return -EINVAL;
	}
}

/* ---- Landlock (docs/sandbox.md) ----------------------------------------------------------- */

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH	  1
#define LL_EXECUTE		  (1ULL << 0)
#define LL_WRITE_FILE		  (1ULL << 1)
#define LL_READ_FILE		  (1ULL << 2)
#define LL_READ_DIR		  (1ULL << 3)
#define LL_TRUNCATE		  (1ULL << 14)
#define LL_IOCTL_DEV		  (1ULL << 15)
#define LL_FILE_RIGHTS		  (LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV)
#define LL_READ_ONLY		  (LL_EXECUTE | LL_READ_FILE | LL_READ_DIR)
#define LL_IDS_MAX		  512
#define LL_DEPTH_MAX		  32

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

/* An inode the rules care about: a protected path (its launch_landlock) or an ancestor. */
struct ll_id {
	dev_t dev;
	ino_t ino;
	uint8_t kind; /* LL_K_* bits */
};
#define LL_K_READ_ONLY 1
#define LL_K_DENY      2
#define LL_K_ANCESTOR  4

struct ll_ids {
	size_t n;
	struct ll_id v[LL_IDS_MAX];
};

int launch_landlock_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);

	return abi > 0 ? (int)abi : -errno;
}

/* Every file-system right the kernel's ABI knows. */
static uint64_t ll_fs_all(int abi)
{
	uint64_t r = (1ULL << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */

	if (abi >= 2)
		r |= 1ULL << 13; /* REFER */
	if (abi >= 3)
		r |= LL_TRUNCATE;
	if (abi >= 5)
		r |= LL_IOCTL_DEV;
	return r;
}

static uint8_t ll_kind(const struct ll_ids *ids, const struct stat *st)
{
	uint8_t k = 0;

	for (size_t i = 0; i < ids->n; i++)
		if (ids->v[i].dev == st->st_dev && ids->v[i].ino == st->st_ino)
			k |= ids->v[i].kind;
	return k;
}

static int ll_note(struct ll_ids *ids, const struct stat *st, uint8_t kind)
{
	for (size_t i = 0; i < ids->n; i++)
		if (ids->v[i].dev == st->st_dev && ids->v[i].ino == st->st_ino) {
			ids->v[i].kind |= kind;
			return 0;
		}
	if (ids->n == LL_IDS_MAX)
		return -ENOSPC;
	ids->v[ids->n++] = (struct ll_id){st->st_dev, st->st_ino, kind};
	return 0;
}

/*
 * Before the mounts (a hidden directory's own inode is out of reach after them): the inode of
 * each protected path, and of each directory above it up to "/" (".." crosses mounts).
 */
static int ll_collect(const struct launch_plan *p, struct ll_ids *ids)
{
	for (size_t i = 0; i < p->n_mounts; i++) {
		const struct launch_mount *m = &p->mounts[i];
		struct stat st, pst;
		int fd, pfd, r;

		if (m->landlock == LAUNCH_LANDLOCK_NONE)
			continue;
		fd = open(m->path, O_PATH | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT && (m->optional || m->op == LAUNCH_MOUNT_HIDE))
				continue;
			return -errno;
		}
		r = fstat(fd, &st) < 0
			? -errno
			: ll_note(ids, &st,
				  m->landlock == LAUNCH_LANDLOCK_DENY ? LL_K_DENY : LL_K_READ_ONLY);
		if (r < 0) {
			close(fd);
			return r;
		}
		for (int d = 0; d < 4 * LL_DEPTH_MAX; d++) {
			pfd = openat(fd, "..", O_PATH | O_CLOEXEC);
			close(fd);
			fd = pfd;
			if (fd < 0 || fstat(fd, &pst) < 0)
				break;
			if (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino)
				break; /* "/" is its own parent */
			if ((r = ll_note(ids, &pst, LL_K_ANCESTOR)) < 0) {
				close(fd);
				return r;
			}
			st = pst;
		}
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

static int ll_rule(int ruleset, int fd, uint64_t rights)
{
	struct ll_path_beneath pb = {.allowed_access = rights, .parent_fd = fd};

	if (!rights)
		return 0;
	if (syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
		return -errno;
	return 0;
}

/* The entries of an ancestor directory: each its rights (see enum launch_landlock). */
static int ll_walk(int ruleset, int dfd, uint64_t rights, const struct ll_ids *ids, int depth)
{
	char buf[2048];
	long n;
	int r = 0;

	while ((n = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *de = (void *)(buf + off);
			struct stat st;
			uint64_t er = rights;
			uint8_t k;
			int fd;

			off += de->reclen;
			if (de->name[0] == '.' &&
			    (de->name[1] == 0 || (de->name[1] == '.' && de->name[2] == 0)))
				continue;
			if (fstatat(dfd, de->name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    S_ISLNK(st.st_mode))
				continue; /* gone meanwhile; a link's target has its own rules */
			k = ll_kind(ids, &st);
			if (k & LL_K_DENY)
				continue;
			if (k & LL_K_READ_ONLY)
				er &= LL_READ_ONLY;
			if (!S_ISDIR(st.st_mode))
				er &= LL_FILE_RIGHTS;
			fd = openat(dfd, de->name,
				    (k & LL_K_ANCESTOR && S_ISDIR(st.st_mode)
					 ? O_RDONLY | O_DIRECTORY
					 : O_PATH) |
					O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				continue;
			if (k & LL_K_ANCESTOR && S_ISDIR(st.st_mode) && depth < LL_DEPTH_MAX) {
				r = ll_rule(ruleset, fd, er & LL_READ_DIR);
				if (r == 0)
					r = ll_walk(ruleset, fd, er, ids, depth + 1);
			} else {
				r = ll_rule(ruleset, fd, er);
			}
			close(fd);
			if (r < 0)
				return r;
		}
	}
	return n < 0 ? -errno : 0;
}

/* In the task's view, after the mounts: the ruleset, enforced on this process from now on. */
static int ll_apply(const struct ll_ids *ids)
{
	int abi = launch_landlock_abi(), ruleset, root, r;
	uint64_t all;

	if (abi < 0)
		return abi;
	all = ll_fs_all(abi);
	ruleset = (int)syscall(SYS_landlock_create_ruleset, &all, sizeof(all), 0);
	if (ruleset < 0)
		return -errno;
	root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		r = -errno;
		close(ruleset);
		return r;
	}
	r = ll_rule(ruleset, root, LL_READ_DIR);
	if (r == 0)
		r = ll_walk(ruleset, root, all, ids, 0);
	close(root);
	if (r == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
		r = -errno;
	close(ruleset);
	return r;
}

/* The task's namespaces and its view of the file system (plan->ns_flags, plan->mounts). */
static void apply_namespaces(const struct launch_plan *p, int err_fd)
{
	struct ll_ids ids;
	int flags = 0, r;

	if (p->ns_flags & LAUNCH_NS_MOUNT)
		flags |= CLONE_NEWNS;
	if (p->ns_flags & LAUNCH_NS_IPC)
		flags |= CLONE_NEWIPC;
	if (p->ns_flags & LAUNCH_NS_UTS)
		flags |= CLONE_NEWUTS;
	if (!flags)
		return;
	if (syscall(SYS_unshare, flags) < 0)
		child_fail(err_fd, LAUNCH_STEP_NAMESPACES, errno);
	if (!(flags & CLONE_NEWNS))
		return;
	/* Nothing done here may reach the node's mount table; the node's changes still come. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		child_fail(err_fd, LAUNCH_STEP_NAMESPACES, errno);
	if (p->ns_flags & LAUNCH_NS_LANDLOCK) {
		ids.n = 0;
		if ((r = ll_collect(p, &ids)) < 0)
			child_fail(err_fd, LAUNCH_STEP_LANDLOCK, -r);
	}
	for (size_t i = 0; i < p->n_mounts; i++) {
		r = apply_mount(&p->mounts[i]);
		if (r < 0)
			child_fail(err_fd, LAUNCH_STEP_CODE(LAUNCH_STEP_MOUNT, i), -r);
	}
	if (p->ns_flags & LAUNCH_NS_LANDLOCK && (r = ll_apply(&ids)) < 0)
		child_fail(err_fd, LAUNCH_STEP_LANDLOCK, -r);
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

/* What the task child needs from the shim (on the shim's stack: shared or copied). */
struct child_ctx {
	const struct launch_plan *p;
	int err_fd, sync_fd;
	int status_w;	/* shared_vm: the child reports its own pid here ("P <pid>") */
	int audit_sock; /* >= 0: hand the seccomp listener to the shim */
	int init_w;	/* LAUNCH_NS_PID: the init's end of the main process's wait status */
	bool need_join, unified_done;
	bool shared_vm;	    /* CLONE_VM|CLONE_VFORK: the shim is suspended until we exec or exit */
	bool sigs_default;  /* every disposition is SIG_DFL already (launch_shim_prepare) */
	bool capbset_empty; /* the bounding set is dropped already (launch_shim_prepare) */
};

/* Set by launch_shim_prepare in this process (a shim forked ahead of its launch). */
static bool shim_prepared, shim_capbset_empty;

/* Set by launch_signals_survey (in the spawner, inherited by its shims): bit sig - 1 is set
 * for each signal whose disposition is not SIG_DFL, the only ones a reset has to touch. */
static bool sigs_surveyed;
static uint64_t sigs_not_default;

/* The shim's own start: never be killed by stray signals meant for the agent (EPIPE instead
 * of SIGPIPE), a session of its own, its name. */
static void shim_detach(void)
{
	sigset_t all;

	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	(void)setsid();
	(void)prctl(PR_SET_NAME, "corral-shim", 0, 0, 0);
}

/* The kernel's struct sigaction, for the raw rt_sigaction below. */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

/*
 * Every signal's disposition to SIG_DFL (an ignored one would stay ignored across execve).
 * The raw system call: glibc's signal() and sigaction() refuse its two internal real-time
 * signals (32 and 33), and posix_spawn, which started the spawner, leaves those ignored.
 */
static void signals_default(void)
{
	struct ksigaction ks = {.handler = SIG_DFL};

	for (int sig = 1; sig < _NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP &&
		    (!sigs_surveyed || sigs_not_default & 1ULL << (sig - 1)))
			(void)syscall(SYS_rt_sigaction, sig, &ks, NULL, sizeof(ks.mask));
}

void launch_signals_survey(void)
{
	struct ksigaction old;

	sigs_not_default = 0;
	for (int sig = 1; sig < _NSIG && sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		/* one that cannot be read is reset anyway */
		if (syscall(SYS_rt_sigaction, sig, NULL, &old, sizeof(old.mask)) < 0 ||
		    old.handler != SIG_DFL)
			sigs_not_default |= 1ULL << (sig - 1);
	}
	sigs_surveyed = true;
}

/* Every capability out of the bounding set (past the last one the kernel says EINVAL). */
static int capbset_drop_all(void)
{
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			return errno == EINVAL && c > 0 ? 0 : -errno;
	return 0;
}

static int write_all(int fd, const char *buf, size_t len);

/* "P <pid>\n" without stdio (the child runs in the shim's memory). */
static void child_report_pid(int fd)
{
	char buf[32], *e = buf + sizeof(buf), *b = e;
	unsigned long v = (unsigned long)syscall(SYS_getpid);

	*--b = '\n';
	do {
		*--b = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	*--b = ' ';
	*--b = 'P';
	(void)write_all(fd, b, (size_t)(e - b));
}

/*
 * With the shim suspended (shared_vm) nobody can answer a notification before execve: every
 * execve candidate and the failure path (write on the error pipe, exit_group) must run
 * unanswered, or the child is forked instead (the shim then answers as usual). The handoff's
 * own sendmsg is checked by sbx_filter_apply_handoff.
 */
static bool child_handoff_safe(const struct child_ctx *cx)
{
	const struct launch_plan *p = cx->p;
	struct child_error ce;

	if (sbx_filter_call_notified(p->filter, SYS_write, (uint64_t)cx->err_fd,
				     (uint64_t)(uintptr_t)&ce, sizeof(ce)) ||
	    sbx_filter_call_notified(p->filter, SYS_exit_group, 127, 0, 0))
		return false;
	for (char *const *e = p->exec_paths; e && *e; e++)
		if (sbx_filter_call_notified(p->filter, SYS_execve, (uint64_t)(uintptr_t)*e,
					     (uint64_t)(uintptr_t)p->argv,
					     (uint64_t)(uintptr_t)p->env))
			return false;
	return true;
}

/*
 * LAUNCH_NS_PID: the child is PID 1 of the task's PID namespace. It forks the task's main
 * process (which goes on to its exec) and stays as a minimal init (docs/sandbox.md): it
 * forwards the signals a job is ended or told things with to the main process, reaps every
 * process the namespace reparents to it, and once the main process has ended kills the rest,
 * hands the main process's exact wait status to the shim (the exit status of a namespace's
 * init cannot carry a signal) and exits.
 */
static const int pid1_forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

_noreturn_ static void pid1_run(pid_t main_pid, int status_fd)
{
	struct signalfd_siginfo si;
	sigset_t m;
	int sfd, st = 0;

	(void)prctl(PR_SET_NAME, "corral-init", 0, 0, 0);
	/* Nothing of the task's (stdio, pipes to the agent, the audit socket) stays open here. */
	(void)syscall(SYS_close_range, 0U, (unsigned)status_fd - 1, 0U);
	(void)syscall(SYS_close_range, (unsigned)status_fd + 1, ~0U, 0U);
	sigemptyset(&m);
	for (size_t i = 0; i < ARRAY_SIZE(pid1_forwarded); i++)
		sigaddset(&m, pid1_forwarded[i]);
	sigaddset(&m, SIGCHLD);
	sfd = signalfd(-1, &m, SFD_CLOEXEC);
	for (;;) {
		pid_t w;

		if (sfd >= 0) {
			ssize_t n = read(sfd, &si, sizeof(si));

			if (n != sizeof(si))
				continue;
			if (si.ssi_signo != SIGCHLD) {
				(void)kill(main_pid, (int)si.ssi_signo);
				continue;
			}
		}
		while ((w = waitpid(-1, &st, sfd >= 0 ? WNOHANG : 0)) > 0 && w != main_pid)
			;
		if (w == main_pid)
			break;
		if (w < 0 && errno == ECHILD)
			break; /* cannot happen while main_pid lives */
	}
	/* The rest of the namespace ends with its main process (as it would with the init's
	 * exit; here before the status leaves, so that nothing of the task outlives it). */
	(void)kill(-1, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	(void)!write(status_fd, &st, sizeof(st));
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* In the task child, privileges dropped: returns in the main process; the init stays. */
static void pid1_split(const struct child_ctx *cx)
{
	sigset_t m, old;
	long pid;

	sigemptyset(&m);
	for (size_t i = 0; i < ARRAY_SIZE(pid1_forwarded); i++)
		sigaddset(&m, pid1_forwarded[i]);
	sigaddset(&m, SIGCHLD);
	/* blocked before the fork: what arrives before the init listens stays pending */
	if (sigprocmask(SIG_BLOCK, &m, &old) < 0)
		child_fail(cx->err_fd, LAUNCH_STEP_CLONE, errno);
	pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (pid < 0)
		child_fail(cx->err_fd, LAUNCH_STEP_CLONE, errno);
	if (pid == 0) {
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
		close(cx->init_w);
		return;
	}
	pid1_run((pid_t)pid, cx->init_w);
}

/*
 * stdio in the node's view (the task's mounts may hide or replace its directory), with the
 * task user's rights: the file-system ids switched (the kernel drops the file capabilities
 * with them), the groups run_child set before; back to root for the mounts.
 */
static void child_open_stdio(const struct launch_plan *p, int err_fd)
{
	static const enum launch_step steps[3] = {LAUNCH_STEP_STDIN, LAUNCH_STEP_STDOUT,
						  LAUNCH_STEP_STDERR};
	static const int flags[3] = {O_RDONLY, O_WRONLY | O_CREAT | O_APPEND,
				     O_WRONLY | O_CREAT | O_APPEND};
	const char *paths[3] = {p->stdin_path, p->stdout_path, p->stderr_path};
	int r, hi[3];

	if (p->switch_user) {
		(void)setfsgid(p->gid);
		(void)setfsuid(p->uid);
	}
	/* Relative stdio paths are relative to the workdir (which the task's view may lack:
	 * the chdir that counts comes after the mounts). */
	if (p->n_mounts)
		(void)chdir(p->workdir ? p->workdir : "/");
	/* The client's descriptors first, out of the way of 0-2 (one of them may be a number
	 * another one becomes), then in place; the rest from the paths. */
	for (int i = 0; i < 3; i++) {
		hi[i] = -1;
		if (p->stdio_fds & 1u << i) {
			hi[i] = fcntl(p->stdio_fd[i], F_DUPFD_CLOEXEC, 3);
			if (hi[i] < 0)
				child_fail(err_fd, steps[i], errno);
		}
	}
	for (int i = 0; i < 3; i++) {
		if (hi[i] >= 0) {
			if (dup2(hi[i], i) < 0)
				child_fail(err_fd, steps[i], errno);
			close(hi[i]);
			continue;
		}
		r = open_stdio(paths[i], i, flags[i]);
		if (r < 0)
			child_fail(err_fd, steps[i], -r);
	}
	/* --pty: the terminal becomes the controlling one of the task's session (setsid
	 * came first), its process group the foreground one. */
	if (p->stdio_tty && ioctl(STDIN_FILENO, TIOCSCTTY, 0) < 0)
		child_fail(err_fd, LAUNCH_STEP_STDIN, errno);
	if (p->switch_user) {
		(void)setfsuid(0);
		(void)setfsgid(0);
	}
}

/*
 * The task child. Only async-signal-safe calls from here on: it is cloned with a raw clone3 (or
 * clone) by the shim, no atfork handlers ran, and with shared_vm it runs in the shim's memory
 * (own stack; it writes nothing else but errno, and the shim is suspended meanwhile).
 */
_noreturn_ static void run_child(const struct child_ctx *cx)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2] = {{0}};
	const struct launch_plan *p = cx->p;
	int err_fd = cx->err_fd, sync_fd = cx->sync_fd, audit_sock = cx->audit_sock;
	sigset_t all;
	char go;
	ssize_t n;
	int r, exec_err;

	if (cx->shared_vm)
		child_report_pid(cx->status_w);
	close(cx->status_w);
	if (cx->need_join) {
		r = cg_join_fds(p->join_fd, p->join_unified, p->n_join, cx->unified_done);
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

	if (!cx->sigs_default)
		signals_default();
	sigemptyset(&all);
	if (sigprocmask(SIG_SETMASK, &all, NULL) < 0)
		child_fail(err_fd, LAUNCH_STEP_SIGNALS, errno);

	for (size_t i = 0; i < p->n_rlimits; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].rl) < 0)
			child_fail(err_fd, LAUNCH_STEP_RLIMIT, errno);

	if (p->switch_user) {
		/* The bounding set can only be dropped while we still hold CAP_SETPCAP. */
		if (!cx->capbset_empty && (r = capbset_drop_all()) < 0)
			child_fail(err_fd, LAUNCH_STEP_CAPBSET, -r);
		if (setgroups(p->n_groups, p->groups) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETGROUPS, errno);
	}
	child_open_stdio(p, err_fd);
	apply_namespaces(p, err_fd);

	if (p->switch_user) {
		if (setresgid(p->gid, p->gid, p->gid) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETGID, errno);
		if (setresuid(p->uid, p->uid, p->uid) < 0)
			child_fail(err_fd, LAUNCH_STEP_SETUID, errno);
	}

	if (chdir(p->workdir ? p->workdir : "/") < 0)
		child_fail(err_fd, LAUNCH_STEP_CHDIR, errno);

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

	if (cx->init_w >= 0)
		pid1_split(cx);

	if (p->filter) {
		/* With audit: nothing but the handoff runs between the filter and execve. */
		if (audit_sock >= 0)
			r = sbx_filter_apply_handoff(p->filter, audit_sock,
						     cx->shared_vm ? SBX_HANDOFF_NO_ACK : 0);
		else
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

/* ---- shim: audit of denied calls ---------------------------------------------------------- */

struct shim_audit {
	int file;     /* the syscalls file (O_APPEND) */
	int listener; /* -1: none (yet, or never) */
	struct sbx_notifier *n;
	uint64_t seq, total, recorded, max;
	pid_t child;
	bool had_listener;
	bool killed_child; /* the task's main process was killed on a kill action */
};

/* The process (TGID) a thread belongs to; the tid itself when /proc does not say. */
static pid_t proc_tgid(pid_t tid)
{
	char path[64], buf[512], *s;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tid;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return tid;
	buf[n] = 0;
	s = strstr(buf, "\nTgid:");
	if (!s)
		return tid;
	return (pid_t)strtol(s + 6, NULL, 10);
}

static bool is_kill_action(uint32_t action)
{
	uint32_t a = action & SECCOMP_RET_ACTION_FULL;

	return a == SECCOMP_RET_KILL_PROCESS || a == SECCOMP_RET_KILL_THREAD;
}

/*
 * One notification: record it (while under the cap), then answer it as the profile says. The
 * line is written before the answer, so it exists before the call returns (or its process
 * dies).
 */
static void shim_serve_one(struct shim_audit *s)
{
	struct sbx_notify_event ev;
	bool killed = false;
	pid_t pid;
	int r;

	r = sbx_notifier_receive(s->n, &ev);
	if (r == -ENOENT || r == -EINTR)
		return; /* the caller went away first */
	if (r < 0) {
		/* A listener that cannot be read would leave the task's calls waiting for good:
		 * closing it makes the kernel answer them (ENOSYS). */
		close(s->listener);
		s->listener = -1;
		return;
	}
	s->total++;
	pid = ev.tid;
	if (s->recorded < s->max || is_kill_action(ev.action))
		pid = proc_tgid(ev.tid);
	if (s->recorded < s->max) {
		char line[384];
		int len =
		    snprintf(line, sizeof(line),
			     "S %" PRIu64 " %" PRIu64 " %d %d %" PRIx32 " %d %" PRIx32 " %" PRIx64
			     " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 "\n",
			     s->seq + 1, now_ns(CLOCK_REALTIME), (int)pid, (int)ev.tid, ev.arch,
			     (int)ev.nr, ev.action, ev.args[0], ev.args[1], ev.args[2], ev.args[3],
			     ev.args[4], ev.args[5]);

		if (write_all(s->file, line, (size_t)len) == 0) {
			s->seq++;
			s->recorded++;
		}
	}
	if (sbx_notifier_answer(s->n, &ev, &killed) == 0 && killed && pid == s->child)
		s->killed_child = true;
}

/* Answer what is pending; timeout_ms -1: until no process uses the filter any more. Returns
 * true once that is the case (POLLHUP on the listener). */
static bool shim_drain(struct shim_audit *s, int timeout_ms)
{
	while (s->listener >= 0) {
		struct pollfd pfd = {.fd = s->listener, .events = POLLIN};
		int r = poll(&pfd, 1, timeout_ms);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		if (pfd.revents & POLLIN) {
			shim_serve_one(s);
			continue;
		}
		return true;
	}
	return true;
}

static void shim_audit_end(struct shim_audit *s)
{
	char line[160];
	int len = snprintf(line, sizeof(line), "E %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n",
			   s->seq + 1, s->total, s->recorded, s->had_listener ? 1 : 0);

	(void)write_all(s->file, line, (size_t)len);
}

/* wait4 for the child while answering notifications. */
static void shim_wait_serving(struct shim_audit *s, pid_t child, int *status, struct rusage *ru)
{
	sigset_t chld;
	int sfd;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	/* SIGCHLD is blocked in the shim, so it stays pending and the signalfd sees it. */
	sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	for (;;) {
		struct pollfd pfd[2] = {{.fd = s->listener, .events = POLLIN},
					{.fd = sfd, .events = POLLIN}};
		struct signalfd_siginfo si;
		pid_t w = wait4(child, status, WNOHANG, ru);

		if (w == child)
			break;
		if (w < 0 && errno != EINTR) {
			*status = -1;
			memset(ru, 0, sizeof(*ru));
			break;
		}
		/* Without a signalfd, look for the exit every 100 ms. */
		if (poll(pfd, 2, sfd < 0 ? 100 : -1) < 0)
			continue;
		if (pfd[0].revents & POLLIN)
			shim_serve_one(s);
		else if (pfd[0].revents & (POLLHUP | POLLERR | POLLNVAL))
			s->listener = -1; /* no user left: nothing more to answer */
		if (pfd[1].revents & POLLIN)
			while (read(sfd, &si, sizeof(si)) > 0)
				;
	}
	if (sfd >= 0)
		close(sfd);
}

/* Close fds lo..hi (close_range, or one by one on kernels without it). */
static void close_fds(unsigned lo, unsigned hi)
{
	if (syscall(SYS_close_range, lo, hi, 0) < 0)
		for (unsigned fd = lo; fd <= hi && fd < 65536; fd++)
			close((int)fd);
}

/* Keep fds[i] as 3 + i (-1 entries: that number is closed), close everything else above 2. */
static int keep_fds(int *fds, int n)
{
	int hi[4];

	if (n > (int)ARRAY_SIZE(hi))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		hi[i] = fds[i] >= 0 ? fcntl(fds[i], F_DUPFD_CLOEXEC, 3 + n) : -1;
		if (fds[i] >= 0 && hi[i] < 0)
			return -errno;
	}
	for (int i = 0; i < n; i++) {
		if (hi[i] < 0) {
			close(3 + i);
			continue;
		}
		if (dup2(hi[i], 3 + i) < 0)
			return -errno;
		fds[i] = 3 + i;
	}
	close_fds((unsigned)(3 + n), ~0U);
	return 0;
}

static void shim_report_exit(const struct launch_plan *p, int status_w, int status,
			     const struct rusage *ru)
{
	uint64_t ut = (uint64_t)ru->ru_utime.tv_sec * USEC_PER_SEC + (uint64_t)ru->ru_utime.tv_usec;
	uint64_t st = (uint64_t)ru->ru_stime.tv_sec * USEC_PER_SEC + (uint64_t)ru->ru_stime.tv_usec;
	uint64_t end = now_ns(CLOCK_REALTIME);
	char file[256], line[160];
	int len;

	len = snprintf(file, sizeof(file),
		       "status=%d utime_us=%llu stime_us=%llu maxrss_kb=%llu end_ns=%llu\n", status,
		       (unsigned long long)ut, (unsigned long long)st,
		       (unsigned long long)ru->ru_maxrss, (unsigned long long)end);
	if (p->exit_file)
		(void)write_file_replace(p->exit_file, file, (size_t)len, 0600);
	snprintf(line, sizeof(line), "X %d %llu %llu %llu %llu\n", status, (unsigned long long)ut,
		 (unsigned long long)st, (unsigned long long)ru->ru_maxrss,
		 (unsigned long long)end);
	(void)write_all(status_w, line, strlen(line));
}

/*
 * Cloning the task child. The child does little before execve, so it need not get a copy of
 * the shim's memory (which is the agent's, with its libraries, heap and BPF mappings): like
 * posix_spawn it runs with CLONE_VM|CLONE_VFORK on a stack of its own while the shim is
 * suspended, which saves copying the page tables and tearing the copy down again at exec.
 * CLONE_INTO_CGROUP needs clone3, for which glibc has no wrapper that runs a function on a new
 * stack, hence the few instructions below (x86-64). Elsewhere, or if this fails, a plain fork.
 */
#define CHILD_STACK_SIZE (256 * 1024)

#if defined(__x86_64__)
/* long launch_clone3_run(struct clone_args *ca, size_t size, int (*fn)(void *), void *arg):
 * the child calls fn(arg) on ca->stack and exits with its return value; the parent gets the
 * child's pid or -errno. rdx and r8..r10 survive the syscall in both. */
long launch_clone3_run(struct clone_args *ca, size_t size, int (*fn)(void *), void *arg);
__asm__(".text\n"
	".p2align 4\n"
	".globl launch_clone3_run\n"
	".hidden launch_clone3_run\n"
	".type launch_clone3_run, @function\n"
	"launch_clone3_run:\n"
	"	mov %rdx, %r9\n"
	"	mov %rcx, %r8\n"
	"	mov $435, %eax\n" /* SYS_clone3 */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jz 1f\n"
	"	ret\n"
	"1:	xor %ebp, %ebp\n"
	"	mov %r8, %rdi\n"
	"	call *%r9\n"
	"	mov %eax, %edi\n"
	"	mov $60, %eax\n" /* SYS_exit */
	"	syscall\n"
	"	hlt\n"
	".size launch_clone3_run, . - launch_clone3_run\n");
#define HAVE_CLONE3_RUN 1
#endif

_noreturn_ static int child_entry(void *arg)
{
	run_child(arg);
}

/* Clone into the task's cgroup (on) or not, and what the child still has to join then. */
static void into_cgroup(struct child_ctx *ctx, struct clone_args *ca, bool on)
{
	const struct launch_plan *p = ctx->p;

	if (on) {
		ca->flags |= CLONE_INTO_CGROUP;
		ca->cgroup = (uint64_t)p->clone_cgroup_fd;
	} else {
		ca->flags &= ~CLONE_INTO_CGROUP;
		ca->cgroup = 0;
	}
	/* v2: in its cgroup already; v1 hybrid: in the unified one, v1 ones to join. */
	ctx->unified_done = on;
	ctx->need_join = !on || !p->clone_joins_all;
}

/*
 * Returns the child's pid (with ctx->shared_vm: the child has exec'd or exited by then), 0 in
 * a forked child (the caller runs run_child), or -errno. Sets ctx->need_join/unified_done.
 */
static long clone_child(struct child_ctx *ctx)
{
	const struct launch_plan *p = ctx->p;
	bool into = p->clone_cgroup_fd >= 0;
	/* A PID namespace of its own: the child is its PID 1 (cloned into it, not unshared). */
	uint64_t newpid = p->ns_flags & LAUNCH_NS_PID ? CLONE_NEWPID : 0;
	struct clone_args ca = {.flags = newpid, .exit_signal = SIGCHLD};
	long c;

#ifdef HAVE_CLONE3_RUN
	void *stack = MAP_FAILED;

	/* shared_vm: the child reports getpid(), which is 1 in a new PID namespace */
	if (!newpid && (ctx->audit_sock < 0 || child_handoff_safe(ctx)))
		stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
	if (stack != MAP_FAILED) {
		(void)mprotect(stack, 4096, PROT_NONE); /* guard page */
		ca.flags = CLONE_VM | CLONE_VFORK;
		ca.stack = (uint64_t)(uintptr_t)stack;
		ca.stack_size = CHILD_STACK_SIZE;
		into_cgroup(ctx, &ca, into);
		ctx->shared_vm = true;
		c = launch_clone3_run(&ca, sizeof(ca), child_entry, ctx);
		if (c < 0 && into) {
			/* No CLONE_INTO_CGROUP here: join from the child instead. */
			into_cgroup(ctx, &ca, false);
			c = launch_clone3_run(&ca, sizeof(ca), child_entry, ctx);
		}
		munmap(stack, CHILD_STACK_SIZE);
		if (c > 0)
			return c;
		ctx->shared_vm = false;
	}
	ca = (struct clone_args){.flags = newpid, .exit_signal = SIGCHLD};
#endif
	if (into) {
		into_cgroup(ctx, &ca, true);
		c = syscall(SYS_clone3, &ca, sizeof(ca));
		if (c >= 0)
			return c;
	}
	/* Kernels without clone3/CLONE_INTO_CGROUP, or v1 only: plain fork, then join. */
	into_cgroup(ctx, &ca, false);
	c = syscall(SYS_clone, SIGCHLD | (unsigned long)newpid, 0, 0, 0, 0);
	return c < 0 ? -errno : c;
}

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;

	return a < b ? -1 : a > b;
}

/* Close every fd from 3 up except those in keep (n of them, -1 entries ignored). */
static void close_all_except(int *keep, size_t n)
{
	unsigned lo = 3;

	qsort(keep, n, sizeof(*keep), cmp_int);
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)lo)
			continue;
		if ((unsigned)keep[i] > lo)
			close_fds(lo, (unsigned)keep[i] - 1);
		lo = (unsigned)keep[i] + 1;
	}
	close_fds(lo, ~0U);
}

/*
 * The shim: a forked copy of the agent or of the spawner (glibc fork, so malloc/stdio are
 * usable). report_pid: first say "S <pid>" on the status pipe (the spawner's shims: the agent
 * did not fork them).
 */
/* The task's status: the main process's, from its namespace's init when it handed one over. */
static int pid1_status(int init_r, int status)
{
	int st;

	if (init_r >= 0 && read(init_r, &st, sizeof(st)) == (ssize_t)sizeof(st))
		return st;
	return status;
}

/* Every fd the shim inherited from the agent closed but the child's: its pipes, the audit
 * socket (sock), the PID namespace init's pipe (init), its cgroup fds. */
static void shim_close_agent_fds(const struct launch_plan *p, int status_w, int err_w, int sync_r,
				 int sc_fd, const int sock[2], const int init[2])
{
	int hold[12 + LAUNCH_JOIN_MAX];
	size_t nk = 0;

	for (int i = 0; i < 3; i++)
		if (p->stdio_fds & 1u << i)
			hold[nk++] = p->stdio_fd[i];

	hold[nk++] = status_w;
	hold[nk++] = err_w;
	hold[nk++] = sync_r;
	hold[nk++] = sc_fd;
	hold[nk++] = sock[0];
	hold[nk++] = sock[1];
	hold[nk++] = init[0];
	hold[nk++] = init[1];
	hold[nk++] = p->clone_cgroup_fd;
	for (size_t i = 0; i < p->n_join && nk < ARRAY_SIZE(hold); i++)
		hold[nk++] = p->join_fd[i];
	close_all_except(hold, nk);
}

/* The child's exit with audit of denied calls: the shim answers the listener until the main
 * process has exited, reports it, and leaves the task's other processes to a forked copy. */
_noreturn_ static void shim_serve_and_exit(const struct launch_plan *p, struct shim_audit *au,
					   pid_t child, int status_w, int init_r)
{
	struct rusage ru;
	int status = 0;
	pid_t d;

	shim_wait_serving(au, child, &status, &ru);
	status = pid1_status(init_r, status);
	/* The kernel's kill-process action would have left SIGSYS (the shim had to use
	 * SIGKILL, which cannot be caught). */
	if (au->killed_child && status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		status = SIGSYS;
	if (au->listener < 0 || shim_drain(au, 0)) {
		shim_audit_end(au);
		shim_report_exit(p, status_w, status, &ru);
		_exit(0);
	}
	/*
	 * Other processes of the task still hold the filter (the agent kills them now
	 * that the main process is gone). Report the exit at once and leave answering
	 * them to a forked copy that ends with the last of them.
	 */
	shim_report_exit(p, status_w, status, &ru);
	d = fork();
	if (d == 0 || d < 0) {
		if (d == 0)
			close(status_w);
		(void)shim_drain(au, -1);
		shim_audit_end(au);
	}
	_exit(0);
}

_noreturn_ static void run_shim(const struct launch_plan *p, int status_w, int err_w, int sync_r,
				int sc_fd, bool report_pid)
{
	struct child_ctx ctx;
	struct shim_audit au = {.file = -1, .listener = -1, .max = p->syscalls_max};
	struct rusage ru;
	char line[160];
	int status = 0, null_fd, sock[2] = {-1, -1}, init[2] = {-1, -1}, keep[4];
	pid_t child;
	long c;

	if (!shim_prepared)
		shim_detach();
	(void)prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
	if (report_pid) {
		snprintf(line, sizeof(line), "S %d\n", (int)getpid());
		(void)write_all(status_w, line, strlen(line));
	}

	if (sc_fd >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock) < 0) {
		launch_report_error(err_w, LAUNCH_STEP_SECCOMP, errno);
		_exit(1);
	}
	/* A PID namespace: its init hands over the main process's wait status on this pipe. */
	if (p->ns_flags & LAUNCH_NS_PID && pipe2(init, O_CLOEXEC | O_NONBLOCK) < 0) {
		launch_report_error(err_w, LAUNCH_STEP_CLONE, errno);
		_exit(1);
	}
	/*
	 * Drop the agent's fds before cloning: the shim may wait long for the child's exec (its
	 * stdout a FIFO nobody reads yet), and must not hold the agent's client connections,
	 * listening socket or spool meanwhile (a client would never see EOF when the agent
	 * dies). What the child needs stays: its pipes, the audit socket, its cgroup fds.
	 */
	shim_close_agent_fds(p, status_w, err_w, sync_r, sc_fd, sock, init);
	ctx = (struct child_ctx){.p = p,
				 .err_fd = err_w,
				 .sync_fd = sync_r,
				 .status_w = status_w,
				 .audit_sock = sock[1],
				 .init_w = init[1],
				 .need_join = true,
				 .sigs_default = shim_prepared,
				 .capbset_empty = shim_capbset_empty};
	c = clone_child(&ctx);
	if (c == 0)
		run_child(&ctx); /* copied memory (fork semantics) */
	if (c < 0) {
		launch_report_error(err_w, LAUNCH_STEP_CLONE, (int)-c);
		_exit(1);
	}
	child = (pid_t)c;
	if (sock[1] >= 0)
		close(sock[1]); /* EOF on sock[0] once the child exits or execs without a handoff */
	if (init[1] >= 0)
		close(init[1]);

	/* Drop every inherited fd of the agent except the status pipe (and the audit's fds). */
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0) {
		dup2(null_fd, 0);
		dup2(null_fd, 1);
		dup2(null_fd, 2);
	}
	keep[0] = status_w;
	keep[1] = sock[0];
	keep[2] = sc_fd;
	keep[3] = init[0];
	if (keep_fds(keep, 4) < 0)
		_exit(1);
	status_w = keep[0];
	sock[0] = keep[1];
	au.file = keep[2];
	init[0] = keep[3];

	if (!ctx.shared_vm) {
		snprintf(line, sizeof(line), "P %d\n", (int)child);
		(void)write_all(status_w, line, strlen(line));
	}

	if (au.file >= 0) {
		au.child = child;
		/* shared_vm: the child has exec'd already and cannot read an ack */
		if (sbx_listener_receive(sock[0], &au.listener, !ctx.shared_vm) < 0)
			au.listener = -1;
		close(sock[0]);
		if (au.listener >= 0 && sbx_notifier_new(au.listener, p->filter, &au.n) < 0) {
			close(au.listener); /* cannot serve it: calls get ENOSYS, counted as none */
			au.listener = -1;
		}
		au.had_listener = au.listener >= 0;
	}
	if (au.listener >= 0)
		shim_serve_and_exit(p, &au, child, status_w, init[0]);

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
	status = pid1_status(init[0], status);
	if (au.file >= 0)
		shim_audit_end(&au);
	shim_report_exit(p, status_w, status, &ru);
	_exit(0);
}

void launch_shim_prepare(void)
{
	shim_detach();
	/* What the child would reset before its exec; harmless here, where every signal is
	 * blocked. In a spawner that surveyed its dispositions, only the few it ignores. */
	signals_default();
	/*
	 * What the child would drop before switching users. The bounding set only limits what
	 * an execve or capset can grant, and the shim does neither; its own capabilities stay.
	 * Without CAP_SETPCAP (an agent not running as root) nothing is dropped here, and the
	 * child does not switch users either.
	 */
	shim_capbset_empty = capbset_drop_all() == 0;
	shim_prepared = true;
}

void launch_shim_main(const struct launch_plan *p, const struct launch_shim_fds *fds)
{
	run_shim(p, fds->status_w, fds->err_w, fds->sync_r, fds->sc_fd, true);
}

void launch_shim_fds_close(struct launch_shim_fds *f)
{
	closep(&f->status_r);
	closep(&f->status_w);
	closep(&f->err_r);
	closep(&f->err_w);
	closep(&f->sync_r);
	closep(&f->sync_w);
	closep(&f->sc_fd);
	*f = (struct launch_shim_fds)LAUNCH_SHIM_FDS_INIT;
}

int launch_shim_fds_open(const struct launch_plan *plan, struct launch_shim_fds *f)
{
	int p[3][2];

	*f = (struct launch_shim_fds)LAUNCH_SHIM_FDS_INIT;
	if (pipe2(p[0], O_CLOEXEC) < 0)
		return -errno;
	f->status_r = p[0][0];
	f->status_w = p[0][1];
	if (pipe2(p[1], O_CLOEXEC) < 0)
		goto fail;
	f->err_r = p[1][0];
	f->err_w = p[1][1];
	if (pipe2(p[2], O_CLOEXEC) < 0)
		goto fail;
	f->sync_r = p[2][0];
	f->sync_w = p[2][1];
	if (plan->syscalls_file && sbx_filter_notifies(plan->filter)) {
		f->sc_fd =
		    open(plan->syscalls_file,
			 O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (f->sc_fd < 0)
			goto fail;
	}
	return 0;
fail : {
	int r = -errno;

	launch_shim_fds_close(f);
	return r;
}
}

/* The shim has its ends: keep the agent's in the handle (shim_pid < 0: "S" line to come). */
int launch_handle_from_fds(struct launch_shim_fds *f, pid_t shim, struct launch_handle *ret)
{
	int r;

	closep(&f->status_w);
	closep(&f->err_w);
	closep(&f->sync_r);
	closep(&f->sc_fd);
	*ret = (struct launch_handle){
	    .shim_pid = shim,
	    .shim_pidfd = shim > 0 ? (int)syscall(SYS_pidfd_open, shim, 0) : -1,
	    .task_pid = -1,
	    .status_fd = TAKE_FD(f->status_r),
	    .err_fd = TAKE_FD(f->err_r),
	    .sync_fd = TAKE_FD(f->sync_w),
	};
	*f = (struct launch_shim_fds)LAUNCH_SHIM_FDS_INIT;
	if (fcntl(ret->status_fd, F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(ret->err_fd, F_SETFL, O_NONBLOCK) < 0) {
		r = -errno;
		launch_abort(ret);
		launch_handle_close(ret);
		return r;
	}
	return 0;
}

int launch_spawn(const struct launch_plan *plan, struct launch_handle *ret)
{
	struct launch_shim_fds f;
	pid_t shim;
	int r;

	r = launch_shim_fds_open(plan, &f);
	if (r < 0)
		return r;
	shim = fork();
	if (shim < 0) {
		r = -errno;
		launch_shim_fds_close(&f);
		return r;
	}
	if (shim == 0) {
		close(f.status_r);
		close(f.err_r);
		close(f.sync_w);
		run_shim(plan, f.status_w, f.err_w, f.sync_r, f.sc_fd, false);
	}
	return launch_handle_from_fds(&f, shim, ret);
}

int launch_poll_pid(struct launch_handle *h)
{
	/* Byte by byte: what follows the pid line (the exit line) is not ours to consume. */
	while (h->plen < sizeof(h->pbuf) - 1) {
		ssize_t n = read(h->status_fd, h->pbuf + h->plen, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0) {
			struct child_error ce;

			/* The shim ended without a pid: it reported why on the error pipe. */
			if (read(h->err_fd, &ce, sizeof(ce)) == (ssize_t)sizeof(ce) && ce.err > 0)
				return -ce.err;
			return n < 0 ? -errno : -ECHILD;
		}
		if (h->pbuf[h->plen++] == '\n') {
			h->pbuf[h->plen - 1] = 0;
			if (h->pbuf[0] == 'S' && h->pbuf[1] == ' ' && h->shim_pid <= 0) {
				/* A spawner's shim says who it is first. */
				if (parse_int(h->pbuf + 2, &h->shim_pid) < 0 || h->shim_pid <= 0) {
					h->shim_pid = -1;
					return -EPROTO;
				}
				if (h->shim_pidfd < 0)
					h->shim_pidfd =
					    (int)syscall(SYS_pidfd_open, h->shim_pid, 0);
				h->plen = 0;
				continue;
			}
			if (h->pbuf[0] != 'P' || h->pbuf[1] != ' ' ||
			    parse_int(h->pbuf + 2, &h->task_pid) < 0 || h->task_pid <= 0) {
				h->task_pid = -1;
				return -EPROTO;
			}
			return 1;
		}
	}
	return -EPROTO;
}

int launch_go(struct launch_handle *h)
{
	int r = write_all(h->sync_fd, "g", 1);

	if (r < 0)
		return r;
	closep(&h->sync_fd);
	h->sync_fd = -1;
	return 0;
}

int launch_poll_exec(struct launch_handle *h, enum launch_step *ret_step)
{
	struct child_error ce;
	ssize_t n;

	do {
		n = read(h->err_fd, &ce, sizeof(ce));
	} while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return 0;
	if (n == 0)
		return 1; /* EOF: close-on-exec fired, the job is running */
	if (n < 0)
		return -errno;
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

int launch_parse_syscall_line(const char *line, struct launch_syscall_line *ret)
{
	struct launch_syscall_line l = {0};
	int listener, n = 0;

	if (line[0] == 'S') {
		l.kind = LAUNCH_SYSCALL_CALL;
		if (sscanf(line,
			   "S %" SCNu64 " %" SCNu64 " %" SCNd32 " %" SCNd32 " %" SCNx32 " %" SCNd32
			   " %" SCNx32 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
			   " %" SCNx64 "%n",
			   &l.seq, &l.time_ns, &l.pid, &l.tid, &l.arch, &l.nr, &l.action,
			   &l.args[0], &l.args[1], &l.args[2], &l.args[3], &l.args[4], &l.args[5],
			   &n) != 13)
			return -EINVAL;
	} else if (line[0] == 'E') {
		l.kind = LAUNCH_SYSCALL_END;
		if (sscanf(line, "E %" SCNu64 " %" SCNu64 " %" SCNu64 " %d%n", &l.seq, &l.total,
			   &l.recorded, &listener, &n) != 4 ||
		    (listener != 0 && listener != 1))
			return -EINVAL;
		l.listener = listener == 1;
	} else {
		return -EINVAL;
	}
	if (line[n] != 0 || l.seq == 0)
		return -EINVAL;
	*ret = l;
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
