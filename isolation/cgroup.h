/* SPDX-License-Identifier: MIT */
/*
 * Per-task cgroups behind one interface, two backends chosen at runtime (statfs):
 * v2 (unified, delegated subtree) and v1 (per-controller hierarchies). On a v1 host with a
 * v2 mount (hybrid) every task also gets a directory in the unified hierarchy, used for
 * cgroup BPF (network metering, device policy) and cgroup ids.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum cg_mode {
	CG_MODE_V1,
	CG_MODE_V2,
	_CG_MODE_MAX,
	_CG_MODE_INVALID = -1,
};

#define CG_IO_MAX 8
struct cg_io_limit {
	unsigned major, minor;
	uint64_t rbps; /* 0 = not limited */
	uint64_t wbps;
};

struct cg_limits {
	uint64_t memory_max;  /* bytes, 0 = unlimited */
	uint64_t memory_high; /* bytes, 0 = unset (v1: soft_limit_in_bytes) */
	uint64_t swap_max;    /* bytes; UINT64_MAX = unset (v1: memsw = memory_max + swap_max) */
	double cpus;	      /* cores, 0 = unlimited (cpu.max / cfs_quota_us, period 100 ms) */
	uint32_t cpu_weight;  /* 1..10000, 0 = default (v1: shares = weight * 1024 / 100) */
	uint64_t pids_max;    /* 0 = unlimited */
	size_t n_io;
	struct cg_io_limit io[CG_IO_MAX];
	/*
	 * v1 only (v2 has one hierarchy): the task's cgroup is made in the hierarchies it needs:
	 * memory, cpuacct, freezer (race-free kill) and the unified one always; cpu with a CPU
	 * limit or weight, pids with a pids limit, blkio with IO limits or block_stats, devices
	 * with devices. Joining a v1 hierarchy costs a synchronize_rcu() in the kernel.
	 */
	bool block_stats; /* blkio byte counters wanted in cg_stats */
	bool devices;	  /* the devices controller will be used (cg_task_v1_dir_fd) */
};

struct cg_stats {
	uint64_t cpu_usage_ns; /* cpu.stat usage_usec*1000 / cpuacct.usage */
	uint64_t cpu_user_ns;  /* cpu.stat user_usec / cpuacct.stat user (ticks -> ns) */
	uint64_t cpu_system_ns;
	uint64_t memory_current;
	uint64_t memory_peak;	/* memory.peak / memory.max_usage_in_bytes */
	uint64_t oom_kills;	/* memory.events oom_kill / memory.oom_control oom_kill */
	uint64_t oom_events;	/* memory.events oom (limit hit) */
	uint64_t io_read_bytes; /* io.stat rbytes / blkio.throttle.io_service_bytes Read */
	uint64_t io_write_bytes;
	/* The two above were read (v2 io.stat; v1: the task has a blkio group, whose counters the
	 * kernel keeps only for devices that have a throttle rule). False: not measured. */
	bool io_measured;
	uint64_t pids_current;
};

struct cg_root_opts {
	const char *fs_root;	 /* default "/sys/fs/cgroup" (tests point it at a fake tree) */
	const char *subtree;	 /* agent's subtree name or path below the root/delegated cgroup,
				  * default "corral" */
	enum cg_mode force_mode; /* _CG_MODE_INVALID = detect */
	/* v2 only: delegated base (absolute cgroup path, e.g. "/system.slice/corrald.service");
	 * NULL = the root of the hierarchy. */
	const char *v2_base;
};

struct cg_root;
struct cg_task;

/* Detect the mode, create (or reuse) the agent's subtree; in v2 enable controllers in it. */
int cg_root_open(const struct cg_root_opts *opts, struct cg_root **ret);
void cg_root_free(struct cg_root *root);
enum cg_mode cg_root_mode(const struct cg_root *root);
const char *cg_mode_to_string(enum cg_mode m);
/* Whether the unified hierarchy (for cgroup BPF) is usable: v2 mode, or a v1 hybrid host. */
bool cg_root_has_unified(const struct cg_root *root);
/* The agent's subtree directory in the unified hierarchy (parent of every task's), or -1. */
int cg_root_unified_fd(const struct cg_root *root);
/*
 * The CPU time of everything in the agent's subtree, every task's cgroup below it, in
 * nanoseconds, charged at the same moment as a thread's own run time grows: v1 the subtree's
 * cpuacct.usage (nanoseconds); v2 its cpu.stat usage_usec times 1,000 (the kernel counts
 * nanoseconds and shows microseconds). -EOPNOTSUPP where the subtree also holds the agent
 * (v2 with its own leaf, cg_root_move_self: the agent's CPU would move it at every read) or
 * there is no cpuacct hierarchy (v1).
 */
int cg_root_cpu_usage(const struct cg_root *root, uint64_t *ret_ns);
/* The file cg_root_cpu_usage reads ("cpuacct.usage", "cpu.stat usage_usec") and its
 * resolution in nanoseconds (*ret_res_ns: 1, 1000); NULL where it has none. */
const char *cg_root_cpu_usage_source(const struct cg_root *root, uint64_t *ret_res_ns);
/*
 * v2: move the calling process into "<subtree>/<leaf>" (e.g. "agent") so the subtree root has
 * no processes and can enable controllers for siblings. No-op on v1.
 */
int cg_root_move_self(struct cg_root *root, const char *leaf);

/*
 * Check limits before anything is created (admission, clear errors before fork): -E2BIG for
 * n_io > CG_IO_MAX, -ERANGE for cpus not in [0, 4096] or cpu_weight > 10000, -EINVAL for an
 * io entry limiting nothing. cg_task_create calls it too.
 */
int cg_limits_validate(const struct cg_limits *l);
/* Create a fresh cgroup for a task (-EEXIST if the name exists), apply limits, open fds.
 * name: [A-Za-z0-9._-]{1,64}. On failure nothing is left behind. */
int cg_task_create(struct cg_root *root, const char *name, const struct cg_limits *limits,
		   struct cg_task **ret);
/*
 * The same in two steps, so the directories can be made ahead of time (a pool of ready
 * cgroups): cg_task_precreate makes the directories a task with limits like `like` needs
 * (NULL: none) and applies nothing; cg_task_apply later validates and applies a task's
 * limits, making any directory those need beyond what is there. A cgroup whose apply failed
 * is removed with cg_task_destroy.
 */
int cg_task_precreate(struct cg_root *root, const char *name, const struct cg_limits *like,
		      struct cg_task **ret);
int cg_task_apply(struct cg_task *t, const struct cg_limits *limits);
/*
 * cg_task_precreate one hierarchy at a time, so that a caller's event loop is never held up
 * for more than one mkdir (about 50 us here, a whole task's several times that):
 * cg_task_precreate_begin makes nothing yet; each cg_task_precreate_step makes the next
 * directory and returns 1 while more are to come, 0 once the cgroup is complete (as
 * cg_task_precreate would have left it), < 0 on failure (the caller then destroys it).
 */
int cg_task_precreate_begin(struct cg_root *root, const char *name, const struct cg_limits *like,
			    struct cg_task **ret);
int cg_task_precreate_step(struct cg_task *t);
/* Whether t has no v1 directory that a task with these limits does not need (joining one
 * costs the child a synchronize_rcu()). */
bool cg_task_fits(const struct cg_task *t, const struct cg_limits *limits);
/* Open an existing task cgroup (re-adoption after an agent restart). */
int cg_task_open(struct cg_root *root, const char *name, struct cg_task **ret);
/* Names of existing task cgroups under the subtree (for cleanup of leftovers). */
int cg_root_list_tasks(struct cg_root *root, char ***ret_names, size_t *ret_n);

/*
 * O_DIRECTORY fd for clone3(CLONE_INTO_CGROUP): v2 the task's cgroup, v1 hybrid its directory
 * in the unified hierarchy (the v1 ones are then joined with cg_task_join_self(t, true)), -1
 * on v1 without a unified mount. Owned by the task.
 */
int cg_task_clone_fd(const struct cg_task *t);
/* The fds cg_task_join_self uses (at most max into fds): what a process about to clone the
 * child must keep open. unified (may be NULL): whether each is the unified hierarchy's. */
size_t cg_task_join_fds(const struct cg_task *t, int *fds, bool *unified, size_t max);
/* True when cloning into cg_task_clone_fd() puts the child in all the task's cgroups (v2). */
bool cg_task_clone_joins_all(const struct cg_task *t);
/* fd of the task's directory in the unified hierarchy (v2, or hybrid), -1 if none. Owned. */
int cg_task_unified_fd(const struct cg_task *t);
/* cgroup id (inode of the unified directory), 0 if none. */
uint64_t cg_task_unified_id(const struct cg_task *t);
/*
 * Child side, between fork and exec: move the calling (single-threaded) process into every
 * hierarchy of the task using pre-opened fds, except the unified one when unified_done (it
 * was cloned into it). Async-signal-safe (write(2) only). Returns 0 or -errno.
 */
int cg_task_join_self(const struct cg_task *t, bool unified_done);
/* The same from the fds alone (cg_task_join_fds' output, e.g. passed to another process). */
int cg_join_fds(const int *fds, const bool *unified, size_t n, bool unified_done);
/* Parent side: move pid into the task's cgroups. */
int cg_task_attach(const struct cg_task *t, pid_t pid);

/*
 * Close the task's descriptors (directories, cgroup.procs, tasks) until a call needs them: a
 * running task then costs the caller none. The calls made periodically (cg_task_stats,
 * cg_task_memory_current, cg_task_pids, cg_task_is_empty, cg_task_kill) reopen the
 * directories by name and close them again; the ones that return an fd (cg_task_clone_fd,
 * cg_task_join_fds, cg_task_unified_fd, cg_task_v1_dir_fd) and cg_task_attach,
 * cg_task_apply and cg_task_destroy leave it unparked (park it again after use).
 */
void cg_task_park(struct cg_task *t);
int cg_task_stats(const struct cg_task *t, struct cg_stats *ret);
/* The memory the cgroup uses now (v2 memory.current, v1 memory.usage_in_bytes): one file,
 * for callers that sample only this. */
int cg_task_memory_current(const struct cg_task *t, uint64_t *ret);
/* PIDs currently in the task's cgroup (threads' tgids, unique). *ret malloc'd. */
int cg_task_pids(const struct cg_task *t, pid_t **ret, size_t *ret_n);
/* 1 if no process is left, 0 if some are, <0 on error. */
int cg_task_is_empty(const struct cg_task *t);
/*
 * Signal every process in the cgroup, with no window for escapes: v2 SIGKILL uses cgroup.kill;
 * otherwise (v1, or other signals) the freezer is used (freeze, signal all, thaw).
 */
int cg_task_kill(const struct cg_task *t, int sig);
/* Remove the task's directories in every hierarchy (must be empty: -EBUSY otherwise). */
int cg_task_destroy(struct cg_task *t);
/* The same one directory per call (the main one last): 1 while directories remain, 0 once
 * none does, < 0 if this one could not be removed (it stays; cg_task_destroy then retries
 * all that are left). */
int cg_task_destroy_step(struct cg_task *t);
void cg_task_free(struct cg_task *t);
const char *cg_task_name(const struct cg_task *t);
/* Main path (v2 dir, or v1 memory dir) for display. */
const char *cg_task_path(const struct cg_task *t);
/*
 * OOM kills the kernel made in the task's cgroup so far ("oom_kill" of memory.oom_control on
 * v1, memory.events on v2; 0 on kernels that do not count them). Parked or not.
 */
int cg_task_oom_kills(const struct cg_task *t, uint64_t *ret);
/*
 * v1: an eventfd (nonblocking, close-on-exec, owned by the caller) that the kernel signals
 * each time the task's memory cgroup runs out of memory (cgroup.event_control on
 * memory.oom_control), just before its OOM killer picks a victim, and when the cgroup is
 * removed. -EOPNOTSUPP on v2 (watch memory.events under cg_task_path instead) or without
 * the memory controller.
 */
int cg_task_oom_eventfd(const struct cg_task *t);
/*
 * v1 only: fd of the task's directory in the hierarchy of a v1 controller ("devices",
 * "memory", "cpu", "cpuacct", "pids", "blkio", "freezer"); -1 on v2, for an unknown
 * controller or one not mounted. Owned by the task.
 */
int cg_task_v1_dir_fd(const struct cg_task *t, const char *controller);
/* Whether swap can be limited (v1: memory.memsw.* present; v2: memory.swap.max present).
 * Without it cg_limits.swap_max is not enforced (memory_max still is). */
bool cg_root_swap_accounting(const struct cg_root *root);
