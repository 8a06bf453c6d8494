/* SPDX-License-Identifier: MIT */
/*
 * The launch sequence. Everything that can fail is prepared by the caller before fork (cgroup
 * created and opened, seccomp filter compiled, argv/env/exec candidates built, ids resolved).
 *
 * Process layout: the agent forks a small supervisor ("shim") per task; the shim leaves the
 * agent's session, clones the task child (CLONE_INTO_CGROUP on v2; CLONE_VM|CLONE_VFORK on a
 * stack of its own where it can, so the child gets no copy of the agent's memory) and waits
 * for it. The shim
 * writes the task's wait status to an exit file (atomically) and to a pipe, so the status
 * survives an agent restart: a restarted agent re-adopts the shim by pid + start time and reads
 * the exit file when the shim is gone.
 *
 * The child only applies: join cgroup (v1), wait for the agent's go (so metering starts before
 * the first instruction of the job), setsid, signals reset, rlimits, capability bounding set,
 * setgroups/setgid/setuid, chdir, stdio, no_new_privs, capabilities cleared, fds closed on exec,
 * seccomp last, execve. A failing step is reported on a close-on-exec pipe as (step, errno).
 *
 * Audit of denied calls (plan->syscalls_file with a filter compiled with SBX_COMPILE_NOTIFY):
 * the child installs the notifying program and hands the listener to the shim over a socket
 * pair before execve (the task never holds it). The shim answers every notification as the
 * profile decides and appends one line per call to syscalls_file (at most syscalls_max, the rest
 * counted), then an end line once no process of the task can make another call. The shim is
 * what answers, so denied calls are answered while the agent restarts.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

struct cg_task;
struct sbx_filter;

enum launch_step {
	LAUNCH_STEP_NONE,
	LAUNCH_STEP_CLONE,
	LAUNCH_STEP_CGROUP,
	LAUNCH_STEP_SYNC,
	LAUNCH_STEP_NAMESPACES, /* unshare of the task's mount/IPC/UTS namespaces */
	LAUNCH_STEP_MOUNT,	/* one of plan->mounts (index in the error code, see below) */
	LAUNCH_STEP_SETSID,
	LAUNCH_STEP_SIGNALS,
	LAUNCH_STEP_RLIMIT,
	LAUNCH_STEP_CAPBSET,
	LAUNCH_STEP_SETGROUPS,
	LAUNCH_STEP_SETGID,
	LAUNCH_STEP_SETUID,
	LAUNCH_STEP_CHDIR,
	LAUNCH_STEP_STDIN,
	LAUNCH_STEP_STDOUT,
	LAUNCH_STEP_STDERR,
	LAUNCH_STEP_NO_NEW_PRIVS,
	LAUNCH_STEP_CAPS,
	LAUNCH_STEP_CLOSE_FDS,
	LAUNCH_STEP_SECCOMP,
	LAUNCH_STEP_EXEC,
	LAUNCH_STEP_LANDLOCK, /* the Landlock ruleset of the plan's protected paths */
	_LAUNCH_STEP_MAX,
};

/*
 * The task's own mount namespace (docs/sandbox.md). The agent plans every mount before fork;
 * the child unshares, makes "/" a slave (nothing propagates back to the node) and applies the
 * list in order, as root, before it drops privileges.
 */
enum launch_mount_op {
	LAUNCH_MOUNT_TMPFS,	/* a fresh tmpfs at path, options data ("size=...,mode=1777") */
	LAUNCH_MOUNT_READ_ONLY, /* path bound onto itself with its submounts, all read-only */
	LAUNCH_MOUNT_HIDE,	/* directory: an empty read-only tmpfs, mode 000; else /dev/null */
	LAUNCH_MOUNT_BIND,	/* src bound at path (recursive); data "ro": read-only */
	LAUNCH_MOUNT_PROC,	/* a procfs of the task's PID namespace at path */
	LAUNCH_MOUNT_NONE,	/* no mount: only a Landlock target (a bind source below one) */
	LAUNCH_MOUNT_DEV,	/* a private /dev at path: a few of the node's nodes bound, devpts;
				 * data: more names under /dev, space-separated (bound if present) */
	_LAUNCH_MOUNT_MAX,
};

/*
 * Landlock (LAUNCH_NS_LANDLOCK, docs/sandbox.md): a mount's path is also protected by inode,
 * whatever path reaches it (another bind, an undone mount). The child notes the inodes of the
 * protected paths and of their ancestors before it mounts anything, then, in the task's view,
 * grants every other entry of those ancestors full rights, the read-only ones read and
 * execute, the denied ones nothing, and the ancestors themselves only listing.
 */
enum launch_landlock {
	LAUNCH_LANDLOCK_NONE,
	LAUNCH_LANDLOCK_READ_ONLY,
	LAUNCH_LANDLOCK_DENY,
};

#define LAUNCH_MOUNTS_MAX 64
struct launch_mount {
	enum launch_mount_op op;
	const char *path;
	const char *src;  /* LAUNCH_MOUNT_BIND */
	const char *data; /* LAUNCH_MOUNT_TMPFS options; LAUNCH_MOUNT_BIND "ro" or NULL */
	bool optional;	  /* a path that does not exist is skipped (protect_system's /boot) */
	uint8_t landlock; /* enum launch_landlock, with LAUNCH_NS_LANDLOCK */
};

#define LAUNCH_NS_MOUNT	   (1U << 0)
#define LAUNCH_NS_IPC	   (1U << 1)
#define LAUNCH_NS_UTS	   (1U << 2)
#define LAUNCH_NS_PID	   (1U << 3) /* the child is cloned into a new PID namespace (its PID 1) */
#define LAUNCH_NS_LANDLOCK (1U << 4) /* Landlock rules for the mounts' landlock targets */
#define LAUNCH_NS_ALL                                                                              \
	(LAUNCH_NS_MOUNT | LAUNCH_NS_IPC | LAUNCH_NS_UTS | LAUNCH_NS_PID | LAUNCH_NS_LANDLOCK)

/* A mount step's error code: the step, and the mount's index + 1 in the upper 16 bits. */
#define LAUNCH_STEP_CODE(step, idx) ((enum launch_step)((int)(step) | (((idx) + 1) << 16)))
#define LAUNCH_STEP_BASE(code)	    ((enum launch_step)((int)(code)&0xffff))
#define LAUNCH_STEP_INDEX(code)	    ((((int)(code) >> 16) & 0xffff) - 1)

#define LAUNCH_RLIMITS_MAX 8
#define LAUNCH_JOIN_MAX	   16
struct launch_rlimit {
	int resource;
	struct rlimit rl;
};

struct launch_plan {
	char *const *argv; /* argv[0] as given by the user (for messages) */
	char *const *env;
	char *const *exec_paths; /* candidate paths to execve, in order (PATH resolved) */
	const char *workdir;	 /* chdir target, NULL = "/" */
	uid_t uid;
	gid_t gid;
	const gid_t *groups;
	size_t n_groups;
	bool switch_user;	 /* setgroups/setgid/setuid (the agent runs as root) */
	const char *stdout_path; /* NULL: /dev/null; opened as the task user, O_APPEND */
	const char *stderr_path;
	const char *stdin_path; /* NULL: /dev/null; opened as the task user, read-only */
	/* Descriptors passed by the client (corralctl run --wait): bit i of stdio_fds set, then
	 * stdio_fd[i] becomes the task's fd i instead of the path (owned by the caller; the
	 * agent checked them, agent/control.c). stdio_tty: fd 0 is a terminal that becomes the
	 * task's controlling terminal (--pty). */
	unsigned int stdio_fds;
	int stdio_fd[3];
	bool stdio_tty;
	/* The task's cgroup, set by launch_plan_set_cgroup (none: n_join 0, clone_cgroup_fd -1):
	 * the files the child writes "0" to (v1 "tasks", the unified "cgroup.procs"), and
	 * whether CLONE_INTO_CGROUP into clone_cgroup_fd alone places it everywhere (v2). */
	int clone_cgroup_fd; /* cg_task_clone_fd(): CLONE_INTO_CGROUP, -1: fork+join */
	size_t n_join;
	int join_fd[LAUNCH_JOIN_MAX];
	bool join_unified[LAUNCH_JOIN_MAX];
	bool clone_joins_all;
	const struct sbx_filter *filter; /* NULL: unconfined */
	size_t n_rlimits;
	struct launch_rlimit rlimits[LAUNCH_RLIMITS_MAX];
	const char *exit_file;	   /* where the shim records the wait status (atomic rename) */
	const char *syscalls_file; /* audit of denied calls (needs a notifying filter); NULL: off */
	uint64_t syscalls_max;	   /* call lines written at most; beyond, only counted */
	unsigned int ns_flags;	   /* LAUNCH_NS_*: namespaces the child unshares */
	size_t n_mounts;	   /* applied in order in the mount namespace */
	const struct launch_mount *mounts;
};

struct launch_handle {
	pid_t shim_pid;
	int shim_pidfd; /* owned; -1 if pidfd_open is unsupported */
	pid_t task_pid;
	int status_fd; /* owned; read end: the shim writes "X <status> ..." when the task ends */
	int err_fd;    /* owned until the exec result is read */
	int sync_fd;   /* owned until launch_go */
	char pbuf[32]; /* the pid line, as far as read */
	size_t plen;
};

/* What the shim recorded when the task's main process ended. */
struct launch_exit {
	int wait_status;	     /* as from wait4 */
	uint64_t utime_us, stime_us; /* rusage of the main process and its reaped children */
	uint64_t maxrss_kb;
	uint64_t end_realtime_ns;
};

const char *launch_step_to_string(enum launch_step s);
/* The Landlock ABI the kernel offers (> 0), else -errno (ENOSYS, EOPNOTSUPP: not enabled). */
int launch_landlock_abi(void);
/* Report a failed step on a launch's error pipe (err 0: EIO); async-signal-safe. */
void launch_report_error(int err_fd, enum launch_step step, int err);
/* Fill the plan's cgroup fields from the task's cgroup (its fds stay owned by cg). */
void launch_plan_set_cgroup(struct launch_plan *p, const struct cg_task *cg);

/*
 * Non-blocking launch, for an event loop: launch_spawn forks the shim and returns at once
 * (status_fd and err_fd non-blocking). The shim clones the task child, which stops before
 * its first own instruction of the job. Once status_fd is readable, launch_poll_pid reads the
 * child's pid: 1 known (h->task_pid), 0 not yet, -errno the shim failed (clone error). Then
 * launch_go lets the child go, and once err_fd is readable launch_poll_exec gives 1 (exec'd:
 * the job runs), 0 not yet, or -errno with *ret_step for a child-side failure (the child has
 * exited then).
 */
int launch_spawn(const struct launch_plan *plan, struct launch_handle *ret);

/*
 * The same launch with the shim forked by a spawner (isolation/spawner.c): a small resident
 * process, so that neither the agent's fork nor the shim's teardown pays for the agent's
 * address space. The handle's shim_pid/shim_pidfd are set by launch_poll_pid, from the
 * shim's "S <pid>" line that precedes the child's.
 */
struct launch_spawner;
/* Start the spawner program at path (its fd 3: its end of a SOCK_SEQPACKET pair). */
int launch_spawner_start(const char *path, struct launch_spawner **ret);
/* Close the socket (the spawner exits; running shims stay) and reap it. */
void launch_spawner_free(struct launch_spawner *s);
pid_t launch_spawner_pid(const struct launch_spawner *s);
/* -EPIPE/-ECONNRESET: the spawner is gone; -EMSGSIZE: the plan does not fit a message. */
int launch_spawn_via(struct launch_spawner *s, const struct launch_plan *plan,
		     struct launch_handle *ret);
/* The spawner's loop (corral-spawn): returns 0 at EOF on sock, or -errno. */
int launch_spawner_serve(int sock);

/* Shared by launch_spawn and the spawner: the pipes (and syscalls file) of one launch. */
struct launch_shim_fds {
	int status_r, status_w, err_r, err_w, sync_r, sync_w, sc_fd;
};
#define LAUNCH_SHIM_FDS_INIT                                                                       \
	{                                                                                          \
		-1, -1, -1, -1, -1, -1, -1                                                         \
	}
int launch_shim_fds_open(const struct launch_plan *plan, struct launch_shim_fds *f);
void launch_shim_fds_close(struct launch_shim_fds *f);
int launch_handle_from_fds(struct launch_shim_fds *f, pid_t shim, struct launch_handle *ret);
/*
 * The spawner's message, exposed for tests and the fuzzer. pack: the bytes (malloc'd) and the
 * fds to pass, in order (at most LAUNCH_WIRE_FDS_MAX). unpack: -EPROTO for anything that does
 * not hold (never reads past len); the plan points into buf, which must outlive it.
 */
#define LAUNCH_WIRE_FDS_MAX (8 + LAUNCH_JOIN_MAX)
struct launch_wire;
int launch_wire_pack(const struct launch_plan *p, const struct launch_shim_fds *f, char **buf,
		     size_t *len, int *fds, size_t *nfds);
int launch_wire_unpack(const void *buf, size_t len, const int *fds, size_t nfds,
		       struct launch_wire **ret);
const struct launch_plan *launch_wire_plan(const struct launch_wire *w);
const struct launch_shim_fds *launch_wire_fds(const struct launch_wire *w);
void launch_wire_free(struct launch_wire *w);
/* In a shim forked before its launch is known: what does not depend on the plan (every
 * signal blocked and its disposition SIG_DFL, the capability bounding set empty, a session of
 * its own, the name), so that the shim and the child skip it later. */
void launch_shim_prepare(void);
/* In the spawner, once its own dispositions are set: note which signals are not SIG_DFL, so
 * that its shims and children reset only those (instead of every one of the 62). */
void launch_signals_survey(void);
/* In a spawner's child: become the shim (uses status_w, err_w, sync_r, sc_fd). */
__attribute__((noreturn)) void launch_shim_main(const struct launch_plan *p,
						const struct launch_shim_fds *fds);
int launch_poll_pid(struct launch_handle *h);
int launch_go(struct launch_handle *h);
int launch_poll_exec(struct launch_handle *h, enum launch_step *ret_step);
/* Abort a launch before its exec (kills the child; the shim reports it). */
void launch_abort(struct launch_handle *h);
void launch_handle_close(struct launch_handle *h);

/*
 * Read the shim's status line from status_fd (non-blocking). Returns 1 with *ret filled when the
 * exit line arrived, 0 if nothing (yet), -EPIPE on EOF without an exit line.
 */
int launch_read_status(int status_fd, struct launch_exit *ret);
/*
 * A line of the syscalls file:
 *   "S <seq> <time_ns> <pid> <tid> <arch hex> <nr> <action hex> <arg0 hex> ... <arg5 hex>"
 *   "E <seq> <total> <recorded> <listener 0|1>"
 * seq counts the lines from 1 (the end line takes the next number). pid is the calling
 * process (TGID), tid its thread; action the profile's SECCOMP_RET_* word. total counts every
 * notified call, recorded the S lines; listener 0: the listener never reached the shim (the
 * task ran unaudited, or failed before exec).
 */
enum launch_syscall_kind {
	LAUNCH_SYSCALL_CALL,
	LAUNCH_SYSCALL_END,
};

struct launch_syscall_line {
	enum launch_syscall_kind kind;
	uint64_t seq;
	/* S */
	uint64_t time_ns;
	int32_t pid, tid;
	uint32_t arch;
	int32_t nr;
	uint32_t action;
	uint64_t args[6];
	/* E */
	uint64_t total, recorded;
	bool listener;
};

/* Parse one line (without its newline). -EINVAL when malformed. */
int launch_parse_syscall_line(const char *line, struct launch_syscall_line *ret);

/* Parse the exit file the shim wrote. -ENOENT if absent. */
int launch_read_exit_file(const char *path, struct launch_exit *ret);
/* Format "exec ./job: No such file or directory" style messages. */
void launch_format_error(const struct launch_plan *plan, enum launch_step step, int err, char *buf,
			 size_t len);
