/* SPDX-License-Identifier: MIT */
/*
 * Shared between the common cgroup layer (cgroup.c) and its backends (cgroup_v1.c,
 * cgroup_v2.c). Not part of the public interface; the unit tests use the parsers directly.
 */
#pragma once

#include "isolation/cgroup.h"

/* v1 controllers the agent uses (bit positions in cg_hier.ctrls). */
enum cg_ctrl {
	CG_C_MEMORY,
	CG_C_CPU,
	CG_C_CPUACCT,
	CG_C_PIDS,
	CG_C_BLKIO,
	CG_C_FREEZER,
	CG_C_DEVICES,
	_CG_C_MAX,
	_CG_C_INVALID = -1,
};

/* v1: up to one hierarchy per controller plus the unified one. */
#define CG_MAX_HIER (_CG_C_MAX + 1)
#define CG_NAME_MAX 64
/* Bounds on what is read back from cgroupfs. */
#define CG_FILE_MAX  (1024 * 1024)
#define CG_PIDS_MAX  (1024 * 1024)
#define CG_TASKS_MAX 65536

struct cg_hier {
	char *mount;	/* absolute mount point of the hierarchy */
	char *dir;	/* absolute path of the agent's subtree in it */
	int dir_fd;	/* O_DIRECTORY fd of dir */
	unsigned ctrls; /* 1u << enum cg_ctrl; 0 for the unified hierarchy */
	bool unified;
};

struct cg_root;
struct cg_task;

struct cg_ops {
	/* Find hierarchies, create the subtree in each, fill root->hier. */
	int (*setup)(struct cg_root *root, const struct cg_root_opts *opts);
	/* Called before a task directory is created (v2: enable pending controllers). */
	int (*prepare_task)(struct cg_root *root);
	int (*apply_limits)(struct cg_task *t, const struct cg_limits *l);
	int (*stats)(const struct cg_task *t, struct cg_stats *ret);
	int (*kill)(const struct cg_task *t, int sig);
	int (*move_self)(struct cg_root *root, const char *leaf);
};

struct cg_root {
	enum cg_mode mode;
	const struct cg_ops *ops;
	char *fs_root;
	char *subtree;
	char *leaf; /* v2 agent leaf (after cg_root_move_self), never a task name */
	size_t n_hier;
	struct cg_hier hier[CG_MAX_HIER];
	int ctrl_hier[_CG_C_MAX]; /* v1: index into hier[] per controller, -1 if absent */
	int unified_hier;	  /* index of the unified hierarchy, -1 if none */
	int main_hier;		  /* v2: the unified one; v1: memory */
	bool swap_accounting;	  /* v1: memory.memsw.* present; v2: memory.swap.max present */
	bool v2_enable_pending;	  /* v2: subtree_control could not be written yet (EBUSY) */
	char *v2_base;		  /* v2: absolute path of the delegated base directory */
};

struct cg_task {
	struct cg_root *root;
	char name[CG_NAME_MAX + 1];
	char *path;
	int dir_fd[CG_MAX_HIER];   /* -1 where the task has no directory */
	int procs_fd[CG_MAX_HIER]; /* cgroup.procs, O_WRONLY, for attaching a process by pid */
	/*
	 * For joining oneself: v1 hierarchies "tasks", unified ones cgroup.procs (-1: none).
	 * Writing "0" to a v1 tasks file moves only the calling thread, which for a freshly
	 * forked single-threaded child is the whole process; the kernel (>= 6.0) then skips
	 * the global cgroup_threadgroup_rwsem write lock whose first taking after a quiet spell
	 * waits for an RCU grace period (tests/bench/cgroup_join.sh: 14 ms through cgroup.procs,
	 * 0.05 ms through tasks, for 3 hierarchies). See docs/cgroup.md.
	 */
	int join_fd[CG_MAX_HIER];
	uint64_t unified_id;
	/*
	 * Parked (cg_task_park): the fds above are closed, parked_dirs says in which hierarchies
	 * the task has a directory; each call that needs them reopens the directories by name
	 * (task_unpark), the periodic ones (stats, pids, kill) park them again before returning.
	 */
	bool parked;
	unsigned parked_dirs; /* 1u << hierarchy index */
	unsigned pre_need; /* cg_task_precreate_step: the controllers still to be made (0: done) */
};

extern const struct cg_ops cg_v1_ops;
extern const struct cg_ops cg_v2_ops;

/* ---- helpers shared by the backends (cgroup.c) ---- */
/* Task name rule: [A-Za-z0-9._-]{1,64}, not starting with '.'. */
bool cg_name_valid(const char *name);
/* Subtree rule: '/'-separated components, each a valid name; leading/trailing '/' ignored. */
bool cg_subtree_valid(const char *subtree);
const char *cg_ctrl_to_string(enum cg_ctrl c);
enum cg_ctrl cg_ctrl_from_string(const char *s);
/* Task dir fd in the hierarchy holding controller c (v1), -1 if none. */
int cg_task_ctrl_fd(const struct cg_task *t, enum cg_ctrl c);
/*
 * The periodic reads (stats): whether the task has a directory in the hierarchy of controller
 * c (v1; _CG_C_MAX: the main hierarchy, v2), parked or not; and file of that directory read
 * into buf (NUL-terminated, returns its length), parked or not: a parked task's file is opened
 * by its name under the hierarchy, so a read costs open, one read and close, with no
 * directory opened and closed around it. One read(2), as cgroupfs generates the whole file
 * at its first read: -EFBIG when it does not fit in size - 1 bytes; -ENOENT without the
 * directory.
 */
bool cg_task_has_dir(const struct cg_task *t, enum cg_ctrl c);
int cg_task_read(const struct cg_task *t, enum cg_ctrl c, const char *file, char *buf, size_t size);
int cg_task_read_u64(const struct cg_task *t, enum cg_ctrl c, const char *file, uint64_t *ret);
/* The same, the whole file (up to max bytes) on the heap (*ret, NUL-terminated). */
int cg_task_read_alloc(const struct cg_task *t, enum cg_ctrl c, const char *file, size_t max,
		       char **ret);
/* Write "v" to dirfd/name, one write(2). */
int cg_write(int dirfd, const char *name, const char *v);
int cg_write_u64(int dirfd, const char *name, uint64_t v);
/* Send sig to every pid listed in dirfd/cgroup.procs; *ret_n = how many were signalled. */
int cg_signal_procs(int dirfd, int sig, size_t *ret_n);
/* Sleep ms milliseconds (bounded polling of cgroupfs state). */
void cg_sleep_ms(unsigned ms);
/*
 * Is every process the directory lists in uninterruptible sleep (state D)? Such a process
 * neither freezes nor dies before the kernel lets it go (a call waiting on a filesystem that
 * does not answer): a kill does not wait for it.
 */
bool cg_procs_stuck(int dirfd);

/* ---- parsers (pure, unit-tested) ---- */
/* "key value" lines (cpu.stat, memory.events, cpuacct.stat, memory.oom_control):
 * -ENOENT if key is absent, -EINVAL if its value is not a number. */
int cg_parse_keyed(const char *buf, const char *key, uint64_t *ret);
/* v2 io.stat: "maj:min rbytes=N wbytes=N rios=N ..." per device; sums over devices. */
int cg_parse_io_stat(const char *buf, uint64_t *ret_read, uint64_t *ret_write);
/* v1 blkio.throttle.io_service_bytes: "maj:min Read N" ...; sums Read/Write over devices,
 * ignores the "Total" line. */
int cg_parse_blkio_bytes(const char *buf, uint64_t *ret_read, uint64_t *ret_write);
/* cgroup.procs content -> sorted unique pids (malloc'd). */
int cg_parse_pids(const char *buf, pid_t **ret, size_t *ret_n);
/* cpus (cores) -> CFS quota for period CG_CPU_PERIOD_US, rounded, at least 1000 us.
 * -ERANGE for cpus > CG_CPUS_MAX or not finite, -EINVAL for cpus <= 0. */
#define CG_CPU_PERIOD_US 100000ULL
#define CG_CPUS_MAX	 4096.0
int cg_cpu_quota_us(double cpus, uint64_t *ret);
/* cpu_weight (1..10000) -> v1 cpu.shares (weight * 1024 / 100, at least 2). */
int cg_weight_to_shares(uint32_t weight, uint64_t *ret);
/* USER_HZ ticks -> ns. */
uint64_t cg_ticks_to_ns(uint64_t ticks, long hz);
