/* SPDX-License-Identifier: MIT */
/*
 * Per-task metering (user-space side). Loads the metering BPF programs (tp_btf, falling back to
 * raw_tp, chosen by a runtime probe), tracks tasks by TGID (children inherited on fork) and,
 * where a unified-hierarchy cgroup exists, network bytes by cgroup_skb on the task's cgroup.
 * When BPF cannot be loaded, meter_open fails and the agent meters from cgroup files and
 * taskstats (see taskstats.h) instead.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct meter_opts {
	uint32_t max_tasks; /* tracked tasks (map sizes derive from it), default 1024 */
	uint32_t max_pids;  /* tracked processes, default max_tasks * 64 */
	/* Accounting at exit: entries of the map of exited threads, default max(8192,
	 * 2 * max_tasks) (tests make it small to check that an overflow is reported). */
	uint32_t max_dying;
	/* Tests: no drain of that map before meter_settle (neither by the exit program nor by
	 * meter_poll), to check that an overflow is reported. */
	bool no_drain;
	bool force_raw_tp; /* skip the tp_btf attempt (tests) */
	/* Count IO bytes with a sys_exit program instead of reading task->ioac at each context
	 * switch and exit. Same figures; costs every syscall of the node (see docs). */
	bool io_from_syscalls;
	/*
	 * Account CPU and IO at every sched_switch (live reads exact to the last switch; costs
	 * every context switch of the node) instead of at each thread's exit and last switch-out
	 * (the default where the kernel allows it: tp_btf with task kfuncs, Linux 6.2+).
	 */
	bool cpu_at_switch;
	bool no_oom; /* no OOM victim program (tests: the cgroup notifications alone) */
};

struct meter_usage {
	uint64_t cpu_ns;      /* on-CPU time of all processes of the task, from sched_switch */
	uint64_t cpu_user_ns; /* user/system split (see docs/metering.md) */
	uint64_t cpu_system_ns;
	uint64_t rss_peak_bytes; /* high-water of the sum of RSS (anon+file+shmem) */
	uint64_t rss_current_bytes;
	double memory_byte_seconds; /* integral of RSS over time */
	uint64_t io_read_bytes;	    /* bytes returned by read-family syscalls (rchar) */
	uint64_t io_write_bytes;    /* bytes written by write-family syscalls (wchar) */
	/* Storage bytes the task caused (task->ioac read_bytes / write_bytes minus cancelled;
	 * writes are counted when pages are dirtied). 0 with io_from_syscalls. */
	uint64_t blk_read_bytes;
	uint64_t blk_write_bytes;
	bool blk_measured; /* false with io_from_syscalls: blk_* are then not measured */
	uint64_t net_rx_bytes, net_tx_bytes; /* cgroup_skb, 0 without a unified cgroup */
	uint64_t net_rx_packets, net_tx_packets;
	/* when the RSS sum last changed (CLOCK_MONOTONIC; 0: never): with rss_current_bytes, the
	 * memory integral grows by exactly rss x time while it stays */
	uint64_t rss_changed_ns;
	uint32_t procs_alive; /* tracked processes still alive */
	uint64_t forks;
	bool net_metered; /* cgroup_skb attached for this task */
	/* Raw task->utime/stime deltas seen at switch-out (tick-sampled); their ratio splits
	 * cpu_ns into cpu_user_ns/cpu_system_ns. cpu_split_known is false when no tick was seen
	 * yet (then cpu_user_ns = cpu_ns, cpu_system_ns = 0: use the cgroup's ratio instead). */
	uint64_t cpu_ticks_user_ns, cpu_ticks_system_ns;
	bool cpu_split_known;
	/* block_rq_issue in a tracked task's context (direct/sync IO; writeback goes to the
	 * flusher thread, so the cgroup's blkio counters are the complete figure). */
	uint64_t blk_issued_read_bytes, blk_issued_write_bytes;
	/*
	 * Threads whose CPU and IO are not all in the figures above: no entry could be made for
	 * them (a full BPF map) or, with accounting at exit, what they ran after their exit
	 * tracepoint was dropped (the map of exited threads full). Non-zero: cpu_ns is short and
	 * the task's cgroup counter is the figure to use.
	 */
	uint64_t threads_lost;
	/* Accounting at exit: threads whose final figures are not in yet (running, or exited and
	 * not yet off their CPU). Once the task's processes are gone, non-zero means short. */
	uint64_t threads_unsettled;
};

/* Events from the ring buffer, delivered by meter_poll. */
enum meter_event_type {
	METER_EV_EXIT,	  /* last tracked process of a task exited */
	METER_EV_SETTLED, /* accounting at exit: the task's last thread got its final figures */
	/* the kernel's OOM killer (node-wide or a memory cgroup's) chose a process of the task
	 * as its victim and sent it SIGKILL; its memory cgroup's kill count has moved */
	METER_EV_OOM_VICTIM,
	_METER_EV_MAX,
};
struct meter_event {
	enum meter_event_type type;
	uint64_t task_key;
	uint32_t pid;	   /* the process (TGID) */
	int32_t exit_code; /* METER_EV_EXIT: wait status of the process */
	uint32_t tid;	   /* METER_EV_OOM_VICTIM: the thread the kernel named */
};
typedef void (*meter_event_fn)(const struct meter_event *ev, void *userdata);

struct meter;

int meter_open(const struct meter_opts *opts, struct meter **ret);
void meter_free(struct meter *m);
/* "tp_btf" or "raw_tp" */
/*
 * Attach the network programs once to the parent cgroup of every task (the agent's subtree in
 * the unified hierarchy; cgroup links are multi-attach, so programs of others stay). The
 * programs count by cgroup id, so tasks below need no attach of their own: meter_track then
 * only registers the task's cgroup id, which saves two program attaches per launch.
 */
int meter_attach_cgroup_root(struct meter *m, int root_fd);
const char *meter_attach_mode(const struct meter *m);
/* OOM victims reported from BPF (METER_EV_OOM_VICTIM, delivered at once: the fd is woken):
 * "tp_btf" or "raw_tp" (oom:mark_victim), NULL where the kernel lacks the tracepoint. */
enum meter_oom { METER_OOM_NONE, METER_OOM_TP_BTF, METER_OOM_RAW_TP };
const char *meter_oom_mode(const struct meter *m);
/* "exit" (final figures at each thread's exit and last switch-out) or "switch". */
const char *meter_cpu_accounting(const struct meter *m);
/* How the figures of live threads are folded for a read with accounting at exit: "walk"
 * (meter_walk, the kernel's task iterator kfuncs), "iter" (the iter/task program), or NULL
 * (accounting at every switch: nothing to fold); and whether changes are marked (meter_dirty). */
const char *meter_live_mode(const struct meter *m);
bool meter_marks(const struct meter *m);
/*
 * Ring buffer epoll fd; call meter_poll when readable, and periodically: METER_EV_EXIT events
 * are queued without waking the fd (a wakeup costs every tracked exit an interrupt), so they
 * are read at the next wakeup or periodic poll. METER_EV_SETTLED always wakes it. With
 * accounting at exit, meter_poll also drains the map of exited threads (the exit program wakes
 * the fd when it is a quarter full): call it at least every second or so.
 */
int meter_fd(const struct meter *m);
/*
 * The task membership map (TGID -> struct member, bpf/member_types.h) that the meter's fork
 * and exit programs keep: the audit trail shares it (audit_opts.share_members).
 */
int meter_members_fd(const struct meter *m);
int meter_poll(struct meter *m, meter_event_fn fn, void *userdata);
/*
 * Start metering a task whose first process is tgid (call between fork and the child's exec:
 * the child waits for the parent, with one thread). Its CPU and IO count from its fork (the
 * kernel starts them at zero there): start it in its cgroup (CLONE_INTO_CGROUP) for the
 * figures to be the cgroup's. cgroup_fd: the task's unified-hierarchy directory or -1.
 */
int meter_track(struct meter *m, uint64_t task_key, pid_t tgid, int cgroup_fd);
/* Re-adopt after an agent restart: track every pid given (usage restarts from zero). */
int meter_track_more(struct meter *m, uint64_t task_key, pid_t tgid);
int meter_read(struct meter *m, uint64_t task_key, struct meter_usage *ret);
/*
 * What changed: the programs mark a task (one word per slot, mapped) after they change any of
 * its counters, the live read's fold included. meter_dirty_take takes the task's mark (true:
 * it was set) before a meter_read: if meter_dirty says false later, the counters are those of
 * that read. True where the meter keeps no marks (every check reads then) or does not track
 * the task. See docs/metering.md, "What changed".
 */
bool meter_dirty_take(struct meter *m, uint64_t task_key);
bool meter_dirty(struct meter *m, uint64_t task_key);
/*
 * Every tracked task with its mark set, fn(ctx, task_key) each, in one pass over the marks
 * (the marks stay). -EOPNOTSUPP where the meter keeps no marks.
 */
int meter_marked(struct meter *m, void (*fn)(void *ctx, uint64_t task_key), void *ctx);
/*
 * Between meter_batch(m, true) and meter_batch(m, false), the meter_read calls of a batch (say
 * the samples of one tick) share one walk of the node's threads (cpu_at_exit mode: the live
 * read folds running threads' totals up to now), made at the first read of the batch, instead
 * of one walk every 10 ms: the walk costs as much as the node has threads.
 */
void meter_batch(struct meter *m, bool on);
/*
 * Accounting at exit, live reads: fn gives (0, or -errno where it cannot) a CPU time in
 * nanoseconds that grows whenever a tracked thread's run time grows, say the cpuacct.usage of
 * the cgroup above every task's cgroup. A live read reads it before its walk of the node's
 * threads and skips the walk when it has not moved since the last walk's read and no entry
 * waits for its base: no tracked thread ran since that walk, which then would fold nothing.
 * NULL (the default): every live read walks. A tracked thread whose run time it does not
 * count (a process moved out of its task's cgroup) is folded at the next walk that runs
 * (meter_walk_next bounds that wait).
 */
void meter_set_cpu_source(struct meter *m, int (*fn)(void *ctx, uint64_t *ret_ns), void *ctx);
/* The next live read walks whatever the CPU source says (NULL: nothing). */
void meter_walk_next(struct meter *m);
/* Live reads that walked the node's threads, and those that skipped the walk (above). */
uint64_t meter_walks(const struct meter *m);
uint64_t meter_walks_skipped(const struct meter *m);
/*
 * Within a batch (meter_batch(m, true)), when most tracked tasks will be read: the live read,
 * then the maps read whole with one batched lookup per map and 1,024 entries
 * (bpf_map_lookup_batch), so that each meter_read of the batch makes no system call. The
 * figures are those of this moment for every task alike. -errno (the reads of the batch then
 * go to the maps one by one, as without it).
 */
int meter_prefetch(struct meter *m);
/*
 * Once the task's processes are gone (its cgroup is empty): accounting at exit folds the final
 * figures of its threads that have switched out for the last time; accounting at every switch
 * checks that each exited thread's last switch-out (which folds its final slice: often the
 * process's whole teardown) has been seen. Returns 1 when every thread's final figures are in,
 * 0 when some thread is not off its CPU yet (call again later), or -errno.
 */
int meter_settle(struct meter *m, uint64_t task_key);
/* Stop metering, free map entries. */
int meter_forget(struct meter *m, uint64_t task_key);
/* Events lost because the ring buffer was full (counted in BPF). */
uint64_t meter_ringbuf_drops(const struct meter *m);
uint32_t meter_tasks_tracked(const struct meter *m);
/* Processes/threads/mms not tracked because a BPF map was full (counted in BPF). */
uint64_t meter_map_full(const struct meter *m);
/* Accounting at exit: threads whose figures after their exit tracepoint were lost because the
 * map of exited threads was full (their figures at exit are their final ones; each counts in
 * its task's meter_usage.threads_lost). */
uint64_t meter_tail_lost(const struct meter *m);
/* Accounting at exit: drains of the map of exited threads run by meter_poll. */
uint64_t meter_drains(const struct meter *m);
/* Whole-map sweeps meter_forget had to do (a task's end normally needs none). */
uint64_t meter_sweeps(const struct meter *m);
/*
 * Run count and total run time of the sched_switch program, from the kernel's BPF statistics
 * (counted only while sysctl kernel.bpf_stats_enabled is 1; benchmarks).
 */
int meter_switch_stats(const struct meter *m, uint64_t *runs, uint64_t *run_ns);
